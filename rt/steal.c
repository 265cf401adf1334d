/* steal.c: ZygOS's scheduler in the workers: a flow's conditions run on any idle worker, its calls at home. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/compiler.h>
#include <flowplane/log.h>

#include "defs.h"

/*
 * --sched steal (thesis 000_..., §3.4). Each round of a worker, in this order:
 *
 *   1. flows that thieves ran come home: their calls execute here, in order, on this
 *      worker's transport (the only one that may touch the flow), and their returns are
 *      kept for the flow's next batch;
 *   2. this round's conditions for established flows (RECV, SENT, EOF, DEAD) are posted to
 *      their flows in the shuffle layer (rt/shuffle.c); a flow with events and nobody
 *      running it is ready in this worker's shuffle queue, exactly once;
 *   3. everything else (KNOCK, CONNECTED, datagrams, the worker's own returns) goes to the
 *      handler as an ordinary round;
 *   4. the worker runs its own ready flows: the handler gets one flow's conditions and
 *      that flow's returns, and its calls execute at once;
 *   5. a worker that had nothing else to do steals one ready flow from another worker,
 *      runs the handler for it, and sends the calls home with the flow (step 1 there).
 *
 * A flow's events run on one worker at a time, in order; its calls run on its home, in
 * order, before its next batch. What the application promises (fp_app.steal_safe): given
 * one flow's conditions, its handler queues calls only for that flow and touches only
 * that flow's state (its cookie) and what it guards itself; anything else (LISTEN,
 * CONNECT, another flow) queued from a flow's batch gets -EINVAL and is not executed.
 *
 * The returns of a flow's last batch (one that closed it) come back with the home's next
 * ordinary round, so the application learns when its memory is no longer referenced.
 * Calls on a flow queued outside its batches (an ordinary round's ACCEPT and what accept()
 * wrote, a timer's writes) execute on the home at once, but their returns go with the
 * flow to its next batch (rt_steal_exec_outside), never up beside a batch a thief runs;
 * a CLOSE or ABORT queued so while the flow is queued or running waits until it is done.
 * Workers poll (--idle poll): a worker that slept could
 * not steal, and its flows could not be stolen before it woke.
 */

#define RT_STEAL_LOCAL_MAX 64     /* own ready flows run per round, so returns and new
				   * frames are not starved by a long queue */
#define RT_STEAL_LOCAL_NS 20000   /* and no new one after this long: the round's sends
				   * leave, and what is left stays for thieves (as tsock's
				   * threads, TS_ROUND_NS) */
#define RT_STEAL_FLUSH_NS 10000   /* once the round's own handlers have run this long since
				   * its sends last left, they leave before the next handler:
				   * a reply does not wait behind another long request
				   * (fp-vsim --full: p99 at 16 workers, load 0.9, 108 -> 91
				   * us). A send costs a device kick (a syscall on AF_XDP in
				   * copy mode, 1-2 us here): at most one per 10 us of
				   * handlers, so short ones still send in bursts */

/* An event waiting in a flow's inbox or batch: the condition as the transport gave it. */
struct rt_sev {
	struct fp_shuf_ev link;
	struct rt_sev *fnext;         /* on the home's free list */
	struct fp_cond c;
};

/* A flow under the scheduler: home-owned, handed to one runner at a time. */
struct rt_sflow {
	struct fp_shuf_flow sf;
	struct fp_flow *flow;
	struct rt_sflow *hnext;       /* home's table chain */
	struct rt_sflow *dnext;       /* on the home's deferred list (--notify ipi) */
	bool closed;                  /* CLOSE or ABORT executed: drop what is still queued */
	bool prompt;                  /* its batch's returns are wanted without an event
				       * (fp_flow_returns_soon) */
	bool close_waiting;           /* a CLOSE/ABORT from elsewhere waits for the flow */
	struct fp_call waiting;
	/* the calls a thief queued, executed at home */
	struct fp_call *calls;
	unsigned n_calls, cap_calls;
	struct iovec *iov;            /* their iovecs, copied (the thief's are its own) */
	unsigned n_iov, cap_iov;
	/* the returns of the last batch's calls, for the next batch */
	struct fp_call *rets;
	unsigned n_rets, cap_rets;
	/* returns of calls made outside the flow's batches while one was queued or running,
	 * kept here (home only) until it is done, then handed to the next */
	struct fp_call *later;
	unsigned n_later, cap_later;
};

