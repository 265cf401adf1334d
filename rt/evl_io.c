/* evl_io.c: evl's bytes: zero-copy reads, copy-aside and held input (back-pressure), output chunks and sendv. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/log.h>

#include "evl_defs.h"

/*
 * Input. A RECV is shown to @read in place (the receive buffer itself, zero copy); only
 * what read leaves unconsumed is copied aside, and the next RECV is appended to it, so a
 * parser sees its pending request in one contiguous run. Shown bytes, consumed or copied,
 * go back to the transport with recv_done at the flush.
 *
 * Back-pressure is TCP's flow control carried through to the application, and what
 * decides it is what read consumes. A connection is full when its copy-aside holds rx_max
 * (max_unread) bytes or more. A RECV for a full connection, or behind one held already, is
 * held: neither shown nor released, so the transport's receive window closes and TCP
 * stops the peer (what is held stays in the transport's buffers, bounded by its window).
 * A read that left input while the output was full (max_pending reached, or a write
 * refused since the output last moved) is taken to wait for output room: when the output
 * moves (a SENDV's return took bytes) the copy-aside is shown again, then the held RECVs
 * in order while the connection is not full, and they are released as they are taken.
 * fp_evl_read_again() does the same for an application that stopped reading for a reason
 * of its own. The peer's EOF waits behind held input, so nothing the peer sent before its
 * FIN is lost to back-pressure.
 *
 * A full output alone does not hold input: an application that consumes what it reads
 * without writing (a client draining the echo of what it sends) must go on receiving
 * while its output waits for the peer, or two such peers stop each other for good (each
 * one's window shut by the other's full output).
 *
 * Output lives in fixed-size chunks that are only ever appended to, so memory never moves
 * under a queued sendv (its iov covers bytes no later write moves). One sendv per
 * connection is in flight at a time; what the window did not take is offered again after
 * a SENT. A sendv queued and not yet executed (the round's, or a timer pass's) is extended
 * in place by later writes, so every write of a pass leaves with it.
 *
 * The iovs and UDP datagrams of queued calls live in a per-worker arena that is recycled
 * only when the call array is empty, i.e. when everything that pointed into it has
 * executed.
 */

#define EVL_FREE_CHUNKS   256u                    /* chunks a worker keeps for reuse (4 MiB) */
#define EVL_SENDV_IOV     64u                     /* chunks one sendv offers (~1 MiB) */
#define EVL_SENDV_IOV_MIN 4u                      /* iov entries a new sendv has room for */
#define EVL_RX_KEEP       (64u << 10)             /* larger idle copy-aside buffers are freed */
#define EVL_HOLD_INIT     8u                      /* held RECVs before the ring grows */
#define EVL_ARENA_BLOCK   (64u << 10)

/* ---- arena: iovs and datagrams of queued calls ---- */

void evl_arena_reset(struct fp_evl *evl)
{
	for (struct evl_block *b = evl->arena; b; b = b->next)
		b->used = 0;
	evl->arena_cur = evl->arena;
}

void evl_arena_free(struct fp_evl *evl)
{
	struct evl_block *b;

	while ((b = evl->arena)) {
		evl->arena = b->next;
		free(b);
	}
	evl->arena_cur = NULL;
}

/* @size bytes that stay valid until the call array is next empty; NULL on ENOMEM. */
static void *evl_arena_alloc(struct fp_evl *evl, size_t size)
{
	struct evl_block *b, **link;

	/* Outside the handler, an empty call array means nothing points in here any more. */
	if (!evl->in_handle && evl->ctx->n_calls == 0)
		evl_arena_reset(evl);
	b = evl->arena_cur;
	size = (size + 15u) & ~(size_t)15u;
	while (b && b->size - b->used < size)
		b = b->next;
	if (!b) {
		size_t bsize = size > EVL_ARENA_BLOCK ? size : EVL_ARENA_BLOCK;

		b = malloc(sizeof(*b) + bsize);
		if (!b)
			return NULL;
		b->next = NULL;
		b->size = bsize;
		b->used = 0;
		for (link = &evl->arena; *link; link = &(*link)->next)
			;
		*link = b;
	}
	evl->arena_cur = b;
	b->used += size;
	return b->data + b->used - size;
}

/* ---- output chunks ---- */

