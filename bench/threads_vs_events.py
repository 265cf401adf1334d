#!/usr/bin/env python3
"""The same server written three ways, measured in one run: event callbacks (evl.h), a
user-level thread per connection with blocking sockets (tsock.h, `--threads`), and the
peer: a Linux thread per connection on blocking Linux sockets (`--pthreads`); issue 19.

--workload echo (default): `fp-echo server` against `fp-echo server --threads`, driven by
`fp-echo client`, as below. --workload spin: `fp-echo spin` against `fp-echo spin
--threads` (Shenango's synthetic workload), driven by fp-loadgen (spin protocol, fixed
--service-us, open loop, 16 connections) at --rates; per rate: achieved, p50, p99, and the
server's CPU per request.

--workload kv: fp-kv (event callbacks) against `fp-kv --style threads` (the same protocol
code, a user-level thread per connection, apps/kv/tkv.c), with memcached 1.6 -t 1 (libevent,
event callbacks in C) as the peer, driven by fp-loadgen (memcache, mutilate's USR workload,
open loop, 16 connections) at --rates: the cost of each style per request.

Loopback, kernel transport, the server on core 0, `fp-echo client` (IX's echo benchmark:
16 connections, 64-byte messages, each connection reset and replaced after 1024 round
trips, so accepts and thread spawns are part of it) on core 1; the two servers interleaved
for --rounds rounds. Per run: messages/s, RTT p50/p99, and the server's CPU per message
(utime + stime over the run / messages).

    .venv/bin/python bench/threads_vs_events.py [--rounds 5] [--duration 3]

Writes OUT/threads_vs_events.json and .md (default results/threads_vs_events/).
"""
import argparse
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import free_port  # noqa: E402

MODES = ("events", "threads", "pthreads")
KV_MODES = ("events", "threads", "memcached")
STYLE = {"events": [], "threads": ["--threads"], "pthreads": ["--pthreads"]}


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def wait_accepting(srv, port, what):
    """@srv (a Popen) once it accepts on @port: (srv, port); exit if it does not in 10 s."""
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return srv, port
        except OSError:
            if time.time() > deadline or srv.poll() is not None:
                srv.kill()
                sys.exit(f"threads_vs_events: {what} did not start")
            time.sleep(0.05)


