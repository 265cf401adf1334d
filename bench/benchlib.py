"""benchlib: what several benchmark scripts share (median with range, a process's memory,
starting a command in a namespace or here)."""
import re
import statistics
import subprocess
import time


def med(xs, fmt="{:g}"):
    """'median (min-max)', each formatted with @fmt."""
    xs = sorted(xs)
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(xs[0])}-{fmt.format(xs[-1])})"


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
