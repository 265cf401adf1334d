#!/usr/bin/env python3
"""The echo figures of the dataplane issue, on the standard topology, in one run.

Server in its namespace pinned to CPU 0, client in the other pinned to CPU 1, joined by a
veth pair (tools/netns.py). Each configuration is repeated --reps times, interleaved (rep 1
of every configuration, then rep 2, ...) so drift in the VM hits all of them alike, and the
median is reported.

  RTT:        64-byte ping-pong (fp-echo pingpong), p50 and p99, for
                flowplane server (AF_XDP, polling)  <- Linux-socket client
                the same server on the kernel transport  <- the same client
                flowplane server (AF_XDP, polling)  <- flowplane client (AF_XDP, polling)
                flowplane server (AF_XDP, sleeping when idle) <- Linux-socket client
  Throughput: the IX echo benchmark (fp-echo client), 64-byte messages, n = 1 and 1024
              round trips per connection, against each server, from each client; the
              server's busy time per message and its batch-size distribution come from
              its stats segment (fp-stats --totals before and after), and CPU 0's
              non-idle share from /proc/stat (this catches softirq work on the server's
              core that the runtime's own busy time does not see).

Writes results/echo/echo.json and echo.md (the table for docs/results.md).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402

PORT = 7


class Bench:
    def __init__(self, args):
        self.a = args
        self.build = pathlib.Path(args.build)
        self.echo = self.build / "apps" / "echo" / "fp-echo"
        self.stats_exe = self.build / "tools" / "fp-stats"
        self.topo = Topo(args.tag)
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-echo-bench-"))

    # -- servers and clients ------------------------------------------------------------

    def server_args(self, kind):
        t = self.topo
        if kind == "xdp-poll":
            return ["--if", t.srv_if, "--ip", f"{t.fp_srv_ip}/24", "--idle", "poll"], t.fp_srv_ip
        if kind == "xdp-sleep":
            return ["--if", t.srv_if, "--ip", f"{t.fp_srv_ip}/24", "--idle", "sleep"], t.fp_srv_ip
        if kind == "kernel":
            return ["--net", "kernel", "--ip", t.srv_ip], t.srv_ip
        raise ValueError(kind)

    def client_args(self, kind):
        t = self.topo
        if kind == "xdp-poll":
            return ["--if", t.cli_if, "--ip", f"{t.fp_cli_ip}/24", "--idle", "poll"]
        if kind == "kernel":
            return ["--net", "kernel"]
        raise ValueError(kind)

    def start_server(self, kind):
        extra, addr = self.server_args(kind)
        name = f"{self.a.tag}-bench"
        p = self.topo.popen(self.topo.srv_ns, [self.echo, "server", "--port", PORT, "--cores", 0,
                                              "--stats", name, *extra], cpu=0)
        deadline = time.time() + 15
        while time.time() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"server {kind} exited: {p.stderr.read()}")
            if self.topo.sh(self.topo.cli_ns, "bash", "-c",
                            f"exec 3<>/dev/tcp/{addr}/{PORT}", check=False).returncode == 0:
                return p, addr, name
            time.sleep(0.2)
        p.kill()
        raise RuntimeError(f"server {kind} did not come up")

    def stop(self, p):
        stop_process(p)

    def totals(self, name):
        r = self.topo.sh(self.topo.srv_ns, self.stats_exe, "--name", name, "--totals")
        return json.loads(r.stdout)

    def client(self, mode, kind, addr, extra):
        out = self.tmp / "client.json"
        if out.exists():
            out.unlink()
        args = [self.echo, mode, "--server", f"{addr}:{PORT}", "--cores", 1, "--stats", "none",
                "--json", out, *self.client_args(kind), *extra]
        r = subprocess.run(self.topo.cmd(self.topo.cli_ns, args, cpu=1), capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"{mode} ({kind}) failed: {r.stderr.strip()[-400:]}")
        return json.loads(out.read_text())

    # -- measurements ---------------------------------------------------------------------

    def rtt_once(self, server, client):
        p, addr, _ = self.start_server(server)
        try:
            j = self.client("pingpong", client, addr,
                            ["--size", 64, "--count", self.a.rtt_count, "--warmup", 1000])
        finally:
            self.stop(p)
        return {"p50": j["rtt_us"]["p50"], "p99": j["rtt_us"]["p99"],
                "p999": j["rtt_us"]["p999"], "mean": j["rtt_us"]["mean"]}

    def tput_once(self, server, client, rounds):
        p, addr, name = self.start_server(server)
        try:
            before, cpu0 = self.totals(name), cpu_times(0)
            j = self.client("client", client, addr,
                            ["--size", 64, "--rounds", rounds, "--conns", self.a.conns,
                             "--duration", self.a.duration, "--warmup", self.a.warmup])
            after, cpu1 = self.totals(name), cpu_times(0)
        finally:
            self.stop(p)
        return summarize_tput(j, before, after, cpu0, cpu1)

    def run(self):
        rtt_cfgs = [("xdp-poll", "kernel"), ("kernel", "kernel"), ("xdp-poll", "xdp-poll"),
                    ("xdp-sleep", "kernel")]
        tput_cfgs = [(s, c, n) for n in (1, 1024) for s in ("xdp-poll", "kernel")
                     for c in ("xdp-poll", "kernel")]
        res = {"rtt": {f"{s}<-{c}": [] for s, c in rtt_cfgs},
               "tput": {f"{s}<-{c} n={n}": [] for s, c, n in tput_cfgs}}
        with self.topo:
            for rep in range(self.a.reps):
                for s, c in rtt_cfgs:
                    r = self.rtt_once(s, c)
                    res["rtt"][f"{s}<-{c}"].append(r)
                    log(f"rep {rep + 1} rtt {s}<-{c}: p50 {r['p50']:.1f} p99 {r['p99']:.1f} us")
                for s, c, n in tput_cfgs:
                    r = self.tput_once(s, c, n)
                    res["tput"][f"{s}<-{c} n={n}"].append(r)
                    log(f"rep {rep + 1} tput {s}<-{c} n={n}: {r['msgs_per_s']:.0f} msg/s, "
                        f"server busy {r['busy_ns_per_msg']:.0f} ns/msg, cpu0 "
                        f"{r['cpu0_busy_pct']:.0f}%")
        return res


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_times(cpu):
    """(busy, total) jiffies of one CPU from /proc/stat."""
    for line in open("/proc/stat"):
        f = line.split()
        if f[0] == f"cpu{cpu}":
            v = list(map(int, f[1:]))
            idle = v[3] + v[4]
            return sum(v) - idle, sum(v)
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


def hist_quantile(h, q):
    total = sum(h)
    if not total:
        return 0
    acc = 0
    for i, c in enumerate(h):
        acc += c
        if acc >= q * total:
            return i
    return len(h) - 1


def summarize_tput(j, before, after, cpu0, cpu1):
    w0, w1 = before["workers"][0], after["workers"][0]
    hz = after["tsc_hz"] or 1
    busy_s = (w1["busy_cycles"] - w0["busy_cycles"]) / hz
    idle_s = (w1["idle_cycles"] - w0["idle_cycles"]) / hz
    msgs = j["round_trips_total"]
    bh = [b - a for a, b in zip(w0["batch_hist"], w1["batch_hist"])]
    passes = sum(bh)
    frames = sum(i * c for i, c in enumerate(bh))
    return {
        "msgs_per_s": j["msgs_per_s"], "conns_per_s": j.get("conns_per_s", 0),
        "rtt_p50": j["rtt_us"]["p50"], "rtt_p99": j["rtt_us"]["p99"], "errors": j["errors"],
        "busy_ns_per_msg": busy_s * 1e9 / msgs if msgs else 0,
        "busy_share": busy_s / (busy_s + idle_s) if busy_s + idle_s else 0,
        "cpu0_busy_pct": 100.0 * (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]),
        "batch_mean": frames / passes if passes else 0,
        "batch_p50": hist_quantile(bh, 0.5), "batch_p99": hist_quantile(bh, 0.99),
        "batch_hist": bh,
    }


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def table(res, reps):
    out = [f"Median of {reps} repetitions, 64-byte messages. Server netns on CPU 0, client "
           "netns on CPU 1.\n", "| RTT (server <- client) | p50 µs | p99 µs | p99.9 µs |",
           "|---|---|---|---|"]
    for k, rs in res["rtt"].items():
        out.append(f"| {k} | {med(rs, 'p50'):.1f} | {med(rs, 'p99'):.1f} | {med(rs, 'p999'):.1f} |")
    out += ["", "| echo throughput (server <- client, n) | msgs/s | server busy ns/msg "
            "| server busy share | CPU 0 busy % | batch mean / p50 / p99 | client RTT p50 / p99 µs |",
            "|---|---|---|---|---|---|---|"]
    for k, rs in res["tput"].items():
        out.append(f"| {k} | {med(rs, 'msgs_per_s'):,.0f} | {med(rs, 'busy_ns_per_msg'):.0f} | "
                   f"{med(rs, 'busy_share'):.2f} | {med(rs, 'cpu0_busy_pct'):.0f} | "
                   f"{med(rs, 'batch_mean'):.1f} / {med(rs, 'batch_p50'):.0f} / "
                   f"{med(rs, 'batch_p99'):.0f} | {med(rs, 'rtt_p50'):.0f} / {med(rs, 'rtt_p99'):.0f} |")
    out += ["", "Ratios within each repetition (flowplane server on AF_XDP / the same app on the "
            "kernel transport, same client), then their median:", "",
            "| ratio | per repetition | median |", "|---|---|---|"]
    for label, a, b, key in ratio_rows(res):
        per = [x[key] / y[key] for x, y in zip(a, b) if y[key]]
        if per:
            out.append(f"| {label} | {' '.join(f'{r:.2f}' for r in per)} | "
                       f"{statistics.median(per):.2f} |")
    return "\n".join(out) + "\n"


def ratio_rows(res):
    r, t = res["rtt"], res["tput"]
    rows = [("RTT p50, Linux client", r.get("xdp-poll<-kernel"), r.get("kernel<-kernel"), "p50"),
            ("RTT p99, Linux client", r.get("xdp-poll<-kernel"), r.get("kernel<-kernel"), "p99")]
    for n in (1, 1024):
        for c, name in (("xdp-poll", "flowplane client"), ("kernel", "Linux client")):
            rows.append((f"msgs/s n={n}, {name}", t.get(f"xdp-poll<-{c} n={n}"),
                         t.get(f"kernel<-{c} n={n}"), "msgs_per_s"))
            rows.append((f"server busy ns/msg n={n}, {name} (kernel / flowplane)",
                         t.get(f"kernel<-{c} n={n}"), t.get(f"xdp-poll<-{c} n={n}"),
                         "busy_ns_per_msg"))
    return [(l, a, b, k) for l, a, b, k in rows if a and b]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "echo"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rtt-count", type=int, default=20000)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--tag", default="fpbench")
    ap.add_argument("--quick", action="store_true", help="1 rep, short runs (a smoke test)")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's "
                    "echo.json and exit (no measurement)")
    a = ap.parse_args(argv)
    if a.render:
        res = json.loads(pathlib.Path(a.render).read_text())
        print(table(res, len(next(iter(res["rtt"].values())))))
        return 0
    if a.quick:
        a.reps, a.rtt_count, a.duration, a.warmup = 1, 2000, 1.0, 0.3
    if a.reps < 1 or a.conns < 1 or a.duration <= 0:
        ap.error("--reps, --conns and --duration must be positive")
    if os.geteuid() != 0:
        print("echo_bench.py: needs root (namespaces, AF_XDP)", file=sys.stderr)
        return 2
    res = Bench(a).run()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "echo.json").write_text(json.dumps(res, indent=1))
    md = table(res, a.reps)
    (out / "echo.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
