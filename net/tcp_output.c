/* tcp_output.c: building and sending segments: data, retransmissions, SYN, FIN, ACK with SACK, RST. */
#include <string.h>

#include <flowplane/cksum.h>

#include "tcp.h"

static_assert(FP_NET_HEADROOM >= FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + FP_TCP_MAX_HDR + 40,
	      "tcp_mb lives below the headers of a buffer we send");

static inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/*
 * The window to advertise (RFC 9293 §3.8.6): the receive buffer less what the app holds
 * and what waits out of order. Two rules shape it: the right edge we advertised never moves
 * left (§3.8.6.2.2 "shrinking the window" is strongly discouraged), and it moves right only
 * by at least min(rcv_buf / 2, MSS) at a time, which is the receiver's silly window
 * syndrome avoidance (§3.8.6.2.2).
 */
uint32_t tcp_rcv_window(const struct fp_stack *st, const struct fp_tcp_conn *c)
{
	uint32_t buf = st->cfg.rcv_buf;
	uint32_t used = c->held_bytes + c->ooo_bytes;
	uint32_t w = used < buf ? buf - used : 0;
	uint32_t cur = seq_gt(c->rcv_adv, c->rcv_nxt) ? c->rcv_adv - c->rcv_nxt : 0;
	uint32_t mask = ~((1u << c->rcv_wscale) - 1); /* what the scaled field says exactly */
	uint32_t full = min_u32(buf, (uint32_t)65535 << c->rcv_wscale) & mask;

	if (!used)   /* the common case between requests: w is full, which SWS lets through */
		return full > cur ? full : cur;
	w = min_u32(w, full) & mask;
	if (w <= cur)
		return cur;
	if (w - cur < min_u32(buf / 2, c->mss) && w != full)
		return cur;
	return w;
}

/* The run of adjacent out-of-order segments starting at @m: its bounds in @run; returns
 * the first segment after it. */
static struct fp_mbuf *next_run(struct fp_mbuf *m, struct fp_tcp_sack_block *run)
{
	run->left = tcp_mb(m)->seq;
	run->right = run->left;
	for (; m && tcp_mb(m)->seq == run->right; m = tcp_mb(m)->next)
		run->right += tcp_mb(m)->len;
	return m;
}

/*
 * SACK blocks from the out-of-order queue (RFC 2018 §4): adjacent segments merge into one
 * block; the first block is the one holding the most recently received segment, the others
 * follow in sequence order.
 */
static void sack_blocks(const struct fp_tcp_conn *c, struct fp_tcp_opts *o, unsigned max)
{
	struct fp_tcp_sack_block run, latest = { 0, 0 };
	struct fp_mbuf *m;

	for (m = c->ooo_head; m;) {
		m = next_run(m, &run);
		if (seq_le(run.left, c->ooo_last) && seq_lt(c->ooo_last, run.right)) {
			latest = run;
			o->sack[o->n_sack++] = run;
			break;
		}
	}
	for (m = c->ooo_head; m && o->n_sack < max;) {
		m = next_run(m, &run);
		if (run.left != run.right && (run.left != latest.left || run.right != latest.right))
			o->sack[o->n_sack++] = run;
	}
}

/* Options of a non-SYN segment with @plen payload bytes: timestamps and SACK blocks, when
 * negotiated. SACK blocks go only as far as the MTU leaves room: a full-sized segment
 * carries none (its payload was cut before the blocks were known); pure ACKs carry them. */
static void data_opts(const struct fp_stack *st, const struct fp_tcp_conn *c,
		      struct fp_tcp_opts *o, uint32_t plen)
{
	uint32_t room = st->cfg.mtu - FP_IPV4_HDR_LEN - FP_TCP_HDR_LEN;

	if (c->flags & TCP_CF_TS) {
		o->has_ts = 1;
		o->ts_val = tcp_ts_now(c, st->now_us);
		o->ts_ecr = c->ts_recent;
		room -= 12;
	}
	room = room > plen + 4 ? room - plen - 4 : 0; /* NOP, NOP, kind, length */
	uint32_t max = min_u32(room / 8, (c->flags & TCP_CF_TS) ? 3 : 4);
	if ((c->flags & TCP_CF_SACK) && c->ooo_head && max)
		sack_blocks(c, o, max);
}

