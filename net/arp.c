/* arp.c: the ARP table (RFC 826), requests, replies, announcements, frames parked on resolution. */
#include <stdlib.h>
#include <string.h>

#include "defs.h"

/*
 * The table is set-associative: an address hashes to one set of ARP_WAYS entries, so a
 * lookup reads at most four entries and the table never grows. A full set evicts its least
 * recently used resolved entry, or failing that its oldest pending one (whose waiting frames
 * are dropped). A resolved entry goes stale arp_timeout_us after it was last confirmed; the
 * next send to it asks again (RFC 1122 §2.3.2.1: entries must time out).
 *
 * Frames waiting for a next hop sit in one shared array of cfg.arp_queue slots, linked per
 * entry in arrival order, so the whole stack holds a bounded number of them however many
 * next hops are unresolved.
 */
#define ARP_WAYS     4
#define ARP_SETS     (NET_ARP_TABLE_SIZE / ARP_WAYS)
#define ARP_SET_BITS 6
#define ARP_NIL      UINT32_MAX

static_assert(ARP_SETS == 1u << ARP_SET_BITS, "ARP_SET_BITS matches the table size");

enum arp_state { ARP_FREE, ARP_PENDING, ARP_RESOLVED };

struct arp_entry {
	uint32_t ip;
	uint8_t state;                 /* enum arp_state */
	uint8_t tries;                 /* pending: requests sent */
	struct fp_eth_addr mac;        /* resolved */
	uint64_t expire_us;            /* resolved: stale from then on */
	uint64_t used_us;              /* last use or update, for LRU eviction */
	uint32_t park_head, park_tail; /* pending: waiting frames, in arrival order */
	struct fp_timer timer;         /* pending: next retry */
	struct arp_table *tab;
};

struct arp_park {
	struct fp_mbuf *m;
	uint32_t next;
};

struct arp_table {
	struct fp_stack *st;
	struct arp_entry *last;        /* the entry arp_mac_of() found last, tried first */
	uint32_t park_free;            /* free slots of park[], linked through next */
	struct arp_entry e[NET_ARP_TABLE_SIZE];
	struct arp_park park[];        /* cfg.arp_queue slots */
};

static void arp_retry(struct fp_timer *t, uint64_t now_us);

int arp_init(struct fp_stack *st)
{
	uint32_t n = st->cfg.arp_queue;
	struct arp_table *tab = calloc(1, sizeof(*tab) + (size_t)n * sizeof(tab->park[0]));

	if (!tab)
		return -ENOMEM;
	tab->st = st;
	for (unsigned i = 0; i < NET_ARP_TABLE_SIZE; i++) {
		tab->e[i].tab = tab;
		tab->e[i].park_head = tab->e[i].park_tail = ARP_NIL;
		fp_timer_init(&tab->e[i].timer, arp_retry);
	}
	for (uint32_t i = 0; i < n; i++)
		tab->park[i].next = i + 1 < n ? i + 1 : ARP_NIL;
	tab->park_free = n ? 0 : ARP_NIL;
	st->arp = tab;
	return 0;
}

/* Free @e's waiting frames, counting each in @drops (NULL: not counted). */
static void arp_unpark_drop(struct arp_table *tab, struct arp_entry *e, uint64_t *drops)
{
	while (e->park_head != ARP_NIL) {
		struct arp_park *p = &tab->park[e->park_head];
		uint32_t next = p->next;

		net_free(tab->st, p->m);
		if (drops)
			(*drops)++;
		p->m = NULL;
		p->next = tab->park_free;
		tab->park_free = e->park_head;
		e->park_head = next;
	}
	e->park_tail = ARP_NIL;
}

void arp_destroy(struct fp_stack *st)
{
	struct arp_table *tab = st->arp;

	if (!tab)
		return;
	for (unsigned i = 0; i < NET_ARP_TABLE_SIZE; i++) {
		fp_timer_cancel(&st->wheel, &tab->e[i].timer);
		arp_unpark_drop(tab, &tab->e[i], NULL);
	}
	free(tab);
	st->arp = NULL;
}

/* ---- table ---- */

static struct arp_entry *arp_set(struct arp_table *tab, uint32_t ip)
{
	return &tab->e[((ip * 2654435761u) >> (32 - ARP_SET_BITS)) * ARP_WAYS];
}

