/* main.c: fp-kv's command line (memcached's flags and the runtime's); the server itself is server.c. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <flowplane/rt.h>

#include "server.h"
#include "tkv.h"

#define OPT_RT_BASE       FP_RT_OPT_BASE   /* getopt value of runtime option i */
#define OPT_STYLE         900              /* --style: long only (memcached's letters) */

enum kv_style { KV_STYLE_EVENTS, KV_STYLE_THREADS };

struct kv_main {
	struct fp_rt_config rt;
	struct kv_server s;          /* the server (server.c) */
	bool ip_set;                 /* --ip given: -l does not override it */
	enum kv_style style;
	const char *listen;
};

/* ---- the command line ---- */

static const char usage[] =
	"usage: fp-kv [options] [runtime options]   (a memcached 1.6 drop-in)\n"
	"  -p, --port=NUM             TCP port to listen on (default 11211)\n"
	"  -U, --udp-port=NUM         UDP port: only 0 (off); UDP is not supported\n"
	"  -l, --listen=ADDR          IPv4 address to listen on (kernel: bind; xdp: --ip)\n"
	"  -m, --memory-limit=MB      item memory in megabytes (default 64)\n"
	"  -M, --disable-evictions    answer out of memory instead of evicting\n"
	"  -c, --conn-limit=NUM       max simultaneous connections (default 1024)\n"
	"  -t, --threads=NUM          workers, one per core (sets --workers; default 1)\n"
	"  -I, --max-item-size=SIZE   largest item, k/m suffixes (default 1m, min 1k)\n"
	"  -f, --slab-growth-factor=F chunk size growth factor (default 1.25)\n"
	"  -n, --slab-min-size=BYTES  min space for key+value+flags (default 48)\n"
	"  -L, --enable-largepages    touch all item memory at startup\n"
	"  -C, --disable-cas          disable CAS\n"
	"  -F, --disable-flush-all    disable the flush_all command\n"
	"  -o, --extended=LIST        hashpower=N; memcached 1.6's other suboptions are accepted\n"
	"                             without effect (said at start), any other word refused\n"
	"  -u, --user=USER            accepted for compatibility (no privilege drop)\n"
	"  -R, --max-reqs-per-event=N accepted for compatibility (answers go out per 20)\n"
	"      --style=events|threads how the server is written: event callbacks (default),\n"
	"                             or a user-level thread per connection with blocking\n"
	"                             sockets (the same protocol code; issue 19's comparison)\n"
	"  -v, --verbose              -v connections that die, -vv every close by fp-kv\n"
	"  -V, --version              print the version and exit\n"
	"  -h, --help                 print this help and exit\n";

