/* main.c: fp-loadgen's command line: options into struct lg_config, the run, the reports, the exit status. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lg.h"

/*
 * The options of apps/loadgen/README.md plus the runtime's (fp_rt_option_names, handed to
 * fp_rt_option; --seed is the runtime's and seeds the generator too). A bad argument is
 * one line on stderr and exit status 2; a run that could not happen (no server) exit 1;
 * a run cut short by SIGINT/SIGTERM reports what it measured and exits 130.
 */

#define OPT_RT_BASE FP_RT_OPT_BASE

enum {
	OPT_SERVER = 's', OPT_PROTO = 'P', OPT_RATE = 'r', OPT_CONNS = 'c', OPT_DURATION = 'd',
	OPT_WARMUP = 'w', OPT_JSON = 'j', OPT_QUIET = 'q', OPT_HELP = 'h',
	OPT_WORKLOAD = 300, OPT_KEYSIZE, OPT_VALUESIZE, OPT_GET_RATIO, OPT_RECORDS, OPT_SIZE,
	OPT_SERVICE, OPT_ARRIVAL, OPT_RATES, OPT_SWEEP, OPT_PATTERN, OPT_WINDOW, OPT_CLOSED,
	OPT_DEPTH, OPT_TIMEOUT, OPT_PRELOAD, OPT_NO_PRELOAD, OPT_MAX_SLIP, OPT_BACKLOG, OPT_SLO,
	OPT_PATH, OPT_QUERIES, OPT_UDP_PORTS,
};

static const struct option lg_opts[] = {
	{ "server", required_argument, NULL, OPT_SERVER },
	{ "proto", required_argument, NULL, OPT_PROTO },
	{ "workload", required_argument, NULL, OPT_WORKLOAD },
	{ "keysize", required_argument, NULL, OPT_KEYSIZE },
	{ "valuesize", required_argument, NULL, OPT_VALUESIZE },
	{ "get-ratio", required_argument, NULL, OPT_GET_RATIO },
	{ "records", required_argument, NULL, OPT_RECORDS },
	{ "size", required_argument, NULL, OPT_SIZE },
	{ "path", required_argument, NULL, OPT_PATH },
	{ "queries", required_argument, NULL, OPT_QUERIES },
	{ "udp-ports", required_argument, NULL, OPT_UDP_PORTS },
	{ "service", required_argument, NULL, OPT_SERVICE },
	{ "arrival", required_argument, NULL, OPT_ARRIVAL },
	{ "rate", required_argument, NULL, OPT_RATE },
	{ "rates", required_argument, NULL, OPT_RATES },
	{ "sweep", required_argument, NULL, OPT_SWEEP },
	{ "pattern", required_argument, NULL, OPT_PATTERN },
	{ "window", required_argument, NULL, OPT_WINDOW },
	{ "closed", required_argument, NULL, OPT_CLOSED },
	{ "conns", required_argument, NULL, OPT_CONNS },
	{ "depth", required_argument, NULL, OPT_DEPTH },
	{ "backlog", required_argument, NULL, OPT_BACKLOG },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "preload", no_argument, NULL, OPT_PRELOAD },
	{ "no-preload", no_argument, NULL, OPT_NO_PRELOAD },
	{ "max-slip-us", required_argument, NULL, OPT_MAX_SLIP },
	{ "slo-us", required_argument, NULL, OPT_SLO },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const char usage[] =
	"usage: fp-loadgen --server A.B.C.D[:PORT] (--rate R | --rates R1,R2,.. | --sweep LO:HI:N |\n"
	"                  --pattern P | --closed K) [options] [runtime options]\n"
	"An open-loop load generator: requests leave on an arrival process's schedule, and\n"
	"latency counts from the scheduled time (see apps/loadgen/README.md).\n"
	"  --server A.B.C.D[:PORT] the server (port default: memcache 11211, echo and spin 7,\n"
	"                        http 80, dns 53)\n"
	"  --proto P             echo, memcache, spin, http (TCP) or dns (UDP) (default\n"
	"                        memcache)\n"
	"  --workload W          memcache: usr or etc, as mutilate defines them (default usr),\n"
	"                        or custom (--keysize and --valuesize; all GET by default)\n"
	"  --keysize D           memcache: key size distribution (overrides the workload's)\n"
	"  --valuesize D         memcache: value size distribution (overrides the workload's)\n"
	"  --get-ratio F         memcache: fraction of GETs, 0..1 (overrides the workload's)\n"
	"  --records N           memcache: keys 0..N-1 (default 10000)\n"
	"  --size BYTES          echo: message size (default 64); spin: request size (16)\n"
	"  --path PATH           http: the path every GET asks for (default /)\n"
	"  --queries FILE        dns: \"NAME TYPE\" lines, as dnsperf reads (required); each\n"
	"                        request is one of them, drawn uniformly\n"
	"  --udp-ports BASE      dns: each connection is a local UDP port, BASE up (default\n"
	"                        40000); its --depth queries in flight are told apart by ID\n"
	"  --service D           spin: service time, KIND:MEAN with KIND fixed, exp, bimodal1,\n"
	"                        bimodal2 (ZygOS), e.g. exp:10us; or any distribution (us)\n"
	"  --arrival A           poisson, fixed or trace:FILE (gaps in us; default poisson)\n"
	"  --rate R              one point at R requests/s (k and M suffixes)\n"
	"  --rates R1,R2,..      one point per rate, in this order\n"
	"  --sweep LO:HI:N       N points evenly from LO to HI\n"
	"  --pattern P           slope:LO:HI, step:LO:HI:STEP_RPS:STEP_S[:HOLD_S] (HOLD_S:\n"
	"                        held at HI that long, then down the same steps) or\n"
	"                        sine:LO:HI:PERIOD_S[:NOISE_RPS[:NOISE_S]] over --duration,\n"
	"                        one point per --window; times 0.001-1e6 s, <= 1e6 steps\n"
	"  --window S            pattern: seconds per point (default 1)\n"
	"  --closed K            closed loop: K requests in flight per connection (one point)\n"
	"  --conns N             connections in all, spread over the workers (default 16)\n"
	"  --depth D             requests in flight per connection (default 1)\n"
	"  --backlog N           open loop: requests that may wait for room on one\n"
	"                        connection; beyond that they are dropped (default 32)\n"
	"  --warmup S            seconds of unmeasured load first (default 1)\n"
	"  --duration S          seconds per point (default 5; a pattern: in all)\n"
	"  --timeout MS          a request unanswered this long is a timeout; its\n"
	"                        connection is reset and reopened (default 1000)\n"
	"  --preload, --no-preload   memcache: SET every key once first (default on)\n"
	"  --max-slip-us US      send slip allowed at p99 before a point is invalid (50)\n"
	"  --slo-us US           the latency SLO marked in the table (default 500)\n"
	"  --json FILE           write the results as JSON (also when interrupted)\n"
	"  --quiet               no progress lines on stderr\n"
	"  --seed N              random seed (default: from the clock; printed)\n"
	"exit status: 0 done (even with invalid points), 1 run error, 2 bad arguments,\n"
	"130 interrupted (partial results reported)\n";

