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

char *ctl_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return NULL;
	do {
		if (len + 4096 + 1 > cap) {
			char *nb = realloc(buf, cap = len + 65536);
			if (!nb || cap > (1u << 20)) {
				free(nb ? nb : buf);
				fclose(f);
				errno = EFBIG;
				return NULL;
			}
			buf = nb;
		}
		n = fread(buf + len, 1, 4096, f);
		len += n;
	} while (n);
	fclose(f);
	buf[len] = '\0';
	if (strlen(buf) != len) {
		free(buf);
		errno = EINVAL;
		return NULL;
	}
	return buf;
}

const char *ctl_read_error(int err)
{
	return err == EINVAL ? "it holds a NUL byte: not a text file"
	       : err == EFBIG ? "it is over 1 MiB" : strerror(err);
}

/* ---- parsing: "key = value" lines ---- */

enum kind { K_UINT, K_DOUBLE, K_EWMA, K_LADDER };

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
	{ "ladder", K_LADDER, 0, 0, 0 },
	{ "up_drain", K_UINT, offsetof(struct ctl_policy, up_drain), 0, 1 },
	{ "down_fit", K_UINT, offsetof(struct ctl_policy, down_fit), 0, 1 },
};

char *ctl_trim(char *s)
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

/* "W@GHZ" rungs separated by commas and/or blanks, capacity (W x GHZ) rising. */
static int parse_ladder(const char *v, struct ctl_policy *p)
{
	unsigned n = 0;

	while (*v) {
		char *end;
		double w, g;

		v += strspn(v, ", \t");
		if (!*v)
			break;
		errno = 0;
		w = strtod(v, &end);
		if (errno || end == v || *end != '@' || w != floor(w) || w < 1 || w > CTL_MAX_WORKERS)
			return -1;
		v = end + 1;
		g = strtod(v, &end);
		if (errno || end == v || !isfinite(g) || !(g > 0) || g > 10 ||
		    (*end && !strchr(", \t", *end)))
			return -1;
		v = end;
		if (n == CTL_MAX_RUNGS ||
		    (n && !(w * g > p->rung[n - 1].workers * p->rung[n - 1].ghz)))
			return -1;
		p->rung[n++] = (struct ctl_rung){ .workers = (unsigned)w, .ghz = g };
	}
	if (!n)
		return -1;
	p->n_rungs = n;
	return 0;
}

static int set_key(struct ctl_policy *p, const struct key *k, const char *v)
{
	char *end, *field = (char *)p + k->off;   /* memcpy: no cast past its alignment */
	unsigned u;

	if (k->kind == K_LADDER)
		return parse_ladder(v, p);
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
	if (k->kind == K_LADDER)
		return "WORKERS@GHZ rungs (workers 1-64, GHz above 0 up to 10) separated by commas, "
		       "each of more capacity (workers x GHz) than the one before, at most 128";
	snprintf(buf, len, "%s from %g to %g", k->kind == K_UINT ? "a whole number" : "a number",
		 k->lo, k->hi);
	return buf;
}

