/* tcp.h: TCP's private header: the control block, per-stack TCP state, the calls the tcp_*.c files share, and the white-box test builder. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <flowplane/cksum.h>
#include <flowplane/mbuf.h>
#include <flowplane/net.h>
#include <flowplane/timer.h>

#include "defs.h"

/*
 * Files:
 *   tcp.c         the table (4-tuple hash, listeners), conn life cycle, the fp_tcp_* API,
 *                 fp_tcp_info, the test builder
 *   tcp_input.c   tcp_input: RFC 9293 §3.10.7 (LISTEN, SYN-SENT, then the numbered steps of
 *                 §3.10.7.4), ACK processing
 *   tcp_reass.c   in-order delivery (zero copy) and the out-of-order queue
 *   tcp_output.c  segment building: data, retransmission, SYN, SYN-ACK, FIN, ACK (with
 *                 SACK blocks), RST; the window we advertise
 *   tcp_timer.c   the one timer per conn: retransmit/persist, delayed ACK, keep-alive,
 *                 TIME_WAIT and orphan timeouts; RTT estimation (RFC 6298)
 *   tcp_cc.c      congestion control ops (NewReno, RFC 5681 + RFC 6582) and the loss
 *                 recovery they share: SACK scoreboard, fast retransmit (RFC 6675 simplified)
 *   tcp_cookie.c  SipHash, ISNs (RFC 6528) and SYN cookies (RFC 4987)
 *
 * ==== What a white-box test (tests/unit/test_tcp.c) may rely on ====
 *
 * Setup. Build a stack with tests/unit/net_harness.h (nh_setup: 10.0.0.1/24, fixed secret,
 * default config, an empty tx queue) and teach it the peer's MAC first with
 * nh_learn(h, NH_PEER_IP, &nh_peer_mac): that feeds an ARP reply, after which every TCP
 * segment to the peer is queued at once instead of parked on ARP resolution. Then insert a
 * control block with tcp_test_conn() (below) in any state, or a listener with
 * fp_tcp_listen() (or tcp_test_conn with state FP_TCP_LISTEN).
 *
 * Input. A segment is processed by handing its Ethernet frame to fp_stack_input() (e.g.
 * nh_input(h, frame, nh_tcp_frame(...))). Processing is complete when fp_stack_input
 * returns: any reply is already in the tx queue (nh_pop()), any event in the event queue
 * (nh_events()). Time only moves through the now_us of fp_stack_input/fp_stack_poll
 * (nh_advance()); timers fire only from fp_stack_poll.
 *
 * Output. Every segment we send: IPv4 DF, TTL 64, no IP options; TCP flags always include
 * ACK except on a SYN of an active open and a RST answering a segment without ACK. Options
 * (fp_tcp_emit's Linux layout):
 *   SYN / SYN-ACK: MSS (cfg.mtu - 40); SACK-permitted unless cfg.no_sack (on a SYN-ACK only
 *     when the SYN offered it); timestamps unless cfg.no_timestamps (on a SYN-ACK only when
 *     the SYN had them); window scale (our shift: the smallest that fits cfg.rcv_buf in 16
 *     bits; on a SYN-ACK only when the SYN had the option).
 *   other segments: timestamps when negotiated (TSval = now_us / 1000 + c->ts_offset, TSecr
 *     = c->ts_recent), SACK blocks when negotiated and the out-of-order queue is not empty
 *     (first block the one holding the most recently arrived segment, RFC 2018 §4; then the
 *     rest in sequence order; at most 3 with timestamps, 4 without, and on a data segment
 *     only as many as fit in the MTU: a full-sized one carries none). A RST carries no
 *     options.
 *   seq: snd_nxt for a new segment (a pure ACK included); the segment's own for a
 *     retransmission; snd_una - 1 for a zero-window probe and a keep-alive probe.
 *   ack: rcv_nxt. window: tcp_rcv_window() >> rcv_wscale, rounded down (unscaled on a
 *     SYN/SYN-ACK); the edge we accept (rcv_adv) never moves left (RFC 9293 §3.8.6), so the
 *     field may say up to one scale unit less than that edge (RFC 7323 §2.4).
 *
 * Acceptability (RFC 9293 §3.10.7.4 first check) is the RFC's table with two departures,
 * both Linux's: a segment without data and without RST may sit exactly at the right edge
 * (SEG.SEQ = RCV.NXT + RCV.WND: the pure ACKs of a peer that filled our window), and a FIN
 * alone at rcv_nxt is taken with the window shut. Data on a SYN-ACK is taken (RFC 9293
 * §3.10.7.3 "continue at the sixth step"); data on a SYN to a listener is not (not acked).
 * A RST exactly at rcv_nxt resets in every synchronized state, TIME_WAIT included (RFC
 * 9293; RFC 1337 is not applied); in SYN_RECEIVED it drops a passive conn silently and
 * refuses an active one (CONNECTED -ECONNREFUSED).
 *
 * The window we advertise is cfg.rcv_buf - held (delivered, not yet recv_done) - bytes in
 * the out-of-order queue, rounded down to the scale unit, but never less than what keeps
 * the previously advertised right edge in place (less the rounding of the field above),
 * and moving that edge right only by at
 * least min(cfg.rcv_buf / 2, mss) unless the whole buffer is free (receiver SWS
 * avoidance, RFC 9293 §3.8.6.2.2).
 *
 * Other answers: in SYN_RECEIVED the peer's SYN again (same ISN, no ACK) gets the SYN-ACK
 * again; with ACK it completes a simultaneous open. In LISTEN, an ACK that is not a valid
 * SYN cookie gets a RST, except while SYN cookies are out (one sent in the last
 * TCP_COOKIE_MAX_AGE periods): then it is dropped (tcp_syn_cookie_bad), since a data
 * segment overtaking the cookie ACK cannot be checked. New data for a conn the app has
 * closed gets <RST,ACK> at snd_nxt and frees the conn.
 *
 * ACK policy (whether an ACK leaves during the fp_stack_input/recv_done call, "at once",
 * or later):
 *   - in-order data, the out-of-order queue empty before it arrived, no FIN:
 *       cfg.delack_us == FP_NET_DELACK_OFF: ACK at once;
 *       else when the bytes received since our last ACK reach 2 * rcv_mss (the largest
 *       segment payload seen so far from the peer, initially the send MSS): ACK at once
 *       (RFC 5681 §4.2, every second full-sized segment);
 *       else the delayed-ACK deadline is set to now + cfg.delack_us if not already set
 *       (a later segment never pushes it back), and the ACK leaves from fp_stack_poll.
 *   - at once: data or a FIN out of order (seq > rcv_nxt), data that fills or starts at a hole
 *     (out-of-order queue non-empty when it arrived, RFC 5681 §4.2), an unacceptable
 *     segment that is not a RST (RFC 9293 §3.10.7.4 first check; duplicates, window probes,
 *     keep-alives), a FIN (RFC 9293 §3.10.7.4 eighth), data dropped for lack of window
 *     or of out-of-order room, a SYN in a synchronized state (challenge ACK, RFC 5961 §4),
 *     an in-window RST with seq != rcv_nxt (challenge ACK, RFC 5961 §3). Challenge ACKs are
 *     limited to one per TCP_CHALLENGE_ACK_GAP_MS per conn (counted in tcp_challenge_ack
 *     when sent, tcp_challenge_ack_skip when not), and to nothing shared between conns.
 *   - fp_tcp_recv_done: at once when the advertised right edge would move right by at least
 *     min(cfg.rcv_buf / 2, mss) (receiver SWS avoidance, RFC 9293 §3.8.6.2.2); else nothing.
 *   - a pure ACK (no data, no SYN/FIN) never elicits an ACK.
 *   - any segment we send carries the ACK and clears the delayed-ACK deadline.
 *
 * Data we send: fp_tcp_send cuts the bytes it takes into segments of smss = mss - 12 with
 * timestamps (mss without) and transmits them at once, PSH on the last one.
 *
 * ==== Buffer metadata ====
 *
 * TCP keeps three lists of buffers per conn (retransmit queue, out-of-order queue, held
 * receive buffers) without any allocation: each buffer's first bytes (in its headroom,
 * below anything the stack or the device writes) hold a struct tcp_mb, like Linux's
 * skb->cb. A received frame has at least Ethernet + IPv4 + TCP headers (54 bytes) in front
 * of its payload, all parsed before tcp_mb is written; a buffer we send has FP_NET_HEADROOM
 * in front of its payload of which at most 94 bytes carry headers.
 */

