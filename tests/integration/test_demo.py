"""The main job: `./flowplane demo --quick` runs to the end, writes a well-formed table, JSON
and PNG, and leaves no namespace, interface, XDP program or process behind.

As root it is the real demo (three servers over a veth pair); otherwise the unprivileged
--loopback variant, and the plain demo must explain that it needs root.
"""
import json
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
import uuid

from conftest import run

SERVERS_ROOT = ["memcached", "fp-kernel", "fp-xdp"]
SERVERS_LOOPBACK = ["memcached", "fp-kernel"]


def netns_names():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def marked_env():
    """The environment for a demo this test starts: a marker that every process the demo
    starts inherits (ip netns exec, taskset and subprocess keep the environment), so the
    leftover check sees only this test's processes, never another run's on the same machine."""
    token = f"{os.getpid()}-{uuid.uuid4().hex}"
    return dict(os.environ, FP_TEST_RUN=token), token


def leftover_processes(token):
    """Servers and generators still running that carry @token, as 'pid args'."""
    want = f"FP_TEST_RUN={token}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue        # gone, or not ours to read
        if want in env and any(n in args for n in (b"fp-kv", b"fp-loadgen", b"memcached")):
            found.append(f"{pid} {args.decode(errors='replace').strip()}")
    return found


def blocked_where(pid):
    """@pid and its descendants as 'pid state wchan args' lines: where each one waits (the
    kernel function in wchan), so a demo that stalls before its first server says why."""
    children = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(pathlib.Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    lines, todo = [], [pid]
    while todo:
        q = todo.pop()
        todo += children.get(q, [])
        try:
            state = pathlib.Path(f"/proc/{q}/stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = pathlib.Path(f"/proc/{q}/wchan").read_text().strip() or "-"
            args = pathlib.Path(f"/proc/{q}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        lines.append(f"{q} {state} {wchan} {args.decode(errors='replace').strip()[:160]}")
    return "\n".join(lines)


def test_demo_quick(root):
    is_root = os.geteuid() == 0
    before = netns_names()
    args = [root / "flowplane", "demo", "--quick"] + ([] if is_root else ["--loopback"])
    env, token = marked_env()
    r = run(args, timeout=900, env=env)
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
        if cells[0] == "memcached":
            assert cells[4:7] == ["1", "1", "1"], row
        else:                                             # one round: a ratio, no verdict
            assert all(("×" in c and "one round" in c) or c.startswith("–") for c in cells[4:7]), row
    assert "Stalls and retransmissions" in md and "steal time" in md
    if is_root:
        assert "interface: XDP " in md, md.splitlines()[0]

    # The JSON: the summary, and every sweep as fp-loadgen wrote it.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["machine"]["cores"] >= 1 and summary["machine"]["kernel"]
    assert sorted(summary["runs"]) == sorted(f"usr/{s}" for s in servers)
    assert len(summary["rounds"]) == 1 and summary["config"]["rounds"] == 1   # --quick
    for name, run_ in summary["runs"].items():
        assert run_["saturation_rps"] > 0, name
        assert 0 <= run_["steal_share"]["median"] <= 1, name
        assert run_["retransmits_per_1k"] is not None, name     # counted on every server
        one = summary["rounds"][0][name]
        for slo in ("500", "100"):
            assert one["at_slo_how"][slo], (name, one)
            assert 0 <= one["at_slo"][slo] <= max(1.0, 1.2 * one["saturation_rps"]), (name, one)
        sweep = json.loads((out / f"usr-{name.split('/')[1]}-r1.json").read_text())
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
    assert leftover_processes(token) == []


def test_demo_without_root_explains(root):
    if os.geteuid() != 0:
        r = run([root / "flowplane", "demo"])
    else:
        # As root, run the entry point as nobody. The checkout itself may be out of nobody's
        # reach (a clone under /root, mode 0700), so nobody runs a world-readable copy of the
        # script: the root check comes before anything else in the tree is touched.
        d = tempfile.mkdtemp(prefix="fp-demo-noroot-")
        try:
            os.chmod(d, 0o755)
            script = pathlib.Path(d) / "flowplane"
            shutil.copy(root / "flowplane", script)
            script.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
            r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                     script, "demo"], cwd=d)
        finally:
            shutil.rmtree(d)
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
    env, token = marked_env()
    # its output to a file: a pipe nobody reads while we wait could fill and stop it
    log = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([str(a) for a in args], stdout=log, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True, env=env)
    try:
        # The behaviour under test is the clean-up, not how soon the first server starts:
        # the wait is long (a busy kernel can take its time over namespaces), and a stall is
        # reported with where each of the demo's processes waits.
        wait_s = 600
        deadline = time.time() + wait_s
        while time.time() < deadline and not leftover_processes(token) and p.poll() is None:
            time.sleep(0.2)     # wait until a server or the generator is running
        if not leftover_processes(token):
            log.seek(0)
            said = log.read()[-3000:]
            if p.poll() is not None:   # it ended before starting one: say how
                raise AssertionError(f"the demo exited {p.returncode} before starting a "
                                     f"server:\n{said}")
            raise AssertionError(f"the demo started no server within {wait_s} s:\n{said}\n"
                                 f"its processes (pid state wchan args):\n"
                                 f"{blocked_where(p.pid)}")
        time.sleep(2)
        os.killpg(p.pid, signal.SIGINT)
        p.wait(60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
    assert p.returncode != 0
    deadline = time.time() + 10
    while time.time() < deadline and (leftover_processes(token) or netns_names() - before):
        time.sleep(0.2)
    assert leftover_processes(token) == []
    assert netns_names() <= before, netns_names() - before
