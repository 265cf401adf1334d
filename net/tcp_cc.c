/* tcp_cc.c: congestion control behind an ops table (NewReno, RFC 5681/6582) and the loss recovery all of them share. */
#include "tcp.h"

/*
 * Loss recovery itself (which segments to retransmit, when to enter and leave recovery)
 * lives in tcp_input.c and is shared by every algorithm; these hooks only decide cwnd and
 * ssthresh. Recovery is pipe-based (RFC 6675 §5, with duplicate ACKs counted as delivered
 * bytes when SACK is off, as Linux does for Reno), so cwnd is not inflated per duplicate
 * ACK as in RFC 5681 §3.2 step 4: the pipe shrinks instead, to the same effect.
 */

/* RFC 6928 §2: IW = min(10 * MSS, max(2 * MSS, 14600)). */
static void newreno_init(struct fp_tcp_conn *c)
{
	uint32_t smss = tcp_smss(c);
	uint32_t iw = 2 * smss > 14600 ? 2 * smss : 14600;

	c->cwnd = iw < 10 * smss ? iw : 10 * smss;
	c->ssthresh = UINT32_MAX; /* RFC 5681 §3.1: arbitrarily high */
	c->cc_acked = 0;
}

/*
 * RFC 5681 §3.1: slow start grows cwnd by the bytes acked, at most 2 * SMSS per ACK
 * (RFC 3465 §2.2, L = 2, which keeps growth at 2x per RTT under delayed ACKs); congestion
 * avoidance adds one SMSS per cwnd of bytes acked (appropriate byte counting, eq. 3).
 */
static void newreno_ack(struct fp_tcp_conn *c, uint32_t acked)
{
	uint32_t smss = tcp_smss(c);

	if (c->cwnd < c->ssthresh) {
		c->cwnd += acked < 2 * smss ? acked : 2 * smss;
		return;
	}
	c->cc_acked += acked;
	if (c->cc_acked >= c->cwnd) {
		c->cc_acked -= c->cwnd;
		c->cwnd += smss;
	}
}

/* RFC 5681 §3.1 eq. 4: ssthresh = max(FlightSize / 2, 2 * SMSS). */
static uint32_t half_flight(const struct fp_tcp_conn *c)
{
	uint32_t half = tcp_flight(c) / 2, two = 2 * tcp_smss(c);

	return half > two ? half : two;
}

/* RFC 6582 §3.2 step 1 / RFC 6675 §5 step (4.2): cwnd = ssthresh; the pipe does the rest. */
static void newreno_enter_recovery(struct fp_tcp_conn *c)
{
	c->ssthresh = half_flight(c);
	c->cwnd = c->ssthresh;
	c->cc_acked = 0;
}

/* RFC 6582 §3.2 step 3, option 1: cwnd = min(ssthresh, max(FlightSize, SMSS) + SMSS),
 * which avoids a burst when the full ACK leaves little in flight. */
static void newreno_exit_recovery(struct fp_tcp_conn *c)
{
	uint32_t smss = tcp_smss(c);
	uint32_t f = tcp_flight(c);
	uint32_t w = (f > smss ? f : smss) + smss;

	c->cwnd = w < c->ssthresh ? w : c->ssthresh;
}

/* RFC 5681 §3.1: on a timeout, ssthresh per eq. 4 (only for the first retransmission of a
 * segment: backoff is 0) and cwnd = LW = 1 SMSS. */
static void newreno_rto(struct fp_tcp_conn *c)
{
	if (c->backoff == 0)
		c->ssthresh = half_flight(c);
	c->cwnd = tcp_smss(c);
	c->cc_acked = 0;
}

const struct tcp_cc_ops tcp_cc_newreno = {
	.name = "newreno",
	.init = newreno_init,
	.ack = newreno_ack,
	.enter_recovery = newreno_enter_recovery,
	.exit_recovery = newreno_exit_recovery,
	.rto = newreno_rto,
};

/* ---- loss recovery (RFC 6582 NewReno, RFC 6675 SACK-based, simplified) ---- */

/* RFC 2018 §3 + RFC 6675: mark rtx segments covered by the ACK's SACK blocks. Blocks below
 * snd_una (D-SACK, RFC 2883) or beyond snd_nxt are ignored. True if anything was new. */