#define TCP_CHALLENGE_ACK_GAP_MS  500    /* RFC 5961 §7 rate limit, per conn (Linux's
					  * tcp_invalid_ratelimit) */
#define TCP_EPHEMERAL_LO          49152  /* RFC 6335 §6 dynamic ports */
#define TCP_EPHEMERAL_HI          65535
#define TCP_LISTEN_BUCKETS        64
#define TCP_HASH_MIN              256    /* initial 4-tuple buckets; doubles with the count */
#define TCP_TS_HZ_DIV             1000   /* timestamp clock: 1 ms (RFC 7323 §5.4) */
#define TCP_COOKIE_PERIOD_US      (64ull * 1000 * 1000) /* SYN cookie time counter step */
#define TCP_COOKIE_MAX_AGE        2      /* periods a cookie stays valid (Linux: 2) */

/* Per-buffer bookkeeping in the buffer's first bytes (see above). */
struct tcp_mb {
	struct fp_mbuf *next;   /* next buffer in the conn's list */
	uint64_t tx_us;         /* rtx: time of the last (re)transmission */
	uint32_t seq;           /* sequence number of the first payload byte */
	uint32_t psum;          /* rtx: fp_csum_partial() of the payload */
	uint16_t len;           /* payload bytes */
	uint16_t off;           /* rtx: payload offset from buf */
	uint8_t flags;          /* TCP_MB_* */
};

