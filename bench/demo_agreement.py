#!/usr/bin/env python3
# demo_agreement.py: do several runs of ./flowplane demo agree? Each run's median ratios inside the others' ranges.
"""Compare runs of `./flowplane demo` (their summary.json files) the way issue 15 asks:
every run's median ratio against memcached must lie inside every other run's min-max range,
for each server and each figure (saturation, throughput at p99 <= 500 and 100 us); and
fp-kv on Linux sockets must have a p99 no worse than memcached's at 10% and 50% of
memcached's saturation, in every round of every run.

    .venv/bin/python bench/demo_agreement.py RUN1/summary.json RUN2/summary.json ...

Prints one markdown table per figure and a verdict line; exit status 0 when all agree.

Beside the issue's check, two that can be trusted to mean something:

- How often the issue's check would pass if nothing differed between runs at all: it
  depends only on the order of the samples, so for identical, independent rounds it is
  a number of the round counts alone (found here by drawing random orders, seeded). With
  three rounds per run it is 13% for one figure: a run of the check that fails says
  little, since identical machines fail it most of the time.
- Whether the runs differ: the Kruskal-Wallis test on the per-round ratios grouped by run,
  its p-value exact (every assignment of the pooled rounds to the runs, or 20,000 seeded
  draws where there are more), and whether every run gives the same verdict (win, loss,
  within noise) for the figure: what a reader of the README takes from it.
"""
import itertools
import json
import math
import random
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


def per_round(run, server, key):
    """@server's ratio against memcached in each round of @run where both have the figure."""
    out = []
    for rnd in run["rounds"]:
        mc, sv = rnd.get("usr/memcached"), rnd.get(f"usr/{server}")
        if not mc or not sv:
            continue
        if key == "saturation":
            a, b = sv.get("saturation_rps"), mc.get("saturation_rps")
        else:
            a, b = sv.get("at_slo", {}).get(key[4:]), mc.get("at_slo", {}).get(key[4:])
        if a and b:
            out.append(a / b)
    return out


def literal_ok(samples):
    """The issue's check on lists of samples: each list's median in every other's range."""
    def med(xs):
        ys = sorted(xs)
        n = len(ys)
        return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2
    return all(min(b) <= med(a) <= max(b) for i, a in enumerate(samples)
               for j, b in enumerate(samples) if i != j)


def chance_literal(sizes, draws=20000, seed=15):
    """P(the issue's check passes) for runs of @sizes identical, independent rounds."""
    rng = random.Random(seed)
    ok = 0
    for _ in range(draws):
        ok += literal_ok([[rng.random() for _ in range(n)] for n in sizes])
    return ok / draws


def ranks(xs):
    """Average ranks (1-based) of @xs, ties sharing theirs."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def kw_h(rk, sizes):
    """Kruskal-Wallis H of ranks @rk split into consecutive groups of @sizes."""
    n, h, at = len(rk), 0.0, 0
    for m in sizes:
        h += sum(rk[at:at + m]) ** 2 / m
        at += m
    return 12 / (n * (n + 1)) * h - 3 * (n + 1)


def assignments(n, sizes):
    """Every way to put items 0..n-1 into groups of @sizes (as one list, group by group)."""
    if not sizes:
        yield []
        return
    for first in itertools.combinations(range(n), sizes[0]):
        rest = [i for i in range(n) if i not in first]
        for tail in assignments(len(rest), sizes[1:]):
            yield list(first) + [rest[i] for i in tail]


def kruskal_p(groups, draws=20000, seed=15):
    """Kruskal-Wallis across @groups: (H, p), p exact or from seeded draws."""
    sizes = [len(g) for g in groups]
    pooled = [x for g in groups for x in g]
    rk = ranks(pooled)
    h0 = kw_h(rk, sizes)
    n, count = len(pooled), 1
    for m in sizes:   # the number of assignments: n! / prod(m!)
        count *= math.comb(n, m)
        n -= m
    ge = tot = 0
    if count <= 200000:
        for perm in assignments(len(pooled), sizes):
            tot += 1
            ge += kw_h([rk[i] for i in perm], sizes) >= h0 - 1e-9
    else:
        rng = random.Random(seed)
        for _ in range(draws):
            perm = list(range(len(pooled)))
            rng.shuffle(perm)
            tot += 1
            ge += kw_h([rk[i] for i in perm], sizes) >= h0 - 1e-9
    return h0, ge / tot


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
    sound_all = True
    for key, title in FIGURES:
        print(f"\n{title}, ratio against memcached, median (min–max) per run:\n")
        print("| server | " + " | ".join(f"run {i + 1}" for i in range(len(runs)))
              + " | agree (the issue's check) | that check's pass rate with nothing "
              "differing | verdicts | runs differ? (Kruskal-Wallis, exact p) |")
        print("|---|" + "---|" * (len(runs) + 4))
        for server in ("fp-kernel", "fp-xdp"):
            ok, why = agree(runs, server, key)
            cells = [fmt(r["runs"].get(f"usr/{server}", {}).get("vs_memcached", {}).get(key))
                     for r in runs]
            word = "yes" if ok else ("–" if ok is None else f"no: {why}")
            ok_all &= ok is not False
            groups = [per_round(r, server, key) for r in runs]
            verdicts = [r["runs"].get(f"usr/{server}", {}).get("verdict", {}).get(key, "–")
                        for r in runs]
            if all(len(g) >= 2 for g in groups):
                chance = f"{chance_literal([len(g) for g in groups]):.0%}"
                h, p = kruskal_p(groups)
                differ = f"{'yes' if p < 0.05 else 'no'} (H {h:.2f}, p {p:.2f})"
                sound_all &= p >= 0.05 and len(set(verdicts)) == 1
            else:
                chance = differ = "– (a run with under 2 rounds measured)"
            vword = ("the same: " + verdicts[0]) if len(set(verdicts)) == 1 else \
                ", ".join(verdicts)
            print(f"| {server} | " + " | ".join(cells) + f" | {word} | {chance} | {vword} | "
                  f"{differ} |")
    print("\nfp-kernel's p99 against memcached's at 10% and 50% of memcached's saturation, "
          "per round (µs):\n")
    print("| run | round | load | fp-kernel p99 | memcached p99 | no worse |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(runs):
        for rnd, f, a, b, ok in kernel_vs_memcached(r):
            print(f"| {i + 1} | {rnd} | {float(f):.0%} | {a:.0f} | {b:.0f} | "
                  f"{'yes' if ok else 'no'} |")
    print(f"\nruns agree by the issue's check: {'yes' if ok_all else 'no'}")
    print(f"runs agree by verdict, with no run effect found at 5%: "
          f"{'yes' if sound_all else 'no'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    sys.exit(main(sys.argv[1:]))
