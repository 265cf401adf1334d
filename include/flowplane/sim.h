/* sim.h: an in-process wire joining stacks on a virtual clock, with seeded, replayable faults. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <flowplane/mbuf.h>
#include <flowplane/pool.h>

struct fp_stack;
struct fp_sim;

/*
 * A simulated Ethernet segment (a learning-free hub: a frame goes to the port whose stack
 * MAC matches its destination, broadcast goes to every other port). Each port is one
 * stack with its own pool cache; the wire copies every frame it delivers into the
 * receiver's buffers (a NIC's DMA) and frees the sender's, so buffer ownership never
 * crosses stacks.
 *
 * Faults are applied per frame per direction, from one splitmix64 stream seeded by @seed,
 * in a fixed order, so a run is a pure function of (seed, params, what the applications
 * do): any failure replays from its seed.
 *
 * Time is virtual: fp_sim_run() jumps the clock straight to the next thing that happens
 * (a frame arriving, a stack timer, an application wake-up), so a 60-second TIME_WAIT
 * costs nothing and a run is independent of the host's speed.
 */
struct fp_sim_params {
	uint64_t seed;
	double loss;         /* probability a frame is dropped */
	double duplicate;    /* probability a frame is delivered twice */
	double reorder;      /* probability a frame is held back by reorder_us extra */
	double corrupt;      /* probability one random bit of the frame is flipped */
	uint32_t delay_us;   /* one-way propagation delay */
	uint32_t jitter_us;  /* uniform extra delay in [0, jitter_us] */
	uint32_t reorder_us; /* extra delay of a reordered frame (default 4 * delay + 10) */
	uint64_t bandwidth_bps; /* per-port egress serialization; 0 = infinite */
	uint32_t queue_frames;  /* per-port egress queue; frames beyond it are tail-dropped
				 * (0 = unlimited) */
};

/* The application on a port: called after every batch of input or timers at @now_us, to
 * drain events and make calls; it returns the next time it wants to be called without a
 * new event (UINT64_MAX: only on events). Every application is also called once at the
 * start of each fp_sim_run(), so a caller can change what one does between runs. */
typedef uint64_t (*fp_sim_app_fn)(struct fp_stack *st, void *arg, uint64_t now_us);

struct fp_sim *fp_sim_create(const struct fp_sim_params *p, uint64_t start_us);
/* Frees the wire and frames in flight (through their senders' caches, so destroy the wire
 * before the stacks' pools); not the stacks. */
void fp_sim_destroy(struct fp_sim *sim);

/* Attach @st (whose frames come from/return to @cache) with its application. Returns the
 * port number, or -ENOSPC (at most 16 ports). The port's MAC is learnt from the source
 * address of the frames its stack sends (the gratuitous ARP queued at creation is first). */
int fp_sim_attach(struct fp_sim *sim, struct fp_stack *st, struct fp_pool_cache *cache,
		  fp_sim_app_fn app, void *arg);

/* Change the fault parameters mid-run (the seed stream carries on). */
void fp_sim_set_params(struct fp_sim *sim, const struct fp_sim_params *p);

/*
 * Run until @until_us of virtual time, or until @done(@arg) is true (checked after every
 * step; NULL = never), or until nothing is left to happen. Returns the virtual time reached.
 */
uint64_t fp_sim_run(struct fp_sim *sim, uint64_t until_us, bool (*done)(void *arg), void *arg);

uint64_t fp_sim_now(const struct fp_sim *sim);

struct fp_sim_stats {
	uint64_t frames, bytes;           /* offered to the wire */
	uint64_t delivered, lost, duplicated, reordered, corrupted, queue_drops;
	uint64_t nobufs;                  /* receiver had no buffer for the copy */
};

void fp_sim_stats(const struct fp_sim *sim, struct fp_sim_stats *out);
