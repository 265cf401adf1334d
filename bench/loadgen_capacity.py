#!/usr/bin/env python3
"""fp-loadgen's own capacity: the highest rate one client core sustains with p99 send-slip < 5 µs.

The load generator issue's second figure, on both of the generator's transports:

  kernel   fp-loadgen --net kernel (Linux sockets) in the client namespace
  xdp      fp-loadgen --net xdp --if T-c0 --ip 10.88.0.2/24 (flowplane's stack on AF_XDP)

each pinned to CPU 1 (--cores 1, one worker), sending 64-byte echo requests open loop
(Poisson) over --conns connections to fp-echo server pinned to CPU 0 in the server
namespace (tools/netns.py's standard topology). The server for the xdp client is fp-echo
on AF_XDP, polling (10.88.0.1); for the kernel client it is the same AF_XDP server by default
(the faster of flowplane's two servers, so the server is less likely to be what runs out
first), or with --kernel-server kernel the kernel-transport fp-echo at 10.88.0.11.

A point passes when fp-loadgen's slip_us.p99 < --slip-us (5) and achieved >= 99% of
offered, with nothing dropped and no timeouts or errors. Rates climb geometrically from
--start by --factor until a point fails (a failing point is run once more before it counts:
one noisy second on a shared machine should not end a sweep; when --start itself fails the
rate halves down to --min until one passes), then --refine bisection steps between the last
pass and the first failure narrow it. The capacity is the last rate that
passed; the median over --reps sweeps is reported, and why the sweep stopped: "slip" (the
generator fell behind: that is its capacity), "rate" (achieved < 99% with the slip still
fine: the server or the path ran out first, so the generator's capacity is at least this),
or "max" (--max reached).

On a veth pair the receiving side's kernel work runs on the sender's CPU (and AF_XDP here is
copy mode in generic XDP), so the client core also pays for part of the server's receive
path: the numbers are this topology's, a lower bound for a NIC.

Writes results/loadgen/capacity.json and capacity.md.
"""
import argparse
import json
import math
import os
import pathlib
import shutil
import signal
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
        build = pathlib.Path(args.build)
        self.loadgen = build / "apps" / "loadgen" / "fp-loadgen"
        self.echo = build / "apps" / "echo" / "fp-echo"
        self.topo = Topo(args.tag)
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-lg-capacity-"))
        self.server = None

    # -- the echo server ------------------------------------------------------------------------

    def server_kind(self, transport):
        return "xdp" if transport == "xdp" else self.a.kernel_server

    def start_server(self, kind):
        t = self.topo
        if kind == "xdp":
            extra, addr = ["--net", "xdp", "--if", t.srv_if, "--ip", f"{t.fp_srv_ip}/24"], t.fp_srv_ip
        else:
            extra, addr = ["--net", "kernel", "--ip", t.srv_ip], t.srv_ip
        self.server = t.popen(t.srv_ns, [self.echo, "server", "--port", PORT, "--cores", 0,
                                         "--idle", "poll", "--stats", "none", *extra],
                              cpu=0, stdout=subprocess.DEVNULL)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"fp-echo server ({kind}) exited: "
                                   f"{self.server.stderr.read().strip()[-400:]}")
            if t.sh(t.cli_ns, "bash", "-c", f"exec 3<>/dev/tcp/{addr}/{PORT}",
                    check=False).returncode == 0:
                return addr
            time.sleep(0.2)
        raise RuntimeError(f"fp-echo server ({kind}) did not come up")

    def stop_server(self):
        p, self.server = self.server, None
        stop_process(p)

    # -- one point ----------------------------------------------------------------------------------

    def client_args(self, transport):
        t = self.topo
        if transport == "xdp":
            return ["--net", "xdp", "--if", t.cli_if, "--ip", f"{t.fp_cli_ip}/24"]
        return ["--net", "kernel"]

    def point(self, transport, addr, rate):
        out = self.tmp / "point.json"
        if out.exists():
            out.unlink()
        argv = [self.loadgen, "--server", f"{addr}:{PORT}", "--proto", "echo", "--size", self.a.size,
                "--rate", f"{rate:.0f}", "--conns", self.a.conns, "--depth", self.a.depth,
                "--warmup", self.a.warmup, "--duration", self.a.duration,
                "--max-slip-us", self.a.slip_us, "--cores", 1, "--idle", "poll",
                "--stats", "none", "--json", out, "--quiet", *self.client_args(transport),
                *self.a.loadgen_arg]
        r = subprocess.run(self.topo.cmd(self.topo.cli_ns, argv, cpu=1), capture_output=True,
                           text=True, timeout=self.a.warmup + self.a.duration + 120)
        if r.returncode != 0 or not out.exists():
            raise RuntimeError(f"fp-loadgen ({transport}) at {rate:.0f}/s failed "
                               f"({r.returncode}): {r.stderr.strip()[-600:]}")
        p = json.loads(out.read_text())["points"][0]
        return judge(p, rate, self.a.slip_us)

    def point_checked(self, transport, addr, rate):
        """One point; a failing one is run again (up to --retries) before it counts."""
        for attempt in range(self.a.retries + 1):
            pt = self.point(transport, addr, rate)
            pt["attempt"] = attempt + 1
            log(f"  {transport:6s} {rate:11,.0f}/s: achieved {pt['achieved_rps']:11,.0f}, slip p99 "
                f"{pt['slip_p99']:6.2f} us, latency p50 {pt['p50']:7.1f} p99 {pt['p99']:7.1f} us"
                f" -> {'ok' if pt['ok'] else 'no: ' + ', '.join(pt['why'])}")
            if pt["ok"]:
                break
        return pt

    # -- one sweep ----------------------------------------------------------------------------------

    def sweep(self, transport, addr):
        pts, good, bad = [], None, None
        rate = self.a.start
        while rate <= self.a.max:
            pt = self.point_checked(transport, addr, rate)
            pts.append(pt)
            if not pt["ok"]:
                bad = pt
                break
            good = pt
            rate *= self.a.factor
        rate = self.a.start / 2
        while good is None and rate >= self.a.min:   # --start was already too fast: go down
            pt = self.point_checked(transport, addr, rate)
            pts.append(pt)
            if pt["ok"]:
                good = pt
            else:
                bad = pt
                rate /= 2
        for _ in range(self.a.refine if bad and good else 0):
            mid = math.sqrt(good["target_rps"] * bad["target_rps"])
            if bad["target_rps"] / good["target_rps"] < 1.02:
                break
            pt = self.point_checked(transport, addr, mid)
            pts.append(pt)
            if pt["ok"]:
                good = pt
            else:
                bad = pt
        if bad is None:
            limit = "max"
        elif "slip" in bad["why"] or "dropped" in bad["why"]:
            limit = "slip"
        else:
            limit = "rate"
        return {"capacity_rps": good["target_rps"] if good else 0.0,
                "capacity_achieved_rps": good["achieved_rps"] if good else 0.0,
                "capacity_slip_p99": good["slip_p99"] if good else None,
                "limit": limit, "first_failure": bad, "points": pts}

    def run(self):
        res = {"config": {"transports": self.a.transports, "size": self.a.size,
                          "conns": self.a.conns, "depth": self.a.depth, "slip_us": self.a.slip_us,
                          "duration_s": self.a.duration, "warmup_s": self.a.warmup,
                          "start": self.a.start, "min": self.a.min, "factor": self.a.factor, "refine": self.a.refine,
                          "retries": self.a.retries, "reps": self.a.reps,
                          "kernel_server": self.a.kernel_server, "loadgen": str(self.loadgen)},
               "sweeps": {tr: [] for tr in self.a.transports}}
        with self.topo:
            try:
                for rep in range(self.a.reps):
                    for tr in self.a.transports:
                        log(f"rep {rep + 1}, {tr} client, {self.server_kind(tr)} server:")
                        addr = self.start_server(self.server_kind(tr))
                        try:
                            s = self.sweep(tr, addr)
                        finally:
                            self.stop_server()
                        res["sweeps"][tr].append(s)
                        log(f"rep {rep + 1} {tr}: capacity {s['capacity_rps']:,.0f}/s "
                            f"(stopped by {s['limit']})")
            finally:
                self.stop_server()
                shutil.rmtree(self.tmp, ignore_errors=True)
        res["summary"] = {tr: summarize(sw) for tr, sw in res["sweeps"].items()}
        return res


