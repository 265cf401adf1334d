/* source.c: where simulated requests come from: arrivals, service-time draws and routing. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qsim.h"

/* Stream numbers of the three generators; see qs_rng_seed(). */
enum { STREAM_ARRIVAL = 1, STREAM_SERVICE = 2, STREAM_ROUTE = 3, STREAM_HASH = 4 };

/*
 * Parse a built-in distribution name: det, exp, bimodal1, bimodal2 (thesis §3.2.3) or
 * lognormal:CV. Returns 0 or -EINVAL. Empirical distributions come from a file instead,
 * through qs_dist_set_empirical().
 */
int qs_dist_parse(struct qs_dist *d, const char *spec)
{
	memset(d, 0, sizeof(*d));
	if (!strcmp(spec, "det"))
		d->kind = QS_DET;
	else if (!strcmp(spec, "exp"))
		d->kind = QS_EXP;
	else if (!strcmp(spec, "bimodal1"))
		d->kind = QS_BIM1;
	else if (!strcmp(spec, "bimodal2"))
		d->kind = QS_BIM2;
	else if (!strncmp(spec, "lognormal:", 10)) {
		char *end;
		double cv = strtod(spec + 10, &end);
		if (end == spec + 10 || *end || !isfinite(cv) || cv <= 0 || cv > 100)
			return -EINVAL;
		/* Mean 1 and CV c: sigma^2 = ln(1 + c^2), mu = -sigma^2 / 2. */
		d->kind = QS_LOGN;
		d->cv = cv;
		d->sigma = sqrt(log1p(cv * cv));
		d->mu = -0.5 * d->sigma * d->sigma;
	} else
		return -EINVAL;
	return 0;
}

/* Take ownership of @e and scale its values to mean 1, so S̄ stays the unit of time. */
void qs_dist_set_empirical(struct qs_dist *d, struct qs_empirical *e)
{
	memset(d, 0, sizeof(*d));
	d->kind = QS_EMP;
	d->emp = *e;
	for (size_t i = 0; i < e->n; i++)
		d->emp.val[i] /= e->mean;
	memset(e, 0, sizeof(*e));
}

void qs_dist_free(struct qs_dist *d)
{
	if (d->kind == QS_EMP)
		qs_empirical_free(&d->emp);
}

