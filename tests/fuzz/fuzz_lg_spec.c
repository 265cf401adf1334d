/* fuzz_lg_spec.c: fp-loadgen's option values (apps/loadgen/dist.c, arrival.c): distributions, rates and arrival trace files on arbitrary text. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lg.h"

/*
 * Byte 0 picks the parser; the rest is its text (a NUL ends it early, as a command line
 * would), or for a trace the file's bytes.
 *   0, 1  lg_dist_parse, as bytes (--keysize, --valuesize) or as times (--service);
 *   2     lg_parse_rate (--rate, --sweep's ends);
 *   3     lg_arrival_parse("trace:FILE") of a file holding the bytes (--arrival).
 * What dist.c and arrival.c promise, checked after each parse:
 *   - the return is 0 or a negative errno; on failure the message is one non-empty line,
 *     NUL-terminated inside the buffer;
 *   - a distribution's CDF is within [0, 1] and never falls, its quantile never falls
 *     and is never NaN, its samples are its quantiles, its upper bound is not exceeded by
 *     any quantile, and its name is set;
 *   - a rate is finite and >= 0;
 *   - a trace's gaps are finite and >= 0 with a positive mean, and every gap it draws at
 *     any rate is finite and >= 0.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int rc, const char *err, size_t cap)
{
	const char *e = memchr(err, '\0', cap);

	if (rc >= 0 || !e || e == err || memchr(err, '\n', (size_t)(e - err)))
		abort();
}

/* Above the distribution's upper bound by more than rounding. */
static bool above(double v, double max)
{
	return v > max + fabs(max) * 1e-9 + 1e-300;
}

static void check_dist(const struct lg_dist *d)
{
	double prev_q = -INFINITY, prev_c = 0, max = lg_dist_max(d);
	struct lg_rng r;

	if (!d->name[0] || !memchr(d->name, '\0', sizeof(d->name)))
		abort();
	for (int i = 1; i < 64; i++) {
		double u = i / 64.0, q = lg_dist_quantile(d, u);

		if (isnan(q) || q < prev_q || above(q, max))
			abort();
		prev_q = q;
	}
	for (int i = -8; i <= 64; i++) {
		double x = i < 0 ? -pow(10, -i) : i * (max < INFINITY && max > 0 ? max / 32 : 37.0);
		double c = lg_dist_cdf(d, x);

		if (!(c >= 0 && c <= 1) || c < prev_c - 1e-12)
			abort();
		prev_c = c;
	}
	(void)lg_dist_mean(d);   /* may be infinite (a heavy tail); must not trap */
	lg_rng_seed(&r, 42);
	for (int i = 0; i < 16; i++) {
		double s = lg_dist_sample(d, &r);

		if (isnan(s) || above(s, max))
			abort();
	}
}

/* The bytes as a file (a memfd: nothing touches the disk), named as a user would. */
static int trace_case(const uint8_t *data, size_t size)
{
	struct lg_arrival a;
	struct lg_rng r;
	char spec[64], err[256];
	int fd = memfd_create("trace", 0), rc;

	if (fd < 0)
		return 0;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	snprintf(spec, sizeof(spec), "trace:/proc/self/fd/%d", fd);
	memset(err, 0x5a, sizeof(err));
	rc = lg_arrival_parse(&a, spec, err, sizeof(err));
	close(fd);
	if (rc) {
		check_err(rc, err, sizeof(err));
		if (a.trace_gaps)   /* freed on failure */
			abort();
		return 0;
	}
	if (a.kind != LG_ARRIVAL_TRACE || !a.trace_n || !(a.trace_mean > 0) ||
	    !isfinite(a.trace_mean))
		abort();
	for (size_t i = 0; i < a.trace_n; i++)
		if (!(a.trace_gaps[i] >= 0) || !isfinite(a.trace_gaps[i]))
			abort();
	lg_rng_seed(&r, 7);
	for (size_t i = 0; i < 2 * a.trace_n + 2 && i < 4096; i++) {
		double g = lg_arrival_gap_ns(&a, i % 3 ? 1e6 : 0.5, &r);

		if (!(g >= 0) || isnan(g))
			abort();
	}
	lg_arrival_free(&a);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text, err[256];
	uint8_t which;
	int rc;

	if (!size)
		return 0;
	which = data[0] % 4;
	data++;
	size--;
	if (which == 3)
		return trace_case(data, size);
	if (!(text = malloc(size + 1)))
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	memset(err, 0x5a, sizeof(err));
	if (which == 2) {
		double v = -1;

		rc = lg_parse_rate(text, &v);
		if (rc == 0 && !(v >= 0 && isfinite(v)))
			abort();
		if (rc != 0 && rc != -EINVAL)
			abort();
	} else {
		struct lg_dist d;

		rc = lg_dist_parse(&d, text, which == 1, err, sizeof(err));
		if (rc == 0)
			check_dist(&d);
		else
			check_err(rc, err, sizeof(err));
	}
	free(text);
	return 0;
}
