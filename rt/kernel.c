/* kernel.c: the kernel transport: the native API (IX conditions, batched calls) over Linux sockets, engine-independent part. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flowplane/clock.h>
#include <flowplane/compiler.h>
#include <flowplane/log.h>
#include <flowplane/pool.h>

#include "kernel.h"

/*
 * The baseline: every flowplane application runs unprivileged on Linux sockets, with the
 * same rounds as on the xdp transport: wait for what the kernel has (at most B events),
 * turn it into conditions, run the handler, execute its calls, run timers, issue the I/O
 * the calls queued. An engine (kernel.h) does the waiting and the I/O: io_uring by
 * default, epoll where io_uring is unavailable or asked for (--kernel-io).
 *
 * Choices a reader should know (rt/README.md repeats them):
 *   - Receive: data lands in pool buffers that RECV points into; a read (or completion)
 *     appends to the flow's last held buffer while it has KT_MIN_TAIL bytes of room, so
 *     every held buffer but the last is nearly full and held_cap slots always suffice.
 *     RECV_DONE frees buffers as it covers them. Flow control is TCP's window: past
 *     rcv_budget bytes handed up and not done (a read may pass it by one buffer), the
 *     socket is not read (the kernel's window closes the sender) until RECV_DONE.
 *   - SENDV returns the bytes taken. epoll: what send() took, SENT once the socket is
 *     writable after a short take (len 0, window KT_SENT_WINDOW, an estimate). io_uring:
 *     bytes copied into the flow's send buffers (a budget like a socket send buffer), SENT
 *     when completions free budget after a short take, with the exact free budget.
 *   - CONNECT: local failures (no port, no route, no fd) are the call's -errno and no
 *     flow; the peer's refusal comes as CONNECTED with -ECONNREFUSED, as on the stack.
 *   - EOF and DEAD come once each; after DEAD, nothing. CLOSE and ABORT release the
 *     handle at once: later calls of the same batch naming it get -ENOTCONN, conditions
 *     already queued for it are dropped, and its memory goes only once no event or
 *     completion can name it. CLOSE sends what SENDV took, then FIN.
 *   - UDP_SEND needs a port bound by this worker's UDP_BIND: -ENOTCONN otherwise.
 *   - A KNOCKed flow works with the listener's cookie until ACCEPT replaces it.
 *   - With several workers each listens/binds its own socket with SO_REUSEPORT (the kernel
 *     spreads connections by their hash, or with --kernel-steer cpu gives each to the
 *     worker pinned to the CPU that received it, SO_INCOMING_CPU); one worker does not set
 *     it, so a taken port is -EADDRINUSE.
 */

int kt_sock_error(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) ? errno : err;
}

void kt_setopt(int fd, int level, int name, int val)
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

struct fp_cond *kt_cond(struct kt *kt, uint16_t type, struct fp_flow *f)
{
	struct fp_cond *c = rt_cond_push(&kt->ctx);

	c->type = type;
	c->flow = f;
	c->cookie = f->cookie;
	return c;
}

/* ---- conditions engines raise ---- */

void kt_connected(struct kt *kt, struct fp_flow *f, int err)
{
	struct fp_cond *c = kt_cond(kt, FP_COND_CONNECTED, f);

	c->status = (int16_t)-err;
	c->raddr = f->raddr;
	c->rport = f->rport;
	f->connecting = false;
	f->dead = err != 0;
}

/* Its held buffers stay until CLOSE (RECV conditions of this very round may point into
 * them). */
void kt_flow_dead(struct kt *kt, struct fp_flow *f, int err)
{
	if (f->dead)
		return;
	f->dead = true;
	f->want_sent = false;
	kt_pend_remove(kt, &f->s);
	kt_cond(kt, FP_COND_DEAD, f)->status = (int16_t)(err ? err : -ECONNRESET);
}

void kt_flow_eof(struct kt *kt, struct fp_flow *f)
{
	f->eof = true;
	kt_pend_remove(kt, &f->s);
	kt_cond(kt, FP_COND_EOF, f);
}

