/* tcp.c: TCP's connection table, control block life cycle, the fp_tcp_* calls and the test builder. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "tcp.h"

/* ---- the 4-tuple table ---- */

/* A multiplicative mix of the 4-tuple salted with the secret: cheap per packet, and the
 * salt keeps an attacker from aiming many tuples at one bucket without knowing it. */
static uint32_t tuple_bucket(const struct tcp_stack *ts, uint32_t laddr, uint16_t lport,
			     uint32_t raddr, uint16_t rport)
{
	uint64_t x = ((uint64_t)raddr << 32 | (uint32_t)rport << 16 | lport) ^ ts->sip_key[0];

	x ^= (uint64_t)laddr * 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (uint32_t)x & ts->hmask;
}

/* Double the bucket array once there are more conns than buckets (load factor <= 1),
 * up to cfg.max_conns buckets. On failure the table just stays denser. */
static void hash_grow(struct fp_stack *st)
{
	struct tcp_stack *ts = st->tcp;
	uint32_t n = (ts->hmask + 1) * 2;
	struct fp_tcp_conn **nt;

	if ((uint64_t)n > (uint64_t)st->cfg.max_conns * 2 || !(nt = calloc(n, sizeof(*nt))))
		return;
	struct fp_tcp_conn **old = ts->htab;
	uint32_t old_n = ts->hmask + 1;
	ts->htab = nt;
	ts->hmask = n - 1;
	for (uint32_t i = 0; i < old_n; i++) {
		struct fp_tcp_conn *c = old[i], *next;
		for (; c; c = next) {
			next = c->hnext;
			uint32_t b = tuple_bucket(ts, c->laddr, c->lport, c->raddr, c->rport);
			c->hnext = nt[b];
			nt[b] = c;
		}
	}
	free(old);
}

void tcp_hash_insert(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct tcp_stack *ts = st->tcp;

	if (ts->n_hashed >= ts->hmask + 1)
		hash_grow(st);
	uint32_t b = tuple_bucket(ts, c->laddr, c->lport, c->raddr, c->rport);
	c->hnext = ts->htab[b];
	ts->htab[b] = c;
	c->flags |= TCP_CF_HASHED;
	ts->n_hashed++;
}

void tcp_hash_remove(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct tcp_stack *ts = st->tcp;

	if (!(c->flags & TCP_CF_HASHED))
		return;
	struct fp_tcp_conn **pp = &ts->htab[tuple_bucket(ts, c->laddr, c->lport, c->raddr,
							 c->rport)];
	while (*pp && *pp != c)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = c->hnext;
	c->hnext = NULL;
	c->flags &= ~TCP_CF_HASHED;
	ts->n_hashed--;
}

struct fp_tcp_conn *tcp_lookup(struct fp_stack *st, uint32_t laddr, uint16_t lport,
			       uint32_t raddr, uint16_t rport)
{
	struct tcp_stack *ts = st->tcp;
	struct fp_tcp_conn *c = ts->htab[tuple_bucket(ts, laddr, lport, raddr, rport)];

	for (; c; c = c->hnext)
		if (c->raddr == raddr && c->rport == rport && c->lport == lport &&
		    c->laddr == laddr)
			return c;
	return NULL;
}

struct fp_tcp_conn *tcp_listener(struct fp_stack *st, uint16_t lport)
{
	struct fp_tcp_conn *c = st->tcp->listen[lport % TCP_LISTEN_BUCKETS];

	while (c && c->lport != lport)
		c = c->hnext;
	return c;
}

/* ---- control block life cycle ---- */

struct fp_tcp_conn *tcp_conn_alloc(struct fp_stack *st, bool limited)
{
	struct tcp_stack *ts = st->tcp;
	struct fp_tcp_conn *c;

	if (limited && ts->n_limited >= st->cfg.max_conns) {
		NET_STAT_INC(st, tcp_conn_limit);
		return NULL;
	}
	if (!(c = calloc(1, sizeof(*c))))
		return NULL;
	c->st = st;
	fp_timer_init(&c->timer, tcp_timer_fire);
	c->all_next = ts->all;
	if (ts->all)
		ts->all->all_pprev = &c->all_next;
	ts->all = c;
	c->all_pprev = &ts->all;
	ts->n_conns++;
	if (limited) {
		ts->n_limited++;
		c->flags |= TCP_CF_LIMITED;
	}
	return c;
}

void tcp_conn_defaults(struct fp_stack *st, struct fp_tcp_conn *c)
{
	c->laddr = st->cfg.ipv4;
	c->mss = (uint16_t)(st->cfg.mtu - 40);
	c->rcv_mss = c->mss;
	c->rto_us = st->cfg.rto_init_us;
	c->rcv_wscale = st->tcp->rcv_wscale;
	st->tcp->cc->init(c);
}

static void mlist_free(struct fp_stack *st, struct fp_mbuf **head)
{
	struct fp_mbuf *m = *head;

	while (m) {
		struct fp_mbuf *next = tcp_mb(m)->next;
		net_free(st, m);
		m = next;
	}
	*head = NULL;
}

static uint32_t mlist_len(const struct fp_mbuf *m)
{
	uint32_t n = 0;

	for (; m; m = tcp_mb(m)->next)
		n++;
	return n;
}

