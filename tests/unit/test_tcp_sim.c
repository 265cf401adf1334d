/* test_tcp_sim.c: TCP over the simulated wire: long faulty transfers, connection churn, zero windows, SYN cookies. */
#include <arpa/inet.h>
#include <time.h>

#include <flowplane/rss.h>

#include "tcp_harness.h"

/*
 * Two hosts on one simulated segment: a (10.0.0.1) dials, b (10.0.0.2) listens on port 80.
 * Every connection carries one seeded stream each way; the stream key depends on the
 * client's port, so both ends know what to send and what to expect without talking about
 * it. Each receiver checks every byte where it lands and keeps a hash; the test compares
 * each sender's hash with its receiver's at the end. Flows end with a clean close
 * (shutdown, EOF, close) unless the test asks for an abort.
 *
 * FP_SIM_BYTES sets the bytes per connection per direction of the long transfer (a):
 * 100 MB by default in an optimized build (NDEBUG), 16 MB under the sanitizers so the debug
 * suite stays quick; FP_TEST_SEED replays a run; FP_TEST_FILTER picks tests ("*churn*").
 * On a failure the unfinished flows of both ends are printed with their conns' state.
 */

#define PORT        80
#define MAX_PORTS   65536
#define CHUNK       (64 * 1024)
/* A TIME_WAIT shorter than the default keeps the churn test's port use low; it must still
 * outlast the peer's retransmission timeout, or a FIN retransmitted after it is answered
 * with RST. That RTO can be seconds: a SYN-ACK retransmitted after the initial 1 s RTO
 * gives the dialer an RTT sample of a second (RFC 6298, as in Linux). */
#define TW_US       (10 * 1000 * 1000)

struct world;

struct flow {
	struct fp_tcp_conn *c;
	uint16_t port;                 /* the client's port: the flow's name on both ends */
	uint64_t tx_key, rx_key;
	uint64_t tx_total, rx_total;
	uint64_t sent, acked, rcvd;
	uint64_t held;                 /* received, not yet recv_done (zero-window test) */
	struct th_hash tx_hash, rx_hash;
	bool abort_after;              /* client: abort instead of closing */
	bool shut, eof, finished, reset;
	long long bad_off;
};

struct ep {
	struct world *w;
	struct th_node node;
	bool client;
	struct flow **by_port;
	unsigned finished, errors;
	uint64_t hold_until_us;        /* hold received data (no recv_done) until then */
	/* client: the wave being dialed */
	unsigned to_dial;
};

struct world {
	struct fp_sim *sim;
	struct ep a, b;
	uint64_t seed, wave;
	uint64_t c2s_bytes, s2c_bytes; /* 0: random per flow in [0, 3000) */
	unsigned abort_pct;
	unsigned wave_n;
	uint32_t keepalive_us;         /* server conns: keep-alive idle time (0: off) */
	bool nagle;                    /* the client sends with Nagle on */
	uint8_t buf[CHUNK];
};

/* ---- flows ---- */

static uint64_t flow_key(const struct world *w, uint16_t port, unsigned dir)
{
	return th_mix(w->seed ^ ((uint64_t)port << 1 | dir) ^ (w->wave << 20));
}

static uint64_t flow_bytes(uint64_t key, uint64_t fixed)
{
	return fixed ? fixed : th_mix(key ^ 0x55) % 3000;
}

static void ep_error(struct ep *e, const struct flow *f, const char *what, long long v)
{
	if (e->errors++ < 10)
		print_message("# %s port %u: %s (%lld)\n", e->client ? "client" : "server",
			      f ? f->port : 0, what, v);
}

static struct flow *flow_new(struct ep *e, struct fp_tcp_conn *c, uint16_t port)
{
	struct world *w = e->w;
	struct flow *f = calloc(1, sizeof(*f));
	uint64_t c2s = flow_key(w, port, 0), s2c = flow_key(w, port, 1);

