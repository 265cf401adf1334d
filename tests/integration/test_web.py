"""fp-web against real clients: curl and Python's http.client, and raw sockets for what they will not send.

Unprivileged on loopback (kernel transport); with root, the same files over AF_XDP in a
namespace pair (tools/netns.py) with curl from the client namespace. Every body is
compared byte for byte with the file; every status fp-web gives is provoked; pipelined
requests are split at every byte; paths out of the root (.., encoded, a symbolic link) are
refused and their contents never appear.
"""
import contextlib
import hashlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, free_port, run

HOST = "127.0.0.1"
SIZES = {"100.bin": 100, "4k.bin": 4096, "64k.bin": 65536, "1m.bin": 1 << 20}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    top = tmp_path_factory.mktemp("web")
    d = top / "root"
    d.mkdir()
    rnd = random.Random(7)
    for name, n in SIZES.items():
        (d / name).write_bytes(bytes(rnd.getrandbits(8) for _ in range(n)))
    (d / "index.html").write_text("<h1>fp-web</h1>\n")
    (d / "sub").mkdir()
    (d / "sub" / "index.html").write_text("sub\n")
    (d / "sub" / "style.css").write_text("body{}\n")
    (top / "secret.txt").write_text("TOP-SECRET\n")
    os.symlink(top / "secret.txt", d / "link-out")
    os.symlink("4k.bin", d / "link-in")
    return d