/* Options of our SYN or SYN-ACK (RFC 9293 §3.7.1, RFC 7323 §2.2/§3.2, RFC 2018 §2). */
static void syn_opts(const struct fp_stack *st, const struct fp_tcp_conn *c, struct fp_tcp_opts *o)
{
	bool active = c->state == FP_TCP_SYN_SENT;

	o->has_mss = 1;
	o->mss = (uint16_t)(st->cfg.mtu - 40);
	if (active ? !st->cfg.no_sack : (c->flags & TCP_CF_SACK) != 0)
		o->sack_ok = 1;
	if (active ? !st->cfg.no_timestamps : (c->flags & TCP_CF_TS) != 0) {
		o->has_ts = 1;
		o->ts_val = tcp_ts_now(c, st->now_us);
		o->ts_ecr = active ? 0 : c->ts_recent;
	}
	if (active || (c->flags & TCP_CF_WSCALE)) {
		o->has_wscale = 1;
		o->wscale = c->rcv_wscale;
	}
}

/* Prepend @t's header to @m (data = payload with partial sum @psum), checksum it, send it
 * from us to @dst. Consumes @m. */
static int emit_raw(struct fp_stack *st, struct fp_mbuf *m, const struct fp_tcp *t,
		    uint32_t dst, uint32_t psum)
{
	uint32_t plen = m->data_len;
	size_t hl = FP_TCP_HDR_LEN + fp_tcp_opts_len(&t->opt);
	uint8_t *p = fp_mbuf_prepend(m, (uint32_t)hl);

	if (!p || fp_tcp_emit(p, hl, t) != hl) {
		net_free(st, m);
		return -EMSGSIZE;
	}
	uint32_t sum = fp_csum_combine(fp_csum_partial(p, hl, 0), psum, hl);
	fp_tcp_set_csum(p, sum, st->cfg.ipv4, dst, hl + plen);
	NET_STAT_INC(st, tcp_tx_segs);
	if (t->flags & FP_TCP_RST)
		NET_STAT_INC(st, tcp_rst_tx);
	return ipv4_output(st, m, dst, FP_IPPROTO_TCP);
}

/*
 * The window field: unscaled on a SYN (RFC 7323 §2.2), else scaled and rounded down. When
 * the edge we keep is not on a scale unit, the field says up to a unit less than we
 * accept (rcv_adv stays where it was): RFC 7323 §2.4 allows this small shrink, and
 * rounding up instead would let a peer sending a byte at a time push the edge (and our
 * buffer) right by a byte per segment, forever.
 */
static uint16_t window_field(const struct fp_stack *st, struct fp_tcp_conn *c, bool syn)
{
	uint32_t w = tcp_rcv_window(st, c);
	uint32_t field;

	if (syn) {
		field = min_u32(w, 65535);
		c->rcv_adv = c->rcv_nxt + field;
		return (uint16_t)field;
	}
	field = min_u32(w >> c->rcv_wscale, 65535);
	uint32_t edge = c->rcv_nxt + (field << c->rcv_wscale);
	if (seq_gt(edge, c->rcv_adv))
		c->rcv_adv = edge;
	return (uint16_t)field;
}

/*
 * The common segment, written in one pass: an ACK with or without data, FIN or PSH, no SYN,
 * no RST, no SACK blocks to carry, to a next hop whose address is resolved. Ethernet, IPv4
 * and TCP headers go straight into @m's headroom (options: timestamps, as NOP, NOP, TS,
 * the layout Linux sends too) instead of through struct fp_tcp, the option encoder, route
 * and ARP output (with the byte-order helpers' rewrite, a segment's emission fell from
 * ~530 to ~380 instructions: docs/results.md, issue 21). Consumes @m.
 */
