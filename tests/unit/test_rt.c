/* test_rt.c: the runtime end to end over the in-process pair: TCP and UDP echo, evl back-pressure and stop, idle sleep, options, stats. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include <flowplane/dev.h>
#include <flowplane/evl.h>
#include <flowplane/rt.h>
#include <flowplane/rt_stats.h>

#include "harness.h"
#include "defs.h"

/*
 * Two workers of one fp_rt_run, joined by a pair (dev.h): worker 0 is 10.9.0.1 and serves
 * (TCP echo on 7, UDP echo on 9), worker 1 is 10.9.0.2 and is the client that checks
 * every byte and stops the run. Everything the runtime does runs: the loop, the calls,
 * timers, idle sleep, the stats segment. The caller owns the pair: after the run the test
 * drains it and checks that every buffer of both pools came back. The evl tests run
 * fp-echo's server logic the same way, and two runs side by side for a client that stops.
 */
#define IP0        0x0a090001u      /* 10.9.0.1; worker i is IP0 + i */
#define ECHO_PORT  7
#define UDP_PORT   9
#define UDP_CLIENT 5000
#define TOTAL      (1u << 20)       /* bytes the TCP client sends and checks */
#define CHUNK      (64u << 10)      /* bytes per client sendv */
#define MAX_SEGS   4096             /* RECV segments the server may hold */
#define UDP_COUNT  200
#define UDP_INFLIGHT 4
#define DEADLINE_US (20u * 1000 * 1000)
#define LISTEN_COOKIE 1

enum test_mode { MODE_TCP, MODE_UDP, MODE_IDLE };

/* What both workers share: set up before the run, read after it. */
static struct {
	enum test_mode mode;
	char stats_name[64];
	uint8_t *pattern;
	const struct fp_rt_stats_hdr *seg;   /* mapped by worker 0 at init, kept */
	size_t seg_size;
	int result;                          /* first failure seen by a handler */
	uint64_t echoed, udp_ok;
} T;

#define FAIL(ctx, why) test_fail((ctx), (why), __LINE__)

static void test_fail(struct fp_ctx *ctx, const char *why, int line)
{
	fprintf(stderr, "# worker %u: %s (line %d)\n", fp_ctx_worker(ctx), why, line);
	if (!T.result)
		T.result = -EBADMSG;
	fp_ctx_stop(ctx, -EBADMSG);
}

/* ---- the server (worker 0): zero-copy echo, holding what the window did not take ---- */

struct srv_conn {
	struct fp_flow *flow;
	struct iovec segs[MAX_SEGS];   /* received, not yet sent back (point into RECV data) */
	unsigned head, n;
	struct iovec iov[64];          /* the sendv in flight (valid until it executes) */
	uint64_t offered;
	bool inflight, wait_sent, eof, closed;
};

struct srv {
	struct srv_conn *conn;         /* one connection is all the test makes */
	struct iovec *udp_iov;         /* UDP echoes queued this round */
	unsigned udp_cap;
};

static void srv_sent(struct fp_ctx *ctx, struct srv_conn *c, int64_t ret)
{
	uint64_t left = ret > 0 ? (uint64_t)ret : 0;

	c->inflight = false;
	if (ret < 0 && ret != -ENOBUFS)
		FAIL(ctx, "server sendv failed");
	if ((uint64_t)left < c->offered)
		c->wait_sent = true;
	if (left)
		fp_recv_done(ctx, c->flow, (uint32_t)left);  /* sent: those bytes may go */
	T.echoed += left;
	while (left) {
		struct iovec *s = &c->segs[c->head];
		uint64_t k = left < s->iov_len ? left : s->iov_len;
		s->iov_base = (uint8_t *)s->iov_base + k;
		s->iov_len -= k;
		left -= k;
		if (!s->iov_len) {
			c->head = (c->head + 1) % MAX_SEGS;
			c->n--;
		}
	}
}

static void srv_push(struct fp_ctx *ctx, struct srv_conn *c)
{
	unsigned k = 0;

	if (c->closed || c->inflight || c->wait_sent || !c->n) {
		if (!c->closed && c->eof && !c->n && !c->inflight) {
			fp_close(ctx, c->flow);
			c->closed = true;
		}
		return;
	}
	c->offered = 0;
	for (; k < c->n && k < FP_ARRAY_SIZE(c->iov); k++) {
		c->iov[k] = c->segs[(c->head + k) % MAX_SEGS];
		c->offered += c->iov[k].iov_len;
	}
	fp_sendv(ctx, c->flow, 0, c->iov, k);
	c->inflight = true;
}

static void srv_cond(struct fp_ctx *ctx, struct srv *s, const struct fp_cond *cd, unsigned *nu)
{
	struct srv_conn *c = s->conn;

	switch (cd->type) {
	case FP_COND_KNOCK:
		if (c) {
			FAIL(ctx, "a second connection");
			return;
		}
		c = s->conn = calloc(1, sizeof(*c));
		c->flow = cd->flow;
		fp_accept(ctx, cd->flow, 2);
		return;
	case FP_COND_RECV:
		if (!c || cd->flow != c->flow || c->n == MAX_SEGS) {
			FAIL(ctx, "RECV for no connection, or too many segments");
			return;
		}
		c->segs[(c->head + c->n++) % MAX_SEGS] = (struct iovec){ (void *)cd->data, cd->len };
		return;
	case FP_COND_SENT:  if (c) c->wait_sent = false; return;
	case FP_COND_EOF:   if (c) c->eof = true; return;
	case FP_COND_DEAD:
		if (c && !c->closed) {
			fp_close(ctx, c->flow);
			c->closed = true;
		}
		return;
	case FP_COND_UDP_RECV:
		s->udp_iov[*nu] = (struct iovec){ (void *)cd->data, cd->len };
		fp_udp_sendto(ctx, UDP_PORT, cd->raddr, cd->rport, &s->udp_iov[(*nu)++], 0);
		fp_udp_done(ctx, cd->m);   /* after the send: calls run in order */
		return;
	}
}

static void srv_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
		       const struct fp_call *rets, unsigned n_rets)
{
	struct srv *s = fp_ctx_user(ctx);
	unsigned nu = 0;

	if (n > s->udp_cap) {
		s->udp_cap = n;
		s->udp_iov = realloc(s->udp_iov, n * sizeof(*s->udp_iov));
	}
	/* Returns first: a short sendv waits for a SENT, which may be in this very round. */
	for (unsigned i = 0; i < n_rets; i++) {
		if (rets[i].type == FP_CALL_SENDV && s->conn)
			srv_sent(ctx, s->conn, rets[i].ret);
		else if ((rets[i].type == FP_CALL_LISTEN || rets[i].type == FP_CALL_UDP_BIND) &&
			 rets[i].ret)
			FAIL(ctx, "listen/bind failed");
	}
	for (unsigned i = 0; i < n; i++)
		srv_cond(ctx, s, &conds[i], &nu);
	if (s->conn)
		srv_push(ctx, s->conn);
}

/* ---- the client (worker 1) ---- */

struct cli {
	struct fp_flow *flow;
	struct iovec iov;
	uint8_t udp_buf[UDP_INFLIGHT][1500];
	struct iovec udp_iov[UDP_INFLIGHT];
	uint64_t sent, recvd, offered;
	unsigned udp_sent;
	bool connected, inflight, wait_sent, done;
};

static size_t udp_len(unsigned seq) { return 1 + (seq * 97u) % 1400; }

static void cli_udp_send(struct fp_ctx *ctx, struct cli *c)
{
	unsigned slot = c->udp_sent % UDP_INFLIGHT;
	size_t len = udp_len(c->udp_sent);

	memcpy(c->udp_buf[slot], T.pattern + c->udp_sent, len);
	c->udp_iov[slot] = (struct iovec){ c->udp_buf[slot], len };
	fp_udp_sendto(ctx, UDP_CLIENT, IP0, UDP_PORT, &c->udp_iov[slot], c->udp_sent);
	c->udp_sent++;
}

static void cli_udp_recv(struct fp_ctx *ctx, struct cli *c, const struct fp_cond *cd)
{
	unsigned seq = (unsigned)T.udp_ok;

	if (cd->len != udp_len(seq) || memcmp(cd->data, T.pattern + seq, cd->len))
		FAIL(ctx, "UDP echo differs (or came out of order)");
	fp_udp_done(ctx, cd->m);
	if (++T.udp_ok == UDP_COUNT && !c->done) {
		c->done = true;
		fp_ctx_stop(ctx, 0);
	} else if (c->udp_sent < UDP_COUNT) {
		cli_udp_send(ctx, c);
	}
}

