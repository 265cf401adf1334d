/* harness.c: shared helpers for the cmocka unit tests. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

uint64_t fp_test_seed(void)
{
	static uint64_t seed;
	static int printed;
	if (!printed) {
		const char *env = getenv("FP_TEST_SEED");
		seed = env ? strtoull(env, NULL, 0) : 0x5eed0f10u;
		printf("# FP_TEST_SEED=%#llx\n", (unsigned long long)seed);
		printed = 1;
	}
	return seed;
}

int fp_test_pool_setup(void **state)
{
	struct fp_test_pool *tp = calloc(1, sizeof(*tp));
	struct fp_pool_params p = { .name = "test", .n_bufs = 64, .buf_size = 2048,
				    .mag_size = 8, .max_caches = 4 };
	if (!tp)
		return -1;
	tp->pool = fp_pool_create(&p);
	if (!tp->pool || fp_pool_cache_init(&tp->cache, tp->pool)) {
		fp_pool_destroy(tp->pool);
		free(tp);
		return -1;
	}
	*state = tp;
	return 0;
}

uint64_t fp_test_pool_leaked(struct fp_test_pool *tp) { return fp_pool_in_use(tp->pool); }

int fp_test_pool_teardown(void **state)
{
	struct fp_test_pool *tp = *state;
	uint64_t leaked = fp_test_pool_leaked(tp);

	fp_pool_cache_flush(&tp->cache);
	fp_pool_destroy(tp->pool);
	free(tp);
	if (leaked) {
		print_error("leak check: %llu buffer(s) not returned to the pool\n",
			    (unsigned long long)leaked);
		return -1; /* cmocka fails the test whose teardown fails */
	}
	return 0;
}