static const struct option own_opts[] = {
	{ "port", required_argument, NULL, 'p' },
	{ "udp-port", required_argument, NULL, 'U' },
	{ "listen", required_argument, NULL, 'l' },
	{ "memory-limit", required_argument, NULL, 'm' },
	{ "disable-evictions", no_argument, NULL, 'M' },
	{ "conn-limit", required_argument, NULL, 'c' },
	{ "threads", required_argument, NULL, 't' },
	{ "max-item-size", required_argument, NULL, 'I' },
	{ "slab-growth-factor", required_argument, NULL, 'f' },
	{ "slab-min-size", required_argument, NULL, 'n' },
	{ "enable-largepages", no_argument, NULL, 'L' },
	{ "disable-cas", no_argument, NULL, 'C' },
	{ "disable-flush-all", no_argument, NULL, 'F' },
	{ "extended", required_argument, NULL, 'o' },
	{ "user", required_argument, NULL, 'u' },
	{ "max-reqs-per-event", required_argument, NULL, 'R' },
	{ "style", required_argument, NULL, OPT_STYLE },
	{ "verbose", no_argument, NULL, 'v' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* One line on stderr, exit 2. */
static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fp-kv: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static uint64_t parse_u64(const char *opt, const char *val, uint64_t lo, uint64_t hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(val, &end, 10);
	if (!*val || *end || errno || val[0] == '-' || v < lo || v > hi)
		usage_error("%s: '%s' is not a whole number in %llu..%llu", opt, val,
			    (unsigned long long)lo, (unsigned long long)hi);
	return v;
}

/* -I: bytes with an optional k or m suffix, as memcached reads it. */
static uint32_t parse_item_size(const char *val)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(val, &end, 10);
	if (end != val && (*end == 'k' || *end == 'K') && !end[1])
		v <<= 10, end++;
	else if (end != val && (*end == 'm' || *end == 'M') && !end[1])
		v <<= 20, end++;
	if (!*val || *end || errno || val[0] == '-')
		usage_error("-I: '%s' is not a size (bytes, or with a k or m suffix)", val);
	if (v < 1024)
		usage_error("-I: item max size cannot be less than 1024 bytes");
	if (v > (1024ull << 20))
		usage_error("-I: cannot set item size limit higher than 1024 mb");
	return (uint32_t)v;
}

static double parse_factor(const char *val)
{
	char *end;
	double f = strtod(val, &end);

	if (!*val || *end || !(f > 1.0) || f > 100.0)
		usage_error("-f: factor must be greater than 1 (got '%s')", val);
	return f;
}

/*
 * memcached 1.6.18's -o suboptions but hashpower (its subopts_tokens, as Debian's build
 * accepts them), which fp-kv takes without effect: a memcached command line runs as it is,
 * and what is ignored is said once at start. Anything else is memcached's "Illegal
 * suboption", a typo caught.
 */
static const char *const mc_subopts[] = {
	"maxconns_fast", "no_maxconns_fast", "no_hashexpand", "slab_reassign",
	"no_slab_reassign", "slab_automove", "no_slab_automove", "slab_automove_ratio",
	"slab_automove_window", "slab_automove_freeratio", "tail_repair_time", "hash_algorithm",
	"lru_crawler", "no_lru_crawler", "lru_crawler_sleep", "lru_crawler_tocrawl",
	"lru_maintainer", "no_lru_maintainer", "hot_lru_pct", "warm_lru_pct", "hot_max_factor",
	"warm_max_factor", "temporary_ttl", "idle_timeout", "watcher_logbuf_size",
	"worker_logbuf_size", "slab_sizes", "slab_chunk_max", "track_sizes",
	"inline_ascii_resp", "no_inline_ascii_resp", "modern", "no_modern", "no_chunked_items",
	"drop_privileges", "no_drop_privileges", "read_buf_mem_limit", "resp_obj_mem_limit",
	"sock_cookie_id", "ext_path", "ext_page_size", "ext_wbuf_size", "ext_threads",
	"ext_io_depth", "ext_item_size", "ext_item_age", "ext_low_ttl", "ext_recache_rate",
	"ext_compact_under", "ext_drop_under", "ext_max_frag", "ext_max_sleep",
	"ext_drop_unread", "ssl_chain_cert", "ssl_key", "ssl_keyformat", "ssl_verify_mode",
	"ssl_ciphers", "ssl_ca_cert", "ssl_wbuf_size", "ssl_session_cache", "ssl_kernel_tls",
	"ssl_min_version",
};

static bool mc_subopt(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(mc_subopts) / sizeof(mc_subopts[0]); i++)
		if (strlen(mc_subopts[i]) == n && !strncmp(mc_subopts[i], name, n))
			return true;
	return false;
}

static void parse_extended(struct kv_main *m, const char *val)
{
	const char *p = val;
	char ignored[512] = "";
	size_t len = 0;

	while (*p) {
		size_t n = strcspn(p, ","), name = strcspn(p, "=,");

		if (name == 9 && !strncmp(p, "hashpower", 9)) {
			char num[16];

			if (n == 9 || n - 10 >= sizeof(num))
				usage_error("-o hashpower: '%.*s' is not hashpower=N, N in 12..32",
					    (int)n, p);
			memcpy(num, p + 10, n - 10);
			num[n - 10] = '\0';
			m->s.store.hashpower = (unsigned)parse_u64("-o hashpower", num, 12, 32);
			m->s.set.hashpower_init = m->s.store.hashpower;
		} else if (mc_subopt(p, name)) {
			if (len + name + 3 < sizeof(ignored))
				len += (size_t)snprintf(ignored + len, sizeof(ignored) - len, "%s%.*s",
							len ? ", " : "", (int)name, p);
		} else if (n) {
			usage_error("-o: illegal suboption \"%.*s\" (fp-kv honours hashpower=N and "
				    "accepts memcached 1.6's others without effect)", (int)name, p);
		}
		p += n + (p[n] == ',');
	}
	if (len)
		fprintf(stderr, "fp-kv: -o: memcached's %s: accepted, no effect here\n", ignored);
}

static void defaults(struct kv_main *m)
{
	fp_rt_config_init(&m->rt);
	kv_server_defaults(&m->s);
}

/* One of fp-kv's own options. */
static void take_opt(struct kv_main *m, int c, const char *val)
{
	switch (c) {
	case 'p': m->s.set.tcpport = (uint16_t)parse_u64("-p", val, 1, 65535); break;
	case 'U':
		if (parse_u64("-U", val, 0, 65535))
			usage_error("-U %s: UDP is not supported (memcached's UDP framing); "
				    "use TCP, or -U 0", val);
		break;
	case 'l': m->listen = val; break;
	case 'm': m->s.store.mem_limit = parse_u64("-m", val, 1, 1u << 22) << 20; break;
	case 'M': m->s.store.evict = m->s.set.evict = false; break;
	case 'c': m->s.set.maxconns = (unsigned)parse_u64("-c", val, 1, 1u << 24); break;
	case 'I': m->s.store.item_max = parse_item_size(val); break;
	case 'f': m->s.store.growth_factor = m->s.set.factor = parse_factor(val); break;
	case 'n': m->s.store.chunk_min = (uint32_t)parse_u64("-n", val, 1, 1u << 20); break;
	case 'L': m->s.store.prealloc = true; break;
	case 'C': m->s.store.use_cas = m->s.set.use_cas = false; break;
	case 'F': m->s.set.flush_enabled = false; break;
	case 'o': parse_extended(m, val); break;
	case 'R': parse_u64("-R", val, 1, 1u << 20); break;
	case OPT_STYLE:
		if (!strcmp(val, "events"))
			m->style = KV_STYLE_EVENTS;
		else if (!strcmp(val, "threads"))
			m->style = KV_STYLE_THREADS;
		else
			usage_error("--style: '%s' is not events or threads", val);
		break;
	case 'v': m->s.proto.verbose++; break;
	case 'V': printf("fp-kv %s (memcached %s protocol)\n", KV_VERSION, KV_VERSION); exit(0);
	case 'h':
		fputs(usage, stdout);
		fputs("runtime options:\n", stdout);
		fputs(fp_rt_options_help, stdout);
		exit(0);
	}
}

