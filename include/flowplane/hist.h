/* hist.h: log-linear latency histogram with bounded relative error, mergeable across cores. */
#pragma once

#include <stdint.h>

#include <flowplane/compiler.h>

/*
 * Values (nanoseconds, or any unit) below 2^(SUB_BITS+1) get a bucket each; above, every
 * power of two is cut into 2^SUB_BITS equal buckets, so a bucket is at most 1/128 of its
 * lower bound wide (HdrHistogram's layout with 2 significant digits). Reported values are
 * bucket midpoints clamped to [min, max]: relative error at most 1/256 (< 0.4%).
 */
#define FP_HIST_SUB_BITS 7
#define FP_HIST_SUB_COUNT (1u << FP_HIST_SUB_BITS)
#define FP_HIST_BUCKETS   ((64u - FP_HIST_SUB_BITS + 1u) << FP_HIST_SUB_BITS)

struct fp_hist {
	uint64_t count;
	uint64_t min;
	uint64_t max;
	double   sum; /* for the mean; double so it cannot overflow */
	uint64_t buckets[FP_HIST_BUCKETS];
};

struct fp_hist_summary {
	uint64_t count;
	uint64_t min, max;
	double   mean;
	uint64_t p50, p90, p99, p999, p9999;
};

/* Bucket index of @v. */
static inline unsigned fp_hist_index(uint64_t v)
{
	if (v < (2ull << FP_HIST_SUB_BITS))
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - FP_HIST_SUB_BITS;
	return (shift << FP_HIST_SUB_BITS) + (unsigned)(v >> shift);
}

/* Reset @h to empty. */
void fp_hist_init(struct fp_hist *h);

/* Record @n occurrences of @v (none when n is 0: min and max must not move). */
static inline void fp_hist_record_n(struct fp_hist *h, uint64_t v, uint64_t n)
{
	if (n == 0)
		return;
	h->buckets[fp_hist_index(v)] += n;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->count += n;
	h->sum += (double)v * (double)n;
}

/* Record one value. */
static inline void fp_hist_record(struct fp_hist *h, uint64_t v) { fp_hist_record_n(h, v, 1); }

/* Add every count of @src into @dst (per-core histograms summed when read). */
void fp_hist_merge(struct fp_hist *dst, const struct fp_hist *src);

/* Lowest and highest value that land in bucket @idx. */
uint64_t fp_hist_bucket_lo(unsigned idx);
uint64_t fp_hist_bucket_hi(unsigned idx);

/*
 * The value at percentile @p (0 < p <= 100) by the nearest-rank definition: the smallest
 * recorded value v such that at least p% of values are <= v, to within the bucket error.
 * 0 for an empty histogram.
 */
uint64_t fp_hist_percentile(const struct fp_hist *h, double p);

/* Mean of recorded values (0 when empty). */
double fp_hist_mean(const struct fp_hist *h);

/* Count, min, max, mean and the usual percentiles in one pass. */
void fp_hist_summarize(const struct fp_hist *h, struct fp_hist_summary *s);
