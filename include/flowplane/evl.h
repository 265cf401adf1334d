/* evl.h: the event-callback layer over the native API (libix style): buffered writes, read callbacks, timers. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <flowplane/api.h>

/*
 * What most applications use. Each worker gets one struct fp_evl; each connection one
 * struct fp_evl_conn, found from a condition's cookie in O(1).
 *
 * Reading: @read gets the connection's unconsumed bytes and returns how many it consumed.
 * When nothing is left over from before, the bytes are the receive buffer itself (zero
 * copy); only what a callback leaves unconsumed is copied aside, and the next segment is
 * appended to it, so a parser always sees its pending request in one contiguous run, and a
 * request that arrives whole is never copied. Shown bytes (consumed, or copied aside) go
 * back to the transport (recv_done, reopening the window) at the end of the round.
 *
 * Back-pressure (TCP flow control, carried through) follows what @read consumes. Once it
 * has left max_unread bytes unconsumed (default: max_pending), the bytes that arrive are
 * held: not shown and not given back, so the transport's receive window closes and TCP
 * itself stops the peer; what is held stays in the transport's buffers, bounded by its
 * window. Nothing is dropped and nothing is reset. A read that leaves bytes while the
 * output is full (max_pending bytes pending, or a fp_evl_write() refused with -ENOBUFS
 * since the output last moved) is taken to wait for room: when the output moves, @read is
 * shown what it left again, then the held bytes, in order, while it keeps consuming. So a
 * server that cannot write its reply returns fewer bytes consumed, and the rest comes back
 * once the output has room, like a Linux server that stops reading while its socket is
 * not writable; a connection keeps about max_pending + max_unread at most. A full output
 * alone holds nothing back: a client that consumes the echo of what it sends keeps
 * receiving while its own output waits. An application that stops consuming for a reason
 * of its own (another connection is full) calls fp_evl_read_again() when it can go on. A
 * request larger than max_unread is never shown whole and stalls its connection: size
 * max_unread for the largest request. The peer's EOF waits behind held input.
 *
 * Writing: fp_evl_write() copies into the connection's output queue (fixed-size chunks, so
 * memory never moves under a queued sendv). At the end of each round every connection with
 * pending output gets one sendv (IX's coalescing); what the window did not take is sent
 * again when a SENT condition says the window opened. Writes made outside a round (from a
 * timer) are queued at once and all leave in that timer pass (the runtime executes a timer
 * pass's calls right after it). Pending output is capped (max_pending, default 4 MiB):
 * fp_evl_write() beyond it returns -ENOBUFS and writes nothing.
 *
 * Lifetime: @closed is called exactly once when the connection ends for a reason other than
 * the application's own fp_evl_close/abort: the peer's EOF (status 0; writes made in the
 * callback are still sent, then the connection closes, unless ops->half_close) or death
 * (-errno). After @closed returns, or after fp_evl_close()/fp_evl_abort(), the application
 * must not touch @c again (with half_close, after an EOF: until it closes @c).
 *
 * Stopping: when the run stops (fp_ctx_stop(), SIGINT/SIGTERM), @fini runs, then every
 * connection still open is reset (RST), pending output dropped, as Linux does when a
 * process exits with unread data; no callback follows. An application that wants its last
 * bytes delivered closes and waits for them (drained, or its own protocol) before it
 * stops the run.
 */

struct fp_evl;
struct fp_evl_conn;

