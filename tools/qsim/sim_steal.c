/* sim_steal.c: partitioned FCFS where idle servers steal the oldest waiting request (ZygOS). */
#include <errno.h>
#include <stdlib.h>

#include "queue.h"

/*
 * Each server owns a FIFO fed by its share of the flows, serves its own queue first and,
 * only when that is empty, steals the oldest request waiting in any other queue, paying
 * @steal_cost (ZygOS, thesis §3.4: idle cores steal from remote shuffle queues). Idle
 * servers are always polling, so an arrival to a busy server's queue is stolen at once if
 * any server is idle. Hence the invariant: while a server is idle, every queue is empty.
 */
struct steal {
	unsigned n;
	struct qs_fifo *q;
	unsigned char *busy;
	unsigned *idle;     /* stack of idle servers... */
	unsigned *idle_pos; /* ...and each one's place in it */
	unsigned nidle;
	struct qs_heap done; /* completions, keyed by time */
	double cost;
	struct qs_result *r;
};

static void idle_remove(struct steal *st, unsigned s)
{
	unsigned pos = st->idle_pos[s], last = st->idle[--st->nidle];

	st->idle[pos] = last;
	st->idle_pos[last] = pos;
}

static void idle_push(struct steal *st, unsigned s)
{
	st->idle_pos[s] = st->nidle;
	st->idle[st->nidle++] = s;
}

/* Server @s starts @q at @t, first paying the steal overhead if @stolen. */
static int start(struct steal *st, unsigned s, const struct qs_req *q, double t, bool stolen)
{
	double extra = stolen ? st->cost : 0, end = t + extra + q->work;

	qs_record(st->r, q, t, end);
	if (q->rec && stolen) {
		st->r->busy += extra;
		st->r->steals++;
	}
	st->busy[s] = 1;
	return qs_heap_push(&st->done, end, s, q);
}

/* The queue other than @self whose head has waited longest, or -1 if all are empty. */
static int oldest_victim(const struct steal *st, unsigned self)
{
	int best = -1;
	double bt = QS_INF;

	for (unsigned i = 0; i < st->n; i++) {
		if (i == self || !st->q[i].n)
			continue;
		double t = qs_fifo_front(&st->q[i])->t;
		if (t < bt) {
			bt = t;
			best = (int)i;
		}
	}
	return best;
}

/* Server @s finished at @t: its own queue first, then steal, else go idle. */
static int on_complete(struct steal *st, unsigned s, double t)
{
	if (st->q[s].n) {
		struct qs_req q = qs_fifo_pop(&st->q[s]);
		return start(st, s, &q, t, false);
	}
	int v = oldest_victim(st, s);
	if (v >= 0) {
		struct qs_req q = qs_fifo_pop(&st->q[v]);
		return start(st, s, &q, t, true);
	}
	st->busy[s] = 0;
	idle_push(st, s);
	return 0;
}

static int on_arrival(struct steal *st, const struct qs_req *q)
{
	unsigned h = q->q;

	if (!st->busy[h]) {
		idle_remove(st, h);
		return start(st, h, q, q->t, false);
	}
	if (st->nidle) {
		unsigned s = st->idle[st->nidle - 1];
		idle_remove(st, s);
		return start(st, s, q, q->t, true);
	}
	return qs_fifo_push(&st->q[h], q);
}

/* Run completions due by @until (all of them for QS_INF). */
static int drain_until(struct steal *st, double until)
{
	int rc = 0;

	while (!rc && st->done.n && st->done.a[0].key <= until) {
		struct qs_ent e = st->done.a[0];
		qs_heap_pop(&st->done);
		rc = on_complete(st, e.id, e.key);
	}
	return rc;
}

int qs_sim_steal(struct qs_src *s, struct qs_result *r)
{
	struct steal st = { .n = s->cfg->servers, .cost = s->cfg->steal_cost, .r = r };
	struct qs_req q;
	int rc = -ENOMEM;

	st.q = calloc(st.n, sizeof(*st.q));
	st.busy = calloc(st.n, 1);
	st.idle = calloc(st.n, sizeof(*st.idle));
	st.idle_pos = calloc(st.n, sizeof(*st.idle_pos));
	if (!st.q || !st.busy || !st.idle || !st.idle_pos)
		goto out;
	for (unsigned i = st.n; i-- > 0;)
		idle_push(&st, i);
	rc = 0;
	while (!rc && qs_src_next(s, &q)) {
		rc = drain_until(&st, q.t);
		if (!rc)
			rc = on_arrival(&st, &q);
	}
	if (!rc)
		rc = drain_until(&st, QS_INF);
	r->cores = st.n;
out:
	for (unsigned i = 0; st.q && i < st.n; i++)
		qs_fifo_free(&st.q[i]);
	qs_heap_free(&st.done);
	free(st.q);
	free(st.busy);
	free(st.idle);
	free(st.idle_pos);
	return rc;
}
