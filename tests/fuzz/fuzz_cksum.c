/* fuzz_cksum.c: checksum properties on arbitrary bytes: split sums, incremental updates. */
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>

#define CHECK(x) do { if (!(x)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	/* First two bytes choose split points and the field to rewrite; the rest is data. */
	size_t a = data[0], f = data[1];
	const uint8_t *buf = data + 2;
	size_t len = size - 2;
	a %= len + 1;

	uint32_t whole = fp_csum_partial(buf, len, 0);
	uint32_t s = fp_csum_combine(fp_csum_partial(buf, a, 0),
				     fp_csum_partial(buf + a, len - a, 0), a);
	CHECK(fp_csum_fold(s) == fp_csum_fold(whole));

	/* Prepend a checksum field, verify, rewrite an even-aligned 16-bit field, update. */
	uint8_t *pkt = malloc(len + 2 + 1);
	CHECK(pkt);
	memset(pkt, 0, 2);
	memcpy(pkt + 2, buf, len);
	size_t plen = len + 2;
	if (plen & 1)
		pkt[plen++] = 0;
	uint16_t c = fp_csum(pkt, plen);
	memcpy(pkt, &c, 2);
	CHECK(fp_csum(pkt, plen) == 0);
	size_t off = 2 + 2 * (f % ((plen - 2) / 2));
	uint16_t o, n = (uint16_t)(data[0] * 257u + f);
	memcpy(&o, pkt + off, 2);
	memcpy(pkt + off, &n, 2);
	c = fp_csum_update16(c, o, n);
	memcpy(pkt, &c, 2);
	/* The all-zero corner of cksum.h aside, the updated checksum verifies. */
	int zeros = 1;
	for (size_t i = 2; i < plen; i++)
		zeros &= pkt[i] == 0;
	CHECK(fp_csum(pkt, plen) == 0 || (zeros && c == 0));
	free(pkt);
	return 0;
}
