/* steer.c: IX's flow groups where the device cannot steer: a flow's home worker from the Toeplitz hash of its 4-tuple, and the hand-over rings between workers. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/dev.h>
#include <flowplane/net.h>
#include <flowplane/ring.h>
#include <flowplane/rss.h>
#include <flowplane/wire.h>

#include "defs.h"

/*
 * IX (OSDI'14 §4.4) gives every flow a home: the NIC hashes the 4-tuple (Toeplitz), the
 * low bits pick one of 128 flow groups, and an indirection table maps groups to queues,
 * one queue per core. A veth (or virtio without multiqueue, or any NIC that cannot take
 * our table) delivers a frame on whatever queue its sender chose: a Linux client's
 * socket keeps one tx queue, picked by XPS or its own hash, not ours. So each worker
 * recomputes the hash of what it receives and hands a frame of another worker's group to
 * that worker through a ring of mbuf pointers, one single-producer ring per ordered pair
 * of workers.
 *
 * No copy: the receiving worker's stack owns the frame from then on; when it lets go,
 * the buffer returns to its own pool (fp_pool_put sends a foreign buffer to its pool's
 * depot, under that pool's lock). The transmit side already copies a foreign buffer into
 * its own UMEM (dev/af_xdp.c). That is why no queue may close while another worker's
 * stack can still hold its buffers: the queues close here, after every worker has
 * stopped (rt_steer_destroy, once the threads are joined).
 *
 * One flow's frames keep their order: they all arrive on one queue (one sender socket,
 * one tx queue) and go through one FIFO ring. ARP is the one process-wide fact: every
 * stack on the address must learn a neighbour another worker heard, so an ARP frame is
 * handled where it arrived and a copy goes to every other worker to learn from
 * (fp_stack_arp_learn, which never answers).
 *
 * Groups move between workers (IX's flow-group migration, rt_steer_moves below): the old
 * owner A marks the group's entry "moving to B" (one store), takes the group's TCP
 * connections out of its stack between two rounds (fp_stack_tcp_export), lets the
 * application move its per-flow entries (fp_app.flow_leave), and sends B one message
 * through the A->B ring with the connections and the returns of the calls A executed for
 * them last. Meanwhile every frame of the group goes to B, which holds it; a frame A
 * still finds on its way to itself (from a ring) it forwards to B. B takes the message
 * in order with the frames on that ring, adopts the connections (fp_stack_tcp_import,
 * flow_arrive), clears the mark, and passes the held frames up: nothing dropped, and no
 * flow's frames reordered, which takes two more rules.
 *
 * A flow's frames all arrive on one queue, X's; before X sees the switch they go X->A,
 * after it X->B. So A must have taken (and forwarded to B) everything X sent it before
 * X saw the switch, before A sends the message: each switch bumps an epoch, and every
 * worker, at the start of a round that finds a new epoch, puts a fence carrying it in
 * each of its rings; A sends the message only once it has taken, from every other
 * worker, a fence of the switch's epoch or later. And B, at the message, passes up first
 * what it held from A's ring (the older frames A forwarded), then the rest.
 *
 * The key is the symmetric one (rss.h): a frame and its reply hash alike, so a stack that
 * picks an ephemeral port whose group is its own (net.h's steer_table) gets the replies
 * home, and fp-loadgen with the same table and as many workers sends each flow on the
 * queue of the server worker that owns it, as a NIC's RSS would.
 */
#define RT_STEER_RING  1024     /* frames in flight from one worker to another */
#define RT_STEER_LEARN 1ul      /* tag on a ring entry: an ARP copy to learn from */
#define RT_STEER_MSG   2ul      /* tag on a ring entry: a group arriving (struct rt_move) */
#define RT_STEER_FENCE 3ul      /* tag on a ring entry: (epoch << 2) | 3, see below */
#define RT_STEER_TAGS  3ul
#define RT_STEER_QUEUE (1ull << 63) /* on a fence-tagged entry: a queue handed over, below */
#define RT_STEER_HOLD  4096     /* frames a worker holds for groups on their way to it */
#define RT_MOVING      FP_RT_GROUP_MOVING
#define RT_OWNER_MASK  0x7fffu

/* A group on its way from one worker to another: what the old owner sends. */
struct rt_move {
	unsigned group, from;
	uint64_t t0_ns;                /* when the old owner switched the table */
	struct fp_tcp_conn *chain;     /* fp_stack_tcp_export's */
	unsigned n_conns;
	unsigned n_flows;              /* flows the application was told about */
	struct rt_move_flow { struct fp_flow *flow; uint64_t cookie; } *flows;
	unsigned n_rets;               /* returns of calls for these flows, not yet seen */
	struct fp_call *rets;
};

