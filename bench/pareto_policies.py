#!/usr/bin/env python3
"""The policies table of docs/results.md ("IX's Pareto method ... in the simulator"), from
the results.json that bench/pareto_sim.py wrote for each policy tried: one row per
directory, in the order given.

    bench/pareto_policies.py DIR[=LABEL] ...   (e.g. docs/ctl_sim="frontier ladder (default)")

The options column gives each row's policy as today's pareto_sim.py options (from its
policy file), so rows made under older defaults read right.
"""
import json
import pathlib
import sys

PATTERNS = ("slope", "step", "sine+noise")


def options(d):
    """The pareto_sim.py options that give @d's policy today (its policy file and ladder
    shape against the script's current defaults: the frontier ladder, idle_margin 0.05,
    down_fit, no up_drain, the loop at 3 ms and removal held 33 ms for an 8 s pattern), so
    rows run under older defaults read right."""
    pol = {}
    for line in (d / "policy-energy.txt").read_text().splitlines():
        k, eq, v = line.partition("=")
        if eq and not k.strip().startswith("#"):
            pol[k.strip()] = v.strip()
    opts = ["--ladder ix"] if "IX's shape" in (d / "summary.md").read_text() else []
    if float(pol.get("idle_margin", 0.1)) != 0.05:
        opts.append(f"--margin {float(pol.get('idle_margin', 0.1)):g}")
    if pol.get("up_drain", "0") == "1":
        opts.append("--up-drain")
    if pol.get("down_fit", "0") != "1":
        opts.append("--no-down-fit")
    if (pol.get("interval_ms"), pol.get("down_hold_ms")) != ("3", "33"):
        opts.append(f"--interval-ms {pol.get('interval_ms')} --hold-ms {pol.get('down_hold_ms')}")
    return " ".join(opts)


def row(d, label):
    res = json.loads((d / "results.json").read_text())["rows"]
    opts = options(d)
    by = {(r["pattern"], r["objective"]): r for r in res}

    def col(obj, f):
        return " / ".join(f(by[(p, obj)]) if (p, obj) in by else "–" for p in PATTERNS)

    def pct(x):
        return f"{100 * x:.0f}%"

    def longest(obj):
        return max(int(by[(p, obj)]["longest_s"]) for p in PATTERNS if (p, obj) in by)

    def missed(obj):
        v = [by[(p, obj)]["violations"] for p in PATTERNS if (p, obj) in by]
        return f"{min(v)}-{max(v)}"
    return (f"| {label} | `bench/pareto_sim.py{' ' + opts if opts else ''}` | "
            f"{col('energy', lambda r: pct(r['of_bound']))} | "
            f"{col('energy', lambda r: pct(r['saved']))} | "
            f"{col('consolidation', lambda r: pct(r['of_bound']))} | "
            f"{col('consolidation', lambda r: pct(r['batch']))} | "
            f"{longest('energy')} / {longest('consolidation')} | "
            f"{missed('energy')} / {missed('consolidation')} |")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    print("| policy | options | energy: share of the bound (slope / step / sine+noise) | saved "
          "| batch: share of the bound | batch share of the machine | longest SLO miss, IX s "
          "(energy / batch) | windows missed, of ~240 (energy / batch) |")
    print("|---|---|---|---|---|---|---|---|")
    for arg in sys.argv[1:]:
        path, _, label = arg.partition("=")
        d = pathlib.Path(path)
        if not (d / "results.json").exists():
            sys.exit(f"pareto_policies: no results.json in {d}")
        print(row(d, label or d.name))


if __name__ == "__main__":
    main()