#define TCP_MB_SACKED  0x01  /* rtx: covered by a SACK block */
#define TCP_MB_LOST    0x02  /* rtx: to be retransmitted */
#define TCP_MB_RETRANS 0x04  /* rtx: retransmitted at least once (Karn) */
#define TCP_MB_FIN     0x08  /* ooo: a FIN follows the payload (or, len 0, a FIN alone) */
#define TCP_MB_PSH     0x10  /* rtx: send with PSH (the last segment of a send) */

static_assert(sizeof(struct tcp_mb) <= 40, "tcp_mb must fit below any header we write");

static inline struct tcp_mb *tcp_mb(const struct fp_mbuf *m)
{
	return (struct tcp_mb *)(void *)m->buf;
}

/* Conn flags (c->flags). */
#define TCP_CF_APP        0x00001u /* the application holds the handle (not yet released) */
#define TCP_CF_PASSIVE    0x00002u /* opened by a listener; embryonic until accepted */
#define TCP_CF_HASHED     0x00004u /* in the 4-tuple table */
#define TCP_CF_EMBRYONIC  0x00008u /* counted in tcp_stack.n_embryonic */
#define TCP_CF_SHUT_WR    0x00010u /* the application shut down sending */
#define TCP_CF_FIN_SENT   0x00020u /* our FIN occupies snd_nxt - 1 */
#define TCP_CF_FIN_RCVD   0x00040u /* the peer's FIN is in rcv_nxt */
#define TCP_CF_WANT_SEND  0x00080u /* send was refused: report when the windows open */
#define TCP_CF_RECOVERY   0x00100u /* in fast recovery (RFC 6582) */
#define TCP_CF_PERSIST    0x00200u /* the rtx deadline is the persist timer */
#define TCP_CF_KEEPALIVE  0x00400u /* keep-alive on */
#define TCP_CF_TS         0x00800u /* timestamps negotiated */
#define TCP_CF_SACK       0x01000u /* SACK negotiated */
#define TCP_CF_DEAD       0x02000u /* DEAD/CONNECTED-error event given: no more events */
#define TCP_CF_ACK_NOW    0x04000u /* send an ACK before returning to the caller */
#define TCP_CF_FIN_LOST   0x08000u /* our FIN is to be retransmitted after the data */
#define TCP_CF_LIMITED    0x10000u /* counted against cfg.max_conns */
#define TCP_CF_WSCALE     0x20000u /* window scaling negotiated (both SYNs had the option) */
#define TCP_CF_EIFEL      0x40000u /* an RTO retransmitted; the next ACK tells if it was spurious */
#define TCP_CF_TX_WAIT    0x80000u /* a send found cfg.tx_bufs spent: others leave it a share */
#define TCP_CF_TX_QUEUED  0x100000u /* on the stack's queue of conns to wake as it refills */
#define TCP_CF_DEFERRED   0x200000u /* in tcp_stack.defer: its timer update waits for the flush */

/*
 * The control block. Sequence variables are named as in RFC 9293 §3.3.1. Deadlines are
 * absolute microseconds, 0 when off; the conn's one fp_timer is armed at the earliest.
 * The layout keeps an idle established conn within a few cache lines.
 */
