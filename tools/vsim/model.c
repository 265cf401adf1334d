/* model.c: fp-vsim's worker loop, the same code in virtual time and on real threads. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/clock.h>

#include "../qsim/qsim.h"
#include "vsim.h"

#define F(x) offsetof(struct vs_costs, x)
const struct vs_cost_name vs_cost_names[] = {
	{"rx_ns", F(rx_ns), "per frame taken from the NIC queue and posted to its flow"},
	{"run_ns", F(run_ns), "per batch run, beyond its service times"},
	{"local_ns", F(local_ns), "per flow completed at home after running there"},
	{"ship_ns", F(ship_ns), "per flow a thief sends back home"},
	{"remote_ns", F(remote_ns), "per returned flow its home completes"},
	{"steal_ns", F(steal_ns), "per steal attempt (probes and take)"},
	{"poll_ns", F(poll_ns), "one pass of the loop's checks, paid by every step"},
	{"kick_ns", F(kick_ns), "sending an interrupt, the sender's cost"},
	{"ipi_ns", F(ipi_ns), "an interrupt's delivery"},
	{"ipi_handle_ns", F(ipi_handle_ns), "entering and leaving the interrupt handler"},
	{"wake_ns", F(wake_ns), "--alloc: a grant decided to its worker running"},
	{"park_ns", F(park_ns), "--alloc: a worker's cost of parking"},
	{"move_ns", F(move_ns), "--ctl: the old owner's cost of starting a group's move"},
	{"wire_ns", F(wire_ns), "--full: a frame's time from one NIC to the other"},
	{"tx_ns", F(tx_ns), "--full: per transmit burst handed to the device (its kick)"},
};
#undef F
const unsigned vs_n_cost_names = sizeof(vs_cost_names) / sizeof(vs_cost_names[0]);

/* The flow's group by a hash of its id (RSS's role), the group's worker by the table. */
unsigned vs_home_of(const struct vs_run *r, uint32_t flow)
{
	uint64_t x = flow;

	return r->table[qs_splitmix64(&x) % VS_GROUPS];
}

/* ---- the two worlds, behind a few helpers ---- */

static inline bool virt(const struct vs_core *c) { return !c->run->cfg->real; }

static inline uint64_t now_ns(const struct vs_core *c)
{
	return virt(c) ? c->clock : fp_tsc_ns();
}

/* A step's cost: at a lower clock (--ghz, --ctl's ladder) the same work takes longer. */
static inline void charge(struct vs_core *c, double ns)
{
	if (virt(c)) {
		uint64_t d = (uint64_t)llround(c->slow == 1.0 ? ns : ns * c->slow);

		c->clock += d;
		c->busy_ns += d;
	}
}

/* Real world: time spent on @kind since @t0 (ns), @n more of it done. */
static inline uint64_t tick(const struct vs_core *c)
{
	return virt(c) ? 0 : fp_tsc_ns();
}

static inline void spent(struct vs_core *c, enum vs_kind kind, uint64_t t0, uint64_t n)
{
	c->cnt[kind] += n;
	if (!virt(c))
		c->spent_ns[kind] += fp_tsc_ns() - t0;
}

#define BARRIER() __asm__ volatile("" ::: "memory")

/* Spin @ns of service on the TSC, interruptible: time an interrupt handler takes inside
 * it does not count as service, so the run ends that much later (as in the virtual
 * world). */
static void spin_ns(struct vs_core *c, uint64_t ns)
{
	uint64_t start = fp_rdtsc(), cyc = fp_ns_to_cycles(ns);

	c->irq_ns_in_run = 0;
	BARRIER();
	c->in_run = 1;
	BARRIER();
	while (fp_rdtsc() - start < cyc + fp_ns_to_cycles(c->irq_ns_in_run))
		__builtin_ia32_pause();
	BARRIER();
	c->in_run = 0;
	BARRIER();
}

/* Interrupt home @h (ZygOS's IPI), at most one outstanding. Virtual: its handler runs
 * ipi_ns from now. Real: a SIGUSR1 to its thread. */
static void kick(struct vs_core *c, struct vs_core *h)
{
	uint64_t t0;

	if (virt(c)) {
		h->irq_at = c->clock + (uint64_t)llround(c->run->cfg->costs.ipi_ns);
		charge(c, c->run->cfg->costs.kick_ns);
		c->kicks++;
		return;
	}
	if (__atomic_exchange_n(&h->irq_pending, 1, __ATOMIC_ACQ_REL))
		return;
	t0 = fp_tsc_ns();
	__atomic_store_n(&h->irq_sent_ns, t0, __ATOMIC_RELEASE);
	pthread_kill(h->thread, SIGUSR1);
	c->kicks++;
	spent(c, VS_K_KICK, t0, 1);
}

/* Whether home @h is running a batch that an interrupt may cut into. */
static bool busy_running(const struct vs_core *c, const struct vs_core *h)
{
	if (virt(c))
		return h->phase == VS_PH_RUN && h->clock > c->clock && !h->irq_at;
	return h->in_run && !__atomic_load_n(&h->irq_pending, __ATOMIC_ACQUIRE);
}

/* Something another core may act on changed at @c's time: parked virtual cores look again
 * one pass of their loop later. */
