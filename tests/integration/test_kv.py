"""fp-kv (issue 6) against memcached 1.6: conformance, real clients, eviction, concurrency.

1. Differential conformance (kvdiff.py, scripts in kv_script/): each script goes to a fresh
   memcached and a fresh fp-kv started with the same flags (the script's @flags: -m, -I, -M,
   -t 1); every response must be byte-identical except the VERSION value and STAT values
   (names are checked, see kvdiff.py). On the kernel transport over loopback, and as root
   with fp-kv on AF_XDP in a network namespace (memcached in the same namespace on the
   kernel's address of the same veth, the client in the other namespace).
2. Real clients: a pymemcache session (its ordinary API) and libmemcached's memccapable
   (its ascii and its binary-protocol tests) against fp-kv on both transports; every test
   that passes against memcached must pass against fp-kv.
3. Eviction: fp-kv -m 16 filled with 4x that much; its resident memory stays within the limit
   plus a stated overhead, the recently set and recently read keys survive, the oldest go,
   and `stats` counts evictions.
4. Concurrency: fp-kv -t 2 on two cores, client threads hammering shared keys with incr,
   append, cas loops, add races and whole-value overwrites; the final state must be the
   one a linearisable store gives.

Binaries: fp-kv from FP_BUILD_DIR (conftest.py; required: the tests fail without it),
memcached and memccapable from PATH (scripts/bootstrap installs them; required too).

    FP_BUILD_DIR=build/release .venv/bin/python -m pytest tests/integration/test_kv.py
"""
import json
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import ROOT, sanitized

sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tools"))
import kvdiff  # noqa: E402
from netns import Topo  # noqa: E402

SCRIPTS = kvdiff.default_scripts()
TAG = f"fpk{os.getpid() % 10000}"
XDP_PORT = 11311
need_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, AF_XDP)")


# ---- binaries and servers ----------------------------------------------------------------

@pytest.fixture(scope="session")
def fpkv(build_dir):
    exe = build_dir / "apps" / "kv" / "fp-kv"
    if not exe.exists():
        pytest.fail(f"no fp-kv at {exe}: build it (ninja -C {build_dir} apps/kv/fp-kv)")
    return str(exe)


def _tool(name):
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
    if not path:
        pytest.fail(f"{name} is not installed (scripts/bootstrap installs it)")
    return path


@pytest.fixture(scope="session")
def memcached():
    return _tool("memcached")


@pytest.fixture(scope="session")
def memccapable():
    return _tool("memccapable")


def fpkv_kernel(exe):
    """fp-kv on the kernel transport, on loopback (kvdiff.Server adds -p and the flags)."""
    return [exe, "--net", "kernel", "-l", "127.0.0.1", "-U", "0", "--stats", "none"]


def memcached_cmd(exe):
    return [exe, "-l", "127.0.0.1", "-U", "0"]


class Started:
    """kvdiff.Server as a context manager: stopped (and reaped) whatever happens; a server
    that died before the end fails the test."""

    def __init__(self, cmd, flags=()):
        self.srv = kvdiff.Server(cmd, flags)

    def __enter__(self):
        return self.srv

    def __exit__(self, *exc):
        gone = self.srv.problem()
        rc = self.srv.stop()
        if exc[0] is None:
            assert not gone, f"server died: {gone}"
            assert rc == 0, f"server exit status {rc} after SIGTERM"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


class Conn:
    """A minimal memcached text-protocol client (no retries, no hiding)."""

    def __init__(self, host, port, timeout=20):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.s.close()

    def _fill(self):
        chunk = self.s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def cmd(self, line):
        self.s.sendall(line + b"\r\n")
        return self.line()

    def store(self, verb, key, value, extra=b""):
        self.s.sendall(b"%s %s 0 0 %d%s\r\n%s\r\n" % (verb, key, len(value), extra, value))
        return self.line()

    def get_multi(self, keys, verb=b"get"):
        self.s.sendall(verb + b" " + b" ".join(keys) + b"\r\n")
        out = {}
        while True:
            ln = self.line()
            if ln == b"END":
                return out
            w = ln.split(b" ")
            assert w[0] == b"VALUE", ln
            data = self.exact(int(w[3]) + 2)[:-2]
            out[w[1]] = (data, int(w[4])) if len(w) > 4 else data

    def get(self, key):
        return self.get_multi([key]).get(key)

    def gets(self, key):
        return self.get_multi([key], b"gets").get(key)

    def sync(self, data):
        """Send @data (noreply commands) and wait until the server has processed it."""
        self.s.sendall(data + b"mn\r\n")
        ln = self.line()
        assert ln == b"MN", ln

    def stats(self, group=b""):
        self.s.sendall(b"stats" + (b" " + group if group else b"") + b"\r\n")
        out = {}
        while True:
            ln = self.line()
            if ln == b"END":
                return out
            _, name, value = ln.decode().split(" ", 2)
            out[name] = value


# ---- 1. differential conformance ----------------------------------------------------------

def mismatch_report(res):
    lines = []
    for name, ms in res.items():
        for m in ms[:15]:
            lines.append(str(m))
        if len(ms) > 15:
            lines.append(f"... and {len(ms) - 15} more in {name}")
    return "\n".join(lines)


def test_kvdiff_sees_differences(memcached):
    """The harness itself: memcached against memcached with CAS off (-C) must not pass."""
    res = kvdiff.diff_scripts([kvdiff.SCRIPT_DIR / "60_races.txt"],
                              start_a=memcached_cmd(memcached),
                              start_b=memcached_cmd(memcached) + ["-C"], out=None)
    ms = res["60_races.txt"]
    assert ms, "kvdiff found no difference between memcached and memcached -C"
    assert any(b"VALUE r 0 1 0\r\n" in m.b.raw() for m in ms if hasattr(m, "b")), \
        mismatch_report(res)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_conformance_kernel(fpkv, memcached, script):
    res = kvdiff.diff_scripts([script], start_a=memcached_cmd(memcached),
                              start_b=fpkv_kernel(fpkv), out=None)
    assert not res[script.name], "fp-kv (kernel) differs from memcached:\n" + mismatch_report(res)


@pytest.fixture(scope="module")
def topo():
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, veth, AF_XDP)")
    t = Topo(TAG)
    t.up()
    try:
        yield t
    finally:
        t.down()


class NsServer:
    """A server in a namespace; stdout discarded, stderr kept in a file for failures."""

    def __init__(self, topo, ns, argv):
        self.err = tempfile.TemporaryFile()
        self.argv = [str(a) for a in argv]
        self.p = topo.popen(ns, self.argv, stdout=subprocess.DEVNULL, stderr=self.err,
                            text=False, start_new_session=True)

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()    # SIGTERM: both exit 0 on it (SIGINT may be ignored when
            try:                  # the tests run in the background)
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        rc = self.p.returncode
        if not self.err.closed:
            self.last_stderr = self.stderr()
            self.err.close()
        return rc


WAIT_READY = r"""
import socket, sys, time
deadline = time.time() + float(sys.argv[1])
for addr in sys.argv[2:]:
    host, port = addr.rsplit(":", 1)
    while True:
        try:
            socket.create_connection((host, int(port)), 1).close()
            break
        except OSError:
            if time.time() > deadline:
                sys.exit("nothing accepts on " + addr)
            time.sleep(0.1)
"""


