/* kernel_uring.c: the kernel transport's io_uring engine: multishot receive into pool buffers, copied sends, one io_uring_enter per round. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flowplane/compiler.h>
#include <flowplane/log.h>
#include <flowplane/pool.h>

#include "kernel_uring.h"

/*
 * One ring per worker (single issuer, task work deferred to our own io_uring_enter, so
 * completions arrive when the loop asks and never interrupt a round). A round is one
 * io_uring_enter: it submits everything the previous round's calls queued and collects
 * completions (waiting, under the sleep policy, until one comes, the next timer, or the
 * run's wake eventfd, which a poll operation watches).
 *
 *   - Receive: a multishot recv per flow selects buffers from a buffer ring of this
 *     worker's receive pool, so a RECV condition points into an fp_mbuf that RECV_DONE
 *     gives back, as on epoll. Flow control: the recv is armed with a total limit of the
 *     flow's window (rcv_budget minus what it holds; Linux 6.17's multishot limit), after
 *     which it ends and is re-armed with the window left, or not at all until RECV_DONE
 *     reopens it. On older kernels, where that limit is refused, each recv is single-shot
 *     and asks for at most the window. A completion that would fit the tail of the flow's
 *     last held buffer is copied there (epoll's appending reads), so held buffers stay
 *     full and a peer's small segments cannot pin a 16 KiB buffer each. -ENOBUFS (the
 *     ring ran dry) re-arms once buffers are back.
 *   - Send (kernel_uring_tx.c): SENDV copies into the flow's send chunks, up to a
 *     budget, and returns what it copied; one send per flow in flight.
 *   - Accept: multishot; the peer's address from getpeername (the multishot's one
 *     sockaddr would be overwritten by the next accept before we read it).
 *   - Connect: connect() in the call (kernel.c: local failures are the call's return),
 *     then a poll for POLLOUT, then SO_ERROR, as on epoll.
 *   - UDP: multishot recvmsg into the same buffer ring; UDP_SEND is sendto() (kernel.c).
 *   - Close: cancel the flow's operations by user_data (never by fd: the number may be
 *     reused at once); its memory goes with the last completion. CLOSE with data queued
 *     keeps the fd until the data is sent, then closes (FIN); ABORT drops it (RST).
 */

void ku_op_end(struct kt *kt, struct kt_sock *s)
{
	if (--s->ops)
		return;
	if (s->kind == KT_FLOW && ((struct fp_flow *)s)->closed)
		kt_flow_drained(kt, (struct fp_flow *)s);
	else if (s->kind != KT_FLOW && ((struct kt_port *)s)->closed)
		kt_port_drained(kt, (struct kt_port *)s);
}

/* Cancel @s's operation @tag (by user_data); its completion ends it as usual. */
static void ku_cancel(struct kt *kt, struct kt_sock *s, enum ku_tag tag)
{
	struct ku *ku = ku_of(kt);
	struct io_uring_sqe *sqe = ku_sqe(ku);

	if (!sqe) {
		struct io_uring_sync_cancel_reg reg = { .addr = ku_ud(s, tag), .fd = -1,
							.timeout = { -1, -1 } };
		(void)io_uring_register_sync_cancel(&ku->ring, &reg);
		return;
	}
	io_uring_prep_cancel64(sqe, ku_ud(s, tag), 0);
	io_uring_sqe_set_data64(sqe, KU_NONE);
}

/* io_uring completes an operation on an O_NONBLOCK file with -EAGAIN rather than waiting
 * for readiness: the sockets it drives block (the kernel transport makes them
 * non-blocking for connect's EINPROGRESS and for epoll). */