static void changed(struct vs_core *c)
{
	struct vs_run *r = c->run;

	if (!virt(c))
		return;
	for (unsigned i = 0; i < r->cfg->n; i++) {
		struct vs_core *o = &r->core[i];

		if (o->parked) {
			o->parked = false;
			o->clock = c->clock + (uint64_t)llround(r->cfg->costs.poll_ns);
		}
	}
}

/* Frames waiting in worker @w's NIC queue that are visible at @t (virtual world). */
static unsigned vq_visible(const struct vs_run *r, unsigned w, uint64_t t, unsigned max)
{
	uint32_t mask = r->vq_cap[w] - 1;
	unsigned n = 0;

	for (uint32_t i = r->vq_head[w]; i != r->vq_tail[w] && n < max; i++, n++)
		if (r->req[r->vq[w][i & mask]].t_arr > t)
			break;
	return n;
}

/* Room for @more in worker @w's NIC ring (it doubles, keeping the order). */
static int vq_reserve(struct vs_run *r, unsigned w, uint32_t more)
{
	uint32_t cap = r->vq_cap[w], used = r->vq_tail[w] - r->vq_head[w], ncap = cap;
	uint32_t *n;

	if (used + more <= cap)
		return 0;
	while (used + more > ncap)
		ncap *= 2;
	if (!(n = malloc((size_t)ncap * sizeof(*n))))
		return -ENOMEM;
	/* the counters keep counting (the allocator reads them as put and taken) */
	for (uint32_t i = 0; i < used; i++)
		n[(r->vq_head[w] + i) & (ncap - 1)] = r->vq[w][(r->vq_head[w] + i) & (cap - 1)];
	free(r->vq[w]);
	r->vq[w] = n;
	r->vq_cap[w] = ncap;
	return 0;
}

/* The next request arrives at @t: it joins its group's owner's NIC queue, or, while the
 * group is on its way to another worker (--ctl), waits for the move to end (IX's hold). */
void vs_arrive(struct vs_run *r, uint64_t t)
{
	uint32_t idx = (uint32_t)r->next_arr;
	const struct vs_req *q = &r->req[idx];
	unsigned w = vs_home_of(r, q->flow);

	r->next_arr++;
	if (r->cfg->ctl) {
		unsigned g = r->flow_group[q->flow];

		if (r->moving_to[g] >= 0) {
			vs_ctl_hold(r, g, idx);
			return;
		}
		r->outstanding[g]++;
	}
	if (vq_reserve(r, w, 1))
		abort();
	r->vq[w][r->vq_tail[w]++ & (r->vq_cap[w] - 1)] = idx;
	for (unsigned i = 0; i < r->cfg->n; i++) {
		struct vs_core *c = &r->core[i];

		if (c->parked) {
			c->parked = false;
			c->clock = t + (uint64_t)(r->cfg->costs.poll_ns + 0.5);
		}
	}
}

/* --ctl: a moved group's held frames go to the head of its new owner's queue, ahead of
 * what that worker has queued (IX prepends them), in their order. */
void vs_vq_prepend(struct vs_run *r, unsigned w, const uint32_t *idx, uint32_t n)
{
	if (!n)
		return;
	if (vq_reserve(r, w, n))
		abort();
	r->vq_head[w] -= n;
	for (uint32_t i = 0; i < n; i++)
		r->vq[w][(r->vq_head[w] + i) & (r->vq_cap[w] - 1)] = idx[i];
}

/* Frames waiting in @c's NIC queue that it can see now, at most @max. */
static unsigned nic_visible(struct vs_core *c, unsigned max)
{
	uint32_t n;

	if (virt(c))
		return vq_visible(c->run, c->id, c->clock, max);
	n = fp_ring_count(c->nic);
	return n < max ? n : max;
}

static unsigned nic_take(struct vs_core *c, struct vs_req **out, unsigned n)
{
	struct vs_run *r = c->run;

	if (!virt(c))
		return fp_ring_dequeue_burst(c->nic, (void **)out, n);
	for (unsigned i = 0; i < n; i++)
		out[i] = &r->req[r->vq[c->id][r->vq_head[c->id]++ & (r->vq_cap[c->id] - 1)]];
	return n;
}

/* --alloc: a burstable core taken (+1) or given back (-1) at @t, for the time series. */
static void vs_tr_log(struct vs_run *r, uint64_t t, int d)
{
	if (r->n_tr == r->cap_tr) {
		size_t cap = r->cap_tr ? 2 * r->cap_tr : 1024;
		struct vs_tr *n = realloc(r->tr, cap * sizeof(*n));

		if (!n)
			return;               /* the series loses a point; the totals do not */
		r->tr = n;
		r->cap_tr = cap;
	}
	r->tr[r->n_tr++] = (struct vs_tr){ .t = t, .d = d };
}

/* ---- the steps ---- */