struct fp_tcp_conn {
	struct fp_tcp_conn *hnext;       /* 4-tuple bucket or listener bucket chain */
	struct fp_tcp_conn *all_next;    /* every control block of the stack */
	struct fp_tcp_conn **all_pprev;
	struct fp_stack *st;
	struct fp_timer timer;
	uint64_t cookie;

	uint64_t rtx_us;                 /* retransmit / persist / SYN / TIME_WAIT (2MSL) */
	uint64_t delack_us;              /* delayed ACK */
	uint64_t keep_us;                /* keep-alive, or the orphan FIN_WAIT_2 timeout */
	uint64_t last_rx_us;             /* for keep-alive idle time */

	struct fp_mbuf *rtx_head, *rtx_tail;   /* sent, unacked data segments, in order */
	struct fp_mbuf *held_head, *held_tail; /* delivered to the app, not recv_done */
	struct fp_mbuf *ooo_head;              /* out-of-order segments, sorted, disjoint */

	uint32_t laddr, raddr;           /* host order */
	uint16_t lport, rport;
	uint8_t state;                   /* enum fp_tcp_state */
	uint8_t snd_wscale, rcv_wscale;  /* shift applied to windows received / sent */
	uint8_t dupacks;
	uint32_t flags;                  /* TCP_CF_* */
	uint16_t mss;                    /* negotiated MSS option value */
	uint16_t rcv_mss;                /* largest payload received (delayed ACK) */
	uint8_t backoff;                 /* RTO back-offs / SYN retries / probes sent */
	uint8_t ka_probes, ka_count;
	uint8_t probes;                  /* zero-window probes without an ACK in between */

	/* Send sequence space (RFC 9293 §3.3.1). */
	uint32_t iss, snd_una, snd_nxt, snd_wnd, snd_wl1, snd_wl2, max_snd_wnd;
	/* Congestion control (RFC 5681) and loss recovery (RFC 6582, RFC 6675 pipe). */
	uint32_t cwnd, ssthresh, recover;
	uint32_t sacked_bytes;           /* rtx bytes marked SACKED */
	uint32_t lost_bytes;             /* rtx bytes marked LOST, not yet retransmitted */
	uint32_t dupack_bytes;           /* Reno: dupacks counted as delivered (no SACK) */
	uint32_t cc_acked;               /* congestion avoidance byte counter (RFC 5681 §3.1) */
	/* RTT (RFC 6298). */
	uint32_t srtt_us, rttvar_us, rto_us;
	/* Eifel (RFC 3522, RFC 4015): the TSval of an RTO's first retransmission and the
	 * windows before it, kept while TCP_CF_EIFEL. */
	uint32_t eifel_tsval, undo_cwnd, undo_ssthresh;

	/* Receive sequence space. */
	uint32_t irs, rcv_nxt, rcv_adv;  /* rcv_adv: right edge we advertised */
	uint32_t held_bytes, held_off;   /* held_off: bytes of held_head already done */
	uint32_t ooo_bytes, ooo_last;    /* ooo_last: seq of the latest out-of-order arrival */
	uint32_t rx_unacked;             /* bytes received since our last ACK */

	/* Timestamps (RFC 7323). */
	uint32_t ts_recent, ts_offset;

	struct fp_tcp_conn *wait_next;   /* the stack's queue of conns short of tx_bufs */
	uint32_t ka_idle_us, ka_intvl_us;
	uint32_t retransmits;
	uint32_t challenge_ms;           /* when the last challenge ACK left (ms clock); 0 none */
};

/* The budget is 512 bytes per idle established conn: this block (320 bytes on x86-64), its
 * malloc header (8, rounded to 16), and its share of the 4-tuple table (one 8-byte bucket
 * pointer per conn at most two buckets per conn: 8-16). Nothing else is allocated per conn. */
static_assert(sizeof(struct fp_tcp_conn) <= 320, "keep the control block small");

