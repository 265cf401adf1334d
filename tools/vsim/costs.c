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

int vs_costs_parse(struct vs_costs *k, const char *text, size_t len, char *err, size_t errlen)
{
	size_t pos = 0;
	unsigned ln = 0;

	while (pos < len) {
		const char *line = text + pos, *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - line) : len - pos, a = 0, b;
		char what[200];

		pos += n + (nl != NULL);
		ln++;
		for (b = 0; b < n && line[b] != '#' && line[b] != '\r'; b++)
			;
		while (a < b && (line[a] == ' ' || line[a] == '\t'))
			a++;
		while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t'))
			b--;
		if (a == b)
			continue;
		if (memchr(line + a, '\0', b - a) || vs_cost_set(k, line + a, b - a, what, sizeof(what))) {
			snprintf(err, errlen, "line %u: %s", ln,
				 memchr(line + a, '\0', b - a) ? "a NUL byte" : what);
			return -EINVAL;
		}
	}
	return 0;
}
