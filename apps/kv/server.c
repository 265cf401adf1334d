/* server.c: fp-kv's server on flowplane's event layer: one store, the protocol per connection, the workers' housekeeping. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/compiler.h>
#include <flowplane/evl.h>
#include <flowplane/heap.h>

#include "server.h"

/*
 * One store, created here before fp_rt_run and shared by every worker; one kv_conn per
 * TCP connection, fed from evl's read callback. A worker leaves a quiescent state for
 * the store's memory reclamation (QSBR) between rounds: in evl's poll hook, and on a
 * 1 ms timer so that a worker asleep in its idle policy does not hold reclamation up.
 *
 * Output: every answer of one read is written at the end of it (proto.c stages them).
 * A multiget or an mg that finds too little room stops, leaving its line unconsumed;
 * evl shows it again once drained() says the output has emptied. The output cap is
 * sized so the largest item always fits once the output has drained.
 */

#define KV_TICK_US        1000
#define KV_CRAWL_TICKS    10      /* the expiry crawler runs every 10 ticks (10 ms)... */
#define KV_CRAWL_BUDGET   320     /* ...and looks at up to 320 chunks per slab class: 32k
				   * a second, a lap of 1M items in about 30 s */
#define KV_MIN_PENDING    (4u << 20)
#define KV_TRIM_CLOSES    1024     /* closed connections that call for a malloc_trim */
#define KV_TRIM_AFTER     3        /* and the seconds it is repeated after the last such */
#define KV_MAX_TOTAL_PENDING (64u << 20) /* output of all connections, shared by workers */

struct kv_worker {
	struct kv_server *m;
	struct fp_evl *evl;
	unsigned w;
	struct fp_timer tick;
	unsigned ticks;
	struct kv_mconn *conns;      /* live ones, to free at fini (evl resets them silently) */
	/* --sched steal: connections that ended in a read another worker ran, freed here
	 * (they are on @conns); pushed by that worker, taken whole by this one */
	struct kv_mconn *_Atomic gone;
	unsigned closed;             /* connections freed since the last malloc_trim */
	unsigned trims_left;         /* after a storm: trims still to come, one a second */
};

struct kv_mconn {
	struct kv_conn *kc;
	struct fp_evl_conn *c;
	struct kv_worker *wk;
	bool aborted;                /* out_write reset it: evl forgot it already */
	struct kv_mconn *next, **pprev;
	struct kv_mconn *gone_next;  /* on wk->gone */
	struct fp_flow *flow;        /* @c's, for fp_flow_busy: asked before anything of
				      * @mc, which a thief may be changing, or of @c, which
				      * may be gone when @aborted */
};

/* ---- the worker ---- */

static uint64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void kv_between_rounds(struct kv_worker *wk)
{
	struct kv_store *s = wk->m->proto.store;

	kv_store_quiesce(s, wk->w);
	kv_store_tick(s, unix_ns());
}

static void mconn_free(struct kv_mconn *mc);

/* --sched steal, on @mc's own worker: a read of it is queued or runs elsewhere, so nothing
 * of it is to be touched now. */
static bool mconn_busy(const struct kv_mconn *mc)
{
	return fp_flow_busy(fp_evl_ctx(mc->wk->evl), mc->flow);
}

/* --sched steal: free what ended in a read another worker ran (mconn_end). */
static void kv_gone_sweep(struct kv_worker *wk)
{
	struct kv_mconn *mc, *next;

	if (!atomic_load_explicit(&wk->gone, memory_order_relaxed))
		return;
	for (mc = atomic_exchange_explicit(&wk->gone, NULL, memory_order_acquire); mc; mc = next) {
		next = mc->gone_next;
		mconn_free(mc);
	}
}

/* @mc's connection ended in a callback that worker @run ran: its memory and its place on
 * its worker's list go now if that is its own worker, otherwise at its worker's next
 * poll (the callback ran on a thief, under --sched steal). Either way nothing touches it
 * after this but its own worker. */
static void mconn_end(struct kv_mconn *mc, struct kv_worker *run)
{
	struct kv_worker *wk = mc->wk;

	if (run == wk) {
		mconn_free(mc);
		return;
	}
	kv_conn_end(mc->kc);   /* its close is logged when it happens, not when freed */
	mc->gone_next = atomic_load_explicit(&wk->gone, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&wk->gone, &mc->gone_next, mc,
						      memory_order_release, memory_order_relaxed))
		;
}