static struct evl_chunk *evl_chunk_get(struct fp_evl *evl)
{
	struct evl_chunk *ch = evl->free_chunks;

	if (ch) {
		evl->free_chunks = ch->next;
		evl->n_free_chunks--;
	} else if (!(ch = malloc(EVL_CHUNK_BYTES))) {
		return NULL;
	}
	ch->next = NULL;
	ch->len = 0;
	ch->ref = 0;
	return ch;
}

/* A reference chunk: the header and a pointer, not a whole chunk. */
#define EVL_REF_CHUNK_BYTES (sizeof(struct evl_chunk) + sizeof(const uint8_t *))

static struct evl_chunk *evl_ref_chunk(const uint8_t *p, uint32_t len)
{
	struct evl_chunk *ch = malloc(EVL_REF_CHUNK_BYTES);

	if (ch) {
		ch->next = NULL;
		ch->len = len;
		ch->ref = 1;
		memcpy(ch->data, &p, sizeof(p));
	}
	return ch;
}

/* The bytes a chunk holds or names. */
static const uint8_t *evl_chunk_bytes(const struct evl_chunk *ch)
{
	const uint8_t *p;

	if (!ch->ref)
		return ch->data;
	memcpy(&p, ch->data, sizeof(p));
	return p;
}

static void evl_chunk_put(struct fp_evl *evl, struct evl_chunk *ch)
{
	if (ch->ref) {
		free(ch);
		return;
	}
	if (evl->n_free_chunks >= EVL_FREE_CHUNKS) {
		free(ch);
		evl->freed_since_trim += EVL_CHUNK_BYTES;
		return;
	}
	ch->next = evl->free_chunks;
	evl->free_chunks = ch;
	evl->n_free_chunks++;
}

void evl_chunks_free(struct fp_evl *evl)
{
	struct evl_chunk *ch;

	while ((ch = evl->free_chunks)) {
		evl->free_chunks = ch->next;
		free(ch);
	}
	evl->n_free_chunks = 0;
}

size_t evl_out_held(const struct fp_evl_conn *c)
{
	size_t n = 0;

	for (const struct evl_chunk *ch = c->head; ch; ch = ch->next)
		if (!ch->ref)
			n += ch->len - (ch == c->head ? c->head_off : 0);
	return n;
}

void evl_conn_io_free(struct fp_evl_conn *c)
{
	struct evl_chunk *ch, *next;

	evl_out_sub(c, evl_out_held(c));
	for (ch = c->head; ch; ch = next) {
		next = ch->next;
		evl_chunk_put(c->evl, ch);
	}
	c->head = c->tail = NULL;
	c->pending = 0;
	free(c->rx);
	free(c->hold);
	c->rx = NULL;
	c->hold = NULL;
}

/* The transport took @n bytes of @c's output: drop them, and the chunks they emptied. */
static void evl_out_advance(struct fp_evl_conn *c, size_t n)
{
	struct evl_chunk *ch;

	while (n && (ch = c->head)) {
		uint32_t avail = ch->len - c->head_off;
		uint32_t take = n < avail ? (uint32_t)n : avail;

		c->head_off += take;
		c->pending -= take;
		if (!ch->ref)
			evl_out_sub(c, take);   /* a reference holds no memory */
		n -= take;
		if (c->head_off == ch->len) {
			c->head = ch->next;
			if (!c->head)
				c->tail = NULL;
			c->head_off = 0;
			evl_chunk_put(c->evl, ch);
		}
	}
}

