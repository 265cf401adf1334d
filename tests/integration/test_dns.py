"""fp-dns against real clients and a real peer: dnspython, dig and kdig, and NSD 4.6 on the same zone.

The loopback tests are unprivileged (kernel transport on 127.0.0.1, NSD as the same user).
Every question is asked of both servers and the answers compared (dnsask.canon: rcode, AA,
TC, answer and authority sections, and a referral's glue). Then what NSD is not asked:
truncation and the retry over TCP, EDNS0, 0x20 case, pipelined TCP split at every byte,
malformed datagrams, and the command line. With root, the same comparison runs over
AF_XDP in a namespace pair (tools/netns.py), NSD beside it on the kernel's address.
"""
import json
import re
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from conftest import ROOT, free_port, run
import dnsask

HOST = "127.0.0.1"
SERVER_CORE = "0"

ZONE = """$ORIGIN example.com.
$TTL 3600
@   IN SOA ns1.example.com. hostmaster.example.com. (
        2026112701 ; serial
        7200 3600 1209600 300 )
    IN NS ns1
    IN NS ns2.example.com.
    IN MX 10 mail
    IN A 192.0.2.1
    IN AAAA 2001:db8::1
    IN TXT "v=spf1 -all" "second string"
ns1 IN A 192.0.2.53
ns2 IN A 192.0.2.54
    IN AAAA 2001:db8::54
mail 300 IN A 192.0.2.25
www CNAME @
ftp CNAME www
ext CNAME www.example.org.
dangling CNAME gone
a.b.c IN A 192.0.2.99
sub IN NS ns.sub
ns.sub IN A 192.0.2.200
mid TXT {mid}
big TXT {big}
"""

QUESTIONS = [
    ["example.com", "SOA"], ["example.com", "NS"], ["example.com", "A"],
    ["example.com", "AAAA"], ["example.com", "TXT"], ["example.com", "ANY"],
    ["EXAMPLE.com", "A"], ["www.example.com", "A"], ["www.example.com", "CNAME"],
    ["ftp.example.com", "AAAA"], ["ext.example.com", "A"], ["dangling.example.com", "A"],
    ["nope.example.com", "A"], ["nope.example.com", "MX"], ["mail.example.com", "MX"],
    ["b.c.example.com", "A"], ["c.example.com", "TXT"], ["a.b.c.example.com", "A"],
    ["sub.example.com", "NS"], ["sub.example.com", "A"], ["x.y.sub.example.com", "AAAA"],
    ["ns.sub.example.com", "A"], ["ns1.example.com", "A"], ["ns2.example.com", "AAAA"],
    ["example.org", "A"], ["com", "NS"], ["mid.example.com", "TXT"],
]


def txt(n):
    return " ".join('"%s"' % (chr(ord("a") + i) * 250) for i in range(n))


@pytest.fixture(scope="module")
def zonedir(tmp_path_factory):
    d = tmp_path_factory.mktemp("dns")
    (d / "example.zone").write_text(ZONE.format(mid=txt(3), big=txt(5)))
    return d


def wait_answering(port, proc, host=HOST, timeout=10):
    deadline = time.time() + timeout
    q = dns.message.make_query("example.com", "SOA")
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read()}")
        try:
            dns.query.udp(q, host, port=port, timeout=0.3)
            return
        except Exception:
            time.sleep(0.1)
    raise AssertionError("server did not answer within %ds" % timeout)


def stop(proc):
    stop_process(proc)
    return proc.returncode, proc.stderr.read()


def nsd_conf(d, ip, port):
    conf = d / f"nsd-{port}.conf"
    conf.write_text(f"""server:
  ip-address: {ip}
  port: {port}
  server-count: 1
  username: ""
  zonesdir: "{d}"
  pidfile: "{d}/nsd-{port}.pid"
  database: ""
  zonelistfile: "{d}/zone-{port}.list"
  xfrdfile: "{d}/xfrd-{port}.state"
  xfrdir: "{d}"
  logfile: "{d}/nsd-{port}.log"
  rrl-ratelimit: 0
  minimal-responses: yes
remote-control:
  control-enable: no
zone:
  name: example.com
  zonefile: "example.zone"
""")
    return conf


