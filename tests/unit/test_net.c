/* test_net.c: the stack below TCP, frame by frame: Ethernet demux, ARP, IPv4 checks, ICMP, UDP. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "net_harness.h"

#include "defs.h" /* NET_ARP_*, net_icmp_burst(), FP_NET_HEADROOM */

#define PORT 5353
#define COOKIE 0xc0ffee

static const struct fp_eth_addr zero_mac = {{ 0 }};
static const struct fp_eth_addr bcast_mac = {{ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }};

/* ---- helpers ---- */

static void expect_no_tx(struct nh *h)
{
	assert_int_equal(fp_stack_tx_pending(h->st), 0);
}

static void expect_arp_request(struct nh *h, uint32_t tpa)
{
	struct nh_pkt p;

	assert_int_equal(nh_pop(h, &p), 0);
	assert_int_equal(p.eth.type, FP_ETH_TYPE_ARP);
	assert_memory_equal(p.eth.dst.b, bcast_mac.b, 6);
	assert_int_equal(p.arp.op, FP_ARP_OP_REQUEST);
	assert_int_equal(p.arp.spa, NH_OUR_IP);
	assert_int_equal(p.arp.tpa, tpa);
	assert_memory_equal(p.arp.sha.b, nh_our_mac.b, 6);
}

/* A UDP datagram to @dst carrying @data came out, Ethernet-addressed to @mac. */
static void expect_udp(struct nh *h, const struct fp_eth_addr *mac, uint32_t dst,
		       const char *data)
{
	struct nh_pkt p;

	assert_int_equal(nh_pop(h, &p), 0);
	assert_int_equal(p.eth.type, FP_ETH_TYPE_IPV4);
	assert_memory_equal(p.eth.dst.b, mac->b, 6);
	assert_memory_equal(p.eth.src.b, nh_our_mac.b, 6);
	assert_int_equal(p.ip.proto, FP_IPPROTO_UDP);
	assert_int_equal(p.ip.src, NH_OUR_IP);
	assert_int_equal(p.ip.dst, dst);
	assert_int_equal(p.data_len, strlen(data));
	assert_memory_equal(p.data, data, strlen(data));
}

static int send_str(struct nh *h, uint32_t dst, const char *s)
{
	return fp_udp_send(h->st, 4000, dst, 4001, s, strlen(s));
}

/* ---- creation ---- */

/* RFC 5227 §3: the announcement, byte for byte (42 bytes: the NIC pads to 60). */
static void test_garp_on_create(void **state)
{
	struct nh *h = *state;
	struct fp_stack_config cfg = nh_config(h);
	static const uint8_t want[42] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06,
		0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01,
		0x02, 0, 0, 0, 0, 0x01, 10, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 10, 0, 0, 1,
	};
	struct fp_mbuf *m;

	fp_stack_destroy(h->st);
	h->st = fp_stack_create(&cfg, h->now_us);
	assert_non_null(h->st);
	assert_int_equal(fp_stack_tx_pending(h->st), 1);
	assert_int_equal(fp_stack_tx(h->st, &m, 1), 1);
	assert_int_equal(m->pkt_len, sizeof(want));
	assert_memory_equal(fp_mbuf_data(m), want, sizeof(want));
	fp_stack_free(h->st, m);
	assert_int_equal(nh_stats(h).arp_req_tx, 1);
	assert_int_equal(nh_stats(h).tx_frames, 1);
	assert_int_equal(nh_stats(h).tx_bytes, 42);
}

static void test_config_invalid(void **state)
{
	struct nh *h = *state;
	struct fp_stack_config good = nh_config(h), c;

	c = good, c.cache = NULL;
	assert_null(fp_stack_create(&c, 0));
	assert_int_equal(errno, EINVAL);
	c = good, c.ipv4 = 0;
	assert_null(fp_stack_create(&c, 0));
	assert_int_equal(errno, EINVAL);
	c = good, c.prefix_len = 33;
	assert_null(fp_stack_create(&c, 0));
	assert_int_equal(errno, EINVAL);
	c = good, c.mtu = 575;
	assert_null(fp_stack_create(&c, 0));
	assert_int_equal(errno, EINVAL);
	c = good, c.mtu = (uint16_t)(2048 - FP_NET_HEADROOM + 1); /* the pool's buffers are 2 KiB */
	assert_null(fp_stack_create(&c, 0));
	assert_int_equal(errno, EINVAL);
	c = good, c.mtu = (uint16_t)(2048 - FP_NET_HEADROOM);
	struct fp_stack *st = fp_stack_create(&c, 0);
	assert_non_null(st);
	fp_stack_destroy(st); /* frees the queued announcement */
	assert_null(fp_stack_create(NULL, 0));
	assert_int_equal(errno, EINVAL);
}

static void test_stat_names(void **state)
{
	(void)state;
	assert_int_equal(fp_net_stat_count, sizeof(struct fp_net_stats) / sizeof(uint64_t));
	assert_string_equal(fp_net_stat_names[0], "rx_frames");
	assert_string_equal(fp_net_stat_names[fp_net_stat_count - 1], "nobufs");
}

/* ---- Ethernet ---- */

