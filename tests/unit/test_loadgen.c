/* test_loadgen.c: fp-loadgen's pure parts: distributions, arrivals, patterns, self-checks, protocols. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "lg.h"

/*
 * Statistical tests use sample sizes and tolerances that leave at least six standard
 * deviations (or a DKW bound below 1e-15) between the expected value and a failure, so a
 * different $FP_TEST_SEED does not make them flake; the reference values were computed
 * with scipy 1.14 (stats.kstwobign, stats.t, stats.genextreme, stats.genpareto).
 */

static struct lg_rng rng;
static char err[256];

static void seed_rng(uint64_t salt) { lg_rng_seed(&rng, fp_test_seed() ^ salt); }

static void assert_close(double got, double want, double tol, const char *what)
{
	if (!(fabs(got - want) <= tol))
		fail_msg("%s: got %.9g, want %.9g +- %.3g", what, got, want, tol);
}

static void assert_rel(double got, double want, double rel, const char *what)
{
	assert_close(got, want, fabs(want) * rel, what);
}

/* ---- random numbers ---- */

static void test_rng(void **state)
{
	struct lg_rng a, b;
	(void)state;

	lg_rng_seed(&a, 1);
	lg_rng_seed(&b, 1);
	for (int i = 0; i < 100; i++)
		assert_int_equal(lg_rng_next(&a), lg_rng_next(&b));
	lg_rng_seed(&b, 2);
	assert_true(lg_rng_next(&a) != lg_rng_next(&b));
	for (int i = 0; i < 10000; i++) {
		double u = lg_rng_unit(&a);
		assert_true(u >= 0 && u < 1);
		assert_true(lg_rng_below(&a, 7) < 7);
	}
}

/* ---- distributions ---- */

static struct lg_dist parse_ok(const char *spec, bool time)
{
	struct lg_dist d;

	if (lg_dist_parse(&d, spec, time, err, sizeof(err)))
		fail_msg("lg_dist_parse(%s): %s", spec, err);
	assert_string_equal(d.name, spec);
	return d;
}

