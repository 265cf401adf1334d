#!/usr/bin/env python3
"""Tables for bench/migrate_device.sh's output: moving flow groups under load.

    bench/migrate_report.py DIR

Per worker count N and mode (static: no moves; moving: fp-ctl moving each group in turn to
the next worker during the measured part): the loadgen's achieved rate, p50, p99, p99.9 and
max latency, requests dropped or timed out; for moving runs the moves made, the TCP
connections that moved with them, frames held while their group was in flight, and each
move's duration inside the server (the old owner's switch of the table to the last held
frame going up at the new owner: mean and longest) and as fp-ctl saw it (command to
arrival, which includes the runtime's 10 ms command poll). Medians over the repetitions
with [min-max]."""
import json
import pathlib
import re
import statistics
import sys


def med(xs, fmt="{:.1f}"):
    if not xs:
        return "-"
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = pathlib.Path(sys.argv[1])
    runs = {}
    for f in sorted(d.glob("n*_*_r*.json")):
        if f.name.endswith(".stats.json"):
            continue
        m = re.match(r"n(\d+)_(static|moving)_r(\d+)\.json", f.name)
        if not m:
            continue
        p = json.loads(f.read_text())["points"][0]
        st = json.loads((d / f.name.replace(".json", ".stats.json")).read_text()
                        .strip().splitlines()[-1])
        ws = st["workers"]
        ctl = [float(x) for x in re.findall(r"in ([\d.]+) ms",
                                             (d / f.name.replace(".json", ".ctl.log")).read_text())]
        moves = sum(w["moves_in"] for w in ws)
        runs.setdefault((int(m.group(1)), m.group(2)), []).append({
            "rate": p["achieved_rps"], "p50": p["latency_us"]["p50"],
            "p99": p["latency_us"]["p99"], "p999": p["latency_us"]["p999"],
            "max": p["latency_us"]["max"], "lost": p["dropped"] + p["timeouts"] + p["errors"],
            "moves": moves, "conns": sum(w["move_conns"] for w in ws),
            "held": sum(w["move_held"] for w in ws),
            "mean_us": sum(w["move_ns"] for w in ws) / moves / 1e3 if moves else None,
            "max_us": max(w["move_ns_max"] for w in ws) / 1e3,
            "ctl_ms": statistics.median(ctl) if ctl else None,
            "rst": sum(w["net"]["tcp_rst_tx"] for w in ws)})
    first = (d / "machine.txt").read_text().splitlines()[0].strip()
    print(f"from {d} ({first})\n")
    print("| workers | mode | achieved req/s | p50 (us) | p99 (us) | p99.9 (us) | max (us) |"
          " lost | moves | conns moved | frames held | move in server, mean (us) |"
          " longest (us) | fp-ctl, command to arrival (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (n, mode) in sorted(runs, key=lambda k: (k[0], k[1] != "static")):
        xs = runs[(n, mode)]
        mv = mode == "moving"
        print(f"| {n} | {mode} | {med([x['rate'] for x in xs], '{:.0f}')} |"
              f" {med([x['p50'] for x in xs])} | {med([x['p99'] for x in xs])} |"
              f" {med([x['p999'] for x in xs])} | {med([x['max'] for x in xs], '{:.0f}')} |"
              f" {sum(x['lost'] for x in xs)} (RST {sum(x['rst'] for x in xs)}) |"
              f" {med([x['moves'] for x in xs], '{:.0f}') if mv else '-'} |"
              f" {med([x['conns'] for x in xs], '{:.0f}') if mv else '-'} |"
              f" {med([x['held'] for x in xs], '{:.0f}') if mv else '-'} |"
              f" {med([x['mean_us'] for x in xs if x['mean_us']]) if mv else '-'} |"
              f" {med([x['max_us'] for x in xs], '{:.0f}') if mv else '-'} |"
              f" {med([x['ctl_ms'] for x in xs if x['ctl_ms']]) if mv else '-'} |")


if __name__ == "__main__":
    main()
