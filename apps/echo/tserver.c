/* tserver.c: fp-echo server --threads: the echo server written with user-level threads and blocking sockets (tsock.h), a thread per connection. */
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

static void echo_main(void *arg)
{
	const struct echo_opts *o = arg;
	struct fp_tlistener *l = fp_tsock_listen(o->port);
	struct fp_tsock *s;

	if (!l) {
		fprintf(stderr, "fp-echo: worker %u: out of memory\n", fp_tapp_worker());
		fp_tapp_stop(-ENOMEM);
		return;
	}
	while ((s = fp_tsock_accept(l))) {
		struct fp_thread *t = fp_thread_spawn(NULL, conn_thread, s);
		if (!t) {
			fp_tsock_close(s);   /* no memory for a thread: refuse this one */
			continue;
		}
		fp_thread_detach(t);
	}
}

int echo_tserver_run(const struct echo_opts *o)
{
	struct fp_tapp app = { .name = "fp-echo server --threads", .main = echo_main,
			       .arg = (void *)o };

	return fp_tapp_run(&o->rt, &app) ? 1 : 0;
}
