/* virt.c: fp-vsim's virtual world: N cores in one thread, the earliest clock steps next. */
#include <errno.h>
#include <stdint.h>

#include "vsim.h"

/*
 * A discrete-event loop with three kinds of event, taken in time order, ties in this order
 * (and between cores, the lower index first), so a seed gives the same run every time:
 *
 *   1. an arrival: the request joins its home's NIC queue; parked cores look again;
 *   2. an interrupt due on a core (ZygOS's IPI): its handler runs inside the current run;
 *   3. the core with the smallest clock takes its next step (model.c), which moves its
 *      clock by the step's cost. A core with nothing to do parks (its clock stops) until
 *      something changes that it might act on.
 *
 * The loop ends when every request has been answered.
 */

static void arrive(struct vs_run *r, uint64_t t)
{
	const struct vs_req *q = &r->req[r->next_arr];
	unsigned w = vs_home_of(r, q->flow);

	r->vq[w][r->vq_tail[w]++] = (uint32_t)r->next_arr;
	r->next_arr++;
	for (unsigned i = 0; i < r->cfg->n; i++) {
		struct vs_core *c = &r->core[i];

		if (c->parked) {
			c->parked = false;
			c->clock = t + (uint64_t)(r->cfg->costs.poll_ns + 0.5);
		}
	}
}

int vs_virtual(struct vs_run *r)
{
	const struct vs_config *cfg = r->cfg;
	uint64_t total = cfg->requests;

	while (r->replied < total) {
		uint64_t tc = UINT64_MAX, ti = UINT64_MAX, ta = UINT64_MAX;
		struct vs_core *cc = NULL, *ci = NULL;

		for (unsigned i = 0; i < cfg->n; i++) {
			struct vs_core *c = &r->core[i];

			if (c->irq_at && c->irq_at < ti) {
				ti = c->irq_at;
				ci = c;
			}
			if (!c->parked && c->clock < tc) {
				tc = c->clock;
				cc = c;
			}
		}
		if (r->next_arr < total)
			ta = r->req[r->next_arr].t_arr;
		if (ta != UINT64_MAX && ta <= ti && ta <= tc)
			arrive(r, ta);
		else if (ci && ti <= tc)
			vs_irq(ci);
		else if (cc) {
			if (!vs_step(cc))
				cc->parked = true;
		} else
			return -EDEADLK;   /* every core parked, nothing left to arrive */
	}
	for (uint64_t i = 0; i < total; i++)
		if (r->req[i].t_done > r->end_ns)
			r->end_ns = r->req[i].t_done;
	return 0;
}
