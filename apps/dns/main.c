/* main.c: fp-dns's command line, and DNS over UDP and TCP (RFC 1035 §4.2, RFC 7766) on flowplane's event layer. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/evl.h>
#include <flowplane/rt.h>

#include "dns.h"

/*
 * One db, built before fp_rt_run and only read afterwards, shared by every worker. A
 * datagram is answered in the receive callback: dns_reply() writes into the worker's
 * buffer and fp_evl_udp_send() copies it into a frame. TCP carries messages behind a
 * two-byte length (RFC 1035 §4.2.2); a connection may send many (RFC 7766 §6.2.1.1), and
 * they are answered in order. A worker whose output toward a client that does not read
 * fills up stops reading that client (evl's back-pressure).
 */

#define DNS_DEFAULT_PORT 53
#define DNS_TCP_IDLE_S   10         /* RFC 7766 §6.2.3: seconds, as Knot's default */
#define DNS_TICK_US      1000000
#define DNS_TCP_ROOM     (DNS_MSG_MAX + 2u)   /* the largest answer with its length */
#define OPT_RT_BASE      FP_RT_OPT_BASE

struct dns_conn {
	uint64_t last_us;            /* the last bytes from the client */
	struct fp_evl_conn *c;
	struct dns_conn *next, **pprev;
};

struct dns_worker {
	struct dns_counters cnt;
	struct fp_evl *evl;
	struct dns_conn *conns;      /* TCP connections, freed at the end (evl resets them) */
	struct fp_timer tick;        /* once a second: close idle TCP connections */
	unsigned tcp_idle_s;
	uint8_t out[DNS_MSG_MAX + 2];
};

struct dns_main {
	struct fp_rt_config rt;
	const char *zone, *origin;
	uint16_t port, edns_max;
	unsigned tcp_idle_s;         /* 0: never */
	bool check;
	struct dns_db *db;
	struct dns_worker *ws[FP_RT_MAX_WORKERS];
};

static const char usage[] =
	"usage: fp-dns --zone FILE [options] [runtime options]\n"
	"\n"
	"An authoritative DNS server: it loads one zone (RFC 1035 master format: A, AAAA, NS,\n"
	"MX, CNAME, TXT, SOA, class IN), builds the answers at start, and serves them over\n"
	"UDP and TCP on flowplane's transports (--net kernel, the default, or xdp).\n"
	"\n"
	"  -z, --zone FILE       the zone file (required)\n"
	"  -o, --origin NAME     the origin before any $ORIGIN (default: none; names must then\n"
	"                        be absolute until a $ORIGIN)\n"
	"  -p, --port P          UDP and TCP port (53; below 1024 needs root on --net kernel)\n"
	"      --edns-size N     largest UDP answer to an EDNS0 client (1232; 512..4096)\n"
	"      --tcp-timeout S   close a TCP connection idle this long (10; 0: never)\n"
	"      --check           load the zone, print what it holds, and exit (0 if it loads)\n"
	"  -h, --help            this text\n"
	"\n"
	"The zone is read once: to serve a changed file, restart fp-dns.\n";

static const struct option own_opts[] = {
	{ "zone", required_argument, NULL, 'z' },
	{ "origin", required_argument, NULL, 'o' },
	{ "port", required_argument, NULL, 'p' },
	{ "edns-size", required_argument, NULL, 'E' },
	{ "tcp-timeout", required_argument, NULL, 'T' },
	{ "check", no_argument, NULL, 'C' },
	{ "help", no_argument, NULL, 'h' },
	{ 0, 0, 0, 0 },
};

static _Noreturn void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fp-dns: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static unsigned long parse_num(const char *opt, const char *val, unsigned long lo,
			       unsigned long hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(val, &end, 10);
	if (errno || end == val || *end || val[0] == '-' || v < lo || v > hi)
		usage_error("%s '%s': want a number from %lu to %lu", opt, val, lo, hi);
	return v;
}

