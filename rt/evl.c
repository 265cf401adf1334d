/* evl.c: the event-callback layer over the native API (libix): rounds, conditions, connection lifetime. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/heap.h>
#include <flowplane/log.h>

#include "evl_defs.h"

/*
 * How a round goes (the worker calls evl_handle once per round, see api.c):
 *
 *   1. returns of last round's calls: a SENDV's count advances that connection's output
 *      (IX: sendv returns what the window took, the rest is offered again later) and may
 *      let held input go on (evl_io.c); a CONNECT error ends the connect; a LISTEN error
 *      stops the run;
 *   2. conditions, in order: KNOCK, CONNECTED, RECV (read callbacks), SENT, EOF, DEAD,
 *      UDP_RECV;
 *   3. the flush: every connection touched this round (the dirty list) is shown the input
 *      that waited for room, gets its recv_done, one sendv over its pending chunks (libix
 *      coalesces a round's writes into one sendv), and its close once the output has
 *      drained;
 *   4. the reap: connections released and with no call in flight are freed.
 *
 * Outside the handler (a timer, init, fini) the same flush runs at once for what the
 * application touched, and the runtime executes the calls it queued right after that timer
 * pass; a sendv queued and not yet executed is extended by later writes of the pass, so a
 * pass's writes leave together.
 *
 * A connection's cookie is its own address, so it must outlive every call that carries
 * it: @inflight counts those calls, and a released connection is freed only in step 4 of
 * a round where it reached zero, after that round's conditions (which may still name it)
 * have been seen. After its CLOSE/ABORT has executed the transport names it no more.
 * A listener's cookie is its address with bit 0 set: until the ACCEPT executes, the
 * conditions of a new flow (a RECV behind the handshake in the same round) still carry
 * it, and are matched to their connection by flow (evl_knocked).
 *
 * When the run stops, fini resets every connection still open (evl_abort_all): the stack
 * goes away with the worker, and a peer must not be left with a connection established
 * forever. The worker transmits those RSTs before it destroys the stack (worker.c).
 */

#define EVL_LISTENER_TAG  1u                      /* bit 0 of a listener's cookie */
#define EVL_TRIM_BYTES    (8u << 20)              /* freed output chunks between trims */

/* ---- connections ---- */

static struct fp_evl_conn *evl_conn_new(struct fp_evl *evl, enum evl_state state)
{
	struct fp_evl_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->evl = c->home = evl;
	c->state = (uint8_t)state;
	c->born = evl->round;
	c->next = evl->conns;
	if (evl->conns)
		evl->conns->prev = c;
	evl->conns = c;
	evl->n_conns++;
	return c;
}

