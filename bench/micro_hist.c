/* micro_hist.c: histogram micro-benchmarks: record of spread-out values, p99 lookup. */
#include <stdio.h>
#include <stdlib.h>

#include <flowplane/hist.h>

#include "bench.h"

#define VALUES 4096 /* precomputed, so the figure is the record and not the generator */

struct hist_bench {
	struct fp_hist h;
	uint64_t vals[VALUES];
};

static void body_record(void *arg, uint64_t n_ops)
{
	struct hist_bench *b = arg;

	for (uint64_t i = 0; i < n_ops; i++)
		fp_hist_record(&b->h, b->vals[i % VALUES]);
}

static void body_p99(void *arg, uint64_t n_ops)
{
	struct hist_bench *b = arg;

	for (uint64_t i = 0; i < n_ops; i++)
		bench_sink(fp_hist_percentile(&b->h, 99.0));
}

void bench_hist(const struct bench_opts *o)
{
	struct hist_bench *b = malloc(sizeof(*b));
	uint64_t x = 0x2545f4914f6cdd1dull;

	if (!b) {
		fprintf(stderr, "bench_hist: out of memory\n");
		return;
	}
	fp_hist_init(&b->h);
	/* latency-like values: 100 ns to ~17 ms, log-spread, so many buckets are touched */
	for (int i = 0; i < VALUES; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b->vals[i] = 100 + ((x >> 40) >> (x % 17));
	}
	bench_case(o, "hist record", body_record, b, 50000000);
	/* the p99 walk covers every bucket up to the 99th percentile of what was recorded */
	bench_case(o, "hist percentile (p99)", body_p99, b, 200000);
	free(b);
}
