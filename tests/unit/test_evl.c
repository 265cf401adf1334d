/* test_evl.c: the event-callback layer driven by a fake transport: zero copy, coalescing, windows, back-pressure, lifetime. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <flowplane/evl.h>
#include <flowplane/pool.h>

#include "defs.h"
#include "evl_defs.h"   /* white-box: how much a connection holds */
#include "harness.h"

/*
 * The fake transport executes calls the way api.h says a transport does, and checks what
 * a transport would trip over: a call on a flow already closed, a recv_done beyond what
 * was received, a sendv while the previous one's window was not reopened. A flow's
 * window is @W bytes of "unacknowledged" data; the test acknowledges with ack(), which
 * also pushes the SENT condition. RECV data lives in pool buffers that recv_done frees,
 * so the pool's leak check at teardown proves every received byte was given back; the
 * bytes received and not yet given back are the flow's receive window in use, which a
 * peer that respects it (peer_send) never exceeds.
 */

#define MAX_FLOWS 16
#define MAX_RX    64
#define OUT_CAP   (1u << 20)

struct fp_flow {
	int id;
	bool live;                  /* not yet closed/aborted */
	bool aborted;
	uint64_t cookie;
	uint32_t window;            /* bytes sendv may take now */
	uint8_t *out;               /* everything sendv took, in order */
	size_t out_len;
	unsigned sendvs;
	unsigned nobufs;            /* sendvs refused with -ENOBUFS before one takes */
	const uint8_t *ref_lo, *ref_hi; /* sendv pieces from here are counted in ref_iovs */
	unsigned ref_iovs;
	struct fp_mbuf *rx[MAX_RX]; /* received, not yet recv_done'd */
	uint32_t rx_left[MAX_RX];   /* bytes of rx[i] not yet covered */
	unsigned rx_n;
};

struct fake {
	struct fp_test_pool *tp;
	struct fp_rt_config cfg;
	struct rt_run run;
	struct fp_app app;
	struct fp_ctx ctx;
	struct fp_flow flows[MAX_FLOWS];
	int n_flows;
	unsigned calls[FP_CALL_UDP_DONE + 1];   /* executed, by type */
	int64_t listen_ret, connect_ret;
	uint64_t listen_cookie;
	uint8_t udp_out[2048];
	size_t udp_out_len;
	uint16_t udp_rport;

	/* the application's side */
	struct fp_evl *evl;
	struct fp_evl_conn *conn;   /* the last accepted/connected one */
	size_t req;                 /* read consumes whole requests of this size (0: none) */
	bool echo;
	bool soft;                  /* echo: a refused write consumes nothing (no assert) */
	bool echo_room;             /* read echoes what fits in the output, consumes that */
	bool refuse;
	bool close_in_read;
	const uint8_t *read_ptr[32];
	size_t read_len[32];
	unsigned reads;
	unsigned closed;
	int closed_status;
	unsigned connected;
	int connected_status;
	unsigned drained;
	const char *write_in_closed;
};

static struct fake *fake_of(struct fp_ctx *ctx) { return ctx->tp; }

/* ---- the transport ---- */

static void flow_rx_done(struct fake *f, struct fp_flow *fl, uint32_t len)
{
	while (len) {
		assert_true(fl->rx_n > 0);              /* never beyond what was received */
		uint32_t n = len < fl->rx_left[0] ? len : fl->rx_left[0];

		fl->rx_left[0] -= n;
		len -= n;
		if (!fl->rx_left[0]) {
			fp_mbuf_free(&f->tp->cache, fl->rx[0]);
			memmove(fl->rx, fl->rx + 1, (fl->rx_n - 1) * sizeof(fl->rx[0]));
			memmove(fl->rx_left, fl->rx_left + 1, (fl->rx_n - 1) * sizeof(fl->rx_left[0]));
			fl->rx_n--;
		}
	}
}

static void flow_release(struct fake *f, struct fp_flow *fl)
{
	assert_true(fl->live);
	fl->live = false;
	while (fl->rx_n)
		flow_rx_done(f, fl, fl->rx_left[0]);
}

static int64_t fake_sendv(struct fp_flow *fl, const struct iovec *iov, unsigned n)
{
	size_t took = 0;

	fl->sendvs++;
	if (fl->nobufs) {
		fl->nobufs--;
		return -ENOBUFS;
	}
	for (unsigned i = 0; i < n && fl->window; i++) {
		size_t k = iov[i].iov_len < fl->window ? iov[i].iov_len : fl->window;

		assert_true(fl->out_len + k <= OUT_CAP);
		memcpy(fl->out + fl->out_len, iov[i].iov_base, k);
		if (fl->ref_lo && (const uint8_t *)iov[i].iov_base >= fl->ref_lo &&
		    (const uint8_t *)iov[i].iov_base < fl->ref_hi)
			fl->ref_iovs++;
		fl->out_len += k;
		fl->window -= (uint32_t)k;
		took += k;
	}
	return (int64_t)took;
}

static void fake_exec(struct fp_ctx *ctx, struct fp_call *c)
{
	struct fake *f = fake_of(ctx);
	struct fp_flow *fl = c->flow;

	f->calls[c->type]++;
	c->ret = 0;
	switch (c->type) {
	case FP_CALL_LISTEN:
		c->ret = f->listen_ret;
		if (!c->ret)
			f->listen_cookie = c->cookie;
		break;
	case FP_CALL_CONNECT:
		c->ret = f->connect_ret;
		break;
	case FP_CALL_ACCEPT:
		assert_true(fl->live);
		fl->cookie = c->cookie;
		break;
	case FP_CALL_SENDV:
		assert_true(fl->live);
		c->ret = fake_sendv(fl, c->iov, c->iovcnt);
		break;
	case FP_CALL_RECV_DONE:
		assert_true(fl->live);
		flow_rx_done(f, fl, c->len);
		break;
	case FP_CALL_CLOSE:
	case FP_CALL_ABORT:
		fl->aborted = c->type == FP_CALL_ABORT;
		flow_release(f, fl);
		break;
	case FP_CALL_UDP_SEND:
		assert_true(c->iov[0].iov_len <= sizeof(f->udp_out));
		memcpy(f->udp_out, c->iov[0].iov_base, c->iov[0].iov_len);
		f->udp_out_len = c->iov[0].iov_len;
		f->udp_rport = c->rport;
		c->ret = (int64_t)c->iov[0].iov_len;
		break;
	case FP_CALL_UDP_DONE:
		fp_mbuf_free(&f->tp->cache, c->m);
		break;
	default:
		break;
	}
}

static const struct rt_transport_ops fake_ops = { .name = "fake", .exec = fake_exec };

static struct fp_flow *flow_new(struct fake *f, uint32_t window)
{
	struct fp_flow *fl = &f->flows[f->n_flows];

	assert_true(f->n_flows < MAX_FLOWS);
	fl->id = f->n_flows++;
	fl->live = true;
	fl->window = window;
	fl->out = malloc(OUT_CAP);
	assert_non_null(fl->out);
	return fl;
}

/* ---- conditions, as the transport would push them ---- */

static void push_knock(struct fake *f, struct fp_flow *fl)
{
	struct fp_cond *k = rt_cond_push(&f->ctx);

	k->type = FP_COND_KNOCK;
	k->flow = fl;
	k->cookie = f->listen_cookie;           /* the listener's, as fp_listen gave it */
	k->raddr = 0x0a000002;
	k->rport = 40000;
	k->lport = 7;
}

