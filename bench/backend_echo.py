#!/usr/bin/env python3
"""Echo through each packet backend: the same fp-echo server and client, one core each, over
DPDK's memif (shared memory, no kernel), over AF_XDP on a veth pair (flowplane's own
backend), and over DPDK's af_packet and af_xdp PMDs on the same veth pair (issue 21).

Per backend, connection count, message size (--sizes, default 64 bytes) and round:
messages/s (closed loop, one in flight per connection) and the round-trip p50/p99 from
fp-echo client's own histogram, plus the server's CPU. A DPDK backend with "-copy" runs
with --dpdk-copy yes on both ends (frames copied to and from DPDK's own mbufs) beside the
zero-copy default: the pair's per-round ratio is reported. One connection gives the unloaded round trip, many the server
core's saturation. Backends are interleaved (memif, xdp, dpdk-af_packet, then again);
medians with min-max. Root (namespaces); server on CPU 0, client on CPU 1.

    sudo .venv/bin/python bench/backend_echo.py [--rounds 3] [--duration 3] [--conns 16]
                                                [--out DIR]

Writes DIR/backend_echo.json and DIR/backend_echo.md (default results/backend_echo/).
"""
import argparse
import datetime
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import fp_totals, med, parse_builds, ratio_cell, start  # noqa: E402

BACKENDS = ["memif", "xdp", "dpdk-af_packet", "dpdk-af_xdp", "memif-copy",
            "dpdk-af_packet-copy"]
DEFAULT = ["memif", "xdp", "dpdk-af_packet", "dpdk-af_xdp"]


