/* dpdk.c: a DPDK port behind the device ops: a queue pair per worker, zero-copy where the PMD allows. */
#include <assert.h>
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_mempool.h>

#include <flowplane/dev.h>
#include <flowplane/rss.h>

/*
 * The EAL gets our defaults, then the caller's arguments:
 *
 *   --no-pci --no-telemetry --log-level=*:warning -l 0 --file-prefix=fp<pid>, and
 *   --in-memory when huge pages are free, else --no-huge --no-shconf -m 512
 *
 * so two processes on one machine never share EAL state. rte_eal_init pins the calling
 * thread to lcore 0's CPU: its affinity is put back, as the workers are the runtime's own
 * threads. Each worker registers itself with the EAL when it opens its queue
 * (rte_thread_register: an lcore id, no change of affinity), so a DPDK mempool serves it
 * from a per-lcore cache: a get or put is then a few instructions inline instead of a
 * call into the mempool's ring (measured: ~55 instructions per mbuf, four per round trip;
 * docs/results.md). Without a free lcore id the pool is used uncached, which is as safe.
 * The first port found is configured with a queue pair per worker. A memif socket is
 * created under umask 077 (owner only).
 *
 * Zero-copy (the PMDs in zc_pmd_ok: memif in its copy mode, af_packet, tap). Each queue's
 * pool of buffers (ours, struct fp_pool) is also the PMD's mempool for that queue: a
 * DPDK mempool whose objects are rte_mbuf headers only, header i's data buffer being our
 * buffer i ("pinned external buffers", as rte_pktmbuf_pool_create_extbuf makes them), and
 * whose operations (zc_ops) are our pool's: the mempool taking headers (to fill a
 * worker's DPDK cache, from which the PMD allocates) takes buffers from our pool; giving
 * a header back drops one reference to its buffer. So a buffer and its header are one
 * thing with one owner at a time (our pool, DPDK's cache or the PMD, the stack), and
 *
 *   receive: the PMD writes a frame into buffer i; rx_burst hands our mbuf i to the stack
 *            with the header's offsets (no copy, nothing freed);
 *   send:    a one-segment frame of the queue's pool goes to the PMD as header i with the
 *            frame's offsets and its pinned buffer's count at 2, so the PMD's free of it
 *            only brings that to 1 and leaves header and buffer alone; the PMD has copied
 *            the frame out when its tx_burst returns, and tx_burst then drops the frame's
 *            reference (TCP keeps its own for retransmission).
 *
 * A frame of another pool, or of several segments, is copied into a buffer of the queue's
 * pool (as AF_XDP's tx_prepare does); a received chain (a frame bigger than one buffer) is
 * copied into one. The mempool's operations reach our pool through the queue's worker's
 * own cache when the worker calls, and through a spare cache under a lock from any other
 * thread (the EAL's at setup and teardown, a worker polling a queue lent to it); DPDK's
 * per-lcore cache in front (DPDK_ZC_CACHE) makes an allocation a few instructions inline
 * instead of a call through the operations table. Only PMDs that copy between their
 * rings and the mbufs by address, and are done with a sent mbuf when their tx_burst
 * returns, are zero-copy: af_xdp's PMD lays its own UMEM over the mempool's memory, and
 * memif's zero-copy mode its shared regions; those copy (as --dpdk-copy does anywhere):
 * each received DPDK mbuf is copied into a buffer of the queue's pool and freed at once;
 * each frame to send is copied into a DPDK mbuf of the port's own mempool.
 */
#define DPDK_BURST     64u
#define DPDK_MAX_ARGS  64
#define DPDK_MP_CACHE  256u   /* mbufs per worker's mempool cache (flushed above 1.5x) */
#define DPDK_MEMIF_WAIT_MS 5000u /* a memif client waits this long for its server */
#define DPDK_RETA_MAX  2048u  /* the largest RSS table we program (ice's) */
#define DPDK_KEY_MAX   64u
#define DPDK_QUEUES_MAX 1024u /* queues the interrupt thread waits for (all ports) */
#define DPDK_BUF       2048u  /* bytes per buffer of a queue's pool, headroom included */
#define DPDK_BUF_BIG   4096u  /* the same for af_packet, whose frames take 2016 bytes */
#define DPDK_ZC_CACHE  32u    /* zero-copy: headers per worker's mempool cache */

/* A queue's pool as the PMD's mempool (zero-copy, above). */
struct dpdk_zc {
	struct fp_pool *pool;      /* the queue's buffers, ours and the PMD's alike */
	struct rte_mempool *mp;    /* a header per buffer; its operations are zc_ops */
	struct rte_mbuf **hdr;     /* buffer index -> its header */
	uint8_t *region;           /* pool->data: buffer i at region + (i << shift) */
	unsigned shift;            /* log2 of the buffers' size */
	_Atomic(const void *) owner; /* the queue's worker (its &tls_mark), NULL when none */
	struct fp_pool_cache *owner_cache; /* that worker's cache on the pool */
	pthread_mutex_t lock;      /* any other thread takes it and uses spare */
	struct fp_pool_cache spare;
	bool ready;                /* headers laid over the buffers (before: populating) */
	_Atomic uint64_t nobuf;    /* PMD allocations refused: our pool was dry */
};

struct fp_dpdk {
	bool owns_eal;             /* fp_dpdk_open's: closing it cleans the EAL up */
	uint16_t port;
	unsigned index;            /* among the ports the EAL probed (one per --vdev) */
	unsigned n_queues;
	struct fp_dpdk_config cfg;
	struct rte_mempool *mp;
	struct rte_eth_dev_info info;
	struct fp_eth_addr mac;
	uint16_t mtu;
	/* RSS, where the PMD has it and several workers share the port (port_rss_*) */
	bool rss;                  /* the table and key below are the port's */
	bool rss_pending;          /* configured with our key; the table comes at start */
	uint16_t table[FP_RSS_GROUPS]; /* group -> queue (worker): g % n_queues */
	uint8_t rss_key[DPDK_KEY_MAX];
	char rss_why[160];         /* why not, for the startup line */
	struct dpdk_zc **zc;       /* per queue, when zero-copy; else NULL and mp is used */
	char copy_why[96];         /* why frames are copied ("" when zero-copy) */
	unsigned zc_buf;           /* zero-copy: bytes per buffer */
};