/* The queue of conns a send found short of cfg.tx_bufs, woken in order as it refills. */
static void wait_push(struct tcp_stack *ts, struct fp_tcp_conn *c)
{
	c->flags |= TCP_CF_TX_QUEUED;
	c->wait_next = NULL;
	*ts->wait_tail = c;
	ts->wait_tail = &c->wait_next;
}

static struct fp_tcp_conn *wait_pop(struct tcp_stack *ts)
{
	struct fp_tcp_conn *c = ts->wait_head;

	if (c) {
		if (!(ts->wait_head = c->wait_next))
			ts->wait_tail = &ts->wait_head;
		c->flags &= ~TCP_CF_TX_QUEUED;
	}
	return c;
}

/* Out of the queue from anywhere in it: only when a conn goes (rare), so a walk will do. */
static void wait_unlink(struct tcp_stack *ts, struct fp_tcp_conn *c)
{
	for (struct fp_tcp_conn **pp = &ts->wait_head; *pp; pp = &(*pp)->wait_next) {
		if (*pp == c) {
			if (!(*pp = c->wait_next))
				ts->wait_tail = pp;
			c->flags &= ~TCP_CF_TX_QUEUED;
			return;
		}
	}
}

/* A conn leaves the sent-data budget's books: its retransmit queue and its wait. */
static void tx_budget_leave(struct tcp_stack *ts, struct fp_tcp_conn *c)
{
	ts->tx_bufs -= mlist_len(c->rtx_head);
	if (c->flags & TCP_CF_TX_WAIT)
		ts->tx_waiters--;
	if (c->flags & TCP_CF_TX_QUEUED)
		wait_unlink(ts, c);
}

/* The retransmit and out-of-order queues: what the protocol holds. */
static void tcp_purge_proto(struct fp_stack *st, struct fp_tcp_conn *c)
{
	tx_budget_leave(st->tcp, c);
	c->flags &= ~TCP_CF_TX_WAIT;
	mlist_free(st, &c->rtx_head);
	mlist_free(st, &c->ooo_head);
	c->rtx_tail = NULL;
	c->ooo_bytes = c->sacked_bytes = c->lost_bytes = c->dupack_bytes = 0;
}

void tcp_purge(struct fp_stack *st, struct fp_tcp_conn *c)
{
	tcp_purge_proto(st, c);
	mlist_free(st, &c->held_head);
	c->held_tail = NULL;
	c->held_bytes = c->held_off = 0;
}

void tcp_set_state(struct fp_stack *st, struct fp_tcp_conn *c, enum fp_tcp_state state)
{
	if ((c->flags & TCP_CF_EMBRYONIC) && state != FP_TCP_SYN_RECEIVED) {
		c->flags &= ~TCP_CF_EMBRYONIC;
		st->tcp->n_embryonic--;
	}
	c->state = (uint8_t)state;
	if (state == FP_TCP_CLOSED) {
		tcp_hash_remove(st, c);
		tcp_purge_proto(st, c);
		c->rtx_us = c->delack_us = c->keep_us = 0;
		c->flags &= ~(TCP_CF_PERSIST | TCP_CF_ACK_NOW);
		fp_timer_cancel(&st->wheel, &c->timer);
	}
}

static void tcp_conn_free(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct tcp_stack *ts = st->tcp;

	tcp_hash_remove(st, c);
	if (c->flags & TCP_CF_EMBRYONIC)
		ts->n_embryonic--;
	tcp_purge(st, c);
	tcp_timer_undefer(st, c);
	fp_timer_cancel(&st->wheel, &c->timer);
	*c->all_pprev = c->all_next;
	if (c->all_next)
		c->all_next->all_pprev = c->all_pprev;
	ts->n_conns--;
	if (c->flags & TCP_CF_LIMITED)
		ts->n_limited--;
	free(c);
}

bool tcp_maybe_free(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if ((c->flags & TCP_CF_APP) || c->state != FP_TCP_CLOSED)
		return false;
	tcp_conn_free(st, c);
	return true;
}

void tcp_event(struct fp_stack *st, struct fp_tcp_conn *c, enum fp_event_type type, int status,
	       uint32_t len, struct fp_mbuf *m)
{
	struct fp_event ev = {
		.type = (uint16_t)type, .status = (int16_t)status, .len = len,
		.cookie = c->cookie, .conn = c, .m = m,
		.raddr = c->raddr, .rport = c->rport, .lport = c->lport,
	};

	if (!(c->flags & TCP_CF_APP) || (c->flags & TCP_CF_DEAD))
		return;
	if (type == FP_EV_TCP_DEAD || (type == FP_EV_TCP_CONNECTED && status))
		c->flags |= TCP_CF_DEAD;
	net_event(st, &ev);
}

/* RFC 9293 §3.10.7: a reset or timeout ends the conn. The held receive buffers stay until
 * the app releases the handle: RECV events it has not read yet still point at them. */
void tcp_conn_fail(struct fp_stack *st, struct fp_tcp_conn *c, int err)
{
	bool connecting = c->state == FP_TCP_SYN_SENT ||
			  (c->state == FP_TCP_SYN_RECEIVED && !(c->flags & TCP_CF_PASSIVE));

	tcp_set_state(st, c, FP_TCP_CLOSED);
	if (err == -ETIMEDOUT)
		NET_STAT_INC(st, tcp_timeout);
	tcp_event(st, c, connecting ? FP_EV_TCP_CONNECTED : FP_EV_TCP_DEAD, err, 0, NULL);
}

