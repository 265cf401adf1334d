#!/usr/bin/env python3
"""Validation 2 for fp-vsim --full: its predictions against real runs on this machine's cores.

Real: fp-echo spin --native, one worker on CPU 0, and fp-loadgen (spin protocol, exponential
10 µs, Poisson, 64 connections, open loop) on CPU 1, joined by DPDK's net_memif (shared
memory: no kernel on the path, nearest to the simulator's virtual NIC), both polling; one
sweep over --loads per round. Around each sweep, bench/vcpu_gaps.py measures what the
hypervisor takes from each CPU (gaps over 50 µs a loop without system calls sees), before
and after; the round's stall file is both together.

Virtual: fp-vsim --full -n 1 at the same loads, flows and number of requests, with --costs
(the real code's time per round, fp-vsim --full --calibrate) scaled per load so the virtual
worker spends what the real one did per request (its busy time, fp-stats), wire_ns fitted
once so the virtual p50 at the lowest load equals the real one (the client's stack and the
memif copies the simulator does not charge); then each load without stalls, and with each
round's stall file (--stalls; its seed the round's). Beside them, what the guest's own
scheduler took from the real worker during each point (its run-queue wait and involuntary
switches, /proc/PID/task/TID/schedstat and status): stalls vcpu_gaps cannot see, since it
measures with the CPUs otherwise idle.

    sudo .venv/bin/python bench/vsim_full_real.py [--rounds 5] [--loads 0.1,0.3,...]
         [--duration 3] [--gap-seconds 4] [--costs bench/costs/full-kvm2.txt] [--out DIR]

Writes DIR/vsim_full_real.json, DIR/vsim_full_real.md and DIR/stalls-rN.txt (default
results/vsim_full_real/). Root (DPDK); CPUs 0 and 1.
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools"))
from benchlib import fp_totals, med, start_with_stats  # noqa: E402
from netns import stop_process  # noqa: E402

S_US = 10.0
CONNS = 64


def worker_sched(pid):
    """The server's worker thread (fp-w0): ns it waited runnable, involuntary switches."""
    for t in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            if (t / "comm").read_text().strip() == "fp-w0":
                wait = int((t / "schedstat").read_text().split()[1])
                inv = int([ln for ln in (t / "status").read_text().splitlines()
                           if ln.startswith("nonvoluntary_ctxt_switches")][0].split()[1])
                return wait, inv
        except (OSError, IndexError, ValueError):
            continue
    return None


def stats_totals(build, name):
    return fp_totals(build, name)[0]


def gaps(out, seconds):
    subprocess.run([sys.executable, str(ROOT / "bench" / "vcpu_gaps.py"), "--seconds",
                    str(seconds), "--cpus", "0,1", "--out", str(out)], check=True,
                   capture_output=True)
    return out.read_text()


def merge_stalls(a, b):
    """Two vcpu_gaps --out files as one: seconds added, lists kept."""
    secs, body = 0.0, []
    for text in (a, b):
        for ln in text.splitlines():
            if ln.startswith("seconds="):
                secs += float(ln.split("=", 1)[1])
            else:
                body.append(ln)
    return f"seconds={secs:g}\n" + "\n".join(body) + "\n"


def gap_list(text, role):
    out = []
    for ln in text.splitlines():
        if ln.startswith(role + "="):
            out += [float(x) for x in ln.split("=", 1)[1].split(",") if x.strip()]
    return out


def stall_ms(text, role):
    return sum(gap_list(text, role)) / 1e3


def in_run_stalls(text, pt, span=10.0):
    """A stall file for one real point, by what was measured during it: the client's own
    loop gaps (fp-loadgen: their time; their lengths drawn from the idle measurement of
    CPU 1, repeated until they add up), and on the server the idle measurement of CPU 0
    plus the worker's run-queue waits (the guest's own scheduler: each of their mean
    length). @span seconds of them."""
    secs = float([ln for ln in text.splitlines() if ln.startswith("seconds=")][0].split("=")[1])
    host, cli = gap_list(text, "server"), gap_list(text, "client")
    server = host * max(1, round(span / secs))
    if pt.get("worker_preempted"):
        n = pt["worker_preempted"] / pt["wall_s"] * span
        server += [pt["worker_rq_wait_ms"] * 1e3 / pt["worker_preempted"]] * round(n)
    want, client = pt["client_loop_gap_ms"] / pt["duration_s"] * span * 1e3, []
    while cli and sum(client) < want:
        client.append(cli[len(client) % len(cli)])
    lines = [f"seconds={span:g}"]
    for role, gs in (("server", server), ("client", client)):
        for i in range(0, len(gs), 16):
            lines.append(f"{role}=" + ",".join(f"{g:.1f}" for g in gs[i:i + 16]))
    return "\n".join(lines) + "\n"


