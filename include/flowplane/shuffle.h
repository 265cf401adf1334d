/* shuffle.h: ZygOS's shuffle layer: per-worker queues of ready flows that idle workers steal. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <flowplane/compiler.h>

/*
 * The middle layer of ZygOS (thesis 000_..., §3.4.2-3.4.4, Fig. 3.4 and 3.5), as mechanism
 * only: what an event is, how it runs and what its calls do belong to the caller.
 *
 *   - Every flow has one home worker, the only one that receives its frames, keeps its
 *     protocol state and executes its calls. The home posts the flow's events to it
 *     (fp_shuf_post); a flow with events and nobody running it is *ready* and sits in its
 *     home's shuffle queue exactly once.
 *   - Any worker may take a ready flow: the home from its own queue (fp_shuf_take), an idle
 *     worker from another's (fp_shuf_steal). Taking it hands over the flow's batch of events
 *     and the exclusive right to run them, so one flow's events run on one worker at a time,
 *     in order (§3.4.3).
 *   - A thief gives the flow back to its home through the home's return queue (fp_shuf_ran);
 *     the home executes the calls the batch produced (fp_shuf_returned), then completes it
 *     (fp_shuf_complete): the flow is idle again, or ready with the events that arrived
 *     meanwhile.
 *
 * Differences from ZygOS's implementation, and why. ZygOS guards each shuffle queue and the
 * state of its flows with a spinlock per core (trylock for thieves). Here the shuffle queue
 * is a lock-free bounded ring (Vyukov's MPMC array queue; one producer: the home) and the
 * flow's state is written only by its home, so a thief's steal is one CAS and the home never
 * waits. The price: events that arrive while a flow is queued wait in the flow's inbox until
 * its current batch completes, instead of joining the queued batch. With thousands of flows
 * that is rare; a flow that pipelines many requests sees its batches alternate.
 *
 * Memory: the queues hold flow pointers; a flow must stay allocated while it is ready or
 * running (the home frees a flow only when it is idle). A ready queue has a slot for every
 * flow of its home, so it is never full; a return queue is a list, never full either.
 */

/* An event, embedded in the caller's own record; the shuffle layer only links them. */
struct fp_shuf_ev {
	struct fp_shuf_ev *next;
};

struct fp_shuf_list {
	struct fp_shuf_ev *head, *tail;
	uint32_t n;
};

/* A flow's state as its home sees it: idle, or busy (ready in the queue, or running on
 * some worker, or on its way back); only the home changes it. */
enum fp_shuf_state { FP_SHUF_IDLE = 0, FP_SHUF_BUSY };

/* A flow's place in the shuffle layer, embedded in the caller's per-flow record. */
struct fp_shuf_flow {
	struct fp_shuf_list inbox;   /* home only: events that came while queued or taken */
	struct fp_shuf_list batch;   /* handed to whoever takes the flow: its events, in order */
	uint16_t home;
	uint8_t state;               /* home only: enum fp_shuf_state */
	uint8_t stolen;              /* written by the taker: run away from home */
	uint32_t batches;            /* home only: batches published (stats, tests) */
	struct fp_shuf_flow *rnext;  /* link in the home's return queue */
};

/* A slot of a ready queue: the flow, and when it became ready (thieves compare the heads'
 * times to pick the oldest). */
struct fp_shuf_slot {
	struct fp_shuf_flow *f;
	uint64_t t;
};

/* A ready queue: single producer (the home), any consumer. Consumers read the head slot,
 * then claim it with one CAS on @head; the producer writes a slot only once @head has
 * passed it, so what was read is what was claimed (Go's runqget). Full only when it holds
 * as many flows as it has slots, which a ring sized to the flows never does. */
struct fp_shuf_ring {
	uint64_t tail fp_aligned_cache;    /* the home's side */
	uint64_t head fp_aligned_cache;    /* consumers' side */
	uint64_t mask fp_aligned_cache;    /* read-only after init */
	struct fp_shuf_slot *slots;
};

/* A return queue: any producer (thieves), one consumer (the home); Vyukov's intrusive
 * MPSC list, linked through the flows, so a thief's push never fails or waits: one
 * exchange, one store. */
