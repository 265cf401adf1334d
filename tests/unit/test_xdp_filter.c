/* test_xdp_filter.c: the XDP filter program run by the kernel on crafted frames (BPF_PROG_TEST_RUN, root). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "harness.h"
#include "xdp_filter_obj.h" /* fp_xdp_filter_obj[]: dev/xdp_filter.bpf.c, compiled at build time */

/*
 * The program is the one af_xdp.c attaches, loaded from the same embedded object but
 * attached to nothing: bpf_prog_test_run_opts() runs it on a frame we build and returns
 * its verdict. Its rule (xdp_filter.bpf.c): an IPv4 frame (version 4, fixed header
 * complete) whose destination is our address, or an Ethernet/IPv4 ARP packet (complete)
 * whose target is our address, goes to the AF_XDP socket of its queue; everything else
 * passes to the host. The redirect is bpf_redirect_map() with XDP_PASS as the fallback:
 *
 *   - with a socket in the queue's XSKMAP slot, the verdict is XDP_REDIRECT (the test run
 *     does not deliver it: no frame reaches the socket, which need not even be bound);
 *   - with the slot empty (no socket on that queue yet), the verdict is XDP_PASS: the
 *     frame goes to the host rather than being lost.
 *
 * The test run gives the frame rx_queue_index 0. The kernel refuses to run a frame shorter
 * than an Ethernet header (-EINVAL): those lengths are checked to be refused or passed,
 * never redirected. A C model of the rule (verdict()) is compared with the kernel on every
 * crafted frame, every truncation of them, and 10,000 seeded mutations of them
 * (FP_TEST_SEED replays). The program must never modify a frame, drop it or abort.
 */

#define OUR_IP    0x0a4d0001u  /* 10.77.0.1 */
#define OTHER_IP  0x0a4d0002u
#define XSK_SLOTS 4
#define N_RANDOM  10000
#define FRAME_MAX 256

/* Keep in step with struct xdp_cfg in xdp_filter.bpf.c. */
struct xdp_cfg {
	uint32_t ipv4;       /* network byte order */
	uint32_t owner_pid;
};

static struct {
	struct bpf_object *obj;
	int prog_fd, cfg_fd, xsks_fd, xsk, arps_fd;
	uint32_t addr;       /* what fp_cfg holds now (host order) */
	bool socket_in;      /* the queue-0 slot holds a socket */
} P = { .prog_fd = -1, .cfg_fd = -1, .xsks_fd = -1, .xsk = -1, .arps_fd = -1 };

/* ---- the program ---- */

static void set_addr(uint32_t addr)
{
	struct xdp_cfg cfg = { .ipv4 = htonl(addr), .owner_pid = (uint32_t)getpid() };
	uint32_t zero = 0;

	assert_int_equal(bpf_map_update_elem(P.cfg_fd, &zero, &cfg, BPF_ANY), 0);
	P.addr = addr;
}

static void set_socket(bool in)
{
	uint32_t zero = 0;

	if (in)
		assert_int_equal(bpf_map_update_elem(P.xsks_fd, &zero, &P.xsk, BPF_ANY), 0);
	else
		assert_int_equal(bpf_map_delete_elem(P.xsks_fd, &zero), 0);
	P.socket_in = in;
}

static int quiet(enum libbpf_print_level l, const char *fmt, va_list ap)
{
	(void)l;
	(void)fmt;
	(void)ap;
	return 0;
}

