/* spin_native.c: fp-echo spin --native and server --native: the spin and echo servers on the native API, steal-safe for --sched steal. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/api.h>
#include <flowplane/clock.h>
#include <flowplane/compiler.h>
#include <flowplane/log.h>

#include "echo.h"

/*
 * The same protocol as spin.c (a 16-byte header, magic "SPIN", total length, service ns;
 * the reply is the header), written against api.h directly so that it can be stolen
 * (ZygOS, rt/steal.c): everything it touches for a flow's conditions is that flow's own
 * state, its cookie:
 *
 *   - RECV: the bytes are copied after any incomplete request and released at once
 *     (RECV_DONE); every whole request spins its service time, in order, and its reply
 *     is appended to the connection's output;
 *   - at the end of the batch, one SENDV offers what the output holds; its return (with
 *     the flow's next batch) says what the transport took; SENT brings the rest;
 *   - EOF or DEAD: what is left goes out, then CLOSE; the state is freed when CLOSE's
 *     return comes back, so no queued SENDV can point into freed memory.
 *
 * fp-echo server --native is the same connection with the echo for a protocol: RECV's bytes
 * are appended to the output (one copy) and released at once; the batch's SENDV offers
 * them back. IX's echo server was written this way, on its native API, so this is the
 * one to hold against IX's cost per message (bench/request_cost.py --apps echo-native):
 * the event-callback layer (server.c) adds its own.
 *
 * A worker keeps a list of the connections it accepted (for fini): KNOCK adds to it and
 * the return of CLOSE or ABORT removes from it, and under --sched steal both happen on
 * the home worker (a closed flow's last returns go home, rt/steal.c). A flow that moves
 * to another worker (flow-group migration) moves from one list to the other.
 */


struct nconn {
	struct nconn *prev, *next;    /* the home worker's connections (only it touches them) */
	struct fp_flow *flow;
	uint8_t *in;                  /* an incomplete request's bytes */
	size_t in_len, in_cap;
	uint8_t *out;                 /* replies not yet taken by the transport */
	size_t out_len, out_sent, out_cap;
	struct iovec iov;             /* the SENDV in flight points here */
	bool want_send, closing;
};

struct nlist {
	struct nconn *head;
	bool echo;                    /* server --native: echo what arrives */
};

static void list_add(struct nlist *l, struct nconn *c)
{
	c->prev = NULL;
	c->next = l->head;
	if (l->head)
		l->head->prev = c;
	l->head = c;
}

