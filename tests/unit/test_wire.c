/* test_wire.c: wire/ parse and emit on captured Linux frames, truncations, bad lengths and options. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/wire.h>

#include "fixtures_wire.h"
#include "harness.h"

#define IP(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))
#define HOST_A IP(10, 99, 0, 1)
#define HOST_B IP(10, 99, 0, 2)

static const struct fp_eth_addr mac_a = {{0x02, 0x00, 0x0a, 0x63, 0x00, 0x01}};
static const struct fp_eth_addr mac_b = {{0x02, 0x00, 0x0a, 0x63, 0x00, 0x02}};

/* An exactly sized heap copy, so AddressSanitizer reports any read at or past @len. */
static uint8_t *dup_exact(const uint8_t *p, size_t len)
{
	uint8_t *b = malloc(len ? len : 1);
	assert_non_null(b);
	if (len)
		memcpy(b, p, len);
	return b;
}

/* ---- helpers over the fixtures ---- */

struct frame {
	struct fp_eth eth;
	struct fp_ipv4 ip;
	const uint8_t *l3, *l4;
	size_t l3_len, l4_len;  /* l4_len: the IP payload */
};

/* Ethernet then IPv4, checksum verified: the datagram's layers, or the first error. */
static int parse_ip_frame(const uint8_t *buf, size_t len, struct frame *f)
{
	int rc = fp_eth_parse(buf, len, &f->eth);
	if (rc)
		return rc;
	f->l3 = buf + f->eth.hdr_len;
	f->l3_len = len - f->eth.hdr_len;
	rc = fp_ipv4_parse(f->l3, f->l3_len, true, &f->ip);
	if (rc)
		return rc;
	f->l4 = f->l3 + f->ip.hdr_len;
	f->l4_len = fp_ipv4_payload_len(&f->ip);
	return 0;
}

static void must_parse_ip_frame(const uint8_t *buf, size_t len, struct frame *f)
{
	assert_int_equal(parse_ip_frame(buf, len, f), 0);
	assert_int_equal(f->eth.type, FP_ETH_TYPE_IPV4);
	assert_int_equal(f->eth.hdr_len, FP_ETH_HDR_LEN);
	assert_int_equal(f->eth.n_vlan, 0);
	assert_int_equal(f->ip.hdr_len, 20);
	assert_int_equal(f->ip.total_len, f->l3_len);
}

/* Any layer of @buf[0..len), as the stack would take it: 0 or the first error. */
static int parse_all(const uint8_t *buf, size_t len)
{
	struct frame f;
	struct fp_eth eth;
	int rc = fp_eth_parse(buf, len, &eth);
	if (rc)
		return rc;
	if (eth.type == FP_ETH_TYPE_ARP) {
		struct fp_arp a;
		return fp_arp_parse(buf + eth.hdr_len, len - eth.hdr_len, &a);
	}
	rc = parse_ip_frame(buf, len, &f);
	if (rc)
		return rc;
	switch (f.ip.proto) {
	case FP_IPPROTO_ICMP: {
		struct fp_icmp h;
		return fp_icmp_parse(f.l4, f.l4_len, &h);
	}
	case FP_IPPROTO_UDP: {
		struct fp_udp u;
		return fp_udp_parse(f.l4, f.l4_len, f.ip.src, f.ip.dst, &u);
	}
	case FP_IPPROTO_TCP: {
		struct fp_tcp t;
		return fp_tcp_parse(f.l4, f.l4_len, f.ip.src, f.ip.dst, true, &t);
	}
	}
	return -EPROTONOSUPPORT;
}

/*
 * Rebuild the whole frame from the parsed structs and the payload bytes alone (every
 * header and checksum written by the emitters) and compare it byte for byte with @fx.
 */
static void reemit_frame(const uint8_t *fx, size_t len)
{
	uint8_t out[256];
	struct fp_eth eth;
	assert_true(len <= sizeof(out));
	memset(out, 0xa5, sizeof(out));
	assert_int_equal(fp_eth_parse(fx, len, &eth), 0);
	assert_int_equal(fp_eth_emit(out, sizeof(out), &eth.dst, &eth.src, eth.type), 14);
	if (eth.type == FP_ETH_TYPE_ARP) {
		struct fp_arp a;
		assert_int_equal(fp_arp_parse(fx + 14, len - 14, &a), 0);
		assert_int_equal(fp_arp_emit(out + 14, sizeof(out) - 14, &a), FP_ARP_LEN);
		assert_int_equal(len, 14 + FP_ARP_LEN);
		assert_memory_equal(out, fx, len);
		return;
	}
	struct frame f;
	must_parse_ip_frame(fx, len, &f);
	uint8_t *l4 = out + 34;
	size_t hl = 0;
	switch (f.ip.proto) {
	case FP_IPPROTO_ICMP: {
		struct fp_icmp h;
		assert_int_equal(fp_icmp_parse(f.l4, f.l4_len, &h), 0);
		memcpy(l4 + 8, f.l4 + 8, f.l4_len - 8);
		hl = fp_icmp_emit(l4, f.l4_len, &h);
		break;
	}
	case FP_IPPROTO_UDP: {
		struct fp_udp u;
		assert_int_equal(fp_udp_parse(f.l4, f.l4_len, f.ip.src, f.ip.dst, &u), 0);
		memcpy(l4 + 8, f.l4 + 8, f.l4_len - 8);
		hl = fp_udp_emit(l4, u.len, f.ip.src, f.ip.dst, u.sport, u.dport);
		break;
	}
	case FP_IPPROTO_TCP: {
		struct fp_tcp t;
		assert_int_equal(fp_tcp_parse(f.l4, f.l4_len, f.ip.src, f.ip.dst, true, &t), 0);
		hl = fp_tcp_emit(l4, sizeof(out) - 34, &t);
		assert_int_equal(hl, t.hdr_len);
		memcpy(l4 + hl, f.l4 + hl, f.l4_len - hl);
		/* The checksum summed in two pieces, as the stack does (header, then payload). */
		uint32_t sum = fp_csum_partial(l4, hl, 0);
		sum = fp_csum_combine(sum, fp_csum_partial(l4 + hl, f.l4_len - hl, 0), hl);
		fp_tcp_set_csum(l4, sum, f.ip.src, f.ip.dst, f.l4_len);
		break;
	}
	default:
		fail();
	}
	if (f.ip.proto != FP_IPPROTO_TCP)
		assert_int_equal(hl, 8);
	assert_int_equal(fp_ipv4_emit(out + 14, sizeof(out) - 14, &f.ip, f.l4_len), 20);
	assert_memory_equal(out, fx, len);
	assert_int_equal(out[len], 0xa5);	/* nothing written past the frame */
}

/* Every proper prefix of @fx must fail to parse, layer by layer, from an exact-size buffer. */
static void truncated_frame(const uint8_t *fx, size_t len)
{
	assert_int_equal(parse_all(fx, len), 0);
	for (size_t n = 0; n < len; n++) {
		uint8_t *b = dup_exact(fx, n);
		assert_int_not_equal(parse_all(b, n), 0);
		free(b);
	}
}

#define FIXTURES(X) \
	X(arp_request) X(arp_reply) X(icmp_echo_request) X(icmp_echo_reply) X(udp_hi) \
	X(icmp_port_unreach) X(tcp_syn) X(tcp_synack) X(tcp_ack) X(tcp_data) X(tcp_data_ack) \
	X(tcp_fin) X(tcp_fin_ack) X(tcp_last_ack)

#define FX_ENTRY(n) {#n, fx_##n, sizeof(fx_##n)},
static const struct {
	const char *name;
	const uint8_t *b;
	size_t len;
} fixtures[] = { FIXTURES(FX_ENTRY) };
#define N_FIXTURES (sizeof(fixtures) / sizeof(fixtures[0]))

static void fixtures_reemit(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_FIXTURES; i++) {
		print_message("  %s\n", fixtures[i].name);
		reemit_frame(fixtures[i].b, fixtures[i].len);
	}
}

static void fixtures_truncated(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_FIXTURES; i++)
		truncated_frame(fixtures[i].b, fixtures[i].len);
}

