#!/usr/bin/env python3
"""fp-dns against NSD and Knot: the same zone, the same queries, dnsperf as the client (issue 20).

On the standard topology (tools/netns.py) the server namespace runs, one at a time and
pinned to --server-cpu (0),

    nsd        NSD 4.6, one server process (server-count 1), rate limiting off, on
               Linux sockets (10.88.0.11)
    knot       Knot DNS 3.2, one UDP, one TCP and one background worker, no response rate
               limiting (not configured), on Linux sockets (10.88.0.11)
    fp-kernel  fp-dns on flowplane's kernel transport (io_uring, 10.88.0.11)
    fp-xdp     fp-dns on flowplane's own stack over AF_XDP (10.88.0.1)
    reflect    (only when --servers names it) tools/fp-reflect --dns on AF_XDP: each query
               sent straight back as its own answer, no stack, no lookup: the ceiling of
               any AF_XDP server on this link, to tell the link's limit from fp-dns's
               (the client namespace gets a static neighbour entry for 10.88.0.1)

and the client namespace runs the field's own clients from Debian, not flowplane's, pinned
to --client-cpu (1): Knot's kxdpgun (AF_XDP, knot-dnsutils) and dnsperf 2.10. For each
zone size (--zones: 1, 1,000 and 100,000 names; each name an A record, the apex its SOA
and NS) the queries are A questions for names drawn uniformly from the zone (seeded). The
servers are measured in interleaved rounds (nsd, knot, fp-kernel, fp-xdp, then again;
--rounds, default 3). In each round, per server and zone:

  0. saturation under kxdpgun: it offers --gun-qps (2M) from the client's veth through
     AF_XDP, without Linux's UDP stack on the client side, so the server saturates
     first; answers per second, and where the server core's busy time went (user,
     system, softirq: on a veth the core that sends also runs the receiver's softirq);
  1. saturation under dnsperf: --outstanding queries in flight for --duration seconds;
     a Linux-sockets client, which on this machine saturates before the servers do;
     answers per second and the server core's busy time per answer (/proc/stat);
  2. latency at fixed loads, at the rates --loads gives as fractions of the round's NSD
     saturation (the same rates for every server): fp-loadgen's dns protocol (open loop,
     Poisson arrivals, latency from the scheduled send, its own slip, rate and KS checks;
     32 UDP ports with up to 8 queries in flight each), one run per rate; a point is
     invalid when fp-loadgen says so or a query went unanswered. With --latency-client
     dnsperf: dnsperf -Q -v instead (evenly paced, every answer's latency).

Steal time (/proc/stat) is recorded over every run, and the client core's busy share (a
client near 100% measures itself, not the server). Each figure is reported as the median
over rounds with its min-max; a ratio against NSD (and against Knot) is computed within a
round and called a win or a loss only when its whole range is on one side of 1, else
"within noise".
Writes OUT/runs.json (every run), OUT/summary.json, OUT/summary.md, OUT/dns.png.

dnsperf paces -Q evenly (not Poisson) and reports no send slip of its own; with it a point
whose achieved rate is under 97% of the target is marked invalid (the client fell behind).

Without root (--loopback): nsd, knot and fp-kernel on 127.0.0.1, no namespaces, no AF_XDP.
"""
import argparse
import json
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402

SERVERS = ("nsd", "knot", "fp-kernel", "fp-xdp")
PEERS = ("nsd", "knot")


