/* shuffle.c: ZygOS's shuffle layer: lock-free ready queues, steals, and flows sent home. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/shuffle.h>

#define LOAD_ACQ(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_RLX(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_RLX(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* ---- ready queues: single producer, any consumer ---- */

static int ring_init(struct fp_shuf_ring *r, uint32_t size)
{
	size_t bytes = (size * sizeof(*r->slots) + FP_CACHE_LINE - 1) / FP_CACHE_LINE * FP_CACHE_LINE;

	r->slots = aligned_alloc(FP_CACHE_LINE, bytes);
	if (!r->slots)
		return -ENOMEM;
	memset(r->slots, 0, bytes);
	r->mask = size - 1;
	r->head = r->tail = 0;
	return 0;
}

/* The home only. */
static bool ring_push(struct fp_shuf_ring *r, struct fp_shuf_flow *f, uint64_t t)
{
	uint64_t tail = r->tail;
	struct fp_shuf_slot *s = &r->slots[tail & r->mask];

	if (tail - LOAD_ACQ(&r->head) > r->mask)
		return false;                   /* full: never, with a slot per flow */
	STORE_RLX(&s->f, f);
	STORE_RLX(&s->t, t);
	STORE_REL(&r->tail, tail + 1);
	return true;
}

/* Anyone: read the head slot, then claim it. The home rewrites that slot only after head
 * has moved past it, so a successful CAS means the read was of this position's flow. */
static struct fp_shuf_flow *ring_pop(struct fp_shuf_ring *r)
{
	uint64_t head = LOAD_ACQ(&r->head);

