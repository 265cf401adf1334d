"""Shared fixtures for the integration tier: where the tree and the release build are."""
import os
import pathlib
import shutil
import socket
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def build_dir():
    d = pathlib.Path(os.environ.get("FP_BUILD_DIR", ROOT / "build" / "release"))
    if not (d / "build.ninja").exists():
        pytest.fail(f"no release build at {d}: run ./flowplane build first")
    return d


def sanitized(exe):
    """Whether @exe was built with AddressSanitizer (FP_BUILD_DIR=build/debug): its
    allocator keeps freed memory in quarantine, so resident memory does not go back."""
    with open(exe, "rb") as f:
        return b"__asan_init" in f.read()


def free_port(host="127.0.0.1"):
    """A port free on @host for both TCP and UDP (a server that binds both gets it)."""
    for _ in range(50):
        t = socket.socket()
        t.bind((host, 0))
        port = t.getsockname()[1]
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()
    raise AssertionError("no free port")


def run(args, **kw):
    """Run a command, capturing text output; never raises on a non-zero exit."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 300), **kw)


# Every outside tool the integration tier runs, and the Debian package that has it
# (scripts/bootstrap installs them all). Checked once, up front: a missing tool stops the
# tier with one line naming its package, not dozens of failures deep inside tests.
TOOLS = {
    "ip": "iproute2", "ethtool": "ethtool", "ping": "iputils-ping", "taskset": "util-linux",
    "setpriv": "util-linux", "ps": "procps", "memcached": "memcached",
    "memccapable": "libmemcached-tools", "nsd": "nsd", "dig": "bind9-dnsutils",
    "kdig": "knot-dnsutils", "curl": "curl",
}
ROOT_ONLY = {"ip", "ethtool", "ping"}


def pytest_sessionstart(session):
    need = {t: p for t, p in TOOLS.items() if os.geteuid() == 0 or t not in ROOT_ONLY}
    missing = sorted({f"{t} (Debian package {p})" for t, p in need.items() if not shutil.which(t)})
    if missing:
        pytest.exit("integration tier: missing " + ", ".join(missing) +
                    ": run scripts/bootstrap as root", returncode=3)
