/* test_af_xdp.c: the AF_XDP backend against Linux over veth, in two private netns (root). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>

#include <flowplane/dev.h>
#include <flowplane/log.h>
#include <flowplane/net.h>

#include "harness.h"

/*
 * The topology, built per run and named after the pid so two builds can test at once:
 *
 *   netns fpx-<pid>-a: veth fpxa<pid>  10.77.0.3/24 (Linux's: the coexistence address)
 *                                     10.77.0.1    flowplane's (AF_XDP, not in Linux)
 *   netns fpx-<pid>-b: veth fpxb<pid>  10.77.0.2/24 the Linux peer (ping, python)
 *
 * The test's thread lives in netns a (setns) while it runs, so nothing touches the host's
 * interfaces. The peer's transmit checksum offload is off: a veth hands Linux's frames over
 * with a partial checksum, which an AF_XDP reader sees unfinished (dev/README.md).
 * The group teardown removes both namespaces; the setup removes those of dead runs.
 */
#define FP_IP     0x0a4d0001u  /* 10.77.0.1 */
#define PEER_IP   0x0a4d0002u  /* 10.77.0.2 */
#define BURST     32
#define WAIT_MS   30000
#define TCP_BULK_BYTES (4u << 20)

static struct {
	bool ready;
	int home_fd;               /* the netns we came from */
	char ns_a[32], ns_b[32], if_a[IF_NAMESIZE], if_b[IF_NAMESIZE];
	char log[8192];            /* warnings the library logged, for leak checks */
	pid_t listener;            /* the peer's UDP listener while one runs */
} W = { .home_fd = -1 };