	assert_non_null(f);
	f->c = c;
	f->port = port;
	f->tx_key = e->client ? c2s : s2c;
	f->rx_key = e->client ? s2c : c2s;
	f->tx_total = flow_bytes(f->tx_key, e->client ? w->c2s_bytes : w->s2c_bytes);
	f->rx_total = flow_bytes(f->rx_key, e->client ? w->s2c_bytes : w->c2s_bytes);
	/* Only a flow with data for the client may abort: then the server has surely
	 * accepted it (an embryonic conn reset by the abort would never be seen). */
	f->abort_after = (th_mix(c2s ^ 0xab) % 100) < w->abort_pct &&
			 flow_bytes(s2c, w->s2c_bytes) > 0;
	f->bad_off = -1;
	if (e->by_port[port])
		ep_error(e, f, "port already has a live flow", port);
	free(e->by_port[port]);
	e->by_port[port] = f;
	fp_tcp_set_cookie(c, (uint64_t)(uintptr_t)f);
	return f;
}

/* The IX contract: offer what sendable() says, expect it all taken. */
static void flow_send(struct ep *e, struct flow *f)
{
	struct fp_stack *st = e->node.st;

	while (f->c && f->sent < f->tx_total) {
		size_t room = fp_tcp_sendable(st, f->c);
		if (room == 0) {
			/* Offer a byte anyway: a refused send is what makes the stack report
			 * (SENT) when the windows open, and probe a shut window (net.h). */
			th_stream_fill(f->tx_key, f->sent, e->w->buf, 1);
			ssize_t r = fp_tcp_send(st, f->c, e->w->buf, 1);
			if (r != 0)
				ep_error(e, f, "send took more than sendable", r);
			break;
		}
		size_t n = f->tx_total - f->sent;
		n = n < room ? n : room;
		n = n < CHUNK ? n : CHUNK;
		th_stream_fill(f->tx_key, f->sent, e->w->buf, n);
		ssize_t r = fp_tcp_send(st, f->c, e->w->buf, n);
		if (r < 0) {
			ep_error(e, f, "send failed", r);
			return;
		}
		/* Nagle: with data in flight a tail short of a segment waits. */
		if ((size_t)r != n && !(e->client && e->w->nagle && (size_t)r == n - n % 1460))
			ep_error(e, f, "send took less than sendable", r);
		th_hash_feed(&f->tx_hash, e->w->buf, (size_t)r);
		f->sent += (uint64_t)r;
		if ((size_t)r < n)
			break;
	}
	if (f->c && f->sent == f->tx_total && !f->shut && !(e->client && f->abort_after)) {
		f->shut = true;
		if (fp_tcp_shutdown(st, f->c))
			ep_error(e, f, "shutdown failed", 0);
	}
}

static void flow_end(struct ep *e, struct flow *f, bool abort)
{
	if (abort)
		fp_tcp_abort(e->node.st, f->c);
	else
		fp_tcp_close(e->node.st, f->c);
	f->c = NULL;
	f->finished = true;
	e->finished++;
}

/* Close once everything went both ways; an abort flow's client resets instead. */
static void flow_maybe_done(struct ep *e, struct flow *f)
{
	if (!f->c || f->rcvd != f->rx_total || f->acked != f->tx_total || f->held)
		return;
	if (e->client && f->abort_after) {
		flow_end(e, f, true);
		return;
	}
	if (f->eof && f->shut)
		flow_end(e, f, false);
}

static void flow_recv(struct ep *e, struct flow *f, const struct fp_event *ev, uint64_t now)
{
	const uint8_t *p = fp_mbuf_data(ev->m);

	if (ev->len != ev->m->data_len)
		ep_error(e, f, "RECV len differs from the buffer's data window", ev->len);
	if (f->rcvd + ev->len > f->rx_total)
		ep_error(e, f, "more bytes than sent", (long long)(f->rcvd + ev->len));
	long long bad = th_stream_check(f->rx_key, f->rcvd, p, ev->len);
	if (bad >= 0 && f->bad_off < 0) {
		f->bad_off = bad;
		ep_error(e, f, "corrupt byte at offset", bad);
	}
	th_hash_feed(&f->rx_hash, p, ev->len);
	f->rcvd += ev->len;
	if (now < e->hold_until_us) {
		f->held += ev->len;
		return;
	}
	fp_tcp_recv_done(e->node.st, f->c, ev->len);
}

