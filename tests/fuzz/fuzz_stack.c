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
 * fake peer (each with its own options: SACK, timestamps, window scaling and MSS vary),
 * plus slots for connections the input opens itself: FRESH more peer ports with no
 * handshake yet (the third SYN meets a full backlog and gets a SYN cookie), and one slot
 * for the connections the application dials. Then it reads records from the input:
 *
 *   op 0  a raw frame: the bytes as they come (Ethernet and up, checksums and all wrong);
 *         of length 0: a well-formed ICMP echo request or UDP datagram from the peer
 *   op 1  a TCP segment on slot k, built relative to its current sequence numbers:
 *         fuzzed flags, sequence/ack offsets, window, options bytes and payload, with the
 *         lengths and checksums right so it gets past the parsers into the state machine.
 *         The ACK and the SACK blocks may instead name the edges of data segments the
 *         stack actually sent (the peer acks or SACKs whole segments, as a real one does)
 *         or repeat the peer's previous ACK; TSecr is relative to the stack's last TSval;
 *         with CWR (which the stack ignores) the segment goes four times: the duplicate
 *         ACKs of a receiver that lost a segment
 *   op 2  a frame from the peer with one IPv4 or TCP header byte overwritten after the
 *         checksums were computed (bad checksums, bad lengths)
 *   op 3  advance time (fires retransmit, delayed ACK, persist, keep-alive, TIME_WAIT), by
 *         a fuzzed amount or to the stack's next deadline
 *   op 4  an application action: send, recv_done, shutdown, close, abort, dial
 *
 * After every record the harness drains frames and events (releasing received data and
 * dead connections as an application would) and tracks the peer's view of each
 * connection from the segments the stack sends. It checks what net.h promises: frames
 * parse with valid checksums; RECV events carry exactly their bytes, in order (the
 * peer's byte at sequence number s is always pat(s), so a misplaced byte shows), never
 * after EOF; SENT never reports more bytes acked than send took; send never takes more
 * than sendable said. And what any TCP promises its peer: every byte the stack sends,
 * first time or retransmitted, is the application's byte at that stream offset (the
 * app's byte at offset k is pat(~k)), its FIN comes right after the last byte sent, and
 * it never acknowledges a sequence number the peer has not sent. At the end it closes
 * every connection, runs the timers until none is left (the stack finishes a close on
 * its own), checks that no connection is left, destroys the stack and aborts if a single
 * buffer is still out of the pool: a leak on any path is a crash.
 *
 * Every frame that fp_stack_quiet_frame() accepts goes in as the runtime's interrupt
 * handler gives it (fp_stack_irq), and the harness checks what that promises: no conn
 * opened or freed, no queue grown, at most 4 events queued.
 *
 * Every byte is taken in an explicit order (no two take8() in one expression, whose
 * order C leaves unspecified), so an input means the same whatever compiles the harness.
 */

#define CHECK(x) do { if (!(x)) abort(); } while (0)
#define NCONN 4                     /* established by setup() */
#define FRESH 3                     /* peer ports the input opens itself */
#define DIAL  (NCONN + FRESH)       /* the slot of the conns the app dials */
#define NSLOT (DIAL + 1)
#define NSEEN 8                     /* data segments the peer remembers per slot */
#define MY_IP   0x0a000001u
#define PEER_IP 0x0a000002u
#define PORT    80
#define DIAL_PORT 9
#define UDP_PORT 53
#define QUIESCE_STEPS 2000          /* timer runs at the end before giving up waiting */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct fp_eth_addr my_mac = {{0x02, 0, 0, 0, 0, 1}};
static const struct fp_eth_addr peer_mac = {{0x02, 0, 0, 0, 0, 2}};

/* A data segment the stack sent, as the peer saw it. */
struct seen_seg {
	uint32_t seq, len;
};

struct peer_conn {
	struct fp_tcp_conn *c;   /* the stack's handle once accepted, NULL before/after */
	uint16_t port;           /* the peer's port */
	uint16_t lport;          /* the stack's port */
	uint32_t snd_nxt;        /* next sequence number the peer sends */
	uint32_t rcv_nxt;        /* what the peer acknowledges */
	uint32_t last_ack;       /* the ACK the peer sent last */
	uint32_t snd_max;        /* beyond every sequence number the peer has sent */
	/* The stream the stack sends on the app's conn (known from accept or dial on). */
	bool tx_known;
	uint32_t tx_base;        /* the stack's ISN + 1: stream offset 0 */
	uint64_t tx_sent;        /* bytes the app's sends put into that stream */
	uint32_t ts_echo;        /* the stack's last TSval: what a real peer echoes */
	struct seen_seg seen[NSEEN];
	uint8_t n_seen, seen_at;
	/* What the application saw of c (reset when c changes). */
	bool rx_known;           /* rx_seq is the peer's sequence number of the next byte */
	bool eof;
	uint32_t rx_seq;
	uint64_t sent, acked;    /* bytes send took, bytes SENT events reported */
};

struct fz {
	struct fp_pool *pool;
	struct fp_pool_cache *cache;
	struct fp_stack *st;
	uint64_t now;
	struct peer_conn pc[NSLOT];
	bool raw_tcp;            /* a raw frame went in: payload bytes may not be pat() */
	const uint8_t *in;
	size_t left;
};

/* The peer's byte at sequence number @s, whichever segment carries it. */
static uint8_t pat(uint32_t s)
{
	return (uint8_t)((s * 0x9e3779b1u) >> 24);
}

/* The application's byte at offset @k of the stream it sends. */
static uint8_t app_pat(uint64_t k)
{
	return pat(~(uint32_t)k);
}

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
	if (!fp_stack_quiet_frame(f->st, m)) {
		fp_stack_input(f->st, &m, 1, f->now);
		return;
	}
	/* A frame the runtime's interrupt may take (--notify ipi): in interrupt mode its
	 * input opens and frees no conn, grows no queue and queues at most 4 events (net.h). */
	unsigned ev0, tx0, ev1, tx1, pending0 = fp_stack_tx_pending(f->st);
	uint32_t conns = fp_stack_tcp_conns(f->st);

	CHECK(fp_stack_reserve(f->st, 8, 8) == 0);
	fp_stack_room(f->st, &ev0, &tx0);
	fp_stack_irq(f->st, true);
	fp_stack_input(f->st, &m, 1, f->now);
	fp_stack_irq(f->st, false);
	fp_stack_room(f->st, &ev1, &tx1);
	CHECK(fp_stack_tcp_conns(f->st) == conns);
	CHECK(fp_stack_tx_pending(f->st) + tx1 == pending0 + tx0);   /* not grown */
	CHECK(ev0 - ev1 <= 4);
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

/* The slot a segment from the stack (@sport -> @dport) belongs to. */
static struct peer_conn *conn_by_port(struct fz *f, uint16_t sport, uint16_t dport)
{
	for (int i = 0; i < NSLOT; i++)
		if (f->pc[i].port == dport && f->pc[i].lport == sport)
			return &f->pc[i];
	return NULL;
}

/* The slot whose handle is @c. */
static struct peer_conn *conn_by_handle(struct fz *f, const struct fp_tcp_conn *c)
{
	for (int i = 0; i < NSLOT; i++)
		if (c && f->pc[i].c == c)
			return &f->pc[i];
	return NULL;
}

/* Give slot @pc the handle @c (or none): what the app saw of the old one no longer counts. */
static void slot_attach(struct peer_conn *pc, struct fp_tcp_conn *c)
{
	pc->c = c;
	pc->rx_known = false;
	pc->eof = false;
	pc->sent = pc->acked = 0;
	if (c) {
		/* Just accepted or dialled: nothing sent but the SYN, so SND.NXT is where the
		 * stream starts (a public number: fp_tcp_info). */
		struct fp_tcp_info info;
		fp_tcp_info(c, &info);
		pc->tx_known = true;
		pc->tx_base = info.snd_nxt;
		pc->tx_sent = 0;
	}
}

/* The peer remembers the last NSEEN distinct data segments (a retransmission is not new). */
static void seen_add(struct peer_conn *pc, uint32_t seq, uint32_t len)
{
	for (int i = 0; i < pc->n_seen; i++) {
		if (pc->seen[i].seq == seq) {
			if (len > pc->seen[i].len)
				pc->seen[i].len = len;
			return;
		}
	}
	pc->seen[pc->seen_at] = (struct seen_seg){ seq, len };
	pc->seen_at = (uint8_t)((pc->seen_at + 1) % NSEEN);
	if (pc->n_seen < NSEEN)
		pc->n_seen++;
}

/* The peer reads what the stack sent: it learns the stack's sequence numbers and ACKs. */
static void peer_reads(struct fz *f, const struct fp_tcp *t, const uint8_t *payload,
		       uint32_t dlen)
{
	struct peer_conn *pc = conn_by_port(f, t->sport, t->dport);

	if (!pc || (t->flags & FP_TCP_RST))
		return;
	uint32_t end = t->seq + dlen + !!(t->flags & FP_TCP_SYN) + !!(t->flags & FP_TCP_FIN);
	if (t->flags & FP_TCP_SYN) {
		/* A SYN or SYN-ACK names a (new) ISN: nothing before it counts any more. */
		pc->rcv_nxt = end;
		pc->n_seen = pc->seen_at = 0;
		if (pc->tx_base != t->seq + 1)
			pc->tx_known = false; /* another incarnation than the app's */
	} else if ((int32_t)(end - pc->rcv_nxt) > 0) {
		pc->rcv_nxt = end;
	}
	/* Never an ACK of what the peer has not sent (raw frames may have sent anything). */
	if ((t->flags & FP_TCP_ACK) && !f->raw_tcp)
		CHECK((int32_t)(t->ack - pc->snd_max) <= 0);
	if (dlen)
		seen_add(pc, t->seq + !!(t->flags & FP_TCP_SYN), dlen);
	if (pc->tx_known && !(t->flags & FP_TCP_SYN) && (dlen || (t->flags & FP_TCP_FIN))) {
		/* The app's bytes at their stream offsets, the FIN right after the last. */
		uint32_t off = t->seq - pc->tx_base;
		CHECK((uint64_t)off + dlen <= pc->tx_sent);
		for (uint32_t i = 0; i < dlen; i++)
			CHECK(payload[i] == app_pat(off + i));
		if (t->flags & FP_TCP_FIN)
			CHECK((uint64_t)off + dlen == pc->tx_sent);
	}
	if (t->opt.has_ts)
		pc->ts_echo = t->opt.ts_val;
}

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
				if (ip.dst == PEER_IP)
					peer_reads(f, &t, l4 + t.hdr_len,
						   fp_ipv4_payload_len(&ip) - t.hdr_len);
			}
			fp_stack_free(f->st, out[i]);
		}
	}
}