static void kv_poll(struct fp_evl *evl)
{
	struct kv_worker *wk = fp_evl_user(evl);

	kv_gone_sweep(wk);
	/* the round is over: nothing of the store is held across it. The clock (whole
	 * seconds) is kv_tick's, every KV_TICK_US: reading CLOCK_REALTIME each round cost
	 * more than the rest of this hook. */
	kv_store_quiesce(wk->m->proto.store, wk->w);
	kv_watch_drain(&wk->m->proto, wk->w);
}

static void kv_trim_check(struct kv_worker *wk);

/* Once a second: drop the connections whose value is overdue (proto.h), freeing the
 * memory they held; counted as the application's errors (fp-stats). And free the log
 * watchers whose output failed between reads (watch.c). */
static void kv_uploads_check(struct kv_worker *wk)
{
	struct kv_mconn *mc, *next;
	uint64_t now = kv_mono_ns(), n = 0;

	kv_gone_sweep(wk);   /* none of them is looked at below: a read of one still out
			      * elsewhere is busy */
	for (mc = wk->conns; mc; mc = next) {
		next = mc->next;
		if (mconn_busy(mc))
			continue;   /* a read of it runs elsewhere (--sched steal): next second */
		if (mc->aborted && kv_conn_closing(mc->kc)) {
			mconn_free(mc);   /* a log watcher whose output failed (evl forgot it) */
			continue;
		}
		if (mc->aborted || !kv_conn_upload_overdue(mc->kc, now))
			continue;
		fp_evl_abort(mc->c);
		mconn_free(mc);
		n++;
	}
	if (n) {
		fp_ctx_count(fp_evl_ctx(wk->evl), 0, n);
		if (wk->m->proto.verbose)
			fprintf(stderr, "fp-kv: worker %u: %llu connection%s dropped: a value "
				"arrived too slowly\n", wk->w, (unsigned long long)n,
				n == 1 ? "" : "s");
	}
}

static void kv_tick(struct fp_timer *t, uint64_t now_us)
{
	struct kv_worker *wk = fp_container_of(t, struct kv_worker, tick);

	kv_between_rounds(wk);
	wk->m->proto.ws[wk->w].out_bytes = fp_evl_out_total(wk->evl);
	if (++wk->ticks >= 1000000 / KV_TICK_US) {
		wk->ticks = 0;
		kv_uploads_check(wk);
		kv_trim_check(wk);
	}
	if (wk->w == 0 && wk->ticks % KV_CRAWL_TICKS == 0)   /* one crawler, as memcached's */
		kv_store_crawl(wk->m->proto.store, wk->w, KV_CRAWL_BUDGET);
	fp_ctx_timer_add(fp_evl_ctx(wk->evl), &wk->tick, now_us + KV_TICK_US);
}

static int kv_init(struct fp_evl *evl, void *arg)
{
	struct kv_server *m = arg;
	struct fp_ctx *ctx = fp_evl_ctx(evl);
	struct kv_worker *wk = calloc(1, sizeof(*wk));

	if (!wk)
		return -ENOMEM;
	wk->m = m;
	wk->evl = evl;
	wk->w = fp_ctx_worker(ctx);
	fp_evl_set_user(evl, wk);
	kv_between_rounds(wk);
	fp_timer_init(&wk->tick, kv_tick);
	fp_ctx_timer_add(ctx, &wk->tick, fp_ctx_now_us(ctx) + KV_TICK_US);
	fp_evl_listen(evl, m->set.tcpport, NULL);
	return 0;
}

static void mconn_free(struct kv_mconn *mc)
{
	if ((*mc->pprev = mc->next))
		mc->next->pprev = mc->pprev;
	kv_conn_free(mc->kc);
	atomic_fetch_sub(&mc->wk->m->conns, 1);
	mc->wk->closed++;
	free(mc);
}

/* Once a second: after a storm of closed connections, give their memory back (their
 * structures are small and scattered, so glibc does not return it by itself), then for
 * KV_TRIM_AFTER more seconds, for what the stack and evl free after them (heap.h). */
static void kv_trim_check(struct kv_worker *wk)
{
	if (wk->closed >= KV_TRIM_CLOSES) {
		wk->closed = 0;
		wk->trims_left = KV_TRIM_AFTER;
	} else if (!wk->trims_left) {
		return;
	} else {
		wk->trims_left--;
	}
	fp_heap_trim();
}

