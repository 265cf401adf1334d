"""The demo's report arithmetic (bench/kv_bench.py), on made-up points: SLO throughput
interpolated between the points around the crossing, refinement rates inside each bracket,
spreads and verdicts over rounds, ratios taken within a round. Pure Python, no servers."""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import kv_bench as kb  # noqa: E402


def pt(target, achieved, p99, valid=True):
    return {"target_rps": target, "achieved_rps": achieved, "valid": valid,
            "latency_us": {"p50": p99 / 2, "p99": p99}, "slip_us": {"p99": 1.0},
            "completed": 1000, "duration_s": 2.0, "client_loop_gap_us": 0.0}


CURVE = [pt(10e3, 10e3, 50), pt(50e3, 50e3, 80), pt(90e3, 90e3, 300), pt(100e3, 98e3, 900)]


def test_slo_throughput_interpolates_between_the_bracketing_points():
    x, how = kb.slo_throughput(CURVE, 500)      # 300 us at 90k, 900 us at 98k
    assert abs(x - (90e3 + 8e3 * 200 / 600)) < 1e-6 and "interpolated" in how
    x, _ = kb.slo_throughput(CURVE, 100)        # 80 us at 50k, 300 us at 90k
    assert abs(x - (50e3 + 40e3 * 20 / 220)) < 1e-6


def test_slo_throughput_edges_and_invalid_points():
    assert kb.slo_throughput(CURVE, 10)[0] == 0.0            # over at the lightest load
    x, how = kb.slo_throughput(CURVE, 5000)                  # never crossed
    assert x == 98e3 and "not crossed" in how
    # An invalid point is never used, even when it would bracket the crossing.
    pts = CURVE[:2] + [pt(70e3, 60e3, 5000, valid=False)] + CURVE[2:]
    assert kb.slo_throughput(pts, 500) == kb.slo_throughput(CURVE, 500)
    # A lone spike at a light load (a stall) does not zero the figure: the last crossing counts.
    spiky = [CURVE[0], pt(30e3, 30e3, 2000)] + CURVE[1:]
    assert kb.slo_throughput(spiky, 500) == kb.slo_throughput(CURVE, 500)
    assert kb.slo_throughput([pt(1e3, 1e3, 9, valid=False)], 500) == (0.0, "no valid point")


def test_refine_rates_fall_inside_each_bracket():
    extra = kb.refine_rates(CURVE)
    assert extra == sorted({round(90e3 + 10e3 / 3), round(90e3 + 20e3 / 3),
                            round(50e3 + 40e3 / 3), round(50e3 + 80e3 / 3)})
    assert kb.refine_rates([pt(1e3, 1e3, 10)]) == []         # nothing crosses: no extra run


def test_spread_and_verdict():
    st = kb.spread([3.0, None, 1.0, 2.0])
    assert st == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert kb.spread([None]) is None and kb.verdict(None) == "not measured"
    assert kb.verdict(kb.spread([1.1, 1.5, 2.0])) == "win"
    assert kb.verdict(kb.spread([0.5, 0.9])) == "loss"
    assert kb.verdict(kb.spread([0.9, 1.2, 1.5])) == "within noise"
    assert kb.verdict(kb.spread([2.0])) == "one round: no spread"


def summary(sat, slo500):
    return {"saturation_rps": sat, "json": "x.json", "at_slo": {"500": slo500, "100": 0.0},
            "own": {}, "common": {}, "points": 4, "invalid_points": 0, "slip_p99_max_us": 3.0,
            "steal_share": 0.01, "server_retransmits": 2, "completed": 1000,
            "client_gap_us": 2000.0, "client_gap_s": 4.0, "client_stalls": 2}


def test_aggregate_takes_ratios_within_a_round():
    # A slow second round halves both servers: the ratio stays 2 in both rounds.
    rounds = [{"usr/memcached": summary(100e3, 50e3), "usr/fp-xdp": summary(200e3, 100e3)},
              {"usr/memcached": summary(50e3, 25e3), "usr/fp-xdp": summary(100e3, 50e3)}]
    agg = kb.aggregate(rounds)
    fx = agg["usr/fp-xdp"]
    assert fx["vs_memcached"]["saturation"] == {"median": 2.0, "min": 2.0, "max": 2.0, "n": 2}
    assert fx["verdict"]["slo_500"] == "win"
    assert fx["verdict"]["slo_100"] == "not measured"        # memcached at 0: no ratio
    assert fx["saturation"]["min"] == 100e3 and fx["saturation"]["max"] == 200e3
    assert fx["retransmits_per_1k"]["median"] == 2.0
    md = kb.table({"machine": {"cpu": "c", "cores": 2, "kernel": "k", "memcached": "m",
                               "interface_mode": "i", "date": "d", "command": "cmd"},
                   "config": {"rounds": 2, "duration": 2.0, "workloads": ["usr"]},
                   "runs": agg})
    assert "| fp-xdp | 150k (100k–200k) |" in md and "2.00× **win**" in md


def test_docs_quote_the_published_demo():
    """README.md and docs/results.md quote docs/demo/summary.* exactly as
    tools/publish_demo.py renders them: a figure edited by hand fails here."""
    sys.path.insert(0, str(ROOT / "tools"))
    import publish_demo
    assert publish_demo.main(["--check"]) == 0