static void test_dist_parse(void **state)
{
	struct lg_dist d;
	(void)state;

	d = parse_ok("42", false);
	assert_int_equal(d.kind, LG_DIST_FIXED);
	assert_close(d.a, 42, 0, "plain");
	d = parse_ok("10us", true);
	assert_close(d.a, 10000, 0, "10us");
	d = parse_ok("7", true); /* a bare time is in microseconds */
	assert_close(d.a, 7000, 0, "bare time");
	d = parse_ok("exp:2ms", true);
	assert_int_equal(d.kind, LG_DIST_EXP);
	assert_close(d.a, 2e6, 0, "exp:2ms");
	d = parse_ok("uniform:500ns,1s", true);
	assert_close(d.a, 500, 0, "500ns");
	assert_close(d.b, 1e9, 0, "1s");
	d = parse_ok("gev:1us,2us,0.1", true); /* the shape is not a time */
	assert_close(d.a, 1000, 0, "gev loc");
	assert_close(d.b, 2000, 0, "gev scale");
	assert_close(d.c, 0.1, 0, "gev shape");
	d = parse_ok("bimodal:0.9,1us,10us", true);
	assert_int_equal(d.kind, LG_DIST_BIMODAL);
	assert_close(d.p, 0.9, 0, "bimodal p");
	assert_close(d.b, 10000, 0, "bimodal b");
	d = parse_ok("bimodal1:10us", true);
	assert_close(d.p, 0.9, 0, "bimodal1 p");
	assert_close(d.a, 5000, 0, "bimodal1 a");
	assert_close(d.b, 55000, 0, "bimodal1 b");
	d = parse_ok("pareto:15,214.476,0.348238", false);
	assert_int_equal(d.kind, LG_DIST_GPARETO);
	d = parse_ok("fb_ia", true);
	assert_rel(lg_dist_mean(&d), 18968.816454819894, 1e-9, "fb_ia in ns");

	static const char *const bad[] = {
		"uniform:5,2", "exp:-1", "exp:0", "gev:1,0,1", "bimodal:2,1,1", "nope:1", "exp:1,2",
		"exp:", "10q", "", "normal:1,-1", "fixed:1,", "bimodal1:x", "inf", "uniform:1;2",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (lg_dist_parse(&d, bad[i], false, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' parsed", bad[i]);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(lg_dist_parse(&d, "fixed:1xs", true, err, sizeof(err)), -EINVAL);
	assert_int_equal(lg_dist_parse(&d, "gev:1,2,0.1us", true, err, sizeof(err)), -EINVAL);
	/* what the spec holds is quoted on one line (found by fuzz_lg_spec) */
	assert_int_equal(lg_dist_parse(&d, "exp:1\nrm -rf", true, err, sizeof(err)), -EINVAL);
	assert_null(strchr(err, '\n'));
	assert_non_null(strstr(err, "'exp:1?rm -rf'"));
}

/* Sample @n draws: their mean against lg_dist_mean within @tol, and the empirical CDF
 * against lg_dist_cdf at a few quantiles (DKW: off by 0.01 with probability < 1e-15). */
static void check_dist(const char *spec, size_t n, double tol)
{
	struct lg_dist d = parse_ok(spec, false);
	static const double us[] = { 0.05, 0.25, 0.5, 0.75, 0.95 };
	double xs[5], sum = 0;
	size_t below[5] = { 0 };

	for (int j = 0; j < 5; j++)
		xs[j] = lg_dist_quantile(&d, us[j]);
	for (size_t i = 0; i < n; i++) {
		double x = lg_dist_sample(&d, &rng);
		sum += x;
		for (int j = 0; j < 5; j++)
			below[j] += x <= xs[j];
	}
	assert_close(sum / (double)n, lg_dist_mean(&d), tol, spec);
	for (int j = 0; j < 5; j++)
		assert_close((double)below[j] / (double)n, lg_dist_cdf(&d, xs[j]), 0.01, spec);
}

static void test_dist_kinds(void **state)
{
	(void)state;
	seed_rng(1);
	/* tolerances: 6 sd / sqrt(n) of each distribution, or more */
	check_dist("fixed:5", 1000, 0);
	check_dist("uniform:2,8", 400000, 0.02);
	check_dist("exp:10", 400000, 0.1);
	check_dist("normal:50,10", 400000, 0.1);
	check_dist("normal:10,20", 400000, 0.2); /* clamped at 0: mean 13.9559 */
	check_dist("gev:30.7984,8.20449,0.078688", 400000, 0.15);
	check_dist("gpareto:15,214.476,0.348238", 400000, 6);
	check_dist("bimodal:0.9,5,55", 400000, 0.15);
	check_dist("fb_value", 400000, 6);

	struct lg_dist d = parse_ok("normal:10,20", false);
	assert_rel(lg_dist_mean(&d), 13.955931150128414, 1e-6, "clamped normal mean");
	d = parse_ok("exp:10", false);
	assert_rel(lg_dist_cdf(&d, 10), 1 - exp(-1), 1e-12, "exp cdf");
	d = parse_ok("uniform:2,8", false);
	assert_close(lg_dist_cdf(&d, 3.5), 0.25, 1e-12, "uniform cdf");
	assert_close(lg_dist_cdf(&d, 9), 1, 0, "uniform cdf above");
	assert_close(lg_dist_max(&d), 8, 0, "uniform max");
	d = parse_ok("bimodal:0.9,5,55", false);
	assert_close(lg_dist_cdf(&d, 4.9), 0, 0, "bimodal below");
	assert_close(lg_dist_cdf(&d, 5), 0.9, 1e-12, "bimodal step");
	assert_close(lg_dist_cdf(&d, 55), 1, 1e-12, "bimodal top");
	assert_close(lg_dist_mean(&d), 10, 1e-12, "bimodal mean");
	/* the quantile inverts the CDF */
	static const char *const cont[] = { "exp:3", "normal:50,10", "gev:1,2,-0.2", "gev:1,2,0",
					    "gpareto:0,1,0.5", "gpareto:0,1,-0.25", "uniform:1,2" };
	for (size_t i = 0; i < sizeof(cont) / sizeof(cont[0]); i++) {
		d = parse_ok(cont[i], false);
		for (double u = 0.01; u < 1; u += 0.07)
			assert_close(lg_dist_cdf(&d, lg_dist_quantile(&d, u)), u, 1e-8, cont[i]);
	}
	d = parse_ok("gpareto:0,1,-0.25", false);
	assert_close(lg_dist_max(&d), 4, 1e-12, "bounded gpareto max");
	/* a bimodal whose first value is the larger: the quantile still never falls, the
	 * smaller value below 1 - P (found by fuzz_lg_spec) */
	d = parse_ok("bimodal:0.9,55,5", false);
	assert_close(lg_dist_quantile(&d, 0.05), 5, 0, "bimodal, larger first: low");
	assert_close(lg_dist_quantile(&d, 0.5), 55, 0, "bimodal, larger first: high");
	check_dist("bimodal:0.9,55,5", 400000, 0.15);
}

/* mutilate's Facebook fits: medians, means and ranges from scipy. */
static void test_dist_fb(void **state)
{
	struct lg_dist key = parse_ok("fb_key", false), val = parse_ok("fb_value", false);
	size_t n = 400000, in_range = 0, two = 0, small = 0, *sizes = calloc(4096, sizeof(size_t));
	(void)state;

	assert_non_null(sizes);
	seed_rng(2);
	assert_close(lg_dist_quantile(&key, 0.5), 33.84923340753511, 1e-6, "fb_key median");
	assert_rel(lg_dist_mean(&key), 36.22305004867375, 1e-6, "fb_key mean");
	assert_close(lg_dist_quantile(&key, 0.01), 18.992250986593522, 1e-6, "fb_key 1%");
	assert_close(lg_dist_quantile(&key, 0.99), 76.2756449749539, 1e-6, "fb_key 99%");
	assert_rel(lg_dist_mean(&val), 194.44483299704498, 1e-6, "fb_value mean");
	assert_close(lg_dist_cdf(&val, 14), 0.44155, 1e-9, "fb_value head");
	assert_close(lg_dist_cdf(&val, 1024), 0.9655555979845509, 1e-6, "fb_value <= 1 KB");
	for (size_t i = 0; i < n; i++) {
		double k = round(lg_dist_sample(&key, &rng)), v = floor(lg_dist_sample(&val, &rng));
		in_range += k >= 20 && k <= 70;
		assert_true(v >= 0);
		two += v == 2;
		small += v <= 1024;
		sizes[v < 4095 ? (size_t)v : 4095]++;
	}
	/* P(20 <= round(key) <= 70) = 0.96994; fb_value: P(2) = 0.1782, P(<= 1 KB) = 0.96556 */
	assert_close((double)in_range / (double)n, 0.9699394750665067, 0.005, "fb_key in 20..70");
	assert_close((double)two / (double)n, 0.17820, 0.005, "fb_value 2 B");
	assert_close((double)small / (double)n, 0.9655555979845509, 0.005, "fb_value <= 1 KB");
	size_t seen = 0, median = 0;
	while (seen + sizes[median] < n / 2)
		seen += sizes[median++];
	assert_true(median >= 37 && median <= 41); /* scipy: 39.17 */
	free(sizes);
}

/* ZygOS's service-time set: every member has mean S. */
static void test_dist_service(void **state)
{
	static const char *const kinds[] = { "fixed", "exp", "bimodal1", "bimodal2" };
	static const double tol[] = { 0, 0.01, 0.01, 0.08 }; /* 6 sd of the mean of 2M draws */
	struct lg_dist d;
	(void)state;

	seed_rng(3);
	for (int k = 0; k < 4; k++) {
		assert_int_equal(lg_dist_service(&d, kinds[k], 10000, err, sizeof(err)), 0);
		assert_rel(lg_dist_mean(&d), 10000, 1e-12, kinds[k]);
		double sum = 0;
		for (int i = 0; i < 2000000; i++)
			sum += lg_dist_sample(&d, &rng);
		assert_rel(sum / 2e6, 10000, tol[k], kinds[k]);
	}
	assert_int_equal(lg_dist_service(&d, "bimodal2", 10000, err, sizeof(err)), 0);
	assert_close(d.p, 0.999, 0, "bimodal2 p");
	assert_close(d.b, 500.5 * 10000, 0, "bimodal2 slow");
	assert_int_equal(lg_dist_service(&d, "lognormal", 10000, err, sizeof(err)), -EINVAL);
	assert_int_equal(lg_dist_service(&d, "exp", 0, err, sizeof(err)), -EINVAL);
}

/* ---- arrivals ---- */

static void test_arrival_means(void **state)
{
	struct lg_arrival a;
	double sum = 0;
	const int n = 400000;
	(void)state;

	seed_rng(4);
	assert_int_equal(lg_arrival_parse(&a, "poisson", err, sizeof(err)), 0);
	assert_non_null(lg_arrival_cdf(&a));
	for (int i = 0; i < n; i++) {
		double g = lg_arrival_gap_ns(&a, 100000, &rng);
		assert_true(g > 0);
		sum += g;
	}
	/* mean 10 us, sd of the mean 10 us / sqrt(n) = 0.16%: 1.5% is 9 sd */
	assert_rel(sum / n, 10000, 0.015, "poisson mean gap");
	assert_int_equal(lg_arrival_parse(&a, "fixed", err, sizeof(err)), 0);
	assert_null(lg_arrival_cdf(&a));
	for (int i = 0; i < 100; i++)
		assert_close(lg_arrival_gap_ns(&a, 250000, &rng), 4000, 1e-9, "fixed gap");
	assert_int_equal(lg_arrival_parse(&a, "uniform", err, sizeof(err)), -EINVAL);
	assert_int_equal(lg_arrival_parse(&a, "trace:", err, sizeof(err)), -EINVAL);
}

/* Poisson gaps pass a KS test against the exponential of their rate, and fail against a
 * wrong rate; fixed gaps fail against the exponential. */
static void test_arrival_ks(void **state)
{
	static double x[LG_KS_SAMPLES];
	struct lg_arrival a;
	struct lg_ks ks;
	const double rate = 50000;
	(void)state;

	seed_rng(5);
	assert_int_equal(lg_arrival_parse(&a, "poisson", err, sizeof(err)), 0);
	lg_cdf_fn cdf = lg_arrival_cdf(&a);
	for (int i = 0; i < LG_KS_SAMPLES; i++)
		x[i] = lg_arrival_gap_ns(&a, rate, &rng);
	lg_ks_test(x, LG_KS_SAMPLES, cdf, rate, &ks);
	assert_int_equal(ks.n, LG_KS_SAMPLES);
	assert_true(ks.p > 1e-6); /* a true null: p < 1e-6 once in a million seeds */
	for (int i = 1; i < LG_KS_SAMPLES; i++)
		assert_true(x[i - 1] <= x[i]); /* sorted in place */
	/* 1.5 times off either way: D ~ 0.148, sqrt(n) D ~ 9.4 (sd ~ 1), p < 1e-30 */
	lg_ks_test(x, LG_KS_SAMPLES, cdf, rate * 1.5, &ks);
	assert_true(ks.p < 1e-12);
	lg_ks_test(x, LG_KS_SAMPLES, cdf, rate / 1.5, &ks);
	assert_true(ks.p < 1e-12);
	assert_int_equal(lg_arrival_parse(&a, "fixed", err, sizeof(err)), 0);
	for (int i = 0; i < LG_KS_SAMPLES; i++)
		x[i] = lg_arrival_gap_ns(&a, rate, &rng);
	lg_ks_test(x, LG_KS_SAMPLES, cdf, rate, &ks);
	assert_true(ks.p < 1e-12);
	assert_close(ks.d, 1 - exp(-1), 1e-9, "fixed gaps against exp: D = F(mean)");
}

static char *write_temp(const char *text)
{
	char *path = strdup("/tmp/lg_trace_XXXXXX");
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_arrival_trace(void **state)
{
	char *path = write_temp("# gaps in us\n10\n\n  30 # a comment\n20\r\n");
	char spec[64];
	struct lg_arrival a, copy;
	(void)state;

	snprintf(spec, sizeof(spec), "trace:%s", path);
	assert_int_equal(lg_arrival_parse(&a, spec, err, sizeof(err)), 0);
	assert_int_equal(a.kind, LG_ARRIVAL_TRACE);
	assert_int_equal(a.trace_n, 3);
	assert_close(a.trace_mean, 20, 1e-12, "trace mean");
	assert_null(lg_arrival_cdf(&a));
	/* scaled to 1000/s (mean 1 ms): 0.5, 1.5, 1 ms, then again */
	static const double want[] = { 0.5e6, 1.5e6, 1e6, 0.5e6, 1.5e6, 1e6, 0.5e6 };
	for (int i = 0; i < 7; i++)
		assert_close(lg_arrival_gap_ns(&a, 1000, &rng), want[i], 1e-6, "trace gap");
	copy = a;
	copy.trace_pos = 2; /* a worker's own offset */
	assert_close(lg_arrival_gap_ns(&copy, 2000, &rng), 0.5e6, 1e-6, "offset copy");
	lg_arrival_free(&a);
	assert_null(a.trace_gaps);
	unlink(path);
	free(path);
}

/* Errors name the file and the line. */
static void expect_trace_error(const char *text, int line)
{
	char *path = write_temp(text), spec[64], want[96];
	struct lg_arrival a;

	snprintf(spec, sizeof(spec), "trace:%s", path);
	snprintf(want, sizeof(want), "%s:%d:", path, line);
	assert_int_equal(lg_arrival_parse(&a, spec, err, sizeof(err)), -EINVAL);
	if (!strstr(err, want))
		fail_msg("error '%s' does not name '%s'", err, want);
	assert_null(a.trace_gaps);
	unlink(path);
	free(path);
}

static void test_arrival_trace_errors(void **state)
{
	struct lg_arrival a;
	(void)state;

	expect_trace_error("10\n20\nabc\n", 3);
	expect_trace_error("10\n-5\n", 2);
	expect_trace_error("1\n2 3\n", 2);
	expect_trace_error("nan\n", 1);
	expect_trace_error("# only\n0\n0\n", 3); /* no positive gap: the last line */
	expect_trace_error("", 0);
	assert_int_equal(lg_arrival_parse(&a, "trace:/nonexistent/lg_trace", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/lg_trace"));
}

/* ---- load patterns ---- */

static struct lg_pattern pattern_ok(const char *spec, double duration, uint64_t seed)
{
	struct lg_pattern p;

	if (lg_pattern_parse(&p, spec, duration, seed, err, sizeof(err)))
		fail_msg("lg_pattern_parse(%s): %s", spec, err);
	return p;
}

static void test_pattern_shapes(void **state)
{
	struct lg_pattern p;
	(void)state;

	p = pattern_ok("slope:0:1M", 10, 1);
	static const double st[] = { 0, 2.5, 5, 7.5, 10, 11 }, sv[] = { 0, 5e5, 1e6, 5e5, 0, 0 };
	for (int i = 0; i < 6; i++)
		assert_close(lg_pattern_rate(&p, st[i]), sv[i], 1e-6, "slope");
	p = pattern_ok("slope:100k:200k", 4, 1);
	assert_close(lg_pattern_rate(&p, 1), 150000, 1e-6, "slope from lo");

	/* IX: +500 KRPS every 10 s; here from 100k by 250k every 2 s, held at 1M */
	p = pattern_ok("step:100k:1M:250k:2", 20, 1);
	static const double tt[] = { 0, 1.99, 2, 4, 6.5, 8, 19 }, tv[] = { 1e5, 1e5, 3.5e5, 6e5, 8.5e5, 1e6, 1e6 };
	for (int i = 0; i < 7; i++)
		assert_close(lg_pattern_rate(&p, tt[i]), tv[i], 1e-6, "step");

	/* with HOLD_S: up, 1 s at the top, then down the same steps, never below LO */
	p = pattern_ok("step:100k:1M:250k:2:1", 30, 1);
	static const double ut[] = { 0, 6, 7.99, 8, 8.99, 9, 10.99, 11, 13, 15, 17, 29 },
			    uv[] = { 1e5, 8.5e5, 8.5e5, 1e6, 1e6, 7.5e5, 7.5e5, 5e5, 2.5e5, 1e5, 1e5, 1e5 };
	for (int i = 0; i < 12; i++)
		assert_close(lg_pattern_rate(&p, ut[i]), uv[i], 1e-6, "step with hold");

	p = pattern_ok("sine:0:1M:10", 20, 1);
	static const double nt[] = { 0, 2.5, 5, 7.5, 10 }, nv[] = { 0, 5e5, 1e6, 5e5, 0 };
	for (int i = 0; i < 5; i++)
		assert_close(lg_pattern_rate(&p, nt[i]), nv[i], 1e-3, "sine");
	p.kind = LG_PATTERN_NONE;
	assert_close(lg_pattern_rate(&p, 3), 0, 0, "none: lo");
}

/* IX's sine+noise: noise uniform in [-N, +N], constant within each NOISE_S slot, redrawn
 * between slots, a function of the seed; the rate clamped to [0, HI]. */
static void test_pattern_noise(void **state)
{
	struct lg_pattern p = pattern_ok("sine:100k:1M:60:250k:5", 240, 7), q = p, r;
	bool differs = false, seed_differs = false, hit_hi = false, negative = false;
	(void)state;

	q.noise_rps = 0;
	r = pattern_ok("sine:100k:1M:60:250k:5", 240, 8);
	assert_close(p.noise_s, 5, 0, "noise slot");
	double prev_off = 0;
	for (int slot = 0; slot < 48; slot++) {
		double t0 = slot * 5 + 0.1, t1 = slot * 5 + 4.9;
		double off0 = lg_pattern_rate(&p, t0) - lg_pattern_rate(&q, t0);
		double off1 = lg_pattern_rate(&p, t1) - lg_pattern_rate(&q, t1);
		double v0 = lg_pattern_rate(&p, t0);
		assert_true(v0 >= 0 && v0 <= 1e6);
		hit_hi |= v0 == 1e6;
		negative |= lg_pattern_rate(&p, t0) < lg_pattern_rate(&q, t0);
		assert_true(fabs(off0) <= 250000 + 1e-6);
		double v1 = lg_pattern_rate(&p, t1);
		if (v0 > 0 && v0 < 1e6 && v1 > 0 && v1 < 1e6) /* neither clamped */
			assert_close(off0, off1, 1e-6, "noise constant within a slot");
		differs |= slot > 0 && fabs(off0 - prev_off) > 1;
		prev_off = off0;
		seed_differs |= lg_pattern_rate(&p, t0) != lg_pattern_rate(&r, t0);
		assert_close(lg_pattern_rate(&p, t0), lg_pattern_rate(&p, t0), 0, "pure");
	}
	assert_true(differs);
	assert_true(seed_differs);
	assert_true(hit_hi);   /* near the crest, positive noise is clamped */
	assert_true(negative); /* and some noise is negative */
}

static void test_pattern_parse(void **state)
{
	struct lg_pattern p;
	double v;
	(void)state;

	static const char *const bad[] = {
		"slope:1M:0", "slope:0:0", "step:0:1M:0:1", "step:0:1M:1k", "sine:0:1M", "sine:0:1M:0",
		"bogus:1:2", "slope:0:1M:5", "sine:0:1M::5", "sine:0:1M:10:1k:5:6", "slope:-1:5",
		"slope:0:1x", "", "slope",
		/* times outside 1 ms..1e6 s, more than 1e6 steps: a step's edges would blur */
		"step:1:4:1:2e-40:3", "step:1:4:1:1:2e6", "sine:0:1M:0.0005", "step:0:2M:1:1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (lg_pattern_parse(&p, bad[i], 10, 1, err, sizeof(err)) != -EINVAL)
			fail_msg("pattern '%s' parsed", bad[i]);
	assert_int_equal(lg_pattern_parse(&p, "slope:0:1M", 0, 1, err, sizeof(err)), -EINVAL);
	p = pattern_ok("sine:0:1M:10:50k", 10, 1);
	assert_close(p.noise_rps, 50000, 0, "noise");
	assert_close(p.noise_s, 5, 0, "default noise slot");
	p = pattern_ok("step:0:1M:1:0.001:1e6", 240, 1); /* the bounds themselves */
	p = pattern_ok("step:0:6.2M:500k:10", 240, 1);
	assert_close(p.hi, 6.2e6, 0, "6.2M");

	assert_int_equal(lg_parse_rate("250k", &v), 0);
	assert_close(v, 250000, 0, "250k");
	assert_int_equal(lg_parse_rate("1.5M", &v), 0);
	assert_close(v, 1.5e6, 0, "1.5M");
	assert_int_equal(lg_parse_rate("1000", &v), 0);
	assert_close(v, 1000, 0, "1000");
	static const char *const badr[] = { "", "-1", "1x", "nan", "inf", "k", "1kk", "1m" };
	for (size_t i = 0; i < sizeof(badr) / sizeof(badr[0]); i++)
		assert_int_equal(lg_parse_rate(badr[i], &v), -EINVAL);
}

/* ---- self-checks ---- */

static double uniform01_cdf(double x, double rate)
{
	(void)rate;
	return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* p-values of known statistics: a sample whose D against U(0, 1) is exactly t/sqrt(n). */
static void test_ks_pvalues(void **state)
{
	static const double t[] = { 0.5, 0.8, 1.0, 1.2, 1.36, 1.63, 2.0, 3.0 };
	static const double p[] = { 0.9639452436648751, 0.5441424115741981, 0.26999967167735456,
				    0.11224966667072497, 0.049485876755377876, 0.009846364888486529,
				    0.0006709252557796953, 3.045995948942526e-08 };
	const size_t n = 10000;
	double *x = malloc(n * sizeof(*x));
	struct lg_ks ks;
	(void)state;

	assert_non_null(x);
	for (int k = 0; k < 8; k++) {
		double shift = t[k] / sqrt((double)n) - 0.5 / (double)n;
		for (size_t i = 0; i < n; i++)
			x[i] = ((double)i + 0.5) / (double)n + shift;
		lg_ks_test(x, n, uniform01_cdf, 0, &ks);
		assert_close(ks.d, t[k] / 100, 1e-12, "D");
		assert_rel(ks.p, p[k], 1e-6, "kolmogorov p");
	}
	/* scipy.stats.kstest(x, expon.cdf, method="asymp") on a fixed sample (x in ns) */
	double s[] = { 0.1, 0.5, 0.9, 1.3, 2.0, 2.2, 3.5, 0.05, 0.7, 1.1 };
	struct lg_arrival a = { .kind = LG_ARRIVAL_POISSON };
	lg_ks_test(s, 10, lg_arrival_cdf(&a), 1e9, &ks);
	assert_close(ks.d, 0.20341469620859048, 1e-12, "kstest D");
	assert_rel(ks.p, 0.8023813517059927, 1e-6, "kstest p");
	lg_ks_test(s, 0, uniform01_cdf, 0, &ks);
	assert_int_equal(ks.n, 0);
	free(x);
}

static void test_t_quantile(void **state)
{
	static const unsigned df[] = { 1, 2, 4, 9, 19, 30, 100 };
	static const double q975[] = { 12.706204736432095, 4.302652729696142, 2.7764451051977987,
				       2.2621571628540993, 2.093024054408263, 2.0422724563012373,
				       1.9839715184496334 };
	static const double q995[] = { 63.65674116287399, 9.92484320091807, 4.604094871415897,
				       3.2498355415921254, 2.860934606449914, 2.7499956535670305,
				       2.6258905214380177 };
	(void)state;

	for (int i = 0; i < 7; i++) {
		assert_rel(lg_t_quantile(0.05, df[i]), q975[i], 1e-9, "t 0.975");
		assert_rel(lg_t_quantile(0.01, df[i]), q995[i], 1e-9, "t 0.995");
	}
	assert_true(isnan(lg_t_quantile(0.05, 0)));
	assert_true(isnan(lg_t_quantile(0, 5)));
}

static void test_chist(void **state)
{
	struct lg_chist *h = calloc(2, sizeof(*h));
	(void)state;

	assert_non_null(h);
	assert_int_equal(lg_chist_percentile(&h[0], 99), 0);
	for (uint64_t v = 1; v <= 10000; v++)
		lg_chist_record(&h[0], v);
	assert_int_equal(h[0].count, 10000);
	/* buckets are 1/16 of their lower bound wide: within 6.25% */
	assert_rel((double)lg_chist_percentile(&h[0], 50), 5000, 0.0625, "chist p50");
	assert_rel((double)lg_chist_percentile(&h[0], 99), 9900, 0.0625, "chist p99");
	assert_rel((double)lg_chist_percentile(&h[0], 100), 10000, 0.0625, "chist max");
	for (uint64_t v = 0; v < 32; v++) /* below 32, exact */
		lg_chist_record(&h[1], v);
	assert_int_equal(lg_chist_percentile(&h[1], 50), 15);
	lg_chist_record(&h[1], UINT64_MAX);
	assert_true(lg_chist_percentile(&h[1], 100) > (UINT64_MAX / 16) * 15);
	lg_chist_merge(&h[0], &h[1]);
	assert_int_equal(h[0].count, 10033);
	uint64_t sum = 0;
	for (unsigned i = 0; i < LG_CHIST_BUCKETS; i++)
		sum += h[0].b[i];
	assert_int_equal(sum, h[0].count);
	free(h);
}

/* Batch i's p99 is v[i] exactly: 989 samples of 10 and 11 of v[i] (nearest rank 990). */
static void fill_batch(struct lg_chist *b, uint64_t v)
{
	for (int i = 0; i < 989; i++)
		lg_chist_record(b, 10);
	for (int i = 0; i < 11; i++)
		lg_chist_record(b, v);
}

static void test_p99_ci(void **state)
{
	struct lg_chist *b = calloc(LG_BATCHES, sizeof(*b));
	struct lg_ci ci;
	(void)state;

	assert_non_null(b);
	for (int i = 0; i < LG_BATCHES; i++)
		fill_batch(&b[i], 20 + (uint64_t)(i % 5) * 2); /* 20..28, mean 24 */
	lg_p99_ci(b, LG_BATCHES, &ci);
	/* sd = sqrt(160 / 19), half-width = t(0.975, 19) sd / sqrt(20) */
	double half = 2.093024054408263 * sqrt(160.0 / 19) / sqrt(20.0);
	assert_true(ci.ok);
	assert_int_equal(ci.k, 20);
	assert_close(ci.mean, 24, 1e-12, "ci mean");
	assert_close(ci.lo, 24 - half, 1e-6, "ci lo");
	assert_close(ci.hi, 24 + half, 1e-6, "ci hi");

	/* batches under LG_BATCH_MIN samples do not count; under 5 batches, no interval */
	memset(b, 0, LG_BATCHES * sizeof(*b));
	for (int i = 0; i < 4; i++)
		fill_batch(&b[i], 30);
	for (int i = 0; i < LG_BATCH_MIN - 1; i++)
		lg_chist_record(&b[10], 5);
	lg_p99_ci(b, LG_BATCHES, &ci);
	assert_false(ci.ok);
	assert_int_equal(ci.k, 4);
	assert_close(ci.lo, 0, 0, "unknown lo");
	assert_close(ci.hi, 0, 0, "unknown hi");
	fill_batch(&b[5], 30); /* five identical batches: a zero-width interval */
	lg_p99_ci(b, LG_BATCHES, &ci);
	assert_true(ci.ok);
	assert_close(ci.lo, 30, 0, "flat lo");
	assert_close(ci.hi, 30, 0, "flat hi");
	free(b);
}

static void test_reservoir(void **state)
{
	struct lg_reservoir *r = calloc(3, sizeof(*r));
	double sum = 0;
	(void)state;

	assert_non_null(r);
	seed_rng(6);
	for (int i = 0; i < 100000; i++)
		lg_reservoir_add(&r[0], i, &rng);
	assert_int_equal(r[0].seen, 100000);
	assert_int_equal(r[0].n, LG_KS_SAMPLES);
	for (unsigned i = 0; i < r[0].n; i++)
		sum += r[0].x[i];
	/* a uniform sample of 0..99999: mean 50000, sd of the mean 28868 / sqrt(4000) = 456 */
	assert_close(sum / r[0].n, 50000, 3000, "reservoir mean");

	/* merged 30000 zeros with 10000 ones: a quarter ones (sd 0.007) */
	memset(r, 0, 3 * sizeof(*r));
	for (int i = 0; i < 30000; i++)
		lg_reservoir_add(&r[0], 0, &rng);
	for (int i = 0; i < 10000; i++)
		lg_reservoir_add(&r[1], 1, &rng);
	lg_reservoir_merge(&r[0], &r[1], &rng);
	assert_int_equal(r[0].n, LG_KS_SAMPLES);
	assert_int_equal(r[0].seen, 40000);
	sum = 0;
	for (unsigned i = 0; i < r[0].n; i++)
		sum += r[0].x[i];
	assert_close(sum / r[0].n, 0.25, 0.05, "merged proportion");

	/* small reservoirs merge whole; an empty one changes nothing */
	memset(r, 0, 3 * sizeof(*r));
	for (int i = 0; i < 10; i++)
		lg_reservoir_add(&r[0], i, &rng);
	for (int i = 10; i < 30; i++)
		lg_reservoir_add(&r[1], i, &rng);
	lg_reservoir_merge(&r[0], &r[1], &rng);
	lg_reservoir_merge(&r[0], &r[2], &rng);
	assert_int_equal(r[0].n, 30);
	assert_int_equal(r[0].seen, 30);
	bool have[30] = { false };
	for (unsigned i = 0; i < 30; i++)
		have[(int)r[0].x[i]] = true;
	for (int i = 0; i < 30; i++)
		assert_true(have[i]);
	free(r);
}

static struct lg_point *point_new(double target, double duration)
{
	struct lg_point *pt = malloc(sizeof(*pt));

	assert_non_null(pt);
	lg_point_init(pt, target, duration);
	return pt;
}

static void test_hist_merge(void **state)
{
	struct fp_hist *h = malloc(2 * sizeof(*h));
	(void)state;

	assert_non_null(h);
	fp_hist_init(&h[0]);
	fp_hist_init(&h[1]);
	for (uint64_t v = 1; v <= 1000; v++)
		fp_hist_record(&h[v & 1], v * 1000);
	fp_hist_merge(&h[0], &h[1]);
	assert_int_equal(h[0].count, 1000);
	assert_int_equal(h[0].min, 1000);
	assert_int_equal(h[0].max, 1000000);
	assert_rel((double)fp_hist_percentile(&h[0], 50), 500000, 0.01, "merged p50");
	free(h);
}

static void test_point_merge(void **state)
{
	struct lg_point *a = point_new(1000, 2), *b = point_new(1000, 2), *z = point_new(0, 0);
	(void)state;

	seed_rng(7);
	a->scheduled = 10, a->sent = 9, a->completed = 8, a->ok = 6, a->misses = 1, a->errors = 1;
	a->timeouts = 1, a->dropped = 1, a->reconnects = 2, a->gap_rate = 500;
	b->scheduled = 20, b->sent = 19, b->completed = 18, b->ok = 16, b->misses = 1, b->errors = 1;
	b->timeouts = 0, b->dropped = 2, b->reconnects = 1, b->gap_rate = 500, b->partial = true;
	for (uint64_t i = 0; i < 300; i++) {
		fp_hist_record(&a->latency, 1000 + i);
		fp_hist_record(&b->slip, 10 + i);
		lg_chist_record(&a->batches[i % LG_BATCHES], i);
		lg_chist_record(&b->batches[i % LG_BATCHES], i);
		lg_reservoir_add(&a->gaps, (double)i, &rng);
		lg_reservoir_add(&b->gaps, (double)i, &rng);
	}
	lg_point_merge(z, a, &rng);
	lg_point_merge(z, b, &rng);
	assert_close(z->target_rps, 1000, 0, "target");
	assert_close(z->duration_s, 2, 0, "duration");
	assert_close(z->gap_rate, 500, 0, "gap rate");
	assert_int_equal(z->scheduled, 30);
	assert_int_equal(z->sent, 28);
	assert_int_equal(z->completed, 26);
	assert_int_equal(z->ok + z->misses + z->errors, 26);
	assert_int_equal(z->timeouts, 1);
	assert_int_equal(z->dropped, 3);
	assert_int_equal(z->reconnects, 3);
	assert_int_equal(z->latency.count, 300);
	assert_int_equal(z->slip.count, 300);
	assert_int_equal(z->slip.min, 10);
	for (int i = 0; i < LG_BATCHES; i++)
		assert_int_equal(z->batches[i].count, 30);
	assert_int_equal(z->gaps.n, 600);
	assert_int_equal(z->gaps.seen, 600);
	assert_true(z->partial);
	free(a), free(b), free(z);
}

static void test_point_verdict(void **state)
{
	struct lg_point *pt = point_new(1000, 2);
	struct lg_arrival poisson = { .kind = LG_ARRIVAL_POISSON };
	lg_cdf_fn cdf = lg_arrival_cdf(&poisson);
	struct lg_verdict v;
	(void)state;

	seed_rng(8);
	pt->scheduled = 2000, pt->ok = 1900, pt->misses = 50, pt->errors = 40;
	pt->completed = 1990, pt->gap_rate = 1000;
	for (int i = 0; i < 1000; i++) {
		fp_hist_record(&pt->slip, 1000);
		fp_hist_record(&pt->latency, 20000);
		/* gaps at the exponential's quantiles (i + 0.5) / n: D = 0.5 / n, p = 1 */
		lg_reservoir_add(&pt->gaps, -1e6 * log1p(-(i + 0.5) / 1000), &rng);
	}
	for (int b = 0; b < LG_BATCHES; b++)
		for (int i = 0; i < 200; i++)
			lg_chist_record(&pt->batches[b], 20000);
	lg_point_verdict(pt, cdf, 50000, false, &v);
	assert_close(v.offered_rps, 1000, 1e-9, "offered");
	assert_close(v.achieved_rps, 995, 1e-9, "achieved counts errors");
	assert_true(v.ok_rate);
	assert_true(v.ok_slip);
	assert_int_equal(v.ks.n, 1000);
	assert_true(v.ok_ks);
	assert_true(v.ok_ci);
	assert_true(v.valid);
	assert_int_equal(v.lat.count, 1000);

	lg_point_verdict(pt, cdf, 500, false, &v); /* slip p99 1 us over 0.5 us */
	assert_false(v.ok_slip);
	assert_false(v.valid);
	pt->errors = 20; /* 985/s < 990/s */
	lg_point_verdict(pt, cdf, 50000, false, &v);
	assert_false(v.ok_rate);
	assert_false(v.valid);
	lg_point_verdict(pt, cdf, 50000, true, &v); /* closed loop: no rate, no KS */
	assert_true(v.ok_rate);
	assert_int_equal(v.ks.n, 0);
	assert_true(v.valid);
	pt->dropped = 1;
	lg_point_verdict(pt, cdf, 50000, true, &v);
	assert_false(v.valid);
	pt->dropped = 0, pt->timeouts = 1;
	lg_point_verdict(pt, cdf, 50000, true, &v);
	assert_false(v.valid);
	pt->timeouts = 0;
	pt->gap_rate = 2000; /* the gaps do not follow this rate */
	lg_point_verdict(pt, cdf, 50000, false, &v);
	assert_false(v.ok_ks);
	assert_true(v.ok_slip); /* KS is reported, not part of valid */
	lg_point_verdict(pt, NULL, 50000, false, &v);
	assert_int_equal(v.ks.n, 0);
	assert_true(v.ok_ks);
	free(pt);
}

/* ---- protocols ---- */

static struct lg_proto *proto_new(const struct lg_proto_ops *ops, const struct lg_proto_config *cfg)
{
	struct lg_proto *p = ops->create(cfg, err, sizeof(err));

	if (!p)
		fail_msg("%s create: %s", ops->name, err);
	return p;
}

/* Parse @data[0..len) from an exactly sized copy, so ASan sees any read past len. */
static long parse_exact(const struct lg_proto_ops *ops, const struct lg_proto *p,
			const struct lg_req *req, const void *data, size_t len, enum lg_status *st)
{
	uint8_t *copy = malloc(len ? len : 1);
	long rc;

	assert_non_null(copy);
	memcpy(copy, data, len);
	rc = ops->parse(p, req, copy, len, st);
	free(copy);
	return rc;
}

static void test_proto_find(void **state)
{
	(void)state;
	assert_ptr_equal(lg_proto_find("echo"), &lg_proto_echo);
	assert_ptr_equal(lg_proto_find("memcache"), &lg_proto_memcache);
	assert_ptr_equal(lg_proto_find("spin"), &lg_proto_spin);
	assert_ptr_equal(lg_proto_find("http"), &lg_proto_http);
	assert_null(lg_proto_find("gopher"));
}

/* dns: a query file read as dnsperf does; each request a header with a random ID and one
 * of the questions; the answer matched by ID and question (names without case), graded
 * by RCODE and TC; anything else, or a file that is not a query list, refused. */
static void test_dns(void **state)
{
	char path[] = "/tmp/fp-lg-dns-XXXXXX";
	int fd = mkstemp(path);
	(void)state;

	assert_true(fd >= 0);
	static const char file[] = "; a comment\n\nwww.Example.com A\n# another\n"
				   "example.com. soa\n";
	assert_int_equal(write(fd, file, strlen(file)), (ssize_t)strlen(file));
	close(fd);
	struct lg_proto_config cfg = { .name = "dns", .queries = path };
	struct lg_proto *p = proto_new(&lg_proto_dns, &cfg);
	const struct lg_proto_ops *ops = &lg_proto_dns;
	assert_true(ops->datagram);
	uint8_t buf[512], resp[512];
	struct lg_req req = { 0 };
	enum lg_status st;
	static const uint8_t www[] = "\3www\7Example\3com\0\0\1\0\1";
	static const uint8_t soa[] = "\7example\3com\0\0\6\0\1";
	unsigned seen[2] = { 0, 0 };

	for (int i = 0; i < 64; i++) {
		size_t n = ops->encode(p, &rng, buf, sizeof(buf), &req);
		bool is_www = req.len == 0;
		const uint8_t *q = is_www ? www : soa;
		size_t qlen = is_www ? sizeof(www) - 1 : sizeof(soa) - 1;
		seen[req.len]++;
		assert_int_equal(n, 12 + qlen);
		assert_true(n <= ops->max_request(p));
		assert_int_equal(buf[0] << 8 | buf[1], req.aux);
		assert_int_equal(buf[2], 0);          /* a query, opcode 0, RD off */
		assert_int_equal(buf[5], 1);
		assert_memory_equal(buf + 12, q, qlen);
		/* the answer: QR and AA set, the question back in another case, an answer RR */
		memcpy(resp, buf, n);
		resp[2] = 0x84;
		resp[3] = 0x00;
		for (size_t k = 12; k < n - 4; k++)
			if (resp[k] >= 'a' && resp[k] <= 'z')
				resp[k] ^= 0x20;
		memset(resp + n, 0xab, 16);
		assert_int_equal(parse_exact(ops, p, &req, resp, n + 16, &st), (long)(n + 16));
		assert_int_equal(st, LG_RESP_OK);
		resp[3] = 3;                           /* NXDOMAIN: a miss */
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), (long)n);
		assert_int_equal(st, LG_RESP_MISS);
		resp[3] = 2;                           /* SERVFAIL */
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), (long)n);
		assert_int_equal(st, LG_RESP_ERROR);
		resp[3] = 0;
		resp[2] = 0x86;                        /* TC */
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), (long)n);
		assert_int_equal(st, LG_RESP_ERROR);
		resp[2] = 0x84;
		/* not the answer: another ID, a query (QR off), another question, cut short */
		resp[1] ^= 1;
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), -EBADMSG);
		resp[1] ^= 1;
		resp[2] = 0x04;
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), -EBADMSG);
		resp[2] = 0x84;
		resp[n - 3] ^= 1;                      /* the type */
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), -EBADMSG);
		resp[n - 3] ^= 1;
		resp[13] ^= 1;                         /* a letter of the name */
		assert_int_equal(parse_exact(ops, p, &req, resp, n, &st), -EBADMSG);
		resp[13] ^= 1;
		for (size_t k = 0; k < n; k++)
			assert_int_equal(parse_exact(ops, p, &req, resp, k, &st), -EBADMSG);
	}
	assert_true(seen[0] > 0 && seen[1] > 0);   /* both drawn */
	ops->destroy(p);

	/* files that are not query lists: one line naming the file and the line */
	static const char *const bad[] = { "www.example.com\n", "www.example.com A extra\n",
					   "www.example.com BOGUS\n", "a..b A\n", "", "; only\n" };
	for (size_t i = 0; i < FP_ARRAY_SIZE(bad); i++) {
		char why[256];
		fd = open(path, O_WRONLY | O_TRUNC);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, bad[i], strlen(bad[i])), (ssize_t)strlen(bad[i]));
		close(fd);
		assert_null(ops->create(&cfg, why, sizeof(why)));
		assert_non_null(strstr(why, path));
	}
	unlink(path);
	struct lg_proto_config none = { .name = "dns" };
	char why[256];
	assert_null(ops->create(&none, why, sizeof(why)));
	assert_non_null(strstr(why, "--queries"));
	uint8_t q[LG_DNS_NAME_MAX + 4];
	size_t qlen;
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_int_equal(lg_dns_question(longname, "A", q, &qlen), -EINVAL);
	assert_int_equal(lg_dns_question(".", "NS", q, &qlen), 0);
	assert_int_equal(qlen, 5);
}

