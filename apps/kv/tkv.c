/* tkv.c: fp-kv --style threads: the same protocol written in the blocking style, a user-level thread per connection on tsock.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/heap.h>
#include <flowplane/tsock.h>

#include "tkv.h"

/*
 * Shenango's way of writing a server: each connection's thread reads, feeds proto.c,
 * writes its answers, and blocks in between; main.c's event callbacks (kv_read,
 * kv_drained, kv_tick) become straight-line code. What it must keep from the event
 * version, and how:
 *
 * - Item memory (QSBR). A worker's threads share its quiescent-state counter, so no
 *   thread may switch while it holds an item pointer. proto.c holds none once feed()
 *   returns (its last flush wrote or copied every value), and the only blocking calls are
 *   made between feeds: the answers go out through fp_tsock_try_writev, which never
 *   blocks (proto.c checks fp_tsock_room first), and a request that found too little room
 *   waits in fp_tsock_wait_drained, then is fed again, as kv_drained does.
 * - The worker's housekeeping (kv_tick's): a thread per worker wakes every millisecond to
 *   pass a quiescent state, tick the store, drain log watchers, crawl expired items
 *   (worker 0) and, once a second, reset connections whose value arrives too slowly.
 * - -c: past it, memcached's "ERROR Too many open connections" and a close.
 * - --sched steal: another worker may resume a thread whose read or sleep ended; what
 *   follows touches this worker's state, so it goes home first (fp_thread_home).
 */

#define TKV_TICK_US       1000
#define TKV_CRAWL_TICKS   10
#define TKV_CRAWL_BUDGET  320
#define TKV_BUF_MIN       KV_RBUF_SIZE
#define TKV_BUF_MAX       (KV_GET_LINE_MAX + KV_RBUF_SIZE)   /* as main.c's max_unread */

struct tkv_conn;

/* One per worker; only that worker's threads touch it. */
struct tkv_worker {
	struct tkv_conn *conns;
	bool stopping;
};

struct tkv_conn {
	const struct kv_tkv_config *cfg;
	struct fp_tsock *s;
	struct kv_conn *kc;
	unsigned w;
	uint8_t *buf;
	size_t have, cap;
	struct tkv_conn *next, **pprev;
};

static struct tkv_worker *workers;

static uint64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- proto.c's output over a blocking socket ---- */

static size_t tout_room(void *arg)
{
	return fp_tsock_room(((struct tkv_conn *)arg)->s);
}

static int tout_write(void *arg, const struct iovec *iov, unsigned n)
{
	/* never blocks: room was asked for first, and proto.c ends the connection on
	 * a refusal (a half-written answer cannot stand) */
	return fp_tsock_try_writev(((struct tkv_conn *)arg)->s, iov, n) ? -EPIPE : 0;
}

/* ---- a connection's thread ---- */

/* Room for one more read: grow the buffer up to TKV_BUF_MAX; false when full (proto.c
 * consumes a line long before that, so only a broken promise gets here). */
static bool make_room(struct tkv_conn *tc)
{
	if (tc->have < tc->cap)
		return true;
	if (tc->cap >= TKV_BUF_MAX)
		return false;
	size_t cap = tc->cap * 2 > TKV_BUF_MAX ? TKV_BUF_MAX : tc->cap * 2;
	uint8_t *p = realloc(tc->buf, cap);
	if (!p)
		return false;
	tc->buf = p;
	tc->cap = cap;
	return true;
}

/* Feed what was read, waiting for the output to drain while a request finds no room.
 * False: the connection ends. */
static bool serve(struct tkv_conn *tc)
{
	/* proto.c uses the worker's own state (its QSBR slot, statistics, scratch): it runs
	 * at home, also under --sched steal, where a read may end on another worker */
	fp_thread_home();
	for (;;) {
		uint64_t before = tc->kc->ncmds;
		size_t used = kv_conn_feed(tc->kc, tc->buf, tc->have);

		fp_tapp_count(tc->kc->ncmds - before, 0);
		if (kv_conn_closing(tc->kc))
			return false;
		if (used) {
			memmove(tc->buf, tc->buf + used, tc->have - used);
			tc->have -= used;
		}
		if (!kv_conn_blocked(tc->kc))
			return true;
		/* (a multiget may consume nothing and still have answered some keys: it
		 * goes on where it stopped.) An empty output has room for the largest
		 * answer (kv_tkv_config's max_pending): blocked with nothing pending, a
		 * request never will be served. */
		if (!fp_tsock_pending(tc->s) || fp_tsock_wait_drained(tc->s))
			return false;
	}
}

static void conn_unlink(struct tkv_conn *tc)
{
	if ((*tc->pprev = tc->next))
		tc->next->pprev = tc->pprev;
}

static void *conn_thread(void *arg)
{
	struct tkv_conn *tc = arg;
	const struct kv_tkv_config *cfg = tc->cfg;
	ssize_t n;

	while (make_room(tc) && (n = fp_tsock_read(tc->s, tc->buf + tc->have,
						   tc->cap - tc->have)) > 0) {
		tc->have += (size_t)n;
		if (!serve(tc))
			break;
	}
	fp_thread_home();   /* (a read's end may have been stolen) the worker's list is home's */
	if (cfg->proto->verbose > 1)
		fprintf(stderr, "fp-kv: worker %u: closing a connection\n", tc->w);
	conn_unlink(tc);
	fp_tsock_close(tc->s);   /* after what was written (quit) */
	kv_conn_free(tc->kc);
	atomic_fetch_sub(cfg->conns, 1);
	free(tc->buf);
	free(tc);
	return NULL;
}

