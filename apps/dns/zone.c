/* zone.c: the RFC 1035 §5 master file, parsed into records in wire format, and checked as a zone. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dns.h"

/*
 * The file is read in entries: a line, or several joined by parentheses. An entry is
 * tokens (quoted strings are one token; ';' starts a comment), and whether the line began
 * with a blank, which means "the owner of the previous record" (§5.1). The tokens are then
 * a directive ($ORIGIN, $TTL; $INCLUDE is refused: a zone is one file here) or
 * [owner] [TTL] [class] type RDATA, TTL and class in either order.
 */

#define ZONE_MAX_TOKENS 512u
#define ZONE_MAX_ARENA  (1u << 31)

struct tok {
	const char *s;
	size_t len;
	bool quoted;
};

struct lexer {
	const char *p, *end;
	unsigned line;
};

struct parser {
	struct dns_zone *z;
	struct lexer lx;
	const char *fname;
	char *err;
	size_t errlen;
	unsigned line;               /* of the entry being read */
	uint8_t origin[DNS_NAME_MAX], origin_len;   /* 0: none yet */
	uint8_t owner[DNS_NAME_MAX], owner_len;     /* the previous record's */
	uint32_t default_ttl;
	bool have_ttl;               /* default_ttl holds one */
	bool ttl_directive;          /* ... from $TTL (RFC 2308), not the last one stated */
	struct tok *t;               /* ZONE_MAX_TOKENS */
	uint8_t *rd;                 /* DNS_MSG_MAX: the RDATA being built */
};

static int fail(struct parser *ps, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(ps->err, ps->errlen, "%s:%u: ", ps->fname, ps->line);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < ps->errlen)
		vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* One entry into @t. 1: read (*n may be 0 only at the end), 0: end of file, -1: error. */
static int lex_entry(struct parser *ps, struct tok *t, unsigned *n, bool *blank_start)
{
	struct lexer *lx = &ps->lx;
	int paren = 0;
	bool line_start = true;

	*n = 0;
	*blank_start = false;
	ps->line = lx->line;
	while (lx->p < lx->end) {
		char c = *lx->p;

		if (c == '\n') {
			lx->line++;
			lx->p++;
			if (paren)
				continue;
			if (*n)
				return 1;
			line_start = true;       /* an empty or comment line: start again */
			*blank_start = false;
			ps->line = lx->line;
			continue;
		}
		if (is_blank(c)) {
			if (line_start && !*n && !paren)
				*blank_start = true;
			line_start = false;
			lx->p++;
			continue;
		}
		line_start = false;
		if (c == ';') {
			while (lx->p < lx->end && *lx->p != '\n')
				lx->p++;
			continue;
		}
		if (c == '(' || c == ')') {
			if (c == ')' && !paren)
				return fail(ps, "')' without '('");
			paren += c == '(' ? 1 : -1;
			lx->p++;
			continue;
		}
		if (*n == ZONE_MAX_TOKENS)
			return fail(ps, "more than %u fields in one record", ZONE_MAX_TOKENS);
		struct tok *k = &t[(*n)++];
		k->quoted = c == '"';
		if (k->quoted) {
			k->s = ++lx->p;
			while (lx->p < lx->end && *lx->p != '"' && *lx->p != '\n')
				lx->p += *lx->p == '\\' && lx->p + 1 < lx->end ? 2 : 1;
			if (lx->p >= lx->end || *lx->p != '"')
				return fail(ps, "a quoted string does not end on its line");
			k->len = (size_t)(lx->p++ - k->s);
			continue;
		}
		k->s = lx->p;
		while (lx->p < lx->end && !is_blank(*lx->p) && *lx->p != '\n' &&
		       !strchr(";()\"", *lx->p))
			lx->p += *lx->p == '\\' && lx->p + 1 < lx->end && lx->p[1] != '\n' ? 2 : 1;
		k->len = (size_t)(lx->p - k->s);
	}
	if (paren)
		return fail(ps, "'(' never closed");
	return *n ? 1 : 0;
}

