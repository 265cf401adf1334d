/* alloc.h: Shenango's core allocator (the IOKernel's, NSDI'19 §4.1) as a pure decision per pass. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/*
 * Every pass (Shenango: every 5 µs) the caller writes what it sees into the apps' queue and
 * worker views and calls fp_alloc_pass(), which says what to do: grant a worker its core, or
 * revoke one. The same code decides in fp-vsim's virtual world (tools/vsim) and in a real
 * loop; what a grant or a revoke is (an event in virtual time; numbers in the runs' stats
 * segments and an eventfd write, ctl/alloc_loop.c) belongs to the caller.
 *
 * An app is a flowplane run: its homes (Shenango's guaranteed cores) always poll: they own
 * the flow groups, receive the frames and run the stack. Its burstable workers own nothing
 * and work only by stealing from the homes' shuffle queues (ZygOS's layer); each is pinned
 * to a core of the pool this allocator shares out. A burstable worker that finds nothing
 * to do for a while (Shenango: a couple of µs; the runtime's --burst-idle-us, 20 by
 * default) parks itself and its core goes to the batch work; the
 * allocator grants it back when its app is congested. Differences from Shenango: the homes
 * never park (Shenango parks guaranteed cores too, and its IOKernel re-steers their
 * packets), and burstable workers steal ready flows, not packets.
 *
 * Congestion (Algorithm 1): an app is congested when one of its queues holds an item that
 * was already there at the previous pass: items taken now < items put at the previous
 * pass. Queues are two counters each (put, taken), so no lock and no ring memory is read.
 * A congested app gets one more core per pass.
 *
 * Core selection (Algorithm 2; no hyperthreads here): an idle core of the pool where the
 * app has a parked worker, the one it lost most recently first, else the worker parked
 * longest; if no core of the pool is idle, a core held by another app's burstable worker
 * is revoked (that worker parks at its next loop pass) and reserved for the congested app,
 * which gets it at the first pass that finds it free and the app still congested.
 */

#define FP_ALLOC_MAX_APPS    8
#define FP_ALLOC_MAX_CORES   64
#define FP_ALLOC_MAX_WORKERS 64    /* burstable workers per app */
#define FP_ALLOC_MAX_QUEUES  128   /* queues watched per app */

/* A queue as counters: items put into it and taken out of it, since it was made. */
struct fp_alloc_q {
	uint64_t put, taken;
};

/* A burstable worker as it publishes itself: the last grant it woke for (0: none yet),
 * and whether it is parked now (true before its first grant). */
struct fp_alloc_wview {
	uint64_t took;
	bool parked;
};

enum fp_alloc_wstate {
	FP_ALLOC_W_PARKED = 0,  /* its core is not its app's */
	FP_ALLOC_W_ACTIVE,      /* granted: waking, or running */
	FP_ALLOC_W_REVOKED,     /* asked to park, not parked yet: still holds its core */
};

struct fp_alloc_app {
	/* the caller's: set once */
	unsigned n_queues, n_workers;
	uint16_t core[FP_ALLOC_MAX_WORKERS];      /* each burstable worker's core in the pool */
	/* the caller's: written before every pass */
	struct fp_alloc_q q[FP_ALLOC_MAX_QUEUES];
	struct fp_alloc_wview w[FP_ALLOC_MAX_WORKERS];
	/* the allocator's */
	uint64_t prev_put[FP_ALLOC_MAX_QUEUES];
	uint64_t grant_no[FP_ALLOC_MAX_WORKERS];  /* the last grant issued to each worker */
	uint64_t parked_pass[FP_ALLOC_MAX_WORKERS]; /* the pass that saw it park */
	uint8_t state[FP_ALLOC_MAX_WORKERS];      /* enum fp_alloc_wstate */
	int last_core;                            /* the core it lost most recently, -1 */
	unsigned active;                          /* workers ACTIVE or REVOKED */
	/* counters */
	uint64_t congested;    /* passes that found it congested */
	uint64_t starved;      /* of those, passes with no core to give it */
	uint64_t grants, revokes, parks;
};

struct fp_alloc {
	unsigned n_apps, n_cores;
	struct fp_alloc_app app[FP_ALLOC_MAX_APPS];
	int8_t owner[FP_ALLOC_MAX_CORES];         /* the app holding the core, -1: idle */
	int8_t reserved[FP_ALLOC_MAX_CORES];      /* revoked for this app, -1: none */
	uint64_t passes;
	uint64_t rng;                             /* the revoked core's choice */
};

enum fp_alloc_op { FP_ALLOC_GRANT = 1, FP_ALLOC_REVOKE = 2 };

/* What to do: wake @worker of @app on @core with grant number @grant_no, or ask it to park. */
struct fp_alloc_act {
	uint8_t op;
	uint8_t app;
	uint16_t worker;
	uint16_t core;
	uint64_t grant_no;
};

/* An allocator for @n_cores pool cores, no apps yet. 0, or -EINVAL. */
int fp_alloc_init(struct fp_alloc *a, unsigned n_cores, uint64_t seed);
/* Add an app watching @n_queues queues, with @n_workers burstable workers on the pool
 * cores @cores (each < n_cores). Its index, or -EINVAL / -ENOSPC. Its workers start
 * parked; the caller's views must say so until they are granted. */
int fp_alloc_add_app(struct fp_alloc *a, unsigned n_queues, unsigned n_workers,
		     const uint16_t *cores);
/* Worker @w of @app is already running on grant @grant_no (an allocator before this one
 * granted it), or parked after it: the allocator takes that state over, and its core if
 * running (when free; else the worker is left parked in its books). Before the first pass. */
void fp_alloc_adopt(struct fp_alloc *a, unsigned app, unsigned w, uint64_t grant_no,
		    bool running);
/* One pass over the views the caller wrote: the actions, at most @max, into @out; how many.
 * At most one grant per app per pass. */
unsigned fp_alloc_pass(struct fp_alloc *a, struct fp_alloc_act *out, unsigned max);
/* Whether @app has a queue item seen at the previous pass: Algorithm 1's test alone
 * (updates nothing). */
bool fp_alloc_congested(const struct fp_alloc_app *app);
