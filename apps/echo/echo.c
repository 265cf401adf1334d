/* echo.c: fp-echo's command line: the server, client, pingpong and spin subcommands and their options. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo.h"

/*
 * Every subcommand takes its own options and the runtime's (fp_rt_option_names, handed to
 * fp_rt_option). A bad argument is one line on stderr and exit status 2; --help prints the
 * subcommand's options, then the runtime's.
 */

#define OPT_RT_BASE FP_RT_OPT_BASE

enum {
	OPT_PORT = 'p', OPT_UDP = 'u', OPT_SERVER = 's', OPT_CONNS = 'c', OPT_SIZE = 'z',
	OPT_ROUNDS = 'r', OPT_DURATION = 'd', OPT_WARMUP = 'w', OPT_COUNT = 'n', OPT_JSON = 'j',
	OPT_HELP = 'h', OPT_NATIVE = 'N', OPT_THREADS = 'T', OPT_PTHREADS = 'P',
};

static const struct option server_opts[] = {
	{ "port", required_argument, NULL, OPT_PORT },
	{ "udp", no_argument, NULL, OPT_UDP },
	{ "native", no_argument, NULL, OPT_NATIVE },
	{ "threads", no_argument, NULL, OPT_THREADS },
	{ "pthreads", no_argument, NULL, OPT_PTHREADS },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const struct option spin_opts[] = {
	{ "port", required_argument, NULL, OPT_PORT },
	{ "native", no_argument, NULL, OPT_NATIVE },
	{ "threads", no_argument, NULL, OPT_THREADS },
	{ "pthreads", no_argument, NULL, OPT_PTHREADS },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const struct option client_opts[] = {
	{ "server", required_argument, NULL, OPT_SERVER },
	{ "conns", required_argument, NULL, OPT_CONNS },
	{ "size", required_argument, NULL, OPT_SIZE },
	{ "rounds", required_argument, NULL, OPT_ROUNDS },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const struct option pingpong_opts[] = {
	{ "server", required_argument, NULL, OPT_SERVER },
	{ "size", required_argument, NULL, OPT_SIZE },
	{ "count", required_argument, NULL, OPT_COUNT },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static const char usage_top[] =
	"usage: fp-echo server|client|pingpong|spin [options]   (fp-echo COMMAND --help for each)\n"
	"  server     TCP (and --udp: UDP) echo; runs until SIGINT\n"
	"  client     IX's echo benchmark: messages/s, connections/s, round-trip times\n"
	"  pingpong   NetPIPE-style latency: one connection, one message in flight\n"
	"  spin       fp-loadgen's spin protocol: each request spins its service time on the\n"
	"             TSC, then its 16-byte header goes back; runs until SIGINT\n";

static const char usage_spin[] =
	"usage: fp-echo spin [--port P] [--native | --threads | --pthreads] [runtime options]\n"
	"  --port P              TCP port (default 7); requests as fp-loadgen --proto spin\n"
	"                        sends them (apps/loadgen/lg.h), served in order per\n"
	"                        connection, each spinning its service time on the worker\n"
	"  --native              the server on the native API (api.h) instead of the\n"
	"                        event-callback layer: steal-safe, so --sched steal lets\n"
	"                        idle workers run other workers' connections (ZygOS)\n"
	"  --threads             written with user-level threads and blocking sockets\n"
	"                        (tsock.h): a thread per connection reads a request,\n"
	"                        spins, writes the answer (Shenango's model)\n"
	"  --pthreads            the same as a Linux thread per connection on blocking\n"
	"                        Linux sockets: not flowplane, the peer it is measured\n"
	"                        against (--ip and the first of --cores apply)\n";

static const char usage_server[] =
	"usage: fp-echo server [--port P] [--udp | --native | --threads | --pthreads]\n"
	"                      [runtime options]\n"
	"  --port P              TCP (and UDP) port to echo on (default 7)\n"
	"  --udp                 also echo UDP datagrams on the same port\n"
	"  --native              written on the native API (api.h), as IX's echo server was,\n"
	"                        instead of the event-callback layer: each batch's bytes\n"
	"                        copied once and offered back in one SENDV; steal-safe\n"
	"                        (TCP only)\n"
	"  --threads             written with user-level threads and blocking sockets\n"
	"                        (tsock.h): a thread per connection reads and writes back\n"
	"                        (TCP only)\n"
	"  --pthreads            the same as a Linux thread per connection on blocking\n"
	"                        Linux sockets: not flowplane, the peer it is measured\n"
	"                        against (--ip and the first of --cores apply)\n";

static const char usage_client[] =
	"usage: fp-echo client --server IP[:PORT] [options] [runtime options]\n"
	"  --server IP[:PORT]    the echo server (port default 7)\n"
	"  --conns C             connections per worker (default 16)\n"
	"  --size S              message bytes (default 64)\n"
	"  --rounds N            round trips per connection before it is reset and\n"
	"                        replaced; 0 = never (default 1024)\n"
	"  --duration SEC        measurement window (default 5)\n"
	"  --warmup SEC          run this long before measuring (default 1)\n"
	"  --json FILE           also write the results as JSON\n";

static const char usage_pingpong[] =
	"usage: fp-echo pingpong --server IP[:PORT] [options] [runtime options]\n"
	"  --server IP[:PORT]    the echo server (port default 7)\n"
	"  --size S              message bytes (default 64)\n"
	"  --count N             round trips measured (default 10000)\n"
	"  --warmup N            round trips before measuring (default 1000)\n"
	"  --json FILE           also write the results as JSON\n";

/* One line on stderr, exit 2. */
static void __attribute__((noreturn, format(printf, 2, 3))) usage_error(const char *cmd,
									 const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fp-echo%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static uint64_t parse_u64(const char *cmd, const char *opt, const char *val, uint64_t lo,
			  uint64_t hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(val, &end, 10);
	if (!*val || *end || errno || val[0] == '-' || v < lo || v > hi)
		usage_error(cmd, "--%s: '%s' is not a whole number in %llu..%llu", opt, val,
			    (unsigned long long)lo, (unsigned long long)hi);
	return v;
}

static double parse_secs(const char *cmd, const char *opt, const char *val, double lo)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (!*val || *end || errno || !isfinite(v) || v < lo || v > 1e6 || (lo > 0 && v <= 0))
		usage_error(cmd, "--%s: '%s' is not a number of seconds%s", opt, val,
			    lo > 0 ? " above 0" : "");
	return v;
}

/* "A.B.C.D" or "A.B.C.D:PORT" into host-order address and port. */
static void parse_server(struct echo_opts *o, const char *val)
{
	char buf[64];
	const char *colon = strchr(val, ':');
	size_t alen = colon ? (size_t)(colon - val) : strlen(val);
	struct in_addr a;

	if (alen >= sizeof(buf) - 8)
		usage_error(o->cmd, "--server: '%s' is not IP[:PORT]", val);
	memcpy(buf, val, alen);
	buf[alen] = '\0';
	if (inet_pton(AF_INET, buf, &a) != 1)
		usage_error(o->cmd, "--server: '%s' is not IP[:PORT] (an IPv4 address)", val);
	o->server_addr = ntohl(a.s_addr);
	o->server_port = colon ? (uint16_t)parse_u64(o->cmd, "server", colon + 1, 1, 65535)
			       : ECHO_DEFAULT_PORT;
	inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
	buf[INET_ADDRSTRLEN - 1] = '\0';
	snprintf(o->server_str, sizeof(o->server_str), "%.15s:%u", buf, o->server_port);
}

/* The subcommand's table followed by the runtime's options; NULL-terminated. */
static struct option *build_opts(const struct option *own)
{
	struct option *all = fp_rt_getopt_table(own);

	if (!all) {
		fprintf(stderr, "fp-echo: out of memory\n");
		exit(1);
	}
	return all;
}

static void defaults(struct echo_opts *o)
{
	fp_rt_config_init(&o->rt);
	o->port = ECHO_DEFAULT_PORT;
	o->conns = 16;
	o->size = 64;
	o->rounds = 1024;
	o->duration_s = 5;
	o->warmup_s = 1;
	o->count = 10000;
	o->warmup_n = 1000;
}

/* One option of @o's subcommand (not a runtime one). */
static void take_opt(struct echo_opts *o, int c, const char *val, const char *usage)
{
	const char *cmd = o->cmd;

	switch (c) {
	case OPT_HELP:
		fputs(usage, stdout);
		fputs("runtime options:\n", stdout);
		fputs(fp_rt_options_help, stdout);
		exit(0);
	case OPT_PORT:
		o->port = (uint16_t)parse_u64(cmd, "port", val, 1, 65535);
		break;
	case OPT_UDP:
		o->udp = true;
		break;
	case OPT_THREADS:
		o->threads = true;
		break;
	case OPT_PTHREADS:
		o->pthreads = true;
		break;
	case OPT_NATIVE:
		o->native = true;
		break;
	case OPT_SERVER:
		parse_server(o, val);
		break;
	case OPT_CONNS:
		o->conns = (unsigned)parse_u64(cmd, "conns", val, 1, 65536);
		break;
	case OPT_SIZE:
		o->size = (size_t)parse_u64(cmd, "size", val, 1, ECHO_MAX_SIZE);
		break;
	case OPT_ROUNDS:
		o->rounds = parse_u64(cmd, "rounds", val, 0, UINT64_MAX);
		break;
	case OPT_DURATION:
		o->duration_s = parse_secs(cmd, "duration", val, 1e-3);
		break;
	case OPT_WARMUP:
		if (o->mode == ECHO_PINGPONG)
			o->warmup_n = parse_u64(cmd, "warmup", val, 0, 1000000000);
		else
			o->warmup_s = parse_secs(cmd, "warmup", val, 0);
		break;
	case OPT_COUNT:
		o->count = parse_u64(cmd, "count", val, 1, 1000000000);
		break;
	case OPT_JSON:
		o->json = val;
		break;
	}
}

static void parse(struct echo_opts *o, int argc, char **argv, const struct option *own,
		  const char *usage)
{
	struct option *all = build_opts(own);
	char err[256];
	int c;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", all, NULL)) != -1) {
		const char *arg = argv[optind - 1];

		if (c == '?') {
			if (optopt && optopt < OPT_RT_BASE && arg[0] == '-' && arg[1] != '-')
				usage_error(o->cmd, "unknown option '-%c'", optopt);
			usage_error(o->cmd, "unknown option '%s'", arg);
		}
		if (c == ':')
			usage_error(o->cmd, "%s needs a value", arg);
		if (c >= OPT_RT_BASE) {
			const char *name = fp_rt_option_names[c - OPT_RT_BASE];

			if (fp_rt_option(&o->rt, name, optarg, err, sizeof(err)) < 0)
				usage_error(o->cmd, "%s", err);
			continue;
		}
		take_opt(o, c, optarg, usage);
	}
	if (optind < argc)
		usage_error(o->cmd, "unexpected argument '%s'", argv[optind]);
	free(all);
}

int main(int argc, char **argv)
{
	static struct echo_opts o;
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (!cmd)
		usage_error(NULL, "expected a command: server, client, pingpong or spin (--help for usage)");
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		fputs(usage_top, stdout);
		return 0;
	}
	defaults(&o);
	o.cmd = cmd;
	if (!strcmp(cmd, "server")) {
		o.mode = ECHO_SERVER;
		parse(&o, argc - 1, argv + 1, server_opts, usage_server);
		if ((o.threads || o.pthreads || o.native) && o.udp) {
			fprintf(stderr, "fp-echo: server: --native, --threads and --pthreads serve "
				"TCP only: drop --udp\n");
			return 2;
		}
		if (o.native + o.threads + o.pthreads > 1) {
			fprintf(stderr, "fp-echo: server: one of --native, --threads, --pthreads\n");
			return 2;
		}
		return o.pthreads ? echo_pthreads_run(&o) : o.threads ? echo_tserver_run(&o)
		       : o.native ? echo_spin_native_run(&o) : echo_server_run(&o);
	}
	if (!strcmp(cmd, "spin")) {
		o.mode = ECHO_SPIN;
		parse(&o, argc - 1, argv + 1, spin_opts, usage_spin);
		if (o.native + o.threads + o.pthreads > 1) {
			fprintf(stderr, "fp-echo: spin: one of --native, --threads, --pthreads\n");
			return 2;
		}
		return o.native ? echo_spin_native_run(&o) : o.threads ? echo_tspin_run(&o)
		       : o.pthreads ? echo_pthreads_run(&o) : echo_spin_run(&o);
	}
	if (!strcmp(cmd, "client"))
		o.mode = ECHO_CLIENT;
	else if (!strcmp(cmd, "pingpong"))
		o.mode = ECHO_PINGPONG;
	else
		usage_error(NULL, "unknown command '%s' (expected server, client, pingpong or spin)", cmd);
	parse(&o, argc - 1, argv + 1, o.mode == ECHO_CLIENT ? client_opts : pingpong_opts,
	      o.mode == ECHO_CLIENT ? usage_client : usage_pingpong);
	if (!o.server_str[0])
		usage_error(cmd, "--server IP[:PORT] is required");
	if (o.mode == ECHO_PINGPONG)
		o.rounds = 0;
	return echo_client_run(&o);
}
