/* worker.c: the xdp and pair transports: IX's run-to-completion loop over a device queue and a stack. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/clock.h>
#include <flowplane/compiler.h>
#include <flowplane/dev.h>
#include <flowplane/net.h>
#include <flowplane/rss.h>

#include "defs.h"

/*
 * One worker owns one device queue, one stack (net.h) and one context (api.c); nothing
 * here is shared, so nothing here locks. Each round of the loop (rt.h, IX Fig. 1b):
 *
 *   1. rx_burst at most B frames: whatever is there, never waiting for more
 *   2. fp_stack_input: the stack turns them into events and replies
 *   3-4. the application pass: events become conditions, the handler runs, its calls
 *      execute; calls may produce more events (a connect failing at once), so the pass
 *      repeats until nothing is left, at most RT_PASS_ROUNDS times
 *   5. timers: the stack's (their events get a pass of their own), then the application's
 *   6. transmit what the stack queued; frames the device refuses wait for the next round
 *   7. reclaim buffers the device has finished with (and refill its receive ring)
 *
 * Application timers run only once every event has gone up: a timer that closes a flow
 * while an undelivered event still names it would hand the handler a freed flow.
 */
#define RT_PASS_ROUNDS   4      /* application rounds per pass before moving on */
#define RT_EV_BURST      64     /* events taken from the stack at a time */
#define RT_TX_HOLD       256    /* frames refused by the device, kept for the next round */
#define RT_TX_BACKLOG    4096   /* frames the stack may queue while the device is full;
				 * beyond it they are freed and counted (tx_full) */
#define RT_PUBLISH_US    1000   /* copy the stack's and device's counters this often */
#define RT_SLEEP_MAX_MS  1000   /* a sleep with no timer pending still wakes up this often */
#define RT_DRAIN_US      50000  /* at the stop: how long the last frames may take to leave */
#define RT_DRAIN_GAP_US  50     /* between drain passes, so the device can complete */
#define RT_DRAIN_QUIET   2      /* passes with nothing moving that end the drain */
#define RT_ALLOC_DEAD_MS 50     /* --burst: an allocator whose heartbeat stood still this
				 * long is gone: a burstable worker keeps its core */

struct rt_wk {
	struct fp_ctx ctx;
	struct fp_devq *q;
	struct fp_devq *xq[RT_QUEUES_MAX - 1]; /* the interface's spare queues it polls too */
	unsigned n_xq;
	struct fp_stack *st;
	struct rt_run *run;
	struct rt_steer *steer;           /* flow groups in software; NULL: none */
	uint64_t hands;                   /* the queues it polls (steer.c, lending): bit i for
					   * worker i's; its own bit clear while its queue is lent */
	struct fp_pool_cache lent_cache;  /* frees while lent: q->cache is the holder's then */
	bool lent_cache_on;
	unsigned batch;
	double rx_drop, rx_reorder;
	uint64_t rng;                     /* splitmix64 state for rx_drop and rx_reorder */
	struct fp_mbuf *held;             /* --rx-reorder: the frame held back, or NULL */
	bool naps;                        /* the device cannot wake a sleeper (dpdk) */
	uint64_t publish_us;              /* next publication of counters */
	uint64_t idle_since_us;           /* first idle round of this idle spell */
	uint64_t slept_cycles;            /* TSC cycles asleep in poll(), all told (gaps) */
	uint64_t parked_since_us;         /* parked by the control plane since; 0: not */
	int run_policy;                   /* --park-prio: the policy to go back to... */
	struct sched_param run_param;     /* ...and its parameters, when unparked */
	bool park_prio_said;              /* its refusal was reported */
	struct rt_idle_budget budget;     /* --idle adaptive */
	struct rt_ctl_acc ctl;            /* IX's control-plane metrics */
	unsigned last_q;                  /* queue depth at this round's poll */
	bool idle;
	bool burst;                       /* --burst: a burstable worker (rt_burst) */
	uint64_t hb_seen, hb_at_us;       /* the allocator's heartbeat, and when it last moved */
	unsigned n_tx;                    /* frames held in tx[] for retry */
	struct fp_mbuf *tx[RT_TX_HOLD];
	struct fp_mbuf *rx[FP_RT_MAX_BATCH];
	struct fp_event ev[RT_EV_BURST];
	/* --notify ipi: frames an interrupt received and left, in order, for the next round
	 * (their input could allocate) */
	unsigned n_irq_held;
	struct fp_mbuf *irq_held[FP_RT_MAX_BATCH];
};

static struct rt_wk *wk_of(struct fp_ctx *ctx) { return ctx->tp; }

/* Its own queue is here to poll (always, but while lent: steer.c, "Lending"). */
static bool rt_home(const struct rt_wk *w)
{
	return w->hands >> w->ctx.worker & 1;
}

/* Hand on the queues that must go (parks, unparks) and note what it holds now. */
static void rt_hands(struct rt_wk *w)
{
	w->hands = rt_steer_hands(w->steer, w->ctx.worker, w->ctx.stats);
	w->ctx.stats->q_lent = !rt_home(w);
}

/* Other workers' queues it polls (lent to it), as a mask. */
static uint64_t rt_adopted(const struct rt_wk *w)
{
	return w->hands & ~(1ull << w->ctx.worker);
}

/* The queues it polls besides its own: its spare ones while its own is home, then every
 * queue of the workers that lent theirs to it. */
struct rt_others {
	struct fp_devq *const *qs;
	unsigned i, n;
	uint64_t lent;                    /* lenders not yet visited */
	bool adopted;                     /* the queue returned was lent to it */
};

static struct fp_devq *rt_others_next(const struct rt_wk *w, struct rt_others *it)
{
	while (it->i == it->n) {
		if (!it->lent)
			return NULL;
		it->n = rt_steer_queues(w->steer, (unsigned)__builtin_ctzll(it->lent), &it->qs);
		it->lent &= it->lent - 1;
		it->i = 0;
		it->adopted = true;
	}
	return it->qs[it->i++];
}

static struct rt_others rt_others(const struct rt_wk *w)
{
	return (struct rt_others){ .qs = w->xq, .n = rt_home(w) ? w->n_xq : 0,
				   .lent = w->steer ? rt_adopted(w) : 0 };
}

/* ---- calls: api.h onto net.h ---- */

static int64_t rt_sendv(struct rt_wk *w, struct fp_call *c)
{
	/* IX's sendv: take what the window allows, a prefix of the pieces, so the stream
	 * never has a hole; the stack fills segments across the pieces' boundaries. */
	return fp_tcp_sendv(w->st, (struct fp_tcp_conn *)c->flow, c->iov, c->iovcnt);
}

static int64_t rt_connect(struct rt_wk *w, struct fp_call *c)
{
	int err = 0;

	/* A dial that fails at once reports only here; one that starts reports with a
	 * CONNECTED condition later (net.h's FP_EV_TCP_CONNECTED). */
	if (!fp_tcp_dial(w->st, c->addr, c->port, c->cookie, &err))
		return err ? err : -ENOBUFS;
	return 0;
}

static int64_t rt_udp_send(struct rt_wk *w, struct fp_call *c)
{
	int r;

	if (!c->iov || c->iovcnt < 1)
		return -EINVAL;
	r = fp_udp_send(w->st, c->port, c->addr, c->rport, c->iov[0].iov_base,
			c->iov[0].iov_len);
	return r < 0 ? r : (int64_t)c->iov[0].iov_len;
}

