/* rt_stats.h: the versioned shared-memory layout of per-worker statistics (runtime -> fp-stats, ctl). */
#pragma once

#include <stdint.h>

#include <flowplane/compiler.h>

/*
 * One segment per run, /dev/shm/flowplane-<name>: a header, then n_workers records of
 * worker_size bytes each (a reader uses worker_size, not sizeof, to step, so records may
 * grow at the end without breaking older readers; any other change bumps the version).
 *
 * Each record has exactly one writer, its worker, which stores plain 64-bit values
 * (atomic on x86-64); readers may see a round half-published, which for rates and
 * histograms read a second apart does not matter. @seq is bumped once per published
 * round, so a reader can tell a worker that stopped moving.
 */
#define FP_RT_STATS_MAGIC   0x7374706677u  /* "wfpst" */
#define FP_RT_STATS_VERSION 2u

#define FP_RT_BATCH_BUCKETS 65   /* frames per stack pass: 0..63 exact, 64+ in the last */
#define FP_RT_LOG2_BUCKETS  32   /* bucket i counts values in [2^(i-1), 2^i), bucket 0: 0 */
#define FP_RT_NET_MAX       96   /* room for the stack's counters (fp_net_stat_count) */
#define FP_RT_GAP_NS        50000u /* a loop gap: rounds further apart than this (50 us) */
#define FP_RT_STATS_MAX_WORKERS 64 /* FP_RT_MAX_WORKERS (rt.h) */
#define FP_RT_REALLOC_BUCKETS 64  /* grant-to-running time, 1 us each; the last: 63 us+ */

/* Drop reasons the runtime itself counts (the stack's are in net[]). */
#define FP_RT_DROPS(X) \
	X(rx_injected)     /* --rx-drop fault injection */ \
	X(tx_full)         /* device refused frames (ring full) after retry: freed */ \
	X(dev_rx_dropped)  /* the kernel dropped frames for us (AF_XDP XDP_STATISTICS) */ \
	X(dev_fill_empty)  /* polls that found the fill ring empty */ \
	X(dev_invalid)     /* invalid descriptors */ \
	X(accept_failed)   /* kernel: accept() failed for lack of files or memory (EMFILE, \
			    * ENFILE, ENOBUFS, ENOMEM): accepting pauses KT_ACCEPT_BACKOFF_US */ \
	X(conn_limit)      /* kernel: a connection past --max-conns, reset at once */

enum fp_rt_drop {
#define FP_RT_DROP_ENUM(name) FP_RT_DROP_##name,
	FP_RT_DROPS(FP_RT_DROP_ENUM)
#undef FP_RT_DROP_ENUM
	FP_RT_DROP_COUNT
};

struct fp_rt_stats_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_size;            /* offset of worker 0's record */
	uint32_t worker_size;
	uint32_t n_workers;
	uint32_t batch_max;           /* B */
	uint32_t net_count;           /* entries of net[] in use */
	int32_t pid;
	uint32_t idle_policy;         /* enum fp_idle */
	char transport[16];           /* "xdp", "kernel", "pair" */
	char ifname[32];
	char app[32];
	uint64_t start_unix_ns;
	uint64_t tsc_hz;              /* for converting the cycle fields */
	char net_names[FP_RT_NET_MAX][32]; /* names of net[] entries, in order */

	/* The command channel (fp-ctl, ctl/): one controller writes op and args, then bumps
	 * @seq (release); the run's main thread takes it within about 10 ms, checks it,
	 * passes it on, and answers with @result (0 taken, or -errno) and @done_seq = seq.
	 * A command whose seq is not above done_seq is stale and ignored. Readers that
	 * predate these fields never look past net_names (records start at hdr_size). */
	struct {
		uint64_t seq;
		uint32_t op;                  /* enum fp_rt_cmd_op */
		uint32_t arg0, arg1;
		int32_t result;
		uint64_t done_seq;
		uint64_t accepted, rejected;  /* commands taken / refused, all told */
	} cmd fp_aligned_cache;
	/* Flow groups (xdp, several workers): group -> worker, FP_RT_GROUP_MOVING set while
	 * the group is on its way there; n_groups 0 when the run has no flow groups. */
	uint32_t n_groups;
	uint16_t groups[128];
	/* The table a controller wants (FP_RT_CMD_SET_TABLE): written before the command; the
	 * run then moves each group whose owner differs, as owners become free, until
	 * groups[] equals it (IX's control plane writes the NIC's whole table at once). */
	uint16_t want[128];

	/* Shenango's core allocator (fp-ctl alloc, rt/alloc.c; rt/README.md, "Burstable
	 * workers"): with --burst K the run's last K workers are burstable. Each home
	 * publishes its shuffle queue as two counters in alloc_q[] (put: written by the home;
	 * taken: by whichever worker takes from it, the larger value kept), the allocator's
	 * congestion signal. The allocator grants a burstable worker its core by writing
	 * grant[w] (when it decided, CLOCK_MONOTONIC ns, then the grant's number, release)
	 * and then the worker's eventfd (alloc.efd[w], a descriptor of the run's process,
	 * which the allocator copies with pidfd_getfd); it revokes by writing the grant's
	 * number into revoke. It bumps heartbeat every pass: workers that see it stand still
	 * for RT_ALLOC_DEAD_MS keep their cores. */
	struct {
		uint32_t n_burst;             /* 0: no burstable workers */
		uint32_t first_burst;         /* n_workers - n_burst */
		int32_t efd[FP_RT_STATS_MAX_WORKERS];  /* per worker, -1: not burstable */
		uint64_t heartbeat;           /* the allocator's passes */
		int32_t pid;                  /* the allocator's, 0: none yet */
	} alloc fp_aligned_cache;
	struct fp_rt_alloc_q {
		uint64_t put, taken;
	} fp_aligned_cache alloc_q[FP_RT_STATS_MAX_WORKERS];
	struct fp_rt_grant {
		uint64_t no;                  /* the last grant (0: none) */
		uint64_t decided_ns;          /* when the allocator decided it */
		uint64_t revoke;              /* == no: park now */
	} fp_aligned_cache grant[FP_RT_STATS_MAX_WORKERS];
} fp_aligned_cache;

