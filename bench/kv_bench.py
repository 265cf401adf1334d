#!/usr/bin/env python3
"""flowplane-kv against memcached: the same key-value workload, three servers, one run.

On the standard topology (tools/netns.py): the server namespace runs, one at a time and
pinned to CPU 0,

    memcached    memcached 1.6 -t 1 on Linux sockets (10.88.0.11)
    fp-kernel    fp-kv -t 1 on flowplane's kernel transport (io_uring, 10.88.0.11)
    fp-xdp       fp-kv -t 1 on flowplane's own stack over AF_XDP (10.88.0.1)

and the client namespace runs fp-loadgen pinned to CPU 1, the same client for all three
(flowplane's stack on AF_XDP by default: the fastest client here, so the servers, not the
client, saturate first). The servers are measured in interleaved rounds (memcached,
fp-kernel, fp-xdp, then again; --rounds, default 3), so a slow minute of a shared VM hits
every server alike. In each round, for each server and workload:

  1. preload every key once;
  2. find the saturation throughput: closed loop, one request outstanding per connection;
  3. an open-loop Poisson sweep at fractions of that saturation, plus the loads all
     servers share (fractions of the round's memcached saturation), one fp-loadgen run;
  4. a second run placed where the p99 crosses each SLO (500 and 100 us): two rates
     evenly inside each bracket, so the SLO throughput is interpolated between close
     points rather than read off the last point under the line.

Every point carries the generator's own checks (send slip, achieved rate, timeouts); a
point that fails them is invalid: kept, shown as such, never used for an SLO figure. Each
run also records the machine's steal time (/proc/stat) and the server's TCP
retransmissions (fp-stats for flowplane's stack, the namespace's /proc/net/snmp for
Linux's), so stalls and spurious retransmissions are in the report, not hidden in a p99.

Reported per server: every figure as the median over rounds with its min-max, and each
ratio against memcached computed within a round, then summarised the same way: a "win"
or "loss" only when its whole range is on one side of 1, otherwise "within noise".
Writes OUT/<workload>-<server>-r<k>.json (fp-loadgen's JSON, sweep and refinement
points together), OUT/summary.json, OUT/summary.md and OUT/<workload>.png.

Without root (--loopback): memcached and fp-kv on the kernel transport on 127.0.0.1, no
namespaces and no AF_XDP (server CPU 0, client CPU 1, client on the kernel transport).
"""
import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402

PORT = 11211
FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.85, 1.0)
OWN = (0.1, 0.5, 0.9)           # p50/p99 reported at these fractions of a server's saturation
COMMON = (0.1, 0.5, 0.9)        # ... and at these fractions of memcached's
SLOS_US = (500, 100)
SERVERS = ("memcached", "fp-kernel", "fp-xdp")
SRV_STATS, CLI_STATS = "kvbench-srv", "kvbench-cli"


def log(msg):
    print(f"kv_bench: {msg}", file=sys.stderr, flush=True)


# Server and client on different cores where there are two; on one core they share it.
SRV_CPU, CLI_CPU = 0, (1 if (os.cpu_count() or 1) >= 2 else 0)


class Where:
    """Namespaces and addresses, or plain loopback without root."""

    def __init__(self, a):
        self.loopback = a.loopback
        self.topo = None if a.loopback else Topo(a.tag)

    def __enter__(self):
        if self.topo:
            t0 = time.time()
            self.topo.up()
            if time.time() - t0 > 5:    # said, so a slow start is not mistaken for a hang
                log(f"creating the namespaces took {time.time() - t0:.0f} s (the kernel "
                    f"was busy: namespaces removed just before are still being torn down?)")
        return self

    def __exit__(self, *exc):
        if self.topo:
            self.topo.down()

    def cmd(self, side, args, cpu):
        if self.topo:
            ns = self.topo.srv_ns if side == "srv" else self.topo.cli_ns
            return self.topo.cmd(ns, args, cpu)
        return ["taskset", "-c", str(cpu), *map(str, args)]

    def server_addr(self, server):
        if self.loopback:
            return "127.0.0.1"
        return self.topo.fp_srv_ip if server == "fp-xdp" else self.topo.srv_ip

    def reachable(self, addr):
        if self.topo:
            r = self.topo.sh(self.topo.cli_ns, "bash", "-c",
                             f"exec 3<>/dev/tcp/{addr}/{PORT}", check=False)
            return r.returncode == 0
        try:
            socket.create_connection((addr, PORT), timeout=0.5).close()
            return True
        except OSError:
            return False


