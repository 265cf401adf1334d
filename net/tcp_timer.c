/* tcp_timer.c: the one wheel timer per conn (retransmit, persist, delayed ACK, keep-alive, TIME_WAIT) and RTT estimation. */
#include "tcp.h"

/*
 * A conn keeps its deadlines in three fields (rtx_us, delack_us, keep_us; 0 = off) and
 * arms its single fp_timer at the earliest. Most updates only move a deadline later or
 * clear it; the wheel timer then fires early, finds nothing due and re-arms (or, with no
 * deadline left, stays off), which costs less than touching the wheel on every segment.
 * Clearing the last deadline leaves the timer armed too: a request/response connection
 * clears its retransmit deadline with every ACK and sets it again with the next reply,
 * and unlinking and refiling the timer each time cost ~90 instructions per request
 * (bench/request_cost.py). Closing and freeing a conn cancel the timer themselves.
 */
void tcp_timer_update(struct fp_stack *st, struct fp_tcp_conn *c)
{
	uint64_t t = UINT64_MAX;

	if (c->rtx_us)
		t = c->rtx_us;
	if (c->delack_us && c->delack_us < t)
		t = c->delack_us;
	if (c->keep_us && c->keep_us < t)
		t = c->keep_us;
	if (t == UINT64_MAX)
		return;   /* an armed timer fires, finds nothing due and stays off */
	if (fp_timer_pending(&c->timer) && c->timer.expire_tick <= fp_timer_tick_of(t))
		return; /* fires no later than needed; it re-arms itself then */
	fp_timer_add(&st->wheel, &c->timer, t);
}

/*
 * A segment's own update, put off to the end of the round (the flush runs when the stack's
 * caller takes the frames, asks for the next deadline or runs the timers). A request sets
 * the delayed-ACK deadline; the application answers in the same round and the answer
 * carries the ACK, clearing it. Updated at once, the wheel timer would be armed for the
 * delayed ACK, fire 500 us later to find nothing due and re-arm for the retransmit
 * deadline: one fire per request for any conn sending less often than that, for nothing.
 */
void tcp_timer_defer(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct tcp_stack *ts = st->tcp;

	if (c->flags & TCP_CF_DEFERRED)
		return;
	if (ts->n_defer == TCP_DEFER_MAX) {
		tcp_timer_update(st, c);
		return;
	}
	c->flags |= TCP_CF_DEFERRED;
	ts->defer[ts->n_defer++] = c;
}

void tcp_timer_undefer(struct fp_stack *st, struct fp_tcp_conn *c)
{
	struct tcp_stack *ts = st->tcp;

	if (!(c->flags & TCP_CF_DEFERRED))
		return;
	c->flags &= ~TCP_CF_DEFERRED;
	for (uint32_t i = 0; i < ts->n_defer; i++)
		if (ts->defer[i] == c) {
			ts->defer[i] = ts->defer[--ts->n_defer];
			return;
		}
}

void tcp_timer_flush(struct fp_stack *st)
{
	struct tcp_stack *ts = st->tcp;

	while (ts->n_defer) {
		struct fp_tcp_conn *c = ts->defer[--ts->n_defer];
		c->flags &= ~TCP_CF_DEFERRED;
		tcp_timer_update(st, c);
	}
}

/*
 * RFC 6298 §5.1/§5.5: the timer runs for RTO, doubled per back-off, at most rto_max.
 *
 * A flight of less than two full-sized segments may legitimately go unacknowledged for the
 * peer's delayed-ACK time (RFC 9293 §3.8.6.3; Linux holds such an ACK 40-200 ms), far
 * longer than a microsecond-scale RTO. Retransmitting then only duplicates what the peer
 * has (a request/response server's every reply is such a flight), so the timer for it runs
 * at least srtt + cfg.peer_delack_us: RFC 8985's worst-case delayed-ACK allowance (§7.2),
 * applied to the RTO rather than to a separate probe timer. Flights of two or more full
 * segments must be ACKed at once, and keep the short RTO.
 */
void tcp_rtx_arm(struct fp_stack *st, struct fp_tcp_conn *c)
{
	uint64_t rto = c->rto_us;

	if (st->cfg.peer_delack_us != FP_NET_PEER_DELACK_NONE && tcp_synchronized(c->state) &&
	    c->snd_nxt - c->snd_una < 2 * tcp_smss(c) &&
	    rto < (uint64_t)c->srtt_us + st->cfg.peer_delack_us)
		rto = (uint64_t)c->srtt_us + st->cfg.peer_delack_us;
	rto <<= c->backoff < 30 ? c->backoff : 30;   /* the floor doubles too (§5.5) */
	if (rto > st->cfg.rto_max_us)
		rto = st->cfg.rto_max_us;
	c->rtx_us = st->now_us + rto;
}

