/* stack.c: fp-stack-bench: two stacks on the simulated wire: round trips, bulk throughput, memory. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/net.h>
#include <flowplane/pool.h>
#include <flowplane/sim.h>

/*
 * Three measurements of the stack alone, with no device: everything runs in one thread on
 * a fault-free simulated wire, so the figures are the stack's own cost (plus the wire's
 * one copy per frame, which a real NIC does by DMA).
 *
 *   rr    N request/response round trips of 64 bytes on one connection. Run it under
 *         valgrind --tool=callgrind with two values of N: the difference divided by the
 *         difference in N is the instruction cost of one round trip, setup cancelled out
 *         (bench/stack_callgrind.py does this and splits the cost per layer).
 *   bulk  one connection moves --bytes from client to server; MB per second of process
 *         CPU time (both stacks and the wire share the one CPU).
 *   mem   --conns idle established connections; heap bytes per connection.
 */

#define SERVER_IP   0x0a000001u /* 10.0.0.1 */
#define CLIENT_IP   0x0a000002u /* 10.0.0.2 */
#define PORT        7
#define MSG_LEN     64
#define CHUNK       (64u * 1024)

static const char *prog = "fp-stack-bench";

static void die_usage(const char *msg)
{
	fprintf(stderr, "%s: %s (try --help)\n", prog, msg);
	exit(2);
}

static void die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
	exit(1);
}

struct side {
	struct fp_pool *pool;
	struct fp_pool_cache cache;
	struct fp_stack *st;
};

struct bench {
	struct side srv, cli;
	struct fp_sim *sim;
	/* rr */
	uint64_t rt_target, rt_done;
	uint32_t rr_got;
	/* bulk */
	uint64_t bulk_target, bulk_sent, bulk_recv;
	bool verify;            /* check every received byte against the sent pattern */
	uint64_t bad_bytes;
	/* mem */
	uint64_t conns_target, conns_up;
	int failed;
	uint8_t buf[CHUNK];
};

static void side_init(struct side *s, uint32_t ip, uint8_t mac_last, uint32_t n_bufs,
		      uint32_t max_conns)
{
	struct fp_pool_params pp = { .name = "bench", .n_bufs = n_bufs, .buf_size = 2048 };
	s->pool = fp_pool_create(&pp);
	if (!s->pool || fp_pool_cache_init(&s->cache, s->pool) != 0)
		die("pool");
	struct fp_stack_config cfg = {
		.mac = {{0x02, 0, 0, 0, 0, mac_last}},
		.ipv4 = ip, .prefix_len = 24,
		.cache = &s->cache,
		.max_conns = max_conns,
		.syn_backlog = max_conns,
		.secret = 42,
	};
	s->st = fp_stack_create(&cfg, 0);
	if (!s->st)
		die("fp_stack_create");
}

static void side_fini(struct side *s)
{
	fp_stack_destroy(s->st);
	fp_pool_cache_flush(&s->cache);
	fp_pool_destroy(s->pool);
}

static int send_msg(struct bench *b, struct fp_tcp_conn *c)
{
	ssize_t n = fp_tcp_send(b->cli.st, c, b->buf, MSG_LEN);
	return n == MSG_LEN ? 0 : -1;
}

/* Stream byte k is buf[k % CHUNK]: the client always sends from where the stream is. */
static void verify_bytes(struct bench *b, const struct fp_mbuf *m, uint32_t len)
{
	uint32_t off = 0;
	for (const struct fp_mbuf *s = m; s && off < len; s = s->next) {
		const uint8_t *p = fp_mbuf_data(s);
		for (uint32_t i = 0; i < s->data_len && off < len; i++, off++)
			if (p[i] != b->buf[(b->bulk_recv + off) % CHUNK])
				b->bad_bytes++;
	}
}