@pytest.fixture(scope="module")
def fpdns(build_dir, zonedir):
    port = free_port()
    p = subprocess.Popen(["taskset", "-c", SERVER_CORE, build_dir / "apps" / "dns" / "fp-dns",
                          "--zone", zonedir / "example.zone", "--port", str(port),
                          "--ip", HOST, "--stats", "none"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, p)
        yield port, p
    finally:
        stop(p)


@pytest.fixture(scope="module")
def nsd(zonedir):
    port = free_port()
    p = subprocess.Popen(["nsd", "-d", "-c", nsd_conf(zonedir, HOST, port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, p)
        yield port
    finally:
        stop(p)


@pytest.mark.parametrize("proto", ["udp", "tcp"])
def test_same_answers_as_nsd(fpdns, nsd, proto):
    ours = dnsask.ask(HOST, fpdns[0], QUESTIONS, proto)
    theirs = dnsask.ask(HOST, nsd, QUESTIONS, proto)
    for q, a, b in zip(QUESTIONS, ours, theirs):
        if q == ["mail.example.com", "MX"] or q[1] != "MX":
            assert a == b, f"{q}: fp-dns {a}\n NSD {b}"
    # what differs on purpose: an MX answer carries its target's address (NSD's
    # minimal-responses leaves it out; without it NSD adds the apex's NS records too)
    r = dns.query.udp(dns.message.make_query("example.com", "MX"), HOST, port=fpdns[0])
    assert [x.to_text() for x in r.additional] == ["mail.example.com. 300 IN A 192.0.2.25"]


def test_every_record_type_and_compression(fpdns):
    port = fpdns[0]
    for qtype, want in [("A", "192.0.2.1"), ("AAAA", "2001:db8::1"), ("MX", "10 mail.example.com."),
                        ("TXT", '"v=spf1 -all" "second string"'), ("NS", "ns1.example.com."),
                        ("SOA", "ns1.example.com. hostmaster.example.com. 2026112701 7200 3600 1209600 300")]:
        q = dns.message.make_query("example.com", qtype)
        wire = dns.query.udp(q, HOST, port=port).to_wire()
        r = dns.message.from_wire(wire)
        assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA
        assert want in r.answer[0].to_text(), (qtype, r.answer)
    # the NS answer's names point at the question's: far shorter than written out
    q = dns.message.make_query("example.com", "NS", use_edns=False)
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.settimeout(3)
    raw.sendto(q.to_wire(), (HOST, port))
    wire = raw.recv(4096)
    raw.close()
    assert wire.count(b"\x07example\x03com\x00") == 1
    assert len(dns.message.from_wire(wire).additional) == 3


def test_case_id_and_rd_echoed(fpdns):
    q = dns.message.make_query("wWw.ExAmPlE.cOm", "A")
    q.id = 0x4242
    r = dns.query.udp(q, HOST, port=fpdns[0])
    assert r.id == 0x4242 and r.flags & dns.flags.RD and not r.flags & dns.flags.RA
    assert r.question[0].name.to_text() == "wWw.ExAmPlE.cOm."


def test_truncation_and_tcp(fpdns):
    port = fpdns[0]
    # 780 bytes: TC at 512, whole with EDNS0; 1,300 bytes: TC even at EDNS 4096 (we send 1232)
    for name, edns, tc in [("mid", None, True), ("mid", 4096, False), ("mid", 600, True),
                           ("big", 4096, True), ("big", None, True)]:
        q = dns.message.make_query(f"{name}.example.com", "TXT", use_edns=0 if edns else None,
                                   payload=edns or 512)
        r = dns.query.udp(q, HOST, port=port, raise_on_truncation=False)
        assert bool(r.flags & dns.flags.TC) == tc, (name, edns)
        assert (len(r.answer) == 0) == tc
        if edns:
            assert r.edns == 0 and r.payload == 1232
        t, used_tcp = dns.query.udp_with_fallback(q, HOST, port=port, timeout=3)
        assert used_tcp == tc and not t.flags & dns.flags.TC
        assert len(t.answer[0][0].strings) == (3 if name == "mid" else 5)


def test_tcp_pipelined_split_at_every_byte(fpdns):
    qs = []
    for i, (n, t) in enumerate([("example.com", "SOA"), ("nope.example.com", "A"),
                                ("big.example.com", "TXT")]):
        q = dns.message.make_query(n, t)
        q.id = 100 + i
        w = q.to_wire()
        qs.append(struct.pack(">H", len(w)) + w)
    stream = b"".join(qs)
    for cut in range(1, len(stream)):
        s = socket.create_connection((HOST, fpdns[0]), 3)
        s.sendall(stream[:cut])
        time.sleep(0.001 if cut % 16 else 0.02)
        s.sendall(stream[cut:])
        ids = []
        buf = b""
        while len(ids) < 3:
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
                n = struct.unpack(">H", buf[:2])[0]
                ids.append(dns.message.from_wire(buf[2:2 + n]).id)
                buf = buf[2 + n:]
            if len(ids) < 3:
                more = s.recv(65536)
                assert more, f"closed after {ids} (cut at {cut})"
                buf += more
        s.close()
        assert ids == [100, 101, 102], cut


def fuzz_seeds():
    d = ROOT / "tests" / "fuzz" / "corpus" / "dns_query"
    return sorted(d.iterdir())


def test_malformed_datagrams(fpdns):
    """Every seed of the fuzz corpus (pointer loops, bad counts, cut names, two OPTs, ...):
    an error answer with the query's ID, or none; the server answers the next query."""
    port = fpdns[0]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.3)
    answered = 0
    for f in fuzz_seeds():
        data = f.read_bytes()
        s.sendto(data, (HOST, port))
        try:
            wire = s.recv(65536)
        except socket.timeout:
            assert len(data) < 12 or data[2] & 0x80, f"{f.name}: no answer"
            continue
        answered += 1
        assert wire[:2] == data[:2] and wire[2] & 0x80, f.name
        rcode = wire[3] & 0xf        # read by hand: dnspython refuses an UPDATE's echo
        if f.name == "ptr_header":   # a legal pointer back into the header: name "\000."
            assert rcode == dns.rcode.REFUSED
        elif f.name.startswith(("ptr_", "label_", "qd", "an1", "two_opts", "opt_")) or \
           f.name in ("name_256", "name_cut", "qtype_cut", "ar_more_than_there", "header_only"):
            assert rcode == dns.rcode.FORMERR, f.name
        if f.name.startswith("opcode_"):
            assert rcode == dns.rcode.NOTIMP, f.name
        if f.name == "edns_v1":
            assert dns.message.from_wire(wire).rcode() == dns.rcode.BADVERS
        q = dns.message.make_query("example.com", "A")
        assert dns.query.udp(q, HOST, port=port, timeout=2).rcode() == dns.rcode.NOERROR
    s.close()
    assert answered > 30


def test_dig_and_kdig(fpdns):
    port = str(fpdns[0])
    for tool, extra in [("dig", []), ("dig", ["+tcp"]), ("kdig", []), ("kdig", ["+tcp"])]:
        for name, status in [("www.example.com", "NOERROR"), ("nope.example.com", "NXDOMAIN"),
                             ("example.net", "REFUSED")]:
            r = run([tool, "-p", port, f"@{HOST}", "+norec", *extra, name, "A"], timeout=20)
            assert r.returncode == 0, r.stderr
            assert f"status: {status}" in r.stdout.replace(";", ","), (tool, extra, r.stdout)
    r = run(["dig", "-p", port, f"@{HOST}", "+norec", "big.example.com", "TXT"], timeout=20)
    assert "Truncated, retrying in TCP mode" in r.stdout and "ANSWER: 1" in r.stdout


def test_loadgen_dns(build_dir, fpdns, nsd, tmp_path):
    """fp-loadgen's dns protocol (UDP, open loop) against fp-dns and NSD: every query
    answered and matched by ID and question, NXDOMAIN a miss, nothing lost; a server
    that is not there gives timeouts, not errors or a hang."""
    lg = build_dir / "apps" / "loadgen" / "fp-loadgen"
    q = tmp_path / "queries.txt"
    q.write_text("; dnsperf's format\nwww.example.com A\nexample.com SOA\n"
                 "nope.example.com A\nmail.example.com MX\n")
    dead = free_port()
    for port, answers in [(fpdns[0], True), (nsd, True), (dead, False)]:
        out = tmp_path / "lg.json"
        r = subprocess.run([lg, "--server", f"{HOST}:{port}", "--proto", "dns", "--queries", q,
                            "--rates", "500,2k", "--duration", "1", "--warmup", "0.2",
                            "--conns", "4", "--depth", "4", "--timeout", "2000",
                            "--udp-ports", str(free_port()), "--stats", "none", "--quiet",
                            "--json", out], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        res = json.loads(out.read_text())
        assert "dns: 4 queries" in res["config"]["workload_desc"], res["config"]
        for pt in res["points"]:
            if answers:
                assert pt["completed"] > 0 and pt["timeouts"] == 0 and pt["errors"] == 0, pt
                # one question in four is for a name the zone does not have
                assert 0.1 < pt["misses"] / pt["completed"] < 0.45, pt
            else:
                assert pt["completed"] == 0 and pt["timeouts"] > 0, pt


def test_udp_receive_buffer(fpdns):
    """On Linux sockets a UDP port gets a 4 MB receive buffer (Linux's 208 KB default
    dropped queries of Poisson bursts at half load): `ss` shows it on fp-dns's socket. As
    root the buffer passes net.core.rmem_max (SO_RCVBUFFORCE); without root it is capped
    there, and that is all this can check."""
    r = subprocess.run(["ss", "-H", "-u", "-a", "-m", "-n", f"sport = :{fpdns[0]}"],
                       capture_output=True, text=True, check=True)
    rb = [int(x) for x in re.findall(r"rb(\d+)", r.stdout)]
    assert rb, r.stdout
    rmem_max = int(open("/proc/sys/net/core/rmem_max").read())
    want = 4 << 20 if os.geteuid() == 0 else min(4 << 20, rmem_max)
    assert min(rb) >= want, (rb, r.stdout)


def test_counters_at_exit(build_dir, zonedir):
    port = free_port()
    p = subprocess.Popen([build_dir / "apps" / "dns" / "fp-dns", "-z", zonedir / "example.zone",
                          "-p", str(port), "--ip", HOST, "--stats", "none"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, p)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"\x00\x01\x02", (HOST, port))             # no header: dropped
        s.close()
        dns.query.udp(dns.message.make_query("nope.example.com", "A"), HOST, port=port)
    finally:
        rc, err = stop(p)
    assert rc == 0, err
    last = err.strip().splitlines()[-1]
    assert "1 dropped" in last and "NXDOMAIN 1" in last, last


def test_tcp_idle_timeout(build_dir, zonedir):
    """A TCP connection that sends nothing for --tcp-timeout is closed (RFC 7766 §6.2.3);
    one that keeps asking is not (every 0.2 s against a 2 s timeout)."""
    port = free_port()
    p = subprocess.Popen([build_dir / "apps" / "dns" / "fp-dns", "-z", zonedir / "example.zone",
                          "-p", str(port), "--ip", HOST, "--stats", "none", "--tcp-timeout", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(port, p)
        q = dns.message.make_query("example.com", "SOA").to_wire()
        framed = struct.pack(">H", len(q)) + q
        idle = socket.create_connection((HOST, port), 5)
        busy = socket.create_connection((HOST, port), 5)
        idle.sendall(framed)
        assert len(idle.recv(4096)) > 2
        t0 = time.time()
        while time.time() - t0 < 4:
            busy.sendall(framed)
            assert len(busy.recv(4096)) > 2
            time.sleep(0.2)
        idle.settimeout(30)
        assert idle.recv(100) == b"", "the idle connection was not closed"
        busy.sendall(framed)
        assert len(busy.recv(4096)) > 2
        idle.close()
        busy.close()
    finally:
        rc, err = stop(p)
    assert rc == 0, err


def test_command_line(build_dir, zonedir):
    exe = build_dir / "apps" / "dns" / "fp-dns"
    r = run([exe, "--zone", zonedir / "example.zone", "--check"])
    assert r.returncode == 0 and "zone example.com.: 13 names (2 empty non-terminals, 1 delegation), 20 records" in r.stdout, r.stdout + r.stderr
    bad = zonedir / "bad.zone"
    bad.write_text("$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\nw A 300.1.1.1\n")
    r = run([exe, "--zone", bad, "--check"])
    assert r.returncode == 1 and r.stderr.strip() == f"fp-dns: {bad}:5: '300.1.1.1' is not an IPv4 address"
    r = run([exe, "--zone", zonedir / "absent.zone"])
    assert r.returncode == 1 and "cannot read the zone" in r.stderr and "No such file" in r.stderr
    r = run([exe])
    assert r.returncode == 2 and "--zone FILE is required" in r.stderr
    r = run([exe, "--zone", bad, "--edns-size", "100"])
    assert r.returncode == 2 and "--edns-size '100'" in r.stderr
    r = run([exe, "--help"])
    assert r.returncode == 0 and "--zone FILE" in r.stdout and "runtime options" in r.stdout


# ---- AF_XDP, in a namespace pair ----

sys.path.insert(0, str(ROOT / "tools"))
from netns import Topo, stop_process  # noqa: E402

TAG = f"fpn{os.getpid() % 10000}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, AF_XDP)")
def test_xdp_same_answers_as_nsd(build_dir, zonedir):
    """fp-dns on AF_XDP and NSD on the kernel's address of the same veth, asked the same
    questions from the client namespace over UDP and TCP."""
    with Topo(TAG) as t:
        fp = t.popen(t.srv_ns, [build_dir / "apps" / "dns" / "fp-dns", "--zone",
                                zonedir / "example.zone", "--port", "53", "--if", t.srv_if,
                                "--ip", f"{t.fp_srv_ip}/24", "--stats", "none"], cpu=0)
        ns = t.popen(t.srv_ns, ["nsd", "-d", "-c", nsd_conf(zonedir, t.srv_ip, 53)])
        try:
            ask = str(ROOT / "tests" / "integration" / "dnsask.py")
            for proto in ("udp", "tcp"):
                got = {}
                for ip in (t.fp_srv_ip, t.srv_ip):
                    for _ in range(50):      # both servers may still be starting
                        r = t.sh(t.cli_ns, sys.executable, ask, ip, "53", proto,
                                 json.dumps(QUESTIONS), check=False, timeout=120)
                        if r.returncode == 0:
                            break
                        assert fp.poll() is None and ns.poll() is None, r.stderr
                        time.sleep(0.2)
                    assert r.returncode == 0, r.stderr
                    got[ip] = json.loads(r.stdout)
                for q, a, b in zip(QUESTIONS, got[t.fp_srv_ip], got[t.srv_ip]):
                    assert a == b, f"{proto} {q}: fp-dns {a}\n NSD {b}"
        finally:
            rc, err = stop(fp)
            stop(ns)
        assert rc == 0, err
        assert "dropped" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, AF_XDP)")
def test_reflect_sends_datagrams_back(build_dir):
    """tools/fp-reflect (dns_bench's ceiling): a DNS query comes back as itself with QR set
    and a UDP checksum Linux accepts (a wrong one would be dropped, and the ask would time
    out); a second address's datagrams are not its business."""
    with Topo(TAG) as t:
        mac = t.sh(t.srv_ns, "cat", f"/sys/class/net/{t.srv_if}/address").stdout.strip()
        t.sh(t.cli_ns, "ip", "neigh", "replace", t.fp_srv_ip, "lladdr", mac, "dev", t.cli_if,
             "nud", "permanent")
        p = t.popen(t.srv_ns, [build_dir / "tools" / "fp-reflect", "--if", t.srv_if, "--ip",
                               t.fp_srv_ip, "--dns"], cpu=0)
        try:
            code = ("import socket, sys\n"
                    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                    "s.settimeout(0.5)\n"
                    "q = bytes.fromhex('abcd00000001000000000000') + b'\\x03www\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01'\n"
                    "for _ in range(40):\n"
                    "    s.sendto(q, (sys.argv[1], 53))\n"
                    "    try:\n"
                    "        a = s.recv(512)\n"
                    "    except socket.timeout:\n"
                    "        continue\n"
                    "    print(a.hex()); break\n")
            r = t.sh(t.cli_ns, sys.executable, "-c", code, t.fp_srv_ip, timeout=60)
            got = bytes.fromhex(r.stdout.strip())
            assert got[:2] == b"\xab\xcd" and got[2] & 0x80 and got[12:] == \
                b"\x03www\x07example\x03com\x00\x00\x01\x00\x01", got
        finally:
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=10)
        assert p.returncode == 0, err
        assert "reflected" in out and not out.startswith("fp-reflect: 0 reflected"), out
