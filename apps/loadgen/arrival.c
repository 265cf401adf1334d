/* arrival.c: arrival processes (Poisson, fixed interval, trace replay) and IX's load patterns. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

#define TRACE_MAX_GAPS (1u << 26) /* 64 Mi gaps, 512 MiB: a bound on what a file can ask */

/* ---- trace files ---- */

/* One line of a trace: a gap in microseconds, or nothing (blank, '#' comment). 1 when it
 * holds a gap in *@gap, 0 when empty, -EINVAL when it is something else. */
static int trace_line(char *line, double *gap)
{
	char *hash = strchr(line, '#'), *end;

	if (hash)
		*hash = '\0';
	line += strspn(line, " \t\r\n");
	if (*line == '\0')
		return 0;
	*gap = strtod(line, &end);
	if (end == line || !isfinite(*gap) || *gap < 0)
		return -EINVAL;
	end += strspn(end, " \t\r\n");
	return *end ? -EINVAL : 1;
}

static int trace_push(struct lg_arrival *a, size_t *cap, double gap)
{
	if (a->trace_n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 1024;
		double *n = ncap <= TRACE_MAX_GAPS ? realloc(a->trace_gaps, ncap * sizeof(*n)) : NULL;
		if (!n)
			return -ENOMEM;
		a->trace_gaps = n;
		*cap = ncap;
	}
	a->trace_gaps[a->trace_n++] = gap;
	return 0;
}

/* Read @f's gaps into @a; the error names @path and the line. */
static int trace_read(struct lg_arrival *a, FILE *f, const char *path, char *err, size_t errlen)
{
	char *line = NULL;
	size_t linecap = 0, cap = 0, lineno = 0;
	double sum = 0, gap;
	int rc = 0;

	while (rc == 0 && getline(&line, &linecap, f) >= 0) {
		lineno++;
		int got = trace_line(line, &gap);
		if (got < 0) {
			snprintf(err, errlen, "%s:%zu: not a gap in microseconds (a number >= 0)", path, lineno);
			rc = -EINVAL;
		} else if (got > 0 && (rc = trace_push(a, &cap, gap)) != 0) {
			snprintf(err, errlen, "%s:%zu: too many gaps (at most %u)", path, lineno, TRACE_MAX_GAPS);
		} else {
			sum += got > 0 ? gap : 0;
		}
	}
	free(line);
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		rc = -EIO;
	}
	if (rc == 0 && !(sum > 0 && isfinite(sum))) {
		snprintf(err, errlen, "%s:%zu: no positive gap in the file (or their sum overflows)", path, lineno);
		rc = -EINVAL;
	}
	if (rc == 0)
		a->trace_mean = sum / (double)a->trace_n;
	return rc;
}

static int trace_load(struct lg_arrival *a, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");

	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	int rc = trace_read(a, f, path, err, errlen);
	fclose(f);
	if (rc)
		lg_arrival_free(a);
	return rc;
}

/* ---- the processes ---- */

int lg_arrival_parse(struct lg_arrival *a, const char *spec, char *err, size_t errlen)
{
	memset(a, 0, sizeof(*a));
	if (!strcmp(spec, "poisson")) {
		a->kind = LG_ARRIVAL_POISSON;
		return 0;
	}
	if (!strcmp(spec, "fixed")) {
		a->kind = LG_ARRIVAL_FIXED;
		return 0;
	}
	if (!strncmp(spec, "trace:", 6) && spec[6]) {
		a->kind = LG_ARRIVAL_TRACE;
		return trace_load(a, spec + 6, err, errlen);
	}
	char q[LG_QUOTE_MAX + 1];

	snprintf(err, errlen, "arrival '%s': expected poisson, fixed or trace:FILE",
		 lg_quotable(spec, q, sizeof(q)));
	return -EINVAL;
}

void lg_arrival_free(struct lg_arrival *a)
{
	free(a->trace_gaps);
	a->trace_gaps = NULL;
	a->trace_n = 0;
	a->trace_pos = 0;
}

