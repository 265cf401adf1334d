#!/usr/bin/env python3
"""IX's control loop on this machine's real cores: a step pattern rising and falling, served
by 1 worker, by 2, and by 2 under fp-ctl run (issue 18, steps 2 and 4).

The standard topology with two queues; fp-echo spin --native on AF_XDP with two workers on
--server-cores (0,1; --idle adaptive); fp-loadgen (spin protocol, fixed service time, open
loop, kernel transport, polling on --lg-cores, default 1: on 2 vCPUs it shares worker 1's
core) follows --pattern (default sine:4k:40k:40: up and down once) over --duration, one
point a second. The configurations (--confs; default the first three), interleaved for
--rounds rounds:

  static1   --steer-weights 1,0 and worker 1 parked (it owns nothing and sleeps)
  static2   both workers, groups split evenly, nothing changes
  moving    (with --confs) as static2, while fp-ctl move sends every group to the other
            worker in turn, all through the pattern: migrations under load, measured
  dynamic   starts as static1; fp-ctl run decides (its default policy unless --policy:
            add a worker above 300 us of queueing delay, remove one above idle 1/n + 0.1,
            10 Hz)
  A parked worker lends its queue to the polling one (the server's default --park-queue
  lend: nothing waits for the parked worker). Suffixes, which combine:
  -keep     the server's --park-queue keep: the parked worker polls its own queue,
            waking for whatever it receives, which it hands over
  -fifo     the server's --park-prio 1: a parked worker sleeps at SCHED_FIFO 1, so
            what it still does runs ahead of the generator polling on its core
            (e.g. static1-keep-fifo)

Per run: every window's offered and achieved rate, p50/p99, validity (fp-loadgen's checks:
achieved >= 99% of offered, client slip, timeouts); the server's CPU (utime + stime over the
pattern); for dynamic, the controller's log (workers polling over time, moves). Written to
OUT/ctl_step.json and OUT/ctl_step.md (default results/ctl_step/).

With --app kv the server is fp-kv (two workers, movable connections) under fp-loadgen's
memcache USR load (keys 19 B, values 2 B, 99.8% GET, preloaded), whose every answer is
checked against its request (the key; a lost, repeated or reordered answer is an error).
With --batch, the dynamic configuration runs fp-ctl run --batch: bench/batch_work.py (a
SHA-256 loop that counts its blocks, at SCHED_IDLE since on 2 vCPUs its core is also
fp-loadgen's) on the parked worker's core, IX's consolidation; its
work per second is reported beside the workers polling, as a fraction of its rate alone on
that core (measured before each round).

    sudo .venv/bin/python bench/ctl_step.py [--rounds 3] [--pattern sine:4k:40k:40]
    sudo .venv/bin/python bench/ctl_step.py --app kv --batch --lg-idle adaptive \
        --pattern step:20k:300k:70k:5:10 --duration 50
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402
sys.path.insert(0, str(ROOT / "bench"))
from pareto_sim import Power, read_power  # noqa: E402

PORT = 7
KV_PORT = 11211


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def stats(topo, build, name):
    r = topo.sh(topo.srv_ns, build / "tools" / "fp-stats", "--name", name, "--totals")
    return json.loads(r.stdout.strip().splitlines()[-1])["workers"]


def ctl(topo, build, *args):
    return topo.sh(topo.srv_ns, build / "ctl" / "fp-ctl", *map(str, args), check=False)


RAPL = pathlib.Path("/sys/class/powercap/intel-rapl:0/energy_uj")


def rapl_uj():
    """The package's energy counter (µJ), or None where the machine has no RAPL."""
    try:
        return int(RAPL.read_text())
    except (OSError, ValueError):
        return None


def model_energy(pw, ws0, ws1, t_s):
    """Joules over t_s seconds of the run by the power model (bench/power/, at its nominal
    clock: real cores here have no clock to set) from what each worker measured: time
    asleep (parked, or the idle policy's sleeps) counted at the deep C-state's power, the
    rest (polling or busy) at the core's; the uncore throughout; a wake-up per unpark."""
    p = pw.p
    e = p["uncore_w"] * t_s
    for w0, w1 in zip(ws0, ws1):
        slept = min(t_s, max(0.0, (w1.get("slept_ns", 0) - w0.get("slept_ns", 0)) / 1e9))
        e += (t_s - slept) * pw.core(p["f_nom"]) + slept * p["core_c6_w"]
        e += max(0, w1.get("parks", 0) - w0.get("parks", 0)) * p["wake_uj"] * 1e-6
    return e


