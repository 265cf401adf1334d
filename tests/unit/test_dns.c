/* test_dns.c: fp-dns's zone parser, query parser and answers (apps/dns): every rcode, CNAME chains, referrals, truncation, EDNS0, and pre-built == built. */
#include <stdio.h>
#include <string.h>

#include "dns.h"
#include "harness.h"

static const char zone_text[] =
	"$ORIGIN example.com.\n"
	"$TTL 1h\n"
	"@   IN SOA ns1.example.com. hostmaster ( 2026112701 ; serial\n"
	"        7200 3600 2w 300 )\n"
	"    IN NS ns1\n"
	"    NS ns2.example.com.\n"
	"    IN 60 MX 10 mail\n"
	"    A 192.0.2.1\n"
	"    A 192.0.2.1\n"                       /* a duplicate: dropped */
	"    AAAA 2001:db8::1\n"
	"    TXT \"v=spf1 -all\" two\\032words\n"
	"ns1 A 192.0.2.53\n"
	"NS2 A 192.0.2.54\n"                      /* upper case: names are case-blind */
	"    AAAA 2001:db8::54\n"
	"mail 300 IN A 192.0.2.25\n"
	"www CNAME @\n"
	"ftp CNAME www\n"
	"ext CNAME www.example.org.\n"
	"dangling CNAME gone\n"
	"loop1 CNAME loop2\n"
	"loop2 CNAME loop1\n"
	"a.b.c A 192.0.2.99\n"
	"sub NS ns.sub\n"
	"ns.sub A 192.0.2.200\n"
	"dot\\.ted A 192.0.2.7\n"
	"$ORIGIN big.example.com.\n"
	"@ TXT \"" "%s" "\"\n";

static struct dns_db *db;
static char big[256];

static struct dns_db *load(const char *text, uint16_t edns_max)
{
	struct dns_zone z;
	char err[256];

	if (dns_zone_parse(&z, text, strlen(text), NULL, "t.zone", err, sizeof(err))) {
		print_error("zone: %s\n", err);
		return NULL;
	}
	return dns_db_create(&z, edns_max, err, sizeof(err));
}

static int setup(void **state)
{
	static char text[4096];

	(void)state;
	memset(big, 'x', 250);
	big[250] = '\0';
	/* big.example.com has four 250-byte strings: an answer over 1,000 bytes */
	char four[1100];
	snprintf(four, sizeof(four), "%s\" \"%s\" \"%s\" \"%s", big, big, big, big);
	snprintf(text, sizeof(text), zone_text, four);
	db = load(text, 1232);
	return db ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	dns_db_destroy(db);
	return 0;
}

/* ---- building queries and reading answers ---- */

struct q {
	const char *name;
	uint16_t type, class, flags;
	int edns;                    /* -1: no OPT, else its size */
	uint8_t version;
};

static size_t mkquery(const struct q *q, uint8_t *p)
{
	uint8_t wire[DNS_NAME_MAX], wl = 0;
	size_t n = 0;

	/* the name as written, case kept (dns_name_parse lower-cases: encode by hand) */
	const char *s = q->name;
	while (*s) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);
		wire[wl++] = (uint8_t)l;
		memcpy(wire + wl, s, l);
		wl = (uint8_t)(wl + l);
		s += l + (dot ? 1 : 0);
	}
	wire[wl++] = 0;
	p[n++] = 0xbe; p[n++] = 0xef;
	p[n++] = (uint8_t)(q->flags >> 8); p[n++] = (uint8_t)q->flags;
	p[n++] = 0; p[n++] = 1; p[n++] = 0; p[n++] = 0; p[n++] = 0; p[n++] = 0;
	p[n++] = 0; p[n++] = q->edns >= 0;
	memcpy(p + n, wire, wl);
	n += wl;
	p[n++] = (uint8_t)(q->type >> 8); p[n++] = (uint8_t)q->type;
	uint16_t class = q->class ? q->class : DNS_C_IN;
	p[n++] = (uint8_t)(class >> 8); p[n++] = (uint8_t)class;
	if (q->edns >= 0) {
		p[n++] = 0; p[n++] = 0; p[n++] = DNS_T_OPT;
		p[n++] = (uint8_t)(q->edns >> 8); p[n++] = (uint8_t)q->edns;
		p[n++] = 0; p[n++] = q->version; p[n++] = 0x80; p[n++] = 0;  /* DO */
		p[n++] = 0; p[n++] = 0;
	}
	return n;
}

