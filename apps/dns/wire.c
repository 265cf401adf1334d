/* wire.c: DNS wire format: the query parser, names, and a message builder that compresses (RFC 1035 §4). */
#include <stdio.h>
#include <string.h>

#include "dns.h"

#define DNS_PTR_HOPS 16u

static inline uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint8_t lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c | 0x20) : c;
}

/*
 * A name is labels (a length byte of 0..63, then the bytes) ended by the root (0), or by a
 * pointer (two bytes, top bits 11) to where the rest is (§4.1.4). Pointers must point
 * strictly backwards, and at most DNS_PTR_HOPS are followed, so a loop of pointers ends;
 * the uncompressed name may not pass 255 bytes. Label types 01 and 10 (RFC 6891 §5) are
 * malformed here.
 */
size_t dns_name_read(const uint8_t *p, size_t len, size_t off, uint8_t *out, uint8_t *raw,
		     uint8_t *out_len)
{
	size_t n = 0, used = 0, pos = off, limit = off;   /* limit: pointers go below it */
	unsigned hops = 0;

	for (;;) {
		if (pos >= len)
			return 0;
		uint8_t l = p[pos];
		if ((l & 0xc0) == 0xc0) {
			if (pos + 1 >= len || ++hops > DNS_PTR_HOPS)
				return 0;
			size_t to = (size_t)(l & 0x3f) << 8 | p[pos + 1];
			if (!used)
				used = pos + 2 - off;
			if (to >= limit)
				return 0;
			limit = pos = to;
			continue;
		}
		if (l & 0xc0)
			return 0;
		if (n + 1u + l > DNS_NAME_MAX || pos + 1u + l > len)
			return 0;
		out[n] = l;
		if (raw)
			raw[n] = l;
		n++;
		for (unsigned i = 1; i <= l; i++, n++) {
			out[n] = lower(p[pos + i]);
			if (raw)
				raw[n] = p[pos + i];
		}
		pos += 1u + l;
		if (!l)
			break;
	}
	if (!used)
		used = pos - off;
	*out_len = (uint8_t)n;
	return used;
}

bool dns_name_eq(const uint8_t *a, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (lower(a[i]) != lower(b[i]))
			return false;
	return true;
}

bool dns_name_below(const uint8_t *name, size_t len, const uint8_t *zone, size_t zlen)
{
	size_t i = 0;

	if (len < zlen)
		return false;
	/* walk the labels of @name until the rest is as long as @zone: a label boundary */
	while (len - i > zlen)
		i += 1u + name[i];
	return len - i == zlen && !memcmp(name + i, zone, zlen);
}

void dns_name_text(const uint8_t *name, size_t len, char *out, size_t cap)
{
	size_t o = 0, i = 0;

	if (!cap)
		return;
	if (len <= 1) {
		snprintf(out, cap, ".");
		return;
	}
	while (i < len && name[i] && o + 1 < cap) {
		uint8_t l = name[i++];
		for (unsigned k = 0; k < l && i < len && o + 5 < cap; k++, i++) {
			uint8_t c = name[i];
			if (c == '.' || c == '\\' || c == '"' || c == ';' || c == '(' || c == ')')
				o += (size_t)snprintf(out + o, cap - o, "\\%c", c);
			else if (c <= ' ' || c >= 0x7f)
				o += (size_t)snprintf(out + o, cap - o, "\\%03u", c);
			else
				out[o++] = (char)c;
		}
		if (o + 1 < cap)
			out[o++] = '.';
	}
	out[o] = '\0';
}

/* ---- the query ---- */

/* Skip one resource record at @off (§4.1.3): its type, class, TTL and RDATA's bounds. */
static size_t rr_skip(const uint8_t *p, size_t len, size_t off, uint8_t *owner, uint8_t *olen,
		      uint16_t *type, uint16_t *class, uint32_t *ttl)
{
	size_t n = dns_name_read(p, len, off, owner, NULL, olen);

	if (!n || off + n + 10 > len)
		return 0;
	off += n;
	*type = rd16(p + off);
	*class = rd16(p + off + 2);
	*ttl = (uint32_t)rd16(p + off + 4) << 16 | rd16(p + off + 6);
	uint16_t rdlen = rd16(p + off + 8);
	if (off + 10 + rdlen > len)
		return 0;
	return n + 10u + rdlen;
}

/* The additional section: at most one OPT, owned by the root (RFC 6891 §6.1.1). Other
 * records (TSIG, which we do not verify) are skipped. */
static int parse_additional(const uint8_t *p, size_t len, size_t off, unsigned count,
			    struct dns_query *q)
{
	uint8_t owner[DNS_NAME_MAX], olen;

	for (unsigned i = 0; i < count; i++) {
		uint16_t type, class;
		uint32_t ttl;
		size_t n = rr_skip(p, len, off, owner, &olen, &type, &class, &ttl);

		if (!n)
			return DNS_R_FORMERR;
		off += n;
		if (type != DNS_T_OPT)
			continue;
		if (q->edns || olen != 1)
			return DNS_R_FORMERR;
		q->edns = true;
		q->edns_size = class < DNS_UDP_MIN ? DNS_UDP_MIN : class;
		q->edns_version = (uint8_t)(ttl >> 16);
		q->edns_do = ttl & DNS_EDNS_DO;
	}
	return q->edns && q->edns_version ? DNS_R_BADVERS : 0;
}

/*
 * RFC 1035 §4.1: a header, exactly one question, no answer or authority records, and an
 * additional section that may hold an OPT. What is wrong is answered, never guessed at:
 * FORMERR for a malformed message, NOTIMP for an opcode other than QUERY, BADVERS for an
 * EDNS version other than 0. The question is kept whenever it parsed, so that even an
 * error answer carries it.
 */
