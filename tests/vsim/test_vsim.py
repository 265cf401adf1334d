# test_vsim.py: fp-vsim, the many-core simulator: determinism, the queueing bounds, its CLI.
"""Tests for tools/vsim (fp-vsim), run against the built binary.

The virtual world is deterministic, so every check on it is exact for its seed; tolerances
against qsim cover the sampling difference between two simulators drawing different
streams (measured over 5 seeds while writing them: the per-seed p99 spread at these sizes
is about 3%, the tolerance 10%). The real-thread world is only checked for correctness
(every request answered once, in order within its flow), never for timing.
"""

import json
import os
import statistics
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("FP_BUILD_DIR", REPO / "build" / "release"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
VSIM = BUILD / "tools" / "vsim" / "fp-vsim"
QSIM = BUILD / "tools" / "qsim" / "qsim"

pytestmark = pytest.mark.skipif(not VSIM.exists(), reason=f"{VSIM} not built")


def run(*args, exe=VSIM):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)


def vjson(*args):
    p = run(*args, "--format", "json", "--quiet")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def qp99(*args):
    p = run(*args, "--format", "json", exe=QSIM)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["points"][0]["p99_us"]


def test_same_seed_same_bytes():
    args = ["-n", "8", "-d", "bimodal1", "-l", "0.8", "--requests", "30000", "--format", "json",
            "--quiet"]
    a, b = run(*args), run(*args)
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    c = run(*args, "--seed", "2")
    assert c.stdout != a.stdout


IDEAL_STEAL = ["--sched", "steal", "--victim", "oldest", "--notify", "ipi"]


@pytest.mark.parametrize("dist,load", [("exp", 0.5), ("exp", 0.8), ("bimodal1", 0.7)])
def test_zero_overheads_match_qsim(dist, load):
    """With no overheads, stealing is qsim's ZygOS model and partitioned is n x M/G/1; and
    M/G/n FCFS <= stealing <= partitioned, as theory says (thesis §3.2.3)."""
    seeds = (1, 2, 3)
    common = ["-n", "4", "-d", dist, "-l", load, "--requests", 100000]
    vs = statistics.mean(vjson(*common, *IDEAL_STEAL, "--seed", s)["points"][0]["p99_us"]
                         for s in seeds)
    vp = statistics.mean(vjson(*common, "--sched", "part", "--seed", s)["points"][0]["p99_us"]
                         for s in seeds)
    q = ["-n", "4", "-d", dist, "-l", load, "-N", 100000]
    qs = statistics.mean(qp99(*q, "--disc", "steal", "--seed", s) for s in seeds)
    qp = statistics.mean(qp99(*q, "--disc", "part", "--seed", s) for s in seeds)
    qf = statistics.mean(qp99(*q, "--disc", "fcfs", "--seed", s) for s in seeds)
    assert abs(vs / qs - 1) < 0.10, (vs, qs)
    assert abs(vp / qp - 1) < 0.10, (vp, qp)
    assert qf <= vs * 1.02 and vs < vp, (qf, vs, vp)


def test_stealing_beats_partitioned_with_costs():
    costs = REPO / "bench" / "costs" / "kvm16-n2.txt"
    common = ["-n", "16", "-d", "exp", "-l", "0.8", "--requests", 60000, "--costs", costs]
    s = vjson(*common)["points"][0]
    p = vjson(*common, "--sched", "part")["points"][0]
    assert s["steals"] > 0 and p["steals"] == 0
    assert s["p99_us"] < p["p99_us"]


def test_every_request_answered_in_order():
    """Few flows, so each pipelines many requests and batches alternate between workers:
    every reply is counted once and none is out of order within its flow."""
    for extra in ([], IDEAL_STEAL, ["--sched", "part"]):
        d = vjson("-n", "16", "-d", "bimodal1", "-l", "0.9", "--flows", "40", "--requests",
                  40000, "--warmup", "0", *extra)
        pt = d["points"][0]
        assert pt["count"] == 40000
        assert pt["order_errors"] == 0
        if extra != ["--sched", "part"]:
            assert pt["returns"] == pt["steals"]


def test_max_load_search():
    d = vjson("-n", "16", "-d", "exp", "--max-load", "--requests", 40000, *IDEAL_STEAL)
    assert 0.8 < d["max_load"] < 1.0
    d = vjson("-n", "16", "-d", "exp", "--max-load", "--requests", 40000, "--sched", "part")
    assert 0.3 < d["max_load"] < 0.7


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_real_threads_answer_everything(tmp_path):
    cpus = allowed_cpus()
    cal = tmp_path / "costs.txt"
    d = vjson("--real", "-n", "1", "--cores", f"{cpus[0]},{cpus[1]}", "-l", "0.2",
              "--requests", 3000, "--warmup", "0", "--calibrate", cal)
    pt = d["points"][0]
    assert pt["count"] == 3000 and pt["order_errors"] == 0
    assert set(pt["measured_costs"]) >= {"rx_ns", "run_ns", "poll_ns"}
    # the calibration file is a --costs file
    v = vjson("-n", "1", "-l", "0.2", "--requests", 3000, "--costs", cal)
    assert v["config"]["costs"]["rx_ns"] == pytest.approx(pt["measured_costs"]["rx_ns"], rel=0.01)


ALLOC = ["--alloc", "--notify", "ipi"]


