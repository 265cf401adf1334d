/* test_counters.c: per-core counters: rows apart, sums across cores, concurrent reads. */
#include <pthread.h>

#include <flowplane/counters.h>

#include "harness.h"

enum { C_RX, C_TX, C_DROP, C_N };
static const char *const names[C_N] = { "rx", "tx", "drop" };

static void sums_rows(void **state)
{
	(void)state;
	struct fp_counters c;
	assert_int_equal(fp_counters_init(&c, 4, C_N, names), 0);
	for (unsigned core = 0; core < 4; core++)
		fp_counter_add(&c, core, C_RX, core + 1);
	fp_counter_inc(&c, 2, C_DROP);
	assert_int_equal(fp_counters_sum(&c, C_RX), 10);
	assert_int_equal(fp_counters_sum(&c, C_TX), 0);
	assert_int_equal(fp_counters_get(&c, 2, C_DROP), 1);
	/* Rows never share a cache line (no false sharing between cores). */
	assert_int_equal(c.stride * sizeof(uint64_t) % FP_CACHE_LINE, 0);
	assert_int_equal((uintptr_t)c.rows % FP_CACHE_LINE, 0);
	assert_string_equal(c.names[C_DROP], "drop");
	fp_counters_destroy(&c);
	assert_int_equal(fp_counters_init(&c, 0, C_N, names), -EINVAL);
}

struct arg {
	struct fp_counters *c;
	unsigned core;
};

static void *bump(void *p)
{
	struct arg *a = p;
	for (int i = 0; i < 1000000; i++)
		fp_counter_inc(a->c, a->core, C_TX);
	return NULL;
}

/* Two writers on their own rows and a reader summing meanwhile: no increment is lost and
 * the sum only grows. */
static void concurrent(void **state)
{
	(void)state;
	struct fp_counters c;
	struct arg a[2];
	pthread_t th[2];
	uint64_t prev = 0;

	assert_int_equal(fp_counters_init(&c, 2, C_N, names), 0);
	for (unsigned i = 0; i < 2; i++) {
		a[i] = (struct arg){ &c, i };
		pthread_create(&th[i], NULL, bump, &a[i]);
	}
	for (int i = 0; i < 1000; i++) {
		uint64_t s = fp_counters_sum(&c, C_TX);
		assert_true(s >= prev);
		prev = s;
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(fp_counters_sum(&c, C_TX), 2000000);
	fp_counters_destroy(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sums_rows),
		cmocka_unit_test(concurrent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