static void ku_set_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_NONBLOCK))
		(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

bool kt_uring_single_recv;

/* ---- the buffer ring ---- */

/* Give the kernel pool buffers until the ring is full (or the pool is empty). */
static void ku_ring_fill(struct kt *kt)
{
	struct ku *ku = ku_of(kt);
	int mask = io_uring_buf_ring_mask(KU_RING_BUFS), added = 0;

	while (ku->in_ring < KU_RING_BUFS) {
		unsigned want = KU_RING_BUFS - ku->in_ring;
		if (want > KU_REFILL_BULK)
			want = KU_REFILL_BULK;
		unsigned n = fp_pool_get_bulk(&kt->cache, ku->refill, want);
		for (unsigned i = 0; i < n; i++) {
			struct fp_mbuf *m = ku->refill[i];
			m->user = KU_MBUF_IN_RING;
			io_uring_buf_ring_add(ku->br, fp_mbuf_data(m), fp_mbuf_tailroom(m),
					      (unsigned short)m->index, mask, added++);
		}
		ku->in_ring += n;
		if (n < want)
			break;
	}
	if (added)
		io_uring_buf_ring_advance(ku->br, added);
}

/* The buffer a completion filled, or NULL when it has none. */
static struct fp_mbuf *ku_cqe_buf(struct kt *kt, const struct io_uring_cqe *cqe)
{
	struct fp_mbuf *m;

	if (!(cqe->flags & IORING_CQE_F_BUFFER))
		return NULL;
	m = &kt->pool->mbufs[cqe->flags >> IORING_CQE_BUFFER_SHIFT];
	m->user = 0;
	ku_of(kt)->in_ring--;
	return m;
}

/* At teardown, after the ring is gone: the buffers it held go back to the pool. */
static void ku_ring_return(struct kt *kt)
{
	for (uint32_t i = 0; i < kt->pool->n_bufs; i++) {
		struct fp_mbuf *m = &kt->pool->mbufs[i];
		if (m->user == KU_MBUF_IN_RING) {
			m->user = 0;
			fp_mbuf_free(&kt->cache, m);
		}
	}
	ku_of(kt)->in_ring = 0;
}

/* ---- receive ---- */

/* Arm @f's recv for its window; throttled when it has none (RECV_DONE re-arms). */
static void ku_recv_arm(struct kt *kt, struct ku_flow *uf)
{
	struct ku *ku = ku_of(kt);
	struct fp_flow *f = &uf->f;
	struct io_uring_sqe *sqe;
	uint32_t window;

	if (uf->recv_armed || f->eof || f->dead || f->closed || f->connecting || f->s.fd < 0)
		return;
	if (!kt_flow_window(kt, f)) {
		f->throttled = true;
		return;
	}
	if (!(sqe = ku_sqe(ku))) {
		kt_pend_add(kt, &f->s);
		return;
	}
	window = kt->rcv_budget - f->held_bytes;
	if (ku->mshot_lim) {
		io_uring_prep_recv_multishot(sqe, f->s.fd, NULL, 0, 0);
		sqe->file_index = window;   /* sqe->optlen: the multishot's total */
	} else {
		io_uring_prep_recv(sqe, f->s.fd, NULL, window < kt->buf_room ? window : kt->buf_room, 0);
	}
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = KU_BGID;
	io_uring_sqe_set_data64(sqe, ku_ud(&f->s, KU_RECV));
	uf->recv_armed = true;
	f->s.ops++;
}

/* @len bytes arrived at the start of fresh buffer @m: what fits the tail of the flow's
 * last held buffer is copied there, the rest is handed up where it lies. */
static void ku_recv_data(struct kt *kt, struct fp_flow *f, struct fp_mbuf *m, uint32_t len)
{
	struct fp_mbuf *last = kt_held_last(kt, f);
	uint32_t room = last ? fp_mbuf_tailroom(last) : 0;

	if (last && (room >= KT_MIN_TAIL || room >= len)) {
		uint32_t k = len < room ? len : room;
		memcpy(fp_mbuf_data(last) + last->data_len, fp_mbuf_data(m), k);
		kt_recv_push(kt, f, last, k, false);
		if (k == len) {
			fp_mbuf_free(&kt->cache, m);
			return;
		}
		m->data_off = (uint16_t)(m->data_off + k);
		len -= k;
	}
	kt_recv_push(kt, f, m, len, true);
}

/* The recv ended without data: EOF, the ring ran dry, or an error. */
static void ku_recv_end(struct kt *kt, struct fp_flow *f, int res)
{
	struct ku *ku = ku_of(kt);

	if (res == 0) {
		kt_flow_eof(kt, f);
	} else if (res == -ENOBUFS) {
		kt_pend_add(kt, &f->s);   /* re-armed once the ring is refilled */
	} else if (res == -EINVAL && ku->mshot_lim) {
		ku->mshot_lim = false;    /* before Linux 6.17: single-shot recvs */
		kt_pend_add(kt, &f->s);
	} else if (res != -ECANCELED) {
		kt_flow_dead(kt, f, res < 0 ? res : -EIO);
	}
}

static bool ku_recv_cqe(struct kt *kt, struct ku_flow *uf, const struct io_uring_cqe *cqe)
{
	struct fp_flow *f = &uf->f;
	struct fp_mbuf *m = ku_cqe_buf(kt, cqe);
	bool last = !(cqe->flags & IORING_CQE_F_MORE), data = false;

	if (last)
		uf->recv_armed = false;
	if (f->closed || f->dead || f->eof) {
		if (m)
			fp_mbuf_free(&kt->cache, m);
	} else if (cqe->res > 0 && m) {
		ku_recv_data(kt, f, m, (uint32_t)cqe->res);
		data = true;
		if (last)
			kt_pend_add(kt, &f->s);   /* its limit reached: re-arm with what is left */
	} else {
		if (m)
			fp_mbuf_free(&kt->cache, m);
		ku_recv_end(kt, f, cqe->res);
	}
	if (last)
		ku_op_end(kt, &f->s);
	return data;
}

/* ---- flows, ports, connect ---- */

static int ku_poll_arm(struct kt *kt, struct kt_sock *s, unsigned events, enum ku_tag tag)
{
	struct io_uring_sqe *sqe = ku_sqe(ku_of(kt));

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, s->fd, events);
	io_uring_sqe_set_data64(sqe, ku_ud(s, tag));
	return 0;
}

