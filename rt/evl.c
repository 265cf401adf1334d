/* evl.c: the event-callback layer over the native API (libix): read callbacks, coalesced writes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/compiler.h>
#include <flowplane/evl.h>
#include <flowplane/log.h>

#include "defs.h"

/*
 * How a round goes (the worker calls evl_handle once per round, see api.c):
 *
 *   1. returns of last round's calls: a SENDV's count advances that connection's output
 *      (IX: sendv returns what the window took, the rest is offered again later); a
 *      CONNECT error ends the connect; a LISTEN error stops the run;
 *   2. conditions, in order: KNOCK, CONNECTED, RECV (read callbacks), SENT, EOF, DEAD,
 *      UDP_RECV;
 *   3. the flush: every connection touched this round (the dirty list) gets its
 *      recv_done, one sendv over its pending chunks (libix coalesces a round's writes
 *      into one sendv), and its close once the output has drained;
 *   4. the reap: connections released and with no call in flight are freed.
 *
 * A connection's cookie is its own address, so it must outlive every call that carries
 * it: @inflight counts those calls, and a released connection is freed only in step 4 of
 * a round where it reached zero, after that round's conditions (which may still name it)
 * have been seen. After its CLOSE/ABORT has executed the transport names it no more.
 * A listener's cookie is its address with bit 0 set: until the ACCEPT executes, the
 * conditions of a new flow (a RECV behind the handshake in the same round) still carry
 * it, and are matched to their connection by flow (evl_knocked).
 *
 * Input: bytes a read callback consumed, and bytes it left (copied aside, so they are
 * the copy's now), are both given back with recv_done at the flush: the window reopens
 * at once. There is no back-pressure beyond EVL_RX_MAX left unconsumed, which resets the
 * connection.
 *
 * Memory a queued call points to must stay put until the call executes: output lives in
 * fixed-size chunks that are only ever appended to (a queued sendv's iov covers bytes
 * that no later write moves), and iovs and UDP datagrams live in a per-worker arena that
 * is recycled only when the call array is empty, i.e. when everything that pointed into
 * it has executed.
 *
 * Writes made outside the handler (from a timer) cannot wait for step 3, which only comes
 * with the next round: when no sendv is in flight they queue one at once, and the worker
 * executes it right after the timer pass. Later writes of that pass follow when its
 * return comes up next round.
 */

#define EVL_CHUNK_BYTES   16384u                  /* one output chunk, header included */
#define EVL_CHUNK_DATA    (EVL_CHUNK_BYTES - 16u)
#define EVL_FREE_CHUNKS   256u                    /* chunks a worker keeps for reuse (4 MiB) */
#define EVL_SENDV_IOV     64u                     /* chunks one sendv offers (~1 MiB) */
#define EVL_DEFAULT_MAX_PENDING (4u << 20)
#define EVL_RX_MAX        (4u << 20)              /* left unconsumed beyond this: the
						   * connection is reset (-EMSGSIZE) */
#define EVL_RX_KEEP       (64u << 10)             /* larger idle copy-aside buffers are freed */
#define EVL_ARENA_BLOCK   (64u << 10)
#define EVL_LISTENER_TAG  1u                      /* bit 0 of a listener's cookie */

struct evl_chunk {
	struct evl_chunk *next;
	uint32_t len;                    /* bytes filled */
	uint32_t pad;
	uint8_t data[EVL_CHUNK_DATA];
};
static_assert(sizeof(struct evl_chunk) == EVL_CHUNK_BYTES, "one chunk is one malloc size class");

enum evl_state {
	EVL_CONNECTING = 0,              /* fp_connect queued, no flow yet */
	EVL_OPEN,                        /* @flow is live */
	EVL_RELEASED,                    /* close/abort queued (or no flow ever came) */
};

