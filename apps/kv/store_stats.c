/* store_stats.c: fp-kv's store figures: stats, stats slabs, stats items (memcached's names and order). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "store_defs.h"

/* ---- stats ---- */

static bool class_shown(const struct kv_store *s, unsigned id)
{
	return (id > 0 && id < s->nclasses) || id == KV_HUGE;
}

static uint64_t cs_raw(const struct kv_store *s, unsigned id, unsigned which)
{
	uint64_t n = 0;

	for (unsigned v = 0; v < s->cfg.n_workers; v++)
		n += kv_ctr_get(&s->workers[v].cs[id][which]);
	return n;
}

static uint64_t ws_raw(const struct kv_store *s, unsigned which)
{
	uint64_t n = 0;

	for (unsigned v = 0; v < s->cfg.n_workers; v++)
		n += kv_ctr_get(&s->workers[v].ws[which]);
	return n;
}

/* Counters since the last stats reset; the gauges (KV_CS_ITEMS on) are never reset. */
static uint64_t cs_sum(const struct kv_store *s, unsigned id, unsigned which)
{
	return cs_raw(s, id, which) - kv_ctr_get(&s->cs_base[id][which]);
}

static uint64_t ws_sum(const struct kv_store *s, unsigned which)
{
	return ws_raw(s, which) - kv_ctr_get(&s->ws_base[which]);
}

int kv_store_set_limit(struct kv_store *s, uint64_t bytes)
{
	uint64_t pages = bytes >> KV_PAGE_SHIFT;

	if (pages == 0 || pages > s->npages)
		return -ERANGE;
	atomic_store_explicit(&s->page_limit, (uint32_t)pages, memory_order_relaxed);
	return 0;
}

void kv_store_stats_reset(struct kv_store *s)
{
	for (unsigned id = 1; id < KV_MAX_CLASSES; id++) {
		struct kv_class *c = &s->cls[id];

		for (unsigned k = 0; k < KV_CS_ITEMS; k++)
			atomic_store_explicit(&s->cs_base[id][k], cs_raw(s, id, k),
					      memory_order_relaxed);
		if (!class_shown(s, id))
			continue;
		kv_lock(&c->lock);
		c->evicted = c->evicted_nonzero = c->evicted_unfetched = c->evicted_time = 0;
		c->reclaimed = c->expired_unfetched = c->outofmemory = 0;
		c->crawler_reclaimed = c->crawler_checked = 0;
		kv_unlock(&c->lock);
	}
	for (unsigned k = 0; k < KV_WS_N; k++)
		atomic_store_explicit(&s->ws_base[k], ws_raw(s, k), memory_order_relaxed);
	atomic_store_explicit(&s->slabs_moved, 0, memory_order_relaxed);
}

/* Stats take a const store; its page lock is still a lock (the store is never const). */
static uint64_t pages_malloced(const struct kv_store *s)
{
	struct kv_lock *l = (struct kv_lock *)(uintptr_t)&s->page_lock;
	uint64_t n;

	kv_lock(l);
	n = (uint64_t)atomic_load_explicit(&s->pages_used, memory_order_relaxed) << KV_PAGE_SHIFT;
	kv_unlock(l);
	return n;
}

void kv_store_stats(const struct kv_store *s, struct kv_store_stats *o)
{
	static const unsigned map[][2] = {
		{ offsetof(struct kv_store_stats, get_hits), KV_CS_GET_HITS },
		{ offsetof(struct kv_store_stats, delete_hits), KV_CS_DELETE_HITS },
		{ offsetof(struct kv_store_stats, incr_hits), KV_CS_INCR_HITS },
		{ offsetof(struct kv_store_stats, decr_hits), KV_CS_DECR_HITS },
		{ offsetof(struct kv_store_stats, cas_hits), KV_CS_CAS_HITS },
		{ offsetof(struct kv_store_stats, cas_badval), KV_CS_CAS_BADVAL },
		{ offsetof(struct kv_store_stats, touch_hits), KV_CS_TOUCH_HITS },
		{ offsetof(struct kv_store_stats, curr_items), KV_CS_ITEMS },
		{ offsetof(struct kv_store_stats, bytes), KV_CS_BYTES },
	};

	memset(o, 0, sizeof(*o));
	for (unsigned id = 1; id < KV_MAX_CLASSES; id++) {
		struct kv_class *c = &s->cls[id];
		if (!class_shown(s, id))
			continue;
		for (unsigned m = 0; m < FP_ARRAY_SIZE(map); m++)
			*(uint64_t *)(void *)((char *)o + map[m][0]) += cs_sum(s, id, map[m][1]);
		kv_lock(&c->lock);
		o->evictions += c->evicted;
		o->reclaimed += c->reclaimed;
		o->crawler_reclaimed += c->crawler_reclaimed;
		o->crawler_checked += c->crawler_checked;
		o->expired_unfetched += c->expired_unfetched;
		o->evicted_unfetched += c->evicted_unfetched;
		kv_unlock(&c->lock);
	}
	o->total_items = ws_sum(s, KV_WS_TOTAL_ITEMS);
	o->get_misses = ws_sum(s, KV_WS_GET_MISSES);
	o->get_expired = ws_sum(s, KV_WS_GET_EXPIRED);
	o->get_flushed = ws_sum(s, KV_WS_GET_FLUSHED);
	o->cmd_touch = ws_sum(s, KV_WS_CMD_TOUCH);
	o->touch_misses = ws_sum(s, KV_WS_TOUCH_MISSES);
	o->delete_misses = ws_sum(s, KV_WS_DELETE_MISSES);
	o->incr_misses = ws_sum(s, KV_WS_INCR_MISSES);
	o->decr_misses = ws_sum(s, KV_WS_DECR_MISSES);
	o->cas_misses = ws_sum(s, KV_WS_CAS_MISSES);
	o->limit_maxbytes = (uint64_t)atomic_load_explicit(&s->page_limit, memory_order_relaxed)
			    << KV_PAGE_SHIFT;
	o->hash_power_level = s->hashpower;
	o->hash_bytes = (s->mask + 1) * sizeof(*s->table);
	o->slabs_moved = atomic_load_explicit(&s->slabs_moved, memory_order_relaxed);
	o->crawler_starts = atomic_load_explicit(&s->crawler_starts, memory_order_relaxed);
	o->total_malloced = pages_malloced(s);
}

