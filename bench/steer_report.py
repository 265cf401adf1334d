#!/usr/bin/env python3
"""Tables for bench/steer_device.sh's output: what handing frames between workers costs.

    bench/steer_report.py DIR        (DIR: docs/steer/<machine>, as steer_device.sh wrote it)

Per worker count N and server table ("mod": the loadgen's own table, nothing handed over;
"blocks": contiguous groups, (N-1)/N of the frames land on the wrong worker): the share of
received frames handed over, the server's busy time per request (all workers' busy cycles
over the requests they answered, warm-up included in both), and the loadgen's p50 and p99.
Medians over the repetitions with [min-max]; every repetition is listed in the JSON files.
The last column divides the difference in busy time per request between the two tables by
the difference in hand-overs per request: the cost of one hand-over, end to end, with its
range from the extreme pairs. Then fp-micro's per-frame figures (micro.txt)."""
import json
import pathlib
import re
import statistics
import sys


def runs(d):
    out = {}
    for f in sorted(d.glob("n*_*_r*.stats.json")):
        m = re.match(r"n(\d+)_(mod|blocks)_r(\d+)\.stats\.json", f.name)
        if not m:
            continue
        n, table = int(m.group(1)), m.group(2)
        st = json.loads(f.read_text().strip().splitlines()[-1])
        lg = json.loads((d / f.name.replace(".stats.json", ".json")).read_text())
        p = lg["points"][0]
        ws = st["workers"]
        ops = sum(w["app_ops"] for w in ws)
        busy_us = sum(w["busy_cycles"] for w in ws) / st["tsc_hz"] * 1e6
        rx = sum(w["rx_frames"] for w in ws)
        out.setdefault((n, table), []).append({
            "handed": sum(w["steer_out"] for w in ws) / rx if rx else 0.0,
            "handed_per_op": sum(w["steer_out"] for w in ws) / ops if ops else 0.0,
            "busy_us_per_op": busy_us / ops if ops else float("nan"),
            "p50": p["latency_us"]["p50"], "p99": p["latency_us"]["p99"],
            "errors": p["errors"] + p["timeouts"], "rate": p["achieved_rps"],
            "drop": sum(w["steer_drop"] for w in ws)})
    return out


def med(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = pathlib.Path(sys.argv[1])
    r = runs(d)
    print(f"from {d} ({(d / 'machine.txt').read_text().splitlines()[0].strip()})\n")
    print("| workers | server table | handed over | busy per request (us) | p50 (us) | p99 (us) |"
          " errors | one hand-over, end to end (ns) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sorted({k[0] for k in r}):
        for table in ("mod", "blocks"):
            xs = r.get((n, table))
            if not xs:
                continue
            cost = ""
            if table == "blocks" and (n, "mod") in r:
                ys = r[(n, "mod")]
                dh = statistics.median(x["handed_per_op"] for x in xs) - \
                    statistics.median(y["handed_per_op"] for y in ys)
                if dh > 0:
                    mid = (statistics.median(x["busy_us_per_op"] for x in xs) -
                           statistics.median(y["busy_us_per_op"] for y in ys)) / dh * 1e3
                    lo = (min(x["busy_us_per_op"] for x in xs) -
                          max(y["busy_us_per_op"] for y in ys)) / dh * 1e3
                    hi = (max(x["busy_us_per_op"] for x in xs) -
                          min(y["busy_us_per_op"] for y in ys)) / dh * 1e3
                    cost = f"{mid:.0f} [{lo:.0f} to {hi:.0f}]"
            print(f"| {n} | {table} | {med([x['handed'] * 100 for x in xs], '{:.1f}')}% |"
                  f" {med([x['busy_us_per_op'] for x in xs], '{:.2f}')} |"
                  f" {med([x['p50'] for x in xs], '{:.1f}')} | {med([x['p99'] for x in xs], '{:.1f}')} |"
                  f" {sum(x['errors'] for x in xs)} | {cost} |")
    micro = d / "micro.txt"
    if micro.exists():
        print("\nfp-micro --only steer (per frame, median of 15 runs [min-max]):\n")
        for line in micro.read_text().splitlines():
            m = re.match(r"(steer .*?)\s{2,}([\d.]+) ns/op\s+\(min ([\d.]+), max ([\d.]+)", line)
            if m:
                print(f"- {m.group(1)}: {m.group(2)} ns [{m.group(3)}-{m.group(4)}]")


if __name__ == "__main__":
    main()