/* The server echoes whatever arrives and releases the receive buffer at once. */
static uint64_t server_app(struct fp_stack *st, void *arg, uint64_t now_us)
{
	struct bench *b = arg;
	struct fp_event ev[64];
	unsigned n;

	(void)now_us;
	while ((n = fp_stack_events(st, ev, 64)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			struct fp_event *e = &ev[i];
			switch (e->type) {
			case FP_EV_TCP_RECV:
				if (b->bulk_target) {
					if (b->verify)
						verify_bytes(b, e->m, e->len);
					b->bulk_recv += e->len;
				} else {
					uint8_t tmp[MSG_LEN * 4];
					uint32_t len = e->len < sizeof(tmp) ? e->len : sizeof(tmp);
					fp_mbuf_read(e->m, 0, tmp, len);
					if (fp_tcp_send(st, e->conn, tmp, len) != (ssize_t)len)
						b->failed = 1;
				}
				fp_tcp_recv_done(st, e->conn, e->len);
				break;
			case FP_EV_TCP_EOF:
			case FP_EV_TCP_DEAD:
				fp_tcp_close(st, e->conn);
				break;
			default:
				break;
			}
		}
	}
	return UINT64_MAX;
}

static void client_bulk_push(struct bench *b, struct fp_tcp_conn *c)
{
	while (b->bulk_sent < b->bulk_target) {
		uint64_t left = b->bulk_target - b->bulk_sent, off = b->bulk_sent % CHUNK;
		uint64_t room = CHUNK - off;
		ssize_t n = fp_tcp_send(b->cli.st, c, b->buf + off, left < room ? left : room);
		if (n <= 0)
			break;
		b->bulk_sent += (uint64_t)n;
	}
}

static void client_event(struct bench *b, struct fp_event *e)
{
	struct fp_stack *st = b->cli.st;

	switch (e->type) {
	case FP_EV_TCP_CONNECTED:
		if (e->status != 0) {
			b->failed = 1;
			break;
		}
		b->conns_up++;
		if (b->rt_target && send_msg(b, e->conn) != 0)
			b->failed = 1;
		if (b->bulk_target)
			client_bulk_push(b, e->conn);
		break;
	case FP_EV_TCP_SENT:
		if (b->bulk_target)
			client_bulk_push(b, e->conn);
		break;
	case FP_EV_TCP_RECV:
		b->rr_got += e->len;
		fp_tcp_recv_done(st, e->conn, e->len);
		if (b->rr_got >= MSG_LEN) {
			b->rr_got -= MSG_LEN;
			if (++b->rt_done < b->rt_target && send_msg(b, e->conn) != 0)
				b->failed = 1;
		}
		break;
	case FP_EV_TCP_DEAD:
		b->failed = 1;
		fp_tcp_close(st, e->conn);
		break;
	default:
		break;
	}
}

static uint64_t client_app(struct fp_stack *st, void *arg, uint64_t now_us)
{
	struct bench *b = arg;
	struct fp_event ev[64];
	unsigned n;

	(void)now_us;
	while ((n = fp_stack_events(st, ev, 64)) > 0)
		for (unsigned i = 0; i < n; i++)
			client_event(b, &ev[i]);
	return UINT64_MAX;
}

static bool rr_done(void *arg)
{
	struct bench *b = arg;
	return b->failed || b->rt_done >= b->rt_target;
}

static bool bulk_done(void *arg)
{
	struct bench *b = arg;
	return b->failed || b->bulk_recv >= b->bulk_target;
}

static bool conns_done(void *arg)
{
	struct bench *b = arg;
	return b->failed || b->conns_up >= b->conns_target;
}

/* The fault mix of the stack issue's simulation test: 2% loss, reordering and duplication,
 * 0.1% corruption. */
static const struct fp_sim_params faults = {
	.seed = 1, .delay_us = 5, .jitter_us = 2, .loss = 0.02, .reorder = 0.02,
	.duplicate = 0.02, .corrupt = 0.001,
};