def batch_peak(a, out, tag):
    """The batch job's rate alone on the batch core (the server's second), blocks/s."""
    f = out / f"{tag}.peak.txt"
    f.unlink(missing_ok=True)
    subprocess.run(["taskset", "-c", a.server_cores.split(",")[1], "chrt", "--idle", "0",
                    sys.executable,
                    str(ROOT / "bench" / "batch_work.py"), str(f), "--seconds", "3"], check=True)
    rows = [tuple(map(float, x.split())) for x in f.read_text().splitlines()]
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])


def batch_series(path, t0, seconds):
    """Blocks done in each second [t0 + i, t0 + i + 1) of the pattern, from the job's lines
    (work between two lines is spread evenly over the time between them)."""
    if not path.exists():
        return []
    rows = [tuple(map(float, x.split())) for x in path.read_text().splitlines() if x.strip()]
    per = [0.0] * seconds
    for (ta, na), (tb, nb) in zip(rows, rows[1:]):
        if tb <= ta:
            continue
        for i in range(max(0, int(ta - t0)), min(seconds, int(tb - t0) + 1)):
            lo, hi = max(ta, t0 + i), min(tb, t0 + i + 1)
            if hi > lo:
                per[i] += (nb - na) * (hi - lo) / (tb - ta)
    return per


def server_cmd(topo, build, a, name, extra):
    common = ["--if", topo.srv_if, "--ip", f"{topo.fp_srv_ip}/24", "--workers", "2",
              "--cores", a.server_cores, "--idle", a.server_idle, "--stats", name, *extra]
    if a.app == "kv":
        return [build / "apps" / "kv" / "fp-kv", "-p", KV_PORT, "-m", "256", *common]
    return [build / "apps" / "echo" / "fp-echo", "spin", "--native", "--port", PORT, *common]


def load_args(a):
    if a.app == "kv":
        return ["--proto", "memcache", "--workload", "usr", "--records", "10000"]
    return ["--proto", "spin", "--service", f"fixed:{a.service_us}us"]