static void test_http(void **state)
{
	struct lg_proto_config cfg = { .name = "http", .path = "/4k.bin", .host = "10.0.0.1:80" };
	struct lg_proto *p = proto_new(&lg_proto_http, &cfg);
	const struct lg_proto_ops *ops = &lg_proto_http;
	uint8_t buf[256];
	struct lg_req req = { 0 };
	enum lg_status st;
	(void)state;

	assert_int_equal(ops->encode(p, &rng, buf, sizeof(buf), &req), ops->max_request(p));
	assert_memory_equal(buf, "GET /4k.bin HTTP/1.1\r\nHost: 10.0.0.1:80\r\n\r\n", 42);
	static const char ok[] = "HTTP/1.1 200 OK\r\ncontent-length:  5 \r\nX: y\r\n\r\nhello"
				 "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n";
	size_t first = strlen(ok) - strlen(strstr(ok, "HTTP/1.1 304"));
	for (size_t n = 0; n < first; n++)       /* every prefix: more, never a verdict */
		assert_int_equal(parse_exact(ops, p, &req, (const uint8_t *)ok, n, &st), 0);
	assert_int_equal(parse_exact(ops, p, &req, (const uint8_t *)ok, strlen(ok), &st), first);
	assert_int_equal(st, LG_RESP_OK);
	assert_int_equal(parse_exact(ops, p, &req, (const uint8_t *)ok + first, strlen(ok) - first,
				     &st), strlen(ok) - first);             /* 304: no body */
	static const char *const bad[] = {
		"HTTP/1.1 200 OK\r\n\r\n",                              /* no length */
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n12",
		"SMTP 220 hello\r\n\r\n",
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(bad); i++)
		assert_int_equal(parse_exact(ops, p, &req, (const uint8_t *)bad[i], strlen(bad[i]), &st),
				 -EBADMSG);
	const char *nf = "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno";
	assert_int_equal(parse_exact(ops, p, &req, (const uint8_t *)nf, strlen(nf), &st), strlen(nf));
	assert_int_equal(st, LG_RESP_ERROR);
	char why[128];
	struct lg_proto_config badpath = { .name = "http", .path = "no-slash" };
	assert_null(ops->create(&badpath, why, sizeof(why)));
	assert_non_null(strstr(why, "must start with '/'"));
	ops->destroy(p);
}

