#!/usr/bin/env python3
"""Where the echo server's core goes at saturation: user space (flowplane) or the kernel.

Runs fp-echo's server on AF_XDP (polling) and on the kernel transport in the standard
topology (server CPU 0, client CPU 1), drives each with flowplane's client (AF_XDP, 32
connections, 64-byte messages, 1024 round trips per connection) and reads the server's
utime and stime from /proc before and after. Root. Usage: echo_cpu_split.py [BUILD] [REPS]
"""
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo  # noqa: E402


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]), int(f[12])   # utime, stime


def one(t, echo, kind, out):
    if kind == "xdp":
        args, addr = ["--if", t.srv_if, "--ip", f"{t.fp_srv_ip}/24", "--idle", "poll"], t.fp_srv_ip
    else:
        args, addr = ["--net", "kernel", "--ip", t.srv_ip], t.srv_ip
    p = t.popen(t.srv_ns, [echo, "server", "--cores", 0, "--stats", "none", *args], cpu=0)
    try:
        time.sleep(1.5)
        u0, s0 = cpu_ticks(p.pid)   # ip netns exec and taskset exec: same pid
        t.sh(t.cli_ns, echo, "client", "--server", f"{addr}:7", "--if", t.cli_if, "--ip",
             f"{t.fp_cli_ip}/24", "--idle", "poll", "--cores", 1, "--conns", 32, "--rounds",
             1024, "--duration", 3, "--warmup", 0.5, "--stats", "none", "--json", out,
             timeout=60)
        u1, s1 = cpu_ticks(p.pid)
    finally:
        p.send_signal(2)
        p.wait(10)
    j = json.load(open(out))
    hz, n = os.sysconf("SC_CLK_TCK"), j["round_trips_total"]
    return j["msgs_per_s"], (u1 - u0) / hz / n * 1e9, (s1 - s0) / hz / n * 1e9


def main():
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "release")
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    echo = build / "apps" / "echo" / "fp-echo"
    out = os.path.join(tempfile.mkdtemp(), "client.json")
    print("| server | rep | msgs/s | user ns/msg | kernel (sys) ns/msg |\n|---|---|---|---|---|")
    with Topo("fpsplit") as t:
        for rep in range(reps):
            for kind in ("xdp", "kernel"):
                rate, user, sys_ = one(t, echo, kind, out)
                print(f"| {kind} | {rep + 1} | {rate:,.0f} | {user:.0f} | {sys_:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