static void list_del(struct nlist *l, struct nconn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

static void conn_free(struct nconn *c)
{
	free(c->in);
	free(c->out);
	free(c);
}


static bool reserve(uint8_t **buf, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 256;
	uint8_t *p;

	if (need <= *cap)
		return true;
	while (n < need)
		n *= 2;
	if (!(p = realloc(*buf, n)))
		return false;
	*buf = p;
	*cap = n;
	return true;
}

static void conn_abort(struct fp_ctx *ctx, struct nconn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	fp_abort(ctx, c->flow);
	fp_ctx_count(ctx, 0, 1);
}

/* Serve every whole request of @c's input. */
static void serve(struct fp_ctx *ctx, struct nconn *c)
{
	size_t off = 0;

	while (c->in_len - off >= SPIN_HDR) {
		const uint8_t *h = c->in + off;
		uint64_t total = echo_le(h + 4, 4), ns = echo_le(h + 8, 8);

		if (echo_le(h, 4) != SPIN_MAGIC || total < SPIN_HDR || total > SPIN_MAX_LEN) {
			conn_abort(ctx, c);
			return;
		}
		if (c->in_len - off < total)
			break;
		if (!reserve(&c->out, &c->out_cap, c->out_len + SPIN_HDR)) {
			conn_abort(ctx, c);
			return;
		}
		fp_spin_ns(ns < SPIN_MAX_NS ? ns : SPIN_MAX_NS);
		memcpy(c->out + c->out_len, h, SPIN_HDR);
		c->out_len += SPIN_HDR;
		c->want_send = true;
		fp_ctx_count(ctx, 1, 0);
		off += total;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
}

/* server --native: RECV's bytes go back as they came, after what is still unsent. Not
 * inlined: bench/request_cost.py counts the messages by its calls. */
static fp_noinline void echo_recv(struct fp_ctx *ctx, const struct fp_cond *k, struct nconn *c)
{
	if (!c->closing && reserve(&c->out, &c->out_cap, c->out_len + k->len)) {
		memcpy(c->out + c->out_len, k->data, k->len);
		c->out_len += k->len;
		c->want_send = true;
		fp_ctx_count(ctx, 1, 0);
	} else if (!c->closing) {
		conn_abort(ctx, c);
	}
	fp_recv_done(ctx, k->flow, k->len);
}

static void on_ret(struct fp_ctx *ctx, const struct fp_call *r)
{
	struct nconn *c = (struct nconn *)(uintptr_t)r->cookie;

	if (r->type == FP_CALL_SENDV && c) {
		if (r->ret > 0)
			c->out_sent += (size_t)r->ret;
		if (c->out_sent == c->out_len)
			c->out_len = c->out_sent = 0;
	} else if ((r->type == FP_CALL_CLOSE || r->type == FP_CALL_ABORT) && c) {
		list_del(fp_ctx_user(ctx), c);
		conn_free(c);
	}
}

/* One condition for connection @c (NULL for a KNOCK, which creates it into *@made). */
static void on_cond(struct fp_ctx *ctx, const struct fp_cond *k, struct nconn *c,
		    struct nconn **made)
{
	switch (k->type) {
	case FP_COND_KNOCK:
		if (!(c = calloc(1, sizeof(*c)))) {
			fp_close(ctx, k->flow);
			return;
		}
		c->flow = k->flow;
		list_add(fp_ctx_user(ctx), c);
		*made = c;
		fp_accept(ctx, k->flow, (uint64_t)(uintptr_t)c);
		return;
	case FP_COND_RECV:
		if (((struct nlist *)fp_ctx_user(ctx))->echo) {
			echo_recv(ctx, k, c);
			return;
		}
		if (c->closing || !reserve(&c->in, &c->in_cap, c->in_len + k->len)) {
			fp_recv_done(ctx, k->flow, k->len);
			if (!c->closing)
				conn_abort(ctx, c);
			return;
		}
		memcpy(c->in + c->in_len, k->data, k->len);
		c->in_len += k->len;
		fp_recv_done(ctx, k->flow, k->len);
		serve(ctx, c);
		return;
	case FP_COND_SENT:
		c->want_send = c->out_len > c->out_sent;
		return;
	case FP_COND_EOF:
	case FP_COND_DEAD:
		c->want_send = c->out_len > c->out_sent && k->type == FP_COND_EOF;
		if (!c->closing) {
			c->closing = true;
			if (c->want_send) {
				c->iov = (struct iovec){ c->out + c->out_sent, c->out_len - c->out_sent };
				fp_sendv(ctx, c->flow, (uint64_t)(uintptr_t)c, &c->iov, 1);
			}
			c->want_send = false;
			fp_close(ctx, c->flow);
		}
		return;
	default:
		return;
	}
}

/*
 * Conditions that came in the same batch as their flow's KNOCK carry the listener's
 * cookie (ACCEPT has not run yet): their connection is the one that KNOCK made.
 */
static void spin_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
			const struct fp_call *rets, unsigned n_rets)
{
	struct nconn *stack[64], **conn = n <= 64 ? stack : calloc(n, sizeof(*conn));

	for (unsigned i = 0; i < n_rets; i++)
		on_ret(ctx, &rets[i]);
	if (!conn) {
		log_err("fp-echo spin: out of memory for a batch of %u conditions", n);
		abort();
	}
	for (unsigned i = 0; i < n; i++) {
		conn[i] = (struct nconn *)(uintptr_t)conds[i].cookie;
		for (unsigned j = 0; !conn[i] && conds[i].type != FP_COND_KNOCK && j < i; j++)
			if (conds[j].type == FP_COND_KNOCK && conds[j].flow == conds[i].flow)
				conn[i] = conn[j];
		if (conds[i].type == FP_COND_KNOCK) {
			conn[i] = NULL;
			on_cond(ctx, &conds[i], NULL, &conn[i]);
		} else if (conn[i]) {
			on_cond(ctx, &conds[i], conn[i], NULL);
		}
	}
	/* One SENDV per connection per batch, after all of its requests were served. */
	for (unsigned i = 0; i < n; i++) {
		struct nconn *c = conn[i];

		if (conds[i].type == FP_COND_KNOCK || !c || !c->want_send || c->closing)
			continue;
		c->want_send = false;
		c->iov = (struct iovec){ c->out + c->out_sent, c->out_len - c->out_sent };
		fp_sendv(ctx, c->flow, (uint64_t)(uintptr_t)c, &c->iov, 1);
	}
	if (conn != stack)
		free(conn);
}

static int spin_init(struct fp_ctx *ctx, void *arg)
{
	const struct echo_opts *o = arg;
	struct nlist *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->echo = o->mode == ECHO_SERVER;
	fp_ctx_set_user(ctx, l);
	fp_listen(ctx, o->port, 0);
	return 0;
}

/* The run stopped: the transport resets what is still open; the state goes here. */
static void spin_fini(struct fp_ctx *ctx)
{
	struct nlist *l = fp_ctx_user(ctx);

	while (l && l->head) {
		struct nconn *c = l->head;

		list_del(l, c);
		conn_free(c);
	}
	free(l);
}

/* A flow moves to another worker (rt/steer.c): its entry moves to that worker's list. */
static void spin_leave(struct fp_ctx *ctx, struct fp_flow *flow, uint64_t cookie)
{
	(void)flow;
	if (cookie)
		list_del(fp_ctx_user(ctx), (struct nconn *)(uintptr_t)cookie);
}

static void spin_arrive(struct fp_ctx *ctx, struct fp_flow *flow, uint64_t cookie)
{
	(void)flow;
	if (cookie)
		list_add(fp_ctx_user(ctx), (struct nconn *)(uintptr_t)cookie);
}

void echo_spin_native_app(struct fp_app *app, const struct echo_opts *o)
{
	*app = (struct fp_app){
		.name = o->mode == ECHO_SERVER ? "fp-echo server --native" : "fp-echo spin --native",
		.init = spin_init,
		.handle = spin_handle,
		.fini = spin_fini,
		.arg = (void *)o,
		.steal_safe = true,
		.flow_leave = spin_leave,
		.flow_arrive = spin_arrive,
	};
}

int echo_spin_native_run(const struct echo_opts *o)
{
	struct fp_app app;

	echo_spin_native_app(&app, o);
	return fp_rt_run(&o->rt, &app) ? 1 : 0;
}
