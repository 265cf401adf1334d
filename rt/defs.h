/* defs.h: rt/'s private state: the worker context and the transport ops behind the native API. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <flowplane/api.h>
#include <flowplane/clock.h>
#include <flowplane/rt.h>
#include <flowplane/rt_stats.h>
#include <flowplane/shuffle.h>
#include <flowplane/timer.h>

/*
 * Which file owns what:
 *   api.c     the context: call and condition arrays, the round (handler, then calls),
 *             application timers, stop; shared by every transport
 *   run.c     fp_rt_run(): options, startup steps, threads, pinning, signals, stats segment
 *   worker.c  the xdp/pair transport: IX's loop over a device queue and a stack, and the
 *             calls mapped onto net.h
 *   kernel.c  the kernel transport: the same API over Linux sockets; its two engines are
 *             kernel_uring*.c (io_uring, the default) and kernel_epoll.c (kernel.h)
 *   stats.c   the shared-memory segment (create, publish, open for readers)
 *   evl.c     the event-callback layer over api.h (with evl_io.c; evl_defs.h)
 */

struct fp_ctx;
struct fp_devq;
struct rt_wk;

/* The cycle clock of the loops' budgets (steal.c's turn at its own flows): the TSC, or,
 * when set, the virtual clock of the simulated core that runs (virtual.c, fp-vsim --full). */
extern uint64_t (*rt_vcycles)(void);

static inline uint64_t rt_cycles(void)
{
	return fp_unlikely(rt_vcycles) ? rt_vcycles() : fp_rdtsc();
}

/* --notify ipi in virtual time: the simulator's delivery of an interrupt to @worker
 * instead of a signal (0: sent); NULL on real threads. */
extern int (*rt_vkick)(unsigned worker);

/* A transport executes calls; conditions it produces go through rt_cond_push(). Its
 * CLOSE and ABORT forget the flow's conditions still queued (rt_conds_forget): after
 * either executes, the application hears nothing more of the flow, whatever round or
 * scheduler step ran the call. */
struct rt_transport_ops {
	const char *name;
	void (*exec)(struct fp_ctx *ctx, struct fp_call *c);   /* run @c, set c->ret */
	/* --notify ipi (ipi.c; NULL: the transport has no interrupt handler): make room,
	 * outside, for what an interrupt may queue; the interrupt's work, inside the signal
	 * handler; whether @n calls of a flow can run there without allocating */
	void (*irq_prepare)(struct fp_ctx *ctx);
	void (*irq)(struct fp_ctx *ctx);
	bool (*irq_fits)(struct fp_ctx *ctx, const struct fp_call *calls, unsigned n);
	/* put what the calls so far queued on the wire now, mid-round (NULL: the transport
	 * sends as it executes) */
	void (*flush)(struct fp_ctx *ctx);
};

/* --notify ipi (rt/ipi.c): one per worker, on its own cache line. The owner writes
 * @since then @inside around a flow's handler (its own or a stolen one); thieves read
 * them, set @pending and send the signal; the handler clears @pending. */
struct rt_ipi {
	atomic_uint inside;           /* in a flow's handler, interruptible */
	atomic_uint pending;          /* a signal sent, not yet handled */
	atomic_uint rx_blocked;       /* its last interrupt left frames or conditions to
				       * the loop: another would not receive */
	atomic_uint bound;            /* @thread and @q are set (the worker is in its loop) */
	_Atomic uint64_t since;       /* TSC when @inside was set */
	_Atomic uint64_t sent;        /* TSC when the pending signal was sent */
	pthread_t thread;
	const struct fp_devq *q;      /* its device queue (rx_waiting), or NULL */
} fp_aligned_cache;