static void cli_recv(struct fp_ctx *ctx, struct cli *c, const struct fp_cond *cd)
{
	if (c->recvd + cd->len > TOTAL || memcmp(cd->data, T.pattern + c->recvd, cd->len)) {
		FAIL(ctx, "echoed bytes differ from what was sent");
		return;
	}
	c->recvd += cd->len;
	fp_recv_done(ctx, c->flow, cd->len);
	if (c->recvd == TOTAL && !c->done) {
		c->done = true;
		fp_close(ctx, c->flow);
		fp_ctx_stop(ctx, 0);
	}
}

static void cli_cond(struct fp_ctx *ctx, struct cli *c, const struct fp_cond *cd)
{
	switch (cd->type) {
	case FP_COND_CONNECTED:
		if (cd->status) {
			FAIL(ctx, "connect failed");
			return;
		}
		c->flow = cd->flow;
		c->connected = true;
		return;
	case FP_COND_RECV:     cli_recv(ctx, c, cd); return;
	case FP_COND_SENT:     c->wait_sent = false; return;
	case FP_COND_UDP_RECV: cli_udp_recv(ctx, c, cd); return;
	case FP_COND_EOF:
	case FP_COND_DEAD:
		if (!c->done)
			FAIL(ctx, "connection ended before the echo was complete");
		return;
	}
}

static void cli_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
		       const struct fp_call *rets, unsigned n_rets)
{
	struct cli *c = fp_ctx_user(ctx);

	for (unsigned i = 0; i < n_rets; i++) {
		const struct fp_call *r = &rets[i];
		if (r->type == FP_CALL_SENDV) {
			c->inflight = false;
			if (r->ret < 0 && r->ret != -ENOBUFS)
				FAIL(ctx, "client sendv failed");
			c->sent += r->ret > 0 ? (uint64_t)r->ret : 0;
			if (r->ret < (int64_t)c->offered)
				c->wait_sent = true;
		} else if ((r->type == FP_CALL_CONNECT || r->type == FP_CALL_UDP_BIND) && r->ret) {
			FAIL(ctx, "connect/bind failed at once");
		} else if (r->type == FP_CALL_UDP_SEND && r->ret != (int64_t)udp_len(r->cookie)) {
			FAIL(ctx, "UDP send did not take the datagram");
		}
	}
	for (unsigned i = 0; i < n; i++)
		cli_cond(ctx, c, &conds[i]);
	if (c->connected && !c->done && !c->inflight && !c->wait_sent && c->sent < TOTAL) {
		c->offered = TOTAL - c->sent < CHUNK ? TOTAL - c->sent : CHUNK;
		c->iov = (struct iovec){ T.pattern + c->sent, c->offered };
		fp_sendv(ctx, c->flow, 0, &c->iov, 1);
		c->inflight = true;
	}
}

/* ---- the application ---- */

static struct fp_timer deadline[2], idle_stop;

/* Timers carry no context pointer: keep each worker's here. */
static struct fp_ctx *ctxs[2];

static void deadline_fn(struct fp_timer *t, uint64_t now_us)
{
	(void)now_us;
	T.result = -ETIMEDOUT;
	fp_ctx_stop(ctxs[t == &deadline[1]], -ETIMEDOUT);
}

static void idle_stop_fn(struct fp_timer *t, uint64_t now_us)
{
	(void)t;
	(void)now_us;
	fp_ctx_stop(ctxs[0], 0);
}

static int app_init(struct fp_ctx *ctx, void *arg)
{
	unsigned w = fp_ctx_worker(ctx);

	(void)arg;
	ctxs[w] = ctx;
	fp_timer_init(&deadline[w], deadline_fn);
	fp_ctx_timer_add(ctx, &deadline[w], fp_ctx_now_us(ctx) + DEADLINE_US);
	if (w == 0) {
		T.seg = fp_rt_stats_open(T.stats_name, &T.seg_size);
		fp_ctx_set_user(ctx, calloc(1, sizeof(struct srv)));
		if (T.mode == MODE_IDLE) {
			fp_timer_init(&idle_stop, idle_stop_fn);
			fp_ctx_timer_add(ctx, &idle_stop, fp_ctx_now_us(ctx) + 50000);
		}
		fp_listen(ctx, ECHO_PORT, LISTEN_COOKIE);
		fp_udp_bind_call(ctx, UDP_PORT, 0);
		return 0;
	}
	struct cli *c = calloc(1, sizeof(*c));
	fp_ctx_set_user(ctx, c);
	if (T.mode == MODE_TCP) {
		fp_connect(ctx, IP0, ECHO_PORT, 1);
	} else if (T.mode == MODE_UDP) {
		fp_udp_bind_call(ctx, UDP_CLIENT, 0);
		for (unsigned i = 0; i < UDP_INFLIGHT; i++)
			cli_udp_send(ctx, c);
	}
	return 0;
}

static void app_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned n,
		       const struct fp_call *rets, unsigned n_rets)
{
	if (fp_ctx_worker(ctx) == 0)
		srv_handle(ctx, conds, n, rets, n_rets);
	else
		cli_handle(ctx, conds, n, rets, n_rets);
}

static void app_fini(struct fp_ctx *ctx)
{
	unsigned w = fp_ctx_worker(ctx);

	fp_ctx_timer_cancel(ctx, &deadline[w]);
	if (w == 0) {
		struct srv *s = fp_ctx_user(ctx);
		fp_ctx_timer_cancel(ctx, &idle_stop);
		free(s->conn);
		free(s->udp_iov);
		free(s);
	} else {
		free(fp_ctx_user(ctx));
	}
}

static const struct fp_app test_app = {
	.name = "test_rt", .init = app_init, .handle = app_handle, .fini = app_fini,
};

/* ---- running it ---- */

/* Take back what the pair still holds (frames in flight when the run stopped). */
static void pair_drain(struct fp_devq *e[2])
{
	struct fp_mbuf *ms[64];
	bool more = true;

	while (more) {
		more = false;
		for (int i = 0; i < 2; i++) {
			unsigned n;
			while ((n = e[i]->ops->rx_burst(e[i], ms, 64)) > 0) {
				more = true;
				for (unsigned j = 0; j < n; j++)
					fp_mbuf_free(&e[i]->cache, ms[j]);
			}
			if (e[i]->ops->reclaim(e[i]))
				more = true;
		}
	}
}

static void pair_config(struct fp_rt_config *cfg, struct fp_devq *ends[2])
{
	fp_rt_config_init(cfg);
	cfg->transport = FP_TRANSPORT_PAIR;
	cfg->n_workers = 2;
	cfg->cores[0] = cfg->cores[1] = -1;
	cfg->cores_set = true;
	cfg->ipv4 = IP0;
	cfg->pair[0] = ends[0];
	cfg->pair[1] = ends[1];
	cfg->quiet = true;
	cfg->stats_name = T.stats_name;
	cfg->stack.rto_min_us = 20000;  /* a loaded CI box under ASan is not a datacenter */
}

/* Run the test app in @mode; returns fp_rt_run's result, with the pair checked for leaks. */
static int run_pair(enum test_mode mode, void (*tweak)(struct fp_rt_config *))
{
	struct fp_devq *ends[2];
	struct fp_rt_config cfg;
	int ret;

	memset(&T, 0, sizeof(T));
	T.mode = mode;
	snprintf(T.stats_name, sizeof(T.stats_name), "test-rt-%d", (int)getpid());
	T.pattern = malloc(TOTAL);
	uint64_t seed = fp_test_seed();
	for (size_t i = 0; i < TOTAL; i++)
		T.pattern[i] = (uint8_t)fp_test_rand(&seed);
	assert_int_equal(fp_pair_create(4096, 2048, ends), 0);
	pair_config(&cfg, ends);
	if (tweak)
		tweak(&cfg);
	ret = fp_rt_run(&cfg, &test_app);
	pair_drain(ends);
	assert_int_equal(fp_pool_in_use(ends[0]->pool), 0);
	assert_int_equal(fp_pool_in_use(ends[1]->pool), 0);
	ends[0]->ops->close(ends[0]);
	ends[1]->ops->close(ends[1]);
	free(T.pattern);
	T.pattern = NULL;
	/* The run removed its segment; our mapping of it stays readable. */
	assert_true(fp_rt_stats_open(T.stats_name, NULL) == NULL && errno == ENOENT);
	return ret;
}

static uint64_t sum(const uint64_t *v, unsigned n)
{
	uint64_t s = 0;

	for (unsigned i = 0; i < n; i++)
		s += v[i];
	return s;
}

