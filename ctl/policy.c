/* policy.c: IX's control policy as a pure function (what the loop sees -> what to do), its parameters as data, and the group plan. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

void ctl_policy_default(struct ctl_policy *p)
{
	*p = (struct ctl_policy){
		.interval_ms = 100,
		.delay_max_us = 300.0,
		.up_ewma = 0,
		.down_ewma = 1,
		.idle_margin = 0.1,
		.min_workers = 1,
		.max_workers = 0,
		.down_hold_ms = 1000,
	};
}

/* ---- parsing: "key = value" lines ---- */

enum kind { K_UINT, K_DOUBLE, K_EWMA };

static const struct key {
	const char *name;
	enum kind kind;
	size_t off;
	double lo, hi;
} keys[] = {
	{ "interval_ms", K_UINT, offsetof(struct ctl_policy, interval_ms), 1, 60000 },
	{ "delay_max_us", K_DOUBLE, offsetof(struct ctl_policy, delay_max_us), 0, 1e7 },
	{ "up_ewma", K_EWMA, offsetof(struct ctl_policy, up_ewma), 0, 0 },
	{ "down_ewma", K_EWMA, offsetof(struct ctl_policy, down_ewma), 0, 0 },
	{ "idle_margin", K_DOUBLE, offsetof(struct ctl_policy, idle_margin), 0, 1 },
	{ "min_workers", K_UINT, offsetof(struct ctl_policy, min_workers), 1, CTL_MAX_WORKERS },
	{ "max_workers", K_UINT, offsetof(struct ctl_policy, max_workers), 0, CTL_MAX_WORKERS },
	{ "down_hold_ms", K_UINT, offsetof(struct ctl_policy, down_hold_ms), 0, 3600000 },
};

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* The EWMA a value names: "1/2", "1/8" or "1/32" (the alphas the runtime keeps). */
static int parse_ewma(const char *v, unsigned *out)
{
	static const char *const names[3] = { "1/2", "1/8", "1/32" };

	for (unsigned i = 0; i < 3; i++)
		if (!strcmp(v, names[i])) {
			*out = i;
			return 0;
		}
	return -1;
}

static int set_key(struct ctl_policy *p, const struct key *k, const char *v)
{
	char *end, *field = (char *)p + k->off;   /* memcpy: no cast past its alignment */
	unsigned u;

	if (k->kind == K_EWMA) {
		if (parse_ewma(v, &u))
			return -1;
		memcpy(field, &u, sizeof(u));
		return 0;
	}
	errno = 0;
	double d = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(d) || d < k->lo || d > k->hi)
		return -1;
	if (k->kind == K_UINT) {
		if (d != floor(d))
			return -1;
		u = (unsigned)d;
		memcpy(field, &u, sizeof(u));
	} else {
		memcpy(field, &d, sizeof(d));
	}
	return 0;
}

static const char *range_of(const struct key *k, char *buf, size_t len)
{
	if (k->kind == K_EWMA)
		return "1/2, 1/8 or 1/32";
	snprintf(buf, len, "%s from %g to %g", k->kind == K_UINT ? "a whole number" : "a number",
		 k->lo, k->hi);
	return buf;
}

int ctl_policy_parse(const char *text, struct ctl_policy *p, char *err, size_t errlen)
{
	char line[256], range[64];
	unsigned no = 0;

	while (*text) {
		size_t n = strcspn(text, "\n");
		no++;
		if (n >= sizeof(line)) {
			snprintf(err, errlen, "line %u: longer than %zu characters", no,
				 sizeof(line) - 1);
			return -EINVAL;
		}
		memcpy(line, text, n);
		line[n] = '\0';
		text += n + (text[n] == '\n');
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line), *eq = strchr(s, '=');
		if (!*s)
			continue;
		if (!eq) {
			snprintf(err, errlen, "line %u: expected 'key = value', got '%.60s'", no, s);
			return -EINVAL;
		}
		*eq = '\0';
		char *key = trim(s), *val = trim(eq + 1);
		const struct key *k = NULL;
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (!strcmp(keys[i].name, key))
				k = &keys[i];
		if (!k) {
			snprintf(err, errlen, "line %u: unknown key '%.40s' (keys: interval_ms, "
				 "delay_max_us, up_ewma, down_ewma, idle_margin, min_workers, "
				 "max_workers, down_hold_ms)", no, key);
			return -EINVAL;
		}
		if (set_key(p, k, val)) {
			snprintf(err, errlen, "line %u: %s must be %s (got '%.40s')", no, k->name,
				 range_of(k, range, sizeof(range)), val);
			return -EINVAL;
		}
	}
	if (p->max_workers && p->max_workers < p->min_workers) {
		snprintf(err, errlen, "max_workers (%u) is below min_workers (%u)", p->max_workers,
			 p->min_workers);
		return -EINVAL;
	}
	return 0;
}

