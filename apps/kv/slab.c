/* slab.c: fp-kv's memory: a slab arena of exactly -m bytes, CLOCK eviction, QSBR reuse. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "store_defs.h"

#define WAIT_FOR_MEMORY_NS 1000000000ull  /* then SERVER_ERROR out of memory, as memcached
					   * answers when its LRU tail is all in use */

static uint32_t page_of(const struct kv_store *s, const struct kv_item *it)
{
	return (uint32_t)(((const uint8_t *)it - s->arena) >> KV_PAGE_SHIFT);
}

static uint32_t run_pages(size_t size) { return (uint32_t)((size + KV_PAGE_SIZE - 1) >> KV_PAGE_SHIFT); }

/* ---- setup ---- */

/* memcached's slabs_init: 48 + -n bytes, times -f (truncated), 8-aligned, while under
 * slab_chunk_max / f; then slab_chunk_max itself (half a page). A whole-page class follows
 * for items memcached would chain in chunks: values here are contiguous. */
static unsigned init_classes(struct kv_store *s)
{
	double f = s->cfg.growth_factor > 1.0 ? s->cfg.growth_factor : 1.25;
	unsigned size = (unsigned)sizeof(struct kv_item) + (s->cfg.chunk_min ? s->cfg.chunk_min : 48);
	unsigned i = 1;

	for (; i < KV_HUGE - 2 && size < MC_CHUNK_MAX / f; i++) {
		if (size % KV_CHUNK_ALIGN)
			size += KV_CHUNK_ALIGN - size % KV_CHUNK_ALIGN;
		s->cls[i].size = size;
		size = (unsigned)(size * f);
	}
	s->cls[i++].size = MC_CHUNK_MAX;
	s->cls[i++].size = KV_PAGE_SIZE;
	for (unsigned j = 1; j < i; j++)
		s->cls[j].perslab = KV_PAGE_SIZE / s->cls[j].size;
	s->cls[KV_HUGE].perslab = 1;
	for (unsigned j = 0; j < KV_MAX_CLASSES; j++)
		s->cls[j].first_page = s->cls[j].hand_page = s->cls[j].crawl_page = KV_NO_PAGE;
	return i;
}

int kv_slab_init(struct kv_store *s, char *err, size_t errlen)
{
	const struct kv_store_config *c = &s->cfg;
	size_t len;

	if (c->item_max < 1024) {
		snprintf(err, errlen, "Item max size cannot be less than 1024 bytes.");
		return -1;
	}
	if (c->item_max > c->mem_limit / 2) {
		snprintf(err, errlen, "Cannot set item size limit higher than 1/2 of memory max.");
		return -1;
	}
	s->npages = (uint32_t)(c->mem_limit >> KV_PAGE_SHIFT);
	atomic_store_explicit(&s->page_limit, s->npages, memory_order_relaxed);
	len = (size_t)s->npages << KV_PAGE_SHIFT;
	s->cls = aligned_alloc(FP_CACHE_LINE, KV_MAX_CLASSES * sizeof(*s->cls));
	s->pages = calloc(s->npages, sizeof(*s->pages));
	if (!s->cls || !s->pages || !s->npages) {
		snprintf(err, errlen, s->npages ? "out of memory" : "-m must be at least 1 MiB");
		return -1;
	}
	memset(s->cls, 0, KV_MAX_CLASSES * sizeof(*s->cls));
	s->nclasses = init_classes(s);
	/* Reserved, not committed: pages are touched as classes take them (or now with -L). */
	s->arena = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			-1, 0);
	if (s->arena == MAP_FAILED) {
		s->arena = NULL;
		snprintf(err, errlen, "cannot map %zu bytes for the slab arena", len);
		return -1;
	}
	if (c->prealloc)
		memset(s->arena, 0, len);
	for (unsigned i = 0; i < c->n_workers; i++) {
		s->workers[i].excl = calloc((size_t)c->n_workers * KV_HELD_MAX, sizeof(struct kv_item *));
		if (!s->workers[i].excl) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	}
	return 0;
}

void kv_slab_fini(struct kv_store *s)
{
	if (s->arena)
		munmap(s->arena, (size_t)s->npages << KV_PAGE_SHIFT);
	if (s->workers)
		for (unsigned i = 0; i < s->cfg.n_workers; i++)
			free(s->workers[i].excl);
	free(s->pages);
	free(s->cls);
}