/* Invariants every worker record must keep, whatever the traffic. */
static void check_worker_stats(const struct fp_rt_stats_hdr *h, unsigned i)
{
	const struct fp_rt_worker_stats *w = fp_rt_stats_worker(h, i);
	uint64_t busy = sum(w->batch_hist, FP_RT_BATCH_BUCKETS), frames = 0;

	for (unsigned b = 0; b < FP_RT_BATCH_BUCKETS - 1; b++)
		frames += b * w->batch_hist[b];
	if (getenv("FP_TEST_VERBOSE"))
		printf("# worker %u: %llu rounds, %llu busy, %llu sleeps, rx %llu tx %llu, "
		       "conds %llu calls %llu, injected %llu, rexmit %llu\n", i,
		       (unsigned long long)w->iterations, (unsigned long long)busy,
		       (unsigned long long)w->sleeps, (unsigned long long)w->rx_frames,
		       (unsigned long long)w->tx_frames, (unsigned long long)w->conds,
		       (unsigned long long)w->calls,
		       (unsigned long long)w->drops[FP_RT_DROP_rx_injected],
		       (unsigned long long)w->net[47]);
	assert_true(w->seq > 0);
	assert_true(w->rx_frames > 0 && w->tx_frames > 0);
	assert_true(w->rx_bytes >= 42 * w->rx_frames);
	assert_true(w->conds > 0 && w->calls > 0);
	assert_true(busy > 0 && busy <= w->iterations);
	assert_int_equal(busy, sum(w->loop_ns_hist, FP_RT_LOG2_BUCKETS));
	assert_true(w->busy_cycles > 0);
	/* batch < 64 here, so the histogram counts every frame the stack was given */
	assert_int_equal(w->batch_hist[FP_RT_BATCH_BUCKETS - 1], 0);
	/* (with --rx-reorder, one frame may still be held back when the run stops) */
	uint64_t given = w->rx_frames - w->drops[FP_RT_DROP_rx_injected];
	assert_true(frames == given || (w->rx_reordered && frames + 1 == given));
	/* the last publication came after the last round: the stack agrees */
	assert_string_equal(h->net_names[0], "rx_frames");
	assert_int_equal(w->net[0], frames);
	assert_int_equal(w->queue, i);
	assert_int_equal(w->core, -1);
}

static void check_header(const struct fp_rt_stats_hdr *h)
{
	assert_non_null(h);
	assert_int_equal(h->magic, FP_RT_STATS_MAGIC);
	assert_int_equal(h->version, FP_RT_STATS_VERSION);
	assert_int_equal(h->n_workers, 2);
	assert_int_equal(h->pid, getpid());
	assert_string_equal(h->transport, "pair");
	assert_string_equal(h->app, "test_rt");
	assert_true(h->net_count > 0 && h->tsc_hz > 0);
}

static void batch_32(struct fp_rt_config *cfg)
{
	cfg->batch = 32;
	cfg->idle = FP_IDLE_POLL;
}

/* 1 MB through a zero-copy echo, every byte checked, the workers polling (IX). */
static void test_tcp_echo(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_TCP, batch_32), 0);
	assert_int_equal(T.result, 0);
	assert_int_equal(T.echoed, TOTAL);
	check_header(T.seg);
	check_worker_stats(T.seg, 0);
	check_worker_stats(T.seg, 1);
	assert_int_equal(fp_rt_stats_worker(T.seg, 1)->sleeps, 0);  /* polling never sleeps */
	munmap((void *)T.seg, T.seg_size);
}

static void lossy(struct fp_rt_config *cfg)
{
	cfg->batch = 16;
	cfg->rx_drop = 0.02;
	cfg->seed = 42;
	cfg->idle = FP_IDLE_SLEEP;
	cfg->spin_us = 50;
}

/* The same with 2% of received frames dropped before the stack, and the sleep policy:
 * TCP recovers, and the injected drops are counted where the stack does not see them. */
static void test_tcp_echo_lossy(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_TCP, lossy), 0);
	assert_int_equal(T.result, 0);
	check_worker_stats(T.seg, 0);
	check_worker_stats(T.seg, 1);
	const struct fp_rt_worker_stats *w0 = fp_rt_stats_worker(T.seg, 0);
	const struct fp_rt_worker_stats *w1 = fp_rt_stats_worker(T.seg, 1);
	assert_true(w0->drops[FP_RT_DROP_rx_injected] + w1->drops[FP_RT_DROP_rx_injected] > 0);
	munmap((void *)T.seg, T.seg_size);
}

static void reordering(struct fp_rt_config *cfg)
{
	cfg->batch = 16;
	cfg->rx_drop = 0.01;
	cfg->rx_reorder = 0.05;
	cfg->seed = 43;
	cfg->idle = FP_IDLE_POLL;
}

/* 5% of received frames held back behind the next burst's, 1% dropped: every byte still
 * arrives in order (the echo checks each), the held frames are counted, the stack saw
 * segments out of order, and a frame held when the run stops is freed (ASan). */
static void test_tcp_echo_reordered(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_TCP, reordering), 0);
	assert_int_equal(T.result, 0);
	assert_int_equal(T.echoed, TOTAL);
	check_worker_stats(T.seg, 0);
	check_worker_stats(T.seg, 1);
	const struct fp_rt_worker_stats *w0 = fp_rt_stats_worker(T.seg, 0);
	const struct fp_rt_worker_stats *w1 = fp_rt_stats_worker(T.seg, 1);
	assert_true(w0->rx_reordered > 0 && w1->rx_reordered > 0);
	/* net[] is a copy of struct fp_net_stats (rt_publish) */
	size_t ooo = offsetof(struct fp_net_stats, tcp_ooo_seg) / sizeof(uint64_t);
	assert_true(w0->net[ooo] + w1->net[ooo] > 0);
	munmap((void *)T.seg, T.seg_size);
}

static void chunked(struct fp_rt_config *cfg)
{
	cfg->batch = 32;
	cfg->idle = FP_IDLE_POLL;
	cfg->flush_us = 1;
}

/* --flush-us (rt_ctx_round_chunked): the handler gets each round's conditions in chunks,
 * its calls executed and sent between them; every byte still arrives, in order, and the
 * rounds were cut (or this proves nothing). */
static void test_tcp_echo_chunked(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_TCP, chunked), 0);
	assert_int_equal(T.result, 0);
	assert_int_equal(T.echoed, TOTAL);
	check_worker_stats(T.seg, 0);
	check_worker_stats(T.seg, 1);
	const struct fp_rt_worker_stats *w0 = fp_rt_stats_worker(T.seg, 0);
	const struct fp_rt_worker_stats *w1 = fp_rt_stats_worker(T.seg, 1);
	if (getenv("FP_TEST_VERBOSE"))
		printf("# chunks %llu %llu, sends %llu %llu\n",
		       (unsigned long long)w0->flush_chunks, (unsigned long long)w1->flush_chunks,
		       (unsigned long long)w0->flush_sends, (unsigned long long)w1->flush_sends);
	assert_true(w0->flush_chunks + w1->flush_chunks > 0);
	munmap((void *)T.seg, T.seg_size);
}

/* ---- a round in chunks whose calls close a flow (rt_ctx_round_chunked, no transport) ---- */

#define CK_A ((struct fp_flow *)(uintptr_t)0x1000)
#define CK_B ((struct fp_flow *)(uintptr_t)0x2000)
#define CK_C ((struct fp_flow *)(uintptr_t)0x3000)

static struct {
	struct fp_cond got[16];
	unsigned seen, handles;
	bool closed_a;
} CK;

static void ck_handle(struct fp_ctx *ctx, const struct fp_cond *c, unsigned n,
		      const struct fp_call *rets, unsigned n_rets)
{
	(void)rets;
	(void)n_rets;
	CK.handles++;
	for (unsigned i = 0; i < n && CK.seen < 16; i++) {
		CK.got[CK.seen++] = c[i];
		if (c[i].flow == CK_A && !CK.closed_a) {
			fp_close(ctx, CK_A);
			CK.closed_a = true;
		}
	}
}

/* Executes every call; closing A, it queues a condition for C, as a transport may while
 * calls run (the kernel's DEAD after a failed send): that one belongs to the next round. */
static void ck_exec(struct fp_ctx *ctx, struct fp_call *c)
{
	c->ret = 0;
	if (c->type == FP_CALL_CLOSE)
		ctx->conds[ctx->n_conds++] = (struct fp_cond){ .type = FP_COND_DEAD, .flow = CK_C };
}

static void ck_flush(struct fp_ctx *ctx) { (void)ctx; }

/* A flow that a chunk's calls closed hears nothing more in that round (its EOF, queued
 * before the round, is dropped), every other condition reaches the handler once and in
 * order, and what the transport queued while the calls ran waits for the next round.
 * (Before this, a later chunk handed the closed flow's EOF up, a use of the application's
 * freed state; on the kernel transport the round's memmove ran with a negative length.) */
