#!/usr/bin/env python3
# lgplot.py: fp-loadgen JSON files into one PNG of latency-throughput curves, with an SLO line.
"""Plot fp-loadgen results: p99 latency (solid) and p50 (dashed) against achieved
throughput, one curve per JSON file, points that failed their checks hollow, partial
points marked with an x, and the SLO as a horizontal line.

    ./flowplane plot a.json b.json -o curves.png [--slo-us 500] [--labels a,b] [--title T]
                     [--log] [--ymax US]
    .venv/bin/python tools/lgplot.py a.json -o a.png

A pattern run (one point per window) is drawn the same way: each window is a point.
Bad arguments or unreadable files: one line on stderr, exit status 2.
"""

import argparse
import json
import sys


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message):
        sys.stderr.write(f"lgplot: {message}\n")
        sys.exit(2)


def die(msg):
    sys.stderr.write(f"lgplot: {msg}\n")
    sys.exit(2)


def load(path):
    """The points of one fp-loadgen JSON file, as (krps, p50 us, p99 us, valid, partial)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    if not isinstance(doc, dict) or doc.get("tool") != "fp-loadgen" or "points" not in doc:
        die(f"{path}: not an fp-loadgen JSON document")
    pts = []
    for p in doc["points"]:
        lat = p.get("latency_us") or {}
        if lat.get("p99") is None or p.get("achieved_rps") is None:
            continue
        pts.append((p["achieved_rps"] / 1000.0, lat.get("p50"), lat["p99"],
                    bool(p.get("valid")), bool(p.get("partial"))))
    pts.sort(key=lambda t: t[0])
    return doc, pts


def label_of(path, doc):
    c = doc.get("config", {})
    wl = c.get("workload") or c.get("proto", "?")
    return f"{path.rsplit('/', 1)[-1]} ({wl}, {c.get('transport', '?')})"


def plot(curves, out, slo_us, title, log=False, ymax=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    top = slo_us
    for i, (label, pts) in enumerate(curves):
        col = colors[i % len(colors)]
        x = [p[0] for p in pts]
        ax.plot(x, [p[2] for p in pts], "-", color=col, label=f"{label} p99")
        if any(p[1] is not None for p in pts):
            ax.plot(x, [p[1] for p in pts], "--", color=col, alpha=0.7, label=f"{label} p50")
        for kx, _, p99, valid, partial in pts:
            ax.plot([kx], [p99], "x" if partial else "o", color=col,
                    markerfacecolor=col if valid else "none", markersize=6)
            top = max(top, p99)
    ax.axhline(slo_us, color="red", linestyle=":", linewidth=1.2, label=f"SLO {slo_us:g} us")
    ax.set_xlabel("achieved throughput (k requests/s)")
    ax.set_ylabel("latency (us)")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(top=ymax or top * 1.5)
    else:
        ax.set_ylim(0, ymax or top * 1.1)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or "fp-loadgen: latency vs throughput (hollow: invalid point)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv=None):
    ap = Parser(prog="lgplot", description="latency-throughput curves from fp-loadgen JSON")
    ap.add_argument("files", nargs="+", help="fp-loadgen --json outputs")
    ap.add_argument("-o", "--out", required=True, help="the PNG to write")
    ap.add_argument("--slo-us", type=float, default=500.0, help="SLO line (default 500)")
    ap.add_argument("--labels", help="comma-separated curve labels, one per file")
    ap.add_argument("--title", help="the plot's title")
    ap.add_argument("--log", action="store_true", help="logarithmic latency axis")
    ap.add_argument("--ymax", type=float, help="top of the latency axis (us)")
    a = ap.parse_args(argv)
    if not a.slo_us > 0:
        die("--slo-us must be above 0")
    if a.ymax is not None and not a.ymax > 0:
        die("--ymax must be above 0")
    labels = a.labels.split(",") if a.labels else None
    if labels is not None and len(labels) != len(a.files):
        die(f"--labels gives {len(labels)} labels for {len(a.files)} files")
    curves = []
    for i, path in enumerate(a.files):
        doc, pts = load(path)
        if not pts:
            die(f"{path}: no measured point to plot")
        curves.append((labels[i] if labels else label_of(path, doc), pts))
    try:
        plot(curves, a.out, a.slo_us, a.title, a.log, a.ymax)
    except OSError as e:
        die(f"{a.out}: {e}")
    print(f"lgplot: wrote {a.out} ({len(curves)} curve{'s' if len(curves) != 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
