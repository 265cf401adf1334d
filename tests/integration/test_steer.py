"""Flow groups on a veth (rt/steer.c): several xdp workers on one address.

A veth has no RSS: a frame arrives on the rx queue its sender's tx queue names, and a Linux
client's socket picks its tx queue by its own hash. So each worker hashes what it receives
(the symmetric Toeplitz hash of the 4-tuple, 128 groups, a table of groups to workers) and
hands a frame of another worker's group to that worker. These tests check that every byte
still arrives, in order, on every connection; that the counters say where frames went; that
--steer-weights moves every group to one worker; and that fp-loadgen, choosing source
ports whose group is its own worker's, needs no hand-over at all.

Needs root (netns, veth with 2 queues, AF_XDP); builds its own topology and removes it.
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from netns import Topo  # noqa: E402
from test_dataplane import BULK, ECHO_SIZES, client_py  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, AF_XDP)")

PORT = 7
TAG = f"fps{os.getpid() % 10000}"


@pytest.fixture(scope="module")
def topo():
    t = Topo(TAG, queues=2)
    t.up()
    try:
        yield t
    finally:
        t.down()


class Server:
    """fp-echo on xdp with two workers; stopped with SIGINT, its stderr kept."""

    def __init__(self, topo, build_dir, *extra, stats="s", udp=True):
        self.topo, self.build_dir, self.stats = topo, build_dir, f"{TAG}-{stats}"
        exe = build_dir / "apps" / "echo" / "fp-echo"
        self.p = topo.popen(topo.srv_ns, [exe, "server", "--port", PORT,
                                          *(["--udp"] if udp else []), "--if",
                                          topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24",
                                          "--workers", "2", "--cores", "0,1", "--stats",
                                          self.stats, *extra])
        self.err = ""

    def __enter__(self):
        deadline = time.time() + 15
        code = ("import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 1);"
                " s.close()")
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise AssertionError(f"server exited {self.p.returncode}: {self.p.stderr.read()}")
            r = self.topo.sh(self.topo.cli_ns, sys.executable, "-c", code, self.topo.fp_srv_ip,
                             str(PORT), check=False)
            if r.returncode == 0:
                return self
            time.sleep(0.2)
        raise AssertionError("server did not accept within 15 s")

    def workers(self):
        r = self.topo.sh(self.topo.srv_ns, self.build_dir / "tools" / "fp-stats", "--name",
                         self.stats, "--totals")
        return json.loads(r.stdout.strip().splitlines()[-1])["workers"]

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.send_signal(2)
        try:
            self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.err = self.p.stderr.read()
        if exc[0] is None:
            assert self.p.returncode == 0, self.err


def resets(w):
    """RSTs that ended a connection of this worker's (net/README.md): those answering a
    segment of a connection already gone (a late duplicate after a spurious
    retransmission, say) are ordinary TCP."""
    return w["net"]["tcp_rst_tx"] - w["net"].get("tcp_rst_answer", 0)


def test_kernel_clients_every_byte(topo, build_dir):
    """40 Linux connections, 4 MB each way in all, SHA-256 checked: the frames that land
    on the wrong worker's queue are handed over, and nothing is lost or reordered."""
    with Server(topo, build_dir) as srv:
        assert client_py(topo, BULK, topo.fp_srv_ip, PORT, 40, 4_000_000).startswith("ok")
        assert client_py(topo, ECHO_SIZES, topo.fp_srv_ip, PORT).strip() == "ok"
        time.sleep(0.1)   # counters are published every millisecond
        ws = srv.workers()
    out = sum(w["steer_out"] for w in ws)
    assert out > 0, ws                       # 40 sockets all hashed home: 2^-40
    assert sum(w["steer_in"] for w in ws) == out
    assert sum(w["steer_drop"] for w in ws) == 0
    assert "handed over" in srv.err and "steer:" in srv.err
    # a veth has no RSS table: the startup line says the groups are steered in software
    assert "steered in software, not by the NIC: it has no RSS table" in srv.err, srv.err


def test_weights_put_every_group_on_one_worker(topo, build_dir):
    """--steer-weights 0,1: worker 0 owns no group, so it never holds a connection and
    hands over every TCP/UDP frame it receives; echo (TCP and UDP) still works."""
    with Server(topo, build_dir, "--steer-weights", "0,1", stats="w") as srv:
        assert client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 1_000_000).startswith("ok")
        assert client_py(topo, ECHO_SIZES, topo.fp_srv_ip, PORT).strip() == "ok"
        time.sleep(0.1)
        ws = srv.workers()
    assert ws[0]["net"]["tcp_accepted"] == 0 and ws[0]["net"]["tcp_rx_segs"] == 0, ws[0]
    assert ws[1]["net"]["tcp_accepted"] >= 17 and ws[0]["steer_in"] == 0, ws
    assert ws[1]["steer_out"] == 0 and ws[1]["steer_in"] == ws[0]["steer_out"]
    # 16 sockets' tx queues: some chose queue 0, so worker 0 handed frames over
    assert ws[0]["steer_out"] > 0, ws


def test_steer_queue_hands_nothing_over(topo, build_dir):
    """--steer queue: the worker whose queue a frame arrived on handles it (a Linux
    socket keeps its tx queue, so its connection keeps one worker)."""
    with Server(topo, build_dir, "--steer", "queue", stats="q") as srv:
        assert client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 1_000_000).startswith("ok")
        time.sleep(0.1)
        ws = srv.workers()
    assert all(w["steer_out"] == w["steer_in"] == 0 for w in ws), ws
    assert "steer:" not in srv.err