/* Our table followed by the runtime's options; NULL-terminated. */
static struct option *build_opts(void)
{
	struct option *all = fp_rt_getopt_table(own_opts);

	if (!all)
		usage_error("out of memory");
	return all;
}

static void runtime_opt(struct kv_main *m, const char *name, const char *val)
{
	char err[256];

	if (fp_rt_option(&m->rt, name, val, err, sizeof(err)) < 0)
		usage_error("%s", err);
	m->ip_set |= !strcmp(name, "ip");
}

static void parse(struct kv_main *m, int argc, char **argv)
{
	struct option *all = build_opts();
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":p:U:l:m:Mc:t:I:f:n:LCFo:u:R:vVh", all, NULL)) != -1) {
		const char *arg = argv[optind - 1];

		if (c == '?') {
			if (optopt && optopt < OPT_RT_BASE && arg[0] == '-' && arg[1] != '-')
				usage_error("unknown option '-%c' (--help for usage)", optopt);
			usage_error("unknown option '%s' (--help for usage)", arg);
		}
		if (c == ':')
			usage_error("%s needs a value", arg);
		if (c >= OPT_RT_BASE)
			runtime_opt(m, fp_rt_option_names[c - OPT_RT_BASE], optarg);
		else if (c == 't')
			runtime_opt(m, "workers", optarg);
		else
			take_opt(m, c, optarg);
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	free(all);
	if (m->listen && !m->ip_set)
		runtime_opt(m, "ip", m->listen);
	if (m->s.store.item_max > m->s.store.mem_limit / 2)
		usage_error("-I: cannot set item size limit higher than 1/2 of memory max (-m)");
}

/* ---- the run ---- */

/*
 * On Linux sockets every connection is a file: -c connections need that many open files
 * and a few more (listeners, io_uring or epoll, the stats segment, stdio). Raise the soft
 * limit to what -c needs, and the hard one too when allowed (root); when neither can be,
 * refuse to start, as memcached does, rather than fail accept() under load later.
 */
#define KV_FD_RESERVE 64u

static void check_nofile(const struct kv_main *m)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)m->s.set.maxconns + KV_FD_RESERVE + 8u * m->rt.n_workers;

	if (m->rt.transport != FP_TRANSPORT_KERNEL || getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
		return;
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
		rl.rlim_cur = need;
		if (!setrlimit(RLIMIT_NOFILE, &rl))
			return;
	}
	struct rlimit want = { need, need };
	if (!setrlimit(RLIMIT_NOFILE, &want))
		return;
	fprintf(stderr, "fp-kv: -c %u needs %llu open files on the kernel transport and the "
		"limit is %llu (ulimit -n): lower -c, raise the limit, or start as root\n",
		m->s.set.maxconns, (unsigned long long)need,
		(unsigned long long)(rl.rlim_max == RLIM_INFINITY ? rl.rlim_cur : rl.rlim_max));
	exit(1);
}

int main(int argc, char **argv)
{
	static struct kv_main m;
	struct fp_app app;
	char err[256];
	int rc;

	defaults(&m);
	parse(&m, argc, argv);
	check_nofile(&m);
	m.s.set.inter = m.listen;
	if (kv_server_open(&m.s, m.rt.n_workers, err, sizeof(err))) {
		fprintf(stderr, "fp-kv: %s\n", err);
		return 1;
	}
	if (m.style == KV_STYLE_THREADS) {
		struct kv_tkv_config tc = {
			.rt = &m.rt, .proto = &m.s.proto, .port = m.s.set.tcpport,
			.maxconns = m.s.set.maxconns, .conns = &m.s.conns,
			.max_pending = m.s.ops.max_pending,
			.max_total_pending = m.s.ops.max_total_pending,
		};
		rc = kv_threads_run(&tc);
	} else {
		kv_server_app(&m.s, &app);
		rc = fp_rt_run(&m.rt, &app);
	}
	kv_server_close(&m.s);
	return rc ? 1 : 0;
}