/* A RECV of @len bytes of @data in a fresh pool buffer; returns where the bytes are. */
static const uint8_t *push_recv(struct fake *f, struct fp_flow *fl, const void *data, uint32_t len)
{
	struct fp_mbuf *m = fp_pool_get(&f->tp->cache);
	struct fp_cond *k;
	uint8_t *p;

	assert_non_null(m);
	assert_true(fl->rx_n < MAX_RX);
	p = fp_mbuf_append(m, len);
	assert_non_null(p);
	memcpy(p, data, len);
	fl->rx[fl->rx_n] = m;
	fl->rx_left[fl->rx_n++] = len;
	k = rt_cond_push(&f->ctx);
	k->type = FP_COND_RECV;
	k->flow = fl;
	k->cookie = fl->cookie;
	k->m = m;
	k->data = p;
	k->len = len;
	return p;
}

static void push_simple(struct fake *f, struct fp_flow *fl, uint16_t type, int16_t status)
{
	struct fp_cond *k = rt_cond_push(&f->ctx);

	k->type = type;
	k->flow = fl;
	k->cookie = fl->cookie;
	k->status = status;
}

/* The peer acknowledged: the window is @window again, and SENT says so. */
static void ack(struct fake *f, struct fp_flow *fl, uint32_t window)
{
	struct fp_cond *k = rt_cond_push(&f->ctx);

	fl->window = window;
	k->type = FP_COND_SENT;
	k->flow = fl;
	k->cookie = fl->cookie;
	k->window = window;
}

static unsigned round_(struct fake *f) { return rt_ctx_round(&f->ctx); }

/* Rounds until nothing is left to hand up or execute. */
static void settle(struct fake *f)
{
	for (int i = 0; i < 100 && (round_(f) || f->ctx.n_rets || f->ctx.n_conds); i++)
		;
	assert_int_equal(f->ctx.n_rets, 0);
}

/* ---- the application ---- */

static struct fp_evl_ops app_ops;

static int app_init(struct fp_evl *evl, void *arg)
{
	struct fake *f = arg;

	f->evl = evl;
	fp_evl_set_user(evl, f);
	fp_evl_listen(evl, 7, f);
	return 0;
}

static void *app_accept(struct fp_evl_conn *c, void *larg)
{
	struct fake *f = larg;

	assert_ptr_equal(f, fp_evl_user(fp_evl_of(c)));
	if (f->refuse)
		return NULL;
	f->conn = c;
	return f;
}

static void app_connected(struct fp_evl_conn *c, int status)
{
	struct fake *f = fp_evl_user(fp_evl_of(c));

	f->connected++;
	f->connected_status = status;
	f->conn = status ? NULL : c;
}

static size_t app_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct fake *f = fp_evl_conn_user(c);

	if (f->reads < 32) {
		f->read_ptr[f->reads] = data;
		f->read_len[f->reads] = len;
	}
	f->reads++;
	if (f->echo_room) {         /* fp-echo's server */
		size_t room = app_ops.max_pending - fp_evl_pending(c);
		size_t n = len < room ? len : room;

		return n && fp_evl_write(c, data, n) == 0 ? n : 0;
	}
	if (!f->req || len < f->req)
		return 0;
	if (f->echo && f->soft && fp_evl_write(c, data, f->req))
		return 0;
	if (f->echo && !f->soft)
		assert_int_equal(fp_evl_write(c, data, f->req), 0);
	if (f->close_in_read)
		fp_evl_close(c);
	return f->req;
}

static void app_drained(struct fp_evl_conn *c)
{
	struct fake *f = fp_evl_conn_user(c);

	f->drained++;
}

static void app_closed(struct fp_evl_conn *c, int status)
{
	struct fake *f = fp_evl_conn_user(c);

	f->closed++;
	f->closed_status = status;
	if (f->write_in_closed) {
		int rc = fp_evl_write(c, f->write_in_closed, strlen(f->write_in_closed));

		assert_int_equal(rc, status ? -EPIPE : 0);
	}
	f->conn = NULL;
}

static void app_udp(struct fp_evl *evl, uint16_t lport, uint32_t raddr, uint16_t rport,
		    const uint8_t *data, size_t len)
{
	assert_int_equal(fp_evl_udp_send(evl, lport, raddr, rport, data, len), 0);
}

static struct fp_evl_ops app_ops = {
	.accept = app_accept, .connected = app_connected, .read = app_read,
	.drained = app_drained, .closed = app_closed, .udp_recv = app_udp,
	.init = app_init, .max_pending = 64 * 1024,
};

/* ---- fixture ---- */

static int setup_with(void **state, bool steal)
{
	struct fake *f = calloc(1, sizeof(*f));
	void *tp;

	if (!f || fp_test_pool_setup(&tp))
		return -1;
	f->tp = tp;
	f->cfg.n_workers = steal ? 2 : 1;
	f->cfg.stats_name = "";
	f->cfg.quiet = true;
	f->cfg.sched = steal ? FP_SCHED_STEAL : FP_SCHED_PART;
	f->cfg.steal_force = steal;   /* the home leaves its ready flows to a thief */
	fp_evl_app(&f->app, &app_ops, f);
	f->run.cfg = &f->cfg;
	if (steal && rt_steal_setup(&f->run))
		return -1;
	f->run.wake_fd = -1;
	f->run.app = &f->app;
	if (rt_ctx_init(&f->ctx, &f->run, 0, &fake_ops, f, 1000))
		return -1;
	if (f->app.init(&f->ctx, f->app.arg))
		return -1;
	rt_ctx_flush(&f->ctx);          /* the LISTEN; its return goes up next round */
	*state = f;
	return 0;
}

static int setup(void **state) { return setup_with(state, false); }
static int setup_steal(void **state) { return setup_with(state, true); }

static int teardown(void **state)
{
	struct fake *f = *state;
	int rc;

	f->app.fini(&f->ctx);
	rt_ctx_fini(&f->ctx);
	for (int i = 0; i < f->n_flows; i++) {
		while (f->flows[i].rx_n)   /* what a transport frees when it closes */
			flow_rx_done(f, &f->flows[i], f->flows[i].rx_left[0]);
		free(f->flows[i].out);
	}
	if (f->run.sh)
		rt_steal_teardown(&f->run);
	void *tp = f->tp;
	rc = fp_test_pool_teardown(&tp);
	free(f);
	return rc;
}

/* A flow accepted and settled; returns it. */
static struct fp_flow *accepted(struct fake *f, uint32_t window)
{
	struct fp_flow *fl = flow_new(f, window);

	push_knock(f, fl);
	settle(f);
	assert_non_null(f->conn);
	assert_true(fl->cookie != 0);
	assert_int_equal(fp_evl_conns(f->evl), 1);
	return fl;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)fp_test_rand(&seed);
}

/* ---- tests ---- */

/* A request that arrives whole is read in place: the pointer is the receive buffer's. */
static void test_zero_copy_whole_request(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	uint8_t msg[64];
	const uint8_t *at;

	fill(msg, sizeof(msg), 1);
	f->req = 64;
	f->echo = true;
	at = push_recv(f, fl, msg, sizeof(msg));
	settle(f);
	assert_int_equal(f->reads, 1);
	assert_ptr_equal(f->read_ptr[0], at);
	assert_int_equal(f->read_len[0], 64);
	assert_int_equal(fl->rx_n, 0);              /* recv_done covered it */
	assert_int_equal(fl->out_len, 64);
	assert_memory_equal(fl->out, msg, 64);
	assert_int_equal(fl->sendvs, 1);
	assert_int_equal(f->drained, 1);
}