static void kv_fini(struct fp_evl *evl)
{
	struct kv_worker *wk = fp_evl_user(evl);

	if (!wk)
		return;
	fp_ctx_timer_cancel(fp_evl_ctx(evl), &wk->tick);
	kv_gone_sweep(wk);   /* every worker has left its loop: no read runs anywhere */
	while (wk->conns)
		mconn_free(wk->conns);
	kv_store_offline(wk->m->proto.store, wk->w);
	fp_evl_set_user(evl, NULL);
	free(wk);
}

/* ---- output: proto.c's kv_out over evl ---- */

static size_t out_room(void *arg)
{
	struct kv_mconn *mc = arg;

	/* the connection's cap, and the workers' output budget (a connection that does not
	 * read stops being read from; issue 16, item 1) */
	return mc->aborted ? 0 : fp_evl_room(mc->c);
}

static int out_write(void *arg, const struct iovec *iov, unsigned n)
{
	struct kv_mconn *mc = arg;
	int rc = mc->aborted ? -EPIPE : 0;

	if (!rc)
		rc = fp_evl_writev(mc->c, iov, n);
	if (rc && !mc->aborted) {
		/* proto.c checked the room first: only a transport out of buffers or a
		 * dying connection gets here, and a half-written answer cannot stand */
		fp_evl_abort(mc->c);
		mc->aborted = true;
	}
	return rc ? -EPIPE : 0;
}

static bool out_busy(void *arg)
{
	return mconn_busy(arg);
}

/* ---- connections ---- */

static void *kv_accept(struct fp_evl_conn *c, void *larg)
{
	struct kv_worker *wk = fp_evl_user(fp_evl_of(c));
	struct kv_mconn *mc;
	struct kv_out out = { out_write, out_room, NULL, out_busy };

	(void)larg;
	if (atomic_fetch_add(&wk->m->conns, 1) >= wk->m->set.maxconns) {
		/* memcached's maxconns_fast: say so and hang up (the close follows the
		 * write; no callback comes for @c after it) */
		atomic_fetch_sub(&wk->m->conns, 1);
		fp_evl_write(c, "ERROR Too many open connections\r\n", 33);
		fp_evl_close(c);
		return wk;
	}
	out.arg = mc = calloc(1, sizeof(*mc));
	if (!mc || !(mc->kc = kv_conn_new(&wk->m->proto, wk->w, &out))) {
		free(mc);
		atomic_fetch_sub(&wk->m->conns, 1);
		return NULL;
	}
	mc->c = c;
	mc->flow = fp_evl_conn_flow(c);
	mc->wk = wk;
	kv_conn_set_peer(mc->kc, fp_evl_conn_raddr(c), fp_evl_conn_rport(c));
	if ((mc->next = wk->conns))
		wk->conns->pprev = &mc->next;
	wk->conns = mc;
	mc->pprev = &wk->conns;
	return mc;
}

/* Under --sched steal the worker running a read may be another's (a thief, which runs
 * one batch of the connection): the store's reader, the counters and the stage are the
 * runner's for the read (kv_conn_visit), the connection stays its own worker's. */
static size_t kv_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct kv_mconn *mc = fp_evl_conn_user(c);
	struct kv_worker *run = fp_evl_user(fp_evl_of(c));
	uint64_t before = mc->kc->ncmds;
	size_t used;

	if (run != mc->wk)
		kv_conn_visit(mc->kc, run->w);
	used = kv_conn_feed(mc->kc, data, len);
	if (run != mc->wk)
		kv_conn_visit_end(mc->kc);
	fp_ctx_count(fp_evl_ctx(fp_evl_of(c)), mc->kc->ncmds - before, 0);
	if (kv_conn_closing(mc->kc)) {
		if (mc->wk->m->proto.verbose > 1)
			fprintf(stderr, "fp-kv: worker %u: closing a connection (quit, a line too "
				"long, HTTP, or the output failed)\n", run->w);
		if (!mc->aborted)
			fp_evl_close(c);   /* after what was written (quit) */
		mconn_end(mc, run);
		return len;
	}
	return used;
}

/* Flow-group migration (fp-ctl move, IX's control loop): the connection leaves this
 * worker's list and its per-worker share, and joins the new worker's. The store is shared
 * by all workers; what names a worker in it (QSBR's reader) follows kv_conn's w. */
