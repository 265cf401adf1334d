/* micro_steer.c: the cost of flow groups in software (rt/steer.c): classifying a frame, and handing it to another worker. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/net.h>
#include <flowplane/pool.h>
#include <flowplane/ring.h>
#include <flowplane/rss.h>
#include <flowplane/rt.h>

#include "bench.h"
#include "defs.h"

/*
 * Three cases, per frame, on a 78-byte TCP segment (a request's size):
 *   classify       rt_steer_classify alone: what every received frame pays once flow
 *                  groups are on, handed over or not
 *   hand-over, one thread   rt_steer_rx (classify, ring enqueue) then rt_steer_take and
 *                  the free into the owner's pool (its depot lock): the instructions of a
 *                  hand-over, no cache line crossing cores
 *   hand-over, two threads  worker 0's thread receives (takes buffers from its pool) and
 *                  hands every frame to worker 1's thread, which takes and frees them: the
 *                  lines cross cores as in a run
 * The difference between the last two and the first is the hand-over's own cost.
 */
#define BURST 32

struct steer_bench {
	struct fp_rt_config cfg;
	struct rt_run run;
	struct fp_pool *pool[2];
	struct fp_pool_cache cache[2];
	struct fp_rt_worker_stats st[2];
	uint8_t frame[78];
	int cpu1;
	atomic_bool done;
};

static void make_frame(uint8_t *f)
{
	static const uint8_t hdr[] = {
		2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00,            /* eth */
		0x45, 0, 0, 64, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 88, 0, 12,  /* ipv4 */
		10, 88, 0, 1,
		0x9c, 0x40, 0, 7,                                           /* tcp ports */
	};
	memset(f, 0, 78);
	memcpy(f, hdr, sizeof(hdr));
}

static void classify(void *arg, uint64_t n)
{
	struct steer_bench *b = arg;
	const struct fp_rss *rss = NULL;
	struct fp_rss r;

	fp_rss_init(&r, fp_rss_key_symmetric);
	rss = &r;
	for (uint64_t i = 0; i < n; i++) {
		b->frame[34] = (uint8_t)i;   /* a different source port each time */
		bench_sink((uint64_t)rt_steer_classify(rss, b->frame, sizeof(b->frame)));
	}
}

static unsigned fill(struct steer_bench *b, struct fp_mbuf **ms, uint64_t base)
{
	unsigned k = 0;

	for (; k < BURST; k++) {
		struct fp_mbuf *m = fp_pool_get(&b->cache[0]);
		if (!m)
			break;
		memcpy(fp_mbuf_data(m), b->frame, sizeof(b->frame));
		fp_mbuf_data(m)[34] = (uint8_t)(base + k);
		m->data_len = m->pkt_len = sizeof(b->frame);
		ms[k] = m;
	}
	return k;
}

static void one_thread(void *arg, uint64_t n)
{
	struct steer_bench *b = arg;
	struct fp_mbuf *ms[BURST];

	for (uint64_t done = 0; done < n; done += BURST) {
		unsigned k = fill(b, ms, done);
		bench_sink(rt_steer_rx(b->run.steer, 0, &b->cache[0], ms, k, &b->st[0]));
		unsigned got = rt_steer_take(b->run.steer, 1, NULL, NULL, &b->cache[1], ms, BURST, 0,
					     &b->st[1]);
		for (unsigned i = 0; i < got; i++)
			fp_mbuf_free(&b->cache[1], ms[i]);
	}
}

static void *taker(void *arg)
{
	struct steer_bench *b = arg;
	struct fp_mbuf *ms[BURST];

	if (b->cpu1 >= 0)
		bench_pin(b->cpu1);
	for (;;) {
		unsigned got = rt_steer_take(b->run.steer, 1, NULL, NULL, &b->cache[1], ms, BURST, 0,
					     &b->st[1]);
		for (unsigned i = 0; i < got; i++)
			fp_mbuf_free(&b->cache[1], ms[i]);
		if (!got) {
			if (atomic_load(&b->done))
				break;
			fp_cpu_relax();
		}
	}
	return NULL;
}

static void two_threads(void *arg, uint64_t n)
{
	struct steer_bench *b = arg;
	struct fp_mbuf *ms[BURST];
	pthread_t th;

	atomic_store(&b->done, false);
	pthread_create(&th, NULL, taker, b);
	for (uint64_t done = 0; done < n;) {
		unsigned k = fill(b, ms, done);
		if (!k) {
			fp_cpu_relax();   /* the pool is in flight: wait for the taker's frees */
			continue;
		}
		uint64_t before = b->st[0].steer_out;
		rt_steer_rx(b->run.steer, 0, &b->cache[0], ms, k, &b->st[0]);
		done += b->st[0].steer_out - before;   /* a full ring dropped (freed) the rest */
	}
	atomic_store(&b->done, true);
	pthread_join(th, NULL);
}

void bench_steer(const struct bench_opts *o)
{
	struct steer_bench *b = calloc(1, sizeof(*b));
	char err[200];

	fp_rt_config_init(&b->cfg);
	b->cfg.n_workers = 2;
	b->cfg.steer_weights[0] = 0;   /* every group on worker 1: every frame is handed over */
	b->cfg.steer_weights[1] = 1;
	b->cfg.n_steer_weights = 2;
	b->run.cfg = &b->cfg;
	for (int i = 0; i < 2; i++) {
		struct fp_pool_params p = { .name = i ? "w1" : "w0", .n_bufs = 4096,
					    .buf_size = 2048 };
		b->pool[i] = fp_pool_create(&p);
		if (!b->pool[i] || fp_pool_cache_init(&b->cache[i], b->pool[i]))
			abort();
	}
	if (rt_steer_create(&b->run, err, sizeof(err)))
		abort();
	make_frame(b->frame);
	bench_case(o, "steer classify a TCP frame (per frame)", classify, b, 1u << 22);
	bench_case(o, "steer hand-over, one thread (per frame)", one_thread, b, 1u << 21);
	b->cpu1 = bench_other_cpu(o);
	bench_case(o, "steer hand-over across 2 threads (per frame)", two_threads, b, 1u << 21);
	rt_steer_destroy(&b->run);
	for (int i = 0; i < 2; i++) {
		fp_pool_cache_flush(&b->cache[i]);
		fp_pool_destroy(b->pool[i]);
	}
	free(b);
}
