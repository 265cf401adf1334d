/* micro_timer.c: timing wheel micro-benchmarks: add+cancel, add+fire, and run() on an idle wheel. */
#include <stdio.h>
#include <stdlib.h>

#include <flowplane/timer.h>

#include "bench.h"

#define SET         4096 /* timers a body cycles through, like one per connection */
#define BACKGROUND  4096 /* timers left pending, so the wheel is not empty */

struct timer_bench {
	struct fp_timer_wheel w;
	struct fp_timer set[SET];
	struct fp_timer bg[BACKGROUND];
	uint64_t now_us;
	uint64_t fired;
	uint64_t rng;
};

static struct timer_bench *B;

static uint64_t next_rand(void)
{
	B->rng ^= B->rng << 13; /* xorshift64: cheap enough not to show in the figures */
	B->rng ^= B->rng >> 7;
	B->rng ^= B->rng << 17;
	return B->rng;
}

static void count_fn(struct fp_timer *t, uint64_t now_us)
{
	(void)t;
	(void)now_us;
	B->fired++;
}

/* A background timer that fires is pushed far out again, so the pending count stays put. */
static void bg_fn(struct fp_timer *t, uint64_t now_us)
{
	fp_timer_add(&B->w, t, now_us + 100000000 + next_rand() % 3600000000ull);
}

static void add_cancel(uint64_t n_ops, uint64_t ahead_us)
{
	uint64_t now = B->now_us;

	for (uint64_t i = 0; i < n_ops; i++) {
		struct fp_timer *t = &B->set[i % SET];
		fp_timer_add(&B->w, t, now + ahead_us + (i % 64));
		fp_timer_cancel(&B->w, t);
	}
}

static void body_add_cancel_near(void *arg, uint64_t n_ops)
{
	(void)arg;
	add_cancel(n_ops, 1000);
}

static void body_add_cancel_far(void *arg, uint64_t n_ops)
{
	(void)arg;
	add_cancel(n_ops, 1000000);
}

/* Arm a batch of timers over the next ~4 ms, then one run() that fires them all. */
static void body_add_fire(void *arg, uint64_t n_ops)
{
	(void)arg;
	for (uint64_t done = 0; done < n_ops; done += SET) {
		uint64_t batch = n_ops - done < SET ? n_ops - done : SET;
		for (uint64_t i = 0; i < batch; i++)
			fp_timer_add(&B->w, &B->set[i], B->now_us + 16 + next_rand() % 4000);
		B->now_us += 4096;
		fp_timer_run(&B->w, B->now_us);
	}
}

/* One run() per loop iteration, the clock moving 1 us per call, nothing due. */
static void body_run_idle(void *arg, uint64_t n_ops)
{
	(void)arg;
	for (uint64_t i = 0; i < n_ops; i++)
		bench_sink(fp_timer_run(&B->w, ++B->now_us));
}

void bench_timer(const struct bench_opts *o)
{
	B = aligned_alloc(FP_CACHE_LINE, (sizeof(*B) + FP_CACHE_LINE - 1) / FP_CACHE_LINE * FP_CACHE_LINE);
	if (!B) {
		fprintf(stderr, "bench_timer: out of memory\n");
		return;
	}
	B->now_us = 1000000;
	B->rng = 0x9e3779b97f4a7c15ull;
	fp_timer_wheel_init(&B->w, B->now_us);
	for (int i = 0; i < SET; i++)
		fp_timer_init(&B->set[i], count_fn);
	/* background load: pending from 100 s to an hour out, across levels 2 and 3 */
	for (int i = 0; i < BACKGROUND; i++) {
		fp_timer_init(&B->bg[i], bg_fn);
		fp_timer_add(&B->w, &B->bg[i], B->now_us + 100000000 + next_rand() % 3600000000ull);
	}
	bench_case(o, "timer add+cancel (near, 1 ms)", body_add_cancel_near, NULL, 20000000);
	bench_case(o, "timer add+cancel (far, 1 s)", body_add_cancel_far, NULL, 20000000);
	bench_case(o, "timer add+fire", body_add_fire, NULL, 4000000);
	bench_case(o, "timer run, idle wheel", body_run_idle, NULL, 20000000);
	free(B);
	B = NULL;
}
