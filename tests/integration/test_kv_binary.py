"""fp-kv's binary protocol against memcached 1.6's (issue 16, item 15).

Every step goes to a fresh memcached and a fresh fp-kv (so CAS values line up), each step
followed by a NOOP whose opaque marks the end of its answers; the answers must be the same
bytes, except the VERSION string and the figures of STAT answers (names are compared where
fp-kv claims them). Steps that must close the connection read to EOF on both sides.
Real clients (libmemcached's memccapable -b) run in test_kv.py's client tests.

    FP_BUILD_DIR=build/release .venv/bin/python -m pytest tests/integration/test_kv_binary.py
"""
import socket
import struct
import time

import pytest

from test_kv import Started, fpkv, fpkv_kernel, memcached, memcached_cmd  # noqa: F401

HDR = struct.Struct(">BBHBBHIIQ")
END_OPAQUE = 0xFEEDFACE
GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION = range(12)
GETK, GETKQ, APPEND, PREPEND, STAT, SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ = range(12, 23)
QUITQ, FLUSHQ, APPENDQ, PREPENDQ, VERBOSITY, TOUCH, GAT, GATQ = range(23, 31)
SASL_LIST, SASL_AUTH, GATK, GATKQ = 0x20, 0x21, 0x23, 0x24


def req(op, key=b"", ext=b"", val=b"", cas=0, opaque=0, magic=0x80, keylen=None, bodylen=None):
    kl = len(key) if keylen is None else keylen
    bl = len(key) + len(ext) + len(val) if bodylen is None else bodylen
    return HDR.pack(magic, op, kl, len(ext), 0, 0, bl, opaque, cas) + ext + key + val


def setx(op, key, val, flags=0, exp=0, cas=0, opaque=0):
    return req(op, key, struct.pack(">II", flags, exp), val, cas, opaque)


def arith(op, key, delta, initial=0, exp=0, cas=0):
    return req(op, key, struct.pack(">QQI", delta, initial, exp), cas=cas)


