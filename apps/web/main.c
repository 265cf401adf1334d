/* main.c: fp-web's command line, and HTTP/1.1 over flowplane's event layer: keep-alive, pipelining, back-pressure. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/evl.h>
#include <flowplane/rt.h>

#include "web.h"

/*
 * One site, loaded before fp_rt_run and only read afterwards. A connection's bytes are
 * parsed where they lie (evl shows the unconsumed input contiguously); requests are
 * answered in order as they complete (pipelining), each response written whole: when the
 * output has no room for it, the read stops there and goes on once the output drains
 * (evl's drained callback), so a client that does not read stops being read from. A
 * request body (Content-Length) is skipped as it arrives. Refused requests get their
 * status and the connection closes after it (RFC 9112 §9.6), except 405 (the request was
 * well formed).
 */

#define WEB_DEFAULT_PORT      80
#define WEB_DEFAULT_KEEPALIVE 75      /* s, as nginx's keepalive_timeout */
#define WEB_DEFAULT_SEND      60      /* s, as nginx's send_timeout */
#define WEB_TICK_US           1000000
#define WEB_REF_MIN           2048    /* a site piece this long is sent by reference */
#define WEB_DEFAULT_MAX_BYTES (1024ull << 20)
#define OPT_RT_BASE           FP_RT_OPT_BASE

struct web_main {
	struct fp_rt_config rt;
	const char *root;
	uint16_t port;
	unsigned keepalive_s;        /* an idle connection is closed after this (0: never) */
	unsigned send_s;             /* a response that stops leaving is reset (0: never) */
	size_t max_bytes;
	bool check;
	struct web_site *site;
	size_t largest;              /* the largest response: the output must hold it */
};

struct web_conn;

struct web_worker {
	struct web_main *m;
	struct web_conn *conns;      /* live ones, freed at fini (evl resets them silently) */
	struct fp_evl *evl;
	struct fp_timer tick;        /* once a second: close idle connections */
	time_t date_at;
	char date[WEB_DATE_LEN + 1];
	char scratch[WEB_SCRATCH];
};

struct web_conn {
	size_t scanned;              /* web_parse's resume point for the request at the head */
	size_t skip;                 /* body bytes still to skip */
	bool blocked;                /* waiting for output room */
	uint64_t last_us;            /* the last bytes from the client */
	uint64_t out_us;             /* when the pending output last changed */
	size_t out_pending;          /* ... and what it was then */
	struct fp_evl_conn *c;
	struct web_conn *next, **pprev;
};

static const char usage[] =
	"usage: fp-web --root DIR [options] [runtime options]\n"
	"\n"
	"A static-content HTTP/1.1 server: every file under DIR is read at start with its\n"
	"response headers built, and served over keep-alive connections with pipelining, on\n"
	"flowplane's transports (--net kernel, the default, or xdp). GET and HEAD; ETag and\n"
	"If-None-Match, Last-Modified and If-Modified-Since (304); 301 to a directory's '/',\n"
	"its index.html; 400, 404, 405, 413, 414, 431, 501, 505.\n"
	"\n"
	"  -r, --root DIR        the directory served (required); nothing outside it is read\n"
	"  -p, --port P          TCP port (80; below 1024 needs root on --net kernel)\n"
	"      --max-bytes N     files read at start, in all (1g; k, m, g suffixes)\n"
	"      --keepalive-timeout S  close a connection idle this long between requests\n"
	"                        (75, as nginx; 0: never)\n"
	"      --send-timeout S  reset a connection whose response has not moved for this\n"
	"                        long: the client stopped reading (60, as nginx; 0: never)\n"
	"      --check           read the root, print what it holds, and exit\n"
	"  -h, --help            this text\n"
	"\n"
	"The files are read once: what changes on disk later is not served until a restart.\n";

static const struct option own_opts[] = {
	{ "root", required_argument, NULL, 'r' },
	{ "port", required_argument, NULL, 'p' },
	{ "max-bytes", required_argument, NULL, 'M' },
	{ "keepalive-timeout", required_argument, NULL, 'K' },
	{ "send-timeout", required_argument, NULL, 'S' },
	{ "check", no_argument, NULL, 'C' },
	{ "help", no_argument, NULL, 'h' },
	{ 0, 0, 0, 0 },
};

static _Noreturn void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fp-web: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static unsigned long long parse_size(const char *opt, const char *val, unsigned long long lo,
				     unsigned long long hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(val, &end, 10);
	if (*end && !end[1]) {
		switch (*end | 0x20) {
		case 'k': v <<= 10; end++; break;
		case 'm': v <<= 20; end++; break;
		case 'g': v <<= 30; end++; break;
		}
	}
	if (errno || end == val || *end || val[0] == '-' || v < lo || v > hi)
		usage_error("%s '%s': want a number from %llu to %llu", opt, val, lo, hi);
	return v;
}