	for (;;) {
		struct fp_shuf_flow *f;

		if (head == LOAD_ACQ(&r->tail))
			return NULL;
		f = LOAD_RLX(&r->slots[head & r->mask].f);
		if (__atomic_compare_exchange_n(&r->head, &head, head + 1, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return f;
	}
}

/* The time the head flow became ready, or UINT64_MAX when the queue looks empty. */
static uint64_t ring_head_time(const struct fp_shuf_ring *r)
{
	uint64_t head = LOAD_ACQ(&r->head);

	if (head == LOAD_ACQ(&r->tail))
		return UINT64_MAX;
	return LOAD_RLX(&r->slots[head & r->mask].t);
}

static uint32_t ring_count(const struct fp_shuf_ring *r)
{
	uint64_t t = LOAD_ACQ(&r->tail), h = LOAD_ACQ(&r->head);

	return t > h ? (uint32_t)(t - h) : 0;
}

/* ---- return queues: Vyukov's intrusive MPSC list ----
 *
 * The list always holds at least one node; @stub stands in when no flow is there. A push
 * exchanges the tail and then links the old tail to the new node: between the two, the
 * consumer sees a tail it cannot reach yet and reports nothing, to look again next pass. */

static int mpsc_init(struct fp_shuf_mpsc *q)
{
	q->stub = calloc(1, sizeof(*q->stub));
	if (!q->stub)
		return -ENOMEM;
	q->head = q->tail = q->stub;
	return 0;
}

static void mpsc_push(struct fp_shuf_mpsc *q, struct fp_shuf_flow *f)
{
	struct fp_shuf_flow *prev;

	STORE_RLX(&f->rnext, NULL);
	prev = __atomic_exchange_n(&q->tail, f, __ATOMIC_ACQ_REL);
	STORE_REL(&prev->rnext, f);
}

static struct fp_shuf_flow *mpsc_pop(struct fp_shuf_mpsc *q)
{
	struct fp_shuf_flow *head = q->head, *next = LOAD_ACQ(&head->rnext);

	if (head == q->stub) {
		if (!next)
			return NULL;
		q->head = head = next;
		next = LOAD_ACQ(&next->rnext);
	}
	if (next) {
		q->head = next;
		return head;
	}
	if (head != LOAD_ACQ(&q->tail))
		return NULL;                    /* a push is halfway: next pass */
	mpsc_push(q, q->stub);
	next = LOAD_ACQ(&head->rnext);
	if (!next)
		return NULL;
	q->head = next;
	return head;
}

static bool mpsc_nonempty(const struct fp_shuf_mpsc *q)
{
	return q->head != q->stub || LOAD_ACQ(&q->stub->rnext);
}

/* ---- lists of events ---- */

static void list_append(struct fp_shuf_list *l, struct fp_shuf_ev *ev)
{
	ev->next = NULL;
	if (l->tail)
		l->tail->next = ev;
	else
		l->head = ev;
	l->tail = ev;
	l->n++;
}

static void list_move(struct fp_shuf_list *dst, struct fp_shuf_list *src)
{
	*dst = *src;
	memset(src, 0, sizeof(*src));
}

/* ---- the layer ---- */

int fp_shuf_init(struct fp_shuf *s, unsigned n, uint32_t max_flows, uint64_t seed)
{
	uint32_t size = 2;

	memset(s, 0, sizeof(*s));
	if (!n || n > 1024 || !max_flows || max_flows > (1u << 30))
		return -EINVAL;
	while (size < max_flows)  /* a slot per flow: never full */
		size <<= 1;
	s->wk = aligned_alloc(FP_CACHE_LINE, n * sizeof(*s->wk));
	if (!s->wk)
		return -ENOMEM;
	memset(s->wk, 0, n * sizeof(*s->wk));
	s->n = n;
	for (unsigned i = 0; i < n; i++) {
		if (ring_init(&s->wk[i].ready, size) || mpsc_init(&s->wk[i].back)) {
			s->n = i + 1;
			fp_shuf_fini(s);
			return -ENOMEM;
		}
		s->wk[i].rng = seed * 0x9e3779b97f4a7c15ull + i + 1;
	}
	return 0;
}

void fp_shuf_fini(struct fp_shuf *s)
{
	for (unsigned i = 0; s->wk && i < s->n; i++) {
		free(s->wk[i].ready.slots);
		free(s->wk[i].back.stub);
	}
	free(s->wk);
	memset(s, 0, sizeof(*s));
}

void fp_shuf_flow_init(struct fp_shuf_flow *f, unsigned home)
{
	memset(f, 0, sizeof(*f));
	f->home = (uint16_t)home;
}

/* Publish @f's batch on its home's queue. The batch is written before the push, whose
 * release store makes it visible to whoever pops the flow. */
static bool flow_publish(struct fp_shuf *s, struct fp_shuf_flow *f, uint64_t now)
{
	list_move(&f->batch, &f->inbox);
	f->state = FP_SHUF_BUSY;
	f->stolen = 0;
	f->batches++;
	return ring_push(&s->wk[f->home].ready, f, now);
}

bool fp_shuf_post(struct fp_shuf *s, struct fp_shuf_flow *f, struct fp_shuf_ev *ev,
		  uint64_t now)
{
	list_append(&f->inbox, ev);
	if (f->state != FP_SHUF_IDLE)
		return false;
	return flow_publish(s, f, now);
}

bool fp_shuf_kick(struct fp_shuf *s, struct fp_shuf_flow *f, uint64_t now)
{
	return f->state == FP_SHUF_IDLE && flow_publish(s, f, now);
}

struct fp_shuf_flow *fp_shuf_take(struct fp_shuf *s, unsigned self)
{
	struct fp_shuf_flow *f = ring_pop(&s->wk[self].ready);

	if (f)
		s->wk[self].taken_local++;
	return f;
}

static uint64_t rng_next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ZygOS's idle loop visits the other cores "in a randomized order": start at a random
 * other worker and go round once. */
static struct fp_shuf_flow *steal_random(struct fp_shuf *s, unsigned self)
{
	struct fp_shuf_wk *me = &s->wk[self];
	unsigned start = (unsigned)(rng_next(&me->rng) % (s->n - 1));

	for (unsigned k = 0; k < s->n - 1; k++) {
		unsigned v = (self + 1 + (start + k) % (s->n - 1)) % s->n;
		struct fp_shuf_flow *f;

		me->steal_probes++;
		if (ring_head_time(&s->wk[v].ready) == UINT64_MAX)
			continue;
		f = ring_pop(&s->wk[v].ready);
		if (f)
			return f;
	}
	return NULL;
}

/* Look at every head and take the one that has waited longest; if another thief got it
 * first, the next oldest. */
static struct fp_shuf_flow *steal_oldest(struct fp_shuf *s, unsigned self)
{
	struct fp_shuf_wk *me = &s->wk[self];

	for (unsigned tries = 0; tries < s->n; tries++) {
		uint64_t best_t = UINT64_MAX;
		unsigned best = self;
		struct fp_shuf_flow *f;

		for (unsigned v = 0; v < s->n; v++) {
			uint64_t t;

			if (v == self)
				continue;
			me->steal_probes++;
			t = ring_head_time(&s->wk[v].ready);
			if (t < best_t) {
				best_t = t;
				best = v;
			}
		}
		if (best == self)
			return NULL;
		f = ring_pop(&s->wk[best].ready);
		if (f)
			return f;
	}
	return NULL;
}

struct fp_shuf_flow *fp_shuf_steal(struct fp_shuf *s, unsigned self)
{
	struct fp_shuf_flow *f = NULL;

	if (s->n > 1)
		f = s->victim == FP_SHUF_VICTIM_OLDEST ? steal_oldest(s, self)
						       : steal_random(s, self);
	if (f) {
		f->stolen = 1;
		s->wk[self].steals++;
	} else {
		s->wk[self].steal_misses++;
	}
	return f;
}

bool fp_shuf_any_ready(const struct fp_shuf *s, unsigned self)
{
	for (unsigned v = 0; v < s->n; v++)
		if (v != self && ring_head_time(&s->wk[v].ready) != UINT64_MAX)
			return true;
	return false;
}

bool fp_shuf_ran(struct fp_shuf *s, unsigned self, struct fp_shuf_flow *f)
{
	if (f->home == self)
		return true;
	mpsc_push(&s->wk[f->home].back, f);
	return false;
}

struct fp_shuf_flow *fp_shuf_returned(struct fp_shuf *s, unsigned self)
{
	struct fp_shuf_flow *f = mpsc_pop(&s->wk[self].back);

	if (f)
		s->wk[self].returns++;
	return f;
}

bool fp_shuf_complete(struct fp_shuf *s, struct fp_shuf_flow *f, uint64_t now)
{
	memset(&f->batch, 0, sizeof(f->batch));
	if (!f->inbox.n) {
		f->state = FP_SHUF_IDLE;
		return false;
	}
	return flow_publish(s, f, now);
}

bool fp_shuf_has_returns(const struct fp_shuf *s, unsigned w)
{
	return mpsc_nonempty(&s->wk[w].back);
}

uint32_t fp_shuf_ready_count(const struct fp_shuf *s, unsigned w)
{
	return ring_count(&s->wk[w].ready);
}
