/* tcp_input.c: segment arrival (RFC 9293 §3.10.7): open, the numbered checks, ACK and SACK processing, reassembly. */
#include <string.h>

#include "tcp.h"

/* A received segment while it is processed. The payload is m's data window. */
struct tcp_seg {
	struct fp_tcp t;
	const struct fp_ipv4 *ip;
	struct fp_mbuf *m;      /* NULL once queued (held or out of order) */
	uint32_t len;           /* payload bytes */
	uint32_t seg_len;       /* SEG.LEN: payload + SYN + FIN */
};

static_assert(sizeof(struct tcp_mb) <= FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + FP_TCP_HDR_LEN,
	      "tcp_mb of a received buffer lies over headers already parsed");

static inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* ---- options of a SYN ---- */

void tcp_apply_syn_opts(struct fp_stack *st, struct fp_tcp_conn *c, const struct fp_tcp_opts *o)
{
	/* RFC 9293 §3.7.1: without the option the peer takes 536 (RFC 1122 §4.2.2.6). */
	uint32_t mss = o->has_mss ? o->mss : 536;

	mss = min_u32(mss, st->cfg.mtu - 40u);
	c->mss = (uint16_t)(mss < 64 ? 64 : mss);
	/* RFC 7323 §2.2: scaling is on only when both SYNs carry the option; shifts above 14
	 * are used as 14 (§2.3). */
	if (o->has_wscale) {
		c->flags |= TCP_CF_WSCALE;
		c->snd_wscale = o->wscale > FP_TCP_MAX_WSCALE ? FP_TCP_MAX_WSCALE : o->wscale;
		c->rcv_wscale = st->tcp->rcv_wscale;
	} else {
		c->snd_wscale = c->rcv_wscale = 0;
	}
	if (o->has_ts && !st->cfg.no_timestamps) {
		c->flags |= TCP_CF_TS;
		c->ts_recent = o->ts_val;
	}
	if (o->sack_ok && !st->cfg.no_sack)
		c->flags |= TCP_CF_SACK;
	c->rcv_mss = (uint16_t)tcp_smss(c);
	st->tcp->cc->init(c);
}

/* ---- LISTEN (RFC 9293 §3.10.7.2) ---- */

static struct fp_tcp_conn *conn_from_syn(struct fp_stack *st, const struct fp_tcp_conn *l,
					 const struct tcp_seg *s)
{
	struct fp_tcp_conn *c = tcp_conn_alloc(st, true);

	if (!c)
		return NULL;
	tcp_conn_defaults(st, c);
	c->laddr = s->ip->dst;
	c->raddr = s->ip->src;
	c->lport = s->t.dport;
	c->rport = s->t.sport;
	c->cookie = l->cookie;
	c->flags |= TCP_CF_PASSIVE;
	c->ts_offset = tcp_ts_offset(st, c->laddr, c->raddr);
	c->last_rx_us = st->now_us;
	return c;
}

/* A SYN with room in the backlog: an embryonic conn in SYN_RECEIVED. */
static void listen_syn(struct fp_stack *st, const struct fp_tcp_conn *l, const struct tcp_seg *s)
{
	struct fp_tcp_conn *c = conn_from_syn(st, l, s);

	if (!c)
		return;
	c->flags |= TCP_CF_EMBRYONIC;
	st->tcp->n_embryonic++;
	c->irs = s->t.seq;
	c->rcv_nxt = c->rcv_adv = s->t.seq + 1;
	c->iss = tcp_isn(st, c->laddr, c->lport, c->raddr, c->rport);
	c->snd_una = c->recover = c->iss;
	c->snd_nxt = c->iss + 1;
	c->snd_wnd = c->max_snd_wnd = s->t.wnd; /* never scaled in a SYN (RFC 7323 §2.2) */
	c->snd_wl1 = s->t.seq;
	c->snd_wl2 = c->iss;
	tcp_apply_syn_opts(st, c, &s->t.opt);
	c->state = FP_TCP_SYN_RECEIVED;
	tcp_hash_insert(st, c);
	tcp_send_syn(st, c);
	tcp_rtx_arm(st, c);
	tcp_timer_update(st, c);
}

/* The final ACK of a cookie handshake (RFC 4987 §3.6): build the conn the SYN did not get. */
static struct fp_tcp_conn *listen_cookie_ack(struct fp_stack *st, const struct fp_tcp_conn *l,
					     const struct tcp_seg *s, const struct tcp_cookie_opts *o)
{
	struct fp_tcp_conn *c = conn_from_syn(st, l, s);

	if (!c)
		return NULL;
	c->irs = s->t.seq - 1;
	c->rcv_nxt = s->t.seq;
	c->iss = s->t.ack - 1;
	c->snd_una = c->snd_nxt = c->recover = s->t.ack;
	c->mss = (uint16_t)min_u32(o->mss, st->cfg.mtu - 40u);
	if (o->wscale_ok) {
		c->flags |= TCP_CF_WSCALE;
		c->snd_wscale = o->snd_wscale;
		c->rcv_wscale = st->tcp->rcv_wscale;
	} else {
		c->snd_wscale = c->rcv_wscale = 0;
	}
	if (o->ts_ok) {
		c->flags |= TCP_CF_TS;
		c->ts_recent = s->t.opt.ts_val;
	}
	if (o->sack_ok)
		c->flags |= TCP_CF_SACK;
	c->rcv_mss = (uint16_t)tcp_smss(c);
	st->tcp->cc->init(c);
	c->rcv_adv = c->rcv_nxt + min_u32(st->cfg.rcv_buf, 65535); /* what the SYN-ACK said */
	c->snd_wnd = c->max_snd_wnd = (uint32_t)s->t.wnd << c->snd_wscale;
	c->snd_wl1 = s->t.seq;
	c->snd_wl2 = s->t.ack;
	c->state = FP_TCP_ESTABLISHED;
	c->flags |= TCP_CF_APP;
	tcp_hash_insert(st, c);
	NET_STAT_INC(st, tcp_syn_cookie_ok);
	NET_STAT_INC(st, tcp_accepted);
	tcp_event(st, c, FP_EV_TCP_ACCEPTED, 0, 0, NULL);
	return c;
}

