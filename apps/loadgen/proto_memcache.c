/* proto_memcache.c: memcached's text protocol with mutilate's USR and ETC workloads. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

/*
 * The workloads, as mutilate (leverich/mutilate) generates them and as IX, ZygOS and
 * Shenango ran it:
 *
 *  - A key is the decimal index i of a record, zero-padded to a length that is a function
 *    of i alone: U = FNV-1a-64(the 8 bytes of i) / 2^64, length = max(round(Q(U)),
 *    digits of --records), Q the key-size distribution's inverse CDF (Generator.h,
 *    KeyGenerator::generate). Each request picks i uniformly from [0, records)
 *    (Connection.cc, issue_something: lrand48() % records); records defaults to 10,000
 *    (cmdline.ggo). Memcached refuses keys over 250 bytes, so lengths stop there.
 *  - A request is a SET with probability --update, else a GET; the SET's value size is a
 *    fresh draw of the value-size distribution, truncated to an integer (issue_set takes
 *    an int), and --preload SETs every key once the same way (start_loading).
 *  - USR: --keysize=19 --valuesize=2 --update=0.002, the flags used to reproduce
 *    Atikoglu et al.'s USR pool (SIGMETRICS'12: short keys, 2-byte values, 99.8% GET).
 *  - ETC: --keysize=fb_key --valuesize=fb_value --update=0.25 (dist.c has the fits), as in
 *    IX (OSDI'14, section 5.4: "20-70 B keys, 1 B-1 KB values, 75% GET").
 *
 * Values over LG_MC_MAX_VALUE are clamped to it (fb_value draws one with probability
 * ~5e-10): memcached's default item limit is 1 MiB, header and key included.
 */
#define MC_MAX_KEY 250u
#define FILL_SPAN  64u /* value bytes come from fill[off..], off < FILL_SPAN */

struct lg_proto {
	char workload[16];
	struct lg_dist keysize, valuesize;
	double get_ratio;
	uint64_t records;
	unsigned min_key, max_key;  /* key lengths, bytes */
	uint32_t max_value;
	size_t max_request;
	uint8_t *fill;              /* max_value + FILL_SPAN bytes of value pattern */
};

/* ---- keys ---- */

static unsigned decimal_digits(uint64_t v)
{
	unsigned n = 1;

	while (v >= 10)
		v /= 10, n++;
	return n;
}

static uint64_t fnv1a_64(uint64_t v)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < 8; i++, v >>= 8) {
		h ^= v & 0xff;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The length of record @i's key (mutilate's KeyGenerator, lengths capped at 250). */
static unsigned key_len(const struct lg_proto *p, uint64_t i)
{
	double u = (double)fnv1a_64(i) * 0x1p-64;
	double g = lg_dist_quantile(&p->keysize, u);

	if (!(g >= p->min_key))
		return p->min_key;
	if (!(g <= p->max_key))
		return p->max_key;
	return (unsigned)lround(g);
}

/* Write @i in decimal, zero-padded to @len digits, at @buf (@len >= its digits). */
static void key_write(uint8_t *buf, uint64_t i, unsigned len)
{
	for (unsigned k = len; k-- > 0; i /= 10)
		buf[k] = (uint8_t)('0' + i % 10);
}

/* ---- workloads ---- */

static int preset(struct lg_proto *p, const char *workload, char *err, size_t errlen)
{
	const char *key, *value;

	if (!strcmp(workload, "usr"))
		key = "19", value = "2", p->get_ratio = 0.998;
	else if (!strcmp(workload, "etc"))
		key = "fb_key", value = "fb_value", p->get_ratio = 0.75;
	else if (!strcmp(workload, "custom"))
		key = NULL, value = NULL, p->get_ratio = 1.0; /* mutilate's --update default: 0 */
	else {
		snprintf(err, errlen, "memcache: unknown workload '%s' (usr, etc, custom)", workload);
		return -EINVAL;
	}
	snprintf(p->workload, sizeof(p->workload), "%s", workload);
	if (key && (lg_dist_parse(&p->keysize, key, false, err, errlen) ||
		    lg_dist_parse(&p->valuesize, value, false, err, errlen)))
		return -EINVAL;
	return 0;
}

