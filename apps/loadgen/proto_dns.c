/* proto_dns.c: DNS queries over UDP (RFC 1035), from a dnsperf-style query file. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdbool.h>

#include "lg.h"

/*
 * The queries are read at start from --queries FILE, one "NAME TYPE" per line (dnsperf's
 * format: blank lines and lines starting with ';' or '#' are skipped; the name is made
 * absolute), and each is kept in wire form. A request is one of them, drawn uniformly:
 * a 12-byte header (a random ID, RD off: an authoritative server's client; one question)
 * and the question. Over UDP one datagram is one response: it belongs to the request
 * whose ID it carries and whose question it repeats; its RCODE says how it went
 * (NOERROR: ok, NODATA included; NXDOMAIN: a miss; anything else, or TC: an error).
 */

struct dns_query {
	uint32_t off;                /* the question's wire form: wire[off, off + len) */
	uint16_t len;
};

struct lg_proto {
	struct dns_query *q;
	size_t n;
	uint8_t *wire;
	size_t wire_len, wire_cap, max_len;
	char file[160];
};

static const struct { const char *name; uint16_t type; } dns_types[] = {
	{ "A", 1 }, { "NS", 2 }, { "CNAME", 5 }, { "SOA", 6 }, { "MX", 15 }, { "TXT", 16 },
	{ "AAAA", 28 }, { "ANY", 255 },
};

/* @name (dotted, absolute or not) in wire form at @out (room LG_DNS_NAME_MAX); its
 * length, or 0 when it is not a valid name (an empty label, a label over 63, over 255 in
 * all). */
static size_t dns_name_wire(const char *name, uint8_t *out)
{
	size_t o = 0;

	if (!strcmp(name, "."))
		name = "";
	while (*name) {
		const char *dot = strchr(name, '.');
		size_t k = dot ? (size_t)(dot - name) : strlen(name);
		if (k == 0 || k > 63 || o + 1 + k + 1 > LG_DNS_NAME_MAX)
			return 0;
		out[o++] = (uint8_t)k;
		memcpy(out + o, name, k);
		o += k;
		name += k + (dot ? 1 : 0);
		if (dot && !*name)
			break;               /* the trailing dot of an absolute name */
	}
	out[o++] = 0;
	return o;
}

int lg_dns_question(const char *name, const char *type, uint8_t *out, size_t *len)
{
	size_t n = dns_name_wire(name, out);
	int t = -1;

	for (size_t i = 0; i < sizeof(dns_types) / sizeof(dns_types[0]); i++)
		if (!strcasecmp(type, dns_types[i].name))
			t = dns_types[i].type;
	if (!n || t < 0)
		return -EINVAL;
	out[n] = (uint8_t)(t >> 8);
	out[n + 1] = (uint8_t)t;
	out[n + 2] = 0;
	out[n + 3] = 1;                      /* class IN */
	*len = n + 4;
	return 0;
}

static void dns_destroy(struct lg_proto *p)
{
	if (!p)
		return;
	free(p->q);
	free(p->wire);
	free(p);
}

static int dns_add(struct lg_proto *p, const uint8_t *q, size_t len)
{
	if (p->n % 1024 == 0) {
		struct dns_query *v = realloc(p->q, (p->n + 1024) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		p->q = v;
	}
	if (p->wire_len + len > p->wire_cap) {
		size_t cap = p->wire_cap ? p->wire_cap * 2 : 4096;
		uint8_t *w = cap <= UINT32_MAX ? realloc(p->wire, cap) : NULL;
		if (!w)
			return -ENOMEM;
		p->wire = w;
		p->wire_cap = cap;
	}
	memcpy(p->wire + p->wire_len, q, len);
	p->q[p->n].off = (uint32_t)p->wire_len;
	p->q[p->n].len = (uint16_t)len;
	p->n++;
	p->wire_len += len;
	if (len > p->max_len)
		p->max_len = len;
	return 0;
}

static struct lg_proto *dns_create(const struct lg_proto_config *cfg, char *err, size_t errlen)
{
	struct lg_proto *p;
	char line[1024];
	unsigned lineno = 0;
	FILE *f;

	if (!cfg->queries) {
		snprintf(err, errlen, "dns: --queries FILE is required (lines of \"NAME TYPE\", "
			 "as dnsperf reads)");
		return NULL;
	}
	if (!(f = fopen(cfg->queries, "r"))) {
		snprintf(err, errlen, "dns: --queries %s: %s", cfg->queries, strerror(errno));
		return NULL;
	}
	if (!(p = calloc(1, sizeof(*p)))) {
		fclose(f);
		snprintf(err, errlen, "dns: out of memory");
		return NULL;
	}
	snprintf(p->file, sizeof(p->file), "%s", cfg->queries);
	while (fgets(line, sizeof(line), f)) {
		char name[512], type[32], extra[2];
		uint8_t q[LG_DNS_NAME_MAX + 4];
		size_t len;
		int k;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "dns: %s:%u: line too long", cfg->queries, lineno);
			goto fail;
		}
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (!*s || *s == ';' || *s == '#')
			continue;
		k = sscanf(s, "%511s %31s %1s", name, type, extra);
		if (k != 2 || lg_dns_question(name, type, q, &len)) {
			snprintf(err, errlen, "dns: %s:%u: want \"NAME TYPE\" (TYPE one of A, AAAA, "
				 "NS, MX, CNAME, TXT, SOA, ANY)", cfg->queries, lineno);
			goto fail;
		}
		if (dns_add(p, q, len)) {
			snprintf(err, errlen, "dns: out of memory reading %s", cfg->queries);
			goto fail;
		}
	}
	if (ferror(f) || !p->n) {
		snprintf(err, errlen, "dns: %s: %s", cfg->queries,
			 ferror(f) ? "read error" : "no queries in it");
		goto fail;
	}
	fclose(f);
	return p;
