#!/usr/bin/env python3
"""steal_report.py: bench/steal_device.sh's runs as one table: --sched part against steal.

    bench/steal_report.py DIR      (DIR: steal_device.sh's OUTDIR; repetitions in DIR/r*/)

For every service distribution, worker count and offered rate: p99 of each policy, median
over the repetitions with min-max, and the ratio part/steal taken within each repetition
(the two ran back to back): "steal better" only when every repetition's ratio is above 1,
"part better" only when every one is below. A point fp-loadgen marked invalid (achieved
under 99% of offered, or its client slipped) is shown with '*' and is not given a verdict.
"""
import json
import os
import statistics
import sys


def load(d):
    runs = {}
    dirs = [d] + sorted(os.path.join(d, x) for x in os.listdir(d) if x.startswith("r") and
                        os.path.isdir(os.path.join(d, x)))
    for rep, sub in enumerate(dirs):
        for f in os.listdir(sub):
            if not f.endswith(".json"):
                continue
            svc, n, sched = f[:-5].split("_")
            doc = json.load(open(os.path.join(sub, f)))
            runs.setdefault((svc, int(n[1:])), {}).setdefault(rep, {})[sched] = doc["points"]
    return runs


def fmt(xs):
    xs = sorted(xs)
    med = statistics.median(xs)
    return f"{med:.0f} ({xs[0]:.0f}-{xs[-1]:.0f})" if len(xs) > 1 else f"{med:.0f}"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: steal_report.py DIR (bench/steal_device.sh's output)")
    runs = load(sys.argv[1])
    print("| service | workers | offered req/s | reps | part p99 µs | steal p99 µs | "
          "part/steal p99, per rep | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for (svc, n), reps in sorted(runs.items()):
        both = [r for r in reps.values() if "part" in r and "steal" in r]
        if not both:
            continue
        for i, p0 in enumerate(both[0]["part"]):
            part = [r["part"][i] for r in both]
            steal = [r["steal"][i] for r in both]
            valid = all(p["valid"] for p in part + steal)
            ratios = [a["latency_us"]["p99"] / b["latency_us"]["p99"] for a, b in zip(part, steal)]
            if not valid:
                verdict = "invalid points*"
            elif all(x > 1 for x in ratios):
                verdict = "**steal better**" if len(ratios) > 1 else "steal better (one run)"
            elif all(x < 1 for x in ratios):
                verdict = "part better" if len(ratios) > 1 else "part better (one run)"
            else:
                verdict = "within noise"
            star = lambda ps: "" if all(p["valid"] for p in ps) else "*"
            label = "fp-kv (USR)" if svc == "kv" else f"{svc} 10 µs"
            print(f"| {label} | {n} | {p0['target_rps'] / 1000:.0f}k | {len(both)} | "
                  f"{fmt([p['latency_us']['p99'] for p in part])}{star(part)} | "
                  f"{fmt([p['latency_us']['p99'] for p in steal])}{star(steal)} | "
                  f"{', '.join(f'{x:.2f}' for x in ratios)} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
