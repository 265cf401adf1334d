/* check.c: fp-loadgen's self-checks (KS test, t quantiles, batch-means CI) and per-point merging. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

/* ---- random numbers ---- */

void lg_rng_seed(struct lg_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) { /* splitmix64, as xoshiro's authors advise */
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		r->s[i] = z ^ (z >> 31);
	}
}

/* ---- Kolmogorov-Smirnov ---- */

/*
 * P(K > t) for Kolmogorov's limiting distribution K of sqrt(n) D (scipy's kstwobign.sf, the
 * p-value of scipy.stats.kstest(mode="asymp")). Two series, each fast where the other is
 * slow: for small t the theta-function form
 *   P(K <= t) = sqrt(2 pi) / t * sum_{k>=1} exp(-(2k-1)^2 pi^2 / (8 t^2)),
 * else P(K > t) = 2 sum_{k>=1} (-1)^(k-1) exp(-2 k^2 t^2).
 */
static double kolmogorov_sf(double t)
{
	double sum = 0;

	if (t <= 0.1)
		return 1;
	if (t < 1.0) {
		double w = -M_PI * M_PI / (8 * t * t);
		for (int k = 1; k <= 8; k++)
			sum += exp((2 * k - 1) * (2 * k - 1) * w);
		return 1 - sqrt(2 * M_PI) / t * sum;
	}
	for (int k = 1; k <= 8; k++)
		sum += (k & 1 ? 2 : -2) * exp(-2.0 * k * k * t * t);
	return sum < 0 ? 0 : sum > 1 ? 1 : sum;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void lg_ks_test(double *x, size_t n, lg_cdf_fn cdf, double rate, struct lg_ks *out)
{
	double d = 0;

	out->n = n;
	if (n == 0) {
		out->d = 0, out->p = 1;
		return;
	}
	qsort(x, n, sizeof(*x), cmp_double);
	for (size_t i = 0; i < n; i++) {
		double f = cdf(x[i], rate);
		d = fmax(d, fmax(f - (double)i / (double)n, (double)(i + 1) / (double)n - f));
	}
	out->d = d;
	out->p = kolmogorov_sf(sqrt((double)n) * d);
}

/* ---- Student's t ---- */

/* Continued fraction of the regularized incomplete beta (Lentz's method; Numerical Recipes
 * 6.4). */
static double betacf(double a, double b, double x)
{
	const double tiny = 1e-300;
	double c = 1, d = 1 - (a + b) * x / (a + 1), h;

	d = 1 / (fabs(d) < tiny ? tiny : d);
	h = d;
	for (int m = 1; m <= 300; m++) {
		for (int odd = 0; odd < 2; odd++) {
			double num = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
					 : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
			d = 1 + num * d;
			d = 1 / (fabs(d) < tiny ? tiny : d);
			c = 1 + num / c;
			c = fabs(c) < tiny ? tiny : c;
			h *= d * c;
			if (odd && fabs(d * c - 1) < 1e-15)
				return h;
		}
	}
	return h;
}

/* I_x(a, b), the regularized incomplete beta function. */
static double betai(double a, double b, double x)
{
	if (x <= 0)
		return 0;
	if (x >= 1)
		return 1;
	double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
	if (x < (a + 1) / (a + b + 2))
		return exp(lbt) * betacf(a, b, x) / a;
	return 1 - exp(lbt) * betacf(b, a, 1 - x) / b;
}

/* P(|T| > t) for Student's t with @df degrees of freedom. */
static double t_two_sided(double t, double df) { return betai(df / 2, 0.5, df / (df + t * t)); }

double lg_t_quantile(double alpha, unsigned df)
{
	double lo = 0, hi = 1;

	if (df == 0 || !(alpha > 0 && alpha < 1))
		return NAN;
	while (t_two_sided(hi, df) > alpha && hi < 1e12)
		hi *= 2;
	for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; i++) { /* bisection: P falls with t */
		double mid = (lo + hi) / 2;
		if (t_two_sided(mid, df) > alpha)
			lo = mid;
		else
			hi = mid;
	}
	return (lo + hi) / 2;
}

/* ---- coarse histograms and the batch-means interval ---- */

static unsigned chist_index(uint64_t v)
{
	if (v < (2ull << LG_CHIST_SUB_BITS))
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - LG_CHIST_SUB_BITS;
	return (shift << LG_CHIST_SUB_BITS) + (unsigned)(v >> shift);
}