static struct arp_entry *arp_lookup(struct arp_table *tab, uint32_t ip)
{
	struct arp_entry *set = arp_set(tab, ip);

	for (unsigned i = 0; i < ARP_WAYS; i++)
		if (set[i].state != ARP_FREE && set[i].ip == ip)
			return &set[i];
	return NULL;
}

/* Rank for eviction: free first, then resolved by age of use, then pending by age. */
static uint64_t arp_victim_rank(const struct arp_entry *e)
{
	if (e->state == ARP_FREE)
		return 0;
	if (e->state == ARP_RESOLVED)
		return 1 + (e->used_us >> 2);
	return (UINT64_MAX >> 1) + (e->used_us >> 2);
}

static void arp_entry_clear(struct arp_table *tab, struct arp_entry *e)
{
	fp_timer_cancel(&tab->st->wheel, &e->timer);
	arp_unpark_drop(tab, e, &tab->st->stats.arp_queue_drop);
	e->state = ARP_FREE;
}

/* A fresh entry for @ip in @state, evicting the set's best victim. */
static struct arp_entry *arp_entry_new(struct arp_table *tab, uint32_t ip, uint8_t state)
{
	struct arp_entry *set = arp_set(tab, ip), *v = &set[0];

	for (unsigned i = 1; i < ARP_WAYS; i++)
		if (arp_victim_rank(&set[i]) < arp_victim_rank(v))
			v = &set[i];
	arp_entry_clear(tab, v);
	v->ip = ip;
	v->state = state;
	v->tries = 0;
	v->used_us = tab->st->now_us;
	return v;
}

/* ---- sending ---- */

static void arp_send(struct fp_stack *st, uint16_t op, const struct fp_eth_addr *eth_dst,
		     const struct fp_eth_addr *tha, uint32_t tpa)
{
	struct fp_arp a = { .op = op, .sha = st->cfg.mac, .tha = *tha,
			    .spa = st->cfg.ipv4, .tpa = tpa };
	struct fp_mbuf *m = net_alloc(st);
	uint8_t *p;

	if (!m)
		return;
	if (!(p = fp_mbuf_append(m, FP_ARP_LEN))) {   /* a pool buffer always has room */
		net_free(st, m);
		return;
	}
	fp_arp_emit(p, FP_ARP_LEN, &a);
	if (!(p = fp_mbuf_prepend(m, FP_ETH_HDR_LEN))) {
		net_free(st, m);
		return;
	}
	fp_eth_emit(p, FP_ETH_HDR_LEN, eth_dst, &st->cfg.mac, FP_ETH_TYPE_ARP);
	if (op == FP_ARP_OP_REQUEST)
		NET_STAT_INC(st, arp_req_tx);
	else
		NET_STAT_INC(st, arp_reply_tx);
	net_tx_frame(st, m);
}

/* Broadcast a request for @e's address and arm the retry (RFC 1122 §2.3.2.1: at most one
 * request per second per destination). */
static void arp_request(struct fp_stack *st, struct arp_entry *e)
{
	struct fp_eth_addr zero = {{ 0 }}, bcast = FP_ETH_BROADCAST;

	arp_send(st, FP_ARP_OP_REQUEST, &bcast, &zero, e->ip);
	e->tries++;
	fp_timer_add(&st->wheel, &e->timer, st->now_us + NET_ARP_RETRY_US);
}

void arp_announce(struct fp_stack *st)
{
	struct fp_eth_addr zero = {{ 0 }}, bcast = FP_ETH_BROADCAST;

	/* RFC 5227 §3: an ARP request with sender and target protocol address both ours. */
	arp_send(st, FP_ARP_OP_REQUEST, &bcast, &zero, st->cfg.ipv4);
}

static int arp_eth_send(struct fp_stack *st, struct fp_mbuf *m, const struct fp_eth_addr *dst)
{
	uint8_t *p = fp_mbuf_prepend(m, FP_ETH_HDR_LEN);

	if (fp_unlikely(!p)) {
		net_free(st, m);
		return -ENOSPC;
	}
	fp_eth_emit(p, FP_ETH_HDR_LEN, dst, &st->cfg.mac, FP_ETH_TYPE_IPV4);
	return net_tx_frame(st, m);
}