static void test_eth_vlan_dropped(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX], v[NH_FRAME_MAX];
	size_t n = nh_arp_frame(f, &nh_our_mac, FP_ARP_OP_REQUEST, &nh_peer_mac, NH_PEER_IP,
				&zero_mac, NH_OUR_IP);

	/* Insert an 802.1Q tag (VID 5) after the addresses. */
	memcpy(v, f, 12);
	v[12] = 0x81, v[13] = 0x00, v[14] = 0x00, v[15] = 0x05;
	memcpy(v + 16, f + 12, n - 12);
	nh_input(h, v, n + 4);
	assert_int_equal(nh_stats(h).eth_vlan_drop, 1);
	assert_int_equal(nh_stats(h).arp_req_rx, 0);
	expect_no_tx(h);
}

static void test_eth_other_mac_dropped(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	struct fp_eth_addr other = {{ 0x02, 0, 0, 0, 0, 0x33 }};
	struct fp_eth_addr mcast = {{ 0x01, 0x00, 0x5e, 0, 0, 1 }};
	size_t n = nh_arp_frame(f, &other, FP_ARP_OP_REQUEST, &nh_peer_mac, NH_PEER_IP,
				&zero_mac, NH_OUR_IP);

	nh_input(h, f, n);
	memcpy(f, mcast.b, 6);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).eth_not_for_us, 2);
	assert_int_equal(nh_stats(h).rx_frames, 2);
	assert_int_equal(nh_stats(h).rx_bytes, 2 * n);
	expect_no_tx(h);
}

static void test_eth_short_and_unknown_type(void **state)
{
	struct nh *h = *state;
	uint8_t f[64] = { 0 };

	memcpy(f, nh_our_mac.b, 6);
	nh_input(h, f, 13);
	f[12] = 0x86, f[13] = 0xdd; /* IPv6 */
	nh_input(h, f, 60);
	f[12] = 0x00, f[13] = 0x40; /* 802.3 length */
	nh_input(h, f, 60);
	assert_int_equal(nh_stats(h).eth_short, 1);
	assert_int_equal(nh_stats(h).eth_unknown_type, 2);
	expect_no_tx(h);
}

/* ---- ARP ---- */

/* RFC 826: a request for our address gets a unicast reply, every byte as Linux sends it. */
static void test_arp_request_reply(void **state)
{
	struct nh *h = *state;
	uint8_t f[64];
	size_t n = nh_arp_frame(f, &bcast_mac, FP_ARP_OP_REQUEST, &nh_peer_mac, NH_PEER_IP,
				&zero_mac, NH_OUR_IP);
	static const uint8_t want[42] = {
		0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06,
		0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02,
		0x02, 0, 0, 0, 0, 0x01, 10, 0, 0, 1,
		0x02, 0, 0, 0, 0, 0x02, 10, 0, 0, 2,
	};
	struct fp_mbuf *m;

	memset(f + n, 0, 60 - n); /* padded to the minimum frame, as on a real wire */
	nh_input(h, f, 60);
	assert_int_equal(fp_stack_tx(h->st, &m, 1), 1);
	assert_int_equal(m->pkt_len, sizeof(want));
	assert_memory_equal(fp_mbuf_data(m), want, sizeof(want));
	fp_stack_free(h->st, m);
	assert_int_equal(nh_stats(h).arp_req_rx, 1);
	assert_int_equal(nh_stats(h).arp_reply_tx, 1);
	/* The merge rule added the asker: a send to it goes straight out. */
	assert_int_equal(send_str(h, NH_PEER_IP, "x"), 0);
	expect_udp(h, &nh_peer_mac, NH_PEER_IP, "x");
}

/* A request for another host: no reply, and the sender is not added (RFC 826: only
 * when we are the target). */
static void test_arp_request_other_target(void **state)
{
	struct nh *h = *state;
	uint8_t f[64];
	size_t n = nh_arp_frame(f, &bcast_mac, FP_ARP_OP_REQUEST, &nh_peer_mac, NH_PEER_IP,
				&zero_mac, 0x0a000003);

	nh_input(h, f, n);
	expect_no_tx(h);
	assert_int_equal(nh_stats(h).arp_req_rx, 1);
	assert_int_equal(send_str(h, NH_PEER_IP, "x"), 0);
	expect_arp_request(h, NH_PEER_IP);
	expect_no_tx(h);
}

/* An existing entry is updated by any ARP from its host, even one not for us. */
static void test_arp_merge_updates_existing(void **state)
{
	struct nh *h = *state;
	struct fp_eth_addr moved = {{ 0x02, 0, 0, 0, 0, 0x22 }};
	uint8_t f[64];

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	size_t n = nh_arp_frame(f, &bcast_mac, FP_ARP_OP_REQUEST, &moved, NH_PEER_IP,
				&zero_mac, 0x0a000003);
	nh_input(h, f, n);
	assert_int_equal(send_str(h, NH_PEER_IP, "y"), 0);
	expect_udp(h, &moved, NH_PEER_IP, "y");
}

/* Another MAC claiming our address is a conflict: counted, never learned or answered;
 * broadcast and multicast sender MACs are never learned. */