static struct bench *bench_new(uint32_t n_bufs, uint32_t max_conns)
{
	struct bench *b = calloc(1, sizeof(*b));
	if (!b)
		die("calloc");
	for (size_t i = 0; i < sizeof(b->buf); i++)
		b->buf[i] = (uint8_t)(i * 7 + 1);
	side_init(&b->srv, SERVER_IP, 1, n_bufs, max_conns);
	side_init(&b->cli, CLIENT_IP, 2, n_bufs, max_conns);
	struct fp_sim_params sp = { .seed = 1, .delay_us = 5 };
	b->sim = fp_sim_create(&sp, 0);
	if (!b->sim)
		die("fp_sim_create");
	if (fp_sim_attach(b->sim, b->srv.st, &b->srv.cache, server_app, b) < 0 ||
	    fp_sim_attach(b->sim, b->cli.st, &b->cli.cache, client_app, b) < 0)
		die("fp_sim_attach");
	if (fp_tcp_listen(b->srv.st, PORT, 0) != 0)
		die("fp_tcp_listen");
	return b;
}

static void bench_free(struct bench *b)
{
	fp_sim_destroy(b->sim);
	side_fini(&b->cli);
	side_fini(&b->srv);
	free(b);
}

static struct fp_tcp_conn *dial(struct bench *b)
{
	int err = 0;
	struct fp_tcp_conn *c = fp_tcp_dial(b->cli.st, SERVER_IP, PORT, 0, &err);
	if (!c) {
		errno = -err;
		die("fp_tcp_dial");
	}
	return c;
}

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_rr(uint64_t count)
{
	struct bench *b = bench_new(4096, 16);
	b->rt_target = count;
	dial(b);
	double t0 = cpu_seconds();
	fp_sim_run(b->sim, UINT64_MAX, rr_done, b);
	double t = cpu_seconds() - t0;
	int ok = !b->failed && b->rt_done == count;
	printf("rr: %llu round trips of %d bytes, %.0f ns CPU each (both stacks and the wire)%s\n",
	       (unsigned long long)b->rt_done, MSG_LEN, t * 1e9 / (double)(count ? count : 1),
	       ok ? "" : " FAILED");
	bench_free(b);
	return ok ? 0 : 1;
}

static int run_bulk(uint64_t bytes, bool with_faults)
{
	struct bench *b = bench_new(16384, 16);
	b->bulk_target = bytes;
	if (with_faults) {
		fp_sim_set_params(b->sim, &faults);
		b->verify = true;
	}
	dial(b);
	double t0 = cpu_seconds();
	fp_sim_run(b->sim, UINT64_MAX, bulk_done, b);
	double t = cpu_seconds() - t0;
	int ok = !b->failed && b->bulk_recv == bytes && !b->bad_bytes;
	printf("bulk: %llu bytes in %.3f s CPU: %.0f MB/s of CPU time (both stacks and the wire)%s\n",
	       (unsigned long long)b->bulk_recv, t, (double)b->bulk_recv / 1e6 / t,
	       ok ? "" : " FAILED");
	if (with_faults) {
		struct fp_sim_stats ss;
		struct fp_net_stats ns;
		fp_sim_stats(b->sim, &ss);
		fp_stack_stats(b->cli.st, &ns);
		printf("      with faults: %llu frames, %llu lost, %llu reordered, %llu duplicated, "
		       "%llu corrupted; %llu retransmissions (%llu fast, %llu on timeout); "
		       "%llu bytes differ from what was sent; %.3f s of virtual time\n",
		       (unsigned long long)ss.frames, (unsigned long long)ss.lost,
		       (unsigned long long)ss.reordered, (unsigned long long)ss.duplicated,
		       (unsigned long long)ss.corrupted, (unsigned long long)ns.tcp_rexmit,
		       (unsigned long long)ns.tcp_fast_rexmit, (unsigned long long)ns.tcp_rto,
		       (unsigned long long)b->bad_bytes, (double)fp_sim_now(b->sim) / 1e6);
	}
	bench_free(b);
	return ok ? 0 : 1;
}

static size_t heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/*
 * Heap bytes per idle established connection, both ends counted and halved: the stacks
 * are sized for n connections, so anything allocated up front per connection (control
 * block arrays, hash tables) is included; a baseline of two stacks sized for one
 * connection (with the same pools) is subtracted so the per-stack fixed cost (timer wheel,
 * RSS tables) and the pools (data buffers and their headers) are not.
 */