class Bench:
    def __init__(self, a):
        self.a = a
        self.build = pathlib.Path(a.build)
        self.kv = self.build / "apps" / "kv" / "fp-kv"
        self.lg = self.build / "apps" / "loadgen" / "fp-loadgen"
        self.out = pathlib.Path(a.out)
        self.procs = []
        self.iface_mode = None

    # -- servers ------------------------------------------------------------------------

    def server_argv(self, server, w):
        mem = ["-m", str(self.a.mem_mb), "-c", "16384", "-t", "1", "-p", str(PORT)]
        addr = w.server_addr(server)
        if server == "memcached":
            root = ["-u", "root"] if os.geteuid() == 0 else []
            return ["memcached", "-U", "0", "-l", addr, *root, *mem]
        common = [self.kv, "-U", "0", *mem, "--cores", "0", "--stats", SRV_STATS]
        if server == "fp-kernel":
            return [*common, "--net", "kernel", "-l", addr]
        t = w.topo
        return [*common, "--net", "xdp", "--if", t.srv_if, "--ip", f"{addr}/24",
                "--idle", "poll"]

    def start_server(self, server, w):
        errf = tempfile.TemporaryFile(mode="w+")
        p = subprocess.Popen(w.cmd("srv", self.server_argv(server, w), 0),
                             stdout=subprocess.DEVNULL, stderr=errf, text=True)
        self.procs.append(p)
        addr = w.server_addr(server)
        deadline = time.time() + 20
        while time.time() < deadline:
            if p.poll() is not None:
                errf.seek(0)
                raise RuntimeError(f"{server} exited at start: {errf.read().strip()[-300:]}")
            if w.reachable(addr):
                m = None
                for _ in range(20 if server == "fp-xdp" else 0):  # the startup line may
                    errf.seek(0)                                   # follow the listen
                    m = re.search(r"\(mode (\w+): (\d+)/(\d+) queues zero-copy, "
                                  r"(\d+)/(\d+) native\)", errf.read())
                    if m:
                        break
                    time.sleep(0.1)
                if m:
                    self.iface_mode = ("XDP " + ("native" if m[4] == m[5] else "generic (skb)")
                                       + ", " + ("zero-copy" if m[2] == m[3] else "copy"))
                return p, addr
            time.sleep(0.2)
        raise RuntimeError(f"{server} did not answer on {addr}:{PORT} within 20 s")

    def stop(self, p):
        stop_process(p)
        if p in self.procs:
            self.procs.remove(p)

    def kill_all(self):
        for p in list(self.procs):
            if p.poll() is None:
                p.kill()
                p.wait()
        self.procs.clear()

    # -- the client -----------------------------------------------------------------------

    def client_net(self, w):
        if self.a.client == "kernel" or w.loopback:
            return ["--net", "kernel"]
        t = w.topo
        return ["--net", "xdp", "--if", t.cli_if, "--ip", f"{t.fp_cli_ip}/24"]

    def loadgen(self, w, addr, workload, extra, json_out, timeout, stats="none",
                progress=False):
        """Run fp-loadgen; with @progress its per-point lines go straight to stderr."""
        argv = [self.lg, "--server", f"{addr}:{PORT}", "--proto", "memcache",
                "--workload", workload, "--cores", str(CLI_CPU), "--stats", stats,
                "--conns", str(self.a.conns), "--json", json_out, *self.client_net(w), *extra]
        if not progress:
            argv.append("--quiet")
        r = subprocess.run(w.cmd("cli", argv, CLI_CPU), stdout=subprocess.DEVNULL,
                           stderr=None if progress else subprocess.PIPE, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            why = "see above" if progress else r.stderr.strip()[-400:]
            raise RuntimeError(f"fp-loadgen failed ({r.returncode}): {why}")
        return json.loads(pathlib.Path(json_out).read_text())

    def saturation(self, w, addr, workload, server, tmp):
        """Closed loop, one request in flight on each of the sweep's connections (the most
        the open-loop sweep can have in flight without backlog): what the pair completes
        per second, and how busy each side was, to tell whose limit it is. flowplane's
        processes report their loop's busy share (fp-stats; polling keeps the CPU at 100%
        either way); memcached's is CPU 0's non-idle share from /proc/stat."""
        proc = subprocess.Popen(
            [sys.executable, "-c", STATS_PROBE, str(self.build / "tools" / "fp-stats"),
             SRV_STATS if server != "memcached" else "", CLI_STATS,
             str(self.a.warmup + 0.3), str(self.a.sat_duration * 0.8)],
            stdout=subprocess.PIPE, text=True)
        c0 = cpu_times(0)
        j = self.loadgen(w, addr, workload,
                         ["--closed", "1", "--depth", "1", "--warmup", str(self.a.warmup),
                          "--duration", str(self.a.sat_duration)],
                         tmp / "sat.json", 120, stats=CLI_STATS)
        c1 = cpu_times(0)
        out, _ = proc.communicate(timeout=30)
        box = json.loads(out or "{}")
        if server == "memcached":
            box["server_busy"] = (c1[0] - c0[0]) / max(1, c1[1] - c0[1])
        return j["points"][0]["achieved_rps"], box

    def sweep(self, w, addr, workload, rates, path):
        spec = ",".join(f"{r:.0f}" for r in rates)
        n = len(rates)
        budget = 60 + n * (self.a.duration + 2) + self.a.warmup
        return self.loadgen(w, addr, workload,
                            ["--rates", spec, "--no-preload", "--warmup", str(self.a.warmup),
                             "--duration", str(self.a.duration)], path, budget,
                            progress=True)

    def preload(self, w, addr, workload, tmp):
        self.loadgen(w, addr, workload, ["--closed", "1", "--warmup", "0", "--duration", "0.2"],
                     tmp / "preload.json", 120)

    # -- stalls and retransmissions ----------------------------------------------------------

    def server_counters(self, server, w):
        """The server's counters so far: TCP retransmissions (flowplane's stack counter for
        fp-xdp, Linux's RetransSegs in the server's namespace, or the host's on loopback,
        for the others) and, for flowplane's servers, its loop gaps (count, total ns) and
        the stalls among them (ns: gaps after an idle round, the core taken away)."""
        c = {"rexmit": None, "gaps": None, "gap_ns": None, "stall_ns": None}
        if server != "memcached":
            r = subprocess.run([self.build / "tools" / "fp-stats", "--name", SRV_STATS,
                                "--totals"], capture_output=True, text=True)
            if r.returncode == 0:
                wks = json.loads(r.stdout)["workers"]
                c["gaps"] = sum(wk.get("gaps", 0) for wk in wks)
                c["gap_ns"] = sum(wk.get("gap_ns", 0) for wk in wks)
                c["stall_ns"] = sum(wk.get("stall_ns", 0) for wk in wks)
                if server == "fp-xdp":
                    c["rexmit"] = sum(wk["net"].get("tcp_rexmit", 0) for wk in wks)
        if server == "fp-xdp":
            return c
        if w.topo:
            r = w.topo.sh(w.topo.srv_ns, "cat", "/proc/net/snmp", check=False)
            text = r.stdout if r.returncode == 0 else ""
        else:
            text = pathlib.Path("/proc/net/snmp").read_text()
        rows = [l.split() for l in text.splitlines() if l.startswith("Tcp:")]
        if len(rows) >= 2 and "RetransSegs" in rows[0]:
            c["rexmit"] = int(rows[1][rows[0].index("RetransSegs")])
        return c

    # -- one run --------------------------------------------------------------------------

    def run(self):
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-kv-bench-"))
        servers = [s for s in SERVERS if s in self.a.servers]
        res = {"machine": machine(), "config": vars(self.a).copy(), "rounds": []}
        plan = self.a.rounds * len(servers) * len(self.a.workloads)
        done, t0 = 0, time.time()
        with Where(self.a) as w:
            try:
                for k in range(self.a.rounds):
                    rnd = {}
                    for wl in self.a.workloads:
                        mc_sat = None
                        for s in servers:
                            left = ""
                            if done:
                                eta = (time.time() - t0) / done * (plan - done)
                                left = f", about {eta / 60:.1f} min left"
                            log(f"round {k + 1}/{self.a.rounds}: {wl} / {s} "
                                f"({done + 1} of {plan} runs{left})")
                            r = self.one(w, s, wl, mc_sat, tmp, k)
                            rnd[f"{wl}/{s}"] = r
                            done += 1
                            if s == "memcached":
                                mc_sat = r["saturation_rps"]
                    res["rounds"].append(rnd)
            finally:
                self.kill_all()
        res["machine"]["interface_mode"] = self.iface_mode or "none (no AF_XDP server run)"
        res["runs"] = aggregate(res["rounds"])
        return res

    def one(self, w, server, wl, mc_sat, tmp, k):
        p, addr = self.start_server(server, w)
        try:
            self.preload(w, addr, wl, tmp)
            sat, busy = self.saturation(w, addr, wl, server, tmp)
            log(f"{wl} / {server}: saturation (closed loop) {sat:,.0f} req/s, busy: server "
                f"{busy.get('server_busy', 0):.0%}, client {busy.get('client_busy', 0):.0%}")
            rates = {round(f * sat) for f in FRACTIONS}
            if mc_sat:
                rates |= {round(f * mc_sat) for f in COMMON}
            rates = sorted(r for r in rates if r > 0)
            path = self.out / f"{wl}-{server}-r{k + 1}.json"
            c0, st0, t0 = self.server_counters(server, w), steal_jiffies(), time.time()
            rd0, ks0 = run_delay_ns(p.pid), ksoftirqd_s()
            j = self.sweep(w, addr, wl, rates, path)
            extra = refine_rates(j["points"])
            if extra:
                log(f"{wl} / {server}: {len(extra)} more points where p99 crosses the SLOs")
                j2 = self.sweep(w, addr, wl, extra, tmp / "refine.json")
                j["points"] = sorted(j["points"] + j2["points"], key=lambda q: q["target_rps"])
                path.write_text(json.dumps(j, indent=1))
            c1, st1, t1 = self.server_counters(server, w), steal_jiffies(), time.time()
            rd1, ks1 = run_delay_ns(p.pid), ksoftirqd_s()
            log(f"{wl} / {server}: {len(j['points'])} points -> {path}")
        finally:
            self.stop(p)
        r = summarize(j, sat, mc_sat, str(path))
        r["busy_at_saturation"] = busy
        for k, name in (("rexmit", "server_retransmits"), ("gaps", "server_loop_gaps"),
                        ("gap_ns", "server_gap_ns"), ("stall_ns", "server_stall_ns")):
            r[name] = c1[k] - c0[k] if c0[k] is not None and c1[k] is not None else None
        r["measured_s"] = t1 - t0
        r["server_wait_share"] = (rd1 - rd0) / 1e9 / (t1 - t0) if rd0 is not None and \
            rd1 is not None else None
        r["ksoftirqd_share"] = (ks1 - ks0) / (t1 - t0)
        r["steal_share"] = steal_share(st0, st1)
        r["completed"] = sum(q["completed"] for q in j["points"])
        return r


# Run beside the saturation run: the busy share of the server's and the client's loop over
# a window inside the measured span, from two fp-stats --totals snapshots.
STATS_PROBE = r"""
import json, subprocess, sys, time
exe, srv, cli, start, span = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
def snap(name):
    if not name:
        return None
    r = subprocess.run([exe, "--name", name, "--totals"], capture_output=True, text=True)
    return json.loads(r.stdout)["workers"][0] if r.returncode == 0 else None
time.sleep(start)
a = {k: snap(n) for k, n in (("server_busy", srv), ("client_busy", cli))}
time.sleep(span)
out = {}
for k, n in (("server_busy", srv), ("client_busy", cli)):
    b = snap(n)
    if a[k] and b:
        busy = b["busy_cycles"] - a[k]["busy_cycles"]
        idle = b["idle_cycles"] - a[k]["idle_cycles"]
        out[k] = busy / (busy + idle) if busy + idle else 0.0
print(json.dumps(out))
"""


def cpu_times(cpu):
    """(busy, total) jiffies of one CPU from /proc/stat."""
    for line in open("/proc/stat"):
        f = line.split()
        if f[0] == f"cpu{cpu}":
            v = list(map(int, f[1:]))
            return sum(v) - v[3] - v[4], sum(v)
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def memory(a):
    """Resident memory per item: N USR items (19-byte keys, 2-byte values) stored in each
    server on loopback (kernel transport client), RSS after minus RSS before, over N."""
    a.loopback, a.client = True, "kernel"
    b = Bench(a)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-kv-mem-"))
    res = {}
    with Where(a) as w:
        try:
            for s in ("memcached", "fp-kernel"):
                p, addr = b.start_server(s, w)
                try:
                    time.sleep(0.5)
                    before = rss_kib(p.pid)
                    b.loadgen(w, addr, "usr", ["--records", str(a.memory), "--closed", "1",
                                               "--warmup", "0", "--duration", "0.2"],
                              tmp / "mem.json", 600)
                    after = rss_kib(p.pid)
                finally:
                    b.stop(p)
                res[s] = {"items": a.memory, "rss_before_kib": before, "rss_after_kib": after,
                          "bytes_per_item": (after - before) * 1024 / a.memory}
                log(f"memory {s}: {res[s]['bytes_per_item']:.1f} B/item "
                    f"({before} -> {after} KiB)")
        finally:
            b.kill_all()
    return res


def machine():
    model = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    commit = "unknown"                     # git is not among the packages a user needs
    if shutil.which("git"):
        git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                             capture_output=True, text=True)
        commit = git.stdout.strip() if git.returncode == 0 else commit
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(),
            "commit": commit,
            "memcached": subprocess.run(["memcached", "-V"], capture_output=True,
                                        text=True).stdout.strip()}


