"""test_kv.py's and test_kv_binary.py's tests, as wrappers another module imports by name
to run them against another fp-kv (test_kv_threads.py: --style threads; test_kv_steal.py:
--sched steal). That module patches K.fpkv_kernel and B.fpkv_kernel (an autouse fixture)
so that every server these tests start is its own; pytest collects the names it imports.
Not a test module itself (no test_ prefix)."""
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "integration"))
import test_kv as K  # noqa: E402
import test_kv_binary as B  # noqa: E402
from test_kv import fpkv, memcached, memccapable, reference_clients, topo  # noqa: E402,F401


@pytest.mark.parametrize("script", K.SCRIPTS, ids=[p.stem for p in K.SCRIPTS])
def test_conformance(fpkv, memcached, script):  # noqa: F811
    K.test_conformance_kernel(fpkv, memcached, script)


def test_clients(fpkv, memccapable, reference_clients):  # noqa: F811
    K.test_clients_kernel(fpkv, memccapable, reference_clients)


def test_multiget_over_a_mebibyte(fpkv, memcached):  # noqa: F811
    K.test_multiget_over_a_mebibyte(fpkv, memcached)


def test_lru_crawler_as_memcached(fpkv, memcached):  # noqa: F811
    K.test_lru_crawler_as_memcached(fpkv, memcached)


def test_expired_memory_is_reused(fpkv, memcached):  # noqa: F811
    K.test_expired_memory_is_reused(fpkv, memcached)


def test_eviction_memory_and_recency(fpkv):  # noqa: F811
    K.test_eviction_memory_and_recency(fpkv)


def test_concurrency_linearisable(fpkv, build_dir):  # noqa: F811
    K.test_concurrency_linearisable(fpkv, build_dir)


def test_stats_segment_counts_requests(fpkv, build_dir):  # noqa: F811
    K.test_stats_segment_counts_requests(fpkv, build_dir)


def test_stats_reset_like_memcached(fpkv, memcached):  # noqa: F811
    K.test_stats_reset_like_memcached(fpkv, memcached)


def test_stats_conns_like_memcached(fpkv, memcached):  # noqa: F811
    K.test_stats_conns_like_memcached(fpkv, memcached)


def test_watch_like_memcached(fpkv, memcached):  # noqa: F811
    K.test_watch_like_memcached(fpkv, memcached)


def test_watch_rawcmds_evictions_and_limits(fpkv, memcached):  # noqa: F811
    K.test_watch_rawcmds_evictions_and_limits(fpkv, memcached)


def test_slow_uploads_do_not_take_the_store(fpkv):  # noqa: F811
    K.test_slow_uploads_do_not_take_the_store(fpkv)


def test_cache_memlimit_lowers_the_limit(fpkv):  # noqa: F811
    K.test_cache_memlimit_lowers_the_limit(fpkv)


def test_non_reading_clients_are_bounded(fpkv):  # noqa: F811
    K.test_non_reading_clients_are_bounded(fpkv)


def test_binary_protocol_as_memcached(fpkv, memcached):  # noqa: F811
    B.test_binary_protocol_as_memcached(fpkv, memcached)


def test_binary_first_byte_picks_the_protocol(fpkv):  # noqa: F811
    B.test_binary_first_byte_picks_the_protocol(fpkv)
