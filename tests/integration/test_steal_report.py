"""bench/steal_report.py on made-up runs: the part/steal table and fp-kv against memcached
(no root, no network)."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPORT = ROOT / "bench" / "steal_report.py"


def point(rps, p99, valid=True):
    return {"target_rps": rps, "valid": valid, "latency_us": {"p99": p99}}


def write(d, tag, points):
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{tag}.json").write_text(json.dumps({"points": points}))


def report(d):
    p = subprocess.run([sys.executable, str(REPORT), str(d)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def row(out, *cells):
    lines = [l for l in out.splitlines() if all(f"| {c} |" in l for c in cells)]
    assert len(lines) == 1, (cells, out)
    return lines[0]


def test_memcached_beside_fp_kv(tmp_path):
    # two repetitions; at 40k fp-kv (both policies) beats memcached in both, at 80k
    # memcached is better under part in one repetition only, and one point is invalid
    for rep, (mc, part, steal) in enumerate([((100, 300), (50, 400), (40, 200)),
                                             ((120, 280), (60, 250), (45, 210))]):
        d = tmp_path / f"r{rep + 1}"
        write(d, "kv_n2_memcached", [point(40000, mc[0]), point(80000, mc[1])])
        write(d, "kv_n2_part", [point(40000, part[0]), point(80000, part[1])])
        write(d, "kv_n2_steal", [point(40000, steal[0]), point(80000, steal[1], rep == 0)])
    out = report(tmp_path)
    # the part/steal table is unchanged by the third policy
    assert "steal better" in row(out, "fp-kv (USR)", "2", "40k")
    r40 = row(out, "2", "40k", "2", "110 (100-120)")
    assert r40.count("**fp-kv better**") == 2, r40
    r80 = row(out, "2", "80k", "2", "290 (280-300)")
    assert "0.75, 1.12: within noise" in r80 and "invalid points*" in r80, r80


def test_runs_without_memcached_have_one_table(tmp_path):
    write(tmp_path, "bimodal1_n1_part", [point(20000, 200)])
    write(tmp_path, "bimodal1_n1_steal", [point(20000, 100)])
    out = report(tmp_path)
    assert "memcached" not in out
    assert "steal better (one run)" in row(out, "bimodal1 10 µs", "1", "20k")