/* ---- Ethernet ---- */

static void eth_linux(void **state)
{
	(void)state;
	struct fp_eth e;
	uint8_t *b = dup_exact(fx_arp_request, 14);
	assert_int_equal(fp_eth_parse(b, 14, &e), 0);
	free(b);
	assert_true(fp_eth_addr_eq(&e.dst, &FP_ETH_BROADCAST));
	assert_true(fp_eth_addr_is_multicast(&e.dst));
	assert_true(fp_eth_addr_eq(&e.src, &mac_a));
	assert_false(fp_eth_addr_is_multicast(&e.src));
	assert_int_equal(e.type, FP_ETH_TYPE_ARP);
	assert_int_equal(e.hdr_len, 14);
	assert_int_equal(e.n_vlan, 0);
	assert_int_equal(e.vlan_tci, 0);

	assert_int_equal(fp_eth_parse(fx_tcp_synack, sizeof(fx_tcp_synack), &e), 0);
	assert_true(fp_eth_addr_eq(&e.dst, &mac_a));
	assert_true(fp_eth_addr_eq(&e.src, &mac_b));
	assert_int_equal(e.type, FP_ETH_TYPE_IPV4);
}

static void eth_emit(void **state)
{
	(void)state;
	uint8_t out[14];
	struct fp_eth e;
	assert_int_equal(fp_eth_emit(out, 13, &mac_b, &mac_a, FP_ETH_TYPE_IPV4), 0);
	assert_int_equal(fp_eth_emit(out, 14, &mac_b, &mac_a, FP_ETH_TYPE_IPV4), 14);
	assert_memory_equal(out, fx_tcp_syn, 14);
	assert_int_equal(fp_eth_parse(out, 14, &e), 0);
	assert_true(fp_eth_addr_eq(&e.dst, &mac_b));
	assert_true(fp_eth_addr_eq(&e.src, &mac_a));
	assert_int_equal(e.type, FP_ETH_TYPE_IPV4);
}

/* Build dst, src, then @n_tags (tpid, tci) pairs, then @type: the header length. */
static size_t vlan_frame(uint8_t *b, const uint16_t *tags, size_t n_tags, uint16_t type)
{
	memcpy(b, mac_b.b, 6);
	memcpy(b + 6, mac_a.b, 6);
	size_t off = 12;
	for (size_t i = 0; i < n_tags; i++, off += 4) {
		fp_put_be16(b + off, tags[2 * i]);
		fp_put_be16(b + off + 2, tags[2 * i + 1]);
	}
	fp_put_be16(b + off, type);
	return off + 2;
}

static void eth_vlan(void **state)
{
	(void)state;
	uint8_t b[64];
	struct fp_eth e;

	const uint16_t one[] = { FP_ETH_TYPE_VLAN, 0x2064 };	/* PCP 1, VID 100 */
	size_t hl = vlan_frame(b, one, 1, FP_ETH_TYPE_IPV4);
	assert_int_equal(hl, 18);
	assert_int_equal(fp_eth_parse(b, hl, &e), 0);
	assert_int_equal(e.n_vlan, 1);
	assert_int_equal(e.vlan_tci, 0x2064);
	assert_int_equal(e.type, FP_ETH_TYPE_IPV4);
	assert_int_equal(e.hdr_len, 18);

	/* 802.1ad outer (service tag) over 802.1Q inner: the outer TCI is reported. */
	const uint16_t two[] = { FP_ETH_TYPE_QINQ, 0x0fff, FP_ETH_TYPE_VLAN, 0x0005 };
	hl = vlan_frame(b, two, 2, FP_ETH_TYPE_ARP);
	assert_int_equal(hl, 22);
	assert_int_equal(fp_eth_parse(b, hl, &e), 0);
	assert_int_equal(e.n_vlan, 2);
	assert_int_equal(e.vlan_tci, 0x0fff);
	assert_int_equal(e.type, FP_ETH_TYPE_ARP);
	assert_int_equal(e.hdr_len, 22);
	for (size_t n = 0; n < hl; n++) {
		uint8_t *t = dup_exact(b, n);
		assert_int_equal(fp_eth_parse(t, n, &e), -EINVAL);
		free(t);
	}

	/* Two 802.1Q tags (the common non-standard Q-in-Q) are skipped too. */
	const uint16_t qq[] = { FP_ETH_TYPE_VLAN, 7, FP_ETH_TYPE_VLAN, 8 };
	hl = vlan_frame(b, qq, 2, FP_ETH_TYPE_IPV4);
	assert_int_equal(fp_eth_parse(b, hl, &e), 0);
	assert_int_equal(e.n_vlan, 2);
	assert_int_equal(e.vlan_tci, 7);

	/* A third tag is more than this parser skips. */
	const uint16_t three[] = { FP_ETH_TYPE_QINQ, 1, FP_ETH_TYPE_VLAN, 2, FP_ETH_TYPE_VLAN, 3 };
	hl = vlan_frame(b, three, 3, FP_ETH_TYPE_IPV4);
	assert_int_equal(fp_eth_parse(b, hl, &e), -EPROTONOSUPPORT);

	/* A tag whose inner type is an 802.3 length. */
	hl = vlan_frame(b, one, 1, 46);
	assert_int_equal(fp_eth_parse(b, hl, &e), -EPROTONOSUPPORT);
}

static void eth_8023_length(void **state)
{
	(void)state;
	uint8_t b[60] = {0};
	struct fp_eth e;
	/* An 802.3 frame with an LLC header for STP (DSAP/SSAP 0x42): length 0x0026. */
	size_t hl = vlan_frame(b, NULL, 0, 0x0026);
	b[14] = 0x42;
	b[15] = 0x42;
	b[16] = 0x03;
	assert_int_equal(fp_eth_parse(b, sizeof(b), &e), -EPROTONOSUPPORT);
	fp_put_be16(b + 12, 1500);
	assert_int_equal(fp_eth_parse(b, sizeof(b), &e), -EPROTONOSUPPORT);
	fp_put_be16(b + 12, 0x05ff);
	assert_int_equal(fp_eth_parse(b, sizeof(b), &e), -EPROTONOSUPPORT);
	/* 0x0600 is the first EtherType (IEEE 802.3 §3.2.6); an unknown one is the caller's. */
	fp_put_be16(b + 12, 0x0600);
	assert_int_equal(fp_eth_parse(b, sizeof(b), &e), 0);
	assert_int_equal(e.type, 0x0600);
	assert_int_equal(e.hdr_len, hl);
	fp_put_be16(b + 12, 0x86dd);
	assert_int_equal(fp_eth_parse(b, sizeof(b), &e), 0);
	assert_int_equal(e.type, 0x86dd);
}

/* ---- ARP ---- */

static void arp_linux(void **state)
{
	(void)state;
	struct fp_arp a;
	uint8_t *b = dup_exact(fx_arp_request + 14, 28);
	assert_int_equal(fp_arp_parse(b, 28, &a), 0);
	free(b);
	assert_int_equal(a.op, FP_ARP_OP_REQUEST);
	assert_true(fp_eth_addr_eq(&a.sha, &mac_a));
	assert_int_equal(a.spa, HOST_A);
	const struct fp_eth_addr zero = {{0}};
	assert_true(fp_eth_addr_eq(&a.tha, &zero));
	assert_int_equal(a.tpa, HOST_B);

	assert_int_equal(fp_arp_parse(fx_arp_reply + 14, 28, &a), 0);
	assert_int_equal(a.op, FP_ARP_OP_REPLY);
	assert_true(fp_eth_addr_eq(&a.sha, &mac_b));
	assert_int_equal(a.spa, HOST_B);
	assert_true(fp_eth_addr_eq(&a.tha, &mac_a));
	assert_int_equal(a.tpa, HOST_A);

	uint8_t out[28];
	assert_int_equal(fp_arp_emit(out, 27, &a), 0);
	assert_int_equal(fp_arp_emit(out, 28, &a), 28);
	assert_memory_equal(out, fx_arp_reply + 14, 28);
}

