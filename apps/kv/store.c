/* store.c: fp-kv's shared keyspace: hash table, striped write locks, memcached 1.6 semantics. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_defs.h"

#define ITEM_UPDATE_INTERVAL 60  /* memcached starts its clock this (+2) before now */

void kv_lock_slow(struct kv_lock *l)
{
	for (unsigned spins = 0;; spins++) {
		while (atomic_load_explicit(&l->v, memory_order_relaxed)) {
			if (++spins > 64) {        /* the holder may be preempted: let it run */
				sched_yield();
				spins = 0;
			} else {
				__builtin_ia32_pause();
			}
		}
		if (!atomic_exchange_explicit(&l->v, 1, memory_order_acquire))
			return;
	}
}

/* A multiply-xorshift hash over 8-byte words, finished with murmur3's fmix64. */
uint64_t kv_hash(const char *key, size_t nkey)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (nkey * 0xff51afd7ed558ccdull), v;
	size_t i = 0;

	for (; i + 8 <= nkey; i += 8) {
		memcpy(&v, key + i, 8);
		h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
		h ^= h >> 29;
	}
	v = 0;
	memcpy(&v, key + i, nkey - i);
	h = (h ^ v) * 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	return h ^ (h >> 33);
}

/* The stripe is a function of the bucket, so one lock covers each whole chain. */
struct kv_lock *kv_stripe(struct kv_store *s, uint64_t hv)
{
	return &s->locks[(hv & s->mask) & (KV_LOCKS - 1)].l;
}

static _Atomic(struct kv_item *) *bucket(struct kv_store *s, uint64_t hv)
{
	return &s->table[hv & s->mask];
}

static bool key_is(struct kv_item *it, const char *key, size_t nkey)
{
	return it->nkey == nkey && memcmp(kv_item_key(it), key, nkey) == 0;
}

static uint64_t next_cas(struct kv_store *s)
{
	return s->cfg.use_cas ? atomic_fetch_add(&s->cas_id, 1) + 1 : 0;
}

static struct kv_worker *wk(struct kv_store *s, unsigned w) { return &s->workers[w]; }

static void cs_add(struct kv_store *s, unsigned w, unsigned cls, unsigned which, uint64_t d)
{
	kv_ctr_add(&wk(s, w)->cs[cls][which], d);
}

static void ws_inc(struct kv_store *s, unsigned w, unsigned which)
{
	kv_ctr_add(&wk(s, w)->ws[which], 1);
}

/* ---- clock ---- */

uint32_t kv_store_now(const struct kv_store *s)
{
	return atomic_load_explicit(&s->now, memory_order_relaxed);
}

/* Workers tick with their own reading of the time: the clock only moves forward, so two
 * workers a hair apart cannot make it flicker (memcached's clock is monotonic too). */
