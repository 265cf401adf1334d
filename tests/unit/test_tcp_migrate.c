/* test_tcp_migrate.c: TCP connections moved between two stacks on one address by flow group (fp_stack_tcp_export/import), mid-transfer, with loss. */
#include <arpa/inet.h>

#include <flowplane/rss.h>

#include "tcp_harness.h"

/*
 * Three stacks: a peer P (10.0.0.2) and two stacks A and B on the server's address and MAC
 * (10.0.0.1), as two workers of one process are. A hand-made wire carries P's frames to A
 * or B by the flow group of their 4-tuple (a table, as the runtime's software steering
 * does) and A's and B's frames to P, copying each into the receiver's pool as a NIC's DMA
 * would, and dropping a seeded fraction both ways. P dials; every connection carries a
 * seeded stream of its own size each way, checked byte for byte where it lands.
 *
 * While the streams run, groups move: at a quarter of the bytes the odd groups go from A
 * to B, at half every group goes to A, at three quarters every group goes to B. Each move
 * is fp_stack_tcp_export on one stack, fp_stack_tcp_import on the other, and the wire's
 * table switched, between two rounds. The server's application keeps each flow's handle
 * and calls the stack whose events it is handling, which is the flow's owner. At the end every stream must have
 * arrived whole, every connection be gone from all three stacks, and every buffer be back
 * in its own pool (B frees buffers of A's pool that came with the connections).
 */

#define PORT      80
#define MAX_PORTS 65536
#define NFLOWS    24
#define STEP_US   20
/* TIME_WAIT must outlast the peer's retransmission timeout (a lost last ACK brings the FIN
 * back after it), or the FIN meets a RST: test_tcp_sim.c says why it can be a second. */
#define TW_US     (10 * 1000 * 1000)
#define QUIET_STEP_US 1000

struct mflow {
	struct fp_tcp_conn *c;
	uint16_t port;                 /* the client's: the flow's name on both ends */
	uint64_t tx_key, rx_key, tx_total, rx_total;
	uint64_t sent, acked, rcvd;
	bool shut, eof, done;
};

struct mworld {
	struct th_node p, srv[2];      /* srv[0] = A, srv[1] = B */
	struct fp_rss rss;             /* the steering hash (symmetric key) */
	uint8_t owner[FP_RSS_GROUPS];  /* group -> 0 (A) or 1 (B): the wire's table */
	struct mflow *cli[MAX_PORTS], *sv[MAX_PORTS];
	uint64_t now, rng, seed;
	double loss;
	unsigned cli_done, srv_done, errors, moves, moved, dropped;
	uint64_t bytes_total, bytes_rcvd;
	uint8_t buf[64 * 1024];
};

static unsigned group_of(struct mworld *w, uint16_t cport)
{
	return fp_rss_group(fp_rss_ipv4_l4(&w->rss, htonl(w->p.ip), htonl(w->srv[0].ip),
					   htons(cport), htons(PORT)));
}

static void merr(struct mworld *w, const struct mflow *f, const char *what, long long v)
{
	print_error("flow %u: %s (%lld) at t=%llu us, its group on %c\n", f ? f->port : 0, what,
		    v, (unsigned long long)w->now, f && w->owner[group_of(w, f->port)] ? 'B' : 'A');
	w->errors++;
}

static uint64_t rnd(struct mworld *w) { return th_mix(w->rng += 0x9e3779b97f4a7c15ull); }


/* ---- streams ---- */

static struct mflow *mflow_new(struct mworld *w, bool client, struct fp_tcp_conn *c,
			       uint16_t port)
{
	struct mflow *f = calloc(1, sizeof(*f));
	uint64_t kc = th_mix(w->seed ^ port), ks = th_mix(w->seed ^ port ^ 0x5555);

	assert_non_null(f);
	f->c = c;
	f->port = port;
	f->tx_key = client ? kc : ks;
	f->rx_key = client ? ks : kc;
	f->tx_total = 1000 + th_mix(f->tx_key) % 1500000;
	f->rx_total = 1000 + th_mix(f->rx_key) % 1500000;
	(client ? w->cli : w->sv)[port] = f;
	if (client)
		w->bytes_total += f->tx_total + f->rx_total;
	return f;
}

static void mflow_send(struct mworld *w, struct fp_stack *st, struct mflow *f)
{
	while (f->c && f->sent < f->tx_total) {
		size_t room = fp_tcp_sendable(st, f->c), n = f->tx_total - f->sent;
		if (!room) {
			th_stream_fill(f->tx_key, f->sent, w->buf, 1);
			if (fp_tcp_send(st, f->c, w->buf, 1) != 0)
				merr(w, f, "send took more than sendable", 0);
			return;
		}
		n = n < room ? n : room;
		n = n < sizeof(w->buf) ? n : sizeof(w->buf);
		th_stream_fill(f->tx_key, f->sent, w->buf, n);
		ssize_t r = fp_tcp_send(st, f->c, w->buf, n);
		if (r < 0) {
			merr(w, f, "send failed", r);
			return;
		}
		f->sent += (uint64_t)r;
		if ((size_t)r < n)
			return;
	}
	if (f->c && !f->shut) {
		f->shut = true;
		if (fp_tcp_shutdown(st, f->c))
			merr(w, f, "shutdown failed", 0);
	}
}

