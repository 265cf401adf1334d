/* tcp_test_util.h: TCP test helpers: peer segments relative to a conn, exact checks of what we send. */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "net_harness.h"

#include "tcp.h" /* struct fp_tcp_conn, tcp_test_conn(), seq_*(), TCP_* */

/*
 * lwIP's test habit: every segment a test feeds is written in terms of the conn's current
 * sequence numbers, and every segment that comes back is checked field by field (flags,
 * seq, ack, window, payload length, then options where the rule is about them). A check
 * that fails prints the whole segment, so the report says what was sent instead.
 */

#define T_LPORT  80u
#define T_RPORT  40000u
#define T_COOKIE 0xc0ffee01ull
#define T_LCOOKIE 0x11570001ull  /* a listener's */
#define T_ISS    1000u
#define T_IRS    5000u
#define T_WND    65535u           /* what the peer advertises unless a test says otherwise */
#define T_ANY    (-1)             /* expect_seg: do not check this field */

/* A payload pattern long enough for every test: byte i is (i * 7 + 3) & 0xff. */
static uint8_t t_pat[16384];

static inline void t_pat_init(void)
{
	for (size_t i = 0; i < sizeof(t_pat); i++)
		t_pat[i] = (uint8_t)(i * 7 + 3);
}

/* ---- conns ---- */

/* An established conn: 10.0.0.1:80 <-> 10.0.0.2:40000, iss 1000, irs 5000, nothing in
 * flight, peer window 65535, no window scaling, no timestamps, no SACK, MSS 1460, the app
 * holding the handle. Tests change fields before calling t_conn(). */
static inline struct tcp_test_conn_params t_est(void)
{
	return (struct tcp_test_conn_params){
		.state = FP_TCP_ESTABLISHED, .raddr = NH_PEER_IP,
		.lport = T_LPORT, .rport = T_RPORT, .iss = T_ISS, .irs = T_IRS,
		.snd_una = T_ISS + 1, .snd_nxt = T_ISS + 1, .rcv_nxt = T_IRS + 1,
		.snd_wnd = T_WND, .app_owned = true, .cookie = T_COOKIE,
	};
}

static inline struct fp_tcp_conn *t_conn(struct nh *h, struct tcp_test_conn_params p)
{
	struct fp_tcp_conn *c = tcp_test_conn(h->st, &p);

	if (!c)
		print_error("tcp_test_conn(%s): errno %d\n", fp_tcp_state_name(p.state), errno);
	assert_non_null(c);
	assert_int_equal(c->state, p.state);
	return c;
}

static inline struct fp_tcp_info t_info(const struct fp_tcp_conn *c)
{
	struct fp_tcp_info i;

	fp_tcp_info(c, &i);
	return i;
}

/* ---- segments from the peer ---- */

/* A segment from NH_PEER_IP:@sport to us:@dport. */
struct t_seg {
	uint16_t sport, dport;
	uint8_t flags;
	uint32_t seq, ack;
	uint16_t wnd;
	struct fp_tcp_opts opt;
	const void *data;
	size_t len;
};

static inline void t_input(struct nh *h, const struct t_seg *s)
{
	uint8_t f[NH_FRAME_MAX];
	struct fp_tcp t = { .sport = s->sport, .dport = s->dport, .seq = s->seq, .ack = s->ack,
			    .flags = s->flags, .wnd = s->wnd, .opt = s->opt };

	static const uint8_t none[1];
	/* never a NULL source for memcpy, even for 0 bytes (UBSan) */
	size_t n = nh_tcp_frame(f, sizeof(f), NH_PEER_IP, NH_OUR_IP, &t,
				s->data ? s->data : none, s->len);
	nh_input(h, f, n);
}

/* The common case: 40000 -> 80, window 65535, no options. */
static inline void t_send(struct nh *h, uint8_t flags, uint32_t seq, uint32_t ack,
			  const void *data, size_t len)
{
	struct t_seg s = { .sport = T_RPORT, .dport = T_LPORT, .flags = flags, .seq = seq,
			   .ack = ack, .wnd = T_WND, .data = data, .len = len };
	t_input(h, &s);
}

/* ---- segments we sent ---- */

