/* test_cksum.c: Internet checksum on real packet bytes, incremental update, odd splits. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <flowplane/cksum.h>

#include "harness.h"

static size_t unhex(const char *hex, uint8_t *out)
{
	size_t n = strlen(hex) / 2;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
	return n;
}

/* The stored checksum field at @off, as a host-order number for readable expectations. */
static uint16_t field(const uint8_t *p, size_t off) { return (uint16_t)(p[off] << 8 | p[off + 1]); }

/* RFC 1071 §3: the one's complement sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2. */
static void rfc1071_example(void **state)
{
	(void)state;
	const uint8_t b[] = { 0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7 };
	uint16_t c = fp_csum(b, sizeof(b));
	assert_int_equal(ntohs(c), 0x220d); /* ~0xddf2 */
}

/* An ICMP echo reply written by the Linux kernel (captured on a veth pair): Ethernet,
 * IPv4 (checksum ddf2) and 45 bytes of ICMP (checksum beee: an odd length). */
static const char linux_icmp_reply[] =
	"522375db9cb9ea4c5256b765080045000041882d00004001ddf20a4d00020a4d0001"
	"0000beee123400014142434445464748494a4b4c4d4e4f505152535455565758595a"
	"5b5c5d5e5f606162636465";

static void linux_packet(void **state)
{
	(void)state;
	uint8_t pkt[128];
	size_t len = unhex(linux_icmp_reply, pkt);
	uint8_t *ip = pkt + 14, *icmp = pkt + 34;

	assert_int_equal(len, 79);
	assert_int_equal(fp_csum(ip, 20), 0);          /* verifies */
	assert_int_equal(fp_csum(icmp, len - 34), 0);
	uint16_t stored;
	memcpy(&stored, ip + 10, 2);
	memset(ip + 10, 0, 2);
	assert_int_equal(fp_csum(ip, 20), stored);     /* recomputes */
	assert_int_equal(field(pkt, 24), 0);
	memcpy(&stored, icmp + 2, 2);
	memset(icmp + 2, 0, 2);
	assert_int_equal(fp_csum(icmp, len - 34), stored);
	assert_int_equal(ntohs(stored), 0xbeee);
}

/* UDP checksum with the IPv4 pseudo-header: a DNS query 192.168.1.10 -> 8.8.8.8. */
static void udp_pseudo_header(void **state)
{
	(void)state;
	uint8_t udp[64];
	size_t len = unhex("cf08003500250000abcd01000001000000000000076578616d706c6503636f6d"
			   "0000010001", udp);
	uint32_t s = fp_csum_pseudo_ipv4(htonl(0xc0a8010a), htonl(0x08080808), 17,
					 (uint16_t)len);
	uint16_t c = fp_csum_fold(fp_csum_partial(udp, len, s));
	assert_int_equal(ntohs(c), 0xe368);
	memcpy(udp + 6, &c, 2);
	assert_int_equal(fp_csum_fold(fp_csum_partial(udp, len, s)), 0);
}

/* Decrementing the TTL (a router's job, RFC 1624 §4) and rewriting an address (NAT). */
static void incremental_on_header(void **state)
{
	(void)state;
	uint8_t pkt[128];
	unhex(linux_icmp_reply, pkt);
	uint8_t *ip = pkt + 14;
	uint16_t csum, old16, new16;
	uint32_t old32, new32;

	memcpy(&csum, ip + 10, 2);
	memcpy(&old16, ip + 8, 2);
	ip[8]--; /* TTL */
	memcpy(&new16, ip + 8, 2);
	csum = fp_csum_update16(csum, old16, new16);
	memcpy(ip + 10, &csum, 2);
	assert_int_equal(fp_csum(ip, 20), 0);

	memcpy(&old32, ip + 12, 4);
	new32 = htonl(0xc6336401); /* 198.51.100.1 */
	memcpy(ip + 12, &new32, 4);
	csum = fp_csum_update32(csum, old32, new32);
	memcpy(ip + 10, &csum, 2);
	assert_int_equal(fp_csum(ip, 20), 0);
	memset(ip + 10, 0, 2);
	assert_int_equal(fp_csum(ip, 20), csum);
}

/* Random buffers, random 16- and 32-bit field changes: the incremental result always
 * verifies, and equals a full recomputation. */