static void mflow_maybe_done(struct fp_stack *st, struct mflow *f,
			     unsigned *done)
{
	if (f->c && f->eof && f->shut && f->rcvd == f->rx_total && f->acked == f->tx_total) {
		fp_tcp_close(st, f->c);
		f->c = NULL;
		f->done = true;
		(*done)++;
	}
}

static void on_event(struct mworld *w, bool client, struct fp_stack *st,
		     const struct fp_event *ev)
{
	struct mflow *f = (client ? w->cli : w->sv)[client ? ev->lport : ev->rport];
	unsigned *done = client ? &w->cli_done : &w->srv_done;

	if (ev->type == FP_EV_TCP_ACCEPTED) {
		f = mflow_new(w, false, ev->conn, ev->rport);
		mflow_send(w, st, f);
		return;
	}
	if (!f || (f->c && f->c != ev->conn)) {
		merr(w, f, "event for an unknown conn", ev->type);
		return;
	}
	if (!f->c)
		return;   /* closed here already */
	switch (ev->type) {
	case FP_EV_TCP_CONNECTED:
		if (ev->status)
			merr(w, f, "connect failed", ev->status);
		else
			mflow_send(w, st, f);
		break;
	case FP_EV_TCP_RECV: {
		long long bad = th_stream_check(f->rx_key, f->rcvd, fp_mbuf_data(ev->m), ev->len);
		if (bad >= 0)
			merr(w, f, "corrupt byte at offset", bad);
		f->rcvd += ev->len;
		w->bytes_rcvd += ev->len;
		if (f->rcvd > f->rx_total)
			merr(w, f, "more bytes than sent", (long long)f->rcvd);
		fp_tcp_recv_done(st, f->c, ev->len);
		break;
	}
	case FP_EV_TCP_SENT:
		f->acked += ev->len;
		mflow_send(w, st, f);
		break;
	case FP_EV_TCP_EOF:
		f->eof = true;
		break;
	case FP_EV_TCP_DEAD:
		merr(w, f, "conn died", ev->status);
		fp_tcp_close(st, f->c);
		f->c = NULL;
		return;
	default:
		merr(w, f, "unexpected event", ev->type);
		return;
	}
	mflow_maybe_done(st, f, done);
}

static void app(struct mworld *w, bool client, struct fp_stack *st)
{
	struct fp_event ev[64];
	unsigned n;

	while ((n = fp_stack_events(st, ev, FP_ARRAY_SIZE(ev))) > 0)
		for (unsigned i = 0; i < n; i++)
			on_event(w, client, st, &ev[i]);
}

/* ---- the wire ---- */

/* A copy of @m in @to's pool, as a NIC receives it; NULL when that pool is empty. */
static struct fp_mbuf *dma(struct th_node *to, const struct fp_mbuf *m)
{
	struct fp_mbuf *c = fp_pool_get(&to->cache);

	if (c) {
		c->data_len = c->pkt_len = fp_mbuf_read(m, 0, fp_mbuf_data(c), m->pkt_len);
		c->rx_ts_ns = 0;
	}
	return c;
}

static void deliver(struct mworld *w, struct th_node *to, const struct fp_mbuf *m)
{
	struct fp_mbuf *c;

	if ((double)(rnd(w) >> 11) * 0x1p-53 < w->loss) {
		w->dropped++;
		return;
	}
	if (!(c = dma(to, m)))
		return;
	fp_stack_input(to->st, &c, 1, w->now);
}

/* Where a frame from P goes: by its TCP 4-tuple's group; ARP to both. */
static void from_peer(struct mworld *w, const struct fp_mbuf *m)
{
	const uint8_t *d = fp_mbuf_data(m);
	uint16_t type = (uint16_t)(d[12] << 8 | d[13]);

	if (type == 0x0806) {
		deliver(w, &w->srv[0], m);
		deliver(w, &w->srv[1], m);
		return;
	}
	uint16_t sport = (uint16_t)(d[34] << 8 | d[35]);
	deliver(w, &w->srv[w->owner[group_of(w, sport)]], m);
}