/* The home executes the replies of @f's batch (a reply per request) and completes it. */
static void complete(struct vs_core *c, struct vs_flow *f)
{
	struct vs_run *r = c->run;
	uint64_t t = now_ns(c);
	uint32_t n = f->sf.batch.n;

	for (struct fp_shuf_ev *e = f->sf.batch.head; e; e = e->next) {
		struct vs_req *q = fp_container_of(e, struct vs_req, ev);
		uint64_t idx = (uint64_t)(q - r->req);

		q->t_done = t;
		if (q->seq != f->next_seq)
			c->order_errors++;
		f->next_seq = q->seq + 1;
		c->replies++;
		if (idx >= r->warm)
			fp_hist_record(&c->lat, t > q->t_arr ? t - q->t_arr : 0);
	}
	if (virt(c))
		r->replied += f->sf.batch.n;
	else
		__atomic_store_n(&c->done_total, c->replies, __ATOMIC_RELEASE);
	if (fp_shuf_complete(&r->sh, &f->sf, t))
		changed(c);
	if (r->cfg->ctl) {
		unsigned g = r->flow_group[f - r->flow];

		r->outstanding[g] -= n;
		vs_ctl_answered(r, c, g);
	}
}

/* Run @f's batch: the run's own cost, then every request's service time. Its end (the
 * replies, or the trip home) is the core's next step. */
static void run_flow(struct vs_core *c, struct vs_flow *f, uint64_t t0)
{
	uint64_t svc = 0;

	for (struct fp_shuf_ev *e = f->sf.batch.head; e; e = e->next)
		svc += fp_container_of(e, struct vs_req, ev)->svc_ns;
	c->batches++;
	c->served += f->sf.batch.n;
	charge(c, c->run->cfg->costs.run_ns);
	spent(c, VS_K_RUN, t0, 1);
	if (virt(c)) {
		if (c->slow != 1.0)
			svc = (uint64_t)llround((double)svc * c->slow);
		c->clock += svc;
		c->busy_ns += svc;
	} else
		spin_ns(c, svc);
	c->running = f;
	c->phase = VS_PH_RUN;
}

/* The end of a run: at home, the replies go out now; a thief sends the flow home. */
static void finish(struct vs_core *c)
{
	struct vs_run *r = c->run;
	struct vs_flow *f = c->running;
	uint64_t t0 = tick(c);

	c->running = NULL;
	if (fp_shuf_ran(&r->sh, c->id, &f->sf)) {
		charge(c, r->cfg->costs.local_ns);
		complete(c, f);
		spent(c, VS_K_LOCAL, t0, 1);
		return;
	}
	charge(c, r->cfg->costs.ship_ns);
	changed(c);
	spent(c, VS_K_SHIP, t0, 1);
	if (r->cfg->notify == VS_NOTIFY_IPI) {
		struct vs_core *h = &r->core[f->sf.home];

		if (busy_running(c, h))
			kick(c, h);
	}
}

/* Take @n frames from the NIC queue and post each to its flow. */
static void rx(struct vs_core *c, unsigned n)
{
	struct vs_run *r = c->run;
	struct vs_req *q[64];
	uint64_t t0 = tick(c), got = 0;
	bool pub = false;

	while (n) {
		unsigned k = nic_take(c, q, n < 64 ? n : 64);

		if (!k)
			break;
		for (unsigned i = 0; i < k; i++)
			pub |= fp_shuf_post(&r->sh, &r->flow[q[i]->flow].sf, &q[i]->ev, now_ns(c));
		got += k;
		n -= k;
	}
	c->frames += got;
	if (pub)
		changed(c);
	spent(c, VS_K_RX, t0, got);
}

/* Complete one flow that came home, if there is one. */
static void drain_one(struct vs_core *c)
{
	struct fp_shuf_flow *sf;
	uint64_t t0 = tick(c);

	sf = fp_shuf_returned(&c->run->sh, c->id);
	if (!sf)
		return;
	complete(c, fp_container_of(sf, struct vs_flow, sf));
	spent(c, VS_K_RET, t0, 1);
}

/* An idle thief, ZygOS's idle loop (d): a home busy running a request while frames wait
 * in its NIC queue and its shuffle queue is empty gets an interrupt, so that it runs its
 * stack and the frames become stealable. */
static void kick_busy_homes(struct vs_core *c)
{
	struct vs_run *r = c->run;

	if (r->cfg->notify != VS_NOTIFY_IPI)
		return;
	for (unsigned i = 0; i < r->cfg->n; i++) {
		struct vs_core *h = &r->core[i];
		bool waiting;

		if (h == c || !busy_running(c, h))
			continue;
		waiting = virt(c) ? vq_visible(r, i, c->clock, 1) != 0 : fp_ring_count(h->nic) != 0;
		if (waiting && !fp_shuf_ready_count(&r->sh, i))
			kick(c, h);
	}
}

/* One pass of the loop's checks, in ZygOS's order of priority: flows that came home (their
 * replies are late already), the NIC queue, the own shuffle queue, then the others'. It
 * pays for the step it picks; the step's effect happens at the next call, when the core's
 * clock has reached its end. False: nothing to do. */