static int emit_fast(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m,
		     uint32_t seq, uint8_t flags, uint16_t wnd, uint32_t psum,
		     const struct fp_eth_addr *mac)
{
	bool ts = c->flags & TCP_CF_TS;
	uint32_t hl = FP_TCP_HDR_LEN + (ts ? 12 : 0);
	uint32_t l4 = hl + m->data_len;
	uint8_t *f;

	if (fp_unlikely(l4 + FP_IPV4_HDR_LEN > st->cfg.mtu) ||
	    !(f = fp_mbuf_prepend(m, FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + hl))) {
		net_free(st, m);
		return -EMSGSIZE;
	}
	uint8_t *ip = f + FP_ETH_HDR_LEN, *th = ip + FP_IPV4_HDR_LEN;
	fp_eth_emit(f, FP_ETH_HDR_LEN, mac, &st->cfg.mac, FP_ETH_TYPE_IPV4);
	ipv4_hdr(st, ip, c->raddr, FP_IPPROTO_TCP, l4);
	fp_tcp_put_hdr(th, c->lport, c->rport, seq, (flags & FP_TCP_ACK) ? c->rcv_nxt : 0, hl, flags,
		       wnd, 0);
	if (ts) {
		fp_put_be32(th + 20, (uint32_t)FP_TCP_OPT_NOP << 24 | FP_TCP_OPT_NOP << 16 |
					     FP_TCP_OPT_TS << 8 | 10);
		fp_put_be32(th + 24, tcp_ts_now(c, st->now_us));
		fp_put_be32(th + 28, c->ts_recent);
	}
	/* The TCP checksum in one 64-bit sum: the header's words, the payload's running sum
	 * (at an even offset: hl is), and the pseudo-header (RFC 9293 §3.1): the addresses as
	 * the IPv4 header above holds them, then zero, protocol and the segment's length. */
	uint8_t tail[4] = { 0, FP_IPPROTO_TCP, (uint8_t)(l4 >> 8), (uint8_t)l4 };
	uint64_t sum = (uint64_t)psum + fp_csum_words64(ip + 12, 2) + fp_csum_words64(tail, 1) +
		       (ts ? fp_csum_words64(th, 8) : fp_csum_words64(th, 5));

	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffffffffu) + (sum >> 32);
	uint16_t ck = fp_csum_fold((uint32_t)sum);
	__builtin_memcpy(th + 16, &ck, 2);
	NET_STAT_INC(st, tcp_tx_segs);
	return net_tx_frame(st, m);
}

/* Send @m (data = payload, possibly empty) as one segment of @c at @seq with @flags. */
static int tcp_emit(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m, uint32_t seq,
		    uint8_t flags, uint32_t psum)
{
	struct fp_tcp t;
	bool syn = flags & FP_TCP_SYN;
	uint16_t wnd = (flags & FP_TCP_RST) ? 0 : window_field(st, c, syn);

	if (flags & FP_TCP_ACK) {
		/* Every ACK we send settles what the delayed-ACK logic was waiting for. */
		c->rx_unacked = 0;
		c->delack_us = 0;
		c->flags &= ~TCP_CF_ACK_NOW;
	}
	if (!(flags & (FP_TCP_SYN | FP_TCP_RST)) && !((c->flags & TCP_CF_SACK) && c->ooo_head)) {
		const struct fp_eth_addr *mac = arp_mac_of(st, ipv4_route(st, c->raddr));
		if (fp_likely(mac))
			return emit_fast(st, c, m, seq, flags, wnd, psum, mac);
	}
	memset(&t, 0, sizeof(t));
	t.sport = c->lport;
	t.dport = c->rport;
	t.seq = seq;
	t.flags = flags;
	t.wnd = wnd;
	if (flags & FP_TCP_ACK)
		t.ack = c->rcv_nxt;
	if (syn)
		syn_opts(st, c, &t.opt);
	else if (!(flags & FP_TCP_RST))
		data_opts(st, c, &t.opt, m->data_len);
	return emit_raw(st, m, &t, c->raddr, psum);
}

int tcp_send_ctl(struct fp_stack *st, struct fp_tcp_conn *c, uint8_t flags, uint32_t seq)
{
	struct fp_mbuf *m = net_alloc(st);

	if (!m) {
		NET_STAT_INC(st, tcp_nobufs);
		return -ENOBUFS;
	}
	return tcp_emit(st, c, m, seq, flags, 0);
}