static void test_echo(void **state)
{
	struct lg_proto_config cfg = { .name = "echo", .size = 100 };
	struct lg_proto *p = proto_new(&lg_proto_echo, &cfg);
	const struct lg_proto_ops *ops = &lg_proto_echo;
	uint8_t buf[256];
	struct lg_req req = { 0 }, other;
	enum lg_status st;
	(void)state;

	seed_rng(9);
	assert_int_equal(ops->max_request(p), 100);
	assert_int_equal(ops->encode(p, &rng, buf, sizeof(buf), &req), 100);
	assert_int_equal(req.op, LG_OP_ECHO);
	assert_int_equal(req.len, 100);
	for (size_t n = 0; n < 100; n++)
		assert_int_equal(parse_exact(ops, p, &req, buf, n, &st), 0);
	assert_int_equal(parse_exact(ops, p, &req, buf, 100, &st), 100);
	assert_int_equal(st, LG_RESP_OK);
	uint8_t twice[200];
	memcpy(twice, buf, 100), memcpy(twice + 100, buf, 100); /* pipelined: one at a time */
	assert_int_equal(parse_exact(ops, p, &req, twice, 200, &st), 100);
	for (int i = 0; i < 100; i += 33) {
		buf[i] ^= 0x20;
		assert_int_equal(parse_exact(ops, p, &req, buf, 100, &st), 100);
		assert_int_equal(st, LG_RESP_ERROR);
		buf[i] ^= 0x20;
	}
	/* another request's answer is a wrong answer (tags t and t + 1 differ within the
	 * first 4 bytes, for every t) */
	other = req;
	other.aux = (uint16_t)(req.aux + 1);
	assert_int_equal(parse_exact(ops, p, &other, buf, 100, &st), 100);
	assert_int_equal(st, LG_RESP_ERROR);
	assert_int_equal(ops->encode(p, &rng, buf, 50, &req), 0); /* no room */
	assert_int_equal(ops->encode_preload(p, 0, &rng, buf, sizeof(buf), &req), 0);
	ops->describe(p, (char *)buf, sizeof(buf));
	assert_non_null(strstr((char *)buf, "100"));
	ops->destroy(p);

	cfg.size = 0;
	p = proto_new(ops, &cfg);
	assert_int_equal(ops->max_request(p), 64);
	ops->destroy(p);
	cfg.size = LG_ECHO_MAX + 1;
	assert_null(ops->create(&cfg, err, sizeof(err)));
}

