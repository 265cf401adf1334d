/* cksum.c: one's complement sums over buffers (RFC 1071). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>

static uint32_t fold32(uint64_t s)
{
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffffffu) + (s >> 32);
	return (uint32_t)s;
}

/* a + b with the carry out of bit 63 added back in (one's complement addition). */
static inline uint64_t add_carry(uint64_t a, uint64_t b)
{
	a += b;
	return a + (a < b);
}

/*
 * One's complement sum of 64-bit words, carried end-around as it goes (RFC 1071 §2(C) and
 * §4.1's "use the carry flag" note): 16-bit one's complement sums can be computed over any
 * word width and folded at the end, since 2^16 = 1 modulo 65535. On x86-64 the main loop
 * is an add-with-carry chain, 32 bytes per round. memcpy keeps the tail's loads legal.
 */
uint32_t fp_csum_partial(const void *buf, size_t len, uint32_t sum)
{
	const uint8_t *p = buf;
	uint64_t acc = sum;

#if defined(__x86_64__)
	for (; len >= 32; p += 32, len -= 32)
		__asm__("addq 0(%[p]), %[a]\n\t"
			"adcq 8(%[p]), %[a]\n\t"
			"adcq 16(%[p]), %[a]\n\t"
			"adcq 24(%[p]), %[a]\n\t"
			"adcq $0, %[a]"
			: [a] "+r"(acc)
			: [p] "r"(p), "m"(*(const struct { uint8_t b[32]; } *)p)
			: "cc");
#endif
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		acc = add_carry(acc, w);
	}
	if (len >= 4) {
		uint32_t w;
		memcpy(&w, p, 4);
		acc = add_carry(acc, w);
		p += 4;
		len -= 4;
	}
	if (len >= 2) {
		uint16_t h;
		memcpy(&h, p, 2);
		acc = add_carry(acc, h);
		p += 2;
		len -= 2;
	}
	if (len) {
		/* The odd last byte is the first byte of a zero-padded word. */
		uint16_t h = 0;
		memcpy(&h, p, 1);
		acc = add_carry(acc, h);
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
	/* The pseudo-header's 16-bit words as they lie in memory, loaded in the CPU's order:
	 * (0, proto) and the length in network order. */
	uint8_t tail[4] = { 0, proto, (uint8_t)(l4_len >> 8), (uint8_t)l4_len };
	uint32_t t;

	memcpy(&t, tail, 4);
	uint32_t s = fold32((uint64_t)saddr_be + daddr_be + t);
	return (s & 0xffff) + (s >> 16);
}

/* ---- maps of precomputed sums ---- */

/* @s modulo 65535, in [0, 65535). */
static uint32_t mod_ffff(uint64_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return s == 0xffff ? 0 : (uint32_t)s;
}

int fp_csum_map_init(struct fp_csum_map *m, const void *data, size_t len)
{
	size_t n = len / FP_CSUM_MAP_STEP + 1;
	uint64_t acc = 0;

	m->data = data;
	m->len = len;
	if (!(m->at = malloc(n * sizeof(*m->at))))
		return -ENOMEM;
	m->at[0] = 0;
	for (size_t k = 1; k < n; k++) {
		acc = fp_csum_partial(m->data + (k - 1) * FP_CSUM_MAP_STEP, FP_CSUM_MAP_STEP,
				      mod_ffff(acc));
		m->at[k] = (uint16_t)mod_ffff(acc);
	}
	return 0;
}

void fp_csum_map_free(struct fp_csum_map *m)
{
	free(m->at);
	m->at = NULL;
}

/* The sum of data[0, x), offsets from m->data, modulo 65535. */
static uint32_t map_prefix(const struct fp_csum_map *m, size_t x)
{
	size_t k = x / FP_CSUM_MAP_STEP, base = k * FP_CSUM_MAP_STEP;

	return mod_ffff((uint64_t)m->at[k] + fp_csum_partial(m->data + base, x - base, 0));
}

uint32_t fp_csum_map_sum(const struct fp_csum_map *m, size_t off, size_t len)
{
	uint32_t r = mod_ffff((uint64_t)map_prefix(m, off + len) + 0xffff - map_prefix(m, off));

	if (off & 1)
		r = ((r & 0xff) << 8) | (r >> 8);   /* the range's own pairing of bytes */
	return r;
}

int fp_csum_index_add(struct fp_csum_index *ix, const void *data, size_t len)
{
	if (!len)
		return 0;
	if (ix->n == ix->cap) {
		size_t cap = ix->cap ? ix->cap * 2 : 16;
		struct fp_csum_map *v = realloc(ix->maps, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ix->maps = v;
		ix->cap = cap;
	}
	if (fp_csum_map_init(&ix->maps[ix->n], data, len))
		return -ENOMEM;
	ix->n++;
	ix->sealed = 0;
	return 0;
}

static int map_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct fp_csum_map *)a)->data;
	uintptr_t y = (uintptr_t)((const struct fp_csum_map *)b)->data;

	return x < y ? -1 : x > y;
}

void fp_csum_index_seal(struct fp_csum_index *ix)
{
	if (ix->n)
		qsort(ix->maps, ix->n, sizeof(*ix->maps), map_cmp);
	ix->sealed = 1;
}

const struct fp_csum_map *fp_csum_index_find(const struct fp_csum_index *ix, const void *p,
					     size_t len)
{
	uintptr_t a = (uintptr_t)p;
	size_t lo = 0, hi = ix->n;

	if (!ix->sealed)
		return NULL;
	while (lo < hi) {               /* the last map starting at or before p */
		size_t mid = lo + (hi - lo) / 2;
		if ((uintptr_t)ix->maps[mid].data <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	const struct fp_csum_map *m = &ix->maps[lo - 1];
	uintptr_t off = a - (uintptr_t)m->data;
	return off <= m->len && len <= m->len - off ? m : NULL;
}

void fp_csum_index_free(struct fp_csum_index *ix)
{
	for (size_t i = 0; i < ix->n; i++)
		fp_csum_map_free(&ix->maps[i]);
	free(ix->maps);
	*ix = (struct fp_csum_index){ 0 };
}