static void arp_padding_and_truncation(void **state)
{
	(void)state;
	struct fp_arp a;
	/* On a real wire the request is padded to 60 bytes: 18 bytes of padding after it. */
	uint8_t pad[46] = {0};
	memcpy(pad, fx_arp_request + 14, 28);
	memset(pad + 28, 0xee, sizeof(pad) - 28);
	assert_int_equal(fp_arp_parse(pad, sizeof(pad), &a), 0);
	assert_int_equal(a.tpa, HOST_B);
	for (size_t n = 0; n < 28; n++) {
		uint8_t *b = dup_exact(fx_arp_request + 14, n);
		assert_int_equal(fp_arp_parse(b, n, &a), -EINVAL);
		free(b);
	}
}

static void arp_unsupported(void **state)
{
	(void)state;
	struct fp_arp a;
	uint8_t b[28];
	memcpy(b, fx_arp_request + 14, 28);
	b[1] = 6;	/* IEEE 802 hardware type */
	assert_int_equal(fp_arp_parse(b, 28, &a), -EPROTONOSUPPORT);
	memcpy(b, fx_arp_request + 14, 28);
	fp_put_be16(b + 2, 0x86dd);
	assert_int_equal(fp_arp_parse(b, 28, &a), -EPROTONOSUPPORT);
	memcpy(b, fx_arp_request + 14, 28);
	b[4] = 8;	/* Ethernet with 8-byte addresses is malformed */
	assert_int_equal(fp_arp_parse(b, 28, &a), -EINVAL);
	memcpy(b, fx_arp_request + 14, 28);
	b[5] = 16;
	assert_int_equal(fp_arp_parse(b, 28, &a), -EINVAL);
	for (uint16_t op = 0; op < 12; op++) {
		memcpy(b, fx_arp_request + 14, 28);
		fp_put_be16(b + 6, op);
		int want = op == 1 || op == 2 ? 0 : -EPROTONOSUPPORT;	/* RARP, InARP: no */
		assert_int_equal(fp_arp_parse(b, 28, &a), want);
	}
}

/* ---- IPv4 ---- */

static void ipv4_linux(void **state)
{
	(void)state;
	struct frame f;
	must_parse_ip_frame(fx_icmp_echo_request, sizeof(fx_icmp_echo_request), &f);
	assert_int_equal(f.ip.src, HOST_A);
	assert_int_equal(f.ip.dst, HOST_B);
	assert_int_equal(f.ip.total_len, 84);
	assert_int_equal(f.ip.id, 32420);
	assert_int_equal(f.ip.frag, FP_IPV4_FLAG_DF);
	assert_false(fp_ipv4_is_fragment(&f.ip));
	assert_int_equal(f.ip.tos, 0);
	assert_int_equal(f.ip.ttl, 64);
	assert_int_equal(f.ip.proto, FP_IPPROTO_ICMP);
	assert_int_equal(fp_ipv4_payload_len(&f.ip), 64);
	assert_int_equal(fp_get_be16(f.l3 + 10), 0xa73c);	/* as captured */

	must_parse_ip_frame(fx_icmp_port_unreach, sizeof(fx_icmp_port_unreach), &f);
	assert_int_equal(f.ip.src, HOST_B);
	assert_int_equal(f.ip.dst, HOST_A);
	assert_int_equal(f.ip.tos, 0xc0);	/* Linux sends ICMP errors as CS6 */
	assert_int_equal(f.ip.id, 50591);
	assert_int_equal(f.ip.frag, 0);
	assert_int_equal(f.ip.total_len, 59);

	must_parse_ip_frame(fx_tcp_synack, sizeof(fx_tcp_synack), &f);
	assert_int_equal(f.ip.id, 0);
	assert_int_equal(f.ip.proto, FP_IPPROTO_TCP);
	assert_int_equal(fp_ipv4_payload_len(&f.ip), 40);
}

static void ipv4_emit(void **state)
{
	(void)state;
	uint8_t out[20];
	struct fp_ipv4 ip, back;
	assert_int_equal(fp_ipv4_parse(fx_udp_hi + 14, sizeof(fx_udp_hi) - 14, true, &ip), 0);
	ip.hdr_len = 99;	/* ignored by emit */
	ip.total_len = 1;
	assert_int_equal(fp_ipv4_emit(out, 19, &ip, 11), 0);
	assert_int_equal(fp_ipv4_emit(out, 20, &ip, 65535 - 20 + 1), 0);
	assert_int_equal(fp_ipv4_emit(out, 20, &ip, 11), 20);
	assert_memory_equal(out, fx_udp_hi + 14, 20);
	assert_int_equal(fp_ipv4_parse(out, 20, true, &back), -EINVAL);	/* payload not there */

	uint8_t big[65535];
	memset(big, 0, sizeof(big));
	assert_int_equal(fp_ipv4_emit(big, sizeof(big), &ip, 65535 - 20), 20);
	assert_int_equal(fp_ipv4_parse(big, sizeof(big), true, &back), 0);
	assert_int_equal(back.total_len, 65535);
	assert_int_equal(back.src, ip.src);
	assert_int_equal(back.dst, ip.dst);
	assert_int_equal(back.id, ip.id);
	assert_int_equal(back.frag, ip.frag);
	assert_int_equal(back.ttl, ip.ttl);
	assert_int_equal(back.tos, ip.tos);
	assert_int_equal(back.proto, ip.proto);
}

static void ipv4_truncated(void **state)
{
	(void)state;
	struct fp_ipv4 ip;
	const uint8_t *d = fx_icmp_echo_request + 14;
	size_t len = sizeof(fx_icmp_echo_request) - 14;
	for (size_t n = 0; n < len; n++) {
		uint8_t *b = dup_exact(d, n);
		assert_int_equal(fp_ipv4_parse(b, n, false, &ip), -EINVAL);
		assert_int_equal(fp_ipv4_parse(b, n, true, &ip), -EINVAL);
		free(b);
	}
}

/* Set the header checksum of the IPv4 header at @b so only the length checks can fail. */
static void ip_fix_csum(uint8_t *b)
{
	size_t hl = (size_t)(b[0] & 0xf) * 4;
	if (hl < 20)
		hl = 20;
	b[10] = b[11] = 0;
	uint16_t c = fp_csum(b, hl);
	memcpy(b + 10, &c, 2);
}

static void ipv4_bad_lengths(void **state)
{
	(void)state;
	struct fp_ipv4 ip;
	uint8_t b[128];
	const uint8_t *d = fx_udp_hi + 14;
	const size_t len = sizeof(fx_udp_hi) - 14;	/* 31 */

	for (uint8_t ihl = 0; ihl < 5; ihl++) {
		memcpy(b, d, len);
		b[0] = (uint8_t)(0x40 | ihl);
		ip_fix_csum(b);
		assert_int_equal(fp_ipv4_parse(b, len, false, &ip), -EINVAL);
	}
	/* IHL 15 (60 bytes) in a 31-byte datagram: past total_len and past the buffer. */
	memcpy(b, d, len);
	b[0] = 0x4f;
	assert_int_equal(fp_ipv4_parse(b, len, false, &ip), -EINVAL);
	/* IHL 7 (28 bytes) fits the buffer with total_len 31, but not total_len 24. */
	memcpy(b, d, len);
	b[0] = 0x47;
	fp_put_be16(b + 2, 24);
	assert_int_equal(fp_ipv4_parse(b, len, false, &ip), -EINVAL);
	fp_put_be16(b + 2, 28);
	ip_fix_csum(b);
	assert_int_equal(fp_ipv4_parse(b, len, true, &ip), 0);
	assert_int_equal(fp_ipv4_payload_len(&ip), 0);
	/* total_len below 20, zero (what TSO leaves), and one past the buffer. */
	for (uint16_t tl = 0; tl < 20; tl++) {
		memcpy(b, d, len);
		fp_put_be16(b + 2, tl);
		assert_int_equal(fp_ipv4_parse(b, len, false, &ip), -EINVAL);
	}
	memcpy(b, d, len);
	fp_put_be16(b + 2, (uint16_t)(len + 1));
	ip_fix_csum(b);
	uint8_t *x = dup_exact(b, len);
	assert_int_equal(fp_ipv4_parse(x, len, true, &ip), -EINVAL);
	free(x);
}