static void log_capture(enum fp_log_level lvl, const char *line)
{
	if (lvl <= FP_LOG_WARN)
		snprintf(W.log + strlen(W.log), sizeof(W.log) - strlen(W.log), "%s\n", line);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* First line of a command's output into @out (empty on failure). */
static void sh_read(char *out, size_t cap, const char *cmd)
{
	FILE *f = popen(cmd, "r");

	out[0] = '\0';
	if (f) {
		if (!fgets(out, (int)cap, f))
			out[0] = '\0';
		pclose(f);
	}
}

/* Start `sh -c cmd` with stdout to @out_fd (or /dev/null); stderr stays visible. */
static pid_t spawn(int out_fd, const char *cmd)
{
	pid_t p = fork();

	if (p == 0) {
		int fd = out_fd >= 0 ? out_fd : open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return p;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void mac_str(const struct fp_eth_addr *a, char *out)
{
	sprintf(out, "%02x:%02x:%02x:%02x:%02x:%02x", a->b[0], a->b[1], a->b[2], a->b[3],
		a->b[4], a->b[5]);
}

/* ---- the topology ---- */

/* Namespaces of runs that died without their teardown (their pid is gone). */
static void remove_leftovers(void)
{
	FILE *f = popen("ip netns list 2>/dev/null", "r");
	char line[128], side;
	int pid;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "fpx-%d-%c", &pid, &side) == 2 && kill(pid, 0) && errno == ESRCH)
			sh("ip netns del fpx-%d-%c 2>/dev/null", pid, side);
	if (f)
		pclose(f);
}

static int topo_up(void)
{
	int pid = getpid(), fd;

	snprintf(W.ns_a, sizeof(W.ns_a), "fpx-%d-a", pid);
	snprintf(W.ns_b, sizeof(W.ns_b), "fpx-%d-b", pid);
	snprintf(W.if_a, sizeof(W.if_a), "fpxa%d", pid);
	snprintf(W.if_b, sizeof(W.if_b), "fpxb%d", pid);
	if (sh("ip netns add %s && ip netns add %s", W.ns_a, W.ns_b) ||
	    sh("ip link add %s netns %s type veth peer name %s netns %s", W.if_a, W.ns_a, W.if_b,
	       W.ns_b))
		return -1;
	const char *ns[2] = { W.ns_a, W.ns_b }, *ifs[2] = { W.if_a, W.if_b };
	const char *ip[2] = { "10.77.0.3/24", "10.77.0.2/24" };
	for (int i = 0; i < 2; i++)
		if (sh("ip netns exec %s sysctl -qw net.ipv6.conf.%s.disable_ipv6=1", ns[i],
		       ifs[i]) ||
		    sh("ip -n %s addr add %s dev %s", ns[i], ip[i], ifs[i]) ||
		    sh("ip -n %s link set %s up && ip -n %s link set lo up", ns[i], ifs[i], ns[i]))
			return -1;
	if (!getenv("FPX_KEEP_TX_CSUM") &&
	    sh("ip netns exec %s ethtool -K %s tx off >/dev/null", W.ns_b, W.if_b))
		return -1;
	char path[64];
	snprintf(path, sizeof(path), "/run/netns/%s", W.ns_a);
	if ((W.home_fd = open("/proc/thread-self/ns/net", O_RDONLY)) < 0 ||
	    (fd = open(path, O_RDONLY)) < 0)
		return -1;
	int ret = setns(fd, CLONE_NEWNET);
	close(fd);
	return ret;
}

/* The outside tools the rig runs, checked up front: a missing one fails the group with one
 * line naming its Debian package, instead of tests failing deep inside. */
static int tools_present(void)
{
	static const char *const need[][2] = {
		{ "ip", "iproute2" }, { "ethtool", "ethtool" }, { "ping", "iputils-ping" },
		{ "python3", "python3" }, { "sysctl", "procps" },
	};
	int ok = 1;

	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (sh("command -v %s >/dev/null", need[i][0])) {
			fprintf(stderr, "test_af_xdp: needs %s (Debian package %s): run "
				"scripts/bootstrap as root\n", need[i][0], need[i][1]);
			ok = 0;
		}
	return ok;
}

static int group_setup(void **state)
{
	(void)state;
	if (geteuid() != 0)
		return 0;  /* every test skips */
	if (!tools_present())
		return -1;
	remove_leftovers();
	fp_log_set_sink(log_capture);
	W.ready = topo_up() == 0;
	if (!W.ready)
		fprintf(stderr, "test_af_xdp: could not build the netns/veth topology\n");
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (W.home_fd >= 0) {
		setns(W.home_fd, CLONE_NEWNET);
		close(W.home_fd);
	}
	if (W.ns_a[0])
		sh("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", W.ns_a, W.ns_b);
	fp_log_set_sink(NULL);
	return 0;
}

static struct fp_xdp_config xcfg(enum fp_xdp_mode mode)
{
	return (struct fp_xdp_config){ .ifname = W.if_a, .ipv4 = FP_IP, .mode = mode };
}

/* How `ip link` shows the interface's XDP program: "xdp" (native), "xdpgeneric" (skb) or
 * NULL when there is none. */
static const char *xdp_attached(void)
{
	char cmd[128], out[512];

	snprintf(cmd, sizeof(cmd), "ip -n %s -o link show %s", W.ns_a, W.if_a);
	sh_read(out, sizeof(out), cmd);
	return strstr(out, " xdpgeneric ") ? "xdpgeneric" : strstr(out, " xdp ") ? "xdp" : NULL;
}

/* ---- errors ---- */

static void open_missing_interface(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_AUTO);
	char err[256] = "";

	(void)state;
	if (!W.ready)
		skip();
	c.ifname = "fpx-nope0";
	assert_null(fp_xdp_open(&c, err, sizeof(err)));
	assert_int_equal(errno, ENODEV);
	assert_non_null(strstr(err, "'fpx-nope0'"));
}

static void queue_out_of_range(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_AUTO);
	char err[256] = "";
	struct fp_xdp *x;

	(void)state;
	if (!W.ready)
		skip();
	assert_non_null(x = fp_xdp_open(&c, err, sizeof(err)));
	assert_int_equal(fp_xdp_queues(x), 1);  /* a veth made without numtxqueues/numrxqueues */
	assert_null(fp_xdp_queue_open(x, 1, err, sizeof(err)));
	assert_int_equal(errno, ERANGE);
	assert_non_null(strstr(err, "queue 1 out of range"));
	assert_non_null(strstr(err, "has 1 queues"));
	fp_xdp_close(x);
	assert_null(xdp_attached());
}

