/* timer.h: hierarchical timing wheel (IX, Varghese & Lauck) with O(1) add and cancel, 16 us ticks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <flowplane/compiler.h>

/*
 * Time is cut into 16 us ticks (the resolution IX uses for TCP incast timeouts). The wheel
 * has 4 levels of 256 slots; a slot of level L spans 256^L ticks, so level 0 covers ~4 ms,
 * level 1 ~1 s, level 2 ~268 s and level 3 ~19 h ahead. A deadline further out is parked in
 * the last slot level 3 can reach and re-filed from its real deadline when that slot cascades,
 * so it still fires on time; it costs one re-file per ~19 h of wheel time it waits.
 *
 * Most timers (retransmit, delayed ACK) are cancelled long before they fire, so add and cancel
 * are a handful of instructions on an intrusive list, and a timer only pays for cascading
 * (at most once per level) if it survives. A per-level occupancy bitmap lets fp_timer_run()
 * jump straight to the next tick with work, so a run after a long idle period costs one step
 * per occupied slot crossed, not one per tick.
 *
 * When a timer fires: a timer armed for deadline_us fires in the first fp_timer_run(w, now_us)
 * call, made after it was armed, whose tick now_us / 16 is >= ceil(deadline_us / 16). It never
 * fires early and at most 16 us "late" in wheel time. A deadline already past fires on the next
 * run. Within one run timers fire in tick order; within a tick the order is unspecified.
 *
 * Callbacks may add, re-add or cancel any timer of the wheel, the firing one included, and
 * timers still due later in the same run (a cancelled one then does not fire). A timer armed
 * from a callback never fires in that same run, even if its deadline is already due: it
 * fires on the next run, so a callback re-arming itself for "now" cannot livelock the loop.
 *
 * No allocation, no clock: the caller passes now_us, which must not go backwards. One wheel
 * per core; nothing here is thread-safe.
 */
#define FP_TIMER_TICK_SHIFT 4
#define FP_TIMER_TICK_US    (1u << FP_TIMER_TICK_SHIFT)
#define FP_TIMER_LEVEL_BITS 8
#define FP_TIMER_SLOTS      (1u << FP_TIMER_LEVEL_BITS)
#define FP_TIMER_LEVELS     4
/* Ticks the top level reaches ahead: 2^32 ticks, about 19 hours. */
#define FP_TIMER_SPAN_TICKS (1ull << (FP_TIMER_LEVEL_BITS * FP_TIMER_LEVELS))

struct fp_timer;

/* Called when @t fires, with the now_us given to fp_timer_run(). @t is no longer pending. */
typedef void (*fp_timer_fn)(struct fp_timer *t, uint64_t now_us);

/* Embed in the object it times; recover the object with fp_container_of(). */
struct fp_timer {
	struct fp_timer  *next;
	struct fp_timer **pprev;       /* NULL when not pending */
	uint64_t          expire_tick; /* ceil(deadline_us / 16) */
	fp_timer_fn       fn;
};

/* One per core, about 8.4 KiB: the slot heads, plus the few fields add and run share. */
struct fp_timer_wheel {
	uint64_t         cur_tick;     /* next tick to expire; all earlier ticks are done */
	uint64_t         horizon_tick; /* a timer armed for a tick below this goes to @due */
	uint64_t         event_tick;   /* lower bound on the next tick with work (fire/cascade) */
	uint64_t         count;        /* pending timers */
	struct fp_timer *due;          /* armed with a deadline already expired: next run */
	struct fp_timer *expiring;     /* the list run() is firing right now */
	uint64_t         occupied[FP_TIMER_LEVELS * FP_TIMER_SLOTS / 64]; /* bit per slot */
	struct fp_timer *slot[FP_TIMER_LEVELS * FP_TIMER_SLOTS];
};

/* Prepare @t (not pending) to call @fn when it fires. */
static inline void fp_timer_init(struct fp_timer *t, fp_timer_fn fn)
{
	t->next = NULL;
	t->pprev = NULL;
	t->expire_tick = 0;
	t->fn = fn;
}

/* The tick a timer armed for @deadline_us expires at: ceil(deadline_us / 16). A caller
 * can compare it with a pending timer's expire_tick to skip a re-arm that changes nothing. */
static inline uint64_t fp_timer_tick_of(uint64_t deadline_us)
{
	return (deadline_us >> FP_TIMER_TICK_SHIFT) + ((deadline_us & (FP_TIMER_TICK_US - 1)) != 0);
}

/* True while @t is armed and has neither fired nor been cancelled. */
static inline bool fp_timer_pending(const struct fp_timer *t) { return t->pprev != NULL; }

