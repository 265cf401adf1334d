#!/usr/bin/env python3
"""fp-loadgen against mutilate: both tools drive the same memcached at the same rates, in one run.

The load generator issue's agreement figure. A real memcached 1.6 (/usr/bin/memcached -t 1
-U 0) listens on the server namespace's kernel address (10.88.0.11), pinned to CPU 0; each
client runs in the client namespace pinned to CPU 1 (tools/netns.py's standard topology).

  1. mutilate --loadonly stores its key set (fp-loadgen preloads its own keys itself, each
     run: the two tools name their keys differently, and a GET that misses is a shorter
     answer, so both must hit).
  2. Saturation: mutilate's closed-loop peak (-q 0) with the same connections, one request
     in flight on each (as in the open-loop points); the rates measured are fractions of it
     (default 10% to 70%), or --saturation / --rates given by hand. With one client core
     this is the saturation of the pair (memcached on CPU 0, a client on CPU 1): the CPUs'
     busy shares during the peak run are recorded to say which one ran out.
  3. For each repetition, for each rate: mutilate and fp-loadgen one after the other
     (which goes first alternates), the USR workload (19-byte keys, 2-byte values, 0.2%
     SETs, 10,000 records), open loop (Poisson), the same number of connections, depth 1.

mutilate prints avg/std/min/5th/10th/90th/95th/99th of its GETs from a 10%-wide log
histogram and no median, so its percentiles here come from its raw GET samples (--save),
exact order statistics; the printed line is kept alongside for a cross-check. fp-loadgen's
come from its --json.

One difference of method remains and is worth knowing when reading p99: mutilate's
connection holds a request that comes due while the previous one is still in flight and
measures from the moment it is sent; fp-loadgen measures from the scheduled time, so that
wait counts (coordinated omission is not hidden). More connections make the wait rarer
(--conns, default 32).

Pass: at every rate (all below saturation), p50 within 10% and p99 within 25% of
mutilate's (ratios of the medians over --reps). Writes results/loadgen/vs_mutilate.json
and vs_mutilate.md. Exit status: 0 pass, 3 fail, 1 a run error, 2 bad arguments.

mutilate is built outside the repository (none of it is committed), on Debian 12:
  apt-get install -y scons libevent-dev libzmq3-dev gengetopt
  git clone https://github.com/leverich/mutilate /tmp/mutilate && cd /tmp/mutilate
  (or the fetch tool's mirror: git --git-dir=MIRROR archive HEAD | tar -x -C /tmp/mutilate)
  two patches: SConstruct's python2 `print "..."` statements become print("...") calls
  (scons runs on python3), and in Generator.cc createGenerator() must not call
  strtok_r(NULL, ",", &saveptr) with saveptr NULL when a spec has no ':' (the default
  --iadist=exponential; today's glibc crashes there, so every -q run segfaults):
    char *s1 = a_ptr ? strtok_r(a_ptr, ",", &saveptr) : NULL;
    char *s2 = s1 ? strtok_r(NULL, ",", &saveptr) : NULL;
    char *s3 = s2 ? strtok_r(NULL, ",", &saveptr) : NULL;
  then `scons`; the binary is /tmp/mutilate/mutilate.
"""
import argparse
import json
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

PORT = 11211
RECORDS = 10000
KEYSIZE, VALUESIZE, UPDATE = 19, 2, 0.002
P50_TOL, P99_TOL = 0.10, 0.25
DEFAULT_FRACTIONS = (0.10, 0.25, 0.40, 0.55, 0.70)


