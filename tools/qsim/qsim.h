/* qsim.h: the queueing simulator's model, request source, engines and outputs (private). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <flowplane/hist.h>

#include "parse.h"
#include "rng.h"

/*
 * Every simulated time is in units of the mean service time S̄ (S̄ = 1), so one run serves
 * every absolute scale; microseconds appear only at the edges (options and output).
 * Latencies go into the histogram as integers in units of S̄/QS_TICKS: the shortest
 * service here (S̄/2) is 2048 ticks, so rounding adds under 0.03% to the histogram's
 * own bucket error (< 0.4%, include/flowplane/hist.h).
 */
#define QS_TICKS       4096.0
#define QS_MAX_SERVERS 1024u
#define QS_INF         1e300

/* Scheduling disciplines of the thesis, §3.2.3 (Figure 3.1), plus ZygOS-style stealing. */
enum qs_disc {
	QS_FCFS,    /* centralized FCFS: M/G/n/FCFS */
	QS_PART,    /* partitioned FCFS: n x M/G/1/FCFS */
	QS_PS,      /* processor sharing over one queue: M/G/n/PS */
	QS_PART_PS, /* partitioned processor sharing: n x M/G/1/PS */
	QS_STEAL,   /* partitioned FCFS where an idle server steals the oldest waiting request */
};

/* Service-time distributions of the thesis, §3.2.3, plus lognormal and a measured one. */
enum qs_dist_kind { QS_DET, QS_EXP, QS_BIM1, QS_BIM2, QS_LOGN, QS_EMP };

/* Core-allocation policies; all but NONE run on the centralized FCFS queue. */
enum qs_alloc_kind {
	QS_ALLOC_NONE,     /* a fixed number of servers */
	QS_ALLOC_ORACLE,   /* Shenango §2 Figure 1: fewest static cores meeting the SLO */
	QS_ALLOC_SHENANGO, /* Shenango §4 Algorithm 1: congestion detection */
	QS_ALLOC_IX,       /* IX control plane §4.3: 10 Hz queueing-delay controller */
};

enum qs_route_kind { QS_ROUTE_UNIFORM, QS_ROUTE_WEIGHTS, QS_ROUTE_FLOWS };

struct qs_dist {
	enum qs_dist_kind kind;
	double cv;                /* lognormal: the coefficient of variation asked for */
	double mu, sigma;         /* lognormal: parameters of the underlying normal */
	struct qs_empirical emp;  /* empirical: values already scaled to mean 1 */
};

/* How partitioned disciplines pick a request's home queue. */
struct qs_route {
	enum qs_route_kind kind;
	unsigned nflows;  /* FLOWS: requests pick one of nflows flows uniformly... */
	uint32_t *flow_q; /* ...and flow f always lands on queue flow_q[f] (a random hash) */
	double *cum;      /* WEIGHTS: cumulative probability of each queue */
};

struct qs_alloc {
	enum qs_alloc_kind kind;
	double interval;   /* ORACLE: allocation interval; SHENANGO: detection interval */
	double realloc;    /* from granting a core until it runs requests */
	double park;       /* SHENANGO: how long an idle core spins before it parks */
	int min_cores;     /* never fewer cores than this */
	int start_cores;   /* cores held at time 0; -1: the policy's default */
	double ix_period;  /* IX: control-loop period (10 Hz) */
	double ix_sub;     /* IX: the dataplane's metric interval (10 ms) */
	double ix_alpha;   /* IX: EWMA smoothing factor of the delay metric */
	double ix_bound;   /* IX: acceptable queueing delay; above it, add a core */
	double ix_margin;  /* IX: remove a core when idle > 1/n + margin */
};

struct qs_cfg {
	unsigned servers;     /* n; with an allocator, the most cores it may hold */
	enum qs_disc disc;
	struct qs_dist dist;
	char dist_name[64];
	double mean_us;       /* S̄ in microseconds, for absolute output */
	uint64_t requests;
	double warmup;        /* fraction of requests served before statistics start */
	uint64_t seed;
	double slo_pct;       /* SLO percentile (99: p99) */
	double slo;           /* SLO latency, in S̄ */
	double steal_cost;    /* per-steal overhead, in S̄ */
	double req_cost;      /* per-request overhead, in S̄ */
	struct qs_route route;
	const struct qs_trace *trace; /* arrivals (and maybe service) from a file */
	const char *trace_path;
	double trace_load;    /* the trace's own offered load */
	double trace_svc_mean; /* mean of the trace's service column (us) */
	struct qs_alloc alloc;
};

struct qs_req {
	double t;     /* arrival time */
	double svc;   /* the application's work: what CPU efficiency counts as useful */
	double work;  /* how long a server is busy with it: svc plus per-request overhead */
	uint32_t q;   /* home queue (partitioned disciplines) */
	uint32_t rec; /* past the warm-up, so it counts in the statistics */
};

/* Where requests come from: Poisson arrivals (or a trace), service draws, routing. */
struct qs_src {
	const struct qs_cfg *cfg;
	struct qs_rng arr, svc, route;
	double gap;     /* Poisson: mean inter-arrival time */
	double tscale;  /* trace: S̄ per trace microsecond, stretched to the asked load */
	double t;
	uint64_t i, n, warm;
	double t_first_rec, t_last;
};

