/* kernel.c: the kernel transport: the native API (IX conditions, batched calls) over Linux sockets and epoll. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/clock.h>
#include <flowplane/compiler.h>
#include <flowplane/log.h>
#include <flowplane/pool.h>

#include "defs.h"

/*
 * The baseline: every flowplane application runs unprivileged on Linux sockets, with the
 * same rounds as on the xdp transport: epoll_wait for at most B ready sockets, turn what
 * they have into conditions, run the handler, execute its calls, run timers.
 *
 * Choices a reader should know (rt/README.md repeats them):
 *   - Sockets of flows and UDP ports are edge-triggered (EPOLLIN|EPOLLOUT|EPOLLRDHUP, once
 *     at creation): no epoll_ctl in steady state, not to arm EPOLLOUT nor to stop reading.
 *     A socket we stopped reading before EAGAIN (per-round bound, flow control, no buffer)
 *     goes on the pending list, which the loop reads next round without epoll. Listeners
 *     are level-triggered: an accept loop cut short is simply reported again.
 *   - A short read of a stream socket means it was drained: Linux raises a new edge for
 *     every arrival after it, so no read is spent to see EAGAIN (unless a FIN was seen).
 *   - Receive: a read appends to the flow's last held buffer while it has KT_MIN_TAIL
 *     bytes of room, else takes a fresh one; RECV_DONE frees buffers as it covers them.
 *     Flow control is TCP's window: past rcv_budget bytes handed up and not done, the
 *     socket is not read (the kernel's window closes the sender) until RECV_DONE.
 *   - SENT: Linux cannot say what was acknowledged, so SENT comes only after an SENDV
 *     that took fewer bytes than offered, once the socket is writable again, with len 0
 *     and window KT_SENT_WINDOW (an estimate: SENDV says what it really took).
 *   - CONNECT: local failures (no port, no route, no fd) are the call's -errno and no
 *     flow; the peer's refusal comes as CONNECTED with -ECONNREFUSED, as on the stack.
 *   - UDP_SEND needs a port bound by this worker's UDP_BIND: -ENOTCONN otherwise.
 *   - A KNOCKed flow works with the listener's cookie until ACCEPT replaces it.
 *   - With several workers each listens/binds its own socket with SO_REUSEPORT (the kernel
 *     spreads connections); one worker does not set it, so a taken port is -EADDRINUSE.
 */

#define KT_N_BUFS            4096u    /* receive buffers per worker (64 MiB, touched lazily) */
#define KT_BUF_SIZE          16384u   /* bytes per buffer, headroom included */
#define KT_HEADROOM          64u      /* unused here; keeps data cache-line aligned */
#define KT_MIN_TAIL          2048u    /* append to the last held buffer while this much room */
#define KT_READS_PER_ROUND   4u       /* reads of one flow per round (64 KiB) */
#define KT_ACCEPTS_PER_ROUND 32u
#define KT_UDP_BURST         32u      /* datagrams per recvmmsg */
#define KT_UDP_BURSTS_PER_ROUND 2u
#define KT_RCV_BUDGET        (256u * 1024)
#define KT_RCV_BUDGET_MAX    (16u * 1024 * 1024)
#define KT_SENT_WINDOW       (1u << 20)
#define KT_LISTEN_BACKLOG    4096
#define KT_MAX_SLEEP_US      100000u  /* so a stop is noticed within 100 ms */
#define KT_STARVED_SLEEP_US  1000u    /* pool empty: retry pending reads this often */
#define KT_PUBLISH_US        1000u    /* slow stats (pool, conns, wall clock) */

enum kt_kind { KT_FLOW = 1, KT_LISTENER, KT_UDP, KT_WAKE };

/* The head of everything epoll's data.ptr points to. */
struct kt_sock {
	int fd;
	uint8_t kind;
	bool pending;                 /* on kt->pending: read it next round */
	TAILQ_ENTRY(kt_sock) pend;
	uint64_t round;               /* last round it was read in, and how often */
	uint32_t reads;
};

struct fp_flow {
	struct kt_sock s;             /* first */
	uint64_t cookie;
	uint32_t raddr;
	uint16_t rport;
	bool connecting, eof, dead, closed, wr_shut, want_sent, throttled, rdhup;
	uint32_t held_bytes;          /* handed up in RECV, not yet covered by RECV_DONE */
	uint32_t head_done;           /* bytes of the first held buffer already covered */
	uint32_t head, n_held;        /* FIFO of held buffers: held[(head + i) & mask] */
	LIST_ENTRY(fp_flow) link;     /* kt->flows, then kt->dying once closed */
	struct fp_mbuf *held[];       /* kt->held_cap slots */
};

