#!/usr/bin/env python3
"""request_cost.py: instructions per request through one real server, split per layer (issue 21, item 3).

The real server binary (fp-echo or fp-kv, one worker, polling) runs under
`valgrind --tool=callgrind` on DPDK's memif: no kernel on the frame's path, so every
instruction from the device's receive to its transmit is user code that callgrind counts.
The client (fp-echo client, or fp-loadgen with memcached's USR workload) runs natively on
the other end of the memif link, closed loop, so the slowed-down server always has a full
batch waiting: this is the cost at full batching, IX's measure. After the client's setup
and warm-up the server's counters are zeroed (callgrind_control -z) and dumped (-d) a
window later; the window's instructions are divided by the requests the server handled
in it (the calls of its per-request function: fp-kv's process_line, fp-echo's srv_read)
and split by the source file each instruction came from, inlined code by its own file.

    sudo .venv/bin/python bench/request_cost.py [--apps echo,kv] [--window 5] [--out DIR]

--apps echo-threads,kv-threads: the same servers written with user-level threads and
blocking sockets (issue 19), their thread code a layer of its own. --apps echo-native:
the echo server written on the native API (fp-echo server --native), as IX's echo server
was, without the event-callback layer; its requests are counted by echo_recv (once per
message received). --apps echo-steal,kv-steal: the event servers on their one worker under
--sched steal, every batch through the shuffle layer (nobody to steal it): that layer's
cost per request.

The server runs with --flush-us 0 unless told otherwise (see --flush-us): the runtime's
default chunks a round by time, and under callgrind's ~30x slowdown those chunks would
hold one request each, each followed by its own transmit burst, which natively they do
not; each table says how the window's rounds went (extra handler calls and mid-round
sends a request) and, with --native-ref, how the same server's went natively.

Writes DIR/request_cost.json and DIR/request_cost.md (default results/request_cost/).
"""
import argparse
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import fp_totals  # noqa: E402

# (layer, test on (object, file, function)); the first that matches wins.
LAYERS = [
    ("device (DPDK memif PMD, mbufs, dev/)",
     lambda o, f, fn: "librte_" in o or "/dev/" in f or fn.startswith(("rte_", "eth_memif",
                                                                       "memif_"))),
    ("checksums", lambda o, f, fn: "cksum" in f or fn.startswith("fp_csum")),
    ("tcp", lambda o, f, fn: "/net/tcp" in f or "flowplane/tcp" in f),
    ("eth, arp, ipv4 (net/, wire/)",
     lambda o, f, fn: "/net/" in f or "/wire/" in f or "flowplane/wire.h" in f
     or "flowplane/net.h" in f),
    ("buffers, rings, timers (base/)",
     lambda o, f, fn: "/base/" in f or re.search(r"flowplane/(pool|mbuf|ring|timer|hist|"
                                                 r"clock|compiler|counters)\.h", f)),
    ("user-level threads (rt/thread.c, tsock.c; apps/kv/tkv.c, apps/echo/tserver.c)",
     lambda o, f, fn: re.search(r"/rt/(thread|tsock)\.c|thread_switch\.S|/apps/kv/tkv\.c|"
                                r"/apps/echo/tserver\.c|flowplane/(thread|tsock)\.h", f)
     or fn.startswith("fp_uctx_")),
    ("runtime (rt/: loop, evl, calls)", lambda o, f, fn: "/rt/" in f
     or re.search(r"flowplane/(rt|evl|api|rt_stats|shuffle)\.h", f)),
    ("application (apps/)", lambda o, f, fn: "/apps/" in f),
    ("libc (memcpy, ...)", lambda o, f, fn: "libc.so" in o or "libc" in f.split("/")[-1]),
]
# each app's per-request function; the -threads apps are the same servers written with
# user-level threads (fp-echo server --threads, fp-kv --style threads); echo-native is the
# echo written on the native API (fp-echo server --native, as IX's was), one echo_recv
# per message received
MARKER = {"echo": "srv_read", "kv": "process_line", "echo-threads": "fp_tsock_write",
          "kv-threads": "process_line", "echo-native": "echo_recv",
          "kv-steal": "process_line", "echo-steal": "srv_read"}
# -steal: the same server on one worker under --sched steal, so every batch goes through
# the shuffle layer (posted, taken back by its home: nobody to steal it): that layer's cost


def layer_of(obj, fil, fn):
    for name, test in LAYERS:
        if test(obj, fil, fn):
            return name
    return "other"


