/* fuzz_stack.c: the whole receive path: fuzzed frames into a stack with open connections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/net.h>
#include <flowplane/pool.h>
#include <flowplane/wire.h>

/*
 * Each input sets up a fresh stack (so a crash replays from its input alone) with a UDP
 * port, a TCP listener and NCONN connections established by a scripted handshake from a
 * fake peer, then reads records from the input:
 *
 *   op 0  a raw frame: the bytes as they come (Ethernet and up, checksums and all wrong)
 *   op 1  a TCP segment on connection k, built relative to its current sequence numbers:
 *         fuzzed flags, sequence/ack offsets, window, options bytes and payload, with the
 *         lengths and checksums right so it gets past the parsers into the state machine
 *   op 2  a frame from the peer with one IPv4 or TCP header byte overwritten after the
 *         checksums were computed (bad checksums, bad lengths)
 *   op 3  advance time (fires retransmit, delayed ACK, persist, keep-alive, TIME_WAIT)
 *   op 4  an application action: send, recv_done, shutdown, close, abort, dial
 *
 * After every record the harness drains frames and events (releasing received data and
 * dead connections as an application would) and tracks the peer's view of each
 * connection from the segments the stack sends. At the end it destroys the stack and
 * aborts if a single buffer is still out of the pool: a leak on any path is a crash.
 */

#define CHECK(x) do { if (!(x)) abort(); } while (0)
#define NCONN 4
#define MY_IP   0x0a000001u
#define PEER_IP 0x0a000002u
#define PORT    80
#define UDP_PORT 53

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct fp_eth_addr my_mac = {{0x02, 0, 0, 0, 0, 1}};
static const struct fp_eth_addr peer_mac = {{0x02, 0, 0, 0, 0, 2}};

struct peer_conn {
	struct fp_tcp_conn *c;   /* the stack's handle once accepted, NULL before/after */
	uint16_t port;           /* the peer's port */
	uint32_t snd_nxt;        /* next sequence number the peer sends */
	uint32_t rcv_nxt;        /* what the peer acknowledges */
};

struct fz {
	struct fp_pool *pool;
	struct fp_pool_cache *cache;
	struct fp_stack *st;
	uint64_t now;
	struct peer_conn pc[NCONN];
	const uint8_t *in;
	size_t left;
};

static uint8_t take8(struct fz *f)
{
	if (!f->left)
		return 0;
	f->left--;
	return *f->in++;
}

static uint32_t take32(struct fz *f)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 8 | take8(f);
	return v;
}

static void feed(struct fz *f, const uint8_t *frame, size_t len)
{
	struct fp_mbuf *m = fp_pool_get(f->cache);
	if (!m)
		return;
	if (len > fp_mbuf_tailroom(m))
		len = fp_mbuf_tailroom(m);
	memcpy(fp_mbuf_append(m, (uint32_t)len), frame, len);
	fp_stack_input(f->st, &m, 1, f->now);
}

/* Build Ethernet + IPv4 + TCP from the peer, checksums right. Returns the frame length. */
static size_t build_tcp(uint8_t *buf, size_t cap, const struct fp_tcp *t, const uint8_t *pay,
			size_t plen)
{
	uint8_t *l4 = buf + FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN;
	size_t hl = fp_tcp_emit(l4, cap - FP_ETH_HDR_LEN - FP_IPV4_HDR_LEN, t);
	if (!hl || FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + hl + plen > cap)
		return 0;
	if (plen)
		memcpy(l4 + hl, pay, plen);
	fp_tcp_set_csum(l4, fp_csum_partial(l4, hl + plen, 0), PEER_IP, MY_IP, hl + plen);
	struct fp_ipv4 ip = { .src = PEER_IP, .dst = MY_IP, .ttl = 64, .proto = FP_IPPROTO_TCP,
			      .frag = FP_IPV4_FLAG_DF };
	fp_ipv4_emit(buf + FP_ETH_HDR_LEN, FP_IPV4_HDR_LEN, &ip, hl + plen);
	fp_eth_emit(buf, FP_ETH_HDR_LEN, &my_mac, &peer_mac, FP_ETH_TYPE_IPV4);
	return FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + hl + plen;
}