static void rt_exec(struct fp_ctx *ctx, struct fp_call *c)
{
	struct rt_wk *w = wk_of(ctx);
	struct fp_tcp_conn *conn = (struct fp_tcp_conn *)c->flow;

	c->ret = 0;
	switch (c->type) {
	case FP_CALL_LISTEN:    c->ret = fp_tcp_listen(w->st, c->port, c->cookie); break;
	case FP_CALL_UNLISTEN:  c->ret = fp_tcp_unlisten(w->st, c->port); break;
	case FP_CALL_ACCEPT:    fp_tcp_set_cookie(conn, c->cookie); break;
	case FP_CALL_CONNECT:   c->ret = rt_connect(w, c); break;
	case FP_CALL_SENDV:     c->ret = rt_sendv(w, c); break;
	case FP_CALL_RECV_DONE: fp_tcp_recv_done(w->st, conn, c->len); break;
	case FP_CALL_SHUTDOWN:  c->ret = fp_tcp_shutdown(w->st, conn); break;
	case FP_CALL_CLOSE:     fp_tcp_close(w->st, conn); rt_conds_forget(ctx, c->flow); break;
	case FP_CALL_ABORT:     fp_tcp_abort(w->st, conn); rt_conds_forget(ctx, c->flow); break;
	case FP_CALL_UDP_BIND:  c->ret = fp_udp_bind(w->st, c->port, c->cookie); break;
	case FP_CALL_UDP_SEND:  c->ret = rt_udp_send(w, c); break;
	case FP_CALL_UDP_DONE:  fp_stack_free(w->st, c->m); break;
	default:                c->ret = -EINVAL; break;
	}
}

/* ---- events: net.h onto api.h conditions ---- */

static void rt_event_cond(struct rt_wk *w, const struct fp_event *ev)
{
	static const uint16_t types[] = {
		[FP_EV_TCP_ACCEPTED] = FP_COND_KNOCK, [FP_EV_TCP_CONNECTED] = FP_COND_CONNECTED,
		[FP_EV_TCP_RECV] = FP_COND_RECV,      [FP_EV_TCP_SENT] = FP_COND_SENT,
		[FP_EV_TCP_EOF] = FP_COND_EOF,        [FP_EV_TCP_DEAD] = FP_COND_DEAD,
		[FP_EV_UDP_RECV] = FP_COND_UDP_RECV,
	};
	struct fp_cond *c;

	if (fp_unlikely(ev->type >= FP_ARRAY_SIZE(types) || !types[ev->type]))
		return;
	c = rt_cond_push(&w->ctx);
	c->type = types[ev->type];
	c->status = ev->status;
	c->len = ev->len;
	c->cookie = ev->cookie;
	c->flow = (struct fp_flow *)ev->conn;
	c->raddr = ev->raddr;
	c->rport = ev->rport;
	c->lport = ev->lport;
	if (ev->m) {
		c->m = ev->m;
		c->data = fp_mbuf_data(ev->m);
	}
	if (c->type == FP_COND_SENT)
		c->window = (uint32_t)fp_tcp_sendable(w->st, ev->conn);
}

/* Move every pending stack event into the condition array. */
static void rt_drain_events(struct rt_wk *w)
{
	unsigned n;

	while ((n = fp_stack_events(w->st, w->ev, RT_EV_BURST)) > 0)
		for (unsigned i = 0; i < n; i++)
			rt_event_cond(w, &w->ev[i]);
}

/* Steps 3-4, repeated while calls produce events. Returns the rounds run; *@settled says
 * every event went up (the pass did not stop at its bound). */
static unsigned rt_app_pass(struct rt_wk *w, bool *settled)
{
	struct fp_ctx *ctx = &w->ctx;
	unsigned rounds;

	for (rounds = 0; rounds < RT_PASS_ROUNDS; rounds++) {
		rt_drain_events(w);
		if (!ctx->n_conds && !ctx->n_rets && !ctx->n_calls &&
		    !(ctx->run->sh && !rounds && rt_steal_pending(ctx)) &&
		    !(ctx->run->app_steal && !rounds &&
		      ctx->run->app->work_pending(ctx, !ctx->no_steal))) {
			*settled = true;
			return rounds;
		}
		rt_ctx_round(ctx);
	}
	*settled = false;
	return rounds;
}

/* ---- the device side ---- */

/* splitmix64 (Steele, Lea, Flood 2014): fault injection needs speed, not quality. */
static uint64_t rt_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* --rx-drop: free a seeded-random fraction of the burst before the stack sees it. */
static fp_cold unsigned rt_rx_drop(struct rt_wk *w, unsigned n)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < n; i++) {
		if ((double)(rt_rand(&w->rng) >> 11) * 0x1p-53 < w->rx_drop) {
			fp_mbuf_free(&w->q->cache, w->rx[i]);
			w->ctx.stats->drops[FP_RT_DROP_rx_injected]++;
		} else {
			w->rx[kept++] = w->rx[i];
		}
	}
	return kept;
}

/* --rx-reorder: hold a seeded-random frame of the burst back and deliver the one held
 * before after this burst's frames, so the stack sees it out of order (a NIC or a path
 * that reorders). At most one is held; with no room for it the burst's last frame waits
 * instead. A held frame waits for the next burst that brings anything. */
static fp_cold unsigned rt_rx_reorder(struct rt_wk *w, unsigned n)
{
	struct fp_mbuf *prev = w->held;
	unsigned kept = 0;

	w->held = NULL;
	for (unsigned i = 0; i < n; i++) {
		if (!w->held && (double)(rt_rand(&w->rng) >> 11) * 0x1p-53 < w->rx_reorder) {
			w->held = w->rx[i];
			w->ctx.stats->rx_reordered++;
			continue;
		}
		w->rx[kept++] = w->rx[i];
	}
	if (prev) {
		if (kept == w->batch) {
			w->held = w->rx[--kept];
			w->ctx.stats->rx_reordered++;
		}
		w->rx[kept++] = prev;
	}
	return kept;
}

/* A burst from a queue other than its own (a spare one, or one lent to it; counted in
 * *@counted when not NULL), steered like its own; returns the frames kept for the stack. */
static unsigned rt_rx_other(struct rt_wk *w, struct fp_devq *q, uint64_t now, bool *got,
			    uint64_t *counted)
{
	unsigned k = q->ops->rx_burst(q, w->rx, w->batch);

	if (!k)
		return 0;
	*got = true;
	if (counted)
		*counted += k;
	if (w->steer)
		k = rt_steer_rx(w->steer, w->ctx.worker, &w->q->cache, w->rx, k, w->ctx.stats);
	if (k)
		fp_stack_input(w->st, w->rx, k, now);
	return k;
}