static void test_arp_bad_senders(void **state)
{
	struct nh *h = *state;
	struct fp_eth_addr mcast = {{ 0x01, 0, 0x5e, 0, 0, 1 }};
	uint8_t f[64];
	size_t n = nh_arp_frame(f, &bcast_mac, FP_ARP_OP_REQUEST, &nh_peer_mac, NH_OUR_IP,
				&zero_mac, NH_OUR_IP);

	nh_input(h, f, n);
	n = nh_arp_frame(f, &nh_our_mac, FP_ARP_OP_REPLY, &mcast, NH_PEER_IP, &nh_our_mac,
			 NH_OUR_IP);
	nh_input(h, f, n);
	n = nh_arp_frame(f, &nh_our_mac, FP_ARP_OP_REPLY, &bcast_mac, NH_PEER_IP, &nh_our_mac,
			 NH_OUR_IP);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).arp_bad, 3);
	expect_no_tx(h);
	assert_int_equal(send_str(h, NH_PEER_IP, "x"), 0);
	expect_arp_request(h, NH_PEER_IP);
}

/* A send to an unknown on-link host asks for it and parks the datagram; the reply
 * releases it. */
static void test_arp_resolution(void **state)
{
	struct nh *h = *state;
	uint8_t f[64];

	assert_int_equal(send_str(h, NH_PEER_IP, "parked"), 0); /* waiting counts as sent */
	expect_arp_request(h, NH_PEER_IP);
	expect_no_tx(h);
	assert_int_equal(send_str(h, NH_PEER_IP, "second"), 0);
	expect_no_tx(h); /* one request per second at most (RFC 1122 §2.3.2.1) */
	size_t n = nh_arp_frame(f, &nh_our_mac, FP_ARP_OP_REPLY, &nh_peer_mac, NH_PEER_IP,
				&nh_our_mac, NH_OUR_IP);
	nh_input(h, f, n);
	expect_udp(h, &nh_peer_mac, NH_PEER_IP, "parked");
	expect_udp(h, &nh_peer_mac, NH_PEER_IP, "second");
	expect_no_tx(h);
	assert_int_equal(nh_stats(h).arp_reply_rx, 1);
	/* The resolved entry's retry timer was cancelled: nothing fires later. */
	assert_int_equal(nh_advance(h, h->now_us + 10 * NET_ARP_RETRY_US), 0);
	expect_no_tx(h);
}

/* cfg.arp_queue frames wait in total; the rest are dropped and counted. */
static void test_arp_queue_bound(void **state)
{
	struct nh *h = *state;
	struct fp_stack_config cfg = nh_config(h);
	char s[8];

	cfg.arp_queue = 4;
	assert_int_equal(nh_restart(h, &cfg), 0);
	for (int i = 0; i < 6; i++) {
		snprintf(s, sizeof(s), "d%d", i);
		assert_int_equal(send_str(h, NH_PEER_IP, s), i < 4 ? 0 : -ENOBUFS);
	}
	assert_int_equal(send_str(h, 0x0a000003, "other"), -ENOBUFS); /* the bound is shared */
	assert_int_equal(nh_stats(h).arp_queue_drop, 3);
	expect_arp_request(h, NH_PEER_IP);
	expect_arp_request(h, 0x0a000003);
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	for (int i = 0; i < 4; i++) {
		snprintf(s, sizeof(s), "d%d", i);
		expect_udp(h, &nh_peer_mac, NH_PEER_IP, s);
	}
	expect_no_tx(h);
}

/* Three requests one second apart, then the waiting frames are dropped. */
static void test_arp_retries_then_drop(void **state)
{
	struct nh *h = *state;
	uint64_t t0 = h->now_us;

	assert_int_equal(send_str(h, NH_PEER_IP, "a"), 0);
	assert_int_equal(send_str(h, NH_PEER_IP, "b"), 0);
	expect_arp_request(h, NH_PEER_IP);
	assert_int_equal(fp_stack_next_us(h->st) <= t0 + NET_ARP_RETRY_US, true);
	nh_advance(h, t0 + NET_ARP_RETRY_US - 100);
	expect_no_tx(h);
	for (unsigned i = 1; i < NET_ARP_TRIES; i++) {
		nh_advance(h, t0 + i * NET_ARP_RETRY_US);
		expect_arp_request(h, NH_PEER_IP);
		expect_no_tx(h);
	}
	assert_int_equal(nh_stats(h).arp_unresolved_drop, 0);
	nh_advance(h, t0 + NET_ARP_TRIES * NET_ARP_RETRY_US);
	expect_no_tx(h);
	assert_int_equal(nh_stats(h).arp_unresolved_drop, 2);
	assert_int_equal(nh_stats(h).arp_req_tx, 1 + NET_ARP_TRIES); /* and the announcement */
	assert_int_equal(fp_stack_next_us(h->st), UINT64_MAX);
	/* A late reply finds nothing waiting; the next send goes straight out. */
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	expect_no_tx(h);
	assert_int_equal(send_str(h, NH_PEER_IP, "c"), 0);
	expect_udp(h, &nh_peer_mac, NH_PEER_IP, "c");
}

