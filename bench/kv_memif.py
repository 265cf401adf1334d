#!/usr/bin/env python3
"""fp-kv's saturation over DPDK's memif against AF_XDP on veth (issue 21, item 2).

fp-kv (one worker, CPU 0, --idle poll) and fp-loadgen (memcached's USR workload, 64
connections, closed loop with --closed K requests in flight per connection, CPU 1) joined
by net_memif (shared memory between the two processes: no kernel on the path), or by the
standard veth pair with both on AF_XDP (flowplane's own backend). Throughput is the
closed loop's achieved rate, with its p50/p99; or, with --sweep LO:HI:N, an open-loop
sweep (Poisson arrivals) whose points give the saturation and the p99 at each load.
Interleaved (memif, xdp, then again) for --rounds rounds; medians with min-max. Root
(namespaces, AF_XDP).

    sudo .venv/bin/python bench/kv_memif.py [--rounds 3] [--closed 4 | --sweep 200k:1.4M:7]
                                            [--duration 3] [--fp-flags 'A;B'] [--out DIR]

--fp-flags 'A;B;...' runs fp-kv with each set of runtime flags in turn in every round
(e.g. ';--flush-us 10': without and with), interleaved like the builds.

Writes DIR/kv_memif.json and DIR/kv_memif.md (default results/kv_memif/).
"""
import argparse
import datetime
import json
import os
import pathlib
import shlex
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import fp_totals, med, parse_builds, ratio_cell, start  # noqa: E402

PATHS = ["memif", "xdp"]


def one(path, topo, build, a, tmp, fp_flags=()):
    kv, lg = str(build / "apps" / "kv" / "fp-kv"), str(build / "apps" / "loadgen" / "fp-loadgen")
    if path == "memif":
        sock = os.path.join(tmp, "kv.sock")
        m = "--vdev=net_memif0,role={},socket=" + sock + ",socket-abstract=no"
        srv_rt = ["--dpdk", m.format("server"), "--ip", "10.99.0.1/24"]
        cli_rt = ["--dpdk", m.format("client"), "--ip", "10.99.0.2/24"]
        addr, sns, cns = "10.99.0.1", None, None
    else:
        srv_rt = ["--if", topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24"]
        cli_rt = ["--if", topo.cli_if, "--ip", f"{topo.fp_cli_ip}/24"]
        addr, sns, cns = topo.fp_srv_ip, topo.srv_ns, topo.cli_ns
    out = os.path.join(tmp, "lg.json")
    stats = f"kvm{os.getpid()}"
    srv = start(topo, sns, [kv, "-m", "1024", "-t", "1", "-U", "0", "--cores", "0", "--idle",
                            "poll", "--stats", stats, *srv_rt, *fp_flags])
    try:
        time.sleep(2)
        if srv.poll() is not None:
            raise SystemExit(f"kv_memif: {path}: fp-kv exited: {srv.stderr.read()[-400:]}")
        load = ["--sweep", a.sweep] if a.sweep else ["--closed", str(a.closed)]
        steal0, stalls0, busy0 = steal_ms(), server_stalls(build, stats), server_busy(build, stats)
        cli = start(topo, cns, [lg, "--server", addr, "--workload", "usr", "--conns", "64",
                                *load, "--duration", str(a.duration),
                                "--warmup", "1", "--cores", "1", "--idle", "poll", "--stats",
                                "none", "--quiet",
                                "--json", out, *cli_rt])
        _, err = cli.communicate(timeout=a.duration * 20 + 120)
        steal1, stalls1, busy1 = steal_ms(), server_stalls(build, stats), server_busy(build, stats)
        if cli.returncode != 0:
            raise SystemExit(f"kv_memif: {path}: fp-loadgen failed: {err[-400:]}")
        res = json.load(open(out))
    finally:
        stop_process(srv)
    pts = [{"target_rps": pt.get("target_rps"), "achieved_rps": pt["achieved_rps"],
            "p50_us": pt["latency_us"]["p50"], "p99_us": pt["latency_us"]["p99"],
            "timeouts": pt.get("timeouts", 0), "errors": pt.get("errors", 0),
            "dropped": pt.get("dropped", 0), "valid": pt.get("valid", True),
            "invalid_reasons": pt.get("invalid_reasons", []),
            "client_stalls": pt.get("client_stalls", 0),
            "client_loop_gap_us": pt.get("client_loop_gap_us", 0),
            "latency_max_us": pt["latency_us"].get("max"),
            "slip_max_us": pt.get("slip_us", {}).get("max")} for pt in res["points"]]
    # over the whole run (warm-up and every point): the server's loop stalls (the runtime's
    # count of gaps after an idle round: its core taken) and each CPU's guest steal time
    return {"path": path, **pts[0], "points": pts,
            "server_stalls": stalls1[0] - stalls0[0],
            "server_stall_ms": (stalls1[1] - stalls0[1]) / 1e6,
            "steal_ms": [b - a for a, b in zip(steal0, steal1)],
            "busy_cycles_per_req": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])}