/* Pipelined requests in one segment: each is consumed in place, none copied. */
static void test_pipelined_requests_in_place(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	uint8_t msg[3 * 50];
	const uint8_t *at;

	fill(msg, sizeof(msg), 2);
	f->req = 50;
	f->echo = true;
	at = push_recv(f, fl, msg, sizeof(msg));
	settle(f);
	assert_int_equal(f->reads, 3);
	for (int i = 0; i < 3; i++)
		assert_ptr_equal(f->read_ptr[i], at + 50 * i);
	assert_int_equal(fl->out_len, sizeof(msg));
	assert_int_equal(fl->sendvs, 1);            /* three writes, one sendv */
	assert_memory_equal(fl->out, msg, sizeof(msg));
}

/* A request split over segments (and rounds) is shown contiguously once complete. */
static void test_split_request_contiguous(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	uint8_t msg[300];

	fill(msg, sizeof(msg), 3);
	f->req = 100;
	f->echo = true;
	push_recv(f, fl, msg, 60);                  /* first 60 bytes of request 1 */
	settle(f);
	assert_int_equal(f->reads, 1);
	assert_int_equal(f->read_len[0], 60);
	assert_int_equal(fl->rx_n, 0);              /* copied aside, so given back */
	push_recv(f, fl, msg + 60, 70);             /* rest of 1, 30 of 2 */
	push_recv(f, fl, msg + 130, 170);           /* rest of 2, all of 3 (same round) */
	settle(f);
	assert_true(f->reads >= 4);
	assert_int_equal(f->read_len[1], 130);
	assert_memory_equal(f->read_ptr[1], msg, 100);
	assert_int_equal(fl->rx_n, 0);
	assert_int_equal(fl->out_len, 300);
	assert_memory_equal(fl->out, msg, 300);
}

/* Writes larger than the window go out in order over several SENTs, one sendv at a time. */
static void test_partial_sendv_preserves_order(void **state)
{
	struct fake *f = *state;
	const uint32_t W = 1000;
	struct fp_flow *fl = accepted(f, W);
	static uint8_t data[40000];
	uint64_t seed = 4;
	size_t off = 0;

	fill(data, sizeof(data), 5);
	/* Writes of random sizes, some within one round, some from outside the handler. */
	while (off < sizeof(data)) {
		size_t n = 1 + fp_test_below(&seed, 3000);

		if (n > sizeof(data) - off)
			n = sizeof(data) - off;
		assert_int_equal(fp_evl_write(f->conn, data + off, n), 0);
		off += n;
		if (fp_test_below(&seed, 2)) {
			unsigned before = fl->sendvs;

			ack(f, fl, W);
			settle(f);
			assert_true(fl->sendvs - before <= 2);
		}
	}
	settle(f);
	for (int i = 0; i < 100 && fl->out_len < sizeof(data); i++) {
		unsigned before = fl->sendvs;

		settle(f);
		assert_int_equal(fl->sendvs, before);  /* blocked: nothing until SENT */
		ack(f, fl, W);
		settle(f);
	}
	assert_int_equal(fl->out_len, sizeof(data));
	assert_memory_equal(fl->out, data, sizeof(data));
	assert_int_equal(fp_evl_pending(f->conn), 0);
}

/* References and copies mix in one output, in order, across partial sendvs: a reference
 * goes out from where it lies (an iovec into it), counts as pending and not as memory
 * held, and after a copy that filled part of a chunk the next copy does not write into
 * the reference. */
static void test_write_ref_mixed_with_copies(void **state)
{
	struct fake *f = *state;
	const uint32_t W = 1500;
	struct fp_flow *fl = accepted(f, 0);
	static uint8_t data[60000];
	uint64_t seed = 9;
	size_t off = 0;

	fill(data, sizeof(data), 3);
	fl->ref_lo = data;
	fl->ref_hi = data + sizeof(data);
	for (int i = 0; off < sizeof(data); i++) {
		size_t n = 1 + fp_test_below(&seed, i % 5 == 0 ? 20000 : 700);
		if (n > sizeof(data) - off)
			n = sizeof(data) - off;
		size_t held = fp_evl_out_total(fp_evl_of(f->conn));
		if (i % 2) {
			assert_int_equal(fp_evl_write_ref(f->conn, data + off, n), 0);
			assert_int_equal(fp_evl_out_total(fp_evl_of(f->conn)), held);
		} else {
			assert_int_equal(fp_evl_write(f->conn, data + off, n), 0);
			assert_int_equal(fp_evl_out_total(fp_evl_of(f->conn)), held + n);
		}
		off += n;
	}
	assert_int_equal(fp_evl_pending(f->conn), sizeof(data));
	settle(f);
	for (int i = 0; i < 1000 && fl->out_len < sizeof(data); i++) {
		ack(f, fl, W);
		settle(f);
	}
	assert_int_equal(fl->out_len, sizeof(data));
	assert_memory_equal(fl->out, data, sizeof(data));
	assert_int_equal(fp_evl_pending(f->conn), 0);
	assert_int_equal(fp_evl_out_total(fp_evl_of(f->conn)), 0);
	assert_true(fl->ref_iovs > 0);
	/* a reference over max_pending is refused whole, as a copy is */
	assert_int_equal(fp_evl_write_ref(f->conn, data, 70 * 1024), -ENOBUFS);
	assert_int_equal(fp_evl_pending(f->conn), 0);
}

/* A connection that moves to another worker takes its share of the output memory
 * (out_total) with it: its copies, not what its references name. */
static void test_moved_conn_carries_only_copied_output(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 0);
	static uint8_t data[6000];
	struct fp_app moving;

	fill(data, sizeof(data), 11);
	assert_int_equal(fp_evl_write(f->conn, data, 1000), 0);
	assert_int_equal(fp_evl_write_ref(f->conn, data + 1000, 5000), 0);
	assert_int_equal(fp_evl_out_total(f->evl), 1000);
	app_ops.movable = true;                 /* the hooks of a movable application */
	fp_evl_app(&moving, &app_ops, f);
	app_ops.movable = false;
	assert_non_null(moving.flow_leave);
	moving.flow_leave(&f->ctx, fl, fl->cookie);
	assert_int_equal(fp_evl_out_total(f->evl), 0);
	moving.flow_arrive(&f->ctx, fl, fl->cookie);
	assert_int_equal(fp_evl_out_total(f->evl), 1000);
	for (int i = 0; i < 100 && fl->out_len < sizeof(data); i++) {
		ack(f, fl, 1500);
		settle(f);
	}
	assert_int_equal(fl->out_len, sizeof(data));
	assert_memory_equal(fl->out, data, sizeof(data));
	assert_int_equal(fp_evl_out_total(f->evl), 0);
}

static unsigned n_leaving, n_arrived;
static void app_leaving(struct fp_evl_conn *c) { (void)c; n_leaving++; }
static void app_arrived(struct fp_evl_conn *c) { (void)c; n_arrived++; }

/* An open connection that moves tells the application on both sides; one it has closed,
 * still draining its output, moves without a word to it (its state may be gone: fp-kv
 * frees it at close), and its output still arrives whole. */
static void test_moved_closed_conn_leaves_the_app_alone(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 0);
	static uint8_t data[5000];
	struct fp_app moving;

	fill(data, sizeof(data), 12);
	app_ops.movable = true;
	app_ops.leaving = app_leaving;
	app_ops.arrived = app_arrived;
	fp_evl_app(&moving, &app_ops, f);
	app_ops.movable = false;
	n_leaving = n_arrived = 0;   /* the callbacks are read at each move: reset at the end */
	moving.flow_leave(&f->ctx, fl, fl->cookie);
	moving.flow_arrive(&f->ctx, fl, fl->cookie);
	assert_int_equal(n_leaving, 1);
	assert_int_equal(n_arrived, 1);
	assert_int_equal(fp_evl_write(f->conn, data, sizeof(data)), 0);
	fp_evl_close(f->conn);
	moving.flow_leave(&f->ctx, fl, fl->cookie);
	moving.flow_arrive(&f->ctx, fl, fl->cookie);
	assert_int_equal(n_leaving, 1);
	assert_int_equal(n_arrived, 1);
	for (int i = 0; i < 100 && fl->out_len < sizeof(data); i++) {
		ack(f, fl, 1500);
		settle(f);
	}
	assert_int_equal(fl->out_len, sizeof(data));
	assert_memory_equal(fl->out, data, sizeof(data));
	app_ops.leaving = app_ops.arrived = NULL;
}

