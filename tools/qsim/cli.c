/* cli.c: qsim's command line: options, their validation, and the input files they name. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flowplane/compiler.h>

#include "qsim.h"

static const char usage[] =
"usage: qsim [options]\n"
"Discrete-event simulation of n servers with Poisson (or trace) arrivals; reports\n"
"p50/p99/p99.9 sojourn time (queueing + service) in units of the mean service time S\n"
"and in microseconds, and the highest load meeting an SLO.\n"
"\n"
"model:\n"
"  -n, --servers N        servers; with --alloc, the most cores [16]\n"
"  -d, --dist D           service time: det, exp, bimodal1 (90% S/2, 10% 5.5S),\n"
"                         bimodal2 (99.9% S/2, 0.1% 500.5S), lognormal:CV, or\n"
"                         empirical:FILE (\"VALUE [WEIGHT]\" per line, us) [exp]\n"
"      --disc K           fcfs (centralized, M/G/n), part (n x M/G/1), ps (M/G/n/PS),\n"
"                         part-ps (n x M/G/1/PS), steal (part, and an idle server\n"
"                         takes the oldest request waiting anywhere) [fcfs]\n"
"      --mean-us US       mean service time S in us [10; empirical/trace: the file's]\n"
"      --flows F          part*/steal: F flows, hashed to queues at random (uneven)\n"
"      --queue-weights W  part*/steal: comma list of n per-queue arrival weights\n"
"      --trace FILE       arrivals from FILE: \"ARRIVAL_US [SERVICE_US [FLOW]]\" per line;\n"
"                         stretched in time to each --load (default: its own load);\n"
"                         its service column replaces --dist, its flow column routing\n"
"      --steal-cost-us US steal: overhead a server pays per stolen request [0]\n"
"      --req-cost-us US   overhead added to every request's service [0]\n"
"\n"
"core allocation (with --disc fcfs):\n"
"      --alloc P          none, oracle (Shenango Fig. 1 best case: fewest static cores\n"
"                         meeting the SLO when each interval starts empty), shenango\n"
"                         (congestion detection), ix (10 Hz queueing-delay control) [none]\n"
"      --interval-us US   oracle interval [1000] / shenango detection interval [5]\n"
"      --realloc-us US    delay from granting a core to it running [0]\n"
"      --park-us US       shenango: idle spin before a core parks [0]\n"
"      --min-cores K      never fewer cores [shenango 0, ix 1]\n"
"      --start-cores K    cores at time 0 [shenango 0, ix offered load + 1]\n"
"      --ix-period-us US  ix: control period [100000]\n"
"      --ix-sub-us US     ix: metric interval [10000]\n"
"      --ix-alpha A       ix: EWMA factor [0.5]\n"
"      --ix-bound-us US   ix: queueing delay that adds a core [0.6 x SLO]\n"
"      --ix-margin M      ix: remove a core when idle > 1/n + M [0.05]\n"
"\n"
"what to run (load = arrival rate x S / n, in (0, 1)):\n"
"  -l, --load L[,L...]    load points\n"
"      --sweep A:B:STEP   load points A, A+STEP, ... <= B [0.1:0.9:0.1 if no load given]\n"
"      --max-load         bisect for the highest load meeting the SLO (needs --alloc none)\n"
"      --resolution R     bisection stops when the bracket is narrower than R [0.001]\n"
"      --slo-pct P        SLO percentile [99]\n"
"      --slo-mult X       SLO: p(P) <= X x S [10]\n"
"      --slo-us US        SLO in us instead of --slo-mult\n"
"  -N, --requests N       requests per load point (a trace: at most its length) [1000000]\n"
"      --warmup F         fraction of requests before statistics start [0.05]\n"
"  -s, --seed S           seed; the same seed gives byte-identical output [1]\n"
"\n"
"output:\n"
"      --format F         table or json [table]\n"
"  -o, --output FILE      write there instead of stdout\n"
"      --progress         one line per point on stderr (default when stderr is a tty)\n"
"      --quiet            no progress lines\n"
"  -h, --help             this text\n"
"\n"
"Invalid arguments or input files: one line on stderr, exit status 2.\n";

