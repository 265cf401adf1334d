/* vsim.h: fp-vsim: the shuffle layer's workers on N cores, in virtual time or on real threads. */
#pragma once

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/alloc.h>
#include <flowplane/hist.h>
#include <flowplane/ring.h>
#include <flowplane/shuffle.h>

#include "ctl.h"          /* ctl/: IX's policy, the same code fp-ctl runs */
#include "lg.h"           /* apps/loadgen/: IX's load patterns, the same as fp-loadgen's */

/*
 * One worker loop (model.c) runs in two worlds:
 *
 *   - virtual (virt.c): N cores in one thread, each with its own clock; the core whose
 *     clock is smallest runs its next step; what a step costs comes from the cost model
 *     (struct vs_costs) plus the requests' own service times. Same seed, same bytes out.
 *   - real (real.c): one pinned thread per worker spinning each request's service time on
 *     the TSC, fed by a generator thread that plays the NIC; the costs are whatever the
 *     machine takes, and are measured per step so the virtual world can be calibrated.
 *
 * A worker's step is one of: finish what it ran, complete flows that came home, take
 * frames from its NIC queue, run one of its ready flows, or (stealing) probe other
 * workers and run one of theirs. Each step's visible effect happens at the end of its
 * cost, so in virtual time no core sees another's work before it is done.
 */

#define VS_MAX_CORES 64
#define VS_GROUPS    128     /* flow groups: a flow's hash picks one, a table its worker */

enum vs_sched { VS_SCHED_PART = 0, VS_SCHED_STEAL };
enum vs_notify { VS_NOTIFY_POLL = 0, VS_NOTIFY_IPI };
enum vs_app { VS_APP_SPIN = 0, VS_APP_KV };   /* --full: fp-echo's spin server, or fp-kv */

/* The cost model, in ns (virtual world), or the mean measured cost (real world). */
struct vs_costs {
	double rx_ns;        /* per frame taken from the NIC queue and posted to its flow */
	double run_ns;       /* per batch run, beyond its requests' service times */
	double local_ns;     /* per flow completed at home after running there (its reply) */
	double ship_ns;      /* per flow a thief sends back to its home */
	double remote_ns;    /* per returned flow the home completes (its reply) */
	double steal_ns;     /* per steal attempt: probing the other workers, and the take */
	double poll_ns;      /* one pass of the loop's checks (returns, NIC, own queue, the
			      * others' queues), paid by every step: an idle core sees new
			      * work one pass late */
	double kick_ns;      /* the sender's cost of an interrupt (a tgkill on real threads) */
	double ipi_ns;       /* an interrupt's delivery */
	double ipi_handle_ns; /* the interrupted core's cost to enter and leave the handler */
	double wake_ns;      /* --alloc: a grant decided to the worker running on its core */
	double park_ns;      /* --alloc: a worker's cost of parking (its core is nobody's) */
	double move_ns;      /* --ctl: the old owner's cost of starting a flow group's move
			      * (IX's hold: marking it, stopping its timers) */
	double wire_ns;      /* --full: a frame's time from one NIC to the other */
	double tx_ns;        /* --full: per transmit burst handed to the device (its kick:
			      * a doorbell, or a syscall on AF_XDP in copy mode) */
};

struct vs_cost_name {
	const char *name;
	unsigned off;
	const char *help;
};
extern const struct vs_cost_name vs_cost_names[];
extern const unsigned vs_n_cost_names;

