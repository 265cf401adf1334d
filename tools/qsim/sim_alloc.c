/* sim_alloc.c: centralized FCFS whose core count a policy changes over time (Shenango, IX). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "queue.h"

enum core_state { C_PARKED, C_WAKING, C_IDLE, C_BUSY };

struct core {
	enum core_state st;
	double t_ev;  /* when this core's next event happens (QS_INF: none) */
	bool retire;  /* park when the current request ends (IX removing a busy core) */
};

struct asim;

/*
 * A core-allocation policy (STYLE habit 8: policy apart from mechanism). The mechanism
 * is one FIFO served by whichever cores are granted; a policy only sees the queue at its
 * periodic tick and grants or retires cores.
 */
struct alloc_ops {
	const char *name;
	bool parks_idle;                           /* a core with no work parks itself */
	void (*tick)(struct asim *a, double now);  /* the periodic decision */
};

struct asim {
	const struct qs_cfg *c;
	const struct qs_alloc *p;
	const struct alloc_ops *ops;
	struct qs_result *r;
	struct core *core;
	unsigned n, active;   /* cores, and those granted (waking, idle or busy) */
	struct qs_fifo q;
	double t_now, area;   /* core-time granted so far */
	double area0, area1;  /* area at the first and last counted arrival */
	double tick_every, t_tick, t_prev_tick;
	/* IX control plane state */
	double ix_qmax, ix_delay, ix_busy, ix_area;
	unsigned ix_subs;
	int rc;
};

static void advance(struct asim *a, double t)
{
	a->area += a->active * (t - a->t_now);
	a->t_now = t;
}

static void park(struct asim *a, unsigned i)
{
	a->core[i].st = C_PARKED;
	a->core[i].t_ev = QS_INF;
	a->core[i].retire = false;
	a->active--;
}

static void start(struct asim *a, unsigned i, double t)
{
	struct qs_req q = qs_fifo_pop(&a->q);

	a->core[i].st = C_BUSY;
	a->core[i].t_ev = t + q.work;
	qs_record(a->r, &q, t, t + q.work);
	a->ix_busy += q.work;
	if (t - q.t > a->ix_qmax)
		a->ix_qmax = t - q.t;
}

/* Core @i has nothing to run: take the queue head, else idle, parking if the policy says. */
static void core_free(struct asim *a, unsigned i, double t)
{
	struct core *k = &a->core[i];

	if (k->retire) {
		park(a, i);
	} else if (a->q.n) {
		start(a, i, t);
	} else {
		k->st = C_IDLE;
		k->t_ev = a->ops->parks_idle ? t + a->p->park : QS_INF;
		if (a->ops->parks_idle && a->p->park <= 0 && a->active > (unsigned)a->p->min_cores)
			park(a, i);
	}
}

/* Grant one more core if any is parked; it runs after the reallocation delay. */
static bool grant(struct asim *a, double t)
{
	for (unsigned i = 0; i < a->n; i++) {
		if (a->core[i].st != C_PARKED)
			continue;
		a->active++;
		a->r->grants++;
		if (a->active > a->r->cores)
			a->r->cores = a->active;
		a->core[i].st = C_WAKING;
		a->core[i].t_ev = t + a->p->realloc;
		if (a->p->realloc <= 0) {
			a->core[i].st = C_IDLE;
			core_free(a, i, t);
		}
		return true;
	}
	return false;
}

static void core_event(struct asim *a, unsigned i, double t)
{
	struct core *k = &a->core[i];

	switch (k->st) {
	case C_BUSY:
		core_free(a, i, t);
		break;
	case C_WAKING:
		k->st = C_IDLE;
		core_free(a, i, t);
		break;
	case C_IDLE: /* the park deadline of an idle core */
		if (a->active > (unsigned)a->p->min_cores)
			park(a, i);
		else
			k->t_ev = QS_INF;
		break;
	case C_PARKED:
		k->t_ev = QS_INF;
		break;
	}
}

/* Enqueue; an idle core takes it at once; a runtime with no core is granted one
 * immediately (Shenango §4: "When a packet arrives for a runtime that has no allocated
 * cores, the IOKernel immediately grants it a core"). */
static void arrival(struct asim *a, const struct qs_req *q)
{
	if (qs_fifo_push(&a->q, q)) {
		a->rc = -ENOMEM;
		return;
	}
	for (unsigned i = 0; i < a->n; i++) {
		if (a->core[i].st == C_IDLE) {
			start(a, i, q->t);
			return;
		}
	}
	if (a->active == 0)
		grant(a, q->t);
}

/*
 * Shenango §4, Algorithm 1: every interval, if an item in the queue was already there
 * at the previous check (it has waited at least one interval), the runtime is congested
 * and gets one more core. With one FIFO, that is "the head arrived before the last tick".
 */
static void shenango_tick(struct asim *a, double now)
{
	if (a->q.n && qs_fifo_front(&a->q)->t <= a->t_prev_tick)
		grant(a, now);
}

