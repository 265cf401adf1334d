/* micro_ring.c: ring burst costs, same-core and across two cores. */
#include <pthread.h>
#include <stdlib.h>

#include <flowplane/clock.h>
#include <flowplane/ring.h>

#include "bench.h"

#define BURST 32

static void sp_burst(void *arg, uint64_t n_ops)
{
	struct fp_ring *r = arg;
	void *objs[BURST];
	for (unsigned i = 0; i < BURST; i++)
		objs[i] = (void *)(uintptr_t)(i + 1);
	for (uint64_t done = 0; done < n_ops; done += BURST) {
		fp_ring_sp_enqueue_burst(r, objs, BURST);
		bench_sink(fp_ring_dequeue_burst(r, objs, BURST));
	}
}

static void mp_burst(void *arg, uint64_t n_ops)
{
	struct fp_ring *r = arg;
	void *objs[BURST];
	for (unsigned i = 0; i < BURST; i++)
		objs[i] = (void *)(uintptr_t)(i + 1);
	for (uint64_t done = 0; done < n_ops; done += BURST) {
		fp_ring_mp_enqueue_burst(r, objs, BURST);
		bench_sink(fp_ring_dequeue_burst(r, objs, BURST));
	}
}

struct xcore {
	struct fp_ring *r;
	uint64_t n;
	int cpu;
};

static int other_cpu = -1;

static void *xcore_consumer(void *p)
{
	struct xcore *x = p;
	void *objs[BURST];
	if (x->cpu >= 0)
		bench_pin(x->cpu);
	for (uint64_t got = 0; got < x->n;) {
		unsigned k = fp_ring_dequeue_burst(x->r, objs, BURST);
		if (!k)
			fp_cpu_relax();
		got += k;
	}
	return NULL;
}

/* Producer here, consumer on another thread: throughput per element across cores. */
static void sp_cross_core(void *arg, uint64_t n_ops)
{
	struct xcore x = { arg, n_ops, other_cpu };
	void *objs[BURST];
	pthread_t th;

	for (unsigned i = 0; i < BURST; i++)
		objs[i] = (void *)(uintptr_t)(i + 1);
	pthread_create(&th, NULL, xcore_consumer, &x);
	for (uint64_t sent = 0; sent < n_ops;) {
		unsigned want = n_ops - sent < BURST ? (unsigned)(n_ops - sent) : BURST;
		unsigned k = fp_ring_sp_enqueue_burst(x.r, objs, want);
		if (!k)
			fp_cpu_relax();
		sent += k;
	}
	pthread_join(th, NULL);
}

void bench_ring(const struct bench_opts *o)
{
	struct fp_ring *s = fp_ring_create(1024);
	struct fp_ring *m = fp_ring_create(1024);

	bench_case(o, "ring sp burst32 enq+deq (per element)", sp_burst, s, 1u << 22);
	bench_case(o, "ring mp burst32 enq+deq (per element)", mp_burst, m, 1u << 22);
	other_cpu = bench_other_cpu(o);
	bench_case(o, "ring sp burst32 across 2 threads (per element)", sp_cross_core, s,
		   1u << 22);
	free(s);
	free(m);
}
