/* sim_ps.c: processor sharing, M/G/n/PS over one queue or n x M/G/1/PS (thesis §3.2.3). */
#include <errno.h>
#include <stdlib.h>

#include "queue.h"

/*
 * One processor-sharing queue tracked in virtual time: every job present receives
 * service at the same rate, so the service each has attained since it arrived is
 * v(now) - v(arrival). A job leaves when v reaches v(arrival) + size: the heap keeps jobs
 * by that finishing virtual time, and no per-job update is needed when jobs come or go.
 */
struct psq {
	double v; /* virtual time: service attained per job so far */
	double t; /* real time @v refers to */
	struct qs_heap h;
};

/* Rate each of @n jobs gets from @k servers: a whole server each while n <= k. */
static double ps_rate(size_t n, unsigned k) { return n <= k ? 1.0 : (double)k / (double)n; }

/* Move @p to real time @to, completing (and recording) every job that finishes first. */
static void ps_advance(struct psq *p, unsigned k, double to, struct qs_result *r)
{
	while (p->h.n) {
		const struct qs_ent *e = &p->h.a[0];
		double td = p->t + (e->key - p->v) / ps_rate(p->h.n, k);
		if (td > to)
			break;
		/* PS has no start time; the "wait" is the sojourn beyond the work itself. */
		qs_record(r, &e->req, td - e->req.work, td);
		p->v = e->key;
		p->t = td;
		qs_heap_pop(&p->h);
	}
	if (p->h.n)
		p->v += (to - p->t) * ps_rate(p->h.n, k);
	else
		p->v = 0; /* an empty queue restarts virtual time, keeping it small and exact */
	p->t = to;
}

/*
 * Processor sharing. @partitioned false: one queue whose jobs share all n servers, each
 * job getting min(1, n/N) of a server with N present (M/G/n/PS, the time-sharing OS with
 * rebalancing). @partitioned true: each request joins its home queue, which shares one
 * server (n x M/G/1/PS, no rebalancing).
 */
int qs_sim_ps(struct qs_src *s, struct qs_result *r, bool partitioned)
{
	unsigned n = s->cfg->servers, nq = partitioned ? n : 1, k = partitioned ? 1 : n;
	struct psq *qs = calloc(nq, sizeof(*qs));
	struct qs_req q;
	int rc = 0;

	if (!qs)
		return -ENOMEM;
	while (!rc && qs_src_next(s, &q)) {
		struct psq *p = &qs[partitioned ? q.q : 0];
		ps_advance(p, k, q.t, r);
		rc = qs_heap_push(&p->h, p->v + q.work, 0, &q);
	}
	for (unsigned i = 0; i < nq; i++) {
		if (!rc)
			ps_advance(&qs[i], k, QS_INF, r);
		qs_heap_free(&qs[i].h);
	}
	free(qs);
	r->cores = n;
	return rc;
}
