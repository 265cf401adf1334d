/* cksum.h: the Internet checksum (RFC 1071) and its incremental update (RFC 1624). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * Byte order: RFC 1071 §2(B) shows the one's complement sum is the same in either byte
 * order once stored, so these functions sum 16-bit words as the CPU loads them and return
 * the checksum in the same form: store it with memcpy (or compare it with a field read
 * with memcpy) and it is right on the wire. No htons anywhere.
 */

/* Add the bytes @buf[0..len) to the 32-bit running sum @sum. @buf is taken to start at
 * an even offset of the checksummed data (see fp_csum_combine otherwise). */
uint32_t fp_csum_partial(const void *buf, size_t len, uint32_t sum);

/* Fold a running sum to 16 bits and complement it: the checksum to store. */
static inline uint16_t fp_csum_fold(uint32_t sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* Checksum of a whole buffer. Verifying data that contains its checksum yields 0. */
static inline uint16_t fp_csum(const void *buf, size_t len)
{
	return fp_csum_fold(fp_csum_partial(buf, len, 0));
}

/* The @n 32-bit words at @buf added in 64 bits, not folded: a piece of a running sum that
 * other pieces join before one fold (RFC 1071 §2). Inline; unrolled where @n is a
 * constant. */
static inline uint64_t fp_csum_words64(const void *buf, unsigned n)
{
	const uint8_t *p = buf;
	uint64_t s = 0;

	for (unsigned i = 0; i < n; i++) {
		uint32_t w;
		__builtin_memcpy(&w, p + 4 * i, 4);
		s += w;
	}
	return s;
}

/* fp_csum_partial() of @n 32-bit words at @buf, inline: the words added in 64 bits, no
 * call. For headers, where @n is a constant once inlined. */
static inline uint32_t fp_csum_words(const void *buf, unsigned n)
{
	uint64_t s = fp_csum_words64(buf, n);

	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffffffu) + (s >> 32);
	return (uint32_t)s;
}

/* fp_csum() of exactly 20 bytes (an IPv4 header without options). Every segment sent and
 * received has one. */
static inline uint16_t fp_csum20(const void *buf)
{
	return fp_csum_fold(fp_csum_words(buf, 5));
}

/* Add a partial sum @part of data that begins at byte @offset of the checksummed data
 * (odd offsets swap bytes, RFC 1071 §2(B)). For chains of segments with odd lengths. */
uint32_t fp_csum_combine(uint32_t sum, uint32_t part, size_t offset);

/* Running sum of the IPv4 pseudo-header (RFC 793 §3.1, RFC 768). Addresses as they lie in
 * the packet (network order); @l4_len in host order. */
uint32_t fp_csum_pseudo_ipv4(uint32_t saddr_be, uint32_t daddr_be, uint8_t proto, uint16_t l4_len);

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'): the checksum after a 16-bit field went from
 * @old to @new, without touching the rest of the packet. All values as stored.
 * One corner: when every other byte covered is zero, the result is 0x0000 where a full
 * computation gives 0xffff (one's complement has two zeros, RFC 1624 §3). No IPv4, TCP or
 * ICMP header is all zeros; UDP sends a computed 0x0000 as 0xffff anyway (RFC 768). */
static inline uint16_t fp_csum_update16(uint16_t csum, uint16_t old, uint16_t new_)
{
	uint32_t s = (uint16_t)~csum + (uint32_t)(uint16_t)~old + new_;
	return fp_csum_fold(s);
}

/* The same for a 32-bit field (an address, a sequence number), as stored. */
static inline uint16_t fp_csum_update32(uint16_t csum, uint32_t old, uint32_t new_)
{
	uint32_t s = (uint16_t)~csum;
	s += (uint16_t)~(old & 0xffff) + (uint32_t)(uint16_t)~(old >> 16);
	s += (new_ & 0xffff) + (new_ >> 16);
	return fp_csum_fold(s);
}

/*
 * Sums of data that never changes, computed once (Sandstorm's pre-packaged checksums):
 * the running sum of any range of it costs at most 2 * FP_CSUM_MAP_STEP bytes summed
 * instead of the whole range. @at[k] is the sum of data[0, k * STEP) modulo 65535, with
 * bytes weighed by their offset from @data (RFC 1071 §2(B): a range that starts at an odd
 * offset is the byte-swapped sum). 2 bytes of table per 64 of data.
 */
#define FP_CSUM_MAP_STEP 64

struct fp_csum_map {
	const uint8_t *data;
	size_t len;
	uint16_t *at;
};

/* Build @m over @data (which must stay unchanged while @m is used). 0 or -ENOMEM. */
int fp_csum_map_init(struct fp_csum_map *m, const void *data, size_t len);
void fp_csum_map_free(struct fp_csum_map *m);

/* A running sum congruent to fp_csum_partial(m->data + off, len, 0): the same checksum
 * once added to a nonzero header's sum and folded. @off + @len <= m->len. */
uint32_t fp_csum_map_sum(const struct fp_csum_map *m, size_t off, size_t len);

/* A set of maps found by address: what a transmit path consults for each piece it sends. */
struct fp_csum_index {
	struct fp_csum_map *maps;    /* sorted by data once sealed */
	size_t n, cap;
	int sealed;
};

/* Add a map over @data (0 or -ENOMEM; empty data is skipped), then seal before finding. */
int fp_csum_index_add(struct fp_csum_index *ix, const void *data, size_t len);
void fp_csum_index_seal(struct fp_csum_index *ix);
/* The map whose data holds all of [p, p + len), or NULL. */
const struct fp_csum_map *fp_csum_index_find(const struct fp_csum_index *ix, const void *p,
					     size_t len);
void fp_csum_index_free(struct fp_csum_index *ix);
