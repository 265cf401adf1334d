/* dpdk.c: a DPDK port behind the device ops: a queue pair per worker, frames copied to and from the queue's own pool. */
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

#include <flowplane/dev.h>
#include <flowplane/rss.h>

/*
 * Step one of the DPDK backend (issue 21): correct, not yet zero-copy. The EAL gets our
 * defaults, then the caller's arguments:
 *
 *   --no-pci --no-telemetry --log-level=*:warning -l 0 --file-prefix=fp<pid>, and
 *   --in-memory when huge pages are free, else --no-huge --no-shconf -m 512
 *
 * so two processes on one machine never share EAL state. rte_eal_init pins the calling
 * thread to lcore 0's CPU: its affinity is put back, as the workers are the runtime's own
 * threads. Each worker registers itself with the EAL when it opens its queue
 * (rte_thread_register: an lcore id, no change of affinity), so the DPDK mempool serves it
 * from a per-lcore cache: a get or put is then a few instructions inline instead of a
 * call into the mempool's ring (measured: ~55 instructions per mbuf, four per round trip;
 * docs/results.md). Without a free lcore id the pool is used uncached, which is as safe.
 * The first port found is configured with a queue pair per worker, its receive
 * descriptors filled from one DPDK mempool. A memif socket is created under umask 077
 * (owner only).
 *
 * rx_burst copies each received DPDK mbuf into a buffer of the queue's pool and frees the
 * DPDK mbuf at once; tx_burst copies each frame (all its segments) into a DPDK mbuf and
 * returns the frames whose copies the PMD took, which the caller may then count as sent;
 * the rest stay with the caller, in order, to be offered again. The cost is two copies
 * per round trip; mapping the pool into a DPDK mempool (external buffers) removes them.
 */

#define DPDK_BURST     64u
#define DPDK_MAX_ARGS  64
#define DPDK_MP_CACHE  256u   /* mbufs per worker's mempool cache (flushed above 1.5x) */
#define DPDK_MEMIF_WAIT_MS 5000u /* a memif client waits this long for its server */
#define DPDK_RETA_MAX  2048u  /* the largest RSS table we program (ice's) */
#define DPDK_KEY_MAX   64u
#define DPDK_QUEUES_MAX 1024u /* queues the interrupt thread waits for (all ports) */

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
};

