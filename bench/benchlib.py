"""benchlib: what several benchmark scripts share (median with range, a process's memory,
starting a command in a namespace or here, a free loopback port)."""
import json
import pathlib
import re
import socket
import statistics
import subprocess
import time


def med(xs, fmt="{:g}"):
    """'median (min-max)', each formatted with @fmt."""
    xs = sorted(xs)
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(xs[0])}-{fmt.format(xs[-1])})"


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fp_totals(build, name, whole=False):
    """`fp-stats --name NAME --totals`: the workers' records of a run's statistics segment
    (a list, one per worker), or with @whole the whole record (tsc_hz and the rest beside
    "workers"); RuntimeError when fp-stats cannot read it (yet)."""
    r = subprocess.run([str(build / "tools" / "fp-stats"), "--name", name, "--totals"],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip())
    rec = json.loads(r.stdout.strip().splitlines()[-1])
    return rec if whole else rec["workers"]


def start_with_stats(argv, build, name, who, ready=None, limit_s=20):
    """Start server @argv (run with --stats @name, output piped) and return its Popen once
    fp-stats reads its segment and @ready(popen), when given, is true; @who names the
    bench in the SystemExit when the server exits first or is not ready in @limit_s."""
    srv = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.time() + limit_s
    why = ""
    while True:
        if srv.poll() is not None:
            raise SystemExit(f"{who}: {pathlib.Path(str(argv[0])).name} exited: "
                             f"{srv.stderr.read()[-400:]}")
        try:
            fp_totals(build, name)
            if ready is None or ready(srv):
                return srv
            why = "not ready"
        except (RuntimeError, ValueError, IndexError, KeyError) as e:
            why = str(e)
        if time.time() > deadline:
            srv.kill()
            srv.wait()
            raise SystemExit(f"{who}: no statistics from {pathlib.Path(str(argv[0])).name} "
                             f"in {limit_s} s: {why}")
        time.sleep(0.2)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def settle_rss(pid, limit_s=30, stable_kib=256):
    """RSS once it has moved less than @stable_kib for 2 s (or at @limit_s)."""
    last, still, deadline = rss_kib(pid), 0, time.time() + limit_s
    while time.time() < deadline and still < 4:
        time.sleep(0.5)
        now = rss_kib(pid)
        still = still + 1 if abs(now - last) < stable_kib else 0
        last = now
    return last


def start(topo, ns, cmd):
    """@cmd in namespace @ns of @topo (tools/netns.py), or here when @ns is None."""
    if ns:
        return topo.popen(ns, cmd)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def parse_builds(arg):
    """--build DIR, or LABEL=DIR,LABEL=DIR to interleave builds (before and after a change):
    [(label, path)]; a lone DIR is labelled ''."""
    out = []
    for part in [p for p in arg.split(",") if p]:
        label, eq, path = part.partition("=")
        out.append((label, path) if eq else ("", part))
    labels = [lb for lb, _ in out]
    if len(out) > 1 and ("" in labels or len(set(labels)) != len(labels)):
        raise SystemExit("--build: several builds need distinct labels: LABEL=DIR,LABEL=DIR")
    return out


def ratio_cell(runs, key, num, den, kind_key, kind):
    """Per-round ratio of @key between builds @num and @den for @kind: 'median (min-max)' and
    a verdict (a win or a loss only when the whole range is on one side of 1)."""
    by = {}
    for r in runs:
        if r[kind_key] == kind and r["build"] in (num, den):
            by.setdefault(r["round"], {})[r["build"]] = r[key]
    xs = [v[num] / v[den] for v in by.values() if num in v and den in v and v[den]]
    if not xs:
        return "–"
    verdict = "higher" if min(xs) > 1 else "lower" if max(xs) < 1 else "within noise"
    return f"{med(xs, '{:.2f}')} ({verdict})"
