/* test_nic_rss.c: the NIC's RSS programmed as the flow groups steer (dev/nic_rss.c), against a fake NIC that hashes and delivers like one. */
#include <errno.h>
#include <linux/ethtool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include <flowplane/dev.h>
#include <flowplane/rss.h>

#define HASH_TOP 1u
#define HASH_XOR 2u
#define SDFN (RXH_IP_SRC | RXH_IP_DST | RXH_L4_B_0_1 | RXH_L4_B_2_3)
#define SD   (RXH_IP_SRC | RXH_IP_DST)

/* A NIC as ethtool sees it, and what it does with a frame's 4-tuple. */
struct fake_nic {
	uint32_t indir_size, key_size, n_queues;
	uint32_t indir[1024];
	uint8_t key[64];
	uint8_t hfunc;
	uint64_t fields[2];          /* TCP, UDP over IPv4 */
	/* what it cannot do */
	bool no_rss, tcp_fixed, udp_fixed, ignore_key, refuse_set;
	unsigned sets;               /* SRSSH and SRXFH it took */
};

static int fake_rxfh(struct fake_nic *n, struct ethtool_rxfh *r)
{
	if (n->no_rss)
		return -EOPNOTSUPP;
	if (r->cmd == ETHTOOL_GRSSH) {
		if (r->indir_size || r->key_size) {
			if (r->indir_size != n->indir_size || r->key_size != n->key_size)
				return -EINVAL;
			memcpy(r->rss_config, n->indir, n->indir_size * 4);
			memcpy((uint8_t *)&r->rss_config[n->indir_size], n->key, n->key_size);
		}
		r->indir_size = n->indir_size;
		r->key_size = n->key_size;
		r->hfunc = n->hfunc;
		return 0;
	}
	if (n->refuse_set)
		return -EPERM;
	if (r->rss_context || (r->indir_size != ETH_RXFH_INDIR_NO_CHANGE && r->indir_size != n->indir_size) ||
	    (r->key_size && r->key_size != n->key_size) || r->hfunc > HASH_XOR)
		return -EINVAL;
	if (r->indir_size != ETH_RXFH_INDIR_NO_CHANGE) {
		for (uint32_t i = 0; i < n->indir_size; i++)
			if (r->rss_config[i] >= n->n_queues)
				return -EINVAL;
		memcpy(n->indir, r->rss_config, n->indir_size * 4);
	}
	if (r->key_size && !n->ignore_key)
		memcpy(n->key, (uint8_t *)&r->rss_config[n->indir_size == ETH_RXFH_INDIR_NO_CHANGE ? 0 : n->indir_size], n->key_size);
	if (r->hfunc)
		n->hfunc = r->hfunc;
	n->sets++;
	return 0;
}

static int fake_call(void *arg, void *cmd)
{
	struct fake_nic *n = arg;
	uint32_t c;

	memcpy(&c, cmd, sizeof(c));
	if (c == ETHTOOL_GRSSH || c == ETHTOOL_SRSSH)
		return fake_rxfh(n, cmd);
	if (c == ETHTOOL_GRXFH || c == ETHTOOL_SRXFH) {
		struct ethtool_rxnfc *f = cmd;
		unsigned i = f->flow_type == UDP_V4_FLOW;
		if (f->flow_type != TCP_V4_FLOW && f->flow_type != UDP_V4_FLOW)
			return -EINVAL;
		if (c == ETHTOOL_GRXFH)
			return f->data = n->fields[i], 0;
		if (i ? n->udp_fixed : n->tcp_fixed)
			return -EOPNOTSUPP;
		n->fields[i] = f->data;
		n->sets++;
		return 0;
	}
	return -EOPNOTSUPP;
}

/* The queue the NIC puts a frame of this 4-tuple on (addresses and ports big-endian, as
 * on the wire). */
