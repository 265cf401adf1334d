/* test_timer.c: timing wheel: exact firing tick, cancel, re-arm from callbacks, and a reference model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <flowplane/timer.h>

#define TICK FP_TIMER_TICK_US

/* A timer with the bookkeeping the tests check: how often and when it fired. */
struct tt {
	struct fp_timer t;
	unsigned fired;
	uint64_t fired_at_us;
	/* what the callback does besides recording */
	struct fp_timer_wheel *w;
	int64_t rearm_after_us; /* < 0: do not re-arm itself */
	struct tt *cancel_other;
};

/* fp_container_of() without its char * to struct cast, which clang's -Wcast-align flags. */
static struct tt *tt_of(struct fp_timer *t)
{
	return (struct tt *)(void *)((char *)t - offsetof(struct tt, t));
}

static void tt_fn(struct fp_timer *t, uint64_t now_us)
{
	struct tt *x = tt_of(t);

	assert_false(fp_timer_pending(t));
	x->fired++;
	x->fired_at_us = now_us;
	if (x->cancel_other)
		fp_timer_cancel(x->w, &x->cancel_other->t);
	if (x->rearm_after_us >= 0)
		fp_timer_add(x->w, t, now_us + (uint64_t)x->rearm_after_us);
}

static void tt_init(struct tt *x, struct fp_timer_wheel *w)
{
	memset(x, 0, sizeof(*x));
	fp_timer_init(&x->t, tt_fn);
	x->w = w;
	x->rearm_after_us = -1;
}

static uint64_t ceil_tick_us(uint64_t us) { return (us + TICK - 1) / TICK * TICK; }

/* Checks @d fires at run(ceil16(d)) and not at the run one tick earlier, from @start. */
static void check_fires_exactly(uint64_t start_us, uint64_t d)
{
	struct fp_timer_wheel w;
	struct tt a;
	uint64_t due = ceil_tick_us(d);

	fp_timer_wheel_init(&w, start_us);
	tt_init(&a, &w);
	fp_timer_add(&w, &a.t, d);
	assert_true(fp_timer_next_us(&w) <= due);
	if (due >= start_us + TICK) {
		assert_int_equal(fp_timer_run(&w, due - 1), 0);
		assert_int_equal(a.fired, 0);
		assert_true(fp_timer_pending(&a.t));
		assert_true(fp_timer_next_us(&w) <= due);
	}
	assert_int_equal(fp_timer_run(&w, due), 1);
	assert_int_equal(a.fired, 1);
	assert_int_equal(fp_timer_count(&w), 0);
	assert_int_equal(fp_timer_next_us(&w), UINT64_MAX);
}

static void test_fires_at_exact_tick(void **state)
{
	(void)state;
	check_fires_exactly(0, 0);
	check_fires_exactly(0, 1);
	check_fires_exactly(0, 15);
	check_fires_exactly(0, 16);
	check_fires_exactly(0, 17);
	check_fires_exactly(0, 100);
	check_fires_exactly(0, 160);
	check_fires_exactly(1000, 1000);
	check_fires_exactly(1007, 1008);
}

/* Deadlines at and around every level boundary, and beyond the top level, one jump each. */
static void test_every_level_one_jump(void **state)
{
	static const uint64_t ticks[] = {
		1, 254, 255, 256, 257, 511, 65535, 65536, 65537, 1ull << 23, (1ull << 24) - 1,
		1ull << 24, (1ull << 24) + 1, (1ull << 32) - 1, 1ull << 32, (1ull << 32) + 1,
		(1ull << 33) + 12345, 1ull << 40,
	};
	static const uint64_t starts[] = { 0, 7, 4095, 123456789, 1ull << 50 };

	(void)state;
	for (size_t s = 0; s < FP_ARRAY_SIZE(starts); s++) {
		for (size_t i = 0; i < FP_ARRAY_SIZE(ticks); i++) {
			uint64_t d = starts[s] + ticks[i] * TICK;
			check_fires_exactly(starts[s], d);
			check_fires_exactly(starts[s], d - 5);
		}
	}
}

