#!/usr/bin/env python3
"""fp-web against nginx: the same files, wrk as the client (issue 20).

On the standard topology (tools/netns.py) the server namespace runs, one at a time and
pinned to --server-cpu (0),

    nginx      Debian's nginx-light, one worker process, sendfile on, keep-alive, no
               access log, on Linux sockets (10.88.0.11); tcp_nopush is off: with it,
               4 KB files ran at a quarter of the rate here (the cork waits on the veth)
    nginx-copy the same with sendfile off: on this veth (checksum offload off) copying
               beats sendfile, so the ratios are taken against the faster of the two
               nginx in each round and size (and the CPU against the cheaper)
    fp-kernel  fp-web on flowplane's kernel transport (io_uring, 10.88.0.11)
    fp-xdp     fp-web on flowplane's own stack over AF_XDP (10.88.0.1)

and the client namespace runs wrk (Debian's; a tool flowplane did not write) pinned to
--client-cpu (1), --conns keep-alive connections, for --duration seconds, per file size
(--sizes: 100 B, 4 KB, 64 KB, 1 MB). The servers are measured in interleaved rounds
(nginx, fp-kernel, fp-xdp, then again; --rounds, default 3). Per run: requests per
second, transfer rate, wrk's latency percentiles (closed loop: at the load the
connections make, not at a chosen rate), the server core's busy time per request and
where it went (user, system, softirq; on a veth the sender's core also runs the
receiver's softirq), the client core's load, and steal time. wrk's one thread on Linux
sockets is the limit for fp-web's small files (its core is then 98-100% busy), so for
the sizes in --xdp-client-sizes (100 B and 4 KB) each server is also saturated by
fp-loadgen's http on its own stack over AF_XDP in the client namespace (10.88.0.2),
closed loop, one request in flight per connection. Then, for the sizes in
--latency-sizes, p99
against load: fp-loadgen's http protocol (open loop, Poisson arrivals, latency from the
scheduled send, its own slip and rate checks; on Linux sockets in the client namespace)
at --loads, fractions of the round's faster nginx under wrk (the same rates for every
server; nginx runs first in each round). Each figure is the median over rounds with its
min-max; a ratio against nginx is computed within a round and called a win or a loss
only when its whole range is on one side of 1, else "within noise".
Writes OUT/runs.json, OUT/summary.json, OUT/summary.md and OUT/web.png (p99 against the
achieved rate, per size, invalid points hollow).

Without root (--loopback): nginx and fp-kernel on 127.0.0.1, no namespaces, no AF_XDP.
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
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
from netns import Topo, stop_process  # noqa: E402
from dns_bench import cpu_times, core_split, steal_jiffies, med, verdict, fmt  # noqa: E402

SERVERS = ("nginx", "nginx-copy", "fp-kernel", "fp-xdp")
NGINX = ("nginx", "nginx-copy")


def log(msg):
    print(f"[web_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def size_name(n):
    return f"{n >> 20}m" if n >= 1 << 20 else f"{n >> 10}k" if n >= 1024 else f"{n}b"


class Bench:
    def __init__(self, a):
        self.a = a
        self.build = pathlib.Path(a.build)
        self.topo = None if a.loopback else Topo("fpweb")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-web-bench-"))
        self.tmp.chmod(0o755)            # nginx's worker runs as nobody
        self.www = self.tmp / "www"
        self.www.mkdir()
        rnd = random.Random(3)
        for n in a.sizes:
            (self.www / f"{size_name(n)}.bin").write_bytes(rnd.randbytes(n))

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
            return self.topo.cmd(self.topo.srv_ns if side == "srv" else self.topo.cli_ns, args, cpu)
        return ["taskset", "-c", str(cpu)] + [str(x) for x in args]

    def addr(self, server):
        if not self.topo:
            return "127.0.0.1", 8080 if server in NGINX else 8081
        return (self.topo.fp_srv_ip if server == "fp-xdp" else self.topo.srv_ip), 80

    def nginx_conf(self, ip, port, sendfile):
        conf = self.tmp / "nginx.conf"
        conf.write_text(f"""worker_processes 1;