struct fp_evl_conn {
	struct fp_evl *evl;
	struct fp_flow *flow;
	void *user;
	uint8_t state;                   /* enum evl_state */
	bool app_gone;                   /* closed/close/abort: no more callbacks */
	bool closing;                    /* close once the output has drained */
	bool abort_due;                  /* app aborted while connecting */
	bool sendv_inflight;             /* one sendv at a time per connection */
	bool blocked;                    /* the window took less than offered: wait for SENT */
	bool dirty, reaping;
	uint16_t rport;
	uint32_t raddr;
	unsigned inflight;               /* queued calls whose cookie is this connection */
	uint64_t born;                   /* the round it was created in */
	uint32_t rx_done;                /* RECV bytes to recv_done at the flush */

	/* Output: a queue of chunks; @head_off bytes of the first are already taken. */
	struct evl_chunk *head, *tail;
	uint32_t head_off;
	size_t pending;
	size_t offered;                  /* bytes the sendv in flight offered */

	/* Copy-aside input: what read left unconsumed, at rx + rx_off. */
	uint8_t *rx;
	uint32_t rx_off, rx_len, rx_cap;

	struct fp_evl_conn *next, *prev; /* every connection of the worker */
	struct fp_evl_conn *dirty_next, *reap_next;
};

struct evl_listener {
	struct evl_listener *next;
	void *larg;
	uint16_t port;
};

struct evl_block {
	struct evl_block *next;
	size_t size, used;
	uint8_t data[];
};

struct fp_evl {
	struct fp_ctx *ctx;
	const struct fp_evl_ops *ops;
	void *arg, *user;
	size_t max_pending;
	bool in_handle;
	uint64_t round;                            /* handler calls so far */
	unsigned n_conns;
	struct fp_evl_conn *conns;                 /* all, including released ones */
	struct fp_evl_conn *dirty, *reap;
	struct evl_chunk *free_chunks;
	unsigned n_free_chunks;
	struct evl_listener *listeners;
	struct evl_block *arena, *arena_cur;       /* blocks in order; allocating in cur */
	uint64_t udp_send_errors;
} fp_aligned_cache;

/* ---- arena: iovs and datagrams of queued calls ---- */

static void evl_arena_reset(struct fp_evl *evl)
{
	struct evl_block *b;

	for (b = evl->arena; b; b = b->next)
		b->used = 0;
	evl->arena_cur = evl->arena;
}

/* @size bytes that stay valid until the call array is next empty; NULL on ENOMEM. */
static void *evl_arena_alloc(struct fp_evl *evl, size_t size)
{
	struct evl_block *b = evl->arena_cur, **link;

	/* Outside the handler, an empty call array means nothing points in here any more. */
	if (!evl->in_handle && evl->ctx->n_calls == 0)
		evl_arena_reset(evl);
	b = evl->arena_cur;
	size = (size + 15u) & ~(size_t)15u;
	while (b && b->size - b->used < size)
		b = b->next;
	if (!b) {
		size_t bsize = size > EVL_ARENA_BLOCK ? size : EVL_ARENA_BLOCK;

		b = malloc(sizeof(*b) + bsize);
		if (!b)
			return NULL;
		b->next = NULL;
		b->size = bsize;
		b->used = 0;
		for (link = &evl->arena; *link; link = &(*link)->next)
			;
		*link = b;
	}
	evl->arena_cur = b;
	b->used += size;
	return b->data + b->used - size;
}

/* ---- output chunks ---- */

static struct evl_chunk *evl_chunk_get(struct fp_evl *evl)
{
	struct evl_chunk *ch = evl->free_chunks;

	if (ch) {
		evl->free_chunks = ch->next;
		evl->n_free_chunks--;
	} else if (!(ch = malloc(sizeof(*ch)))) {
		return NULL;
	}
	ch->next = NULL;
	ch->len = 0;
	return ch;
}

static void evl_chunk_put(struct fp_evl *evl, struct evl_chunk *ch)
{
	if (evl->n_free_chunks >= EVL_FREE_CHUNKS) {
		free(ch);
		return;
	}
	ch->next = evl->free_chunks;
	evl->free_chunks = ch;
	evl->n_free_chunks++;
}