def near(points, rate):
    """The point whose target is closest to @rate."""
    return min(points, key=lambda p: abs(p["target_rps"] - rate))


def run_delay_ns(pid):
    """Time @pid's threads spent runnable but not running (waiting behind other tasks:
    ksoftirqd, a neighbour, the client), from /proc/PID/task/*/schedstat; None if gone."""
    total = 0
    try:
        for t in pathlib.Path(f"/proc/{pid}/task").iterdir():
            total += int((t / "schedstat").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return total


def ksoftirqd_s():
    """CPU seconds the ksoftirqd threads have used: softirq work (veth's NAPI, the copy
    into AF_XDP rings) that the kernel deferred to them instead of running it inline."""
    total = 0
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            st = (d / "stat").read_text()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        if comm.startswith("ksoftirqd/"):
            f = st[st.rindex(")") + 2:].split()
            total += int(f[11]) + int(f[12])          # utime, stime (fields 14, 15)
    return total / os.sysconf("SC_CLK_TCK")


def steal_jiffies():
    """(steal, total) jiffies of the whole machine from /proc/stat's first line."""
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:9]))
    return v[7], sum(v)


def steal_share(a, b):
    return (b[0] - a[0]) / max(1, b[1] - a[1])


def slo_bracket(pts, slo):
    """The two valid points, lightest load first, between which p99 last crosses @slo
    upwards: the heaviest valid point that meets it and the next valid point above it
    (None when it is the heaviest); (None, lightest) when no valid point meets it. The last
    crossing, not the first: a lone spike at a light load (a stall of the VM) must not
    set the figure to zero; the spike stays in the table and the plot."""
    v = sorted((q for q in pts if q["valid"]), key=lambda q: q["target_rps"])
    ok = [i for i, q in enumerate(v) if q["latency_us"]["p99"] <= slo]
    if not ok:
        return None, (v[0] if v else None)
    i = ok[-1]
    return v[i], (v[i + 1] if i + 1 < len(v) else None)


