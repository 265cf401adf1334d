#!/usr/bin/env python3
"""steal_report.py: bench/steal_device.sh's runs as tables: --sched part against steal, and
fp-kv against memcached -t N where the runs have it.

    bench/steal_report.py DIR      (DIR: steal_device.sh's OUTDIR; repetitions in DIR/r*/)

For every service distribution, worker count and offered rate: p99 of each policy, median
over the repetitions with min-max, and the ratio part/steal taken within each repetition
(the two ran back to back): "steal better" only when every repetition's ratio is above 1,
"part better" only when every one is below. A point fp-loadgen marked invalid (achieved
under 99% of offered, or its client slipped) is shown with '*' and is not given a verdict.
The second table, for fp-kv's runs with memcached beside them, takes memcached's p99 over
fp-kv's (each policy) within each repetition, the same way.
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


def verdict(ratios, valid, better, worse):
    if not valid:
        return "invalid points*"
    if all(x > 1 for x in ratios):
        return f"**{better} better**" if len(ratios) > 1 else f"{better} better (one run)"
    if all(x < 1 for x in ratios):
        return f"{worse} better" if len(ratios) > 1 else f"{worse} better (one run)"
    return "within noise"


def star(ps):
    return "" if all(p["valid"] for p in ps) else "*"


def p99s(ps):
    return [p["latency_us"]["p99"] for p in ps]


def memcached_table(runs):
    rows = []
    for (svc, n), reps in sorted(runs.items()):
        three = [r for r in reps.values() if all(k in r for k in ("part", "steal", "memcached"))]
        for i, p0 in enumerate(three[0]["memcached"] if three else []):
            mc = [r["memcached"][i] for r in three]
            cells = [f"{n}", f"{p0['target_rps'] / 1000:.0f}k", f"{len(three)}",
                     f"{fmt(p99s(mc))}{star(mc)}"]
            for sched in ("part", "steal"):
                kv = [r[sched][i] for r in three]
                ratios = [a / b for a, b in zip(p99s(mc), p99s(kv))]
                cells += [f"{fmt(p99s(kv))}{star(kv)}",
                          f"{', '.join(f'{x:.2f}' for x in ratios)}: "
                          f"{verdict(ratios, all(p['valid'] for p in mc + kv), 'fp-kv', 'memcached')}"]
            rows.append(cells)
    if not rows:
        return
    print("\n| workers | offered req/s | reps | memcached p99 µs | fp-kv part p99 µs | "
          "memcached/fp-kv part, per rep | fp-kv steal p99 µs | memcached/fp-kv steal, per rep |")
    print("|---|---|---|---|---|---|---|---|")
    for c in rows:
        print("| " + " | ".join(c) + " |")


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
            ratios = [a / b for a, b in zip(p99s(part), p99s(steal))]
            v = verdict(ratios, valid, "steal", "part")
            label = "fp-kv (USR)" if svc == "kv" else f"{svc} 10 µs"
            print(f"| {label} | {n} | {p0['target_rps'] / 1000:.0f}k | {len(both)} | "
                  f"{fmt([p['latency_us']['p99'] for p in part])}{star(part)} | "
                  f"{fmt([p['latency_us']['p99'] for p in steal])}{star(steal)} | "
                  f"{', '.join(f'{x:.2f}' for x in ratios)} | {v} |")
    memcached_table(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