/* Everything a run shares between its workers (read-only after start, except @stop). */
struct rt_run {
	const struct fp_rt_config *cfg;
	const struct fp_app *app;
	atomic_bool stop;
	atomic_int status;            /* first nonzero fp_ctx_stop() status */
	struct fp_rt_stats_hdr *stats_hdr;  /* NULL when no segment */
	size_t stats_size;
	int wake_fd;                  /* eventfd written once the run stops, so sleeping
				       * workers and the main thread notice at once; -1: none */
	atomic_uint n_ready;          /* workers past setup (app->init done), for the
				       * startup line; the xdp/pair workers count them */
	atomic_uint n_zerocopy;       /* xdp queues bound zero-copy / in native mode */
	atomic_uint n_native;
	atomic_uint n_uring;          /* kernel workers whose engine is io_uring */
	/* --sched steal (steal.c): the shuffle layer and each worker's flows; NULL when
	 * partitioned */
	struct fp_shuf *sh;
	struct rt_steal_wk *swk;
	uint32_t steal_max_flows;     /* flows a worker may have under the scheduler */
	atomic_uint steal_in_loop;    /* workers inside their loop (rt_steal_enter/leave) */
	uint32_t flush_us;            /* --flush-us resolved (never AUTO): 0, whole rounds */
	bool app_steal;               /* --sched steal by the application's own hooks
				       * (fp_app.steal: user-level threads), no shuffle layer */
	struct rt_ipi *ipi;           /* --notify ipi: per worker; NULL otherwise */
	uint64_t ipi_after_cycles;
	bool ipi_force;               /* tests (FP_RT_IPI_FORCE): an idle thief interrupts
				       * every home inside a handler, waiting work or not */
	bool ipi_virtual;             /* delivered by a simulator (rt_vkick), no signal */
	bool ipi_hold;                /* tests (FP_RT_IPI_HOLD): an interrupt does nothing
				       * itself: every frame it receives and every flow that
				       * came home wait for the loop (the paths of those that
				       * could allocate) */
	/* flow groups in software (steer.c): xdp with several workers; NULL otherwise */
	struct rt_steer *steer;
	/* the device steers by flow group itself (dpdk with RSS): its group -> worker table,
	 * with fp_rss_key_symmetric, for the stacks' choice of ports; NULL otherwise */
	const uint16_t *dev_table;
	/* --burst: workers burst_first.. are burstable; each has an eventfd the allocator
	 * writes (-1 for the others); alloc_q: the homes' queue counters in the segment,
	 * NULL without --burst */
	unsigned burst_first;
	int burst_efd[FP_RT_MAX_WORKERS];
	struct fp_rt_alloc_q *alloc_q;
};

struct fp_ctx {
	const struct rt_transport_ops *tops;
	void *tp;                     /* the transport's per-worker state */
	struct rt_run *run;
	unsigned worker, n_workers;
	uint64_t now_us;
	uint32_t local_addr;

	struct fp_call *calls;        /* queued by the handler */
	unsigned n_calls, cap_calls;
	struct fp_call *rets;         /* executed last round, handed up in this one */
	unsigned n_rets, cap_rets;
	struct fp_cond *conds;        /* filled by the transport */
	unsigned n_conds, cap_conds;
	unsigned conds_batch;         /* --flush-us: conds[0, this) are the round's batch, handed
				       * up in chunks while calls run; a transport dropping a
				       * closed flow's conditions leaves them (the round does) */

	struct fp_timer_wheel timers; /* the application's */
	void *user;
	bool no_steal;                /* --burst: a parked burstable worker takes nobody's
				       * flows (it wakes only to pass frames on) */
	struct fp_rt_worker_stats *stats;  /* this worker's record (a private one when no
					    * segment), never NULL */
	struct fp_rt_worker_stats stats_local;
};

/* Grow @*arr (of @*cap elements of @size bytes, the new ones zeroed) to hold @need;
 * aborts on ENOMEM, as every worker array does (api.c). */
void rt_reserve(void **arr, unsigned *cap, unsigned need, size_t size);

