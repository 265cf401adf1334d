/* ctl.c: IX's control loop (ctl/policy.c, the code fp-ctl runs) over fp-vsim's workers in virtual time: its metrics, its decisions, flow-group moves with IX's hold and release, the clock. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../qsim/qsim.h"
#include "vsim.h"

/*
 * What the loop sees of worker w every interval_ms (IX, SoCC'15 §4.3; the runtime's
 * rt/stats.c computes the same for fp-ctl): its idle share (1 - busy time / interval), and
 * the queueing delay estimate Q x tau, Q the queue depth sampled at each pass of its loop
 * (frames in its NIC queue and flows ready in its shuffle queue), tau its busy time per
 * request run, each smoothed by EWMAs of alpha 1/2, 1/8 and 1/32. Partitioned workers only:
 * a request runs on its group's owner.
 *
 * A move of group g from A to B (IX's migration, §4.5): g's frames still in A's NIC queue
 * are taken out and held (IX's defaultQ-A to remoteQ-B), as are those that arrive
 * meanwhile; A finishes the batch of g it has already taken in (workers run a batch to
 * completion before the next poll), and when g has nothing outstanding the move is
 * released: the table and g's flows name B, and the held frames go to the head of B's
 * queue, in order. A pays move_ns when the move starts. Nothing of g runs on two workers,
 * and nothing is reordered (the order check counts any reply out of order).
 *
 * A worker added wakes wake_ns later (a deep C-state's exit); a worker removed polls until
 * every group has left it, then parks (off: the core's time is the batch job's, or deep
 * sleep). A clock change applies to every polling worker at once (DVFS per socket, as on
 * IX's Xeon).
 */

static void set_slow(struct vs_run *r)
{
	for (unsigned i = 0; i < r->cfg->n; i++)
		r->core[i].slow = r->cfg->nominal_ghz / r->ghz;
}

void vs_cfg_log(struct vs_run *r, uint64_t t)
{
	unsigned on = 0;

	for (unsigned i = 0; i < r->cfg->n; i++)
		on += r->core[i].on;
	r->n_on = on;
	if (r->n_cfgch && r->cfgch[r->n_cfgch - 1].n_on == on &&
	    r->cfgch[r->n_cfgch - 1].ghz == r->ghz)
		return;
	if (r->n_cfgch == r->cap_cfgch) {
		size_t cap = r->cap_cfgch ? 2 * r->cap_cfgch : 256;
		struct vs_cfgch *n = realloc(r->cfgch, cap * sizeof(*n));

		if (!n)
			abort();   /* out of memory in a simulator: nothing to save */
		r->cfgch = n;
		r->cap_cfgch = cap;
	}
	r->cfgch[r->n_cfgch] = (struct vs_cfgch){ .t = t, .n_on = (uint16_t)on,
						  .seq = (uint32_t)r->n_cfgch, .ghz = r->ghz };
	r->n_cfgch++;
}

int vs_ctl_setup(struct vs_run *r)
{
	const struct vs_config *cfg = r->cfg;
	const struct ctl_policy *p = &cfg->policy;

	r->flow_group = malloc(cfg->flows);
	r->group_flows = calloc(VS_GROUPS, sizeof(*r->group_flows));
	r->group_nflows = calloc(VS_GROUPS, sizeof(*r->group_nflows));
	if (!r->flow_group || !r->group_flows || !r->group_nflows)
		return -ENOMEM;
	for (uint32_t f = 0; f < cfg->flows; f++) {
		uint64_t x = f;

		r->flow_group[f] = (uint8_t)(qs_splitmix64(&x) % VS_GROUPS);   /* vs_home_of's */
		r->group_nflows[r->flow_group[f]]++;
	}
	for (unsigned g = 0; g < VS_GROUPS; g++) {
		r->group_flows[g] = malloc((r->group_nflows[g] + 1) * sizeof(uint32_t));
		if (!r->group_flows[g])
			return -ENOMEM;
		r->group_nflows[g] = 0;
		r->moving_to[g] = -1;
	}
	for (uint32_t f = 0; f < cfg->flows; f++)
		r->group_flows[r->flow_group[f]][r->group_nflows[r->flow_group[f]]++] = f;
	/* the bottom of the ladder, or min_workers at --ghz */
	r->n_on = p->n_rungs ? p->rung[0].workers : p->min_workers;
	r->ghz = p->n_rungs ? p->rung[0].ghz : cfg->ghz;
	r->n_target = r->n_on;
	for (unsigned i = 0; i < cfg->n; i++)
		r->core[i].on = i < r->n_on;
	set_slow(r);
	r->next_tick = (uint64_t)p->interval_ms * 1000000;
	return 0;
}

