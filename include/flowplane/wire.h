/* wire.h: parse and emit Ethernet, ARP, IPv4, ICMP, UDP and TCP as pure functions over (buf, len). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * smoltcp's split: this module knows packet formats and nothing else. No state, no I/O, no
 * allocation. Every parser takes (buf, len), checks every length it relies on before it reads,
 * and fills a host-order struct; it never reads byte len or beyond. Every emitter writes into
 * (buf, cap) and returns the bytes written, or 0 when cap is too small; emit never reads the
 * buffer except where a checksum covers payload already in place behind the header.
 *
 * Numbers in the structs are host order, IPv4 addresses included (10.0.0.1 is 0x0a000001).
 *
 * Errors, the same in every parser:
 *   -EINVAL   truncated, or a length field that is impossible (shorter than the header,
 *             longer than the buffer), or a field value the format forbids;
 *   -EBADMSG  the checksum does not verify;
 *   -EPROTONOSUPPORT  well formed but something this stack does not speak (an ARP for a
 *             hardware or protocol type other than Ethernet/IPv4, IP version other than 4).
 */

/* ---- Ethernet (IEEE 802.3, Ethernet II framing) ---- */

#define FP_ETH_ALEN        6
#define FP_ETH_HDR_LEN     14
#define FP_ETH_VLAN_LEN    4
#define FP_ETH_TYPE_IPV4   0x0800
#define FP_ETH_TYPE_ARP    0x0806
#define FP_ETH_TYPE_VLAN   0x8100   /* 802.1Q */
#define FP_ETH_TYPE_QINQ   0x88a8   /* 802.1ad */
#define FP_ETH_MIN_FRAME   60       /* without FCS: short frames are padded to this */

struct fp_eth_addr {
	uint8_t b[FP_ETH_ALEN];
};

#define FP_ETH_BROADCAST ((struct fp_eth_addr){{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})

static inline bool fp_eth_addr_eq(const struct fp_eth_addr *a, const struct fp_eth_addr *b)
{
	uint32_t a4, b4;
	uint16_t a2, b2;

	/* two loads a side, not six byte compares (once per received frame) */
	__builtin_memcpy(&a4, a->b, 4);
	__builtin_memcpy(&b4, b->b, 4);
	__builtin_memcpy(&a2, a->b + 4, 2);
	__builtin_memcpy(&b2, b->b + 4, 2);
	return ((a4 ^ b4) | (uint32_t)(a2 ^ b2)) == 0;
}

static inline bool fp_eth_addr_is_multicast(const struct fp_eth_addr *a) { return a->b[0] & 1; }

struct fp_eth {
	struct fp_eth_addr dst, src;
	uint16_t type;      /* EtherType after any VLAN tags */
	uint16_t hdr_len;   /* 14, or 18/22 with one/two VLAN tags: payload starts here */
	uint16_t vlan_tci;  /* outermost tag's TCI; 0 when untagged */
	uint8_t n_vlan;     /* VLAN tags skipped (0..2) */
};

/*
 * Parse an Ethernet II header. Up to two VLAN tags (802.1Q, 802.1ad) are skipped and
 * reported in n_vlan so the caller can decide (the stack drops and counts tagged frames:
 * it has no VLAN configured). A type/length field below 0x0600 (802.3 length, LLC) is
 * -EPROTONOSUPPORT.
 */
int fp_eth_parse(const uint8_t *buf, size_t len, struct fp_eth *out);

/* Write an untagged header (14 bytes) for @type. */
size_t fp_eth_emit(uint8_t *buf, size_t cap, const struct fp_eth_addr *dst,
		   const struct fp_eth_addr *src, uint16_t type);

/* ---- ARP (RFC 826), Ethernet + IPv4 only ---- */

#define FP_ARP_LEN        28
#define FP_ARP_OP_REQUEST 1
#define FP_ARP_OP_REPLY   2

struct fp_arp {
	uint16_t op;
	struct fp_eth_addr sha, tha;  /* sender / target hardware address */
	uint32_t spa, tpa;            /* sender / target protocol address */
};

/* Parse an ARP packet (payload of an Ethernet frame). Trailing padding is allowed. */
int fp_arp_parse(const uint8_t *buf, size_t len, struct fp_arp *out);
size_t fp_arp_emit(uint8_t *buf, size_t cap, const struct fp_arp *a);

/* ---- IPv4 (RFC 791, RFC 1122 §3.2) ---- */

#define FP_IPV4_HDR_LEN    20      /* without options */
#define FP_IPV4_MAX_HDR    60
#define FP_IPPROTO_ICMP    1
#define FP_IPPROTO_TCP     6
#define FP_IPPROTO_UDP     17
#define FP_IPV4_FLAG_DF    0x4000
#define FP_IPV4_FLAG_MF    0x2000
#define FP_IPV4_OFF_MASK   0x1fff