/*
 * RFC 9293 §3.10.7.2: in LISTEN a RST is ignored, an ACK is answered with a RST (unless it
 * completes a SYN cookie handshake), a SYN opens an embryonic conn, or, with the backlog
 * (cfg.syn_backlog) full, gets a SYN cookie instead (RFC 4987 §3.6). Returns the conn a
 * cookie ACK created, for the caller to process the rest of the segment in.
 */
static struct fp_tcp_conn *listen_input(struct fp_stack *st, struct fp_tcp_conn *l,
					struct tcp_seg *s)
{
	struct tcp_stack *ts = st->tcp;
	const struct fp_tcp *t = &s->t;
	struct tcp_cookie_opts co;

	if (t->flags & FP_TCP_RST) {
		NET_STAT_INC(st, tcp_rst_rx);
		NET_STAT_INC(st, tcp_no_port); /* a RST for nothing we have: dropped */
		return NULL;
	}
	if ((t->flags & (FP_TCP_SYN | FP_TCP_FIN)) == (FP_TCP_SYN | FP_TCP_FIN)) {
		NET_STAT_INC(st, tcp_bad); /* no valid opening (a scan): dropped, as Linux does */
		return NULL;
	}
	if (t->flags & FP_TCP_ACK) {
		if (!(t->flags & FP_TCP_SYN) && ts->cookie_sent_us &&
		    st->now_us - ts->cookie_sent_us <= TCP_COOKIE_MAX_AGE * TCP_COOKIE_PERIOD_US) {
			if (tcp_cookie_check(st, s->ip, t, &co) == 0)
				return listen_cookie_ack(st, l, s, &co);
			/* Only the first segment after the SYN-ACK (seq = ISN + 1) proves a
			 * cookie; a later one overtaking it would be reset by RFC 9293's
			 * rule. While cookies are out, drop instead: the peer retransmits
			 * and the conn is made when the first segment arrives. */
			NET_STAT_INC(st, tcp_syn_cookie_bad);
			return NULL;
		}
		NET_STAT_INC(st, tcp_no_port);
		tcp_send_reset(st, s->ip, t, s->seg_len);
		return NULL;
	}
	if (!(t->flags & FP_TCP_SYN)) {
		NET_STAT_INC(st, tcp_bad); /* neither SYN, ACK nor RST: meaningless here */
		return NULL;
	}
	if (ts->n_limited >= st->cfg.max_conns) {
		/* Refuse at once (RST, as a closed port does) rather than drop: a dropped SYN
		 * leaves the client waiting for its connect timeout. */
		NET_STAT_INC(st, tcp_conn_limit);
		tcp_send_reset(st, s->ip, t, s->seg_len);
		return NULL;
	}
	if (ts->n_embryonic >= st->cfg.syn_backlog) {
		ts->cookie_sent_us = st->now_us ? st->now_us : 1;
		tcp_send_cookie_synack(st, s->ip, t);
		return NULL;
	}
	listen_syn(st, l, s);
	return NULL;
}

/* ---- SYN-SENT (RFC 9293 §3.10.7.3) ---- */

static bool text(struct fp_stack *st, struct fp_tcp_conn *c, struct tcp_seg *s);
static void fin_arrives(struct fp_stack *st, struct fp_tcp_conn *c);

/* RFC 9293 §3.10.7.3 fourth: "If there are other controls or text in the segment, then
 * continue processing at the sixth step": data (and a FIN) on a SYN-ACK, which RFC 7413
 * servers send, are taken once the SYN is accounted for. */
static void syn_sent_text(struct fp_stack *st, struct fp_tcp_conn *c, struct tcp_seg *s)
{
	if (!s->len && !(s->t.flags & FP_TCP_FIN))
		return;
	s->t.flags &= (uint8_t)~FP_TCP_SYN;
	s->t.seq++;
	s->seg_len--;
	if (text(st, c, s))
		fin_arrives(st, c);
}


/* An RTT sample from the timestamp echo (RFC 7323 §4.1), in us at the 1 ms resolution of
 * the TS clock; 0 when there is none or the echo is implausible (ahead of our clock, or
 * older than rto_max). */
