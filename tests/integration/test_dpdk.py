"""The DPDK backend (issue 21, step one): two flowplane processes joined by DPDK's memif.

With libdpdk-dev in the build: fp-echo server and client over net_memif (shared memory,
no kernel on the path) exchange TCP echoes of every size checked byte for byte, the memif
socket is the owner's only, and bad configurations stop startup with one line. Without it
(a build on a machine without libdpdk-dev): `--net dpdk` says how to get it.

    FP_BUILD_DIR=build/release .venv/bin/python -m pytest tests/integration/test_dpdk.py
"""
import json
import os
import signal
import stat
import subprocess
import tempfile
import time

import pytest

PORT = 7


def have_dpdk(build_dir):
    """Whether this build has the backend (meson found libdpdk when it configured it)."""
    r = subprocess.run([echo(build_dir), "server", "--net", "dpdk", "--ip", "10.99.0.1/24",
                        "--stats", "none"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, "fp-echo server --net dpdk without a device started"
    return "no DPDK backend" not in r.stderr


def echo(build_dir):
    return str(build_dir / "apps" / "echo" / "fp-echo")


def memif(role, sock):
    return f"--vdev=net_memif0,role={role},socket={sock},socket-abstract=no"


class MemifServer:
    def __init__(self, build_dir, sock, *extra):
        stats = () if "--stats" in extra else ("--stats", "none")
        self.p = subprocess.Popen([echo(build_dir), "server", "--dpdk", memif("server", sock),
                                   "--ip", "10.99.0.1/24", *stats, *extra],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while not os.path.exists(sock):
            if self.p.poll() is not None or time.time() > deadline:
                raise AssertionError(f"memif server did not start: {self.p.stderr.read()}")
            time.sleep(0.1)

    def stop(self):
        self.p.send_signal(2)
        try:
            rc = self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        return rc, self.p.stderr.read()


def client(build_dir, sock, *args, timeout=120):
    return subprocess.run([echo(build_dir), "client", "--server", "10.99.0.1", "--dpdk",
                           memif("client", sock), "--ip", "10.99.0.2/24", "--stats", "none",
                           *args], capture_output=True, text=True, timeout=timeout)


def echo_each_size(build_dir, sock, sockdir, sizes, *extra):
    """A second of fp-echo client per message size: echoes came back, none wrong."""
    out = os.path.join(sockdir, "r.json")
    for size in sizes:
        r = client(build_dir, sock, *extra, "--size", size, "--conns", "4", "--duration", "1",
                   "--warmup", "0.2", "--json", out)
        assert r.returncode == 0, r.stderr
        res = json.load(open(out))
        assert res["messages"] > 0 and res["errors"] == 0, (size, res)


@pytest.fixture
def sockdir():
    with tempfile.TemporaryDirectory(prefix="fp-memif-") as d:
        yield d


@pytest.mark.parametrize("copy", ["no", "yes"], ids=["zero-copy", "copied"])
def test_echo_over_memif(build_dir, sockdir, copy):
    """Echoes of every size, byte for byte, with the queue's pool as memif's mempool
    (zero-copy) and with frames copied to and from DPDK's own mbufs; either server against
    a client of the other kind."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev: test_dpdk_absent_says_how covers this build")
    other = "yes" if copy == "no" else "no"
    sock = os.path.join(sockdir, "fp.sock")
    srv = MemifServer(build_dir, sock, "--dpdk-copy", copy)
    try:
        assert stat.S_IMODE(os.stat(sock).st_mode) & 0o077 == 0, "memif socket not owner-only"
        echo_each_size(build_dir, sock, sockdir, ("64", "1460", "9000", "100000"),
                       "--dpdk-copy", other)
    finally:
        rc, err = srv.stop()
    assert rc == 0, err
    # the startup line says how frames move and what the worker does when idle: naps
    # (DPDK's memif has no receive interrupt to sleep on)
    how = "zero-copy" if copy == "no" else "frames copied: --dpdk-copy"
    assert f"dpdk (net_memif, {how})" in err and "naps <= 100 us" in err, err


def test_two_workers_over_memif(build_dir, sockdir):
    """Two workers a side: memif pairs queue q with the peer's q, so each client worker's
    connections are served by the server worker of the same queue; memif has no RSS, and
    the startup line says a frame stays on its queue's worker and why."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev: test_dpdk_absent_says_how covers this build")
    sock = os.path.join(sockdir, "fp2.sock")
    srv = MemifServer(build_dir, sock, "--workers", "2")
    try:
        echo_each_size(build_dir, sock, sockdir, ("64", "100000"), "--workers", "2")
    finally:
        rc, err = srv.stop()
    assert "a frame stays on its queue's worker (no RSS: net_memif has no RSS" in err, err
    # rc -11 here was DPDK 22.11's memif unmapping a ring under a worker's burst when a
    # client left (dev/dpdk.c, "the interrupt thread against the bursts")
    assert rc == 0, err


def test_clients_come_and_go_under_two_polling_workers(build_dir, sockdir):
    """Each departing memif client makes the server's interrupt thread unmap the rings its
    two polling workers read. fp-memif-churn connects, sends a few frames and leaves 200
    times; the server survives it and stops cleanly. Before dev/dpdk.c kept the interrupt
    thread's work and the workers' bursts apart, it died of SIGSEGV within 3 to 52."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev: test_dpdk_absent_says_how covers this build")
    sock = os.path.join(sockdir, "fp3.sock")
    srv = MemifServer(build_dir, sock, "--workers", "2", "--idle", "poll")
    try:
        r = subprocess.run([str(build_dir / "bench" / "fp-memif-churn"), "--socket", sock,
                            "--cycles", "200", "--hold-ms", "5"],
                           capture_output=True, text=True, timeout=300)
        assert srv.p.poll() is None, f"the server died: rc {srv.p.returncode}"
        assert r.returncode == 0 and "cycles 200 links_up 200" in r.stdout, (r.stdout,
                                                                             r.stderr)
    finally:
        rc, err = srv.stop()
    assert rc == 0, err


def test_idle_dpdk_worker_naps(build_dir, sockdir):
    """With nothing to do, a DPDK worker sleeps in naps (its sleeps count grows) instead of
    polling its core away, and still answers when traffic comes back; --idle poll and
    --nap-us 0 keep it polling (no sleeps at all)."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev")
    out = os.path.join(sockdir, "r.json")
    for extra, naps in ((), True), (("--nap-us", "0"), False), (("--idle", "poll"), False):
        sock = os.path.join(sockdir, f"nap{len(extra)}{naps}.sock")
        name = f"memif-nap-{os.getpid()}-{len(extra)}-{naps}"
        srv = MemifServer(build_dir, sock, "--stats", name, *extra)
        try:
            r = client(build_dir, sock, "--conns", "2", "--duration", "0.5", "--warmup", "0",
                       "--json", out)
            assert r.returncode == 0, r.stderr
            def sleeps():
                st = subprocess.run([str(build_dir / "tools" / "fp-stats"), "--name", name,
                                     "--totals"], capture_output=True, text=True, timeout=30)
                assert st.returncode == 0, st.stderr
                return json.loads(st.stdout.strip().splitlines()[-1])["workers"][0]["sleeps"]
            first = sleeps()
            if naps:
                # idle: the count grows as it naps (waited for, not timed: a busy machine
                # may keep the worker off its core a while)
                deadline = time.time() + 30
                while sleeps() <= first and time.time() < deadline:
                    time.sleep(0.2)
                assert sleeps() > first, first
            else:
                time.sleep(0.5)
                assert (first, sleeps()) == (0, 0), extra
            r = client(build_dir, sock, "--conns", "2", "--duration", "0.5", "--warmup", "0",
                       "--json", out)
            assert r.returncode == 0 and json.load(open(out))["errors"] == 0, r.stderr
        finally:
            rc, err = srv.stop()
        assert rc == 0, err


def test_echo_over_memif_with_loss_and_reordering(build_dir, sockdir):
    """Both ends drop 2% and reorder 5% of the frames they receive (--rx-drop,
    --rx-reorder): every echo still comes back whole and in order, and the server's
    counters show the faults happened (and that TCP repaired them)."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev")
    sock = os.path.join(sockdir, "fp.sock")
    name = f"memif-faults-{os.getpid()}"
    faults = ("--rx-drop", "0.02", "--rx-reorder", "0.05")
    srv = MemifServer(build_dir, sock, "--stats", name, "--seed", "11", *faults)
    try:
        out = os.path.join(sockdir, "r.json")
        for size in ("64", "9000", "100000"):
            r = client(build_dir, sock, "--size", size, "--conns", "8", "--duration", "2",
                       "--warmup", "0.2", "--json", out, "--seed", "12", *faults)
            assert r.returncode == 0, r.stderr
            res = json.load(open(out))
            assert res["messages"] > 0 and res["errors"] == 0, (size, res)
        st = subprocess.run([str(build_dir / "tools" / "fp-stats"), "--name", name, "--totals"],
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        w = json.loads(st.stdout.strip().splitlines()[-1])["workers"][0]
        assert w["drops"]["rx_injected"] > 0 and w["rx_reordered"] > 0, w
        assert w["net"]["tcp_rexmit"] > 0 and w["net"]["tcp_ooo_seg"] > 0, w["net"]
    finally:
        rc, err = srv.stop()
    assert rc == 0, err


def test_zero_copy_server_with_a_dry_pool(build_dir, sockdir):
    """Zero-copy makes the queue's pool memif's mempool too: with 64 buffers, 16 clients'
    100 kB echoes keep it dry. A receive that finds no buffer is counted (dev_fill_empty),
    memif keeps the frame in its ring, and every echo still comes back byte for byte."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev: test_dpdk_absent_says_how covers this build")
    name = f"ddry{os.getpid()}"
    sock = os.path.join(sockdir, "dry.sock")
    srv = MemifServer(build_dir, sock, "--umem-frames", "64", "--stats", name)
    out = os.path.join(sockdir, "dry.json")
    try:
        r = client(build_dir, sock, "--size", "100000", "--conns", "16", "--duration", "2",
                   "--warmup", "0.2", "--json", out)
        assert r.returncode == 0, r.stderr
        res = json.load(open(out))
        assert res["messages"] > 0 and res["errors"] == 0, res
        st = subprocess.run([str(build_dir / "tools" / "fp-stats"), "--name", name, "--totals"],
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        w = json.loads(st.stdout.strip().splitlines()[-1])["workers"][0]
        assert w["drops"]["dev_fill_empty"] > 0, w["drops"]
    finally:
        rc, err = srv.stop()
    assert rc == 0, err
    assert "zero-copy" in err, err


def test_dpdk_bad_config_one_line(build_dir, sockdir):
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev")
    cases = [
        (["--net", "dpdk", "--ip", "10.99.0.1/24"], "needs a device"),
        (["--dpdk", "--vdev=net_nosuch0", "--ip", "10.99.0.1/24"], "EAL did not start"),
        (["--dpdk", memif("server", os.path.join(sockdir, "x.sock"))], "needs our address"),
        # a memif client waits a while for its server (dev/dpdk.c), then says so
        (["--dpdk", memif("client", os.path.join(sockdir, "none.sock")), "--ip",
          "10.99.0.1/24"], "no memif server accepted"),
    ]
    for args, want in cases:
        r = subprocess.run([echo(build_dir), "server", "--stats", "none", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, args
        lines = [ln for ln in r.stderr.splitlines() if "flowplane" in ln or "fp-echo" in ln]
        assert any(want in ln for ln in lines), (args, r.stderr)


def test_dpdk_absent_says_how(build_dir):
    if have_dpdk(build_dir):
        pytest.skip("this build has the DPDK backend")
    r = subprocess.run([echo(build_dir), "server", "--net", "dpdk", "--dpdk", "--vdev=x",
                        "--ip", "10.99.0.1/24", "--stats", "none"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "install libdpdk-dev" in r.stderr, r.stderr


def test_a_stopped_idle_dpdk_worker_counts_a_stall(build_dir, sockdir):
    """The device workers' loop (rt/worker.c) counts stalls as the kernel transport's does:
    a polling worker stopped with SIGSTOP for 0.3 s counts one of at least that long."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev: test_dpdk_absent_says_how covers this build")
    name = f"dstall{os.getpid()}"
    srv = MemifServer(build_dir, os.path.join(sockdir, "fp4.sock"), "--idle", "poll", "--stats",
                      name)

    def totals():
        r = subprocess.run([str(build_dir / "tools" / "fp-stats"), "--name", name, "--totals"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])["workers"][0]

    try:
        time.sleep(0.3)
        before = totals()
        srv.p.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        srv.p.send_signal(signal.SIGCONT)
        time.sleep(0.2)
        after = totals()
    finally:
        srv.p.send_signal(signal.SIGCONT)
        rc, err = srv.stop()
    assert rc == 0, err
    assert after["stalls"] > before["stalls"], (before, after)
    assert after["stall_ns"] - before["stall_ns"] >= 250_000_000, (before, after)


TAP_CLIENT = """
import os, socket, sys
for size in (1, 64, 1400, 5000, 100000):
    s = socket.create_connection(("10.98.0.1", 7), timeout=10)
    data = os.urandom(size)
    s.sendall(data)
    got = b""
    while len(got) < size:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    if got != data:
        sys.exit(f"{size}-byte echo came back as {len(got)} bytes, or different ones")
"""


def test_echo_over_tap_zero_copy(build_dir):
    """DPDK's tap PMD (a kernel tap interface, in a namespace of the test's own): Linux's
    TCP echoes of every size through fp-echo, byte for byte, zero-copy (the tap PMD fills
    our buffers with readv and sends them with writev)."""
    if not have_dpdk(build_dir):
        pytest.skip("no libdpdk-dev: test_dpdk_absent_says_how covers this build")
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace and a tap interface)")
    ns, ifname = f"fpdk{os.getpid()}", f"fptap{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    srv = None
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        srv = subprocess.Popen(["ip", "netns", "exec", ns, echo(build_dir), "server", "--dpdk",
                                f"--vdev=net_tap0,iface={ifname}", "--ip", "10.98.0.1/24",
                                "--stats", "none"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "show", ifname],
                             capture_output=True).returncode != 0:
            assert srv.poll() is None and time.time() < deadline, srv.stderr.read()
            time.sleep(0.1)
        subprocess.run(["ip", "netns", "exec", ns, "ip", "addr", "add", "10.98.0.2/24", "dev",
                        ifname], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", ifname, "up"],
                       check=True)
        r = subprocess.run(["ip", "netns", "exec", ns, "python3", "-c", TAP_CLIENT],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    finally:
        if srv:
            srv.send_signal(2)
            try:
                srv.wait(15)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
        subprocess.run(["ip", "netns", "del", ns])
    err = srv.stderr.read()
    assert srv.returncode == 0, err
    assert "dpdk (net_tap, zero-copy)" in err, err
