/* harness.h: shared helpers for the cmocka unit tests: seeded PRNG and pool leak checks. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <flowplane/pool.h>

/* Seed for randomised tests: $FP_TEST_SEED if set, else a fixed default; printed once so
 * a failure can be replayed. */
uint64_t fp_test_seed(void);

/* splitmix64: small, fast, good enough to drive randomised tests. */
static inline uint64_t fp_test_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static inline uint64_t fp_test_below(uint64_t *s, uint64_t n) { return fp_test_rand(s) % n; }

/*
 * A pool with one core's cache, for tests that use buffers. The teardown fails the test
 * when any buffer is still handed out: lwIP's habit of checking for leaks after every
 * test, so a leak is caught by the test that caused it.
 */
struct fp_test_pool {
	struct fp_pool *pool;
	struct fp_pool_cache cache;
};

/* cmocka setup/teardown; *state becomes a struct fp_test_pool (64 buffers of 2 KiB). */
int fp_test_pool_setup(void **state);
int fp_test_pool_teardown(void **state);

/* Buffers handed out and not returned (flushes nothing; safe to call mid-test). */
uint64_t fp_test_pool_leaked(struct fp_test_pool *tp);