/* Walk time forward in uneven steps and check the timer fires at the first run past it. */
static void check_stepping(uint64_t start_us, uint64_t d, uint64_t step_us)
{
	struct fp_timer_wheel w;
	struct tt a;
	uint64_t due = ceil_tick_us(d), now = start_us;

	fp_timer_wheel_init(&w, start_us);
	tt_init(&a, &w);
	fp_timer_add(&w, &a.t, d);
	for (unsigned i = 0; a.fired == 0; i++) {
		uint64_t prev = now;
		now += step_us + (i % 7) * (step_us / 3);
		unsigned n = fp_timer_run(&w, now);
		assert_int_equal(n, now >= due);
		if (n) {
			assert_true(prev < due); /* and not at the run before */
			assert_int_equal(a.fired_at_us, now);
		}
	}
}

static void test_every_level_stepping(void **state)
{
	(void)state;
	check_stepping(0, 4096, 16);
	check_stepping(5, 300000, 1000);
	check_stepping(0, 2000000, 17);
	check_stepping(333, 300ull * 1000000, 100000);
	check_stepping(1, 20ull * 3600 * 1000000, 60ull * 1000000);   /* beyond the top */
	check_stepping(1, 100ull * 3600 * 1000000, 3600ull * 1000000); /* far beyond */
	check_stepping(1, 100ull * 3600 * 1000000, 5000ull * 1000000); /* jumps past cascades */
}

static void test_past_deadline_fires_next_run(void **state)
{
	struct fp_timer_wheel w;
	struct tt a, b;

	(void)state;
	fp_timer_wheel_init(&w, 10000);
	tt_init(&a, &w);
	tt_init(&b, &w);
	fp_timer_add(&w, &a.t, 50);
	assert_int_equal(fp_timer_next_us(&w), 0);
	assert_int_equal(fp_timer_run(&w, 10000), 1);
	assert_int_equal(a.fired, 1);

	/* a deadline in a tick the last run already covered */
	fp_timer_add(&w, &a.t, 10000);
	assert_int_equal(fp_timer_run(&w, 10000), 1);
	assert_int_equal(a.fired, 2);

	/* a run given an earlier time than the last fires what is due and keeps the clock */
	fp_timer_add(&w, &a.t, 9000);
	fp_timer_add(&w, &b.t, 10016);
	assert_int_equal(fp_timer_run(&w, 5000), 1);
	assert_int_equal(a.fired, 3);
	assert_int_equal(fp_timer_run(&w, 10015), 0);
	assert_int_equal(fp_timer_run(&w, 10016), 1);
}

static void test_cancel(void **state)
{
	struct fp_timer_wheel w;
	struct tt a, b;

	(void)state;
	fp_timer_wheel_init(&w, 0);
	tt_init(&a, &w);
	tt_init(&b, &w);
	fp_timer_cancel(&w, &a.t); /* not pending: no-op */
	assert_int_equal(fp_timer_count(&w), 0);
	fp_timer_add(&w, &a.t, 1000);
	fp_timer_add(&w, &b.t, 1000);
	assert_int_equal(fp_timer_count(&w), 2);
	fp_timer_cancel(&w, &a.t);
	fp_timer_cancel(&w, &a.t);
	assert_false(fp_timer_pending(&a.t));
	assert_int_equal(fp_timer_count(&w), 1);
	assert_int_equal(fp_timer_run(&w, 2000), 1);
	assert_int_equal(a.fired, 0);
	assert_int_equal(b.fired, 1);

	/* cancel far timers and past-deadline timers too */
	fp_timer_add(&w, &a.t, 10ull * 3600 * 1000000);
	fp_timer_add(&w, &b.t, 0);
	fp_timer_cancel(&w, &a.t);
	fp_timer_cancel(&w, &b.t);
	assert_int_equal(fp_timer_count(&w), 0);
	assert_int_equal(fp_timer_next_us(&w), UINT64_MAX);
	assert_int_equal(fp_timer_run(&w, 100ull * 3600 * 1000000), 0);
}