struct dpdk_q {
	struct fp_devq dq;         /* first: the ops are handed &dq */
	struct fp_dpdk *d;
	_Atomic bool bursting;     /* its worker is inside the PMD (burst_enter) */
	uint16_t qid;
	struct fp_dev_stats st;
	uint64_t tx_bad;           /* frames too long for one DPDK mbuf: dropped */
	bool registered;           /* the worker took an lcore id (rte_thread_register) */
	struct dpdk_zc *zc;        /* the queue's pool as the PMD's mempool, or NULL (copies) */
};

static struct dpdk_q *dq_of(struct fp_devq *q) { return fp_container_of(q, struct dpdk_q, dq); }

bool fp_dpdk_available(void) { return true; }

/* ---- the interrupt thread against the bursts ---- */

/*
 * DPDK runs the PMDs' control work in its interrupt thread. Version 22.11's memif does
 * not wait for the datapath there: when the peer leaves, memif_disconnect
 * (drivers/net/memif/memif_socket.c) clears the port's CONNECTED flag and at once unmaps
 * the rings and buffers, and a worker whose burst had passed that flag's check a moment
 * before reads unmapped memory. Seen (2026-11-29): a two-worker memif server died of
 * SIGSEGV in about 1 of 30 runs of test_dpdk.py's two-worker test, and, with polling
 * workers, within 3 to 52 departures of fp-memif-churn (bench/memif_churn.c) in every run;
 * its core: a worker in librte_net_memif reading a ring's head (the fault address a ring's
 * first page) while the interrupt thread was inside memif_disconnect.
 *
 * So the interrupt thread's work and the workers' bursts exclude each other. The
 * interrupt thread waits for events in epoll_wait and runs the callbacks they call for
 * until it waits again; this file defines epoll_wait (an executable's definition comes
 * before libc's for the libraries too), and, in that thread only (rte_thread_is_intr),
 * marks its callbacks' time: on return it raises intr_busy and waits until no worker is
 * inside a burst, and on entry lowers it. A worker marks itself bursting, then reads
 * intr_busy; if raised, it skips the burst (no frames, nothing sent this time) instead of
 * waiting. The two sides are Dekker's: a store then a load on each. The interrupt thread's
 * side pays the full barrier for both (membarrier: every running thread of the process
 * passes one), so a burst costs the worker only a store and a load; where the kernel has
 * no membarrier, the worker fences each burst itself. Every other thread's epoll_wait is
 * libc's (epoll_pwait without a mask, the same call).
 */

static _Atomic bool intr_guard;    /* set before the EAL starts its interrupt thread */
static _Atomic bool intr_busy;     /* the interrupt thread runs callbacks: no bursts */
static bool burst_fence;           /* no membarrier here: the workers fence each burst */
static pthread_mutex_t queues_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dpdk_q *queues[DPDK_QUEUES_MAX];

static bool burst_enter(struct dpdk_q *q)
{
	atomic_store_explicit(&q->bursting, true, memory_order_relaxed);
	if (burst_fence)
		atomic_thread_fence(memory_order_seq_cst);
	else
		atomic_signal_fence(memory_order_seq_cst);   /* the store stays before the load */
	if (fp_likely(!atomic_load_explicit(&intr_busy, memory_order_relaxed)))
		return true;
	atomic_store_explicit(&q->bursting, false, memory_order_release);
	return false;
}

static void burst_leave(struct dpdk_q *q)
{
	atomic_store_explicit(&q->bursting, false, memory_order_release);
}

static void intr_exclude(void)
{
	atomic_store_explicit(&intr_busy, true, memory_order_relaxed);
	if (!burst_fence)
		syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	atomic_thread_fence(memory_order_seq_cst);
	pthread_mutex_lock(&queues_lock);
	for (unsigned i = 0; i < DPDK_QUEUES_MAX; i++)
		while (queues[i] && atomic_load_explicit(&queues[i]->bursting, memory_order_acquire))
			sched_yield();   /* a burst is short; its worker may be preempted */
	pthread_mutex_unlock(&queues_lock);
}

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	bool intr = atomic_load_explicit(&intr_guard, memory_order_relaxed) && rte_thread_is_intr();
	int n;

	if (intr)
		atomic_store_explicit(&intr_busy, false, memory_order_release);
	n = epoll_pwait(epfd, events, maxevents, timeout, NULL);
	if (intr) {
		int e = errno;

		intr_exclude();
		errno = e;
	}
	return n;
}

/* Before rte_eal_init starts the interrupt thread: membarrier registered (or else each
 * burst fences), and epoll_wait looks out for that thread from now on. */
static void intr_guard_start(void)
{
	burst_fence = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0;
	atomic_store(&intr_guard, true);
}

static bool queue_watch(struct dpdk_q *q, bool on)
{
	bool done = false;

	pthread_mutex_lock(&queues_lock);
	for (unsigned i = 0; i < DPDK_QUEUES_MAX && !done; i++)
		if (queues[i] == (on ? NULL : q)) {
			queues[i] = on ? q : NULL;
			done = true;
		}
	pthread_mutex_unlock(&queues_lock);
	return done;
}

/* ---- zero-copy: a queue's pool as the PMD's mempool ---- */

static __thread char tls_mark;   /* its address names the calling thread */

static struct fp_mbuf *zc_mbuf(const struct dpdk_zc *z, const struct rte_mbuf *r)
{
	return &z->pool->mbufs[((uint8_t *)r->buf_addr - z->region) >> z->shift];
}

/* The calling thread's cache on @z's pool: the worker's own, or the spare one, locked. */
static struct fp_pool_cache *zc_enter(struct dpdk_zc *z)
{
	if (fp_likely(atomic_load_explicit(&z->owner, memory_order_relaxed) == &tls_mark))
		return z->owner_cache;
	pthread_mutex_lock(&z->lock);
	return &z->spare;
}

static void zc_leave(struct dpdk_zc *z, struct fp_pool_cache *c)
{
	if (c == &z->spare)
		pthread_mutex_unlock(&z->lock);
}

/* Headers given back (a DPDK cache flushed, or overflowing with receive mbufs the PMD or
 * rx_burst freed): each buffer loses the reference its header held. */
static int zc_enqueue(struct rte_mempool *mp, void *const *objs, unsigned n)
{
	struct dpdk_zc *z = mp->pool_config;
	struct fp_pool_cache *c;

	if (!z->ready)
		return 0;   /* rte_mempool_populate_default's: the buffers start in our pool */
	c = zc_enter(z);
	for (unsigned i = 0; i < n; i++) {
		struct fp_mbuf *m = zc_mbuf(z, objs[i]);

		if (fp_unlikely(m->next))
			fp_mbuf_free(c, m);
		else if (--m->refcnt == 0)   /* else TCP keeps it for retransmission */
			fp_pool_put(c, m);
	}
	zc_leave(z, c);
	return 0;
}