def parse_callgrind(path):
    """{(object, file, function): self Ir}, {function: calls}, total Ir."""
    names = {}

    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?$", rest)
        if not m:
            return rest
        key = (kind, m.group(1))
        if m.group(2) is not None:
            names[key] = m.group(2)
        return names.get(key, "?")

    cost, calls, total = {}, {}, 0
    ob = fl = fi = fn = cfn = ""
    skip_next = False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c0 = line[0]
            if c0.isdigit() or c0 in "+-*":
                if skip_next:          # the inclusive cost of a call: not self cost
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    ir = int(parts[1])
                    k = (ob, fi or fl, fn)
                    cost[k] = cost.get(k, 0) + ir
                    total += ir
                continue
            key, _, rest = line.partition("=")
            if key == "ob":
                ob = name("ob", rest)
            elif key == "fl":
                fl, fi = name("fl", rest), ""
            elif key in ("fi", "fe"):
                fi = name("fl", rest)
                if fi == fl:
                    fi = ""
            elif key == "fn":
                fn, fi = name("fn", rest), ""
            elif key in ("cob", "cfl", "cfi"):
                name("ob" if key == "cob" else "fl", rest)
            elif key == "cfn":
                cfn = name("fn", rest)
            elif key == "calls":
                calls[cfn] = calls.get(cfn, 0) + int(rest.split()[0])
                skip_next = True
    return cost, calls, total


def wait_line(proc, pattern, timeout):
    """Read @proc's stderr until a line matches; the lines read."""
    seen, deadline = [], time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if re.search(pattern, line):
            return seen
    raise SystemExit(f"request_cost: server not up after {timeout} s:\n{''.join(seen)[-800:]}")