static struct peer_conn *conn_by_port(struct fz *f, uint16_t port)
{
	for (int i = 0; i < NCONN; i++)
		if (f->pc[i].port == port)
			return &f->pc[i];
	return NULL;
}

/* The peer reads what the stack sent: it learns the stack's sequence numbers and ACKs. */
static void drain_tx(struct fz *f)
{
	struct fp_mbuf *out[32];
	unsigned n;

	while ((n = fp_stack_tx(f->st, out, 32)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			const uint8_t *p = fp_mbuf_data(out[i]);
			size_t len = out[i]->data_len;
			struct fp_eth eth;
			struct fp_ipv4 ip;
			struct fp_tcp t;
			CHECK(out[i]->nb_segs == 1 && len == out[i]->pkt_len);
			if (fp_eth_parse(p, len, &eth) == 0 && eth.type == FP_ETH_TYPE_IPV4 &&
			    fp_ipv4_parse(p + eth.hdr_len, len - eth.hdr_len, true, &ip) == 0 &&
			    ip.proto == FP_IPPROTO_TCP) {
				/* Everything the stack emits must parse with a valid checksum. */
				const uint8_t *l4 = p + eth.hdr_len + ip.hdr_len;
				CHECK(fp_tcp_parse(l4, fp_ipv4_payload_len(&ip), ip.src, ip.dst,
						   true, &t) == 0);
				struct peer_conn *pc = conn_by_port(f, t.dport);
				uint32_t dlen = fp_ipv4_payload_len(&ip) - t.hdr_len;
				if (pc && !(t.flags & FP_TCP_RST)) {
					uint32_t end = t.seq + dlen + !!(t.flags & FP_TCP_SYN) +
						       !!(t.flags & FP_TCP_FIN);
					if ((int32_t)(end - pc->rcv_nxt) > 0)
						pc->rcv_nxt = end;
				}
			}
			fp_stack_free(f->st, out[i]);
		}
	}
}

/* The application: keep every connection; release data; release dead connections. */
static void drain_events(struct fz *f)
{
	struct fp_event ev[32];
	unsigned n;

	while ((n = fp_stack_events(f->st, ev, 32)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			struct fp_event *e = &ev[i];
			struct peer_conn *pc = NULL;
			for (int k = 0; k < NCONN; k++)
				if (f->pc[k].c == e->conn && e->conn)
					pc = &f->pc[k];
			switch (e->type) {
			case FP_EV_TCP_ACCEPTED:
				pc = conn_by_port(f, e->rport);
				if (pc && !pc->c)
					pc->c = e->conn;
				else
					fp_tcp_close(f->st, e->conn);
				break;
			case FP_EV_TCP_RECV:
				/* Leave some data held so zero-window and held-buffer paths run. */
				if (e->len & 1)
					fp_tcp_recv_done(f->st, e->conn, e->len);
				break;
			case FP_EV_TCP_DEAD:
				if (pc)
					pc->c = NULL;
				fp_tcp_close(f->st, e->conn);
				break;
			case FP_EV_TCP_CONNECTED:
				if (e->status != 0)
					fp_tcp_close(f->st, e->conn);
				break;
			case FP_EV_UDP_RECV:
				fp_stack_free(f->st, e->m);
				break;
			default:
				break;
			}
		}
	}
}

static void settle(struct fz *f)
{
	drain_events(f);
	drain_tx(f);
}

static void tcp_from_peer(struct fz *f, struct peer_conn *pc, uint8_t flags, uint32_t seq,
			  uint32_t ack, uint16_t wnd, const uint8_t *pay, size_t plen,
			  const struct fp_tcp_opts *opt)
{
	uint8_t frame[2048];
	struct fp_tcp t = { .sport = pc->port, .dport = PORT, .seq = seq, .ack = ack,
			    .flags = flags, .wnd = wnd };
	if (opt)
		t.opt = *opt;
	size_t len = build_tcp(frame, sizeof(frame), &t, pay, plen);
	if (len)
		feed(f, frame, len);
}