static bool decide(struct vs_core *c)
{
	struct vs_run *r = c->run;
	const struct vs_costs *k = &r->cfg->costs;
	struct fp_shuf_flow *sf;
	uint64_t t0 = tick(c);
	unsigned n;

	charge(c, k->poll_ns);
	if (r->cfg->ctl) {            /* IX's queue depth, sampled at every pass */
		c->q_sum += (r->vq_tail[c->id] - r->vq_head[c->id]) +
			    fp_shuf_ready_count(&r->sh, c->id);
		c->q_n++;
	}
	if (fp_shuf_has_returns(&r->sh, c->id)) {
		charge(c, k->remote_ns);
		c->phase = VS_PH_RET;
		return true;
	}
	/* --ctl: IX's run to completion, a batch taken from the NIC is run before the next, so
	 * a backlog waits in the NIC queue, where a group's move can take it along */
	n = r->cfg->ctl && fp_shuf_ready_count(&r->sh, c->id) ? 0 : nic_visible(c, r->cfg->batch);
	if (n) {
		charge(c, k->rx_ns * n);
		c->pending_n = n;
		c->phase = VS_PH_RX;
		return true;
	}
	sf = fp_shuf_take(&r->sh, c->id);
	if (sf) {
		run_flow(c, fp_container_of(sf, struct vs_flow, sf), t0);
		return true;
	}
	if (r->cfg->sched == VS_SCHED_STEAL && fp_shuf_any_ready(&r->sh, c->id)) {
		charge(c, k->steal_ns);
		c->phase = VS_PH_STEAL;
		return true;
	}
	if (r->cfg->sched == VS_SCHED_STEAL)
		kick_busy_homes(c);
	spent(c, VS_K_POLL, t0, 1);
	return false;
}

bool vs_step(struct vs_core *c)
{
	enum vs_phase ph = c->phase;
	struct fp_shuf_flow *sf;
	uint64_t t0;

	c->phase = VS_PH_NONE;
	switch (ph) {
	case VS_PH_RX:
		rx(c, c->pending_n);
		return true;
	case VS_PH_RET:
		drain_one(c);
		return true;
	case VS_PH_RUN:
		finish(c);
		return true;
	case VS_PH_STEAL:
		t0 = tick(c);
		sf = fp_shuf_steal(&c->run->sh, c->id);
		spent(c, VS_K_STEAL, t0, 1);
		if (sf) {
			run_flow(c, fp_container_of(sf, struct vs_flow, sf), tick(c));
			return true;
		}
		/* another thief was first: look again */
		return decide(c);
	case VS_PH_NONE:
		break;
	}
	return decide(c);
}

/* ZygOS's IPI handler (§3.4.5): on a core interrupted while running a request, (1) run the
 * stack if its shuffle queue is empty, so waiting frames become stealable, and (2) execute
 * the replies of flows that came home. The run it interrupted ends that much later. */
void vs_irq(struct vs_core *c)
{
	struct vs_run *r = c->run;
	const struct vs_costs *k = &r->cfg->costs;
	uint64_t end = c->clock, t0 = c->irq_at;
	unsigned n;

	c->irq_at = 0;
	if (c->phase != VS_PH_RUN || end <= t0)
		return;                       /* no longer running: its loop will see to it */
	c->irqs++;
	c->clock = t0;                        /* the handler runs at the interrupt's time */
	charge(c, k->ipi_handle_ns);
	if (!fp_shuf_ready_count(&r->sh, c->id)) {
		n = nic_visible(c, r->cfg->batch);
		charge(c, k->rx_ns * n);
		rx(c, n);
	}
	while (fp_shuf_has_returns(&r->sh, c->id)) {
		charge(c, k->remote_ns);
		drain_one(c);
	}
	c->clock = end + (c->clock - t0);     /* the interrupted run resumes */
}

/* The same handler on a real worker, from its SIGUSR1 handler. It runs only while the
 * worker spins a batch (in_run), when the interrupted code touches none of the state the
 * handler does: the NIC queue, the home side of its flows, its return queue and counters.
 * Its time is added to the run (spin_ns) and measured for the cost model. */
void vs_irq_real(struct vs_core *c)
{
	uint64_t t0 = fp_tsc_ns(), sent = __atomic_load_n(&c->irq_sent_ns, __ATOMIC_ACQUIRE);
	uint64_t before = c->spent_ns[VS_K_RX] + c->spent_ns[VS_K_RET];
	struct vs_run *r = c->run;

	__atomic_store_n(&c->irq_pending, 0, __ATOMIC_RELEASE);
	c->cnt[VS_K_IPI]++;
	c->spent_ns[VS_K_IPI] += t0 > sent ? t0 - sent : 0;
	if (!c->in_run)
		return;                       /* the run ended before the signal came */
	c->irqs++;
	if (!fp_shuf_ready_count(&r->sh, c->id))
		rx(c, nic_visible(c, r->cfg->batch));
	while (fp_shuf_has_returns(&r->sh, c->id))
		drain_one(c);
	uint64_t t1 = fp_tsc_ns();
	c->cnt[VS_K_IPI_HANDLE]++;
	c->spent_ns[VS_K_IPI_HANDLE] += (t1 - t0) - (c->spent_ns[VS_K_RX] + c->spent_ns[VS_K_RET] - before);
	c->irq_ns_in_run += t1 - t0;
}

/* ---- setup and results ---- */

/* --pattern: the rate is held for a slot this long (ns), IX's pattern sampled at its start */
#define VS_PATTERN_SLOT_NS 1e6