static void ipv4_version(void **state)
{
	(void)state;
	struct fp_ipv4 ip;
	uint8_t b[64];
	const size_t len = sizeof(fx_udp_hi) - 14;
	for (unsigned v = 0; v < 16; v++) {
		memcpy(b, fx_udp_hi + 14, len);
		b[0] = (uint8_t)(v << 4 | 5);
		ip_fix_csum(b);
		assert_int_equal(fp_ipv4_parse(b, len, true, &ip), v == 4 ? 0 : -EPROTONOSUPPORT);
	}
}

static void ipv4_bad_csum(void **state)
{
	(void)state;
	struct fp_ipv4 ip;
	uint8_t b[64];
	const size_t len = sizeof(fx_udp_hi) - 14;
	/* Flip each header bit in turn: every single-bit error is caught (RFC 1071 §1). */
	for (size_t bit = 0; bit < 20 * 8; bit++) {
		memcpy(b, fx_udp_hi + 14, len);
		b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int rc = fp_ipv4_parse(b, len, true, &ip);
		if (bit < 8 || (bit >= 16 && bit < 32))	/* version/IHL, total_len */
			assert_true(rc == -EBADMSG || rc == -EINVAL || rc == -EPROTONOSUPPORT);
		else
			assert_int_equal(rc, -EBADMSG);
	}
	memcpy(b, fx_udp_hi + 14, len);
	b[8] = 63;	/* a router decremented TTL without updating the checksum */
	assert_int_equal(fp_ipv4_parse(b, len, true, &ip), -EBADMSG);
	assert_int_equal(fp_ipv4_parse(b, len, false, &ip), 0);
	assert_int_equal(ip.ttl, 63);
}

static void ipv4_padding_options_fragments(void **state)
{
	(void)state;
	struct fp_ipv4 ip;
	uint8_t b[64];
	/* 45-byte UDP frame padded to the 60-byte Ethernet minimum: padding is not payload. */
	memset(b, 0, sizeof(b));
	memcpy(b, fx_udp_hi, sizeof(fx_udp_hi));
	assert_int_equal(fp_ipv4_parse(b + 14, FP_ETH_MIN_FRAME - 14, true, &ip), 0);
	assert_int_equal(ip.total_len, 31);
	assert_int_equal(fp_ipv4_payload_len(&ip), 11);

	/* A header with 4 option bytes (NOP, NOP, NOP, EOL): hdr_len 24, not interpreted. */
	memcpy(b, fx_udp_hi + 14, 20);
	b[0] = 0x46;
	fp_put_be16(b + 2, 24 + 11);
	memcpy(b + 20, "\x01\x01\x01\x00", 4);
	memcpy(b + 24, fx_udp_hi + 34, 11);
	ip_fix_csum(b);
	assert_int_equal(fp_ipv4_parse(b, 35, true, &ip), 0);
	assert_int_equal(ip.hdr_len, 24);
	assert_int_equal(fp_ipv4_payload_len(&ip), 11);

	/* Fragments: MF set, or a non-zero offset; DF alone is not one. */
	memcpy(b, fx_udp_hi + 14, 31);
	fp_put_be16(b + 6, FP_IPV4_FLAG_MF);
	ip_fix_csum(b);
	assert_int_equal(fp_ipv4_parse(b, 31, true, &ip), 0);
	assert_true(fp_ipv4_is_fragment(&ip));
	fp_put_be16(b + 6, 185);	/* offset 185 * 8 = 1480, last fragment */
	ip_fix_csum(b);
	assert_int_equal(fp_ipv4_parse(b, 31, true, &ip), 0);
	assert_true(fp_ipv4_is_fragment(&ip));
	assert_int_equal(ip.frag & FP_IPV4_OFF_MASK, 185);
}

/* ---- ICMP ---- */

static void icmp_linux(void **state)
{
	(void)state;
	struct frame f;
	struct fp_icmp h;
	must_parse_ip_frame(fx_icmp_echo_request, sizeof(fx_icmp_echo_request), &f);
	uint8_t *b = dup_exact(f.l4, f.l4_len);
	assert_int_equal(fp_icmp_parse(b, f.l4_len, &h), 0);
	free(b);
	assert_int_equal(h.type, FP_ICMP_ECHO_REQUEST);
	assert_int_equal(h.code, 0);
	assert_int_equal(fp_icmp_echo_id(&h), 28028);
	assert_int_equal(fp_icmp_echo_seq(&h), 1);

	must_parse_ip_frame(fx_icmp_echo_reply, sizeof(fx_icmp_echo_reply), &f);
	assert_int_equal(fp_icmp_parse(f.l4, f.l4_len, &h), 0);
	assert_int_equal(h.type, FP_ICMP_ECHO_REPLY);
	assert_int_equal(fp_icmp_echo_id(&h), 28028);
	assert_int_equal(fp_icmp_echo_seq(&h), 1);
	/* The reply carries the request's data unchanged (RFC 792, Echo). */
	assert_memory_equal(f.l4 + 8, fx_icmp_echo_request + 42, 56);
}

static void icmp_port_unreach(void **state)
{
	(void)state;
	struct frame f;
	struct fp_icmp h;
	struct fp_ipv4 inner;
	struct fp_udp u;
	must_parse_ip_frame(fx_icmp_port_unreach, sizeof(fx_icmp_port_unreach), &f);
	assert_int_equal(f.l4_len, 39);	/* odd: the checksum's last byte is padded */
	assert_int_equal(fp_icmp_parse(f.l4, f.l4_len, &h), 0);
	assert_int_equal(h.type, FP_ICMP_DEST_UNREACH);
	assert_int_equal(h.code, FP_ICMP_CODE_PORT_UNREACH);
	assert_int_equal(h.rest, 0);
	/* The quoted datagram is the whole UDP datagram we sent: it parses as one. */
	assert_int_equal(fp_ipv4_parse(f.l4 + 8, f.l4_len - 8, true, &inner), 0);
	assert_int_equal(inner.src, HOST_A);
	assert_int_equal(inner.dst, HOST_B);
	assert_int_equal(inner.proto, FP_IPPROTO_UDP);
	assert_int_equal(fp_udp_parse(f.l4 + 28, 11, inner.src, inner.dst, &u), 0);
	assert_int_equal(u.dport, 9999);
	assert_memory_equal(f.l4 + 8, fx_udp_hi + 14, 31);
}

static void icmp_errors(void **state)
{
	(void)state;
	struct fp_icmp h;
	uint8_t b[128];
	const uint8_t *d = fx_icmp_echo_request + 34;
	const size_t len = sizeof(fx_icmp_echo_request) - 34;
	/* Truncated: below 8 bytes -EINVAL; a shorter message no longer sums to its checksum. */
	for (size_t n = 0; n < len; n++) {
		uint8_t *t = dup_exact(d, n);
		assert_int_equal(fp_icmp_parse(t, n, &h), n < 8 ? -EINVAL : -EBADMSG);
		free(t);
	}
	for (size_t i = 0; i < len; i++) {
		memcpy(b, d, len);
		b[i] ^= 0x10;
		assert_int_equal(fp_icmp_parse(b, len, &h), -EBADMSG);
	}
	/* All zeros sums to zero, whose complement 0xffff is not the stored 0. */
	memset(b, 0, 8);
	assert_int_equal(fp_icmp_parse(b, 8, &h), -EBADMSG);
}