/* A worker 1 beside the fixture's (worker 0, the home), with its own evl. */
static void thief_open(struct fake *f, struct fp_ctx *thief)
{
	struct fp_evl *home = f->evl;

	assert_int_equal(rt_ctx_init(thief, &f->run, 1, &fake_ops, f, 1000), 0);
	assert_int_equal(f->app.init(thief, f->app.arg), 0);
	f->evl = home;
	thief->n_calls = 0;                     /* its LISTEN: not the test's */
}

/*
 * --sched steal: another worker (a thief, with its own ctx and evl) runs one batch of a
 * connection: what the callbacks queue goes to the thief's call array (steal.c sends it
 * home), the output it writes counts against the home's total, and after the batch the
 * connection is the home's again, on no list of the thief's; the returns, handed to the
 * home with the next batch, finish the exchange there.
 */
static void test_a_thief_runs_one_batch(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	struct fp_evl *home = f->evl, *thief_evl;
	struct fp_ctx thief;
	static uint8_t req[100];
	struct fp_cond k;

	fill(req, sizeof(req), 21);
	f->req = sizeof(req);
	f->echo = true;
	thief_open(f, &thief);
	thief_evl = fp_ctx_user(&thief);
	push_recv(f, fl, req, sizeof(req));
	k = f->ctx.conds[0];                    /* the batch steal.c would build */
	f->ctx.n_conds = 0;

	f->app.handle(&thief, &k, 1, NULL, 0);
	assert_int_equal(f->reads, 1);
	assert_int_equal(f->ctx.n_calls, 0);    /* nothing queued on the home */
	assert_int_equal(thief.n_calls, 2);     /* recv_done, sendv: for the flow */
	for (unsigned i = 0; i < thief.n_calls; i++)
		assert_ptr_equal(thief.calls[i].flow, fl);
	assert_ptr_equal(fp_evl_of(f->conn), home);
	assert_null(thief_evl->visiting);
	assert_null(thief_evl->dirty);
	assert_null(home->dirty);
	assert_int_equal(fp_evl_out_total(home), sizeof(req));
	assert_int_equal(fp_evl_out_total(thief_evl), 0);
	assert_int_equal(fp_evl_conns(thief_evl), 0);

	rt_ctx_flush(&thief);                   /* executed "at home" */
	assert_int_equal(fl->out_len, sizeof(req));
	assert_memory_equal(fl->out, req, sizeof(req));
	f->app.handle(&f->ctx, NULL, 0, thief.rets, thief.n_rets);   /* the next batch */
	thief.n_rets = 0;
	assert_int_equal(fp_evl_out_total(home), 0);
	assert_int_equal(fp_evl_pending(f->conn), 0);
	assert_int_equal(fl->rx_n, 0);          /* the request's buffer went back */

	f->app.fini(&thief);
	rt_ctx_fini(&thief);
}

/*
 * rt/steal.c with evl on both sides, stepped by hand (every batch runs on the thief):
 * the ACCEPT queued in the home's ordinary round returns with the flow's first batch, not
 * in a round of the home's; a write from a timer to a connection whose batch is out
 * executes at once and its return waits for that batch to come home, then comes in a
 * batch of its own; the returns of a batch whose connection waits to close (EOF behind
 * output) come without a new event, so the close happens.
 */
static void test_steal_returns_go_with_their_flow(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = flow_new(f, 1 << 20);
	struct fp_ctx thief;
	static uint8_t req[100];

	fill(req, sizeof(req), 22);
	f->req = sizeof(req);
	f->echo = true;
	app_ops.drained = NULL;                 /* nothing asks for a batch's returns early */
	thief_open(f, &thief);
	round_(f);                              /* the LISTEN's return */
	push_knock(f, fl);
	round_(f);                              /* ordinary: accept, ACCEPT executed */
	assert_non_null(f->conn);
	assert_int_equal(f->ctx.n_rets, 0);     /* its return is the flow's */
	assert_int_equal(fp_shuf_ready_count(f->run.sh, 0), 1);
	assert_int_equal(f->conn->inflight, 1);
	assert_true(fp_evl_conn_busy(f->conn));
	assert_int_equal(rt_ctx_round(&thief), 1);   /* steals it: the ACCEPT's return */
	assert_int_equal(f->conn->inflight, 0);
	round_(f);                              /* it comes home: nothing to execute */
	assert_false(fp_evl_conn_busy(f->conn));

	push_recv(f, fl, req, 50);              /* half a request: nothing to answer */
	round_(f);                              /* posted: ready, for a thief */
	assert_true(fp_evl_conn_busy(f->conn));
	assert_int_equal(fp_evl_write(f->conn, "t", 1), 0);   /* a timer's, against the rule */
	rt_ctx_flush(&f->ctx);
	assert_int_equal(fl->out_len, 1);       /* executed at once */
	assert_int_equal(f->ctx.n_rets, 0);     /* its return waits for the flow */
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the half request */
	round_(f);                              /* its calls; the timer's return: a batch */
	assert_int_equal(fp_shuf_ready_count(f->run.sh, 0), 1);
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the return */
	assert_false(f->conn->sendv_inflight);
	round_(f);
	push_recv(f, fl, req + 50, sizeof(req) - 50);
	round_(f);
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the whole request: the echo */
	round_(f);
	assert_int_equal(fl->out_len, 1 + sizeof(req));
	assert_memory_equal(fl->out + 1, req, sizeof(req));
	assert_true(f->conn->sendv_inflight);   /* the echo's return: with the next event */
	assert_false(fp_evl_conn_busy(f->conn));
	assert_int_equal(fp_evl_write(f->conn, "v", 1), 0);   /* a timer's, behind it */
	rt_ctx_flush(&f->ctx);
	assert_int_equal(fl->out_len, 1 + sizeof(req));   /* it waits for that return: */
	assert_int_equal(fp_shuf_ready_count(f->run.sh, 0), 1);   /* which comes now */
	assert_int_equal(rt_ctx_round(&thief), 1);
	round_(f);
	assert_int_equal(fl->out_len, 2 + sizeof(req));
	assert_int_equal(fl->out[1 + sizeof(req)], 'v');
	assert_int_equal(rt_ctx_round(&thief), 0);   /* that sendv's return stays: nothing waits */
	round_(f);

	push_simple(f, fl, FP_COND_EOF, 0);
	fl->window = 0;                         /* what it writes now waits */
	assert_int_equal(fp_evl_write(f->conn, "u", 1), 0);   /* not busy: may */
	rt_ctx_flush(&f->ctx);
	round_(f);
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the write's return */
	round_(f);
	assert_int_equal(rt_ctx_round(&thief), 1);   /* EOF: close once drained */
	ack(f, fl, 1 << 20);
	for (int i = 0; i < 20 && fl->live; i++) {
		round_(f);
		rt_ctx_round(&thief);
	}
	assert_false(fl->live);                 /* drained, then closed */
	assert_int_equal(fl->out_len, 3 + sizeof(req));
	settle(f);
	assert_int_equal(fp_evl_conns(f->evl), 0);
	f->app.fini(&thief);
	rt_ctx_fini(&thief);
	app_ops.drained = app_drained;
}