static void test_chunked_round_forgets_a_closed_flow(void **state)
{
	static const struct rt_transport_ops ops = { .name = "ck", .exec = ck_exec,
						     .flush = ck_flush };
	struct fp_app app = { .name = "ck", .handle = ck_handle };
	struct fp_rt_config cfg;
	struct rt_run run = { 0 };
	struct fp_ctx ctx;
	const struct fp_cond batch[] = {
		{ .type = FP_COND_RECV, .flow = CK_A, .len = 1 },
		{ .type = FP_COND_RECV, .flow = CK_B, .len = 2 },
		{ .type = FP_COND_EOF, .flow = CK_A },
		{ .type = FP_COND_RECV, .flow = CK_C, .len = 3 },
		{ .type = FP_COND_EOF, .flow = CK_B },
	};

	(void)state;
	memset(&CK, 0, sizeof(CK));
	fp_rt_config_init(&cfg);
	run.cfg = &cfg;
	run.app = &app;
	run.flush_us = 1;
	assert_int_equal(rt_ctx_init(&ctx, &run, 0, &ops, NULL, 0), 0);
	memcpy(ctx.conds, batch, sizeof(batch));
	ctx.n_conds = 5;
	rt_ctx_round(&ctx);
	assert_true(CK.handles >= 2);                 /* the first condition was a chunk alone */
	assert_int_equal(CK.seen, 4);
	assert_ptr_equal(CK.got[0].flow, CK_A);
	assert_ptr_equal(CK.got[1].flow, CK_B);
	assert_int_equal(CK.got[1].type, FP_COND_RECV);
	assert_ptr_equal(CK.got[2].flow, CK_C);
	assert_ptr_equal(CK.got[3].flow, CK_B);
	assert_int_equal(CK.got[3].type, FP_COND_EOF);
	assert_int_equal(ctx.n_conds, 1);             /* C's DEAD, for the next round */
	assert_ptr_equal(ctx.conds[0].flow, CK_C);
	assert_int_equal(ctx.conds[0].type, FP_COND_DEAD);
	assert_int_equal(ctx.conds_batch, 0);
	rt_ctx_fini(&ctx);
}

/* A close forgets its flow's conditions queued and not handed up (defs.h: both transports
 * call this in CLOSE/ABORT), in order, keeping a --flush-us round's batch (the round
 * drops those itself) and every other flow's. */
static void test_conds_forget(void **state)
{
	struct fp_app app = { .name = "ck", .handle = ck_handle };
	static const struct rt_transport_ops ops = { .name = "ck", .exec = ck_exec };
	struct fp_rt_config cfg;
	struct rt_run run = { 0 };
	struct fp_ctx ctx;
	const struct fp_cond q[] = {
		{ .type = FP_COND_RECV, .flow = CK_A, .len = 1 },   /* the batch's */
		{ .type = FP_COND_RECV, .flow = CK_B, .len = 2 },   /* the batch's */
		{ .type = FP_COND_EOF, .flow = CK_A },
		{ .type = FP_COND_RECV, .flow = CK_C, .len = 3 },
		{ .type = FP_COND_DEAD, .flow = CK_A },
		{ .type = FP_COND_EOF, .flow = CK_C },
	};

	(void)state;
	fp_rt_config_init(&cfg);
	run.cfg = &cfg;
	run.app = &app;
	assert_int_equal(rt_ctx_init(&ctx, &run, 0, &ops, NULL, 0), 0);
	memcpy(ctx.conds, q, sizeof(q));
	ctx.n_conds = 6;
	ctx.conds_batch = 2;
	rt_conds_forget(&ctx, CK_A);
	assert_int_equal(ctx.n_conds, 4);
	assert_ptr_equal(ctx.conds[0].flow, CK_A);   /* the batch's stays */
	assert_ptr_equal(ctx.conds[1].flow, CK_B);
	assert_ptr_equal(ctx.conds[2].flow, CK_C);
	assert_int_equal(ctx.conds[2].type, FP_COND_RECV);
	assert_ptr_equal(ctx.conds[3].flow, CK_C);
	assert_int_equal(ctx.conds[3].type, FP_COND_EOF);
	ctx.conds_batch = 0;
	rt_conds_forget(&ctx, CK_A);
	rt_conds_forget(&ctx, CK_C);
	assert_int_equal(ctx.n_conds, 1);
	assert_ptr_equal(ctx.conds[0].flow, CK_B);
	rt_ctx_fini(&ctx);
}

static void udp_small_batch(struct fp_rt_config *cfg)
{
	cfg->batch = 8;
}

/* 200 datagrams of 1..1400 bytes echoed, in order, contents checked. */
static void test_udp_echo(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_UDP, udp_small_batch), 0);
	assert_int_equal(T.result, 0);
	assert_int_equal(T.udp_ok, UDP_COUNT);
	check_worker_stats(T.seg, 0);
	check_worker_stats(T.seg, 1);
	munmap((void *)T.seg, T.seg_size);
}

static void idle_sleep(struct fp_rt_config *cfg)
{
	cfg->idle = FP_IDLE_SLEEP;
	cfg->spin_us = 100;
}

/* Nothing to do for 50 ms: both workers sleep (worker 1 has no timer at all and is woken
 * by the stop), and the run still stops when worker 0's timer says so. */
static void test_idle_sleeps(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_IDLE, idle_sleep), 0);
	assert_int_equal(T.result, 0);
	assert_non_null(T.seg);
	assert_true(fp_rt_stats_worker(T.seg, 0)->sleeps > 0);
	assert_true(fp_rt_stats_worker(T.seg, 1)->sleeps > 0);
	assert_true(fp_rt_stats_worker(T.seg, 1)->idle_cycles > 0);
	munmap((void *)T.seg, T.seg_size);
}

static void idle_adaptive(struct fp_rt_config *cfg)
{
	cfg->idle = FP_IDLE_ADAPTIVE;
	cfg->spin_us = 1000000;   /* a second: the sleep policy would not sleep in this run */
}

/* --idle adaptive spins only as long as the worker has worked: with nothing to do, both
 * workers sleep at once however long --spin-us is (issue 16, item 11). */
static void test_idle_adaptive_sleeps(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_IDLE, idle_adaptive), 0);
	assert_int_equal(T.result, 0);
	assert_non_null(T.seg);
	assert_true(fp_rt_stats_worker(T.seg, 0)->sleeps > 0);
	assert_true(fp_rt_stats_worker(T.seg, 1)->sleeps > 0);
	munmap((void *)T.seg, T.seg_size);
}

static void adaptive_echo(struct fp_rt_config *cfg)
{
	cfg->idle = FP_IDLE_ADAPTIVE;
	cfg->spin_us = 20;
	cfg->batch = 16;   /* check_worker_stats counts frames in batches under 64 */
}

/* The 1 MB zero-copy echo with the adaptive policy: workers that sleep between bursts
 * still move every byte, in order. */
static void test_tcp_echo_adaptive(void **state)
{
	(void)state;
	assert_int_equal(run_pair(MODE_TCP, adaptive_echo), 0);
	assert_int_equal(T.result, 0);
	check_worker_stats(T.seg, 0);
	check_worker_stats(T.seg, 1);
	munmap((void *)T.seg, T.seg_size);
}

/* ---- evl over the pair: back-pressure end to end, and a client that stops ---- */

#define BP_BYTES        (2u << 20)      /* what the client sends, not reading at first */
#define BP_WRITE        (16u << 10)     /* bytes per client write */
#define BP_MAX_PENDING  (64u << 10)     /* evl's max_pending on both sides */
#define BP_SLACK        4096u           /* one segment beyond a copy-aside at the limit */
#define BP_TICK_US      10000u          /* the client checks its writes' progress this often */
#define BP_STALL_TICKS  3               /* ticks with no progress: its writes are stalled */
#define SD_CONNS        4
#define SD_MSG          "goodbye"
#define SD_DEADLINE_US  (5u * 1000 * 1000)

static struct {
	uint8_t *pattern;
	int result;                     /* first failure seen by a callback */
	atomic_bool done;               /* the client has what it wanted: closes are expected */
	struct fp_evl *evls[2];         /* [0] the server's, [1] the client's */
	struct fp_timer deadline[2], tick;
	/* back-pressure: the client (worker 1) */
	struct fp_evl_conn *cc;
	size_t written, got, first_read, last_written;
	unsigned still_ticks;
	bool reading, stalled;
	/* back-pressure: the server (worker 0) */
	size_t srv_max_read;
	/* stop */
	atomic_bool sd_listening;
	size_t sd_got[SD_CONNS];
	unsigned sd_connects, sd_echoed, sd_closed, sd_reset;
	int sd_server_ret;
} E;

#define EFAIL(evl, why) evl_fail_test((evl), (why), __LINE__)

static void evl_fail_test(struct fp_evl *evl, const char *why, int line)
{
	fprintf(stderr, "# %s (line %d)\n", why, line);
	if (!E.result)
		E.result = -EBADMSG;
	fp_ctx_stop(fp_evl_ctx(evl), -EBADMSG);
}