struct kt_port {                  /* a listener or a bound UDP port */
	struct kt_sock s;
	uint16_t port;
	uint64_t cookie;
	LIST_ENTRY(kt_port) link;
};

TAILQ_HEAD(kt_pendq, kt_sock);

struct kt {
	struct fp_ctx ctx;
	int epfd;
	struct fp_pool *pool;
	struct fp_pool_cache cache;
	const struct fp_rt_config *cfg;
	uint32_t rcv_budget, held_cap, buf_room;
	uint64_t round;
	bool starved;                 /* a read found the pool empty this round */
	bool reuseport;
	bool no_pwait2;               /* epoll_pwait2 missing (Linux < 5.11) */
	unsigned max_events;
	struct epoll_event *evs;
	struct kt_pendq pending;
	struct kt_sock wake;          /* run->wake_fd: the run stopped */
	LIST_HEAD(, fp_flow) flows, dying;
	LIST_HEAD(, kt_port) listeners, udps;
	uint64_t n_flows;
	uint64_t next_publish_us;
	struct mmsghdr mmsg[KT_UDP_BURST];
	struct iovec uiov[KT_UDP_BURST];
	struct sockaddr_in uaddr[KT_UDP_BURST];
	struct fp_mbuf *ubuf[KT_UDP_BURST];
};

static void kt_pend_add(struct kt *kt, struct kt_sock *s)
{
	if (!s->pending) {
		s->pending = true;
		TAILQ_INSERT_TAIL(&kt->pending, s, pend);
	}
}

static void kt_pend_remove(struct kt *kt, struct kt_sock *s)
{
	if (s->pending) {
		s->pending = false;
		TAILQ_REMOVE(&kt->pending, s, pend);
	}
}

/* Count one more read of @s this round; false when its per-round share is used up. */
static bool kt_read_budget(struct kt *kt, struct kt_sock *s, uint32_t max)
{
	if (s->round != kt->round) {
		s->round = kt->round;
		s->reads = 0;
	}
	return s->reads++ < max;
}

static int kt_epoll_add(struct kt *kt, struct kt_sock *s, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };

	return epoll_ctl(kt->epfd, EPOLL_CTL_ADD, s->fd, &ev) ? -errno : 0;
}

/* Explicit DEL before close: a forked child holding the fd would keep the registration
 * (and its pointer to freed memory) alive. */
static void kt_sock_close(struct kt *kt, struct kt_sock *s)
{
	kt_pend_remove(kt, s);
	if (s->fd >= 0) {
		epoll_ctl(kt->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
}

static int kt_sock_error(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) ? errno : err;
}

static void kt_setopt(int fd, int level, int name, int val)
{
	/* Best effort: every option set here is a performance or sharing hint. */
	(void)setsockopt(fd, level, name, &val, sizeof(val));
}

static struct sockaddr_in kt_sin(uint32_t addr, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };

	sa.sin_addr.s_addr = htonl(addr);
	sa.sin_port = htons(port);
	return sa;
}

static struct fp_cond *kt_cond(struct kt *kt, uint16_t type, struct fp_flow *f)
{
	struct fp_cond *c = rt_cond_push(&kt->ctx);

	c->type = type;
	c->flow = f;
	c->cookie = f->cookie;
	return c;
}

/* ---- flows ---- */

/* CONNECTED with @err (0 or a positive errno); a failed flow hears nothing more. */
static void kt_connected(struct kt *kt, struct fp_flow *f, int err)
{
	struct fp_cond *c = kt_cond(kt, FP_COND_CONNECTED, f);

	c->status = (int16_t)-err;
	c->raddr = f->raddr;
	c->rport = f->rport;
	f->connecting = false;
	f->dead = err != 0;
}

static struct fp_flow *kt_flow_new(struct kt *kt, int fd, uint64_t cookie)
{
	struct fp_flow *f = calloc(1, sizeof(*f) + kt->held_cap * sizeof(f->held[0]));

	if (!f)
		return NULL;
	f->s.fd = fd;
	f->s.kind = KT_FLOW;
	f->cookie = cookie;
	LIST_INSERT_HEAD(&kt->flows, f, link);
	kt->n_flows++;
	return f;
}

static inline struct fp_mbuf *kt_held(const struct kt *kt, const struct fp_flow *f, uint32_t i)
{
	return f->held[(f->head + i) & (kt->held_cap - 1)];
}

