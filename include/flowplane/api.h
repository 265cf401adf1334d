/* api.h: the native API: event conditions up, batched calls down, cookies, zero-copy receive. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <flowplane/mbuf.h>
#include <flowplane/timer.h>

/*
 * IX's interface (Belay et al., OSDI'14, Table 1), the same on every transport (the AF_XDP
 * stack, the kernel's sockets):
 *
 *   - the worker fills an array of event conditions (struct fp_cond) and hands it to the
 *     application's handler, together with the return codes of the calls it executed in
 *     the previous round;
 *   - the handler queues calls (fp_sendv, fp_recv_done, fp_close, ...) into the worker's
 *     call array; nothing happens until the handler returns, then the worker executes the
 *     whole array in order and writes each call's return code into it (IX: "the kernel
 *     overwrites the array of batched system call requests with return codes"); those
 *     come back as @rets in the next round;
 *   - received data is never copied: a RECV condition points into the receive buffer,
 *     which stays valid until fp_recv_done() covers its bytes.
 *
 * Every flow carries a cookie, an opaque value the application chose (usually a pointer to
 * its own per-connection state), so a condition leads to the application's state in O(1).
 *
 * A flow handle belongs to the worker whose handler saw it (IX: each elastic thread has its
 * own flow namespace); nothing here is thread-safe and nothing needs to be.
 */

struct fp_ctx;   /* one per worker: its arrays, timers and transport */
struct fp_flow;  /* a TCP connection (transport-specific, opaque) */

enum fp_cond_type {
	FP_COND_KNOCK = 1,  /* a connection arrived on a listener: @flow is new, @cookie is the
			     * listener's; fp_accept() it with its own cookie, or fp_close() it */
	FP_COND_CONNECTED,  /* an fp_connect() finished: @cookie is the one given to connect;
			     * status 0 (then @flow is live), or -ECONNREFUSED, -ETIMEDOUT, ...
			     * (then @flow is dead: release it with fp_close) */
	FP_COND_RECV,       /* in-order bytes: @data/@len, inside @m; valid until fp_recv_done()
			     * has covered them */
	FP_COND_SENT,       /* an fp_sendv() took less than offered, and the transport has
			     * room again: @window bytes fp_sendv() would take now; @len bytes
			     * newly acknowledged (0 when the transport cannot tell). Only
			     * after a short send (both transports) */
	FP_COND_EOF,        /* the peer closed its sending side: no more RECV */
	FP_COND_DEAD,       /* reset (-ECONNRESET), timed out (-ETIMEDOUT) or failed; release
			     * with fp_close(); no more conditions for this flow */
	FP_COND_UDP_RECV,   /* a datagram: @data/@len inside @m, from @raddr:@rport to @lport;
			     * give @m back with fp_udp_done() */
};

struct fp_cond {
	uint16_t type;              /* enum fp_cond_type */
	int16_t status;             /* 0 or -errno */
	uint32_t len;
	uint64_t cookie;
	struct fp_flow *flow;
	struct fp_mbuf *m;          /* RECV, UDP_RECV */
	const uint8_t *data;        /* RECV, UDP_RECV: first byte */
	uint32_t raddr;             /* peer address (host order), KNOCK/CONNECTED/UDP_RECV */
	uint16_t rport, lport;
	uint32_t window;            /* SENT */
};

enum fp_call_type {
	FP_CALL_LISTEN = 1,  /* port, cookie                      -> 0 or -errno */
	FP_CALL_UNLISTEN,    /* port                              -> 0 or -errno */
	FP_CALL_ACCEPT,      /* flow, cookie (from a KNOCK)        -> 0 */
	FP_CALL_CONNECT,     /* addr, port, cookie                 -> 0 or -errno; the flow comes
			      * with FP_COND_CONNECTED */
	FP_CALL_SENDV,       /* flow, iov, iovcnt                  -> bytes taken (may be fewer
			      * than offered: the window), or -ENOTCONN, -EPIPE, -ENOBUFS */
	FP_CALL_RECV_DONE,   /* flow, len                          -> 0 */
	FP_CALL_SHUTDOWN,    /* flow (half-close: FIN after the data taken) -> 0 or -errno */
	FP_CALL_CLOSE,       /* flow (FIN, then release the handle) -> 0 */
	FP_CALL_ABORT,       /* flow (RST, release the handle)     -> 0 */
	FP_CALL_UDP_BIND,    /* port, cookie                       -> 0 or -errno */
	FP_CALL_UDP_SEND,    /* port (ours), addr, rport, iov[0]   -> bytes or -errno */
	FP_CALL_UDP_DONE,    /* m                                  -> 0 */
};

