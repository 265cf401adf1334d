/* kv.h: flowplane-kv's parts: the shared store (store.c) and the memcached protocol (proto.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * fp-kv: a memcached-compatible key-value server on flowplane's event layer.
 *
 *   store.c, slab.c   one keyspace shared by every worker. Items live in a slab arena of
 *                     exactly -m bytes (memcached's model: 1 MiB pages handed to size
 *                     classes growing by -f 1.25, per-class CLOCK eviction), so memory
 *                     never exceeds the limit; the hash table and per-connection buffers
 *                     are the stated overhead on top. qsbr.c: memory reuse (QSBR);
 *                     store_stats.c: the store's figures for stats.
 *   proto.c, meta.c   the text protocol and the meta commands, streaming, byte-identical to
 *                     memcached 1.6's responses.
 *   stats.c           stats, stats settings, stats items, stats slabs.
 *   server.c          the server on evl, without its command line (fp-kv, fp-vsim).
 *   main.c            the command line (memcached's flags plus the runtime's).
 *
 * Concurrency. Writers (any mutation) take one of KV_LOCKS striped spinlocks chosen by
 * the key's hash; readers take none. An item is immutable once linked into the table
 * except for its atomic fields (exptime, the CLOCK bit, the fetched/time fields): a
 * mutation links a new item in place of the old (a pointer store with release order),
 * so a reader that follows the chain with acquire loads sees either item whole. An
 * unlinked item's memory is reused only after every worker has passed a quiescent state
 * (QSBR, as in Linux RCU): each worker calls kv_store_quiesce() between rounds (evl's
 * poll hook and a 1 ms timer), which run to completion, so no worker can hold a pointer
 * across it. Unlinked items wait in per-worker limbo lists, counted against -m; an
 * allocation that finds its class full reclaims limbo first, then evicts. A worker that
 * must wait for memory "parks", publishing the views it still holds, so workers never
 * wait for each other's waits, and a lone worker never waits at all.
 *
 * Memory. The arena is one mmap of -m bytes (reserved, touched a page at a time as
 * classes take pages, or all at once with -L), never exceeded: a class that needs a page
 * when none is free empties another class's page (memcached's slab rebalancer, inline;
 * with -M only a page with nothing in it, where memcached would go one page over -m).
 * On top of it, not counted in -m: the hash table, 8 bytes per bucket, one bucket per
 * 256 bytes of -m rounded up to a power of two (3-6% of -m); the stripe locks, 256 KiB;
 * per worker about 10 KiB plus 2 KiB per worker; 16 bytes per MiB of arena. An item costs
 * 48 bytes + key + value + 2 in a chunk of its class (memcached: 56 + key + 1 + flags).
 */

#define KV_KEY_MAX        250
#define KV_LOCKS          4096
#define KV_DEFAULT_MEM_MB 64
#define KV_DEFAULT_ITEM_MAX (1024u * 1024u)
#define KV_REALTIME_MAXDELTA (60u * 60u * 24u * 30u)   /* 30 days: beyond, absolute time */

struct kv_store;

struct kv_store_config {
	uint64_t mem_limit;       /* -m in bytes: the slab arena's size */
	uint32_t item_max;        /* -I: largest item (header + key + value + CRLF) */
	double growth_factor;     /* -f: 1.25 */
	uint32_t chunk_min;       /* -n: 48, smallest value space (memcached's default) */
	unsigned n_workers;       /* each gets a limbo list and a quiescent-state counter */
	bool use_cas;             /* -C turns CAS off (then cas is 0 everywhere) */
	bool evict;               /* -M turns eviction off: a full store answers
				   * SERVER_ERROR out of memory storing object */
	unsigned hashpower;       /* log2 of buckets; 0: from mem_limit */
	bool prealloc;            /* touch the arena up front (-L) */
	uint64_t pending_max;     /* bytes of items allocated but not yet stored (values still
				   * arriving, which cannot be evicted); 0: the default, an
				   * eighth of mem_limit but at least two largest items */
};