def log(msg):
    print(f"[dns_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- zones and queries ----

def write_zone(d, n):
    path = d / f"zone-{n}.zone"
    lines = ["$ORIGIN example.com.", "$TTL 3600",
             "@ SOA ns1 hostmaster 1 7200 3600 1209600 300", "@ NS ns1", "ns1 A 192.0.2.53"]
    lines += [f"h{i} A 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_queries(d, n, count=100000, seed=1):
    rnd = random.Random(seed)
    path = d / f"queries-{n}.txt"
    path.write_text("".join(f"h{rnd.randrange(n)}.example.com A\n" for _ in range(count)))
    return path


def nsd_conf(d, ip, port, zone):
    conf = d / f"nsd-{zone.stem}.conf"
    conf.write_text(f"""server:
  ip-address: {ip}
  port: {port}
  server-count: 1
  username: ""
  zonesdir: "{d}"
  pidfile: "{d}/nsd.pid"
  database: ""
  zonelistfile: "{d}/zone.list"
  xfrdfile: "{d}/xfrd.state"
  xfrdir: "{d}"
  logfile: "{d}/nsd.log"
  rrl-ratelimit: 0
  minimal-responses: yes
  verbosity: 0
remote-control:
  control-enable: no
zone:
  name: example.com
  zonefile: "{zone.name}"
""")
    return conf


def knot_conf(d, ip, port, zone):
    conf = d / f"knot-{zone.stem}.conf"
    db = d / f"knotdb-{zone.stem}"
    conf.write_text(f"""server:
    listen: {ip}@{port}
    rundir: "{d}"
    user: root:root
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
log:
  - target: stderr
    any: warning
database:
    storage: "{db}"
zone:
  - domain: example.com
    storage: "{d}"
    file: "{zone.name}"
    zonefile-sync: -1
    journal-content: none
""")
    return conf


# ---- /proc/stat ----

def cpu_times(cpu):
    """(busy, total, user, system, softirq) jiffies of one CPU."""
    for line in open("/proc/stat"):
        f = line.split()
        if f[0] == f"cpu{cpu}":
            v = list(map(int, f[1:]))
            return sum(v) - v[3] - v[4], sum(v), v[0] + v[1], v[2], v[5] + v[6]
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


def core_split(c0, c1):
    """Where the core's busy time went: user, system, softirq (the veth's receive work
    for the peer lands here), as shares of busy; and busy as a share of the window."""
    busy = max(1, c1[0] - c0[0])
    return {"user": (c1[2] - c0[2]) / busy, "system": (c1[3] - c0[3]) / busy,
            "softirq": (c1[4] - c0[4]) / busy, "busy": (c1[0] - c0[0]) / max(1, c1[1] - c0[1])}


def steal_jiffies():
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:9]))
    return v[7], sum(v)


# ---- the bench ----