struct rt_steer_wk {
	atomic_int sleeping;          /* in poll(): a producer must write @efd */
	int efd;                      /* eventfd, in the worker's poll set */
	struct fp_devq *qs[RT_QUEUES_MAX]; /* its queue, then the interface's spare ones it
				       * polls too (rt_steer_own): what it lends when parked;
				       * closed by rt_steer_destroy */
	unsigned n_qs;
	uint64_t tally[4];            /* out, in, drop, rx frames: the worker's last word */
	atomic_uint req;              /* a move asked of this worker (the group's owner):
				       * (group << 16 | to) + 1, 0 for none; cleared once the
				       * table shows it (rt_steer_park relies on that order) */
	atomic_uint parked;           /* the control plane parked it: no groups, no polling */
	atomic_uint holder;           /* the worker that holds (polls) this worker's queue now:
				       * itself, or the one it was lent to (set by the taker) */
	atomic_uint home;             /* its queue is its own to poll: cleared by the worker
				       * as it sends it away, set as it takes it back; a move
				       * to it waits for it (a group's message must find a
				       * stack that runs) */
	/* only the worker touches what follows */
	uint64_t hands;               /* the queues it holds, bit i for worker i's */
	bool hands_unsent;            /* a queue it must hand on found the ring full */
	uint32_t seen_park_gen;       /* the parks and unparks its hands reflect */
	uint32_t move_req;            /* the move it is doing, as @req; 0: none */
	struct rt_move *move_msg;     /* built, not yet sent (the ring was full) */
	uint64_t move_t0;             /* when it switched the table for move_req */
	uint32_t move_epoch;          /* the epoch its switch for move_req began */
	uint32_t seen_epoch;          /* the last epoch it fenced all its rings for */
	uint32_t fence_from[FP_RT_MAX_WORKERS]; /* highest fence taken from each worker */
	unsigned n_hold;              /* frames held for groups on their way here */
	struct fp_mbuf *hold[RT_STEER_HOLD];
	uint8_t hold_g[RT_STEER_HOLD];
	uint8_t hold_src[RT_STEER_HOLD]; /* the ring it came from; RT_HOLD_OWN: our queue */
} fp_aligned_cache;

#define RT_HOLD_OWN 0xffu

struct rt_steer {
	unsigned n;
	struct fp_rss rss;
	uint16_t table[FP_RSS_GROUPS]; /* group -> worker, RT_MOVING while it moves there;
					* written by the old owner and then the new one */
	struct fp_ring **rings;       /* [src * n + dst]: src produces, dst consumes */
	struct rt_steer_wk *wk;
	uint16_t *shown;              /* the stats header's copy of the table, or NULL */
	atomic_uint epoch;            /* bumped by each switch of a group (see fences) */
	atomic_uint park_gen;         /* bumped by each park and unpark (see lending) */
	atomic_uint looping;          /* workers inside their loop (see rt_steer_loop) */
	bool lend;                    /* a parked worker's queue is polled by another (default) */
	uint64_t secret;              /* every stack's (ISNs, SYN cookies): a connection that
				       * moves, or a cookie's ACK arriving after its group moved,
				       * must check out on any worker */
};

int rt_steer_classify(const struct fp_rss *rss, const uint8_t *p, uint32_t len)
{
	struct fp_eth eth;
	struct fp_ipv4 ip;

	if (fp_eth_parse(p, len, &eth) || eth.n_vlan)
		return RT_STEER_HERE;
	if (eth.type == FP_ETH_TYPE_ARP)
		return RT_STEER_ARP;
	if (eth.type != FP_ETH_TYPE_IPV4)
		return RT_STEER_HERE;
	p += eth.hdr_len;
	len -= eth.hdr_len;
	/* The stack checks everything else; a frame it will drop may go anywhere. Fragments
	 * and protocols without ports stay where they arrived. */
	if (fp_ipv4_parse(p, len, false, &ip) || fp_ipv4_is_fragment(&ip) ||
	    (ip.proto != FP_IPPROTO_TCP && ip.proto != FP_IPPROTO_UDP) || ip.total_len < ip.hdr_len + 4u)
		return RT_STEER_HERE;
	uint16_t sport, dport;
	memcpy(&sport, p + ip.hdr_len, 2);
	memcpy(&dport, p + ip.hdr_len + 2, 2);
	return (int)fp_rss_group(fp_rss_ipv4_l4(rss, htonl(ip.src), htonl(ip.dst), sport, dport));
}

void rt_steer_first_table(const struct fp_rt_config *cfg, uint16_t table[])
{
	unsigned n = cfg->n_workers, total = 0;

	/* No weights: group g to worker g % n (ethtool -X equal). Weights (ethtool -X
	 * weight): contiguous blocks of groups, each worker's in proportion to its weight. */
	for (unsigned i = 0; i < n; i++)
		total += cfg->n_steer_weights ? cfg->steer_weights[i] : 1;
	for (unsigned g = 0, k = 0; g < FP_RSS_GROUPS; g++) {
		if (!cfg->n_steer_weights) {
			table[g] = (uint16_t)(g % n);
			continue;
		}
		/* the (k+1)-th worker with weight takes groups while g < its cumulative share */
		unsigned cum = 0;
		for (k = 0; k < n; k++) {
			cum += cfg->steer_weights[k];
			if ((uint64_t)g * total < (uint64_t)cum * FP_RSS_GROUPS)
				break;
		}
		table[g] = (uint16_t)k;
	}
}