/* Steps 1-2. Returns the frames handed to the stack (the batch of this pass). */
static unsigned rt_rx(struct rt_wk *w, uint64_t now, bool *got)
{
	struct fp_rt_worker_stats *s = w->ctx.stats;
	unsigned n, taken = 0;

	if (fp_unlikely(w->n_irq_held)) {   /* first what an interrupt left (rt_irq) */
		fp_stack_input(w->st, w->irq_held, w->n_irq_held, now);
		taken = w->n_irq_held;
		w->n_irq_held = 0;
	}
	if (w->run->ipi &&   /* a line thieves read: written only when it changes */
	    atomic_load_explicit(&w->run->ipi[w->ctx.worker].rx_blocked, memory_order_relaxed))
		atomic_store_explicit(&w->run->ipi[w->ctx.worker].rx_blocked, 0,
				      memory_order_relaxed);
	n = w->q->ops->rx_burst(w->q, w->rx, w->batch);
	*got = n > 0 || taken;
	w->last_q = 0;
	if (n) {
		/* Queue depth at this poll: what we took plus what is still waiting. (Frames
		 * and bytes the device counts already; rt_publish copies them.) */
		w->last_q = n + w->q->ops->rx_ready(w->q);
		s->rxq_hist[fp_rt_log2_bucket(w->last_q)]++;
		if (fp_unlikely(w->rx_drop > 0.0))
			n = rt_rx_drop(w, n);
		if (fp_unlikely(w->rx_reorder > 0.0))
			n = rt_rx_reorder(w, n);
		if (w->steer)
			n = rt_steer_rx(w->steer, w->ctx.worker, &w->q->cache, w->rx, n, s);
		if (n)
			fp_stack_input(w->st, w->rx, n, now);
	}
	/* Frames of our groups that arrived on other workers' queues (steer.c). */
	if (w->steer &&
	    (taken = rt_steer_take(w->steer, w->ctx.worker, &w->ctx, w->st, &w->q->cache, w->rx,
				   w->batch, now, s))) {
		*got = true;
		fp_stack_input(w->st, w->rx, taken, now);
	}
	/* The interface's spare queues (more queues than workers), then the queues of parked
	 * workers lent to us, after what their last holder handed us from them (taken
	 * above): polled as ours. */
	struct rt_others it = rt_others(w);
	for (struct fp_devq *q; (q = rt_others_next(w, &it));)
		taken += rt_rx_other(w, q, now, got, it.adopted ? &s->adopt_rx : NULL);
	return n + taken;
}

/* The device stayed full while the stack kept queueing: shed the excess, counted, rather
 * than let one stuck queue eat every buffer of the pool. */
static fp_cold void rt_tx_shed(struct rt_wk *w)
{
	struct fp_mbuf *m;

	while (fp_stack_tx_pending(w->st) > RT_TX_BACKLOG && fp_stack_tx(w->st, &m, 1) == 1) {
		fp_mbuf_free(&w->q->cache, m);
		w->ctx.stats->drops[FP_RT_DROP_tx_full]++;
	}
}

/* Step 6: the stack's frames to the device; returns the frames it took. @early: in the
 * middle of a round (fp_stack_tx_early: the timer updates put off stay put off). */
static unsigned rt_tx_frames(struct rt_wk *w, bool early)
{
	unsigned sent = 0;

	for (;;) {
		unsigned room = RT_TX_HOLD - w->n_tx;
		unsigned n = w->n_tx + (early ? fp_stack_tx_early(w->st, w->tx + w->n_tx, room) :
					fp_stack_tx(w->st, w->tx + w->n_tx, room));
		if (!n)
			break;
		unsigned k = w->q->ops->tx_burst(w->q, w->tx, n);
		sent += k;
		w->n_tx = n - k;
		if (w->n_tx) {
			memmove(w->tx, w->tx + k, w->n_tx * sizeof(w->tx[0]));
			rt_tx_shed(w);
			break;
		}
		if (!fp_stack_tx_pending(w->st))
			break;
	}
	return sent;
}

static unsigned rt_tx(struct rt_wk *w)
{
	return rt_tx_frames(w, false);
}

/* ---- statistics ---- */

/* Every RT_PUBLISH_US: the counters that cost a copy (or, for AF_XDP, a syscall). */
static void rt_publish(struct rt_wk *w, uint64_t now)
{
	struct fp_rt_worker_stats *s = w->ctx.stats;
	struct fp_net_stats ns;
	struct fp_dev_stats ds;

	fp_stack_stats(w->st, &ns);
	static_assert(sizeof(ns) <= sizeof(s->net), "net[] too small for the stack's counters");
	memcpy(s->net, &ns, sizeof(ns));
	s->tcp_conns = fp_stack_tcp_conns(w->st);
	s->pool_in_use = fp_pool_in_use(w->q->pool);
	if (!rt_home(w))
		goto device_away;   /* its holder writes the queue's counters: read when back */
	memset(&ds, 0, sizeof(ds));
	w->q->ops->stats(w->q, &ds);
	for (unsigned i = 0; i < w->n_xq; i++) {   /* its spare queues count as its own */
		struct fp_dev_stats x;
		memset(&x, 0, sizeof(x));
		w->xq[i]->ops->stats(w->xq[i], &x);
		ds.rx_frames += x.rx_frames;
		ds.rx_bytes += x.rx_bytes;
		ds.rx_dropped += x.rx_dropped;
		ds.rx_fill_empty += x.rx_fill_empty;
		ds.invalid_descs += x.invalid_descs;
	}
	s->rx_frames = ds.rx_frames;
	s->rx_bytes = ds.rx_bytes;
	s->tx_frames = ds.tx_frames;
	s->tx_bytes = ds.tx_bytes;
	s->drops[FP_RT_DROP_dev_rx_dropped] = ds.rx_dropped;
	s->drops[FP_RT_DROP_dev_fill_empty] = ds.rx_fill_empty;
	s->drops[FP_RT_DROP_dev_invalid] = ds.invalid_descs;
device_away:
	s->slept_ns = fp_cycles_to_ns(w->slept_cycles);
	if (w->parked_since_us) {   /* the time parked so far shows while it lasts */
		s->parked_ns += (now - w->parked_since_us) * 1000;
		w->parked_since_us = now;
	}
	s->now_unix_ns = rt_unix_ns();
	s->seq++;
	w->publish_us = now + RT_PUBLISH_US;
}

static void rt_account(struct rt_wk *w, bool busy, unsigned batch, uint64_t cycles)
{
	struct fp_rt_worker_stats *s = w->ctx.stats;

	s->iterations++;
	if (!busy) {
		s->idle_cycles += cycles;
		return;
	}
	s->busy_cycles += cycles;
	s->batch_hist[batch < FP_RT_BATCH_BUCKETS - 1 ? batch : FP_RT_BATCH_BUCKETS - 1]++;
	s->loop_ns_hist[fp_rt_log2_bucket(fp_cycles_to_ns(cycles))]++;
}

/* ---- idle ---- */

/* Add the other queues it polls to @p (spare ones while home, and lent ones: at most all
 * of the interface's); false when one has frames waiting already. */
static bool rt_sleep_watch(struct rt_wk *w, struct pollfd *p, unsigned *np)
{
	struct rt_others it = rt_others(w);

	for (struct fp_devq *q; (q = rt_others_next(w, &it));) {
		p[(*np)++] = (struct pollfd){ .fd = q->ops->wait_fd(q), .events = POLLIN };
		if (q->ops->rx_ready(q))
			return false;
	}
	return true;
}

/*
 * FP_IDLE_SLEEP, after spin_us of idle rounds: sleep in poll() on the device until a
 * frame arrives, the earliest timer (stack or application) is due, or the run stops. The
 * device arms its wake-up in wait_fd(), so rx_ready() is checked after it, not before.
 * A device with no wake-up (wait_fd -1) gets naps of at most cfg->nap_us instead.
 */
