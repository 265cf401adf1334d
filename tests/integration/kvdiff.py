#!/usr/bin/env python3
"""kvdiff: send one script of memcached text-protocol commands to two servers, compare the answers.

Differential conformance for fp-kv (issue 6): the same script goes to server A (memcached 1.6,
the reference) and server B (fp-kv) over TCP, step by step, and every response must be
byte-identical, except

  - the value of `VERSION <v>`, and
  - `STAT <name> <value>` lines: values are never compared; for the names, every name in
    CLAIMED_STATS (the fields fp-kv claims, as memcached spells them) must appear on both
    sides or on neither, and a name that memcached 1.6 never emits (not in KNOWN_STATS) is
    a mismatch wherever it appears. Slab-class numbers in names ("items:5:number") are
    compared as "items:*:number". --stats-exact compares the full name sets instead.

By hand:

    python tests/integration/kvdiff.py --a 127.0.0.1:11211 --b 127.0.0.1:22122
    python tests/integration/kvdiff.py --start-a memcached --start-b build/release/apps/kv/fp-kv
    python tests/integration/kvdiff.py --a 127.0.0.1:11211 --show      # print A's answers

--start-a/--start-b CMD launch a server per script (fresh state, so CAS values line up) with
the script's `@flags` and `-p PORT` (a free port; or put {port} in CMD) and kill it after;
for a memcached run as root, `-u root` is added. Without --start, the servers you name are
used as they are for every script (start them with the flags each script's `@flags` names).
Exit status: 0 all steps matched, 1 a mismatch (each printed with the command that caused it),
2 bad usage or a server that cannot be reached.

Script format (tests/integration/kv_script/*.txt):

    # a comment                     ignored
    @flags -m 64 -I 1m -t 1          server flags the script needs (used by --start-*)
    @conn NAME                       following steps go over connection NAME (default "main");
                                     opened on first use, per server
    @sleep SECONDS                   wait (both servers age together)
    @drop [NAME]                     close connection NAME (default: the current one) from
                                     our side, whatever is in flight, without reading
    @split every                     next step: send it one byte per write
    @split each                      next step: for every cut position i, send [:i], pause,
                                     send [i:]; the step runs len-1 times
    @timeout SECONDS                 next step: wait at most this long for its answer (for a
                                     step whose answer is expected never to come)
    @partial                         next step: send it and read nothing (an incomplete request,
                                     completed by a later step on the same connection)
    @close                           next step: the server must close the connection; read
                                     to EOF (the response then ends with <closed>)
    @capture NAME [REGEX]            after the next step, bind NAME on each side to group 1 of
                                     REGEX in that side's response (default: the last CAS
                                     value: 5th field of a VALUE line or a meta ` c<N>` token)
    any other line                   a request line: sent with "\\r\\n" appended; consecutive
                                     request lines form one step, sent in one write (so a
                                     paragraph is a pipeline); a blank line or a directive
                                     ends the step

In request lines: \\r \\n \\t \\0 \\\\ \\xHH are escapes, \\e is nothing (a line of just \\e
is an empty line: an empty data block), \\c at the end means "no \\r\\n", and
{{ EXPR }} is a Python expression evaluated when the step is sent (bytes, str or int):
names available are now (Unix time, int), the captured NAMEs (each side its own value),
ALL (bytes 0..255), and rep(b, n).

After each step the tool sends "mn\\r\\n" and reads until that "MN" (response lines are parsed
so data blocks of VALUE/VA are skipped by length, whatever they hold; the step's own `mn`
commands, counted by line, are answered first: so a data block of a step should not hold a
line that starts with "mn "). A server that closes
the connection ends the response with <closed>, one that stays silent (3 s, or @timeout,
with no byte) with <timeout>; in
both cases the connection is dropped and reopened by the next step that uses it.
"""
import argparse
import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT_DIR = HERE / "kv_script"