/* Congestion control hooks (tcp_cc.c). Byte-counted; smss is tcp_smss(c). */
struct tcp_cc_ops {
	const char *name;
	/* initial cwnd (RFC 6928: 10 segments) and ssthresh (RFC 5681 §3.1: arbitrarily high) */
	void (*init)(struct fp_tcp_conn *c);
	/* @acked new bytes acked outside recovery: slow start or congestion avoidance */
	void (*ack)(struct fp_tcp_conn *c, uint32_t acked);
	/* third duplicate ACK (or SACK loss): set ssthresh and cwnd for recovery */
	void (*enter_recovery)(struct fp_tcp_conn *c);
	/* the ACK that covers recover: leave recovery (RFC 6582 §3.2 step 3) */
	void (*exit_recovery)(struct fp_tcp_conn *c);
	/* retransmission timeout (RFC 5681 §3.1 eq. 4, loss window) */
	void (*rto)(struct fp_tcp_conn *c);
};

extern const struct tcp_cc_ops tcp_cc_newreno;

/* Loss recovery (tcp_cc.c), shared by every ops table. */
/* Mark rtx segments covered by the ACK's SACK blocks; true if anything was new. */
bool tcp_sack_update(struct fp_tcp_conn *c, const struct fp_tcp *t);
/* RFC 6675 IsLost by bytes: mark unSACKed segments below enough SACKed data LOST. */
void tcp_sack_mark_lost(struct fp_tcp_conn *c);
/* Retransmit the first unacked, unSACKed segment now, whatever the pipe. */
void tcp_retransmit_first(struct fp_stack *st, struct fp_tcp_conn *c);
/* A duplicate ACK: count it, and enter fast recovery on the third (or on SACK loss). */
void tcp_dup_ack(struct fp_stack *st, struct fp_tcp_conn *c, bool sack_news);

/* Per-stack TCP state (st->tcp). */
/* Conns whose timer update a round may put off (tcp_timer_defer); beyond, no deferral. */
#define TCP_DEFER_MAX 64

struct tcp_stack {
	struct fp_tcp_conn **htab;       /* 4-tuple buckets */
	uint32_t hmask;                  /* buckets - 1 */
	uint32_t n_hashed;
	struct fp_tcp_conn *listen[TCP_LISTEN_BUCKETS];
	struct fp_tcp_conn *all;         /* every control block */
	uint32_t n_conns;                /* control blocks, listeners included */
	uint32_t n_limited;              /* those counted against cfg.max_conns */
	uint32_t n_embryonic;            /* passive SYN_RECEIVED conns (the SYN backlog) */
	uint32_t tx_bufs;                /* buffers in the conns' retransmit queues */
	uint32_t tx_waiters;             /* conns with TCP_CF_TX_WAIT */
	struct fp_tcp_conn *wait_head;   /* TCP_CF_TX_QUEUED conns, oldest first */
	struct fp_tcp_conn **wait_tail;
	uint16_t port_next;              /* where the ephemeral port search starts */
	const struct tcp_cc_ops *cc;
	uint64_t sip_key[2];             /* SipHash key derived from cfg.secret */
	uint64_t cookie_sent_us;         /* last SYN cookie sent (0: never): ACKs are checked
					  * against cookies only while some may be out there */
	uint8_t rcv_wscale;              /* our window shift for cfg.rcv_buf */
	uint32_t n_defer;
	struct fp_tcp_conn *defer[TCP_DEFER_MAX]; /* TCP_CF_DEFERRED conns (tcp_timer_defer) */
};

/* ---- small helpers ---- */

/* RFC 9293 §3.4 sequence comparisons (modulo 2^32). */
static inline bool seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline bool seq_le(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }
static inline bool seq_gt(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }
static inline bool seq_ge(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }
static inline uint32_t seq_max(uint32_t a, uint32_t b) { return seq_gt(a, b) ? a : b; }
static inline uint32_t seq_min(uint32_t a, uint32_t b) { return seq_lt(a, b) ? a : b; }

/* Payload bytes per full segment: the MSS less the timestamp option (Linux does the same). */
static inline uint32_t tcp_smss(const struct fp_tcp_conn *c)
{
	return (uint32_t)c->mss - ((c->flags & TCP_CF_TS) ? 12u : 0u);
}

/* The right edge of the peer's window. A window is relative to the ACK it came with
 * (SND.WL2), not to SND.UNA: an ACK that moves SND.UNA without updating the window (an
 * older segment, by the SND.WL1 rule) must not move the edge, or we overrun the peer. */
static inline uint32_t tcp_snd_edge(const struct fp_tcp_conn *c)
{
	return c->snd_wl2 + c->snd_wnd;
}

/* Bytes sent and not yet acked (FIN included). */
static inline uint32_t tcp_flight(const struct fp_tcp_conn *c) { return c->snd_nxt - c->snd_una; }