def one(topo, build, conf, a, out, tag):
    name = f"cs{os.getpid() % 10000}"
    label, *flags = conf.split("-")
    label, conf = conf, label
    extra = ["--steer-weights", "1,0"] if conf in ("static1", "dynamic") else []
    extra += ["--park-prio", "1"] if "fifo" in flags else []
    extra += ["--park-queue", "keep"] if "keep" in flags else []
    srv = topo.popen(topo.srv_ns, server_cmd(topo, build, a, name, extra))
    ctlp, t_ctl = None, 0.0
    batch = out / f"{tag}.batch.txt"
    batch.unlink(missing_ok=True)
    try:
        deadline = time.time() + 15
        while ctl(topo, build, "groups", name).returncode:
            if time.time() > deadline or srv.poll() is not None:
                raise RuntimeError(f"server did not start: {srv.stderr.read()[-400:]}")
            time.sleep(0.2)
        if conf in ("static1", "dynamic"):
            r = ctl(topo, build, "park", name, 1)
            if r.returncode:
                raise RuntimeError(f"park: {r.stderr}")
        log = out / f"{tag}.ctl.jsonl"
        if conf == "dynamic":
            pol = out / "policy"
            pol.write_text(a.policy.replace(";", "\n") + "\n")
            # at SCHED_IDLE: on 2 vCPUs the batch core is also fp-loadgen's, and the
            # client must not wait for the batch job (IX's would have cores of its own)
            job = (["--batch", f"exec chrt --idle 0 {sys.executable} "
                               f"{ROOT / 'bench' / 'batch_work.py'} {batch}"] if a.batch else [])
            t_ctl = time.time()
            ctlp = topo.popen(topo.srv_ns, [build / "ctl" / "fp-ctl", "run", name, "--log",
                                            log, "--policy", pol, *job])
        mover = stop_moving = None
        if conf == "moving":
            # every group in turn to the other worker, as fast as fp-ctl move answers
            stop_moving = threading.Event()

            def move_all():
                owner, g = [i % 2 for i in range(128)], 0
                while not stop_moving.is_set():
                    if ctl(topo, build, "move", name, g, 1 - owner[g]).returncode == 0:
                        owner[g] = 1 - owner[g]
                    g = (g + 1) % 128
            mover = threading.Thread(target=move_all)
            mover.start()
        c0 = cpu_s(srv.pid)
        lgj = out / f"{tag}.lg.json"
        ws0, e0, t_start = stats(topo, build, name), rapl_uj(), time.time()
        r = topo.sh(topo.cli_ns, build / "apps" / "loadgen" / "fp-loadgen", "--server",
                    f"{topo.fp_srv_ip}:{KV_PORT if a.app == 'kv' else PORT}", *load_args(a),
                    "--pattern", a.pattern, "--duration",
                    a.duration, "--window", "1", "--conns", "32", "--warmup", "1",
                    "--cores", a.lg_cores, "--idle", a.lg_idle, "--workers",
                    len(a.lg_cores.split(",")), "--quiet", "--json", lgj,
                    check=False, timeout=a.duration + 60)
        t_end = time.time()
        c1 = cpu_s(srv.pid)
        ws, e1, t_stats = stats(topo, build, name), rapl_uj(), time.time()
        if r.returncode:
            raise RuntimeError(f"fp-loadgen: {r.stderr[-400:]}")
    finally:
        if mover:
            stop_moving.set()
            mover.join()
        if ctlp:
            stop_process(ctlp, grace_s=5)
        stop_process(srv)
    pts = json.loads(lgj.read_text())["points"]
    # the pattern's windows: fp-loadgen leaves right after its last one (within the few
    # ms its last answers take), so the first began --duration seconds before that
    t0 = t_end - a.duration
    pw = Power({k: v[0] for k, v in read_power(a.power).items()})
    res = {"conf": label, "server_cpu_s": round(c1 - c0, 3),
           "energy_j": round(model_energy(pw, ws0, ws, t_stats - t_start), 1),
           "energy_from": "model",
           "moves": sum(w["moves_in"] for w in ws),
           "move_conns": sum(w["move_conns"] for w in ws),
           "move_held": sum(w["move_held"] for w in ws),
           "move_us_mean": round(sum(w["move_ns"] for w in ws) / 1e3 /
                                 max(1, sum(w["moves_out"] for w in ws)), 1),
           "move_us_max": round(max(w["move_ns_max"] for w in ws) / 1e3, 1),
           "steer_drop": sum(w["steer_drop"] for w in ws),
           # frames each worker received for the other's groups over the pattern
           "handed_over": [w1["steer_out"] - w0["steer_out"] for w0, w1 in zip(ws0, ws)],
           "parked_s": [round(w.get("parked_ns", 0) / 1e9, 2) for w in ws],
           "rst_tx": sum(w["net"]["tcp_rst_tx"] for w in ws),
           "points": [{"target_rps": p["target_rps"], "achieved_rps": p["achieved_rps"],
                       "p50_us": p["latency_us"]["p50"], "p99_us": p["latency_us"]["p99"],
                       "errors": p["errors"], "timeouts": p["timeouts"],
                       "slip_p99_us": p["slip_us"]["p99"], "valid": p["valid"],
                       "invalid_reasons": p["invalid_reasons"]} for p in pts]}
    if e0 is not None and e1 is not None:
        res["energy_j"], res["energy_from"] = round((e1 - e0) / 1e6, 1), "rapl"
    if conf == "dynamic" and log.exists():
        ticks = [json.loads(x) for x in log.read_text().splitlines()]
        res["polling"] = [(round(t["t_ms"] / 1e3, 2), t["polling"]) for t in ticks
                          if t["act"] != "hold" or t is ticks[0]]
        res["ups"] = sum(t["act"] == "up" for t in ticks)
        res["downs"] = sum(t["act"] == "down" for t in ticks)
        # what the loop saw of the polling workers over the pattern: the highest queueing
        # delay estimate and the lowest idle share (its two signals)
        seen = [w for t in ticks if t0 - t_ctl <= t["t_ms"] / 1e3 <= t0 - t_ctl + a.duration
                for w in t["workers"] if not w["parked"] and w["fresh"]]
        res["delay_us_max"] = max((w["delay_us"] for w in seen), default=None)
        res["idle_min"] = min((w["idle"] for w in seen), default=None)
        # workers polling in each second of the pattern (the last tick before its end)
        per = []
        for i in range(a.duration):
            at = (t0 + i + 1 - t_ctl) * 1e3
            before = [t["polling"] for t in ticks if t["t_ms"] <= at]
            per.append(before[-1] if before else None)
        res["polling_per_s"] = per
    if conf == "dynamic" and a.batch:
        res["batch_blocks_per_s"] = [round(x) for x in batch_series(batch, t0, a.duration)]
    return res