/* An entry older than arp_timeout_us is asked for again before it is used. */
static void test_arp_entry_timeout(void **state)
{
	struct nh *h = *state;
	struct fp_stack_config cfg = nh_config(h);

	cfg.arp_timeout_us = 5 * 1000 * 1000;
	assert_int_equal(nh_restart(h, &cfg), 0);
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	h->now_us += cfg.arp_timeout_us - 1;
	assert_int_equal(send_str(h, NH_PEER_IP, "fresh"), 0);
	expect_udp(h, &nh_peer_mac, NH_PEER_IP, "fresh");
	nh_advance(h, h->now_us + 1);
	assert_int_equal(send_str(h, NH_PEER_IP, "stale"), 0);
	expect_arp_request(h, NH_PEER_IP);
	expect_no_tx(h);
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	expect_udp(h, &nh_peer_mac, NH_PEER_IP, "stale");
}

/* More next hops than the table holds: old entries are evicted, nothing leaks. */
static void test_arp_table_eviction(void **state)
{
	struct nh *h = *state;
	struct fp_stack_config cfg = nh_config(h);

	cfg.prefix_len = 16;
	assert_int_equal(nh_restart(h, &cfg), 0);
	for (uint32_t i = 0; i < 4 * NET_ARP_TABLE_SIZE; i++) {
		struct fp_eth_addr mac = {{ 0x02, 1, 0, 0, (uint8_t)(i >> 8), (uint8_t)i }};
		nh_learn(h, 0x0a000100 + i, &mac);
	}
	expect_no_tx(h);
	/* The most recent one is there. */
	uint32_t last = 4 * NET_ARP_TABLE_SIZE - 1;
	struct fp_eth_addr mac = {{ 0x02, 1, 0, 0, (uint8_t)(last >> 8), (uint8_t)last }};
	assert_int_equal(send_str(h, 0x0a000100 + last, "z"), 0);
	expect_udp(h, &mac, 0x0a000100 + last, "z");
}

/* ---- routing ---- */

static void test_route_via_gateway(void **state)
{
	struct nh *h = *state;

	nh_learn(h, NH_GW_IP, &nh_gw_mac);
	assert_int_equal(send_str(h, NH_FAR_IP, "far"), 0);
	expect_udp(h, &nh_gw_mac, NH_FAR_IP, "far");
}

static void test_route_gateway_unresolved(void **state)
{
	struct nh *h = *state;

	assert_int_equal(send_str(h, NH_FAR_IP, "far"), 0);
	expect_arp_request(h, NH_GW_IP); /* asks for the gateway, not the destination */
	nh_learn(h, NH_GW_IP, &nh_gw_mac);
	expect_udp(h, &nh_gw_mac, NH_FAR_IP, "far");
}

static void test_route_no_gateway(void **state)
{
	struct nh *h = *state;
	struct fp_stack_config cfg = nh_config(h);

	cfg.gateway = 0;
	assert_int_equal(nh_restart(h, &cfg), 0);
	assert_int_equal(send_str(h, NH_FAR_IP, "far"), -EHOSTUNREACH);
	assert_int_equal(nh_stats(h).ip_no_route, 1);
	expect_no_tx(h);
}

/* The header we send: TTL 64, DF, identification counting up. */
static void test_ipv4_output_header(void **state)
{
	struct nh *h = *state;
	struct nh_pkt a, b;

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	send_str(h, NH_PEER_IP, "1");
	send_str(h, NH_PEER_IP, "2");
	assert_int_equal(nh_pop(h, &a), 0);
	assert_int_equal(nh_pop(h, &b), 0);
	assert_int_equal(a.ip.hdr_len, 20);
	assert_int_equal(a.ip.ttl, 64);
	assert_int_equal(a.ip.frag, FP_IPV4_FLAG_DF);
	assert_int_equal(a.ip.tos, 0);
	assert_int_equal(a.ip.total_len, 20 + 8 + 1);
	assert_int_equal((uint16_t)(a.ip.id + 1), b.ip.id);
	assert_int_equal(a.udp.sport, 4000);
	assert_int_equal(a.udp.dport, 4001);
}

/* ---- ICMP ---- */

static void test_ping_reply(void **state)
{
	struct nh *h = *state;
	uint8_t data[56], f[NH_FRAME_MAX];
	struct nh_pkt p;

	for (unsigned i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 1);
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	size_t n = nh_ping_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 0x1234, 7, data,
				 sizeof(data));
	nh_input(h, f, n);
	assert_int_equal(nh_pop(h, &p), 0);
	assert_memory_equal(p.eth.dst.b, nh_peer_mac.b, 6);
	assert_int_equal(p.ip.src, NH_OUR_IP);
	assert_int_equal(p.ip.dst, NH_PEER_IP);
	assert_int_equal(p.ip.proto, FP_IPPROTO_ICMP);
	assert_int_equal(p.icmp.type, FP_ICMP_ECHO_REPLY);
	assert_int_equal(p.icmp.code, 0);
	assert_int_equal(fp_icmp_echo_id(&p.icmp), 0x1234);
	assert_int_equal(fp_icmp_echo_seq(&p.icmp), 7);
	assert_int_equal(p.data_len, sizeof(data));
	assert_memory_equal(p.data, data, sizeof(data));
	expect_no_tx(h);
	assert_int_equal(nh_stats(h).icmp_echo_rx, 1);
	assert_int_equal(nh_stats(h).icmp_echo_tx, 1);
}

