#!/usr/bin/env python3
"""Clients that ask and never read: what they cost fp-kv and memcached (issue 16, item 1).

Each server (memcached 1.6, fp-kv, and with --before an older fp-kv build; fp-kv on the kernel transport, one worker thread each, -m 64,
-c 4096, on 127.0.0.1) stores one 500 KB value; N clients (default 200 and 600) each send
`get big` 40 times and never read (default receive buffers, as a careless client has). Once
the server's resident memory has settled, one client that reads asks 300 times for a 100-byte
key and 10 times for the big value (each reply within 2 s, all within 30 s, or an error):
their latency, and its errors. Then the non-readers close
and the server's memory is read again. Servers are interleaved (memcached, fp-kv, memcached,
...) for --rounds rounds; the table gives medians with min-max.

    .venv/bin/python bench/nonreaders.py [--rounds 3] [--clients 200,600] [--out DIR]

Writes DIR/nonreaders.json and DIR/nonreaders.md (default results/nonreaders/).
"""
import argparse
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import free_port, rss_kib  # noqa: E402

BIG = 500_000
ASKS = 40
BEFORE = None   # --before


def settle_rss(pid, limit_s=60):
    last, still, deadline = rss_kib(pid), 0, time.time() + limit_s
    while time.time() < deadline and still < 4:
        time.sleep(0.5)
        now = rss_kib(pid)
        still = still + 1 if abs(now - last) < 1024 else 0
        last = now
    return last


def start(kind, build):
    if kind == "fp-kv (before)":
        kind, build = "fp-kv", BEFORE
    port = free_port()
    if kind == "memcached":
        argv = [shutil.which("memcached") or "/usr/bin/memcached", "-l", "127.0.0.1",
                "-U", "0", "-p", str(port), "-m", "64", "-t", "1", "-c", "4096"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
    else:
        argv = [str(build / "apps" / "kv" / "fp-kv"), "--net", "kernel", "-l", "127.0.0.1",
                "-U", "0", "--stats", "none", "-p", str(port), "-m", "64", "-t", "1",
                "-c", "4096"]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            if p.poll() is not None:
                sys.exit(f"nonreaders: {kind} exited: {p.stderr.read().decode()[-400:]}")
            time.sleep(0.05)
    p.kill()
    sys.exit(f"nonreaders: {kind} did not listen on port {port}")


class Client:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def take(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def set(self, key, value):
        self.s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
        return self.line()

    def get(self, key):
        self.s.sendall(b"get %s\r\n" % key)
        ln = self.line()
        if ln == b"END":
            return None
        n = int(ln.split()[3])
        value = self.take(n + 2)[:-2]
        if self.line() != b"END":
            raise ValueError("no END")
        return value


def one(kind, n, build):
    p, port = start(kind, build)
    hogs = []
    try:
        c = Client(port)
        assert c.set(b"big", b"b" * BIG) == b"STORED"
        assert c.set(b"small", b"s" * 100) == b"STORED"
        rss0 = rss_kib(p.pid)
        t0 = time.time()
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setblocking(False)
            try:
                s.send(b"get big\r\n" * ASKS)
            except BlockingIOError:
                pass
            hogs.append(s)
        rss_peak = settle_rss(p.pid)
        lat, big_lat, errors = [], [], 0
        c.s.settimeout(2)
        stop = time.time() + 30          # a server that hangs costs 30 s, not an hour
        for i in range(310):
            big = i % 31 == 30
            t = time.perf_counter()
            if time.time() > stop:
                errors += 1              # not asked: the reader gave up
                continue
            try:
                got = c.get(b"big" if big else b"small")
                errors += got != (b"b" * BIG if big else b"s" * 100)
            except (OSError, ValueError, ConnectionError):
                errors += 1
                try:
                    c = Client(port)
                    c.s.settimeout(2)
                except OSError:
                    pass
            (big_lat if big else lat).append((time.perf_counter() - t) * 1e6)
        for s in hogs:
            s.close()
        hogs = []
        time.sleep(2)
        rss_after = settle_rss(p.pid)
        lat.sort()
        return {"server": kind, "clients": n, "rss0_kib": rss0, "rss_kib": rss_peak,
                "rss_after_kib": rss_after, "get_p50_us": lat[len(lat) // 2],
                "get_p99_us": lat[int(len(lat) * 0.99)], "get_max_us": lat[-1],
                "big_get_p50_us": statistics.median(big_lat) if big_lat else None,
                "errors": errors, "fill_s": round(time.time() - t0, 1)}
    finally:
        for s in hogs:
            s.close()
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", default="200,600", help="comma-separated counts")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--before", help="a build of fp-kv without the fix, measured too")
    ap.add_argument("--out", default=str(ROOT / "results" / "nonreaders"))
    a = ap.parse_args()
    counts = [int(x) for x in a.clients.split(",")]
    build = pathlib.Path(a.build)
    kinds = ["memcached", "fp-kv"]
    if a.before:
        global BEFORE
        BEFORE = pathlib.Path(a.before)
        kinds.append("fp-kv (before)")
    if not (build / "apps" / "kv" / "fp-kv").exists():
        sys.exit(f"nonreaders: no fp-kv in {build}: ./flowplane build")
    runs = []
    for r in range(a.rounds):
        for n in counts:
            for kind in kinds:
                print(f"nonreaders: round {r + 1}/{a.rounds}: {kind}, {n} clients", flush=True)
                res = one(kind, n, build)
                res["round"] = r + 1
                print("  " + json.dumps(res), flush=True)
                runs.append(res)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "bench/nonreaders.py " + " ".join(sys.argv[1:]),
            "host": os.uname().nodename, "cpus": os.cpu_count()}
    (out / "nonreaders.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
    lines = [f"{meta['date']}, `{meta['command']}`, {meta['cpus']} vCPUs; median (min-max) "
             f"of {a.rounds} interleaved rounds",
             "",
             "| server | non-readers | RSS, MB | RSS after they close, MB "
             "| reader's 100 B get p50 µs | p99 µs | 500 KB get p50 µs | reader errors |",
             "|---|---|---|---|---|---|---|---|"]
    for n in counts:
        for kind in kinds:
            rs = [x for x in runs if x["server"] == kind and x["clients"] == n]
            lines.append(f"| {kind} | {n} | {spread([x['rss_kib'] / 1024 for x in rs])} "
                         f"| {spread([x['rss_after_kib'] / 1024 for x in rs])} "
                         f"| {spread([x['get_p50_us'] for x in rs])} "
                         f"| {spread([x['get_p99_us'] for x in rs])} "
                         f"| {spread([x['big_get_p50_us'] for x in rs])} "
                         f"| {sum(x['errors'] for x in rs)} |")
    (out / "nonreaders.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