struct dpdk_q {
	struct fp_devq dq;         /* first: the ops are handed &dq */
	struct fp_dpdk *d;
	_Atomic bool bursting;     /* its worker is inside the PMD (burst_enter) */
	uint16_t qid;
	struct fp_dev_stats st;
	uint64_t tx_bad;           /* frames too long for one DPDK mbuf: dropped */
	bool registered;           /* the worker took an lcore id (rte_thread_register) */
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

/* ---- the datapath ---- */

static unsigned dpdk_rx_burst(struct fp_devq *dq, struct fp_mbuf **out, unsigned max)
{
	struct dpdk_q *q = dq_of(dq);
	struct rte_mbuf *in[DPDK_BURST];
	unsigned n, got = 0;

	if (!burst_enter(q))
		return 0;
	n = rte_eth_rx_burst(q->d->port, q->qid, in, (uint16_t)(max < DPDK_BURST ? max : DPDK_BURST));
	burst_leave(q);
	for (unsigned i = 0; i < n; i++) {
		uint32_t len = rte_pktmbuf_pkt_len(in[i]);
		struct fp_mbuf *m = fp_pool_get(&dq->cache);
		uint8_t *p;

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

/* @m (all its segments) into a fresh DPDK mbuf; NULL when the pool is dry (the caller
 * stops) with *@bad false, or when @m cannot be sent (empty, too long) with *@bad true. */
static struct rte_mbuf *tx_copy(struct dpdk_q *q, const struct fp_mbuf *m, bool *bad)
{
	struct rte_mbuf *r;
	uint8_t *p;

	*bad = !m->pkt_len || m->pkt_len > q->d->mtu + 18u;   /* Ethernet + VLAN */
	if (*bad || !(r = rte_pktmbuf_alloc(q->d->mp)))
		return NULL;
	if (!(p = (uint8_t *)rte_pktmbuf_append(r, (uint16_t)m->pkt_len))) {
		rte_pktmbuf_free(r);
		*bad = true;
		return NULL;
	}
	for (const struct fp_mbuf *s = m; s; s = s->next) {
		memcpy(p, fp_mbuf_data(s), s->data_len);
		p += s->data_len;
	}
	return r;
}

static unsigned dpdk_tx_burst(struct fp_devq *dq, struct fp_mbuf **frames, unsigned n)
{
	struct dpdk_q *q = dq_of(dq);
	struct rte_mbuf *out[DPDK_BURST];
	unsigned taken = 0;   /* frames[0, taken) consumed: sent, or dropped as unsendable */

	while (taken < n) {
		unsigned k = 0, sent;
		bool bad = false;

		while (taken + k < n && k < DPDK_BURST) {
			struct rte_mbuf *r = tx_copy(q, frames[taken + k], &bad);

			if (!r)
				break;
			out[k++] = r;
		}
		if (!k) {
			if (!bad)
				break;                  /* DPDK's pool dry: offered again later */
			q->tx_bad++;
			fp_mbuf_free(&dq->cache, frames[taken++]);
			continue;
		}
		if (!burst_enter(q)) {
			rte_pktmbuf_free_bulk(out, k);   /* offered again next time */
			break;
		}
		sent = rte_eth_tx_burst(q->d->port, q->qid, out, (uint16_t)k);
		burst_leave(q);
		for (unsigned i = 0; i < sent; i++) {
			q->st.tx_bytes += frames[taken + i]->pkt_len;
			fp_mbuf_free(&dq->cache, frames[taken + i]);
		}
		q->st.tx_frames += sent;
		taken += sent;
		if (sent < k) {                         /* the ring is full */
			rte_pktmbuf_free_bulk(&out[sent], k - sent);
			q->st.tx_full += k - sent;
			break;
		}
		if (!bad && taken < n && k < DPDK_BURST)
			break;                          /* the pool ran dry mid-batch */
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
	if (!rte_eth_stats_get(q->d->port, &es)) {
		out->rx_dropped += es.imissed + es.rx_nombuf;
		out->tx_dropped += es.oerrors;
	}
}

static void dpdk_queue_close(struct fp_devq *dq)
{
	struct dpdk_q *q = dq_of(dq);

	queue_watch(q, false);
	fp_pool_cache_flush(&dq->cache);
	fp_pool_destroy(dq->pool);
	if (q->registered) {
		/* the cache's mbufs go back to the pool before the lcore id is given up */
		rte_mempool_cache_flush(rte_mempool_default_cache(q->d->mp, rte_lcore_id()),
					q->d->mp);
		rte_thread_unregister();
	}
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
	struct fp_pool_params pp = { .name = "dpdk", .n_bufs = d->cfg.frames, .buf_size = 2048 };
	struct dpdk_q *q;

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
	if (!(q->dq.pool = fp_pool_create(&pp)) || fp_pool_cache_init(&q->dq.cache, q->dq.pool)) {
		snprintf(err, errlen, "buffers for DPDK queue %u: %s", qid, strerror(errno));
		if (q->dq.pool)
			fp_pool_destroy(q->dq.pool);
		free(q);
		return NULL;
	}
	if (!queue_watch(q, true)) {
		snprintf(err, errlen, "DPDK queue %u: more than %u queues open in this process",
			 qid, DPDK_QUEUES_MAX);
		fp_pool_cache_flush(&q->dq.cache);
		fp_pool_destroy(q->dq.pool);
		free(q);
		errno = ENOSPC;
		return NULL;
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
	/* rings, bursts, and what each worker's cache may hold (up to 1.5x its size) */
	nb = d->n_queues * (2 * d->cfg.ring_size + 2 * DPDK_BURST + DPDK_MP_CACHE * 3 / 2) + 1024;
	snprintf(name, sizeof(name), "fp_dpdk%u", index);
	d->mp = rte_pktmbuf_pool_create(name, nb, DPDK_MP_CACHE, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
					SOCKET_ID_ANY);
	if (!d->mp) {
		snprintf(err, errlen, "DPDK mbuf pool of %u: %s (more memory: -m in --dpdk)", nb,
			 rte_strerror(rte_errno));
		goto fail;
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
						 SOCKET_ID_ANY, NULL, d->mp)) ||
		    (rc = rte_eth_tx_queue_setup(d->port, (uint16_t)i, (uint16_t)d->cfg.ring_size,
						 SOCKET_ID_ANY, NULL))) {
			snprintf(err, errlen, "%s queue %u: %s", d->info.driver_name, i,
				 rte_strerror(-rc));
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
	if (d->mp) {
		rte_mempool_free(d->mp);
		d->mp = NULL;
	}
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

const uint16_t *fp_dpdk_steer_table(const struct fp_dpdk *d) { return d->rss ? d->table : NULL; }

const char *fp_dpdk_rss_why(const struct fp_dpdk *d) { return d->rss_why; }

unsigned fp_dpdk_rss_entries(const struct fp_dpdk *d) { return d->rss ? d->info.reta_size : 0; }

void fp_dpdk_close(struct fp_dpdk *d)
{
	if (!d)
		return;
	rte_eth_dev_stop(d->port);
	rte_eth_dev_close(d->port);
	rte_mempool_free(d->mp);
	if (d->owns_eal)   /* the ports opened after it are closed first */
		rte_eal_cleanup();
	free(d);
}