static uint64_t le(const uint8_t *b, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static void test_spin(void **state)
{
	struct lg_proto_config cfg = { .name = "spin", .size = 64 };
	const struct lg_proto_ops *ops = &lg_proto_spin;
	struct lg_proto *p;
	uint8_t buf[128];
	struct lg_req req = { 0 };
	enum lg_status st;
	(void)state;

	seed_rng(10);
	assert_int_equal(lg_dist_parse(&cfg.service, "fixed:5us", true, err, sizeof(err)), 0);
	p = proto_new(ops, &cfg);
	assert_int_equal(ops->max_request(p), 64);
	assert_int_equal(ops->encode(p, &rng, buf, sizeof(buf), &req), 64);
	assert_int_equal(req.op, LG_OP_SPIN);
	assert_int_equal(le(buf, 4), LG_SPIN_MAGIC);
	assert_memory_equal(buf, "SPIN", 4);
	assert_int_equal(le(buf + 4, 4), 64);
	assert_int_equal(le(buf + 8, 8), 5000);
	for (int i = 16; i < 64; i++)
		assert_int_equal(buf[i], 0);
	/* the answer is the header */
	for (size_t n = 0; n < LG_SPIN_HDR; n++)
		assert_int_equal(parse_exact(ops, p, &req, buf, n, &st), 0);
	assert_int_equal(parse_exact(ops, p, &req, buf, LG_SPIN_HDR, &st), LG_SPIN_HDR);
	assert_int_equal(st, LG_RESP_OK);
	assert_int_equal(parse_exact(ops, p, &req, buf, 64, &st), LG_SPIN_HDR);
	buf[8] ^= 1; /* another service time */
	assert_int_equal(parse_exact(ops, p, &req, buf, LG_SPIN_HDR, &st), LG_SPIN_HDR);
	assert_int_equal(st, LG_RESP_ERROR);
	buf[8] ^= 1, buf[4] ^= 1; /* another length */
	assert_int_equal(parse_exact(ops, p, &req, buf, LG_SPIN_HDR, &st), LG_SPIN_HDR);
	assert_int_equal(st, LG_RESP_ERROR);
	assert_int_equal(parse_exact(ops, p, &req, "SPX", 3, &st), -EBADMSG);
	assert_int_equal(parse_exact(ops, p, &req, "X", 1, &st), -EBADMSG);
	assert_int_equal(ops->encode(p, &rng, buf, 63, &req), 0);
	ops->destroy(p);

	/* defaults: the header alone, exp service with mean 10 us */
	cfg = (struct lg_proto_config){ .name = "spin" };
	p = proto_new(ops, &cfg);
	assert_int_equal(ops->max_request(p), LG_SPIN_HDR);
	double sum = 0;
	for (int i = 0; i < 100000; i++) {
		assert_int_equal(ops->encode(p, &rng, buf, sizeof(buf), &req), LG_SPIN_HDR);
		sum += (double)le(buf + 8, 8);
	}
	assert_rel(sum / 100000, 10000, 0.03, "default service mean"); /* 6 sd: 1.9% */
	ops->destroy(p);
	cfg.size = 8;
	assert_null(ops->create(&cfg, err, sizeof(err)));
	cfg.size = LG_SPIN_MAX + 1;
	assert_null(ops->create(&cfg, err, sizeof(err)));
}

/*
 * What memcached's text protocol accepts (doc/protocol.txt): "get <key>\r\n" or
 * "set <key> <flags> <exptime> <bytes>\r\n<data>\r\n"; a key is 1..250 bytes with no
 * control characters and no spaces; numbers are plain decimals. Returns the op; the key's
 * length and the value's in *@klen, *@vlen.
 */
static int memcached_accepts(const uint8_t *b, size_t n, size_t *klen, uint64_t *vlen)
{
	const uint8_t *end = memchr(b, '\n', n), *k = b + 4, *ke;
	int op = -1;

	assert_non_null(end);
	assert_true(end > b && end[-1] == '\r');
	if (!memcmp(b, "get ", 4))
		op = LG_OP_GET;
	else if (!memcmp(b, "set ", 4))
		op = LG_OP_SET;
	else
		fail_msg("not a get or set: %.*s", (int)n, (const char *)b);
	for (ke = k; ke < end - 1 && *ke != ' '; ke++)
		assert_true(*ke > 32 && *ke < 127);
	*klen = (size_t)(ke - k);
	assert_true(*klen >= 1 && *klen <= 250);
	*vlen = 0;
	if (op == LG_OP_GET) {
		assert_ptr_equal(ke, end - 1);
		assert_int_equal((size_t)(end + 1 - b), n);
		return op;
	}
	char line[320];
	unsigned flags, exptime;
	unsigned long long bytes;
	int used = 0;
	assert_true((size_t)(end - 1 - ke) < sizeof(line));
	memcpy(line, ke, (size_t)(end - 1 - ke));
	line[end - 1 - ke] = '\0';
	assert_int_equal(sscanf(line, " %u %u %llu%n", &flags, &exptime, &bytes, &used), 3);
	assert_int_equal((size_t)used, strlen(line));
	assert_int_equal(n, (size_t)(end + 1 - b) + bytes + 2);
	assert_memory_equal(b + n - 2, "\r\n", 2);
	*vlen = bytes;
	return op;
}

/* The key memcache's encode wrote: all digits. Its record index. */
static uint64_t key_index(const uint8_t *k, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++) {
		assert_true(k[i] >= '0' && k[i] <= '9');
		v = v * 10 + (k[i] - '0');
	}
	return v;
}