def slo_throughput(pts, slo):
    """The throughput at which p99 reaches @slo, interpolated linearly between the two
    valid points that bracket the crossing, and how it was found."""
    lo, hi = slo_bracket(pts, slo)
    if lo is None:
        return 0.0, "p99 over the SLO at the lightest valid load" if hi else "no valid point"
    if hi is None:
        return lo["achieved_rps"], "not crossed: the heaviest valid point"
    a1, l1 = lo["achieved_rps"], lo["latency_us"]["p99"]
    a2, l2 = hi["achieved_rps"], hi["latency_us"]["p99"]
    x = a1 + (a2 - a1) * (slo - l1) / (l2 - l1) if l2 > l1 else a1
    return max(min(x, max(a1, a2)), min(a1, a2)), \
        f"interpolated between {fmt_rate(a1)} and {fmt_rate(a2)}"


def refine_rates(pts):
    """Two rates evenly inside each SLO's bracket (by target rate), for a second run."""
    have = {round(p["target_rps"]) for p in pts}
    extra = set()
    for slo in SLOS_US:
        lo, hi = slo_bracket(pts, slo)
        if lo and hi:
            t1, t2 = lo["target_rps"], hi["target_rps"]
            extra |= {round(t1 + (t2 - t1) * f) for f in (1 / 3, 2 / 3)}
    return sorted(r for r in extra - have if r > 0)