/* \X is X, \DDD the byte DDD (§5.1). Returns the length written, or -1. */
static int unescape(const char *s, size_t len, uint8_t *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned b = (unsigned char)s[i];
		if (b == '\\') {
			if (++i >= len)
				return -1;
			b = (unsigned char)s[i];
			if (b >= '0' && b <= '9') {
				if (i + 2 >= len || s[i + 1] < '0' || s[i + 1] > '9' ||
				    s[i + 2] < '0' || s[i + 2] > '9')
					return -1;
				b = (b - '0') * 100 + (unsigned)(s[i + 1] - '0') * 10 +
				    (unsigned)(s[i + 2] - '0');
				i += 2;
				if (b > 255)
					return -1;
			}
		}
		if (o == cap)
			return -1;
		out[o++] = (uint8_t)b;
	}
	return (int)o;
}

/* A text name, relative to @origin unless it ends in an unescaped dot; "@" is @origin. */
int dns_name_parse(const char *text, size_t len, const uint8_t *origin, size_t olen,
		   uint8_t *out, uint8_t *out_len)
{
	size_t pos = 1, lstart = 0;
	unsigned llen = 0;
	bool absolute = false;

	if (len == 1 && text[0] == '@') {
		if (!olen)
			return -1;
		memcpy(out, origin, olen);
		*out_len = (uint8_t)olen;
		return 0;
	}
	if (len == 1 && text[0] == '.') {
		out[0] = 0;
		*out_len = 1;
		return 0;
	}
	if (!len)
		return -1;
	for (size_t i = 0; i < len; i++) {
		uint8_t b = (uint8_t)text[i];
		if (b == '.') {
			if (!llen)
				return -1;           /* an empty label: "a..b" or ".a" */
			out[lstart] = (uint8_t)llen;
			if (i == len - 1) {
				absolute = true;
				break;
			}
			lstart = pos++;
			llen = 0;
			continue;
		}
		if (b == '\\') {
			size_t e = i + 1 < len && text[i + 1] >= '0' && text[i + 1] <= '9' ? 4 : 2;
			int n;
			if (i + e > len || (n = unescape(text + i, e, &b, 1)) != 1)
				return -1;
			i += e - 1;
		}
		if (llen == DNS_LABEL_MAX || pos >= DNS_NAME_MAX)
			return -1;
		out[pos++] = b >= 'A' && b <= 'Z' ? (uint8_t)(b | 0x20) : b;
		llen++;
	}
	if (absolute) {
		if (pos >= DNS_NAME_MAX + 0u)
			return -1;
		out[pos++] = 0;
	} else {
		if (!olen || pos + olen > DNS_NAME_MAX)
			return -1;
		out[lstart] = (uint8_t)llen;
		memcpy(out + pos, origin, olen);
		pos += olen;
	}
	*out_len = (uint8_t)pos;
	return 0;
}

static int name_tok(struct parser *ps, const struct tok *t, uint8_t *out, uint8_t *out_len)
{
	if (t->quoted)
		return fail(ps, "a name cannot be a quoted string");
	if (!dns_name_parse(t->s, t->len, ps->origin, ps->origin_len, out, out_len))
		return 0;
	if (!ps->origin_len && !(t->len && t->s[t->len - 1] == '.' && !(t->len > 1 &&
	    t->s[t->len - 2] == '\\')))
		return fail(ps, "'%.*s' is relative and there is no origin: give $ORIGIN, "
			    "or fp-dns --origin", (int)t->len, t->s);
	return fail(ps, "'%.*s' is not a domain name (labels of 1-63 bytes, 255 in all)",
		    (int)(t->len > 80 ? 80 : t->len), t->s);
}