static void rt_sleep_fd(struct rt_wk *w, uint64_t now, int extra_fd)
{
	uint64_t next = fp_stack_next_us(w->st), app = rt_ctx_next_us(&w->ctx);
	uint64_t timeout_us = (uint64_t)RT_SLEEP_MAX_MS * 1000, t0;
	bool home = !w->steer || rt_home(w);
	struct pollfd p[4 + RT_IF_QUEUES_MAX];
	unsigned np = 4;
	int fd;

	if (app < next)
		next = app;
	if (!home) {
		fd = -1;   /* lent: its queue, stack and timers are not its own to look at */
	} else {
		if (next <= now)
			return;
		if (next - now < timeout_us)
			timeout_us = next - now;
		if ((fd = w->q->ops->wait_fd(w->q)) < 0) {
			/* A device that cannot wake us (DPDK: no receive interrupt): a nap,
			 * then the loop polls it again. What arrives meanwhile waits for the
			 * nap's end. */
			if (!w->run->cfg->nap_us)
				return;
			if (timeout_us > w->run->cfg->nap_us)
				timeout_us = w->run->cfg->nap_us;
		} else if (w->q->ops->rx_ready(w->q)) {
			return;
		}
	}
	if (rt_ctx_stopping(&w->ctx))
		return;
	/* parked as rt_idle() saw it (a burstable worker never looks: as it is) */
	bool parked = w->burst ? w->steer && rt_steer_parked(w->steer, w->ctx.worker)
			       : w->parked_since_us != 0;
	if (w->steer && !rt_steer_sleep_prepare(w->steer, w->ctx.worker, parked))
		return;   /* frames handed over to us wait */
	if (w->steer && (w->run->sh || w->run->app_steal) && rt_steal_home_work(&w->ctx)) {
		rt_steer_sleep_done(w->steer, w->ctx.worker);
		return;   /* a thief brought work back: run it */
	}
	p[0] = (struct pollfd){ .fd = fd, .events = POLLIN };   /* poll() skips an fd of -1 */
	p[1] = (struct pollfd){ .fd = w->run->wake_fd, .events = POLLIN };
	p[2] = (struct pollfd){ .fd = w->steer ? rt_steer_wake_fd(w->steer, w->ctx.worker) : -1,
				.events = POLLIN };
	p[3] = (struct pollfd){ .fd = extra_fd, .events = POLLIN };
	/* spare queues and queues lent to us: their frames wake us as our own do (armed
	 * before the check) */
	if (!rt_sleep_watch(w, p, &np)) {
		if (w->steer)
			rt_steer_sleep_done(w->steer, w->ctx.worker);
		return;
	}
	struct timespec ts = { .tv_sec = (time_t)(timeout_us / 1000000),
			       .tv_nsec = (long)(timeout_us % 1000000) * 1000 };
	t0 = fp_rdtsc();
	ppoll(p, np, &ts, NULL);
	t0 = fp_rdtsc() - t0;
	if (w->steer)
		rt_steer_sleep_done(w->steer, w->ctx.worker);
	w->slept_cycles += t0;
	w->ctx.stats->idle_cycles += t0;
	w->ctx.stats->sleeps++;
}

static void rt_sleep(struct rt_wk *w, uint64_t now)
{
	rt_sleep_fd(w, now, -1);
}

/*
 * --park-prio: a parked worker sleeps at SCHED_FIFO, so a frame its queue still receives
 * (a NIC, or a sender, that still steers there) wakes it ahead of whatever now runs on
 * its core, and is handed over at once instead of after that task's time slice (3 ms at
 * p99 measured with the load generator on the core, docs/results.md). Back to its own
 * policy before it polls again: a polling worker at SCHED_FIFO would own its core. The
 * startup checked that the policy may be set (run.c), so a refusal here is not expected;
 * it is said once and the worker goes on as it is.
 */
static void rt_park_prio(struct rt_wk *w, bool parked)
{
	struct sched_param fifo = { .sched_priority = (int)w->run->cfg->park_prio };
	int rc;

	if (parked) {
		if (pthread_getschedparam(pthread_self(), &w->run_policy, &w->run_param))
			return;
		rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo);
	} else {
		rc = pthread_setschedparam(pthread_self(), w->run_policy, &w->run_param);
	}
	if (rc && !w->park_prio_said) {
		w->park_prio_said = true;
		fprintf(stderr, "flowplane: worker %u: --park-prio: cannot change its scheduling "
			"policy (%s); it sleeps and polls as it is\n", w->ctx.worker, strerror(rc));
	}
}

/* Parked or unparked by the control plane since the last round: note it. */
static void rt_park_note(struct rt_wk *w, uint64_t now, bool parked)
{
	struct fp_rt_worker_stats *s = w->ctx.stats;

	if (parked == (w->parked_since_us != 0))
		return;
	if (parked) {
		w->parked_since_us = now ? now : 1;
		s->parks++;
	} else {
		s->parked_ns += (now - w->parked_since_us) * 1000;
		w->parked_since_us = 0;
	}
	s->parked = parked;
	if (w->run->cfg->park_prio && !w->burst)
		rt_park_prio(w, parked);
}

static void rt_idle(struct rt_wk *w, uint64_t now)
{
	if (w->steer) {
		bool parked = rt_steer_parked(w->steer, w->ctx.worker);

		rt_park_note(w, now, parked);
		if (parked) {   /* whatever the idle policy: the core is given back */
			rt_sleep(w, now);
			return;
		}
	}
	if (w->run->cfg->idle == FP_IDLE_POLL)
		return;   /* IX: keep polling (hyperthread-friendly pause is the device's) */
	if (w->run->cfg->idle == FP_IDLE_ADAPTIVE) {
		if (rt_idle_spent(&w->budget))
			rt_sleep(w, now);
		return;
	}
	if (!w->idle) {
		w->idle = true;
		w->idle_since_us = now;
	}
	if (now - w->idle_since_us >= w->run->cfg->spin_us)
		rt_sleep(w, now);
}

/* ---- burstable workers (--burst; rt/README.md, "Burstable workers") ---- */

/*
 * Shenango's kthread, under its allocator (rt/alloc.c, run by fp-ctl alloc): a burstable
 * worker owns no flow group; granted its core, it steals the homes' ready flows; having
 * found nothing for --burst-idle-us (or revoked), it parks: it publishes that it has,
 * stops stealing and sleeps in poll() on its eventfd (plus what any parked worker still
 * wakes for: frames landing on its own queue, to pass on, its stack's timers, the stop).
 * The allocator's grant is a number and a time in the segment, then a write to that
 * eventfd; the time from the grant's decision to this worker running is recorded.
 * Without a live allocator (its heartbeat still for RT_ALLOC_DEAD_MS, or its process
 * gone) a running burstable worker keeps its core: the runtime keeps serving.
 */

static uint64_t rt_mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static bool rt_alloc_alive(struct rt_wk *w, uint64_t now)
{
	const struct fp_rt_stats_hdr *h = w->run->stats_hdr;
	uint64_t hb = __atomic_load_n(&h->alloc.heartbeat, __ATOMIC_ACQUIRE);
	int32_t pid = __atomic_load_n(&h->alloc.pid, __ATOMIC_ACQUIRE);

	if (hb != w->hb_seen) {
		w->hb_seen = hb;
		w->hb_at_us = now;
	}
	return pid > 0 && now - w->hb_at_us < RT_ALLOC_DEAD_MS * 1000ull &&
	       (kill(pid, 0) == 0 || errno == EPERM);
}

