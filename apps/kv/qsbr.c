/* qsbr.c: fp-kv's quiescent-state-based reclamation: limbo lists, epochs, quiescent states, reuse of retired items. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_defs.h"

/* ---- QSBR ---- */

/* Free a limbo list, taking each class lock once per run of the same class. */
static void free_list(struct kv_store *s, struct kv_worker *k, struct kv_item *it)
{
	struct kv_class *held = NULL;

	while (it) {
		struct kv_item *next = it->lnext;
		struct kv_class *c = &s->cls[it->clsid];
		if (c != held) {
			if (held)
				kv_unlock(&held->lock);
			kv_lock(&c->lock);
			held = c;
		}
		if (k)
			kv_ctr_add(&k->cs[it->clsid][KV_CS_LIMBO], (uint64_t)-1);
		chunk_free_locked(s, c, it);
		it = next;
	}
	if (held)
		kv_unlock(&held->lock);
}

void kv_retire(struct kv_store *s, unsigned w, struct kv_item *it)
{
	struct kv_worker *k = &s->workers[w];

	kv_item_set_state(it, KV_ST_LIMBO);
	kv_ctr_add(&k->cs[it->clsid][KV_CS_LIMBO], 1);
	it->lnext = k->pend;
	k->pend = it;
}

void kv_hold(struct kv_store *s, unsigned w, struct kv_item *it)
{
	struct kv_worker *k = &s->workers[w];
	uint32_t n = atomic_load_explicit(&k->nheld, memory_order_relaxed);

	if (n < KV_HELD_MAX)
		atomic_store_explicit(&k->held[n], it, memory_order_relaxed);
	if (n <= KV_HELD_MAX)
		atomic_store_explicit(&k->nheld, n + 1, memory_order_relaxed);
}

/* Going online: qs = 0 first (blocks all reuse), then the epoch (seq_cst, so a reclaimer
 * that still read OFFLINE retired its items before our epoch read: we cannot find them). */
void kv_worker_online(struct kv_store *s, unsigned w)
{
	struct kv_worker *k = &s->workers[w];

	atomic_store(&k->qs, 0);
	atomic_store_explicit(&k->nheld, 0, memory_order_relaxed);
	atomic_store(&k->qs, atomic_load(&s->epoch));
}

/* Batches stay in stamp order; when all are in use the newest absorbs the list (a later
 * stamp than needed: reuse waits longer, never too little). */
static void push_batch(struct kv_worker *k, struct kv_item *head, struct kv_item *tail, uint64_t e)
{
	if (k->nbatch == KV_LIMBO_BATCHES) {
		struct kv_limbo_batch *b = &k->batch[KV_LIMBO_BATCHES - 1];
		b->tail->lnext = head;
		b->tail = tail;
		b->stamp = e;
	} else {
		k->batch[k->nbatch++] = (struct kv_limbo_batch){ head, tail, e };
	}
}

/* Stamp what this worker retired since the last stamp with a fresh epoch: reusable once
 * every worker has read an epoch at least this large at a quiescent state. */
static void stamp_pending(struct kv_store *s, struct kv_worker *k)
{
	struct kv_item *tail = k->pend;
	uint64_t e;

	if (!tail)
		return;
	while (tail->lnext)
		tail = tail->lnext;
	e = atomic_fetch_add(&s->epoch, 1) + 1;
	push_batch(k, k->pend, tail, e);
	k->pend = NULL;
}

/* A parked worker's held items, if it stays parked while we read them. */
static bool parked_snapshot(struct kv_worker *v, struct kv_item **excl, size_t *nex)
{
	uint32_t p = atomic_load(&v->parked), n;
	size_t start = *nex;

	if (!(p & 1) || (n = atomic_load_explicit(&v->nheld, memory_order_relaxed)) > KV_HELD_MAX)
		return false;
	for (uint32_t i = 0; i < n; i++)
		excl[(*nex)++] = atomic_load_explicit(&v->held[i], memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&v->parked, memory_order_relaxed) != p) {
		*nex = start;
		return false;
	}
	return true;
}

/* Our own views this round (we are not quiescent while allocating). */
static bool held_snapshot_self(struct kv_worker *k, struct kv_item **excl, size_t *nex)
{
	uint32_t n = atomic_load_explicit(&k->nheld, memory_order_relaxed);

	if (n > KV_HELD_MAX)
		return false;
	for (uint32_t i = 0; i < n; i++)
		excl[(*nex)++] = atomic_load_explicit(&k->held[i], memory_order_relaxed);
	return true;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
	return (x > y) - (x < y);
}

/*
 * Reuse what is safe in @w's limbo: batches stamped at or before every other worker's last
 * quiescent state, except items a parked worker still holds. Unless @quiesced, @w itself
 * is mid-round and its own views are held too. Returns chunks freed.
 */
