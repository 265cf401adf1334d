/* alloc.c: Shenango's core allocator: congestion detection (Algorithm 1) and core selection (Algorithm 2). */
#include <errno.h>
#include <string.h>

#include <flowplane/alloc.h>

int fp_alloc_init(struct fp_alloc *a, unsigned n_cores, uint64_t seed)
{
	if (!n_cores || n_cores > FP_ALLOC_MAX_CORES)
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->n_cores = n_cores;
	memset(a->owner, -1, sizeof(a->owner));
	memset(a->reserved, -1, sizeof(a->reserved));
	a->rng = seed | 1;
	return 0;
}

int fp_alloc_add_app(struct fp_alloc *a, unsigned n_queues, unsigned n_workers,
		     const uint16_t *cores)
{
	struct fp_alloc_app *p;

	if (a->n_apps == FP_ALLOC_MAX_APPS)
		return -ENOSPC;
	if (n_queues > FP_ALLOC_MAX_QUEUES || n_workers > FP_ALLOC_MAX_WORKERS)
		return -EINVAL;
	for (unsigned w = 0; w < n_workers; w++)
		if (cores[w] >= a->n_cores)
			return -EINVAL;
	p = &a->app[a->n_apps];
	memset(p, 0, sizeof(*p));
	p->n_queues = n_queues;
	p->n_workers = n_workers;
	memcpy(p->core, cores, n_workers * sizeof(*cores));
	p->last_core = -1;
	for (unsigned w = 0; w < n_workers; w++)
		p->w[w].parked = true;
	return (int)a->n_apps++;
}

void fp_alloc_adopt(struct fp_alloc *a, unsigned app, unsigned w, uint64_t grant_no,
		    bool running)
{
	struct fp_alloc_app *p = &a->app[app];
	unsigned c = p->core[w];

	p->grant_no[w] = grant_no;
	p->w[w] = (struct fp_alloc_wview){ .took = grant_no, .parked = !running };
	if (!running || a->owner[c] != -1 || p->state[w] != FP_ALLOC_W_PARKED)
		return;
	a->owner[c] = (int8_t)app;
	p->state[w] = FP_ALLOC_W_ACTIVE;
	p->active++;
}

bool fp_alloc_congested(const struct fp_alloc_app *p)
{
	/* An item taken after this pass's look sits at an index below the previous pass's
	 * tail when it was already queued then: head now < tail then (Algorithm 1, lines 7-8). */
	for (unsigned q = 0; q < p->n_queues; q++)
		if (p->q[q].taken < p->prev_put[q])
			return true;
	return false;
}

static uint64_t rnd(struct fp_alloc *a)
{
	uint64_t x = a->rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return a->rng = x;
}

/* Workers that parked since the last pass (their published grant is the last one issued,
 * and they say parked): their cores are idle again. */
static void note_parked(struct fp_alloc *a, unsigned i)
{
	struct fp_alloc_app *p = &a->app[i];

	for (unsigned w = 0; w < p->n_workers; w++) {
		unsigned c = p->core[w];

		if (p->state[w] == FP_ALLOC_W_PARKED || !p->w[w].parked ||
		    p->w[w].took != p->grant_no[w])
			continue;
		p->state[w] = FP_ALLOC_W_PARKED;
		p->parked_pass[w] = a->passes;
		p->active--;
		p->parks++;
		p->last_core = (int)c;
		if (a->owner[c] == (int8_t)i)
			a->owner[c] = -1;
	}
}

/* Algorithm 2 for app @i: the parked worker to grant on an idle core (the core lost most
 * recently, else the worker parked longest), or -1. */
static int pick_idle(const struct fp_alloc *a, unsigned i)
{
	const struct fp_alloc_app *p = &a->app[i];
	int best = -1;

	for (unsigned w = 0; w < p->n_workers; w++) {
		unsigned c = p->core[w];

		if (p->state[w] != FP_ALLOC_W_PARKED || a->owner[c] != -1 ||
		    (a->reserved[c] != -1 && a->reserved[c] != (int8_t)i))
			continue;
		if ((int)c == p->last_core)
			return (int)w;
		if (best < 0 || p->parked_pass[w] < p->parked_pass[best])
			best = (int)w;
	}
	return best;
}