static int setup(struct fz *f)
{
	/* One pool for the whole run (every input must return all of it); creating 1 MiB of
	 * buffers per input would dominate the execution rate. */
	static struct fp_pool *pool;
	static struct fp_pool_cache cache;
	if (!pool) {
		struct fp_pool_params p = { .name = "fuzz", .n_bufs = 512, .buf_size = 2048 };
		pool = fp_pool_create(&p);
	}
	/* The cache is attached per input: the teardown's flush detaches it. */
	if (!pool || fp_pool_cache_init(&cache, pool))
		return -1;
	f->pool = pool;
	f->cache = &cache;
	struct fp_stack_config cfg = {
		.mac = my_mac, .ipv4 = MY_IP, .prefix_len = 24, .cache = f->cache,
		.max_conns = 16, .syn_backlog = 2, .rcv_buf = 8192, .secret = 7,
		.time_wait_us = 100000, .delack_us = 200,
	};
	f->st = fp_stack_create(&cfg, 0);
	if (!f->st)
		return -1;
	CHECK(fp_tcp_listen(f->st, PORT, 1) == 0);
	CHECK(fp_udp_bind(f->st, UDP_PORT, 2) == 0);

	/* ARP: a request from the peer for us teaches the stack the peer's MAC. */
	uint8_t frame[64] = { 0 };
	struct fp_arp a = { .op = FP_ARP_OP_REQUEST, .sha = peer_mac, .spa = PEER_IP, .tpa = MY_IP };
	fp_eth_emit(frame, sizeof(frame), &FP_ETH_BROADCAST, &peer_mac, FP_ETH_TYPE_ARP);
	fp_arp_emit(frame + FP_ETH_HDR_LEN, sizeof(frame) - FP_ETH_HDR_LEN, &a);
	feed(f, frame, FP_ETH_MIN_FRAME);
	settle(f);

	/* Three-way handshakes: SYN with every option, read the SYN-ACK, ACK it. */
	for (int i = 0; i < NCONN; i++) {
		struct peer_conn *pc = &f->pc[i];
		struct fp_tcp_opts o = { .has_mss = 1, .mss = 1460, .has_wscale = 1, .wscale = 7,
					 .sack_ok = 1, .has_ts = 1, .ts_val = 1000 };
		pc->port = (uint16_t)(40000 + i);
		/* Connection 0's sequence numbers wrap around 2^32 early on. */
		pc->snd_nxt = i == 0 ? 0xffffff00u : 100000u * (uint32_t)i;
		tcp_from_peer(f, pc, FP_TCP_SYN, pc->snd_nxt, 0, 65535, NULL, 0, &o);
		pc->snd_nxt++;
		settle(f);
		f->now += 10;
		o = (struct fp_tcp_opts){ .has_ts = 1, .ts_val = 1001 };
		tcp_from_peer(f, pc, FP_TCP_ACK, pc->snd_nxt, pc->rcv_nxt, 512, NULL, 0, &o);
		settle(f);
	}
	return 0;
}

