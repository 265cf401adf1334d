#!/usr/bin/env python3
"""dev_cost.py: each packet backend's cost per frame sent and received on this machine (issue 21).

Runs `fp-dev-cost` (bench/dev_cost.c: one thread drives both ends of a link, timing the
backend's send and receive calls apart) for each backend, interleaved, several rounds:

  pair            flowplane's in-process pair: a copy through a ring, the floor
  memif           DPDK's memif, two ports in one process (shared memory, no kernel)
  xdp             flowplane's AF_XDP on the two ends of a veth pair (copy mode)
  dpdk-af_packet  DPDK's af_packet PMD on the same veth pair
  dpdk-af_xdp     DPDK's af_xdp PMD on the same veth pair
  memif-copy, dpdk-af_packet-copy
                  the same with --dpdk-copy: frames copied to and from DPDK's own mbufs
                  (the backend's zero-copy off)

The veth pair lives in a namespace of its own, made and removed here.

    sudo .venv/bin/python bench/dev_cost.py [--rounds 3] [--frames 2000000] [--out DIR]

Writes DIR/dev_cost.json and DIR/dev_cost.md (default results/dev_cost/).
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import med  # noqa: E402

BACKENDS = ["pair", "memif", "xdp", "dpdk-af_packet", "dpdk-af_xdp", "memif-copy",
            "dpdk-af_packet-copy"]
DEFAULT = BACKENDS[:5]


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def args_for(kind, tmp):
    if kind.endswith("-copy"):
        return args_for(kind[:-len("-copy")], tmp) + ["--dpdk-copy"]
    if kind == "pair":
        return ["--pair"]
    if kind == "memif":
        sock = os.path.join(tmp, "dc.sock")
        m = "--vdev=net_memif{},role={},socket=" + sock + ",socket-abstract=no"
        return ["--dpdk", m.format(0, "server") + " " + m.format(1, "client")]
    if kind == "xdp":
        return ["--xdp", "dca,dcb"]
    pmd = "net_af_packet{},iface={}" if kind == "dpdk-af_packet" else \
        "net_af_xdp{},iface={},force_copy=1"
    return ["--dpdk", f"--vdev={pmd.format(0, 'dca')} --vdev={pmd.format(1, 'dcb')}"]


def one(kind, ns, exe, a, tmp):
    cmd = ["ip", "netns", "exec", ns, "taskset", "-c", "1", exe, *args_for(kind, tmp),
           "--frames", str(a.frames), "--burst", str(a.burst), "--size", str(a.size), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return {"backend": kind, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["backend"] = kind
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=2000000)
    ap.add_argument("--burst", type=int, default=32)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--backends", default=",".join(DEFAULT),
                    help=f"comma list of {', '.join(BACKENDS)} (default {','.join(DEFAULT)})")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "dev_cost"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("dev_cost: needs root (a namespace, AF_XDP, DPDK): run it with sudo")
    kinds = [k for k in a.backends.split(",") if k]
    if any(k not in BACKENDS for k in kinds):
        sys.exit(f"dev_cost: backends are {', '.join(BACKENDS)}")
    exe = str(pathlib.Path(a.build) / "bench" / "fp-dev-cost")
    if not os.access(exe, os.X_OK):
        sys.exit(f"dev_cost: no {exe} (./flowplane build release)")
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ns = f"fpdc{os.getpid() % 100000}"
    runs = []
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", ns, "link", "add", "dca", "type", "veth", "peer", "name", "dcb")
        for i in ("dca", "dcb"):   # no IPv6: its neighbour discovery would add frames
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{i}.disable_ipv6=1")
        for i in ("dca", "dcb", "lo"):
            sh("ip", "-n", ns, "link", "set", i, "up")
        with tempfile.TemporaryDirectory() as tmp:
            for rnd in range(a.rounds):
                for kind in kinds:
                    print(f"dev_cost: round {rnd + 1}/{a.rounds}: {kind}", file=sys.stderr,
                          flush=True)
                    r = one(kind, ns, exe, a, tmp)
                    r["round"] = rnd + 1
                    runs.append(r)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    cmd = "sudo .venv/bin/python bench/dev_cost.py " + " ".join(sys.argv[1:])
    (out / "dev_cost.json").write_text(json.dumps({"command": cmd.strip(), "runs": runs},
                                                  indent=1))
    lines = [f"dev_cost, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
             f"`{cmd.strip()}`; {a.size}-byte frames in bursts of {a.burst}, one thread on "
             "CPU 1 driving both ends; ns per frame in the backend's calls, median (min-max) "
             "over rounds", "",
             "| backend | send (tx_burst + reclaim) | receive (rx_burst + reclaim) | both | "
             "frames lost |", "|---|---|---|---|---|"]
    for kind in kinds:
        rs = [r for r in runs if r["backend"] == kind and "error" not in r]
        bad = [r for r in runs if r["backend"] == kind and "error" in r]
        if not rs:
            lines.append(f"| {kind} | – | – | – | failed: {bad[0]['error'][:120]} |")
            continue
        lost = sum(r["sent"] - r["received"] for r in rs)
        lines.append(f"| {kind} | {med([r['tx_ns_per_frame'] for r in rs], '{:.0f}')} | "
                     f"{med([r['rx_ns_per_frame'] for r in rs], '{:.0f}')} | "
                     f"{med([r['tx_ns_per_frame'] + r['rx_ns_per_frame'] for r in rs], '{:.0f}')}"
                     f" | {lost:,}" + (f" ({len(bad)} round(s) failed)" if bad else "") + " |")
    md = "\n".join(lines) + "\n"
    (out / "dev_cost.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
