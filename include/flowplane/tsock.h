/* tsock.h: API level 3's sockets: blocking TCP for user-level threads (thread.h), over flowplane's stack or Linux sockets. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
 * Reads copy out of what evl showed (up to 256 KiB a connection is taken and buffered
 * here; beyond, evl holds the rest and TCP closes the window). Writes copy into evl's
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
};

/* Run @app on @cfg's workers until SIGINT/SIGTERM or fp_tapp_stop(); fp_rt_run's status. */
int fp_tapp_run(const struct fp_rt_config *cfg, const struct fp_tapp *app);
/* Stop the run (from a thread), with @status as its exit status. */
void fp_tapp_stop(int status);
/* The worker the calling thread runs on. */
unsigned fp_tapp_worker(void);

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
/* Close (a FIN after what was written); @s is freed. */
void fp_tsock_close(struct fp_tsock *s);
