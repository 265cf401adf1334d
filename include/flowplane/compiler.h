/* compiler.h: the few compiler helpers base code needs (branch hints, cache-line layout). */
#pragma once

#include <assert.h>
#include <stddef.h>

#define FP_CACHE_LINE 64

#define fp_likely(x)   __builtin_expect(!!(x), 1)
#define fp_unlikely(x) __builtin_expect(!!(x), 0)

#define fp_aligned_cache __attribute__((aligned(FP_CACHE_LINE)))
#define fp_cold          __attribute__((cold, noinline))
#define fp_noinline      __attribute__((noinline))
#define fp_unused        __attribute__((unused))

/* Compile-time check that a hot struct keeps the layout its comments promise. */
#define FP_ASSERT_OFFSET(type, field, off) \
	static_assert(offsetof(type, field) == (off), #type "." #field " moved")

#define FP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define fp_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline int fp_is_pow2(unsigned long x) { return x && !(x & (x - 1)); }
