/* dev_cost.c: what each packet backend costs per frame sent and per frame received (issue 21). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <flowplane/clock.h>
#include <flowplane/dev.h>
#include <flowplane/wire.h>

/*
 * One thread drives both ends of a link: it builds a burst of UDP frames on end A (not
 * timed: that is the stack's work), hands it to A's tx_burst and reclaim (timed: "send"),
 * then drains end B with rx_burst and its reclaim, which posts receive buffers again
 * (timed: "receive"), and frees what arrived (not timed). Whatever the kernel does for a
 * frame on the way (AF_XDP's copy-mode transmit over a veth, the peer's XDP program and
 * the copy into its UMEM; af_packet's socket path) runs inside the send call that kicked
 * it and is charged there; memif's two copies are its tx and its rx. Polls that find
 * nothing are counted apart, not charged to frames.
 *
 *   fp-dev-cost --pair | --xdp IF_A,IF_B | --dpdk 'EAL args with two --vdev'
 *               [--frames N] [--burst B] [--size BYTES] [--json]
 */

#define MAX_BURST 256

static const char usage[] =
	"usage: fp-dev-cost (--pair | --xdp IF_A,IF_B | --dpdk 'EAL ARGS') [--frames N]\n"
	"                   [--burst B] [--size BYTES] [--dpdk-copy] [--json]\n"
	"Send N frames from end A of a link to end B in bursts of B, one thread driving both,\n"
	"and print the cycles spent per frame in the backend's send (tx_burst + reclaim) and\n"
	"receive (rx_burst + reclaim) calls.\n"
	"  --pair          flowplane's in-process pair (a copy through a ring: the floor)\n"
	"  --xdp A,B       AF_XDP on two interfaces (the two ends of a veth pair; root)\n"
	"  --dpdk ARGS     DPDK's EAL with two --vdev (port 0 is A, port 1 is B), e.g.\n"
	"                  '--vdev=net_memif0,role=server,socket=/tmp/x.sock,socket-abstract=no\n"
	"                   --vdev=net_memif1,role=client,socket=/tmp/x.sock,socket-abstract=no'\n"
	"  --frames N      frames to move (default 2000000)\n"
	"  --burst B       frames per tx_burst, 1..256 (default 32)\n"
	"  --size BYTES    frame size, 60..1514 (default 64: Ethernet, IPv4, UDP, 22 bytes)\n"
	"  --dpdk-copy     dpdk: frames copied to and from DPDK's own mbufs even where the\n"
	"                  backend is zero-copy (memif, af_packet, tap)\n"
	"  --json          one JSON object instead of the table line\n";

struct end {
	struct fp_devq *q;
	struct fp_xdp *x;
	struct fp_dpdk *d;
};

struct tally {
	uint64_t sent, received, tx_cycles, rx_cycles, empty_polls, empty_cycles, tx_refused;
	uint64_t tx_dropped;   /* by the sending device after it took them */
};

static void die(const char *what, const char *err)
{
	fprintf(stderr, "fp-dev-cost: %s: %s\n", what, err);
	exit(1);
}

/* An Ethernet/IPv4/UDP frame of @size bytes from @src to @dst (the template copied into
 * every buffer sent). */
static size_t frame_template(uint8_t *f, size_t size, const struct fp_eth_addr *src,
			     const struct fp_eth_addr *dst, uint32_t sip, uint32_t dip)
{
	struct fp_ipv4 ip = { .src = sip, .dst = dip, .ttl = 64, .proto = FP_IPPROTO_UDP,
			      .frag = FP_IPV4_FLAG_DF };
	size_t l4 = size - FP_ETH_HDR_LEN - FP_IPV4_HDR_LEN;

	memset(f, 0, size);
	fp_eth_emit(f, FP_ETH_HDR_LEN, dst, src, FP_ETH_TYPE_IPV4);
	fp_ipv4_emit(f + FP_ETH_HDR_LEN, FP_IPV4_HDR_LEN, &ip, l4);
	for (size_t i = 8; i < l4; i++)
		f[FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + i] = (uint8_t)i;
	fp_udp_emit(f + FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN, l4, sip, dip, 9000, 9);
	return size;
}