static void test_readd_moves(void **state)
{
	struct fp_timer_wheel w;
	struct tt a;

	(void)state;
	fp_timer_wheel_init(&w, 0);
	tt_init(&a, &w);
	fp_timer_add(&w, &a.t, 1000);
	fp_timer_add(&w, &a.t, 5000000); /* later, another level */
	assert_int_equal(fp_timer_count(&w), 1);
	assert_int_equal(fp_timer_run(&w, 4999999), 0);
	fp_timer_add(&w, &a.t, 5000010); /* move again while pending */
	assert_int_equal(fp_timer_run(&w, 5000000), 0);
	assert_int_equal(fp_timer_run(&w, 5000015), 0);
	assert_int_equal(fp_timer_run(&w, 5000016), 1);
	assert_int_equal(a.fired, 1);
	fp_timer_add(&w, &a.t, 6000000);
	fp_timer_add(&w, &a.t, 5000100); /* earlier */
	assert_int_equal(fp_timer_run(&w, 5000112), 1);
	assert_int_equal(fp_timer_run(&w, 7000000), 0);
	assert_int_equal(a.fired, 2);
}

static void test_callback_rearms_itself(void **state)
{
	struct fp_timer_wheel w;
	struct tt a;

	(void)state;
	fp_timer_wheel_init(&w, 0);
	tt_init(&a, &w);
	a.rearm_after_us = 1024; /* a multiple of the tick: fires every 1024 us exactly */
	fp_timer_add(&w, &a.t, 1024);
	for (uint64_t now = 16; now <= 10240; now += 16) {
		unsigned before = a.fired;
		fp_timer_run(&w, now);
		assert_int_equal(a.fired - before, now % 1024 == 0);
	}
	assert_int_equal(a.fired, 10);
	assert_true(fp_timer_pending(&a.t));

	/* re-armed for "now" from its callback: fires once per run, never loops */
	a.rearm_after_us = 0;
	fp_timer_add(&w, &a.t, 0);
	assert_int_equal(fp_timer_run(&w, 20000), 1);
	assert_int_equal(fp_timer_run(&w, 20000), 1);
	assert_int_equal(fp_timer_run(&w, 20001), 1);
	a.rearm_after_us = -1;
	assert_int_equal(fp_timer_run(&w, 20015), 0); /* 20001 rounds up to 20016 */
	assert_int_equal(fp_timer_run(&w, 20016), 1);
	assert_int_equal(fp_timer_run(&w, 30000), 0);
	assert_int_equal(a.fired, 14);
}

static void test_callback_cancels_other_due(void **state)
{
	struct fp_timer_wheel w;
	struct tt a, b;

	(void)state;
	fp_timer_wheel_init(&w, 0);
	tt_init(&a, &w);
	tt_init(&b, &w);
	/* a fires first (earlier tick) and cancels b, also due in the same run */
	a.cancel_other = &b;
	fp_timer_add(&w, &a.t, 100);
	fp_timer_add(&w, &b.t, 200);
	assert_int_equal(fp_timer_run(&w, 100000), 1);
	assert_int_equal(a.fired, 1);
	assert_int_equal(b.fired, 0);
	assert_false(fp_timer_pending(&b.t));

	/* same tick, each cancels the other: exactly one fires */
	b.cancel_other = &a;
	fp_timer_add(&w, &a.t, 200000);
	fp_timer_add(&w, &b.t, 200000);
	assert_int_equal(fp_timer_run(&w, 200000), 1);
	assert_int_equal(a.fired + b.fired, 2);
	assert_int_equal(fp_timer_count(&w), 0);

	/* same tick, both past-deadline (due list) */
	fp_timer_add(&w, &a.t, 5);
	fp_timer_add(&w, &b.t, 5);
	assert_int_equal(fp_timer_run(&w, 200001), 1);
	assert_int_equal(a.fired + b.fired, 3);
}

