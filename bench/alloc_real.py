#!/usr/bin/env python3
"""alloc_real.py: Shenango's allocator on this machine's two cores: what a pass costs, how long a
grant takes to run, and a service sharing its cores with a batch job.

fp-echo spin --native on AF_XDP (fixed service time) with its home on core 0 and a
burstable worker on core 1 (--burst 1), fp-ctl alloc, fp-loadgen from the client namespace
(Linux TCP, open loop, core 1) and a batch job (bench/fp-batch, SCHED_IDLE) on core 1.
Three parts, each interleaved over --rounds rounds:

  passcost  no requests: the batch job's work on core 1 alone and beside an allocator that
            sleeps between passes on core 1, at each of --pass-intervals: what a pass costs
            the core it runs on (a timer wake-up, the pass, the sleep).
  wake      light load (1k req/s of 200 us, so some requests queue behind others): the time
            from each grant's decision to the worker running, measured by the worker
            (CLOCK_MONOTONIC across the two processes), with the allocator on the worker's
            own core (the grant is a hand-off when the allocator sleeps) and on the other
            core (a cross-core wake-up: an IPI in a VM).
  share     the service at --rates, in four configurations: static1 (the home alone; the
            burstable worker is never granted and only hands over frames that land on its
            queue), static2 (two workers stealing, ZygOS: both poll), alloc (fp-ctl alloc
            on core 1, a pass every --interval-us) and alloc-nobatch (the same without
            the batch job); fp-loadgen's p50/p99/p99.9 and validity, the batch job's work,
            grants and grant-to-running times.

--style threads runs the spin server written with user-level threads and blocking sockets
(fp-echo spin --threads: a granted worker steals ready threads, issue 19's threaded app on
the allocator), and --confs may add pthreads: the same server as a Linux thread per
connection on Linux sockets (fp-echo spin --pthreads, on the kernel's address of the same
veth), free to run on both cores, where Linux's scheduler takes core 1 from the SCHED_IDLE
batch job whenever a thread is runnable: the peer for the allocator. Issue 19's three-way
comparison is `--parts share --style threads --confs pthreads,static1,alloc`.
alloc-sleep is alloc with the home sleeping when idle (--idle sleep: Shenango parks every
core of an idle runtime), and --batch-cores 0,1 runs a batch job on each core, so what an
idle or lightly loaded service leaves of the home's core is counted too.

Markdown on stdout, every run in --out/alloc_real.json. Root (namespaces, AF_XDP).

Usage: .venv/bin/python bench/alloc_real.py [--parts passcost,wake,share] [--rounds 3]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import med  # noqa: E402
from netns import Topo, stop_process  # noqa: E402

PORT = 7
CONFS = ("static1", "static2", "alloc", "alloc-nobatch", "alloc-sleep", "pthreads")


def stats(topo, build, name):
    r = topo.sh(topo.srv_ns, str(build / "tools" / "fp-stats"), "--name", name, "--totals")
    return json.loads(r.stdout.strip().splitlines()[-1])["workers"]


def pct(hist, total, p):
    want, seen = max(1, int(p * total + 0.999999)), 0
    for b, n in enumerate(hist):
        seen += n
        if seen >= want:
            return b
    return len(hist) - 1


def wait_accepting(topo, srv, ip):
    deadline = time.time() + 15
    code = ("import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])),"
            " 1); s.close()")
    while topo.sh(topo.cli_ns, sys.executable, "-c", code, ip, str(PORT),
                  check=False).returncode:
        if time.time() > deadline or srv.poll() is not None:
            stop_process(srv)
            raise RuntimeError(f"server did not start: {srv.stderr.read()[-400:]}")
        time.sleep(0.2)
    return srv


def start_server(topo, build, name, conf, a):
    if conf == "pthreads":   # Linux threads on both cores (no --cores: not pinned)
        srv = topo.popen(topo.srv_ns, ["taskset", "-c", "0,1", build / "apps" / "echo" /
                                       "fp-echo", "spin", "--pthreads", "--port", PORT,
                                       "--ip", topo.srv_ip])
        return wait_accepting(topo, srv, topo.srv_ip)
    # static1 is alloc without an allocator: worker 1 never gets its core, it only wakes
    # to hand over frames a Linux client sent to its queue (a veth cannot steer)
    extra = {"static1": ["--workers", "2", "--cores", "0,1", "--sched", "steal", "--burst",
                         "1"],
             "static2": ["--workers", "2", "--cores", "0,1", "--sched", "steal"],
             "alloc": ["--workers", "2", "--cores", "0,1", "--sched", "steal", "--burst", "1",
                       "--burst-idle-us", str(a.burst_idle_us)]}[conf.split("-")[0]]
    if conf == "alloc-sleep":
        extra += ["--idle", "sleep"]
    srv = topo.popen(topo.srv_ns, [build / "apps" / "echo" / "fp-echo", "spin",
                                   f"--{a.style}", "--port", PORT, "--if", topo.srv_if, "--ip",
                                   f"{topo.fp_srv_ip}/24", "--stats", name, *extra])
    return wait_accepting(topo, srv, topo.fp_srv_ip)


def start_alloc(topo, build, name, interval_us, core, seconds=None):
    return topo.popen(topo.srv_ns, [build / "ctl" / "fp-ctl", "alloc", name, "--interval-us",
                                    str(interval_us), "--core", str(core), "--json", "--sleep",
                                    *(["--seconds", str(seconds)] if seconds else [])])


def batch_job(build, seconds, core=1):
    return subprocess.Popen(["taskset", "-c", str(core), str(build / "bench" / "fp-batch"),
                             str(seconds)], stdout=subprocess.PIPE, text=True)


def alloc_fields(rep):
    (run,) = rep["runs"]
    h, n = run["realloc_hist_us"], run["grants_taken"]
    return dict(grants=run["grants"], grants_taken=n, passes=rep["passes"],
                late_passes=rep["late_passes"], seconds=rep["seconds"],
                congested=run["congested_passes"],
                realloc_p50_us=pct(h, n, 0.5) if n else None,
                realloc_p99_us=pct(h, n, 0.99) if n else None,
                realloc_mean_us=run["realloc_mean_us"], realloc_max_us=run["realloc_max_us"],
                realloc_hist_us=h)


def one(topo, build, conf, rate, a, out, tag, interval_us, alloc_core, service_us):
    """One run of the service at @rate with a batch job on each of --batch-cores."""
    name = f"ar{os.getpid() % 10000}"
    base = conf.split("-")[0]
    srv = start_server(topo, build, name, conf, a)
    alloc = None
    batch, bouts = [], []
    try:
        if base == "alloc":
            alloc = start_alloc(topo, build, name, interval_us, alloc_core)
        if not conf.endswith("-nobatch"):
            batch = [batch_job(build, a.duration + 1, c) for c in a.batch_cores]
        time.sleep(0.3)
        lgj = out / f"{tag}.lg.json"
        ip = topo.srv_ip if conf == "pthreads" else topo.fp_srv_ip
        r = topo.sh(topo.cli_ns, build / "apps" / "loadgen" / "fp-loadgen", "--server",
                    f"{ip}:{PORT}", "--proto", "spin", "--service",
                    f"fixed:{service_us:g}us", "--rate", rate, "--duration", a.duration,
                    "--warmup", "0.5", "--conns", "32", "--cores", "1", "--spin-us", "0",
                    "--quiet", "--json",
                    lgj, check=False, timeout=a.duration + 60)
        if r.returncode:
            raise RuntimeError(f"fp-loadgen: {r.stderr[-400:]}")
        while batch:
            bouts.append(json.loads(batch[0].communicate(timeout=a.duration + 30)[0]))
            batch.pop(0)
        rep = None
        if alloc:
            alloc.send_signal(2)
            aout, _ = alloc.communicate(timeout=30)
            alloc = None
            rep = json.loads(aout)
        ws = stats(topo, build, name) if conf != "pthreads" else []
    finally:
        for p in [alloc, *batch]:
            if p and p.poll() is None:
                p.kill()
                p.wait()
        stop_process(srv)
    (p,) = json.loads(lgj.read_text())["points"]
    res = {"conf": conf, "rate": rate, "p50_us": p["latency_us"]["p50"],
           "p99_us": p["latency_us"]["p99"], "p999_us": p["latency_us"]["p999"],
           "achieved_rps": p["achieved_rps"], "valid": p["valid"],
           "invalid": p.get("invalid_reasons"), "slip_p99_us": p["slip_us"]["p99"],
           "timeouts": p["timeouts"], "errors": p["errors"],
           "batch_chunks_per_s": sum(b["chunks_per_s"] for b in bouts) if bouts else None,
           "batch_by_core": {c: b["chunks_per_s"] for c, b in zip(a.batch_cores, bouts)},
           "stolen": sum(w["sched_stolen"] for w in ws)}
    if rep:
        res.update(alloc_fields(rep))
    return res


def passcost(topo, build, a, out):
    """The batch job on core 1 alone, and beside a sleeping allocator at each interval."""
    name = f"ar{os.getpid() % 10000}"
    srv = start_server(topo, build, name, "alloc", a)
    runs = []
    try:
        for rnd in range(a.rounds):
            for iv in [None, *a.pass_intervals]:
                alloc = start_alloc(topo, build, name, iv, 1, a.duration + 1) if iv else None
                time.sleep(0.3)
                b = batch_job(build, a.duration)
                bout, _ = b.communicate(timeout=a.duration + 30)
                r = {"round": rnd, "interval_us": iv,
                     "batch_chunks_per_s": json.loads(bout)["chunks_per_s"]}
                if alloc:
                    aout, _ = alloc.communicate(timeout=30)
                    rep = json.loads(aout)
                    r.update(passes_per_s=rep["passes"] / rep["seconds"],
                             late_share=rep["late_passes"] / max(1, rep["passes"]))
                runs.append(r)
                print(f"alloc_real: passcost round {rnd + 1} interval {iv}: batch "
                      f"{r['batch_chunks_per_s'] / 1e6:.2f} M/s", file=sys.stderr)
    finally:
        stop_process(srv)
    print("\n#### What a pass costs the core it sleeps on (no requests)\n")
    print("| allocator | passes/s | late passes | batch job, M chunks/s | of the batch alone |")
    print("|---|---|---|---|---|")
    base = {r["round"]: r["batch_chunks_per_s"] for r in runs if r["interval_us"] is None}
    for iv in [None, *a.pass_intervals]:
        rs = [r for r in runs if r["interval_us"] == iv]
        if iv is None:
            alone = med([r["batch_chunks_per_s"] / 1e6 for r in rs], "{:.2f}")
            print(f"| none | – | – | {alone} | 1 |")
            continue
        print(f"| a pass every {iv:g} µs, sleeping between | "
              f"{med([r['passes_per_s'] for r in rs], '{:.0f}')} | "
              f"{med([100 * r['late_share'] for r in rs], '{:.0f}%')} | "
              f"{med([r['batch_chunks_per_s'] / 1e6 for r in rs], '{:.2f}')} | "
              f"{med([r['batch_chunks_per_s'] / base[r['round']] for r in rs], '{:.2f}')} |")
    return runs


def wake(topo, build, a, out):
    """Grant to running with the allocator on the worker's core and on the other one."""
    runs = []
    for rnd in range(a.rounds):
        for core in (1, 0):
            r = one(topo, build, "alloc", "1k", a, out, f"wake-r{rnd}-c{core}",
                    a.interval_us, core, 200)
            r.update(round=rnd, alloc_core=core)
            runs.append(r)
            print(f"alloc_real: wake round {rnd + 1} allocator on core {core}: "
                  f"{r['grants_taken']} grants, p50 {r['realloc_p50_us']} us", file=sys.stderr)
    print(f"\n#### Grant to running (1k req/s of 200 µs; a pass every {a.interval_us:g} µs, "
          f"sleeping between)\n")
    print("| allocator on | grants | p50 µs | p90 µs | p99 µs | mean µs | worst µs |")
    print("|---|---|---|---|---|---|---|")
    for core, what in ((1, "core 1, the worker's (a hand-off)"),
                       (0, "core 0, the home's (a cross-core wake-up)")):
        rs = [r for r in runs if r["alloc_core"] == core and r["grants_taken"]]
        if not rs:
            print(f"| {what} | 0 | – | – | – | – | – |")
            continue
        h = [sum(x) for x in zip(*[r["realloc_hist_us"] for r in rs])]
        n = sum(h)
        mean = sum(r["realloc_mean_us"] * r["grants_taken"] for r in rs) / n
        print(f"| {what} | {n} | {pct(h, n, 0.5)} | {pct(h, n, 0.9)} | {pct(h, n, 0.99)} | "
              f"{mean:.1f} | {max(r['realloc_max_us'] for r in rs):.0f} |")
    print("\n(1 µs buckets, pooled over the rounds; the last bucket holds 63 µs and more)")
    return runs


