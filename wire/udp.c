/* udp.c: UDP headers and their pseudo-header checksum (RFC 768). */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/wire.h>

int fp_udp_parse(const uint8_t *buf, size_t len, uint32_t src, uint32_t dst, struct fp_udp *out)
{
	if (len < FP_UDP_HDR_LEN)
		return -EINVAL;
	uint16_t ulen = fp_get_be16(buf + 4);
	if (ulen < FP_UDP_HDR_LEN || ulen > len)
		return -EINVAL;
	uint16_t csum = fp_get_be16(buf + 6);
	/*
	 * RFC 768: "An all zero transmitted checksum value means that the transmitter
	 * generated no checksum". A sender that computed 0 sent 0xffff, which verifies
	 * like any other value. The checksum covers the datagram's own length, not the
	 * buffer's: bytes past ulen are not part of it (RFC 1122 §4.1.3.4 leaves them).
	 */
	if (csum != 0) {
		uint32_t sum = fp_csum_pseudo_ipv4(htonl(src), htonl(dst), FP_IPPROTO_UDP, ulen);
		if (fp_csum_fold(fp_csum_partial(buf, ulen, sum)) != 0)
			return -EBADMSG;
	}
	memset(out, 0, sizeof(*out));
	out->sport = fp_get_be16(buf);
	out->dport = fp_get_be16(buf + 2);
	out->len = ulen;
	out->csum = csum;
	return 0;
}

size_t fp_udp_emit(uint8_t *buf, size_t len, uint32_t src, uint32_t dst,
		   uint16_t sport, uint16_t dport)
{
	if (len < FP_UDP_HDR_LEN || len > 0xffff)
		return 0;
	fp_put_be16(buf, sport);
	fp_put_be16(buf + 2, dport);
	fp_put_be16(buf + 4, (uint16_t)len);
	buf[6] = 0;
	buf[7] = 0;
	uint32_t sum = fp_csum_pseudo_ipv4(htonl(src), htonl(dst), FP_IPPROTO_UDP, (uint16_t)len);
	uint16_t c = fp_csum_fold(fp_csum_partial(buf, len, sum));
	/* RFC 768: a computed zero is sent as all ones, since zero means "no checksum". */
	if (c == 0)
		c = 0xffff;
	memcpy(buf + 6, &c, 2);
	return FP_UDP_HDR_LEN;
}