static void test_memcache_usr(void **state)
{
	struct lg_proto_config cfg = { .name = "memcache" };
	const struct lg_proto_ops *ops = &lg_proto_memcache;
	struct lg_proto *p;
	size_t max, gets = 0, n = 200000, klen;
	uint64_t vlen;
	uint8_t *buf;
	struct lg_req req;
	char desc[128];
	(void)state;

	seed_rng(11);
	p = proto_new(ops, &cfg);
	max = ops->max_request(p);
	buf = malloc(max);
	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		size_t len = ops->encode(p, &rng, buf, max, &req);
		assert_true(len > 0 && len <= max);
		int op = memcached_accepts(buf, len, &klen, &vlen);
		assert_int_equal(op, req.op);
		assert_int_equal(klen, 19); /* --keysize=19 */
		assert_int_equal(req.aux, 19);
		uint64_t idx = key_index(buf + 4, klen);
		assert_true(idx < 10000);
		if (op == LG_OP_GET) {
			gets++;
			assert_int_equal(req.len, idx);
		} else {
			assert_int_equal(vlen, 2); /* --valuesize=2 */
			assert_int_equal(req.len, 2);
		}
	}
	/* 99.8% GET: SETs 400 +- 20 (sd) of 200000 */
	assert_close((double)(n - gets), 0.002 * (double)n, 150, "USR SETs");
	ops->describe(p, desc, sizeof(desc));
	assert_string_equal(desc, "usr: key 19 B, value 2 B, 99.8% GET, 10000 records");
	/* preload: a SET of each key */
	size_t len = ops->encode_preload(p, 1234, &rng, buf, max, &req);
	assert_int_equal(memcached_accepts(buf, len, &klen, &vlen), LG_OP_SET);
	assert_memory_equal(buf, "set 0000000000000001234 0 0 2\r\n", 31);
	assert_int_equal(ops->encode_preload(p, 10000, &rng, buf, max, &req), 0);
	assert_int_equal(ops->encode(p, &rng, buf, 10, &req), 0);
	free(buf);
	ops->destroy(p);
}