/* Remove one core, preferring one that is not running a request. */
static void retire_one(struct asim *a)
{
	for (int pass = 0; pass < 3; pass++) {
		for (unsigned i = 0; i < a->n; i++) {
			struct core *k = &a->core[i];
			if ((pass == 0 && k->st == C_IDLE) || (pass == 1 && k->st == C_WAKING)) {
				park(a, i);
				return;
			}
			if (pass == 2 && k->st == C_BUSY && !k->retire) {
				k->retire = true;
				return;
			}
		}
	}
}

/*
 * IX control plane §4.3: the dataplane measures queueing delay every 10 ms and smooths it
 * with an EWMA; at 10 Hz the controller adds a core when the delay exceeds the bound and
 * removes one when idle time exceeds threshold[n, n-1] (n to n-1 cores loses 1/n of the
 * throughput), here plus a margin. The delay sample is the longest wait seen in the
 * interval, counting the current queue head, which is what ceil(Q/B) * tau estimates.
 */
static void ix_tick(struct asim *a, double now)
{
	const struct qs_alloc *p = a->p;

	if (a->q.n && now - qs_fifo_front(&a->q)->t > a->ix_qmax)
		a->ix_qmax = now - qs_fifo_front(&a->q)->t;
	a->ix_delay = p->ix_alpha * a->ix_qmax + (1 - p->ix_alpha) * a->ix_delay;
	a->ix_qmax = 0;
	if (++a->ix_subs * p->ix_sub < p->ix_period - 1e-9 * p->ix_period)
		return;
	double area = a->area - a->ix_area;
	double idle = area > 0 ? 1 - a->ix_busy / area : 0;
	unsigned floor_cores = p->min_cores > 1 ? (unsigned)p->min_cores : 1;
	if (a->ix_delay > p->ix_bound)
		grant(a, now);
	else if (a->active > floor_cores && idle > 1.0 / a->active + p->ix_margin)
		retire_one(a);
	a->ix_subs = 0;
	a->ix_busy = 0;
	a->ix_area = a->area;
}

static const struct alloc_ops shenango_ops = { "shenango", true, shenango_tick };
static const struct alloc_ops ix_ops = { "ix", false, ix_tick };

/* Index of the core with the earliest event. */
static unsigned next_core(const struct asim *a)
{
	unsigned best = 0;

	for (unsigned i = 1; i < a->n; i++)
		if (a->core[i].t_ev < a->core[best].t_ev)
			best = i;
	return best;
}

/* Cores granted at time 0: as asked, else none for Shenango (it grants on the first
 * arrival) and, for IX, one more than the offered load so the controller starts near
 * its operating point rather than spending seconds of simulated time ramping up. */
static unsigned start_cores(const struct qs_alloc *p, unsigned n, double load)
{
	long k = p->start_cores;

	if (k < 0)
		k = p->kind == QS_ALLOC_IX ? (long)ceil(load * n) + 1 : 0;
	if (k < p->min_cores)
		k = p->min_cores;
	return k > (long)n ? n : (unsigned)k;
}

/* The event loop: arrivals, core events and policy ticks, earliest first. */
static void run_loop(struct asim *a, struct qs_src *s)
{
	struct qs_req nx;
	bool have = qs_src_next(s, &nx), counted = false;

	while (!a->rc) {
		unsigned ci = next_core(a);
		double tc = a->core[ci].t_ev;
		double ta = have ? nx.t : QS_INF;
		double tt = (have || a->q.n) ? a->t_tick : QS_INF;
		if (tc >= QS_INF && ta >= QS_INF && tt >= QS_INF)
			break;
		if (tc <= ta && tc <= tt) {
			advance(a, tc);
			core_event(a, ci, tc);
		} else if (ta <= tt) {
			advance(a, ta);
			if (nx.rec && !counted) {
				counted = true;
				a->area0 = a->area;
			}
			a->area1 = a->area;
			arrival(a, &nx);
			have = qs_src_next(s, &nx);
		} else {
			advance(a, tt);
			a->ops->tick(a, tt);
			a->t_prev_tick = tt;
			a->t_tick = tt + a->tick_every;
		}
	}
}

int qs_sim_alloc(struct qs_src *s, struct qs_result *r, double load)
{
	const struct qs_cfg *c = s->cfg;
	struct asim a = { .c = c, .p = &c->alloc, .r = r, .n = c->servers };

	a.ops = c->alloc.kind == QS_ALLOC_IX ? &ix_ops : &shenango_ops;
	a.tick_every = c->alloc.kind == QS_ALLOC_IX ? c->alloc.ix_sub : c->alloc.interval;
	a.t_tick = a.tick_every;
	a.core = calloc(a.n, sizeof(*a.core));
	if (!a.core)
		return -ENOMEM;
	unsigned k0 = start_cores(&c->alloc, a.n, load);
	for (unsigned i = 0; i < a.n; i++) {
		a.core[i].st = i < k0 ? C_IDLE : C_PARKED;
		a.core[i].t_ev = i < k0 && a.ops->parks_idle ? c->alloc.park : QS_INF;
	}
	a.active = k0;
	r->cores = k0;
	run_loop(&a, s);
	r->alloc_area = a.area1 - a.area0;
	qs_fifo_free(&a.q);
	free(a.core);
	return a.rc;
}
