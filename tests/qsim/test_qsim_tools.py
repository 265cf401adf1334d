# test_qsim_tools.py: the Python side of qsim: bounds.py for other plots, plot.py, figures.py.
"""Tests for tools/qsim/*.py against the built qsim (see test_qsim.py for FP_BUILD_DIR)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools" / "qsim"
BUILD = Path(os.environ.get("FP_BUILD_DIR", REPO / "build" / "release"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
QSIM = BUILD / "tools" / "qsim" / "qsim"

pytestmark = pytest.mark.skipif(not QSIM.exists(), reason=f"{QSIM} not built")


@pytest.fixture(scope="module")
def bounds():
    spec = importlib.util.spec_from_file_location("qsim_bounds", TOOLS / "bounds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_py(script, *args):
    env = dict(os.environ, FP_BUILD_DIR=str(BUILD))
    return subprocess.run([sys.executable, str(TOOLS / script), *map(str, args)],
                          capture_output=True, text=True, env=env)


def test_find_qsim_follows_fp_build_dir(bounds, monkeypatch):
    monkeypatch.delenv("FP_QSIM", raising=False)
    monkeypatch.setenv("FP_BUILD_DIR", str(BUILD))
    assert Path(bounds.find_qsim()) == QSIM


def test_bound_curve(bounds, monkeypatch):
    monkeypatch.setenv("FP_QSIM", str(QSIM))
    c = bounds.bound_curve(servers=4, disc="part", dist="exp", mean_us=20,
                           loads=(0.2, 0.5), requests=200_000)
    assert c["load"] == [0.2, 0.5]
    assert c["rate_krps"] == pytest.approx([40.0, 100.0])  # 0.2 * 4 cores / 20 us
    # 4 x M/M/1: p99 sojourn = ln(100) / (1 - rho) mean service times.
    assert c["p99"][1] == pytest.approx(4.605 / 0.5, rel=0.05)
    assert c["p99_us"][1] == pytest.approx(20 * c["p99"][1], rel=1e-4)
    assert c["config"]["discipline"] == "part"


def test_max_load(bounds, monkeypatch):
    monkeypatch.setenv("FP_QSIM", str(QSIM))
    assert abs(bounds.max_load(servers=1, requests=1_000_000) - 0.5395) < 0.01


def test_qsim_errors_surface(bounds, monkeypatch):
    monkeypatch.setenv("FP_QSIM", str(QSIM))
    with pytest.raises(bounds.QsimError, match="--dist"):
        bounds.run_qsim(["--dist", "nope"])
    monkeypatch.setenv("FP_QSIM", "/nonexistent/qsim")
    with pytest.raises(bounds.QsimError, match="cannot run"):
        bounds.run_qsim([])


def test_draw_bound_beside_measured(bounds, monkeypatch, tmp_path):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    monkeypatch.setenv("FP_QSIM", str(QSIM))
    fig, ax = plt.subplots()
    ax.plot([0.1, 0.5], [20, 60], "o-", label="measured")
    line = bounds.draw_bound(ax, servers=2, disc="fcfs", dist="exp", mean_us=10, x="mrps",
                             y="p99_us", loads=(0.1, 0.3, 0.5), requests=100_000)
    assert list(line.get_xdata()) == pytest.approx([0.02, 0.06, 0.1])
    assert line.get_label() == "M/G/2/FCFS bound, exp"
    with pytest.raises(ValueError):
        bounds.draw_bound(ax, x="furlongs")
    fig.savefig(tmp_path / "b.png")
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_plot_py(tmp_path):
    pytest.importorskip("matplotlib")
    r = tmp_path / "r.json"
    r.write_text(subprocess.run([str(QSIM), "-n", "2", "-l", "0.2,0.6", "-N", "20000",
                                 "--format", "json"], capture_output=True, text=True,
                                check=True).stdout)
    p = run_py("plot.py", r, "-o", tmp_path / "p.png", "--y", "p99_us")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.parametrize("script,args", [
    ("plot.py", []), ("plot.py", ["/nonexistent.json", "-o", "x.png"]),
    ("plot.py", ["a.json", "-o", "x.png", "--y", "nonsense"]),
    ("figures.py", []), ("figures.py", ["maxload", "--servers", "0"]),
    ("figures.py", ["maxload", "--dists", "gamma", "--servers", "2", "-N", "1000"]),
    ("figures.py", ["shenango", "--bogus"]),
])
def test_python_entry_points_bad_args(script, args):
    p = run_py(script, *args)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_figures_maxload_small(tmp_path):
    pytest.importorskip("matplotlib")
    js, png = tmp_path / "m.json", tmp_path / "m.png"
    p = run_py("figures.py", "maxload", "--servers", "1", "--dists", "exp", "--discs",
               "part", "-N", "200000", "--json", js, "--png", png)
    assert p.returncode == 0, p.stderr
    assert "| 1 | part |" in p.stdout
    assert abs(json.loads(js.read_text())["max_load"]["1/exp/part"] - 0.54) < 0.02
    assert "figures: max-load 1/1" in p.stderr
    assert png.stat().st_size > 1000