/* Append @len bytes to @c's chunks; all or nothing (-ENOBUFS when a chunk is short). */
static int evl_out_append(struct fp_evl_conn *c, const struct iovec *iov, unsigned niov,
			  size_t len)
{
	struct fp_evl *evl = c->evl;
	struct evl_chunk *first = NULL, **link = &first, *ch;
	bool tail_open = c->tail && !c->tail->ref;
	size_t room = tail_open ? EVL_CHUNK_DATA - c->tail->len : 0;

	/* Get every chunk first, so that a failure leaves the queue as it was. */
	for (size_t need = len > room ? len - room : 0; need;
	     need -= need < EVL_CHUNK_DATA ? need : EVL_CHUNK_DATA) {
		if (!(*link = evl_chunk_get(evl))) {
			while ((ch = first)) {
				first = ch->next;
				evl_chunk_put(evl, ch);
			}
			return -ENOBUFS;
		}
		link = &(*link)->next;
	}
	if (c->tail)
		c->tail->next = first;
	else
		c->head = first;
	ch = tail_open ? c->tail : first;
	for (unsigned i = 0; i < niov; i++) {
		const uint8_t *p = iov[i].iov_base;

		for (size_t left = iov[i].iov_len; left; ) {
			uint32_t n = EVL_CHUNK_DATA - ch->len;

			if (!n) {
				ch = ch->next;
				continue;
			}
			if (n > left)
				n = (uint32_t)left;
			memcpy(ch->data + ch->len, p, n);
			ch->len += n;
			p += n;
			left -= n;
			c->tail = ch;
		}
	}
	c->pending += len;
	evl_out_add(c, len);
	return 0;
}

/* ---- sendv ---- */

/* The sendv @c queued that the transport has not executed yet, or NULL. The call array
 * holds only unexecuted calls, and a connection has one sendv in flight at most, so a
 * SENDV with @c's cookie at @c's slot is that one. */
static struct fp_call *evl_queued_sendv(const struct fp_evl_conn *c)
{
	const struct fp_ctx *ctx = c->evl->ctx;
	struct fp_call *k;

	if (!c->sendv_inflight || c->sendv_slot >= ctx->n_calls)
		return NULL;
	k = &ctx->calls[c->sendv_slot];
	return k->type == FP_CALL_SENDV && k->cookie == (uint64_t)(uintptr_t)c ? k : NULL;
}

static bool evl_can_send(const struct fp_evl_conn *c)
{
	return c->state == EVL_OPEN && c->pending && !c->sendv_inflight && !c->blocked;
}

/* Chunks one sendv over @c's output covers (at most EVL_SENDV_IOV). */
static unsigned evl_out_chunks(const struct fp_evl_conn *c)
{
	unsigned n = 0;

	for (const struct evl_chunk *ch = c->head; ch && n < EVL_SENDV_IOV; ch = ch->next)
		n++;
	return n;
}

/* Describe the first @n chunks of @c's output in @iov; returns their bytes. */
static size_t evl_iov_fill(const struct fp_evl_conn *c, struct iovec *iov, unsigned n)
{
	const struct evl_chunk *ch = c->head;
	size_t total = 0;

	for (unsigned i = 0; i < n; i++, ch = ch->next) {
		uint32_t off = i == 0 ? c->head_off : 0;

		iov[i].iov_base = (void *)(uintptr_t)(evl_chunk_bytes(ch) + off);
		iov[i].iov_len = ch->len - off;
		total += ch->len - off;
	}
	return total;
}

void evl_send(struct fp_evl_conn *c)
{
	struct fp_call *k = evl_queued_sendv(c);
	struct fp_ctx *ctx = c->evl->ctx;
	struct iovec *iov;
	unsigned n, cap;

	if (!k && !evl_can_send(c))
		return;
	n = evl_out_chunks(c);
	if (k && n <= c->iov_cap) {
		iov = (struct iovec *)(uintptr_t)k->iov;   /* ours, in the arena */
	} else {
		for (cap = EVL_SENDV_IOV_MIN; cap < n; cap *= 2)
			;
		if (!(iov = evl_arena_alloc(c->evl, cap * sizeof(*iov)))) {
			log_warn("evl: out of memory for a sendv; retrying next round");
			return;         /* a queued one still goes, as it was */
		}
		c->iov_cap = (uint8_t)cap;
	}
	c->offered = evl_iov_fill(c, iov, n);
	if (k) {
		k->iov = iov;
		k->iovcnt = (uint16_t)n;
		return;
	}
	fp_sendv(ctx, c->flow, (uint64_t)(uintptr_t)c, iov, n);
	c->sendv_slot = ctx->n_calls - 1;
	c->inflight++;
	c->sendv_inflight = true;
}