def per_round_max(p):
    return f"{p['latency_max_us']:.0f}" if p.get("latency_max_us") is not None else "-"


def steal_ms():
    """Each CPU's guest steal time so far, ms (/proc/stat's eighth column)."""
    tick = 1000 / os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        return [int(ln.split()[8]) * tick for ln in f
                if ln.startswith("cpu") and not ln.startswith("cpu ")]


def server_stalls(build, name):
    """(stalls, stall ns) of the fp-kv named @name so far: fp-stats' totals."""
    try:
        w = fp_totals(build, name)
    except RuntimeError:
        return (0, 0)   # not up yet: counted from zero
    return (sum(x["stalls"] for x in w), sum(x["stall_ns"] for x in w))


def server_busy(build, name):
    """(busy TSC cycles, commands) of the fp-kv named @name so far: its loop rounds that
    found work, and its app_ops (memcached's commands, one a GET)."""
    try:
        w = fp_totals(build, name)
    except RuntimeError:
        return (0, 0)
    return (sum(x["busy_cycles"] for x in w), sum(x["app_ops"] for x in w))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--closed", type=int, default=4, help="requests in flight per connection")
    ap.add_argument("--sweep", help="LO:HI:N: an open-loop sweep instead of the closed "
                    "loop (fp-loadgen's --sweep, e.g. 200k:1.4M:7)")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--build", default=str(ROOT / "build" / "release"),
                    help="the build directory, or LABEL=DIR,LABEL=DIR: builds interleaved in "
                    "each round (before and after a change), the ratio of the last to the "
                    "first reported per round")
    ap.add_argument("--fp-flags", default="",
                    help="'A;B': fp-kv's extra runtime flags, each set a variant of its own")
    ap.add_argument("--out", default=str(ROOT / "results" / "kv_memif"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("kv_memif: needs root (namespaces, AF_XDP): run it with sudo")
    builds, out = parse_builds(a.build), pathlib.Path(a.out)
    if a.fp_flags:   # each flag set a variant, labelled by its flags
        if len(builds) > 1:
            sys.exit("kv_memif: --fp-flags with one --build")
        builds = [(fl.strip() or "default", builds[0][1], fl.split())
                  for fl in a.fp_flags.split(";")]
    else:
        builds = [(label, bdir, []) for label, bdir in builds]
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with Topo(f"km{os.getpid() % 10000}") as topo, tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for label, bdir, flags in builds:
                for path in PATHS:
                    print(f"kv_memif: round {rnd + 1}/{a.rounds}: {path}"
                          + (f" ({label})" if label else ""), file=sys.stderr, flush=True)
                    r = one(path, topo, pathlib.Path(bdir), a, tmp, flags)
                    r["round"], r["build"] = rnd + 1, label
                    runs.append(r)
    cmd = "sudo .venv/bin/python bench/kv_memif.py " + shlex.join(sys.argv[1:])
    (out / "kv_memif.json").write_text(json.dumps({"command": cmd.strip(), "runs": runs}, indent=1))
    if a.sweep:
        lines = [f"kv_memif, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
                 f"`{cmd.strip()}`; fp-kv and fp-loadgen (USR, 64 connections, open loop, "
                 "Poisson), one core each; per offered rate, median (min-max) over rounds; "
                 "invalid: rounds whose point failed fp-loadgen's checks (rate, slip, drops); "
                 "per round: requests dropped at the client (a connection's backlog of 32 "
                 "full), the client's loop stalls and its worst latency",
                 "", "| path | offered | achieved | p50 µs | p99 µs | invalid | dropped | "
                 "client stalls | max latency µs |", "|---|---|---|---|---|---|---|---|---|"]
        for path, (label, *_) in [(p, b) for p in PATHS for b in builds]:
            rs = [r for r in runs if r["path"] == path and r["build"] == label]
            for i, pt0 in enumerate(rs[0]["points"] if rs else []):
                ps = [r["points"][i] for r in rs if i < len(r["points"])]
                lines.append(f"| {path}{f' ({label})' if label else ''} | "
                             f"{pt0['target_rps'] / 1e3:,.0f}k | "
                             f"{med([p['achieved_rps'] for p in ps], '{:,.0f}')} | "
                             f"{med([p['p50_us'] for p in ps], '{:.0f}')} | "
                             f"{med([p['p99_us'] for p in ps], '{:.0f}')} | "
                             f"{sum(not p['valid'] for p in ps)} of {len(ps)} | "
                             f"{' / '.join(str(p['dropped']) for p in ps)} | "
                             f"{' / '.join(str(p.get('client_stalls', 0)) for p in ps)} | "
                             f"{' / '.join(per_round_max(p) for p in ps)} |")
    else:
        lines = [f"kv_memif, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
                 f"`{cmd.strip()}`; fp-kv and fp-loadgen (USR, 64 connections x {a.closed} in "
                 "flight, closed loop), one core each; server busy cycles a request: the TSC "
                 "cycles of fp-kv's loop rounds that found work, over its commands (warm-up "
                 "included); median (min-max)", "",
                 "| path | requests/s | p50 µs | p99 µs | server busy cycles a request | "
                 "timeouts |", "|---|---|---|---|---|---|"]
        for path, (label, *_) in [(p, b) for p in PATHS for b in builds]:
            rs = [r for r in runs if r["path"] == path and r["build"] == label]
            name = f"{path} ({label})" if label else path
            lines.append(f"| {name} | {med([r['achieved_rps'] for r in rs], '{:,.0f}')} | "
                         f"{med([r['p50_us'] for r in rs], '{:.0f}')} | "
                         f"{med([r['p99_us'] for r in rs], '{:.0f}')} | "
                         f"{med([r.get('busy_cycles_per_req', 0) for r in rs], '{:,.0f}')} | "
                         f"{sum(r['timeouts'] for r in rs)} |")
        if len(builds) > 1:   # the last variant against the first, per round
            first, last = builds[0][0], builds[-1][0]
            lines.append("")
            for path in PATHS:
                lines.append(f"- {path}, requests/s {last} / {first} per round: "
                             f"{ratio_cell(runs, 'achieved_rps', last, first, 'path', path)}")
    lines += ["", "Stalls over each run (warm-up and every point): the server's loop stalls (its "
              "core taken: the runtime's count and time) and each CPU's guest steal time:", "",
              "| round | path | server stalls | server stall ms | steal ms per CPU |",
              "|---|---|---|---|---|"]
    for r in runs:
        name = f"{r['path']} ({r['build']})" if r["build"] else r["path"]
        lines.append(f"| {r['round']} | {name} | {r['server_stalls']} | "
                     f"{r['server_stall_ms']:.1f} | "
                     f"{' / '.join(f'{x:.0f}' for x in r['steal_ms'])} |")
    md = "\n".join(lines) + "\n"
    (out / "kv_memif.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