/* ---- the application on each host ---- */

static void on_dead(struct ep *e, struct flow *f, const struct fp_event *ev)
{
	if (ev->type == FP_EV_TCP_CONNECTED)
		ep_error(e, f, "connect failed", ev->status);
	else if (ev->status == -ECONNRESET && !e->client && f->abort_after &&
		 f->rcvd == f->rx_total)
		f->reset = true; /* the client's abort */
	else if (ev->status != 0 || !f->eof)
		ep_error(e, f, "conn died", ev->status);
	flow_end(e, f, false);
}

static void on_event(struct ep *e, const struct fp_event *ev, uint64_t now)
{
	/* Not the cookie: events queued before the app set it (a RECV right behind its
	 * ACCEPTED, in the same batch) carry the listener's. The client's port names a flow. */
	struct flow *f = e->by_port[e->client ? ev->lport : ev->rport];

	switch (ev->type) {
	case FP_EV_TCP_ACCEPTED:
		f = flow_new(e, ev->conn, ev->rport);
		/* An abort whose RST is lost leaves a conn waiting for a FIN that never
		 * comes: keep-alive finds out (the probe is answered with RST). */
		if (e->w->keepalive_us)
			assert_int_equal(fp_tcp_keepalive(e->node.st, f->c, e->w->keepalive_us,
							  e->w->keepalive_us / 4, 4), 0);
		flow_send(e, f);
		return;
	default:
		break;
	}
	if (!f || (f->c != ev->conn && f->c)) {
		ep_error(e, f, "event for an unknown conn", ev->type);
		return;
	}
	switch (ev->type) {
	case FP_EV_TCP_CONNECTED:
		if (ev->status) {
			on_dead(e, f, ev);
			return;
		}
		flow_send(e, f);
		break;
	case FP_EV_TCP_RECV:
		if (!f->c)
			return; /* released already: the buffer went with it */
		flow_recv(e, f, ev, now);
		break;
	case FP_EV_TCP_SENT:
		f->acked += ev->len;
		if (f->acked > f->sent)
			ep_error(e, f, "SENT acked more than was sent", (long long)f->acked);
		flow_send(e, f);
		break;
	case FP_EV_TCP_EOF:
		f->eof = true;
		if (f->rcvd != f->rx_total)
			ep_error(e, f, "EOF before all data", (long long)f->rcvd);
		break;
	case FP_EV_TCP_DEAD:
		if (f->c)
			on_dead(e, f, ev);
		return;
	default:
		ep_error(e, f, "unexpected event", ev->type);
		return;
	}
	if (f->c)
		flow_maybe_done(e, f);
}

/* Release everything held once the hold is over (the zero-window receiver reopens). */
static void ep_unhold(struct ep *e)
{
	for (unsigned p = 0; p < MAX_PORTS; p++) {
		struct flow *f = e->by_port[p];
		if (f && f->c && f->held) {
			fp_tcp_recv_done(e->node.st, f->c, f->held);
			f->held = 0;
			flow_maybe_done(e, f);
		}
	}
}

static void client_dial(struct ep *e)
{
	struct world *w = e->w;

	while (e->to_dial) {
		int err = 0;
		struct fp_tcp_conn *c = fp_tcp_dial(e->node.st, w->b.node.ip, PORT, 0, &err);
		if (!c) {
			ep_error(e, NULL, "dial failed", err);
			return;
		}
		struct fp_tcp_info info;
		fp_tcp_info(c, &info);
		flow_new(e, c, info.lport);
		e->to_dial--;
	}
}

static uint64_t app(struct fp_stack *st, void *arg, uint64_t now)
{
	struct ep *e = arg;
	struct fp_event ev[64];
	unsigned n;

	if (e->client)
		client_dial(e);
	if (e->hold_until_us && now >= e->hold_until_us) {
		e->hold_until_us = 0;
		ep_unhold(e);
	}
	while ((n = fp_stack_events(st, ev, FP_ARRAY_SIZE(ev))) > 0)
		for (unsigned i = 0; i < n; i++)
			on_event(e, &ev[i], now);
	return e->hold_until_us ? e->hold_until_us : UINT64_MAX;
}