/* ---- init / destroy ---- */

/* The smallest shift that fits the receive buffer in the 16-bit window (RFC 7323 §2.3). */
static uint8_t wscale_for(uint32_t rcv_buf)
{
	uint8_t s = 0;

	while (s < FP_TCP_MAX_WSCALE && (rcv_buf >> s) > 65535)
		s++;
	return s;
}

int tcp_init(struct fp_stack *st)
{
	struct tcp_stack *ts = calloc(1, sizeof(*ts));

	if (!ts)
		return -ENOMEM;
	ts->htab = calloc(TCP_HASH_MIN, sizeof(*ts->htab));
	if (!ts->htab) {
		free(ts);
		return -ENOMEM;
	}
	ts->hmask = TCP_HASH_MIN - 1;
	ts->wait_tail = &ts->wait_head;
	ts->cc = &tcp_cc_newreno;
	ts->rcv_wscale = wscale_for(st->cfg.rcv_buf);
	st->tcp = ts;
	tcp_cookie_init(st);
	ts->port_next = (uint16_t)(ts->sip_key[1] % (TCP_EPHEMERAL_HI - TCP_EPHEMERAL_LO + 1));
	return 0;
}

void tcp_destroy(struct fp_stack *st)
{
	struct tcp_stack *ts = st->tcp;

	if (!ts)
		return;
	/* RECV events not yet drained point at buffers the held lists own: the stack's queue
	 * must not free them a second time. */
	for (uint32_t i = 0; i < st->ev.count; i++) {
		struct fp_event *e = &st->ev.v[(st->ev.head + i) & (st->ev.cap - 1)];
		if (e->type == FP_EV_TCP_RECV)
			e->m = NULL;
	}
	while (ts->all)
		tcp_conn_free(st, ts->all);
	free(ts->htab);
	free(ts);
	st->tcp = NULL;
}

unsigned fp_stack_reset_all(struct fp_stack *st)
{
	struct tcp_stack *ts = st->tcp;
	unsigned n = 0;

	if (!ts)
		return 0;
	/* What a process exit does on Linux for sockets with unread data: tell every peer
	 * that has a synchronized connection with us. TIME_WAIT owes nothing; an embryonic
	 * SYN_SENT has no sequence number the peer knows. The control blocks stay for
	 * fp_stack_destroy; no events are raised. */
	for (struct fp_tcp_conn *c = ts->all; c; c = c->all_next) {
		if (c->state >= FP_TCP_SYN_RECEIVED && c->state != FP_TCP_TIME_WAIT) {
			tcp_send_rst_conn(st, c);
			tcp_set_state(st, c, FP_TCP_CLOSED);
			n++;
		}
	}
	return n;
}

/* ---- flow-group migration ---- */

int fp_stack_tcp_export(struct fp_stack *st, const uint64_t groups[2], struct fp_tcp_conn **out)
{
	struct tcp_stack *ts = st->tcp;
	struct fp_tcp_conn *c, *next, *chain = NULL;
	int n = 0;

	*out = NULL;
	if (!ts || (!st->cfg.steer_table && st->cfg.n_queues <= 1))
		return -EINVAL;
	if (st->ev.count)
		return -EBUSY;   /* an event still names a conn: deliver it here first */
	for (c = ts->all; c; c = next) {
		next = c->all_next;
		if (c->state == FP_TCP_LISTEN)
			continue;
		unsigned g = fp_rss_group(fp_rss_ipv4_l4(&st->rss, htonl(c->raddr), htonl(c->laddr),
							 htons(c->rport), htons(c->lport)));
		if (!(groups[g / 64] >> (g % 64) & 1))
			continue;
		/* out of the table (remembering it was in), the wheel, the list, the counts */
		bool hashed = c->flags & TCP_CF_HASHED;
		tcp_hash_remove(st, c);
		if (hashed)
			c->flags |= TCP_CF_HASHED;
		tcp_timer_undefer(st, c);
		fp_timer_cancel(&st->wheel, &c->timer);
		*c->all_pprev = c->all_next;
		if (c->all_next)
			c->all_next->all_pprev = c->all_pprev;
		ts->n_conns--;
		uint32_t queued = c->flags & TCP_CF_TX_QUEUED;
		tx_budget_leave(ts, c);
		c->flags |= queued;        /* it waits in the importing stack's queue */
		if (c->flags & TCP_CF_LIMITED)
			ts->n_limited--;
		if (c->flags & TCP_CF_EMBRYONIC)
			ts->n_embryonic--;
		c->st = NULL;
		c->all_next = chain;
		chain = c;
		n++;
	}
	*out = chain;
	return n;
}