def test_loadgen_ports_come_home(topo, build_dir, tmp_path):
    """fp-loadgen on xdp with two workers picks source ports whose group is its own
    worker's and sends on that worker's queue: the server's worker of the same number
    owns the flow, so neither side hands a data frame over."""
    lg = build_dir / "apps" / "loadgen" / "fp-loadgen"
    out = tmp_path / "lg.json"
    # both sides sleep when idle: four polling workers on two cores would starve each other
    with Server(topo, build_dir, stats="l") as srv:
        time.sleep(0.1)
        before = sum(w["steer_out"] for w in srv.workers())   # the readiness probe's
        r = topo.sh(topo.cli_ns, lg, "--server", f"{topo.fp_srv_ip}:{PORT}", "--proto", "echo",
                    "--rate", "2k", "--duration", "1", "--warmup", "0.3", "--conns", "16",
                    "--if", topo.cli_if, "--ip", f"{topo.fp_cli_ip}/24", "--workers", "2",
                    "--cores", "0,1", "--idle", "sleep", "--max-slip-us", "100000", "--timeout", "30000",
                    "--stats", "none", "--json", out, check=False, timeout=120)
        assert r.returncode == 0, r.stderr
        time.sleep(0.1)
        ws = srv.workers()
    (p,) = json.loads(out.read_text())["points"]
    assert p["errors"] == 0 and p["completed"] == p["scheduled"] > 0, p
    assert all(w["net"]["tcp_accepted"] > 0 for w in ws), ws   # both workers own flows
    # ARP is the one thing shared on purpose; every TCP frame arrived at home
    assert sum(w["steer_out"] for w in ws) == before, ws
    assert "steer: 0 of" in r.stderr, r.stderr


