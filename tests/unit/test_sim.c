/* test_sim.c: two stacks on the simulated wire: ping, UDP, determinism, faults, bandwidth. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/sim.h>

#include "net_harness.h"

#include "defs.h" /* net_alloc, ipv4_output: to send an echo request, which has no API */

#define T0_US     1000000u
#define A_IP      0x0a000001u
#define B_IP      0x0a000002u
#define A_PORT    7000
#define B_PORT    7001
#define POOL_BUFS 1024
#define PAYLOAD   64

/* One received datagram, as the application saw it. */
struct rec {
	uint64_t t_us;
	uint32_t seq, len;
};

struct side {
	struct fp_pool *pool;
	struct fp_pool_cache cache;
	struct fp_stack *st;
	uint32_t ip, peer;
	uint16_t lport, rport;
	/* what the application does */
	unsigned to_send, sent, per_call;
	uint32_t len;
	uint64_t interval_us, next_send_us;
	bool echo;
	/* what it saw */
	unsigned rx, rx_bad;
	struct rec *tr;
	unsigned n_tr, cap_tr;
};

struct world {
	struct side a, b;
	struct fp_sim *sim;
};

/* ---- payloads that reveal any damage ---- */

static uint8_t pat(uint32_t seq, uint32_t i) { return (uint8_t)(seq * 131u + i * 7u + 1u); }

static void fill_payload(uint8_t *p, uint32_t len, uint32_t seq)
{
	fp_put_be32(p, seq);
	for (uint32_t i = 4; i < len; i++)
		p[i] = pat(seq, i);
}

static bool payload_ok(const uint8_t *p, uint32_t len, uint32_t *seq)
{
	if (len < 4)
		return false;
	*seq = fp_get_be32(p);
	for (uint32_t i = 4; i < len; i++)
		if (p[i] != pat(*seq, i))
			return false;
	return true;
}

/* ---- the application ---- */

static void record(struct side *sd, uint64_t now, uint32_t seq, uint32_t len)
{
	if (sd->n_tr == sd->cap_tr) {
		sd->cap_tr = sd->cap_tr ? 2 * sd->cap_tr : 256;
		sd->tr = realloc(sd->tr, sd->cap_tr * sizeof(*sd->tr));
		assert_non_null(sd->tr);
	}
	sd->tr[sd->n_tr++] = (struct rec){ .t_us = now, .seq = seq, .len = len };
}

static void app_recv(struct side *sd, const struct fp_event *ev, uint64_t now)
{
	uint8_t buf[2048];
	uint32_t seq = 0;

	assert_int_equal(ev->type, FP_EV_UDP_RECV);
	assert_true(ev->len <= sizeof(buf));
	fp_mbuf_read(ev->m, 0, buf, ev->len);
	if (!payload_ok(buf, ev->len, &seq))
		sd->rx_bad++;
	sd->rx++;
	record(sd, now, seq, ev->len);
	if (sd->echo)
		fp_udp_send(sd->st, sd->lport, ev->raddr, ev->rport, buf, ev->len);
	fp_stack_free(sd->st, ev->m);
}

static uint64_t app(struct fp_stack *st, void *arg, uint64_t now)
{
	struct side *sd = arg;
	struct fp_event ev[16];
	uint8_t buf[2048];
	unsigned n;

	while ((n = fp_stack_events(st, ev, 16)) > 0)
		for (unsigned i = 0; i < n; i++)
			app_recv(sd, &ev[i], now);
	if (sd->sent < sd->to_send && now >= sd->next_send_us) {
		for (unsigned i = 0; i < sd->per_call && sd->sent < sd->to_send; i++) {
			fill_payload(buf, sd->len, sd->sent++);
			fp_udp_send(st, sd->lport, sd->peer, sd->rport, buf, sd->len);
		}
		sd->next_send_us = now + sd->interval_us;
	}
	return sd->sent < sd->to_send ? sd->next_send_us : UINT64_MAX;
}

/* Queue @n datagrams of @len bytes, @per_call every @interval_us, starting at the next step. */
static void plan_sends(struct side *sd, unsigned n, uint32_t len, unsigned per_call,
		       uint64_t interval_us, uint64_t now)
{
	sd->to_send = sd->sent + n;
	sd->len = len;
	sd->per_call = per_call;
	sd->interval_us = interval_us;
	sd->next_send_us = now;
}

/* ---- building and tearing down ---- */