void fp_stack_tcp_import(struct fp_stack *st, struct fp_tcp_conn *chain)
{
	struct tcp_stack *ts = st->tcp;
	struct fp_tcp_conn *c, *next;

	for (c = chain; c; c = next) {
		next = c->all_next;
		c->st = st;
		c->all_next = ts->all;
		if (ts->all)
			ts->all->all_pprev = &c->all_next;
		ts->all = c;
		c->all_pprev = &ts->all;
		ts->n_conns++;
		ts->tx_bufs += mlist_len(c->rtx_head);
		if (c->flags & TCP_CF_TX_WAIT)
			ts->tx_waiters++;
		if (c->flags & TCP_CF_TX_QUEUED)
			wait_push(ts, c);
		if (c->flags & TCP_CF_LIMITED)
			ts->n_limited++;
		if (c->flags & TCP_CF_EMBRYONIC)
			ts->n_embryonic++;
		if (c->flags & TCP_CF_HASHED) {
			c->flags &= ~TCP_CF_HASHED;
			tcp_hash_insert(st, c);
		}
		fp_timer_init(&c->timer, tcp_timer_fire);
		tcp_timer_update(st, c);
	}
}

struct fp_tcp_conn *fp_tcp_chain_next(const struct fp_tcp_conn *c) { return c->all_next; }

void fp_tcp_chain_free(struct fp_tcp_conn *chain, struct fp_pool_cache *cache)
{
	while (chain) {
		struct fp_tcp_conn *next = chain->all_next;
		struct fp_mbuf *lists[3] = { chain->rtx_head, chain->held_head, chain->ooo_head };
		for (unsigned i = 0; i < 3; i++)
			for (struct fp_mbuf *m = lists[i], *n; m; m = n) {
				n = tcp_mb(m)->next;
				fp_mbuf_free(cache, m);
			}
		free(chain);
		chain = next;
	}
}

bool fp_tcp_app_holds(const struct fp_tcp_conn *c) { return (c->flags & TCP_CF_APP) != 0; }

uint64_t fp_tcp_cookie(const struct fp_tcp_conn *c) { return c->cookie; }

uint32_t fp_stack_tcp_conns(const struct fp_stack *st)
{
	return st->tcp ? st->tcp->n_conns : 0;
}

/* ---- listen ---- */

int fp_tcp_listen(struct fp_stack *st, uint16_t port, uint64_t cookie)
{
	struct fp_tcp_conn *c;

	if (port == 0)
		return -EINVAL;
	if (tcp_listener(st, port))
		return -EADDRINUSE;
	if (!(c = tcp_conn_alloc(st, false)))
		return -ENOMEM;
	tcp_conn_defaults(st, c);
	c->state = FP_TCP_LISTEN;
	c->lport = port;
	c->cookie = cookie;
	c->hnext = st->tcp->listen[port % TCP_LISTEN_BUCKETS];
	st->tcp->listen[port % TCP_LISTEN_BUCKETS] = c;
	return 0;
}

int fp_tcp_unlisten(struct fp_stack *st, uint16_t port)
{
	struct fp_tcp_conn **pp = &st->tcp->listen[port % TCP_LISTEN_BUCKETS];

	while (*pp && (*pp)->lport != port)
		pp = &(*pp)->hnext;
	if (!*pp)
		return -ENOENT;
	struct fp_tcp_conn *c = *pp;
	*pp = c->hnext;
	c->hnext = NULL;
	c->state = FP_TCP_CLOSED;
	tcp_conn_free(st, c);
	return 0;
}

/* ---- dial ---- */

/* The receive queue a reply of this 4-tuple lands on: the Toeplitz hash of the reply
 * direction (their address and port as source), as the NIC computes it. st->rss is
 * filled in only when there are queues to choose from (stack.c). */
static bool port_steers_here(const struct fp_stack *st, uint32_t raddr, uint16_t rport,
			     uint16_t lport)
{
	if (st->cfg.n_queues <= 1 && !st->cfg.steer_table)
		return true;
	uint32_t h = fp_rss_ipv4_l4(&st->rss, htonl(raddr), htonl(st->cfg.ipv4), htons(rport),
				    htons(lport));
	if (st->cfg.steer_table)
		return __atomic_load_n(&st->cfg.steer_table[fp_rss_group(h)], __ATOMIC_RELAXED) ==
		       st->cfg.queue_id;
	return h % st->cfg.n_queues == st->cfg.queue_id;
}

/* IX §4.4: probe the ephemeral range for a port whose reply hashes to our queue and
 * whose 4-tuple is free. 0 when there is none. */
static uint16_t pick_port(struct fp_stack *st, uint32_t raddr, uint16_t rport)
{
	struct tcp_stack *ts = st->tcp;
	const uint32_t range = TCP_EPHEMERAL_HI - TCP_EPHEMERAL_LO + 1;

	for (uint32_t i = 0; i < range; i++) {
		uint16_t p = (uint16_t)(TCP_EPHEMERAL_LO + (ts->port_next + i) % range);
		if (!port_steers_here(st, raddr, rport, p) ||
		    tcp_lookup(st, st->cfg.ipv4, p, raddr, rport))
			continue;
		ts->port_next = (uint16_t)((p - TCP_EPHEMERAL_LO + 1) % range);
		return p;
	}
	return 0;
}

