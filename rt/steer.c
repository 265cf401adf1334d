/* steer.c: IX's flow groups where the device cannot steer: a flow's home worker from the Toeplitz hash of its 4-tuple, and the hand-over rings between workers. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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
 * The key is the symmetric one (rss.h): a frame and its reply hash alike, so a stack that
 * picks an ephemeral port whose group is its own (net.h's steer_table) gets the replies
 * home, and fp-loadgen with the same table and as many workers sends each flow on the
 * queue of the server worker that owns it, as a NIC's RSS would.
 */
#define RT_STEER_RING  512      /* frames in flight from one worker to another */
#define RT_STEER_LEARN 1ul      /* tag on a ring entry: an ARP copy to learn from */

struct rt_steer_wk {
	atomic_int sleeping;          /* in poll(): a producer must write @efd */
	int efd;                      /* eventfd, in the worker's poll set */
	struct fp_devq *q;            /* the worker's queue (closed by rt_steer_destroy) */
	uint64_t tally[4];            /* out, in, drop, rx frames: the worker's last word */
} fp_aligned_cache;

struct rt_steer {
	unsigned n;
	struct fp_rss rss;
	uint16_t table[FP_RSS_GROUPS]; /* group -> worker; read relaxed (a control plane
					* may move groups) */
	struct fp_ring **rings;       /* [src * n + dst]: src produces, dst consumes */
	struct rt_steer_wk *wk;
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

int rt_steer_create(struct rt_run *run, char *err, size_t errlen)
{
	const struct fp_rt_config *cfg = run->cfg;
	unsigned n = cfg->n_workers, total = 0;
	struct rt_steer *s = calloc(1, sizeof(*s));

	if (!s || !(s->rings = calloc((size_t)n * n, sizeof(*s->rings))) ||
	    !(s->wk = aligned_alloc(FP_CACHE_LINE, n * sizeof(*s->wk))))
		goto nomem;
	s->n = n;
	fp_rss_init(&s->rss, fp_rss_key_symmetric);
	memset(s->wk, 0, n * sizeof(*s->wk));
	for (unsigned i = 0; i < n; i++)
		s->wk[i].efd = -1;
	/* No weights: group g to worker g % n (ethtool -X equal). Weights (ethtool -X
	 * weight): contiguous blocks of groups, each worker's in proportion to its weight. */
	for (unsigned i = 0; i < n; i++)
		total += cfg->n_steer_weights ? cfg->steer_weights[i] : 1;
	for (unsigned g = 0, k = 0; g < FP_RSS_GROUPS; g++) {
		if (!cfg->n_steer_weights) {
			s->table[g] = (uint16_t)(g % n);
			continue;
		}
		/* the (k+1)-th worker with weight takes groups while g < its cumulative share */
		unsigned cum = 0;
		for (k = 0; k < n; k++) {
			cum += cfg->steer_weights[k];
			if ((uint64_t)g * total < (uint64_t)cum * FP_RSS_GROUPS)
				break;
		}
		s->table[g] = (uint16_t)k;
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
			struct fp_mbuf *mb = (struct fp_mbuf *)((uintptr_t)m & ~RT_STEER_LEARN);
			struct fp_devq *src = s->wk[i / s->n].q;
			if (src)
				fp_mbuf_free(&src->cache, mb);
		}
		free(s->rings[i]);
	}
	for (unsigned i = 0; s->wk && i < s->n; i++) {
		if (s->wk[i].q)
			s->wk[i].q->ops->close(s->wk[i].q);
		if (s->wk[i].efd >= 0)
			close(s->wk[i].efd);
	}
	free(s->rings);
	free(s->wk);
	free(s);
}

const uint16_t *rt_steer_table(const struct rt_steer *s) { return s->table; }

void rt_steer_own(struct rt_steer *s, unsigned worker, struct fp_devq *q) { s->wk[worker].q = q; }

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

unsigned rt_steer_rx(struct rt_steer *s, unsigned me, struct fp_pool_cache *c,
		     struct fp_mbuf **rx, unsigned n, struct fp_rt_worker_stats *st)
{
	uint64_t touched = 0;
	unsigned kept = 0;

	for (unsigned i = 0; i < n; i++) {
		struct fp_mbuf *m = rx[i];
		int g = m->next ? RT_STEER_HERE
				: rt_steer_classify(&s->rss, fp_mbuf_data(m), m->data_len);
		unsigned d = g >= 0 ? __atomic_load_n(&s->table[g], __ATOMIC_RELAXED) : me;

		if (g == RT_STEER_ARP)
			share_arp(s, me, c, m, &touched);
		if (d == me || d >= s->n) {
			rx[kept++] = m;
			continue;
		}
		void *p = m;
		if (fp_ring_sp_enqueue_burst(s->rings[me * s->n + d], &p, 1) == 1) {
			touched |= 1ull << d;
			st->steer_out++;
		} else {
			fp_mbuf_free(c, m);   /* the ring is full: a loss TCP repairs */
			st->steer_drop++;
		}
	}
	if (touched)
		wake(s, touched);
	return kept;
}

unsigned rt_steer_take(struct rt_steer *s, unsigned me, struct fp_stack *stack,
		       struct fp_pool_cache *c, struct fp_mbuf **out, unsigned max,
		       struct fp_rt_worker_stats *st)
{
	unsigned got = 0;

	for (unsigned k = 1; k < s->n && got < max; k++) {
		unsigned src = (me + k) % s->n;   /* start after us: no worker always first */
		struct fp_ring *r = s->rings[src * s->n + me];
		unsigned base = got, n = fp_ring_dequeue_burst(r, (void **)(out + got), max - got);

		for (unsigned i = 0; i < n; i++) {
			struct fp_mbuf *m = out[base + i];
			if ((uintptr_t)m & RT_STEER_LEARN) {
				m = (struct fp_mbuf *)((uintptr_t)m & ~RT_STEER_LEARN);
				fp_stack_arp_learn(stack, m);
				fp_mbuf_free(c, m);
				continue;
			}
			out[got++] = m;
			st->steer_in++;
		}
	}
	return got;
}

bool rt_steer_sleep_prepare(struct rt_steer *s, unsigned me)
{
	atomic_store_explicit(&s->wk[me].sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
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
