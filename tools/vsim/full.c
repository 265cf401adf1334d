/* full.c: fp-vsim --full: the real workers (loop, stack, scheduler, and fp-echo's spin server or fp-kv) on N virtual cores, over a virtual NIC, in virtual time. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <flowplane/clock.h>
#include <flowplane/net.h>
#include <flowplane/pool.h>
#include <flowplane/rss.h>
#include <flowplane/rt_virtual.h>

#include "../qsim/qsim.h"
#include "echo.h"     /* apps/echo: the spin server's application and protocol */
#include "server.h"   /* apps/kv: fp-kv's server */
#include "vsim.h"

#if defined(__SANITIZE_ADDRESS__)
#define FR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FR_ASAN 1
#endif
#endif
#ifdef FR_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/*
 * model.c's workload (the same requests: arrival times, service times, flows) served by
 * the code a real run executes: rt/worker.c's round over a device queue, the TCP/IP stack,
 * steal.c and the shuffle layer under --sched steal, and fp-echo spin --native's handler,
 * which spins each request's service time. Only time and interleaving are virtual.
 *
 *   - Each worker is a coroutine (its own stack, ucontext) with its own clock. The
 *     scheduler resumes whatever is earliest: the client's next event or the core with the
 *     smallest clock (ties: the client, then the lowest core). A core runs one round of the
 *     real loop at its clock, then pays the round's cost (below) and yields. Inside a round
 *     the handler's service time (fp_spin_hook) moves the core's clock on and yields, so
 *     other cores run meanwhile and see what this one has done up to that point, as real
 *     cores would: a thief can take a flow the home posted while the home spins on another.
 *     What a core sends leaves at its clock at the moment it sends.
 *   - A round that did nothing parks the core until something it might act on happens: a
 *     frame for its queue, its next stack or application timer, or (stealing) another core
 *     posting work (each service time a core starts, each busy round it ends); it then
 *     looks one poll_ns later, as a polling core would.
 *   - The virtual NIC has one queue per worker and RSS: a frame's flow group (the
 *     symmetric Toeplitz hash of its 4-tuple) picks its queue by the indirection table
 *     (group g -> worker g % n, as model.c's); frames without ports (ARP) go to every
 *     queue. Frames are copied into the receiving side's buffers, as a NIC's DMA would,
 *     and arrive --wire-ns after they are sent (default 0).
 *   - The client is outside the simulated machine and costs nothing: one stack per worker
 *     (stack k dials the flows whose home is worker k, from ports whose group maps to k, as
 *     IX's outbound trick does, so each flow has model.c's home), connects every flow, then
 *     sends request i at its arrival time on its flow's connection (a 16-byte spin header)
 *     and takes its latency when the reply's last byte arrives.
 *   - --app kv: fp-kv's server (apps/kv/server.c, one store shared by the workers) instead
 *     of the spin server, and fp-loadgen's memcache protocol for the client (its USR
 *     workload: GETs and SETs of --keys keys, every key stored before the arrivals
 *     start; an answer is checked as fp-loadgen checks it). fp-kv's handler does not
 *     spin: its time in virtual time is a service time drawn from -d and --mean-us for
 *     each command it ran, spun after the handler returns (fr_kv_handle), so it is paid
 *     where the handler ran, a thief or the home. Its real time on this machine is
 *     measured on the TSC and reported (--calibrate: left out of the rounds' fit).
 *
 * A round's cost: poll_ns, plus rx_ns per frame the worker received, tx_ns per burst it
 * handed the NIC, steal_ns per flow it stole and kick_ns per interrupt it sent, at least
 * FR_ROUND_MIN_NS (so a loop that keeps finding work cannot stop time); an interrupt
 * costs its receiver ipi_handle_ns and rx_ns per frame it took, and arrives ipi_ns after it
 * was sent. The other costs of the model are model.c's steps and do not apply here.
 */

#define FR_STACK_SIZE   (1u << 20)    /* per core coroutine (ASan's frames are large) */
#define FR_ROUND_MIN_NS 10            /* the least a round costs */
#define FR_BUFS         4096          /* per server queue */
#define FR_BUF_SIZE     2048
#define FR_PORT         7
#define FR_SRV_IP       0x0a000001u   /* 10.0.0.1 */
#define FR_CLI_IP       0x0a000002u
#define FR_BURST        64
/* Virtual time past the last arrival (and to connect and store the keys) before a run is
 * declared stuck: RFC 6298's backoff after a segment is lost again and again takes tens of
 * seconds (a lost SYN leaves a 3 s RTO, then 6, 12, 24...), which a wire that drops 5%
 * of the frames does to a few of thousands of connections. */
#define FR_STALL_NS     (120ull * FP_NS_PER_S)

struct fr;

#define FIT_K 4   /* a round's cost: poll_ns + rx_ns x frames + tx_ns x bursts + steal_ns x steals */
#define FIT_STALL_NS 50000.0   /* a round that took longer was stopped, not slow: left out */

/* Frames in flight to one receiver: a binary heap by (arrival time, sequence), so frames
 * due at the same time arrive in the order they were sent, and a frame the wire delays
 * (--reorder) lets later ones pass. */
struct fr_frame {
	uint64_t t, seq;
	struct fp_mbuf *m;
};

struct fr_wire {
	struct fr_frame *a;
	size_t n, cap;
	uint64_t seq;
};

/* One queue of the virtual NIC, a worker's. */
struct fr_q {
	struct fp_devq q;             /* first: the ops get a struct fp_devq * */
	struct fr *f;
	unsigned id;
	struct fr_wire rx;
	uint64_t rx_frames, tx_frames, tx_bursts;
};

/* One core's stalls (--stalls): a Poisson process of the rate its role's gaps were seen at,
 * each as long as one of them drawn at random; made as the core's clock reaches it. */
struct fr_stall {
	const double *gap_us;
	size_t n;
	double mean_ns;               /* between one stall's end and the next one's start */
	uint64_t rng;
	uint64_t start, end;          /* the current or next stall (UINT64_MAX: none, ever) */
	uint64_t prev_start, prev_end;   /* the one before (a late interrupt may fall in it) */
	uint64_t count;               /* made so far */
	double ns;                    /* their length, all told */
};

struct fr_core {
	struct fr *f;
	unsigned id;
	struct fr_q *q;
	struct fp_rt_vworker *w;
	uint64_t clock;               /* ns */
	bool started, parked, done;
	bool in_spin;                 /* suspended inside a handler's service time */
	uint64_t irq_at;              /* an interrupt arrives then (0: none on its way) */
	uint64_t owed_ns;             /* costs paid inside the round (interrupts it sent) */
	uint64_t seg;                 /* TSC when its code last started running */
	uint64_t cpu;                 /* TSC cycles its code ran in this round (spins left out) */
	uint64_t wake_at;             /* parked: when it looks again (UINT64_MAX: on an event) */
	struct fr_stall stall;
	ucontext_t uc;
	void *stack;
	void *fake;                   /* ASan's fake stack while switched out */
};

/* A request sent and not answered: its index (FR_PRELOAD: a key stored before the
 * arrivals start) and, for --app kv, what fp-loadgen's parser needs to check its answer. */
#define FR_PRELOAD UINT32_MAX
struct fr_pend {
	uint32_t i;
	struct lg_req lr;
};

/* The client's side of one flow. */
struct fr_conn {
	struct fp_tcp_conn *c;
	unsigned k;                   /* its client stack: its home worker */
	bool up;
	uint8_t *in;                  /* reply bytes not yet a whole reply */
	size_t in_len, in_cap;
	struct fr_pend *pend;         /* requests sent and not answered, oldest first */
	uint32_t pend_head, pend_n, pend_cap;
	uint8_t *out;                 /* request bytes the stack has not taken yet */
	size_t out_len, out_cap;
};

struct fr {
	struct vs_run *r;
	const struct vs_config *cfg;
	unsigned n;
	struct fr_core *core;
	struct fr_core *cur;          /* the core running now; NULL: the scheduler */
	ucontext_t sched_uc;
	const void *main_bottom;      /* the scheduler's stack, for ASan */
	size_t main_size;
	bool stopping;
	/* the machine */
	struct fp_rt_config rtc;
	struct echo_opts eo;
	struct fp_app app;
	/* --app kv: fp-kv's server; its handler (evl's) is wrapped by fr_kv_handle */
	bool kv;
	struct kv_server kvs;
	bool kvs_open;
	struct fp_app kvapp;
	struct qs_dist sdist;         /* a command's service time (-d, in units of --mean-us) */
	bool sdist_set;
	struct qs_rng srng;
	uint64_t kv_cmds;             /* commands fp-kv's handler ran */
	uint64_t app_cycles;          /* the real handler's own time on this machine (TSC) */
	/* --app kv: the client's memcache protocol (fp-loadgen's) and its keys */
	struct lg_proto *mc;
	uint8_t *mc_buf;
	size_t mc_max;
	struct lg_rng lrng;
	bool preloading;
	uint64_t preload_done, kv_misses;
	uint16_t table[FP_RSS_GROUPS];
	struct fp_rss rss;
	struct fp_rt_virtual *v;
	/* the client */
	uint64_t now;                 /* the client's clock (ns) */
	struct fr_stall cstall;       /* the client's core's stalls */
	struct fp_pool *cpool;
	struct fp_pool_cache ccache;
	struct fp_stack **cst;        /* [n] */
	struct fr_wire *to_cli;       /* [n] */
	struct fr_conn *conn;         /* [flows] */
	uint32_t n_up;
	uint64_t t0;                  /* arrivals start (0: not yet) */
	uint64_t next_req, replied, last_reply;
	uint64_t bad_replies, nic_drops; /* frames a receiver had no buffer for */
	uint64_t rng, wire_drops, wire_delayed;
	uint64_t end;                 /* when the last reply arrived */
	/* what the real code's rounds took on this machine (TSC, spins left out), against
	 * what they did: least squares of ns ~ 1 + frames received + bursts sent + steals */
	double xtx[FIT_K][FIT_K], xty[FIT_K], yy;
	uint64_t fit_n, fit_stalls;
	uint32_t closed;              /* connections closed and let go */
	double busy_ns;               /* the costs of rounds that did work (spins left out) */
	char err[320];
};

static struct fr *F;   /* the run the hooks (fp_spin_hook, rt's clock) belong to */

/* ---- frames in flight ---- */

static bool frame_before(const struct fr_frame *a, const struct fr_frame *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int wire_push(struct fr_wire *q, uint64_t t, struct fp_mbuf *m)
{
	size_t i;

	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 256;
		struct fr_frame *a = realloc(q->a, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		q->a = a;
		q->cap = cap;
	}
	for (i = q->n++; i; i = (i - 1) / 2) {   /* sift up */
		struct fr_frame *up = &q->a[(i - 1) / 2];
		struct fr_frame x = { t, q->seq, m };

		if (!frame_before(&x, up))
			break;
		q->a[i] = *up;
	}
	q->a[i] = (struct fr_frame){ t, q->seq++, m };
	return 0;
}

static struct fp_mbuf *wire_pop_due(struct fr_wire *q, uint64_t now)
{
	struct fp_mbuf *m;
	struct fr_frame last;
	size_t i = 0;

	if (!q->n || q->a[0].t > now)
		return NULL;
	m = q->a[0].m;
	last = q->a[--q->n];
	for (;;) {   /* sift down */
		size_t c = 2 * i + 1;

		if (c >= q->n)
			break;
		if (c + 1 < q->n && frame_before(&q->a[c + 1], &q->a[c]))
			c++;
		if (!frame_before(&q->a[c], &last))
			break;
		q->a[i] = q->a[c];
		i = c;
	}
	if (q->n)
		q->a[i] = last;
	return m;
}

static uint64_t wire_next(const struct fr_wire *q)
{
	return q->n ? q->a[0].t : UINT64_MAX;
}

static unsigned wire_due(const struct fr_wire *q, uint64_t now)
{
	unsigned n = 0;

	for (size_t i = 0; i < q->n; i++)
		n += q->a[i].t <= now;
	return n;
}

static void wire_free(struct fr_wire *q, struct fp_pool_cache *c)
{
	struct fp_mbuf *m;

	while ((m = wire_pop_due(q, UINT64_MAX)))
		fp_mbuf_free(c, m);
	free(q->a);
	memset(q, 0, sizeof(*q));
}

/* A copy of @src in a buffer of @c's pool (a NIC's DMA); NULL when it has none. */
static struct fp_mbuf *copy_frame(struct fp_pool_cache *c, const struct fp_mbuf *src)
{
	struct fp_mbuf *m = fp_pool_get(c);
	uint8_t *p;

	if (!m)
		return NULL;
	if (!(p = fp_mbuf_append(m, src->pkt_len))) {
		fp_mbuf_free(c, m);
		return NULL;
	}
	fp_mbuf_read(src, 0, p, src->pkt_len);
	return m;
}

/* The NIC's RSS: the frame's flow group, or -1 when it has none (ARP, ...). */
static int frame_group(const struct fr *f, const struct fp_mbuf *m)
{
	return fp_rt_frame_group(&f->rss, fp_mbuf_data(m), m->data_len);
}

/* ---- the real code's own cost (--calibrate) ---- */

static void fit_add(struct fr *f, double ns, double rx, double tx, double steals)
{
	const double x[FIT_K] = { 1, rx, tx, steals };

	if (ns > FIT_STALL_NS) {   /* the process was stopped (preempted, a fault): not the code */
		f->fit_stalls++;
		return;
	}

	for (unsigned i = 0; i < FIT_K; i++) {
		for (unsigned j = 0; j < FIT_K; j++)
			f->xtx[i][j] += x[i] * x[j];
		f->xty[i] += x[i] * ns;
	}
	f->yy += ns * ns;
	f->fit_n++;
}

/* Solve the normal equations over the terms that varied (a term that never moved, such as
 * steals when partitioned, gets 0); negative costs are clamped to 0. *@r2: the fit's R². */
static void fit_solve(const struct fr *f, double out[FIT_K], double *r2)
{
	double a[FIT_K][FIT_K + 1], mean = f->fit_n ? f->xty[0] / (double)f->fit_n : 0;
	unsigned use[FIT_K], k = 0;

	for (unsigned i = 0; i < FIT_K; i++) {
		out[i] = 0;
		if (i == 0 || f->xtx[i][i] > 0)
			use[k++] = i;
	}
	for (unsigned i = 0; i < k; i++) {
		for (unsigned j = 0; j < k; j++)
			a[i][j] = f->xtx[use[i]][use[j]];
		a[i][k] = f->xty[use[i]];
	}
	for (unsigned c = 0; c < k; c++) {   /* Gauss-Jordan, partial pivoting */
		unsigned piv = c;

		for (unsigned r = c + 1; r < k; r++)
			if (fabs(a[r][c]) > fabs(a[piv][c]))
				piv = r;
		if (fabs(a[piv][c]) < 1e-12)
			continue;
		for (unsigned j = 0; j <= k; j++) {
			double t = a[c][j];

			a[c][j] = a[piv][j];
			a[piv][j] = t;
		}
		for (unsigned r = 0; r < k; r++) {
			double m = a[r][c] / a[c][c];

			if (r == c)
				continue;
			for (unsigned j = c; j <= k; j++)
				a[r][j] -= m * a[c][j];
		}
	}
	double sse = f->yy, sst = f->yy - (double)f->fit_n * mean * mean;

	for (unsigned i = 0; i < k; i++) {
		double b = fabs(a[i][i]) < 1e-12 ? 0 : a[i][k] / a[i][i];

		out[use[i]] = b;
	}
	/* SSE = y'y - 2 b'X'y + b'X'X b */
	for (unsigned i = 0; i < FIT_K; i++) {
		sse -= 2 * out[i] * f->xty[i];
		for (unsigned j = 0; j < FIT_K; j++)
			sse += out[i] * f->xtx[i][j] * out[j];
	}
	*r2 = sst > 0 ? 1 - sse / sst : 0;
	for (unsigned i = 0; i < FIT_K; i++)
		if (out[i] < 0)
			out[i] = 0;
}

/* ---- the schedule ---- */

static uint64_t fr_vcycles(void)
{
	return fp_ns_to_cycles(F->cur ? F->cur->clock : F->now);
}

/* splitmix64: the wire's faults, from the run's seed */
static uint64_t fr_rand(struct fr *f)
{
	uint64_t z = (f->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double fr_unit(struct fr *f) { return (double)(fr_rand(f) >> 11) / 9007199254740992.0; }

/* When a frame sent at @t arrives, or UINT64_MAX when the wire drops it. */
static uint64_t wire_arrival(struct fr *f, uint64_t t)
{
	t += (uint64_t)f->cfg->costs.wire_ns;
	if (f->cfg->loss > 0 && fr_unit(f) < f->cfg->loss) {
		f->wire_drops++;
		return UINT64_MAX;
	}
	if (f->cfg->reorder > 0 && fr_unit(f) < f->cfg->reorder) {
		f->wire_delayed++;
		t += FP_NS_PER_US + fr_rand(f) % (49 * FP_NS_PER_US);
	}
	return t;
}

/* ---- the machine's stalls (--stalls) ---- */

static uint64_t stall_rand(struct fr_stall *s)
{
	uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void stall_init(struct fr_stall *s, const struct vs_stalls *st, unsigned role,
		       uint64_t seed)
{
	memset(s, 0, sizeof(*s));
	s->start = s->end = UINT64_MAX;
	if (!st || !st->n[role])
		return;
	s->gap_us = st->gap_us[role];
	s->n = st->n[role];
	s->mean_ns = st->seconds * 1e9 / (double)s->n;
	s->rng = seed;
	s->start = s->end = 0;
}

/* The next stall, after the current one. */
static void stall_next(struct fr_stall *s)
{
	double u = (double)(stall_rand(s) >> 11) / 9007199254740992.0;
	double gap = s->gap_us[stall_rand(s) % s->n] * 1e3;

	s->prev_start = s->start;
	s->prev_end = s->end;
	s->start = s->end + (uint64_t)(-log1p(-u) * s->mean_ns);
	s->end = s->start + (uint64_t)gap;
	s->count++;
	s->ns += gap;
}

/* When something due at @t can happen: @t, or the end of the stall @t falls in. */
static uint64_t stall_shift(struct fr_stall *s, uint64_t t)
{
	while (s->end <= t)
		stall_next(s);
	if (t >= s->start)
		return s->end;
	if (t >= s->prev_start && t < s->prev_end)
		return s->prev_end;
	return t;
}

/* When @ns of work that starts at @t ends: the stalls on the way add to it. */
static uint64_t stall_work(struct fr_stall *s, uint64_t t, uint64_t ns)
{
	if (s->n == 0)
		return t + ns;
	t = stall_shift(s, t);
	for (;;) {
		while (s->end <= t)
			stall_next(s);
		if (s->start >= t + ns)
			return t + ns;
		ns -= s->start - t;
		t = s->end;
	}
}

/* Stalls made before @end, and their time (ms): the last made may lie beyond it. */
static void stall_sum(const struct fr_stall *s, uint64_t end, uint64_t *count, double *ms)
{
	bool beyond = s->count && s->start > end;

	*count += s->count - beyond;
	*ms += (s->ns - (beyond ? (double)(s->end - s->start) : 0)) / 1e6;
}

/* The running core gives the scheduler its turn; back here when the scheduler resumes it. */
static void core_yield(struct fr_core *c)
{
	struct fr *f = c->f;

#ifdef FR_ASAN
	__sanitizer_start_switch_fiber(&c->fake, f->main_bottom, f->main_size);
#endif
	swapcontext(&c->uc, &f->sched_uc);
#ifdef FR_ASAN
	__sanitizer_finish_switch_fiber(c->fake, NULL, NULL);
#endif
}

static void core_resume(struct fr *f, struct fr_core *c)
{
	void *fake = NULL;

	f->cur = c;
#ifdef FR_ASAN
	__sanitizer_start_switch_fiber(&fake, c->stack, FR_STACK_SIZE);
#endif
	swapcontext(&f->sched_uc, &c->uc);
#ifdef FR_ASAN
	__sanitizer_finish_switch_fiber(fake, &f->main_bottom, &f->main_size);
#else
	(void)fake;
#endif
	f->cur = NULL;
}

/* @c is parked: it looks again at @t (one poll pass after what woke it). */
static void core_wake(struct fr *f, struct fr_core *c, uint64_t t)
{
	uint64_t at = (t > c->clock ? t : c->clock) + (uint64_t)f->cfg->costs.poll_ns;

	if (c->parked && at < c->wake_at)
		c->wake_at = at;
}

/* Stealing: every parked core may have work to take now. */
static void wake_thieves(struct fr *f, const struct fr_core *by, uint64_t t)
{
	if (f->cfg->sched != VS_SCHED_STEAL)
		return;
	for (unsigned i = 0; i < f->n; i++)
		if (&f->core[i] != by)
			core_wake(f, &f->core[i], t);
}

/* fp_spin_hook: the handler spins @ns; the core's clock moves on while the others run. */
static void fr_spin(uint64_t ns)
{
	struct fr_core *c = F->cur;

	if (!c)
		return;   /* not from a core (cannot happen: only handlers spin) */
	wake_thieves(F, c, c->clock);   /* what it posted before spinning can be taken */
	c->clock = stall_shift(&c->stall, c->clock + ns);   /* it spins on the TSC */
	c->in_spin = true;
	c->cpu += fp_rdtsc() - c->seg;
	core_yield(c);
	c->seg = fp_rdtsc();
	c->in_spin = false;
}

/* --app kv: evl's handler (fp-kv's callbacks) runs as it would on a real core; then the
 * core spends a service time drawn from -d for each command it ran. The handler's own
 * time on this machine is the application's, not the round's (left out of the fit). */
static void fr_kv_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
			 const struct fp_call *rets, unsigned n_rets)
{
	struct fr *f = F;
	struct fr_core *c = f->cur;
	/* the commands it ran: fp-kv's fp_ctx_count, on the running worker's counters */
	const struct fp_rt_worker_stats *st = fp_rt_vworker_stats(c->w);
	uint64_t ops = st->app_ops, t0 = fp_rdtsc(), dt;
	double ns = 0;

	f->kvapp.handle(ctx, conds, n, rets, n_rets);
	dt = fp_rdtsc() - t0;
	f->app_cycles += dt;
	c->seg += dt;
	ops = st->app_ops - ops;
	f->kv_cmds += ops;
	if (c->in_spin)
		return;   /* inside an interrupt (cannot happen: an interrupt runs no handler) */
	while (ops--)
		ns += qs_dist_sample(&f->sdist, &f->srng) * f->cfg->mean_us * 1000.0;
	if (ns > 0)
		fr_spin((uint64_t)llround(ns));
}

/* rt_vkick (--notify ipi): the running core interrupts @h; it arrives ipi_ns later, and
 * the sender pays kick_ns. */
static int fr_kick(unsigned h)
{
	struct fr *f = F;
	struct fr_core *by = f->cur, *c = &f->core[h];
	uint64_t t = (by ? by->clock : f->now) + (uint64_t)f->cfg->costs.ipi_ns;

	if (h >= f->n)
		return -EINVAL;
	if (!c->irq_at || t < c->irq_at)
		c->irq_at = t;
	if (by)
		by->owed_ns += (uint64_t)f->cfg->costs.kick_ns;
	return 0;
}

/* An interrupt reaches @c at c->irq_at. Inside a handler's service time, the signal
 * handler's work runs then, at that time (what it receives and sends, at that time), and
 * the interrupted handler ends that much later: ipi_handle_ns, and rx_ns per frame it
 * took. Elsewhere it finds the worker outside a handler and does nothing (late). */
static void core_interrupt(struct fr *f, struct fr_core *c)
{
	uint64_t t = c->irq_at, end = c->clock, rx0 = c->q->rx_frames;

	c->irq_at = 0;
	f->cur = c;
	if (c->in_spin)
		c->clock = t;
	fp_rt_vworker_interrupt(c->w);
	f->cur = NULL;
	if (c->in_spin) {
		c->clock = end + (uint64_t)(f->cfg->costs.ipi_handle_ns +
					    f->cfg->costs.rx_ns * (double)(c->q->rx_frames - rx0));
		wake_thieves(f, c, t);   /* the conditions it posted can be taken */
	}
}

static void core_main(void)
{
	struct fr *f = F;
	struct fr_core *c = f->cur;

#ifdef FR_ASAN
	__sanitizer_finish_switch_fiber(NULL, &f->main_bottom, &f->main_size);
#endif
	c->started = true;
	while (!f->stopping) {
		const struct fp_rt_worker_stats *s = fp_rt_vworker_stats(c->w);
		uint64_t rx0 = c->q->rx_frames, tx0 = c->q->tx_bursts, stolen0 = s->sched_stolen;

		c->cpu = 0;
		c->seg = fp_rdtsc();
		bool busy = fp_rt_vworker_round(c->w, c->clock / FP_NS_PER_US);

		c->cpu += fp_rdtsc() - c->seg;
		fit_add(f, (double)fp_cycles_to_ns(c->cpu), (double)(c->q->rx_frames - rx0),
			(double)(c->q->tx_bursts - tx0), (double)(s->sched_stolen - stolen0));
		double cost = (double)c->owed_ns + f->cfg->costs.poll_ns +
			      f->cfg->costs.rx_ns * (double)(c->q->rx_frames - rx0) +
			      f->cfg->costs.steal_ns * (double)(s->sched_stolen - stolen0) +
			      f->cfg->costs.tx_ns * (double)(c->q->tx_bursts - tx0);

		c->owed_ns = 0;
		c->clock = stall_work(&c->stall, c->clock,
				      cost < FR_ROUND_MIN_NS ? FR_ROUND_MIN_NS : (uint64_t)cost);
		if (busy) {
			f->busy_ns += cost;
			wake_thieves(f, c, c->clock);
		} else {
			uint64_t next = fp_rt_vworker_next_us(c->w);

			c->parked = true;
			c->wake_at = next == UINT64_MAX ? UINT64_MAX : next * FP_NS_PER_US;
			if (c->wake_at <= c->clock)   /* due now and not fired: the next µs */
				c->wake_at = c->clock + FP_NS_PER_US;
		}
		core_yield(c);
	}
	c->done = true;
#ifdef FR_ASAN
	__sanitizer_start_switch_fiber(NULL, f->main_bottom, f->main_size);
#endif
	setcontext(&f->sched_uc);
}

/* ---- the virtual NIC's queues (the workers' device) ---- */

static struct fr_q *q_of(struct fp_devq *q) { return (struct fr_q *)q; }

static uint64_t q_now(const struct fr_q *q)
{
	return q->f->cur ? q->f->cur->clock : q->f->now;
}

static unsigned vq_rx_burst(struct fp_devq *dq, struct fp_mbuf **out, unsigned max)
{
	struct fr_q *q = q_of(dq);
	uint64_t now = q_now(q);
	unsigned n = 0;

	while (n < max && (out[n] = wire_pop_due(&q->rx, now)))
		n++;
	q->rx_frames += n;
	return n;
}

/* A worker's frames go to the client: the stack whose flows' group they are in. */
static unsigned vq_tx_burst(struct fp_devq *dq, struct fp_mbuf **frames, unsigned n)
{
	struct fr_q *q = q_of(dq);
	struct fr *f = q->f;
	uint64_t now = q_now(q);

	for (unsigned i = 0; i < n; i++) {
		int g = frame_group(f, frames[i]);
		unsigned lo = g < 0 ? 0 : f->table[g], hi = g < 0 ? f->n : lo + 1;

		for (unsigned k = lo; k < hi; k++) {
			uint64_t t = wire_arrival(f, now);
			struct fp_mbuf *m;

			if (t == UINT64_MAX)
				continue;
			m = copy_frame(&f->ccache, frames[i]);

			if (!m || wire_push(&f->to_cli[k], t, m)) {
				if (m)
					fp_mbuf_free(&f->ccache, m);
				f->nic_drops++;
			}
		}
		fp_mbuf_free(&dq->cache, frames[i]);
	}
	q->tx_frames += n;
	if (n)
		q->tx_bursts++;
	return n;
}

static unsigned vq_reclaim(struct fp_devq *dq) { (void)dq; return 0; }
static int vq_wait_fd(struct fp_devq *dq) { (void)dq; return -1; }

static unsigned vq_rx_ready(struct fp_devq *dq)
{
	struct fr_q *q = q_of(dq);

	return wire_due(&q->rx, q_now(q));
}

static unsigned vq_rx_waiting(const struct fp_devq *dq)
{
	return vq_rx_ready((struct fp_devq *)dq);
}

static void vq_stats(struct fp_devq *dq, struct fp_dev_stats *out)
{
	struct fr_q *q = q_of(dq);

	memset(out, 0, sizeof(*out));
	out->rx_frames = q->rx_frames;
	out->tx_frames = q->tx_frames;
}

static void vq_close(struct fp_devq *dq)
{
	struct fr_q *q = q_of(dq);

	wire_free(&q->rx, &dq->cache);
	fp_pool_cache_flush(&dq->cache);
	fp_pool_destroy(dq->pool);
	free(q);
}

static const struct fp_dev_ops vq_ops = {
	.name = "vnic",
	.rx_burst = vq_rx_burst,
	.tx_burst = vq_tx_burst,
	.reclaim = vq_reclaim,
	.wait_fd = vq_wait_fd,
	.rx_ready = vq_rx_ready,
	.rx_waiting = vq_rx_waiting,
	.stats = vq_stats,
	.close = vq_close,
};

static struct fr_q *vq_open(struct fr *f, unsigned id)
{
	struct fr_q *q = calloc(1, sizeof(*q));
	char name[32];

	if (!q)
		return NULL;
	snprintf(name, sizeof(name), "vnic%u", id);
	struct fp_pool_params pp = { .name = name, .n_bufs = FR_BUFS, .buf_size = FR_BUF_SIZE };

	q->f = f;
	q->id = id;
	q->q.ops = &vq_ops;
	q->q.mac = (struct fp_eth_addr){ .b = { 0x02, 0, 0, 0, 0, 0x01 } };
	q->q.mtu = 1500;
	q->q.queue_id = (uint16_t)id;
	q->q.rx_bufs = 0;
	if (!(q->q.pool = fp_pool_create(&pp)) || fp_pool_cache_init(&q->q.cache, q->q.pool)) {
		if (q->q.pool)
			fp_pool_destroy(q->q.pool);
		free(q);
		return NULL;
	}
	return q;
}

/* The client's frames go to the workers' queues by RSS (ARP to every queue). */
static void to_workers(struct fr *f, struct fp_mbuf *src, uint64_t t)
{
	int g = frame_group(f, src);
	unsigned lo = g < 0 ? 0 : f->table[g], hi = g < 0 ? f->n : lo + 1;

	for (unsigned k = lo; k < hi; k++) {
		struct fr_q *q = f->core[k].q;
		uint64_t at = wire_arrival(f, t);
		struct fp_mbuf *m;

		if (at == UINT64_MAX)
			continue;
		m = copy_frame(&q->q.cache, src);

		if (!m || wire_push(&q->rx, at, m)) {
			if (m)
				fp_mbuf_free(&q->q.cache, m);
			f->nic_drops++;
			continue;
		}
		core_wake(f, &f->core[k], at);
		/* with interrupts, an idle thief that sees frames wait at a busy home acts */
		if (f->cfg->notify == VS_NOTIFY_IPI)
			wake_thieves(f, &f->core[k], at);
	}
	fp_mbuf_free(&f->ccache, src);
}

/* ---- the client ---- */

static int conn_send(struct fr *f, struct fr_conn *cn)
{
	ssize_t k;

	if (!cn->out_len || !cn->up)
		return 0;
	k = fp_tcp_send(f->cst[cn->k], cn->c, cn->out, cn->out_len);
	if (k < 0 && k != -ENOBUFS)
		return (int)k;
	if (k > 0) {
		memmove(cn->out, cn->out + k, cn->out_len - (size_t)k);
		cn->out_len -= (size_t)k;
	}
	return 0;
}

/* Request @i (FR_PRELOAD: a key's SET) is sent on @cn: it waits for its answer. */
static int pend_push(struct fr_conn *cn, uint32_t i, const struct lg_req *lr)
{
	if (cn->pend_n == cn->pend_cap) {
		uint32_t cap = cn->pend_cap ? cn->pend_cap * 2 : 8;
		struct fr_pend *a = malloc(cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		for (uint32_t j = 0; j < cn->pend_n; j++)
			a[j] = cn->pend[(cn->pend_head + j) % cn->pend_cap];
		free(cn->pend);
		cn->pend = a;
		cn->pend_cap = cap;
		cn->pend_head = 0;
	}
	cn->pend[(cn->pend_head + cn->pend_n) % cn->pend_cap] = (struct fr_pend){ i, *lr };
	cn->pend_n++;
	return 0;
}

static struct fr_pend pend_pop(struct fr_conn *cn)
{
	struct fr_pend p = cn->pend[cn->pend_head];

	cn->pend_head = (cn->pend_head + 1) % cn->pend_cap;
	cn->pend_n--;
	return p;
}

/* @*buf holds at least @need bytes (doubling from 256); 0 or -ENOMEM. */
static int buf_room(uint8_t **buf, size_t *cap, size_t need)
{
	size_t c = *cap ? *cap : 256;
	uint8_t *b;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (!(b = realloc(*buf, c)))
		return -ENOMEM;
	*buf = b;
	*cap = c;
	return 0;
}

/* Bytes for the stack to take, after what it has not taken yet. */
static int conn_queue(struct fr_conn *cn, const void *b, size_t n)
{
	if (buf_room(&cn->out, &cn->out_cap, cn->out_len + n))
		return -ENOMEM;
	memcpy(cn->out + cn->out_len, b, n);
	cn->out_len += n;
	return 0;
}

static int conn_request(struct fr *f, uint64_t i)
{
	const struct vs_req *rq = &f->r->req[i];
	struct fr_conn *cn = &f->conn[rq->flow];
	struct lg_req lr = { 0 };
	int rc;

	if (f->kv) {
		size_t n = lg_proto_memcache.encode(f->mc, &f->lrng, f->mc_buf, f->mc_max, &lr);

		if (!n)
			return -EMSGSIZE;
		rc = pend_push(cn, (uint32_t)i, &lr);
		if (!rc)
			rc = conn_queue(cn, f->mc_buf, n);
	} else {
		uint32_t w[2] = { SPIN_MAGIC, SPIN_HDR };
		uint64_t ns = rq->svc_ns;
		uint8_t h[SPIN_HDR];

		memcpy(h, w, 8);            /* little-endian, as the protocol says (x86) */
		memcpy(h + 8, &ns, 8);
		rc = pend_push(cn, (uint32_t)i, &lr);
		if (!rc)
			rc = conn_queue(cn, h, SPIN_HDR);
	}
	return rc ? rc : conn_send(f, cn);
}

/* --app kv: every key is stored before the arrivals start (fp-loadgen's --preload), the
 * SETs spread over the connections. */
static int kv_preload(struct fr *f)
{
	for (uint64_t j = 0; j < f->cfg->kv_keys; j++) {
		struct fr_conn *cn = &f->conn[j % f->cfg->flows];
		struct lg_req lr = { 0 };
		size_t n = lg_proto_memcache.encode_preload(f->mc, j, &f->lrng, f->mc_buf,
							    f->mc_max, &lr);
		int rc;

		if (!n)
			return -EMSGSIZE;
		if ((rc = pend_push(cn, FR_PRELOAD, &lr)) || (rc = conn_queue(cn, f->mc_buf, n)))
			return rc;
	}
	for (uint32_t i = 0; i < f->cfg->flows; i++)
		if (conn_send(f, &f->conn[i]))
			return -EPIPE;
	f->preloading = true;
	return 0;
}

/* Request @i was answered now: its latency. */
static void reply_done(struct fr *f, struct fr_conn *cn, uint32_t i)
{
	struct vs_req *rq = &f->r->req[i];

	rq->t_done = f->now - f->t0;
	if (i >= f->r->warm)
		fp_hist_record(&f->r->core[cn->k].lat, rq->t_done - rq->t_arr);
	f->replied++;
	f->last_reply = f->now;
}

/* A reply's bytes (spin): each whole header answers the oldest request of its flow. */
static void spin_replies(struct fr *f, struct fr_conn *cn)
{
	size_t off = 0;

	for (; cn->in_len - off >= SPIN_HDR; off += SPIN_HDR) {
		uint64_t ns;

		if (!cn->pend_n) {
			f->bad_replies++;
			continue;
		}
		struct fr_pend p = pend_pop(cn);

		memcpy(&ns, cn->in + off + 8, 8);
		if (ns != f->r->req[p.i].svc_ns)
			f->bad_replies++;
		reply_done(f, cn, p.i);
	}
	memmove(cn->in, cn->in + off, cn->in_len - off);
	cn->in_len -= off;
}

/* A reply's bytes (--app kv): fp-loadgen's parser takes each whole answer for the oldest
 * request; an error answer or an answer to nothing sent counts as a bad reply, a stream
 * that cannot be memcache's ends the run. */
static int kv_replies(struct fr *f, struct fr_conn *cn)
{
	size_t off = 0;

	while (cn->pend_n && off < cn->in_len) {
		struct fr_pend *p = &cn->pend[cn->pend_head];
		enum lg_status st = LG_RESP_OK;
		long k = lg_proto_memcache.parse(f->mc, &p->lr, cn->in + off, cn->in_len - off, &st);

		if (k == 0)
			break;
		if (k < 0) {
			snprintf(f->err, sizeof(f->err), "flow %u: a reply that is not memcache's: "
				 "\"%.*s\"", (unsigned)(cn - f->conn),
				 (int)(cn->in_len - off < 40 ? cn->in_len - off : 40), cn->in + off);
			return -EBADMSG;
		}
		off += (size_t)k;
		struct fr_pend d = pend_pop(cn);

		if (st == LG_RESP_ERROR)
			f->bad_replies++;
		else if (st == LG_RESP_MISS)
			f->kv_misses++;
		if (d.i == FR_PRELOAD)
			f->preload_done++;
		else
			reply_done(f, cn, d.i);
	}
	if (!cn->pend_n && off < cn->in_len) {
		f->bad_replies++;   /* bytes that answer nothing sent */
		off = cn->in_len;
	}
	memmove(cn->in, cn->in + off, cn->in_len - off);
	cn->in_len -= off;
	return 0;
}

static int conn_replies(struct fr *f, struct fr_conn *cn, const struct fp_mbuf *m, uint32_t len)
{
	if (buf_room(&cn->in, &cn->in_cap, cn->in_len + len))
		return -ENOMEM;
	fp_mbuf_read(m, 0, cn->in + cn->in_len, len);
	cn->in_len += len;
	if (f->kv)
		return kv_replies(f, cn);
	spin_replies(f, cn);
	return 0;
}

static int client_events(struct fr *f, unsigned k)
{
	struct fp_event ev[FR_BURST];
	unsigned n;

	while ((n = fp_stack_events(f->cst[k], ev, FR_BURST))) {
		for (unsigned i = 0; i < n; i++) {
			struct fr_conn *cn = ev[i].cookie ? &f->conn[ev[i].cookie - 1] : NULL;

			switch (ev[i].type) {
			case FP_EV_TCP_CONNECTED:
				if (!cn || ev[i].status) {
					snprintf(f->err, sizeof(f->err), "a connection failed: %s",
						 strerror(-ev[i].status));
					return -ECONNREFUSED;
				}
				cn->up = true;
				f->n_up++;
				break;
			case FP_EV_TCP_RECV: {
				int rc = cn ? conn_replies(f, cn, ev[i].m, ev[i].len) : 0;

				fp_tcp_recv_done(f->cst[k], ev[i].conn, ev[i].len);
				if (rc)
					return rc;
				break;
			}
			case FP_EV_TCP_SENT:
				if (cn && conn_send(f, cn))
					return -EPIPE;
				break;
			case FP_EV_TCP_EOF:
			case FP_EV_TCP_DEAD:
				snprintf(f->err, sizeof(f->err), "the server closed a connection "
					 "(event %u, status %d)", ev[i].type, ev[i].status);
				return -ECONNRESET;
			default:
				break;
			}
		}
	}
	return 0;
}

/* When the client next has something to do (UINT64_MAX: nothing). */
static uint64_t client_next(struct fr *f)
{
	uint64_t t = UINT64_MAX;

	if (f->t0 && f->next_req < f->r->n_req)
		t = f->t0 + f->r->req[f->next_req].t_arr;
	for (unsigned k = 0; k < f->n; k++) {
		uint64_t a = wire_next(&f->to_cli[k]), b = fp_stack_next_us(f->cst[k]);

		if (a < t)
			t = a;
		if (b != UINT64_MAX) {
			b = b * FP_NS_PER_US;
			if (b <= f->now)
				b = f->now + FP_NS_PER_US;
			if (b < t)
				t = b;
		}
	}
	return t;
}

/* What the client stacks queued goes on the wire at @t. */
static void client_tx(struct fr *f, uint64_t t)
{
	struct fp_mbuf *ms[FR_BURST];

	for (unsigned k = 0; k < f->n; k++) {
		unsigned n;

		while ((n = fp_stack_tx(f->cst[k], ms, FR_BURST)))
			for (unsigned i = 0; i < n; i++)
				to_workers(f, ms[i], t);
	}
}

static int client_step(struct fr *f, uint64_t t)
{
	struct fp_mbuf *ms[FR_BURST];
	int rc;

	f->now = t;
	for (unsigned k = 0; k < f->n; k++) {
		unsigned n;

		while ((n = 0, 1)) {
			while (n < FR_BURST && (ms[n] = wire_pop_due(&f->to_cli[k], t)))
				n++;
			if (!n)
				break;
			fp_stack_input(f->cst[k], ms, n, t / FP_NS_PER_US);
		}
		fp_stack_poll(f->cst[k], t / FP_NS_PER_US);
		if ((rc = client_events(f, k)))
			return rc;
	}
	if (!f->t0 && f->n_up == f->cfg->flows) {
		/* every flow is up (--app kv: and every key stored): the arrivals start */
		if (f->kv && !f->preloading && (rc = kv_preload(f)))
			return rc;
		if (!f->kv || f->preload_done == f->cfg->kv_keys)
			f->t0 = t + 10 * FP_NS_PER_US;
	}
	while (f->t0 && f->next_req < f->r->n_req &&
	       f->t0 + f->r->req[f->next_req].t_arr <= t)
		if ((rc = conn_request(f, f->next_req++)))
			return rc;
	client_tx(f, t);
	return 0;
}

/* ---- setup, the run, teardown ---- */

static int client_setup(struct fr *f)
{
	struct fp_pool_params pp = { .name = "client", .n_bufs = FR_BUFS * f->n + FR_BUFS,
				     .buf_size = FR_BUF_SIZE };

	stall_init(&f->cstall, f->cfg->stalls, 1, f->rtc.seed * 0x2545f4914f6cdd1dull + 0x51ab);
	if (!(f->cpool = fp_pool_create(&pp)) || fp_pool_cache_init(&f->ccache, f->cpool))
		return -ENOMEM;
	if (f->kv) {
		struct lg_proto_config pc = { .name = "memcache", .workload = "usr",
					      .records = f->cfg->kv_keys };

		if (!(f->mc = lg_proto_memcache.create(&pc, f->err, sizeof(f->err))))
			return -EINVAL;
		f->mc_max = lg_proto_memcache.max_request(f->mc);
		if (!(f->mc_buf = malloc(f->mc_max)))
			return -ENOMEM;
		lg_rng_seed(&f->lrng, f->rtc.seed * 0x9e3779b97f4a7c15ull + 0x6b76);
	}
	f->cst = calloc(f->n, sizeof(*f->cst));
	f->to_cli = calloc(f->n, sizeof(*f->to_cli));
	f->conn = calloc(f->cfg->flows, sizeof(*f->conn));
	if (!f->cst || !f->to_cli || !f->conn)
		return -ENOMEM;
	for (unsigned k = 0; k < f->n; k++) {
		struct fp_stack_config sc = {
			.mac = { .b = { 0x02, 0, 0, 0, 0, 0x02 } },
			.ipv4 = FR_CLI_IP, .prefix_len = 24, .mtu = 1500, .cache = &f->ccache,
			.queue_id = (uint16_t)k, .n_queues = (uint16_t)f->n,
			.rss_key = fp_rss_key_symmetric, .steer_table = f->table,
			.secret = f->cfg->seed * 0x9e3779b97f4a7c15ull + 1,
			/* the n stacks share one pool: half of it for what they have sent and
			 * not seen acknowledged, the rest for what they receive (each stack's
			 * default is half the pool, which n of them would take whole, leaving
			 * no buffer for the ACKs that free them) */
			.tx_bufs = pp.n_bufs / (2 * f->n),
		};

		if (!(f->cst[k] = fp_stack_create(&sc, 0)))
			return -errno;
	}
	return 0;
}

static int client_dial(struct fr *f)
{
	for (uint32_t i = 0; i < f->cfg->flows; i++) {
		struct fr_conn *cn = &f->conn[i];
		int err = 0;

		cn->k = vs_home_of(f->r, i);
		cn->c = fp_tcp_dial(f->cst[cn->k], FR_SRV_IP, FR_PORT, i + 1, &err);
		if (!cn->c) {
			snprintf(f->err, sizeof(f->err), "flow %u: dial: %s", i, strerror(-err));
			return err ? err : -EIO;
		}
	}
	return 0;
}

static int machine_setup(struct fr *f)
{
	const struct vs_config *cfg = f->cfg;

	fp_rt_config_init(&f->rtc);
	f->rtc.n_workers = f->n;
	f->rtc.sched = cfg->sched == VS_SCHED_STEAL ? FP_SCHED_STEAL : FP_SCHED_PART;
	f->rtc.ipv4 = FR_SRV_IP;
	f->rtc.prefix_len = 24;
	f->rtc.batch = cfg->batch;
	f->rtc.seed = cfg->seed ? cfg->seed : 1;
	f->rtc.steal_force = cfg->steal_force;
	f->rtc.notify = cfg->notify == VS_NOTIFY_IPI ? FP_NOTIFY_IPI : FP_NOTIFY_POLL;
	f->rtc.ipi_after_us = (uint32_t)cfg->ipi_after_us;
	f->rtc.flush_us = (uint32_t)cfg->flush_us;
	f->rng = f->rtc.seed * 0xd1b54a32d192ed03ull;
	f->rtc.stack.secret = f->rtc.seed * 0x9e3779b97f4a7c15ull + 2;
	f->rtc.stack.max_conns = cfg->flows + 64;
	if (f->kv) {
		kv_server_defaults(&f->kvs);
		f->kvs.set.tcpport = FR_PORT;
		f->kvs.set.maxconns = cfg->flows + 64;
		if (kv_server_open(&f->kvs, f->n, f->err, sizeof(f->err)))
			return -EINVAL;
		f->kvs_open = true;
		kv_server_app(&f->kvs, &f->kvapp);
		f->app = f->kvapp;
		f->app.handle = fr_kv_handle;
		if (qs_dist_parse(&f->sdist, cfg->dist)) {
			snprintf(f->err, sizeof(f->err), "-d %s: not a distribution", cfg->dist);
			return -EINVAL;
		}
		f->sdist_set = true;
		qs_rng_seed(&f->srng, f->rtc.seed, 7);
	} else {
		f->eo.mode = ECHO_SPIN;
		f->eo.cmd = "spin";
		f->eo.port = FR_PORT;
		f->eo.native = true;
		echo_spin_native_app(&f->app, &f->eo);
	}
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
		f->table[g] = (uint16_t)(g % f->n);
	fp_rss_init(&f->rss, fp_rss_key_symmetric);
	if (!(f->v = fp_rt_virtual_create(&f->rtc, &f->app, f->table, fr_vcycles, fr_kick,
					  f->err, sizeof(f->err))))
		return -EINVAL;
	f->core = calloc(f->n, sizeof(*f->core));
	if (!f->core)
		return -ENOMEM;
	for (unsigned i = 0; i < f->n; i++) {
		struct fr_core *c = &f->core[i];

		c->f = f;
		c->id = i;
		c->wake_at = UINT64_MAX;
		stall_init(&c->stall, cfg->stalls, 0, f->rtc.seed * 0x2545f4914f6cdd1dull + i);
		if (!(c->q = vq_open(f, i)))
			return -ENOMEM;
		f->cur = c;   /* init's calls run "on" the core, at its clock */
		c->w = fp_rt_vworker_open(f->v, i, &c->q->q, 0, f->err, sizeof(f->err));
		f->cur = NULL;
		if (!c->w)
			return -EIO;
		if (!(c->stack = malloc(FR_STACK_SIZE)))
			return -ENOMEM;
		getcontext(&c->uc);
		c->uc.uc_stack.ss_sp = c->stack;
		c->uc.uc_stack.ss_size = FR_STACK_SIZE;
		c->uc.uc_link = NULL;
		makecontext(&c->uc, core_main, 0);
	}
	return 0;
}

static void fr_free(struct fr *f)
{
	/* the cores' loops end (each sees the stop at its next round), then their workers */
	f->stopping = true;
	if (f->v)
		fp_rt_virtual_stop(f->v);
	for (unsigned i = 0; f->core && i < f->n; i++) {
		struct fr_core *c = &f->core[i];

		while (c->started && !c->done)
			core_resume(f, c);
		if (c->w) {
			f->cur = c;
			fp_rt_vworker_close(c->w);
			f->cur = NULL;
		}
		if (c->q)
			vq_close(&c->q->q);
		free(c->stack);
	}
	fp_rt_virtual_destroy(f->v);
	for (unsigned k = 0; f->cst && k < f->n; k++) {
		if (f->cst[k])
			fp_stack_destroy(f->cst[k]);
		wire_free(&f->to_cli[k], &f->ccache);
	}
	for (uint32_t i = 0; f->conn && i < f->cfg->flows; i++) {
		free(f->conn[i].pend);
		free(f->conn[i].out);
		free(f->conn[i].in);
	}
	if (f->kvs_open)
		kv_server_close(&f->kvs);
	if (f->sdist_set)
		qs_dist_free(&f->sdist);
	if (f->mc)
		lg_proto_memcache.destroy(f->mc);
	free(f->mc_buf);
	if (f->cpool) {
		fp_pool_cache_flush(&f->ccache);
		fp_pool_destroy(f->cpool);
	}
	free(f->cst);
	free(f->to_cli);
	free(f->conn);
	free(f->core);
	fp_spin_hook = NULL;
	F = NULL;
}

/* TCP control blocks the workers hold (their listeners included). */
static unsigned server_conns(const struct fr *f)
{
	unsigned n = 0;

	for (unsigned i = 0; i < f->n; i++)
		n += fp_rt_vworker_conns(f->core[i].w);
	return n;
}

/* One thing happens: the client's next event or the earliest core's next stretch.
 * 0, or -errno with f->err saying why (nothing can happen any more, or not before @limit);
 * the caller adds what it was waiting for. */
static int fr_step(struct fr *f, uint64_t limit)
{
	uint64_t tc = client_next(f), tb = UINT64_MAX, ti = UINT64_MAX;
	struct fr_core *best = NULL, *irq = NULL;

	if (tc != UINT64_MAX)
		tc = stall_shift(&f->cstall, tc);   /* a stalled client does nothing till its end */
	for (unsigned i = 0; i < f->n; i++) {
		struct fr_core *c = &f->core[i];
		uint64_t t = c->parked ? c->wake_at : c->clock;

		if (t != UINT64_MAX)   /* a stalled core runs when its stall ends */
			t = stall_shift(&c->stall, t);
		if (c->irq_at)
			c->irq_at = stall_shift(&c->stall, c->irq_at);
		if (t < tb) {
			tb = t;
			best = c;
		}
		if (c->irq_at && c->irq_at < ti) {
			ti = c->irq_at;
			irq = c;
		}
	}
	if (irq && ti <= tc && ti <= tb) {   /* an interrupt first: it cuts into what runs */
		core_interrupt(f, irq);
		return 0;
	}
	if (tc == UINT64_MAX && !best) {
		snprintf(f->err, sizeof(f->err), "nothing left to happen");
		return -EDEADLK;
	}
	uint64_t t = tc <= tb ? tc : tb;

	if (t > limit) {
		snprintf(f->err, sizeof(f->err), "after %.3f s of virtual time", (double)t / 1e9);
		return -ETIMEDOUT;
	}
	if (tc <= tb)
		return client_step(f, tc);
	if (best->parked) {
		best->parked = false;
		best->wake_at = UINT64_MAX;
	}
	if (tb > best->clock)
		best->clock = tb;
	core_resume(f, best);
	return 0;
}

static int fr_loop(struct fr *f)
{
	uint64_t last_arr = f->r->n_req ? f->r->req[f->r->n_req - 1].t_arr : 0;
	unsigned listeners = server_conns(f);
	size_t k;
	int rc;

	/* what it waits for goes into the error only when one happens (formatted at every
	 * step, it was half the simulator's own instructions) */
	while (f->replied < f->r->n_req) {
		if (!(rc = fr_step(f, f->t0 ? f->t0 + last_arr + FR_STALL_NS : FR_STALL_NS)))
			continue;
		k = strlen(f->err);
		snprintf(f->err + k, sizeof(f->err) - k, ", %llu of %llu replies missing%s (%llu "
			 "frames dropped for want of a buffer, %llu by the wire)",
			 (unsigned long long)(f->r->n_req - f->replied),
			 (unsigned long long)f->r->n_req,
			 f->t0 ? "" : f->preloading ? " (the keys are not all stored)" :
			 " (the connections are not all up)", (unsigned long long)f->nic_drops,
			 (unsigned long long)f->wire_drops);
		return rc;
	}
	/* Every reply is in: the client closes every connection, and the workers must let go
	 * of each (the server closes on EOF; its last ACK arrives). */
	f->end = f->now;
	for (uint32_t i = 0; i < f->cfg->flows; i++) {
		fp_tcp_close(f->cst[f->conn[i].k], f->conn[i].c);
		f->conn[i].c = NULL;
	}
	client_tx(f, f->now);
	while (server_conns(f) > listeners) {
		if (!(rc = fr_step(f, f->end + FR_STALL_NS)))
			continue;
		k = strlen(f->err);
		snprintf(f->err + k, sizeof(f->err) - k, ", %u connections the client closed are "
			 "still open on the workers", server_conns(f) - listeners);
		return rc;
	}
	f->closed = f->cfg->flows;
	return 0;
}

int vs_full(struct vs_run *r, struct vs_result *res, char *err, size_t errlen)
{
	struct fr *f = calloc(1, sizeof(*f));
	int rc;

	if (!f)
		return -ENOMEM;
	f->r = r;
	f->cfg = r->cfg;
	f->n = r->cfg->n;
	f->kv = r->cfg->app == VS_APP_KV;
	F = f;
	fp_spin_hook = fr_spin;
	if (!(rc = machine_setup(f)) && !(rc = client_setup(f)) && !(rc = client_dial(f)))
		rc = fr_loop(f);
	if (!rc) {
		r->end_ns = f->last_reply - f->t0;
		vs_collect(r, res);
		double b[FIT_K];

		fit_solve(f, b, &res->fit_r2);
		res->measured.poll_ns = b[0];
		res->measured.rx_ns = b[1];
		res->measured.tx_ns = b[2];
		res->measured.steal_ns = b[3];
		res->fit_rounds = f->fit_n;
		res->fit_stalls = f->fit_stalls;
		res->wire_drops = f->wire_drops;
		res->nic_drops = f->nic_drops;
		res->wire_delayed = f->wire_delayed;
		res->conns_closed = f->closed;
		res->busy_ns_per_req = f->replied ? f->busy_ns / (double)f->replied : 0;
		for (unsigned i = 0; i < f->n; i++)
			stall_sum(&f->core[i].stall, f->end, &res->stalls_server,
				  &res->stalls_server_ms);
		stall_sum(&f->cstall, f->end, &res->stalls_client, &res->stalls_client_ms);
		for (unsigned i = 0; i < f->n; i++) {
			const struct fp_rt_worker_stats *s = fp_rt_vworker_stats(f->core[i].w);

			res->kicks += s->ipi_sent;
			res->irqs += s->ipi_handled;
			res->steals += s->sched_stolen;
			res->frames += f->core[i].q->rx_frames;
			res->batches += s->sched_local + s->sched_stolen;   /* flows' batches run */
		}
		res->order_errors += f->bad_replies;
		res->kv_misses = f->kv_misses;
		res->app_cmds = f->kv_cmds;
		res->app_ns_per_cmd = f->kv_cmds ? (double)fp_cycles_to_ns(f->app_cycles) /
						   (double)f->kv_cmds : 0;
	}
	if (rc && err)
		snprintf(err, errlen, "%s", f->err[0] ? f->err : strerror(-rc));
	fr_free(f);
	free(f);
	return rc;
}