def real_sweep(build, a, tmp, rnd):
    """One server for the round, a fresh fp-loadgen per load; the server's counters around
    each point give its busy time per request there."""
    sock = os.path.join(tmp, f"v{rnd}.sock")
    m = "--vdev=net_memif0,role={},socket=" + sock + ",socket-abstract=no"
    name = f"vfr{os.getpid()}"
    srv = start_with_stats([build / "apps" / "echo" / "fp-echo", "spin", "--native", "--dpdk",
                            m.format("server"), "--ip", "10.99.0.1/24", "--cores", "0",
                            "--idle", "poll", "--stats", name], build, name, "vsim_full_real",
                           ready=lambda p: worker_sched(p.pid))   # its thread named: it runs
    pts = []
    try:
        out = os.path.join(tmp, "lg.json")
        for ld in a.loads:
            t0, w0, s0 = stats_totals(build, name), time.monotonic(), worker_sched(srv.pid)
            cli = subprocess.run([str(build / "apps" / "loadgen" / "fp-loadgen"), "--server",
                                  "10.99.0.1:7", "--proto", "spin", "--service",
                                  f"exp:{S_US:g}us", "--rate", str(int(round(ld * 1e6 / S_US))),
                                  "--conns", str(CONNS), "--duration", str(a.duration),
                                  "--warmup", "1", "--cores", "1", "--idle", "poll", "--stats",
                                  "none", "--quiet", "--json", out, "--dpdk",
                                  m.format("client"), "--ip", "10.99.0.2/24"],
                                 capture_output=True, text=True, timeout=a.duration * 20 + 120)
            if cli.returncode:
                raise SystemExit(f"vsim_full_real: fp-loadgen failed: {cli.stderr[-400:]}")
            t1, w1, s1 = stats_totals(build, name), time.monotonic(), worker_sched(srv.pid)
            p = json.load(open(out))["points"][0]
            busy, idle = t1["busy_cycles"] - t0["busy_cycles"], t1["idle_cycles"] - t0["idle_cycles"]
            ops = t1["app_ops"] - t0["app_ops"]
            # the worker polls throughout: busy and idle cycles span the wall time between
            pts.append({"load": ld, "target_rps": p["target_rps"],
                        "achieved_rps": p["achieved_rps"], "p50_us": p["latency_us"]["p50"],
                        "p99_us": p["latency_us"]["p99"], "p999_us": p["latency_us"]["p999"],
                        "valid": p.get("valid", True),
                        "invalid_reasons": p.get("invalid_reasons", []),
                        "slip_p99_us": p["slip_us"]["p99"],
                        "client_loop_gaps": p["client_loop_gaps"],
                        "client_loop_gap_ms": p["client_loop_gap_us"] / 1e3,
                        "duration_s": p["duration_s"], "server_ops": ops, "wall_s": w1 - w0,
                        "worker_rq_wait_ms": (s1[0] - s0[0]) / 1e6 if s0 and s1 else None,
                        "worker_preempted": s1[1] - s0[1] if s0 and s1 else None,
                        "server_rx_frames": t1["rx_frames"] - t0["rx_frames"],
                        "server_busy_us_per_req": (busy / (busy + idle) * (w1 - w0) * 1e6 / ops
                                                   - S_US) if ops and busy + idle else None})
    finally:
        stop_process(srv)
    return {"points": pts}


def vsim(build, a, load, costs, stalls=None, seed=1):
    cmd = [str(build / "tools" / "vsim" / "fp-vsim"), "--full", "-n", "1", "--sched", "part",
           "-l", f"{load:g}", "--flows", str(CONNS), "--requests",
           str(a.requests or max(20000, int(load * 1e6 / S_US * a.duration))), "--seed",
           str(seed), "--format", "json"]
    for k, v in costs.items():
        cmd += ["--cost", f"{k}={v:.1f}"]
    if stalls:
        cmd += ["--stalls", str(stalls)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"vsim_full_real: {' '.join(cmd)}: {r.stderr.strip()}")
    return json.loads(r.stdout)["points"][0]


def read_costs(path):
    out = {}
    for ln in open(path):
        ln = ln.split("#", 1)[0].strip()
        if ln:
            k, v = ln.split("=", 1)
            out[k.strip()] = float(v)
    return out