static void side_init(struct side *sd, uint32_t ip, uint32_t peer, uint8_t mac_last)
{
	struct fp_pool_params pp = { .name = "sim", .n_bufs = POOL_BUFS, .buf_size = 2048,
				     .mag_size = 16, .max_caches = 2 };
	memset(sd, 0, sizeof(*sd));
	sd->pool = fp_pool_create(&pp);
	assert_non_null(sd->pool);
	assert_int_equal(fp_pool_cache_init(&sd->cache, sd->pool), 0);
	struct fp_stack_config cfg = { .mac = {{ 0x02, 0, 0, 0, 0, mac_last }}, .ipv4 = ip,
				       .prefix_len = 24, .cache = &sd->cache, .secret = ip };
	sd->st = fp_stack_create(&cfg, T0_US);
	assert_non_null(sd->st);
	sd->ip = ip;
	sd->peer = peer;
}

static void world_init(struct world *w, const struct fp_sim_params *p)
{
	side_init(&w->a, A_IP, B_IP, 1);
	side_init(&w->b, B_IP, A_IP, 2);
	w->a.lport = A_PORT, w->a.rport = B_PORT;
	w->b.lport = B_PORT, w->b.rport = A_PORT;
	assert_int_equal(fp_udp_bind(w->a.st, A_PORT, 1), 0);
	assert_int_equal(fp_udp_bind(w->b.st, B_PORT, 2), 0);
	w->sim = fp_sim_create(p, T0_US);
	assert_non_null(w->sim);
	assert_int_equal(fp_sim_attach(w->sim, w->a.st, &w->a.cache, app, &w->a), 0);
	assert_int_equal(fp_sim_attach(w->sim, w->b.st, &w->b.cache, app, &w->b), 1);
}

static void side_fini(struct side *sd)
{
	fp_stack_destroy(sd->st);
	assert_int_equal(fp_pool_in_use(sd->pool), 0);
	fp_pool_cache_flush(&sd->cache);
	fp_pool_destroy(sd->pool);
	free(sd->tr);
}

/* Destroy the wire, then the stacks; every buffer must be back in its pool. */
static void world_fini(struct world *w)
{
	fp_sim_destroy(w->sim);
	side_fini(&w->a);
	side_fini(&w->b);
}

static struct fp_net_stats stats_of(const struct side *sd)
{
	struct fp_net_stats s;
	fp_stack_stats(sd->st, &s);
	return s;
}

static bool b_got_one(void *arg) { return ((struct world *)arg)->b.rx >= 1; }

/* One datagram each way with no faults, so both ARP entries exist before faults start
 * (ARP has no checksum: a corrupted reply would teach a wrong MAC). */
static void warm_up(struct world *w)
{
	plan_sends(&w->a, 1, PAYLOAD, 1, 0, fp_sim_now(w->sim));
	fp_sim_run(w->sim, fp_sim_now(w->sim) + 1000000, b_got_one, w);
	assert_int_equal(w->b.rx, 1);
	fp_sim_run(w->sim, fp_sim_now(w->sim) + 1000000, NULL, NULL);
}

/* ---- tests ---- */

static bool ping_done(void *arg)
{
	struct world *w = arg;
	return stats_of(&w->a).icmp_other_rx >= 1;
}

/* An echo request from A (built by hand: the API has no ping) resolves B over ARP and is
 * answered; the reply reaches A byte for byte. */
static void test_ping_across(void **state)
{
	struct fp_sim_params p = { .seed = 1, .delay_us = 50 };
	struct world w;
	(void)state;

	world_init(&w, &p);
	struct fp_mbuf *m = net_alloc(w.a.st);
	assert_non_null(m);
	uint8_t *icmp = fp_mbuf_append(m, FP_ICMP_HDR_LEN + 32);
	struct fp_icmp h = { .type = FP_ICMP_ECHO_REQUEST, .rest = 0x00420001 };
	fill_payload(icmp + FP_ICMP_HDR_LEN, 32, 9);
	fp_icmp_emit(icmp, FP_ICMP_HDR_LEN + 32, &h);
	assert_int_equal(ipv4_output(w.a.st, m, B_IP, FP_IPPROTO_ICMP), 0);
	uint64_t t = fp_sim_run(w.sim, T0_US + 1000000, ping_done, &w);
	assert_int_equal(stats_of(&w.b).icmp_echo_rx, 1);
	assert_int_equal(stats_of(&w.b).icmp_echo_tx, 1);
	assert_int_equal(stats_of(&w.a).icmp_other_rx, 1);
	assert_int_equal(stats_of(&w.a).icmp_bad, 0);
	/* B's announcement resolves A's pending entry (RFC 826 merge: the entry exists), so
	 * the echo leaves after one delay: announcement, echo, reply. */
	assert_int_equal(t, T0_US + 3 * 50);
	world_fini(&w);
}

