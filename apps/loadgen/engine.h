/* engine.h: fp-loadgen engine's private state (workers, connections) and the schedule arithmetic sched.c shares with engine.c. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <flowplane/compiler.h>
#include <flowplane/evl.h>

#include "lg.h"

/* See engine.c for the phases, the open loop and the connections' request rings. */

enum lg_phase { PH_CONNECT, PH_CONNECTED, PH_PRELOAD, PH_PRELOADED, PH_RUN, PH_DRAIN, PH_DONE };
enum lg_conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

/* One connection: 24 bytes, so 10,000 of them cost nothing to speak of. */
struct lg_conn {
	struct fp_evl_conn *c;      /* NULL while down */
	uint32_t head;              /* ring slot of the oldest request */
	uint16_t n_in;              /* sent, responses awaited in order */
	uint16_t n_back;            /* behind them, not sent yet */
	uint8_t state;              /* enum lg_conn_state */
};

struct lg_engine;

struct lg_worker {
	struct lg_engine *e;
	struct fp_evl *evl;
	unsigned id;
	uint64_t gaps_seen, gap_ns_seen, stalls_seen; /* the runtime's loop-gap counters at
						      * the last tick */
	enum lg_phase phase;
	struct lg_rng rng;
	struct lg_arrival arr;      /* a copy: its trace position is this worker's */
	struct lg_conn *conns;
	unsigned n_conns;
	struct lg_req *ring;        /* [n_conns * cap] */
	unsigned cap, depth;        /* ring slots per connection; requests in flight */
	uint8_t *buf;
	size_t buf_cap;
	uint64_t outstanding;       /* in flight and backlogged, over all connections */

	unsigned n_up, n_connecting, next_connect;
	uint64_t init_ns, connect_deadline_ns;

	uint64_t pre_next, pre_end, pre_errors, pre_keys;

	uint64_t t0, t_meas, t_end; /* warm-up start, first window, end of the schedule */
	double next_ns;             /* the next arrival */
	double after_send_ns;       /* the round after a send, p90 (lg_after_send) */
	uint64_t pass_end_ns;       /* the last issuing pass ended (0: measured) */
	int last_seg;               /* point of the last issue (-1 warm-up) */
	uint64_t last_issue_ns;
	uint64_t drain_deadline_ns, stop_ns;
	struct lg_point *points;    /* [n_points] */

	struct fp_timer tick;
	unsigned slice;
	unsigned printed;           /* worker 0: progress lines printed */
	unsigned published_local;
	struct lg_progress *prog;   /* [n_points], published below */
	_Atomic unsigned published fp_aligned_cache;  /* points whose prog[] is final */
};

struct lg_engine {
	const struct lg_config *cfg;
	struct lg_proto *proto;
	unsigned n_workers, n_points;
	double seg_ns, warm_ns, meas_ns;   /* a window; warm-up; the whole measurement */
	uint64_t timeout_ns, grace_ns;
	double pattern_max;                /* the pattern's highest rate (thinning) */
	lg_cdf_fn cdf;                     /* the KS test's CDF, or NULL */
	struct lg_worker *workers[FP_RT_MAX_WORKERS];
	_Atomic unsigned n_connected, n_preloaded, n_drained;
	_Atomic uint64_t t0;
	_Atomic bool finished;
	_Atomic int failed;
	char error[256];
};

/* ---- the schedule (sched.c) ---- */

/* A window's length, and the measured span in all (seconds). */
double lg_seg_s(const struct lg_config *cfg);
double lg_meas_s(const struct lg_config *cfg);
/* The segment @t falls in: -1 warm-up, 0..n-1 a point, n after the end. */
int lg_seg(const struct lg_worker *w, double t);
/* When segment @seg ends (-1: the warm-up). */
double lg_seg_end(const struct lg_worker *w, int seg);
/* Move @w->next_ns to the next arrival; false when the schedule has ended. */
bool lg_advance(struct lg_worker *w);
