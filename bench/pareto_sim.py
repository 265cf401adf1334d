#!/usr/bin/env python3
"""pareto_sim.py: IX's control plane at 16 cores in the simulator: the Pareto method, automated.

IX's control-plane paper (SoCC'15, shared/seeds/003) in fp-vsim's virtual time, for fp-kv's
USR workload at 16 cores:

  1. static   every configuration (workers 1..n x clock steps), each searched for the
              highest load whose p99 meets the SLO (fp-vsim --max-load --slo-us);
  2. frontier the configurations that draw the least power for some load (energy), and the
              fewest workers at the nominal clock for each load (consolidation: the other
              cores are the batch job's); their sequence is the controller's ladder
              (IX §3.2's derived policy, here derived by the script, not by hand);
  3. dynamic  IX's control loop (ctl/policy.c, the code fp-ctl runs) on each of IX's three
              patterns (slope, step, sine+noise, fp-loadgen's --pattern), for each
              objective; energy from the measured core-seconds per clock, C6 residency and
              wake-ups, through the power model (bench/power/*.txt, cited there); batch
              throughput from the cores' time off the app;
  4. report   energy saved against the top static configuration and as a fraction of the
              Pareto bound (the frontier's power at each window's load), batch throughput
              against its bound, SLO violation windows (p99 per window of 1 s of IX's
              4-minute pattern), and each figure across the power model's ranges.

Markdown on stdout and in OUT/summary.md; every run's JSON, the frontier and the ladders in
OUT; one plot per pattern and objective (load, p99, cores and clock, power over time, as
IX's Figures 6 and 7) when matplotlib is there.

Usage: .venv/bin/python bench/pareto_sim.py [--out DIR] [--quick]
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POWER = os.path.join(ROOT, "bench", "power", "xeon-e5-2665.txt")
IX_PATTERN_S = 240.0          # IX's patterns last four minutes
IX_WINDOW_S = 1.0             # and it reports p99 per second
WAKE_NS = 104000              # C6-SNB exit latency (bench/power/xeon-e5-2665.txt, [LNX])
MOVE_NS = 6000                # a group's move inside the runtime, mean (docs/results.md)


def die(msg):
    sys.exit(f"pareto_sim: {msg}")


def read_power(path):
    """name = value low high lines (# comments): {name: (value, low, high)}."""
    p = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        die(f"cannot read the power model {path}: {e.strerror}")
    for no, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, eq, rest = line.partition("=")
        try:
            v, lo, hi = (float(x) for x in rest.split())
        except ValueError:
            die(f"{path}:{no}: expected 'name = value low high'")
        if not eq or not lo <= v <= hi:
            die(f"{path}:{no}: expected 'name = value low high' with low <= value <= high")
        p[name.strip()] = (v, lo, hi)
    need = {"f_min", "f_nom", "v_min", "v_nom", "uncore_w", "core_dyn_w", "core_leak_w",
            "core_c6_w", "wake_uj"}
    if need - set(p):
        die(f"{path}: missing {', '.join(sorted(need - set(p)))}")
    return p


class Power:
    """The model with one choice of its parameters (watts, joules)."""

    def __init__(self, params):
        self.p = params

    def core(self, ghz):
        p = self.p
        v = p["v_min"] + (p["v_nom"] - p["v_min"]) * (ghz - p["f_min"]) / (p["f_nom"] - p["f_min"])
        return (p["core_dyn_w"] * ghz / p["f_nom"] * (v / p["v_nom"]) ** 2 +
                p["core_leak_w"] * v / p["v_nom"])

    def static(self, n, k, ghz):
        """k of n cores polling at ghz, the rest in C6."""
        return self.p["uncore_w"] + k * self.core(ghz) + (n - k) * self.p["core_c6_w"]

    def energy(self, pt, n):
        """Joules of a run from its core-seconds (fp-vsim's on_core_s, off_core_s)."""
        t = pt["duration_us"] / 1e6
        e = self.p["uncore_w"] * t + pt["off_core_s"] * self.p["core_c6_w"]
        e += sum(s * self.core(float(g)) for g, s in pt["on_core_s"].items())
        return e + pt.get("ctl", {}).get("wakes", 0) * self.p["wake_uj"] * 1e-6


def variants(params):
    """The nominal model, then each free parameter at its low and high end."""
    nominal = {k: v[0] for k, v in params.items()}
    out = [("nominal", nominal)]
    for k, (v, lo, hi) in params.items():
        for end, x in (("low", lo), ("high", hi)):
            if x != v:
                out.append((f"{k} {end}", {**nominal, k: x}))
    return out


def run_json(cmd):
    cmd = [str(x) for x in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def workload(a):
    return ["--sched", "part", "-d", a.dist, "--mean-us", str(a.mean_us), "--seed", str(a.seed),
            "--nominal-ghz", str(a.f_nom)]


def statics(a):
    """Every configuration's highest load at the SLO, as requests/s."""
    cfgs = [(k, f) for k in range(1, a.n + 1) for f in a.clocks]

    def one(cfg):
        k, f = cfg
        d = run_json([a.vsim, "-n", k, *workload(a), "--ghz", f, "--max-load", "--slo-us",
                      a.slo_us, "--requests", a.requests, "--format", "json", "--quiet"])
        return {"workers": k, "ghz": f, "max_load": d["max_load"],
                "rps": d["max_load"] * k / a.mean_us * 1e6}

    done, res = 0, []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for r in ex.map(one, cfgs):
            res.append(r)
            done += 1
            if done % 8 == 0 or done == len(cfgs):
                print(f"pareto_sim: static {done}/{len(cfgs)}", file=sys.stderr)
    return res


def energy_frontier(st, pw, n):
    """(the cheapest configuration that holds each load, its power), as a step function over
    the configurations' capacities; and the ladder: those configurations in rising load."""
    caps = sorted({s["rps"] for s in st if s["rps"] > 0})
    steps, ladder = [], []
    for c in caps:
        best = min((s for s in st if s["rps"] >= c),
                   key=lambda s: (pw.static(n, s["workers"], s["ghz"]), -s["rps"]))
        steps.append((c, pw.static(n, best["workers"], best["ghz"])))
        # a rung must add capacity as the controller counts it (workers x GHz: the idle
        # share that makes a step down safe); one that does not (one fast worker holding
        # a little more than two slow ones at the SLO) is left out of the ladder
        if not ladder or best["workers"] * best["ghz"] > ladder[-1]["workers"] * ladder[-1]["ghz"]:
            ladder.append(best)
    return steps, ladder


def frontier_at(steps, rps):
    for c, w in steps:
        if rps <= c:
            return w
    return steps[-1][1]          # beyond every configuration: the top one's power


def batch_frontier(st, a):
    """For consolidation: the fewest workers at the nominal clock holding each load."""
    nom = sorted((s for s in st if s["ghz"] == a.f_nom), key=lambda s: s["workers"])
    return [(s["rps"], s["workers"]) for s in nom]


def workers_for(bf, rps):
    for c, k in bf:
        if rps <= c:
            return k
    return bf[-1][1]


def patterns(a, top_rps):
    hi = 0.9 * top_rps
    lo = 0.02 * hi
    acc = IX_PATTERN_S / a.pattern_s
    r = lambda x: f"{x:.0f}"
    return {
        # IX: 0 to the peak and back over four minutes
        "slope": f"slope:{r(lo)}:{r(hi)}",
        # IX: +500k req/s every 10 s towards 6.2M (12.4 steps) and back down; here 11 steps
        # of 10 IX-seconds each way and one at the top, so the descent ends in the run
        "step": f"step:{r(lo)}:{r(hi)}:{r((hi - lo) / 11)}:{10 / acc:.4g}:{10 / acc:.4g}",
        # IX: a sine over the four minutes, noise uniform in +-250k of 6.2M every 5 s
        "sine+noise": f"sine:{r(lo)}:{r(hi)}:{a.pattern_s:g}:{r(hi * 250 / 6200)}:{5 / acc:.4g}",
    }


def write_policy(path, a, ladder):
    with open(path, "w") as f:
        f.write(f"# written by bench/pareto_sim.py: IX's loop scaled to a {a.pattern_s:g} s "
                f"pattern\ninterval_ms = {a.interval_ms}\ndown_hold_ms = {a.hold_ms}\n"
                f"delay_max_us = {a.delay_max_us:g}\nidle_margin = {a.margin:g}\n"
                f"up_drain = {int(a.up_drain)}\ndown_fit = {int(a.down_fit)}\n"
                f"ladder = {', '.join(f'{s[0]}@{s[1]:g}' for s in ladder)}\n")


def dynamic(a, spec, policy, out):
    window_us = IX_WINDOW_S / (IX_PATTERN_S / a.pattern_s) * 1e6
    d = run_json([a.vsim, "-n", a.n, *workload(a), "--pattern", spec, "--pattern-s",
                  a.pattern_s, "--ctl", "--policy", policy, "--windows", f"{window_us:.0f}",
                  "--cost", f"wake_ns={WAKE_NS}", "--cost", f"move_ns={MOVE_NS}",
                  "--format", "json", "--quiet"])
    with open(out, "w") as f:
        json.dump(d, f)
    return d["points"][0], window_us / 1e6


def violations(pt, a):
    bad = [w["p99_us"] > a.slo_us for w in pt["windows"] if w["count"]]
    longest = run = 0
    for b in bad:
        run = run + 1 if b else 0
        longest = max(longest, run)
    return sum(bad), longest, len(bad)


def plot(a, tag, pt, win_s, pw, steps, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    w = pt["windows"]
    t = [x["t_ms"] / 1000 for x in w]
    fig, ax = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    ax[0].plot(t, [x["offered_mrps"] for x in w], label="offered")
    ax[0].plot(t, [x["done_mrps"] for x in w], label="answered")
    ax[0].set_ylabel("M req/s")
    ax[0].legend()
    ax[1].plot(t, [x["p99_us"] for x in w])
    ax[1].axhline(a.slo_us, color="red", ls="--", lw=0.8)
    ax[1].set_ylabel("p99 (us)")
    ax[1].set_yscale("log")
    ax[2].plot(t, [x["mean_cores"] for x in w], label="cores")
    ax[2].plot(t, [x["mean_ghz"] * 4 for x in w], label="GHz x 4")
    if "energy" in tag:
        dyn = [pw.p["uncore_w"] + x["mean_cores"] * pw.core(x["mean_ghz"]) +
               (a.n - x["mean_cores"]) * pw.p["core_c6_w"] for x in w]
        ax2 = ax[2].twinx()
        ax2.plot(t, dyn, color="black", lw=0.8, label="power (W)")
        ax2.plot(t, [frontier_at(steps, x["offered_mrps"] * 1e6) for x in w], color="green",
                 lw=0.8, ls="--", label="Pareto (W)")
        ax2.set_ylabel("W")
        ax2.legend(loc="upper right")
    ax[2].legend(loc="upper left")
    ax[2].set_xlabel(f"virtual s (IX's 240 s pattern in {a.pattern_s:g} s)")
    fig.suptitle(f"fp-vsim, {a.n} cores: {tag}")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=16, help="cores (default 16)")
    ap.add_argument("--mean-us", type=float, default=1.35,
                    help="fp-kv's cost per USR request at the nominal clock (default 1.35: "
                         "the demo's fp-kv on AF_XDP, 740k req/s on one core)")
    ap.add_argument("--dist", default="exp")
    ap.add_argument("--slo-us", type=float, default=500, help="p99 SLO (IX: 500)")
    ap.add_argument("--clocks", default="1.2,1.4,1.6,1.8,2.0,2.2,2.4",
                    help="clock steps in GHz (the E5-2665's P-states, every 200 MHz)")
    ap.add_argument("--pattern-s", type=float, default=8,
                    help="the patterns' length in virtual seconds (IX: 240)")
    ap.add_argument("--interval-ms", type=int,
                    help="the loop's period (default: IX's 100 ms, sped up as the pattern is)")
    ap.add_argument("--hold-ms", type=int,
                    help="no removal this soon after a change (default: fp-ctl's 1000 ms, "
                         "sped up as the pattern is)")
    ap.add_argument("--delay-max-us", type=float, default=300)
    ap.add_argument("--margin", type=float, default=0.05,
                    help="the policy's idle_margin (default 0.05; IX's loop, fp-ctl's default: "
                         "0.1)")
    ap.add_argument("--up-drain", action="store_true",
                    help="the policy's up_drain: climb to the rung that drains the estimated "
                         "queue within an interval (IX: one rung per tick)")
    ap.add_argument("--down-fit", action=argparse.BooleanOptionalAction, default=True,
                    help="the policy's down_fit: down to the lowest rung that passes IX's idle "
                         "test in one tick (default; --no-down-fit: one rung per tick, IX's)")
    ap.add_argument("--requests", type=int, default=200000, help="per static probe")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--power", default=POWER)
    ap.add_argument("--ladder", choices=("frontier", "ix"), default="frontier",
                    help="energy ladder: the frontier's configurations in rising capacity "
                         "(default), or IX's shape (§3.2): workers at the lowest clock first, "
                         "then the clock with all of them")
    ap.add_argument("--statics", metavar="FILE",
                    help="reuse the static search of an earlier run (its static.json; the same "
                         "-n, --clocks and workload), to try policies without redoing it")
    ap.add_argument("--quick", action="store_true",
                    help="4 cores, 3 clocks, a 1 s pattern (a check that it all runs)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "ctl_sim"))
    a = ap.parse_args()
    if a.quick:
        a.n, a.clocks, a.pattern_s, a.requests = 4, "1.2,1.8,2.4", 1, 50000
    acc = IX_PATTERN_S / a.pattern_s if a.pattern_s > 0 else 1
    if a.interval_ms is None:
        a.interval_ms = max(1, round(100 / acc))
    if a.hold_ms is None:
        a.hold_ms = max(0, round(1000 / acc))
    if a.interval_ms < 1 or a.hold_ms < 0:
        die("--interval-ms must be at least 1 and --hold-ms at least 0")
    a.vsim = os.path.join(a.build, "tools", "vsim", "fp-vsim")
    if not os.access(a.vsim, os.X_OK):
        die(f"{a.vsim} is missing: ./flowplane build")
    try:
        a.clocks = sorted(float(x) for x in a.clocks.split(","))
    except ValueError:
        die(f"--clocks: '{a.clocks}' is not a list of GHz")
    params = read_power(a.power)
    a.f_nom = params["f_nom"][0]
    if a.f_nom not in a.clocks or min(a.clocks) < params["f_min"][0]:
        die(f"--clocks must include the nominal {a.f_nom:g} GHz and none below "
            f"{params['f_min'][0]:g}")
    if not 1 <= a.n <= 64 or not a.pattern_s > 0:
        die("-n must be 1-64 and --pattern-s above 0")
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    pw = Power(variants(params)[0][1])

    if a.statics:
        try:
            st = json.load(open(a.statics))["statics"]
        except (OSError, ValueError, KeyError) as e:
            die(f"--statics {a.statics}: not a static.json of this script ({e})")
        if {(s["workers"], s["ghz"]) for s in st} != {(k, f) for k in range(1, a.n + 1)
                                                        for f in a.clocks}:
            die(f"--statics {a.statics}: its configurations are not -n {a.n} x --clocks")
    else:
        st = statics(a)
    top = max(s["rps"] for s in st)
    steps, e_ladder = energy_frontier(st, pw, a.n)
    if a.ladder == "ix":
        e_ladder = ([s for s in st if s["ghz"] == a.clocks[0]] +
                    [s for s in st if s["workers"] == a.n and s["ghz"] > a.clocks[0]])
        e_ladder.sort(key=lambda s: s["workers"] * s["ghz"])
    bf = batch_frontier(st, a)
    c_ladder = [s for s in sorted(st, key=lambda s: s["workers"]) if s["ghz"] == a.f_nom]
    for name, lad in (("energy", e_ladder), ("consolidation", c_ladder)):
        write_policy(os.path.join(a.out, f"policy-{name}.txt"), a,
                     [(s["workers"], s["ghz"]) for s in lad])
    with open(os.path.join(a.out, "static.json"), "w") as f:
        json.dump({"statics": st, "energy_ladder": e_ladder, "frontier": steps}, f, indent=1)

    rows, sens = [], []
    for pname, spec in patterns(a, top).items():
        for obj in ("energy", "consolidation"):
            tag = f"{pname}, {obj}"
            print(f"pareto_sim: {tag}: {spec}", file=sys.stderr)
            slug = f"{pname.replace('+', '_')}-{obj}"
            pt, win_s = dynamic(a, spec, os.path.join(a.out, f"policy-{obj}.txt"),
                                os.path.join(a.out, f"{slug}.json"))
            if pt["order_errors"]:
                die(f"{tag}: {pt['order_errors']} replies out of order")
            nv, longest, nw = violations(pt, a)
            w = pt["windows"]
            t = pt["duration_us"] / 1e6
            row = {"pattern": pname, "objective": obj, "spec": spec, "violations": nv,
                   "windows": nw, "longest_s": longest * IX_WINDOW_S, "ctl": pt["ctl"],
                   "p99_us": pt["p99_us"]}
            if obj == "energy":
                for vname, vp in variants(params):
                    v = Power(vp)
                    vsteps, _ = energy_frontier(st, v, a.n)
                    e_max = v.static(a.n, a.n, a.f_nom) * t
                    e_dyn = v.energy(pt, a.n)
                    e_bound = sum(frontier_at(vsteps, x["offered_mrps"] * 1e6) for x in w) * win_s
                    e_bound += frontier_at(vsteps, w[-1]["offered_mrps"] * 1e6) * max(0, t - len(w) * win_s)
                    fig = {"max_w": e_max / t, "dyn_w": e_dyn / t, "bound_w": e_bound / t,
                           "saved": 1 - e_dyn / e_max, "bound_saved": 1 - e_bound / e_max}
                    fig["of_bound"] = fig["saved"] / fig["bound_saved"] if fig["bound_saved"] > 0 else float("nan")
                    if vname == "nominal":
                        row.update(fig)
                    sens.append({"pattern": pname, "variant": vname, **fig})
            else:
                batch = pt["off_core_s"] / (a.n * t)
                bound = sum(a.n - workers_for(bf, x["offered_mrps"] * 1e6) for x in w) / (a.n * len(w))
                row.update({"batch": batch, "batch_bound": bound,
                            "of_bound": batch / bound if bound > 0 else float("nan")})
            row["plot"] = plot(a, tag, pt, win_s, pw, steps, os.path.join(a.out, f"{slug}.png"))
            rows.append(row)

    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"rows": rows, "sensitivity": sens, "power": params}, f, indent=1)
    md = report(a, st, e_ladder, rows, sens, top)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    print(f"({time.time() - t0:.0f} s)", file=sys.stderr)


def report(a, st, ladder, rows, sens, top):
    acc = IX_PATTERN_S / a.pattern_s
    shape = ("derived from the frontier" if a.ladder == "frontier" else
             "IX's shape: workers at the lowest clock, then the clock")
    out = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `bench/pareto_sim.py "
           f"{' '.join(sys.argv[1:])}`: fp-vsim virtual time, {a.n} cores, fp-kv USR as "
           f"{a.dist} service of {a.mean_us:g} us at {a.f_nom:g} GHz, SLO p99 <= "
           f"{a.slo_us:g} us; IX's 240 s patterns in {a.pattern_s:g} s ({acc:g}x), the loop "
           f"every {a.interval_ms} ms (IX: 100){', up to the rung that drains the queue' if a.up_drain else ''}"
           f"{', down to the lowest rung that fits' if a.down_fit else ''}, "
           f"removal held {a.hold_ms} ms, idle margin {a.margin:g}, p99 per window "
           f"of {IX_WINDOW_S / acc * 1000:.1f} ms (IX's 1 s); power model "
           f"{os.path.relpath(a.power, ROOT)}", ""]
    out.append(f"Static configurations: {len(st)} ({a.n} worker counts x {len(a.clocks)} "
               f"clocks); the top one ({a.n}@{a.f_nom:g}) holds {top / 1e6:.2f} M req/s. The "
               f"energy ladder ({shape}, {len(ladder)} rungs): "
               + ", ".join(f"{s['workers']}@{s['ghz']:g}" for s in ladder) + ".")
    out += ["", "| pattern | max static power | dynamic | saved | Pareto bound | bound saves | "
            "share of the bound | saved, model's range | share of bound, model's range | "
            "SLO windows missed | longest (IX s) |", "|" + "---|" * 11]
    for r in rows:
        if r["objective"] != "energy":
            continue
        s = [x for x in sens if x["pattern"] == r["pattern"]]
        rng = lambda k: f"{min(x[k] for x in s) * 100:.0f}-{max(x[k] for x in s) * 100:.0f}%"
        out.append(f"| {r['pattern']} | {r['max_w']:.1f} W | {r['dyn_w']:.1f} W | "
                   f"{r['saved'] * 100:.0f}% | {r['bound_w']:.1f} W | {r['bound_saved'] * 100:.0f}% | "
                   f"**{r['of_bound'] * 100:.0f}%** | {rng('saved')} | {rng('of_bound')} | "
                   f"{r['violations']} of {r['windows']} | {r['longest_s']:g} |")
    out += ["", "| pattern | batch throughput (share of the machine) | Pareto bound | share of "
            "the bound | SLO windows missed | longest (IX s) |", "|" + "---|" * 6]
    for r in rows:
        if r["objective"] == "consolidation":
            out.append(f"| {r['pattern']} | {r['batch'] * 100:.0f}% | {r['batch_bound'] * 100:.0f}% | "
                       f"**{r['of_bound'] * 100:.0f}%** | {r['violations']} of {r['windows']} | "
                       f"{r['longest_s']:g} |")
    out += ["", "| pattern, objective | loop ticks | up | down | group moves | move, mean / max "
            "(us) | wake-ups | p99 over the run (us) |", "|" + "---|" * 8]
    for r in rows:
        c = r["ctl"]
        out.append(f"| {r['pattern']}, {r['objective']} | {c['ticks']} | {c['ups']} | "
                   f"{c['downs']} | {c['moves']} | {c['move_us_mean']:.0f} / "
                   f"{c['move_us_max']:.0f} | {c['wakes']} | {r['p99_us']:.0f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
