/* stack.c: stack create/destroy, Ethernet input demux, the tx and event queues, stats, poll. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <flowplane/log.h>

#include "defs.h"
#include "tcp.h"

#define NET_QUEUE_INIT_CAP 64u

const char *const fp_net_stat_names[] = {
#define FP_NET_STAT_NAME(name) #name,
	FP_NET_STATS(FP_NET_STAT_NAME)
#undef FP_NET_STAT_NAME
};
const unsigned fp_net_stat_count = FP_ARRAY_SIZE(fp_net_stat_names);

static_assert(sizeof(struct fp_net_stats) == FP_ARRAY_SIZE(fp_net_stat_names) * sizeof(uint64_t),
	      "one name per counter");

/* ---- configuration ---- */

#define DEFAULT_IF_ZERO(field, value) \
	do {                          \
		if (!(field))         \
			(field) = (value); \
	} while (0)

static void config_defaults(struct fp_stack_config *c)
{
	DEFAULT_IF_ZERO(c->mtu, FP_NET_DEFAULT_MTU);
	DEFAULT_IF_ZERO(c->rcv_buf, FP_NET_DEFAULT_RCV_BUF);
	DEFAULT_IF_ZERO(c->ooo_max, c->rcv_buf / 2);
	if (!c->tx_bufs && c->cache && c->cache->pool)
		c->tx_bufs = c->cache->pool->n_bufs / 2;
	DEFAULT_IF_ZERO(c->max_conns, FP_NET_DEFAULT_MAX_CONNS);
	DEFAULT_IF_ZERO(c->syn_backlog, FP_NET_DEFAULT_SYN_BACKLOG);
	DEFAULT_IF_ZERO(c->delack_us, FP_NET_DEFAULT_DELACK_US);
	DEFAULT_IF_ZERO(c->time_wait_us, FP_NET_DEFAULT_TIME_WAIT_US);
	DEFAULT_IF_ZERO(c->rto_min_us, FP_NET_DEFAULT_RTO_MIN_US);
	DEFAULT_IF_ZERO(c->rto_max_us, FP_NET_DEFAULT_RTO_MAX_US);
	DEFAULT_IF_ZERO(c->rto_init_us, FP_NET_DEFAULT_RTO_INIT_US);
	DEFAULT_IF_ZERO(c->peer_delack_us, FP_NET_DEFAULT_PEER_DELACK_US);
	DEFAULT_IF_ZERO(c->syn_retries, FP_NET_DEFAULT_SYN_RETRIES);
	DEFAULT_IF_ZERO(c->data_retries, FP_NET_DEFAULT_DATA_RETRIES);
	DEFAULT_IF_ZERO(c->arp_timeout_us, FP_NET_DEFAULT_ARP_TIMEOUT_US);
	DEFAULT_IF_ZERO(c->arp_queue, FP_NET_DEFAULT_ARP_QUEUE);
	DEFAULT_IF_ZERO(c->icmp_per_sec, FP_NET_DEFAULT_ICMP_PER_SEC);
	if (!c->rss_key)
		c->rss_key = fp_rss_key_default;
}

/* The frame of an MTU-sized datagram must fit behind FP_NET_HEADROOM in one buffer: the
 * stack never chains its own output. A multicast MAC cannot be an interface's address. */
static int config_check(const struct fp_stack_config *c)
{
	if (!c->cache || !c->cache->pool || c->ipv4 == 0 || c->prefix_len > 32)
		return -EINVAL;
	if (c->mtu < 576 || c->mtu + (uint32_t)FP_NET_HEADROOM > c->cache->pool->buf_size)
		return -EINVAL;
	if (fp_eth_addr_is_multicast(&c->mac))
		return -EINVAL;
	return 0;
}