def summarize(j, sat, mc_sat, path):
    pts = j["points"]
    s = {"saturation_rps": sat, "json": path, "at_slo": {}, "at_slo_how": {}, "own": {},
         "common": {}, "points": len(pts), "invalid_points": sum(not p["valid"] for p in pts),
         "slip_p99_max_us": max((p["slip_us"]["p99"] for p in pts), default=0.0),
         "client_gap_us": sum(p.get("client_loop_gap_us", 0.0) for p in pts),
         "client_stalls": sum(p.get("client_stalls", 0) for p in pts),
         "client_gap_s": sum(p["duration_s"] for p in pts)}
    for slo in SLOS_US:
        s["at_slo"][str(slo)], s["at_slo_how"][str(slo)] = slo_throughput(pts, slo)
    for f in OWN:
        p = near(pts, f * sat)
        s["own"][str(f)] = {"rate": p["achieved_rps"], "p50": p["latency_us"]["p50"],
                            "p99": p["latency_us"]["p99"], "valid": p["valid"]}
    if mc_sat:
        for f in COMMON:
            p = near(pts, f * mc_sat)
            s["common"][str(f)] = {"rate": p["achieved_rps"], "p50": p["latency_us"]["p50"],
                                   "p99": p["latency_us"]["p99"], "valid": p["valid"]}
    return s


