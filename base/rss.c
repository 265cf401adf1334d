/* rss.c: the Toeplitz hash (Microsoft RSS specification), reference and table-driven. */
#include <string.h>

#include <flowplane/rss.h>

const uint8_t fp_rss_key_default[FP_RSS_KEY_LEN] = {
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
	0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
	0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};

const uint8_t fp_rss_key_symmetric[FP_RSS_KEY_LEN] = {
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
};

/* The 32 key bits starting at bit @bit (bit 0 = most significant bit of key[0]). */
static uint32_t key_window(const uint8_t *key, size_t bit)
{
	uint64_t w = 0;
	size_t byte = bit / 8;
	for (size_t i = 0; i < 5; i++)
		w = (w << 8) | (byte + i < FP_RSS_KEY_LEN ? key[byte + i] : 0);
	return (uint32_t)(w >> (8 - bit % 8));
}

/* For every set bit of the input, XOR in the key window that starts at that bit. */
uint32_t fp_toeplitz(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len)
{
	uint32_t hash = 0;

	if (len + 4 > key_len)
		len = key_len - 4;
	for (size_t i = 0; i < len; i++)
		for (unsigned b = 0; b < 8; b++)
			if (data[i] & (0x80 >> b))
				hash ^= key_window(key, i * 8 + b);
	return hash;
}

void fp_rss_init(struct fp_rss *r, const uint8_t *key)
{
	for (size_t i = 0; i < 12; i++)
		for (unsigned v = 0; v < 256; v++) {
			uint32_t h = 0;
			for (unsigned b = 0; b < 8; b++)
				if (v & (0x80 >> b))
					h ^= key_window(key, i * 8 + b);
			r->tbl[i][v] = h;
		}
}

static uint32_t rss_hash(const struct fp_rss *r, const uint8_t *in, size_t len)
{
	uint32_t h = 0;
	for (size_t i = 0; i < len; i++)
		h ^= r->tbl[i][in[i]];
	return h;
}

uint32_t fp_rss_ipv4(const struct fp_rss *r, uint32_t saddr_be, uint32_t daddr_be)
{
	uint8_t in[8];
	memcpy(in, &saddr_be, 4);
	memcpy(in + 4, &daddr_be, 4);
	return rss_hash(r, in, sizeof(in));
}

uint32_t fp_rss_ipv4_l4(const struct fp_rss *r, uint32_t saddr_be, uint32_t daddr_be,
			uint16_t sport_be, uint16_t dport_be)
{
	uint8_t in[12];
	memcpy(in, &saddr_be, 4);
	memcpy(in + 4, &daddr_be, 4);
	memcpy(in + 8, &sport_be, 2);
	memcpy(in + 10, &dport_be, 2);
	return rss_hash(r, in, sizeof(in));
}