/* Load (not attach) the embedded program, one socket in slot 0. Skips without root. */
static int group_setup(void **state)
{
	(void)state;
	if (geteuid() != 0)
		return 0;   /* every test skips */
	libbpf_set_print(quiet);
	P.obj = bpf_object__open_mem(fp_xdp_filter_obj, fp_xdp_filter_obj_len, NULL);
	if (!P.obj)
		return -1;
	if (bpf_map__set_max_entries(bpf_object__find_map_by_name(P.obj, "fp_xsks"), XSK_SLOTS))
		return -1;
	if (bpf_object__load(P.obj)) {
		print_error("the XDP filter did not load (verifier or no BPF in this kernel)\n");
		return -1;
	}
	P.prog_fd = bpf_program__fd(bpf_object__find_program_by_name(P.obj, "fp_xdp_filter"));
	P.cfg_fd = bpf_object__find_map_fd_by_name(P.obj, "fp_cfg");
	P.xsks_fd = bpf_object__find_map_fd_by_name(P.obj, "fp_xsks");
	P.arps_fd = bpf_object__find_map_fd_by_name(P.obj, "fp_arps");
	/* An AF_XDP socket, never bound: enough for the XSKMAP and the redirect verdict. */
	P.xsk = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (P.prog_fd < 0 || P.cfg_fd < 0 || P.xsks_fd < 0 || P.xsk < 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (P.xsk >= 0)
		close(P.xsk);
	bpf_object__close(P.obj);
	return 0;
}

/* Per test: our address set, a socket on queue 0. */
static int setup(void **state)
{
	(void)state;
	if (!P.obj)
		return 0;
	set_addr(OUR_IP);
	set_socket(true);
	return 0;
}

#define NEED_ROOT() do { if (!P.obj) skip(); } while (0)

/* The kernel's verdict on @len bytes of @frame; -1 when it refused to run the frame. The
 * frame comes back unmodified. */
static int run(const uint8_t *frame, size_t len)
{
	uint8_t out[FRAME_MAX + 64];
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame, .data_size_in = (uint32_t)len,
		    .data_out = out, .data_size_out = sizeof(out), .repeat = 1);
	int r = bpf_prog_test_run_opts(P.prog_fd, &o);

	if (r) {
		assert_int_equal(errno, EINVAL);
		assert_true(len < 14);     /* only a frame shorter than Ethernet is refused */
		return -1;
	}
	assert_int_equal(o.data_size_out, len);
	assert_memory_equal(out, frame, len);
	return (int)o.retval;
}

/* ---- the reference model ---- */

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Is the frame ours, by xdp_filter.bpf.c's rule? */
static bool ours(const uint8_t *f, size_t len, uint32_t addr)
{
	if (len < 14)
		return false;
	if (be16(f + 12) == 0x0800)
		return len >= 14 + 20 && f[14] >> 4 == 4 && be32(f + 14 + 16) == addr;
	if (be16(f + 12) == 0x0806)
		return len >= 14 + 28 && be16(f + 14) == 1 && be16(f + 16) == 0x0800 &&
		       f[18] == 6 && f[19] == 4 && be32(f + 14 + 24) == addr;
	return false;
}

static int verdict(const uint8_t *f, size_t len)
{
	return ours(f, len, P.addr) && P.socket_in ? XDP_REDIRECT : XDP_PASS;
}

/* The kernel and the model agree on @frame (a refused short frame counts as passed). */
static void check(const uint8_t *frame, size_t len)
{
	int got = run(frame, len), want = verdict(frame, len);

	if (got == -1)
		got = XDP_PASS;
	if (got != want)
		fail_msg("len %zu ethertype %04x: verdict %d, the rule says %d", len,
			 len >= 14 ? be16(frame + 12) : 0, got, want);
}

/* ---- frames ---- */

static const uint8_t our_mac[6] = { 0x02, 0, 0, 0, 0, 1 };
static const uint8_t peer_mac[6] = { 0x02, 0, 0, 0, 0, 2 };