/* Per worker, touched by that worker only. */
struct rt_steal_wk {
	struct rt_sflow **tab;        /* by flow pointer, chained */
	unsigned mask, n;
	struct rt_sev *free_ev;       /* free events (linked through link.next) */
	unsigned n_free_ev;
	struct rt_sflow *deferred;    /* came home during an interrupt that could not run
				       * their calls (--notify ipi): step 1 runs them first */
	struct rt_sflow *running;     /* the flow whose batch the handler runs now */
	struct fp_cond *conds;        /* a batch's conditions, built for the handler */
	unsigned cap_conds;
	uint64_t stolen_runs, local_runs, remote_calls;
} fp_aligned_cache;

#define SFLOW(p) fp_container_of((p), struct rt_sflow, sf)

/* ---- the home's table of flows ---- */

static unsigned slot_of(const struct rt_steal_wk *w, const struct fp_flow *f)
{
	uintptr_t x = (uintptr_t)f;

	x ^= x >> 17;
	x *= 0x9e3779b97f4a7c15ull;
	return (unsigned)(x >> 40) & w->mask;
}

static struct rt_sflow *flow_find(struct rt_steal_wk *w, const struct fp_flow *f)
{
	for (struct rt_sflow *s = w->tab[slot_of(w, f)]; s; s = s->hnext)
		if (s->flow == f)
			return s;
	return NULL;
}

/* The flow's record, created at its first condition; NULL when this worker already has
 * as many as its shuffle queue holds (the flow is then served at home, unstolen). */
static struct rt_sflow *flow_get(struct rt_run *run, struct rt_steal_wk *w, unsigned me,
				 struct fp_flow *f)
{
	struct rt_sflow *s = flow_find(w, f);
	unsigned i;

	if (s || w->n >= run->steal_max_flows)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	fp_shuf_flow_init(&s->sf, me);
	s->flow = f;
	i = slot_of(w, f);
	s->hnext = w->tab[i];
	w->tab[i] = s;
	w->n++;
	return s;
}

static void flow_forget(struct rt_steal_wk *w, struct rt_sflow *s)
{
	struct rt_sflow **pp = &w->tab[slot_of(w, s->flow)];

	while (*pp != s)
		pp = &(*pp)->hnext;
	*pp = s->hnext;
	w->n--;
	free(s->calls);
	free(s->iov);
	free(s->rets);
	free(s->later);
	free(s);
}

/* ---- events ---- */

static void ev_free_list(struct rt_steal_wk *w, struct fp_shuf_list *l)
{
	for (struct fp_shuf_ev *e = l->head; e; e = e->next) {
		struct rt_sev *ev = fp_container_of(e, struct rt_sev, link);

		ev->fnext = w->free_ev;
		w->free_ev = ev;
		w->n_free_ev++;
	}
	memset(l, 0, sizeof(*l));
}

static void post(struct fp_ctx *ctx, struct rt_steal_wk *w, struct rt_sflow *s,
		 const struct fp_cond *c)
{
	struct rt_sev *ev = w->free_ev;

	if (ev) {
		w->free_ev = ev->fnext;
		w->n_free_ev--;
	} else if (!(ev = malloc(sizeof(*ev)))) {
		log_err("rt: out of memory for a condition");
		abort();
	}
	ev->c = *c;
	fp_shuf_post(ctx->run->sh, &s->sf, &ev->link, ctx->now_us);
}

static bool flow_cond(uint16_t type)
{
	return type == FP_COND_RECV || type == FP_COND_SENT || type == FP_COND_EOF ||
	       type == FP_COND_DEAD;
}

/* ---- calls ---- */

static bool closes(const struct fp_call *c)
{
	return c->type == FP_CALL_CLOSE || c->type == FP_CALL_ABORT;
}

