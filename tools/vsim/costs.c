/* costs.c: fp-vsim's cost model as text: NAME=NS, one per line, as --cost and --costs take it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsim.h"

#define COST_MAX_NS 1e9

int vs_cost_set(struct vs_costs *k, const char *spec, size_t len, char *err, size_t errlen)
{
	const char *eq = memchr(spec, '=', len);
	char num[64], *end;
	size_t nlen, vlen;
	double x;

	if (!eq) {
		snprintf(err, errlen, "'%.*s' is not NAME=NS", (int)(len > 60 ? 60 : len), spec);
		return -EINVAL;
	}
	nlen = (size_t)(eq - spec);
	vlen = len - nlen - 1;
	while (nlen && (spec[nlen - 1] == ' ' || spec[nlen - 1] == '\t'))
		nlen--;                       /* "name = value" reads as well */
	while (vlen && (eq[1] == ' ' || eq[1] == '\t')) {
		eq++;
		vlen--;
	}
	for (unsigned i = 0; i < vs_n_cost_names; i++) {
		const struct vs_cost_name *c = &vs_cost_names[i];

		if (strlen(c->name) != nlen || memcmp(c->name, spec, nlen))
			continue;
		if (!vlen || vlen >= sizeof(num))
			goto bad;
		memcpy(num, eq + 1, vlen);
		num[vlen] = '\0';
		x = strtod(num, &end);
		if (end == num || *end || !isfinite(x) || x < 0 || x > COST_MAX_NS)
			goto bad;
		*(double *)(void *)((char *)k + c->off) = x;
		return 0;
bad:
		snprintf(err, errlen, "%s: '%.*s' is not a number of ns in [0, 1e9]", c->name,
			 (int)(vlen > 40 ? 40 : vlen), eq + 1);
		return -EINVAL;
	}
	snprintf(err, errlen, "no cost named '%.*s' (--list-costs)", (int)(nlen > 60 ? 60 : nlen),
		 spec);
	return -EINVAL;
}

/* The next line of @text from *@pos with something on it: its comment ('#' on) and the
 * blanks around it cut off, as [*@s, *@s + return) with *@ln its number; -1 at the end. */
static long next_line(const char *text, size_t len, size_t *pos, unsigned *ln, const char **s)
{
	while (*pos < len) {
		const char *line = text + *pos, *nl = memchr(line, '\n', len - *pos);
		size_t n = nl ? (size_t)(nl - line) : len - *pos, a = 0, b;

		*pos += n + (nl != NULL);
		(*ln)++;
		for (b = 0; b < n && line[b] != '#' && line[b] != '\r'; b++)
			;
		while (a < b && (line[a] == ' ' || line[a] == '\t'))
			a++;
		while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t'))
			b--;
		if (a < b) {
			*s = line + a;
			return (long)(b - a);
		}
	}
	return -1;
}

int vs_costs_parse(struct vs_costs *k, const char *text, size_t len, char *err, size_t errlen)
{
	size_t pos = 0;
	unsigned ln = 0;
	const char *s;
	long n;

	while ((n = next_line(text, len, &pos, &ln, &s)) >= 0) {
		char what[200];

		if (memchr(s, '\0', (size_t)n) || vs_cost_set(k, s, (size_t)n, what, sizeof(what))) {
			snprintf(err, errlen, "line %u: %s", ln,
				 memchr(s, '\0', (size_t)n) ? "a NUL byte" : what);
			return -EINVAL;
		}
	}
	return 0;
}

/* ---- a machine's stalls (--stalls FILE) ---- */

#define STALL_MAX_US   1e6     /* one gap: at most a second */
#define STALL_MAX_GAPS 1000000u /* per role */

void vs_stalls_free(struct vs_stalls *s)
{
	free(s->gap_us[0]);
	free(s->gap_us[1]);
	memset(s, 0, sizeof(*s));
}