/* A callback that re-adds another timer due in the same run defers it to the next run. */
static struct tt *readd_target;
static void readd_other_fn(struct fp_timer *t, uint64_t now_us)
{
	struct tt *x = tt_of(t);

	x->fired++;
	fp_timer_add(x->w, &readd_target->t, now_us - 1000);
}

static void test_callback_readds_other_due(void **state)
{
	struct fp_timer_wheel w;
	struct tt a, b;

	(void)state;
	fp_timer_wheel_init(&w, 0);
	tt_init(&a, &w);
	tt_init(&b, &w);
	a.t.fn = readd_other_fn;
	readd_target = &b;
	fp_timer_add(&w, &a.t, 100);
	fp_timer_add(&w, &b.t, 200);
	assert_int_equal(fp_timer_run(&w, 5000), 1);
	assert_int_equal(b.fired, 0);
	assert_true(fp_timer_pending(&b.t));
	assert_int_equal(fp_timer_run(&w, 5000), 1);
	assert_int_equal(b.fired, 1);
}

/* A timer cancelling itself, or the wheel's other timers in the same slot, while firing. */
static void test_callback_cancels_self(void **state)
{
	struct fp_timer_wheel w;
	struct tt a[8];

	(void)state;
	fp_timer_wheel_init(&w, 0);
	for (int i = 0; i < 8; i++) {
		tt_init(&a[i], &w);
		a[i].cancel_other = &a[(i + (i % 2 ? 0 : 1)) % 8]; /* odd: self, even: next */
		fp_timer_add(&w, &a[i].t, 480);
	}
	unsigned n = fp_timer_run(&w, 480);
	unsigned fired = 0;
	for (int i = 0; i < 8; i++)
		fired += a[i].fired;
	assert_int_equal(n, fired);
	assert_int_equal(fp_timer_count(&w), 0);
	assert_true(n >= 4 && n <= 8);
}

/* After a long idle gap every timer still fires exactly once, and only when due. */
static void test_large_time_jumps(void **state)
{
	struct fp_timer_wheel w;
	static struct tt a[64];
	uint64_t base = 1ull << 40;

	(void)state;
	fp_timer_wheel_init(&w, base);
	for (int i = 0; i < 64; i++) {
		tt_init(&a[i], &w);
		fp_timer_add(&w, &a[i].t, base + ((uint64_t)1 << (i % 48)) + (uint64_t)i);
	}
	uint64_t now = base;
	for (int step = 0; step < 60; step++) {
		now += (uint64_t)1 << step;
		fp_timer_run(&w, now);
		for (int i = 0; i < 64; i++) {
			uint64_t due = ceil_tick_us(base + ((uint64_t)1 << (i % 48)) + (uint64_t)i);
			assert_int_equal(a[i].fired, due <= now);
		}
		if (now > base + (1ull << 48))
			break;
	}
	assert_int_equal(fp_timer_count(&w), 0);

	/*
	 * The far end of time: UINT64_MAX - 15 still fires, UINT64_MAX is never reached. (The
	 * wheel starts near the end: a timer beyond the top level costs one re-file per ~19 h
	 * of wheel time, so jumping 2^60 ticks over it in one run would be slow, not wrong.)
	 */
	fp_timer_wheel_init(&w, UINT64_MAX - (1ull << 40));
	fp_timer_add(&w, &a[0].t, UINT64_MAX - 15);
	fp_timer_add(&w, &a[1].t, UINT64_MAX);
	assert_int_equal(fp_timer_run(&w, UINT64_MAX - 16), 0);
	assert_int_equal(fp_timer_run(&w, UINT64_MAX), 1);
	assert_int_equal(a[0].fired, 2);
	assert_true(fp_timer_pending(&a[1].t));
	assert_int_equal(fp_timer_next_us(&w), UINT64_MAX);
	assert_int_equal(fp_timer_run(&w, UINT64_MAX), 0);
}