struct fp_ipv4 {
	uint32_t src, dst;
	uint16_t hdr_len;     /* IHL * 4: payload starts here */
	uint16_t total_len;   /* header + payload; bytes after it are link padding */
	uint16_t id;
	uint16_t frag;        /* flags and fragment offset as on the wire (host order) */
	uint8_t tos;
	uint8_t ttl;
	uint8_t proto;
};

/*
 * Parse and check an IPv4 header: version 4, IHL >= 5, IHL*4 <= total_len <= len (bytes
 * beyond total_len are Ethernet padding and are not part of the datagram). With
 * @verify_csum, a header checksum that does not verify is -EBADMSG. Options are not
 * interpreted (hdr_len > 20 says they are there); the options' own lengths are not checked.
 */
int fp_ipv4_parse(const uint8_t *buf, size_t len, bool verify_csum, struct fp_ipv4 *out);

static inline bool fp_ipv4_is_fragment(const struct fp_ipv4 *ip)
{
	return (ip->frag & (FP_IPV4_FLAG_MF | FP_IPV4_OFF_MASK)) != 0;
}

/* Payload bytes of the datagram. */
static inline uint16_t fp_ipv4_payload_len(const struct fp_ipv4 *ip)
{
	return (uint16_t)(ip->total_len - ip->hdr_len);
}

/*
 * Write a 20-byte header (no options) for a datagram of @payload_len bytes, with the header
 * checksum; hdr_len and total_len in @ip are ignored and computed.
 */
size_t fp_ipv4_emit(uint8_t *buf, size_t cap, const struct fp_ipv4 *ip, size_t payload_len);

/* ---- ICMP (RFC 792) ---- */

#define FP_ICMP_HDR_LEN          8
#define FP_ICMP_ECHO_REPLY       0
#define FP_ICMP_DEST_UNREACH     3
#define FP_ICMP_ECHO_REQUEST     8
#define FP_ICMP_TIME_EXCEEDED    11
#define FP_ICMP_CODE_PORT_UNREACH 3
#define FP_ICMP_CODE_FRAG_NEEDED  4

struct fp_icmp {
	uint8_t type, code;
	uint32_t rest;        /* the 4 bytes after the checksum: echo id << 16 | seq, or the
			       * next-hop MTU in its low 16 bits for "fragmentation needed" */
};

static inline uint16_t fp_icmp_echo_id(const struct fp_icmp *h) { return (uint16_t)(h->rest >> 16); }
static inline uint16_t fp_icmp_echo_seq(const struct fp_icmp *h) { return (uint16_t)h->rest; }

/* Parse an ICMP message of @len bytes (header + data) and verify its checksum over all of it. */
int fp_icmp_parse(const uint8_t *buf, size_t len, struct fp_icmp *out);

/*
 * Write the 8-byte header at @buf for a message of @len bytes whose data already sits at
 * buf + 8, and compute the checksum over all @len bytes. Returns 8, or 0 when len < 8.
 */
size_t fp_icmp_emit(uint8_t *buf, size_t len, const struct fp_icmp *h);

/* ---- UDP (RFC 768) ---- */

#define FP_UDP_HDR_LEN 8

struct fp_udp {
	uint16_t sport, dport;
	uint16_t len;          /* header + payload, from the header; <= the buffer's len */
	uint16_t csum;         /* as received; 0 means the sender sent none */
};

/*
 * Parse a UDP datagram of @len bytes (the IP payload) from @src to @dst. The length field
 * must be >= 8 and <= len. A non-zero checksum is verified over the pseudo-header and the
 * first out->len bytes (-EBADMSG); a zero checksum means none was sent (RFC 768).
 */
int fp_udp_parse(const uint8_t *buf, size_t len, uint32_t src, uint32_t dst, struct fp_udp *out);

/*
 * Write the 8-byte header at @buf for a datagram of @len bytes (payload already at buf + 8)
 * and its checksum; a computed checksum of 0 is sent as 0xffff (RFC 768). 0 when len < 8
 * or len > 65535.
 */
size_t fp_udp_emit(uint8_t *buf, size_t len, uint32_t src, uint32_t dst,
		   uint16_t sport, uint16_t dport);

/* ---- TCP (RFC 9293 §3.1, options RFC 9293 §3.2, RFC 7323, RFC 2018) ---- */

#define FP_TCP_HDR_LEN   20
#define FP_TCP_MAX_HDR   60
#define FP_TCP_FIN 0x01
#define FP_TCP_SYN 0x02
#define FP_TCP_RST 0x04
#define FP_TCP_PSH 0x08
#define FP_TCP_ACK 0x10
#define FP_TCP_URG 0x20
#define FP_TCP_ECE 0x40
#define FP_TCP_CWR 0x80

#define FP_TCP_OPT_EOL       0
#define FP_TCP_OPT_NOP       1
#define FP_TCP_OPT_MSS       2
#define FP_TCP_OPT_WSCALE    3
#define FP_TCP_OPT_SACK_OK   4
#define FP_TCP_OPT_SACK      5
#define FP_TCP_OPT_TS        8
#define FP_TCP_MAX_WSCALE    14    /* RFC 7323 §2.3: larger shifts are used as 14 */
#define FP_TCP_MAX_SACK      4     /* blocks that fit in 40 option bytes */