double lg_arrival_gap_ns(struct lg_arrival *a, double rate, struct lg_rng *r)
{
	double mean_ns = 1e9 / rate;

	switch (a->kind) {
	case LG_ARRIVAL_POISSON: {
		double u = ((double)(lg_rng_next(r) >> 11) + 0.5) * 0x1p-53; /* (0, 1) */
		return -mean_ns * log(u);
	}
	case LG_ARRIVAL_FIXED:
		return mean_ns;
	case LG_ARRIVAL_TRACE: {
		if (a->trace_n == 0)
			return mean_ns; /* not loaded: as fixed */
		if (a->trace_pos >= a->trace_n)
			a->trace_pos = 0;
		double g = a->trace_gaps[a->trace_pos++];
		return g * mean_ns / a->trace_mean;
	}
	}
	return mean_ns;
}

/* Exponential CDF of a gap of @x ns at @rate per second. */
static double exp_cdf_ns(double x, double rate) { return x <= 0 ? 0 : -expm1(-x * rate * 1e-9); }

lg_cdf_fn lg_arrival_cdf(const struct lg_arrival *a)
{
	return a->kind == LG_ARRIVAL_POISSON ? exp_cdf_ns : NULL;
}

/* ---- rates and load patterns ---- */

int lg_parse_rate(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	if (*end == 'k' || *end == 'K')
		v *= 1e3, end++;
	else if (*end == 'M')
		v *= 1e6, end++;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Split @spec (copied to @buf) at each ':' into at most @max fields (empty ones kept, so
 * they fail as numbers). The number of fields, @max + 1 when there are more. */
static unsigned split_fields(const char *spec, char *buf, size_t buflen, char **f, unsigned max)
{
	unsigned n = 0;
	char *t = buf;

	snprintf(buf, buflen, "%s", spec);
	for (;;) {
		if (n == max)
			return max + 1;
		f[n++] = t;
		t = strchr(t, ':');
		if (!t)
			return n;
		*t++ = '\0';
	}
}

/* A pattern's times: 1 ms (fp-vsim's slot, below fp-loadgen's pacing) to 10^6 s, so that
 * a step's edges stay exact in a double however long the run. */
#define PATTERN_MIN_S 1e-3
#define PATTERN_MAX_S 1e6
/* A step pattern climbs at most this many steps (more is a slope). */
#define PATTERN_MAX_STEPS 1e6

static int parse_seconds(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v >= PATTERN_MIN_S && v <= PATTERN_MAX_S))
		return -EINVAL;
	*out = v;
	return 0;
}

/* Fields 1.. of a pattern: "r" a rate, "s" seconds (> 0); optional ones after '|'. */
static int pattern_fields(char **f, unsigned n, const char *form, double *out)
{
	unsigned i = 0;

	for (const char *c = form; *c; c++) {
		if (*c == '|') {
			if (i == n)
				return 0;
			continue;
		}
		if (i == n)
			return -EINVAL;
		int rc = *c == 'r' ? lg_parse_rate(f[i], &out[i]) : parse_seconds(f[i], &out[i]);
		if (rc)
			return rc;
		i++;
	}
	return i == n ? 0 : -EINVAL;
}

static const struct pattern_form {
	const char *name;
	enum lg_pattern_kind kind;
	const char *form;
	const char *usage;
} pattern_forms[] = {
	{ "slope", LG_PATTERN_SLOPE, "rr", "slope:LO:HI" },
	{ "step", LG_PATTERN_STEP, "rrrs|s", "step:LO:HI:STEP_RPS:STEP_S[:HOLD_S]" },
	{ "sine", LG_PATTERN_SINE, "rrs|r|s", "sine:LO:HI:PERIOD_S[:NOISE_RPS[:NOISE_S]]" },
};

static void pattern_set(struct lg_pattern *p, enum lg_pattern_kind kind, const double *v)
{
	p->kind = kind;
	p->lo = v[0];
	p->hi = v[1];
	if (kind == LG_PATTERN_STEP) {
		p->step_rps = v[2];
		p->step_s = v[3];
		p->hold_s = v[4];
	} else if (kind == LG_PATTERN_SINE) {
		p->period_s = v[2];
		p->noise_rps = v[3];
		p->noise_s = v[4] > 0 ? v[4] : 5; /* IX redraws its noise every 5 s */
	}
}