/* One line on stderr, exit 2. */
static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fp-loadgen: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* A number in [lo, hi] (optionally only whole), or a usage error naming --@opt. */
static double parse_num(const char *opt, const char *val, double lo, double hi, bool whole)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (!*val || *end || errno || !isfinite(v) || v < lo || v > hi || (whole && v != floor(v)))
		usage_error("--%s: '%s' is not a %s in %g..%g", opt, val,
			    whole ? "whole number" : "number", lo, hi);
	return v;
}

static double parse_rate_opt(const char *opt, const char *val)
{
	double r;

	if (lg_parse_rate(val, &r) || !(r > 0) || r > 1e9)
		usage_error("--%s: '%s' is not a rate in requests/s above 0 (k and M suffixes)",
			    opt, val);
	return r;
}

/* "A.B.C.D" or "A.B.C.D:PORT"; the port may come from the protocol later (0 = unset). */
static void parse_server(struct lg_config *c, const char *val)
{
	char buf[64];
	const char *colon = strchr(val, ':');
	size_t alen = colon ? (size_t)(colon - val) : strlen(val);
	struct in_addr a;

	if (alen >= sizeof(buf) || (memcpy(buf, val, alen), buf[alen] = '\0',
				     inet_pton(AF_INET, buf, &a) != 1))
		usage_error("--server: '%s' is not A.B.C.D[:PORT] (an IPv4 address)", val);
	c->server_addr = ntohl(a.s_addr);
	c->server_port = colon ? (uint16_t)parse_num("server", colon + 1, 1, 65535, true) : 0;
}

/* --rates R1,R2,... */
static void parse_rates(struct lg_config *c, const char *val)
{
	char *copy = strdup(val), *save = NULL, *tok;
	unsigned n = 1;

	for (const char *p = val; *p; p++)
		n += *p == ',';
	c->rates = calloc(n, sizeof(*c->rates));
	if (!copy || !c->rates)
		usage_error("out of memory");
	c->n_rates = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		c->rates[c->n_rates++] = parse_rate_opt("rates", tok);
	if (!c->n_rates)
		usage_error("--rates: '%s' lists no rate", val);
	free(copy);
}