/* Whether a call queued from @s's batch may run: calls on that flow only. */
static bool call_allowed(const struct rt_sflow *s, const struct fp_call *c)
{
	switch (c->type) {
	case FP_CALL_SENDV: case FP_CALL_RECV_DONE: case FP_CALL_SHUTDOWN:
	case FP_CALL_CLOSE: case FP_CALL_ABORT:
		return c->flow == s->flow;
	default:
		return false;
	}
}

/* Home: execute @s's calls in order; their returns become the flow's, for its next
 * batch. */
static void exec_flow_calls(struct fp_ctx *ctx, struct rt_sflow *s,
			    struct fp_call *calls, unsigned n)
{
	rt_reserve((void **)&s->rets, &s->cap_rets, s->n_rets + n, sizeof(*s->rets));
	for (unsigned i = 0; i < n; i++) {
		struct fp_call *c = &calls[i];

		if (!call_allowed(s, c)) {
			c->ret = -EINVAL;
		} else if (s->closed) {
			c->ret = -ENOTCONN;
		} else {
			ctx->tops->exec(ctx, c);
			if (closes(c))
				s->closed = true;
			/* short of buffers: no event will say when there are some, so the
			 * return comes at once and the sendv is offered again (as every
			 * round without the scheduler), not when the peer next speaks */
			if (c->type == FP_CALL_SENDV && c->ret == -ENOBUFS)
				s->prompt = true;
		}
		s->rets[s->n_rets++] = *c;
	}
	ctx->stats->calls += n;
}

/* Append @n returns to the worker's own, handed up with its next ordinary round. */
static void rets_to_home(struct fp_ctx *ctx, const struct fp_call *r, unsigned n)
{
	if (!n)
		return;   /* @r may be NULL: a flow that never held a return */
	rt_reserve((void **)&ctx->rets, &ctx->cap_rets, ctx->n_rets + n, sizeof(*ctx->rets));
	memcpy(ctx->rets + ctx->n_rets, r, (size_t)n * sizeof(*r));
	ctx->n_rets += n;
}

/* Home, after a batch's calls: free its events; a closed flow is forgotten (its last
 * returns go up with the home's next round), any other becomes idle or ready again. */
static void finish(struct fp_ctx *ctx, struct rt_steal_wk *w, struct rt_sflow *s)
{
	bool later = s->n_later > 0, prompt = s->prompt && s->n_rets;

	ev_free_list(w, &s->sf.batch);
	if (later) {   /* after this batch's own returns, before the close's */
		rt_reserve((void **)&s->rets, &s->cap_rets, s->n_rets + s->n_later,
			   sizeof(*s->rets));
		memcpy(s->rets + s->n_rets, s->later, s->n_later * sizeof(*s->rets));
		s->n_rets += s->n_later;
		s->n_later = 0;
	}
	if (s->close_waiting) {   /* counted when it was queued (rt_ctx_flush) */
		s->close_waiting = false;
		rt_reserve((void **)&s->rets, &s->cap_rets, s->n_rets + 1, sizeof(*s->rets));
		if (s->closed) {
			s->waiting.ret = -ENOTCONN;
		} else {
			ctx->tops->exec(ctx, &s->waiting);
			s->closed = true;
		}
		s->rets[s->n_rets++] = s->waiting;
	}
	if (s->closed) {
		ev_free_list(w, &s->sf.inbox);   /* the transport has let the flow go */
		rets_to_home(ctx, s->rets, s->n_rets);
		flow_forget(w, s);
		return;
	}
	if (!fp_shuf_complete(ctx->run->sh, &s->sf, ctx->now_us) && (later || prompt))
		fp_shuf_kick(ctx->run->sh, &s->sf, ctx->now_us);   /* they are its news */
}

/* Run @s's batch on this worker: its conditions and its returns to the handler. At home
 * the calls execute at once; a thief copies them into the flow and sends it home. */