struct fp_tcp_conn *fp_tcp_dial(struct fp_stack *st, uint32_t dst, uint16_t dport,
				uint64_t cookie, int *err)
{
	struct fp_tcp_conn *c = NULL;
	uint16_t port;
	int e = 0;

	if (dst == 0 || dport == 0 || (dst >> 28) >= 0xe) {
		e = -EHOSTUNREACH;
	} else if (((dst ^ st->cfg.ipv4) & st->netmask) && !st->cfg.gateway) {
		e = -EHOSTUNREACH;
	} else if (!(port = pick_port(st, dst, dport))) {
		e = -EADDRNOTAVAIL;
	} else if (!(c = tcp_conn_alloc(st, true))) {
		e = -ENOBUFS;
	}
	if (err)
		*err = e;
	if (e)
		return NULL;
	tcp_conn_defaults(st, c);
	c->raddr = dst;
	c->lport = port;
	c->rport = dport;
	c->cookie = cookie;
	c->flags |= TCP_CF_APP;
	c->iss = tcp_isn(st, c->laddr, port, dst, dport);
	c->snd_una = c->recover = c->iss;
	c->snd_nxt = c->iss + 1;
	c->ts_offset = tcp_ts_offset(st, c->laddr, dst);
	c->state = FP_TCP_SYN_SENT;
	tcp_hash_insert(st, c);
	tcp_send_syn(st, c);
	tcp_rtx_arm(st, c);
	tcp_timer_update(st, c);
	return c;
}

void fp_tcp_set_cookie(struct fp_tcp_conn *c, uint64_t cookie) { c->cookie = cookie; }

/* ---- send ---- */

/* Nagle (RFC 9293 §3.7.4, when cfg.nagle): with data in flight, only full segments go. */
static size_t nagle_trim(const struct fp_stack *st, const struct fp_tcp_conn *c, size_t n)
{
	uint32_t smss = tcp_smss(c);

	if (!st->cfg.nagle || c->snd_una == c->snd_nxt)
		return n;
	return n - n % smss;
}

/* With Nagle on and data in flight this is a multiple of the segment size, and a send of
 * less than a segment takes nothing. */
size_t fp_tcp_sendable(const struct fp_stack *st, const struct fp_tcp_conn *c)
{
	if ((c->state != FP_TCP_ESTABLISHED && c->state != FP_TCP_CLOSE_WAIT) ||
	    (c->flags & (TCP_CF_SHUT_WR | TCP_CF_DEAD)))
		return 0;
	return nagle_trim(st, c, tcp_send_room(st, c));
}

/* Where a send's bytes come from: a position in an iovec array. */
struct send_src {
	const struct iovec *iov;
	size_t off;                      /* into iov[0] */
};

/* Copy the next @len bytes to @p, across iovec boundaries; returns their running sum. A
 * piece that cfg.csum_index maps has its sum looked up rather than computed. */
static uint32_t src_copy(struct fp_stack *st, struct send_src *s, uint8_t *p, uint32_t len)
{
	const struct fp_csum_index *ix = st->cfg.csum_index;
	uint8_t *start = p;
	uint32_t sum = 0, at = 0;

	while (len) {
		size_t k = s->iov->iov_len - s->off;
		if (k > len)
			k = len;
		if (k) {
			const uint8_t *from = (const uint8_t *)s->iov->iov_base + s->off;
			memcpy(p, from, k);
			if (ix) {
				const struct fp_csum_map *m = fp_csum_index_find(ix, from, k);
				uint32_t part = m ? fp_csum_map_sum(m, (size_t)(from - m->data), k)
						  : fp_csum_partial(p, k, 0);
				if (m)
					NET_STAT_ADD(st, tcp_tx_presummed, k);
				sum = fp_csum_combine(sum, part, at);
			}
			p += k;
			at += (uint32_t)k;
			len -= (uint32_t)k;
			s->off += k;
		}
		if (s->off == s->iov->iov_len) {
			s->iov++;
			s->off = 0;
		}
	}
	return ix ? sum : fp_csum_partial(start, at, 0);
}

/* One segment: a fresh buffer holding a copy of the next @len bytes of @src, appended to
 * the retransmit queue and transmitted. -ENOBUFS when the pool is empty (@src unmoved). */
static int send_one(struct fp_stack *st, struct fp_tcp_conn *c, struct send_src *src,
		    uint32_t len, bool push)
{
	struct fp_mbuf *m = net_alloc(st);

	if (!m) {
		NET_STAT_INC(st, tcp_nobufs);
		return -ENOBUFS;
	}
	uint8_t *p = fp_mbuf_append(m, len);
	uint32_t psum = src_copy(st, src, p, len);
	struct tcp_mb *mb = tcp_mb(m);
	memset(mb, 0, sizeof(*mb));
	mb->seq = c->snd_nxt;
	mb->len = (uint16_t)len;
	mb->off = m->data_off;
	mb->psum = psum;
	mb->flags = push ? TCP_MB_PSH : 0;
	if (c->rtx_tail)
		tcp_mb(c->rtx_tail)->next = m;
	else
		c->rtx_head = m;
	c->rtx_tail = m;
	c->snd_nxt += len;
	st->tcp->tx_bufs++;
	tcp_xmit_seg(st, c, m);
	return 0;
}

/*
 * The sent-data budget (cfg.tx_bufs), in segments @c may still queue. A send that finds it
 * spent takes what fits, and the conn joins a queue; as ACKs return buffers, the queue's
 * conns get FP_EV_TCP_SENT in order, one per TX_WAIT_SHARE segments come free. Until a
 * woken conn has sent, the others leave it that share (up to half the budget in all).
 * Without the share, the buffers an ACK frees go back at once to the conn the ACK woke,
 * which sends again in the same round, and a conn woken by the budget finds them gone:
 * with more data in flight than the pool holds, a few conns would starve for as long as
 * the others keep sending. Without the queue, refused conns could only poll (an -ENOBUFS
 * retried every round: 64 clients of 1 MB files made 2 million such calls in 3 s, and
 * served half the requests).
 */