# The stats fields fp-kv claims: what clients and monitoring read (memcached_exporter, the
# Datadog and collectd memcached plugins, pymemcache's stats()). Names as memcached 1.6
# spells them; "*" stands for a slab-class number.
CLAIMED_STATS = {
    # stats
    "pid", "uptime", "time", "version", "pointer_size", "rusage_user", "rusage_system",
    "max_connections", "curr_connections", "total_connections", "connection_structures",
    "cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses", "get_expired",
    "get_flushed", "delete_misses", "delete_hits", "incr_misses", "incr_hits", "decr_misses",
    "decr_hits", "cas_misses", "cas_hits", "cas_badval", "touch_hits", "touch_misses",
    "bytes_read", "bytes_written", "limit_maxbytes", "threads", "bytes", "curr_items",
    "total_items", "evictions", "reclaimed", "expired_unfetched", "evicted_unfetched",
    "hash_power_level", "hash_bytes",
    # stats settings
    "maxbytes", "maxconns", "tcpport", "udpport", "verbosity", "num_threads", "growth_factor",
    "chunk_size", "evictions", "cas_enabled", "item_size_max",
    # stats items
    "items:*:number", "items:*:age", "items:*:evicted", "items:*:evicted_nonzero",
    "items:*:outofmemory", "items:*:reclaimed", "items:*:expired_unfetched",
    "items:*:evicted_unfetched",
    # stats slabs
    "*:chunk_size", "*:chunks_per_page", "*:total_pages", "*:total_chunks", "*:used_chunks",
    "*:free_chunks", "*:get_hits", "*:cmd_set", "*:delete_hits", "*:incr_hits", "*:decr_hits",
    "*:cas_hits", "*:cas_badval", "*:touch_hits", "active_slabs", "total_malloced",
}

# Every name memcached 1.6.18 prints under stats, stats settings, stats items and stats slabs
# (normalised; taken from its output). A name outside this set is a misspelling or an
# invention.
KNOWN_STATS = CLAIMED_STATS | set("""
*:cas_badval *:cas_hits *:chunk_size *:chunks_per_page *:cmd_set *:decr_hits *:delete_hits
*:free_chunks *:free_chunks_end *:get_hits *:incr_hits *:total_chunks *:total_pages
*:touch_hits *:used_chunks accepting_conns active_slabs auth_cmds auth_enabled_ascii
auth_enabled_sasl auth_errors binding_protocol bytes bytes_read bytes_written cas_badval
cas_enabled cas_hits cas_misses chunk_size cmd_flush cmd_get cmd_meta cmd_set cmd_touch
conn_yields connection_structures crawler_items_checked crawler_reclaimed curr_connections
curr_items decr_hits decr_misses delete_hits delete_misses detail_enabled direct_reclaims
domain_socket dump_enabled evicted_active evicted_unfetched evictions expired_unfetched
ext_compact_under ext_drop_under ext_drop_unread ext_item_age ext_item_size ext_low_ttl
ext_max_frag ext_max_sleep ext_recache_rate ext_wbuf_size flush_enabled get_expired get_flushed
get_hits get_misses growth_factor hash_algorithm hash_bytes hash_is_expanding hash_power_level
hashpower_init hot_lru_pct hot_max_factor idle_timeout incr_hits incr_misses
inline_ascii_response inter item_size_max items:*:age items:*:age_hot items:*:age_warm
items:*:crawler_items_checked items:*:crawler_reclaimed items:*:direct_reclaims items:*:evicted
items:*:evicted_active items:*:evicted_nonzero items:*:evicted_time items:*:evicted_unfetched
items:*:expired_unfetched items:*:hits_to_cold items:*:hits_to_hot items:*:hits_to_temp
items:*:hits_to_warm items:*:lrutail_reflocked items:*:mem_requested items:*:moves_to_cold
items:*:moves_to_warm items:*:moves_within_lru items:*:number items:*:number_cold
items:*:number_hot items:*:number_warm items:*:outofmemory items:*:reclaimed
items:*:tailrepairs libevent limit_maxbytes listen_disabled_num log_watcher_sent
log_watcher_skipped log_watchers log_worker_dropped log_worker_written lru_bumps_dropped
lru_crawler lru_crawler_running lru_crawler_sleep lru_crawler_starts lru_crawler_tocrawl
lru_maintainer_juggles lru_maintainer_thread lru_segmented lrutail_reflocked malloc_fails
max_connections maxbytes maxconns maxconns_fast memory_file moves_to_cold moves_to_warm
moves_within_lru num_napi_ids num_threads num_threads_per_udp oldest pid pointer_size
read_buf_bytes read_buf_bytes_free read_buf_count read_buf_mem_limit read_buf_oom reclaimed
rejected_connections reqs_per_event reserved_fds response_obj_bytes response_obj_count
response_obj_oom round_robin_fallback rusage_system rusage_user shutdown_command slab_automove
slab_automove_freeratio slab_automove_ratio slab_automove_window slab_chunk_max
slab_global_page_pool slab_reassign slab_reassign_busy_deletes slab_reassign_busy_items
slab_reassign_chunk_rescues slab_reassign_evictions_nomem slab_reassign_inline_reclaim
slab_reassign_rescues slab_reassign_running slabs_moved ssl_ca_cert ssl_chain_cert ssl_ciphers
ssl_enabled ssl_kernel_tls ssl_key ssl_keyformat ssl_min_version ssl_session_cache
ssl_verify_mode ssl_wbuf_size stat_key_prefix store_no_memory store_too_large tail_repair_time
tcp_backlog tcpport temp_lru temporary_ttl threads time time_in_listen_disabled_us
total_connections total_items total_malloced touch_hits touch_misses track_sizes udpport umask
unexpected_napi_ids uptime verbosity version warm_lru_pct warm_max_factor watcher_logbuf_size
worker_logbuf_size
""".split())