/* The transport took @n bytes of @c's output: drop them, and the chunks they emptied. */
static void evl_out_advance(struct fp_evl_conn *c, size_t n)
{
	struct evl_chunk *ch;

	while (n && (ch = c->head)) {
		uint32_t avail = ch->len - c->head_off;
		uint32_t take = n < avail ? (uint32_t)n : avail;

		c->head_off += take;
		c->pending -= take;
		n -= take;
		if (c->head_off == ch->len) {
			c->head = ch->next;
			if (!c->head)
				c->tail = NULL;
			c->head_off = 0;
			evl_chunk_put(c->evl, ch);
		}
	}
}

/* ---- connections ---- */

static struct fp_evl_conn *evl_conn_new(struct fp_evl *evl, enum evl_state state)
{
	struct fp_evl_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->evl = evl;
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
	struct fp_evl *evl = c->evl;
	struct evl_chunk *ch, *next;

	for (ch = c->head; ch; ch = next) {
		next = ch->next;
		evl_chunk_put(evl, ch);
	}
	free(c->rx);
	if (c->prev)
		c->prev->next = c->next;
	else
		evl->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	evl->n_conns--;
	free(c);
}

static void evl_mark_dirty(struct fp_evl_conn *c)
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
	if (c->state != EVL_RELEASED || c->inflight || c->reaping)
		return;
	c->reaping = true;
	c->reap_next = c->evl->reap;
	c->evl->reap = c;
}

static void evl_rx_drop(struct fp_evl_conn *c)
{
	c->rx_off = c->rx_len = 0;
}

/* Hand @c's flow back with CLOSE or ABORT (after the recv_done it is owed). The cookie
 * keeps @c alive until that call's return has been seen. */
static void evl_release(struct fp_evl_conn *c, uint16_t type)
{
	struct fp_ctx *ctx = c->evl->ctx;

	if (c->state == EVL_RELEASED)
		return;
	if (c->flow) {
		if (c->rx_done) {
			fp_recv_done(ctx, c->flow, c->rx_done);
			c->rx_done = 0;
		}
		fp_flow_call(ctx, type, c->flow, (uint64_t)(uintptr_t)c);
		c->inflight++;
	}
	c->flow = NULL;
	c->state = EVL_RELEASED;
	evl_rx_drop(c);
	evl_maybe_reap(c);
}

/* The flow failed (DEAD, a sendv error, an oversized request): release it with @type
 * and tell the application once. */
static void evl_fail(struct fp_evl_conn *c, int status, uint16_t type)
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

/* Queue one sendv over @c's pending chunks (at most EVL_SENDV_IOV of them). */
static void evl_sendv(struct fp_evl_conn *c)
{
	struct fp_evl *evl = c->evl;
	struct evl_chunk *ch;
	struct iovec *iov;
	unsigned n = 0;
	size_t total = 0;

	for (ch = c->head; ch && n < EVL_SENDV_IOV; ch = ch->next)
		n++;
	iov = evl_arena_alloc(evl, n * sizeof(*iov));
	if (!iov) {
		log_warn("evl: out of memory for a sendv; retrying next round");
		return;
	}
	n = 0;
	for (ch = c->head; ch && n < EVL_SENDV_IOV; ch = ch->next, n++) {
		uint32_t off = ch == c->head ? c->head_off : 0;

		iov[n].iov_base = ch->data + off;
		iov[n].iov_len = ch->len - off;
		total += ch->len - off;
	}
	fp_sendv(evl->ctx, c->flow, (uint64_t)(uintptr_t)c, iov, n);
	c->inflight++;
	c->sendv_inflight = true;
	c->offered = total;
}

static bool evl_can_send(const struct fp_evl_conn *c)
{
	return c->state == EVL_OPEN && c->pending && !c->sendv_inflight && !c->blocked;
}

