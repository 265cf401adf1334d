#!/usr/bin/env python3
"""alloc_sim.py: Shenango's core allocator at 16 cores, in the many-core simulator.

fp-vsim runs flowplane's shuffle layer (rt/shuffle.c) and allocator (rt/alloc.c) in virtual
time with the cost model measured on real cores (--costs). Two of Shenango's experiments
(NSDI'19), scaled to what the simulator models:

  spin   Figure 4: the spin server, mean service 10 us, constant, exponential and bimodal
         (90% 5 us, 10% 55 us); p99.9 and the batch job's share of the machine against
         load, for IX (partitioned, 16 cores), ZygOS (stealing, 16 cores) and the allocator
         (2 homes, 14 burstable cores) with the paper's wake-up cost and with this VM's;
         beside qsim's ideal bounds (one central queue with Shenango's allocator, and
         ZygOS's stealing model). --seeds seeds per point: median (min-max).
  shift  Figure 5: load 0.05 -> 0.8 -> 0.05 of 16 cores, each phase --phase-ms; per phase
         the worst 1 ms window's p99.9 and the mean cores held, and the first 1 ms after
         the step up in 100 us windows; for ZygOS (static) and the allocator at passes of
         5, 100 and 1000 us.

Markdown on stdout, every run's JSON in --out.

Usage: .venv/bin/python bench/alloc_sim.py [--parts spin,shift] [--seeds 3] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COSTS = os.path.join(ROOT, "bench", "costs", "kvm16-n2.txt")
PAPER_WAKE_NS = 5900     # Shenango §7.4: a core reallocation, grant to running
DISTS = {"det": "constant", "exp": "exponential", "bimodal1": "bimodal 5/55 us"}


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"alloc_sim: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def systems(vm_wake_ns):
    ipi = ["--sched", "steal", "--notify", "ipi"]
    alloc = [*ipi, "--alloc", "--homes", "2"]
    return {
        "IX (16 partitioned)": ["--sched", "part"],
        "ZygOS (16 stealing)": ipi,
        f"alloc, wake {PAPER_WAKE_NS / 1000:g} us (paper)": [*alloc, "--cost",
                                                          f"wake_ns={PAPER_WAKE_NS}"],
        f"alloc, wake {vm_wake_ns / 1000:g} us (this VM)": [*alloc, "--cost",
                                                         f"wake_ns={vm_wake_ns}"],
    }


def cell(xs, fmt="{:.0f}"):
    m = statistics.median(xs)
    if len(xs) == 1 or min(xs) == max(xs):
        return fmt.format(m)
    return f"{fmt.format(m)} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def spin(a, out):
    loads = [round(0.1 * i, 1) for i in range(1, 10)]
    res = {"loads": loads, "systems": {}, "bounds": {}}
    syst = systems(a.vm_wake_ns)
    for dist in DISTS:
        for name, extra in syst.items():
            pts = []
            for load in loads:
                runs = [run_json([a.vsim, "-n", "16", "-d", dist, "-l", str(load), "--requests",
                                  str(a.requests), "--seed", str(s), "--costs", COSTS,
                                  "--format", "json", "--quiet", *extra])["points"][0]
                        for s in range(1, a.seeds + 1)]
                pts.append(runs)
            res["systems"].setdefault(dist, {})[name] = pts
            print(f"alloc_sim: spin {dist} {name} done", file=sys.stderr)
        bnd = {}
        for bname, extra in (("qsim: Shenango's allocator, one queue", [
                "--disc", "fcfs", "--alloc", "shenango", "--interval-us", "5",
                "--realloc-us", str(PAPER_WAKE_NS / 1000), "--park-us", "2"]),
                ("qsim: ZygOS stealing", ["--disc", "steal"])):
            d = run_json([a.qsim, "-n", "16", "-d", dist, "-l", ",".join(map(str, loads)),
                          "-N", str(a.requests), "--format", "json", *extra])
            bnd[bname] = d["points"]
        res["bounds"][dist] = bnd
    with open(os.path.join(out, "spin.json"), "w") as f:
        json.dump(res, f)

    for dist, label in DISTS.items():
        print(f"\n#### {label}: p99.9 in us, median (min-max) of {a.seeds} seeds; "
              f"batch share of the 16 cores\n")
        names = list(res["systems"][dist])
        print("| load | " + " | ".join(names) + " | " +
              " | ".join(res["bounds"][dist]) + " |")
        print("|---" * (1 + len(names) + len(res["bounds"][dist])) + "|")
        for i, load in enumerate(loads):
            row = [f"{load:.1f}"]
            for n in names:
                runs = res["systems"][dist][n][i]
                c = cell([r["p999_us"] for r in runs])
                if "batch_share" in runs[0]:
                    c += ", batch " + cell([100 * r["batch_share"] for r in runs], "{:.0f}%")
                row.append(c)
            for bname, b in res["bounds"][dist].items():
                p = b[i]
                c = f"{p['p999_us']:.0f}"
                if "allocator" in bname:
                    c += f", batch {100 * (1 - p['cores_mean'] / 16):.0f}%"
                row.append(c)
            print("| " + " | ".join(row) + " |")


def shift(a, out):
    ipi = ["--sched", "steal", "--notify", "ipi"]
    alloc = [*ipi, "--alloc", "--homes", "2", "--cost", f"wake_ns={PAPER_WAKE_NS}"]
    syst = {
        "ZygOS (16 stealing)": ipi,
        "alloc, pass 5 us": alloc,
        "alloc, pass 100 us": [*alloc, "--alloc-us", "100"],
        "alloc, pass 1000 us": [*alloc, "--alloc-us", "1000"],
    }
    ms = a.phase_ms
    spec = f"0.05:0.8:{ms:g}"
    res = {}
    for name, extra in syst.items():
        base = [a.vsim, "-n", "16", "-d", "exp", "--shift", spec, "--costs", COSTS,
                "--format", "json", "--quiet", *extra]
        wide = run_json([*base, "--windows", "1000"])["points"][0]
        fine = run_json([*base, "--windows", "100"])["points"][0]
        res[name] = {"ms": wide, "fine": fine}
        print(f"alloc_sim: shift {name} done", file=sys.stderr)
    with open(os.path.join(out, "shift.json"), "w") as f:
        json.dump(res, f)

    print(f"\n#### Load shift 0.05 -> 0.8 -> 0.05 of 16 cores (0.08 -> 1.28 -> 0.08 Mreq/s), "
          f"{ms:g} ms each, exponential S = 10 us\n")
    print("| system | low: worst 1 ms p99.9 µs | high: worst 1 ms p99.9 µs | after the step: "
          "worst 100 µs p99.9 µs | back low: worst 1 ms p99.9 µs | cores low / high | "
          "batch share |")
    print("|---|---|---|---|---|---|---|")
    for name, r in res.items():
        w = r["ms"]["windows"]
        ph = [[x for x in w if k * ms <= x["t_ms"] < (k + 1) * ms and x["count"]]
              for k in range(3)]
        fine = [x for x in r["fine"]["windows"] if ms <= x["t_ms"] < ms + 1 and x["count"]]
        worst = [max(x["p999_us"] for x in p) for p in ph]
        cores = [statistics.mean(x["mean_cores"] for x in p) for p in ph]
        share = r["ms"].get("batch_share")
        print(f"| {name} | {worst[0]:.0f} | {worst[1]:.0f} | "
              f"{max(x['p999_us'] for x in fine):.0f} | {worst[2]:.0f} | "
              f"{cores[0]:.1f} / {cores[1]:.1f} | "
              f"{'-' if share is None else f'{100 * share:.0f}%'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="spin,shift", help="spin, shift (default both)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per spin point (default 3)")
    ap.add_argument("--requests", type=int, default=200000, help="per spin point")
    ap.add_argument("--phase-ms", type=float, default=20, help="shift: each phase (ms)")
    ap.add_argument("--vm-wake-ns", type=float, default=27000,
                    help="this machine's grant-to-running time, ns (default: bench/alloc_real.py's "
                         "cross-core p50 on this VM)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "alloc_sim"))
    a = ap.parse_args()
    a.vsim = os.path.join(a.build, "tools", "vsim", "fp-vsim")
    a.qsim = os.path.join(a.build, "tools", "qsim", "qsim")
    for p in (a.vsim, a.qsim):
        if not os.access(p, os.X_OK):
            sys.exit(f"alloc_sim: {p} is missing: ./flowplane build")
    parts = a.parts.split(",")
    if not set(parts) <= {"spin", "shift"}:
        sys.exit(f"alloc_sim: --parts: '{a.parts}' is not a list of spin, shift")
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `bench/alloc_sim.py "
          f"{' '.join(sys.argv[1:])}`, fp-vsim virtual time, 16 workers, costs "
          f"bench/costs/kvm16-n2.txt")
    if "spin" in parts:
        spin(a, a.out)
    if "shift" in parts:
        shift(a, a.out)
    print(f"\n({time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
