#!/usr/bin/env python3
"""timer_fires.py: connection-timer runs per request in fp-kv, at a per-connection rate
below and above one request per delayed-ACK bound (500 us).

fp-kv (one worker, CPU 0, polling) and fp-loadgen (memcached's USR workload, open loop,
CPU 1) over DPDK's memif. Each point offers --rate requests/s spread over --conns
connections (so each connection sends rate/conns a second); the server's net counters
(fp-stats) give the connection timer's runs (`tcp_timer_fires`) and the segments received,
read before and after the measured load and divided by the requests answered. Interleaved
over builds (--build before=DIR,after=DIR) for --rounds rounds; medians with min-max.

    sudo .venv/bin/python bench/timer_fires.py [--points 20k/1000,200k/64] [--rounds 3]
                                               [--build DIR | LABEL=DIR,...] [--out DIR]

Writes DIR/timer_fires.json and DIR/timer_fires.md (default results/timer_fires/).
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
sys.path.insert(0, str(ROOT / "tools"))
from netns import stop_process  # noqa: E402
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import med, parse_builds  # noqa: E402


def counters(build, name):
    r = subprocess.run([build / "tools" / "fp-stats", "--name", name, "--totals"],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"timer_fires: fp-stats: {r.stderr.strip()[-300:]}")
    w = json.loads(r.stdout.strip().splitlines()[-1])["workers"][0]
    return w["net"]


def rate_of(s):
    s = s.lower()
    mult = 1e6 if s.endswith("m") else 1e3 if s.endswith("k") else 1
    return float(s.rstrip("km")) * mult


def one(build, rate, conns, a, tmp):
    kv, lg = build / "apps" / "kv" / "fp-kv", build / "apps" / "loadgen" / "fp-loadgen"
    sock = os.path.join(tmp, "kv.sock")
    m = "--vdev=net_memif0,role={},socket=" + sock + ",socket-abstract=no"
    name = f"tf{os.getpid() % 10000}"
    srv = subprocess.Popen([kv, "-m", "1024", "-t", "1", "-U", "0", "--cores", "0", "--idle",
                            "poll", "--stats", name, "--dpdk", m.format("server"), "--ip",
                            "10.99.0.1/24"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    out = os.path.join(tmp, "lg.json")
    try:
        time.sleep(2)
        if srv.poll() is not None:
            raise SystemExit(f"timer_fires: fp-kv exited: {srv.stderr.read()[-400:]}")
        cli = subprocess.Popen([lg, "--server", "10.99.0.1", "--workload", "usr", "--conns",
                                str(conns), "--rate", str(int(rate)), "--duration",
                                str(a.duration), "--warmup", "1", "--cores", "1", "--idle",
                                "poll", "--stats", "none", "--quiet", "--json", out, "--dpdk",
                                m.format("client"), "--ip", "10.99.0.2/24"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the counters around the measured part: after the warm-up, before the end
        time.sleep(1.5 + 0.5)
        c0 = counters(build, name)
        t0 = time.time()
        time.sleep(a.duration - 1.0)
        c1 = counters(build, name)
        t1 = time.time()
        _, err = cli.communicate(timeout=a.duration * 10 + 60)
        if cli.returncode != 0:
            raise SystemExit(f"timer_fires: fp-loadgen failed: {err[-400:]}")
        res = json.load(open(out))["points"][0]
    finally:
        stop_process(srv)
    segs = c1["tcp_rx_segs"] - c0["tcp_rx_segs"]
    fires = c1.get("tcp_timer_fires", 0) - c0.get("tcp_timer_fires", 0)
    reqs = res["achieved_rps"] * (t1 - t0)
    return {"rate": rate, "conns": conns, "fires": fires, "rx_segs": segs,
            "fires_per_req": fires / reqs if reqs else None,
            "segs_per_req": segs / reqs if reqs else None,
            "achieved_rps": res["achieved_rps"], "p99_us": res["latency_us"]["p99"],
            "errors": res.get("errors", 0) + res.get("timeouts", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", default="20k/1000,200k/64",
                    help="RATE/CONNS,...: offered requests/s and the connections carrying "
                         "them (default: 20 a second per connection, then ~3,000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "timer_fires"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("timer_fires: needs root (DPDK's memif): run it with sudo")
    if a.duration < 2:
        sys.exit("timer_fires: --duration must be at least 2 s")
    points = []
    for p in a.points.split(","):
        r, _, c = p.partition("/")
        if not c:
            sys.exit(f"timer_fires: bad point '{p}': expected RATE/CONNS, e.g. 20k/1000")
        points.append((rate_of(r), int(c)))
    builds, out = parse_builds(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for rate, conns in points:
                for label, bdir in builds:
                    print(f"timer_fires: round {rnd + 1}/{a.rounds}: {rate:.0f}/s over {conns}"
                          + (f" ({label})" if label else ""), file=sys.stderr, flush=True)
                    r = one(pathlib.Path(bdir), rate, conns, a, tmp)
                    r["round"], r["build"] = rnd + 1, label
                    runs.append(r)
    cmd = "sudo .venv/bin/python bench/timer_fires.py " + " ".join(sys.argv[1:])
    (out / "timer_fires.json").write_text(json.dumps({"command": cmd.strip(), "runs": runs},
                                                     indent=1))
    lines = [f"timer_fires, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
             f"`{cmd.strip()}`; fp-kv and fp-loadgen (USR, open loop) over memif, one core "
             f"each; median (min-max) over {a.rounds} rounds", "",
             "| offered | connections | per connection | build | timer runs per request | "
             "segments received per request | achieved | p99 µs | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rate, conns in points:
        for label, _ in builds:
            rs = [r for r in runs if r["rate"] == rate and r["conns"] == conns
                  and r["build"] == label]
            lines.append(f"| {rate:,.0f}/s | {conns} | {rate / conns:,.0f}/s | {label or '-'} | "
                         f"{med([r['fires_per_req'] for r in rs], '{:.3f}')} | "
                         f"{med([r['segs_per_req'] for r in rs], '{:.2f}')} | "
                         f"{med([r['achieved_rps'] for r in rs], '{:,.0f}')} | "
                         f"{med([r['p99_us'] for r in rs], '{:.0f}')} | "
                         f"{sum(r['errors'] for r in rs)} |")
    md = "\n".join(lines) + "\n"
    (out / "timer_fires.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
