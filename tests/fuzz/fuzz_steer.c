/* fuzz_steer.c: the flow-group classifier (rt/steer.c) and the ARP learning it feeds, on arbitrary frames. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/net.h>
#include <flowplane/pool.h>
#include <flowplane/rss.h>
#include <flowplane/wire.h>

#include "defs.h"

/*
 * Every frame a worker receives goes through rt_steer_classify() before the stack sees it,
 * so it reads whatever the wire brings. For each input it checks what steer.c promises:
 *   - the result is RT_STEER_HERE, RT_STEER_ARP or a group in 0..FP_RSS_GROUPS-1;
 *   - a frame that has a group has the same group with its addresses and its ports
 *     swapped (the symmetric key: a reply comes home to the same worker);
 *   - fp_stack_arp_learn() on the same bytes neither crashes nor sends anything, and
 *     leaves the buffer to the caller.
 */
#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz_steer: %s\n", #x); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fp_rss rss;
	static struct fp_pool *pool;
	static struct fp_pool_cache cache;
	static struct fp_stack *st;
	static uint8_t frame[2048];

	if (!pool) {
		struct fp_pool_params p = { .name = "fuzz", .n_bufs = 64, .buf_size = 4096 };
		fp_rss_init(&rss, fp_rss_key_symmetric);
		pool = fp_pool_create(&p);
		CHECK(pool && fp_pool_cache_init(&cache, pool) == 0);
		struct fp_stack_config cfg = {
			.mac = {{ 0x02, 0, 0, 0, 0, 1 }}, .ipv4 = 0x0a000001, .prefix_len = 24,
			.cache = &cache, .max_conns = 4, .secret = 7,
		};
		CHECK((st = fp_stack_create(&cfg, 0)) != NULL);
	}
	if (size > sizeof(frame))
		size = sizeof(frame);
	memcpy(frame, data, size);

	int g = rt_steer_classify(&rss, frame, (uint32_t)size);
	CHECK(g == RT_STEER_HERE || g == RT_STEER_ARP || (g >= 0 && g < FP_RSS_GROUPS));
	if (g >= 0) {
		/* swap addresses and ports in place (a group means an IPv4 TCP/UDP header) */
		struct fp_eth eth;
		CHECK(fp_eth_parse(frame, size, &eth) == 0);
		uint8_t *ip = frame + eth.hdr_len, t[4];
		unsigned ihl = (ip[0] & 0xf) * 4u;
		memcpy(t, ip + 12, 4);
		memmove(ip + 12, ip + 16, 4);
		memcpy(ip + 16, t, 4);
		memcpy(t, ip + ihl, 2);
		memmove(ip + ihl, ip + ihl + 2, 2);
		memcpy(ip + ihl + 2, t, 2);
		CHECK(rt_steer_classify(&rss, frame, (uint32_t)size) == g);
	}

	struct fp_mbuf *m = fp_pool_get(&cache);
	CHECK(m != NULL);
	uint32_t n = size < m->buf_len - m->data_off ? (uint32_t)size : m->buf_len - m->data_off;
	memcpy(fp_mbuf_data(m), data, n);
	m->data_len = m->pkt_len = n;
	fp_stack_arp_learn(st, m);
	fp_mbuf_free(&cache, m);
	/* the stack's gratuitous ARP at creation is all it may ever have queued */
	struct fp_mbuf *out;
	while (fp_stack_tx(st, &out, 1) == 1)
		fp_mbuf_free(&cache, out);
	return 0;
}