static void incremental_random(void **state)
{
	(void)state;
	uint64_t seed = fp_test_seed();
	uint8_t buf[64];

	int corner = 0;

	for (int iter = 0; iter < 200000; iter++) {
		size_t len = 4 + 2 * fp_test_below(&seed, 29);
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)fp_test_rand(&seed);
		if (iter % 7 == 0)
			memset(buf, iter % 2 ? 0xff : 0x00, len); /* all-ones/zeros corners */
		memset(buf, 0, 2); /* checksum field at 0 */
		uint16_t c = fp_csum(buf, len);
		memcpy(buf, &c, 2);
		size_t off = 2 + 2 * fp_test_below(&seed, (len - 2) / 2 - (len >= 8 ? 1 : 0));
		if (len >= 8 && fp_test_below(&seed, 2)) {
			uint32_t o, n = (uint32_t)fp_test_rand(&seed);
			memcpy(&o, buf + off, 4);
			memcpy(buf + off, &n, 4);
			c = fp_csum_update32(c, o, n);
		} else {
			uint16_t o, n = (uint16_t)fp_test_rand(&seed);
			memcpy(&o, buf + off, 2);
			memcpy(buf + off, &n, 2);
			c = fp_csum_update16(c, o, n);
		}
		memcpy(buf, &c, 2);
		memset(buf, 0, 2);
		uint16_t full = fp_csum(buf, len);
		if (full == 0xffff && c == 0) {
			/* The corner documented in cksum.h, and only for all-zero data. */
			for (size_t i = 2; i < len; i++)
				assert_int_equal(buf[i], 0);
			corner++;
			continue;
		}
		assert_int_equal(c, full);
		memcpy(buf, &c, 2);
		assert_int_equal(fp_csum(buf, len), 0);
	}
	print_message("# all-zero corner met %d times\n", corner);
}

/* RFC 1071 §4.1 as written: 16-bit words as the CPU loads them, 32-bit accumulator, fold. */
static uint16_t ref_csum(const uint8_t *p, size_t len, uint32_t sum)
{
	uint64_t acc = sum;

	for (; len >= 2; p += 2, len -= 2) {
		uint16_t w;
		memcpy(&w, p, 2);
		acc += w;
	}
	if (len) {
		uint16_t w = 0;
		memcpy(&w, p, 1);
		acc += w;
	}
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return (uint16_t)~acc;
}

/* The word-wide sum (an add-with-carry chain on x86-64) equals the plain 16-bit sum, at
 * every length and alignment, from any running sum, on data that carries out of every
 * word (all 0xff) as well as on random bytes. */
static void matches_reference(void **state)
{
	(void)state;
	uint64_t seed = fp_test_seed() ^ 3;
	static uint8_t buf[600];

	for (int iter = 0; iter < 50000; iter++) {
		size_t off = fp_test_below(&seed, 8), len = fp_test_below(&seed, sizeof(buf) - 8);
		int fill = iter % 4;
		for (size_t i = 0; i < len; i++)
			buf[off + i] = fill == 0 ? 0xff : fill == 1 ? 0 : (uint8_t)fp_test_rand(&seed);
		uint32_t start = iter & 1 ? (uint32_t)fp_test_rand(&seed) >> 15 : 0;
		uint16_t got = fp_csum_fold(fp_csum_partial(buf + off, len, start));
		uint16_t want = ref_csum(buf + off, len, start);
		/* one's complement has two zeros: the fold of an all-zero sum may be either */
		if (got != want && !((got == 0 || got == 0xffff) && (want == 0 || want == 0xffff)))
			print_error("len %zu off %zu start %#x: %#x != %#x\n", len, off, start, got,
				    want);
		assert_true(got == want || ((got == 0 || got == 0xffff) && (want == 0 || want == 0xffff)));
		if (len >= 20)   /* the inline 20-byte form (IPv4 headers) */
			assert_int_equal(fp_csum20(buf + off), fp_csum(buf + off, 20));
		/* the inline word form (TCP headers), as a running sum to combine */
		uint16_t words = fp_csum_fold(fp_csum_combine(fp_csum_words(buf + off, len / 4),
							      start, 0));
		want = ref_csum(buf + off, len / 4 * 4, start);
		assert_true(words == want ||
			    ((words == 0 || words == 0xffff) && (want == 0 || want == 0xffff)));
	}
}