/* An odd-length echo in a padded minimum-size frame: the padding is not echoed back. */
static void test_ping_padded_odd(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX] = { 0 };
	struct nh_pkt p;

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	size_t n = nh_ping_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1, 1, "abc", 3);
	assert_true(n < 60);
	memset(f + n, 0xee, 60 - n);
	nh_input(h, f, 60);
	assert_int_equal(nh_pop(h, &p), 0);
	assert_int_equal(p.data_len, 3);
	assert_memory_equal(p.data, "abc", 3);
}

static void test_icmp_bad_and_other(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = nh_ping_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1, 1, "abcd", 4);

	f[n - 1] ^= 0x40; /* breaks the ICMP checksum, not the IP one */
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).icmp_bad, 1);
	f[n - 1] ^= 0x40;
	/* Turn it into an echo reply: nothing asked for it. */
	uint8_t *icmp = f + FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN;
	struct fp_icmp rep = { .type = FP_ICMP_ECHO_REPLY, .rest = 0x00010001 };
	fp_icmp_emit(icmp, n - FP_ETH_HDR_LEN - FP_IPV4_HDR_LEN, &rep);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).icmp_other_rx, 1);
	expect_no_tx(h);
}

/* ---- IPv4 input checks ---- */

/* A bound-port datagram frame whose IP header the caller then damages. */
static size_t udp_to_us(struct nh *h, uint8_t *f, uint32_t src)
{
	assert_int_equal(fp_udp_bind(h->st, PORT, COOKIE) == 0 ||
			 fp_udp_bind(h->st, PORT, COOKIE) == -EADDRINUSE, 1);
	return nh_udp_frame(f, NH_FRAME_MAX, src, NH_OUR_IP, 1000, PORT, "data", 4);
}

/* Refresh the IPv4 header checksum after editing the header at @f + 14. */
static void fix_ip_csum(uint8_t *f)
{
	uint8_t *ip = f + FP_ETH_HDR_LEN;
	unsigned hl = (ip[0] & 15u) * 4;

	ip[10] = ip[11] = 0;
	uint16_t c = fp_csum(ip, hl);
	memcpy(ip + 10, &c, 2);
}

static unsigned drain_events(struct nh *h)
{
	struct fp_event ev[8];
	unsigned n, total = 0;

	while ((n = nh_events(h, ev, 8)) > 0) {
		for (unsigned i = 0; i < n; i++)
			fp_stack_free(h->st, ev[i].m);
		total += n;
	}
	return total;
}

static void test_ip_not_for_us(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, 0x0a000009, 1000, PORT, "x", 1);

	fp_udp_bind(h->st, PORT, COOKIE);
	nh_input(h, f, n);
	n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, 0x0a0000ff, 1000, PORT, "x", 1);
	nh_input(h, f, n); /* directed broadcast: we accept only our own address */
	assert_int_equal(nh_stats(h).ip_not_for_us, 2);
	assert_int_equal(drain_events(h), 0);
	expect_no_tx(h);
}

static void test_ip_bad_csum(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = udp_to_us(h, f, NH_PEER_IP);

	f[FP_ETH_HDR_LEN + 8] ^= 1; /* TTL changes, checksum does not */
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).ip_bad_csum, 1);
	assert_int_equal(drain_events(h), 0);
}

static void test_ip_fragment_dropped(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = udp_to_us(h, f, NH_PEER_IP);

	fp_put_be16(f + FP_ETH_HDR_LEN + 6, FP_IPV4_FLAG_MF); /* first fragment */
	fix_ip_csum(f);
	nh_input(h, f, n);
	fp_put_be16(f + FP_ETH_HDR_LEN + 6, 100); /* a later one */
	fix_ip_csum(f);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).ip_frag_drop, 2);
	assert_int_equal(drain_events(h), 0);
	expect_no_tx(h);
}

static void test_ip_bad_header(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = udp_to_us(h, f, NH_PEER_IP);

	f[FP_ETH_HDR_LEN] = 0x65; /* version 6 */
	fix_ip_csum(f);
	nh_input(h, f, n);
	f[FP_ETH_HDR_LEN] = 0x45;
	fp_put_be16(f + FP_ETH_HDR_LEN + 2, (uint16_t)(n - FP_ETH_HDR_LEN + 1)); /* too long */
	fix_ip_csum(f);
	nh_input(h, f, n);
	nh_input(h, f, FP_ETH_HDR_LEN + 10); /* truncated header */
	assert_int_equal(nh_stats(h).ip_bad, 3);
	assert_int_equal(drain_events(h), 0);
}

