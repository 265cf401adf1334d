/* mbuf.c: chain operations on packet buffers (the out-of-line parts of mbuf.h). */
#include <string.h>

#include <flowplane/mbuf.h>
#include <flowplane/pool.h>

int fp_mbuf_chain(struct fp_mbuf *head, struct fp_mbuf *tail)
{
	if ((unsigned)head->nb_segs + tail->nb_segs > UINT16_MAX)
		return -E2BIG;
	fp_mbuf_last(head)->next = tail;
	head->nb_segs = (uint16_t)(head->nb_segs + tail->nb_segs);
	head->pkt_len += tail->pkt_len;
	return 0;
}

void fp_mbuf_free(struct fp_pool_cache *c, struct fp_mbuf *m)
{
	while (m) {
		struct fp_mbuf *next = m->next;
		assert(m->refcnt > 0);
		if (--m->refcnt == 0) {
			m->next = NULL;
			fp_pool_put(c, m);
		}
		m = next;
	}
}

uint32_t fp_mbuf_read(const struct fp_mbuf *m, uint32_t off, void *dst, uint32_t len)
{
	uint8_t *out = dst;
	uint32_t done = 0;

	for (; m && done < len; m = m->next) {
		if (off >= m->data_len) {
			off -= m->data_len;
			continue;
		}
		uint32_t n = m->data_len - off;
		if (n > len - done)
			n = len - done;
		memcpy(out + done, fp_mbuf_data(m) + off, n);
		done += n;
		off = 0;
	}
	return done;
}