void evl_ret_sendv(struct fp_evl_conn *c, int64_t ret)
{
	const struct fp_evl_ops *ops = c->evl->ops;

	c->sendv_inflight = false;
	if (c->state == EVL_RELEASED)
		return;
	if (ret == -ENOBUFS) {          /* the transport is short of buffers: offer again */
		evl_mark_dirty(c);
		return;
	}
	if (ret < 0) {
		evl_fail(c, (int)ret, FP_CALL_CLOSE);
		return;
	}
	if ((size_t)ret > c->offered)
		ret = (int64_t)c->offered;
	evl_out_advance(c, (size_t)ret);
	if ((size_t)ret < c->offered)
		c->blocked = true;
	if (ret > 0) {
		/* The output moved: input that waited for room goes on at the flush. */
		c->out_full = false;
		if (c->hold_n || c->rx_paused)
			c->rx_again = true;
	}
	if (!c->pending && !c->app_gone && ops->drained)
		ops->drained(c);
	if (c->state == EVL_OPEN && (c->pending || c->closing || c->rx_again))
		evl_mark_dirty(c);
}

/* Queue a reference to @len bytes at @p (in pieces of at most 1 GB); all or nothing. */
static int evl_out_append_ref(struct fp_evl_conn *c, const uint8_t *p, size_t len)
{
	struct evl_chunk *first = NULL, *last = NULL, *ch;
	size_t total = len;

	for (size_t k; len; p += k, len -= k) {
		k = len < (1u << 30) ? len : (1u << 30);
		if (!(ch = evl_ref_chunk(p, (uint32_t)k))) {
			while ((ch = first)) {
				first = ch->next;
				free(ch);
			}
			return -ENOBUFS;
		}
		if (last)
			last->next = ch;
		else
			first = ch;
		last = ch;
	}
	if (c->tail)
		c->tail->next = first;
	else
		c->head = first;
	c->tail = last;
	c->pending += total;
	return 0;
}

/* fp_evl_write, fp_evl_writev and fp_evl_write_ref: the checks, then the copy or the
 * reference (of iov[0]: a reference is written one piece at a time). */
static int evl_write(struct fp_evl_conn *c, const struct iovec *iov, unsigned niov, bool ref)
{
	struct fp_evl *evl = c->evl;
	size_t len = 0;
	int rc;

	if (c->state == EVL_RELEASED || c->closing || c->app_gone)
		return -EPIPE;
	for (unsigned i = 0; i < niov; i++) {
		if (iov[i].iov_len > SIZE_MAX - len)
			return -ENOBUFS;
		len += iov[i].iov_len;
	}
	if (c->pending > evl->max_pending || len > evl->max_pending - c->pending) {
		/* Full: what read leaves now is shown again when the output moves (a write
		 * larger than max_pending on an empty output can never fit, and waits for
		 * nothing). */
		c->out_full = c->pending > 0;
		return -ENOBUFS;
	}
	if (!len)
		return 0;
	/* Past the worker's share of the output budget, a connection whose output is not
	 * draining gets no more (it stops reading, as memcached's does); one whose output is
	 * empty may still have one write, so a client that reads is always served. A vector
	 * is judged as its pieces written one after the other would be: only a first piece
	 * to an empty output is exempt, so the whole must fit unless it is that piece. */
	bool exempt = !c->pending && (niov == 0 || len == iov[0].iov_len);

	if (!ref && evl->out_budget && !exempt &&
	    evl_out_total(c->home) + len > evl->out_budget) {
		c->out_full = true;
		evl->out_refused++;
		return -ENOBUFS;
	}
	if ((rc = ref ? evl_out_append_ref(c, iov[0].iov_base, len)
		      : evl_out_append(c, iov, niov, len))) {
		c->out_full = c->pending > 0;
		return rc;
	}
	evl_mark_dirty(c);
	if (!evl->in_handle)
		evl_flush_dirty(evl);   /* from a timer: executed right after the timer pass */
	return 0;
}

int fp_evl_write(struct fp_evl_conn *c, const void *data, size_t len)
{
	struct iovec v = { (void *)(uintptr_t)data, len };

	return evl_write(c, &v, 1, false);
}

int fp_evl_writev(struct fp_evl_conn *c, const struct iovec *iov, unsigned n)
{
	return evl_write(c, iov, n, false);
}

int fp_evl_write_ref(struct fp_evl_conn *c, const void *data, size_t len)
{
	struct iovec v = { (void *)(uintptr_t)data, len };

	return evl_write(c, &v, 1, true);
}

