#!/usr/bin/env python3
"""vsim_validate.py: is the many-core simulator (fp-vsim) right, and what does it say at 16 cores?

Three parts, each a markdown table on stdout and JSON in --out:

  bounds  Validation 1. fp-vsim with every overhead at zero against tools/qsim: stealing
          (victims by oldest head, interrupts, as qsim --disc steal models ZygOS) and
          partitioned (qsim --disc part, n x M/G/1), p99 over --seeds seeds with 95%
          t-intervals; a cell matches when the intervals overlap. Theory also says
          M/G/n FCFS <= stealing <= partitioned, which is checked on the means.
  real    Validation 2. For every real-thread sweep in --real-dir (bench/vsim_device.sh's
          real_<sched>_n<N>.json), the virtual world with the cost model of --costs,
          same workload and seed: p99 per load, the ratio virtual/real, and whether it is
          within 15%.
  zygos   ZygOS's headline at 16 cores: the highest load with p99 <= 10 x S for
          det, exp, bimodal1 at S = 5, 10, 25, 50 us, as a fraction of M/G/16 FCFS's,
          for stealing and partitioned in the calibrated simulator, beside qsim's ideal
          stealing and partitioned bounds.

  full    The real dataplane (fp-vsim --full: rt/'s worker loop, the TCP/IP stack,
          steal.c and fp-echo spin --native in virtual time) against the model: p99 per
          load for n = 1, 2, 16, partitioned and stealing, at zero overheads, with the
          NIC's batch at its default (64) and at 1 frame a round; then ZygOS's headline
          at 16 cores with the real code, at zero overheads and with a per-frame cost.

Usage: ./flowplane bench-vsim [--quick] [--parts bounds,zygos,full,real] [--real-dir DIR]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 15: 2.13, 20: 2.09, 30: 2.04}


RES = 0.01   # the histograms' resolution, relative (1/128 bucket width, rounded up)


def t95(df):
    keys = sorted(k for k in T95 if k <= df)
    return T95[keys[-1]] if keys else T95[1]


def interval(xs):
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0,):
        sys.exit(f"vsim_validate: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


class Tools:
    def __init__(self, build):
        self.vsim = os.path.join(build, "tools/vsim/fp-vsim")
        self.qsim = os.path.join(build, "tools/qsim/qsim")
        for p in (self.vsim, self.qsim):
            if not os.access(p, os.X_OK):
                sys.exit(f"vsim_validate: {p} is missing: ./flowplane build")

    def vsim_sweep(self, n, disc, dist, loads, seed, requests, extra=()):
        sched = ["--sched", "part"] if disc == "part" else [
            "--sched", "steal", "--victim", "oldest", "--notify", "ipi"]
        pts = []
        for load in loads:
            d = run_json([self.vsim, "-n", str(n), *sched, "-d", dist, "-l", str(load),
                          "--requests", str(requests), "--seed", str(seed), "--format",
                          "json", "--quiet", *extra])
            pts.append(d["points"][0])
        return pts

    def qsim_sweep(self, n, disc, dist, loads, seed, requests):
        pts = []
        for load in loads:
            d = run_json([self.qsim, "-n", str(n), "--disc", disc, "-d", dist, "-l",
                          str(load), "-N", str(requests), "--seed", str(seed), "--format",
                          "json"])
            pts.append(d["points"][0])
        return pts


def fmt_ci(m, h):
    return f"{m:.1f} ± {h:.1f}"


def part_bounds(t, a, out):
    ns = [4, 16]
    dists = ["det", "exp", "bimodal1"] if not a.quick else ["exp", "bimodal1"]
    loads = [0.5, 0.7, 0.8, 0.9]
    seeds = list(range(1, a.seeds + 1))
    rows, ok_all, order_ok = [], True, True
    total = len(ns) * len(dists) * len(seeds)
    done, t0 = 0, time.time()
    for n in ns:
        for dist in dists:
            p99 = {k: [[] for _ in loads] for k in
                   ("vsim_steal", "qsim_steal", "vsim_part", "qsim_part", "qsim_fcfs")}
            for seed in seeds:
                for key, fn, disc in (("vsim_steal", t.vsim_sweep, "steal"),
                                      ("vsim_part", t.vsim_sweep, "part"),
                                      ("qsim_steal", t.qsim_sweep, "steal"),
                                      ("qsim_part", t.qsim_sweep, "part"),
                                      ("qsim_fcfs", t.qsim_sweep, "fcfs")):
                    pts = fn(n, disc, dist, loads, seed, a.requests)
                    for i, p in enumerate(pts):
                        p99[key][i].append(p["p99_us"])
                        if key.startswith("vsim") and p.get("order_errors"):
                            order_ok = False
                done += 1
                el = time.time() - t0
                print(f"[bounds {done}/{total}] n={n} {dist} seed {seed}, "
                      f"{el:.0f} s, ~{el / done * (total - done):.0f} s left", file=sys.stderr)
            for i, load in enumerate(loads):
                c = {k: interval(v[i]) for k, v in p99.items()}
                # Both tools read percentiles from fp_hist, whose buckets are up to 1/128
                # of their value wide: within RES of each other is the same value.
                def same(x, y):
                    return abs(c[x][0] - c[y][0]) <= c[x][1] + c[y][1] + RES * c[y][0]
                m_steal = same("vsim_steal", "qsim_steal")
                m_part = same("vsim_part", "qsim_part")
                between = c["qsim_fcfs"][0] <= c["vsim_steal"][0] * (1 + RES) and \
                    c["vsim_steal"][0] <= c["vsim_part"][0] * (1 + RES)
                ok_all &= m_steal and m_part and between
                rows.append({"n": n, "dist": dist, "load": load,
                             **{k: {"mean": v[0], "half95": v[1]} for k, v in c.items()},
                             "steal_match": m_steal, "part_match": m_part,
                             "fcfs_steal_part_order": between})
    print(f"\n### Validation 1: zero overheads against qsim (p99 µs, S = 10 µs, "
          f"{a.requests} requests, {len(seeds)} seeds, mean ± 95% half-interval; a match "
          f"is an overlap of the intervals widened by the histograms' 1% resolution)\n")
    print("| n | dist | load | fp-vsim steal | qsim steal | match | fp-vsim part | qsim part | "
          "match | qsim fcfs | fcfs ≤ steal ≤ part |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['dist']} | {r['load']} | "
              f"{fmt_ci(r['vsim_steal']['mean'], r['vsim_steal']['half95'])} | "
              f"{fmt_ci(r['qsim_steal']['mean'], r['qsim_steal']['half95'])} | "
              f"{'yes' if r['steal_match'] else '**no**'} | "
              f"{fmt_ci(r['vsim_part']['mean'], r['vsim_part']['half95'])} | "
              f"{fmt_ci(r['qsim_part']['mean'], r['qsim_part']['half95'])} | "
              f"{'yes' if r['part_match'] else '**no**'} | "
              f"{fmt_ci(r['qsim_fcfs']['mean'], r['qsim_fcfs']['half95'])} | "
              f"{'yes' if r['fcfs_steal_part_order'] else '**no**'} |")
    n_match = sum(r["steal_match"] + r["part_match"] for r in rows)
    print(f"\n{n_match} of {2 * len(rows)} cells match; replies out of order: "
          f"{'none' if order_ok else 'SOME'}")
    out["bounds"] = {"rows": rows, "all_match": ok_all, "order_ok": order_ok}


def part_real(t, a, out):
    d = a.real_dir
    files = [f for f in os.listdir(d) if f.startswith("real_") and f.endswith(".json")]
    if not files:
        sys.exit(f"vsim_validate: no real_*.json in {d} (bench/vsim_device.sh writes them)")
    # group repetitions: real_<policy>_n<N>[_r<k>].json
    groups = {}
    for f in files:
        real = json.load(open(os.path.join(d, f)))
        c = real["config"]
        policy = c["sched"] + ("-ipi" if c.get("notify") == "ipi" else "")
        groups.setdefault((c["workers"], policy), []).append(real)
    rows = []
    for (n, policy), reals in sorted(groups.items()):
        c = reals[0]["config"]
        for i, p0 in enumerate(reals[0]["points"]):
            pts = [r["points"][i] for r in reals]
            v = run_json([t.vsim, "-n", str(n), "--sched", c["sched"], "--victim", c["victim"],
                          "--notify", c.get("notify", "poll"), "-d", c["dist"], "--mean-us",
                          str(c["mean_service_us"]), "-l", str(p0["load"]), "--requests",
                          str(c["requests"]), "--flows", str(c["flows"]), "--batch",
                          str(c["batch"]), "--seed", str(c["seed"]), "--costs", a.costs,
                          "--format", "json", "--quiet"])["points"][0]
            p99s = sorted(p["p99_us"] for p in pts)
            med = statistics.median(p99s)
            ratio = v["p99_us"] / med if med else float("nan")
            rows.append({"n": n, "policy": policy, "load": p0["load"], "reps": len(pts),
                         "real_p99_us": {"median": med, "min": p99s[0], "max": p99s[-1]},
                         "virtual_p99_us": v["p99_us"], "ratio": ratio,
                         "within_15pct": abs(ratio - 1) <= 0.15,
                         "within_real_range": p99s[0] <= v["p99_us"] <= p99s[-1],
                         "real_steals": statistics.median(p["steals"] for p in pts),
                         "virtual_steals": v["steals"],
                         "real_irqs": statistics.median(p.get("irqs", 0) for p in pts),
                         "virtual_irqs": v["irqs"],
                         "generator_late_max_us": max(p.get("generator_late_max_us", 0)
                                                      for p in pts),
                         "real_order_errors": sum(p["order_errors"] for p in pts)})
    print(f"\n### Validation 2: calibrated virtual world against real threads "
          f"(costs: {os.path.relpath(a.costs, ROOT)}; real runs: {os.path.relpath(d, ROOT)})\n")
    print("| n | policy | load | real p99 µs, median (min-max) | virtual p99 µs | virtual/median "
          "| within 15% | real stolen | virtual stolen | real irqs | virtual irqs | "
          "generator late, max µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rp = r["real_p99_us"]
        print(f"| {r['n']} | {r['policy']} | {r['load']:.1f} | {rp['median']:.0f} "
              f"({rp['min']:.0f}-{rp['max']:.0f}) | {r['virtual_p99_us']:.0f} | "
              f"{r['ratio']:.2f} | {'yes' if r['within_15pct'] else 'no'} | "
              f"{r['real_steals']:.0f} | {r['virtual_steals']} | {r['real_irqs']:.0f} | "
              f"{r['virtual_irqs']} | {r['generator_late_max_us']:.0f} |")
    by_load = {}
    for r in rows:
        by_load.setdefault(r["load"], []).append(r["within_15pct"])
    print("\nwithin 15% of the real median, by load: " + ", ".join(
        f"{l:.1f}: {sum(v)}/{len(v)}" for l, v in sorted(by_load.items())))
    out["real"] = {"costs": a.costs, "dir": d, "rows": rows}


def max_load(cmd):
    d = run_json(cmd)
    m = d["max_load"]
    return m["load"] if isinstance(m, dict) else m


def part_zygos(t, a, out):
    n = 16
    dists = ["det", "exp", "bimodal1"]
    means = [5, 10, 25, 50] if not a.quick else [10, 25]
    req = a.requests
    rows = []
    total, done, t0 = len(dists) * len(means), 0, time.time()
    for dist in dists:
        for s in means:
            q = lambda disc: max_load([t.qsim, "-n", str(n), "--disc", disc, "-d", dist,
                                        "--mean-us", str(s), "--max-load", "-N", str(req),
                                        "--format", "json"])
            v = lambda sched, *extra: max_load([t.vsim, "-n", str(n), "--sched", sched, "-d",
                                                dist, "--mean-us", str(s), "--max-load",
                                                "--requests", str(req), "--costs", a.costs,
                                                "--format", "json", "--quiet", *extra])
            fcfs = q("fcfs")
            r = {"dist": dist, "mean_us": s, "qsim_fcfs": fcfs, "qsim_steal": q("steal"),
                 "qsim_part": q("part"), "vsim_steal": v("steal"), "vsim_part": v("part"),
                 "vsim_steal_ipi": v("steal", "--notify", "ipi"),
                 "vsim_steal_stack": v("steal", "--cost", f"rx_ns={a.stack_ns + a.rx_ns}")}
            for k in ("qsim_steal", "qsim_part", "vsim_steal", "vsim_part", "vsim_steal_stack",
                      "vsim_steal_ipi"):
                r[k + "_frac"] = r[k] / fcfs if fcfs else float("nan")
            rows.append(r)
            done += 1
            el = time.time() - t0
            print(f"[zygos {done}/{total}] {dist} S={s} us: steal {r['vsim_steal_frac']:.2f} "
                  f"of M/G/16, {el:.0f} s, ~{el / done * (total - done):.0f} s left",
                  file=sys.stderr)
    print(f"\n### ZygOS's headline at 16 cores: the highest load with p99 ≤ 10 × S, "
          f"as a fraction of M/G/16 FCFS's ({req} requests per probe; "
          f"costs: {os.path.relpath(a.costs, ROOT)})\n")
    print("| dist | S µs | M/G/16 FCFS load (qsim) | ideal steal (qsim) | fp-vsim steal | "
          f"fp-vsim steal + interrupts | fp-vsim steal, +{a.stack_ns:.0f} ns stack/request | "
          "fp-vsim partitioned | ideal partitioned (qsim) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dist']} | {r['mean_us']} | {r['qsim_fcfs']:.3f} | "
              f"{r['qsim_steal_frac']:.0%} | **{r['vsim_steal_frac']:.0%}** | "
              f"{r['vsim_steal_ipi_frac']:.0%} | {r['vsim_steal_stack_frac']:.0%} | "
              f"{r['vsim_part_frac']:.0%} | {r['qsim_part_frac']:.0%} |")
    out["zygos"] = {"costs": a.costs, "stack_ns": a.stack_ns, "rows": rows}


def part_full(t, a, out):
    """The real code against the model, then the headline by the real code."""
    loads = [0.5, 0.7, 0.8, 0.9]
    ns = [1, 2, 16]
    flows = 1024
    req = a.requests
    common = ["-d", "exp", "--requests", str(req), "--flows", str(flows), "--format", "json",
              "--quiet"]
    rows, total, done, t0 = [], len(ns) * 2, 0, time.time()
    for n in ns:
        for sched in ("part", "steal"):
            for load in loads:
                base = [t.vsim, "-n", str(n), "--sched", sched, "-l", str(load), *common]
                model = run_json(base)["points"][0]
                full = run_json([*base, "--full"])["points"][0]
                full1 = run_json([*base, "--full", "--batch", "1"])["points"][0]
                model1 = run_json([*base, "--batch", "1"])["points"][0]
                rows.append({"n": n, "sched": sched, "load": load, "model": model,
                             "full": full, "model_b1": model1, "full_b1": full1})
            done += 1
            el = time.time() - t0
            print(f"[full {done}/{total}] n={n} {sched}, {el:.0f} s, "
                  f"~{el / done * (total - done):.0f} s left", file=sys.stderr)
    print(f"\n### The real dataplane against the model: p99 µs, zero overheads, exp S = 10 µs, "
          f"{req} requests over {flows} connections, seed 1 (stealing: random victims, no "
          f"interrupts, in both)\n")
    print("| n | sched | load | model | real code | real/model | model, 1 frame a round | "
          "real code, 1 frame a round | real/model | stolen (real code) | order errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, f, m1, f1 = r["model"], r["full"], r["model_b1"], r["full_b1"]
        print(f"| {r['n']} | {r['sched']} | {r['load']} | {m['p99_us']:.1f} | {f['p99_us']:.1f} | "
              f"{f['p99_us'] / m['p99_us']:.2f} | {m1['p99_us']:.1f} | {f1['p99_us']:.1f} | "
              f"{f1['p99_us'] / m1['p99_us']:.2f} | "
              f"{f['steals'] / req:.1%} | "
              f"{f['order_errors'] + f1['order_errors']} |")
    # ZygOS's headline by the real code, 16 cores
    n, hrows = 16, []
    hreq = max(req // 4, 20000)
    dists = ["exp", "bimodal1"] if a.quick else ["det", "exp", "bimodal1"]
    cal = ["--costs", a.costs, "--cost", f"rx_ns={a.stack_ns:.0f}"]
    cols = [("model_steal", ()), ("model_steal_ipi", ("--notify", "ipi")),
            ("full_steal", ("--full",)),
            ("full_steal_ipi", ("--full", "--notify", "ipi")),
            ("full_steal_ipi0", ("--full", "--notify", "ipi", "--ipi-after-us", "0")),
            ("full_steal_cal", ("--full", *cal)),
            ("full_steal_ipi0_cal", ("--full", "--notify", "ipi", "--ipi-after-us", "0", *cal)),
            ("full_part", ("--full", "--sched", "part"))]
    total, done, t0 = len(dists) * 2, 0, time.time()
    for dist in dists:
        for s in (10, 25):
            fcfs = max_load([t.qsim, "-n", str(n), "--disc", "fcfs", "-d", dist, "--mean-us",
                             str(s), "--max-load", "-N", str(hreq), "--format", "json"])
            r = {"dist": dist, "mean_us": s, "qsim_fcfs": fcfs}
            for key, extra in cols:
                r[key] = max_load([t.vsim, "-n", str(n), "--sched", "steal", "-d", dist,
                                   "--mean-us", str(s), "--max-load", "--requests", str(hreq),
                                   "--flows", str(flows), "--format", "json", "--quiet",
                                   *extra])
                r[key + "_frac"] = r[key] / fcfs if fcfs else float("nan")
            hrows.append(r)
            done += 1
            el = time.time() - t0
            print(f"[full headline {done}/{total}] {dist} S={s}: real code steal "
                  f"{r['full_steal_frac']:.2f} of M/G/16, {el:.0f} s, "
                  f"~{el / done * (total - done):.0f} s left", file=sys.stderr)
    print(f"\n### ZygOS's headline by the real code at 16 cores: the highest load with p99 ≤ "
          f"10 × S as a fraction of M/G/16 FCFS's ({hreq} requests per probe, {flows} "
          f"connections; stealing picks victims at random; interrupts after 10 µs in a "
          f"handler, the runtime's default, or at once; calibrated: "
          f"{os.path.relpath(a.costs, ROOT)} with rx_ns={a.stack_ns:.0f})\n")
    print("| dist | S µs | M/G/16 FCFS load (qsim) | model steal | model steal + interrupts | "
          "real code steal | + interrupts (10 µs) | + interrupts (at once) | "
          "real code steal, calibrated | + interrupts (at once), calibrated | "
          "real code partitioned |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in hrows:
        print(f"| {r['dist']} | {r['mean_us']} | {r['qsim_fcfs']:.3f} | "
              f"{r['model_steal_frac']:.0%} | {r['model_steal_ipi_frac']:.0%} | "
              f"**{r['full_steal_frac']:.0%}** | {r['full_steal_ipi_frac']:.0%} | "
              f"{r['full_steal_ipi0_frac']:.0%} | {r['full_steal_cal_frac']:.0%} | "
              f"{r['full_steal_ipi0_cal_frac']:.0%} | {r['full_part_frac']:.0%} |")
    out["full"] = {"rows": rows, "headline": hrows, "stack_ns": a.stack_ns}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--parts", default="bounds,zygos",
                    help="comma list of bounds, zygos, full, real (default bounds,zygos; "
                         "real needs --real-dir)")
    ap.add_argument("--quick", action="store_true", help="fewer cells and requests")
    ap.add_argument("--seeds", type=int, default=5, help="bounds: seeds per cell (default 5)")
    ap.add_argument("--requests", type=int, default=None,
                    help="per point (default 200000; --quick 60000)")
    ap.add_argument("--costs", default=os.path.join(ROOT, "bench/costs/kvm16-n2.txt"),
                    help="cost model for real and zygos (default: measured on 2 stealing "
                         "workers with interrupts, on a 16-core KVM guest)")
    ap.add_argument("--stack-ns", type=float, default=500.0,
                    help="zygos: a TCP/IP stack's cost per request added to rx_ns in the "
                         "extra column (default 500: flowplane's user time per echo "
                         "message, docs/results.md)")
    ap.add_argument("--real-dir", help="real: bench/vsim_device.sh's output directory")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/vsim"))
    a = ap.parse_args()
    if a.requests is None:
        a.requests = 60000 if a.quick else 200000
    if a.quick:
        a.seeds = min(a.seeds, 3)
    parts = [p for p in a.parts.split(",") if p]
    for p in parts:
        if p not in ("bounds", "zygos", "full", "real"):
            sys.exit(f"vsim_validate: --parts: unknown part '{p}' (bounds, zygos, full, real)")
    if "real" in parts and not a.real_dir:
        sys.exit("vsim_validate: --parts real needs --real-dir (bench/vsim_device.sh's output)")
    if not os.path.exists(a.costs):
        sys.exit(f"vsim_validate: --costs {a.costs}: no such file")
    a.rx_ns = 0.0
    for line in open(a.costs):
        line = line.split("#")[0].strip()
        if line.startswith("rx_ns="):
            a.rx_ns = float(line.split("=", 1)[1])
    t = Tools(a.build)
    os.makedirs(a.out, exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
           "command": " ".join(sys.argv)}
    print(f"fp-vsim validation, {out['date']}, commit {commit}: {out['command']}")
    if "bounds" in parts:
        part_bounds(t, a, out)
    if "real" in parts:
        part_real(t, a, out)
    if "zygos" in parts:
        part_zygos(t, a, out)
    if "full" in parts:
        part_full(t, a, out)
    path = os.path.join(a.out, "vsim.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nJSON: {os.path.relpath(path, ROOT)}")
    if "bounds" in parts and not (out["bounds"]["order_ok"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