/* The offered load at time @t (ns): constant, --shift's three phases, or --pattern's rate
 * as a load of the n workers at the nominal clock. */
static double load_at(const struct vs_config *cfg, double t)
{
	double ms = cfg->shift_ms * 1e6;

	if (cfg->has_pattern)
		return lg_pattern_rate(&cfg->pattern, floor(t / VS_PATTERN_SLOT_NS) *
				       VS_PATTERN_SLOT_NS / 1e9) * cfg->mean_us / 1e6 / cfg->n;
	if (cfg->shift_ms <= 0)
		return cfg->load;
	return t >= ms && t < 2 * ms ? cfg->shift_hi : cfg->shift_lo;
}

/* The length of a timed run (--shift, --pattern) in ns, or +inf. */
static double timed_end(const struct vs_config *cfg)
{
	if (cfg->has_pattern)
		return cfg->pattern.duration_s * 1e9;
	return cfg->shift_ms > 0 ? 3 * cfg->shift_ms * 1e6 : INFINITY;
}

/* The end of the phase holding @t, or +inf. */
static double phase_end(const struct vs_config *cfg, double t)
{
	double ms = cfg->shift_ms * 1e6;

	if (cfg->has_pattern)
		return fmin((floor(t / VS_PATTERN_SLOT_NS) + 1) * VS_PATTERN_SLOT_NS,
			    timed_end(cfg));
	if (cfg->shift_ms <= 0)
		return INFINITY;
	return t < ms ? ms : t < 2 * ms ? 2 * ms : 3 * ms;
}

/* The request stream: Poisson arrivals at load x n / S (piecewise with --shift: a draw that
 * crosses a phase's end starts again there at the new rate, which memorylessness allows),
 * service times from the distribution, a uniformly chosen flow; separate streams as qsim
 * draws them. */
static int make_requests(struct vs_run *r, const struct qs_dist *d)
{
	const struct vs_config *cfg = r->cfg;
	struct qs_rng ra, rs, rf;
	double t = 0;
	bool timed = isfinite(timed_end(cfg));
	uint64_t cap = timed ? 1024 : cfg->requests, n = 0;

	qs_rng_seed(&ra, cfg->seed, 1);
	qs_rng_seed(&rs, cfg->seed, 2);
	qs_rng_seed(&rf, cfg->seed, 3);
	r->req = calloc(cap, sizeof(*r->req));
	if (!r->req)
		return -ENOMEM;
	for (;;) {
		/* the rate as before --shift existed, to the bit: same seed, same stream */
		double rate_per_ns = load_at(cfg, t) * cfg->n / (cfg->mean_us * 1000.0);
		double dt = qs_rng_exp(&ra) / rate_per_ns, end = phase_end(cfg, t);
		struct vs_req *q;
		double sv;

		if (!(rate_per_ns > 0) || t + dt >= end) {
			if (end >= timed_end(cfg))
				break;
			t = end;
			continue;
		}
		t += dt;
		if (n == cap) {
			struct vs_req *nr;

			if (!timed)
				break;
			if (n >= UINT32_MAX / 2)
				return -E2BIG;   /* queues hold 32-bit indices */
			if (!(nr = realloc(r->req, 2 * cap * sizeof(*r->req))))
				return -ENOMEM;
			r->req = nr;
			cap *= 2;
		}
		q = &r->req[n++];
		sv = qs_dist_sample(d, &rs) * cfg->mean_us * 1000.0;
		memset(q, 0, sizeof(*q));
		q->t_arr = (uint64_t)llround(t);
		q->svc_ns = (uint32_t)(sv < 4e9 ? llround(sv) : 4000000000ll);
		q->flow = qs_rng_below(&rf, cfg->flows);
		q->seq = r->flow[q->flow].next_seq++;
	}
	r->n_req = n;
	for (uint32_t i = 0; i < cfg->flows; i++)
		r->flow[i].next_seq = 0;
	return n ? 0 : -EINVAL;
}

/* --alloc: the burstable workers start parked, their cores the batch job's; the allocator
 * watches each home's shuffle queue and NIC queue. */
static int alloc_setup(struct vs_run *r)
{
	const struct vs_config *cfg = r->cfg;
	unsigned nb = cfg->n - cfg->homes;
	uint16_t cores[VS_MAX_CORES];

	r->alloc = malloc(sizeof(*r->alloc));
	if (!r->alloc)
		return -ENOMEM;
	for (unsigned i = 0; i < nb; i++)
		cores[i] = (uint16_t)i;
	if (fp_alloc_init(r->alloc, nb, cfg->seed) ||
	    fp_alloc_add_app(r->alloc, 2 * cfg->homes, nb, cores) != 0)
		return -EINVAL;
	for (unsigned i = cfg->homes; i < cfg->n; i++)
		r->core[i].burst = r->core[i].off = true;
	r->next_pass = (uint64_t)llround(cfg->alloc_us * 1000.0);
	return 0;
}