static void rt_burst_park(struct rt_wk *w, uint64_t now, bool revoked)
{
	struct fp_rt_worker_stats *s = w->ctx.stats;

	w->ctx.no_steal = true;
	s->burst_parks++;
	s->burst_revoked += revoked;
	__atomic_store_n(&s->burst_parked, 1, __ATOMIC_RELEASE);
	rt_park_note(w, now, true);
}

/* A grant this worker has not taken yet: take it. */
static bool rt_burst_take(struct rt_wk *w, uint64_t now)
{
	const struct fp_rt_grant *g = &w->run->stats_hdr->grant[w->ctx.worker];
	struct fp_rt_worker_stats *s = w->ctx.stats;
	uint64_t no = __atomic_load_n(&g->no, __ATOMIC_ACQUIRE), t = rt_mono_ns(), d, lat, one;

	if (no == s->burst_took)
		return false;
	d = __atomic_load_n(&g->decided_ns, __ATOMIC_RELAXED);
	lat = t > d ? t - d : 0;
	while (read(w->run->burst_efd[w->ctx.worker], &one, sizeof(one)) > 0)
		;
	s->burst_grants++;
	s->realloc_ns += lat;
	if (lat > s->realloc_ns_max)
		s->realloc_ns_max = lat;
	s->realloc_hist[lat / 1000 < FP_RT_REALLOC_BUCKETS ? lat / 1000 : FP_RT_REALLOC_BUCKETS - 1]++;
	w->ctx.no_steal = false;
	w->idle = false;
	rt_park_note(w, now, false);
	__atomic_store_n(&s->burst_took, no, __ATOMIC_RELEASE);
	__atomic_store_n(&s->burst_parked, 0, __ATOMIC_RELEASE);
	return true;
}

/* After a round of a burstable worker (instead of the idle policy). */
static void rt_burst(struct rt_wk *w, uint64_t now, bool busy)
{
	const struct fp_rt_grant *g = &w->run->stats_hdr->grant[w->ctx.worker];
	struct fp_rt_worker_stats *s = w->ctx.stats;

	if (!w->ctx.no_steal) {   /* running on a grant */
		if (__atomic_load_n(&g->revoke, __ATOMIC_ACQUIRE) == s->burst_took) {
			rt_burst_park(w, now, true);
			return;
		}
		if (busy) {
			w->idle = false;
			return;
		}
		if (!w->idle) {
			w->idle = true;
			w->idle_since_us = now;
		}
		if (now - w->idle_since_us >= w->run->cfg->burst_idle_us && rt_alloc_alive(w, now))
			rt_burst_park(w, now, false);
		return;
	}
	if (rt_burst_take(w, now) || busy)
		return;          /* granted, or frames to pass on: another round */
	rt_sleep_fd(w, now, w->run->burst_efd[w->ctx.worker]);
	rt_burst_take(w, rt_now_us());
}

/* ---- the loop ---- */

/*
 * A round while its own queue is lent (parked), or on its way back: the queue and its
 * buffer cache are its holder's, and so, through the cache, are its stack and its
 * application, which it does not run. It still fences its rings for moves elsewhere
 * (rt_steer_take) and hands on the queues that reach it. Nothing else comes: it owns no
 * group, and none may move to it until its queue is home; a frame that did anyway is
 * dropped, counted, into a cache of its own.
 */
static bool rt_round_lent(struct rt_wk *w, uint64_t now, unsigned *batch)
{
	struct fp_rt_worker_stats *s = w->ctx.stats;
	unsigned n;

	*batch = 0;
	if (!w->lent_cache_on) {
		if (fp_pool_cache_init(&w->lent_cache, w->q->pool))
			return false;   /* no cache to spare: nothing taken (it stays lent) */
		w->lent_cache_on = true;
	}
	n = rt_steer_take(w->steer, w->ctx.worker, &w->ctx, NULL, &w->lent_cache, w->rx,
			  w->batch, now, s);
	for (unsigned i = 0; i < n; i++)
		fp_mbuf_free(&w->lent_cache, w->rx[i]);
	s->steer_drop += n;
	rt_hands(w);
	return n > 0 || rt_home(w);
}

/* One round; true when it did any work. *@batch: frames given to the stack. */
static bool rt_round(struct rt_wk *w, uint64_t now, unsigned *batch)
{
	struct fp_ctx *ctx = &w->ctx;
	bool got, settled;
	unsigned rounds, fired, sent, freed;

	if (w->steer && !rt_home(w))
		return rt_round_lent(w, now, batch);
	ctx->now_us = now;
	*batch = rt_rx(w, now, &got);
	rounds = rt_app_pass(w, &settled);
	fired = fp_stack_poll(w->st, now);
	if (fired)
		rounds += rt_app_pass(w, &settled);
	if (settled)
		fired += rt_ctx_timers(ctx, now);
	/* A group asked to move leaves between rounds, its events all delivered. */
	if (w->steer && settled && !rt_ctx_stopping(ctx))
		rt_steer_moves(w->steer, ctx->worker, ctx, w->st, ctx->stats);
	sent = rt_tx(w);
	freed = w->q->ops->reclaim(w->q);
	/* their fill rings, and a lender's frames still completing */
	struct rt_others it = rt_others(w);
	for (struct fp_devq *q; (q = rt_others_next(w, &it));)
		freed += q->ops->reclaim(q);
	/* Parks and unparks: hand on the queues that must go, before anyone sleeps. */
	if (w->steer)
		rt_hands(w);
	/* Frames the device refused keep the loop busy, retrying, where a sleep could not
	 * hear the device make room (AF_XDP's fill of its tx ring wakes nobody). A device that
	 * naps (DPDK) retries after each nap instead: a memif with no peer yet refuses the
	 * ARP announcement for good, and its worker would poll for nothing until one came. */
	bool tx_waits = w->n_tx && (sent || !w->naps);

	/* and what an interrupt left for the loop (--notify ipi): never asleep on it */
	return got || rounds || fired || sent || freed || tx_waits || ctx->n_rets ||
	       ctx->n_conds || w->n_irq_held;
}

static void rt_loop(struct rt_wk *w)
{
	uint64_t prev_t0 = 0, slept_before = 0;
	bool prev_busy = true;

	if (w->burst) {   /* it starts parked: its core is the allocator's to grant */
		w->ctx.no_steal = true;
		__atomic_store_n(&w->ctx.stats->burst_parked, 1, __ATOMIC_RELEASE);
		rt_park_note(w, rt_now_us(), true);
	}

	while (!rt_ctx_stopping(&w->ctx)) {
		uint64_t t0 = fp_rdtsc(), now = rt_now_us();
		unsigned batch;

		if (prev_t0 && t0 - prev_t0 > w->slept_cycles - slept_before)
			rt_gap_note(w->ctx.stats, t0 - prev_t0 - (w->slept_cycles - slept_before),
				    !prev_busy);
		prev_t0 = t0;
		slept_before = w->slept_cycles;
		bool busy = rt_round(w, now, &batch);

		prev_busy = busy;

		/* unparked: noted before the next round, busy or not (rt_idle notes a park) */
		if (fp_unlikely(w->parked_since_us) && w->steer && !w->burst &&
		    !rt_steer_parked(w->steer, w->ctx.worker))
			rt_park_note(w, now, false);
		uint64_t t1 = fp_rdtsc();

		rt_account(w, busy, batch, t1 - t0);
		rt_ctl_round(&w->ctl, t1 - t0, w->last_q);
		rt_idle_round(&w->budget, busy, t0, t1, w->run->cfg->spin_us);
		if (w->burst)
			rt_burst(w, now, busy);
		else if (busy)
			w->idle = false;
		else
			rt_idle(w, now);
		if (now >= w->publish_us)
			rt_publish(w, now);
		if (now >= w->ctl.end_us)
			rt_ctl_interval(&w->ctl, w->ctx.stats, now, w->batch);
	}
}

