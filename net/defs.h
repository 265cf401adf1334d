/* defs.h: net/'s private glue: the stack struct and the calls its protocol files make to each other. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <flowplane/compiler.h>
#include <flowplane/net.h>
#include <flowplane/rss.h>
#include <flowplane/timer.h>
#include <flowplane/wire.h>

/*
 * Files and what they own:
 *   stack.c   create/destroy, input demux (Ethernet), tx queue, event queue, stats, poll
 *   arp.c     ARP table, requests/replies, the queue of frames waiting for resolution
 *   ipv4.c    IPv4 input checks and output (route + ARP + Ethernet header)
 *   icmp.c    echo reply, port unreachable, rate limit
 *   udp.c     bindings, input, send
 *   tcp_*.c   TCP (see tcp.h)
 *
 * Frame flow. Input: fp_stack_input -> eth (stack.c) -> arp_input | ipv4_input ->
 * icmp_input | udp_input | tcp_input. Each input function owns the mbuf it is given and
 * must free it or keep it. Before calling the next layer, the caller fp_mbuf_adj()s its own
 * header away, so each layer sees its header at fp_mbuf_data(m); the parsed IPv4 header is
 * passed along because TCP and UDP need the addresses (pseudo-header) and ICMP errors quote
 * the original datagram (net_ip_hdr_of() finds it again: the adj()ed bytes are still in
 * the buffer's headroom).
 *
 * Output: a protocol builds its header and payload in an mbuf from net_alloc() (which
 * leaves FP_NET_HEADROOM bytes in front for lower headers) and calls
 * ipv4_output(), which prepends IPv4 and Ethernet and queues the frame (or parks it on
 * ARP); TCP's common segment writes all three headers itself (tcp_output.c's emit_fast)
 * when the next hop is resolved. Frames wait in st->tx until the driver calls
 * fp_stack_tx().
 */

/* Room in front of a new mbuf's data for Ethernet + IPv4 + TCP with options. */
#define FP_NET_HEADROOM (FP_ETH_HDR_LEN + FP_IPV4_MAX_HDR + FP_TCP_MAX_HDR)

struct arp_table;
struct udp_table;
struct tcp_stack;

/* A FIFO of frames for the driver. Grows by doubling; never drops. */
struct net_txq {
	struct fp_mbuf **v;
	uint32_t head, count, cap;   /* cap is a power of two */
};

/* A FIFO of events for the application. Grows by doubling; never drops. */
struct net_evq {
	struct fp_event *v;
	uint32_t head, count, cap;
};

struct fp_stack {
	struct fp_stack_config cfg;   /* with defaults filled in */
	struct fp_pool_cache *cache;
	uint64_t now_us;              /* time of the current input/poll call */
	uint32_t netmask;             /* from cfg.prefix_len */
	uint16_t ip_id;               /* next IPv4 identification */
	bool garp_sent;
	bool irq;                     /* fp_stack_irq(): allocate nothing, wake nobody */

	struct fp_timer_wheel wheel;  /* every protocol timer of this stack */
	struct fp_rss rss;            /* for ephemeral port choice */

	struct net_txq tx;
	struct net_evq ev;

	struct arp_table *arp;
	struct udp_table *udp;
	struct tcp_stack *tcp;

	/* ICMP error rate limit: a token bucket refilled at cfg.icmp_per_sec. */
	uint64_t icmp_tokens_ts_us;
	uint32_t icmp_tokens;

	struct fp_net_stats stats;
};

/* m->user bits on a received frame, set by stack.c. A link-layer broadcast gets no ICMP
 * error (RFC 1122 §3.2.2), and the Ethernet header is gone by the time one is built. */
#define NET_MBUF_L2_BCAST 0x0001u

/* ARP policy (arp.c): table entries, and requests sent one retry interval apart before the
 * frames waiting on an unresolved next hop are dropped (RFC 1122 §2.3.2.1 rate limit). */
#define NET_ARP_TABLE_SIZE 256
#define NET_ARP_RETRY_US   (1000u * 1000)
#define NET_ARP_TRIES      3

/* ICMP error token bucket (icmp.c): refilled at cfg.icmp_per_sec, holding at most
 * NET_ICMP_BURST_MS worth of tokens (at least one), like Linux's icmp_msgs_burst. */
#define NET_ICMP_BURST_MS 50
static inline uint32_t net_icmp_burst(uint32_t per_sec)
{
	uint32_t b = (uint32_t)((uint64_t)per_sec * NET_ICMP_BURST_MS / 1000);
	return b ? b : 1;
}