/* ---- the world ---- */

#define T0_US 1000000u

static void world_init(struct world *w, const struct fp_sim_params *sp,
		       struct fp_stack_config ca, struct fp_stack_config cb, uint32_t n_bufs)
{
	w->seed = fp_test_seed();
	w->a.w = w->b.w = w;
	w->a.client = true;
	th_node_init(&w->a.node, n_bufs, ca, T0_US);
	th_node_init(&w->b.node, n_bufs, cb, T0_US);
	w->a.by_port = calloc(MAX_PORTS, sizeof(*w->a.by_port));
	w->b.by_port = calloc(MAX_PORTS, sizeof(*w->b.by_port));
	assert_non_null(w->a.by_port);
	assert_non_null(w->b.by_port);
	w->sim = fp_sim_create(sp, T0_US);
	assert_non_null(w->sim);
	assert_int_equal(fp_sim_attach(w->sim, w->a.node.st, &w->a.node.cache, app, &w->a), 0);
	assert_int_equal(fp_sim_attach(w->sim, w->b.node.st, &w->b.node.cache, app, &w->b), 1);
	assert_int_equal(fp_tcp_listen(w->b.node.st, PORT, 0), 0);
}

static struct fp_stack_config base_cfg(struct th_node *n, uint8_t host)
{
	struct fp_stack_config c = th_config(n, host);

	c.rcv_buf = 128 * 1024;
	c.time_wait_us = TW_US;
	return c;
}

static bool wave_done(void *arg)
{
	struct world *w = arg;

	return w->a.finished == w->wave_n && w->b.finished == w->wave_n;
}

/* Compare each flow's hashes end to end, then forget the wave. Returns flows compared. */
static unsigned wave_check(struct world *w)
{
	unsigned n = 0;

	for (unsigned p = 0; p < MAX_PORTS; p++) {
		struct flow *cf = w->a.by_port[p], *sf = w->b.by_port[p];
		if (!cf && !sf)
			continue;
		if (!cf || !sf) {
			ep_error(&w->a, cf ? cf : sf, "flow on one end only", p);
		} else {
			if (th_hash_final(&cf->tx_hash) != th_hash_final(&sf->rx_hash) ||
			    cf->tx_hash.n != cf->tx_total)
				ep_error(&w->a, cf, "client->server stream hash differs",
					 (long long)sf->rx_hash.n);
			if (th_hash_final(&sf->tx_hash) != th_hash_final(&cf->rx_hash) ||
			    sf->tx_hash.n != sf->tx_total)
				ep_error(&w->a, cf, "server->client stream hash differs",
					 (long long)cf->rx_hash.n);
			n++;
		}
		free(cf);
		free(sf);
		w->a.by_port[p] = w->b.by_port[p] = NULL;
	}
	return n;
}

static void dump_flow(const char *who, const struct flow *f)
{
	struct fp_tcp_info i;

	if (!f) {
		print_message("#   %s: no flow\n", who);
		return;
	}
	memset(&i, 0, sizeof(i));
	if (f->c)
		fp_tcp_info(f->c, &i);
	print_message("#   %s port %u: sent %llu/%llu acked %llu rcvd %llu/%llu eof %d shut %d "
		      "fin %d | %s una %u nxt %u wnd %u rcv_nxt %u rcv_wnd %u cwnd %u unacked %u "
		      "ooo %u held %u rexmit %u\n", who, f->port,
		      (unsigned long long)f->sent, (unsigned long long)f->tx_total,
		      (unsigned long long)f->acked, (unsigned long long)f->rcvd,
		      (unsigned long long)f->rx_total, f->eof, f->shut, f->finished,
		      f->c ? fp_tcp_state_name(i.state) : "-", i.snd_una, i.snd_nxt, i.snd_wnd,
		      i.rcv_nxt, i.rcv_wnd, i.cwnd, i.unacked_bytes, i.ooo_bytes, i.held_bytes,
		      i.retransmits);
}

