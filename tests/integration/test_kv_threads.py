"""fp-kv --style threads (issue 19, item 3): the blocking-style server passes the event
server's tests against memcached.

The same test functions as test_kv.py and test_kv_binary.py, with fp-kv started as
`--style threads` (a user-level thread per connection on tsock.h, apps/kv/tkv.c):
differential conformance over every kv_script, real clients (pymemcache, memccapable),
multigets over a mebibyte (output blocking and draining), eviction, expiry and memory
reuse, the linearisability check with two workers, stats, log watchers, slow uploads
(the tick thread resets them), non-reading clients, and the binary protocol.

    FP_BUILD_DIR=build/release .venv/bin/python -m pytest tests/integration/test_kv_threads.py
"""
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "integration"))
import test_kv as K  # noqa: E402
import test_kv_binary as B  # noqa: E402
from test_kv import fpkv, memcached, memccapable, reference_clients, topo  # noqa: E402,F401
from kv_borrowed import (  # noqa: E402,F401  (collected here, against this server)
    test_binary_first_byte_picks_the_protocol, test_binary_protocol_as_memcached,
    test_cache_memlimit_lowers_the_limit, test_clients, test_concurrency_linearisable,
    test_conformance, test_eviction_memory_and_recency, test_expired_memory_is_reused,
    test_lru_crawler_as_memcached, test_multiget_over_a_mebibyte,
    test_non_reading_clients_are_bounded, test_slow_uploads_do_not_take_the_store,
    test_stats_conns_like_memcached, test_stats_reset_like_memcached,
    test_stats_segment_counts_requests, test_watch_like_memcached,
    test_watch_rawcmds_evictions_and_limits)


def _kernel_cmd(exe):
    return [exe, "--style", "threads", "--net", "kernel", "-l", "127.0.0.1", "-U", "0",
            "--stats", "none"]


@pytest.fixture(autouse=True)
def threads_style(monkeypatch):
    """Every fp-kv the borrowed tests start is the threaded one."""
    monkeypatch.setattr(K, "fpkv_kernel", _kernel_cmd)
    monkeypatch.setattr(B, "fpkv_kernel", _kernel_cmd)


def test_the_borrowed_tests_start_the_threaded_server(fpkv):
    """The patch above is what the borrowed tests call (else they test the event server)."""
    assert "threads" in K.fpkv_kernel(fpkv) and B.fpkv_kernel is K.fpkv_kernel


@K.need_root
@pytest.mark.parametrize("script", K.SCRIPTS, ids=[p.stem for p in K.SCRIPTS])
def test_conformance_xdp(topo, fpkv, memcached, script):  # noqa: F811
    K.test_conformance_xdp(topo, fpkv, memcached, script, ("--style", "threads"))


def test_style_is_checked_and_told(fpkv):
    """--style takes events or threads; anything else stops at start with one line and
    exit status 2, and --help says what it does."""
    r = subprocess.run([fpkv, "--style", "fibres"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr == "fp-kv: --style: 'fibres' is not events or threads\n"
    h = subprocess.run([fpkv, "--help"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and "--style=events|threads" in h.stdout


def test_an_item_larger_than_the_default_output_cap(fpkv):
    """-I 8m: a 6 MB value is stored and read back whole, three times in one get, so the
    threads' output cap follows -I as the event server's does (4 MiB by default) and
    the answer that waits for room goes on after each drain."""
    big = bytes(range(256)) * (6 * 1024 * 1024 // 256)
    with K.Started(_kernel_cmd(fpkv), ["-m", "64", "-I", "8m", "-t", "1"]) as srv:
        c = K.Conn(srv.host, srv.port, timeout=60)
        try:
            assert c.store(b"set", b"big", big) == b"STORED"
            assert c.get_multi([b"big", b"big", b"big"]) == {b"big": big}
            assert c.cmd(b"version").startswith(b"VERSION")
        finally:
            c.close()


def test_stolen_threads_stay_linearisable(fpkv, build_dir, monkeypatch):
    """--sched steal with FP_RT_STEAL_FORCE on two workers: every ready thread is first run
    by the other worker, and goes home for the protocol (tkv.c); the linearisability
    check still holds."""
    monkeypatch.setenv("FP_RT_STEAL_FORCE", "1")
    monkeypatch.setattr(K, "fpkv_kernel", lambda exe: _kernel_cmd(exe) + ["--sched", "steal"])
    K.test_concurrency_linearisable(fpkv, build_dir)