enum fp_rt_cmd_op {
	FP_RT_CMD_MOVE_GROUP = 1,     /* arg0: group, arg1: worker */
	FP_RT_CMD_PARK = 2,           /* arg0: worker (it must own no group) */
	FP_RT_CMD_UNPARK = 3,         /* arg0: worker */
	FP_RT_CMD_SET_TABLE = 4,      /* the header's want[]: every entry a worker not parked */
};

#define FP_RT_GROUP_MOVING 0x8000u

#define FP_RT_CTL_INTERVAL_US 10000u   /* IX: every 10 ms, for the previous 10 ms */

struct fp_rt_worker_stats {
	/* identity and liveness */
	uint64_t seq;                 /* rounds published */
	int32_t core;                 /* -1: not pinned */
	uint32_t queue;
	uint64_t now_unix_ns;         /* when last published */

	/* the loop */
	uint64_t iterations;          /* rounds */
	uint64_t busy_cycles;         /* rounds that did work (TSC cycles) */
	uint64_t idle_cycles;         /* rounds that found nothing, and sleeping */
	uint64_t sleeps;              /* times the worker slept in poll() */
	uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes; /* xdp/pair: the device's counters,
							   * copied with net[]; kernel: reads
							   * and writes, per round */
	uint64_t conds, calls;        /* delivered to / executed for the application */
	uint64_t app_ops, app_errors; /* fp_ctx_count() */
	uint64_t drops[FP_RT_DROP_COUNT];

	/* distributions */
	uint64_t batch_hist[FP_RT_BATCH_BUCKETS];  /* frames per stack pass, busy rounds */
	uint64_t rxq_hist[FP_RT_LOG2_BUCKETS];     /* frames waiting at each poll (log2) */
	uint64_t loop_ns_hist[FP_RT_LOG2_BUCKETS]; /* busy round duration in ns (log2) */

	/* the stack's counters (xdp and pair transports), copied every few ms */
	uint64_t net[FP_RT_NET_MAX];
	uint64_t tcp_conns;           /* control blocks in use */
	uint64_t pool_in_use;         /* buffers out of the worker's pool */

	/* loop gaps: a round that started more than FP_RT_GAP_NS after the previous one did,
	 * time asleep in poll() left out; the worker lost that time to something (preemption,
	 * steal, a page fault, an oversized round) and every frame waiting paid for it */
	uint64_t gaps;                /* how many */
	uint64_t gap_ns;              /* their total length */
	uint64_t gap_ns_hist[FP_RT_LOG2_BUCKETS]; /* their lengths in ns (log2) */

	/* --sched steal (rt/steal.c): batches of this worker's own flows it ran; batches of
	 * other workers' flows it stole and ran; calls it executed for its own flows that
	 * ran elsewhere. All 0 when partitioned. */
	uint64_t sched_local, sched_stolen, sched_remote_calls;

	/* flow groups on a device that cannot steer (rt/steer.c): frames this worker received
	 * for another worker's group and handed over; frames it took from other workers;
	 * frames it could not hand over (that worker's ring full: dropped). All 0 when every
	 * frame arrives at home or the run has one worker. */
	uint64_t steer_out, steer_in, steer_drop;

	/* flow-group migration (rt/steer.c): groups this worker gave away and received;
	 * frames it held while their group was on its way here, and frames it forwarded
	 * because their group had left; the time from the old owner's switch to the last
	 * held frame going up here, summed over the groups received (ns), and the longest;
	 * TCP connections that came with the groups received. */
	uint64_t moves_out, moves_in, move_held, move_forwarded, move_ns, move_ns_max;
	uint64_t move_conns;