static void icmp_emit(void **state)
{
	(void)state;
	struct fp_icmp h = { .type = FP_ICMP_DEST_UNREACH, .code = FP_ICMP_CODE_FRAG_NEEDED,
			     .rest = 1400 };
	uint8_t b[8 + 28];
	assert_int_equal(fp_icmp_emit(b, 7, &h), 0);
	memcpy(b + 8, fx_udp_hi + 14, 28);
	assert_int_equal(fp_icmp_emit(b, sizeof(b), &h), 8);
	struct fp_icmp back;
	assert_int_equal(fp_icmp_parse(b, sizeof(b), &back), 0);
	assert_int_equal(back.type, FP_ICMP_DEST_UNREACH);
	assert_int_equal(back.code, FP_ICMP_CODE_FRAG_NEEDED);
	assert_int_equal(back.rest & 0xffff, 1400);
	assert_int_equal(fp_get_be16(b + 6), 1400);
	/* A header-only message: checksum over the 8 bytes alone. */
	h = (struct fp_icmp){ .type = FP_ICMP_ECHO_REPLY, .rest = 0x12340001 };
	assert_int_equal(fp_icmp_emit(b, 8, &h), 8);
	assert_int_equal(fp_icmp_parse(b, 8, &back), 0);
	assert_int_equal(fp_icmp_echo_id(&back), 0x1234);
}

/* ---- UDP ---- */

static void udp_linux(void **state)
{
	(void)state;
	struct frame f;
	struct fp_udp u;
	must_parse_ip_frame(fx_udp_hi, sizeof(fx_udp_hi), &f);
	assert_int_equal(f.ip.id, 28693);
	assert_int_equal(f.ip.frag, FP_IPV4_FLAG_DF);
	assert_int_equal(f.ip.proto, FP_IPPROTO_UDP);
	uint8_t *b = dup_exact(f.l4, f.l4_len);
	assert_int_equal(fp_udp_parse(b, f.l4_len, HOST_A, HOST_B, &u), 0);
	free(b);
	assert_int_equal(u.sport, 40000);
	assert_int_equal(u.dport, 9999);
	assert_int_equal(u.len, 11);
	assert_int_equal(u.csum, 0xb556);
	assert_memory_equal(f.l4 + 8, "hi\n", 3);
	/* The pseudo-header is covered: the same bytes from another address do not verify. */
	assert_int_equal(fp_udp_parse(f.l4, f.l4_len, HOST_A, IP(10, 99, 0, 3), &u), -EBADMSG);
	assert_int_equal(fp_udp_parse(f.l4, f.l4_len, HOST_B, HOST_A, &u), 0);	/* sum is symmetric */
}

static void udp_lengths(void **state)
{
	(void)state;
	struct fp_udp u;
	uint8_t b[64];
	const uint8_t *d = fx_udp_hi + 34;
	for (size_t n = 0; n < 11; n++) {
		uint8_t *t = dup_exact(d, n);
		assert_int_equal(fp_udp_parse(t, n, HOST_A, HOST_B, &u), -EINVAL);
		free(t);
	}
	for (uint16_t ul = 0; ul < 8; ul++) {
		memcpy(b, d, 11);
		fp_put_be16(b + 4, ul);
		assert_int_equal(fp_udp_parse(b, 11, HOST_A, HOST_B, &u), -EINVAL);
	}
	memcpy(b, d, 11);
	fp_put_be16(b + 4, 12);
	assert_int_equal(fp_udp_parse(b, 11, HOST_A, HOST_B, &u), -EINVAL);
	fp_put_be16(b + 4, 0xffff);
	assert_int_equal(fp_udp_parse(b, 11, HOST_A, HOST_B, &u), -EINVAL);

	/* Bytes after the UDP length (IP payload longer than the datagram) are not summed. */
	memcpy(b, d, 11);
	memset(b + 11, 0x77, 5);
	assert_int_equal(fp_udp_parse(b, 16, HOST_A, HOST_B, &u), 0);
	assert_int_equal(u.len, 11);
}

static void udp_csum(void **state)
{
	(void)state;
	struct fp_udp u;
	uint8_t b[16];
	const uint8_t *d = fx_udp_hi + 34;
	for (size_t i = 0; i < 11; i++) {
		if (i == 4 || i == 5)
			continue;	/* the length field fails as a length first */
		memcpy(b, d, 11);
		b[i] ^= 0x01;
		assert_int_equal(fp_udp_parse(b, 11, HOST_A, HOST_B, &u), -EBADMSG);
	}
	/* Zero: the sender sent none (RFC 768); accepted whatever the data. */
	memcpy(b, d, 11);
	b[6] = b[7] = 0;
	b[10] = 'X';
	assert_int_equal(fp_udp_parse(b, 11, HOST_A, HOST_B, &u), 0);
	assert_int_equal(u.csum, 0);
	assert_int_equal(fp_udp_parse(b, 11, 0, 0, &u), 0);
}

static void udp_emit(void **state)
{
	(void)state;
	uint8_t b[16];
	struct fp_udp u;
	memcpy(b + 8, "hi\n", 3);
	assert_int_equal(fp_udp_emit(b, 7, HOST_A, HOST_B, 40000, 9999), 0);
	assert_int_equal(fp_udp_emit(b, 11, HOST_A, HOST_B, 40000, 9999), 8);
	assert_memory_equal(b, fx_udp_hi + 34, 11);
	assert_int_equal(fp_udp_parse(b, 11, HOST_A, HOST_B, &u), 0);
	assert_int_equal(fp_udp_emit(b, 65536, HOST_A, HOST_B, 1, 2), 0);
	/* An empty datagram. */
	assert_int_equal(fp_udp_emit(b, 8, HOST_A, HOST_B, 53, 53), 8);
	assert_int_equal(fp_udp_parse(b, 8, HOST_A, HOST_B, &u), 0);
	assert_int_equal(u.len, 8);
	assert_int_not_equal(u.csum, 0);
}

/*
 * RFC 768: a checksum that computes to zero is sent as all ones. Choose the last payload
 * word so the whole sum (pseudo-header, header with checksum 0, payload) is 0xffff, whose
 * complement is 0.
 */
static void udp_emit_zero_csum(void **state)
{
	(void)state;
	uint8_t b[12] = {0};
	struct fp_udp u;
	const uint16_t sport = 5000, dport = 6000;
	fp_put_be16(b, sport);
	fp_put_be16(b + 2, dport);
	fp_put_be16(b + 4, sizeof(b));
	memcpy(b + 8, "ab", 2);
	uint32_t sum = fp_csum_pseudo_ipv4(htonl(HOST_A), htonl(HOST_B), FP_IPPROTO_UDP, sizeof(b));
	sum = fp_csum_partial(b, sizeof(b), sum);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	uint16_t fill = (uint16_t)~sum;
	memcpy(b + 10, &fill, 2);
	/* Check the construction: the computed checksum really is 0. */
	uint32_t check = fp_csum_pseudo_ipv4(htonl(HOST_A), htonl(HOST_B), FP_IPPROTO_UDP, sizeof(b));
	assert_int_equal(fp_csum_fold(fp_csum_partial(b, sizeof(b), check)), 0);

	memset(b, 0, 8);
	assert_int_equal(fp_udp_emit(b, sizeof(b), HOST_A, HOST_B, sport, dport), 8);
	assert_int_equal(fp_get_be16(b + 6), 0xffff);
	assert_int_equal(fp_udp_parse(b, sizeof(b), HOST_A, HOST_B, &u), 0);
	assert_int_equal(u.csum, 0xffff);
	/* The other one's complement zero would have meant "no checksum" and skipped verifying. */
	b[6] = b[7] = 0;
	assert_int_equal(fp_udp_parse(b, sizeof(b), HOST_A, HOST_B, &u), 0);
	assert_int_equal(u.csum, 0);
}

/* ---- TCP ---- */

struct tcp_expect {
	const uint8_t *fx;
	size_t len;
	uint32_t src, dst;
	uint16_t sport, dport;
	uint32_t seq, ack;
	uint8_t flags, hdr_len;
	uint16_t wnd, csum, payload;
	uint32_t ts_val, ts_ecr;
	bool syn_opts;  /* MSS 1460, SACK-permitted, window scale 10 */
};

#define CLI_ISS 1273202786u
#define SRV_ISS 1735204244u
#define TSC 1453740167u   /* client's timestamp clock at the SYN */
#define TSS 1126807570u   /* server's at the SYN-ACK */