def test_bad_weights_one_line(topo, build_dir):
    exe = build_dir / "apps" / "echo" / "fp-echo"
    r = topo.sh(topo.srv_ns, exe, "server", "--if", topo.srv_if, "--ip",
                f"{topo.fp_srv_ip}/24", "--workers", "2", "--steer-weights", "1,1,1",
                "--stats", "none", check=False)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--steer-weights lists 3 weights for 2 workers" in lines[0], lines
    # --park-prio: only for workers fp-ctl can park
    r = topo.sh(topo.srv_ns, exe, "server", "--if", topo.srv_if, "--ip",
                f"{topo.fp_srv_ip}/24", "--workers", "1", "--park-prio", "1", "--stats", "none",
                check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "--park-prio is for workers" in lines[0], \
        lines
    r = topo.sh(topo.srv_ns, exe, "server", "--if", topo.srv_if, "--ip",
                f"{topo.fp_srv_ip}/24", "--workers", "1", "--park-queue", "keep", "--stats",
                "none", check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "--park-queue is for workers" in lines[0], \
        lines
    # --nic-steer on: the NIC must take the table (a veth cannot), and only flow groups ask
    for workers, says in (("2", f"--nic-steer on: {topo.srv_if} cannot steer the flow groups: "
                                "it has no RSS table to set"),
                          ("1", "--nic-steer on programs the NIC for flow groups")):
        r = topo.sh(topo.srv_ns, exe, "server", "--if", topo.srv_if, "--ip",
                    f"{topo.fp_srv_ip}/24", "--workers", workers, "--nic-steer", "on",
                    "--stats", "none", check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1 and says in lines[0], lines
    # a misspelt interface is named as such, not as one that cannot steer
    r = topo.sh(topo.srv_ns, exe, "server", "--if", topo.srv_if + "x", "--ip",
                f"{topo.fp_srv_ip}/24", "--workers", "2", "--nic-steer", "on", "--stats",
                "none", check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, lines
    assert "cannot steer" not in lines[0] and topo.srv_if + "x" in lines[0], lines


def test_watch_shows_the_clients_p99(topo, build_dir, tmp_path):
    """fp-ctl watch --client FILE follows fp-loadgen's stderr as it is written and shows the
    p99 of its last point beside the run's own metrics; a file it cannot open is one line."""
    lg = build_dir / "apps" / "loadgen" / "fp-loadgen"
    log = tmp_path / "lg.err"
    with Server(topo, build_dir, stats="wc") as srv:
        r = fp_ctl(build_dir, "watch", srv.stats, 1, "--client", tmp_path / "none")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "--client" in r.stderr and "No such file" in r.stderr, r.stderr
        with open(log, "w") as err:
            p = topo.popen(topo.cli_ns, [lg, "--server", f"{topo.fp_srv_ip}:{PORT}", "--proto",
                                         "echo", "--rates", "500,1000,1500,2000",
                                         "--duration", "1", "--warmup", "0.2", "--conns", "4",
                                         "--stats", "none"], stderr=err)
            try:
                wait_for(lambda: "fp-loadgen: point" in log.read_text(),
                         "fp-loadgen's first point", 60)
                out = fp_ctl(build_dir, "watch", srv.stats, 3, "--client", log).stdout
                # fp-ctl run --client: the same p99 in every line of its log
                r = fp_ctl(build_dir, "run", srv.stats, "--seconds", "0.5", "--quiet", "--log",
                           tmp_path / "run.jsonl", "--client", log)
                assert r.returncode == 0, r.stderr
            finally:
                assert p.wait(60) == 0, log.read_text()
    alls = [l for l in out.splitlines() if l.split()[0] == "all"]
    assert len(alls) == 3, out
    seen = [re.search(r"clients' p99 ([0-9.]+) us \(fp-loadgen point (\d)/4\)", l) for l in alls]
    assert all(seen) and all(float(m.group(1)) > 0 for m in seen), alls
    ticks = [json.loads(l) for l in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert len(ticks) >= 3 and all(t["client_p99_us"] > 0 and 1 <= t["client_point"] <= 4
                                   for t in ticks), ticks
    # --client without --log has nowhere to go: one line, bad arguments
    r = fp_ctl(build_dir, "run", "nosuch", "--client", log)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "give --log FILE too" in r.stderr, r.stderr


def test_spare_queues_are_polled(topo, build_dir):
    """An interface with more queues than workers: the spare queues are polled too (a Linux
    sender picks any of them), so 16 Linux streams arrive whole with one worker on the
    two-queue veth, and with two workers on a four-queue one; --steer queue, which cannot
    send a frame to its worker, refuses such an interface in one line."""
    with Server(topo, build_dir, "--workers", "1", "--cores", "0", stats="sq1") as srv:
        out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 8_000_000)
        assert out.startswith("ok"), out
        ws = srv.workers()
    assert "1 more queue polled by the workers" in srv.err, srv.err
    assert resets(ws[0]) == 0, ws
    with Topo(f"{TAG[:5]}q4", queues=4) as t4:
        with Server(t4, build_dir, stats="sq4") as srv:
            out = client_py(t4, BULK, t4.fp_srv_ip, PORT, 16, 8_000_000)
            assert out.startswith("ok"), out
            ws = srv.workers()
        assert "2 more queues polled by the workers" in srv.err, srv.err
        assert all(resets(w) == 0 for w in ws), ws
        exe = build_dir / "apps" / "echo" / "fp-echo"
        r = t4.sh(t4.srv_ns, exe, "server", "--if", t4.srv_if, "--ip", f"{t4.fp_srv_ip}/24",
                  "--workers", "2", "--steer", "queue", "--stats", "none", check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1, lines
        assert "has 4 queues and --steer queue has 2 workers" in lines[0], lines


# ---- flow-group migration (fp-ctl move) ----

SPIN_CLIENT = r"""
import socket, struct, sys, threading
addr, port, conns, reqs, again = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                  int(sys.argv[4]), int(sys.argv[5]))
MAGIC = 0x4e495053
bad, done = [], [0]
def expect(i, k):   # a request's length names it: a lost, repeated or reordered reply shows
    return 16 + (k * 7 + i) % 997
def one(i):
    for _ in range(again):   # one connection after another: opens and closes race the moves
        s = socket.create_connection((addr, port), 5)
        s.settimeout(60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = got = 0
        buf = b""
        try:
            while got < reqs:
                while sent < reqs and sent - got < 8:
                    n = expect(i, sent)
                    s.sendall(struct.pack("<IIQ", MAGIC, n, 0) + bytes(n - 16))
                    sent += 1
                while len(buf) < 16:
                    c = s.recv(4096)
                    if not c:
                        raise EOFError("closed early")
                    buf += c
                m, n, ns = struct.unpack("<IIQ", buf[:16])
                buf = buf[16:]
                if m != MAGIC or n != expect(i, got) or ns:
                    bad.append((i, got, n))
                    return
                got += 1
            s.close()
            done[0] += 1
        except Exception as e:
            bad.append((i, got, repr(e)))
            return
ts = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
[t.start() for t in ts]
[t.join() for t in ts]
print("ok" if not bad and done[0] == conns * again else f"bad {bad[:5]} done {done[0]}")
"""


def fp_ctl(build_dir, *args):
    return subprocess.run([str(build_dir / "ctl" / "fp-ctl"), *map(str, args)],
                          capture_output=True, text=True, timeout=30)


def move_while_running(build_dir, name, proc):
    """fp-ctl move each group in turn to the other of two workers while @proc runs: the
    moves made, the refusals, and each group's owner after."""
    owner = [g % 2 for g in range(128)]
    moves, refused, g = 0, [], 0
    while proc.poll() is None:
        r = fp_ctl(build_dir, "move", name, g, 1 - owner[g])
        if r.returncode == 0:
            owner[g] = 1 - owner[g]
            moves += 1
            assert "moved to worker" in r.stdout
        else:
            refused.append(r.stderr)
        g = (g + 1) % 128
    return moves, refused, owner


def test_groups_move_under_load(topo, build_dir):
    """fp-ctl moves flow groups back and forth between the two workers, every group in
    turn, while 16 Linux clients each open 10 connections one after another and run 1500
    pipelined spin requests on each: every reply comes back, in order (each request's
    length names it), nothing is reset or dropped, connections moved with their groups
    (IX's flow-group migration), and opening and closing connections raced the moves."""
    exe = build_dir / "apps" / "echo" / "fp-echo"
    name = f"{TAG}-mv"
    p = topo.popen(topo.srv_ns, [exe, "spin", "--native", "--port", PORT, "--if", topo.srv_if,
                                 "--ip", f"{topo.fp_srv_ip}/24", "--workers", "2", "--cores",
                                 "0,1", "--stats", name])
    try:
        time.sleep(1)
        cli = topo.popen(topo.cli_ns, [sys.executable, "-c", SPIN_CLIENT, topo.fp_srv_ip, PORT,
                                       16, 1500, 10])
        moves, refused, owner = move_while_running(build_dir, name, cli)
        out, err = cli.communicate(timeout=120)
        assert out.strip() == "ok", (out, err)
        r = topo.sh(topo.srv_ns, build_dir / "tools" / "fp-stats", "--name", name, "--totals")
        ws = json.loads(r.stdout.strip().splitlines()[-1])["workers"]
        groups = fp_ctl(build_dir, "groups", name).stdout
        watch = fp_ctl(build_dir, "watch", name, 2, "--power", pathlib.Path(__file__).resolve()
                       .parents[2] / "bench" / "power" / "xeon-e5-2665.txt").stdout
    finally:
        p.send_signal(2)
        _, serr = p.communicate(timeout=20)
    assert p.returncode == 0, serr
    print(f"moves {moves}, conns moved {sum(w['move_conns'] for w in ws)}, held "
          f"{sum(w['move_held'] for w in ws)}, forwarded {sum(w['move_forwarded'] for w in ws)}, "
          f"longest {max(w['move_ns_max'] for w in ws) / 1e3:.0f} us")
    assert moves > 0 and not refused, refused[:3]
    assert sum(w["moves_in"] for w in ws) == sum(w["moves_out"] for w in ws) == moves
    assert sum(w["move_conns"] for w in ws) > 0, ws        # some moves took connections
    assert all(w["steer_drop"] == 0 and resets(w) == 0 for w in ws), ws
    # IX's metrics were published all along, and fp-ctl watch shows both workers
    assert all(w["ctl"]["intervals"] > 0 and w["ctl"]["idle_ppm"] <= 1000000 for w in ws), ws
    assert len([l for l in watch.splitlines() if l.split()[0] in ("0", "1")]) == 4, watch
    # and a line for both: workers polling, the load, the modelled watts (no RAPL here)
    alls = [l for l in watch.splitlines() if l.split()[0] == "all"]
    assert len(alls) == 2 and all("2 of 2 polling" in l and "W modelled" in l for l in alls), watch
    # the table fp-ctl shows is the one the moves made
    for w in (0, 1):
        line = next(l for l in groups.splitlines() if l.startswith(f"worker {w}:"))
        assert f"({owner.count(w)} groups)" in line, (line, owner.count(w))


def test_echo_server_streams_survive_moves(topo, build_dir):
    """The event-callback layer moves its connections too (fp-echo server is movable):
    24 Linux connections stream 160 MB in all through fp-echo server, SHA-256 checked,
    while fp-ctl moves every group back and forth; output queued, held input and
    backpressure move with the connection."""
    import threading

    with Server(topo, build_dir, stats="evm") as srv:
        owner = [g % 2 for g in range(128)]
        stop, moved, refused = threading.Event(), [0], []

        def mover():
            g = 0
            while not stop.is_set():
                r = fp_ctl(build_dir, "move", srv.stats, g, 1 - owner[g])
                if r.returncode == 0:
                    owner[g] = 1 - owner[g]
                    moved[0] += 1
                else:
                    refused.append(r.stderr)
                g = (g + 1) % 128

        t = threading.Thread(target=mover)
        t.start()
        try:
            out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 24, 160_000_000)
        finally:
            stop.set()
            t.join()
        assert out.startswith("ok"), out
        time.sleep(0.1)
        ws = srv.workers()
    print(f"moves {moved[0]}, conns moved {sum(w['move_conns'] for w in ws)}, hand-over drops "
          f"{sum(w['steer_drop'] for w in ws)}")
    assert moved[0] > 0 and not refused, refused[:3]
    assert sum(w["move_conns"] for w in ws) > 0, ws
    # a full hand-over ring drops (counted; TCP repairs it, the digests above prove it);
    # a reset would mean a frame reached a worker its connection had left
    assert all(resets(w) == 0 for w in ws), " / ".join(
        str({k: v for k, v in [*w["net"].items(), *w.items()] if k.startswith(("tcp", "move",
                                                                               "steer"))
             and isinstance(v, int) and v}) for w in ws)


KV_CLIENT = r"""
import socket, sys, threading
addr, port, conns, reqs, again = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                  int(sys.argv[4]), int(sys.argv[5]))
bad, done = [], [0]
def value(i, r, k):   # its own keys, values of 1 byte to 6 kB (several segments)
    n = 1 + (k * 131 + i * 7) % 6000
    return (b"%d.%d.%d:" % (i, r, k) * (n // 6 + 1))[:n]
def one(i):
    for r in range(again):   # one connection after another: opens and closes race the moves
        s = socket.create_connection((addr, port), 5)
        s.settimeout(60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        sent = got = 0
        want = []
        try:
            while got < reqs:
                while sent < reqs and sent - got < 8:   # a pipeline of set, get pairs
                    k, v = b"k%d.%d" % (i, sent % 50), value(i, r, sent)
                    s.sendall(b"set %s 7 0 %d\r\n%s\r\nget %s\r\n" % (k, len(v), v, k))
                    want.append((k, v))
                    sent += 1
                k, v = want[got]
                a = f.readline()
                b = f.readline()
                data = f.read(len(v) + 2)
                end = f.readline()
                if (a, b, data, end) != (b"STORED\r\n", b"VALUE %s 7 %d\r\n" % (k, len(v)),
                                         v + b"\r\n", b"END\r\n"):
                    bad.append((i, r, got, a, b[:40], data[:20], end))
                    return
                got += 1
            s.close()
            done[0] += 1
        except Exception as e:
            bad.append((i, r, got, repr(e)))
            return
ts = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
[t.start() for t in ts]
[t.join() for t in ts]
print("ok" if not bad and done[0] == conns * again else f"bad {bad[:5]} done {done[0]}")
"""


def kv_stats(topo, port=11211):
    code = ("import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 5);"
            "s.sendall(b'stats\\r\\n'); b=b''\n"
            "while not b.endswith(b'END\\r\\n'): b+=s.recv(65536)\n"
            "print(b.decode())")
    out = topo.sh(topo.cli_ns, sys.executable, "-c", code, topo.fp_srv_ip, str(port)).stdout
    return {l.split()[1]: l.split()[2] for l in out.splitlines() if l.startswith("STAT ")}


def test_kv_connections_move_with_their_groups(topo, build_dir):
    """fp-kv is movable (issue 18): fp-ctl moves every flow group back and forth while 12
    Linux clients each open 6 connections one after another and pipeline 1500 set/get pairs
    on each, values up to 6 kB (arriving in several segments, so a value half arrived moves
    too): every answer is the one expected, nothing is reset, connections moved, and the
    per-worker connection counts still add up (stats curr_connections: our one)."""
    kv = build_dir / "apps" / "kv" / "fp-kv"
    name = f"{TAG}-kvm"
    p = topo.popen(topo.srv_ns, [kv, "-p", 11211, "--if", topo.srv_if, "--ip",
                                 f"{topo.fp_srv_ip}/24", "--workers", 2, "--cores", "0,1",
                                 "--stats", name])
    try:
        deadline = time.time() + 15
        while fp_ctl(build_dir, "groups", name).returncode and time.time() < deadline:
            time.sleep(0.2)
        cli = topo.popen(topo.cli_ns, [sys.executable, "-c", KV_CLIENT, topo.fp_srv_ip,
                                       11211, 12, 1500, 6])
        moves, refused, _ = move_while_running(build_dir, name, cli)
        out, err = cli.communicate(timeout=120)
        assert out.strip() == "ok", (out, err)
        st = kv_stats(topo)
        r = topo.sh(topo.srv_ns, build_dir / "tools" / "fp-stats", "--name", name, "--totals")
        ws = json.loads(r.stdout.strip().splitlines()[-1])["workers"]
    finally:
        p.send_signal(2)
        _, serr = p.communicate(timeout=20)
    assert p.returncode == 0, serr
    print(f"moves {moves}, conns moved {sum(w['move_conns'] for w in ws)}, "
          f"longest {max(w['move_ns_max'] for w in ws) / 1e3:.0f} us")
    assert moves > 0 and not refused, refused[:3]
    assert sum(w["move_conns"] for w in ws) > 0, ws
    assert all(resets(w) == 0 for w in ws), ws
    assert st["curr_connections"] == "1" and st["total_connections"] == str(12 * 6 + 1), st
    assert int(st["cmd_get"]) == int(st["get_hits"]) == 12 * 6 * 1500, st


def test_fp_ctl_refusals(topo, build_dir):
    """What fp-ctl cannot do is refused with one line saying why, and a status."""
    assert fp_ctl(build_dir, "move", "nosuchrun", 1, 0).returncode == 1
    assert fp_ctl(build_dir, "move", "x", 128, 0).returncode == 2
    assert fp_ctl(build_dir, "bogus").returncode == 2
    assert fp_ctl(build_dir, "--help").returncode == 0
    # fp-kv --style threads (a user-level thread per connection, on its worker's stack):
    # its flows cannot change worker, refused
    kv = build_dir / "apps" / "kv" / "fp-kv"
    p = topo.popen(topo.srv_ns, [kv, "-p", 11211, "--style", "threads", "--if", topo.srv_if,
                                 "--ip", f"{topo.fp_srv_ip}/24", "--workers", 2, "--cores",
                                 "0,1", "--stats", f"{TAG}-kv"])
    try:
        deadline = time.time() + 15
        while fp_ctl(build_dir, "groups", f"{TAG}-kv").returncode and time.time() < deadline:
            time.sleep(0.2)
        r = fp_ctl(build_dir, "move", f"{TAG}-kv", 3, 0)
        assert r.returncode == 1 and "cannot change worker" in r.stderr, r.stderr
        r = fp_ctl(build_dir, "groups", f"{TAG}-kv")
        assert r.returncode == 0 and "worker 1: 1 3 5" in r.stdout, r.stdout
        # the channel itself: an unknown op, a group and a worker out of range
        for op, a0, a1 in ((99, 0, 0), (1, 200, 0), (1, 3, 7)):
            r = fp_ctl(build_dir, "cmd", f"{TAG}-kv", op, a0, a1)
            assert r.returncode == 1 and "result -" in r.stdout, (op, a0, a1, r.stdout)
        r = fp_ctl(build_dir, "cmd", f"{TAG}-kv", 99, 0, 0)
        assert "rejected 5" in r.stdout, r.stdout   # one move and three commands above
    finally:
        p.send_signal(2)
        p.communicate(timeout=20)
    # --steer queue: no flow groups
    with Server(topo, build_dir, "--steer", "queue", stats="rq") as srv:
        r = fp_ctl(build_dir, "move", srv.stats, 3, 0)
        assert r.returncode == 1 and "no flow groups" in r.stderr, r.stderr
        assert fp_ctl(build_dir, "groups", srv.stats).returncode == 1


# ---- parking workers and the control loop (issue 18, step 2) ----

def worker_stat(srv, w, key):
    return srv.workers()[w][key]


def wait_for(pred, what, limit_s=10):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {limit_s} s: {what}")


def test_park_gives_the_core_back(topo, build_dir):
    """Under --idle poll a worker never sleeps; parked (after its groups moved away) it
    does, and frames its queue still receives are handed over: Linux clients' streams
    arrive whole. A worker that owns groups, the last one polling, a move to a parked
    worker: refused, each with its reason."""
    with Server(topo, build_dir, "--idle", "poll", stats="pk") as srv:
        r = fp_ctl(build_dir, "park", srv.stats, 1)
        assert r.returncode == 1 and "still owns flow groups" in r.stderr, r.stderr
        assert fp_ctl(build_dir, "unpark", srv.stats, 1).stderr.count("not parked") == 1
        assert fp_ctl(build_dir, "park", srv.stats, 5).returncode == 1
        assert fp_ctl(build_dir, "park", srv.stats, "x").returncode == 2
        # SET_TABLE (op 4) with the segment's want[] as a new run has it, all zeros: every
        # group to worker 0, in one command
        r = fp_ctl(build_dir, "cmd", srv.stats, 4, 0, 0)
        assert r.returncode == 0, r.stdout
        wait_for(lambda: "worker 1: -  (0 groups)" in fp_ctl(build_dir, "groups",
                                                             srv.stats).stdout,
                 "the table applied")
        assert worker_stat(srv, 1, "sleeps") == 0          # polling: never asleep
        r = fp_ctl(build_dir, "park", srv.stats, 1)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: worker_stat(srv, 1, "parked") == 1, "worker 1 says it is parked")
        assert "(0 groups) parked" in fp_ctl(build_dir, "groups", srv.stats).stdout
        r = fp_ctl(build_dir, "park", srv.stats, 0)
        assert r.returncode == 1 and "last worker polling" in r.stderr, r.stderr
        r = fp_ctl(build_dir, "move", srv.stats, 3, 1)
        assert r.returncode == 1 and "parked: unpark it first" in r.stderr, r.stderr
        out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 16_000_000)
        assert out.startswith("ok"), out
        # asleep (it wakes at least once a second, and counts it then)
        wait_for(lambda: worker_stat(srv, 1, "sleeps") > 0, "worker 1 slept", 30)
        ws = srv.workers()
        assert ws[1]["parks"] == 1, ws[1]
        assert ws[0]["sleeps"] == 0, ws[0]                 # still polling
        # its queue is lent to worker 0, which polls it (16 sockets all on queue 0: 2^-16)
        assert ws[1]["q_lent"] == 1 and ws[0]["q_adopted"] == 1, (ws[0], ws[1])
        assert ws[0]["adopt_rx"] > 0, ws[0]
        assert fp_ctl(build_dir, "unpark", srv.stats, 1).returncode == 0
        wait_for(lambda: worker_stat(srv, 1, "parked") == 0, "worker 1 unparked")
        assert fp_ctl(build_dir, "move", srv.stats, 3, 1).returncode == 0
        assert worker_stat(srv, 1, "parked_ns") > 0


def test_parked_worker_lends_its_queue(topo, build_dir):
    """A parked worker's queue is polled by the worker still polling (--park-queue lend,
    the default): Linux streams whose frames land on that queue arrive whole while the
    parked one sleeps through them (it runs a handful of rounds, not one per burst as
    with --park-queue keep); unparked, it gets its queue back, and a group moved to it
    is served from there. No reset anywhere."""
    def rounds_while_streaming(srv):
        before = srv.workers()
        out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 16_000_000)
        assert out.startswith("ok"), out
        after = srv.workers()
        return after, after[1]["iterations"] - before[1]["iterations"]

    for how in ("lend", "keep"):
        with Server(topo, build_dir, "--park-queue", how, stats=f"pq{how}") as srv:
            assert fp_ctl(build_dir, "cmd", srv.stats, 4, 0, 0).returncode == 0
            wait_for(lambda: "worker 1: -  (0 groups)" in fp_ctl(build_dir, "groups",
                                                                 srv.stats).stdout,
                     "the table applied", 30)
            r = fp_ctl(build_dir, "park", srv.stats, 1)
            assert r.returncode == 0, r.stderr
            wait_for(lambda: worker_stat(srv, 1, "parked") == 1, "worker 1 parked", 30)
            if how == "keep":
                out0 = worker_stat(srv, 1, "steer_out")
                ws, rounds = rounds_while_streaming(srv)
                assert ws[1]["q_lent"] == 0 and ws[0]["q_adopted"] == 0, (ws[0], ws[1])
                # it woke for what its queue received and handed it over itself
                assert rounds > 0 and ws[1]["steer_out"] > out0, (rounds, ws[1])
                continue
            wait_for(lambda: worker_stat(srv, 0, "q_adopted") == 1, "worker 0 holds queue 1",
                     30)
            wait_for(lambda: worker_stat(srv, 1, "q_lent") == 1, "worker 1 says it lent it",
                     30)   # it publishes when it wakes: at least every second
            ws, rounds = rounds_while_streaming(srv)
            assert ws[1]["q_lends"] == 1, ws[1]
            assert ws[0]["adopt_rx"] > 0, ws[0]   # 16 sockets all on queue 0: 2^-16
            assert rounds * 10 < ws[0]["adopt_rx"], (rounds, ws[0]["adopt_rx"])
            assert fp_ctl(build_dir, "unpark", srv.stats, 1).returncode == 0
            wait_for(lambda: worker_stat(srv, 1, "q_back") == 1, "queue 1 home", 30)
            assert worker_stat(srv, 1, "q_lent") == 0
            r = fp_ctl(build_dir, "move", srv.stats, 3, 1)
            assert r.returncode == 0, r.stderr
            ws, _ = rounds_while_streaming(srv)
        assert all(resets(w) == 0 for w in ws), ws


def test_lending_survives_park_churn(topo, build_dir):
    """Worker 1 parked and unparked 30 times while rounds of 16 Linux streams run (its queue
    lent and brought home each time, a group moved to it and back between): every stream
    whole, no reset, and as many lends as returns."""
    import threading

    with Server(topo, build_dir, stats="pc") as srv:
        assert fp_ctl(build_dir, "cmd", srv.stats, 4, 0, 0).returncode == 0
        wait_for(lambda: "worker 1: -  (0 groups)" in fp_ctl(build_dir, "groups",
                                                             srv.stats).stdout,
                 "the table applied", 30)
        outs, stop = [], threading.Event()

        def streams():
            while not stop.is_set():
                outs.append(client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 8_000_000))

        cli = threading.Thread(target=streams)
        cli.start()
        cycles = 0
        try:
            while cycles < 30:
                assert fp_ctl(build_dir, "park", srv.stats, 1).returncode == 0
                wait_for(lambda: worker_stat(srv, 0, "q_adopted") == cycles + 1,
                         "worker 0 took queue 1", 30)
                assert fp_ctl(build_dir, "unpark", srv.stats, 1).returncode == 0
                wait_for(lambda: worker_stat(srv, 1, "q_back") == cycles + 1,
                         "queue 1 back home", 30)
                for g, to in ((5, 1), (5, 0)):   # busy while its queue was on its way
                    deadline = time.time() + 30
                    while (r := fp_ctl(build_dir, "move", srv.stats, g, to)).returncode:
                        assert "busy" in r.stderr and time.time() < deadline, r.stderr
                        time.sleep(0.05)
                cycles += 1
        finally:
            stop.set()
            cli.join(180)
        ws = srv.workers()
    assert outs and all(o.startswith("ok") for o in outs), outs
    print(f"{cycles} park cycles, {len(outs)} rounds of 16 streams")
    assert ws[1]["q_lends"] == ws[1]["q_back"] == ws[0]["q_adopted"] == cycles, (ws[0], ws[1])
    said = [{k: v for k, v in w["net"].items() if k.startswith("tcp_") and v} |
            {k: w[k] for k in ("steer_drop", "steer_out", "steer_in", "move_held",
                               "move_forwarded", "moves_in", "moves_out")} for w in ws]
    assert all(resets(w) == 0 and w["steer_drop"] == 0 for w in ws), json.dumps(said)


