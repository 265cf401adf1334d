#!/usr/bin/env python3
"""ZygOS's interrupts in the runtime (issue 17): --notify poll against --notify ipi, interleaved.

fp-echo spin --native on AF_XDP, two workers stealing (--sched steal) on --cores, in the
server namespace of a veth pair with two queues; fp-loadgen (Linux TCP, open loop, every
reply checked) in the client namespace. Per round, each policy once, in turn (poll, ipi,
poll, ipi, ...). What it reports, per policy: the client's latency (p50, p99, p99.9) and
its own slip (how late it sent: on a machine where it shares a core with a polling
worker that is the noise floor), the scheduler's counters, and for ipi what a signal cost:
from sending to the handler, and the handler's work, per handled signal; and per round
the ratio of p99s, called a win only when every round's is on one side of 1.

    bench/ipi_bench.py OUT [--rounds 3] [--service bimodal2:20us] [--rate 4k]

Needs root. Writes OUT/runs.json and OUT/report.md.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import med  # noqa: E402
from netns import Topo  # noqa: E402

PORT = 7


def fp_stats(topo, build, name):
    r = topo.sh(topo.srv_ns, build / "tools" / "fp-stats", "--name", name, "--totals",
                check=False)
    if r.returncode:
        raise RuntimeError(r.stderr.strip())
    return json.loads(r.stdout.strip().splitlines()[-1])["workers"]


def one(topo, a, mode, rnd, out):
    name = f"ipib{os.getpid()}"
    srv = topo.popen(topo.srv_ns, [
        a.build / "apps" / "echo" / "fp-echo", "spin", "--native", "--port", PORT, "--if",
        topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24", "--workers", "2", "--cores", a.cores,
        "--sched", "steal", "--notify", mode, "--ipi-after-us", a.after_us, "--stats", name])
    try:
        deadline = time.time() + 15
        while True:
            if srv.poll() is not None:
                raise RuntimeError(f"server exited: {srv.stderr.read()}")
            try:
                fp_stats(topo, a.build, name)
                break
            except (RuntimeError, ValueError, IndexError, KeyError):
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        js = out / f"r{rnd}-{mode}.json"
        r = topo.sh(topo.cli_ns, a.build / "apps" / "loadgen" / "fp-loadgen", "--server",
                    f"{topo.fp_srv_ip}:{PORT}", "--proto", "spin", "--service", a.service,
                    "--rate", a.rate, "--duration", a.duration, "--conns", "32", "--cores",
                    a.client_cores, "--idle", "sleep", "--spin-us", "0", "--quiet", "--json",
                    js, "--timeout", "30000", "--backlog", "4096", check=False, timeout=300)
        if r.returncode:
            raise RuntimeError(f"fp-loadgen: {r.stderr.strip()}")
        (p,) = json.loads(js.read_text())["points"]
        ws = fp_stats(topo, a.build, name)
    finally:
        if srv.poll() is None:
            srv.send_signal(signal.SIGINT)
        try:
            srv.wait(20)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    ipi = {k: sum(w["ipi"][k] for w in ws) for k in ws[0]["ipi"]}
    return {"round": rnd, "mode": mode, "valid": p["valid"],
            "invalid_reasons": p["invalid_reasons"], "ok": p["ok"], "errors": p["errors"],
            "timeouts": p["timeouts"], "lat": p["latency_us"], "slip": p["slip_us"],
            "stolen": sum(w["sched_stolen"] for w in ws),
            "local": sum(w["sched_local"] for w in ws),
            "remote_calls": sum(w["sched_remote_calls"] for w in ws), "ipi": ipi,
            "server_rc": srv.returncode}


def report(a, runs):
    lines = [f"# --notify poll against --notify ipi ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"`bench/ipi_bench.py {a.out} --rounds {a.rounds} --service {a.service} "
             f"--rate {a.rate} --duration {a.duration} --cores {a.cores} --client-cores "
             f"{a.client_cores} --after-us {a.after_us}`", "",
             "| policy | p50 µs | p99 µs | p99.9 µs | client slip p99 µs | invalid | stolen "
             "batches | signals sent / handled / late | frames, calls per handled | "
             "send to handler µs | handler work µs |", "|" + "---|" * 11]
    for mode in ("poll", "ipi"):
        rs = [r for r in runs if r["mode"] == mode]
        ipi = [r["ipi"] for r in rs]
        h = sum(i["handled"] for i in ipi)
        per = (lambda k: f"{sum(i[k] for i in ipi) / h:.1f}") if h else (lambda k: "–")
        us = (lambda k: f"{sum(i[k] for i in ipi) / h / 1000:.1f}") if h else (lambda k: "–")
        lines.append(
            f"| {mode} | {med([r['lat']['p50'] for r in rs], '{:.0f}')} | "
            f"{med([r['lat']['p99'] for r in rs], '{:.0f}')} | "
            f"{med([r['lat']['p999'] for r in rs], '{:.0f}')} | "
            f"{med([r['slip']['p99'] for r in rs], '{:.0f}')} | "
            f"{sum(not r['valid'] for r in rs)} of {len(rs)} | "
            f"{med([r['stolen'] for r in rs], '{:.0f}')} | "
            f"{sum(i['sent'] for i in ipi)} / {h} / {sum(i['late'] for i in ipi)} | "
            f"{per('frames')}, {per('calls')} | {us('wait_ns')} | {us('work_ns')} |")
    xs = []
    for rnd in sorted({r["round"] for r in runs}):
        by = {r["mode"]: r for r in runs if r["round"] == rnd}
        if "poll" in by and "ipi" in by and by["ipi"]["lat"]["p99"]:
            xs.append(by["poll"]["lat"]["p99"] / by["ipi"]["lat"]["p99"])
    if xs:
        verdict = ("ipi better" if min(xs) > 1 else "poll better" if max(xs) < 1 else
                   "within noise")
        lines += ["", f"p99 poll / ipi, per round: {', '.join(f'{x:.2f}' for x in xs)}: "
                  f"{med(xs, '{:.2f}')}, **{verdict}**"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build" / "release")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--service", default="bimodal2:20us",
                    help="spin service (default bimodal2:20us: 10 us, and 10 ms w.p. 0.001)")
    ap.add_argument("--rate", default="4k")
    ap.add_argument("--duration", default="5")
    ap.add_argument("--cores", default="0,1", help="the two workers' cores")
    ap.add_argument("--client-cores", default="1", help="fp-loadgen's core")
    ap.add_argument("--after-us", default="10", help="--ipi-after-us")
    a = ap.parse_args()
    if os.geteuid():
        sys.exit("ipi_bench: needs root (netns, veth, AF_XDP)")
    a.out.mkdir(parents=True, exist_ok=True)
    topo = Topo(f"ipb{os.getpid() % 10000}", queues=2)
    topo.up()
    runs = []
    try:
        for rnd in range(1, a.rounds + 1):
            for mode in ("poll", "ipi"):
                r = one(topo, a, mode, rnd, a.out)
                runs.append(r)
                print(f"round {rnd} {mode}: p99 {r['lat']['p99']:.0f} us, slip p99 "
                      f"{r['slip']['p99']:.0f} us, signals {r['ipi']['sent']}",
                      file=sys.stderr, flush=True)
    finally:
        topo.down()
    (a.out / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
    text = report(a, runs)
    (a.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