static const struct tcp_expect tcp_expect[] = {
	{ fx_tcp_syn, sizeof(fx_tcp_syn), HOST_A, HOST_B, 40001, 8080, CLI_ISS, 0,
	  FP_TCP_SYN, 40, 64240, 0x00ff, 0, TSC, 0, true },
	{ fx_tcp_synack, sizeof(fx_tcp_synack), HOST_B, HOST_A, 8080, 40001, SRV_ISS, CLI_ISS + 1,
	  FP_TCP_SYN | FP_TCP_ACK, 40, 65160, 0x7d18, 0, TSS, TSC, true },
	{ fx_tcp_ack, sizeof(fx_tcp_ack), HOST_A, HOST_B, 40001, 8080, CLI_ISS + 1, SRV_ISS + 1,
	  FP_TCP_ACK, 32, 63, 0xaa31, 0, TSC, TSS, false },
	{ fx_tcp_data, sizeof(fx_tcp_data), HOST_A, HOST_B, 40001, 8080, CLI_ISS + 1, SRV_ISS + 1,
	  FP_TCP_PSH | FP_TCP_ACK, 32, 63, 0x7d0d, 17, TSC, TSS, false },
	{ fx_tcp_data_ack, sizeof(fx_tcp_data_ack), HOST_B, HOST_A, 8080, 40001, SRV_ISS + 1,
	  CLI_ISS + 18, FP_TCP_ACK, 32, 64, 0xaa1f, 0, TSS, TSC, false },
	{ fx_tcp_fin, sizeof(fx_tcp_fin), HOST_A, HOST_B, 40001, 8080, CLI_ISS + 18, SRV_ISS + 1,
	  FP_TCP_FIN | FP_TCP_ACK, 32, 63, 0xa957, 0, TSC + 200, TSS, false },
	{ fx_tcp_fin_ack, sizeof(fx_tcp_fin_ack), HOST_B, HOST_A, 8080, 40001, SRV_ISS + 1,
	  CLI_ISS + 19, FP_TCP_FIN | FP_TCP_ACK, 32, 64, 0xa88c, 0, TSS + 201, TSC + 200, false },
	{ fx_tcp_last_ack, sizeof(fx_tcp_last_ack), HOST_A, HOST_B, 40001, 8080, CLI_ISS + 19,
	  SRV_ISS + 2, FP_TCP_ACK, 32, 63, 0xa88c, 0, TSC + 201, TSS + 201, false },
};

static void tcp_linux(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(tcp_expect) / sizeof(tcp_expect[0]); i++) {
		const struct tcp_expect *x = &tcp_expect[i];
		struct frame f;
		struct fp_tcp t;
		must_parse_ip_frame(x->fx, x->len, &f);
		assert_int_equal(f.ip.src, x->src);
		assert_int_equal(f.ip.dst, x->dst);
		assert_int_equal(f.ip.proto, FP_IPPROTO_TCP);
		assert_int_equal(f.ip.frag, FP_IPV4_FLAG_DF);
		uint8_t *b = dup_exact(f.l4, f.l4_len);
		assert_int_equal(fp_tcp_parse(b, f.l4_len, x->src, x->dst, true, &t), 0);
		free(b);
		assert_int_equal(t.sport, x->sport);
		assert_int_equal(t.dport, x->dport);
		assert_int_equal(t.seq, x->seq);
		assert_int_equal(t.ack, x->ack);
		assert_int_equal(t.flags, x->flags);
		assert_int_equal(t.hdr_len, x->hdr_len);
		assert_int_equal(t.wnd, x->wnd);
		assert_int_equal(t.urg, 0);
		assert_int_equal(fp_get_be16(f.l4 + 16), x->csum);
		assert_int_equal(f.l4_len - t.hdr_len, x->payload);
		assert_true(t.opt.has_ts);
		assert_int_equal(t.opt.ts_val, x->ts_val);
		assert_int_equal(t.opt.ts_ecr, x->ts_ecr);
		assert_int_equal(t.opt.has_mss, x->syn_opts);
		assert_int_equal(t.opt.sack_ok, x->syn_opts);
		assert_int_equal(t.opt.has_wscale, x->syn_opts);
		if (x->syn_opts) {
			assert_int_equal(t.opt.mss, 1460);
			assert_int_equal(t.opt.wscale, 10);
		}
		assert_int_equal(t.opt.n_sack, 0);
		assert_int_equal(fp_tcp_opts_len(&t.opt), t.hdr_len - 20);
		/* Either direction's addresses verify: the pseudo-header sum is symmetric. */
		assert_int_equal(fp_tcp_parse(f.l4, f.l4_len, x->dst, x->src, true, &t), 0);
		assert_int_equal(fp_tcp_parse(f.l4, f.l4_len, x->src, x->src, true, &t), -EBADMSG);
	}
	struct frame f;
	must_parse_ip_frame(fx_tcp_data, sizeof(fx_tcp_data), &f);
	assert_memory_equal(f.l4 + 32, "hello, flowplane\n", 17);
}

static void tcp_truncated_and_doff(void **state)
{
	(void)state;
	struct fp_tcp t;
	uint8_t b[128];
	const uint8_t *d = fx_tcp_data + 34;
	const size_t len = sizeof(fx_tcp_data) - 34;	/* 32 + 17 */
	memset(b, 0, sizeof(b));
	for (size_t n = 0; n < len; n++) {
		uint8_t *x = dup_exact(d, n);
		assert_int_equal(fp_tcp_parse(x, n, HOST_A, HOST_B, true, &t),
				 n < 32 ? -EINVAL : -EBADMSG);
		/* Without the checksum a cut in the payload is just a shorter segment. */
		assert_int_equal(fp_tcp_parse(x, n, HOST_A, HOST_B, false, &t), n < 32 ? -EINVAL : 0);
		free(x);
	}
	for (uint8_t doff = 0; doff < 16; doff++) {
		memcpy(b, d, len);
		b[12] = (uint8_t)(doff << 4);
		int rc = fp_tcp_parse(b, 32, HOST_A, HOST_B, false, &t);
		if (doff < 5 || doff > 8)	/* below 5, or past the 32 bytes */
			assert_int_equal(rc, -EINVAL);
		else if (doff == 5)	/* options now read as payload */
			assert_int_equal(rc, 0);
	}
	memcpy(b, d, len);
	b[12] = 0xf0;
	uint8_t *x = dup_exact(b, 59);
	assert_int_equal(fp_tcp_parse(x, 59, HOST_A, HOST_B, false, &t), -EINVAL);
	free(x);
	/* The reserved bits are ignored. */
	memcpy(b, d, len);
	b[12] |= 0x0f;
	assert_int_equal(fp_tcp_parse(b, len, HOST_A, HOST_B, false, &t), 0);
	assert_int_equal(t.hdr_len, 32);
}

static void tcp_bad_csum(void **state)
{
	(void)state;
	struct fp_tcp t;
	uint8_t b[128];
	const uint8_t *d = fx_tcp_data + 34;
	const size_t len = sizeof(fx_tcp_data) - 34;
	for (size_t i = 0; i < len; i++) {
		if (i == 12)
			continue;	/* the data offset fails as a length first */
		memcpy(b, d, len);
		b[i] ^= 0x80;
		assert_int_equal(fp_tcp_parse(b, len, HOST_A, HOST_B, true, &t), -EBADMSG);
		if (i < 20 || i >= 32)	/* a flipped option byte may break the list */
			assert_int_equal(fp_tcp_parse(b, len, HOST_A, HOST_B, false, &t), 0);
	}
}

static void assert_opts_equal(const struct fp_tcp_opts *a, const struct fp_tcp_opts *b)
{
	assert_int_equal(a->has_mss, b->has_mss);
	assert_int_equal(a->has_wscale, b->has_wscale);
	assert_int_equal(a->sack_ok, b->sack_ok);
	assert_int_equal(a->has_ts, b->has_ts);
	assert_int_equal(a->mss, b->mss);
	assert_int_equal(a->wscale, b->wscale);
	assert_int_equal(a->ts_val, b->ts_val);
	assert_int_equal(a->ts_ecr, b->ts_ecr);
	assert_int_equal(a->n_sack, b->n_sack);
	for (size_t i = 0; i < a->n_sack && i < FP_TCP_MAX_SACK; i++) {
		assert_int_equal(a->sack[i].left, b->sack[i].left);
		assert_int_equal(a->sack[i].right, b->sack[i].right);
	}
}

