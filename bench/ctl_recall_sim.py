#!/usr/bin/env python3
"""ctl_recall_sim.py: does IX's control loop flap at a steady load, and does down_recall stop it?

fp-vsim (virtual time, 16 partitioned workers, exponential service of --mean-us, zero
overheads but a group move's and a wake-up's) runs IX's loop (ctl/policy.c, the code fp-ctl
runs) at a constant arrival rate for --seconds, starting from one worker, at each load in
--loads (fractions of n workers' capacity) and for each policy:

  ix      fp-ctl's default policy, scaled to the short run: a tick every 10 ms, no removal
          within 100 ms of a change, queueing-delay bound --delay-us
  recall  the same with down_recall = --recall: no removal back to n - 1 workers while the
          request rate is at or above recall x the rate at which n - 1 failed the bound

The first --ramp-s of each run (the climb from one worker) is not judged. Reported per load
and policy, median (min-max) over --seeds seeds: removals (each one after the climb is a
flap at a constant load), windows of --window-ms whose p99 exceeds the SLO (10 x the mean
service time), the median window p99, and the mean workers polling, all after the climb.

Usage: .venv/bin/python bench/ctl_recall_sim.py [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def med(xs):
    if not xs:
        return "–"
    m, lo, hi = statistics.median(xs), min(xs), max(xs)
    f = (lambda v: f"{v:.0f}") if max(abs(v) for v in xs) >= 10 else (lambda v: f"{v:.1f}")
    return f"{f(m)} ({f(lo)}-{f(hi)})"


def run(a, policy_path, load, seed):
    rate = load * a.n / (a.mean_us * 1e-6)
    cmd = [a.vsim, "-n", str(a.n), "--sched", "part", "--mean-us", str(a.mean_us),
           "-d", "exp", "--seed", str(seed), "--pattern", f"step:{rate:.0f}:{rate:.0f}:{rate:.0f}:1:1",
           "--pattern-s", str(a.seconds), "--ctl", "--policy", policy_path,
           "--windows", str(a.window_ms * 1000), "--cost", f"wake_ns={a.wake_ns}",
           "--cost", f"move_ns={a.move_ns}", "--format", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"ctl_recall_sim: fp-vsim failed: {r.stderr.strip()[-300:]}\n  {' '.join(cmd)}")
    p = json.loads(r.stdout)["points"][0]
    steady = [w for w in p["windows"] if w["t_ms"] >= a.ramp_s * 1000]
    slo = 10 * a.mean_us
    return {
        "load": load, "seed": seed, "ups": p["ctl"]["ups"], "downs": p["ctl"]["downs"],
        "windows": len(steady),
        "over_slo": sum(1 for w in steady if w["p99_us"] > slo),
        "p99_us": statistics.median(w["p99_us"] for w in steady) if steady else None,
        "cores": statistics.mean(w["mean_cores"] for w in steady) if steady else None,
        "command": " ".join(cmd),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--mean-us", type=float, default=10.0)
    ap.add_argument("--loads", default="0.5,0.6,0.7,0.75,0.8,0.85")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--ramp-s", type=float, default=1.0)
    ap.add_argument("--window-ms", type=int, default=100)
    ap.add_argument("--delay-us", type=float, default=60.0,
                    help="the loop's queueing-delay bound (IX: 300 for a 500 us SLO; the "
                         "default keeps that ratio to this SLO of 10 x the mean)")
    ap.add_argument("--recall", type=float, default=0.9)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--wake-ns", type=int, default=104000,
                    help="a worker's wake-up (C6 exit, bench/power/xeon-e5-2665.txt)")
    ap.add_argument("--move-ns", type=int, default=6000,
                    help="a group's move (docs/results.md)")
    ap.add_argument("--vsim", default=os.path.join(ROOT, "build", "release", "tools", "vsim",
                                                   "fp-vsim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "ctl_recall_sim"))
    a = ap.parse_args()
    if not os.access(a.vsim, os.X_OK):
        sys.exit(f"ctl_recall_sim: no {a.vsim}: build it first (./flowplane build release)")
    os.makedirs(a.out, exist_ok=True)
    base = (f"interval_ms = 10\ndown_hold_ms = 100\ndelay_max_us = {a.delay_us}\n")
    policies = {"ix": base, "recall": base + f"down_recall = {a.recall}\n"}
    paths = {}
    for name, text in policies.items():
        paths[name] = os.path.join(a.out, f"policy-{name}.txt")
        with open(paths[name], "w") as f:
            f.write(text)
    loads = [float(x) for x in a.loads.split(",")]
    runs, t0 = [], time.time()
    total = len(loads) * len(policies) * a.seeds
    for load in loads:
        for seed in range(1, a.seeds + 1):
            for name in policies:
                r = run(a, paths[name], load, seed)
                r["policy"] = name
                runs.append(r)
                print(f"ctl_recall_sim: {len(runs)}/{total}: load {load} seed {seed} {name}: "
                      f"{r['downs']} removals, {r['over_slo']}/{r['windows']} windows over "
                      f"the SLO ({time.time() - t0:.0f} s)", file=sys.stderr)
    cmd = "`.venv/bin/python bench/ctl_recall_sim.py " + " ".join(sys.argv[1:]) + "`"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"ctl_recall_sim, {when}: {cmd}; fp-vsim, {a.n} partitioned workers, exponential "
             f"{a.mean_us:g} us, constant rate for {a.seconds:g} s from one worker, judged after "
             f"{a.ramp_s:g} s, windows of {a.window_ms} ms, SLO p99 <= {10 * a.mean_us:g} us, "
             f"delay bound {a.delay_us:g} us, down_recall {a.recall:g}; median (min-max) over "
             f"{a.seeds} seeds", "",
             "| load | policy | removals | windows over the SLO (of " +
             str(runs[0]["windows"]) + ") | median window p99, us | workers polling |",
             "|---|---|---|---|---|---|"]
    for load in loads:
        for name in policies:
            rs = [r for r in runs if r["load"] == load and r["policy"] == name]
            lines.append(f"| {load:g} | {name} | {med([r['downs'] for r in rs])} | "
                         f"{med([r['over_slo'] for r in rs])} | "
                         f"{med([r['p99_us'] for r in rs])} | {med([r['cores'] for r in rs])} |")
    md = "\n".join(lines) + "\n"
    print(md)
    with open(os.path.join(a.out, "ctl_recall_sim.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "ctl_recall_sim.json"), "w") as f:
        json.dump({"command": cmd, "date": when, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