/* RFC 6298 §2.2 (first sample) and §2.3 (later ones), alpha 1/8, beta 1/4, G = the
 * 16 us wheel tick; the result is clamped to [rto_min, rto_max] (§2.4, §2.5). */
void tcp_rtt_sample(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t rtt_us)
{
	if (rtt_us == 0)
		rtt_us = 1;
	if (!c->srtt_us) {
		c->srtt_us = rtt_us;
		c->rttvar_us = rtt_us / 2;
	} else {
		uint32_t d = c->srtt_us > rtt_us ? c->srtt_us - rtt_us : rtt_us - c->srtt_us;
		c->rttvar_us = (3 * c->rttvar_us + d) / 4;
		c->srtt_us = (7 * c->srtt_us + rtt_us) / 8;
	}
	uint64_t var = 4ull * c->rttvar_us;
	uint64_t rto = c->srtt_us + (var > FP_TIMER_TICK_US ? var : FP_TIMER_TICK_US);
	if (rto < st->cfg.rto_min_us)
		rto = st->cfg.rto_min_us;
	if (rto > st->cfg.rto_max_us)
		rto = st->cfg.rto_max_us;
	c->rto_us = (uint32_t)rto;
}

void tcp_delack_arm(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (!c->delack_us)
		c->delack_us = st->now_us + st->cfg.delack_us;
}

/*
 * Zero-window probing, Linux style: nothing is buffered beyond the peer's window, so when
 * the window is shut, nothing is in flight and the app has been refused, a timer sends
 * <SEQ=SND.UNA-1><ACK> with no data (RFC 9293 §3.8.6.1 allows probing with an
 * unacceptable segment: it elicits an ACK carrying the current window), backing off.
 */
void tcp_persist_check(struct fp_stack *st, struct fp_tcp_conn *c)
{
	bool shut = seq_le(tcp_snd_edge(c), c->snd_nxt) && c->snd_una == c->snd_nxt &&
		    (c->flags & TCP_CF_WANT_SEND) && !(c->flags & TCP_CF_SHUT_WR) &&
		    tcp_synchronized(c->state);

	if (shut && !(c->flags & TCP_CF_PERSIST)) {
		c->flags |= TCP_CF_PERSIST;
		c->backoff = 0;
		c->probes = 0;
		tcp_rtx_arm(st, c);
	} else if (!shut && (c->flags & TCP_CF_PERSIST)) {
		c->flags &= ~TCP_CF_PERSIST;
		c->backoff = 0;
		c->rtx_us = 0;
		if (c->snd_una != c->snd_nxt)
			tcp_rtx_arm(st, c);
	}
}

/* Probes go on as long as the peer answers them (probes is reset by any acceptable ACK);
 * cfg.data_retries unanswered ones in a row end the conn. */
static void persist_probe(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (c->probes >= st->cfg.data_retries) {
		tcp_conn_fail(st, c, -ETIMEDOUT);
		return;
	}
	c->probes++;
	NET_STAT_INC(st, tcp_zero_window_probe);
	tcp_send_ctl(st, c, FP_TCP_ACK, c->snd_una - 1);
	if (c->backoff < 30)
		c->backoff++;
	tcp_rtx_arm(st, c);
}

void tcp_enter_time_wait(struct fp_stack *st, struct fp_tcp_conn *c)
{
	tcp_set_state(st, c, FP_TCP_TIME_WAIT);
	c->flags &= ~(TCP_CF_PERSIST | TCP_CF_FIN_LOST);
	c->delack_us = c->keep_us = 0;
	/* RFC 9293 §3.6: 2 MSL, here cfg.time_wait_us. */
	c->rtx_us = st->now_us + st->cfg.time_wait_us;
}

void tcp_keepalive_reset(struct fp_stack *st, struct fp_tcp_conn *c)
{
	(void)st;
	if ((c->flags & (TCP_CF_KEEPALIVE | TCP_CF_APP)) != (TCP_CF_KEEPALIVE | TCP_CF_APP))
		return;
	c->ka_probes = 0;
	c->keep_us = c->last_rx_us + c->ka_idle_us;
}

/* SYN or SYN-ACK retransmission (RFC 9293 §3.8.1, RFC 6298 §5), at most cfg.syn_retries. */
static void syn_timeout(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (c->backoff >= st->cfg.syn_retries) {
		tcp_conn_fail(st, c, -ETIMEDOUT);
		return;
	}
	c->backoff++;
	c->retransmits++;
	NET_STAT_INC(st, tcp_rto);
	tcp_send_syn(st, c);
	tcp_rtx_arm(st, c);
}

/* Every unacked segment not SACKed is taken as lost (RFC 6675 §5.1); after a second
 * timeout on the same data the SACK marks go too, in case the receiver reneged
 * (RFC 2018 §8). */