/* RFC 6675 pipe: bytes believed in the network. */
static inline uint32_t tcp_pipe(const struct fp_tcp_conn *c)
{
	uint32_t out = c->sacked_bytes + c->lost_bytes + c->dupack_bytes;
	uint32_t f = tcp_flight(c);
	return f > out ? f - out : 0;
}

static inline uint32_t tcp_ts_now(const struct fp_tcp_conn *c, uint64_t now_us)
{
	return (uint32_t)(now_us / TCP_TS_HZ_DIV) + c->ts_offset;
}

static inline bool tcp_synchronized(uint8_t state)
{
	return state >= FP_TCP_ESTABLISHED;
}

/* ---- tcp.c ---- */

struct fp_tcp_conn *tcp_conn_alloc(struct fp_stack *st, bool limited);
void tcp_hash_insert(struct fp_stack *st, struct fp_tcp_conn *c);
void tcp_hash_remove(struct fp_stack *st, struct fp_tcp_conn *c);
struct fp_tcp_conn *tcp_lookup(struct fp_stack *st, uint32_t laddr, uint16_t lport,
			       uint32_t raddr, uint16_t rport);
struct fp_tcp_conn *tcp_listener(struct fp_stack *st, uint16_t lport);
/* Move to @state with the side effects of entering it (unhash on CLOSED, backlog count). */
void tcp_set_state(struct fp_stack *st, struct fp_tcp_conn *c, enum fp_tcp_state state);
/* Free the buffers of every queue. */
void tcp_purge(struct fp_stack *st, struct fp_tcp_conn *c);
/* Free @c if nobody needs it any more (released by the app and CLOSED). True if freed. */
bool tcp_maybe_free(struct fp_stack *st, struct fp_tcp_conn *c);
/* Queue an event for @c if the app holds it. */
void tcp_event(struct fp_stack *st, struct fp_tcp_conn *c, enum fp_event_type type, int status,
	       uint32_t len, struct fp_mbuf *m);
/* The conn is finished with error @err (-ECONNRESET, -ETIMEDOUT, -ECONNREFUSED): CLOSED, queues
 * purged, the app told (DEAD, or CONNECTED with the error in SYN_SENT). */
void tcp_conn_fail(struct fp_stack *st, struct fp_tcp_conn *c, int err);
/* Initialize a fresh control block's windows, MSS, RTO and CC from the config. */
void tcp_conn_defaults(struct fp_stack *st, struct fp_tcp_conn *c);

/* ---- tcp_input.c ---- */

/* (tcp_input itself is declared in defs.h.) Apply a SYN's options to @c (MSS, window
 * scale, SACK, timestamps), RFC 9293 §3.7.1, RFC 7323 §2.2/§3.2, RFC 2018 §2. */
void tcp_apply_syn_opts(struct fp_stack *st, struct fp_tcp_conn *c, const struct fp_tcp_opts *o);

/* ---- tcp_reass.c ---- */

/* In-order bytes for the app: @m itself (data window = the @len new bytes) goes up as a
 * RECV event and stays held until recv_done. */
void tcp_deliver(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m, uint32_t len);
/* Deliver the out-of-order queue's head segments now in order; true if one carried the FIN. */
bool tcp_ooo_drain(struct fp_stack *st, struct fp_tcp_conn *c);
/* Queue a segment beyond rcv_nxt (sorted, disjoint, bounded by cfg.ooo_max); consumes @m. */
void tcp_ooo_insert(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m,
		    uint32_t seq, uint32_t len, bool fin);
/* A FIN alone beyond rcv_nxt, kept as an empty entry; consumes @m. */
void tcp_ooo_fin(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m, uint32_t seq);
/* Free the out-of-order queue. */
void tcp_ooo_purge(struct fp_stack *st, struct fp_tcp_conn *c);

/* ---- tcp_output.c ---- */