/* Smallest i with u <= cum[i]; cum is non-decreasing and ends at 1. */
static size_t cum_search(const double *cum, size_t n, double u)
{
	size_t lo = 0, hi = n - 1;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (u <= cum[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* One service time, in units of the mean. */
double qs_dist_sample(const struct qs_dist *d, struct qs_rng *r)
{
	switch (d->kind) {
	case QS_DET:
		return 1.0;
	case QS_EXP:
		return qs_rng_exp(r);
	case QS_BIM1: /* P[S/2] = .9, P[5.5 S] = .1 */
		return qs_rng_u01(r) <= 0.9 ? 0.5 : 5.5;
	case QS_BIM2: /* P[S/2] = .999, P[500.5 S] = .001 */
		return qs_rng_u01(r) <= 0.999 ? 0.5 : 500.5;
	case QS_LOGN:
		return exp(d->mu + d->sigma * qs_rng_normal(r));
	case QS_EMP:
		return d->emp.val[cum_search(d->emp.cum, d->emp.n, qs_rng_u01(r))];
	}
	return 1.0;
}

/* Coefficient of variation (std / mean) of the distribution, for the output. */
double qs_dist_cv(const struct qs_dist *d)
{
	switch (d->kind) {
	case QS_DET:
		return 0;
	case QS_EXP:
		return 1;
	case QS_BIM1:
		return 1.5; /* E[X^2] = .9/4 + .1 * 5.5^2 = 3.25 */
	case QS_BIM2:
		return sqrt(0.999 * 0.25 + 0.001 * 500.5 * 500.5 - 1);
	case QS_LOGN:
		return d->cv;
	case QS_EMP: {
		double m2 = 0, prev = 0;
		for (size_t i = 0; i < d->emp.n; i++) {
			m2 += (d->emp.cum[i] - prev) * d->emp.val[i] * d->emp.val[i];
			prev = d->emp.cum[i];
		}
		return sqrt(fmax(m2 - 1, 0));
	}
	}
	return 0;
}

/*
 * Set up routing for partitioned disciplines: @weights is a comma list of one weight per
 * queue (NULL: none), @flows a number of flows hashed to queues (0: none). With neither,
 * every request picks a queue uniformly at random, the thesis's assumption (§3.2.3).
 * Returns 0, -EINVAL for a bad list, -ENOMEM.
 */
int qs_route_setup(struct qs_cfg *c, const char *weights, unsigned flows)
{
	struct qs_route *r = &c->route;
	unsigned n = c->servers;

	memset(r, 0, sizeof(*r));
	if (flows) {
		struct qs_rng h;
		r->kind = QS_ROUTE_FLOWS;
		r->nflows = flows;
		r->flow_q = malloc(flows * sizeof(*r->flow_q));
		if (!r->flow_q)
			return -ENOMEM;
		/* A random hash of flow to queue, like RSS with a random key: uneven on purpose. */
		qs_rng_seed(&h, c->seed, STREAM_HASH);
		for (unsigned f = 0; f < flows; f++)
			r->flow_q[f] = qs_rng_below(&h, n);
	} else if (weights) {
		r->kind = QS_ROUTE_WEIGHTS;
		r->cum = calloc(n, sizeof(*r->cum));
		if (!r->cum)
			return -ENOMEM;
		const char *p = weights;
		double sum = 0;
		for (unsigned i = 0; i < n; i++) {
			char *end;
			double w = strtod(p, &end);
			/* n numbers exactly: a comma after each but the last, nothing after it */
			if (end == p || !isfinite(w) || w < 0 || *end != (i + 1 < n ? ',' : '\0'))
				return -EINVAL;
			sum += w;
			r->cum[i] = sum;
			p = end + 1;
		}
		if (!(sum > 0))
			return -EINVAL;
		for (unsigned i = 0; i < n; i++)
			r->cum[i] /= sum;
		r->cum[n - 1] = 1.0;
	}
	return 0;
}

void qs_route_free(struct qs_route *r)
{
	free(r->flow_q);
	free(r->cum);
	memset(r, 0, sizeof(*r));
}

/* Home queue of the next request. */
static uint32_t route_pick(struct qs_src *s, size_t i)
{
	const struct qs_cfg *c = s->cfg;
	const struct qs_route *r = &c->route;

	if (c->trace && c->trace->flow) {
		uint64_t x = c->seed ^ ((uint64_t)c->trace->flow[i] << 20);
		return (uint32_t)(qs_splitmix64(&x) % c->servers);
	}
	switch (r->kind) {
	case QS_ROUTE_FLOWS:
		return r->flow_q[qs_rng_below(&s->route, r->nflows)];
	case QS_ROUTE_WEIGHTS:
		return (uint32_t)cum_search(r->cum, c->servers, qs_rng_u01(&s->route));
	case QS_ROUTE_UNIFORM:
		break;
	}
	return qs_rng_below(&s->route, c->servers);
}

/*
 * Start the request stream for offered load @load (fraction of n servers' capacity).
 * Every load point reuses the same seeds (common random numbers): arrivals at load L are
 * the same draws stretched in time, so latency moves smoothly and monotonically with L
 * for FCFS, which is what lets qsim bisect for the maximum load meeting an SLO.
 */
void qs_src_init(struct qs_src *s, const struct qs_cfg *c, double load)
{
	memset(s, 0, sizeof(*s));
	s->cfg = c;
	qs_rng_seed(&s->arr, c->seed, STREAM_ARRIVAL);
	qs_rng_seed(&s->svc, c->seed, STREAM_SERVICE);
	qs_rng_seed(&s->route, c->seed, STREAM_ROUTE);
	s->gap = 1.0 / (load * c->servers);
	s->n = c->requests;
	if (c->trace) {
		s->tscale = c->trace_load / load / c->mean_us;
		if (s->n > c->trace->n)
			s->n = c->trace->n;
	}
	s->warm = (uint64_t)(c->warmup * (double)s->n);
}

/* The next request in arrival order; false when the run has served its requests. */
bool qs_src_next(struct qs_src *s, struct qs_req *r)
{
	const struct qs_cfg *c = s->cfg;
	const struct qs_trace *tr = c->trace;

	if (s->i >= s->n)
		return false;
	if (tr)
		s->t = (tr->t[s->i] - tr->t[0]) * s->tscale;
	else
		s->t += s->gap * qs_rng_exp(&s->arr);
	r->t = s->t;
	if (tr && tr->svc)
		r->svc = tr->svc[s->i] / c->trace_svc_mean;
	else
		r->svc = qs_dist_sample(&c->dist, &s->svc);
	r->work = r->svc + c->req_cost;
	r->q = c->disc == QS_FCFS || c->disc == QS_PS ? 0 : route_pick(s, s->i);
	r->rec = s->i >= s->warm;
	if (s->i == s->warm)
		s->t_first_rec = s->t;
	s->t_last = s->t;
	s->i++;
	return true;
}