int ctl_policy_parse(const char *text, struct ctl_policy *p, char *err, size_t errlen)
{
	char line[2048], range[200];
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
		char *s = ctl_trim(line), *eq = strchr(s, '=');
		if (!*s)
			continue;
		if (!eq) {
			snprintf(err, errlen, "line %u: expected 'key = value', got '%.60s'", no, s);
			return -EINVAL;
		}
		*eq = '\0';
		char *key = ctl_trim(s), *val = ctl_trim(eq + 1);
		const struct key *k = NULL;
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (!strcmp(keys[i].name, key))
				k = &keys[i];
		if (!k) {
			snprintf(err, errlen, "line %u: unknown key '%.40s' (keys: interval_ms, "
				 "delay_max_us, up_ewma, down_ewma, idle_margin, min_workers, "
				 "max_workers, down_hold_ms, ladder, up_drain, down_fit)", no, key);
			return -EINVAL;
		}
		if (set_key(p, k, val)) {
			snprintf(err, errlen, "line %u: %s must be %s (got '%.40s')", no, k->name,
				 range_of(k, range, sizeof(range)), val);
			return -EINVAL;
		}
	}
	if ((p->up_drain || p->down_fit) && !p->n_rungs) {
		snprintf(err, errlen, "%s steps a ladder: it needs a ladder line",
			 p->up_drain ? "up_drain" : "down_fit");
		return -EINVAL;
	}
	if (p->n_rungs && (p->max_workers || p->min_workers != 1)) {
		snprintf(err, errlen, "ladder and min_workers/max_workers both set: the ladder "
			 "names every configuration; give one or the other");
		return -EINVAL;
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

/* What the loop sees, reduced to IX's two signals: the worst queueing delay among the
 * polling workers (the up EWMA) and their mean idle share (the down EWMA). */
struct signals {
	unsigned active;
	int parked, last;              /* the first parked worker, the last polling one */
	double delay, idle;
};

static struct signals signals_of(const struct ctl_policy *p, const struct ctl_view *v)
{
	struct signals s = { .parked = -1, .last = -1 };
	double idle_sum = 0;

	for (unsigned w = 0; w < v->n; w++) {
		const struct ctl_wview *x = &v->w[w];

		if (x->parked) {
			if (s.parked < 0)
				s.parked = (int)w;
			continue;
		}
		s.active++;
		s.last = (int)w;
		/* a worker that published nothing since the last tick slept all of it */
		double d = x->fresh ? x->delay_us[p->up_ewma] : 0.0;
		idle_sum += x->fresh ? x->idle[p->down_ewma] : 1.0;
		if (d > s.delay)
			s.delay = d;
	}
	s.idle = s.active ? idle_sum / s.active : 1.0;
	return s;
}

struct ctl_decision ctl_decide(const struct ctl_policy *p, const struct ctl_view *v)
{
	unsigned max_workers = p->max_workers && p->max_workers < v->n ? p->max_workers : v->n;
	struct signals s;

	if (v->moving || v->draining >= 0)
		return decision(CTL_HOLD, 0, "a change in progress", 0, 0);
	s = signals_of(p, v);
	if (!s.active)
		return decision(CTL_HOLD, 0, "no worker polling", 0, 0);
	/* Up first: a queue that grows costs the SLO; idle cores cost only energy. */
	if (s.delay > p->delay_max_us) {
		if (s.parked >= 0 && s.active < max_workers)
			return decision(CTL_UP, (unsigned)s.parked, "queueing delay %.1f us > %.1f us",
					s.delay, p->delay_max_us);
		return decision(CTL_HOLD, 0, "queueing delay %.1f us > %.1f us, no worker to add",
				s.delay, p->delay_max_us);
	}
	double need = 1.0 / s.active + p->idle_margin;
	if (s.active > p->min_workers && s.idle > need &&
	    v->now_ms - v->last_change_ms >= p->down_hold_ms)
		return decision(CTL_DOWN, (unsigned)s.last, "idle %.2f > %.2f", s.idle, need);
	return decision(CTL_HOLD, 0, "idle %.2f, delay %.1f us", s.idle, s.delay);
}

static double capacity(const struct ctl_rung *r)
{
	return r->workers * r->ghz;
}

struct ctl_decision ctl_decide_ladder(const struct ctl_policy *p, const struct ctl_view *v,
				      unsigned cur)
{
	struct signals s;

	if (!p->n_rungs || cur >= p->n_rungs)
		return decision(CTL_HOLD, 0, "no such rung", 0, 0);
	if (v->moving || v->draining >= 0)
		return decision(CTL_HOLD, cur, "a change in progress", 0, 0);
	s = signals_of(p, v);
	if (!s.active)
		return decision(CTL_HOLD, cur, "no worker polling", 0, 0);
	if (s.delay > p->delay_max_us) {
		unsigned to = cur + 1;

		if (p->up_drain) {
			double want = capacity(&p->rung[cur]) *
				      (1.0 + s.delay / (p->interval_ms * 1000.0));

			while (to + 1 < p->n_rungs && capacity(&p->rung[to]) < want)
				to++;
		}
		if (to < p->n_rungs)
			return decision(CTL_UP, to, "queueing delay %.1f us > %.1f us", s.delay,
					p->delay_max_us);
		return decision(CTL_HOLD, cur, "queueing delay %.1f us > %.1f us, top rung",
				s.delay, p->delay_max_us);
	}
	if (cur > 0) {
		double need = 1.0 - capacity(&p->rung[cur - 1]) / capacity(&p->rung[cur]) +
			      p->idle_margin;

		if (s.idle > need && v->now_ms - v->last_change_ms >= p->down_hold_ms) {
			unsigned to = cur - 1;

			/* down_fit: IX's test for every rung below, not just the next: the
			 * lowest whose capacity still exceeds what is used plus the margin */
			if (p->down_fit) {
				double want = capacity(&p->rung[cur]) * (1.0 - s.idle + p->idle_margin);

				while (to > 0 && capacity(&p->rung[to - 1]) > want)
					to--;
			}
			return decision(CTL_DOWN, to, "idle %.2f > %.2f", s.idle, need);
		}
	}
	return decision(CTL_HOLD, cur, "idle %.2f, delay %.1f us", s.idle, s.delay);
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