/* A 20-byte header with options @o[0..olen) (olen a multiple of 4) appended at b. */
static size_t tcp_with_opts(uint8_t *b, const void *o, size_t olen)
{
	memcpy(b, fx_tcp_ack + 34, 20);
	b[16] = b[17] = 0;	/* as fp_tcp_emit leaves it */
	b[12] = (uint8_t)((20 + olen) / 4 << 4);
	memcpy(b + 20, o, olen);
	return 20 + olen;
}

/* Parse @b[0..n) from an exactly sized copy, without the checksum: a header that ends at
 * the buffer's end, so a read past the options is a read past the allocation. */
static int tcp_parse_exact(const uint8_t *b, size_t n, struct fp_tcp *t)
{
	uint8_t *x = dup_exact(b, n);
	int rc = fp_tcp_parse(x, n, 0, 0, false, t);
	free(x);
	return rc;
}

static void tcp_opts_unknown_eol_nop(void **state)
{
	(void)state;
	struct fp_tcp t;
	uint8_t b[64];
	/* Unknown kinds 30 (MPTCP, len 4) and 253 (experimental, len 6) around an MSS. */
	static const uint8_t o1[] = { 30, 4, 0xde, 0xad, 2, 4, 0x05, 0xb4,
				      253, 6, 1, 2, 3, 4, 1, 1, 3, 3, 7, 0 };
	size_t n = tcp_with_opts(b, o1, sizeof(o1));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_true(t.opt.has_mss);
	assert_int_equal(t.opt.mss, 1460);
	assert_true(t.opt.has_wscale);
	assert_int_equal(t.opt.wscale, 7);
	assert_false(t.opt.has_ts);
	assert_false(t.opt.sack_ok);
	/* An unknown option of length 2 (no data) and one filling the rest of the header. */
	static const uint8_t o2[] = { 99, 2, 4, 2, 200, 4, 0, 0 };
	n = tcp_with_opts(b, o2, sizeof(o2));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_true(t.opt.sack_ok);
	/* EOL ends the list: what follows is padding, however malformed. */
	static const uint8_t o3[] = { 4, 2, 0, 2, 9, 9, 9, 9 };
	n = tcp_with_opts(b, o3, sizeof(o3));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_true(t.opt.sack_ok);
	assert_false(t.opt.has_mss);
	/* NOPs anywhere, and an all-NOP header. */
	static const uint8_t o4[] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	n = tcp_with_opts(b, o4, sizeof(o4));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_int_equal(fp_tcp_opts_len(&t.opt), 0);
	/* Window scale above 14 is reported as received; the stack clamps it. */
	static const uint8_t o5[] = { 1, 3, 3, 15 };
	n = tcp_with_opts(b, o5, sizeof(o5));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_int_equal(t.opt.wscale, 15);
}

/* NOP, NOP, TS (the layout parsed at once) and its near misses, which the general loop
 * reads: the same answers either way. */
static void tcp_opts_ts_layout(void **state)
{
	(void)state;
	struct fp_tcp t;
	uint8_t b[64];
	static const uint8_t ts[] = { 1, 1, 8, 10, 0, 0, 0, 7, 0x80, 0, 0, 9 };
	size_t n = tcp_with_opts(b, ts, sizeof(ts));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_true(t.opt.has_ts && !t.opt.has_mss && !t.opt.sack_ok && !t.opt.n_sack);
	assert_int_equal(t.opt.ts_val, 7);
	assert_int_equal(t.opt.ts_ecr, 0x80000009u);
	/* a TS length of 9 in the same place: unreadable, as the loop says */
	static const uint8_t bad[] = { 1, 1, 8, 9, 0, 0, 0, 7, 0x80, 0, 0, 9 };
	n = tcp_with_opts(b, bad, sizeof(bad));
	assert_int_equal(tcp_parse_exact(b, n, &t), -EINVAL);
	/* the layout followed by more options: the loop reads both */
	static const uint8_t more[] = { 1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9, 2, 4, 0x05, 0xb4 };
	n = tcp_with_opts(b, more, sizeof(more));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_true(t.opt.has_ts && t.opt.has_mss);
	assert_int_equal(t.opt.ts_val, 7);
	assert_int_equal(t.opt.mss, 1460);
	/* TS first and NOPs after: the loop */
	static const uint8_t swapped[] = { 8, 10, 0, 0, 0, 7, 0, 0, 0, 9, 1, 1 };
	n = tcp_with_opts(b, swapped, sizeof(swapped));
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_true(t.opt.has_ts);
	assert_int_equal(t.opt.ts_ecr, 9);
}

static void tcp_opts_bad_len(void **state)
{
	(void)state;
	struct fp_tcp t;
	uint8_t b[64];
	/* Each known option with each wrong length in 2..10, in an 12-byte option space. */
	static const uint8_t right[] = { [2] = 4, [3] = 3, [4] = 2, [8] = 10 };
	static const uint8_t kinds[] = { 2, 3, 4, 8 };
	for (size_t k = 0; k < sizeof(kinds); k++) {
		for (uint8_t l = 2; l <= 12; l++) {
			uint8_t o[12] = {0};
			o[0] = kinds[k];
			o[1] = l;
			size_t n = tcp_with_opts(b, o, sizeof(o));
			assert_int_equal(tcp_parse_exact(b, n, &t),
					 l == right[kinds[k]] ? 0 : -EINVAL);
		}
	}
	/* Length 0 and 1 (would never advance), for known and unknown kinds. */
	static const uint8_t z[][4] = { { 2, 0, 0, 0 }, { 2, 1, 0, 0 }, { 77, 0, 0, 0 },
					{ 77, 1, 0, 0 }, { 5, 0, 0, 0 } };
	for (size_t i = 0; i < sizeof(z) / sizeof(z[0]); i++) {
		size_t n = tcp_with_opts(b, z[i], 4);
		assert_int_equal(tcp_parse_exact(b, n, &t), -EINVAL);
	}
	/* Running past the header: a timestamp cut by the data offset, though payload follows. */
	static const uint8_t past[] = { 1, 1, 8, 10, 0, 0, 0, 1 };
	size_t n = tcp_with_opts(b, past, sizeof(past));
	memset(b + n, 0, 4);	/* the rest of the TS lies here, in the payload */
	assert_int_equal(fp_tcp_parse(b, n + 4, 0, 0, false, &t), -EINVAL);
	static const uint8_t past_unknown[] = { 1, 1, 66, 3 };
	n = tcp_with_opts(b, past_unknown, sizeof(past_unknown));
	assert_int_equal(tcp_parse_exact(b, n, &t), -EINVAL);
	/* A kind in the last option byte with no room for its length byte. */
	static const uint8_t nolen[] = { 1, 1, 1, 2 };
	n = tcp_with_opts(b, nolen, sizeof(nolen));
	assert_int_equal(tcp_parse_exact(b, n, &t), -EINVAL);
	static const uint8_t nolen_unknown[] = { 1, 1, 1, 200 };
	n = tcp_with_opts(b, nolen_unknown, sizeof(nolen_unknown));
	assert_int_equal(tcp_parse_exact(b, n, &t), -EINVAL);
}