static uint32_t ts_rtt(const struct fp_stack *st, const struct fp_tcp_conn *c,
		       const struct fp_tcp *t)
{
	if (!(c->flags & TCP_CF_TS) || !t->opt.has_ts || !t->opt.ts_ecr)
		return 0;
	uint32_t d = tcp_ts_now(c, st->now_us) - t->opt.ts_ecr;
	if (d > st->cfg.rto_max_us / TCP_TS_HZ_DIV)
		return 0;
	return d ? d * TCP_TS_HZ_DIV : 1;
}

/* RTT of our SYN or SYN-ACK: from its send time (the retransmit deadline less the RTO)
 * when it was not retransmitted (Karn); else from the timestamp echo, which names the
 * transmission that got through (RFC 7323 §4.1). Without either, the RTO stays at
 * cfg.rto_init_us until the first data sample (RFC 6298 §2.1). */
static void syn_rtt(struct fp_stack *st, struct fp_tcp_conn *c, const struct fp_tcp *t)
{
	if (c->backoff == 0 && c->rtx_us && c->rtx_us - c->rto_us <= st->now_us)
		tcp_rtt_sample(st, c, (uint32_t)(st->now_us - (c->rtx_us - c->rto_us)));
	else if (ts_rtt(st, c, t))
		tcp_rtt_sample(st, c, ts_rtt(st, c, t));
	c->backoff = 0;
	c->rtx_us = 0;
}

static void syn_sent_input(struct fp_stack *st, struct fp_tcp_conn *c, struct tcp_seg *s)
{
	const struct fp_tcp *t = &s->t;

	if ((t->flags & FP_TCP_ACK) && (seq_le(t->ack, c->iss) || seq_gt(t->ack, c->snd_nxt))) {
		NET_STAT_INC(st, tcp_out_of_window);
		tcp_send_reset(st, s->ip, t, s->seg_len);
		return;
	}
	if (t->flags & FP_TCP_RST) {
		/* Only a RST that acks our SYN is believed (RFC 5961 §3 leaves SYN-SENT so). */
		NET_STAT_INC(st, tcp_rst_rx);
		if (t->flags & FP_TCP_ACK)
			tcp_conn_fail(st, c, -ECONNREFUSED);
		else
			NET_STAT_INC(st, tcp_out_of_window);
		return;
	}
	if (!(t->flags & FP_TCP_SYN)) {
		NET_STAT_INC(st, tcp_bad);
		return;
	}
	c->irs = t->seq;
	c->rcv_nxt = t->seq + 1;
	c->rcv_adv = c->rcv_nxt + min_u32(st->cfg.rcv_buf, 65535); /* our SYN's window */
	tcp_apply_syn_opts(st, c, &t->opt);
	c->snd_wnd = c->max_snd_wnd = t->wnd; /* unscaled in a SYN (RFC 7323 §2.2) */
	c->snd_wl1 = t->seq;
	c->snd_wl2 = t->ack;
	if (t->flags & FP_TCP_ACK) {
		c->snd_una = t->ack;
		syn_rtt(st, c, t);
		tcp_set_state(st, c, FP_TCP_ESTABLISHED);
		c->flags |= TCP_CF_ACK_NOW;
		NET_STAT_INC(st, tcp_connected);
		tcp_event(st, c, FP_EV_TCP_CONNECTED, 0, 0, NULL);
		syn_sent_text(st, c, s);
		return;
	}
	/* Simultaneous open (RFC 9293 §3.5, figure 8): SYN-ACK from SYN_RECEIVED. */
	tcp_set_state(st, c, FP_TCP_SYN_RECEIVED);
	c->backoff = 0;
	tcp_send_syn(st, c);
	tcp_rtx_arm(st, c);
}

/* ---- the fifth step: ACK processing ---- */

/* Drop the fully acked segments from the retransmit queue and trim a partly acked one.
 * Returns the RTT sample (0: none): from the send time of the oldest segment when it was
 * never retransmitted (Karn), else from the timestamp echo (RFC 7323 §4.1). */
static uint32_t rtx_ack(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t ack,
			const struct fp_tcp *t)
{
	uint32_t rtt = 0;
	struct fp_mbuf *m;

	if ((m = c->rtx_head) && seq_le(tcp_mb(m)->seq + tcp_mb(m)->len, ack)) {
		if (!(tcp_mb(m)->flags & TCP_MB_RETRANS))
			rtt = (uint32_t)(st->now_us - tcp_mb(m)->tx_us);
		else
			rtt = ts_rtt(st, c, t);
	}
	while ((m = c->rtx_head) && seq_le(tcp_mb(m)->seq + tcp_mb(m)->len, ack)) {
		struct tcp_mb *mb = tcp_mb(m);
		if (mb->flags & TCP_MB_SACKED)
			c->sacked_bytes -= mb->len;
		if (mb->flags & TCP_MB_LOST)
			c->lost_bytes -= mb->len;
		c->rtx_head = mb->next;
		st->tcp->tx_bufs--;
		net_free(st, m);
	}
	if (!c->rtx_head)
		c->rtx_tail = NULL;
	if (m && seq_lt(tcp_mb(m)->seq, ack)) {
		/* The peer acked part of a segment: keep only the rest for retransmission. */
		struct tcp_mb *mb = tcp_mb(m);
		uint32_t cut = ack - mb->seq;
		if (mb->flags & TCP_MB_SACKED)
			c->sacked_bytes -= cut;
		if (mb->flags & TCP_MB_LOST)
			c->lost_bytes -= cut;
		mb->seq = ack;
		mb->off = (uint16_t)(mb->off + cut);
		mb->len = (uint16_t)(mb->len - cut);
		mb->psum = fp_csum_partial(m->buf + mb->off, mb->len, 0);
	}
	return rtt;
}