unsigned reclaim(struct kv_store *s, unsigned w, bool quiesced)
{
	struct kv_worker *k = &s->workers[w];
	uint64_t safe = UINT64_MAX, top;
	struct kv_item *keep = NULL, *out = NULL;
	size_t nex = 0;
	unsigned nb = 0, freed = 0;

	stamp_pending(s, k);
	if (!k->nbatch)
		return 0;
	top = k->batch[k->nbatch - 1].stamp;
	if (!quiesced && !held_snapshot_self(k, k->excl, &nex))
		return 0;
	for (unsigned v = 0; v < s->cfg.n_workers; v++) {
		uint64_t q = atomic_load(&s->workers[v].qs);
		if (v == w || q == KV_QS_OFFLINE || q >= top)
			continue;
		if (!parked_snapshot(&s->workers[v], k->excl, &nex) && q < safe)
			safe = q;
	}
	if (nex)
		qsort(k->excl, nex, sizeof(*k->excl), cmp_ptr);
	for (; nb < k->nbatch && k->batch[nb].stamp <= safe; nb++) {
		for (struct kv_item *it = k->batch[nb].head, *next; it; it = next) {
			next = it->lnext;
			bool held = nex && bsearch(&it, k->excl, nex, sizeof(*k->excl), cmp_ptr);
			it->lnext = held ? keep : out;
			*(held ? &keep : &out) = it;
			freed += !held;
		}
	}
	memmove(k->batch, k->batch + nb, (k->nbatch - nb) * sizeof(k->batch[0]));
	k->nbatch -= nb;
	free_list(s, k, out);
	for (struct kv_item *it = keep, *next; it; it = next) {  /* retire again, restamped */
		next = it->lnext;
		it->lnext = k->pend;
		k->pend = it;
	}
	return freed;
}

/* Take the limbo of workers gone offline into ours, with its stamp (or our latest, if
 * later: later is never wrong), so the usual reclaim frees it. */
void adopt_orphans(struct kv_store *s, struct kv_worker *k)
{
	struct kv_item *list, *tail;
	uint64_t stamp;

	if (!atomic_load_explicit(&s->have_orphans, memory_order_relaxed) || !kv_trylock(&s->orphan_lock))
		return;
	list = s->orphans;
	stamp = s->orphan_stamp;
	s->orphans = NULL;
	atomic_store_explicit(&s->have_orphans, false, memory_order_relaxed);
	kv_unlock(&s->orphan_lock);
	if (!list)
		return;
	for (tail = list;; tail = tail->lnext) {
		kv_ctr_add(&k->cs[tail->clsid][KV_CS_LIMBO], 1);
		if (!tail->lnext)
			break;
	}
	stamp_pending(s, k);
	if (k->nbatch && k->batch[k->nbatch - 1].stamp > stamp)
		stamp = k->batch[k->nbatch - 1].stamp;
	push_batch(k, list, tail, stamp);
}

void kv_store_quiesce(struct kv_store *s, unsigned w)
{
	struct kv_worker *k = &s->workers[w];

	if (atomic_load_explicit(&k->qs, memory_order_relaxed) == KV_QS_OFFLINE)
		return;
	stamp_pending(s, k);
	atomic_store_explicit(&k->nheld, 0, memory_order_relaxed);
	atomic_store(&k->qs, atomic_load(&s->epoch));
	adopt_orphans(s, k);
	if (k->nbatch)
		reclaim(s, w, true);
}

/* Hand what cannot be reused yet to the orphan list (freed by whoever quiesces later). */
void kv_store_offline(struct kv_store *s, unsigned w)
{
	struct kv_worker *k = &s->workers[w];

	if (atomic_load_explicit(&k->qs, memory_order_relaxed) == KV_QS_OFFLINE)
		return;
	kv_store_quiesce(s, w);
	if (k->nbatch) {
		kv_lock(&s->orphan_lock);
		for (unsigned i = 0; i < k->nbatch; i++) {
			for (struct kv_item *it = k->batch[i].head; it; it = it->lnext)
				kv_ctr_add(&k->cs[it->clsid][KV_CS_LIMBO], (uint64_t)-1);
			k->batch[i].tail->lnext = s->orphans;
			s->orphans = k->batch[i].head;
			if (k->batch[i].stamp > s->orphan_stamp)
				s->orphan_stamp = k->batch[i].stamp;
		}
		atomic_store_explicit(&s->have_orphans, true, memory_order_relaxed);
		kv_unlock(&s->orphan_lock);
		k->nbatch = 0;
	}
	atomic_store(&k->qs, KV_QS_OFFLINE);
}
