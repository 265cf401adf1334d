/* server.c: fp-echo server: every byte read on TCP (and every UDP datagram) is sent back. */
#include <errno.h>

#include <flowplane/evl.h>

#include "echo.h"

/*
 * The read callback gets the receive buffer itself (zero copy) and fp_evl_write copies
 * what it echoes into the connection's output, which evl sends with one sendv per round.
 * A client that sends without reading fills the output to ECHO_MAX_PENDING; from then
 * the server consumes only what it could write (a refused write consumes nothing), evl
 * shows the rest again once the output moves, and past ECHO_MAX_UNREAD left unread holds
 * what arrives, so the receive window closes and TCP stops the client: nothing is dropped
 * or reset, as with a Linux echo server that stops reading while its socket is not
 * writable.
 */

static int srv_init(struct fp_evl *evl, void *arg)
{
	const struct echo_opts *o = arg;

	fp_evl_listen(evl, o->port, NULL);
	if (o->udp)
		fp_evl_udp_bind(evl, o->port);
	return 0;
}

static void *srv_accept(struct fp_evl_conn *c, void *larg)
{
	(void)larg;
	return fp_evl_of(c);   /* any non-NULL user pointer: the server keeps no state */
}

static size_t srv_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t room = ECHO_MAX_PENDING - fp_evl_pending(c);
	size_t n = len < room ? len : room;
	int rc;

	if (!n)
		return 0;      /* output full: shown again once it moves */
	rc = fp_evl_write(c, data, n);
	if (rc == -EPIPE)
		return len;    /* closing: nothing more goes back */
	if (rc)
		return 0;      /* -ENOBUFS: nothing written, so nothing consumed */
	fp_ctx_count(fp_evl_ctx(fp_evl_of(c)), 1, 0);
	return n;
}

static void srv_closed(struct fp_evl_conn *c, int status)
{
	(void)c;
	(void)status;      /* the peer went away: evl sends what is queued, then closes */
}

static void srv_udp(struct fp_evl *evl, uint16_t lport, uint32_t raddr, uint16_t rport,
		    const uint8_t *data, size_t len)
{
	int rc = fp_evl_udp_send(evl, lport, raddr, rport, data, len);

	fp_ctx_count(fp_evl_ctx(evl), 1, rc ? 1 : 0);
}

static const struct fp_evl_ops srv_ops = {
	.accept = srv_accept,
	.read = srv_read,
	.closed = srv_closed,
	.udp_recv = srv_udp,
	.init = srv_init,
	.max_pending = ECHO_MAX_PENDING,
	.max_unread = ECHO_MAX_UNREAD,  /* echoed piecewise: no request needs to be whole */
	.movable = true,                /* nothing per worker: a connection may change worker */
	.steal_safe = true,             /* and its callbacks may run on any (--sched steal) */
};

int echo_server_run(const struct echo_opts *o)
{
	struct fp_app app;
	int rc;

	fp_evl_app(&app, &srv_ops, (void *)o);
	app.name = "fp-echo server";
	rc = fp_rt_run(&o->rt, &app);
	return rc ? 1 : 0;     /* what failed is already on stderr (startup or the log) */
}
