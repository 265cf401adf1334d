/* eth.c: Ethernet II headers with up to two VLAN tags (IEEE 802.3, 802.1Q, 802.1ad). */
#include <errno.h>
#include <string.h>

#include <flowplane/wire.h>

/* Values of the type/length field below this are an 802.3 length (IEEE 802.3 §3.2.6). */
#define ETH_TYPE_MIN 0x0600

static bool is_vlan_tpid(uint16_t type) { return type == FP_ETH_TYPE_VLAN || type == FP_ETH_TYPE_QINQ; }

int fp_eth_parse(const uint8_t *buf, size_t len, struct fp_eth *out)
{
	if (len < FP_ETH_HDR_LEN)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	memcpy(out->dst.b, buf, FP_ETH_ALEN);
	memcpy(out->src.b, buf + FP_ETH_ALEN, FP_ETH_ALEN);

	/*
	 * A VLAN tag is a TPID (where the type would be) followed by a 2-byte TCI, then the
	 * real type: each tag moves the type 4 bytes on. Q-in-Q stacks an 802.1ad tag on an
	 * 802.1Q one; a third tag is not something this stack speaks.
	 */
	size_t off = 2 * FP_ETH_ALEN;
	uint16_t type = fp_get_be16(buf + off);
	while (is_vlan_tpid(type)) {
		if (out->n_vlan == 2)
			return -EPROTONOSUPPORT;
		if (len < off + 2 + FP_ETH_VLAN_LEN)
			return -EINVAL;
		if (out->n_vlan == 0)
			out->vlan_tci = fp_get_be16(buf + off + 2);
		out->n_vlan++;
		off += FP_ETH_VLAN_LEN;
		type = fp_get_be16(buf + off);
	}
	/* 802.3 length with an LLC header behind it (STP, old NetBIOS): not IP or ARP. */
	if (type < ETH_TYPE_MIN)
		return -EPROTONOSUPPORT;
	out->type = type;
	out->hdr_len = (uint16_t)(off + 2);
	return 0;
}

size_t fp_eth_emit(uint8_t *buf, size_t cap, const struct fp_eth_addr *dst,
		   const struct fp_eth_addr *src, uint16_t type)
{
	if (cap < FP_ETH_HDR_LEN)
		return 0;
	memcpy(buf, dst->b, FP_ETH_ALEN);
	memcpy(buf + FP_ETH_ALEN, src->b, FP_ETH_ALEN);
	fp_put_be16(buf + 2 * FP_ETH_ALEN, type);
	return FP_ETH_HDR_LEN;
}