int rt_steer_create(struct rt_run *run, char *err, size_t errlen)
{
	const struct fp_rt_config *cfg = run->cfg;
	unsigned n = cfg->n_workers;
	struct rt_steer *s = calloc(1, sizeof(*s));

	if (!s || !(s->rings = calloc((size_t)n * n, sizeof(*s->rings))) ||
	    !(s->wk = aligned_alloc(FP_CACHE_LINE, n * sizeof(*s->wk))))
		goto nomem;
	s->n = n;
	fp_rss_init(&s->rss, fp_rss_key_symmetric);
	while (!s->secret)
		if (getrandom(&s->secret, sizeof(s->secret), 0) != (ssize_t)sizeof(s->secret))
			s->secret = 0;
	memset(s->wk, 0, n * sizeof(*s->wk));
	s->lend = cfg->park_queue != FP_PARK_QUEUE_KEEP;
	for (unsigned i = 0; i < n; i++) {
		s->wk[i].efd = -1;
		s->wk[i].hands = 1ull << i;
		atomic_init(&s->wk[i].holder, i);
		atomic_init(&s->wk[i].home, 1);
	}
	rt_steer_first_table(cfg, s->table);
	if (run->stats_hdr) {
		s->shown = run->stats_hdr->groups;
		run->stats_hdr->n_groups = FP_RSS_GROUPS;
		for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
			s->shown[g] = s->table[g];
	}
	for (unsigned i = 0; i < n; i++) {
		if ((s->wk[i].efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
			snprintf(err, errlen, "eventfd: %s", strerror(errno));
			run->steer = s;
			rt_steer_destroy(run);
			return -errno;
		}
		for (unsigned j = 0; j < n; j++)
			if (i != j && !(s->rings[i * n + j] = fp_ring_create(RT_STEER_RING)))
				goto nomem;
	}
	run->steer = s;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory for the hand-over rings of %u workers", n);
	run->steer = s;
	rt_steer_destroy(run);
	return -ENOMEM;
}

static void move_free(struct rt_move *mv, struct fp_pool_cache *c)
{
	if (c)
		fp_tcp_chain_free(mv->chain, c);
	free(mv->flows);
	free(mv->rets);
	free(mv);
}

void rt_steer_destroy(struct rt_run *run)
{
	struct rt_steer *s = run->steer;

	if (!s)
		return;
	run->steer = NULL;
	/* Every worker has stopped (the threads are joined): free what is still in flight
	 * into its own pool, then close the queues, whose pools are now whole. */
	for (unsigned i = 0; s->rings && i < s->n * s->n; i++) {
		void *m;
		while (s->rings[i] && fp_ring_dequeue_burst(s->rings[i], &m, 1)) {
			struct fp_devq *src = s->wk[i / s->n].n_qs ? s->wk[i / s->n].qs[0] : NULL;
			uintptr_t tag = (uintptr_t)m & RT_STEER_TAGS;
			if (tag == RT_STEER_FENCE)
				continue;   /* a fence, or a queue handed over: nothing to free */
			if (tag == RT_STEER_MSG) {
				/* a group sent as the run stopped: its connections go with it */
				move_free((struct rt_move *)((uintptr_t)m & ~RT_STEER_TAGS),
					  src ? &src->cache : NULL);
				continue;
			}
			struct fp_mbuf *mb = (struct fp_mbuf *)((uintptr_t)m & ~RT_STEER_TAGS);
			if (src)
				fp_mbuf_free(&src->cache, mb);
		}
		free(s->rings[i]);
	}
	for (unsigned i = 0; s->wk && i < s->n; i++) {
		for (unsigned k = 0; k < s->wk[i].n_qs; k++)
			s->wk[i].qs[k]->ops->close(s->wk[i].qs[k]);
		if (s->wk[i].efd >= 0)
			close(s->wk[i].efd);
	}
	free(s->rings);
	free(s->wk);
	free(s);
}

const uint16_t *rt_steer_table(const struct rt_steer *s) { return s->table; }

uint64_t rt_steer_secret(const struct rt_steer *s) { return s->secret; }

void rt_steer_own(struct rt_steer *s, unsigned worker, struct fp_devq *q)
{
	struct rt_steer_wk *w = &s->wk[worker];

	w->qs[w->n_qs++] = q;   /* the caller keeps to RT_QUEUES_MAX */
}

void rt_steer_tally(struct rt_steer *s, unsigned worker, const struct fp_rt_worker_stats *st)
{
	uint64_t *t = s->wk[worker].tally;

	t[0] = st->steer_out;
	t[1] = st->steer_in;
	t[2] = st->steer_drop;
	t[3] = st->rx_frames;
}

void rt_steer_totals(const struct rt_steer *s, uint64_t out[4])
{
	memset(out, 0, 4 * sizeof(*out));
	for (unsigned i = 0; i < s->n; i++)
		for (unsigned k = 0; k < 4; k++)
			out[k] += s->wk[i].tally[k];
}

int rt_steer_wake_fd(const struct rt_steer *s, unsigned worker) { return s->wk[worker].efd; }

/* Tell a sleeping worker that frames wait for it. The release of the ring's tail and
 * this fence pair with rt_steer_sleep_prepare's store and fence (Dekker): either the
 * producer sees it sleeping, or it sees the frames. */
static void wake(struct rt_steer *s, uint64_t touched)
{
	atomic_thread_fence(memory_order_seq_cst);
	while (touched) {
		unsigned d = (unsigned)__builtin_ctzll(touched);
		touched &= touched - 1;
		if (atomic_load_explicit(&s->wk[d].sleeping, memory_order_relaxed)) {
			uint64_t one = 1;
			if (write(s->wk[d].efd, &one, sizeof(one)) < 0) {
				/* the counter cannot overflow in practice; the worker wakes anyway */
			}
		}
	}
}

/* An ARP frame: a copy to every other worker, to learn from. Out of buffers or ring room,
 * a worker misses it and learns on the neighbour's next frame or asks itself. */
static void share_arp(struct rt_steer *s, unsigned me, struct fp_pool_cache *c,
		      const struct fp_mbuf *m, uint64_t *touched)
{
	for (unsigned d = 0; d < s->n; d++) {
		struct fp_mbuf *copy;
		if (d == me || m->next || !(copy = fp_pool_get(c)))
			continue;
		memcpy(fp_mbuf_data(copy), fp_mbuf_data(m), m->data_len);
		copy->data_len = copy->pkt_len = m->data_len;
		void *tagged = (void *)((uintptr_t)copy | RT_STEER_LEARN);
		if (fp_ring_sp_enqueue_burst(s->rings[me * s->n + d], &tagged, 1) == 1)
			*touched |= 1ull << d;
		else
			fp_mbuf_free(c, copy);
	}
}

/* Hold @m (of group @g, on its way here, from ring @src or RT_HOLD_OWN) until the group
 * arrives; false when full. */
static bool hold(struct rt_steer_wk *w, struct fp_mbuf *m, unsigned g, unsigned src)
{
	if (w->n_hold == RT_STEER_HOLD)
		return false;
	w->hold[w->n_hold] = m;
	w->hold_src[w->n_hold] = (uint8_t)src;
	w->hold_g[w->n_hold++] = (uint8_t)g;
	return true;
}

/* Hand @m to worker @d; a full ring drops it (a loss TCP repairs). */
static void hand(struct rt_steer *s, unsigned me, unsigned d, struct fp_pool_cache *c,
		 struct fp_mbuf *m, uint64_t *touched, uint64_t *counter,
		 struct fp_rt_worker_stats *st)
{
	void *p = m;

	if (fp_ring_sp_enqueue_burst(s->rings[me * s->n + d], &p, 1) == 1) {
		*touched |= 1ull << d;
		(*counter)++;
	} else {
		fp_mbuf_free(c, m);
		st->steer_drop++;
	}
}

/* Where a frame of @g goes from worker @me: 0 keep, 1 hold, 2 hand to *@d. */
static int route(const struct rt_steer *s, unsigned me, int g, unsigned *d)
{
	if (g < 0)
		return 0;
	unsigned e = __atomic_load_n(&s->table[g], __ATOMIC_ACQUIRE), o = e & RT_OWNER_MASK;
	if (o >= s->n)
		return 0;
	if (o != me) {
		*d = o;
		return 2;
	}
	return (e & RT_MOVING) ? 1 : 0;
}

unsigned rt_steer_rx(struct rt_steer *s, unsigned me, struct fp_pool_cache *c,
		     struct fp_mbuf **rx, unsigned n, struct fp_rt_worker_stats *st)
{
	uint64_t touched = 0;
	unsigned kept = 0, d = 0;

	for (unsigned i = 0; i < n; i++) {
		struct fp_mbuf *m = rx[i];
		int g = m->next ? RT_STEER_HERE
				: rt_steer_classify(&s->rss, fp_mbuf_data(m), m->data_len);

		if (g == RT_STEER_ARP)
			share_arp(s, me, c, m, &touched);
		switch (route(s, me, g, &d)) {
		case 0:
			rx[kept++] = m;
			break;
		case 1:
			if (hold(&s->wk[me], m, (unsigned)g, RT_HOLD_OWN)) {
				st->move_held++;
			} else {
				fp_mbuf_free(c, m);
				st->steer_drop++;
			}
			break;
		default:
			hand(s, me, d, c, m, &touched, &st->steer_out, st);
			break;
		}
	}
	if (touched)
		wake(s, touched);
	return kept;
}

/* The group of @mv arrives here: adopt its connections and returns, then pass up what
 * was held for it, in the order it came. */
static void arrive(struct rt_steer *s, unsigned me, struct fp_ctx *ctx, struct fp_stack *stack,
		   struct rt_move *mv, uint64_t now, struct fp_rt_worker_stats *st)
{
	const struct fp_app *app = ctx->run->app;
	struct rt_steer_wk *w = &s->wk[me];
	unsigned kept = 0, n = 0;
	struct fp_mbuf *up[64];

	fp_stack_tcp_import(stack, mv->chain);
	for (unsigned i = 0; i < mv->n_flows; i++)
		if (app->flow_arrive)
			app->flow_arrive(ctx, mv->flows[i].flow, mv->flows[i].cookie);
	if (mv->n_rets) {
		rt_reserve((void **)&ctx->rets, &ctx->cap_rets, ctx->n_rets + mv->n_rets,
			   sizeof(*ctx->rets));
		memcpy(ctx->rets + ctx->n_rets, mv->rets, mv->n_rets * sizeof(*mv->rets));
		ctx->n_rets += mv->n_rets;
	}
	__atomic_store_n(&s->table[mv->group], (uint16_t)me, __ATOMIC_RELEASE);
	if (s->shown)
		__atomic_store_n(&s->shown[mv->group], (uint16_t)me, __ATOMIC_RELAXED);
	/* what came through the old owner (older: it forwarded it) first, then the rest */
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < w->n_hold; i++) {
			if (w->hold_g[i] != mv->group || (w->hold_src[i] == mv->from) != !pass)
				continue;
			up[n++] = w->hold[i];
			w->hold[i] = NULL;
			if (n == FP_ARRAY_SIZE(up)) {
				fp_stack_input(stack, up, n, now);
				n = 0;
			}
		}
	}
	if (n)
		fp_stack_input(stack, up, n, now);
	for (unsigned i = 0; i < w->n_hold; i++) {
		if (!w->hold[i])
			continue;
		w->hold[kept] = w->hold[i];
		w->hold_src[kept] = w->hold_src[i];
		w->hold_g[kept++] = w->hold_g[i];
	}
	w->n_hold = kept;
	uint64_t ns = rt_unix_ns() - mv->t0_ns;
	st->moves_in++;
	st->move_conns += mv->n_conns;
	st->move_ns += ns;
	if (ns > st->move_ns_max)
		st->move_ns_max = ns;
	mv->chain = NULL;
	move_free(mv, NULL);
}