static void conn_start(const struct kv_tkv_config *cfg, unsigned w, struct fp_tsock *s)
{
	struct tkv_worker *wk = &workers[w];
	struct kv_out out = { tout_write, tout_room, NULL, NULL };   /* threads go home: never busy */
	struct tkv_conn *tc;
	struct fp_thread *t;
	uint32_t addr;
	uint16_t port;

	if (atomic_fetch_add(cfg->conns, 1) >= cfg->maxconns) {
		static const char full[] = "ERROR Too many open connections\r\n";
		struct iovec iov = { (void *)full, sizeof(full) - 1 };

		atomic_fetch_sub(cfg->conns, 1);
		fp_tsock_try_writev(s, &iov, 1);
		fp_tsock_close(s);
		return;
	}
	out.arg = tc = calloc(1, sizeof(*tc));
	if (!tc || !(tc->buf = malloc(TKV_BUF_MIN)) ||
	    !(tc->kc = kv_conn_new(cfg->proto, w, &out)))
		goto nomem;
	tc->cfg = cfg;
	tc->s = s;
	tc->w = w;
	tc->cap = TKV_BUF_MIN;
	fp_tsock_peer(s, &addr, &port);
	kv_conn_set_peer(tc->kc, addr, port);
	if ((tc->next = wk->conns))
		wk->conns->pprev = &tc->next;
	wk->conns = tc;
	tc->pprev = &wk->conns;
	if ((t = fp_thread_spawn(NULL, conn_thread, tc))) {
		fp_thread_detach(t);
		return;
	}
	conn_unlink(tc);
nomem:
	if (tc && tc->kc)
		kv_conn_free(tc->kc);
	if (tc)
		free(tc->buf);
	free(tc);
	atomic_fetch_sub(cfg->conns, 1);
	fp_tsock_close(s);   /* refused: no memory for it */
	fp_tapp_count(0, 1);
}

/* ---- the worker's housekeeping (main.c's kv_tick) ---- */

/* Once a second: reset the connections whose value is overdue (proto.h) and log
 * watchers whose output failed; their threads wake, see the reset and end. */
static void uploads_check(const struct kv_tkv_config *cfg, unsigned w)
{
	uint64_t now = kv_mono_ns(), n = 0;

	for (struct tkv_conn *tc = workers[w].conns; tc; tc = tc->next) {
		if (kv_conn_closing(tc->kc) || kv_conn_upload_overdue(tc->kc, now)) {
			n += !kv_conn_closing(tc->kc);
			fp_tsock_abort(tc->s);
		}
	}
	if (n) {
		fp_tapp_count(0, n);
		if (cfg->proto->verbose)
			fprintf(stderr, "fp-kv: worker %u: %llu connection%s dropped: a value "
				"arrived too slowly\n", w, (unsigned long long)n,
				n == 1 ? "" : "s");
	}
}

static void *tick_thread(void *arg)
{
	const struct kv_tkv_config *cfg = arg;
	unsigned w = fp_tapp_worker(), ticks = 0, crawls = 0;
	struct kv_store *st = cfg->proto->store;

	while (!workers[w].stopping) {
		fp_thread_home();   /* woken, it may run elsewhere: worker @w's state is home's */
		kv_store_quiesce(st, w);
		kv_store_tick(st, unix_ns());
		cfg->proto->ws[w].out_bytes = fp_tapp_out_total();   /* response_obj_bytes */
		kv_watch_drain(cfg->proto, w);
		if (++ticks >= 1000000 / TKV_TICK_US) {
			ticks = 0;
			uploads_check(cfg, w);
		}
		if (w == 0 && ++crawls >= TKV_CRAWL_TICKS) {   /* one crawler, as memcached's */
			crawls = 0;
			kv_store_crawl(st, w, TKV_CRAWL_BUDGET);
		}
		fp_thread_sleep_us(TKV_TICK_US);
	}
	return NULL;
}

/* Each worker's first thread. */
static void tkv_main(void *arg)
{
	const struct kv_tkv_config *cfg = arg;
	unsigned w = fp_tapp_worker();
	struct fp_tlistener *l = fp_tsock_listen(cfg->port);
	struct fp_thread *t = l ? fp_thread_spawn(NULL, tick_thread, arg) : NULL;
	struct fp_tsock *s;

	if (!t) {
		fprintf(stderr, "fp-kv: worker %u: out of memory\n", w);
		fp_tapp_stop(-ENOMEM);
		return;
	}
	fp_thread_detach(t);
	kv_store_quiesce(cfg->proto->store, w);
	while ((s = fp_tsock_accept(l)))
		conn_start(cfg, w, s);
	workers[w].stopping = true;   /* the tick thread, asleep, is left where it is */
	kv_store_offline(cfg->proto->store, w);
}

int kv_threads_run(const struct kv_tkv_config *cfg)
{
	struct fp_tapp app = {
		.name = "fp-kv --style threads", .main = tkv_main, .arg = (void *)cfg,
		.max_pending = cfg->max_pending, .max_total_pending = cfg->max_total_pending,
	};
	int rc;

	workers = calloc(cfg->rt->n_workers, sizeof(*workers));
	if (!workers) {
		fprintf(stderr, "fp-kv: out of memory\n");
		return -ENOMEM;
	}
	rc = fp_tapp_run(cfg->rt, &app);
	free(workers);
	workers = NULL;
	return rc;
}
