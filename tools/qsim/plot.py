#!/usr/bin/env python3
# plot.py: draw qsim JSON results (latency or efficiency against load) as a PNG.
"""Plot one or more qsim JSON results.

    qsim -n 16 --sweep 0.05:0.95:0.05 --format json -o fcfs.json
    qsim -n 16 --disc part --sweep 0.05:0.95:0.05 --format json -o part.json
    .venv/bin/python tools/qsim/plot.py fcfs.json part.json -o p99.png --y p99 --log
"""

import argparse
import json
import sys

Y_LABELS = {
    "p50": "p50 latency / mean service time", "p99": "p99 latency / mean service time",
    "p999": "p99.9 latency / mean service time", "p50_us": "p50 latency (us)",
    "p99_us": "p99 latency (us)", "p999_us": "p99.9 latency (us)",
    "efficiency": "CPU efficiency (busy / allocated)", "cores_mean": "cores allocated (mean)",
    "mean_wait": "mean wait / mean service time",
}
X_LABELS = {"load": "offered load (fraction of n cores)",
            "rate_mrps": "offered load (million requests/s)",
            "offered_cores": "offered load (cores)"}


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: {message}\n")
        sys.exit(2)


def label_of(cfg):
    """A legend label from a qsim config object."""
    alloc = cfg["alloc"]["policy"]
    what = cfg["discipline"] if alloc == "none" else f"alloc={alloc}"
    return f"{what} n={cfg['servers']} {cfg['dist']}"


def main(argv=None):
    ap = Parser(prog="plot.py", description="Plot qsim JSON results as a PNG.")
    ap.add_argument("results", nargs="+", help="qsim --format json outputs")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--y", default="p99", choices=sorted(Y_LABELS), help="metric [p99]")
    ap.add_argument("--x", default="load", choices=sorted(X_LABELS), help="x axis [load]")
    ap.add_argument("--log", action="store_true", help="logarithmic y axis")
    ap.add_argument("--ymax", type=float, help="clip the y axis here")
    ap.add_argument("--title", default="", help="figure title")
    a = ap.parse_args(argv)
    runs = []
    for path in a.results:
        try:
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            ap.error(f"{path}: {e}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        pts = run["points"]
        ax.plot([p[a.x] for p in pts], [p[a.y] for p in pts], "o-", markersize=3,
                label=label_of(run["config"]))
    ax.set_xlabel(X_LABELS[a.x])
    ax.set_ylabel(Y_LABELS[a.y])
    if a.log:
        ax.set_yscale("log")
    if a.ymax:
        ax.set_ylim(top=a.ymax)
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
