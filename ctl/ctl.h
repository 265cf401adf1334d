/* ctl.h: the control plane's pieces: the command channel, IX's control policy (pure), the 10 Hz loop. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <flowplane/rt_stats.h>

#define CTL_MAX_WORKERS 64
#define CTL_GROUPS      128
#define CTL_MAX_RUNGS   128

/* ---- the command channel (chan.c) ---- */

double ctl_mono_ms(void);
void ctl_nap_us(unsigned us);
/* The run's segment, mapped read-write; NULL after one line on stderr saying why. */
struct fp_rt_stats_hdr *ctl_open(const char *name);
/* One command: 0 with the run's verdict in *@result (0 or -errno), or 1 when the run did
 * not take it in time (one line on stderr). */
int ctl_send(struct fp_rt_stats_hdr *h, const char *name, uint32_t op, uint32_t a0, uint32_t a1,
	     int *result);
/* What a refusal means, in words (for fp-ctl's one-line errors). */
const char *ctl_refusal(uint32_t op, int result);
/* Whether the run's process still exists. */
bool ctl_run_alive(const struct fp_rt_stats_hdr *h);

/* @s without its leading blanks and trailing blanks and CR (cut in place): the policy and
 * power files' lines. */
char *ctl_trim(char *s);
/* A policy or power file, whole and NUL-terminated (free it); NULL with errno: the open's,
 * EFBIG over 1 MiB, EINVAL when it holds a NUL byte (not a text file). */
char *ctl_read_file(const char *path);
/* Why ctl_read_file() failed, in words, from its errno. */
const char *ctl_read_error(int err);

/* ---- the power model (power.c): the files in bench/power/, for fp-ctl watch ---- */

/* Watts at the nominal clock (the model's voltage factor 1): the package while it runs, a
 * core awake (busy or polling), a core asleep (C6). */
struct ctl_power {
	double uncore_w, core_w, c6_w;
};

/* The text of a parameter file ("name = value low high" lines, # comments): 0, or
 * -EINVAL with one line in @err naming the line and what is wrong. */
int ctl_power_parse(struct ctl_power *pw, const char *text, char *err, size_t errlen);
/* The package's watts with @n cores, each asleep the share @asleep[i] (clamped to 0..1). */
double ctl_power_watts(const struct ctl_power *pw, unsigned n, const double *asleep);

/* ---- the policy (policy.c): a function of what the loop sees, no I/O ---- */

/*
 * IX's control loop (Prekas et al., SoCC'15, §4.3): add a core when the queueing delay
 * estimate ceil(Q/B)*tau of some core exceeds the bound the operator sets below the SLO
 * (IX: 300 us for a 500 us p99 SLO); remove one when the idle share says the load fits in
 * one core fewer (from n to n-1 cores throughput falls by 1/n, so idle above 1/n, plus a
 * margin, is safe). Frequency steps and hyperthreads are the paper's other steps; real cores
 * here have neither, so this policy steps cores only (the simulator models frequency).
 */
/* One configuration of IX's policy ladder: how many workers poll, at what clock. */
struct ctl_rung {
	unsigned workers;
	double ghz;
};

struct ctl_policy {
	unsigned interval_ms;        /* the loop's period: 100 (IX's 10 Hz) */
	double delay_max_us;         /* add a worker above this queueing delay: 300 */
	unsigned up_ewma;            /* which smoothing the up signal uses: 0 (alpha 1/2),
				      * 1 (1/8), 2 (1/32); IX reacts fast to rising delay: 0 */
	unsigned down_ewma;          /* and the down signal (idle share): 1 */
	double idle_margin;          /* remove one of n workers above idle 1/n + this: 0.1 */
	unsigned min_workers;        /* never fewer polling: 1 */
	unsigned max_workers;        /* never more: 0 = all the run has */
	unsigned down_hold_ms;       /* no removal within this long of any change: 1000 */
	/* IX's derived policy (SoCC'15 §3.2) as data: the configurations to step through as
	 * load rises, in order of capacity (workers x GHz), e.g. "1@1.2, 2@1.2, ..., 8@2.4";
	 * none (n_rungs 0): step one worker at a time (fp-ctl run; real cores here have no
	 * clock to set, so fp-ctl refuses a ladder and the simulator runs it) */
	unsigned n_rungs;
	struct ctl_rung rung[CTL_MAX_RUNGS];
	/* ladder only: 0, IX's one rung up per tick; 1, up to the lowest rung of capacity
	 * cap x (1 + delay / interval): enough to serve the arrivals and drain the queue the
	 * delay estimate implies within one interval */
	unsigned up_drain;
	/* ladder only: 0, IX's one rung down per tick; 1, down to the lowest rung whose
	 * capacity exceeds cap x (1 - idle + idle_margin) (IX's test, applied to every rung
	 * below), so a load that fell several rungs' worth is followed in one tick */
	unsigned down_fit;
};

void ctl_policy_default(struct ctl_policy *p);
/* "key = value" lines, '#' comments; a key not set keeps its default. 0, or -EINVAL with
 * one line in @err naming the line and what is wrong. */
int ctl_policy_parse(const char *text, struct ctl_policy *p, char *err, size_t errlen);