/*
 * Headers for DPDK: buffers of our pool and their headers. A free buffer's header is as
 * DPDK keeps a free mbuf (one reference, no next segment, nb_segs 1, its pinned buffer's
 * count 1) without being reset here: every way a buffer comes back leaves it so
 * (zc_header_init; rte_pktmbuf_free; a sent frame, whose header tx_prepare set so but for
 * the count the PMD's free brought back to 1, or tx_unprepare did; and a received frame,
 * whose header the PMD left so unless it chained, and a chain is freed by
 * rte_pktmbuf_free).
 */
static int zc_dequeue(struct rte_mempool *mp, void **objs, unsigned n)
{
	struct dpdk_zc *z = mp->pool_config;
	struct fp_pool_cache *c = zc_enter(z);

	for (unsigned i = 0; i < n; i++) {
		struct fp_mbuf *m = fp_pool_get(c);

		if (!m) {
			while (i--)
				fp_mbuf_free(c, zc_mbuf(z, objs[i]));
			zc_leave(z, c);
			/* A refill of a worker's DPDK cache asks for more than the cache holds and,
			 * refused, falls back to what the PMD asked for: not counted. A refusal of
			 * that: memif leaves the frame in its ring (the peer's sends stall),
			 * af_packet and tap drop it; counted either way, as a receive that found no
			 * buffer. */
			if (n <= DPDK_ZC_CACHE)
				atomic_fetch_add_explicit(&z->nobuf, 1, memory_order_relaxed);
			return -ENOBUFS;
		}
		objs[i] = z->hdr[m->index];
	}
	zc_leave(z, c);
	return 0;
}

static unsigned zc_count(const struct rte_mempool *mp)
{
	const struct dpdk_zc *z = mp->pool_config;

	return (unsigned)(z->pool->n_bufs - fp_pool_in_use(z->pool));   /* a hint */
}

static int zc_alloc(struct rte_mempool *mp) { return mp->pool_config ? 0 : -EINVAL; }
static void zc_free(struct rte_mempool *mp) { (void)mp; }

static struct rte_mempool_ops zc_ops = {
	.name = "flowplane_pool",
	.alloc = zc_alloc,
	.free = zc_free,
	.enqueue = zc_enqueue,
	.dequeue = zc_dequeue,
	.get_count = zc_count,
};

/* A pinned buffer's last extra reference gone (someone had attached an mbuf to ours):
 * the header goes back as rte_pktmbuf_free would have sent it. */
static void zc_pinned_free(void *addr, void *opaque)
{
	struct rte_mbuf *r = opaque;

	(void)addr;
	rte_mbuf_ext_refcnt_set(r->shinfo, 1);
	r->ol_flags = RTE_MBUF_F_EXTERNAL;
	r->next = NULL;
	r->nb_segs = 1;
	rte_mbuf_raw_free(r);
}

/* rte_mempool_obj_iter's: header @idx over our buffer @idx, as a free pinned mbuf. */
static void zc_header_init(struct rte_mempool *mp, void *arg, void *obj, unsigned idx)
{
	struct dpdk_zc *z = arg;
	struct rte_mbuf *r = obj;
	struct rte_mbuf_ext_shared_info *sh = (void *)(r + 1);   /* the element's tail */
	uint8_t *buf = z->region + ((size_t)idx << z->shift);

	memset(r, 0, sizeof(*r));
	r->buf_addr = buf;
	/* no DMA on these PMDs; IOVA as VA where the EAL runs so */
	rte_mbuf_iova_set(r, rte_eal_iova_mode() == RTE_IOVA_VA ? (rte_iova_t)(uintptr_t)buf
								 : RTE_BAD_IOVA);
	r->buf_len = (uint16_t)(1u << z->shift);
	r->data_off = RTE_PKTMBUF_HEADROOM;
	r->pool = mp;
	r->nb_segs = 1;
	r->port = RTE_MBUF_PORT_INVALID;
	r->ol_flags = RTE_MBUF_F_EXTERNAL;
	rte_mbuf_refcnt_set(r, 1);
	r->shinfo = sh;
	sh->free_cb = zc_pinned_free;
	sh->fcb_opaque = r;
	rte_mbuf_ext_refcnt_set(sh, 1);
	z->hdr[idx] = r;
}

static void zc_destroy(struct dpdk_zc *z)
{
	if (!z)
		return;
	rte_mempool_free(z->mp);
	if (z->pool) {
		fp_pool_cache_flush(&z->spare);
		fp_pool_destroy(z->pool);
	}
	pthread_mutex_destroy(&z->lock);
	free(z->hdr);
	free(z);
}

/* Queue @qi's pool of @bufsz-byte buffers and the mempool over it; NULL with @err. */
static struct dpdk_zc *zc_create(struct fp_dpdk *d, unsigned qi, unsigned bufsz, char *err,
				 size_t errlen)
{
	static bool registered;
	struct fp_pool_params pp = { .name = "dpdk", .n_bufs = d->cfg.frames,
				     .buf_size = bufsz, .headroom = RTE_PKTMBUF_HEADROOM };
	struct rte_pktmbuf_pool_private priv = {
		.mbuf_data_room_size = (uint16_t)bufsz, .mbuf_priv_size = 0,
		.flags = RTE_PKTMBUF_POOL_F_PINNED_EXT_BUF,
	};
	struct dpdk_zc *z = calloc(1, sizeof(*z));
	char name[RTE_MEMPOOL_NAMESIZE];
	int rc;

	if (!registered && rte_mempool_register_ops(&zc_ops) < 0) {
		snprintf(err, errlen, "DPDK refused our mempool operations: %s",
			 rte_strerror(rte_errno));
		free(z);
		return NULL;
	}
	registered = true;
	if (!z || pthread_mutex_init(&z->lock, NULL)) {
		free(z);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!(z->pool = fp_pool_create(&pp)) || fp_pool_cache_init(&z->spare, z->pool) ||
	    !(z->hdr = calloc(pp.n_bufs, sizeof(*z->hdr)))) {
		snprintf(err, errlen, "buffers for DPDK queue %u: %s", qi, strerror(errno));
		goto fail;
	}
	z->region = z->pool->data;
	z->shift = (unsigned)__builtin_ctz(bufsz);
	snprintf(name, sizeof(name), "fp%u_zc%u", d->index, qi);
	z->mp = rte_mempool_create_empty(name, pp.n_bufs, sizeof(struct rte_mbuf) +
					 sizeof(struct rte_mbuf_ext_shared_info), DPDK_ZC_CACHE,
					 sizeof(struct rte_pktmbuf_pool_private), SOCKET_ID_ANY, 0);
	if (!z->mp) {
		snprintf(err, errlen, "DPDK mempool for queue %u: %s (more memory: -m in --dpdk)",
			 qi, rte_strerror(rte_errno));
		goto fail;
	}
	if ((rc = rte_mempool_set_ops_byname(z->mp, zc_ops.name, z))) {
		snprintf(err, errlen, "DPDK mempool for queue %u: %s", qi, rte_strerror(-rc));
		goto fail;
	}
	rte_pktmbuf_pool_init(z->mp, &priv);
	if ((rc = rte_mempool_populate_default(z->mp)) < 0 || (unsigned)rc != pp.n_bufs ||
	    rte_mempool_obj_iter(z->mp, zc_header_init, z) != pp.n_bufs) {
		snprintf(err, errlen, "DPDK mempool for queue %u: %s (more memory: -m in --dpdk)",
			 qi, rc < 0 ? rte_strerror(-rc) : "not every buffer got a header");
		goto fail;
	}
	z->ready = true;
	return z;
fail:
	zc_destroy(z);
	return NULL;
}