static void ku_conn_cqe(struct kt *kt, struct ku_flow *uf, int res)
{
	struct fp_flow *f = &uf->f;

	uf->poll_armed = false;
	if (!f->closed && f->connecting) {
		kt_connected(kt, f, res < 0 ? -res : kt_sock_error(f->s.fd));
		if (!f->dead)
			ku_set_blocking(f->s.fd);
		ku_recv_arm(kt, uf);
	}
	ku_op_end(kt, &f->s);
}

/* Multishot accept on @l, or multishot recvmsg on a UDP port (which needs buffers). */
static void ku_port_arm(struct kt *kt, struct kt_port *p)
{
	struct ku *ku = ku_of(kt);
	struct io_uring_sqe *sqe;

	if (p->s.ops || p->closed || p->s.fd < 0)
		return;
	if (!(sqe = ku_sqe(ku))) {
		kt_pend_add(kt, &p->s);
		return;
	}
	if (p->s.kind == KT_LISTENER) {
		io_uring_prep_multishot_accept(sqe, p->s.fd, NULL, NULL, SOCK_CLOEXEC);
		io_uring_sqe_set_data64(sqe, ku_ud(&p->s, KU_ACCEPT));
	} else {
		io_uring_prep_recvmsg_multishot(sqe, p->s.fd, &ku->udp_msg, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = KU_BGID;
		io_uring_sqe_set_data64(sqe, ku_ud(&p->s, KU_URECV));
	}
	p->s.ops++;
}

static bool ku_accept_cqe(struct kt *kt, struct kt_port *l, const struct io_uring_cqe *cqe)
{
	int res = cqe->res;

	if (res >= 0 && l->closed) {
		close(res);
	} else if (res >= 0) {
		struct sockaddr_in sa = { .sin_family = AF_INET };
		socklen_t sl = sizeof(sa);
		(void)getpeername(res, (struct sockaddr *)&sa, &sl);
		kt_accepted(kt, l, res, &sa);
	} else if (res != -ECANCELED && res != -ECONNABORTED && res != -EINTR && !l->closed) {
		kt_accept_failed(kt, l, -res);
	}
	if (!(cqe->flags & IORING_CQE_F_MORE)) {
		if (!l->closed && !l->paused_until_us)
			kt_pend_add(kt, &l->s);   /* re-armed in the flush; paused: on resume */
		ku_op_end(kt, &l->s);
	}
	return res >= 0;
}

/* A datagram laid out by multishot recvmsg (header, address, payload) in @m. */
static bool ku_udp_data(struct kt *kt, struct kt_port *u, struct fp_mbuf *m, int res)
{
	struct ku *ku = ku_of(kt);
	struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(fp_mbuf_data(m), res, &ku->udp_msg);
	struct sockaddr_in from;

	if (!o || (o->flags & MSG_TRUNC) || o->namelen < sizeof(from)) {
		kt->ctx.stats->drops[FP_RT_DROP_dev_rx_dropped]++;
		fp_mbuf_free(&kt->cache, m);
		return false;
	}
	memcpy(&from, io_uring_recvmsg_name(o), sizeof(from));
	uint8_t *p = io_uring_recvmsg_payload(o, &ku->udp_msg);
	uint32_t len = io_uring_recvmsg_payload_length(o, res, &ku->udp_msg);
	m->data_off = (uint16_t)(m->data_off + (p - fp_mbuf_data(m)));
	m->data_len = m->pkt_len = len;
	kt_udp_push(kt, u, m, fp_mbuf_data(m), len, &from);
	return true;
}

static bool ku_udp_cqe(struct kt *kt, struct kt_port *u, const struct io_uring_cqe *cqe)
{
	struct fp_mbuf *m = ku_cqe_buf(kt, cqe);
	bool data = false;

	if (m && cqe->res >= 0 && !u->closed)
		data = ku_udp_data(kt, u, m, cqe->res);
	else if (m)
		fp_mbuf_free(&kt->cache, m);
	if (!(cqe->flags & IORING_CQE_F_MORE)) {
		if (!u->closed)
			kt_pend_add(kt, &u->s);   /* -ENOBUFS or an error: re-armed in the flush */
		ku_op_end(kt, &u->s);
	}
	return data;
}

static int ku_add(struct kt *kt, struct kt_sock *s)
{
	struct ku_flow *uf = (struct ku_flow *)(void *)s;
	int err;

	switch (s->kind) {
	case KT_FLOW:
		if (!uf->f.connecting) {   /* accepted (blocking already), or connected at once */
			ku_set_blocking(s->fd);
			ku_recv_arm(kt, uf);
			return 0;
		}
		if ((err = ku_poll_arm(kt, s, POLLOUT, KU_CONN)))
			return err;
		uf->poll_armed = true;
		s->ops++;
		return 0;
	case KT_LISTENER:
	case KT_UDP:
		ku_set_blocking(s->fd);
		ku_port_arm(kt, (struct kt_port *)s);
		return 0;
	default:   /* KT_WAKE: its completion only ends the wait; the loop sees the stop */
		return ku_poll_arm(kt, s, POLLIN, KU_WAKE);
	}
}

static void ku_flow_close(struct kt *kt, struct ku_flow *uf, bool abort)
{
	struct fp_flow *f = &uf->f;

	if (f->s.fd < 0)
		return;   /* a refused connect, closed already */
	if (uf->recv_armed)
		ku_cancel(kt, &f->s, KU_RECV);
	if (uf->poll_armed)
		ku_cancel(kt, &f->s, KU_CONN);
	if (abort) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		(void)setsockopt(f->s.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		uf->aborted = true;
		if (uf->send_busy)
			ku_cancel(kt, &f->s, KU_SEND);
	} else if (uf->tx_n && !f->dead) {
		/* CLOSE sends what SENDV took, then FIN: the fd stays until then. */
		uf->release_pending = true;
		if (uf->send_busy || ku_send_next(kt, uf))
			return;
	}
	if (!uf->send_busy)
		ku_tx_drop(kt, uf);   /* else the send's completion drops it */
	ku_fd_close(&f->s);
}

static void ku_close(struct kt *kt, struct kt_sock *s, bool abort)
{
	if (s->kind == KT_FLOW) {
		ku_flow_close(kt, (struct ku_flow *)(void *)s, abort);
		return;
	}
	if (s->fd < 0)
		return;
	if (s->ops)
		ku_cancel(kt, s, s->kind == KT_LISTENER ? KU_ACCEPT : KU_URECV);
	/* Stop listening now rather than when the accept's file reference goes: the port
	 * may be listened on again in this very batch. */
	if (s->kind == KT_LISTENER)
		(void)shutdown(s->fd, SHUT_RDWR);
	ku_fd_close(s);
}

/* ---- the loop ---- */

/* One completion; true when it carried something up (data, a connection). */
static bool ku_cqe(struct kt *kt, const struct io_uring_cqe *cqe)
{
	struct kt_sock *s = (struct kt_sock *)(uintptr_t)(cqe->user_data & ~(uint64_t)KU_TAG_MASK);
	struct ku_flow *uf = (struct ku_flow *)(void *)s;

	switch (cqe->user_data & KU_TAG_MASK) {
	case KU_RECV:   return ku_recv_cqe(kt, uf, cqe);
	case KU_SEND:   ku_send_cqe(kt, uf, cqe->res); return false;
	case KU_CONN:   ku_conn_cqe(kt, uf, cqe->res); return true;
	case KU_ACCEPT: return ku_accept_cqe(kt, (struct kt_port *)s, cqe);
	case KU_URECV:  return ku_udp_cqe(kt, (struct kt_port *)s, cqe);
	default:        return false;   /* the wake fd, a cancel's own completion */
	}
}

/* Take completions until B of them carried something up; the rest wait a round. */
static int ku_reap(struct kt *kt)
{
	struct ku *ku = ku_of(kt);
	struct io_uring_cqe *cqe;
	unsigned head, n = 0, up = 0;

	io_uring_for_each_cqe(&ku->ring, head, cqe) {
		n++;
		if (ku_cqe(kt, cqe) && ++up == kt->batch)
			break;
	}
	io_uring_cq_advance(&ku->ring, n);
	kt->backlog = io_uring_cq_ready(&ku->ring) > 0;
	return (int)n;
}

/* Submit what the last round queued and collect completions, waiting at most
 * @timeout_us for the first. */
static int ku_poll(struct kt *kt, uint64_t timeout_us)
{
	struct ku *ku = ku_of(kt);

	if (!timeout_us) {
		io_uring_submit_and_get_events(&ku->ring);
	} else {
		struct __kernel_timespec ts = { .tv_sec = (long long)(timeout_us / 1000000u),
						.tv_nsec = (long long)(timeout_us % 1000000u) * 1000 };
		struct io_uring_cqe *cqe;
		(void)io_uring_submit_and_wait_timeout(&ku->ring, &cqe, 1, &ts, NULL);
	}
	return ku_reap(kt);   /* -ETIME, -EINTR: nothing came; a stop is seen by the loop */
}

/* Re-arm what asked for it; receives wait while the ring is empty. */
static void ku_pending_arm(struct kt *kt)
{
	struct kt_sock *s = TAILQ_FIRST(&kt->pending), *next;
	bool dry = ku_of(kt)->in_ring == 0;

	for (; s; s = next) {
		next = TAILQ_NEXT(s, pend);
		if (dry && s->kind != KT_LISTENER) {
			kt->starved = true;   /* kt_timeout_us: retry in a while */
			continue;
		}
		kt_pend_remove(kt, s);
		if (s->kind == KT_FLOW)
			ku_recv_arm(kt, (struct ku_flow *)(void *)s);
		else
			ku_port_arm(kt, (struct kt_port *)s);
	}
}

/* A multishot accept ends with its error; while paused it is not re-armed, and on resume
 * it is (unless one is still in flight). */
static void ku_accept_pause(struct kt *kt, struct kt_port *l, bool pause)
{
	if (!pause && !l->s.ops)
		kt_pend_add(kt, &l->s);
}

static void ku_flush(struct kt *kt)
{
	ku_ring_fill(kt);
	if (!TAILQ_EMPTY(&kt->pending))
		ku_pending_arm(kt);
	if (!ku_send_dirty(kt))
		kt->backlog = true;   /* no slot now: next round, without sleeping */
	kt->rx_lent = ku_of(kt)->in_ring;
}

/* Mid-round: the sends queued so far go to the kernel now (one io_uring_enter), not with
 * the next poll's. A flow without an SQE slot waits for the round's end (ku_flush). */
static void ku_send_now(struct kt *kt)
{
	struct ku *ku = ku_of(kt);

	(void)ku_send_dirty(kt);
	if (io_uring_sq_ready(&ku->ring))
		io_uring_submit(&ku->ring);
}

/* ---- setup and teardown ---- */

/* Single issuer, task work run only inside our own io_uring_enter (so completions come
 * when the loop asks, in one batch): Linux 6.1, which also has everything else used here
 * (buffer rings, multishot accept, recv and recvmsg). Refused on older kernels, where
 * auto falls back to epoll. (Cooperative task work without deferral measured 10% slower
 * on the 64-byte echo.) */
static int ku_ring_init(struct ku *ku)
{
	struct io_uring_params p = {
		.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			 IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE,
		.cq_entries = KU_CQ_ENTRIES,
	};
	int ret = io_uring_queue_init_params(KU_SQ_ENTRIES, &ku->ring, &p);

	if (ret == -EINVAL)
		return -EOPNOTSUPP;   /* an unknown flag: before 6.1 */
	ku->ring_up = !ret;
	return ret;
}

static int ku_buf_ring_init(struct ku *ku)
{
	struct io_uring_buf_reg reg = { .ring_entries = KU_RING_BUFS, .bgid = KU_BGID };
	void *br;

	ku->br_bytes = KU_RING_BUFS * sizeof(struct io_uring_buf);
	br = mmap(NULL, ku->br_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (br == MAP_FAILED)
		return -errno;
	ku->br = br;
	io_uring_buf_ring_init(ku->br);
	reg.ring_addr = (uint64_t)(uintptr_t)br;
	return io_uring_register_buf_ring(&ku->ring, &reg, 0);
}

static void ku_teardown(struct kt *kt)
{
	struct ku *ku = ku_of(kt);

	if (!ku)
		return;
	if (ku->ring_up)
		io_uring_queue_exit(&ku->ring);   /* cancels the rest; no completion after it */
	ku_tx_fini(kt, ku);
	ku_ring_return(kt);
	kt->rx_lent = 0;
	if (ku->br)
		munmap(ku->br, ku->br_bytes);
	free(ku);
	kt->es = NULL;
	kt->flow_size = sizeof(struct fp_flow);
	kt->flow_tail = 0;
}

static int ku_setup(struct kt *kt)
{
	struct ku *ku = calloc(1, sizeof(*ku));
	int ret;

	if (!ku)
		return -ENOMEM;
	kt->es = ku;
	TAILQ_INIT(&ku->dirty);
	ku->mshot_lim = !kt_uring_single_recv;
	ku->udp_msg.msg_namelen = sizeof(struct sockaddr_in);
	if ((ret = ku_ring_init(ku)) || (ret = ku_buf_ring_init(ku)) || (ret = ku_tx_init(kt, ku))) {
		ku_teardown(kt);
		return ret;
	}
	ku_ring_fill(kt);
	return 0;
}

int kt_uring_probe(void)
{
	struct ku *ku = calloc(1, sizeof(*ku));
	int ret;

	if (!ku)
		return -ENOMEM;
	ret = ku_ring_init(ku);
	if (!ret)
		io_uring_queue_exit(&ku->ring);
	free(ku);
	return ret;
}

const struct kt_engine kt_engine_uring = {
	.name = "io_uring",
	.setup = ku_setup,
	.teardown = ku_teardown,
	.add = ku_add,
	.close = ku_close,
	.sendv = ku_sendv,
	.shutdown = ku_shutdown,
	.poll = ku_poll,
	.flush = ku_flush,
	.send_now = ku_send_now,
	.accept_pause = ku_accept_pause,
};