static void kv_leaving(struct fp_evl_conn *c)
{
	struct kv_mconn *mc = fp_evl_conn_user(c);

	if ((*mc->pprev = mc->next))
		mc->next->pprev = mc->pprev;
	kv_conn_leave(mc->kc);
	mc->wk = NULL;
}

static void kv_arrived(struct fp_evl_conn *c)
{
	struct kv_worker *wk = fp_evl_user(fp_evl_of(c));
	struct kv_mconn *mc = fp_evl_conn_user(c);

	mc->wk = wk;
	if ((mc->next = wk->conns))
		wk->conns->pprev = &mc->next;
	wk->conns = mc;
	mc->pprev = &wk->conns;
	kv_conn_arrive(mc->kc, wk->w);
}

/* The output emptied: a request that waited for room goes on. */
static void kv_drained(struct fp_evl_conn *c)
{
	struct kv_mconn *mc = fp_evl_conn_user(c);

	if (mc && kv_conn_blocked(mc->kc))
		fp_evl_read_again(c);
}

static void kv_closed(struct fp_evl_conn *c, int status)
{
	struct kv_mconn *mc = fp_evl_conn_user(c);

	if (mc && status && mc->wk->m->proto.verbose)
		fprintf(stderr, "fp-kv: worker %u: a connection died (%s)\n", mc->wk->w,
			strerror(-status));
	if (mc)
		mconn_end(mc, fp_evl_user(fp_evl_of(c)));
}


/* ---- the server ---- */

void kv_server_defaults(struct kv_server *s)
{
	memset(s, 0, sizeof(*s));
	s->store = (struct kv_store_config){
		.mem_limit = (uint64_t)KV_DEFAULT_MEM_MB << 20, .item_max = KV_DEFAULT_ITEM_MAX,
		.growth_factor = 1.25, .chunk_min = 48, .use_cas = true, .evict = true,
	};
	s->set = (struct kv_settings){
		.maxconns = 1024, .tcpport = 11211, .factor = 1.25, .chunk_size = 48,
		.use_cas = true, .evict = true, .flush_enabled = true,
	};
}

int kv_server_open(struct kv_server *s, unsigned n_workers, char *err, size_t errlen)
{
	size_t pending = 2 * (size_t)s->store.item_max + (64u << 10);
	struct kv_store *store;
	int verbose = s->proto.verbose;

	s->store.n_workers = n_workers;
	s->set.maxbytes = s->store.mem_limit;
	s->set.item_size_max = s->store.item_max;
	s->set.chunk_size = s->store.chunk_min;
	s->set.num_threads = n_workers;
	s->ops = (struct fp_evl_ops){
		.accept = kv_accept, .read = kv_read, .drained = kv_drained, .closed = kv_closed,
		.init = kv_init, .fini = kv_fini, .poll = kv_poll,
		.movable = true, .leaving = kv_leaving, .arrived = kv_arrived,
		/* a read may run on any worker (kv_read, mconn_end; the timers and log
		 * watchers leave a connection alone while mconn_busy) */
		.steal_safe = true,
		/* the largest item always fits once the output has drained */
		.max_pending = pending > KV_MIN_PENDING ? pending : KV_MIN_PENDING,
		/* a multiget line must be shown whole */
		.max_unread = KV_GET_LINE_MAX + KV_RBUF_SIZE,
		/* all connections' output together: past it, only connections whose output
		 * drains get answers (memcached holds at most one per connection, by
		 * reference; we copy, so we bound the copies) */
		.max_total_pending = KV_MAX_TOTAL_PENDING,
	};
	if (!(store = kv_store_create(&s->store, err, errlen)))
		return -EINVAL;
	if (kv_proto_init(&s->proto, store, &s->set, n_workers)) {
		kv_store_destroy(store);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->proto.verbose = verbose;
	s->proto.started_unix = (uint64_t)time(NULL);
	return 0;
}

void kv_server_app(struct kv_server *s, struct fp_app *app)
{
	fp_evl_app(app, &s->ops, s);
	app->name = "fp-kv";
}

void kv_server_close(struct kv_server *s)
{
	struct kv_store *store = s->proto.store;

	kv_proto_fini(&s->proto);
	kv_store_destroy(store);
}
