"""fp-kv under --sched steal (issue 17): the event server, its reads run by any worker,
passes the event server's tests against memcached.

The same test functions as test_kv.py and test_kv_binary.py, with fp-kv started on two
workers with `--sched steal` and FP_RT_STEAL_FORCE=1, so that every batch of every
connection runs on the other worker (ZygOS's shuffle layer, rt/steal.c): its reads use
that worker's store reader and stage (kv_conn_visit), its answers go home as calls, a
connection that ends there is freed at home (mconn_end), and the home's timers and log
watchers leave a connection alone while a read of it is out (fp_evl_conn_busy).
Differential conformance over every kv_script, real clients, multigets over a mebibyte
(output blocking and draining), expiry and memory reuse, the linearisability check,
stats, log watchers, slow uploads, non-reading clients and the binary protocol.

Not borrowed: test_eviction_memory_and_recency, whose RSS bound holds for one worker: with
two (stealing or not) a second fill on a connection of the other worker grows VmRSS once,
by 16 MB (40 -> 57 MB at -m 16, flat over four more fills): that worker's kernel-rx pool
(KT_N_BUFS buffers per worker, touched lazily) taking its first burst, not the store,
whose items live in one -m arena.

    FP_BUILD_DIR=build/release .venv/bin/python -m pytest tests/integration/test_kv_steal.py
"""
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "integration"))
import test_kv as K  # noqa: E402
import test_kv_binary as B  # noqa: E402
from test_kv import fpkv, memcached, memccapable, reference_clients  # noqa: E402,F401
from netns import Topo  # noqa: E402
from kv_borrowed import (  # noqa: E402,F401  (collected here, against this server)
    test_binary_protocol_as_memcached, test_clients, test_concurrency_linearisable,
    test_conformance, test_expired_memory_is_reused, test_multiget_over_a_mebibyte,
    test_non_reading_clients_are_bounded, test_slow_uploads_do_not_take_the_store,
    test_stats_segment_counts_requests, test_watch_like_memcached,
    test_watch_rawcmds_evictions_and_limits)


def _kernel_cmd(exe):
    # The borrowed tests append their own flags (-t 1 among them): the shell puts
    # "-t 2" last, where it wins, as memcached's last -t does.
    return ["/bin/sh", "-c", 'exec "$0" "$@" -t 2 --sched steal', exe, "--net", "kernel",
            "-l", "127.0.0.1", "-U", "0", "--stats", "none"]


@pytest.fixture(autouse=True)
def stealing(monkeypatch):
    """Every fp-kv the borrowed tests start runs two workers, every batch stolen."""
    monkeypatch.setattr(K, "fpkv_kernel", _kernel_cmd)
    monkeypatch.setattr(B, "fpkv_kernel", _kernel_cmd)
    monkeypatch.setenv("FP_RT_STEAL_FORCE", "1")


def test_the_borrowed_tests_start_the_stealing_server(fpkv):
    """The patch above is what the borrowed tests call (else they test the plain server)."""
    assert "--sched steal" in " ".join(K.fpkv_kernel(fpkv)) and B.fpkv_kernel is K.fpkv_kernel


@pytest.fixture(scope="module")
def topo2():
    """The standard topology with two queues on each veth end: one per xdp worker."""
    if os.geteuid() != 0:
        pytest.skip("needs root (netns, veth, AF_XDP)")
    t = Topo("kvst", queues=2)
    t.up()
    try:
        yield t
    finally:
        t.down()


@K.need_root
@pytest.mark.parametrize("script", K.SCRIPTS, ids=[p.stem for p in K.SCRIPTS])
def test_conformance_xdp(topo2, fpkv, memcached, script):
    """On flowplane's own stack over AF_XDP: a stolen read's bytes are the home's receive
    buffers (zero copy), released by the RECV_DONE the thief sends home."""
    K.test_conformance_xdp(topo2, fpkv, memcached, script,
                           ("-t", "2", "--cores", "0,1", "--sched", "steal"))


CHURN = 600

# In the client namespace: @n connections that open and close at once (the Linux client's
# last handshake ACK and its FIN arrive together: one round has the KNOCK and the EOF),
# every third after a request, then one that asks and reads; prints its answer.
CHURN_CLIENT = r"""
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    s = socket.create_connection((host, port), 20)
    if i % 3 == 1:
        s.sendall(b"version\r\n")
    s.close()
s = socket.create_connection((host, port), 20)
s.sendall(b"version\r\n")
print(s.recv(100).decode().strip())
"""


@K.need_root
def test_connections_that_come_and_go_at_once_xdp(topo2, fpkv):
    """On AF_XDP, clients that connect and leave at once. Two ways a connection was freed
    while a batch still named it (heap corruption at exit, or a crash; ASan: use after
    free): closed in the round that accepted it, its CLOSE waited for the flow's batch
    but its return went up at once and again after (every XdpPair's readiness probe is
    such a client); and a close executed as a batch came home left the flow's conditions
    from before it (the RST of a client that left before our answer) to be posted to a
    fresh record and run after the connection was freed. The server answers after them
    and exits 0 on SIGTERM."""
    srv = K.NsServer(topo2, topo2.srv_ns, [
        fpkv, "-p", K.XDP_PORT, "-U", "0", "-m", "64", "-c", "4096", "--net", "xdp",
        "--if", topo2.srv_if, "--ip", f"{topo2.fp_srv_ip}/24", "-t", "2", "--cores", "0,1",
        "--sched", "steal", "--stats", "none"])
    try:
        r = topo2.sh(topo2.cli_ns, sys.executable, "-c", K.WAIT_READY, "20",
                     f"{topo2.fp_srv_ip}:{K.XDP_PORT}", check=False, timeout=60)
        assert r.returncode == 0, srv.stderr()
        r = topo2.sh(topo2.cli_ns, sys.executable, "-c", CHURN_CLIENT, topo2.fp_srv_ip,
                     K.XDP_PORT, str(CHURN), check=False, timeout=120)
        assert r.returncode == 0 and r.stdout.strip().startswith("VERSION"), (
            r.stdout, r.stderr, srv.stderr())
    finally:
        gone = srv.p.poll() is not None
        rc = srv.stop()
    assert not gone and rc == 0, f"fp-kv: exit status {rc}: {srv.last_stderr[-3000:]}"