static void parse(struct web_main *m, int argc, char **argv)
{
	struct option *all = fp_rt_getopt_table(own_opts);
	char err[256];
	int c;

	if (!all)
		usage_error("out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":r:p:h", all, NULL)) != -1) {
		const char *arg = argv[optind - 1];

		switch (c) {
		case 'r': m->root = optarg; break;
		case 'p': m->port = (uint16_t)parse_size("--port", optarg, 1, 65535); break;
		case 'M': m->max_bytes = parse_size("--max-bytes", optarg, 1, 1ull << 40); break;
		case 'K':
			if (strpbrk(optarg, "kKmMgG"))
				usage_error("--keepalive-timeout '%s': want seconds, 0 to 86400", optarg);
			m->keepalive_s = (unsigned)parse_size("--keepalive-timeout", optarg, 0, 86400);
			break;
		case 'S':
			if (strpbrk(optarg, "kKmMgG"))
				usage_error("--send-timeout '%s': want seconds, 0 to 86400", optarg);
			m->send_s = (unsigned)parse_size("--send-timeout", optarg, 0, 86400);
			break;
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
	if (!m->root)
		usage_error("--root DIR is required (--help for usage)");
}

/* ---- serving ---- */

static struct web_worker *worker_of(struct fp_evl *evl)
{
	return fp_evl_user(evl);
}

static void conn_free(struct web_conn *wc);

static const char *today(struct web_worker *wk)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	if (ts.tv_sec != wk->date_at) {
		wk->date_at = ts.tv_sec;
		web_date(ts.tv_sec, wk->date);
	}
	return wk->date;
}

/*
 * Once a second, nginx's two timeouts: a connection whose client has sent nothing for
 * keepalive_s, with no response of ours still leaving, is closed (keepalive_timeout); one
 * whose pending output has not changed for send_s is reset (send_timeout: the client
 * stopped reading, and what it asked for cannot be delivered). Neither idle nor stuck
 * connections hold the stack's connections and buffers forever; a slow download that
 * moves is neither.
 */
static void web_tick(struct fp_timer *t, uint64_t now_us)
{
	struct web_worker *wk = fp_container_of(t, struct web_worker, tick);
	uint64_t idle_us = (uint64_t)wk->m->keepalive_s * 1000000u;
	uint64_t send_us = (uint64_t)wk->m->send_s * 1000000u;
	struct web_conn *wc, *next;

	for (wc = wk->conns; wc; wc = next) {
		size_t pending = fp_evl_pending(wc->c);

		next = wc->next;
		if (pending != wc->out_pending) {
			wc->out_pending = pending;
			wc->out_us = now_us;
		}
		if (pending) {
			if (send_us && now_us - wc->out_us >= send_us) {
				fp_evl_abort(wc->c);
				conn_free(wc);
			}
			continue;
		}
		if (!idle_us || now_us - wc->last_us < idle_us || wc->blocked)
			continue;
		fp_evl_close(wc->c);
		conn_free(wc);
	}
	fp_ctx_timer_add(fp_evl_ctx(wk->evl), &wk->tick, now_us + WEB_TICK_US);
}

static int web_init(struct fp_evl *evl, void *arg)
{
	struct web_main *m = arg;
	struct web_worker *wk = calloc(1, sizeof(*wk));

	if (!wk)
		return -ENOMEM;
	wk->m = m;
	wk->evl = evl;
	fp_evl_set_user(evl, wk);
	fp_evl_listen(evl, m->port, NULL);
	if (m->keepalive_s || m->send_s) {
		fp_timer_init(&wk->tick, web_tick);
		fp_ctx_timer_add(fp_evl_ctx(evl), &wk->tick, fp_ctx_now_us(fp_evl_ctx(evl)) + WEB_TICK_US);
	}
	return 0;
}

static void conn_free(struct web_conn *wc)
{
	if ((*wc->pprev = wc->next))
		wc->next->pprev = wc->pprev;
	free(wc);
}

static void web_fini(struct fp_evl *evl)
{
	struct web_worker *wk = fp_evl_user(evl);

	if (wk->m->keepalive_s || wk->m->send_s)
		fp_ctx_timer_cancel(fp_evl_ctx(evl), &wk->tick);
	while (wk->conns)
		conn_free(wk->conns);
	free(wk);
	fp_evl_set_user(evl, NULL);
}

static void *web_accept(struct fp_evl_conn *c, void *larg)
{
	struct web_worker *wk = worker_of(fp_evl_of(c));
	struct web_conn *wc = calloc(1, sizeof(*wc));

	(void)larg;
	if (!wc)
		return NULL;                         /* refused: closed by evl */
	wc->c = c;
	wc->last_us = fp_ctx_now_us(fp_evl_ctx(fp_evl_of(c)));
	if ((wc->next = wk->conns))
		wk->conns->pprev = &wc->next;
	wk->conns = wc;
	wc->pprev = &wk->conns;
	return wc;
}

/* Write the response whole: the site's own pieces (headers built at start, bodies) by
 * reference when they are big enough for that to beat a copy, so a body goes from where
 * it was read to the segments, whose checksums the stack looks up (web_site_csum). -1
 * when the connection cannot take it (it is aborted). */
static int put(struct fp_evl_conn *c, const struct web_resp *o)
{
	for (unsigned i = 0; i < o->n; i++) {
		const struct iovec *v = &o->iov[i];
		bool ref = (o->fixed >> i & 1) && v->iov_len >= WEB_REF_MIN;
		if (ref ? fp_evl_write_ref(c, v->iov_base, v->iov_len)
			: fp_evl_write(c, v->iov_base, v->iov_len)) {
			fp_evl_abort(c);   /* a half-written response cannot stand */
			return -1;
		}
	}
	return 0;
}

static size_t web_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct fp_evl *evl = fp_evl_of(c);
	struct web_worker *wk = worker_of(evl);
	struct web_conn *wc = fp_evl_conn_user(c);
	const char *p = (const char *)data;
	size_t used = 0;
	uint64_t ops = 0, errs = 0;

	const char *date = today(wk);                /* once a read, not once a request */

	wc->blocked = false;
	wc->last_us = fp_ctx_now_us(fp_evl_ctx(evl));
	while (used < len) {
		if (wc->skip) {
			size_t k = wc->skip < len - used ? wc->skip : len - used;
			wc->skip -= k;
			used += k;
			continue;
		}
		struct web_req r;
		struct web_resp o;
		int st = web_parse(p + used, len - used, &wc->scanned, &r);
		if (st == 1)
			break;
		web_respond(wk->m->site, &r, st, date, wk->scratch, &o);
		if (fp_evl_room(c) < o.bytes) {
			wc->blocked = true;          /* on again from drained() */
			break;
		}
		if (put(c, &o)) {
			conn_free(wc);
			fp_ctx_count(fp_evl_ctx(evl), ops, errs + 1);
			return len;
		}
		ops++;
		errs += o.status >= 400;
		if (o.close) {
			fp_evl_close(c);
			conn_free(wc);
			fp_ctx_count(fp_evl_ctx(evl), ops, errs);
			return len;
		}
		used += r.head_len;
		wc->skip = r.body_len;
		wc->scanned = 0;
	}
	fp_ctx_count(fp_evl_ctx(evl), ops, errs);
	return used;
}

