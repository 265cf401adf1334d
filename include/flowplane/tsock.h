/* tsock.h: API level 3's sockets: blocking TCP for user-level threads (thread.h), over flowplane's stack or Linux sockets. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <flowplane/rt.h>
#include <flowplane/thread.h>

/*
 * Shenango's programming model: a thread per connection that reads and writes as if the
 * socket were a Linux one, and blocks. Each worker runs a scheduler (thread.h) inside the
 * event-callback layer (evl.h): evl's callbacks (a connection accepted, bytes arrived, the
 * output drained, the peer closed) wake the threads waiting for them, and the ready
 * threads run once per round, in evl's poll hook, before the round's writes leave. So the
 * stack, its batching and its zero-copy receive are evl's; a thread adds one switch per
 * wake-up (thread.h: about 3 ns).
 *
 * A read that waits is completed by evl's callback, which copies straight into the
 * reader's buffer; other reads copy out of what evl showed (up to 256 KiB a connection
 * is taken and buffered here; beyond, evl holds the rest and TCP closes the window). Writes copy into evl's
 * output and block while it is full (evl's max_pending, 4 MiB) until it drains.
 *
 * When the run stops, every thread blocked in accept, read or write is woken with an error
 * (NULL, -ECANCELED, -EPIPE) and the ready threads run until none is; a thread that then
 * blocks on something else (a mutex, a sleep) is left where it is.
 */

struct fp_tsock;
struct fp_tlistener;

struct fp_tapp {
	const char *name;
	/* Each worker's first thread: listen, accept, spawn a thread per connection. */
	void (*main)(void *arg);
	void *arg;
	size_t stack_size;            /* per thread; 0: thread.h's default */
	size_t max_pending;           /* output bytes per connection (evl's); 0: 4 MiB */
	size_t max_total_pending;     /* all connections' output (evl's); 0: no bound */
};

/* Run @app on @cfg's workers until SIGINT/SIGTERM or fp_tapp_stop(); fp_rt_run's status. */
int fp_tapp_run(const struct fp_rt_config *cfg, const struct fp_tapp *app);
/* Stop the run (from a thread), with @status as its exit status. */
void fp_tapp_stop(int status);
/* The worker the calling thread runs on. */
unsigned fp_tapp_worker(void);
/* Count @requests served and @errors in the worker's statistics (fp_ctx_count). */
void fp_tapp_count(uint64_t requests, uint64_t errors);
/* Output bytes written and not yet sent on the worker's connections (fp_evl_out_total). */
size_t fp_tapp_out_total(void);

/* Listen on @port (every worker listens; the kernel or the flow groups pick the worker). */
struct fp_tlistener *fp_tsock_listen(uint16_t port);
/* The next connection, blocking; NULL once the run stops. */
struct fp_tsock *fp_tsock_accept(struct fp_tlistener *l);
/* Up to @len bytes, blocking until at least one: the count, 0 at the peer's EOF, or
 * -ECONNRESET (the peer reset), -ECANCELED (the run stops). */
ssize_t fp_tsock_read(struct fp_tsock *s, void *buf, size_t len);
/* All @len bytes, blocking while the output is full: @len, or -EPIPE (closed, reset, the
 * run stops: part may have been sent). */
ssize_t fp_tsock_write(struct fp_tsock *s, const void *buf, size_t len);
/* For an application that bounds its own output (fp-kv's answers must not wait half
 * written): what a write would take now without blocking; an all-or-nothing write of
 * @n pieces that never blocks: 0, -ENOBUFS (no room: nothing written) or -EPIPE; what is
 * written and not yet sent; and a wait until that has left (0, or -EPIPE: the
 * connection is gone). */
size_t fp_tsock_room(const struct fp_tsock *s);
size_t fp_tsock_pending(const struct fp_tsock *s);   /* written, not yet sent */
int fp_tsock_try_writev(struct fp_tsock *s, const struct iovec *iov, unsigned n);
int fp_tsock_wait_drained(struct fp_tsock *s);
/* The peer's IPv4 address and port (host order). */
void fp_tsock_peer(const struct fp_tsock *s, uint32_t *addr, uint16_t *port);
/* Reset @s now, from any thread of its worker: the thread blocked on it wakes with
 * -ECONNABORTED (read) or -EPIPE (write) and must still close it. */
void fp_tsock_abort(struct fp_tsock *s);
/* Close (a FIN after what was written); @s is freed. */
void fp_tsock_close(struct fp_tsock *s);