/* ---- the datapath ---- */

static unsigned dpdk_rx_burst(struct fp_devq *dq, struct fp_mbuf **out, unsigned max)
{
	struct dpdk_q *q = dq_of(dq);
	struct dpdk_zc *z = q->zc;
	struct rte_mbuf *in[DPDK_BURST];
	unsigned n, got = 0;

	if (!burst_enter(q))
		return 0;
	n = rte_eth_rx_burst(q->d->port, q->qid, in, (uint16_t)(max < DPDK_BURST ? max : DPDK_BURST));
	burst_leave(q);
	for (unsigned i = 0; i < n; i++) {
		uint32_t len = rte_pktmbuf_pkt_len(in[i]);
		struct fp_mbuf *m;
		uint8_t *p;

		if (fp_likely(z && in[i]->pool == z->mp && in[i]->nb_segs == 1 && len)) {
			/* the frame lies in our buffer: the header's offsets are the mbuf's */
			m = zc_mbuf(z, in[i]);
			m->data_off = in[i]->data_off;
			m->data_len = m->pkt_len = len;
			m->port = q->qid;
			out[got++] = m;
			q->st.rx_bytes += len;
			continue;
		}
		m = fp_pool_get(&dq->cache);

		if (!m) {
			q->st.rx_fill_empty++;   /* no buffer: the frame is dropped, as by a NIC */
		} else if (!len || !(p = fp_mbuf_append(m, len))) {
			q->st.invalid_descs++;
			fp_mbuf_free(&dq->cache, m);
		} else {
			const void *src = rte_pktmbuf_read(in[i], 0, len, p);

			if (src != p)
				memcpy(p, src, len);
			m->port = q->qid;
			out[got++] = m;
			q->st.rx_bytes += len;
		}
		rte_pktmbuf_free(in[i]);
	}
	q->st.rx_frames += got;
	return got;
}

/*
 * @m as a DPDK mbuf to send, in *@r: with zero-copy, the header of its own buffer when it
 * is one buffer of the queue's pool (*@copy NULL: the frame's reference goes with it), else
 * the header of a fresh buffer holding a copy (*@copy that buffer); without, a copy in a
 * fresh mbuf of the port's mempool. 1: ready; 0: @m cannot be sent (empty, too long);
 * -1: no buffer for the copy (the caller stops and keeps @m).
 */
static int tx_prepare(struct dpdk_q *q, struct fp_mbuf *m, struct rte_mbuf **r,
		      struct fp_mbuf **copy)
{
	struct dpdk_zc *z = q->zc;
	struct fp_mbuf *c;

	*copy = NULL;
	if (!m->pkt_len || m->pkt_len > q->d->mtu + 18u)   /* Ethernet + VLAN */
		return 0;
	if (z) {
		c = m;
		if (fp_unlikely(m->pool != z->pool || m->next)) {
			if (!(c = fp_pool_get(&q->dq.cache)))
				return -1;
			if (m->pkt_len > fp_mbuf_tailroom(c)) {   /* a jumbo MTU: one buffer */
				fp_mbuf_free(&q->dq.cache, c);
				return 0;
			}
			c->data_len = c->pkt_len = fp_mbuf_read(m, 0, fp_mbuf_data(c), m->pkt_len);
			*copy = c;
		}
		*r = z->hdr[c->index];
		(*r)->data_off = c->data_off;
		(*r)->data_len = (uint16_t)c->data_len;
		(*r)->pkt_len = c->data_len;
		(*r)->nb_segs = 1;
		(*r)->next = NULL;
		(*r)->ol_flags = RTE_MBUF_F_EXTERNAL;
		(*r)->tx_offload = 0;
		(*r)->packet_type = 0;
		rte_mbuf_refcnt_set(*r, 1);
		/* the PMD's free of it then only drops this to 1 and leaves the header and its
		 * buffer where they are: tx_burst drops the frame's reference itself */
		rte_mbuf_ext_refcnt_set((*r)->shinfo, 2);
		return 1;
	}
	if (!(*r = rte_pktmbuf_alloc(q->d->mp)))
		return -1;
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(*r, (uint16_t)m->pkt_len);
	if (!p) {                                       /* longer than one DPDK mbuf */
		rte_pktmbuf_free(*r);
		return 0;
	}
	for (const struct fp_mbuf *s = m; s; s = s->next) {
		memcpy(p, fp_mbuf_data(s), s->data_len);
		p += s->data_len;
	}
	return 1;
}

/* The PMD did not take @r (prepared with @copy): undo what tx_prepare did. */
static void tx_unprepare(struct dpdk_q *q, struct rte_mbuf *r, struct fp_mbuf *copy)
{
	if (!q->zc) {
		rte_pktmbuf_free(r);
		return;
	}
	rte_mbuf_ext_refcnt_set(r->shinfo, 1);   /* a free header's */
	if (copy)
		fp_mbuf_free(&q->dq.cache, copy);
}