void kv_store_tick(struct kv_store *s, uint64_t unix_ns)
{
	uint64_t sec = unix_ns / 1000000000ull, st = atomic_load_explicit(&s->started, memory_order_relaxed);
	uint32_t cur = kv_store_now(s), now = (uint32_t)(sec - st);

	while (sec > st && now > cur &&
	       !atomic_compare_exchange_weak_explicit(&s->now, &cur, now, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

void kv_store_set_clock(struct kv_store *s, uint32_t now_rel, uint64_t process_started_unix)
{
	atomic_store(&s->started, process_started_unix);
	atomic_store(&s->now, now_rel);
}

/* memcached's realtime(): 0 never; up to 30 days relative; beyond, a Unix time (one at or
 * before the start reads 1, already past); negative as memcached's parser makes it. */
uint32_t kv_realtime(const struct kv_store *s, int64_t exptime)
{
	uint64_t st = atomic_load_explicit(&s->started, memory_order_relaxed);

	if (exptime < 0)
		exptime = (int64_t)KV_REALTIME_MAXDELTA + 1;
	if (exptime == 0)
		return 0;
	if (exptime > (int64_t)KV_REALTIME_MAXDELTA) {
		if ((uint64_t)exptime <= st)
			return 1;
		return (uint32_t)((uint64_t)exptime - st);
	}
	return (uint32_t)(exptime + kv_store_now(s));
}

/* ---- create / destroy ---- */

static unsigned pick_hashpower(const struct kv_store_config *cfg)
{
	unsigned hp = 12;

	if (cfg->hashpower)
		return cfg->hashpower < 4 ? 4 : cfg->hashpower > 32 ? 32 : cfg->hashpower;
	/* about one bucket per 256 bytes of arena: chains stay short even for small items */
	while (hp < 32 && (1ull << hp) < cfg->mem_limit / 256)
		hp++;
	return hp;
}

struct kv_store *kv_store_create(const struct kv_store_config *cfg, char *err, size_t errlen)
{
	struct kv_store *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->cfg = *cfg;
	if (!s->cfg.pending_max) {
		uint64_t two = 2ull * s->cfg.item_max;
		s->cfg.pending_max = s->cfg.mem_limit / 8 > two ? s->cfg.mem_limit / 8 : two;
	}
	if (!s->cfg.n_workers)
		s->cfg.n_workers = 1;
	s->hashpower = pick_hashpower(cfg);
	s->mask = (1ull << s->hashpower) - 1;
	s->table = calloc(s->mask + 1, sizeof(*s->table));
	s->locks = aligned_alloc(FP_CACHE_LINE, KV_LOCKS * sizeof(*s->locks));
	s->workers = aligned_alloc(FP_CACHE_LINE, s->cfg.n_workers * sizeof(*s->workers));
	if (!s->table || !s->locks || !s->workers) {
		snprintf(err, errlen, "out of memory for the hash table");
		goto fail;
	}
	memset(s->locks, 0, KV_LOCKS * sizeof(*s->locks));
	memset(s->workers, 0, s->cfg.n_workers * sizeof(*s->workers));
	for (unsigned i = 0; i < s->cfg.n_workers; i++)
		atomic_store(&s->workers[i].qs, KV_QS_OFFLINE);
	atomic_store(&s->epoch, 1);
	atomic_store(&s->started, (uint64_t)time(NULL) - ITEM_UPDATE_INTERVAL - 2);
	atomic_store(&s->now, ITEM_UPDATE_INTERVAL + 2);
	if (kv_slab_init(s, err, errlen))
		goto fail;
	return s;
fail:
	kv_store_destroy(s);
	return NULL;
}

void kv_store_destroy(struct kv_store *s)
{
	if (!s)
		return;
	kv_slab_fini(s);
	free(s->table);
	free(s->locks);
	free(s->workers);
	free(s);
}

/* ---- items: liveness, lookup, link ---- */

/* memcached's item_is_flushed, then the expiry test of do_item_get. 1 flushed, 2 expired. */
static int item_dead_why(const struct kv_store *s, struct kv_item *it, uint32_t now)
{
	uint32_t ol = atomic_load_explicit(&s->oldest_live, memory_order_relaxed);
	uint32_t exp = atomic_load_explicit(&it->exptime, memory_order_relaxed);

	if (ol != 0 && ol <= now) {
		uint64_t oc = atomic_load_explicit(&s->oldest_cas, memory_order_relaxed);
		uint64_t cas = atomic_load_explicit(&it->cas, memory_order_relaxed);
		if (it->time <= ol || (oc != 0 && cas != 0 && cas < oc))
			return 1;
	}
	return exp != 0 && exp <= now ? 2 : 0;
}

bool kv_item_dead(const struct kv_store *s, struct kv_item *it, uint32_t now)
{
	return item_dead_why(s, it, now) != 0;
}

/* Lock-free lookup: acquire loads pair with the release store that linked each item. */
static struct kv_item *lookup(struct kv_store *s, uint64_t hv, const char *key, size_t nkey)
{
	struct kv_item *it = atomic_load_explicit(bucket(s, hv), memory_order_acquire);

	for (; it; it = atomic_load_explicit(&it->h_next, memory_order_acquire))
		if (key_is(it, key, nkey))
			return it;
	return NULL;
}

/* Under the stripe lock: the slot that points at @key's item, or the NULL slot at the end. */
static _Atomic(struct kv_item *) *find_slot(struct kv_store *s, uint64_t hv, const char *key,
					    size_t nkey)
{
	_Atomic(struct kv_item *) *pp = bucket(s, hv);
	struct kv_item *it;

	while ((it = atomic_load_explicit(pp, memory_order_relaxed)) && !key_is(it, key, nkey))
		pp = &it->h_next;
	return pp;
}

static void account(struct kv_store *s, unsigned w, struct kv_item *it, int sign)
{
	size_t sz = kv_item_size(it->nkey, it->nbytes);

	cs_add(s, w, it->clsid, KV_CS_ITEMS, (uint64_t)(int64_t)sign);
	cs_add(s, w, it->clsid, KV_CS_BYTES, (uint64_t)((int64_t)sign * (int64_t)sz));
}

/* Publish @it in @pp's place (replacing @old, or before the slot's current item);
 * @count: a new item as far as memcached's total_items is concerned. */
static void link_at_(struct kv_store *s, unsigned w, _Atomic(struct kv_item *) *pp,
		     struct kv_item *old, struct kv_item *it, bool count)
{
	struct kv_item *next = old ? atomic_load_explicit(&old->h_next, memory_order_relaxed)
				   : atomic_load_explicit(pp, memory_order_relaxed);

	it->time = kv_store_now(s);
	atomic_store_explicit(&it->atime, it->time, memory_order_relaxed);
	atomic_store_explicit(&it->cas, next_cas(s), memory_order_relaxed);
	atomic_store_explicit(&it->h_next, next, memory_order_relaxed);
	/* the CLOCK bit set: a new item outlives one pass of the hand, as if just read */
	atomic_fetch_or_explicit(&it->iflags, KV_F_REF, memory_order_relaxed);
	kv_item_set_state(it, KV_ST_LINKED);
	atomic_store_explicit(pp, it, memory_order_release);
	account(s, w, it, 1);
	if (count)
		ws_inc(s, w, KV_WS_TOTAL_ITEMS);
	if (old) {
		account(s, w, old, -1);
		kv_retire(s, w, old);
	}
}

static void link_at(struct kv_store *s, unsigned w, _Atomic(struct kv_item *) *pp,
		    struct kv_item *old, struct kv_item *it)
{
	link_at_(s, w, pp, old, it, true);
}

static void unlink_at(struct kv_store *s, unsigned w, _Atomic(struct kv_item *) *pp,
		      struct kv_item *it)
{
	atomic_store_explicit(pp, atomic_load_explicit(&it->h_next, memory_order_relaxed),
			      memory_order_release);
	account(s, w, it, -1);
	kv_retire(s, w, it);
}

bool kv_unlink_locked(struct kv_store *s, unsigned w, struct kv_item *it, uint64_t hv)
{
	_Atomic(struct kv_item *) *pp = bucket(s, hv);
	struct kv_item *cur;

	while ((cur = atomic_load_explicit(pp, memory_order_relaxed)) && cur != it)
		pp = &cur->h_next;
	if (!cur)
		return false;
	unlink_at(s, w, pp, it);
	return true;
}

/* Under the lock: @key's live item, unlinking a flushed or expired one as do_item_get. */
static struct kv_item *find_live(struct kv_store *s, unsigned w, uint64_t hv, const char *key,
				 size_t nkey, _Atomic(struct kv_item *) **slot)
{
	_Atomic(struct kv_item *) *pp = find_slot(s, hv, key, nkey);
	struct kv_item *it = atomic_load_explicit(pp, memory_order_relaxed);
	int why;

	*slot = pp;
	if (it && (why = item_dead_why(s, it, kv_store_now(s)))) {
		ws_inc(s, w, why == 1 ? KV_WS_GET_FLUSHED : KV_WS_GET_EXPIRED);
		unlink_at(s, w, pp, it);
		it = NULL;
	}
	return it;
}

/* A reader met a dead item: unlink it if the lock is free (memcached does on access). */
static void reap(struct kv_store *s, unsigned w, struct kv_item *it, uint64_t hv)
{
	struct kv_lock *l = kv_stripe(s, hv);

	if (kv_trylock(l)) {
		if (kv_item_state(it) == KV_ST_LINKED)
			kv_unlink_locked(s, w, it, hv);
		kv_unlock(l);
	}
}

/* memcached's segmented-LRU bump: the first hit only marks the item fetched; later hits
 * refresh its access time. Both set the CLOCK bit. */
static void bump(struct kv_store *s, struct kv_item *it)
{
	uint16_t f = atomic_load_explicit(&it->iflags, memory_order_relaxed);
	uint32_t now = kv_store_now(s);

	if (!(f & KV_F_FETCHED)) {
		atomic_fetch_or_explicit(&it->iflags, KV_F_FETCHED | KV_F_REF, memory_order_relaxed);
		return;
	}
	if (!(f & KV_F_REF))
		atomic_fetch_or_explicit(&it->iflags, KV_F_REF, memory_order_relaxed);
	if (atomic_load_explicit(&it->atime, memory_order_relaxed) != now)
		atomic_store_explicit(&it->atime, now, memory_order_relaxed);
}

static void fill_view(struct kv_item *it, struct kv_item_view *v)
{
	uint16_t f = atomic_load_explicit(&it->iflags, memory_order_relaxed);

	v->key = kv_item_key(it);
	v->nkey = it->nkey;
	v->value = kv_item_value(it);
	v->nbytes = it->nbytes;
	v->flags = it->flags;
	v->exptime = atomic_load_explicit(&it->exptime, memory_order_relaxed);
	v->cas = atomic_load_explicit(&it->cas, memory_order_relaxed);
	v->last_access = atomic_load_explicit(&it->atime, memory_order_relaxed);
	v->fetched = f & KV_F_FETCHED;
	v->stale = f & KV_F_STALE;
	v->token_sent = f & KV_F_TOKEN;
	v->clsid = (uint8_t)it->clsid;
	v->won = false;
}

/* The live item for a lock-free reader, counting what memcached's do_item_get counts. */
static struct kv_item *get_live(struct kv_store *s, unsigned w, uint64_t hv, const char *key,
				size_t nkey)
{
	struct kv_item *it = lookup(s, hv, key, nkey);
	int why;

	if (it && (why = item_dead_why(s, it, kv_store_now(s)))) {
		ws_inc(s, w, why == 1 ? KV_WS_GET_FLUSHED : KV_WS_GET_EXPIRED);
		reap(s, w, it, hv);
		it = NULL;
	}
	return it;
}

/* ---- reads ---- */

bool kv_get(struct kv_store *s, unsigned w, const char *key, size_t nkey, struct kv_item_view *v)
{
	uint64_t hv = kv_hash(key, nkey);
	struct kv_item *it;

	kv_enter(s, w);
	it = get_live(s, w, hv, key, nkey);
	if (!it) {
		ws_inc(s, w, KV_WS_GET_MISSES);
		return false;
	}
	fill_view(it, v);
	bump(s, it);
	kv_hold(s, w, it);
	cs_add(s, w, it->clsid, KV_CS_GET_HITS, 1);
	return true;
}

/* mg N on a miss: link an empty item with the token already taken by this fetch. */
static struct kv_item *vivify(struct kv_store *s, unsigned w, uint64_t hv, const char *key,
			      size_t nkey, uint32_t exptime, bool *created)
{
	struct kv_item *it = kv_slab_alloc(s, w, kv_item_size((uint32_t)nkey, 0), true);
	struct kv_lock *l = kv_stripe(s, hv);
	_Atomic(struct kv_item *) *pp;
	struct kv_item *old;

	if (!it)
		return NULL;
	it->nkey = (uint8_t)nkey;
	it->nbytes = 0;
	it->flags = 0;
	atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
	atomic_fetch_or_explicit(&it->iflags, KV_F_TOKEN, memory_order_relaxed);
	memcpy(kv_item_key(it), key, nkey);
	memcpy(kv_item_value(it), "\r\n", 2);
	kv_lock(l);
	old = find_live(s, w, hv, key, nkey, &pp);
	if (!old) {
		link_at(s, w, pp, NULL, it);
		*created = true;
		old = it;
	}
	kv_unlock(l);
	if (!*created)
		kv_slab_free_new(s, it);
	return old;
}

/* Hand out the win token (W) at most once: the first fetcher to set the bit wins. */
static void mget_token(struct kv_store *s, struct kv_item *it, const struct kv_mget_args *a,
		       uint32_t old_exp, struct kv_item_view *v)
{
	uint16_t f = atomic_load_explicit(&it->iflags, memory_order_relaxed);
	bool want = false;

	if (a->recache_below && !(f & KV_F_TOKEN) && old_exp != 0 &&
	    (uint64_t)old_exp < (uint64_t)kv_store_now(s) + a->recache_below)
		want = true;
	if ((f & KV_F_STALE) && !(f & KV_F_TOKEN))
		want = true;
	if (want) {
		f = atomic_fetch_or_explicit(&it->iflags, KV_F_TOKEN, memory_order_relaxed);
		v->won = !(f & KV_F_TOKEN);
	}
	v->token_sent = f & KV_F_TOKEN;
	v->clsid = (uint8_t)it->clsid;
	v->stale = f & KV_F_STALE;
}

enum kv_mget_result kv_mget(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			    const struct kv_mget_args *a, struct kv_item_view *v)
{
	uint64_t hv = kv_hash(key, nkey);
	bool created = false;
	struct kv_item *it;

	kv_enter(s, w);
	it = get_live(s, w, hv, key, nkey);
	if (!it && a->vivify)
		it = vivify(s, w, hv, key, nkey, a->exptime, &created);
	if (a->touch)
		ws_inc(s, w, KV_WS_CMD_TOUCH);
	if (!it) {
		ws_inc(s, w, a->touch ? KV_WS_TOUCH_MISSES : KV_WS_GET_MISSES);
		return KV_MG_MISS;
	}
	fill_view(it, v);
	if (created) {
		v->exptime = 0;    /* as memcached reads it before the N flag sets it */
		v->won = true;
		v->token_sent = false;
	} else {
		if (a->touch)
			atomic_store_explicit(&it->exptime, a->exptime, memory_order_relaxed);
		mget_token(s, it, a, v->exptime, v);
	}
	if (!a->no_bump)
		bump(s, it);
	kv_hold(s, w, it);
	cs_add(s, w, it->clsid, a->touch ? KV_CS_TOUCH_HITS : KV_CS_GET_HITS, 1);
	return created ? KV_MG_VIVIFIED : KV_MG_HIT;
}

/* ---- storage commands ---- */

/* memcached's item_size_ok: its header, key + NUL, flags when not 0, value + CRLF, cas. */
uint64_t kv_mc_ntotal(const struct kv_store *s, size_t nkey, uint32_t flags, uint64_t nbytes)
{
	return MC_ITEM_HDR + nkey + 1 + (flags ? 4 : 0) + nbytes + 2 + (s->cfg.use_cas ? 8 : 0);
}

static void init_item(struct kv_item *it, const char *key, size_t nkey, uint32_t flags,
		      uint32_t exptime, uint32_t nbytes)
{
	it->nkey = (uint8_t)nkey;
	it->nbytes = nbytes;
	it->flags = flags;
	atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
	memcpy(kv_item_key(it), key, nkey);
}

struct kv_new *kv_alloc(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			uint32_t flags, uint32_t exptime, uint32_t nbytes, enum kv_result *res)
{
	size_t size = kv_item_size((uint32_t)nkey, nbytes);
	struct kv_item *it;

	kv_enter(s, w);
	if (nkey == 0 || nkey > KV_KEY_MAX || kv_mc_ntotal(s, nkey, flags, nbytes) > s->cfg.item_max) {
		*res = KV_TOO_LARGE;
		return NULL;
	}
	/* Values still arriving cannot be evicted: bounded, so slow uploads of large values
	 * (a client sending a byte a second) cannot hold the whole store. */
	if (atomic_fetch_add_explicit(&s->pending_bytes, size, memory_order_relaxed) + size >
	    s->cfg.pending_max) {
		atomic_fetch_sub_explicit(&s->pending_bytes, size, memory_order_relaxed);
		*res = KV_NO_MEMORY;    /* counted by the caller as store_no_memory */
		return NULL;
	}
	it = kv_slab_alloc(s, w, size, true);
	if (!it) {
		atomic_fetch_sub_explicit(&s->pending_bytes, size, memory_order_relaxed);
		*res = KV_NO_MEMORY;
		return NULL;
	}
	init_item(it, key, nkey, flags, exptime, nbytes);
	return (struct kv_new *)(void *)it;
}

/* An allocated item is no longer pending (stored, or given up). */
static void pending_done(struct kv_store *s, const struct kv_item *it)
{
	atomic_fetch_sub_explicit(&s->pending_bytes, kv_item_size(it->nkey, it->nbytes),
				  memory_order_relaxed);
}

uint8_t *kv_new_data(struct kv_new *n) { return kv_item_value((struct kv_item *)(void *)n); }

size_t kv_new_key(const struct kv_new *n, char *out)
{
	struct kv_item *it = (struct kv_item *)(void *)(uintptr_t)n;

	memcpy(out, kv_item_key(it), it->nkey);
	return it->nkey;
}

unsigned kv_new_clsid(const struct kv_new *n)
{
	return ((const struct kv_item *)(const void *)n)->clsid;
}

uint32_t kv_new_exptime(const struct kv_new *n)
{
	return atomic_load_explicit(&((const struct kv_item *)(const void *)n)->exptime,
				    memory_order_relaxed);
}

void kv_new_free(struct kv_store *s, unsigned w, struct kv_new *n)
{
	kv_enter(s, w);
	pending_done(s, (struct kv_item *)(void *)n);
	kv_slab_free_new(s, (struct kv_item *)(void *)n);
}

/*
 * A chunk for a new item while holding @l: the spare, or one had without waiting. Failing
 * that, drop the lock (never wait for memory holding a stripe: others spinning on it could
 * not quiesce), wait for one into *@spare and return NULL: the caller starts over, since the
 * key may have changed meanwhile. NULL with no spare: out of memory.
 */
static struct kv_item *alloc_locked(struct kv_store *s, unsigned w, size_t size, struct kv_lock *l,
				    struct kv_item **spare)
{
	struct kv_item *it;

	if (*spare && kv_slab_fits(s, *spare, size)) {
		it = *spare;
		*spare = NULL;
		return it;
	}
	if ((it = kv_slab_alloc(s, w, size, false)))
		return it;
	kv_unlock(l);
	if (*spare)
		kv_slab_free_new(s, *spare);
	*spare = kv_slab_alloc(s, w, size, true);
	kv_lock(l);
	return NULL;
}

enum { KV_RETRY = 100 };

/* append/prepend: a new item with the old one's flags and expiry and both values. */
static int store_concat(struct kv_store *s, unsigned w, struct kv_item *it, struct kv_item *old,
			_Atomic(struct kv_item *) *pp, enum kv_set_mode mode, struct kv_lock *l,
			struct kv_item **spare)
{
	uint64_t n = (uint64_t)old->nbytes + it->nbytes;
	struct kv_item *nu;
	uint8_t *v;

	if (kv_mc_ntotal(s, it->nkey, old->flags, n) > s->cfg.item_max)
		return KV_NOT_STORED;
	nu = alloc_locked(s, w, kv_item_size(it->nkey, (uint32_t)n), l, spare);
	if (!nu)
		return *spare ? KV_RETRY : KV_NOT_STORED;
	init_item(nu, kv_item_key(it), it->nkey, old->flags,
		  atomic_load_explicit(&old->exptime, memory_order_relaxed), (uint32_t)n);
	v = kv_item_value(nu);
	if (mode == KV_APPEND) {
		memcpy(v, kv_item_value(old), old->nbytes);
		memcpy(v + old->nbytes, kv_item_value(it), it->nbytes);
	} else {
		memcpy(v, kv_item_value(it), it->nbytes);
		memcpy(v + it->nbytes, kv_item_value(old), old->nbytes);
	}
	memcpy(v + n, "\r\n", 2);
	link_at(s, w, pp, old, nu);
	return KV_STORED;
}

/* memcached's do_store_item with an existing item, its CAS test first. */
static int store_over(struct kv_store *s, unsigned w, struct kv_item *it, struct kv_item *old,
		      _Atomic(struct kv_item *) *pp, enum kv_set_mode mode, uint64_t cas,
		      struct kv_lock *l, struct kv_item **spare)
{
	uint64_t oc = atomic_load_explicit(&old->cas, memory_order_relaxed);
	bool none = cas == 0, match = cas != 0 && cas == oc;
	bool stale = !none && !match && mode == KV_CAS_STALE && cas < oc;

	switch (mode) {
	case KV_ADD:
		atomic_store_explicit(&old->atime, kv_store_now(s), memory_order_relaxed);
		return KV_NOT_STORED;
	case KV_CAS:
	case KV_CAS_STALE:
		if (!match && !stale) {
			cs_add(s, w, old->clsid, KV_CS_CAS_BADVAL, 1);
			return KV_EXISTS;
		}
		cs_add(s, w, old->clsid, KV_CS_CAS_HITS, 1);
		if (stale) {  /* keeps the ttl and the token already handed out */
			uint16_t f = atomic_load_explicit(&old->iflags, memory_order_relaxed);
			atomic_store_explicit(&it->exptime, atomic_load_explicit(&old->exptime,
					      memory_order_relaxed), memory_order_relaxed);
			atomic_fetch_or_explicit(&it->iflags, KV_F_STALE | (f & KV_F_TOKEN),
						 memory_order_relaxed);
		}
		break;
	case KV_APPEND:
	case KV_PREPEND:
		if (!none && !match)
			return KV_EXISTS;
		return store_concat(s, w, it, old, pp, mode, l, spare);
	default:
		break;
	}
	link_at(s, w, pp, old, it);
	return KV_STORED;
}

enum kv_result kv_store_item(struct kv_store *s, unsigned w, struct kv_new *n,
			     enum kv_set_mode mode, uint64_t cas, uint64_t *cas_out)
{
	struct kv_item *it = (struct kv_item *)(void *)n, *spare = NULL, *old, *cur;
	uint64_t hv = kv_hash(kv_item_key(it), it->nkey), new_cas = 0;
	struct kv_lock *l = kv_stripe(s, hv);
	_Atomic(struct kv_item *) *pp;
	int r, tries = 0;

	kv_enter(s, w);
	pending_done(s, it);
	cs_add(s, w, it->clsid, KV_CS_CMD_SET, 1);
	kv_lock(l);
	do {
		old = find_live(s, w, hv, kv_item_key(it), it->nkey, &pp);
		if (old) {
			r = store_over(s, w, it, old, pp, mode, cas, l, &spare);
		} else if (mode == KV_SET || mode == KV_ADD) {
			link_at(s, w, pp, NULL, it);
			r = KV_STORED;
		} else if (mode == KV_CAS || mode == KV_CAS_STALE) {
			ws_inc(s, w, KV_WS_CAS_MISSES);
			r = KV_NOT_FOUND;
		} else {
			r = KV_NOT_STORED;
		}
	} while (r == KV_RETRY && ++tries < 4);
	if (r == KV_STORED) {
		cur = atomic_load_explicit(pp, memory_order_relaxed);
		new_cas = atomic_load_explicit(&cur->cas, memory_order_relaxed);
	}
	kv_unlock(l);
	if (spare)
		kv_slab_free_new(s, spare);
	if (r == KV_RETRY)
		r = KV_NOT_STORED;
	if (r != KV_STORED || mode == KV_APPEND || mode == KV_PREPEND)
		kv_slab_free_new(s, it);   /* not linked: never visible, no grace period */
	if (cas_out)
		*cas_out = new_cas;
	return (enum kv_result)r;
}

/* ---- delete, touch, md I ---- */

enum kv_result kv_delete(struct kv_store *s, unsigned w, const char *key, size_t nkey, uint64_t cas)
{
	uint64_t hv = kv_hash(key, nkey);
	struct kv_lock *l = kv_stripe(s, hv);
	_Atomic(struct kv_item *) *pp;
	enum kv_result r = KV_DELETED;
	struct kv_item *it;

	kv_enter(s, w);
	kv_lock(l);
	it = find_live(s, w, hv, key, nkey, &pp);
	if (!it || (cas && cas != atomic_load_explicit(&it->cas, memory_order_relaxed))) {
		ws_inc(s, w, KV_WS_DELETE_MISSES);
		r = it ? KV_EXISTS : KV_NOT_FOUND;
	} else {
		cs_add(s, w, it->clsid, KV_CS_DELETE_HITS, 1);
		unlink_at(s, w, pp, it);
	}
	kv_unlock(l);
	return r;
}

void kv_unlink(struct kv_store *s, unsigned w, const char *key, size_t nkey)
{
	uint64_t hv = kv_hash(key, nkey);
	struct kv_lock *l = kv_stripe(s, hv);
	_Atomic(struct kv_item *) *pp;
	struct kv_item *it;

	kv_enter(s, w);
	kv_lock(l);
	if ((it = find_live(s, w, hv, key, nkey, &pp)))
		unlink_at(s, w, pp, it);
	kv_unlock(l);
}

enum kv_result kv_touch(struct kv_store *s, unsigned w, const char *key, size_t nkey, uint32_t exptime,
			struct kv_item_view *v)
{
	uint64_t hv = kv_hash(key, nkey);
	struct kv_lock *l = kv_stripe(s, hv);
	_Atomic(struct kv_item *) *pp;
	struct kv_item *it;

	kv_enter(s, w);
	ws_inc(s, w, KV_WS_CMD_TOUCH);
	kv_lock(l);
	it = find_live(s, w, hv, key, nkey, &pp);
	if (it) {
		if (v)
			fill_view(it, v);    /* before the bump: gat's h flag is not read */
		bump(s, it);
		atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
		cs_add(s, w, it->clsid, KV_CS_TOUCH_HITS, 1);
	}
	kv_unlock(l);
	if (!it) {
		ws_inc(s, w, KV_WS_TOUCH_MISSES);
		return KV_NOT_FOUND;
	}
	if (v) {
		v->exptime = exptime;
		kv_hold(s, w, it);
	}
	return KV_TOUCHED;
}

/* md with I: mark stale, drop any token handed out, take a new cas; no delete counted. */
enum kv_result kv_invalidate(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			     uint64_t cas, bool set_exptime, uint32_t exptime)
{
	uint64_t hv = kv_hash(key, nkey);
	struct kv_lock *l = kv_stripe(s, hv);
	_Atomic(struct kv_item *) *pp;
	enum kv_result r = KV_DELETED;
	struct kv_item *it;
	uint16_t f;

	kv_enter(s, w);
	kv_lock(l);
	it = find_live(s, w, hv, key, nkey, &pp);
	if (!it || (cas && cas != atomic_load_explicit(&it->cas, memory_order_relaxed))) {
		ws_inc(s, w, KV_WS_DELETE_MISSES);
		r = it ? KV_EXISTS : KV_NOT_FOUND;
	} else {
		if (set_exptime)
			atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
		f = atomic_load_explicit(&it->iflags, memory_order_relaxed);
		while (!atomic_compare_exchange_weak_explicit(&it->iflags, &f,
				(uint16_t)((f | KV_F_STALE) & ~KV_F_TOKEN), memory_order_relaxed,
				memory_order_relaxed))
			;
		atomic_store_explicit(&it->cas, next_cas(s), memory_order_relaxed);
	}
	kv_unlock(l);
	return r;
}

/* ---- incr / decr ---- */

static bool c_isspace(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/*
 * memcached's safe_strtoull over the value as strtoull sees it (the item's CRLF follows the
 * value; past it reads as the end): white space, a sign, decimal digits without overflow,
 * then white space or the end; a result >= 2^63 is refused when a '-' is in the text.
 */
static bool parse_u64(const uint8_t *p, size_t n, uint64_t *out)
{
	size_t end = n + 2, i = 0, d0;
	uint64_t v = 0;
	bool neg = false;

	while (i < end && c_isspace(p[i]))
		i++;
	if (i < end && (p[i] == '+' || p[i] == '-'))
		neg = p[i++] == '-';
	for (d0 = i; i < end && p[i] >= '0' && p[i] <= '9'; i++) {
		unsigned d = p[i] - '0';
		if (v > (UINT64_MAX - d) / 10)
			return false;                  /* ERANGE */
		v = v * 10 + d;
	}
	if (i == d0 || (i < end && p[i] != 0 && !c_isspace(p[i])))
		return false;
	if (neg)
		v = -v;
	if ((int64_t)v < 0)
		for (size_t j = 0; j < end && p[j]; j++)
			if (p[j] == '-')
				return false;
	*out = v;
	return true;
}

/* The new value's text: the number, padded with spaces to the old length when it fits
 * (memcached rewrites the item in place then), else exactly as long as the number. */
static struct kv_item *arith_item(struct kv_store *s, unsigned w, struct kv_item *old, uint64_t val,
				  struct kv_lock *l, struct kv_item **spare)
{
	char num[24];
	uint32_t dlen = (uint32_t)snprintf(num, sizeof(num), "%llu", (unsigned long long)val);
	uint32_t n = dlen <= old->nbytes ? old->nbytes : dlen;
	struct kv_item *nu = alloc_locked(s, w, kv_item_size(old->nkey, n), l, spare);

	if (!nu)
		return NULL;
	init_item(nu, kv_item_key(old), old->nkey, old->flags,
		  atomic_load_explicit(&old->exptime, memory_order_relaxed), n);
	memcpy(kv_item_value(nu), num, dlen);
	memset(kv_item_value(nu) + dlen, ' ', n - dlen);
	memcpy(kv_item_value(nu) + n, "\r\n", 2);
	if (dlen <= old->nbytes)   /* in place, memcached keeps the item's flags */
		atomic_fetch_or_explicit(&nu->iflags, atomic_load_explicit(&old->iflags,
			memory_order_relaxed) & (KV_F_FETCHED | KV_F_STALE | KV_F_TOKEN),
			memory_order_relaxed);
	return nu;
}

/* Under the lock: memcached's do_add_delta. */
static int arith_locked(struct kv_store *s, unsigned w, uint64_t hv, const char *key, size_t nkey,
			bool incr, uint64_t delta, uint64_t cas_in, uint64_t *out,
			struct kv_lock *l, struct kv_item **spare, struct kv_item **res)
{
	_Atomic(struct kv_item *) *pp;
	struct kv_item *old = find_live(s, w, hv, key, nkey, &pp), *nu;
	uint64_t val;

	if (!old) {
		ws_inc(s, w, incr ? KV_WS_INCR_MISSES : KV_WS_DECR_MISSES);
		return KV_NOT_FOUND;
	}
	if (old->nbytes == 0 || kv_mc_ntotal(s, nkey, old->flags, old->nbytes) > MC_CHUNK_MAX)
		return KV_NON_NUMERIC;      /* memcached: empty or chunked values are not numbers */
	if (cas_in && cas_in != atomic_load_explicit(&old->cas, memory_order_relaxed))
		return KV_EXISTS;
	if (!parse_u64(kv_item_value(old), old->nbytes, &val))
		return KV_NON_NUMERIC;
	val = incr ? val + delta : delta > val ? 0 : val - delta;
	cs_add(s, w, old->clsid, incr ? KV_CS_INCR_HITS : KV_CS_DECR_HITS, 1);
	if (!(nu = arith_item(s, w, old, val, l, spare)))
		return *spare ? KV_RETRY : KV_NO_MEMORY;
	/* Items are immutable here, so the result is always a new item; memcached writes a
	 * result that fits over the old one in place (do_add_delta), and counts no new item
	 * in total_items for it. Count as it does. */
	link_at_(s, w, pp, old, nu, nu->nbytes > old->nbytes);
	*out = val;
	*res = nu;
	return KV_STORED;
}

enum kv_result kv_arith_cas(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			    bool incr, uint64_t delta, uint64_t cas_in, uint64_t *out,
			    uint64_t *cas_out, struct kv_item_view *v)
{
	uint64_t hv = kv_hash(key, nkey), val = 0;
	struct kv_lock *l = kv_stripe(s, hv);
	struct kv_item *spare = NULL, *nu = NULL;
	int r, tries = 0;

	kv_enter(s, w);
	kv_lock(l);
	do {
		r = arith_locked(s, w, hv, key, nkey, incr, delta, cas_in, &val, l, &spare, &nu);
	} while (r == KV_RETRY && ++tries < 4);
	if (r == KV_STORED) {
		if (cas_out)
			*cas_out = atomic_load_explicit(&nu->cas, memory_order_relaxed);
		if (v)
			fill_view(nu, v);
	}
	kv_unlock(l);
	if (spare)
		kv_slab_free_new(s, spare);
	if (r == KV_RETRY)
		r = KV_NO_MEMORY;
	if (r == KV_STORED) {
		*out = val;
		if (v)
			kv_hold(s, w, nu);
	}
	return (enum kv_result)r;
}

enum kv_result kv_arith(struct kv_store *s, unsigned w, const char *key, size_t nkey, bool incr,
			uint64_t delta, uint64_t *out, uint64_t *cas_out)
{
	return kv_arith_cas(s, w, key, nkey, incr, delta, 0, out, cas_out, NULL);
}

/* memcached's process_flush_all_command after the delay became @when. */
void kv_flush_all(struct kv_store *s, uint32_t when)
{
	uint32_t now = kv_store_now(s);

	if (s->cfg.use_cas) {
		atomic_store(&s->oldest_live, when - 1);
		if (when - 1 <= now)
			atomic_store(&s->oldest_cas, next_cas(s));
	} else {
		atomic_store(&s->oldest_live, when);
	}
}
