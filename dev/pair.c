/* pair.c: two in-process device queues back to back, one per thread, for unprivileged tests. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <flowplane/dev.h>
#include <flowplane/ring.h>

/*
 * Each end owns a pool that only its own thread touches, like a NIC queue's buffers. A
 * frame crosses in three steps, each a single-producer single-consumer ring:
 *
 *   sender tx_burst:    its own mbufs (with their references) into the receiver's @rx
 *   receiver rx_burst:  copies each into a buffer from its own cache (the NIC's DMA) and
 *                       hands the sender's mbuf back through the sender's @ret
 *   sender reclaim:     frees what came back, into its own cache
 *
 * so no buffer is ever freed into a cache by a thread that does not own it, and the
 * sender's stack sees a frame as "still on the wire" (refcnt > 1) until it is copied,
 * which is what its zero-copy retransmission relies on.
 *
 * Waking a sleeping receiver: the runtime calls wait_fd() just before it sleeps, which
 * sets @sleeping, and then checks rx_ready(). A sender that has enqueued frames and then
 * sees @sleeping writes the receiver's eventfd. The two sides each store, fence, then
 * load (Dekker), so either the receiver sees the frames or the sender sees the flag.
 */
#define PAIR_RX_RING   512u          /* like a NIC's descriptor ring: tx may be refused */
#define PAIR_BURST_MAX 256u

struct pair_end {
	struct fp_devq q;                 /* first: the ops get a struct fp_devq * */
	struct pair *pr;
	struct pair_end *peer;
	struct fp_ring *rx;               /* peer's frames for us (peer produces) */
	struct fp_ring *ret;              /* our frames the peer has copied (peer produces) */
	int efd;                          /* eventfd: the peer wakes us */
	atomic_bool sleeping;             /* we are about to sleep on @efd */
	bool closed;
	struct fp_dev_stats st;           /* written by this end's thread only */
};

struct pair {
	struct pair_end end[2];
	atomic_int open;                  /* ends not yet closed */
};

static struct pair_end *end_of(struct fp_devq *q)
{
	return fp_container_of(q, struct pair_end, q);
}

/* Hand the peer's mbufs back to it (its @ret is big enough for all of its buffers). */
static void pair_give_back(struct pair_end *e, struct fp_mbuf **ms, unsigned n)
{
	unsigned k = fp_ring_sp_enqueue_burst(e->peer->ret, (void *const *)ms, n);

	/* Cannot happen: @ret holds every buffer of the peer's pool. */
	if (k != n) {
		fprintf(stderr, "flowplane: pair: return ring overflow\n");
		abort();
	}
}

/* Copy the peer's frame @src into one of our buffers; NULL when we have none or it does
 * not fit (the receiving NIC drops it). */
static struct fp_mbuf *pair_copy(struct pair_end *e, const struct fp_mbuf *src)
{
	struct fp_mbuf *m = fp_pool_get(&e->q.cache);
	uint8_t *p;

	if (!m) {
		e->st.rx_fill_empty++;
		return NULL;
	}
	if (!(p = fp_mbuf_append(m, src->pkt_len))) {
		e->st.invalid_descs++;
		fp_mbuf_free(&e->q.cache, m);
		return NULL;
	}
	fp_mbuf_read(src, 0, p, src->pkt_len);
	m->port = e->q.queue_id;
	return m;
}

static unsigned pair_rx_burst(struct fp_devq *q, struct fp_mbuf **out, unsigned max)
{
	struct pair_end *e = end_of(q);
	struct fp_mbuf *in[PAIR_BURST_MAX];
	unsigned n, got = 0;

	if (atomic_load_explicit(&e->sleeping, memory_order_relaxed))
		atomic_store_explicit(&e->sleeping, false, memory_order_relaxed);
	if (max > PAIR_BURST_MAX)
		max = PAIR_BURST_MAX;
	n = fp_ring_dequeue_burst(e->rx, (void **)in, max);
	for (unsigned i = 0; i < n; i++) {
		struct fp_mbuf *m = pair_copy(e, in[i]);
		if (!m) {
			e->st.rx_dropped++;
			continue;
		}
		e->st.rx_bytes += m->pkt_len;
		out[got++] = m;
	}
	e->st.rx_frames += got;
	if (n)
		pair_give_back(e, in, n);
	return got;
}

/* Wake the peer if it said it is going to sleep (see the top of the file). */
static void pair_kick(struct pair_end *e, struct pair_end *peer)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&peer->sleeping, memory_order_relaxed) &&
	    atomic_exchange(&peer->sleeping, false)) {
		uint64_t one = 1;
		ssize_t r = write(peer->efd, &one, sizeof(one));
		(void)r;  /* EAGAIN: the counter is already nonzero, the peer wakes anyway */
		e->st.tx_wakeups++;
	}
}

static unsigned pair_tx_burst(struct fp_devq *q, struct fp_mbuf **frames, unsigned n)
{
	struct pair_end *e = end_of(q);
	unsigned k = fp_ring_sp_enqueue_burst(e->peer->rx, (void *const *)frames, n);

	for (unsigned i = 0; i < k; i++)
		e->st.tx_bytes += frames[i]->pkt_len;
	e->st.tx_frames += k;
	e->st.tx_full += n - k;
	if (k)
		pair_kick(e, e->peer);
	return k;
}

