/* memif_churn.c: a memif peer that connects and leaves again and again (fp-memif-churn). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

/*
 * Each departure of a memif client makes the server's DPDK unmap the rings its workers
 * poll (memif_disconnect, in the server's interrupt thread). An fp-echo client departs
 * once per process; this one departs --cycles times a second or so, so a server whose
 * bursts and interrupt thread do not exclude each other (dev/dpdk.c) is caught in
 * seconds: tests/integration/test_dpdk.py runs it against a two-worker server.
 *
 * A cycle: start the port (connect), wait until the link is up (the server mapped our
 * rings and its workers poll them), send a few frames nobody expects (ARP requests), stop
 * the port (disconnect). Exit 0 when every cycle's link came up; 1 otherwise; 2 on bad use.
 */

#define CHURN_WAIT_MS 5000u

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fp-memif-churn --socket PATH [--queues N] [--cycles K] [--hold-ms MS]\n"
		"  connects to a memif server (role=server) at PATH as a client with N queue\n"
		"  pairs (default 2), holds the link MS ms (default 20) and leaves; K times\n"
		"  (default 100). Prints one line: cycles, links up, seconds.\n");
}

/* One line on stderr, exit status 2. */
static int bad_use(const char *why, const char *what)
{
	fprintf(stderr, "fp-memif-churn: %s '%s' (--help for usage)\n", why, what);
	return 2;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static bool link_up(uint16_t port, unsigned wait_ms)
{
	struct rte_eth_link l;

	for (unsigned i = 0; i <= wait_ms; i++) {
		if (rte_eth_link_get_nowait(port, &l) == 0 && l.link_status == RTE_ETH_LINK_UP)
			return true;
		usleep(1000);
	}
	return false;
}

/* A few broadcast ARP requests on each queue: the server's workers read real frames. */
static void send_some(uint16_t port, unsigned queues, struct rte_mempool *mp)
{
	static const uint8_t arp[42] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x99, 0x08, 0x06,
		0, 1, 0x08, 0, 6, 4, 0, 1, 0x02, 0, 0, 0, 0, 0x99, 10, 99, 0, 99,
		0, 0, 0, 0, 0, 0, 10, 99, 0, 1 };

	for (uint16_t q = 0; q < queues; q++) {
		struct rte_mbuf *m[4];
		unsigned n = 0, sent;

		for (; n < 4; n++) {
			char *p;

			if (!(m[n] = rte_pktmbuf_alloc(mp)))
				break;
			if (!(p = rte_pktmbuf_append(m[n], sizeof(arp)))) {
				rte_pktmbuf_free(m[n]);
				break;
			}
			memcpy(p, arp, sizeof(arp));
		}
		sent = rte_eth_tx_burst(port, q, m, (uint16_t)n);
		if (sent < n)
			rte_pktmbuf_free_bulk(&m[sent], n - sent);
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "queues", required_argument, NULL, 'q' },
		{ "cycles", required_argument, NULL, 'c' },
		{ "hold-ms", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL;
	unsigned queues = 2, cycles = 100, hold_ms = 20, up = 0, done = 0;
	char vdev[512], prefix[64];
	char *eal[16];
	int c, n = 0;
	struct rte_mempool *mp;
	struct rte_eth_conf conf = { 0 };
	double t0;

	opterr = 0;   /* one line of ours instead of getopt's */
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		char *end = NULL;
		unsigned long v = 0;

		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == ':')
			return bad_use("a value is missing after", argv[optind - 1]);
		if (c == '?')
			return bad_use("unknown argument", argv[optind - 1]);
		if (c == 's') {
			sock = optarg;
			continue;
		}
		v = strtoul(optarg, &end, 10);
		if (*end || !*optarg || v < 1 || v > (c == 'q' ? 16u : 100000u))
			return bad_use(c == 'q' ? "--queues takes 1 to 16, not"
				       : c == 'c' ? "--cycles takes 1 to 100000, not"
						  : "--hold-ms takes 1 to 100000, not", optarg);
		if (c == 'q')
			queues = (unsigned)v;
		else if (c == 'c')
			cycles = (unsigned)v;
		else
			hold_ms = (unsigned)v;
	}
	if (optind != argc)
		return bad_use("unexpected argument", argv[optind]);
	if (!sock)
		return bad_use("the memif server's socket is required:", "--socket PATH");
	snprintf(vdev, sizeof(vdev), "--vdev=net_memif0,role=client,socket=%s,socket-abstract=no",
		 sock);
	snprintf(prefix, sizeof(prefix), "--file-prefix=fpchurn%d", (int)getpid());
	static const char *fixed[] = { "fp-memif-churn", "--no-pci", "--no-telemetry",
				       "--log-level=*:error", "-l", "0", "--no-huge", "--no-shconf",
				       "-m", "256" };

	for (unsigned i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		eal[n++] = (char *)fixed[i];
	eal[n++] = prefix;
	eal[n++] = vdev;
	eal[n] = NULL;
	if (rte_eal_init(n, eal) < 0) {
		fprintf(stderr, "fp-memif-churn: DPDK's EAL did not start: %s\n",
			rte_strerror(rte_errno));
		return 1;
	}
	if (!(mp = rte_pktmbuf_pool_create("churn", 2048, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
					   SOCKET_ID_ANY)) ||
	    rte_eth_dev_configure(0, (uint16_t)queues, (uint16_t)queues, &conf) < 0) {
		fprintf(stderr, "fp-memif-churn: the memif port: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	for (uint16_t q = 0; q < queues; q++)
		if (rte_eth_rx_queue_setup(0, q, 256, SOCKET_ID_ANY, NULL, mp) < 0 ||
		    rte_eth_tx_queue_setup(0, q, 256, SOCKET_ID_ANY, NULL) < 0) {
			fprintf(stderr, "fp-memif-churn: queue %u did not set up\n", q);
			return 1;
		}
	t0 = now_s();
	for (; done < cycles; done++) {
		if (rte_eth_dev_start(0) < 0) {
			fprintf(stderr, "fp-memif-churn: cycle %u: the port did not start (is a "
				"memif server listening at %s?)\n", done, sock);
			break;
		}
		if (link_up(0, CHURN_WAIT_MS)) {
			up++;
			send_some(0, queues, mp);
			usleep(hold_ms * 1000);
		}
		rte_eth_dev_stop(0);
		usleep(2000);   /* the server's interrupt thread sees us leave */
	}
	printf("cycles %u links_up %u seconds %.2f\n", done, up, now_s() - t0);
	rte_eth_dev_close(0);
	rte_eal_cleanup();
	return done == cycles && up == cycles ? 0 : 1;
}