static void step(struct mworld *w, uint64_t dt)
{
	struct fp_mbuf *m;

	w->now += dt;
	fp_stack_poll(w->p.st, w->now);
	for (int i = 0; i < 2; i++)
		fp_stack_poll(w->srv[i].st, w->now);
	while (fp_stack_tx(w->p.st, &m, 1) == 1) {
		from_peer(w, m);
		fp_mbuf_free(&w->p.cache, m);
	}
	for (int i = 0; i < 2; i++)
		while (fp_stack_tx(w->srv[i].st, &m, 1) == 1) {
			deliver(w, &w->p, m);
			fp_mbuf_free(&w->srv[i].cache, m);
		}
	app(w, true, w->p.st);
	app(w, false, w->srv[0].st);
	app(w, false, w->srv[1].st);
}

/* Move the groups in @mask from stack @from to stack @to, and switch the wire. */
static void move(struct mworld *w, const uint64_t mask[2], int from, int to)
{
	struct fp_tcp_conn *chain;
	int n = fp_stack_tcp_export(w->srv[from].st, mask, &chain);

	assert_true(n >= 0);
	fp_stack_tcp_import(w->srv[to].st, chain);
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
		if (mask[g / 64] >> (g % 64) & 1)
			w->owner[g] = (uint8_t)to;
	w->moves++;
	w->moved += (unsigned)n;
}

static void world(struct mworld *w, double loss, uint32_t tx_bufs)
{
	memset(w, 0, sizeof(*w));
	w->seed = w->rng = fp_test_seed();
	w->loss = loss;
	w->now = 1000000;
	fp_rss_init(&w->rss, fp_rss_key_symmetric);
	struct fp_stack_config pc = th_config(&w->p, 2);
	pc.time_wait_us = TW_US;
	th_node_init(&w->p, 8192, pc, w->now);
	for (int i = 0; i < 2; i++) {
		struct fp_stack_config c = th_config(&w->srv[i], 1);
		c.time_wait_us = TW_US;
		c.rss_key = fp_rss_key_symmetric;   /* the steering key: export groups by it */
		c.n_queues = 2;
		c.queue_id = (uint16_t)i;
		c.tx_bufs = tx_bufs;                /* 0: the default */
		th_node_init(&w->srv[i], 8192, c, w->now);
		assert_int_equal(fp_tcp_listen(w->srv[i].st, PORT, 0), 0);
	}
}

static void run(double loss, uint32_t tx_bufs)
{
	static struct mworld w;
	static const uint64_t odd[2] = { 0xaaaaaaaaaaaaaaaaull, 0xaaaaaaaaaaaaaaaaull };
	static const uint64_t all[2] = { ~0ull, ~0ull };
	unsigned stage = 0;

	world(&w, loss, tx_bufs);
	for (unsigned i = 0; i < NFLOWS; i++) {
		int err = 0;
		struct fp_tcp_conn *c = fp_tcp_dial(w.p.st, w.srv[0].ip, PORT, 0, &err);
		assert_non_null(c);
		struct fp_tcp_info info;
		fp_tcp_info(c, &info);
		mflow_new(&w, true, c, info.lport);
	}
	uint64_t end = w.now + 120ull * 1000 * 1000;
	while (w.now < end && (w.cli_done < NFLOWS || w.srv_done < NFLOWS) && !w.errors) {
		step(&w, STEP_US);
		uint64_t frac = w.bytes_total ? w.bytes_rcvd * 4 / w.bytes_total : 0;
		if (stage == 0 && frac >= 1) {
			move(&w, odd, 0, 1);
			stage++;
		} else if (stage == 1 && frac >= 2) {
			move(&w, all, 1, 0);
			stage++;
		} else if (stage == 2 && frac >= 3) {
			move(&w, all, 0, 1);
			stage++;
		}
	}
	print_message("# loss %.3f (%u frames dropped): %u moves took %u conns; done %u/%u "
		      "client, %u/%u server at t=%.1f ms\n", loss, w.dropped, w.moves, w.moved,
		      w.cli_done, NFLOWS, w.srv_done, NFLOWS, (double)(w.now - 1000000) / 1e3);
	if (loss > 0)
		assert_true(w.dropped > 0);
	assert_int_equal(w.errors, 0);
	assert_int_equal(w.cli_done, NFLOWS);
	assert_int_equal(w.srv_done, NFLOWS);
	assert_int_equal(stage, 3);
	assert_true(w.moved >= NFLOWS);   /* the last two moves take every open conn */
	for (unsigned p = 0; p < MAX_PORTS; p++)
		if (w.cli[p]) {
			assert_non_null(w.sv[p]);
			assert_int_equal(w.sv[p]->rcvd, w.cli[p]->tx_total);
			assert_int_equal(w.cli[p]->rcvd, w.sv[p]->tx_total);
		}
	/* TIME_WAIT and every timer run out: only the two listeners remain */
	for (uint64_t t = w.now + 3 * TW_US + 2000000; w.now < t;)
		step(&w, QUIET_STEP_US);
	assert_int_equal(fp_stack_tcp_conns(w.p.st), 0);
	assert_int_equal(fp_stack_tcp_conns(w.srv[0].st), 1);
	assert_int_equal(fp_stack_tcp_conns(w.srv[1].st), 1);
	for (unsigned p = 0; p < MAX_PORTS; p++) {
		free(w.cli[p]);
		free(w.sv[p]);
	}
	th_node_fini(&w.p);
	/* both server stacks go before either pool is checked: B may hold A's buffers */
	fp_stack_destroy(w.srv[1].st);
	w.srv[1].st = NULL;
	th_node_fini(&w.srv[0]);
	uint64_t leaked = fp_pool_in_use(w.srv[1].pool);
	fp_pool_cache_flush(&w.srv[1].cache);
	fp_pool_destroy(w.srv[1].pool);
	assert_int_equal(leaked, 0);
}

