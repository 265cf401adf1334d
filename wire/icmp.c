/* icmp.c: ICMP message headers (RFC 792). */
#include <errno.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/wire.h>

int fp_icmp_parse(const uint8_t *buf, size_t len, struct fp_icmp *out)
{
	if (len < FP_ICMP_HDR_LEN)
		return -EINVAL;
	/* RFC 792: the checksum covers the whole ICMP message, header and data. */
	if (fp_csum(buf, len) != 0)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->type = buf[0];
	out->code = buf[1];
	out->rest = fp_get_be32(buf + 4);
	return 0;
}

size_t fp_icmp_emit(uint8_t *buf, size_t len, const struct fp_icmp *h)
{
	if (len < FP_ICMP_HDR_LEN)
		return 0;
	buf[0] = h->type;
	buf[1] = h->code;
	buf[2] = 0;
	buf[3] = 0;
	fp_put_be32(buf + 4, h->rest);
	uint16_t c = fp_csum(buf, len);
	memcpy(buf + 2, &c, 2);
	return FP_ICMP_HDR_LEN;
}