/* Worker @j's queue arrives at @me (lent, passed on, or back home): held from now on;
 * rt_steer_hands decides at once whether it stays. */
static void q_arrive(struct rt_steer *s, unsigned me, unsigned j,
		     struct fp_rt_worker_stats *st)
{
	struct rt_steer_wk *w = &s->wk[me];

	if (j >= s->n)
		return;
	w->hands |= 1ull << j;
	w->hands_unsent = true;
	atomic_store_explicit(&s->wk[j].holder, me, memory_order_release);
	if (j == me) {
		atomic_store_explicit(&w->home, 1, memory_order_release);
		st->q_back++;
	}
	else
		st->q_adopted++;
}

unsigned rt_steer_take(struct rt_steer *s, unsigned me, struct fp_ctx *ctx,
		       struct fp_stack *stack, struct fp_pool_cache *c, struct fp_mbuf **out,
		       unsigned max, uint64_t now, struct fp_rt_worker_stats *st)
{
	struct rt_steer_wk *w = &s->wk[me];
	uint64_t touched = 0;
	unsigned got = 0, d = 0;

	/* A group switched since our last round: everything we handed anyone before now
	 * used the old table. Say so in every ring (see the fences above). */
	uint32_t e = atomic_load_explicit(&s->epoch, memory_order_acquire);
	if (e != w->seen_epoch) {
		void *fence = (void *)(uintptr_t)(((uintptr_t)e << 2) | RT_STEER_FENCE);
		bool all = true;
		for (unsigned y = 0; y < s->n; y++)
			if (y != me) {
				if (fp_ring_sp_enqueue_burst(s->rings[me * s->n + y], &fence, 1) == 1)
					touched |= 1ull << y;
				else
					all = false;   /* full: again next round (a fence twice is harmless) */
			}
		if (all)
			w->seen_epoch = e;
	}
	for (unsigned k = 1; k < s->n && got < max; k++) {
		unsigned src = (me + k) % s->n;   /* start after us: no worker always first */
		struct fp_ring *r = s->rings[src * s->n + me];
		void *in[64];
		unsigned want = max - got < FP_ARRAY_SIZE(in) ? max - got : FP_ARRAY_SIZE(in);
		unsigned n = fp_ring_dequeue_burst(r, in, want);

		for (unsigned i = 0; i < n; i++) {
			uintptr_t tag = (uintptr_t)in[i] & RT_STEER_TAGS;
			struct fp_mbuf *m = (struct fp_mbuf *)((uintptr_t)in[i] & ~RT_STEER_TAGS);
			if (tag == RT_STEER_FENCE && ((uintptr_t)in[i] & RT_STEER_QUEUE)) {
				q_arrive(s, me, (unsigned)(((uintptr_t)in[i] >> 2) & 0xffff), st);
				continue;
			}
			if (tag == RT_STEER_FENCE) {
				uint32_t fe = (uint32_t)((uintptr_t)in[i] >> 2);
				if ((int32_t)(fe - w->fence_from[src]) > 0)
					w->fence_from[src] = fe;
				continue;
			}
			if (tag == RT_STEER_LEARN) {
				if (stack)
					fp_stack_arp_learn(stack, m);
				fp_mbuf_free(c, m);
				continue;
			}
			if (tag == RT_STEER_MSG) {
				/* what came before it goes up first, then what was held for the
				 * group, then what follows it */
				if (got)
					fp_stack_input(stack, out, got, now);
				got = 0;
				arrive(s, me, ctx, stack, (struct rt_move *)(void *)m, now, st);
				continue;
			}
			st->steer_in++;
			/* Its group may have moved on since it was handed here. */
			int g = m->next ? RT_STEER_HERE
					: rt_steer_classify(&s->rss, fp_mbuf_data(m), m->data_len);
			switch (stack ? route(s, me, g, &d) : 0) {
			case 0:
				out[got++] = m;
				break;
			case 1:
				if (hold(&s->wk[me], m, (unsigned)g, src)) {
					st->move_held++;
				} else {
					fp_mbuf_free(c, m);
					st->steer_drop++;
				}
				break;
			default:
				hand(s, me, d, c, m, &touched, &st->move_forwarded, st);
				break;
			}
		}
	}
	if (touched)
		wake(s, touched);
	return got;
}