static void test_migrate_lossless(void **state)
{
	(void)state;
	run(0.0, 0);
}

static void test_migrate_lossy(void **state)
{
	(void)state;
	run(0.02, 0);
}

/* The servers' sent-data budget is 12 segments for all their conns: most sends take
 * part of what they ask or nothing, and conns wait in the budget's queue when they move;
 * each must still be woken on the stack it moved to (else it would wait forever). */
static void test_migrate_short_of_buffers(void **state)
{
	(void)state;
	run(0.0, 12);
}

/* Export refuses while events are queued: one of them may name a conn it would move. */
static void test_export_busy_and_unsteered(void **state)
{
	static struct mworld w;
	static const uint64_t all[2] = { ~0ull, ~0ull };
	struct fp_tcp_conn *chain;

	(void)state;
	world(&w, 0.0, 0);
	int err = 0;
	struct fp_tcp_conn *c = fp_tcp_dial(w.p.st, w.srv[0].ip, PORT, 0, &err);
	assert_non_null(c);
	struct fp_tcp_info info;
	fp_tcp_info(c, &info);
	mflow_new(&w, true, c, info.lport);
	w.owner[group_of(&w, info.lport)] = 0;
	/* run the wire without the server's application: its ACCEPTED stays queued */
	for (int i = 0; i < 50; i++) {
		struct fp_mbuf *m;
		w.now += STEP_US;
		while (fp_stack_tx(w.p.st, &m, 1) == 1) {
			from_peer(&w, m);
			fp_mbuf_free(&w.p.cache, m);
		}
		while (fp_stack_tx(w.srv[0].st, &m, 1) == 1) {
			deliver(&w, &w.p, m);
			fp_mbuf_free(&w.srv[0].cache, m);
		}
		app(&w, true, w.p.st);
	}
	assert_int_equal(fp_stack_tcp_export(w.srv[0].st, all, &chain), -EBUSY);
	assert_null(chain);
	app(&w, false, w.srv[0].st);
	assert_int_equal(fp_stack_tcp_export(w.srv[0].st, all, &chain), 1);
	fp_stack_tcp_import(w.srv[1].st, chain);
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
		w.owner[g] = 1;
	assert_int_equal(fp_stack_tcp_conns(w.srv[0].st), 1);   /* its listener */
	assert_int_equal(fp_stack_tcp_conns(w.srv[1].st), 2);
	/* the peer's stack has no steering: nothing to export by */
	assert_int_equal(fp_stack_tcp_export(w.p.st, all, &chain), -EINVAL);
	/* finish the one flow on B, then tear down */
	for (int i = 0; i < 200000 && (w.cli_done < 1 || w.srv_done < 1) && !w.errors; i++)
		step(&w, STEP_US);
	assert_int_equal(w.errors, 0);
	assert_int_equal(w.cli_done, 1);
	for (uint64_t t = w.now + 3 * TW_US + 2000000; w.now < t;)
		step(&w, QUIET_STEP_US);
	for (unsigned p = 0; p < MAX_PORTS; p++) {
		free(w.cli[p]);
		free(w.sv[p]);
	}
	th_node_fini(&w.p);
	fp_stack_destroy(w.srv[1].st);
	w.srv[1].st = NULL;
	th_node_fini(&w.srv[0]);
	uint64_t leaked = fp_pool_in_use(w.srv[1].pool);
	fp_pool_cache_flush(&w.srv[1].cache);
	fp_pool_destroy(w.srv[1].pool);
	assert_int_equal(leaked, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_export_busy_and_unsteered),
		cmocka_unit_test(test_migrate_lossless),
		cmocka_unit_test(test_migrate_lossy),
		cmocka_unit_test(test_migrate_short_of_buffers),
	};
	if (getenv("FP_TEST_FILTER"))
		cmocka_set_test_filter(getenv("FP_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