def server_client_args(kind, topo, sock):
    """(server runtime args, client runtime args, server address, namespaces or None)."""
    if kind.endswith("-copy"):
        s, c, addr, ns = server_client_args(kind[:-len("-copy")], topo, sock)
        return s + ["--dpdk-copy", "yes"], c + ["--dpdk-copy", "yes"], addr, ns
    if kind == "memif":
        m = "--vdev=net_memif0,role={},socket=" + sock + ",socket-abstract=no"
        return (["--dpdk", m.format("server"), "--ip", "10.99.0.1/24"],
                ["--dpdk", m.format("client"), "--ip", "10.99.0.2/24"], "10.99.0.1", False)
    if kind == "xdp":
        return (["--if", topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24"],
                ["--if", topo.cli_if, "--ip", f"{topo.fp_cli_ip}/24"], topo.fp_srv_ip, True)
    pmd = "net_af_packet0,iface={}" if kind == "dpdk-af_packet" else \
        "net_af_xdp0,iface={},force_copy=1"
    return (["--dpdk", "--vdev=" + pmd.format(topo.srv_if), "--ip", f"{topo.fp_srv_ip}/24"],
            ["--dpdk", "--vdev=" + pmd.format(topo.cli_if), "--ip", f"{topo.fp_cli_ip}/24"],
            topo.fp_srv_ip, True)


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def one(kind, topo, exe, duration, tmp, conns=16, size=64, native=False):
    sock = os.path.join(tmp, f"{kind}.sock")
    sargs, cargs, addr, in_ns = server_client_args(kind, topo, sock)
    stats = f"be-{os.getpid()}"
    srv_cmd = [exe, "server", *(["--native"] if native else []), "--cores", "0", "--idle", "poll", "--stats", stats, *sargs]
    out = os.path.join(tmp, "r.json")
    cli_cmd = [exe, "client", "--server", addr, "--cores", "1", "--idle", "poll", "--stats",
               "none", "--conns", str(conns), "--size", str(size), "--rounds", "0", "--duration",
               str(duration), "--warmup", "1", "--json", out, *cargs]
    srv = start(topo, topo.srv_ns if in_ns else None, srv_cmd)
    try:
        time.sleep(2)
        if srv.poll() is not None:
            raise SystemExit(f"backend_echo: {kind}: server exited: {srv.stderr.read()[-400:]}")
        c0, w0 = cpu_s(srv.pid), busy(exe, stats)
        cli = start(topo, topo.cli_ns if in_ns else None, cli_cmd)
        _, err = cli.communicate(timeout=duration + 60)
        c1, w1 = cpu_s(srv.pid), busy(exe, stats)
        if cli.returncode != 0:
            raise SystemExit(f"backend_echo: {kind}: client failed: {err[-400:]}")
        r = json.load(open(out))
    finally:
        stop_process(srv)
    return {"backend": kind, "conns": conns, "size": size, "msgs_per_s": r["msgs_per_s"],
            "rtt_p50_us": r["rtt_us"]["p50"], "rtt_p99_us": r["rtt_us"]["p99"],
            "errors": r["errors"], "server_cpu": (c1 - c0) / (duration + 1),
            "busy_cycles_per_msg": (w1[0] - w0[0]) / max(1, w1[1] - w0[1]), "tsc_hz": w1[2]}


def busy(exe, name):
    """The server worker's busy TSC cycles (loop rounds that found work: IX's cycles per
    message at load, over the messages) and conditions (one RECV a message) so far."""
    build = pathlib.Path(exe).resolve().parent.parent.parent
    try:
        rec = fp_totals(build, name, whole=True)
    except RuntimeError as e:
        raise SystemExit(f"backend_echo: fp-stats --name {name}: {e}")
    ws = rec["workers"]
    return sum(w["busy_cycles"] for w in ws), sum(w["conds"] for w in ws), rec["tsc_hz"]


def positive_list(ap, flag, text):
    """@text, a comma list of positive numbers, as ints; else @flag's usage error."""
    try:
        xs = [int(x) for x in text.split(",") if x]
    except ValueError:
        xs = []
    if not xs or min(xs) < 1:
        ap.error(f"{flag} takes a comma list of positive numbers")
    return xs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--conns", default="16", help="connection counts, a comma list "
                    "(default 16; e.g. 1,16,128: the unloaded round trip to saturation)")
    ap.add_argument("--sizes", default="64", help="message sizes in bytes, a comma list "
                    "(default 64)")
    ap.add_argument("--backends", default=",".join(DEFAULT),
                    help=f"comma list of {', '.join(BACKENDS)} (default {','.join(DEFAULT)})")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"),
                    help="the build directory, or LABEL=DIR,LABEL=DIR: builds interleaved in "
                    "each round (before and after a change), the ratio of the last to the "
                    "first reported per round")
    ap.add_argument("--native", action="store_true", help="the server on the native API "
                    "(fp-echo server --native) instead of the event callbacks")
    ap.add_argument("--out", default=str(ROOT / "results" / "backend_echo"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("backend_echo: needs root (namespaces, AF_XDP): run it with sudo")
    kinds = [k for k in a.backends.split(",") if k]
    if any(k not in BACKENDS for k in kinds):
        sys.exit(f"backend_echo: backends are {', '.join(BACKENDS)}")
    builds = parse_builds(a.build)
    conns, sizes = positive_list(ap, "--conns", a.conns), positive_list(ap, "--sizes", a.sizes)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with Topo(f"be{os.getpid() % 10000}") as topo, tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for label, bdir in builds:
                exe = str(pathlib.Path(bdir) / "apps" / "echo" / "fp-echo")
                for kind in kinds:
                    for nc in conns:
                        for size in sizes:
                            print(f"backend_echo: round {rnd + 1}/{a.rounds}: {kind}, {nc} "
                                  f"connection(s), {size} B" + (f" ({label})" if label else ""),
                                  file=sys.stderr, flush=True)
                            r = one(kind, topo, exe, a.duration, tmp, nc, size, a.native)
                            r["round"], r["build"] = rnd + 1, label
                            runs.append(r)
    cmd = "sudo .venv/bin/python bench/backend_echo.py " + " ".join(sys.argv[1:])
    (out / "backend_echo.json").write_text(json.dumps({"command": cmd.strip(), "runs": runs},
                                                      indent=1))
    lines = [f"backend_echo, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
             f"`{cmd.strip()}`; fp-echo{' (server --native)' if a.native else ''}, one in "
             "flight per connection, one core each, both polling; server busy cycles a message: "
             "the TSC cycles of the server's loop rounds that found work, over its RECV "
             "conditions (one a message); median (min-max)", "",
             "| backend | connections | bytes | messages/s | RTT p50 µs | RTT p99 µs | "
             "server CPU | server busy cycles a message | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, nc, size, (label, _) in [(k, n, z, b) for k in kinds for n in conns
                                       for z in sizes for b in builds]:
        rs = [r for r in runs if r["backend"] == kind and r["build"] == label
              and r.get("conns", 16) == nc and r.get("size", 64) == size]
        name = f"{kind} ({label})" if label else kind
        lines.append(f"| {name} | {nc} | {size} | "
                     f"{med([r['msgs_per_s'] for r in rs], '{:,.0f}')} | "
                     f"{med([r['rtt_p50_us'] for r in rs], '{:.1f}')} | "
                     f"{med([r['rtt_p99_us'] for r in rs], '{:.1f}')} | "
                     f"{med([100 * r['server_cpu'] for r in rs], '{:.0f}%')} | "
                     f"{med([r['busy_cycles_per_msg'] for r in rs if 'busy_cycles_per_msg' in r], '{:,.0f}')} | "
                     f"{sum(r['errors'] for r in rs)} |")
    if len(builds) > 1:
        first, last = builds[0][0], builds[-1][0]
        lines += ["", f"{last} against {first}, per round, median (min-max):", "",
                  "| backend | connections | messages/s | RTT p50 |", "|---|---|---|---|"]
        for kind in kinds:
            for nc in conns:
                for size in sizes:
                    rs = [r for r in runs if r.get("conns", 16) == nc and r.get("size", 64) == size]
                    lines.append(f"| {kind} | {nc} | {size} B | "
                                 f"{ratio_cell(rs, 'msgs_per_s', last, first, 'backend', kind)} | "
                                 f"{ratio_cell(rs, 'rtt_p50_us', last, first, 'backend', kind)} |")
    pairs = [k for k in kinds if k + "-copy" in kinds]
    if pairs:
        # zero-copy against copied: the same build, per round (relabelled as builds)
        lines += ["", "zero-copy against --dpdk-copy yes, per round, median (min-max):", "",
                  "| backend | connections | bytes | messages/s | RTT p50 |",
                  "|---|---|---|---|---|"]
        for kind in pairs:
            for nc in conns:
                for size in sizes:
                    for label, _ in builds:
                        rs = [dict(r, build=("zc" if r["backend"] == kind else "copy"),
                                   backend=kind, round=r["round"])
                              for r in runs if r["backend"] in (kind, kind + "-copy")
                              and r["build"] == label and r.get("conns", 16) == nc
                              and r.get("size", 64) == size]
                        name = f"{kind} ({label})" if label else kind
                        lines.append(
                            f"| {name} | {nc} | {size} | "
                            f"{ratio_cell(rs, 'msgs_per_s', 'zc', 'copy', 'backend', kind)} | "
                            f"{ratio_cell(rs, 'rtt_p50_us', 'zc', 'copy', 'backend', kind)} |")
    md = "\n".join(lines) + "\n"
    (out / "backend_echo.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
