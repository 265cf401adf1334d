/* run.c: simulate one configuration at one offered load, picking the engine it needs. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "qsim.h"

static void result_reset(struct qs_result *r)
{
	struct fp_hist *h = r->hist;

	memset(r, 0, sizeof(*r));
	r->hist = h;
	fp_hist_init(h);
}

/* Run the fixed-server engine of @c's discipline with a fresh request stream. */
static int run_static(const struct qs_cfg *c, double load, struct qs_result *r)
{
	struct qs_src s;
	int rc = -EINVAL;

	result_reset(r);
	qs_src_init(&s, c, load);
	switch (c->disc) {
	case QS_FCFS:
		rc = qs_sim_fcfs(&s, r, c->servers, 0);
		break;
	case QS_PART:
		rc = qs_sim_part(&s, r);
		break;
	case QS_PS:
		rc = qs_sim_ps(&s, r, false);
		break;
	case QS_PART_PS:
		rc = qs_sim_ps(&s, r, true);
		break;
	case QS_STEAL:
		rc = qs_sim_steal(&s, r);
		break;
	}
	r->elapsed = s.t_last - s.t_first_rec;
	r->alloc_area = r->cores * r->elapsed;
	return rc;
}

/*
 * Shenango §2, Figure 1: the best case of any allocator that adjusts cores every
 * interval is the fewest static cores k that keep the tail within the SLO when every
 * interval starts empty. Found "through trial and error", as the paper says: k counts up
 * from the smallest that can carry the load (k > offered load, else the work that the
 * interval reset forgives would be lost rather than done) until the SLO holds.
 */
static int run_oracle(const struct qs_cfg *c, double load, struct qs_result *r)
{
	double offered = load * c->servers;
	unsigned k = (unsigned)floor(offered) + 1;
	int rc = 0;

	if (k > c->servers)
		k = c->servers;
	for (; k <= c->servers; k++) {
		struct qs_src s;
		result_reset(r);
		qs_src_init(&s, c, load);
		rc = qs_sim_fcfs(&s, r, k, c->alloc.interval);
		r->elapsed = s.t_last - s.t_first_rec;
		r->alloc_area = k * r->elapsed;
		if (rc || (double)fp_hist_percentile(r->hist, c->slo_pct) / QS_TICKS <= c->slo)
			break;
	}
	return rc;
}

static int run_dynamic(const struct qs_cfg *c, double load, struct qs_result *r)
{
	struct qs_src s;

	result_reset(r);
	qs_src_init(&s, c, load);
	int rc = qs_sim_alloc(&s, r, load);
	r->elapsed = s.t_last - s.t_first_rec;
	return rc;
}

/*
 * Simulate @c at offered load @load (a fraction of the n servers' capacity, 0 < load) into
 * @r, whose histogram the caller provides. Returns 0 or -ENOMEM.
 */
int qs_run(const struct qs_cfg *c, double load, struct qs_result *r)
{
	switch (c->alloc.kind) {
	case QS_ALLOC_ORACLE:
		return run_oracle(c, load, r);
	case QS_ALLOC_SHENANGO:
	case QS_ALLOC_IX:
		return run_dynamic(c, load, r);
	case QS_ALLOC_NONE:
		break;
	}
	return run_static(c, load, r);
}
