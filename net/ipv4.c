/* ipv4.c: IPv4 input checks and demux (RFC 791, RFC 1122 §3.2.1); output: route, header, ARP. */
#include "defs.h"

#define IPV4_TTL 64 /* RFC 1700's default, as Linux uses */

/*
 * Source addresses a datagram must never carry (RFC 1122 §3.2.1.3, RFC 1812 §5.3.7):
 * unspecified, limited or directed broadcast, multicast, class E, loopback, and our own
 * address (a loop, or someone spoofing us).
 */
static bool ipv4_martian_src(const struct fp_stack *st, uint32_t src)
{
	if (src == 0 || src == st->cfg.ipv4 || (src >> 28) >= 0xe || (src >> 24) == 127)
		return true;
	return st->cfg.prefix_len < 31 && src == (st->cfg.ipv4 | ~st->netmask);
}

/* Parse and check: 0 to go on, or the counter that says why not was incremented. */
static int ipv4_check(struct fp_stack *st, const struct fp_mbuf *m, struct fp_ipv4 *ip)
{
	int err = fp_ipv4_parse(fp_mbuf_data(m), m->data_len, true, ip);

	if (err) {
		if (err == -EBADMSG)
			NET_STAT_INC(st, ip_bad_csum);
		else
			NET_STAT_INC(st, ip_bad);
		return err;
	}
	if (ip->dst != st->cfg.ipv4) {
		NET_STAT_INC(st, ip_not_for_us);
		return -EINVAL;
	}
	if (ipv4_martian_src(st, ip->src)) {
		NET_STAT_INC(st, ip_bad);
		return -EINVAL;
	}
	/* No reassembly: TCP sizes segments by MSS, and our UDP users stay under the MTU. */
	if (fp_ipv4_is_fragment(ip)) {
		NET_STAT_INC(st, ip_frag_drop);
		return -EINVAL;
	}
	return 0;
}

void ipv4_input(struct fp_stack *st, struct fp_mbuf *m)
{
	struct fp_ipv4 ip;

	/* Options are accepted and ignored (RFC 1122 §3.2.1.8); a low TTL is no reason to
	 * drop a datagram addressed to us (RFC 1122 §3.2.1.7). */
	if (ipv4_check(st, m, &ip))
		goto drop;
	/* Bytes past total_len are Ethernet padding (frames shorter than 60 bytes). */
	fp_mbuf_trim(m, m->pkt_len - ip.total_len);
	fp_mbuf_adj(m, ip.hdr_len);
	switch (ip.proto) {
	case FP_IPPROTO_TCP:
		tcp_input(st, m, &ip);
		return;
	case FP_IPPROTO_UDP:
		udp_input(st, m, &ip);
		return;
	case FP_IPPROTO_ICMP:
		icmp_input(st, m, &ip);
		return;
	default:
		/* RFC 1122 §3.2.2.1: SHOULD send protocol unreachable. */
		NET_STAT_INC(st, ip_unknown_proto);
		icmp_send_unreach(st, m, &ip, 2 /* protocol unreachable */);
		goto drop;
	}
drop:
	net_free(st, m);
}

/* There is no loopback: a datagram to our own address has no route. */
uint32_t ipv4_route(const struct fp_stack *st, uint32_t dst)
{
	if (dst == 0 || dst == st->cfg.ipv4)
		return 0;
	if (((dst ^ st->cfg.ipv4) & st->netmask) == 0 || dst == UINT32_MAX || (dst >> 28) == 0xe)
		return dst;
	return st->cfg.gateway;
}

void ipv4_hdr(struct fp_stack *st, uint8_t *p, uint32_t dst, uint8_t proto, uint32_t l4_len)
{
	/* DF is set (RFC 1191 path MTU discovery): we never fragment what we send. */
	struct fp_ipv4 ip = { .src = st->cfg.ipv4, .dst = dst, .id = st->ip_id++,
			      .frag = FP_IPV4_FLAG_DF, .ttl = IPV4_TTL, .proto = proto };

	fp_ipv4_emit(p, FP_IPV4_HDR_LEN, &ip, l4_len);
}

int ipv4_output(struct fp_stack *st, struct fp_mbuf *m, uint32_t dst, uint8_t proto)
{
	uint32_t nh = ipv4_route(st, dst);
	uint32_t len = m->pkt_len;
	uint8_t *p;

	if (fp_unlikely(nh == 0)) {
		NET_STAT_INC(st, ip_no_route);
		net_free(st, m);
		return -EHOSTUNREACH;
	}
	if (fp_unlikely(len + FP_IPV4_HDR_LEN > st->cfg.mtu) ||
	    !(p = fp_mbuf_prepend(m, FP_IPV4_HDR_LEN))) {
		net_free(st, m);
		return -EMSGSIZE;
	}
	ipv4_hdr(st, p, dst, proto, len);
	return arp_output(st, m, nh);
}