daemon off;
pid {self.tmp}/nginx.pid;
error_log {self.tmp}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile {"on" if sendfile else "off"};
    tcp_nopush off;
    keepalive_timeout 75;
    keepalive_requests 100000000;
    client_body_temp_path {self.tmp}/body;
    proxy_temp_path {self.tmp}/proxy;
    fastcgi_temp_path {self.tmp}/fastcgi;
    uwsgi_temp_path {self.tmp}/uwsgi;
    scgi_temp_path {self.tmp}/scgi;
    types {{ application/octet-stream bin; }}
    server {{ listen {ip}:{port}; root {self.www}; }}
}}
""")
        return conf

    def start(self, server):
        ip, port = self.addr(server)
        fp = self.build / "apps" / "web" / "fp-web"
        if server in NGINX:
            argv = ["nginx", "-c", self.nginx_conf(ip, port, server == "nginx"), "-p", self.tmp]
        elif server == "fp-kernel":
            argv = [fp, "--root", self.www, "--port", port, "--net", "kernel", "--ip", ip,
                    "--stats", "none"]
        else:
            argv = [fp, "--root", self.www, "--port", port, "--if", self.topo.srv_if,
                    "--ip", f"{ip}/24", "--stats", "none"]
        p = subprocess.Popen(self.cmd("srv", argv, self.a.server_cpu), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        name = f"{size_name(self.a.sizes[0])}.bin"
        for _ in range(300):
            if p.poll() is not None:
                raise RuntimeError(f"{server} exited {p.returncode}: {p.stderr.read()[-500:]}")
            r = subprocess.run(self.cmd("cli", ["curl", "-s", "-f", "-o", "/dev/null", "-m", "1",
                                                f"http://{ip}:{port}/{name}"], self.a.client_cpu),
                               capture_output=True)
            if r.returncode == 0:
                return p, ip, port
            time.sleep(0.2)
        self.stop(p)                     # not left running behind the error
        raise RuntimeError(f"{server} did not answer within 60 s")

    def stop(self, p):
        stop_process(p, signal.SIGINT, 15)   # nginx: fast shutdown; the others: stop

    def loadgen(self, ip, port, size, rates):
        """p99 at each rate (fp-loadgen --proto http): a list of points from its JSON."""
        js = self.tmp / "lg.json"
        argv = [self.build / "apps" / "loadgen" / "fp-loadgen", "--server", f"{ip}:{port}",
                "--proto", "http", "--path", f"/{size_name(size)}.bin", "--rates",
                ",".join(str(int(r)) for r in rates), "--duration", self.a.duration,
                "--warmup", "1", "--conns", self.a.conns, "--cores", self.a.client_cpu,
                "--stats", "none", "--quiet", "--json", js]
        r = subprocess.run(self.cmd("cli", argv, None), capture_output=True, text=True,
                           timeout=(self.a.duration + 3) * len(rates) + 60)
        if r.returncode != 0:
            raise RuntimeError(f"fp-loadgen failed: {r.stderr[-400:]}")
        pts = json.loads(js.read_text())["points"]
        return [{"target_rps": p["target_rps"], "achieved_rps": p["achieved_rps"],
                 "latency_us": p["latency_us"], "errors": p["errors"], "timeouts": p["timeouts"],
                 "valid": p["valid"], "invalid_reasons": p.get("invalid_reasons", [])}
                for p in pts]

    def lg_xdp(self, ip, port, size):
        """Saturation with a client wrk is not: fp-loadgen's http on its own stack over
        AF_XDP in the client namespace (10.88.0.2), closed loop, one request in flight on
        each of --conns connections."""
        js = self.tmp / "lgx.json"
        argv = [self.build / "apps" / "loadgen" / "fp-loadgen", "--server", f"{ip}:{port}",
                "--proto", "http", "--path", f"/{size_name(size)}.bin", "--closed", "1",
                "--conns", self.a.conns, "--duration", self.a.duration, "--warmup", "1",
                "--if", self.topo.cli_if, "--ip", f"{self.topo.fp_cli_ip}/24",
                "--cores", self.a.client_cpu, "--stats", "none", "--quiet", "--json", js]
        s0, c0 = steal_jiffies(), cpu_times(self.a.server_cpu)
        r = subprocess.run(self.cmd("cli", argv, None), capture_output=True, text=True,
                           timeout=self.a.duration + 60)
        s1, c1 = steal_jiffies(), cpu_times(self.a.server_cpu)
        if r.returncode != 0:
            raise RuntimeError(f"fp-loadgen over AF_XDP failed: {r.stderr[-400:]}")
        pt = json.loads(js.read_text())["points"][0]
        out = {"rps": pt["achieved_rps"], "completed": pt["completed"], "errors": pt["errors"],
               "timeouts": pt["timeouts"], "p99_us": pt["latency_us"]["p99"],
               "steal": (s1[0] - s0[0]) / max(1, s1[1] - s0[1]),
               "server_core": core_split(c0, c1)}
        jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
        # the server's core over the warm-up and the measurement, both at this load
        out["server_cpu_us_per_req"] = (c1[0] - c0[0]) * jiffy * 1e6 / max(1, pt["completed"] * (
            self.a.duration + 1) / self.a.duration)
        return out

    def wrk(self, ip, port, size):
        url = f"http://{ip}:{port}/{size_name(size)}.bin"
        argv = ["wrk", "-t", "1", "-c", self.a.conns, "-d", f"{self.a.duration}s", "--latency", url]
        s0, c0, k0 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        r = subprocess.run(self.cmd("cli", argv, self.a.client_cpu), capture_output=True,
                           text=True, timeout=self.a.duration + 60)
        s1, c1, k1 = steal_jiffies(), cpu_times(self.a.server_cpu), cpu_times(self.a.client_cpu)
        if r.returncode != 0:
            raise RuntimeError(f"wrk failed: {r.stderr[-400:]}")
        out = parse_wrk(r.stdout)
        out["steal"] = (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
        out["server_core"] = core_split(c0, c1)
        out["client_core"] = core_split(k0, k1)   # near 100%: wrk measures itself
        jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
        out["server_cpu_us_per_req"] = (c1[0] - c0[0]) * jiffy * 1e6 / max(1, out.get("requests", 0))
        return out


UNITS = {"us": 1, "ms": 1e3, "s": 1e6}


def parse_wrk(text):
    out = {}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", text)
    if m:
        out["requests"] = int(m.group(1))
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    out["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: (.*)", text)
    out["socket_errors"] = m.group(1).strip() if m else ""
    lat = {}
    for p, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        lat[f"p{p}"] = float(v) * UNITS[u]
    out["latency_us"] = lat
    return out


def run(a):
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = [s for s in a.servers.split(",") if not (a.loopback and s == "fp-xdp")]
    runs, lat, xruns = [], [], []
    total = a.rounds * len(servers) * (2 if a.latency_sizes else 1)
    done, t0 = 0, time.time()
    with Bench(a) as b:
        for rnd in range(a.rounds):
            # wrk for every server first, so the loads below are the same for all
            for phase in ("wrk", "loadgen") if a.latency_sizes else ("wrk",):
                for server in servers:
                    done += 1
                    left = (time.time() - t0) / (done - 1) * (total - done + 1) if done > 1 else 0
                    log(f"round {rnd + 1}/{a.rounds}, {server}, {phase} ({done}/{total}; about "
                        f"{left / 60:.0f} min left)")
                    p, ip, port = b.start(server)
                    try:
                        if phase == "wrk":
                            wrk_all(b, a, runs, rnd, server, ip, port)
                            if not a.loopback:
                                for size in a.xdp_client_sizes:
                                    x = b.lg_xdp(ip, port, size)
                                    x.update(round=rnd, server=server, size=size)
                                    xruns.append(x)
                                    log(f"  {size_name(size)} (AF_XDP client): {x['rps']:.0f} req/s, "
                                        f"{x['server_cpu_us_per_req']:.1f} us of server core per request")
                        else:
                            loadgen_all(b, a, runs, lat, rnd, server, ip, port)
                    finally:
                        b.stop(p)
                    (out / "runs.json").write_text(json.dumps({"wrk": runs, "loadgen": lat,
                                                               "xdp_client": xruns}, indent=1))
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": socket.gethostname(),
            "cpus": os.cpu_count(), "command": " ".join(sys.argv), "rounds": a.rounds,
            "duration_s": a.duration, "conns": a.conns}
    summary = summarise(runs, servers, a.sizes)
    xsummary = summarise(xruns, servers, a.xdp_client_sizes, client_core=False) if xruns else None
    lsum = summarise_latency(lat, servers, a.latency_sizes, a.loads)
    (out / "summary.json").write_text(json.dumps({"meta": meta, "summary": summary,
                                                  "xdp_client": xsummary, "latency": lsum},
                                                 indent=1))
    md = markdown(summary, servers, a.sizes, meta) + xdp_markdown(xsummary, servers,
                                                                    a.xdp_client_sizes) \
        + latency_markdown(lsum, servers, a.latency_sizes, a.loads)
    (out / "summary.md").write_text(md)
    plot(lat, servers, a.latency_sizes, out / "web.png")
    print(md)


def summarise(runs, servers, sizes, client_core=True):
    s = {}
    for size in sizes:
        for server in servers:
            rs = [r for r in runs if r["size"] == size and r["server"] == server]
            e = {"rps": med([r.get("rps") for r in rs]),
                 "p99_us": med([r["latency_us"].get("p99") if "latency_us" in r else r.get("p99_us")
                                for r in rs]),
                 "cpu_us_per_req": med([r["server_cpu_us_per_req"] for r in rs]),
                 "core": {k: med([r["server_core"][k] for r in rs]) for k in ("user", "system", "softirq")},
                 "client_busy": med([r["client_core"]["busy"] for r in rs if r.get("client_core")])
                 if client_core else None,
                 "non_2xx": sum(r.get("non_2xx", 0) for r in rs),
                 "socket_errors": sorted({r["socket_errors"] for r in rs if r.get("socket_errors")}),
                 "errors": sum(r.get("errors", 0) + r.get("timeouts", 0) for r in rs)}
            if server not in NGINX:
                for key, field, best in (("rps_vs_nginx", "rps", max),
                                         ("cpu_vs_nginx", "server_cpu_us_per_req", min)):
                    ratios = []
                    for r in rs:
                        base = [x[field] for x in runs if x["size"] == size and x["server"] in NGINX
                                and x["round"] == r["round"] and x.get(field)]
                        if base and r.get(field):
                            ratios.append(r[field] / best(base))
                    e[key] = med(ratios)
                e["verdict"] = verdict(e["rps_vs_nginx"])
                c = e["cpu_vs_nginx"]
                e["cpu_verdict"] = "less" if c and c["max"] < 1 else "more" if c and c["min"] > 1 else "within noise"
            s[f"{size}/{server}"] = e
    return s


def wrk_all(b, a, runs, rnd, server, ip, port):
    for size in a.sizes:
        r = b.wrk(ip, port, size)
        r.update(round=rnd, server=server, size=size)
        runs.append(r)
        log(f"  {size_name(size)}: {r.get('rps', 0):.0f} req/s, p99 "
            f"{r['latency_us'].get('p99', 0):.0f} us, {r['server_cpu_us_per_req']:.1f} "
            f"us of server core per request")


def loadgen_all(b, a, runs, lat, rnd, server, ip, port):
    for size in a.latency_sizes:
        base = max((x.get("rps", 0) for x in runs if x["round"] == rnd and
                    x["size"] == size and x["server"] in NGINX), default=0)
        if not base:
            continue
        pts = b.loadgen(ip, port, size, [base * f for f in a.loads])
        for f, pt in zip(a.loads, pts):
            pt.update(fraction=f)
        lat.append({"round": rnd, "server": server, "size": size, "points": pts})
        log(f"  {size_name(size)} p99 at " + ", ".join(
            f"{pt['target_rps']:.0f}/s: {pt['latency_us']['p99'] or 0:.0f} us"
            f"{'' if pt['valid'] else ' (invalid)'}" for pt in pts))


def summarise_latency(lat, servers, sizes, loads):
    s = {}
    for size in sizes:
        for server in servers:
            for f in loads:
                pts = [p for r in lat if r["size"] == size and r["server"] == server
                       for p in r["points"] if p["fraction"] == f]
                ok = [p for p in pts if p["valid"]]
                s[f"{size}/{server}/{f}"] = {
                    "target_rps": med([p["target_rps"] for p in pts]),
                    "p50_us": med([p["latency_us"]["p50"] for p in ok]),
                    "p99_us": med([p["latency_us"]["p99"] for p in ok]),
                    "valid": f"{len(ok)}/{len(pts)}",
                    "invalid_reasons": sorted({x for p in pts for x in p["invalid_reasons"]})}
    return s


def latency_markdown(s, servers, sizes, loads):
    if not sizes:
        return ""
    lines = ["", "p99 against load (fp-loadgen --proto http, Poisson, latency from the scheduled "
             "send; the rates are fractions of the round's faster nginx under wrk):", "",
             "| file | server | " + " | ".join(f"p99 us at {f:g}x [valid]" for f in loads) + " |",
             "|---|---|" + "---|" * len(loads)]
    for size in sizes:
        for server in servers:
            cells = []
            for f in loads:
                e = s[f"{size}/{server}/{f}"]
                cells.append(f"{fmt(e['p99_us'])} at {fmt(e['target_rps'], 1e-3, 0)}k [{e['valid']}]")
            lines.append(f"| {size_name(size)} | {server} | " + " | ".join(cells) + " |")
    reasons = sorted({r for e in s.values() for r in e["invalid_reasons"]})
    if reasons:
        lines += ["", "Invalid points' reasons: " + "; ".join(reasons)]
    return "\n".join(lines) + "\n"


def plot(lat, servers, sizes, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    if not sizes:
        return
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        for k, server in enumerate(servers):
            pts = [p for r in lat if r["size"] == size and r["server"] == server for p in r["points"]
                   if p["latency_us"]["p99"]]
            color = f"C{k}"
            for valid in (True, False):
                sel = [p for p in pts if p["valid"] == valid]
                ax.scatter([p["achieved_rps"] / 1e3 for p in sel], [p["latency_us"]["p99"] for p in sel],
                           s=14, label=server if valid else None, edgecolors=color,
                           facecolors=color if valid else "none")
        ax.set_title(f"{size_name(size)} files (fp-loadgen, open loop)")
        ax.set_xlabel("achieved k req/s")
        ax.set_ylabel("p99 latency (us)")
        ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def row(size, server, e, closed_loop_p99):
    """One table row: rate, ratio, (p99), CPU, ratio, where the core went, (client core)."""
    core = "/".join(f"{e['core'][k]['median']:.0%}" for k in ("user", "system", "softirq")) \
        if e["core"]["user"] else "-"
    cells = [size_name(size), server, fmt(e["rps"], 1e-3, 1),
             f"{fmt(e.get('rps_vs_nginx'), 1, 2)} {e['verdict']}" if "verdict" in e else ""]
    if closed_loop_p99:
        cells.append(fmt(e["p99_us"]))
    cells += [fmt(e["cpu_us_per_req"], 1, 1),
              f"{fmt(e.get('cpu_vs_nginx'), 1, 2)} {e['cpu_verdict']}" if "cpu_verdict" in e else "",
              core]
    if closed_loop_p99:
        cells.append(fmt(e["client_busy"], 100) + "%" if e["client_busy"] else "-")
    return "| " + " | ".join(cells) + " |"


def xdp_markdown(s, servers, sizes):
    if not s:
        return ""
    lines = ["", "Saturation with a client that wrk is not (fp-loadgen --proto http on its own stack "
             "over AF_XDP in the client namespace, closed loop, one request in flight per "
             "connection):", "",
             "| file | server | req/s (k) | vs the faster nginx | server core us/req | "
             "vs the cheaper nginx | core busy: user/sys/softirq |", "|---|---|---|---|---|---|---|"]
    lines += [row(size, server, s[f"{size}/{server}"], False) for size in sizes for server in servers]
    errs = sum(e["errors"] for e in s.values())
    lines += ["", f"Errors and timeouts in these runs: {errs}."]
    return "\n".join(lines) + "\n"


def markdown(s, servers, sizes, meta):
    lines = [f"fp-web vs nginx, {meta['date']}, {meta['host']} ({meta['cpus']} CPUs), "
             f"{meta['rounds']} interleaved rounds, wrk -t1 -c{meta['conns']} "
             f"{meta['duration_s']} s per run: `{meta['command']}`", "",
             "| file | server | req/s (k) | vs the faster nginx | p99 us (closed loop) | server core us/req | vs the cheaper nginx | core busy: user/sys/softirq | client core busy |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [row(size, server, s[f"{size}/{server}"], True) for size in sizes for server in servers]
    errs = [f"{k}: non-2xx {e['non_2xx']}, socket errors {e['socket_errors']}" for k, e in s.items()
            if e["non_2xx"] or e["socket_errors"]]
    lines += ["", "Medians over rounds (min-max)." + (" Errors: " + "; ".join(errs) if errs else " No errors.")]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="100,4096,65536,1048576",
                    help="file sizes in bytes (100,4096,65536,1048576)")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--conns", type=int, default=64, help="wrk -c (64)")
    ap.add_argument("--xdp-client-sizes", default="100,4096",
                    help="file sizes also measured with fp-loadgen on AF_XDP as the client "
                    "(closed loop; '' for none)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (5)")
    ap.add_argument("--latency-sizes", default="100,4096",
                    help="file sizes measured for p99 against load (100,4096; '' for none)")
    ap.add_argument("--loads", default="0.1,0.5,0.9",
                    help="fp-loadgen rates, fractions of the faster nginx under wrk")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--loopback", action="store_true", help="no root: 127.0.0.1, no AF_XDP")
    ap.add_argument("--out", default=str(ROOT / "results" / "web"))
    a = ap.parse_args()
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.latency_sizes = [int(x) for x in a.latency_sizes.split(",") if x]
    a.xdp_client_sizes = [int(x) for x in a.xdp_client_sizes.split(",") if x]
    a.loads = [float(x) for x in a.loads.split(",")]
    if not set(a.xdp_client_sizes) <= set(a.sizes):
        ap.error("--xdp-client-sizes must be among --sizes (the files served)")
    if not set(a.latency_sizes) <= set(a.sizes):
        ap.error("--latency-sizes must be among --sizes (their nginx rate sets the loads)")
    if not a.loopback and os.geteuid() != 0:
        ap.error("the namespace topology needs root; --loopback runs without it")
    try:
        run(a)
    except KeyboardInterrupt:
        log("interrupted: what was measured is in runs.json")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