static void evl_conn_free(struct fp_evl_conn *c)
{
	struct fp_evl *evl = c->home;

	evl_conn_io_free(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		evl->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	evl->n_conns--;
	free(c);
}

void evl_mark_dirty(struct fp_evl_conn *c)
{
	if (c->dirty)
		return;
	c->dirty = true;
	c->dirty_next = c->evl->dirty;
	c->evl->dirty = c;
}

/* Free @c at the end of this round if nothing in flight names it any more. */
static void evl_maybe_reap(struct fp_evl_conn *c)
{
	/* not by a thief: the return of a close it queued comes home (steal.c), so a
	 * connection it runs is never released with nothing in flight */
	if (c->state != EVL_RELEASED || c->inflight || c->reaping || c->evl != c->home)
		return;
	c->reaping = true;
	c->reap_next = c->evl->reap;
	c->evl->reap = c;
}

/* Hand @c's flow back with CLOSE or ABORT (after the recv_done it is owed, held input
 * included). The cookie keeps @c alive until that call's return has been seen. */
static void evl_release(struct fp_evl_conn *c, uint16_t type)
{
	struct fp_ctx *ctx = c->evl->ctx;

	if (c->state == EVL_RELEASED)
		return;
	evl_rx_drop(c);
	if (c->flow) {
		if (c->rx_done)
			fp_recv_done(ctx, c->flow, c->rx_done);
		fp_flow_call(ctx, type, c->flow, (uint64_t)(uintptr_t)c);
		c->inflight++;
	}
	c->rx_done = 0;
	c->flow = NULL;
	c->state = EVL_RELEASED;
	evl_maybe_reap(c);
}

void evl_fail(struct fp_evl_conn *c, int status, uint16_t type)
{
	struct fp_evl *evl = c->evl;

	if (c->state == EVL_RELEASED)
		return;
	evl_release(c, type);
	if (!c->app_gone) {
		c->app_gone = true;
		if (evl->ops->closed)
			evl->ops->closed(c, status);
	}
}

/* --sched steal: whether something waits for the return of @c's sendv, so that it must
 * come without a new event (fp_flow_returns_soon): a close behind the output, output
 * behind the sendv, input held back for room, or (an application told when the output
 * drains) input left unread, perhaps until then. */
static bool evl_waits_for_sendv(const struct fp_evl_conn *c)
{
	return c->closing || c->pending > c->offered || c->out_full || c->rx_paused ||
	       c->hold_n || (c->evl->ops->drained && c->rx_len);
}

/* Step 3 for one connection: waiting input, recv_done, sendv, close when drained. */
static void evl_flush_conn(struct fp_evl_conn *c)
{
	if (c->state != EVL_OPEN)
		return;
	if (c->rx_again) {
		c->rx_again = false;
		c->resumed_at = c->evl->flushes;
		evl_rx_resume(c);
		if (c->state != EVL_OPEN)
			return;
	}
	if (c->rx_done) {
		fp_recv_done(c->evl->ctx, c->flow, c->rx_done);
		c->rx_done = 0;
	}
	evl_send(c);
	if (c->closing && !c->pending && !c->sendv_inflight)
		evl_release(c, FP_CALL_CLOSE);
	else if (c->home->steal && c->sendv_inflight && evl_waits_for_sendv(c))
		fp_flow_returns_soon(c->evl->ctx, c->flow);
}

void evl_flush_dirty(struct fp_evl *evl)
{
	bool in_handle = evl->in_handle;
	struct fp_evl_conn *c;

	/* Outside the handler, an empty call array means nothing points into the arena. */
	if (!in_handle && evl->ctx->n_calls == 0)
		evl_arena_reset(evl);
	/* Callbacks run from here (read, drained, closed) only mark what they touch: the
	 * loop flushes it, so nothing here recurses. */
	evl->in_handle = true;
	evl->flushing = true;
	evl->flushes++;
	while ((c = evl->dirty)) {
		evl->dirty = c->dirty_next;
		c->dirty = false;
		evl_flush_conn(c);
	}
	evl->flushing = false;
	evl->in_handle = in_handle;
}

/* ---- returns ---- */

/*
 * --sched steal: @c's batch runs on this worker (a thief) though it lives on another.
 * For the batch, what it touches of a worker is this one's (c->evl: the calls it queues,
 * which steal.c sends home, the dirty list, output chunks, the arena); what it is on
 * stays its home's (c->home: the connection list, the reap, the output total). The
 * batch's end gives it back (evl_visits_end). Only one worker runs a flow's batch at a
 * time, and its home touches it outside them only while fp_flow_busy() says it may.
 */
static void evl_visit(struct fp_evl *evl, struct fp_evl_conn *c)
{
	c->evl = evl;
	c->resumed_at = 0;   /* a count of this evl's flushes, not of its home's */
	c->visit_next = evl->visiting;
	evl->visiting = c;
}

static void evl_visits_end(struct fp_evl *evl)
{
	struct fp_evl_conn *c;

	while ((c = evl->visiting)) {
		evl->visiting = c->visit_next;
		c->evl = c->home;
		c->resumed_at = 0;
	}
}

static void evl_ret_conn(struct fp_evl *evl, const struct fp_call *r)
{
	struct fp_evl_conn *c = (struct fp_evl_conn *)(uintptr_t)r->cookie;

	if (!c)
		return;
	if (c->evl != evl)
		evl_visit(evl, c);
	assert(c->inflight > 0);   /* one return per call: a second would come after the free */
	c->inflight--;
	switch (r->type) {
	case FP_CALL_SENDV:
		evl_ret_sendv(c, r->ret);
		break;
	case FP_CALL_CONNECT:
		if (r->ret < 0 && c->state == EVL_CONNECTING) {
			c->state = EVL_RELEASED;
			if (!c->app_gone) {
				c->app_gone = true;
				if (evl->ops->connected)
					evl->ops->connected(c, (int)r->ret);
			}
		}
		break;
	case FP_CALL_ACCEPT:
		if (r->ret < 0)
			evl_fail(c, (int)r->ret, FP_CALL_CLOSE);
		break;
	default:                        /* CLOSE, ABORT, SHUTDOWN */
		break;
	}
	evl_maybe_reap(c);
}

static void evl_rets(struct fp_evl *evl, const struct fp_call *rets, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		const struct fp_call *r = &rets[i];

		switch (r->type) {
		case FP_CALL_LISTEN:
		case FP_CALL_UDP_BIND:
			if (r->ret < 0) {
				log_err("evl: %s on port %u failed: %s",
					r->type == FP_CALL_LISTEN ? "listen" : "udp bind",
					r->port, strerror((int)-r->ret));
				fp_ctx_stop(evl->ctx, (int)r->ret);
			}
			break;
		case FP_CALL_UDP_SEND:
			if (r->ret < 0 && !(evl->udp_send_errors++ & 1023))
				log_warn("evl: udp send to port %u failed: %s (%llu so far)",
					 r->rport, strerror((int)-r->ret),
					 (unsigned long long)evl->udp_send_errors);
			break;
		case FP_CALL_UNLISTEN:
		case FP_CALL_RECV_DONE:
		case FP_CALL_UDP_DONE:
			break;
		default:
			evl_ret_conn(evl, r);
			break;
		}
	}
}

