/* kernel_epoll.c: the kernel transport's epoll engine: edge-triggered readiness, read()/send() per socket. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/compiler.h>
#include <flowplane/log.h>
#include <flowplane/pool.h>

#include "kernel.h"

/*
 * The classic loop: epoll_wait for at most B ready sockets, read each into pool buffers.
 *
 *   - Sockets of flows and UDP ports are edge-triggered (EPOLLIN|EPOLLOUT|EPOLLRDHUP, once
 *     at creation): no epoll_ctl in steady state, not to arm EPOLLOUT nor to stop reading.
 *     A socket we stopped reading before EAGAIN (per-round bound, flow control, no buffer)
 *     goes on the pending list, which the loop reads next round without epoll. Listeners
 *     are level-triggered: an accept loop cut short is simply reported again.
 *   - A short read of a stream socket means it was drained: Linux raises a new edge for
 *     every arrival after it, so no read is spent to see EAGAIN (unless a FIN was seen).
 *   - SENDV is one send()/sendmsg(): what the socket took. SENT comes only after a short
 *     take, once the socket is writable again (Linux cannot say what was acknowledged).
 */

#define KE_READS_PER_ROUND   4u       /* reads of one flow per round (64 KiB) */
#define KE_ACCEPTS_PER_ROUND 32u
#define KE_UDP_BURST         32u      /* datagrams per recvmmsg */
#define KE_UDP_BURSTS_PER_ROUND 2u

struct ke {
	int epfd;
	bool no_pwait2;               /* epoll_pwait2 missing (Linux < 5.11) */
	unsigned max_events;
	struct epoll_event *evs;
	struct mmsghdr mmsg[KE_UDP_BURST];
	struct iovec uiov[KE_UDP_BURST];
	struct sockaddr_in uaddr[KE_UDP_BURST];
	struct fp_mbuf *ubuf[KE_UDP_BURST];
};

static inline struct ke *ke_of(const struct kt *kt) { return kt->es; }

static int ke_ctl_add(struct kt *kt, struct kt_sock *s, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };

	return epoll_ctl(ke_of(kt)->epfd, EPOLL_CTL_ADD, s->fd, &ev) ? -errno : 0;
}

static int ke_add(struct kt *kt, struct kt_sock *s)
{
	switch (s->kind) {
	case KT_FLOW:     return ke_ctl_add(kt, s, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
	case KT_LISTENER: return ke_ctl_add(kt, s, EPOLLIN);
	case KT_UDP:      return ke_ctl_add(kt, s, EPOLLIN | EPOLLET);
	default:          return ke_ctl_add(kt, s, EPOLLIN);   /* KT_WAKE */
	}
}

/* A paused listener stays registered with no events, so level-triggered readiness stops
 * reporting the connections it cannot accept (which would spin the loop). */
static void ke_accept_pause(struct kt *kt, struct kt_port *l, bool pause)
{
	struct epoll_event ev = { .events = pause ? 0 : EPOLLIN, .data.ptr = &l->s };

	if (l->s.fd >= 0)
		epoll_ctl(ke_of(kt)->epfd, EPOLL_CTL_MOD, l->s.fd, &ev);
}

/* Explicit DEL before close: a forked child holding the fd would keep the registration
 * (and its pointer to freed memory) alive. */
static void ke_close(struct kt *kt, struct kt_sock *s, bool abort)
{
	kt_pend_remove(kt, s);
	if (s->fd < 0)
		return;
	if (abort) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		(void)setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	epoll_ctl(ke_of(kt)->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	s->fd = -1;
}

/* ---- flows ---- */

/* One read into @f's buffers: appended to the last held one while it has KT_MIN_TAIL of
 * room, else into a fresh one. 1: more may be there; 0: drained or stopped. */
static int ke_flow_read_one(struct kt *kt, struct fp_flow *f)
{
	struct fp_mbuf *m = kt_held_last(kt, f);
	bool fresh = !m || fp_mbuf_tailroom(m) < KT_MIN_TAIL;
	uint32_t room;
	ssize_t n;

	if (fresh && !(m = fp_pool_get(&kt->cache))) {
		kt->starved = true;
		kt_pend_add(kt, &f->s);
		return 0;
	}
	room = fp_mbuf_tailroom(m);
	do
		n = read(f->s.fd, fp_mbuf_data(m) + m->data_len, room);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		int err = n < 0 ? errno : 0;
		if (fresh)
			fp_mbuf_free(&kt->cache, m);
		if (n == 0)
			kt_flow_eof(kt, f);
		else if (err != EAGAIN && err != EWOULDBLOCK)
			kt_flow_dead(kt, f, -err);
		return 0;
	}
	kt_recv_push(kt, f, m, (uint32_t)n, fresh);
	/* A short read drained the socket: the next arrival raises a new edge. After a FIN
	 * was seen, read on to the 0 that says EOF. */
	return (uint32_t)n == room || f->rdhup;
}

/* Read @f until drained, over budget (flow control) or out of its share of the round. */
static void ke_flow_read(struct kt *kt, struct fp_flow *f)
{
	if (f->eof || f->dead || f->closed || f->connecting)
		return;
	for (;;) {
		if (!kt_flow_window(kt, f)) {
			f->throttled = true;   /* RECV_DONE puts it back on the pending list */
			return;
		}
		if (!kt_read_budget(kt, &f->s, KE_READS_PER_ROUND)) {
			kt_pend_add(kt, &f->s);
			return;
		}
		if (!ke_flow_read_one(kt, f))
			return;
	}
}

static void ke_flow_event(struct kt *kt, struct fp_flow *f, uint32_t ev)
{
	if (f->dead || f->closed)
		return;
	if (f->connecting) {
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		kt_connected(kt, f, kt_sock_error(f->s.fd));
		if (f->dead)
			return;
	}
	if (ev & (EPOLLRDHUP | EPOLLHUP))
		f->rdhup = true;
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		ke_flow_read(kt, f);
	if (f->dead)
		return;
	if (ev & EPOLLERR) {
		int err = kt_sock_error(f->s.fd);
		if (err) {
			kt_flow_dead(kt, f, -err);
			return;
		}
	}
	if ((ev & EPOLLOUT) && f->want_sent) {
		f->want_sent = false;
		kt_cond(kt, FP_COND_SENT, f)->window = KT_SENT_WINDOW;
	}
}

/* ---- listeners and UDP ports ---- */

/* Accept what is queued, up to KE_ACCEPTS_PER_ROUND (level-triggered: the rest is
 * reported again next round). Each new flow comes up as a KNOCK. */
static void ke_accept(struct kt *kt, struct kt_port *l)
{
	for (unsigned i = 0; i < KE_ACCEPTS_PER_ROUND; i++) {
		struct sockaddr_in sa;
		socklen_t sl = sizeof(sa);
		int fd = accept4(l->s.fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				kt_accept_failed(kt, l, errno);
			return;
		}
		kt_accepted(kt, l, fd, &sa);
	}
}

/* Point the recvmmsg vectors at @n fresh buffers. */
static void ke_udp_prepare(struct ke *ke, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		ke->uiov[i].iov_base = fp_mbuf_data(ke->ubuf[i]);
		ke->uiov[i].iov_len = fp_mbuf_tailroom(ke->ubuf[i]);
		ke->mmsg[i].msg_hdr = (struct msghdr){
			.msg_name = &ke->uaddr[i], .msg_namelen = sizeof(ke->uaddr[i]),
			.msg_iov = &ke->uiov[i], .msg_iovlen = 1,
		};
	}
}

