/* kernel.h: the kernel transport's private state, shared by its common part and its two I/O engines. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/uio.h>

#include <flowplane/pool.h>

#include "defs.h"

/*
 * The kernel transport runs the native API over Linux sockets. What the API promises
 * (conditions, cookies, calls and their returns, receive buffers and the window-like
 * budget, close semantics, stats) lives in kernel.c; how readiness or completions are
 * obtained and how bytes move is an engine's:
 *
 *   kernel_epoll.c  edge-triggered epoll, read()/send() per socket (the classic loop)
 *   kernel_uring.c  io_uring: multishot accept and receive into a ring of pool buffers,
 *                   sends copied into transport buffers and submitted with everything
 *                   else in one io_uring_enter per round
 *
 * An engine turns what happened into conditions with the kt_* helpers below, so both hand
 * up the same conditions in the same order for the same bytes.
 */

#define KT_N_BUFS            4096u    /* receive buffers per worker (64 MiB, touched lazily) */
#define KT_BUF_SIZE          16384u   /* bytes per buffer, headroom included */
#define KT_HEADROOM          64u      /* unused here; keeps data cache-line aligned */
#define KT_MIN_TAIL          2048u    /* append to the last held buffer while this much room */
#define KT_RCV_BUDGET        (256u * 1024)
#define KT_RCV_BUDGET_MAX    (16u * 1024 * 1024)
#define KT_SENT_WINDOW       (1u << 20)
#define KT_LISTEN_BACKLOG    4096
#define KT_MAX_SLEEP_US      100000u  /* so a stop is noticed within 100 ms */
#define KT_STARVED_SLEEP_US  1000u    /* pool empty: retry pending reads this often */
#define KT_PUBLISH_US        1000u    /* slow stats (pool, conns, wall clock) */
#define KT_ACCEPT_BACKOFF_US 10000u   /* accept() out of files: try again this much later */
#define KT_LOG_EVERY_US      (10u * 1000 * 1000) /* a per-event warning, at most this often */

enum kt_kind { KT_FLOW = 1, KT_LISTENER, KT_UDP, KT_WAKE };

/* The head of every socket an engine watches (a flow, a listener, a UDP port, the wake fd). */
struct kt_sock {
	int fd;
	uint8_t kind;
	bool pending;                 /* on kt->pending: the engine reads (or re-arms) it */
	uint16_t ops;                 /* io_uring: operations whose last completion is yet
				       * to come; the memory stays until it is 0 */
	TAILQ_ENTRY(kt_sock) pend;
	uint64_t round;               /* last round it was read in, and how often */
	uint32_t reads;
};

struct fp_flow {
	struct kt_sock s;             /* first */
	uint64_t cookie;
	uint32_t raddr;
	uint16_t rport;
	bool connecting, eof, dead, closed, wr_shut, want_sent, throttled, rdhup;
	uint32_t held_bytes;          /* handed up in RECV, not yet covered by RECV_DONE */
	uint32_t head_done;           /* bytes of the first held buffer already covered */
	uint32_t head, n_held;        /* FIFO of held buffers: held[(head + i) & mask] */
	LIST_ENTRY(fp_flow) link;     /* kt->flows; once closed kt->draining, then kt->dying */
	struct fp_mbuf **held;        /* kt->held_cap slots, behind the engine's flow struct */
};

struct kt_port {                  /* a listener or a bound UDP port */
	struct kt_sock s;
	uint16_t port;
	bool closed;                  /* unlistened; freed with its last completion */
	uint64_t paused_until_us;     /* listener: accept() ran out of files; 0 = accepting */
	uint64_t cookie;
	LIST_ENTRY(kt_port) link;
};

TAILQ_HEAD(kt_pendq, kt_sock);
struct kt;

/*
 * An I/O engine. Every callback runs on the worker's thread; none may block except
 * @poll, for at most its timeout.
 */
struct kt_engine {
	const char *name;             /* "epoll", "io_uring" */
	/* Per-worker state and the engine's flow layout (kt->flow_size, kt->flow_tail); 0 or
	 * -errno (io_uring: the kernel refuses it, so the transport may fall back). */
	int (*setup)(struct kt *kt);
	/* After every flow and port was closed: stop all I/O, close what is left. */
	void (*teardown)(struct kt *kt);
	/* Watch a new socket: a flow (a connecting one for its outcome), listener, UDP port. */
	int (*add)(struct kt *kt, struct kt_sock *s);
	/* Stop watching @s and close its fd (with @abort: reset). Operations still in flight
	 * keep s->ops above 0; the engine calls kt_flow_drained/kt_port_drained after them. */
	void (*close)(struct kt *kt, struct kt_sock *s, bool abort);
	/* Take up to the window of @offered bytes of @iov (@f is open and connected); bytes
	 * taken or -errno; sets f->want_sent when it took fewer and will say SENT. */
	int64_t (*sendv)(struct kt *kt, struct fp_flow *f, const struct iovec *iov,
			 unsigned iovcnt, size_t offered);
	int (*shutdown)(struct kt *kt, struct fp_flow *f);   /* FIN after the data taken */
	/* Wait at most @timeout_us, then turn what happened into conditions. Returns the
	 * events (completions) seen. */
	int (*poll)(struct kt *kt, uint64_t timeout_us);
	/* The round's calls and timers ran: issue the I/O they queued. */
	void (*flush)(struct kt *kt);
	/* Mid-round: submit the sends the calls so far queued (NULL: the engine's calls do
	 * their I/O as they run). */
	void (*send_now)(struct kt *kt);
	/* Stop (@pause) or restart watching listener @l for connections to accept. */
	void (*accept_pause)(struct kt *kt, struct kt_port *l, bool pause);
};