/* The flow failed: DEAD once, nothing after it. Its held buffers stay until CLOSE (RECV
 * conditions of this very round may point into them). */
static void kt_flow_dead(struct kt *kt, struct fp_flow *f, int err)
{
	if (f->dead)
		return;
	f->dead = true;
	f->want_sent = false;
	kt_pend_remove(kt, &f->s);
	kt_cond(kt, FP_COND_DEAD, f)->status = (int16_t)(err ? err : -ECONNRESET);
}

/* Drop conditions queued for @f since the handler last ran (a DEAD pushed by a failed
 * SENDV earlier in this batch): after CLOSE the application hears nothing of the flow. */
static void kt_conds_forget(struct fp_ctx *ctx, const struct fp_flow *f)
{
	unsigned j = 0;

	for (unsigned i = 0; i < ctx->n_conds; i++)
		if (ctx->conds[i].flow != f)
			ctx->conds[j++] = ctx->conds[i];
	ctx->n_conds = j;
}

/* Close (or with @abort, reset) and release the handle; the memory goes at the end of the
 * round, so later calls of the same batch naming it see a closed flow, not freed memory. */
static void kt_flow_close(struct kt *kt, struct fp_flow *f, bool abort)
{
	if (abort && f->s.fd >= 0) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		(void)setsockopt(f->s.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	kt_sock_close(kt, &f->s);
	for (uint32_t i = 0; i < f->n_held; i++)
		fp_mbuf_free(&kt->cache, kt_held(kt, f, i));
	f->n_held = f->held_bytes = 0;
	kt_conds_forget(&kt->ctx, f);
	f->closed = true;
	LIST_REMOVE(f, link);
	LIST_INSERT_HEAD(&kt->dying, f, link);
	kt->n_flows--;
}

static void kt_reap(struct kt *kt)
{
	struct fp_flow *f;

	while ((f = LIST_FIRST(&kt->dying))) {
		LIST_REMOVE(f, link);
		free(f);
	}
}

/* One read into @f's buffers: appended to the last held one while it has KT_MIN_TAIL of
 * room, else into a fresh one. 1: more may be there; 0: drained or stopped. */
static int kt_flow_read_one(struct kt *kt, struct fp_flow *f)
{
	struct fp_mbuf *m = f->n_held ? kt_held(kt, f, f->n_held - 1) : NULL;
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
		if (n == 0) {
			f->eof = true;
			kt_cond(kt, FP_COND_EOF, f);
		} else if (err != EAGAIN && err != EWOULDBLOCK) {
			kt_flow_dead(kt, f, -err);
		}
		return 0;
	}
	struct fp_cond *c = kt_cond(kt, FP_COND_RECV, f);
	c->m = m;
	c->data = fp_mbuf_data(m) + m->data_len;
	c->len = (uint32_t)n;
	m->data_len += (uint32_t)n;
	m->pkt_len = m->data_len;
	if (fresh)
		f->held[(f->head + f->n_held++) & (kt->held_cap - 1)] = m;
	f->held_bytes += (uint32_t)n;
	kt->ctx.stats->rx_frames++;
	kt->ctx.stats->rx_bytes += (uint64_t)n;
	/* A short read drained the socket: the next arrival raises a new edge. After a FIN
	 * was seen, read on to the 0 that says EOF. */
	return (uint32_t)n == room || f->rdhup;
}

/* Read @f until drained, over budget (flow control) or out of its share of the round. */
static void kt_flow_read(struct kt *kt, struct fp_flow *f)
{
	if (f->eof || f->dead || f->closed || f->connecting)
		return;
	for (;;) {
		if (f->held_bytes >= kt->rcv_budget || f->n_held == kt->held_cap) {
			f->throttled = true;   /* RECV_DONE puts it back on the pending list */
			return;
		}
		if (!kt_read_budget(kt, &f->s, KT_READS_PER_ROUND)) {
			kt_pend_add(kt, &f->s);
			return;
		}
		if (!kt_flow_read_one(kt, f))
			return;
	}
}

static void kt_flow_event(struct kt *kt, struct fp_flow *f, uint32_t ev)
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
		kt_flow_read(kt, f);
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

static struct kt_port *kt_port_find(struct kt_port *p, uint16_t port)
{
	for (; p; p = LIST_NEXT(p, link))
		if (p->port == port)
			return p;
	return NULL;
}

