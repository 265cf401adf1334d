/* fuzz_ring.c: ring operation sequences checked against a plain FIFO model. */
#include <stdlib.h>
#include <string.h>

#include <flowplane/ring.h>

#define CHECK(x) do { if (!(x)) abort(); } while (0)
#define MAXQ 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Model: a FIFO of at most @cap tags. */
struct model {
	uintptr_t q[MAXQ];
	unsigned head, n, cap;
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint32_t cap = 2u << (data[0] % 6); /* 2..64 */
	struct fp_ring *s = fp_ring_create(cap); /* fed by the single-producer call */
	struct fp_ring *m = fp_ring_create(cap); /* fed by the multi-producer call */
	struct model mod = { .cap = cap };
	uintptr_t next = 1;

	CHECK(s && m);
	for (size_t i = 1; i < size; i++) {
		unsigned k = (data[i] & 0x3f) + 0u, op = data[i] >> 6;
		void *in[64], *o1[64], *o2[64];
		if (op < 2) { /* enqueue k */
			for (unsigned j = 0; j < k; j++)
				in[j] = (void *)(next + j);
			unsigned want = k < cap - mod.n ? k : cap - mod.n;
			CHECK(fp_ring_sp_enqueue_burst(s, in, k) == want);
			CHECK(fp_ring_mp_enqueue_burst(m, in, k) == want);
			for (unsigned j = 0; j < want; j++)
				mod.q[(mod.head + mod.n + j) % MAXQ] = next + j;
			mod.n += want;
			next += want;
		} else { /* dequeue k */
			unsigned want = k < mod.n ? k : mod.n;
			CHECK(fp_ring_dequeue_burst(s, o1, k) == want);
			CHECK(fp_ring_dequeue_burst(m, o2, k) == want);
			for (unsigned j = 0; j < want; j++) {
				CHECK((uintptr_t)o1[j] == mod.q[mod.head]);
				CHECK((uintptr_t)o2[j] == mod.q[mod.head]);
				mod.head = (mod.head + 1) % MAXQ;
			}
			mod.n -= want;
		}
		CHECK(fp_ring_count(s) == mod.n && fp_ring_count(m) == mod.n);
	}
	free(s);
	free(m);
	return 0;
}