	/* IX's control-plane metrics (its §4.3), computed every FP_RT_CTL_INTERVAL_US for
	 * the interval before (xdp and pair transports): the mean time of a round (tau, ns,
	 * sleep left out), the mean queue depth at a poll (frames taken plus frames still
	 * waiting, x1000), the queueing delay they imply, ceil(Q/B) * tau (ns), and the
	 * share of the interval's time spent idle (ppm, sleeping included); then the same four
	 * smoothed, x = alpha * now + (1 - alpha) * x, for alpha = 1/2, 1/8 and 1/32. A
	 * worker publishes them from its loop: one asleep (--idle sleep) publishes nothing
	 * until it wakes, so ctl_intervals standing still means idle. */
	uint64_t ctl_intervals;
	uint64_t ctl_tau_ns, ctl_q_milli, ctl_delay_ns, ctl_idle_ppm;
	uint64_t ctl_tau_ewma_ns[3], ctl_q_ewma_milli[3], ctl_delay_ewma_ns[3], ctl_idle_ewma_ppm[3];

	/* Where the core's time went, for the control plane's energy account: asleep in
	 * poll() (halted: the idle policy's sleep, or parked), and of that, parked by the
	 * control plane (FP_RT_CMD_PARK: it owns no flow group and does not poll); parked is
	 * 1 while it is. Time not asleep is polling or working: a polling core is busy. */
	uint64_t slept_ns, parked_ns;
	uint64_t parked, parks;

	/* --rx-reorder: frames held back and delivered after the next burst's (not dropped) */
	uint64_t rx_reordered;

	/* --burst (a burstable worker): parked now, waiting for a grant (1); the last grant it
	 * took; grants taken, parks (idle, revoked); the time from each grant's decision to
	 * this worker running (ns): total, largest, and per microsecond */
	uint64_t burst_parked, burst_took, burst_grants, burst_parks, burst_revoked;
	uint64_t realloc_ns, realloc_ns_max;
	uint64_t realloc_hist[FP_RT_REALLOC_BUCKETS];

	/* --park-queue lend (rt/steer.c, "Lending"): 1 while this worker's own queue is
	 * polled by another (lent, or on its way back); times it lent it and got it back;
	 * other workers' queues it took to poll, and the frames it received from them */
	uint64_t q_lent, q_lends, q_back, q_adopted, adopt_rx;

	/* --notify ipi (rt/ipi.c, ZygOS's interrupts): signals this worker sent as a thief;
	 * interrupts it took inside its own flow's handler, and those that came when it was
	 * no longer there (nothing done); frames it received and calls of returned flows it
	 * executed inside them; frames and returned flows it left for its loop, since
	 * handling them would allocate (a new connection, a close, no room); the time from
	 * each handled signal's sending to its handler (ns, summed), and spent in the
	 * handlers' work */
	uint64_t ipi_sent, ipi_handled, ipi_late, ipi_frames, ipi_calls, ipi_held, ipi_deferred;
	uint64_t ipi_wait_ns, ipi_work_ns;

	/* --flush-us (rt/api.c, a partitioned round in chunks): the handler's calls after the
	 * first one of a round; what the handler sent, sent before the round's end */
	uint64_t flush_chunks, flush_sends;

	/* stalls: loop gaps (above) that followed an idle round, so nothing of ours ran in
	 * them: the time was taken from the worker (the scheduler ran another thread on its
	 * core, or the hypervisor another vCPU). A sample of what takes the core away: a
	 * stall that lands in a busy round is only among the gaps. */
	uint64_t stalls, stall_ns;
	uint64_t stall_ns_hist[FP_RT_LOG2_BUCKETS];
} fp_aligned_cache;

/* Bucket of @v in a log2 histogram. */
static inline unsigned fp_rt_log2_bucket(uint64_t v)
{
	unsigned b = v ? 64u - (unsigned)__builtin_clzll(v) : 0;
	return b < FP_RT_LOG2_BUCKETS ? b : FP_RT_LOG2_BUCKETS - 1;
}

/* Map the segment /dev/shm/flowplane-<name> read-only; NULL with errno (ENOENT, EPROTO for
 * a wrong magic/version). */
const struct fp_rt_stats_hdr *fp_rt_stats_open(const char *name, size_t *size_out);
/* The same, mapped read-write: for the controller, which writes only the command channel. */
struct fp_rt_stats_hdr *fp_rt_stats_open_rw(const char *name, size_t *size_out);

static inline const struct fp_rt_worker_stats *
fp_rt_stats_worker(const struct fp_rt_stats_hdr *h, unsigned i)
{
	/* hdr_size and worker_size are multiples of the cache line (the writer sets them). */
	const void *p = (const char *)h + h->hdr_size + (size_t)i * h->worker_size;

	return (const struct fp_rt_worker_stats *)p;
}
