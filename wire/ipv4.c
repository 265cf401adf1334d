/* ipv4.c: IPv4 headers (RFC 791 §3.1), checked as RFC 1122 §3.2.1 asks. */
#include <errno.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/wire.h>

#define IPV4_MAX_TOTAL 0xffff

int fp_ipv4_parse(const uint8_t *buf, size_t len, bool verify_csum, struct fp_ipv4 *out)
{
	if (len < FP_IPV4_HDR_LEN)
		return -EINVAL;
	/* RFC 1122 §3.2.1.1: a datagram whose version is not 4 is discarded. */
	if (buf[0] >> 4 != 4)
		return -EPROTONOSUPPORT;
	size_t hdr_len = (size_t)(buf[0] & 0x0f) * 4;
	size_t total_len = fp_get_be16(buf + 2);
	/*
	 * The header must fit in the datagram and the datagram in the buffer; bytes past
	 * total_len are Ethernet padding (a 60-byte minimum frame), not payload.
	 */
	if (hdr_len < FP_IPV4_HDR_LEN || hdr_len > total_len || total_len > len)
		return -EINVAL;
	/* RFC 1122 §3.2.1.2: a datagram whose header checksum fails is silently discarded. */
	if (verify_csum &&
	    (hdr_len == FP_IPV4_HDR_LEN ? fp_csum20(buf) : fp_csum(buf, hdr_len)) != 0)
		return -EBADMSG;

	memset(out, 0, sizeof(*out));
	out->tos = buf[1];
	out->hdr_len = (uint16_t)hdr_len;
	out->total_len = (uint16_t)total_len;
	out->id = fp_get_be16(buf + 4);
	out->frag = fp_get_be16(buf + 6);
	out->ttl = buf[8];
	out->proto = buf[9];
	out->src = fp_get_be32(buf + 12);
	out->dst = fp_get_be32(buf + 16);
	return 0;
}

size_t fp_ipv4_emit(uint8_t *buf, size_t cap, const struct fp_ipv4 *ip, size_t payload_len)
{
	if (cap < FP_IPV4_HDR_LEN || payload_len > IPV4_MAX_TOTAL - FP_IPV4_HDR_LEN)
		return 0;
	buf[0] = 0x45;	/* version 4, IHL 5: this stack sends no IP options */
	buf[1] = ip->tos;
	fp_put_be16(buf + 2, (uint16_t)(FP_IPV4_HDR_LEN + payload_len));
	fp_put_be16(buf + 4, ip->id);
	fp_put_be16(buf + 6, ip->frag);
	buf[8] = ip->ttl;
	buf[9] = ip->proto;
	buf[10] = 0;
	buf[11] = 0;
	fp_put_be32(buf + 12, ip->src);
	fp_put_be32(buf + 16, ip->dst);
	uint16_t c = fp_csum20(buf);
	memcpy(buf + 10, &c, 2);
	return FP_IPV4_HDR_LEN;
}