static void test_memcache_etc(void **state)
{
	struct lg_proto_config cfg = { .name = "memcache", .workload = "etc", .records = 1000 };
	const struct lg_proto_ops *ops = &lg_proto_memcache;
	struct lg_proto *p;
	size_t max, gets = 0, sets = 0, n = 200000, klen, in_range = 0, small = 0, two = 0;
	uint64_t vlen;
	uint8_t *buf, keylen_of[1000] = { 0 };
	struct lg_req req;
	(void)state;

	seed_rng(12);
	p = proto_new(ops, &cfg);
	max = ops->max_request(p);
	assert_true(max >= 4 + 250 + 5 + 7 + 2 + LG_MC_MAX_VALUE + 2);
	buf = malloc(max);
	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		size_t len = ops->encode(p, &rng, buf, max, &req);
		int op = memcached_accepts(buf, len, &klen, &vlen);
		uint64_t idx = key_index(buf + 4, klen);
		assert_true(idx < 1000 && klen >= 4 && klen <= 250);
		/* a key's length is a function of its record, as mutilate's */
		if (keylen_of[idx])
			assert_int_equal(keylen_of[idx], klen);
		keylen_of[idx] = (uint8_t)klen;
		if (op == LG_OP_GET) {
			gets++;
			continue;
		}
		sets++;
		small += vlen <= 1024;
		two += vlen == 2;
	}
	for (int i = 0; i < 1000; i++)
		in_range += keylen_of[i] >= 20 && keylen_of[i] <= 70;
	/* 75% GET (sd 0.1%); keys: 97% of records in 20..70 (sd 0.5%); values as fb_value */
	assert_close((double)gets / (double)n, 0.75, 0.01, "ETC GET ratio");
	assert_true(in_range >= 930);
	assert_close((double)small / (double)sets, 0.9655555979845509, 0.01, "ETC values <= 1 KB");
	assert_close((double)two / (double)sets, 0.1782, 0.01, "ETC 2-byte values");
	free(buf);
	ops->destroy(p);
}

/* Key lengths are mutilate's to the record: max(round(GEV^-1(FNV-1a(i) / 2^64)), digits of
 * records), here from a Python transcription of KeyGenerator::generate for records 10000. */
static void test_memcache_mutilate_keys(void **state)
{
	static const unsigned want[8] = { 38, 35, 51, 43, 26, 22, 32, 29 };
	struct lg_proto_config cfg = { .name = "memcache", .workload = "etc" };
	const struct lg_proto_ops *ops = &lg_proto_memcache;
	struct lg_proto *p = proto_new(ops, &cfg);
	uint8_t *buf = malloc(ops->max_request(p));
	struct lg_req req;
	(void)state;

	assert_non_null(buf);
	for (uint64_t i = 0; i < 8; i++) {
		ops->encode_preload(p, i, &rng, buf, ops->max_request(p), &req);
		assert_int_equal(req.aux, want[i]);
		assert_int_equal(key_index(buf + 4, req.aux), i);
	}
	free(buf);
	ops->destroy(p);
}

static void test_memcache_config(void **state)
{
	const struct lg_proto_ops *ops = &lg_proto_memcache;
	struct lg_proto_config cfg = { .name = "memcache", .workload = "custom" };
	struct lg_proto *p;
	uint8_t buf[512];
	struct lg_req req;
	size_t klen;
	uint64_t vlen;
	char desc[128];
	(void)state;

	seed_rng(13);
	assert_null(ops->create(&cfg, err, sizeof(err))); /* custom needs both sizes */
	assert_non_null(strstr(err, "keysize"));
	assert_int_equal(lg_dist_parse(&cfg.keysize, "30", false, err, sizeof(err)), 0);
	assert_int_equal(lg_dist_parse(&cfg.valuesize, "uniform:10,100", false, err, sizeof(err)), 0);
	p = proto_new(ops, &cfg);
	assert_int_equal(ops->max_request(p), 4 + 30 + 5 + 3 + 2 + 100 + 2);
	for (int i = 0; i < 1000; i++) { /* custom: mutilate's --update default 0, all GETs */
		size_t len = ops->encode(p, &rng, buf, sizeof(buf), &req);
		assert_int_equal(memcached_accepts(buf, len, &klen, &vlen), LG_OP_GET);
		assert_int_equal(klen, 30);
	}
	ops->destroy(p);

	/* a preset with overrides */
	cfg.workload = "usr";
	cfg.has_get_ratio = true;
	cfg.get_ratio = 0;
	cfg.records = 123;
	p = proto_new(ops, &cfg);
	for (int i = 0; i < 1000; i++) {
		size_t len = ops->encode(p, &rng, buf, sizeof(buf), &req);
		assert_int_equal(memcached_accepts(buf, len, &klen, &vlen), LG_OP_SET);
		assert_true(vlen >= 10 && vlen <= 100);
		assert_true(key_index(buf + 4, klen) < 123);
	}
	ops->describe(p, desc, sizeof(desc));
	assert_non_null(strstr(desc, "0.0% GET, 123 records"));
	ops->destroy(p);

	cfg.get_ratio = 1.5;
	assert_null(ops->create(&cfg, err, sizeof(err)));
	cfg.get_ratio = 0.5;
	cfg.records = (uint64_t)UINT32_MAX + 1;
	assert_null(ops->create(&cfg, err, sizeof(err)));
	cfg.records = 0;
	cfg.workload = "tao";
	assert_null(ops->create(&cfg, err, sizeof(err)));
}

/* ---- the memcache response parser ---- */

struct mc_resp {
	char bytes[160];
	size_t len;
	struct lg_req req;
	enum lg_status status;
};

static struct lg_req mc_get(uint32_t index, uint16_t klen)
{
	return (struct lg_req){ .op = LG_OP_GET, .aux = klen, .len = index };
}

static struct lg_req mc_set(void) { return (struct lg_req){ .op = LG_OP_SET, .aux = 19, .len = 2 }; }

static size_t add_resp(struct mc_resp *r, size_t n, struct lg_req req, enum lg_status st,
		       const char *bytes, size_t len)
{
	memcpy(r[n].bytes, bytes, len);
	r[n].len = len;
	r[n].req = req;
	r[n].status = st;
	return n + 1;
}
#define ADD(req, st, lit) (n = add_resp(r, n, req, st, lit, sizeof(lit) - 1))