/* --notify ipi, inside the signal handler (rt/ipi.c): what other workers handed us,
 * taken from each ring's head only while it is a plain frame of a group we own and that is
 * not moving, which @stack can take without allocating (fp_stack_quiet_frame); the first
 * anything else stops that ring (*@stuck), and it and what follows stay there, in order,
 * for rt_steer_take. */
unsigned rt_steer_take_quiet(struct rt_steer *s, unsigned me, struct fp_stack *stack,
			     struct fp_mbuf **out, unsigned max, bool *stuck,
			     struct fp_rt_worker_stats *st)
{
	unsigned got = 0, d = 0;

	for (unsigned k = 1; k < s->n && got < max; k++) {
		struct fp_ring *r = s->rings[((me + k) % s->n) * s->n + me];
		void *in[64];
		unsigned want = max - got < FP_ARRAY_SIZE(in) ? max - got : FP_ARRAY_SIZE(in);
		unsigned n = fp_ring_peek_burst(r, in, want), i;

		for (i = 0; i < n; i++) {
			struct fp_mbuf *m = in[i];

			if (((uintptr_t)in[i] & RT_STEER_TAGS) || m->next ||
			    route(s, me, rt_steer_classify(&s->rss, fp_mbuf_data(m), m->data_len),
				  &d) != 0 ||
			    !fp_stack_quiet_frame(stack, m))
				break;
			out[got++] = m;
		}
		fp_ring_skip(r, i);
		st->steer_in += i;
		*stuck |= i < n;
	}
	return got;
}

