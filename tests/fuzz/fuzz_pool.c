/* fuzz_pool.c: buffer pool and mbuf chain operations checked against an occupancy model. */
#include <stdlib.h>
#include <string.h>

#include <flowplane/pool.h>

#define CHECK(x) do { if (!(x)) abort(); } while (0)
#define NBUF 48
#define SLOTS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Count the distinct buffers held across the slots (a segment may be in two chains). */
static unsigned held(struct fp_mbuf **slot)
{
	uint8_t seen[NBUF] = { 0 };
	unsigned n = 0;
	for (int i = 0; i < SLOTS; i++)
		for (struct fp_mbuf *m = slot[i]; m; m = m->next)
			if (!seen[m->index]++)
				n++;
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fp_pool_params p = { .name = "fuzz", .n_bufs = NBUF, .buf_size = 256,
				    .headroom = 32, .mag_size = 4, .max_caches = 2 };
	struct fp_pool *pool = fp_pool_create(&p);
	struct fp_pool_cache c[2];
	struct fp_mbuf *slot[SLOTS] = { 0 };

	CHECK(pool && !fp_pool_cache_init(&c[0], pool) && !fp_pool_cache_init(&c[1], pool));
	for (size_t i = 0; i + 1 < size; i += 2) {
		unsigned op = data[i] % 6, s = data[i + 1] % SLOTS, core = data[i] >> 7;
		unsigned t = (data[i + 1] >> 4) % SLOTS;
		struct fp_mbuf *m;
		switch (op) {
		case 0: /* get into an empty slot */
			if (!slot[s] && (m = fp_pool_get(&c[core]))) {
				CHECK(m->refcnt == 1 && m->data_len == 0);
				fp_mbuf_append(m, data[i + 1]);
				slot[s] = m;
			}
			break;
		case 1: /* free a chain on either core */
			if (slot[s]) {
				fp_mbuf_free(&c[core], slot[s]);
				slot[s] = NULL;
			}
			break;
		case 2: /* chain slot t onto slot s: ownership moves with it */
			if (slot[s] && slot[t] && s != t) {
				CHECK(fp_mbuf_chain(slot[s], slot[t]) == 0);
				slot[t] = NULL;
			}
			break;
		case 3: /* headers on and off */
			if (slot[s] && fp_mbuf_prepend(slot[s], 14))
				CHECK(fp_mbuf_adj(slot[s], 14) == 0);
			break;
		case 4: { /* bulk get and put back */
			struct fp_mbuf *ms[8];
			unsigned n = fp_pool_get_bulk(&c[core], ms, 1 + s % 8);
			for (unsigned j = 0; j < n; j++)
				fp_mbuf_free(&c[!core], ms[j]);
			break;
		}
		default: { /* copy a chain out and compare lengths (a chain of up to NBUF
			    * segments can hold more than out[]: read copies at most that) */
			uint8_t out[4096];
			if (slot[s]) {
				uint32_t want = slot[s]->pkt_len < sizeof(out) ? slot[s]->pkt_len
									  : sizeof(out);
				CHECK(fp_mbuf_read(slot[s], 0, out, sizeof(out)) == want);
			}
		}
		}
		CHECK(fp_pool_in_use(pool) == held(slot));
	}
	for (int i = 0; i < SLOTS; i++)
		fp_mbuf_free(&c[0], slot[i]);
	fp_pool_cache_flush(&c[0]);
	fp_pool_cache_flush(&c[1]);
	CHECK(fp_pool_in_use(pool) == 0);
	fp_pool_destroy(pool);
	return 0;
}