/*
 * --sched steal: a connection that came and went in one round (KNOCK and EOF together, in
 * the home's ordinary round) is closed while its flow waits for the ACCEPT's return: the
 * CLOSE waits for that batch, and its one return comes home after it, so the connection
 * is freed once, after the last call naming it (its return came at once and again after
 * the batch: freed between the two, a use after free; fp-kv under CI).
 */
static void test_steal_a_close_behind_its_flows_batch(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = flow_new(f, 1 << 20);
	struct fp_ctx thief;
	struct fp_cond *k;

	thief_open(f, &thief);
	round_(f);                              /* the LISTEN's return */
	push_knock(f, fl);
	k = rt_cond_push(&f->ctx);              /* behind the handshake: the listener's cookie */
	k->type = FP_COND_EOF;
	k->flow = fl;
	k->cookie = f->listen_cookie;
	round_(f);                              /* ordinary: accepted, closed at once */
	assert_int_equal(f->calls[FP_CALL_ACCEPT], 1);
	assert_int_equal(f->calls[FP_CALL_CLOSE], 0);   /* it waits for the flow's batch */
	assert_true(fl->live);
	assert_int_equal(f->ctx.n_rets, 0);     /* and so does its return */
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the ACCEPT's return */
	assert_int_equal(fp_evl_conns(f->evl), 1);
	round_(f);                              /* home: the close executes, its return */
	assert_false(fl->live);
	settle(f);
	assert_int_equal(fp_evl_conns(f->evl), 0);
	assert_int_equal(fp_evl_conns(fp_ctx_user(&thief)), 0);
	f->app.fini(&thief);
	rt_ctx_fini(&thief);
}

/*
 * --sched steal: a sendv refused for want of buffers (-ENOBUFS) in a stolen batch is
 * offered again at once: its return comes without an event (none would say that buffers
 * are back), as without the scheduler, where every round offers it again. Before, the
 * return waited with the flow for the peer's next segment: an answer stayed unsent.
 */
static void test_steal_sendv_short_of_buffers_is_retried(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = flow_new(f, 1 << 20);
	struct fp_ctx thief;
	static uint8_t req[100];

	fill(req, sizeof(req), 23);
	f->req = sizeof(req);
	f->echo = true;
	thief_open(f, &thief);
	round_(f);                              /* the LISTEN's return */
	push_knock(f, fl);
	round_(f);
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the ACCEPT's return */
	round_(f);
	push_recv(f, fl, req, sizeof(req));
	round_(f);
	fl->nobufs = 1;
	assert_int_equal(rt_ctx_round(&thief), 1);   /* the echo: its sendv goes home */
	round_(f);                              /* refused: its return is the flow's news */
	assert_int_equal(fl->sendvs, 1);
	assert_int_equal(fl->out_len, 0);
	assert_int_equal(fp_shuf_ready_count(f->run.sh, 0), 1);
	assert_int_equal(rt_ctx_round(&thief), 1);   /* -ENOBUFS: offered again */
	round_(f);
	assert_int_equal(fl->sendvs, 2);
	assert_int_equal(fl->out_len, sizeof(req));
	assert_memory_equal(fl->out, req, sizeof(req));
	f->app.fini(&thief);
	rt_ctx_fini(&thief);
}

/* Past max_pending a write is refused whole. */
static void test_enobufs_over_max_pending(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 0);
	static uint8_t data[64 * 1024];

	assert_int_equal(fp_evl_write(f->conn, data, 60000), 0);
	assert_int_equal(fp_evl_write(f->conn, data, 6000), -ENOBUFS);
	assert_int_equal(fp_evl_pending(f->conn), 60000);
	assert_int_equal(fp_evl_write(f->conn, data, 64 * 1024 - 60000), 0);
	assert_int_equal(fp_evl_write(f->conn, data, 1), -ENOBUFS);
	settle(f);
	ack(f, fl, 1 << 20);
	settle(f);
	assert_int_equal(fl->out_len, 64 * 1024);
	assert_int_equal(fp_evl_write(f->conn, data, 1), 0);
}

/* fp_evl_writev: pieces of random sizes (empty ones too, and ones that cross chunks) arrive
 * whole and in order, after the partial fill of a chunk by a plain write; a vector over
 * max_pending writes none of its pieces. */
static void test_writev_all_or_nothing(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	static uint8_t data[30000];
	uint64_t seed = 9;
	size_t off = 0;

	fill(data, sizeof(data), 6);
	assert_int_equal(fp_evl_write(f->conn, data, 7), 0);
	off = 7;
	while (off < sizeof(data)) {
		struct iovec v[4];
		unsigned n = 1 + (unsigned)fp_test_below(&seed, 4);

		for (unsigned i = 0; i < n; i++) {
			size_t k = fp_test_below(&seed, 5000);

			if (k > sizeof(data) - off)
				k = sizeof(data) - off;
			v[i] = (struct iovec){ data + off, k };
			off += k;
		}
		assert_int_equal(fp_evl_writev(f->conn, v, n), 0);
	}
	assert_int_equal(fp_evl_pending(f->conn), sizeof(data));
	struct iovec big[2] = { { data, 20000 }, { data, 64 * 1024 - 20000 - sizeof(data) + 1 } };
	assert_int_equal(fp_evl_writev(f->conn, big, 2), -ENOBUFS);
	assert_int_equal(fp_evl_pending(f->conn), sizeof(data));   /* not even the first */
	settle(f);
	ack(f, fl, 1 << 20);
	settle(f);
	assert_int_equal(fl->out_len, sizeof(data));
	assert_memory_equal(fl->out, data, sizeof(data));
}

static int setup_budget(void **state)
{
	app_ops.max_total_pending = 10000;   /* one worker: its share is all of it */
	return setup(state);
}

static int teardown_budget(void **state)
{
	app_ops.max_total_pending = 0;
	return teardown(state);
}

/* The output budget judges a vector as its pieces written one after another: an empty
 * output may take one piece past the budget (a client that reads is served), not a whole
 * vector of them (kv flushes every staged answer in one vector: 200 clients that never
 * read once got a flush of several answers each past the budget, 647 MB held). */
static void test_writev_budget_as_separate_writes(void **state)
{
	struct fake *f = *state;
	static uint8_t data[12000];
	struct iovec two[2] = { { data, 6000 }, { data, 6000 } };
	struct iovec one[2] = { { data, 12000 }, { data, 0 } };

	(void)accepted(f, 0);
	assert_int_equal(fp_evl_writev(f->conn, two, 2), -ENOBUFS);
	assert_int_equal(fp_evl_pending(f->conn), 0);
	assert_int_equal(fp_evl_writev(f->conn, one, 2), 0);      /* one piece (and an empty) */
	assert_int_equal(fp_evl_pending(f->conn), 12000);
	assert_int_equal(fp_evl_write(f->conn, data, 1), -ENOBUFS);
	assert_int_equal(fp_evl_writev(f->conn, two, 1), -ENOBUFS);
	assert_int_equal(fp_evl_pending(f->conn), 12000);
}

/* The peer's EOF: closed(0) once, what it writes still goes out, then CLOSE, then freed. */
static void test_eof_drains_then_closes(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 4);
	const char *bye = "goodbye, and thanks";

	f->write_in_closed = bye;
	push_simple(f, fl, FP_COND_EOF, 0);
	round_(f);
	assert_int_equal(f->closed, 1);
	assert_int_equal(f->closed_status, 0);
	for (int i = 0; i < 20 && fl->live; i++) {
		assert_int_equal(f->calls[FP_CALL_CLOSE], 0);   /* not before it drained */
		ack(f, fl, 4);
		settle(f);
	}
	assert_false(fl->live);
	assert_false(fl->aborted);
	assert_int_equal(fl->out_len, strlen(bye));
	assert_memory_equal(fl->out, bye, strlen(bye));
	assert_int_equal(f->closed, 1);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* DEAD: closed(status) once, writes refused, CLOSE releases the flow, then it is freed. */
