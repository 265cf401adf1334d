/* parse.c: pure, bounds-checked parsers for empirical service-time files and arrival traces. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

#define MAX_TOKEN 63u /* longest number we accept; longer is an error, not a truncation */
#define MAX_COLS  3

/* A token is an offset and a length into the buffer, never a pointer past its end. */
struct tok {
	size_t off, len;
};

/* Cursor over the lines of a buffer; offsets only, as memcached's parser does. */
struct line_it {
	const char *buf;
	size_t len, off;
	unsigned no;
};

/* A growable array of doubles (or of u32 when used through the flow column). */
struct vec {
	void *a;
	size_t n, cap, size;
};

static void fail(struct qs_perr *err, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct qs_perr *err, unsigned line, const char *fmt, ...)
{
	va_list ap;

	err->line = line;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
}

/*
 * Advance @it to the next line; set [*start, *start + *llen) to its content with any
 * comment cut off. Returns 1 for a line, 0 at the end, -EINVAL for an over-long line.
 */
static int next_line(struct line_it *it, size_t *start, size_t *llen)
{
	if (it->off >= it->len)
		return 0;
	const char *p = it->buf + it->off;
	const char *nl = memchr(p, '\n', it->len - it->off);
	size_t n = nl ? (size_t)(nl - p) : it->len - it->off;

	it->no++;
	*start = it->off;
	it->off += n + (nl ? 1 : 0);
	if (n > QS_PARSE_MAX_LINE)
		return -EINVAL;
	const char *hash = memchr(p, '#', n);
	*llen = hash ? (size_t)(hash - p) : n;
	return 1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Split [s, s + len) on blanks into at most MAX_COLS tokens; -1 if there are more. */
static int split(const char *buf, size_t start, size_t len, struct tok *t)
{
	int n = 0;
	size_t i = 0;

	while (i < len) {
		while (i < len && is_space(buf[start + i]))
			i++;
		if (i == len)
			break;
		if (n == MAX_COLS)
			return -1;
		t[n].off = start + i;
		while (i < len && !is_space(buf[start + i]))
			i++;
		t[n].len = start + i - t[n].off;
		n++;
	}
	return n;
}

/* A plain decimal number (digits, '.', exponent); no hex, inf or nan, finite. */
static int parse_num(const char *buf, const struct tok *t, double *out)
{
	char tmp[MAX_TOKEN + 1];
	char *end;

	if (t->len > MAX_TOKEN)
		return -EINVAL;
	for (size_t i = 0; i < t->len; i++) {
		char c = buf[t->off + i];
		if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' ||
		      c == '-'))
			return -EINVAL;
	}
	memcpy(tmp, buf + t->off, t->len);
	tmp[t->len] = '\0';
	errno = 0;
	double v = strtod(tmp, &end);
	if (end != tmp + t->len || t->len == 0 || !isfinite(v) || errno == ERANGE)
		return -EINVAL;
	*out = v;
	return 0;
}

