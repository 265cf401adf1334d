#!/usr/bin/env python3
"""flowplane-kv against memcached: the same key-value workload, three servers, one run.

On the standard topology (tools/netns.py): the server namespace runs, one at a time and
pinned to CPU 0,

    memcached    memcached 1.6 -t 1 on Linux sockets (10.88.0.11)
    fp-kernel    fp-kv -t 1 on flowplane's kernel transport (io_uring, 10.88.0.11)
    fp-xdp       fp-kv -t 1 on flowplane's own stack over AF_XDP (10.88.0.1)

and the client namespace runs fp-loadgen pinned to CPU 1, the same client for all three
(flowplane's stack on AF_XDP by default: the fastest client here, so the servers, not the
client, saturate first). For each server and workload:

  1. preload every key once;
  2. find the saturation throughput: closed loop, many requests outstanding;
  3. an open-loop Poisson sweep at fixed fractions of that saturation, plus the loads all
     servers share (fractions of memcached's saturation), one fp-loadgen run, so every
     point is measured by the same generator with its self-checks.

Reported per server: saturation, the highest achieved throughput whose p99 meets each SLO
(500 us and 100 us; from the sweep's points, not interpolated), p50/p99 at 10%, 50% and
90% of its own saturation and at the common loads, and ratios against memcached. Writes
OUT/<workload>-<server>.json (fp-loadgen's JSON), OUT/summary.json, OUT/summary.md and
OUT/<workload>.png (latency-throughput curves with the SLO line).

Without root (--loopback): memcached and fp-kv on the kernel transport on 127.0.0.1, no
namespaces and no AF_XDP (server CPU 0, client CPU 1, client on the kernel transport).
"""
import argparse
import json
import os
import pathlib
import platform
import re
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
FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1)
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
            self.topo.up()
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

    # -- one run --------------------------------------------------------------------------

    def run(self):
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-kv-bench-"))
        servers = [s for s in SERVERS if s in self.a.servers]
        res = {"machine": machine(), "config": vars(self.a).copy(), "runs": {}}
        with Where(self.a) as w:
            try:
                for wl in self.a.workloads:
                    mc_sat = None
                    for s in servers:
                        r = self.one(w, s, wl, mc_sat, tmp)
                        res["runs"][f"{wl}/{s}"] = r
                        if s == "memcached":
                            mc_sat = r["saturation_rps"]
            finally:
                self.kill_all()
        res["machine"]["interface_mode"] = self.iface_mode or "none (no AF_XDP server run)"
        return res

    def one(self, w, server, wl, mc_sat, tmp):
        log(f"{wl} / {server}: starting")
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
            path = self.out / f"{wl}-{server}.json"
            j = self.sweep(w, addr, wl, rates, path)
            log(f"{wl} / {server}: {len(j['points'])} points -> {path}")
        finally:
            self.stop(p)
        r = summarize(j, sat, mc_sat, str(path))
        r["busy_at_saturation"] = busy
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
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(),
            "memcached": subprocess.run(["memcached", "-V"], capture_output=True,
                                        text=True).stdout.strip()}


def near(points, rate):
    """The point whose target is closest to @rate."""
    return min(points, key=lambda p: abs(p["target_rps"] - rate))


def summarize(j, sat, mc_sat, path):
    pts = j["points"]
    s = {"saturation_rps": sat, "json": path, "at_slo": {}, "own": {}, "common": {}}
    for slo in SLOS_US:
        ok = [p["achieved_rps"] for p in pts if p["valid"] and p["latency_us"]["p99"] <= slo]
        s["at_slo"][str(slo)] = max(ok) if ok else 0.0
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


def fmt_rate(r):
    return f"{r / 1e3:,.0f}k" if r >= 1e3 else f"{r:.0f}"


def table(res):
    m = res["machine"]
    out = [f"Machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}; "
           f"interface: {m['interface_mode']}; {m['memcached']}.", ""]
    for wl in res["config"]["workloads"]:
        runs = {k.split("/")[1]: v for k, v in res["runs"].items() if k.startswith(wl + "/")}
        mc = runs.get("memcached")
        out += [f"### {wl.upper()}", "",
                "| server | saturation (server busy) | at p99 ≤ 500 µs | at p99 ≤ 100 µs | "
                "p50 / p99 µs at 10% / 50% / 90% of own saturation | vs memcached (500 µs SLO) |",
                "|---|---|---|---|---|---|"]
        for name, r in runs.items():
            own = " · ".join(f"{r['own'][str(f)]['p50']:.0f} / {r['own'][str(f)]['p99']:.0f}"
                             + ("" if r["own"][str(f)]["valid"] else "*") for f in OWN)
            if not mc:
                ratio = "no memcached run"
            elif mc["at_slo"]["500"]:
                ratio = f"{r['at_slo']['500'] / mc['at_slo']['500']:.2f}×"
            else:
                ratio = "memcached: no point ≤ 500 µs"
            b = r.get("busy_at_saturation", {})
            busy = f"{b['server_busy']:.0%}" if "server_busy" in b else "?"
            out.append(f"| {name} | {fmt_rate(r['saturation_rps'])} ({busy}) | "
                       f"{fmt_rate(r['at_slo']['500'])} | {fmt_rate(r['at_slo']['100'])} | "
                       f"{own} | {ratio} |")
        if mc:
            mc["common"] = mc["own"]
            out += ["", "Common loads (fractions of memcached's saturation), p50 / p99 µs:", "",
                    "| server | " + " | ".join(f"{int(f * 100)}% ({fmt_rate(f * mc['saturation_rps'])})"
                                               for f in COMMON) + " |",
                    "|---|" + "---|" * len(COMMON)]
            for name, r in runs.items():
                cells = [f"{r['common'][str(f)]['p50']:.0f} / {r['common'][str(f)]['p99']:.0f}"
                         + ("" if r["common"][str(f)]["valid"] else "*")
                         for f in COMMON if str(f) in r["common"]]
                out.append(f"| {name} | " + " | ".join(cells) + " |")
        out += ["", "`*`: the point failed fp-loadgen's checks (achieved < 99% of offered, "
                "the generator fell behind, or timeouts).", ""]
    return "\n".join(out)


def plot(res, out):
    lgplot = ROOT / "tools" / "lgplot.py"
    made = []
    for wl in res["config"]["workloads"]:
        runs = [(k.split("/")[1], v["json"]) for k, v in res["runs"].items()
                if k.startswith(wl + "/")]
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
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per sweep point")
    ap.add_argument("--sat-duration", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--mem-mb", type=int, default=1024)
    ap.add_argument("--tag", default="fpkv")
    ap.add_argument("--loopback", action="store_true",
                    help="no root: kernel transport and memcached on 127.0.0.1 only")
    ap.add_argument("--quick", action="store_true", help="short points (about 1 minute)")
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
    if a.quick:
        a.duration, a.sat_duration, a.warmup = 1.0, 1.0, 0.5
    if os.geteuid() != 0 and not a.loopback:
        log("needs root for network namespaces and AF_XDP; --loopback runs memcached and "
            "fp-kv's kernel transport on 127.0.0.1 without root")
        return 2
    if a.loopback:
        a.servers = [s for s in a.servers if s != "fp-xdp"]
        a.client = "kernel"
    b = Bench(a)
    res = b.run()
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