/* A parked (idle) worker looks again at @t. */
static void nudge(struct vs_core *c, uint64_t t)
{
	if (c->parked) {
		c->parked = false;
		c->clock = t + (uint64_t)llround(c->run->cfg->costs.poll_ns);
	}
}

/* Workers being emptied that own nothing any more park; the last one ends the drain. */
static void check_drained(struct vs_run *r, uint64_t t)
{
	bool left = false;

	if (r->draining < 0)
		return;
	for (unsigned w = r->n_target; w < r->cfg->n; w++) {
		bool owns = false;

		if (!r->core[w].on)
			continue;
		for (unsigned g = 0; g < VS_GROUPS && !owns; g++)
			owns = r->table[g] == w;
		if (owns)
			left = true;
		else
			r->core[w].on = false;
	}
	if (!left)
		r->draining = -1;
	vs_cfg_log(r, t);
}

/* The end of group @g's move: the table and its flows name the new owner, which takes the
 * held frames first. */
static void release(struct vs_run *r, unsigned g, uint64_t t)
{
	unsigned to = (unsigned)r->moving_to[g];
	uint64_t d = t > r->move_start[g] ? t - r->move_start[g] : 0;

	r->table[g] = (uint8_t)to;
	for (uint32_t i = 0; i < r->group_nflows[g]; i++)
		r->flow[r->group_flows[g][i]].sf.home = (uint16_t)to;
	vs_vq_prepend(r, to, r->held[g], r->n_held[g]);
	r->outstanding[g] += r->n_held[g];
	r->n_held[g] = 0;
	r->moving_to[g] = -1;
	r->moving--;
	r->move_ns_sum += d;
	if (d > r->move_ns_max)
		r->move_ns_max = d;
	nudge(&r->core[to], t);
	check_drained(r, t);
}

/* Hold @idx for group @g's move, behind what is held already. */
void vs_ctl_hold(struct vs_run *r, unsigned g, uint32_t idx)
{
	if (r->n_held[g] == r->cap_held[g]) {
		uint32_t cap = r->cap_held[g] ? 2 * r->cap_held[g] : 256;
		uint32_t *n = realloc(r->held[g], cap * sizeof(*n));

		if (!n)
			abort();   /* out of memory in a simulator: nothing to save */
		r->held[g] = n;
		r->cap_held[g] = cap;
	}
	r->held[g][r->n_held[g]++] = idx;
}

/* IX moves the group's frames still in the old owner's queue (defaultQ-A) to the new
 * owner's (remoteQ-B): take them out of @w's NIC queue, in order, keeping the others'. */
static void take_queued(struct vs_run *r, unsigned w, unsigned g)
{
	uint32_t mask = r->vq_cap[w] - 1, keep = r->vq_head[w];

	for (uint32_t i = r->vq_head[w]; i != r->vq_tail[w]; i++) {
		uint32_t idx = r->vq[w][i & mask];

		if (r->flow_group[r->req[idx].flow] == g) {
			vs_ctl_hold(r, g, idx);
			r->outstanding[g]--;
		} else {
			r->vq[w][keep++ & mask] = idx;
		}
	}
	r->vq_tail[w] = keep;
}

void vs_ctl_answered(struct vs_run *r, struct vs_core *c, unsigned g)
{
	if (r->moving_to[g] >= 0 && !r->outstanding[g])
		release(r, g, c->clock);
}

static void start_move(struct vs_run *r, unsigned g, unsigned to, uint64_t t)
{
	struct vs_core *from = &r->core[r->table[g]];

	if (r->table[g] == to || r->moving_to[g] >= 0)
		return;
	r->moving_to[g] = (int16_t)to;
	r->move_start[g] = t;
	r->moving++;
	r->moves++;
	take_queued(r, r->table[g], g);
	if (!from->parked) {          /* a busy owner pays for the hold when it next steps */
		uint64_t d = (uint64_t)llround(r->cfg->costs.move_ns * from->slow);

		from->clock += d;
		from->busy_ns += d;
	}
	if (!r->outstanding[g])
		release(r, g, t);
}