/* A bound socket of @type on our address:@port; the fd or -errno. */
static int kt_bind_socket(struct kt *kt, int type, uint16_t port)
{
	struct sockaddr_in sa = kt_sin(kt->cfg->ipv4, port);
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	kt_setopt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	if (kt->reuseport)
		kt_setopt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	if (type == SOCK_STREAM)
		kt_setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    (type == SOCK_STREAM && listen(fd, KT_LISTEN_BACKLOG))) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

static int64_t kt_port_open(struct kt *kt, const struct fp_call *c, int kind)
{
	bool tcp = kind == KT_LISTENER;
	struct kt_port *p;
	int fd, err;

	if (kt_port_find(LIST_FIRST(tcp ? &kt->listeners : &kt->udps), c->port))
		return -EADDRINUSE;
	fd = kt_bind_socket(kt, tcp ? SOCK_STREAM : SOCK_DGRAM, c->port);
	if (fd < 0)
		return fd;
	if (!(p = calloc(1, sizeof(*p)))) {
		close(fd);
		return -ENOMEM;
	}
	p->s.fd = fd;
	p->s.kind = (uint8_t)kind;
	p->port = c->port;
	p->cookie = c->cookie;
	err = kt_epoll_add(kt, &p->s, tcp ? EPOLLIN : EPOLLIN | EPOLLET);
	if (err) {
		close(fd);
		free(p);
		return err;
	}
	if (tcp)
		LIST_INSERT_HEAD(&kt->listeners, p, link);
	else
		LIST_INSERT_HEAD(&kt->udps, p, link);
	return 0;
}

static void kt_port_free(struct kt *kt, struct kt_port *p)
{
	kt_sock_close(kt, &p->s);
	LIST_REMOVE(p, link);
	free(p);
}

/* Accept what is queued, up to KT_ACCEPTS_PER_ROUND (level-triggered: the rest is
 * reported again next round). Each new flow comes up as a KNOCK. */
static void kt_accept(struct kt *kt, struct kt_port *l)
{
	for (unsigned i = 0; i < KT_ACCEPTS_PER_ROUND; i++) {
		struct sockaddr_in sa;
		socklen_t sl = sizeof(sa);
		int fd = accept4(l->s.fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				log_warn("kernel: accept on port %u: %s", l->port, strerror(errno));
			return;
		}
		struct fp_flow *f = kt_flow_new(kt, fd, l->cookie);
		if (!f) {
			close(fd);
			continue;
		}
		kt_setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
		f->raddr = ntohl(sa.sin_addr.s_addr);
		f->rport = ntohs(sa.sin_port);
		if (kt_epoll_add(kt, &f->s, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)) {
			kt_flow_close(kt, f, true);
			continue;
		}
		struct fp_cond *c = kt_cond(kt, FP_COND_KNOCK, f);
		c->raddr = f->raddr;
		c->rport = f->rport;
		c->lport = l->port;
	}
}

/* Receive datagrams with recvmmsg into pool buffers, a burst at a time. */
static void kt_udp_rx(struct kt *kt, struct kt_port *u)
{
	for (;;) {
		if (!kt_read_budget(kt, &u->s, KT_UDP_BURSTS_PER_ROUND)) {
			kt_pend_add(kt, &u->s);
			return;
		}
		unsigned n = fp_pool_get_bulk(&kt->cache, kt->ubuf, KT_UDP_BURST), i;
		if (!n) {
			kt->starved = true;
			kt_pend_add(kt, &u->s);
			return;
		}
		for (i = 0; i < n; i++) {
			kt->uiov[i].iov_base = fp_mbuf_data(kt->ubuf[i]);
			kt->uiov[i].iov_len = fp_mbuf_tailroom(kt->ubuf[i]);
			kt->mmsg[i].msg_hdr = (struct msghdr){
				.msg_name = &kt->uaddr[i], .msg_namelen = sizeof(kt->uaddr[i]),
				.msg_iov = &kt->uiov[i], .msg_iovlen = 1,
			};
		}
		int r;
		do
			r = recvmmsg(u->s.fd, kt->mmsg, n, MSG_DONTWAIT, NULL);
		while (r < 0 && errno == EINTR);
		unsigned got = r > 0 ? (unsigned)r : 0;
		for (i = 0; i < got; i++) {
			struct fp_mbuf *m = kt->ubuf[i];
			uint32_t len = kt->mmsg[i].msg_len;

			if (kt->mmsg[i].msg_hdr.msg_flags & MSG_TRUNC) {
				kt->ctx.stats->drops[FP_RT_DROP_dev_rx_dropped]++;
				fp_mbuf_free(&kt->cache, m);
				continue;
			}
			m->data_len = m->pkt_len = len;
			struct fp_cond *c = rt_cond_push(&kt->ctx);
			c->type = FP_COND_UDP_RECV;
			c->cookie = u->cookie;
			c->m = m;
			c->data = fp_mbuf_data(m);
			c->len = len;
			c->raddr = ntohl(kt->uaddr[i].sin_addr.s_addr);
			c->rport = ntohs(kt->uaddr[i].sin_port);
			c->lport = u->port;
			kt->ctx.stats->rx_frames++;
			kt->ctx.stats->rx_bytes += len;
		}
		for (i = got; i < n; i++)
			fp_mbuf_free(&kt->cache, kt->ubuf[i]);
		if (got < n)
			return;   /* drained (or an error, which UDP has nothing to report with) */
	}
}

