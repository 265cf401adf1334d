/* pool.c: the buffer pool's depot, the magazine exchange slow paths, and leak accounting. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <flowplane/log.h>
#include <flowplane/pool.h>

#define POOL_DEFAULT_HEADROOM   128
#define POOL_DEFAULT_MAG_SIZE   64
#define POOL_DEFAULT_MAX_CACHES 64

static size_t mag_bytes(uint32_t mag_size)
{
	return sizeof(struct fp_mag) + (size_t)mag_size * sizeof(struct fp_mbuf *);
}

static struct fp_mag *mag_nth(struct fp_pool *pool, size_t i)
{
	return (struct fp_mag *)(void *)((uint8_t *)pool->mag_mem + i * mag_bytes(pool->mag_size));
}

static void depot_push(struct fp_mag **list, struct fp_mag *m)
{
	m->next = *list;
	*list = m;
}

static struct fp_mag *depot_pop(struct fp_mag **list)
{
	struct fp_mag *m = *list;
	if (m)
		*list = m->next;
	return m;
}

static int pool_check_params(struct fp_pool_params *p)
{
	if (!p->headroom)
		p->headroom = POOL_DEFAULT_HEADROOM;
	if (!p->mag_size)
		p->mag_size = POOL_DEFAULT_MAG_SIZE;
	if (!p->max_caches)
		p->max_caches = POOL_DEFAULT_MAX_CACHES;
	if (p->n_bufs == 0 || p->buf_size <= p->headroom || p->buf_size > UINT16_MAX + 1u)
		return -EINVAL;
	return 0;
}

/* Add one free buffer to the depot through its single partial magazine, so the depot
 * holds full magazines and at most one partial one: the magazine count stays bounded
 * however buffers come back (cache flushes, buffers freed on a foreign core). */
static void depot_add_one(struct fp_pool *pool, struct fp_mbuf *m)
{
	struct fp_mag *p = pool->depot_partial;

	if (!p) {
		p = pool->depot_partial = depot_pop(&pool->depot_empty);
		assert(p); /* guaranteed by the count in fp_pool_create */
	}
	p->rounds[p->n++] = m;
	pool->depot_bufs++;
	if (p->n == pool->mag_size) {
		depot_push(&pool->depot_full, p);
		pool->depot_partial = NULL;
	}
}

/* Lay every buffer's header over its slice of the region and put it in the depot. */
static void pool_fill(struct fp_pool *pool, size_t n_mags)
{
	for (size_t i = 0; i < n_mags; i++)
		depot_push(&pool->depot_empty, mag_nth(pool, i));
	for (uint32_t i = 0; i < pool->n_bufs; i++) {
		struct fp_mbuf *m = &pool->mbufs[i];
		m->buf = pool->data + (size_t)i * pool->buf_size;
		m->buf_len = pool->buf_size;
		m->pool = pool;
		m->index = i;
		m->flags = FP_MBUF_F_FREE;
		depot_add_one(pool, m);
	}
}

struct fp_pool *fp_pool_create(const struct fp_pool_params *params)
{
	struct fp_pool_params p = *params;
	struct fp_pool *pool;

	if (pool_check_params(&p)) {
		errno = EINVAL;
		return NULL;
	}
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return NULL;
	snprintf(pool->name, sizeof(pool->name), "%s", p.name ? p.name : "pool");
	pool->n_bufs = p.n_bufs;
	pool->buf_size = p.buf_size;
	pool->headroom = p.headroom;
	pool->mag_size = p.mag_size;
	pool->max_caches = p.max_caches;
	pthread_mutex_init(&pool->lock, NULL);

