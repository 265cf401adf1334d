/* store_defs.h: fp-kv store internals shared by store.c, slab.c, qsbr.c and store_stats.c: items, classes, QSBR. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <flowplane/compiler.h>

#include "kv.h"

/*
 * Memory layout. The arena is one mmap of exactly mem_limit bytes cut into 1 MiB pages.
 * A page belongs to no one (free), to one size class (cut into equal chunks, one item
 * each), or to a run of pages holding one item larger than a page (the "huge" class,
 * only when -I exceeds 1 MiB). Chunk sizes follow memcached: 48 + 48 bytes, times the
 * growth factor, 8-byte aligned, up to half a page; the last class is a whole page.
 */
#define KV_PAGE_SHIFT   20
#define KV_PAGE_SIZE    (1u << KV_PAGE_SHIFT)
#define KV_MAX_CLASSES  63             /* ids 1..62 chunked, KV_HUGE for page runs */
#define KV_HUGE         (KV_MAX_CLASSES - 1)
#define KV_CHUNK_ALIGN  8u
#define KV_NO_PAGE      UINT32_MAX

/* memcached 1.6's item header (items.c item_make_header): 48 bytes, 8 more with CAS, the
 * key with its NUL, 4 bytes of flags when they are not 0, then value + CRLF. Used for the
 * "object too large" boundary and for incr's "chunked items are not numbers" rule. */
#define MC_ITEM_HDR         48u
#define MC_CHUNK_MAX        (KV_PAGE_SIZE / 2)

#define KV_HELD_MAX      256   /* item pointers a worker may hold per round, tracked */
#define KV_LIMBO_BATCHES 32    /* stamped limbo batches per worker before merging */
#define KV_QS_OFFLINE    UINT64_MAX

/* The chunk state lives in the low bits of iflags, next to bits readers set lock-free. */
enum { KV_ST_FREE = 0, KV_ST_NEW = 1, KV_ST_LINKED = 2, KV_ST_LIMBO = 3, KV_ST_MASK = 3 };
#define KV_F_REF     0x04u  /* CLOCK reference bit: set on access, cleared by the hand */
#define KV_F_FETCHED 0x08u  /* read since stored (stats *_unfetched, mg h) */
#define KV_F_STALE   0x10u  /* meta: invalidated (md I) or set stale (ms I) */
#define KV_F_TOKEN   0x20u  /* meta: a win token was handed out */

/*
 * An item: 48 bytes of header, then the key, then the value and "\r\n". Everything but
 * the atomic fields is written before the item is published (release store into the
 * hash chain) and never again while anyone can reach it.
 */
struct kv_item {
	_Atomic(struct kv_item *) h_next; /* hash chain; kept intact after unlink for readers */
	struct kv_item *lnext;            /* free list or limbo list (owner only) */
	_Atomic uint64_t cas;             /* md I gives a linked item a new one */
	_Atomic uint32_t exptime;         /* touch/gat/mg T change it in place */
	_Atomic uint32_t atime;           /* last access, store clock */
	uint32_t time;                    /* when linked: flush_all compares it */
	uint32_t nbytes;                  /* value length without CRLF */
	uint32_t flags;
	_Atomic uint16_t iflags;          /* KV_ST_* | KV_F_* */
	uint8_t nkey;
	uint8_t clsid;
};
static_assert(sizeof(struct kv_item) == 48, "kv_item header is 48 bytes");

static inline char *kv_item_key(struct kv_item *it) { return (char *)(it + 1); }
static inline uint8_t *kv_item_value(struct kv_item *it)
{
	return (uint8_t *)(it + 1) + it->nkey;
}
static inline size_t kv_item_size(uint32_t nkey, uint32_t nbytes)
{
	return sizeof(struct kv_item) + nkey + nbytes + 2;
}
/* Acquire: seeing LINKED, the eviction hand also sees the key written before it. */
static inline unsigned kv_item_state(struct kv_item *it)
{
	return atomic_load_explicit(&it->iflags, memory_order_acquire) & KV_ST_MASK;
}
/* State changes keep the flag bits readers may be setting concurrently. */
static inline void kv_item_set_state(struct kv_item *it, unsigned st)
{
	uint16_t o = atomic_load_explicit(&it->iflags, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&it->iflags, &o,
			(uint16_t)((o & ~KV_ST_MASK) | st), memory_order_release, memory_order_relaxed))
		;
}