struct fp_shuf_mpsc {
	struct fp_shuf_flow *tail fp_aligned_cache;  /* producers exchange it */
	struct fp_shuf_flow *head fp_aligned_cache;  /* the consumer's */
	struct fp_shuf_flow *stub;
};

/* Per worker, one cache-line group each: what thieves touch is in the rings; the counters
 * below are written by the worker alone (summed when read). */
struct fp_shuf_wk {
	struct fp_shuf_ring ready;         /* this worker's ready flows (home pushes) */
	struct fp_shuf_mpsc back;          /* flows others ran, returned to this home */
	uint64_t rng fp_aligned_cache;     /* victim order */
	uint64_t taken_local;              /* own flows run here */
	uint64_t steals;                   /* flows taken from another worker */
	uint64_t steal_probes;             /* victims looked at */
	uint64_t steal_misses;             /* steal attempts that found nothing */
	uint64_t returns;                  /* flows that came back after running elsewhere */
};

enum fp_shuf_victim {
	FP_SHUF_VICTIM_RANDOM = 0,  /* ZygOS: other workers in a random order, first that has one */
	FP_SHUF_VICTIM_OLDEST,      /* look at every head, take the one waiting longest (the
				     * queueing model of tools/qsim --disc steal) */
};

struct fp_shuf {
	unsigned n;
	enum fp_shuf_victim victim;
	struct fp_shuf_wk *wk;             /* n of them, cache aligned */
};

/* Set up @n workers, each home to at most @max_flows flows at once (its ready queue's
 * size, rounded up to a power of two). 0 or -errno (-EINVAL, -ENOMEM). */
int fp_shuf_init(struct fp_shuf *s, unsigned n, uint32_t max_flows, uint64_t seed);
void fp_shuf_fini(struct fp_shuf *s);

/* A new, idle flow whose home is @home. */
void fp_shuf_flow_init(struct fp_shuf_flow *f, unsigned home);

/* Home only: @ev happened on @f. An idle flow becomes ready with it (and true is returned:
 * it is now in the home's queue); otherwise it waits in the inbox. @now orders thieves. */
bool fp_shuf_post(struct fp_shuf *s, struct fp_shuf_flow *f, struct fp_shuf_ev *ev,
		  uint64_t now);

/* Home only: @f has something for its next batch that is no event (returns of calls
 * made outside its batches). An idle flow becomes ready with an empty batch (true);
 * a busy one is left as it is. */
bool fp_shuf_kick(struct fp_shuf *s, struct fp_shuf_flow *f, uint64_t now);

/* Take the oldest ready flow of worker @self's own queue, or NULL. */
struct fp_shuf_flow *fp_shuf_take(struct fp_shuf *s, unsigned self);

/* Worker @self, idle: take a ready flow from another worker's queue, or NULL. */
struct fp_shuf_flow *fp_shuf_steal(struct fp_shuf *s, unsigned self);

/* Whether any other worker's queue looks non-empty (a hint: racy by design). */
bool fp_shuf_any_ready(const struct fp_shuf *s, unsigned self);

/* Worker @self ran @f's batch. True when @self is its home: complete it now. Otherwise
 * the flow goes back to its home's return queue and false is returned. */
bool fp_shuf_ran(struct fp_shuf *s, unsigned self, struct fp_shuf_flow *f);

/* Home @self: the next flow that came back from another worker, or NULL. Execute what its
 * batch produced, then fp_shuf_complete() it. */
struct fp_shuf_flow *fp_shuf_returned(struct fp_shuf *s, unsigned self);

/* Home only, after executing @f's calls: the flow becomes idle, or ready again with the
 * events of its inbox (true: it is back in the queue). */
bool fp_shuf_complete(struct fp_shuf *s, struct fp_shuf_flow *f, uint64_t now);

/* Whether worker @w's return queue looks non-empty (hint). */
bool fp_shuf_has_returns(const struct fp_shuf *s, unsigned w);

/* Ready flows in worker @w's queue (approximate while others run). */
uint32_t fp_shuf_ready_count(const struct fp_shuf *s, unsigned w);