/* steal.c: ZygOS's scheduler over the shuffle layer (--sched steal). */
int rt_steal_setup(struct rt_run *run);
void rt_steal_teardown(struct rt_run *run);
unsigned rt_steal_round(struct fp_ctx *ctx);
/* What rt_steal_exec_outside did with a call queued outside a flow's batches. */
enum rt_out {
	RT_OUT_PLAIN,   /* nothing: execute it, its return goes up with the next round */
	RT_OUT_DONE,    /* executed; its return goes up as usual */
	RT_OUT_FLOW,    /* executed or kept until the flow's batch is done; its return goes
			 * with the flow (its next batch, or up after its last) */
};
enum rt_out rt_steal_exec_outside(struct fp_ctx *ctx, struct fp_call *c);
bool rt_steal_pending(const struct fp_ctx *ctx);
unsigned rt_app_steal_round(struct fp_ctx *ctx);
bool rt_steal_home_work(struct fp_ctx *ctx);
void rt_steal_enter(struct rt_run *run);
void rt_steal_leave(struct rt_run *run);
void rt_steal_counts(const struct rt_run *run, unsigned worker, uint64_t *stolen_runs,
		     uint64_t *local_runs, uint64_t *remote_calls);
/* Under --notify ipi, from the signal handler (rt/ipi.c): flows that came home, their
 * calls executed where they can be without allocating (the rest wait for the loop); this
 * round's conditions of known flows, from the first, posted to their flows (the rest stay
 * in ctx->conds, in order: true when any stayed). */
void rt_steal_irq_returns(struct fp_ctx *ctx);
bool rt_steal_irq_post(struct fp_ctx *ctx);
/* Outside, before an interruptible handler: spare events for rt_steal_irq_post. */
void rt_steal_irq_prepare(struct fp_ctx *ctx, unsigned events);

/* rt/ipi.c: ZygOS's interrupts (--notify ipi). */
int rt_ipi_setup(struct rt_run *run, char *err, size_t errlen);
void rt_ipi_teardown(struct rt_run *run);
void rt_ipi_bind(struct fp_ctx *ctx, const struct fp_devq *q);   /* the worker's thread */
void rt_ipi_unbind(struct fp_ctx *ctx);
void rt_ipi_enter(struct fp_ctx *ctx);   /* around a flow's handler */
void rt_ipi_leave(struct fp_ctx *ctx);
void rt_ipi_idle(struct fp_ctx *ctx);    /* a thief found nothing: interrupt busy homes */
void rt_ipi_returned(struct fp_ctx *ctx, unsigned home);   /* a thief sent a flow home */
/* The interrupt's work on @ctx's worker, as its signal handler does it (or a simulator,
 * for a worker it holds suspended). */
void rt_ipi_deliver(struct fp_ctx *ctx);

/* The round without the scheduler (api.c): handler on the conditions and returns, then
 * the calls. */
unsigned rt_ctx_round_plain(struct fp_ctx *ctx);
unsigned rt_ctx_round_chunked(struct fp_ctx *ctx);   /* --flush-us */

/* steer.c: IX's flow groups where the device cannot steer. rt_steer_classify() returns
 * a frame's group (0..FP_RSS_GROUPS-1) by the symmetric Toeplitz hash of its 4-tuple,
 * RT_STEER_ARP, or RT_STEER_HERE (the worker that received it handles it: not IPv4
 * TCP/UDP, a fragment, a VLAN, too short to say). */
#define RT_QUEUES_MAX 32     /* device queues one worker polls: its own and spare ones */
#define RT_IF_QUEUES_MAX 256 /* queues of the interface a run polls, all told */
#define RT_STEER_HERE (-1)
#define RT_STEER_ARP  (-2)
struct fp_rss;
struct fp_devq;
struct fp_stack;
struct fp_pool_cache;
struct fp_mbuf;
int rt_steer_classify(const struct fp_rss *rss, const uint8_t *frame, uint32_t len);
/* The table (from --steer-weights), the rings, the wake-up eventfds; one line in @err. */
int rt_steer_create(struct rt_run *run, char *err, size_t errlen);
/* The table a run starts with (--steer-weights, or g % n): rt_steer_create's, and what the
 * NIC is told before the queues open (run.c, --nic-steer). */
