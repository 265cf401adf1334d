/* af_xdp.c: AF_XDP's queue side: UMEM-backed pools, the sockets, burst rx/tx over the rings. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/xsk.h>

#include <flowplane/log.h>

#include "af_xdp.h"

/*
 * Each queue has its own UMEM, and the queue's pool is laid over it: buffer i is UMEM
 * frame i, so a descriptor's address and its mbuf are one division apart and a frame the
 * stack builds in q->cache is transmitted without a copy. Buffers cycle
 *
 *   pool --fill_post--> fill ring --kernel--> rx ring --rx_burst--> stack --> pool
 *   stack --tx_burst--> tx ring --kernel--> completion ring --reclaim--> pool
 *
 * and q->held counts, per buffer, the references the kernel holds (one while posted for
 * receive, one per transmission in flight), so close can return every one of them.
 */
#define XDP_HUGE_BYTES         (2u << 20)  /* the default huge page on x86-64 */
#define XDP_FILL_BATCH         64          /* buffers posted to the fill ring at a time */
#define XDP_TX_BATCH           64          /* descriptors written per tx reservation */
#define XDP_BUSY_WAIT_MS       2000        /* for a just-closed socket to free its queue */
#define XDP_BUSY_STEP_MS       20

struct xdp_q {
	struct fp_devq dq;         /* first: the ops are handed &dq */
	struct xsk_ring_cons rx, comp;
	struct xsk_ring_prod tx, fill;
	uint32_t ring_size;
	uint32_t fill_target;      /* buffers kept posted for receive */
	uint32_t rx_posted;        /* in the fill ring, the kernel or the rx ring */
	uint32_t tx_posted;        /* in the tx ring, the kernel or the completion ring */
	bool kick_always;          /* every tx needs a sendto(): copy mode, or no need_wakeup */
	int fd;
	uint16_t *held;            /* per buffer: references the kernel holds */
	uint64_t tx_bad;           /* frames dropped: empty, or too long for one UMEM frame */
	struct fp_dev_stats st;
	struct fp_xdp *x;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	void *area;
	size_t area_len;
	/* queue 0: other hosts' ARP frames copied by the filter (dev/xdp_filter.bpf.c), handed
	 * to the stack as received frames so a neighbour's new MAC is learned at once */
	struct ring_buffer *arps;
	struct fp_mbuf **arp_out;
	unsigned arp_n, arp_max;
};

static struct xdp_q *xq(struct fp_devq *dq) { return fp_container_of(dq, struct xdp_q, dq); }

/* ---- the datapath ---- */

/* Post free buffers for receive until fill_target are out. The fill ring cannot be short
 * of room: it never holds more than the rx_posted buffers, and fill_target <= its size. */
static void fill_post(struct xdp_q *q)
{
	struct fp_mbuf *bufs[XDP_FILL_BATCH];
	uint32_t idx;

	while (q->rx_posted < q->fill_target) {
		uint32_t want = q->fill_target - q->rx_posted;
		unsigned n = fp_pool_get_bulk(&q->dq.cache, bufs,
					      want < XDP_FILL_BATCH ? want : XDP_FILL_BATCH);
		if (!n)
			return;  /* pool dry: the stack holds the rest; retried next poll */
		if (xsk_ring_prod__reserve(&q->fill, n, &idx) != n) {
			fp_pool_put_bulk(&q->dq.cache, bufs, n);
			return;
		}
		for (unsigned i = 0; i < n; i++) {
			uint64_t addr = fp_pool_offset_of(q->dq.pool, bufs[i]);
			*xsk_ring_prod__fill_addr(&q->fill, idx + i) = addr;
			q->held[bufs[i]->index]++;
		}
		xsk_ring_prod__submit(&q->fill, n);
		q->rx_posted += n;
	}
}

/* One received descriptor as an mbuf; NULL (and counted) if it is not a frame we posted. */
static struct fp_mbuf *rx_frame(struct xdp_q *q, const struct xdp_desc *d)
{
	struct fp_pool *pool = q->dq.pool;
	struct fp_mbuf *m;
	uint64_t off;

	if (fp_unlikely(d->addr >= q->area_len)) {
		q->st.invalid_descs++;
		return NULL;
	}
	m = fp_pool_mbuf_at(pool, d->addr);
	q->held[m->index]--;
	/* the kernel wrote the frame past XDP_PACKET_HEADROOM (and any metadata): the offset
	 * inside the chunk is our data_off, the headroom the stack may prepend into */
	off = d->addr - fp_pool_offset_of(pool, m);
	if (fp_unlikely(!d->len || off + d->len > pool->buf_size)) {
		q->st.invalid_descs++;
		fp_mbuf_free(&q->dq.cache, m);
		return NULL;
	}
	m->data_off = (uint16_t)off;
	m->data_len = m->pkt_len = d->len;
	m->port = q->dq.queue_id;
	return m;
}

