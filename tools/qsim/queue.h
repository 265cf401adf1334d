/* queue.h: the two containers qsim's event-driven engines need: a FIFO ring and a min-heap. */
#pragma once

#include <stddef.h>

#include "qsim.h"

/* A growable FIFO of requests (a ring whose capacity is a power of two). */
struct qs_fifo {
	struct qs_req *a;
	size_t head, n, cap;
};

/* A heap entry: a request keyed by a time (steal: completion) or virtual time (PS). */
struct qs_ent {
	double key;
	unsigned id; /* the server, where the engine needs one */
	struct qs_req req;
};

struct qs_heap {
	struct qs_ent *a;
	size_t n, cap;
};

/* Grow @f; 0 or -ENOMEM. */
int __qs_fifo_grow(struct qs_fifo *f);
/* Grow @h; 0 or -ENOMEM. */
int __qs_heap_grow(struct qs_heap *h);
void qs_fifo_free(struct qs_fifo *f);
void qs_heap_free(struct qs_heap *h);

/* Append @r; 0 or -ENOMEM. */
static inline int qs_fifo_push(struct qs_fifo *f, const struct qs_req *r)
{
	if (f->n == f->cap && __qs_fifo_grow(f))
		return -ENOMEM;
	f->a[(f->head + f->n) & (f->cap - 1)] = *r;
	f->n++;
	return 0;
}

/* The oldest request; the FIFO must not be empty. */
static inline const struct qs_req *qs_fifo_front(const struct qs_fifo *f)
{
	return &f->a[f->head];
}

/* Remove and return the oldest request; the FIFO must not be empty. */
static inline struct qs_req qs_fifo_pop(struct qs_fifo *f)
{
	struct qs_req r = f->a[f->head];
	f->head = (f->head + 1) & (f->cap - 1);
	f->n--;
	return r;
}

/* Insert (@key, @id, @r); 0 or -ENOMEM. */
static inline int qs_heap_push(struct qs_heap *h, double key, unsigned id,
			       const struct qs_req *r)
{
	if (h->n == h->cap && __qs_heap_grow(h))
		return -ENOMEM;
	size_t i = h->n++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h->a[p].key <= key)
			break;
		h->a[i] = h->a[p];
		i = p;
	}
	h->a[i] = (struct qs_ent){ .key = key, .id = id, .req = *r };
	return 0;
}

/* Remove the entry with the smallest key; the heap must not be empty. */
static inline void qs_heap_pop(struct qs_heap *h)
{
	struct qs_ent x = h->a[--h->n];
	size_t i = 0, n = h->n;

	if (n == 0)
		return;
	for (;;) {
		size_t l = 2 * i + 1, m;
		if (l >= n)
			break;
		m = (l + 1 < n && h->a[l + 1].key < h->a[l].key) ? l + 1 : l;
		if (h->a[m].key >= x.key)
			break;
		h->a[i] = h->a[m];
		i = m;
	}
	h->a[i] = x;
}