static void e_deadline_fn(struct fp_timer *t, uint64_t now_us)
{
	(void)now_us;
	fp_ctx_stop(fp_evl_ctx(E.evls[t == &E.deadline[1]]), -ETIMEDOUT);
}

/* @side: 0 server, 1 client; a deadline on its wheel. */
static void e_start(struct fp_evl *evl, unsigned side, uint64_t deadline_us)
{
	struct fp_ctx *ctx = fp_evl_ctx(evl);

	E.evls[side] = evl;
	fp_timer_init(&E.deadline[side], e_deadline_fn);
	fp_ctx_timer_add(ctx, &E.deadline[side], fp_ctx_now_us(ctx) + deadline_us);
}

static void e_fini(struct fp_evl *evl)
{
	for (unsigned i = 0; i < 2; i++)
		if (E.evls[i] == evl)
			fp_ctx_timer_cancel(fp_evl_ctx(evl), &E.deadline[i]);
	if (E.evls[1] == evl)
		fp_ctx_timer_cancel(fp_evl_ctx(evl), &E.tick);
}

/* fp-echo's server: echo what fits in the output, consume that (the rest is shown again
 * once the output moves). */
static size_t es_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t room = BP_MAX_PENDING - fp_evl_pending(c);
	size_t n = len < room ? len : room;

	if (len > E.srv_max_read)
		E.srv_max_read = len;
	return n && fp_evl_write(c, data, n) == 0 ? n : 0;
}

static void *es_accept(struct fp_evl_conn *c, void *larg)
{
	(void)c;
	(void)larg;
	return &E;
}

/* ---- back-pressure: worker 0 serves, worker 1 sends 2 MB and reads only later ---- */

static void bp_pump(struct fp_evl_conn *c)
{
	while (E.written < BP_BYTES) {
		size_t n = BP_BYTES - E.written < BP_WRITE ? BP_BYTES - E.written : BP_WRITE;

		if (fp_evl_write(c, E.pattern + E.written, n))
			return;
		E.written += n;
	}
}

/* Every BP_TICK_US while not reading: once the writes made no progress for a few ticks
 * (everyone's windows and outputs are full), start reading. */
static void bp_tick_fn(struct fp_timer *t, uint64_t now_us)
{
	if (E.written == E.last_written)
		E.still_ticks++;
	else
		E.still_ticks = 0;
	E.last_written = E.written;
	if (E.still_ticks < BP_STALL_TICKS) {
		fp_ctx_timer_add(fp_evl_ctx(E.evls[1]), t, now_us + BP_TICK_US);
		return;
	}
	E.stalled = E.written < BP_BYTES;
	E.reading = true;
	fp_evl_read_again(E.cc);        /* nothing new arrives while all is held: ask */
}

static int bp_init(struct fp_evl *evl, void *arg)
{
	struct fp_ctx *ctx = fp_evl_ctx(evl);

	(void)arg;
	if (fp_ctx_worker(ctx) == 0) {
		e_start(evl, 0, DEADLINE_US);
		fp_evl_listen(evl, ECHO_PORT, NULL);
		return 0;
	}
	e_start(evl, 1, DEADLINE_US);
	fp_timer_init(&E.tick, bp_tick_fn);
	fp_ctx_timer_add(ctx, &E.tick, fp_ctx_now_us(ctx) + BP_TICK_US);
	E.cc = fp_evl_connect(evl, IP0, ECHO_PORT, &E);
	return E.cc ? 0 : -ENOMEM;
}

static void bp_connected(struct fp_evl_conn *c, int status)
{
	if (status)
		EFAIL(fp_evl_of(c), "connect failed");
	else
		bp_pump(c);
}

static size_t bp_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	if (fp_evl_of(c) == E.evls[0])
		return es_read(c, data, len);
	if (!E.reading)
		return 0;
	if (!E.first_read)
		E.first_read = len;     /* what was kept for a client that did not read */
	if (E.got + len > BP_BYTES || memcmp(data, E.pattern + E.got, len)) {
		EFAIL(fp_evl_of(c), "echoed bytes differ from what was sent");
		return len;
	}
	E.got += len;
	if (E.got == BP_BYTES) {
		atomic_store(&E.done, true);
		fp_ctx_stop(fp_evl_ctx(fp_evl_of(c)), 0);
	}
	return len;
}

static void bp_drained(struct fp_evl_conn *c)
{
	if (fp_evl_of(c) == E.evls[1])
		bp_pump(c);
}

static void bp_closed(struct fp_evl_conn *c, int status)
{
	(void)status;
	if (!atomic_load(&E.done))
		EFAIL(fp_evl_of(c), "a connection ended (reset?) before the echo was complete");
}

static const struct fp_evl_ops bp_ops = {
	.accept = es_accept, .connected = bp_connected, .read = bp_read,
	.drained = bp_drained, .closed = bp_closed, .init = bp_init, .fini = e_fini,
	.max_pending = BP_MAX_PENDING,
};

/*
 * A client sends 2 MB to fp-echo's server logic and does not read: the server's output
 * fills, it holds what arrives, its window closes, the client's output fills and its
 * writes stall; the client kept at most max_pending of echo aside (plus one segment).
 * Nobody is reset. Then the client reads: all 2 MB come back, in order.
 */
static void test_evl_backpressure(void **state)
{
	struct fp_devq *ends[2];
	struct fp_rt_config cfg;
	struct fp_app app;
	uint64_t seed = fp_test_seed();
	int ret;

	(void)state;
	memset(&T, 0, sizeof(T));       /* T.stats_name "": no segment */
	memset(&E, 0, sizeof(E));
	E.pattern = malloc(BP_BYTES);
	assert_non_null(E.pattern);
	for (size_t i = 0; i < BP_BYTES; i++)
		E.pattern[i] = (uint8_t)fp_test_rand(&seed);
	assert_int_equal(fp_pair_create(4096, 2048, ends), 0);
	pair_config(&cfg, ends);
	fp_evl_app(&app, &bp_ops, NULL);
	app.name = "test_rt evl";
	ret = fp_rt_run(&cfg, &app);
	pair_drain(ends);
	assert_int_equal(fp_pool_in_use(ends[0]->pool), 0);
	assert_int_equal(fp_pool_in_use(ends[1]->pool), 0);
	ends[0]->ops->close(ends[0]);
	ends[1]->ops->close(ends[1]);
	free(E.pattern);
	assert_int_equal(ret, 0);
	assert_int_equal(E.result, 0);
	assert_int_equal(E.got, BP_BYTES);
	assert_true(E.stalled);                     /* the server pushed back */
	assert_true(E.first_read > 0 && E.first_read <= BP_MAX_PENDING + BP_SLACK);
	assert_true(E.srv_max_read <= BP_MAX_PENDING + BP_SLACK);
}

/* ---- stop: a client run stops with its connections open; the server run sees them end ---- */

static int sd_srv_init(struct fp_evl *evl, void *arg)
{
	(void)arg;
	e_start(evl, 0, SD_DEADLINE_US);
	fp_evl_listen(evl, ECHO_PORT, NULL);
	atomic_store(&E.sd_listening, true);
	return 0;
}

static void sd_srv_closed(struct fp_evl_conn *c, int status)
{
	E.sd_closed++;
	if (status == -ECONNRESET)
		E.sd_reset++;
	if (E.sd_closed == SD_CONNS)
		fp_ctx_stop(fp_evl_ctx(fp_evl_of(c)), 0);
}

static const struct fp_evl_ops sd_srv_ops = {
	.accept = es_accept, .read = es_read, .closed = sd_srv_closed, .init = sd_srv_init,
	.fini = e_fini, .max_pending = BP_MAX_PENDING,
};

static int sd_cli_init(struct fp_evl *evl, void *arg)
{
	(void)arg;
	e_start(evl, 1, SD_DEADLINE_US);
	for (unsigned i = 0; i < SD_CONNS; i++)
		if (!fp_evl_connect(evl, IP0, ECHO_PORT, &E.sd_got[i]))
			return -ENOMEM;
	return 0;
}

static void sd_cli_connected(struct fp_evl_conn *c, int status)
{
	if (status || fp_evl_write(c, SD_MSG, strlen(SD_MSG)))
		EFAIL(fp_evl_of(c), "connect or first write failed");
	E.sd_connects++;
}

/* Every connection echoed its message: stop the run with all of them open. */
static size_t sd_cli_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	size_t *got = fp_evl_conn_user(c);

	(void)data;
	*got += len;
	if (*got == strlen(SD_MSG) && ++E.sd_echoed == SD_CONNS)
		fp_ctx_stop(fp_evl_ctx(fp_evl_of(c)), 0);
	return len;
}

