"""The main job: `./flowplane demo --quick` runs to the end, writes a well-formed table, JSON
and PNG, and leaves no namespace, interface, XDP program or process behind.

As root it is the real demo (three servers over a veth pair); otherwise the unprivileged
--loopback variant, and the plain demo must explain that it needs root.
"""
import json
import os
import subprocess

from conftest import run

SERVERS_ROOT = ["memcached", "fp-kernel", "fp-xdp"]
SERVERS_LOOPBACK = ["memcached", "fp-kernel"]


def netns_names():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def leftover_processes():
    r = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True)
    return [l for l in r.stdout.splitlines()
            if ("fp-kv" in l or "fp-loadgen" in l or "memcached -U 0 -l" in l) and "ps -eo" not in l]


def test_demo_quick(root):
    is_root = os.geteuid() == 0
    before = netns_names()
    args = [root / "flowplane", "demo", "--quick"] + ([] if is_root else ["--loopback"])
    r = run(args, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = root / "results" / "demo"
    servers = SERVERS_ROOT if is_root else SERVERS_LOOPBACK

    # The table: printed and written, one row per server, a ratio against memcached.
    md = (out / "summary.md").read_text()
    assert md in r.stdout
    assert md.startswith("Machine: ") and "### USR" in md
    rows = [l for l in md.splitlines() if l.startswith("| ") and l.split("|")[1].strip() in servers]
    assert [l.split("|")[1].strip() for l in rows][:len(servers)] == servers, md
    for row in rows[:len(servers)]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1][0].isdigit(), row                 # saturation
        assert cells[-1].endswith("×") or cells[-1] == "memcached: no point ≤ 500 µs", row
    if is_root:
        assert "interface: XDP " in md, md.splitlines()[0]

    # The JSON: the summary, and every sweep as fp-loadgen wrote it.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["machine"]["cores"] >= 1 and summary["machine"]["kernel"]
    assert sorted(summary["runs"]) == sorted(f"usr/{s}" for s in servers)
    for name, run_ in summary["runs"].items():
        assert run_["saturation_rps"] > 0, name
        sweep = json.loads((out / f"usr-{name.split('/')[1]}.json").read_text())
        assert sweep["tool"] == "fp-loadgen" and len(sweep["points"]) >= 5
        for p in sweep["points"]:
            assert p["offered_rps"] > 0 and p["latency_us"]["p50"] <= p["latency_us"]["p99"]
            assert isinstance(p["valid"], bool)
        low = sweep["points"][0]   # the lightest load: every request answered, no error
        assert low["errors"] == 0 and low["timeouts"] == 0, (name, low)

    # The plot.
    png = (out / "usr.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10000

    # Nothing left behind.
    assert netns_names() <= before, netns_names() - before
    assert not any(n.startswith("fpdemo") for n in netns_names())
    assert leftover_processes() == []


def test_demo_without_root_explains(root):
    if os.geteuid() != 0:
        r = run([root / "flowplane", "demo"])
    else:
        r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 root / "flowplane", "demo"])
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "needs root" in r.stderr and "./flowplane demo --loopback" in r.stderr


def test_demo_interrupted_cleans_up(root):
    """Ctrl-C in the middle (SIGINT to the whole foreground group, as a terminal sends it):
    the demo stops and removes its namespaces and processes."""
    import signal
    import time

    if os.geteuid() != 0:
        args = [root / "flowplane", "demo", "--quick", "--loopback"]
    else:
        args = [root / "flowplane", "demo", "--quick"]
    before = netns_names()
    p = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not leftover_processes():
            time.sleep(0.2)     # wait until a server or the generator is running
        assert leftover_processes(), "the demo never started a server"
        time.sleep(2)
        os.killpg(p.pid, signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode != 0
    deadline = time.time() + 10
    while time.time() < deadline and (leftover_processes() or netns_names() - before):
        time.sleep(0.2)
    assert leftover_processes() == []
    assert netns_names() <= before, netns_names() - before