void rt_steer_first_table(const struct fp_rt_config *cfg, uint16_t table[]);
/* After every worker stopped: free frames still in the rings, close the queues. */
void rt_steer_destroy(struct rt_run *run);
const uint16_t *rt_steer_table(const struct rt_steer *s);
/* The secret every stack of the run shares (ISNs, SYN cookies). */
uint64_t rt_steer_secret(const struct rt_steer *s);
/* @q is @worker's (its own first, then spare queues it polls too, at most RT_QUEUES_MAX in
 * all): rt_steer_destroy closes them, once no other stack can hold their buffers. */
void rt_steer_own(struct rt_steer *s, unsigned worker, struct fp_devq *q);
int rt_steer_wake_fd(const struct rt_steer *s, unsigned worker);
/* A worker's counters as it stops (its record may be private); summed for the end line:
 * frames handed out, taken, dropped, received. */
void rt_steer_tally(struct rt_steer *s, unsigned worker, const struct fp_rt_worker_stats *st);
void rt_steer_totals(const struct rt_steer *s, uint64_t out[4]);
/* --notify ipi (rt/ipi.c): the handed-over frames an interrupt may take; whether any wait
 * for worker @w. */
unsigned rt_steer_take_quiet(struct rt_steer *s, unsigned me, struct fp_stack *stack,
			     struct fp_mbuf **out, unsigned max, bool *stuck,
			     struct fp_rt_worker_stats *st);
bool rt_steer_waiting(const struct rt_steer *s, unsigned w);
/* Keep in @rx (in place) the frames of @me's groups, hand the others over; returns the
 * frames kept. */
unsigned rt_steer_rx(struct rt_steer *s, unsigned me, struct fp_pool_cache *c,
		     struct fp_mbuf **rx, unsigned n, struct fp_rt_worker_stats *st);
/* Up to @max frames other workers handed to @me (ARP copies are learned here; a group
 * arriving is adopted here, and what was held for it goes up at once). */
unsigned rt_steer_take(struct rt_steer *s, unsigned me, struct fp_ctx *ctx,
		       struct fp_stack *stack, struct fp_pool_cache *c, struct fp_mbuf **out,
		       unsigned max, uint64_t now, struct fp_rt_worker_stats *st);
/* Flow-group migration. Main thread: ask @g's owner to move it to worker @to (0, or
 * -EINVAL, -EBUSY: a move of it or by its owner is under way, -EALREADY). The owner, at
 * the end of each round: start or finish what it was asked (rt_steer_moves). A worker
 * leaving its loop: rt_steer_worker_exit, before its stack goes. */
int rt_steer_ask_move(struct rt_steer *s, unsigned g, unsigned to);
void rt_steer_moves(struct rt_steer *s, unsigned me, struct fp_ctx *ctx, struct fp_stack *stack,
		    struct fp_rt_worker_stats *st);
/* Park or unpark @worker (the command channel): 0, -EINVAL, -EALREADY, -EBUSY (a move to
 * it is pending, or it is the last one polling), -ENOTEMPTY (it owns groups). A move to a
 * parked worker is refused with -EHOSTDOWN. */
int rt_steer_park(struct rt_steer *s, unsigned worker, bool park);
bool rt_steer_parked(const struct rt_steer *s, unsigned worker);
/* Lending a parked worker's queue: at the start of each round, hand on what must go and
 * return the queues @me holds now (bit i: worker i's; its own bit clear while lent). */
uint64_t rt_steer_hands(struct rt_steer *s, unsigned me, struct fp_rt_worker_stats *st);
/* @worker's queues: its own first, then the spare ones it polls too (rt_steer_own). */
unsigned rt_steer_queues(const struct rt_steer *s, unsigned worker, struct fp_devq *const **qs);
/* A worker enters (@in) or leaves its loop; leaving with its queue away, it waits until no
 * worker is left inside theirs, so nobody polls the queue when its stack winds down. */