static inline void t_flags_str(uint8_t f, char *out)
{
	static const char n[] = "FSRPAUEC";
	int k = 0;

	for (int i = 0; i < 8; i++)
		if (f & (1 << i))
			out[k++] = n[i];
	out[k] = 0;
}

static inline void t_print_pkt(const char *what, const struct nh_pkt *p)
{
	char fl[9];

	t_flags_str(p->tcp.flags, fl);
	print_message("  %s: %u->%u flags %s seq %u ack %u wnd %u len %zu opts mss%d:%u ws%d:%u "
		      "sackok%d ts%d:%u/%u sack%u",
		      what, p->tcp.sport, p->tcp.dport, fl, p->tcp.seq, p->tcp.ack, p->tcp.wnd,
		      p->data_len, p->tcp.opt.has_mss, p->tcp.opt.mss, p->tcp.opt.has_wscale,
		      p->tcp.opt.wscale, p->tcp.opt.sack_ok, p->tcp.opt.has_ts, p->tcp.opt.ts_val,
		      p->tcp.opt.ts_ecr, p->tcp.opt.n_sack);
	for (unsigned i = 0; i < p->tcp.opt.n_sack; i++)
		print_message(" [%u,%u)", p->tcp.opt.sack[i].left, p->tcp.opt.sack[i].right);
	print_message("\n");
}

/* Pop a TCP segment (any port) and check the IPv4 rules every segment we send keeps. */
static inline void t_pop_(struct nh *h, struct nh_pkt *p, const char *file, int line)
{
	if (nh_pop(h, p)) {
		print_error("%s:%d: expected a segment, none was sent\n", file, line);
		_fail(file, line);
	}
	if (p->eth.type != FP_ETH_TYPE_IPV4 || p->ip.proto != FP_IPPROTO_TCP) {
		print_error("%s:%d: expected a TCP segment, got ethertype %#x proto %u\n", file,
			    line, p->eth.type, p->ip.proto);
		_fail(file, line);
	}
	_assert_int_equal(p->ip.src, NH_OUR_IP, file, line);
	_assert_int_equal(p->ip.dst, NH_PEER_IP, file, line);
	_assert_int_equal(p->ip.ttl, 64, file, line);
	_assert_int_equal(p->ip.frag & FP_IPV4_FLAG_DF, FP_IPV4_FLAG_DF, file, line);
	_assert_int_equal(p->ip.hdr_len, FP_IPV4_HDR_LEN, file, line);
}
#define t_pop(h, p) t_pop_((h), (p), __FILE__, __LINE__)

/*
 * Pop the next segment and check it: exact flags, seq, ack, window (T_ANY skips one),
 * payload length, ports 80 -> 40000 unless @sport/@dport say otherwise (0 = default). A
 * RST must carry no options.
 */
static inline void t_expect_(struct nh *h, struct nh_pkt *p, uint16_t sport, uint16_t dport,
			     uint8_t flags, int64_t seq, int64_t ack, int64_t wnd, size_t len,
			     const char *file, int line)
{
	t_pop_(h, p, file, line);
	bool ok = p->tcp.flags == flags && p->data_len == len &&
		  p->tcp.sport == (sport ? sport : T_LPORT) &&
		  p->tcp.dport == (dport ? dport : T_RPORT) &&
		  (seq < 0 || p->tcp.seq == (uint32_t)seq) &&
		  (ack < 0 || p->tcp.ack == (uint32_t)ack) &&
		  (wnd < 0 || p->tcp.wnd == (uint32_t)wnd);
	if (!ok) {
		char fl[9];
		t_flags_str(flags, fl);
		print_error("%s:%d: segment differs from the expected flags %s seq %lld ack %lld "
			    "wnd %lld len %zu\n", file, line, fl, (long long)seq, (long long)ack,
			    (long long)wnd, len);
		t_print_pkt("got", p);
		_fail(file, line);
	}
	if ((flags & FP_TCP_RST) && p->tcp.hdr_len != FP_TCP_HDR_LEN) {
		print_error("%s:%d: a RST must carry no options\n", file, line);
		t_print_pkt("got", p);
		_fail(file, line);
	}
}
#define t_expect(h, p, flags, seq, ack, wnd, len) \
	t_expect_((h), (p), 0, 0, (flags), (seq), (ack), (wnd), (len), __FILE__, __LINE__)
