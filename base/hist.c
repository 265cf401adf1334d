/* hist.c: percentiles, merging and bucket bounds of the log-linear latency histogram. */
#include <math.h>
#include <string.h>

#include <flowplane/hist.h>

/* Percentiles are taken to 1e-9 of a percent, so 99.9 means 99.9 and not 99.900000000000006. */
#define P_SCALE 1000000000.0
#define P_ONE   (100ull * 1000000000ull)

void fp_hist_init(struct fp_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX; /* so the first record sets both bounds */
	h->max = 0;
}

void fp_hist_merge(struct fp_hist *dst, const struct fp_hist *src)
{
	if (src->count == 0)
		return;
	for (unsigned i = 0; i < FP_HIST_BUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

/* Below 2^(SUB_BITS+1) a bucket holds one value; above, bucket k of power 2^(shift+7) holds 2^shift. */
uint64_t fp_hist_bucket_lo(unsigned idx)
{
	if (idx < 2 * FP_HIST_SUB_COUNT)
		return idx;
	unsigned shift = (idx >> FP_HIST_SUB_BITS) - 1;
	uint64_t sub = (idx & (FP_HIST_SUB_COUNT - 1)) | FP_HIST_SUB_COUNT;
	return sub << shift;
}

uint64_t fp_hist_bucket_hi(unsigned idx)
{
	if (idx < 2 * FP_HIST_SUB_COUNT)
		return idx;
	unsigned shift = (idx >> FP_HIST_SUB_BITS) - 1;
	return fp_hist_bucket_lo(idx) + ((1ull << shift) - 1); /* top bucket ends at UINT64_MAX */
}

/* The value reported for bucket @idx: its midpoint, but never outside what was recorded. */
static uint64_t bucket_value(const struct fp_hist *h, unsigned idx)
{
	uint64_t lo = fp_hist_bucket_lo(idx);
	uint64_t mid = lo + (fp_hist_bucket_hi(idx) - lo) / 2;

	if (mid < h->min)
		return h->min;
	if (mid > h->max)
		return h->max;
	return mid;
}

/*
 * Nearest rank of percentile @p (0 < p < 100) among @count values: ceil(p/100 * count),
 * at least 1, computed in integers from p rounded to 1e-9 so decimal percentiles land
 * exactly.
 */
static uint64_t rank_of(uint64_t count, double p)
{
	uint64_t p_scaled = (uint64_t)llround(p * P_SCALE);
	unsigned __int128 r = ((unsigned __int128)count * p_scaled + (P_ONE - 1)) / P_ONE;
	return r ? (uint64_t)r : 1;
}

/*
 * Bucket holding the @rank-th smallest value (1 <= rank <= count). Walk from whichever
 * end is nearer in rank, starting at the bucket of min or max: a p99 then visits only the
 * tail above it, not every bucket below.
 */
static unsigned bucket_of_rank(const struct fp_hist *h, uint64_t rank)
{
	unsigned lo = fp_hist_index(h->min), hi = fp_hist_index(h->max);
	uint64_t seen = 0;

	if (rank <= h->count / 2) {
		unsigned idx = lo;
		while (idx < hi && seen + h->buckets[idx] < rank)
			seen += h->buckets[idx++];
		return idx;
	}
	uint64_t need = h->count - rank + 1; /* the same value, counted from the top */
	unsigned idx = hi;
	while (idx > lo && seen + h->buckets[idx] < need)
		seen += h->buckets[idx--];
	return idx;
}

/* p >= 100 gives max exactly, p <= 0 min, rather than a bucket midpoint. */
uint64_t fp_hist_percentile(const struct fp_hist *h, double p)
{
	if (h->count == 0)
		return 0;
	if (p >= 100.0)
		return h->max;
	if (!(p > 0.0))
		return h->min;
	return bucket_value(h, bucket_of_rank(h, rank_of(h->count, p)));
}

double fp_hist_mean(const struct fp_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0.0;
}

void fp_hist_summarize(const struct fp_hist *h, struct fp_hist_summary *s)
{
	s->count = h->count;
	s->min = h->count ? h->min : 0;
	s->max = h->max;
	s->mean = fp_hist_mean(h);
	s->p50 = fp_hist_percentile(h, 50.0);
	s->p90 = fp_hist_percentile(h, 90.0);
	s->p99 = fp_hist_percentile(h, 99.0);
	s->p999 = fp_hist_percentile(h, 99.9);
	s->p9999 = fp_hist_percentile(h, 99.99);
}
