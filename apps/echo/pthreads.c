/* pthreads.c: fp-echo server --pthreads and spin --pthreads: the same servers as a Linux thread per connection on blocking Linux sockets, the peer the user-level threads are measured against. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flowplane/clock.h>

#include "echo.h"

/*
 * Not flowplane: Linux sockets and Linux threads, written as tserver.c is written on
 * tsock.h, so issue 19's comparison (the same threaded application on pthreads, and on
 * flowplane's threads) runs the same code shape on both. The whole process is pinned to
 * the first core of --cores (default: any), as one flowplane worker is; SIGINT or SIGTERM
 * stops it (exit status 0).
 */

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static ssize_t read_full(int fd, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n <= 0)
			return n ? n : -1;
		got += (size_t)n;
	}
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void *echo_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t b[8192];
	ssize_t n;

	while ((n = read(fd, b, sizeof(b))) > 0)
		if (write_all(fd, b, (size_t)n))
			break;
	close(fd);
	return NULL;
}

static void *spin_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t h[SPIN_HDR], pad[4096];

	while (read_full(fd, h, SPIN_HDR) == 0) {
		uint64_t total = echo_le(h + 4, 4), ns = echo_le(h + 8, 8);

		if (echo_le(h, 4) != SPIN_MAGIC || total < SPIN_HDR || total > SPIN_MAX_LEN)
			break;
		for (uint64_t left = total - SPIN_HDR; left; ) {
			size_t k = left < sizeof(pad) ? (size_t)left : sizeof(pad);
			if (read_full(fd, pad, k))
				goto out;
			left -= k;
		}
		fp_spin_ns(ns < SPIN_MAX_NS ? ns : SPIN_MAX_NS);
		if (write_all(fd, h, SPIN_HDR))
			break;
	}
out:
	close(fd);
	return NULL;
}

static int run(const struct echo_opts *o, void *(*conn)(void *))
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(o->port),
				  .sin_addr.s_addr = htonl(o->rt.ipv4) };
	struct sigaction act = { .sa_handler = on_stop };
	pthread_attr_t attr;
	int one = 1, lfd;

	if (o->rt.cores_set && o->rt.cores[0] >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(o->rt.cores[0], &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			fprintf(stderr, "fp-echo: --pthreads: cannot pin to core %d: %s\n",
				o->rt.cores[0], strerror(errno));
			return 1;
		}
	}
	fp_tsc_calibrate(0);             /* the spin's clock, as fp_rt_run does it */
	sigaction(SIGINT, &act, NULL);   /* no SA_RESTART: accept returns EINTR */
	sigaction(SIGTERM, &act, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4096)) {
		fprintf(stderr, "fp-echo: --pthreads: listen on port %u: %s\n", o->port,
			strerror(errno));
		return 1;
	}
	fprintf(stderr, "fp-echo: %s --pthreads: Linux threads and sockets on port %u\n", o->cmd,
		o->port);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64u << 10);
	while (!stop) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE) {
				usleep(10000);   /* out of files: others must close first */
				continue;
			}
			fprintf(stderr, "fp-echo: --pthreads: accept: %s\n", strerror(errno));
			break;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (pthread_create(&t, &attr, conn, (void *)(intptr_t)fd))
			close(fd);   /* no thread: refuse this one */
	}
	pthread_attr_destroy(&attr);
	close(lfd);
	return stop ? 0 : 1;
}

int echo_pthreads_run(const struct echo_opts *o)
{
	return run(o, o->mode == ECHO_SPIN ? spin_conn : echo_conn);
}
