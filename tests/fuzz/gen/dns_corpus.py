#!/usr/bin/env python3
"""dns_corpus.py: write the seed corpora of fuzz_dns_query and fuzz_dns_zone (tests/fuzz/corpus/).

Queries: well-formed ones of every type and flag, and the malformed ones a DNS server
meets: names cut short, compression pointers forward, to themselves and in loops,
label types 01 and 10, names over 255 bytes, wrong section counts, two OPTs, an OPT
not owned by the root, EDNS versions, opcodes, responses. Zones: the master-file
forms (directives, parentheses, escapes, relative names, every record type) and
broken ones. Run it from the repository root; it rewrites both directories.
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def name(text):
    out = b""
    for label in text.split(".") if text else []:
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def query(qname="example.com", qtype=1, qclass=1, flags=0x0100, counts=(1, 0, 0, 0), tail=b""):
    return struct.pack(">HHHHHH", 0x1234, flags, *counts) + name(qname) + struct.pack(">HH", qtype, qclass) + tail


def opt(size=1232, version=0, do=True, owner=b"\0"):
    return owner + struct.pack(">HHBBHH", 41, size, 0, version, 0x8000 if do else 0, 0)


def queries():
    q = {}
    for t, n in [(1, "a"), (28, "aaaa"), (2, "ns"), (5, "cname"), (6, "soa"), (15, "mx"), (16, "txt"), (255, "any"), (252, "axfr"), (41, "opt"), (0, "type0"), (99, "spf")]:
        q["type_" + n] = query(qtype=t)
    for n in ["www.example.com", "ftp.example.com", "ext.example.com", "l1.example.com", "nope.example.com", "b.c.example.com", "x.sub.example.com", "ns.sub.example.com", "big.example.com", "example.org", "", "WwW.ExAmPlE.cOm"]:
        q["name_" + (n or "root").replace(".", "_")] = query(qname=n)
    q["big_edns"] = query("big.example.com", 16, counts=(1, 0, 0, 1), tail=opt(4096))
    q["big_edns_small"] = query("big.example.com", 16, counts=(1, 0, 0, 1), tail=opt(600))
    q["edns_v1"] = query(counts=(1, 0, 0, 1), tail=opt(version=1))
    q["two_opts"] = query(counts=(1, 0, 0, 2), tail=opt() + opt())
    q["opt_owner"] = query(counts=(1, 0, 0, 1), tail=opt(owner=name("x")))
    q["opt_cut"] = query(counts=(1, 0, 0, 1), tail=opt()[:-3])
    q["ar_more_than_there"] = query(counts=(1, 0, 0, 3), tail=opt())
    q["class_ch"] = query(qclass=3)
    q["opcode_notify"] = query(flags=4 << 11)
    q["opcode_update"] = query(flags=5 << 11, counts=(1, 1, 1, 0))
    q["response"] = query(flags=0x8000)
    q["qd0"] = query(counts=(0, 0, 0, 0))[:12]
    q["qd2"] = query(counts=(2, 0, 0, 0)) + name("example.com") + b"\0\1\0\1"
    q["an1"] = query(counts=(1, 1, 0, 0))
    q["short_header"] = b"\x12\x34\x01\x00\x00\x01"
    q["header_only"] = query()[:12]
    q["name_cut"] = query()[:18]
    q["qtype_cut"] = query()[:-3]
    hdr = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q["ptr_self"] = hdr + b"\xc0\x0c\0\1\0\1"
    q["ptr_forward"] = hdr + b"\xc0\x20\0\1\0\1" + b"\x03com\0" * 4
    q["ptr_header"] = hdr + b"\xc0\x05\0\1\0\1"
    q["ptr_loop"] = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0xc00a) + b"\xc0\x0a\0\1\0\1"
    q["ptr_chain"] = hdr + b"\x03www\xc0\x0c\0\1\0\1"
    q["label_01"] = hdr + b"\x41abc\0\0\1\0\1"
    q["label_10"] = hdr + b"\x81abc\0\0\1\0\1"
    q["label_past_end"] = hdr + b"\x3fabc"
    q["name_256"] = hdr + (b"\x3f" + b"a" * 63) * 4 + b"\x03abc\0\0\1\0\1"
    q["name_255"] = hdr + (b"\x3f" + b"a" * 63) * 3 + b"\x3d" + b"a" * 61 + b"\0\0\1\0\1"
    q["tcp_style_len"] = struct.pack(">H", len(query())) + query()
    return q


ZONE = """$ORIGIN example.com.
$TTL 1h
@ IN SOA ns1 hostmaster ( 1 ; serial
      7200 3600 2w 300 )
  IN NS ns1
  NS ns2.example.com.
  60 IN MX 10 mail
  A 192.0.2.1
  AAAA 2001:db8::1
  TXT "v=spf1 -all" two\\032words "semi;colon"
ns1 A 192.0.2.53
ns2 A 192.0.2.54
www CNAME @
l1 CNAME l2
l2 CNAME l1
a.b.c A 192.0.2.99
sub NS ns.sub
ns.sub A 192.0.2.200
dot\\.ted A 192.0.2.7
$ORIGIN other.example.com.
x 1w2d3h4m5s A 192.0.2.8
"""


def zones():
    z = {"full": ZONE}
    z["minimal"] = "@ 3600 SOA ns hm 1 2 3 4 5\n@ 3600 NS ns\nns 3600 A 192.0.2.1\n"
    z["absolute"] = "fuzz.example. 60 IN SOA a. b. 1 2 3 4 5\nfuzz.example. 60 IN NS a.\n"
    z["no_soa"] = "$TTL 60\nwww A 192.0.2.1\n"
    z["two_soa"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ SOA a b 1 2 3 4 5\n@ NS a\n"
    z["cname_and_a"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ NS a\nw CNAME a\nw A 192.0.2.1\n"
    z["paren_open"] = "$TTL 60\n@ SOA ( a b 1 2 3 4 5\n"
    z["quote_open"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ TXT \"abc\n"
    z["long_label"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ NS a\n" + "a" * 64 + " A 192.0.2.1\n"
    z["escapes"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ NS a\n\\065\\.b A 192.0.2.1\n@ TXT \"\\\"q\\\"\" \\255\n"
    z["deep_delegation"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ NS a\nd NS ns.d\nns.d A 192.0.2.1\nx.y.d NS ns.d\nlow.x.y.d A 192.0.2.2\n"
    z["big_rrset"] = "$TTL 60\n@ SOA a b 1 2 3 4 5\n@ NS a\n" + "".join("@ TXT \"%s\"\n" % ("t%03d" % i * 60) for i in range(40))
    return z


def main():
    for sub, items in (("dns_query", queries()), ("dns_zone", zones())):
        d = os.path.join(ROOT, sub)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        for k, v in items.items():
            with open(os.path.join(d, k), "wb") as f:
                f.write(v if isinstance(v, bytes) else v.encode())
        print(f"{sub}: {len(items)} seeds")


if __name__ == "__main__":
    main()
