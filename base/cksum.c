/* cksum.c: one's complement sums over buffers (RFC 1071). */
#include <string.h>

#include <flowplane/cksum.h>

static uint32_t fold32(uint64_t s)
{
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffffffu) + (s >> 32);
	return (uint32_t)s;
}

/*
 * Sum 32-bit words into a 64-bit accumulator: a carry out of bit 31 lands in bit 32 and
 * is folded back at the end, which is the one's complement end-around carry deferred
 * (RFC 1071 §2(C), "deferred carries"). memcpy keeps unaligned loads legal.
 */
uint32_t fp_csum_partial(const void *buf, size_t len, uint32_t sum)
{
	const uint8_t *p = buf;
	uint64_t acc = sum;

	for (; len >= 16; p += 16, len -= 16) {
		uint32_t w[4];
		memcpy(w, p, 16);
		acc += (uint64_t)w[0] + w[1] + w[2] + w[3];
	}
	for (; len >= 4; p += 4, len -= 4) {
		uint32_t w;
		memcpy(&w, p, 4);
		acc += w;
	}
	if (len >= 2) {
		uint16_t h;
		memcpy(&h, p, 2);
		acc += h;
		p += 2;
		len -= 2;
	}
	if (len) {
		/* The odd last byte is the first byte of a zero-padded word. */
		uint16_t h = 0;
		memcpy(&h, p, 1);
		acc += h;
	}
	uint32_t s = fold32(acc);
	return (s & 0xffff) + (s >> 16);
}

uint32_t fp_csum_combine(uint32_t sum, uint32_t part, size_t offset)
{
	part = (part & 0xffff) + (part >> 16);
	part = (part & 0xffff) + (part >> 16);
	if (offset & 1)
		part = ((part & 0xff) << 8) | (part >> 8);
	uint64_t s = (uint64_t)sum + part;
	return fold32(s);
}

uint32_t fp_csum_pseudo_ipv4(uint32_t saddr_be, uint32_t daddr_be, uint8_t proto, uint16_t l4_len)
{
	uint8_t ph[12];
	memcpy(ph, &saddr_be, 4);
	memcpy(ph + 4, &daddr_be, 4);
	ph[8] = 0;
	ph[9] = proto;
	ph[10] = (uint8_t)(l4_len >> 8);
	ph[11] = (uint8_t)l4_len;
	return fp_csum_partial(ph, sizeof(ph), 0);
}