def judge(p, rate, slip_us):
    """The point's numbers and whether it passes (the reasons when not)."""
    why = []
    if p["slip_us"]["p99"] >= slip_us:
        why.append("slip")
    if p["achieved_rps"] < 0.99 * p["offered_rps"]:
        why.append("rate")
    for k in ("dropped", "timeouts", "errors"):
        if p[k]:
            why.append(k)
    lat = p["latency_us"]
    return {"target_rps": rate, "offered_rps": p["offered_rps"], "achieved_rps": p["achieved_rps"],
            "slip_p50": p["slip_us"]["p50"], "slip_p99": p["slip_us"]["p99"],
            "slip_max": p["slip_us"]["max"], "p50": lat["p50"], "p99": lat["p99"],
            "dropped": p["dropped"], "timeouts": p["timeouts"], "errors": p["errors"],
            "loadgen_valid": bool(p["valid"]), "loadgen_reasons": p.get("invalid_reasons", []),
            "ok": not why, "why": why}


def summarize(sweeps):
    caps = [s["capacity_rps"] for s in sweeps]
    limits = [s["limit"] for s in sweeps]
    return {"capacity_rps": statistics.median(caps), "per_rep": caps, "limits": limits,
            "limit": max(set(limits), key=limits.count)}


LIMIT_TEXT = {"slip": "the generator's slip (its capacity)",
              "rate": "achieved < 99% with slip fine: server or path ran out first (capacity >= this)",
              "max": "--max reached (capacity >= this)"}


