/* rt.h: the per-core runtime: workers pinned to cores running IX's run-to-completion loop. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <flowplane/api.h>
#include <flowplane/dev.h>
#include <flowplane/net.h>

/*
 * fp_rt_run() starts one worker thread per core, each owning its device queue, stack,
 * timers, buffer cache, condition and call arrays, and runs the application on every one
 * until fp_ctx_stop() or SIGINT/SIGTERM. On the xdp transport each round of a worker is
 * IX's loop (Fig. 1b):
 *
 *   1. poll RX (and top up the fill ring)
 *   2. run at most @batch frames through the stack (adaptive: whatever is there, never
 *      waiting for more)
 *   3. hand the conditions to the application's handler
 *   4. execute the calls it queued
 *   5. run due timers (stack and application)
 *   6. transmit
 *   7. reclaim completed TX buffers
 *
 * and when a round finds nothing to do, the idle policy decides: keep polling (IX), or
 * spin for @spin_us and then sleep in poll() on the device until a frame arrives or the
 * next timer is due.
 *
 * On the kernel transport the same application runs over Linux sockets (io_uring, or
 * epoll), one listening socket per worker (SO_REUSEPORT), unprivileged, as the baseline.
 */

enum fp_transport { FP_TRANSPORT_KERNEL = 0, FP_TRANSPORT_XDP, FP_TRANSPORT_PAIR,
		    FP_TRANSPORT_DPDK };
/* "kernel", "xdp", "pair", "dpdk" */
const char *fp_rt_transport_name(enum fp_transport t);

/* How the kernel transport talks to its sockets: io_uring (one io_uring_enter per round),
 * or epoll with a system call per read and send. Auto: io_uring where the kernel allows
 * it (seccomp profiles and the io_uring_disabled sysctl may not), else epoll. */
enum fp_kernel_io { FP_KERNEL_IO_AUTO = 0, FP_KERNEL_IO_URING, FP_KERNEL_IO_EPOLL };

/* When a worker finds nothing to do: spin --spin-us, then sleep (SLEEP); keep polling
 * (POLL, IX); or spin only as long as it has recently worked, at most --spin-us, then
 * sleep (ADAPTIVE: the cost of polling stays within the cost of the work). */
enum fp_idle { FP_IDLE_SLEEP = 0, FP_IDLE_POLL, FP_IDLE_ADAPTIVE };

/* How a flow's conditions find a core: on its home worker only (IX), or on any worker
 * that is idle (ZygOS: rt/steal.c; the application must be fp_app.steal_safe). */
enum fp_sched { FP_SCHED_PART = 0, FP_SCHED_STEAL };
/* How a home busy in a long handler learns that a thief wants it (--notify): at its next
 * round (poll), or by an interrupt, ZygOS's IPI as a signal to its thread (ipi). */
enum fp_notify { FP_NOTIFY_POLL = 0, FP_NOTIFY_IPI };

/* Which worker handles a frame, on xdp with several workers: the worker that owns the
 * flow's group (IX's flow groups: the symmetric Toeplitz hash of the 4-tuple, a table of
 * FP_RSS_GROUPS groups to workers; a frame arriving on another worker's queue is handed
 * over, rt/steer.c), or the worker whose queue it arrived on (the sender decides). */
enum fp_steer { FP_STEER_GROUPS = 0, FP_STEER_QUEUE };
/* --park-queue: a parked worker's device queue is polled by another worker (lend, the
 * default: nothing waits for the parked one) or still by itself (keep) */
enum fp_park_queue { FP_PARK_QUEUE_DEFAULT = 0, FP_PARK_QUEUE_LEND, FP_PARK_QUEUE_KEEP };
/* --nic-steer, flow groups on xdp: program the NIC's RSS (key, hash fields, indirection
 * table) so a group's frames arrive on its worker's queue, put back at exit (dev/nic_rss.c):
 * where it can (auto, the default), or refuse to start where it cannot (on), or never
 * touch it (off). Frames that land elsewhere are handed over in software either way. */
enum fp_nic_steer { FP_NIC_STEER_AUTO = 0, FP_NIC_STEER_ON, FP_NIC_STEER_OFF };

#define FP_RT_MAX_WORKERS   64
#define FP_RT_DEFAULT_BATCH 64
#define FP_RT_MAX_BATCH     1024
#define FP_RT_DEFAULT_SPIN_US 200
#define FP_RT_DEFAULT_NAP_US  100   /* dpdk: the longest nap of an idle worker */
#define FP_RT_FLUSH_AUTO      UINT32_MAX /* --flush-us not given: the transport's default */
#define FP_RT_DEFAULT_FLUSH_US 10   /* dpdk, partitioned: a send there is a ring write */
#define FP_RT_DEFAULT_BURST_IDLE_US 20  /* --burst: idle this long, a burstable worker parks */