struct fp_call {
	uint16_t type;              /* enum fp_call_type */
	uint16_t iovcnt;            /* SENDV */
	uint16_t port;              /* LISTEN, UNLISTEN, CONNECT (remote), UDP_BIND, UDP_SEND (local) */
	uint16_t rport;             /* UDP_SEND (remote) */
	uint32_t addr;              /* CONNECT, UDP_SEND: remote address (host order) */
	uint32_t len;               /* RECV_DONE */
	struct fp_flow *flow;
	uint64_t cookie;
	const struct iovec *iov;    /* SENDV, UDP_SEND: must stay valid until executed */
	struct fp_mbuf *m;          /* UDP_DONE */
	int64_t ret;                /* written when executed */
};

/*
 * The application: its handler runs on each worker's thread, once per round that has
 * conditions or returns. @init runs on the worker's thread before its loop starts (listen,
 * connect and start timers here); @fini after the loop stops, before the transport closes.
 */
struct fp_app {
	const char *name;
	int (*init)(struct fp_ctx *ctx, void *arg);  /* 0, or -errno to stop the run */
	void (*handle)(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
		       const struct fp_call *rets, unsigned n_rets);
	void (*fini)(struct fp_ctx *ctx);
	/* Optional: runs once per round on both transports, after the timers (and on the
	 * xdp transport only once the round's conditions have settled), so an application
	 * can act at a finer grain than the 16 us timer wheel: the load generator sends the
	 * requests whose scheduled time has come. Calls it queues execute right after it.
	 * A sleeping idle policy does not know its deadlines: run such an application with
	 * --idle poll, or keep a timer armed for the next deadline. */
	void (*poll)(struct fp_ctx *ctx);
	void *arg;
	const void *layer;          /* a layer's own table (evl.c keeps its fp_evl_ops here,
				     * since @arg is the application's); NULL otherwise */
	/* --sched steal: the handler may be given one flow's conditions on any worker
	 * (rt/steal.c). It promises that, given one flow's conditions, it queues calls
	 * only for that flow and touches only that flow's state (its cookie), so two
	 * workers may run it at once for different flows; and that it frees a flow's
	 * state only once the returns of the CLOSE or ABORT it queued have come back.
	 * What the home queues on a flow outside its batches (in an ordinary round, a
	 * timer) executes at once, and its return comes with the flow's next batch; the
	 * home touches a flow's state outside its batches only while fp_flow_busy() is
	 * false. */
	bool steal_safe;
	/* Flow-group migration (IX; rt/steer.c): an application's flows may move to another
	 * worker, their returns with them, if it is steal-safe or has both hooks. @flow_leave
	 * runs on the old worker, between rounds, for each flow it still holds or has
	 * returns pending for; it may not queue calls. @flow_arrive runs on the new worker
	 * before its next round. The cookie is the flow's. A steal-safe application whose
	 * per-flow state is all in the cookie needs neither; one keeping per-worker lists
	 * moves entries (evl.c does, for applications whose fp_evl_ops say movable). */
	void (*flow_leave)(struct fp_ctx *ctx, struct fp_flow *flow, uint64_t cookie);
	void (*flow_arrive)(struct fp_ctx *ctx, struct fp_flow *flow, uint64_t cookie);
	/* --sched steal for an application that balances its own work instead of being
	 * steal-safe (tsock.h's user-level threads: rt/steal.c, rt_app_steal_round): its
	 * flows stay home, in ordinary rounds, and a worker with nothing else to do in a
	 * round calls @steal, which runs one piece of another worker's ready work here (1)
	 * or finds none (0). @work_pending: whether this worker has work of its own that no
	 * condition announces (threads that came home), or, with @may_steal, another worker
	 * has some to take; a round runs then. @ready: how much work this worker's ready
	 * queue was ever given and how much was taken from it (by anyone), both growing, for
	 * the core allocator (--burst; alloc.h). All three, or none. */
	bool (*work_pending)(struct fp_ctx *ctx, bool may_steal);
	unsigned (*steal)(struct fp_ctx *ctx);
	void (*ready)(struct fp_ctx *ctx, uint64_t *put, uint64_t *taken);
};

/* --sched steal, on @f's home outside its batches: whether a batch of @f's is queued or
 * running (here or on another worker), so that its state is not this code's to touch
 * now. False when not stealing. It changes only on the home, between its rounds. */
bool fp_flow_busy(struct fp_ctx *ctx, const struct fp_flow *f);

/* --sched steal, in a batch of @f's: its returns are wanted even if no event comes for
 * @f (a close waits for its output to drain, input for room): they come in a batch of
 * their own, as they would next round when not stealing. Without it they come with
 * @f's next event. On @f's home outside its batches (a timer writing behind a send whose
 * return @f still holds): the returns it holds come now, in a batch of their own. A
 * no-op elsewhere. */
void fp_flow_returns_soon(struct fp_ctx *ctx, const struct fp_flow *f);

/* ---- batched calls: queued now, executed in order when the handler returns ---- */

/* A slot at the end of the worker's call array (it grows; queuing never fails). */
struct fp_call *fp_call_push(struct fp_ctx *ctx, uint16_t type);

