/* fuzz_wire.c: every wire/ parser on arbitrary bytes, and parse -> emit -> parse round trips. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/wire.h>

#define CHECK(x) do { if (!(x)) abort(); } while (0)

/* Addresses for the parsers run on the raw input, where no IP header gave any. */
#define RAW_SRC 0x0a630001u
#define RAW_DST 0x0a630002u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An exactly sized heap copy: AddressSanitizer then catches any read at or past @len. */
static uint8_t *dup_exact(const uint8_t *p, size_t len)
{
	uint8_t *b = malloc(len ? len : 1);
	CHECK(b);
	if (len)
		memcpy(b, p, len);
	return b;
}

/* Two stored checksums that both verify the same data: equal, or the two zeros of one's
 * complement (0x0000 and 0xffff, RFC 1624 §3). */
static int same_csum(const uint8_t *a, const uint8_t *b)
{
	uint16_t x = fp_get_be16(a), y = fp_get_be16(b);
	return x == y || ((x == 0 || x == 0xffff) && (y == 0 || y == 0xffff));
}

static void fuzz_eth(const uint8_t *buf, size_t len)
{
	struct fp_eth e, back;
	uint8_t out[FP_ETH_HDR_LEN];
	if (fp_eth_parse(buf, len, &e) != 0)
		return;
	CHECK(e.n_vlan <= 2 && e.hdr_len == FP_ETH_HDR_LEN + FP_ETH_VLAN_LEN * e.n_vlan);
	CHECK(e.hdr_len <= len);
	CHECK(e.type >= 0x0600 && e.type != FP_ETH_TYPE_VLAN && e.type != FP_ETH_TYPE_QINQ);
	CHECK(fp_eth_emit(out, sizeof(out), &e.dst, &e.src, e.type) == FP_ETH_HDR_LEN);
	CHECK(fp_eth_parse(out, sizeof(out), &back) == 0);
	CHECK(fp_eth_addr_eq(&back.dst, &e.dst) && fp_eth_addr_eq(&back.src, &e.src));
	CHECK(back.type == e.type && back.n_vlan == 0 && back.vlan_tci == 0 && back.hdr_len == 14);
	if (e.n_vlan == 0)
		CHECK(memcmp(out, buf, FP_ETH_HDR_LEN) == 0);
}

static void fuzz_arp(const uint8_t *buf, size_t len)
{
	struct fp_arp a, back;
	uint8_t out[FP_ARP_LEN];
	if (fp_arp_parse(buf, len, &a) != 0)
		return;
	CHECK(fp_arp_emit(out, sizeof(out), &a) == FP_ARP_LEN);
	/* Every byte of an accepted ARP is either checked or carried in the struct. */
	CHECK(memcmp(out, buf, FP_ARP_LEN) == 0);
	CHECK(fp_arp_parse(out, sizeof(out), &back) == 0);
	CHECK(back.op == a.op && back.spa == a.spa && back.tpa == a.tpa);
	CHECK(fp_eth_addr_eq(&back.sha, &a.sha) && fp_eth_addr_eq(&back.tha, &a.tha));
}

/* Returns the parse result without checksum verification; *out is valid when it is 0. */
static int fuzz_ipv4(const uint8_t *buf, size_t len, struct fp_ipv4 *out)
{
	struct fp_ipv4 v, back;
	int rc = fp_ipv4_parse(buf, len, false, out);
	int rc_v = fp_ipv4_parse(buf, len, true, &v);
	/* Verifying only adds -EBADMSG, and only to what parses without it. */
	CHECK(rc != -EBADMSG);
	CHECK(rc_v == rc || (rc == 0 && rc_v == -EBADMSG));
	if (rc != 0)
		return rc;
	CHECK(out->hdr_len >= 20 && out->hdr_len <= out->total_len && out->total_len <= len);

	/* Re-emit with the same payload behind it; options are dropped. */
	size_t plen = fp_ipv4_payload_len(out);
	uint8_t *o = malloc(FP_IPV4_HDR_LEN + plen);
	CHECK(o);
	CHECK(fp_ipv4_emit(o, FP_IPV4_HDR_LEN - 1, out, plen) == 0);
	CHECK(fp_ipv4_emit(o, FP_IPV4_HDR_LEN + plen, out, plen) == FP_IPV4_HDR_LEN);
	memcpy(o + FP_IPV4_HDR_LEN, buf + out->hdr_len, plen);
	CHECK(fp_ipv4_parse(o, FP_IPV4_HDR_LEN + plen, true, &back) == 0);
	CHECK(back.src == out->src && back.dst == out->dst && back.id == out->id);
	CHECK(back.frag == out->frag && back.tos == out->tos && back.ttl == out->ttl);
	CHECK(back.proto == out->proto && back.hdr_len == 20 && fp_ipv4_payload_len(&back) == plen);
	if (rc_v == 0 && out->hdr_len == FP_IPV4_HDR_LEN) {
		CHECK(memcmp(o, buf, 10) == 0 && memcmp(o + 12, buf + 12, 8) == 0);
		CHECK(same_csum(o + 10, buf + 10));
	}
	free(o);
	return 0;
}

