/* tserver.c: fp-echo server --threads and spin --threads: the echo and spin servers written with user-level threads and blocking sockets (tsock.h), a thread per connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <flowplane/api.h>
#include <flowplane/tsock.h>

#include "echo.h"

static void *conn_thread(void *arg)
{
	struct fp_tsock *s = arg;
	uint8_t b[8192];   /* on the thread's stack: a write may block mid-echo */
	ssize_t n;

	while ((n = fp_tsock_read(s, b, sizeof(b))) > 0)
		if (fp_tsock_write(s, b, (size_t)n) != n)
			break;
	fp_tsock_close(s);
	return NULL;
}

/* @len bytes exactly: 0, or what the last read said (0 at EOF, -errno). */
static ssize_t read_full(struct fp_tsock *s, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = fp_tsock_read(s, buf + got, len - got);
		if (n <= 0)
			return n ? n : -1;
		got += (size_t)n;
	}
	return 0;
}

/* fp-loadgen's spin protocol (spin.c says it): a header, padding, spin, the header back. */
static void *spin_thread(void *arg)
{
	struct fp_tsock *s = arg;
	uint8_t h[SPIN_HDR], pad[4096];

	while (read_full(s, h, SPIN_HDR) == 0) {
		uint64_t total = echo_le(h + 4, 4), ns = echo_le(h + 8, 8);

		if (echo_le(h, 4) != SPIN_MAGIC || total < SPIN_HDR || total > SPIN_MAX_LEN)
			break;          /* not a request: the connection goes */
		for (uint64_t left = total - SPIN_HDR; left; ) {
			size_t n = left < sizeof(pad) ? (size_t)left : sizeof(pad);
			if (read_full(s, pad, n))
				goto out;
			left -= n;
		}
		fp_spin_ns(ns < SPIN_MAX_NS ? ns : SPIN_MAX_NS);
		if (fp_tsock_write(s, h, SPIN_HDR) != SPIN_HDR)
			break;
	}
out:
	fp_tsock_close(s);
	return NULL;
}

struct tmain {
	const struct echo_opts *o;
	fp_thread_fn conn;
};

static void echo_main(void *arg)
{
	const struct tmain *m = arg;
	const struct echo_opts *o = m->o;
	struct fp_tlistener *l = fp_tsock_listen(o->port);
	struct fp_tsock *s;

	if (!l) {
		fprintf(stderr, "fp-echo: worker %u: out of memory\n", fp_tapp_worker());
		fp_tapp_stop(-ENOMEM);
		return;
	}
	while ((s = fp_tsock_accept(l))) {
		struct fp_thread *t = fp_thread_spawn(NULL, m->conn, s);
		if (!t) {
			fp_tsock_close(s);   /* no memory for a thread: refuse this one */
			continue;
		}
		fp_thread_detach(t);
	}
}

int echo_tserver_run(const struct echo_opts *o)
{
	struct tmain m = { o, conn_thread };
	struct fp_tapp app = { .name = "fp-echo server --threads", .main = echo_main, .arg = &m };

	return fp_tapp_run(&o->rt, &app) ? 1 : 0;
}

int echo_tspin_run(const struct echo_opts *o)
{
	struct tmain m = { o, spin_thread };
	struct fp_tapp app = { .name = "fp-echo spin --threads", .main = echo_main, .arg = &m };

	return fp_tapp_run(&o->rt, &app) ? 1 : 0;
}