static unsigned dpdk_tx_burst(struct fp_devq *dq, struct fp_mbuf **frames, unsigned n)
{
	struct dpdk_q *q = dq_of(dq);
	struct rte_mbuf *out[DPDK_BURST];
	struct fp_mbuf *copies[DPDK_BURST];
	uint32_t lens[DPDK_BURST];
	unsigned taken = 0;   /* frames[0, taken) consumed: sent, or dropped as unsendable */

	while (taken < n) {
		unsigned k = 0, sent;
		int rc = 1;

		while (taken + k < n && k < DPDK_BURST) {
			struct fp_mbuf *m = frames[taken + k];

			if ((rc = tx_prepare(q, m, &out[k], &copies[k])) <= 0)
				break;
			lens[k++] = m->pkt_len;
		}
		if (!k) {
			if (rc < 0)
				break;                  /* no buffer for a copy: offered again later */
			q->tx_bad++;
			fp_mbuf_free(&dq->cache, frames[taken++]);
			continue;
		}
		if (!burst_enter(q)) {
			for (unsigned i = 0; i < k; i++)   /* offered again next time */
				tx_unprepare(q, out[i], copies[i]);
			break;
		}
		sent = rte_eth_tx_burst(q->d->port, q->qid, out, (uint16_t)k);
		burst_leave(q);
		for (unsigned i = 0; i < sent; i++) {
			/* zero-copy: these PMDs are done with a frame when their tx_burst returns
			 * (zc_pmd_ok); their free left its header to us (tx_prepare) */
			assert(!q->zc || rte_mbuf_ext_refcnt_read(out[i]->shinfo) == 1);
			q->st.tx_bytes += lens[i];
			if (copies[i])
				fp_mbuf_free(&dq->cache, copies[i]);
			fp_mbuf_free(&dq->cache, frames[taken + i]);
		}
		q->st.tx_frames += sent;
		taken += sent;
		if (sent < k) {                         /* the ring is full */
			for (unsigned i = sent; i < k; i++)
				tx_unprepare(q, out[i], copies[i]);
			q->st.tx_full += k - sent;
			break;
		}
		if (rc < 0)
			break;                          /* no buffer for a copy mid-batch */
	}
	return taken;
}

static unsigned dpdk_reclaim(struct fp_devq *dq) { (void)dq; return 0; }
static int dpdk_wait_fd(struct fp_devq *dq) { (void)dq; return -1; }

static unsigned dpdk_rx_ready(struct fp_devq *dq)
{
	struct dpdk_q *q = dq_of(dq);
	int n;

	if (!burst_enter(q))
		return 0;
	n = rte_eth_rx_queue_count(q->d->port, q->qid);
	burst_leave(q);
	return n > 0 ? (unsigned)n : 0;   /* -ENOTSUP on some PMDs (memif) */
}

static void dpdk_stats(struct fp_devq *dq, struct fp_dev_stats *out)
{
	struct dpdk_q *q = dq_of(dq);
	struct rte_eth_stats es;

	*out = q->st;
	out->invalid_descs += q->tx_bad;
	if (q->zc)
		out->rx_fill_empty += atomic_load_explicit(&q->zc->nobuf, memory_order_relaxed);
	if (!rte_eth_stats_get(q->d->port, &es)) {
		out->rx_dropped += es.imissed + es.rx_nombuf;
		out->tx_dropped += es.oerrors;
	}
}

static void dpdk_queue_close(struct fp_devq *dq)
{
	struct dpdk_q *q = dq_of(dq);

	queue_watch(q, false);
	if (q->registered) {
		/* the lcore's cached mbufs go back to their pool before its id is given up
		 * (zero-copy: through zc_enqueue into this worker's cache, flushed next) */
		struct rte_mempool *mp = q->zc ? q->zc->mp : q->d->mp;

		rte_mempool_cache_flush(rte_mempool_default_cache(mp, rte_lcore_id()), mp);
	}
	if (q->zc) {
		/* the pool is the port's (the PMD may hold buffers until it stops) */
		atomic_store_explicit(&q->zc->owner, NULL, memory_order_relaxed);
		q->zc->owner_cache = NULL;
		fp_pool_cache_flush(&dq->cache);
	} else {
		fp_pool_cache_flush(&dq->cache);
		fp_pool_destroy(dq->pool);
	}
	if (q->registered)
		rte_thread_unregister();
	free(q);
}

static const struct fp_dev_ops dpdk_ops = {
	.name = "dpdk",
	.rx_burst = dpdk_rx_burst,
	.tx_burst = dpdk_tx_burst,
	.reclaim = dpdk_reclaim,
	.wait_fd = dpdk_wait_fd,
	.rx_ready = dpdk_rx_ready,
	.stats = dpdk_stats,
	.close = dpdk_queue_close,
};

struct fp_devq *fp_dpdk_queue_open(struct fp_dpdk *d, unsigned qid, char *err, size_t errlen)
{
	struct fp_pool_params pp = { .name = "dpdk", .n_bufs = d->cfg.frames, .buf_size = DPDK_BUF };
	struct dpdk_q *q;
	int rc;

