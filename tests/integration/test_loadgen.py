"""fp-loadgen against real servers: memcached 1.6, fp-echo on both transports, the spin server.

Also: sweeps and patterns (one point each), bad arguments (one line, status 2), a server
that refuses, Ctrl-C (partial JSON, status 130), 10,000 connections, and lgplot.

Each run is short and at a low rate. Timings are not asserted: a loaded two-core machine
makes the generator late (its own slip check says so), so the runs pass a generous
--max-slip-us and --timeout, and the tests check behaviour: every request answered, no
errors, the JSON complete and consistent. As root, memcached and the xdp echo server run in
a namespace pair of their own (tools/netns.py, tag lg<pid>); otherwise on loopback.
"""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import free_port, ROOT, run

sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo  # noqa: E402

HOST = "127.0.0.1"
MEMCACHED = "/usr/bin/memcached"
ROOTED = os.geteuid() == 0
SERVER_CORE, CLIENT_CORE = "0", ("1" if (os.cpu_count() or 1) > 1 else "0")
# Lenient self-checks: the point is that requests flow and are counted, not how fast. A
# backlog of 4096 per connection and a 30 s timeout mean a stall of the busy machine (seconds
# of it) delays requests but never drops one, so "every request answered" is behaviour.
LENIENT = ["--max-slip-us", "100000", "--timeout", "30000", "--backlog", "4096",
           "--stats", "none"]

CONFIG_KEYS = {"proto", "workload", "workload_desc", "arrival", "conns", "depth", "workers",
               "transport", "closed", "warmup_s", "duration_s", "timeout_ms", "max_slip_us",
               "slo_us", "seed", "server"}
POINT_KEYS = {"target_rps", "offered_rps", "achieved_rps", "duration_s", "scheduled", "sent",
              "completed", "ok", "misses", "errors", "timeouts", "dropped", "reconnects",
              "latency_us", "p99_ci_us", "slip_us", "ks", "checks", "valid", "invalid_reasons",
              "partial", "t_start_s", "client_loop_gaps", "client_loop_gap_us",
              "client_stalls"}


def lg_exe(build_dir):
    return build_dir / "apps" / "loadgen" / "fp-loadgen"


def echo_exe(build_dir):
    return build_dir / "apps" / "echo" / "fp-echo"