size_t fp_evl_pending(const struct fp_evl_conn *c) { return c->pending; }

size_t fp_evl_room(const struct fp_evl_conn *c)
{
	const struct fp_evl *evl = c->evl;
	size_t room = c->pending < evl->max_pending ? evl->max_pending - c->pending : 0;

	if (evl->out_budget && c->pending) {
		size_t total = evl_out_total(c->home);
		size_t left = total < evl->out_budget ? evl->out_budget - total : 0;
		room = room < left ? room : left;
	}
	return room;
}

/* ---- input ---- */

static bool evl_reading(const struct fp_evl_conn *c)
{
	return !c->app_gone && c->state == EVL_OPEN;
}

static bool evl_out_is_full(const struct fp_evl_conn *c)
{
	return c->out_full || c->pending >= c->evl->max_pending;
}

/* New input must wait (be held): read has left too much unconsumed. */
static bool evl_rx_full(const struct fp_evl_conn *c)
{
	return c->rx_len >= c->evl->rx_max;
}

bool evl_rx_waiting(const struct fp_evl_conn *c)
{
	return c->hold_n || (c->rx_len && c->rx_paused);
}

/* Show @data to the application until it stops consuming; returns bytes consumed. */
static size_t evl_feed(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t off = 0;

	while (off < len && evl_reading(c)) {
		size_t n = c->evl->ops->read(c, data + off, len - off);

		if (n == 0)
			break;
		off += n < len - off ? n : len - off;
	}
	return off;
}

/* Append @len bytes to @c's copy-aside buffer; 0 or -ENOMEM. */
static int evl_rx_append(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t need = (size_t)c->rx_len + len;

	if (need > 2 * (size_t)EVL_RX_CAP)      /* rx_max plus one segment fits far below */
		return -EMSGSIZE;
	if (c->rx_off && c->rx_off + need > c->rx_cap) {
		memmove(c->rx, c->rx + c->rx_off, c->rx_len);
		c->rx_off = 0;
	}
	if (c->rx_off + need > c->rx_cap) {
		size_t cap = c->rx_cap ? c->rx_cap : 2048;
		uint8_t *n;

		while (cap < need)
			cap *= 2;
		if (!(n = realloc(c->rx, cap)))
			return -ENOMEM;
		c->rx = n;
		c->rx_cap = (uint32_t)cap;
	}
	memcpy(c->rx + c->rx_off + c->rx_len, data, len);
	c->rx_len += (uint32_t)len;
	return 0;
}

/* Show the copy-aside (with what was appended to it) to read. */
static void evl_feed_aside(struct fp_evl_conn *c)
{
	size_t used = evl_feed(c, c->rx + c->rx_off, c->rx_len);

	if (evl_reading(c)) {
		c->rx_off += (uint32_t)used;
		c->rx_len -= (uint32_t)used;
	}
}

/* After read was shown input: note whether it stopped for want of output room (then the
 * output moving shows it again), and free a large copy-aside buffer once it is empty. */
static void evl_rx_settle(struct fp_evl_conn *c)
{
	if (!evl_reading(c))
		return;
	c->rx_paused = c->rx_len && evl_out_is_full(c);
	if (c->rx_len)
		return;
	c->rx_off = 0;
	if (c->rx_cap > EVL_RX_KEEP) {
		free(c->rx);
		c->rx = NULL;
		c->rx_cap = 0;
	}
}

/* Show @len new bytes (already owed back in rx_done) to read; copy aside what it leaves. */
static void evl_take(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	int rc = 0;

	if (!c->rx_len) {
		size_t used = evl_feed(c, data, len);   /* zero copy: the receive buffer itself */

		if (used < len && evl_reading(c))
			rc = evl_rx_append(c, data + used, len - used);
	} else if (!(rc = evl_rx_append(c, data, len))) {
		evl_feed_aside(c);
	}
	if (rc) {
		log_warn("evl: cannot keep %u bytes of input left unconsumed (%s); connection "
			 "reset", c->rx_len, strerror(-rc));
		evl_fail(c, rc, FP_CALL_ABORT);
		return;
	}
	evl_rx_settle(c);
}

/* Hold a RECV back; 0 or -ENOMEM. One that continues the last held one in memory (the
 * same receive buffer) extends it. */