/* Step 3 for one connection: recv_done, sendv, close when drained. */
static void evl_flush_conn(struct fp_evl_conn *c)
{
	if (c->state != EVL_OPEN)
		return;
	if (c->rx_done) {
		fp_recv_done(c->evl->ctx, c->flow, c->rx_done);
		c->rx_done = 0;
	}
	if (evl_can_send(c))
		evl_sendv(c);
	if (c->closing && !c->pending && !c->sendv_inflight)
		evl_release(c, FP_CALL_CLOSE);
}

/* ---- returns ---- */

static void evl_ret_sendv(struct fp_evl_conn *c, int64_t ret)
{
	const struct fp_evl_ops *ops = c->evl->ops;

	c->sendv_inflight = false;
	if (c->state == EVL_RELEASED)
		return;
	if (ret == -ENOBUFS) {          /* the transport is short of buffers: offer again */
		evl_mark_dirty(c);
		return;
	}
	if (ret < 0) {
		evl_fail(c, (int)ret, FP_CALL_CLOSE);
		return;
	}
	if ((size_t)ret > c->offered)
		ret = (int64_t)c->offered;
	evl_out_advance(c, (size_t)ret);
	if ((size_t)ret < c->offered)
		c->blocked = true;
	if (!c->pending && !c->app_gone && ops->drained)
		ops->drained(c);
	if (c->state == EVL_OPEN && (c->pending || c->closing))
		evl_mark_dirty(c);
}

static void evl_ret_conn(struct fp_evl *evl, const struct fp_call *r)
{
	struct fp_evl_conn *c = (struct fp_evl_conn *)(uintptr_t)r->cookie;

	if (!c)
		return;
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
	c->flow = k->flow;
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
	fp_accept(evl->ctx, k->flow, (uint64_t)(uintptr_t)c);
	c->inflight++;
	/* accept() may have written or closed already: the flush comes after the accept. */
	if (c->pending || c->closing)
		evl_mark_dirty(c);
}