enum {
	O_DISC = 256, O_MEAN, O_FLOWS, O_WEIGHTS, O_TRACE, O_STEAL, O_REQC, O_ALLOC,
	O_INTERVAL, O_REALLOC, O_PARK, O_MINC, O_STARTC, O_IXP, O_IXS, O_IXA, O_IXB, O_IXM,
	O_SWEEP, O_MAXLOAD, O_RES, O_SLOPCT, O_SLOMULT, O_SLOUS, O_WARMUP, O_FORMAT,
	O_PROGRESS, O_QUIET,
};

static const struct option longopts[] = {
	{ "servers", required_argument, NULL, 'n' },
	{ "dist", required_argument, NULL, 'd' },
	{ "disc", required_argument, NULL, O_DISC },
	{ "mean-us", required_argument, NULL, O_MEAN },
	{ "flows", required_argument, NULL, O_FLOWS },
	{ "queue-weights", required_argument, NULL, O_WEIGHTS },
	{ "trace", required_argument, NULL, O_TRACE },
	{ "steal-cost-us", required_argument, NULL, O_STEAL },
	{ "req-cost-us", required_argument, NULL, O_REQC },
	{ "alloc", required_argument, NULL, O_ALLOC },
	{ "interval-us", required_argument, NULL, O_INTERVAL },
	{ "realloc-us", required_argument, NULL, O_REALLOC },
	{ "park-us", required_argument, NULL, O_PARK },
	{ "min-cores", required_argument, NULL, O_MINC },
	{ "start-cores", required_argument, NULL, O_STARTC },
	{ "ix-period-us", required_argument, NULL, O_IXP },
	{ "ix-sub-us", required_argument, NULL, O_IXS },
	{ "ix-alpha", required_argument, NULL, O_IXA },
	{ "ix-bound-us", required_argument, NULL, O_IXB },
	{ "ix-margin", required_argument, NULL, O_IXM },
	{ "load", required_argument, NULL, 'l' },
	{ "sweep", required_argument, NULL, O_SWEEP },
	{ "max-load", no_argument, NULL, O_MAXLOAD },
	{ "resolution", required_argument, NULL, O_RES },
	{ "slo-pct", required_argument, NULL, O_SLOPCT },
	{ "slo-mult", required_argument, NULL, O_SLOMULT },
	{ "slo-us", required_argument, NULL, O_SLOUS },
	{ "requests", required_argument, NULL, 'N' },
	{ "warmup", required_argument, NULL, O_WARMUP },
	{ "seed", required_argument, NULL, 's' },
	{ "format", required_argument, NULL, O_FORMAT },
	{ "output", required_argument, NULL, 'o' },
	{ "progress", no_argument, NULL, O_PROGRESS },
	{ "quiet", no_argument, NULL, O_QUIET },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Options whose meaning depends on others; checked once all are read. */
struct raw {
	const char *dist, *weights, *trace, *sweep, *loads;
	unsigned flows;
	double mean_us, slo_mult, slo_us, interval_us, ix_bound_us;
	double steal_us, req_us, realloc_us, park_us, ixp_us, ixs_us;
	int min_cores;
};

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "qsim: <why>" as one line; the caller exits with status 2. */
static int bad(const char *fmt, ...)
{
	va_list ap;

	fputs("qsim: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EINVAL;
}

/* A finite number in [lo, hi] from the whole of @s. */
static int num(const char *name, const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);

	if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
		return bad("--%s: expected a number in [%g, %g], got '%s'", name, lo, hi, s);
	*out = v;
	return 0;
}

/* An integer in [lo, hi] from the whole of @s. */
static int integer(const char *name, const char *s, unsigned long long lo,
		   unsigned long long hi, unsigned long long *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s || *end || errno || *s == '-' || v < lo || v > hi)
		return bad("--%s: expected an integer in [%llu, %llu], got '%s'", name, lo, hi, s);
	*out = v;
	return 0;
}

/* Comma-separated loads into @o->loads. */
static int parse_loads(struct qs_opts *o, const char *s)
{
	const char *p = s;

	while (*p) {
		char tok[64];
		size_t len = strcspn(p, ",");
		if (len == 0 || len >= sizeof(tok) || (p[len] == ',' && !p[len + 1]))
			return bad("--load: expected numbers separated by commas, got '%s'", s);
		memcpy(tok, p, len);
		tok[len] = '\0';
		double *a = realloc(o->loads, (o->nloads + 1) * sizeof(*a));
		if (!a)
			return -ENOMEM;
		o->loads = a;
		if (num("load", tok, 1e-6, 0.999999, &o->loads[o->nloads]))
			return -EINVAL;
		o->nloads++;
		p += len + (p[len] == ',');
	}
	return 0;
}