def wait_port(addr, port, proc, timeout=10, ns_topo=None):
    """Until something accepts on addr:port (from the client namespace when @ns_topo)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        if ns_topo is not None:
            r = ns_topo.sh(ns_topo.cli_ns, sys.executable, "-c",
                           "import socket,sys; socket.create_connection((sys.argv[1], "
                           "int(sys.argv[2])), 1).close()", addr, str(port), check=False)
            if r.returncode == 0:
                return
        else:
            try:
                socket.create_connection((addr, port), 0.5).close()
                return
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"nothing accepts on {addr}:{port} after {timeout}s")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def raise_nofile(n):
    """preexec_fn: at least @n file descriptors (within the hard limit)."""
    def f():
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = n if hard == resource.RLIM_INFINITY else min(n, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    return f


class Spawned:
    """A server process on loopback, pinned to SERVER_CORE; stopped (SIGINT) on exit."""

    def __init__(self, args, port, nofile=None):
        self.port = port
        self.log = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen([str(a) for a in args], stdout=self.log, stderr=self.log,
                                  preexec_fn=raise_nofile(nofile) if nofile else None)
        try:
            wait_port(HOST, port, self.p)
        except AssertionError:
            stop(self.p)
            raise

    def close(self):
        rc = stop(self.p)
        self.log.seek(0)
        return rc, self.log.read()


@pytest.fixture(scope="module")
def echo_server(build_dir):
    port = free_port()
    s = Spawned([echo_exe(build_dir), "server", "--net", "kernel", "--ip", HOST, "--port", port,
                 "--stats", "none", "--cores", SERVER_CORE], port, nofile=24000)
    yield port
    rc, out = s.close()
    assert rc == 0, out


@pytest.fixture(scope="module", params=["events", "threads", "pthreads"])
def spin_server(build_dir, request):
    """fp-echo spin, written with event callbacks, with a user-level thread per
    connection (--threads, tsock.h), and as the Linux-threads peer (--pthreads): the same
    protocol, the same checks."""
    port = free_port()
    style = {"events": [], "threads": ["--threads"], "pthreads": ["--pthreads"]}[request.param]
    s = Spawned([echo_exe(build_dir), "spin", *style, "--net", "kernel", "--ip", HOST, "--port",
                 port, "--stats", "none", "--cores", SERVER_CORE], port)
    yield port
    rc, out = s.close()
    assert rc == 0, out


@pytest.fixture(scope="module")
def topo():
    if not ROOTED:
        pytest.skip("needs root (network namespaces)")
    t = Topo(f"lg{os.getpid() % 10000}")
    t.up()
    try:
        yield t
    finally:
        t.down()


def loadgen(build_dir, tmp_path, *args, ns=None, timeout=60, name="run", preexec=None):
    """Run fp-loadgen (in namespace @ns of a Topo when given); (result, JSON or None)."""
    out = tmp_path / f"{name}.json"
    argv = [lg_exe(build_dir), *args, "--json", out]
    if ns is not None:
        argv = ns[0].cmd(ns[1], argv)
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                       timeout=timeout, preexec_fn=preexec)
    doc = json.loads(out.read_text()) if out.exists() else None
    return r, doc


def check_doc(doc, n_points):
    """Every field of the JSON document, and what must hold between them."""
    assert doc["tool"] == "fp-loadgen" and doc["version"] == 1
    assert isinstance(doc["command"], list) and doc["command"]
    assert CONFIG_KEYS <= set(doc["config"]), CONFIG_KEYS - set(doc["config"])
    assert isinstance(doc["interrupted"], bool)
    assert len(doc["points"]) == n_points, [p["target_rps"] for p in doc["points"]]
    for p in doc["points"]:
        assert POINT_KEYS <= set(p), POINT_KEYS - set(p)
        lat = p["latency_us"]
        assert set(lat) >= {"mean", "p50", "p90", "p99", "p999", "max"}
        if p["ok"] + p["misses"]:
            assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
        assert set(p["slip_us"]) >= {"p50", "p99", "max"}
        assert set(p["checks"]) == {"rate", "slip", "ks", "ci"}
        assert p["client_loop_gaps"] >= 0 and p["client_loop_gap_us"] >= 50 * p["client_loop_gaps"]
        assert 0 <= p["client_stalls"] <= p["client_loop_gaps"]
        assert p["p99_ci_us"] is None or (len(p["p99_ci_us"]) == 2 and
                                          p["p99_ci_us"][0] <= p["p99_ci_us"][1])
        assert p["ks"] is None or set(p["ks"]) == {"d", "p", "n"}
        assert p["completed"] == p["ok"] + p["misses"] + p["errors"]
        assert p["sent"] <= p["scheduled"]
        assert p["valid"] == (not p["invalid_reasons"])
    return doc["points"]


def assert_clean(r, doc, n_points=1):
    """A finished run: status 0, every request answered, no error. Whether a point is valid
    depends on how busy the machine was (slip, achieved rate), so it is not asserted here;
    check_doc asserts that an invalid point says why."""
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert doc is not None, r.stderr
    assert doc["interrupted"] is False
    pts = check_doc(doc, n_points)
    for p in pts:
        assert p["errors"] == 0 and p["timeouts"] == 0 and p["dropped"] == 0, p
        assert p["scheduled"] > 0 and p["completed"] == p["scheduled"] == p["sent"], p
        assert not p["partial"]
    return pts


# ---- memcached ----

@pytest.fixture(scope="module")
def memcached(topo_or_none):
    """memcached 1.6: in the server namespace as root, else on loopback; (ns, addr, port)."""
    if not os.access(MEMCACHED, os.X_OK):
        pytest.skip(f"no {MEMCACHED} (Debian package memcached)")
    t = topo_or_none
    port = 11211 if t else free_port()
    args = [MEMCACHED, "-p", port, "-U", "0", "-t", "1", "-m", "64"]
    if ROOTED:
        args += ["-u", "nobody"]
    if t:
        args += ["-l", t.srv_ip]
        p = t.popen(t.srv_ns, args, cpu=SERVER_CORE)
        addr = t.srv_ip
    else:
        args += ["-l", HOST]
        p = subprocess.Popen([str(a) for a in args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        addr = HOST
    try:
        wait_port(addr, port, p, ns_topo=t)
        yield ((t, t.cli_ns) if t else None), addr, port
    finally:
        stop(p)


@pytest.fixture(scope="module")
def topo_or_none(request):
    return request.getfixturevalue("topo") if ROOTED else None


def test_memcached_usr(build_dir, tmp_path, memcached):
    """mutilate's USR against a real memcached at 2k req/s: valid, zero errors, no misses
    (the keys were preloaded), and a JSON document with every field."""
    ns, addr, port = memcached
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{addr}:{port}", "--workload", "usr",
                     "--rate", "2k", "--duration", "2", "--warmup", "0.5", "--cores",
                     CLIENT_CORE, *LENIENT, ns=ns)
    (p,) = assert_clean(r, doc)
    assert p["misses"] == 0 and p["ok"] == p["completed"]
    assert doc["config"]["proto"] == "memcache" and doc["config"]["workload"] == "usr"
    assert "usr" in doc["config"]["workload_desc"]
    assert 1500 < p["offered_rps"] < 2500   # Poisson over 2 s: 4000 +- a few %
    assert p["ks"] is not None and p["ks"]["n"] > 1000
    assert "2000" in r.stdout and "valid" in r.stdout


def test_memcached_etc_pipelined(build_dir, tmp_path, memcached):
    """ETC (values up to 1 KB, 25% SET) with pipelining, two points."""
    ns, addr, port = memcached
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{addr}:{port}", "--workload", "etc",
                     "--rates", "1k,2k", "--depth", "4", "--conns", "4", "--duration", "1",
                     "--warmup", "0.2", "--cores", CLIENT_CORE, *LENIENT, ns=ns)
    pts = assert_clean(r, doc, 2)
    assert [p["target_rps"] for p in pts] == [1000, 2000]


# ---- fp-echo and the spin server ----

def test_echo_kernel(build_dir, tmp_path, echo_server):
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{echo_server}", "--proto", "echo",
                     "--size", "200", "--rate", "3k", "--duration", "1", "--warmup", "0.3",
                     "--cores", CLIENT_CORE, *LENIENT)
    (p,) = assert_clean(r, doc)
    assert doc["config"]["transport"] == "kernel" and doc["config"]["workload"] is None


def test_echo_closed_loop(build_dir, tmp_path, echo_server):
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{echo_server}", "--proto", "echo",
                     "--closed", "2", "--conns", "4", "--duration", "0.5", "--warmup", "0.2",
                     "--cores", CLIENT_CORE, *LENIENT)
    assert r.returncode == 0, r.stderr
    (p,) = check_doc(doc, 1)
    assert doc["config"]["closed"] == 2 and p["ks"] is None
    assert p["completed"] > 100 and p["errors"] == 0 and p["timeouts"] == 0
    assert "closed" in r.stdout


@pytest.mark.parametrize("client", ["kernel", "xdp"])
def test_echo_xdp_server(build_dir, tmp_path, topo, client):
    """fp-echo server on AF_XDP in the server namespace; the generator in the client
    namespace on the kernel transport, and on flowplane's own stack (AF_XDP too)."""
    exe = echo_exe(build_dir)
    srv = topo.popen(topo.srv_ns, [exe, "server", "--port", 7, "--if", topo.srv_if, "--ip",
                                   f"{topo.fp_srv_ip}/24", "--stats", "none", "--cores",
                                   SERVER_CORE])
    try:
        wait_port(topo.fp_srv_ip, 7, srv, timeout=15, ns_topo=topo)
        extra = ["--if", topo.cli_if, "--ip", f"{topo.fp_cli_ip}/24"] if client == "xdp" else []
        r, doc = loadgen(build_dir, tmp_path, "--server", f"{topo.fp_srv_ip}:7", "--proto",
                         "echo", "--rate", "3k", "--duration", "1", "--warmup", "0.3",
                         "--cores", CLIENT_CORE, *extra, *LENIENT, ns=(topo, topo.cli_ns))
        assert_clean(r, doc)
        assert doc["config"]["transport"] == client
    finally:
        assert stop(srv) == 0, srv.stderr.read()