static void op_segment(struct fz *f, bool corrupt)
{
	struct peer_conn *pc = &f->pc[take8(f) % NCONN];
	uint8_t flags = take8(f);
	int32_t dseq = (int8_t)take8(f) * (int32_t)(1 + (take8(f) & 0x3f) * 64);
	int32_t dack = (int8_t)take8(f) * (int32_t)(1 + (take8(f) & 0x3f));
	uint16_t wnd = (uint16_t)(take8(f) << 8 | take8(f));
	uint8_t optsel = take8(f);
	size_t plen = take8(f) % 64 * (take8(f) % 24 + 1);
	struct fp_tcp_opts o = { 0 };
	uint8_t pay[1600];

	if (plen > sizeof(pay))
		plen = sizeof(pay);
	for (size_t i = 0; i < plen; i++)
		pay[i] = (uint8_t)(i + optsel);
	if (optsel & 1) {
		o.has_ts = 1;
		o.ts_val = take32(f);
		o.ts_ecr = take32(f);
	}
	if (optsel & 2) {
		o.n_sack = (uint8_t)(1 + (optsel >> 6) % 3);
		for (int i = 0; i < o.n_sack; i++) {
			o.sack[i].left = pc->rcv_nxt - (uint32_t)(take8(f) * 16);
			o.sack[i].right = o.sack[i].left + (uint32_t)(take8(f) * 16);
		}
	}
	if (optsel & 4) {
		o.has_mss = 1;
		o.mss = (uint16_t)take32(f);
	}
	uint32_t seq = pc->snd_nxt + (uint32_t)dseq, ack = pc->rcv_nxt + (uint32_t)dack;
	if (!corrupt) {
		tcp_from_peer(f, pc, flags, seq, ack, wnd, pay, plen, &o);
		if (dseq == 0 && !(flags & FP_TCP_RST))
			pc->snd_nxt += (uint32_t)plen + !!(flags & FP_TCP_SYN) + !!(flags & FP_TCP_FIN);
		return;
	}
	uint8_t frame[2048];
	struct fp_tcp t = { .sport = pc->port, .dport = PORT, .seq = seq, .ack = ack,
			    .flags = flags, .wnd = wnd, .opt = o };
	size_t len = build_tcp(frame, sizeof(frame), &t, pay, plen);
	if (!len)
		return;
	size_t at = FP_ETH_HDR_LEN + take8(f) % (FP_IPV4_HDR_LEN + FP_TCP_HDR_LEN);
	frame[at] = take8(f);
	feed(f, frame, len - take8(f) % 4);
}

static void op_app(struct fz *f)
{
	uint8_t what = take8(f);
	struct peer_conn *pc = &f->pc[(what >> 4) % NCONN];
	static const uint8_t junk[255 * 12];

	if (!pc->c && (what & 7) != 5)
		return;
	switch (what & 7) {
	case 0:
	case 1:
		(void)fp_tcp_send(f->st, pc->c, junk, (size_t)take8(f) * 12);
		break;
	case 2:
		fp_tcp_recv_done(f->st, pc->c, take8(f));
		break;
	case 3:
		(void)fp_tcp_shutdown(f->st, pc->c);
		break;
	case 4:
		fp_tcp_close(f->st, pc->c);
		pc->c = NULL;
		break;
	case 5: {
		int err = 0;
		struct fp_tcp_conn *c = fp_tcp_dial(f->st, PEER_IP, 9, 0, &err);
		if (c && (what & 8))
			fp_tcp_abort(f->st, c);
		break;
	}
	case 6:
		(void)fp_tcp_keepalive(f->st, pc->c, 1000, 500, 2);
		break;
	default:
		fp_tcp_abort(f->st, pc->c);
		pc->c = NULL;
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { .in = data, .left = size };

	if (setup(&f) != 0) {
		perror("fuzz_stack: setup");
		abort();
	}
	while (f.left) {
		uint8_t op = take8(&f) % 5;
		switch (op) {
		case 0: {
			size_t len = take8(&f) * 8u + take8(&f) % 8;
			if (len > f.left)
				len = f.left;
			feed(&f, f.in, len);
			f.in += len;
			f.left -= len;
			break;
		}
		case 1:
		case 2:
			op_segment(&f, op == 2);
			break;
		case 3:
			f.now += (uint64_t)take8(&f) * (take8(&f) & 1 ? 10000 : 50);
			fp_stack_poll(f.st, f.now);
			break;
		default:
			op_app(&f);
			break;
		}
		settle(&f);
	}
	/* Let everything time out, then tear down: nothing may be left out of the pool. */
	for (int i = 0; i < NCONN; i++)
		if (f.pc[i].c)
			fp_tcp_close(f.st, f.pc[i].c);
	fp_stack_destroy(f.st);
	fp_pool_cache_flush(f.cache);
	CHECK(fp_pool_in_use(f.pool) == 0);
	return 0;
}
