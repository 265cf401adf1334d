#!/usr/bin/env python3
# demo_agreement.py: do several runs of ./flowplane demo agree? Each run's median ratios inside the others' ranges.
"""Compare runs of `./flowplane demo` (their summary.json files) the way issue 15 asks:
every run's median ratio against memcached must lie inside every other run's min-max range,
for each server and each figure (saturation, throughput at p99 <= 500 and 100 us); and
fp-kv on Linux sockets must have a p99 no worse than memcached's at 10% and 50% of
memcached's saturation, in every round of every run.

    .venv/bin/python bench/demo_agreement.py RUN1/summary.json RUN2/summary.json ...

Prints one markdown table per figure and a verdict line; exit status 0 when all agree.
"""
import json
import sys

FIGURES = (("saturation", "saturation"), ("slo_500", "at p99 ≤ 500 µs"),
           ("slo_100", "at p99 ≤ 100 µs"))


def fmt(st):
    if not st:
        return "–"
    return f"{st['median']:.2f} ({st['min']:.2f}–{st['max']:.2f})"


def agree(runs, server, key):
    """(ok, detail): each run's median inside each other run's [min, max]."""
    sts = [r["runs"].get(f"usr/{server}", {}).get("vs_memcached", {}).get(key) for r in runs]
    if any(s is None for s in sts):
        return None, "not measured in every run"
    bad = [(i + 1, j + 1) for i, a in enumerate(sts) for j, b in enumerate(sts)
           if i != j and not b["min"] <= a["median"] <= b["max"]]
    return not bad, ", ".join(f"run {i}'s median outside run {j}'s range" for i, j in bad)


def kernel_vs_memcached(run):
    """Per round: fp-kernel's p99 <= memcached's at 10% and 50% of memcached's saturation."""
    out = []
    for k, rnd in enumerate(run["rounds"]):
        mc, fk = rnd.get("usr/memcached"), rnd.get("usr/fp-kernel")
        if not mc or not fk:
            continue
        for f in ("0.1", "0.5"):
            a, b = fk["common"].get(f), mc["own"].get(f)
            if a and b:
                out.append((k + 1, f, a["p99"], b["p99"], a["p99"] <= b["p99"]))
    return out


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    ok_all = True
    print(f"{len(runs)} runs: " + "; ".join(f"run {i + 1}: {r['machine'].get('date', '?')}"
                                            for i, r in enumerate(runs)))
    for key, title in FIGURES:
        print(f"\n{title}, ratio against memcached, median (min–max) per run:\n")
        print("| server | " + " | ".join(f"run {i + 1}" for i in range(len(runs)))
              + " | agree |")
        print("|---|" + "---|" * (len(runs) + 1))
        for server in ("fp-kernel", "fp-xdp"):
            ok, why = agree(runs, server, key)
            cells = [fmt(r["runs"].get(f"usr/{server}", {}).get("vs_memcached", {}).get(key))
                     for r in runs]
            word = "yes" if ok else ("–" if ok is None else f"no: {why}")
            ok_all &= ok is not False
            print(f"| {server} | " + " | ".join(cells) + f" | {word} |")
    print("\nfp-kernel's p99 against memcached's at 10% and 50% of memcached's saturation, "
          "per round (µs):\n")
    print("| run | round | load | fp-kernel p99 | memcached p99 | no worse |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(runs):
        for rnd, f, a, b, ok in kernel_vs_memcached(r):
            print(f"| {i + 1} | {rnd} | {float(f):.0%} | {a:.0f} | {b:.0f} | "
                  f"{'yes' if ok else 'no'} |")
    print(f"\nruns agree: {'yes' if ok_all else 'no'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    sys.exit(main(sys.argv[1:]))
