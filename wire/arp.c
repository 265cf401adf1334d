/* arp.c: ARP packets for Ethernet and IPv4 (RFC 826). */
#include <errno.h>
#include <string.h>

#include <flowplane/wire.h>

/* RFC 826 "Packet format"; hardware type 1 is Ethernet (IANA ARP parameters). */
#define ARP_HTYPE_ETHER 1
#define ARP_OFF_HTYPE   0
#define ARP_OFF_PTYPE   2
#define ARP_OFF_HLEN    4
#define ARP_OFF_PLEN    5
#define ARP_OFF_OP      6
#define ARP_OFF_SHA     8
#define ARP_OFF_SPA     14
#define ARP_OFF_THA     18
#define ARP_OFF_TPA     24

int fp_arp_parse(const uint8_t *buf, size_t len, struct fp_arp *out)
{
	/* Ethernet pads an ARP to 46 bytes of payload: anything after byte 28 is padding. */
	if (len < FP_ARP_LEN)
		return -EINVAL;
	if (fp_get_be16(buf + ARP_OFF_HTYPE) != ARP_HTYPE_ETHER ||
	    fp_get_be16(buf + ARP_OFF_PTYPE) != FP_ETH_TYPE_IPV4)
		return -EPROTONOSUPPORT;
	/* For Ethernet/IPv4 the address lengths are fixed: anything else is malformed. */
	if (buf[ARP_OFF_HLEN] != FP_ETH_ALEN || buf[ARP_OFF_PLEN] != 4)
		return -EINVAL;
	uint16_t op = fp_get_be16(buf + ARP_OFF_OP);
	/* RARP and InARP (ops 3..9) use the same layout; this stack answers neither. */
	if (op != FP_ARP_OP_REQUEST && op != FP_ARP_OP_REPLY)
		return -EPROTONOSUPPORT;

	memset(out, 0, sizeof(*out));
	out->op = op;
	memcpy(out->sha.b, buf + ARP_OFF_SHA, FP_ETH_ALEN);
	out->spa = fp_get_be32(buf + ARP_OFF_SPA);
	memcpy(out->tha.b, buf + ARP_OFF_THA, FP_ETH_ALEN);
	out->tpa = fp_get_be32(buf + ARP_OFF_TPA);
	return 0;
}

size_t fp_arp_emit(uint8_t *buf, size_t cap, const struct fp_arp *a)
{
	if (cap < FP_ARP_LEN)
		return 0;
	fp_put_be16(buf + ARP_OFF_HTYPE, ARP_HTYPE_ETHER);
	fp_put_be16(buf + ARP_OFF_PTYPE, FP_ETH_TYPE_IPV4);
	buf[ARP_OFF_HLEN] = FP_ETH_ALEN;
	buf[ARP_OFF_PLEN] = 4;
	fp_put_be16(buf + ARP_OFF_OP, a->op);
	memcpy(buf + ARP_OFF_SHA, a->sha.b, FP_ETH_ALEN);
	fp_put_be32(buf + ARP_OFF_SPA, a->spa);
	memcpy(buf + ARP_OFF_THA, a->tha.b, FP_ETH_ALEN);
	fp_put_be32(buf + ARP_OFF_TPA, a->tpa);
	return FP_ARP_LEN;
}
