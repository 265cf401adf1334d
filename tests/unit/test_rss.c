/* test_rss.c: Toeplitz hash against Microsoft's RSS verification suite; symmetric key. */
#include <arpa/inet.h>
#include <string.h>

#include <flowplane/rss.h>

#include "harness.h"

struct rss_vector {
	const char *dst, *src;
	uint16_t dport, sport;
	uint32_t ipv4_l4, ipv4;
};

/* "Verifying the RSS Hash Calculation", Microsoft RSS documentation (IPv4 table). */
static const struct rss_vector ms_vectors[] = {
	{ "161.142.100.80", "66.9.149.187", 1766, 2794, 0x51ccc178, 0x323e8fc2 },
	{ "65.69.140.83", "199.92.111.2", 4739, 14230, 0xc626b0ea, 0xd718262a },
	{ "12.22.207.184", "24.19.198.95", 38024, 12898, 0x5c2b394a, 0xd2d0a5de },
	{ "209.142.163.6", "38.27.205.30", 2217, 48228, 0xafc7327f, 0x82989176 },
	{ "202.188.127.2", "153.39.163.191", 1303, 44251, 0x10e828a2, 0x5d1809c5 },
};

static uint32_t addr(const char *s)
{
	struct in_addr a;
	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static void microsoft_vectors(void **state)
{
	(void)state;
	struct fp_rss r;
	fp_rss_init(&r, fp_rss_key_default);

	for (size_t i = 0; i < FP_ARRAY_SIZE(ms_vectors); i++) {
		const struct rss_vector *v = &ms_vectors[i];
		uint32_t s = addr(v->src), d = addr(v->dst);
		assert_int_equal(fp_rss_ipv4(&r, s, d), v->ipv4);
		assert_int_equal(fp_rss_ipv4_l4(&r, s, d, htons(v->sport), htons(v->dport)),
				 v->ipv4_l4);
		/* The bit-by-bit reference agrees with the tables. */
		uint8_t in[12];
		memcpy(in, &s, 4);
		memcpy(in + 4, &d, 4);
		in[8] = (uint8_t)(v->sport >> 8), in[9] = (uint8_t)v->sport;
		in[10] = (uint8_t)(v->dport >> 8), in[11] = (uint8_t)v->dport;
		assert_int_equal(fp_toeplitz(fp_rss_key_default, FP_RSS_KEY_LEN, in, 12), v->ipv4_l4);
		assert_int_equal(fp_toeplitz(fp_rss_key_default, FP_RSS_KEY_LEN, in, 8), v->ipv4);
	}
}

/* Both directions of a flow hash alike with the symmetric key, and not with the default. */
static void symmetric_key(void **state)
{
	(void)state;
	struct fp_rss sym, def;
	uint64_t seed = fp_test_seed();
	int asymmetric = 0;

	fp_rss_init(&sym, fp_rss_key_symmetric);
	fp_rss_init(&def, fp_rss_key_default);
	for (int i = 0; i < 100000; i++) {
		uint32_t a = (uint32_t)fp_test_rand(&seed), b = (uint32_t)fp_test_rand(&seed);
		uint16_t p = (uint16_t)fp_test_rand(&seed), q = (uint16_t)fp_test_rand(&seed);
		assert_int_equal(fp_rss_ipv4_l4(&sym, a, b, p, q), fp_rss_ipv4_l4(&sym, b, a, q, p));
		assert_int_equal(fp_rss_ipv4(&sym, a, b), fp_rss_ipv4(&sym, b, a));
		asymmetric += fp_rss_ipv4_l4(&def, a, b, p, q) != fp_rss_ipv4_l4(&def, b, a, q, p);
	}
	assert_true(asymmetric > 99000);
}

/* The symmetric key still spreads flows: low bits (queue choice) are close to uniform. */
static void symmetric_spreads(void **state)
{
	(void)state;
	struct fp_rss sym;
	uint64_t seed = fp_test_seed() + 7;
	unsigned buckets[16] = { 0 };

	fp_rss_init(&sym, fp_rss_key_symmetric);
	for (int i = 0; i < 160000; i++) {
		uint32_t h = fp_rss_ipv4_l4(&sym, htonl(0x0a000001), htonl(0x0a000002),
					    (uint16_t)fp_test_rand(&seed), htons(11211));
		buckets[h & 15]++;
	}
	for (int i = 0; i < 16; i++) /* expected 10000 each; 5 sigma is about 500 */
		assert_in_range(buckets[i], 9000, 11000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(microsoft_vectors),
		cmocka_unit_test(symmetric_key),
		cmocka_unit_test(symmetric_spreads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