/* The middle of bucket @idx (the inverse of chist_index, to half a bucket). */
static uint64_t chist_mid(unsigned idx)
{
	if (idx < (2u << LG_CHIST_SUB_BITS))
		return idx;
	unsigned shift = (idx >> LG_CHIST_SUB_BITS) - 1;
	uint64_t lo = (uint64_t)((idx & ((1u << LG_CHIST_SUB_BITS) - 1)) | (1u << LG_CHIST_SUB_BITS)) << shift;
	return lo + (((1ull << shift) - 1) >> 1);
}

void lg_chist_record(struct lg_chist *h, uint64_t v)
{
	uint32_t *b = &h->b[chist_index(v)];

	if (*b != UINT32_MAX) { /* saturate rather than wrap; count stays the sum of b[] */
		(*b)++;
		h->count++;
	}
}

void lg_chist_merge(struct lg_chist *dst, const struct lg_chist *src)
{
	for (unsigned i = 0; i < LG_CHIST_BUCKETS; i++) {
		uint64_t s = (uint64_t)dst->b[i] + src->b[i];
		uint32_t v = s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
		dst->count += v - dst->b[i];
		dst->b[i] = v;
	}
}

uint64_t lg_chist_percentile(const struct lg_chist *h, double p)
{
	if (h->count == 0)
		return 0;
	double r = ceil(p / 100 * (double)h->count); /* nearest rank */
	uint64_t rank = r < 1 ? 1 : r > (double)h->count ? h->count : (uint64_t)r, seen = 0;

	for (unsigned i = 0; i < LG_CHIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank)
			return chist_mid(i);
	}
	return 0;
}

void lg_p99_ci(const struct lg_chist *batches, unsigned n, struct lg_ci *out)
{
	double x[LG_BATCHES], sum = 0, ss = 0;
	unsigned k = 0;

	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < n && k < LG_BATCHES; i++)
		if (batches[i].count >= LG_BATCH_MIN) {
			x[k] = (double)lg_chist_percentile(&batches[i], 99);
			sum += x[k++];
		}
	out->k = k;
	out->mean = k ? sum / k : 0;
	if (k < 5)
		return;
	for (unsigned i = 0; i < k; i++)
		ss += (x[i] - out->mean) * (x[i] - out->mean);
	double half = lg_t_quantile(0.05, k - 1) * sqrt(ss / (k - 1)) / sqrt((double)k);
	out->lo = out->mean - half;
	out->hi = out->mean + half;
	out->ok = true;
}

/* ---- reservoirs ---- */

void lg_reservoir_add(struct lg_reservoir *res, double v, struct lg_rng *r)
{
	res->seen++;
	if (res->n < LG_KS_SAMPLES) {
		res->x[res->n++] = v;
		return;
	}
	uint64_t j = lg_rng_below(r, res->seen); /* Vitter's R: keep v with probability n/seen */
	if (j < LG_KS_SAMPLES)
		res->x[j] = v;
}

/* Keep a uniformly chosen @k of @x[0..n) in @out[0..k), in order (Knuth's algorithm S);
 * @out may be @x. */
static void select_k(double *out, const double *x, uint32_t n, uint32_t k, struct lg_rng *r)
{
	uint32_t taken = 0;

	for (uint32_t i = 0; i < n && taken < k; i++)
		if (lg_rng_below(r, n - i) < k - taken)
			out[taken++] = x[i];
}

/*
 * Each reservoir is a uniform sample of the values it saw, so a uniform sample of m of the
 * union draws its items one by one from the two populations without replacement
 * (hypergeometric): the number from @dst is k1, each side's items then chosen uniformly
 * among its reservoir. A side whose reservoir is not full holds its whole population, so
 * it is never asked for more than it has.
 */
void lg_reservoir_merge(struct lg_reservoir *dst, const struct lg_reservoir *src, struct lg_rng *r)
{
	uint64_t r1 = dst->seen, r2 = src->seen;
	uint32_t m = dst->n + src->n > LG_KS_SAMPLES ? LG_KS_SAMPLES : dst->n + src->n, k1 = 0;

	for (uint32_t i = 0; i < m; i++) {
		if (lg_rng_below(r, r1 + r2) < r1)
			k1++, r1--;
		else
			r2--;
	}
	if (k1 > dst->n) /* only with reservoirs that Vitter's R did not fill */
		k1 = dst->n;
	if (m - k1 > src->n)
		k1 = m - src->n;
	select_k(dst->x, dst->x, dst->n, k1, r);
	select_k(dst->x + k1, src->x, src->n, m - k1, r);
	dst->n = m;
	dst->seen += src->seen;
}