struct fp_evl_ops {
	/* A new connection on a listener opened with fp_evl_listen(..., @larg). Return its
	 * user pointer (non-NULL), or NULL to refuse it (it is closed). */
	void *(*accept)(struct fp_evl_conn *c, void *larg);
	/* fp_evl_connect() finished: 0, or -errno (then @c is gone after this returns). */
	void (*connected)(struct fp_evl_conn *c, int status);
	/* In-order bytes; return how many were consumed (the rest is shown again, with more). */
	size_t (*read)(struct fp_evl_conn *c, const uint8_t *data, size_t len);
	/* Every byte written so far has been taken by the transport (optional). */
	void (*drained)(struct fp_evl_conn *c);
	/* See "Lifetime" above. */
	void (*closed)(struct fp_evl_conn *c, int status);
	/* A datagram for a port bound with fp_evl_udp_bind (optional). */
	void (*udp_recv)(struct fp_evl *evl, uint16_t lport, uint32_t raddr, uint16_t rport,
			 const uint8_t *data, size_t len);
	/* Runs on each worker before its loop: listen, connect, arm timers. 0 or -errno. */
	int (*init)(struct fp_evl *evl, void *arg);
	void (*fini)(struct fp_evl *evl);
	/* Optional: once per round, after the timers (fp_app.poll): writes made here leave
	 * together, one sendv per connection, right after it. */
	void (*poll)(struct fp_evl *evl);
	/* Flow-group migration (rt/steer.c, fp-ctl move): @movable says a connection may
	 * change worker. Its evl state moves with it; what the application keeps per worker
	 * it moves in @leaving (on the old worker, the connection still reachable there) and
	 * @arrived (on the new one: fp_evl_of(c) is the new worker's). Both optional; an
	 * application without per-worker state needs neither. Neither is called for a
	 * connection the application has closed or aborted (still draining, it moves too). */
	bool movable;
	void (*leaving)(struct fp_evl_conn *c);
	void (*arrived)(struct fp_evl_conn *c);
	/* The peer's EOF (closed(c, 0)) leaves the connection open for writing, as a Linux
	 * socket after shutdown(SHUT_WR) by the peer: the application may go on writing
	 * and must close it (fp_evl_close/abort) itself. Default: it closes after the
	 * callback (the "Lifetime" rule above). */
	bool half_close;
	/* --sched steal (ZygOS; rt/steal.c): a connection's callbacks may run on any
	 * worker, one batch of its events at a time, in order (fp_evl_of(c) is then the
	 * worker running it). The application promises what fp_app.steal_safe says: a
	 * callback touches only its own connection's state (its user pointer) and what it
	 * guards itself; per-worker state is that of fp_evl_of(c). Outside its callbacks
	 * (a timer, poll, another connection's callback) it touches a connection only
	 * when fp_evl_conn_busy() is false, on the connection's own worker; connections
	 * are still accepted, closed and freed on their own worker. */
	bool steal_safe;
	/* --sched steal for a layer that balances its own work (tsock.c's threads): fp_app's
	 * work_pending, steal and ready (api.h), with this worker's evl. All three or none. */
	bool (*work_pending)(struct fp_evl *evl, bool may_steal);
	unsigned (*steal)(struct fp_evl *evl);
	void (*ready)(struct fp_evl *evl, uint64_t *put, uint64_t *taken);
	size_t max_pending;          /* output bytes per connection; 0 = 4 MiB */
	size_t max_total_pending;    /* output bytes of all connections together, shared
				      * evenly by the workers (0: no bound): past its share, a
				      * worker refuses writes (-ENOBUFS) to connections whose
				      * output is not empty, so clients that do not read stop
				      * being read from, while one that reads is still served */
	size_t max_unread;           /* input @read may leave unconsumed before more is held
				      * back (TCP then stops the peer); 0 = max_pending */
};

/* Fill @app so that fp_rt_run() runs @ops with @arg (@ops must outlive the run). */
void fp_evl_app(struct fp_app *app, const struct fp_evl_ops *ops, void *arg);

struct fp_ctx *fp_evl_ctx(struct fp_evl *evl);
void *fp_evl_user(const struct fp_evl *evl);              /* per-worker application state */
void fp_evl_set_user(struct fp_evl *evl, void *user);

/* Listen on @port; accepted connections call ops->accept(c, @larg). Errors arrive later
 * on the log and make the run stop with that status. */
