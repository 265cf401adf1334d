/* clock.c: TSC calibration against CLOCK_MONOTONIC_RAW. */
#include <cpuid.h>
#include <errno.h>
#include <time.h>

#include <flowplane/clock.h>

/* Until calibrated, treat one cycle as one nanosecond so nothing divides by zero. */
struct fp_tsc_info fp_tsc = {
	.hz = FP_NS_PER_S, .ns_per_cyc_fp = 1ull << 32, .cyc_per_us = 1000,
};

void (*fp_spin_hook)(uint64_t ns);

static uint64_t mono_raw_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * FP_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static int tsc_is_invariant(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007)
		return 0;
	__get_cpuid(0x80000007, &a, &b, &c, &d);
	return !!(d & (1u << 8));
}

/*
 * Sample (TSC, CLOCK_MONOTONIC_RAW) at both ends of the window, each pair taken as
 * the tightest of a few tries so a preemption between the two reads cannot skew it.
 */
static void sample_pair(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 8; i++) {
		uint64_t t0 = fp_rdtsc();
		uint64_t n = mono_raw_ns();
		uint64_t t1 = fp_rdtsc();
		if (t1 - t0 < best) {
			best = t1 - t0;
			*tsc = t0 + (t1 - t0) / 2;
			*ns = n;
		}
	}
}

int fp_tsc_calibrate(unsigned window_us)
{
	uint64_t tsc_a = 0, ns_a = 0, tsc_b = 0, ns_b = 0;

	if (window_us == 0)
		window_us = 20000;
	fp_tsc.invariant = tsc_is_invariant();
	sample_pair(&tsc_a, &ns_a);
	struct timespec wait = { .tv_sec = window_us / 1000000,
				 .tv_nsec = (long)(window_us % 1000000) * 1000 };
	while (nanosleep(&wait, &wait) && errno == EINTR)
		;
	sample_pair(&tsc_b, &ns_b);
	if (tsc_b <= tsc_a || ns_b <= ns_a)
		return -EIO;

	uint64_t dcyc = tsc_b - tsc_a, dns = ns_b - ns_a;
	fp_tsc.hz = (uint64_t)((unsigned __int128)dcyc * FP_NS_PER_S / dns);
	fp_tsc.ns_per_cyc_fp = (uint64_t)(((unsigned __int128)dns << 32) / dcyc);
	fp_tsc.cyc_per_us = (fp_tsc.hz + 500000) / 1000000;
	fp_tsc.tsc0 = tsc_b;
	return fp_tsc.invariant ? 0 : -ENODEV;
}

void fp_clock_set(struct fp_clock *c, uint64_t now_ns)
{
	assert(c->is_virtual && now_ns >= c->virt_ns);
	c->virt_ns = now_ns;
}