static int evl_hold(struct fp_evl_conn *c, const uint8_t *data, uint32_t len)
{
	struct evl_seg *n;
	uint32_t cap;

	if (c->hold_n) {
		struct evl_seg *last = &c->hold[(c->hold_head + c->hold_n - 1) % c->hold_cap];

		if (last->data + last->len == data && len <= UINT32_MAX - last->len) {
			last->len += len;
			return 0;
		}
	}
	if (c->hold_n == c->hold_cap) {
		cap = c->hold_cap ? c->hold_cap * 2 : EVL_HOLD_INIT;
		if (!(n = malloc(cap * sizeof(*n))))
			return -ENOMEM;
		for (uint32_t i = 0; i < c->hold_n; i++)
			n[i] = c->hold[(c->hold_head + i) % c->hold_cap];
		free(c->hold);
		c->hold = n;
		c->hold_cap = cap;
		c->hold_head = 0;
	}
	c->hold[(c->hold_head + c->hold_n++) % c->hold_cap] = (struct evl_seg){ data, len };
	return 0;
}

void evl_recv(struct fp_evl_conn *c, const struct fp_cond *k)
{
	evl_mark_dirty(c);
	if (!evl_reading(c)) {
		c->rx_done += k->len;   /* nobody reads: given back at once */
		return;
	}
	if (c->hold_n || evl_rx_full(c)) {
		if (evl_hold(c, k->data, k->len) == 0) {
			if (!evl_rx_full(c))
				c->rx_again = true;    /* room again already: shown at the flush */
			return;
		}
		if (c->hold_n) {                /* cannot keep it in order */
			log_warn("evl: out of memory holding input back; connection reset");
			c->rx_done += k->len;
			evl_fail(c, -ENOMEM, FP_CALL_ABORT);
			return;
		}
		/* nothing held yet: take it (copied aside) rather than fail */
	}
	c->rx_done += k->len;
	evl_take(c, k->data, k->len);
}

void evl_rx_resume(struct fp_evl_conn *c)
{
	if (!evl_reading(c))
		return;
	/* The copy-aside first; on its own only when a held RECV will not be appended to it
	 * (and shown with it) in the loop below. */
	if (c->rx_len && (!c->hold_n || evl_rx_full(c))) {
		evl_feed_aside(c);
		evl_rx_settle(c);
	}
	while (c->hold_n && evl_reading(c) && !evl_rx_full(c)) {
		struct evl_seg s = c->hold[c->hold_head];

		c->hold_head = (c->hold_head + 1) % c->hold_cap;
		c->hold_n--;
		c->rx_done += s.len;
		evl_take(c, s.data, s.len);
	}
	if (c->eof_due && evl_reading(c) && !evl_rx_waiting(c)) {
		c->eof_due = false;
		evl_eof(c);
	}
}

void evl_rx_drop(struct fp_evl_conn *c)
{
	for (uint32_t i = 0; i < c->hold_n; i++)
		c->rx_done += c->hold[(c->hold_head + i) % c->hold_cap].len;
	c->hold_n = c->hold_head = 0;
	c->rx_off = c->rx_len = 0;
	c->rx_paused = c->rx_again = c->eof_due = false;
}

void fp_evl_read_again(struct fp_evl_conn *c)
{
	struct fp_evl *evl = c->evl;

	/* Once per flush: a read callback that asks again for its own input (or two that
	 * ask for each other's) must not loop. */
	if (!evl_reading(c) || (evl->flushing && c->resumed_at == evl->flushes))
		return;
	c->rx_again = true;
	evl_mark_dirty(c);
	if (!evl->in_handle)
		evl_flush_dirty(evl);
}

/* ---- UDP ---- */

int fp_evl_udp_send(struct fp_evl *evl, uint16_t sport, uint32_t addr, uint16_t rport,
		    const void *data, size_t len)
{
	struct iovec *iov;

	if (len > 65507)
		return -EMSGSIZE;
	if (!(iov = evl_arena_alloc(evl, sizeof(*iov) + len)))
		return -ENOMEM;
	iov->iov_base = iov + 1;
	iov->iov_len = len;
	memcpy(iov + 1, data, len);
	fp_udp_sendto(evl->ctx, sport, addr, rport, iov, 0);
	return 0;
}