class Bench:
    def __init__(self, a):
        self.a = a
        self.build = pathlib.Path(a.build)
        self.topo = None if a.loopback else Topo("fpdns")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-dns-bench-"))

    def __enter__(self):
        if self.topo:
            self.topo.up()
        return self

    def __exit__(self, *exc):
        if self.topo:
            self.topo.down()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cmd(self, side, args, cpu):
        if self.topo:
            return self.topo.cmd(self.topo.srv_ns if side == "srv" else self.topo.cli_ns,
                                 args, cpu)
        return ["taskset", "-c", str(cpu)] + [str(x) for x in args]

    def addr(self, server):
        if not self.topo:
            return "127.0.0.1", {"nsd": 5353, "knot": 5355}.get(server, 5354)
        return (self.topo.fp_srv_ip if server in ("fp-xdp", "reflect") else self.topo.srv_ip), 53

    def start(self, server, zone):
        ip, port = self.addr(server)
        fp = self.build / "apps" / "dns" / "fp-dns"
        if server == "nsd":
            argv = ["nsd", "-d", "-c", nsd_conf(self.tmp, ip, port, zone)]
        elif server == "knot":
            argv = ["knotd", "-c", knot_conf(self.tmp, ip, port, zone)]
        elif server == "reflect":
            mac = self.topo.sh(self.topo.srv_ns, "cat",
                               f"/sys/class/net/{self.topo.srv_if}/address").stdout.strip()
            self.topo.sh(self.topo.cli_ns, "ip", "neigh", "replace", ip, "lladdr", mac, "dev",
                         self.topo.cli_if, "nud", "permanent")
            argv = [self.build / "tools" / "fp-reflect", "--if", self.topo.srv_if, "--ip", ip,
                    "--dns"]
        elif server == "fp-kernel":
            argv = [fp, "--zone", zone, "--port", port, "--net", "kernel", "--ip", ip,
                    "--stats", "none"]
        else:
            argv = [fp, "--zone", zone, "--port", port, "--if", self.topo.srv_if,
                    "--ip", f"{ip}/24", "--stats", "none"]
        p = subprocess.Popen(self.cmd("srv", argv, self.a.server_cpu), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        probe = self.tmp / "probe.txt"
        probe.write_text("example.com SOA\n")
        while time.time() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"{server} exited {p.returncode}: {p.stderr.read()[-500:]}")
            r = self.dnsperf(ip, port, probe, 0.3, rate=None, outstanding=1, quiet=True)
            if r.get("completed"):
                return p, ip, port
            time.sleep(0.2)
        self.stop(p)                     # not left running behind the error
        raise RuntimeError(f"{server} did not answer within 60 s")

    def stop(self, p):
        stop_process(p, signal.SIGINT, 15)   # nginx: fast shutdown; the others: stop

    def dnsperf(self, ip, port, qfile, duration, rate=None, outstanding=200, verbose=False,
                quiet=False):
        argv = ["dnsperf", "-s", ip, "-p", port, "-d", qfile, "-l", duration, "-t", "1",
                "-c", "4", "-T", "1", "-q", outstanding]
        if rate:
            argv += ["-Q", int(rate)]
        if verbose:
            argv += ["-v"]
        s0, c0, k0 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        r = subprocess.run(self.cmd("cli", argv, self.a.client_cpu), capture_output=True,
                           text=True, timeout=duration + 60)
        s1, c1, k1 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        out = parse_dnsperf(r.stdout)
        out["client_core"] = core_split(k0, k1)
        if not quiet and r.returncode != 0:
            raise RuntimeError(f"dnsperf failed: {r.stderr[-400:]}")
        out["steal"] = (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
        out["server_cpu_busy"] = (c1[0] - c0[0]) / max(1, c1[1] - c0[1])
        out["server_core"] = core_split(c0, c1)
        if out.get("completed"):
            jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
            out["server_cpu_us_per_query"] = (c1[0] - c0[0]) * jiffy * 1e6 / out["completed"]
        return out


    def loadgen(self, ip, port, qfile, rate):
        """One latency point from fp-loadgen --proto dns (open loop, Poisson)."""
        js = self.tmp / "lg.json"
        argv = [self.build / "apps" / "loadgen" / "fp-loadgen", "--server", f"{ip}:{port}",
                "--proto", "dns", "--queries", qfile, "--rate", int(rate),
                "--duration", self.a.duration, "--warmup", "1", "--conns", "32", "--depth", "8",
                "--timeout", "500", "--cores", self.a.client_cpu, "--stats", "none", "--quiet",
                "--json", js]
        s0, c0, k0 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        r = subprocess.run(self.cmd("cli", argv, None), capture_output=True, text=True,
                           timeout=self.a.duration + 60)
        s1, c1, k1 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        if r.returncode != 0:
            raise RuntimeError(f"fp-loadgen failed: {r.stderr[-400:]}")
        pt = json.loads(js.read_text())["points"][0]
        lat = pt["latency_us"]
        out = {"client": "fp-loadgen", "sent": pt["sent"], "completed": pt["completed"],
               "lost": pt["timeouts"], "errors": pt["errors"], "qps": pt["achieved_rps"],
               "latency_us": {"p50": lat["p50"], "p99": lat["p99"], "p999": lat["p999"]},
               "loadgen_valid": pt["valid"], "invalid_reasons": pt.get("invalid_reasons", []),
               "steal": (s1[0] - s0[0]) / max(1, s1[1] - s0[1]),
               "server_core": core_split(c0, c1), "client_core": core_split(k0, k1)}
        jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
        # the server's core over the warm-up and the point (both at this rate)
        out["server_cpu_us_per_query"] = (c1[0] - c0[0]) * jiffy * 1e6 / max(1, pt["completed"] * (
            self.a.duration + 1) / self.a.duration)
        return out

    def kxdpgun(self, ip, port, qfile, duration, rate):
        """Knot's AF_XDP query generator (knot-dnsutils): it sends from the client's veth
        without Linux's UDP stack, so the server, not the client, saturates."""
        argv = ["kxdpgun", "-t", duration, "-Q", rate, "-p", port, "-i", qfile,
                "-I", self.topo.cli_if, "-F", self.a.client_cpu, ip]
        s0, c0, k0 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        r = subprocess.run(self.cmd("cli", argv, None), capture_output=True, text=True,
                           timeout=duration + 60)
        s1, c1, k1 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        m = re.search(r"total replies:\s+(\d+) \((\d+) pps\)", r.stdout)
        q = re.search(r"total queries:\s+(\d+) \((\d+) pps\)", r.stdout)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"kxdpgun failed: {(r.stdout + r.stderr)[-400:]}")
        out = {"sent": int(q.group(1)), "sent_qps": int(q.group(2)), "completed": int(m.group(1)),
               "qps": int(m.group(2)), "steal": (s1[0] - s0[0]) / max(1, s1[1] - s0[1]),
               "server_core": core_split(c0, c1), "client_core": core_split(k0, k1)}
        jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
        out["server_cpu_us_per_query"] = (c1[0] - c0[0]) * jiffy * 1e6 / max(1, out["completed"])
        return out