/*
 * Eifel detection (RFC 3522 §3.2): the first ACK of new data after a timeout echoes a
 * timestamp older than the retransmission's, so what it acknowledges is the original: the
 * timeout was a delay, not a loss. The response is Linux's undo rather than RFC 4015's
 * partial one: the windows come back as they were and nothing more is resent (go-back-N
 * would send the whole flight again, each copy a D-SACK at the peer and a deeper queue
 * for the next RTT sample to meet). The RTT sample this ACK gives (from the echo: the head
 * was retransmitted) moves the RTO past the delay that caused it (RFC 4015 §2). The echo
 * is in ms and the RTO at least cfg.rto_min_us, so an original sent in the same tick as
 * the retransmission (an RTO under 1 ms) is never taken for one: such a timeout stands.
 */
static void eifel_check(struct fp_stack *st, struct fp_tcp_conn *c, const struct fp_tcp *t)
{
	c->flags &= ~TCP_CF_EIFEL;
	if (!t->opt.has_ts || !t->opt.ts_ecr || !seq_lt(t->opt.ts_ecr, c->eifel_tsval))
		return;
	NET_STAT_INC(st, tcp_rto_spurious);
	if (c->cwnd < c->undo_cwnd)
		c->cwnd = c->undo_cwnd;
	if (c->ssthresh < c->undo_ssthresh)
		c->ssthresh = c->undo_ssthresh;
	for (struct fp_mbuf *m = c->rtx_head; m; m = tcp_mb(m)->next)
		tcp_mb(m)->flags &= (uint8_t)~TCP_MB_LOST;
	c->lost_bytes = 0;
	c->flags &= ~TCP_CF_FIN_LOST;
}

/* SND.UNA advances (RFC 9293 §3.10.7.4 fifth, RFC 6298 §5.2/5.3, RFC 6582 §3.2). */
static void new_ack(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t ack,
		    const struct fp_tcp *t)
{
	uint32_t acked = ack - c->snd_una;
	bool fin_acked = (c->flags & TCP_CF_FIN_SENT) && ack == c->snd_nxt;
	uint32_t data = acked - (fin_acked ? 1 : 0);

	if (c->flags & TCP_CF_EIFEL)
		eifel_check(st, c, t);
	uint32_t rtt = rtx_ack(st, c, ack, t);

	if (rtt)
		tcp_rtt_sample(st, c, rtt);
	c->snd_una = ack;
	c->backoff = 0;
	c->probes = 0;
	if (fin_acked)
		c->flags &= ~TCP_CF_FIN_LOST;
	if (c->flags & TCP_CF_RECOVERY) {
		if (seq_ge(ack, c->recover)) {
			c->flags &= ~TCP_CF_RECOVERY;
			c->dupacks = 0;
			c->dupack_bytes = 0;
			st->tcp->cc->exit_recovery(c);
		} else {
			/* Partial ACK: the next hole is lost too (RFC 6582 §3.2 step 4). The
			 * segments that made the duplicate ACKs are now cumulatively acked. */
			uint32_t smss = tcp_smss(c);
			uint32_t gone = acked > smss ? acked - smss : 0;
			c->dupack_bytes -= min_u32(c->dupack_bytes, gone);
			if (c->flags & TCP_CF_SACK)
				tcp_sack_mark_lost(c);
			tcp_retransmit_first(st, c);
		}
	} else {
		c->dupacks = 0;
		c->dupack_bytes = 0;
		st->tcp->cc->ack(c, acked);
		/* recover trails snd_una outside recovery, so the comparison in dup_ack
		 * never meets a wrapped sequence space on a long transfer. */
		if (seq_gt(ack, c->recover))
			c->recover = ack;
	}
	if (c->snd_una == c->snd_nxt)
		c->rtx_us = 0;
	else
		tcp_rtx_arm(st, c);
	if (data) {
		bool blocked = c->flags & TCP_CF_WANT_SEND;

		c->flags &= ~TCP_CF_WANT_SEND;
		if (blocked || !st->cfg.sent_when_blocked)
			tcp_event(st, c, FP_EV_TCP_SENT, 0, data, NULL);
	}
}

/*
 * The fifth step for a synchronized conn: RFC 5961 §5.2 ACK acceptability, then SND.UNA
 * and the window (SND.WL1/WL2 rule), duplicate ACKs and loss recovery. False when the
 * segment is to be dropped.
 */