/* Drain B: the timed receive calls, then the frames freed (untimed). */
static unsigned drain(struct end *b, struct fp_mbuf **in, struct tally *t)
{
	uint64_t t0 = fp_rdtsc();
	unsigned n = b->q->ops->rx_burst(b->q, in, MAX_BURST);

	b->q->ops->reclaim(b->q);
	uint64_t dt = fp_rdtsc() - t0;

	if (n) {
		t->rx_cycles += dt;
		t->received += n;
	} else {
		t->empty_polls++;
		t->empty_cycles += dt;
	}
	for (unsigned i = 0; i < n; i++)
		fp_mbuf_free(&b->q->cache, in[i]);
	return n;
}

static void run(struct end *a, struct end *b, uint64_t frames, unsigned burst, size_t size,
		struct tally *t)
{
	static struct fp_mbuf *out[MAX_BURST], *in[MAX_BURST];
	uint8_t tmpl[1514];
	uint32_t sip = 0x0a630001, dip = 0x0a630002;   /* 10.99.0.1 -> 10.99.0.2 */

	frame_template(tmpl, size, &a->q->mac, &b->q->mac, sip, dip);
	memset(t, 0, sizeof(*t));
	while (t->sent < frames) {
		unsigned n = 0, k;

		while (n < burst && t->sent + n < frames) {
			struct fp_mbuf *m = fp_pool_get(&a->q->cache);
			uint8_t *p;

			if (!m)
				break;
			if (!(p = fp_mbuf_append(m, (uint32_t)size))) {
				fp_mbuf_free(&a->q->cache, m);
				break;
			}
			memcpy(p, tmpl, size);
			out[n++] = m;
		}
		uint64_t t0 = fp_rdtsc();
		k = n ? a->q->ops->tx_burst(a->q, out, n) : 0;
		a->q->ops->reclaim(a->q);
		t->tx_cycles += fp_rdtsc() - t0;
		t->sent += k;
		t->tx_refused += n - k;
		for (unsigned i = k; i < n; i++)
			fp_mbuf_free(&a->q->cache, out[i]);
		drain(b, in, t);
	}
	/* what is still on its way */
	for (int idle = 0; idle < 1000; idle++)
		if (drain(b, in, t))
			idle = 0;
	struct fp_dev_stats ds = { 0 };
	a->q->ops->stats(a->q, &ds);
	t->tx_dropped = ds.tx_dropped;   /* cumulative over the device's life */
}

static bool dpdk_copy;   /* --dpdk-copy */

static void open_end(struct end *e, const char *how, const char *ifname, uint32_t ip,
		     struct fp_dpdk *first, const char *dpdk_args)
{
	char err[256] = "";

	if (!strcmp(how, "xdp")) {
		struct fp_xdp_config c = { .ifname = ifname, .ipv4 = ip };

		if (!(e->x = fp_xdp_open(&c, err, sizeof(err))))
			die(ifname, err);
		if (!(e->q = fp_xdp_queue_open(e->x, 0, err, sizeof(err))))
			die(ifname, err);
	} else {
		struct fp_dpdk_config c = { .args = dpdk_args, .n_queues = 1, .copy = dpdk_copy };

		e->d = first ? fp_dpdk_open_next(first, &c, err, sizeof(err))
			     : fp_dpdk_open(&c, err, sizeof(err));
		if (!e->d)
			die("dpdk", err);
		if (!(e->q = fp_dpdk_queue_open(e->d, 0, err, sizeof(err))))
			die("dpdk queue", err);
	}
}

static void close_end(struct end *e)
{
	if (e->q && !e->x && !e->d)
		return;   /* a pair end: closed with the pair below */
	e->q->ops->close(e->q);
	if (e->x)
		fp_xdp_close(e->x);
	if (e->d)
		fp_dpdk_close(e->d);
}