int vs_run_setup(struct vs_run *r, const struct vs_config *cfg)
{
	unsigned owners = cfg->alloc ? cfg->homes : cfg->n;
	struct qs_dist d;
	int rc;

	memset(r, 0, sizeof(*r));
	r->cfg = cfg;
	if (qs_dist_parse(&d, cfg->dist))
		return -EINVAL;
	rc = fp_shuf_init(&r->sh, cfg->n, cfg->flows + 1, cfg->seed);
	if (rc) {
		qs_dist_free(&d);
		return rc;
	}
	r->sh.victim = cfg->victim;
	r->core = aligned_alloc(FP_CACHE_LINE, (cfg->n * sizeof(*r->core) + FP_CACHE_LINE - 1) /
				FP_CACHE_LINE * FP_CACHE_LINE);
	r->flow = calloc(cfg->flows, sizeof(*r->flow));
	if (!r->core || !r->flow) {
		rc = -ENOMEM;
		goto fail;
	}
	memset(r->core, 0, cfg->n * sizeof(*r->core));
	r->ghz = cfg->ghz;
	r->n_on = owners;
	r->draining = -1;
	for (unsigned i = 0; i < cfg->n; i++) {
		r->core[i].run = r;
		r->core[i].id = i;
		r->core[i].idle_since = UINT64_MAX;
		r->core[i].slow = cfg->nominal_ghz / cfg->ghz;
		r->core[i].on = i < owners;
		fp_hist_init(&r->core[i].lat);
	}
	if (cfg->ctl && (rc = vs_ctl_setup(r)))
		goto fail;
	for (unsigned g = 0; g < VS_GROUPS; g++)
		r->table[g] = (uint8_t)(g % r->n_on);
	for (uint32_t i = 0; i < cfg->flows; i++)
		fp_shuf_flow_init(&r->flow[i].sf, vs_home_of(r, i));
	if ((rc = make_requests(r, &d)))
		goto fail;
	r->warm = (uint64_t)(cfg->warmup * (double)r->n_req);
	if (cfg->alloc && (rc = alloc_setup(r)))
		goto fail;
	if (!cfg->alloc)
		vs_cfg_log(r, 0);

	if (!cfg->real) {
		r->vq = calloc(cfg->n, sizeof(*r->vq));
		r->vq_head = calloc(cfg->n, sizeof(*r->vq_head));
		r->vq_tail = calloc(cfg->n, sizeof(*r->vq_tail));
		r->vq_cap = calloc(cfg->n, sizeof(*r->vq_cap));
		rc = -ENOMEM;
		if (!r->vq || !r->vq_head || !r->vq_tail || !r->vq_cap)
			goto fail;
		for (unsigned i = 0; i < cfg->n; i++) {
			r->vq_cap[i] = 1024;
			if (!(r->vq[i] = malloc(r->vq_cap[i] * sizeof(uint32_t))))
				goto fail;
		}
	}
	qs_dist_free(&d);
	return 0;
fail:
	qs_dist_free(&d);
	vs_run_free(r);
	return rc;
}

/* --alloc: a burstable worker found nothing for spin_us: it parks, paying park_ns, and its
 * core is the batch job's until a grant. */
void vs_park(struct vs_core *c)
{
	struct vs_run *r = c->run;

	charge(c, r->cfg->costs.park_ns);
	c->off = true;
	c->parked = false;
	c->wake_at = 0;
	c->idle_since = UINT64_MAX;
	c->off_since = c->clock;
	c->parks++;
	r->alloc->app[0].w[c->id - r->cfg->homes].parked = true;
	vs_tr_log(r, c->clock, -1);
}

/* --alloc: one pass at @t: the homes' queues as counters (the shuffle ring's tail and head,
 * the NIC queue's), the allocator's decision, its grants (a granted worker runs wake_ns
 * later; its core is the app's from the decision on). */
void vs_alloc_pass(struct vs_run *r, uint64_t t)
{
	struct fp_alloc_app *p = &r->alloc->app[0];
	struct fp_alloc_act act[4];
	unsigned n;

	for (unsigned h = 0; h < r->cfg->homes; h++) {
		const struct fp_shuf_ring *q = &r->sh.wk[h].ready;

		p->q[2 * h] = (struct fp_alloc_q){ .put = q->tail, .taken = q->head };
		p->q[2 * h + 1] = (struct fp_alloc_q){ .put = r->vq_tail[h], .taken = r->vq_head[h] };
	}
	n = fp_alloc_pass(r->alloc, act, 4);
	for (unsigned i = 0; i < n; i++) {
		struct vs_core *c = &r->core[r->cfg->homes + act[i].worker];

		if (act[i].op != FP_ALLOC_GRANT)
			continue;                 /* one app: nothing to revoke from */
		c->off = false;
		c->off_ns += t - c->off_since;
		c->grants++;
		c->clock = t + (uint64_t)llround(r->cfg->costs.wake_ns);
		p->w[act[i].worker] = (struct fp_alloc_wview){ .took = act[i].grant_no };
		vs_tr_log(r, t, +1);
	}
}

