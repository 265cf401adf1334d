/* net.h: the per-core TCP/IP stack: frames in, frames out, events and calls for the application. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <flowplane/cksum.h>
#include <flowplane/mbuf.h>
#include <flowplane/pool.h>
#include <flowplane/wire.h>

/*
 * One struct fp_stack per core. It owns that core's ARP table, UDP bindings, TCP connections
 * and timers, and talks to the world only through three calls, each taking the time:
 *
 *   fp_stack_input(st, frames, n, now_us)   frames from the device; the stack owns them
 *   fp_stack_poll(st, now_us)               timers (retransmit, delayed ACK, TIME_WAIT, ARP)
 *   fp_stack_tx(st, out, max)               frames to put on the wire; the caller owns them
 *
 * and talks to the application through an event array it fills and the application drains
 * (fp_stack_events) and calls that act at once (fp_tcp_send, fp_tcp_recv_done, ...). This is
 * IX's shape: the application runs to completion on the same core between polls, and a batch
 * of events goes up and a batch of calls comes down with no copy and no lock.
 *
 * No device, no clock, no global: a test builds a stack, feeds it frames with a chosen now_us
 * and asserts the exact frames that come out. Nothing here is thread-safe; the core that
 * created the stack is the only one that may call into it.
 */

struct fp_stack;
struct fp_tcp_conn;

/* Defaults used when a config field is 0. */
#define FP_NET_DEFAULT_MTU            1500
#define FP_NET_DEFAULT_RCV_BUF        (256u * 1024)  /* receive window per connection */
#define FP_NET_DEFAULT_MAX_CONNS      65536
#define FP_NET_DEFAULT_SYN_BACKLOG    1024           /* embryonic conns before SYN cookies */
#define FP_NET_DEFAULT_DELACK_US      500            /* delayed-ACK bound */
#define FP_NET_DEFAULT_TIME_WAIT_US   (60u * 1000 * 1000)
#define FP_NET_DEFAULT_RTO_MIN_US     (5u * 1000)    /* datacenter RTT scale; RFC 6298 says 1 s */
#define FP_NET_DEFAULT_PEER_DELACK_US (200u * 1000)  /* RFC 8985 WCDelAckT; Linux's TCP_DELACK_MAX */
#define FP_NET_DEFAULT_RTO_MAX_US     (60u * 1000 * 1000)
#define FP_NET_DEFAULT_RTO_INIT_US    (1000u * 1000) /* RFC 6298 §2.1 */
#define FP_NET_DEFAULT_SYN_RETRIES    6
#define FP_NET_DEFAULT_DATA_RETRIES   15
#define FP_NET_DEFAULT_ARP_TIMEOUT_US (60u * 1000 * 1000)
#define FP_NET_DEFAULT_ARP_QUEUE      64             /* frames waiting for resolution */
#define FP_NET_DEFAULT_ICMP_PER_SEC   1000           /* ICMP errors sent per second */

struct fp_stack_config {
	struct fp_eth_addr mac;
	uint32_t ipv4;               /* our address (host order); the only one accepted */
	uint8_t prefix_len;          /* on-link subnet, e.g. 24 */
	uint32_t gateway;            /* next hop off the subnet; 0 = unreachable */
	uint16_t mtu;                /* IP MTU; TCP MSS = mtu - 40 */

	struct fp_pool_cache *cache; /* this core's buffers: every mbuf the stack allocates or
				      * frees goes through it */

	/* Receive-side steering, for picking ephemeral ports (IX's outbound trick): a port is
	 * chosen so the Toeplitz hash of the reply's 4-tuple lands on rx queue @queue_id of
	 * @n_queues. n_queues 0 or 1 means any port will do. With @steer_table (IX's flow
	 * groups, FP_RSS_GROUPS entries: group -> worker, read as it is at each dial, since
	 * a control plane may rewrite it), the port's group must map to @queue_id instead. */
	uint16_t queue_id, n_queues;
	const uint8_t *rss_key;      /* 40 bytes; NULL = fp_rss_key_default */
	const uint16_t *steer_table;