static void arp_retry(struct fp_timer *t, uint64_t now_us)
{
	struct arp_entry *e = fp_container_of(t, struct arp_entry, timer);
	struct fp_stack *st = e->tab->st;

	(void)now_us;
	if (e->tries < NET_ARP_TRIES) {
		arp_request(st, e);
		return;
	}
	/* RFC 1122 §2.3.2.2: the host is unreachable; drop what waited for it. */
	arp_unpark_drop(e->tab, e, &st->stats.arp_unresolved_drop);
	e->state = ARP_FREE;
}

/* The entry now knows @mac: send what waited for it, in order. */
static void arp_resolve(struct fp_stack *st, struct arp_entry *e, const struct fp_eth_addr *mac)
{
	struct arp_table *tab = st->arp;

	fp_timer_cancel(&st->wheel, &e->timer);
	e->state = ARP_RESOLVED;
	e->mac = *mac;
	e->expire_us = st->now_us + st->cfg.arp_timeout_us;
	e->used_us = st->now_us;
	while (e->park_head != ARP_NIL) {
		struct arp_park *p = &tab->park[e->park_head];
		uint32_t next = p->next;
		struct fp_mbuf *m = p->m;

		p->m = NULL;
		p->next = tab->park_free;
		tab->park_free = e->park_head;
		e->park_head = next;
		arp_eth_send(st, m, mac);
	}
	e->park_tail = ARP_NIL;
}

/* Park @m on the (possibly new or stale) entry for @nh, asking for it if nobody has yet. */
static int arp_park(struct fp_stack *st, struct arp_entry *e, struct fp_mbuf *m, uint32_t nh)
{
	struct arp_table *tab = st->arp;
	uint32_t slot;

	if (!e) {
		e = arp_entry_new(tab, nh, ARP_PENDING);
	} else if (e->state == ARP_RESOLVED) {
		e->state = ARP_PENDING; /* stale: confirm it again */
		e->tries = 0;
	}
	if (e->tries == 0)
		arp_request(st, e);
	if (tab->park_free == ARP_NIL) {
		NET_STAT_INC(st, arp_queue_drop);
		net_free(st, m);
		return -ENOBUFS;
	}
	slot = tab->park_free;
	tab->park_free = tab->park[slot].next;
	tab->park[slot].m = m;
	tab->park[slot].next = ARP_NIL;
	if (e->park_tail == ARP_NIL)
		e->park_head = slot;
	else
		tab->park[e->park_tail].next = slot;
	e->park_tail = slot;
	return 0;
}

/* RFC 1112 §6.4: an IPv4 multicast group maps to 01:00:5e plus its low 23 bits. */
static void arp_mcast_mac(uint32_t ip, struct fp_eth_addr *mac)
{
	*mac = (struct fp_eth_addr){{ 0x01, 0x00, 0x5e, (uint8_t)((ip >> 16) & 0x7f),
				      (uint8_t)(ip >> 8), (uint8_t)ip }};
}

int arp_output(struct fp_stack *st, struct fp_mbuf *m, uint32_t nh)
{
	struct fp_eth_addr dst = FP_ETH_BROADCAST;
	uint32_t subnet_bcast = st->cfg.ipv4 | ~st->netmask;

	/* RFC 3021: a /31 or /32 has no directed broadcast address. */
	if (nh == UINT32_MAX || (st->cfg.prefix_len < 31 && nh == subnet_bcast))
		return arp_eth_send(st, m, &dst);
	if ((nh >> 28) == 0xe) {
		arp_mcast_mac(nh, &dst);
		return arp_eth_send(st, m, &dst);
	}
	const struct fp_eth_addr *mac = arp_mac_of(st, nh);
	if (fp_likely(mac))
		return arp_eth_send(st, m, mac);
	return arp_park(st, arp_lookup(st->arp, nh), m, nh);
}