static bool echoes_done(void *arg)
{
	struct world *w = arg;
	return w->a.rx >= w->a.to_send;
}

/* A sends datagrams, B echoes each; every payload comes back intact and in order. */
static void test_udp_across(void **state)
{
	struct fp_sim_params p = { .seed = 2, .delay_us = 20, .bandwidth_bps = 1000000000 };
	struct world w;
	(void)state;

	world_init(&w, &p);
	w.b.echo = true;
	plan_sends(&w.a, 200, 300, 4, 10, T0_US);
	fp_sim_run(w.sim, T0_US + 10000000, echoes_done, &w);
	assert_int_equal(w.a.rx, 200);
	assert_int_equal(w.a.rx_bad, 0);
	assert_int_equal(w.b.rx, 200);
	for (unsigned i = 0; i < w.a.n_tr; i++) {
		assert_int_equal(w.a.tr[i].seq, i);
		assert_int_equal(w.a.tr[i].len, 300);
	}
	/* Nothing left to happen once the last echo is in and the ARP entries' timers are
	 * idle: run() returns on its own well before the limit. */
	assert_true(fp_sim_run(w.sim, T0_US + 100000000, NULL, NULL) < T0_US + 100000000);
	world_fini(&w);
}

struct run_result {
	struct fp_sim_stats sim;
	struct fp_net_stats a, b;
	struct rec *tr_a, *tr_b;
	unsigned n_a, n_b;
	unsigned bad;
};

/* A faulty two-way exchange; the result is everything observable. */
static void faulty_run(uint64_t seed, struct run_result *r)
{
	struct fp_sim_params p = { .seed = seed, .loss = 0.05, .duplicate = 0.05,
				   .reorder = 0.1, .corrupt = 0.05, .delay_us = 30,
				   .jitter_us = 20, .bandwidth_bps = 100000000 };
	struct world w;

	world_init(&w, &p);
	w.b.echo = true;
	plan_sends(&w.a, 500, 200, 5, 50, T0_US);
	fp_sim_run(w.sim, T0_US + 5000000, NULL, NULL);
	fp_sim_stats(w.sim, &r->sim);
	r->a = stats_of(&w.a);
	r->b = stats_of(&w.b);
	r->tr_a = w.a.tr, r->n_a = w.a.n_tr, w.a.tr = NULL;
	r->tr_b = w.b.tr, r->n_b = w.b.n_tr, w.b.tr = NULL;
	r->bad = w.a.rx_bad + w.b.rx_bad;
	world_fini(&w);
}

/* The same seed gives the same run, frame for frame; another seed does not. */
static void test_same_seed_same_run(void **state)
{
	struct run_result r1, r2, r3;
	(void)state;

	faulty_run(0x5eed, &r1);
	faulty_run(0x5eed, &r2);
	faulty_run(0x5eee, &r3);
	assert_memory_equal(&r1.sim, &r2.sim, sizeof(r1.sim));
	assert_memory_equal(&r1.a, &r2.a, sizeof(r1.a));
	assert_memory_equal(&r1.b, &r2.b, sizeof(r1.b));
	assert_int_equal(r1.n_a, r2.n_a);
	assert_int_equal(r1.n_b, r2.n_b);
	assert_memory_equal(r1.tr_a, r2.tr_a, r1.n_a * sizeof(struct rec));
	assert_memory_equal(r1.tr_b, r2.tr_b, r1.n_b * sizeof(struct rec));
	assert_true(r1.n_a > 300);
	assert_int_equal(r1.bad + r2.bad + r3.bad, 0);
	assert_true(r1.n_a != r3.n_a || memcmp(r1.tr_a, r3.tr_a, r1.n_a * sizeof(struct rec)));
	free(r1.tr_a), free(r1.tr_b), free(r2.tr_a), free(r2.tr_b), free(r3.tr_a), free(r3.tr_b);
}

/* Fault counts match their probabilities (wide bounds: one fixed seed, so this is a check
 * of the wiring, not of the generator), and the books balance exactly. */