unsigned kv_slab_class(const struct kv_store *s, size_t size)
{
	unsigned lo = 1, hi = s->nclasses - 1;

	if (size > KV_PAGE_SIZE)
		return KV_HUGE;
	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		if (s->cls[mid].size >= size)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

bool kv_slab_fits(const struct kv_store *s, const struct kv_item *it, size_t size)
{
	if (it->clsid == KV_HUGE)
		return kv_slab_class(s, size) == KV_HUGE && s->pages[page_of(s, it)].run == run_pages(size);
	return kv_slab_class(s, size) == it->clsid;
}

/* ---- pages ---- */

/* @run free pages in a row for class @id, or KV_NO_PAGE. */
static uint32_t pool_take(struct kv_store *s, uint32_t run, unsigned id)
{
	uint32_t found = KV_NO_PAGE, n = 0, used;
	uint32_t limit = atomic_load_explicit(&s->page_limit, memory_order_relaxed);

	kv_lock(&s->page_lock);
	used = atomic_load_explicit(&s->pages_used, memory_order_relaxed);
	if (used < limit && limit - used >= run) {
		for (uint32_t k = 0; k < s->npages && found == KV_NO_PAGE; k++) {
			uint32_t p = run == 1 ? (s->page_cursor + k) % s->npages : k;
			n = s->pages[p].clsid ? 0 : n + 1;
			if (run == 1 ? n == 1 : n == run)
				found = p + 1 - n;
		}
	}
	if (found != KV_NO_PAGE) {
		for (uint32_t p = found; p < found + run; p++)
			s->pages[p] = (struct kv_page){ .clsid = (uint8_t)id, .next = KV_NO_PAGE };
		s->pages[found].run = run;
		atomic_fetch_add_explicit(&s->pages_used, run, memory_order_relaxed);
		s->page_cursor = found + 1;
	}
	kv_unlock(&s->page_lock);
	return found;
}

static void pool_put(struct kv_store *s, uint32_t p, uint32_t run)
{
	kv_lock(&s->page_lock);
	for (uint32_t i = p; i < p + run; i++)
		s->pages[i] = (struct kv_page){ .next = KV_NO_PAGE };
	atomic_fetch_sub_explicit(&s->pages_used, run, memory_order_relaxed);
	kv_unlock(&s->page_lock);
}

/* Under the class lock: pages with nothing in use, per class and in all. */
static void empty_add(struct kv_store *s, struct kv_class *c, int d)
{
	c->empty += (uint32_t)d;
	atomic_fetch_add_explicit(&s->empty_pages, (uint32_t)d, memory_order_relaxed);
}

/* Early eviction keeps this many chunks free (1/64 of the class, at most 512) once the
 * pool is dry, so that writers rarely wait for a grace period. */
static void set_reserve(struct kv_class *c)
{
	uint64_t n = (uint64_t)c->npages * c->perslab / 64;

	c->reserve = n > 512 ? 512 : (uint32_t)n;
}

/* Under the class lock. */
static void class_add_page(struct kv_store *s, struct kv_class *c, uint32_t p)
{
	s->pages[p].next = c->first_page;
	c->first_page = p;
	c->npages++;
	set_reserve(c);
}

static void class_drop_page(struct kv_store *s, struct kv_class *c, uint32_t p)
{
	uint32_t *pp = &c->first_page;

	while (*pp != p)
		pp = &s->pages[*pp].next;
	*pp = s->pages[p].next;
	c->npages--;
	set_reserve(c);
	if (c->hand_page == p)
		c->hand_page = KV_NO_PAGE;
	if (c->crawl_page == p)
		c->crawl_page = KV_NO_PAGE;
	pool_put(s, p, s->pages[p].run);
}

/* Under the class lock: a fresh page cut into chunks on the free list (lowest first). */
static bool class_grow(struct kv_store *s, struct kv_class *c, unsigned id)
{
	uint32_t p = pool_take(s, 1, id);

	if (p == KV_NO_PAGE)
		return false;
	class_add_page(s, c, p);
	for (uint32_t i = c->perslab; i-- > 0;) {
		struct kv_item *it = chunk_at(s, p, i, c->size);
		it->clsid = (uint8_t)id;
		atomic_store_explicit(&it->iflags, KV_ST_FREE, memory_order_relaxed);
		it->lnext = c->free;
		c->free = it;
	}
	c->nfree += c->perslab;
	empty_add(s, c, 1);
	return true;
}

/* A chunk of class @id; *@low when the class is short of its reserve and the pool dry. */
static struct kv_item *class_pop(struct kv_store *s, unsigned id, bool *low)
{
	struct kv_class *c = &s->cls[id];
	struct kv_item *it;

	kv_lock(&c->lock);
	if (!c->free && !class_grow(s, c, id)) {
		kv_unlock(&c->lock);
		return NULL;
	}
	it = c->free;
	c->free = it->lnext;
	c->nfree--;
	c->used++;
	if (s->pages[page_of(s, it)].used++ == 0)
		empty_add(s, c, -1);
	atomic_store_explicit(&it->iflags, KV_ST_NEW, memory_order_relaxed);
	*low = c->nfree < c->reserve &&
	       atomic_load_explicit(&s->pages_used, memory_order_relaxed) >=
	       atomic_load_explicit(&s->page_limit, memory_order_relaxed);
	kv_unlock(&c->lock);
	return it;
}

/* A page run for one item larger than a page. */
static struct kv_item *huge_pop(struct kv_store *s, size_t size)
{
	struct kv_class *c = &s->cls[KV_HUGE];
	uint32_t p = pool_take(s, run_pages(size), KV_HUGE);
	struct kv_item *it;

	if (p == KV_NO_PAGE)
		return NULL;
	it = chunk_at(s, p, 0, 0);
	it->clsid = KV_HUGE;
	atomic_store_explicit(&it->iflags, KV_ST_NEW, memory_order_relaxed);
	kv_lock(&c->lock);
	class_add_page(s, c, p);
	s->pages[p].used = 1;
	c->used++;
	kv_unlock(&c->lock);
	return it;
}

/* Under the class lock: a chunk back to its class, or its page back to the pool when the
 * page is being emptied (draining) and this was its last chunk in use. */
void chunk_free_locked(struct kv_store *s, struct kv_class *c, struct kv_item *it)
{
	uint32_t p = page_of(s, it);

	atomic_store_explicit(&it->iflags, KV_ST_FREE, memory_order_relaxed);
	c->used--;
	if (--s->pages[p].used == 0 && (s->pages[p].draining || it->clsid == KV_HUGE)) {
		class_drop_page(s, c, p);
		return;
	}
	if (!s->pages[p].draining) {
		if (s->pages[p].used == 0)
			empty_add(s, c, 1);
		it->lnext = c->free;
		c->free = it;
		c->nfree++;
	}
}

void kv_slab_free_new(struct kv_store *s, struct kv_item *it)
{
	struct kv_class *c = &s->cls[it->clsid];

	kv_lock(&c->lock);
	chunk_free_locked(s, c, it);
	kv_unlock(&c->lock);
}

/* ---- eviction ---- */

/* Under the class lock: unlink @it for eviction if its stripe is free (lock order is
 * stripe then class, so only a try). Counts as memcached's lru_pull_tail does. */
static bool evict_one(struct kv_store *s, unsigned w, struct kv_class *c, struct kv_item *it)
{
	uint64_t hv = kv_hash(kv_item_key(it), it->nkey);
	struct kv_lock *l = kv_stripe(s, hv);
	uint32_t now = kv_store_now(s);
	bool dead = kv_item_dead(s, it, now), done;
	uint16_t f = atomic_load_explicit(&it->iflags, memory_order_relaxed);

	if (!kv_trylock(l))
		return false;
	done = kv_item_state(it) == KV_ST_LINKED && kv_unlink_locked(s, w, it, hv);
	kv_unlock(l);
	if (!done)
		return false;
	if (dead) {
		c->reclaimed++;
		c->expired_unfetched += !(f & KV_F_FETCHED);
	} else {
		uint32_t exp = atomic_load_explicit(&it->exptime, memory_order_relaxed);

		c->evicted++;
		c->evicted_nonzero += exp != 0;
		c->evicted_unfetched += !(f & KV_F_FETCHED);
		c->evicted_time = now - atomic_load_explicit(&it->atime, memory_order_relaxed);
		if (s->evict_hook) {   /* the item is in limbo: readable until the grace period */
			struct kv_evicted e = {
				.key = kv_item_key(it), .nkey = it->nkey, .fetched = f & KV_F_FETCHED,
				.ttl = exp ? (int64_t)exp - now : -1, .idle = c->evicted_time,
				.cls = (uint8_t)it->clsid, .nbytes = it->nbytes,
			};

			s->evict_hook(s->evict_arg, &e);
		}
	}
	return true;
}

static struct kv_item *hand_next(struct kv_store *s, struct kv_class *c)
{
	if (c->hand_page == KV_NO_PAGE || c->hand_chunk >= c->perslab) {
		c->hand_page = c->hand_page == KV_NO_PAGE ? KV_NO_PAGE : s->pages[c->hand_page].next;
		if (c->hand_page == KV_NO_PAGE)
			c->hand_page = c->first_page;
		c->hand_chunk = 0;
	}
	return chunk_at(s, c->hand_page, c->hand_chunk++, c->size);
}

/*
 * CLOCK (Corbató, 1968), per class: the hand sweeps the chunks; an expired or flushed item
 * is reclaimed at once, a set reference bit buys one more lap, anything else is evicted.
 * At most two laps (or @limit chunks), so it stops when everything is new, in limbo, or
 * locked.
 */
static unsigned evict(struct kv_store *s, unsigned w, unsigned id, unsigned want, uint64_t limit)
{
	struct kv_class *c = &s->cls[id];
	unsigned got = 0;

	kv_lock(&c->lock);
	if (!limit)
		limit = 2 * (uint64_t)c->npages * c->perslab + 1;
	for (uint64_t n = 0; c->npages && got < want && n < limit; n++) {
		struct kv_item *it = hand_next(s, c);
		uint16_t f = atomic_load_explicit(&it->iflags, memory_order_acquire);
		if ((f & KV_ST_MASK) != KV_ST_LINKED || s->pages[page_of(s, it)].draining)
			continue;
		if ((f & KV_F_REF) && !kv_item_dead(s, it, kv_store_now(s))) {
			atomic_fetch_and_explicit(&it->iflags, (uint16_t)~KV_F_REF, memory_order_relaxed);
			continue;
		}
		got += evict_one(s, w, c, it);
	}
	kv_unlock(&c->lock);
	return got;
}

/*
 * The expiry crawler (memcached's LRU crawler, which is on by default): a hand of its own
 * sweeps each class and reclaims the items that have expired or were flushed, so their
 * memory is reused before the class takes a fresh page; nothing live is touched. At most
 * @budget chunks per class per call, the class lock held for KV_CRAWL_BATCH at a time.
 */
#define KV_CRAWL_BATCH 256u

static unsigned crawl_class(struct kv_store *s, unsigned w, struct kv_class *c, unsigned budget)
{
	unsigned got = 0;
	uint32_t now = kv_store_now(s);

	for (unsigned done = 0; done < budget;) {
		unsigned n = 0;

		kv_lock(&c->lock);
		for (; c->npages && n < KV_CRAWL_BATCH && done < budget; n++, done++) {
			struct kv_item *it;
			uint16_t f;

			if (c->crawl_page == KV_NO_PAGE || c->crawl_chunk >= c->perslab) {
				c->crawl_page = c->crawl_page == KV_NO_PAGE ? c->first_page
									    : s->pages[c->crawl_page].next;
				c->crawl_chunk = 0;
				if (c->crawl_page == KV_NO_PAGE) {   /* a lap is done */
					done = budget;
					break;
				}
				if (c->crawl_page == c->first_page)    /* a lap starts */
					atomic_fetch_add_explicit(&s->crawler_starts, 1,
								  memory_order_relaxed);
			}
			it = chunk_at(s, c->crawl_page, c->crawl_chunk++, c->size);
			f = atomic_load_explicit(&it->iflags, memory_order_acquire);
			if ((f & KV_ST_MASK) != KV_ST_LINKED || s->pages[c->crawl_page].draining)
				continue;
			c->crawler_checked++;
			if (kv_item_dead(s, it, now) && evict_one(s, w, c, it)) {
				c->crawler_reclaimed++;
				got++;
			}
		}
		kv_unlock(&c->lock);
		if (!n)
			break;
	}
	return got;
}

void kv_store_set_evict_hook(struct kv_store *s, void (*fn)(void *arg, const struct kv_evicted *e),
			     void *arg)
{
	s->evict_arg = arg;
	s->evict_hook = fn;
}

void kv_store_crawler_enable(struct kv_store *s, bool on)
{
	atomic_store_explicit(&s->crawler_off, !on, memory_order_relaxed);
}

bool kv_store_crawler_enabled(const struct kv_store *s)
{
	return !atomic_load_explicit(&s->crawler_off, memory_order_relaxed);
}

unsigned kv_store_crawl(struct kv_store *s, unsigned w, unsigned budget)
{
	unsigned got = 0;

	if (!kv_store_crawler_enabled(s))
		return 0;
	kv_enter(s, w);
	for (unsigned id = 1; id < s->nclasses; id++)
		got += crawl_class(s, w, &s->cls[id], budget);
	return got + crawl_class(s, w, &s->cls[KV_HUGE], budget);
}

bool kv_store_dump(struct kv_store *s, unsigned w, uint64_t mask, struct kv_dump_cursor *cur,
		   bool (*fn)(void *arg, const struct kv_item_meta *m), void *arg)
{
	uint32_t now = kv_store_now(s);
	uint64_t started = atomic_load_explicit(&s->started, memory_order_relaxed);

	kv_enter(s, w);
	for (; cur->cls < KV_MAX_CLASSES; cur->cls++, cur->page_n = 0, cur->chunk = 0) {
		struct kv_class *c = &s->cls[cur->cls];
		uint32_t p;

		if (!cur->cls || !(mask >> cur->cls & 1))
			continue;
		kv_lock(&c->lock);
		p = c->first_page;
		for (uint32_t k = 0; k < cur->page_n && p != KV_NO_PAGE; k++)
			p = s->pages[p].next;
		for (; p != KV_NO_PAGE; p = s->pages[p].next, cur->page_n++, cur->chunk = 0) {
			for (; cur->chunk < c->perslab; cur->chunk++) {
				struct kv_item *it = chunk_at(s, p, cur->chunk, c->size);
				uint32_t exp;
				struct kv_item_meta m;

				if (kv_item_state(it) != KV_ST_LINKED || kv_item_dead(s, it, now))
					continue;
				exp = atomic_load_explicit(&it->exptime, memory_order_relaxed);
				m = (struct kv_item_meta){
					.key = kv_item_key(it), .nkey = it->nkey,
					.exp_unix = exp ? (int64_t)(exp + started) : -1,
					.la_unix = atomic_load_explicit(&it->atime, memory_order_relaxed) + started,
					.cas = atomic_load_explicit(&it->cas, memory_order_relaxed),
					.size = kv_mc_ntotal(s, it->nkey, it->flags, it->nbytes),
					.fetched = atomic_load_explicit(&it->iflags, memory_order_relaxed) & KV_F_FETCHED,
					.cls = it->clsid,
				};
				if (!fn(arg, &m)) {
					kv_unlock(&c->lock);
					return false;
				}
			}
		}
		kv_unlock(&c->lock);
	}
	return true;
}

/* Under the class lock: empty page @p (its free chunks leave the free list, its items are
 * evicted); it returns to the pool when its last chunk is freed. */
static void drain_page(struct kv_store *s, unsigned w, struct kv_class *c, uint32_t p)
{
	struct kv_page *pg = &s->pages[p];
	uint32_t n = c->perslab;

	if (!pg->draining) {
		struct kv_item **pp = &c->free;
		pg->draining = 1;
		if (pg->used == 0)
			empty_add(s, c, -1);
		atomic_fetch_add_explicit(&s->slabs_moved, 1, memory_order_relaxed);
		while (*pp) {
			if (page_of(s, *pp) == p) {
				*pp = (*pp)->lnext;
				c->nfree--;
			} else {
				pp = &(*pp)->lnext;
			}
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		struct kv_item *it = chunk_at(s, p, i, c->size);
		if (kv_item_state(it) == KV_ST_LINKED)
			evict_one(s, w, c, it);
	}
	if (pg->used == 0)
		class_drop_page(s, c, p);
}

static bool page_has_linked(const struct kv_store *s, const struct kv_class *c, uint32_t p)
{
	for (uint32_t i = 0; i < c->perslab; i++)
		if (kv_item_state(chunk_at(s, p, i, c->size)) == KV_ST_LINKED)
			return true;
	return false;
}

/* The page to empty in victim class @c: an empty one, else one already draining that
 * still has items to evict, else (eviction on) the one under the CLOCK hand, whose items
 * are the next to go anyway. A draining page that only waits for limbo is left alone. */
static uint32_t pick_page(struct kv_store *s, struct kv_class *c)
{
	uint32_t empty = KV_NO_PAGE, busy = KV_NO_PAGE, other = KV_NO_PAGE;

	for (uint32_t p = c->first_page; p != KV_NO_PAGE; p = s->pages[p].next) {
		if (s->pages[p].used == 0)
			empty = p;
		else if (s->pages[p].draining && busy == KV_NO_PAGE && page_has_linked(s, c, p))
			busy = p;
		else if (!s->pages[p].draining && (other == KV_NO_PAGE || p == c->hand_page))
			other = p;
	}
	if (empty != KV_NO_PAGE || !s->cfg.evict)
		return empty;
	return busy != KV_NO_PAGE ? busy : other;
}

/* Class @id cannot grow from the pool nor evict its own: empty a page of the class with
 * the most pages (memcached's slab rebalancer, done inline). */
static bool steal_page(struct kv_store *s, unsigned w, unsigned id)
{
	unsigned victim = 0;
	uint32_t most = 0, p;

	for (unsigned i = 1; i < KV_MAX_CLASSES; i++) {
		if (i == id || (i >= s->nclasses && i != KV_HUGE))
			continue;
		kv_lock(&s->cls[i].lock);
		if (s->cls[i].npages > most && pick_page(s, &s->cls[i]) != KV_NO_PAGE) {
			most = s->cls[i].npages;
			victim = i;
		}
		kv_unlock(&s->cls[i].lock);
	}
	if (!victim)
		return false;
	kv_lock(&s->cls[victim].lock);
	if ((p = pick_page(s, &s->cls[victim])) != KV_NO_PAGE)
		drain_page(s, w, &s->cls[victim], p);
	kv_unlock(&s->cls[victim].lock);
	return p != KV_NO_PAGE;
}

/* Give a page nobody uses in another class back to the pool: memory that costs no
 * eviction (a class that shrank leaves empty pages behind). */
static bool steal_empty(struct kv_store *s, unsigned w, unsigned id)
{
	if (!atomic_load_explicit(&s->empty_pages, memory_order_relaxed))
		return false;
	for (unsigned i = 1; i < s->nclasses; i++) {
		struct kv_class *c = &s->cls[i];
		uint32_t p = KV_NO_PAGE;
		if (i == id)
			continue;
		kv_lock(&c->lock);
		if (c->empty)
			for (p = c->first_page; s->pages[p].used || s->pages[p].draining;)
				p = s->pages[p].next;
		if (p != KV_NO_PAGE)
			drain_page(s, w, c, p);
		kv_unlock(&c->lock);
		if (p != KV_NO_PAGE)
			return true;
	}
	return false;
}

/* No run of free pages long enough for a huge item: empty the next window of pages,
 * whatever holds them. */
static bool huge_make_room(struct kv_store *s, unsigned w, size_t size)
{
	uint32_t run = run_pages(size), start;

	if (!s->cfg.evict || run > s->npages)
		return false;
	kv_lock(&s->page_lock);
	start = s->huge_cursor + run > s->npages ? 0 : s->huge_cursor;
	s->huge_cursor = start + run;
	kv_unlock(&s->page_lock);
	for (uint32_t p = start; p < start + run; p++) {
		uint32_t head = p, id;
		kv_lock(&s->page_lock);
		id = s->pages[p].clsid;
		while (id == KV_HUGE && s->pages[head].run == 0)
			head--;
		kv_unlock(&s->page_lock);
		if (!id)
			continue;
		kv_lock(&s->cls[id].lock);
		kv_lock(&s->page_lock);
		bool same = s->pages[head].clsid == id && (id != KV_HUGE || s->pages[head].run);
		kv_unlock(&s->page_lock);
		if (same)    /* only this class's lock holder can give the page back */
			drain_page(s, w, &s->cls[id], head);
		kv_unlock(&s->cls[id].lock);
	}
	return true;
}

static uint64_t limbo_total(const struct kv_store *s)
{
	uint64_t n = atomic_load_explicit(&s->have_orphans, memory_order_relaxed);

	for (unsigned v = 0; v < s->cfg.n_workers; v++)
		for (unsigned i = 1; i < KV_MAX_CLASSES; i++)
			n += kv_ctr_get(&s->workers[v].cs[i][KV_CS_LIMBO]);
	return n;
}

static bool alone(const struct kv_store *s, unsigned w)
{
	for (unsigned v = 0; v < s->cfg.n_workers; v++)
		if (v != w && atomic_load(&s->workers[v].qs) != KV_QS_OFFLINE)
			return false;
	return !atomic_load_explicit(&s->have_orphans, memory_order_relaxed);
}

static bool others_parked(const struct kv_store *s, unsigned w)
{
	for (unsigned v = 0; v < s->cfg.n_workers; v++)
		if (v != w && atomic_load(&s->workers[v].qs) != KV_QS_OFFLINE &&
		    !(atomic_load(&s->workers[v].parked) & 1))
			return false;
	return true;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct kv_item *try_pop(struct kv_store *s, unsigned id, size_t size)
{
	bool low;

	return id == KV_HUGE ? huge_pop(s, size) : class_pop(s, id, &low);
}

/*
 * Nothing free in the class: reuse our limbo, evict (a few), empty another class's page;
 * then, if allowed, park and wait for the other workers' quiescent states. Parked, we
 * publish that we hold only our views, so workers waiting on us can go on.
 */
static fp_cold struct kv_item *alloc_slow(struct kv_store *s, unsigned w, size_t size,
					  unsigned id, bool may_wait)
{
	struct kv_worker *k = &s->workers[w];
	struct kv_item *it = NULL;
	unsigned evicted = 0, stolen = 0;
	uint64_t t0 = 0;
	bool parked = false;

	for (;;) {
		adopt_orphans(s, k);
		bool progress = reclaim(s, w, false) > 0;
		if ((it = try_pop(s, id, size)))
			break;
		if (steal_empty(s, w, id) && (it = try_pop(s, id, size)))
			break;
		if (s->cfg.evict && evicted < 4 && evict(s, w, id, 1, 0)) {
			evicted++;
			progress = true;
		} else if (stolen < 4 && (id == KV_HUGE ? huge_make_room(s, w, size)
							 : steal_page(s, w, id))) {
			stolen++;
			progress = true;
		}
		if (progress && reclaim(s, w, false) && (it = try_pop(s, id, size)))
			break;
		if (!may_wait || (!progress && (!limbo_total(s) || alone(s, w))))
			break;       /* nothing will come back: no limbo, or only ours */
		if (parked && !progress && others_parked(s, w))
			break;       /* every worker waits and holds what is left */
		if (!parked) {
			atomic_fetch_add(&k->parked, 1);
			parked = true;
			t0 = mono_ns();
		} else if (mono_ns() - t0 > WAIT_FOR_MEMORY_NS) {
			break;
		}
		sched_yield();
	}
	if (parked) {    /* seq_cst, then the epoch: see what was retired while we were away */
		atomic_fetch_add(&k->parked, 1);
		k->seen_epoch = atomic_load(&s->epoch);
	}
	if (!it && may_wait) {   /* a try under a stripe lock is not a failure yet */
		kv_lock(&s->cls[id].lock);
		s->cls[id].outofmemory++;
		kv_unlock(&s->cls[id].lock);
	}
	return it;
}

struct kv_item *kv_slab_alloc(struct kv_store *s, unsigned w, size_t size, bool may_wait)
{
	unsigned id = kv_slab_class(s, size);
	bool low = false;
	struct kv_item *it = id == KV_HUGE ? huge_pop(s, size) : class_pop(s, id, &low);

	if (!it)
		return alloc_slow(s, w, size, id, may_wait);
	if (low && s->cfg.evict)   /* evict ahead: reusable after the next grace period */
		evict(s, w, id, 2, 32);
	return it;
}
