#!/usr/bin/env python3
"""IX's control loop on this machine's real cores: a step pattern rising and falling, served
by 1 worker, by 2, and by 2 under fp-ctl run (issue 18, step 2).

The standard topology with two queues; fp-echo spin --native on AF_XDP with two workers on
--server-cores (0,1; --idle adaptive); fp-loadgen (spin protocol, fixed service time, open
loop, kernel transport, polling on --lg-cores, default 1: on 2 vCPUs it shares worker 1's
core) follows --pattern (default sine:4k:40k:40: up and down once) over --duration, one
point a second. Three configurations, interleaved for --rounds rounds:

  static1   --steer-weights 1,0 and worker 1 parked (it owns nothing and sleeps)
  static2   both workers, groups split evenly, nothing changes
  dynamic   starts as static1; fp-ctl run decides (its default policy unless --policy:
            add a worker above 300 us of queueing delay, remove one above idle 1/n + 0.1,
            10 Hz)

Per run: every window's offered and achieved rate, p50/p99, validity (fp-loadgen's checks:
achieved >= 99% of offered, client slip, timeouts); the server's CPU (utime + stime over the
pattern); for dynamic, the controller's log (workers polling over time, moves). Written to
OUT/ctl_step.json and OUT/ctl_step.md (default results/ctl_step/).

    sudo .venv/bin/python bench/ctl_step.py [--rounds 3] [--pattern sine:4k:40k:40]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402

PORT = 7


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def stats(topo, build, name):
    r = topo.sh(topo.srv_ns, build / "tools" / "fp-stats", "--name", name, "--totals")
    return json.loads(r.stdout.strip().splitlines()[-1])["workers"]


def ctl(topo, build, *args):
    return topo.sh(topo.srv_ns, build / "ctl" / "fp-ctl", *map(str, args), check=False)


def one(topo, build, conf, a, out, tag):
    name = f"cs{os.getpid() % 10000}"
    extra = ["--steer-weights", "1,0"] if conf != "static2" else []
    srv = topo.popen(topo.srv_ns, [build / "apps" / "echo" / "fp-echo", "spin", "--native",
                                   "--port", PORT, "--if", topo.srv_if, "--ip",
                                   f"{topo.fp_srv_ip}/24", "--workers", "2", "--cores", a.server_cores,
                                   "--idle", "adaptive", "--stats", name, *extra])
    ctlp = None
    try:
        deadline = time.time() + 15
        while ctl(topo, build, "groups", name).returncode:
            if time.time() > deadline or srv.poll() is not None:
                raise RuntimeError(f"server did not start: {srv.stderr.read()[-400:]}")
            time.sleep(0.2)
        if conf != "static2":
            r = ctl(topo, build, "park", name, 1)
            if r.returncode:
                raise RuntimeError(f"park: {r.stderr}")
        log = out / f"{tag}.ctl.jsonl"
        if conf == "dynamic":
            pol = out / "policy"
            pol.write_text(a.policy.replace(";", "\n") + "\n")
            ctlp = topo.popen(topo.srv_ns, [build / "ctl" / "fp-ctl", "run", name, "--log",
                                            log, "--policy", pol])
        c0 = cpu_s(srv.pid)
        lgj = out / f"{tag}.lg.json"
        r = topo.sh(topo.cli_ns, build / "apps" / "loadgen" / "fp-loadgen", "--server",
                    f"{topo.fp_srv_ip}:{PORT}", "--proto", "spin", "--service",
                    f"fixed:{a.service_us}us", "--pattern", a.pattern, "--duration",
                    a.duration, "--window", "1", "--conns", "32", "--warmup", "1",
                    "--cores", a.lg_cores, "--workers",
                    len(a.lg_cores.split(",")), "--quiet", "--json", lgj,
                    check=False, timeout=a.duration + 60)
        c1 = cpu_s(srv.pid)
        ws = stats(topo, build, name)
        if r.returncode:
            raise RuntimeError(f"fp-loadgen: {r.stderr[-400:]}")
    finally:
        if ctlp:
            stop_process(ctlp, grace_s=5)
        stop_process(srv)
    pts = json.loads(lgj.read_text())["points"]
    res = {"conf": conf, "server_cpu_s": round(c1 - c0, 3),
           "moves": sum(w["moves_in"] for w in ws),
           "parked_s": [round(w.get("parked_ns", 0) / 1e9, 2) for w in ws],
           "rst_tx": sum(w["net"]["tcp_rst_tx"] for w in ws),
           "points": [{"target_rps": p["target_rps"], "achieved_rps": p["achieved_rps"],
                       "p50_us": p["latency_us"]["p50"], "p99_us": p["latency_us"]["p99"],
                       "slip_p99_us": p["slip_us"]["p99"], "valid": p["valid"],
                       "invalid_reasons": p["invalid_reasons"]} for p in pts]}
    if conf == "dynamic" and log.exists():
        ticks = [json.loads(x) for x in log.read_text().splitlines()]
        res["polling"] = [(round(t["t_ms"] / 1e3, 2), t["polling"]) for t in ticks
                          if t["act"] != "hold" or t is ticks[0]]
        res["ups"] = sum(t["act"] == "up" for t in ticks)
        res["downs"] = sum(t["act"] == "down" for t in ticks)
    return res


def summary(runs, a):
    lines = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `bench/ctl_step.py "
             f"{' '.join(sys.argv[1:])}`, {os.cpu_count()} vCPUs: pattern {a.pattern} over "
             f"{a.duration} s, spin service {a.service_us} us, server cores {a.server_cores}, "
             f"fp-loadgen cores {a.lg_cores}, policy '{a.policy or 'default'}'; median (min-max) over "
             f"{a.rounds} interleaved rounds", "",
             "| configuration | windows with p99 > SLO (of valid) | invalid windows | worst valid p99, µs | median p99, µs | server CPU, s | moves | RST sent |",
             "|---|---|---|---|---|---|---|---|"]

    def mm(xs, fmt="{:.0f}"):
        return (fmt.format(statistics.median(xs)) + " (" + fmt.format(min(xs)) + "-" +
                fmt.format(max(xs)) + ")") if xs else "–"
    for conf in ("static1", "static2", "dynamic"):
        rs = [r for r in runs if r["conf"] == conf]
        over, invalid, worst, med = [], [], [], []
        for r in rs:
            valid = [p for p in r["points"] if p["valid"]]
            over.append(sum(p["p99_us"] > a.slo_us for p in valid))
            invalid.append(len(r["points"]) - len(valid))
            worst.append(max((p["p99_us"] for p in valid), default=0))
            med.append(statistics.median([p["p99_us"] for p in valid]) if valid else 0)
        lines.append(f"| {conf} | {mm(over)} | {mm(invalid)} | {mm(worst)} | {mm(med)} | "
                     f"{mm([r['server_cpu_s'] for r in rs], '{:.1f}')} | "
                     f"{mm([r['moves'] for r in rs])} | {sum(r['rst_tx'] for r in rs)} |")
    dyn = [r for r in runs if r["conf"] == "dynamic"]
    if dyn:
        lines += ["", "Controller (dynamic runs): workers polling at each change, seconds "
                  "from the start of the loop:", ""]
        for i, r in enumerate(dyn):
            lines.append(f"- round {i + 1}: {r.get('ups', 0)} up, {r.get('downs', 0)} down: "
                         + ", ".join(f"{t} s: {n}" for t, n in r.get("polling", [])))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pattern", default="sine:4k:40k:40")
    ap.add_argument("--duration", type=int, default=40)
    ap.add_argument("--policy", default="",
                    help="fp-ctl policy lines, ';' between them (default: fp-ctl's)")
    ap.add_argument("--server-cores", default="0,1", help="the two server workers' cores")
    ap.add_argument("--lg-cores", default="1", help="fp-loadgen's cores (one worker each)")
    ap.add_argument("--service-us", type=float, default=20)
    ap.add_argument("--slo-us", type=float, default=500)
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "ctl_step"))
    ap.add_argument("--confs", default="static1,static2,dynamic")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ctl_step: needs root (namespaces, veth, AF_XDP)")
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with Topo(f"cs{os.getpid() % 1000}", queues=2) as topo:
        topo.up()
        for rnd in range(a.rounds):
            for conf in a.confs.split(","):
                print(f"ctl_step: round {rnd + 1}/{a.rounds}: {conf}", flush=True)
                r = one(topo, build, conf, a, out, f"r{rnd + 1}_{conf}")
                r["round"] = rnd + 1
                print("  " + json.dumps({k: v for k, v in r.items() if k != "points"}),
                      flush=True)
                runs.append(r)
    (out / "ctl_step.json").write_text(json.dumps({"args": vars(a), "runs": runs}, indent=1))
    md = summary(runs, a)
    (out / "ctl_step.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