bool tcp_sack_update(struct fp_tcp_conn *c, const struct fp_tcp *t)
{
	bool news = false;

	for (unsigned i = 0; i < t->opt.n_sack; i++) {
		uint32_t l = t->opt.sack[i].left, r = t->opt.sack[i].right;
		if (!seq_lt(l, r) || !seq_gt(r, c->snd_una) || seq_gt(r, c->snd_nxt))
			continue;
		for (struct fp_mbuf *m = c->rtx_head; m; m = tcp_mb(m)->next) {
			struct tcp_mb *mb = tcp_mb(m);
			if (seq_ge(mb->seq, r))
				break;
			if ((mb->flags & TCP_MB_SACKED) || seq_lt(mb->seq, l) ||
			    seq_gt(mb->seq + mb->len, r))
				continue;
			mb->flags |= TCP_MB_SACKED;
			c->sacked_bytes += mb->len;
			if (mb->flags & TCP_MB_LOST) {
				mb->flags &= (uint8_t)~TCP_MB_LOST;
				c->lost_bytes -= mb->len;
			}
			news = true;
		}
	}
	return news;
}

static void mark_lost(struct fp_tcp_conn *c, struct tcp_mb *mb)
{
	if (mb->flags & (TCP_MB_SACKED | TCP_MB_LOST))
		return;
	mb->flags |= TCP_MB_LOST;
	c->lost_bytes += mb->len;
}

/* RFC 6675 §4 IsLost, by bytes: a segment is lost once more than (DupThresh - 1) * SMSS
 * bytes above it are SACKed. Segments already retransmitted are left to the RTO. */
void tcp_sack_mark_lost(struct fp_tcp_conn *c)
{
	uint32_t above = c->sacked_bytes, thresh = 2 * tcp_smss(c);

	for (struct fp_mbuf *m = c->rtx_head; m && above > thresh; m = tcp_mb(m)->next) {
		struct tcp_mb *mb = tcp_mb(m);
		if (mb->flags & TCP_MB_SACKED)
			above -= mb->len;
		else if (!(mb->flags & TCP_MB_RETRANS))
			mark_lost(c, mb);
	}
}

/* RFC 6582 §3.2 step 1 and step 4: the first unacked segment goes again right away,
 * whatever the pipe says. */
void tcp_retransmit_first(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct fp_mbuf *m = c->rtx_head;

	while (m && (tcp_mb(m)->flags & TCP_MB_SACKED))
		m = tcp_mb(m)->next;
	if (!m)
		return;
	struct tcp_mb *mb = tcp_mb(m);
	if (mb->flags & TCP_MB_LOST)
		c->lost_bytes -= mb->len;
	mb->flags = (uint8_t)((mb->flags & ~TCP_MB_LOST) | TCP_MB_RETRANS);
	c->retransmits++;
	NET_STAT_INC(st, tcp_rexmit);
	tcp_xmit_seg(st, c, m);
}

/* RFC 6582 §3.2 step 1 / RFC 6675 §5 step 4: enter fast recovery. */
static void enter_recovery(struct fp_stack *st, struct fp_tcp_conn *c)
{
	c->flags |= TCP_CF_RECOVERY;
	c->recover = c->snd_nxt;
	st->tcp->cc->enter_recovery(c);
	NET_STAT_INC(st, tcp_fast_rexmit);
	if (c->flags & TCP_CF_SACK)
		tcp_sack_mark_lost(c);
	tcp_retransmit_first(st, c);
	tcp_rtx_arm(st, c);
}

/* A duplicate ACK (RFC 5681 §2 definition; with SACK, RFC 6675 §2). */
void tcp_dup_ack(struct fp_stack *st, struct fp_tcp_conn *c, bool sack_news)
{
	uint32_t smss = tcp_smss(c);

	if (c->dupacks < UINT8_MAX)
		c->dupacks++;
	if (!(c->flags & TCP_CF_SACK) &&
	    c->dupack_bytes + c->lost_bytes + smss <= tcp_flight(c))
		c->dupack_bytes += smss; /* one more segment has left the network (Reno) */
	if (c->flags & TCP_CF_RECOVERY) {
		if (sack_news)
			tcp_sack_mark_lost(c);
		return;
	}
	/* RFC 6582 §3.2 step 1: not for duplicates of data sent before the last RTO. */
	bool sack_loss = (c->flags & TCP_CF_SACK) && c->sacked_bytes > 2 * smss;
	if ((c->dupacks >= 3 || sack_loss) && seq_ge(c->snd_una, c->recover))
		enter_recovery(st, c);
}