static size_t eth(uint8_t *f, uint16_t type)
{
	memcpy(f, our_mac, 6);
	memcpy(f + 6, peer_mac, 6);
	f[12] = (uint8_t)(type >> 8);
	f[13] = (uint8_t)type;
	return 14;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* IPv4 from the peer to @dst, protocol @proto, @ihl words of header, @frag the flags and
 * offset field, @payload bytes after the header. Returns the frame length. */
static size_t ipv4(uint8_t *f, uint32_t dst, uint8_t proto, uint8_t ihl, uint16_t frag,
		   size_t payload)
{
	size_t n = eth(f, 0x0800);
	uint8_t *ip = f + n;
	size_t hl = (size_t)ihl * 4;

	memset(ip, 0, hl + payload);
	ip[0] = (uint8_t)(0x40 | ihl);
	ip[2] = (uint8_t)((hl + payload) >> 8);
	ip[3] = (uint8_t)(hl + payload);
	ip[6] = (uint8_t)(frag >> 8);
	ip[7] = (uint8_t)frag;
	ip[8] = 64;
	ip[9] = proto;
	put32(ip + 12, OTHER_IP);
	put32(ip + 16, dst);
	for (size_t i = 20; i < hl; i++)
		ip[i] = 1;                       /* NOP options */
	for (size_t i = 0; i < payload; i++)
		ip[hl + i] = (uint8_t)(i * 13);
	return n + hl + payload;
}

/* ARP for Ethernet/IPv4: @op, sender @spa, target @tpa. */
static size_t arp(uint8_t *f, uint16_t op, uint32_t spa, uint32_t tpa)
{
	size_t n = eth(f, 0x0806);
	uint8_t *a = f + n;

	a[0] = 0, a[1] = 1;                  /* Ethernet */
	a[2] = 0x08, a[3] = 0x00;            /* IPv4 */
	a[4] = 6, a[5] = 4;
	a[6] = (uint8_t)(op >> 8), a[7] = (uint8_t)op;
	memcpy(a + 8, peer_mac, 6);
	put32(a + 14, spa);
	memset(a + 18, op == 1 ? 0 : 0x02, 6);
	put32(a + 24, tpa);
	memset(a + 28, 0, 18);               /* padded to the 60-byte minimum */
	return n + 28 + 18;
}

/* The frames every test starts from: [i] has length len[i]. */
#define N_BASE 16
static uint8_t base[N_BASE][FRAME_MAX];
static size_t base_len[N_BASE];

static void build_base(void)
{
	unsigned i = 0;

	base_len[i] = ipv4(base[i], OUR_IP, 6, 5, 0x4000, 20), i++;      /* TCP, DF */
	base_len[i] = ipv4(base[i], OUR_IP, 17, 5, 0, 8 + 32), i++;      /* UDP */
	base_len[i] = ipv4(base[i], OUR_IP, 1, 5, 0, 8 + 56), i++;       /* ICMP echo */
	base_len[i] = ipv4(base[i], OUR_IP, 17, 5, 0x2000, 64), i++;     /* first fragment */
	base_len[i] = ipv4(base[i], OUR_IP, 17, 5, 0x0008, 40), i++;     /* last fragment */
	base_len[i] = ipv4(base[i], OUR_IP, 6, 15, 0, 20), i++;          /* 40 bytes of options */
	base_len[i] = ipv4(base[i], OTHER_IP, 6, 5, 0, 20), i++;
	base_len[i] = ipv4(base[i], 0xffffffffu, 17, 5, 0, 8), i++;      /* broadcast */
	base_len[i] = arp(base[i], 1, OTHER_IP, OUR_IP), i++;            /* who has us */
	base_len[i] = arp(base[i], 2, OTHER_IP, OUR_IP), i++;            /* reply to us */
	base_len[i] = arp(base[i], 1, OTHER_IP, 0x0a4d0003u), i++;       /* for another */
	base_len[i] = arp(base[i], 1, OUR_IP, OUR_IP), i++;              /* gratuitous, ours */
	/* 802.1Q around an IPv4 frame for us: the host's (the stack takes no tags) */
	base_len[i] = ipv4(base[i], OUR_IP, 6, 5, 0, 20);
	memmove(base[i] + 16, base[i] + 12, base_len[i] - 12);
	base[i][12] = 0x81, base[i][13] = 0x00, base[i][14] = 0x00, base[i][15] = 0x05;
	base_len[i] += 4, i++;
	/* IPv6 (and its ND for any address) is the host's */
	base_len[i] = eth(base[i], 0x86dd);
	memset(base[i] + 14, 0x60, 40);
	base_len[i] += 40, i++;
	base_len[i] = eth(base[i], 0x88cc), base_len[i] += 46, i++;     /* LLDP */
	base_len[i] = eth(base[i], 0x0040), base_len[i] += 46, i++;     /* 802.3 length */
	if (i != N_BASE)
		abort();
}

/* ---- tests ---- */

static void ipv4_to_us_redirected(void **state)
{
	static const unsigned idx[] = { 0, 1, 2, 3, 4, 5 };  /* TCP, UDP, ICMP, fragments, options */

	(void)state;
	NEED_ROOT();
	for (unsigned k = 0; k < FP_ARRAY_SIZE(idx); k++) {
		assert_int_equal(run(base[idx[k]], base_len[idx[k]]), XDP_REDIRECT);
		check(base[idx[k]], base_len[idx[k]]);
	}
}

static void ipv4_elsewhere_passed(void **state)
{
	uint8_t f[FRAME_MAX];
	size_t n;

	(void)state;
	NEED_ROOT();
	assert_int_equal(run(base[6], base_len[6]), XDP_PASS);       /* another host */
	assert_int_equal(run(base[7], base_len[7]), XDP_PASS);       /* broadcast */
	/* our address, but version 6 in the IPv4 ethertype: not ours */
	n = ipv4(f, OUR_IP, 6, 5, 0, 20);
	f[14] = 0x65;
	assert_int_equal(run(f, n), XDP_PASS);
	/* our address as the source only */
	n = ipv4(f, OTHER_IP, 6, 5, 0, 20);
	put32(f + 14 + 12, OUR_IP);
	assert_int_equal(run(f, n), XDP_PASS);
}

static void arp_for_us_redirected(void **state)
{
	uint8_t f[FRAME_MAX];
	size_t n;

	(void)state;
	NEED_ROOT();
	assert_int_equal(run(base[8], base_len[8]), XDP_REDIRECT);   /* request */
	assert_int_equal(run(base[9], base_len[9]), XDP_REDIRECT);   /* reply */
	assert_int_equal(run(base[11], base_len[11]), XDP_REDIRECT); /* gratuitous */
	assert_int_equal(run(base[10], base_len[10]), XDP_PASS);     /* another target */
	/* our address as the sender only */
	n = arp(f, 1, OUR_IP, OTHER_IP);
	assert_int_equal(run(f, n), XDP_PASS);
	/* not Ethernet/IPv4 ARP: every one of htype, ptype, hlen, plen */
	for (unsigned field = 0; field < 4; field++) {
		n = arp(f, 1, OTHER_IP, OUR_IP);
		f[14 + (field < 2 ? field * 2 + 1 : field + 2)] ^= 0x10;
		assert_int_equal(run(f, n), XDP_PASS);
	}
	/* the 28 bytes without the padding are enough */
	n = arp(f, 2, OTHER_IP, OUR_IP);
	assert_int_equal(run(f, 14 + 28), XDP_REDIRECT);
	assert_int_equal(run(f, 14 + 27), XDP_PASS);
}

/* Other hosts' ARP frames are passed and copied (42 bytes) into fp_arps for the stack to
 * learn from; ours, IPv4 and short frames are not copied. */
struct copies {
	unsigned n;
	uint8_t last[64];
	size_t last_len;
};

static int copy_seen(void *ctx, void *data, size_t len)
{
	struct copies *c = ctx;

	c->n++;
	c->last_len = len < sizeof(c->last) ? len : sizeof(c->last);
	memcpy(c->last, data, c->last_len);
	return 0;
}

static void arp_of_others_copied(void **state)
{
	struct copies c = { 0 };
	struct ring_buffer *rb;
	uint8_t f[FRAME_MAX];
	size_t n;

	(void)state;
	NEED_ROOT();
	assert_true(P.arps_fd >= 0);
	rb = ring_buffer__new(P.arps_fd, copy_seen, &c, NULL);
	assert_non_null(rb);
	ring_buffer__consume(rb);                                    /* earlier tests' copies */
	c.n = 0;
	assert_int_equal(run(base[10], base_len[10]), XDP_PASS);     /* another target */
	assert_int_equal(ring_buffer__consume(rb), 1);
	assert_int_equal(c.last_len, 42);
	assert_memory_equal(c.last, base[10], 42);
	n = arp(f, 1, OTHER_IP, OTHER_IP);                           /* a neighbour's gratuitous */
	assert_int_equal(run(f, n), XDP_PASS);
	assert_int_equal(ring_buffer__consume(rb), 1);
	assert_memory_equal(c.last, f, 42);
	assert_int_equal(run(base[8], base_len[8]), XDP_REDIRECT);   /* for us: not copied */
	assert_int_equal(run(base[0], base_len[0]), XDP_REDIRECT);   /* IPv4 to us */
	n = arp(f, 1, OTHER_IP, OTHER_IP);
	assert_int_equal(run(f, 14 + 27), XDP_PASS);                 /* short: not read */
	assert_int_equal(ring_buffer__consume(rb), 0);
	assert_int_equal(c.n, 2);
	ring_buffer__free(rb);
}

static void other_ethertypes_passed(void **state)
{
	(void)state;
	NEED_ROOT();
	for (unsigned i = 12; i < N_BASE; i++) {
		assert_int_equal(run(base[i], base_len[i]), XDP_PASS);
		check(base[i], base_len[i]);
	}
}

/* Every prefix of every frame, 0..60 bytes and the whole: passed until the header the rule
 * reads is complete (34 bytes for IPv4, 42 for ARP), never dropped or aborted. */
static void truncated_frames(void **state)
{
	(void)state;
	NEED_ROOT();
	for (unsigned i = 0; i < N_BASE; i++) {
		for (size_t len = 0; len <= 60 && len <= base_len[i]; len++) {
			int v = run(base[i], len);
			assert_true(v == -1 || v == XDP_PASS || v == XDP_REDIRECT);
			if (len < 34)
				assert_true(v == -1 || v == XDP_PASS);
			check(base[i], len);
		}
		check(base[i], base_len[i]);
	}
}

/* No socket on the queue yet (or any more): frames for us go to the host, not lost. */
static void no_socket_falls_back_to_pass(void **state)
{
	(void)state;
	NEED_ROOT();
	set_socket(false);
	for (unsigned i = 0; i < N_BASE; i++) {
		assert_int_equal(run(base[i], base_len[i]), XDP_PASS);
		check(base[i], base_len[i]);
	}
	set_socket(true);
	assert_int_equal(run(base[0], base_len[0]), XDP_REDIRECT);
}

/* The address lives in the fp_cfg map: a new one takes effect at once; 0 matches nothing
 * the crafted frames carry. */
static void address_from_map(void **state)
{
	(void)state;
	NEED_ROOT();
	set_addr(OTHER_IP);
	assert_int_equal(run(base[0], base_len[0]), XDP_PASS);
	assert_int_equal(run(base[6], base_len[6]), XDP_REDIRECT);
	assert_int_equal(run(base[8], base_len[8]), XDP_PASS);
	for (unsigned i = 0; i < N_BASE; i++)
		check(base[i], base_len[i]);
	set_addr(0);
	for (unsigned i = 0; i < N_BASE; i++)
		check(base[i], base_len[i]);
}

/*
 * N_RANDOM frames: a base frame, cut or padded to a random length, with a few bytes set
 * at random, most of them in the bytes the rule reads (ethertype, IPv4 version and
 * destination, ARP's fixed fields and target), to one of the values that matter or any.
 * The kernel must agree with the model on each, with the address and the socket slot
 * also changing now and then.
 */
static void random_frames_match_model(void **state)
{
	static const uint8_t hot[] = { 12, 13, 14, 15, 16, 17, 18, 19, 30, 31, 32, 33,
				       38, 39, 40, 41 };
	static const uint8_t vals[] = { 0x00, 0x01, 0x04, 0x06, 0x08, 0x06, 0x45, 0x4f, 0x0a,
					0x4d, 0x81, 0x86, 0xdd, 0xff, 0x60, 0x40 };
	uint64_t s = fp_test_seed() ^ 0x7864702d66696cull;
	unsigned redirected = 0;

	(void)state;
	NEED_ROOT();
	for (unsigned it = 0; it < N_RANDOM; it++) {
		uint8_t f[FRAME_MAX];
		unsigned b = (unsigned)fp_test_below(&s, N_BASE);
		size_t len = base_len[b];

		memcpy(f, base[b], len);
		if (fp_test_below(&s, 4) == 0)
			len = (size_t)fp_test_below(&s, 80);
		else if (fp_test_below(&s, 8) == 0)
			len = (size_t)fp_test_below(&s, FRAME_MAX + 1);
		for (size_t i = base_len[b]; i < len; i++)
			f[i] = (uint8_t)fp_test_rand(&s);
		for (unsigned k = (unsigned)fp_test_below(&s, 4); k; k--) {
			size_t at = fp_test_below(&s, 4) ? hot[fp_test_below(&s, sizeof(hot))] :
				    (size_t)fp_test_below(&s, FRAME_MAX);
			if (at < len)
				f[at] = fp_test_below(&s, 2) ? vals[fp_test_below(&s, sizeof(vals))] :
					(uint8_t)fp_test_rand(&s);
		}
		if (fp_test_below(&s, 500) == 0)
			set_addr(fp_test_below(&s, 4) ? OUR_IP : (uint32_t)fp_test_rand(&s));
		if (fp_test_below(&s, 500) == 0)
			set_socket(fp_test_below(&s, 4) != 0);
		redirected += verdict(f, len) == XDP_REDIRECT;
		check(f, len);
	}
	/* the mutations kept enough frames ours to mean something */
	assert_true(redirected > N_RANDOM / 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(ipv4_to_us_redirected, setup),
		cmocka_unit_test_setup(ipv4_elsewhere_passed, setup),
		cmocka_unit_test_setup(arp_for_us_redirected, setup),
		cmocka_unit_test_setup(arp_of_others_copied, setup),
		cmocka_unit_test_setup(other_ethertypes_passed, setup),
		cmocka_unit_test_setup(truncated_frames, setup),
		cmocka_unit_test_setup(no_socket_falls_back_to_pass, setup),
		cmocka_unit_test_setup(address_from_map, setup),
		cmocka_unit_test_setup(random_frames_match_model, setup),
	};

	build_base();
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