struct ans {
	size_t len;
	uint16_t id, flags, qd, an, ns, ar;
	int rcode;
	char qname[300];
	char rr[32][640];            /* "section owner type [target]": a, n or d first */
	unsigned n_rr;
	bool opt;
};

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Decode every record of an answer (pointers followed, names checked): a malformed
 * message fails the test. */
static void decode(const uint8_t *p, size_t len, struct ans *a)
{
	uint8_t name[DNS_NAME_MAX], nl;
	size_t off = DNS_HDR_LEN, n;

	memset(a, 0, sizeof(*a));
	a->len = len;
	assert_true(len >= DNS_HDR_LEN);
	a->id = rd16(p);
	a->flags = rd16(p + 2);
	a->qd = rd16(p + 4);
	a->an = rd16(p + 6);
	a->ns = rd16(p + 8);
	a->ar = rd16(p + 10);
	a->rcode = a->flags & DNS_F_RCODE;
	if (a->qd) {
		uint8_t raw[DNS_NAME_MAX];
		n = dns_name_read(p, len, off, name, raw, &nl);
		assert_true(n > 0);
		dns_name_text(raw, nl, a->qname, sizeof(a->qname));
		off += n + 4;
	}
	for (unsigned i = 0; i < (unsigned)a->an + a->ns + a->ar; i++) {
		char owner[300];
		n = dns_name_read(p, len, off, name, NULL, &nl);
		assert_true(n > 0 && off + n + 10 <= len);
		dns_name_text(name, nl, owner, sizeof(owner));
		off += n;
		uint16_t type = rd16(p + off), rdlen = rd16(p + off + 8);
		off += 10;
		assert_true(off + rdlen <= len);
		if (type == DNS_T_OPT) {
			a->opt = true;
			a->rcode |= p[off - 6] << 4;
		} else if (a->n_rr < 32) {
			char sec = i < a->an ? 'a' : i < (unsigned)a->an + a->ns ? 'n' : 'd';
			char target[300] = "";
			if (type == DNS_T_NS || type == DNS_T_CNAME || type == DNS_T_MX) {
				size_t at = off + (type == DNS_T_MX ? 2 : 0);
				assert_true(dns_name_read(p, len, at, name, NULL, &nl) > 0);
				dns_name_text(name, nl, target, sizeof(target));
			}
			snprintf(a->rr[a->n_rr++], sizeof(a->rr[0]), "%c %s %u%s%s", sec, owner,
				 type, *target ? " " : "", target);
		}
		off += rdlen;
	}
	assert_int_equal(off, len);
}

static bool has(const struct ans *a, const char *rr)
{
	for (unsigned i = 0; i < a->n_rr; i++)
		if (!strcmp(a->rr[i], rr))
			return true;
	return false;
}

static size_t ask(const struct q *q, size_t limit, struct ans *a, struct dns_counters *c)
{
	static uint8_t pkt[600], out[DNS_MSG_MAX];
	struct dns_counters local = { 0 };
	size_t n = dns_reply(db, pkt, mkquery(q, pkt), out, limit, c ? c : &local);

	if (n)
		decode(out, n, a);
	return n;
}

/* ---- the zone file ---- */