class Side:
    def __init__(self, srv):
        self.srv = srv
        self.s = None
        self.last_cas = 0

    def connect(self):
        self.s = socket.create_connection((self.srv.host, self.srv.port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _read(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError
        self.buf += d

    def packets(self, close):
        """Answers up to the NOOP marked END_OPAQUE, or (close) up to EOF."""
        out = []
        while True:
            while len(self.buf) >= 24:
                magic, op, kl, el, _, st, bl, opq, cas = HDR.unpack_from(self.buf)
                if len(self.buf) < 24 + bl:
                    break
                body = self.buf[24:24 + bl]
                self.buf = self.buf[24 + bl:]
                if op == NOOP and opq == END_OPAQUE and not close:
                    return out
                out.append((magic, op, st, el, kl, opq, cas, body))
                if cas:
                    self.last_cas = cas
            try:
                self._read()
            except (EOFError, ConnectionResetError):
                if not close:
                    out.append("EOF before the end marker")
                if self.buf:
                    out.append(("trailing", self.buf))
                self.s.close()
                self.s = None
                return out + ["<closed>"]

    def step(self, data, close=False, split=False):
        if self.s is None:
            self.connect()
        payload = data if close else data + req(NOOP, opaque=END_OPAQUE)
        if split:
            for i in range(len(payload)):
                self.s.sendall(payload[i:i + 1])
                time.sleep(0.001)
        else:
            self.s.sendall(payload)
        return self.packets(close)


def normal(pkts, op_of_step):
    """The VERSION string and STAT figures are not compared."""
    out = []
    for p in pkts:
        if isinstance(p, tuple) and len(p) == 8:
            magic, op, st, el, kl, opq, cas, body = p
            if op == VERSION and st == 0:
                body = b"<version>"
            elif op == STAT and st == 0 and body[:kl] != b"detailed":
                body = body[:kl]          # the name only (a figure), but the detail dump
            p = (magic, op, st, el, kl, opq, cas, body)
        out.append(p)
    return out


# Each step: (name, bytes or a function of the side, options). "cas": a function of the
# side's last CAS seen.
STEPS = [
    ("version", req(VERSION, opaque=7)),
    ("set then the get family", setx(SET, b"k1", b"hello", flags=0xDEADBEEF, opaque=1)
     + req(GET, b"k1", opaque=2) + req(GETK, b"k1", opaque=3) + req(GETQ, b"k1", opaque=4)
     + req(GETKQ, b"k1", opaque=5)),
    ("misses", req(GET, b"nope", opaque=1) + req(GETK, b"nope", opaque=2)
     + req(GETQ, b"nope", opaque=3) + req(GETKQ, b"nope", opaque=4)),
    ("add", setx(ADD, b"k1", b"x") + setx(ADD, b"a1", b"one") + setx(ADDQ, b"k1", b"y")
     + setx(ADDQ, b"a2", b"two") + req(GET, b"a2")),
    ("replace", setx(REPLACE, b"none", b"x") + setx(REPLACE, b"a1", b"uno")
     + setx(REPLACEQ, b"none", b"x") + setx(REPLACEQ, b"a2", b"dos") + req(GET, b"a1")
     + req(GET, b"a2")),
    ("cas mismatch", setx(SET, b"a1", b"z", cas=12345) + setx(SET, b"absent", b"z", cas=5)),
    ("cas match", lambda s: setx(SET, b"k1", b"new", cas=s.last_cas) + req(GET, b"k1")),
    ("append and prepend", setx(SET, b"ap", b"mid") + req(APPEND, b"ap", val=b">")
     + req(PREPEND, b"ap", val=b"<") + req(APPENDQ, b"ap", val=b"]") + req(PREPENDQ, b"ap", val=b"[")
     + req(APPEND, b"missing", val=b"x") + req(APPENDQ, b"missing", val=b"x") + req(GET, b"ap")),
    ("append with a wrong cas", req(APPEND, b"ap", val=b"!", cas=99999) + req(GET, b"ap")),
    ("delete", setx(SET, b"d1", b"x") + setx(SET, b"d2", b"x") + req(DELETE, b"d1")
     + req(DELETE, b"d1") + req(DELETEQ, b"d2") + req(DELETEQ, b"d2")
     + req(DELETE, b"k1", cas=1) + req(GET, b"d1")),
    ("incr and decr", arith(INCR, b"n", 5, initial=10) + arith(INCR, b"n", 5)
     + arith(DECR, b"n", 100) + arith(INCRQ, b"n", 3) + arith(DECRQ, b"n", 1) + req(GET, b"n")
     + arith(INCR, b"nx", 1, exp=0xFFFFFFFF) + arith(DECRQ, b"nx", 1, exp=0xFFFFFFFF)
     + arith(INCR, b"ap", 1) + arith(INCR, b"n", 2 ** 64 - 1) + arith(INCR, b"n", 1, cas=3)),
    ("incr with the right cas", lambda s: arith(INCR, b"n", 7, cas=s.last_cas)),
    ("touch and gat", setx(SET, b"t", b"tv", flags=3) + req(TOUCH, b"t", struct.pack(">I", 100))
     + req(GAT, b"t", struct.pack(">I", 100)) + req(GATK, b"t", struct.pack(">I", 100))
     + req(GATQ, b"t", struct.pack(">I", 100)) + req(GATKQ, b"t", struct.pack(">I", 100))
     + req(TOUCH, b"tx", struct.pack(">I", 1)) + req(GAT, b"tx", struct.pack(">I", 1))
     + req(GATK, b"tx", struct.pack(">I", 1)) + req(GATQ, b"tx", struct.pack(">I", 1))
     + req(GATKQ, b"tx", struct.pack(">I", 1))),
    ("expired by touch", req(TOUCH, b"t", struct.pack(">I", 0xFFFFFFFF)) + req(GET, b"t")
     + setx(SET, b"neg", b"v", exp=1) + req(GAT, b"neg", struct.pack(">I", 1))),
    ("binary keys", setx(SET, b"a b\r\n\x00\xff", b"v\r\nEND\r\n") + req(GETK, b"a b\r\n\x00\xff")),
    ("a request a byte at a time", setx(SET, b"split", b"abc") + req(GETK, b"split"), {"split": True}),
    ("empty values, a command behind each in the same send", setx(SET, b"e", b"")
     + req(GET, b"e") + setx(SETQ, b"e2", b"") + req(GETK, b"e2") + req(APPEND, b"e", val=b"")
     + req(NOOP)),
    ("a large value", setx(SET, b"big", bytes(range(256)) * 2000) + req(GET, b"big")),
    ("too large", setx(SET, b"k1", b"x" * (2 << 20)) + req(GET, b"k1") + setx(SETQ, b"a1", b"y" * (2 << 20))
     + req(GET, b"a1")),
    ("pipelined quiet gets", b"".join(setx(SETQ, b"p%d" % i, b"v%d" % i) for i in range(50))
     + b"".join(req(GETKQ, b"p%d" % i, opaque=i) for i in range(60))),
    ("stats", req(STAT, opaque=9)),
    ("stats detail", req(STAT, b"detail on") + setx(SET, b"x:1", b"v") + req(GET, b"x:1")
     + req(GETKQ, b"x:2") + req(TOUCH, b"x:1", struct.pack(">I", 100)) + req(APPEND, b"y:1", val=b"v")
     + req(DELETE, b"y:2") + arith(INCR, b"z:1", 1) + req(STAT, b"detail dump")
     + req(STAT, b"detail off") + req(GET, b"x:1") + req(STAT, b"detail dump")),
    ("stats groups", req(STAT, b"settings") + req(STAT, b"items") + req(STAT, b"slabs")
     + req(STAT, b"sizes") + req(STAT, b"detail dump") + req(STAT, b"detail on")
     + req(STAT, b"detail off")),
    ("stats errors", req(STAT, b"nosuch") + req(STAT, b"detail x") + req(STAT, b"reset")),
    ("flush", setx(SET, b"f", b"x") + req(FLUSH) + req(GET, b"f") + setx(SET, b"f", b"x")
     + req(FLUSHQ) + req(GET, b"f") + setx(SET, b"f", b"x") + req(FLUSH, ext=struct.pack(">I", 0))
     + req(GET, b"f")),
    # (an unknown command with extras or a key: memcached skips a body's length after
    # them and loses the framing; test_binary_unknown_keeps_framing shows fp-kv's)
    ("unknown commands", req(0x30) + req(SASL_LIST) + req(SASL_AUTH, b"PLAIN", val=b"\0u\0p")
     + req(SASL_AUTH, b"PLAIN") + req(0x40, val=b"body")),
]

# Each on a connection of its own: the server must hang up.
CLOSING = [
    ("get with extras", req(GET, b"k", ext=b"\0\0\0\0")),
    ("a key over 250 bytes", req(GET, b"k" * 251)),
    ("key longer than the body", req(GET, b"k", bodylen=0)),
    ("extras and key longer than the body", req(SET, b"kk", ext=b"\0" * 8, bodylen=9)),
    ("set without extras", req(SET, b"k", val=b"v")),
    ("incr with short extras", req(INCR, b"n", ext=b"\0" * 8)),
    ("noop with a body", req(NOOP, val=b"x")),
    ("bad magic after a good request", req(NOOP) + req(NOOP, magic=0x81)),
    ("quit", req(GET, b"nope") + req(QUIT, opaque=3) + req(NOOP)),
    ("quitq", req(QUITQ) + req(NOOP)),
    ("flush with a key", req(FLUSH, b"k")),
    ("sasl list with a body", req(SASL_LIST, val=b"x")),
]


def run_pair(a, b, steps, close):
    bad = []
    for step in steps:
        name, data = step[0], step[1]
        opts = step[2] if len(step) > 2 else {}
        da = data(a) if callable(data) else data
        db = data(b) if callable(data) else data
        if close:
            a.s = b.s = None
        ra = normal(a.step(da, close=close, split=opts.get("split")), None)
        rb = normal(b.step(db, close=close, split=opts.get("split")), None)
        if ra != rb:
            bad.append(f"{name}:\n  memcached: {ra!r:.1500}\n  fp-kv:     {rb!r:.1500}")
    return bad


def test_binary_protocol_as_memcached(fpkv, memcached):  # noqa: F811
    flags = ["-m", "64", "-t", "1", "-I", "1m"]
    with Started(memcached_cmd(memcached), flags) as ma, Started(fpkv_kernel(fpkv), flags) as fb:
        a, b = Side(ma), Side(fb)
        bad = run_pair(a, b, STEPS, close=False)
        bad += run_pair(a, b, CLOSING, close=True)
    assert not bad, "fp-kv's binary answers differ from memcached's:\n" + "\n".join(bad)


def test_binary_stats_names(fpkv, memcached):  # noqa: F811
    """The general STAT answer names what the text protocol's does, in the same order."""
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1"]) as fb:
        b = Side(fb)
        pk = b.step(req(STAT))
        names = [p[7][:p[4]].decode() for p in pk if isinstance(p, tuple)]
        assert names[-1] == "" and all(p[1] == STAT and p[2] == 0 for p in pk)
        s = socket.create_connection((fb.host, fb.port), timeout=10)
        s.sendall(b"stats\r\n")
        text = b""
        while not text.endswith(b"END\r\n"):
            text += s.recv(65536)
        s.close()
        tnames = [ln.split()[1].decode() for ln in text.split(b"\r\n") if ln.startswith(b"STAT ")]
        assert names[:-1] == tnames


def test_binary_first_byte_picks_the_protocol(fpkv):  # noqa: F811
    """A text connection stays text when a 0x80 byte comes later; a binary one never
    reads text."""
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1"]) as fb:
        s = socket.create_connection((fb.host, fb.port), timeout=10)
        s.sendall(b"version\r\n")
        assert s.recv(100).startswith(b"VERSION ")
        s.sendall(req(NOOP))
        assert s.recv(100) == b"ERROR\r\n"
        s.close()
        b = Side(fb)
        r = b.step(req(NOOP, opaque=1) + b"version\r\n" + b"\0" * 15, close=True)
        assert r[0][1] == NOOP and r[1:] == ["<closed>"], r


def test_binary_unknown_keeps_framing(fpkv):  # noqa: F811
    """An unknown command's extras, key and body are skipped, and the next request is read
    from where it starts (memcached skips the body's length again after extras and key)."""
    with Started(fpkv_kernel(fpkv), ["-m", "64", "-t", "1"]) as fb:
        b = Side(fb)
        r = b.step(req(0x31, b"key", val=b"body", opaque=1) + req(VERBOSITY, ext=b"\0\0\0\1", opaque=2)
                   + setx(SET, b"k", b"v", opaque=3) + req(GETK, b"k", opaque=4))
        assert [(p[1], p[2], p[5]) for p in r] == [(0x31, 0x81, 1), (VERBOSITY, 0x81, 2),
                                                    (SET, 0, 3), (GETK, 0, 4)], r
        assert r[3][7] == b"\0\0\0\0kv"