/* Number of pending timers in @w. */
static inline uint64_t fp_timer_count(const struct fp_timer_wheel *w) { return w->count; }

/* Start @w empty at time @now_us. */
void fp_timer_wheel_init(struct fp_timer_wheel *w, uint64_t now_us);

/*
 * Internal to add/cancel: take @t off whatever list holds it. When that empties a wheel
 * slot (pprev is the slot head itself), clear the slot's occupancy bit so run() and
 * fp_timer_next_us() do not visit it.
 */
static inline void __fp_timer_unlink(struct fp_timer_wheel *w, struct fp_timer *t)
{
	struct fp_timer *next = t->next;

	*t->pprev = next;
	if (next) {
		next->pprev = t->pprev;
	} else {
		uintptr_t off = (uintptr_t)t->pprev - (uintptr_t)&w->slot[0];
		if (off < sizeof(w->slot)) {
			unsigned idx = (unsigned)(off / sizeof(w->slot[0]));
			w->occupied[idx / 64] &= ~(1ull << (idx % 64));
		}
	}
	t->next = NULL;
	t->pprev = NULL;
}

/* Internal: link @t at the front of the list at @head. */
static inline void __fp_timer_push(struct fp_timer **head, struct fp_timer *t)
{
	t->next = *head;
	if (t->next)
		t->next->pprev = &t->next;
	*head = t;
	t->pprev = head;
}

/*
 * Internal to add and the cascade: file @t (expire_tick >= cur_tick) in the slot of the
 * lowest level whose span covers its distance from cur_tick (Varghese & Lauck scheme 7).
 * A slot of level L is cascaded at the tick that starts it, which is <= the deadline.
 */
static inline void __fp_timer_file(struct fp_timer_wheel *w, struct fp_timer *t)
{
	uint64_t tick = t->expire_tick;
	uint64_t delta = tick - w->cur_tick;
	unsigned level = 0;

	if (delta >= FP_TIMER_SLOTS) {
		level = (63u - (unsigned)__builtin_clzll(delta)) / FP_TIMER_LEVEL_BITS;
		if (fp_unlikely(level >= FP_TIMER_LEVELS)) {
			/* Beyond the top level: park in its furthest slot, re-filed on cascade. */
			level = FP_TIMER_LEVELS - 1;
			tick = w->cur_tick + FP_TIMER_SPAN_TICKS - 1;
		}
	}
	unsigned shift = level * FP_TIMER_LEVEL_BITS;
	unsigned idx = level * FP_TIMER_SLOTS + ((unsigned)(tick >> shift) & (FP_TIMER_SLOTS - 1));
	__fp_timer_push(&w->slot[idx], t);
	w->occupied[idx / 64] |= 1ull << (idx % 64);
	uint64_t event = (tick >> shift) << shift; /* when this slot fires or cascades */
	if (event < w->event_tick)
		w->event_tick = event;
}

/*
 * Arm @t to fire at @deadline_us (see the top of this file for exactly when). Re-adding a
 * pending timer moves it. O(1).
 */
static inline void fp_timer_add(struct fp_timer_wheel *w, struct fp_timer *t, uint64_t deadline_us)
{
	uint64_t tick = fp_timer_tick_of(deadline_us);

	if (t->pprev)
		__fp_timer_unlink(w, t);
	else
		w->count++;
	t->expire_tick = tick;
	if (fp_unlikely(tick < w->horizon_tick)) {
		__fp_timer_push(&w->due, t);
		return;
	}
	__fp_timer_file(w, t);
}

/* Disarm @t; a no-op when it is not pending. O(1). */
static inline void fp_timer_cancel(struct fp_timer_wheel *w, struct fp_timer *t)
{
	if (!t->pprev)
		return;
	__fp_timer_unlink(w, t);
	w->count--;
}

/*
 * Advance @w to @now_us and fire every timer due, calling each callback once. Returns how
 * many fired. Not reentrant: a callback must not call fp_timer_run() on its own wheel.
 */
unsigned fp_timer_run(struct fp_timer_wheel *w, uint64_t now_us);

/*
 * The earliest now_us at which fp_timer_run() may fire something, so a worker knows how
 * long it may sleep: never later than the first pending deadline (rounded up to its tick),
 * possibly earlier (a cascade boundary, or a timer since cancelled), in which case run()
 * does a little work and the caller asks again. 0 when a timer is already due (armed with
 * a past deadline); UINT64_MAX when nothing is pending.
 */
uint64_t fp_timer_next_us(const struct fp_timer_wheel *w);