/* A bridge has no native XDP: the line names the mode to use instead. */
static void native_refused(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_NATIVE);
	char err[256] = "", br[IF_NAMESIZE];

	(void)state;
	if (!W.ready)
		skip();
	snprintf(br, sizeof(br), "fpxr%d", getpid());
	assert_int_equal(sh("ip -n %s link add %s type bridge", W.ns_a, br), 0);
	c.ifname = br;
	assert_null(fp_xdp_open(&c, err, sizeof(err)));
	sh("ip -n %s link del %s", W.ns_a, br);
	assert_int_equal(errno, EOPNOTSUPP);
	assert_non_null(strstr(err, "XDP native attach to fpxr"));
	assert_non_null(strstr(err, "try --xdp-mode skb"));
}

/* Dropping to nobody clears every capability: EPERM and the line that says what to do. */
static void open_unprivileged(void **state)
{
	int status;
	pid_t p;

	(void)state;
	if (!W.ready)
		skip();
	if ((p = fork()) == 0) {
		struct fp_xdp_config c = xcfg(FP_XDP_AUTO);
		char err[256] = "";
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(10);
		if (fp_xdp_open(&c, err, sizeof(err)))
			_exit(11);
		_exit(errno != EPERM ? 12 : !strstr(err, "CAP_NET_ADMIN") ? 13 :
		      !strstr(err, "--net kernel") ? 14 : 0);
	}
	assert_int_equal(waitpid(p, &status, 0), p);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A filter left by a run that died is replaced; a live one's, or another program, is not. */
static void attach_stale_live_foreign(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_AUTO);
	char err[256] = "";
	struct fp_xdp *x;
	int status;
	pid_t p;

	(void)state;
	if (!W.ready)
		skip();
	if ((p = fork()) == 0)
		_exit(fp_xdp_open(&c, err, sizeof(err)) ? 0 : 1);  /* "crashes" holding it */
	assert_int_equal(waitpid(p, &status, 0), p);
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_non_null(xdp_attached());
	W.log[0] = '\0';
	assert_non_null(x = fp_xdp_open(&c, err, sizeof(err)));
	assert_non_null(strstr(W.log, "removed the filter left by pid"));

	assert_null(fp_xdp_open(&c, err, sizeof(err)));  /* we are alive: refused */
	assert_int_equal(errno, EBUSY);
	assert_non_null(strstr(err, "already holds"));
	fp_xdp_close(x);
	assert_null(xdp_attached());

	/* someone else's program: r0 = XDP_PASS; exit */
	struct bpf_insn pass[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = XDP_PASS },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int ifindex = (int)if_nametoindex(W.if_a);
	int fd = bpf_prog_load(BPF_PROG_TYPE_XDP, "other", "GPL", pass, 2, NULL);
	assert_true(fd >= 0);
	assert_int_equal(bpf_xdp_attach(ifindex, fd, XDP_FLAGS_SKB_MODE, NULL), 0);
	assert_null(fp_xdp_open(&c, err, sizeof(err)));
	assert_int_equal(errno, EBUSY);
	assert_non_null(strstr(err, "already has an XDP program (other)"));
	assert_non_null(strstr(err, "xdpgeneric off"));
	assert_int_equal(bpf_xdp_detach(ifindex, XDP_FLAGS_SKB_MODE, NULL), 0);
	close(fd);
}

/* ---- flowplane's stack on the device, driven by the canonical loop ---- */

struct rig {
	struct fp_xdp *x;
	struct fp_devq *q;
	struct fp_stack *st;
	char udp[256];             /* last datagram the stack delivered */
	unsigned udp_n;
	uint64_t tcp_bytes, tcp_bad;  /* the bulk stream: bytes in, bytes not as sent */
};

static void rig_up(struct rig *r, const struct fp_xdp_config *c)
{
	char err[256] = "";

	W.log[0] = '\0';
	r->x = fp_xdp_open(c, err, sizeof(err));
	if (!r->x)
		fail_msg("fp_xdp_open: %s", err);
	r->q = fp_xdp_queue_open(r->x, 0, err, sizeof(err));
	if (!r->q)
		fail_msg("fp_xdp_queue_open: %s", err);
	struct fp_stack_config sc = { .mac = r->q->mac, .ipv4 = FP_IP, .prefix_len = 24,
				      .mtu = r->q->mtu, .cache = &r->q->cache };
	assert_non_null(r->st = fp_stack_create(&sc, now_us()));
	assert_int_equal(fp_udp_bind(r->st, 9000, 1), 0);
	assert_int_equal(fp_tcp_listen(r->st, 9100, 2), 0);
}

/* The bulk stream's bytes are i % 251 at stream offset i (a pattern with no power-of-2
 * period, so a lost, repeated or misplaced segment shows). */