class XdpPair:
    """memcached (kernel address) and fp-kv (AF_XDP address) in the server namespace, with
    the same flags (and @fp_flags for fp-kv alone); stopped on exit."""

    def __init__(self, topo, fpkv, memcached, flags, fp_flags=()):
        self.topo = topo
        self.a = f"{topo.srv_ip}:{XDP_PORT}"
        self.b = f"{topo.fp_srv_ip}:{XDP_PORT}"
        self.servers = []
        try:
            self.servers.append(NsServer(topo, topo.srv_ns, [
                memcached, "-u", "root", "-U", "0", "-l", topo.srv_ip, "-p", XDP_PORT, *flags]))
            self.servers.append(NsServer(topo, topo.srv_ns, [
                fpkv, "-p", XDP_PORT, "-U", "0", *flags, "--net", "xdp", "--if", topo.srv_if,
                "--ip", f"{topo.fp_srv_ip}/24", "--cores", "0", "--stats", "none", *fp_flags]))
            r = topo.sh(topo.cli_ns, sys.executable, "-c", WAIT_READY, "20", self.a, self.b,
                        check=False, timeout=60)
            if r.returncode != 0:
                raise AssertionError(f"servers not ready: {r.stderr.strip()}\n" + "\n".join(
                    f"{' '.join(s.argv)}: exit {s.p.poll()}: {s.stderr()}" for s in self.servers))
        except BaseException:
            self.stop()
            raise

    def gone(self):
        """The servers that are not running any more, with their stderr."""
        return [f"{' '.join(s.argv)}: exit {s.p.poll()}: {s.stderr()[-8000:]}"
                for s in self.servers if s.p.poll() is not None]

    def stop(self):
        rcs = [s.stop() for s in self.servers]
        self.servers = []
        return rcs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        gone = self.gone()
        servers = self.servers
        rcs = self.stop()
        if exc[0] is None:
            assert not gone, f"server died: {gone}"
            assert rcs == [0, 0], (f"server exit status {rcs} after SIGTERM (memcached, fp-kv): "
                                   + "\n".join(s.last_stderr[-3000:] for s in servers))


# Opens N connections, asks `version` on each, prints "ready", waits for a line, closes
# them all, prints "closed" (bench/conn_storm.py measures the same beside memcached).
STORM = r"""
import socket, sys
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for i in range(n):
    s = socket.create_connection((addr, port), 20)
    s.sendall(b"version\r\n")
    socks.append(s)
    if len(socks) % 200 == 0 or i == n - 1:
        for t in socks[-200:]:
            got = b""
            while not got.endswith(b"\r\n"):
                got += t.recv(100)
print("ready", flush=True)
sys.stdin.readline()
for s in socks:
    s.close()
print("closed", flush=True)
"""
STORM_CONNS = 5000