/* One worker as the loop sees it at a tick. */
struct ctl_wview {
	bool parked;
	bool fresh;                  /* published a control interval since the last tick
				      * (a sleeping worker publishes none: it is idle) */
	unsigned groups;             /* owned, arriving included */
	double delay_us[3];          /* IX's queueing delay estimate, the three EWMAs */
	double idle[3];              /* idle share 0..1, the three EWMAs */
};

struct ctl_view {
	unsigned n;                  /* workers in the run */
	uint64_t now_ms, last_change_ms;
	bool moving;                 /* some group is on its way: decide nothing */
	int draining;                /* the worker being emptied to park, or -1 */
	struct ctl_wview w[CTL_MAX_WORKERS];
};

enum ctl_act { CTL_HOLD = 0, CTL_UP, CTL_DOWN };

struct ctl_decision {
	enum ctl_act act;
	unsigned worker;             /* UP: the one to unpark; DOWN: the one to empty */
	char why[96];
};

struct ctl_decision ctl_decide(const struct ctl_policy *p, const struct ctl_view *v);

/* The same signals over @p's ladder, standing on rung @cur: UP (one rung up) when some
 * worker's queueing delay exceeds the bound, DOWN (one rung down) when the idle share says
 * the load fits the rung below (idle > 1 - capacity below / capacity here + idle_margin,
 * which for a worker fewer is ctl_decide's 1/n + margin), after down_hold_ms. The
 * decision's worker field is the rung to go to. With up_drain, UP goes to the lowest rung
 * that serves the arrivals and drains the estimated queue within an interval; with
 * down_fit, DOWN goes to the lowest rung that passes the idle test. */
struct ctl_decision ctl_decide_ladder(const struct ctl_policy *p, const struct ctl_view *v,
				      unsigned cur);

struct ctl_move {
	uint8_t group;
	uint8_t to;
};

/* The moves that spread @table's groups evenly over the workers in @target (bit w: worker
 * w may own groups), taking from the most loaded first and moving as few as possible.
 * Returns how many it wrote to @out (at most @max). */
unsigned ctl_plan(const uint16_t table[CTL_GROUPS], unsigned n_groups, unsigned n,
		  uint64_t target, struct ctl_move *out, unsigned max);

/* ---- the batch job of the consolidation objective (batch.c) ---- */

enum { CTL_BATCH_CGROUP2 = 1, CTL_BATCH_CGROUP1, CTL_BATCH_AFFINITY };
/* ctl_batch_start's flags */
#define CTL_BATCH_IDLE      1u   /* at SCHED_IDLE: any other thread on its cores preempts it */
#define CTL_BATCH_NO_CGROUP 2u   /* affinity only (cores it shares, as fp-ctl alloc's pool) */

struct ctl_batch {
	pid_t pid;                   /* `sh -c CMD`, leader of its process group */
	int how;                     /* CTL_BATCH_*: what confines it */
	char dir[300];               /* its cgroup ("" with affinity) */
	uint64_t cpus;               /* the cores it may use now (bit c: CPU c) */
	bool stopped, exited;
	bool by_itself;              /* it ended before ctl_batch_end asked it to */
	int status;                  /* its wait status, once it has ended */
	double cpu_s;                /* its CPU time, once reaped */
	unsigned changes;            /* cpuset changes made */
};

/* Start CMD confined to @cpus (stopped when 0; @all: every core of the run, the set it
 * starts with while stopped), with CTL_BATCH_* @flags. 0, or -errno with one line in @err. */
int ctl_batch_start(struct ctl_batch *b, const char *cmd, uint64_t all, uint64_t cpus,
		    unsigned flags, char *err, size_t errlen);
/* Give it @cpus (0: stop it until some come back). */
int ctl_batch_set(struct ctl_batch *b, uint64_t cpus);
bool ctl_batch_alive(struct ctl_batch *b);
const char *ctl_batch_how(const struct ctl_batch *b);
/* Stop it (SIGTERM, SIGKILL after 2 s) unless it has ended, remove its cgroup; the CPU
 * seconds it and the children it waited for used. */
double ctl_batch_end(struct ctl_batch *b);

/* ---- the clients' latency (client.c): fp-loadgen's stderr, followed as it is written ---- */

struct ctl_client {
	FILE *f;                     /* opened by the caller */
	char part[512];              /* a line not yet ended */
	size_t n_part;
	unsigned point, points;      /* the last point reported; 0: none yet */
	double p99_us;
};
/* Read what was appended since the last call; keep the last point's figures. */
void ctl_client_read(struct ctl_client *c);

/* ---- the loop (loop.c) ---- */

struct ctl_run_opts {
	struct ctl_policy policy;
	double seconds;              /* stop after this long; 0: until interrupted */
	const char *log_path;        /* JSON lines, one per tick; NULL: none */
	bool quiet;                  /* no line per change on stdout */
	const char *batch;           /* --batch CMD: IX's consolidation; NULL: none */
	const char *client_path;     /* --client FILE: fp-loadgen's stderr, its p99 in the log */
};

/* Run the loop against run @name: 0 at the end (time up, interrupted, the run gone), 1 when
 * it cannot start. */
int ctl_loop(const char *name, const struct ctl_run_opts *o);

/* ---- Shenango's core allocator over running flowplanes (alloc_loop.c) ---- */

/* fp-ctl alloc NAME... [options]: argv as fp-ctl got it. The exit status. */
int ctl_alloc_main(int argc, char **argv);