@contextlib.contextmanager
def serving(build_dir, site, *extra):
    """fp-web on 127.0.0.1 with @extra options: its port, once it accepts; stopped (and its
    exit status checked) after."""
    port = free_port()
    p = subprocess.Popen([build_dir / "apps" / "web" / "fp-web", "--root", site, "--port",
                          str(port), "--ip", HOST, "--stats", "none", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while True:
        assert p.poll() is None, p.stderr.read()
        try:
            socket.create_connection((HOST, port), 0.5).close()
            break
        except OSError:
            assert time.time() < deadline, "fp-web did not accept within 10 s"
            time.sleep(0.1)
    try:
        yield port
    finally:
        stop_process(p)
    assert p.returncode == 0, p.stderr.read()


@pytest.fixture(scope="module")
def server(build_dir, site):
    with serving(build_dir, site) as port:
        yield port


def curl(port, path, *extra):
    r = run(["curl", "-s", "-S", "--path-as-is", "-o", "-", "-D", "/dev/stderr",
             *extra, f"http://{HOST}:{port}{path}"], timeout=30)   # text: for text files
    return r


def raw(port, data, timeout=5):
    """Send @data, read until the server closes (or @timeout)."""
    s = socket.create_connection((HOST, port), timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


def read_response(f, head=False):
    """One response from a file-like socket: (status, headers, body); a HEAD's has none."""
    line = f.readline()
    status = int(line.split()[1])
    h = {}
    while True:
        l = f.readline()
        if l in (b"\r\n", b""):
            break
        k, v = l.decode().split(":", 1)
        h[k.strip().lower()] = v.strip()
    n = 0 if head else int(h.get("content-length", 0))
    return status, h, f.read(n) if n else b""


def test_files_with_curl(server, site):
    for name in SIZES:
        r = subprocess.run(["curl", "-s", "-f", f"http://{HOST}:{server}/{name}"], capture_output=True, timeout=30)
        assert r.returncode == 0
        assert hashlib.sha256(r.stdout).digest() == hashlib.sha256((site / name).read_bytes()).digest()
    r = curl(server, "/")
    assert r.stdout == "<h1>fp-web</h1>\n" and "text/html" in r.stderr
    r = curl(server, "/link-in", "-I")      # HEAD: the headers, not the binary body
    assert "200 OK" in r.stderr and "Content-Length: 4096" in r.stderr


def test_statuses_with_http_client(server, site):
    c = http.client.HTTPConnection(HOST, server, timeout=5)
    def get(path, method="GET", headers=None):
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r, r.read()
    r, body = get("/4k.bin")
    assert r.status == 200 and body == (site / "4k.bin").read_bytes()
    etag, lm = r.getheader("ETag"), r.getheader("Last-Modified")
    assert r.getheader("Content-Type") == "application/octet-stream" and r.getheader("Date")
    r, body = get("/4k.bin", headers={"If-None-Match": etag})
    assert r.status == 304 and body == b"" and r.getheader("ETag") == etag
    r, body = get("/4k.bin", headers={"If-Modified-Since": lm})
    assert r.status == 304
    r, body = get("/4k.bin", "HEAD")
    assert r.status == 200 and body == b"" and r.getheader("Content-Length") == "4096"
    r, body = get("/sub")
    assert r.status == 301 and r.getheader("Location") == "/sub/"
    r, body = get("/sub/")
    assert r.status == 200 and body == b"sub\n"
    r, body = get("/sub/style.css")
    assert r.getheader("Content-Type") == "text/css"
    r, body = get("/nothing")
    assert r.status == 404 and b"404 Not Found" in body
    r, body = get("/", "DELETE")
    assert r.status == 405 and r.getheader("Allow") == "GET, HEAD"
    r, body = get("/4k.bin")                 # still the same connection after all that
    assert r.status == 200 and len(body) == 4096
    c.close()


def test_refusals_close(server):
    long_target = b"/" + b"a" * 5000
    for req, status in [(b"GET / HTTP/1.1\r\n\r\n", 400),
                        (b"GET " + long_target + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414),
                        (b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"x" * 20000 + b"\r\n\r\n", 431),
                        (b"GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505),
                        (b"BREW / HTTP/1.1\r\nHost: h\r\n\r\n", 501),
                        (b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999\r\n\r\n", 413),
                        (b"GET / HTTP/1.0\r\n\r\n", 200)]:          # 1.0: closes after
        out = raw(server, req + b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 %d " % status), (status, out[:80])
        assert out.count(b"HTTP/1.1 ") == 1, f"{status}: the connection went on"


def test_pipelined_split_at_every_byte(server, site):
    reqs = (b"GET /100.bin HTTP/1.1\r\nHost: h\r\n\r\n"
            b"HEAD /4k.bin HTTP/1.1\r\nHost: h\r\n\r\n"
            b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody"
            b"GET /nothing HTTP/1.1\r\nHost: h\r\n\r\n"
            b"GET /sub/style.css HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    want = [200, 200, 405, 404, 200]
    small = (site / "100.bin").read_bytes()
    for cut in range(1, len(reqs)):
        s = socket.create_connection((HOST, server), 5)
        s.sendall(reqs[:cut])
        if cut % 40 == 0:
            time.sleep(0.01)
        s.sendall(reqs[cut:])
        f = s.makefile("rb")
        got = []
        for i, w in enumerate(want):
            st, h, body = read_response(f, head=i == 1)
            if i == 1:                          # HEAD: the file's length, no body
                assert h["content-length"] == "4096"
            got.append(st)
            if i == 0:
                assert body == small
        assert f.read() == b"", "the connection stays open after 'Connection: close'"
        s.close()
        assert got == want, cut


def test_paths_outside_the_root(server):
    for path in ["/../secret.txt", "/%2e%2e/secret.txt", "/sub/../../secret.txt",
                 "/%2E%2E%2Fsecret.txt", "/link-out", "/..%2fsecret.txt", "/sub/%2e%2e/%2e%2e/secret.txt"]:
        out = raw(server, b"GET " + path.encode() + b" HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        assert out.split(b" ")[1] in (b"400", b"403", b"404"), (path, out[:60])
        assert b"TOP-SECRET" not in out


def test_client_that_does_not_read(server, site):
    """20 pipelined requests for the 1 MB file, nothing read for a while: the server stops
    reading the connection rather than buffer 20 MB; then every byte arrives in order."""
    s = socket.create_connection((HOST, server), 10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.sendall(b"GET /1m.bin HTTP/1.1\r\nHost: h\r\n\r\n" * 20)
    time.sleep(1)
    f = s.makefile("rb")
    want = (site / "1m.bin").read_bytes()
    for _ in range(20):
        st, h, body = read_response(f)
        assert st == 200 and body == want
    s.close()


def test_loadgen_http(build_dir, server, tmp_path):
    """fp-loadgen's http protocol against fp-web: every answer framed and counted; a 404
    is an error, not a lost response."""
    lg = build_dir / "apps" / "loadgen" / "fp-loadgen"
    for path, ok in [("/4k.bin", True), ("/nothing", False)]:
        out = tmp_path / "lg.json"
        r = run([lg, "--server", f"{HOST}:{server}", "--proto", "http", "--path", path,
                 "--rates", "500,2k", "--duration", "1", "--warmup", "0.2", "--conns", "8",
                 "--depth", "2", "--stats", "none", "--quiet", "--json", out], timeout=60)
        assert r.returncode == 0, r.stderr
        for pt in json.loads(out.read_text())["points"]:
            assert pt["completed"] > 0 and pt["timeouts"] == 0 and pt["reconnects"] == 0
            assert pt["errors"] == (0 if ok else pt["completed"]), pt


def test_keepalive_timeout(build_dir, site):
    """An idle keep-alive connection is closed after --keepalive-timeout; one that keeps
    asking is not. (The busy one asks every 0.2 s against a 2 s timeout: only a stall of
    the test itself near 2 s could fail it.)"""
    with serving(build_dir, site, "--keepalive-timeout", "2") as port:
        busy = socket.create_connection((HOST, port), 10)
        idle = socket.create_connection((HOST, port), 10)
        idle.sendall(b"GET /100.bin HTTP/1.1\r\nHost: h\r\n\r\n")
        st, _, body = read_response(idle.makefile("rb"))
        assert st == 200 and len(body) == 100
        t0 = time.time()
        bf = busy.makefile("rb")
        while time.time() - t0 < 4:          # the busy one asks every 0.2 s meanwhile
            busy.sendall(b"GET /100.bin HTTP/1.1\r\nHost: h\r\n\r\n")
            assert read_response(bf)[0] == 200
            time.sleep(0.2)
        idle.settimeout(30)
        assert idle.recv(100) == b"", "the idle connection was not closed"
        busy.sendall(b"GET /100.bin HTTP/1.1\r\nHost: h\r\n\r\n")
        assert read_response(bf)[0] == 200
        busy.close()
        idle.close()


def test_send_timeout(build_dir, site):
    """A client that asks for 20 MB and stops reading is reset after --send-timeout, and
    the server goes on serving others. (The server resets it about 2 s after the output
    stops; the test waits 8 s before it reads, as reading would move the output.)"""
    with serving(build_dir, site, "--send-timeout", "1") as port:
        stuck = socket.create_connection((HOST, port), 10)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        stuck.sendall(b"GET /1m.bin HTTP/1.1\r\nHost: h\r\n\r\n" * 20)
        time.sleep(8)                          # not reading: the output stops moving
        got, reset = 0, False
        stuck.settimeout(30)
        try:
            while True:
                b = stuck.recv(1 << 20)
                if not b:
                    break
                got += len(b)
        except (ConnectionResetError, socket.timeout) as e:
            reset = isinstance(e, ConnectionResetError)
        assert reset and got < 20 << 20, (reset, got)
        r = subprocess.run(["curl", "-s", "-f", "-o", "/dev/null", "-w", "%{size_download}",
                            f"http://{HOST}:{port}/1m.bin"], capture_output=True, text=True, timeout=30)
        assert r.stdout == str(1 << 20)


def test_command_line(build_dir, site, tmp_path):
    exe = build_dir / "apps" / "web" / "fp-web"
    r = run([exe, "--root", site, "--check"])
    assert r.returncode == 0 and "8 files" in r.stdout and "1 entries skipped" in r.stdout, r.stdout
    r = run([exe, "--root", tmp_path / "absent"])
    assert r.returncode == 1 and r.stderr.startswith("fp-web: the root") and "No such file" in r.stderr
    r = run([exe, "--root", site, "--max-bytes", "100k"])
    assert r.returncode == 1 and "--max-bytes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run([exe])
    assert r.returncode == 2 and "--root DIR is required" in r.stderr
    r = run([exe, "--root", site, "--port", "0"])
    assert r.returncode == 2 and "--port '0'" in r.stderr
    r = run([exe, "--root", site, "--keepalive-timeout", "5m"])
    assert r.returncode == 2 and "want seconds" in r.stderr
    r = run([exe, "--help"])
    assert r.returncode == 0 and "--root DIR" in r.stdout and "runtime options" in r.stdout


sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402

TAG = f"fpw{os.getpid() % 10000}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, AF_XDP)")
def test_xdp_files_with_curl(build_dir, site):
    """On flowplane's own stack: every byte arrives (the client checks each segment's
    checksum, and the bodies' come from the sums precomputed at start, which the
    counter shows were used), and big files go by reference (fp_evl_write_ref)."""
    stats = f"webtest{os.getpid()}"
    with Topo(TAG) as t:
        p = t.popen(t.srv_ns, [build_dir / "apps" / "web" / "fp-web", "--root", site,
                               "--if", t.srv_if, "--ip", f"{t.fp_srv_ip}/24", "--stats", stats], cpu=0)
        try:
            for name in ["1m.bin", "100.bin", "64k.bin"]:
                for _ in range(50):
                    r = t.sh(t.cli_ns, "curl", "-s", "-f", "-o", "/dev/null",
                             f"http://{t.fp_srv_ip}/{name}", check=False, timeout=60)
                    if r.returncode == 0:
                        break
                    assert p.poll() is None, p.stderr.read()
                    time.sleep(0.2)
                got = subprocess.run(t.cmd(t.cli_ns, ["curl", "-s", "-f", f"http://{t.fp_srv_ip}/{name}"]),
                                     capture_output=True, timeout=60).stdout
                assert got == (site / name).read_bytes(), name
            tot = json.loads(subprocess.run([build_dir / "tools" / "fp-stats", "--name", stats,
                                             "--totals"], capture_output=True, text=True,
                                            check=True).stdout)
            presummed = sum(w["net"]["tcp_tx_presummed"] for w in tot["workers"])
            # counters are published about every ms: the first 1 MB is surely in them
            assert presummed >= (site / "1m.bin").stat().st_size
        finally:
            p.send_signal(signal.SIGINT)
            p.wait(10)
        assert p.returncode == 0, p.stderr.read()