static void fuzz_icmp(const uint8_t *buf, size_t len)
{
	struct fp_icmp h, back;
	int rc = fp_icmp_parse(buf, len, &h);
	CHECK(rc == 0 || rc == -EINVAL || rc == -EBADMSG);
	CHECK((rc == -EINVAL) == (len < FP_ICMP_HDR_LEN));
	if (rc == -EINVAL)
		return;
	/* Whatever the checksum was, the header re-emitted over the same data verifies. */
	if (rc != 0)
		h = (struct fp_icmp){ .type = buf[0], .code = buf[1], .rest = fp_get_be32(buf + 4) };
	uint8_t *o = dup_exact(buf, len);
	CHECK(fp_icmp_emit(o, len, &h) == FP_ICMP_HDR_LEN);
	CHECK(fp_icmp_parse(o, len, &back) == 0);
	CHECK(back.type == h.type && back.code == h.code && back.rest == h.rest);
	CHECK(memcmp(o, buf, 2) == 0 && memcmp(o + 4, buf + 4, len - 4) == 0);
	if (rc == 0)
		CHECK(same_csum(o + 2, buf + 2));
	free(o);
}

static void fuzz_udp(const uint8_t *buf, size_t len, uint32_t src, uint32_t dst)
{
	struct fp_udp u, back;
	int rc = fp_udp_parse(buf, len, src, dst, &u);
	CHECK(rc == 0 || rc == -EINVAL || rc == -EBADMSG);
	if (rc == -EINVAL)
		return;
	uint16_t ulen = fp_get_be16(buf + 4);
	uint8_t *o = dup_exact(buf, ulen);
	if (rc == -EBADMSG) {
		/* The same datagram with no checksum is accepted (RFC 768). */
		o[6] = o[7] = 0;
		CHECK(fp_udp_parse(o, ulen, src, dst, &back) == 0 && back.csum == 0);
		u = (struct fp_udp){ .sport = fp_get_be16(buf), .dport = fp_get_be16(buf + 2),
				     .len = ulen };
	} else {
		CHECK(u.len == ulen && u.len <= len && u.len >= 8);
	}
	CHECK(fp_udp_emit(o, ulen, src, dst, u.sport, u.dport) == FP_UDP_HDR_LEN);
	CHECK(fp_udp_parse(o, ulen, src, dst, &back) == 0);
	CHECK(back.sport == u.sport && back.dport == u.dport && back.len == ulen && back.csum);
	/* A non-zero checksum that verifies is the only one (0 is sent as 0xffff). */
	if (rc == 0 && u.csum)
		CHECK(back.csum == u.csum);
	CHECK(memcmp(o + 8, buf + 8, ulen - 8u) == 0);
	free(o);
}

static void check_opts_equal(const struct fp_tcp_opts *a, const struct fp_tcp_opts *b)
{
	CHECK(a->has_mss == b->has_mss && a->has_wscale == b->has_wscale);
	CHECK(a->sack_ok == b->sack_ok && a->has_ts == b->has_ts && a->n_sack == b->n_sack);
	CHECK(!a->has_mss || a->mss == b->mss);
	CHECK(!a->has_wscale || a->wscale == b->wscale);
	CHECK(!a->has_ts || (a->ts_val == b->ts_val && a->ts_ecr == b->ts_ecr));
	CHECK(a->n_sack <= FP_TCP_MAX_SACK);
	for (size_t i = 0; i < a->n_sack; i++)
		CHECK(a->sack[i].left == b->sack[i].left && a->sack[i].right == b->sack[i].right);
}

static void check_tcp_equal(const struct fp_tcp *a, const struct fp_tcp *b)
{
	CHECK(a->sport == b->sport && a->dport == b->dport && a->seq == b->seq);
	CHECK(a->ack == b->ack && a->flags == b->flags && a->wnd == b->wnd && a->urg == b->urg);
	check_opts_equal(&a->opt, &b->opt);
}