/* ---- conditions ---- */

static void evl_knock(struct fp_evl *evl, const struct fp_cond *k)
{
	const struct evl_listener *l =
		(const struct evl_listener *)(uintptr_t)(k->cookie & ~(uint64_t)EVL_LISTENER_TAG);
	struct fp_evl_conn *c = evl_conn_new(evl, EVL_OPEN);

	if (!c) {
		log_warn("evl: out of memory for a connection; refused");
		fp_close(evl->ctx, k->flow);
		return;
	}
	c->flow = c->busy_flow = k->flow;
	c->raddr = k->raddr;
	c->rport = k->rport;
	c->user = evl->ops->accept ? evl->ops->accept(c, l ? l->larg : NULL) : NULL;
	if (!c->user) {
		c->app_gone = true;
		evl_release(c, FP_CALL_CLOSE);
		return;
	}
	if (c->state == EVL_RELEASED)   /* aborted from accept() */
		return;
	/* accept() may have written or closed already (@c is on the dirty list then): the
	 * flush comes after the accept. */
	fp_accept(evl->ctx, k->flow, (uint64_t)(uintptr_t)c);
	c->inflight++;
}

static void evl_connected(struct fp_evl *evl, struct fp_evl_conn *c, const struct fp_cond *k)
{
	if (c->state != EVL_CONNECTING) {
		/* The CONNECT call failed already (this round): a flow despite that goes back. */
		if (c->state == EVL_RELEASED && k->status == 0 && k->flow)
			fp_close(evl->ctx, k->flow);
		return;
	}
	c->flow = c->busy_flow = k->flow;
	if (k->status != 0) {
		if (c->flow)
			c->state = EVL_OPEN;    /* so that release closes the dead flow */
		evl_release(c, FP_CALL_CLOSE);
		if (!c->app_gone) {
			c->app_gone = true;
			if (evl->ops->connected)
				evl->ops->connected(c, k->status);
		}
		return;
	}
	c->state = EVL_OPEN;
	c->raddr = k->raddr ? k->raddr : c->raddr;
	if (c->abort_due) {
		evl_release(c, FP_CALL_ABORT);
		return;
	}
	if (!c->app_gone && evl->ops->connected)
		evl->ops->connected(c, 0);
	evl_mark_dirty(c);
}