/* ---- setup and teardown ---- */

/*
 * The run stopped and the application has let go of its flows (evl resets what is still
 * open): put what the stack queued, those RSTs above all, on the wire before the stack is
 * destroyed, or peers keep connections to us established forever. Bounded: a device that
 * stays full, or a peer that no longer takes frames, gets RT_DRAIN_US, not more. The drain
 * ends once the stack's queue is empty and a few passes saw nothing more leave or complete.
 * Nothing is received: the stack would only answer it, and its events have no handler now.
 */
static void rt_drain(struct rt_wk *w)
{
	uint64_t end = rt_now_us() + RT_DRAIN_US;
	struct timespec pause = { 0, RT_DRAIN_GAP_US * 1000 };
	unsigned quiet = 0;

	for (;;) {
		unsigned moved = rt_tx(w) + w->q->ops->reclaim(w->q);

		if (moved || w->n_tx || fp_stack_tx_pending(w->st))
			quiet = 0;
		else
			quiet++;
		if (quiet >= RT_DRAIN_QUIET || rt_now_us() >= end)
			break;
		nanosleep(&pause, NULL);
	}
}

/* ---- --notify ipi: the interrupt's work (rt/ipi.c says when it runs and why so) ---- */

#define RT_IRQ_PER_FRAME 4      /* events one quiet frame's input may queue (net.h:
				 * fp_stack_quiet_frame), and its frames but for a SACK
				 * recovery's (a full queue drops those, counted) */
#define RT_IRQ_SLACK     64     /* kept free beyond what the interrupt's checks count */
#define RT_IRQ_MSS_MIN   64     /* the smallest MSS a conn may have (tcp_input.c clamps
				 * a peer's to it): a send's most segments */

static unsigned rt_irq_room(const struct rt_wk *w)
{
	return RT_IRQ_PER_FRAME * w->batch + RT_IRQ_SLACK;
}

/* Outside the handler: room for everything one interrupt may queue. */
static void rt_irq_prepare(struct fp_ctx *ctx)
{
	struct rt_wk *w = wk_of(ctx);
	unsigned room = rt_irq_room(w);

	fp_stack_reserve(w->st, 2 * room, 2 * room);   /* if short, the checks see less room */
	rt_reserve((void **)&ctx->conds, &ctx->cap_conds, ctx->n_conds + room,
		   sizeof(*ctx->conds));
	rt_steal_irq_prepare(ctx, room);
}

/* Frames a SENDV of @c may queue: its segments at the smallest MSS, and an ACK (a large
 * send does not fit and waits for the loop). */
static unsigned rt_irq_frames(const struct fp_call *c)
{
	uint64_t bytes = 0;

	if (c->type != FP_CALL_SENDV)
		return 2;
	for (int i = 0; c->iov && i < c->iovcnt; i++)
		bytes += c->iov[i].iov_len;
	return (unsigned)(bytes / RT_IRQ_MSS_MIN) + 2;
}

static bool rt_irq_fits(struct fp_ctx *ctx, const struct fp_call *calls, unsigned n)
{
	struct rt_wk *w = wk_of(ctx);
	unsigned ev, tx;
	uint64_t need = RT_IRQ_SLACK;

	fp_stack_room(w->st, &ev, &tx);
	for (unsigned i = 0; i < n; i++)
		need += rt_irq_frames(&calls[i]);
	return ev >= n + RT_IRQ_SLACK && tx >= need;
}

/* The frames waiting in the queue, through the stack, as far as that allocates nothing;
 * their conditions to their flows. Nothing is received while an earlier interrupt's
 * frames or conditions still wait for the loop (their order comes first). */
static void rt_irq_rx(struct rt_wk *w)
{
	struct fp_ctx *ctx = &w->ctx;
	struct rt_ipi *p = &w->run->ipi[ctx->worker];
	unsigned ev, tx, max, n, i;

	fp_stack_room(w->st, &ev, &tx);
	ev = ev < RT_IRQ_SLACK ? 0 : ev - RT_IRQ_SLACK;
	tx = tx < RT_IRQ_SLACK ? 0 : tx - RT_IRQ_SLACK;
	max = (ev < tx ? ev : tx) / RT_IRQ_PER_FRAME;
	i = (ctx->cap_conds - ctx->n_conds) / RT_IRQ_PER_FRAME;
	max = max < i ? max : i;
	max = max < w->batch ? max : w->batch;
	if (!max)
		return;
	n = w->q->ops->rx_burst(w->q, w->rx, max);
	if (n && w->steer)
		n = rt_steer_rx(w->steer, ctx->worker, &w->q->cache, w->rx, n, ctx->stats);
	for (i = 0; i < n && !w->run->ipi_hold && fp_stack_quiet_frame(w->st, w->rx[i]); i++)
		;
	if (i < n) {
		memcpy(w->irq_held, w->rx + i, (n - i) * sizeof(*w->rx));
		w->n_irq_held = n - i;
		ctx->stats->ipi_held += n - i;
		atomic_store_explicit(&p->rx_blocked, 1, memory_order_relaxed);
	} else if (w->steer && !w->run->ipi_hold) {   /* and what other workers handed us */
		bool stuck = false;

		i += rt_steer_take_quiet(w->steer, ctx->worker, w->st, w->rx + i, max - i,
					 &stuck, ctx->stats);
		if (stuck)
			atomic_store_explicit(&p->rx_blocked, 1, memory_order_relaxed);
	}
	if (!i)
		return;
	ctx->stats->ipi_frames += i;
	fp_stack_input(w->st, w->rx, i, rt_now_us());
	while (ctx->cap_conds > ctx->n_conds &&
	       (n = fp_stack_events(w->st, w->ev, ctx->cap_conds - ctx->n_conds < RT_EV_BURST ?
				   ctx->cap_conds - ctx->n_conds : RT_EV_BURST)) > 0)
		for (unsigned k = 0; k < n; k++)
			rt_event_cond(w, &w->ev[k]);
	if (rt_steal_irq_post(ctx))
		atomic_store_explicit(&p->rx_blocked, 1, memory_order_relaxed);
}

/* ZygOS's IPI handler (§3.4.5): the calls of flows that came home, the stack on waiting
 * frames if nothing of ours is stealable, then the wire. */