/* "a,b,c" (µs) appended to role @r's list. */
static int stalls_list(struct vs_stalls *s, unsigned r, const char *v, size_t len, char *what,
		       size_t wlen)
{
	size_t p = 0;

	while (p < len) {
		const char *c = memchr(v + p, ',', len - p);
		size_t n = c ? (size_t)(c - (v + p)) : len - p;
		char num[40], *end;
		double x;

		while (n && (v[p] == ' ' || v[p] == '\t')) {
			p++;
			n--;
		}
		while (n && (v[p + n - 1] == ' ' || v[p + n - 1] == '\t'))
			n--;
		if (!n || n >= sizeof(num))
			goto bad;
		memcpy(num, v + p, n);
		num[n] = '\0';
		x = strtod(num, &end);
		if (end == num || *end || !isfinite(x) || x <= 0 || x > STALL_MAX_US)
			goto bad;
		if (s->n[r] == STALL_MAX_GAPS) {
			snprintf(what, wlen, "more than %u gaps for one role", STALL_MAX_GAPS);
			return -EINVAL;
		}
		if (s->n[r] == s->cap[r]) {
			size_t cap = s->cap[r] ? 2 * s->cap[r] : 64;
			double *a = realloc(s->gap_us[r], cap * sizeof(*a));

			if (!a) {
				snprintf(what, wlen, "out of memory");
				return -ENOMEM;
			}
			s->gap_us[r] = a;
			s->cap[r] = cap;
		}
		s->gap_us[r][s->n[r]++] = x;
		p += (c ? (size_t)(c - (v + p)) : len - p) + 1;
		continue;
bad:
		snprintf(what, wlen, "'%.*s' is not a gap in us in (0, 1e6]", (int)(n > 30 ? 30 : n),
			 v + p);
		return -EINVAL;
	}
	return 0;
}

int vs_stalls_parse(struct vs_stalls *s, const char *text, size_t len, char *err, size_t errlen)
{
	size_t pos = 0;
	unsigned ln = 0;
	const char *line;
	long n;
	int rc;

	memset(s, 0, sizeof(*s));
	while ((n = next_line(text, len, &pos, &ln, &line)) >= 0) {
		size_t b = (size_t)n, k, v;
		const char *eq;
		char what[200];

		if (memchr(line, '\0', b)) {
			snprintf(what, sizeof(what), "a NUL byte");
			rc = -EINVAL;
			goto fail;
		}
		if (!(eq = memchr(line, '=', b))) {
			snprintf(what, sizeof(what), "'%.*s' is not KEY=VALUE", (int)(b > 40 ? 40 : b),
				 line);
			rc = -EINVAL;
			goto fail;
		}
		for (k = (size_t)(eq - line); k && (line[k - 1] == ' ' || line[k - 1] == '\t'); k--)
			;
		v = (size_t)(eq - line) + 1;
		if (k == 7 && !memcmp(line, "seconds", 7)) {
			char num[40], *end;
			double x;

			while (v < b && (line[v] == ' ' || line[v] == '\t'))
				v++;
			if (b - v == 0 || b - v >= sizeof(num))
				goto bad_secs;
			memcpy(num, line + v, b - v);
			num[b - v] = '\0';
			x = strtod(num, &end);
			if (end == num || *end || !isfinite(x) || x <= 0 || x > 1e6)
				goto bad_secs;
			s->seconds = x;
			continue;
bad_secs:
			snprintf(what, sizeof(what), "seconds: '%.*s' is not in (0, 1e6]",
				 (int)(b - v > 30 ? 30 : b - v), line + v);
			rc = -EINVAL;
			goto fail;
		}
		if (k == 6 && (!memcmp(line, "server", 6) || !memcmp(line, "client", 6))) {
			if ((rc = stalls_list(s, line[0] == 'c', line + v, b - v, what, sizeof(what))))
				goto fail;
			continue;
		}
		snprintf(what, sizeof(what), "no key '%.*s' (seconds, server, client)",
			 (int)(k > 40 ? 40 : k), line);
		rc = -EINVAL;
fail:
		snprintf(err, errlen, "line %u: %s", ln, what);
		vs_stalls_free(s);
		return rc;
	}
	if (!s->seconds) {
		snprintf(err, errlen, "line %u: no seconds= (the span the gaps were seen over)",
			 ln ? ln : 1);
		vs_stalls_free(s);
		return -EINVAL;
	}
	return 0;
}