/* ---- measurement points ---- */

void lg_point_init(struct lg_point *pt, double target_rps, double duration_s)
{
	memset(pt, 0, sizeof(*pt));
	pt->target_rps = target_rps;
	pt->duration_s = duration_s;
	fp_hist_init(&pt->latency);
	fp_hist_init(&pt->latency_sent);
	fp_hist_init(&pt->slip);
}

void lg_point_merge(struct lg_point *dst, const struct lg_point *src, struct lg_rng *r)
{
	/* what describes the point rather than a worker: dst's unless it has none */
	if (dst->target_rps == 0)
		dst->target_rps = src->target_rps;
	if (dst->duration_s == 0)
		dst->duration_s = src->duration_s;
	if (dst->gap_rate == 0)
		dst->gap_rate = src->gap_rate;
	dst->scheduled += src->scheduled;
	dst->sent += src->sent;
	dst->completed += src->completed;
	dst->ok += src->ok;
	dst->misses += src->misses;
	dst->errors += src->errors;
	dst->timeouts += src->timeouts;
	dst->dropped += src->dropped;
	dst->reconnects += src->reconnects;
	dst->loop_gaps += src->loop_gaps;
	dst->loop_gap_ns += src->loop_gap_ns;
	dst->loop_stalls += src->loop_stalls;
	fp_hist_merge(&dst->latency, &src->latency);
	fp_hist_merge(&dst->latency_sent, &src->latency_sent);
	fp_hist_merge(&dst->slip, &src->slip);
	for (unsigned i = 0; i < LG_BATCHES; i++)
		lg_chist_merge(&dst->batches[i], &src->batches[i]);
	lg_reservoir_merge(&dst->gaps, &src->gaps, r);
	dst->partial |= src->partial;
}

static void point_ks(const struct lg_point *pt, lg_cdf_fn cdf, struct lg_ks *ks)
{
	double *x;

	memset(ks, 0, sizeof(*ks));
	if (!cdf || pt->gaps.n < LG_KS_MIN || !(pt->gap_rate > 0))
		return;
	x = malloc(pt->gaps.n * sizeof(*x)); /* lg_ks_test sorts; the point is const */
	if (!x)
		return;
	memcpy(x, pt->gaps.x, pt->gaps.n * sizeof(*x));
	lg_ks_test(x, pt->gaps.n, cdf, pt->gap_rate, ks);
	free(x);
}

void lg_point_verdict(const struct lg_point *pt, lg_cdf_fn cdf, double max_slip_ns,
		      bool closed_loop, struct lg_verdict *v)
{
	double dur = pt->duration_s > 0 ? pt->duration_s : 0;

	memset(v, 0, sizeof(*v));
	/* achieved counts every answer, errors included: the server did answer them */
	v->offered_rps = dur > 0 ? (double)pt->scheduled / dur : 0;
	v->achieved_rps = dur > 0 ? (double)(pt->ok + pt->misses + pt->errors) / dur : 0;
	fp_hist_summarize(&pt->latency, &v->lat);
	fp_hist_summarize(&pt->latency_sent, &v->lat_sent);
	fp_hist_summarize(&pt->slip, &v->slip);
	lg_p99_ci(pt->batches, LG_BATCHES, &v->p99_ci);
	point_ks(pt, closed_loop ? NULL : cdf, &v->ks);
	v->ok_rate = closed_loop || v->achieved_rps >= 0.99 * v->offered_rps;
	v->ok_slip = (double)v->slip.p99 <= max_slip_ns;
	v->ok_ks = v->ks.n == 0 || v->ks.p >= 0.01;
	v->ok_ci = v->p99_ci.ok && (v->p99_ci.hi - v->p99_ci.lo) / 2 <= 0.1 * (double)v->lat.p99;
	v->valid = v->ok_rate && v->ok_slip && pt->dropped == 0 && pt->timeouts == 0;
}