#define t_expect_ports(h, p, sport, dport, flags, seq, ack, wnd, len) \
	t_expect_((h), (p), (sport), (dport), (flags), (seq), (ack), (wnd), (len), __FILE__, \
		  __LINE__)

/* Nothing was sent. */
static inline void t_expect_none_(struct nh *h, const char *file, int line)
{
	struct nh_pkt p;
	unsigned n = fp_stack_tx_pending(h->st);

	if (!n)
		return;
	print_error("%s:%d: expected no segment, %u were sent\n", file, line, n);
	while (nh_pop(h, &p) == 0)
		if (p.ip.proto == FP_IPPROTO_TCP)
			t_print_pkt("sent", &p);
	_fail(file, line);
}
#define t_expect_none(h) t_expect_none_((h), __FILE__, __LINE__)

/* ---- events ---- */

static const char *t_ev_name(unsigned t)
{
	static const char *const n[] = { "?", "ACCEPTED", "CONNECTED", "RECV", "SENT", "EOF",
					  "DEAD", "UDP_RECV" };
	return t < FP_ARRAY_SIZE(n) ? n[t] : "?";
}

/* Take the next event and check its type and status. */
static inline void t_event_(struct nh *h, struct fp_event *ev, unsigned type, int status,
			    const char *file, int line)
{
	if (nh_events(h, ev, 1) != 1) {
		print_error("%s:%d: expected event %s, none queued\n", file, line,
			    t_ev_name(type));
		_fail(file, line);
	}
	if (ev->type != type || ev->status != status) {
		print_error("%s:%d: expected event %s status %d, got %s status %d len %u\n", file,
			    line, t_ev_name(type), status, t_ev_name(ev->type), ev->status,
			    ev->len);
		_fail(file, line);
	}
}
#define t_event(h, ev, type, status) t_event_((h), (ev), (type), (status), __FILE__, __LINE__)

static inline void t_no_event_(struct nh *h, const char *file, int line)
{
	struct fp_event ev;

	if (nh_events(h, &ev, 1) == 0)
		return;
	print_error("%s:%d: expected no event, got %s status %d len %u\n", file, line,
		    t_ev_name(ev.type), ev.status, ev.len);
	_fail(file, line);
}
#define t_no_event(h) t_no_event_((h), __FILE__, __LINE__)

/* Take every queued event, which must all be RECV for @c, and append their bytes to @out.
 * Returns the byte count. Each RECV's m holds exactly its bytes in its data window. */
static inline size_t t_recv_all_(struct nh *h, const struct fp_tcp_conn *c, uint8_t *out,
				 size_t cap, const char *file, int line)
{
	struct fp_event ev;
	size_t n = 0;

	while (nh_events(h, &ev, 1) == 1) {
		if (ev.type != FP_EV_TCP_RECV) {
			print_error("%s:%d: expected RECV events only, got %s status %d\n", file,
				    line, t_ev_name(ev.type), ev.status);
			_fail(file, line);
		}
		_assert_int_equal((uintptr_t)ev.conn, (uintptr_t)c, file, line);
		_assert_int_equal(ev.cookie, T_COOKIE, file, line);
		_assert_true(ev.m != NULL, "ev.m", file, line);
		_assert_int_equal(ev.m->data_len, ev.len, file, line);
		_assert_true(n + ev.len <= cap, "recv fits", file, line);
		memcpy(out + n, fp_mbuf_data(ev.m), ev.len);
		n += ev.len;
	}
	return n;
}
#define t_recv_all(h, c, out, cap) t_recv_all_((h), (c), (out), (cap), __FILE__, __LINE__)

/* Exactly @len bytes equal to @want were delivered (in one or more RECV events). */
#define t_expect_recv(h, c, want, len)                                   \
	do {                                                             \
		static uint8_t got_[16384];                              \
		size_t n_ = t_recv_all((h), (c), got_, sizeof(got_));    \
		assert_int_equal(n_, (len));                             \
		assert_memory_equal(got_, (want), (len));                \
	} while (0)