fail:
	fclose(f);
	dns_destroy(p);
	return NULL;
}

static size_t dns_encode(const struct lg_proto *p, struct lg_rng *r, uint8_t *buf, size_t cap,
			 struct lg_req *req)
{
	uint32_t i = (uint32_t)lg_rng_below(r, p->n);
	const struct dns_query *q = &p->q[i];
	uint16_t id = (uint16_t)lg_rng_next(r);

	if (cap < LG_DNS_HDR + q->len)
		return 0;
	memset(buf, 0, LG_DNS_HDR);
	buf[0] = (uint8_t)(id >> 8);
	buf[1] = (uint8_t)id;
	buf[5] = 1;                          /* QDCOUNT 1; opcode QUERY, RD off */
	memcpy(buf + LG_DNS_HDR, p->wire + q->off, q->len);
	req->op = LG_OP_GET;
	req->aux = id;
	req->len = i;
	return LG_DNS_HDR + q->len;
}

static size_t dns_encode_preload(const struct lg_proto *p, uint64_t i, struct lg_rng *r,
				 uint8_t *buf, size_t cap, struct lg_req *req)
{
	(void)p, (void)i, (void)r, (void)buf, (void)cap, (void)req;
	return 0;
}

/* Wire names equal but for the case of ASCII letters (RFC 4343). */
static bool dns_name_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t x = a[i], y = b[i];
		if (x >= 'A' && x <= 'Z')
			x |= 0x20;
		if (y >= 'A' && y <= 'Z')
			y |= 0x20;
		if (x != y)
			return false;
	}
	return true;
}

int lg_dns_match(const uint8_t *data, size_t len, uint16_t id, const uint8_t *q, size_t qlen,
		 enum lg_status *status)
{
	if (len < LG_DNS_HDR || (uint16_t)(data[0] << 8 | data[1]) != id || !(data[2] & 0x80))
		return -EBADMSG;             /* not a response, or another request's */
	/* the question comes back (RFC 1035 §4.1.2), names compared without case */
	if (data[4] != 0 || data[5] != 1 || len < LG_DNS_HDR + qlen ||
	    !dns_name_eq(data + LG_DNS_HDR, q, qlen - 4) ||
	    memcmp(data + LG_DNS_HDR + qlen - 4, q + qlen - 4, 4))
		return -EBADMSG;
	unsigned rcode = data[3] & 0x0f;
	*status = (data[2] & 0x02) || (rcode != 0 && rcode != 3) ? LG_RESP_ERROR
		  : rcode == 3 ? LG_RESP_MISS : LG_RESP_OK;
	return 0;
}

static long dns_parse(const struct lg_proto *p, const struct lg_req *req, const uint8_t *data,
		      size_t len, enum lg_status *status)
{
	if (req->len >= p->n)
		return -EBADMSG;
	const struct dns_query *q = &p->q[req->len];
	if (lg_dns_match(data, len, req->aux, p->wire + q->off, q->len, status))
		return -EBADMSG;
	return (long)len;                    /* a datagram is one response */
}

static size_t dns_max_request(const struct lg_proto *p) { return LG_DNS_HDR + p->max_len; }

static void dns_describe(const struct lg_proto *p, char *buf, size_t len)
{
	snprintf(buf, len, "dns: %zu queries from %s, drawn uniformly, over UDP", p->n, p->file);
}

const struct lg_proto_ops lg_proto_dns = {
	.name = "dns",
	.datagram = true,
	.create = dns_create,
	.destroy = dns_destroy,
	.encode = dns_encode,
	.encode_preload = dns_encode_preload,
	.parse = dns_parse,
	.max_request = dns_max_request,
	.describe = dns_describe,
};