int tcp_send_syn(struct fp_stack *st, struct fp_tcp_conn *c)
{
	uint8_t flags = c->state == FP_TCP_SYN_SENT ? FP_TCP_SYN : FP_TCP_SYN | FP_TCP_ACK;

	return tcp_send_ctl(st, c, flags, c->iss);
}

/* RFC 9293 §3.6: the FIN takes a sequence number after all data taken so far. It goes
 * whatever the peer's window (as Linux does: a FIN at the edge is accepted). */
int tcp_send_fin(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (!(c->flags & TCP_CF_FIN_SENT)) {
		c->flags |= TCP_CF_FIN_SENT;
		c->snd_nxt++;
	}
	if (!c->rtx_us || (c->flags & TCP_CF_PERSIST)) {
		c->flags &= ~TCP_CF_PERSIST;
		c->backoff = 0;
		tcp_rtx_arm(st, c);
	}
	return tcp_send_ctl(st, c, FP_TCP_FIN | FP_TCP_ACK, c->snd_nxt - 1);
}

/*
 * (Re)transmit a queued segment. The buffer may still be held by the device or the wire
 * from its previous transmission (refcnt > 1): then its headers are theirs and a copy of
 * the payload goes instead. Otherwise the same buffer goes again, one more reference
 * keeping it in the queue (IX's zero-copy retransmission).
 */
int tcp_xmit_seg(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m)
{
	struct tcp_mb *mb = tcp_mb(m);
	struct fp_mbuf *out = m;

	if (m->refcnt == 1) {
		m->data_off = mb->off;
		m->data_len = m->pkt_len = mb->len;
		fp_mbuf_ref(m);
	} else {
		if (!(out = net_alloc(st))) {
			NET_STAT_INC(st, tcp_nobufs);
			return -ENOBUFS;
		}
		memcpy(fp_mbuf_append(out, mb->len), m->buf + mb->off, mb->len);
	}
	mb->tx_us = st->now_us;
	uint8_t flags = FP_TCP_ACK | ((mb->flags & TCP_MB_PSH) ? FP_TCP_PSH : 0);
	return tcp_emit(st, c, out, mb->seq, flags, mb->psum);
}

/* RFC 6675 §5 (C), simplified: retransmit segments marked lost, oldest first, while the
 * pipe is below cwnd; SACKed ones are never marked. Our FIN follows the data. */
void tcp_retransmit_lost(struct fp_stack *st, struct fp_tcp_conn *c)
{
	for (struct fp_mbuf *m = c->rtx_head; m && c->lost_bytes; m = tcp_mb(m)->next) {
		struct tcp_mb *mb = tcp_mb(m);
		if (!(mb->flags & TCP_MB_LOST))
			continue;
		if (tcp_pipe(c) >= c->cwnd)
			return;
		mb->flags = (uint8_t)((mb->flags & ~TCP_MB_LOST) | TCP_MB_RETRANS);
		c->lost_bytes -= mb->len;
		c->retransmits++;
		NET_STAT_INC(st, tcp_rexmit);
		tcp_xmit_seg(st, c, m);
	}
	if ((c->flags & TCP_CF_FIN_LOST) && !c->lost_bytes && tcp_pipe(c) < c->cwnd) {
		c->flags &= ~TCP_CF_FIN_LOST;
		c->retransmits++;
		NET_STAT_INC(st, tcp_rexmit);
		tcp_send_ctl(st, c, FP_TCP_FIN | FP_TCP_ACK, c->snd_nxt - 1);
	}
}

uint32_t tcp_send_room(const struct fp_stack *st, const struct fp_tcp_conn *c)
{
	uint32_t edge = tcp_snd_edge(c);
	uint32_t by_wnd = seq_gt(edge, c->snd_nxt) ? edge - c->snd_nxt : 0;
	uint32_t pipe = tcp_pipe(c);
	uint32_t by_cwnd = c->cwnd > pipe ? c->cwnd - pipe : 0;

	(void)st;
	return min_u32(by_wnd, by_cwnd);
}

/*
 * RFC 9293 §3.10.7.1: a segment for no conn gets a RST that the sender will accept:
 * if it had an ACK, <SEQ=SEG.ACK><CTL=RST>; else <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
 * A RST is never answered.
 */
