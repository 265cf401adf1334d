/* net_harness.h: stack test helpers: a stack on a leak-checked pool, crafted frames, parsed tx. */
#pragma once

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/net.h>
#include <flowplane/wire.h>

#include "harness.h"

/*
 * The shape every stack test takes (lwIP's harness, smoltcp's tests): build a stack on a
 * pool, feed it frames made with the wire emitters at a chosen time, pull what it sends and
 * compare it field by field or byte by byte; the fixture's teardown destroys the stack and
 * fails the test if any buffer is still out.
 *
 *   static void test_x(void **state)
 *   {
 *           struct nh *h = *state;              // stack 10.0.0.1/24, gw 10.0.0.254
 *           nh_learn(h, NH_PEER_IP, &nh_peer_mac); // skip the ARP exchange
 *           uint8_t f[NH_FRAME_MAX];
 *           size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 5000, 53, "hi", 2);
 *           nh_input(h, f, n);
 *           struct nh_pkt p;
 *           assert_int_equal(nh_pop(h, &p), 0);  // parsed, checksums verified
 *           assert_int_equal(p.ip.proto, FP_IPPROTO_ICMP);
 *   }
 *   cmocka_unit_test_setup_teardown(test_x, nh_setup, nh_teardown)
 *
 * nh_setup drains the gratuitous ARP the stack queues at creation, so a test starts with
 * an empty tx queue; nh_restart() rebuilds the stack with another config; nh_setup_big
 * gives the stack 4096 buffers instead of 64. Private constants (NET_ARP_RETRY_US, ...)
 * are in net/defs.h, which stack tests may include.
 */

#define NH_OUR_IP   0x0a000001u /* 10.0.0.1/24 */
#define NH_PEER_IP  0x0a000002u /* 10.0.0.2, on-link */
#define NH_GW_IP    0x0a0000feu /* 10.0.0.254 */
#define NH_FAR_IP   0xc0000201u /* 192.0.2.1, off-link: through the gateway */
#define NH_PREFIX   24
#define NH_FRAME_MAX 2048
#define NH_T0_US    1000000u    /* the stack's creation time */

static const struct fp_eth_addr nh_our_mac = {{ 0x02, 0x00, 0x00, 0x00, 0x00, 0x01 }};
static const struct fp_eth_addr nh_peer_mac = {{ 0x02, 0x00, 0x00, 0x00, 0x00, 0x02 }};
static const struct fp_eth_addr nh_gw_mac = {{ 0x02, 0x00, 0x00, 0x00, 0x00, 0xfe }};

struct nh {
	struct fp_test_pool *tp;
	struct fp_stack *st;
	uint64_t now_us;          /* passed to input and poll */
};

/* The fixture's config: 10.0.0.1/24 via 10.0.0.254, fixed secret, the rest defaults. */
static inline struct fp_stack_config nh_config(struct nh *h)
{
	return (struct fp_stack_config){ .mac = nh_our_mac, .ipv4 = NH_OUR_IP,
					 .prefix_len = NH_PREFIX, .gateway = NH_GW_IP,
					 .cache = &h->tp->cache, .secret = 0x1234567890abcdefull };
}

/* Free every frame waiting in the stack's tx queue; returns how many there were. */
static inline unsigned nh_drain(struct nh *h)
{
	struct fp_mbuf *m;
	unsigned n = 0;

	while (fp_stack_tx(h->st, &m, 1) == 1) {
		fp_mbuf_free(&h->tp->cache, m);
		n++;
	}
	return n;
}

/* Replace the stack with one built from @cfg (at h->now_us); tx drained. 0 or -errno. */
static inline int nh_restart(struct nh *h, const struct fp_stack_config *cfg)
{
	fp_stack_destroy(h->st);
	h->st = fp_stack_create(cfg, h->now_us);
	if (!h->st)
		return -errno;
	nh_drain(h);
	return 0;
}

/* The fixture with a pool of @n_bufs 2 KiB buffers (freed by fp_test_pool_teardown). */
static inline int nh_setup_bufs(void **state, uint32_t n_bufs)
{
	struct fp_pool_params pp = { .name = "nh", .n_bufs = n_bufs, .buf_size = 2048,
				     .mag_size = 8, .max_caches = 4 };
	struct nh *h = calloc(1, sizeof(*h));
	struct fp_test_pool *tp = calloc(1, sizeof(*tp));

	if (!h || !tp || !(tp->pool = fp_pool_create(&pp)) ||
	    fp_pool_cache_init(&tp->cache, tp->pool)) {
		if (tp && tp->pool)
			fp_pool_destroy(tp->pool);
		free(tp);
		free(h);
		return -1;
	}
	h->tp = tp;
	h->now_us = NH_T0_US;
	struct fp_stack_config cfg = nh_config(h);
	if (nh_restart(h, &cfg)) {
		void *p = h->tp;
		fp_test_pool_teardown(&p);
		free(h);
		return -1;
	}
	*state = h;
	return 0;
}

/* 64 buffers, as harness.h's pool: small enough that a leak or a runaway queue shows. */
static inline int nh_setup(void **state) { return nh_setup_bufs(state, 64); }

