/* mbuf.h: packet buffers: headroom, data window, chains for scatter-gather, references. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <flowplane/compiler.h>

struct fp_pool;
struct fp_pool_cache;

/* Set while the buffer sits in its pool; catches double free and use after free. */
#define FP_MBUF_F_FREE 0x0001u

/*
 * One packet segment. The header lives apart from the data (in the pool's header array),
 * so a device that hands out buffer addresses (an AF_XDP UMEM offset) maps to its header
 * with one division, and the data area can be a region the device owns.
 *
 * Ownership: an mbuf is owned by one core at a time. refcnt counts the holders on that
 * core (the stack keeping a segment for retransmission while the application reads it,
 * zero-copy); it is not atomic. Handing a buffer to another core goes through a ring,
 * which transfers the references with it.
 *
 * A chain is a list of segments linked by next; nb_segs and pkt_len are valid on the
 * head only.
 */
struct fp_mbuf {
	uint8_t *buf;          /* start of the buffer; headroom begins here */
	uint16_t data_off;     /* first data byte is buf + data_off */
	uint16_t refcnt;
	uint16_t nb_segs;      /* head only */
	uint16_t flags;
	uint32_t data_len;     /* data bytes in this segment */
	uint32_t pkt_len;      /* data bytes in the chain (head only) */
	uint32_t buf_len;      /* bytes at buf */
	uint32_t flow_hash;    /* RSS hash of the packet's flow; 0 when unknown */
	struct fp_mbuf *next;  /* next segment or NULL */
	uint64_t rx_ts_ns;     /* when the device received it; 0 when not received */
	struct fp_pool *pool;  /* where it returns when the last reference goes */
	uint32_t index;        /* position in the pool */
	uint16_t port;         /* device queue it arrived on */
	uint16_t user;         /* free for the layer holding the buffer */
};

static_assert(sizeof(struct fp_mbuf) == FP_CACHE_LINE, "mbuf header is one cache line");
FP_ASSERT_OFFSET(struct fp_mbuf, next, 32);

/* Pointer to the first data byte of this segment. */
static inline uint8_t *fp_mbuf_data(const struct fp_mbuf *m) { return m->buf + m->data_off; }

/* Bytes free in front of the data. */
static inline uint32_t fp_mbuf_headroom(const struct fp_mbuf *m) { return m->data_off; }

/* Bytes free after the data. */
static inline uint32_t fp_mbuf_tailroom(const struct fp_mbuf *m)
{
	return m->buf_len - m->data_off - m->data_len;
}

/* Last segment of a chain. */
static inline struct fp_mbuf *fp_mbuf_last(struct fp_mbuf *m)
{
	while (m->next)
		m = m->next;
	return m;
}

/* Grow the data window by @len bytes in front (for headers). NULL without headroom. */
static inline uint8_t *fp_mbuf_prepend(struct fp_mbuf *m, uint32_t len)
{
	if (fp_unlikely(len > m->data_off))
		return NULL;
	m->data_off = (uint16_t)(m->data_off - len);
	m->data_len += len;
	m->pkt_len += len;
	return fp_mbuf_data(m);
}

/* Grow the chain's last segment by @len bytes at the end; returns where they start. */
static inline uint8_t *fp_mbuf_append(struct fp_mbuf *head, uint32_t len)
{
	struct fp_mbuf *last = fp_mbuf_last(head);
	if (fp_unlikely(len > fp_mbuf_tailroom(last)))
		return NULL;
	uint8_t *p = fp_mbuf_data(last) + last->data_len;
	last->data_len += len;
	head->pkt_len += len;
	return p;
}

/* Drop @len bytes from the front of the head segment (a parsed header). -EINVAL if short. */
static inline int fp_mbuf_adj(struct fp_mbuf *m, uint32_t len)
{
	if (fp_unlikely(len > m->data_len))
		return -EINVAL;
	m->data_off = (uint16_t)(m->data_off + len);
	m->data_len -= len;
	m->pkt_len -= len;
	return 0;
}

/* Drop @len bytes from the end of the last segment (padding, a trailer). -EINVAL if short. */
static inline int fp_mbuf_trim(struct fp_mbuf *head, uint32_t len)
{
	struct fp_mbuf *last = fp_mbuf_last(head);
	if (fp_unlikely(len > last->data_len))
		return -EINVAL;
	last->data_len -= len;
	head->pkt_len -= len;
	return 0;
}

/* Append chain @tail to chain @head. -E2BIG if the chain would exceed 65535 segments. */
int fp_mbuf_chain(struct fp_mbuf *head, struct fp_mbuf *tail);

/* Take one more reference on every segment of the chain (zero-copy hand-off). */
static inline void fp_mbuf_ref(struct fp_mbuf *m)
{
	for (; m; m = m->next)
		m->refcnt++;
}

/*
 * Drop one reference on every segment of the chain; segments whose last reference goes
 * return to their pool through @c (the calling core's cache). Defined in pool.h.
 */
void fp_mbuf_free(struct fp_pool_cache *c, struct fp_mbuf *m);

/* Copy @len bytes starting at chain offset @off into @dst. Returns bytes copied. */
uint32_t fp_mbuf_read(const struct fp_mbuf *m, uint32_t off, void *dst, uint32_t len);