SENTINEL = b"mn\r\n"


class ScriptError(Exception):
    pass


# ---- scripts -------------------------------------------------------------------------------

_ESC = re.compile(rb"\\(x[0-9a-fA-F]{2}|[rnt0\\ce])")


def unescape(s):
    """Escape processing for the literal parts of a request line (returns bytes, no_crlf)."""
    raw = s.encode("utf-8")
    no_crlf = False
    out = bytearray()
    pos = 0
    for m in _ESC.finditer(raw):
        out += raw[pos:m.start()]
        e = m.group(1)
        if e[:1] == b"x":
            out.append(int(e[1:], 16))
        elif e == b"c":
            if m.end() != len(raw):
                raise ScriptError("\\c must end the line")
            no_crlf = True
        else:
            out += {b"r": b"\r", b"n": b"\n", b"t": b"\t", b"0": b"\0", b"\\": b"\\", b"e": b""}[e]
        pos = m.end()
    out += raw[pos:]
    return bytes(out), no_crlf


class Step:
    """One write (or split writes) on one connection, then one read up to the sentinel."""

    def __init__(self, file, line, conn):
        self.file, self.line, self.conn = file, line, conn
        self.lines = []          # (parts, no_crlf): parts are bytes or ("expr", text)
        self.split = None        # None, "every", "each"
        self.close = False
        self.partial = False
        self.captures = []       # (name, regex)
        self.timeout = None      # seconds, None: the Side's
        self.sleep = None        # a sleep step has no lines
        self.drop = None         # a drop step: the connection to close

    def where(self):
        return f"{self.file}:{self.line}"

    def render(self, env):
        out = bytearray()
        for parts, no_crlf in self.lines:
            for p in parts:
                if isinstance(p, tuple):
                    v = eval(p[1], {"__builtins__": __builtins__}, env)  # noqa: S307 (own scripts)
                    if isinstance(v, int):
                        v = str(v)
                    if isinstance(v, str):
                        v = v.encode("latin-1")
                    out += v
                else:
                    out += p
            if not no_crlf:
                out += b"\r\n"
        return bytes(out)

    def text(self, data, limit=300):
        """The command as it was sent, printable and bounded."""
        return show(data, limit)

    def expected_mn(self, data):
        """How many MN lines the step's own commands produce (its own `mn`s)."""
        n = 0
        for ln in data.split(b"\n"):
            tok = ln.rstrip(b"\r").split(b" ")
            if tok and tok[0] == b"mn":
                n += 1
        return n


class Script:
    def __init__(self, name):
        self.name = name
        self.flags = []
        self.steps = []


_EXPR = re.compile(r"\{\{(.*?)\}\}")


