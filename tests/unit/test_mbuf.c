/* test_mbuf.c: packet buffer windows, chains, references and chain reads. */
#include <string.h>

#include "harness.h"

static void window_ops(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_mbuf *m = fp_pool_get(&tp->cache);

	uint8_t *p = fp_mbuf_append(m, 100);
	assert_ptr_equal(p, m->buf + 128);
	memset(p, 0xab, 100);
	assert_int_equal(m->pkt_len, 100);
	assert_int_equal(fp_mbuf_tailroom(m), 2048 - 128 - 100);

	uint8_t *h = fp_mbuf_prepend(m, 14);
	assert_ptr_equal(h, m->buf + 114);
	assert_int_equal(m->data_len, 114);
	assert_null(fp_mbuf_prepend(m, 115)); /* only 114 bytes of headroom left */
	assert_int_equal(m->data_len, 114);   /* a refused prepend changes nothing */

	assert_int_equal(fp_mbuf_adj(m, 14), 0);
	assert_ptr_equal(fp_mbuf_data(m), p);
	assert_int_equal(fp_mbuf_trim(m, 10), 0);
	assert_int_equal(m->pkt_len, 90);
	assert_int_equal(fp_mbuf_adj(m, 91), -EINVAL);
	assert_int_equal(fp_mbuf_trim(m, 91), -EINVAL);
	assert_null(fp_mbuf_append(m, fp_mbuf_tailroom(m) + 1));
	assert_non_null(fp_mbuf_append(m, fp_mbuf_tailroom(m)));
	fp_mbuf_free(&tp->cache, m);
}

/* Build a chain of segments holding bytes 0, 1, 2, ... of lengths @lens. */
static struct fp_mbuf *make_chain(struct fp_test_pool *tp, const uint32_t *lens, int n)
{
	struct fp_mbuf *head = NULL;
	uint8_t v = 0;

	for (int i = 0; i < n; i++) {
		struct fp_mbuf *m = fp_pool_get(&tp->cache);
		uint8_t *p = fp_mbuf_append(m, lens[i]);
		for (uint32_t j = 0; j < lens[i]; j++)
			p[j] = v++;
		if (!head)
			head = m;
		else
			assert_int_equal(fp_mbuf_chain(head, m), 0);
	}
	return head;
}

static void chain_and_read(void **state)
{
	struct fp_test_pool *tp = *state;
	const uint32_t lens[] = { 10, 1, 0, 200, 45 };
	struct fp_mbuf *c = make_chain(tp, lens, 5);
	uint8_t out[256];

	assert_int_equal(c->nb_segs, 5);
	assert_int_equal(c->pkt_len, 256);
	assert_int_equal(fp_mbuf_read(c, 0, out, 256), 256);
	for (int i = 0; i < 256; i++)
		assert_int_equal(out[i], i);
	/* Reads across segment boundaries, and past the end. */
	assert_int_equal(fp_mbuf_read(c, 9, out, 3), 3);
	assert_memory_equal(out, ((uint8_t[]){ 9, 10, 11 }), 3);
	assert_int_equal(fp_mbuf_read(c, 250, out, 100), 6);
	assert_int_equal(fp_mbuf_read(c, 300, out, 10), 0);
	/* Append and trim act on the last segment, the head keeps the total. */
	assert_non_null(fp_mbuf_append(c, 4));
	assert_int_equal(fp_mbuf_last(c)->data_len, 49);
	assert_int_equal(c->pkt_len, 260);
	assert_int_equal(fp_mbuf_trim(c, 4), 0);
	assert_int_equal(c->pkt_len, 256);
	fp_mbuf_free(&tp->cache, c);
}

/* Zero-copy hand-off: the stack keeps a reference while the application holds another;
 * the buffers return only when both let go. */
static void references(void **state)
{
	struct fp_test_pool *tp = *state;
	const uint32_t lens[] = { 100, 100 };
	struct fp_mbuf *c = make_chain(tp, lens, 2);

	fp_mbuf_ref(c);
	assert_int_equal(c->refcnt, 2);
	assert_int_equal(c->next->refcnt, 2);
	fp_mbuf_free(&tp->cache, c);
	assert_int_equal(fp_test_pool_leaked(tp), 2);
	assert_int_equal(c->refcnt, 1);
	fp_mbuf_free(&tp->cache, c);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
}

/* A segment shared by two chains (a header in front of retained payload) is freed once. */
static void shared_segment(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_mbuf *payload = fp_pool_get(&tp->cache);
	struct fp_mbuf *hdr = fp_pool_get(&tp->cache);

	fp_mbuf_append(payload, 1000);
	fp_mbuf_append(hdr, 54);
	fp_mbuf_ref(payload);               /* the retransmit queue keeps one */
	assert_int_equal(fp_mbuf_chain(hdr, payload), 0);
	assert_int_equal(hdr->pkt_len, 1054);
	fp_mbuf_free(&tp->cache, hdr);      /* transmit completed */
	assert_int_equal(fp_test_pool_leaked(tp), 1);
	assert_int_equal(payload->refcnt, 1);
	fp_mbuf_free(&tp->cache, payload);  /* acknowledged */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(window_ops, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(chain_and_read, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(references, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(shared_segment, fp_test_pool_setup, fp_test_pool_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