def ctl_log(path):
    return [json.loads(x) for x in pathlib.Path(path).read_text().splitlines()]


def fifo_threads(pid):
    """The priorities of @pid's threads that run at SCHED_FIFO."""
    prios = []
    for t in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            if os.sched_getscheduler(int(t.name)) == os.SCHED_FIFO:
                prios.append(os.sched_getparam(int(t.name)).sched_priority)
        except OSError:
            pass   # a thread that ended meanwhile
    return prios


def test_parked_worker_sleeps_at_fifo(topo, build_dir):
    """--park-prio 1: a worker parked by fp-ctl sleeps at SCHED_FIFO priority 1 (what its
    queue still receives is handed over ahead of whatever else runs on its core), serves
    Linux clients' streams whole meanwhile, and once unparked polls at its own policy."""
    with Server(topo, build_dir, "--park-prio", "1", stats="pp") as srv:
        pid = srv.p.pid
        assert pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == "fp-echo"
        assert fifo_threads(pid) == []
        assert fp_ctl(build_dir, "cmd", srv.stats, 4, 0, 0).returncode == 0  # all to worker 0
        wait_for(lambda: "worker 1: -  (0 groups)" in fp_ctl(build_dir, "groups",
                                                             srv.stats).stdout,
                 "the table applied", 30)   # a busy box
        r = fp_ctl(build_dir, "park", srv.stats, 1)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: fifo_threads(pid) == [1], "the parked worker at SCHED_FIFO 1", 30)
        out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 8, 8_000_000)
        assert out.startswith("ok"), out
        assert fifo_threads(pid) == [1]
        r = fp_ctl(build_dir, "unpark", srv.stats, 1)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: fifo_threads(pid) == [], "back to its own policy once unparked", 30)
        ws = srv.workers()
    assert ws[1]["parks"] == 1 and ws[1]["parked"] == 0, ws[1]
    assert all(resets(w) == 0 for w in ws)