/* Frames and messages other workers handed @w that it has not taken (a hint: racy). */
bool rt_steer_waiting(const struct rt_steer *s, unsigned w)
{
	for (unsigned src = 0; src < s->n; src++)
		if (src != w && fp_ring_count(s->rings[src * s->n + w]))
			return true;
	return false;
}

/* ---- moving a group: the old owner's side ---- */

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

	return x < y ? -1 : x > y;
}

/* The message for B: the connections, the flows the application holds or has returns
 * for (told flow_leave here), and those returns, taken out of ctx->rets. */
static struct rt_move *move_build(struct fp_ctx *ctx, unsigned g, struct fp_tcp_conn *chain,
				  unsigned n)
{
	const struct fp_app *app = ctx->run->app;
	struct rt_move *mv = calloc(1, sizeof(*mv));
	uintptr_t *set = calloc(n ? n : 1, sizeof(*set));
	bool *has_ret = calloc(n ? n : 1, sizeof(*has_ret));
	unsigned k = 0, kept = 0;

	if (!mv || !set || !has_ret || !(mv->flows = calloc(n ? n : 1, sizeof(*mv->flows))) ||
	    !(mv->rets = calloc(ctx->n_rets ? ctx->n_rets : 1, sizeof(*mv->rets)))) {
		fprintf(stderr, "flowplane: worker %u: out of memory moving group %u\n",
			ctx->worker, g);
		abort();
	}
	mv->group = g;
	mv->chain = chain;
	for (struct fp_tcp_conn *c = chain; c; c = fp_tcp_chain_next(c))
		set[k++] = (uintptr_t)c;
	qsort(set, n, sizeof(*set), ptr_cmp);
	/* Returns name flows by pointer only: a closed flow's may be freed memory, so they
	 * are compared, never followed. */
	for (unsigned i = 0; i < ctx->n_rets; i++) {
		uintptr_t f = (uintptr_t)ctx->rets[i].flow;
		uintptr_t *hit = f ? bsearch(&f, set, n, sizeof(*set), ptr_cmp) : NULL;
		if (hit) {
			has_ret[hit - set] = true;
			mv->rets[mv->n_rets++] = ctx->rets[i];
		} else {
			ctx->rets[kept++] = ctx->rets[i];
		}
	}
	ctx->n_rets = kept;
	for (struct fp_tcp_conn *c = chain; c; c = fp_tcp_chain_next(c)) {
		uintptr_t key = (uintptr_t)c, *hit = bsearch(&key, set, n, sizeof(*set), ptr_cmp);
		if (!fp_tcp_app_holds(c) && !has_ret[hit - set])
			continue;
		struct rt_move_flow *mf = &mv->flows[mv->n_flows++];
		mf->flow = (struct fp_flow *)c;
		mf->cookie = fp_tcp_cookie(c);
		if (app->flow_leave)
			app->flow_leave(ctx, mf->flow, mf->cookie);
	}
	free(set);
	free(has_ret);
	return mv;
}

/* Every other worker has fenced its ring to us since @epoch: what they handed us under
 * the old table is all taken (and forwarded). */
static bool fenced(const struct rt_steer *s, unsigned me, uint32_t epoch)
{
	const struct rt_steer_wk *w = &s->wk[me];

	for (unsigned x = 0; x < s->n; x++)
		if (x != me && (int32_t)(w->fence_from[x] - epoch) < 0)
			return false;
	return true;
}

static bool move_send(struct rt_steer *s, unsigned me, unsigned to, struct rt_move *mv)
{
	void *p = (void *)((uintptr_t)mv | RT_STEER_MSG);

	if (!fenced(s, me, s->wk[me].move_epoch))
		return false;

	if (fp_ring_sp_enqueue_burst(s->rings[me * s->n + to], &p, 1) != 1)
		return false;
	wake(s, 1ull << to);
	return true;
}

void rt_steer_moves(struct rt_steer *s, unsigned me, struct fp_ctx *ctx, struct fp_stack *stack,
		    struct fp_rt_worker_stats *st)
{
	struct rt_steer_wk *w = &s->wk[me];
	uint64_t mask[2] = { 0, 0 };
	struct fp_tcp_conn *chain;

	if (w->move_msg) {   /* built earlier: waiting for the fences, or the ring was full */
		unsigned to = __atomic_load_n(&s->table[w->move_msg->group], __ATOMIC_RELAXED) &
			      RT_OWNER_MASK;
		if (move_send(s, me, to, w->move_msg))
			w->move_msg = NULL;
		return;
	}
	if (!w->move_req) {
		uint32_t r = atomic_load_explicit(&w->req, memory_order_acquire);
		if (!r)
			return;
		unsigned g = (r - 1) >> 16, to = (r - 1) & 0xffff;
		if (g >= FP_RSS_GROUPS || to >= s->n || to == me ||
		    __atomic_load_n(&s->table[g], __ATOMIC_RELAXED) != me) {
			atomic_store_explicit(&w->req, 0, memory_order_release);
			return;   /* checked when asked; a later move got there first */
		}
		/* From here every frame of the group goes to @to, which holds it. The request
		 * is cleared only after the table says so: whoever sees no request sees the
		 * group on its way to @to (a worker about to receive one is never parked). */
		__atomic_store_n(&s->table[g], (uint16_t)(to | RT_MOVING), __ATOMIC_RELEASE);
		if (s->shown)
			__atomic_store_n(&s->shown[g], (uint16_t)(to | RT_MOVING), __ATOMIC_RELAXED);
		atomic_store_explicit(&w->req, 0, memory_order_release);
		w->move_req = r;
		w->move_t0 = rt_unix_ns();
		/* a new epoch: every worker fences its rings at its next round; the sleeping
		 * ones are woken for it */
		w->move_epoch = atomic_fetch_add_explicit(&s->epoch, 1, memory_order_acq_rel) + 1;
		wake(s, (s->n < 64 ? (1ull << s->n) - 1 : ~0ull) & ~(1ull << me));
	}
	unsigned g = (w->move_req - 1) >> 16, to = (w->move_req - 1) & 0xffff;
	mask[g / 64] = 1ull << (g % 64);
	int n = fp_stack_tcp_export(stack, mask, &chain);
	if (n == -EBUSY)
		return;   /* an event still names a conn: after the next round */
	if (n < 0) {
		n = 0;
		chain = NULL;
	}
	struct rt_move *mv = move_build(ctx, g, chain, (unsigned)n);
	mv->from = me;
	mv->n_conns = (unsigned)n;
	mv->t0_ns = w->move_t0;
	w->move_req = 0;
	st->moves_out++;
	if (!move_send(s, me, to, mv))
		w->move_msg = mv;
}