static void zone_parses(void **state)
{
	(void)state;
	struct dns_db_info info;

	dns_db_get_info(db, &info);
	assert_int_equal(info.records, 22);       /* 23 written, one duplicate */
	assert_int_equal(info.empty_nonterminals, 2);   /* b.c and c */
	assert_int_equal(info.cuts, 1);
	assert_true(info.prebuilt > info.names);

	struct ans a;
	ask(&(struct q){ "example.com", DNS_T_SOA, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.rcode, DNS_R_NOERROR);
	assert_true(has(&a, "a example.com. 6"));
	/* the MX record's TTL (60) and class came in the other order */
	ask(&(struct q){ "example.com", DNS_T_MX, .edns = -1 }, 0, &a, NULL);
	assert_true(has(&a, "a example.com. 15 mail.example.com."));
	assert_true(has(&a, "d mail.example.com. 1"));
	ask(&(struct q){ "dot\\.ted.example.com", DNS_T_A, .edns = -1 }, 0, &a, NULL);
	ask(&(struct q){ "ns2.example.com", DNS_T_AAAA, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 1);
}

static void zone_errors(void **state)
{
	(void)state;
	static const struct { const char *text, *says; } bad[] = {
		{ "example.com. 1 IN A 192.0.2.1\n", "no SOA record" },
		{ "@ 1 SOA a b 1 2 3 4 5\n", "relative and there is no origin" },
		{ "$ORIGIN x.\n@ 1 SOA a b 1 2 3 4 5\n", "t.zone:2: no NS record at the apex x." },
		{ "$ORIGIN x.\n@ SOA a b 1 2 3 4 5\n", "t.zone:2: no TTL" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\ny. A 1.2.3.4\n",
		  "t.zone:5: y. is outside the zone" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ SOA a b 1 2 3 4 5\n",
		  "t.zone:5: a second SOA (the first is on line 3)" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\nw CNAME a\nw A 1.2.3.4\n",
		  "w.x. has a CNAME and other data" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ A 1.2.3\n",
		  "t.zone:5: '1.2.3' is not an IPv4 address" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ AAAA ::g\n",
		  "'::g' is not an IPv6 address" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ MX 70000 m\n",
		  "MX preference '70000' is not 0..65535" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ SRV 1 2 3 t\n",
		  "type 'SRV' is not served" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ CH A 1.2.3.4\n",
		  "class CH: only IN is served" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4\n", "SOA takes MNAME RNAME" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA ( a b 1 2 3 4 5\n", "'(' never closed" },
		{ "$ORIGIN x.\n$TTL 1\n@ TXT \"open\n", "t.zone:3: a quoted string does not end" },
		{ "$INCLUDE other\n", "$INCLUDE is not supported" },
		{ "$TTL 1x\n", "$TTL takes one TTL" },
		{ "$ORIGIN a..b.\n", "'a..b.' is not a domain name" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n  \n\tA 1.2.3.4\n"
		  "0123456789012345678901234567890123456789012345678901234567890123 A 1.2.3.4\n",
		  "t.zone:7: '0123" },
		{ "$ORIGIN x.\n$TTL 1\n@ SOA a b 1 2 3 4 5\n@ NS a\n@ TXT \"\\256\"\n",
		  "bad escape" },
		{ " A 1.2.3.4\n", "no owner" },
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(bad); i++) {
		struct dns_zone z;
		char err[256] = "";
		int rc = dns_zone_parse(&z, bad[i].text, strlen(bad[i].text), NULL, "t.zone", err,
					sizeof(err));
		if (rc != -1 || !strstr(err, bad[i].says))
			fail_msg("zone %zu: rc %d, said '%s', wanted '%s'", i, rc, err, bad[i].says);
	}
	/* --origin for relative names, and the last TTL stated is the default (RFC 1035) */
	struct dns_zone z;
	char err[256];
	const char *t = "@ 7 SOA a b 1 2 3 4 5\n NS a\n";
	assert_int_equal(dns_zone_parse(&z, t, strlen(t), "example.net", "t", err, sizeof(err)), 0);
	assert_int_equal(z.n_rr, 2);
	assert_int_equal(z.rr[0].ttl, 7);
	assert_int_equal(z.rr[1].ttl, 7);
	dns_zone_free(&z);
}

/* ---- the query parser ---- */

static void query_errors(void **state)
{
	(void)state;
	struct dns_query q;
	uint8_t p[600];
	size_t n = mkquery(&(struct q){ "example.com", DNS_T_A, .edns = -1 }, p);

	assert_int_equal(dns_query_parse(p, n, &q), 0);
	assert_int_equal(dns_query_parse(p, 11, &q), -1);       /* no header: dropped */
	p[2] |= 0x80;
	assert_int_equal(dns_query_parse(p, n, &q), -1);        /* a response: dropped */
	p[2] &= 0x7f;
	p[2] |= 2 << 3;                                         /* opcode STATUS */
	assert_int_equal(dns_query_parse(p, n, &q), DNS_R_NOTIMP);
	assert_true(q.has_question);
	p[2] &= (uint8_t)~(0xf << 3);
	assert_int_equal(dns_query_parse(p, n - 1, &q), DNS_R_FORMERR);  /* class cut */
	assert_false(q.has_question);
	p[5] = 2;
	assert_int_equal(dns_query_parse(p, n, &q), DNS_R_FORMERR);      /* two questions */
	p[5] = 1;
	p[7] = 1;
	assert_int_equal(dns_query_parse(p, n, &q), DNS_R_FORMERR);      /* an answer */
	p[7] = 0;

	/* names: a pointer to itself, forward, label types 01/10, a label past the end; a
	 * loop; over 255 bytes */
	static const uint8_t names[][8] = {
		{ 0xc0, 12 }, { 0xc0, 40 }, { 0x40, 0 }, { 0x80, 0 }, { 50, 'a' },
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(names); i++) {
		uint8_t m[64] = { 0, 1, 0, 0, 0, 1 };
		memcpy(m + 12, names[i], 8);
		assert_int_equal(dns_query_parse(m, 12 + 8 + 4, &q), DNS_R_FORMERR);
	}
	uint8_t loop[40] = { 0, 1, 0, 0, 0, 1 };   /* header bytes 10-11 point at 10 */
	loop[10] = 0xc0; loop[11] = 10; loop[12] = 0xc0; loop[13] = 10;
	assert_int_equal(dns_query_parse(loop, sizeof(loop), &q), DNS_R_FORMERR);
	uint8_t longname[400] = { 0, 1, 0, 0, 0, 1 };
	for (size_t i = 12; i < 12 + 5 * 60; i += 60)
		longname[i] = 59;
	assert_int_equal(dns_query_parse(longname, sizeof(longname), &q), DNS_R_FORMERR);

	/* EDNS0: one OPT, owned by the root, version 0 */
	n = mkquery(&(struct q){ "example.com", DNS_T_A, .edns = 100 }, p);
	assert_int_equal(dns_query_parse(p, n, &q), 0);
	assert_true(q.edns && q.edns_do);
	assert_int_equal(q.edns_size, 512);                      /* below 512 means 512 */
	memcpy(p + n, p + n - 11, 11);
	p[11] = 2;
	assert_int_equal(dns_query_parse(p, n + 11, &q), DNS_R_FORMERR);   /* two OPTs */
	n = mkquery(&(struct q){ "example.com", DNS_T_A, .edns = 4096, .version = 1 }, p);
	assert_int_equal(dns_query_parse(p, n, &q), DNS_R_BADVERS);
	assert_int_equal(dns_query_parse(p, n - 1, &q), DNS_R_FORMERR);    /* OPT cut */
}

/* ---- answers ---- */

static void answers(void **state)
{
	(void)state;
	struct ans a;
	struct dns_counters c = { 0 };

	/* ID, RD and the client's spelling come back; the answer points at the question */
	ask(&(struct q){ "ExAmPlE.CoM", DNS_T_A, .flags = DNS_F_RD, .edns = -1 }, 0, &a, &c);
	assert_int_equal(a.id, 0xbeef);
	assert_true(a.flags & DNS_F_QR && a.flags & DNS_F_AA && a.flags & DNS_F_RD);
	assert_string_equal(a.qname, "ExAmPlE.CoM.");
	assert_int_equal(a.an, 1);
	assert_true(has(&a, "a example.com. 1"));
	assert_int_equal(c.prebuilt, 1);

	/* a CNAME chain inside the zone is followed, out of it is not */
	ask(&(struct q){ "ftp.example.com", DNS_T_AAAA, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 3);
	assert_true(has(&a, "a ftp.example.com. 5 www.example.com."));
	assert_true(has(&a, "a www.example.com. 5 example.com."));
	assert_true(has(&a, "a example.com. 28"));
	ask(&(struct q){ "ext.example.com", DNS_T_A, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 1);
	assert_int_equal(a.rcode, DNS_R_NOERROR);
	ask(&(struct q){ "dangling.example.com", DNS_T_A, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.rcode, DNS_R_NXDOMAIN);               /* RFC 6604 */
	assert_int_equal(a.an, 1);
	assert_true(has(&a, "n example.com. 6"));
	ask(&(struct q){ "loop1.example.com", DNS_T_A, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 8);                               /* bounded */
	ask(&(struct q){ "www.example.com", DNS_T_CNAME, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 1);
	/* ANY: one RRset (RFC 8482), not the whole name */
	ask(&(struct q){ "example.com", DNS_T_ANY, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 1);
	assert_true(has(&a, "a example.com. 1"));
	ask(&(struct q){ "www.example.com", DNS_T_ANY, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.an, 1);
	assert_true(has(&a, "a www.example.com. 5 example.com."));

	/* negative answers: NXDOMAIN and NODATA carry the SOA, an empty non-terminal exists */
	ask(&(struct q){ "nope.example.com", DNS_T_A, .edns = -1 }, 0, &a, &c);
	assert_int_equal(a.rcode, DNS_R_NXDOMAIN);
	assert_int_equal(a.an, 0);
	assert_true(has(&a, "n example.com. 6"));
	assert_int_equal(c.built, 1);
	ask(&(struct q){ "mail.example.com", DNS_T_MX, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.rcode, DNS_R_NOERROR);
	assert_int_equal(a.an, 0);
	assert_int_equal(a.ns, 1);
	ask(&(struct q){ "b.c.example.com", DNS_T_A, .edns = -1 }, 0, &a, NULL);
	assert_int_equal(a.rcode, DNS_R_NOERROR);
	assert_int_equal(a.ns, 1);

	/* a delegation: a referral with glue, not authoritative, at and below the cut */
	static const char *const below[] = { "sub.example.com", "x.y.sub.example.com",
					     "ns.sub.example.com" };
	for (size_t i = 0; i < FP_ARRAY_SIZE(below); i++) {
		ask(&(struct q){ below[i], DNS_T_A, .edns = -1 }, 0, &a, NULL);
		assert_int_equal(a.rcode, DNS_R_NOERROR);
		assert_false(a.flags & DNS_F_AA);
		assert_int_equal(a.an, 0);
		assert_true(has(&a, "n sub.example.com. 2 ns.sub.example.com."));
		assert_true(has(&a, "d ns.sub.example.com. 1"));
	}

	/* not ours, not IN, not a question about data */
	static const struct { struct q q; int rcode; } refused[] = {
		{ { "example.org", DNS_T_A, .edns = -1 }, DNS_R_REFUSED },
		{ { "com", DNS_T_NS, .edns = -1 }, DNS_R_REFUSED },
		{ { "example.com", DNS_T_SOA, .class = 3, .edns = -1 }, DNS_R_REFUSED },
		{ { "example.com", DNS_T_AXFR, .edns = -1 }, DNS_R_REFUSED },
		{ { "example.com", DNS_T_MAILA, .edns = -1 }, DNS_R_NOTIMP },
		{ { "example.com", DNS_T_OPT, .edns = -1 }, DNS_R_FORMERR },
		{ { "example.com", DNS_T_A, .edns = 1232, .version = 2 }, DNS_R_BADVERS },
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(refused); i++) {
		ask(&refused[i].q, 0, &a, NULL);
		assert_int_equal(a.rcode, refused[i].rcode);
		assert_int_equal(a.an + a.ns, 0);
		assert_int_equal(a.qd, 1);
		assert_int_equal(a.id, 0xbeef);
		assert_int_equal(a.opt, refused[i].q.edns >= 0);
	}
}

static void truncation(void **state)
{
	(void)state;
	struct ans a;
	struct dns_counters c = { 0 };

	/* over 1,000 bytes: TC without EDNS, and with an EDNS size under it */
	ask(&(struct q){ "big.example.com", DNS_T_TXT, .edns = -1 }, 0, &a, &c);
	assert_true(a.flags & DNS_F_TC);
	assert_int_equal(a.an + a.ns + a.ar, 0);
	assert_int_equal(a.qd, 1);
	assert_int_equal(c.truncated, 1);
	ask(&(struct q){ "big.example.com", DNS_T_TXT, .edns = 900 }, 0, &a, NULL);
	assert_true(a.flags & DNS_F_TC);
	assert_true(a.opt);
	/* EDNS 4096 fits it (we send up to 1232), so does TCP */
	ask(&(struct q){ "big.example.com", DNS_T_TXT, .edns = 4096 }, 0, &a, NULL);
	assert_false(a.flags & DNS_F_TC);
	assert_int_equal(a.an, 1);
	assert_true(a.len <= 1232);
	ask(&(struct q){ "big.example.com", DNS_T_TXT, .edns = -1 }, DNS_MSG_MAX, &a, NULL);
	assert_false(a.flags & DNS_F_TC);
	/* the additional section goes first when the answer does not fit */
	size_t full = ask(&(struct q){ "example.com", DNS_T_NS, .edns = -1 }, DNS_MSG_MAX, &a, NULL);
	assert_int_equal(a.ar, 3);
	size_t cut = ask(&(struct q){ "example.com", DNS_T_NS, .edns = -1 }, full - 1, &a, &c);
	assert_true(cut < full);
	assert_int_equal(a.ar, 0);
	assert_false(a.flags & DNS_F_TC);
	assert_int_equal(c.additional_cut, 1);
}

/* The table's answers are the builder's, byte for byte, for every name and type. */
static void prebuilt_is_built(void **state)
{
	(void)state;
	static const char *const names[] = {
		"example.com", "ns1.example.com", "ns2.example.com", "mail.example.com",
		"www.example.com", "ftp.example.com", "ext.example.com", "dangling.example.com",
		"loop1.example.com", "a.b.c.example.com", "sub.example.com", "big.example.com",
	};
	static const uint16_t types[] = { DNS_T_A, DNS_T_NS, DNS_T_CNAME, DNS_T_SOA, DNS_T_MX,
					  DNS_T_TXT, DNS_T_AAAA, DNS_T_ANY };
	static uint8_t out[DNS_MSG_MAX];
	unsigned seen = 0;

	for (size_t i = 0; i < FP_ARRAY_SIZE(names); i++) {
		uint8_t w[DNS_NAME_MAX], wl;
		assert_int_equal(dns_name_parse(names[i], strlen(names[i]), (const uint8_t *)"", 1,
						w, &wl), 0);
		for (size_t t = 0; t < FP_ARRAY_SIZE(types); t++) {
			size_t plen, blen;
			const uint8_t *pre = dns_db_prebuilt(db, w, wl, types[t], &plen);
			if (!pre)
				continue;
			blen = dns_db_build(db, w, w, wl, types[t], out, sizeof(out));
			assert_int_equal(plen, blen);
			assert_memory_equal(pre, out, blen);
			seen++;
		}
	}
	assert_true(seen >= 25);
}

/* Compression makes the apex's NS answer smaller than its names written out. */
static void compression(void **state)
{
	(void)state;
	struct ans a;
	size_t n = ask(&(struct q){ "example.com", DNS_T_NS, .edns = -1 }, 0, &a, NULL);

	assert_int_equal(a.an, 2);
	assert_int_equal(a.ar, 3);
	/* uncompressed: 12 + 17 + 2 * (13 + 10 + 17) + 3 * (17 + 10) + 16 + 4 + 4 = 214 */
	assert_true(n < 150);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(zone_parses),
		cmocka_unit_test(zone_errors),
		cmocka_unit_test(query_errors),
		cmocka_unit_test(answers),
		cmocka_unit_test(truncation),
		cmocka_unit_test(prebuilt_is_built),
		cmocka_unit_test(compression),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
