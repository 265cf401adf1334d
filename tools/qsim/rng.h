/* rng.h: qsim's seeded generator (xoshiro256** seeded by splitmix64) and its variates. */
#pragma once

#include <math.h>
#include <stdint.h>

/*
 * xoshiro256** (Blackman and Vigna, "Scrambled linear pseudorandom number generators",
 * 2021): 256 bits of state, passes BigCrush, a few ns per draw. Seeded through splitmix64
 * as its authors recommend, so nearby seeds give unrelated streams. Written here rather
 * than taken from libc so that the same seed gives the same bytes on every platform.
 */
struct qs_rng {
	uint64_t s[4];
};

static inline uint64_t qs_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Seed @r for stream @stream of @seed: arrivals, service times and routing draw from
 * separate streams, so changing one model knob leaves the others' draws unchanged. */
static inline void qs_rng_seed(struct qs_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
	for (int i = 0; i < 4; i++)
		r->s[i] = qs_splitmix64(&x);
}

static inline uint64_t qs_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t qs_rng_next(struct qs_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = qs_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = qs_rotl(s[3], 45);
	return out;
}

/* Uniform on (0, 1]: never 0, so -log() is always finite. */
static inline double qs_rng_u01(struct qs_rng *r)
{
	return (double)((qs_rng_next(r) >> 11) + 1) * 0x1p-53;
}

/* Exponential with mean 1. */
static inline double qs_rng_exp(struct qs_rng *r) { return -log(qs_rng_u01(r)); }

/* Standard normal by Box-Muller (one of the pair; the other is dropped to keep no state). */
static inline double qs_rng_normal(struct qs_rng *r)
{
	double u = qs_rng_u01(r), v = qs_rng_u01(r);
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Uniform integer in [0, n) by Lemire's multiply-shift (bias below 2^-32 for small n). */
static inline uint32_t qs_rng_below(struct qs_rng *r, uint32_t n)
{
	return (uint32_t)(((qs_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}