def test_control_loop_parks_and_unparks(topo, build_dir, tmp_path):
    """fp-ctl run: with no load, the idle signal empties worker 1 and parks it; with
    delay_max_us = 0, the first queueing at all brings it back and spreads the groups over
    both, while 8 Linux connections stream 40 MB through it (every byte checked, no reset).
    The loop ends by itself (--seconds), and says what it did."""
    import threading

    down = tmp_path / "down.policy"
    down.write_text("down_hold_ms = 200\ninterval_ms = 50\n")
    up = tmp_path / "up.policy"
    up.write_text("# any queueing at all adds a worker; never remove one\n"
                  "delay_max_us = 0\nidle_margin = 1\ninterval_ms = 50\n")
    with Server(topo, build_dir, "--idle", "poll", stats="loop") as srv:
        r = subprocess.run([str(build_dir / "ctl" / "fp-ctl"), "run", srv.stats, "--policy",
                            str(down), "--seconds", "3", "--log", str(tmp_path / "down.log")],
                           capture_output=True, text=True, timeout=60)
        print(r.stdout)
        assert r.returncode == 0, r.stderr
        assert "worker 1 parked (emptied)" in r.stdout, r.stdout
        log = ctl_log(tmp_path / "down.log")
        assert log[-1]["polling"] == 1 and log[-1]["workers"][0]["groups"] == 128, log[-1]
        wait_for(lambda: worker_stat(srv, 1, "parked") == 1, "worker 1 parked")

        res = {}
        t = threading.Thread(target=lambda: res.update(
            out=client_py(topo, BULK, topo.fp_srv_ip, PORT, 8, 40_000_000)))
        t.start()
        try:
            r = subprocess.run([str(build_dir / "ctl" / "fp-ctl"), "run", srv.stats,
                                "--policy", str(up), "--seconds", "3", "--log",
                                str(tmp_path / "up.log")],
                               capture_output=True, text=True, timeout=60)
        finally:
            t.join()
        print(r.stdout)
        assert r.returncode == 0, r.stderr
        assert "worker 1 unparked (queueing delay" in r.stdout, r.stdout
        assert res["out"].startswith("ok"), res["out"]
        log = ctl_log(tmp_path / "up.log")
        assert log[-1]["polling"] == 2, log[-1]
        assert [w["groups"] for w in log[-1]["workers"]] == [64, 64], log[-1]
        ws = srv.workers()
        assert all(resets(w) == 0 for w in ws), ws
    # bad policies stop it before it starts, with the line at fault
    bad = tmp_path / "bad.policy"
    bad.write_text("delay_max_us = 300\nspeed = 11\n")
    r = fp_ctl(build_dir, "run", "nosuch", "--policy", bad)
    assert r.returncode == 2 and "line 2: unknown key 'speed'" in r.stderr, r.stderr
    r = fp_ctl(build_dir, "run", "nosuch")
    assert r.returncode == 1 and "no flowplane run" in r.stderr, r.stderr