void rt_steer_loop(struct rt_steer *s, unsigned me, bool in);
void rt_steer_worker_exit(struct rt_steer *s, unsigned me, struct fp_stack *stack,
			  struct fp_pool_cache *c);
/* Before sleeping: false when frames already wait, a move is asked of @me or its parked
 * state is no longer @parked (do not sleep); after: done. */
bool rt_steer_sleep_prepare(struct rt_steer *s, unsigned me, bool parked);
/* Wake the workers of the @workers mask that sleep (after publishing work for them). */
void rt_steer_kick(struct rt_steer *s, uint64_t workers);
void rt_steer_sleep_done(struct rt_steer *s, unsigned me);

/* Set up / tear down @ctx's arrays and timers; 0 or -ENOMEM. */
int rt_ctx_init(struct fp_ctx *ctx, struct rt_run *run, unsigned worker,
		const struct rt_transport_ops *tops, void *tp, uint64_t now_us);
void rt_ctx_fini(struct fp_ctx *ctx);

/* A slot for one more condition (the array grows); never NULL. */
struct fp_cond *rt_cond_push(struct fp_ctx *ctx);

/* @f was closed or reset: drop its conditions queued and not yet handed up, those of a
 * --flush-us round's batch excepted (the round drops those itself). A RECV's bytes are
 * the flow's and went with it. */
void rt_conds_forget(struct fp_ctx *ctx, const struct fp_flow *f);

/*
 * One application round: if there are conditions or returns, call the handler, then
 * execute every queued call in order; the executed calls become next round's returns.
 * Returns the number of calls executed.
 */
unsigned rt_ctx_round(struct fp_ctx *ctx);

/* Run the application's due timers at @now_us, then execute what they queued (their
 * returns go up with the next round). Returns timers fired. */
unsigned rt_ctx_timers(struct fp_ctx *ctx, uint64_t now_us);

/* Earliest application timer, UINT64_MAX when none. */
uint64_t rt_ctx_next_us(const struct fp_ctx *ctx);

/* Calls queued and not yet executed (a timer or init queued some): run them now. */
unsigned rt_ctx_flush(struct fp_ctx *ctx);

/* IX's control-plane metrics (rt_stats.h, ctl_*): what a worker sums over an interval. */
struct rt_ctl_acc {
	uint64_t end_us;              /* the interval ends here */
	uint64_t rounds, cycles;      /* rounds and their TSC cycles (sleep left out) */
	uint64_t q_sum;               /* queue depth at each round's poll, summed */
	uint64_t busy0, idle0;        /* the record's busy/idle cycles when it began */
};

static inline void rt_ctl_round(struct rt_ctl_acc *a, uint64_t cycles, unsigned q)
{
	a->rounds++;
	a->cycles += cycles;
	a->q_sum += q;
}

/* At or past a->end_us: publish the interval's metrics and their averages into @s, and
 * start the next interval (stats.c). */
void rt_ctl_interval(struct rt_ctl_acc *a, struct fp_rt_worker_stats *s, uint64_t now_us,
		     unsigned batch_max);

/* Loop-gap accounting (rt_stats.h): @awake_cycles is the time from one round's start to
 * the next's, time asleep left out. Both transports' loops call it once per round. */
static inline void rt_gap_note(struct fp_rt_worker_stats *s, uint64_t awake_cycles,
			       bool after_idle)
{
	uint64_t ns = fp_cycles_to_ns(awake_cycles);

	if (ns <= FP_RT_GAP_NS)
		return;
	s->gaps++;
	s->gap_ns += ns;
	s->gap_ns_hist[fp_rt_log2_bucket(ns)]++;
	if (!after_idle)
		return;
	s->stalls++;   /* the round between did nothing: the time was taken */
	s->stall_ns += ns;
	s->stall_ns_hist[fp_rt_log2_bucket(ns)]++;
}

