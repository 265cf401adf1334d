/* counters.h: per-core event counters, incremented without atomics, summed only when read. */
#pragma once

#include <stdint.h>

#include <flowplane/compiler.h>

/*
 * A set of @n_counters counters with one cache-aligned row per core. A core only ever
 * writes its own row, so an increment is a plain load-add-store (relaxed atomic, which
 * compiles to a plain add on x86 but keeps a concurrent reader free of data races); a
 * reader sums the rows. Counters are named so a stats tool can print them.
 */
struct fp_counters {
	unsigned n_cores;
	unsigned n_counters;
	unsigned stride;       /* uint64s per row: n_counters rounded up to a cache line */
	const char *const *names;
	uint64_t *rows;        /* n_cores * stride, cache aligned */
};

/* Allocate zeroed counters. Returns 0 or -ENOMEM / -EINVAL. */
int fp_counters_init(struct fp_counters *c, unsigned n_cores, unsigned n_counters,
		     const char *const *names);
void fp_counters_destroy(struct fp_counters *c);

/* Add @v to counter @id of @core. Only @core's own thread may call this. */
static inline void fp_counter_add(struct fp_counters *c, unsigned core, unsigned id, uint64_t v)
{
	uint64_t *p = &c->rows[(size_t)core * c->stride + id];
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static inline void fp_counter_inc(struct fp_counters *c, unsigned core, unsigned id)
{
	fp_counter_add(c, core, id, 1);
}

/* Sum of counter @id over all cores; may run on any thread at any time. */
uint64_t fp_counters_sum(const struct fp_counters *c, unsigned id);

/* Counter @id of one core. */
uint64_t fp_counters_get(const struct fp_counters *c, unsigned core, unsigned id);