/* A test-and-test-and-set spinlock that yields the CPU when the holder was preempted. */
struct kv_lock { _Atomic uint32_t v; };
void kv_lock_slow(struct kv_lock *l);
static inline void kv_lock(struct kv_lock *l)
{
	if (fp_unlikely(atomic_exchange_explicit(&l->v, 1, memory_order_acquire)))
		kv_lock_slow(l);
}
static inline bool kv_trylock(struct kv_lock *l)
{
	return !atomic_load_explicit(&l->v, memory_order_relaxed) &&
	       !atomic_exchange_explicit(&l->v, 1, memory_order_acquire);
}
static inline void kv_unlock(struct kv_lock *l) { atomic_store_explicit(&l->v, 0, memory_order_release); }

/* Stripe locks sit one per cache line: two hot keys in different stripes never share one. */
struct kv_lock_line { struct kv_lock l; } fp_aligned_cache;

/* Counters with one writer: a relaxed load and store, summed by readers. */
typedef _Atomic uint64_t kv_ctr;
static inline void kv_ctr_add(kv_ctr *c, uint64_t d)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + d, memory_order_relaxed);
}
static inline uint64_t kv_ctr_get(const kv_ctr *c) { return atomic_load_explicit(c, memory_order_relaxed); }

/* Per-class command counters (stats slabs), kept per worker. */
enum { KV_CS_GET_HITS, KV_CS_CMD_SET, KV_CS_DELETE_HITS, KV_CS_INCR_HITS, KV_CS_DECR_HITS,
       KV_CS_CAS_HITS, KV_CS_CAS_BADVAL, KV_CS_TOUCH_HITS,
       KV_CS_ITEMS, KV_CS_BYTES,   /* linked items and their bytes: +/- by whoever links */
       KV_CS_LIMBO,                /* chunks in this worker's limbo */
       KV_CS_N };

/* Worker counters that are not per class. */
enum { KV_WS_TOTAL_ITEMS, KV_WS_GET_MISSES, KV_WS_GET_EXPIRED,
       KV_WS_GET_FLUSHED, KV_WS_CMD_TOUCH, KV_WS_TOUCH_MISSES, KV_WS_DELETE_MISSES,
       KV_WS_INCR_MISSES, KV_WS_DECR_MISSES, KV_WS_CAS_MISSES, KV_WS_N };

struct kv_limbo_batch {
	struct kv_item *head, *tail;
	uint64_t stamp;
};

/*
 * One worker's QSBR state (Linux RCU's quiescent-state-based reclamation, McKenney &
 * Slingwine 1998). qs is the global epoch the worker read at its last quiescent state;
 * an item retired at epoch e may be reused once every worker's qs >= e. A worker that
 * waits for memory inside kv_alloc "parks": it publishes the few items it still holds
 * (the views it handed out this round), so others may reuse anything else without
 * waiting for it, and it may reuse its own limbo at once: a single worker never waits.
 */
struct kv_worker {
	_Atomic uint64_t qs;                 /* KV_QS_OFFLINE: holds nothing */
	_Atomic uint32_t parked;             /* odd while parked (a sequence count) */
	_Atomic uint32_t nheld;              /* KV_HELD_MAX + 1: overflowed */
	_Atomic(struct kv_item *) held[KV_HELD_MAX];
	struct kv_item *pend;                /* retired this round, not yet stamped */
	uint64_t npend;
	struct kv_limbo_batch batch[KV_LIMBO_BATCHES];
	unsigned nbatch;
	struct kv_item **excl;               /* scratch: items parked workers hold */
	uint64_t seen_epoch;                 /* read on unparking (see alloc_slow) */
	kv_ctr ws[KV_WS_N];
	kv_ctr cs[KV_MAX_CLASSES][KV_CS_N];
} fp_aligned_cache;

/* Page metadata, under the owning class's lock (or the page lock while free). */
struct kv_page {
	uint8_t clsid;      /* 0: free */
	uint8_t draining;   /* being emptied for another class: freed chunks stay out */
	uint32_t used;      /* chunks not free */
	uint32_t next;      /* next page of the same class, KV_NO_PAGE */
	uint32_t run;       /* huge: pages in the run (first page) */
};

struct kv_class {
	struct kv_lock lock;
	uint32_t size, perslab;
	struct kv_item *free;
	uint64_t nfree;
	uint32_t first_page, npages, empty;  /* pages, those with no chunk in use */
	uint32_t reserve;                    /* free chunks kept ahead by early eviction */
	uint32_t hand_page, hand_chunk;      /* CLOCK hand */
	uint32_t crawl_page, crawl_chunk;    /* the expiry crawler's own hand */
	uint64_t used, linked, requested;    /* chunks in use, items linked, their bytes */
	uint64_t evicted, evicted_nonzero, evicted_unfetched, evicted_time, reclaimed,
		 expired_unfetched, outofmemory;
	uint64_t crawler_reclaimed, crawler_checked;
} fp_aligned_cache;