/* Go to @k workers at @ghz: wake the ones added, spread the groups over 0..k-1 (ctl_plan,
 * fp-ctl's plan), and let the ones removed drain. */
static void set_config(struct vs_run *r, uint64_t t, unsigned k, double ghz)
{
	uint16_t table[CTL_GROUPS];
	struct ctl_move m[CTL_GROUPS];
	unsigned nm;

	if (ghz != r->ghz) {
		r->ghz = ghz;
		set_slow(r);
	}
	for (unsigned w = 0; w < k; w++) {
		struct vs_core *c = &r->core[w];

		if (c->on)
			continue;
		c->on = true;
		r->wakes++;
		c->parked = false;
		c->clock = (c->clock > t ? c->clock : t) + (uint64_t)llround(r->cfg->costs.wake_ns);
		c->busy0 = c->busy_ns;
		c->served0 = c->served;
		c->q_sum = c->q_n = 0;
		c->ewma_set = false;
	}
	r->n_target = k;
	if (k < r->n_on)
		r->draining = (int)k;
	vs_cfg_log(r, t);
	for (unsigned g = 0; g < VS_GROUPS; g++)
		table[g] = r->table[g];
	nm = ctl_plan(table, VS_GROUPS, r->cfg->n, k >= 64 ? UINT64_MAX : (1ull << k) - 1, m,
		      CTL_GROUPS);
	for (unsigned i = 0; i < nm; i++)
		start_move(r, m[i].group, m[i].to, t);
	check_drained(r, t);
}

static double ewma(double old, double now, unsigned shift)
{
	return old + (now - old) / (double)(1u << shift);
}

void vs_ctl_tick(struct vs_run *r, uint64_t t)
{
	static const unsigned shifts[3] = { 1, 3, 5 };   /* alpha 1/2, 1/8, 1/32 */
	const struct vs_config *cfg = r->cfg;
	const struct ctl_policy *p = &cfg->policy;
	double interval = (double)p->interval_ms * 1e6;
	struct ctl_view v = { .n = cfg->n, .now_ms = t / 1000000,
			      .last_change_ms = r->last_change_ns / 1000000,
			      .moving = r->moving > 0, .draining = r->draining };
	struct ctl_decision d;

	r->ticks++;
	for (unsigned w = 0; w < cfg->n; w++) {
		struct vs_core *c = &r->core[w];
		double busy = (double)(c->busy_ns - c->busy0), served = (double)(c->served - c->served0);
		double tau = served > 0 ? busy / served : 0, q = c->q_n ? (double)c->q_sum / (double)c->q_n : 0;
		double idle = 1.0 - fmin(busy / interval, 1.0), delay_us = q * tau / 1000.0;

		for (unsigned g = 0; g < VS_GROUPS; g++)
			v.w[w].groups += r->table[g] == w;
		v.w[w].parked = !c->on;
		c->busy0 = c->busy_ns;
		c->served0 = c->served;
		c->q_sum = c->q_n = 0;
		if (!c->on)
			continue;
		for (unsigned i = 0; i < 3; i++) {
			c->delay_ewma[i] = c->ewma_set ? ewma(c->delay_ewma[i], delay_us, shifts[i]) : delay_us;
			c->idle_ewma[i] = c->ewma_set ? ewma(c->idle_ewma[i], idle, shifts[i]) : idle;
			v.w[w].delay_us[i] = c->delay_ewma[i];
			v.w[w].idle[i] = c->idle_ewma[i];
		}
		c->ewma_set = true;
		v.w[w].fresh = true;
	}
	if (p->n_rungs) {
		d = ctl_decide_ladder(p, &v, r->rung);
		if (d.act != CTL_HOLD) {
			r->rung = d.worker;
			set_config(r, t, p->rung[r->rung].workers, p->rung[r->rung].ghz);
		}
	} else {
		d = ctl_decide(p, &v);
		if (d.act == CTL_UP)
			set_config(r, t, r->n_on + 1, r->ghz);
		else if (d.act == CTL_DOWN)
			set_config(r, t, r->n_on - 1, r->ghz);
	}
	if (d.act == CTL_UP)
		r->ups++;
	if (d.act == CTL_DOWN)
		r->downs++;
	if (d.act != CTL_HOLD)
		r->last_change_ns = t;
}