struct vs_config {
	unsigned n;                  /* workers */
	enum vs_sched sched;
	enum fp_shuf_victim victim;
	enum vs_notify notify;
	const char *dist;            /* det, exp, bimodal1, bimodal2 */
	double mean_us;              /* mean service time S */
	double load;                 /* offered load: arrival rate x S / n */
	uint64_t requests;
	double warmup;               /* fraction of the first requests not counted */
	uint32_t flows;
	unsigned batch;              /* frames per NIC poll */
	uint64_t seed;
	struct vs_costs costs;
	bool real;
	bool full;                   /* the real workers, stack and handler (full.c) */
	bool steal_force;            /* --full: every batch runs on a thief */
	enum vs_app app;             /* --full --app */
	uint64_t kv_keys;            /* --app kv: the key space (--keys), all stored first */
	double ipi_after_us;         /* --full --notify ipi: the runtime's --ipi-after-us */
	double flush_us;             /* --full: the runtime's --flush-us */
	double loss, reorder;        /* --full: each frame's chance of being dropped, and of
				      * being held back (others pass it) on the virtual wire */
	const struct vs_stalls *stalls; /* --full --stalls: the machine's stalls (NULL: none) */
	int cores[VS_MAX_CORES + 1]; /* real: worker cores, then the generator's */
	unsigned n_cores_listed;
	double slo_mult;             /* --max-load: p99 <= slo_mult x S */
	/* --alloc: Shenango's core allocator (rt/alloc.c): workers 0..homes-1 own the flow
	 * groups and always poll; the others are burstable, granted their cores when the
	 * homes' queues are congested, parking after spin_us without work */
	bool alloc;
	unsigned homes;
	double alloc_us;             /* the allocator's interval (Shenango: 5) */
	double spin_us;              /* how long a burstable worker looks before parking */
	/* --shift LO:HI:MS: load LO for MS, HI for MS, LO for MS (Shenango's Figure 5) */
	double shift_lo, shift_hi, shift_ms;
	double window_us;            /* --windows: per-window results, this wide */
	/* IX's control plane (issue 18): the clock, load patterns, the 10 Hz loop */
	double ghz, nominal_ghz;     /* every step and service time takes nominal/ghz as long */
	double slo_us;               /* --max-load's bound in us (0: slo_mult x S) */
	bool has_pattern;            /* --pattern: the arrival rate follows IX's pattern */
	struct lg_pattern pattern;   /* rates in requests/s, over pattern.duration_s */
	const char *pattern_spec;
	bool ctl;                    /* --ctl: the control loop (ctl/policy.c) runs the workers */
	struct ctl_policy policy;
};

/* A request: its arrival, service time and flow; where and when it was answered. */
struct vs_req {
	struct fp_shuf_ev ev;
	uint64_t t_arr;              /* ns: scheduled arrival (virtual or real clock) */
	uint64_t t_done;             /* ns: reply executed at home */
	uint32_t svc_ns;
	uint32_t flow;
	uint32_t seq;                /* within its flow */
};

struct vs_flow {
	struct fp_shuf_flow sf;
	uint32_t next_seq;           /* the next reply expected (order check) */
};

enum vs_phase { VS_PH_NONE = 0, VS_PH_RX, VS_PH_RET, VS_PH_RUN, VS_PH_STEAL };

/* What the time of a real step went to, for calibration (one per cost of vs_costs). */
enum vs_kind { VS_K_RX = 0, VS_K_RET, VS_K_RUN, VS_K_LOCAL, VS_K_SHIP, VS_K_STEAL, VS_K_POLL,
	       VS_K_IPI, VS_K_IPI_HANDLE, VS_K_KICK, VS_K_N };

struct vs_run;

/* One worker: its shuffle index, clock, phase and counters. */
struct vs_core {
	struct vs_run *run;
	unsigned id;
	enum vs_phase phase;
	unsigned pending_n;          /* RX/RET: how many the step charged for */
	struct vs_flow *running;     /* RUN: the flow being run */
	/* virtual world */
	uint64_t clock;              /* ns */
	bool parked;
	uint64_t irq_at;             /* an interrupt due at this time (0: none) */
	/* --alloc: a burstable worker; off: not granted, its core runs the batch job */
	bool burst, off;
	uint64_t off_since;          /* when it last parked (ns) */
	uint64_t idle_since;         /* first look that found nothing since it last worked;
				      * UINT64_MAX: it worked last */
	uint64_t wake_at;            /* parked idle: look again then to park (0: no deadline) */
	uint64_t off_ns, grants, parks;
	/* counters */
	uint64_t frames, replies, batches, kicks, irqs, order_errors;
	struct fp_hist lat;          /* sojourn, ns */
	/* --ctl: the worker's share of the machine, and IX's metrics over the interval */
	double slow;                 /* nominal GHz / the clock's GHz (1: nominal) */
	bool on;                     /* polling (its core the app's); off: parked in a deep
				      * C-state, or the batch job's */
	uint64_t busy_ns;            /* time in steps and service so far */
	uint64_t served;             /* requests run so far */
	uint64_t q_sum, q_n;         /* queue depth at each pass of the loop, summed */
	uint64_t busy0, served0;     /* at the interval's start */
	double delay_ewma[3], idle_ewma[3];
	bool ewma_set;
	/* real world: the NIC queue, interrupts (a signal), and time spent per step kind */
	struct fp_ring *nic;
	pthread_t thread;
	volatile sig_atomic_t in_run;        /* spinning a batch: an interrupt may run */
	int irq_pending;                     /* a signal sent and not yet handled */
	uint64_t irq_sent_ns;                /* when it was sent (delivery time) */
	volatile uint64_t irq_ns_in_run;     /* handler time inside the current run */
	uint64_t cnt[VS_K_N];        /* frames, flows, batches, attempts, passes */
	uint64_t spent_ns[VS_K_N];
	uint64_t done_total;         /* replies, read by the main thread */
};