def calibrate(build, a, load, base, want_us):
    """The costs scaled so the virtual workers spend @want_us per request beyond the
    service time, as the real one did at @load (two steps of a proportional fit)."""
    k, got = 1.0, None
    for _ in range(2):
        c = {n: v * k for n, v in base.items() if n in ("poll_ns", "rx_ns", "tx_ns")}
        got = vsim(build, a, load, {**base, **c})["busy_us_per_req"]
        if not got:
            break
        k *= want_us / got
    c = {n: v * k for n, v in base.items() if n in ("poll_ns", "rx_ns", "tx_ns")}
    return {**base, **c}, k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loads", default="0.1,0.3,0.5,0.6,0.7,0.8")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per real point")
    ap.add_argument("--gap-seconds", type=float, default=4.0,
                    help="vcpu_gaps before and after each sweep, each this long")
    ap.add_argument("--requests", type=int, default=0,
                    help="per virtual point (default: as many as the real point's "
                    "--duration at its rate, so as many stalls can hit it)")
    ap.add_argument("--costs", default=str(ROOT / "bench" / "costs" / "full-kvm2.txt"))
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "vsim_full_real"))
    ap.add_argument("--virtual-only", action="store_true",
                    help="take the real rounds from --out's vsim_full_real.json (and its stall "
                    "files) and run only the virtual side again")
    a = ap.parse_args()
    a.loads = [float(x) for x in a.loads.split(",")]
    if os.geteuid() != 0 and not a.virtual_only:
        sys.exit("vsim_full_real: needs root (DPDK): run it with sudo")
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("vsim_full_real: needs CPUs 0 and 1")
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = []
    if a.virtual_only:
        old = json.loads((out / "vsim_full_real.json").read_text())
        rounds, a.rounds = old["rounds"], len(old["rounds"])
        a.loads = [p["load"] for p in rounds[0]["points"]]
        a.duration = rounds[0]["points"][0]["duration_s"]
        a.command = old["command"]
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, (0 if a.virtual_only else a.rounds) + 1):
            print(f"vsim_full_real: round {rnd}/{a.rounds}: stalls, real sweep, stalls",
                  file=sys.stderr, flush=True)
            before = gaps(pathlib.Path(tmp) / "a.txt", a.gap_seconds)
            sweep = real_sweep(build, a, tmp, rnd)
            after = gaps(pathlib.Path(tmp) / "b.txt", a.gap_seconds)
            st = out / f"stalls-r{rnd}.txt"
            st.write_text(merge_stalls(before, after))
            sweep.update(round=rnd, stalls=st.name,
                         stall_ms_per_s={r: stall_ms(st.read_text(), r) / (2 * a.gap_seconds)
                                         for r in ("server", "client")})
            rounds.append(sweep)
    # Per load, the costs scaled to the real server's busy time per request there; then the
    # fixed path the simulator does not charge (the client's stack, memif), fitted at the
    # lowest load as wire_ns (two secant steps on its p50).
    base = read_costs(a.costs)
    cal = []
    for i, ld in enumerate(a.loads):
        want = statistics.median(r["points"][i]["server_busy_us_per_req"] for r in rounds)
        costs, k = calibrate(build, a, ld, base, want)
        cal.append({"load": ld, "real_busy_us_per_req": want, "scale": k, "costs": costs})
        print(f"vsim_full_real: load {ld:g}: {want:.2f} us a request beyond the service; "
              f"costs x {k:.2f}", file=sys.stderr, flush=True)
    lo = a.loads[0]
    real_lo = statistics.median(r["points"][0]["p50_us"] for r in rounds)
    w0, p0 = 0.0, vsim(build, a, lo, cal[0]["costs"])["p50_us"]
    w1 = max(0.0, (real_lo - p0) * 1e3 / 2)
    for _ in range(2):
        p1 = vsim(build, a, lo, {**cal[0]["costs"], "wire_ns": w1})["p50_us"]
        if abs(p1 - p0) < 1e-9:
            break
        w0, p0, w1 = w1, p1, max(0.0, w1 + (real_lo - p1) * (w1 - w0) / (p1 - p0))
    wire_ns = w1
    print(f"vsim_full_real: wire_ns = {wire_ns:.0f} (real p50 {real_lo:.1f} us at load {lo:g})",
          file=sys.stderr, flush=True)
    virt = []
    for i, ld in enumerate(a.loads):
        print(f"vsim_full_real: virtual, load {ld:g}", file=sys.stderr, flush=True)
        costs = {**cal[i]["costs"], "wire_ns": wire_ns}
        base_pt = vsim(build, a, ld, costs)
        with_st = [vsim(build, a, ld, costs, out / r["stalls"], seed=r["round"])
                   for r in rounds]
        in_run = []
        for r in rounds:
            f = out / f"stalls-r{r['round']}-l{ld:g}.txt"
            f.write_text(in_run_stalls((out / r["stalls"]).read_text(), r["points"][i]))
            in_run.append(vsim(build, a, ld, costs, f, seed=r["round"]))
        virt.append({"load": ld, "calibration": cal[i], "plain": base_pt, "stalls": with_st,
                     "in_run": in_run})
    cmd = "sudo .venv/bin/python bench/vsim_full_real.py " + " ".join(sys.argv[1:])
    if a.virtual_only:   # the real side's command, then this one's
        cmd = f"{a.command}`, virtual side again by `{cmd.strip()}"
    doc = {"command": cmd.strip(), "wire_ns": wire_ns, "costs": a.costs, "rounds": rounds,
           "virtual": virt}
    (out / "vsim_full_real.json").write_text(json.dumps(doc, indent=1))
    (out / "vsim_full_real.md").write_text(report(doc, a))
    print(report(doc, a))


