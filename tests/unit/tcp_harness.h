/* tcp_harness.h: helpers for TCP simulation tests: stacks on their own pools, seeded byte streams, a stream hash. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/net.h>
#include <flowplane/pool.h>
#include <flowplane/sim.h>

#include "harness.h"

/*
 * Each simulated host is a th_node: a pool of its own (the wire copies frames between
 * pools, as a NIC would), one cache, one stack. th_node_fini destroys the stack and fails
 * the test if any buffer of the pool is still out: the simulation tier's leak check.
 *
 * Data is a seeded byte stream per (connection, direction) that either end can generate
 * at any offset (a counter-based generator), so the receiver checks every byte where it
 * lands and the first wrong offset is reported; both ends also keep a 64-bit hash of the
 * whole stream (th_hash) to compare at the end.
 */

#define TH_NET_PREFIX 24
#define TH_BUF_SIZE   2048u

struct th_node {
	struct fp_pool *pool;
	struct fp_pool_cache cache;
	struct fp_stack *st;
	uint32_t ip;
	struct fp_eth_addr mac;
};

/* The config a node gets before a test adjusts it: 10.0.0.@host/24, fixed secret. */
static inline struct fp_stack_config th_config(struct th_node *n, uint8_t host)
{
	n->ip = 0x0a000000u | host;
	n->mac = (struct fp_eth_addr){{ 0x02, 0, 0, 0, 0, host }};
	return (struct fp_stack_config){ .mac = n->mac, .ipv4 = n->ip,
					 .prefix_len = TH_NET_PREFIX,
					 .secret = 0x7c9e1000u + host };
}

/* Pool of @n_bufs buffers, then a stack from @cfg (its cache field is filled in). */
static inline void th_node_init(struct th_node *n, uint32_t n_bufs, struct fp_stack_config cfg,
				uint64_t now_us)
{
	struct fp_pool_params pp = { .name = "th", .n_bufs = n_bufs, .buf_size = TH_BUF_SIZE,
				     .mag_size = 64, .max_caches = 2 };

	n->pool = fp_pool_create(&pp);
	assert_non_null(n->pool);
	assert_int_equal(fp_pool_cache_init(&n->cache, n->pool), 0);
	cfg.cache = &n->cache;
	n->ip = cfg.ipv4;
	n->mac = cfg.mac;
	n->st = fp_stack_create(&cfg, now_us);
	assert_non_null(n->st);
}

/* Destroy the stack and the pool; a buffer still out fails the test. */
static inline void th_node_fini(struct th_node *n)
{
	fp_stack_destroy(n->st);
	n->st = NULL;
	uint64_t leaked = fp_pool_in_use(n->pool);
	fp_pool_cache_flush(&n->cache);
	fp_pool_destroy(n->pool);
	n->pool = NULL;
	if (leaked) {
		print_error("leak check: %llu buffer(s) not returned\n", (unsigned long long)leaked);
		fail();
	}
}

static inline struct fp_net_stats th_stats(const struct th_node *n)
{
	struct fp_net_stats s;

	fp_stack_stats(n->st, &s);
	return s;
}

/* ---- streams ---- */

static inline uint64_t th_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Byte @off.. of stream @key: word k of the stream is th_mix(key + k * golden). */
static inline void th_stream_fill(uint64_t key, uint64_t off, uint8_t *out, size_t len)
{
	size_t i = 0;

	while (i < len) {
		uint64_t k = (off + i) / 8, w = th_mix(key + (k + 1) * 0x9e3779b97f4a7c15ull);
		unsigned b = (unsigned)((off + i) % 8);
		if (b == 0 && len - i >= 8) {
			memcpy(out + i, &w, 8);
			i += 8;
			continue;
		}
		for (; b < 8 && i < len; b++, i++)
			out[i] = (uint8_t)(w >> (8 * b));
	}
}

/* Offset of the first byte of @buf that differs from the stream, or -1. */
static inline long long th_stream_check(uint64_t key, uint64_t off, const uint8_t *buf, size_t len)
{
	uint8_t exp[2048];

	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof(exp) ? len - done : sizeof(exp);
		th_stream_fill(key, off + done, exp, n);
		if (memcmp(exp, buf + done, n)) {
			for (size_t i = 0; i < n; i++)
				if (exp[i] != buf[done + i])
					return (long long)(off + done + i);
		}
		done += n;
	}
	return -1;
}

/* A 64-bit hash of a byte stream fed in pieces of any size: words of 8 bytes (little
 * endian, the tail zero-padded with its length mixed in) folded by multiply-rotate. Two
 * streams hash alike only if they are the same bytes, whatever the pieces were. */
struct th_hash {
	uint64_t h, n;
	uint64_t word;
	unsigned fill;
};

static inline void th_hash_word(struct th_hash *s, uint64_t w)
{
	s->h = (s->h ^ th_mix(w)) * 0x100000001b3ull;
	s->h = (s->h << 29) | (s->h >> 35);
}

static inline void th_hash_feed(struct th_hash *s, const uint8_t *p, size_t len)
{
	s->n += len;
	while (len && s->fill) {
		s->word |= (uint64_t)*p++ << (8 * s->fill);
		len--;
		if (++s->fill == 8) {
			th_hash_word(s, s->word);
			s->word = 0;
			s->fill = 0;
		}
	}
	for (; len >= 8; len -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		th_hash_word(s, w);
	}
	for (; len; len--) {
		s->word |= (uint64_t)*p++ << (8 * s->fill);
		s->fill++;
	}
}

static inline uint64_t th_hash_final(const struct th_hash *s)
{
	struct th_hash t = *s;

	if (t.fill)
		th_hash_word(&t, t.word);
	th_hash_word(&t, t.n);
	return t.h;
}

/* Byte counts from the environment (FP_SIM_BYTES and the like), with a default. */
static inline uint64_t th_env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : dflt;
}