/* One ARP frame from the filter's ring, as a received frame (the copy is dropped when the
 * burst or the pool has no room: a later one will say the same). */
static int arp_copy(void *ctx, void *data, size_t len)
{
	struct xdp_q *q = ctx;
	struct fp_mbuf *m;

	if (q->arp_n == q->arp_max || len > q->dq.pool->buf_size - q->dq.pool->headroom ||
	    !(m = fp_pool_get(&q->dq.cache)))
		return 0;
	memcpy(fp_mbuf_append(m, (uint32_t)len), data, len);
	m->port = q->dq.queue_id;
	q->arp_out[q->arp_n++] = m;
	return 0;
}

static unsigned xdp_rx_burst(struct fp_devq *dq, struct fp_mbuf **out, unsigned max)
{
	struct xdp_q *q = xq(dq);
	unsigned got = 0, arp = 0;
	uint32_t idx, n;

	/* first, so a neighbour's new address is known before the frames that follow it */
	if (q->arps) {
		q->arp_out = out;
		q->arp_n = 0;
		q->arp_max = max;
		ring_buffer__consume(q->arps);   /* shared memory only: no system call */
		arp = q->arp_n;
		max -= arp;
		out += arp;
	}
	n = xsk_ring_cons__peek(&q->rx, max, &idx);

	for (uint32_t i = 0; i < n; i++) {
		struct fp_mbuf *m = rx_frame(q, xsk_ring_cons__rx_desc(&q->rx, idx + i));
		if (m) {
			out[got++] = m;
			q->st.rx_bytes += m->data_len;
		}
	}
	if (n)
		xsk_ring_cons__release(&q->rx, n);
	q->rx_posted -= n;
	q->st.rx_frames += got;
	if (q->rx_posted < q->fill_target / 2)
		fill_post(q);
	if (!q->rx_posted)
		q->st.rx_fill_empty++;
	/* a zero-copy driver that ran out of fill buffers stops until woken */
	if (!n && xsk_ring_prod__needs_wakeup(&q->fill)) {
		recvfrom(q->fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
		q->st.rx_wakeups++;
	}
	return arp + got;
}

/* Copy mode sends only inside sendto(), at most a budget (32) of frames per call; zero-copy
 * with need_wakeup only when the driver asks. sendto errors (EAGAIN: budget used up, the
 * rest goes at the next kick; EBUSY, ENOBUFS, ENETDOWN) all mean "try again later". */
static void tx_kick(struct xdp_q *q)
{
	if (q->kick_always || xsk_ring_prod__needs_wakeup(&q->tx)) {
		sendto(q->fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
		q->st.tx_wakeups++;
	}
}

/*
 * The frame as one buffer of this queue's UMEM in *out: itself when it already is one,
 * else a copy, and the original is freed (the device took it). 1: ready; 0: dropped (empty,
 * or too long for one UMEM frame); -1: no buffer for the copy (the caller keeps the frame).
 */
static int tx_prepare(struct xdp_q *q, struct fp_mbuf *m, struct fp_mbuf **out)
{
	struct fp_mbuf *c;

	if (fp_likely(m->pool == q->dq.pool && !m->next && m->data_len)) {
		*out = m;
		return 1;
	}
	/* the kernel skips an empty descriptor without completing it: the buffer would
	 * never come back */
	if (!m->pkt_len || m->pkt_len > q->dq.pool->buf_size - q->dq.pool->headroom) {
		q->tx_bad++;
		fp_mbuf_free(&q->dq.cache, m);
		return 0;
	}
	if (!(c = fp_pool_get(&q->dq.cache)))
		return -1;
	c->data_len = c->pkt_len = fp_mbuf_read(m, 0, fp_mbuf_data(c), m->pkt_len);
	fp_mbuf_free(&q->dq.cache, m);
	*out = c;
	return 1;
}

/* Put @n prepared frames on the tx ring; room was checked against tx_posted. */
static void tx_post(struct xdp_q *q, struct fp_mbuf **ms, unsigned n)
{
	uint32_t idx;

	if (!n || xsk_ring_prod__reserve(&q->tx, n, &idx) != n)
		return;
	for (unsigned i = 0; i < n; i++) {
		struct xdp_desc *d = xsk_ring_prod__tx_desc(&q->tx, idx + i);
		d->addr = fp_pool_offset_of(q->dq.pool, ms[i]) + ms[i]->data_off;
		d->len = ms[i]->data_len;
		d->options = 0;
		q->held[ms[i]->index]++;
		q->st.tx_bytes += d->len;
	}
	xsk_ring_prod__submit(&q->tx, n);
	q->tx_posted += n;
	q->st.tx_frames += n;
}

static unsigned xdp_tx_burst(struct fp_devq *dq, struct fp_mbuf **frames, unsigned n)
{
	struct xdp_q *q = xq(dq);
	struct fp_mbuf *ready[XDP_TX_BATCH];
	/* a descriptor stays ours until its completion is reaped: bounding what is out by
	 * the ring size keeps both the tx and the completion ring from overflowing */
	uint32_t room = q->ring_size - q->tx_posted;
	unsigned taken = 0, k = 0;

	while (taken < n && room > 0) {
		int r = tx_prepare(q, frames[taken], &ready[k]);
		if (r < 0)
			break;
		taken++;
		room -= (uint32_t)r;
		k += (unsigned)r;
		if (k == XDP_TX_BATCH) {
			tx_post(q, ready, k);
			k = 0;
		}
	}
	tx_post(q, ready, k);
	if (!room)
		q->st.tx_full += n - taken;
	if (taken)
		tx_kick(q);
	return taken;
}

/* Reap the completion ring: each entry ends one transmission of a buffer. */
static unsigned comp_drain(struct xdp_q *q)
{
	uint32_t idx, n = xsk_ring_cons__peek(&q->comp, q->ring_size, &idx);

	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = *xsk_ring_cons__comp_addr(&q->comp, idx + i);
		struct fp_mbuf *m = fp_pool_mbuf_at(q->dq.pool, addr);
		q->held[m->index]--;
		fp_mbuf_free(&q->dq.cache, m);
	}
	if (n)
		xsk_ring_cons__release(&q->comp, n);
	q->tx_posted -= n;
	return n;
}

static unsigned xdp_reclaim(struct fp_devq *dq)
{
	struct xdp_q *q = xq(dq);
	unsigned n = comp_drain(q);

	/* descriptors the kernel has not taken yet (copy mode's per-call budget) */
	if (xsk_prod_nb_free(&q->tx, q->ring_size) < q->ring_size)
		tx_kick(q);
	if (q->rx_posted + XDP_FILL_BATCH <= q->fill_target)
		fill_post(q);
	return n;
}

static int xdp_wait_fd(struct fp_devq *dq) { return xq(dq)->fd; }

static unsigned xdp_rx_ready(struct fp_devq *dq)
{
	struct xdp_q *q = xq(dq);

	return xsk_cons_nb_avail(&q->rx, q->ring_size);
}

/* The rx ring's indexes as the kernel and the owner last published them. */
static unsigned xdp_rx_waiting(const struct fp_devq *dq)
{
	const struct xdp_q *q = fp_container_of(dq, const struct xdp_q, dq);

	return __atomic_load_n(q->rx.producer, __ATOMIC_ACQUIRE) -
	       __atomic_load_n(q->rx.consumer, __ATOMIC_ACQUIRE);
}

static void xdp_stats(struct fp_devq *dq, struct fp_dev_stats *out)
{
	struct xdp_q *q = xq(dq);
	struct xdp_statistics ks;
	socklen_t len = sizeof(ks);

	*out = q->st;
	out->invalid_descs += q->tx_bad;
	memset(&ks, 0, sizeof(ks));
	if (getsockopt(q->fd, SOL_XDP, XDP_STATISTICS, &ks, &len))
		return;
	out->rx_dropped += ks.rx_dropped + ks.rx_ring_full;
	out->invalid_descs += ks.rx_invalid_descs + ks.tx_invalid_descs;
	out->rx_fill_empty += ks.rx_fill_ring_empty_descs;  /* the kernel's side of the same */
}

/* Every buffer the kernel still holds comes back: posted for receive (in the fill ring, or
 * received and not yet taken), or sent and not completed. The socket is gone, so none of
 * them will move again. */
static void held_release(struct xdp_q *q)
{
	struct fp_pool *pool = q->dq.pool;

	for (uint32_t i = 0; i < pool->n_bufs; i++)
		for (; q->held[i]; q->held[i]--)
			fp_mbuf_free(&q->dq.cache, &pool->mbufs[i]);
}

static void queue_free(struct xdp_q *q)
{
	uint64_t out = 0;

	if (q->dq.pool) {
		held_release(q);
		if (q->dq.cache.pool)
			fp_pool_cache_flush(&q->dq.cache);
		out = fp_pool_in_use(q->dq.pool);
	}
	if (out) {
		/* the pool's memory is the UMEM: someone still holds buffers in it, so leaking
		 * both is the only safe thing left to do */
		log_warn("af_xdp: %s queue %u closed with %llu buffers still out: leaked",
			 q->x->ifname, q->dq.queue_id, (unsigned long long)out);
	} else {
		fp_pool_destroy(q->dq.pool);
		if (q->area)
			munmap(q->area, q->area_len);
	}
	free(q->held);
	free(q);
}

static void xdp_close(struct fp_devq *dq)
{
	struct xdp_q *q = xq(dq);
	uint32_t qid = dq->queue_id;

	bpf_map_delete_elem(q->x->xsks_fd, &qid);  /* frames for us go to the host from now */
	ring_buffer__free(q->arps);
	comp_drain(q);
	xsk_socket__delete(q->xsk);
	xsk_umem__delete(q->umem);
	__atomic_fetch_sub(&q->x->open_queues, 1, __ATOMIC_RELAXED);
	queue_free(q);
}

static const struct fp_dev_ops xdp_ops = {
	.name = "af_xdp",
	.rx_burst = xdp_rx_burst,
	.tx_burst = xdp_tx_burst,
	.reclaim = xdp_reclaim,
	.wait_fd = xdp_wait_fd,
	.rx_ready = xdp_rx_ready,
	.rx_waiting = xdp_rx_waiting,
	.stats = xdp_stats,
	.close = xdp_close,
};

/* ---- queue open: UMEM, pool, socket ---- */

/* Huge pages save TLB misses on the UMEM when there are some to be had; never required. */
static int umem_map(struct xdp_q *q, size_t len)
{
	void *p = MAP_FAILED;

	if (len % XDP_HUGE_BYTES == 0)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	q->area = p;
	q->area_len = len;
	return 0;
}

static int pool_over_umem(struct xdp_q *q, unsigned qid)
{
	const struct fp_xdp_config *c = &q->x->cfg;
	struct fp_pool_params pp = {
		.n_bufs = c->frames, .buf_size = c->frame_size,
		.headroom = XDP_PACKET_HEADROOM,  /* where the kernel puts received frames */
		.region = q->area,
	};
	char name[32];
	int ret;

	snprintf(name, sizeof(name), "xdp-%s-q%u", q->x->ifname, qid);
	pp.name = name;
	if ((ret = umem_map(q, (size_t)c->frames * c->frame_size)))
		return ret;
	pp.region = q->area;
	if (!(q->dq.pool = fp_pool_create(&pp)))
		return -errno;
	if ((ret = fp_pool_cache_init(&q->dq.cache, q->dq.pool)))
		return ret;
	q->held = calloc(c->frames, sizeof(*q->held));
	return q->held ? 0 : -ENOMEM;
}

/* A UMEM and a socket bound with @bind_mode. The UMEM is made afresh for every try: a
 * failed bind leaves its rings set up on the UMEM's socket, which cannot be set twice. */
static int sock_try(struct xdp_q *q, unsigned qid, uint16_t bind_mode)
{
	const struct fp_xdp_config *c = &q->x->cfg;
	struct xsk_umem_config uc = { .fill_size = c->ring_size, .comp_size = c->ring_size,
				      .frame_size = c->frame_size };
	struct xsk_socket_config sc = {
		.rx_size = c->ring_size, .tx_size = c->ring_size,
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,  /* ours is attached */
		.xdp_flags = q->x->attach_flags,
		.bind_flags = bind_mode | (c->no_need_wakeup ? 0 : XDP_USE_NEED_WAKEUP),
	};
	int ret = xsk_umem__create(&q->umem, q->area, q->area_len, &q->fill, &q->comp, &uc);

	if (ret)
		return ret;
	if ((ret = xsk_socket__create(&q->xsk, q->x->ifname, qid, q->umem, &q->rx, &q->tx, &sc))) {
		xsk_umem__delete(q->umem);
		q->umem = NULL;
		q->xsk = NULL;
	}
	return ret;
}

/* Bind as the config asks: zero-copy first where allowed (veth and skb mode only copy). */
static int sock_bind_once(struct xdp_q *q, unsigned qid)
{
	const struct fp_xdp_config *c = &q->x->cfg;
	bool try_zc = !c->force_copy && c->mode != FP_XDP_SKB;
	int ret = try_zc ? sock_try(q, qid, XDP_ZEROCOPY) : -EOPNOTSUPP;

	if (ret && ret != -EBUSY && !c->force_zerocopy)
		ret = sock_try(q, qid, XDP_COPY);
	return ret;
}

/* A socket closed a moment ago still holds its queue: the kernel lets go from a work item
 * that takes the RTNL lock, so a quick reopen (a restart, the next test) can find the
 * queue busy for a while, longer when other netlink work is going on. Wait that out. */
static int sock_bind(struct xdp_q *q, unsigned qid, char *err, size_t errlen)
{
	const struct fp_xdp_config *c = &q->x->cfg;
	struct xdp_options opt = { 0 };
	socklen_t len = sizeof(opt);
	int ret;

	for (unsigned waited_ms = 0;; waited_ms += XDP_BUSY_STEP_MS) {
		ret = sock_bind_once(q, qid);
		if (ret != -EBUSY || waited_ms >= XDP_BUSY_WAIT_MS)
			break;
		usleep(XDP_BUSY_STEP_MS * 1000);
	}
	if (ret) {
		bool memlock = ret == -ENOMEM || ret == -EPERM;
		const char *hint = c->force_zerocopy ? " (driver without AF_XDP zero-copy?)" :
				   ret == -EBUSY ? " (another AF_XDP socket holds it?)" :
				   memlock ? " (locked-memory limit? ulimit -l)" : "";
		xdp_errf(err, errlen, "AF_XDP %ssocket on %s queue %u refused: %s%s",
		         c->force_zerocopy ? "zero-copy " : "", q->x->ifname, qid, strerror(-ret),
		         hint);
		return ret;
	}
	q->fd = xsk_socket__fd(q->xsk);
	/* libxdp opens it without O_CLOEXEC: a child the application spawns would keep the
	 * socket, and with it the queue, bound after we close it */
	fcntl(q->fd, F_SETFD, FD_CLOEXEC);
	if (!getsockopt(q->fd, SOL_XDP, XDP_OPTIONS, &opt, &len))
		q->dq.zerocopy = opt.flags & XDP_OPTIONS_ZEROCOPY;
	q->kick_always = !q->dq.zerocopy || c->no_need_wakeup;
	return 0;
}

struct fp_devq *fp_xdp_queue_open(struct fp_xdp *x, unsigned queue_id, char *err, size_t errlen)
{
	uint32_t qid = queue_id;
	struct xdp_q *q;
	int ret;

	if (queue_id >= x->n_queues) {
		xdp_errf(err, errlen, "queue %u out of range: %s has %u queues", queue_id,
		         x->ifname, x->n_queues);
		errno = ERANGE;
		return NULL;
	}
	if (!(q = calloc(1, sizeof(*q)))) {
		xdp_errf(err, errlen, "out of memory");
		return NULL;
	}
	q->x = x;
	q->fd = -1;
	q->ring_size = x->cfg.ring_size;
	/* half the frames wait for receive; the rest are for the stack to build frames in */
	q->fill_target = x->cfg.frames / 2;
	if (q->fill_target > x->cfg.ring_size)
		q->fill_target = x->cfg.ring_size;
	q->dq = (struct fp_devq){ .ops = &xdp_ops, .mac = x->mac, .queue_id = (uint16_t)queue_id,
				  .mtu = x->mtu, .native = x->cfg.mode != FP_XDP_SKB,
				  .rx_bufs = q->fill_target };
	if ((ret = pool_over_umem(q, queue_id))) {
		xdp_errf(err, errlen, "AF_XDP buffers for %s queue %u: %s", x->ifname, queue_id,
		         strerror(-ret));
		goto fail;
	}
	if ((ret = sock_bind(q, queue_id, err, errlen)))
		goto fail;
	if ((ret = bpf_map_update_elem(x->xsks_fd, &qid, &q->fd, BPF_ANY))) {
		xdp_errf(err, errlen, "registering the AF_XDP socket of %s queue %u: %s", x->ifname,
		         queue_id, strerror(-ret));
		goto fail;
	}
	fill_post(q);
	/* one reader for the ARP copies: queue 0's worker (the stack shares ARP with the
	 * others: rt/steer.c); without the map (an older filter left attached) none */
	if (queue_id == 0 && x->arps_fd >= 0)
		q->arps = ring_buffer__new(x->arps_fd, arp_copy, q, NULL);
	__atomic_fetch_add(&x->open_queues, 1, __ATOMIC_RELAXED);
	return &q->dq;
fail:
	if (q->xsk)
		xsk_socket__delete(q->xsk);
	if (q->umem)
		xsk_umem__delete(q->umem);
	queue_free(q);
	errno = -ret;
	return NULL;
}
