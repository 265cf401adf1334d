#!/usr/bin/env python3
"""The standard topology: two network namespaces joined by a veth pair (server side, client side).

Used by the integration tests and the benchmarks, and by hand:

    tools/netns.py up [--tag T] [--queues Q]   create it (removing leftovers of the same
                                     tag first); Q queues per veth end for Q xdp workers
    tools/netns.py down [--tag T]    remove it
    tools/netns.py show [--tag T]    the names and addresses

Layout for tag T (default "fp"):

    netns T-srv: veth T-s0   10.88.0.11/24 kernel's address (coexistence, kernel transport)
                             10.88.0.1     flowplane's address (AF_XDP; not configured in Linux)
    netns T-cli: veth T-c0   10.88.0.12/24 kernel's address
                             10.88.0.2     a flowplane client's address (AF_XDP)

Transmit checksum offload is turned off on both ends: a veth passes Linux's frames with
a partial checksum (CHECKSUM_PARTIAL), which an AF_XDP reader sees unfinished, and
flowplane checks every checksum. IPv6 is off so router solicitations do not add noise.
Names are at most 15 bytes (IFNAMSIZ), so a tag is at most 8 characters.
"""
import argparse
import ipaddress
import os
import signal
import subprocess
import sys

SUBNET = "10.88.0."


class Topo:
    """One server/client namespace pair; a context manager that always cleans up."""

    def __init__(self, tag="fp", subnet=SUBNET, queues=1):
        if not tag or len(tag) > 8 or not tag.replace("-", "").isalnum():
            raise ValueError(f"tag '{tag}': 1-8 letters, digits or '-'")
        self.tag = tag
        self.srv_ns, self.cli_ns = f"{tag}-srv", f"{tag}-cli"
        self.srv_if, self.cli_if = f"{tag}-s0", f"{tag}-c0"
        self.fp_srv_ip, self.fp_cli_ip = subnet + "1", subnet + "2"
        self.srv_ip, self.cli_ip = subnet + "11", subnet + "12"
        self.prefix = 24
        self.queues = queues          # rx and tx queues on each end of the veth

    # -- setup and teardown -------------------------------------------------------------

    def up(self):
        if os.geteuid() != 0:
            raise PermissionError("the topology needs root (network namespaces, veth)")
        self.down()
        try:
            self._ip("netns", "add", self.srv_ns)
            self._ip("netns", "add", self.cli_ns)
            q = ["numtxqueues", str(self.queues), "numrxqueues", str(self.queues)]
            self._ip("link", "add", self.srv_if, "netns", self.srv_ns, *q, "type", "veth",
                     "peer", "name", self.cli_if, "netns", self.cli_ns, *q)
            for ns, ifn, ip in ((self.srv_ns, self.srv_if, self.srv_ip),
                                (self.cli_ns, self.cli_if, self.cli_ip)):
                self.sh(ns, "sysctl", "-qw", f"net.ipv6.conf.{ifn}.disable_ipv6=1")
                self.sh(ns, "ip", "addr", "add", f"{ip}/{self.prefix}", "dev", ifn)
                self.sh(ns, "ip", "link", "set", ifn, "up")
                self.sh(ns, "ip", "link", "set", "lo", "up")
                self.sh(ns, "ethtool", "-K", ifn, "tx", "off")
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        """Remove both namespaces (the veth goes with them); quiet when absent."""
        for ns in (self.srv_ns, self.cli_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    # -- running things -----------------------------------------------------------------

    def cmd(self, ns, args, cpu=None):
        """The argv that runs @args in namespace @ns, pinned to @cpu when given."""
        pre = ["ip", "netns", "exec", ns]
        if cpu is not None:
            pre += ["taskset", "-c", str(cpu)]
        return pre + [str(a) for a in args]

    def sh(self, ns, *args, check=True, timeout=60):
        r = subprocess.run(self.cmd(ns, args), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} in {ns}: {r.stderr.strip() or r.returncode}")
        return r

    def popen(self, ns, args, cpu=None, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        return subprocess.Popen(self.cmd(ns, args, cpu), **kw)

    @staticmethod
    def _ip(*args):
        r = subprocess.run(["ip", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")

    def describe(self):
        return (f"server netns {self.srv_ns}: {self.srv_if} kernel {self.srv_ip}/{self.prefix},"
                f" flowplane {self.fp_srv_ip}\n"
                f"client netns {self.cli_ns}: {self.cli_if} kernel {self.cli_ip}/{self.prefix},"
                f" flowplane {self.fp_cli_ip}")


def stop_process(p, sig=signal.SIGINT, grace_s=10):
    """Stop @p (a Popen) with @sig, and kill it if it has not exited within @grace_s."""
    if p is None or p.poll() is not None:
        return
    p.send_signal(sig)
    try:
        p.wait(grace_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description="the standard two-namespace veth topology")
    ap.add_argument("action", choices=["up", "down", "show"])
    ap.add_argument("--tag", default="fp", help="name prefix, 1-8 characters (default fp)")
    ap.add_argument("--queues", type=int, default=1,
                    help="rx/tx queues on each veth end, for several xdp workers (default 1)")
    a = ap.parse_args(argv)
    try:
        t = Topo(a.tag, queues=a.queues)
        if a.action == "up":
            t.up()
        elif a.action == "down":
            t.down()
        print(t.describe())
    except (ValueError, PermissionError, RuntimeError) as e:
        print(f"netns.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