def report(doc, a):
    rounds, virt = doc["rounds"], doc["virtual"]
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"vsim_full_real, {now:%Y-%m-%d %H:%M} UTC: `{doc['command']}`; real: fp-echo spin "
             f"--native (CPU 0) and fp-loadgen (CPU 1) over memif, exp {S_US:g} µs, {CONNS} "
             f"connections, {a.duration:g} s a point, {len(rounds)} rounds; virtual: fp-vsim "
             f"--full -n 1, {a.requests or 'as many'} requests{'' if a.requests else ' as the real point'}, costs {os.path.relpath(a.costs, ROOT)} "
             "scaled per load to the real server's busy time per request there, wire_ns "
             f"{doc['wire_ns']:.0f} (fitted to the real p50 at load {a.loads[0]:g}); "
             "µs, median (min-max) over rounds", "",
             "| load | real server µs/request beyond S | real p50 | virtual p50 | real p99 | "
             "virtual p99, no stalls | virtual p99, each round's stalls | with stalls / real "
             "(p99 medians) | within 15% | virtual p99, in-run stalls | in-run / real | "
             "within 15% | real invalid | real client gaps ms/s | measured "
             "stalls ms/s (CPU 0, CPU 1) | real worker run-queue wait ms/s (preemptions/s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, v in enumerate(virt):
        ps = [r["points"][i] for r in rounds]
        rp99 = statistics.median(p["p99_us"] for p in ps)
        vst = [x["p99_us"] for x in v["stalls"]]
        ratio = statistics.median(vst) / rp99 if rp99 else float("nan")
        vir = [x["p99_us"] for x in v.get("in_run", [])] or [float("nan")]
        r_ir = statistics.median(vir) / rp99 if rp99 else float("nan")
        busy = [p["server_busy_us_per_req"] for p in ps if p["server_busy_us_per_req"] is not None]
        lines.append(
            f"| {v['load']:g} | {med(busy, '{:.2f}')} | "
            f"{med([p['p50_us'] for p in ps], '{:.1f}')} | {v['plain']['p50_us']:.1f} | "
            f"{med([p['p99_us'] for p in ps], '{:.0f}')} | {v['plain']['p99_us']:.0f} | "
            f"{med(vst, '{:.0f}')} | {ratio:.2f} | "
            f"{'yes' if abs(ratio - 1) <= 0.15 else 'no'} | {med(vir, '{:.0f}')} | "
            f"{r_ir:.2f} | {'yes' if abs(r_ir - 1) <= 0.15 else 'no'} | "
            f"{sum(not p['valid'] for p in ps)} of {len(ps)} | "
            f"{med([p['client_loop_gap_ms'] / p['duration_s'] for p in ps], '{:.1f}')} | "
            f"{med([r['stall_ms_per_s']['server'] for r in rounds], '{:.1f}')}, "
            f"{med([r['stall_ms_per_s']['client'] for r in rounds], '{:.1f}')} | "
            f"{med([p['worker_rq_wait_ms'] / p['wall_s'] for p in ps], '{:.1f}')} "
            f"({med([p['worker_preempted'] / p['wall_s'] for p in ps], '{:.0f}')}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