/* An unsigned 32-bit decimal integer. */
static int parse_u32(const char *buf, const struct tok *t, uint32_t *out)
{
	uint64_t v = 0;

	if (t->len == 0 || t->len > 10)
		return -EINVAL;
	for (size_t i = 0; i < t->len; i++) {
		char c = buf[t->off + i];
		if (c < '0' || c > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(c - '0');
	}
	if (v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int vec_push(struct vec *v, const void *x)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		void *a = realloc(v->a, cap * v->size);
		if (!a)
			return -ENOMEM;
		v->a = a;
		v->cap = cap;
	}
	memcpy((char *)v->a + v->n * v->size, x, v->size);
	v->n++;
	return 0;
}

/* Turn weights into cumulative probabilities in place; the weighted mean of @val. */
static int weights_to_cum(struct qs_empirical *e, struct qs_perr *err)
{
	double wsum = 0, vsum = 0;

	for (size_t i = 0; i < e->n; i++) {
		wsum += e->cum[i];
		vsum += e->cum[i] * e->val[i];
	}
	if (!(wsum > 0) || !isfinite(wsum) || !isfinite(vsum)) {
		fail(err, 0, "weights must sum to a finite positive number");
		return -EINVAL;
	}
	e->mean = vsum / wsum;
	if (!(e->mean > 0)) {
		fail(err, 0, "mean service time is 0");
		return -EINVAL;
	}
	double run = 0;
	for (size_t i = 0; i < e->n; i++) {
		run += e->cum[i];
		e->cum[i] = run / wsum;
	}
	e->cum[e->n - 1] = 1.0;
	return 0;
}

/* One "VALUE [WEIGHT]" line into @vals and @wts. */
static int empirical_line(const char *buf, const struct tok *t, int nt, unsigned no,
			  struct vec *vals, struct vec *wts, struct qs_perr *err)
{
	double v, w = 1.0;

	if (nt > 2 || nt < 0) {
		fail(err, no, "expected VALUE [WEIGHT]");
		return -EINVAL;
	}
	if (parse_num(buf, &t[0], &v) || v < 0) {
		fail(err, no, "service time must be a finite number >= 0");
		return -EINVAL;
	}
	if (nt == 2 && (parse_num(buf, &t[1], &w) || w < 0)) {
		fail(err, no, "weight must be a finite number >= 0");
		return -EINVAL;
	}
	if (vals->n >= QS_PARSE_MAX_ROWS) {
		fail(err, no, "more than %u values", QS_PARSE_MAX_ROWS);
		return -EINVAL;
	}
	if (vec_push(vals, &v) || vec_push(wts, &w))
		return -ENOMEM;
	return 0;
}

int qs_parse_empirical(const char *buf, size_t len, struct qs_empirical *out,
		       struct qs_perr *err)
{
	struct line_it it = { .buf = buf, .len = len };
	struct vec vals = { .size = sizeof(double) }, wts = { .size = sizeof(double) };
	struct tok t[MAX_COLS];
	size_t start, llen;
	int rc, nt;

	memset(out, 0, sizeof(*out));
	while ((rc = next_line(&it, &start, &llen)) > 0) {
		nt = split(buf, start, llen, t);
		if (nt == 0)
			continue;
		rc = empirical_line(buf, t, nt, it.no, &vals, &wts, err);
		if (rc)
			goto fail;
	}
	if (rc < 0) {
		fail(err, it.no, "line longer than %u bytes", QS_PARSE_MAX_LINE);
		goto fail;
	}
	if (vals.n == 0) {
		fail(err, 0, "no service times in file");
		rc = -EINVAL;
		goto fail;
	}
	out->n = vals.n;
	out->val = vals.a;
	out->cum = wts.a;
	rc = weights_to_cum(out, err);
	if (rc)
		qs_empirical_free(out);
	return rc;
fail:
	free(vals.a);
	free(wts.a);
	return rc;
}

void qs_empirical_free(struct qs_empirical *e)
{
	free(e->val);
	free(e->cum);
	memset(e, 0, sizeof(*e));
}

/* Accumulates a trace while checking that every line agrees with the first. */
struct trace_acc {
	struct vec t, svc, flow;
	int cols;
	double last;
};

/* One "ARRIVAL_US [SERVICE_US [FLOW]]" line. */
static int trace_line(const char *buf, const struct tok *t, int nt, unsigned no,
		      struct trace_acc *a, struct qs_perr *err)
{
	double at, s;
	uint32_t f = 0;

	if (nt < 0 || (a->cols && nt != a->cols)) {
		fail(err, no, "expected %d column%s like the first line", a->cols,
		     a->cols == 1 ? "" : "s");
		return -EINVAL;
	}
	a->cols = nt;
	if (parse_num(buf, &t[0], &at) || at < 0) {
		fail(err, no, "arrival time must be a finite number >= 0");
		return -EINVAL;
	}
	if (a->t.n && at < a->last) {
		fail(err, no, "arrival time goes backwards");
		return -EINVAL;
	}
	if (nt >= 2 && (parse_num(buf, &t[1], &s) || s < 0)) {
		fail(err, no, "service time must be a finite number >= 0");
		return -EINVAL;
	}
	if (nt == 3 && parse_u32(buf, &t[2], &f)) {
		fail(err, no, "flow must be an integer in [0, 4294967295]");
		return -EINVAL;
	}
	if (a->t.n >= QS_PARSE_MAX_ROWS) {
		fail(err, no, "more than %u arrivals", QS_PARSE_MAX_ROWS);
		return -EINVAL;
	}
	a->last = at;
	if (vec_push(&a->t, &at) || (nt >= 2 && vec_push(&a->svc, &s)) ||
	    (nt == 3 && vec_push(&a->flow, &f)))
		return -ENOMEM;
	return 0;
}

int qs_parse_trace(const char *buf, size_t len, struct qs_trace *out, struct qs_perr *err)
{
	struct line_it it = { .buf = buf, .len = len };
	struct trace_acc a = {
		.t = { .size = sizeof(double) },
		.svc = { .size = sizeof(double) },
		.flow = { .size = sizeof(uint32_t) },
	};
	struct tok t[MAX_COLS];
	size_t start, llen;
	int rc, nt;

	memset(out, 0, sizeof(*out));
	while ((rc = next_line(&it, &start, &llen)) > 0) {
		nt = split(buf, start, llen, t);
		if (nt == 0)
			continue;
		rc = trace_line(buf, t, nt, it.no, &a, err);
		if (rc)
			goto fail;
	}
	if (rc < 0) {
		fail(err, it.no, "line longer than %u bytes", QS_PARSE_MAX_LINE);
		goto fail;
	}
	if (a.t.n == 0) {
		fail(err, 0, "no arrivals in file");
		rc = -EINVAL;
		goto fail;
	}
	out->n = a.t.n;
	out->t = a.t.a;
	out->svc = a.svc.a;
	out->flow = a.flow.a;
	return 0;
fail:
	free(a.t.a);
	free(a.svc.a);
	free(a.flow.a);
	return rc;
}

void qs_trace_free(struct qs_trace *t)
{
	free(t->t);
	free(t->svc);
	free(t->flow);
	memset(t, 0, sizeof(*t));
}