static bool ack_process(struct fp_stack *st, struct fp_tcp_conn *c, const struct tcp_seg *s)
{
	const struct fp_tcp *t = &s->t;
	uint32_t ack = t->ack, wnd = (uint32_t)t->wnd << c->snd_wscale;
	uint32_t old_una = c->snd_una;

	if (seq_gt(ack, c->snd_nxt)) {
		NET_STAT_INC(st, tcp_out_of_window);
		c->flags |= TCP_CF_ACK_NOW;
		return false;
	}
	if (seq_lt(ack, c->snd_una - c->max_snd_wnd)) {
		NET_STAT_INC(st, tcp_out_of_window);
		tcp_send_challenge_ack(st, c);
		return false;
	}
	c->probes = 0; /* the peer is alive: a zero window may be probed indefinitely */
	bool dup = ack == c->snd_una && s->seg_len == 0 && wnd == c->snd_wnd &&
		   c->snd_una != c->snd_nxt;
	if (seq_gt(ack, c->snd_una))
		new_ack(st, c, ack, t);
	bool sack_news = (c->flags & TCP_CF_SACK) && t->opt.n_sack && tcp_sack_update(c, t);
	if (dup)
		tcp_dup_ack(st, c, sack_news);
	else if (sack_news && (c->flags & TCP_CF_RECOVERY))
		tcp_sack_mark_lost(c);
	if (seq_le(old_una, ack) && (seq_lt(c->snd_wl1, t->seq) ||
				     (c->snd_wl1 == t->seq && seq_le(c->snd_wl2, ack)))) {
		c->snd_wnd = wnd;
		c->snd_wl1 = t->seq;
		c->snd_wl2 = ack;
		if (wnd > c->max_snd_wnd)
			c->max_snd_wnd = wnd;
	}
	if (c->lost_bytes || (c->flags & TCP_CF_FIN_LOST))
		tcp_retransmit_lost(st, c);
	tcp_persist_check(st, c);
	if ((c->flags & TCP_CF_WANT_SEND) && fp_tcp_sendable(st, c)) {
		c->flags &= ~TCP_CF_WANT_SEND;
		tcp_event(st, c, FP_EV_TCP_SENT, 0, 0, NULL); /* the windows opened */
	}
	return true;
}

/* SYN_RECEIVED -> ESTABLISHED on an ACK of our SYN (RFC 9293 §3.10.7.4 fifth). */
static bool establish(struct fp_stack *st, struct fp_tcp_conn *c, const struct tcp_seg *s)
{
	c->snd_una = s->t.ack;
	syn_rtt(st, c, &s->t);
	c->snd_wnd = c->max_snd_wnd = (uint32_t)s->t.wnd << c->snd_wscale;
	c->snd_wl1 = s->t.seq;
	c->snd_wl2 = s->t.ack;
	tcp_set_state(st, c, FP_TCP_ESTABLISHED);
	if (!(c->flags & TCP_CF_PASSIVE)) {
		NET_STAT_INC(st, tcp_connected);
		tcp_event(st, c, FP_EV_TCP_CONNECTED, 0, 0, NULL);
		return true;
	}
	struct fp_tcp_conn *l = tcp_listener(st, c->lport);
	if (!l) {
		tcp_send_rst_conn(st, c); /* nobody to accept it any more */
		tcp_set_state(st, c, FP_TCP_CLOSED);
		return false;
	}
	c->cookie = l->cookie;
	c->flags |= TCP_CF_APP;
	NET_STAT_INC(st, tcp_accepted);
	tcp_event(st, c, FP_EV_TCP_ACCEPTED, 0, 0, NULL);
	return true;
}

/* ---- the seventh step: segment text ---- */

/* The ACK policy for in-order data (documented in tcp.h). */
static void ack_policy(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t len, bool had_ooo)
{
	if (len > c->rcv_mss)
		c->rcv_mss = (uint16_t)len;
	if (had_ooo || st->cfg.delack_us == FP_NET_DELACK_OFF ||
	    c->rx_unacked >= 2u * c->rcv_mss)
		c->flags |= TCP_CF_ACK_NOW;
	else
		tcp_delack_arm(st, c);
}

/*
 * RFC 9293 §3.10.7.4 seventh: trim the payload to the window, deliver it if it is next
 * (then whatever the out-of-order queue now continues), else keep it out of order.
 * Returns true when the segment's FIN (or a queued one) is now in sequence.
 */
static bool text(struct fp_stack *st, struct fp_tcp_conn *c, struct tcp_seg *s)
{
	struct fp_mbuf *m = s->m;
	uint32_t seq = s->t.seq, len = s->len;
	bool fin = s->t.flags & FP_TCP_FIN, had_ooo = c->ooo_head != NULL;
	uint32_t right = seq_gt(c->rcv_adv, c->rcv_nxt) ? c->rcv_adv : c->rcv_nxt;

	if (seq_lt(seq, c->rcv_nxt)) {
		uint32_t cut = min_u32(c->rcv_nxt - seq, len);
		fp_mbuf_adj(m, cut);
		seq += cut;
		len -= cut;
	}
	if (seq_gt(seq + len, right)) {
		uint32_t cut = min_u32(seq + len - right, len);
		NET_STAT_INC(st, tcp_out_of_window); /* bytes beyond the window dropped */
		fp_mbuf_trim(m, cut);
		len -= cut;
		fin = false;
		c->flags |= TCP_CF_ACK_NOW;
	}
	if (len == 0) {
		if (fin && seq_gt(seq, c->rcv_nxt)) {
			s->m = NULL;
			tcp_ooo_fin(st, c, m, seq); /* a FIN that overtook the data */
			c->flags |= TCP_CF_ACK_NOW;
		}
		return fin && seq == c->rcv_nxt;
	}
	s->m = NULL;
	if (seq != c->rcv_nxt) {
		tcp_ooo_insert(st, c, m, seq, len, fin);
		c->flags |= TCP_CF_ACK_NOW; /* RFC 5681 §4.2: out of order, ACK at once */
		return false;
	}
	tcp_deliver(st, c, m, len);
	/* A FIN here ends the stream at seq + len: what waits out of order lies beyond it
	 * (or repeats bytes just delivered) and must not be delivered, nor the FIN be taken
	 * after it, which would ACK a FIN at a sequence number the peer never sent it at
	 * (found by fuzz_stack). fin_arrives() drops the queue. */
	bool ooo_fin = had_ooo && !fin && tcp_ooo_drain(st, c);
	ack_policy(st, c, len, had_ooo);
	return ooo_fin || fin;
}