static void tcp_sack(void **state)
{
	(void)state;
	struct fp_tcp t, back;
	uint8_t b[64], out[64];
	/* Linux's ACK with timestamps and SACK blocks: NOP,NOP,TS then NOP,NOP,SACK (RFC 2018 §3). */
	for (uint8_t nb = 1; nb <= 3; nb++) {
		uint8_t o[40] = { 1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6, 1, 1, 5, (uint8_t)(2 + 8 * nb) };
		for (uint8_t i = 0; i < nb; i++) {
			fp_put_be32(o + 16 + 8 * i, 1000u * (i + 1));
			fp_put_be32(o + 20 + 8 * i, 1000u * (i + 1) + 500);
		}
		size_t olen = 16 + 8 * (size_t)nb;
		size_t n = tcp_with_opts(b, o, olen);
		assert_int_equal(tcp_parse_exact(b, n, &t), 0);
		assert_int_equal(t.opt.n_sack, nb);
		for (uint8_t i = 0; i < nb; i++) {
			assert_int_equal(t.opt.sack[i].left, 1000u * (i + 1));
			assert_int_equal(t.opt.sack[i].right, 1000u * (i + 1) + 500);
		}
		assert_int_equal(t.opt.ts_val, 5);
		assert_int_equal(t.opt.ts_ecr, 6);
		assert_int_equal(fp_tcp_opts_len(&t.opt), olen);
		assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), n);
		assert_memory_equal(out, b, n);
	}
	/* Four blocks fill the option space without timestamps. */
	uint8_t o4[36] = { 1, 1, 5, 34 };
	for (uint8_t i = 0; i < 4; i++) {
		fp_put_be32(o4 + 4 + 8 * i, 0xfffffff0u + i);	/* wrapping sequence numbers */
		fp_put_be32(o4 + 8 + 8 * i, 0x10u + i);
	}
	size_t n = tcp_with_opts(b, o4, sizeof(o4));
	assert_int_equal(n, 56);
	assert_int_equal(tcp_parse_exact(b, n, &t), 0);
	assert_int_equal(t.opt.n_sack, 4);
	assert_int_equal(t.opt.sack[3].left, 0xfffffff3u);
	assert_int_equal(t.opt.sack[3].right, 0x13u);
	assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), 56);
	assert_memory_equal(out, b, 56);
	assert_int_equal(fp_tcp_emit(out, 55, &t), 0);
	assert_int_equal(fp_tcp_parse(out, 56, 0, 0, false, &back), 0);
	assert_opts_equal(&back.opt, &t.opt);
	/* A SACK option longer than four blocks cannot fit in 40 bytes; lengths not 2+8n are bad. */
	static const uint8_t bad_sack_len[] = { 2, 3, 9, 11, 17, 20 };
	for (size_t i = 0; i < sizeof(bad_sack_len); i++) {
		uint8_t o[24] = { 5, bad_sack_len[i] };
		n = tcp_with_opts(b, o, sizeof(o));
		assert_int_equal(tcp_parse_exact(b, n, &t), -EINVAL);
	}
}

static void tcp_emit_opts(void **state)
{
	(void)state;
	struct fp_tcp t = { .sport = 1, .dport = 2, .seq = 3, .ack = 4, .flags = FP_TCP_SYN,
			    .wnd = 5, .urg = 6 };
	uint8_t out[64], want[64];
	struct fp_tcp back;
	assert_int_equal(fp_tcp_opts_len(&t.opt), 0);
	assert_int_equal(fp_tcp_emit(out, 19, &t), 0);
	assert_int_equal(fp_tcp_emit(out, 20, &t), 20);
	assert_int_equal(out[12], 0x50);
	assert_int_equal(fp_get_be16(out + 16), 0);
	assert_int_equal(fp_tcp_parse(out, 20, 0, 0, false, &back), 0);
	assert_int_equal(back.urg, 6);

	/* SACK-permitted without timestamps: NOP,NOP,SACK_OK (what Linux sends with TS off). */
	t.opt.has_mss = 1;
	t.opt.mss = 536;
	t.opt.sack_ok = 1;
	t.opt.has_wscale = 1;
	t.opt.wscale = 0;
	static const uint8_t o1[] = { 2, 4, 2, 24, 1, 1, 4, 2, 1, 3, 3, 0 };
	assert_int_equal(fp_tcp_opts_len(&t.opt), 12);
	size_t n = tcp_with_opts(want, o1, sizeof(o1));
	assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), n);
	assert_memory_equal(out + 20, want + 20, 12);
	assert_int_equal(fp_tcp_parse(out, n, 0, 0, false, &back), 0);
	assert_opts_equal(&back.opt, &t.opt);

	/* Everything at once is 48 bytes: too many, and nothing is written. */
	t.opt.has_ts = 1;
	t.opt.n_sack = 2;
	assert_int_equal(fp_tcp_opts_len(&t.opt), 4 + 12 + 4 + 20);
	assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), 60);
	t.opt.n_sack = 3;
	assert_int_equal(fp_tcp_opts_len(&t.opt), 48);
	memset(out, 0x5a, sizeof(out));
	assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), 0);
	assert_int_equal(out[0], 0x5a);
	/* A corrupt block count must not read past sack[]. */
	t.opt = (struct fp_tcp_opts){ .n_sack = 200 };
	assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), 0);
	t.opt.n_sack = 5;
	assert_int_equal(fp_tcp_emit(out, sizeof(out), &t), 0);
}

/* fp_tcp_set_csum with sums built in odd-sized pieces equals one sum over the segment. */
static void tcp_set_csum_pieces(void **state)
{
	(void)state;
	uint64_t seed = fp_test_seed();
	const uint8_t *d = fx_tcp_data + 34;
	const size_t len = sizeof(fx_tcp_data) - 34;
	uint8_t b[64];
	struct fp_tcp t;
	for (int iter = 0; iter < 200; iter++) {
		memcpy(b, d, len);
		b[16] = b[17] = 0;
		size_t cut1 = (size_t)fp_test_below(&seed, len + 1);
		size_t cut2 = cut1 + (size_t)fp_test_below(&seed, len - cut1 + 1);
		uint32_t sum = fp_csum_partial(b, cut1, 0);
		sum = fp_csum_combine(sum, fp_csum_partial(b + cut1, cut2 - cut1, 0), cut1);
		sum = fp_csum_combine(sum, fp_csum_partial(b + cut2, len - cut2, 0), cut2);
		fp_tcp_set_csum(b, sum, HOST_A, HOST_B, len);
		assert_memory_equal(b, d, len);
	}
	/* A running sum near 2^32 (the caller kept adding without folding) still folds right. */
	memcpy(b, d, len);
	b[16] = b[17] = 0;
	uint32_t sum = fp_csum_partial(b, len, 0);
	sum = (sum & 0xffff) + (sum >> 16);
	sum += 0xffffu * 0xffffu;	/* adds 0 modulo 0xffff */
	fp_tcp_set_csum(b, sum, HOST_A, HOST_B, len);
	assert_int_equal(fp_tcp_parse(b, len, HOST_A, HOST_B, true, &t), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fixtures_reemit),
		cmocka_unit_test(fixtures_truncated),
		cmocka_unit_test(eth_linux),
		cmocka_unit_test(eth_emit),
		cmocka_unit_test(eth_vlan),
		cmocka_unit_test(eth_8023_length),
		cmocka_unit_test(arp_linux),
		cmocka_unit_test(arp_padding_and_truncation),
		cmocka_unit_test(arp_unsupported),
		cmocka_unit_test(ipv4_linux),
		cmocka_unit_test(ipv4_emit),
		cmocka_unit_test(ipv4_truncated),
		cmocka_unit_test(ipv4_bad_lengths),
		cmocka_unit_test(ipv4_version),
		cmocka_unit_test(ipv4_bad_csum),
		cmocka_unit_test(ipv4_padding_options_fragments),
		cmocka_unit_test(icmp_linux),
		cmocka_unit_test(icmp_port_unreach),
		cmocka_unit_test(icmp_errors),
		cmocka_unit_test(icmp_emit),
		cmocka_unit_test(udp_linux),
		cmocka_unit_test(udp_lengths),
		cmocka_unit_test(udp_csum),
		cmocka_unit_test(udp_emit),
		cmocka_unit_test(udp_emit_zero_csum),
		cmocka_unit_test(tcp_linux),
		cmocka_unit_test(tcp_truncated_and_doff),
		cmocka_unit_test(tcp_bad_csum),
		cmocka_unit_test(tcp_opts_unknown_eol_nop),
		cmocka_unit_test(tcp_opts_ts_layout),
		cmocka_unit_test(tcp_opts_bad_len),
		cmocka_unit_test(tcp_sack),
		cmocka_unit_test(tcp_emit_opts),
		cmocka_unit_test(tcp_set_csum_pieces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
