"""fp-echo on the kernel transport over 127.0.0.1: byte-exact echo, the client and pingpong.

Unprivileged and needs no namespace: the server is `fp-echo server --net kernel`, its peers
are Python sockets, and the benchmark modes run both against it and against a plain Linux
echo server (Python threads), so each side is checked against something that is not
flowplane. The server is pinned to core 0 and the clients to core 1 (the idle policy spins
before it sleeps; two spinning processes on one core would measure the scheduler).
"""
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import free_port, run

HOST = "127.0.0.1"
SERVER_CORE, CLIENT_CORE = "0", ("1" if (os.cpu_count() or 1) > 1 else "0")


def exe(build_dir):
    return build_dir / "apps" / "echo" / "fp-echo"


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(min(65536, n - len(buf)))
        if not b:
            break
        buf += b
    return bytes(buf)


def wait_accepting(port, proc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection((HOST, port), 0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing accepts on {HOST}:{port} after {timeout}s")


def serving(build_dir, args, idle_conns=0, env=None):
    """fp-echo @args on a free port, yielded once it accepts (with @idle_conns connections
    left open across the stop); SIGINT at the end must exit 0."""
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([str(exe(build_dir)), *args, "--ip", HOST, "--port", str(port)],
                         stdout=log, stderr=log, env={**os.environ, **(env or {})})
    idle = []
    try:
        wait_accepting(port, p)
        idle = [socket.create_connection((HOST, port), 5) for _ in range(idle_conns)]
        yield port
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for c in idle:
            c.close()
        log.seek(0)
        out = log.read()
        log.close()
    assert p.returncode == 0, out


@pytest.fixture(scope="module")
def fp_server(build_dir):
    """`fp-echo server --net kernel --udp`."""
    yield from serving(build_dir, ["server", "--net", "kernel", "--udp", "--stats", "none",
                                   "--cores", SERVER_CORE])


def tserving(build_dir, steal):
    steal = bool(steal)
    yield from serving(build_dir, ["server", "--threads", "--net", "kernel", "--stats", "none",
                                   "--workers", "2", "--cores", f"{SERVER_CORE},{CLIENT_CORE}",
                                   *(["--sched", "steal"] if steal else [])],
                       idle_conns=4, env={"FP_RT_STEAL_FORCE": "1"} if steal else None)


@pytest.fixture(scope="module")
def fp_tserver(build_dir):
    """`fp-echo server --threads` (a user-level thread per connection, blocking sockets,
    rt/tsock.c) with two workers; its stop comes with connections still open, their
    threads blocked in a read."""
    yield from tserving(build_dir, False)


@pytest.fixture(scope="module")
def fp_tserver_stolen(build_dir):
    """The same under --sched steal with FP_RT_STEAL_FORCE: every ready thread runs on
    the other worker until its next call takes it home (thread.h)."""
    yield from tserving(build_dir, True)


@pytest.fixture(params=["fp_tserver", "fp_tserver_stolen"])
def any_tserver(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def fp_pserver(build_dir):
    """`fp-echo server --pthreads`: the peer (Linux threads, Linux sockets) that the
    user-level threads are measured against; checked like the others."""
    yield from serving(build_dir, ["server", "--pthreads", "--cores", SERVER_CORE])


@pytest.fixture(scope="module")
def fp_server_stolen(build_dir):
    """`fp-echo server` (event callbacks, steal-safe) on two workers under --sched steal
    with FP_RT_STEAL_FORCE: every batch of every connection runs its callbacks on the other
    worker, whose evl lends it its dirty list and chunks; its calls run at home, and the
    returns of what the home queued for it (the ACCEPT) come with its next batch."""
    yield from serving(build_dir, ["server", "--net", "kernel", "--stats", "none",
                                   "--workers", "2", "--cores", f"{SERVER_CORE},{CLIENT_CORE}",
                                   "--sched", "steal"], idle_conns=4,
                       env={"FP_RT_STEAL_FORCE": "1"})


@pytest.fixture(scope="module")
def fp_nserver(build_dir):
    """`fp-echo server --native` (api.h, as IX's echo server was written)."""
    yield from serving(build_dir, ["server", "--native", "--net", "kernel", "--stats", "none",
                                   "--cores", SERVER_CORE])


@pytest.fixture(scope="module")
def fp_nserver_stolen(build_dir):
    """The same, steal-safe, on two workers under --sched steal with FP_RT_STEAL_FORCE:
    every batch of every connection runs on the other worker, its calls at home."""
    yield from serving(build_dir, ["server", "--native", "--net", "kernel", "--stats", "none",
                                   "--workers", "2", "--cores", f"{SERVER_CORE},{CLIENT_CORE}",
                                   "--sched", "steal"], env={"FP_RT_STEAL_FORCE": "1"})


@pytest.fixture(params=["events", "events-stolen", "threads", "threads-stolen", "pthreads",
                        "native", "native-stolen"])
def tcp_server(request):
    """The echo server four ways: event callbacks (evl.h; also with every batch stolen),
    user-level threads (tsock.h; also with every thread stolen), the Linux-threads peer,
    and the native API (also with every batch stolen)."""
    return request.getfixturevalue({"events": "fp_server", "events-stolen": "fp_server_stolen",
                                    "threads": "fp_tserver",
                                    "threads-stolen": "fp_tserver_stolen",
                                    "pthreads": "fp_pserver", "native": "fp_nserver",
                                    "native-stolen": "fp_nserver_stolen"}[request.param])


def test_threads_server_streams(any_tserver):
    """40 connections at once, a tenth of them streaming 3 MB while reading the echo
    (the server's writes block on a full output and resume), every byte checked."""
    errors = []

    def one(i):
        try:
            size = 3_000_000 if i % 10 == 0 else 1 + i * 37
            data = os.urandom(size)
            with socket.create_connection((HOST, any_tserver), 5) as s:
                s.settimeout(20)
                got = bytearray()

                def rd():
                    while len(got) < size:
                        c = s.recv(65536)
                        if not c:
                            break
                        got.extend(c)
                t = threading.Thread(target=rd)
                t.start()
                s.sendall(data)
                t.join(30)
                assert bytes(got) == data, (i, len(got), size)
        except Exception as e:  # collected: an assert in a thread would be lost
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]


def test_threads_server_thousands(any_tserver):
    """2,000 connections open at once, each a user-level thread blocked in a read until
    its 4 KB arrive in pieces, then echoing: every byte back on every connection (one
    Python thread drives them all without blocking)."""
    import selectors
    n, size = 2000, 4096
    sel = selectors.DefaultSelector()
    want, got, sent = {}, {}, {}
    for i in range(n):
        s = socket.create_connection((HOST, any_tserver), 10)
        s.setblocking(False)
        want[s] = os.urandom(size)
        got[s], sent[s] = bytearray(), 0
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    deadline = time.time() + 120
    left = n
    while left and time.time() < deadline:
        for key, ev in sel.select(timeout=1):
            s = key.fileobj
            if ev & selectors.EVENT_WRITE and sent[s] < size:
                sent[s] += s.send(want[s][sent[s]:sent[s] + 1024])   # in pieces
                if sent[s] == size:
                    sel.modify(s, selectors.EVENT_READ)
            if ev & selectors.EVENT_READ:
                chunk = s.recv(65536)
                assert chunk, "closed early"
                got[s] += chunk
                if len(got[s]) == size:
                    sel.unregister(s)
                    left -= 1
    bad = sum(bytes(got[s]) != want[s] for s in want)
    for s in want:
        s.close()
    assert left == 0 and bad == 0, (left, bad)


def test_threads_and_udp_refused(build_dir):
    r = run([exe(build_dir), "server", "--threads", "--udp", "--net", "kernel", "--ip", HOST])
    assert r.returncode == 2 and "serve TCP only" in r.stderr, r.stderr
    r = run([exe(build_dir), "server", "--threads", "--pthreads", "--ip", HOST])
    assert r.returncode == 2 and "one of --native, --threads" in r.stderr, r.stderr
    r = run([exe(build_dir), "server", "--native", "--udp", "--ip", HOST])
    assert r.returncode == 2 and "serve TCP only" in r.stderr, r.stderr
    r = run([exe(build_dir), "spin", "--native", "--pthreads", "--ip", HOST])
    assert r.returncode == 2 and "one of --native" in r.stderr, r.stderr


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while True:
                b = self.request.recv(65536)
                if not b:
                    return
                self.request.sendall(b)
        except OSError:   # the client resets its connections (as IX's does)
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


@pytest.fixture(scope="module")
def linux_server():
    """A Linux echo server: Python threads over kernel sockets, one per connection."""
    srv = _Server((HOST, 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def run_json(build_dir, tmp_path, mode, port, *args, timeout=60):
    out = tmp_path / f"{mode}.json"
    r = run([exe(build_dir), mode, "--server", f"{HOST}:{port}", "--net", "kernel",
             "--stats", "none", "--cores", CLIENT_CORE, "--json", out, *args], timeout=timeout)
    doc = json.loads(out.read_text()) if out.exists() else None
    return r, doc


def check_rtt(doc):
    rtt = doc["rtt_us"]
    assert rtt["count"] == doc["messages"]
    assert 0 < rtt["min"] <= rtt["p50"] <= rtt["p90"] <= rtt["p99"] <= rtt["p999"] <= rtt["max"]
    assert rtt["min"] <= rtt["mean"] <= rtt["max"]


# ---- the server, checked by Python sockets ----

@pytest.mark.parametrize("size", [1, 64, 1500, 100000])
def test_tcp_echo_byte_exact(tcp_server, size):
    payload = os.urandom(size)
    with socket.create_connection((HOST, tcp_server), 5) as s:
        s.settimeout(10)
        for _ in range(3):   # several messages on one connection
            s.sendall(payload)
            assert recv_exact(s, size) == payload


def test_tcp_echo_pipelined_and_concurrent(tcp_server):
    """Many connections at once, each sending several messages before reading any."""
    errors = []

    def one(i):
        try:
            msgs = [os.urandom(1 + (i * 977 + k * 131) % 5000) for k in range(5)]
            with socket.create_connection((HOST, tcp_server), 5) as s:
                s.settimeout(10)
                s.sendall(b"".join(msgs))
                assert recv_exact(s, sum(map(len, msgs))) == b"".join(msgs)
        except Exception as e:  # collected: an assert in a thread would be lost
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors


def test_tcp_half_close_gets_everything_back(tcp_server):
    """The client's FIN (EOF at the server) still gets the echo of what preceded it."""
    payload = os.urandom(200000)
    with socket.create_connection((HOST, tcp_server), 5) as s:
        s.settimeout(10)

        def send():
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=send)
        t.start()
        got = bytearray()
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        t.join()
    assert bytes(got) == payload


@pytest.mark.parametrize("size", [1, 64, 1500, 8192])
def test_udp_echo_byte_exact(fp_server, size):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.settimeout(1)
        payload = os.urandom(size)
        for attempt in range(5):    # UDP: a loss on loopback is unlikely, not impossible
            u.sendto(payload, (HOST, fp_server))
            try:
                data, addr = u.recvfrom(65536)
            except socket.timeout:
                continue
            assert data == payload and addr == (HOST, fp_server)
            return
        raise AssertionError("no UDP echo in 5 tries")


# ---- fp-echo client and pingpong, against flowplane and against Linux ----

@pytest.fixture(params=["fp", "linux"])
def any_server(request, fp_server, linux_server):
    return fp_server if request.param == "fp" else linux_server


def test_client_reports_messages(build_dir, tmp_path, any_server):
    r, doc = run_json(build_dir, tmp_path, "client", any_server, "--conns", "4",
                      "--duration", "1", "--warmup", "0.2")
    assert r.returncode == 0, r.stderr
    assert "messages" in r.stdout and "rtt us" in r.stdout
    assert doc["mode"] == "client" and doc["transport"] == "kernel"
    assert doc["conns"] == 4 and doc["size"] == 64 and doc["rounds"] == 1024
    assert doc["messages"] > 0 and doc["msgs_per_s"] > 0 and doc["errors"] == 0
    assert 0.5 < doc["window_s"] < 5
    assert doc["round_trips_total"] >= doc["messages"]
    check_rtt(doc)


def test_client_connection_churn(build_dir, tmp_path, any_server):
    """--rounds 1: one round trip per connection, then a reset and a new connection."""
    r, doc = run_json(build_dir, tmp_path, "client", any_server, "--conns", "4",
                      "--rounds", "1", "--duration", "1", "--warmup", "0.2")
    assert r.returncode == 0, r.stderr
    assert doc["messages"] > 0 and doc["connections"] > 0 and doc["conns_per_s"] > 0
    # every measured round trip was on a connection opened in or just before the window
    assert doc["connections"] >= doc["messages"] - 4 * 2
    check_rtt(doc)


def test_client_large_messages(build_dir, tmp_path, any_server):
    r, doc = run_json(build_dir, tmp_path, "client", any_server, "--conns", "2",
                      "--size", "100000", "--duration", "1", "--warmup", "0.2")
    assert r.returncode == 0, r.stderr
    assert doc["messages"] > 0 and doc["errors"] == 0


def test_pingpong_reports_latency(build_dir, tmp_path, any_server):
    r, doc = run_json(build_dir, tmp_path, "pingpong", any_server, "--count", "500",
                      "--warmup", "50", "--size", "64")
    assert r.returncode == 0, r.stderr
    assert "p99.9" in r.stdout
    assert doc["mode"] == "pingpong" and doc["messages"] == 500
    assert doc["round_trips_total"] == 550 and doc["errors"] == 0
    check_rtt(doc)


def test_client_against_nothing_exits_1(build_dir, tmp_path):
    port = free_port()   # nobody listens there
    r, doc = run_json(build_dir, tmp_path, "client", port, "--conns", "2",
                      "--duration", "0.3", "--warmup", "0")
    assert r.returncode == 1
    assert "no round trip completed" in r.stderr
    assert doc["messages"] == 0 and doc["errors"] > 0
    r, doc = run_json(build_dir, tmp_path, "pingpong", port)
    assert r.returncode == 1 and doc["errors"] >= 1


# ---- the command line ----

@pytest.mark.parametrize("args,word", [
    ([], "expected a command"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["server", "--bogus"], "unknown option '--bogus'"),
    (["server", "--port", "0"], "--port"),
    (["server", "--port", "70000"], "--port"),
    (["server", "--port"], "--port needs a value"),
    (["server", "extra"], "unexpected argument 'extra'"),
    (["server", "--net", "carrier-pigeon"], "--net"),
    (["client"], "--server"),
    (["client", "--server", "localhost"], "--server"),
    (["client", "--server", "127.0.0.1:0"], "--server"),
    (["client", "--server", "127.0.0.1", "--size", "0"], "--size"),
    (["client", "--server", "127.0.0.1", "--conns", "x"], "--conns"),
    (["client", "--server", "127.0.0.1", "--duration", "0"], "--duration"),
    (["client", "--server", "127.0.0.1", "--warmup", "-1"], "--warmup"),
    (["client", "--server", "127.0.0.1", "--count", "5"], "unknown option '--count'"),
    (["pingpong", "--server", "127.0.0.1", "--count", "0"], "--count"),
    (["pingpong", "--server", "127.0.0.1", "--warmup", "0.5"], "--warmup"),
    (["pingpong", "--server", "127.0.0.1", "--workers", "0"], "--workers"),
])
def test_bad_args(build_dir, args, word):
    r = run([exe(build_dir), *args], timeout=10)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert word in lines[0], lines[0]


@pytest.mark.parametrize("cmd,words", [
    ("server", ["--port", "--udp", "--net"]),
    ("client", ["--server", "--conns", "--rounds", "--duration", "--json", "--workers"]),
    ("pingpong", ["--server", "--count", "--warmup", "--ip"]),
])
def test_help(build_dir, cmd, words):
    r = run([exe(build_dir), cmd, "--help"], timeout=10)
    assert r.returncode == 0
    for w in words:
        assert w in r.stdout


@pytest.mark.parametrize("io,engine", [("auto", None), ("uring", "io_uring"), ("epoll", "epoll")])
def test_startup_line_names_the_engine(build_dir, io, engine):
    """The startup line says which engine the workers run (auto: what they chose)."""
    port = free_port()
    p = subprocess.Popen([str(exe(build_dir)), "server", "--net", "kernel", "--kernel-io", io,
                          "--ip", HOST, "--port", str(port), "--stats", "none",
                          "--cores", SERVER_CORE], stderr=subprocess.PIPE, text=True)
    try:
        wait_accepting(port, p)
        time.sleep(0.3)   # the line comes once every worker has run init
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
    line = next(l for l in err.splitlines() if "kernel sockets" in l)
    if engine:
        assert f"kernel sockets ({engine})" in line, line
    else:  # auto names what it chose: io_uring, or epoll where io_uring is refused
        assert "(io_uring, auto)" in line or "(epoll, auto)" in line, line


STEER_CLIENT = r"""
import os, socket, sys
os.sched_setaffinity(0, {int(sys.argv[3])})
for i in range(int(sys.argv[2])):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
    s.sendall(b"%06d" % i)
    got = b""
    while len(got) < 6:
        c = s.recv(6 - len(got))
        assert c, "closed early"
        got += c
    assert got == b"%06d" % i
    s.close()
print("ok")
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("steer", ["hash", "cpu"])
def test_kernel_steer(build_dir, tmp_path, steer):
    """Two workers on cores 0 and 1; a client on CPU 1 opens 24 connections over loopback
    (its SYNs are received on CPU 1). --kernel-steer cpu (SO_INCOMING_CPU) gives every
    one to the worker on core 1; the default reuseport hash spreads them over both."""
    port, name = free_port(), f"ks{os.getpid()}{steer}"
    p = subprocess.Popen([str(exe(build_dir)), "server", "--net", "kernel", "--ip", HOST,
                          "--port", str(port), "--workers", "2", "--cores", "0,1",
                          "--kernel-steer", steer, "--stats", name],
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_accepting(port, p)     # this probe's connection lands anywhere: counted below
        fps = build_dir / "tools" / "fp-stats"
        before = json.loads(run([fps, "--name", name, "--totals"]).stdout.splitlines()[-1])
        r = run([sys.executable, "-c", STEER_CLIENT, port, 24, 1])
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr
        time.sleep(0.1)
        after = json.loads(run([fps, "--name", name, "--totals"]).stdout.splitlines()[-1])
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    ops = [a["app_ops"] - b["app_ops"] for a, b in zip(after["workers"], before["workers"])]
    assert sum(ops) == 24, ops          # fp-echo counts one op per message echoed
    if steer == "cpu":
        assert ops == [0, 24], ops
    else:
        assert ops[0] > 0 and ops[1] > 0, ops   # all 24 by one hash: 2^-23


def test_a_handler_that_never_returns_is_named(build_dir):
    """No preemption (issue 19): one request that spins 3.5 s holds its worker for that long.
    The run says which worker is stuck in one round, and serves again afterwards."""
    import struct

    port = free_port()
    p = subprocess.Popen([str(exe(build_dir)), "spin", "--ip", HOST, "--port", str(port),
                          "--cores", SERVER_CORE, "--stats", f"stuck{os.getpid()}"],
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_accepting(port, p)
        with socket.create_connection((HOST, port), 10) as s:
            s.settimeout(60)
            s.sendall(struct.pack("<IIQ", 0x4E495053, 16, 3_500_000_000))
            assert len(recv_exact(s, 16)) == 16
            s.sendall(struct.pack("<IIQ", 0x4E495053, 16, 1000))
            assert len(recv_exact(s, 16)) == 16
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    lines = [ln for ln in err.splitlines() if "in one round of its loop" in ln]
    assert lines and "worker 0" in lines[0] and "does not preempt" in lines[0], err


def test_a_stopped_idle_worker_counts_a_stall(build_dir):
    """Loop gaps that follow an idle round are stalls (nothing of ours ran: the core was
    taken): a polling worker stopped with SIGSTOP for 0.3 s counts one of at least that
    long; a handler that spins 0.3 s makes a gap of that length but no stall."""
    import struct

    port, name = free_port(), f"stall{os.getpid()}"
    p = subprocess.Popen([str(exe(build_dir)), "spin", "--ip", HOST, "--port", str(port),
                          "--cores", SERVER_CORE, "--idle", "poll", "--stats", name],
                         stderr=subprocess.PIPE, text=True)

    def totals():
        r = run([build_dir / "tools" / "fp-stats", "--name", name, "--totals"])
        assert r.returncode == 0, r.stderr
        (w,) = json.loads(r.stdout.strip().splitlines()[-1])["workers"]
        return w

    try:
        wait_accepting(port, p)
        time.sleep(0.2)
        before = totals()
        p.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        p.send_signal(signal.SIGCONT)
        time.sleep(0.2)
        stopped = totals()
        with socket.create_connection((HOST, port), 10) as s:
            s.settimeout(30)
            s.sendall(struct.pack("<IIQ", 0x4E495053, 16, 300_000_000))
            assert len(recv_exact(s, 16)) == 16
        time.sleep(0.2)
        spun = totals()
        # the live view names them: the worker stopped again and again while it watches
        view = subprocess.Popen([str(build_dir / "tools" / "fp-stats"), "--name", name,
                                 "--interval", "1", "--count", "1"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        while view.poll() is None:
            p.send_signal(signal.SIGSTOP)
            time.sleep(0.1)
            p.send_signal(signal.SIGCONT)
            time.sleep(0.1)
        live, live_err = view.communicate(timeout=30)
    finally:
        p.send_signal(signal.SIGCONT)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert stopped["stalls"] > before["stalls"], (before, stopped)
    assert stopped["stall_ns"] - before["stall_ns"] >= 250_000_000, (before, stopped)
    # every stall is also a gap: the gaps that were not stalls hold the 0.3 s handler,
    # whatever else took the core meanwhile
    assert (spun["gap_ns"] - stopped["gap_ns"]) - (spun["stall_ns"] - stopped["stall_ns"]) \
        >= 250_000_000, (stopped, spun)
    assert view.returncode == 0 and "    stalls: " in live, (live, live_err)