void evl_eof(struct fp_evl_conn *c)
{
	if (c->state != EVL_OPEN)
		return;
	if (!c->app_gone && evl_rx_waiting(c)) {
		c->eof_due = true;      /* after the input held back (evl_rx_resume) */
		return;
	}
	evl_rx_drop(c);
	if (!c->app_gone && c->evl->ops->closed)
		c->evl->ops->closed(c, 0);  /* its writes are still sent */
	if (c->evl->ops->half_close && !c->app_gone)
		return;   /* still the application's: it writes on, then closes */
	c->app_gone = true;
	c->closing = true;
	evl_mark_dirty(c);
}

/*
 * A flow KNOCKed this round whose ACCEPT has not executed yet: its conditions still carry
 * the listener's cookie (a RECV right behind the handshake, in the same batch). They are
 * found by flow among this round's new connections, which head the list. NULL for a flow
 * refused or released already: nothing more is owed to it.
 */
static struct fp_evl_conn *evl_knocked(struct fp_evl *evl, const struct fp_flow *flow)
{
	for (struct fp_evl_conn *c = evl->conns; c && c->born == evl->round; c = c->next)
		if (c->flow == flow)
			return c;
	return NULL;
}

static void evl_cond(struct fp_evl *evl, const struct fp_cond *k)
{
	struct fp_evl_conn *c = (struct fp_evl_conn *)(uintptr_t)k->cookie;

	switch (k->type) {
	case FP_COND_KNOCK:
		evl_knock(evl, k);
		return;
	case FP_COND_UDP_RECV:
		if (evl->ops->udp_recv)
			evl->ops->udp_recv(evl, k->lport, k->raddr, k->rport, k->data, k->len);
		fp_udp_done(evl->ctx, k->m);
		return;
	default:
		break;
	}
	if (k->cookie & EVL_LISTENER_TAG) {
		if (!(c = evl_knocked(evl, k->flow)))
			return;
	} else if (!c) {   /* a flow we never took: give it back rather than leak its buffers */
		if (k->type == FP_COND_RECV)
			fp_recv_done(evl->ctx, k->flow, k->len);
		else if (k->type == FP_COND_DEAD)
			fp_close(evl->ctx, k->flow);
		return;
	}
	if (c->evl != evl)
		evl_visit(evl, c);
	switch (k->type) {
	case FP_COND_CONNECTED:
		evl_connected(evl, c, k);
		break;
	case FP_COND_RECV:
		if (c->state == EVL_OPEN)
			evl_recv(c, k);
		break;
	case FP_COND_SENT:
		c->blocked = false;
		if (c->state == EVL_OPEN && (c->pending || c->closing))
			evl_mark_dirty(c);
		break;
	case FP_COND_EOF:
		evl_eof(c);
		break;
	case FP_COND_DEAD:
		evl_fail(c, k->status ? k->status : -ECONNRESET, FP_CALL_CLOSE);
		break;
	default:
		break;
	}
}

/* ---- the app behind fp_evl_app ---- */

/* Free everything @evl holds (connections, chunks, listeners, arena) and @evl itself. */
static void evl_destroy(struct fp_evl *evl)
{
	struct evl_listener *l;

	while (evl->conns)
		evl_conn_free(evl->conns);
	evl_chunks_free(evl);
	while ((l = evl->listeners)) {
		evl->listeners = l->next;
		free(l);
	}
	evl_arena_free(evl);
	fp_ctx_set_user(evl->ctx, NULL);
	free(evl);
}