static void test_dead_reports_status(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);

	f->write_in_closed = "x";
	push_simple(f, fl, FP_COND_DEAD, -ECONNRESET);
	round_(f);
	assert_int_equal(f->closed, 1);
	assert_int_equal(f->closed_status, -ECONNRESET);
	assert_false(fl->live);
	assert_int_equal(fp_evl_conns(f->evl), 1);   /* its CLOSE's return not yet seen */
	settle(f);
	assert_int_equal(fp_evl_conns(f->evl), 0);
	assert_int_equal(f->calls[FP_CALL_SENDV], 0);
}

/* DEAD in the round where a sendv's return comes up, with data still copied aside: the
 * connection outlives both (ASan checks), and nothing is leaked. */
static void test_dead_with_sendv_in_flight(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 10);
	uint8_t msg[40] = { 1 };

	f->req = 30;
	f->echo = true;
	push_recv(f, fl, msg, 40);                  /* echoes 30, keeps 10 aside */
	round_(f);                                  /* sendv executes, takes 10 */
	assert_int_equal(fl->out_len, 10);
	push_simple(f, fl, FP_COND_DEAD, -ETIMEDOUT);
	settle(f);
	assert_int_equal(f->closed, 1);
	assert_int_equal(f->closed_status, -ETIMEDOUT);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* The application closes (from outside the handler, as from a timer) with a sendv in
 * flight and output pending: the rest follows, then CLOSE; no callback after close. */
static void test_app_close_outside_handler(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 8);
	struct fp_evl_conn *c = f->conn;

	assert_int_equal(fp_evl_write(c, "0123456789abcdef", 16), 0);
	assert_int_equal(f->ctx.n_calls, 1);        /* queued at once: a timer's write */
	rt_ctx_flush(&f->ctx);
	fp_evl_close(c);
	assert_int_equal(fp_evl_write(c, "z", 1), -EPIPE);
	for (int i = 0; i < 10 && fl->live; i++) {
		ack(f, fl, 8);
		settle(f);
	}
	assert_false(fl->live);
	assert_int_equal(fl->out_len, 16);
	assert_memory_equal(fl->out, "0123456789abcdef", 16);
	assert_int_equal(f->closed, 0);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* Abort from outside the handler right after a queued sendv: both execute in order, the
 * connection lives until their returns are seen. */
static void test_abort_after_queued_sendv(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 100);

	assert_int_equal(fp_evl_write(f->conn, "hello", 5), 0);
	fp_evl_abort(f->conn);
	rt_ctx_flush(&f->ctx);
	assert_true(fl->aborted);
	assert_int_equal(fl->out_len, 5);
	assert_int_equal(fp_evl_conns(f->evl), 1);
	settle(f);
	assert_int_equal(fp_evl_conns(f->evl), 0);
	assert_int_equal(f->closed, 0);
}

/* Data for a connection the application closed is still given back to the transport. */
static void test_recv_after_close_given_back(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 0);
	uint8_t msg[10] = { 0 };

	assert_int_equal(fp_evl_write(f->conn, "abc", 3), 0);
	settle(f);                                   /* window 0: pending */
	fp_evl_close(f->conn);
	push_recv(f, fl, msg, 10);
	settle(f);
	assert_int_equal(f->reads, 0);
	assert_int_equal(fl->rx_n, 0);
	assert_true(fl->live);
	ack(f, fl, 100);
	settle(f);
	assert_false(fl->live);
	assert_int_equal(fl->out_len, 3);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