void kt_recv_push(struct kt *kt, struct fp_flow *f, struct fp_mbuf *m, uint32_t len, bool fresh)
{
	struct fp_cond *c = kt_cond(kt, FP_COND_RECV, f);

	c->m = m;
	c->data = fp_mbuf_data(m) + m->data_len;
	c->len = len;
	m->data_len += len;
	m->pkt_len = m->data_len;
	if (fresh)
		f->held[(f->head + f->n_held++) & (kt->held_cap - 1)] = m;
	f->held_bytes += len;
	kt->ctx.stats->rx_frames++;
	kt->ctx.stats->rx_bytes += len;
}

void kt_udp_push(struct kt *kt, struct kt_port *u, struct fp_mbuf *m, const uint8_t *data,
		 uint32_t len, const struct sockaddr_in *from)
{
	struct fp_cond *c = rt_cond_push(&kt->ctx);

	c->type = FP_COND_UDP_RECV;
	c->cookie = u->cookie;
	c->m = m;
	c->data = data;
	c->len = len;
	c->raddr = ntohl(from->sin_addr.s_addr);
	c->rport = ntohs(from->sin_port);
	c->lport = u->port;
	kt->ctx.stats->rx_frames++;
	kt->ctx.stats->rx_bytes += len;
}

/* ---- flows ---- */

static void kt_flow_close(struct kt *kt, struct fp_flow *f, bool abort);

static struct fp_flow *kt_flow_new(struct kt *kt, int fd, uint64_t cookie)
{
	size_t held = (size_t)kt->held_cap * sizeof(struct fp_mbuf *);
	struct fp_flow *f = calloc(1, kt->flow_size + held + kt->flow_tail);

	if (!f)
		return NULL;
	f->held = (struct fp_mbuf **)(void *)((char *)f + kt->flow_size);
	f->s.fd = fd;
	f->s.kind = KT_FLOW;
	f->cookie = cookie;
	LIST_INSERT_HEAD(&kt->flows, f, link);
	kt->n_flows++;
	return f;
}

/* A warning from a per-event path, at most once per KT_LOG_EVERY_US, with the count. */
static bool kt_log_due(uint64_t *last_us)
{
	uint64_t now = rt_now_us();

	if (*last_us && now - *last_us < KT_LOG_EVERY_US)
		return false;
	*last_us = now;
	return true;
}

void kt_accept_failed(struct kt *kt, struct kt_port *l, int err)
{
	struct fp_rt_worker_stats *st = kt->ctx.stats;

	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) {
		if (kt_log_due(&kt->accept_log_us))
			log_warn("kernel: accept on port %u: %s", l->port, strerror(err));
		return;
	}
	st->drops[FP_RT_DROP_accept_failed]++;
	if (!l->paused_until_us) {
		kt->n_paused++;
		kt->eng->accept_pause(kt, l, true);
	}
	l->paused_until_us = rt_now_us() + KT_ACCEPT_BACKOFF_US;
	if (kt_log_due(&kt->accept_log_us)) {
		uint64_t n = st->drops[FP_RT_DROP_accept_failed];
		log_warn("kernel: accept on port %u: %s: new connections wait in the kernel's "
			 "queue (%llu times so far; raise ulimit -n or lower the connection "
			 "limit)", l->port, strerror(err),
			 (unsigned long long)(n - kt->accept_failed_logged));
		kt->accept_failed_logged = n;
	}
}

/* Listeners whose pause is over accept again (kt_timeout_us wakes the loop for them). */
static void kt_accept_resume(struct kt *kt, uint64_t now)
{
	struct kt_port *l;

	LIST_FOREACH(l, &kt->listeners, link) {
		if (!l->paused_until_us || now < l->paused_until_us)
			continue;
		l->paused_until_us = 0;
		kt->n_paused--;
		kt->eng->accept_pause(kt, l, false);
	}
}