static void run_flow(struct fp_ctx *ctx, struct rt_steal_wk *w, struct rt_sflow *s)
{
	unsigned n = 0, n_rets = s->n_rets;
	bool home = s->sf.home == ctx->worker;

	rt_reserve((void **)&w->conds, &w->cap_conds, s->sf.batch.n, sizeof(*w->conds));
	for (struct fp_shuf_ev *e = s->sf.batch.head; e; e = e->next)
		w->conds[n++] = fp_container_of(e, struct rt_sev, link)->c;
	s->n_rets = 0;
	s->prompt = false;
	w->running = s;
	if (ctx->run->ipi) {   /* the one place an interrupt may cut in (ipi.c), here or stolen */
		rt_ipi_enter(ctx);
		ctx->run->app->handle(ctx, w->conds, n, s->rets, n_rets);
		rt_ipi_leave(ctx);
	} else {
		ctx->run->app->handle(ctx, w->conds, n, s->rets, n_rets);
	}
	w->running = NULL;
	ctx->stats->conds += n;
	if (home) {
		w->local_runs++;
		ctx->stats->sched_local++;
		exec_flow_calls(ctx, s, ctx->calls, ctx->n_calls);
		ctx->n_calls = 0;
		finish(ctx, w, s);
		return;
	}
	/* A thief: the calls, with copies of their iovecs, go home with the flow. */
	unsigned n_iov = 0;
	for (unsigned i = 0; i < ctx->n_calls; i++)
		n_iov += ctx->calls[i].iov ? ctx->calls[i].iovcnt : 0;
	rt_reserve((void **)&s->calls, &s->cap_calls, ctx->n_calls, sizeof(*s->calls));
	rt_reserve((void **)&s->iov, &s->cap_iov, n_iov, sizeof(*s->iov));
	s->n_iov = 0;
	for (unsigned i = 0; i < ctx->n_calls; i++) {
		struct fp_call *c = &s->calls[i];

		*c = ctx->calls[i];
		if (c->iov) {
			memcpy(s->iov + s->n_iov, c->iov, c->iovcnt * sizeof(*c->iov));
			c->iov = s->iov + s->n_iov;
			s->n_iov += c->iovcnt;
		}
	}
	s->n_calls = ctx->n_calls;
	/* room for their returns, so a home interrupted (--notify ipi) need not allocate */
	rt_reserve((void **)&s->rets, &s->cap_rets, s->n_calls, sizeof(*s->rets));
	ctx->n_calls = 0;
	w->stolen_runs++;
	ctx->stats->sched_stolen++;
	fp_shuf_ran(ctx->run->sh, ctx->worker, &s->sf);
	if (ctx->run->steer)   /* a home that sleeps (--burst --idle) must run the calls */
		rt_steer_kick(ctx->run->steer, 1ull << s->sf.home);
	if (ctx->run->ipi)     /* a home busy in a long handler runs them at once */
		rt_ipi_returned(ctx, s->sf.home);
}

/* Home: the calls of a flow a thief ran. */
static void come_home(struct fp_ctx *ctx, struct rt_steal_wk *w, struct rt_sflow *s)
{
	exec_flow_calls(ctx, s, s->calls, s->n_calls);
	w->remote_calls += s->n_calls;
	ctx->stats->sched_remote_calls += s->n_calls;
	s->n_calls = 0;
	finish(ctx, w, s);
}

/* ---- the round ---- */

/* Whether conds[@i]'s flow was KNOCKed earlier in this round's conditions. */
static bool knocked_now(const struct fp_ctx *ctx, unsigned i)
{
	for (unsigned j = 0; j < i; j++)
		if (ctx->conds[j].type == FP_COND_KNOCK && ctx->conds[j].flow == ctx->conds[i].flow)
			return true;
	return false;
}

/* --burst: @sf was taken from its home's queue: publish how far that queue has been
 * taken (its head), keeping the largest value any taker stored. */
