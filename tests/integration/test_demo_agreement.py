"""bench/demo_agreement.py's statistics on made-up data: the issue's check, how often it
passes when nothing differs, and the exact Kruskal-Wallis test across runs."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import demo_agreement as da  # noqa: E402


def test_literal_check():
    assert da.literal_ok([[1, 2, 3], [1.5, 2, 2.5], [0, 2, 9]])
    assert not da.literal_ok([[1, 2, 3], [2.5, 2.6, 2.7]])       # 2 outside [2.5, 2.7]


def test_identical_runs_rarely_pass_the_literal_check():
    # rank-based, so a number of the round counts alone; seeded, so the same every run
    p3 = da.chance_literal([3, 3, 3])
    assert 0.10 < p3 < 0.16, p3
    assert da.chance_literal([3, 3, 3]) == p3
    assert da.chance_literal([9, 9, 9], draws=4000) > 0.8      # more rounds: wider ranges


def test_kruskal_exact():
    assert da.ranks([5, 1, 5, 3]) == [3.5, 1, 3.5, 2]
    # three runs that do not overlap at all: only the 3! orders of the groups are as
    # extreme, of 9! / (3! 3! 3!) = 1680 assignments
    h, p = da.kruskal_p([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert abs(p - 6 / 1680) < 1e-12 and h > 7, (h, p)
    # interleaved runs: nothing to tell them apart
    h, p = da.kruskal_p([[1, 4, 7], [2, 5, 8], [3, 6, 9]])
    assert p > 0.5, (h, p)
    # too many assignments to list (5 runs of 5): seeded draws, still separated
    groups = [[10 * k + i for i in range(5)] for k in range(5)]
    h, p = da.kruskal_p(groups, draws=2000)
    assert p < 0.01, (h, p)


def test_per_round_ratio():
    run = {"rounds": [
        {"usr/memcached": {"saturation_rps": 100, "at_slo": {"500": 50, "100": 0}},
         "usr/fp-xdp": {"saturation_rps": 250, "at_slo": {"500": 100, "100": 30}}},
        {"usr/memcached": {"saturation_rps": 200, "at_slo": {"500": 80}},
         "usr/fp-xdp": {"saturation_rps": 300, "at_slo": {"500": 120}}},
    ]}
    assert da.per_round(run, "fp-xdp", "saturation") == [2.5, 1.5]
    assert da.per_round(run, "fp-xdp", "slo_500") == [2.0, 1.5]
    assert da.per_round(run, "fp-xdp", "slo_100") == []      # memcached never met it