static void evl_connected(struct fp_evl *evl, struct fp_evl_conn *c, const struct fp_cond *k)
{
	if (c->state != EVL_CONNECTING) {
		/* The CONNECT call failed already (this round): a flow despite that goes back. */
		if (c->state == EVL_RELEASED && k->status == 0 && k->flow)
			fp_close(evl->ctx, k->flow);
		return;
	}
	c->flow = k->flow;
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

/* Show @data to the application until it stops consuming; returns bytes consumed. */
static size_t evl_feed(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t off = 0;

	while (off < len && !c->app_gone && c->state == EVL_OPEN) {
		size_t n = c->evl->ops->read(c, data + off, len - off);

		if (n == 0)
			break;
		off += n < len - off ? n : len - off;
	}
	return off;
}

/* Append @len bytes to @c's copy-aside buffer; -EMSGSIZE past EVL_RX_MAX. */
static int evl_rx_append(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t need = (size_t)c->rx_len + len;

	if (need > EVL_RX_MAX)
		return -EMSGSIZE;
	if (c->rx_off && c->rx_off + need > c->rx_cap) {
		memmove(c->rx, c->rx + c->rx_off, c->rx_len);
		c->rx_off = 0;
	}
	if (c->rx_off + need > c->rx_cap) {
		size_t cap = c->rx_cap ? c->rx_cap : 2048;
		uint8_t *n;

		while (cap < need)
			cap *= 2;
		if (!(n = realloc(c->rx, cap)))
			return -ENOMEM;
		c->rx = n;
		c->rx_cap = (uint32_t)cap;
	}
	memcpy(c->rx + c->rx_off + c->rx_len, data, len);
	c->rx_len += (uint32_t)len;
	return 0;
}

/*
 * In-order bytes for @c. Whatever happens to them, they are owed back to the transport
 * at the flush: consumed ones are done with, and unconsumed ones are copied aside first.
 */
static void evl_recv(struct fp_evl_conn *c, const struct fp_cond *k)
{
	size_t used;
	int rc = 0;

	c->rx_done += k->len;
	evl_mark_dirty(c);
	if (c->app_gone || c->state != EVL_OPEN)
		return;
	if (!c->rx_len) {
		used = evl_feed(c, k->data, k->len);   /* zero copy: the receive buffer itself */
		if (used < k->len && !c->app_gone && c->state == EVL_OPEN)
			rc = evl_rx_append(c, k->data + used, k->len - used);
	} else {
		rc = evl_rx_append(c, k->data, k->len);
		if (!rc) {
			used = evl_feed(c, c->rx + c->rx_off, c->rx_len);
			if (!c->app_gone && c->state == EVL_OPEN) {
				c->rx_off += (uint32_t)used;
				c->rx_len -= (uint32_t)used;
			}
		}
	}
	if (rc) {
		log_warn("evl: cannot keep the input left unconsumed (%s, at most %u bytes); "
			 "connection reset", strerror(-rc), EVL_RX_MAX);
		evl_fail(c, rc, FP_CALL_ABORT);
		return;
	}
	if (!c->rx_len) {
		c->rx_off = 0;
		if (c->rx_cap > EVL_RX_KEEP) {
			free(c->rx);
			c->rx = NULL;
			c->rx_cap = 0;
		}
	}
}

static void evl_eof(struct fp_evl_conn *c)
{
	if (c->state != EVL_OPEN)
		return;
	evl_rx_drop(c);
	if (!c->app_gone && c->evl->ops->closed)
		c->evl->ops->closed(c, 0);  /* its writes are still sent */
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
	struct evl_block *b;
	struct evl_chunk *ch;

	while (evl->conns)
		evl_conn_free(evl->conns);
	while ((ch = evl->free_chunks)) {
		evl->free_chunks = ch->next;
		free(ch);
	}
	while ((l = evl->listeners)) {
		evl->listeners = l->next;
		free(l);
	}
	while ((b = evl->arena)) {
		evl->arena = b->next;
		free(b);
	}
	fp_ctx_set_user(evl->ctx, NULL);
	free(evl);
}

static int evl_init(struct fp_ctx *ctx, void *arg)
{
	const struct fp_evl_ops *ops = ctx->run->app->layer;
	size_t size = (sizeof(struct fp_evl) + FP_CACHE_LINE - 1) & ~(size_t)(FP_CACHE_LINE - 1);
	struct fp_evl *evl = aligned_alloc(FP_CACHE_LINE, size);
	int rc;

	if (!evl)
		return -ENOMEM;
	memset(evl, 0, sizeof(*evl));
	evl->ctx = ctx;
	evl->ops = ops;
	evl->arg = arg;
	evl->max_pending = ops->max_pending ? ops->max_pending : EVL_DEFAULT_MAX_PENDING;
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
	evl->in_handle = false;

	while ((c = evl->dirty)) {
		evl->dirty = c->dirty_next;
		c->dirty = false;
		evl_flush_conn(c);
	}
	while ((c = evl->reap)) {
		evl->reap = c->reap_next;
		c->reaping = false;
		if (c->state == EVL_RELEASED && !c->inflight)
			evl_conn_free(c);
	}
}

static void evl_fini(struct fp_ctx *ctx)
{
	struct fp_evl *evl = fp_ctx_user(ctx);

	if (!evl)
		return;
	if (evl->ops->fini)
		evl->ops->fini(evl);
	/* What fini queued (aborts, last writes) points into memory freed below: execute it
	 * now. Its returns are never handed up; the run is over. */
	rt_ctx_flush(ctx);
	evl_destroy(evl);
}

void fp_evl_app(struct fp_app *app, const struct fp_evl_ops *ops, void *arg)
{
	memset(app, 0, sizeof(*app));
	app->name = "evl";
	app->init = evl_init;
	app->handle = evl_handle;
	app->fini = evl_fini;
	app->arg = arg;
	app->layer = ops;
}

/* ---- the API ---- */

struct fp_ctx *fp_evl_ctx(struct fp_evl *evl) { return evl->ctx; }
void *fp_evl_user(const struct fp_evl *evl) { return evl->user; }
void fp_evl_set_user(struct fp_evl *evl, void *user) { evl->user = user; }
unsigned fp_evl_conns(const struct fp_evl *evl) { return evl->n_conns; }

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

/* Append @len bytes to @c's chunks; all or nothing (-ENOBUFS when a chunk is short). */
static int evl_out_append(struct fp_evl_conn *c, const uint8_t *p, size_t len)
{
	struct fp_evl *evl = c->evl;
	struct evl_chunk *first = NULL, **link = &first, *ch;
	size_t room = c->tail ? EVL_CHUNK_DATA - c->tail->len : 0;

	/* Get every chunk first, so that a failure leaves the queue as it was. */
	for (size_t need = len > room ? len - room : 0; need; need -= need < EVL_CHUNK_DATA ? need : EVL_CHUNK_DATA) {
		if (!(*link = evl_chunk_get(evl))) {
			while ((ch = first)) {
				first = ch->next;
				evl_chunk_put(evl, ch);
			}
			return -ENOBUFS;
		}
		link = &(*link)->next;
	}
	if (c->tail)
		c->tail->next = first;
	else
		c->head = first;
	for (ch = c->tail ? c->tail : first; len; ch = ch->next) {
		uint32_t n = EVL_CHUNK_DATA - ch->len;

		if (n > len)
			n = (uint32_t)len;
		memcpy(ch->data + ch->len, p, n);
		ch->len += n;
		p += n;
		len -= n;
		c->pending += n;
		c->tail = ch;
	}
	return 0;
}

int fp_evl_write(struct fp_evl_conn *c, const void *data, size_t len)
{
	int rc;

	if (c->state == EVL_RELEASED || c->closing || c->app_gone)
		return -EPIPE;
	if (len > c->evl->max_pending - c->pending || c->pending > c->evl->max_pending)
		return -ENOBUFS;
	if (!len)
		return 0;
	if ((rc = evl_out_append(c, data, len)))
		return rc;
	if (c->evl->in_handle)
		evl_mark_dirty(c);
	else if (evl_can_send(c))
		evl_sendv(c);   /* from a timer: executed right after the timer pass */
	return 0;
}

size_t fp_evl_pending(const struct fp_evl_conn *c) { return c->pending; }

void fp_evl_close(struct fp_evl_conn *c)
{
	if (c->app_gone || c->state == EVL_RELEASED)
		return;
	c->app_gone = true;
	c->closing = true;
	evl_rx_drop(c);
	if (c->state != EVL_OPEN)
		return;         /* connecting: sent and closed when it connects */
	if (c->evl->in_handle) {
		evl_mark_dirty(c);
		return;
	}
	if (evl_can_send(c))
		evl_sendv(c);
	if (!c->pending && !c->sendv_inflight)
		evl_release(c, FP_CALL_CLOSE);
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
uint32_t fp_evl_conn_raddr(const struct fp_evl_conn *c) { return c->raddr; }
uint16_t fp_evl_conn_rport(const struct fp_evl_conn *c) { return c->rport; }

void fp_evl_udp_bind(struct fp_evl *evl, uint16_t port)
{
	fp_udp_bind_call(evl->ctx, port, 0);
}

int fp_evl_udp_send(struct fp_evl *evl, uint16_t sport, uint32_t addr, uint16_t rport,
		    const void *data, size_t len)
{
	struct iovec *iov;

	if (len > 65507)
		return -EMSGSIZE;
	if (!(iov = evl_arena_alloc(evl, sizeof(*iov) + len)))
		return -ENOMEM;
	iov->iov_base = iov + 1;
	iov->iov_len = len;
	memcpy(iov + 1, data, len);
	fp_udp_sendto(evl->ctx, sport, addr, rport, iov, 0);
	return 0;
}