def test_spin(build_dir, tmp_path, spin_server):
    """Requests that carry 200 us of service: no answer comes sooner than that."""
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{spin_server}", "--proto",
                     "spin", "--service", "fixed:200us", "--size", "100", "--rate", "500",
                     "--duration", "1", "--warmup", "0.2", "--cores", CLIENT_CORE, *LENIENT)
    (p,) = assert_clean(r, doc)
    assert p["latency_us"]["p50"] >= 200, p["latency_us"]


def test_spin_zygos_bimodal(build_dir, tmp_path, spin_server):
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{spin_server}", "--proto",
                     "spin", "--service", "bimodal1:10us", "--rate", "2k", "--duration", "0.5",
                     "--warmup", "0.2", "--cores", CLIENT_CORE, *LENIENT)
    assert_clean(r, doc)
    assert "bimodal1" in doc["config"]["workload_desc"]


# ---- schedules: sweeps and patterns ----

@pytest.mark.parametrize("how,targets", [
    (["--rates", "1k,3k,2k"], [1000, 3000, 2000]),
    (["--sweep", "1k:3k:3"], [1000, 2000, 3000]),
])
def test_sweep_one_point_per_rate(build_dir, tmp_path, echo_server, how, targets):
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{echo_server}", "--proto", "echo",
                     *how, "--duration", "0.4", "--warmup", "0.1", "--cores", CLIENT_CORE,
                     *LENIENT)
    pts = assert_clean(r, doc, len(targets))
    assert [p["target_rps"] for p in pts] == targets
    starts = [p["t_start_s"] for p in pts]
    assert starts == sorted(starts) and abs(starts[1] - starts[0] - 0.4) < 1e-6
    assert len([ln for ln in r.stdout.splitlines() if ln.strip().startswith(
        tuple(str(t) for t in targets))]) == len(targets)