	uint32_t max_conns;          /* TCP control blocks, established and embryonic */
	uint32_t syn_backlog;        /* embryonic conns per stack before SYN cookies are used */
	uint32_t rcv_buf;            /* bytes of receive buffer (window) per connection */
	uint32_t ooo_max;            /* bytes of out-of-order data kept per connection
				      * (default rcv_buf / 2) */
	const struct fp_csum_index *csum_index; /* content whose checksums are precomputed
				      * (cksum.h): a segment's payload taken from it is not
				      * summed again (Sandstorm); NULL = sum everything */
	uint32_t tx_bufs;            /* buffers TCP may hold as sent, unacknowledged data, all
				      * conns together (default half the pool): the rest stays
				      * free for receiving, so the ACKs that free them can come
				      * in. A send past it takes what fits, or -ENOBUFS */
	uint32_t delack_us;          /* ACK at most this long after data (and every 2nd MSS);
				      * set FP_NET_DELACK_OFF to ACK every segment at once */
	uint32_t time_wait_us;
	uint32_t rto_min_us, rto_max_us, rto_init_us;
	uint32_t peer_delack_us;     /* how long the peer may hold its ACK of a flight under two
				      * full segments (RFC 9293 §3.8.6.3): the retransmit timer
				      * for such a flight waits at least srtt + this, so a Linux
				      * client's delayed ACK (40-200 ms) is not taken for a loss;
				      * FP_NET_PEER_DELACK_NONE for peers known to ACK at once */
	uint8_t syn_retries, data_retries;
	bool nagle;                  /* off by default: the API already batches */
	bool no_timestamps;          /* do not offer RFC 7323 timestamps */
	bool no_sack;                /* do not offer SACK */
	bool sent_when_blocked;      /* FP_EV_TCP_SENT only for a conn whose last send was cut
				      * short (fp_tcp_sendv took less than offered): the
				      * runtime's SENT, as its kernel transport's; false: also
				      * for every ACK of new data, with the bytes acked */
	uint32_t arp_timeout_us;
	uint32_t arp_queue;
	uint32_t icmp_per_sec;
	uint64_t secret;             /* seeds ISNs and SYN cookies; 0 = from getrandom() */
};

#define FP_NET_DELACK_OFF UINT32_MAX
#define FP_NET_PEER_DELACK_NONE UINT32_MAX

/* Create a stack at time @now_us; a gratuitous ARP (RFC 5227 §3 announcement) is queued
 * at creation, the first frame fp_stack_tx() returns.
 * NULL with errno set (EINVAL for a bad config, ENOMEM). */
struct fp_stack *fp_stack_create(const struct fp_stack_config *cfg, uint64_t now_us);

/* Free everything: connections (no RST is sent), queued frames, held receive buffers,
 * undrained events' buffers. */
void fp_stack_destroy(struct fp_stack *st);

/* Before destroying a stack whose peers should hear of it (a worker stopping): queue a
 * RST for every connection in a synchronized state but TIME_WAIT, as Linux does for a
 * process that exits, and mark them CLOSED; transmit with fp_stack_tx, then destroy. No
 * events are raised. Returns the RSTs queued. */
unsigned fp_stack_reset_all(struct fp_stack *st);

/*
 * IX's flow-group migration, the stacks' half: move TCP connections between two stacks on
 * the same address (two workers), by flow group.
 *
 * fp_stack_tcp_export() takes out of @st every TCP connection but the listeners whose
 * 4-tuple falls in a group set in @groups (FP_RSS_GROUPS bits; the group of the symmetric
 * or configured hash, as net.h's steer_table uses it): out of its table, its timer wheel
 * and its counters, with everything it holds (unacknowledged and out-of-order segments,
 * received buffers the application has not released). The conns are chained on *@out
 * (the caller treats the chain as opaque); the return is how many, or -EBUSY while the
 * stack has undelivered events (export between rounds, once fp_stack_events drained it),
 * -EINVAL if the stack has no steering key. Handles, cookies and every deadline stay as
 * they were: the application keeps using the same fp_tcp_conn pointer, on the new stack.
 *
 * fp_stack_tcp_import() adopts such a chain on @st (same address, same configuration):
 * into its table and wheel; a deadline already past fires at the next poll. Buffers keep
 * their pool, and return to it when freed (pool.h: a foreign buffer goes to its pool's
 * depot), so the exporting stack's pool must outlive them.
 */
struct fp_tcp_conn;
int fp_stack_tcp_export(struct fp_stack *st, const uint64_t groups[2], struct fp_tcp_conn **out);
void fp_stack_tcp_import(struct fp_stack *st, struct fp_tcp_conn *chain);
/* Walking an exported chain: the next conn (NULL at the end); whether the application
 * still holds @c's handle (not yet closed or aborted), and the cookie its events carry. */
struct fp_tcp_conn *fp_tcp_chain_next(const struct fp_tcp_conn *c);
/* A chain no stack will import (the run stopped with it in flight): free the conns and
 * every buffer they hold (through @cache; each returns to its own pool). */