static void test_next_us(void **state)
{
	struct fp_timer_wheel w;
	struct tt a, b;

	(void)state;
	fp_timer_wheel_init(&w, 1000);
	tt_init(&a, &w);
	tt_init(&b, &w);
	assert_int_equal(fp_timer_next_us(&w), UINT64_MAX);
	fp_timer_add(&w, &a.t, 1100);
	assert_int_equal(fp_timer_next_us(&w), 1104); /* level 0: exact */
	fp_timer_add(&w, &b.t, 3000000);
	assert_int_equal(fp_timer_next_us(&w), 1104);
	fp_timer_run(&w, 1200);
	uint64_t next = fp_timer_next_us(&w);
	assert_true(next > 1200 && next <= 3000000);
	/* following next_us wakes up a bounded number of times before it fires */
	unsigned wakeups = 0;
	while (b.fired == 0) {
		next = fp_timer_next_us(&w);
		assert_true(next <= 3000000);
		fp_timer_run(&w, next);
		assert_true(++wakeups <= 8);
	}
	assert_int_equal(b.fired_at_us, 3000000);
}

/* ---- randomised comparison against a reference model ---- */

#define MODEL_N 48

static uint64_t rng_state;

static uint64_t rng(void)
{
	/* splitmix64: seeded, reproducible, good enough to spread deadlines */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t n) { return n ? rng() % n : 0; }

/* A deadline somewhere from the past to well beyond the top level. */
static uint64_t random_deadline(uint64_t now)
{
	static const unsigned max_log2_us[] = { 6, 12, 16, 20, 24, 28, 32, 36, 40 };
	unsigned r = (unsigned)rng_below(20);

	if (r == 0)
		return now - rng_below(now < 100000 ? now + 1 : 100000); /* past */
	if (r == 1)
		return now;
	unsigned lg = max_log2_us[r % FP_ARRAY_SIZE(max_log2_us)];
	return now + rng_below(1ull << lg);
}

static uint64_t random_advance(void)
{
	switch (rng_below(8)) {
	case 0: return 0;
	case 1: return rng_below(16);
	case 2: case 3: return rng_below(200);
	case 4: return rng_below(10000);
	case 5: return rng_below(2000000);
	case 6: return rng_below(1ull << 30);
	default: return rng_below(1ull << 36);
	}
}

struct model {
	struct fp_timer_wheel w;
	struct fp_timer t[MODEL_N];
	bool pending[MODEL_N];
	uint64_t tick[MODEL_N];   /* ceil(deadline / 16) */
	bool expected[MODEL_N];   /* due in the current run and not yet fired */
	bool in_run;
	uint64_t now, fired;
	uint64_t seed;
	int seq;
};

static struct model M;

static uint64_t deadline_tick(uint64_t d) { return d / TICK + (d % TICK != 0); }

#define MODEL_CHECK(cond)                                                                  \
	do {                                                                               \
		if (!(cond))                                                               \
			fail_msg("model mismatch: %s (seed %llu, sequence %d, now %llu)", #cond, \
				 (unsigned long long)M.seed, M.seq, (unsigned long long)M.now);   \
	} while (0)

static void model_add(int i, uint64_t d)
{
	fp_timer_add(&M.w, &M.t[i], d);
	M.pending[i] = true;
	M.tick[i] = deadline_tick(d);
	M.expected[i] = false; /* armed during a run: never fires in that run */
}

static void model_cancel(int i)
{
	fp_timer_cancel(&M.w, &M.t[i]);
	M.pending[i] = false;
	M.expected[i] = false;
}