def table(res):
    c = res["config"]
    out = [f"fp-loadgen on one client core (CPU 1, one worker, polling), echo {c['size']} B, open "
           f"loop (Poisson), {c['conns']} connections, depth {c['depth']}; {c['warmup_s']} s warm-up"
           f" + {c['duration_s']} s per point. Server: fp-echo on CPU 0 (AF_XDP, polling"
           + ("" if c["kernel_server"] == "xdp" else "; the kernel client's: the kernel transport")
           + f"). A point passes with slip p99 < {c['slip_us']} µs, achieved >= 99% of offered, "
           f"nothing dropped, no timeouts or errors. Median of {c['reps']} sweeps.", "",
           "| client transport | capacity req/s | per sweep | stopped by |", "|---|---|---|---|"]
    for tr, s in res["summary"].items():
        out.append(f"| {tr} | {s['capacity_rps']:,.0f} | "
                   f"{' '.join(f'{x:,.0f}' for x in s['per_rep'])} | {LIMIT_TEXT[s['limit']]} |")
    out += ["", "Sweep points:", "",
            "| transport | sweep | offered req/s | achieved req/s | slip p50 / p99 / max µs "
            "| latency p50 / p99 µs | pass |", "|---|---|---|---|---|---|---|"]
    for tr, sweeps in res["sweeps"].items():
        for i, s in enumerate(sweeps):
            for p in sorted(s["points"], key=lambda p: p["target_rps"]):
                out.append(f"| {tr} | {i + 1} | {p['target_rps']:,.0f} | {p['achieved_rps']:,.0f} | "
                           f"{p['slip_p50']:.2f} / {p['slip_p99']:.2f} / {p['slip_max']:.1f} | "
                           f"{p['p50']:.1f} / {p['p99']:.1f} | "
                           f"{'yes' if p['ok'] else 'no: ' + ', '.join(p['why'])} |")
    return "\n".join(out) + "\n"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_rate(s):
    s = str(s).strip()
    mul = {"k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6}.get(s[-1:], 1)
    return float(s[:-1] if mul != 1 else s) * mul


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build" / "release"),
                    help="flowplane build dir (fp-loadgen, fp-echo; default build/release)")
    ap.add_argument("--out", default=str(ROOT / "results" / "loadgen"))
    ap.add_argument("--transports", default="kernel,xdp", help="kernel,xdp (default both)")
    ap.add_argument("--kernel-server", choices=["xdp", "kernel"], default="xdp",
                    help="the kernel client's server: fp-echo on AF_XDP (default) or on the "
                    "kernel transport at 10.88.0.11")
    ap.add_argument("--reps", type=int, default=3, help="sweeps per transport (default 3)")
    ap.add_argument("--start", type=parse_rate, default=parse_rate("25k"),
                    help="first rate (default 25k)")
    ap.add_argument("--factor", type=float, default=1.25, help="rate step (default x1.25)")
    ap.add_argument("--max", type=parse_rate, default=parse_rate("20M"), help="highest rate tried")
    ap.add_argument("--min", type=parse_rate, default=parse_rate("1k"),
                    help="lowest rate tried when --start already fails (halving; default 1k)")
    ap.add_argument("--refine", type=int, default=3, help="bisection steps after the first failure")
    ap.add_argument("--retries", type=int, default=1, help="re-runs of a failing point (default 1)")
    ap.add_argument("--slip-us", type=float, default=5.0, help="slip p99 bound (default 5)")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds per point")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--loadgen-arg", action="append", default=[], metavar="ARG",
                    help="an extra argument for fp-loadgen (repeatable)")
    ap.add_argument("--tag", default="lgc", help="netns tag (default lgc)")
    ap.add_argument("--quick", action="store_true", help="1 sweep, x1.5 steps, 1 refinement, "
                    "1 s points (a smoke test)")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's "
                    "capacity.json and exit (no measurement)")
    a = ap.parse_args(argv)
    if a.render:
        print(table(json.loads(pathlib.Path(a.render).read_text())))
        return 0
    a.transports = [t for t in a.transports.split(",") if t]
    if any(t not in ("kernel", "xdp") for t in a.transports) or not a.transports:
        ap.error("--transports: kernel, xdp or both")
    if a.quick:
        a.reps, a.factor, a.refine, a.duration, a.warmup = 1, 1.5, 1, 1.0, 0.5
    if a.reps < 1 or a.conns < 1 or a.duration <= 0 or a.factor <= 1 or a.start <= 0:
        ap.error("--reps, --conns, --duration, --start must be positive, --factor > 1")
    for exe in ("apps/loadgen/fp-loadgen", "apps/echo/fp-echo"):
        if not (pathlib.Path(a.build) / exe).exists():
            print(f"loadgen_capacity.py: no {exe} in {a.build}", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("loadgen_capacity.py: needs root (namespaces, AF_XDP)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        res = Bench(a).run()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"loadgen_capacity.py: {e}", file=sys.stderr)
        return 1
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(res, indent=1))
    md = table(res)
    (out / "capacity.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
