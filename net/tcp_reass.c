/* tcp_reass.c: TCP reassembly: in-order delivery (zero copy) and the out-of-order queue. */
#include <string.h>

#include "tcp.h"

/* In-order bytes for the app: the buffer itself goes up (zero copy) and stays held. */
void tcp_deliver(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m, uint32_t len)
{
	struct tcp_mb *mb = tcp_mb(m);

	memset(mb, 0, sizeof(*mb));
	mb->seq = c->rcv_nxt;
	mb->len = (uint16_t)len;
	if (c->held_tail)
		tcp_mb(c->held_tail)->next = m;
	else
		c->held_head = m;
	c->held_tail = m;
	c->held_bytes += len;
	c->rcv_nxt += len;
	c->rx_unacked += len;
	tcp_event(st, c, FP_EV_TCP_RECV, 0, len, m);
}

/* Take the out-of-order queue's head segments that are now in order. True if one of them
 * carried the FIN, which is then in sequence. */
bool tcp_ooo_drain(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct fp_mbuf *m;

	while ((m = c->ooo_head) && seq_le(tcp_mb(m)->seq, c->rcv_nxt)) {
		struct tcp_mb *mb = tcp_mb(m);
		uint32_t end = mb->seq + mb->len;
		bool fin = mb->flags & TCP_MB_FIN;
		c->ooo_head = mb->next;
		c->ooo_bytes -= mb->len;
		if (seq_gt(end, c->rcv_nxt)) {
			fp_mbuf_adj(m, c->rcv_nxt - mb->seq);
			tcp_deliver(st, c, m, end - c->rcv_nxt);
		} else {
			net_free(st, m);
		}
		if (fin && end == c->rcv_nxt)
			return true;
	}
	return false;
}

/*
 * Queue a segment beyond rcv_nxt, sorted and disjoint: the parts already held are cut off
 * the new one, segments it covers entirely are replaced. Bounded by cfg.ooo_max bytes.
 */
void tcp_ooo_insert(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m,
		       uint32_t seq, uint32_t len, bool fin)
{
	struct fp_mbuf **pp = &c->ooo_head;

	if (c->ooo_bytes + len > st->cfg.ooo_max) {
		NET_STAT_INC(st, tcp_ooo_drop);
		net_free(st, m);
		return;
	}
	NET_STAT_INC(st, tcp_ooo_seg);
	while (*pp && seq_le(tcp_mb(*pp)->seq + tcp_mb(*pp)->len, seq))
		pp = &tcp_mb(*pp)->next;
	if (*pp && seq_le(tcp_mb(*pp)->seq, seq)) {
		uint32_t e_end = tcp_mb(*pp)->seq + tcp_mb(*pp)->len;
		if (seq_ge(e_end, seq + len)) {
			NET_STAT_INC(st, tcp_dup_seg);
			net_free(st, m);
			return;
		}
		fp_mbuf_adj(m, e_end - seq);
		len -= e_end - seq;
		seq = e_end;
		pp = &tcp_mb(*pp)->next;
	}
	while (*pp && seq_le(tcp_mb(*pp)->seq + tcp_mb(*pp)->len, seq + len)) {
		struct fp_mbuf *old = *pp;
		/* A queued FIN the new bytes cover stays only where the peer put it: at their
		 * end. Data beyond it supersedes it (Linux drops the covered skb the same
		 * way); carried to the new end it would be ACKed at a sequence number the
		 * peer never sent a FIN at (found triaging the fuzz_stack crash below). */
		if ((tcp_mb(old)->flags & TCP_MB_FIN) &&
		    tcp_mb(old)->seq + tcp_mb(old)->len == seq + len)
			fin = true;
		*pp = tcp_mb(old)->next;
		c->ooo_bytes -= tcp_mb(old)->len;
		net_free(st, old);
	}
	if (*pp && seq_lt(tcp_mb(*pp)->seq, seq + len)) {
		uint32_t cut = seq + len - tcp_mb(*pp)->seq;
		fp_mbuf_trim(m, cut);
		len -= cut;
		fin = false;
	}
	struct tcp_mb *mb = tcp_mb(m);
	memset(mb, 0, sizeof(*mb));
	mb->seq = seq;
	mb->len = (uint16_t)len;
	mb->flags = fin ? TCP_MB_FIN : 0;
	mb->next = *pp;
	*pp = m;
	c->ooo_bytes += len;
	c->ooo_last = seq;
}

/* A FIN alone beyond rcv_nxt: kept as an empty out-of-order entry, so it need not be
 * retransmitted once the data before it arrives. One per conn, and never inside data
 * already queued (a peer that says otherwise is ignored). */
void tcp_ooo_fin(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m, uint32_t seq)
{
	struct fp_mbuf **pp = &c->ooo_head;

	for (struct fp_mbuf *x = c->ooo_head; x; x = tcp_mb(x)->next) {
		struct tcp_mb *xb = tcp_mb(x);
		if ((xb->flags & TCP_MB_FIN) || seq_lt(seq, xb->seq + xb->len)) {
			net_free(st, m);
			return;
		}
		pp = &xb->next;
	}
	struct tcp_mb *mb = tcp_mb(m);
	memset(mb, 0, sizeof(*mb));
	mb->seq = seq;
	mb->flags = TCP_MB_FIN;
	*pp = m;
	NET_STAT_INC(st, tcp_ooo_seg);
}

/* Free the out-of-order queue. */
void tcp_ooo_purge(struct fp_stack *st, struct fp_tcp_conn *c)
{
	while (c->ooo_head) {
		struct fp_mbuf *m = c->ooo_head;
		c->ooo_head = tcp_mb(m)->next;
		net_free(st, m);
	}
	c->ooo_bytes = 0;
}