struct fp_rt_config {
	enum fp_transport transport;     /* default: kernel, or xdp when @ifname is set */
	bool transport_set;              /* --net given: --if does not imply xdp */
	enum fp_kernel_io kernel_io;     /* kernel transport: default auto */
	bool kernel_steer_cpu;           /* kernel, several workers: a connection goes to the
					  * worker pinned to the CPU that received its SYN
					  * (SO_INCOMING_CPU) instead of the reuseport hash */
	const char *ifname;              /* xdp: the interface */
	uint32_t ipv4;                   /* xdp: our address; kernel: listen/bind address
					  * (0 = any); pair: worker i is @ipv4 + i, each
					  * worker being its own host on the pair's wire */
	uint8_t prefix_len;              /* xdp: default 24 */
	uint32_t gateway;
	unsigned n_workers;              /* default 1; --cores sets it unless --workers given */
	bool workers_set;
	int cores[FP_RT_MAX_WORKERS];    /* core of worker i; -1 = not pinned. Default: i */
	bool cores_set;
	unsigned n_cores;                /* entries --cores listed (0: not from the command
					  * line); fewer than n_workers is an error */
	unsigned queue_base;             /* xdp: worker i owns queue queue_base + i */
	enum fp_steer steer;             /* xdp, several workers: flow groups (default) */
	unsigned steer_weights[FP_RT_MAX_WORKERS]; /* groups per worker, in proportion */
	unsigned n_steer_weights;        /* 0: equal */
	unsigned batch;                  /* B: frames per stack pass (default 64) */
	enum fp_idle idle;
	bool idle_set;                  /* --idle given: under --burst the homes keep it */
	enum fp_sched sched;             /* default partitioned; steal implies --idle poll */
	bool steal_force;                /* tests: a worker never runs its own flows, so
					  * every batch is stolen */
	enum fp_notify notify;           /* steal: poll (default) or ipi */
	uint32_t ipi_after_us;           /* ipi: a home is interrupted once its handler has
					  * run this long (default 10) */
	uint32_t flush_us;               /* partitioned: what the handler sent leaves before
					  * its next condition once it has run this long since
					  * the last send (0: at the round's end, IX's
					  * batching); FP_RT_FLUSH_AUTO, the default: 10 on
					  * dpdk, 0 elsewhere (set at startup) */
	uint32_t spin_us;                /* FP_IDLE_SLEEP: spin this long before sleeping */
	uint32_t nap_us;                 /* a device that cannot wake a sleeper (dpdk: no
					  * receive interrupt): sleep in naps of at most this
					  * long, rechecking the device between; 0: poll */
	unsigned n_burst;                /* --burst K: the last K workers are burstable: they
					  * own no flow group, steal, and run only while the
					  * core allocator (fp-ctl alloc) grants them a core */
	uint32_t burst_idle_us;          /* a burstable worker with nothing to do this long
					  * parks (gives its core back) */
	unsigned park_prio;              /* a worker parked by the control plane sleeps at
					  * SCHED_FIFO this priority (1..99), back to its own
					  * policy when unparked, so the frames its queue still
					  * receives are handed over at once even when its core
					  * runs something else; 0: off (the default) */
	enum fp_park_queue park_queue;   /* who polls a parked worker's queue (above) */
	enum fp_nic_steer nic_steer;     /* the NIC's own RSS table (above) */
	double rx_drop;                  /* fault injection: drop this fraction of received
					  * frames before the stack (counted) */
	double rx_reorder;               /* fault injection: hold this fraction of received
					  * frames back until after the next burst's (counted) */
	uint64_t seed;                   /* for rx_drop, rx_reorder; 0 = from the clock */
	struct fp_xdp_config xdp;        /* ifname/ipv4 are copied from above */
	struct fp_dpdk_config dpdk;      /* --dpdk: EAL arguments; n_queues = n_workers */
	struct fp_stack_config stack;    /* tunables (rcv_buf, max_conns, ...); addresses,
					  * cache and queues are filled in per worker */
	const char *stats_name;          /* shm segment /dev/shm/flowplane-<name>;
					  * NULL = the pid; "" = none */
	struct fp_devq *pair[FP_RT_MAX_WORKERS]; /* FP_TRANSPORT_PAIR: worker i's queue; the
						  * caller owns (and closes) it after the run */
	bool quiet;                      /* no startup line on stderr */
};

/* Defaults for everything (kernel transport, 1 worker on core 0, B = 64, sleep idle). */
void fp_rt_config_init(struct fp_rt_config *cfg);

/*
 * Command-line options every flowplane application shares. @opt is the long option name
 * without dashes ("net", "if", "ip", ...), @val its value. Returns 1 if taken, 0 if not a
 * runtime option, -1 on a bad value (one line in @err). The config keeps pointers to the
 * values of --if and --stats: @val must outlive it (argv does).
 */
int fp_rt_option(struct fp_rt_config *cfg, const char *opt, const char *val,
		 char *err, size_t errlen);

/* The runtime options for --help, one per line, aligned to column 24. */
extern const char fp_rt_options_help[];

/* The names fp_rt_option() takes, for an application's getopt_long table (all take an
 * argument), NULL-terminated. */
extern const char *const fp_rt_option_names[];

/* getopt_long's value for runtime option i (fp_rt_option_names[i]): FP_RT_OPT_BASE + i,
 * above any character an application's short options use. */
#define FP_RT_OPT_BASE 1000

/* An application's getopt_long table: @own (ended by an all-zero entry) followed by every
 * runtime option, as FP_RT_OPT_BASE + i. NULL when out of memory; free() it. */
struct option;
struct option *fp_rt_getopt_table(const struct option *own);

/*
 * Run @app on every worker until stopped. Returns 0, the status given to fp_ctx_stop(), or
 * -errno when startup failed (after printing one line saying what to do on stderr).
 */
int fp_rt_run(const struct fp_rt_config *cfg, const struct fp_app *app);