static int run_mem(uint64_t n)
{
	uint32_t n_bufs = (uint32_t)(n * 4 + 1024);
	size_t h0 = heap_bytes();
	struct bench *base = bench_new(n_bufs, 1);
	size_t fixed = heap_bytes() - h0;
	bench_free(base);

	h0 = heap_bytes();
	struct bench *b = bench_new(n_bufs, (uint32_t)n);
	/* Dial in waves so the transient queues (tx, events, the wire's in-flight heap) stay
	 * small: what remains afterwards is what the connections themselves hold. */
	for (uint64_t i = 0; i < n && !b->failed; i += 64) {
		b->conns_target = i + 64 < n ? i + 64 : n;
		for (uint64_t k = i; k < b->conns_target; k++)
			dial(b);
		fp_sim_run(b->sim, UINT64_MAX, conns_done, b);
	}
	/* Let delayed ACKs and timers settle: idle means nothing pending but keep-alive. */
	fp_sim_run(b->sim, fp_sim_now(b->sim) + 100000, NULL, NULL);
	size_t used = heap_bytes() - h0;
	uint32_t live = fp_stack_tcp_conns(b->srv.st) + fp_stack_tcp_conns(b->cli.st);
	int ok = !b->failed && b->conns_up == n && live == 2 * n + 1; /* + the listener */
	double per = ((double)used - (double)fixed) / (double)(2 * n);
	printf("mem: %llu connections each side, %u control blocks; %.0f heap bytes per idle "
	       "established connection (per-stack fixed cost and buffer pools excluded)%s\n",
	       (unsigned long long)n, live, per, ok ? "" : " FAILED");
	bench_free(b);
	return ok ? 0 : 1;
}

static void usage(void)
{
	printf("usage: %s rr|bulk|mem [--count N] [--bytes N] [--faults] [--conns N]\n"
	       "  rr    N 64-byte request/response round trips on one connection\n"
	       "        (--count, default 10000); run under callgrind for instructions per RT\n"
	       "  bulk  one transfer of --bytes (default 100000000); MB/s of CPU time;\n"
	       "        --faults: 2%% loss, reordering and duplication, 0.1%% corruption,\n"
	       "        and every received byte checked\n"
	       "  mem   --conns idle established connections (default 10000); bytes each\n"
	       "Two stacks on a fault-free simulated wire in one thread; no device.\n", prog);
}

static uint64_t parse_u64(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || end == s || v == 0 || s[0] == '-') {
		char msg[160];
		snprintf(msg, sizeof(msg), "%s wants a positive integer, got '%s'", opt, s);
		die_usage(msg);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"count", required_argument, NULL, 'c'},
		{"bytes", required_argument, NULL, 'b'},
		{"conns", required_argument, NULL, 'n'},
		{"faults", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	uint64_t count = 10000, bytes = 100000000, conns = 10000;
	bool with_faults = false;
	int o;

	opterr = 0; /* one line of our own on a bad option, not getopt's too */
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'c': count = parse_u64("--count", optarg); break;
		case 'b': bytes = parse_u64("--bytes", optarg); break;
		case 'n': conns = parse_u64("--conns", optarg); break;
		case 'f': with_faults = true; break;
		case 'h': usage(); return 0;
		default: {
			char msg[160];
			snprintf(msg, sizeof(msg), "unknown or incomplete option '%s'", argv[optind - 1]);
			die_usage(msg);
		}
		}
	}
	if (optind != argc - 1)
		die_usage("expected one of rr, bulk, mem");
	const char *what = argv[optind];
	if (!strcmp(what, "rr"))
		return run_rr(count);
	if (!strcmp(what, "bulk"))
		return run_bulk(bytes, with_faults);
	if (!strcmp(what, "mem")) {
		if (conns > 60000)
			die_usage("--conns is at most 60000 (one client address's ephemeral ports)");
		return run_mem(conns);
	}
	die_usage("expected one of rr, bulk, mem");
}