static void mark_all_lost(struct fp_tcp_conn *c)
{
	bool forget_sack = c->backoff >= 2;

	c->lost_bytes = 0;
	if (forget_sack)
		c->sacked_bytes = 0;
	for (struct fp_mbuf *m = c->rtx_head; m; m = tcp_mb(m)->next) {
		struct tcp_mb *mb = tcp_mb(m);
		if (forget_sack)
			mb->flags &= (uint8_t)~TCP_MB_SACKED;
		if (mb->flags & TCP_MB_SACKED)
			continue;
		mb->flags |= TCP_MB_LOST;
		c->lost_bytes += mb->len;
	}
	if ((c->flags & TCP_CF_FIN_SENT) && c->snd_una != c->snd_nxt)
		c->flags |= TCP_CF_FIN_LOST;
}

/* RFC 6298 §5.4-5.7 with RFC 5681 §3.1 and RFC 6582 §4.2 (recover = snd_nxt). */
static void rtx_timeout(struct fp_stack *st, struct fp_tcp_conn *c)
{
	if (c->state == FP_TCP_TIME_WAIT) {
		tcp_set_state(st, c, FP_TCP_CLOSED);
		tcp_event(st, c, FP_EV_TCP_DEAD, 0, 0, NULL); /* if the app still holds it */
		return;
	}
	if (c->state == FP_TCP_SYN_SENT || c->state == FP_TCP_SYN_RECEIVED) {
		syn_timeout(st, c);
		return;
	}
	if (c->flags & TCP_CF_PERSIST) {
		persist_probe(st, c);
		return;
	}
	if (c->snd_una == c->snd_nxt)
		return;
	if (c->backoff >= st->cfg.data_retries) {
		tcp_conn_fail(st, c, -ETIMEDOUT);
		return;
	}
	NET_STAT_INC(st, tcp_rto);
	if ((c->flags & TCP_CF_TS) && c->backoff == 0) {
		/* RFC 3522 §3.2: the first retransmission's TSval (it leaves below, at this
		 * same clock) and the windows the timeout is about to take. */
		c->flags |= TCP_CF_EIFEL;
		c->eifel_tsval = tcp_ts_now(c, st->now_us);
		c->undo_cwnd = c->cwnd;
		c->undo_ssthresh = c->ssthresh;
	}
	st->tcp->cc->rto(c);
	if (c->backoff < 30)
		c->backoff++;
	c->flags &= ~TCP_CF_RECOVERY;
	c->recover = c->snd_nxt;
	c->dupacks = 0;
	c->dupack_bytes = 0;
	mark_all_lost(c);
	tcp_retransmit_lost(st, c);
	tcp_rtx_arm(st, c);
}

/* Keep-alive (RFC 1122 §4.2.3.6): after ka_idle_us of silence, probe with
 * <SEQ=SND.UNA-1>; ka_count unanswered probes end the conn. The same deadline serves as
 * the orphan FIN_WAIT_2 timeout of a conn the app has closed (Linux's tcp_fin_timeout). */
static void keep_timeout(struct fp_stack *st, struct fp_tcp_conn *c, uint64_t now)
{
	if (c->state == FP_TCP_FIN_WAIT_2 && !(c->flags & TCP_CF_APP)) {
		tcp_set_state(st, c, FP_TCP_CLOSED);
		return;
	}
	if (!(c->flags & TCP_CF_KEEPALIVE) || !tcp_synchronized(c->state) ||
	    c->state == FP_TCP_TIME_WAIT)
		return;
	if (c->ka_probes == 0 && now < c->last_rx_us + c->ka_idle_us) {
		c->keep_us = c->last_rx_us + c->ka_idle_us;
		return;
	}
	if (c->ka_probes >= c->ka_count) {
		tcp_send_rst_conn(st, c);
		tcp_conn_fail(st, c, -ETIMEDOUT);
		return;
	}
	c->keep_us = now + c->ka_intvl_us;
	if (c->snd_una != c->snd_nxt || (c->flags & TCP_CF_PERSIST))
		return; /* the retransmit or persist timer is probing already */
	c->ka_probes++;
	NET_STAT_INC(st, tcp_keepalive_tx);
	tcp_send_ctl(st, c, FP_TCP_ACK, c->snd_una - 1);
}

void tcp_timer_fire(struct fp_timer *t, uint64_t now_us)
{
	struct fp_tcp_conn *c = fp_container_of(t, struct fp_tcp_conn, timer);
	struct fp_stack *st = c->st;

	NET_STAT_INC(st, tcp_timer_fires);
	if (c->delack_us && c->delack_us <= now_us) {
		c->delack_us = 0;
		tcp_send_ack(st, c);
	}
	if (c->rtx_us && c->rtx_us <= now_us) {
		c->rtx_us = 0;
		rtx_timeout(st, c);
	}
	if (c->keep_us && c->keep_us <= now_us) {
		c->keep_us = 0;
		keep_timeout(st, c, now_us);
	}
	if (!tcp_maybe_free(st, c))
		tcp_timer_update(st, c);
}
