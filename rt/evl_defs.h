/* evl_defs.h: the event-callback layer's private state, shared by evl.c and evl_io.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/compiler.h>
#include <flowplane/evl.h>

#include "defs.h"

/*
 * Which file owns what:
 *   evl.c     the round (returns, conditions, the flush, the reap), connection lifetime
 *             (accept, connect, EOF, death, close, abort, the stop) and the app behind
 *             fp_evl_app
 *   evl_io.c  the bytes: input (zero-copy reads, the copy-aside buffer, input held back
 *             under back-pressure) and output (chunks, one sendv per connection per
 *             round or timer pass), and the arena queued calls point into
 */

#define EVL_CHUNK_BYTES   16384u                  /* one output chunk, header included */
#define EVL_CHUNK_DATA    (EVL_CHUNK_BYTES - 16u)
#define EVL_DEFAULT_MAX_PENDING (4u << 20)
#define EVL_RX_CAP        (1u << 30)              /* max_unread ceiling (rx_len is 32-bit) */

struct evl_chunk {
	struct evl_chunk *next;
	uint32_t len;                    /* bytes filled (a reference: its length) */
	uint32_t ref;                    /* a reference (fp_evl_write_ref): data holds only
					  * the address of its bytes, and the chunk is small */
	uint8_t data[];                  /* EVL_CHUNK_DATA bytes (a reference: a pointer) */
};
static_assert(sizeof(struct evl_chunk) + EVL_CHUNK_DATA == EVL_CHUNK_BYTES,
	      "one chunk is one malloc size class");

enum evl_state {
	EVL_CONNECTING = 0,              /* fp_connect queued, no flow yet */
	EVL_OPEN,                        /* @flow is live */
	EVL_RELEASED,                    /* close/abort queued (or no flow ever came) */
};

/* A RECV held back (not shown, not released): it points into the transport's buffer,
 * which stays valid until a recv_done covers it. */
struct evl_seg {
	const uint8_t *data;
	uint32_t len;
};

struct fp_evl_conn {
	struct fp_evl *evl;              /* the worker running it now: its home's, or under
					  * --sched steal a thief's, for one batch */
	struct fp_evl *home;             /* its worker: the lists it is on, its output's
					  * share of the budget */
	struct fp_flow *flow;
	struct fp_flow *busy_flow;       /* @flow as accepted or connected, never cleared:
					  * what fp_evl_conn_busy asks about (a thief may
					  * clear @flow meanwhile) */
	void *user;
	uint8_t state;                   /* enum evl_state */
	bool app_gone;                   /* closed/close/abort: no more callbacks */
	bool closing;                    /* close once the output has drained */
	bool abort_due;                  /* app aborted while connecting */
	bool sendv_inflight;             /* one sendv at a time per connection */
	bool blocked;                    /* the window took less than offered: wait for SENT */
	bool dirty, reaping;
	bool out_full;                   /* a write was refused since the output last moved */
	bool rx_paused;                  /* the last read left input while the output was full */
	bool rx_again;                   /* show the waiting input again at the flush */
	bool eof_due;                    /* EOF came behind held input: after it */
	uint8_t iov_cap;                 /* entries of the queued sendv's iov */
	uint16_t rport;
	uint32_t raddr;
	unsigned inflight;               /* queued calls whose cookie is this connection */
	unsigned sendv_slot;             /* index of the sendv in the call array when queued */
	uint64_t resumed_at;             /* the flush that last showed waiting input again */
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

	/* Held input, oldest first: hold[(hold_head + i) % hold_cap]. */
	struct evl_seg *hold;
	uint32_t hold_head, hold_n, hold_cap;