/* Hits, misses, stores and every error, back to back; a value holding "\r\nEND\r\n". */
static size_t mc_stream(struct mc_resp *r)
{
	size_t n = 0;

	ADD(mc_get(42, 19), LG_RESP_OK, "VALUE 0000000000000000042 0 2\r\nab\r\nEND\r\n");
	ADD(mc_get(7, 19), LG_RESP_MISS, "END\r\n");
	ADD(mc_set(), LG_RESP_OK, "STORED\r\n");
	ADD(mc_set(), LG_RESP_ERROR, "NOT_STORED\r\n");
	ADD(mc_get(9, 5), LG_RESP_OK, "VALUE 00009 5 7 99\r\n\r\nEND\r\n\r\nEND\r\n");
	ADD(mc_get(9, 5), LG_RESP_ERROR, "SERVER_ERROR out of memory storing object\r\n");
	ADD(mc_set(), LG_RESP_ERROR, "EXISTS\r\n");
	ADD(mc_set(), LG_RESP_ERROR, "CLIENT_ERROR bad data chunk\r\n");
	ADD(mc_get(1, 0), LG_RESP_OK, "VALUE anykey 4294967295 0 18446744073709551615\r\n\r\nEND\r\n");
	ADD(mc_get(3, 19), LG_RESP_ERROR, "ERROR\r\n");
	ADD(mc_set(), LG_RESP_ERROR, "NOT_FOUND\r\n");
	ADD(mc_set(), LG_RESP_ERROR, "SERVER_ERROR\r\n");
	ADD(mc_get(123456, 6), LG_RESP_OK, "VALUE 123456 1 10\r\nEND\r\nEND\r\n\r\nEND\r\n");
	return n;
}

/*
 * The engine's loop: bytes arrive in pieces (cut at @cuts[0..ncuts)); after each piece,
 * parse responses at the head while whole ones are there. Every response must come out
 * once, in order, with its length and status.
 */
static void drive(const struct mc_resp *r, size_t nr, const uint8_t *stream, size_t total,
		  const size_t *cuts, size_t ncuts)
{
	size_t head = 0, got = 0, next = 0;
	enum lg_status st;

	for (size_t c = 0; c <= ncuts; c++) {
		size_t have = c < ncuts ? cuts[c] : total;
		while (next < nr) {
			long rc = parse_exact(&lg_proto_memcache, NULL, &r[next].req, stream + head,
					      have - head, &st);
			if (rc == 0)
				break;
			if (rc != (long)r[next].len || st != r[next].status)
				fail_msg("response %zu (cut at %zu): rc %ld status %d, want %zu %d",
					 next, have, rc, st, r[next].len, r[next].status);
			head += (size_t)rc;
			next++;
			got++;
		}
	}
	assert_int_equal(got, nr);
	assert_int_equal(head, total);
}

static void test_memcache_parse_splits(void **state)
{
	struct mc_resp r[16];
	size_t nr = mc_stream(r), total = 0, cut;
	uint8_t stream[2048];
	(void)state;

	for (size_t i = 0; i < nr; i++) {
		memcpy(stream + total, r[i].bytes, r[i].len);
		total += r[i].len;
	}
	drive(r, nr, stream, total, NULL, 0); /* all at once */
	for (cut = 0; cut <= total; cut++) /* in two pieces, cut anywhere */
		drive(r, nr, stream, total, &cut, 1);
	size_t *bytes = malloc(total * sizeof(*bytes)); /* one byte at a time */
	assert_non_null(bytes);
	for (size_t i = 0; i < total; i++)
		bytes[i] = i + 1;
	drive(r, nr, stream, total, bytes, total);
	free(bytes);
	/* each response alone: 0 on every strict prefix */
	for (size_t i = 0; i < nr; i++) {
		enum lg_status st;
		for (size_t k = 0; k < r[i].len; k++)
			assert_int_equal(parse_exact(&lg_proto_memcache, NULL, &r[i].req, r[i].bytes, k, &st), 0);
	}
}

static void expect_bad(struct lg_req req, const char *bytes, size_t len)
{
	enum lg_status st;
	long rc = parse_exact(&lg_proto_memcache, NULL, &req, bytes, len, &st);

	if (rc != -EBADMSG)
		fail_msg("'%.*s' (op %u): %ld, want -EBADMSG", (int)len, bytes, req.op, rc);
}
#define BAD(req, lit) expect_bad(req, lit, sizeof(lit) - 1)

static void test_memcache_parse_garbage(void **state)
{
	struct lg_req get = mc_get(5, 0), set = mc_set(), echo = { .op = LG_OP_ECHO };
	(void)state;

	BAD(get, "H");                             /* at once: nothing starts with H */
	BAD(get, "HTTP/1.1 200 OK\r\n");
	BAD(get, "END\n");                         /* a bare LF */
	BAD(get, "ENDX\r\n");
	BAD(get, "END \r\n");
	BAD(get, "end\r\n");
	BAD(get, "STORED\r\n");                    /* the answer to something else */
	BAD(set, "END\r\n");
	BAD(set, "VALUE k 0 1\r\nx\r\nEND\r\n");
	BAD(set, "STOREDX\r\n");
	BAD(get, "VALUE k 0 1\r\nxy\r\nEND\r\n");   /* data longer than it said */
	BAD(get, "VALUE k 0 1\r\nx\r\nENX\r\n");
	BAD(get, "VALUE k 0 1\r\nx\r\nVALUE");      /* a second value: we asked one key */
	BAD(get, "VALUE k 0 1\r\nx\n");
	BAD(get, "VALUE k 0 2000000000\r\n");       /* over 1 GiB */
	BAD(get, "VALUE k 0 1073741825\r\n");
	BAD(get, "VALUE k 0 -1\r\n");
	BAD(get, "VALUE k 0 5 \r\n");
	BAD(get, "VALUE k 0 5 abc\r\n");
	BAD(get, "VALUE k 0 5 1 2\r\n");
	BAD(get, "VALUE  k 0 5\r\n");
	BAD(get, "VALUE k 0\r\n");
	BAD(get, "VALUE k\r\n");
	BAD(get, "VALUE \r\n");
	BAD(get, "VALUE k 4294967296 1\r\n");       /* flags are 32 bits */
	BAD(get, "VALUE k 0 1 18446744073709551616\r\n");
	BAD(get, "VALUE k\x01 0 1\r\n");
	BAD(mc_get(42, 19), "VALUE 0000000000000000043 0 2\r\nab\r\nEND\r\n"); /* not our key */
	BAD(mc_get(42, 19), "VALUE 000000000000000042 0 2\r\nab\r\nEND\r\n");
	BAD(echo, "END\r\n");
	BAD(get, "\r\n");
	BAD(get, "\n");
	/* a line over the cap fails once the cap is reached, not before */
	char *line = malloc(4096);
	enum lg_status st;
	assert_non_null(line);
	memcpy(line, "SERVER_ERROR ", 13);
	memset(line + 13, 'x', 4096 - 13);
	assert_int_equal(parse_exact(&lg_proto_memcache, NULL, &get, line, LG_MC_MAX_LINE - 1, &st), 0);
	expect_bad(get, line, LG_MC_MAX_LINE);
	memcpy(line + LG_MC_MAX_LINE - 2, "\r\n", 2); /* exactly at the cap: taken */
	assert_int_equal(parse_exact(&lg_proto_memcache, NULL, &get, line, 4096, &st), LG_MC_MAX_LINE);
	assert_int_equal(st, LG_RESP_ERROR);
	memcpy(line + LG_MC_MAX_LINE - 2, "x\r\n", 3); /* one past it: not */
	expect_bad(get, line, 4096);
	/* the biggest value allowed waits for its data */
	assert_int_equal(parse_exact(&lg_proto_memcache, NULL, &get, "VALUE k 0 1073741824\r\nxx", 24, &st), 0);
	free(line);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rng),
		cmocka_unit_test(test_dist_parse),
		cmocka_unit_test(test_dist_kinds),
		cmocka_unit_test(test_dist_fb),
		cmocka_unit_test(test_dist_service),
		cmocka_unit_test(test_arrival_means),
		cmocka_unit_test(test_arrival_ks),
		cmocka_unit_test(test_arrival_trace),
		cmocka_unit_test(test_arrival_trace_errors),
		cmocka_unit_test(test_pattern_shapes),
		cmocka_unit_test(test_pattern_noise),
		cmocka_unit_test(test_pattern_parse),
		cmocka_unit_test(test_ks_pvalues),
		cmocka_unit_test(test_t_quantile),
		cmocka_unit_test(test_chist),
		cmocka_unit_test(test_p99_ci),
		cmocka_unit_test(test_reservoir),
		cmocka_unit_test(test_hist_merge),
		cmocka_unit_test(test_point_merge),
		cmocka_unit_test(test_point_verdict),
		cmocka_unit_test(test_proto_find),
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_spin),
		cmocka_unit_test(test_http),
		cmocka_unit_test(test_dns),
		cmocka_unit_test(test_memcache_usr),
		cmocka_unit_test(test_memcache_etc),
		cmocka_unit_test(test_memcache_mutilate_keys),
		cmocka_unit_test(test_memcache_config),
		cmocka_unit_test(test_memcache_parse_splits),
		cmocka_unit_test(test_memcache_parse_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