static void fuzz_tcp(const uint8_t *buf, size_t len, uint32_t src, uint32_t dst)
{
	struct fp_tcp t, v, back, again;
	int rc = fp_tcp_parse(buf, len, src, dst, false, &t);
	int rc_v = fp_tcp_parse(buf, len, src, dst, true, &v);
	CHECK(rc == 0 || rc == -EINVAL);
	CHECK(rc_v == rc || (rc == 0 && rc_v == -EBADMSG) || (rc == -EINVAL && rc_v == -EBADMSG));
	if (rc != 0)
		return;
	if (rc_v == 0) {
		CHECK(v.hdr_len == t.hdr_len);
		check_tcp_equal(&v, &t);
	}
	CHECK(t.hdr_len >= 20 && t.hdr_len <= len && t.hdr_len % 4 == 0);

	/* Re-emit the header in Linux's layout with the same payload, checksum it, re-parse. */
	size_t olen = fp_tcp_opts_len(&t.opt);
	size_t plen = len - t.hdr_len;
	uint8_t *o = malloc(FP_TCP_MAX_HDR + plen);
	CHECK(o);
	size_t hl = fp_tcp_emit(o, FP_TCP_MAX_HDR + plen, &t);
	if (hl == 0) {
		CHECK(olen > FP_TCP_MAX_HDR - FP_TCP_HDR_LEN);
		free(o);
		return;
	}
	CHECK(hl == FP_TCP_HDR_LEN + olen && hl % 4 == 0);
	CHECK(fp_tcp_emit(o, hl - 1, &t) == 0);
	memcpy(o + hl, buf + t.hdr_len, plen);
	fp_tcp_set_csum(o, fp_csum_partial(o, hl + plen, 0), src, dst, hl + plen);
	CHECK(fp_tcp_parse(o, hl + plen, src, dst, true, &back) == 0);
	CHECK(back.hdr_len == hl);
	check_tcp_equal(&back, &t);
	/* The emitted layout is a fixed point: emitting what it parses to writes it again. */
	uint8_t o2[FP_TCP_MAX_HDR];
	CHECK(fp_tcp_emit(o2, sizeof(o2), &back) == hl);
	o2[16] = o[16];
	o2[17] = o[17];
	CHECK(memcmp(o2, o, hl) == 0);
	/* The whole segment's checksum also comes out of a split sum. */
	size_t cut = plen / 2 + hl;
	o[16] = o[17] = 0;
	uint32_t sum = fp_csum_combine(fp_csum_partial(o, cut, 0),
				       fp_csum_partial(o + cut, hl + plen - cut, 0), cut);
	fp_tcp_set_csum(o, sum, src, dst, hl + plen);
	CHECK(fp_tcp_parse(o, hl + plen, src, dst, true, &again) == 0);
	free(o);
}

/* The input as a frame: each layer handed an exactly sized copy of what the one below
 * said is its payload, as the stack would. */
static void fuzz_frame(const uint8_t *buf, size_t len)
{
	struct fp_eth e;
	struct fp_ipv4 ip;
	if (fp_eth_parse(buf, len, &e) != 0)
		return;
	uint8_t *l3 = dup_exact(buf + e.hdr_len, len - e.hdr_len);
	size_t l3_len = len - e.hdr_len;
	if (e.type == FP_ETH_TYPE_ARP) {
		fuzz_arp(l3, l3_len);
	} else if (e.type == FP_ETH_TYPE_IPV4 && fuzz_ipv4(l3, l3_len, &ip) == 0) {
		size_t l4_len = fp_ipv4_payload_len(&ip);
		uint8_t *l4 = dup_exact(l3 + ip.hdr_len, l4_len);
		switch (ip.proto) {
		case FP_IPPROTO_ICMP:
			fuzz_icmp(l4, l4_len);
			break;
		case FP_IPPROTO_UDP:
			fuzz_udp(l4, l4_len, ip.src, ip.dst);
			break;
		case FP_IPPROTO_TCP:
			fuzz_tcp(l4, l4_len, ip.src, ip.dst);
			break;
		}
		free(l4);
	}
	free(l3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Past a jumbo frame nothing new happens; keep the pseudo-header lengths in range. */
	if (size > 9216)
		return 0;
	uint8_t *buf = dup_exact(data, size);
	struct fp_ipv4 ip;

	fuzz_frame(buf, size);
	/* Every parser on the raw bytes as well, so each sees inputs no lower layer shaped. */
	fuzz_eth(buf, size);
	fuzz_arp(buf, size);
	(void)fuzz_ipv4(buf, size, &ip);
	fuzz_icmp(buf, size);
	fuzz_udp(buf, size, RAW_SRC, RAW_DST);
	fuzz_tcp(buf, size, RAW_SRC, RAW_DST);
	free(buf);
	return 0;
}
