/* fp-reflect.c: the ceiling of an AF_XDP server on a link: every UDP datagram for our address goes straight back, touched as little as possible. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/dev.h>
#include <flowplane/mbuf.h>

/*
 * What the fastest possible AF_XDP server would do on this link: no stack, no
 * application. A frame for our address that is IPv4/UDP goes back to its sender with the
 * Ethernet and IP addresses and the UDP ports swapped (the checksums cover both halves of
 * each pair, so they stay right) and, with --dns, the DNS header's QR bit set (the UDP
 * checksum patched incrementally, RFC 1624), so a DNS load generator takes each datagram
 * for an answer. Everything else (ARP included) is dropped and counted: give the client a
 * static neighbour entry for our address. Measured against fp-dns under the same load,
 * it says how much of the link's capacity the server leaves unused: where the path, not
 * the server, is the limit (issue 20).
 */

#define BURST 64

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static const char usage[] =
	"usage: fp-reflect --if IFNAME --ip A.B.C.D [--dns] [--copy]\n"
	"Answer every UDP datagram for A.B.C.D on IFNAME's queue 0 by sending it back (AF_XDP,\n"
	"root), until SIGINT; then print what was reflected and dropped.\n"
	"  --if IFNAME   the interface (its queue 0)\n"
	"  --ip A.B.C.D  our address: frames to it come to us, the rest to the kernel\n"
	"  --dns         set the DNS QR bit of each datagram (a DNS client counts answers)\n"
	"  --copy        force AF_XDP copy mode\n";

/* One frame: 1 when it goes back, 0 when it is dropped. */
static int reflect(struct fp_mbuf *m, uint32_t our_ip, bool dns)
{
	uint8_t *p = fp_mbuf_data(m);
	uint32_t len = m->data_len;

	if (len < 14 + 20 + 8 || p[12] != 0x08 || p[13] != 0x00)
		return 0;
	uint8_t *ip = p + 14;
	size_t ihl = (size_t)(ip[0] & 0x0f) * 4;
	uint32_t dst;
	memcpy(&dst, ip + 16, 4);
	if ((ip[0] >> 4) != 4 || ihl < 20 || len < 14 + ihl + 8 || ip[9] != 17 ||
	    ntohl(dst) != our_ip)
		return 0;
	uint8_t t[6];
	memcpy(t, p, 6);                          /* Ethernet: dst <-> src */
	memcpy(p, p + 6, 6);
	memcpy(p + 6, t, 6);
	memcpy(t, ip + 12, 4);                    /* IP: src <-> dst */
	memcpy(ip + 12, ip + 16, 4);
	memcpy(ip + 16, t, 4);
	uint8_t *udp = ip + ihl;
	memcpy(t, udp, 2);                        /* UDP: ports */
	memcpy(udp, udp + 2, 2);
	memcpy(udp + 2, t, 2);
	if (dns && len >= 14 + ihl + 8 + 12) {
		uint8_t *h = udp + 8;
		uint16_t old, new_, csum;
		memcpy(&old, h + 2, 2);
		h[2] |= 0x80;
		memcpy(&new_, h + 2, 2);
		memcpy(&csum, udp + 6, 2);
		if (csum) {                       /* 0: no checksum (RFC 768) */
			csum = fp_csum_update16(csum, old, new_);
			memcpy(udp + 6, &csum, 2);
		}
	}
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "if", required_argument, NULL, 'i' }, { "ip", required_argument, NULL, 'a' },
		{ "dns", no_argument, NULL, 'd' }, { "copy", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	struct fp_xdp_config cfg = { 0 };
	struct in_addr a;
	bool dns = false;
	char err[256];
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'i': cfg.ifname = optarg; break;
		case 'a':
			if (!inet_pton(AF_INET, optarg, &a)) {
				fprintf(stderr, "fp-reflect: --ip '%s' is not A.B.C.D\n", optarg);
				return 2;
			}
			cfg.ipv4 = ntohl(a.s_addr);
			break;
		case 'd': dns = true; break;
		case 'c': cfg.force_copy = true; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (!cfg.ifname || !cfg.ipv4 || optind < argc) {
		fprintf(stderr, "fp-reflect: --if IFNAME and --ip A.B.C.D are required "
			"(--help for usage)\n");
		return 2;
	}
	struct fp_xdp *x = fp_xdp_open(&cfg, err, sizeof(err));
	if (!x) {
		fprintf(stderr, "fp-reflect: %s\n", err);
		return 1;
	}
	struct fp_devq *q = fp_xdp_queue_open(x, 0, err, sizeof(err));
	if (!q) {
		fprintf(stderr, "fp-reflect: %s\n", err);
		fp_xdp_close(x);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	fprintf(stderr, "fp-reflect: %s queue 0 (%s), reflecting UDP for %s%s; SIGINT stops\n",
		cfg.ifname, q->zerocopy ? "zero-copy" : "copy mode", inet_ntoa(a),
		dns ? " as DNS answers" : "");

	struct fp_mbuf *in[BURST], *out[BURST];
	uint64_t reflected = 0, dropped = 0, refused = 0;
	while (!stop) {
		unsigned n = q->ops->rx_burst(q, in, BURST), k = 0;
		for (unsigned i = 0; i < n; i++) {
			if (reflect(in[i], cfg.ipv4, dns)) {
				out[k++] = in[i];
			} else {
				fp_mbuf_free(&q->cache, in[i]);
				dropped++;
			}
		}
		unsigned sent = k ? q->ops->tx_burst(q, out, k) : 0;
		for (unsigned i = sent; i < k; i++)
			fp_mbuf_free(&q->cache, out[i]);
		reflected += sent;
		refused += k - sent;
		q->ops->reclaim(q);
	}
	struct fp_dev_stats ds;
	memset(&ds, 0, sizeof(ds));
	q->ops->stats(q, &ds);
	printf("fp-reflect: %llu reflected, %llu dropped (not UDP for us), %llu refused by a full "
	       "ring; device: %llu received, %llu dropped\n", (unsigned long long)reflected,
	       (unsigned long long)dropped, (unsigned long long)refused,
	       (unsigned long long)ds.rx_frames, (unsigned long long)ds.rx_dropped);
	q->ops->close(q);
	fp_xdp_close(x);
	return 0;
}
