/* sim.c: the simulated wire: stacks joined on a virtual clock, with seeded faults and bandwidth. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/log.h>
#include <flowplane/net.h>
#include <flowplane/sim.h>
#include <flowplane/wire.h>

/*
 * A discrete-event simulation. Each step, at virtual time now:
 *
 *   1. every frame due by now is copied into its receiver's buffers and handed over in
 *      bursts of SIM_BURST (per port, in arrival order);
 *   2. every stack runs its timers (fp_stack_poll);
 *   3. the application of each port that got frames, fired timers or asked to be woken
 *      by now is called (every application, at the first step of each fp_sim_run());
 *   4. every stack's tx queue is drained onto the wire: egress serialization, faults, and
 *      an arrival event in a binary heap keyed by (time, sequence number), so two frames
 *      due at the same instant always arrive in the order they were sent;
 *
 * then the clock jumps to the earliest next arrival, stack timer or wake-up. A frame in
 * flight is still the sender's buffer (one reference per copy in flight); the receiver's
 * copy is made on arrival, as a NIC's DMA would, and only then is the sender's freed.
 *
 * Port addresses: a port's MAC is the source address of the frames its stack sends (its
 * gratuitous ARP at creation is the first), so the wire needs no stack internals. A frame
 * to a MAC no port has used is flooded to every other port, as a switch does.
 */
#define SIM_MAX_PORTS  16
#define SIM_BURST      32
#define SIM_STALL_MAX  (1u << 22)  /* steps without the clock moving before we call it a livelock */
#define SIM_NO_BIT     UINT32_MAX
#define SIM_DROPPED    UINT64_MAX
/* Bytes a frame occupies on the wire beyond its own: preamble and SFD (8), FCS (4),
 * inter-frame gap (12); and frames shorter than 60 bytes are padded (IEEE 802.3 §4.4). */
#define SIM_WIRE_OVERHEAD 24u
#define SIM_MIN_FRAME     60u

struct sim_ev {
	uint64_t t, seq;
	struct fp_mbuf *m;     /* the sender's frame (one reference) */
	uint32_t bit;          /* bit to flip in the receiver's copy, or SIM_NO_BIT */
	uint8_t from, to;
};

struct sim_port {
	struct fp_stack *st;
	struct fp_pool_cache *cache;
	fp_sim_app_fn app;
	void *arg;
	uint64_t wake_us;              /* UINT64_MAX: only on events */
	struct fp_eth_addr mac;
	bool mac_known;
	uint64_t busy_until_us;        /* egress: when the last queued frame is on the wire */
	uint64_t *fin;                 /* egress queue: finish times, a ring of fin_cap */
	uint32_t fin_head, fin_count, fin_cap;
	struct fp_mbuf *burst[SIM_BURST];
	unsigned n_burst;
};

struct fp_sim {
	struct fp_sim_params p;
	uint64_t rng;                  /* splitmix64 state */
	uint64_t now_us;
	uint64_t seq;
	struct sim_ev *heap;
	uint32_t n_ev, cap_ev;
	struct sim_port port[SIM_MAX_PORTS];
	unsigned n_ports;
	struct fp_sim_stats stats;
};

/* ---- randomness: one splitmix64 stream (Steele, Lea, Flood 2014) ---- */

static uint64_t sim_rand(struct fp_sim *s)
{
	uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) from the top 53 bits. */
static double sim_unit(uint64_t r) { return (double)(r >> 11) * 0x1p-53; }

/* ---- the arrival heap, ordered by (t, seq) ---- */