def parse_dnsperf(text):
    out = {}
    for key, pat in [("sent", r"Queries sent:\s+(\d+)"), ("completed", r"Queries completed:\s+(\d+)"),
                     ("lost", r"Queries lost:\s+(\d+)"), ("qps", r"Queries per second:\s+([\d.]+)"),
                     ("run_s", r"Run time \(s\):\s+([\d.]+)"),
                     ("avg_latency_s", r"Average Latency \(s\):\s+([\d.]+)")]:
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    lat = [float(x) * 1e6 for x in re.findall(r"^> \S+ \S+ \S+ ([\d.]+)$", text, re.M)]
    if lat:
        lat.sort()
        out["latency_us"] = {p: lat[min(len(lat) - 1, int(len(lat) * q))]
                             for p, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))}
        codes = re.findall(r"^> (\S+) ", text, re.M)
        out["noerror_share"] = codes.count("NOERROR") / len(codes)
    return out


def med(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def verdict(r):
    if not r:
        return "n/a"
    if r["min"] > 1:
        return "win"
    if r["max"] < 1:
        return "loss"
    return "within noise"


def run(a):
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = [s for s in a.servers.split(",") if not (a.loopback and s in ("fp-xdp", "reflect"))]
    zones = [int(z) for z in a.zones.split(",")]
    loads = [float(x) for x in a.loads.split(",")]
    runs = []
    total = a.rounds * len(zones) * len(servers)
    t0, done = time.time(), 0
    with Bench(a) as b:
        files = {n: (write_zone(b.tmp, n), write_queries(b.tmp, n)) for n in zones}
        for rnd in range(a.rounds):
            for n in zones:
                zone, queries = files[n]
                nsd_sat = None
                for server in servers:
                    done += 1
                    left = (time.time() - t0) / max(1, done - 1) * (total - done + 1) if done > 1 else 0
                    log(f"round {rnd + 1}/{a.rounds}, zone {n}, {server} "
                        f"({done}/{total}; about {left / 60:.0f} min left)")
                    p, ip, port = b.start(server, zone)
                    try:
                        gun = None if a.loopback else b.kxdpgun(ip, port, queries, a.duration,
                                                                a.gun_qps)
                        sat = b.dnsperf(ip, port, queries, a.duration, outstanding=a.outstanding)
                        if server == "nsd":
                            nsd_sat = sat.get("qps")
                        base = nsd_sat or sat.get("qps")
                        points = []
                        for f in loads:
                            rate = int(base * f)
                            if a.latency_client == "dnsperf":
                                pt = b.dnsperf(ip, port, queries, a.duration, rate=rate,
                                               outstanding=a.outstanding, verbose=True)
                                pt["valid"] = bool(pt.get("completed")) and \
                                    pt.get("qps", 0) >= 0.97 * rate and pt.get("lost", 1) == 0
                            else:
                                pt = b.loadgen(ip, port, queries, rate)
                                pt["valid"] = bool(pt["completed"]) and pt["loadgen_valid"] \
                                    and pt["lost"] == 0
                            pt["target_qps"] = rate
                            pt["fraction_of_nsd"] = f
                            points.append(pt)
                            log(f"  {rate} q/s: p99 {pt.get('latency_us', {}).get('p99', 0):.0f} us"
                                f"{'' if pt['valid'] else ' (invalid)'}")
                    finally:
                        b.stop(p)
                    log(f"  saturation {sat.get('qps', 0):.0f} q/s (dnsperf), lost {sat.get('lost')}, "
                        f"server core {sat.get('server_cpu_busy', 0):.0%} busy, steal "
                        f"{sat.get('steal', 0):.1%}")
                    if gun:
                        sc = gun["server_core"]
                        log(f"  kxdpgun: {gun['qps']} answers/s of {gun['sent_qps']} sent; server "
                            f"core user {sc['user']:.0%} system {sc['system']:.0%} softirq "
                            f"{sc['softirq']:.0%}")
                    runs.append({"round": rnd, "zone": n, "server": server, "saturation": sat,
                                 "kxdpgun": gun, "points": points})
                    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    summary = summarise(runs, servers, zones, loads)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": socket.gethostname(),
            "cpus": os.cpu_count(), "command": " ".join(sys.argv), "rounds": a.rounds,
            "duration_s": a.duration, "loopback": a.loopback,
            "latency_client": a.latency_client}
    (out / "summary.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=1))
    md = markdown(summary, servers, zones, loads, meta)
    (out / "summary.md").write_text(md)
    plot(runs, servers, zones, out / "dns.png")
    print(md)


def summarise(runs, servers, zones, loads):
    s = {}
    for n in zones:
        for server in servers:
            rs = [r for r in runs if r["zone"] == n and r["server"] == server]
            gun = [r["kxdpgun"] for r in rs if r.get("kxdpgun")]
            e = {"saturation_qps": med([r["saturation"].get("qps") for r in rs]),
                 "kxdpgun_qps": med([g["qps"] for g in gun]),
                 "kxdpgun_core": {k: med([g["server_core"][k] for g in gun])
                                  for k in ("user", "system", "softirq")} if gun else None,
                 "cpu_us_per_query_at_saturation": med([r["saturation"].get("server_cpu_us_per_query") for r in rs]),
                 "steal": med([r["saturation"].get("steal") for r in rs]),
                 "points": {}}
            for f in loads:
                pts = [p for r in rs for p in r["points"] if p["fraction_of_nsd"] == f]
                ok = [p for p in pts if p["valid"]]
                e["points"][str(f)] = {
                    "target_qps": med([p["target_qps"] for p in pts]),
                    "p50_us": med([p["latency_us"]["p50"] for p in ok if "latency_us" in p]),
                    "p99_us": med([p["latency_us"]["p99"] for p in ok if "latency_us" in p]),
                    "cpu_us_per_query": med([p.get("server_cpu_us_per_query") for p in ok]),
                    "valid": f"{len(ok)}/{len(pts)}"}
            e["client_busy_kxdpgun"] = med([g["client_core"]["busy"] for g in gun
                                            if g.get("client_core")])
            e["client_busy_dnsperf"] = med([r["saturation"]["client_core"]["busy"] for r in rs
                                            if r["saturation"].get("client_core")])
            e["saturation_vs"], e["kxdpgun_vs"] = {}, {}
            for peer in PEERS:
                if server in PEERS or peer not in servers:
                    continue
                e["saturation_vs"][peer] = round_ratios(
                    runs, rs, n, peer, lambda r: r["saturation"].get("qps"))
                e["kxdpgun_vs"][peer] = round_ratios(
                    runs, rs, n, peer, lambda r: (r.get("kxdpgun") or {}).get("qps"))
            s[f"{n}/{server}"] = e
    return s


def round_ratios(runs, rs, n, peer, get):
    """@get of each of @rs over the same of @peer in the same round and zone: median, min-max."""
    out = []
    for r in rs:
        base = [x for x in runs if x["zone"] == n and x["server"] == peer and x["round"] == r["round"]]
        if base and get(base[0]) and get(r):
            out.append(get(r) / get(base[0]))
    return med(out)


def fmt_ratio(m):
    return f"{fmt(m, 1, 2)} {verdict(m)}" if m else ""


def fmt(m, scale=1.0, digits=0):
    if not m:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(m['median'] * scale)} ({f.format(m['min'] * scale)}-{f.format(m['max'] * scale)})"


