/* test_ring.c: rings with one or several producers: bursts, full/empty, index wrap, threads. */
#include <pthread.h>
#include <stdlib.h>

#include <flowplane/ring.h>

#include "harness.h"

#define TAG(i) ((void *)(uintptr_t)(i))

static void spsc_burst_semantics(void **state)
{
	(void)state;
	struct fp_ring *r = fp_ring_create(8);
	void *in[10], *out[10];

	assert_non_null(r);
	for (int i = 0; i < 10; i++)
		in[i] = TAG(i + 1);
	assert_int_equal(fp_ring_dequeue_burst(r, out, 4), 0);
	assert_int_equal(fp_ring_sp_enqueue_burst(r, in, 5), 5);
	assert_int_equal(fp_ring_sp_enqueue_burst(r, in + 5, 5), 3); /* only 3 free */
	assert_int_equal(fp_ring_count(r), 8);
	assert_int_equal(fp_ring_sp_enqueue_burst(r, in, 1), 0);
	assert_int_equal(fp_ring_dequeue_burst(r, out, 10), 8);
	for (int i = 0; i < 8; i++)
		assert_ptr_equal(out[i], in[i]);
	assert_int_equal(fp_ring_count(r), 0);
	free(r);
}

/* Free-running indices must survive wrapping past 2^32, with either producer kind. */
static void index_wrap(void **state)
{
	(void)state;
	struct fp_ring *r = fp_ring_create(4);
	void *out[4];

	r->prod_head = r->prod_tail = r->prod_cons_seen = UINT32_MAX - 5;
	r->cons = r->cons_prod_seen = UINT32_MAX - 5;
	for (uintptr_t i = 0; i < 40; i += 3) {
		void *in[3] = { TAG(i), TAG(i + 1), TAG(i + 2) };
		if (i < 20)
			assert_int_equal(fp_ring_sp_enqueue_burst(r, in, 3), 3);
		else
			assert_int_equal(fp_ring_mp_enqueue_burst(r, in, 3), 3);
		assert_int_equal(fp_ring_dequeue_burst(r, out, 4), 3);
		for (int k = 0; k < 3; k++)
			assert_ptr_equal(out[k], in[k]);
	}
	free(r);
}

/* The consumer looks before it takes: a peek takes nothing, a skip takes the first k. */
static void peek_then_skip(void **state)
{
	struct fp_ring *r = fp_ring_create(8);
	void *in[5], *out[8];

	(void)state;
	for (uintptr_t i = 0; i < 5; i++)
		in[i] = (void *)(i + 1);
	assert_int_equal(fp_ring_sp_enqueue_burst(r, in, 5), 5);
	assert_int_equal(fp_ring_peek_burst(r, out, 8), 5);
	assert_ptr_equal(out[0], in[0]);
	assert_ptr_equal(out[4], in[4]);
	assert_int_equal(fp_ring_count(r), 5);
	fp_ring_skip(r, 2);
	assert_int_equal(fp_ring_count(r), 3);
	assert_int_equal(fp_ring_peek_burst(r, out, 2), 2);
	assert_ptr_equal(out[0], in[2]);
	assert_int_equal(fp_ring_dequeue_burst(r, out, 8), 3);
	assert_ptr_equal(out[0], in[2]);
	assert_ptr_equal(out[2], in[4]);
	assert_int_equal(fp_ring_peek_burst(r, out, 8), 0);
	free(r);
}

static void bad_sizes(void **state)
{
	(void)state;
	assert_null(fp_ring_create(0));
	assert_null(fp_ring_create(1));
	assert_null(fp_ring_create(12));
	assert_null(fp_ring_create(100));
	struct fp_ring *r = fp_ring_create(2);
	assert_non_null(r);
	free(r);
}

static void mpsc_burst_semantics(void **state)
{
	(void)state;
	struct fp_ring *r = fp_ring_create(4);
	void *in[6] = { TAG(1), TAG(2), TAG(3), TAG(4), TAG(5), TAG(6) }, *out[6];

	assert_int_equal(fp_ring_mp_enqueue_burst(r, in, 6), 4);
	assert_int_equal(fp_ring_mp_enqueue_burst(r, in, 1), 0);
	assert_int_equal(fp_ring_dequeue_burst(r, out, 2), 2);
	assert_int_equal(fp_ring_mp_enqueue_burst(r, in + 4, 2), 2);
	assert_int_equal(fp_ring_count(r), 4);
	assert_int_equal(fp_ring_dequeue_burst(r, out + 2, 6), 4);
	const uintptr_t want[] = { 1, 2, 3, 4, 5, 6 };
	for (int i = 0; i < 6; i++)
		assert_ptr_equal(out[i], TAG(want[i]));
	free(r);
}