@need_root
def test_connection_storm_memory_xdp(topo, fpkv):
    """Idle connections cost at most 1.5 KB each on AF_XDP (memcached: 0.6 KB; fp-kv was
    3.7 KB before answers were staged per worker), and their memory goes back once they
    close (it stayed at 7.5 MB for 15,000 before the trim)."""
    srv = NsServer(topo, topo.srv_ns, [
        fpkv, "-p", XDP_PORT, "-U", "0", "-m", "64", "-t", "1", "-c", "8192", "--net", "xdp",
        "--if", topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24", "--cores", "0", "--stats", "none"])
    cli = None
    try:
        addr = f"{topo.fp_srv_ip}:{XDP_PORT}"
        r = topo.sh(topo.cli_ns, sys.executable, "-c", WAIT_READY, "20", addr, check=False,
                    timeout=60)
        assert r.returncode == 0, srv.stderr()
        base = settle_rss(srv.p.pid, stable_kib=256)
        cli = topo.popen(topo.cli_ns, [sys.executable, "-c", STORM, topo.fp_srv_ip, XDP_PORT,
                                       STORM_CONNS], stdin=subprocess.PIPE)
        assert cli.stdout.readline().strip() == "ready", cli.stderr.read()
        held = settle_rss(srv.p.pid, stable_kib=256)
        cli.stdin.write("\n")
        cli.stdin.flush()
        assert cli.stdout.readline().strip() == "closed"
        cli.wait(30)
        time.sleep(2.5)        # the trim comes within a second, and once more after
        after = settle_rss(srv.p.pid, stable_kib=256)
        per_conn = (held - base) * 1024 / STORM_CONNS
        assert per_conn < 1536, f"{per_conn:.0f} bytes per idle connection"
        assert after - base < 2048, f"{(after - base) / 1024:.1f} MB kept after the close"
    finally:
        if cli and cli.poll() is None:
            cli.kill()
        assert srv.stop() == 0


@need_root
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_conformance_xdp(topo, fpkv, memcached, script, fp_flags=()):
    flags = kvdiff.load_script(script).flags
    with XdpPair(topo, fpkv, memcached, flags, fp_flags) as pair:
        r = topo.sh(topo.cli_ns, sys.executable, str(kvdiff.HERE / "kvdiff.py"), "--a", pair.a,
                    "--b", pair.b, "--script", str(script), "-q", check=False, timeout=170)
    assert r.returncode == 0, (f"fp-kv (xdp) differs from memcached (kvdiff exit "
                               f"{r.returncode}):\n{r.stdout[-20000:]}\n{r.stderr[-3000:]}")


# ---- 2. real clients ----------------------------------------------------------------------

# pymemcache's ordinary API; prints {test: "pass" | "fail: ..."} as JSON.
PYMEMCACHE = r"""
import json, sys
from pymemcache.client.base import Client
from pymemcache import serde
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError
host, port = sys.argv[1], int(sys.argv[2])
def client(**kw):
    kw.setdefault("default_noreply", False)
    return Client((host, port), connect_timeout=5, timeout=10, **kw)
c = client()
res = {}
def t(fn):
    try:
        fn()
        res[fn.__name__] = "pass"
    except Exception as e:
        res[fn.__name__] = "fail: %s: %s" % (type(e).__name__, str(e)[:300])
    return fn

@t
def version():
    assert c.version()
@t
def flush_all():
    c.set(b"before", b"x")
    assert c.flush_all() is True
    assert c.get(b"before") is None
@t
def set_get():
    assert c.set(b"k1", b"v1") is True
    assert c.get(b"k1") == b"v1"
    assert c.get(b"nope") is None
    assert c.get(b"nope", default=b"d") == b"d"
@t
def set_many_get_many():
    d = {(u"m%d" % i).encode(): (u"v%d" % i).encode() * (i + 1) for i in range(300)}
    assert c.set_many(d) == []
    assert c.get_many(list(d) + [b"absent"]) == d
    assert c.get_multi([b"m1", b"m2"]) == {b"m1": d[b"m1"], b"m2": d[b"m2"]}
@t
def noreply_default():
    nc = client(default_noreply=True)
    nc.set(b"nr", b"x")
    nc.set_many({b"nr1": b"1", b"nr2": b"2"})
    nc.delete(b"nr1")
    nc.incr(b"nr2", 5)
    assert nc.get_many([b"nr", b"nr1", b"nr2"]) == {b"nr": b"x", b"nr2": b"7"}
    nc.close()
@t
def add_replace():
    assert c.add(b"a1", b"1") is True
    assert c.add(b"a1", b"2") is False
    assert c.replace(b"a1", b"3") is True
    assert c.replace(b"absent-r", b"3") is False
    assert c.get(b"a1") == b"3"
@t
def append_prepend():
    c.set(b"ap", b"mid")
    assert c.append(b"ap", b">") is True
    assert c.prepend(b"ap", b"<") is True
    assert c.get(b"ap") == b"<mid>"
    assert c.append(b"absent-a", b"x") is False
@t
def gets_cas():
    c.set(b"cs", b"1")
    v, tok = c.gets(b"cs")
    assert v == b"1" and tok
    assert c.cas(b"cs", b"2", tok) is True
    assert c.cas(b"cs", b"3", tok) is False
    assert c.cas(b"absent-c", b"3", tok) is None
    assert c.get(b"cs") == b"2"
@t
def gets_many():
    c.set(b"g1", b"x")
    c.set(b"g2", b"y")
    r = c.gets_many([b"g1", b"g2", b"g3"])
    assert sorted(r) == [b"g1", b"g2"] and r[b"g1"][0] == b"x" and r[b"g2"][1]
@t
def incr_decr():
    c.set(b"n", b"10")
    assert c.incr(b"n", 5) == 15
    assert c.decr(b"n", 20) == 0
    assert c.incr(b"absent-n", 1) is None
    assert c.incr(b"n", 2 ** 64 - 1) == 2 ** 64 - 1
    assert c.incr(b"n", 1) == 0
@t
def incr_non_numeric():
    c.set(b"nn", b"abc")
    try:
        c.incr(b"nn", 1)
    except MemcacheClientError:
        return
    raise AssertionError("no error")
@t
def touch():
    c.set(b"t", b"x", expire=100)
    assert c.touch(b"t", 200) is True
    assert c.touch(b"absent-t", 1) is False
@t
def expire_negative():
    c.set(b"e", b"x", expire=-1)
    assert c.get(b"e") is None
@t
def delete():
    c.set(b"d", b"x")
    assert c.delete(b"d") is True
    assert c.delete(b"d") is False
@t
def delete_many():
    c.set_many({b"dm1": b"1", b"dm2": b"2"})
    assert c.delete_many([b"dm1", b"dm2", b"dm3"]) is True
    assert c.get_many([b"dm1", b"dm2"]) == {}
@t
def binary_values():
    v = bytes(range(256)) + b"\r\nEND\r\n" + bytes(range(255, -1, -1))
    assert c.set(b"bin", v) is True
    assert c.get(b"bin") == v
@t
def large_value():
    v = bytes((i * 31) & 0xff for i in range(1000000))
    assert c.set(b"big", v) is True
    assert c.get(b"big") == v
@t
def too_large():
    try:
        c.set(b"huge", b"x" * (2 << 20))
    except MemcacheServerError:
        return
    raise AssertionError("no error")
@t
def key_250():
    k = b"k" * 250
    assert c.set(k, b"x") is True
    assert c.get(k) == b"x"
@t
def pickle_serde():
    sc = client(serde=serde.pickle_serde)
    obj = {"a": [1, 2, 3], "b": "t\u00e9xt", "c": 2 ** 70}
    assert sc.set(b"obj", obj) is True
    assert sc.set(b"int", 42) is True
    assert sc.get(b"obj") == obj and sc.get(b"int") == 42
    sc.close()
@t
def stats():
    s = c.stats()
    for k in (b"pid", b"uptime", b"curr_items", b"get_hits", b"get_misses", b"cmd_get",
              b"bytes", b"limit_maxbytes", b"evictions", b"curr_connections", b"version"):
        assert k in s, k
    assert b"maxbytes" in c.stats("settings")
    assert c.stats("items") and c.stats("slabs")
@t
def raw_gat():
    c.set(b"gt", b"gv")
    assert c.raw_command(b"gat 100 gt", b"END") == b"VALUE gt 0 2\r\ngv\r\n"
    assert c.raw_command(b"gats 100 gt nope", b"END").startswith(b"VALUE gt 0 2 ")
@t
def many_clients():
    cs = [client() for _ in range(20)]
    for i, x in enumerate(cs):
        x.set(b"mc%d" % i, b"%d" % i)
    for i, x in enumerate(cs):
        assert x.get(b"mc%d" % ((i + 1) % 20)) == b"%d" % ((i + 1) % 20)
        x.quit()
print(json.dumps(res))
"""


def pymemcache_results(host, port, topo=None):
    args = [sys.executable, "-c", PYMEMCACHE, host, str(port)]
    if topo is not None:
        r = topo.sh(topo.cli_ns, *args, check=False, timeout=120)
    else:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), f"pymemcache session died: {r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def memccapable_results(exe, host, port, topo=None):
    args = [exe, "-t", "5", "-h", host, "-p", str(port)]
    if topo is not None:
        r = topo.sh(topo.cli_ns, *args, check=False, timeout=120)
    else:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    res = {}
    for ln in (r.stdout + r.stderr).splitlines():
        m = re.match(r"^((?:ascii|binary) .*?)\s+\[(\w+)\]\s*$", ln)
        if m:
            res[m.group(1)] = m.group(2)
    assert res, f"memccapable printed no results (exit {r.returncode}): {r.stdout}{r.stderr}"
    return res


@pytest.fixture(scope="module")
def reference_clients(memcached, memccapable):
    """What the clients report against memcached itself (started here, on loopback)."""
    with Started(memcached_cmd(memcached), ["-m", "64", "-t", "1"]) as srv:
        pym = pymemcache_results(srv.host, srv.port)
        cap = memccapable_results(memccapable, srv.host, srv.port)
    assert sum(v == "pass" for v in pym.values()) >= len(pym) - 2, pym
    assert sum(v == "pass" for v in cap.values()) >= len(cap) // 2, cap
    return pym, cap


def compare_clients(ref, got, what):
    pym_ref, cap_ref = ref
    pym, cap = got
    bad = [f"pymemcache {k}: {pym.get(k, 'missing')}" for k, v in pym_ref.items()
           if v == "pass" and pym.get(k) != "pass"]
    bad += [f"memccapable {k}: {cap.get(k, 'missing')}" for k, v in cap_ref.items()
            if v == "pass" and cap.get(k) != "pass"]
    assert not bad, f"fp-kv ({what}) fails what memcached passes:\n" + "\n".join(bad)


def test_extended_options_as_memcached_takes_them(fpkv, memcached):
    """-o: hashpower=N is honoured; memcached 1.6's other suboptions run (a memcached
    command line works as it is) with one line at start naming what has no effect; a word
    memcached does not know is refused as memcached refuses it, with exit status 2."""
    for exe, code in ((fpkv, 2), (memcached, 1)):
        r = subprocess.run([exe, "-U", "0", "-o", "modern,lru_crawlr"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == code and 'suboption "lru_crawlr"' in r.stderr.lower(), \
            (exe, r.returncode, r.stderr)
    r = subprocess.run([fpkv, "-o", "hashpower"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "hashpower=N" in r.stderr
    flags = ["-t", "1", "-o", "hashpower=14,modern,slab_chunk_max=512,no_lru_crawler"]
    with Started(fpkv_kernel(fpkv), flags) as srv:
        c = Conn(srv.host, srv.port)
        assert c.stats(b"settings")["hashpower_init"] == "14"
        c.close()
        line = [x for x in srv.stderr().splitlines() if x.startswith("fp-kv: -o:")]
    assert line == ["fp-kv: -o: memcached's modern, slab_chunk_max, no_lru_crawler: "
                    "accepted, no effect here"], line


def test_clients_kernel(fpkv, memccapable, reference_clients):
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1"]) as srv:
        got = (pymemcache_results(srv.host, srv.port),
               memccapable_results(memccapable, srv.host, srv.port))
    compare_clients(reference_clients, got, "kernel")


@need_root
def test_clients_xdp(topo, fpkv, memcached, memccapable, reference_clients):
    with XdpPair(topo, fpkv, memcached, ["-m", "64", "-t", "1"]):
        host = topo.fp_srv_ip
        got = (pymemcache_results(host, XDP_PORT, topo),
               memccapable_results(memccapable, host, XDP_PORT, topo))
    compare_clients(reference_clients, got, "xdp")


# ---- 3. eviction --------------------------------------------------------------------------

MIB = 1 << 20
EVICT_MB = 16
VALUE_SIZE = 4000
SLACK_KIB = 4 * 1024


def huge_multiget(srv, nkeys, verb, tail=b""):
    """Every 97th of @nkeys 200-byte keys stored, then one @verb line of all of them (over
    1 MiB): the whole answer, and whether the connection still answers."""
    c = Conn(srv.host, srv.port)
    try:
        keys = [b"k%06d" % i + b"x" * 193 for i in range(nkeys)]
        for i in range(0, nkeys, 97):
            assert c.store(b"set", keys[i], b"v%04d" % i) == b"STORED"
        c.s.sendall(verb + b" " + b" ".join(keys) + tail + b"\r\n")
        out = []
        while True:
            ln = c.line()
            out.append(ln)
            if ln == b"END" or ln.startswith(b"CLIENT_ERROR"):
                break
            if ln.startswith(b"VALUE"):
                out.append(c.exact(int(ln.split()[3]) + 2))
        return out, c.cmd(b"version")
    finally:
        c.close()


def test_multiget_over_a_mebibyte(fpkv, memcached):
    """Issue 16, item 18: a get or gets line over 1 MiB (5,472 and 11,000 keys of 200 B:
    1.1 and 2.2 MB) is answered as memcached answers it, byte for byte; before, fp-kv
    closed the connection without a word. A key over 250 bytes after the first MiB gets
    CLIENT_ERROR (memcached withdraws the whole answer; fp-kv has sent the first pieces)
    and the connection goes on."""
    cases = [(5472, b"get"), (11000, b"gets")]
    with Started(memcached_cmd(memcached), ["-t", "1"]) as srv:
        want = [huge_multiget(srv, n, v) for n, v in cases]
    with Started(fpkv_kernel(fpkv), ["-t", "1"]) as srv:
        got = [huge_multiget(srv, n, v) for n, v in cases]
        bad, after = huge_multiget(srv, 6000, b"get", b" " + b"b" * 300 + b" tail")
    for (w, wv), (g, gv), (n, v) in zip(want, got, cases):
        assert wv.startswith(b"VERSION") and gv == wv
        assert len(g) == len(w) and g == w, f"{v.decode()} of {n} keys differs from memcached"
        assert sum(1 for x in g if x.startswith(b"VALUE")) == len(range(0, n, 97))
    assert bad[-1] == b"CLIENT_ERROR bad command line format"
    assert after.startswith(b"VERSION")


CRAWLER_CMDS = [b"lru_crawler metadump abc", b"lru_crawler metadump 0", b"lru_crawler metadump 63",
                b"lru_crawler metadump 64", b"lru_crawler crawl 99", b"lru_crawler crawl abc",
                b"lru_crawler crawl all", b"lru_crawler sleep abc", b"lru_crawler sleep 5000000",
                b"lru_crawler sleep 100", b"lru_crawler tocrawl abc", b"lru_crawler tocrawl 10",
                b"lru_crawler enable", b"lru_crawler disable", b"lru_crawler disable",
                b"lru_crawler enable", b"lru_crawler metadump all extra", b"lru_crawler crawl",
                b"lru_crawler", b"lru_crawler bogus"]


def metadump(c, arg=b"all"):
    """The lines of one metadump, up to END. memcached answers BUSY while its crawler is
    on another crawl (its LRU maintainer starts them by itself after many sets): asked
    again, as its own tools do (CI once waited on a BUSY for an END)."""
    for _ in range(200):
        c.s.sendall(b"lru_crawler metadump " + arg + b"\r\n")
        while not c.buf.endswith(b"END\r\n") and not c.buf.startswith(b"BUSY"):
            c._fill()
        if c.buf.startswith(b"BUSY"):
            while not c.buf.endswith(b"\r\n"):
                c._fill()
            c.buf = b""
            time.sleep(0.05)
            continue
        lines, c.buf = c.buf[:-5].split(b"\n")[:-1], b""
        return lines
    raise AssertionError("the crawler stayed busy for 10 s")


def crawler_session(srv, many):
    c = Conn(srv.host, srv.port)
    try:
        assert c.cmd(b"set a 5 0 1\r\nx") == b"STORED"
        assert c.cmd(b"set b%20c 7 100 2\r\nyy") == b"STORED"
        assert c.cmd(b"set k~.-_Zz9/\xc3\xa9+ 0 0 1\r\nz") == b"STORED"
        assert c.cmd(b"set gone 0 -1 1\r\nq") == b"STORED"      # expired at once
        assert c.cmd(b"set del 0 0 1\r\nd") == b"STORED"
        assert c.cmd(b"delete del") == b"DELETED"
        assert c.get(b"a") == b"x"
        dump = metadump(c)
        hashed = metadump(c, b"hash")
        one = metadump(c, b"1,")
        answers = [c.cmd(x) for x in CRAWLER_CMDS]
        settings = c.stats(b"settings")["lru_crawler"]
        big = []
        if many:
            # no pause between items: memcached's crawler sleeps the 100 us set above after
            # each, which a busy VM stretches to milliseconds (CI once timed out at 40,000)
            assert c.cmd(b"lru_crawler sleep 0") == b"OK"
            v = b"v" * 10
            for base in range(0, many, 2000):
                c.sync(b"".join(b"set m%06d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v)
                                for i in range(base, min(base + 2000, many))))
            big = metadump(c)
        return dump, hashed, one, answers, settings, big
    finally:
        c.close()


def test_lru_crawler_as_memcached(fpkv, memcached):
    """Issue 16, item 19: lru_crawler's subcommands answer as memcached 1.6 answers, and
    metadump lists the live items as memcached's crawler does: the same lines (last access
    and expiry are each process's clock, so they are compared in form only; the order is
    each server's), the expired and deleted items left out; fp-kv's 40,000 items come
    through a full output buffer whole (the dump stops for room and resumes)."""
    import re
    times = re.compile(rb"(exp=(?!-1)\d+|la=\d+)")

    def norm(lines):
        return sorted(times.sub(lambda m: m.group(0).split(b"=")[0] + b"=T", x) for x in lines)

    # memcached, the reference for the lines, dumps 2,000 items: at 40,000 its dump stalled
    # mid-way (nothing sent for 20 s) in three CI runs, twice in a row once, never here;
    # the resumption through a full buffer is fp-kv's to show. At 2,000 it stalled twice in
    # a row in one CI run (2026-11-28, on a README-only commit): a stall gets a fresh
    # memcached, up to four in all. fp-kv gets no retry.
    for attempt in range(4):
        try:
            with Started(memcached_cmd(memcached), ["-t", "1"]) as srv:
                want = crawler_session(srv, 2000)
            break
        except TimeoutError:
            print(f"memcached's metadump stalled (attempt {attempt + 1})")
            if attempt == 3:
                raise
    with Started(fpkv_kernel(fpkv), ["-t", "1"]) as srv:
        got = crawler_session(srv, 40000)
    for w, g in zip(want[:3], got[:3]):
        assert norm(g) == norm(w), (g, w)
    assert len(got[0]) == 3 and not any(b"gone" in x or b"del" in x for x in got[0])
    assert got[3] == want[3], list(zip(CRAWLER_CMDS, got[3], want[3]))
    assert got[4] == want[4] == "yes"
    assert len(got[5]) == 40003
    assert len(set(got[5])) == 40003       # nothing twice across the resumptions
    # memcached's crawler, the reference for the lines' form, is not one for the count: in
    # one CI run its dump of the same 40,003 items listed 40,002 (an item that moves in its
    # LRU while the crawler walks can be passed over). What it lists, fp-kv lists too.
    assert 2003 - 10 <= len(want[5]) <= 2003
    assert {x.split()[0] for x in want[5]} <= {x.split()[0] for x in got[5]}
    # the lines' form for the items both have (m000000..m001999 and the first three)
    keys = {x.split()[0] for x in want[5]}
    assert norm([x for x in got[5] if x.split()[0] in keys]) == norm(want[5])


def expiry_reuse(srv):
    """Ten 66,560-byte values that expire in 2 s, 4 s of waiting, ten more that do not:
    total_malloced before and after, and what stats says was reclaimed."""
    c = Conn(srv.host, srv.port)
    try:
        v = b"x" * 66560
        for i in range(10):
            assert c.cmd(b"set old%d 0 2 %d\r\n%s" % (i, len(v), v)) == b"STORED"
        before = int(c.stats(b"slabs")["total_malloced"])
        time.sleep(4)
        for i in range(10):
            assert c.store(b"set", b"new%d" % i, v) == b"STORED"
        after = int(c.stats(b"slabs")["total_malloced"])
        st = c.stats()
        items = c.stats(b"items")
        return before, after, st, items
    finally:
        c.close()


def test_expired_memory_is_reused(fpkv, memcached):
    """Issue 16, item 17: the memory of expired items is reused before a slab class takes
    a fresh page (memcached reclaims them from its LRU tail and its crawler; fp-kv's
    expiry crawler sweeps each class). Before: total_malloced went 1 MiB -> 2 MiB."""
    with Started(memcached_cmd(memcached), ["-t", "1"]) as srv:
        mb, ma, mst, _ = expiry_reuse(srv)
    with Started(fpkv_kernel(fpkv), ["-t", "1"]) as srv:
        fb, fa, fst, fitems = expiry_reuse(srv)
    assert ma == mb, f"memcached itself grew: {mb} -> {ma}"
    assert fa == fb, f"fp-kv took fresh memory for expired items' room: {fb} -> {fa}"
    assert int(fst["reclaimed"]) >= 10 and int(mst["reclaimed"]) >= 10, (fst, mst)
    assert int(fst["crawler_reclaimed"]) >= 10 and int(fst["crawler_items_checked"]) >= 10
    per_class = [int(v) for k, v in fitems.items() if k.endswith(":reclaimed")]
    assert sum(per_class) == int(fst["reclaimed"])
    assert fst["curr_items"] == "10"


def test_eviction_memory_and_recency(fpkv):
    """-m 16, 4 x 16 MB of 4000-byte values. Memory bound, justified:

    fp-kv keeps items in a slab arena of exactly -m bytes (kv.h), plus a hash table
    (reported by stats as hash_bytes). The runtime's own memory (the kernel transport's
    receive buffers: io_uring lends 1024 x 16 KiB, touched on first use; output chunks) is
    traffic-dependent, not data-dependent, so it is measured first: a warm-up pushes the
    same 64 MB through one key (set + delete, so nothing accumulates), and RSS then is the
    baseline. Storing 4x the limit may then add at most -m + hash_bytes + 4 MiB (allocator
    metadata, connection buffers of a second connection). A second 64 MB fill, with new keys,
    must add nothing more than 1 MiB (steady state: eviction reuses memory, nothing leaks).
    """
    n_fill = 4 * EVICT_MB * MIB // VALUE_SIZE         # 16777 values: 4x the limit
    n_hot, batch = 50, 200                             # hot keys, read after every batch
    with Started(fpkv_kernel(fpkv), ["-m", EVICT_MB, "-t", "1"]) as srv:
        c = None
        try:
            c = Conn(srv.host, srv.port)
            junk = b"j" * VALUE_SIZE
            for b in range(0, n_fill, batch):
                c.sync(b"".join(b"set warm 0 0 %d noreply\r\n%s\r\ndelete warm noreply\r\n"
                                % (VALUE_SIZE, junk) for _ in range(batch)))
            time.sleep(0.2)
            rss_base = rss_kib(srv.pid)

            def val(tag, i):
                return (b"%s%08d." % (tag, i)) * (VALUE_SIZE // 10)

            c.sync(b"".join(b"set h%d 0 0 %d noreply\r\n%s\r\n" % (i, VALUE_SIZE, val(b"h", i))
                            for i in range(n_hot)))
            for b in range(0, n_fill, batch):
                c.sync(b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, VALUE_SIZE, val(b"k", i))
                                for i in range(b, min(b + batch, n_fill))))
                hot = c.get_multi([b"h%d" % i for i in range(n_hot)])
                assert len(hot) == n_hot, f"hot keys evicted after {b + batch} sets: " \
                    f"{sorted(set(b'h%d' % i for i in range(n_hot)) - set(hot))[:10]}"
            time.sleep(0.2)
            rss_full = rss_kib(srv.pid)
            st = c.stats()
            hash_kib = int(st.get("hash_bytes", "0")) // 1024

            # the recently read and the recently set survive, intact
            hot = c.get_multi([b"h%d" % i for i in range(n_hot)])
            assert hot == {b"h%d" % i: val(b"h", i) for i in range(n_hot)}
            recent = range(n_fill - EVICT_MB * MIB // 4 // VALUE_SIZE, n_fill)   # last 4 MB
            got = {}
            for b in range(recent.start, recent.stop, 100):
                got.update(c.get_multi([b"k%d" % i for i in range(b, min(b + 100, recent.stop))]))
            missing = [i for i in recent if b"k%d" % i not in got]
            assert not missing, f"{len(missing)} of the last {len(recent)} keys set are gone: " \
                f"{missing[:10]}"
            assert all(got[b"k%d" % i] == val(b"k", i) for i in recent)
            # the oldest (the first 16 MB of the fill, never read) are gone
            oldest = range(0, EVICT_MB * MIB // VALUE_SIZE)
            present = []
            for b in range(0, oldest.stop, 100):
                present += list(c.get_multi([b"k%d" % i for i in range(b, min(b + 100, oldest.stop))]))
            assert not present, f"{len(present)} of the oldest keys survived: {present[:10]}"
            evictions = int(st["evictions"])
            assert evictions >= n_fill - EVICT_MB * MIB // VALUE_SIZE, st
            assert int(st["curr_items"]) * VALUE_SIZE <= EVICT_MB * MIB, st
            assert int(st["limit_maxbytes"]) == EVICT_MB * MIB, st

            bound = rss_base + EVICT_MB * 1024 + hash_kib + SLACK_KIB
            assert rss_full <= bound, (f"VmRSS {rss_full} KiB after storing {4 * EVICT_MB} MB "
                                       f"into -m {EVICT_MB}: more than baseline {rss_base} + "
                                       f"{EVICT_MB} MiB + hash {hash_kib} + slack {SLACK_KIB} KiB")

            # a second fill with new keys, on a new connection: no growth
            c.close()
            c = Conn(srv.host, srv.port)
            for b in range(0, n_fill, batch):
                c.sync(b"".join(b"set z%d 0 0 %d noreply\r\n%s\r\n" % (i, VALUE_SIZE, val(b"z", i))
                                for i in range(b, min(b + batch, n_fill))))
            time.sleep(0.2)
            rss_again = rss_kib(srv.pid)
            assert rss_again <= rss_full + 1024, (f"VmRSS grew from {rss_full} to {rss_again} "
                                                  f"KiB on a second fill (a leak?)")
            assert c.get(b"k%d" % (n_fill - 1)) is None    # evicted by the second fill
            assert c.get(b"z%d" % (n_fill - 1)) == val(b"z", n_fill - 1)
            assert int(c.stats()["evictions"]) > evictions
        finally:
            if c is not None:
                c.close()


# ---- 4. concurrency -----------------------------------------------------------------------

THREADS = 6
CONNS = 3          # per thread, used in turn: 18 connections, spread over both workers
OPS = 2000
ADD_ROUNDS = 40


def worker_rx(build_dir, stats_name):
    return [w["rx_bytes"] for w in worker_totals(build_dir, stats_name)]


def wait_workers_listening(srv, build_dir, stats_name, timeout=10):
    """Each worker listens on its own (the kernel spreads connections over the listeners);
    one that is not listening yet gets none, so wait until a batch of connections reached
    every worker."""
    deadline = time.time() + timeout
    while True:
        cs = [Conn(srv.host, srv.port) for _ in range(8)]
        for c in cs:
            assert c.cmd(b"mn") == b"MN"
            c.close()
        rx = worker_rx(build_dir, stats_name)
        if min(rx) > 0:
            return
        assert time.time() < deadline, f"a worker never got a connection: rx bytes {rx}"
        time.sleep(0.1)


def test_concurrency_linearisable(fpkv, build_dir):
    """fp-kv -t 2 --cores 0,1; THREADS client threads with CONNS connections each (the
    kernel spreads connections over the workers; the test checks that both served), on
    shared keys.

    Checked against a linearisable model of each key:
      ctr     incr by distinct deltas: the returned values, sorted, must form one chain
              (each = the previous + its own delta, starting at 0), and the final value is
              the sum of all acknowledged deltas
      log     append of unique tokens: each acknowledged token appears exactly once, and each
              thread's tokens in its own order
      casctr  gets + cas(value + 1) until STORED: every success wrote a distinct value, so
              the successes wrote exactly 1..N and the final value is N (no lost update)
      race<r> all threads add at once (barrier): exactly one STORED, and its value stays
      blob<j> whole-value overwrites of different lengths: a read sees one writer's value whole
    """
    stats_name = f"fpkvc{os.getpid()}"
    cmd = [a if a != "none" else stats_name for a in fpkv_kernel(fpkv)]
    try:
        run_concurrency(cmd, build_dir, stats_name)
    finally:
        # fp-kv removes its stats segment when it exits cleanly; not when killed
        pathlib.Path(f"/dev/shm/flowplane-{stats_name}").unlink(missing_ok=True)


def worker_totals(build_dir, stats_name):
    r = subprocess.run([str(build_dir / "tools" / "fp-stats"), "--name", stats_name, "--totals"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"fp-stats: {r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])["workers"]


def run_concurrency(cmd, build_dir, stats_name):
    """The workload and its checks; the workers' counters at the end."""
    with Started(cmd, ["-m", "64", "-t", "2", "--cores", "0,1"]) as srv:
        wait_workers_listening(srv, build_dir, stats_name)
        rx0 = worker_rx(build_dir, stats_name)
        setup = Conn(srv.host, srv.port)
        assert setup.store(b"set", b"ctr", b"0") == b"STORED"
        assert setup.store(b"set", b"log", b"") == b"STORED"
        assert setup.store(b"set", b"casctr", b"0") == b"STORED"
        barrier = threading.Barrier(THREADS)
        incrs, appends, cas_wrote, add_won, errors = [], [], [], {}, []
        lock = threading.Lock()

        def blob(tid):
            return bytes([65 + tid]) * (1000 + 997 * tid)

        def worker(tid):
            rnd = random.Random(tid)
            conns = []
            my_incr, my_app, my_cas = [], [], []
            doing = "connecting"
            try:
                conns += [Conn(srv.host, srv.port, timeout=10) for _ in range(CONNS)]
                for i in range(OPS):
                    c = conns[i % CONNS]
                    op = rnd.random()
                    doing = f"op {i} ({'incr' if op < 0.3 else 'append' if op < 0.55 else 'cas' if op < 0.8 else 'blob'})"
                    if op < 0.3:
                        delta = 1 + tid + THREADS * i          # distinct over all threads
                        r = c.cmd(b"incr ctr %d" % delta)
                        my_incr.append((int(r), delta))
                    elif op < 0.55:
                        tok = b" t%d.%d" % (tid, i)
                        r = c.store(b"append", b"log", tok)
                        assert r == b"STORED", r
                        my_app.append(tok)
                    elif op < 0.8:
                        while True:
                            got = c.gets(b"casctr")
                            assert got is not None, "key casctr vanished"
                            v, cas = got
                            r = c.store(b"cas", b"casctr", b"%d" % (int(v) + 1), b" %d" % cas)
                            if r == b"STORED":
                                my_cas.append(int(v) + 1)
                                break
                            assert r == b"EXISTS", r
                    else:
                        j = rnd.randrange(3)
                        if rnd.random() < 0.5:
                            assert c.store(b"set", b"blob%d" % j, blob(tid)) == b"STORED"
                        else:
                            v = c.get(b"blob%d" % j)
                            if v is not None:
                                t = v[0] - 65
                                assert 0 <= t < THREADS and v == blob(t), \
                                    f"torn value: {len(v)} bytes starting {v[:8]!r}"
                for r_ in range(ADD_ROUNDS):
                    doing = f"add round {r_}"
                    barrier.wait(timeout=60)
                    r = c.store(b"add", b"race%d" % r_, b"w%d" % tid)
                    assert r in (b"STORED", b"NOT_STORED"), r
                    if r == b"STORED":
                        with lock:
                            add_won.setdefault(r_, []).append(tid)
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(f"thread {tid}, {doing}: {type(e).__name__}: {e}")
                barrier.abort()
            finally:
                for c in conns:
                    c.close()
                with lock:
                    incrs.extend(my_incr)
                    appends.append((tid, my_app))
                    cas_wrote.extend(my_cas)

        ts = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(150)
        assert not any(t.is_alive() for t in ts), "client threads hung"
        assert not errors, f"{errors}; fp-kv: {srv.problem() or 'still running'}"
        rx = [b - a for a, b in zip(rx0, worker_rx(build_dir, stats_name))]
        assert len(rx) == 2 and min(rx) > 10000, f"a worker served (almost) nothing: rx {rx}"

        # incr: one chain
        chain = sorted(incrs)
        prev = 0
        for value, delta in chain:
            assert value == prev + delta, f"incr returned {value}, previous {prev}, delta {delta}"
            prev = value
        assert int(setup.get(b"ctr")) == sum(d for _, d in incrs) == prev
        # append: each token once, per-thread order kept
        log = setup.get(b"log").split(b" ")[1:]
        acked = [t for _, toks in appends for t in toks]
        assert len(log) == len(acked), f"log has {len(log)} tokens, {len(acked)} acknowledged"
        assert sorted(log) == sorted(t[1:] for t in acked), "tokens lost or duplicated"
        pos = {t: k for k, t in enumerate(log)}
        for tid, toks in appends:
            idx = [pos[t[1:]] for t in toks]
            assert idx == sorted(idx), f"thread {tid}'s appends out of order"
        # cas: no lost update
        assert sorted(cas_wrote) == list(range(1, len(cas_wrote) + 1)), "a cas update was lost"
        assert int(setup.get(b"casctr")) == len(cas_wrote)
        # add: one winner per round
        for r_ in range(ADD_ROUNDS):
            assert len(add_won.get(r_, [])) == 1, f"add race {r_}: winners {add_won.get(r_)}"
            assert setup.get(b"race%d" % r_) == b"w%d" % add_won[r_][0]
        setup.close()
        return worker_totals(build_dir, stats_name)


# ---- stats reset, side by side with memcached --------------------------------------------

RESET_COUNTERS = ("get_hits", "get_misses", "delete_hits", "delete_misses", "incr_hits",
                  "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses",
                  "cas_badval", "touch_hits", "touch_misses", "cmd_get", "cmd_set",
                  "cmd_touch", "total_items", "evictions", "reclaimed")


def stats_around_reset(cmd):
    """Every counter after a round of hits and misses of each kind, then after stats reset
    (issue 16, item 16: get_hits, delete_hits, incr/decr/cas/touch kept their values)."""
    with Started(cmd, ["-t", "1"]) as srv:
        c = Conn(srv.host, srv.port)
        try:
            assert c.store(b"set", b"a", b"1") == b"STORED"
            assert c.get(b"a") == b"1" and c.get(b"nope") is None
            assert c.cmd(b"incr a 1") == b"2" and c.cmd(b"incr nope 1") == b"NOT_FOUND"
            assert c.cmd(b"decr a 1") == b"1" and c.cmd(b"decr nope 1") == b"NOT_FOUND"
            _, cas = c.gets(b"a")
            assert c.store(b"cas", b"a", b"x", b" %d" % (cas + 99)) == b"EXISTS"
            assert c.store(b"cas", b"a", b"y", b" %d" % c.gets(b"a")[1]) == b"STORED"
            assert c.store(b"cas", b"nope", b"y", b" 1") == b"NOT_FOUND"
            assert c.cmd(b"touch a 0") == b"TOUCHED" and c.cmd(b"touch nope 0") == b"NOT_FOUND"
            assert c.cmd(b"delete a") == b"DELETED" and c.cmd(b"delete a") == b"NOT_FOUND"
            before = c.stats()
            assert c.cmd(b"stats reset") == b"RESET"
            after = c.stats()
            assert c.store(b"set", b"b", b"2") == b"STORED" and c.get(b"b") == b"2"
            again = c.stats()
        finally:
            c.close()
    pick = lambda st: {k: int(st[k]) for k in RESET_COUNTERS}   # noqa: E731
    return pick(before), pick(after), pick(again)


def test_stats_reset_like_memcached(fpkv, memcached):
    ref = stats_around_reset(memcached_cmd(memcached))
    got = stats_around_reset(fpkv_kernel(fpkv))
    assert all(v > 0 for k, v in ref[0].items() if k not in ("evictions", "reclaimed")), ref[0]
    diff = {(i, k): (got[i][k], ref[i][k]) for i in range(3) for k in RESET_COUNTERS
            if got[i][k] != ref[i][k]}
    assert not diff, f"(phase, counter): (fp-kv, memcached): {diff}"


def conns_view(cmd):
    """stats conns seen from a third connection while one is idle and one is part-way
    through a value: {connection: {field: value}} keyed by the client's own address."""
    with Started(cmd, ["-m", "64", "-t", "1"]) as srv:
        idle, mid, asker = (Conn(srv.host, srv.port) for _ in range(3))
        try:
            assert idle.cmd(b"version").startswith(b"VERSION")
            mid.s.sendall(b"set k 0 0 10\r\nabc")
            mine = {"tcp:%s:%d" % c.s.getsockname(): who
                    for c, who in ((idle, "idle"), (mid, "mid"), (asker, "asker"))}
            deadline = time.time() + 20      # until the server has read mid's partial set
            while True:
                seen = {}
                for name, value in asker.stats(b"conns").items():
                    n, field = name.split(":", 1)
                    seen.setdefault(n, {})[field] = value
                if any(mine.get(f.get("addr")) == "mid" and f.get("state") == "conn_nread"
                       for f in seen.values()) or time.time() > deadline:
                    break
                time.sleep(0.1)
            out = {}
            for n, f in seen.items():
                who = mine.get(f.get("addr"), "listener" if f.get("state") == "conn_listening"
                               else f"other {f}")
                out[who] = f
            idle.close()
            deadline = time.time() + 20      # until the server has seen the close
            while True:
                names = set(asker.stats(b"conns"))
                if sum(n.endswith(":addr") for n in names) <= 3 or time.time() > deadline:
                    break
                time.sleep(0.1)
        finally:
            for c in (idle, mid, asker):
                c.close()
    return out, names, "tcp:%s:%d" % (srv.host, srv.port)


def test_stats_conns_like_memcached(fpkv, memcached):
    """Each connection with its address, the listener's, its state and its idle time, as
    memcached lists them; a closed connection leaves the list."""
    for cmd in (memcached_cmd(memcached), fpkv_kernel(fpkv)):
        out, names, listen = conns_view(cmd)
        assert set(out) == {"listener", "idle", "mid", "asker"}, (cmd[0], out)
        assert out["listener"]["addr"] == listen and out["listener"]["state"] == "conn_listening"
        for who, state in (("idle", "conn_read"), ("mid", "conn_nread"),
                           ("asker", "conn_parse_cmd")):
            assert set(out[who]) == {"addr", "listen_addr", "state", "secs_since_last_cmd"}, out
            assert out[who]["listen_addr"] == listen, out
            assert out[who]["state"] == state, (cmd[0], who, out[who])
            assert int(out[who]["secs_since_last_cmd"]) >= 0, out[who]
        addrs = [n for n in names if n.endswith(":addr")]
        assert len(addrs) == 3, (cmd[0], names)   # idle has gone: the listener, mid, asker


WATCH_SCRIPT = (b"set a:b 0 100 1\r\nx\r\nget a:b nope\r\nadd a:b 0 0 1\r\ny\r\n"
                b"append zz 0 0 1\r\nq\r\ndelete a:b\r\ngat 10 a:b\r\nmg a:b v\r\n"
                b"set %b 0 0 1\r\nk\r\nget %b\r\nset big 0 0 2000000\r\n")
ODD_KEY = b"k%\x01/+"


def after_conn_new(lines):
    """From the script connection's conn_new on, when connection events are watched: the
    close of Started's readiness probe may be logged after the watch began (with two
    workers its EOF and the watch command are not ordered)."""
    for i, x in enumerate(lines):
        if b"type=conn_new" in x:
            return lines[i:]
    return lines if not any(b"type=conn_" in x for x in lines) else []


def watch_lines(cmd, flags=("-m", "64", "-t", "1"), kinds=b"fetchers mutations connevents",
                script=WATCH_SCRIPT % (ODD_KEY, ODD_KEY), big=True, until=None):
    """The lines a watcher gets while another connection runs @script."""
    with Started(cmd, list(flags)) as srv:
        w = Conn(srv.host, srv.port)
        c = None
        try:
            assert w.cmd(b"watch " + kinds) == b"OK"
            c = Conn(srv.host, srv.port)
            c.s.sendall(script)
            if big:
                time.sleep(0.2)
                c.s.sendall(b"x" * 2000000 + b"\r\n")
            c.s.settimeout(5)
            while b"SERVER_ERROR object too large" not in c.buf and big:
                c._fill()
            c.close()
            c = None
            lines, deadline = [], time.time() + 10
            while time.time() < deadline:
                ln = after_conn_new(w.buf.split(b"\n"))
                if (until or (lambda ls: any(b"type=conn_close" in x for x in ls)))(ln):
                    break
                w.s.settimeout(max(0.1, deadline - time.time()))
                try:
                    w._fill()
                except (socket.timeout, ConnectionError):
                    break
            lines = [x.decode() for x in after_conn_new(w.buf.split(b"\n")) if x]
        finally:
            w.close()
            if c:
                c.close()
    return lines


def watch_norm(line):
    """ts, gid, the connection's number and port differ by nature; so does a failed
    store's clsid (memcached reads it from no item)."""
    line = re.sub(r"^ts=\d+\.\d+ gid=\d+ ", "", line)
    line = re.sub(r"(cfd|rport)=-?\d+", r"\1=N", line)   # memcached: garbage cfd on a failed store
    if "status=too_large" in line or "status=no_memory" in line:
        line = re.sub(r"clsid=\d+", "clsid=N", line)
    return line


def test_watch_like_memcached(fpkv, memcached):
    """A watcher gets each read, store and connection event in memcached's format; every
    line fp-kv writes, memcached writes too, in the same order (memcached also logs the
    lookups it makes inside set, add, delete and the like: apps/kv/README.md)."""
    ref = [watch_norm(x) for x in watch_lines(memcached_cmd(memcached))]
    got = [watch_norm(x) for x in watch_lines(fpkv_kernel(fpkv))]
    assert any("type=item_get key=k%25%01%2F%2B status=found" in x for x in got), got
    assert {x.split()[0] for x in got} == {"type=conn_new", "type=item_store", "type=item_get",
                                           "type=conn_close"}, got
    it = iter(ref)
    missing = [x for x in got if not any(x == y for y in it)]
    assert not missing, f"fp-kv lines memcached does not write (in order): {missing}\nref: {ref}"


def test_watch_rawcmds_evictions_and_limits(fpkv, memcached):
    got = watch_lines(fpkv_kernel(fpkv), kinds=b"rawcmds", big=False,
                      script=b"set a 0 0 1\r\nx\r\nget a\r\n",
                      until=lambda ls: sum(b"<" in x for x in ls) >= 2)
    assert [re.sub(r"^ts=\S+ gid=\d+ <\d+ ", "", x) for x in got] == ["set a 0 0 1", "get a"], got
    # evictions: 30 MB of 100 KB values into -m 8, on both servers
    fill = b"".join(b"set e%d 0 0 100000\r\n%s\r\n" % (i, b"v" * 100000) for i in range(300))
    for cmd in (memcached_cmd(memcached), fpkv_kernel(fpkv)):
        ev = watch_lines(cmd, flags=("-m", "8", "-t", "1"), kinds=b"evictions", big=False,
                         script=fill, until=lambda ls: sum(b"type=eviction" in x for x in ls) >= 5)
        ev = [watch_norm(x) for x in ev]
        assert len(ev) >= 5, (cmd[0], ev)
        for x in ev[:5]:
            assert re.fullmatch(r"type=eviction key=e\d+ fetch=no ttl=-1 la=\d+ clsid=\d+ "
                                r"size=100000", x), (cmd[0], x)
    # the answers around watch, side by side
    for cmd in (memcached_cmd(memcached), fpkv_kernel(fpkv)):
        with Started(cmd, ["-m", "64", "-t", "1"]) as srv:
            c = Conn(srv.host, srv.port)
            assert c.cmd(b"watch bogus") == b"ERROR", cmd[0]
            c.s.sendall(b"version\r\nwatch\r\n")
            assert c.line().startswith(b"VERSION") and \
                c.line() == b"ERROR cannot pipeline other commands before watch", cmd[0]
            ws = [Conn(srv.host, srv.port) for _ in range(21)]
            answers = [x.cmd(b"watch") for x in ws]
            assert answers.count(b"OK") == 20, (cmd[0], answers)
            assert answers[-1] == b"WATCHER_TOO_MANY log watcher limit reached", cmd[0]
            for x in ws + [c]:
                x.close()


def test_stats_segment_counts_requests(fpkv, build_dir):
    """fp-stats' ops/s for fp-kv: every request line is one of the runtime's app_ops
    (issue 16, item 12: app_ops never moved)."""
    import uuid
    name = f"kvops-{uuid.uuid4().hex[:8]}"
    cmd = [a if a != "none" else name for a in fpkv_kernel(fpkv)]
    with Started(cmd, ["-t", "1"]) as srv:
        c = Conn(srv.host, srv.port)
        try:
            assert c.store(b"set", b"k", b"v") == b"STORED"
            for _ in range(100):                       # 101 request lines in all
                assert c.get(b"k") == b"v"
            deadline = time.time() + 10
            ops = 0
            while time.time() < deadline and ops < 101:
                r = subprocess.run([build_dir / "tools" / "fp-stats", "--name", name,
                                    "--totals"], capture_output=True, text=True)
                assert r.returncode == 0, r.stderr
                ops = sum(w["app_ops"] for w in json.loads(r.stdout)["workers"])
                time.sleep(0.1)
            assert ops == 101, ops
        finally:
            c.close()


def still_open(socks, wait_s):
    """The sockets the server has not closed: each sends one more byte of its value and
    waits @wait_s for an EOF or a reset."""
    out = []
    for s in socks:
        s.settimeout(wait_s)
        try:
            s.sendall(b"x")
            if s.recv(100) == b"":
                continue
        except socket.timeout:
            pass
        except OSError:
            continue
        out.append(s)
    return out


def test_slow_uploads_do_not_take_the_store(fpkv):
    """140 clients start 500 KB values and send a byte now and then: values still arriving
    may hold at most an eighth of -m (8 MB: 16 of them; the rest are refused, and told so
    once their value is swallowed, as memcached does), the other clients' sets all succeed,
    and the uploads holding memory are dropped once overdue (10 s + 64 KiB/s), which frees
    it. It was: 299 of 300 sets refused with out of memory, curr_items 0 (issue 16, 2)."""
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1", "-c", "1024"]) as srv:
        slow = []
        c = None
        try:
            for i in range(140):
                s = socket.create_connection((srv.host, srv.port), timeout=20)
                s.sendall(b"set big%d 0 0 500000\r\nx" % i)
                slow.append(s)
            c = Conn(srv.host, srv.port)
            for i in range(300):
                assert c.store(b"set", b"k%d" % i, b"v" * 1000) == b"STORED", i
            st = c.stats()
            assert int(st["curr_items"]) == 300
            big = int(c.stats(b"slabs").get("total_malloced", 0))
            assert big <= 8 * MIB + 2 * MIB, big    # the bound, the 300 small ones
            deadline = time.time() + 60     # 10 s grace + 500 KB at 64 KiB/s, then the tick
            open_ = still_open(slow, 0.02)
            while time.time() < deadline and len(open_) == len(slow):
                time.sleep(0.5)
                open_ = still_open(open_, 0.02)
            time.sleep(1.5)                 # all overdue ones go in the same second's sweep
            dropped = len(slow) - len(still_open(open_, 0.05))
            assert 1 <= dropped <= 17, dropped  # those holding memory, and only those
            assert c.store(b"set", b"after", b"v" * 1000) == b"STORED"
        finally:
            for s in slow:
                s.close()
            if c:
                c.close()


def test_cache_memlimit_lowers_the_limit(fpkv):
    """cache_memlimit below -m (pymemcache calls it): OK, limit_maxbytes follows, and the
    store then keeps to it, evicting; above -m the fixed arena refuses (issue 16, 19)."""
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1"]) as srv:
        c = Conn(srv.host, srv.port)
        try:
            assert c.cmd(b"cache_memlimit 8") == b"OK"
            assert int(c.stats()["limit_maxbytes"]) == 8 * MIB
            value = b"v" * 4000
            for b in range(0, 6000, 200):            # 24 MB of values
                c.sync(b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value)
                                for i in range(b, b + 200)))
            st, slabs = c.stats(), c.stats(b"slabs")
            assert int(slabs["total_malloced"]) <= 8 * MIB, slabs["total_malloced"]
            assert int(st["evictions"]) > 0
            assert c.cmd(b"cache_memlimit 128") == \
                b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust"
        finally:
            c.close()


def settle_rss(pid, limit_s=60, stable_kib=1024):
    """The server's resident KiB once it has moved less than @stable_kib in 2 s (or at
    @limit_s)."""
    last, still, deadline = rss_kib(pid), 0, time.time() + limit_s
    while time.time() < deadline and still < 4:
        time.sleep(0.5)
        now = rss_kib(pid)
        still = still + 1 if abs(now - last) < stable_kib else 0
        last = now
    return last


NONREADERS = 200
BIG = 500_000


def test_non_reading_clients_are_bounded(fpkv):
    """A 500 KB value; 200 clients with small receive buffers ask for it 40 times each and
    never read. Answers not yet taken by the transport are bounded by the output budget
    (64 MiB, plus at most one answer for a connection whose output was empty), so the
    server's memory stays bounded; a client that reads is still answered; the memory goes
    back to the system once the clients close. It was: 848 MB at 200 clients, 2.26 GB at
    600, kept after they left (4 MiB per connection, -c of them; issue 16, 1)."""
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1", "-c", "1024"]) as srv:
        c = Conn(srv.host, srv.port)
        hogs = []
        try:
            assert c.store(b"set", b"big", b"b" * BIG) == b"STORED"
            assert c.store(b"set", b"small", b"s" * 100) == b"STORED"
            rss0 = rss_kib(srv.pid)
            for _ in range(NONREADERS):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
                s.settimeout(20)
                s.connect((srv.host, srv.port))
                s.setblocking(False)
                try:
                    s.send(b"get big\r\n" * 40)
                except BlockingIOError:
                    pass
                hogs.append(s)
            rss_hogs = settle_rss(srv.pid)
            held = int(c.stats()["response_obj_bytes"])
            # the budget and one answer each, with room for the store's own growth
            bound_kib = (64 * MIB + NONREADERS * (BIG + 1024)) // 1024 + 32 * 1024
            assert rss_hogs - rss0 <= bound_kib, (rss0, rss_hogs, held)
            assert held <= 64 * MIB + NONREADERS * (BIG + 1024), held
            assert held > 32 * MIB, held           # the clients did fill what they may
            assert c.get(b"big") == b"b" * BIG     # one that reads is served...
            assert c.get(b"small") == b"s" * 100
            assert c.store(b"set", b"k", b"v") == b"STORED"     # ...and can still write
            for s in hogs:
                s.close()
            hogs = []
            # what is left is at most an answer to this client (a stats reply in flight)
            deadline = time.time() + 30
            while time.time() < deadline and int(c.stats()["response_obj_bytes"]) > 16384:
                time.sleep(0.2)
            assert int(c.stats()["response_obj_bytes"]) <= 16384
            rss_after = settle_rss(srv.pid)
            # given back: within 32 MiB of where it started (malloc keeps some; ASan's
            # allocator keeps what was freed in quarantine: not asked of such a build)
            if not sanitized(fpkv):
                assert rss_after - rss0 <= 32 * 1024, (rss0, rss_hogs, rss_after)
        finally:
            for s in hogs:
                s.close()
            c.close()