struct vs_run {
	const struct vs_config *cfg;
	struct fp_shuf sh;
	struct vs_core *core;
	struct vs_req *req;
	uint64_t n_req;              /* requests in @req */
	struct vs_flow *flow;
	uint8_t table[VS_GROUPS];    /* flow group -> worker */
	uint64_t warm;               /* requests before this index are not counted */
	/* virtual world's NIC: per worker, indices into @req in arrival order */
	uint32_t **vq;
	uint32_t *vq_head, *vq_tail;
	uint64_t next_arr;           /* index of the next request to arrive */
	uint64_t replied;            /* virtual world: replies so far */
	/* results */
	uint64_t end_ns;             /* virtual or real duration */
	uint64_t gen_late_max_ns;    /* real: the generator's worst lateness */
	uint64_t gen_late_count;     /* real: arrivals posted more than 1 us late */
	/* --alloc (virtual world) */
	struct fp_alloc *alloc;
	uint64_t next_pass;          /* the allocator's next pass (ns) */
	struct vs_tr {               /* a burstable core taken (+1) or given back (-1) */
		uint64_t t;
		int32_t d;
	} *tr;
	size_t n_tr, cap_tr;
	/* virtual world's NIC queues are rings of @vq_cap[w] (a power of two) slots */
	uint32_t *vq_cap;
	/* --ctl: flow groups and their moves (IX's hold and release), the loop's state */
	uint8_t *flow_group;         /* per flow */
	uint32_t **group_flows, *group_nflows;
	uint32_t outstanding[VS_GROUPS];   /* arrived at the owner and not yet answered */
	int16_t moving_to[VS_GROUPS];      /* -1, or the worker the group is on its way to */
	uint64_t move_start[VS_GROUPS];
	uint32_t *held[VS_GROUPS], n_held[VS_GROUPS], cap_held[VS_GROUPS];
	unsigned moving;                   /* groups on their way */
	unsigned rung, n_on;               /* the ladder's rung; workers polling */
	double ghz;                        /* the clock now */
	int draining;                      /* the first worker being emptied, or -1 */
	unsigned n_target;                 /* workers 0..n_target-1 are to own the groups */
	uint64_t next_tick, last_change_ns, ticks, ups, downs, moves, wakes;
	uint64_t move_ns_sum, move_ns_max;
	struct vs_cfgch {                  /* workers polling and the clock from @t on */
		uint64_t t;
		uint16_t n_on;
		uint32_t seq;
		double ghz;
	} *cfgch;
	size_t n_cfgch, cap_cfgch;
	uint64_t pending_arrivals;         /* arrived, not yet answered (all groups) */
};

/* One window of a time series (--windows): requests by arrival time. */
struct vs_window {
	double t0_ms, offered_mrps, done_mrps, mean_cores, mean_ghz;
	struct fp_hist_summary s;
};

