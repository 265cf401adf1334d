/* icmp.c: echo reply, destination unreachable with its rate limit (RFC 792, RFC 1122 §3.2.2). */
#include <string.h>

#include "defs.h"

#define ICMP_QUOTE_L4 8 /* RFC 1122 §3.2.2: the IP header and the first 8 data octets */

/* Answer an echo request in its own buffer: it is ours, and the reply carries the same
 * identifier, sequence number and data (RFC 792, RFC 1122 §3.2.2.6). */
static void icmp_echo_reply(struct fp_stack *st, struct fp_mbuf *m, const struct fp_icmp *req,
			    const struct fp_ipv4 *ip)
{
	struct fp_icmp h = { .type = FP_ICMP_ECHO_REPLY, .code = 0, .rest = req->rest };

	fp_icmp_emit(fp_mbuf_data(m), m->data_len, &h);
	NET_STAT_INC(st, icmp_echo_tx);
	ipv4_output(st, m, ip->src, FP_IPPROTO_ICMP);
}

void icmp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip)
{
	struct fp_icmp h;

	/* Received frames are one segment; the checksum covers the whole message. */
	if (m->next || fp_icmp_parse(fp_mbuf_data(m), m->data_len, &h)) {
		NET_STAT_INC(st, icmp_bad);
		goto drop;
	}
	if (h.type == FP_ICMP_ECHO_REQUEST) {
		NET_STAT_INC(st, icmp_echo_rx);
		icmp_echo_reply(st, m, &h, ip);
		return;
	}
	/* Echo replies and errors: nothing here asked for them (yet: PMTU, TCP soft errors). */
	NET_STAT_INC(st, icmp_other_rx);
drop:
	net_free(st, m);
}

/* Query types (RFC 792, RFC 950): an error about one of these is allowed. */
static bool icmp_is_query(uint8_t type)
{
	return type == FP_ICMP_ECHO_REPLY || type == FP_ICMP_ECHO_REQUEST ||
	       (type >= 13 && type <= 18);
}

/* RFC 1122 §3.2.2: never an error about an ICMP error, a broadcast or multicast (IP or
 * link layer), a non-initial fragment, or a source that is not one host. */
static bool icmp_error_allowed(const struct fp_stack *st, const struct fp_mbuf *m,
			       const struct fp_ipv4 *ip)
{
	if (ip->proto == FP_IPPROTO_ICMP &&
	    (m->data_len < 1 || !icmp_is_query(fp_mbuf_data(m)[0])))
		return false;
	if (m->user & NET_MBUF_L2_BCAST)
		return false;
	if (ip->dst != st->cfg.ipv4 || (ip->frag & FP_IPV4_OFF_MASK))
		return false;
	return ip->src != 0 && (ip->src >> 28) < 0xe;
}

/* Token bucket: cfg.icmp_per_sec tokens a second, at most net_icmp_burst() held. */
static bool icmp_rate_ok(struct fp_stack *st)
{
	uint32_t burst = net_icmp_burst(st->cfg.icmp_per_sec);
	uint64_t elapsed = st->now_us - st->icmp_tokens_ts_us;
	uint64_t add;

	if (st->now_us < st->icmp_tokens_ts_us)
		elapsed = 0;
	if (elapsed > 10u * 1000 * 1000)
		elapsed = 10u * 1000 * 1000; /* bounds the product; the bucket is full anyway */
	add = elapsed * st->cfg.icmp_per_sec / 1000000;
	if (add) {
		/* Advance the stamp by the time those tokens took, keeping the remainder. */
		st->icmp_tokens_ts_us += add * 1000000 / st->cfg.icmp_per_sec;
		st->icmp_tokens = add >= burst - st->icmp_tokens ? burst
								 : st->icmp_tokens + (uint32_t)add;
		if (st->icmp_tokens == burst)
			st->icmp_tokens_ts_us = st->now_us;
	}
	if (st->icmp_tokens == 0)
		return false;
	st->icmp_tokens--;
	return true;
}

void icmp_send_unreach(struct fp_stack *st, const struct fp_mbuf *m, const struct fp_ipv4 *ip,
		       uint8_t code)
{
	uint32_t l4 = m->data_len < ICMP_QUOTE_L4 ? m->data_len : ICMP_QUOTE_L4;
	uint32_t len = FP_ICMP_HDR_LEN + ip->hdr_len + l4;
	struct fp_icmp h = { .type = FP_ICMP_DEST_UNREACH, .code = code, .rest = 0 };
	struct fp_mbuf *n;
	uint8_t *p;

	if (!icmp_error_allowed(st, m, ip))
		return;
	if (!icmp_rate_ok(st)) {
		NET_STAT_INC(st, icmp_rate_drop);
		return;
	}
	if (!(n = net_alloc(st)))
		return;
	p = fp_mbuf_append(n, len);
	memcpy(p + FP_ICMP_HDR_LEN, net_ip_hdr_of(m, ip), ip->hdr_len + l4);
	fp_icmp_emit(p, len, &h);
	NET_STAT_INC(st, icmp_unreach_tx);
	ipv4_output(st, n, ip->src, FP_IPPROTO_ICMP);
}
