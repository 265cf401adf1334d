"""ZygOS's interrupts in the runtime (issue 17): --sched steal --notify ipi.

fp-echo spin --native on AF_XDP with two workers stealing each other's flows; a home busy
in a long handler is interrupted by the idle worker (a signal to its thread) and, inside
the signal handler, executes the calls of its flows that came back from the thief and
runs its stack on waiting frames so the thief can steal them. FP_RT_IPI_FORCE makes the
idle worker interrupt every home inside a handler, so the handler's paths run often.
fp-loadgen, in the other namespace over Linux TCP, checks that every reply is its
request's, in order, on every connection. These tests check behaviour only: nothing
lost, duplicated or reordered, the counters consistent, the refusals one line.

Needs root (netns, veth with 2 queues, AF_XDP); builds its own topology and removes it.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
from netns import Topo  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, AF_XDP)")

PORT = 7
TAG = f"fpi{os.getpid() % 10000}"
LENIENT = ["--max-slip-us", "100000", "--timeout", "30000", "--backlog", "4096"]


@pytest.fixture(scope="module")
def topo():
    t = Topo(TAG, queues=2)
    t.up()
    try:
        yield t
    finally:
        t.down()


def server_argv(topo, build_dir, stats, *extra):
    return [build_dir / "apps" / "echo" / "fp-echo", "spin", "--native", "--port", PORT,
            "--if", topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24", "--workers", "2",
            "--cores", "0,1", "--sched", "steal", "--stats", stats, *extra]


class LiveLines:
    """The lines a process has printed on @fd, read without waiting on a clock: take() reads
    what is there now, and with @until_one_more also blocks until one more line is
    complete (so that line was printed after the call)."""

    def __init__(self, fd):
        self.fd, self.buf, self.lines = fd, b"", []

    def _split(self):
        *done, self.buf = self.buf.split(b"\n")
        self.lines += [x.decode() for x in done if x.strip()]
        return len(done)

    def take(self, until_one_more):
        import select
        while select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self.buf += chunk
        self._split()
        while until_one_more:
            chunk = os.read(self.fd, 65536)
            assert chunk, "fp-stats ended"
            self.buf += chunk
            if self._split():
                return


def workers(topo, build_dir, stats):
    r = topo.sh(topo.srv_ns, build_dir / "tools" / "fp-stats", "--name", stats, "--totals",
                check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])["workers"]


@pytest.mark.parametrize("depth,hold", [(1, False), (4, False), (4, True)])
def test_interrupted_homes_lose_nothing(topo, build_dir, tmp_path, depth, hold):
    """bimodal1 200 us (90% 100 us, 10% 1.1 ms) over 32 connections, each with up to
    @depth requests in flight: every reply is its request's; the homes were interrupted
    and counted each signal once; the server stops cleanly. With @hold
    (FP_RT_IPI_HOLD) an interrupt does nothing itself: it holds every frame it receives
    for the loop, as it does one that could allocate (a SYN, a FIN), and leaves every flow
    that came home to the loop, as it does one whose calls close it: they must go up in
    order after it."""
    stats = f"{TAG}-i{depth}{'h' if hold else ''}"
    env = dict(os.environ, FP_RT_IPI_FORCE="1", **({"FP_RT_IPI_HOLD": "1"} if hold else {}))
    srv = topo.popen(topo.srv_ns, server_argv(topo, build_dir, stats, "--notify", "ipi",
                                              "--ipi-after-us", "0"), env=env)
    try:
        deadline = time.time() + 15
        while True:
            assert srv.poll() is None, srv.stderr.read()
            try:
                workers(topo, build_dir, stats)
                break
            except (AssertionError, ValueError, IndexError, KeyError):
                assert time.time() < deadline, "server did not publish its stats in 15 s"
                time.sleep(0.2)
        out = tmp_path / "point.json"
        # the live view, every 0.5 s: its views are back to back, so those from the first
        # (printed before the load began) to one printed after the load cover all of it
        live = topo.popen(topo.srv_ns, [build_dir / "tools" / "fp-stats", "--name", stats,
                                        "--json", "--interval", "0.5"], text=False, bufsize=0)
        views = LiveLines(live.stdout.fileno())
        views.take(until_one_more=True)         # a view printed before the load began
        r = topo.sh(topo.cli_ns, build_dir / "apps" / "loadgen" / "fp-loadgen", "--server",
                    f"{topo.fp_srv_ip}:{PORT}", "--proto", "spin", "--service",
                    "bimodal1:200us", "--rate", "1k", "--duration", "2", "--conns", "32",
                    "--depth", str(depth), "--quiet", "--json", out, *LENIENT, check=False,
                    timeout=120)
        views.take(until_one_more=True)         # one ending after the load: covered
        live.send_signal(signal.SIGINT)
        live.communicate(timeout=10)
        views = [json.loads(x) for x in views.lines]
        assert r.returncode == 0, r.stderr
        (p,) = json.loads(out.read_text())["points"]
        assert p["errors"] == 0 and p["timeouts"] == 0 and p["dropped"] == 0, p
        assert p["completed"] == p["scheduled"] == p["ok"] > 0, p
        ws = workers(topo, build_dir, stats)
    finally:
        if srv.poll() is None:
            srv.send_signal(signal.SIGINT)
        try:
            srv.wait(20)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    err = srv.stderr.read()
    assert srv.returncode == 0, err
    assert "interrupts after 0 us" in err, err
    ipi = [w["ipi"] for w in ws]
    sent = sum(i["sent"] for i in ipi)
    got = sum(i["handled"] + i["late"] for i in ipi)
    # each signal arrives at most once (one outstanding per home); long handlers on both
    # homes with an idle thief polling beside them: some arrive inside one
    assert 0 < sum(i["handled"] for i in ipi) and got <= sent, ipi
    print("ipi counters:", ipi)
    if hold:
        assert sum(i["frames"] + i["calls"] for i in ipi) == 0, ipi
        assert sum(i["held"] + i["deferred"] for i in ipi) > 0, ipi
    # the live view shows the scheduler and the interrupts as rates, over every view
    keys = ("sched_local_per_s", "sched_stolen_per_s", "sched_remote_calls_per_s",
            "ipi_sent_per_s", "ipi_handled_per_s", "ipi_late_per_s")
    assert views and all(k in w and w[k] >= 0 for v in views for w in v["workers"]
                         for k in keys), views[:1]
    seen = {k: sum(w[k] * v["interval_s"] for v in views for w in v["workers"]) for k in keys}
    assert seen["sched_local_per_s"] + seen["sched_stolen_per_s"] > 0, seen
    assert seen["ipi_sent_per_s"] > 0, seen
    for w, i in zip(ws, ipi):
        assert i["frames"] + i["held"] <= w["rx_frames"] + w.get("steer_in", 0), (w, i)
        assert i["calls"] <= w["sched_remote_calls"], (w, i)
        assert i["wait_ns"] >= 0 and i["work_ns"] >= 0


@pytest.mark.parametrize("extra,msg", [
    (["--sched", "part", "--notify", "ipi"], "needs --sched steal"),
    (["--net", "kernel", "--notify", "ipi"], "kernel transport has no interrupt handler"),
    (["--notify", "irq"], "--notify"),
])
def test_refusals_are_one_line(topo, build_dir, extra, msg):
    """What cannot be interrupted says so in one line, before any frame moves."""
    argv = server_argv(topo, build_dir, f"{TAG}-bad", *extra)
    r = topo.sh(topo.srv_ns, *argv, check=False, timeout=30)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0, r.stderr
    assert any(msg in ln for ln in lines), r.stderr
    assert len([ln for ln in lines if "notify" in ln or "sched" in ln]) == 1, r.stderr


def test_threads_are_not_interrupted(topo, build_dir):
    """User-level threads (spin --threads) balance their own work: --notify ipi is
    refused with one line pointing at --notify poll."""
    argv = server_argv(topo, build_dir, f"{TAG}-thr", "--notify", "ipi")
    argv[2] = "--threads"
    r = topo.sh(topo.srv_ns, *argv, check=False, timeout=30)
    assert r.returncode != 0, r.stderr
    assert "not interrupted" in r.stderr and "--notify poll" in r.stderr, r.stderr