def parse_line(text):
    parts = []
    pos = 0
    no_crlf = False
    for m in _EXPR.finditer(text):
        lit, nc = unescape(text[pos:m.start()])
        if nc:
            raise ScriptError("\\c must end the line")
        parts.append(lit)
        parts.append(("expr", m.group(1).strip()))
        pos = m.end()
    lit, no_crlf = unescape(text[pos:])
    parts.append(lit)
    return [p for p in parts if p != b""], no_crlf


def parse_script(text, name="<script>"):
    sc = Script(name)
    conn = "main"
    fresh = {"split": None, "close": False, "captures": [], "timeout": None, "partial": False}
    pending = dict(fresh, captures=[])
    cur = None

    def finish():
        nonlocal cur
        if cur is not None:
            sc.steps.append(cur)
            cur = None

    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            continue
        if not line.strip():
            finish()
            continue
        if line.startswith("@"):
            finish()
            word, _, arg = line[1:].partition(" ")
            arg = arg.strip()
            try:
                if word == "flags":
                    sc.flags = shlex.split(arg)
                elif word == "conn":
                    if not arg:
                        raise ScriptError("@conn needs a name")
                    conn = arg
                elif word == "sleep":
                    st = Step(name, no, conn)
                    st.sleep = float(arg)
                    sc.steps.append(st)
                elif word == "drop":
                    st = Step(name, no, conn)
                    st.drop = arg or conn
                    sc.steps.append(st)
                elif word == "split":
                    if arg not in ("every", "each"):
                        raise ScriptError("@split every|each")
                    pending["split"] = arg
                elif word == "timeout":
                    pending["timeout"] = float(arg)
                elif word == "close":
                    pending["close"] = True
                elif word == "partial":
                    pending["partial"] = True
                elif word == "capture":
                    var, _, rx = arg.partition(" ")
                    if not var.isidentifier():
                        raise ScriptError(f"@capture: '{var}' is not a name")
                    pending["captures"].append((var, re.compile(rx.strip().encode()) if rx.strip()
                                                else None))
                else:
                    raise ScriptError(f"unknown directive @{word}")
            except (ValueError, re.error) as e:
                raise ScriptError(f"{name}:{no}: {e}") from None
            except ScriptError as e:
                raise ScriptError(f"{name}:{no}: {e}") from None
            continue
        if cur is None:
            cur = Step(name, no, conn)
            cur.split, cur.close, cur.captures = pending["split"], pending["close"], pending["captures"]
            cur.timeout, cur.partial = pending["timeout"], pending["partial"]
            pending = dict(fresh, captures=[])
        try:
            cur.lines.append(parse_line(line))
        except ScriptError as e:
            raise ScriptError(f"{name}:{no}: {e}") from None
    finish()
    if pending != fresh:
        raise ScriptError(f"{name}: a directive at the end applies to no step")
    return sc


def load_script(path):
    p = pathlib.Path(path)
    return parse_script(p.read_text(), p.name)


def default_scripts():
    return sorted(SCRIPT_DIR.glob("*.txt"))


# ---- talking to a server -----------------------------------------------------------------

CLOSED, TIMEOUT, NOCONN = b"<closed>", b"<timeout>", b"<cannot connect:"
GIVE_UP = 3     # consecutive steps one side alone left unanswered: stop the script


def show(data, limit=400):
    """Printable form of @data: CRLF kept visible, other bytes escaped."""
    s = data if len(data) <= limit else data[:limit]
    out = []
    for b in s:
        c = chr(b)
        if c == "\r":
            out.append("\\r")
        elif c == "\n":
            out.append("\\n")
        elif c == "\\":
            out.append("\\\\")
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append("\\x%02x" % b)
    txt = "".join(out)
    if len(data) > limit:
        txt += f"...(+{len(data) - limit} bytes)"
    return txt


class Response:
    """What one step got back: a list of units (a line, or a line with its data block)."""

    def __init__(self):
        self.units = []     # bytes: a line with its CRLF, possibly followed by data + CRLF
        self.end = None     # None (sentinel seen), CLOSED or TIMEOUT

    def raw(self):
        return b"".join(self.units) + (self.end or b"")


