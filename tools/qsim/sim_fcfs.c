/* sim_fcfs.c: centralized (M/G/n) and partitioned (n x M/G/1) FCFS by direct recursion. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "qsim.h"

/* Restore the min-heap @h[0..n) after its root grew. */
static void sift_down(double *h, unsigned n)
{
	unsigned i = 0;
	double x = h[0];

	for (;;) {
		unsigned l = 2 * i + 1, m;
		if (l >= n)
			break;
		m = (l + 1 < n && h[l + 1] < h[l]) ? l + 1 : l;
		if (h[m] >= x)
			break;
		h[i] = h[m];
		i = m;
	}
	h[i] = x;
}

/*
 * Centralized FCFS over @k servers. Requests start in arrival order, each on the server
 * that frees first (Kiefer and Wolfowitz's recursion), so no event list is needed: one
 * heap of server free times, O(log k) per request.
 *
 * With @interval > 0 this is the best-case fixed-interval allocator of Shenango §2
 * (Figure 1): "the arrival queue starts out empty at the beginning of each interval and
 * all pending requests can be processed immediately at the end of each interval". So at
 * each interval boundary every server is free, and a request still waiting or running at
 * the boundary completes there.
 */
int qs_sim_fcfs(struct qs_src *s, struct qs_result *r, unsigned k, double interval)
{
	double *h = malloc(k * sizeof(*h));
	double iend = interval > 0 ? interval : QS_INF;
	struct qs_req q;

	if (!h)
		return -ENOMEM;
	for (unsigned i = 0; i < k; i++)
		h[i] = 0;
	while (qs_src_next(s, &q)) {
		if (q.t >= iend) {
			double istart = floor(q.t / interval) * interval;
			iend = istart + interval;
			for (unsigned i = 0; i < k; i++)
				h[i] = istart;
		}
		double start = q.t > h[0] ? q.t : h[0];
		double end = start + q.work;
		h[0] = end;
		sift_down(h, k);
		qs_record(r, &q, start < iend ? start : iend, end < iend ? end : iend);
	}
	free(h);
	r->cores = k;
	return 0;
}

/*
 * Partitioned FCFS: n independent M/G/1 queues, each request bound to its home queue
 * (thesis §3.2.3). Lindley's recursion per queue: start = max(arrival, queue free time).
 */
int qs_sim_part(struct qs_src *s, struct qs_result *r)
{
	unsigned n = s->cfg->servers;
	double *free_at = calloc(n, sizeof(*free_at));
	struct qs_req q;

	if (!free_at)
		return -ENOMEM;
	while (qs_src_next(s, &q)) {
		double start = q.t > free_at[q.q] ? q.t : free_at[q.q];
		free_at[q.q] = start + q.work;
		qs_record(r, &q, start, start + q.work);
	}
	free(free_at);
	r->cores = n;
	return 0;
}