/* Receive datagrams with recvmmsg into pool buffers, a burst at a time. */
static void ke_udp_rx(struct kt *kt, struct kt_port *u)
{
	struct ke *ke = ke_of(kt);

	for (;;) {
		if (!kt_read_budget(kt, &u->s, KE_UDP_BURSTS_PER_ROUND)) {
			kt_pend_add(kt, &u->s);
			return;
		}
		unsigned n = fp_pool_get_bulk(&kt->cache, ke->ubuf, KE_UDP_BURST), i;
		if (!n) {
			kt->starved = true;
			kt_pend_add(kt, &u->s);
			return;
		}
		ke_udp_prepare(ke, n);
		int r;
		do
			r = recvmmsg(u->s.fd, ke->mmsg, n, MSG_DONTWAIT, NULL);
		while (r < 0 && errno == EINTR);
		unsigned got = r > 0 ? (unsigned)r : 0;
		for (i = 0; i < got; i++) {
			struct fp_mbuf *m = ke->ubuf[i];
			uint32_t len = ke->mmsg[i].msg_len;

			if (ke->mmsg[i].msg_hdr.msg_flags & MSG_TRUNC) {
				kt->ctx.stats->drops[FP_RT_DROP_dev_rx_dropped]++;
				fp_mbuf_free(&kt->cache, m);
				continue;
			}
			m->data_len = m->pkt_len = len;
			kt_udp_push(kt, u, m, fp_mbuf_data(m), len, &ke->uaddr[i]);
		}
		for (i = got; i < n; i++)
			fp_mbuf_free(&kt->cache, ke->ubuf[i]);
		if (got < n)
			return;   /* drained (or an error, which UDP has nothing to report with) */
	}
}

/* One epoll event, or (ev == 0) a pending socket to read on. */
static void ke_sock_event(struct kt *kt, struct kt_sock *s, uint32_t ev)
{
	if (s->kind == KT_FLOW && ev)
		ke_flow_event(kt, (struct fp_flow *)s, ev);
	else if (s->kind == KT_FLOW)
		ke_flow_read(kt, (struct fp_flow *)s);
	else if (s->kind == KT_LISTENER)
		ke_accept(kt, (struct kt_port *)s);
	else if (s->kind == KT_UDP)
		ke_udp_rx(kt, (struct kt_port *)s);
	/* KT_WAKE stays readable for every worker; the loop sees the stop */
}

