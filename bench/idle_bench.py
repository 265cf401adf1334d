#!/usr/bin/env python3
"""idle_bench.py: what a core costs across the load range: fp-kv's idle policies beside memcached.

Issue 16, item 11. One server at a time on CPU 0 on 127.0.0.1 (kernel transport for fp-kv:
no root, no namespaces), fp-loadgen (memcached's USR, open loop) on CPU 1. For every
server and load: the server's CPU (utime + stime from /proc over the run, as a share of
one core and per request) and fp-loadgen's p50/p99. Servers are interleaved within each
round (memcached, fp-kv --idle sleep, adaptive, poll, then again), rounds repeated;
medians with min-max. Load 0 is an idle server for the same time.

    bench/idle_bench.py [--rounds 3] [--loads 0,5000,20000,50000] [--duration 3]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
SERVERS = ["memcached", "fp-kv sleep", "fp-kv adaptive", "fp-kv poll"]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])          # utime, stime


def wait_port(port, proc, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"idle_bench: the server exited: {proc.stderr.read()[-300:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("idle_bench: the server did not listen")


def start(server, build, port):
    if server == "memcached":
        argv = ["taskset", "-c", "0", "memcached", "-U", "0", "-l", "127.0.0.1", "-p", str(port),
                "-t", "1", "-m", "1024", "-c", "4096"] + (["-u", "root"] if os.geteuid() == 0 else [])
    else:
        argv = [os.path.join(build, "apps/kv/fp-kv"), "--net", "kernel", "-l", "127.0.0.1",
                "-p", str(port), "-U", "0", "-t", "1", "-m", "1024", "-c", "4096", "--cores", "0",
                "--stats", "none", "--idle", server.split()[1]]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_port(port, p)
    return p


def one(build, port, proc, load, a):
    t0, c0 = time.time(), cpu_ticks(proc.pid)
    doc = None
    if load:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            r = subprocess.run([os.path.join(build, "apps/loadgen/fp-loadgen"), "--server",
                                f"127.0.0.1:{port}", "--workload", "usr", "--rate", str(load),
                                "--duration", str(a.duration), "--warmup", "0.5",
                                "--conns", "32", "--cores", "1", "--stats", "none",
                                "--json", out.name], capture_output=True, text=True, timeout=120)
            if r.returncode:
                sys.exit(f"idle_bench: fp-loadgen failed: {r.stderr[-400:]}")
            doc = json.load(open(out.name))
    else:
        time.sleep(a.duration + 0.5)
    secs = time.time() - t0
    cpu = (cpu_ticks(proc.pid) - c0) / TICK
    res = {"cpu_share": cpu / secs, "secs": secs}
    if doc:
        p = doc["points"][0]
        res.update(p50=p["latency_us"]["p50"], p99=p["latency_us"]["p99"],
                   achieved=p["achieved_rps"], valid=p["valid"],
                   cpu_us_per_req=cpu * 1e6 / max(1, p["completed"]))
    return res


def fmt(xs, f="{:.0f}"):
    xs = sorted(xs)
    m = statistics.median(xs)
    return (f.format(m) + f" ({f.format(xs[0])}-{f.format(xs[-1])})") if len(xs) > 1 else f.format(m)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loads", default="0,5000,20000,50000")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    loads = [int(x) for x in a.loads.split(",")]
    res = {}
    port = 23000 + os.getpid() % 1000
    total, done, t_start = a.rounds * len(SERVERS), 0, time.time()
    for rnd in range(a.rounds):
        for server in SERVERS:
            port += 1
            proc = start(server, a.build, port)
            try:
                time.sleep(0.5)
                for load in loads:
                    res.setdefault((server, load), []).append(one(a.build, port, proc, load, a))
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            done += 1
            el = time.time() - t_start
            print(f"[{done}/{total}] round {rnd + 1} {server}, {el:.0f} s, "
                  f"~{el / done * (total - done):.0f} s left", file=sys.stderr)
    print(f"idle_bench, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
          f"{' '.join(sys.argv)}; {a.rounds} rounds, median (min-max)\n")
    print("| load req/s | server | CPU, % of a core | CPU µs per request | p50 µs | p99 µs | valid |")
    print("|---|---|---|---|---|---|---|")
    for load in loads:
        for server in SERVERS:
            rs = res[(server, load)]
            cpu = fmt([100 * r["cpu_share"] for r in rs], "{:.1f}")
            if load:
                print(f"| {load} | {server} | {cpu} | {fmt([r['cpu_us_per_req'] for r in rs], '{:.1f}')} | "
                      f"{fmt([r['p50'] for r in rs])} | {fmt([r['p99'] for r in rs])} | "
                      f"{sum(r['valid'] for r in rs)}/{len(rs)} |")
            else:
                print(f"| idle | {server} | {cpu} | - | - | - | - |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{s}|{l}": v for (s, l), v in res.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