static void tcp_recv(struct rig *r, const struct fp_event *e)
{
	uint8_t tmp[512];

	for (uint32_t off = 0; off < e->len; off += sizeof(tmp)) {
		uint32_t n = fp_mbuf_read(e->m, off, tmp, e->len - off < sizeof(tmp) ?
					  e->len - off : sizeof(tmp));
		for (uint32_t i = 0; i < n; i++)
			r->tcp_bad += tmp[i] != (r->tcp_bytes + i) % 251;
		r->tcp_bytes += n;
	}
	fp_tcp_recv_done(r->st, e->conn, e->len);
}

/* At the peer's FIN, answer with what arrived and close. */
static void tcp_eof(struct rig *r, struct fp_tcp_conn *c)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "bytes=%llu bad=%llu",
			 (unsigned long long)r->tcp_bytes, (unsigned long long)r->tcp_bad);

	assert_int_equal(fp_tcp_send(r->st, c, line, (size_t)n), n);
	fp_tcp_close(r->st, c);
}

static void handle_event(struct rig *r, const struct fp_event *e)
{
	switch (e->type) {
	case FP_EV_UDP_RECV: {
		uint32_t len = e->len < sizeof(r->udp) - 1 ? e->len : sizeof(r->udp) - 1;
		memcpy(r->udp, fp_mbuf_data(e->m), len);
		r->udp[len] = '\0';
		r->udp_n++;
		fp_stack_free(r->st, e->m);
		break;
	}
	case FP_EV_TCP_RECV:
		tcp_recv(r, e);
		break;
	case FP_EV_TCP_EOF:
		tcp_eof(r, e->conn);
		break;
	case FP_EV_TCP_DEAD:
		fp_tcp_close(r->st, e->conn);
		break;
	default:
		break;
	}
}

/* One round of the loop: receive, timers, events, transmit (freeing what tx refused),
 * reclaim; then sleep on the socket for up to a millisecond. */
static void pump(struct rig *r)
{
	struct fp_mbuf *b[BURST];
	struct fp_event ev[16];
	struct fp_devq *q = r->q;
	unsigned n, k;

	if ((n = q->ops->rx_burst(q, b, BURST)))
		fp_stack_input(r->st, b, n, now_us());
	fp_stack_poll(r->st, now_us());
	while ((n = fp_stack_events(r->st, ev, 16)))
		for (unsigned i = 0; i < n; i++)
			handle_event(r, &ev[i]);
	while ((n = fp_stack_tx(r->st, b, BURST))) {
		k = q->ops->tx_burst(q, b, n);
		for (unsigned i = k; i < n; i++)
			fp_mbuf_free(&q->cache, b[i]);
	}
	q->ops->reclaim(q);
	struct pollfd pfd = { .fd = q->ops->wait_fd(q), .events = POLLIN };
	if (!q->ops->rx_ready(q))
		poll(&pfd, 1, 1);
}

/* Pump until every child has exited (or WAIT_MS); returns how many exited 0. */
static unsigned pump_until_exit(struct rig *r, pid_t *kids, unsigned n)
{
	uint64_t deadline = now_us() + WAIT_MS * 1000ull;
	unsigned left = n, ok = 0;
	int status;

	while (left && now_us() < deadline) {
		pump(r);
		for (unsigned i = 0; i < n; i++)
			if (kids[i] > 0 && waitpid(kids[i], &status, WNOHANG) == kids[i]) {
				ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
				kids[i] = 0;
				left--;
			}
	}
	for (unsigned i = 0; i < n; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], &status, 0);
		}
	return ok;
}

/* Start a UDP listener on the peer; returns its pid, *out_fd its stdout (after "ready"). */
static pid_t peer_listen(uint16_t port, int *out_fd)
{
	char cmd[512], ready[8] = "";
	size_t got = 0;
	int pfd[2];

	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	snprintf(cmd, sizeof(cmd), "exec ip netns exec %s python3 -c 'import socket,sys\n"
		 "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((\"10.77.0.2\",%u))\n"
		 "s.settimeout(8); print(\"ready\",flush=True); d,a=s.recvfrom(512)\n"
		 "print(a[0], d.decode(), flush=True)'", W.ns_b, port);
	pid_t p = spawn(pfd[1], cmd);
	close(pfd[1]);
	while (got < 6 && read(pfd[0], ready + got, 1) == 1 && ready[got] != '\n')
		got++;
	W.listener = p;  /* killed by the teardown if the test fails before reaping it */
	if (strncmp(ready, "ready", 5))
		fail_msg("the peer's UDP listener did not start");
	*out_fd = pfd[0];
	return p;
}

