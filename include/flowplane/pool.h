/* pool.h: fixed-size packet buffer pool with per-core magazine caches. */
#pragma once

#include <pthread.h>
#include <stdint.h>

#include <flowplane/compiler.h>
#include <flowplane/mbuf.h>

/*
 * Bonwick's magazine allocator (USENIX ATC 2001) over one contiguous data region.
 * Each core owns an fp_pool_cache holding two magazines (stacks of free buffers): get
 * and put touch only the loaded magazine, so the steady state takes no lock and no
 * atomic. When the loaded one runs dry (or full) the cache swaps in its previous
 * magazine, and only when both are exhausted does it exchange a whole magazine with
 * the pool's depot under the depot lock: one locked operation per mag_size buffers.
 *
 * Consequence worth knowing: buffers parked in other cores' caches (at most
 * 2 * mag_size per cache) cannot be handed out, so size the pool for that slack.
 */
struct fp_mag {
	struct fp_mag *next;
	uint32_t n;                /* buffers held */
	struct fp_mbuf *rounds[];  /* mag_size slots */
};

struct fp_pool_cache {
	struct fp_mag *loaded;     /* get/put work here */
	struct fp_mag *prev;       /* always full or empty (Bonwick's invariant) */
	struct fp_pool *pool;
	uint32_t mag_size;
	uint32_t in_depot_calls;   /* exchanges with the depot (the slow path), for tuning */
	struct fp_pool_cache *next_cache; /* the pool's list of caches, for occupancy */
} fp_aligned_cache;

struct fp_pool_params {
	const char *name;
	uint32_t n_bufs;           /* buffers in the pool */
	uint32_t buf_size;         /* bytes per buffer, headroom included */
	uint16_t headroom;         /* bytes reserved in front of data (default 128) */
	uint32_t mag_size;         /* buffers per magazine (default 64) */
	uint32_t max_caches;       /* per-core caches that may attach (default 64) */
	void *region;              /* data area of n_bufs * buf_size bytes owned by the
				    * caller (an AF_XDP UMEM), or NULL to allocate one */
};

struct fp_pool {
	char name[32];
	uint8_t *data;             /* n_bufs * buf_size bytes */
	struct fp_mbuf *mbufs;     /* header of buffer i is mbufs[i] */
	uint32_t n_bufs, buf_size, mag_size;
	uint16_t headroom;
	int owns_region;
	void *mag_mem;

	pthread_mutex_t lock;      /* protects everything below */
	struct fp_mag *depot_full; /* full magazines */
	struct fp_mag *depot_partial; /* at most one partly filled magazine, or NULL */
	struct fp_mag *depot_empty;
	uint64_t depot_bufs;       /* buffers in the depot */
	struct fp_pool_cache *caches;
	uint32_t n_caches, max_caches;
	uint64_t exhausted;        /* gets that found no buffer */
};

/* Create a pool. Returns NULL with errno set (EINVAL for bad parameters, ENOMEM). */
struct fp_pool *fp_pool_create(const struct fp_pool_params *p);

/* Free the pool. Every cache must have been flushed and every buffer returned. */
void fp_pool_destroy(struct fp_pool *pool);

/* Attach a per-core cache to @pool. Returns 0 or -ENOSPC past max_caches. */
int fp_pool_cache_init(struct fp_pool_cache *c, struct fp_pool *pool);

/* Return a cache's buffers and magazines to the depot and detach it. */
void fp_pool_cache_flush(struct fp_pool_cache *c);

/* Buffers currently handed out (not in the depot or any cache). Exact only when no other
 * thread is using the pool; meant for statistics and leak checks at teardown. */
uint64_t fp_pool_in_use(struct fp_pool *pool);

/* Header of the buffer whose data starts at byte @offset of the region (UMEM address). */
static inline struct fp_mbuf *fp_pool_mbuf_at(struct fp_pool *pool, uint64_t offset)
{
	return &pool->mbufs[offset / pool->buf_size];
}

/* Byte offset of @m's buffer in the region. */
static inline uint64_t fp_pool_offset_of(const struct fp_pool *pool, const struct fp_mbuf *m)
{
	return (uint64_t)m->index * pool->buf_size;
}

struct fp_mbuf *__fp_pool_get(struct fp_pool_cache *c);
void __fp_pool_put(struct fp_pool_cache *c, struct fp_mbuf *m);
void __fp_mbuf_check_free(const struct fp_mbuf *m) fp_cold;

/* Make a fresh buffer look like a one-segment empty packet with one reference. */
static inline void fp_mbuf_reset(struct fp_mbuf *m, uint16_t headroom)
{
	m->data_off = headroom;
	m->refcnt = 1;
	m->nb_segs = 1;
	m->flags = 0;
	m->data_len = 0;
	m->pkt_len = 0;
	m->flow_hash = 0;
	m->next = NULL;
	m->rx_ts_ns = 0;
}

/* Take one buffer from the calling core's cache; NULL when the pool is exhausted. */
static inline struct fp_mbuf *fp_pool_get(struct fp_pool_cache *c)
{
	struct fp_mag *l = c->loaded;
	struct fp_mbuf *m;

	if (fp_likely(l->n > 0))
		m = l->rounds[--l->n];
	else if (!(m = __fp_pool_get(c)))
		return NULL;
#ifndef NDEBUG
	if (!(m->flags & FP_MBUF_F_FREE))
		__fp_mbuf_check_free(m);
#endif
	fp_mbuf_reset(m, c->pool->headroom);
	return m;
}

/* Return one segment (its refcnt already at zero) to the calling core's cache. */
static inline void fp_pool_put(struct fp_pool_cache *c, struct fp_mbuf *m)
{
	struct fp_mag *l = c->loaded;

#ifndef NDEBUG
	if (m->flags & FP_MBUF_F_FREE)
		__fp_mbuf_check_free(m);
#endif
	m->flags = FP_MBUF_F_FREE;
	if (fp_likely(m->pool == c->pool && l->n < c->mag_size))
		l->rounds[l->n++] = m;
	else
		__fp_pool_put(c, m);
}

/* Take up to @n buffers; returns how many (fewer only when the pool is exhausted). */
unsigned fp_pool_get_bulk(struct fp_pool_cache *c, struct fp_mbuf **out, unsigned n);

/* Return @n single-segment buffers whose refcnt is already zero. */
void fp_pool_put_bulk(struct fp_pool_cache *c, struct fp_mbuf *const *ms, unsigned n);