/* ---- the eighth step: FIN ---- */

static void fin_arrives(struct fp_stack *st, struct fp_tcp_conn *c)
{
	/* Nothing follows the FIN: whatever still waits out of order is beyond it (a
	 * broken or hostile peer) and is dropped, not kept, SACKed or counted against the
	 * window until close (Linux's tcp_fin() purges its queue too). */
	tcp_ooo_purge(st, c);
	c->rcv_nxt++;
	c->flags |= TCP_CF_FIN_RCVD | TCP_CF_ACK_NOW;
	tcp_event(st, c, FP_EV_TCP_EOF, 0, 0, NULL);
	switch (c->state) {
	case FP_TCP_SYN_RECEIVED:
	case FP_TCP_ESTABLISHED:
		tcp_set_state(st, c, FP_TCP_CLOSE_WAIT);
		break;
	case FP_TCP_FIN_WAIT_1:
		if (c->snd_una == c->snd_nxt)
			tcp_enter_time_wait(st, c);
		else
			tcp_set_state(st, c, FP_TCP_CLOSING);
		break;
	case FP_TCP_FIN_WAIT_2:
		tcp_enter_time_wait(st, c);
		break;
	default:
		break;
	}
}

/* Our FIN has been acked: the state moves on (RFC 9293 §3.10.7.4 fifth, per state). */
static void fin_acked(struct fp_stack *st, struct fp_tcp_conn *c)
{
	switch (c->state) {
	case FP_TCP_FIN_WAIT_1:
		tcp_set_state(st, c, FP_TCP_FIN_WAIT_2);
		if (!(c->flags & TCP_CF_APP))
			c->keep_us = st->now_us + st->cfg.time_wait_us; /* orphan timeout */
		break;
	case FP_TCP_CLOSING:
		tcp_enter_time_wait(st, c);
		break;
	case FP_TCP_LAST_ACK:
		tcp_set_state(st, c, FP_TCP_CLOSED);
		tcp_event(st, c, FP_EV_TCP_DEAD, 0, 0, NULL);
		break;
	default:
		break;
	}
}

/* ---- the first step: is the segment acceptable? ---- */

/*
 * RFC 9293 §3.10.7.4, the four cases of the acceptability table, with two departures
 * Linux makes too: a FIN alone at rcv_nxt is taken even with the window shut (it needs no
 * buffer), and a segment without data may sit at the right edge itself (SEG.SEQ =
 * RCV.NXT + RCV.WND), unless it is a RST (RFC 5961 §3.2 keeps the strict window). The
 * latter is what a peer that has filled our window sends as its pure ACKs (seq = its
 * SND.NXT); by the strict rule they carry no ACK information, and two ends with full
 * windows and a hole each deadlock (found by the simulation tests).
 */
static bool seq_acceptable(const struct fp_tcp_conn *c, const struct tcp_seg *s, uint32_t wnd)
{
	uint32_t seq = s->t.seq, nxt = c->rcv_nxt;

	if (wnd == 0)
		return seq == nxt && s->len == 0;
	if (s->seg_len == 0)
		return seq_le(nxt, seq) && ((s->t.flags & FP_TCP_RST) ? seq_lt(seq, nxt + wnd)
								       : seq_le(seq, nxt + wnd));
	uint32_t last = seq + s->seg_len - 1;
	return (seq_le(nxt, seq) && seq_lt(seq, nxt + wnd)) ||
	       (seq_le(nxt, last) && seq_lt(last, nxt + wnd));
}

/* A RST in a synchronized state or SYN_RECEIVED, already known to be at rcv_nxt. */
static void rst_arrives(struct fp_stack *st, struct fp_tcp_conn *c)
{
	switch (c->state) {
	case FP_TCP_SYN_RECEIVED:
		if (c->flags & TCP_CF_PASSIVE)
			tcp_set_state(st, c, FP_TCP_CLOSED); /* back to LISTEN: forget it */
		else
			tcp_conn_fail(st, c, -ECONNREFUSED); /* an active open refused */
		break;
	case FP_TCP_TIME_WAIT:
		/* RFC 9293 (and Linux by default) close here; the exact sequence number
		 * RFC 5961 requires already blunts RFC 1337's TIME-WAIT assassination. */
		tcp_set_state(st, c, FP_TCP_CLOSED);
		tcp_event(st, c, FP_EV_TCP_DEAD, 0, 0, NULL);
		break;
	default:
		tcp_conn_fail(st, c, -ECONNRESET);
		break;
	}
}

/*
 * RFC 9293 §3.10.7.4 "Otherwise": every state from SYN_RECEIVED on, laid out as the RFC's
 * numbered steps. The one long function of the TCP code (see STYLE.md).
 */