	if (qid >= d->n_queues) {
		snprintf(err, errlen, "queue %u out of range: the port has %u", qid, d->n_queues);
		errno = ERANGE;
		return NULL;
	}
	if (!(q = calloc(1, sizeof(*q)))) {
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	q->d = d;
	q->qid = (uint16_t)qid;
	q->dq = (struct fp_devq){ .ops = &dpdk_ops, .mac = d->mac, .queue_id = (uint16_t)qid,
				  .mtu = d->mtu, .rx_bufs = d->cfg.ring_size };
	q->zc = d->zc ? d->zc[qid] : NULL;
	if (q->zc && atomic_load(&q->zc->owner)) {
		snprintf(err, errlen, "DPDK queue %u is open already", qid);
		free(q);
		errno = EBUSY;
		return NULL;
	}
	q->dq.pool = q->zc ? q->zc->pool : fp_pool_create(&pp);
	if (!q->dq.pool || (rc = fp_pool_cache_init(&q->dq.cache, q->dq.pool))) {
		snprintf(err, errlen, "buffers for DPDK queue %u: %s", qid,
			 strerror(q->dq.pool ? -rc : errno));
		if (q->dq.pool && !q->zc)
			fp_pool_destroy(q->dq.pool);
		free(q);
		return NULL;
	}
	if (!queue_watch(q, true)) {
		snprintf(err, errlen, "DPDK queue %u: more than %u queues open in this process",
			 qid, DPDK_QUEUES_MAX);
		fp_pool_cache_flush(&q->dq.cache);
		if (!q->zc)
			fp_pool_destroy(q->dq.pool);
		free(q);
		errno = ENOSPC;
		return NULL;
	}
	if (q->zc) {   /* from now on the PMD's allocations on this thread use our cache */
		q->zc->owner_cache = &q->dq.cache;
		atomic_store_explicit(&q->zc->owner, &tls_mark, memory_order_release);
	}
	/* The calling thread is the queue's worker: an lcore id gives it the mempool's cache. */
	q->registered = rte_lcore_id() == LCORE_ID_ANY && rte_thread_register() == 0 &&
			rte_lcore_id() != LCORE_ID_ANY;
	return &q->dq;
}

/* ---- the port ---- */

static bool huge_pages_free(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	unsigned long n = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "HugePages_Free: %lu", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n > 0;
}

/* Our defaults, then @args split on spaces, into @argv (strings in @buf). */
static int eal_argv(const char *args, char *buf, size_t buflen, char **argv, char *err,
		    size_t errlen)
{
	int argc = 0;
	size_t used;
	char *tok, *save = NULL;

	used = (size_t)snprintf(buf, buflen, "flowplane --no-pci --no-telemetry "
				"--log-level=*:warning -l 0 --file-prefix=fp%d %s %s", (int)getpid(),
				huge_pages_free() ? "--in-memory" : "--no-huge --no-shconf -m 512",
				args ? args : "");
	if (used >= buflen) {
		snprintf(err, errlen, "--dpdk: the EAL arguments are too long");
		return -1;
	}
	for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		if (argc == DPDK_MAX_ARGS - 1) {
			snprintf(err, errlen, "--dpdk: more than %d EAL arguments", DPDK_MAX_ARGS - 2);
			return -1;
		}
		argv[argc++] = tok;
	}
	argv[argc] = NULL;
	return argc;
}

static bool eal_up;   /* the EAL initialises once per process */

/* A port's state with @cfg's sizes, defaults filled in; NULL (ENOMEM). */
static struct fp_dpdk *dpdk_new(const struct fp_dpdk_config *cfg)
{
	struct fp_dpdk *d = calloc(1, sizeof(*d));

	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	d->cfg = *cfg;
	d->cfg.frames = cfg->frames ? cfg->frames : 4096;
	d->cfg.ring_size = cfg->ring_size ? cfg->ring_size : 1024;
	d->n_queues = cfg->n_queues ? cfg->n_queues : 1;
	return d;
}

/* Whether the port's PMD can take our pool as its mempool (zero-copy, above); if not,
 * why not in d->copy_why. */