/*
 * The store's clock: seconds since the process started ("current_time" in memcached),
 * set by kv_store_tick() from the workers (once a round is plenty), and readable by
 * everyone. Expiry times are stored in this clock: relative values up to 30 days are
 * added to now, larger ones are Unix times converted with the process start time,
 * negative ones mean already expired (memcached's realtime()). A test can set it.
 */
uint32_t kv_store_now(const struct kv_store *s);
void kv_store_tick(struct kv_store *s, uint64_t unix_ns);
void kv_store_set_clock(struct kv_store *s, uint32_t now_rel, uint64_t process_started_unix);
uint32_t kv_realtime(const struct kv_store *s, int64_t exptime);

struct kv_store *kv_store_create(const struct kv_store_config *cfg, char *err, size_t errlen);
void kv_store_destroy(struct kv_store *s);

/* Worker @w is between rounds: it holds no item pointer. */
void kv_store_quiesce(struct kv_store *s, unsigned w);
/* Worker @w stops using the store (exit, shutdown): it holds nothing and stops holding up
 * memory reuse until its next call, which brings it back. Every worker starts offline. */
void kv_store_offline(struct kv_store *s, unsigned w);

/* The expiry crawler (memcached's LRU crawler): reclaim items that expired or were
 * flushed, at most @budget chunks per slab class, so their memory is reused before a
 * class takes a fresh page. Worker @w calls it between rounds (about once a second);
 * returns the items reclaimed. */
unsigned kv_store_crawl(struct kv_store *s, unsigned w, unsigned budget);

/* lru_crawler metadump: every live item of the classes in @mask (bit i: class i), from
 * *@cur (zeroed to start). @fn gets each item's metadata and returns false to stop there
 * (no output room): the next call resumes at that item. True once every class is done.
 * Items stored or removed meanwhile may or may not be seen (as memcached's crawler). */
struct kv_dump_cursor {
	uint32_t cls, page_n, chunk;
};
struct kv_item_meta {
	const char *key;
	uint8_t nkey;
	int64_t exp_unix;             /* -1: never */
	uint64_t la_unix, cas, size;  /* last access; memcached's item size */
	bool fetched;
	uint8_t cls;
};
bool kv_store_dump(struct kv_store *s, unsigned w, uint64_t mask, struct kv_dump_cursor *cur,
		   bool (*fn)(void *arg, const struct kv_item_meta *m), void *arg);
/* An item evicted to make room (not an expired one reclaimed): told, if a hook is set,
 * from the evicting worker with the item still readable (watch evictions). */
struct kv_evicted {
	const char *key;
	uint8_t nkey;
	bool fetched;
	int64_t ttl;                  /* seconds left, -1: never expires */
	uint32_t idle;                /* seconds since last access */
	uint8_t cls;
	uint32_t nbytes;              /* value length */
};
void kv_store_set_evict_hook(struct kv_store *s, void (*fn)(void *arg, const struct kv_evicted *e),
			     void *arg);
/* lru_crawler disable/enable: the expiry crawler stops (kv_store_crawl does nothing). */
void kv_store_crawler_enable(struct kv_store *s, bool on);
bool kv_store_crawler_enabled(const struct kv_store *s);

/* An item as readers see it. key and value point into the item: valid until the caller's
 * worker next quiesces. */
struct kv_item_view {
	const char *key;
	uint8_t nkey;
	const uint8_t *value;     /* without the trailing CRLF */
	uint32_t nbytes;          /* value length */
	uint32_t flags;
	uint32_t exptime;         /* store clock, 0 = never */
	uint64_t cas;
	uint32_t last_access;     /* store clock */
	bool fetched;             /* read at least once since stored (meta h flag) */
	bool won;                 /* meta W: this fetch got the win token */
	bool stale;               /* meta X: the item is stale (md I, ms I) */
	bool token_sent;          /* meta Z: a win token went out before this fetch */
	uint8_t clsid;            /* its slab class */
};