/* A RECV event: exactly its bytes (net.h), in order, never after EOF. */
static void app_recv(struct fz *f, struct peer_conn *pc, const struct fp_event *e)
{
	CHECK(e->m && e->len > 0 && e->m->data_len == e->len);
	if (pc) {
		CHECK(!pc->eof);
		if (pc->rx_known && !f->raw_tcp) {
			const uint8_t *b = fp_mbuf_data(e->m);
			for (uint32_t i = 0; i < e->len; i++)
				CHECK(b[i] == pat(pc->rx_seq + i));
		}
		pc->rx_seq += e->len;
	}
	/* Leave some data held so zero-window and held-buffer paths run. */
	if (e->len & 1)
		fp_tcp_recv_done(f->st, e->conn, e->len);
}

/* The application: keep every connection; release data; release dead connections. */
static void drain_events(struct fz *f)
{
	struct fp_event ev[32];
	unsigned n;

	while ((n = fp_stack_events(f->st, ev, 32)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			struct fp_event *e = &ev[i];
			struct peer_conn *pc = conn_by_handle(f, e->conn);
			switch (e->type) {
			case FP_EV_TCP_ACCEPTED:
				pc = e->raddr == PEER_IP ? conn_by_port(f, e->lport, e->rport)
							 : NULL;
				if (pc && !pc->c)
					slot_attach(pc, e->conn);
				else
					fp_tcp_close(f->st, e->conn);
				break;
			case FP_EV_TCP_RECV:
				app_recv(f, pc, e);
				break;
			case FP_EV_TCP_SENT:
				if (pc) {
					pc->acked += e->len;
					CHECK(pc->acked <= pc->sent);
				}
				break;
			case FP_EV_TCP_EOF:
				if (pc)
					pc->eof = true;
				break;
			case FP_EV_TCP_DEAD:
				if (pc)
					slot_attach(pc, NULL);
				fp_tcp_close(f->st, e->conn);
				break;
			case FP_EV_TCP_CONNECTED:
				if (e->status != 0) {
					if (pc)
						slot_attach(pc, NULL);
					fp_tcp_close(f->st, e->conn);
				}
				break;
			case FP_EV_UDP_RECV:
				/* An echo server: the reply takes the UDP send path. */
				CHECK(e->m && e->m->data_len == e->len);
				(void)fp_udp_send(f->st, e->lport, e->raddr, e->rport,
						  fp_mbuf_data(e->m), e->len);
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

/* The peer puts sequence numbers up to seq + SEG.LEN on the wire. */
static void peer_sends(struct peer_conn *pc, uint32_t seq, uint8_t flags, size_t plen)
{
	uint32_t end = seq + (uint32_t)plen + !!(flags & FP_TCP_SYN) + !!(flags & FP_TCP_FIN);

	if ((int32_t)(end - pc->snd_max) > 0)
		pc->snd_max = end;
}

/* A segment from the peer on @pc; its payload is the peer's stream at @seq (after a SYN). */
static void tcp_from_peer(struct fz *f, struct peer_conn *pc, uint8_t flags, uint32_t seq,
			  uint32_t ack, uint16_t wnd, size_t plen, const struct fp_tcp_opts *opt)
{
	uint8_t frame[2048], pay[1600];
	struct fp_tcp t = { .sport = pc->port, .dport = pc->lport, .seq = seq, .ack = ack,
			    .flags = flags, .wnd = wnd };
	uint32_t s0 = seq + !!(flags & FP_TCP_SYN);

	if (plen > sizeof(pay))
		plen = sizeof(pay);
	peer_sends(pc, seq, flags, plen);
	for (size_t i = 0; i < plen; i++)
		pay[i] = pat(s0 + (uint32_t)i);
	if (opt)
		t.opt = *opt;
	size_t len = build_tcp(frame, sizeof(frame), &t, pay, plen);
	if (len)
		feed(f, frame, len);
}

/* The handshake options of established conn @i: SACK, timestamps, window scaling and the
 * MSS differ, so the paths that depend on them (Reno duplicate ACK counting without SACK,
 * PAWS, unscaled windows, many small segments) all run. */
static struct fp_tcp_opts conn_opts(int i)
{
	struct fp_tcp_opts o = { .has_mss = 1, .mss = 1460, .has_wscale = 1, .wscale = 7,
				 .sack_ok = 1, .has_ts = 1, .ts_val = 1000 };
	switch (i) {
	case 1:
		o.sack_ok = 0;                   /* NewReno without SACK */
		break;
	case 2:
		o.has_ts = 0;                    /* no timestamps, no window scaling */
		o.has_wscale = 0;
		break;
	case 3:
		o.mss = 536;                     /* small segments */
		break;
	default:
		break;                           /* conn 0: everything */
	}
	return o;
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
		/* Few retries: giving up (ETIMEDOUT, the orphan's end) is a few records away,
		 * and the final quiesce() does not spend most of an input's time on FINs
		 * retransmitted to a peer that has stopped answering. */
		.syn_retries = 2, .data_retries = 4,
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

	for (int i = 0; i < NSLOT; i++) {
		struct peer_conn *pc = &f->pc[i];
		pc->port = i == DIAL ? DIAL_PORT : (uint16_t)(40000 + i);
		pc->lport = i == DIAL ? 0 : PORT;      /* the dial slot learns it per dial */
		/* Connection 0's sequence numbers wrap around 2^32 early on. */
		pc->snd_nxt = i == 0 ? 0xffffff00u : 100000u * (uint32_t)i;
		pc->snd_max = pc->snd_nxt;
	}
	/* Three-way handshakes: SYN, read the SYN-ACK, ACK it. */
	for (int i = 0; i < NCONN; i++) {
		struct peer_conn *pc = &f->pc[i];
		struct fp_tcp_opts o = conn_opts(i);
		tcp_from_peer(f, pc, FP_TCP_SYN, pc->snd_nxt, 0, 65535, 0, &o);
		pc->snd_nxt++;
		settle(f);
		f->now += 10;
		o = (struct fp_tcp_opts){ .has_ts = o.has_ts, .ts_val = 1001 };
		tcp_from_peer(f, pc, FP_TCP_ACK, pc->snd_nxt, pc->rcv_nxt, 512, 0, &o);
		settle(f);
		CHECK(pc->c != NULL);
		pc->rx_known = true;                 /* the stream starts at our ISN + 1 */
		pc->rx_seq = pc->snd_nxt;
	}
	return 0;
}

/* An ACK or a SACK block edge at a segment the stack sent: its start or its end. */
static uint32_t seen_edge(const struct peer_conn *pc, uint8_t pick, bool end)
{
	const struct seen_seg *s = &pc->seen[pick % pc->n_seen];
	return s->seq + (end ? s->len : 0);
}

static void op_segment(struct fz *f, bool corrupt)
{
	struct peer_conn *pc = &f->pc[take8(f) % NSLOT];
	uint8_t flags = take8(f);
	int8_t seq_hi = (int8_t)take8(f);
	uint8_t seq_lo = take8(f);
	int8_t ack_hi = (int8_t)take8(f);
	uint8_t ack_lo = take8(f);
	uint8_t wnd_hi = take8(f);
	uint8_t wnd_lo = take8(f);
	uint8_t optsel = take8(f);
	uint8_t plen_a = take8(f);
	uint8_t plen_b = take8(f);
	int32_t dseq = seq_hi * (int32_t)(1 + (seq_lo & 0x3f) * 64);
	int32_t dack = ack_hi * (int32_t)(1 + (ack_lo & 0x3f));
	uint16_t wnd = (uint16_t)(wnd_hi << 8 | wnd_lo);
	size_t plen = plen_a % 64 * (plen_b % 24 + 1);
	struct fp_tcp_opts o = { 0 };

	if (pc->lport == 0)
		return; /* the dial slot before any dial */
	if (optsel & 1) {
		o.has_ts = 1;
		o.ts_val = take32(f);
		o.ts_ecr = pc->ts_echo + take32(f);
	}
	if (optsel & 2) {
		o.n_sack = (uint8_t)(1 + (optsel >> 6) % 3);
		for (int i = 0; i < o.n_sack; i++) {
			uint8_t a = take8(f), b = take8(f);
			if ((optsel & 0x10) && pc->n_seen) {
				/* From the start of one segment the stack sent to the end of
				 * another: whole segments, as a real receiver reports them. */
				o.sack[i].left = seen_edge(pc, a, false);
				o.sack[i].right = seen_edge(pc, b, true);
			} else {
				o.sack[i].left = pc->rcv_nxt - (uint32_t)(a * 16);
				o.sack[i].right = o.sack[i].left + (uint32_t)(b * 16);
			}
		}
	}
	if (optsel & 4) {
		o.has_mss = 1;
		o.mss = (uint16_t)take32(f);
	}
	if (optsel & 0x20) {
		/* The rest of a SYN's options, for the slots that open conns themselves. */
		o.sack_ok = 1;
		o.has_wscale = 1;
		o.wscale = take8(f) % 16;
	}
	uint32_t seq = pc->snd_nxt + (uint32_t)dseq;
	uint32_t ack = pc->rcv_nxt + (uint32_t)dack;
	if ((ack_lo & 0xc0) == 0xc0)
		ack = pc->last_ack;                   /* the same ACK again */
	else if ((optsel & 8) && pc->n_seen)
		ack = seen_edge(pc, (uint8_t)ack_hi, ack_lo & 1); /* a partial ACK, exactly */
	if (!corrupt) {
		int n = flags & FP_TCP_CWR ? 4 : 1;
		flags &= (uint8_t)~FP_TCP_CWR;
		for (int i = 0; i < n; i++)
			tcp_from_peer(f, pc, flags, seq, ack, wnd, plen, &o);
		if (flags & FP_TCP_ACK)
			pc->last_ack = ack;
		if (dseq == 0 && !(flags & FP_TCP_RST))
			pc->snd_nxt += (uint32_t)plen + !!(flags & FP_TCP_SYN) + !!(flags & FP_TCP_FIN);
		return;
	}
	uint8_t frame[2048], pay[1600];
	struct fp_tcp t = { .sport = pc->port, .dport = pc->lport, .seq = seq, .ack = ack,
			    .flags = flags, .wnd = wnd, .opt = o };
	for (size_t i = 0; i < plen; i++)
		pay[i] = pat(seq + !!(flags & FP_TCP_SYN) + (uint32_t)i);
	peer_sends(pc, seq, flags, plen); /* the byte written may be the one that was there */
	size_t len = build_tcp(frame, sizeof(frame), &t, pay, plen);
	if (!len)
		return;
	size_t at = FP_ETH_HDR_LEN + take8(f) % (FP_IPV4_HDR_LEN + FP_TCP_HDR_LEN);
	frame[at] = take8(f);
	feed(f, frame, len - take8(f) % 4);
}

/* A well-formed datagram from the peer: an ICMP echo request (answered), or UDP to the
 * bound port (delivered, echoed back) or to another one (ICMP port unreachable). */
static void op_datagram(struct fz *f)
{
	uint8_t kind = take8(f);
	size_t plen = take8(f) % 64;
	uint8_t frame[256];
	uint8_t *l4 = frame + FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN;
	size_t hl = kind & 1 ? FP_ICMP_HDR_LEN : FP_UDP_HDR_LEN;
	struct fp_ipv4 ip = { .src = PEER_IP, .dst = MY_IP, .ttl = 64, .id = kind };

	for (size_t i = 0; i < plen; i++)
		l4[hl + i] = pat((uint32_t)i);
	if (kind & 1) {
		struct fp_icmp h = { .type = FP_ICMP_ECHO_REQUEST, .rest = kind };
		fp_icmp_emit(l4, hl + plen, &h);
		ip.proto = FP_IPPROTO_ICMP;
	} else {
		fp_udp_emit(l4, hl + plen, PEER_IP, MY_IP, 5353, kind & 2 ? UDP_PORT : UDP_PORT + 1);
		ip.proto = FP_IPPROTO_UDP;
	}
	fp_ipv4_emit(frame + FP_ETH_HDR_LEN, FP_IPV4_HDR_LEN, &ip, hl + plen);
	fp_eth_emit(frame, FP_ETH_HDR_LEN, &my_mac, &peer_mac, FP_ETH_TYPE_IPV4);
	feed(f, frame, FP_ETH_HDR_LEN + FP_IPV4_HDR_LEN + hl + plen);
}

/* A dial: the new conn takes the dial slot (an older one still there is closed first). */
static void app_dial(struct fz *f, bool abort_it)
{
	struct peer_conn *pc = &f->pc[DIAL];
	int err = 0;
	struct fp_tcp_conn *c = fp_tcp_dial(f->st, PEER_IP, DIAL_PORT, 0, &err);

	if (!c)
		return;
	if (abort_it) {
		fp_tcp_abort(f->st, c);
		return;
	}
	if (pc->c)
		fp_tcp_close(f->st, pc->c);
	struct fp_tcp_info info;
	fp_tcp_info(c, &info);
	slot_attach(pc, c);
	pc->lport = info.lport;
	pc->rcv_nxt = info.snd_nxt;            /* our SYN is in flight: the peer got it */
	pc->n_seen = pc->seen_at = 0;
	pc->snd_nxt += 1000000;                /* a fresh ISN for the peer's side */
	pc->snd_max = pc->snd_nxt;
}

static void app_send(struct fz *f, struct peer_conn *pc, size_t len)
{
	uint8_t buf[255 * 12];
	size_t room = fp_tcp_sendable(f->st, pc->c);

	if (len > sizeof(buf))
		len = sizeof(buf);
	for (size_t i = 0; i < len; i++)
		buf[i] = app_pat(pc->tx_sent + i);
	ssize_t r = fp_tcp_send(f->st, pc->c, buf, len);
	/* net.h: send takes at most what sendable said, and never more than offered. */
	CHECK(r < 0 || ((size_t)r <= len && (size_t)r <= room));
	if (r > 0) {
		pc->sent += (uint64_t)r;
		pc->tx_sent += (uint64_t)r;
	}
}

static void op_app(struct fz *f)
{
	uint8_t what = take8(f);
	struct peer_conn *pc = &f->pc[(what >> 4) % NSLOT];

	if (!pc->c && (what & 7) != 5)
		return;
	switch (what & 7) {
	case 0:
	case 1:
		app_send(f, pc, (size_t)take8(f) * 12);
		break;
	case 2:
		fp_tcp_recv_done(f->st, pc->c, take8(f));
		break;
	case 3:
		(void)fp_tcp_shutdown(f->st, pc->c);
		break;
	case 4:
		fp_tcp_close(f->st, pc->c);
		slot_attach(pc, NULL);
		break;
	case 5:
		app_dial(f, what & 8);
		break;
	case 6:
		(void)fp_tcp_keepalive(f->st, pc->c, 1000, 500, 2);
		break;
	default:
		fp_tcp_abort(f->st, pc->c);
		slot_attach(pc, NULL);
		break;
	}
}

/* Time passes: by a fuzzed amount, or (0) to the stack's next deadline, so that long
 * back-offs, probe limits and timeouts are a few bytes away. */
static void op_time(struct fz *f)
{
	uint8_t n = take8(f);
	uint8_t unit = take8(f);

	if (n) {
		f->now += (uint64_t)n * (unit & 1 ? 10000 : 50);
	} else {
		uint64_t next = fp_stack_next_us(f->st);
		if (next != UINT64_MAX && next > f->now)
			f->now = next;
	}
	fp_stack_poll(f->st, f->now);
}

/* The app closes everything and the timers run out: net.h's stack finishes every close
 * on its own, so once no timer is left, no connection may be left but the listener. */
static void quiesce(struct fz *f)
{
	for (int i = 0; i < NSLOT; i++) {
		if (f->pc[i].c)
			fp_tcp_close(f->st, f->pc[i].c);
		slot_attach(&f->pc[i], NULL);
	}
	settle(f);
	for (int i = 0; i < QUIESCE_STEPS; i++) {
		uint64_t next = fp_stack_next_us(f->st);
		if (next == UINT64_MAX)
			break;
		if (next > f->now)
			f->now = next;
		fp_stack_poll(f->st, f->now);
		settle(f);
	}
	if (fp_stack_next_us(f->st) == UINT64_MAX)
		CHECK(fp_stack_tcp_conns(f->st) == 1);
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
			size_t len = take8(&f) * 8u;
			len += take8(&f) % 8;
			if (len == 0) {
				op_datagram(&f);
				break;
			}
			if (len > f.left)
				len = f.left;
			feed(&f, f.in, len);
			f.in += len;
			f.left -= len;
			f.raw_tcp = true;
			break;
		}
		case 1:
		case 2:
			op_segment(&f, op == 2);
			break;
		case 3:
			op_time(&f);
			break;
		default:
			op_app(&f);
			break;
		}
		settle(&f);
	}
	quiesce(&f);
	fp_stack_destroy(f.st);
	fp_pool_cache_flush(f.cache);
	CHECK(fp_pool_in_use(f.pool) == 0);
	return 0;
}