/* --sweep LO:HI:N */
static void parse_sweep(struct lg_config *c, const char *val)
{
	char lo_s[64], hi_s[64], n_s[64];
	double lo, hi;
	unsigned n;

	if (sscanf(val, "%63[^:]:%63[^:]:%63s", lo_s, hi_s, n_s) != 3)
		usage_error("--sweep: '%s' is not LO:HI:N", val);
	lo = parse_rate_opt("sweep", lo_s);
	hi = parse_rate_opt("sweep", hi_s);
	n = (unsigned)parse_num("sweep", n_s, 1, 1000, true);
	if (hi < lo)
		usage_error("--sweep: '%s' goes down (LO above HI)", val);
	c->rates = calloc(n, sizeof(*c->rates));
	if (!c->rates)
		usage_error("out of memory");
	for (unsigned i = 0; i < n; i++)
		c->rates[i] = n == 1 ? lo : lo + (hi - lo) * i / (n - 1);
	c->n_rates = n;
}

/* --service KIND:MEAN (ZygOS's set) or any distribution, in us unless suffixed. */
static void parse_service(struct lg_config *c, const char *val)
{
	static const char *const kinds[] = { "fixed", "exp", "bimodal1", "bimodal2", NULL };
	const char *colon = strchr(val, ':');
	char err[256];

	for (unsigned i = 0; colon && kinds[i]; i++) {
		struct lg_dist mean;

		if (strlen(kinds[i]) != (size_t)(colon - val) || strncmp(val, kinds[i], strlen(kinds[i])))
			continue;
		if (lg_dist_parse(&mean, colon + 1, true, err, sizeof(err)) ||
		    mean.kind != LG_DIST_FIXED ||
		    lg_dist_service(&c->proto.service, kinds[i], mean.a, err, sizeof(err)))
			usage_error("--service: '%s': %s", val, err[0] ? err : "not KIND:MEAN");
		return;
	}
	if (lg_dist_parse(&c->proto.service, val, true, err, sizeof(err)))
		usage_error("--service: %s", err);
}

static void parse_dist(const char *opt, struct lg_dist *d, const char *val)
{
	char err[256];

	if (lg_dist_parse(d, val, false, err, sizeof(err)))
		usage_error("--%s: %s", opt, err);
}

struct lg_args {
	struct lg_config *c;
	unsigned schedules;       /* how many of --rate/--rates/--sweep/--pattern/--closed */
	bool seed_set, window_set;
	const char *proto;
};

static void take_schedule(struct lg_args *a, int c, const char *val)
{
	struct lg_config *cfg = a->c;

	if (a->schedules++)
		usage_error("give one of --rate, --rates, --sweep, --pattern and --closed");
	free(cfg->rates);
	cfg->rates = NULL;
	switch (c) {
	case OPT_RATE:
		if (!(cfg->rates = malloc(sizeof(*cfg->rates))))
			usage_error("out of memory");
		cfg->rates[0] = parse_rate_opt("rate", val);
		cfg->n_rates = 1;
		break;
	case OPT_RATES:
		parse_rates(cfg, val);
		break;
	case OPT_SWEEP:
		parse_sweep(cfg, val);
		break;
	case OPT_PATTERN:
		cfg->pattern_spec = val;
		break;
	case OPT_CLOSED:
		cfg->closed = (unsigned)parse_num("closed", val, 1, LG_MAX_DEPTH, true);
		break;
	}
}

/* The protocol's options. */
static void take_proto_opt(struct lg_args *a, int c, const char *val)
{
	struct lg_config *cfg = a->c;

	switch (c) {
	case OPT_WORKLOAD:
		if (strcmp(val, "usr") && strcmp(val, "etc") && strcmp(val, "custom"))
			usage_error("--workload: '%s' is not usr, etc or custom", val);
		cfg->proto.workload = val;
		break;
	case OPT_KEYSIZE:
		parse_dist("keysize", &cfg->proto.keysize, val);
		break;
	case OPT_VALUESIZE:
		parse_dist("valuesize", &cfg->proto.valuesize, val);
		break;
	case OPT_GET_RATIO:
		cfg->proto.get_ratio = parse_num("get-ratio", val, 0, 1, false);
		cfg->proto.has_get_ratio = true;
		break;
	case OPT_RECORDS:
		cfg->proto.records = (uint64_t)parse_num("records", val, 1, 1e9, true);
		break;
	case OPT_SIZE:
		cfg->proto.size = (uint32_t)parse_num("size", val, 1, 1 << 20, true);
		break;
	case OPT_SERVICE:
		parse_service(cfg, val);
		break;
	case OPT_PATH:
		cfg->proto.path = val;
		break;
	case OPT_QUERIES:
		cfg->proto.queries = val;
		break;
	case OPT_UDP_PORTS:
		cfg->udp_port_base = (uint16_t)parse_num("udp-ports", val, 1024, 65535, true);
		break;
	}
}

