/* udp.c: UDP bindings, input and send (RFC 768, RFC 1122 §4.1). */
#include <stdlib.h>
#include <string.h>

#include "defs.h"

/*
 * Bindings live in an open-addressing hash with linear probing, kept at most half full and
 * doubled when it would not be; deletion shifts later entries back (Knuth 6.4, Algorithm
 * R), so there are no tombstones. A stack binds a handful of ports: 16 slots of 16 bytes
 * to start with, where a per-port table would take a megabyte.
 */
#define UDP_INIT_SLOTS 16u

struct udp_slot {
	uint64_t cookie;
	uint16_t port;
	bool used;
};

struct udp_table {
	struct udp_slot *s;
	uint32_t mask;   /* slots - 1 */
	uint32_t count;
};

int udp_init(struct fp_stack *st)
{
	struct udp_table *t = calloc(1, sizeof(*t));

	if (t)
		t->s = calloc(UDP_INIT_SLOTS, sizeof(*t->s));
	if (!t || !t->s) {
		free(t);
		return -ENOMEM;
	}
	t->mask = UDP_INIT_SLOTS - 1;
	st->udp = t;
	return 0;
}

void udp_destroy(struct fp_stack *st)
{
	if (!st->udp)
		return;
	free(st->udp->s);
	free(st->udp);
	st->udp = NULL;
}

static uint32_t udp_hash(uint16_t port, uint32_t mask)
{
	return ((uint32_t)port * 2654435761u >> 16) & mask;
}

/* The slot holding @port, or the empty slot where it would go. */
static struct udp_slot *udp_find(const struct udp_table *t, uint16_t port)
{
	uint32_t i = udp_hash(port, t->mask);

	while (t->s[i].used && t->s[i].port != port)
		i = (i + 1) & t->mask;
	return &t->s[i];
}

static int udp_grow(struct udp_table *t)
{
	uint32_t n = (t->mask + 1) * 2;
	struct udp_table nt = { .s = calloc(n, sizeof(*nt.s)), .mask = n - 1, .count = t->count };

	if (!nt.s)
		return -ENOMEM;
	for (uint32_t i = 0; i <= t->mask; i++)
		if (t->s[i].used)
			*udp_find(&nt, t->s[i].port) = t->s[i];
	free(t->s);
	*t = nt;
	return 0;
}

int fp_udp_bind(struct fp_stack *st, uint16_t port, uint64_t cookie)
{
	struct udp_table *t = st->udp;
	struct udp_slot *s = udp_find(t, port);

	if (s->used)
		return -EADDRINUSE;
	if ((t->count + 1) * 2 > t->mask + 1) {
		if (udp_grow(t))
			return -ENOMEM;
		s = udp_find(t, port);
	}
	*s = (struct udp_slot){ .cookie = cookie, .port = port, .used = true };
	t->count++;
	return 0;
}

int fp_udp_unbind(struct fp_stack *st, uint16_t port)
{
	struct udp_table *t = st->udp;
	struct udp_slot *s = udp_find(t, port);
	uint32_t i = (uint32_t)(s - t->s), j = i;

	if (!s->used)
		return -ENOENT;
	/* Backward shift: move up any later entry of the run whose home is not in (i, j]. */
	for (;;) {
		t->s[i].used = false;
		for (;;) {
			j = (j + 1) & t->mask;
			if (!t->s[j].used)
				goto out;
			uint32_t home = udp_hash(t->s[j].port, t->mask);
			if (((j - home) & t->mask) >= ((j - i) & t->mask))
				break;
		}
		t->s[i] = t->s[j];
		i = j;
	}
out:
	t->count--;
	return 0;
}

void udp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip)
{
	struct fp_udp u;
	int err = fp_udp_parse(fp_mbuf_data(m), m->data_len, ip->src, ip->dst, &u);

	if (err || m->next) {
		if (err == -EBADMSG)
			NET_STAT_INC(st, udp_bad_csum);
		else
			NET_STAT_INC(st, udp_bad);
		goto drop;
	}
	fp_mbuf_trim(m, m->pkt_len - u.len);
	struct udp_slot *s = udp_find(st->udp, u.dport);
	if (!s->used) {
		/* RFC 1122 §4.1.3.1: SHOULD send port unreachable. */
		NET_STAT_INC(st, udp_no_port);
		icmp_send_unreach(st, m, ip, FP_ICMP_CODE_PORT_UNREACH);
		goto drop;
	}
	fp_mbuf_adj(m, FP_UDP_HDR_LEN);
	struct fp_event ev = { .type = FP_EV_UDP_RECV, .len = m->pkt_len, .cookie = s->cookie,
			       .m = m, .raddr = ip->src, .rport = u.sport, .lport = u.dport };
	if (net_event(st, &ev))
		goto drop;
	NET_STAT_INC(st, udp_rx);
	return;
drop:
	net_free(st, m);
}

int fp_udp_send(struct fp_stack *st, uint16_t sport, uint32_t dst, uint16_t dport,
		const void *data, size_t len)
{
	struct fp_mbuf *m;
	uint8_t *p;

	/* No fragmentation: a datagram must fit in one IP packet. */
	if (len > (size_t)st->cfg.mtu - FP_IPV4_HDR_LEN - FP_UDP_HDR_LEN)
		return -EMSGSIZE;
	if (!(m = net_alloc(st)))
		return -ENOBUFS;
	p = fp_mbuf_append(m, (uint32_t)(FP_UDP_HDR_LEN + len));
	if (len)
		memcpy(p + FP_UDP_HDR_LEN, data, len);
	fp_udp_emit(p, FP_UDP_HDR_LEN + len, st->cfg.ipv4, dst, sport, dport);
	NET_STAT_INC(st, udp_tx);
	return ipv4_output(st, m, dst, FP_IPPROTO_UDP);
}