def summary(runs, a):
    app = ("fp-kv, memcache USR" if a.app == "kv" else
           f"fp-echo spin --native, spin service {a.service_us} us")
    lines = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `bench/ctl_step.py "
             f"{' '.join(sys.argv[1:])}`, {os.cpu_count()} vCPUs: pattern {a.pattern} over "
             f"{a.duration} s, {app}, server cores {a.server_cores}, "
             f"fp-loadgen cores {a.lg_cores}, "
             f"{'client frames on veth queue %d (XPS), ' % a.client_queue if getattr(a, 'client_queue', None) is not None else ''}"
             f"policy '{a.policy or 'default'}'; median (min-max) over "
             f"{a.rounds} interleaved rounds", "",
             "| configuration | windows with p99 > SLO (of valid) | invalid windows | worst valid p99, µs | median valid p99, µs | median p99 of all windows (invalid too), µs | answered, % of offered | server CPU, s | energy, J | moves | errors + timeouts (all windows) | RST sent |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def mm(xs, fmt="{:.0f}"):
        return (fmt.format(statistics.median(xs)) + " (" + fmt.format(min(xs)) + "-" +
                fmt.format(max(xs)) + ")") if xs else "–"
    for conf in dict.fromkeys(r["conf"] for r in runs):
        rs = [r for r in runs if r["conf"] == conf]
        if not rs:
            continue
        over, invalid, worst, med, every, got = [], [], [], [], [], []
        for r in rs:
            valid = [p for p in r["points"] if p["valid"]]
            over.append(sum(p["p99_us"] > a.slo_us for p in valid))
            invalid.append(len(r["points"]) - len(valid))
            if valid:   # a run with no valid window has no valid p99 to give
                worst.append(max(p["p99_us"] for p in valid))
                med.append(statistics.median([p["p99_us"] for p in valid]))
            every.append(statistics.median([p["p99_us"] for p in r["points"]]))
            got.append(100 * sum(p.get("achieved_rps", 0) for p in r["points"]) /
                       max(1, sum(p["target_rps"] for p in r["points"])))
        lines.append(f"| {conf} | {mm(over)} | {mm(invalid)} | {mm(worst)} | {mm(med)} | "
                     f"{mm(every)} | {mm(got, '{:.1f}')}% | "
                     f"{mm([r['server_cpu_s'] for r in rs], '{:.1f}')} | "
                     f"{mm([r['energy_j'] for r in rs])} | "
                     f"{mm([r['moves'] for r in rs])} | "
                     f"{sum(p.get('errors', 0) + p.get('timeouts', 0) for r in rs for p in r['points'])} | "
                     f"{sum(r['rst_tx'] for r in rs)} |")
    src = {r["energy_from"] for r in runs}
    lines += ["", "Energy over each run's pattern (preload and warm-up included): " +
              ("read from RAPL (the package counter)" if src == {"rapl"} else
               f"modelled ({pathlib.Path(a.power).name}, its nominal clock: real cores here "
               "have no clock to set; no RAPL on this machine) from each worker's time asleep "
               "and awake, a polling core counted as busy" if src == {"model"} else
               "RAPL for some runs, the model for others")]
    mv = [r for r in runs if r["conf"] == "moving"]
    if mv:
        lines += ["", "Moving (both workers polling, every group moved to the other worker in "
                  "turn by fp-ctl move for the whole pattern): per round, group moves, "
                  "connections moved, frames held, a move's mean and longest duration, frames "
                  "dropped at a full hand-over ring, and fp-loadgen's errors and timeouts "
                  "(every answer checked against its request):", ""]
        for i, r in enumerate(mv):
            lines.append(f"- round {i + 1}: {r['moves']} moves, {r['move_conns']} connections, "
                         f"{r['move_held']} frames held, mean {r['move_us_mean']} µs, longest "
                         f"{r['move_us_max']} µs, {r['steer_drop']} hand-over drops, "
                         f"{sum(p['errors'] + p['timeouts'] for p in r['points'])} errors + "
                         "timeouts")
    dyn = [r for r in runs if r["conf"].startswith("dynamic")]
    if dyn:
        lines += ["", "Controller (dynamic runs): workers polling at each change, seconds "
                  "from the start of the loop:", ""]
        for i, r in enumerate(dyn):
            sig = (f"highest delay estimate {r['delay_us_max']:.1f} µs, lowest idle share "
                   f"{r['idle_min']:.2f}; " if r.get("delay_us_max") is not None else "")
            lines.append(f"- {r['conf']}, round {r['round']}: {sig}{r.get('ups', 0)} up, {r.get('downs', 0)} down, "
                         f"{r['moves']} group moves ({r['move_conns']} connections, "
                         f"{r['move_held']} frames held; mean {r['move_us_mean']} µs, longest "
                         f"{r['move_us_max']} µs): "
                         + ", ".join(f"{t} s: {n}" for t, n in r.get("polling", [])))
        if a.batch:
            lines += ["", "The batch job (dynamic runs; bench/batch_work.py, SHA-256 blocks, as "
                      "fp-ctl run --batch): its work over the pattern against its rate alone on "
                      "the core (peak, measured before the round), and while worker 1 was "
                      "parked against the peak over those seconds (the most it could have "
                      "had):", "",
                      "| round | peak, blocks/s | work over the pattern, % of peak x duration "
                      "| seconds worker 1 parked | work in those seconds, % of peak x those "
                      "seconds | work in the others, blocks |", "|---|---|---|---|---|---|"]
            for i, r in enumerate(dyn):
                per, pol, peak = r.get("batch_blocks_per_s", []), r.get("polling_per_s", []), r["peak"]
                one_s = [b for b, n in zip(per, pol) if n == 1]
                rest = sum(b for b, n in zip(per, pol) if n != 1)
                lines.append(f"| {r['conf']} {r['round']} | {peak:.0f} | {100 * sum(per) / (peak * a.duration):.0f}% | "
                             f"{len(one_s)} | "
                             f"{100 * sum(one_s) / (peak * len(one_s)) if one_s else 0:.0f}% | "
                             f"{rest:.0f} |")
            r = dyn[0]
            lines += ["", "Round 1, second by second: offered load (req/s), p99 (µs), workers "
                      "polling, batch work (% of peak):", "",
                      "| s | offered | p99 | workers | batch |", "|---|---|---|---|---|"]
            for i, p in enumerate(r["points"]):
                pol = r["polling_per_s"][i] if i < len(r.get("polling_per_s", [])) else None
                b = r["batch_blocks_per_s"][i] if i < len(r.get("batch_blocks_per_s", [])) else 0
                lines.append(f"| {i} | {p['target_rps']:.0f} | {p['p99_us']:.0f}"
                             f"{'' if p['valid'] else ' (invalid)'} | {pol} | "
                             f"{100 * b / r['peak']:.0f}% |")
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
    ap.add_argument("--server-idle", default="adaptive", help="the server's --idle")
    ap.add_argument("--lg-idle", default="poll",
                    help="fp-loadgen's --idle (adaptive leaves its idle time to a batch job)")
    ap.add_argument("--service-us", type=float, default=20)
    ap.add_argument("--slo-us", type=float, default=500)
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "ctl_step"))
    ap.add_argument("--confs", default="static1,static2,dynamic")
    ap.add_argument("--client-queue", type=int, choices=(0, 1),
                    help="send all the Linux client's frames on this veth queue (XPS: every "
                         "CPU mapped to it), so they arrive on the server's queue of that "
                         "number: a NIC's RSS table pointing every group at one worker, as "
                         "IX's control plane programs it; default: the kernel's choice (both)")
    ap.add_argument("--power", default=str(ROOT / "bench" / "power" / "xeon-e5-2665.txt"),
                    help="the power model's parameters (used where there is no RAPL)")
    ap.add_argument("--app", choices=("spin", "kv"), default="spin",
                    help="the server: fp-echo spin --native (spin load), or fp-kv (memcache USR)")
    ap.add_argument("--batch", action="store_true",
                    help="dynamic: fp-ctl run --batch with bench/batch_work.py")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ctl_step: needs root (namespaces, veth, AF_XDP)")
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with Topo(f"cs{os.getpid() % 1000}", queues=2) as topo:
        topo.up()
        if a.client_queue is not None:
            ncpu = os.cpu_count() or 1
            for q in range(2):
                mask = (1 << ncpu) - 1 if q == a.client_queue else 0
                topo.sh(topo.cli_ns, "sh", "-c", f"echo {mask:x} > /sys/class/net/"
                        f"{topo.cli_if}/queues/tx-{q}/xps_cpus")
        for rnd in range(a.rounds):
            peak = batch_peak(a, out, f"r{rnd + 1}") if a.batch else 0
            for conf in a.confs.split(","):
                print(f"ctl_step: round {rnd + 1}/{a.rounds}: {conf}", flush=True)
                r = one(topo, build, conf, a, out, f"r{rnd + 1}_{conf}")
                r["round"] = rnd + 1
                r["peak"] = peak
                print("  " + json.dumps({k: v for k, v in r.items() if k != "points"}),
                      flush=True)
                runs.append(r)
    (out / "ctl_step.json").write_text(json.dumps({"args": vars(a), "runs": runs}, indent=1))
    md = summary(runs, a)
    (out / "ctl_step.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