const char *lg_quotable(const char *s, char *buf, size_t len)
{
	size_t i = 0;

	for (; s[i] && i + 1 < len && i < LG_QUOTE_MAX; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

int lg_pattern_parse(struct lg_pattern *p, const char *spec, double duration_s, uint64_t seed,
		     char *err, size_t errlen)
{
	char q[LG_QUOTE_MAX + 1];

	char buf[256], *f[8] = { NULL };
	unsigned n = split_fields(spec, buf, sizeof(buf), f, 7);
	double v[6] = { 0, 0, 0, 0, 0, 0 };

	memset(p, 0, sizeof(*p));
	for (size_t i = 0; n >= 1 && i < sizeof(pattern_forms) / sizeof(pattern_forms[0]); i++) {
		const struct pattern_form *pf = &pattern_forms[i];
		if (strcmp(f[0], pf->name))
			continue;
		if (strlen(spec) >= sizeof(buf) || pattern_fields(f + 1, n - 1, pf->form, v) ||
		    v[0] > v[1] || !(v[1] > 0) ||
		    (pf->kind == LG_PATTERN_STEP &&
		     !(v[2] > 0 && (v[1] - v[0]) / v[2] <= PATTERN_MAX_STEPS))) {
			snprintf(err, errlen, "pattern '%s': expected %s (rates >= 0 with k/M, LO <= HI, "
				 "HI > 0, at most 1e6 steps, times 0.001 to 1e6 s)",
				 lg_quotable(spec, q, sizeof(q)), pf->usage);
			return -EINVAL;
		}
		if (!(duration_s > 0) || !isfinite(duration_s)) {
			snprintf(err, errlen, "pattern '%s': needs a positive duration",
				 lg_quotable(spec, q, sizeof(q)));
			return -EINVAL;
		}
		pattern_set(p, pf->kind, v);
		p->duration_s = duration_s;
		p->seed = seed;
		return 0;
	}
	snprintf(err, errlen, "pattern '%s': expected slope:LO:HI, step:LO:HI:STEP_RPS:STEP_S[:HOLD_S] "
		 "or sine:LO:HI:PERIOD_S[:NOISE_RPS[:NOISE_S]]", lg_quotable(spec, q, sizeof(q)));
	return -EINVAL;
}

/* The sine pattern's noise in slot @k: uniform in [-1, 1], a function of (seed, k) alone
 * so any worker computes the same rate for the same time. */
static double noise_unit(uint64_t seed, uint64_t k)
{
	struct lg_rng r;

	lg_rng_seed(&r, seed ^ (k * 0x9e3779b97f4a7c15ull));
	return 2 * lg_rng_unit(&r) - 1;
}

static double pattern_slope(const struct lg_pattern *p, double t)
{
	double half = p->duration_s / 2;

	if (t <= 0 || t >= p->duration_s)
		return p->lo;
	double x = t <= half ? t / half : (p->duration_s - t) / half;
	return p->lo + (p->hi - p->lo) * x;
}

static double pattern_step(const struct lg_pattern *p, double t)
{
	double steps = t > 0 ? floor(t / p->step_s) : 0;

	if (p->hold_s > 0) {
		/* up to hi, hold_s there, then down the same steps */
		double top = ceil((p->hi - p->lo) / p->step_rps) * p->step_s + p->hold_s;

		if (t >= top)
			return fmax(p->lo, p->hi - p->step_rps * floor((t - top) / p->step_s + 1));
	}
	return fmin(p->hi, p->lo + p->step_rps * steps);
}

static double pattern_sine(const struct lg_pattern *p, double t)
{
	double v = p->lo + (p->hi - p->lo) * (1 - cos(2 * M_PI * t / p->period_s)) / 2;

	if (p->noise_rps > 0) {
		double slot = t > 0 ? floor(t / p->noise_s) : 0;
		v += p->noise_rps * noise_unit(p->seed, (uint64_t)slot);
	}
	return fmin(p->hi, fmax(0, v));
}

double lg_pattern_rate(const struct lg_pattern *p, double t_s)
{
	switch (p->kind) {
	case LG_PATTERN_SLOPE: return pattern_slope(p, t_s);
	case LG_PATTERN_STEP: return pattern_step(p, t_s);
	case LG_PATTERN_SINE: return pattern_sine(p, t_s);
	case LG_PATTERN_NONE: break;
	}
	return p->lo;
}