int rt_steer_ask_move(struct rt_steer *s, unsigned g, unsigned to)
{
	if (g >= FP_RSS_GROUPS || to >= s->n)
		return -EINVAL;
	uint16_t e = __atomic_load_n(&s->table[g], __ATOMIC_ACQUIRE);
	unsigned from = e & RT_OWNER_MASK;
	if (e & RT_MOVING)
		return -EBUSY;
	if (from == to)
		return -EALREADY;
	if (atomic_load_explicit(&s->wk[to].parked, memory_order_relaxed))
		return -EHOSTDOWN;   /* unpark it first */
	if (!atomic_load_explicit(&s->wk[to].home, memory_order_acquire))
		return -EBUSY;       /* unparked, its queue still on its way back (lending) */
	uint32_t zero = 0;
	if (!atomic_compare_exchange_strong(&s->wk[from].req, &zero, (g << 16 | to) + 1))
		return -EBUSY;   /* that worker has a move still to start */
	wake(s, 1ull << from);
	return 0;
}

/*
 * IX's control plane gives a core back by moving its flow groups away and then parking its
 * worker: a parked worker sleeps in poll() whatever the idle policy, waking only for what
 * still reaches it (frames its queue receives for other workers' groups, which it hands
 * over; a fence; a timer of its stack) and to be unparked. So a worker is parked only once
 * it owns no group, none is on its way to it and no move to it is still to start; and
 * never the last worker left polling. Only the run's main thread calls this and
 * rt_steer_ask_move (the command channel), so neither can slip between the other's checks.
 */
int rt_steer_park(struct rt_steer *s, unsigned worker, bool park)
{
	unsigned active = 0;

	if (worker >= s->n)
		return -EINVAL;
	if (atomic_load_explicit(&s->wk[worker].parked, memory_order_relaxed) == park)
		return -EALREADY;
	if (park) {
		for (unsigned i = 0; i < s->n; i++) {
			uint32_t r = atomic_load_explicit(&s->wk[i].req, memory_order_acquire);
			if (r && ((r - 1) & 0xffff) == worker)
				return -EBUSY;   /* a move to it is still to start */
			active += !atomic_load_explicit(&s->wk[i].parked, memory_order_relaxed);
		}
		if (active <= 1)
			return -EBUSY;           /* the last worker polling */
		for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
			if ((__atomic_load_n(&s->table[g], __ATOMIC_ACQUIRE) & RT_OWNER_MASK) == worker)
				return -ENOTEMPTY;   /* it owns groups, or one is arriving */
	}
	atomic_store_explicit(&s->wk[worker].parked, park, memory_order_release);
	atomic_fetch_add_explicit(&s->park_gen, 1, memory_order_acq_rel);
	/* the worker, and whoever holds its queue (to give it back) */
	wake(s, 1ull << worker |
		1ull << atomic_load_explicit(&s->wk[worker].holder, memory_order_acquire));
	return 0;
}

bool rt_steer_parked(const struct rt_steer *s, unsigned worker)
{
	return atomic_load_explicit(&s->wk[worker].parked, memory_order_relaxed);
}

/*
 * Lending (--park-queue lend, the default). A NIC whose table IX reprograms sends a parked
 * core nothing; a veth delivers on whatever queue its sender picked, so frames keep
 * arriving on the parked worker's queue, and they waited for it to wake (ms, behind
 * whatever now runs on its core). So a parked worker hands its queue to a polling one,
 * which polls it with its own as if it were its own (its frames are steered like any
 * other), and gets it back when unparked. A queue is a token: exactly one worker holds it
 * at a time, and it travels through the hand-over rings as an entry of its own, after the
 * frames its last holder took from it and handed to that worker, so a flow of the taker's
 * groups keeps its order; one of a third worker's may be passed by a frame taken after
 * the change (TCP puts them back in order). The holder's rule, rt_steer_hands, at the
 * end of each round: a queue goes home once its owner is unparked; one held by a parked
 * worker goes to the first worker not parked; the rest stay. A worker whose own queue is
 * away (lent, or on its way back) runs neither its stack nor its application: both would
 * use the queue's buffer cache, which its holder uses. Moves to it wait until its queue
 * is home (@home, -EBUSY): a group's message must find a stack that runs. Only the main
 * thread asks moves and parks, and it parks no worker a move is still on its way to.
 */
