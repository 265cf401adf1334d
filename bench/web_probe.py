#!/usr/bin/env python3
"""One fp-web on AF_XDP under wrk, with the stack's counters: a probe for the TCP stack's
behaviour under a server's own bursts (issue 20), not a comparison (bench/web_bench.py is).

On the standard topology (tools/netns.py, tag "probe"), fp-web serves one file of --size
random bytes from the server namespace on CPU 0, over AF_XDP; wrk (one thread, --conns
connections, --duration seconds) asks for it from the client namespace on CPU 1. Printed:
wrk's rate and latency percentiles, the client's D-SACKs sent (nstat: duplicates it got),
the kernel's softnet drops, and every nonzero counter of the stack (fp-stats --totals):
retransmissions, timeouts and how many were spurious, the sent-data budget's refusals,
precomputed-checksum bytes. Extra arguments after -- go to fp-web (for example
-- --umem-frames 16384 or -- --rto-min-us 50000).

    sudo .venv/bin/python bench/web_probe.py --size 65536 --duration 3
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402


def softnet_drops():
    return [int(line.split()[1], 16) for line in open("/proc/net/softnet_stat")]


def nonzero(o, pre=""):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from nonzero(v, f"{pre}.{k}" if pre else k)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from nonzero(v, f"{pre}{i}")
    elif isinstance(o, (int, float)) and o and "hist" not in pre:
        yield pre, o


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--size", type=int, default=65536, help="file bytes (65536)")
    ap.add_argument("--conns", type=int, default=64, help="wrk -c (64)")
    ap.add_argument("--duration", type=int, default=3, help="seconds (3)")
    ap.add_argument("fpweb_args", nargs="*", help="after --: more fp-web options")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("web_probe: needs root (network namespaces, AF_XDP): run it with sudo")
    build = pathlib.Path(a.build)
    with tempfile.TemporaryDirectory(prefix="fp-web-probe-") as www, Topo(tag="probe") as t:
        (pathlib.Path(www) / "f.bin").write_bytes(os.urandom(a.size))
        stats = f"probe{os.getpid()}"
        p = subprocess.Popen(t.cmd(t.srv_ns, [build / "apps" / "web" / "fp-web", "--root", www,
                                              "--port", "80", "--if", t.srv_if, "--ip",
                                              f"{t.fp_srv_ip}/24", "--stats", stats]
                                   + a.fpweb_args, 0),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            url = f"http://{t.fp_srv_ip}/f.bin"
            for _ in range(100):
                if subprocess.run(t.cmd(t.cli_ns, ["curl", "-s", "-f", "-o", "/dev/null", "-m",
                                                   "1", url]), capture_output=True).returncode == 0:
                    break
                if p.poll() is not None:
                    sys.exit(f"web_probe: fp-web exited: {p.stdout.read()[-500:]}")
                time.sleep(0.2)
            t.sh(t.cli_ns, "nstat", "-n")                     # reset nstat's history
            d0 = softnet_drops()
            r = subprocess.run(t.cmd(t.cli_ns, ["wrk", "-t", "1", "-c", str(a.conns), "-d",
                                                f"{a.duration}s", "--latency", url], 1),
                               capture_output=True, text=True)
            print(r.stdout.strip())
            print("softnet drops during the run:", [y - x for x, y in zip(d0, softnet_drops())])
            ns = t.sh(t.cli_ns, "nstat", "TcpExtTCPDSACKOldSent", "TcpExtTCPDSACKOfoSent",
                      check=False).stdout
            print("client:", " ".join(line.split()[0] + "=" + line.split()[1]
                                      for line in ns.splitlines()[1:]) or "no D-SACKs sent")
            tot = json.loads(subprocess.run([build / "tools" / "fp-stats", "--name", stats,
                                             "--totals"], capture_output=True, text=True,
                                            check=True).stdout)
            for k, v in nonzero({"workers": tot["workers"]}):
                if ".net." in k or ".drops." in k:
                    print(f"  {k} {v}")
        finally:
            stop_process(p, grace_s=20)


if __name__ == "__main__":
    main()