def test_pattern_one_point_per_window(build_dir, tmp_path, echo_server):
    """A step pattern over 2 s in 0.5 s windows: 4 points, each with its own target."""
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{echo_server}", "--proto", "echo",
                     "--pattern", "step:500:2k:500:0.5", "--duration", "2", "--window", "0.5",
                     "--warmup", "0.1", "--cores", CLIENT_CORE, *LENIENT)
    pts = assert_clean(r, doc, 4)
    assert [round(p["target_rps"]) for p in pts] == [500, 1000, 1500, 2000]
    assert [p["t_start_s"] for p in pts] == pytest.approx([0.1, 0.6, 1.1, 1.6])
    assert all(p["ks"] is None for p in pts)      # the rate changes: no fixed CDF to test
    assert r.stderr.count("fp-loadgen: point ") == 4


# ---- errors ----

def assert_usage_error(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("args,word", [
    ([], "--server"),
    (["--rate", "1k"], "--server"),
    (["--server", "localhost:1", "--rate", "1k"], "--server"),
    (["--server", "127.0.0.1:70000", "--rate", "1k"], "--server"),
    (["--server", "127.0.0.1:9"], "--rate"),
    (["--server", "127.0.0.1:9", "--rate", "fast"], "--rate"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--closed", "2"], "one of"),
    (["--server", "127.0.0.1:9", "--proto", "gopher", "--rate", "1k"], "gopher"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--workload", "web"], "web"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--keysize", "weird:1"], "--keysize"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--arrival", "trace:/no/such/file"], "--arrival"),
    (["--server", "127.0.0.1:9", "--pattern", "zigzag:1:2"], "--pattern"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--window", "1"], "--window"),
    (["--server", "127.0.0.1:9", "--sweep", "3k:1k:3"], "--sweep"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--conns", "0"], "--conns"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--conns", "1", "--workers", "2"], "--conns"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--depth", "99999"], "--depth"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--proto", "spin", "--service", "exp:"], "--service"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--idle", "nap"], "--idle"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "--bogus"], "'--bogus'"),
    (["--server", "127.0.0.1:9", "--rate", "1k", "stray"], "'stray'"),
])
def test_bad_arguments(build_dir, args, word):
    assert_usage_error(run([lg_exe(build_dir), *args]), word)


def test_help(build_dir):
    r = run([lg_exe(build_dir), "--help"])
    assert r.returncode == 0 and "--pattern" in r.stdout and "--net" in r.stdout


def test_refused_server(build_dir):
    port = free_port()    # nothing listens there
    r = run([lg_exe(build_dir), "--server", f"{HOST}:{port}", "--proto", "echo", "--rate", "1k",
             "--cores", CLIENT_CORE, "--stats", "none", "--quiet"], timeout=30)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{HOST}:{port}" in lines[0] and "refused" in lines[0], r.stderr


def test_server_that_never_accepts(build_dir):
    """A listener whose queue is full drops SYNs: the connect deadline (5 s) names it."""
    with socket.socket() as ls:
        ls.bind((HOST, 0))
        ls.listen(0)
        port = ls.getsockname()[1]
        r = run([lg_exe(build_dir), "--server", f"{HOST}:{port}", "--proto", "echo", "--rate",
                 "1k", "--cores", CLIENT_CORE, "--stats", "none", "--quiet"], timeout=30)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{HOST}:{port}" in lines[0] and "not established" in lines[0]


def test_echo_spin_bad_arguments(build_dir):
    assert_usage_error(run([echo_exe(build_dir), "spin", "--port", "0"]), "--port")
    assert_usage_error(run([echo_exe(build_dir), "spin", "--size", "3"]), "'--size'")


@pytest.fixture
def black_hole():
    """A server that accepts and reads, and never answers."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((HOST, 0))
    ls.listen(64)
    conns = []

    def serve():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            conns.append(c)
            threading.Thread(target=drain, args=(c,), daemon=True).start()

    def drain(c):
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield ls.getsockname()[1]
    finally:
        ls.close()
        for c in conns:
            c.close()


def test_timeouts_reset_and_reconnect(build_dir, tmp_path, black_hole):
    """No answer within --timeout: timeouts, the connection reset and reopened, the backlog
    full (drops), and the point invalid saying why; the run itself completes."""
    r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{black_hole}", "--proto", "echo",
                     "--rate", "1k", "--conns", "2", "--timeout", "100", "--duration", "1",
                     "--warmup", "0", "--cores", CLIENT_CORE, "--stats", "none")
    assert r.returncode == 0, r.stderr
    (p,) = check_doc(doc, 1)
    assert p["completed"] == 0 and p["timeouts"] > 0 and p["reconnects"] > 0, p
    assert p["dropped"] > 0 and p["valid"] is False and doc["config"]["backlog"] == 32
    assert any("timed out" in x for x in p["invalid_reasons"]), p["invalid_reasons"]
    assert p["timeouts"] + p["dropped"] == p["scheduled"]
    assert "no: " in r.stdout and "timeouts" in r.stdout


# ---- Ctrl-C ----

def test_sigint_writes_partial_json(build_dir, tmp_path, echo_server):
    """SIGINT in the second point: the first is whole, the second partial, status 130."""
    out = tmp_path / "int.json"
    p = subprocess.Popen([str(lg_exe(build_dir)), "--server", f"{HOST}:{echo_server}", "--proto",
                          "echo", "--rates", "1k,1k,1k", "--duration", "1", "--warmup", "0.1",
                          "--cores", CLIENT_CORE, *LENIENT, "--json", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:          # the first point's progress line
            line = p.stderr.readline()
            if not line or "point 1/3" in line:
                break
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, (p.returncode, stderr)
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    pts = check_doc(doc, 2)
    assert not pts[0]["partial"] and pts[1]["partial"]
    assert 0 < pts[1]["duration_s"] < 1 and pts[1]["completed"] > 0
    assert "interrupted" in stdout


# ---- many connections ----

def test_10k_connections(build_dir, tmp_path, echo_server):
    """10,000 connections on one worker, then spread over two: every one opens, every
    request is answered."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 10300:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 10300")
    for workers in (["--cores", CLIENT_CORE], ["--workers", "2", "--cores", "0,1"]):
        r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{echo_server}", "--proto",
                         "echo", "--conns", "10000", "--rate", "3k", "--duration", "1",
                         "--warmup", "0.3", *workers, *LENIENT,
                         "--backlog", "256",     # 10,000 x 4096 slots would be too many
                         timeout=90,
                         preexec=raise_nofile(12000))
        assert_clean(r, doc)
        assert doc["config"]["conns"] == 10000