#define TX_WAIT_SHARE 8

void tcp_tx_wake(struct fp_stack *st)
{
	struct tcp_stack *ts = st->tcp;
	uint32_t avail = ts->tx_bufs < st->cfg.tx_bufs ? st->cfg.tx_bufs - ts->tx_bufs : 0;
	struct fp_tcp_conn *c;

	if (!ts->wait_head)
		return;
	for (uint32_t woken = 0; woken * TX_WAIT_SHARE < avail && (c = wait_pop(ts)); woken++)
		tcp_event(st, c, FP_EV_TCP_SENT, 0, 0, NULL);
}

static uint32_t tx_budget(const struct fp_stack *st, const struct fp_tcp_conn *c)
{
	const struct tcp_stack *ts = st->tcp;
	uint64_t used = ts->tx_bufs;

	if (!(c->flags & TCP_CF_TX_WAIT)) {
		uint64_t keep = (uint64_t)ts->tx_waiters * TX_WAIT_SHARE;
		used += keep < st->cfg.tx_bufs / 2 ? keep : st->cfg.tx_bufs / 2;
	}
	return used < st->cfg.tx_bufs ? (uint32_t)(st->cfg.tx_bufs - used) : 0;
}

static void tx_wait_set(struct fp_stack *st, struct fp_tcp_conn *c, bool wait)
{
	if (wait == !!(c->flags & TCP_CF_TX_WAIT))
		return;
	c->flags ^= TCP_CF_TX_WAIT;
	if (wait)
		st->tcp->tx_waiters++;
	else
		st->tcp->tx_waiters--;
}