static void segment_arrives(struct fp_stack *st, struct fp_tcp_conn *c, struct tcp_seg *s)
{
	const struct fp_tcp *t = &s->t;
	uint32_t wnd = seq_gt(c->rcv_adv, c->rcv_nxt) ? c->rcv_adv - c->rcv_nxt : 0;

	/* In SYN_RECEIVED, the peer's SYN again: without ACK our SYN-ACK was lost, send it
	 * again; with ACK it is the other half of a simultaneous open (RFC 9293 §3.5
	 * figure 7): the SYN is old news, the ACK is not, so go on without the SYN. */
	if (c->state == FP_TCP_SYN_RECEIVED && (t->flags & FP_TCP_SYN) &&
	    !(t->flags & FP_TCP_RST) && t->seq == c->irs) {
		if (!(t->flags & FP_TCP_ACK)) {
			/* Echo this SYN's TSval, so the peer's RTT sample is from its latest
			 * SYN, not the first one (RFC 7323 §4.3; Linux does the same). */
			if ((c->flags & TCP_CF_TS) && t->opt.has_ts)
				c->ts_recent = t->opt.ts_val;
			NET_STAT_INC(st, tcp_dup_seg);
			tcp_send_syn(st, c);
			return;
		}
		s->t.flags &= (uint8_t)~FP_TCP_SYN;
		s->t.seq++;
		s->seg_len--;
	}

	/* PAWS (RFC 7323 §5.3): a timestamp older than ts_recent marks an old duplicate. */
	if ((c->flags & TCP_CF_TS) && t->opt.has_ts && !(t->flags & FP_TCP_RST) &&
	    seq_lt(t->opt.ts_val, c->ts_recent)) {
		NET_STAT_INC(st, tcp_out_of_window);
		c->flags |= TCP_CF_ACK_NOW;
		return;
	}

	/* first: check the sequence number. An unacceptable segment is answered with an
	 * ACK (unless it is a RST) and dropped; in TIME_WAIT a retransmitted FIN also
	 * restarts the 2 MSL wait. */
	if (t->flags & FP_TCP_RST)
		NET_STAT_INC(st, tcp_rst_rx);
	if (!seq_acceptable(c, s, wnd)) {
		if (t->flags & FP_TCP_RST) {
			NET_STAT_INC(st, tcp_out_of_window);
			return;
		}
		if (s->len && seq_le(t->seq + s->len, c->rcv_nxt))
			NET_STAT_INC(st, tcp_dup_seg);
		else
			NET_STAT_INC(st, tcp_out_of_window);
		if (c->state == FP_TCP_TIME_WAIT && (t->flags & FP_TCP_FIN))
			tcp_enter_time_wait(st, c);
		c->flags |= TCP_CF_ACK_NOW;
		return;
	}
	c->last_rx_us = st->now_us;
	tcp_keepalive_reset(st, c);
	/* RFC 7323 §4.3: remember the TSval of the segment that starts at Last.ACK.sent
	 * (rcv_nxt less what we have not acked yet). */
	if ((c->flags & TCP_CF_TS) && t->opt.has_ts &&
	    seq_le(t->seq, c->rcv_nxt - c->rx_unacked))
		c->ts_recent = t->opt.ts_val;

	/* second: check the RST bit (RFC 5961 §3.2): exactly at rcv_nxt it resets the
	 * conn; elsewhere in the window it gets a challenge ACK. */
	if (t->flags & FP_TCP_RST) {
		if (t->seq == c->rcv_nxt) {
			rst_arrives(st, c);
		} else {
			NET_STAT_INC(st, tcp_out_of_window);
			tcp_send_challenge_ack(st, c);
		}
		return;
	}

	/* third: security and precedence: not used. */

	/* fourth: check the SYN bit. In a passive SYN_RECEIVED it sends the conn back to
	 * LISTEN; in a synchronized state it gets a challenge ACK (RFC 5961 §4.2). */
	if (t->flags & FP_TCP_SYN) {
		NET_STAT_INC(st, tcp_out_of_window);
		if (c->state == FP_TCP_SYN_RECEIVED && (c->flags & TCP_CF_PASSIVE))
			tcp_set_state(st, c, FP_TCP_CLOSED);
		else
			tcp_send_challenge_ack(st, c);
		return;
	}

	/* fifth: check the ACK field. Without ACK the segment is dropped. */
	if (!(t->flags & FP_TCP_ACK)) {
		NET_STAT_INC(st, tcp_bad);
		return;
	}
	if (c->state == FP_TCP_SYN_RECEIVED) {
		if (!seq_lt(c->snd_una, t->ack) || !seq_le(t->ack, c->snd_nxt)) {
			NET_STAT_INC(st, tcp_out_of_window);
			tcp_send_reset(st, s->ip, t, s->seg_len);
			return;
		}
		if (!establish(st, c, s))
			return;
	}
	if (!ack_process(st, c, s))
		return;
	bool fin_was_acked = (c->flags & TCP_CF_FIN_SENT) && c->snd_una == c->snd_nxt;
	if (fin_was_acked && (c->state == FP_TCP_FIN_WAIT_1 || c->state == FP_TCP_CLOSING ||
			      c->state == FP_TCP_LAST_ACK)) {
		fin_acked(st, c);
		if (c->state == FP_TCP_CLOSED || c->state == FP_TCP_TIME_WAIT)
			return;
	}

	/* sixth: check the URG bit: urgent data is not supported (RFC 6093 discourages
	 * it); the bytes are delivered in line. */

	/* seventh: process the segment text, in ESTABLISHED and FIN_WAIT_1/2 only: after
	 * the peer's FIN there is no more text. Data for a conn the app has closed is
	 * answered with RST (RFC 1122 §4.2.2.13, as Linux does). */
	bool fin = false;
	if (c->state == FP_TCP_ESTABLISHED || c->state == FP_TCP_FIN_WAIT_1 ||
	    c->state == FP_TCP_FIN_WAIT_2) {
		if (s->len && !(c->flags & TCP_CF_APP)) {
			tcp_send_rst_conn(st, c);
			tcp_set_state(st, c, FP_TCP_CLOSED);
			return;
		}
		fin = text(st, c, s);
	} else if (s->len) {
		NET_STAT_INC(st, tcp_out_of_window); /* text after the peer's FIN */
		/* TIME-WAIT answers it with an ACK of what it has (as Linux's
		 * tcp_timewait_state_process does), so a peer that lost our last ACK
		 * learns where we stand instead of retrying into silence. */
		if (c->state == FP_TCP_TIME_WAIT)
			c->flags |= TCP_CF_ACK_NOW;
	}

	/* eighth: check the FIN bit, once everything before it has arrived. */
	if (fin && !(c->flags & TCP_CF_FIN_RCVD))
		fin_arrives(st, c);
	else if ((t->flags & FP_TCP_FIN) && tcp_synchronized(c->state) &&
		 (c->flags & TCP_CF_FIN_RCVD))
		c->flags |= TCP_CF_ACK_NOW; /* a FIN again: ACK it again */
}