/* No idle core for app @i: revoke a core where it has a parked worker from another app's
 * burstable worker, chosen at random among them. The revoked worker's index, its app in
 * @app_out, or -1. One revoke in flight per app. */
static int pick_revoke(struct fp_alloc *a, unsigned i, unsigned *app_out)
{
	const struct fp_alloc_app *p = &a->app[i];
	unsigned cand_app[FP_ALLOC_MAX_WORKERS], cand_w[FP_ALLOC_MAX_WORKERS], n = 0;

	for (unsigned c = 0; c < a->n_cores; c++)
		if (a->reserved[c] == (int8_t)i)
			return -1;
	for (unsigned w = 0; w < p->n_workers; w++) {
		unsigned c = p->core[w];
		int j = a->owner[c];

		if (p->state[w] != FP_ALLOC_W_PARKED || j < 0 || j == (int)i || a->reserved[c] != -1)
			continue;
		for (unsigned v = 0; v < a->app[j].n_workers; v++)
			if (a->app[j].core[v] == c && a->app[j].state[v] == FP_ALLOC_W_ACTIVE) {
				cand_app[n] = (unsigned)j;
				cand_w[n++] = v;
				break;
			}
	}
	if (!n)
		return -1;
	n = (unsigned)(rnd(a) % n);
	*app_out = cand_app[n];
	return (int)cand_w[n];
}

static void act(struct fp_alloc_act *out, unsigned *n, unsigned op, unsigned app,
		unsigned w, const struct fp_alloc_app *p)
{
	out[*n] = (struct fp_alloc_act){
		.op = (uint8_t)op, .app = (uint8_t)app, .worker = (uint16_t)w,
		.core = p->core[w], .grant_no = p->grant_no[w],
	};
	(*n)++;
}

/* App @i is congested: grant it one core, or revoke one for it. */
static void serve(struct fp_alloc *a, unsigned i, struct fp_alloc_act *out, unsigned *n)
{
	struct fp_alloc_app *p = &a->app[i];
	unsigned j;
	int w = pick_idle(a, i);

	if (w >= 0) {
		unsigned c = p->core[w];

		a->owner[c] = (int8_t)i;
		a->reserved[c] = -1;
		p->state[w] = FP_ALLOC_W_ACTIVE;
		p->grant_no[w]++;
		p->active++;
		p->grants++;
		act(out, n, FP_ALLOC_GRANT, i, (unsigned)w, p);
		return;
	}
	w = pick_revoke(a, i, &j);
	if (w < 0) {
		p->starved++;
		return;
	}
	a->app[j].state[w] = FP_ALLOC_W_REVOKED;
	a->app[j].revokes++;
	a->reserved[a->app[j].core[w]] = (int8_t)i;
	act(out, n, FP_ALLOC_REVOKE, j, (unsigned)w, &a->app[j]);
}

unsigned fp_alloc_pass(struct fp_alloc *a, struct fp_alloc_act *out, unsigned max)
{
	unsigned n = 0;

	a->passes++;
	for (unsigned i = 0; i < a->n_apps; i++)
		note_parked(a, i);
	/* Apps in turn from a rotating first, so none is always last to a free core. */
	for (unsigned k = 0; k < a->n_apps; k++) {
		unsigned i = (unsigned)((a->passes + k) % a->n_apps);
		struct fp_alloc_app *p = &a->app[i];
		bool cong = fp_alloc_congested(p);

		for (unsigned q = 0; q < p->n_queues; q++)
			p->prev_put[q] = p->q[q].put;
		if (!cong) {
			for (unsigned c = 0; c < a->n_cores; c++)
				if (a->reserved[c] == (int8_t)i)
					a->reserved[c] = -1;
			continue;
		}
		p->congested++;
		if (n < max)
			serve(a, i, out, &n);
		else
			p->starved++;
	}
	return n;
}
