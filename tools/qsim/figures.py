#!/usr/bin/env python3
# figures.py: regenerate qsim's recorded figures (max-load table, Shenango Fig. 1, thesis Fig. 3.2).
"""Regenerate the figures of docs/results.md from the qsim binary.

    .venv/bin/python tools/qsim/figures.py maxload  --json docs/img/qsim-maxload.json \\
        --png docs/img/qsim-maxload.png > maxload.md
    .venv/bin/python tools/qsim/figures.py shenango --json docs/img/qsim-shenango-fig1.json \\
        --png docs/img/qsim-shenango-fig1.png > shenango.md
    .venv/bin/python tools/qsim/figures.py latency  --png docs/img/qsim-thesis-fig3-2.png

Each prints a markdown table on stdout and one progress line per finished qsim run on
stderr. Runs go in parallel (--jobs, default: the number of CPUs).
"""

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bounds  # noqa: E402  (after the path tweak, so the module runs from anywhere)

DISTS = ["det", "exp", "bimodal1", "bimodal2", "lognormal:2"]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: {message}\n")
        sys.exit(2)


def csv(kind):
    """An argparse type: a comma-separated list of @kind."""
    def parse(s):
        try:
            items = [kind(x) for x in s.split(",") if x]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma list of {kind.__name__}: {s!r}")
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items
    return parse


def positive_int(s):
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {s}")
    return v


def run_all(jobs, tasks, what):
    """Run qsim for each (key, args) in @tasks, @jobs at a time; {key: parsed JSON}."""
    out, t0 = {}, time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {ex.submit(bounds.run_qsim, args): key for key, args in tasks}
        for i, fut in enumerate(cf.as_completed(futs), 1):
            key = futs[fut]
            out[key] = fut.result()
            sys.stderr.write(f"figures: {what} {i}/{len(tasks)} {key} "
                             f"({time.monotonic() - t0:.0f} s)\n")
    return out


def write_json(path, obj):
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# --- maximum load at the SLO, for every n, distribution and discipline -------------------

def maxload(a):
    tasks = []
    for n in a.servers:
        for dist in a.dists:
            for disc in a.discs:
                args = ["--servers", n, "--dist", dist, "--disc", disc, "--max-load",
                        "--requests", a.requests, "--seed", a.seed,
                        "--slo-pct", a.slo_pct, "--slo-mult", a.slo_mult]
                tasks.append(((n, dist, disc), args))
    res = run_all(a.jobs, tasks, "max-load")
    table = {f"{n}/{dist}/{disc}": r["max_load"]["load"] for (n, dist, disc), r in res.items()}
    write_json(a.json, {"slo": {"percentile": a.slo_pct, "mult": a.slo_mult},
                        "requests": a.requests, "seed": a.seed, "max_load": table})
    print(f"Maximum load (fraction of n cores) with p{a.slo_pct:g} <= {a.slo_mult:g} x S, "
          f"bisection to 0.001, {a.requests} requests per probe, seed {a.seed}.\n")
    print("| n | discipline | " + " | ".join(a.dists) + " |")
    print("|---|---|" + "---|" * len(a.dists))
    for n in a.servers:
        for disc in a.discs:
            cells = [f"{table[f'{n}/{d}/{disc}']:.3f}" for d in a.dists]
            print(f"| {n} | {disc} | " + " | ".join(cells) + " |")
    if a.png:
        plt = pyplot()
        fig, axes = plt.subplots(1, len(a.dists), figsize=(3 * len(a.dists), 3.2),
                                 sharey=True, squeeze=False)
        axes = axes[0]
        for ax, dist in zip(axes, a.dists):
            for disc in a.discs:
                ax.plot(a.servers, [table[f"{n}/{dist}/{disc}"] for n in a.servers], "o-",
                        label=disc)
            ax.set_title(dist)
            ax.set_xscale("log", base=2)
            ax.set_xticks(a.servers, [str(n) for n in a.servers])
            ax.set_xlabel("servers n")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(f"max load at p{a.slo_pct:g} <= {a.slo_mult:g} S")
        axes[0].set_ylim(0, 1)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
    return 0


# --- Shenango Figure 1: CPU efficiency of core allocators -----------------------------