static unsigned q_dest(const struct rt_steer *s, unsigned me, unsigned j)
{
	if (!s->lend)
		return me;
	if (j != me && !atomic_load_explicit(&s->wk[j].parked, memory_order_relaxed))
		return j;
	if (!atomic_load_explicit(&s->wk[me].parked, memory_order_relaxed))
		return me;
	for (unsigned k = 0; k < s->n; k++)
		if (k != me && !atomic_load_explicit(&s->wk[k].parked, memory_order_relaxed))
			return k;
	return me;   /* none: cannot be, the last worker polling is never parked */
}

static bool q_send(struct rt_steer *s, unsigned me, unsigned to, unsigned j)
{
	void *p = (void *)(uintptr_t)(RT_STEER_QUEUE | (uint64_t)j << 2 | RT_STEER_FENCE);

	if (j == me)   /* before it can be seen anywhere else */
		atomic_store_explicit(&s->wk[me].home, 0, memory_order_release);
	if (fp_ring_sp_enqueue_burst(s->rings[me * s->n + to], &p, 1) != 1) {
		if (j == me)
			atomic_store_explicit(&s->wk[me].home, 1, memory_order_release);
		return false;
	}
	wake(s, 1ull << to);
	return true;
}

uint64_t rt_steer_hands(struct rt_steer *s, unsigned me, struct fp_rt_worker_stats *st)
{
	struct rt_steer_wk *w = &s->wk[me];
	uint32_t gen = atomic_load_explicit(&s->park_gen, memory_order_acquire);

	if (gen == w->seen_park_gen && !w->hands_unsent)
		return w->hands;
	w->seen_park_gen = gen;
	w->hands_unsent = false;
	/* queues going home first: an owner gets its own before any other it is lent */
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t h = w->hands; h; h &= h - 1) {
			unsigned j = (unsigned)__builtin_ctzll(h), to = q_dest(s, me, j);
			if (to == me || (to == j) != (pass == 0))
				continue;
			if (!q_send(s, me, to, j)) {
				w->hands_unsent = true;   /* ring full: next round */
				continue;
			}
			w->hands &= ~(1ull << j);
			if (j == me)
				st->q_lends++;
		}
	}
	return w->hands;
}

unsigned rt_steer_queues(const struct rt_steer *s, unsigned worker, struct fp_devq *const **qs)
{
	*qs = s->wk[worker].qs;
	return s->wk[worker].n_qs;
}

void rt_steer_loop(struct rt_steer *s, unsigned me, bool in)
{
	struct timespec t = { 0, 50 * 1000 };

	if (in) {
		atomic_fetch_add_explicit(&s->looping, 1, memory_order_acq_rel);
		return;
	}
	atomic_fetch_sub_explicit(&s->looping, 1, memory_order_acq_rel);
	/* Our queue is away: whoever holds it, or is about to take it from a ring, polls it
	 * only from inside its loop, which the stop ends (one entering it now runs no round). */
	while (!(s->wk[me].hands >> me & 1) && atomic_load_explicit(&s->looping, memory_order_acquire))
		nanosleep(&t, NULL);
}

void rt_steer_worker_exit(struct rt_steer *s, unsigned me, struct fp_stack *stack,
			  struct fp_pool_cache *c)
{
	struct rt_steer_wk *w = &s->wk[me];

	/* A group built and never sent comes home, so the stack's destroy frees it; what
	 * was held for groups on their way here goes back to its pool. */
	if (w->move_msg) {
		fp_stack_tcp_import(stack, w->move_msg->chain);
		w->move_msg->chain = NULL;
		move_free(w->move_msg, NULL);
		w->move_msg = NULL;
	}
	for (unsigned i = 0; i < w->n_hold; i++)
		fp_mbuf_free(c, w->hold[i]);
	w->n_hold = 0;
}

void rt_steer_kick(struct rt_steer *s, uint64_t workers)
{
	wake(s, workers & (s->n < 64 ? (1ull << s->n) - 1 : ~0ull));
}

bool rt_steer_sleep_prepare(struct rt_steer *s, unsigned me, bool parked)
{
	atomic_store_explicit(&s->wk[me].sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	/* Each of these is written, then wake() looks at @sleeping: seen here, or woken. A
	 * move asked of us (rt_steer_ask_move) or a park or unpark since the caller looked
	 * was missed before, and the worker slept its full second per move: a controller
	 * emptying an idle worker of 64 groups took tens of seconds. */
	if (atomic_load_explicit(&s->epoch, memory_order_relaxed) != s->wk[me].seen_epoch ||
	    atomic_load_explicit(&s->wk[me].req, memory_order_relaxed) ||
	    atomic_load_explicit(&s->wk[me].parked, memory_order_relaxed) != parked ||
	    atomic_load_explicit(&s->park_gen, memory_order_relaxed) != s->wk[me].seen_park_gen ||
	    s->wk[me].hands_unsent) {
		atomic_store_explicit(&s->wk[me].sleeping, 0, memory_order_relaxed);
		return false;   /* a fence to put in our rings first, a move to start, a park,
				 * a queue to hand on */
	}
	for (unsigned src = 0; src < s->n; src++) {
		if (src != me && fp_ring_count(s->rings[src * s->n + me])) {
			atomic_store_explicit(&s->wk[me].sleeping, 0, memory_order_relaxed);
			return false;
		}
	}
	return true;
}

void rt_steer_sleep_done(struct rt_steer *s, unsigned me)
{
	uint64_t v;

	atomic_store_explicit(&s->wk[me].sleeping, 0, memory_order_relaxed);
	if (read(s->wk[me].efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nobody wrote; nothing to clear */
	}
}