static void sd_cli_closed(struct fp_evl_conn *c, int status)
{
	(void)status;
	EFAIL(fp_evl_of(c), "a client connection ended before the stop");
}

static const struct fp_evl_ops sd_cli_ops = {
	.connected = sd_cli_connected, .read = sd_cli_read, .closed = sd_cli_closed,
	.init = sd_cli_init, .fini = e_fini,
};

/* One worker on @end at @addr: each run its own host on the pair. */
static void one_worker_config(struct fp_rt_config *cfg, struct fp_devq *end, uint32_t addr)
{
	fp_rt_config_init(cfg);
	cfg->transport = FP_TRANSPORT_PAIR;
	cfg->n_workers = 1;
	cfg->cores[0] = -1;
	cfg->cores_set = true;
	cfg->ipv4 = addr;
	cfg->pair[0] = end;
	cfg->quiet = true;
	cfg->stats_name = "";
	cfg->stack.rto_min_us = 20000;
}

static void *sd_server_main(void *arg)
{
	struct fp_app app;

	fp_evl_app(&app, &sd_srv_ops, NULL);
	app.name = "test_rt server";
	E.sd_server_ret = fp_rt_run(arg, &app);
	return NULL;
}

/*
 * Two runs side by side on the two ends of a pair: a server, and a client that opens
 * SD_CONNS connections, has one message echoed on each and stops with all of them open.
 * Its fini resets them and its worker transmits the RSTs before the stack goes, so the
 * server sees every connection die (-ECONNRESET) and stops by itself; without them the
 * server would keep them established until its deadline, and fail.
 */
static void test_evl_client_stop_resets(void **state)
{
	struct fp_devq *ends[2];
	struct fp_rt_config scfg, ccfg;
	struct fp_app app;
	pthread_t th;
	int ret;

	(void)state;
	memset(&E, 0, sizeof(E));
	assert_int_equal(fp_pair_create(1024, 2048, ends), 0);
	one_worker_config(&scfg, ends[0], IP0);
	one_worker_config(&ccfg, ends[1], IP0 + 1);
	assert_int_equal(pthread_create(&th, NULL, sd_server_main, &scfg), 0);
	for (int i = 0; i < 5000 && !atomic_load(&E.sd_listening); i++)
		usleep(1000);
	fp_evl_app(&app, &sd_cli_ops, NULL);
	app.name = "test_rt client";
	ret = fp_rt_run(&ccfg, &app);
	pthread_join(th, NULL);
	pair_drain(ends);
	assert_int_equal(fp_pool_in_use(ends[0]->pool), 0);
	assert_int_equal(fp_pool_in_use(ends[1]->pool), 0);
	ends[0]->ops->close(ends[0]);
	ends[1]->ops->close(ends[1]);
	assert_int_equal(ret, 0);
	assert_int_equal(E.result, 0);
	assert_int_equal(E.sd_echoed, SD_CONNS);
	assert_int_equal(E.sd_server_ret, 0);       /* not its deadline: every one ended */
	assert_int_equal(E.sd_reset, SD_CONNS);
}

/* ---- options ---- */

static int opt(struct fp_rt_config *cfg, const char *o, const char *v, char *err)
{
	err[0] = '\0';
	return fp_rt_option(cfg, o, v, err, 256);
}

static void test_options_good(void **state)
{
	struct fp_rt_config c;
	char err[256];

	(void)state;
	fp_rt_config_init(&c);
	assert_int_equal(c.transport, FP_TRANSPORT_KERNEL);
	assert_int_equal(c.n_workers, 1);
	assert_int_equal(c.batch, FP_RT_DEFAULT_BATCH);
	assert_int_equal(c.idle, FP_IDLE_SLEEP);
	assert_int_equal(c.cores[3], 3);
	assert_null(c.stats_name);
	assert_int_equal(opt(&c, "if", "eth0", err), 1);
	assert_int_equal(c.transport, FP_TRANSPORT_XDP);
	assert_int_equal(opt(&c, "ip", "10.1.2.3/16", err), 1);
	assert_int_equal(c.ipv4, 0x0a010203u);
	assert_int_equal(c.prefix_len, 16);
	assert_int_equal(opt(&c, "gw", "10.1.0.1", err), 1);
	assert_int_equal(c.gateway, 0x0a010001u);
	assert_int_equal(opt(&c, "cores", "0,2,5-6", err), 1);
	assert_int_equal(c.n_workers, 4);
	assert_int_equal(c.cores[2], 5);
	assert_int_equal(c.cores[3], 6);
	assert_int_equal(opt(&c, "workers", "2", err), 1);
	assert_int_equal(opt(&c, "cores", "1-3", err), 1);
	assert_int_equal(c.n_workers, 2);  /* --workers given: --cores does not change it */
	assert_int_equal(opt(&c, "batch", "1024", err), 1);
	assert_int_equal(opt(&c, "idle", "poll", err), 1);
	assert_int_equal(c.idle, FP_IDLE_POLL);
	assert_int_equal(opt(&c, "xdp-mode", "skb", err), 1);
	assert_int_equal(c.xdp.mode, FP_XDP_SKB);
	assert_int_equal(opt(&c, "xdp-copy", "yes", err), 1);
	assert_true(c.xdp.force_copy);
	assert_int_equal(opt(&c, "xdp-zerocopy", "1", err), 1);
	assert_true(c.xdp.force_zerocopy);
	assert_int_equal(opt(&c, "umem-frames", "8K", err), 1);
	assert_int_equal(c.xdp.frames, 8192);
	assert_int_equal(opt(&c, "rcv-buf", "1M", err), 1);
	assert_int_equal(c.stack.rcv_buf, 1u << 20);
	assert_int_equal(opt(&c, "rx-drop", "0.25", err), 1);
	assert_true(c.rx_drop == 0.25);
	assert_int_equal(opt(&c, "seed", "0xfeed", err), 1);
	assert_int_equal(c.seed, 0xfeed);
	assert_int_equal(opt(&c, "stats", "none", err), 1);
	assert_string_equal(c.stats_name, "");
	assert_int_equal(opt(&c, "stats", "web-1", err), 1);
	assert_string_equal(c.stats_name, "web-1");
	assert_int_equal(opt(&c, "threads", "2", err), 0);  /* not ours */
	assert_int_equal(c.notify, FP_NOTIFY_POLL);
	assert_int_equal(c.ipi_after_us, 10);
	assert_int_equal(opt(&c, "notify", "ipi", err), 1);
	assert_int_equal(c.notify, FP_NOTIFY_IPI);
	assert_int_equal(opt(&c, "ipi-after-us", "0", err), 1);
	assert_int_equal(c.ipi_after_us, 0);
	assert_int_equal(c.flush_us, FP_RT_FLUSH_AUTO);   /* the transport's, at startup */
	assert_int_equal(opt(&c, "flush-us", "10", err), 1);
	assert_int_equal(c.flush_us, 10);
	/* --net before --if wins over the implication */
	fp_rt_config_init(&c);
	assert_int_equal(opt(&c, "net", "kernel", err), 1);
	assert_int_equal(opt(&c, "if", "eth0", err), 1);
	assert_int_equal(c.transport, FP_TRANSPORT_KERNEL);
	/* --dpdk implies --net dpdk; --net dpdk alone is taken (the device is checked at start) */
	fp_rt_config_init(&c);
	assert_int_equal(opt(&c, "dpdk", "--vdev=net_memif0", err), 1);
	assert_int_equal(c.transport, FP_TRANSPORT_DPDK);
	assert_string_equal(c.dpdk.args, "--vdev=net_memif0");
	fp_rt_config_init(&c);
	assert_int_equal(opt(&c, "net", "dpdk", err), 1);
	assert_int_equal(c.transport, FP_TRANSPORT_DPDK);
	assert_string_equal(fp_rt_transport_name(c.transport), "dpdk");
}