def shenango(a):
    n, mean = a.servers, a.mean_us
    loads = [round(m * mean / n, 6) for m in a.mrps]
    common = ["--servers", n, "--mean-us", mean, "--slo-pct", 99.9, "--slo-us", a.slo_us,
              "--requests", a.requests, "--seed", a.seed,
              "--load", ",".join(f"{x:g}" for x in loads)]
    variants = {f"oracle {iv:g} us": ["--alloc", "oracle", "--interval-us", iv]
                for iv in a.intervals}
    variants[f"congestion detection {a.detect_us:g} us"] = [
        "--alloc", "shenango", "--interval-us", a.detect_us, "--realloc-us", a.realloc_us,
        "--park-us", a.park_us]
    res = run_all(a.jobs, [(k, common + v) for k, v in variants.items()], "shenango")
    write_json(a.json, {k: res[k] for k in variants})
    print(f"CPU efficiency (application work / core-time allocated), n <= {n}, "
          f"exponential service, mean {mean:g} us, p99.9 <= {a.slo_us:g} us; "
          f"{a.requests} requests per point, seed {a.seed}.\n")
    keys = list(variants)
    print("| Mrps | " + " | ".join(f"{k}: eff / cores / p99.9 us" for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for i, m in enumerate(a.mrps):
        cells = []
        for k in keys:
            p = res[k]["points"][i]
            cells.append(f"{p['efficiency']:.3f} / {p['cores_mean']:.2f} / {p['p999_us']:.0f}")
        print(f"| {m:g} | " + " | ".join(cells) + " |")
    if a.png:
        shenango_png(a, res, keys)
    return 0


def shenango_png(a, res, keys):
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True,
                                  gridspec_kw={"height_ratios": [2, 1]})
    for k in keys:
        pts = res[k]["points"]
        style = ":" if k.startswith("oracle") and k != keys[0] else "-"
        ax.plot(a.mrps, [p["efficiency"] for p in pts], style, marker=".", label=k)
        ax2.plot(a.mrps, [p["p999_us"] for p in pts], style, marker=".", label=k)
    # Label the first (1 ms) oracle's sawtooth segments with their core counts, as
    # Shenango's Figure 1 does.
    pts = res[keys[0]]["points"]
    for i, p in enumerate(pts):
        if i == 0 or p["cores_max"] != pts[i - 1]["cores_max"]:
            ax.annotate(str(p["cores_max"]), (a.mrps[i], p["efficiency"]), fontsize=7,
                        xytext=(0, -10), textcoords="offset points", ha="center")
    ax.set_ylabel("CPU efficiency")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Shenango Fig. 1 reproduction: exp service, S = "
                 f"{a.mean_us:g} us, p99.9 <= {a.slo_us:g} us")
    ax2.axhline(a.slo_us, color="0.4", linewidth=0.8, linestyle="--")
    ax2.set_ylabel("p99.9 latency (us)")
    ax2.set_xlabel("offered load (million requests/s)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


# --- thesis Figure 3.2: p99 against load for each model and distribution --------------

def latency(a):
    loads = [round(0.05 * i, 2) for i in range(1, 20)]
    discs = ["fcfs", "part", "ps", "part-ps", "steal"]
    tasks = [((dist, disc), ["--servers", a.servers, "--dist", dist, "--disc", disc,
                             "--requests", a.requests, "--seed", a.seed,
                             "--load", ",".join(map(str, loads))])
             for dist in DISTS[:4] for disc in discs]
    res = run_all(a.jobs, tasks, "latency")
    write_json(a.json, {f"{d}/{k}": r for (d, k), r in res.items()})
    print(f"p99 / S at each load, n = {a.servers}, {a.requests} requests per point.\n")
    print("| dist | discipline | " + " | ".join(f"{x:g}" for x in loads[1::2]) + " |")
    print("|---|---|" + "---|" * len(loads[1::2]))
    for dist in DISTS[:4]:
        for disc in discs:
            pts = res[(dist, disc)]["points"][1::2]
            print(f"| {dist} | {disc} | " + " | ".join(f"{p['p99']:.2f}" for p in pts) + " |")
    if a.png:
        plt = pyplot()
        fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
        for ax, dist in zip(axes, DISTS[:4]):
            for disc in discs:
                ax.plot(loads, [p["p99"] for p in res[(dist, disc)]["points"]], label=disc)
            ax.set_ylim(0, 20 if dist != "bimodal2" else 40)
            ax.set_title(dist)
            ax.set_xlabel("load")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("p99 latency / S")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
    return 0


def parser():
    ap = Parser(prog="figures.py", description="Regenerate qsim's recorded figures.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    common = Parser(add_help=False)
    common.add_argument("-N", "--requests", type=positive_int, default=2_000_000,
                        help="requests per simulation [2000000]")
    common.add_argument("--seed", type=int, default=1, help="qsim seed [1]")
    common.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                        help="parallel qsim runs [CPUs]")
    common.add_argument("--json", help="write the raw results here")
    common.add_argument("--png", help="write the figure here")
    m = sub.add_parser("maxload", parents=[common], help="max load at the SLO table")
    m.add_argument("--servers", type=csv(positive_int), default=[2, 4, 8, 16])
    m.add_argument("--dists", type=csv(str), default=DISTS)
    m.add_argument("--discs", type=csv(str), default=["fcfs", "part", "steal"])
    m.add_argument("--slo-pct", type=float, default=99.0)
    m.add_argument("--slo-mult", type=float, default=10.0)
    m.set_defaults(func=maxload)
    s = sub.add_parser("shenango", parents=[common], help="Shenango Figure 1")
    s.add_argument("--servers", type=positive_int, default=16)
    s.add_argument("--mean-us", type=float, default=10.0)
    s.add_argument("--slo-us", type=float, default=100.0)
    s.add_argument("--mrps", type=csv(float),
                   default=[round(0.02 * i, 2) for i in range(1, 61)])
    s.add_argument("--intervals", type=csv(float), default=[1000.0, 100.0, 5.0],
                   help="oracle intervals in us [1000,100,5]")
    s.add_argument("--detect-us", type=float, default=5.0)
    s.add_argument("--realloc-us", type=float, default=5.0)
    s.add_argument("--park-us", type=float, default=2.0)
    s.set_defaults(func=shenango)
    lat = sub.add_parser("latency", parents=[common], help="thesis Figure 3.2")
    lat.add_argument("--servers", type=positive_int, default=16)
    lat.set_defaults(func=latency)
    return ap


def main(argv=None):
    a = parser().parse_args(argv)
    try:
        return a.func(a)
    except bounds.QsimError as e:
        sys.stderr.write(f"figures.py: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