static bool zc_pmd_ok(struct fp_dpdk *d)
{
	static const char *const ok[] = { "net_memif", "net_af_packet", "net_tap" };
	const char *drv = d->info.driver_name;
	bool known = false;

	for (unsigned i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		known |= !strcmp(drv, ok[i]);
	if (d->cfg.copy)
		snprintf(d->copy_why, sizeof(d->copy_why), "frames copied: --dpdk-copy");
	else if (!known)
		snprintf(d->copy_why, sizeof(d->copy_why), "frames copied: %s's PMD keeps buffers "
			 "of its own", drv);
	else if (!strcmp(drv, "net_memif") && d->cfg.args && strstr(d->cfg.args, "zero-copy=yes"))
		snprintf(d->copy_why, sizeof(d->copy_why), "frames copied: memif's zero-copy mode "
			 "sends from its own regions");
	else
		d->copy_why[0] = 0;
	d->zc_buf = !strcmp(drv, "net_af_packet") ? DPDK_BUF_BIG : DPDK_BUF;
	return !d->copy_why[0];
}

static void zc_destroy_all(struct fp_dpdk *d)
{
	for (unsigned i = 0; d->zc && i < d->n_queues; i++)
		zc_destroy(d->zc[i]);
	free(d->zc);
	d->zc = NULL;
}

/* Configure and start the @index-th port the EAL probed (0 or -1 with @err). */
/*
 * RSS where the PMD has it and several workers share the port, as IX's NIC steers (§4.4):
 * Toeplitz with the symmetric key (repeated over a longer key; an IPv4 4-tuple's hash
 * reads only its first 16 bytes), IPv4 TCP and UDP hashed over addresses and ports, and
 * a table whose entry i names the queue of flow group i % 128 (g % n_queues): the stacks
 * pick the ports of their outgoing connections by that table and key, so replies come
 * home. Without it (memif, af_packet, af_xdp and tap here) a frame stays on the queue it
 * arrived on: the peer chose it (memif pairs queue q with the peer's q).
 */
static void port_rss_conf(struct fp_dpdk *d, struct rte_eth_conf *conf)
{
	uint64_t hf = d->info.flow_type_rss_offloads &
		      (RTE_ETH_RSS_NONFRAG_IPV4_TCP | RTE_ETH_RSS_NONFRAG_IPV4_UDP);
	unsigned ks = d->info.hash_key_size, rs = d->info.reta_size;

	if (d->n_queues < 2)
		return;
	if (!(hf & RTE_ETH_RSS_NONFRAG_IPV4_TCP))
		snprintf(d->rss_why, sizeof(d->rss_why), "%s has no RSS for TCP over IPv4",
			 d->info.driver_name);
	else if (ks < 16 || ks > DPDK_KEY_MAX)
		snprintf(d->rss_why, sizeof(d->rss_why), "%s's RSS key is %u bytes",
			 d->info.driver_name, ks);
	else if (rs < FP_RSS_GROUPS || rs % FP_RSS_GROUPS || rs > DPDK_RETA_MAX)
		snprintf(d->rss_why, sizeof(d->rss_why), "%s's RSS table has %u entries, not a "
			 "multiple of the %u flow groups", d->info.driver_name, rs, FP_RSS_GROUPS);
	if (d->rss_why[0])
		return;
	for (unsigned i = 0; i < ks; i++)
		d->rss_key[i] = fp_rss_key_symmetric[i % FP_RSS_KEY_LEN];
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
		d->table[g] = (uint16_t)(g % d->n_queues);
	conf->rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
	conf->rx_adv_conf.rss_conf = (struct rte_eth_rss_conf){
		.rss_key = d->rss_key, .rss_key_len = (uint8_t)ks, .rss_hf = hf };
	d->rss_pending = true;
}

/* The started port's table, then the table and key read back. */
static void port_rss_table(struct fp_dpdk *d)
{
	static struct rte_eth_rss_reta_entry64 reta[DPDK_RETA_MAX / RTE_ETH_RETA_GROUP_SIZE];
	uint8_t key[DPDK_KEY_MAX];
	struct rte_eth_rss_conf rc = { .rss_key = key, .rss_key_len = sizeof(key) };
	unsigned rs = d->info.reta_size;
	int err;

	if (!d->rss_pending)
		return;
	d->rss_pending = false;
	memset(reta, 0, sizeof(reta));
	for (unsigned i = 0; i < rs; i++) {
		reta[i / RTE_ETH_RETA_GROUP_SIZE].mask |= 1ull << (i % RTE_ETH_RETA_GROUP_SIZE);
		reta[i / RTE_ETH_RETA_GROUP_SIZE].reta[i % RTE_ETH_RETA_GROUP_SIZE] =
			d->table[i % FP_RSS_GROUPS];
	}
	if ((err = rte_eth_dev_rss_reta_update(d->port, reta, (uint16_t)rs))) {
		snprintf(d->rss_why, sizeof(d->rss_why), "%s refused the RSS table (%s)",
			 d->info.driver_name, rte_strerror(-err));
		return;
	}
	for (unsigned i = 0; i < rs / RTE_ETH_RETA_GROUP_SIZE; i++)
		memset(reta[i].reta, 0xff, sizeof(reta[i].reta));
	rc.rss_key_len = d->info.hash_key_size;
	if (rte_eth_dev_rss_reta_query(d->port, reta, (uint16_t)rs) ||
	    rte_eth_dev_rss_hash_conf_get(d->port, &rc) ||
	    memcmp(key, d->rss_key, d->info.hash_key_size)) {
		snprintf(d->rss_why, sizeof(d->rss_why), "%s did not keep the RSS key or table",
			 d->info.driver_name);
		return;
	}
	for (unsigned i = 0; i < rs; i++)
		if (reta[i / RTE_ETH_RETA_GROUP_SIZE].reta[i % RTE_ETH_RETA_GROUP_SIZE] !=
		    d->table[i % FP_RSS_GROUPS]) {
			snprintf(d->rss_why, sizeof(d->rss_why), "%s did not keep the RSS table",
				 d->info.driver_name);
			return;
		}
	d->rss = true;
}

/*
 * The port's mbuf pool for af_xdp's PMD without huge pages. That PMD registers the pool's
 * memory as its UMEM: from the first chunk's page, populated size x object size bytes,
 * every mbuf addressed by its offset there. Without huge pages, rte_pktmbuf_pool_create
 * keeps each object inside one 4 KiB page (IOVA-contiguous objects), one ~2.4 KiB mbuf a
 * page, so most mbufs lie past the registered length: the kernel takes their descriptors
 * as invalid and drops the frames without a count the PMD reports (measured: 1,368 of
 * 60,000 frames through a veth pair arrived; with huge pages all). Objects packed one after
 * another (no IOVA contiguity: the af_xdp PMD does no DMA of its own; the kernel copies)
 * are the layout the PMD assumes. NULL with rte_errno.
 */
static struct rte_mempool *pool_packed(const char *name, unsigned n)
{
	struct rte_mempool *mp = rte_mempool_create_empty(
		name, n, sizeof(struct rte_mbuf) + RTE_MBUF_DEFAULT_BUF_SIZE, DPDK_MP_CACHE,
		sizeof(struct rte_pktmbuf_pool_private), SOCKET_ID_ANY, RTE_MEMPOOL_F_NO_IOVA_CONTIG);
	int rc;

	if (!mp)
		return NULL;
	if ((rc = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL))) {
		rte_mempool_free(mp);
		rte_errno = -rc;
		return NULL;
	}
	rte_pktmbuf_pool_init(mp, NULL);
	if ((rc = rte_mempool_populate_default(mp)) < 0 || (unsigned)rc != n) {
		rte_mempool_free(mp);
		rte_errno = rc < 0 ? -rc : ENOMEM;
		return NULL;
	}
	rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
	return mp;
}

