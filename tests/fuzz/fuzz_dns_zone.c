/* fuzz_dns_zone.c: any text as an fp-dns zone file (apps/dns/zone.c); a zone that loads answers every name it holds. */
#include <stdlib.h>
#include <string.h>

#include "dns.h"

/*
 * The parser either refuses the text with a message or gives a zone whose answers are all
 * built (dns_db_create builds every pre-built one). Then each owner is asked for A and
 * ANY through the query path, as a client would.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[DNS_MSG_MAX], q[DNS_HDR_LEN + DNS_NAME_MAX + 4];
	struct dns_counters c = { 0 };
	struct dns_zone z;
	struct dns_db *db;
	char err[256];

	if (size > 1 << 16)
		return 0;
	if (dns_zone_parse(&z, (const char *)data, size, "fuzz.example", "fuzz", err, sizeof(err))) {
		if (!err[0] || !memchr(err, '\0', sizeof(err)))
			abort();
		return 0;
	}
	size_t n_rr = z.n_rr;
	struct dns_rr *rr = malloc(n_rr * sizeof(*rr));
	uint8_t *arena = malloc(z.arena_len + 1);
	if (!rr || !arena)
		abort();
	memcpy(rr, z.rr, n_rr * sizeof(*rr));
	memcpy(arena, z.arena, z.arena_len);
	if (!(db = dns_db_create(&z, 1232, err, sizeof(err)))) {
		free(rr);
		free(arena);
		return 0;              /* an answer over 64 KB: refused with a message */
	}
	for (size_t i = 0; i < n_rr; i++) {
		static const uint16_t types[] = { DNS_T_A, DNS_T_ANY, DNS_T_MX };
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
			size_t len = DNS_HDR_LEN;
			memset(q, 0, DNS_HDR_LEN);
			q[5] = 1;
			memcpy(q + len, arena + rr[i].owner, rr[i].owner_len);
			len += rr[i].owner_len;
			q[len++] = 0;
			q[len++] = (uint8_t)types[t];
			q[len++] = 0;
			q[len++] = 1;
			size_t n = dns_reply(db, q, len, out, 0, &c);
			if (!n || n > 512 || (out[3] & 0xf) == DNS_R_FORMERR ||
			    (out[3] & 0xf) == DNS_R_REFUSED)
				abort();
		}
	}
	free(rr);
	free(arena);
	dns_db_destroy(db);
	return 0;
}
