#!/usr/bin/env python3
"""stack_callgrind.py: instructions per 64-byte round trip through two stacks, split per layer.

Runs `fp-stack-bench rr` under valgrind --tool=callgrind for two round-trip counts and
divides the difference in instructions by the difference in counts, so setup and teardown
cancel out. The self cost of every function is put in a layer by its source file when the
binary has debug info, else by its name prefix.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

LAYERS = [
    # (layer, file path fragment, function-name regex)
    ("tcp", "/net/tcp", r"^(tcp_|fp_tcp_)"),
    ("net: eth/arp/ip/icmp/udp", "/net/", r"^(net_|arp_|ipv4_|icmp_|udp_|fp_stack_|fp_udp_)"),
    ("wire: parse/emit", "/wire/", r"^fp_(eth|arp|ipv4|icmp|udp|tcp)_(parse|emit|set_csum|opts)"),
    ("base: buffers/timers/cksum", "/base/", r"^(fp_pool|__fp_pool|fp_mbuf|fp_timer|__fp_timer|fp_csum|fp_rss|fp_toeplitz)"),
    ("sim wire (copy, fault draw)", "/dev/", r"^(fp_sim|sim_)"),
    ("bench application", "/bench/", r"^(server_app|client_app|client_event|send_msg|rr_done)"),
    ("libc (memcpy, malloc)", "libc", r"^(__memcpy|memcpy|__memmove|memmove|__memset|memset|malloc|free|_int_|__libc|cfree)"),
]


def layer_of(fn_field):
    path, _, fn = fn_field.rpartition(":")
    fn = fn.split(" ")[0]
    for name, frag, rx in LAYERS:
        if path and path != "???" and frag in path:
            return name
    for name, frag, rx in LAYERS:
        if re.match(rx, fn):
            return name
    return "other"


def run(bench, count, outdir):
    out = os.path.join(outdir, f"cg.{count}")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           bench, "rr", "--count", str(count)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"stack_callgrind: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    ann = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no",
                          "--show-percs=no", out], capture_output=True, text=True, check=True)
    total = 0
    per = {}
    for line in ann.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(\(.*?\)\s+)?(\S.*)$", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        what = m.group(3)
        if what.startswith("PROGRAM TOTALS"):
            total = ir
            continue
        if ":" not in what or what.startswith("file:function"):
            continue
        lay = layer_of(what.split(" [")[0])
        per[lay] = per.get(lay, 0) + ir
    return total, per


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=os.environ.get("FP_STACK_BENCH", "build/release/bench/fp-stack-bench"))
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    a = ap.parse_args()
    if a.large <= a.small or a.small < 1:
        ap.error("--large must exceed --small, both positive")
    if not os.access(a.bench, os.X_OK):
        ap.error(f"no benchmark binary at {a.bench} (./flowplane build release)")
    with tempfile.TemporaryDirectory() as d:
        t1, p1 = run(a.bench, a.small, d)
        t2, p2 = run(a.bench, a.large, d)
    n = a.large - a.small
    print(f"instructions per 64-byte request/response round trip "
          f"(({t2} - {t1}) / {n}): {(t2 - t1) / n:.0f}")
    print(f"{'layer':32} {'instr/RT':>10}")
    rows = sorted({*p1, *p2}, key=lambda k: -(p2.get(k, 0) - p1.get(k, 0)))
    for k in rows:
        print(f"{k:32} {(p2.get(k, 0) - p1.get(k, 0)) / n:10.0f}")


if __name__ == "__main__":
    main()