static void test_fault_rates(void **state)
{
	struct fp_sim_params p = { .seed = 77, .delay_us = 10 };
	struct fp_sim_stats s;
	struct world w;
	(void)state;

	world_init(&w, &p);
	warm_up(&w);
	struct fp_sim_stats s0;
	fp_sim_stats(w.sim, &s0);
	p.loss = 0.2, p.duplicate = 0.1, p.corrupt = 0.1, p.reorder = 0.1;
	fp_sim_set_params(w.sim, &p);
	plan_sends(&w.a, 4000, PAYLOAD, 8, 100, fp_sim_now(w.sim));
	fp_sim_run(w.sim, fp_sim_now(w.sim) + 10000000, NULL, NULL);
	fp_sim_stats(w.sim, &s);
	double n = (double)(s.frames - s0.frames);
	assert_true(n >= 4000);
	assert_true(s.lost >= 0.15 * n && s.lost <= 0.25 * n);
	double kept = n - (double)s.lost;
	assert_true(s.duplicated >= 0.06 * kept && s.duplicated <= 0.14 * kept);
	assert_true(s.corrupted >= 0.06 * kept && s.corrupted <= 0.14 * kept);
	assert_true(s.reordered >= 0.06 * kept && s.reordered <= 0.14 * kept);
	/* Two ports: every frame has one receiver. */
	assert_int_equal(s.delivered + s.nobufs + s.lost, s.frames - s.queue_drops + s.duplicated);
	assert_int_equal(stats_of(&w.a).rx_frames + stats_of(&w.b).rx_frames, s.delivered);
	assert_int_equal(w.b.rx_bad, 0);
	world_fini(&w);
}

/* A flipped bit never reaches the application as data: checksums catch every one. */
static void test_corruption_never_delivered(void **state)
{
	struct fp_sim_params p = { .seed = 99, .delay_us = 10 };
	struct world w;
	(void)state;

	world_init(&w, &p);
	warm_up(&w);
	p.corrupt = 0.5;
	fp_sim_set_params(w.sim, &p);
	w.b.echo = true;
	plan_sends(&w.a, 2000, 100, 10, 100, fp_sim_now(w.sim));
	fp_sim_run(w.sim, fp_sim_now(w.sim) + 10000000, NULL, NULL);
	struct fp_sim_stats s;
	fp_sim_stats(w.sim, &s);
	struct fp_net_stats a = stats_of(&w.a), b = stats_of(&w.b);
	uint64_t caught = a.udp_bad_csum + b.udp_bad_csum + a.ip_bad_csum + b.ip_bad_csum +
			  a.ip_bad + b.ip_bad + a.udp_bad + b.udp_bad + a.eth_not_for_us +
			  b.eth_not_for_us + a.eth_unknown_type + b.eth_unknown_type +
			  a.ip_not_for_us + b.ip_not_for_us + a.ip_unknown_proto +
			  b.ip_unknown_proto + a.udp_no_port + b.udp_no_port + a.ip_frag_drop +
			  b.ip_frag_drop;
	assert_true(s.corrupted > 1000);
	assert_true(b.udp_bad_csum > 500);
	assert_int_equal(w.a.rx_bad + w.b.rx_bad, 0);
	/* Each datagram to B was either delivered intact or dropped and counted (a flipped
	 * source MAC bit is the one harmless corruption). */
	assert_true(w.b.rx - 1 + caught >= 2000);
	world_fini(&w);
}

static bool b_got_all(void *arg)
{
	struct world *w = arg;
	return w->b.rx >= w->a.to_send;
}

/* N frames of L bytes at B bit/s need N * L * 8 / B seconds on the wire, at least. */
static void test_bandwidth_serialization(void **state)
{
	const uint64_t bps = 10000000;
	struct fp_sim_params p = { .seed = 5, .delay_us = 100, .bandwidth_bps = bps };
	struct world w;
	enum { N = 100, LEN = 1000 };
	(void)state;

	world_init(&w, &p);
	warm_up(&w);
	uint64_t t0 = fp_sim_now(w.sim);
	w.b.n_tr = 0;
	plan_sends(&w.a, N, LEN, N, 0, t0);
	fp_sim_run(w.sim, t0 + 10000000, b_got_all, &w);
	assert_int_equal(w.b.n_tr, N);
	const uint64_t frame = LEN + FP_UDP_HDR_LEN + FP_IPV4_HDR_LEN + FP_ETH_HDR_LEN;
	uint64_t min_us = N * frame * 8 * 1000000 / bps + p.delay_us;
	uint64_t last = w.b.tr[N - 1].t_us;
	assert_true(last - t0 >= min_us);
	assert_true(last - t0 <= min_us * 11 / 10); /* and the wire overhead is modest */
	/* Arrivals are spaced by one frame time: the link, not the sender, sets the pace. */
	uint64_t gap = w.b.tr[N - 1].t_us - w.b.tr[N - 2].t_us;
	assert_true(gap >= frame * 8 * 1000000 / bps);
	world_fini(&w);
}