static inline void fp_listen(struct fp_ctx *ctx, uint16_t port, uint64_t cookie)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_LISTEN);
	c->port = port;
	c->cookie = cookie;
}

static inline void fp_accept(struct fp_ctx *ctx, struct fp_flow *f, uint64_t cookie)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_ACCEPT);
	c->flow = f;
	c->cookie = cookie;
}

static inline void fp_connect(struct fp_ctx *ctx, uint32_t addr, uint16_t port, uint64_t cookie)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_CONNECT);
	c->addr = addr;
	c->port = port;
	c->cookie = cookie;
}

/* @iov (and what it points to) must stay valid until the call is executed, that is until
 * the handler returns; the transport copies what it takes. */
static inline void fp_sendv(struct fp_ctx *ctx, struct fp_flow *f, uint64_t cookie,
			    const struct iovec *iov, unsigned iovcnt)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_SENDV);
	c->flow = f;
	c->cookie = cookie;
	c->iov = iov;
	c->iovcnt = (uint16_t)iovcnt;
}

static inline void fp_recv_done(struct fp_ctx *ctx, struct fp_flow *f, uint32_t len)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_RECV_DONE);
	c->flow = f;
	c->len = len;
}

static inline void fp_flow_call(struct fp_ctx *ctx, uint16_t type, struct fp_flow *f,
				uint64_t cookie)
{
	struct fp_call *c = fp_call_push(ctx, type);
	c->flow = f;
	c->cookie = cookie;
}

static inline void fp_shutdown(struct fp_ctx *ctx, struct fp_flow *f)
{
	fp_flow_call(ctx, FP_CALL_SHUTDOWN, f, 0);
}

static inline void fp_close(struct fp_ctx *ctx, struct fp_flow *f)
{
	fp_flow_call(ctx, FP_CALL_CLOSE, f, 0);
}

static inline void fp_abort(struct fp_ctx *ctx, struct fp_flow *f)
{
	fp_flow_call(ctx, FP_CALL_ABORT, f, 0);
}

static inline void fp_udp_bind_call(struct fp_ctx *ctx, uint16_t port, uint64_t cookie)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_UDP_BIND);
	c->port = port;
	c->cookie = cookie;
}

/* One datagram from local @sport to @addr:@rport; @iov[0] must stay valid until executed. */
static inline void fp_udp_sendto(struct fp_ctx *ctx, uint16_t sport, uint32_t addr,
				 uint16_t rport, const struct iovec *iov, uint64_t cookie)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_UDP_SEND);
	c->port = sport;
	c->addr = addr;
	c->rport = rport;
	c->iov = iov;
	c->iovcnt = 1;
	c->cookie = cookie;
}

static inline void fp_udp_done(struct fp_ctx *ctx, struct fp_mbuf *m)
{
	struct fp_call *c = fp_call_push(ctx, FP_CALL_UDP_DONE);
	c->m = m;
}

/* ---- the worker's context ---- */

unsigned fp_ctx_worker(const struct fp_ctx *ctx);        /* 0..n_workers-1 */
unsigned fp_ctx_workers(const struct fp_ctx *ctx);
/* Whether the run balances work between workers (--sched steal). */
bool fp_ctx_steals(const struct fp_ctx *ctx);
uint64_t fp_ctx_now_us(const struct fp_ctx *ctx);        /* the loop's clock (monotonic) */
const char *fp_ctx_transport(const struct fp_ctx *ctx);  /* "xdp", "kernel", "pair" */
uint32_t fp_ctx_local_addr(const struct fp_ctx *ctx);    /* our IPv4 (0 on kernel: any) */
void fp_ctx_set_user(struct fp_ctx *ctx, void *user);     /* the application's per-worker state */
void *fp_ctx_user(const struct fp_ctx *ctx);

/* Application timers on the worker's wheel (16 µs ticks); @t->fn runs on the worker's thread
 * between rounds and may queue calls (they run at the end of that timer pass). */
void fp_ctx_timer_add(struct fp_ctx *ctx, struct fp_timer *t, uint64_t deadline_us);
void fp_ctx_timer_cancel(struct fp_ctx *ctx, struct fp_timer *t);

/* Stop every worker of this run after the current round (a client that is done). @status
 * becomes fp_rt_run()'s return value when nonzero. */
void fp_ctx_stop(struct fp_ctx *ctx, int status);

/* The application's counters in the stats segment (fp-stats shows them): app_ops and
 * app_errors are free for the application to count what it serves. */
void fp_ctx_count(struct fp_ctx *ctx, uint64_t ops, uint64_t errors);
/* This worker's loop gaps so far (rt_stats.h: rounds more than 50 us apart, sleep left
 * out): how many, their total ns, and how many of them were 512 us or longer (stalls:
 * the core taken away, rather than a long round of work). A generator counts its own
 * with it. */
void fp_ctx_gaps(const struct fp_ctx *ctx, uint64_t *count, uint64_t *total_ns,
		 uint64_t *long_count);