/* The callback checks the timer was due, then sometimes re-arms or cancels timers itself. */
static void model_fn(struct fp_timer *t, uint64_t now_us)
{
	int i = (int)(t - M.t);

	MODEL_CHECK(M.in_run && now_us == M.now);
	MODEL_CHECK(M.expected[i]); /* due now, not fired yet in this run */
	M.expected[i] = false;
	M.pending[i] = false;
	M.fired++;
	switch (rng_below(10)) {
	case 0: model_add(i, random_deadline(now_us)); break;
	case 1: model_add((int)rng_below(MODEL_N), random_deadline(now_us)); break;
	case 2: model_cancel((int)rng_below(MODEL_N)); break;
	default: break;
	}
}

static void model_run(uint64_t now)
{
	uint64_t now_tick = now / TICK;

	M.now = now;
	for (int i = 0; i < MODEL_N; i++)
		M.expected[i] = M.pending[i] && M.tick[i] <= now_tick;
	M.fired = 0;
	M.in_run = true;
	unsigned n = fp_timer_run(&M.w, now);
	M.in_run = false;
	MODEL_CHECK(n == M.fired);
	uint64_t count = 0, first = UINT64_MAX;
	for (int i = 0; i < MODEL_N; i++) {
		MODEL_CHECK(!M.expected[i]); /* everything due fired */
		MODEL_CHECK(fp_timer_pending(&M.t[i]) == M.pending[i]);
		if (M.pending[i]) {
			count++;
			if (M.tick[i] < first)
				first = M.tick[i];
		}
	}
	MODEL_CHECK(fp_timer_count(&M.w) == count);
	/* next_us is a lower bound on the first firing, never later */
	if (first != UINT64_MAX && first <= UINT64_MAX / TICK)
		MODEL_CHECK(fp_timer_next_us(&M.w) <= first * TICK);
	if (count == 0)
		MODEL_CHECK(fp_timer_next_us(&M.w) == UINT64_MAX);
}

static void model_sequence(int ops)
{
	uint64_t start = rng_below(4) == 0 ? rng_below(1ull << 52) : rng_below(1000);

	memset(&M.pending, 0, sizeof(M.pending));
	fp_timer_wheel_init(&M.w, start);
	for (int i = 0; i < MODEL_N; i++)
		fp_timer_init(&M.t[i], model_fn);
	M.now = start;
	for (int op = 0; op < ops; op++) {
		unsigned r = (unsigned)rng_below(10);
		int i = (int)rng_below(MODEL_N);
		if (r < 5)
			model_add(i, random_deadline(M.now));
		else if (r < 7)
			model_cancel(i);
		else
			model_run(M.now + random_advance());
	}
	/* drain: everything left fires by the end of time */
	model_run(M.now + (1ull << 42));
	for (int i = 0; i < MODEL_N; i++)
		model_cancel(i);
	MODEL_CHECK(fp_timer_count(&M.w) == 0);
}

static void test_random_vs_model(void **state)
{
	const char *env = getenv("FP_TEST_SEED");

	(void)state;
	M.seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	rng_state = M.seed;
	print_message("timer model seed %llu (set FP_TEST_SEED to replay)\n",
		      (unsigned long long)M.seed);
	for (M.seq = 0; M.seq < 3000; M.seq++)
		model_sequence(50 + (int)rng_below(300));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fires_at_exact_tick),
		cmocka_unit_test(test_every_level_one_jump),
		cmocka_unit_test(test_every_level_stepping),
		cmocka_unit_test(test_past_deadline_fires_next_run),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_readd_moves),
		cmocka_unit_test(test_callback_rearms_itself),
		cmocka_unit_test(test_callback_cancels_other_due),
		cmocka_unit_test(test_callback_readds_other_due),
		cmocka_unit_test(test_callback_cancels_self),
		cmocka_unit_test(test_large_time_jumps),
		cmocka_unit_test(test_next_us),
		cmocka_unit_test(test_random_vs_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
