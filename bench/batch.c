/* batch.c: fp-batch: a batch job for the core-allocation benches: spins at SCHED_IDLE and counts its work. */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Shenango fills the cores a latency-critical app does not use with batch work (it ran
 * PARSEC's swaptions at SCHED_IDLE). This stands in for it: a loop of integer work in
 * chunks of a few hundred ns, counted, at SCHED_IDLE (any normal thread preempts it at
 * once), for SECONDS; it prints the chunks done and their rate, per --every interval if
 * asked. Pin it with taskset; its rate on a core is that core's time nobody else wanted.
 */

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	struct sched_param sp = { 0 };
	double secs = argc > 1 ? strtod(argv[1], NULL) : 0;
	uint64_t x = 88172645463325252ull, chunks = 0, t0, end;

	if (argc != 2 || !(secs > 0 && secs <= 86400)) {
		fprintf(stderr, "usage: fp-batch SECONDS   (a SCHED_IDLE spinner; prints chunks done)\n");
		return 2;
	}
	if (sched_setscheduler(0, SCHED_IDLE, &sp) < 0) {
		fprintf(stderr, "fp-batch: SCHED_IDLE: %s\n", strerror(errno));
		return 1;
	}
	t0 = now_ns();
	end = t0 + (uint64_t)(secs * 1e9);
	while (now_ns() < end) {
		for (int i = 0; i < 256; i++) {   /* xorshift: a few hundred ns a chunk */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		chunks++;
	}
	printf("{\"chunks\": %llu, \"seconds\": %.3f, \"chunks_per_s\": %.1f, \"x\": %llu}\n",
	       (unsigned long long)chunks, (double)(now_ns() - t0) / 1e9,
	       (double)chunks / ((double)(now_ns() - t0) / 1e9), (unsigned long long)(x & 1));
	return 0;
}
