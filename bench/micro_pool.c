/* micro_pool.c: buffer pool costs on the owning core: single, bulk, and the depot path. */
#include <flowplane/pool.h>

#include "bench.h"

struct pool_bench {
	struct fp_pool *pool;
	struct fp_pool_cache cache;
};

static void get_put(void *arg, uint64_t n_ops)
{
	struct pool_bench *b = arg;
	for (uint64_t i = 0; i < n_ops; i++) {
		struct fp_mbuf *m = fp_pool_get(&b->cache);
		bench_sink((uintptr_t)m);
		fp_mbuf_free(&b->cache, m);
	}
}

/* A receive burst: take 32, return 32 (per buffer). */
static void bulk32(void *arg, uint64_t n_ops)
{
	struct pool_bench *b = arg;
	struct fp_mbuf *ms[32];
	for (uint64_t i = 0; i < n_ops; i += 32) {
		unsigned n = fp_pool_get_bulk(&b->cache, ms, 32);
		for (unsigned k = 0; k < n; k++)
			ms[k]->refcnt = 0;
		fp_pool_put_bulk(&b->cache, ms, n);
	}
}

/* 256 buffers out, 256 back: every magazine crosses the depot (the locked slow path). */
static void depot_churn(void *arg, uint64_t n_ops)
{
	struct pool_bench *b = arg;
	struct fp_mbuf *ms[256];
	for (uint64_t i = 0; i < n_ops; i += 256) {
		unsigned n = fp_pool_get_bulk(&b->cache, ms, 256);
		for (unsigned k = 0; k < n; k++)
			fp_mbuf_free(&b->cache, ms[k]);
	}
}

void bench_pool(const struct bench_opts *o)
{
	struct fp_pool_params p = { .name = "bench", .n_bufs = 4096, .buf_size = 2048,
				    .mag_size = 64, .max_caches = 2 };
	struct pool_bench b = { .pool = fp_pool_create(&p) };

	if (!b.pool || fp_pool_cache_init(&b.cache, b.pool))
		return;
	bench_case(o, "pool get+free (one buffer)", get_put, &b, 1u << 22);
	bench_case(o, "pool get_bulk32+put_bulk32 (per buffer)", bulk32, &b, 1u << 22);
	bench_case(o, "pool 256 out/in via depot (per buffer)", depot_churn, &b, 1u << 21);
	fp_pool_cache_flush(&b.cache);
	fp_pool_destroy(b.pool);
}