/* Past --max-conns: reset the connection at once (counted), as the AF_XDP stack does. */
static bool kt_over_limit(struct kt *kt, struct kt_port *l, int fd)
{
	uint32_t max = kt->cfg->stack.max_conns ? kt->cfg->stack.max_conns
						: FP_NET_DEFAULT_MAX_CONNS;
	struct fp_rt_worker_stats *st = kt->ctx.stats;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	if (kt->n_flows < max)
		return false;
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
	st->drops[FP_RT_DROP_conn_limit]++;
	if (kt_log_due(&kt->conn_limit_log_us)) {
		uint64_t n = st->drops[FP_RT_DROP_conn_limit];
		log_warn("kernel: port %u: %u connections open (--max-conns): %llu more reset",
			 l->port, max, (unsigned long long)(n - kt->conn_limit_logged));
		kt->conn_limit_logged = n;
	}
	return true;
}

void kt_accepted(struct kt *kt, struct kt_port *l, int fd, const struct sockaddr_in *from)
{
	struct fp_flow *f;
	struct fp_cond *c;

	if (kt_over_limit(kt, l, fd))
		return;
	f = kt_flow_new(kt, fd, l->cookie);
	if (!f) {
		close(fd);
		return;
	}
	kt_setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	f->raddr = ntohl(from->sin_addr.s_addr);
	f->rport = ntohs(from->sin_port);
	if (kt->eng->add(kt, &f->s)) {
		kt_flow_close(kt, f, true);
		return;
	}
	c = kt_cond(kt, FP_COND_KNOCK, f);
	c->raddr = f->raddr;
	c->rport = f->rport;
	c->lport = l->port;
}

/* Close (or with @abort, reset) and release the handle; the memory goes at the end of the
 * round, or once the engine's last completion naming it came, so later calls of the same
 * batch naming it see a closed flow, not freed memory. */
static void kt_flow_close(struct kt *kt, struct fp_flow *f, bool abort)
{
	kt_pend_remove(kt, &f->s);
	kt->eng->close(kt, &f->s, abort);
	for (uint32_t i = 0; i < f->n_held; i++)
		fp_mbuf_free(&kt->cache, kt_held(kt, f, i));
	f->n_held = f->held_bytes = 0;
	rt_conds_forget(&kt->ctx, f);   /* a DEAD a failed SENDV of this batch pushed */
	f->closed = true;
	LIST_REMOVE(f, link);
	if (f->s.ops)
		LIST_INSERT_HEAD(&kt->draining, f, link);
	else
		LIST_INSERT_HEAD(&kt->dying, f, link);
	kt->n_flows--;
}

void kt_flow_drained(struct kt *kt, struct fp_flow *f)
{
	LIST_REMOVE(f, link);
	LIST_INSERT_HEAD(&kt->dying, f, link);
}

static void kt_reap(struct kt *kt)
{
	struct fp_flow *f;

	while ((f = LIST_FIRST(&kt->dying))) {
		LIST_REMOVE(f, link);
		free(f);
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
	/* Linux 6.1+: a reuseport group prefers the socket whose SO_INCOMING_CPU is the CPU
	 * that received the SYN (or datagram), then falls back to the hash. */
	if (kt->incoming_cpu >= 0)
		kt_setopt(fd, SOL_SOCKET, SO_INCOMING_CPU, kt->incoming_cpu);
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

/*
 * A UDP port's receive buffer: KT_UDP_RCVBUF, past net.core.rmem_max when we may
 * (SO_RCVBUFFORCE, CAP_NET_ADMIN), else as far as rmem_max lets. Linux's default (208 KB,
 * about 270 small datagrams at their skb's true size) overflowed under Poisson bursts: a
 * DNS server on this transport lost 1 query in 10,000 at half its saturation, where NSD,
 * reading with recvmmsg in a tight loop, lost none. Best effort: a refusal keeps the
 * default.
 */
#define KT_UDP_RCVBUF (4u << 20)

static void kt_udp_rcvbuf(int fd)
{
	int v = KT_UDP_RCVBUF;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)))
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
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
	if (!tcp)
		kt_udp_rcvbuf(fd);
	if (!(p = calloc(1, sizeof(*p)))) {
		close(fd);
		return -ENOMEM;
	}
	p->s.fd = fd;
	p->s.kind = (uint8_t)kind;
	p->port = c->port;
	p->cookie = c->cookie;
	err = kt->eng->add(kt, &p->s);
	if (err) {
		kt->eng->close(kt, &p->s, false);
		p->closed = true;
		if (!p->s.ops)
			free(p);   /* else the engine frees it with its last completion */
		else
			LIST_INSERT_HEAD(&kt->dead_ports, p, link);
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
	if (p->paused_until_us) {     /* off the listeners: no resume will see it */
		p->paused_until_us = 0;
		kt->n_paused--;
	}
	kt_pend_remove(kt, &p->s);
	kt->eng->close(kt, &p->s, false);
	LIST_REMOVE(p, link);
	p->closed = true;
	if (p->s.ops)
		LIST_INSERT_HEAD(&kt->dead_ports, p, link);
	else
		free(p);
}