/* What an unfinished wave left: both ends of every flow not finished. */
static void dump_unfinished(struct world *w)
{
	unsigned shown = 0;

	for (unsigned p = 0; p < MAX_PORTS && shown < 8; p++) {
		struct flow *cf = w->a.by_port[p], *sf = w->b.by_port[p];
		if ((!cf && !sf) || (cf && sf && cf->finished && sf->finished))
			continue;
		dump_flow("client", cf);
		dump_flow("server", sf);
		shown++;
	}
}

/* Dial @n flows and run until all are finished on both ends (or @limit_us passes). */
static void run_wave(struct world *w, unsigned n, uint64_t limit_us)
{
	w->a.finished = w->b.finished = 0;
	w->a.to_dial = n;
	w->wave_n = n;
	uint64_t t = fp_sim_run(w->sim, fp_sim_now(w->sim) + limit_us, wave_done, w);
	if (!wave_done(w)) {
		print_message("# wave of %u: client finished %u, server %u at t=%llu us\n", n,
			      w->a.finished, w->b.finished, (unsigned long long)t);
		dump_unfinished(w);
	}
	assert_int_equal(w->a.finished, n);
	assert_int_equal(w->b.finished, n);
	assert_int_equal(wave_check(w), n);
	assert_int_equal(w->a.errors + w->b.errors, 0);
	w->wave++;
}

/* Let TIME_WAIT and every timer run out; then nothing may be left: no control block but
 * the listener, no buffer out of either pool. */
static void world_quiesce_check(struct world *w)
{
	uint64_t tw = 1000000 + 2 * TW_US;

	fp_sim_run(w->sim, fp_sim_now(w->sim) + tw, NULL, NULL);
	assert_int_equal(fp_stack_tcp_conns(w->a.node.st), 0);
	assert_int_equal(fp_stack_tcp_conns(w->b.node.st), 1);
	assert_int_equal(fp_tcp_unlisten(w->b.node.st, PORT), 0);
	assert_int_equal(fp_stack_tcp_conns(w->b.node.st), 0);
	assert_int_equal(fp_stack_tx_pending(w->a.node.st), 0);
	assert_int_equal(fp_stack_tx_pending(w->b.node.st), 0);
	assert_int_equal(fp_pool_in_use(w->a.node.pool), 0);
	assert_int_equal(fp_pool_in_use(w->b.node.pool), 0);
}

static void world_fini(struct world *w)
{
	fp_sim_destroy(w->sim);
	for (unsigned p = 0; p < MAX_PORTS; p++) {
		free(w->a.by_port[p]);
		free(w->b.by_port[p]);
	}
	free(w->a.by_port);
	free(w->b.by_port);
	th_node_fini(&w->a.node);
	th_node_fini(&w->b.node);
}

static void print_stats(const char *name, struct world *w, double secs)
{
	struct fp_net_stats a = th_stats(&w->a.node), b = th_stats(&w->b.node);
	struct fp_sim_stats ss;

	fp_sim_stats(w->sim, &ss);
	print_message("# %s: %.2f s wall, %.3f s virtual; wire %llu frames (lost %llu dup %llu "
		      "reord %llu corrupt %llu); rexmit %llu+%llu fast %llu+%llu rto %llu+%llu "
		      "bad_csum %llu+%llu ooo %llu+%llu\n",
		      name, secs, (double)(fp_sim_now(w->sim) - T0_US) / 1e6,
		      (unsigned long long)ss.frames, (unsigned long long)ss.lost,
		      (unsigned long long)ss.duplicated, (unsigned long long)ss.reordered,
		      (unsigned long long)ss.corrupted,
		      (unsigned long long)a.tcp_rexmit, (unsigned long long)b.tcp_rexmit,
		      (unsigned long long)a.tcp_fast_rexmit, (unsigned long long)b.tcp_fast_rexmit,
		      (unsigned long long)a.tcp_rto, (unsigned long long)b.tcp_rto,
		      (unsigned long long)(a.tcp_bad_csum + a.ip_bad_csum),
		      (unsigned long long)(b.tcp_bad_csum + b.ip_bad_csum),
		      (unsigned long long)a.tcp_ooo_seg, (unsigned long long)b.tcp_ooo_seg);
}

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const struct fp_sim_params faulty = {
	.loss = 0.02, .duplicate = 0.01, .reorder = 0.02, .corrupt = 0.001,
	.delay_us = 20, .jitter_us = 5, .bandwidth_bps = 10000000000ull,
};