/* Window to advertise now, in bytes (before scaling). */
uint32_t tcp_rcv_window(const struct fp_stack *st, const struct fp_tcp_conn *c);
/* A segment with no data: @flags (ACK added when synchronized) at @seq. 0 or -errno. */
int tcp_send_ctl(struct fp_stack *st, struct fp_tcp_conn *c, uint8_t flags, uint32_t seq);
static inline int tcp_send_ack(struct fp_stack *st, struct fp_tcp_conn *c)
{
	return tcp_send_ctl(st, c, FP_TCP_ACK, c->snd_nxt);
}
/* SYN (SYN_SENT) or SYN-ACK (SYN_RECEIVED) at iss. */
int tcp_send_syn(struct fp_stack *st, struct fp_tcp_conn *c);
/* Send our FIN at snd_nxt (the FIN takes one sequence number). */
int tcp_send_fin(struct fp_stack *st, struct fp_tcp_conn *c);
/* Transmit (or retransmit) rtx segment @m. 0 or -errno. */
int tcp_xmit_seg(struct fp_stack *st, struct fp_tcp_conn *c, struct fp_mbuf *m);
/* Retransmit LOST segments while the pipe allows (RFC 6675 §5 step (C), simplified). */
void tcp_retransmit_lost(struct fp_stack *st, struct fp_tcp_conn *c);
/* Bytes the app may send now: min(peer window, cwnd) less what is in flight (IX). */
uint32_t tcp_send_room(const struct fp_stack *st, const struct fp_tcp_conn *c);
/* A RST in reply to a segment that has no conn (RFC 9293 §3.10.7.1). */
void tcp_send_reset(struct fp_stack *st, const struct fp_ipv4 *ip, const struct fp_tcp *t,
		    uint32_t seg_len);
/* A RST|ACK for an embryonic or synchronized @c at snd_nxt (abort). */
void tcp_send_rst_conn(struct fp_stack *st, struct fp_tcp_conn *c);
/* SYN-ACK carrying a SYN cookie for a SYN we keep no state for. */
void tcp_send_cookie_synack(struct fp_stack *st, const struct fp_ipv4 *ip,
			    const struct fp_tcp *t);
/* Challenge ACK if the per-stack rate limit allows (RFC 5961 §7). */
void tcp_send_challenge_ack(struct fp_stack *st, struct fp_tcp_conn *c);

/* ---- tcp_timer.c ---- */

/* Re-arm the conn's wheel timer at its earliest deadline (or cancel it). */
void tcp_timer_update(struct fp_stack *st, struct fp_tcp_conn *c);
/* tcp_timer_update() at the next tcp_timer_flush(); @c leaves the stack only after
 * tcp_timer_undefer(). */
void tcp_timer_defer(struct fp_stack *st, struct fp_tcp_conn *c);
void tcp_timer_undefer(struct fp_stack *st, struct fp_tcp_conn *c);
void tcp_timer_fire(struct fp_timer *t, uint64_t now_us);
/* (Re)start the retransmit timer at now + rto << backoff. */
void tcp_rtx_arm(struct fp_stack *st, struct fp_tcp_conn *c);
/* An RTT sample (RFC 6298 §2.2/2.3). */
void tcp_rtt_sample(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t rtt_us);
/* Arm (or keep) the delayed ACK deadline. */
void tcp_delack_arm(struct fp_stack *st, struct fp_tcp_conn *c);
/* Persist timer when the peer's window is shut and the app is waiting. */
void tcp_persist_check(struct fp_stack *st, struct fp_tcp_conn *c);
/* Enter TIME_WAIT: 2*MSL is cfg.time_wait_us. */
void tcp_enter_time_wait(struct fp_stack *st, struct fp_tcp_conn *c);
/* Re-arm keep-alive after receiving something. */
void tcp_keepalive_reset(struct fp_stack *st, struct fp_tcp_conn *c);

/* ---- tcp_cookie.c ---- */

void tcp_cookie_init(struct fp_stack *st);
/* RFC 6528: ISN = M + F(4-tuple, secret), M a 4 us clock. */
uint32_t tcp_isn(const struct fp_stack *st, uint32_t laddr, uint16_t lport, uint32_t raddr,
		 uint16_t rport);
/* Per-connection timestamp offset (RFC 7323 §5.4: randomized per connection). */
uint32_t tcp_ts_offset(const struct fp_stack *st, uint32_t laddr, uint32_t raddr);
/* The cookie ISN for a SYN; @tsval_low gets the options to encode in our TSval's low 6
 * bits when timestamps are used (window scale + SACK, Linux's layout). */
uint32_t tcp_cookie_make(const struct fp_stack *st, const struct fp_ipv4 *ip,
			 const struct fp_tcp *t, uint16_t *mss_out, uint32_t *tsval_low);
/* Check the cookie echoed by a final ACK. 0 with the MSS (and, when the ACK carries
 * timestamps, wscale/SACK) filled in, or -EINVAL. */