static void note_taken(struct rt_run *run, const struct fp_shuf_flow *sf)
{
	struct fp_rt_alloc_q *q;
	uint64_t head, cur;

	if (!run->alloc_q)
		return;
	q = &run->alloc_q[sf->home];
	head = __atomic_load_n(&run->sh->wk[sf->home].ready.head, __ATOMIC_ACQUIRE);
	cur = __atomic_load_n(&q->taken, __ATOMIC_RELAXED);
	while (cur < head && !__atomic_compare_exchange_n(&q->taken, &cur, head, true,
							  __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

unsigned rt_steal_round(struct fp_ctx *ctx)
{
	struct rt_run *run = ctx->run;
	struct fp_shuf *sh = run->sh;
	unsigned me = ctx->worker, done = 0, keep = 0;
	struct rt_steal_wk *w = &run->swk[me];
	struct fp_shuf_flow *sf;

	/* 1. flows that came home: their calls, here (those an interrupt left first) */
	for (struct rt_sflow *s; (s = w->deferred); done++) {
		w->deferred = s->dnext;
		come_home(ctx, w, s);
	}
	for (; (sf = fp_shuf_returned(sh, me)); done++)
		come_home(ctx, w, SFLOW(sf));
	bool came_home = done > 0;
	/* 2. conditions of established flows to their flows; a flow KNOCKed in this round is
	 * not accepted yet (its conditions carry the listener's cookie): they stay with
	 * the KNOCK, in order, in the ordinary round. Those of a flow step 1 closed are gone
	 * (the transport's close forgets them, rt_conds_forget): posted, they would reach
	 * a fresh record and a later batch, after the CLOSE's return let the application
	 * free the cookie they carry */
	bool knocks = false;

	for (unsigned i = 0; i < ctx->n_conds && !knocks; i++)
		knocks = ctx->conds[i].type == FP_COND_KNOCK;
	for (unsigned i = 0; i < ctx->n_conds; i++) {
		struct fp_cond *c = &ctx->conds[i];
		struct rt_sflow *s = flow_cond(c->type) && !(knocks && knocked_now(ctx, i)) ?
				     flow_get(run, w, me, c->flow) : NULL;

		if (s)
			post(ctx, w, s, c);
		else
			ctx->conds[keep++] = *c;
	}
	ctx->n_conds = keep;
	if (run->alloc_q)   /* --burst: the allocator's congestion signal (alloc.h) */
		__atomic_store_n(&run->alloc_q[me].put, sh->wk[me].ready.tail, __ATOMIC_RELEASE);
	/* 3. the rest: an ordinary round */
	done += rt_ctx_round_plain(ctx) + (keep ? 1 : 0);
	/* 4. own ready flows; what the round sent leaves before a handler once handlers have
	 * run RT_STEAL_FLUSH_NS since it last left, and the replies of flows that came home
	 * leave before the first (their thieves already spent their service time) */
	uint64_t t = rt_cycles(), until = t + fp_ns_to_cycles(RT_STEAL_LOCAL_NS);
	uint64_t gap = fp_ns_to_cycles(RT_STEAL_FLUSH_NS), sent_at = came_home ? t - gap : t;

	/* one clock read per flow: @t is when the previous handler returned */
	for (unsigned k = 0; !run->cfg->steal_force && k < RT_STEAL_LOCAL_MAX &&
	     (!k || (t = rt_cycles()) < until) && (sf = fp_shuf_take(sh, me)); k++, done++) {
		note_taken(run, sf);
		if (ctx->tops->flush && t - sent_at >= gap) {
			ctx->tops->flush(ctx);
			sent_at = t;
		}
		run_flow(ctx, w, SFLOW(sf));
	}
	/* 5. nothing else: one of another worker's (not once the run stops: its home may be
	 * past its loop already; not by a parked burstable worker) */
	if (!done && !ctx->no_steal && !rt_ctx_stopping(ctx)) {
		if ((sf = fp_shuf_steal(sh, me))) {
			note_taken(run, sf);
			run_flow(ctx, w, SFLOW(sf));
			done++;
		} else if (run->ipi) {   /* ZygOS's idle loop: interrupt a busy home (ipi.c) */
			rt_ipi_idle(ctx);
		}
	}
	return done;
}

/*
 * --sched steal for an application with its own hooks (fp_app.steal: tsock's user-level
 * threads): an ordinary round, the home's ready-queue counters published for the
 * allocator (--burst), and, when the round did nothing else, one piece of another
 * worker's work run here (not once the run stops, nor by a parked burstable worker).
 */
unsigned rt_app_steal_round(struct fp_ctx *ctx)
{
	struct rt_run *run = ctx->run;
	unsigned done = rt_ctx_round_plain(ctx);

	if (run->alloc_q) {
		uint64_t put, taken;

		run->app->ready(ctx, &put, &taken);
		__atomic_store_n(&run->alloc_q[ctx->worker].taken, taken, __ATOMIC_RELEASE);
		__atomic_store_n(&run->alloc_q[ctx->worker].put, put, __ATOMIC_RELEASE);
	}
	if (!done && !ctx->no_steal && !rt_ctx_stopping(ctx) && run->app->steal(ctx)) {
		ctx->stats->sched_stolen++;
		done++;
		/* the thread went home: its home may sleep (--burst --idle), wake it (which
		 * home is the application's to know: every other home, those asleep; not
		 * the parked burstable workers, which have no work to come back) */
		uint64_t homes = run->cfg->n_burst ? (1ull << run->burst_first) - 1 : ~0ull;

		if (run->steer)
			rt_steer_kick(run->steer, homes & ~(1ull << ctx->worker));
	}
	return done;
}

/* Whether this worker has work of its own that no frame announces: flows or threads that
 * came back from a thief, own ready flows. Before a home sleeps (--burst with an --idle
 * policy), after announcing it would (rt_steer_sleep_prepare): a thief returning work
 * either sees it asleep and wakes it, or this sees the work. */
bool rt_steal_home_work(struct fp_ctx *ctx)
{
	const struct fp_shuf *sh = ctx->run->sh;

	if (sh)
		return fp_shuf_has_returns(sh, ctx->worker) ||
		       fp_shuf_ready_count(sh, ctx->worker) || ctx->run->swk[ctx->worker].deferred;
	return ctx->run->app_steal && ctx->run->app->work_pending(ctx, false);
}

/* Whether a round has scheduler work though the transport brought nothing: flows that came
 * home, own ready flows left for later, or (a worker that may steal) another's ready
 * flows. Hints, racy by design: a miss is seen at the next round. */
bool rt_steal_pending(const struct fp_ctx *ctx)
{
	const struct fp_shuf *sh = ctx->run->sh;
	unsigned me = ctx->worker;

	return fp_shuf_has_returns(sh, me) || fp_shuf_ready_count(sh, me) ||
	       ctx->run->swk[me].deferred || (!ctx->no_steal && fp_shuf_any_ready(sh, me));
}

/*
 * A call on an established flow queued outside the flow's batches: in an ordinary round
 * (a KNOCK's ACCEPT, what accept() wrote), a timer or a poll, on the home. It executes
 * here, but its return must not reach the application beside a batch of the same flow
 * that a thief runs meanwhile: it goes with the flow, to its next batch (an idle flow
 * becomes ready for it, with no event), and so reaches the handler in order with the
 * flow's own returns and conditions, on one worker at a time. A CLOSE or ABORT for a
 * flow that is queued or running waits until it is done, and its return goes up after
 * the batch's; on an idle one it runs at once and the flow's returns still held go up
 * with the home's next round, before its own.
 * RT_OUT_PLAIN: not this layer's (no record, or no flow call): execute it as usual.
 */
enum rt_out rt_steal_exec_outside(struct fp_ctx *ctx, struct fp_call *c)
{
	struct rt_steal_wk *w = &ctx->run->swk[ctx->worker];
	struct rt_sflow *s;

	switch (c->type) {
	case FP_CALL_ACCEPT: case FP_CALL_SENDV: case FP_CALL_RECV_DONE:
	case FP_CALL_SHUTDOWN:
		/* a record made now, if there is room: a condition of the flow's next round
		 * would be posted to it before this return went up */
		if (!(s = flow_get(ctx->run, w, ctx->worker, c->flow)))
			return RT_OUT_PLAIN;
		ctx->tops->exec(ctx, c);
		if (s->sf.state == FP_SHUF_IDLE) {
			rt_reserve((void **)&s->rets, &s->cap_rets, s->n_rets + 1, sizeof(*s->rets));
			s->rets[s->n_rets++] = *c;
			/* a RECV_DONE's return (always 0) is nobody's news: it rides with the
			 * flow's next batch, or goes up with its close. So the release of a
			 * connection (its recv_done, then its CLOSE) finds the flow idle and
			 * closes at once, not after a batch of its own (which a run that
			 * stops never gives it) */
			if (c->type != FP_CALL_RECV_DONE)
				fp_shuf_kick(ctx->run->sh, &s->sf, ctx->now_us);
		} else {
			rt_reserve((void **)&s->later, &s->cap_later, s->n_later + 1,
				   sizeof(*s->later));
			s->later[s->n_later++] = *c;
		}
		return RT_OUT_FLOW;
	case FP_CALL_CLOSE: case FP_CALL_ABORT:
		break;
	default:
		return RT_OUT_PLAIN;
	}
	if (!(s = flow_find(w, c->flow)))
		return RT_OUT_PLAIN;
	if (s->sf.state == FP_SHUF_IDLE) {
		ctx->tops->exec(ctx, c);
		s->closed = true;
		ev_free_list(w, &s->sf.inbox);
		rets_to_home(ctx, s->rets, s->n_rets);
		flow_forget(w, s);
		return RT_OUT_DONE;
	}
	/* Queued or running: the close waits, and its return goes up after the batch's
	 * (finish), with the flow's last ones. Not at once: the application would learn
	 * that its cookie is no longer referenced while the flow's batch still names it
	 * (and a thief's with it). A second close while one waits is refused, in order. */
	if (!s->close_waiting) {
		s->close_waiting = true;
		s->waiting = *c;
	} else {
		c->ret = -ENOTCONN;
		rt_reserve((void **)&s->later, &s->cap_later, s->n_later + 1, sizeof(*s->later));
		s->later[s->n_later++] = *c;
	}
	return RT_OUT_FLOW;
}

void fp_flow_returns_soon(struct fp_ctx *ctx, const struct fp_flow *f)
{
	struct rt_steal_wk *w;
	struct rt_sflow *s;

	if (!ctx->run->sh)
		return;
	w = &ctx->run->swk[ctx->worker];
	if ((s = w->running)) {          /* in a batch: its returns, when it is done */
		if (s->flow == f)
			s->prompt = true;
	} else if ((s = flow_find(w, f)) && s->n_rets) {   /* at home: those it holds */
		fp_shuf_kick(ctx->run->sh, &s->sf, ctx->now_us);
	}
}

bool fp_flow_busy(struct fp_ctx *ctx, const struct fp_flow *f)
{
	struct rt_sflow *s;

	if (!ctx->run->sh || !f || !(s = flow_find(&ctx->run->swk[ctx->worker], f)))
		return false;
	return s->sf.state != FP_SHUF_IDLE;
}

/* ---- --notify ipi: inside the signal handler (ipi.c) ---- */

/* Whether @s's returned calls can run inside an interrupt: nothing closes or has closed
 * it (the transport would free the conn, finish() the flow), its returns fit in place
 * (the thief made the room), and the transport has room for what they send. */
static bool irq_runnable(struct fp_ctx *ctx, const struct rt_sflow *s)
{
	if (s->closed || s->close_waiting || s->n_later ||
	    s->n_rets + s->n_calls > s->cap_rets ||
	    ctx->run->ipi_hold)
		return false;
	for (unsigned i = 0; i < s->n_calls; i++)
		if (closes(&s->calls[i]))
			return false;
	return ctx->tops->irq_fits(ctx, s->calls, s->n_calls);
}

void rt_steal_irq_returns(struct fp_ctx *ctx)
{
	struct rt_steal_wk *w = &ctx->run->swk[ctx->worker];
	struct fp_shuf_flow *sf;

	while ((sf = fp_shuf_returned(ctx->run->sh, ctx->worker))) {
		struct rt_sflow *s = SFLOW(sf);

		if (!irq_runnable(ctx, s)) {   /* the loop's step 1 takes it */
			s->dnext = w->deferred;
			w->deferred = s;
			ctx->stats->ipi_deferred++;
			continue;
		}
		ctx->stats->ipi_calls += s->n_calls;
		come_home(ctx, w, s);
	}
}

bool rt_steal_irq_post(struct fp_ctx *ctx)
{
	struct rt_steal_wk *w = &ctx->run->swk[ctx->worker];
	unsigned i;

	for (i = 0; i < ctx->n_conds; i++) {
		const struct fp_cond *c = &ctx->conds[i];
		struct rt_sflow *s;

		/* a flow the table does not know yet would need a record: the loop's */
		if (!flow_cond(c->type) || !w->free_ev || !(s = flow_find(w, c->flow)))
			break;
		post(ctx, w, s, c);
	}
	memmove(ctx->conds, ctx->conds + i, (ctx->n_conds - i) * sizeof(*ctx->conds));
	ctx->n_conds -= i;
	return ctx->n_conds > 0;
}

void rt_steal_irq_prepare(struct fp_ctx *ctx, unsigned events)
{
	struct rt_steal_wk *w = &ctx->run->swk[ctx->worker];

	while (w->n_free_ev < events) {
		struct rt_sev *ev = malloc(sizeof(*ev));

		if (!ev) {
			log_err("rt: out of memory for a condition");
			abort();
		}
		ev->fnext = w->free_ev;
		w->free_ev = ev;
		w->n_free_ev++;
	}
}

/* Under --sched steal a worker that left its loop waits for every worker still in its
 * loop before the application's fini frees its connections: another worker may be running
 * one of them until it, too, has left. (Once the run stops nobody steals, so a worker that
 * enters its loop late touches only its own flows.) With the application's own stealing
 * (app_steal) the same holds for its work: a thread another worker runs goes home before
 * that worker leaves its loop. */
void rt_steal_enter(struct rt_run *run)
{
	if (run->sh || run->app_steal)
		atomic_fetch_add(&run->steal_in_loop, 1);
}

void rt_steal_leave(struct rt_run *run)
{
	if (!run->sh && !run->app_steal)
		return;
	atomic_fetch_sub(&run->steal_in_loop, 1);
	while (atomic_load(&run->steal_in_loop))
		__builtin_ia32_pause();
}

/* ---- setup and teardown ---- */

int rt_steal_setup(struct rt_run *run)
{
	unsigned n = run->cfg->n_workers;
	uint32_t max = run->cfg->stack.max_conns ? run->cfg->stack.max_conns : 65536;
	int rc;

	run->sh = calloc(1, sizeof(*run->sh));
	run->swk = aligned_alloc(FP_CACHE_LINE, n * sizeof(*run->swk));
	if (!run->sh || !run->swk) {
		rt_steal_teardown(run);
		return -ENOMEM;
	}
	memset(run->swk, 0, n * sizeof(*run->swk));
	run->steal_max_flows = max;
	rc = fp_shuf_init(run->sh, n, max, run->cfg->seed ? run->cfg->seed : 1);
	if (rc) {
		free(run->sh);
		run->sh = NULL;
		rt_steal_teardown(run);
		return rc;
	}
	for (unsigned i = 0; i < n; i++) {
		struct rt_steal_wk *w = &run->swk[i];

		w->mask = 1023;
		w->tab = calloc(w->mask + 1, sizeof(*w->tab));
		if (!w->tab) {
			rt_steal_teardown(run);
			return -ENOMEM;
		}
	}
	return 0;
}

/* After every worker has stopped: what is left in the tables and free lists. */
void rt_steal_teardown(struct rt_run *run)
{
	for (unsigned i = 0; run->swk && i < run->cfg->n_workers; i++) {
		struct rt_steal_wk *w = &run->swk[i];

		for (unsigned b = 0; w->tab && b <= w->mask; b++)
			while (w->tab[b]) {
				struct rt_sflow *s = w->tab[b];

				ev_free_list(w, &s->sf.batch);
				ev_free_list(w, &s->sf.inbox);
				flow_forget(w, s);
			}
		while (w->free_ev) {
			struct rt_sev *ev = w->free_ev;

			w->free_ev = ev->fnext;
			free(ev);
		}
		free(w->tab);
		free(w->conds);
	}
	free(run->swk);
	run->swk = NULL;
	if (run->sh) {
		fp_shuf_fini(run->sh);
		free(run->sh);
		run->sh = NULL;
	}
}

void rt_steal_counts(const struct rt_run *run, unsigned worker, uint64_t *stolen_runs,
		     uint64_t *local_runs, uint64_t *remote_calls)
{
	const struct rt_steal_wk *w = &run->swk[worker];

	*stolen_runs = w->stolen_runs;
	*local_runs = w->local_runs;
	*remote_calls = w->remote_calls;
}