/* Many connections, each carrying @bytes each way through the faulty wire, intact. */
static void bulk_cfg(const char *name, unsigned conns, uint64_t bytes, uint32_t n_bufs,
		     struct fp_stack_config ca, struct fp_stack_config cb)
{
	struct world *w = calloc(1, sizeof(*w));
	struct fp_sim_params sp = faulty;
	double t0 = wall_now();

	assert_non_null(w);
	sp.seed = fp_test_seed();
	world_init(w, &sp, ca, cb, n_bufs);
	w->nagle = ca.nagle; /* no timestamps with it here: segments of 1460 */
	w->c2s_bytes = w->s2c_bytes = bytes;
	run_wave(w, conns, 3600ull * 1000000);
	print_stats(name, w, wall_now() - t0);
	world_quiesce_check(w);
	world_fini(w);
	free(w);
}

static void bulk(const char *name, unsigned conns, uint64_t bytes, uint32_t n_bufs)
{
	struct th_node a, b;

	bulk_cfg(name, conns, bytes, n_bufs, base_cfg(&a, 1), base_cfg(&b, 2));
}

/* (e) the quick one: a few MB with every fault. */
static void test_bulk_small_faulty(void **state)
{
	(void)state;
	bulk("bulk 4 conns x 1 MB each way", 4, 1u << 20, 8192);
}

/* The same without SACK and timestamps (NewReno on duplicate ACKs alone, Karn's rule),
 * with Nagle on one end and every segment ACKed at once on the other. */
static void test_bulk_small_faulty_reno(void **state)
{
	struct th_node a, b;
	struct fp_stack_config ca = base_cfg(&a, 1), cb = base_cfg(&b, 2);

	(void)state;
	ca.no_sack = cb.no_sack = true;
	ca.no_timestamps = cb.no_timestamps = true;
	ca.nagle = true;
	cb.delack_us = FP_NET_DELACK_OFF;
	bulk_cfg("bulk reno 4 conns x 1 MB each way", 4, 1u << 20, 8192, ca, cb);
}

/* (a) 50 concurrent connections, FP_SIM_BYTES each way each, 2% loss, reordering,
 * duplication, 0.1% corruption. */
static void test_bulk_50_conns(void **state)
{
	(void)state;
#ifdef NDEBUG
	uint64_t dflt = 100ull << 20;
#else
	uint64_t dflt = 16ull << 20;
#endif
	uint64_t bytes = th_env_u64("FP_SIM_BYTES", dflt);
	char name[96];

	snprintf(name, sizeof(name), "bulk 50 conns x %llu bytes each way",
		 (unsigned long long)bytes);
	bulk(name, 50, bytes, 32768);
}

/* (b) 10,000 connections opened and closed in waves (short TIME_WAIT, a tenth aborted
 * by the client, 1% loss): no control block and no buffer left afterwards. */
static void test_churn(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	struct fp_sim_params sp = { .loss = 0.01, .delay_us = 20, .jitter_us = 5 };
	unsigned waves = 10, per_wave = 1000;
	double t0 = wall_now();

	(void)state;
	assert_non_null(w);
	sp.seed = fp_test_seed() ^ 0xc4;
	world_init(w, &sp, base_cfg(&w->a.node, 1), base_cfg(&w->b.node, 2), 16384);
	w->abort_pct = 10;
	w->keepalive_us = 200 * 1000;
	for (unsigned i = 0; i < waves; i++) {
		run_wave(w, per_wave, 600ull * 1000000);
		/* Between waves: everything in flight settles; only TIME_WAIT may remain. */
		fp_sim_run(w->sim, fp_sim_now(w->sim) + 2 * TW_US + 200000, NULL, NULL);
		assert_int_equal(fp_stack_tcp_conns(w->a.node.st), 0);
		assert_int_equal(fp_stack_tcp_conns(w->b.node.st), 1);
		assert_int_equal(fp_pool_in_use(w->a.node.pool), 0);
		assert_int_equal(fp_pool_in_use(w->b.node.pool), 0);
	}
	print_stats("churn 10 x 1000 conns", w, wall_now() - t0);
	world_quiesce_check(w);
	world_fini(w);
	free(w);
}