void kt_port_drained(struct kt *kt, struct kt_port *p)
{
	(void)kt;
	LIST_REMOVE(p, link);
	free(p);
}

/* ---- calls ---- */

/* A handle the application may still use: not NULL, not closed. */
static inline bool kt_flow_ok(const struct fp_flow *f) { return f && !f->closed; }

/* connect() here, not in the engine: the call's return must say at once whether it
 * failed locally (-errno, no flow) or the peer answers later (CONNECTED). */
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
	f->connecting = err == EINPROGRESS;
	if (!peer) {
		int aerr = kt->eng->add(kt, &f->s);
		if (aerr) {
			kt_flow_close(kt, f, false);
			return aerr;
		}
	}
	if (f->connecting)
		return 0;
	kt_connected(kt, f, err);
	if (err)
		kt->eng->close(kt, &f->s, false);
	return 0;
}

static int64_t kt_sendv(struct kt *kt, struct fp_flow *f, const struct fp_call *c)
{
	size_t offered = 0;

	if (!kt_flow_ok(f) || f->connecting)
		return -ENOTCONN;
	if (f->dead || f->wr_shut)
		return -EPIPE;
	if (!c->iov && c->iovcnt)
		return -EINVAL;
	for (unsigned i = 0; i < c->iovcnt; i++)
		offered += c->iov[i].iov_len;
	if (!offered)
		return 0;
	return kt->eng->sendv(kt, f, c->iov, c->iovcnt, offered);
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
	if (f->throttled && kt_flow_window(kt, f)) {
		f->throttled = false;
		kt_pend_add(kt, &f->s);   /* the engine reads (re-arms) it again */
	}
	return 0;
}

/* A plain sendto() on both engines: its return is the datagram's fate, at once. */
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
	int err;

	if (!kt_flow_ok(f))
		return -ENOTCONN;
	if (c->type == FP_CALL_ACCEPT) {
		f->cookie = c->cookie;
	} else if (c->type == FP_CALL_SHUTDOWN) {
		if (f->connecting || f->s.fd < 0)
			return -ENOTCONN;
		if (!f->wr_shut && (err = kt->eng->shutdown(kt, f)))
			return err;
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

/* Mid-round (--flush-us, steal.c): what the calls so far queued leaves now, where the
 * engine holds it until the round's end (io_uring); epoll's calls wrote as they ran. */
static void kt_flush_mid(struct fp_ctx *ctx)
{
	struct kt *kt = ctx->tp;

	if (kt->eng->send_now)
		kt->eng->send_now(kt);
}

static const struct rt_transport_ops kt_ops = { .name = "kernel", .exec = kt_exec,
						.flush = kt_flush_mid };

/* ---- the loop ---- */

/* How long the engine may block: not at all while there is something to hand up or read,
 * under polling, within spin_us of the last work (adaptive: while the spin budget lasts);
 * else until the next application timer, at most KT_MAX_SLEEP_US. */
static uint64_t kt_timeout_us(struct kt *kt, uint64_t now, uint64_t last_work_us)
{
	const struct fp_ctx *ctx = &kt->ctx;
	uint64_t next;

	if (ctx->n_rets || ctx->n_conds || ctx->n_calls || kt->backlog ||
	    kt->cfg->idle == FP_IDLE_POLL)
		return 0;
	if (!TAILQ_EMPTY(&kt->pending))
		return kt->starved ? KT_STARVED_SLEEP_US : 0;
	if (kt->cfg->idle == FP_IDLE_ADAPTIVE ? !rt_idle_spent(&kt->budget) :
	    now - last_work_us < kt->cfg->spin_us)
		return 0;
	next = rt_ctx_next_us(ctx);
	if (kt->n_paused) {
		struct kt_port *l;
		LIST_FOREACH(l, &kt->listeners, link)
			if (l->paused_until_us && l->paused_until_us < next)
				next = l->paused_until_us;
	}
	if (next <= now)
		return 0;
	return next - now < KT_MAX_SLEEP_US ? next - now : KT_MAX_SLEEP_US;
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
		st->pool_in_use = fp_pool_in_use(kt->pool) - kt->rx_lent;
		st->tcp_conns = kt->n_flows;
	}
}