static void test_refused_accept(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = flow_new(f, 100);

	f->refuse = true;
	push_knock(f, fl);
	settle(f);
	assert_false(fl->live);
	assert_int_equal(f->calls[FP_CALL_ACCEPT], 0);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* connect: success, a refused CONNECT call, and a CONNECTED condition with an error. */
static void test_connect_outcomes(void **state)
{
	struct fake *f = *state;
	struct fp_evl_conn *c;
	struct fp_flow *fl;
	struct fp_cond *k;

	c = fp_evl_connect(f->evl, 0x0a000001, 80, f);
	assert_non_null(c);
	assert_int_equal(fp_evl_write(c, "early", 5), 0);   /* buffered until connected */
	settle(f);
	fl = flow_new(f, 100);
	fl->cookie = (uint64_t)(uintptr_t)c;
	k = rt_cond_push(&f->ctx);
	k->type = FP_COND_CONNECTED;
	k->flow = fl;
	k->cookie = fl->cookie;
	settle(f);
	assert_int_equal(f->connected, 1);
	assert_int_equal(f->connected_status, 0);
	assert_int_equal(fl->out_len, 5);
	fp_evl_abort(c);
	settle(f);
	assert_true(fl->aborted);
	assert_int_equal(fp_evl_conns(f->evl), 0);

	f->connect_ret = -ENETUNREACH;
	assert_non_null(fp_evl_connect(f->evl, 0x0a000001, 80, f));
	settle(f);
	assert_int_equal(f->connected, 2);
	assert_int_equal(f->connected_status, -ENETUNREACH);
	assert_int_equal(fp_evl_conns(f->evl), 0);

	f->connect_ret = 0;
	c = fp_evl_connect(f->evl, 0x0a000001, 80, f);
	settle(f);
	fl = flow_new(f, 100);
	k = rt_cond_push(&f->ctx);
	k->type = FP_COND_CONNECTED;
	k->status = -ECONNREFUSED;
	k->flow = fl;
	k->cookie = (uint64_t)(uintptr_t)c;
	settle(f);
	assert_int_equal(f->connected, 3);
	assert_int_equal(f->connected_status, -ECONNREFUSED);
	assert_false(fl->live);                     /* the dead flow was released */
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

static void test_udp_echo(void **state)
{
	struct fake *f = *state;
	struct fp_mbuf *m = fp_pool_get(&f->tp->cache);
	struct fp_cond *k;
	uint8_t msg[200];
	uint8_t *p;

	fill(msg, sizeof(msg), 9);
	fp_evl_udp_bind(f->evl, 7);
	rt_ctx_flush(&f->ctx);
	p = fp_mbuf_append(m, sizeof(msg));
	memcpy(p, msg, sizeof(msg));
	k = rt_cond_push(&f->ctx);
	k->type = FP_COND_UDP_RECV;
	k->m = m;
	k->data = p;
	k->len = sizeof(msg);
	k->lport = 7;
	k->rport = 5353;
	k->raddr = 0x0a000002;
	settle(f);
	assert_int_equal(f->calls[FP_CALL_UDP_DONE], 1);
	assert_int_equal(f->udp_out_len, sizeof(msg));
	assert_int_equal(f->udp_rport, 5353);
	assert_memory_equal(f->udp_out, msg, sizeof(msg));
}

/* A failed listen stops the run with its status. */
static void test_listen_error_stops(void **state)
{
	struct fake *f = *state;

	f->listen_ret = -EADDRINUSE;
	fp_evl_listen(f->evl, 8080, f);
	rt_ctx_flush(&f->ctx);
	settle(f);
	assert_true(atomic_load(&f->run.stop));
	assert_int_equal(atomic_load(&f->run.status), -EADDRINUSE);
}

/* Many connections, random traffic and endings; everything given back at the end. */
static void test_many_connections_leak_free(void **state)
{
	struct fake *f = *state;
	uint64_t seed = fp_test_seed();
	struct fp_flow *fls[8];
	bool ended[8] = { false };
	uint8_t msg[300];

	f->req = 16;
	f->echo = true;
	for (int i = 0; i < 8; i++) {
		fls[i] = flow_new(f, (uint32_t)(1 + fp_test_below(&seed, 64)));
		push_knock(f, fls[i]);
	}
	settle(f);
	assert_int_equal(fp_evl_conns(f->evl), 8);
	for (int r = 0; r < 20; r++) {
		for (int i = 0; i < 8; i++) {
			if (!fls[i]->live || ended[i] || fls[i]->rx_n > MAX_RX - 4)
				continue;
			fill(msg, sizeof(msg), seed + (uint64_t)r);
			push_recv(f, fls[i], msg, (uint32_t)(1 + fp_test_below(&seed, sizeof(msg))));
			ack(f, fls[i], (uint32_t)(1 + fp_test_below(&seed, 64)));
			if (fp_test_below(&seed, 16) == 0 && (ended[i] = true))
				push_simple(f, fls[i], fp_test_below(&seed, 2) ? FP_COND_EOF : FP_COND_DEAD,
					    -ECONNRESET);
		}
		settle(f);
	}
	for (int i = 0; i < 8; i++)
		if (fls[i]->live)
			push_simple(f, fls[i], FP_COND_DEAD, -ECONNRESET);
	settle(f);
	for (int i = 0; i < 8; i++)
		assert_false(fls[i]->live);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* The ACK came after the sendv executed: its SENT and the sendv's short return go up in
 * the same round, and the SENT must win (returns are processed before conditions). */
static void test_sent_with_partial_return_same_round(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1000);
	static uint8_t data[3000];

	fill(data, sizeof(data), 6);
	assert_int_equal(fp_evl_write(f->conn, data, sizeof(data)), 0);
	rt_ctx_flush(&f->ctx);                      /* took 1000 */
	ack(f, fl, 1000);
	settle(f);
	assert_int_equal(fl->out_len, 2000);
	ack(f, fl, 1000);
	settle(f);
	assert_int_equal(fl->out_len, 3000);
	assert_memory_equal(fl->out, data, sizeof(data));
}

/* A read callback that closes: no more reads for the rest of the segment, the reply goes
 * out, then CLOSE. */
static void test_close_from_read(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	uint8_t msg[40];

	fill(msg, sizeof(msg), 7);
	f->req = 20;
	f->echo = true;
	f->close_in_read = true;
	push_recv(f, fl, msg, sizeof(msg));
	settle(f);
	assert_int_equal(f->reads, 1);
	assert_int_equal(fl->out_len, 20);
	assert_false(fl->live);
	assert_false(fl->aborted);
	assert_int_equal(fl->rx_n, 0);
	assert_int_equal(f->closed, 0);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* A condition naming the connection in the round its CLOSE's return comes up (a transport
 * may push one while executing the batch that holds the CLOSE): still alive then. */
static void test_cond_in_round_of_close_return(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 100);

	push_simple(f, fl, FP_COND_DEAD, -ECONNRESET);
	round_(f);                                  /* DEAD seen, CLOSE executed */
	assert_false(fl->live);
	push_simple(f, fl, FP_COND_SENT, 0);        /* pushed during that batch */
	settle(f);
	assert_int_equal(f->closed, 1);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* The handshake's last ACK carried data: the RECV is right behind its KNOCK in the same
 * round and still carries the listener's cookie (net.h: fp_tcp_set_cookie). */
static void test_recv_behind_knock_same_round(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = flow_new(f, 1 << 20), *fl2 = flow_new(f, 1 << 20);
	uint8_t msg[32];
	const uint8_t *at;

	fill(msg, sizeof(msg), 8);
	f->req = 32;
	f->echo = true;
	push_knock(f, fl);
	fl->cookie = f->listen_cookie;              /* not accepted yet */
	at = push_recv(f, fl, msg, sizeof(msg));
	push_simple(f, fl, FP_COND_EOF, 0);
	round_(f);
	assert_int_equal(f->reads, 1);
	assert_ptr_equal(f->read_ptr[0], at);
	assert_int_equal(f->closed, 1);
	settle(f);
	assert_int_equal(fl->out_len, 32);
	assert_memory_equal(fl->out, msg, 32);
	assert_false(fl->live);                     /* EOF: echoed, then closed */

	f->reads = 0;
	f->refuse = true;                           /* refused, with data behind it */
	push_knock(f, fl2);
	fl2->cookie = f->listen_cookie;
	push_recv(f, fl2, msg, sizeof(msg));
	settle(f);
	assert_int_equal(f->reads, 0);
	assert_false(fl2->live);
	assert_int_equal(fp_evl_conns(f->evl), 0);
}

/* ---- back-pressure ---- */

#define BP_TOTAL 300000u            /* bytes the peer sends (a multiple of BP_REQ) */
#define BP_RWND  12000u             /* the receive window the peer respects */
#define BP_SEG   1448u
#define BP_REQ   5000u

/* Bytes @fl received that evl has not given back: its receive window in use. */
static uint32_t unreleased(const struct fp_flow *fl)
{
	uint32_t n = 0;

	for (unsigned i = 0; i < fl->rx_n; i++)
		n += fl->rx_left[i];
	return n;
}

/* A peer that respects a receive window of @rwnd: sends segments of @data from *@off
 * while the window has room. Returns the bytes sent. */
static size_t peer_send(struct fake *f, struct fp_flow *fl, const uint8_t *data, size_t total,
			size_t *off, uint32_t rwnd)
{
	size_t sent = 0;

	while (*off < total && unreleased(fl) < rwnd && fl->rx_n < MAX_RX) {
		size_t n = rwnd - unreleased(fl);

		if (n > BP_SEG)
			n = BP_SEG;
		if (n > total - *off)
			n = total - *off;
		push_recv(f, fl, data + *off, (uint32_t)n);
		*off += n;
		sent += n;
	}
	return sent;
}

enum bp_mode { BP_ECHO_ROOM, BP_ECHO_REQ, BP_EOF };

/*
 * A peer that sends to an echo server and does not read (the server's send window stays
 * shut): the server's output fills, read leaves what arrives, then it is held, the peer's
 * window closes and it stops, with no reset and bounded holdings. Then the peer reads (the window opens
 * by 16 KiB per ACK) and sends the rest: everything comes back, in order.
 *   BP_ECHO_ROOM: fp-echo's server (echoes what fits, consumes that);
 *   BP_ECHO_REQ:  whole 5000-byte requests; a refused write consumes nothing;
 *   BP_EOF:       as ECHO_ROOM, and the peer's FIN comes behind the held bytes.
 */
static void backpressure_run(struct fake *f, enum bp_mode mode)
{
	struct fp_flow *fl = accepted(f, 0);
	static uint8_t data[BP_TOTAL];
	size_t off = 0, want;

	fill(data, sizeof(data), 11);
	f->echo_room = mode != BP_ECHO_REQ;
	f->req = mode == BP_ECHO_REQ ? BP_REQ : 0;
	f->echo = f->soft = mode == BP_ECHO_REQ;
	for (int i = 0; i < 1000 && peer_send(f, fl, data, BP_TOTAL, &off, BP_RWND); i++) {
		settle(f);
		assert_true(f->conn->rx_len <= app_ops.max_pending + BP_SEG);
		assert_true(fp_evl_pending(f->conn) <= app_ops.max_pending);
	}
	/* Stopped by its window, with what evl keeps bounded: max_pending of output,
	 * max_unread (max_pending here) aside, and the window's worth held in the transport. */
	assert_true(off < BP_TOTAL);
	assert_true(off <= 2 * app_ops.max_pending + BP_RWND + 2 * BP_SEG);
	assert_true(unreleased(fl) >= BP_RWND);
	assert_true(f->conn->hold_n > 0);
	assert_int_equal(fl->out_len, 0);
	assert_true(fl->live);
	assert_int_equal(f->closed, 0);
	if (mode == BP_EOF) {
		push_simple(f, fl, FP_COND_EOF, 0);
		settle(f);
		assert_int_equal(f->closed, 0);         /* it waits behind the held bytes */
	}
	want = mode == BP_EOF ? off : BP_TOTAL;
	for (int i = 0; i < 2000 && fl->live && fl->out_len < want; i++) {
		ack(f, fl, 16384);
		if (mode != BP_EOF)
			peer_send(f, fl, data, BP_TOTAL, &off, BP_RWND);
		settle(f);
		assert_true(f->conn == NULL || f->conn->rx_len <= app_ops.max_pending + BP_SEG);
	}
	assert_int_equal(fl->out_len, want);
	assert_memory_equal(fl->out, data, want);
	assert_false(fl->aborted);
	if (mode == BP_EOF) {
		for (int i = 0; i < 10 && fl->live; i++) {
			ack(f, fl, 16384);
			settle(f);
		}
		assert_false(fl->live);                 /* echoed everything, then closed */
		assert_int_equal(f->closed, 1);
		assert_int_equal(f->closed_status, 0);
		assert_int_equal(fp_evl_conns(f->evl), 0);
		return;
	}
	assert_true(fl->live);
	assert_int_equal(f->closed, 0);
	assert_int_equal(f->conn->hold_n, 0);
	assert_int_equal(f->conn->rx_len, 0);
	assert_int_equal(unreleased(fl), 0);
}

static void test_backpressure_echo_room(void **state) { backpressure_run(*state, BP_ECHO_ROOM); }
static void test_backpressure_refused_write(void **state) { backpressure_run(*state, BP_ECHO_REQ); }
static void test_backpressure_eof_behind_held(void **state) { backpressure_run(*state, BP_EOF); }

/* A request larger than max_pending never completes: the copy-aside stops at max_pending
 * and the rest is held (no reset, nothing lost); once the application can go on,
 * fp_evl_read_again() (from a timer: at once) shows it all again and releases the rest. */
static void test_read_again_resumes_held_input(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	static uint8_t data[100 * 1000];
	size_t off = 0;

	fill(data, sizeof(data), 12);
	f->req = 200 * 1000;                        /* more than max_pending: never */
	while (peer_send(f, fl, data, sizeof(data), &off, BP_RWND))
		settle(f);
	assert_true(off < sizeof(data));
	assert_true(f->conn->rx_len >= app_ops.max_pending);
	assert_true(f->conn->hold_n > 0);
	assert_true(fl->live);
	assert_int_equal(f->closed, 0);
	f->req = 1000;                              /* the application changed its mind */
	f->echo = f->soft = true;
	fp_evl_read_again(f->conn);
	assert_true(f->ctx.n_calls > 0);            /* recv_done and sendv, queued at once */
	for (int i = 0; i < 100 && fl->out_len < sizeof(data); i++) {
		peer_send(f, fl, data, sizeof(data), &off, BP_RWND);
		settle(f);
	}
	assert_int_equal(fl->out_len, sizeof(data));
	assert_memory_equal(fl->out, data, sizeof(data));
	assert_int_equal(unreleased(fl), 0);
	assert_int_equal(f->closed, 0);
}

/* ---- timers ---- */

static struct fake *timer_fake;
static uint8_t timer_big[65516];     /* with the rest, 5 chunks: the iov grows */

static void timer_writes_fn(struct fp_timer *t, uint64_t now_us)
{
	struct fp_evl_conn *c = timer_fake->conn;

	(void)t;
	(void)now_us;
	assert_int_equal(fp_evl_write(c, "first ", 6), 0);
	assert_int_equal(fp_evl_write(c, timer_big, sizeof(timer_big)), 0);
	assert_int_equal(fp_evl_write(c, "last", 4), 0);
}

/* Every write of one timer pass leaves in that pass, in one sendv (the one the first
 * write queued grows), not one per round. */
static void test_timer_writes_leave_in_one_pass(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 1 << 20);
	struct fp_timer t;

	fill(timer_big, sizeof(timer_big), 13);
	timer_fake = f;
	fp_timer_init(&t, timer_writes_fn);
	fp_ctx_timer_add(&f->ctx, &t, f->ctx.now_us + 100);
	assert_int_equal(rt_ctx_timers(&f->ctx, f->ctx.now_us + 1000), 1);
	assert_int_equal(fl->sendvs, 1);
	assert_int_equal(fl->out_len, 6 + sizeof(timer_big) + 4);
	assert_memory_equal(fl->out, "first ", 6);
	assert_memory_equal(fl->out + 6, timer_big, sizeof(timer_big));
	assert_memory_equal(fl->out + 6 + sizeof(timer_big), "last", 4);
	settle(f);
	assert_int_equal(fp_evl_pending(f->conn), 0);
	assert_int_equal(fl->sendvs, 1);
}

/* ---- the stop ---- */

/* The run stops with connections open (one idle with unread input, one closing with
 * output the window did not take, one still connecting): fini resets the two flows, drops
 * their output, calls no callback, and gives every buffer back (the pool check). */
static void test_fini_aborts_open_connections(void **state)
{
	struct fake *f = *state;
	struct fp_flow *fl = accepted(f, 0), *fl2 = flow_new(f, 0);
	struct fp_evl_conn *c1 = f->conn;
	uint8_t msg[100] = { 0 };

	push_knock(f, fl2);
	settle(f);
	assert_int_equal(fp_evl_conns(f->evl), 2);
	f->req = 1000;
	push_recv(f, fl, msg, sizeof(msg));         /* left unconsumed: copied aside */
	assert_int_equal(fp_evl_write(f->conn, "pending", 7), 0);
	fp_evl_close(f->conn);                      /* fl2: closing, output not taken */
	settle(f);
	assert_int_equal(c1->rx_len, sizeof(msg));
	assert_non_null(fp_evl_connect(f->evl, 0x0a000001, 80, f));
	settle(f);
	f->app.fini(&f->ctx);                       /* teardown's second call does nothing */
	assert_false(fl->live);
	assert_true(fl->aborted);
	assert_false(fl2->live);
	assert_true(fl2->aborted);
	assert_int_equal(fl2->out_len, 0);
	assert_int_equal(f->closed, 0);
	assert_int_equal(f->connected, 0);
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_zero_copy_whole_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipelined_requests_in_place, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_request_contiguous, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_sendv_preserves_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writev_all_or_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writev_budget_as_separate_writes, setup_budget,
						teardown_budget),
		cmocka_unit_test_setup_teardown(test_enobufs_over_max_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_thief_runs_one_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_steal_returns_go_with_their_flow, setup_steal,
						teardown),
		cmocka_unit_test_setup_teardown(test_steal_a_close_behind_its_flows_batch,
						setup_steal, teardown),
		cmocka_unit_test_setup_teardown(test_steal_sendv_short_of_buffers_is_retried,
						setup_steal, teardown),

		cmocka_unit_test_setup_teardown(test_write_ref_mixed_with_copies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_moved_conn_carries_only_copied_output, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_moved_closed_conn_leaves_the_app_alone, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_eof_drains_then_closes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_reports_status, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_with_sendv_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_app_close_outside_handler, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_after_queued_sendv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_after_close_given_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_accept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_outcomes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sent_with_partial_return_same_round, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_from_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cond_in_round_of_close_return, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_behind_knock_same_round, setup, teardown),
		cmocka_unit_test_setup_teardown(test_udp_echo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listen_error_stops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_connections_leak_free, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backpressure_echo_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backpressure_refused_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backpressure_eof_behind_held, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_again_resumes_held_input, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timer_writes_leave_in_one_pass, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fini_aborts_open_connections, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