/* One epoll event, or (ev == 0) a pending socket to read on. */
static void kt_sock_event(struct kt *kt, struct kt_sock *s, uint32_t ev)
{
	if (s->kind == KT_FLOW && ev)
		kt_flow_event(kt, (struct fp_flow *)s, ev);
	else if (s->kind == KT_FLOW)
		kt_flow_read(kt, (struct fp_flow *)s);
	else if (s->kind == KT_LISTENER)
		kt_accept(kt, (struct kt_port *)s);
	else if (s->kind == KT_UDP)
		kt_udp_rx(kt, (struct kt_port *)s);
	/* KT_WAKE stays readable for every worker; the loop sees the stop */
}

/* Read what was left unread last round. New entries (a share used up again) go behind
 * the last one taken, so each is visited once per round. */
static void kt_pending_run(struct kt *kt)
{
	struct kt_sock *last = TAILQ_LAST(&kt->pending, kt_pendq), *s;

	while (last && (s = TAILQ_FIRST(&kt->pending))) {
		bool end = s == last;
		kt_pend_remove(kt, s);
		kt_sock_event(kt, s, 0);
		if (end)
			break;
	}
}

/* ---- calls ---- */

/* A handle the application may still use: not NULL, not closed. */
static inline bool kt_flow_ok(const struct fp_flow *f) { return f && !f->closed; }