/* Flow-group migration: the connection's state moves to the new worker's list. */
static void web_leaving(struct fp_evl_conn *c)
{
	struct web_conn *wc = fp_evl_conn_user(c);

	if ((*wc->pprev = wc->next))
		wc->next->pprev = wc->pprev;
}

static void web_arrived(struct fp_evl_conn *c)
{
	struct web_worker *wk = worker_of(fp_evl_of(c));
	struct web_conn *wc = fp_evl_conn_user(c);

	if ((wc->next = wk->conns))
		wk->conns->pprev = &wc->next;
	wk->conns = wc;
	wc->pprev = &wk->conns;
}

static void web_drained(struct fp_evl_conn *c)
{
	struct web_conn *wc = fp_evl_conn_user(c);

	if (wc && wc->blocked)
		fp_evl_read_again(c);
}

static void web_closed(struct fp_evl_conn *c, int status)
{
	(void)status;
	conn_free(fp_evl_conn_user(c));
}

/* ---- the run ---- */

static int load(struct web_main *m)
{
	struct web_site_info info;
	struct timespec t0, t1;
	char err[512];

	clock_gettime(CLOCK_MONOTONIC, &t0);
	m->site = web_site_load(m->root, m->max_bytes, err, sizeof(err));
	if (!m->site) {
		fprintf(stderr, "fp-web: %s\n", err);
		return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	web_site_get_info(m->site, &info);
	m->largest = web_site_largest(m->site) + WEB_SCRATCH + 1024;
	fprintf(m->check ? stdout : stderr,
		"fp-web: %s: %zu files, %zu KB (%zu entries skipped: not regular files, unreadable, "
		"or links out of the root) in %.0f ms\n", m->root, info.files, info.bytes >> 10,
		info.skipped, (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
		(double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	static struct web_main m;
	struct fp_app app;
	int rc;

	fp_rt_config_init(&m.rt);
	m.port = WEB_DEFAULT_PORT;
	m.keepalive_s = WEB_DEFAULT_KEEPALIVE;
	m.send_s = WEB_DEFAULT_SEND;
	m.max_bytes = WEB_DEFAULT_MAX_BYTES;
	parse(&m, argc, argv);
	if (load(&m))
		return 1;
	m.rt.stack.csum_index = web_site_csum(m.site);   /* xdp: bodies are not summed again */
	if (m.check) {
		web_site_free(m.site);
		return 0;
	}
	struct fp_evl_ops ops = {
		.accept = web_accept, .read = web_read, .drained = web_drained,
		.closed = web_closed, .init = web_init, .fini = web_fini,
		/* the largest response always fits once the output has drained */
		.max_pending = m.largest > (4u << 20) ? m.largest : (4u << 20),
		.max_unread = WEB_MAX_HEAD + 1024,   /* a head must be shown whole */
		.movable = true,                     /* per-connection state moves with it */
		.leaving = web_leaving, .arrived = web_arrived,
	};
	fp_evl_app(&app, &ops, &m);
	app.name = "fp-web";
	rc = fp_rt_run(&m.rt, &app);
	web_site_free(m.site);
	return rc ? 1 : 0;
}