static int evl_init(struct fp_ctx *ctx, void *arg)
{
	const struct fp_evl_ops *ops = ctx->run->app->layer;
	size_t size = (sizeof(struct fp_evl) + FP_CACHE_LINE - 1) & ~(size_t)(FP_CACHE_LINE - 1);
	struct fp_evl *evl = aligned_alloc(FP_CACHE_LINE, size);
	size_t rx_max;
	int rc;

	if (!evl)
		return -ENOMEM;
	memset(evl, 0, sizeof(*evl));
	evl->ctx = ctx;
	evl->ops = ops;
	evl->arg = arg;
	evl->max_pending = ops->max_pending ? ops->max_pending : EVL_DEFAULT_MAX_PENDING;
	rx_max = ops->max_unread ? ops->max_unread : evl->max_pending;
	evl->rx_max = rx_max < EVL_RX_CAP ? (uint32_t)rx_max : EVL_RX_CAP;
	evl->out_budget = ops->max_total_pending / (ctx->n_workers ? ctx->n_workers : 1);
	evl->steal = ctx->run->sh != NULL;
	fp_ctx_set_user(ctx, evl);
	rc = ops->init ? ops->init(evl, arg) : 0;
	if (rc) {
		/* Like a constructor: ops->fini is not called after a failed ops->init. Calls
		 * it queued carry cookies into what is freed here; with no fp_evl left the
		 * handler ignores their returns. */
		evl_destroy(evl);
		return rc;
	}
	return 0;
}

static void evl_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
		       const struct fp_call *rets, unsigned n_rets)
{
	struct fp_evl *evl = fp_ctx_user(ctx);
	struct fp_evl_conn *c;

	if (!evl)
		return;
	/* The calls of earlier rounds have executed: nothing points into the arena. */
	if (ctx->n_calls == 0)
		evl_arena_reset(evl);
	evl->in_handle = true;
	evl->round++;
	evl_rets(evl, rets, n_rets);
	for (unsigned i = 0; i < n; i++)
		evl_cond(evl, &conds[i]);
	evl_flush_dirty(evl);
	evl->in_handle = false;
	if (evl->visiting)
		evl_visits_end(evl);

	while ((c = evl->reap)) {
		evl->reap = c->reap_next;
		c->reaping = false;
		if (c->state == EVL_RELEASED && !c->inflight)
			evl_conn_free(c);
	}
	/* Output that drained goes back to the system, not only to malloc's free lists
	 * (they keep what was freed: a burst of slow readers would hold its peak forever):
	 * every 8 MiB freed, and whatever was freed once no output is left. */
	if (evl->freed_since_trim >= EVL_TRIM_BYTES ||
	    (evl->freed_since_trim && !evl_out_total(evl))) {
		evl->freed_since_trim = 0;
		fp_heap_trim();
	}
}

/*
 * The run stopped: reset every connection still open, as Linux does for a process that
 * exits with unread data (RFC 9293 §3.10.4: ABORT). Output not yet taken is dropped: the
 * stack goes away with the worker and could not finish a graceful close. A connection
 * still connecting has no flow yet; the stack forgets it.
 */
static void evl_abort_all(struct fp_evl *evl)
{
	for (struct fp_evl_conn *c = evl->conns; c; c = c->next) {
		c->app_gone = true;
		if (c->state == EVL_OPEN)
			evl_release(c, FP_CALL_ABORT);
	}
}

static void evl_fini(struct fp_ctx *ctx)
{
	struct fp_evl *evl = fp_ctx_user(ctx);

	if (!evl)
		return;
	if (evl->ops->fini)
		evl->ops->fini(evl);
	evl_abort_all(evl);
	/* What fini queued (aborts, last writes) points into memory freed below: execute it
	 * now. Its returns are never handed up; the run is over. */
	rt_ctx_flush(ctx);
	evl_destroy(evl);
}

/* fp_app.poll: the application's per-round pass; its writes are flushed together, as a
 * round's are (one sendv per connection), and the runtime executes them right after. */