struct tcp_cookie_opts {
	uint16_t mss;
	uint8_t snd_wscale;
	bool wscale_ok, sack_ok, ts_ok;
};
int tcp_cookie_check(const struct fp_stack *st, const struct fp_ipv4 *ip, const struct fp_tcp *t,
		     struct tcp_cookie_opts *out);
#define TCP_COOKIE_TS_BITS 6
uint64_t tcp_siphash(const uint64_t key[2], const void *data, size_t len);

/* ==== White-box test builder ====
 *
 * tcp_test_conn() inserts a control block straight into the table in @p->state, as if it
 * had got there by the protocol, with the queues empty and no timer pending except the
 * ones that state implies:
 *   SYN_SENT: snd_una = iss, snd_nxt = iss + 1 (our SYN sent at st->now_us, not yet acked,
 *     retransmit deadline now + rto_init). irs/rcv_nxt ignored.
 *   SYN_RECEIVED: snd_una = iss, snd_nxt = iss + 1 (SYN-ACK sent), rcv_nxt = irs + 1; with
 *     @passive the conn is embryonic (counts in the SYN backlog, ACCEPTED is queued with the
 *     listener's cookie when the handshake completes; a listener on lport must exist then,
 *     else the final ACK is answered with RST); without, it is a simultaneous open.
 *   ESTABLISHED, CLOSE_WAIT, FIN_WAIT_2, TIME_WAIT: snd_una == snd_nxt required.
 *   FIN_WAIT_1, CLOSING, LAST_ACK: snd_nxt == snd_una + 1 required: our FIN was sent at
 *     st->now_us and is unacked (retransmit deadline now + rto).
 *   In-flight data: build the conn with snd_una == snd_nxt, then fp_tcp_send() (which
 *     transmits at once; pop those segments).
 *   CLOSE_WAIT, CLOSING, LAST_ACK, TIME_WAIT: the peer's FIN is counted in rcv_nxt (the
 *     caller passes rcv_nxt past it).
 *   TIME_WAIT: expires at now + cfg.time_wait_us.
 *   LISTEN: calls fp_tcp_listen(st, lport, cookie) and returns the listener (not hashed by
 *     4-tuple; counted by fp_stack_tcp_conns until fp_tcp_unlisten).
 *   CLOSED: rejected.
 * Windows: snd_wnd is the peer's window in bytes (already scaled); snd_wl1 = rcv_nxt,
 * snd_wl2 = snd_una, so an acceptable segment updates it. rcv_wnd is the window we last
 * advertised (rcv_adv = rcv_nxt + rcv_wnd); 0 means cfg.rcv_buf. snd_wscale/rcv_wscale are
 * the shifts (0 when window scaling was not negotiated; either non-zero marks it
 * negotiated, which a SYN-ACK retransmitted from SYN_RECEIVED shows). mss 0 means
 * cfg.mtu - 40.
 * cwnd 0: RFC 6928 initial window; ssthresh 0: UINT32_MAX. srtt_us 0: no RTT sample yet
 * (rto = cfg.rto_init_us); else rttvar = srtt / 2 and rto per RFC 6298.
 * ts_ok: timestamps negotiated, ts_recent and ts_offset as given (TSval = now_us / 1000 +
 * ts_offset). app_owned: the app holds the handle (events are queued with @cookie); false
 * behaves like a conn the app has closed (data after close is answered with RST).
 * Returns NULL with errno EINVAL (bad state or sequence numbers), EEXIST (4-tuple taken) or
 * ENOBUFS (cfg.max_conns).
 */
struct tcp_test_conn_params {
	enum fp_tcp_state state;
	uint32_t laddr, raddr;           /* host order; laddr 0 = cfg.ipv4 */
	uint16_t lport, rport;
	uint32_t iss, irs;
	uint32_t snd_una, snd_nxt, rcv_nxt;
	uint32_t snd_wnd, rcv_wnd;
	uint8_t snd_wscale, rcv_wscale;
	bool ts_ok, sack_ok;
	uint32_t ts_recent, ts_offset;
	uint16_t mss;
	uint32_t cwnd, ssthresh, srtt_us;
	bool app_owned, passive;
	uint64_t cookie;
};

struct fp_tcp_conn *tcp_test_conn(struct fp_stack *st, const struct tcp_test_conn_params *p);