static void kt_loop(struct kt *kt)
{
	struct fp_ctx *ctx = &kt->ctx;
	uint64_t now = rt_now_us(), last_work_us = now, prev_t0 = 0, slept = 0;
	bool prev_work = true;

	while (!rt_ctx_stopping(ctx)) {
		uint64_t timeout = kt_timeout_us(kt, now, last_work_us);
		uint64_t t0 = fp_rdtsc();

		if (prev_t0 && t0 - prev_t0 > slept)
			rt_gap_note(ctx->stats, t0 - prev_t0 - slept, !prev_work);
		prev_t0 = t0;

		kt->round++;
		kt->starved = false;
		kt->backlog = false;
		int n = kt->eng->poll(kt, timeout);
		uint64_t t1 = fp_rdtsc();
		slept = timeout > 0 ? t1 - t0 : 0;
		unsigned n_conds = ctx->n_conds;
		bool work = n > 0 || n_conds || ctx->n_rets || ctx->n_calls;
		if (rt_ctx_round(ctx))
			work = true;        /* --sched steal: flows run, stolen or come home */
		now = rt_now_us();
		if (rt_ctx_timers(ctx, now))
			work = true;
		kt->eng->flush(kt);
		kt_reap(kt);   /* flows closed this round: no event of this batch is left */
		if (kt->n_paused)
			kt_accept_resume(kt, now);
		uint64_t t2 = fp_rdtsc();

		kt_account(kt, work, timeout > 0, (unsigned)n, n_conds, t0, t1, t2, now);
		prev_work = work;
		rt_idle_round(&kt->budget, work, timeout > 0 ? t1 : t0, t2, kt->cfg->spin_us);
		if (work)
			last_work_us = now;
	}
}

/* ---- setup and teardown ---- */

static const struct kt_engine *kt_engine_of(enum fp_kernel_io io)
{
	return io == FP_KERNEL_IO_EPOLL ? &kt_engine_epoll : &kt_engine_uring;
}

/* The engine asked for; with auto, epoll when io_uring is refused (seccomp, the
 * io_uring_disabled sysctl, an old kernel). */
static int kt_engine_setup(struct kt *kt, unsigned worker)
{
	enum fp_kernel_io io = kt->cfg->kernel_io;
	int ret;

	kt->eng = kt_engine_of(io);
	kt->flow_size = sizeof(struct fp_flow);
	kt->flow_tail = 0;
	ret = kt->eng->setup(kt);
	if (ret && io == FP_KERNEL_IO_AUTO) {
		if (worker == 0)
			log_warn("kernel: io_uring unavailable (%s): using epoll", strerror(-ret));
		kt->eng = &kt_engine_epoll;
		ret = kt->eng->setup(kt);
	} else if (ret && io == FP_KERNEL_IO_URING) {
		log_err("kernel: worker %u: io_uring refused (%s: a seccomp profile, the "
			"io_uring_disabled sysctl, or Linux before 6.1); --kernel-io epoll or auto "
			"work without it", worker, strerror(-ret));
	}
	if (ret)
		kt->eng = NULL;
	return ret;
}