static int64_t kt_connect(struct kt *kt, const struct fp_call *c)
{
	struct sockaddr_in sa = kt_sin(c->addr, c->port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct fp_flow *f;
	int err = 0;

	if (fd < 0)
		return -errno;
	kt_setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		err = errno;
	/* The peer's answer (a refusal can be immediate on loopback) is a condition, as on
	 * the stack; anything else failed locally and is the call's return. */
	bool peer = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET ||
		    err == EHOSTUNREACH;
	if (err && err != EINPROGRESS && !peer) {
		close(fd);
		return -err;
	}
	if (!(f = kt_flow_new(kt, fd, c->cookie))) {
		close(fd);
		return -ENOMEM;
	}
	f->raddr = c->addr;
	f->rport = c->port;
	if (!peer) {
		int aerr = kt_epoll_add(kt, &f->s, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
		if (aerr) {
			kt_flow_close(kt, f, false);
			return aerr;
		}
	}
	if (err == EINPROGRESS) {
		f->connecting = true;
		return 0;
	}
	kt_connected(kt, f, err);
	if (err)
		kt_sock_close(kt, &f->s);
	return 0;
}

static int64_t kt_sendv(struct kt *kt, struct fp_flow *f, const struct fp_call *c)
{
	unsigned iovcnt = c->iovcnt < IOV_MAX ? c->iovcnt : IOV_MAX;
	struct msghdr mh = { .msg_iov = (struct iovec *)c->iov, .msg_iovlen = iovcnt };
	size_t offered = 0;
	ssize_t n;

	if (!kt_flow_ok(f) || f->connecting)
		return -ENOTCONN;
	if (f->dead || f->wr_shut)
		return -EPIPE;
	for (unsigned i = 0; i < iovcnt; i++)
		offered += c->iov[i].iov_len;
	if (!offered)
		return 0;
	/* One buffer: send() spares the kernel the msghdr and iovec copies. */
	do
		n = iovcnt == 1 ? send(f->s.fd, c->iov[0].iov_base, offered, MSG_NOSIGNAL | MSG_DONTWAIT)
				: sendmsg(f->s.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n >= 0) {
		kt->ctx.stats->tx_frames++;
		kt->ctx.stats->tx_bytes += (uint64_t)n;
		if ((size_t)n < offered)
			f->want_sent = true;   /* the socket is full: its next edge says writable */
		else if (iovcnt < c->iovcnt)
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

/* Cover @len bytes in order; free each buffer once all of it is covered. */
static int64_t kt_recv_done(struct kt *kt, struct fp_flow *f, uint32_t len)
{
	if (!kt_flow_ok(f))
		return -ENOTCONN;
	if (len > f->held_bytes)
		len = f->held_bytes;   /* more than was handed up: cover what there is */
	f->held_bytes -= len;
	while (len && f->n_held) {
		struct fp_mbuf *m = kt_held(kt, f, 0);
		uint32_t left = m->data_len - f->head_done;

		if (len < left) {
			f->head_done += len;
			break;
		}
		len -= left;
		fp_mbuf_free(&kt->cache, m);
		f->head = (f->head + 1) & (kt->held_cap - 1);
		f->n_held--;
		f->head_done = 0;
	}
	if (f->throttled && f->held_bytes < kt->rcv_budget && f->n_held < kt->held_cap) {
		f->throttled = false;
		kt_pend_add(kt, &f->s);
	}
	return 0;
}

static int64_t kt_udp_send(struct kt *kt, const struct fp_call *c)
{
	struct kt_port *u = kt_port_find(LIST_FIRST(&kt->udps), c->port);
	struct sockaddr_in sa = kt_sin(c->addr, c->rport);
	ssize_t n;

	if (!u)
		return -ENOTCONN;
	if (!c->iov)
		return -EINVAL;
	do
		n = sendto(u->s.fd, c->iov[0].iov_base, c->iov[0].iov_len,
			   MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, sizeof(sa));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == ENOMEM ? -ENOBUFS : -errno;
	kt->ctx.stats->tx_frames++;
	kt->ctx.stats->tx_bytes += (uint64_t)n;
	return n;
}

/* ACCEPT, SHUTDOWN, CLOSE, ABORT. */
static int64_t kt_flow_call(struct kt *kt, struct fp_flow *f, const struct fp_call *c)
{
	if (!kt_flow_ok(f))
		return -ENOTCONN;
	if (c->type == FP_CALL_ACCEPT) {
		f->cookie = c->cookie;
	} else if (c->type == FP_CALL_SHUTDOWN) {
		if (f->connecting || f->s.fd < 0)
			return -ENOTCONN;
		if (shutdown(f->s.fd, SHUT_WR))
			return -errno;
		f->wr_shut = true;
	} else {
		kt_flow_close(kt, f, c->type == FP_CALL_ABORT);
	}
	return 0;
}

static int64_t kt_unlisten(struct kt *kt, uint16_t port)
{
	struct kt_port *p = kt_port_find(LIST_FIRST(&kt->listeners), port);

	if (!p)
		return -ENOENT;
	kt_port_free(kt, p);
	return 0;
}

static int64_t kt_udp_done(struct kt *kt, struct fp_mbuf *m)
{
	if (!m)
		return -EINVAL;
	fp_mbuf_free(&kt->cache, m);
	return 0;
}

static void kt_exec(struct fp_ctx *ctx, struct fp_call *c)
{
	struct kt *kt = ctx->tp;

	switch (c->type) {
	case FP_CALL_SENDV:      c->ret = kt_sendv(kt, c->flow, c); break;
	case FP_CALL_RECV_DONE:  c->ret = kt_recv_done(kt, c->flow, c->len); break;
	case FP_CALL_ACCEPT:
	case FP_CALL_SHUTDOWN:
	case FP_CALL_CLOSE:
	case FP_CALL_ABORT:      c->ret = kt_flow_call(kt, c->flow, c); break;
	case FP_CALL_CONNECT:    c->ret = kt_connect(kt, c); break;
	case FP_CALL_LISTEN:     c->ret = kt_port_open(kt, c, KT_LISTENER); break;
	case FP_CALL_UNLISTEN:   c->ret = kt_unlisten(kt, c->port); break;
	case FP_CALL_UDP_BIND:   c->ret = kt_port_open(kt, c, KT_UDP); break;
	case FP_CALL_UDP_SEND:   c->ret = kt_udp_send(kt, c); break;
	case FP_CALL_UDP_DONE:   c->ret = kt_udp_done(kt, c->m); break;
	default:                 c->ret = -EINVAL; break;
	}
}

static const struct rt_transport_ops kt_ops = { .name = "kernel", .exec = kt_exec };

/* ---- the loop ---- */

/* How long epoll may block: not at all while there is something to hand up or read,
 * under polling, or within spin_us of the last work; else until the next application
 * timer, at most KT_MAX_SLEEP_US. */
static uint64_t kt_timeout_us(const struct kt *kt, uint64_t now, uint64_t last_work_us)
{
	const struct fp_ctx *ctx = &kt->ctx;
	uint64_t next;

	if (ctx->n_rets || ctx->n_conds || ctx->n_calls || kt->cfg->idle == FP_IDLE_POLL)
		return 0;
	if (!TAILQ_EMPTY(&kt->pending))
		return kt->starved ? KT_STARVED_SLEEP_US : 0;
	if (now - last_work_us < kt->cfg->spin_us)
		return 0;
	next = rt_ctx_next_us(ctx);
	if (next <= now)
		return 0;
	return next - now < KT_MAX_SLEEP_US ? next - now : KT_MAX_SLEEP_US;
}

static int kt_wait(struct kt *kt, uint64_t timeout_us)
{
	int n;

	if (!timeout_us || kt->no_pwait2) {
		int ms = (int)((timeout_us + 999) / 1000);
		n = epoll_wait(kt->epfd, kt->evs, (int)kt->max_events, ms);
	} else {
		struct timespec ts = { .tv_sec = (time_t)(timeout_us / 1000000u),
				       .tv_nsec = (long)(timeout_us % 1000000u) * 1000 };
		n = epoll_pwait2(kt->epfd, kt->evs, (int)kt->max_events, &ts, NULL);
		if (n < 0 && errno == ENOSYS) {   /* before Linux 5.11: millisecond timeouts */
			kt->no_pwait2 = true;
			return 0;
		}
	}
	return n < 0 ? 0 : n;   /* EINTR: a signal for the run (stop); nothing to do */
}

static void kt_account(struct kt *kt, bool work, bool slept, unsigned n_ev, unsigned n_conds,
		       uint64_t t0, uint64_t t1, uint64_t t2, uint64_t now)
{
	struct fp_rt_worker_stats *st = kt->ctx.stats;

	st->iterations++;
	st->seq++;
	st->rxq_hist[fp_rt_log2_bucket(n_ev)]++;
	if (slept) {
		st->sleeps++;
		st->idle_cycles += t1 - t0;
		t0 = t1;
	}
	if (work) {
		st->busy_cycles += t2 - t0;
		st->batch_hist[n_conds < FP_RT_BATCH_BUCKETS - 1 ? n_conds : FP_RT_BATCH_BUCKETS - 1]++;
		st->loop_ns_hist[fp_rt_log2_bucket(fp_cycles_to_ns(t2 - t1))]++;
	} else {
		st->idle_cycles += t2 - t0;
	}
	if (now >= kt->next_publish_us) {   /* the slow figures, every KT_PUBLISH_US */
		kt->next_publish_us = now + KT_PUBLISH_US;
		st->now_unix_ns = rt_unix_ns();
		st->pool_in_use = fp_pool_in_use(kt->pool);
		st->tcp_conns = kt->n_flows;
	}
}

static void kt_loop(struct kt *kt)
{
	struct fp_ctx *ctx = &kt->ctx;
	uint64_t now = rt_now_us(), last_work_us = now;

	while (!rt_ctx_stopping(ctx)) {
		uint64_t timeout = kt_timeout_us(kt, now, last_work_us);
		uint64_t t0 = fp_rdtsc();
		int n = kt_wait(kt, timeout);
		uint64_t t1 = fp_rdtsc();

		kt->round++;
		kt->starved = false;
		for (int i = 0; i < n; i++)
			kt_sock_event(kt, kt->evs[i].data.ptr, kt->evs[i].events);
		kt_pending_run(kt);
		unsigned n_conds = ctx->n_conds;
		bool work = n > 0 || n_conds || ctx->n_rets || ctx->n_calls;
		rt_ctx_round(ctx);
		now = rt_now_us();
		if (rt_ctx_timers(ctx, now))
			work = true;
		kt_reap(kt);   /* flows closed this round: no event of this batch is left */
		kt_account(kt, work, timeout > 0, (unsigned)n, n_conds, t0, t1, fp_rdtsc(), now);
		if (work)
			last_work_us = now;
	}
}

/* ---- setup and teardown ---- */

static int kt_setup(struct kt *kt, struct rt_run *run, unsigned worker)
{
	const struct fp_rt_config *cfg = run->cfg;
	struct fp_pool_params pp = { .name = "kernel-rx", .n_bufs = KT_N_BUFS,
				     .buf_size = KT_BUF_SIZE, .headroom = KT_HEADROOM };
	int ret;

	kt->epfd = -1;
	kt->cfg = cfg;
	TAILQ_INIT(&kt->pending);
	kt->reuseport = cfg->n_workers > 1;
	kt->max_events = cfg->batch ? cfg->batch : FP_RT_DEFAULT_BATCH;
	if (kt->max_events > FP_RT_MAX_BATCH)
		kt->max_events = FP_RT_MAX_BATCH;
	kt->rcv_budget = cfg->stack.rcv_buf ? cfg->stack.rcv_buf : KT_RCV_BUDGET;
	if (kt->rcv_budget > KT_RCV_BUDGET_MAX)
		kt->rcv_budget = KT_RCV_BUDGET_MAX;
	kt->buf_room = KT_BUF_SIZE - KT_HEADROOM;
	/* Every held buffer but the first and last is full to within KT_MIN_TAIL, and one
	 * read may pass the budget by a buffer: this many slots always suffice. */
	uint32_t need = (kt->rcv_budget + kt->buf_room) / (kt->buf_room - KT_MIN_TAIL) + 3;
	for (kt->held_cap = 4; kt->held_cap < need; kt->held_cap *= 2)
		;
	if (!(kt->evs = calloc(kt->max_events, sizeof(*kt->evs))))
		return -ENOMEM;
	if (!(kt->pool = fp_pool_create(&pp)))
		return -errno;
	if ((ret = fp_pool_cache_init(&kt->cache, kt->pool)))
		return ret;
	if ((kt->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return -errno;
	if ((ret = rt_ctx_init(&kt->ctx, run, worker, &kt_ops, kt, rt_now_us())))
		return ret;
	kt->ctx.local_addr = cfg->ipv4;
	kt->wake = (struct kt_sock){ .fd = run->wake_fd, .kind = KT_WAKE };
	if (run->wake_fd >= 0 && (ret = kt_epoll_add(kt, &kt->wake, EPOLLIN)))
		return ret;
	return 0;
}

static void kt_teardown(struct kt *kt, unsigned worker)
{
	struct fp_flow *f;
	struct kt_port *p;

	while ((f = LIST_FIRST(&kt->flows)))
		kt_flow_close(kt, f, false);
	kt_reap(kt);
	while ((p = LIST_FIRST(&kt->listeners)))
		kt_port_free(kt, p);
	while ((p = LIST_FIRST(&kt->udps)))
		kt_port_free(kt, p);
	if (kt->epfd >= 0)
		close(kt->epfd);
	if (kt->pool) {
		if (kt->cache.pool)
			fp_pool_cache_flush(&kt->cache);
		uint64_t out = fp_pool_in_use(kt->pool);
		if (out)
			log_warn("kernel: worker %u: %llu receive buffers still out at exit "
				 "(datagrams never given back with fp_udp_done)",
				 worker, (unsigned long long)out);
		if (kt->ctx.stats)
			kt->ctx.stats->pool_in_use = out;
		fp_pool_destroy(kt->pool);
	}
	if (kt->ctx.calls)
		rt_ctx_fini(&kt->ctx);
	free(kt->evs);
}

int rt_worker_kernel(struct rt_run *run, unsigned worker)
{
	const struct fp_app *app = run->app;
	struct kt *kt = calloc(1, sizeof(*kt));
	int ret;

	if (!kt)
		return -ENOMEM;
	ret = kt_setup(kt, run, worker);
	if (ret) {
		log_err("kernel: worker %u: setup failed: %s", worker, strerror(-ret));
		goto out;
	}
	ret = app->init ? app->init(&kt->ctx, app->arg) : 0;
	if (ret) {
		log_err("kernel: worker %u: %s init failed: %s", worker,
			app->name ? app->name : "application", strerror(-ret));
		fp_ctx_stop(&kt->ctx, ret);
		goto out;
	}
	atomic_fetch_add(&run->n_ready, 1);
	rt_ctx_flush(&kt->ctx);
	kt_loop(kt);
	rt_run_wake(run);   /* the stop may be ours: wake the workers that sleep */
	if (app->fini)
		app->fini(&kt->ctx);
	rt_ctx_flush(&kt->ctx);   /* the closes fini queued */
out:
	kt_teardown(kt, worker);
	free(kt);
	return ret;
}