void tcp_send_reset(struct fp_stack *st, const struct fp_ipv4 *ip, const struct fp_tcp *t,
		    uint32_t seg_len)
{
	struct fp_tcp r;
	struct fp_mbuf *m;

	if ((t->flags & FP_TCP_RST) || !(m = net_alloc(st)))
		return;
	memset(&r, 0, sizeof(r));
	r.sport = t->dport;
	r.dport = t->sport;
	if (t->flags & FP_TCP_ACK) {
		r.seq = t->ack;
		r.flags = FP_TCP_RST;
	} else {
		r.ack = t->seq + seg_len;
		r.flags = FP_TCP_RST | FP_TCP_ACK;
	}
	/* An answer: no connection of ours ends with it (tcp_send_rst_conn's do) */
	NET_STAT_INC(st, tcp_rst_answer);
	emit_raw(st, m, &r, ip->src, 0);
}

void tcp_send_rst_conn(struct fp_stack *st, struct fp_tcp_conn *c)
{
	tcp_send_ctl(st, c, FP_TCP_RST | FP_TCP_ACK, c->snd_nxt);
}

/* A SYN-ACK whose ISN is a SYN cookie (tcp_cookie.c); no state is kept. Window scaling
 * and SACK are offered only when timestamps can carry them back. */
void tcp_send_cookie_synack(struct fp_stack *st, const struct fp_ipv4 *ip, const struct fp_tcp *t)
{
	struct fp_tcp r;
	struct fp_mbuf *m = net_alloc(st);
	uint16_t mss = 0;
	uint32_t low = 0;

	if (!m)
		return;
	memset(&r, 0, sizeof(r));
	r.sport = t->dport;
	r.dport = t->sport;
	r.seq = tcp_cookie_make(st, ip, t, &mss, &low);
	r.ack = t->seq + 1;
	r.flags = FP_TCP_SYN | FP_TCP_ACK;
	r.wnd = (uint16_t)min_u32(st->cfg.rcv_buf, 65535);
	r.opt.has_mss = 1;
	r.opt.mss = (uint16_t)(st->cfg.mtu - 40);
	if (t->opt.has_ts && !st->cfg.no_timestamps) {
		uint32_t now = (uint32_t)(st->now_us / TCP_TS_HZ_DIV) +
			       tcp_ts_offset(st, ip->dst, ip->src);
		uint32_t mask = (1u << TCP_COOKIE_TS_BITS) - 1;
		uint32_t ts = (now & ~mask) | low;
		if (seq_gt(ts, now))
			ts -= mask + 1; /* never ahead of the clock the conn will use */
		r.opt.has_ts = 1;
		r.opt.ts_val = ts;
		r.opt.ts_ecr = t->opt.ts_val;
		r.opt.sack_ok = (low & 0x10) != 0;
		if (t->opt.has_wscale) {
			r.opt.has_wscale = 1;
			r.opt.wscale = st->tcp->rcv_wscale;
		}
	}
	NET_STAT_INC(st, tcp_syn_cookie_tx);
	emit_raw(st, m, &r, ip->src, 0);
}

/*
 * RFC 5961 §7: challenge ACKs are rate-limited, so they cannot be used to amplify. The
 * limit is per conn (one per TCP_CHALLENGE_ACK_GAP_MS) and there is no budget shared
 * between conns: a shared one is the side channel of CVE-2016-5696, where an off-path
 * attacker spends part of it with spoofed RSTs aimed at a guessed 4-tuple and counts how
 * many challenge ACKs its own conn still gets. Linux closed it the same way (per-socket
 * tcp_invalid_ratelimit; the global limit off by default since 6.0).
 */
void tcp_send_challenge_ack(struct fp_stack *st, struct fp_tcp_conn *c)
{
	uint32_t now_ms = (uint32_t)(st->now_us / 1000) | 1; /* 0 is "never" */

	if (c->challenge_ms && now_ms - c->challenge_ms < TCP_CHALLENGE_ACK_GAP_MS) {
		NET_STAT_INC(st, tcp_challenge_ack_skip);
		return;
	}
	c->challenge_ms = now_ms;
	NET_STAT_INC(st, tcp_challenge_ack);
	tcp_send_ack(st, c);
}
