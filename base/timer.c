/* timer.c: expiry and cascade of the hierarchical timing wheel (add and cancel are inline). */
#include <string.h>

#include <flowplane/timer.h>

#define OCC_WORDS_PER_LEVEL (FP_TIMER_SLOTS / 64)

void fp_timer_wheel_init(struct fp_timer_wheel *w, uint64_t now_us)
{
	memset(w, 0, sizeof(*w));
	w->cur_tick = now_us >> FP_TIMER_TICK_SHIFT;
	w->horizon_tick = w->cur_tick;
	w->event_tick = UINT64_MAX;
}

/*
 * Distance from slot @from to the first occupied slot at or after it, going round the
 * level's 256 slots once; -1 if the level is empty. The fifth word visited is @from's own
 * word again, whose bits below @from are the slots just before it, a full turn ahead.
 */
static int occ_next(const uint64_t *occ, unsigned from)
{
	unsigned word = from / 64;
	uint64_t bits = occ[word] & (~0ull << (from % 64));

	for (unsigned i = 1; i <= OCC_WORDS_PER_LEVEL + 1; i++) {
		if (bits) {
			unsigned slot = ((word + i - 1) % OCC_WORDS_PER_LEVEL) * 64 +
					(unsigned)__builtin_ctzll(bits);
			return (int)((slot - from) & (FP_TIMER_SLOTS - 1));
		}
		bits = occ[(word + i) % OCC_WORDS_PER_LEVEL];
	}
	return -1;
}

/*
 * The first tick >= cur_tick at which some slot fires (level 0) or cascades (levels above,
 * at the tick that starts the slot); UINT64_MAX when the wheel is empty. Every timer's slot
 * event lies within one turn of its level from cur_tick, so one scan per level finds it.
 */
static uint64_t next_event(const struct fp_timer_wheel *w)
{
	uint64_t best = UINT64_MAX;

	for (unsigned level = 0; level < FP_TIMER_LEVELS; level++) {
		unsigned shift = level * FP_TIMER_LEVEL_BITS;
		uint64_t mask = (1ull << shift) - 1;
		uint64_t start = (w->cur_tick + mask) & ~mask; /* first slot boundary ahead */
		unsigned from = (unsigned)(start >> shift) & (FP_TIMER_SLOTS - 1);
		int k = occ_next(&w->occupied[level * OCC_WORDS_PER_LEVEL], from);

		if (k >= 0 && start + ((uint64_t)k << shift) < best)
			best = start + ((uint64_t)k << shift);
	}
	return best;
}

/* Detach slot @idx whole; its timers keep their links. */
static struct fp_timer *slot_take(struct fp_timer_wheel *w, unsigned idx)
{
	struct fp_timer *list = w->slot[idx];

	w->slot[idx] = NULL;
	w->occupied[idx / 64] &= ~(1ull << (idx % 64));
	return list;
}

/* Re-file every timer of slot @idx relative to cur_tick, which is the slot's start. */
static void cascade(struct fp_timer_wheel *w, unsigned idx)
{
	struct fp_timer *t = slot_take(w, idx);

	while (t) {
		struct fp_timer *next = t->next;
		__fp_timer_file(w, t);
		t = next;
	}
}

/*
 * Fire every timer of @list. The list lives in w->expiring while callbacks run, so a
 * callback can cancel or re-add a timer that is still waiting in it, like any other.
 */
static unsigned fire_list(struct fp_timer_wheel *w, struct fp_timer *list, uint64_t now_us)
{
	unsigned n = 0;
	struct fp_timer *t;

	w->expiring = list;
	if (list)
		list->pprev = &w->expiring;
	while ((t = w->expiring) != NULL) {
		__fp_timer_unlink(w, t);
		w->count--;
		t->fn(t, now_us);
		n++;
	}
	return n;
}

/*
 * Do the work of @tick: cascade every level whose slot starts here, top first so each
 * timer drops as far as it can, then fire level 0's slot. cur_tick passes @tick before
 * callbacks run, so what they arm is filed ahead of it.
 */
static unsigned expire_tick(struct fp_timer_wheel *w, uint64_t tick, uint64_t now_us)
{
	w->cur_tick = tick;
	for (unsigned level = FP_TIMER_LEVELS - 1; level > 0; level--) {
		unsigned shift = level * FP_TIMER_LEVEL_BITS;
		if (tick & ((1ull << shift) - 1))
			continue;
		unsigned idx = level * FP_TIMER_SLOTS + ((unsigned)(tick >> shift) & (FP_TIMER_SLOTS - 1));
		if (w->slot[idx])
			cascade(w, idx);
	}
	struct fp_timer *list = slot_take(w, (unsigned)tick & (FP_TIMER_SLOTS - 1));
	w->cur_tick = tick + 1;
	return fire_list(w, list, now_us);
}

unsigned fp_timer_run(struct fp_timer_wheel *w, uint64_t now_us)
{
	uint64_t end = (now_us >> FP_TIMER_TICK_SHIFT) + 1; /* first tick left for later */
	unsigned fired = 0;

	if (end < w->cur_tick)
		end = w->cur_tick;
	/* From here on, whatever a callback arms for a tick before @end waits for the next run. */
	w->horizon_tick = end;
	if (fp_unlikely(w->due != NULL)) {
		struct fp_timer *list = w->due;
		w->due = NULL;
		fired += fire_list(w, list, now_us);
	}
	/* Hop from one tick with work to the next; empty ticks and slots cost nothing. */
	while (w->event_tick < end) {
		uint64_t tick = next_event(w);
		w->event_tick = tick;
		if (tick >= end)
			break;
		fired += expire_tick(w, tick, now_us);
	}
	w->cur_tick = end;
	return fired;
}

uint64_t fp_timer_next_us(const struct fp_timer_wheel *w)
{
	if (w->count == 0)
		return UINT64_MAX;
	if (w->due)
		return 0;
	if (w->event_tick > (UINT64_MAX >> FP_TIMER_TICK_SHIFT))
		return UINT64_MAX;
	return w->event_tick << FP_TIMER_TICK_SHIFT;
}