/* 4096 buffers, for tests that keep many segments in flight. */
static inline int nh_setup_big(void **state) { return nh_setup_bufs(state, 4096); }

/* Destroy the stack, then the pool's leak check decides. */
static inline int nh_teardown(void **state)
{
	struct nh *h = *state;
	void *tps = h->tp;

	fp_stack_destroy(h->st);
	free(h);
	return fp_test_pool_teardown(&tps);
}

/* ---- feeding frames ---- */

/* A buffer from the test pool holding a copy of @len bytes (as a NIC would receive them). */
static inline struct fp_mbuf *nh_mbuf(struct nh *h, const void *bytes, size_t len)
{
	struct fp_mbuf *m = fp_pool_get(&h->tp->cache);

	assert_non_null(m);
	memcpy(fp_mbuf_append(m, (uint32_t)len), bytes, len);
	return m;
}

/* Hand a copy of the frame to the stack at h->now_us. */
static inline void nh_input(struct nh *h, const void *frame, size_t len)
{
	struct fp_mbuf *m = nh_mbuf(h, frame, len);

	fp_stack_input(h->st, &m, 1, h->now_us);
}

/* Move the clock to @now_us and run the stack's timers. */
static inline unsigned nh_advance(struct nh *h, uint64_t now_us)
{
	h->now_us = now_us;
	return fp_stack_poll(h->st, now_us);
}

/* ---- building frames ---- */

static inline size_t nh_eth(uint8_t *buf, const struct fp_eth_addr *dst,
			    const struct fp_eth_addr *src, uint16_t type)
{
	return fp_eth_emit(buf, FP_ETH_HDR_LEN, dst, src, type);
}

/* An ARP frame from @sha to @eth_dst. Returns its length (42). */
static inline size_t nh_arp_frame(uint8_t *buf, const struct fp_eth_addr *eth_dst, uint16_t op,
				  const struct fp_eth_addr *sha, uint32_t spa,
				  const struct fp_eth_addr *tha, uint32_t tpa)
{
	struct fp_arp a = { .op = op, .sha = *sha, .tha = *tha, .spa = spa, .tpa = tpa };

	nh_eth(buf, eth_dst, sha, FP_ETH_TYPE_ARP);
	return FP_ETH_HDR_LEN + fp_arp_emit(buf + FP_ETH_HDR_LEN, FP_ARP_LEN, &a);
}

/* Teach the stack that @ip is at @mac (an ARP reply addressed to us). */
static inline void nh_learn(struct nh *h, uint32_t ip, const struct fp_eth_addr *mac)
{
	uint8_t f[64];
	size_t n = nh_arp_frame(f, &nh_our_mac, FP_ARP_OP_REPLY, mac, ip, &nh_our_mac, NH_OUR_IP);

	nh_input(h, f, n);
}

/* An Ethernet + IPv4 frame from the peer's MAC to ours carrying @l4_len bytes of @l4
 * (the L4 checksum already in place); header fields from @ip (src, dst, proto, id, ttl,
 * frag), tos 0. Returns the frame length. */
static inline size_t nh_ipv4_frame(uint8_t *buf, size_t cap, const struct fp_ipv4 *ip,
				   const void *l4, size_t l4_len)
{
	size_t off = nh_eth(buf, &nh_our_mac, &nh_peer_mac, FP_ETH_TYPE_IPV4);

	assert_true(off + FP_IPV4_HDR_LEN + l4_len <= cap);
	off += fp_ipv4_emit(buf + off, cap - off, ip, l4_len);
	memcpy(buf + off, l4, l4_len);
	return off + l4_len;
}

/* A UDP datagram in a frame, with a correct checksum. */
static inline size_t nh_udp_frame(uint8_t *buf, size_t cap, uint32_t src, uint32_t dst,
				  uint16_t sport, uint16_t dport, const void *data, size_t len)
{
	uint8_t l4[NH_FRAME_MAX];
	struct fp_ipv4 ip = { .src = src, .dst = dst, .proto = FP_IPPROTO_UDP, .ttl = 64,
			      .id = 1 };

	assert_true(len + FP_UDP_HDR_LEN <= sizeof(l4));
	memcpy(l4 + FP_UDP_HDR_LEN, data, len);
	fp_udp_emit(l4, FP_UDP_HDR_LEN + len, src, dst, sport, dport);
	return nh_ipv4_frame(buf, cap, &ip, l4, FP_UDP_HDR_LEN + len);
}

/* An ICMP echo request in a frame. */
static inline size_t nh_ping_frame(uint8_t *buf, size_t cap, uint32_t src, uint32_t dst,
				   uint16_t id, uint16_t seq, const void *data, size_t len)
{
	uint8_t l4[NH_FRAME_MAX];
	struct fp_icmp h = { .type = FP_ICMP_ECHO_REQUEST, .rest = (uint32_t)id << 16 | seq };
	struct fp_ipv4 ip = { .src = src, .dst = dst, .proto = FP_IPPROTO_ICMP, .ttl = 64,
			      .id = 2 };

	assert_true(len + FP_ICMP_HDR_LEN <= sizeof(l4));
	memcpy(l4 + FP_ICMP_HDR_LEN, data, len);
	fp_icmp_emit(l4, FP_ICMP_HDR_LEN + len, &h);
	return nh_ipv4_frame(buf, cap, &ip, l4, FP_ICMP_HDR_LEN + len);
}