/*
 * Look @key up. Lock-free. Returns true and fills @v for a live item (not expired, not
 * flushed); bumps its CLOCK bit and access time (the view has them from before). gat is
 * kv_touch with a view. Counts get_hits / get_misses (and get_expired, get_flushed).
 */
bool kv_get(struct kv_store *s, unsigned w, const char *key, size_t nkey, struct kv_item_view *v);

/*
 * The meta get (mg) with the flags that change the item: T (touch: new expiry), N (on a
 * miss, vivify: link an empty item with that ttl and hand this client the win token),
 * and the stale/win bookkeeping of memcached's meta protocol: an item marked stale (md
 * with I, or an ms with I losing a cas race) or close to expiry with R hands out one win
 * token (W) to the first fetcher and Z (already won) to the others.
 */
struct kv_mget_args {
	bool touch;             /* T */
	uint32_t exptime;       /* store clock, for T and N */
	bool vivify;            /* N */
	uint32_t recache_below; /* R: seconds of ttl left under which a win token is handed
				 * out (0: off) */
	bool no_bump;           /* do not update the access time or CLOCK bit */
};
/* The view's exptime, last_access and fetched are from before this call (memcached prints
 * t, l, h from before T/N and the bump; for a vivified item exptime reads 0). A T fetch
 * counts as cmd_touch + touch_hits/misses, any other as get_hits/misses, as mg does. */
enum kv_mget_result { KV_MG_MISS, KV_MG_HIT, KV_MG_VIVIFIED };
enum kv_mget_result kv_mget(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			    const struct kv_mget_args *a, struct kv_item_view *v);
/* md with I: mark stale (and with T set a new expiry) instead of unlinking; a new cas, no
 * token handed out yet. KV_DELETED when done, KV_EXISTS (cas != 0, no match), KV_NOT_FOUND. */
enum kv_result kv_invalidate(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			     uint64_t cas, bool set_exptime, uint32_t exptime);

/* The storage commands. A store is a two-step operation so values can arrive in pieces:
 * kv_alloc reserves an item of the full size (possibly evicting); the protocol copies the
 * value into kv_new_data() as it arrives; kv_store_item links it according to @mode. */
enum kv_set_mode { KV_SET, KV_ADD, KV_REPLACE, KV_APPEND, KV_PREPEND, KV_CAS,
		   KV_CAS_STALE /* ms with C and I: a lower cas replaces, marked stale */ };

enum kv_result {
	KV_STORED, KV_NOT_STORED, KV_EXISTS, KV_NOT_FOUND,  /* as memcached's store results */
	KV_DELETED, KV_TOUCHED,
	KV_TOO_LARGE,           /* SERVER_ERROR object too large for cache */
	KV_NO_MEMORY,           /* SERVER_ERROR out of memory storing object */
	KV_NON_NUMERIC,         /* incr/decr on a value that is not a decimal number */
	KV_BAD_DELTA,
};

struct kv_new;  /* an allocated, not yet linked item */

/* Reserve an item for @key with @nbytes of value (without CRLF). NULL with *@res =
 * KV_TOO_LARGE or KV_NO_MEMORY. */
struct kv_new *kv_alloc(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			uint32_t flags, uint32_t exptime, uint32_t nbytes, enum kv_result *res);
uint8_t *kv_new_data(struct kv_new *n);
unsigned kv_new_clsid(const struct kv_new *n);   /* its slab class */
size_t kv_new_key(const struct kv_new *n, char *out);   /* copies its key (KV_KEY_MAX) */
uint32_t kv_new_exptime(const struct kv_new *n); /* store clock, 0: never */   /* nbytes + 2 bytes: the value, then "\r\n" */
/* Give up an allocated item (bad data chunk, connection gone). */
void kv_new_free(struct kv_store *s, unsigned w, struct kv_new *n);
/* Link @n by @mode (append/prepend build the combined item; cas compares @cas). @n is
 * consumed. Returns the result and the new item's cas in *@cas_out (when not NULL). */