def spread(vals):
    """Median and min-max of the values that exist (None: not measured)."""
    v = sorted(x for x in vals if x is not None)
    if not v:
        return None
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"median": med, "min": v[0], "max": v[-1], "n": n}


def verdict(st):
    """A ratio's spread against 1: a win or a loss only when the whole range is one side."""
    if st is None:
        return "not measured"
    if st["n"] < 2:
        return "one round: no spread"
    if st["min"] > 1:
        return "win"
    if st["max"] < 1:
        return "loss"
    return "within noise"


def aggregate(rounds):
    """Per workload/server: each figure's spread over rounds, and ratios against the same
    round's memcached (so a slow round slows both sides of a ratio alike)."""
    out = {}
    for key in rounds[0]:
        wl = key.split("/")[0]
        rs = [r[key] for r in rounds if key in r]
        mcs = [r.get(f"{wl}/memcached") for r in rounds if key in r]

        def ratio(get, pairs=list(zip(rs, mcs))):
            return spread([get(a) / get(m) if m and get(m) else None for a, m in pairs])

        agg = {"saturation_rps": spread([r["saturation_rps"] for r in rs])["median"],
               "json": rs[-1]["json"], "rounds": len(rs),
               "saturation": spread([r["saturation_rps"] for r in rs]),
               "at_slo": {k: spread([r["at_slo"][k] for r in rs]) for k in rs[0]["at_slo"]},
               "vs_memcached": {
                   "saturation": ratio(lambda r: r["saturation_rps"]),
                   **{f"slo_{k}": ratio(lambda r, k=k: r["at_slo"][k]) for k in rs[0]["at_slo"]}},
               "common": {}, "own": {},
               "steal_share": spread([r.get("steal_share") for r in rs]),
               "retransmits_per_1k": spread([1000 * r["server_retransmits"] / r["completed"]
                                             if r.get("server_retransmits") is not None
                                             and r.get("completed") else None for r in rs]),
               "server_gap_share": spread([r["server_gap_ns"] / 1e9 / r["measured_s"]
                                           if r.get("server_gap_ns") is not None
                                           and r.get("measured_s") else None for r in rs]),
               "server_stall_share": spread([r["server_stall_ns"] / 1e9 / r["measured_s"]
                                             if r.get("server_stall_ns") is not None
                                             and r.get("measured_s") else None for r in rs]),
               "server_loop_gaps": spread([r.get("server_loop_gaps") for r in rs]),
               "server_wait_share": spread([r.get("server_wait_share") for r in rs]),
               "client_gap_share": spread([r["client_gap_us"] / 1e6 / r["client_gap_s"]
                                           if r.get("client_gap_s") else None for r in rs]),
               "client_stalls_per_s": spread([r.get("client_stalls", 0) / r["client_gap_s"]
                                              if r.get("client_gap_s") else None for r in rs]),
               "ksoftirqd_share": spread([r.get("ksoftirqd_share") for r in rs]),
               "invalid_points": sum(r["invalid_points"] for r in rs),
               "points": sum(r["points"] for r in rs),
               "slip_p99_max_us": max(r["slip_p99_max_us"] for r in rs)}
        agg["verdict"] = {k: verdict(v) for k, v in agg["vs_memcached"].items()}
        for part in ("common", "own"):
            for f in {f for r in rs for f in r[part]}:
                cells = [r[part][f] for r in rs if f in r[part]]
                agg[part][f] = {q: spread([c[q] for c in cells]) for q in ("rate", "p50", "p99")}
                agg[part][f]["invalid"] = sum(not c["valid"] for c in cells)
        out[key] = agg
    return out


def fmt_rate(r):
    return f"{r / 1e3:,.0f}k" if r >= 1e3 else f"{r:.0f}"


def fmt_spread(st, f=fmt_rate):
    if st is None:
        return "–"
    if st["n"] < 2 or st["min"] == st["max"]:
        return f(st["median"])
    return f"{f(st['median'])} ({f(st['min'])}–{f(st['max'])})"


def fmt_ratio(st):
    return fmt_spread(st, lambda x: f"{x:.2f}×")