/* Summing a buffer in pieces split at any byte, odd offsets included, equals the whole. */
static void split_sums(void **state)
{
	(void)state;
	uint64_t seed = fp_test_seed() ^ 1;
	uint8_t buf[300];

	for (int iter = 0; iter < 20000; iter++) {
		size_t len = 1 + fp_test_below(&seed, sizeof(buf));
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)fp_test_rand(&seed);
		uint32_t whole = fp_csum_partial(buf, len, 0);
		size_t a = fp_test_below(&seed, len + 1), b = a + fp_test_below(&seed, len - a + 1);
		uint32_t s = fp_csum_partial(buf, a, 0);
		s = fp_csum_combine(s, fp_csum_partial(buf + a, b - a, 0), a);
		s = fp_csum_combine(s, fp_csum_partial(buf + b, len - b, 0), b);
		assert_int_equal(fp_csum_fold(s), fp_csum_fold(whole));
	}
}

/* A map's sum of any range, odd offsets and lengths included, checksums as the range's own
 * sum does once a nonzero header sum is added (the two may differ only as 0 and 0xffff,
 * one's complement's two zeros); data of all 0xff and all 0 bytes meets those corners. */
static void map_sums_equal_direct_sums(void **state)
{
	(void)state;
	uint64_t seed = fp_test_seed() ^ 2;
	static uint8_t buf[5000];
	struct fp_csum_map m;

	for (int fill = 0; fill < 3; fill++) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = fill == 0 ? (uint8_t)fp_test_rand(&seed) : fill == 1 ? 0xff : 0;
		size_t len = fill == 0 ? sizeof(buf) : sizeof(buf) - 7;
		assert_int_equal(fp_csum_map_init(&m, buf, len), 0);
		for (int iter = 0; iter < 20000; iter++) {
			size_t off = fp_test_below(&seed, len + 1);
			size_t n = fp_test_below(&seed, len - off + 1);
			if (iter < 3)
				off = iter == 2 ? len : 0, n = iter == 1 ? len : 0;
			uint32_t h = 0x1234 + (uint32_t)(iter & 0xff);
			uint32_t want = fp_csum_fold(fp_csum_combine(h, fp_csum_partial(buf + off, n, 0), 20));
			uint32_t got = fp_csum_fold(fp_csum_combine(h, fp_csum_map_sum(&m, off, n), 20));
			if (got != want)
				print_error("fill %d off %zu len %zu: %#x != %#x\n", fill, off, n, got, want);
			assert_int_equal(got, want);
		}
		fp_csum_map_free(&m);
	}
}

/* An index finds the map holding a whole range, and nothing for a range that leaves it,
 * lies between maps, or before the first; nothing until sealed. */
static void index_finds_the_holding_map(void **state)
{
	(void)state;
	static uint8_t area[1000];
	struct fp_csum_index ix = { 0 };

	assert_int_equal(fp_csum_index_add(&ix, area + 500, 100), 0);
	assert_int_equal(fp_csum_index_add(&ix, area + 100, 100), 0);
	assert_int_equal(fp_csum_index_add(&ix, area + 300, 0), 0);      /* skipped */
	assert_int_equal(fp_csum_index_add(&ix, area + 700, 300), 0);
	assert_null(fp_csum_index_find(&ix, area + 150, 10));
	fp_csum_index_seal(&ix);
	assert_int_equal(ix.n, 3);
	const struct fp_csum_map *m = fp_csum_index_find(&ix, area + 150, 10);
	assert_non_null(m);
	assert_ptr_equal(m->data, area + 100);
	assert_ptr_equal(fp_csum_index_find(&ix, area + 100, 100)->data, area + 100);
	assert_ptr_equal(fp_csum_index_find(&ix, area + 999, 1)->data, area + 700);
	assert_null(fp_csum_index_find(&ix, area + 150, 51));             /* leaves it */
	assert_null(fp_csum_index_find(&ix, area + 250, 10));             /* between */
	assert_null(fp_csum_index_find(&ix, area + 50, 10));              /* before */
	assert_null(fp_csum_index_find(&ix, area + 650, 60));             /* across a gap */
	fp_csum_index_free(&ix);
	assert_null(fp_csum_index_find(&ix, area + 150, 10));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rfc1071_example),
		cmocka_unit_test(linux_packet),
		cmocka_unit_test(udp_pseudo_header),
		cmocka_unit_test(incremental_on_header),
		cmocka_unit_test(incremental_random),
		cmocka_unit_test(matches_reference),
		cmocka_unit_test(split_sums),
		cmocka_unit_test(map_sums_equal_direct_sums),
		cmocka_unit_test(index_finds_the_holding_map),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