void fp_tcp_chain_free(struct fp_tcp_conn *chain, struct fp_pool_cache *cache);
bool fp_tcp_app_holds(const struct fp_tcp_conn *c);
uint64_t fp_tcp_cookie(const struct fp_tcp_conn *c);

/* Hand @n received frames to the stack, which takes ownership of each. */
void fp_stack_input(struct fp_stack *st, struct fp_mbuf **frames, unsigned n, uint64_t now_us);

/*
 * Interrupt context (the runtime's --notify ipi: a signal handler cutting into the
 * application's handler on the stack's thread, where malloc may be held). While
 * fp_stack_irq(st, true) is on, the stack allocates and frees no memory: its tx and event
 * queues do not grow (a frame that finds the tx queue full is dropped and counted as
 * nobufs: a send is refused with -ENOBUFS, an ACK is lost; an event would be lost, so the
 * caller keeps room for them and for its sends: fp_stack_room), and input wakes no conn
 * waiting for buffers (the next input or poll outside does). Input allocates only for
 * frames that fp_stack_quiet_frame() refuses: hand it only those it accepts (an ACK, with
 * or without data, for an established conn without out-of-order data), each of which
 * queues at most 4 events, and as frames an ACK and what the windows it opens let out
 * (a SACK recovery's retransmissions). fp_stack_reserve() grows the queues, outside, to
 * hold @events more events and @frames more frames.
 */
void fp_stack_irq(struct fp_stack *st, bool on);
bool fp_stack_quiet_frame(struct fp_stack *st, const struct fp_mbuf *m);
void fp_stack_room(const struct fp_stack *st, unsigned *events, unsigned *frames);
int fp_stack_reserve(struct fp_stack *st, unsigned events, unsigned frames);

/* An ARP frame another stack on the same address received: learn its sender (RFC 826's
 * merge, as arp input does) without answering or counting it. The caller keeps @m. */
void fp_stack_arp_learn(struct fp_stack *st, const struct fp_mbuf *m);

/* Run what is due at @now_us (timers). Returns how many timers fired. */
unsigned fp_stack_poll(struct fp_stack *st, uint64_t now_us);

/* Take up to @max frames to transmit, oldest first. The caller owns them (frees them after
 * the device is done). */
unsigned fp_stack_tx(struct fp_stack *st, struct fp_mbuf **out, unsigned max);
/* The same in the middle of a round (between an application's handlers): the timer
 * updates the round's segments put off stay put off, so an answer later in the round
 * still clears its conn's delayed ACK before a timer is armed for it (fp_stack_tx,
 * fp_stack_next_us or fp_stack_poll at the round's end make them). */
unsigned fp_stack_tx_early(struct fp_stack *st, struct fp_mbuf **out, unsigned max);

/* Frames waiting in fp_stack_tx(). */
unsigned fp_stack_tx_pending(const struct fp_stack *st);

/* Earliest time fp_stack_poll() has work; UINT64_MAX when no timer is armed. (It first
 * arms the timers of the conns the last input left for after the application's turn.) */
uint64_t fp_stack_next_us(struct fp_stack *st);

/* Free a buffer through the stack's cache (a UDP payload the application is done with). */
void fp_stack_free(struct fp_stack *st, struct fp_mbuf *m);

/* ---- events ---- */

enum fp_event_type {
	FP_EV_TCP_ACCEPTED = 1, /* passive open done: conn is new, cookie is the listener's */
	FP_EV_TCP_CONNECTED,    /* fp_tcp_dial() result: status 0, or -ECONNREFUSED/-ETIMEDOUT
				 * (then the conn is dead: release it with fp_tcp_close) */
	FP_EV_TCP_RECV,         /* in-order data: m (data window = the bytes), len bytes; m stays
				 * valid until fp_tcp_recv_done() has covered its bytes */
	FP_EV_TCP_SENT,         /* len bytes newly acknowledged; fp_tcp_sendable() may have grown */
	FP_EV_TCP_EOF,          /* the peer sent FIN: no more data will arrive */
	FP_EV_TCP_DEAD,         /* reset (-ECONNRESET), timed out (-ETIMEDOUT) or gone; release
				 * with fp_tcp_close(); no more events for this conn */
	FP_EV_UDP_RECV,         /* datagram: m holds the payload (free with fp_stack_free) */
};