enum kv_result kv_store_item(struct kv_store *s, unsigned w, struct kv_new *n,
			     enum kv_set_mode mode, uint64_t cas, uint64_t *cas_out);

/* @cas != 0: KV_EXISTS unless it matches (md C). KV_DELETED or KV_NOT_FOUND otherwise. */
enum kv_result kv_delete(struct kv_store *s, unsigned w, const char *key, size_t nkey, uint64_t cas);
/* touch / gat: KV_TOUCHED (the view, for gat, has the new exptime) or KV_NOT_FOUND. */
enum kv_result kv_touch(struct kv_store *s, unsigned w, const char *key, size_t nkey, uint32_t exptime,
			struct kv_item_view *v /* NULL for touch; gat fills it */);
/* incr/decr: decimal 64-bit, incr wraps, decr stops at 0; the new value's text length may
 * change (a new item is linked). *@out = the new value. KV_STORED on success. As memcached
 * does in place, a result shorter than the old text is padded with spaces to its length. */
enum kv_result kv_arith(struct kv_store *s, unsigned w, const char *key, size_t nkey, bool incr,
			uint64_t delta, uint64_t *out, uint64_t *cas_out);
/* The same with ma's C (@cas_in != 0: KV_EXISTS unless it matches) and the new item's view
 * (for ma's t flag) in @v when not NULL. */
enum kv_result kv_arith_cas(struct kv_store *s, unsigned w, const char *key, size_t nkey,
			    bool incr, uint64_t delta, uint64_t cas_in, uint64_t *out,
			    uint64_t *cas_out, struct kv_item_view *v);
/* Drop @key without counting a delete: memcached does this when a set fails to allocate. */
void kv_unlink(struct kv_store *s, unsigned w, const char *key, size_t nkey);
/* flush_all: @when is kv_realtime(delay), or now without a delay. As memcached: once the
 * clock reaches @when - 1, items linked at or before @when - 1 are invalid; with CAS on, an
 * immediate flush also takes a cas number and invalidates every item with an older cas
 * (with -C, the cut is @when itself). */
void kv_flush_all(struct kv_store *s, uint32_t when);

/* Counters and figures for stats (kept per worker where hot, summed when read). */
struct kv_store_stats {
	uint64_t curr_items, total_items, bytes, evictions, expired_unfetched, evicted_unfetched,
		 reclaimed, limit_maxbytes, hash_bytes, hash_power_level;
	uint64_t crawler_reclaimed, crawler_checked, crawler_starts;
	uint64_t get_hits, get_misses, get_expired, get_flushed, cmd_touch, touch_hits, touch_misses,
		 delete_hits, delete_misses, incr_hits, incr_misses, decr_hits, decr_misses,
		 cas_hits, cas_misses, cas_badval, slabs_moved, total_malloced;
};
void kv_store_stats(const struct kv_store *s, struct kv_store_stats *out);
/* stats reset: every counter memcached's stats_reset() zeroes (hits, misses, totals,
 * evictions, reclaims) starts again from 0; gauges (items, bytes) are kept. */
void kv_store_stats_reset(struct kv_store *s);
/* cache_memlimit: use at most @bytes of the arena from now on (pages beyond it are not
 * taken again; eviction keeps the store under it). 0, or -ERANGE above the arena (-m). */
int kv_store_set_limit(struct kv_store *s, uint64_t bytes);
/* stats slabs / stats items lines (memcached's names), written by @emit. */
void kv_store_stats_slabs(const struct kv_store *s,
			  void (*emit)(void *arg, const char *name, const char *fmt_value), void *arg);
void kv_store_stats_items(const struct kv_store *s,
			  void (*emit)(void *arg, const char *name, const char *fmt_value), void *arg);