void vs_run_free(struct vs_run *r)
{
	if (r->vq)
		for (unsigned i = 0; i < r->cfg->n; i++)
			free(r->vq[i]);
	free(r->vq);
	free(r->vq_head);
	free(r->vq_tail);
	free(r->vq_cap);
	free(r->flow_group);
	if (r->group_flows)
		for (unsigned g = 0; g < VS_GROUPS; g++)
			free(r->group_flows[g]);
	free(r->group_flows);
	free(r->group_nflows);
	for (unsigned g = 0; g < VS_GROUPS; g++)
		free(r->held[g]);
	free(r->cfgch);
	free(r->core);
	free(r->req);
	free(r->flow);
	free(r->alloc);
	free(r->tr);
	fp_shuf_fini(&r->sh);
	memset(r, 0, sizeof(*r));
}

/* --alloc: the cores' account. A burstable core is the batch job's from its park to its
 * next grant (and after its last park, to the end of the run); the homes always poll. */
static void collect_alloc(struct vs_run *r, struct vs_result *o)
{
	const struct vs_config *cfg = r->cfg;
	double off = 0;

	for (unsigned i = cfg->homes; i < cfg->n; i++) {
		struct vs_core *c = &r->core[i];

		if (c->off && r->end_ns > c->off_since)
			c->off_ns += r->end_ns - c->off_since;
		c->off_since = r->end_ns;
		off += (double)c->off_ns;
		o->grants += c->grants;
		o->parks += c->parks;
	}
	if (r->end_ns) {
		o->batch_share = off / ((double)cfg->n * (double)r->end_ns);
		o->mean_cores = cfg->n - off / (double)r->end_ns;
	}
	o->congested = r->alloc->app[0].congested;
	o->starved = r->alloc->app[0].starved;
	o->passes = r->alloc->passes;
}

/* The workers polling and the clock over [@t0, @t1): core-ns polling, and ns x GHz. */
static void cfg_span(const struct vs_run *r, uint64_t t0, uint64_t t1, double *core_ns,
		     double *ghz_ns)
{
	*core_ns = *ghz_ns = 0;
	for (size_t i = 0; i < r->n_cfgch; i++) {
		uint64_t a = r->cfgch[i].t, b = i + 1 < r->n_cfgch ? r->cfgch[i + 1].t : UINT64_MAX;

		a = a > t0 ? a : t0;
		b = b < t1 ? b : t1;
		if (b <= a)
			continue;
		*core_ns += (double)r->cfgch[i].n_on * (double)(b - a);
		*ghz_ns += r->cfgch[i].ghz * (double)(b - a);
	}
}

/* Core-seconds polling at each clock, off, and the loop's counts. */
static void collect_cfg(struct vs_run *r, struct vs_result *o)
{
	for (size_t i = 0; i < r->n_cfgch; i++) {
		uint64_t a = r->cfgch[i].t, b = i + 1 < r->n_cfgch ? r->cfgch[i + 1].t : r->end_ns;
		unsigned k = 0;

		if (b > r->end_ns)
			b = r->end_ns;
		if (b <= a)
			continue;
		while (k < o->n_clocks && o->clock_ghz[k] != r->cfgch[i].ghz)
			k++;
		if (k == o->n_clocks) {
			if (k == CTL_MAX_RUNGS + 1)
				continue;     /* more clocks than a ladder has rungs: cannot be */
			o->clock_ghz[o->n_clocks++] = r->cfgch[i].ghz;
		}
		o->on_core_s[k] += (double)r->cfgch[i].n_on * (double)(b - a) / 1e9;
	}
	o->off_core_s = (double)r->cfg->n * (double)r->end_ns / 1e9;
	for (unsigned k = 0; k < o->n_clocks; k++)
		o->off_core_s -= o->on_core_s[k];
	o->ticks = r->ticks;
	o->ups = r->ups;
	o->downs = r->downs;
	o->moves = r->moves;
	o->wakes = r->wakes;
	o->move_us_mean = r->moves ? (double)r->move_ns_sum / (double)r->moves / 1000.0 : 0;
	o->move_us_max = (double)r->move_ns_max / 1000.0;
}

