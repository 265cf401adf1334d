#!/usr/bin/env python3
# publish_demo.py: quote the last `./flowplane demo` in README.md and docs/results.md, from its summary.
"""Quote a demo run in the docs, so prose and measurement cannot drift apart.

    .venv/bin/python tools/publish_demo.py [RESULTS_DIR]     (default results/demo)
    .venv/bin/python tools/publish_demo.py --check           (exit 1 if the docs drifted)

Copies RESULTS_DIR/summary.{md,json} to docs/demo/, then rewrites two generated blocks from
docs/demo/summary.json and summary.md:

  README.md          between <!-- demo-headline:begin --> and <!-- demo-headline:end -->:
                     the headline ratios with their spread and verdicts, date and machine
  docs/results.md    between <!-- demo-table:begin --> and <!-- demo-table:end -->: the
                     demo's whole table, as the demo wrote it

--check regenerates both blocks from docs/demo/ and compares them with the files (the
integration tier runs it): a hand-edited figure fails it.
"""
import argparse
import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "demo"
BLOCKS = {
    ROOT / "README.md": "demo-headline",
    ROOT / "docs" / "results.md": "demo-table",
}


# The figures are formatted exactly as the demo's own table formats them.
sys.path.insert(0, str(ROOT / "bench"))
from kv_bench import fmt_ratio as ratio, fmt_spread as rate  # noqa: E402


def verdict(v):
    return {"win": "a win", "loss": "a loss", "within noise": "within noise"}.get(v, v)


def headline(summary):
    """The README's few lines, from summary.json."""
    m, c = summary["machine"], summary["config"]
    runs = summary["runs"]
    at = f" at commit {m['commit']}" if m.get("commit", "unknown") != "unknown" else ""
    out = [f"Last published run: `{m.get('command', './flowplane demo')}`{at}, {m.get('date', '?')}, "
           f"{m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, {m['interface_mode']}; "
           f"{c['rounds']} interleaved rounds, ratios taken within a round, median "
           "(min–max) over rounds:", ""]
    names = {"fp-xdp": "fp-kv on AF_XDP", "fp-kernel": "fp-kv on Linux sockets"}
    for key in ("usr/fp-xdp", "usr/fp-kernel"):
        if key not in runs:
            continue
        r = runs[key]
        vs, vd = r["vs_memcached"], r["verdict"]

        def slo(k):
            if vs.get(f"slo_{k}"):
                return f"{ratio(vs[f'slo_{k}'])} ({verdict(vd[f'slo_{k}'])})"
            return (f"{rate(r['at_slo'][k])} req/s, where memcached met it in no round "
                    "(no ratio)")
        out.append(f"- {names[key.split('/')[1]]}: saturation {ratio(vs['saturation'])} "
                   f"memcached's ({verdict(vd['saturation'])}); throughput at p99 ≤ 500 µs "
                   f"{slo('500')}; at p99 ≤ 100 µs {slo('100')}.")
    out += ["", "The whole table, with latency at common loads and the stall figures: "
            "`docs/results.md`; `docs/demo/summary.json` holds every figure."]
    return "\n".join(out)


def table(md):
    return md.strip()


def render(doc, name, body):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in doc or end not in doc:
        raise SystemExit(f"publish_demo: no {begin} ... {end} block")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def blocks():
    summary = json.loads((DOCS / "summary.json").read_text())
    md = (DOCS / "summary.md").read_text()
    return {"demo-headline": headline(summary), "demo-table": table(md)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?", default=str(ROOT / "results" / "demo"))
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    a = ap.parse_args(argv)
    if not a.check:
        src = pathlib.Path(a.results)
        for f in ("summary.json", "summary.md"):
            if not (src / f).exists():
                raise SystemExit(f"publish_demo: no {src / f}: run ./flowplane demo first")
        DOCS.mkdir(parents=True, exist_ok=True)
        for f in ("summary.json", "summary.md"):
            shutil.copy(src / f, DOCS / f)
    body = blocks()
    drift = []
    for path, name in BLOCKS.items():
        doc = path.read_text()
        new = render(doc, name, body[name])
        if a.check:
            if new != doc:
                drift.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(new)
    if drift:
        print("publish_demo: these quote something other than docs/demo/summary.*: "
              + ", ".join(drift) + " (run tools/publish_demo.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