/* Our stack sends first, so it must resolve the peer (its ARP request, the peer's reply
 * steered back to us), and the datagram it builds in the UMEM goes out without a copy. */
static void arp_from_us_and_udp_out(struct rig *r)
{
	char got[256] = "";
	int fd;
	pid_t kid = peer_listen(9001, &fd);

	assert_int_equal(fp_udp_send(r->st, 5555, PEER_IP, 9001, "from-flowplane", 14), 0);
	assert_int_equal(pump_until_exit(r, &kid, 1), 1);
	W.listener = 0;
	assert_true(read(fd, got, sizeof(got) - 1) > 0);
	close(fd);
	assert_non_null(strstr(got, "10.77.0.1 from-flowplane"));

	struct fp_net_stats ns;
	fp_stack_stats(r->st, &ns);
	assert_true(ns.arp_req_tx >= 1 && ns.arp_reply_rx >= 1);
}

/* The peer pings flowplane's address and Linux's address on the same interface at once;
 * then sends a datagram whose checksums the stack verifies. */
static void ping_both_and_udp_in(struct rig *r)
{
	char cmd[256], out[256], mac[24];
	pid_t kids[3];

	snprintf(cmd, sizeof(cmd), "ip netns exec %s ping -c 3 -i 0.2 -W 1 10.77.0.1", W.ns_b);
	kids[0] = spawn(-1, cmd);
	snprintf(cmd, sizeof(cmd), "ip netns exec %s ping -c 3 -i 0.2 -W 1 10.77.0.3", W.ns_b);
	kids[1] = spawn(-1, cmd);
	snprintf(cmd, sizeof(cmd), "ip netns exec %s python3 -c 'import socket\n"
		 "socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b\"to-flowplane\","
		 "(\"10.77.0.1\",9000))'", W.ns_b);
	kids[2] = spawn(-1, cmd);
	assert_int_equal(pump_until_exit(r, kids, 3), 3);
	for (int i = 0; i < 100 && !r->udp_n; i++)
		pump(r);
	struct fp_net_stats ns;
	fp_stack_stats(r->st, &ns);
	assert_int_equal(ns.udp_bad_csum, 0);  /* the peer's tx checksum offload is off */
	assert_string_equal(r->udp, "to-flowplane");
	assert_true(ns.icmp_echo_tx >= 3);

	/* ARP the other way: the peer learnt our MAC from our replies */
	mac_str(&r->q->mac, mac);
	snprintf(cmd, sizeof(cmd), "ip -n %s neigh show 10.77.0.1", W.ns_b);
	sh_read(out, sizeof(out), cmd);
	assert_non_null(strstr(out, mac));
}

/* Linux streams 4 MiB into flowplane's TCP: more frames than the fill ring holds, so
 * receive buffers are recycled through the stack and refilled many times over. */
static void tcp_bulk_in(struct rig *r)
{
	char cmd[768], got[128] = "";
	int pfd[2];

	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	snprintf(cmd, sizeof(cmd), "exec ip netns exec %s python3 -c 'import socket\n"
		 "n=%u; d=bytes(i %% 251 for i in range(n))\n"
		 "s=socket.create_connection((\"10.77.0.1\",9100),5); s.settimeout(20)\n"
		 "s.sendall(d); s.shutdown(socket.SHUT_WR); r=b\"\"\n"
		 "while True:\n c=s.recv(100)\n if not c: break\n r+=c\n"
		 "print(r.decode(), flush=True)'", W.ns_b, TCP_BULK_BYTES);
	pid_t kid = spawn(pfd[1], cmd);
	close(pfd[1]);
	W.listener = kid;
	assert_int_equal(pump_until_exit(r, &kid, 1), 1);
	W.listener = 0;
	assert_true(read(pfd[0], got, sizeof(got) - 1) > 0);
	close(pfd[0]);
	char want[64];
	snprintf(want, sizeof(want), "bytes=%u bad=0", TCP_BULK_BYTES);
	assert_non_null(strstr(got, want));
	/* the loop gives every buffer back: only the posted receive buffers are out */
	for (int i = 0; i < 200; i++)
		pump(r);
	assert_true(fp_pool_in_use(r->q->pool) <= 2048 + 64);
}