def table(res):
    m = res["machine"]
    c = res["config"]
    out = [f"Machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}; "
           f"interface: {m['interface_mode']}; {m['memcached']}.",
           "",
           f"Measured {m.get('date', '?')} by `{m.get('command', './flowplane demo')}`: "
           f"{c['rounds']} interleaved round(s), {c['duration']:g} s per point; every figure is "
           "the median over rounds (min–max); ratios are taken within a round.", ""]
    for wl in c["workloads"]:
        runs = {k.split("/")[1]: v for k, v in res["runs"].items() if k.startswith(wl + "/")}
        mc = runs.get("memcached")
        out += [f"### {wl.upper()}", "",
                "| server | saturation | at p99 ≤ 500 µs | at p99 ≤ 100 µs | "
                "vs memcached: saturation | vs memcached: at 500 µs | vs memcached: at 100 µs |",
                "|---|---|---|---|---|---|---|"]
        for name, r in runs.items():
            vs = r["vs_memcached"]
            cells = [fmt_spread(r["saturation"]), fmt_spread(r["at_slo"]["500"]),
                     fmt_spread(r["at_slo"]["100"])]
            if name == "memcached":
                cells += ["1", "1", "1"]
            else:
                cells += [f"{fmt_ratio(vs[k])} {verdict_word(r['verdict'][k])}"
                          for k in ("saturation", "slo_500", "slo_100")]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        if mc:
            out += ["", "p50 / p99 µs at common loads (fractions of each round's memcached "
                    "saturation; median over rounds, p99's min–max):", "",
                    "| server | " + " | ".join(
                        f"{int(f * 100)}% ({fmt_rate(f * mc['saturation_rps'])})" for f in COMMON)
                    + " |", "|---|" + "---|" * len(COMMON)]
            for name, r in runs.items():
                src = r["own"] if name == "memcached" else r["common"]
                cells = []
                for f in COMMON:
                    q = src.get(str(f))
                    if not q:
                        cells.append("–")
                        continue
                    p99 = q["p99"]
                    rng = "" if p99["n"] < 2 else f" ({p99['min']:.0f}–{p99['max']:.0f})"
                    cells.append(f"{q['p50']['median']:.0f} / {p99['median']:.0f}{rng}"
                                 + ("*" if q["invalid"] else ""))
                out.append(f"| {name} | " + " | ".join(cells) + " |")
        out += ["", "Stalls and retransmissions (per server, over all rounds):", "",
                "| server | steal time | server runnable, not running | ksoftirqd CPU "
                "| server loop gaps > 50 µs (share of time; of it, stalls after idle rounds) "
                "| client loop gaps > 50 µs, share of time (stalls ≥ 0.5 ms per s) "
                "| client send slip, worst point's p99 | invalid points "
                "| server TCP retransmissions per 1k requests |",
                "|---|---|---|---|---|---|---|---|---|"]
        for name, r in runs.items():
            steal = fmt_spread(r["steal_share"], lambda x: f"{x:.1%}")
            rx = fmt_spread(r["retransmits_per_1k"], lambda x: f"{x:.2f}")
            gaps = "not ours to count" if name == "memcached" else (
                f"{fmt_spread(r['server_loop_gaps'], lambda x: f'{x:,.0f}')} "
                f"({fmt_spread(r['server_gap_share'], lambda x: f'{x:.2%}')}; "
                f"{fmt_spread(r.get('server_stall_share'), lambda x: f'{x:.2%}')})")
            pct = lambda x: f"{x:.1%}"   # noqa: E731
            out.append(f"| {name} | {steal} | {fmt_spread(r['server_wait_share'], pct)} | "
                       f"{fmt_spread(r['ksoftirqd_share'], pct)} | "
                       f"{gaps} | {fmt_spread(r.get('client_gap_share'), lambda x: f'{x:.2%}')} "
                       f"({fmt_spread(r.get('client_stalls_per_s'), lambda x: f'{x:.1f}')}) | "
                       f"{r['slip_p99_max_us']:,.0f} µs | "
                       f"{r['invalid_points']} of {r['points']} | {rx} |")
        out += ["", "Loop gaps count rounds more than 50 µs apart, sleep left out: a long "
                "round of work as well as a stall. A server's stalls are its gaps that "
                "followed an idle round (nothing of its own ran: the core was taken away); "
                "a client's, its gaps of 0.5 ms or more. Stalls the guest cannot see are in "
                "docs/results.md (bench/vcpu_gaps.py).", "",
                "SLO throughput is interpolated between the two valid points around the "
                "crossing (a second run places points inside that bracket). A ratio is a win "
                "or a loss only when its whole range is on one side of 1. `*`: some round's "
                "point failed fp-loadgen's checks (achieved < 99% of offered, send slip over "
                "the bound, or timeouts); invalid points are never used for an SLO figure.", ""]
    return "\n".join(out)