/* ---- entry ---- */

static void conn_done(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (c->state != FP_TCP_CLOSED && (c->flags & TCP_CF_ACK_NOW))
		tcp_send_ack(st, c);
	if (!tcp_maybe_free(st, c))
		tcp_timer_defer(st, c);
}

static int parse(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip,
		 struct tcp_seg *s)
{
	if ((m->user & NET_MBUF_L2_BCAST) || m->next) {
		/* RFC 1122 §4.2.3.10: never for a broadcast; chained frames are not
		 * expected from a 1500-byte MTU device. */
		NET_STAT_INC(st, tcp_bad);
		return -EINVAL;
	}
	int err = fp_tcp_parse(fp_mbuf_data(m), m->data_len, ip->src, ip->dst, true, &s->t);
	if (err) {
		if (err == -EBADMSG)
			NET_STAT_INC(st, tcp_bad_csum);
		else
			NET_STAT_INC(st, tcp_bad);
		return err;
	}
	if (s->t.sport == 0 || s->t.dport == 0) {
		NET_STAT_INC(st, tcp_bad);
		return -EINVAL;
	}
	fp_mbuf_adj(m, s->t.hdr_len);
	s->ip = ip;
	s->m = m;
	s->len = m->data_len;
	s->seg_len = s->len + !!(s->t.flags & FP_TCP_SYN) + !!(s->t.flags & FP_TCP_FIN);
	return 0;
}

/* A SYN for a 4-tuple in TIME_WAIT with a higher sequence number may reopen it (RFC 9293
 * §3.6.1, RFC 6191): the old incarnation is dropped and the listener gets the SYN. */
static bool time_wait_reuse(struct fp_stack *st, struct fp_tcp_conn *c, const struct tcp_seg *s)
{
	if (c->state != FP_TCP_TIME_WAIT || (s->t.flags & (FP_TCP_ACK | FP_TCP_RST)) ||
	    !(s->t.flags & FP_TCP_SYN) || !seq_gt(s->t.seq, c->rcv_nxt) ||
	    !tcp_listener(st, c->lport))
		return false;
	tcp_set_state(st, c, FP_TCP_CLOSED);
	tcp_event(st, c, FP_EV_TCP_DEAD, 0, 0, NULL);
	tcp_maybe_free(st, c);
	return true;
}

void tcp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip)
{
	struct tcp_seg s;   /* every field set by parse() when it succeeds */
	struct fp_tcp_conn *c, *l;

	if (parse(st, m, ip, &s)) {
		net_free(st, m);
		return;
	}
	NET_STAT_INC(st, tcp_rx_segs);
	c = tcp_lookup(st, ip->dst, s.t.dport, ip->src, s.t.sport);
	if (c && time_wait_reuse(st, c, &s))
		c = NULL;
	if (!c) {
		if ((l = tcp_listener(st, s.t.dport)) != NULL) {
			c = listen_input(st, l, &s);
		} else {
			/* RFC 9293 §3.10.7.1: CLOSED. */
			NET_STAT_INC(st, tcp_no_port);
			tcp_send_reset(st, ip, &s.t, s.seg_len);
		}
		if (c) {
			segment_arrives(st, c, &s);
			conn_done(st, c);
		}
	} else if (c->state == FP_TCP_SYN_SENT) {
		syn_sent_input(st, c, &s);
		conn_done(st, c);
	} else {
		segment_arrives(st, c, &s);
		conn_done(st, c);
	}
	if (s.m)
		net_free(st, s.m);
}