	struct fp_evl_conn *next, *prev; /* every connection of the worker */
	struct fp_evl_conn *dirty_next, *reap_next;
	struct fp_evl_conn *visit_next;  /* on the running evl's visitors (--sched steal) */
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
	size_t max_pending;                        /* output bytes per connection */
	uint32_t rx_max;                           /* copy-aside bytes before input is held
						    * (max_unread) */
	bool in_handle;                            /* in the handler or a flush: what the
						    * application touches waits for the
						    * flush (the dirty list) */
	bool flushing;
	bool steal;                                /* --sched steal: batches of other
						    * workers' connections run here */
	uint64_t flushes;                          /* evl_flush_dirty calls so far */
	uint64_t round;                            /* handler calls so far */
	unsigned n_conns;
	struct fp_evl_conn *conns;                 /* all, including released ones */
	struct fp_evl_conn *dirty, *reap;
	struct fp_evl_conn *visiting;              /* others' connections in this batch */
	struct evl_chunk *free_chunks;
	unsigned n_free_chunks;
	size_t out_total;                          /* output bytes pending, all of its
						    * connections (atomic under steal:
						    * evl_out_add) */
	size_t out_budget;                         /* this worker's share of
						    * ops->max_total_pending; 0: none */
	uint64_t out_refused;                      /* writes refused for the budget */
	size_t freed_since_trim;                   /* chunk bytes free()d since malloc_trim */
	struct evl_listener *listeners;
	struct evl_block *arena, *arena_cur;       /* blocks in order; allocating in cur */
	uint64_t udp_send_errors;
} fp_aligned_cache;

/* @c's output held grew (or shrank) by @n bytes: its home's total. Under --sched steal
 * a thief writing to, or draining, a connection it runs counts there too. */
static inline void evl_out_add(struct fp_evl_conn *c, size_t n)
{
	if (c->home->steal)
		__atomic_fetch_add(&c->home->out_total, n, __ATOMIC_RELAXED);
	else
		c->home->out_total += n;
}

static inline void evl_out_sub(struct fp_evl_conn *c, size_t n)
{
	if (c->home->steal)
		__atomic_fetch_sub(&c->home->out_total, n, __ATOMIC_RELAXED);
	else
		c->home->out_total -= n;
}

static inline size_t evl_out_total(const struct fp_evl *home)
{
	return __atomic_load_n(&home->out_total, __ATOMIC_RELAXED);
}

/* ---- evl.c ---- */

/* Put @c on the dirty list: the flush gives it its recv_done, sendv and close. */
void evl_mark_dirty(struct fp_evl_conn *c);

/* Flush every dirty connection now. In the handler this is step 3 of the round; outside
 * it (a timer, init, fini) the calls it queues run right after the timer pass. */
void evl_flush_dirty(struct fp_evl *evl);

/* The flow failed: release it with @type (FP_CALL_CLOSE or FP_CALL_ABORT) and tell the
 * application once with closed(@status). */
void evl_fail(struct fp_evl_conn *c, int status, uint16_t type);

/* The peer's EOF, delivered (evl_io.c holds it back behind held input). */
void evl_eof(struct fp_evl_conn *c);

/* ---- evl_io.c ---- */

/* The arena: iovs and datagrams of queued calls. Reset only when nothing points in. */
void evl_arena_reset(struct fp_evl *evl);
void evl_arena_free(struct fp_evl *evl);

/* Queue @c's output: extend the sendv it queued and the transport has not executed yet,
 * or queue one when none is in flight and the window is open. */
void evl_send(struct fp_evl_conn *c);

/* A SENDV's return for @c. */
void evl_ret_sendv(struct fp_evl_conn *c, int64_t ret);

/* In-order bytes for @c (a RECV condition). */
void evl_recv(struct fp_evl_conn *c, const struct fp_cond *k);

/* Show @c's waiting input again: the copy-aside, then held RECVs while it is not full;
 * then an EOF that waited behind them. */
void evl_rx_resume(struct fp_evl_conn *c);

/* @c reads no more: forget its unread input, and owe the held RECVs back (rx_done). */
void evl_rx_drop(struct fp_evl_conn *c);

/* True when @c still owes the application input shown or held (an EOF waits for it). */
bool evl_rx_waiting(const struct fp_evl_conn *c);

/* Free @c's buffers (chunks, copy-aside, hold), and the worker's spare chunks. */
void evl_conn_io_free(struct fp_evl_conn *c);
/* Output bytes @c holds in memory of its own (pending less what references name): its
 * share of the worker's out_total. */
size_t evl_out_held(const struct fp_evl_conn *c);
void evl_chunks_free(struct fp_evl *evl);