/*
 * --idle adaptive: a spin budget. Every busy round earns its own duration (up to
 * --spin-us in all); every idle round spends the time since the previous round; a worker
 * sleeps once the budget is spent, and starts from nothing after a sleep. So a worker spins
 * about as long as it works: under load (short gaps, long busy time) it polls like IX;
 * lightly loaded or woken by a timer alone it sleeps almost at once, as an epoll server
 * does, paying the wake-up on the next request instead of a core.
 */
struct rt_idle_budget {
	int64_t credit_ns;
	uint64_t last_tsc;            /* start of the previous round */
};

static inline void rt_idle_round(struct rt_idle_budget *b, bool busy, uint64_t t0,
				 uint64_t t_end, uint32_t spin_us)
{
	int64_t cap = (int64_t)spin_us * 1000;

	if (busy) {
		b->credit_ns += (int64_t)fp_cycles_to_ns(t_end - t0);
		if (b->credit_ns > cap)
			b->credit_ns = cap;
	} else if (b->last_tsc) {
		b->credit_ns -= (int64_t)fp_cycles_to_ns(t_end - b->last_tsc);
	}
	b->last_tsc = t_end;
}

/* Whether the budget says sleep now (and then it starts again from nothing). */
static inline bool rt_idle_spent(struct rt_idle_budget *b)
{
	if (b->credit_ns > 0)
		return false;
	b->credit_ns = 0;
	b->last_tsc = 0;
	return true;
}

static inline bool rt_ctx_stopping(const struct fp_ctx *ctx)
{
	return atomic_load_explicit(&ctx->run->stop, memory_order_relaxed);
}

/* The transports' worker bodies: run the loop until the run stops; 0 or -errno. Each sets
 * up its own state, calls app->init, loops, calls app->fini, tears down. */
int rt_worker_xdp(struct rt_run *run, unsigned worker, struct fp_xdp *x);
int rt_worker_pair(struct rt_run *run, unsigned worker, struct fp_devq *q);
int rt_worker_dpdk(struct rt_run *run, unsigned worker, struct fp_dpdk *d);
int rt_worker_kernel(struct rt_run *run, unsigned worker);

/* A worker without a thread of its own (virtual.c: fp-vsim --full steps the real workers in
 * virtual time): its stack, context and application's init on @q at @now_us; rounds at
 * the times the caller says; its earliest timer; fini and teardown. NULL with *@err. */
struct rt_wk *rt_vworker_open(struct rt_run *run, unsigned worker, struct fp_devq *q,
			      uint32_t addr, uint16_t n_queues, uint64_t now_us, int *err);
bool rt_vworker_round(struct rt_wk *w, uint64_t now_us);
uint64_t rt_vworker_next_us(struct rt_wk *w);
struct fp_rt_worker_stats *rt_vworker_stats(struct rt_wk *w);
unsigned rt_vworker_conns(const struct rt_wk *w);
void rt_vworker_interrupt(struct rt_wk *w);
void rt_vworker_close(struct rt_wk *w);

/* Wake everything that sleeps on run->wake_fd (a worker leaving its loop calls it, so
 * an fp_ctx_stop() anywhere reaches sleeping workers and the main thread). run.c. */
void rt_run_wake(struct rt_run *run);

/* Stats segment (stats.c). */
int rt_stats_create(struct rt_run *run, const char *name, char *err, size_t errlen);
void rt_stats_destroy(struct rt_run *run, const char *name);
struct fp_rt_worker_stats *rt_stats_worker(struct rt_run *run, unsigned worker);

/* Monotonic microseconds (the loops' clock; a simulator's virtual time when rt_vcycles is
 * set) and Unix nanoseconds. */
uint64_t rt_now_us(void);
uint64_t rt_unix_ns(void);