# ---- the plot ----

def test_plot_two_files(root, build_dir, tmp_path, echo_server):
    docs = []
    for name, rates in (("a", "1k,2k"), ("b", "1.5k,2.5k,3k")):
        r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{echo_server}", "--proto",
                         "echo", "--rates", rates, "--duration", "0.3", "--warmup", "0.1",
                         "--cores", CLIENT_CORE, *LENIENT, name=name)
        assert r.returncode == 0, r.stderr
        docs.append(tmp_path / f"{name}.json")
    png = tmp_path / "curves.png"
    r = run([root / ".venv" / "bin" / "python", root / "tools" / "lgplot.py", *docs, "-o", png,
             "--slo-us", "300", "--labels", "first,second"])
    assert r.returncode == 0, r.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000
    bad = run([root / ".venv" / "bin" / "python", root / "tools" / "lgplot.py", docs[0], "-o",
               png, "--labels", "x,y"])
    assert_usage_error(bad, "--labels")
    bad = run([root / ".venv" / "bin" / "python", root / "tools" / "lgplot.py",
               tmp_path / "none.json", "-o", png])
    assert_usage_error(bad, "none.json")


# ---- a partitioned round in chunks (--flush-us, rt/api.c) ----

@pytest.mark.parametrize("style", ["--native", "--events"])
def test_chunked_rounds_keep_every_connection_in_order(build_dir, tmp_path, topo, style):
    """--flush-us 1 on AF_XDP: each round's conditions reach the handler in chunks (the
    native API's, and the event-callback layer's that fp-kv is written on), its calls are
    executed and its replies sent between them. Pipelined requests (depth 4) over 64
    connections, each its own service time: fp-loadgen checks every reply is its request's,
    in order; the rounds were cut and sent mid-round (else this proves nothing)."""
    name = f"chunk{os.getpid()}{style[2:4]}"
    argv = [echo_exe(build_dir), "spin", "--port", 7, "--if", topo.srv_if, "--ip",
            f"{topo.fp_srv_ip}/24", "--cores", SERVER_CORE, "--flush-us", "1", "--stats", name]
    if style == "--native":
        argv.insert(2, style)
    srv = topo.popen(topo.srv_ns, argv)
    try:
        wait_port(topo.fp_srv_ip, 7, srv, timeout=15, ns_topo=topo)
        r, doc = loadgen(build_dir, tmp_path, "--server", f"{topo.fp_srv_ip}:7", "--proto",
                         "spin", "--service", "exp:5us", "--rate", "4k", "--duration", "1",
                         "--warmup", "0.2", "--conns", "64", "--depth", "4", "--cores",
                         CLIENT_CORE, *LENIENT, ns=(topo, topo.cli_ns), timeout=120)
        (p,) = assert_clean(r, doc)
        assert p["ok"] == p["completed"] > 0, p
        st = topo.sh(topo.srv_ns, build_dir / "tools" / "fp-stats", "--name", name, "--totals")
        (w,) = json.loads(st.stdout.strip().splitlines()[-1])["workers"]
        assert w["flush_chunks"] > 0 and w["flush_sends"] > 0, w
    finally:
        assert stop(srv) == 0, srv.stderr.read()


