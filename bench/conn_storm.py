#!/usr/bin/env python3
"""A connection storm: what idle connections cost fp-kv and memcached, and what is given back
after they close (issue 16, item 11).

Each server (memcached 1.6; fp-kv on Linux sockets; fp-kv on AF_XDP) runs alone in the
server namespace of the standard topology (tools/netns.py), one worker, -m 64, -c above
the storm. A client in the client namespace opens N connections, sends `version` on each
and reads the answer (so the server has set up everything a connection needs), and holds
them; the server's resident memory is read once it has settled, then the client closes
them all and it is read again. Servers are interleaved (memcached, fp-kv kernel, fp-kv
AF_XDP, then again) for --rounds rounds; medians with min-max. Root (namespaces, AF_XDP).

    sudo .venv/bin/python bench/conn_storm.py [--rounds 3] [--conns 15000] [--out DIR]

Writes DIR/conn_storm.json and DIR/conn_storm.md (default results/conn_storm/).
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import med, rss_kib, settle_rss  # noqa: E402

SERVERS = ["memcached", "fp-kv kernel", "fp-kv xdp"]
PORT = 11411

# Opens N connections (non-blocking, in waves), asks `version` on each, prints "ready",
# waits for a line on stdin, closes them all, prints "closed".
CLIENT = r"""
import resource, selectors, socket, sys
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks = []
WAVE = 500
for start in range(0, n, WAVE):
    wave = []
    for _ in range(min(WAVE, n - start)):
        s = socket.socket()
        s.settimeout(30)
        s.connect((addr, port))
        s.sendall(b"version\r\n")
        wave.append(s)
    for s in wave:
        got = b""
        while not got.endswith(b"\r\n"):
            c = s.recv(100)
            if not c:
                raise SystemExit("closed by the server after %d connections" % len(socks))
            got += c
        assert got.startswith(b"VERSION"), got
    socks += wave
print("ready", flush=True)
sys.stdin.readline()
for s in socks:
    s.close()
print("closed", flush=True)
"""


def server_argv(kind, topo, build, conns):
    c = str(conns + 1024)
    if kind == "memcached":
        return ["memcached", "-u", "root", "-l", topo.srv_ip, "-p", str(PORT), "-U", "0",
                "-m", "64", "-t", "1", "-c", c], topo.srv_ip
    exe = str(build / "apps" / "kv" / "fp-kv")
    common = ["-p", str(PORT), "-U", "0", "-m", "64", "-t", "1", "-c", c, "--stats", "none"]
    if kind == "fp-kv kernel":
        return [exe, "--net", "kernel", "-l", topo.srv_ip, *common], topo.srv_ip
    return [exe, "--if", topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24", *common], topo.fp_srv_ip


def wait_up(topo, addr, proc, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"conn_storm: the server exited: {proc.stderr.read()[-400:]}")
        r = topo.sh(topo.cli_ns, sys.executable, "-c",
                    "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()",
                    addr, str(PORT), check=False)
        if r.returncode == 0:
            return
        time.sleep(0.3)
    raise SystemExit("conn_storm: the server did not accept in time")


def one(kind, topo, build, conns):
    argv, addr = server_argv(kind, topo, build, conns)
    srv = topo.popen(topo.srv_ns, argv, cpu=0)
    try:
        wait_up(topo, addr, srv)
        time.sleep(0.5)
        base = settle_rss(srv.pid)
        t0 = time.time()
        cli = topo.popen(topo.cli_ns, [sys.executable, "-c", CLIENT, addr, PORT, conns], cpu=1,
                         stdin=subprocess.PIPE)
        line = cli.stdout.readline().strip()
        if line != "ready":
            raise SystemExit(f"conn_storm: {kind}: the client failed: {cli.stderr.read()[-400:]}")
        opened_s = time.time() - t0
        held = settle_rss(srv.pid)
        cli.stdin.write("\n")
        cli.stdin.flush()
        assert cli.stdout.readline().strip() == "closed"
        cli.wait(60)
        closed_at = time.time()
        trace = []
        while time.time() - closed_at < 6:
            time.sleep(0.5)
            trace.append(rss_kib(srv.pid))
        after = settle_rss(srv.pid)
    finally:
        stop_process(srv)
    return {"server": kind, "conns": conns, "rss_base_kib": base, "rss_held_kib": held,
            "rss_after_kib": after, "per_conn_bytes": (held - base) * 1024 / conns,
            "kept_after_close_kib": after - base, "open_s": round(opened_s, 2),
            "rss_after_close_trace_kib": trace}


def report(runs, conns, cmd):
    out = [f"conn_storm, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
           f"`{cmd}`; {conns} connections; median (min-max) over rounds", "",
           "| server | RSS before, MB | RSS holding them, MB | bytes per idle connection "
           "| RSS after they close, MB | kept after close, MB |", "|---|---|---|---|---|---|"]
    for kind in SERVERS:
        rs = [r for r in runs if r["server"] == kind]
        if not rs:
            continue
        mb = lambda k: [r[k] / 1024 for r in rs]   # noqa: E731
        out.append(f"| {kind} | {med(mb('rss_base_kib'), '{:.1f}')} | "
                   f"{med(mb('rss_held_kib'), '{:.1f}')} | "
                   f"{med([r['per_conn_bytes'] for r in rs], '{:.0f}')} | "
                   f"{med(mb('rss_after_kib'), '{:.1f}')} | "
                   f"{med(mb('kept_after_close_kib'), '{:.1f}')} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=15000,
                    help="connections (a socket each on the client, and on the kernel-socket "
                         "servers: below the hard open-files limit)")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "conn_storm"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("conn_storm: needs root (network namespaces, AF_XDP): run it with sudo")
    servers = [s for s in a.servers.split(",") if s]
    bad = [s for s in servers if s not in SERVERS]
    if bad:
        sys.exit(f"conn_storm: unknown server {bad[0]}: choose from {', '.join(SERVERS)}")
    build = pathlib.Path(a.build)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with Topo(f"cs{os.getpid() % 10000}") as topo:
        topo.sh(topo.cli_ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535")
        for rnd in range(a.rounds):
            for kind in servers:
                print(f"conn_storm: round {rnd + 1}/{a.rounds}: {kind}, {a.conns} connections",
                      file=sys.stderr, flush=True)
                r = one(kind, topo, build, a.conns)
                r["round"] = rnd + 1
                runs.append(r)
                print(f"  {r['per_conn_bytes']:.0f} B per connection, "
                      f"{r['kept_after_close_kib'] / 1024:.1f} MB kept after close",
                      file=sys.stderr, flush=True)
    cmd = "sudo .venv/bin/python bench/conn_storm.py " + " ".join(sys.argv[1:])
    (out / "conn_storm.json").write_text(json.dumps({"command": cmd, "runs": runs}, indent=1))
    md = report(runs, a.conns, cmd.strip())
    (out / "conn_storm.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