struct fp_event {
	uint16_t type;                /* enum fp_event_type */
	int16_t status;               /* 0 or -errno */
	uint32_t len;
	uint64_t cookie;              /* the application's, from listen/dial/set_cookie/bind */
	struct fp_tcp_conn *conn;     /* TCP events */
	struct fp_mbuf *m;            /* RECV events */
	uint32_t raddr;               /* UDP: source address and port; TCP: peer */
	uint16_t rport, lport;
};

/* Move up to @max pending events into @out, oldest first. Returns how many. */
unsigned fp_stack_events(struct fp_stack *st, struct fp_event *out, unsigned max);

/* ---- UDP ---- */

/* Deliver datagrams for local @port as FP_EV_UDP_RECV with @cookie. 0 or -EADDRINUSE. */
int fp_udp_bind(struct fp_stack *st, uint16_t port, uint64_t cookie);
int fp_udp_unbind(struct fp_stack *st, uint16_t port);

/* Send @len bytes from local @sport to @dst:@dport (copied). 0, -EMSGSIZE, -ENOBUFS,
 * -EHOSTUNREACH (no route); a datagram waiting for ARP counts as sent. */
int fp_udp_send(struct fp_stack *st, uint16_t sport, uint32_t dst, uint16_t dport,
		const void *data, size_t len);

/* ---- TCP ---- */

/* Accept connections to local @port; each one is an FP_EV_TCP_ACCEPTED with @cookie. */
int fp_tcp_listen(struct fp_stack *st, uint16_t port, uint64_t cookie);
int fp_tcp_unlisten(struct fp_stack *st, uint16_t port);

/* Open a connection to @dst:@dport from an ephemeral port that steers replies to this
 * stack's queue. The result comes as FP_EV_TCP_CONNECTED. NULL with *err = -EADDRNOTAVAIL
 * (no port), -ENOBUFS (no control block), -EHOSTUNREACH. */
struct fp_tcp_conn *fp_tcp_dial(struct fp_stack *st, uint32_t dst, uint16_t dport,
				uint64_t cookie, int *err);

/* Set the cookie that events for @c carry from now on (events already queued, such as a
 * RECV right behind its ACCEPTED in the same batch, keep the listener's cookie). */
void fp_tcp_set_cookie(struct fp_tcp_conn *c, uint64_t cookie);

/*
 * The IX flow-control contract: send takes at most what the peer's receive window and our
 * congestion window allow right now (fp_tcp_sendable), copies it into segments and puts
 * them on the wire; returns the bytes taken (0 when the windows are shut), or -ENOTCONN
 * (not yet established), -EPIPE (we already shut down the sending side or the conn is dead),
 * -ENOBUFS (no buffer for the first segment: nothing was taken; retry after freeing some).
 * When cfg.tx_bufs is spent, it takes what fits (maybe 0), and FP_EV_TCP_SENT follows when
 * buffers come back.
 * When more may be sent, an FP_EV_TCP_SENT follows.
 */
ssize_t fp_tcp_send(struct fp_stack *st, struct fp_tcp_conn *c, const void *data, size_t len);

/* fp_tcp_send of the concatenation of @iovcnt pieces: segments are filled across the
 * pieces' boundaries (a piece boundary does not end a segment), and what is taken is a
 * prefix of the whole. */
ssize_t fp_tcp_sendv(struct fp_stack *st, struct fp_tcp_conn *c, const struct iovec *iov,
		     unsigned iovcnt);

/* Bytes the windows let fp_tcp_send() take now; with cfg.tx_bufs spent it takes less
 * (maybe 0), and FP_EV_TCP_SENT follows when buffers come back. */
size_t fp_tcp_sendable(const struct fp_stack *st, const struct fp_tcp_conn *c);

/* The application is done with the first @len bytes it was given (in order) by RECV
 * events: their buffers are freed and the receive window reopens by @len. */
void fp_tcp_recv_done(struct fp_stack *st, struct fp_tcp_conn *c, size_t len);

/* Half-close: send FIN after the data already taken; receiving goes on. 0 or -ENOTCONN. */
int fp_tcp_shutdown(struct fp_stack *st, struct fp_tcp_conn *c);

/* Release @c: shut down sending if not done (FIN), and give the handle back; the stack
 * frees its held receive buffers at once, so RECV events already drained but not yet
 * handled must be handled before this call, not after; the stack
 * finishes the close (FIN_WAIT, TIME_WAIT) on its own and sends no more events. Data that
 * arrives afterwards is answered with RST (RFC 9293 §3.6.1 abort on data after close). */
void fp_tcp_close(struct fp_stack *st, struct fp_tcp_conn *c);