/* A TCP segment in a frame: header from @t (options included), @len bytes of payload,
 * correct checksum. */
static inline size_t nh_tcp_frame(uint8_t *buf, size_t cap, uint32_t src, uint32_t dst,
				  const struct fp_tcp *t, const void *data, size_t len)
{
	uint8_t l4[NH_FRAME_MAX];
	struct fp_ipv4 ip = { .src = src, .dst = dst, .proto = FP_IPPROTO_TCP, .ttl = 64,
			      .id = 3 };
	size_t hl = fp_tcp_emit(l4, sizeof(l4), t);

	assert_true(hl && hl + len <= sizeof(l4));
	memcpy(l4 + hl, data, len);
	fp_tcp_set_csum(l4, fp_csum_partial(l4, hl + len, 0), src, dst, hl + len);
	return nh_ipv4_frame(buf, cap, &ip, l4, hl + len);
}

/* ---- what the stack sent ---- */

/* One frame taken from the stack, copied and parsed layer by layer with every checksum
 * verified (a parse failure fails the test). Layers not present stay zeroed. */
struct nh_pkt {
	uint8_t raw[NH_FRAME_MAX];
	size_t len;
	struct fp_eth eth;
	struct fp_arp arp;        /* eth.type == ARP */
	struct fp_ipv4 ip;        /* eth.type == IPv4 */
	struct fp_icmp icmp;      /* ip.proto == ICMP */
	struct fp_udp udp;        /* ip.proto == UDP */
	struct fp_tcp tcp;        /* ip.proto == TCP */
	const uint8_t *l4;        /* the IP payload, in raw */
	size_t l4_len;
	const uint8_t *data;      /* the ICMP data after its header, or the UDP/TCP payload */
	size_t data_len;
};

static inline void nh_parse_l4(struct nh_pkt *p)
{
	size_t hl = 0;

	switch (p->ip.proto) {
	case FP_IPPROTO_ICMP:
		assert_int_equal(fp_icmp_parse(p->l4, p->l4_len, &p->icmp), 0);
		hl = FP_ICMP_HDR_LEN;
		break;
	case FP_IPPROTO_UDP:
		assert_int_equal(fp_udp_parse(p->l4, p->l4_len, p->ip.src, p->ip.dst, &p->udp), 0);
		assert_int_equal(p->udp.len, p->l4_len);
		hl = FP_UDP_HDR_LEN;
		break;
	case FP_IPPROTO_TCP:
		assert_int_equal(fp_tcp_parse(p->l4, p->l4_len, p->ip.src, p->ip.dst, true,
					      &p->tcp), 0);
		hl = p->tcp.hdr_len;
		break;
	default:
		break;
	}
	p->data = p->l4 + hl;
	p->data_len = p->l4_len - hl;
}

/* Parse a frame's bytes into @p. */
static inline void nh_parse(const void *frame, size_t len, struct nh_pkt *p)
{
	memset(p, 0, sizeof(*p));
	assert_true(len <= sizeof(p->raw));
	memcpy(p->raw, frame, len);
	p->len = len;
	assert_int_equal(fp_eth_parse(p->raw, len, &p->eth), 0);
	const uint8_t *l3 = p->raw + p->eth.hdr_len;
	size_t l3_len = len - p->eth.hdr_len;
	if (p->eth.type == FP_ETH_TYPE_ARP) {
		assert_int_equal(fp_arp_parse(l3, l3_len, &p->arp), 0);
		return;
	}
	assert_int_equal(p->eth.type, FP_ETH_TYPE_IPV4);
	assert_int_equal(fp_ipv4_parse(l3, l3_len, true, &p->ip), 0);
	p->l4 = l3 + p->ip.hdr_len;
	p->l4_len = fp_ipv4_payload_len(&p->ip);
	nh_parse_l4(p);
}

/* Take the oldest tx frame, parse it into @p and free it. 0, or -ENOENT when none. */
static inline int nh_pop(struct nh *h, struct nh_pkt *p)
{
	struct fp_mbuf *m;
	uint8_t tmp[NH_FRAME_MAX];

	if (fp_stack_tx(h->st, &m, 1) != 1)
		return -ENOENT;
	uint32_t len = fp_mbuf_read(m, 0, tmp, sizeof(tmp));
	assert_int_equal(len, m->pkt_len);
	fp_mbuf_free(&h->tp->cache, m);
	nh_parse(tmp, len, p);
	return 0;
}

/* A copy of the stack's counters. */
static inline struct fp_net_stats nh_stats(struct nh *h)
{
	struct fp_net_stats s;

	fp_stack_stats(h->st, &s);
	return s;
}

/* Take up to @max events; a test frees UDP payloads with fp_stack_free(). */
static inline unsigned nh_events(struct nh *h, struct fp_event *ev, unsigned max)
{
	return fp_stack_events(h->st, ev, max);
}