static void evl_poll(struct fp_ctx *ctx)
{
	struct fp_evl *evl = fp_ctx_user(ctx);

	if (!evl)
		return;
	if (ctx->n_calls == 0)
		evl_arena_reset(evl);
	evl->in_handle = true;
	evl->ops->poll(evl);
	evl_flush_dirty(evl);
	evl->in_handle = false;
}

/* fp_app's work_pending, steal and ready: the layer's own (tsock.c). A thread another
 * worker's steal runs only computes there (thread.h): it touches no evl. */
static bool evl_work_pending(struct fp_ctx *ctx, bool may_steal)
{
	struct fp_evl *evl = fp_ctx_user(ctx);

	return evl && evl->ops->work_pending(evl, may_steal);
}

static unsigned evl_steal(struct fp_ctx *ctx)
{
	struct fp_evl *evl = fp_ctx_user(ctx);

	return evl ? evl->ops->steal(evl) : 0;
}

static void evl_ready(struct fp_ctx *ctx, uint64_t *put, uint64_t *taken)
{
	struct fp_evl *evl = fp_ctx_user(ctx);

	*put = *taken = 0;
	if (evl)
		evl->ops->ready(evl, put, taken);
}

/* ---- flow-group migration: a connection changes worker ---- */

static void unlink_from(struct fp_evl_conn **head, struct fp_evl_conn *c, bool reap)
{
	for (struct fp_evl_conn **pp = head; *pp; pp = reap ? &(*pp)->reap_next : &(*pp)->dirty_next)
		if (*pp == c) {
			*pp = reap ? c->reap_next : c->dirty_next;
			return;
		}
}

/* fp_app.flow_leave, on the old worker between rounds: out of its lists. */
static void evl_flow_leave(struct fp_ctx *ctx, struct fp_flow *flow, uint64_t cookie)
{
	struct fp_evl *evl = fp_ctx_user(ctx);
	struct fp_evl_conn *c = (struct fp_evl_conn *)(uintptr_t)cookie;

	(void)flow;
	if (!evl || !c || (cookie & EVL_LISTENER_TAG) || c->evl != evl)
		return;   /* a listener's cookie: the flow was never this layer's */
	if (evl->ops->leaving && !c->app_gone)   /* closed by it: no longer its business */
		evl->ops->leaving(c);
	evl_out_sub(c, evl_out_held(c));
	if (c->dirty)
		unlink_from(&evl->dirty, c, false);
	if (c->reaping)
		unlink_from(&evl->reap, c, true);
	if (c->prev)
		c->prev->next = c->next;
	else
		evl->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	evl->n_conns--;
	c->evl = c->home = NULL;
}

/* fp_app.flow_arrive, on the new worker before its next round. */
static void evl_flow_arrive(struct fp_ctx *ctx, struct fp_flow *flow, uint64_t cookie)
{
	struct fp_evl *evl = fp_ctx_user(ctx);
	struct fp_evl_conn *c = (struct fp_evl_conn *)(uintptr_t)cookie;

	(void)flow;
	if (!evl || !c || (cookie & EVL_LISTENER_TAG) || c->evl)
		return;
	c->evl = c->home = evl;
	/* not one of this round's new connections (evl_knocked scans those at the head) */
	c->born = evl->round;
	c->prev = NULL;
	c->next = evl->conns;
	if (evl->conns)
		evl->conns->prev = c;
	evl->conns = c;
	evl->n_conns++;
	evl_out_add(c, evl_out_held(c));
	if (c->dirty) {
		c->dirty_next = evl->dirty;
		evl->dirty = c;
	}
	if (c->reaping) {
		c->reap_next = evl->reap;
		evl->reap = c;
	}
	if (evl->ops->arrived && !c->app_gone)
		evl->ops->arrived(c);
}