struct kv_store {
	struct kv_store_config cfg;
	/* read-mostly */
	_Atomic(struct kv_item *) *table;
	uint64_t mask;
	unsigned hashpower;
	uint8_t *arena;
	uint32_t npages, nclasses;           /* classes 1..nclasses-1 chunked */
	struct kv_page *pages;
	struct kv_class *cls;
	struct kv_worker *workers;
	struct kv_lock_line *locks;
	/* clock and flush_all */
	_Atomic uint32_t now;
	_Atomic uint64_t started;            /* process start, Unix seconds */
	_Atomic uint32_t oldest_live;
	_Atomic uint64_t oldest_cas;
	/* hot shared counters */
	_Atomic uint64_t cas_id fp_aligned_cache;
	_Atomic uint64_t epoch fp_aligned_cache;
	/* the page pool */
	struct kv_lock page_lock fp_aligned_cache;
	uint32_t page_cursor;
	_Atomic uint32_t pages_used, empty_pages; /* written under page / class locks */
	_Atomic uint32_t page_limit;         /* pages the store may use: npages, or fewer after
					      * cache_memlimit (the arena never grows) */
	uint32_t huge_cursor;                /* next window to empty for a page run */
	_Atomic uint64_t slabs_moved;        /* pages emptied for another class */
	_Atomic uint64_t crawler_starts;     /* expiry crawler passes */
	_Atomic bool crawler_off;            /* lru_crawler disable */
	void (*evict_hook)(void *arg, const struct kv_evicted *e);   /* set before workers run */
	void *evict_arg;
	struct kv_lock orphan_lock;
	_Atomic bool have_orphans;
	struct kv_item *orphans;             /* limbo left by workers that went offline */
	uint64_t orphan_stamp;
	/* stats reset: what the counters summed to then (the workers' counters have one writer
	 * each and are never written by another thread; readers subtract this instead) */
	kv_ctr cs_base[KV_MAX_CLASSES][KV_CS_N];
	kv_ctr ws_base[KV_WS_N];
	/* items allocated and not stored yet (kv_alloc .. kv_store_item or kv_new_free) */
	_Atomic uint64_t pending_bytes fp_aligned_cache;
};

/* Chunk @idx of size @size in arena page @page. */
static inline struct kv_item *chunk_at(const struct kv_store *s, uint32_t page, uint32_t idx, uint32_t size)
{
	return (struct kv_item *)(void *)(s->arena + ((size_t)page << KV_PAGE_SHIFT) + (size_t)idx * size);
}

/* slab.c */
int kv_slab_init(struct kv_store *s, char *err, size_t errlen);
/* memcached's item size for these fields (its item_size_ok): what stats and dumps show */
uint64_t kv_mc_ntotal(const struct kv_store *s, size_t nkey, uint32_t flags, uint64_t nbytes);
void kv_slab_fini(struct kv_store *s);
unsigned kv_slab_class(const struct kv_store *s, size_t size);
bool kv_slab_fits(const struct kv_store *s, const struct kv_item *it, size_t size);
struct kv_item *kv_slab_alloc(struct kv_store *s, unsigned w, size_t size, bool may_wait);
void kv_slab_free_new(struct kv_store *s, struct kv_item *it);
/* Under the class lock: a chunk back to its class (or its page to the pool). */
void chunk_free_locked(struct kv_store *s, struct kv_class *c, struct kv_item *it);

/* qsbr.c */
void kv_retire(struct kv_store *s, unsigned w, struct kv_item *it);
void kv_hold(struct kv_store *s, unsigned w, struct kv_item *it);
void kv_worker_online(struct kv_store *s, unsigned w);
/* Reuse what is safe in @w's limbo (unless @quiesced, @w's own views are held too);
 * returns chunks freed. */
unsigned reclaim(struct kv_store *s, unsigned w, bool quiesced);
/* Take the limbo of workers gone offline into @k's. */
void adopt_orphans(struct kv_store *s, struct kv_worker *k);

/* store.c, for eviction: unlink @it if it is still linked; caller holds its stripe. */
uint64_t kv_hash(const char *key, size_t nkey);
struct kv_lock *kv_stripe(struct kv_store *s, uint64_t hv);
bool kv_unlink_locked(struct kv_store *s, unsigned w, struct kv_item *it, uint64_t hv);
bool kv_item_dead(const struct kv_store *s, struct kv_item *it, uint32_t now);

static inline void kv_enter(struct kv_store *s, unsigned w)
{
	if (fp_unlikely(atomic_load_explicit(&s->workers[w].qs, memory_order_relaxed) == KV_QS_OFFLINE))
		kv_worker_online(s, w);
}