/* One option that is not the runtime's. */
static void take_opt(struct lg_args *a, int c, const char *val)
{
	struct lg_config *cfg = a->c;
	char err[256];

	switch (c) {
	case OPT_HELP:
		fputs(usage, stdout);
		fputs("runtime options (loadgen's --idle default: poll):\n", stdout);
		fputs(fp_rt_options_help, stdout);
		exit(0);
	case OPT_SERVER: parse_server(cfg, val); break;
	case OPT_PROTO: a->proto = val; break;
	case OPT_ARRIVAL:
		lg_arrival_free(&cfg->arrival);
		if (lg_arrival_parse(&cfg->arrival, val, err, sizeof(err)))
			usage_error("--arrival: %s", err);
		cfg->arrival_spec = val;
		break;
	case OPT_RATE: case OPT_RATES: case OPT_SWEEP: case OPT_PATTERN: case OPT_CLOSED:
		take_schedule(a, c, val);
		break;
	case OPT_WINDOW:
		cfg->window_s = parse_num("window", val, 1e-3, 1e6, false);
		a->window_set = true;
		break;
	case OPT_CONNS: cfg->conns = (unsigned)parse_num("conns", val, 1, LG_MAX_CONNS, true); break;
	case OPT_DEPTH: cfg->depth = (unsigned)parse_num("depth", val, 1, LG_MAX_DEPTH, true); break;
	case OPT_BACKLOG:
		cfg->backlog = (unsigned)parse_num("backlog", val, 1, LG_MAX_BACKLOG, true);
		break;
	case OPT_WARMUP: cfg->warmup_s = parse_num("warmup", val, 0, 1e6, false); break;
	case OPT_DURATION: cfg->duration_s = parse_num("duration", val, 1e-3, 1e6, false); break;
	case OPT_TIMEOUT: cfg->timeout_ms = parse_num("timeout", val, 1, 1e7, false); break;
	case OPT_PRELOAD: cfg->preload = true; break;
	case OPT_NO_PRELOAD: cfg->preload = false; break;
	case OPT_MAX_SLIP: cfg->max_slip_us = parse_num("max-slip-us", val, 0, 1e9, false); break;
	case OPT_SLO: cfg->slo_us = parse_num("slo-us", val, 0, 1e9, false); break;
	case OPT_JSON: cfg->json = val; break;
	case OPT_QUIET: cfg->quiet = cfg->rt.quiet = true; break;
	default: take_proto_opt(a, c, val); break;
	}
}

/* The long options: ours, then the runtime's. */
static struct option *build_opts(void)
{
	struct option *all = fp_rt_getopt_table(lg_opts);

	if (!all)
		usage_error("out of memory");
	return all;
}

static void parse_argv(struct lg_args *a, int argc, char **argv)
{
	struct option *all = build_opts();
	char err[256];
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", all, NULL)) != -1) {
		const char *arg = argv[optind - 1];

		if (c == '?') {
			if (optopt && optopt < OPT_RT_BASE && arg[0] == '-' && arg[1] != '-')
				usage_error("unknown option '-%c'", optopt);
			usage_error("unknown option '%s'", arg);
		}
		if (c == ':')
			usage_error("%s needs a value", arg);
		if (c >= OPT_RT_BASE) {
			const char *name = fp_rt_option_names[c - OPT_RT_BASE];

			if (fp_rt_option(&a->c->rt, name, optarg, err, sizeof(err)) < 0)
				usage_error("%s", err);
			a->seed_set |= !strcmp(name, "seed");
			continue;
		}
		take_opt(a, c, optarg);
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	free(all);
}

static void defaults(struct lg_config *c, int argc, char **argv)
{
	char err[128];

	memset(c, 0, sizeof(*c));
	fp_rt_config_init(&c->rt);
	c->rt.idle = FP_IDLE_POLL;      /* sends are due at any time: a sleeping worker is late */
	c->proto.workload = "usr";
	c->proto.records = 10000;       /* mutilate's default key space */
	if (lg_arrival_parse(&c->arrival, "poisson", err, sizeof(err)))
		usage_error("%s", err);
	c->arrival_spec = "poisson";
	c->window_s = 1;
	c->conns = 16;
	c->depth = 1;
	c->udp_port_base = 40000;
	c->backlog = LG_BACKLOG;
	c->warmup_s = 1;
	c->duration_s = 5;
	c->timeout_ms = 1000;
	c->preload = true;
	c->max_slip_us = 50;
	c->slo_us = 500;
	c->argc = argc;
	c->argv = argv;
}