static int port_setup(struct fp_dpdk *d, unsigned index, char *err, size_t errlen)
{
	struct rte_eth_conf conf;
	struct rte_ether_addr mac;
	char name[32];
	unsigned nb, found = 0;
	uint16_t port;
	mode_t um;
	int rc;

	if (!rte_eth_dev_count_avail()) {
		snprintf(err, errlen, "DPDK found no port: the --vdev did not probe (is its PMD "
			 "installed? Debian: librte-net-memif23 and the like)");
		goto fail;
	}
	RTE_ETH_FOREACH_DEV(port) {
		if (found++ == index) {
			d->port = port;
			break;
		}
	}
	if (found <= index) {
		snprintf(err, errlen, "DPDK has %u port(s): no port %u (one --vdev each)", found,
			 index);
		goto fail;
	}
	d->index = index;
	rte_eth_dev_info_get(d->port, &d->info);
	if (d->n_queues > d->info.max_rx_queues || d->n_queues > d->info.max_tx_queues) {
		snprintf(err, errlen, "%s has %u rx and %u tx queues; %u workers need as many",
			 d->info.driver_name, d->info.max_rx_queues, d->info.max_tx_queues,
			 d->n_queues);
		goto fail;
	}
	if (zc_pmd_ok(d)) {
		if (!(d->zc = calloc(d->n_queues, sizeof(*d->zc)))) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		for (unsigned i = 0; i < d->n_queues; i++)
			if (!(d->zc[i] = zc_create(d, i, d->zc_buf, err, errlen)))
				goto fail;
	} else {
		/* rings, bursts, and what each worker's cache may hold (up to 1.5x its size) */
		nb = d->n_queues * (2 * d->cfg.ring_size + 2 * DPDK_BURST + DPDK_MP_CACHE * 3 / 2) +
		     1024;
		snprintf(name, sizeof(name), "fp_dpdk%u", index);
		d->mp = !strcmp(d->info.driver_name, "net_af_xdp") && !rte_eal_has_hugepages() ?
			pool_packed(name, nb) :
			rte_pktmbuf_pool_create(name, nb, DPDK_MP_CACHE, 0,
						RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
		if (!d->mp) {
			snprintf(err, errlen, "DPDK mbuf pool of %u: %s (more memory: -m in --dpdk)",
				 nb, rte_strerror(rte_errno));
			goto fail;
		}
	}
	memset(&conf, 0, sizeof(conf));
	port_rss_conf(d, &conf);
	rc = rte_eth_dev_configure(d->port, (uint16_t)d->n_queues, (uint16_t)d->n_queues, &conf);
	if (rc && d->rss_pending) {
		/* a PMD that lists RSS and refuses ours: without it, as before */
		snprintf(d->rss_why, sizeof(d->rss_why), "%s refused RSS with our key (%s)",
			 d->info.driver_name, rte_strerror(-rc));
		d->rss_pending = false;
		memset(&conf, 0, sizeof(conf));
		rc = rte_eth_dev_configure(d->port, (uint16_t)d->n_queues, (uint16_t)d->n_queues,
					   &conf);
	}
	if (rc) {
		snprintf(err, errlen, "configuring %s: %s", d->info.driver_name, rte_strerror(-rc));
		goto fail;
	}
	for (unsigned i = 0; i < d->n_queues; i++) {
		if ((rc = rte_eth_rx_queue_setup(d->port, (uint16_t)i, (uint16_t)d->cfg.ring_size,
						 SOCKET_ID_ANY, NULL, d->zc ? d->zc[i]->mp : d->mp)) ||
		    (rc = rte_eth_tx_queue_setup(d->port, (uint16_t)i, (uint16_t)d->cfg.ring_size,
						 SOCKET_ID_ANY, NULL))) {
			snprintf(err, errlen, "%s queue %u: %s%s", d->info.driver_name, i,
				 rte_strerror(-rc), !d->zc ? "" : " (zero-copy: its buffers are "
				 "ours, 128 bytes of headroom each; --dpdk-copy yes gives it its own)");
			goto fail;
		}
	}
	bool memif = !strcmp(d->info.driver_name, "net_memif");
	um = umask(077);
	rc = rte_eth_dev_start(d->port);
	/* A memif client starts by connecting to its server's socket, which refuses while the
	 * server is not up yet or has not yet taken the last client's disconnect (its listen
	 * backlog is one): wait for it a while, as a client of any server would. */
	for (unsigned t = 0; rc && memif && t < DPDK_MEMIF_WAIT_MS / 50; t++) {
		if (t == 0)
			fprintf(stderr, "flowplane: dpdk: waiting up to %u s for the memif peer\n",
				DPDK_MEMIF_WAIT_MS / 1000);
		usleep(50 * 1000);
		rc = rte_eth_dev_start(d->port);
	}
	umask(um);
	if (rc) {
		snprintf(err, errlen, "starting %s: %s%s", d->info.driver_name, rte_strerror(-rc),
			 !memif ? "" : " (no memif server accepted at the socket: is it running, "
			 "with role=server on the same socket path?)");
		goto fail;
	}
	port_rss_table(d);
	rte_eth_macaddr_get(d->port, &mac);
	memcpy(d->mac.b, mac.addr_bytes, 6);
	if (rte_eth_dev_get_mtu(d->port, &d->mtu) || !d->mtu)
		d->mtu = 1500;
	return 0;
fail:
	rte_mempool_free(d->mp);
	d->mp = NULL;
	zc_destroy_all(d);
	return -1;
}


struct fp_dpdk *fp_dpdk_open(const struct fp_dpdk_config *cfg, char *err, size_t errlen)
{
	static char buf[4096];
	char *argv[DPDK_MAX_ARGS];
	struct fp_dpdk *d;
	cpu_set_t cpus;
	mode_t um;
	int argc, rc;

	if (!cfg->args || !strstr(cfg->args, "--vdev") ) {
		snprintf(err, errlen, "the dpdk transport needs a device: --dpdk "
			 "'--vdev=net_memif0,role=server,socket=/run/fp.sock' (or net_af_packet0,"
			 "iface=IF; net_af_xdp0,iface=IF; net_tap0)");
		errno = EINVAL;
		return NULL;
	}
	if (eal_up) {
		snprintf(err, errlen, "DPDK is already initialised in this process");
		errno = EBUSY;
		return NULL;
	}
	if (!(d = dpdk_new(cfg)))
		return NULL;
	if ((argc = eal_argv(cfg->args, buf, sizeof(buf), argv, err, errlen)) < 0)
		goto fail;
	pthread_getaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	intr_guard_start();
	um = umask(077);   /* a memif socket is the owner's only */
	rc = rte_eal_init(argc, argv);
	umask(um);
	pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	if (rc < 0) {
		snprintf(err, errlen, "DPDK's EAL did not start (%s): check the --dpdk arguments; "
			 "--log-level=*:info says more", rte_strerror(rte_errno));
		goto fail;
	}
	eal_up = true;
	d->owns_eal = true;
	if (port_setup(d, 0, err, errlen))
		goto fail_eal;
	return d;
fail_eal:
	rte_eal_cleanup();   /* DPDK cannot start again in this process: eal_up stays */
fail:
	free(d);
	errno = EIO;
	return NULL;
}

struct fp_dpdk *fp_dpdk_open_next(const struct fp_dpdk *prev, const struct fp_dpdk_config *cfg,
				  char *err, size_t errlen)
{
	struct fp_dpdk *d;

	if (!prev || !eal_up) {
		snprintf(err, errlen, "DPDK's EAL is not up: open the first port with fp_dpdk_open");
		errno = EINVAL;
		return NULL;
	}
	if (!(d = dpdk_new(cfg)))
		return NULL;
	d->cfg.args = prev->cfg.args;
	if (port_setup(d, prev->index + 1u, err, errlen)) {
		free(d);
		errno = EIO;
		return NULL;
	}
	return d;
}

const char *fp_dpdk_driver(const struct fp_dpdk *d) { return d->info.driver_name; }

const char *fp_dpdk_copy_why(const struct fp_dpdk *d) { return d->zc ? NULL : d->copy_why; }

const uint16_t *fp_dpdk_steer_table(const struct fp_dpdk *d) { return d->rss ? d->table : NULL; }

const char *fp_dpdk_rss_why(const struct fp_dpdk *d) { return d->rss_why; }

unsigned fp_dpdk_rss_entries(const struct fp_dpdk *d) { return d->rss ? d->info.reta_size : 0; }

void fp_dpdk_close(struct fp_dpdk *d)
{
	if (!d)
		return;
	rte_eth_dev_stop(d->port);
	rte_eth_dev_close(d->port);   /* the PMD gives back what it held */
	rte_mempool_free(d->mp);
	zc_destroy_all(d);
	if (d->owns_eal)   /* the ports opened after it are closed first */
		rte_eal_cleanup();
	free(d);
}
