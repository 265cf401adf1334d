"""dnsask.py: ask a DNS server a list of questions with dnspython and reduce each answer to
what two conforming authoritative servers must agree on.

Used in-process by test_dns.py, and as a script in a client namespace:
    python dnsask.py SERVER PORT udp|tcp '[["www.example.com", "A"], ...]'
prints one JSON list, an entry per question.
"""
import json
import sys

import dns.flags
import dns.message
import dns.query
import dns.rcode


def canon(r, qtype):
    """rcode, AA, TC, the answer and authority sections as sorted RRset texts, and the
    additional section where it is required (a referral's glue)."""
    referral = not (r.flags & dns.flags.AA) and r.rcode() == dns.rcode.NOERROR and not r.answer
    out = {
        "rcode": dns.rcode.to_text(r.rcode()),
        "aa": bool(r.flags & dns.flags.AA),
        "tc": bool(r.flags & dns.flags.TC),
        "answer": sorted(x.to_text() for x in r.answer),
        "authority": sorted(x.to_text() for x in r.authority),
    }
    if referral:
        out["glue"] = sorted(x.to_text() for x in r.additional)
    if qtype == "ANY":   # RFC 8482: one RRset, each server picks its own
        out["answer"] = len(r.answer)
    return out


def ask(server, port, questions, proto="udp", payload=4096, timeout=3):
    res = []
    for name, qtype in questions:
        q = dns.message.make_query(name, qtype, use_edns=0 if payload else None,
                                   payload=payload or 512)
        q.flags &= ~dns.flags.RD
        if proto == "tcp":
            r = dns.query.tcp(q, server, port=port, timeout=timeout)
        else:
            r = dns.query.udp(q, server, port=port, timeout=timeout)
        res.append(canon(r, qtype))
    return res


if __name__ == "__main__":
    server, port, proto, qs = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
    print(json.dumps(ask(server, port, qs, proto)))