def stop(p):
    """End process @p: SIGTERM, then SIGKILL after 30 s."""
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def control(what, pid):
    r = subprocess.run(["callgrind_control", what, str(pid)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"request_cost: callgrind_control {what} failed: {r.stdout}{r.stderr}")


def one(app, a, build, tmp):
    sock = os.path.join(tmp, f"{app}.sock")
    m = "--vdev=net_memif0,role={},socket=" + sock + ",socket-abstract=no"
    copy = ["--dpdk-copy", "yes"] if a.dpdk_copy else []
    stats = f"rc-{os.getpid()}-{app}"
    flush = ["--flush-us", a.flush_us] if a.flush_us != "server" and "steal" not in app else []
    srv_rt = ["--cores", "0", "--idle", "poll", "--stats", stats, "--dpdk", m.format("server"),
              "--ip", "10.99.0.1/24", *copy, *flush]
    cli_rt = ["--cores", "1", "--stats", "none", "--dpdk", m.format("client"),
              "--ip", "10.99.0.2/24", *copy]
    run_s = a.settle + a.window + 4
    if app.startswith("echo"):
        exe = str(build / "apps" / "echo" / "fp-echo")
        flag = {"echo-threads": ["--threads"], "echo-native": ["--native"],
                "echo-steal": ["--sched", "steal"]}.get(app, [])
        srv = [exe, "server", *flag, *srv_rt]
        cli = [exe, "client", "--server", "10.99.0.1", "--conns", str(a.conns), "--size", str(a.size),
               "--rounds", "0", "--duration", str(run_s), "--warmup", "0", "--idle", "poll",
               *cli_rt]
    else:
        srv = [str(build / "apps" / "kv" / "fp-kv"), "-m", "256", "-t", "1", "-U", "0",
               *(["--style", "threads"] if app == "kv-threads" else []),
               *(["--sched", "steal"] if app == "kv-steal" else []), *srv_rt]
        cli = [str(build / "apps" / "loadgen" / "fp-loadgen"), "--server", "10.99.0.1",
               "--workload", "usr", "--conns", str(a.conns), "--closed", "1", "--duration",
               str(run_s), "--warmup", "0", "--idle", "poll", "--quiet", *cli_rt]
    native = None
    if a.native_ref:
        # natively with the server's own --flush-us: what the callgrind run stands for
        own = [x for i, x in enumerate(srv) if not (x == "--flush-us" or i and srv[i - 1] == "--flush-us")]
        native = native_rounds(a, own, cli, stats)
    out = os.path.join(tmp, f"{app}.cg")
    vg = ["valgrind", "--tool=callgrind", "--fair-sched=yes", "--dump-instr=no",
          f"--callgrind-out-file={out}", *srv]
    sp = subprocess.Popen(vg, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(sp, r"^flowplane: ", 120)
        cp = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(a.settle)
        control("-z", sp.pid)
        s0 = totals(build, stats)
        time.sleep(a.window)
        control("-d", sp.pid)
        s1 = totals(build, stats)
        if cp.poll() is not None:
            raise SystemExit(f"request_cost: {app}: the client ended before the window did: "
                             f"{cp.stderr.read()[-600:]}")
        _, err = cp.communicate(timeout=run_s + 60)
        if cp.returncode != 0:
            raise SystemExit(f"request_cost: {app}: client failed: {err[-600:]}")
    finally:
        stop(sp)
    dumps = sorted(pathlib.Path(tmp).glob(f"{app}.cg.*"), key=lambda p: p.stat().st_mtime)
    dumps = [d for d in dumps if re.search(r"\.cg\.\d+$", str(d))]
    if not dumps:
        raise SystemExit(f"request_cost: {app}: callgrind wrote no dump")
    if a.keep:
        shutil.copy(dumps[0], pathlib.Path(a.out) / f"{app}.callgrind")
    cost, calls, total = parse_callgrind(str(dumps[0]))
    # (LTO may clone it: process_line.constprop.0)
    n = sum(v for k, v in calls.items() if k == MARKER[app] or k.startswith(MARKER[app] + "."))
    if n < 1000:
        raise SystemExit(f"request_cost: {app}: only {n} requests in the window")
    layers, fns = {}, {}
    for (o, f, fn), ir in cost.items():
        lay = layer_of(o, f, fn)
        layers[lay] = layers.get(lay, 0) + ir
        where = os.path.basename(f) if f and f != "???" else os.path.basename(o)
        short = f"{fn} ({where})"
        fns[short] = fns.get(short, 0) + ir
    rounds = rounds_of(s0, s1, n)
    rx_calls = max((v for k, v in calls.items() if "recv_pkts" in k or k.endswith("rx_burst")
                    and "memif" in k), default=0)
    return {"app": app, "requests": n, "instructions": total, "per_request": total / n,
            "layers": {k: v / n for k, v in sorted(layers.items(), key=lambda kv: -kv[1])},
            "top": [(k, v / n, calls.get(k.split(" (")[0], 0) / n)
                    for k, v in sorted(fns.items(), key=lambda kv: -kv[1])[:a.top]],
            "rx_polls": rx_calls, "requests_per_poll": n / rx_calls if rx_calls else None,
            "rounds": rounds, "native_rounds": native}


def totals(build, name):
    """The server's counters now (fp-stats --totals), summed over its workers."""
    try:
        ws = fp_totals(build, name)
    except RuntimeError as e:
        raise SystemExit(f"request_cost: fp-stats --name {name}: {e}")
    keys = ("conds", "calls", "tx_frames", "rx_frames", "flush_chunks", "flush_sends")
    return {k: sum(w.get(k, 0) for w in ws) for k in keys}


def rounds_of(s0, s1, n):
    """How the server's rounds went in the window, per request: the handler's calls beyond
    one a round (chunks), the sends mid-round, frames each way."""
    d = {k: s1[k] - s0[k] for k in s0}
    return {"chunks_per_request": d["flush_chunks"] / n, "sends_per_request": d["flush_sends"] / n,
            "tx_frames_per_request": d["tx_frames"] / n, "rx_frames_per_request": d["rx_frames"] / n,
            "conds_per_request": d["conds"] / n}


def native_rounds(a, srv, cli, stats):
    """The same server and client run natively for the same window: how its rounds went
    (callgrind slows the server ~30x, which changes what --flush-us's time-based chunks
    hold). Requests are counted by the server's conditions a request (from the callgrind
    run would be circular), so only the ratios to conditions are reported."""
    sp = subprocess.Popen(srv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cp = None
    try:
        wait_line(sp, r"^flowplane: ", 60)
        cp = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(a.settle)
        s0 = totals(pathlib.Path(a.build), stats)
        time.sleep(a.window)
        s1 = totals(pathlib.Path(a.build), stats)
    finally:
        for p in (cp, sp):
            if p:
                stop(p)
    d = {k: s1[k] - s0[k] for k in s0}
    c = d["conds"] or 1
    return {"chunks_per_cond": d["flush_chunks"] / c, "sends_per_cond": d["flush_sends"] / c,
            "tx_frames_per_cond": d["tx_frames"] / c, "conds": d["conds"]}


def table(r):
    lines = [f"#### {r['app']}: {r['per_request']:,.0f} instructions per request "
             f"({r['requests']:,} requests in the window"
             + (f", {r['requests_per_poll']:.1f} per receive poll" if r["requests_per_poll"]
                else "") + ")", "",
             "| layer (self cost, by source file; inlined code by its own file) | "
             "instructions per request |", "|---|---|"]
    for k, v in r["layers"].items():
        lines.append(f"| {k} | {v:,.0f} |")
    lines.append(f"| **total** | **{r['per_request']:,.0f}** |")
    ro, nat = r.get("rounds"), r.get("native_rounds")
    if ro:
        per_cond = ro["conds_per_request"] or 1
        lines += ["", f"Rounds in the window: {ro['chunks_per_request']:.2f} extra handler calls "
                  f"(--flush-us chunks) and {ro['sends_per_request']:.2f} mid-round sends a "
                  f"request, {ro['conds_per_request']:.2f} conditions a request"
                  + (f"; natively, the same server and client, the server's own --flush-us: "
                     f"{nat['chunks_per_cond'] * per_cond:.2f} chunks and "
                     f"{nat['sends_per_cond'] * per_cond:.2f} mid-round sends a request"
                     if nat else "") + "."]
    lines += ["", "Largest functions (self cost per request):", "",
              "| function (file of the code) | instructions | calls |", "|---|---|---|"]
    for k, v, c in r["top"]:
        lines.append(f"| `{k}` | {v:,.0f} | {c:.2f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", default="echo,kv", help="comma-separated: echo, kv, "
                    "echo-threads, kv-threads, echo-native, echo-steal, kv-steal "
                    "(default echo,kv)")
    ap.add_argument("--conns", type=int, default=16, help="client connections, one request "
                    "in flight each (default 16)")
    ap.add_argument("--settle", type=float, default=4.0, help="seconds of load before the "
                    "window: the client's setup and warm-up (default 4)")
    ap.add_argument("--window", type=float, default=5.0, help="seconds counted (default 5)")
    ap.add_argument("--size", type=int, default=64, help="fp-echo's message size in bytes "
                    "(default 64)")
    ap.add_argument("--dpdk-copy", action="store_true", help="both ends with --dpdk-copy yes "
                    "(frames copied to and from DPDK's own mbufs, as before zero-copy)")
    ap.add_argument("--flush-us", default="0", help="the server's --flush-us, or 'server' "
                    "for its own default (10 on dpdk). Default 0: under callgrind a request "
                    "takes ~30x its native time, so the default's time-based chunks would "
                    "hold one request each and send after each, where natively a round of "
                    "16 is one or two chunks and one send (--native-ref shows it); 0 is one "
                    "handler call and one send a round (the steal apps take none)")
    ap.add_argument("--native-ref", action="store_true", help="first run each server "
                    "natively for the same window and report how its rounds went, beside "
                    "callgrind's")
    ap.add_argument("--top", type=int, default=20, help="functions listed (default 20)")
    ap.add_argument("--keep", action="store_true", help="keep each callgrind dump in --out "
                    "(APP.callgrind, for callgrind_annotate)")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--out", default=str(ROOT / "results" / "request_cost"))
    a = ap.parse_args()
    if a.size < 1:
        ap.error("--size takes a positive number of bytes")
    if a.flush_us != "server" and not (a.flush_us.isdigit() and int(a.flush_us) <= 1000000):
        ap.error("--flush-us takes microseconds (0-1000000) or 'server'")
    apps = [x for x in a.apps.split(",") if x]
    if not apps or any(x not in MARKER for x in apps):
        ap.error(f"--apps takes a comma-separated list of {', '.join(MARKER)}")
    if os.geteuid() != 0:
        sys.exit("request_cost: needs root (DPDK's EAL): run it with sudo")
    for tool in ("valgrind", "callgrind_control"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"request_cost: {tool} not found (apt-get install valgrind)")
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        for app in apps:
            print(f"request_cost: {app} under callgrind ({a.settle + a.window + 4:.0f} s of load)",
                  file=sys.stderr, flush=True)
            res.append(one(app, a, build, tmp))
    cmd = "sudo .venv/bin/python bench/request_cost.py " + " ".join(sys.argv[1:])
    (out / "request_cost.json").write_text(json.dumps({"command": cmd.strip(), "runs": res},
                                                      indent=1))
    lines = [f"request_cost, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
             f"`{cmd.strip()}`; the server under callgrind on memif, {a.conns} connections "
             f"closed loop, one request in flight each; fp-echo {a.size}-byte messages, fp-kv "
             f"memcached's USR (GET of 19-byte keys, 2-byte values)", ""]
    for r in res:
        lines += table(r) + [""]
    md = "\n".join(lines)
    (out / "request_cost.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