static int cfgch_cmp(const void *a, const void *b)
{
	const struct vs_cfgch *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int tr_cmp(const void *a, const void *b)
{
	const struct vs_tr *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* --windows: per window of arrival time, the requests' latency summary; the replies sent in
 * it, and the mean number of workers holding a core. */
static void collect_windows(struct vs_run *r, struct vs_result *o)
{
	const struct vs_config *cfg = r->cfg;
	uint64_t w_ns = (uint64_t)llround(cfg->window_us * 1000.0), last = r->req[r->n_req - 1].t_arr;
	unsigned nw = (unsigned)(last / w_ns + 1), k = 0;
	long cur = cfg->alloc ? (long)cfg->homes : (long)cfg->n;
	struct fp_hist *h = malloc(sizeof(*h));
	uint64_t *done;
	size_t j = 0;

	if (nw > 100000)
		nw = 100000;
	o->win = calloc(nw, sizeof(*o->win));
	done = calloc(nw, sizeof(*done));
	if (!o->win || !h || !done)
		goto out;
	/* latency by arrival window: arrivals are in time order */
	fp_hist_init(h);
	for (uint64_t i = 0; i <= r->n_req; i++) {
		const struct vs_req *q = i < r->n_req ? &r->req[i] : NULL;

		while (k < nw && (!q || q->t_arr >= (k + 1) * w_ns)) {
			fp_hist_summarize(h, &o->win[k].s);
			fp_hist_init(h);
			k++;
		}
		if (q && k < nw)
			fp_hist_record(h, q->t_done - q->t_arr);
	}
	for (uint64_t i = 0; i < r->n_req; i++)
		if (r->req[i].t_done / w_ns < nw)
			done[r->req[i].t_done / w_ns]++;
	/* cores held: the homes (or every worker without --alloc), plus the burstable ones
	 * between their grants and parks */
	if (r->n_tr)
		qsort(r->tr, r->n_tr, sizeof(*r->tr), tr_cmp);
	for (k = 0; k < nw; k++) {
		uint64_t t0 = k * w_ns, t = t0;
		double held = 0;

		for (; j < r->n_tr && r->tr[j].t < t0 + w_ns; j++) {
			uint64_t tj = r->tr[j].t > t0 ? r->tr[j].t : t0;

			held += (double)cur * (double)(tj - t);
			t = tj;
			cur += r->tr[j].d;
		}
		held += (double)cur * (double)(t0 + w_ns - t);
		o->win[k].t0_ms = (double)t0 / 1e6;
		o->win[k].offered_mrps = load_at(cfg, (double)t0 + (double)w_ns / 2) * cfg->n /
					 cfg->mean_us;
		o->win[k].mean_cores = held / (double)w_ns;
		o->win[k].mean_ghz = cfg->ghz;
		if (r->n_cfgch) {
			double core_ns, ghz_ns;

			cfg_span(r, t0, t0 + w_ns, &core_ns, &ghz_ns);
			o->win[k].mean_cores = core_ns / (double)w_ns;
			o->win[k].mean_ghz = ghz_ns / (double)w_ns;
		}
		o->win[k].done_mrps = (double)done[k] / (double)w_ns * 1000.0;
	}
	o->n_win = nw;
out:
	free(h);
	free(done);
}

void vs_collect(struct vs_run *r, struct vs_result *o)
{
	const struct vs_config *cfg = r->cfg;
	struct fp_hist *all = malloc(sizeof(*all));
	uint64_t cnt[VS_K_N] = {0}, sp[VS_K_N] = {0};

	memset(o, 0, sizeof(*o));
	if (!all)
		return;
	fp_hist_init(all);
	for (unsigned i = 0; i < cfg->n; i++) {
		struct vs_core *c = &r->core[i];
		struct fp_shuf_wk *w = &r->sh.wk[i];

		fp_hist_merge(all, &c->lat);
		o->steals += w->steals;
		o->returns += w->returns;
		o->probes += w->steal_probes;
		o->misses += w->steal_misses;
		o->kicks += c->kicks;
		o->irqs += c->irqs;
		o->order_errors += c->order_errors;
		o->batches += c->batches;
		o->frames += c->frames;
		for (unsigned k = 0; k < VS_K_N; k++) {
			cnt[k] += c->cnt[k];
			sp[k] += c->spent_ns[k];
		}
	}
	fp_hist_summarize(all, &o->s);
	free(all);
	o->load = cfg->load;
	o->offered_mrps = cfg->load * cfg->n / cfg->mean_us;
	o->duration_ns = r->end_ns;
	if (r->end_ns)
		o->achieved_mrps = (double)r->n_req / (double)r->end_ns * 1000.0;
	o->gen_late_max_ns = r->gen_late_max_ns;
	o->gen_late_count = r->gen_late_count;
	if (cfg->alloc)
		collect_alloc(r, o);
	/* changes are logged at the clock of the core that made them, which may run ahead of
	 * another's: in time order, and in logging order at equal times */
	if (r->n_cfgch > 1) {
		for (size_t i = 1; i < r->n_cfgch; i++)
			if (r->cfgch[i].t < r->cfgch[i - 1].t) {
				qsort(r->cfgch, r->n_cfgch, sizeof(*r->cfgch), cfgch_cmp);
				break;
			}
	}
	if (!cfg->real && !cfg->alloc)
		collect_cfg(r, o);
	if (cfg->window_us > 0)
		collect_windows(r, o);
	if (cfg->real) {
		/* The mean real cost of each kind of step: what the virtual world's cost
		 * model is calibrated from. */
		static const unsigned off[VS_K_N] = {
			[VS_K_RX] = offsetof(struct vs_costs, rx_ns),
			[VS_K_RET] = offsetof(struct vs_costs, remote_ns),
			[VS_K_RUN] = offsetof(struct vs_costs, run_ns),
			[VS_K_LOCAL] = offsetof(struct vs_costs, local_ns),
			[VS_K_SHIP] = offsetof(struct vs_costs, ship_ns),
			[VS_K_STEAL] = offsetof(struct vs_costs, steal_ns),
			[VS_K_POLL] = offsetof(struct vs_costs, poll_ns),
			[VS_K_IPI] = offsetof(struct vs_costs, ipi_ns),
			[VS_K_IPI_HANDLE] = offsetof(struct vs_costs, ipi_handle_ns),
			[VS_K_KICK] = offsetof(struct vs_costs, kick_ns),
		};
		for (unsigned k = 0; k < VS_K_N; k++)
			*(double *)(void *)((char *)&o->measured + off[k]) =
				cnt[k] ? (double)sp[k] / (double)cnt[k] : 0;
	}
}