static void parse(struct dns_main *m, int argc, char **argv)
{
	struct option *all = fp_rt_getopt_table(own_opts);
	char err[256];
	int c;

	if (!all)
		usage_error("out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":z:o:p:h", all, NULL)) != -1) {
		const char *arg = argv[optind - 1];

		switch (c) {
		case 'z': m->zone = optarg; break;
		case 'o': m->origin = optarg; break;
		case 'p': m->port = (uint16_t)parse_num("--port", optarg, 1, 65535); break;
		case 'E': m->edns_max = (uint16_t)parse_num("--edns-size", optarg, 512, 4096); break;
		case 'T': m->tcp_idle_s = (unsigned)parse_num("--tcp-timeout", optarg, 0, 86400); break;
		case 'C': m->check = true; break;
		case 'h':
			fputs(usage, stdout);
			fputs("\nruntime options:\n", stdout);
			fputs(fp_rt_options_help, stdout);
			exit(0);
		case ':': usage_error("%s needs a value", arg);
		case '?': usage_error("unknown option '%s' (--help for usage)", arg);
		default:
			if (fp_rt_option(&m->rt, fp_rt_option_names[c - OPT_RT_BASE], optarg, err,
					 sizeof(err)) < 0)
				usage_error("%s", err);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	free(all);
	if (!m->zone)
		usage_error("--zone FILE is required (--help for usage)");
}

/* ---- loading ---- */

static char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;

	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		if (fd >= 0 && !errno)
			errno = EISDIR;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	while (buf && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n <= 0) {
			if (!n)
				break;
			if (errno == EINTR)
				continue;
			free(buf);
			buf = NULL;
			goto out;
		}
		got += (size_t)n;
	}
	*len = got;
out:
	if (fd >= 0)
		close(fd);
	return buf;
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static int load(struct dns_main *m)
{
	struct dns_zone z;
	struct dns_db_info info;
	struct timespec t0;
	char err[512], apex[1024];
	size_t len = 0;
	char *text;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	errno = 0;
	text = read_file(m->zone, &len);
	if (!text) {
		fprintf(stderr, "fp-dns: cannot read the zone %s: %s\n", m->zone,
			errno ? strerror(errno) : "out of memory");
		return -1;
	}
	int rc = dns_zone_parse(&z, text, len, m->origin, m->zone, err, sizeof(err));
	free(text);
	if (rc) {
		fprintf(stderr, "fp-dns: %s\n", err);
		return -1;
	}
	dns_name_text(z.apex, z.apex_len, apex, sizeof(apex));
	size_t dups = z.duplicates;
	m->db = dns_db_create(&z, m->edns_max, err, sizeof(err));
	if (!m->db) {
		fprintf(stderr, "fp-dns: %s: %s\n", m->zone, err);
		return -1;
	}
	dns_db_get_info(m->db, &info);
	fprintf(m->check ? stdout : stderr,
		"fp-dns: zone %s: %zu names (%zu empty non-terminals, %zu delegation%s), %zu "
		"records (%zu duplicates dropped), %zu answers pre-built (%zu KB) in %.0f ms\n",
		apex, info.names, info.empty_nonterminals, info.cuts, info.cuts == 1 ? "" : "s",
		info.records, dups, info.prebuilt, info.prebuilt_bytes >> 10, ms_since(&t0));
	return 0;
}

/* ---- serving ---- */

static inline struct dns_main *main_of(struct fp_evl *evl)
{
	return fp_evl_user(evl);
}

static struct dns_worker *worker_of(struct fp_evl *evl)
{
	return main_of(evl)->ws[fp_ctx_worker(fp_evl_ctx(evl))];
}

static void conn_link(struct dns_worker *wk, struct dns_conn *dc)
{
	if ((dc->next = wk->conns))
		wk->conns->pprev = &dc->next;
	wk->conns = dc;
	dc->pprev = &wk->conns;
}

static void conn_unlink(struct dns_conn *dc)
{
	if ((*dc->pprev = dc->next))
		dc->next->pprev = dc->pprev;
}

/* Once a second: a TCP connection whose client has sent nothing for tcp_idle_s, with
 * nothing of ours still leaving, is closed (RFC 7766 §6.2.3), so idle clients do not
 * hold the stack's connections. */
static void dns_tick(struct fp_timer *t, uint64_t now_us)
{
	struct dns_worker *wk = fp_container_of(t, struct dns_worker, tick);
	uint64_t idle_us = (uint64_t)wk->tcp_idle_s * 1000000u;
	struct dns_conn *dc, *next;

	for (dc = wk->conns; dc; dc = next) {
		next = dc->next;
		if (now_us - dc->last_us < idle_us || fp_evl_pending(dc->c))
			continue;
		fp_evl_close(dc->c);
		conn_unlink(dc);
		free(dc);
	}
	fp_ctx_timer_add(fp_evl_ctx(wk->evl), &wk->tick, now_us + DNS_TICK_US);
}

static int dns_init(struct fp_evl *evl, void *arg)
{
	struct dns_main *m = arg;
	unsigned w = fp_ctx_worker(fp_evl_ctx(evl));
	struct dns_worker *wk;

	if (!(wk = m->ws[w] = calloc(1, sizeof(*m->ws[w]))))
		return -ENOMEM;
	wk->evl = evl;
	wk->tcp_idle_s = m->tcp_idle_s;
	if (wk->tcp_idle_s) {
		fp_timer_init(&wk->tick, dns_tick);
		fp_ctx_timer_add(fp_evl_ctx(evl), &wk->tick, fp_ctx_now_us(fp_evl_ctx(evl)) + DNS_TICK_US);
	}
	fp_evl_set_user(evl, m);
	fp_evl_udp_bind(evl, m->port);
	fp_evl_listen(evl, m->port, NULL);
	return 0;
}

static void dns_udp(struct fp_evl *evl, uint16_t lport, uint32_t raddr, uint16_t rport,
		    const uint8_t *data, size_t len)
{
	struct dns_worker *wk = worker_of(evl);
	size_t n = dns_reply(main_of(evl)->db, data, len, wk->out, 0, &wk->cnt);
	int rc = n ? fp_evl_udp_send(evl, lport, raddr, rport, wk->out, n) : 0;

	fp_ctx_count(fp_evl_ctx(evl), n ? 1 : 0, !n || rc ? 1 : 0);
}

static void *dns_accept(struct fp_evl_conn *c, void *larg)
{
	struct fp_evl *evl = fp_evl_of(c);
	struct dns_conn *dc = calloc(1, sizeof(*dc));

	(void)larg;
	if (!dc)
		return NULL;                 /* refused: closed by evl */
	dc->c = c;
	dc->last_us = fp_ctx_now_us(fp_evl_ctx(evl));
	conn_link(worker_of(evl), dc);
	return dc;
}

static void dns_fini(struct fp_evl *evl)
{
	struct dns_worker *wk = worker_of(evl);

	if (wk->tcp_idle_s)
		fp_ctx_timer_cancel(fp_evl_ctx(evl), &wk->tick);
	while (wk->conns) {
		struct dns_conn *dc = wk->conns;
		conn_unlink(dc);
		free(dc);
	}
}

/* Flow-group migration: the connection joins the new worker's list. */
static void dns_leaving(struct fp_evl_conn *c)
{
	conn_unlink(fp_evl_conn_user(c));
}

static void dns_arrived(struct fp_evl_conn *c)
{
	conn_link(worker_of(fp_evl_of(c)), fp_evl_conn_user(c));
}

/* Messages behind their lengths; a length under a header's cannot be answered, and the
 * connection is closed (RFC 7766 §6.2.4 leaves it to us). */
static size_t dns_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct fp_evl *evl = fp_evl_of(c);
	struct dns_worker *wk = worker_of(evl);
	struct dns_conn *dc = fp_evl_conn_user(c);
	size_t used = 0;
	uint64_t ops = 0, errs = 0;

	dc->last_us = fp_ctx_now_us(fp_evl_ctx(evl));
	while (len - used >= 2) {
		size_t mlen = (size_t)data[used] << 8 | data[used + 1];
		if (mlen < DNS_HDR_LEN) {
			wk->cnt.queries++;
			wk->cnt.dropped++;
			errs++;
			fp_evl_close(c);
			conn_unlink(dc);
			free(dc);
			fp_ctx_count(fp_evl_ctx(evl), ops, errs);
			return len;
		}
		if (len - used < 2 + mlen || fp_evl_room(c) < DNS_TCP_ROOM)
			break;                       /* more to come, or wait for the output */
		size_t n = dns_reply(main_of(evl)->db, data + used + 2, mlen, wk->out + 2,
				     DNS_MSG_MAX, &wk->cnt);
		used += 2 + mlen;
		if (!n) {
			errs++;
			continue;
		}
		wk->out[0] = (uint8_t)(n >> 8);
		wk->out[1] = (uint8_t)n;
		if (fp_evl_write(c, wk->out, n + 2)) {
			errs++;
			used = len;                  /* closing: nothing more goes back */
			break;
		}
		ops++;
	}
	fp_ctx_count(fp_evl_ctx(evl), ops, errs);
	return used;
}

