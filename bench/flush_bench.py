#!/usr/bin/env python3
"""--flush-us on real cores: a partitioned worker's replies at the round's end (IX's
batching) against sent once handlers ran --flush-us (rt/api.c, rt_ctx_round_chunked).

fp-echo spin --native, one worker on CPU 0 (partitioned, polling), fp-loadgen (spin
protocol, Poisson, 64 connections, open loop) on CPU 1, joined by DPDK's memif (or, with
--net kernel, by Linux's TCP on loopback: the kernel transport, io_uring); each
round runs every load with each setting, interleaved (A, B, A, B...); medians with
min-max over rounds, and per round the ratio of the p99s (a win only when every round's
ratio is on one side of 1). Root for memif (DPDK); CPUs 0 and 1.

    sudo .venv/bin/python bench/flush_bench.py [--rounds 5] [--loads 0.5,0.7]
         [--service exp:10us] [--flush-us 10] [--duration 3] [--net memif|kernel]
         [--out DIR]

Writes DIR/flush_bench.json and DIR/flush_bench.md (default results/flush_bench/).
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools"))
from benchlib import fp_totals, free_port, med, start_with_stats  # noqa: E402
from netns import stop_process  # noqa: E402

CONNS = 64


def mean_us(service):
    kind, _, mean = service.partition(":")
    return float(mean.rstrip("us"))


def one(build, a, tmp, flush_us, load, tag):
    name = f"flb{os.getpid()}{tag}"
    if a.net == "memif":
        sock = os.path.join(tmp, f"{tag}.sock")
        m = "--vdev=net_memif0,role={},socket=" + sock + ",socket-abstract=no"
        srv_net = ["--dpdk", m.format("server"), "--ip", "10.99.0.1/24"]
        cli_net = ["--server", "10.99.0.1:7", "--dpdk", m.format("client"), "--ip",
                   "10.99.0.2/24"]
    else:   # Linux's TCP on loopback: the server's kernel transport and fp-loadgen's sockets
        port = free_port()
        srv_net = ["--net", "kernel", "--ip", "127.0.0.1", "--port", str(port)]
        cli_net = ["--server", f"127.0.0.1:{port}"]
    srv = start_with_stats([build / "apps" / "echo" / "fp-echo", "spin", "--native", *srv_net,
                            "--cores", "0", "--idle", "poll", "--stats", name, "--flush-us",
                            flush_us], build, name, "flush_bench")
    try:
        out = os.path.join(tmp, "lg.json")
        rate = int(round(load * 1e6 / mean_us(a.service)))
        cli = subprocess.run([str(build / "apps" / "loadgen" / "fp-loadgen"), *cli_net,
                              "--proto", "spin", "--service", a.service, "--rate",
                              str(rate), "--conns", str(CONNS), "--duration", str(a.duration),
                              "--warmup", "1", "--cores", "1", "--idle", "poll", "--stats", "none",
                              "--quiet", "--json", out], capture_output=True, text=True,
                             timeout=a.duration * 20 + 120)
        if cli.returncode:
            raise SystemExit(f"flush_bench: fp-loadgen failed: {cli.stderr[-400:]}")
        w = fp_totals(build, name)[0]
        p = json.load(open(out))["points"][0]
    finally:
        stop_process(srv)
    return {"flush_us": flush_us, "load": load, "p50_us": p["latency_us"]["p50"],
            "p90_us": p["latency_us"]["p90"], "p99_us": p["latency_us"]["p99"],
            "mean_us": p["latency_us"]["mean"], "valid": p.get("valid", True),
            "achieved_rps": p["achieved_rps"], "client_loop_gap_ms": p["client_loop_gap_us"] / 1e3,
            "flush_chunks": w.get("flush_chunks", 0), "flush_sends": w.get("flush_sends", 0),
            "conds": w["conds"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loads", default="0.5,0.7")
    ap.add_argument("--service", default="exp:10us", help="fp-loadgen --service (KIND:MEANus)")
    ap.add_argument("--flush-us", type=int, default=10)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--net", choices=("memif", "kernel"), default="memif",
                    help="memif (DPDK, root) or kernel: Linux's TCP on loopback, io_uring; "
                    "its own per-request cost makes the same load heavier, so choose lower "
                    "--loads there (e.g. 0.2,0.3)")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "flush_bench"))
    a = ap.parse_args()
    a.loads = [float(x) for x in a.loads.split(",")]
    if a.net == "memif" and os.geteuid() != 0:
        sys.exit("flush_bench: --net memif needs root (DPDK): run it with sudo")
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, a.rounds + 1):
            for ld in a.loads:
                for fl in (0, a.flush_us):
                    print(f"flush_bench: round {rnd}/{a.rounds}, load {ld:g}, --flush-us {fl}",
                          file=sys.stderr, flush=True)
                    r = one(build, a, tmp, fl, ld, f"r{rnd}")
                    r["round"] = rnd
                    runs.append(r)
    cmd = "sudo .venv/bin/python bench/flush_bench.py " + " ".join(sys.argv[1:])
    (out / "flush_bench.json").write_text(json.dumps({"command": cmd.strip(), "runs": runs},
                                                     indent=1))
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"flush_bench, {now:%Y-%m-%d %H:%M} UTC: `{cmd.strip()}`; fp-echo spin --native "
             f"(one partitioned worker, CPU 0) and fp-loadgen (CPU 1) over "
             f"{'memif' if a.net == 'memif' else 'Linux TCP on loopback (io_uring)'}, {a.service}, "
             f"{CONNS} connections, {a.duration:g} s a point, {a.rounds} rounds interleaved; "
             "µs, median (min-max)", "",
             "| load | --flush-us | p50 | p90 | p99 | mean | invalid | mid-round sends per "
             "1k conditions | p99 at 0 / this, per round | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for ld in a.loads:
        for fl in (0, a.flush_us):
            rs = [r for r in runs if r["load"] == ld and r["flush_us"] == fl]
            base = {r["round"]: r["p99_us"] for r in runs if r["load"] == ld and not r["flush_us"]}
            ratios = [base[r["round"]] / r["p99_us"] for r in rs if r["p99_us"]]
            verdict = ("–" if not fl else "better" if min(ratios) > 1 else
                       "worse" if max(ratios) < 1 else "within noise")
            lines.append(
                f"| {ld:g} | {fl} | {med([r['p50_us'] for r in rs], '{:.1f}')} | "
                f"{med([r['p90_us'] for r in rs], '{:.0f}')} | "
                f"{med([r['p99_us'] for r in rs], '{:.0f}')} | "
                f"{med([r['mean_us'] for r in rs], '{:.1f}')} | "
                f"{sum(not r['valid'] for r in rs)} of {len(rs)} | "
                f"{med([1e3 * r['flush_sends'] / r['conds'] for r in rs], '{:.0f}')} | "
                f"{', '.join(f'{x:.2f}' for x in ratios) if fl else '–'} | {verdict} |")
    md = "\n".join(lines) + "\n"
    (out / "flush_bench.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