def start(build, cmd, mode):
    """fp-echo @cmd (server or spin) in @mode's style on core 0, once it accepts: (proc, port)."""
    port = free_port()
    srv = subprocess.Popen([str(build / "apps" / "echo" / "fp-echo"), cmd, *STYLE[mode],
                            "--net", "kernel", "--ip", "127.0.0.1", "--port", str(port),
                            "--stats", "none", "--cores", "0"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return wait_accepting(srv, port, f"{mode} {cmd}")


def start_kv(build, mode):
    """fp-kv in @mode's style, or memcached, on core 0 (-t 1), once it accepts: (proc, port)."""
    port = free_port()
    if mode == "memcached":
        argv = ["taskset", "-c", "0", "memcached", "-u", "root", "-U", "0", "-t", "1",
                "-l", "127.0.0.1", "-p", str(port)]
    else:
        argv = [str(build / "apps" / "kv" / "fp-kv"), "--style", mode, "-t", "1",
                "--net", "kernel", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                "--stats", "none", "--cores", "0"]
    srv = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return wait_accepting(srv, port, f"{mode} kv server")


def one(build, mode, a, out):
    exe = str(build / "apps" / "echo" / "fp-echo")
    srv, port = start(build, "server", mode)
    try:
        js = out / f"{mode}.json"
        c0 = cpu_s(srv.pid)
        r = subprocess.run([exe, "client", "--server", f"127.0.0.1:{port}", "--net", "kernel",
                            "--ip", "127.0.0.1", "--stats", "none", "--cores", "1",
                            "--conns", "16", "--size", "64", "--duration", str(a.duration),
                            "--warmup", "0.5", "--json", str(js)],
                           capture_output=True, text=True, timeout=a.duration + 30)
        c1 = cpu_s(srv.pid)
        if r.returncode:
            sys.exit(f"threads_vs_events: client failed: {r.stderr[-300:]}")
        d = json.loads(js.read_text())
    finally:
        srv.send_signal(signal.SIGINT)
        srv.wait(10)
    return {"mode": mode, "msgs_per_s": d["msgs_per_s"], "rtt_p50_us": d["rtt_us"]["p50"],
            "rtt_p99_us": d["rtt_us"]["p99"], "errors": d["errors"],
            "conns_per_s": d["conns_per_s"],
            "server_cpu_ns_per_msg": (c1 - c0) * 1e9 / d["round_trips_total"],
            "server_exit": srv.returncode}


def one_spin(build, mode, a, out):
    """Spin (or, with --workload kv, memcache USR) at each of --rates against @mode's server."""
    if a.workload == "kv":
        srv, port = start_kv(build, mode)
        proto = ["--proto", "memcache", "--workload", "usr"]
    else:
        srv, port = start(build, "spin", mode)
        proto = ["--proto", "spin", "--service", f"fixed:{a.service_us}us"]
    pts = []
    try:
        for rate in a.rates.split(","):
            js = out / f"{a.workload}_{mode}_{rate}.json"
            c0 = cpu_s(srv.pid)
            r = subprocess.run([str(build / "apps" / "loadgen" / "fp-loadgen"), "--server",
                                f"127.0.0.1:{port}", *proto, "--rate", rate, "--duration",
                                str(a.duration), "--warmup", "0.5", "--conns", "16",
                                "--cores", "1", "--quiet", "--json", str(js)],
                               capture_output=True, text=True, timeout=a.duration + 60)
            c1 = cpu_s(srv.pid)
            if r.returncode:
                sys.exit(f"threads_vs_events: fp-loadgen failed: {r.stderr[-300:]}")
            (p,) = json.loads(js.read_text())["points"]
            pts.append({"rate": rate, "achieved_rps": p["achieved_rps"],
                        "p50_us": p["latency_us"]["p50"], "p99_us": p["latency_us"]["p99"],
                        "valid": p["valid"],
                        "server_cpu_ns_per_req": (c1 - c0) * 1e9 / max(1, p["completed"])})
    finally:
        srv.send_signal(signal.SIGINT)
        srv.wait(10)
    return {"mode": mode, "points": pts, "server_exit": srv.returncode}


def spin_table(runs, a, modes):
    what = " (includes the spin)" if a.workload == "spin" else ""
    lines = [f"| server | rate | achieved | p50 µs | p99 µs | server CPU ns/request{what} "
             "| invalid points |", "|---|---|---|---|---|---|---|"]
    for mode in modes:
        for i, rate in enumerate(a.rates.split(",")):
            ps = [r["points"][i] for r in runs if r["mode"] == mode]
            lines.append(f"| {mode} | {rate} | {mm([p['achieved_rps'] for p in ps], '{:,.0f}')} | "
                         f"{mm([p['p50_us'] for p in ps], '{:.1f}')} | "
                         f"{mm([p['p99_us'] for p in ps], '{:.1f}')} | "
                         f"{mm([p['server_cpu_ns_per_req'] for p in ps], '{:.0f}')} | "
                         f"{sum(not p['valid'] for p in ps)} |")
    return lines


def mm(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "threads_vs_events"))
    ap.add_argument("--workload", choices=("echo", "spin", "kv"), default="echo")
    ap.add_argument("--rates", help="spin and kv: fp-loadgen rates (default spin "
                    "20k,50k,70k; kv 20k,60k,100k)")
    ap.add_argument("--service-us", type=float, default=10, help="spin: service time")
    a = ap.parse_args()
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    if a.workload in ("spin", "kv"):
        modes = KV_MODES if a.workload == "kv" else MODES
        a.rates = a.rates or ("20k,60k,100k" if a.workload == "kv" else "20k,50k,70k")
        for r in range(a.rounds):
            for mode in modes:
                res = one_spin(build, mode, a, out)
                res["round"] = r + 1
                print(json.dumps(res), flush=True)
                runs.append(res)
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        name = f"{a.workload}_threads_vs_events"
        (out / f"{name}.json").write_text(json.dumps({"date": date, "runs": runs}, indent=1))
        load = (f"spin fixed {a.service_us} us" if a.workload == "spin" else
                "memcache USR, 16 connections")
        lines = [f"{date}, `bench/threads_vs_events.py {' '.join(sys.argv[1:])}`, "
                 f"{os.cpu_count()} vCPUs; {load}; median (min-max) of "
                 f"{a.rounds} interleaved rounds", ""] + spin_table(runs, a, modes)
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    for r in range(a.rounds):
        for mode in MODES:
            res = one(build, mode, a, out)
            res["round"] = r + 1
            print(json.dumps(res), flush=True)
            runs.append(res)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (out / "threads_vs_events.json").write_text(json.dumps({"date": date, "runs": runs},
                                                           indent=1))
    lines = [f"{date}, `bench/threads_vs_events.py {' '.join(sys.argv[1:])}`, "
             f"{os.cpu_count()} vCPUs; median (min-max) of {a.rounds} interleaved rounds", "",
             "| server | messages/s | RTT p50 µs | RTT p99 µs | server CPU ns/message | "
             "connections/s | errors |", "|---|---|---|---|---|---|---|"]
    for mode in MODES:
        rs = [x for x in runs if x["mode"] == mode]
        lines.append(f"| {mode} | {mm([x['msgs_per_s'] for x in rs], '{:,.0f}')} | "
                     f"{mm([x['rtt_p50_us'] for x in rs], '{:.1f}')} | "
                     f"{mm([x['rtt_p99_us'] for x in rs], '{:.1f}')} | "
                     f"{mm([x['server_cpu_ns_per_msg'] for x in rs], '{:.0f}')} | "
                     f"{mm([x['conns_per_s'] for x in rs], '{:.0f}')} | "
                     f"{sum(x['errors'] for x in rs)} |")
    by = {m: [x for x in runs if x["mode"] == m] for m in MODES}
    for m in ("threads", "pthreads"):
        ratios = [t["msgs_per_s"] / e["msgs_per_s"] for e, t in zip(by["events"], by[m])]
        lines += ["",
                  f"{m} / events, messages/s within a round: {mm(ratios, '{:.3f}')}"]
    (out / "threads_vs_events.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