static uint32_t fake_queue(const struct fake_nic *n, bool udp, const uint8_t tuple[12])
{
	uint64_t f = n->fields[udp];
	size_t len = (f & SDFN) == SDFN ? 12 : 8;
	uint32_t h = 0;

	if (n->hfunc == HASH_TOP)
		h = fp_toeplitz(n->key, n->key_size, tuple, len);
	else
		for (size_t i = 0; i < len; i++)
			h = (h << 5 | h >> 27) ^ tuple[i];
	return n->indir[h % n->indir_size];
}

/* Most NICs out of the box: 512 entries spread over 8 queues, a random-looking key, TCP
 * on the 4-tuple, UDP on addresses only. */
static void nic_init(struct fake_nic *n, uint8_t hfunc)
{
	memset(n, 0, sizeof(*n));
	n->indir_size = 512;
	n->key_size = FP_RSS_KEY_LEN;
	n->n_queues = 8;
	for (uint32_t i = 0; i < n->indir_size; i++)
		n->indir[i] = i % n->n_queues;
	memcpy(n->key, fp_rss_key_default, FP_RSS_KEY_LEN);
	n->hfunc = hfunc;
	n->fields[0] = SDFN;
	n->fields[1] = SD;
}

/* rt/steer.c's table on 5 workers from queue 2 (--queue-base 2), weighted unevenly. */
static void groups_init(uint16_t q[FP_RSS_GROUPS])
{
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
		q[g] = (uint16_t)(2 + (g * 7 / 3) % 5);
}

static void tuple_rand(uint8_t t[12], uint64_t *s)
{
	uint64_t a = fp_test_rand(s), b = fp_test_rand(s);

	memcpy(t, &a, 8);
	memcpy(t + 8, &b, 4);
}

/* Every frame lands on its group's queue, in both directions of its flow. */
static void check_steers(const struct fake_nic *n, const uint16_t q[FP_RSS_GROUPS], bool udp)
{
	struct fp_rss sym;
	uint64_t seed = fp_test_seed();

	fp_rss_init(&sym, fp_rss_key_symmetric);
	for (unsigned k = 0; k < 5000; k++) {
		uint8_t t[12], r[12];
		uint32_t sa, da;
		uint16_t sp, dp;
		tuple_rand(t, &seed);
		memcpy(&sa, t, 4), memcpy(&da, t + 4, 4), memcpy(&sp, t + 8, 2), memcpy(&dp, t + 10, 2);
		unsigned g = fp_rss_group(fp_rss_ipv4_l4(&sym, sa, da, sp, dp));
		assert_int_equal(fake_queue(n, udp, t), q[g]);
		memcpy(r, t + 4, 4), memcpy(r + 4, t, 4), memcpy(r + 8, t + 10, 2), memcpy(r + 10, t + 8, 2);
		assert_int_equal(fake_queue(n, udp, r), q[g]);
	}
}

static struct fp_nic_rss *program(struct fake_nic *n, const uint16_t q[], char *why)
{
	struct fp_ethtool io = { fake_call, n };

	why[0] = '\0';
	return fp_nic_rss_program(&io, fp_rss_key_symmetric, q, why, 200);
}

static void programs_the_groups_and_puts_everything_back(void **st)
{
	(void)st;
	for (unsigned hf = HASH_TOP; hf <= HASH_XOR; hf++) {
		struct fake_nic n, before;
		uint16_t q[FP_RSS_GROUPS];
		char why[200];
		nic_init(&n, (uint8_t)hf);
		before = n;
		groups_init(q);
		struct fp_nic_rss *s = program(&n, q, why);
		assert_non_null(s);
		assert_int_equal(fp_nic_rss_entries(s), 512);
		assert_true(fp_nic_rss_udp(s));
		assert_int_equal(n.hfunc, HASH_TOP);
		check_steers(&n, q, false);
		check_steers(&n, q, true);
		fp_nic_rss_restore(s);
		n.sets = before.sets = 0;
		assert_memory_equal(&n, &before, sizeof(n));
	}
}