def proc_status(pid):
    try:
        return dict(line.split(":\t", 1) for line in
                    pathlib.Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    except FileNotFoundError:
        return None


def test_control_loop_batch_job(topo, build_dir, tmp_path):
    """fp-ctl run --batch (IX's consolidation): the batch job runs on the parked worker's
    core only, held there by a cpuset cgroup (or affinity where there is none), is stopped
    while both workers poll, runs again when worker 1 is parked once more, and is ended with
    its cgroup when the loop ends. Every tick's log agrees: one worker polling, the job has
    core 1; two polling, it is stopped."""
    import threading

    pol = tmp_path / "batch.policy"
    pol.write_text("delay_max_us = 0\nidle_margin = 0.3\ninterval_ms = 50\ndown_hold_ms = 1000\n")
    log = tmp_path / "batch.log"
    batch = f"exec {build_dir / 'bench' / 'fp-batch'} 120"
    with Server(topo, build_dir, "--idle", "poll", stats="batch") as srv:
        ctl = subprocess.Popen([str(build_dir / "ctl" / "fp-ctl"), "run", srv.stats, "--policy",
                                str(pol), "--log", str(log), "--batch", batch],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        try:
            first = ctl.stdout.readline()
            lines.append(first)
            lines.append(ctl.stdout.readline())
            said = "".join(lines)
            assert "batch job" in said and "(pid " in said, said
            m = re.search(r"batch job '.*' \(pid (\d+)\) .* held there by (.*?);", said)
            assert m, said
            pid, how = int(m.group(1)), m.group(2)
            # idle: worker 1 is emptied and parked, and the job runs on its core alone
            wait_for(lambda: worker_stat(srv, 1, "parked") == 1, "worker 1 parked", 30)
            wait_for(lambda: (proc_status(pid) or {}).get("Cpus_allowed_list") == "1",
                     "the batch job on core 1", 10)
            assert proc_status(pid)["State"][0] in "RS", proc_status(pid)
            if how.startswith("a cgroup"):
                cg = pathlib.Path(f"/proc/{pid}/cgroup").read_text()
                assert f"fp-batch-{ctl.pid}" in cg, cg
            # load: worker 1 polls again and the job is stopped before it does
            res = {}
            t = threading.Thread(target=lambda: res.update(
                out=client_py(topo, BULK, topo.fp_srv_ip, PORT, 8, 40_000_000)))
            t.start()
            try:
                wait_for(lambda: worker_stat(srv, 1, "parked") == 0, "worker 1 unparked", 30)
                wait_for(lambda: (proc_status(pid) or {}).get("State", " ")[0] == "T",
                         "the batch job stopped", 10)
            finally:
                t.join()
            assert res["out"].startswith("ok"), res["out"]
            # idle again: parked again, the job runs again on core 1
            wait_for(lambda: worker_stat(srv, 1, "parked") == 1, "worker 1 parked again", 30)
            wait_for(lambda: (proc_status(pid) or {}).get("State", "T")[0] in "RS",
                     "the batch job running again", 10)
        finally:
            ctl.send_signal(2)
            out, _ = ctl.communicate(timeout=30)
        lines.append(out)
    said = "".join(lines)
    print(said)
    assert ctl.returncode == 0, said
    assert "batch job:" in said and "s of CPU on spare cores" in said, said
    assert proc_status(pid) is None                     # ended with the loop
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/unified"):
        assert not pathlib.Path(f"{root}/fp-batch-{ctl.pid}").exists()
    ticks = ctl_log(log)
    assert ticks and all("batch_cpus" in x for x in ticks)
    for x in ticks:
        if x["polling"] == 2:
            assert x["batch_stopped"] == 1, x
        elif x["draining"] < 0:
            assert x["batch_cpus"] == "0x2" and x["batch_stopped"] == 0, x
    assert {x["polling"] for x in ticks} == {1, 2}
    # bad uses: one line each
    r = fp_ctl(build_dir, "run", "nosuch", "--batch", "")
    assert r.returncode == 2 and "--batch wants a command" in r.stderr, r.stderr


def test_controller_and_run_lose_each_other(topo, build_dir):
    """A controller killed mid-run leaves the run as it was (a parked worker stays parked,
    clients are served); a run that stops ends the controller's loop, status 0."""
    policy = "down_hold_ms = 100\ninterval_ms = 20\n"
    srv = Server(topo, build_dir, stats="lose")
    with srv:
        pol = pathlib.Path(f"/tmp/{TAG}-lose.policy")
        pol.write_text(policy)
        ctl = subprocess.Popen([str(build_dir / "ctl" / "fp-ctl"), "run", srv.stats,
                                "--policy", str(pol)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        try:
            try:
                wait_for(lambda: worker_stat(srv, 1, "parked") == 1,
                         "the idle run parks worker 1", limit_s=30)   # a busy box
            except AssertionError:
                ctl.kill()
                raise AssertionError(f"worker 1 not parked; the controller said: "
                                     f"{ctl.communicate()[0]}; groups: "
                                     f"{fp_ctl(build_dir, 'groups', srv.stats).stdout}")
            ctl.kill()
            ctl.wait()
            out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 4, 4_000_000)
            assert out.startswith("ok"), out
            assert worker_stat(srv, 1, "parked") == 1
            ctl = subprocess.Popen([str(build_dir / "ctl" / "fp-ctl"), "run", srv.stats,
                                    "--policy", str(pol)], stdout=subprocess.PIPE, text=True)
            time.sleep(0.5)
        finally:
            pol.unlink()
    # the run has stopped (Server's exit): the loop notices and ends
    out, _ = ctl.communicate(timeout=10)
    assert ctl.returncode == 0 and "has stopped; the loop ends" in out, out


def test_threads_server_on_two_workers(topo, build_dir):
    """fp-echo server --threads (a user-level thread per connection, blocking sockets) on
    AF_XDP with two workers and flow groups: 16 Linux connections, 16 MB, every byte
    checked; each worker served some."""
    with Server(topo, build_dir, "--threads", stats="thr", udp=False) as srv:
        out = client_py(topo, BULK, topo.fp_srv_ip, PORT, 16, 16_000_000)
        assert out.startswith("ok"), out
        ws = srv.workers()
    # 16 connections over two workers' groups: both get some (all on one: 2^-15)
    assert all(w["conds"] > 100 for w in ws), [w["conds"] for w in ws]
    assert all(resets(w) == 0 for w in ws), ws