/* ---- the decision ---- */

static struct ctl_decision decision(enum ctl_act act, unsigned worker, const char *fmt, double a,
				    double b)
{
	struct ctl_decision d = { .act = act, .worker = worker };

	snprintf(d.why, sizeof(d.why), fmt, a, b);
	return d;
}

struct ctl_decision ctl_decide(const struct ctl_policy *p, const struct ctl_view *v)
{
	unsigned active = 0, max_workers = p->max_workers && p->max_workers < v->n ? p->max_workers
										   : v->n;
	int parked = -1, last = -1, hot = -1;
	double idle_sum = 0, delay = 0;

	if (v->moving || v->draining >= 0)
		return decision(CTL_HOLD, 0, "a change in progress", 0, 0);
	for (unsigned w = 0; w < v->n; w++) {
		const struct ctl_wview *x = &v->w[w];

		if (x->parked) {
			if (parked < 0)
				parked = (int)w;
			continue;
		}
		active++;
		last = (int)w;
		/* a worker that published nothing since the last tick slept all of it */
		double d = x->fresh ? x->delay_us[p->up_ewma] : 0.0;
		idle_sum += x->fresh ? x->idle[p->down_ewma] : 1.0;
		if (hot < 0 || d > delay) {
			delay = d;
			hot = (int)w;
		}
	}
	if (!active)
		return decision(CTL_HOLD, 0, "no worker polling", 0, 0);
	/* Up first: a queue that grows costs the SLO; idle cores cost only energy. */
	if (delay > p->delay_max_us) {
		if (parked >= 0 && active < max_workers)
			return decision(CTL_UP, (unsigned)parked, "queueing delay %.1f us > %.1f us",
					delay, p->delay_max_us);
		return decision(CTL_HOLD, 0, "queueing delay %.1f us > %.1f us, no worker to add",
				delay, p->delay_max_us);
	}
	double idle = idle_sum / active, need = 1.0 / active + p->idle_margin;
	if (active > p->min_workers && idle > need && v->now_ms - v->last_change_ms >= p->down_hold_ms)
		return decision(CTL_DOWN, (unsigned)last, "idle %.2f > %.2f", idle, need);
	return decision(CTL_HOLD, 0, "idle %.2f, delay %.1f us", idle, delay);
}

/* ---- the plan ---- */

unsigned ctl_plan(const uint16_t table[CTL_GROUPS], unsigned n_groups, unsigned n,
		  uint64_t target, struct ctl_move *out, unsigned max)
{
	unsigned have[CTL_MAX_WORKERS] = { 0 }, want[CTL_MAX_WORKERS] = { 0 }, k = 0, nt = 0;
	uint16_t owner[CTL_GROUPS];

	if (n > CTL_MAX_WORKERS)
		n = CTL_MAX_WORKERS;
	if (n_groups > CTL_GROUPS)
		n_groups = CTL_GROUPS;
	for (unsigned w = 0; w < n; w++)
		nt += (target >> w) & 1;
	if (!nt)
		return 0;
	/* each target worker's share: n_groups / nt, the first n_groups % nt one more */
	for (unsigned w = 0, i = 0; w < n; w++)
		if ((target >> w) & 1)
			want[w] = n_groups / nt + (i++ < n_groups % nt);
	for (unsigned g = 0; g < n_groups; g++) {
		owner[g] = table[g] & ~FP_RT_GROUP_MOVING;
		if (owner[g] < n)
			have[owner[g]]++;
	}
	/* Groups leave workers above their share (non-targets first, then the most loaded)
	 * for the worker furthest below its share. */
	for (unsigned g = 0; g < n_groups && k < max; g++) {
		unsigned from = owner[g], to = n;

		if (from < n && have[from] <= want[from])
			continue;
		for (unsigned w = 0; w < n; w++)
			if (have[w] < want[w] && (to == n || want[w] - have[w] > want[to] - have[to]))
				to = w;
		if (to == n)
			break;
		out[k++] = (struct ctl_move){ .group = (uint8_t)g, .to = (uint8_t)to };
		if (from < n)
			have[from]--;
		have[to]++;
	}
	return k;
}