/* (c) The server holds everything it receives (no recv_done) for a while: the sender
 * stalls at the window, probes it, and finishes once the window reopens. */
static void zero_window(double loss)
{
	struct world *w = calloc(1, sizeof(*w));
	struct fp_sim_params sp = { .loss = loss, .delay_us = 20, .jitter_us = 5 };
	const uint64_t hold_us = 5 * 1000 * 1000;

	assert_non_null(w);
	sp.seed = fp_test_seed() ^ 0x2e;
	struct fp_stack_config cb = base_cfg(&w->b.node, 2);
	cb.rcv_buf = 64 * 1024;
	world_init(w, &sp, base_cfg(&w->a.node, 1), cb, 8192);
	w->c2s_bytes = 1u << 20;
	w->s2c_bytes = 1000;
	w->b.hold_until_us = fp_sim_now(w->sim) + hold_us;
	w->a.to_dial = 1;
	w->wave_n = 1;
	fp_sim_run(w->sim, fp_sim_now(w->sim) + hold_us - 1000, NULL, NULL);

	/* Stalled: the whole receive buffer held, nothing more accepted, probes went out. */
	struct flow *cf = NULL, *sf = NULL;
	for (unsigned p = 0; p < MAX_PORTS && !cf; p++)
		if (w->a.by_port[p])
			cf = w->a.by_port[p], sf = w->b.by_port[p];
	assert_non_null(cf);
	assert_non_null(sf);
	struct fp_tcp_info ci;
	fp_tcp_info(cf->c, &ci);
	/* The sender stalls a little short of the buffer, never beyond it: the scaled
	 * field is rounded down (RFC 7323 §2.4), and the receiver moves its edge right
	 * only by an MSS or to the whole buffer (SWS avoidance): within an MSS. */
	uint64_t slack = 1460;
	if (ci.snd_wnd || ci.unacked_bytes || sf->held + slack < cb.rcv_buf ||
	    sf->held > cb.rcv_buf) {
		dump_flow("client", cf);
		dump_flow("server", sf);
	}
	assert_int_equal(ci.snd_wnd, 0);
	assert_int_equal(ci.unacked_bytes, 0);
	assert_in_range(sf->held, cb.rcv_buf - slack, cb.rcv_buf);
	assert_int_equal(cf->acked, sf->held);
	assert_int_equal(fp_tcp_sendable(w->a.node.st, cf->c), 0);
	struct fp_net_stats as = th_stats(&w->a.node);
	assert_true(as.tcp_zero_window_probe >= 3);
	print_message("# zero window (loss %.2f): %llu probes while stalled at %llu bytes\n",
		      loss, (unsigned long long)as.tcp_zero_window_probe,
		      (unsigned long long)cf->acked);

	w->a.finished = w->b.finished = 0;
	fp_sim_run(w->sim, fp_sim_now(w->sim) + 600ull * 1000000, wave_done, w);
	assert_true(wave_done(w));
	assert_int_equal(wave_check(w), 1);
	assert_int_equal(w->a.errors + w->b.errors, 0);
	world_quiesce_check(w);
	world_fini(w);
	free(w);
}

static void test_zero_window(void **state)
{
	(void)state;
	zero_window(0);
}

static void test_zero_window_lossy(void **state)
{
	(void)state;
	zero_window(0.02);
}

/* (d) A backlog of one and many simultaneous dials: all but the first get SYN cookies
 * and every one connects and carries its data. With timestamps on both ends the cookie
 * conns still get window scaling and SACK (carried in the TSval). */
