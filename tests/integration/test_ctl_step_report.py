"""bench/ctl_step.py's arithmetic on made-up data: the batch job's work per second, the
energy model over measured sleep, and the report's rows (no root, no network)."""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import ctl_step as cs  # noqa: E402


def test_batch_series_spreads_work_and_shows_stops(tmp_path):
    f = tmp_path / "b.txt"
    # 100 blocks a tenth of a second for 1 s, then stopped 1.5 s (no lines), then 0.5 s more
    rows = [(100.0 + 0.1 * i, 100 * i) for i in range(11)]
    rows += [(102.5, 1000), (103.0, 1500)]
    f.write_text("".join(f"{t:.3f} {n}\n" for t, n in rows))
    per = cs.batch_series(f, 100.0, 4)
    assert [round(x) for x in per[:1]] == [1000]
    # the 1.5 s between the lines at 101.0 and 102.5 hold no work; 102.5-103.0, 500
    assert [round(x) for x in per[1:]] == [0, 500, 0], per
    assert round(sum(per)) == 1500
    assert cs.batch_series(tmp_path / "none.txt", 100.0, 4) == []


def test_model_energy_counts_sleep_at_c6():
    pw = cs.Power({k: v[0] for k, v in cs.read_power(
        ROOT / "bench" / "power" / "xeon-e5-2665.txt").items()})
    p = pw.p
    awake = [{"slept_ns": 0, "parks": 0}]
    asleep = [{"slept_ns": 10e9, "parks": 2}]
    zero = [{"slept_ns": 0, "parks": 0}]
    e_awake = cs.model_energy(pw, zero, awake, 10)
    e_asleep = cs.model_energy(pw, zero, asleep, 10)
    assert abs(e_awake - 10 * (p["uncore_w"] + pw.core(p["f_nom"]))) < 1e-9
    assert abs(e_asleep - (10 * (p["uncore_w"] + p["core_c6_w"]) + 2 * p["wake_uj"] * 1e-6)) < 1e-9
    # a counter that went backwards (a restarted run) counts no sleep, never negative time
    assert cs.model_energy(pw, asleep, zero, 10) == e_awake


def test_summary_reports_batch_and_moves():
    a = argparse.Namespace(pattern="step:1k:2k:1k:1", duration=2, app="kv", service_us=20,
                           server_cores="0,1", lg_cores="1", policy="", rounds=1, slo_us=500,
                           batch=True, power=str(ROOT / "bench" / "power" / "xeon-e5-2665.txt"))
    pt = {"target_rps": 1000, "p99_us": 100, "valid": True, "errors": 0, "timeouts": 0}
    base = {"server_cpu_s": 1.0, "energy_j": 40.0, "energy_from": "model", "moves": 0,
            "rst_tx": 0, "points": [pt, dict(pt, p99_us=900)], "peak": 1000, "round": 1}
    dyn = dict(base, conf="dynamic", moves=64, move_conns=3, move_held=5, move_us_mean=20.0,
               move_us_max=50.0, polling=[(0.0, 1), (1.2, 2)], ups=1, downs=0,
               polling_per_s=[1, 2], batch_blocks_per_s=[800, 100])
    fifo = dict(base, conf="static1-fifo", points=[pt, pt])
    md = cs.summary([dict(base, conf="static1"), fifo, dyn], a)
    assert "| dynamic | 1 (1-1) |" in md, md
    assert "| static1-fifo | 0 (0-0) |" in md, md      # every configuration run has its row
    assert "64 group moves (3 connections, 5 frames held" in md, md
    # 800 of 1000 in the one second worker 1 was parked; 100 in the other
    assert "| dynamic 1 | 1000 | 45% | 1 | 80% | 100 |" in md, md
    assert "modelled (xeon-e5-2665.txt" in md, md