#define NET_STAT_INC(st, name) ((st)->stats.name++)
#define NET_STAT_ADD(st, name, v) ((st)->stats.name += (v))

/* ---- stack.c ---- */

/* An mbuf with FP_NET_HEADROOM bytes of headroom and no data; NULL (counted in nobufs)
 * when the pool is empty. */
struct fp_mbuf *net_alloc(struct fp_stack *st);

/* Drop one reference through the stack's cache. */
static inline void net_free(struct fp_stack *st, struct fp_mbuf *m)
{
	fp_mbuf_free(st->cache, m);
}

/* Queue a complete frame for fp_stack_tx(); takes ownership. Returns 0 or -ENOMEM (the
 * frame is freed). */
int net_tx_frame(struct fp_stack *st, struct fp_mbuf *m);

/* Append an event; returns 0 or -ENOMEM (the queue could not grow; counted). */
int net_event(struct fp_stack *st, const struct fp_event *ev);

/* ---- arp.c ---- */

int arp_init(struct fp_stack *st);
void arp_destroy(struct fp_stack *st);
/* @m's data starts at the ARP header. Consumes @m. */
void arp_input(struct fp_stack *st, struct fp_mbuf *m);
/* Send @m (data starts at the IPv4 header) to next hop @nh: prepend Ethernet and queue it,
 * or park it until @nh resolves (sending a request). Consumes @m. 0 or -errno (dropped). */
int arp_output(struct fp_stack *st, struct fp_mbuf *m, uint32_t nh);
/* @nh's hardware address while its entry is resolved and fresh (the entry counts as used),
 * else NULL: arp_output() would park the frame and ask. */
const struct fp_eth_addr *arp_mac_of(struct fp_stack *st, uint32_t nh);
/* Queue a gratuitous ARP (RFC 5227 §3 announcement). */
void arp_announce(struct fp_stack *st);

/* ---- ipv4.c ---- */

/* @m's data starts at the IPv4 header. Consumes @m. */
void ipv4_input(struct fp_stack *st, struct fp_mbuf *m);

/* Prepend a 20-byte IPv4 header to @m (data = the L4 header and payload, the L4 checksum
 * already filled in) addressed from us to @dst with @proto, route it and send it via ARP.
 * Consumes @m. 0 or -errno (dropped and counted). */
int ipv4_output(struct fp_stack *st, struct fp_mbuf *m, uint32_t dst, uint8_t proto);

/* Next hop for @dst: itself on the subnet (or broadcast), else the gateway; 0 for none. */
uint32_t ipv4_route(const struct fp_stack *st, uint32_t dst);

/* Write the 20-byte IPv4 header at @p of a datagram from us to @dst carrying @l4_len bytes
 * of @proto (the next identification, DF set, checksummed). */
void ipv4_hdr(struct fp_stack *st, uint8_t *p, uint32_t dst, uint8_t proto, uint32_t l4_len);

/* The IPv4 header of a received datagram after the stack adj()ed past it to the L4
 * header: its bytes still sit in the buffer in front of the data. */
static inline const uint8_t *net_ip_hdr_of(const struct fp_mbuf *m, const struct fp_ipv4 *ip)
{
	return fp_mbuf_data(m) - ip->hdr_len;
}

/* ---- icmp.c ---- */

/* @m's data starts at the ICMP header. Consumes @m. */
void icmp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip);
/* Send "destination unreachable, @code" quoting the datagram whose L4 data @m holds
 * (RFC 1122 §3.2.2: the IP header and 8 bytes), if the rate limit allows. Does not consume @m. */
void icmp_send_unreach(struct fp_stack *st, const struct fp_mbuf *m, const struct fp_ipv4 *ip,
		       uint8_t code);

/* ---- udp.c ---- */

int udp_init(struct fp_stack *st);
void udp_destroy(struct fp_stack *st);
void udp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip);

/* ---- tcp ---- */

int tcp_init(struct fp_stack *st);
void tcp_destroy(struct fp_stack *st);
void tcp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip);
/* FP_EV_TCP_SENT to the conns waiting for cfg.tx_bufs, in order, as far as it has room. */
void tcp_tx_wake(struct fp_stack *st);
/* Arm the timers whose update the input put off until the application had its turn. */
void tcp_timer_flush(struct fp_stack *st);
