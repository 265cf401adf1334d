/* text.c: fp-kv's request text: the tokenizer, memcached's number parsing, and framing a request line. */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

/* ---- numbers and tokens ---- */

static bool is_space(char ch)
{
	return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/*
 * The digits of one token as strtoull sees them: leading white space, a sign, decimal
 * digits. false when there are no digits, when what follows them is neither the token's
 * end nor white space (memcached's safe_strto* test), or on overflow (*@range).
 */
static bool num_scan(const char *s, size_t n, uint64_t *mag, bool *neg, bool *range)
{
	size_t i = 0, d0;
	uint64_t v = 0;

	*range = false;
	while (i < n && is_space(s[i]))
		i++;
	*neg = i < n && s[i] == '-';
	if (i < n && (s[i] == '-' || s[i] == '+'))
		i++;
	for (d0 = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		unsigned dig = (unsigned)(s[i] - '0');

		if (v > (UINT64_MAX - dig) / 10)
			*range = true;
		v = v * 10 + dig;
	}
	*mag = v;
	if (i == d0)
		return false;
	return i == n || is_space(s[i]);
}

bool kv_strtoull(const char *s, size_t n, uint64_t *out)
{
	uint64_t mag, v;
	bool neg, range;

	*out = 0;
	if (!num_scan(s, n, &mag, &neg, &range) || range)
		return false;
	v = neg ? (uint64_t)0 - mag : mag;
	/* strtoull negates a '-' number; memcached refuses it only when the result looks
	 * negative as a signed number. */
	if ((int64_t)v < 0 && memchr(s, '-', n))
		return false;
	*out = v;
	return true;
}

bool kv_strtoul(const char *s, size_t n, uint32_t *out)
{
	uint64_t v;
	bool ok = kv_strtoull(s, n, &v);

	*out = ok ? (uint32_t)v : 0;   /* unsigned long into uint32_t, as memcached */
	return ok;
}

bool kv_strtol(const char *s, size_t n, int32_t *out)
{
	uint64_t mag;
	bool neg, range;

	*out = 0;
	if (!num_scan(s, n, &mag, &neg, &range) || range)
		return false;
	if (mag > (uint64_t)INT64_MAX + (neg ? 1 : 0))
		return false;                       /* ERANGE for a long */
	*out = (int32_t)(uint32_t)(neg ? (uint64_t)0 - mag : mag);   /* long into int32_t */
	return true;
}

size_t kv_tokenize(const char *line, size_t len, struct kv_tok *t, size_t max)
{
	size_t n = 0, s = 0, i = len;

	/* memchr finds each space a word at a time: a byte loop was ~8 instructions a byte,
	 * the largest single cost of a GET in the application (bench/request_cost.py). */
	while (s < len) {
		const char *sp = memchr(line + s, ' ', len - s);
		size_t e = sp ? (size_t)(sp - line) : len;

		if (e != s) {
			t[n++] = (struct kv_tok){ line + s, e - s };
			if (n == max - 1 && sp) {
				i = e + 1;   /* the rest of the line, untokenized */
				break;
			}
		}
		s = e + 1;
	}
	t[n++] = (struct kv_tok){ i < len ? line + i : NULL, 0 };
	return n;
}

char *kv_utoa(uint64_t v, char *p)
{
	char tmp[24];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

bool kv_tok_is(const struct kv_tok *t, const char *s)
{
	size_t n = strlen(s);

	return t->len == n && !memcmp(t->p, s, n);
}

/* ---- framing ---- */

/* A line with no '\n' yet, past KV_LINE_MAX: only a get or gets may wait for more
 * (memcached's large multiget exception, after at most 100 leading spaces). */
static bool may_grow(const uint8_t *d, size_t len)
{
	size_t i = 0;

	while (i < len && d[i] == ' ')
		i++;
	if (i > 100)
		return false;
	return (len - i >= 4 && !memcmp(d + i, "get ", 4)) ||
	       (len - i >= 5 && !memcmp(d + i, "gets ", 5));
}

/* '\n' in d[from, to), as an offset; -1 if none. */
static ptrdiff_t find_nl(const uint8_t *d, size_t from, size_t to)
{
	const uint8_t *nl = from < to ? memchr(d + from, '\n', to - from) : NULL;

	return nl ? nl - d : -1;
}

/* Where the line at @d ends ('\n' at *@eol), or what to do without one; d[0, @from) is
 * known to hold no '\n' (a line seen before, shown again with more). Pure. */
enum kv_frame frame_line(const uint8_t *d, size_t len, size_t from, size_t *eol,
			       bool stable)
{
	size_t win = len < KV_RBUF_SIZE ? len : KV_RBUF_SIZE;
	ptrdiff_t nl;

	if (stable && win > KV_LINE_MAX + 1)
		win = KV_LINE_MAX + 1;
	nl = find_nl(d, from, win);
	if (nl < 0 && len > KV_LINE_MAX) {
		if (!may_grow(d, len))
			return KV_FRAME_CLOSE;
		nl = find_nl(d, from > win ? from : win, len < KV_GET_LINE_MAX ? len : KV_GET_LINE_MAX);
		if (nl < 0 && len >= KV_GET_LINE_MAX)
			return KV_FRAME_GET_SPLIT;
	}
	if (nl < 0)
		return KV_FRAME_NEED_MORE;
	*eol = (size_t)nl;
	return KV_FRAME_READY;
}

char *kv_ipv4_str(uint32_t a, char *buf)
{
	snprintf(buf, KV_IPV4_STR, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
	return buf;
}
