/* ring.h: lock-free pointer ring, single consumer, single- or multi-producer, burst I/O. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <flowplane/compiler.h>

/*
 * One ring type, two ways to produce (DPDK's design): a ring used by one producer takes
 * fp_ring_sp_enqueue_burst (no atomic read-modify-write); a ring shared by producers takes
 * fp_ring_mp_enqueue_burst (claim slots with one CAS, publish in claim order). Never mix the
 * two on one ring. There is always a single consumer.
 *
 * Indices run free (uint32, wrapping) and are masked on use, so a ring of size S holds S
 * items and full/empty need no spare slot. Each side keeps a cached copy of the other
 * side's index and rereads the shared one only when the cache says full (or empty), so the
 * common case touches no line the other core writes.
 *
 * Burst calls move as many items as fit (up to n) and return the count: never wait to fill
 * a batch.
 */
struct fp_ring {
	/* written by producers */
	uint32_t prod_head fp_aligned_cache; /* next slot to claim */
	uint32_t prod_tail;                  /* slots before this are published */
	uint32_t prod_cons_seen;             /* producer's cached cons (single producer) */
	/* written by the consumer */
	uint32_t cons fp_aligned_cache;
	uint32_t cons_prod_seen;             /* consumer's cached prod_tail */
	/* read-only after init */
	uint32_t size fp_aligned_cache;
	uint32_t mask;
	void *slots[] fp_aligned_cache;
};

FP_ASSERT_OFFSET(struct fp_ring, cons, FP_CACHE_LINE);
FP_ASSERT_OFFSET(struct fp_ring, size, 2 * FP_CACHE_LINE);
FP_ASSERT_OFFSET(struct fp_ring, slots, 3 * FP_CACHE_LINE);

/* Bytes needed for a ring of @size slots, for placing one in shared memory. */
size_t fp_ring_bytes(uint32_t size);

/* Initialise a ring in memory of fp_ring_bytes(size), cache aligned. -EINVAL unless @size is
 * a power of two between 2 and 2^31. */
int fp_ring_init(struct fp_ring *r, uint32_t size);

/* Allocate and initialise; NULL with errno set. Free with free(). */
struct fp_ring *fp_ring_create(uint32_t size);

static inline void fp_cpu_relax(void) { __builtin_ia32_pause(); }

#define FP_LOAD_ACQ(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define FP_LOAD_RLX(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define FP_STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* Enqueue up to @n pointers from the ring's only producer; returns how many. */
static inline unsigned fp_ring_sp_enqueue_burst(struct fp_ring *r, void *const *objs, unsigned n)
{
	uint32_t prod = r->prod_tail;
	uint32_t free_slots = r->size - (prod - r->prod_cons_seen);

	if (free_slots < n) {
		r->prod_cons_seen = FP_LOAD_ACQ(&r->cons);
		free_slots = r->size - (prod - r->prod_cons_seen);
		if (n > free_slots)
			n = free_slots;
	}
	for (unsigned i = 0; i < n; i++)
		r->slots[(prod + i) & r->mask] = objs[i];
	r->prod_head = prod + n;
	FP_STORE_REL(&r->prod_tail, prod + n);
	return n;
}

/* Wait until producers that claimed slots before @head have published theirs. */
void __fp_ring_mp_wait_turn(struct fp_ring *r, uint32_t head);

/* Enqueue up to @n pointers from any of several producer threads; returns how many. */
static inline unsigned fp_ring_mp_enqueue_burst(struct fp_ring *r, void *const *objs, unsigned n)
{
	uint32_t head = FP_LOAD_RLX(&r->prod_head), next;

	do {
		uint32_t free_slots = r->size - (head - FP_LOAD_ACQ(&r->cons));
		if (n > free_slots)
			n = free_slots;
		if (n == 0)
			return 0;
		next = head + n;
	} while (!__atomic_compare_exchange_n(&r->prod_head, &head, next, 1, __ATOMIC_ACQUIRE,
					      __ATOMIC_RELAXED));
	for (unsigned i = 0; i < n; i++)
		r->slots[(head + i) & r->mask] = objs[i];
	if (fp_unlikely(FP_LOAD_RLX(&r->prod_tail) != head))
		__fp_ring_mp_wait_turn(r, head);
	FP_STORE_REL(&r->prod_tail, next);
	return n;
}

/* The consumer: copy up to @n items from the head without taking them; fp_ring_skip()
 * then takes the first @n of them. */
static inline unsigned fp_ring_peek_burst(struct fp_ring *r, void **objs, unsigned n)
{
	uint32_t cons = r->cons;
	uint32_t avail = r->cons_prod_seen - cons;

	if (avail < n) {
		r->cons_prod_seen = FP_LOAD_ACQ(&r->prod_tail);
		avail = r->cons_prod_seen - cons;
		if (n > avail)
			n = avail;
	}
	for (unsigned i = 0; i < n; i++)
		objs[i] = r->slots[(cons + i) & r->mask];
	return n;
}

static inline void fp_ring_skip(struct fp_ring *r, unsigned n)
{
	FP_STORE_REL(&r->cons, r->cons + n);
}

/* Dequeue up to @n pointers into @objs; returns how many. Consumer side only. */
static inline unsigned fp_ring_dequeue_burst(struct fp_ring *r, void **objs, unsigned n)
{
	n = fp_ring_peek_burst(r, objs, n);
	fp_ring_skip(r, n);
	return n;
}

/* Items in the ring as seen now (exact only when both sides are quiet). */
static inline uint32_t fp_ring_count(const struct fp_ring *r)
{
	return FP_LOAD_ACQ(&r->prod_tail) - FP_LOAD_ACQ(&r->cons);
}