/* A burst larger than the egress queue: exactly the excess is tail-dropped. */
static void test_queue_tail_drop(void **state)
{
	struct fp_sim_params p = { .seed = 6, .delay_us = 10, .bandwidth_bps = 10000000,
				   .queue_frames = 10 };
	struct world w;
	(void)state;

	world_init(&w, &p);
	warm_up(&w);
	struct fp_sim_stats s0, s;
	fp_sim_stats(w.sim, &s0);
	w.b.rx = 0;
	plan_sends(&w.a, 50, 500, 50, 0, fp_sim_now(w.sim));
	fp_sim_run(w.sim, fp_sim_now(w.sim) + 1000000, NULL, NULL);
	fp_sim_stats(w.sim, &s);
	assert_int_equal(s.queue_drops - s0.queue_drops, 40);
	assert_int_equal(w.b.rx, 10);
	world_fini(&w);
}

/* Destroying the wire with frames in flight returns them to their senders' pools. */
static void test_destroy_in_flight(void **state)
{
	struct fp_sim_params p = { .seed = 7, .delay_us = 1000 };
	struct world w;
	(void)state;

	world_init(&w, &p);
	warm_up(&w);
	p.duplicate = 0.5; /* two references to some frames in flight */
	fp_sim_set_params(w.sim, &p);
	plan_sends(&w.a, 20, 100, 20, 0, fp_sim_now(w.sim));
	fp_sim_run(w.sim, fp_sim_now(w.sim) + 500, NULL, NULL);
	assert_true(fp_pool_in_use(w.a.pool) >= 20); /* on the wire */
	world_fini(&w);
}

/* The loop stops on its own when nothing is left, and at until_us otherwise. */
static void test_run_limits(void **state)
{
	struct fp_sim_params p = { .seed = 8, .delay_us = 10 };
	struct world w;
	(void)state;

	world_init(&w, &p);
	/* The announcements go out; after that only ARP... nothing is armed. */
	uint64_t t = fp_sim_run(w.sim, T0_US + 5000000, NULL, NULL);
	assert_true(t < T0_US + 5000000);
	assert_int_equal(stats_of(&w.a).rx_frames, 1); /* B's announcement */
	plan_sends(&w.a, 1000, 100, 1, 1000, t);  /* one a millisecond */
	assert_int_equal(fp_sim_run(w.sim, t + 100000, NULL, NULL), t + 100000);
	assert_true(w.b.rx >= 95 && w.b.rx <= 101);
	world_fini(&w);
}

static uint64_t app_spin(struct fp_stack *st, void *arg, uint64_t now)
{
	(void)st;
	(*(unsigned *)arg)++;
	return now; /* "call me again now", forever */
}

/* An application that never lets time move is stopped, not spun on forever. */
static void test_livelock_guard(void **state)
{
	struct fp_sim_params p = { .seed = 9 };
	struct side a;
	unsigned calls = 0;
	(void)state;

	side_init(&a, A_IP, B_IP, 1);
	struct fp_sim *sim = fp_sim_create(&p, T0_US);
	assert_non_null(sim);
	assert_int_equal(fp_sim_attach(sim, a.st, &a.cache, app_spin, &calls), 0);
	assert_int_equal(fp_sim_run(sim, UINT64_MAX, NULL, NULL), T0_US);
	assert_true(calls > 1000000);
	fp_sim_destroy(sim);
	side_fini(&a);
}

static void test_attach_limit(void **state)
{
	struct fp_sim *sim = fp_sim_create(NULL, 0);
	(void)state;

	assert_non_null(sim);
	for (int i = 0; i < 16; i++)
		assert_int_equal(fp_sim_attach(sim, NULL, NULL, NULL, NULL), i);
	assert_int_equal(fp_sim_attach(sim, NULL, NULL, NULL, NULL), -ENOSPC);
	fp_sim_destroy(sim);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping_across),
		cmocka_unit_test(test_udp_across),
		cmocka_unit_test(test_same_seed_same_run),
		cmocka_unit_test(test_fault_rates),
		cmocka_unit_test(test_corruption_never_delivered),
		cmocka_unit_test(test_bandwidth_serialization),
		cmocka_unit_test(test_queue_tail_drop),
		cmocka_unit_test(test_destroy_in_flight),
		cmocka_unit_test(test_run_limits),
		cmocka_unit_test(test_livelock_guard),
		cmocka_unit_test(test_attach_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