static uint64_t parse_u64(const char *opt, const char *v, uint64_t lo, uint64_t hi)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi) {
		fprintf(stderr, "fp-dev-cost: %s takes a number in %llu..%llu, not '%s'\n", opt,
			(unsigned long long)lo, (unsigned long long)hi, v);
		exit(2);
	}
	return x;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pair", no_argument, NULL, 'p' }, { "xdp", required_argument, NULL, 'x' },
		{ "dpdk", required_argument, NULL, 'd' }, { "frames", required_argument, NULL, 'n' },
		{ "burst", required_argument, NULL, 'b' }, { "size", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ "dpdk-copy", no_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 } };
	const char *xdp = NULL, *dpdk = NULL, *kind = NULL;
	uint64_t frames = 2000000;
	unsigned burst = 32;
	size_t size = 64;
	bool json = false;
	struct end a = { 0 }, b = { 0 };
	struct tally t;
	int o;

	opterr = 0;   /* our own one-line message below */
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'p': kind = "pair"; break;
		case 'x': kind = "xdp"; xdp = optarg; break;
		case 'd': kind = "dpdk"; dpdk = optarg; break;
		case 'n': frames = parse_u64("--frames", optarg, 1, 1ull << 40); break;
		case 'b': burst = (unsigned)parse_u64("--burst", optarg, 1, MAX_BURST); break;
		case 's': size = parse_u64("--size", optarg, 60, 1514); break;
		case 'j': json = true; break;
		case 'c': dpdk_copy = true; break;
		case 'h': fputs(usage, stdout); return 0;
		default:
			fprintf(stderr, "fp-dev-cost: unknown or incomplete option '%s' (--help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fp-dev-cost: unexpected argument '%s' (--help)\n", argv[optind]);
		return 2;
	}
	if (!kind) {
		fprintf(stderr, "fp-dev-cost: choose a backend: --pair, --xdp IF_A,IF_B or --dpdk "
			"'EAL ARGS' (--help)\n");
		return 2;
	}
	fp_tsc_calibrate(0);
	if (!strcmp(kind, "pair")) {
		struct fp_devq *ends[2];

		if (fp_pair_create(4096, 2048, ends))
			die("pair", strerror(errno));
		a.q = ends[0];
		b.q = ends[1];
	} else if (!strcmp(kind, "xdp")) {
		char ifs[64];
		char *comma;

		snprintf(ifs, sizeof(ifs), "%s", xdp);
		if (!(comma = strchr(ifs, ',')))
			die("--xdp", "takes two interfaces: IF_A,IF_B");
		*comma = '\0';
		open_end(&a, "xdp", ifs, 0x0a630001, NULL, NULL);
		open_end(&b, "xdp", comma + 1, 0x0a630002, NULL, NULL);
	} else {
		open_end(&a, "dpdk", NULL, 0, NULL, dpdk);
		open_end(&b, "dpdk", NULL, 0, a.d, dpdk);
		/* memif's link comes up asynchronously: move frames until some arrive */
		for (int i = 0; i < 2000; i++) {
			run(&a, &b, burst, burst, size, &t);
			if (t.received)
				break;
		}
		if (!t.received)
			die("dpdk", "no frame crossed from port 0 to port 1 in 2000 tries (link down?)");
	}
	run(&a, &b, frames / 10 + 1, burst, size, &t);   /* warm: buffers, caches */
	run(&a, &b, frames, burst, size, &t);
	double tx = (double)fp_cycles_to_ns(t.tx_cycles) / (double)(t.sent ? t.sent : 1);
	double rx = (double)fp_cycles_to_ns(t.rx_cycles) / (double)(t.received ? t.received : 1);
	double poll = (double)fp_cycles_to_ns(t.empty_cycles) /
		      (double)(t.empty_polls ? t.empty_polls : 1);
	if (json)
		printf("{\"backend\": \"%s\", \"frames\": %llu, \"burst\": %u, \"size\": %zu, "
		       "\"sent\": %llu, \"received\": %llu, \"tx_refused\": %llu, "
		       "\"tx_ns_per_frame\": %.1f, \"rx_ns_per_frame\": %.1f, "
		       "\"empty_polls\": %llu, \"empty_poll_ns\": %.1f, "
		       "\"tx_dropped_by_device\": %llu}\n",
		       kind, (unsigned long long)frames, burst, size, (unsigned long long)t.sent,
		       (unsigned long long)t.received, (unsigned long long)t.tx_refused, tx, rx,
		       (unsigned long long)t.empty_polls, poll, (unsigned long long)t.tx_dropped);
	else
		printf("%s: %llu frames of %zu bytes in bursts of %u: send %.1f ns/frame, receive "
		       "%.1f ns/frame (%llu received, %llu refused by tx, %llu dropped by the "
		       "sending device since it opened; %llu empty polls, %.1f ns each)\n", kind,
		       (unsigned long long)t.sent, size, burst, tx, rx,
		       (unsigned long long)t.received, (unsigned long long)t.tx_refused,
		       (unsigned long long)t.tx_dropped, (unsigned long long)t.empty_polls, poll);
	close_end(&b);
	close_end(&a);
	if (!strcmp(kind, "pair")) {
		a.q->ops->close(a.q);
		b.q->ops->close(b.q);
	}
	return 0;
}
