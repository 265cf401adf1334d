/* bench.h: the micro-benchmark harness: median ns per operation over repeated runs. */
#pragma once

#include <stdint.h>

struct bench_opts {
	int quick;        /* fewer repetitions, for tests */
	const char *only; /* run only cases whose name contains this, or NULL */
	int cpu;          /* the CPU the benchmark thread is pinned to */
};

/* Pin the calling thread to @cpu. Returns 0 or -errno. */
int bench_pin(int cpu);

/* A CPU other than the benchmark's own for a second thread, or -1 on a 1-CPU machine. */
int bench_other_cpu(const struct bench_opts *o);

/* One timed body: performs @n_ops operations of the thing measured. */
typedef void (*bench_fn)(void *arg, uint64_t n_ops);

/*
 * Time @fn for @n_ops operations @reps times (after one warm-up) and report the median
 * ns per operation under @name. Skipped (returns -1) when opts->only does not match.
 */
double bench_case(const struct bench_opts *o, const char *name, bench_fn fn, void *arg,
		  uint64_t n_ops);

/* Keep the compiler from discarding a value the benchmark computed. */
static inline void bench_sink(uint64_t v) { __asm__ volatile("" : : "r"(v) : "memory"); }

/* The suites, one per file. */
void bench_ring(const struct bench_opts *o);
void bench_pool(const struct bench_opts *o);
void bench_timer(const struct bench_opts *o);
void bench_hist(const struct bench_opts *o);
void bench_steer(const struct bench_opts *o);
void bench_thread(const struct bench_opts *o);