const struct fp_eth_addr *arp_mac_of(struct fp_stack *st, uint32_t nh)
{
	struct arp_table *tab = st->arp;
	struct arp_entry *e = tab->last;

	/* A stack talks to one next hop (its gateway, or one client host) far more often
	 * than to many: the entry of the last answer is checked before the set is searched. */
	if (!e || e->ip != nh || e->state != ARP_RESOLVED) {
		e = arp_lookup(tab, nh);
		if (!e)
			return NULL;
		tab->last = e;
	}
	if (e->state != ARP_RESOLVED || st->now_us >= e->expire_us)
		return NULL;
	e->used_us = st->now_us;
	return &e->mac;
}

/* ---- input ---- */

/* RFC 826's merge rule: refresh the sender's entry if we have one; add it only when the
 * packet is for us (we are going to talk to it). Off-subnet senders are never added: we
 * would route to them through the gateway anyway. */
static void arp_merge(struct fp_stack *st, const struct fp_arp *a, bool for_us)
{
	struct arp_entry *e = arp_lookup(st->arp, a->spa);

	if (!e) {
		if (!for_us || ((a->spa ^ st->cfg.ipv4) & st->netmask))
			return;
		e = arp_entry_new(st->arp, a->spa, ARP_PENDING);
	}
	arp_resolve(st, e, &a->sha);
}

/* Addresses that must never be learned: unspecified (an RFC 5227 probe), broadcast
 * (limited or our subnet's), multicast and class E. */
static bool arp_spa_learnable(const struct fp_stack *st, uint32_t spa)
{
	if (st->cfg.prefix_len < 31 && spa == (st->cfg.ipv4 | ~st->netmask))
		return false;
	return spa != 0 && (spa >> 28) < 0xe;
}

void fp_stack_arp_learn(struct fp_stack *st, const struct fp_mbuf *m)
{
	struct fp_arp a;
	struct fp_eth eth;
	struct fp_eth_addr zero = {{ 0 }};

	if (m->next || fp_eth_parse(fp_mbuf_data(m), m->data_len, &eth) ||
	    eth.type != FP_ETH_TYPE_ARP || eth.n_vlan ||
	    fp_arp_parse(fp_mbuf_data(m) + eth.hdr_len, m->data_len - eth.hdr_len, &a) ||
	    (a.op != FP_ARP_OP_REQUEST && a.op != FP_ARP_OP_REPLY) || a.spa == st->cfg.ipv4 ||
	    fp_eth_addr_is_multicast(&a.sha) || fp_eth_addr_eq(&a.sha, &zero) ||
	    !arp_spa_learnable(st, a.spa))
		return;
	arp_merge(st, &a, a.tpa == st->cfg.ipv4);
}

void arp_input(struct fp_stack *st, struct fp_mbuf *m)
{
	struct fp_arp a;
	int err = fp_arp_parse(fp_mbuf_data(m), m->data_len, &a);
	struct fp_eth_addr zero = {{ 0 }};

	net_free(st, m); /* everything needed is in @a */
	if (err || (a.op != FP_ARP_OP_REQUEST && a.op != FP_ARP_OP_REPLY)) {
		NET_STAT_INC(st, arp_bad);
		return;
	}
	if (a.op == FP_ARP_OP_REQUEST)
		NET_STAT_INC(st, arp_req_rx);
	else
		NET_STAT_INC(st, arp_reply_rx);
	if (a.spa == st->cfg.ipv4) {
		/* Our own announcement looped back is harmless; another MAC claiming our
		 * address is a conflict (RFC 5227 §2.4) and must not be learned. */
		if (!fp_eth_addr_eq(&a.sha, &st->cfg.mac))
			NET_STAT_INC(st, arp_bad);
		return;
	}
	if (fp_eth_addr_is_multicast(&a.sha) || fp_eth_addr_eq(&a.sha, &zero)) {
		NET_STAT_INC(st, arp_bad);
		return;
	}
	bool for_us = a.tpa == st->cfg.ipv4;
	if (arp_spa_learnable(st, a.spa))
		arp_merge(st, &a, for_us);
	/* RFC 826: answer requests for our address, to the asker alone; a probe (spa 0,
	 * RFC 5227 §2.1.1) gets the same answer, which defends our address. */
	if (for_us && a.op == FP_ARP_OP_REQUEST && (a.spa == 0 || arp_spa_learnable(st, a.spa)))
		arp_send(st, FP_ARP_OP_REPLY, &a.sha, &a.sha, a.spa);
}
