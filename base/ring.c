/* ring.c: ring setup and the multi-producer publication wait (the ring's only slow path). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/ring.h>

static int ring_size_ok(uint32_t size) { return size >= 2 && size <= (1u << 31) && fp_is_pow2(size); }

size_t fp_ring_bytes(uint32_t size) { return sizeof(struct fp_ring) + (size_t)size * sizeof(void *); }

int fp_ring_init(struct fp_ring *r, uint32_t size)
{
	if (!ring_size_ok(size))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->size = size;
	r->mask = size - 1;
	return 0;
}

struct fp_ring *fp_ring_create(uint32_t size)
{
	if (!ring_size_ok(size)) {
		errno = EINVAL;
		return NULL;
	}
	size_t bytes = (fp_ring_bytes(size) + FP_CACHE_LINE - 1) & ~(size_t)(FP_CACHE_LINE - 1);
	struct fp_ring *r = aligned_alloc(FP_CACHE_LINE, bytes);
	if (r)
		fp_ring_init(r, size);
	return r;
}

/*
 * A producer that claimed slots after another must publish after it, or the consumer
 * would read the earlier producer's slots before they are written. If that producer was
 * preempted (more threads than cores: tests, VMs), spinning alone could burn a whole time
 * slice, so yield now and then.
 */
void __fp_ring_mp_wait_turn(struct fp_ring *r, uint32_t head)
{
	for (unsigned spins = 1; FP_LOAD_ACQ(&r->prod_tail) != head; spins++) {
		if (spins % 1024 == 0)
			sched_yield();
		else
			fp_cpu_relax();
	}
}