def verdict_word(v):
    return {"win": "**win**", "loss": "**loss**"}.get(v, f"({v})")


def plot(res, out):
    lgplot = ROOT / "tools" / "lgplot.py"
    made = []
    for wl in res["config"]["workloads"]:
        runs = [(f"{k.split('/')[1]} r{i + 1}", v["json"]) for i, rnd in enumerate(res["rounds"])
                for k, v in rnd.items() if k.startswith(wl + "/")]
        png = out / f"{wl}.png"
        r = subprocess.run([sys.executable, lgplot, *[p for _, p in runs], "-o", png,
                            "--slo-us", "500", "--ymax", "2000", "--labels", ",".join(n for n, _ in runs),
                            "--title", f"{wl.upper()}: p99 latency vs throughput"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"lgplot.py: {r.stderr.strip()[-300:]}")
        made.append(png)
    return made


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "kv"))
    ap.add_argument("--workloads", default="usr", help="comma list of usr, etc (default usr)")
    ap.add_argument("--servers", default=",".join(SERVERS),
                    help="comma list of memcached, fp-kernel, fp-xdp (default all)")
    ap.add_argument("--client", choices=["xdp", "kernel"], default="xdp",
                    help="fp-loadgen's transport (default xdp: flowplane's stack)")
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per sweep point")
    ap.add_argument("--sat-duration", type=float, default=1.5)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--mem-mb", type=int, default=1024)
    ap.add_argument("--tag", default="fpkv")
    ap.add_argument("--loopback", action="store_true",
                    help="no root: kernel transport and memcached on 127.0.0.1 only")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds over the servers (default 3; --quick: 1)")
    ap.add_argument("--quick", action="store_true",
                    help="one round of short points (about 1 minute)")
    ap.add_argument("--memory", type=int, metavar="N",
                    help="instead: resident bytes per item with N USR items, memcached vs "
                         "fp-kv (loopback, no root needed)")
    a = ap.parse_args(argv)
    a.workloads = [x for x in a.workloads.split(",") if x]
    a.servers = [x for x in a.servers.split(",") if x]
    for x in a.workloads:
        if x not in ("usr", "etc"):
            ap.error(f"--workloads: unknown workload '{x}'")
    for x in a.servers:
        if x not in SERVERS:
            ap.error(f"--servers: unknown server '{x}'")
    if a.memory:
        res = memory(a)
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "memory.json").write_text(json.dumps(res, indent=1))
        print("| server | items | RSS before → after (MiB) | bytes per item |\n|---|---|---|---|")
        for s, r in res.items():
            print(f"| {s} | {r['items']:,} | {r['rss_before_kib'] / 1024:.0f} → "
                  f"{r['rss_after_kib'] / 1024:.0f} | {r['bytes_per_item']:.1f} |")
        return 0
    if a.rounds < 1:
        ap.error("--rounds wants 1 or more")
    if a.quick:
        a.duration, a.sat_duration, a.warmup = 1.0, 1.0, 0.5
        if "--rounds" not in (argv if argv is not None else sys.argv):
            a.rounds = 1
    need = {"memcached": "memcached", "taskset": "util-linux"}
    if not a.loopback:
        need.update({"ip": "iproute2", "ethtool": "ethtool"})
    missing = [f"{t} (Debian package {p})" for t, p in need.items() if not shutil.which(t)]
    if missing:
        log("missing " + ", ".join(missing) + ": run scripts/bootstrap as root")
        return 2
    if os.geteuid() != 0 and not a.loopback:
        log("needs root for network namespaces and AF_XDP; --loopback runs memcached and "
            "fp-kv's kernel transport on 127.0.0.1 without root")
        return 2
    if a.loopback:
        a.servers = [s for s in a.servers if s != "fp-xdp"]
        a.client = "kernel"
    b = Bench(a)
    res = b.run()
    res["machine"]["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["machine"]["command"] = os.environ.get("FP_DEMO_COMMAND") or \
        "bench/kv_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = pathlib.Path(a.out)
    (out / "summary.json").write_text(json.dumps(res, indent=1))
    md = table(res)
    (out / "summary.md").write_text(md + "\n")
    for png in plot(res, out):
        log(f"plot: {png}")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