/* Read what was left unread last round. New entries (a share used up again) go behind
 * the last one taken, so each is visited once per round. */
static void ke_pending_run(struct kt *kt)
{
	struct kt_sock *last = TAILQ_LAST(&kt->pending, kt_pendq), *s;

	while (last && (s = TAILQ_FIRST(&kt->pending))) {
		bool end = s == last;
		kt_pend_remove(kt, s);
		ke_sock_event(kt, s, 0);
		if (end)
			break;
	}
}

/* ---- calls ---- */

static int64_t ke_sendv(struct kt *kt, struct fp_flow *f, const struct iovec *iov,
			unsigned iovcnt, size_t offered)
{
	unsigned n_iov = iovcnt < IOV_MAX ? iovcnt : IOV_MAX;
	struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = n_iov };
	ssize_t n;

	if (n_iov < iovcnt) {
		offered = 0;
		for (unsigned i = 0; i < n_iov; i++)
			offered += iov[i].iov_len;
	}
	/* One buffer: send() spares the kernel the msghdr and iovec copies. */
	do
		n = n_iov == 1 ? send(f->s.fd, iov[0].iov_base, offered, MSG_NOSIGNAL | MSG_DONTWAIT)
			       : sendmsg(f->s.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n >= 0) {
		kt->ctx.stats->tx_frames++;
		kt->ctx.stats->tx_bytes += (uint64_t)n;
		if ((size_t)n < offered)
			f->want_sent = true;   /* the socket is full: its next edge says writable */
		else if (n_iov < iovcnt)
			kt_cond(kt, FP_COND_SENT, f)->window = KT_SENT_WINDOW; /* not full: no edge */
		return n;
	}
	switch (errno) {
	case EAGAIN:
		f->want_sent = true;
		return 0;
	case ENOBUFS:
	case ENOMEM:
		return -ENOBUFS;
	case EPIPE:
	case ECONNRESET:
	case ETIMEDOUT:
		kt_flow_dead(kt, f, errno == EPIPE ? -ECONNRESET : -errno);
		return -EPIPE;
	default:
		return -errno;
	}
}

static int ke_shutdown(struct kt *kt, struct fp_flow *f)
{
	(void)kt;
	return shutdown(f->s.fd, SHUT_WR) ? -errno : 0;
}

/* ---- the loop ---- */

static int ke_wait(struct kt *kt, uint64_t timeout_us)
{
	struct ke *ke = ke_of(kt);
	int n;

	if (!timeout_us || ke->no_pwait2) {
		int ms = (int)((timeout_us + 999) / 1000);
		n = epoll_wait(ke->epfd, ke->evs, (int)ke->max_events, ms);
	} else {
		struct timespec ts = { .tv_sec = (time_t)(timeout_us / 1000000u),
				       .tv_nsec = (long)(timeout_us % 1000000u) * 1000 };
		n = epoll_pwait2(ke->epfd, ke->evs, (int)ke->max_events, &ts, NULL);
		if (n < 0 && errno == ENOSYS) {   /* before Linux 5.11: millisecond timeouts */
			ke->no_pwait2 = true;
			return 0;
		}
	}
	return n < 0 ? 0 : n;   /* EINTR: a signal for the run (stop); nothing to do */
}

static int ke_poll(struct kt *kt, uint64_t timeout_us)
{
	struct ke *ke = ke_of(kt);
	int n = ke_wait(kt, timeout_us);

	for (int i = 0; i < n; i++)
		ke_sock_event(kt, ke->evs[i].data.ptr, ke->evs[i].events);
	ke_pending_run(kt);
	return n;
}

static void ke_flush(struct kt *kt)
{
	(void)kt;   /* every call did its I/O when it ran */
}

/* ---- setup and teardown ---- */

static void ke_teardown(struct kt *kt)
{
	struct ke *ke = ke_of(kt);

	if (!ke)
		return;
	if (ke->epfd >= 0)
		close(ke->epfd);
	free(ke->evs);
	free(ke);
	kt->es = NULL;
}

static int ke_setup(struct kt *kt)
{
	struct ke *ke = calloc(1, sizeof(*ke));

	if (!ke)
		return -ENOMEM;
	kt->es = ke;
	ke->max_events = kt->batch;
	ke->evs = calloc(ke->max_events, sizeof(*ke->evs));
	ke->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!ke->evs || ke->epfd < 0) {
		int err = ke->evs ? -errno : -ENOMEM;
		ke_teardown(kt);
		return err;
	}
	return 0;
}

const struct kt_engine kt_engine_epoll = {
	.name = "epoll",
	.setup = ke_setup,
	.teardown = ke_teardown,
	.add = ke_add,
	.close = ke_close,
	.sendv = ke_sendv,
	.shutdown = ke_shutdown,
	.poll = ke_poll,
	.flush = ke_flush,
	.accept_pause = ke_accept_pause,
};