int dns_query_parse(const uint8_t *p, size_t len, struct dns_query *q)
{
	size_t off = DNS_HDR_LEN, n;

	q->has_question = q->edns = q->edns_do = false;
	q->edns_version = 0;
	q->edns_size = DNS_UDP_MIN;
	if (len < DNS_HDR_LEN)
		return -1;
	q->id = rd16(p);
	q->flags = rd16(p + 2);
	if (q->flags & DNS_F_QR)
		return -1;
	unsigned qd = rd16(p + 4), an = rd16(p + 6), ns = rd16(p + 8), ar = rd16(p + 10);

	if (qd >= 1) {
		n = dns_name_read(p, len, off, q->name, q->raw, &q->name_len);
		if (n && off + n + 4 <= len) {
			off += n;
			q->qtype = rd16(p + off);
			q->qclass = rd16(p + off + 2);
			off += 4;
			q->has_question = true;
		}
	}
	if (q->flags & DNS_F_OPCODE)
		return DNS_R_NOTIMP;
	if (qd != 1 || an || ns || !q->has_question)
		return DNS_R_FORMERR;
	return parse_additional(p, len, off, ar, q);
}

/* ---- building ---- */

void dns_msg_init(struct dns_msg *m, uint8_t *buf, size_t cap)
{
	m->buf = buf;
	m->cap = cap;
	m->len = 0;
	m->overflow = false;
	m->n_ptrs = 0;
}

void dns_msg_bytes(struct dns_msg *m, const void *p, size_t n)
{
	if (m->overflow || m->len + n > m->cap) {
		m->overflow = true;
		return;
	}
	memcpy(m->buf + m->len, p, n);
	m->len += n;
}

void dns_msg_u16(struct dns_msg *m, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v };

	dns_msg_bytes(m, b, 2);
}

void dns_msg_u32(struct dns_msg *m, uint32_t v)
{
	dns_msg_u16(m, (uint16_t)(v >> 16));
	dns_msg_u16(m, (uint16_t)v);
}

void dns_msg_put16(struct dns_msg *m, size_t off, uint16_t v)
{
	if (off + 2 <= m->len) {
		m->buf[off] = (uint8_t)(v >> 8);
		m->buf[off + 1] = (uint8_t)v;
	}
}

/* Does the name at @off in the message (pointers followed; written by us, so well
 * formed) equal @s/@slen, case ignored? */
static bool msg_name_is(const struct dns_msg *m, size_t off, const uint8_t *s, size_t slen)
{
	size_t i = 0;

	for (unsigned hops = 0; hops <= DNS_PTR_HOPS && off < m->len;) {
		uint8_t l = m->buf[off];
		if ((l & 0xc0) == 0xc0) {
			if (off + 1 >= m->len)
				return false;
			off = (size_t)(l & 0x3f) << 8 | m->buf[off + 1];
			hops++;
			continue;
		}
		if (i + 1u + l > slen || off + 1u + l > m->len || s[i] != l ||
		    !dns_name_eq(m->buf + off + 1, s + i + 1, l))
			return false;
		i += 1u + l;
		off += 1u + l;
		if (!l)
			return i == slen;
	}
	return false;
}

/*
 * Write @name with the longest suffix already in the message replaced by a pointer.
 * Offsets of what is written uncompressed are remembered (below 0x4000, a pointer's
 * reach), up to DNS_MSG_PTRS; past that, names are still correct, just longer.
 */
void dns_msg_name(struct dns_msg *m, const uint8_t *name, size_t len)
{
	size_t i = 0;

	while (i < len && name[i]) {
		for (unsigned k = 0; k < m->n_ptrs; k++) {
			if (msg_name_is(m, m->ptrs[k], name + i, len - i)) {
				dns_msg_bytes(m, name, i);
				dns_msg_u16(m, (uint16_t)(0xc000u | m->ptrs[k]));
				return;
			}
		}
		i += 1u + name[i];
	}
	/* nothing to point at: remember where each label of it starts */
	for (i = 0; i < len && name[i]; i += 1u + name[i])
		if (m->len + i < 0x4000 && m->n_ptrs < DNS_MSG_PTRS)
			m->ptrs[m->n_ptrs++] = (uint16_t)(m->len + i);
	dns_msg_bytes(m, name, len);
}

size_t dns_error_reply(const struct dns_query *q, int rcode, uint8_t *out, size_t cap,
		       uint16_t edns_max)
{
	struct dns_msg m;
	uint16_t flags = DNS_F_QR | (q->flags & (DNS_F_OPCODE | DNS_F_RD)) |
			 (uint16_t)(rcode & 0xf);
	bool question = q->has_question;

	dns_msg_init(&m, out, cap);
	dns_msg_u16(&m, q->id);
	dns_msg_u16(&m, flags);
	dns_msg_u16(&m, question);
	dns_msg_u32(&m, 0);
	dns_msg_u16(&m, q->edns);
	if (question) {
		dns_msg_bytes(&m, q->raw, q->name_len);
		dns_msg_u16(&m, q->qtype);
		dns_msg_u16(&m, q->qclass);
	}
	if (q->edns) {   /* RFC 6891 §7: an OPT in the answer to a query that had one */
		dns_msg_bytes(&m, "", 1);
		dns_msg_u16(&m, DNS_T_OPT);
		dns_msg_u16(&m, edns_max);
		dns_msg_u32(&m, (uint32_t)(rcode >> 4) << 24 | (q->edns_do ? DNS_EDNS_DO : 0));
		dns_msg_u16(&m, 0);
	}
	return m.overflow ? 0 : m.len;
}
