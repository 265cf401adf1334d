/* dist.c: fp-loadgen's distributions: parse, sample (by inverse CDF), CDF, mean, bound. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

#define EULER_GAMMA 0.57721566490153286061

/*
 * mutilate's Facebook fits (leverich/mutilate, Generator.cc: createFacebookKey, -Value,
 * -IA), themselves the fits of Atikoglu et al., "Workload Analysis of a Large-Scale
 * Key-Value Store" (SIGMETRICS'12), for the ETC pool:
 *   key size    GEV(location 30.7984, scale 8.20449, shape 0.078688) bytes;
 *   value size  the measured probabilities of sizes 0..14 bytes (the head below), else
 *               generalised Pareto(location 15, scale 214.476, shape 0.348238) bytes;
 *   gap         generalised Pareto(0, 16.0292, 0.154971) microseconds (mean 18.97 us).
 */
static const double fb_value_head[15] = {
	0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606,
	0.00023, 0.00837, 0.00837, 0.08989, 0.00092, 0.00326, 0.01980,
};

/* ---- the kinds, one function each ---- */

/* Standard normal quantile: Acklam's rational approximation (relative error < 1.2e-9). */
static double probit_acklam(double u)
{
	static const double a[] = { -3.969683028665376e+01, 2.209460984245205e+02,
		-2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01,
		2.506628277459239e+00 };
	static const double b[] = { -5.447609879822406e+01, 1.615858368580409e+02,
		-1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01 };
	static const double c[] = { -7.784894002430293e-03, -3.223964580411365e-01,
		-2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00,
		2.938163982698783e+00 };
	static const double d[] = { 7.784695709041462e-03, 3.224671290700398e-01,
		2.445134137142996e+00, 3.754408661907416e+00 };
	double q, r;

	if (u < 0.02425 || u > 1 - 0.02425) {
		q = sqrt(-2 * log(u < 0.5 ? u : 1 - u));
		r = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		    ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
		return u < 0.5 ? r : -r;
	}
	q = u - 0.5;
	r = q * q;
	return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
	       (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

static double normal_cdf(double z) { return 0.5 * erfc(-z / M_SQRT2); }

/* Acklam's value polished by one step of Halley's method (his own suggestion): full
 * double precision. */
static double probit(double u)
{
	if (!(u > 0 && u < 1))
		return u >= 1 ? INFINITY : -INFINITY;
	double x = probit_acklam(u), e = normal_cdf(x) - u;
	double v = e * sqrt(2 * M_PI) * exp(x * x / 2);

	return isfinite(v) ? x - v / (1 + x * v / 2) : x;
}

static double gev_quantile(double loc, double scale, double shape, double u)
{
	/* mutilate's GEV: loc + scale ((-ln U)^-shape - 1) / shape, the inverse of the CDF */
	if (shape == 0)
		return loc - scale * log(-log(u));
	return loc + scale * (pow(-log(u), -shape) - 1) / shape;
}

static double gev_cdf(double loc, double scale, double shape, double x)
{
	if (shape == 0)
		return exp(-exp(-(x - loc) / scale));
	double t = 1 + shape * (x - loc) / scale;
	if (t <= 0)
		return shape > 0 ? 0 : 1;
	return exp(-pow(t, -1 / shape));
}

static double gev_mean(double loc, double scale, double shape)
{
	if (shape >= 1)
		return INFINITY;
	if (shape == 0)
		return loc + scale * EULER_GAMMA;
	return loc + scale * (tgamma(1 - shape) - 1) / shape;
}

static double gpareto_quantile(double loc, double scale, double shape, double u)
{
	if (shape == 0)
		return loc - scale * log1p(-u);
	return loc + scale * (pow(1 - u, -shape) - 1) / shape;
}

static double gpareto_cdf(double loc, double scale, double shape, double x)
{
	double z = (x - loc) / scale;
	if (z < 0)
		return 0;
	if (shape == 0)
		return -expm1(-z);
	double t = 1 + shape * z;
	if (t <= 0)
		return 1; /* shape < 0: past the upper end */
	return 1 - pow(t, -1 / shape);
}

static double gpareto_mean(double loc, double scale, double shape)
{
	return shape >= 1 ? INFINITY : loc + scale / (1 - shape);
}


/* Probability of the generalised Pareto tail of a DISCRETE distribution. */
static double discrete_tail(const struct lg_dist *d) { return d->n ? 1 - d->cum[d->n - 1] : 1; }

static double discrete_quantile(const struct lg_dist *d, double u)
{
	unsigned lo = 0, hi = d->n;

	while (lo < hi) { /* the first i with u < cum[i] */
		unsigned mid = (lo + hi) / 2;
		if (u < d->cum[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo < d->n)
		return d->values[lo];
	double tail = discrete_tail(d);
	if (tail <= 0)
		return d->values[d->n - 1];
	double v = (u - d->cum[d->n - 1]) / tail;
	return gpareto_quantile(d->a, d->b, d->c, v < 1 ? v : nextafter(1, 0));
}

static double discrete_cdf(const struct lg_dist *d, double x)
{
	double sum = 0, prev = 0;

	for (unsigned i = 0; i < d->n; prev = d->cum[i], i++)
		if (d->values[i] <= x)
			sum += d->cum[i] - prev;
	double tail = discrete_tail(d);
	if (tail > 0)
		sum += tail * gpareto_cdf(d->a, d->b, d->c, x);
	return sum > 1 ? 1 : sum;
}

static double discrete_mean(const struct lg_dist *d)
{
	double sum = 0, prev = 0;

	for (unsigned i = 0; i < d->n; prev = d->cum[i], i++)
		sum += d->values[i] * (d->cum[i] - prev);
	double tail = discrete_tail(d);
	if (tail > 0)
		sum += tail * gpareto_mean(d->a, d->b, d->c);
	return sum;
}

/* ---- the public functions ---- */

double lg_dist_quantile(const struct lg_dist *d, double u)
{
	switch (d->kind) {
	case LG_DIST_FIXED: return d->a;
	case LG_DIST_UNIFORM: return d->a + (d->b - d->a) * u;
	case LG_DIST_EXP: return -d->a * log1p(-u);
	case LG_DIST_NORMAL: return fmax(0, d->a + d->b * probit(u));
	case LG_DIST_GEV: return gev_quantile(d->a, d->b, d->c, u);
	case LG_DIST_GPARETO: return gpareto_quantile(d->a, d->b, d->c, u);
	case LG_DIST_BIMODAL:   /* the smaller value first: an inverse CDF never falls */
		if (d->a <= d->b)
			return u < d->p ? d->a : d->b;
		return u < 1 - d->p ? d->b : d->a;
	case LG_DIST_DISCRETE: return discrete_quantile(d, u);
	}
	return 0;
}

double lg_dist_sample(const struct lg_dist *d, struct lg_rng *r)
{
	/* uniform in the open interval (0, 1): no log(0), no pow(0, -k) */
	double u = ((double)(lg_rng_next(r) >> 11) + 0.5) * 0x1p-53;
	return lg_dist_quantile(d, u);
}

double lg_dist_cdf(const struct lg_dist *d, double x)
{
	switch (d->kind) {
	case LG_DIST_FIXED: return x >= d->a ? 1 : 0;
	case LG_DIST_UNIFORM:
		if (x >= d->b)
			return 1;
		return x < d->a ? 0 : (x - d->a) / (d->b - d->a);
	case LG_DIST_EXP: return x <= 0 ? 0 : -expm1(-x / d->a);
	case LG_DIST_NORMAL:
		if (x < 0)
			return 0;
		return d->b > 0 ? normal_cdf((x - d->a) / d->b) : (x >= d->a ? 1 : 0);
	case LG_DIST_GEV: return gev_cdf(d->a, d->b, d->c, x);
	case LG_DIST_GPARETO: return gpareto_cdf(d->a, d->b, d->c, x);
	case LG_DIST_BIMODAL: return (x >= d->a ? d->p : 0) + (x >= d->b ? 1 - d->p : 0);
	case LG_DIST_DISCRETE: return discrete_cdf(d, x);
	}
	return 0;
}

double lg_dist_mean(const struct lg_dist *d)
{
	switch (d->kind) {
	case LG_DIST_FIXED: return d->a;
	case LG_DIST_UNIFORM: return (d->a + d->b) / 2;
	case LG_DIST_EXP: return d->a;
	case LG_DIST_NORMAL: /* of max(X, 0): a Phi(a/b) + b phi(a/b) */
		if (d->b <= 0)
			return fmax(d->a, 0);
		return d->a * normal_cdf(d->a / d->b) +
		       d->b * exp(-0.5 * (d->a / d->b) * (d->a / d->b)) / sqrt(2 * M_PI);
	case LG_DIST_GEV: return gev_mean(d->a, d->b, d->c);
	case LG_DIST_GPARETO: return gpareto_mean(d->a, d->b, d->c);
	case LG_DIST_BIMODAL: return d->p * d->a + (1 - d->p) * d->b;
	case LG_DIST_DISCRETE: return discrete_mean(d);
	}
	return 0;
}

static double discrete_max(const struct lg_dist *d)
{
	double m = -INFINITY;

	for (unsigned i = 0; i < d->n; i++)
		m = fmax(m, d->values[i]);
	if (discrete_tail(d) > 0)
		m = fmax(m, d->c < 0 ? d->a - d->b / d->c : INFINITY);
	return m;
}

double lg_dist_max(const struct lg_dist *d)
{
	switch (d->kind) {
	case LG_DIST_FIXED: return d->a;
	case LG_DIST_UNIFORM: return d->b;
	case LG_DIST_EXP: return INFINITY;
	case LG_DIST_NORMAL: return d->b > 0 ? INFINITY : fmax(d->a, 0);
	case LG_DIST_GEV:
	case LG_DIST_GPARETO: return d->c < 0 ? d->a - d->b / d->c : INFINITY;
	case LG_DIST_BIMODAL: return fmax(d->a, d->b);
	case LG_DIST_DISCRETE: return discrete_max(d);
	}
	return INFINITY;
}

/* ---- construction ---- */

static void set_name(struct lg_dist *d, const char *name)
{
	snprintf(d->name, sizeof(d->name), "%s", name);
}

/* @d becomes a discrete distribution over @v[i] with probability @p[i] (sum <= 1; the
 * rest from the generalised Pareto tail in a, b, c). */
static void set_discrete(struct lg_dist *d, const double *v, const double *p, unsigned n)
{
	double sum = 0;

	d->kind = LG_DIST_DISCRETE;
	d->n = n;
	for (unsigned i = 0; i < n; i++) {
		sum += p[i];
		d->values[i] = v[i];
		d->cum[i] = sum;
	}
}

static void set_fb_value(struct lg_dist *d)
{
	double v[15];

	for (unsigned i = 0; i < 15; i++)
		v[i] = i;
	d->a = 15, d->b = 214.476, d->c = 0.348238;
	set_discrete(d, v, fb_value_head, 15);
}

/* The named fits; fb_ia is in microseconds, so nanoseconds when @time. */
static bool set_named(struct lg_dist *d, const char *spec, bool time)
{
	if (!strcmp(spec, "fb_key")) {
		d->kind = LG_DIST_GEV, d->a = 30.7984, d->b = 8.20449, d->c = 0.078688;
	} else if (!strcmp(spec, "fb_value")) {
		set_fb_value(d);
	} else if (!strcmp(spec, "fb_ia")) {
		double unit = time ? 1000 : 1;
		d->kind = LG_DIST_GPARETO, d->a = 0, d->b = 16.0292 * unit, d->c = 0.154971;
	} else {
		return false;
	}
	return true;
}

int lg_dist_service(struct lg_dist *d, const char *kind, double mean_ns, char *err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	if (!(mean_ns > 0) || !isfinite(mean_ns)) {
		snprintf(err, errlen, "service time: the mean must be positive");
		return -EINVAL;
	}
	/* ZygOS's set (Prekas's thesis, section 3.2): bimodal-1 is S/2 w.p. 0.9, 5.5 S w.p.
	 * 0.1; bimodal-2 is S/2 w.p. 0.999, 500.5 S w.p. 0.001; both have mean S. */
	if (!strcmp(kind, "fixed"))
		d->kind = LG_DIST_FIXED, d->a = mean_ns;
	else if (!strcmp(kind, "exp"))
		d->kind = LG_DIST_EXP, d->a = mean_ns;
	else if (!strcmp(kind, "bimodal1"))
		d->kind = LG_DIST_BIMODAL, d->p = 0.9, d->a = mean_ns / 2, d->b = 5.5 * mean_ns;
	else if (!strcmp(kind, "bimodal2"))
		d->kind = LG_DIST_BIMODAL, d->p = 0.999, d->a = mean_ns / 2, d->b = 500.5 * mean_ns;
	else {
		char q[LG_QUOTE_MAX + 1];

		snprintf(err, errlen, "service time: unknown kind '%s' (fixed, exp, bimodal1, bimodal2)",
			 lg_quotable(kind, q, sizeof(q)));
		return -EINVAL;
	}
	set_name(d, kind);
	return 0;
}

/* ---- parsing "kind:args" ---- */

/* One number at *@s; with @unit, a time suffix (ns, us, ms, s; none: us) when @time, the
 * result then in nanoseconds. Advances *@s. 0 or -EINVAL. */
static int parse_number(const char **s, bool time, bool unit, double *out)
{
	static const struct { const char *sfx; double ns; } sfx[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
	};
	char *end;
	double v = strtod(*s, &end);

	if (end == *s || !isfinite(v))
		return -EINVAL;
	*s = end;
	if (!time || !unit) {
		*out = v;
		return 0;
	}
	double mult = 1e3;
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		size_t n = strlen(sfx[i].sfx);
		if (!strncmp(*s, sfx[i].sfx, n)) {
			mult = sfx[i].ns;
			*s += n;
			break;
		}
	}
	*out = v * mult;
	return isfinite(*out) ? 0 : -EINVAL;
}

/* Comma-separated numbers: @units[i] is 'v' for a value (a time when @time), 'n' for a
 * plain number (a shape, a probability). Exactly strlen(@units) of them. */
static int parse_args(const char *s, const char *units, bool time, double *args)
{
	size_t n = strlen(units);

	for (size_t i = 0; i < n; i++) {
		if (i && *s++ != ',')
			return -EINVAL;
		if (parse_number(&s, time, units[i] == 'v', &args[i]))
			return -EINVAL;
	}
	return *s ? -EINVAL : 0;
}

static const struct dist_form {
	const char *name;
	enum lg_dist_kind kind;
	const char *units;
	const char *usage;
} dist_forms[] = {
	{ "fixed", LG_DIST_FIXED, "v", "fixed:V" },
	{ "uniform", LG_DIST_UNIFORM, "vv", "uniform:A,B" },
	{ "exp", LG_DIST_EXP, "v", "exp:MEAN" },
	{ "exponential", LG_DIST_EXP, "v", "exponential:MEAN" },
	{ "normal", LG_DIST_NORMAL, "vv", "normal:MEAN,SD" },
	{ "gev", LG_DIST_GEV, "vvn", "gev:LOC,SCALE,SHAPE" },
	{ "gpareto", LG_DIST_GPARETO, "vvn", "gpareto:LOC,SCALE,SHAPE" },
	{ "pareto", LG_DIST_GPARETO, "vvn", "pareto:LOC,SCALE,SHAPE" },
	{ "bimodal", LG_DIST_BIMODAL, "nvv", "bimodal:P,A,B" },
};

/* The parameters' own constraints. NULL when they hold, else what is wrong. */
static const char *dist_check(const struct lg_dist *d)
{
	switch (d->kind) {
	case LG_DIST_UNIFORM: return d->a <= d->b ? NULL : "needs A <= B";
	case LG_DIST_EXP: return d->a > 0 ? NULL : "needs a positive mean";
	case LG_DIST_NORMAL: return d->b >= 0 ? NULL : "needs SD >= 0";
	case LG_DIST_GEV:
	case LG_DIST_GPARETO: return d->b > 0 ? NULL : "needs a positive scale";
	case LG_DIST_BIMODAL: return d->p >= 0 && d->p <= 1 ? NULL : "needs 0 <= P <= 1";
	default: return NULL;
	}
}

static void set_form(struct lg_dist *d, enum lg_dist_kind kind, const double *args)
{
	d->kind = kind;
	if (kind == LG_DIST_BIMODAL)
		d->p = args[0], d->a = args[1], d->b = args[2];
	else
		d->a = args[0], d->b = args[1], d->c = args[2];
}

/* "kind:args" for the forms above, and the ZygOS service kinds "bimodal1:MEAN",
 * "bimodal2:MEAN". 1 when @spec is none of them. */
static int parse_form(struct lg_dist *d, const char *spec, bool time, char *err, size_t errlen)
{
	const char *colon = strchr(spec, ':');
	size_t klen = colon ? (size_t)(colon - spec) : 0;
	double args[3] = { 0, 0, 0 };
	char q[LG_QUOTE_MAX + 1];

	if (!colon)
		return 1;
	if ((klen == 8 && !strncmp(spec, "bimodal1", 8)) || (klen == 8 && !strncmp(spec, "bimodal2", 8))) {
		const char *s = colon + 1;
		char kind[9];
		if (parse_number(&s, time, true, &args[0]) || *s) {
			snprintf(err, errlen, "distribution '%s': expected %.8s:MEAN",
				 lg_quotable(spec, q, sizeof(q)), spec);
			return -EINVAL;
		}
		snprintf(kind, sizeof(kind), "%.8s", spec);
		return lg_dist_service(d, kind, args[0], err, errlen);
	}
	for (size_t i = 0; i < sizeof(dist_forms) / sizeof(dist_forms[0]); i++) {
		const struct dist_form *f = &dist_forms[i];
		if (strlen(f->name) != klen || strncmp(spec, f->name, klen))
			continue;
		if (parse_args(colon + 1, f->units, time, args)) {
			snprintf(err, errlen, "distribution '%s': expected %s",
				 lg_quotable(spec, q, sizeof(q)), f->usage);
			return -EINVAL;
		}
		set_form(d, f->kind, args);
		return 0;
	}
	return 1;
}

int lg_dist_parse(struct lg_dist *d, const char *spec, bool time, char *err, size_t errlen)
{
	const char *s = spec;
	char q[LG_QUOTE_MAX + 1];
	int rc;

	memset(d, 0, sizeof(*d));
	if (set_named(d, spec, time)) {
		rc = 0;
	} else if (parse_number(&s, time, true, &d->a) == 0 && *s == '\0') {
		d->kind = LG_DIST_FIXED;
		rc = 0;
	} else {
		memset(d, 0, sizeof(*d));
		rc = parse_form(d, spec, time, err, errlen);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			snprintf(err, errlen, "distribution '%s': unknown (fixed:V, uniform:A,B, exp:MEAN, "
				 "normal:MEAN,SD, gev:L,S,K, gpareto:L,S,K, bimodal:P,A,B, fb_key, fb_value, fb_ia)",
				 lg_quotable(spec, q, sizeof(q)));
			return -EINVAL;
		}
	}
	const char *why = dist_check(d);
	if (why) {
		snprintf(err, errlen, "distribution '%s': %s", lg_quotable(spec, q, sizeof(q)), why);
		return -EINVAL;
	}
	set_name(d, spec);
	return 0;
}
