/* fuzz_hist.c: libFuzzer target: values from bytes into two histograms, merged, checked against sorting. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/hist.h>

/*
 * Input: a run of values, each a header byte (bits 0-2: 1 to 8 value bytes that follow,
 * little-endian; bits 3-6: shift left by 4 times that; bit 7: which histogram), then a
 * tail whose 16-bit words (when the values stop fitting) are extra percentiles to check,
 * in thousandths of a percent.
 */

#define MAX_VALUES 4096
#define MAX_PS     16

static struct fp_hist H[3]; /* two halves and the union recorded directly */
static uint64_t vals[MAX_VALUES];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "fuzz_hist: %s\n", #cond);                         \
			abort();                                                           \
		}                                                                          \
	} while (0)

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Parse values into the histograms; returns how many, leaving *@pos at the tail. */
static size_t record_values(const uint8_t *data, size_t size, size_t *pos)
{
	size_t n = 0;

	while (*pos < size && n < MAX_VALUES) {
		uint8_t hdr = data[*pos];
		size_t len = (hdr & 7u) + 1;
		if (*pos + 1 + len > size)
			break;
		uint64_t v = 0;
		for (size_t i = 0; i < len; i++)
			v |= (uint64_t)data[*pos + 1 + i] << (8 * i);
		v <<= 4 * ((hdr >> 3) & 15u);
		*pos += 1 + len;
		fp_hist_record(&H[hdr >> 7], v);
		fp_hist_record(&H[2], v);
		vals[n++] = v;
	}
	return n;
}

/* Nearest-rank value at @pm thousandths of a percent, from sorted vals[0..n). */
static uint64_t exact_at(size_t n, uint64_t pm)
{
	uint64_t rank = ((uint64_t)n * pm + 99999) / 100000;
	return vals[(rank ? rank : 1) - 1];
}

static void check_percentiles(const struct fp_hist *h, size_t n, uint64_t *pm, size_t np)
{
	uint64_t prev = 0;

	qsort(pm, np, sizeof(pm[0]), cmp_u64);
	for (size_t k = 0; k < np; k++) {
		uint64_t got = fp_hist_percentile(h, (double)pm[k] / 1000.0);
		uint64_t exact = exact_at(n, pm[k]);
		uint64_t diff = got > exact ? got - exact : exact - got;
		CHECK(got >= h->min && got <= h->max);
		CHECK(got >= prev); /* monotone in p */
		CHECK(diff <= exact / 256); /* bucket midpoint: within 1/256, well inside 1% */
		prev = got;
	}
	CHECK(fp_hist_percentile(h, 100.0) == h->max);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t fixed_pm[] = { 1, 50000, 90000, 99000, 99900, 99990, 100000 };
	uint64_t pm[FP_ARRAY_SIZE(fixed_pm) + MAX_PS];
	size_t pos = 0, np = 0;

	for (int i = 0; i < 3; i++)
		fp_hist_init(&H[i]);
	size_t n = record_values(data, size, &pos);
	for (size_t i = 0; i < FP_ARRAY_SIZE(fixed_pm); i++)
		pm[np++] = fixed_pm[i];
	for (; pos + 2 <= size && np < FP_ARRAY_SIZE(pm); pos += 2)
		pm[np++] = ((uint64_t)data[pos] | (uint64_t)data[pos + 1] << 8) % 100001;

	CHECK(H[0].count + H[1].count == n);
	fp_hist_merge(&H[0], &H[1]);
	CHECK(H[0].count == n && H[2].count == n);
	CHECK(memcmp(H[0].buckets, H[2].buckets, sizeof(H[2].buckets)) == 0);
	CHECK(H[0].min == H[2].min && H[0].max == H[2].max);
	if (n == 0) {
		CHECK(fp_hist_percentile(&H[0], 50.0) == 0 && H[0].min == UINT64_MAX && H[0].max == 0);
		return 0;
	}
	qsort(vals, n, sizeof(vals[0]), cmp_u64);
	CHECK(H[0].min == vals[0] && H[0].max == vals[n - 1]);
	check_percentiles(&H[0], n, pm, np);

	struct fp_hist_summary s;
	fp_hist_summarize(&H[0], &s);
	CHECK(s.count == n && s.min == vals[0] && s.max == vals[n - 1]);
	CHECK(s.p50 <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.p9999);
	CHECK(s.p9999 <= s.max && s.p50 >= s.min);
	CHECK(s.p99 == fp_hist_percentile(&H[0], 99.0));
	return 0;
}