typedef void (*kv_emit_fn)(void *arg, const char *name, const char *fmt_value);

/* Emit "<pre><id>:<name> <v>" for each name in order (memcached's order). */
static void emit_row(kv_emit_fn emit, void *arg, const char *pre, unsigned id,
		     const char *const *names, const uint64_t *v, unsigned n)
{
	char name[64], val[24];

	for (unsigned i = 0; i < n; i++) {
		if (id)
			snprintf(name, sizeof(name), "%s%u:%s", pre, id, names[i]);
		else
			snprintf(name, sizeof(name), "%s", names[i]);
		snprintf(val, sizeof(val), "%llu", (unsigned long long)v[i]);
		emit(arg, name, val);
	}
}

void kv_store_stats_slabs(const struct kv_store *s, kv_emit_fn emit, void *arg)
{
	static const char *const names[] = { "chunk_size", "chunks_per_page", "total_pages",
		"total_chunks", "used_chunks", "free_chunks", "free_chunks_end", "get_hits",
		"cmd_set", "delete_hits", "incr_hits", "decr_hits", "cas_hits", "cas_badval",
		"touch_hits" }, *const tail[] = { "active_slabs", "total_malloced" };
	uint64_t v[FP_ARRAY_SIZE(names)], active = 0;

	for (unsigned id = 1; id < KV_MAX_CLASSES; id++) {
		struct kv_class *c = &s->cls[id];
		if (!class_shown(s, id))
			continue;
		kv_lock(&c->lock);
		v[0] = id == KV_HUGE ? KV_PAGE_SIZE : c->size;
		v[1] = c->perslab;
		v[2] = c->npages;
		v[3] = id == KV_HUGE ? c->used : (uint64_t)c->npages * c->perslab;
		v[4] = c->used;
		v[5] = c->nfree;
		v[6] = 0;
		kv_unlock(&c->lock);
		if (!v[2])
			continue;
		for (unsigned h = 0; h < 8; h++)   /* KV_CS_GET_HITS .. KV_CS_TOUCH_HITS */
			v[7 + h] = cs_sum(s, id, h);
		active++;
		emit_row(emit, arg, "", id, names, v, FP_ARRAY_SIZE(names));
	}
	v[0] = active;
	v[1] = pages_malloced(s);
	emit_row(emit, arg, "", 0, tail, v, 2);
}

/* The age of the oldest item, near enough: the first linked item ahead of the hand. */
static uint64_t class_age(const struct kv_store *s, struct kv_class *c)
{
	uint32_t p = c->hand_page == KV_NO_PAGE ? c->first_page : c->hand_page, i = c->hand_chunk;

	for (unsigned n = 0; p != KV_NO_PAGE && n < 64; n++, i++) {
		if (i >= c->perslab) {
			p = s->pages[p].next;
			i = 0;
			if (p == KV_NO_PAGE)
				break;
		}
		struct kv_item *it = chunk_at(s, p, i, c->size);
		if (kv_item_state(it) == KV_ST_LINKED)
			return kv_store_now(s) - atomic_load_explicit(&it->atime, memory_order_relaxed);
	}
	return 0;
}

/* memcached's stats items: one LRU here, so everything is "cold"; the segmented-LRU
 * figures are 0. */
void kv_store_stats_items(const struct kv_store *s, kv_emit_fn emit, void *arg)
{
	static const char *const names[] = { "number", "number_hot", "number_warm",
		"number_cold", "age_hot", "age_warm", "age", "mem_requested", "evicted",
		"evicted_nonzero", "evicted_time", "outofmemory", "tailrepairs", "reclaimed",
		"expired_unfetched", "evicted_unfetched", "evicted_active", "crawler_reclaimed",
		"crawler_items_checked", "lrutail_reflocked", "moves_to_cold", "moves_to_warm",
		"moves_within_lru", "direct_reclaims", "hits_to_hot", "hits_to_warm",
		"hits_to_cold", "hits_to_temp" };
	uint64_t v[FP_ARRAY_SIZE(names)];

	for (unsigned id = 1; id < KV_MAX_CLASSES; id++) {
		struct kv_class *c = &s->cls[id];
		uint64_t n = class_shown(s, id) ? cs_sum(s, id, KV_CS_ITEMS) : 0;
		if (!n)
			continue;
		memset(v, 0, sizeof(v));
		v[0] = v[3] = n;
		v[7] = cs_sum(s, id, KV_CS_BYTES);
		v[26] = cs_sum(s, id, KV_CS_GET_HITS);
		kv_lock(&c->lock);
		v[6] = class_age(s, c);
		v[8] = c->evicted;
		v[9] = c->evicted_nonzero;
		v[10] = c->evicted_time;
		v[11] = c->outofmemory;
		v[13] = c->reclaimed;
		v[14] = c->expired_unfetched;
		v[15] = c->evicted_unfetched;
		v[17] = c->crawler_reclaimed;
		v[18] = c->crawler_checked;
		kv_unlock(&c->lock);
		emit_row(emit, arg, "items:", id, names, v, FP_ARRAY_SIZE(names));
	}
}