extern const struct kt_engine kt_engine_epoll;
extern const struct kt_engine kt_engine_uring;

/* Tests: the io_uring engine receives with single-shot recvs, as before Linux 6.17. */
extern bool kt_uring_single_recv;
/* Tests: 0 when this process may use the io_uring engine, else why not (-errno). */
int kt_uring_probe(void);

struct kt {
	struct fp_ctx ctx;
	const struct kt_engine *eng;
	void *es;                     /* the engine's per-worker state */
	struct fp_pool *pool;         /* receive buffers */
	struct fp_pool_cache cache;
	const struct fp_rt_config *cfg;
	uint32_t rcv_budget, held_cap, buf_room;
	uint32_t flow_size;           /* the engine's flow struct (struct fp_flow first) */
	uint32_t flow_tail;           /* engine bytes after held[] */
	unsigned batch;               /* B: events (completions) per round */
	uint64_t round;
	struct rt_idle_budget budget; /* --idle adaptive */
	bool starved;                 /* a read found the pool empty this round */
	bool backlog;                 /* events left for the next round: do not sleep */
	bool reuseport;
	int incoming_cpu;             /* SO_INCOMING_CPU for our listeners; -1: not set */
	uint32_t rx_lent;             /* receive buffers lent to the kernel (io_uring's buffer
				       * ring): out of the pool, but idle */
	struct kt_pendq pending;
	struct kt_sock wake;          /* run->wake_fd: the run stopped */
	LIST_HEAD(, fp_flow) flows, draining, dying;
	LIST_HEAD(, kt_port) listeners, udps, dead_ports;
	uint64_t n_flows;
	uint64_t next_publish_us;
	unsigned n_paused;            /* listeners with paused_until_us set */
	uint64_t accept_log_us, conn_limit_log_us;   /* rate limits of those warnings */
	uint64_t accept_failed_logged, conn_limit_logged; /* counts at the last warning */
};

/* accept() on @l failed with @err (positive errno): out of files or memory pauses the
 * listener (counted, warned at most every KT_LOG_EVERY_US); anything else is warned. */
void kt_accept_failed(struct kt *kt, struct kt_port *l, int err);

static inline void kt_pend_add(struct kt *kt, struct kt_sock *s)
{
	if (!s->pending) {
		s->pending = true;
		TAILQ_INSERT_TAIL(&kt->pending, s, pend);
	}
}

static inline void kt_pend_remove(struct kt *kt, struct kt_sock *s)
{
	if (s->pending) {
		s->pending = false;
		TAILQ_REMOVE(&kt->pending, s, pend);
	}
}

/* Count one more read of @s this round; false when its per-round share is used up. */
static inline bool kt_read_budget(struct kt *kt, struct kt_sock *s, uint32_t max)
{
	if (s->round != kt->round) {
		s->round = kt->round;
		s->reads = 0;
	}
	return s->reads++ < max;
}

static inline struct fp_mbuf *kt_held(const struct kt *kt, const struct fp_flow *f, uint32_t i)
{
	return f->held[(f->head + i) & (kt->held_cap - 1)];
}

static inline struct fp_mbuf *kt_held_last(const struct kt *kt, const struct fp_flow *f)
{
	return f->n_held ? kt_held(kt, f, f->n_held - 1) : NULL;
}

/* May @f receive more now: open, within its budget and its held slots. */
static inline bool kt_flow_window(const struct kt *kt, const struct fp_flow *f)
{
	return f->held_bytes < kt->rcv_budget && f->n_held < kt->held_cap;
}

/* ---- what engines call (kernel.c) ---- */

struct fp_cond *kt_cond(struct kt *kt, uint16_t type, struct fp_flow *f);
/* CONNECTED with @err (0 or a positive errno); a failed flow hears nothing more. */
void kt_connected(struct kt *kt, struct fp_flow *f, int err);
/* The flow failed (@err: -errno): DEAD once, nothing after it. */
void kt_flow_dead(struct kt *kt, struct fp_flow *f, int err);
void kt_flow_eof(struct kt *kt, struct fp_flow *f);
/* RECV for @len bytes just written after @m's data; @fresh: @m becomes f's newest held
 * buffer (else it already is). */
void kt_recv_push(struct kt *kt, struct fp_flow *f, struct fp_mbuf *m, uint32_t len, bool fresh);
void kt_udp_push(struct kt *kt, struct kt_port *u, struct fp_mbuf *m, const uint8_t *data,
		 uint32_t len, const struct sockaddr_in *from);
/* A connection accepted on @l: a flow with the listener's cookie, watched, and its KNOCK. */
void kt_accepted(struct kt *kt, struct kt_port *l, int fd, const struct sockaddr_in *from);
/* The last operation of a closed flow (port) completed: free it at the end of the round
 * (port: now). */
void kt_flow_drained(struct kt *kt, struct fp_flow *f);
void kt_port_drained(struct kt *kt, struct kt_port *p);

int kt_sock_error(int fd);
void kt_setopt(int fd, int level, int name, int val);
