/* ring.c: ring setup and the multi-producer publication wait (the rings' only slow path). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/ring.h>

static int ring_size_ok(uint32_t size) { return size >= 2 && size <= (1u << 31) && fp_is_pow2(size); }

size_t fp_ring_spsc_bytes(uint32_t size)
{
	return sizeof(struct fp_ring_spsc) + (size_t)size * sizeof(void *);
}

size_t fp_ring_mpsc_bytes(uint32_t size)
{
	return sizeof(struct fp_ring_mpsc) + (size_t)size * sizeof(void *);
}

int fp_ring_spsc_init(struct fp_ring_spsc *r, uint32_t size)
{
	if (!ring_size_ok(size))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->size = size;
	r->mask = size - 1;
	return 0;
}

int fp_ring_mpsc_init(struct fp_ring_mpsc *r, uint32_t size)
{
	if (!ring_size_ok(size))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->size = size;
	r->mask = size - 1;
	return 0;
}

static void *ring_alloc(size_t bytes)
{
	bytes = (bytes + FP_CACHE_LINE - 1) & ~(size_t)(FP_CACHE_LINE - 1);
	return aligned_alloc(FP_CACHE_LINE, bytes);
}

struct fp_ring_spsc *fp_ring_spsc_create(uint32_t size)
{
	if (!ring_size_ok(size)) {
		errno = EINVAL;
		return NULL;
	}
	struct fp_ring_spsc *r = ring_alloc(fp_ring_spsc_bytes(size));
	if (r)
		fp_ring_spsc_init(r, size);
	return r;
}

struct fp_ring_mpsc *fp_ring_mpsc_create(uint32_t size)
{
	if (!ring_size_ok(size)) {
		errno = EINVAL;
		return NULL;
	}
	struct fp_ring_mpsc *r = ring_alloc(fp_ring_mpsc_bytes(size));
	if (r)
		fp_ring_mpsc_init(r, size);
	return r;
}

/*
 * A producer that claimed slots after another must publish after it, or the consumer
 * would read the earlier producer's slots before they are written. If that producer was
 * preempted (more threads than cores: tests, VMs), spinning alone could burn a whole
 * time slice, so yield now and then.
 */
void __fp_ring_mpsc_wait_turn(struct fp_ring_mpsc *r, uint32_t head)
{
	for (unsigned spins = 1; FP_LOAD_ACQ(&r->prod_tail) != head; spins++) {
		if (spins % 1024 == 0)
			sched_yield();
		else
			fp_cpu_relax();
	}
}