static void syn_cookies(bool timestamps)
{
	struct world *w = calloc(1, sizeof(*w));
	struct fp_sim_params sp = { .delay_us = 20, .jitter_us = 5 };
	unsigned n = 300;

	assert_non_null(w);
	sp.seed = fp_test_seed() ^ 0x5c;
	struct fp_stack_config ca = base_cfg(&w->a.node, 1), cb = base_cfg(&w->b.node, 2);
	cb.syn_backlog = 1;
	ca.no_timestamps = !timestamps;
	world_init(w, &sp, ca, cb, 16384);
	w->c2s_bytes = 5000;
	w->s2c_bytes = 7000;
	run_wave(w, n, 600ull * 1000000);
	struct fp_net_stats bs = th_stats(&w->b.node);
	print_message("# syn cookies (ts %d): %llu sent, %llu ok, %llu bad, %llu accepted\n",
		      timestamps, (unsigned long long)bs.tcp_syn_cookie_tx,
		      (unsigned long long)bs.tcp_syn_cookie_ok,
		      (unsigned long long)bs.tcp_syn_cookie_bad,
		      (unsigned long long)bs.tcp_accepted);
	assert_true(bs.tcp_syn_cookie_tx >= n / 2);
	/* Every cookie came back good; "bad" counts segments that overtook the first one
	 * after the SYN-ACK (the wire's jitter reorders) and were dropped. */
	assert_int_equal(bs.tcp_syn_cookie_ok, bs.tcp_syn_cookie_tx);
	assert_int_equal(bs.tcp_accepted, n);
	world_quiesce_check(w);
	world_fini(w);
	free(w);
}

static void test_syn_cookies(void **state)
{
	(void)state;
	syn_cookies(true);
}

static void test_syn_cookies_no_ts(void **state)
{
	(void)state;
	syn_cookies(false);
}

/* Ephemeral ports steer replies to our queue (IX): with 4 queues, every port dial picks
 * makes the Toeplitz hash of the reply's 4-tuple land on queue 3. And max_conns holds. */
static void test_dial_ports_and_limit(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	struct fp_sim_params sp = { .delay_us = 20 };
	struct fp_rss rss;

	(void)state;
	assert_non_null(w);
	struct fp_stack_config ca = base_cfg(&w->a.node, 1), cb = base_cfg(&w->b.node, 2);
	ca.n_queues = 4;
	ca.queue_id = 3;
	ca.max_conns = 40;
	world_init(w, &sp, ca, cb, 4096);
	fp_rss_init(&rss, fp_rss_key_default);
	struct fp_tcp_conn *c[41];
	for (unsigned i = 0; i < 40; i++) {
		int err = -1;
		struct fp_tcp_info info;
		c[i] = fp_tcp_dial(w->a.node.st, w->b.node.ip, PORT, i, &err);
		assert_non_null(c[i]);
		assert_int_equal(err, 0);
		fp_tcp_info(c[i], &info);
		uint32_t h = fp_rss_ipv4_l4(&rss, htonl(info.raddr), htonl(info.laddr),
					    htons(info.rport), htons(info.lport));
		assert_int_equal(h % 4, 3);
		for (unsigned j = 0; j < i; j++)
			assert_true(c[j] != c[i]);
	}
	int err = 0;
	assert_null(fp_tcp_dial(w->a.node.st, w->b.node.ip, PORT, 40, &err));
	assert_int_equal(err, -ENOBUFS);
	assert_int_equal(th_stats(&w->a.node).tcp_conn_limit, 1);
	assert_int_equal(fp_stack_tcp_conns(w->a.node.st), 40);
	for (unsigned i = 0; i < 40; i++)
		fp_tcp_abort(w->a.node.st, c[i]);
	assert_int_equal(fp_stack_tcp_conns(w->a.node.st), 0);
	world_quiesce_check(w);
	world_fini(w);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bulk_small_faulty),
		cmocka_unit_test(test_bulk_small_faulty_reno),
		cmocka_unit_test(test_dial_ports_and_limit),
		cmocka_unit_test(test_zero_window),
		cmocka_unit_test(test_zero_window_lossy),
		cmocka_unit_test(test_syn_cookies),
		cmocka_unit_test(test_syn_cookies_no_ts),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_bulk_50_conns),
	};

	if (getenv("FP_TEST_FILTER"))
		cmocka_set_test_filter(getenv("FP_TEST_FILTER")); /* e.g. "*zero*" */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