/* Cross-option checks, the protocol, the pattern, the seed. */
static void finish_config(struct lg_args *a)
{
	struct lg_config *c = a->c;
	char err[256];

	if (!c->server_addr)
		usage_error("--server A.B.C.D[:PORT] is required");
	if (!(c->ops = lg_proto_find(a->proto)))
		usage_error("--proto: '%s' is not echo, memcache, spin, http or dns", a->proto);
	c->proto.name = c->ops->name;
	if (!c->server_port)
		c->server_port = !strcmp(c->ops->name, "memcache") ? 11211 :
				 !strcmp(c->ops->name, "http") ? 80 :
				 !strcmp(c->ops->name, "dns") ? 53 : 7;
	snprintf(c->server, sizeof(c->server), "%u.%u.%u.%u:%u", c->server_addr >> 24,
		 (c->server_addr >> 16) & 255, (c->server_addr >> 8) & 255, c->server_addr & 255,
		 c->server_port);
	c->proto.host = c->server;
	if (!a->schedules)
		usage_error("give the load: --rate, --rates, --sweep, --pattern or --closed");
	if (a->window_set && !c->pattern_spec)
		usage_error("--window applies to --pattern only");
	if ((uint64_t)c->conns * (c->depth + c->backlog) > LG_MAX_SLOTS)
		usage_error("--conns %u x (--depth %u + --backlog %u) request slots is more than %u:"
			    " lower --backlog", c->conns, c->depth, c->backlog, LG_MAX_SLOTS);
	if (c->ops->datagram && (uint32_t)c->udp_port_base + c->conns + c->rt.n_workers > 65536)
		usage_error("--udp-ports %u: %u connections need ports up to %u", c->udp_port_base,
			    c->conns, c->udp_port_base + c->conns + c->rt.n_workers - 1);
	if (c->conns < c->rt.n_workers)
		usage_error("--conns %u is fewer than the %u workers: each needs one", c->conns,
			    c->rt.n_workers);
	if (!a->seed_set) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		c->seed = ((uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec) & ((1ull << 48) - 1);
	} else {
		c->seed = c->rt.seed;
	}
	if (c->pattern_spec) {
		if (lg_pattern_parse(&c->pattern, c->pattern_spec, c->duration_s, c->seed, err,
				     sizeof(err)))
			usage_error("--pattern: %s", err);
		if (c->window_s > c->duration_s)
			usage_error("--window %g is longer than --duration %g", c->window_s,
				    c->duration_s);
		if (!(fmax(c->pattern.lo, c->pattern.hi) > 0))
			usage_error("--pattern: '%s' never sends (its highest rate is 0)",
				    c->pattern_spec);
	}
	{       /* the protocol's own checks (sizes, workload), before anything starts */
		struct lg_proto *p = c->ops->create(&c->proto, err, sizeof(err));
		if (!p)
			usage_error("%s", err);
		c->ops->destroy(p);
	}
}

/* Print, write JSON, and pick the exit status. */
static int report(const struct lg_config *cfg, struct lg_result *res)
{
	struct lg_verdict *v = calloc(res->n_points ? res->n_points : 1, sizeof(*v));
	int rc = res->interrupted ? 130 : 0;

	if (!v) {
		fprintf(stderr, "fp-loadgen: out of memory\n");
		return 1;
	}
	lg_verdicts(cfg, res, v);
	lg_print_table(stdout, cfg, res, v);
	fflush(stdout);
	if (cfg->json && lg_write_json(cfg->json, cfg, res, v))
		rc = rc ? rc : 1;
	free(v);
	return rc;
}

int main(int argc, char **argv)
{
	static struct lg_config cfg;
	struct lg_args a = { .c = &cfg, .proto = "memcache" };
	struct lg_result res;
	int rc;

	defaults(&cfg, argc, argv);
	parse_argv(&a, argc, argv);
	finish_config(&a);
	rc = lg_engine_run(&cfg, &res);
	if (rc) {
		if (res.error[0])
			fprintf(stderr, "fp-loadgen: %s\n", res.error);
		rc = 1;     /* without a message, the runtime's startup said why */
	} else {
		rc = report(&cfg, &res);
	}
	lg_result_free(&res);
	lg_arrival_free(&cfg.arrival);
	free(cfg.rates);
	return rc;
}