/* Release @c with a RST now. */
void fp_tcp_abort(struct fp_stack *st, struct fp_tcp_conn *c);

/* Turn on keep-alive probes after @idle_us of silence, every @intvl_us, @count times. */
int fp_tcp_keepalive(struct fp_stack *st, struct fp_tcp_conn *c, uint32_t idle_us,
		     uint32_t intvl_us, uint8_t count);

enum fp_tcp_state {
	FP_TCP_CLOSED, FP_TCP_LISTEN, FP_TCP_SYN_SENT, FP_TCP_SYN_RECEIVED, FP_TCP_ESTABLISHED,
	FP_TCP_FIN_WAIT_1, FP_TCP_FIN_WAIT_2, FP_TCP_CLOSE_WAIT, FP_TCP_CLOSING,
	FP_TCP_LAST_ACK, FP_TCP_TIME_WAIT,
};

const char *fp_tcp_state_name(enum fp_tcp_state s);

/* A snapshot for diagnostics and tests. */
struct fp_tcp_info {
	enum fp_tcp_state state;
	uint32_t laddr, raddr;
	uint16_t lport, rport;
	uint32_t snd_una, snd_nxt, snd_wnd, rcv_nxt, rcv_wnd;
	uint32_t cwnd, ssthresh, mss;
	uint32_t srtt_us, rttvar_us, rto_us;
	uint8_t snd_wscale, rcv_wscale;
	bool ts_ok, sack_ok;
	uint32_t unacked_bytes;       /* in the retransmit queue */
	uint32_t held_bytes;          /* delivered, not yet recv_done */
	uint32_t ooo_bytes;           /* out-of-order bytes kept */
	uint32_t retransmits;
};

void fp_tcp_info(const struct fp_tcp_conn *c, struct fp_tcp_info *out);

/* ---- statistics ---- */

/* Every counter the stack keeps, one per drop reason and per notable event. Per stack
 * (per core), plain increments; see net/stack.c for the names. */
#define FP_NET_STATS(X) \
	X(rx_frames) X(tx_frames) X(rx_bytes) X(tx_bytes) \
	X(eth_short) X(eth_not_for_us) X(eth_vlan_drop) X(eth_unknown_type) \
	X(arp_bad) X(arp_req_rx) X(arp_reply_rx) X(arp_req_tx) X(arp_reply_tx) \
	X(arp_queue_drop) X(arp_unresolved_drop) \
	X(ip_bad) X(ip_bad_csum) X(ip_not_for_us) X(ip_frag_drop) X(ip_unknown_proto) \
	X(ip_no_route) \
	X(icmp_bad) X(icmp_echo_rx) X(icmp_echo_tx) X(icmp_unreach_tx) X(icmp_rate_drop) \
	X(icmp_other_rx) \
	X(udp_bad) X(udp_bad_csum) X(udp_no_port) X(udp_rx) X(udp_tx) \
	X(tcp_bad) X(tcp_bad_csum) X(tcp_rx_segs) X(tcp_tx_segs) X(tcp_rst_tx) X(tcp_rst_rx) \
	X(tcp_no_port) X(tcp_syn_cookie_tx) X(tcp_syn_cookie_ok) X(tcp_syn_cookie_bad) \
	X(tcp_backlog_drop) X(tcp_conn_limit) X(tcp_accepted) X(tcp_connected) \
	X(tcp_challenge_ack) X(tcp_challenge_ack_skip) X(tcp_rexmit) X(tcp_rto) X(tcp_rto_spurious) X(tcp_fast_rexmit) \
	X(tcp_dup_seg) \
	X(tcp_ooo_seg) X(tcp_ooo_drop) X(tcp_out_of_window) X(tcp_zero_window_probe) \
	X(tcp_keepalive_tx) X(tcp_timeout) X(tcp_nobufs) X(tcp_tx_budget) X(tcp_tx_presummed) \
	X(tcp_rst_answer) X(tcp_timer_fires) \
	X(nobufs)

struct fp_net_stats {
#define FP_NET_STAT_FIELD(name) uint64_t name;
	FP_NET_STATS(FP_NET_STAT_FIELD)
#undef FP_NET_STAT_FIELD
};

/* A copy of the stack's counters. */
void fp_stack_stats(const struct fp_stack *st, struct fp_net_stats *out);

/* Counter names in struct order, and how many there are. */
extern const char *const fp_net_stat_names[];
extern const unsigned fp_net_stat_count;

/* TCP control blocks in use (any state but free, listeners included), for leak checks. */
uint32_t fp_stack_tcp_conns(const struct fp_stack *st);