/* A TTL: seconds, or units as BIND writes them (1h30m, 2W); at most 2^31 - 1 (RFC 2181 §8). */
static int parse_ttl(const struct tok *t, uint32_t *ttl)
{
	uint64_t total = 0, v = 0;
	bool digits = false;

	if (t->quoted || !t->len)
		return -1;
	for (size_t i = 0; i < t->len; i++) {
		char c = t->s[i];
		if (c >= '0' && c <= '9') {
			v = v * 10 + (uint64_t)(c - '0');
			digits = true;
			if (v > 0x7fffffffu)
				return -1;
			continue;
		}
		if (!digits)
			return -1;
		switch (c | 0x20) {
		case 's': break;
		case 'm': v *= 60; break;
		case 'h': v *= 3600; break;
		case 'd': v *= 86400; break;
		case 'w': v *= 604800; break;
		default: return -1;
		}
		total += v;
		v = 0;
		digits = false;
		if (total > 0x7fffffffu)
			return -1;
	}
	total += v;
	if (total > 0x7fffffffu)
		return -1;
	*ttl = (uint32_t)total;
	return 0;
}

static int parse_u32(const struct tok *t, uint64_t max, uint32_t *out)
{
	uint64_t v = 0;

	if (t->quoted || !t->len || t->len > 10)
		return -1;
	for (size_t i = 0; i < t->len; i++) {
		if (t->s[i] < '0' || t->s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(t->s[i] - '0');
	}
	if (v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static bool tok_is(const struct tok *t, const char *word)
{
	return !t->quoted && t->len == strlen(word) && !strncasecmp(t->s, word, t->len);
}

/* ---- the arena and the record array ---- */

static int arena_add(struct parser *ps, const void *p, size_t n, uint32_t *off)
{
	struct dns_zone *z = ps->z;

	if (z->arena_len + n > z->arena_cap) {
		size_t cap = z->arena_cap ? z->arena_cap : 4096;
		while (cap < z->arena_len + n)
			cap *= 2;
		if (cap > ZONE_MAX_ARENA)
			return fail(ps, "the zone is too large (over 2 GB of records)");
		uint8_t *a = realloc(z->arena, cap);
		if (!a)
			return fail(ps, "out of memory");
		z->arena = a;
		z->arena_cap = cap;
	}
	memcpy(z->arena + z->arena_len, p, n);
	*off = (uint32_t)z->arena_len;
	z->arena_len += n;
	return 0;
}

static int rr_add(struct parser *ps, uint16_t type, uint32_t ttl, const uint8_t *rdata,
		  size_t rdlen)
{
	struct dns_zone *z = ps->z;
	struct dns_rr r = { .ttl = ttl, .line = ps->line, .type = type, .rdlen = (uint16_t)rdlen,
			    .owner_len = ps->owner_len };

	if (z->n_rr == z->cap_rr) {
		size_t cap = z->cap_rr ? z->cap_rr * 2 : 256;
		struct dns_rr *a = realloc(z->rr, cap * sizeof(*a));
		if (!a)
			return fail(ps, "out of memory");
		z->rr = a;
		z->cap_rr = cap;
	}
	if (arena_add(ps, ps->owner, ps->owner_len, &r.owner) ||
	    arena_add(ps, rdata, rdlen, &r.rdata))
		return -1;
	z->rr[z->n_rr++] = r;
	return 0;
}

/* ---- RDATA (§3.3, RFC 3596) ---- */

static int rdata_name(struct parser *ps, const struct tok *t, uint8_t *out, size_t *n)
{
	uint8_t len;

	if (name_tok(ps, t, out + *n, &len))
		return -1;
	*n += len;
	return 0;
}

static int want(struct parser *ps, unsigned have, unsigned need, const char *type,
		const char *form)
{
	if (have == need)
		return 0;
	return fail(ps, "%s takes %s (%u field%s given)", type, form, have, have == 1 ? "" : "s");
}

static int parse_rdata(struct parser *ps, uint16_t type, const char *tname,
		       const struct tok *t, unsigned n, uint8_t *rd, size_t *rdlen)
{
	char buf[64];
	uint32_t v;

	*rdlen = 0;
	switch (type) {
	case DNS_T_A:
	case DNS_T_AAAA: {
		bool v4 = type == DNS_T_A;
		if (want(ps, n, 1, tname, v4 ? "an IPv4 address" : "an IPv6 address"))
			return -1;
		if (t[0].len >= sizeof(buf) || t[0].quoted)
			return fail(ps, "'%.*s' is not an %s address", 60, t[0].s, v4 ? "IPv4" : "IPv6");
		memcpy(buf, t[0].s, t[0].len);
		buf[t[0].len] = '\0';
		if (inet_pton(v4 ? AF_INET : AF_INET6, buf, rd) != 1)
			return fail(ps, "'%s' is not an %s address", buf, v4 ? "IPv4" : "IPv6");
		*rdlen = v4 ? 4 : 16;
		return 0;
	}
	case DNS_T_NS:
	case DNS_T_CNAME:
		if (want(ps, n, 1, tname, "one domain name"))
			return -1;
		return rdata_name(ps, &t[0], rd, rdlen);
	case DNS_T_MX:
		if (want(ps, n, 2, tname, "a preference and a domain name"))
			return -1;
		if (parse_u32(&t[0], 65535, &v))
			return fail(ps, "MX preference '%.*s' is not 0..65535", (int)t[0].len, t[0].s);
		rd[0] = (uint8_t)(v >> 8);
		rd[1] = (uint8_t)v;
		*rdlen = 2;
		return rdata_name(ps, &t[1], rd, rdlen);
	case DNS_T_TXT:
		if (!n)
			return fail(ps, "TXT takes one or more strings");
		for (unsigned i = 0; i < n; i++) {
			if (*rdlen + 256u > DNS_MSG_MAX - 1024)
				return fail(ps, "TXT record too large (it must fit a message)");
			int l = unescape(t[i].s, t[i].len, rd + *rdlen + 1, 255);
			if (l < 0)
				return fail(ps, "a TXT string is over 255 bytes or has a bad escape");
			rd[*rdlen] = (uint8_t)l;
			*rdlen += 1u + (size_t)l;
		}
		return 0;
	case DNS_T_SOA:
		if (want(ps, n, 7, tname, "MNAME RNAME SERIAL REFRESH RETRY EXPIRE MINIMUM"))
			return -1;
		if (rdata_name(ps, &t[0], rd, rdlen) || rdata_name(ps, &t[1], rd, rdlen))
			return -1;
		for (unsigned i = 2; i < 7; i++) {
			int bad = i == 2 ? parse_u32(&t[i], 0xffffffffu, &v) : parse_ttl(&t[i], &v);
			if (bad)
				return fail(ps, "SOA field '%.*s' is not a number", (int)t[i].len, t[i].s);
			for (int k = 3; k >= 0; k--)
				rd[(*rdlen)++] = (uint8_t)(v >> (8 * k));
		}
		return 0;
	}
	return -1;
}

static const struct {
	const char *name;
	uint16_t type;
} types[] = {
	{ "A", DNS_T_A }, { "NS", DNS_T_NS }, { "CNAME", DNS_T_CNAME }, { "SOA", DNS_T_SOA },
	{ "MX", DNS_T_MX }, { "TXT", DNS_T_TXT }, { "AAAA", DNS_T_AAAA },
};

/* ---- entries ---- */

static int directive(struct parser *ps, const struct tok *t, unsigned n)
{
	if (tok_is(&t[0], "$ORIGIN")) {
		uint8_t o[DNS_NAME_MAX], olen;
		if (n != 2)
			return fail(ps, "$ORIGIN takes one domain name");
		if (name_tok(ps, &t[1], o, &olen))
			return -1;
		memcpy(ps->origin, o, olen);
		ps->origin_len = olen;
		return 0;
	}
	if (tok_is(&t[0], "$TTL")) {
		if (n != 2 || parse_ttl(&t[1], &ps->default_ttl))
			return fail(ps, "$TTL takes one TTL (seconds, or units: 1h, 2d)");
		ps->have_ttl = ps->ttl_directive = true;
		return 0;
	}
	if (tok_is(&t[0], "$INCLUDE"))
		return fail(ps, "$INCLUDE is not supported: put the zone in one file");
	return fail(ps, "unknown directive '%.*s' ($ORIGIN and $TTL are known)",
		    (int)(t[0].len > 40 ? 40 : t[0].len), t[0].s);
}

static int record(struct parser *ps, const struct tok *t, unsigned n, bool blank_start)
{
	uint8_t *rd = ps->rd;
	unsigned i = 0;
	uint32_t ttl = ps->default_ttl;
	bool ttl_given = false, class_given = false;
	size_t rdlen;

	if (!blank_start) {
		if (name_tok(ps, &t[0], ps->owner, &ps->owner_len))
			return -1;
		i = 1;
	} else if (!ps->owner_len) {
		return fail(ps, "a record with no owner (the line starts with a blank) and no "
			    "record before it");
	}
	for (; i < n && (!ttl_given || !class_given); i++) {
		if (!ttl_given && !t[i].quoted && t[i].len && t[i].s[0] >= '0' && t[i].s[0] <= '9') {
			if (parse_ttl(&t[i], &ttl))
				return fail(ps, "'%.*s' is not a TTL", (int)t[i].len, t[i].s);
			ttl_given = true;
		} else if (!class_given && tok_is(&t[i], "IN")) {
			class_given = true;
		} else if (tok_is(&t[i], "CH") || tok_is(&t[i], "HS") || tok_is(&t[i], "CS") ||
			   tok_is(&t[i], "ANY") || tok_is(&t[i], "NONE")) {
			return fail(ps, "class %.*s: only IN is served", (int)t[i].len, t[i].s);
		} else {
			break;
		}
	}
	if (i == n)
		return fail(ps, "a record with no type");
	for (unsigned k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		if (!tok_is(&t[i], types[k].name))
			continue;
		if (!ttl_given && !ps->have_ttl)
			return fail(ps, "no TTL: give one in the record, or $TTL before it");
		if (ttl_given && !ps->ttl_directive) {   /* RFC 1035: the last one stated */
			ps->default_ttl = ttl;
			ps->have_ttl = true;
		}
		if (parse_rdata(ps, types[k].type, types[k].name, t + i + 1, n - i - 1, rd, &rdlen))
			return -1;
		return rr_add(ps, types[k].type, ttl, rd, rdlen);
	}
	return fail(ps, "type '%.*s' is not served (A, AAAA, NS, MX, CNAME, TXT, SOA are)",
		    (int)(t[i].len > 40 ? 40 : t[i].len), t[i].s);
}

/* ---- checks on the whole zone ---- */

static int rr_cmp(const void *a, const void *b, void *arg)
{
	const struct dns_zone *z = arg;
	const struct dns_rr *x = a, *y = b;
	size_t l = x->owner_len < y->owner_len ? x->owner_len : y->owner_len;
	int c = memcmp(z->arena + x->owner, z->arena + y->owner, l);

	if (c || x->owner_len != y->owner_len)
		return c ? c : x->owner_len - y->owner_len;
	if (x->type != y->type)
		return x->type - y->type;
	l = x->rdlen < y->rdlen ? x->rdlen : y->rdlen;
	if ((c = memcmp(z->arena + x->rdata, z->arena + y->rdata, l)) || x->rdlen != y->rdlen)
		return c ? c : x->rdlen - y->rdlen;
	return x->line < y->line ? -1 : x->line > y->line;
}

static bool same_owner(const struct dns_zone *z, const struct dns_rr *a, const struct dns_rr *b)
{
	return a->owner_len == b->owner_len &&
	       !memcmp(z->arena + a->owner, z->arena + b->owner, a->owner_len);
}

static bool same_rr(const struct dns_zone *z, const struct dns_rr *a, const struct dns_rr *b)
{
	return same_owner(z, a, b) && a->type == b->type && a->rdlen == b->rdlen &&
	       !memcmp(z->arena + a->rdata, z->arena + b->rdata, a->rdlen);
}

static int check_zone(struct parser *ps)
{
	struct dns_zone *z = ps->z;
	const struct dns_rr *soa = NULL;
	unsigned soa_line;
	char name[1024];
	size_t o = 0;

	for (size_t i = 0; i < z->n_rr; i++) {
		if (z->rr[i].type != DNS_T_SOA)
			continue;
		ps->line = z->rr[i].line;
		if (soa)
			return fail(ps, "a second SOA (the first is on line %u): one zone per file",
				    soa->line);
		soa = &z->rr[i];
	}
	ps->line = ps->lx.line;
	if (!soa)
		return fail(ps, "no SOA record: a zone starts with its SOA");
	memcpy(z->apex, z->arena + soa->owner, soa->owner_len);
	z->apex_len = soa->owner_len;
	soa_line = soa->line;
	qsort_r(z->rr, z->n_rr, sizeof(*z->rr), rr_cmp, z);
	bool apex_ns = false;
	for (size_t i = 0; i < z->n_rr; i++) {
		struct dns_rr *r = &z->rr[i];
		ps->line = r->line;
		dns_name_text(z->arena + r->owner, r->owner_len, name, sizeof(name));
		if (!dns_name_below(z->arena + r->owner, r->owner_len, z->apex, z->apex_len))
			return fail(ps, "%s is outside the zone (the SOA's owner)", name);
		apex_ns |= r->type == DNS_T_NS && r->owner_len == z->apex_len &&
			   !memcmp(z->arena + r->owner, z->apex, z->apex_len);
		if (o && same_rr(z, &z->rr[o - 1], r)) {
			z->duplicates++;             /* RFC 2181 §5: one copy of each */
			continue;
		}
		if (o && same_owner(z, &z->rr[o - 1], r) &&
		    (z->rr[o - 1].type == DNS_T_CNAME || r->type == DNS_T_CNAME))
			return fail(ps, "%s has a CNAME and other data (line %u): a CNAME must be "
				    "alone at its name (RFC 1034 §3.6.2)", name, z->rr[o - 1].line);
		z->rr[o++] = *r;
	}
	z->n_rr = o;
	/* RFC 2181 §5.2: one TTL per RRset; where the file gives several, the lowest */
	for (size_t i = 0, j; i < z->n_rr; i = j) {
		uint32_t ttl = z->rr[i].ttl;
		for (j = i + 1; j < z->n_rr && same_owner(z, &z->rr[i], &z->rr[j]) &&
		     z->rr[j].type == z->rr[i].type; j++)
			ttl = z->rr[j].ttl < ttl ? z->rr[j].ttl : ttl;
		for (size_t k = i; k < j; k++)
			z->rr[k].ttl = ttl;
	}
	if (!apex_ns) {
		dns_name_text(z->apex, z->apex_len, name, sizeof(name));
		ps->line = soa_line;
		return fail(ps, "no NS record at the apex %s", name);
	}
	return 0;
}

int dns_zone_parse(struct dns_zone *z, const char *text, size_t len, const char *origin,
		   const char *fname, char *err, size_t errlen)
{
	struct parser ps = { .z = z, .lx = { text, text + len, 1 }, .fname = fname ? fname : "zone",
			     .err = err, .errlen = errlen };
	unsigned n;
	bool blank;
	int rc;

	memset(z, 0, sizeof(*z));
	if (origin) {
		/* "example.com" on the command line means example.com. */
		char abs[300];
		size_t ol = strlen(origin);
		snprintf(abs, sizeof(abs), "%s%s", origin, ol && origin[ol - 1] == '.' ? "" : ".");
		if (ol > DNS_NAME_MAX * 4 ||
		    dns_name_parse(abs, strlen(abs), NULL, 0, ps.origin, &ps.origin_len))
			return fail(&ps, "origin '%.80s' is not a domain name", origin);
	}
	ps.t = malloc(ZONE_MAX_TOKENS * sizeof(*ps.t));
	ps.rd = malloc(DNS_MSG_MAX);
	if (!ps.t || !ps.rd) {
		free(ps.t);
		free(ps.rd);
		return fail(&ps, "out of memory");
	}
	struct tok *t = ps.t;
	while ((rc = lex_entry(&ps, t, &n, &blank)) > 0) {
		rc = t[0].len && t[0].s[0] == '$' && !t[0].quoted && !blank ?
			directive(&ps, t, n) : record(&ps, t, n, blank);
		if (rc)
			break;
	}
	if (!rc)
		rc = check_zone(&ps);
	free(ps.t);
	free(ps.rd);
	if (rc)
		dns_zone_free(z);
	return rc ? -1 : 0;
}

void dns_zone_free(struct dns_zone *z)
{
	free(z->rr);
	free(z->arena);
	memset(z, 0, sizeof(*z));
}