	/* Enough magazines that the depot always has an empty one when asked: caches hold two
	 * each, the depot floor(n/M) full ones and one partial, plus spares. */
	size_t n_mags = (p.n_bufs + p.mag_size - 1) / p.mag_size + 2u * p.max_caches + 2;
	pool->mag_mem = calloc(n_mags, mag_bytes(p.mag_size));
	pool->mbufs = aligned_alloc(FP_CACHE_LINE, (size_t)p.n_bufs * sizeof(struct fp_mbuf));
	if (p.region) {
		pool->data = p.region;
	} else {
		void *r = mmap(NULL, (size_t)p.n_bufs * p.buf_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		pool->data = r == MAP_FAILED ? NULL : r;
		pool->owns_region = 1;
	}
	if (!pool->mag_mem || !pool->mbufs || !pool->data) {
		fp_pool_destroy(pool);
		errno = ENOMEM;
		return NULL;
	}
	memset(pool->mbufs, 0, (size_t)p.n_bufs * sizeof(struct fp_mbuf));
	pool_fill(pool, n_mags);
	return pool;
}

void fp_pool_destroy(struct fp_pool *pool)
{
	if (!pool)
		return;
	if (pool->owns_region && pool->data)
		munmap(pool->data, (size_t)pool->n_bufs * pool->buf_size);
	free(pool->mbufs);
	free(pool->mag_mem);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

int fp_pool_cache_init(struct fp_pool_cache *c, struct fp_pool *pool)
{
	int ret = 0;

	memset(c, 0, sizeof(*c));
	pthread_mutex_lock(&pool->lock);
	if (pool->n_caches >= pool->max_caches) {
		ret = -ENOSPC;
		goto out;
	}
	/* Start with two empty magazines: the first get fetches a full one. */
	c->loaded = depot_pop(&pool->depot_empty);
	c->prev = depot_pop(&pool->depot_empty);
	assert(c->loaded && c->prev); /* guaranteed by the count in fp_pool_create */
	c->pool = pool;
	c->mag_size = pool->mag_size;
	c->next_cache = pool->caches;
	pool->caches = c;
	pool->n_caches++;
out:
	pthread_mutex_unlock(&pool->lock);
	return ret;
}

/* Take back a cache's magazine: a full one as it is, a partial one poured out. */
static void depot_return(struct fp_pool *pool, struct fp_mag *m)
{
	if (m->n == pool->mag_size) {
		depot_push(&pool->depot_full, m);
		pool->depot_bufs += m->n;
		return;
	}
	while (m->n)
		depot_add_one(pool, m->rounds[--m->n]);
	depot_push(&pool->depot_empty, m);
}

void fp_pool_cache_flush(struct fp_pool_cache *c)
{
	struct fp_pool *pool = c->pool;

	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	depot_return(pool, c->loaded);
	depot_return(pool, c->prev);
	for (struct fp_pool_cache **pp = &pool->caches; *pp; pp = &(*pp)->next_cache) {
		if (*pp == c) {
			*pp = c->next_cache;
			break;
		}
	}
	pool->n_caches--;
	pthread_mutex_unlock(&pool->lock);
	memset(c, 0, sizeof(*c));
}

uint64_t fp_pool_in_use(struct fp_pool *pool)
{
	pthread_mutex_lock(&pool->lock);
	uint64_t free_bufs = pool->depot_bufs;
	for (struct fp_pool_cache *c = pool->caches; c; c = c->next_cache)
		free_bufs += c->loaded->n + c->prev->n;
	pthread_mutex_unlock(&pool->lock);
	return pool->n_bufs - free_bufs;
}

/* Slow path of fp_pool_get: the loaded magazine is empty. */
struct fp_mbuf *__fp_pool_get(struct fp_pool_cache *c)
{
	struct fp_pool *pool = c->pool;
	struct fp_mag *tmp;

	if (c->prev->n > 0) {
		tmp = c->loaded;
		c->loaded = c->prev;
		c->prev = tmp;
		return c->loaded->rounds[--c->loaded->n];
	}
	pthread_mutex_lock(&pool->lock);
	struct fp_mag *full = depot_pop(&pool->depot_full);
	if (!full && (full = pool->depot_partial))
		pool->depot_partial = NULL;
	if (!full) {
		pool->exhausted++;
		pthread_mutex_unlock(&pool->lock);
		return NULL;
	}
	pool->depot_bufs -= full->n;
	depot_push(&pool->depot_empty, c->prev);
	pthread_mutex_unlock(&pool->lock);
	c->in_depot_calls++;
	c->prev = c->loaded;
	c->loaded = full;
	return full->rounds[--full->n];
}

/* A buffer of another pool: straight into that pool's depot, under its lock. */
static void put_foreign(struct fp_mbuf *m)
{
	struct fp_pool *pool = m->pool;

	pthread_mutex_lock(&pool->lock);
	depot_add_one(pool, m);
	pthread_mutex_unlock(&pool->lock);
}

/* Slow path of fp_pool_put: the loaded magazine is full, or @m is not this pool's. */
void __fp_pool_put(struct fp_pool_cache *c, struct fp_mbuf *m)
{
	struct fp_pool *pool = c->pool;
	struct fp_mag *tmp;

	if (m->pool != pool) {
		put_foreign(m);
		return;
	}
	if (c->prev->n == 0) {
		tmp = c->loaded;
		c->loaded = c->prev;
		c->prev = tmp;
	} else {
		pthread_mutex_lock(&pool->lock);
		struct fp_mag *empty = depot_pop(&pool->depot_empty);
		assert(empty);
		depot_push(&pool->depot_full, c->prev);
		pool->depot_bufs += c->prev->n;
		pthread_mutex_unlock(&pool->lock);
		c->in_depot_calls++;
		c->prev = c->loaded;
		c->loaded = empty;
	}
	c->loaded->rounds[c->loaded->n++] = m;
}

unsigned fp_pool_get_bulk(struct fp_pool_cache *c, struct fp_mbuf **out, unsigned n)
{
	unsigned got = 0;

	while (got < n) {
		/* Drain the loaded magazine in one go, then let fp_pool_get refill it. */
		struct fp_mag *l = c->loaded;
		unsigned take = l->n < n - got ? l->n : n - got;
		for (unsigned i = 0; i < take; i++) {
			struct fp_mbuf *m = l->rounds[--l->n];
#ifndef NDEBUG
			if (!(m->flags & FP_MBUF_F_FREE))
				__fp_mbuf_check_free(m);
#endif
			fp_mbuf_reset(m, c->pool->headroom);
			out[got++] = m;
		}
		if (got == n || !(out[got] = fp_pool_get(c)))
			break;
		got++;
	}
	return got;
}

void fp_pool_put_bulk(struct fp_pool_cache *c, struct fp_mbuf *const *ms, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		fp_pool_put(c, ms[i]);
}

void __fp_mbuf_check_free(const struct fp_mbuf *m)
{
	fprintf(stderr, "flowplane: mbuf %u of pool %s: %s\n", m->index, m->pool->name,
		m->flags & FP_MBUF_F_FREE ? "freed twice" : "handed out while in use");
	abort();
}