def share(topo, build, a, out):
    runs = []
    for rnd in range(a.rounds):
        for rate in a.rates:
            for conf in a.confs:
                r = one(topo, build, conf, rate, a, out, f"r{rnd}-{rate}-{conf}",
                        a.interval_us, 1, a.service_us)
                r["round"] = rnd
                runs.append(r)
                print(f"alloc_real: round {rnd + 1}/{a.rounds} {rate} {conf}: p99 "
                      f"{r['p99_us']:.0f} us" + (f", batch {r['batch_chunks_per_s'] / 1e6:.2f} M/s"
                                                  if r["batch_chunks_per_s"] else "")
                      + (f", {r['grants']} grants" if "grants" in r else ""),
                      file=sys.stderr)
    print(f"\n#### The service and the batch job on two cores (fixed {a.service_us:g} µs; the "
          f"allocator on core 1, a pass every {a.interval_us:g} µs)")
    table(runs, a)
    return runs


def table(runs, a):
    print(f"\n| configuration | rate | p50 µs | p99 µs | p99.9 µs | valid | batch, M chunks/s "
          f"| grants/s | grant to running p50 µs | p99 µs | stolen |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rate in a.rates:
        for conf in a.confs:
            rs = [r for r in runs if r["conf"] == conf and r["rate"] == rate]
            if not rs:
                continue
            row = [conf, rate, med([r["p50_us"] for r in rs], "{:.0f}"),
                   med([r["p99_us"] for r in rs], "{:.0f}"),
                   med([r["p999_us"] for r in rs], "{:.0f}"),
                   f"{sum(r['valid'] for r in rs)}/{len(rs)}",
                   "no batch job" if rs[0]["batch_chunks_per_s"] is None else
                   med([r["batch_chunks_per_s"] / 1e6 for r in rs], "{:.2f}")]
            if conf.startswith("alloc"):
                row += [med([r["grants"] / r["seconds"] for r in rs], "{:.0f}"),
                        med([r["realloc_p50_us"] or 0 for r in rs], "{:.0f}"),
                        med([r["realloc_p99_us"] or 0 for r in rs], "{:.0f}")]
            else:
                row += ["–", "–", "–"]
            row.append("–" if conf == "pthreads" else med([r["stolen"] for r in rs], "{:.0f}"))
            print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="passcost,wake,share")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="1k,2.5k,4k", help="share: fp-loadgen rates")
    ap.add_argument("--service-us", type=float, default=200, help="share: fixed spin service")
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--interval-us", type=float, default=100,
                    help="wake, share: the allocator's pass (default 100: see passcost)")
    ap.add_argument("--pass-intervals", default="5,20,50,100,200,1000",
                    help="passcost: the intervals tried")
    ap.add_argument("--burst-idle-us", type=int, default=20)
    ap.add_argument("--style", choices=("native", "threads"), default="native",
                    help="the spin server: native API, or user-level threads (--threads)")
    ap.add_argument("--batch-cores", default="1",
                    help="share: a batch job on each of these cores (default 1)")
    ap.add_argument("--confs", default="static1,static2,alloc,alloc-nobatch",
                    help=f"share: configurations, in order (of {', '.join(CONFS)})")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "alloc_real"))
    a = ap.parse_args()
    a.rates = a.rates.split(",")
    a.confs = a.confs.split(",")
    a.batch_cores = [int(c) for c in a.batch_cores.split(",")]
    if not a.confs or not set(a.confs) <= set(CONFS):
        sys.exit(f"alloc_real: --confs: '{','.join(a.confs)}' is not a list of "
                 f"{', '.join(CONFS)}")
    a.pass_intervals = [float(x) for x in a.pass_intervals.split(",")]
    parts = a.parts.split(",")
    if not set(parts) <= {"passcost", "wake", "share"}:
        sys.exit(f"alloc_real: --parts: '{a.parts}' is not a list of passcost, wake, share")
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    if os.geteuid() != 0:
        sys.exit("alloc_real: needs root (namespaces, AF_XDP)")
    for exe in ("apps/echo/fp-echo", "ctl/fp-ctl", "bench/fp-batch", "apps/loadgen/fp-loadgen"):
        if not os.access(build / exe, os.X_OK):
            sys.exit(f"alloc_real: {build / exe} is missing: ./flowplane build")
    out.mkdir(parents=True, exist_ok=True)
    topo = Topo(f"ar{os.getpid() % 1000}", queues=2)
    topo.up()
    t0 = time.time()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `bench/alloc_real.py "
          f"{' '.join(sys.argv[1:])}`, {os.cpu_count()} vCPUs: fp-echo spin --{a.style} on AF_XDP "
          f"(home core 0, burstable worker core 1), fp-loadgen on core 1, fp-batch "
          f"(SCHED_IDLE) on core{'s' if len(a.batch_cores) > 1 else ''} "
          f"{','.join(map(str, a.batch_cores))}; median (min-max) of {a.rounds} interleaved "
          f"rounds")
    res = {}
    try:
        for part in parts:
            res[part] = {"passcost": passcost, "wake": wake, "share": share}[part](
                topo, build, a, out)
    finally:
        topo.down()
    (out / "alloc_real.json").write_text(json.dumps(
        {"args": vars(a) | {"rates": a.rates}, **res}, indent=1))
    print(f"\n({time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
