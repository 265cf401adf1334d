/* fuzz_timer.c: libFuzzer target: byte-coded add/cancel/run sequences checked against a reference model. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/timer.h>

/*
 * Input: two bytes of start time, then operations. Each operation is one byte: bits 0-1
 * pick add (0, 1), cancel (2) or run (3), bits 2-5 the timer (pool of 16). An add reads a
 * byte (bits 0-5: log2 of the deadline's distance, bit 6: in the past, bit 7: unused) and
 * a callback action byte, then four bytes of distance; a run reads a byte (log2 of the
 * advance) and four bytes of advance. Callbacks re-arm themselves, cancel or re-arm a
 * neighbour, as their action byte says, so edits from inside run() are checked too.
 */

#define POOL 16

struct fz {
	struct fp_timer_wheel w;
	struct fp_timer t[POOL];
	uint8_t action[POOL];
	uint64_t delta_us[POOL];
	bool pending[POOL];
	uint64_t tick[POOL];
	bool expected[POOL]; /* due in the current run and not fired yet */
	bool in_run;
	uint64_t now, fired;
};

static struct fz F;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "fuzz_timer: %s (now %llu)\n", #cond,              \
				(unsigned long long)F.now);                                \
			abort();                                                           \
		}                                                                          \
	} while (0)

static uint64_t deadline_tick(uint64_t d) { return d / FP_TIMER_TICK_US + (d % FP_TIMER_TICK_US != 0); }

static void model_add(int i, uint64_t d)
{
	fp_timer_add(&F.w, &F.t[i], d);
	F.pending[i] = true;
	F.tick[i] = deadline_tick(d);
	F.expected[i] = false; /* armed during a run: waits for the next one */
}

static void model_cancel(int i)
{
	fp_timer_cancel(&F.w, &F.t[i]);
	F.pending[i] = false;
	F.expected[i] = false;
}

static void fz_fn(struct fp_timer *t, uint64_t now_us)
{
	int i = (int)(t - F.t);

	CHECK(F.in_run && now_us == F.now);
	CHECK(F.expected[i]);
	CHECK(!fp_timer_pending(t));
	F.expected[i] = false;
	F.pending[i] = false;
	F.fired++;
	switch (F.action[i] & 3) {
	case 1: model_add(i, now_us + F.delta_us[i]); break;
	case 2: model_cancel((i + 1 + (F.action[i] >> 2) % (POOL - 1)) % POOL); break;
	case 3: model_add((i + 1 + (F.action[i] >> 2) % (POOL - 1)) % POOL, now_us + F.delta_us[i] / 2); break;
	default: break;
	}
}

static void model_run(uint64_t now)
{
	F.now = now;
	for (int i = 0; i < POOL; i++)
		F.expected[i] = F.pending[i] && F.tick[i] <= now / FP_TIMER_TICK_US;
	F.fired = 0;
	F.in_run = true;
	unsigned n = fp_timer_run(&F.w, now);
	F.in_run = false;
	CHECK(n == F.fired);

	uint64_t count = 0, first = UINT64_MAX;
	for (int i = 0; i < POOL; i++) {
		CHECK(!F.expected[i]);
		CHECK(fp_timer_pending(&F.t[i]) == F.pending[i]);
		if (F.pending[i]) {
			count++;
			first = F.tick[i] < first ? F.tick[i] : first;
		}
	}
	CHECK(fp_timer_count(&F.w) == count);
	CHECK(count || fp_timer_next_us(&F.w) == UINT64_MAX);
	CHECK(!count || fp_timer_next_us(&F.w) <= first * FP_TIMER_TICK_US);
}

static uint64_t read_u32(const uint8_t *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

/* A value of up to @lg bits from 32 random ones, spread over the whole range. */
static uint64_t scaled(uint64_t r32, unsigned lg)
{
	uint64_t v = lg > 32 ? r32 << (lg - 32) : r32;
	return lg >= 64 ? v : v & ((1ull << lg) - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 2;

	if (size < 2)
		return 0;
	/* start anywhere up to 2^56 us, so wheel positions and levels start unaligned */
	uint64_t start = (uint64_t)data[0] << (data[1] % 49) | data[1];
	fp_timer_wheel_init(&F.w, start);
	memset(F.pending, 0, sizeof(F.pending));
	for (int i = 0; i < POOL; i++)
		fp_timer_init(&F.t[i], fz_fn);
	F.now = start;

	while (pos < size) {
		uint8_t op = data[pos];
		int i = (op >> 2) & (POOL - 1);
		if ((op & 3) == 2) {
			model_cancel(i);
			pos += 1;
		} else if ((op & 3) == 3) {
			if (pos + 6 > size)
				break;
			/* advances up to 2^37 us (~38 h): past the top level, not to the end of time */
			model_run(F.now + scaled(read_u32(&data[pos + 2]), data[pos + 1] % 38));
			pos += 6;
		} else {
			if (pos + 7 > size)
				break;
			uint8_t how = data[pos + 1];
			uint64_t dist = scaled(read_u32(&data[pos + 3]), how % 42);
			F.action[i] = data[pos + 2];
			F.delta_us[i] = scaled(read_u32(&data[pos + 3]), F.action[i] % 40);
			uint64_t d = (how & 0x40) ? F.now - (dist < F.now ? dist : F.now) : F.now + dist;
			model_add(i, d);
			pos += 7;
		}
	}
	/* everything still pending is at most 2^42 us ahead: let it all fire */
	for (int i = 0; i < POOL; i++)
		F.action[i] = 0;
	model_run(F.now + (1ull << 43));
	CHECK(fp_timer_count(&F.w) == 0);
	return 0;
}