void fp_evl_app(struct fp_app *app, const struct fp_evl_ops *ops, void *arg)
{
	memset(app, 0, sizeof(*app));
	app->name = "evl";
	app->init = evl_init;
	app->handle = evl_handle;
	app->fini = evl_fini;
	app->poll = ops->poll ? evl_poll : NULL;
	app->arg = arg;
	app->layer = ops;
	app->steal_safe = ops->steal_safe;
	if (ops->movable) {
		app->flow_leave = evl_flow_leave;
		app->flow_arrive = evl_flow_arrive;
	}
	if (ops->steal && ops->work_pending && ops->ready) {
		app->work_pending = evl_work_pending;
		app->steal = evl_steal;
		app->ready = evl_ready;
	}
}

/* ---- the API ---- */

struct fp_ctx *fp_evl_ctx(struct fp_evl *evl) { return evl->ctx; }
void *fp_evl_user(const struct fp_evl *evl) { return evl->user; }
void fp_evl_set_user(struct fp_evl *evl, void *user) { evl->user = user; }
unsigned fp_evl_conns(const struct fp_evl *evl) { return evl->n_conns; }
size_t fp_evl_out_total(const struct fp_evl *evl) { return evl_out_total(evl); }
uint64_t fp_evl_out_refused(const struct fp_evl *evl) { return evl->out_refused; }

void fp_evl_listen(struct fp_evl *evl, uint16_t port, void *larg)
{
	struct evl_listener *l = malloc(sizeof(*l));

	if (!l) {
		log_err("evl: out of memory for a listener on port %u", port);
		fp_ctx_stop(evl->ctx, -ENOMEM);
		return;
	}
	l->larg = larg;
	l->port = port;
	l->next = evl->listeners;
	evl->listeners = l;
	fp_listen(evl->ctx, port, (uint64_t)(uintptr_t)l | EVL_LISTENER_TAG);
}

struct fp_evl_conn *fp_evl_connect(struct fp_evl *evl, uint32_t addr, uint16_t port, void *user)
{
	struct fp_evl_conn *c = evl_conn_new(evl, EVL_CONNECTING);

	if (!c)
		return NULL;
	c->user = user;
	c->raddr = addr;
	c->rport = port;
	fp_connect(evl->ctx, addr, port, (uint64_t)(uintptr_t)c);
	c->inflight++;
	return c;
}

void fp_evl_close(struct fp_evl_conn *c)
{
	if (c->app_gone || c->state == EVL_RELEASED)
		return;
	c->app_gone = true;
	c->closing = true;
	evl_rx_drop(c);
	if (c->state != EVL_OPEN)
		return;         /* connecting: sent and closed when it connects */
	evl_mark_dirty(c);
	if (!c->evl->in_handle)
		evl_flush_dirty(c->evl);
}

void fp_evl_abort(struct fp_evl_conn *c)
{
	if (c->state == EVL_RELEASED)
		return;
	c->app_gone = true;
	evl_rx_drop(c);
	if (c->state == EVL_CONNECTING) {
		c->abort_due = true;
		return;
	}
	evl_release(c, FP_CALL_ABORT);
}

void *fp_evl_conn_user(const struct fp_evl_conn *c) { return c->user; }
void fp_evl_conn_set_user(struct fp_evl_conn *c, void *user) { c->user = user; }
struct fp_evl *fp_evl_of(const struct fp_evl_conn *c) { return c->evl; }

struct fp_flow *fp_evl_conn_flow(const struct fp_evl_conn *c) { return c->busy_flow; }

bool fp_evl_conn_busy(const struct fp_evl_conn *c)
{
	/* nothing a thief writes is read here: its batch may be running */
	return c->home && c->home->steal && c->busy_flow &&
	       fp_flow_busy(c->home->ctx, c->busy_flow);
}
uint32_t fp_evl_conn_raddr(const struct fp_evl_conn *c) { return c->raddr; }
uint16_t fp_evl_conn_rport(const struct fp_evl_conn *c) { return c->rport; }

void fp_evl_udp_bind(struct fp_evl *evl, uint16_t port)
{
	fp_udp_bind_call(evl->ctx, port, 0);
}