def test_alloc_answers_everything_in_order():
    """Burstable workers granted and parked thousands of times: every request answered
    once, in order within its flow, every stolen flow sent home."""
    for load in ("0.2", "0.9"):
        pt = vjson("-n", "8", "-d", "bimodal1", "-l", load, "--flows", "40", "--requests",
                   30000, "--warmup", "0", *ALLOC, "--homes", "2")["points"][0]
        assert pt["count"] == 30000 and pt["order_errors"] == 0
        assert pt["returns"] == pt["steals"] > 0
        assert pt["grants"] > 100 and pt["parks"] >= pt["grants"] - 6


def test_alloc_gives_idle_cores_to_the_batch_job():
    """The pool's idle share falls as load rises; what the workers hold and what the batch
    job gets add up to the machine; with no overheads the cores held stay within a core or
    two of the load's own need (load x n), never below it."""
    shares = []
    for load in (0.1, 0.5, 0.9):
        pt = vjson("-n", "16", "-l", load, "--requests", 60000, *ALLOC)["points"][0]
        assert pt["mean_cores"] == pytest.approx(16 * (1 - pt["batch_share"]), rel=1e-4)
        assert 16 * load <= pt["mean_cores"] <= 16 * load + 2.5, pt["mean_cores"]
        assert pt["congested_passes"] >= pt["grants"] > 0
        shares.append(pt["batch_share"])
    assert shares[0] > 0.8 and shares[0] > shares[1] > shares[2] > 0


def test_alloc_interval_matters():
    """Shenango's Figure 8: a slow allocator leaves the work queued behind the homes while
    cores park after 2 us idle; 5 us keeps the tail near the static allocation's."""
    common = ["-n", "16", "-l", "0.5", "--requests", 60000, "--notify", "ipi"]
    static = vjson(*common)["points"][0]["p999_us"]
    fast = vjson(*common, "--alloc")["points"][0]["p999_us"]
    slow = vjson(*common, "--alloc", "--alloc-us", "500")["points"][0]["p999_us"]
    assert fast < 1.5 * static and slow > 5 * fast, (static, fast, slow)


def test_shift_windows():
    """--shift's three phases show in the windows: the offered rate steps up and back, the
    answered rate follows, and the cores held follow the load."""
    d = vjson("-n", "16", "--shift", "0.05:0.8:5", "--windows", 1000, *ALLOC)
    assert d["config"]["shift"] == {"low": 0.05, "high": 0.8, "phase_ms": 5}
    pt = d["points"][0]
    assert pt["order_errors"] == 0
    w = pt["windows"]
    assert len(w) == 15 and [x["t_ms"] for x in w] == list(range(15))
    low = [x for x in w if x["t_ms"] < 5 or x["t_ms"] >= 10]
    high = [x for x in w if 5 <= x["t_ms"] < 10]
    assert all(x["offered_mrps"] == pytest.approx(0.08) for x in low)
    assert all(x["offered_mrps"] == pytest.approx(1.28) for x in high)
    # the windows count every request; the point leaves out the first 5% (--warmup)
    assert pt["count"] < sum(x["count"] for x in w) <= pt["count"] / 0.95 + 1
    assert min(x["mean_cores"] for x in high) > 3 * max(x["mean_cores"] for x in low[1:])
    assert min(x["done_mrps"] for x in high) > 1.0


@pytest.mark.parametrize("args,msg", [
    (["--alloc", "--real", "-n", "1"], "virtual time only"),
    (["--alloc", "--sched", "part"], "--sched steal"),
    (["--alloc", "-n", "2", "--homes", "2"], "none burstable"),
    (["--homes", "2"], "needs --alloc"),
    (["--shift", "0.1:2:5"], "--shift"),
    (["--shift", "0.1:0.5:5", "--sweep", "0.1:0.2:0.1"], "one virtual run"),
    (["--windows", "0"], "--windows"),
    (["-n", "0"], "--workers"),
    (["--sched", "fifo"], "--sched"),
    (["--dist", "pareto"], "--dist"),
    (["--sweep", "0.9:0.1:0.1"], "--sweep"),
    (["--cost", "nope=3"], "no cost named"),
    (["--cost", "rx_ns"], "NAME=NS"),
    (["--calibrate", "/tmp/x"], "add --real"),
    (["--real", "-n", "2", "--cores", "0,1"], "need 3"),
    (["--real", "-n", "1", "--cores", "0"], "need 2"),
    (["--costs", "/nonexistent/file"], "cannot open"),
    (["extra"], "unexpected argument"),
])
def test_bad_arguments_one_line(args, msg):
    p = run(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fp-vsim: ") and msg in lines[0], p.stderr


def test_costs_file_names_the_bad_line(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# a comment\nrx_ns=100\n\nsteal_ns=abc\n")
    p = run("--costs", f)
    assert p.returncode == 2 and f"{f}:4" in p.stderr


def test_help_lists_every_option():
    h = run("--help").stdout
    for opt in ("--workers", "--sched", "--victim", "--notify", "--dist", "--load", "--sweep",
                "--max-load", "--costs", "--real", "--cores", "--calibrate", "--format",
                "--alloc", "--homes", "--alloc-us", "--spin-us", "--shift", "--windows"):
        assert opt in h
    names = run("--list-costs").stdout.split()
    assert "rx_ns" in names and "steal_ns" in names and "wake_ns" in names