static void udp_left_on_addresses_still_steers_tcp(void **st)
{
	struct fake_nic n, before;
	uint16_t q[FP_RSS_GROUPS];
	char why[200];

	(void)st;
	nic_init(&n, HASH_TOP);
	n.udp_fixed = true;
	before = n;
	groups_init(q);
	struct fp_nic_rss *s = program(&n, q, why);
	assert_non_null(s);
	assert_false(fp_nic_rss_udp(s));
	check_steers(&n, q, false);
	fp_nic_rss_restore(s);
	n.sets = before.sets = 0;
	assert_memory_equal(&n, &before, sizeof(n));
}

/* Each refusal: NULL, the errno, a line naming what the NIC lacks, the NIC as it was. */
static void refuses_what_it_cannot_say(void **st)
{
	static const struct {
		const char *what;
		uint32_t indir, key;
		bool no_rss, tcp_fixed, ignore_key, refuse_set;
		int err;
		const char *says;
	} cases[] = {
		{ "veth", 512, 40, true, false, false, false, EOPNOTSUPP, "no RSS table" },
		{ "64 entries", 64, 40, false, false, false, false, EOPNOTSUPP, "64 entries" },
		{ "384 entries", 384, 40, false, false, false, false, 0, NULL },
		{ "52-byte key (i40e)", 512, 52, false, false, false, false, 0, NULL },
		{ "12-byte key", 512, 12, false, false, false, false, EOPNOTSUPP, "12 bytes" },
		{ "tcp on addresses", 512, 40, false, true, false, false, EOPNOTSUPP, "tcp4 sdfn" },
		{ "keeps its key", 512, 40, false, false, true, false, EIO, "did not keep" },
		{ "refuses", 512, 40, false, false, false, true, EPERM, "refused" },
	};

	(void)st;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fake_nic n, before;
		uint16_t q[FP_RSS_GROUPS];
		char why[200];
		nic_init(&n, HASH_XOR);
		n.indir_size = cases[i].indir;
		n.key_size = cases[i].key;
		n.no_rss = cases[i].no_rss;
		n.fields[0] = cases[i].tcp_fixed ? SD : SDFN;
		n.tcp_fixed = cases[i].tcp_fixed;
		n.ignore_key = cases[i].ignore_key;
		n.refuse_set = cases[i].refuse_set;
		before = n;
		groups_init(q);
		errno = 0;
		struct fp_nic_rss *s = program(&n, q, why);
		if (!cases[i].says) {   /* 384 = 3 x 128, a 52-byte key: fine */
			assert_non_null(s);
			check_steers(&n, q, false);
			fp_nic_rss_restore(s);
		} else {
			print_message("%s: %s\n", cases[i].what, why);
			assert_null(s);
			assert_int_equal(errno, cases[i].err);
			assert_non_null(strstr(why, cases[i].says));
		}
		n.sets = before.sets = 0;
		assert_memory_equal(&n, &before, sizeof(n));
	}
}

/* The real ioctl on an interface that is not there: an error, not a crash. */
static void ioctl_on_no_interface_fails(void **st)
{
	struct fp_ethtool io = { fp_ethtool_ioctl, (void *)"fp-no-such-if0" };
	uint16_t q[FP_RSS_GROUPS] = { 0 };
	char why[200];

	(void)st;
	assert_null(fp_nic_rss_program(&io, fp_rss_key_symmetric, q, why, sizeof(why)));
	assert_true(errno == ENODEV || errno == EOPNOTSUPP);
	assert_non_null(strstr(why, "no RSS table"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(programs_the_groups_and_puts_everything_back),
		cmocka_unit_test(udp_left_on_addresses_still_steers_tcp),
		cmocka_unit_test(refuses_what_it_cannot_say),
		cmocka_unit_test(ioctl_on_no_interface_fails),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
