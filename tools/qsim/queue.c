/* queue.c: the slow paths (growth, release) of qsim's FIFO ring and min-heap. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"

int __qs_fifo_grow(struct qs_fifo *f)
{
	size_t cap = f->cap ? f->cap * 2 : 64;
	struct qs_req *a = malloc(cap * sizeof(*a));

	if (!a)
		return -ENOMEM;
	/* Unwrap the ring into the new array so head is 0 again. */
	for (size_t i = 0; i < f->n; i++)
		a[i] = f->a[(f->head + i) & (f->cap - 1)];
	free(f->a);
	f->a = a;
	f->head = 0;
	f->cap = cap;
	return 0;
}

int __qs_heap_grow(struct qs_heap *h)
{
	size_t cap = h->cap ? h->cap * 2 : 64;
	struct qs_ent *a = realloc(h->a, cap * sizeof(*a));

	if (!a)
		return -ENOMEM;
	h->a = a;
	h->cap = cap;
	return 0;
}

void qs_fifo_free(struct qs_fifo *f)
{
	free(f->a);
	memset(f, 0, sizeof(*f));
}

void qs_heap_free(struct qs_heap *h)
{
	free(h->a);
	memset(h, 0, sizeof(*h));
}