/* Options are accepted and skipped (RFC 1122 §3.2.1.8); TTL 1 is fine for us (§3.2.1.7). */
static void test_ip_options_and_ttl_accepted(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX], g[NH_FRAME_MAX];
	size_t n = udp_to_us(h, f, NH_PEER_IP);
	struct fp_event ev;

	/* Rebuild with IHL 6: four NOP option bytes between the header and UDP. */
	memcpy(g, f, FP_ETH_HDR_LEN + 20);
	memset(g + FP_ETH_HDR_LEN + 20, 1, 4);
	memcpy(g + FP_ETH_HDR_LEN + 24, f + FP_ETH_HDR_LEN + 20, n - FP_ETH_HDR_LEN - 20);
	g[FP_ETH_HDR_LEN] = 0x46;
	g[FP_ETH_HDR_LEN + 8] = 1;
	fp_put_be16(g + FP_ETH_HDR_LEN + 2, (uint16_t)(n - FP_ETH_HDR_LEN + 4));
	fix_ip_csum(g);
	nh_input(h, g, n + 4);
	assert_int_equal(nh_events(h, &ev, 1), 1);
	assert_int_equal(ev.len, 4);
	assert_memory_equal(fp_mbuf_data(ev.m), "data", 4);
	fp_stack_free(h->st, ev.m);
}

/* RFC 1122 §3.2.1.3: broadcast, multicast, 0, loopback and our own address as source. */
static void test_ip_martian_source(void **state)
{
	struct nh *h = *state;
	static const uint32_t bad[] = { 0xffffffffu, 0xe0000001u, 0, NH_OUR_IP, 0x7f000001u,
					0x0a0000ffu };
	uint8_t f[NH_FRAME_MAX];

	for (unsigned i = 0; i < FP_ARRAY_SIZE(bad); i++) {
		size_t n = udp_to_us(h, f, bad[i]);
		nh_input(h, f, n);
	}
	assert_int_equal(nh_stats(h).ip_bad, FP_ARRAY_SIZE(bad));
	assert_int_equal(drain_events(h), 0);
	expect_no_tx(h);
}

/* An unknown protocol is counted and answered with protocol unreachable. */
static void test_ip_unknown_proto(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	struct fp_ipv4 ip = { .src = NH_PEER_IP, .dst = NH_OUR_IP, .proto = 47, .ttl = 64 };
	struct nh_pkt p;

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	size_t n = nh_ipv4_frame(f, sizeof(f), &ip, "greeeeee", 8);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).ip_unknown_proto, 1);
	assert_int_equal(nh_pop(h, &p), 0);
	assert_int_equal(p.icmp.type, FP_ICMP_DEST_UNREACH);
	assert_int_equal(p.icmp.code, 2);
	assert_int_equal(p.data_len, 28);
	assert_memory_equal(p.data, f + FP_ETH_HDR_LEN, 28);
}

/* ---- UDP ---- */

static void test_udp_bind_recv_unbind(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	struct fp_event ev;

	assert_int_equal(fp_udp_bind(h->st, PORT, COOKIE), 0);
	assert_int_equal(fp_udp_bind(h->st, PORT, 1), -EADDRINUSE);
	size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1000, PORT, "hello", 5);
	assert_true(n < 60);
	memset(f + n, 0xaa, 60 - n); /* padding must not reach the application */
	nh_input(h, f, 60);
	assert_int_equal(nh_events(h, &ev, 1), 1);
	assert_int_equal(ev.type, FP_EV_UDP_RECV);
	assert_int_equal(ev.status, 0);
	assert_int_equal(ev.cookie, COOKIE);
	assert_int_equal(ev.raddr, NH_PEER_IP);
	assert_int_equal(ev.rport, 1000);
	assert_int_equal(ev.lport, PORT);
	assert_int_equal(ev.len, 5);
	assert_int_equal(ev.m->pkt_len, 5);
	assert_memory_equal(fp_mbuf_data(ev.m), "hello", 5);
	fp_stack_free(h->st, ev.m);
	assert_int_equal(nh_stats(h).udp_rx, 1);
	expect_no_tx(h);

	assert_int_equal(fp_udp_unbind(h->st, PORT), 0);
	assert_int_equal(fp_udp_unbind(h->st, PORT), -ENOENT);
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	nh_input(h, f, n);
	assert_int_equal(nh_events(h, &ev, 1), 0);
	assert_int_equal(nh_stats(h).udp_no_port, 1);
	assert_int_equal(nh_drain(h), 1); /* the port unreachable */
}

/* Many bindings: the hash grows, and unbinding in any order keeps the rest findable. */
static void test_udp_many_bindings(void **state)
{
	struct nh *h = *state;

	for (unsigned p = 1; p <= 1000; p++)
		assert_int_equal(fp_udp_bind(h->st, (uint16_t)(p * 37), p), 0);
	for (unsigned p = 1; p <= 1000; p += 2)
		assert_int_equal(fp_udp_unbind(h->st, (uint16_t)(p * 37)), 0);
	for (unsigned p = 1; p <= 1000; p++)
		assert_int_equal(fp_udp_bind(h->st, (uint16_t)(p * 37), p),
				 p % 2 ? 0 : -EADDRINUSE);
}