class Bench:
    def __init__(self, args):
        self.a = args
        self.loadgen = pathlib.Path(args.build) / "apps" / "loadgen" / "fp-loadgen"
        self.mutilate = pathlib.Path(args.mutilate)
        self.topo = Topo(args.tag)
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp-lg-vs-mutilate-"))
        self.server = None
        self.memcached_version = ""

    # -- memcached --------------------------------------------------------------------------

    def start_memcached(self):
        t = self.topo
        self.memcached_version = subprocess.run(
            [self.a.memcached, "-V"], capture_output=True, text=True).stdout.strip()
        self.server = t.popen(t.srv_ns, [self.a.memcached, "-t", 1, "-U", 0, "-l", t.srv_ip,
                                         "-p", PORT, "-m", 1024, "-c", 4096, "-u", "root"],
                              cpu=0, stdout=subprocess.DEVNULL)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"memcached exited: {self.server.stderr.read().strip()}")
            if t.sh(t.cli_ns, "bash", "-c", f"exec 3<>/dev/tcp/{t.srv_ip}/{PORT}",
                    check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("memcached did not come up")

    def stop_server(self):
        p, self.server = self.server, None
        stop_process(p, signal.SIGTERM)

    # -- the two clients ----------------------------------------------------------------------

    def mutilate_argv(self, extra):
        return [self.mutilate, "-s", f"{self.topo.srv_ip}:{PORT}", f"--keysize={KEYSIZE}",
                f"--valuesize={VALUESIZE}", f"--update={UPDATE}", f"--records={RECORDS}",
                "-T", 1, *extra]

    def run_client(self, argv, what, timeout):
        r = subprocess.run(self.topo.cmd(self.topo.cli_ns, argv, cpu=1), capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{what} failed ({r.returncode}): "
                               f"{(r.stderr.strip() or r.stdout.strip())[-600:]}")
        return r

    def mutilate_load(self):
        self.run_client(self.mutilate_argv(["--loadonly"]), "mutilate --loadonly", 120)

    def saturation(self):
        """mutilate's closed-loop peak and the two CPUs' busy shares while it ran."""
        c0, c1 = cpu_times(0), cpu_times(1)
        r = self.run_client(self.mutilate_argv(["--noload", "-q", 0, "-c", self.a.conns, "-d", 1,
                                                "-t", self.a.duration]),
                            "mutilate peak", self.a.duration + 120)
        d0, d1 = cpu_times(0), cpu_times(1)
        m = parse_mutilate(r.stdout)
        return {"peak_rps": m["achieved_rps"], "conns": self.a.conns, "depth": 1,
                "cpu0_busy_pct": busy_pct(c0, d0), "cpu1_busy_pct": busy_pct(c1, d1)}

    def mutilate_point(self, rate):
        save = self.tmp / "mutilate.samples"
        if save.exists():
            save.unlink()
        r = self.run_client(self.mutilate_argv([
            "--noload", "-q", int(round(rate)), "-c", self.a.conns, "-d", 1,
            "-t", self.a.duration, "-w", self.a.warmup, f"--save={save}"]),
            f"mutilate at {rate:.0f}/s", self.a.duration + self.a.warmup + 120)
        m = parse_mutilate(r.stdout)
        samples = sorted(float(line.split()[1]) for line in save.read_text().splitlines()
                         if line.strip())
        m.update(order_stats(samples))
        m["target_rps"] = rate
        m["misses_pct"] = 100.0 * m["misses"] / max(1, m["gets"])
        m["valid"] = m["achieved_rps"] >= 0.99 * rate
        return m

    def loadgen_point(self, rate):
        out = self.tmp / "loadgen.json"
        if out.exists():
            out.unlink()
        argv = [self.loadgen, "--server", f"{self.topo.srv_ip}:{PORT}", "--proto", "memcache",
                "--workload", "usr", "--records", RECORDS, "--rate", f"{rate:.0f}",
                "--conns", self.a.conns, "--depth", 1, "--warmup", self.a.warmup,
                "--duration", self.a.duration, "--cores", 1, "--net", "kernel",
                "--stats", "none", "--json", out, "--quiet", *self.a.loadgen_arg]
        self.run_client(argv, f"fp-loadgen at {rate:.0f}/s", self.a.duration + self.a.warmup + 120)
        j = json.loads(out.read_text())
        p = j["points"][0]
        lat = p["latency_us"]
        n = p["ok"] + p["misses"]
        return {"target_rps": rate, "offered_rps": p["offered_rps"],
                "achieved_rps": p["achieved_rps"], "avg": lat["mean"], "p50": lat["p50"],
                "p90": lat["p90"], "p99": lat["p99"], "p999": lat["p999"], "max": lat["max"],
                "errors": p["errors"], "timeouts": p["timeouts"], "dropped": p["dropped"],
                "misses_pct": 100.0 * p["misses"] / max(1, n), "slip_p99": p["slip_us"]["p99"],
                "p50_sent": p["latency_from_send_us"]["p50"],
                "p99_sent": p["latency_from_send_us"]["p99"],
                "p99_ci": p.get("p99_ci_us"), "valid": bool(p["valid"]),
                "invalid_reasons": p.get("invalid_reasons", []),
                "workload": j.get("config", {}).get("workload_desc", "")}

    # -- the run --------------------------------------------------------------------------------

    def run(self):
        res = {"config": {"conns": self.a.conns, "duration_s": self.a.duration,
                          "warmup_s": self.a.warmup, "reps": self.a.reps,
                          "workload": f"USR: key {KEYSIZE} B, value {VALUESIZE} B, "
                                      f"{100 * (1 - UPDATE):.1f}% GET, {RECORDS} records",
                          "mutilate": str(self.mutilate), "loadgen": str(self.loadgen)}}
        with self.topo:
            try:
                self.start_memcached()
                res["config"]["memcached"] = self.memcached_version
                self.mutilate_load()
                if self.a.saturation:
                    sat = {"peak_rps": self.a.saturation, "given": True}
                else:
                    sat = self.saturation()
                    log(f"saturation: mutilate closed-loop peak {sat['peak_rps']:,.0f}/s "
                        f"(CPU 0 {sat['cpu0_busy_pct']:.0f}% busy, CPU 1 "
                        f"{sat['cpu1_busy_pct']:.0f}%)")
                res["saturation"] = sat
                rates = self.a.rates or [f * sat["peak_rps"] for f in self.a.fractions]
                res["rates"] = rates
                res["points"] = {"mutilate": [[] for _ in rates], "fp-loadgen": [[] for _ in rates]}
                turn = 0
                for rep in range(self.a.reps):
                    for i, rate in enumerate(rates):
                        tools = ["mutilate", "fp-loadgen"]
                        if turn % 2:
                            tools.reverse()
                        turn += 1
                        for tool in tools:
                            pt = (self.mutilate_point(rate) if tool == "mutilate"
                                  else self.loadgen_point(rate))
                            res["points"][tool][i].append(pt)
                            log(f"rep {rep + 1} {rate:9,.0f}/s {tool:10s}: achieved "
                                f"{pt['achieved_rps']:9,.0f} p50 {pt['p50']:7.1f} p99 "
                                f"{pt['p99']:7.1f} us{'' if pt['valid'] else '  (invalid)'}")
            finally:
                self.stop_server()
                shutil.rmtree(self.tmp, ignore_errors=True)
        res["summary"] = summarize(res)
        return res


# -- parsing -------------------------------------------------------------------------------------

MUTILATE_COLS = ("avg", "std", "min", "p5", "p10", "p90", "p95", "p99")


def parse_mutilate(text):
    """mutilate's report: the read/update lines (us), Total QPS, Misses."""
    out = {"printed": {}}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 9 and f[0] in ("read", "update"):
            out["printed"][f[0]] = dict(zip(MUTILATE_COLS, map(float, f[1:])))
        elif line.startswith("Total QPS"):
            # Total QPS = 9976.3 (29929 / 3.0s)
            out["achieved_rps"] = float(f[3])
            out["ops"] = int(f[4].lstrip("("))
        elif line.startswith("Misses"):
            out["misses"] = int(f[2])
    if "achieved_rps" not in out or "read" not in out["printed"]:
        raise RuntimeError(f"cannot parse mutilate's output:\n{text[-800:]}")
    out.setdefault("misses", 0)
    out["gets"] = out["ops"]  # misses are over GETs; SETs are 0.2%, close enough for a share
    out["avg"] = out["printed"]["read"]["avg"]
    return out


def order_stats(v):
    """p50/p90/p99/p99.9/max of sorted @v (mutilate's own rule: v[n * q])."""
    if not v:
        raise RuntimeError("mutilate saved no latency samples")
    n = len(v)
    q = {f"p{k}": v[min(n - 1, int(n * x))] for k, x in (("50", .5), ("90", .9), ("99", .99),
                                                        ("999", .999))}
    q.update({"max": v[-1], "samples": n, "avg": sum(v) / n})
    return q


def cpu_times(cpu):
    """(busy, total) jiffies of one CPU from /proc/stat."""
    for line in open("/proc/stat"):
        f = line.split()
        if f[0] == f"cpu{cpu}":
            v = list(map(int, f[1:]))
            idle = v[3] + v[4]
            return sum(v) - idle, sum(v)
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


def busy_pct(a, b):
    return 100.0 * (b[0] - a[0]) / max(1, b[1] - a[1])


# -- the verdict and the tables ------------------------------------------------------------------

def med(rs, key):
    return statistics.median(r[key] for r in rs)


def summarize(res):
    rows, ok_all = [], True
    sat = res["saturation"]["peak_rps"]
    for i, rate in enumerate(res["rates"]):
        m, g = res["points"]["mutilate"][i], res["points"]["fp-loadgen"][i]
        if not m or not g:
            continue
        row = {"rate": rate, "load_pct": 100.0 * rate / sat if sat else None}
        for tool, pts in (("mutilate", m), ("fp-loadgen", g)):
            row[tool] = {k: med(pts, k) for k in ("achieved_rps", "avg", "p50", "p90", "p99")}
            if tool == "fp-loadgen":
                for k in ("slip_p99", "p50_sent", "p99_sent"):
                    row[tool][k] = med(pts, k)
            row[tool]["valid"] = all(p["valid"] for p in pts)
        row["p50_ratio"] = row["fp-loadgen"]["p50"] / row["mutilate"]["p50"]
        row["p99_ratio"] = row["fp-loadgen"]["p99"] / row["mutilate"]["p99"]
        row["p50_ratio_per_rep"] = [b["p50"] / a["p50"] for a, b in zip(m, g)]
        row["p99_ratio_per_rep"] = [b["p99"] / a["p99"] for a, b in zip(m, g)]
        # The same comparison with fp-loadgen measuring as mutilate does, from the send:
        # the gap between the two ratios is time requests waited to be sent.
        row["p99_sent_ratio"] = row["fp-loadgen"]["p99_sent"] / row["mutilate"]["p99"]
        row["p99_sent_ratio_per_rep"] = [b["p99_sent"] / a["p99"] for a, b in zip(m, g)]
        row["p50_ok"] = abs(row["p50_ratio"] - 1) <= P50_TOL
        row["p99_ok"] = abs(row["p99_ratio"] - 1) <= P99_TOL
        row["below_saturation"] = rate < sat
        row["pass"] = row["p50_ok"] and row["p99_ok"]
        if row["below_saturation"]:
            ok_all = ok_all and row["pass"]
        rows.append(row)
    counted = [r for r in rows if r["below_saturation"]]
    return {"rows": rows, "pass": bool(counted) and ok_all,
            "passed": sum(r["pass"] for r in counted), "counted": len(counted),
            "targets": {"p50_within": P50_TOL, "p99_within": P99_TOL}}


def table(res):
    c, s, sat = res["config"], res["summary"], res["saturation"]
    how = ("given by --saturation" if sat.get("given") else
           f"mutilate's closed-loop peak, {sat['conns']} connections x depth {sat['depth']}; "
           f"CPU 0 (memcached) {sat['cpu0_busy_pct']:.0f}% busy, CPU 1 (client) "
           f"{sat['cpu1_busy_pct']:.0f}%")
    out = [f"{c.get('memcached', 'memcached')} (-t 1, CPU 0) on the kernel address of the "
           f"server namespace; clients on CPU 1. {c['workload']}; open loop (Poisson), "
           f"{c['conns']} connections, depth 1, {c['warmup_s']} s warm-up + {c['duration_s']} s "
           f"per point; median of {c['reps']} repetitions, the two tools interleaved.",
           f"Saturation: {sat['peak_rps']:,.0f} req/s ({how}).", "",
           "| offered req/s | load | mutilate achieved | fp-loadgen achieved | mutilate p50 µs "
           "| fp-loadgen p50 µs | p50 ratio | mutilate p99 µs | fp-loadgen p99 µs | p99 ratio "
           "| fp-loadgen p99 from send µs (ratio) | fp-loadgen slip p99 µs | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        m, g = r["mutilate"], r["fp-loadgen"]
        flag = "" if m["valid"] and g["valid"] else " (a point invalid)"
        out.append(f"| {r['rate']:,.0f} | {r['load_pct']:.0f}% | {m['achieved_rps']:,.0f} | "
                   f"{g['achieved_rps']:,.0f} | {m['p50']:.1f} | {g['p50']:.1f} | "
                   f"{r['p50_ratio']:.2f}{'' if r['p50_ok'] else ' ✗'} | {m['p99']:.1f} | "
                   f"{g['p99']:.1f} | {r['p99_ratio']:.2f}{'' if r['p99_ok'] else ' ✗'} | "
                   f"{g['p99_sent']:.1f} ({r['p99_sent_ratio']:.2f}) | "
                   f"{g['slip_p99']:.1f} | {'pass' if r['pass'] else 'FAIL'}{flag} |")
    out += ["", "Per-repetition ratios (fp-loadgen / mutilate):", "",
            "| offered req/s | p50 | p99 | p99 from send |", "|---|---|---|---|"]
    for r in s["rows"]:
        out.append(f"| {r['rate']:,.0f} | {' '.join(f'{x:.2f}' for x in r['p50_ratio_per_rep'])} "
                   f"| {' '.join(f'{x:.2f}' for x in r['p99_ratio_per_rep'])} "
                   f"| {' '.join(f'{x:.2f}' for x in r['p99_sent_ratio_per_rep'])} |")
    out += ["", f"Target: p50 within {P50_TOL:.0%} and p99 within {P99_TOL:.0%} at loads below "
            f"saturation. Result: **{'PASS' if s['pass'] else 'FAIL'}** ({s['passed']} of "
            f"{s['counted']} rates within both).",
            "", "mutilate's percentiles are order statistics of its raw GET samples (--save); "
            "it measures from the actual send, fp-loadgen from the scheduled send. A point is "
            "invalid when a tool achieved < 99% of the rate, or fp-loadgen failed its own "
            "checks (slip p99 > 50 µs: the generator itself was late)."]
    return "\n".join(out) + "\n"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def find_mutilate(given):
    for p in (given, os.environ.get("MUTILATE"), shutil.which("mutilate"), "/tmp/mutilate/mutilate"):
        if p and pathlib.Path(p).is_file() and os.access(p, os.X_OK):
            return str(pathlib.Path(p).resolve())
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mutilate", help="the mutilate binary (default: $MUTILATE, PATH, "
                    "/tmp/mutilate/mutilate)")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"),
                    help="flowplane build dir holding apps/loadgen/fp-loadgen (default build/release)")
    ap.add_argument("--memcached", default="/usr/bin/memcached")
    ap.add_argument("--out", default=str(ROOT / "results" / "loadgen"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--conns", type=int, default=32, help="connections, both tools (default 32)")
    ap.add_argument("--duration", type=int, default=5, help="measured seconds per point (mutilate "
                    "takes whole seconds)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up seconds per point")
    ap.add_argument("--fractions", default=",".join(map(str, DEFAULT_FRACTIONS)),
                    help="rates as fractions of saturation (default 0.1,0.25,0.4,0.55,0.7)")
    ap.add_argument("--saturation", type=float, help="saturation req/s, instead of measuring it")
    ap.add_argument("--rates", help="explicit rates, comma-separated (overrides --fractions)")
    ap.add_argument("--loadgen-arg", action="append", default=[], metavar="ARG",
                    help="an extra argument for fp-loadgen (repeatable)")
    ap.add_argument("--tag", default="lgm", help="netns tag (default lgm)")
    ap.add_argument("--quick", action="store_true", help="1 rep, 3 rates, 2 s points (a smoke test)")
    ap.add_argument("--render", metavar="JSON", help="print the table of an earlier run's "
                    "vs_mutilate.json and exit (no measurement)")
    a = ap.parse_args(argv)
    if a.render:
        res = json.loads(pathlib.Path(a.render).read_text())
        res["summary"] = summarize(res)
        print(table(res))
        return 0
    a.fractions = [float(x) for x in a.fractions.split(",") if x]
    a.rates = [parse_rate(x) for x in a.rates.split(",")] if a.rates else None
    if a.quick:
        a.reps, a.duration, a.warmup = 1, 2, 1
        if a.fractions == list(DEFAULT_FRACTIONS):
            a.fractions = [0.1, 0.4, 0.7]
    if a.reps < 1 or a.conns < 1 or a.duration < 1 or a.warmup < 0:
        ap.error("--reps, --conns and --duration must be positive")
    a.mutilate = find_mutilate(a.mutilate)
    if not a.mutilate:
        print("loadgen_vs_mutilate.py: no mutilate binary (--mutilate PATH; see the build "
              "steps at the end of this script's docstring)", file=sys.stderr)
        return 2
    if not (pathlib.Path(a.build) / "apps" / "loadgen" / "fp-loadgen").exists():
        print(f"loadgen_vs_mutilate.py: no fp-loadgen in {a.build}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("loadgen_vs_mutilate.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        res = Bench(a).run()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"loadgen_vs_mutilate.py: {e}", file=sys.stderr)
        return 1
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vs_mutilate.json").write_text(json.dumps(res, indent=1))
    md = table(res)
    (out / "vs_mutilate.md").write_text(md)
    print(md)
    return 0 if res["summary"]["pass"] else 3


def parse_rate(s):
    s = s.strip()
    mul = {"k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6}.get(s[-1:], 1)
    return float(s[:-1] if mul != 1 else s) * mul


if __name__ == "__main__":
    sys.exit(main())