/* Results of one point. */
struct vs_result {
	double load, offered_mrps, achieved_mrps;
	struct fp_hist_summary s;
	uint64_t steals, returns, probes, misses, kicks, irqs, order_errors, batches, frames;
	uint64_t gen_late_max_ns, gen_late_count;
	struct vs_costs measured;    /* real world only */
	uint64_t duration_ns;
	/* --alloc */
	double mean_cores, batch_share;   /* workers holding a core, and the pool's idle share */
	uint64_t grants, parks, congested, starved, passes;
	struct vs_window *win;            /* --windows: n_win of them (the caller frees) */
	unsigned n_win;
	/* --ctl (and any virtual run): core-seconds polling per clock, off, wake-ups */
	unsigned n_clocks;
	double clock_ghz[CTL_MAX_RUNGS + 1], on_core_s[CTL_MAX_RUNGS + 1];
	double off_core_s;
	uint64_t ticks, ups, downs, moves, wakes;
	double move_us_mean, move_us_max;
	/* --full: frames the wire dropped and held back; connections the client closed and
	 * the workers let go */
	uint64_t wire_drops, wire_delayed, conns_closed;
	uint64_t nic_drops;               /* --full: frames a receiver had no buffer for */
	double busy_ns_per_req;           /* --full: the costs of the workers' rounds that did
					   * work, per request (its service time left out) */
	/* --full --stalls: stalls that hit the workers (all told) and the client, and the
	 * virtual time they took */
	uint64_t stalls_server, stalls_client;
	double stalls_server_ms, stalls_client_ms;
	double fit_r2;                    /* --full: measured costs' fit (R²) over fit_rounds */
	uint64_t fit_rounds, fit_stalls;   /* rounds fitted; left out as stalls (> 50 us) */
	/* --full --app kv: GETs that missed (none should, every key is stored first), the
	 * commands fp-kv's handler ran (the keys' SETs too) and its own time per command on
	 * this machine's TSC */
	uint64_t kv_misses, app_cmds;
	double app_ns_per_cmd;
};

/* costs.c: NAME=NS lines ('#' starts a comment, blank lines skipped) into @k, from
 * @text of @len bytes (not NUL-terminated). 0, or -EINVAL with "line N: what" in @err. */
int vs_costs_parse(struct vs_costs *k, const char *text, size_t len, char *err, size_t errlen);
/* One NAME=NS; 0 or -EINVAL with what in @err. */
int vs_cost_set(struct vs_costs *k, const char *spec, size_t len, char *err, size_t errlen);

/* A machine's stalls (--stalls FILE, --full): the gaps a loop without system calls saw on
 * the server's core (role 0) and the client's (role 1) over @seconds; each virtual core
 * (every worker, and the client) is stalled by its own Poisson process of that rate, each
 * stall as long as one of its role's gaps drawn at random. */
struct vs_stalls {
	double seconds;
	double *gap_us[2];
	size_t n[2], cap[2];
};

/* costs.c: "seconds=S", "server=G,G,..." and "client=G,..." lines (gaps in µs, '#'
 * comments; lists may repeat and add up) into @s. 0, or -EINVAL/-ENOMEM with "line N:
 * what" in @err and @s empty. */
int vs_stalls_parse(struct vs_stalls *s, const char *text, size_t len, char *err, size_t errlen);
void vs_stalls_free(struct vs_stalls *s);

/* model.c */
unsigned vs_home_of(const struct vs_run *r, uint32_t flow);
int vs_run_setup(struct vs_run *r, const struct vs_config *cfg);
void vs_run_free(struct vs_run *r);
bool vs_step(struct vs_core *c);     /* one step; false when the core found nothing */
void vs_irq(struct vs_core *c);      /* ZygOS's IPI handler, on an interrupted core */
void vs_irq_real(struct vs_core *c); /* the same, in a signal handler on a real worker */
void vs_collect(struct vs_run *r, struct vs_result *out);
void vs_alloc_pass(struct vs_run *r, uint64_t t);  /* --alloc: one allocator pass at @t */
void vs_park(struct vs_core *c);     /* --alloc: a burstable worker gives its core back */
void vs_arrive(struct vs_run *r, uint64_t t);   /* the next request joins its queue */
void vs_vq_prepend(struct vs_run *r, unsigned w, const uint32_t *idx, uint32_t n);

/* ctl.c: IX's control loop in virtual time */
int vs_ctl_setup(struct vs_run *r);
void vs_ctl_tick(struct vs_run *r, uint64_t t);    /* one tick of the loop at @t */
void vs_ctl_answered(struct vs_run *r, struct vs_core *c, unsigned group);
void vs_ctl_hold(struct vs_run *r, unsigned g, uint32_t idx);  /* a frame of a moving group */
void vs_cfg_log(struct vs_run *r, uint64_t t);    /* workers polling / the clock changed */

/* virt.c, real.c */
int vs_virtual(struct vs_run *r);
int vs_real(struct vs_run *r);
/* full.c: @r's requests served by the real workers in virtual time; fills @res (as
 * vs_collect does). 0, or -errno with one line in @err. */
int vs_full(struct vs_run *r, struct vs_result *res, char *err, size_t errlen);