struct fp_tcp_sack_block {
	uint32_t left, right;   /* [left, right) in sequence space */
};

struct fp_tcp_opts {
	uint8_t has_mss : 1, has_wscale : 1, sack_ok : 1, has_ts : 1;
	uint8_t wscale;          /* as received, before clamping to 14 */
	uint8_t n_sack;          /* SACK blocks present (0..4) */
	uint16_t mss;
	uint32_t ts_val, ts_ecr;
	struct fp_tcp_sack_block sack[FP_TCP_MAX_SACK];
};

struct fp_tcp {
	uint16_t sport, dport;
	uint32_t seq, ack;
	uint8_t hdr_len;        /* data offset * 4: payload starts here */
	uint8_t flags;          /* FP_TCP_* */
	uint16_t wnd;           /* as on the wire, before window scaling */
	uint16_t urg;
	struct fp_tcp_opts opt;
};

/*
 * Parse a TCP segment of @len bytes (the IP payload) from @src to @dst: data offset >= 5
 * and <= len; options parsed per RFC 9293 §3.2: EOL ends the list, NOP is skipped, a known
 * option with the wrong length or an option running past the header is -EINVAL, unknown
 * options are skipped by their length. SACK blocks beyond 4 are ignored. With
 * @verify_csum, the checksum over the pseudo-header and all @len bytes must verify.
 */
int fp_tcp_parse(const uint8_t *buf, size_t len, uint32_t src, uint32_t dst, bool verify_csum,
		 struct fp_tcp *out);

/* Option bytes fp_tcp_emit() would write for @o, padded to a multiple of 4. This can exceed
 * 40 (timestamps plus 3 or more SACK blocks): the caller must drop SACK blocks until it
 * fits (Linux sends at most 3 with timestamps), else fp_tcp_emit() returns 0. */
size_t fp_tcp_opts_len(const struct fp_tcp_opts *o);

/*
 * Write the TCP header with options for @t (hdr_len is ignored and computed) at @buf, with
 * a zero checksum. Option layout is the one Linux uses (MSS, SACK-permitted+timestamps,
 * NOP+window scale; NOP,NOP+timestamps; NOP,NOP+SACK blocks) so captures compare byte
 * for byte. Returns the header length, or 0 when cap is short or the options exceed 40 bytes.
 */
size_t fp_tcp_emit(uint8_t *buf, size_t cap, const struct fp_tcp *t);

/*
 * Fill in the checksum of the TCP segment at @seg (header written by fp_tcp_emit) given
 * @sum, the fp_csum_partial() of the whole segment (header with zero checksum + payload)
 * possibly computed piecewise, from @src to @dst, @len bytes long.
 */
void fp_tcp_set_csum(uint8_t *seg, uint32_t sum, uint32_t src, uint32_t dst, size_t len);

/* ---- byte order helpers for the parsers and emitters ---- */

/* One load or store and a byte swap each (GCC merges byte-wise stores only sometimes:
 * written out byte by byte, they cost 4 to 8 instructions apiece in every header). */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FP_BE16(v) __builtin_bswap16(v)
#define FP_BE32(v) __builtin_bswap32(v)
#else
#define FP_BE16(v) (v)
#define FP_BE32(v) (v)
#endif
static inline uint16_t fp_get_be16(const uint8_t *p)
{
	uint16_t v;

	__builtin_memcpy(&v, p, 2);
	return FP_BE16(v);
}
static inline uint32_t fp_get_be32(const uint8_t *p)
{
	uint32_t v;

	__builtin_memcpy(&v, p, 4);
	return FP_BE32(v);
}
static inline void fp_put_be16(uint8_t *p, uint16_t v)
{
	v = FP_BE16(v);
	__builtin_memcpy(p, &v, 2);
}
static inline void fp_put_be32(uint8_t *p, uint32_t v)
{
	v = FP_BE32(v);
	__builtin_memcpy(p, &v, 4);
}

/* The fixed 20 bytes of a TCP header at @b, checksum 0, urgent pointer @urg; @hdr_len with
 * options (a multiple of 4). fp_tcp_emit writes its header with it, and so does the stack's
 * one-pass segment (net/tcp_output.c, emit_fast), which skips struct fp_tcp. */
static inline void fp_tcp_put_hdr(uint8_t *b, uint16_t sport, uint16_t dport, uint32_t seq,
				  uint32_t ack, size_t hdr_len, uint8_t flags, uint16_t wnd,
				  uint16_t urg)
{
	fp_put_be16(b, sport);
	fp_put_be16(b + 2, dport);
	fp_put_be32(b + 4, seq);
	fp_put_be32(b + 8, ack);
	b[12] = (uint8_t)(hdr_len / 4 << 4);
	b[13] = flags;
	fp_put_be16(b + 14, wnd);
	b[16] = 0;
	b[17] = 0;
	fp_put_be16(b + 18, urg);
}