static void test_udp_bad_checksum(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = udp_to_us(h, f, NH_PEER_IP);

	f[n - 1] ^= 0x10;
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).udp_bad_csum, 1);
	/* A zero checksum means none was sent (RFC 768): accepted. */
	f[FP_ETH_HDR_LEN + 20 + 6] = f[FP_ETH_HDR_LEN + 20 + 7] = 0;
	nh_input(h, f, n);
	assert_int_equal(drain_events(h), 1);
	/* A length field beyond the datagram. */
	fp_put_be16(f + FP_ETH_HDR_LEN + 20 + 4, 200);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).udp_bad, 1);
	expect_no_tx(h);
}

/* RFC 1122 §3.2.2: port unreachable quotes the IP header and the first 8 data bytes. */
static void test_udp_closed_port_unreach(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	struct nh_pkt p;

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1000, 9999,
				"a longer payload", 16);
	nh_input(h, f, n);
	assert_int_equal(nh_pop(h, &p), 0);
	assert_memory_equal(p.eth.dst.b, nh_peer_mac.b, 6);
	assert_int_equal(p.ip.dst, NH_PEER_IP);
	assert_int_equal(p.ip.proto, FP_IPPROTO_ICMP);
	assert_int_equal(p.icmp.type, FP_ICMP_DEST_UNREACH);
	assert_int_equal(p.icmp.code, FP_ICMP_CODE_PORT_UNREACH);
	assert_int_equal(p.icmp.rest, 0);
	assert_int_equal(p.data_len, 20 + 8);
	assert_memory_equal(p.data, f + FP_ETH_HDR_LEN, 20 + 8);
	assert_int_equal(nh_stats(h).icmp_unreach_tx, 1);
	expect_no_tx(h);
}

/* No error about a link-layer broadcast (RFC 1122 §3.2.2). */
static void test_udp_closed_port_broadcast_frame(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];
	size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1000, 9999, "x", 1);

	memcpy(f, bcast_mac.b, 6);
	nh_input(h, f, n);
	assert_int_equal(nh_stats(h).udp_no_port, 1);
	assert_int_equal(nh_stats(h).icmp_unreach_tx, 0);
	expect_no_tx(h);
}

/* Errors come from a token bucket: a burst in one instant gets at most the bucket's
 * worth, and tokens come back at icmp_per_sec. */
static void test_icmp_rate_limit(void **state)
{
	struct nh *h = *state;
	uint32_t burst = net_icmp_burst(FP_NET_DEFAULT_ICMP_PER_SEC);
	uint8_t f[NH_FRAME_MAX];
	unsigned sent = 0;

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1000, 9999, "x", 1);
	for (unsigned i = 0; i < 3 * burst; i++) {
		nh_input(h, f, n);
		sent += nh_drain(h);
	}
	assert_int_equal(sent, burst);
	assert_int_equal(nh_stats(h).icmp_rate_drop, 2 * burst);
	h->now_us += 1000; /* one millisecond: one token at 1000/s */
	for (unsigned i = 0; i < 5; i++) {
		nh_input(h, f, n);
		sent += nh_drain(h);
	}
	assert_int_equal(sent, burst + 1);
	h->now_us += 10 * 1000 * 1000; /* long idle: the bucket is full again, not fuller */
	for (unsigned i = 0; i < 3 * burst; i++) {
		nh_input(h, f, n);
		sent += nh_drain(h);
	}
	assert_int_equal(sent, 2 * burst + 1);
}

static void test_udp_send_limits(void **state)
{
	struct nh *h = *state;
	static uint8_t big[1500];

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	assert_int_equal(fp_udp_send(h->st, 1, NH_PEER_IP, 2, big, 1500 - 28 + 1), -EMSGSIZE);
	assert_int_equal(fp_udp_send(h->st, 1, NH_PEER_IP, 2, big, 1500 - 28), 0);
	assert_int_equal(fp_udp_send(h->st, 1, NH_PEER_IP, 2, NULL, 0), 0);
	struct nh_pkt p;
	assert_int_equal(nh_pop(h, &p), 0);
	assert_int_equal(p.ip.total_len, 1500);
	assert_int_equal(p.len, 1514);
	assert_int_equal(nh_pop(h, &p), 0);
	assert_int_equal(p.udp.len, 8);
	assert_int_equal(nh_stats(h).udp_tx, 2);
}

/* When the pool runs dry the stack counts nobufs and drops; it never crashes. */
static void test_pool_exhausted(void **state)
{
	struct nh *h = *state;
	struct fp_mbuf *hold[64];
	unsigned n = 0;

	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	while (n < 64 && (hold[n] = fp_pool_get(&h->tp->cache)))
		n++;
	assert_int_equal(send_str(h, NH_PEER_IP, "x"), -ENOBUFS);
	assert_int_equal(nh_stats(h).nobufs, 1);
	for (unsigned i = 0; i < n; i++)
		fp_mbuf_free(&h->tp->cache, hold[i]);
	expect_no_tx(h);
}

/* ---- queues that grow ---- */