def markdown(s, servers, zones, loads, meta):
    lines = [f"fp-dns vs NSD, {meta['date']}, {meta['host']} ({meta['cpus']} CPUs), "
             f"{meta['rounds']} interleaved rounds, {meta['duration_s']} s per run: "
             f"`{meta['command']}`", "",
             "| zone names | server | kxdpgun kq/s | vs NSD | vs Knot | core busy: user/sys/softirq "
             "| client busy (gun/dnsperf) | dnsperf kq/s | vs NSD | vs Knot | core us/query (dnsperf) | "
             + " | ".join(f"p99 us at {f:g}x NSD sat." for f in loads) + " |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(loads)]
    pct = lambda m: f"{m['median']:.0%}" if m else "-"  # noqa: E731
    for n in zones:
        for server in servers:
            e = s[f"{n}/{server}"]
            core = "/".join(f"{e['kxdpgun_core'][k]['median']:.0%}" for k in ("user", "system", "softirq")) \
                if e.get("kxdpgun_core") else "-"
            pts = [fmt(e["points"][str(f)]["p99_us"]) + f" [{e['points'][str(f)]['valid']}]"
                   for f in loads]
            lines.append(f"| {n:,} | {server} | {fmt(e['kxdpgun_qps'], 1e-3, 1)} | "
                         f"{fmt_ratio(e['kxdpgun_vs'].get('nsd'))} | {fmt_ratio(e['kxdpgun_vs'].get('knot'))} | "
                         f"{core} | {pct(e['client_busy_kxdpgun'])}/{pct(e['client_busy_dnsperf'])} | "
                         f"{fmt(e['saturation_qps'], 1e-3, 1)} | {fmt_ratio(e['saturation_vs'].get('nsd'))} | "
                         f"{fmt_ratio(e['saturation_vs'].get('knot'))} | "
                         f"{fmt(e['cpu_us_per_query_at_saturation'], 1, 2)} | " + " | ".join(pts) + " |")
    lines.append("")
    lines.append(f"Medians over rounds (min-max); [valid/runs] per latency point, measured with "
                 f"{meta['latency_client']} (a point is invalid when the client fell behind "
                 f"the rate or a query went unanswered).")
    return "\n".join(lines) + "\n"


def plot(runs, servers, zones, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(zones), figsize=(5 * len(zones), 4), squeeze=False)
    for ax, n in zip(axes[0], zones):
        for server in servers:
            xs, ys = [], []
            for r in runs:
                if r["zone"] != n or r["server"] != server:
                    continue
                for p in r["points"]:
                    if p["valid"] and "latency_us" in p:
                        xs.append(p["qps"] / 1e3)
                        ys.append(p["latency_us"]["p99"])
            ax.scatter(xs, ys, label=server, s=12)
            sats = [r["saturation"].get("qps", 0) / 1e3 for r in runs if r["zone"] == n and r["server"] == server]
            if sats:
                ax.axvline(statistics.median(sats), linestyle=":", alpha=0.5,
                           color=ax.collections[-1].get_facecolor()[0])
        ax.set_title(f"{n:,} names")
        ax.set_xlabel("answered kq/s (dotted: saturation)")
        ax.set_ylabel("p99 latency (us)")
        ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--zones", default="1,1000,100000", help="zone sizes in names (1,1000,100000)")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--loads", default="0.1,0.5,0.9",
                    help="latency points as fractions of the round's NSD saturation")
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (5)")
    ap.add_argument("--outstanding", type=int, default=200, help="dnsperf -q (200)")
    ap.add_argument("--latency-client", choices=("loadgen", "dnsperf"), default="loadgen",
                    help="what measures the latency points: fp-loadgen (open loop, Poisson; "
                    "the default) or dnsperf -Q (evenly paced)")
    ap.add_argument("--gun-qps", type=int, default=2000000,
                    help="kxdpgun's offered rate, above every server's saturation (2M)")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--loopback", action="store_true", help="no root: 127.0.0.1, no AF_XDP")
    ap.add_argument("--out", default=str(ROOT / "results" / "dns"))
    a = ap.parse_args()
    if not a.loopback and os.geteuid() != 0:
        ap.error("the namespace topology needs root; --loopback runs without it")
    if a.rounds < 1 or a.duration < 1:
        ap.error("--rounds and --duration must be at least 1")
    try:
        run(a)
    except KeyboardInterrupt:
        log("interrupted: what was measured is in runs.json")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