/* The workload's preset, then the fields @cfg gives. */
static int configure(struct lg_proto *p, const struct lg_proto_config *cfg, char *err, size_t errlen)
{
	if (preset(p, cfg->workload ? cfg->workload : "usr", err, errlen))
		return -EINVAL;
	if (cfg->keysize.name[0])
		p->keysize = cfg->keysize;
	if (cfg->valuesize.name[0])
		p->valuesize = cfg->valuesize;
	if (cfg->has_get_ratio)
		p->get_ratio = cfg->get_ratio;
	p->records = cfg->records ? cfg->records : 10000;
	if (!p->keysize.name[0] || !p->valuesize.name[0]) {
		snprintf(err, errlen, "memcache: the custom workload needs --keysize and --valuesize");
		return -EINVAL;
	}
	if (!(p->get_ratio >= 0 && p->get_ratio <= 1)) {
		snprintf(err, errlen, "memcache: the GET ratio must be within [0, 1]");
		return -EINVAL;
	}
	if (p->records > UINT32_MAX) { /* a GET's key index rides in lg_req.len */
		snprintf(err, errlen, "memcache: at most %u records", UINT32_MAX);
		return -EINVAL;
	}
	return 0;
}

/* Key and value bounds, the largest request, and the value pattern. */
static int size_up(struct lg_proto *p, char *err, size_t errlen)
{
	double kmax = lg_dist_max(&p->keysize), vmax = lg_dist_max(&p->valuesize);

	p->min_key = decimal_digits(p->records);
	p->max_key = MC_MAX_KEY;
	if (kmax < MC_MAX_KEY)
		p->max_key = kmax > p->min_key ? (unsigned)lround(kmax) : p->min_key;
	p->max_value = vmax >= LG_MC_MAX_VALUE ? LG_MC_MAX_VALUE : vmax > 0 ? (uint32_t)vmax : 0;
	/* "set " KEY " 0 0 " LEN "\r\n" VALUE "\r\n" is the longer of the two requests */
	p->max_request = 4 + p->max_key + 5 + decimal_digits(p->max_value) + 2 + p->max_value + 2;
	p->fill = malloc(p->max_value + FILL_SPAN);
	if (!p->fill) {
		snprintf(err, errlen, "memcache: out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < p->max_value + FILL_SPAN; i++)
		p->fill[i] = (uint8_t)"abcdefghijklmnopqrstuvwxyz0123456789"[i % 36];
	return 0;
}

static void mc_destroy(struct lg_proto *p)
{
	if (p) {
		free(p->fill);
		free(p);
	}
}

static struct lg_proto *mc_create(const struct lg_proto_config *cfg, char *err, size_t errlen)
{
	struct lg_proto *p = calloc(1, sizeof(*p));

	if (!p) {
		snprintf(err, errlen, "memcache: out of memory");
		return NULL;
	}
	if (configure(p, cfg, err, errlen) || size_up(p, err, errlen)) {
		mc_destroy(p);
		return NULL;
	}
	return p;
}

/* ---- requests ---- */

static uint32_t value_len(const struct lg_proto *p, struct lg_rng *r)
{
	double v = lg_dist_sample(&p->valuesize, r);

	if (!(v >= 0))
		return 0;
	return v >= p->max_value ? p->max_value : (uint32_t)v; /* truncated, as mutilate's int */
}

static size_t encode_get(const struct lg_proto *p, uint64_t i, uint8_t *buf, size_t cap,
			 struct lg_req *req)
{
	unsigned klen = key_len(p, i);

	if (cap < 4 + klen + 2)
		return 0;
	memcpy(buf, "get ", 4);
	key_write(buf + 4, i, klen);
	memcpy(buf + 4 + klen, "\r\n", 2);
	req->op = LG_OP_GET;
	req->aux = (uint16_t)klen;
	req->len = (uint32_t)i;
	return 4 + klen + 2;
}

static size_t encode_set(const struct lg_proto *p, uint64_t i, struct lg_rng *r, uint8_t *buf,
			 size_t cap, struct lg_req *req)
{
	unsigned klen = key_len(p, i), vdig;
	uint32_t vlen = value_len(p, r);
	size_t n = 4 + klen + 5 + (vdig = decimal_digits(vlen)) + 2; /* the command line */

	if (cap < n + vlen + 2)
		return 0;
	memcpy(buf, "set ", 4);
	key_write(buf + 4, i, klen);
	memcpy(buf + 4 + klen, " 0 0 ", 5);
	key_write(buf + 4 + klen + 5, vlen, vdig);
	memcpy(buf + n - 2, "\r\n", 2);
	memcpy(buf + n, p->fill + lg_rng_below(r, FILL_SPAN), vlen);
	memcpy(buf + n + vlen, "\r\n", 2);
	req->op = LG_OP_SET;
	req->aux = (uint16_t)klen;
	req->len = vlen;
	return n + vlen + 2;
}

static size_t mc_encode(const struct lg_proto *p, struct lg_rng *r, uint8_t *buf, size_t cap,
			struct lg_req *req)
{
	uint64_t i = lg_rng_below(r, p->records);

	if (lg_rng_unit(r) < p->get_ratio)
		return encode_get(p, i, buf, cap, req);
	return encode_set(p, i, r, buf, cap, req);
}

static size_t mc_encode_preload(const struct lg_proto *p, uint64_t i, struct lg_rng *r,
				uint8_t *buf, size_t cap, struct lg_req *req)
{
	return i < p->records ? encode_set(p, i, r, buf, cap, req) : 0;
}

/* ---- responses ---- */

/*
 * The answers to "get KEY" and "set KEY 0 0 LEN" (memcached's doc/protocol.txt):
 *   VALUE KEY FLAGS BYTES [CAS]\r\n DATA \r\n END\r\n    a hit (GET)
 *   END\r\n                                              a miss (GET)
 *   STORED\r\n                                           stored (SET)
 *   NOT_STORED | EXISTS | NOT_FOUND \r\n                 refused (SET): an error
 *   ERROR | CLIENT_ERROR msg | SERVER_ERROR msg \r\n     an error (either)
 * Nothing else is an answer to what we sent: -EBADMSG. Lines end in CRLF and are at most
 * LG_MC_MAX_LINE bytes; DATA is taken by its length, so it may hold anything, CRLF and
 * "END" included. Nothing is kept between calls: a call that returns 0 looked at no more
 * than one line, so showing the same bytes again with more is cheap.
 */
enum { MC_GET = 1, MC_SET = 2 };

static const struct mc_word {
	const char *word;
	uint8_t ops;          /* MC_GET | MC_SET: the requests it may answer */
	uint8_t status;       /* enum lg_status */
	bool message;         /* may be followed by " anything" */
} mc_words[] = {
	{ "VALUE ", MC_GET, LG_RESP_OK, true },
	{ "END", MC_GET, LG_RESP_MISS, false },
	{ "STORED", MC_SET, LG_RESP_OK, false },
	{ "NOT_STORED", MC_SET, LG_RESP_ERROR, false },
	{ "EXISTS", MC_SET, LG_RESP_ERROR, false },
	{ "NOT_FOUND", MC_SET, LG_RESP_ERROR, false },
	{ "ERROR", MC_GET | MC_SET, LG_RESP_ERROR, false },
	{ "CLIENT_ERROR", MC_GET | MC_SET, LG_RESP_ERROR, true },
	{ "SERVER_ERROR", MC_GET | MC_SET, LG_RESP_ERROR, true },
};
#define MC_NWORDS (sizeof(mc_words) / sizeof(mc_words[0]))

/* Whether the first @len bytes of a line (@len may be short of it) can begin an answer to
 * @ops: so that garbage fails at once instead of after LG_MC_MAX_LINE bytes. */
static bool mc_may_start(const uint8_t *d, size_t len, unsigned ops)
{
	for (size_t i = 0; i < MC_NWORDS; i++) {
		size_t wl = strlen(mc_words[i].word);
		if ((mc_words[i].ops & ops) && !memcmp(d, mc_words[i].word, len < wl ? len : wl))
			return true;
	}
	return false;
}

/* The word line @s[0..n) (CRLF excluded) starts with, or NULL. */
static const struct mc_word *mc_classify(const uint8_t *s, size_t n, unsigned ops)
{
	for (size_t i = 0; i < MC_NWORDS; i++) {
		const struct mc_word *w = &mc_words[i];
		size_t wl = strlen(w->word);
		if (!(w->ops & ops) || n < wl || memcmp(s, w->word, wl))
			continue;
		if (n == wl || (w->message && (w->word[wl - 1] == ' ' || s[wl] == ' ')))
			return w;
	}
	return NULL;
}

/* A decimal at @s[*i..n) ending at a space or the end: 1 to 20 digits, value <= @max. */
static int mc_number(const uint8_t *s, size_t n, size_t *i, uint64_t max, uint64_t *out)
{
	size_t start = *i;
	uint64_t v = 0;

	for (; *i < n && s[*i] != ' '; (*i)++) {
		unsigned dig = (unsigned)s[*i] - '0';
		if (dig > 9 || v > (max - dig) / 10)
			return -EBADMSG;
		v = v * 10 + dig;
	}
	if (*i == start)
		return -EBADMSG;
	*out = v;
	return 0;
}

/* Whether @key[0..n) is the key of @req (when the request says which: aux is its length). */
static bool mc_key_matches(const struct lg_req *req, const uint8_t *key, size_t n)
{
	uint8_t want[MC_MAX_KEY];

	if (req->aux == 0)
		return true;
	if (n != req->aux || n > MC_MAX_KEY || decimal_digits(req->len) > n)
		return false;
	key_write(want, req->len, (unsigned)n);
	return !memcmp(key, want, n);
}

/* "VALUE KEY FLAGS BYTES [CAS]" in @s[0..n): the data's length in *@bytes. */
static int mc_value_line(const struct lg_req *req, const uint8_t *s, size_t n, uint64_t *bytes)
{
	size_t i = 6, k = i; /* after "VALUE " */
	uint64_t flags, cas;

	while (k < n && s[k] > ' ' && s[k] < 0x7f)
		k++;
	if (k == i || k - i > MC_MAX_KEY || k == n || s[k] != ' ' || !mc_key_matches(req, s + i, k - i))
		return -EBADMSG;
	i = k + 1;
	if (mc_number(s, n, &i, UINT32_MAX, &flags) || i == n || s[i++] != ' ' ||
	    mc_number(s, n, &i, LG_MC_MAX_BYTES, bytes))
		return -EBADMSG;
	if (i < n && (s[i++] != ' ' || mc_number(s, n, &i, UINT64_MAX, &cas) || i != n))
		return -EBADMSG;
	return 0;
}

/* A hit: the VALUE line (@line bytes, CRLF included) is complete; then the data, CRLF and
 * END CRLF. */
static long mc_hit(const struct lg_req *req, const uint8_t *d, size_t len, size_t line,
		   enum lg_status *status)
{
	static const char trailer[] = "\r\nEND\r\n";
	uint64_t bytes;

	if (mc_value_line(req, d, line - 2, &bytes))
		return -EBADMSG;
	size_t at = line + bytes, have = len > at ? len - at : 0;
	if (have > 7)
		have = 7;
	if (have > 0 && memcmp(d + at, trailer, have) != 0)
		return -EBADMSG;
	if (have < 7)
		return 0;
	*status = LG_RESP_OK;
	return (long)(at + 7);
}

static long mc_parse(const struct lg_proto *p, const struct lg_req *req, const uint8_t *data,
		     size_t len, enum lg_status *status)
{
	unsigned ops = req->op == LG_OP_GET ? MC_GET : req->op == LG_OP_SET ? MC_SET : 0;
	const uint8_t *nl;

	(void)p;
	if (len == 0)
		return ops ? 0 : -EBADMSG;
	if (!ops || !mc_may_start(data, len, ops))
		return -EBADMSG;
	nl = memchr(data, '\n', len < LG_MC_MAX_LINE ? len : LG_MC_MAX_LINE);
	if (!nl)
		return len >= LG_MC_MAX_LINE ? -EBADMSG : 0;
	size_t line = (size_t)(nl - data) + 1;
	if (line < 2 || data[line - 2] != '\r')
		return -EBADMSG;
	const struct mc_word *w = mc_classify(data, line - 2, ops);
	if (!w)
		return -EBADMSG;
	if (w == &mc_words[0])
		return mc_hit(req, data, len, line, status);
	*status = (enum lg_status)w->status;
	return (long)line;
}

static size_t mc_max_request(const struct lg_proto *p) { return p->max_request; }

/* "19 B" for a fixed size, else the distribution's name and mean. */
static void size_text(const struct lg_dist *d, char *buf, size_t len)
{
	if (d->kind == LG_DIST_FIXED)
		snprintf(buf, len, "%.0f B", d->a);
	else
		snprintf(buf, len, "%s (mean %.1f B)", d->name, lg_dist_mean(d));
}

static void mc_describe(const struct lg_proto *p, char *buf, size_t len)
{
	char k[64], v[64];

	size_text(&p->keysize, k, sizeof(k));
	size_text(&p->valuesize, v, sizeof(v));
	snprintf(buf, len, "%s: key %s, value %s, %.1f%% GET, %llu records", p->workload, k, v,
		 100 * p->get_ratio, (unsigned long long)p->records);
}

const struct lg_proto_ops lg_proto_memcache = {
	.name = "memcache",
	.create = mc_create,
	.destroy = mc_destroy,
	.encode = mc_encode,
	.encode_preload = mc_encode_preload,
	.parse = mc_parse,
	.max_request = mc_max_request,
	.describe = mc_describe,
};