@pytest.mark.parametrize("io,style", [("uring", "--native"), ("uring", "--events"),
                                      ("epoll", "--native")])
def test_chunked_rounds_on_the_kernel_transport(build_dir, tmp_path, io, style):
    """--flush-us 1 on the kernel transport: the rounds are cut into chunks, and with
    io_uring what the calls so far queued is submitted between them (an io_uring_enter;
    with epoll each call wrote as it ran). Pipelined requests (depth 4) over 64
    connections: every reply its request's, in order; the rounds were cut and sent."""
    port = free_port()
    name = f"kchunk{os.getpid()}{io}{style[2:4]}"
    args = [echo_exe(build_dir), "spin", "--net", "kernel", "--kernel-io", io, "--ip", HOST,
            "--port", port, "--cores", SERVER_CORE, "--flush-us", "1", "--stats", name]
    if style == "--native":
        args.insert(2, style)
    # 20k a second (the worker about a third busy): thousands of rounds with several
    # requests, so some are cut and sent mid-round whatever the timing (at 1k, two rounds
    # of two once, and no send: a first handler under 1 us)
    p, ws, rc, out = pipelined_spin(build_dir, tmp_path, Spawned(args, port), port, name,
                                    rate="20k")
    assert p["completed"] > 0, p
    assert sum(w["flush_chunks"] for w in ws) > 0 and sum(w["flush_sends"] for w in ws) > 0, ws
    assert rc == 0, out
    assert "(sent every 1 us of handlers)" in out, out