static void kt_budgets(struct kt *kt)
{
	const struct fp_rt_config *cfg = kt->cfg;

	kt->batch = cfg->batch ? cfg->batch : FP_RT_DEFAULT_BATCH;
	if (kt->batch > FP_RT_MAX_BATCH)
		kt->batch = FP_RT_MAX_BATCH;
	kt->rcv_budget = cfg->stack.rcv_buf ? cfg->stack.rcv_buf : KT_RCV_BUDGET;
	if (kt->rcv_budget > KT_RCV_BUDGET_MAX)
		kt->rcv_budget = KT_RCV_BUDGET_MAX;
	kt->buf_room = KT_BUF_SIZE - KT_HEADROOM;
	/* Every held buffer but the first and last is full to within KT_MIN_TAIL, and one
	 * read may pass the budget by a buffer: this many slots always suffice. */
	uint32_t need = (kt->rcv_budget + kt->buf_room) / (kt->buf_room - KT_MIN_TAIL) + 3;
	for (kt->held_cap = 4; kt->held_cap < need; kt->held_cap *= 2)
		;
}

static int kt_setup(struct kt *kt, struct rt_run *run, unsigned worker)
{
	struct fp_pool_params pp = { .name = "kernel-rx", .n_bufs = KT_N_BUFS,
				     .buf_size = KT_BUF_SIZE, .headroom = KT_HEADROOM };
	int ret;

	kt->cfg = run->cfg;
	TAILQ_INIT(&kt->pending);
	kt->reuseport = run->cfg->n_workers > 1;
	kt->incoming_cpu = kt->reuseport && run->cfg->kernel_steer_cpu ? run->cfg->cores[worker] : -1;
	kt_budgets(kt);
	if (!(kt->pool = fp_pool_create(&pp)))
		return -errno;
	if ((ret = fp_pool_cache_init(&kt->cache, kt->pool)))
		return ret;
	if ((ret = rt_ctx_init(&kt->ctx, run, worker, &kt_ops, kt, rt_now_us())))
		return ret;
	kt->ctx.local_addr = run->cfg->ipv4;
	kt->wake = (struct kt_sock){ .fd = run->wake_fd, .kind = KT_WAKE };
	if ((ret = kt_engine_setup(kt, worker)))
		return ret;
	if (kt->eng == &kt_engine_uring)
		atomic_fetch_add(&run->n_uring, 1);   /* for the startup line */
	if (run->wake_fd >= 0 && (ret = kt->eng->add(kt, &kt->wake)))
		return ret;
	return 0;
}

static void kt_free_closed(struct kt *kt)
{
	struct fp_flow *f;
	struct kt_port *p;

	while ((f = LIST_FIRST(&kt->draining))) {
		LIST_REMOVE(f, link);
		free(f);
	}
	kt_reap(kt);
	while ((p = LIST_FIRST(&kt->dead_ports))) {
		LIST_REMOVE(p, link);
		free(p);
	}
}

static void kt_pool_teardown(struct kt *kt, unsigned worker)
{
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

static void kt_teardown(struct kt *kt, unsigned worker)
{
	struct fp_flow *f;
	struct kt_port *p;

	if (kt->eng) {
		while ((f = LIST_FIRST(&kt->flows)))
			kt_flow_close(kt, f, false);
		while ((p = LIST_FIRST(&kt->listeners)))
			kt_port_free(kt, p);
		while ((p = LIST_FIRST(&kt->udps)))
			kt_port_free(kt, p);
		kt->eng->teardown(kt);   /* no completion can name anything after this */
		kt_free_closed(kt);
	}
	if (kt->pool)
		kt_pool_teardown(kt, worker);
	if (kt->ctx.calls)
		rt_ctx_fini(&kt->ctx);
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
	kt->eng->flush(kt);
	rt_steal_enter(run);
	kt_loop(kt);
	rt_run_wake(run);   /* the stop may be ours: wake the workers that sleep */
	rt_steal_leave(run);
	if (app->fini)
		app->fini(&kt->ctx);
	rt_ctx_flush(&kt->ctx);   /* the closes fini queued */
out:
	kt_teardown(kt, worker);
	free(kt);
	return ret;
}