static void test_options_bad(void **state)
{
	static const char *const bad[][2] = {
		{ "batch", "0" }, { "batch", "1025" }, { "batch", "12x" }, { "batch", "-1" },
		{ "workers", "65" }, { "ip", "300.1.1.1" }, { "ip", "10.0.0.1/33" },
		{ "ip", "10.0.0.1/" }, { "gw", "10.0.0.1/24" }, { "cores", "3-1" },
		{ "cores", "" }, { "cores", "0,,1" }, { "cores", "a" }, { "idle", "nap" },
		{ "net", "dpdkx" }, { "dpdk", "" }, { "xdp-mode", "fast" }, { "xdp-copy", "maybe" },
		{ "rx-drop", "1.5" }, { "rx-drop", "nan" }, { "stats", "a/b" }, { "stats", "" },
		{ "if", "" }, { "umem-frames", "1" }, { "rcv-buf", "10" }, { "seed", "x" },
		{ "notify", "irq" }, { "ipi-after-us", "1000001" }, { "flush-us", "1000001" },
		{ "flush-us", "-1" },
		/* regress_newline_in_value (fuzz_rt_options): the quoted value made two lines */
		{ "batch", "1\n2" }, { "ip", "10.0.0.1\r\n" },
	};
	struct fp_rt_config c;
	char err[256];

	(void)state;
	fp_rt_config_init(&c);
	for (size_t i = 0; i < FP_ARRAY_SIZE(bad); i++) {
		int r = opt(&c, bad[i][0], bad[i][1], err);
		if (r != -1)
			fail_msg("--%s %s was taken", bad[i][0], bad[i][1]);
		assert_true(strlen(err) > 0);
		assert_null(strchr(err, '\n'));
		assert_true(!strncmp(err, "--", 2));
	}
	assert_int_equal(opt(&c, "batch", NULL, err), -1);
	assert_int_equal(c.batch, FP_RT_DEFAULT_BATCH);  /* a bad value changes nothing */
	assert_int_equal(opt(&c, "threads", NULL, err), 0); /* not ours, with or without a value */
}

/* Every name fp_rt_option takes is in the help, whose descriptions start at column 24. */
static void test_options_help(void **state)
{
	const char *p = fp_rt_options_help;
	char want[40];

	(void)state;
	for (unsigned i = 0; fp_rt_option_names[i]; i++) {
		struct fp_rt_config c;
		char err[256];
		snprintf(want, sizeof(want), "  --%s ", fp_rt_option_names[i]);
		assert_non_null(strstr(fp_rt_options_help, want));
		fp_rt_config_init(&c);
		assert_int_not_equal(opt(&c, fp_rt_option_names[i], "?", err), 0);
	}
	while (*p) {
		const char *nl = strchr(p, '\n');
		assert_non_null(nl);
		assert_true(nl - p > 25);
		assert_true(p[23] == ' ' && p[24] != ' ');
		p = nl + 1;
	}
}

/* ---- startup failures: one line on stderr, -errno back ---- */

/* Run with stderr captured; returns the result, the line in @line. */
static int run_captured(const struct fp_rt_config *cfg, char *line, size_t len)
{
	FILE *tmp = tmpfile();
	int saved = dup(2), ret;
	size_t n;

	fflush(stderr);
	dup2(fileno(tmp), 2);
	ret = fp_rt_run(cfg, &test_app);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(line, 1, len - 1, tmp);
	line[n] = '\0';
	fclose(tmp);
	return ret;
}

static void expect_startup_error(const struct fp_rt_config *cfg, int err, const char *step)
{
	char line[1024], want[64], *p = line;

	assert_int_equal(run_captured(cfg, line, sizeof(line)), err);
	/* log lines ("[ 12.345678] W stats: removed ... left by a run that is gone": a run
	 * that died on this machine) come before it and are not the error */
	while (*p == '[' && strchr(p, '\n'))
		p = strchr(p, '\n') + 1;
	snprintf(want, sizeof(want), "flowplane: %s: ", step);
	if (strncmp(p, want, strlen(want)))
		fail_msg("expected '%s...', got '%s'", want, line);
	assert_non_null(strchr(p, '\n'));
	assert_true(strchr(p, '\n')[1] == '\0');  /* exactly one line */
}

static void test_startup_errors(void **state)
{
	struct fp_rt_config c;
	int fd;

	(void)state;
	fp_rt_config_init(&c);
	c.transport = FP_TRANSPORT_XDP;
	expect_startup_error(&c, -EINVAL, "config");           /* no --if */
	c.ifname = "eth0";
	expect_startup_error(&c, -EINVAL, "config");           /* no --ip */
	fp_rt_config_init(&c);
	c.transport = FP_TRANSPORT_PAIR;
	c.ipv4 = IP0;
	expect_startup_error(&c, -EINVAL, "config");           /* no pair queues */
	fp_rt_config_init(&c);
	c.cores[0] = 4000;
	expect_startup_error(&c, -EINVAL, "cores");
	fp_rt_config_init(&c);
	c.n_cores = 1;
	c.n_workers = 2;
	expect_startup_error(&c, -EINVAL, "config");
	fp_rt_config_init(&c);
	c.notify = FP_NOTIFY_IPI;                              /* interrupts without stealing */
	expect_startup_error(&c, -EINVAL, "sched");
	fp_rt_config_init(&c);
	c.flush_us = 10;                                       /* stealing flushes on its own */
	c.sched = FP_SCHED_STEAL;
	expect_startup_error(&c, -EINVAL, "sched");
	/* a stats name held by a live process (pid 1) is refused */
	char name[64], path[80];
	snprintf(name, sizeof(name), "test-rt-busy-%d", (int)getpid());
	snprintf(path, sizeof(path), "/flowplane-%s", name);
	fp_rt_config_init(&c);
	c.stats_name = name;
	fd = shm_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	struct fp_rt_stats_hdr h = { .magic = FP_RT_STATS_MAGIC, .pid = 1 };
	assert_int_equal(write(fd, &h, sizeof(h)), sizeof(h));
	close(fd);
	expect_startup_error(&c, -EEXIST, "stats");
	shm_unlink(path);
}

/* A segment left by a run that died is replaced; junk is refused by readers. */
static void test_stats_segment(void **state)
{
	char name[64], path[80];
	size_t size;
	int fd;

	(void)state;
	errno = 0;
	assert_null(fp_rt_stats_open("no-such-run-here", &size));
	assert_int_equal(errno, ENOENT);
	snprintf(name, sizeof(name), "test-rt-junk-%d", (int)getpid());
	snprintf(path, sizeof(path), "/flowplane-%s", name);
	fd = shm_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	struct fp_rt_stats_hdr h = { .magic = 0x1234, .pid = 0x7ffffff0 };
	assert_int_equal(write(fd, &h, sizeof(h)), sizeof(h));
	close(fd);
	assert_null(fp_rt_stats_open(name, &size));
	assert_int_equal(errno, EPROTO);
	/* a run under that name replaces the stale segment (its pid is not alive) */
	memset(&T, 0, sizeof(T));
	T.mode = MODE_IDLE;
	snprintf(T.stats_name, sizeof(T.stats_name), "%s", name);
	struct fp_devq *ends[2];
	struct fp_rt_config cfg;
	assert_int_equal(fp_pair_create(512, 2048, ends), 0);
	pair_config(&cfg, ends);
	assert_int_equal(fp_rt_run(&cfg, &test_app), 0);
	assert_non_null(T.seg);
	check_header(T.seg);
	munmap((void *)T.seg, T.seg_size);
	pair_drain(ends);
	ends[0]->ops->close(ends[0]);
	ends[1]->ops->close(ends[1]);
	errno = 0;
	assert_null(fp_rt_stats_open(name, &size));
	assert_int_equal(errno, ENOENT);
}

/* IX's control-plane metrics from one worker's sums: the interval's tau, Q, delay and
 * idle share, and their three moving averages (rt_stats.h ctl_*). */
static void test_ctl_metrics(void **state)
{
	struct fp_rt_worker_stats s;
	struct rt_ctl_acc a;

	(void)state;
	fp_tsc_calibrate(20000);
	memset(&s, 0, sizeof(s));
	memset(&a, 0, sizeof(a));
	rt_ctl_interval(&a, &s, 1000, 2);           /* the first call only starts an interval */
	assert_int_equal(s.ctl_intervals, 0);
	assert_int_equal(a.end_us, 1000 + FP_RT_CTL_INTERVAL_US);
	for (int i = 0; i < 100; i++)
		rt_ctl_round(&a, 5000, 3);              /* Q = 3 frames at every poll */
	s.busy_cycles += 300000;
	s.idle_cycles += 100000;
	rt_ctl_interval(&a, &s, a.end_us, 2);
	uint64_t tau = fp_cycles_to_ns(5000);
	assert_int_equal(s.ctl_intervals, 1);
	assert_int_equal(s.ctl_tau_ns, tau);
	assert_int_equal(s.ctl_q_milli, 3000);
	assert_int_equal(s.ctl_delay_ns, 2 * tau);  /* ceil(3 / B=2) rounds */
	assert_int_equal(s.ctl_idle_ppm, 250000);
	for (int k = 0; k < 3; k++) {               /* the first interval seeds the averages */
		assert_int_equal(s.ctl_q_ewma_milli[k], 3000);
		assert_int_equal(s.ctl_delay_ewma_ns[k], 2 * tau);
	}
	for (int i = 0; i < 10; i++)
		rt_ctl_round(&a, 5000, 0);              /* an empty queue */
	s.idle_cycles += 100000;
	rt_ctl_interval(&a, &s, a.end_us, 2);
	assert_int_equal(s.ctl_intervals, 2);
	assert_int_equal(s.ctl_q_milli, 0);
	assert_int_equal(s.ctl_delay_ns, 0);
	assert_int_equal(s.ctl_idle_ppm, 1000000);
	assert_int_equal(s.ctl_q_ewma_milli[0], 1500);   /* alpha 1/2 */
	assert_int_equal(s.ctl_q_ewma_milli[1], 2625);   /* alpha 1/8 */
	assert_int_equal(s.ctl_q_ewma_milli[2], 2907);   /* alpha 1/32, truncated */
	assert_int_equal(s.ctl_idle_ewma_ppm[0], 625000);
	/* an interval with no round at all (a worker asleep throughout) */
	rt_ctl_interval(&a, &s, a.end_us, 2);
	assert_int_equal(s.ctl_intervals, 3);
	assert_int_equal(s.ctl_tau_ns, 0);
	assert_int_equal(s.ctl_idle_ppm, 1000000);
	/* idle from here on: every average reaches exactly 0 (a step the shift rounds to
	 * nothing is one unit: an estimate stuck at 1 ns kept a 0 us bound firing) */
	for (int i = 0; i < 400; i++) {
		rt_ctl_round(&a, 5000, 0);
		rt_ctl_interval(&a, &s, a.end_us, 2);
	}
	for (int k = 0; k < 3; k++) {
		assert_int_equal(s.ctl_delay_ewma_ns[k], 0);
		assert_int_equal(s.ctl_q_ewma_milli[k], 0);
		assert_int_equal(s.ctl_idle_ewma_ppm[k], 1000000);
	}
}