static void rt_irq(struct fp_ctx *ctx)
{
	struct rt_wk *w = wk_of(ctx);

	if (w->steer && !rt_home(w))   /* its queue is lent: the stack is not run (lending) */
		return;
	fp_stack_irq(w->st, true);
	rt_steal_irq_returns(ctx);
	if (!w->n_irq_held && !ctx->n_conds && !fp_shuf_ready_count(w->run->sh, ctx->worker))
		rt_irq_rx(w);
	rt_tx(w);
	fp_stack_irq(w->st, false);
}

/* Mid-round (steal.c, between long handlers): the stack's frames to the device; the
 * timer updates put off stay so until the round's end (the later handlers' answers may
 * clear their delayed ACKs). */
static void rt_flush(struct fp_ctx *ctx)
{
	rt_tx_frames(wk_of(ctx), true);
}

#define RT_WORKER_OPS(n) { .name = (n), .exec = rt_exec, .irq_prepare = rt_irq_prepare, \
			   .irq = rt_irq, .irq_fits = rt_irq_fits, .flush = rt_flush }
static const struct rt_transport_ops rt_xdp_ops = RT_WORKER_OPS("xdp");
static const struct rt_transport_ops rt_pair_ops = RT_WORKER_OPS("pair");

static struct fp_stack *rt_stack_create(struct rt_wk *w, unsigned worker, uint32_t addr,
					uint16_t n_queues, uint64_t now)
{
	const struct fp_rt_config *cfg = w->run->cfg;
	struct fp_stack_config sc = cfg->stack;

	sc.mac = w->q->mac;
	sc.ipv4 = addr;
	sc.prefix_len = cfg->prefix_len;
	sc.gateway = cfg->gateway;
	sc.mtu = w->q->mtu;
	sc.cache = &w->q->cache;
	if (!sc.tx_bufs) {
		/* What receive keeps posted stays out of TCP's reach, and an eighth more for
		 * frames being received, ACKs and copies: sent data can never starve the
		 * receive path of the buffers its ACKs need. And no more than the frames
		 * rt_tx may hold back while the device is busy (on a veth, unacked data is
		 * mostly still here): a bigger pool must not turn into frames shed. */
		uint32_t n = w->q->pool->n_bufs, keep = w->q->rx_bufs + n / 8;
		sc.tx_bufs = n > 2 * keep ? n - keep : n / 2;
		if (sc.tx_bufs > RT_TX_BACKLOG - RT_TX_HOLD)
			sc.tx_bufs = RT_TX_BACKLOG - RT_TX_HOLD;
	}
	/* SENT means what it means on the kernel transport: room again after a short send
	 * (evl and the native servers act on nothing else); one condition less per reply */
	sc.sent_when_blocked = true;
	/* IX's outbound trick: ephemeral ports whose replies hash back to our queue, or with
	 * flow groups, whose group is ours (steer.c's key and table, or the device's). */
	sc.queue_id = w->q->queue_id;
	sc.n_queues = n_queues;
	if (w->steer) {
		sc.queue_id = (uint16_t)worker;
		sc.rss_key = fp_rss_key_symmetric;
		sc.steer_table = rt_steer_table(w->steer);
		if (!sc.secret)
			sc.secret = rt_steer_secret(w->steer);
	} else if (w->run->dev_table) {
		sc.queue_id = (uint16_t)worker;
		sc.rss_key = fp_rss_key_symmetric;
		sc.steer_table = w->run->dev_table;
	}
	return fp_stack_create(&sc, now);
}

static struct rt_wk *rt_wk_new(struct rt_run *run, unsigned worker, struct fp_devq *q)
{
	const struct fp_rt_config *cfg = run->cfg;
	struct rt_wk *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->run = run;
	w->steer = run->steer;
	w->hands = 1ull << worker;
	w->q = q;
	w->batch = cfg->batch;
	w->rx_drop = cfg->rx_drop;
	w->rx_reorder = cfg->rx_reorder;
	w->naps = cfg->transport == FP_TRANSPORT_DPDK;
	/* Each worker its own stream; seed 0 means "from the clock". */
	w->rng = (cfg->seed ? cfg->seed : rt_now_us()) + worker * 0x9e3779b97f4a7c15ull;
	w->burst = run->stats_hdr && run->burst_efd[worker] >= 0;
	return w;
}

/*
 * Nobody serves before every worker is ready: with flow groups, a connection whose group
 * belongs to a worker still in init would be refused (its stack listens only once its
 * init's listen has executed; the first SYN got a RST, and the test of the control loop
 * saw it). Frames wait in the queues meanwhile. A worker whose init fails stops the run,
 * which ends the wait.
 */
static void rt_start_barrier(struct rt_run *run)
{
	struct timespec t = { 0, 50 * 1000 };

	while (atomic_load(&run->n_ready) < run->cfg->n_workers && !atomic_load(&run->stop))
		nanosleep(&t, NULL);
}

/* The app's start on this worker: init, then its calls (its listens) before the first
 * frame. Returns init's error, or 0. */
static int rt_app_start(struct rt_wk *w)
{
	const struct fp_app *app = w->run->app;
	int ret = app->init ? app->init(&w->ctx, app->arg) : 0;

	if (ret) {
		fprintf(stderr, "flowplane: worker %u: %s: init failed: %s\n", w->ctx.worker,
			app->name ? app->name : "app", strerror(ret < 0 ? -ret : ret));
		return ret;
	}
	rt_ctx_flush(&w->ctx);
	atomic_fetch_add(&w->run->n_ready, 1);
	return 0;
}

/* The app's end: fini (whose calls still execute: it may give back buffers it holds, and
 * reset its flows), then what is left open is reset. */
static void rt_app_stop(struct rt_wk *w)
{
	const struct fp_app *app = w->run->app;

	if (app->fini)
		app->fini(&w->ctx);
	rt_ctx_flush(&w->ctx);
	if (w->steer)
		rt_steer_worker_exit(w->steer, w->ctx.worker, w->st, &w->q->cache);
	/* Flows fini left open (a native-API app, a connect in flight, a close still in
	 * FIN_WAIT): reset them, as a process exit would, so no peer keeps a dead one. */
	fp_stack_reset_all(w->st);
}

/* The app's lifetime on this worker: start, the loop, stop, then the drain of what the
 * stack queued. Returns init's error, or 0. */
static int rt_app_run(struct rt_wk *w)
{
	int ret = rt_app_start(w);

	if (ret)
		return ret;
	rt_start_barrier(w->run);
	rt_steal_enter(w->run);
	rt_ipi_bind(&w->ctx, w->q);
	if (w->steer)
		rt_steer_loop(w->steer, w->ctx.worker, true);
	rt_loop(w);
	rt_run_wake(w->run);  /* the stop may be ours: tell sleeping workers and main */
	if (w->steer)   /* its queue away: until nobody can poll it */
		rt_steer_loop(w->steer, w->ctx.worker, false);
	rt_steal_leave(w->run);
	rt_ipi_unbind(&w->ctx);
	rt_app_stop(w);
	rt_drain(w);
	return 0;
}

/* A worker's state on @q (and the spare queues @xq): its stack and context. NULL with
 * *@err (a line said why). */
