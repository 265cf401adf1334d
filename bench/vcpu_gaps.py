#!/usr/bin/env python3
# vcpu_gaps.py: how much time each CPU loses in gaps a busy loop without system calls sees (the VM's invisible stalls).
"""Run a loop that makes no system call on each CPU at once, pinned, for SECONDS, and
report every gap longer than 50 us between two reads of the clock: time the CPU was taken
from the loop by something outside the process (the hypervisor, an interrupt, a kernel
thread). Beside it: the steal time /proc/stat reports over the same span, and the
interrupts each CPU took. On a VM whose host does not report steal time, this is the way to
see the host's preemption; a server on that CPU pays it in its tail, whoever wrote it.

    python3 bench/vcpu_gaps.py [--seconds 10] [--cpus 0,1] [--out FILE]

--out FILE writes the gaps as fp-vsim --full --stalls reads them: the first CPU's as the
server's (seconds=, server=), the second's as the client's (client=), in µs.
"""
import argparse
import datetime
import multiprocessing as mp
import os
import sys
import time


def loop(cpu, seconds, q):
    os.sched_setaffinity(0, {cpu})
    pc = time.perf_counter_ns
    end = pc() + int(seconds * 1e9)
    last, hist, total, n, gaps = pc(), {}, 0, 0, []
    while True:
        t = pc()
        d = t - last
        if d > 50000:
            b = 1 << (d.bit_length() - 1)
            hist[b] = hist.get(b, 0) + 1
            total += d
            n += 1
            gaps.append(d)
        last = t
        if t > end:
            break
    q.put((cpu, n, total, hist, gaps))


def steal():
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--cpus", default=",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    ap.add_argument("--out", help="write the gaps for fp-vsim --full --stalls (the first CPU "
                    "is the server's, the second the client's)")
    a = ap.parse_args()
    cpus = [int(c) for c in a.cpus.split(",")]
    if a.out and len(cpus) not in (1, 2):
        sys.exit("vcpu_gaps: --out: give --cpus SERVER[,CLIENT]")
    q = mp.Queue()
    s0 = steal()
    ps = [mp.Process(target=loop, args=(c, a.seconds, q)) for c in cpus]
    for p in ps:
        p.start()
    res = sorted((q.get() for _ in ps), key=lambda r: r[0])
    for p in ps:
        p.join()
    hz = os.sysconf("SC_CLK_TCK")
    print(f"steal time reported over the run: {(steal() - s0) / hz * 1000:.0f} ms\n")
    print("| CPU | gaps > 50 µs | time lost | share | 0.5–1 ms | 1–2 ms | 2–4 ms | ≥ 4 ms | longest bucket |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cpu, n, total, hist, _ in res:
        def cnt(lo, hi=None):
            return sum(v for k, v in hist.items() if k >= lo * 1000 and (hi is None or k < hi * 1000))
        top = max(hist) if hist else 0
        print(f"| {cpu} | {n} | {total / 1e6:.1f} ms | {total / 1e9 / a.seconds:.2%} | "
              f"{cnt(512, 1024)} | {cnt(1024, 2048)} | {cnt(2048, 4096)} | {cnt(4096)} | "
              f"{top / 1e6:.1f}–{2 * top / 1e6:.1f} ms |")

    if a.out:
        by = {r[0]: r for r in res}
        lines = [f"# bench/vcpu_gaps.py --seconds {a.seconds:g} --cpus {a.cpus}, "
                 f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC: gaps "
                 "over 50 us a loop without system calls saw, in us", f"seconds={a.seconds:g}"]
        for role, cpu in zip(("server", "client"), cpus):
            gaps = by[cpu][4]
            lines.append(f"# {role}: CPU {cpu}, {len(gaps)} gaps, {sum(gaps) / 1e6:.1f} ms")
            for i in range(0, len(gaps), 16):   # short lines
                lines.append(f"{role}=" + ",".join(f"{g / 1e3:.1f}" for g in gaps[i:i + 16]))
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