# ---- ZygOS's scheduler in the runtime (--sched steal, rt/steal.c) ----

def steal_server(build_dir, port, workers, cores, env=None, sched="steal", stats="none",
                 style="--native"):
    """fp-echo spin --native (or @style) with several workers stealing each other's
    connections (or threads)."""
    args = [echo_exe(build_dir), "spin", style, "--net", "kernel", "--ip", HOST, "--port",
            port, "--stats", stats, "--workers", str(workers), "--cores", cores,
            "--sched", sched]
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        return Spawned(args, port)
    finally:
        os.environ.clear()
        os.environ.update(old)


def pipelined_spin(build_dir, tmp_path, s, port, name, rate="1k"):
    """Pipelined spin requests (depth 4, 64 connections, exp 5 us, @rate a second) against
    @s, stopped after: the point (every reply its request's), the workers' statistics, the
    server's exit status and output."""
    try:
        r, doc = loadgen(build_dir, tmp_path, "--server", f"{HOST}:{port}", "--proto", "spin",
                         "--service", "exp:5us", "--rate", rate, "--duration", "1",
                         "--warmup", "0.2", "--conns", "64", "--depth", "4",
                         "--cores", CLIENT_CORE, *LENIENT, timeout=120)
        (p,) = assert_clean(r, doc)
        assert p["ok"] == p["completed"], p
        st = subprocess.run([str(build_dir / "tools" / "fp-stats"), "--name", name, "--totals"],
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        ws = json.loads(st.stdout)["workers"]
    finally:
        rc, out = s.close()
    return p, ws, rc, out


@pytest.mark.parametrize("workers,cores,force,sched", [
    (2, "0,1", True, "steal"),        # every batch stolen: it runs on the other worker
    (4, "0,1,0,1", True, "steal"),    # oversubscribed: two polling workers per core
    (2, "0,1", False, "steal"),       # ZygOS's own policy
    (2, "0,1", False, "part"),        # the same server partitioned (IX)
])
def test_steal_keeps_every_connection_in_order(build_dir, tmp_path, workers, cores, force,
                                               sched):
    """Pipelined requests (depth 4) over 64 connections, each with its own service time:
    fp-loadgen checks that every reply is its request's header, so a reply lost, repeated
    or out of order on a connection is an error or a timeout. With FP_RT_STEAL_FORCE no
    worker runs its own connections: every batch is stolen and its calls go home."""
    port = free_port()
    name = f"steal{os.getpid()}_{port}"
    s = steal_server(build_dir, port, workers, cores,
                     {"FP_RT_STEAL_FORCE": "1"} if force else None, sched=sched, stats=name)
    p, ws, rc, out = pipelined_spin(build_dir, tmp_path, s, port, name)
    stolen = sum(w["sched_stolen"] for w in ws)
    local = sum(w["sched_local"] for w in ws)
    if sched == "part":
        assert stolen == local == 0
    elif force:
        assert local == 0 and stolen > 0 and sum(w["sched_remote_calls"] for w in ws) >= stolen
    else:
        assert local + stolen > 0
    assert rc == 0, out
    summary = [ln for ln in out.splitlines() if "sched steal:" in ln]
    if sched == "part":
        assert not summary, out
        return
    assert len(summary) == 1, out
    nums = [int(x) for x in summary[0].replace("(", " ").split() if x.isdigit()]
    local, stolen, sent_home = nums[0], nums[1], nums[2]
    if force:
        assert local == 0 and stolen > 0 and sent_home >= stolen, summary
    assert local + stolen > 0


@pytest.mark.parametrize("workers,cores,force", [
    (2, "0,1", True),          # every ready thread runs on the other worker, its calls at home
    (4, "0,1,0,1", True),      # oversubscribed: two polling workers per core
    (2, "0,1", False),         # threads stolen when a worker has nothing else to do
])
def test_threads_are_stolen_in_order(build_dir, tmp_path, workers, cores, force):
    """fp-echo spin --threads under --sched steal (issue 19: Shenango's work stealing, for
    user-level threads): pipelined requests over 64 connections, each reply checked as
    above. A stolen thread spins its service time on the thief and goes home to write;
    with FP_RT_STEAL_FORCE a home runs none of its ready threads, so every request's spin
    ran on another worker, and the run still ends cleanly."""
    port = free_port()
    name = f"tsteal{os.getpid()}_{port}"
    s = steal_server(build_dir, port, workers, cores,
                     {"FP_RT_STEAL_FORCE": "1"} if force else None, stats=name,
                     style="--threads")
    p, ws, rc, out = pipelined_spin(build_dir, tmp_path, s, port, name)
    assert rc == 0, out
    stolen = sum(w["sched_stolen"] for w in ws)
    if force:   # at least one steal per request (a thread is stolen each time it is ready)
        assert stolen >= p["completed"], (stolen, p)


def test_steal_needs_a_steal_safe_application(build_dir):
    """The event-callback spin server keeps per-worker state: --sched steal is refused with
    one line that says what to do."""
    p = subprocess.run([str(echo_exe(build_dir)), "spin", "--net", "kernel", "--ip", HOST,
                        "--port", str(free_port()), "--stats", "none", "--workers", "2",
                        "--cores", "0,1", "--sched", "steal"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "not steal-safe" in lines[0] and "--sched part" in lines[0], p.stderr
