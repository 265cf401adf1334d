/* spin.c: fp-echo spin: a server for fp-loadgen's spin protocol: burn each request's service time, answer its header. */
#include <errno.h>
#include <string.h>

#include <flowplane/clock.h>
#include <flowplane/evl.h>

#include "echo.h"

/*
 * The protocol (apps/loadgen/lg.h): a request is a 16-byte little-endian header, u32 magic
 * "SPIN", u32 total length (16..65536), u64 service_ns, then (length - 16) bytes of padding.
 * The server spins on the TSC for service_ns, on the worker's own core and in the read
 * callback, run to completion as IX and ZygOS do, then answers with the same 16 bytes. So
 * a request's service time is its own and the server's queueing is real: the workload the
 * queueing bounds (tools/qsim) model, with a service-time distribution the client picks.
 *
 * Pipelined requests are served in order, every one of them in one read. A request is
 * answered only when its padding has arrived, and only when the output has room for the
 * answer (else it is left unconsumed and shown again when the output moves). A header that
 * cannot be one (bad magic, impossible length) resets the connection.
 */



static size_t spin_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t off = 0;

	while (len - off >= SPIN_HDR) {
		const uint8_t *h = data + off;
		uint64_t total = echo_le(h + 4, 4), ns = echo_le(h + 8, 8);

		if (echo_le(h, 4) != SPIN_MAGIC || total < SPIN_HDR || total > SPIN_MAX_LEN) {
			fp_ctx_count(fp_evl_ctx(fp_evl_of(c)), 0, 1);
			fp_evl_abort(c);
			return len;
		}
		if (len - off < total)
			break;                  /* its padding is still on the way */
		if (fp_evl_pending(c) + SPIN_HDR > ECHO_MAX_PENDING)
			break;                  /* no room to answer: shown again later */
		fp_spin_ns(ns < SPIN_MAX_NS ? ns : SPIN_MAX_NS);
		if (fp_evl_write(c, h, SPIN_HDR) == -EPIPE)
			return len;             /* closing: nothing more goes back */
		fp_ctx_count(fp_evl_ctx(fp_evl_of(c)), 1, 0);
		off += total;
	}
	return off;
}

static int spin_init(struct fp_evl *evl, void *arg)
{
	const struct echo_opts *o = arg;

	fp_evl_listen(evl, o->port, NULL);
	return 0;
}

static void *spin_accept(struct fp_evl_conn *c, void *larg)
{
	(void)larg;
	return fp_evl_of(c);   /* any non-NULL user pointer: no state per connection */
}

static void spin_closed(struct fp_evl_conn *c, int status)
{
	(void)c;
	(void)status;
}

static const struct fp_evl_ops spin_ops = {
	.accept = spin_accept,
	.read = spin_read,
	.closed = spin_closed,
	.init = spin_init,
	.max_pending = ECHO_MAX_PENDING,
	.max_unread = ECHO_MAX_UNREAD,  /* above SPIN_MAX_LEN: a whole request always fits */
};

int echo_spin_run(const struct echo_opts *o)
{
	struct fp_app app;

	fp_evl_app(&app, &spin_ops, (void *)o);
	app.name = "fp-echo spin";
	return fp_rt_run(&o->rt, &app) ? 1 : 0;
}