static bool ev_before(const struct sim_ev *a, const struct sim_ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(struct fp_sim *s, const struct sim_ev *ev)
{
	if (s->n_ev == s->cap_ev) {
		uint32_t ncap = s->cap_ev ? s->cap_ev * 2 : 256;
		struct sim_ev *nh = realloc(s->heap, (size_t)ncap * sizeof(*nh));
		if (!nh)
			return -ENOMEM;
		s->heap = nh;
		s->cap_ev = ncap;
	}
	uint32_t i = s->n_ev++;
	while (i > 0 && ev_before(ev, &s->heap[(i - 1) / 2])) {
		s->heap[i] = s->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->heap[i] = *ev;
	return 0;
}

static struct sim_ev heap_pop(struct fp_sim *s)
{
	struct sim_ev top = s->heap[0], last = s->heap[--s->n_ev];
	uint32_t i = 0, n = s->n_ev;

	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && ev_before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!ev_before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n)
		s->heap[i] = last;
	return top;
}

/* ---- create / attach / destroy ---- */

static void sim_params_defaults(struct fp_sim_params *p)
{
	if (!p->reorder_us)
		p->reorder_us = 4 * p->delay_us + 10;
}

struct fp_sim *fp_sim_create(const struct fp_sim_params *p, uint64_t start_us)
{
	struct fp_sim *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (p)
		s->p = *p;
	sim_params_defaults(&s->p);
	s->rng = s->p.seed;
	s->now_us = start_us;
	return s;
}

void fp_sim_set_params(struct fp_sim *sim, const struct fp_sim_params *p)
{
	sim->p = *p;
	sim_params_defaults(&sim->p);
}

int fp_sim_attach(struct fp_sim *sim, struct fp_stack *st, struct fp_pool_cache *cache,
		  fp_sim_app_fn app, void *arg)
{
	struct sim_port *pt;

	if (sim->n_ports == SIM_MAX_PORTS)
		return -ENOSPC;
	pt = &sim->port[sim->n_ports];
	memset(pt, 0, sizeof(*pt));
	pt->st = st;
	pt->cache = cache;
	pt->app = app;
	pt->arg = arg;
	pt->wake_us = app ? 0 : UINT64_MAX; /* the application starts at the first step */
	return (int)sim->n_ports++;
}

void fp_sim_destroy(struct fp_sim *sim)
{
	if (!sim)
		return;
	for (uint32_t i = 0; i < sim->n_ev; i++)
		fp_mbuf_free(sim->port[sim->heap[i].from].cache, sim->heap[i].m);
	for (unsigned i = 0; i < sim->n_ports; i++) {
		struct sim_port *pt = &sim->port[i];
		for (unsigned j = 0; j < pt->n_burst; j++)
			fp_mbuf_free(pt->cache, pt->burst[j]);
		free(pt->fin);
	}
	free(sim->heap);
	free(sim);
}

uint64_t fp_sim_now(const struct fp_sim *sim) { return sim->now_us; }

void fp_sim_stats(const struct fp_sim *sim, struct fp_sim_stats *out) { *out = sim->stats; }

/* ---- egress: serialization and the tail-drop queue ---- */

/* Frames of @pt not yet fully on the wire at @now. */
static uint32_t egress_backlog(struct sim_port *pt, uint64_t now)
{
	while (pt->fin_count && pt->fin[pt->fin_head] <= now) {
		pt->fin_head = (pt->fin_head + 1) & (pt->fin_cap - 1);
		pt->fin_count--;
	}
	return pt->fin_count;
}

static int egress_push(struct sim_port *pt, uint64_t finish)
{
	if (pt->fin_count == pt->fin_cap) {
		uint32_t ncap = pt->fin_cap ? pt->fin_cap * 2 : 64;
		uint64_t *nf = malloc((size_t)ncap * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		for (uint32_t i = 0; i < pt->fin_count; i++)
			nf[i] = pt->fin[(pt->fin_head + i) & (pt->fin_cap - 1)];
		free(pt->fin);
		pt->fin = nf;
		pt->fin_head = 0;
		pt->fin_cap = ncap;
	}
	pt->fin[(pt->fin_head + pt->fin_count++) & (pt->fin_cap - 1)] = finish;
	return 0;
}

/* When the last bit of a @len-byte frame sent now leaves @pt; SIM_DROPPED when tail-dropped. */
static uint64_t egress_finish(struct fp_sim *s, struct sim_port *pt, uint32_t len)
{
	uint64_t bps = s->p.bandwidth_bps, start, bits;

	if (!bps)
		return s->now_us;
	if (s->p.queue_frames && egress_backlog(pt, s->now_us) >= s->p.queue_frames)
		return SIM_DROPPED;
	start = pt->busy_until_us > s->now_us ? pt->busy_until_us : s->now_us;
	bits = 8ull * ((len < SIM_MIN_FRAME ? SIM_MIN_FRAME : len) + SIM_WIRE_OVERHEAD);
	/* Round up: a frame is never received before its last bit could have arrived. */
	pt->busy_until_us = start + (bits * 1000000 + bps - 1) / bps;
	if (egress_push(pt, pt->busy_until_us))
		return SIM_DROPPED;
	return pt->busy_until_us;
}

/* ---- faults and scheduling ---- */

/*
 * Decide one copy's fate and schedule it. The draws are always the same six, in the
 * order loss, corrupt, corrupt bit, duplicate, reorder, jitter, whatever the outcome, so
 * changing one probability does not shift the others' decisions.
 */
static void sim_schedule(struct fp_sim *s, struct fp_mbuf *m, uint8_t from, uint8_t to,
			 uint64_t finish)
{
	uint64_t r[6];
	struct sim_ev ev = { .m = m, .from = from, .to = to, .bit = SIM_NO_BIT };
	unsigned copies = 1;

	for (unsigned i = 0; i < 6; i++)
		r[i] = sim_rand(s);
	if (sim_unit(r[0]) < s->p.loss) {
		s->stats.lost++;
		return;
	}
	if (sim_unit(r[1]) < s->p.corrupt && m->pkt_len) {
		ev.bit = (uint32_t)(r[2] % (8ull * m->pkt_len));
		s->stats.corrupted++;
	}
	if (sim_unit(r[3]) < s->p.duplicate) {
		copies = 2;
		s->stats.duplicated++;
	}
	ev.t = finish + s->p.delay_us;
	if (sim_unit(r[4]) < s->p.reorder) {
		ev.t += s->p.reorder_us;
		s->stats.reordered++;
	}
	if (s->p.jitter_us)
		ev.t += r[5] % ((uint64_t)s->p.jitter_us + 1);
	for (unsigned c = 0; c < copies; c++) {
		ev.seq = s->seq++;
		fp_mbuf_ref(m);
		if (heap_push(s, &ev)) {
			fp_mbuf_free(s->port[from].cache, m);
			s->stats.nobufs++;
		}
	}
}

/* Put one frame from port @from on the wire; consumes it. */
static void sim_send(struct fp_sim *s, unsigned from, struct fp_mbuf *m)
{
	struct sim_port *pt = &s->port[from];
	struct fp_eth_addr dst, src;
	uint8_t hdr[2 * FP_ETH_ALEN];
	uint64_t finish;

	s->stats.frames++;
	s->stats.bytes += m->pkt_len;
	if (fp_mbuf_read(m, 0, hdr, sizeof(hdr)) < sizeof(hdr))
		goto out; /* not even addresses: nothing a NIC would send */
	memcpy(dst.b, hdr, FP_ETH_ALEN);
	memcpy(src.b, hdr + FP_ETH_ALEN, FP_ETH_ALEN);
	pt->mac = src;
	pt->mac_known = true;
	if ((finish = egress_finish(s, pt, m->pkt_len)) == SIM_DROPPED) {
		s->stats.queue_drops++;
		goto out;
	}
	int unicast_to = -1;
	for (unsigned i = 0; i < s->n_ports && !fp_eth_addr_is_multicast(&dst); i++)
		if (i != from && s->port[i].mac_known && fp_eth_addr_eq(&s->port[i].mac, &dst))
			unicast_to = (int)i;
	for (unsigned i = 0; i < s->n_ports; i++)
		if (i != from && (unicast_to < 0 || (unsigned)unicast_to == i))
			sim_schedule(s, m, (uint8_t)from, (uint8_t)i, finish);
out:
	fp_mbuf_free(pt->cache, m);
}

static void sim_drain_tx(struct fp_sim *s)
{
	struct fp_mbuf *out[SIM_BURST];

	for (unsigned i = 0; i < s->n_ports; i++) {
		unsigned n;
		while ((n = fp_stack_tx(s->port[i].st, out, SIM_BURST)) > 0)
			for (unsigned j = 0; j < n; j++)
				sim_send(s, i, out[j]);
	}
}

/* ---- delivery ---- */

static void sim_flush(struct fp_sim *s, struct sim_port *pt)
{
	if (pt->n_burst) {
		fp_stack_input(pt->st, pt->burst, pt->n_burst, s->now_us);
		pt->n_burst = 0;
	}
}

/* Copy an arrived frame into its receiver's buffer (the NIC's DMA) and free the sender's. */
static void sim_arrive(struct fp_sim *s, const struct sim_ev *ev)
{
	struct sim_port *to = &s->port[ev->to];
	struct fp_mbuf *m = ev->m, *r = fp_pool_get(to->cache);
	uint8_t *p = r ? fp_mbuf_append(r, m->pkt_len) : NULL;

	if (!p) {
		s->stats.nobufs++;
		if (r)
			fp_mbuf_free(to->cache, r);
	} else {
		fp_mbuf_read(m, 0, p, m->pkt_len);
		if (ev->bit != SIM_NO_BIT)
			p[ev->bit / 8] ^= (uint8_t)(1u << (ev->bit % 8));
		r->rx_ts_ns = s->now_us * 1000;
		r->port = ev->to;
		s->stats.delivered++;
		to->burst[to->n_burst++] = r;
		if (to->n_burst == SIM_BURST)
			sim_flush(s, to);
	}
	fp_mbuf_free(s->port[ev->from].cache, m);
}

/* Deliver everything due by now; returns a bit per port that received frames. */
static uint32_t sim_deliver_due(struct fp_sim *s)
{
	uint32_t got = 0;

	while (s->n_ev && s->heap[0].t <= s->now_us) {
		struct sim_ev ev = heap_pop(s);
		got |= 1u << ev.to;
		sim_arrive(s, &ev);
	}
	for (unsigned i = 0; i < s->n_ports; i++)
		sim_flush(s, &s->port[i]);
	return got;
}

/* ---- the loop ---- */

/* One step at now; @active starts with the ports whose application must run regardless. */
static void sim_step(struct fp_sim *s, uint32_t active)
{
	active |= sim_deliver_due(s);

	for (unsigned i = 0; i < s->n_ports; i++)
		if (fp_stack_poll(s->port[i].st, s->now_us))
			active |= 1u << i;
	for (unsigned i = 0; i < s->n_ports; i++) {
		struct sim_port *pt = &s->port[i];
		if (pt->app && ((active >> i & 1) || pt->wake_us <= s->now_us))
			pt->wake_us = pt->app(pt->st, pt->arg, s->now_us);
	}
	sim_drain_tx(s);
}

/* The earliest time anything happens next; UINT64_MAX when nothing will. */
static uint64_t sim_next_us(const struct fp_sim *s)
{
	uint64_t next = s->n_ev ? s->heap[0].t : UINT64_MAX;

	for (unsigned i = 0; i < s->n_ports; i++) {
		uint64_t t = fp_stack_next_us(s->port[i].st);
		if (t < next)
			next = t;
		if (s->port[i].app && s->port[i].wake_us < next)
			next = s->port[i].wake_us;
	}
	return next;
}

uint64_t fp_sim_run(struct fp_sim *sim, uint64_t until_us, bool (*done)(void *arg), void *arg)
{
	uint32_t stalled = 0, first = UINT32_MAX;

	/* Every application runs at the first step of a run, so that a caller may change
	 * what one does between runs (fp_sim_app_fn has no other way to be told). */
	while (sim->now_us <= until_us) {
		sim_step(sim, first);
		first = 0;
		if (done && done(arg))
			break;
		uint64_t next = sim_next_us(sim);
		if (next == UINT64_MAX)
			break; /* nothing left to happen */
		if (next > until_us) {
			sim->now_us = until_us;
			break;
		}
		if (next > sim->now_us) {
			sim->now_us = next;
			stalled = 0;
		} else if (++stalled == SIM_STALL_MAX) {
			log_err("sim: no progress at t=%llu us after %u steps: livelock, stopping",
				(unsigned long long)sim->now_us, stalled);
			break;
		}
	}
	return sim->now_us;
}