/* What one simulation measured (times in S̄). */
struct qs_result {
	struct fp_hist *hist; /* sojourn times in S̄/QS_TICKS, supplied by the caller */
	uint64_t n, n_wait, steals, grants;
	double sum_lat, sum_wait;
	double useful;      /* application work done */
	double busy;        /* time servers were busy, overheads included */
	double alloc_area;  /* core-time allocated; 0 means n servers throughout */
	double elapsed;     /* first counted arrival to the end of the run */
	unsigned cores;     /* most cores held at once (ORACLE: the count it chose) */
};

/* source.c: distributions, routing and the request stream. */
/* Set @d from a built-in name (det, exp, bimodal1, bimodal2, lognormal:CV); 0 or -EINVAL. */
int qs_dist_parse(struct qs_dist *d, const char *spec);
/* Make @d the empirical distribution @e (taken over and scaled to mean 1). */
void qs_dist_set_empirical(struct qs_dist *d, struct qs_empirical *e);
/* One service time in units of S̄. */
double qs_dist_sample(const struct qs_dist *d, struct qs_rng *r);
/* The distribution's coefficient of variation. */
double qs_dist_cv(const struct qs_dist *d);
void qs_dist_free(struct qs_dist *d);
/* Routing for partitioned disciplines from --queue-weights or --flows; 0, -EINVAL, -ENOMEM. */
int qs_route_setup(struct qs_cfg *c, const char *weights, unsigned flows);
void qs_route_free(struct qs_route *r);
/* Start @c's request stream at offered load @load, with the same draws at every load. */
void qs_src_init(struct qs_src *s, const struct qs_cfg *c, double load);
/* The next request in arrival order into @r; false once the run's requests are served. */
bool qs_src_next(struct qs_src *s, struct qs_req *r);

/* Count @q's sojourn (arrival to @end) and wait (arrival to @start) if it is past warm-up. */
static inline void qs_record(struct qs_result *res, const struct qs_req *q, double start,
			     double end)
{
	if (!q->rec)
		return;
	double lat = end - q->t, wait = start - q->t;
	fp_hist_record(res->hist, (uint64_t)(lat * QS_TICKS + 0.5));
	res->n++;
	res->sum_lat += lat;
	res->sum_wait += wait;
	res->n_wait += wait > 1e-9; /* 1e-9 S absorbs the float noise of PS's derived start */
	res->useful += q->svc;
	res->busy += q->work; /* steal overheads are added by the engine that pays them */
}

/* The engines: each serves @s's whole stream into @r; 0 or -ENOMEM. */
/* sim_fcfs.c: centralized FCFS on @k servers (every @interval starting empty, if > 0)... */
int qs_sim_fcfs(struct qs_src *s, struct qs_result *r, unsigned k, double interval);
/* ...and partitioned FCFS. */
int qs_sim_part(struct qs_src *s, struct qs_result *r);

/* sim_ps.c: processor sharing, one queue shared by n servers or n private queues. */
int qs_sim_ps(struct qs_src *s, struct qs_result *r, bool partitioned);

/* sim_steal.c: partitioned FCFS with work stealing. */
int qs_sim_steal(struct qs_src *s, struct qs_result *r);

/* sim_alloc.c: centralized FCFS with a core allocator deciding how many servers run. */
int qs_sim_alloc(struct qs_src *s, struct qs_result *r, double load);

/* run.c: one configuration at one load, dispatching to the right engine. */
int qs_run(const struct qs_cfg *c, double load, struct qs_result *r);

/* What the command line asked for. */
struct qs_opts {
	struct qs_cfg cfg;
	struct qs_trace trace;
	double *loads;
	size_t nloads;
	bool max_load;        /* bisect for the highest load meeting the SLO */
	double resolution;    /* ...to within this much load */
	bool json;
	const char *out_path; /* NULL: stdout */
	int progress;         /* 1: report each point on stderr; 0: quiet; -1: if a tty */
};

/* cli.c: parse @argv into @o. 0: run; 1: --help was printed; -EINVAL: a one-line error
 * was printed; -ENOMEM. */
int qs_cli_parse(int argc, char **argv, struct qs_opts *o);
void qs_opts_free(struct qs_opts *o);

/* One load point, summarized for output (latencies in S̄). */
struct qs_point {
	double load, offered_cores, rate_mrps;
	double p50, p99, p999, pslo, mean, mean_wait, p_wait, max;
	double efficiency, utilization, cores_mean;
	unsigned cores_max;
	uint64_t n, steals, grants;
	bool meets;
};

/* The bisection's answer: the highest load found to meet the SLO. */
struct qs_maxload {
	double load, resolution;
	unsigned iterations;
	bool found;
	struct qs_point at;
};

/* out.c: summarize a result (latencies in S̄, efficiency = useful / allocated)... */
void qs_point_from(struct qs_point *p, const struct qs_cfg *c, double load,
		   const struct qs_result *r);
/* ...and print a whole run as one JSON object or as a table (@m: NULL if no bisection). */
void qs_out_json(FILE *f, const struct qs_opts *o, const struct qs_point *pts, size_t n,
		 const struct qs_maxload *m);
void qs_out_table(FILE *f, const struct qs_opts *o, const struct qs_point *pts, size_t n,
		  const struct qs_maxload *m);
