/* clock.h: a calibrated TSC clock and a virtual clock for tests, behind one reader. */
#pragma once

#include <stdint.h>

#include <flowplane/compiler.h>

#define FP_NS_PER_US 1000ull
#define FP_NS_PER_MS 1000000ull
#define FP_NS_PER_S  1000000000ull

/* Frequency of the TSC in cycles per microsecond times 2^32 (fixed point), set by
 * fp_tsc_calibrate(). Read-only after calibration, so shared by every core. */
struct fp_tsc_info {
	uint64_t hz;            /* measured TSC frequency */
	uint64_t ns_per_cyc_fp; /* ns per cycle, fixed point << 32 */
	uint64_t cyc_per_us;    /* cycles per microsecond, rounded */
	uint64_t tsc0;          /* TSC at calibration (epoch of fp_tsc_ns()) */
	int      invariant;     /* CPUID says the TSC is invariant */
};

extern struct fp_tsc_info fp_tsc;

static inline uint64_t fp_rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* Measure the TSC against CLOCK_MONOTONIC_RAW for about @window_us (0: 20 ms). Returns 0;
 * -ENODEV where CPUID does not report an invariant TSC (the rate is still applied and the
 * caller decides whether to trust it); -EIO where time did not advance. */
int fp_tsc_calibrate(unsigned window_us);

/* Convert cycles to nanoseconds with the calibrated rate. */
static inline uint64_t fp_cycles_to_ns(uint64_t cyc)
{
	return (uint64_t)(((unsigned __int128)cyc * fp_tsc.ns_per_cyc_fp) >> 32);
}

static inline uint64_t fp_cycles_to_us(uint64_t cyc) { return fp_cycles_to_ns(cyc) / FP_NS_PER_US; }

static inline uint64_t fp_ns_to_cycles(uint64_t ns)
{
	return (uint64_t)(((unsigned __int128)ns * fp_tsc.hz) / FP_NS_PER_S);
}

/*
 * Time an application spends on purpose (a synthetic service time: fp-echo spin's
 * requests). Spun on the TSC; but when fp_spin_hook is set (fp-vsim --full runs the real
 * workers in virtual time, tools/vsim/full.c), handed to it instead: the simulated core's
 * clock moves on by @ns and the other cores run meanwhile.
 */
extern void (*fp_spin_hook)(uint64_t ns);

static inline void fp_spin_ns(uint64_t ns)
{
	if (fp_unlikely(fp_spin_hook)) {
		fp_spin_hook(ns);
		return;
	}
	uint64_t end = fp_rdtsc() + fp_ns_to_cycles(ns);

	while (fp_rdtsc() < end)
		__builtin_ia32_pause();
}

/* Nanoseconds since calibration, from the TSC. */
static inline uint64_t fp_tsc_ns(void) { return fp_cycles_to_ns(fp_rdtsc() - fp_tsc.tsc0); }

/*
 * A clock that protocol and runtime code read "now" from. A real clock reads the TSC;
 * a virtual one returns what the test set, so a test can step time exactly. Code that
 * must be testable takes `now` as an argument; fp_clock is what the loop that calls it
 * reads once per iteration.
 */
struct fp_clock {
	uint64_t virt_ns; /* current time of a virtual clock */
	int      is_virtual;
};

static inline void fp_clock_init_real(struct fp_clock *c) { c->is_virtual = 0; c->virt_ns = 0; }

static inline void fp_clock_init_virtual(struct fp_clock *c, uint64_t start_ns)
{
	c->is_virtual = 1;
	c->virt_ns = start_ns;
}

static inline uint64_t fp_clock_now_ns(const struct fp_clock *c)
{
	return c->is_virtual ? c->virt_ns : fp_tsc_ns();
}

static inline uint64_t fp_clock_now_us(const struct fp_clock *c)
{
	return fp_clock_now_ns(c) / FP_NS_PER_US;
}

/* Move a virtual clock forward (never backward; time is monotonic). */
static inline void fp_clock_advance(struct fp_clock *c, uint64_t delta_ns) { c->virt_ns += delta_ns; }

/* Set a virtual clock; asserts monotonicity. */
void fp_clock_set(struct fp_clock *c, uint64_t now_ns);
