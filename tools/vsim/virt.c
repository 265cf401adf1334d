/* virt.c: fp-vsim's virtual world: N cores in one thread, the earliest clock steps next. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "vsim.h"

/*
 * A discrete-event loop with three kinds of event, taken in time order, ties in this order
 * (and between cores, the lower index first), so a seed gives the same run every time:
 *
 *   1. an arrival: the request joins its home's NIC queue; parked cores look again;
 *   2. an interrupt due on a core (ZygOS's IPI): its handler runs inside the current run;
 *   3. with --alloc, the core allocator's pass (every alloc_us): it may grant burstable
 *      workers their cores (model.c, rt/alloc.c); with --ctl, the control loop's tick
 *      (every interval_ms): it may add or remove workers, move flow groups, change the
 *      clock (ctl.c, ctl/policy.c);
 *   4. the core with the smallest clock takes its next step (model.c), which moves its
 *      clock by the step's cost. A core with nothing to do parks (its clock stops) until
 *      something changes that it might act on; a burstable worker (--alloc) that has
 *      found nothing for spin_us gives its core back instead (vs_park), and stays off
 *      until a grant.
 *
 * The loop ends when every request has been answered.
 */

/* A core found nothing to do: it waits for a change; a burstable worker that has looked
 * for spin_us gives its core back, and one that has not yet looks again by then. */
static void idle(struct vs_run *r, struct vs_core *c)
{
	uint64_t spin = (uint64_t)llround(r->cfg->spin_us * 1000.0);

	c->parked = true;
	if (!c->burst)
		return;
	if (c->idle_since == UINT64_MAX)
		c->idle_since = c->clock;
	if (c->clock >= c->idle_since + spin)
		vs_park(c);
	else
		c->wake_at = c->idle_since + spin;
}

int vs_virtual(struct vs_run *r)
{
	const struct vs_config *cfg = r->cfg;
	uint64_t total = r->n_req, alloc_ns = (uint64_t)llround(cfg->alloc_us * 1000.0);

	while (r->replied < total) {
		uint64_t tc = UINT64_MAX, ti = UINT64_MAX, ta = UINT64_MAX, tp = UINT64_MAX;
		struct vs_core *cc = NULL, *ci = NULL;

		for (unsigned i = 0; i < cfg->n; i++) {
			struct vs_core *c = &r->core[i];
			uint64_t t = c->parked ? (c->wake_at ? c->wake_at : UINT64_MAX) : c->clock;

			if (c->irq_at && c->irq_at < ti) {
				ti = c->irq_at;
				ci = c;
			}
			if (!c->off && t < tc) {
				tc = t;
				cc = c;
			}
		}
		if (r->next_arr < total)
			ta = r->req[r->next_arr].t_arr;
		if (cfg->alloc)
			tp = r->next_pass;
		if (cfg->ctl)
			tp = r->next_tick;
		if (ta != UINT64_MAX && ta <= ti && ta <= tc && ta <= tp)
			vs_arrive(r, ta);
		else if (ci && ti <= tc && ti <= tp)
			vs_irq(ci);
		else if (!cc && !ci && ta == UINT64_MAX)
			return -EDEADLK;   /* every home idle with its queues empty: nothing left */
		else if (tp <= tc && cfg->ctl) {
			vs_ctl_tick(r, tp);
			r->next_tick += (uint64_t)cfg->policy.interval_ms * 1000000;
		} else if (tp <= tc) {
			vs_alloc_pass(r, tp);
			r->next_pass += alloc_ns;
		} else {
			if (cc->parked) {  /* a burstable worker's deadline to park */
				cc->parked = false;
				cc->clock = cc->wake_at;
			}
			cc->wake_at = 0;
			if (vs_step(cc))
				cc->idle_since = UINT64_MAX;
			else
				idle(r, cc);
		}
	}
	for (uint64_t i = 0; i < total; i++)
		if (r->req[i].t_done > r->end_ns)
			r->end_ns = r->req[i].t_done;
	return 0;
}