ssize_t fp_tcp_sendv(struct fp_stack *st, struct fp_tcp_conn *c, const struct iovec *iov,
		     unsigned iovcnt)
{
	size_t len = 0;

	for (unsigned i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (c->state == FP_TCP_SYN_SENT || c->state == FP_TCP_SYN_RECEIVED)
		return -ENOTCONN;
	if ((c->state != FP_TCP_ESTABLISHED && c->state != FP_TCP_CLOSE_WAIT) ||
	    (c->flags & (TCP_CF_SHUT_WR | TCP_CF_DEAD)))
		return -EPIPE;
	uint32_t smss = tcp_smss(c);
	size_t n = tcp_send_room(st, c);
	if (n > len)
		n = len;
	n = nagle_trim(st, c, n);
	uint64_t budget = (uint64_t)tx_budget(st, c) * smss;
	bool short_of_bufs = n > budget;
	if (short_of_bufs) {
		NET_STAT_INC(st, tcp_tx_budget);
		n = budget;
		if (!(c->flags & TCP_CF_TX_QUEUED))
			wait_push(st->tcp, c);
	}
	tx_wait_set(st, c, short_of_bufs);
	struct send_src src = { .iov = iov, .off = 0 };
	size_t done = 0;
	while (done < n) {
		uint32_t k = n - done < smss ? (uint32_t)(n - done) : smss;
		if (send_one(st, c, &src, k, done + k == n))
			break;
		done += k;
	}
	if (done < len)
		c->flags |= TCP_CF_WANT_SEND;
	if (done && !c->rtx_us)
		tcp_rtx_arm(st, c);
	tcp_persist_check(st, c);
	tcp_timer_update(st, c);
	if (done == 0 && n > 0)
		return -ENOBUFS;
	return (ssize_t)done;
}

ssize_t fp_tcp_send(struct fp_stack *st, struct fp_tcp_conn *c, const void *data, size_t len)
{
	struct iovec v = { .iov_base = (void *)(uintptr_t)data, .iov_len = len };

	return fp_tcp_sendv(st, c, &v, 1);
}

/* ---- receive ---- */

void fp_tcp_recv_done(struct fp_stack *st, struct fp_tcp_conn *c, size_t len)
{
	while (len && c->held_head) {
		struct fp_mbuf *m = c->held_head;
		struct tcp_mb *mb = tcp_mb(m);
		uint32_t left = mb->len - c->held_off;
		if (len < left) {
			c->held_off += (uint32_t)len;
			c->held_bytes -= (uint32_t)len;
			break;
		}
		len -= left;
		c->held_bytes -= left;
		c->held_off = 0;
		c->held_head = mb->next;
		if (!c->held_head)
			c->held_tail = NULL;
		net_free(st, m);
	}
	if (c->state != FP_TCP_ESTABLISHED && c->state != FP_TCP_FIN_WAIT_1 &&
	    c->state != FP_TCP_FIN_WAIT_2)
		return;
	/* RFC 9293 §3.8.6.2.2: announce the reopened window only once it has grown by
	 * min(buffer / 2, MSS); smaller updates would invite silly-window segments. */
	uint32_t thresh = st->cfg.rcv_buf / 2 < c->mss ? st->cfg.rcv_buf / 2 : c->mss;
	uint32_t edge = c->rcv_nxt + tcp_rcv_window(st, c);
	if (seq_ge(edge, c->rcv_adv + thresh))
		tcp_send_ack(st, c);
}

/* ---- close ---- */

int fp_tcp_shutdown(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (c->flags & TCP_CF_SHUT_WR)
		return 0;
	if (c->state == FP_TCP_ESTABLISHED)
		tcp_set_state(st, c, FP_TCP_FIN_WAIT_1);
	else if (c->state == FP_TCP_CLOSE_WAIT)
		tcp_set_state(st, c, FP_TCP_LAST_ACK);
	else
		return -ENOTCONN;
	c->flags |= TCP_CF_SHUT_WR;
	c->flags &= ~TCP_CF_WANT_SEND;
	tcp_send_fin(st, c);
	tcp_timer_update(st, c);
	return 0;
}

void fp_tcp_close(struct fp_stack *st, struct fp_tcp_conn *c)
{
	uint8_t s = c->state;

	c->flags &= ~TCP_CF_APP;
	mlist_free(st, &c->held_head);
	c->held_tail = NULL;
	c->held_bytes = c->held_off = 0;
	if (s == FP_TCP_SYN_SENT) {
		tcp_set_state(st, c, FP_TCP_CLOSED);
	} else if (s == FP_TCP_SYN_RECEIVED) {
		/* RFC 9293 §3.10.4 would queue a FIN until established; a RST is simpler and
		 * the peer has not been told the conn exists. */
		tcp_send_rst_conn(st, c);
		tcp_set_state(st, c, FP_TCP_CLOSED);
	} else if (s == FP_TCP_ESTABLISHED || s == FP_TCP_CLOSE_WAIT) {
		fp_tcp_shutdown(st, c);
	} else if (s == FP_TCP_FIN_WAIT_2) {
		c->keep_us = st->now_us + st->cfg.time_wait_us; /* orphan timeout (Linux) */
	}
	/* Data arriving from now on is answered with RST (tcp_input): drop what waits. */
	mlist_free(st, &c->ooo_head);
	c->ooo_bytes = 0;
	if (!tcp_maybe_free(st, c))
		tcp_timer_update(st, c);
}

void fp_tcp_abort(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (c->state >= FP_TCP_SYN_RECEIVED && c->state != FP_TCP_TIME_WAIT)
		tcp_send_rst_conn(st, c);
	c->flags &= ~TCP_CF_APP;
	tcp_set_state(st, c, FP_TCP_CLOSED);
	tcp_maybe_free(st, c);
	tcp_tx_wake(st);   /* what it held is free */
}

int fp_tcp_keepalive(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t idle_us,
		     uint32_t intvl_us, uint8_t count)
{
	if (c->state == FP_TCP_CLOSED || c->state == FP_TCP_LISTEN)
		return -ENOTCONN;
	if (idle_us == 0) {
		c->flags &= ~TCP_CF_KEEPALIVE;
		c->keep_us = 0;
		tcp_timer_update(st, c);
		return 0;
	}
	if (intvl_us == 0 || count == 0)
		return -EINVAL;
	c->ka_idle_us = idle_us;
	c->ka_intvl_us = intvl_us;
	c->ka_count = count;
	c->flags |= TCP_CF_KEEPALIVE;
	if (!c->last_rx_us)
		c->last_rx_us = st->now_us;
	tcp_keepalive_reset(st, c);
	tcp_timer_update(st, c);
	return 0;
}

/* ---- diagnostics ---- */

const char *fp_tcp_state_name(enum fp_tcp_state s)
{
	static const char *const names[] = {
		"CLOSED", "LISTEN", "SYN_SENT", "SYN_RECEIVED", "ESTABLISHED", "FIN_WAIT_1",
		"FIN_WAIT_2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT",
	};
	return (unsigned)s < FP_ARRAY_SIZE(names) ? names[s] : "?";
}

void fp_tcp_info(const struct fp_tcp_conn *c, struct fp_tcp_info *out)
{
	memset(out, 0, sizeof(*out));
	out->state = (enum fp_tcp_state)c->state;
	out->laddr = c->laddr;
	out->raddr = c->raddr;
	out->lport = c->lport;
	out->rport = c->rport;
	out->snd_una = c->snd_una;
	out->snd_nxt = c->snd_nxt;
	out->snd_wnd = c->snd_wnd;
	out->rcv_nxt = c->rcv_nxt;
	out->rcv_wnd = c->rcv_adv - c->rcv_nxt;
	out->cwnd = c->cwnd;
	out->ssthresh = c->ssthresh;
	out->mss = c->mss;
	out->srtt_us = c->srtt_us;
	out->rttvar_us = c->rttvar_us;
	out->rto_us = c->rto_us;
	out->snd_wscale = c->snd_wscale;
	out->rcv_wscale = c->rcv_wscale;
	out->ts_ok = (c->flags & TCP_CF_TS) != 0;
	out->sack_ok = (c->flags & TCP_CF_SACK) != 0;
	for (struct fp_mbuf *m = c->rtx_head; m; m = tcp_mb(m)->next)
		out->unacked_bytes += tcp_mb(m)->len;
	out->held_bytes = c->held_bytes;
	out->ooo_bytes = c->ooo_bytes;
	out->retransmits = c->retransmits;
}

/* ---- the white-box test builder (see tcp.h) ---- */

static int test_check(const struct tcp_test_conn_params *p)
{
	uint32_t d = p->snd_nxt - p->snd_una;

	switch (p->state) {
	case FP_TCP_SYN_SENT:
	case FP_TCP_SYN_RECEIVED:
		return 0;
	case FP_TCP_ESTABLISHED:
	case FP_TCP_CLOSE_WAIT:
	case FP_TCP_FIN_WAIT_2:
	case FP_TCP_TIME_WAIT:
		return d == 0 ? 0 : -EINVAL;
	case FP_TCP_FIN_WAIT_1:
	case FP_TCP_CLOSING:
	case FP_TCP_LAST_ACK:
		return d == 1 ? 0 : -EINVAL;
	default:
		return -EINVAL;
	}
}

static void test_seq(struct fp_stack *st, struct fp_tcp_conn *c,
		     const struct tcp_test_conn_params *p)
{
	bool syn = p->state == FP_TCP_SYN_SENT || p->state == FP_TCP_SYN_RECEIVED;

	c->iss = p->iss;
	c->irs = p->irs;
	c->snd_una = syn ? p->iss : p->snd_una;
	c->snd_nxt = syn ? p->iss + 1 : p->snd_nxt;
	c->recover = c->snd_una; /* RFC 6582 §3.2: no fast retransmit below it */
	c->rcv_nxt = p->state == FP_TCP_SYN_RECEIVED ? p->irs + 1 : p->rcv_nxt;
	c->snd_wnd = c->max_snd_wnd = p->snd_wnd;
	c->snd_wl1 = c->rcv_nxt;
	c->snd_wl2 = c->snd_una;
	c->rcv_adv = c->rcv_nxt + (p->rcv_wnd ? p->rcv_wnd : st->cfg.rcv_buf);
	c->snd_wscale = p->snd_wscale;
	c->rcv_wscale = p->rcv_wscale;
	if (p->state >= FP_TCP_FIN_WAIT_1 && p->state != FP_TCP_CLOSE_WAIT)
		c->flags |= TCP_CF_SHUT_WR | TCP_CF_FIN_SENT;
	if (p->state == FP_TCP_CLOSE_WAIT || p->state == FP_TCP_CLOSING ||
	    p->state == FP_TCP_LAST_ACK || p->state == FP_TCP_TIME_WAIT)
		c->flags |= TCP_CF_FIN_RCVD;
}

static void test_timers(struct fp_stack *st, struct fp_tcp_conn *c)
{
	switch (c->state) {
	case FP_TCP_SYN_SENT:
	case FP_TCP_SYN_RECEIVED:
	case FP_TCP_FIN_WAIT_1:
	case FP_TCP_CLOSING:
	case FP_TCP_LAST_ACK:
		tcp_rtx_arm(st, c);
		break;
	case FP_TCP_TIME_WAIT:
		c->rtx_us = st->now_us + st->cfg.time_wait_us;
		break;
	default:
		break;
	}
	tcp_timer_update(st, c);
}

/* Options, ownership and congestion state as @p says. */
static void test_opts(struct fp_stack *st, struct fp_tcp_conn *c,
		      const struct tcp_test_conn_params *p)
{
	if (p->mss)
		c->mss = p->mss;
	if (p->ts_ok)
		c->flags |= TCP_CF_TS;
	if (p->sack_ok)
		c->flags |= TCP_CF_SACK;
	if (p->snd_wscale || p->rcv_wscale)
		c->flags |= TCP_CF_WSCALE;
	c->rcv_mss = (uint16_t)tcp_smss(c);
	c->ts_recent = p->ts_recent;
	c->ts_offset = p->ts_offset;
	if (p->app_owned)
		c->flags |= TCP_CF_APP;
	if (p->passive)
		c->flags |= TCP_CF_PASSIVE;
	if (p->passive && p->state == FP_TCP_SYN_RECEIVED) {
		c->flags |= TCP_CF_EMBRYONIC;
		st->tcp->n_embryonic++;
	}
	st->tcp->cc->init(c);
	if (p->cwnd)
		c->cwnd = p->cwnd;
	if (p->ssthresh)
		c->ssthresh = p->ssthresh;
	if (p->srtt_us)
		tcp_rtt_sample(st, c, p->srtt_us);
}

struct fp_tcp_conn *tcp_test_conn(struct fp_stack *st, const struct tcp_test_conn_params *p)
{
	struct fp_tcp_conn *c;
	uint32_t laddr = p->laddr ? p->laddr : st->cfg.ipv4;
	int err;

	if (p->state == FP_TCP_LISTEN) {
		if ((err = fp_tcp_listen(st, p->lport, p->cookie)))
			goto fail;
		return tcp_listener(st, p->lport);
	}
	if ((err = test_check(p)))
		goto fail;
	if (tcp_lookup(st, laddr, p->lport, p->raddr, p->rport)) {
		err = -EEXIST;
		goto fail;
	}
	if (!(c = tcp_conn_alloc(st, true))) {
		err = -ENOBUFS;
		goto fail;
	}
	tcp_conn_defaults(st, c);
	c->laddr = laddr;
	c->raddr = p->raddr;
	c->lport = p->lport;
	c->rport = p->rport;
	c->cookie = p->cookie;
	c->state = (uint8_t)p->state;
	c->last_rx_us = st->now_us;
	test_opts(st, c, p);
	test_seq(st, c, p);
	tcp_hash_insert(st, c);
	test_timers(st, c);
	return c;
fail:
	errno = -err;
	return NULL;
}
