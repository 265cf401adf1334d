#!/usr/bin/env python3
"""vsim_kv.py: fp-kv on 1 to 16 cores, partitioned and stealing, in the many-core simulator.

fp-vsim --full --app kv runs fp-kv's own server (apps/kv/server.c: evl, the protocol, one
store shared by the workers), rt/'s worker loop, the TCP/IP stack and steal.c on N virtual
cores, with fp-loadgen's memcache client (USR: 99.8% GET, every key stored first). Three
parts, each a markdown table on stdout and JSON in --out:

  calibrate  The real code's own time on this machine (fp-vsim --full --calibrate, the
             TSC around each round, fitted to poll, rx per frame, tx per burst and steal
             per flow; fp-kv's handler timed apart, per command), --calib-runs times at
             -n --calib-workers; the medians are written as a --costs file (--costs-out)
             and the handler's median as the service time per command.
  scale      For n = --workers, partitioned and stealing, over --seeds seeds: the highest
             load whose p99 <= --slo-us (fp-vsim --max-load), as requests/s, and per core
             against one worker; --flows-per-worker connections per worker.
  curve      n = the largest of --workers: p50 and p99 against the rate, both policies.

Same seed, same result: the spread over seeds is the workload's, not this machine's (the
machine enters only through the calibration, which is measured, with its spread shown).

Usage: .venv/bin/python bench/vsim_kv.py [--parts calibrate,scale,curve] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COST_NAMES = ("poll_ns", "rx_ns", "tx_ns", "steal_ns")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"vsim_kv: {' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def med(xs):
    return statistics.median(xs), min(xs), max(xs)


def fmt(t, digits=0, scale=1.0):
    m, lo, hi = (x * scale for x in t)
    return f"{m:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def read_costs(path):
    costs, handler = {}, None
    for line in open(path):
        if "--mean-us" in line and line.startswith("#"):
            handler = float(line.rsplit("--mean-us", 1)[1].split()[0])
        line = line.split("#")[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            costs[k.strip()] = float(v)
    return costs, handler


def calibrate(a, vsim):
    rows = []
    for i in range(a.calib_runs):
        path = os.path.join(a.out, f"calib-{i + 1}.txt")
        run([vsim, "--full", "--app", "kv", "-n", str(a.calib_workers), "-l", str(a.calib_load),
             "--requests", str(a.requests), "--seed", str(i + 1), "--quiet",
             "--calibrate", path])
        costs, handler = read_costs(path)
        costs["handler_us"] = handler
        rows.append(costs)
        print(f"  calibration {i + 1}/{a.calib_runs}: " +
              ", ".join(f"{k} {v:g}" for k, v in costs.items()), file=sys.stderr)
    res = {k: med([r[k] for r in rows]) for k in (*COST_NAMES, "handler_us")}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(a.costs_out, "w") as f:
        f.write(f"# fp-vsim --full --app kv --calibrate on this machine, {when}: "
                f"{a.calib_workers} workers, steal, load {a.calib_load}, {a.requests} requests, "
                f"{a.calib_runs} runs (seeds 1-{a.calib_runs}); each value the median "
                f"(min-max in the comment)\n")
        f.write(f"#   .venv/bin/python {' '.join(sys.argv)}\n")
        f.write(f"# fp-kv's handler (evl and the protocol), per command: --mean-us "
                f"{res['handler_us'][0]:.3f} ({res['handler_us'][1]:.3f}-"
                f"{res['handler_us'][2]:.3f})\n")
        for k in COST_NAMES:
            m, lo, hi = res[k]
            f.write(f"{k}={m:.1f}\n# {lo:.1f}-{hi:.1f}\n")
    print(f"\n### Calibration ({when}, {a.calib_runs} runs at -n {a.calib_workers}, "
          f"written to {os.path.relpath(a.costs_out, ROOT)})\n")
    print("| cost | median (min-max) |\n|---|---|")
    for k in (*COST_NAMES, "handler_us"):
        print(f"| {k} | {fmt(res[k], 3 if k == 'handler_us' else 1)} |")
    return {"runs": rows, "median": {k: v[0] for k, v in res.items()}}


def base(a, vsim, n, sched, seed):
    return [vsim, "--full", "--app", "kv", "-n", str(n), "--sched", sched, "--seed", str(seed),
            "--flows", str(a.flows_per_worker * n),
            "--requests", str(a.requests), "--costs", a.costs, "--mean-us", f"{a.mean_us:g}",
            "--quiet", "--format", "json"]


def scale(a, vsim):
    cells = {}
    for n in a.workers:
        for sched in ("part", "steal"):
            loads = []
            for seed in range(1, a.seeds + 1):
                j = json.loads(run(base(a, vsim, n, sched, seed) +
                                   ["--max-load", "--slo-us", f"{a.slo_us:g}"]))
                loads.append(j["max_load"])
            rates = [l * n / a.mean_us for l in loads]   # Mreq/s
            cells[f"{sched}/{n}"] = {"n": n, "sched": sched, "max_load": loads, "mrps": rates}
            print(f"  n={n} {sched}: {fmt(med(rates), 3)} Mreq/s at p99 <= {a.slo_us:g} us",
                  file=sys.stderr)
    print(f"\n### fp-kv at the SLO (p99 <= {a.slo_us:g} us), Mreq/s, median (min-max) over "
          f"{a.seeds} seeds\n")
    print("| workers | partitioned | per core vs 1 | stealing | per core vs 1 | steal/part |")
    print("|---|---|---|---|---|---|")
    one = {s: statistics.median(cells[f"{s}/{a.workers[0]}"]["mrps"]) / a.workers[0]
           for s in ("part", "steal")}
    for n in a.workers:
        p, s = cells[f"part/{n}"]["mrps"], cells[f"steal/{n}"]["mrps"]
        ratio = [y / x for x, y in zip(p, s)]   # per seed: same draws
        lo, hi = min(ratio), max(ratio)
        verdict = "steal wins" if lo > 1 else "part wins" if hi < 1 else "within spread"
        print(f"| {n} | {fmt(med(p), 3)} | {statistics.median(p) / n / one['part']:.2f} | "
              f"{fmt(med(s), 3)} | {statistics.median(s) / n / one['steal']:.2f} | "
              f"{fmt(med(ratio), 2)} {verdict} |")
    return cells


def curve(a, vsim):
    n = max(a.workers)
    pts = {}
    for sched in ("part", "steal"):
        j = json.loads(run(base(a, vsim, n, sched, 1) + ["--sweep", a.sweep]))
        pts[sched] = j["points"]
    print(f"\n### fp-kv at {n} workers: latency against the rate (seed 1)\n")
    print("| load | offered Mreq/s | part: achieved | p50 µs | p99 µs | steal: achieved | "
          "p50 µs | p99 µs | stolen |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p, s in zip(pts["part"], pts["steal"]):
        stolen = 100.0 * s["steals"] / s["batches"] if s["batches"] else 0
        print(f"| {p['load']:.2f} | {p['offered_mrps']:.2f} | {p['achieved_mrps']:.2f} | "
              f"{p['p50_us']:.1f} | {p['p99_us']:.1f} | {s['achieved_mrps']:.2f} | "
              f"{s['p50_us']:.1f} | {s['p99_us']:.1f} | {stolen:.0f}% |")
    return pts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--parts", default="scale,curve",
                    help="comma list of calibrate, scale, curve (default scale,curve)")
    ap.add_argument("--costs", default=os.path.join(ROOT, "bench/costs/full-kv-kvm2.txt"),
                    help="scale, curve: the cost file (default: fp-kv's calibration here; "
                         "with calibrate, the one it writes)")
    ap.add_argument("--costs-out", default=None,
                    help="calibrate: where to write (default: results/vsim_kv/costs.txt)")
    ap.add_argument("--mean-us", type=float, default=None,
                    help="fp-kv's service time per command (default: the handler's time in "
                         "the cost file's comment)")
    ap.add_argument("--calib-runs", type=int, default=5)
    ap.add_argument("--calib-workers", type=int, default=16)
    ap.add_argument("--calib-load", type=float, default=0.2)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--slo-us", type=float, default=50.0)
    ap.add_argument("--flows-per-worker", type=int, default=64,
                    help="connections per worker (default 64: 1024 at 16 workers); fixed per "
                         "worker so that each core sees the same traffic (a connection's "
                         "rate decides how many of the client's ACKs ride on requests)")
    ap.add_argument("--sweep", default="0.05:0.45:0.05",
                    help="curve: fp-vsim --sweep A:B:STEP (load = rate x S / n)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/vsim_kv"))
    a = ap.parse_args()
    parts = [p for p in a.parts.split(",") if p]
    for p in parts:
        if p not in ("calibrate", "scale", "curve"):
            sys.exit(f"vsim_kv: --parts: unknown part '{p}' (calibrate, scale, curve)")
    a.workers = [int(x) for x in a.workers.split(",")]
    vsim = os.path.join(a.build, "tools/vsim/fp-vsim")
    if not os.path.exists(vsim):
        sys.exit(f"vsim_kv: {vsim}: not built (./flowplane build release)")
    os.makedirs(a.out, exist_ok=True)
    out = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if "calibrate" in parts:
        if a.costs_out is None:
            a.costs_out = os.path.join(a.out, "costs.txt")
        out["calibration"] = calibrate(a, vsim)
        a.costs = a.costs_out
    if not os.path.exists(a.costs):
        sys.exit(f"vsim_kv: --costs {a.costs}: no such file (run --parts calibrate)")
    costs, handler = read_costs(a.costs)
    if a.mean_us is None:
        if handler is None:
            sys.exit(f"vsim_kv: {a.costs} names no handler time: give --mean-us")
        a.mean_us = handler
    out.update(costs_file=os.path.relpath(a.costs, ROOT), costs=costs, mean_us=a.mean_us,
               slo_us=a.slo_us, seeds=a.seeds, requests=a.requests)
    print(f"# costs {os.path.relpath(a.costs, ROOT)}: " +
          ", ".join(f"{k} {v:g}" for k, v in costs.items()) +
          f"; fp-kv's service time det {a.mean_us:g} us a command", file=sys.stderr)
    if "scale" in parts:
        out["scale"] = scale(a, vsim)
    if "curve" in parts:
        out["curve"] = curve(a, vsim)
    with open(os.path.join(a.out, "vsim_kv.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