static unsigned pair_reclaim(struct fp_devq *q)
{
	struct pair_end *e = end_of(q);
	struct fp_mbuf *ms[PAIR_BURST_MAX];
	unsigned n, total = 0;

	while ((n = fp_ring_dequeue_burst(e->ret, (void **)ms, PAIR_BURST_MAX)) > 0) {
		for (unsigned i = 0; i < n; i++)
			fp_mbuf_free(&q->cache, ms[i]);
		total += n;
	}
	return total;
}

/* Called by the owner right before it sleeps: arm the wake-up, and clear a stale one so
 * poll() does not return at once for a kick meant for an earlier sleep. */
static int pair_wait_fd(struct fp_devq *q)
{
	struct pair_end *e = end_of(q);
	uint64_t v;

	if (read(e->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -1;
	atomic_store(&e->sleeping, true);
	atomic_thread_fence(memory_order_seq_cst);
	return e->efd;
}

static unsigned pair_rx_ready(struct fp_devq *q)
{
	return fp_ring_count(end_of(q)->rx);
}

static unsigned pair_rx_waiting(const struct fp_devq *q)
{
	return fp_ring_count(fp_container_of(q, const struct pair_end, q)->rx);
}

static void pair_stats(struct fp_devq *q, struct fp_dev_stats *out)
{
	*out = end_of(q)->st;
}

/* Return every buffer parked in the rings to its own pool, then free both pools. Runs
 * once both ends are closed, so no other thread touches anything. */
static void pair_free(struct pair *pr)
{
	struct fp_mbuf *ms[PAIR_BURST_MAX];
	unsigned n;

	for (int i = 0; i < 2; i++) {
		struct pair_end *e = &pr->end[i];
		if (!e->rx || !e->ret || !e->peer || !e->peer->q.pool)
			continue;  /* a half-built pair: nothing was ever sent */
		/* @rx holds the peer's buffers, @ret our own. */
		while ((n = fp_ring_dequeue_burst(e->rx, (void **)ms, PAIR_BURST_MAX)) > 0)
			for (unsigned j = 0; j < n; j++)
				fp_mbuf_free(&e->peer->q.cache, ms[j]);
		while ((n = fp_ring_dequeue_burst(e->ret, (void **)ms, PAIR_BURST_MAX)) > 0)
			for (unsigned j = 0; j < n; j++)
				fp_mbuf_free(&e->q.cache, ms[j]);
	}
	for (int i = 0; i < 2; i++) {
		struct pair_end *e = &pr->end[i];
		if (e->q.pool) {
			fp_pool_cache_flush(&e->q.cache);
			fp_pool_destroy(e->q.pool);
		}
		free(e->rx);
		free(e->ret);
		if (e->efd >= 0)
			close(e->efd);
	}
	free(pr);
}

/* The pair's memory is shared, so it goes when the second end is closed: close both ends
 * once neither thread uses them any more. */
static void pair_close(struct fp_devq *q)
{
	struct pair_end *e = end_of(q);

	if (e->closed)
		return;
	e->closed = true;
	if (atomic_fetch_sub(&e->pr->open, 1) == 1)
		pair_free(e->pr);
}

static const struct fp_dev_ops pair_ops = {
	.name = "pair",
	.rx_burst = pair_rx_burst,
	.tx_burst = pair_tx_burst,
	.reclaim = pair_reclaim,
	.wait_fd = pair_wait_fd,
	.rx_ready = pair_rx_ready,
	.rx_waiting = pair_rx_waiting,
	.stats = pair_stats,
	.close = pair_close,
};

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 2;

	while (p < n)
		p <<= 1;
	return p;
}

static int pair_end_init(struct pair *pr, int i, uint32_t frames, uint32_t frame_size)
{
	struct pair_end *e = &pr->end[i];
	char name[32];

	snprintf(name, sizeof(name), "pair%d", i);
	struct fp_pool_params pp = { .name = name, .n_bufs = frames, .buf_size = frame_size };

	e->pr = pr;
	e->peer = &pr->end[1 - i];
	e->q.ops = &pair_ops;
	e->q.mac = (struct fp_eth_addr){ .b = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) } };
	e->q.mtu = 1500;
	e->rx = fp_ring_create(PAIR_RX_RING);
	e->ret = fp_ring_create(pow2_at_least(frames));
	e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!e->rx || !e->ret || e->efd < 0)
		return -ENOMEM;
	if (!(e->q.pool = fp_pool_create(&pp)))
		return -errno;
	return fp_pool_cache_init(&e->q.cache, e->q.pool);
}

int fp_pair_create(uint32_t frames, uint32_t frame_size, struct fp_devq *ends[2])
{
	struct pair *pr = calloc(1, sizeof(*pr));
	int err;

	if (!pr)
		return -ENOMEM;
	pr->end[0].efd = pr->end[1].efd = -1;
	atomic_init(&pr->open, 2);
	if ((err = pair_end_init(pr, 0, frames, frame_size)) ||
	    (err = pair_end_init(pr, 1, frames, frame_size))) {
		pair_free(pr);
		return err;
	}
	ends[0] = &pr->end[0].q;
	ends[1] = &pr->end[1].q;
	return 0;
}
