/* fuzz_dns_query.c: any datagram into fp-dns's reply path (apps/dns): the answer, when there is one, is well formed and fits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dns.h"

/*
 * A zone with every kind of answer (CNAME chains in and out, a loop, a delegation with
 * glue, an empty non-terminal, a large TXT). Each input is asked as a UDP query and as a
 * TCP one. The answer must decode record by record to exactly its length, carry the
 * query's ID, and fit the transport: 512 bytes without EDNS0, the server's EDNS size with.
 */
static const char zone[] =
	"$ORIGIN example.com.\n$TTL 3600\n"
	"@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\n@ NS ns2.example.com.\n"
	"@ MX 10 mail\n@ A 192.0.2.1\n@ AAAA 2001:db8::1\n@ TXT \"v=spf1 -all\"\n"
	"ns1 A 192.0.2.53\nns2 A 192.0.2.54\nns2 AAAA 2001:db8::54\nmail A 192.0.2.25\n"
	"www CNAME @\nftp CNAME www\next CNAME www.example.org.\nl1 CNAME l2\nl2 CNAME l1\n"
	"a.b.c A 192.0.2.99\nsub NS ns.sub\nns.sub A 192.0.2.200\n"
	"big TXT \"" "%s" "\" \"%s\" \"%s\"\n";

static struct dns_db *db;

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void check_answer(const uint8_t *q, size_t qlen, const uint8_t *a, size_t len,
			 size_t limit)
{
	uint8_t name[DNS_NAME_MAX], nl;
	size_t off = DNS_HDR_LEN;

	if (len < DNS_HDR_LEN || len > limit || rd16(a) != rd16(q) || !(a[2] & 0x80))
		abort();
	(void)qlen;
	unsigned qd = rd16(a + 4), rrs = (unsigned)rd16(a + 6) + rd16(a + 8) + rd16(a + 10);
	if (qd > 1)
		abort();
	if (qd) {
		size_t n = dns_name_read(a, len, off, name, NULL, &nl);
		if (!n || off + n + 4 > len)
			abort();
		off += n + 4;
	}
	for (unsigned i = 0; i < rrs; i++) {
		size_t n = dns_name_read(a, len, off, name, NULL, &nl);
		if (!n || off + n + 10 > len)
			abort();
		off += n + 10;
		off += rd16(a + off - 2);
		if (off > len)
			abort();
	}
	if (off != len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[DNS_MSG_MAX];
	struct dns_counters c = { 0 };

	if (!db) {
		static char text[4096], s[256];
		struct dns_zone z;
		char err[256];
		memset(s, 'x', 250);
		snprintf(text, sizeof(text), zone, s, s, s);
		if (dns_zone_parse(&z, text, strlen(text), NULL, "fuzz", err, sizeof(err)) ||
		    !(db = dns_db_create(&z, 1232, err, sizeof(err))))
			abort();
	}
	if (size > DNS_MSG_MAX)
		return 0;
	size_t n = dns_reply(db, data, size, out, 0, &c);
	if (n) {
		struct dns_query q;
		bool edns = dns_query_parse(data, size, &q) >= 0 && q.edns;
		check_answer(data, size, out, n, edns ? 1232 : 512);
	}
	n = dns_reply(db, data, size, out, DNS_MSG_MAX, &c);
	if (n)
		check_answer(data, size, out, n, DNS_MSG_MAX);
	return 0;
}