/*
 * The sleeper's half of the wake-up handshake: whatever was asked of a worker after its
 * last look (a move of a group it owns, a park or unpark) is seen by
 * rt_steer_sleep_prepare, since the asker's wake() found it awake and wrote nothing. Before
 * this was checked an idle worker slept through each move asked of it (a second each).
 */
static void test_steer_sleep_sees_requests(void **state)
{
	struct fp_rt_config cfg = { .n_workers = 2, .steer_weights = { 1, 0 },
				    .n_steer_weights = 2 };   /* every group on worker 0 */
	struct rt_run run = { .cfg = &cfg };
	char err[128];

	(void)state;
	assert_int_equal(rt_steer_create(&run, err, sizeof(err)), 0);
	struct rt_steer *s = run.steer;

	assert_true(rt_steer_sleep_prepare(s, 0, false));   /* nothing asked: it may sleep */
	rt_steer_sleep_done(s, 0);
	assert_int_equal(rt_steer_ask_move(s, 5, 1), 0);    /* group 5: worker 0 to 1 */
	assert_false(rt_steer_sleep_prepare(s, 0, false));  /* the move to start first */
	assert_true(rt_steer_sleep_prepare(s, 1, false));   /* not the destination's business */
	rt_steer_sleep_done(s, 1);
	/* a worker asked to receive a group is not parked; one that owns none is */
	assert_int_equal(rt_steer_park(s, 1, true), -EBUSY);
	rt_steer_destroy(&run);

	assert_int_equal(rt_steer_create(&run, err, sizeof(err)), 0);
	s = run.steer;
	assert_int_equal(rt_steer_park(s, 1, true), 0);
	assert_false(rt_steer_sleep_prepare(s, 1, false));  /* parked since it looked */
	assert_false(rt_steer_sleep_prepare(s, 1, true));   /* its queue to lend first */
	struct fp_rt_worker_stats st = { 0 };
	assert_int_equal(rt_steer_hands(s, 1, &st), 0);     /* lent */
	assert_true(rt_steer_sleep_prepare(s, 1, true));
	rt_steer_sleep_done(s, 1);
	assert_int_equal(rt_steer_park(s, 1, false), 0);
	assert_false(rt_steer_sleep_prepare(s, 1, true));   /* unparked since: back to work */
	rt_steer_hands(s, 1, &st);
	assert_false(rt_steer_sleep_prepare(s, 0, false));  /* a queue in its ring for 0 */
	rt_steer_destroy(&run);
}

/* Lending (steer.c): a parked worker's queue goes to a polling worker, on to another when
 * that one parks too, and home at the unpark; no move reaches a worker whose queue is away. */
static void test_steer_lends_parked_queue(void **state)
{
	struct fp_rt_config cfg = { .n_workers = 3, .steer_weights = { 0, 1, 0 },
				    .n_steer_weights = 3 };   /* every group on worker 1 */
	struct rt_run run = { .cfg = &cfg };
	struct fp_rt_worker_stats st[3];
	struct fp_mbuf *out[8];
	char err[128];

	(void)state;
	memset(st, 0, sizeof(st));
	assert_int_equal(rt_steer_create(&run, err, sizeof(err)), 0);
	struct rt_steer *s = run.steer;
#define HANDS(i) rt_steer_hands(s, (i), &st[i])
#define TAKE(i) assert_int_equal(rt_steer_take(s, (i), NULL, NULL, NULL, out, 8, 0, &st[i]), 0)
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(HANDS(i), 1u << i);          /* each polls its own */

	assert_int_equal(rt_steer_park(s, 2, true), 0);
	assert_int_equal(HANDS(2), 0);                      /* lent to the first polling: 0 */
	assert_int_equal(st[2].q_lends, 1);
	assert_int_equal(rt_steer_park(s, 0, true), 0);     /* 0 parks before it took it */
	TAKE(0);
	assert_int_equal(st[0].q_adopted, 1);
	assert_int_equal(HANDS(0), 0);                      /* both on to 1, the one polling */
	TAKE(1);
	assert_int_equal(HANDS(1), 7);
	assert_int_equal(st[1].q_adopted, 2);

	assert_int_equal(rt_steer_ask_move(s, 3, 2), -EHOSTDOWN);
	assert_int_equal(rt_steer_park(s, 2, false), 0);
	assert_int_equal(rt_steer_ask_move(s, 3, 2), -EBUSY);   /* its queue is not home */
	assert_int_equal(HANDS(1), 3);                      /* 2's goes home, 0's stays */
	assert_int_equal(HANDS(2), 0);                      /* not yet taken */
	TAKE(2);
	assert_int_equal(st[2].q_back, 1);
	assert_int_equal(HANDS(2), 4);
	assert_int_equal(rt_steer_ask_move(s, 3, 2), 0);
	rt_steer_destroy(&run);

	/* unparked again before anyone took its queue: still away, no move to it */
	assert_int_equal(rt_steer_create(&run, err, sizeof(err)), 0);
	s = run.steer;
	assert_int_equal(rt_steer_park(s, 2, true), 0);
	assert_int_equal(HANDS(2), 0);
	assert_int_equal(rt_steer_park(s, 2, false), 0);
	assert_int_equal(rt_steer_ask_move(s, 3, 2), -EBUSY);
	TAKE(0);                                            /* 0 takes it, and sends it home */
	assert_int_equal(HANDS(0), 1);
	assert_int_equal(rt_steer_ask_move(s, 3, 2), -EBUSY);
	TAKE(2);
	assert_int_equal(HANDS(2), 4);
	assert_int_equal(rt_steer_ask_move(s, 3, 2), 0);
	rt_steer_destroy(&run);

	/* --park-queue keep: a parked worker polls its own queue */
	cfg.park_queue = FP_PARK_QUEUE_KEEP;
	assert_int_equal(rt_steer_create(&run, err, sizeof(err)), 0);
	s = run.steer;
	assert_int_equal(rt_steer_park(s, 2, true), 0);
	assert_int_equal(HANDS(2), 4);
	rt_steer_destroy(&run);
#undef HANDS
#undef TAKE
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctl_metrics),
		cmocka_unit_test(test_steer_sleep_sees_requests),
		cmocka_unit_test(test_steer_lends_parked_queue),
		cmocka_unit_test(test_options_good),
		cmocka_unit_test(test_options_bad),
		cmocka_unit_test(test_options_help),
		cmocka_unit_test(test_startup_errors),
		cmocka_unit_test(test_stats_segment),
		cmocka_unit_test(test_idle_sleeps),
		cmocka_unit_test(test_idle_adaptive_sleeps),
		cmocka_unit_test(test_tcp_echo_adaptive),
		cmocka_unit_test(test_udp_echo),
		cmocka_unit_test(test_tcp_echo),
		cmocka_unit_test(test_tcp_echo_lossy),
		cmocka_unit_test(test_tcp_echo_reordered),
		cmocka_unit_test(test_tcp_echo_chunked),
		cmocka_unit_test(test_chunked_round_forgets_a_closed_flow),
		cmocka_unit_test(test_conds_forget),
		cmocka_unit_test(test_evl_backpressure),
		cmocka_unit_test(test_evl_client_stop_resets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