static struct rt_wk *rt_wk_open(struct rt_run *run, unsigned worker, struct fp_devq *q,
				struct fp_devq *const *xq, unsigned n_xq,
				const struct rt_transport_ops *tops, uint32_t addr,
				uint16_t n_queues, uint64_t now, int *err)
{
	struct rt_wk *w = rt_wk_new(run, worker, q);

	if (!w) {
		*err = -ENOMEM;
		return NULL;
	}
	if (n_xq)
		memcpy(w->xq, xq, n_xq * sizeof(*xq));
	w->n_xq = n_xq;
	if (!(w->st = rt_stack_create(w, worker, addr, n_queues, now))) {
		*err = -errno;
		fprintf(stderr, "flowplane: worker %u: stack: %s\n", worker, strerror(errno));
		free(w);
		return NULL;
	}
	if ((*err = rt_ctx_init(&w->ctx, run, worker, tops, w, now))) {
		fp_stack_destroy(w->st);
		free(w);
		return NULL;
	}
	w->ctx.local_addr = addr;
	return w;
}

/* The held frames go back through the queue's cache; the stack first, then the frames it
 * handed to the device (their last references are the device's). */
static void rt_wk_close(struct rt_wk *w)
{
	struct fp_devq *q = w->q;

	fp_stack_destroy(w->st);
	if (w->held)
		fp_mbuf_free(&q->cache, w->held);
	for (unsigned i = 0; i < w->n_irq_held; i++)
		fp_mbuf_free(&q->cache, w->irq_held[i]);
	for (unsigned i = 0; i < w->n_tx; i++)
		fp_mbuf_free(&q->cache, w->tx[i]);
	if (w->lent_cache_on)
		fp_pool_cache_flush(&w->lent_cache);
	q->ops->reclaim(q);
	rt_ctx_fini(&w->ctx);
	free(w);
}

/* Everything between "we have a queue" and "the queue may be closed". */
static int rt_worker_body(struct rt_run *run, unsigned worker, struct fp_devq *q,
			  struct fp_devq *const *xq, unsigned n_xq,
			  const struct rt_transport_ops *tops, uint32_t addr, uint16_t n_queues)
{
	int ret;
	struct rt_wk *w = rt_wk_open(run, worker, q, xq, n_xq, tops, addr, n_queues,
				     rt_now_us(), &ret);

	if (!w)
		return ret;
	ret = rt_app_run(w);
	rt_publish(w, rt_now_us());
	if (w->steer)
		rt_steer_tally(w->steer, worker, w->ctx.stats);
	rt_wk_close(w);
	return ret;
}

int rt_worker_xdp(struct rt_run *run, unsigned worker, struct fp_xdp *x)
{
	const struct fp_rt_config *cfg = run->cfg;
	char err[256] = "";
	struct fp_devq *q = fp_xdp_queue_open(x, cfg->queue_base + worker, err, sizeof(err));
	int ret;

	if (!q) {
		ret = errno ? -errno : -EIO;
		fprintf(stderr, "flowplane: worker %u: queue %u: %s\n", worker,
			cfg->queue_base + worker, err[0] ? err : strerror(-ret));
		return ret;
	}
	/* With flow groups another worker's stack may hold our buffers until it stops: the
	 * queue closes once every worker has (rt_steer_destroy). */
	if (run->steer)
		rt_steer_own(run->steer, worker, q);
	if (q->zerocopy)
		atomic_fetch_add(&run->n_zerocopy, 1);
	if (q->native)
		atomic_fetch_add(&run->n_native, 1);
	/* The interface's queues beyond the workers' (a NIC's RSS, a Linux sender on a veth
	 * sends on them): spread over the workers, or their frames would go to the kernel,
	 * which does not own the address. Startup checked there are few enough. */
	struct fp_devq *xq[RT_QUEUES_MAX - 1];
	unsigned n_xq = 0, nq = fp_xdp_queues(x);
	for (unsigned id = 0, k = 0; id < nq; id++) {
		if (id >= cfg->queue_base && id < cfg->queue_base + cfg->n_workers)
			continue;
		if (k++ % cfg->n_workers != worker)
			continue;
		struct fp_devq *e = fp_xdp_queue_open(x, id, err, sizeof(err));
		if (!e) {
			ret = errno ? -errno : -EIO;
			fprintf(stderr, "flowplane: worker %u: spare queue %u: %s\n", worker, id,
				err[0] ? err : strerror(-ret));
			goto out;
		}
		xq[n_xq++] = e;
		if (run->steer)
			rt_steer_own(run->steer, worker, e);
	}
	ret = rt_worker_body(run, worker, q, xq, n_xq, &rt_xdp_ops, cfg->ipv4, (uint16_t)nq);
out:
	if (!run->steer) {
		for (unsigned i = 0; i < n_xq; i++)
			xq[i]->ops->close(xq[i]);
		q->ops->close(q);
	}
	return ret;
}

static const struct rt_transport_ops rt_dpdk_ops = RT_WORKER_OPS("dpdk");

int rt_worker_dpdk(struct rt_run *run, unsigned worker, struct fp_dpdk *d)
{
	char err[256] = "";
	struct fp_devq *q = fp_dpdk_queue_open(d, worker, err, sizeof(err));
	int ret;

	if (!q) {
		ret = errno ? -errno : -EIO;
		fprintf(stderr, "flowplane: worker %u: dpdk queue %u: %s\n", worker, worker,
			err[0] ? err : strerror(-ret));
		return ret;
	}
	ret = rt_worker_body(run, worker, q, NULL, 0, &rt_dpdk_ops, run->cfg->ipv4,
			     (uint16_t)run->cfg->n_workers);
	q->ops->close(q);
	return ret;
}

int rt_worker_pair(struct rt_run *run, unsigned worker, struct fp_devq *q)
{
	/* Each worker is its own host on the pair's wire: worker i is ipv4 + i. The caller
	 * owns the queue and closes it after the run. */
	return rt_worker_body(run, worker, q, NULL, 0, &rt_pair_ops, run->cfg->ipv4 + worker, 1);
}

/* ---- fp-vsim --full: a worker stepped by the simulator (virtual.c) ---- */

static const struct rt_transport_ops rt_vsim_ops = RT_WORKER_OPS("vsim");

struct rt_wk *rt_vworker_open(struct rt_run *run, unsigned worker, struct fp_devq *q,
			      uint32_t addr, uint16_t n_queues, uint64_t now_us, int *err)
{
	struct rt_wk *w = rt_wk_open(run, worker, q, NULL, 0, &rt_vsim_ops, addr, n_queues,
				     now_us, err);

	if (w && (*err = rt_app_start(w))) {
		rt_wk_close(w);
		return NULL;
	}
	if (w)
		rt_ipi_bind(&w->ctx, w->q);
	return w;
}

bool rt_vworker_round(struct rt_wk *w, uint64_t now_us)
{
	unsigned batch;

	return rt_round(w, now_us, &batch);
}

uint64_t rt_vworker_next_us(struct rt_wk *w)
{
	uint64_t st = fp_stack_next_us(w->st), app = rt_ctx_next_us(&w->ctx);

	return st < app ? st : app;
}

struct fp_rt_worker_stats *rt_vworker_stats(struct rt_wk *w) { return w->ctx.stats; }

unsigned rt_vworker_conns(const struct rt_wk *w) { return fp_stack_tcp_conns(w->st); }

void rt_vworker_interrupt(struct rt_wk *w) { rt_ipi_deliver(&w->ctx); }

void rt_vworker_close(struct rt_wk *w)
{
	rt_ipi_unbind(&w->ctx);
	rt_app_stop(w);
	rt_tx(w);
	rt_wk_close(w);
}