static void dns_closed(struct fp_evl_conn *c, int status)
{
	struct dns_conn *dc = fp_evl_conn_user(c);

	(void)status;
	conn_unlink(dc);
	free(dc);
}

static void print_counters(const struct dns_main *m)
{
	struct dns_counters t = { 0 };
	static const char *const names[DNS_R_COUNT] = {
		[DNS_R_NOERROR] = "NOERROR", [DNS_R_FORMERR] = "FORMERR",
		[DNS_R_SERVFAIL] = "SERVFAIL", [DNS_R_NXDOMAIN] = "NXDOMAIN",
		[DNS_R_NOTIMP] = "NOTIMP", [DNS_R_REFUSED] = "REFUSED", [DNS_R_BADVERS] = "BADVERS",
	};

	for (unsigned w = 0; w < FP_RT_MAX_WORKERS; w++) {
		const struct dns_counters *c = m->ws[w] ? &m->ws[w]->cnt : NULL;
		if (!c)
			continue;
		t.queries += c->queries;
		t.dropped += c->dropped;
		t.truncated += c->truncated;
		t.additional_cut += c->additional_cut;
		t.prebuilt += c->prebuilt;
		t.built += c->built;
		for (unsigned r = 0; r < DNS_R_COUNT; r++)
			t.rcode[r] += c->rcode[r];
	}
	fprintf(stderr, "fp-dns: %llu queries, %llu pre-built answers, %llu built, %llu dropped, "
		"%llu truncated (TC), %llu without additional;",
		(unsigned long long)t.queries, (unsigned long long)t.prebuilt,
		(unsigned long long)t.built, (unsigned long long)t.dropped,
		(unsigned long long)t.truncated, (unsigned long long)t.additional_cut);
	for (unsigned r = 0; r < DNS_R_COUNT; r++)
		if (names[r])
			fprintf(stderr, " %s %llu", names[r], (unsigned long long)t.rcode[r]);
	fputc('\n', stderr);
}

int main(int argc, char **argv)
{
	static struct dns_main m;
	struct fp_evl_ops ops = {
		.accept = dns_accept, .read = dns_read, .closed = dns_closed,
		.udp_recv = dns_udp, .init = dns_init, .fini = dns_fini,
		.leaving = dns_leaving, .arrived = dns_arrived,
		.max_unread = DNS_TCP_ROOM,          /* a message is answered when it is whole */
		.movable = true,                     /* its state follows it (leaving/arrived) */
	};
	struct fp_app app;
	int rc;

	fp_rt_config_init(&m.rt);
	m.port = DNS_DEFAULT_PORT;
	m.edns_max = DNS_EDNS_DEFAULT;
	m.tcp_idle_s = DNS_TCP_IDLE_S;
	parse(&m, argc, argv);
	if (load(&m))
		return 1;
	if (m.check) {
		dns_db_destroy(m.db);
		return 0;
	}
	fp_evl_app(&app, &ops, &m);
	app.name = "fp-dns";
	rc = fp_rt_run(&m.rt, &app);
	print_counters(&m);
	for (unsigned w = 0; w < FP_RT_MAX_WORKERS; w++)
		free(m.ws[w]);
	dns_db_destroy(m.db);
	return rc ? 1 : 0;
}
