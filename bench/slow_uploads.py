#!/usr/bin/env python3
"""Slow uploads of large values: what they do to other clients' sets, fp-kv beside memcached
(issue 16, item 2).

Each server (memcached 1.6, fp-kv on Linux sockets; -m 64, one worker, on 127.0.0.1) gets
N connections (default 140) that each start `set bigI 0 0 500000` and then send one byte
a second. Two seconds in, another client stores 300 ordinary 100-byte values: how many
are STORED, and `curr_items` after. The slow senders go on for --hold seconds (default 25)
while the server's resident memory and the number of slow connections it has dropped
are read. Servers are interleaved for --rounds rounds; medians with min-max.

    .venv/bin/python bench/slow_uploads.py [--rounds 3] [--clients 140] [--out DIR]

Writes DIR/slow_uploads.json and DIR/slow_uploads.md (default results/slow_uploads/).
"""
import argparse
import datetime
import json
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import free_port, med, rss_kib  # noqa: E402

SERVERS = ["memcached", "fp-kv"]
BIG = 500_000


def start(kind, build):
    port = free_port()
    if kind == "memcached":
        argv = ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-U", "0"]
    else:
        argv = [str(build / "apps" / "kv" / "fp-kv"), "--net", "kernel", "-l", "127.0.0.1",
                "-p", str(port), "-U", "0", "--stats", "none"]
    p = subprocess.Popen(argv + ["-m", "64", "-t", "1", "-c", "4096"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, port
        except OSError:
            if p.poll() is not None:
                sys.exit(f"slow_uploads: {kind} exited: {p.stderr.read()[-300:]}")
            time.sleep(0.1)
    sys.exit(f"slow_uploads: {kind} did not accept")


class Slow:
    """N connections each trickling one big value, a byte a second; counts the ones the
    server closes."""

    def __init__(self, port, n):
        self.socks, self.dropped, self.stop = [], 0, False
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), 5)
            s.sendall(b"set big%d 0 0 %d\r\nx" % (i, BIG))
            self.socks.append(s)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        alive = list(self.socks)
        while not self.stop and alive:
            time.sleep(1)
            for s in list(alive):
                try:
                    s.sendall(b"x")
                except OSError:
                    alive.remove(s)
                    self.dropped += 1

    def close(self):
        self.stop = True
        self.t.join(5)
        for s in self.socks:
            s.close()


def command(s, line):
    s.sendall(line)
    buf = b""
    while not buf.endswith(b"\r\n"):
        c = s.recv(4096)
        if not c:
            raise ConnectionError("closed")
        buf += c
    return buf


def stats(port):
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += s.recv(65536)
    s.close()
    return {m.group(1).decode(): m.group(2).decode()
            for m in re.finditer(rb"STAT (\S+) (\S+)\r\n", buf)}


def one(kind, build, n, hold):
    p, port = start(kind, build)
    slow = None
    try:
        slow = Slow(port, n)
        time.sleep(2)
        c = socket.create_connection(("127.0.0.1", port), 10)
        answers = [command(c, b"set k%d 0 0 100\r\n%s\r\n" % (i, b"v" * 100)).strip()
                   for i in range(300)]
        c.close()
        st = stats(port)
        rss = [rss_kib(p.pid)]
        t0 = time.time()
        while time.time() - t0 < hold:
            time.sleep(1)
            rss.append(rss_kib(p.pid))
        return {"server": kind, "clients": n, "stored": answers.count(b"STORED"),
                "errors": sorted(set(a.decode() for a in answers if a != b"STORED")),
                "curr_items": int(st.get("curr_items", -1)),
                "rss_max_kib": max(rss), "dropped_by_server": slow.dropped, "hold_s": hold}
    finally:
        if slow:
            slow.close()
        p.terminate()
        p.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=140)
    ap.add_argument("--hold", type=float, default=25.0,
                    help="seconds the slow senders go on after the 300 sets")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "slow_uploads"))
    a = ap.parse_args()
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for rnd in range(a.rounds):
        for kind in SERVERS:
            print(f"slow_uploads: round {rnd + 1}/{a.rounds}: {kind}", file=sys.stderr, flush=True)
            r = one(kind, build, a.clients, a.hold)
            r["round"] = rnd + 1
            runs.append(r)
    cmd = ".venv/bin/python bench/slow_uploads.py " + " ".join(sys.argv[1:])
    (out / "slow_uploads.json").write_text(json.dumps({"command": cmd.strip(), "runs": runs},
                                                      indent=1))
    lines = [f"slow_uploads, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
             f"`{cmd.strip()}`; {a.clients} slow 500 KB uploads, -m 64; median (min-max)", "",
             "| server | of 300 sets STORED | curr_items after | RSS max, MB | slow connections "
             f"the server closed within {a.hold:g} s | other answers |", "|---|---|---|---|---|---|"]
    for kind in SERVERS:
        rs = [r for r in runs if r["server"] == kind]
        errs = sorted({e for r in rs for e in r["errors"]})
        lines.append(f"| {kind} | {med([r['stored'] for r in rs])} | "
                     f"{med([r['curr_items'] for r in rs])} | "
                     f"{med([round(r['rss_max_kib'] / 1024, 1) for r in rs])} | "
                     f"{med([r['dropped_by_server'] for r in rs])} | {'; '.join(errs) or '-'} |")
    md = "\n".join(lines) + "\n"
    (out / "slow_uploads.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