void fp_evl_listen(struct fp_evl *evl, uint16_t port, void *larg);

/* Open a connection; ops->connected() follows. Returns the connection, or NULL (ENOMEM). */
struct fp_evl_conn *fp_evl_connect(struct fp_evl *evl, uint32_t addr, uint16_t port, void *user);

/* Copy @len bytes into @c's output. 0, -ENOBUFS (over max_pending: nothing written; what
 * read leaves is shown again when the output moves) or -EPIPE (closing or dead). */
int fp_evl_write(struct fp_evl_conn *c, const void *data, size_t len);
/* fp_evl_write of @n pieces, all or nothing: one answer made of a header, a value and a
 * trailer costs one check and one append instead of three. */
int fp_evl_writev(struct fp_evl_conn *c, const struct iovec *iov, unsigned n);
/* The same without the copy: @data is sent from where it is, so it must stay unchanged
 * and mapped until the connection is released (an application's immutable content, as a
 * web server's files read at start). It counts in max_pending, not in max_total_pending
 * (it holds no memory of the loop's). Where the stack can see a precomputed checksum of
 * it (fp_stack_config.csum_index), segments carrying it are not summed again. */
int fp_evl_write_ref(struct fp_evl_conn *c, const void *data, size_t len);
size_t fp_evl_pending(const struct fp_evl_conn *c);       /* bytes not yet taken */
/* What fp_evl_write() would take from @c now: its own cap, and on a connection whose
 * output is not empty, what is left of the worker's share of max_total_pending (an
 * application that waits for room is shown its input again once @c's output moves). */
size_t fp_evl_room(const struct fp_evl_conn *c);

/* Show @c's unconsumed input to @read again, then the input held back while it is not
 * full: for an application whose read left bytes for a reason of its own and can go on
 * now. In a callback it happens at the end of the round (once per round); from a timer,
 * at once. */
void fp_evl_read_again(struct fp_evl_conn *c);

/* Close after the pending output has been taken (FIN follows it); @c is gone for the
 * application at once. */
void fp_evl_close(struct fp_evl_conn *c);
/* Reset now, dropping pending output. */
void fp_evl_abort(struct fp_evl_conn *c);

void *fp_evl_conn_user(const struct fp_evl_conn *c);
void fp_evl_conn_set_user(struct fp_evl_conn *c, void *user);
struct fp_evl *fp_evl_of(const struct fp_evl_conn *c);
/* --sched steal, on @c's own worker outside @c's callbacks: whether a batch of @c's events
 * is queued or running (perhaps elsewhere), so that @c is not to be touched now (try
 * again later: it is a fact of the home's, and changes only between its rounds). False
 * when not stealing. */
bool fp_evl_conn_busy(const struct fp_evl_conn *c);
/* @c's flow, as accepted or connected (NULL before): a key for fp_flow_busy() that stays
 * valid to ask about after @c is gone (the flow then is not busy). */
struct fp_flow *fp_evl_conn_flow(const struct fp_evl_conn *c);
uint32_t fp_evl_conn_raddr(const struct fp_evl_conn *c);
uint16_t fp_evl_conn_rport(const struct fp_evl_conn *c);

/* UDP: bind @port (datagrams go to ops->udp_recv); send copies @data (0 or -errno later on
 * the log; a datagram is never partly sent). */
void fp_evl_udp_bind(struct fp_evl *evl, uint16_t port);
int fp_evl_udp_send(struct fp_evl *evl, uint16_t sport, uint32_t addr, uint16_t rport,
		    const void *data, size_t len);

/* Live connections on this worker (for leak checks and stats). */
unsigned fp_evl_conns(const struct fp_evl *evl);
/* Output bytes pending on this worker's connections, and writes refused for the budget. */
size_t fp_evl_out_total(const struct fp_evl *evl);
uint64_t fp_evl_out_refused(const struct fp_evl *evl);