class Side:
    """One server: its address and its named connections."""

    def __init__(self, name, host, port, timeout=3.0):
        self.name, self.host, self.port, self.timeout = name, host, port, timeout
        self.conns = {}
        self.bufs = {}
        self.env = {}

    def sock(self, conn):
        s = self.conns.get(conn)
        if s is None:
            s = socket.create_connection((self.host, self.port), timeout=self.timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns[conn] = s
            self.bufs[conn] = b""
        return s

    def drop(self, conn):
        s = self.conns.pop(conn, None)
        self.bufs.pop(conn, None)
        if s is not None:
            try:
                s.close()
            except OSError:
                pass

    def close_all(self):
        for c in list(self.conns):
            self.drop(c)

    def send(self, conn, data):
        try:
            self.sock(conn).sendall(data)
            return True
        except OSError:
            return False

    def _recv(self, conn, quiet):
        """More bytes; socket.timeout after @quiet seconds without any (a silence, not a
        deadline for the whole answer: a 36 MB answer on a busy machine takes longer)."""
        s = self.conns[conn]
        s.settimeout(quiet)
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionResetError
        self.bufs[conn] += chunk

    def read_until(self, conn, n_mn, until_close=False, timeout=None):
        """Read units until the n_mn-th MN line (or EOF with @until_close)."""
        r = Response()
        if conn not in self.conns:
            r.end = NOCONN + b" gone>"
            return r
        quiet = timeout or self.timeout
        seen = 0
        try:
            while True:
                buf = self.bufs[conn]
                i = buf.find(b"\r\n")
                if i < 0:
                    self._recv(conn, quiet)
                    continue
                line = buf[:i]
                need = i + 2
                words = line.split(b" ")
                dlen = None
                try:
                    if words[0] == b"VALUE" and len(words) >= 4:
                        dlen = int(words[3])
                    elif words[0] == b"VA" and len(words) >= 2:
                        dlen = int(words[1])
                except ValueError:
                    dlen = None
                if dlen is not None and 0 <= dlen < (1 << 31):
                    need += dlen + 2
                while len(self.bufs[conn]) < need:
                    self._recv(conn, quiet)
                unit = self.bufs[conn][:need]
                self.bufs[conn] = self.bufs[conn][need:]
                if line == b"MN" and not until_close:
                    seen += 1
                    if seen > n_mn:
                        return r
                r.units.append(unit)
        except (socket.timeout, TimeoutError):
            if self.bufs.get(conn):
                r.units.append(self.bufs[conn])
            r.end = TIMEOUT
            self.drop(conn)
        except OSError:         # EOF (raised by _recv as a reset), reset, aborted
            if self.bufs.get(conn):
                r.units.append(self.bufs[conn])
            r.end = CLOSED
            self.drop(conn)
        return r

    def run(self, step, data, pause=0.002):
        """Send @data per @step's mode and read the answer(s): a list of Responses."""
        try:
            self.sock(step.conn)
        except OSError as e:
            r = Response()
            r.end = NOCONN + f" {e.strerror or e}>".encode()
            return [r]
        n_mn = step.expected_mn(data)
        if step.partial:
            if not self.send(step.conn, data):
                self.drop(step.conn)
            return [Response()]
        if step.close:
            ok = self.send(step.conn, data)
            if not ok:
                r = Response()
                r.end = CLOSED
                self.drop(step.conn)
                return [r]
            return [self.read_until(step.conn, 0, until_close=True,
                                    timeout=step.timeout or min(self.timeout, 2.0))]
        if step.split == "every":
            for k in range(len(data)):
                if not self.send(step.conn, data[k:k + 1]):
                    break
                time.sleep(pause / 4)
            self.send(step.conn, SENTINEL)
            return [self.read_until(step.conn, n_mn, timeout=step.timeout)]
        if step.split == "each":
            out = []
            for k in range(1, len(data)):
                self.send(step.conn, data[:k])
                time.sleep(pause)
                self.send(step.conn, data[k:] + SENTINEL)
                out.append(self.read_until(step.conn, n_mn, timeout=step.timeout))
            return out
        self.send(step.conn, data + SENTINEL)
        return [self.read_until(step.conn, n_mn, timeout=step.timeout)]


# ---- comparing -------------------------------------------------------------------------

_CAS_META = re.compile(rb"^(?:HD|VA|EN|NF|NS|EX)\b")


def stat_name(n):
    return ":".join("*" if p.isdigit() else p for p in n.split(":"))


def normalise(resp, exact_stats=False, cas_map=None):
    """(comparable bytes, list of STAT name sets, one per run of STAT lines)."""
    out = []
    runs = []
    cur = None
    for u in resp.units:
        line, _, rest = u.partition(b"\r\n")
        if line.startswith(b"STAT "):
            name = line.split(b" ")[1].decode("latin-1") if len(line.split(b" ")) > 1 else ""
            if cur is None:
                cur = set()
                runs.append(cur)
                out.append(b"STAT *\r\n")
            cur.add(name if exact_stats else stat_name(name))
            continue
        cur = None
        if line.startswith(b"VERSION "):
            out.append(b"VERSION *\r\n")
            continue
        if cas_map is not None:
            w = line.split(b" ")
            if w[0] == b"VALUE" and len(w) >= 5:
                w[4] = cas_map.setdefault(w[4], b"<cas%d>" % len(cas_map))
                line = b" ".join(w)
            elif _CAS_META.match(line):
                w = [cas_map.setdefault(x, b"<cas%d>" % len(cas_map)) if x[:1] == b"c" and x[1:].isdigit()
                     else x for x in w]
                line = b" ".join(w)
            out.append(line + b"\r\n" + rest)
            continue
        out.append(u)
    out.append(resp.end or b"")
    return b"".join(out), runs


def compare_stats(ra, rb, exact):
    """Problems with the STAT names of matching runs (values are never compared)."""
    probs = []
    for i, (a, b) in enumerate(zip(ra, rb)):
        if exact:
            if a != b:
                probs.append(f"stats run {i}: only in A {sorted(a - b)}, only in B {sorted(b - a)}")
            continue
        onlya = sorted(n for n in a - b if n in CLAIMED_STATS)
        onlyb = sorted(n for n in b - a if n in CLAIMED_STATS)
        unknown = sorted(n for n in (a | b) if n not in KNOWN_STATS)
        if onlya:
            probs.append(f"stats run {i}: claimed fields only in A: {onlya}")
        if onlyb:
            probs.append(f"stats run {i}: claimed fields only in B: {onlyb}")
        if unknown:
            probs.append(f"stats run {i}: names memcached never prints: {unknown}")
    return probs


def capture(step, side, resp):
    raw = resp.raw()
    for var, rx in step.captures:
        val = None
        if rx is None:
            for u in resp.units:
                line = u.partition(b"\r\n")[0]
                w = line.split(b" ")
                if w[0] == b"VALUE" and len(w) >= 5:
                    val = w[4]
                elif _CAS_META.match(line):
                    for x in w[1:]:
                        if x[:1] == b"c" and x[1:].isdigit():
                            val = x[1:]
        else:
            m = rx.search(raw)
            val = m.group(1) if m else None
        side.env[var] = int(val) if val is not None and val.isdigit() else (val if val is not None else b"")


class ServerGone:
    """A started server that was not running any more at the end of its script."""

    def __init__(self, side, what):
        self.side, self.what = side, what

    def __str__(self):
        return f"SERVER {self.side} DIED during the script: {self.what}"


class Mismatch:
    def __init__(self, step, data, a, b, note=None, part=None, data_b=None):
        self.step, self.data, self.a, self.b, self.note, self.part = step, data, a, b, note, part
        self.data_b = data_b

    def __str__(self):
        hdr = f"MISMATCH {self.step.where()} [conn {self.step.conn}]"
        if self.part is not None:
            hdr += f" (split after byte {self.part})"
        s = [hdr, f"  sent: {show(self.data)}"]
        if self.data_b is not None and self.data_b != self.data:
            s.append(f"  sent to B: {show(self.data_b)}")
        if self.note:
            s.append(f"  {self.note}")
        s.append(f"  A: {show(self.a.raw(), 1200)}")
        s.append(f"  B: {show(self.b.raw(), 1200)}")
        return "\n".join(s)


def run_script(script, a, b=None, *, exact_stats=False, loose_cas=False, out=None, show_only=False):
    """Run @script on Sides @a and @b; returns the list of Mismatches (empty: all equal).
    With @show_only (b None), print each step and A's answer."""
    mism = []
    cas_a, cas_b = ({}, {}) if loose_cas else (None, None)
    silent = 0
    for step in script.steps:
        if step.sleep is not None:
            time.sleep(step.sleep)
            continue
        if step.drop is not None:
            for side in (a, b) if b is not None else (a,):
                side.drop(step.drop)
            continue
        env = {"now": int(time.time()), "ALL": bytes(range(256)), "rep": lambda x, n: x * n}
        da = step.render({**env, **a.env})
        ra = a.run(step, da)
        for r in ra:
            capture(step, a, r)
        if show_only:
            print(f"--- {step.where()} [{step.conn}] > {show(da, 200)}", file=out)
            for r in ra:
                print(f"    < {show(r.raw(), 2000)}", file=out)
            continue
        db = step.render({**env, **b.env})
        rb = b.run(step, db)
        for r in rb:
            capture(step, b, r)
        def dead(rs):
            return any(r.end == TIMEOUT or (r.end or b"").startswith(NOCONN) for r in rs)
        silent = silent + 1 if dead(ra) != dead(rb) else 0
        if silent >= GIVE_UP:
            mism.append(Mismatch(step, da, ra[-1], rb[-1], data_b=db,
                                 note=f"{GIVE_UP} steps in a row unanswered by one side: "
                                      f"giving up on the rest of {script.name}"))
            if out is not None:
                print(mism[-1], file=out, flush=True)
            break
        if len(ra) != len(rb):
            mism.append(Mismatch(step, da, ra[0], rb[0], note="different number of answers",
                                 data_b=db))
            continue
        for k, (x, y) in enumerate(zip(ra, rb)):
            nx, sx = normalise(x, exact_stats, cas_a)
            ny, sy = normalise(y, exact_stats, cas_b)
            part = (k + 1) if step.split == "each" else None
            if nx != ny:
                mism.append(Mismatch(step, da, x, y, part=part, data_b=db))
                break
            probs = compare_stats(sx, sy, exact_stats)
            if probs:
                mism.append(Mismatch(step, da, x, y, note="; ".join(probs), part=part, data_b=db))
                break
        if mism and out is not None and mism[-1].step is step:
            print(mism[-1], file=out, flush=True)
    return mism


# ---- starting servers ------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    """A server process on loopback, started from a command line; killed by stop()."""

    def __init__(self, cmd, flags=(), host="127.0.0.1", port=None, timeout=10.0):
        for attempt in range(3):
            try:
                return self._start(cmd, flags, host, port or free_port(), timeout)
            except RuntimeError:
                # a free port taken by someone else before the server bound it: try another
                if port or attempt == 2:
                    raise

    def _start(self, cmd, flags, host, port, timeout):
        self.port = port
        self.host = host
        argv = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
        if any("{port}" in x for x in argv):
            argv = [x.replace("{port}", str(self.port)) for x in argv]
        else:
            argv += ["-p", str(self.port)]
        argv += [str(f) for f in flags]
        if os.path.basename(argv[0]) == "memcached" and os.geteuid() == 0 and "-u" not in argv:
            argv += ["-u", "root"]
        self.argv = argv
        self.err = tempfile.TemporaryFile()     # a file, not a pipe: a chatty server never blocks
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.err,
                                  start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.p.poll() is not None:
                err = self.stderr()
                self.err.close()
                raise RuntimeError(f"{' '.join(argv)} exited {self.p.returncode}: {err.strip()}")
            try:
                socket.create_connection((host, self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{' '.join(argv)}: nothing listening on {self.port}")
                time.sleep(0.05)

    @property
    def pid(self):
        return self.p.pid

    def stderr(self):
        if self.err.closed:
            return ""
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def problem(self):
        """None while it runs; else why it is gone (exit status and the end of stderr)."""
        if self.p.poll() is None:
            return None
        err = self.stderr()
        return f"{' '.join(self.argv)} exited {self.p.returncode}: {err[-2000:].strip()}"

    def stop(self):
        """SIGTERM (then SIGKILL); returns the exit status."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if not self.err.closed:
            self.err.close()
        return self.p.returncode


def hostport(s):
    h, _, p = s.rpartition(":")
    return (h or "127.0.0.1"), int(p)


def diff_scripts(scripts, *, a=None, b=None, start_a=None, start_b=None, extra_flags=(),
                 exact_stats=False, loose_cas=False, timeout=3.0, out=sys.stdout, show_only=False,
                 headers=True):
    """Run each script; returns {script name: [Mismatch...]}. Starts servers per script when
    start_a/start_b are given (with the script's @flags plus @extra_flags). Mismatches are
    printed on @out as they are found (None: not printed), with a header per script unless
    @headers is false."""
    results = {}
    for path in scripts:
        sc = path if isinstance(path, Script) else load_script(path)
        servers = []
        sa = sb = None
        try:
            if start_a:
                srv = Server(start_a, [*sc.flags, *extra_flags])
                servers.append(srv)
                sa = Side("A", srv.host, srv.port, timeout)
            else:
                sa = Side("A", *hostport(a), timeout)
            if not show_only:
                if start_b:
                    srv = Server(start_b, [*sc.flags, *extra_flags])
                    servers.append(srv)
                    sb = Side("B", srv.host, srv.port, timeout)
                else:
                    sb = Side("B", *hostport(b), timeout)
            if out is not None and headers:
                print(f"== {sc.name} ({len(sc.steps)} steps; flags {' '.join(sc.flags) or '-'})",
                      file=out, flush=True)
            results[sc.name] = run_script(sc, sa, sb, exact_stats=exact_stats,
                                          loose_cas=loose_cas, out=out, show_only=show_only)
            for side, srv in zip(("A", "B") if start_a else ("B",), servers):
                gone = srv.problem()
                if gone:
                    results[sc.name].append(ServerGone(side, gone))
                    if out is not None:
                        print(results[sc.name][-1], file=out, flush=True)
        finally:
            for s in (sa, sb):
                if s is not None:
                    s.close_all()
            for srv in servers:
                srv.stop()
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description="differential memcached-protocol test: A vs B",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("By hand:")[1])
    ap.add_argument("--a", help="HOST:PORT of server A (the reference)")
    ap.add_argument("--b", help="HOST:PORT of server B")
    ap.add_argument("--start-a", metavar="CMD", help="start server A per script from CMD")
    ap.add_argument("--start-b", metavar="CMD", help="start server B per script from CMD")
    ap.add_argument("--flags", default="", help="extra flags for servers started by --start-*")
    ap.add_argument("--script", action="append", help="script file(s); default kv_script/*.txt")
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer")
    ap.add_argument("--stats-exact", action="store_true", help="compare every STAT name")
    ap.add_argument("--loose-cas", action="store_true",
                    help="compare CAS values up to renaming (first seen = <cas0>, ...)")
    ap.add_argument("--show", action="store_true", help="only run A and print its answers")
    ap.add_argument("-q", "--quiet", action="store_true",
                    help="print only the mismatches and the summary")
    o = ap.parse_args(argv)
    if not (o.a or o.start_a) or not (o.show or o.b or o.start_b):
        ap.error("name server A (--a or --start-a) and B (--b or --start-b), or use --show")
    scripts = [pathlib.Path(s) for s in o.script] if o.script else default_scripts()
    if not scripts:
        ap.error(f"no scripts in {SCRIPT_DIR}")
    try:
        parsed = [load_script(p) for p in scripts]
    except (OSError, ScriptError) as e:
        print(f"kvdiff: {e}", file=sys.stderr)
        return 2
    if not (o.start_a and o.start_b) and not o.show and not o.quiet:
        for sc in parsed:
            if sc.flags:
                print(f"note: {sc.name} expects servers started with: {' '.join(sc.flags)}",
                      file=sys.stderr)
    try:
        res = diff_scripts(parsed, a=o.a, b=o.b, start_a=o.start_a, start_b=o.start_b,
                           extra_flags=shlex.split(o.flags), exact_stats=o.stats_exact,
                           loose_cas=o.loose_cas, timeout=o.timeout,
                           out=sys.stdout, show_only=o.show, headers=not o.quiet)
    except (OSError, RuntimeError) as e:
        print(f"kvdiff: {e}", file=sys.stderr)
        return 2
    total = sum(len(v) for v in res.values())
    if o.show:
        return 0
    for name, ms in res.items():
        print(f"{name}: {'ok' if not ms else f'{len(ms)} mismatch(es)'}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