/* "A:B:STEP" into load points. */
static int parse_sweep(struct qs_opts *o, const char *s)
{
	double a, b, step;
	char tail;

	if (sscanf(s, "%lf:%lf:%lf%c", &a, &b, &step, &tail) != 3 || !(a > 0) || !(b < 1) ||
	    !(a <= b) || !(step > 0) || (b - a) / step > 10000)
		return bad("--sweep: expected A:B:STEP with 0 < A <= B < 1, STEP > 0, got '%s'", s);
	size_t n = (size_t)floor((b - a) / step + 1e-9) + 1;
	double *arr = realloc(o->loads, (o->nloads + n) * sizeof(*arr));
	if (!arr)
		return -ENOMEM;
	o->loads = arr;
	for (size_t i = 0; i < n; i++)
		o->loads[o->nloads++] = a + (double)i * step;
	return 0;
}

/* Read all of @path into a malloc'd buffer (1 GiB at most). */
static int read_file(const char *path, char **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	size_t cap = 0, n = 0, got;
	char *b = NULL;
	int rc = 0;

	if (!f)
		return bad("%s: %s", path, strerror(errno));
	do {
		if (n == cap) {
			char *nb = cap >= (1u << 30) ? NULL : realloc(b, cap ? cap * 2 : 1 << 16);
			if (!nb) {
				rc = cap >= (1u << 30) ? bad("%s: larger than 1 GiB", path) : -ENOMEM;
				break;
			}
			b = nb;
			cap = cap ? cap * 2 : 1 << 16;
		}
		got = fread(b + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	if (!rc && ferror(f))
		rc = bad("%s: read error", path);
	fclose(f);
	if (rc) {
		free(b);
		return rc;
	}
	*buf = b;
	*len = n;
	return 0;
}

/* Report a parse error as "qsim: FILE:LINE: why". */
static int bad_parse(const char *path, const struct qs_perr *e, int rc)
{
	if (rc == -ENOMEM)
		return rc;
	if (e->line)
		return bad("%s:%u: %s", path, e->line, e->msg);
	return bad("%s: %s", path, e->msg);
}

static int setup_dist(struct qs_opts *o, const struct raw *w)
{
	struct qs_cfg *c = &o->cfg;
	const char *spec = w->dist ? w->dist : "exp";

	snprintf(c->dist_name, sizeof(c->dist_name), "%s", spec);
	if (strncmp(spec, "empirical:", 10))
		return qs_dist_parse(&c->dist, spec) ? bad("--dist: unknown distribution '%s' "
			"(det, exp, bimodal1, bimodal2, lognormal:CV, empirical:FILE)", spec) : 0;
	const char *path = spec + 10;
	struct qs_empirical e;
	struct qs_perr pe = { 0 };
	char *buf;
	size_t len;
	int rc = read_file(path, &buf, &len);
	if (rc)
		return rc;
	rc = qs_parse_empirical(buf, len, &e, &pe);
	free(buf);
	if (rc)
		return bad_parse(path, &pe, rc);
	c->mean_us = e.mean;
	qs_dist_set_empirical(&c->dist, &e);
	return 0;
}

static int setup_trace(struct qs_opts *o, const struct raw *w)
{
	struct qs_cfg *c = &o->cfg;
	struct qs_trace *t = &o->trace;
	struct qs_perr pe = { 0 };
	char *buf;
	size_t len;
	int rc = read_file(w->trace, &buf, &len);

	if (rc)
		return rc;
	rc = qs_parse_trace(buf, len, t, &pe);
	free(buf);
	if (rc)
		return bad_parse(w->trace, &pe, rc);
	c->trace = t;
	c->trace_path = w->trace;
	if (t->n < 2 || !(t->t[t->n - 1] > t->t[0]))
		return bad("%s: a trace needs arrivals spread over some time", w->trace);
	if (t->svc) {
		double sum = 0;
		for (size_t i = 0; i < t->n; i++)
			sum += t->svc[i];
		if (!(sum > 0))
			return bad("%s: every service time is 0", w->trace);
		if (w->dist)
			return bad("--dist: the trace gives service times already");
		c->trace_svc_mean = sum / (double)t->n;
		c->mean_us = c->trace_svc_mean;
	}
	return 0;
}

static int parse_disc(struct qs_cfg *c, const char *s)
{
	static const char *const names[] = { "fcfs", "part", "ps", "part-ps", "steal" };

	for (unsigned i = 0; i < FP_ARRAY_SIZE(names); i++) {
		if (!strcmp(s, names[i])) {
			c->disc = (enum qs_disc)i;
			return 0;
		}
	}
	return bad("--disc: expected fcfs, part, ps, part-ps or steal, got '%s'", s);
}

static int parse_alloc(struct qs_cfg *c, const char *s)
{
	static const char *const names[] = { "none", "oracle", "shenango", "ix" };

	for (unsigned i = 0; i < FP_ARRAY_SIZE(names); i++) {
		if (!strcmp(s, names[i])) {
			c->alloc.kind = (enum qs_alloc_kind)i;
			return 0;
		}
	}
	return bad("--alloc: expected none, oracle, shenango or ix, got '%s'", s);
}

/* Options that take a time in microseconds, stored raw until S̄ is known; 1 if @opt is
 * not one of them. */
static int parse_time(struct raw *w, int opt, const char *arg)
{
	const double big = 1e12;

	switch (opt) {
	case O_MEAN: return num("mean-us", arg, 1e-6, 1e9, &w->mean_us);
	case O_STEAL: return num("steal-cost-us", arg, 0, 1e9, &w->steal_us);
	case O_REQC: return num("req-cost-us", arg, 0, 1e9, &w->req_us);
	case O_INTERVAL: return num("interval-us", arg, 1e-6, big, &w->interval_us);
	case O_REALLOC: return num("realloc-us", arg, 0, big, &w->realloc_us);
	case O_PARK: return num("park-us", arg, 0, big, &w->park_us);
	case O_IXP: return num("ix-period-us", arg, 1e-6, big, &w->ixp_us);
	case O_IXS: return num("ix-sub-us", arg, 1e-6, big, &w->ixs_us);
	case O_IXB: return num("ix-bound-us", arg, 0, big, &w->ix_bound_us);
	case O_SLOUS: return num("slo-us", arg, 1e-6, big, &w->slo_us);
	}
	return 1;
}

/* Options of the model; 1 if @opt is not one of them. */
static int parse_model(struct qs_opts *o, struct raw *w, int opt, const char *arg)
{
	struct qs_cfg *c = &o->cfg;
	unsigned long long u = 0;
	int rc;

	switch (opt) {
	case 'n':
		rc = integer("servers", arg, 1, QS_MAX_SERVERS, &u);
		c->servers = (unsigned)u;
		return rc;
	case 'd': w->dist = arg; return 0;
	case O_DISC: return parse_disc(c, arg);
	case O_FLOWS:
		rc = integer("flows", arg, 1, 1u << 24, &u);
		w->flows = (unsigned)u;
		return rc;
	case O_WEIGHTS: w->weights = arg; return 0;
	case O_TRACE: w->trace = arg; return 0;
	case O_ALLOC: return parse_alloc(c, arg);
	case O_MINC:
		rc = integer("min-cores", arg, 0, QS_MAX_SERVERS, &u);
		w->min_cores = (int)u;
		return rc;
	case O_STARTC:
		rc = integer("start-cores", arg, 0, QS_MAX_SERVERS, &u);
		c->alloc.start_cores = (int)u;
		return rc;
	case O_IXA: return num("ix-alpha", arg, 1e-6, 1, &c->alloc.ix_alpha);
	case O_IXM: return num("ix-margin", arg, 0, 1, &c->alloc.ix_margin);
	}
	return 1;
}

/* Options of what to run and how to report it; 1 if @opt is not one of them. */
static int parse_run(struct qs_opts *o, struct raw *w, int opt, const char *arg)
{
	struct qs_cfg *c = &o->cfg;
	unsigned long long u = 0;
	int rc;

	switch (opt) {
	case 'l': return parse_loads(o, arg);
	case O_SWEEP: return parse_sweep(o, arg);
	case O_MAXLOAD: o->max_load = true; return 0;
	case O_RES: return num("resolution", arg, 1e-6, 0.1, &o->resolution);
	case O_SLOPCT: return num("slo-pct", arg, 1e-6, 100, &c->slo_pct);
	case O_SLOMULT: return num("slo-mult", arg, 1e-6, 1e9, &w->slo_mult);
	case 'N':
		rc = integer("requests", arg, 1, 100000000000ull, &u);
		c->requests = u;
		return rc;
	case O_WARMUP: return num("warmup", arg, 0, 0.9, &c->warmup);
	case 's':
		rc = integer("seed", arg, 0, UINT64_MAX, &u);
		c->seed = u;
		return rc;
	case O_FORMAT:
		if (strcmp(arg, "json") && strcmp(arg, "table"))
			return bad("--format: expected table or json, got '%s'", arg);
		o->json = !strcmp(arg, "json");
		return 0;
	case 'o': o->out_path = arg; return 0;
	case O_PROGRESS: o->progress = 1; return 0;
	case O_QUIET: o->progress = 0; return 0;
	}
	return 1;
}

/* One option; 0, or -EINVAL after printing why. */
static int parse_one(struct qs_opts *o, struct raw *w, int opt, const char *arg)
{
	int rc = parse_time(w, opt, arg);

	if (rc == 1)
		rc = parse_model(o, w, opt, arg);
	if (rc == 1)
		rc = parse_run(o, w, opt, arg);
	return rc == 1 ? bad("internal: option %d not handled", opt) : rc;
}

/* Reject combinations that would silently mean nothing. */
static int check_combinations(const struct qs_opts *o, const struct raw *w)
{
	const struct qs_cfg *c = &o->cfg;
	bool part = c->disc == QS_PART || c->disc == QS_PART_PS || c->disc == QS_STEAL;
	enum qs_alloc_kind a = c->alloc.kind;

	if ((w->flows || w->weights) && !part)
		return bad("--flows/--queue-weights need --disc part, part-ps or steal");
	if (w->flows && w->weights)
		return bad("--flows and --queue-weights exclude each other");
	if (!isnan(w->steal_us) && c->disc != QS_STEAL)
		return bad("--steal-cost-us needs --disc steal");
	if (a != QS_ALLOC_NONE && c->disc != QS_FCFS)
		return bad("--alloc %s needs --disc fcfs (one queue served by the granted cores)",
			   a == QS_ALLOC_ORACLE ? "oracle" : a == QS_ALLOC_IX ? "ix" : "shenango");
	if (a != QS_ALLOC_NONE && o->max_load)
		return bad("--max-load needs --alloc none");
	if (a == QS_ALLOC_NONE && (!isnan(w->interval_us) || !isnan(w->realloc_us) ||
				   !isnan(w->park_us) || w->min_cores >= 0 ||
				   c->alloc.start_cores >= 0))
		return bad("--interval-us/--realloc-us/--park-us/--min-cores/--start-cores "
			   "need --alloc");
	if (a == QS_ALLOC_ORACLE && (!isnan(w->realloc_us) || w->min_cores >= 0 ||
				     c->alloc.start_cores >= 0))
		return bad("--realloc-us/--min-cores/--start-cores do not apply to --alloc oracle");
	if (a != QS_ALLOC_SHENANGO && !isnan(w->park_us))
		return bad("--park-us needs --alloc shenango");
	if (a == QS_ALLOC_IX && !isnan(w->interval_us))
		return bad("--interval-us does not apply to --alloc ix (see --ix-sub-us)");
	if (a != QS_ALLOC_IX && (!isnan(w->ixp_us) || !isnan(w->ixs_us) ||
				 !isnan(w->ix_bound_us) || !isnan(c->alloc.ix_alpha) ||
				 !isnan(c->alloc.ix_margin)))
		return bad("--ix-* options need --alloc ix");
	if (w->min_cores > (int)c->servers || c->alloc.start_cores > (int)c->servers)
		return bad("--min-cores/--start-cores cannot exceed --servers");
	return 0;
}

static double or(double v, double dflt) { return isnan(v) ? dflt : v; }

/* Now that S̄ is known, turn every microsecond option into units of S̄. */
static void to_sbar_units(struct qs_cfg *c, const struct raw *w)
{
	struct qs_alloc *a = &c->alloc;
	double s = c->mean_us;

	c->slo = isnan(w->slo_us) ? or(w->slo_mult, 10) : w->slo_us / s;
	c->steal_cost = or(w->steal_us, 0) / s;
	c->req_cost = or(w->req_us, 0) / s;
	a->interval = or(w->interval_us, a->kind == QS_ALLOC_ORACLE ? 1000 : 5) / s;
	a->realloc = or(w->realloc_us, 0) / s;
	a->park = or(w->park_us, 0) / s;
	a->min_cores = w->min_cores >= 0 ? w->min_cores : a->kind == QS_ALLOC_IX ? 1 : 0;
	a->ix_period = or(w->ixp_us, 100000) / s;
	a->ix_sub = or(w->ixs_us, 10000) / s;
	a->ix_alpha = or(a->ix_alpha, 0.5);
	a->ix_margin = or(a->ix_margin, 0.05);
	a->ix_bound = isnan(w->ix_bound_us) ? 0.6 * c->slo : w->ix_bound_us / s;
}

/* Files, units, routing and the default load points, once every option is read. */
static int finish(struct qs_opts *o, const struct raw *w)
{
	struct qs_cfg *c = &o->cfg;
	int rc = check_combinations(o, w);

	if (!rc)
		rc = setup_dist(o, w);
	if (!rc && w->trace)
		rc = setup_trace(o, w);
	if (rc)
		return rc;
	if (!isnan(w->mean_us))
		c->mean_us = w->mean_us;
	to_sbar_units(c, w);
	if (c->alloc.kind == QS_ALLOC_IX && !(c->alloc.ix_sub <= c->alloc.ix_period))
		return bad("--ix-sub-us must not exceed --ix-period-us");
	rc = qs_route_setup(c, w->weights, w->flows);
	if (rc == -EINVAL)
		return bad("--queue-weights: expected %u numbers >= 0 separated by commas, "
			   "not all 0", c->servers);
	if (rc)
		return rc;
	if (c->trace) {
		const struct qs_trace *t = c->trace;
		double span = t->t[t->n - 1] - t->t[0];
		c->trace_load = (double)(t->n - 1) / span * c->mean_us / c->servers;
		if (!o->nloads && !o->max_load && !(c->trace_load < 1))
			return bad("%s: the trace's own load is %g >= 1; give --load", w->trace,
				   c->trace_load);
		if (!o->nloads && !o->max_load) {
			o->loads = malloc(sizeof(*o->loads));
			if (!o->loads)
				return -ENOMEM;
			o->loads[o->nloads++] = c->trace_load;
			return 0;
		}
	}
	if (!o->nloads && !o->max_load)
		return parse_sweep(o, "0.1:0.9:0.1");
	return 0;
}

/* Parse @argv into @o: 0 to run, 1 when --help was printed, -EINVAL or -ENOMEM. */
int qs_cli_parse(int argc, char **argv, struct qs_opts *o)
{
	struct raw w = { .mean_us = NAN, .slo_mult = NAN, .slo_us = NAN, .interval_us = NAN,
			 .ix_bound_us = NAN, .steal_us = NAN, .req_us = NAN, .realloc_us = NAN,
			 .park_us = NAN, .ixp_us = NAN, .ixs_us = NAN, .min_cores = -1 };
	struct qs_cfg *c = &o->cfg;
	int opt;

	memset(o, 0, sizeof(*o));
	*c = (struct qs_cfg){ .servers = 16, .mean_us = 10, .requests = 1000000,
			      .warmup = 0.05, .seed = 1, .slo_pct = 99 };
	c->alloc = (struct qs_alloc){ .start_cores = -1, .ix_alpha = NAN, .ix_margin = NAN };
	o->resolution = 0.001;
	o->progress = -1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":n:d:l:N:s:o:h", longopts, NULL)) != -1) {
		if (opt == 'h') {
			fputs(usage, stdout);
			return 1;
		}
		if (opt == '?')
			return bad("unknown option '%s' (see --help)", argv[optind - 1]);
		if (opt == ':')
			return bad("option '%s' needs a value", argv[optind - 1]);
		int rc = parse_one(o, &w, opt, optarg);
		if (rc)
			return rc;
	}
	if (optind < argc)
		return bad("unexpected argument '%s' (see --help)", argv[optind]);
	return finish(o, &w);
}

void qs_opts_free(struct qs_opts *o)
{
	qs_dist_free(&o->cfg.dist);
	qs_route_free(&o->cfg.route);
	qs_trace_free(&o->trace);
	free(o->loads);
	o->loads = NULL;
}