static int secret_init(struct fp_stack_config *c)
{
	if (c->secret)
		return 0;
	while (!c->secret) {
		ssize_t n = getrandom(&c->secret, sizeof(c->secret), 0);
		if (n < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

static uint32_t prefix_mask(uint8_t prefix_len)
{
	return prefix_len ? ~0u << (32 - prefix_len) : 0;
}

/* ---- create / destroy ---- */

static void queues_free(struct fp_stack *st)
{
	for (uint32_t i = 0; i < st->tx.count; i++)
		net_free(st, st->tx.v[(st->tx.head + i) & (st->tx.cap - 1)]);
	for (uint32_t i = 0; i < st->ev.count; i++) {
		struct fp_event *e = &st->ev.v[(st->ev.head + i) & (st->ev.cap - 1)];
		if (e->m)
			net_free(st, e->m);
	}
	free(st->tx.v);
	free(st->ev.v);
}

static int stack_init(struct fp_stack *st, const struct fp_stack_config *cfg, uint64_t now_us)
{
	int err;

	st->cfg = *cfg;
	config_defaults(&st->cfg);
	if ((err = config_check(&st->cfg)) || (err = secret_init(&st->cfg)))
		return err;
	st->cache = st->cfg.cache;
	st->now_us = now_us;
	st->netmask = prefix_mask(st->cfg.prefix_len);
	st->ip_id = (uint16_t)st->cfg.secret;
	st->icmp_tokens = net_icmp_burst(st->cfg.icmp_per_sec);
	st->icmp_tokens_ts_us = now_us;
	fp_timer_wheel_init(&st->wheel, now_us);
	/* The Toeplitz table only steers ephemeral ports across queues (tcp.c
	 * port_steers_here); with one queue any port will do and it is never read. Expanding
	 * it costs more than the rest of stack creation together (12 x 256 entries). */
	if (st->cfg.n_queues > 1 || st->cfg.steer_table)
		fp_rss_init(&st->rss, st->cfg.rss_key);
	st->tx.v = calloc(NET_QUEUE_INIT_CAP, sizeof(*st->tx.v));
	st->ev.v = calloc(NET_QUEUE_INIT_CAP, sizeof(*st->ev.v));
	if (!st->tx.v || !st->ev.v)
		return -ENOMEM;
	st->tx.cap = st->ev.cap = NET_QUEUE_INIT_CAP;
	return 0;
}

struct fp_stack *fp_stack_create(const struct fp_stack_config *cfg, uint64_t now_us)
{
	struct fp_stack *st = calloc(1, sizeof(*st));
	int err = -ENOMEM;

	if (!st || !cfg)
		goto fail;
	/* tcp_init comes last so that a failure never needs tcp_destroy. */
	if ((err = stack_init(st, cfg, now_us)) || (err = arp_init(st)) ||
	    (err = udp_init(st)) || (err = tcp_init(st)))
		goto fail;
	/* RFC 5227 §3: announce our address so neighbours refresh stale entries for it. */
	arp_announce(st);
	st->garp_sent = true;
	return st;

fail:
	if (!cfg)
		err = -EINVAL;
	if (st) {
		udp_destroy(st);
		arp_destroy(st);
		queues_free(st);
		free(st);
	}
	errno = -err;
	return NULL;
}

void fp_stack_destroy(struct fp_stack *st)
{
	if (!st)
		return;
	/* Protocols first: they may hold frames and events; then whatever is queued. */
	tcp_destroy(st);
	udp_destroy(st);
	arp_destroy(st);
	queues_free(st);
	free(st);
}

/* ---- Ethernet input ---- */

/* Accept frames to our MAC and broadcast; other multicast has no listener here. */
static bool eth_for_us(const struct fp_stack *st, const struct fp_eth *eth)
{
	if (fp_eth_addr_eq(&eth->dst, &st->cfg.mac))
		return true;
	struct fp_eth_addr bcast = FP_ETH_BROADCAST;
	return fp_eth_addr_eq(&eth->dst, &bcast);
}

static void eth_input(struct fp_stack *st, struct fp_mbuf *m)
{
	struct fp_eth eth;
	int err = fp_eth_parse(fp_mbuf_data(m), m->data_len, &eth);

	if (err) {
		if (err == -EPROTONOSUPPORT)
			NET_STAT_INC(st, eth_unknown_type);
		else
			NET_STAT_INC(st, eth_short);
		goto drop;
	}
	if (!eth_for_us(st, &eth)) {
		NET_STAT_INC(st, eth_not_for_us);
		goto drop;
	}
	if (eth.n_vlan) {
		NET_STAT_INC(st, eth_vlan_drop); /* no VLAN configured */
		goto drop;
	}
	m->user = fp_eth_addr_is_multicast(&eth.dst) ? NET_MBUF_L2_BCAST : 0;
	if (eth.type == FP_ETH_TYPE_ARP) {
		fp_mbuf_adj(m, eth.hdr_len);
		arp_input(st, m);
	} else if (eth.type == FP_ETH_TYPE_IPV4) {
		fp_mbuf_adj(m, eth.hdr_len);
		ipv4_input(st, m);
	} else {
		NET_STAT_INC(st, eth_unknown_type);
		goto drop;
	}
	return;
drop:
	net_free(st, m);
}

void fp_stack_input(struct fp_stack *st, struct fp_mbuf **frames, unsigned n, uint64_t now_us)
{
	if (now_us > st->now_us)
		st->now_us = now_us;
	for (unsigned i = 0; i < n; i++) {
		NET_STAT_INC(st, rx_frames);
		NET_STAT_ADD(st, rx_bytes, frames[i]->pkt_len);
		eth_input(st, frames[i]);
	}
	if (st->tcp && !st->irq)
		tcp_tx_wake(st);   /* the ACKs of this batch returned buffers */
}

/* ---- interrupt context (fp_stack_irq) ---- */

void fp_stack_irq(struct fp_stack *st, bool on) { st->irq = on; }

/* Reads the headers in place: Ethernet to our address without VLAN, IPv4 to our address
 * without fragment, TCP with ACK and without SYN, FIN, RST or URG, to an established conn
 * with no out-of-order data.
 * Such a segment's input changes only that conn (no new conn, none freed, no state
 * change); the malformed ones fail here and are dropped and counted later by the loop. */
bool fp_stack_quiet_frame(struct fp_stack *st, const struct fp_mbuf *m)
{
	const uint8_t *p = fp_mbuf_data(m), *ip, *th;
	uint32_t ihl;
	struct fp_tcp_conn *c;

	if (!st->tcp || m->next || m->data_len < FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + FP_TCP_HDR_LEN)
		return false;
	if (memcmp(p, st->cfg.mac.b, FP_ETH_ALEN) || fp_get_be16(p + 12) != FP_ETH_TYPE_IPV4)
		return false;
	ip = p + FP_ETH_HDR_LEN;
	ihl = (uint32_t)(ip[0] & 0x0f) * 4;
	if ((ip[0] >> 4) != 4 || ihl < FP_IPV4_HDR_LEN || ip[9] != FP_IPPROTO_TCP ||
	    (fp_get_be16(ip + 6) & 0x3fff) ||   /* MF, or an offset: a fragment */
	    fp_get_be32(ip + 16) != st->cfg.ipv4 ||
	    m->data_len < FP_ETH_HDR_LEN + ihl + FP_TCP_HDR_LEN)
		return false;
	th = ip + ihl;
	if ((th[13] & (FP_TCP_SYN | FP_TCP_FIN | FP_TCP_RST | FP_TCP_URG | FP_TCP_ACK)) !=
	    FP_TCP_ACK)
		return false;
	c = tcp_lookup(st, st->cfg.ipv4, fp_get_be16(th + 2), fp_get_be32(ip + 12),
		       fp_get_be16(th));
	/* out-of-order data waiting: the segment that fills the gap goes up with all of it,
	 * an event per segment */
	return c && c->state == FP_TCP_ESTABLISHED && !c->ooo_head;
}

void fp_stack_room(const struct fp_stack *st, unsigned *events, unsigned *frames)
{
	*events = st->ev.cap - st->ev.count;
	*frames = st->tx.cap - st->tx.count;
}

/* ---- timers ---- */

unsigned fp_stack_poll(struct fp_stack *st, uint64_t now_us)
{
	if (now_us > st->now_us)
		st->now_us = now_us;
	if (st->tcp)
		tcp_timer_flush(st);
	unsigned n = fp_timer_run(&st->wheel, st->now_us);

	if (st->tcp)
		tcp_tx_wake(st);   /* conns a timer ended returned buffers */
	return n;
}

uint64_t fp_stack_next_us(struct fp_stack *st)
{
	if (st->tcp)
		tcp_timer_flush(st);
	return fp_timer_next_us(&st->wheel);
}

/* ---- buffers and the tx queue ---- */

struct fp_mbuf *net_alloc(struct fp_stack *st)
{
	struct fp_mbuf *m = fp_pool_get(st->cache);

	if (fp_unlikely(!m)) {
		NET_STAT_INC(st, nobufs);
		return NULL;
	}
	fp_mbuf_reset(m, FP_NET_HEADROOM);
	m->user = 0;
	return m;
}

void fp_stack_free(struct fp_stack *st, struct fp_mbuf *m)
{
	if (m)
		net_free(st, m);
}

/*
 * The cold half of a push into a full ring of *@cap elements of @size bytes at @v: a ring
 * twice the size, unwrapped so that *@head becomes 0; @v is freed. NULL (counted) when
 * memory is short, and the old ring is left as it was. Shared by the tx and event queues.
 */
static fp_cold void *ring_grow(struct fp_stack *st, void *v, uint32_t *head, uint32_t *cap,
			       size_t size)
{
	uint8_t *nv = *cap < UINT32_MAX / 2 && !st->irq ? malloc((size_t)*cap * 2 * size) : NULL;
	uint32_t first = *cap - *head;  /* elements from head to the end of the array */

	if (!nv) {
		NET_STAT_INC(st, nobufs);
		return NULL;
	}
	memcpy(nv, (const uint8_t *)v + (size_t)*head * size, (size_t)first * size);
	memcpy(nv + (size_t)first * size, v, (size_t)*head * size);
	free(v);
	*head = 0;
	*cap *= 2;
	return nv;
}

int net_tx_frame(struct fp_stack *st, struct fp_mbuf *m)
{
	struct net_txq *q = &st->tx;

	if (fp_unlikely(q->count == q->cap)) {
		struct fp_mbuf **nv = ring_grow(st, q->v, &q->head, &q->cap, sizeof(*q->v));
		if (!nv) {
			net_free(st, m);
			return -ENOMEM;
		}
		q->v = nv;
	}
	q->v[(q->head + q->count++) & (q->cap - 1)] = m;
	NET_STAT_INC(st, tx_frames);
	NET_STAT_ADD(st, tx_bytes, m->pkt_len);
	return 0;
}

unsigned fp_stack_tx(struct fp_stack *st, struct fp_mbuf **out, unsigned max)
{
	if (st->tcp)
		tcp_timer_flush(st);
	return fp_stack_tx_early(st, out, max);
}

unsigned fp_stack_tx_early(struct fp_stack *st, struct fp_mbuf **out, unsigned max)
{
	struct net_txq *q = &st->tx;
	unsigned n = max < q->count ? max : q->count;

	for (unsigned i = 0; i < n; i++) {
		out[i] = q->v[q->head];
		q->head = (q->head + 1) & (q->cap - 1);
	}
	q->count -= n;
	return n;
}

unsigned fp_stack_tx_pending(const struct fp_stack *st) { return st->tx.count; }

int fp_stack_reserve(struct fp_stack *st, unsigned events, unsigned frames)
{
	while (st->tx.cap - st->tx.count < frames) {
		struct fp_mbuf **nv = ring_grow(st, st->tx.v, &st->tx.head, &st->tx.cap,
						sizeof(*st->tx.v));
		if (!nv)
			return -ENOMEM;
		st->tx.v = nv;
	}
	while (st->ev.cap - st->ev.count < events) {
		struct fp_event *nv = ring_grow(st, st->ev.v, &st->ev.head, &st->ev.cap,
						sizeof(*st->ev.v));
		if (!nv)
			return -ENOMEM;
		st->ev.v = nv;
	}
	return 0;
}

/* ---- events ---- */

int net_event(struct fp_stack *st, const struct fp_event *ev)
{
	struct net_evq *q = &st->ev;

	if (fp_unlikely(q->count == q->cap)) {
		struct fp_event *nv = ring_grow(st, q->v, &q->head, &q->cap, sizeof(*q->v));
		if (!nv)
			return -ENOMEM;
		q->v = nv;
	}
	q->v[(q->head + q->count++) & (q->cap - 1)] = *ev;
	return 0;
}

unsigned fp_stack_events(struct fp_stack *st, struct fp_event *out, unsigned max)
{
	struct net_evq *q = &st->ev;
	unsigned n = max < q->count ? max : q->count;

	for (unsigned i = 0; i < n; i++) {
		out[i] = q->v[q->head];
		q->head = (q->head + 1) & (q->cap - 1);
	}
	q->count -= n;
	return n;
}

/* ---- statistics ---- */

void fp_stack_stats(const struct fp_stack *st, struct fp_net_stats *out) { *out = st->stats; }