/* A frame from another pool, chained: tx_burst copies it into the UMEM. */
static void tx_foreign_chain(struct rig *r)
{
	struct fp_pool_params pp = { .name = "foreign", .n_bufs = 8, .buf_size = 2048 };
	struct fp_pool *pool = fp_pool_create(&pp);
	struct fp_pool_cache cache;
	uint8_t f[128];
	char cmd[160], peer[64] = "", got[256] = "";
	struct fp_eth_addr dst;
	int fd;

	snprintf(cmd, sizeof(cmd), "ip -n %s -br link show dev %s | awk '{print $3}'", W.ns_b,
		 W.if_b);
	sh_read(peer, sizeof(peer), cmd);
	assert_int_equal(sscanf(peer, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &dst.b[0], &dst.b[1],
				&dst.b[2], &dst.b[3], &dst.b[4], &dst.b[5]), 6);
	size_t l2 = fp_eth_emit(f, sizeof(f), &dst, &r->q->mac, FP_ETH_TYPE_IPV4);
	struct fp_ipv4 ip = { .src = FP_IP, .dst = PEER_IP, .proto = FP_IPPROTO_UDP, .ttl = 64 };
	size_t l3 = fp_ipv4_emit(f + l2, sizeof(f) - l2, &ip, FP_UDP_HDR_LEN + 7);
	memcpy(f + l2 + l3 + FP_UDP_HDR_LEN, "chained", 7);
	fp_udp_emit(f + l2 + l3, FP_UDP_HDR_LEN + 7, FP_IP, PEER_IP, 5556, 9002);
	size_t len = l2 + l3 + FP_UDP_HDR_LEN + 7;

	assert_non_null(pool);
	assert_int_equal(fp_pool_cache_init(&cache, pool), 0);
	struct fp_mbuf *a = fp_pool_get(&cache), *b = fp_pool_get(&cache);
	memcpy(fp_mbuf_append(a, 20), f, 20);
	memcpy(fp_mbuf_append(b, (uint32_t)len - 20), f + 20, len - 20);
	assert_int_equal(fp_mbuf_chain(a, b), 0);

	pid_t kid = peer_listen(9002, &fd);
	assert_int_equal(r->q->ops->tx_burst(r->q, &a, 1), 1);
	assert_int_equal(pump_until_exit(r, &kid, 1), 1);
	W.listener = 0;
	assert_true(read(fd, got, sizeof(got) - 1) > 0);
	close(fd);
	assert_non_null(strstr(got, "10.77.0.1 chained"));
	fp_pool_cache_flush(&cache);
	assert_int_equal(fp_pool_in_use(pool), 0);  /* the device freed the original */
	fp_pool_destroy(pool);
}

/* Close returns every buffer (close warns and leaks the UMEM otherwise) and detaches. */
static void rig_down(struct rig *r)
{
	struct fp_dev_stats ds;

	r->q->ops->stats(r->q, &ds);
	print_message("    %s: native %d zerocopy %d; rx %llu tx %llu, tx kicks %llu, "
		      "rx kicks %llu, dropped %llu, invalid %llu, tx_full %llu\n",
		      r->q->ops->name, r->q->native,
		      r->q->zerocopy, (unsigned long long)ds.rx_frames,
		      (unsigned long long)ds.tx_frames, (unsigned long long)ds.tx_wakeups,
		      (unsigned long long)ds.rx_wakeups, (unsigned long long)ds.rx_dropped,
		      (unsigned long long)ds.invalid_descs, (unsigned long long)ds.tx_full);
	assert_true(ds.rx_frames >= 5 && ds.tx_frames >= 7);  /* see the steps above */
	assert_int_equal(ds.invalid_descs, 0);
	fp_stack_destroy(r->st);
	r->st = NULL;
	W.log[0] = '\0';
	r->q->ops->close(r->q);
	r->q = NULL;
	assert_null(strstr(W.log, "still out"));
	fp_xdp_close(r->x);
	r->x = NULL;
	assert_null(strstr(W.log, "af_xdp"));
	assert_null(xdp_attached());
}