#define N_ITEMS 400000u

static void *spsc_producer(void *p)
{
	struct fp_ring *r = p;
	uint64_t seed = fp_test_seed();
	uintptr_t next = 1;

	while (next <= N_ITEMS) {
		void *batch[32];
		unsigned want = 1 + (unsigned)fp_test_below(&seed, 32), n;
		for (n = 0; n < want && next + n <= N_ITEMS; n++)
			batch[n] = TAG(next + n);
		unsigned done = fp_ring_sp_enqueue_burst(r, batch, n);
		next += done;
		if (!done)
			fp_cpu_relax();
	}
	return NULL;
}

/* Every item arrives once, in order, across two threads. */
static void spsc_threads(void **state)
{
	(void)state;
	struct fp_ring *r = fp_ring_create(64);
	pthread_t th;
	uintptr_t expect = 1;

	assert_int_equal(pthread_create(&th, NULL, spsc_producer, r), 0);
	while (expect <= N_ITEMS) {
		void *out[17];
		unsigned n = fp_ring_dequeue_burst(r, out, 17);
		for (unsigned i = 0; i < n; i++)
			assert_ptr_equal(out[i], TAG(expect++));
		if (!n)
			fp_cpu_relax();
	}
	pthread_join(th, NULL);
	assert_int_equal(fp_ring_count(r), 0);
	free(r);
}

#define MP_PRODUCERS 3
#define MP_ITEMS     150000u

struct mp_arg {
	struct fp_ring *r;
	uintptr_t id;
};

static void *mpsc_producer(void *p)
{
	struct mp_arg *a = p;
	uint64_t seed = fp_test_seed() + a->id;
	uintptr_t next = 0;

	while (next < MP_ITEMS) {
		void *batch[8];
		unsigned want = 1 + (unsigned)fp_test_below(&seed, 8), n;
		for (n = 0; n < want && next + n < MP_ITEMS; n++)
			batch[n] = TAG((a->id << 32) | (next + n + 1));
		unsigned done = fp_ring_mp_enqueue_burst(a->r, batch, n);
		next += done;
		if (!done)
			fp_cpu_relax();
	}
	return NULL;
}

/* Each producer's items arrive exactly once and in that producer's order. */
static void mpsc_threads(void **state)
{
	(void)state;
	struct fp_ring *r = fp_ring_create(128);
	struct mp_arg args[MP_PRODUCERS];
	pthread_t th[MP_PRODUCERS];
	uint64_t last[MP_PRODUCERS] = { 0 }, total = 0;

	for (uintptr_t i = 0; i < MP_PRODUCERS; i++) {
		args[i] = (struct mp_arg){ r, i };
		assert_int_equal(pthread_create(&th[i], NULL, mpsc_producer, &args[i]), 0);
	}
	while (total < (uint64_t)MP_PRODUCERS * MP_ITEMS) {
		void *out[32];
		unsigned n = fp_ring_dequeue_burst(r, out, 32);
		for (unsigned i = 0; i < n; i++) {
			uintptr_t v = (uintptr_t)out[i];
			uintptr_t id = v >> 32, seq = v & 0xffffffffu;
			assert_true(id < MP_PRODUCERS);
			assert_int_equal(seq, last[id] + 1);
			last[id] = seq;
		}
		total += n;
		if (!n)
			fp_cpu_relax();
	}
	for (int i = 0; i < MP_PRODUCERS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(fp_ring_count(r), 0);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(spsc_burst_semantics),
		cmocka_unit_test(index_wrap),
		cmocka_unit_test(peek_then_skip),
		cmocka_unit_test(bad_sizes),
		cmocka_unit_test(mpsc_burst_semantics),
		cmocka_unit_test(spsc_threads),
		cmocka_unit_test(mpsc_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