/* The tx and event queues grow past their first size without dropping or reordering. */
static void test_queues_grow(void **state)
{
	struct nh *h = *state;
	struct fp_pool_params pp = { .name = "big", .n_bufs = 1024, .buf_size = 2048,
				     .mag_size = 16, .max_caches = 2 };
	struct fp_test_pool big = { .pool = fp_pool_create(&pp) };
	struct fp_test_pool *small = h->tp;
	enum { N = 300 };
	uint8_t f[NH_FRAME_MAX];
	char s[16];

	assert_non_null(big.pool);
	assert_int_equal(fp_pool_cache_init(&big.cache, big.pool), 0);
	h->tp = &big;
	struct fp_stack_config cfg = nh_config(h);
	assert_int_equal(nh_restart(h, &cfg), 0);
	nh_learn(h, NH_PEER_IP, &nh_peer_mac);
	for (int i = 0; i < N; i++) {
		snprintf(s, sizeof(s), "m%d", i);
		assert_int_equal(send_str(h, NH_PEER_IP, s), 0);
	}
	assert_int_equal(fp_stack_tx_pending(h->st), N);
	for (int i = 0; i < N; i++) {
		snprintf(s, sizeof(s), "m%d", i);
		expect_udp(h, &nh_peer_mac, NH_PEER_IP, s);
	}
	fp_udp_bind(h->st, PORT, COOKIE);
	for (int i = 0; i < N; i++) {
		size_t n = nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, (uint16_t)i, PORT,
					"q", 1);
		nh_input(h, f, n);
	}
	struct fp_event ev;
	for (int i = 0; i < N; i++) {
		assert_int_equal(nh_events(h, &ev, 1), 1);
		assert_int_equal(ev.rport, i);
		fp_stack_free(h->st, ev.m);
	}
	/* Leave some frames and events queued: destroy must free them. */
	send_str(h, NH_PEER_IP, "left");
	nh_input(h, f, nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1, PORT, "q", 1));
	fp_stack_destroy(h->st);
	h->st = NULL;
	assert_int_equal(fp_pool_in_use(big.pool), 0);
	fp_pool_cache_flush(&big.cache);
	fp_pool_destroy(big.pool);
	h->tp = small;
	cfg = nh_config(h);
	assert_int_equal(nh_restart(h, &cfg), 0);
}

/* Destroy with frames parked on ARP and events undrained: nothing leaks (the fixture). */
static void test_destroy_frees_everything(void **state)
{
	struct nh *h = *state;
	uint8_t f[NH_FRAME_MAX];

	send_str(h, NH_PEER_IP, "parked");
	send_str(h, 0x0a000003, "parked too");
	fp_udp_bind(h->st, PORT, COOKIE);
	nh_input(h, f, nh_udp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, 1, PORT, "ev", 2));
	assert_int_equal(fp_stack_tx_pending(h->st), 2);
}

/* The harness's TCP builder makes segments its own parser accepts (for the TCP tests). */
static void test_harness_tcp_frame(void **state)
{
	struct fp_tcp t = { .sport = 1234, .dport = 80, .seq = 1000, .ack = 0,
			    .flags = FP_TCP_SYN, .wnd = 65535,
			    .opt = { .has_mss = 1, .mss = 1460, .sack_ok = 1, .has_ts = 1,
				     .ts_val = 7, .has_wscale = 1, .wscale = 7 } };
	uint8_t f[NH_FRAME_MAX];
	struct nh_pkt p;
	(void)state;

	size_t n = nh_tcp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, &t, "abc", 3);
	nh_parse(f, n, &p);
	assert_int_equal(p.ip.proto, FP_IPPROTO_TCP);
	assert_int_equal(p.tcp.seq, 1000);
	assert_int_equal(p.tcp.opt.mss, 1460);
	assert_int_equal(p.tcp.opt.wscale, 7);
	assert_int_equal(p.data_len, 3);
	assert_memory_equal(p.data, "abc", 3);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, nh_setup, nh_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_garp_on_create),
		T(test_config_invalid),
		T(test_stat_names),
		T(test_eth_vlan_dropped),
		T(test_eth_other_mac_dropped),
		T(test_eth_short_and_unknown_type),
		T(test_arp_request_reply),
		T(test_arp_request_other_target),
		T(test_arp_merge_updates_existing),
		T(test_arp_bad_senders),
		T(test_arp_resolution),
		T(test_arp_queue_bound),
		T(test_arp_retries_then_drop),
		T(test_arp_entry_timeout),
		T(test_arp_table_eviction),
		T(test_route_via_gateway),
		T(test_route_gateway_unresolved),
		T(test_route_no_gateway),
		T(test_ipv4_output_header),
		T(test_ping_reply),
		T(test_ping_padded_odd),
		T(test_icmp_bad_and_other),
		T(test_ip_not_for_us),
		T(test_ip_bad_csum),
		T(test_ip_fragment_dropped),
		T(test_ip_bad_header),
		T(test_ip_options_and_ttl_accepted),
		T(test_ip_martian_source),
		T(test_ip_unknown_proto),
		T(test_udp_bind_recv_unbind),
		T(test_udp_many_bindings),
		T(test_udp_bad_checksum),
		T(test_udp_closed_port_unreach),
		T(test_udp_closed_port_broadcast_frame),
		T(test_icmp_rate_limit),
		T(test_udp_send_limits),
		T(test_pool_exhausted),
		T(test_queues_grow),
		T(test_destroy_frees_everything),
		cmocka_unit_test(test_harness_tcp_frame),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