static int rig_setup(void **state)
{
	*state = calloc(1, sizeof(struct rig));
	return *state ? 0 : -1;
}

/* Whatever a failed test left open is closed, so the next test finds the interface free. */
static int rig_teardown(void **state)
{
	struct rig *r = *state;

	if (W.listener > 0) {
		kill(W.listener, SIGKILL);
		waitpid(W.listener, NULL, 0);
		W.listener = 0;
	}
	if (r->st)
		fp_stack_destroy(r->st);
	if (r->q)
		r->q->ops->close(r->q);
	fp_xdp_close(r->x);
	free(r);
	return 0;
}

static void run_mode(struct rig *r, struct fp_xdp_config c)
{
	if (!W.ready)
		skip();
	rig_up(r, &c);
	assert_int_equal(r->q->native, c.mode != FP_XDP_SKB);
	assert_false(r->q->zerocopy);  /* veth has no zero-copy AF_XDP */
	assert_string_equal(xdp_attached(), c.mode == FP_XDP_SKB ? "xdpgeneric" : "xdp");
	arp_from_us_and_udp_out(r);
	ping_both_and_udp_in(r);
	tx_foreign_chain(r);
	tcp_bulk_in(r);
	rig_down(r);
}

static void native_mode(void **state) { run_mode(*state, xcfg(FP_XDP_AUTO)); }
static void skb_mode(void **state) { run_mode(*state, xcfg(FP_XDP_SKB)); }

/* Without need_wakeup every transmit is kicked; nothing else changes. */
static void native_no_need_wakeup(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_NATIVE);

	c.no_need_wakeup = true;
	run_mode(*state, c);
}

/* Asking for zero-copy where the driver has none fails at the queue, with a clear line. */
static void zerocopy_refused_on_veth(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_AUTO);
	char err[256] = "";
	struct fp_xdp *x;

	(void)state;
	if (!W.ready)
		skip();
	c.force_zerocopy = true;
	assert_non_null(x = fp_xdp_open(&c, err, sizeof(err)));
	assert_null(fp_xdp_queue_open(x, 0, err, sizeof(err)));
	print_message("    %s\n", err);
	assert_non_null(strstr(err, "zero-copy socket on"));
	fp_xdp_close(x);
	assert_null(xdp_attached());
}

/* A buffer the application never gave back: close must not unmap the UMEM under it. */
static struct fp_mbuf *kept;  /* reachable, so LeakSanitizer leaves the leaked pool be */

static void close_with_buffer_out(void **state)
{
	struct fp_xdp_config c = xcfg(FP_XDP_SKB);
	char err[256] = "";
	struct fp_xdp *x;
	struct fp_devq *q;

	(void)state;
	if (!W.ready)
		skip();
	assert_non_null(x = fp_xdp_open(&c, err, sizeof(err)));
	assert_non_null(q = fp_xdp_queue_open(x, 0, err, sizeof(err)));
	assert_non_null(kept = fp_pool_get(&q->cache));
	W.log[0] = '\0';
	q->ops->close(q);
	assert_non_null(strstr(W.log, "1 buffers still out"));
	fp_xdp_close(x);

	/* give it back by hand so the run ends clean */
	struct fp_pool *pool = kept->pool;
	struct fp_pool_cache cache;
	assert_int_equal(fp_pool_cache_init(&cache, pool), 0);
	fp_mbuf_free(&cache, kept);
	fp_pool_cache_flush(&cache);
	assert_int_equal(fp_pool_in_use(pool), 0);
	void *area = pool->data;
	size_t len = (size_t)pool->n_bufs * pool->buf_size;
	fp_pool_destroy(pool);
	munmap(area, len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(open_missing_interface),
		cmocka_unit_test(queue_out_of_range),
		cmocka_unit_test(native_refused),
		cmocka_unit_test(open_unprivileged),
		cmocka_unit_test(attach_stale_live_foreign),
		cmocka_unit_test_setup_teardown(native_mode, rig_setup, rig_teardown),
		cmocka_unit_test_setup_teardown(skb_mode, rig_setup, rig_teardown),
		cmocka_unit_test_setup_teardown(native_no_need_wakeup, rig_setup, rig_teardown),
		cmocka_unit_test(zerocopy_refused_on_veth),
		cmocka_unit_test(close_with_buffer_out),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
