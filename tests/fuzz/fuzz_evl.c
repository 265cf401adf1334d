/* fuzz_evl.c: the event-callback layer (rt/evl.c) through a fake transport, conditions and sendv returns chosen by the input. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/evl.h>
#include <flowplane/pool.h>

#include "defs.h"

/*
 * Each input builds a fresh worker context (rt_ctx_init) whose transport is a fake: its
 * exec() checks and records every call, and the harness pushes the conditions a real
 * transport (worker.c over the stack, kernel.c over sockets) can produce, in the order it
 * can produce them. On top runs a small evl.h application that echoes what it reads. The
 * first byte picks the receive window (4 KiB..8 MiB), max_pending, max_unread, and whether
 * the run stops with connections open; the rest is a script of records:
 *
 *   op 0  KNOCK: a new flow on the listener (its conditions carry the listener's cookie
 *         until the ACCEPT executes, as on both transports)
 *   op 1  RECV on a flow: 1..1920 bytes in a fresh pool buffer, or appended behind the
 *         last RECV in its buffer (kernel.c reads into the last held buffer), within the
 *         flow's receive window (delivered and not yet recv_done) and buffer cap
 *   op 2  a burst: up to 32 RECVs of one flow in the same round
 *   op 3  SENT on a flow: the window opened
 *   op 4  EOF on a flow          op 5  DEAD on a flow (ECONNRESET, ETIMEDOUT, or 0)
 *   op 6  one round              op 7  rounds until nothing is left to do
 *   op 8  a timer pass: rounds until settled (a worker runs application timers only after
 *         every event went up), then the app's timer acts on one connection: write,
 *         close, abort, fp_evl_read_again, or dial a new one
 *   op 9  CONNECTED for a dial: 0, -ECONNREFUSED or -ETIMEDOUT
 *   op 10 bulk: up to 256 rounds, each with one full RECV on a flow (enough to fill
 *         max_unread and the window, so input is held back)
 *   op 11 a datagram on the bound UDP port
 *
 * Never produced, because no transport produces them: a condition after the flow's
 * CLOSE/ABORT executed (the close also forgets the flow's conditions queued before it and
 * not yet handed up: rt_conds_forget, defs.h's contract), RECV or EOF after EOF or DEAD,
 * anything after DEAD or a failed CONNECTED, more bytes than the window. Every SENDV return is
 * chosen by the input: all, a prefix of any length (0 too), -ENOBUFS, or -EPIPE with a
 * DEAD behind it (kernel.c's failed write); once the input is spent, sendv takes all.
 *
 * The application picks per connection, at accept, how it consumes (all, nothing, a
 * prefix chosen by the input, or whole requests of n bytes), and echoes what it consumes
 * the way evl.h asks a server to: when the output refuses the echo, it echoes what fits
 * and consumes only that. Reads may also write extra bytes, close, abort, change policy,
 * ask to read again or be interrupted (--notify ipi, below); accept may refuse, greet,
 * close or abort; closed(0) may write a last message.
 *
 * What is checked, all from evl.h's and api.h's contracts:
 *   - read is shown the flow's bytes in order from where the app consumed up to, what it
 *     left last time first and whole, never past what was delivered; never for a
 *     connection the app closed, aborted or was told closed, nor after fini;
 *   - the bytes each sendv takes are, in order, the next bytes of what fp_evl_write
 *     accepted on that connection (so what goes back on a flow is exactly the echo of a
 *     prefix of what came in, in order, with the extras where the app put them);
 *   - recv_done never covers more than was delivered, and by the end of each round it
 *     covers at least what the app consumed;
 *   - no call names a flow after its CLOSE/ABORT executed, or one never handed up; ACCEPT
 *     once, before anything is sent on the flow;
 *   - a KNOCKed flow is accepted or closed, a dead one closed; closed() comes once, in the
 *     round that delivered DEAD, or the one that delivered EOF unless input the app has
 *     not consumed is ahead of it (status 0 only after EOF); writes in it return 0 after
 *     EOF and -EPIPE after death; drained() only when every byte written was taken;
 *   - at rest, output pending on a flow whose window is open (no short sendv since the
 *     last SENT) is a bug, and so is a connection the app let go that was not released;
 *     a timer pass's writes leave in that pass; a CLOSE after the app's close or an EOF
 *     comes only after every byte written was taken (unless the flow died);
 *   - back-pressure loses nothing and stalls nothing it should not: once every flow's
 *     window is open and the output drained, every byte delivered has been shown to an
 *     app that never stopped reading of its own accord, and after fp_evl_read_again to
 *     every app that consumes;
 *   - at the end (every flow given a window, an EOF and a DEAD), every flow is released,
 *     fp_evl_conns() is 0; or, when the run stops with connections open, fini runs and
 *     every open flow is reset (ABORT) with no callback; every datagram is given back and
 *     every pool buffer returned.
 *
 * --sched steal (bit 7 of the first byte; the next byte's bit 0 sets steal_force, the home
 * leaving its ready flows to the thief): a second worker, the thief, with its own context
 * and evl, as rt/steal.c runs them. The established flows' conditions go to the shuffle
 * layer; op 6 runs the home's round, the thief's (which steals a ready flow; its calls go
 * home with it), or both, and settling runs both until no flow is queued, running or on
 * its way home. The contracts above hold, with three differences that are the scheduler's:
 * what a batch consumed is given back (recv_done) when its calls come home, and an EOF or
 * DEAD reaches the app when the flow's batch runs, so check_round looks only at flows
 * with no batch out (fp_flow_busy); and a timer pass's writes behind a sendv whose return
 * waits with its flow leave when that batch has run, so check_timer_pass is not made.
 * What it adds: every call naming a connection returns once and after the calls queued
 * with it (evl asserts one return per call; ASan sees a return reaching a freed one), a
 * close from an ordinary round or a timer while the flow is out included; and no
 * condition reaches a connection after its close executed.
 *
 * --notify ipi (bit 1 of the steal byte): a read may be interrupted (rt_ipi_deliver, as
 * ipi.c's signal handler calls it), which does work only inside a flow's batch. On the
 * home the thief's round may run first, as if on its own core meanwhile, and send a flow
 * home; the interrupt executes the returned flows' calls it can (rt_steal_irq_returns:
 * not closes, not when the input says the wire has no room), then, with nothing of the
 * home's stealable, posts a few RECV or SENT conditions to their flows
 * (rt_steal_irq_post), the running one's included. The checks above hold throughout.
 *
 * Bytes are taken from the input in an explicit order (never two take8() in one
 * expression), so an input means the same whatever compiles the harness. FUZZ_EVL_TRACE=1
 * prints an input's story.
 */

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "fuzz_evl: check failed at line %d: %s\n", \
				__LINE__, #x); abort(); } } while (0)

#define MAXF        8          /* flows per input (knocked and dialled) */
#define HELD_MAX    64         /* buffers a flow holds, delivered and not done */
#define RECV_MAX    1920       /* data room of one pool buffer (2048 - headroom) */
#define RPORT_BASE  1000       /* a KNOCKed flow's rport: RPORT_BASE + id */
#define DIAL_BASE   5000       /* a dial's remote port: DIAL_BASE + id */
#define LPORT       7
#define UDP_PORT    53
#define PEER_ADDR   0x0a000002u
#define SETTLE_MAX  100000     /* rounds before "settled" is declared a livelock */
#define BATCH_CONDS 512        /* conditions pushed before a round is forced */
#define UDP_MAX     64         /* datagram bytes, exclusive */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* FUZZ_EVL_TRACE=1 in the environment: every condition, call and callback on stderr, to
 * read a crash's story (replay the one input). */
static int trace_on = -1;
#define TRACE(...) do { if (trace_on) trace(__VA_ARGS__); } while (0)

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the fake transport's view of a flow ---- */

struct fp_flow {
	int id;
	bool exists;        /* KNOCKed, or a CONNECT that took */
	bool knocked;       /* came with a KNOCK: ACCEPT or CLOSE is owed */
	bool handed;        /* KNOCK or CONNECTED pushed: the app may name it now */
	bool est;           /* data may flow (knocked, or CONNECTED 0) */
	bool dialing;       /* CONNECT took, no CONNECTED yet */
	bool conn_failed;   /* CONNECTED with an error: only CLOSE is owed */
	bool accepted;      /* ACCEPT executed */
	bool released;      /* CLOSE/ABORT executed */
	bool eof, dead;     /* pushed */
	bool blocked;       /* a sendv took less than offered; cleared by SENT */
	bool sendv_err;     /* the last sendv returned -ENOBUFS (it is offered again) */
	uint64_t end_round; /* the round that delivers EOF/DEAD/failed CONNECTED */
	uint64_t cookie;    /* what its conditions carry */
	uint64_t delivered; /* RECV bytes pushed */
	uint64_t done;      /* bytes recv_done covered */
	uint64_t out;       /* bytes sendv took */
	struct fp_mbuf *last_m;   /* the buffer of the last RECV (kernel.c appends to it) */
	struct fp_mbuf *held[HELD_MAX];
	uint32_t held_left[HELD_MAX];
	unsigned n_held;
};

/* ---- the application's view of a connection (same index as its flow) ---- */

enum { U_NONE = 0, U_DIALING, U_LIVE, U_GONE };
enum { P_ALL = 0, P_INPUT, P_NONE, P_REQ };

struct app_conn {
	struct fp_evl_conn *c;
	uint8_t state;
	uint8_t policy;
	uint16_t req;
	bool graceful;      /* the app closed it, or EOF's closed(0): output drains first */
	bool closed_cb;
	bool own_stall;     /* it left input for a reason of its own: read_again is owed */
	uint64_t consumed;  /* bytes read consumed */
	uint64_t checked;   /* bytes of the flow's stream already compared */
	uint8_t *w;         /* everything fp_evl_write accepted, in order */
	size_t w_len, w_cap;
};

struct fz {
	const uint8_t *in;
	size_t left;
	uint64_t now;
	uint64_t round;
	bool drain;                    /* teardown: sendv takes everything */
	bool early;                    /* the run stops with connections open */
	bool stopping;                 /* fini has been called: no callback after it */
	size_t max_pending;            /* the app's, as evl applies it */
	uint32_t rcv_win;
	struct fp_pool_cache *cache;
	struct fp_rt_config cfg;
	struct rt_run run;
	struct fp_app app;
	struct fp_evl_ops ops;
	struct fp_ctx ctx;
	struct fp_evl *evl;
	bool steal;                    /* --sched steal: a thief beside the home */
	struct fp_ctx thief;
	bool ipi;                      /* --notify ipi: the app's reads may be interrupted */
	bool in_thief;                 /* the thief's round is running */
	bool in_irq;                   /* an interrupt's work is running */
	uint64_t listen_cookie;
	bool udp_bound;
	unsigned udp_out;              /* datagrams handed up, not yet given back */
	int n_ids;                     /* flows (and app slots) used */
	struct fp_flow fl[MAXF];
	struct app_conn ac[MAXF];
	struct fp_timer timer;
	uint8_t t_action, t_target;
	uint16_t t_len;
	bool fini_seen;
};

static struct fz *fz_of(struct fp_ctx *ctx) { return ctx->tp; }

static uint8_t take8(struct fz *f)
{
	if (!f->left)
		return 0;
	f->left--;
	return *f->in++;
}

static uint16_t take16(struct fz *f)
{
	uint16_t hi = take8(f);
	return (uint16_t)(hi << 8 | take8(f));
}

/* The peer's byte at offset @k of flow @id's stream. */
static uint8_t pat(int id, uint64_t k)
{
	uint64_t x = (k + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)id * 0xbf58476d1ce4e5b9ull;
	return (uint8_t)((x ^ (x >> 29)) >> 24);
}

/* Byte @i of a datagram of @len bytes: the peer's, so the echo can be recognised. */
static uint8_t udp_byte(size_t len, size_t i)
{
	return (uint8_t)(len * 7 + i);
}

static bool udp_ok(const void *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (((const uint8_t *)p)[i] != udp_byte(len, i))
			return false;
	return true;
}

/* ---- the application's output record ---- */

static void w_record(struct app_conn *u, const void *p, size_t n)
{
	if (!n)
		return;
	if (u->w_len + n > u->w_cap) {
		size_t cap = u->w_cap ? u->w_cap : 4096;
		while (cap < u->w_len + n)
			cap *= 2;
		u->w = realloc(u->w, cap);
		CHECK(u->w);
		u->w_cap = cap;
	}
	memcpy(u->w + u->w_len, p, n);
	u->w_len += n;
}

/* fp_evl_write, its result checked and what it accepted recorded. */
static int app_write(struct app_conn *u, struct fp_evl_conn *c, const void *p, size_t n)
{
	int r = fp_evl_write(c, p, n);

	CHECK(r == 0 || r == -ENOBUFS || r == -EPIPE);
	if (r == 0)
		w_record(u, p, n);
	return r;
}

/* @n bytes of the app's own (not an echo), recognisable in the stream. */
static void app_extra(struct app_conn *u, struct fp_evl_conn *c, size_t n)
{
	uint8_t buf[512];

	if (n > sizeof(buf))
		n = sizeof(buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(0xe0 ^ (u->w_len + i));
	CHECK(app_write(u, c, buf, n) != -EPIPE);
}

/* ---- the transport: calls ---- */

static void flow_done(struct fz *f, struct fp_flow *fl, uint64_t len)
{
	CHECK(fl->done + len <= fl->delivered);   /* never beyond what was received */
	fl->done += len;
	while (len) {
		CHECK(fl->n_held > 0);
		uint32_t n = len < fl->held_left[0] ? (uint32_t)len : fl->held_left[0];

		fl->held_left[0] -= n;
		len -= n;
		if (!fl->held_left[0]) {
			fp_mbuf_free(f->cache, fl->held[0]);
			memmove(fl->held, fl->held + 1, (fl->n_held - 1) * sizeof(fl->held[0]));
			memmove(fl->held_left, fl->held_left + 1,
				(fl->n_held - 1) * sizeof(fl->held_left[0]));
			fl->n_held--;
		}
	}
}

/* A flow the app may name in a call: one handed up and not released. */
static struct fp_flow *call_flow(struct fz *f, const struct fp_call *c)
{
	struct fp_flow *fl = c->flow;

	CHECK(fl >= f->fl && fl < f->fl + MAXF);
	CHECK(fl->exists && fl->handed && !fl->released);
	return fl;
}

/* Push a DEAD for @fl (the transport found it dead); no condition follows it. */
static void push_dead(struct fz *f, struct fp_flow *fl, int16_t status)
{
	struct fp_cond *k = rt_cond_push(&f->ctx);

	TRACE("  cond DEAD flow %d status %d", fl->id, status);
	k->type = FP_COND_DEAD;
	k->flow = fl;
	k->cookie = fl->cookie;
	k->status = status;
	fl->dead = true;
	fl->end_round = f->round + 1;
}

static int64_t fake_sendv(struct fz *f, struct fp_flow *fl, const struct fp_call *c)
{
	struct app_conn *u = &f->ac[fl->id];
	size_t offered = 0, want, took = 0;
	uint8_t mode = f->drain ? 0 : take8(f) % 8;

	if (f->in_irq && mode == 5)
		mode = 0;   /* the stack's transport, the one with interrupts, pushes no DEAD */

	CHECK(fl->est && !fl->conn_failed);
	/* ACCEPT first: a KNOCKed flow's output follows its ACCEPT in the batch. */
	CHECK(!fl->knocked || fl->accepted);
	for (unsigned i = 0; i < c->iovcnt; i++)
		offered += c->iov[i].iov_len;
	if (fl->dead)
		return -EPIPE;
	switch (mode) {
	case 1: case 2:
		want = take16(f) % (offered + 1);
		break;
	case 3:
		want = 0;
		break;
	case 4:
		fl->sendv_err = true;
		return -ENOBUFS;
	case 5:
		push_dead(f, fl, -EPIPE);
		return -EPIPE;
	default:
		want = offered;
		break;
	}
	for (unsigned i = 0; i < c->iovcnt && took < want; i++) {
		size_t n = c->iov[i].iov_len < want - took ? c->iov[i].iov_len : want - took;

		/* In order, the next bytes of what the app wrote on this connection. */
		CHECK(fl->out + n <= u->w_len);
		CHECK(!memcmp(c->iov[i].iov_base, u->w + fl->out, n));
		fl->out += n;
		took += n;
	}
	fl->sendv_err = false;
	if (took < offered)
		fl->blocked = true;
	return (int64_t)took;
}

static void fake_connect(struct fz *f, struct fp_call *c)
{
	int id = (int)c->port - DIAL_BASE;
	struct fp_flow *fl;

	CHECK(id >= 0 && id < f->n_ids && c->addr == PEER_ADDR);
	CHECK(f->ac[id].state == U_DIALING || f->ac[id].state == U_GONE);
	fl = &f->fl[id];
	CHECK(!fl->exists);
	if (take8(f) % 4 == 3) {          /* no port, no route: the call fails, no flow */
		c->ret = -EADDRNOTAVAIL;
		return;
	}
	fl->exists = fl->dialing = true;
	fl->cookie = c->cookie;
}

/* What a CLOSE after the app's own close or an EOF owes: every byte written taken. */
static void check_graceful_close(struct fz *f, const struct fp_flow *fl, uint16_t type)
{
	const struct app_conn *u = &f->ac[fl->id];

	if (type == FP_CALL_CLOSE && u->graceful && !fl->dead && !fl->conn_failed)
		CHECK(fl->out == u->w_len);
}

/* CLOSE/ABORT: release the flow, free what it holds, forget its queued conditions. */
static void fake_release(struct fz *f, struct fp_flow *fl, uint16_t type)
{
	check_graceful_close(f, fl, type);
	CHECK(!f->stopping || type == FP_CALL_ABORT);   /* a stop resets what is open */
	fl->released = true;
	while (fl->n_held) {
		fp_mbuf_free(f->cache, fl->held[--fl->n_held]);
	}
	/* as both transports do (defs.h): what is still queued for it is forgotten */
	rt_conds_forget(&f->ctx, fl);
}

static void fake_exec(struct fp_ctx *ctx, struct fp_call *c)
{
	struct fz *f = fz_of(ctx);
	struct fp_flow *fl;

	c->ret = 0;
	switch (c->type) {
	case FP_CALL_LISTEN:
		CHECK(c->port == LPORT && !f->listen_cookie && c->cookie);
		f->listen_cookie = c->cookie;
		break;
	case FP_CALL_UDP_BIND:
		CHECK(c->port == UDP_PORT && !f->udp_bound);
		f->udp_bound = true;
		break;
	case FP_CALL_ACCEPT:
		fl = call_flow(f, c);
		CHECK(!fl->accepted && fl->cookie == f->listen_cookie);
		CHECK(c->cookie && c->cookie != f->listen_cookie);
		fl->accepted = true;
		fl->cookie = c->cookie;
		break;
	case FP_CALL_CONNECT:
		fake_connect(f, c);
		break;
	case FP_CALL_SENDV:
		fl = call_flow(f, c);
		c->ret = fake_sendv(f, fl, c);
		break;
	case FP_CALL_RECV_DONE:
		fl = call_flow(f, c);
		flow_done(f, fl, c->len);
		break;
	case FP_CALL_CLOSE:
	case FP_CALL_ABORT:
		fl = call_flow(f, c);
		fake_release(f, fl, c->type);
		break;
	case FP_CALL_UDP_SEND:
		CHECK(f->udp_bound && c->port == UDP_PORT && c->iovcnt == 1);
		CHECK(c->iov[0].iov_len < UDP_MAX);
		CHECK(udp_ok(c->iov[0].iov_base, c->iov[0].iov_len));
		c->ret = (int64_t)c->iov[0].iov_len;
		break;
	case FP_CALL_UDP_DONE:
		CHECK(f->udp_out > 0);
		f->udp_out--;
		fp_mbuf_free(f->cache, c->m);
		break;
	default:
		CHECK(false);       /* a call this application never makes */
	}
}

/* exec, and its story when tracing. */
static void fake_exec_traced(struct fp_ctx *ctx, struct fp_call *c)
{
	size_t offered = 0;

	for (unsigned i = 0; trace_on && c->type == FP_CALL_SENDV && i < c->iovcnt; i++)
		offered += c->iov[i].iov_len;
	fake_exec(ctx, c);
	TRACE("  call %u flow %d len %u offered %zu -> %lld", c->type,
	      c->flow ? ((struct fp_flow *)c->flow)->id : -1, c->len, offered, (long long)c->ret);
}

/* ---- the application ---- */

static struct app_conn *app_of(struct fp_evl_conn *c)
{
	struct app_conn *u = fp_evl_conn_user(c);

	CHECK(u && u->c == c);
	return u;
}

static struct fz *fz_app(struct fp_evl_conn *c)
{
	return fp_evl_user(fp_evl_of(c));
}

static int app_init(struct fp_evl *evl, void *arg)
{
	struct fz *f = arg;

	f->evl = evl;
	fp_evl_set_user(evl, f);
	fp_evl_listen(evl, LPORT, f);
	fp_evl_udp_bind(evl, UDP_PORT);
	return 0;
}

static void app_fini(struct fp_evl *evl)
{
	struct fz *f = fp_evl_user(evl);

	if (evl != f->evl) {           /* the thief's: connections are the home's */
		CHECK(f->steal && fp_evl_conns(evl) == 0);
		return;
	}
	CHECK(f->stopping && !f->fini_seen);
	if (!f->early)
		CHECK(fp_evl_conns(evl) == 0);
	f->fini_seen = true;
}

static void *app_accept(struct fp_evl_conn *c, void *larg)
{
	struct fz *f = larg;
	int id = (int)fp_evl_conn_rport(c) - RPORT_BASE;
	struct app_conn *u;
	uint8_t how, pol;

	CHECK(f == fz_app(c) && !f->stopping);
	CHECK(id >= 0 && id < f->n_ids && fp_evl_conn_raddr(c) == PEER_ADDR);
	u = &f->ac[id];
	CHECK(u->state == U_NONE);
	how = take8(f);
	pol = take8(f);
	if (how % 8 == 7) {
		u->state = U_GONE;        /* refused: evl closes it */
		return NULL;
	}
	u->c = c;
	u->state = U_LIVE;
	u->policy = pol % 4;
	u->req = (uint16_t)(1 + pol / 4 * 16);
	switch (how % 8) {
	case 4:
		app_extra(u, c, 1 + how / 8);
		break;
	case 5:
		app_extra(u, c, how / 8);
		u->state = U_GONE;
		u->graceful = true;
		fp_evl_close(c);
		break;
	case 6:
		u->state = U_GONE;
		fp_evl_abort(c);
		break;
	default:
		break;
	}
	return u;
}

static void app_connected(struct fp_evl_conn *c, int status)
{
	struct app_conn *u = app_of(c);

	CHECK(u->state == U_DIALING && !fz_app(c)->stopping);
	if (status) {
		CHECK(status < 0);
		u->state = U_GONE;
		return;
	}
	u->state = U_LIVE;
	u->policy = P_ALL;
}

/* Check @len bytes at @data are flow @id's stream from @u->consumed, starting with
 * everything shown before and left unconsumed; only bytes not yet compared are (plus a
 * few at the start), so showing a large leftover again costs little. */
static void check_read(struct fz *f, int id, const struct app_conn *u, const uint8_t *data,
		       size_t len)
{
	const struct fp_flow *fl = &f->fl[id];
	uint64_t from = u->checked > u->consumed + 16 ? u->checked - 16 : u->consumed;

	CHECK(len > 0);
	CHECK(u->consumed + len <= fl->delivered);
	CHECK(u->consumed + len >= u->checked);    /* what it left comes first, whole */
	for (size_t i = 0; i < len && i < 16; i++)
		CHECK(data[i] == pat(id, u->consumed + i));
	for (uint64_t k = from; k < u->consumed + len; k++)
		CHECK(data[k - u->consumed] == pat(id, k));
}

/* Echo @n bytes; when the output refuses them, what fits (the rest is left, and shown
 * again once the output moves). Returns the bytes echoed, which are the bytes consumed. */
static size_t app_echo(struct fz *f, struct app_conn *u, struct fp_evl_conn *c,
		       const uint8_t *data, size_t n)
{
	size_t room;
	int r;

	if (!n)
		return 0;
	r = app_write(u, c, data, n);
	CHECK(r != -EPIPE);
	if (r == 0)
		return n;
	room = f->max_pending - fp_evl_pending(c);
	CHECK(room < n);
	if (room && app_write(u, c, data, room) == 0)
		return room;
	return 0;
}

static void interrupt(struct fz *f);

static size_t app_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct fz *f = fz_app(c);
	struct app_conn *u = app_of(c);
	int id = (int)(u - f->ac);
	size_t n;
	uint8_t act;

	CHECK(u->state == U_LIVE && !f->stopping);
	check_read(f, id, u, data, len);
	if (u->consumed + len > u->checked)
		u->checked = u->consumed + len;
	switch (u->policy) {
	case P_INPUT:
		n = f->left ? take16(f) % (len + 1) : len;
		break;
	case P_NONE:
		n = 0;
		break;
	case P_REQ:
		n = len - len % u->req;
		break;
	default:
		n = len;
		break;
	}
	if (n < len && u->policy != P_REQ)
		u->own_stall = true;
	else if (n == len)
		u->own_stall = false;
	n = app_echo(f, u, c, data, n);
	TRACE("  read flow %d: %zu shown at %llu, consumed %zu (policy %u)", id, len,
	      (unsigned long long)u->consumed, n, u->policy);
	u->consumed += n;
	act = u->policy == P_INPUT ? take8(f) : 0;
	switch (act % 16) {
	case 1:
		app_extra(u, c, act);
		break;
	case 2:
		u->state = U_GONE;
		u->graceful = true;
		fp_evl_close(c);
		break;
	case 3:
		u->state = U_GONE;
		fp_evl_abort(c);
		break;
	case 4:
		u->policy = (uint8_t)(act >> 4) % 4;
		break;
	case 5:
		fp_evl_read_again(c);       /* at the end of the round */
		break;
	case 6:
		interrupt(f);
		break;
	default:
		break;
	}
	return n;
}

static void app_drained(struct fp_evl_conn *c)
{
	struct fz *f = fz_app(c);
	struct app_conn *u = app_of(c);

	CHECK(u->state == U_LIVE && !f->stopping);
	CHECK(fp_evl_pending(c) == 0);
	CHECK(f->fl[u - f->ac].out == u->w_len);   /* every byte written was taken */
}

static void app_closed(struct fp_evl_conn *c, int status)
{
	struct fz *f = fz_app(c);
	struct app_conn *u = app_of(c);
	const struct fp_flow *fl = &f->fl[u - f->ac];
	uint8_t last = take8(f);

	TRACE("  closed flow %d status %d", (int)(u - f->ac), status);
	CHECK(u->state == U_LIVE && !u->closed_cb && !f->stopping);
	CHECK(status <= 0);
	CHECK(status < 0 || fl->eof);
	u->closed_cb = true;
	if (status == 0) {
		/* The peer's EOF: a last message still goes out, then the close. */
		u->graceful = true;
		if (last & 1)
			app_extra(u, c, last);
	} else {
		uint8_t b = 0;
		CHECK(fp_evl_write(c, &b, 1) == -EPIPE);
	}
	u->state = U_GONE;
}

static void app_udp(struct fp_evl *evl, uint16_t lport, uint32_t raddr, uint16_t rport,
		    const uint8_t *data, size_t len)
{
	struct fz *f = fp_evl_user(evl);

	CHECK(lport == UDP_PORT && raddr == PEER_ADDR && rport == 9);
	(void)f;
	CHECK(len < UDP_MAX && udp_ok(data, len));
	CHECK(fp_evl_udp_send(evl, lport, raddr, rport, data, len) == 0);
}

/* The timer: the action the last TICK chose, on one connection or a new dial. */
enum { T_WRITE = 0, T_CLOSE, T_ABORT, T_READ_AGAIN, T_DIAL, T_N, T_READ_AGAIN_ALL = 255 };

static void app_timer(struct fp_timer *t, uint64_t now_us)
{
	struct fz *f = (void *)((char *)t - offsetof(struct fz, timer));
	struct app_conn *u;

	(void)now_us;
	if (f->t_action == T_READ_AGAIN_ALL) {
		for (int i = 0; i < f->n_ids; i++)
			if (f->ac[i].state == U_LIVE)
				fp_evl_read_again(f->ac[i].c);
		return;
	}
	if (f->t_action % T_N == T_DIAL) {
		if (f->n_ids >= MAXF)
			return;
		u = &f->ac[f->n_ids];
		u->state = U_DIALING;
		u->c = fp_evl_connect(f->evl, PEER_ADDR, (uint16_t)(DIAL_BASE + f->n_ids), u);
		CHECK(u->c);
		f->n_ids++;
		return;
	}
	if (!f->n_ids)
		return;
	u = &f->ac[f->t_target % f->n_ids];
	if (u->state != U_LIVE && u->state != U_DIALING)
		return;
	switch (f->t_action % T_N) {
	case T_WRITE:
		app_extra(u, u->c, f->t_len);
		break;
	case T_CLOSE:
		u->state = U_GONE;
		u->graceful = true;
		fp_evl_close(u->c);
		break;
	case T_ABORT:
		u->state = U_GONE;
		fp_evl_abort(u->c);
		break;
	default:
		if (u->state == U_LIVE)
			fp_evl_read_again(u->c);   /* at once */
		break;
	}
}

/* ---- rounds and their checks ---- */

/* After every round: consumed bytes went back; death was told, and so was an EOF unless
 * input the app has not consumed is still ahead of it. */
static void check_round(struct fz *f)
{
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];
		const struct app_conn *u = &f->ac[i];

		if (!fl->exists || fl->released)
			continue;
		if (f->steal && fp_flow_busy(&f->ctx, fl))
			continue;   /* a batch out: its recv_done, its EOF come with it */
		CHECK(fl->done >= u->consumed);
		if (!fl->end_round || fl->end_round > f->round || u->state != U_LIVE)
			continue;
		CHECK(!fl->dead && !fl->conn_failed);
		CHECK(u->consumed < fl->delivered);   /* the EOF waits behind input */
	}
}

/* After a timer pass: its writes left in that pass, as far as the window let them. */
static void check_timer_pass(struct fz *f)
{
	if (f->steal)
		return;   /* a write behind a sendv whose return waits with its flow */
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];

		if (f->ac[i].state == U_LIVE && fl->est && !fl->released && !fl->blocked &&
		    !fl->dead && !fl->sendv_err)
			CHECK(fl->out == f->ac[i].w_len);
	}
}

static unsigned round_(struct fz *f)
{
	unsigned n;

	f->round++;
	TRACE("round %llu", (unsigned long long)f->round);
	n = rt_ctx_round(&f->ctx);
	check_round(f);
	return n;
}

/* --sched steal: the thief's round (one stolen batch, its calls sent home). */
static unsigned thief_round(struct fz *f)
{
	unsigned n;

	TRACE("thief round");
	f->in_thief = true;
	n = rt_ctx_round(&f->thief);
	f->in_thief = false;
	return n;
}

/* What a worker's loop would run a round for (worker.c's rt_app_pass): the scheduler's
 * own predicate, so a flow an interrupt left to the loop (deferred) counts too. */
static bool busy(const struct fz *f)
{
	if (f->ctx.n_conds || f->ctx.n_rets || f->ctx.n_calls)
		return true;
	if (!f->steal)
		return false;
	return f->thief.n_conds || f->thief.n_rets || f->thief.n_calls ||
	       rt_steal_pending(&f->ctx) || rt_steal_pending(&f->thief);
}

/* Rounds until nothing is left to hand up or execute, then what must hold at rest. */
static void settle(struct fz *f)
{
	unsigned n = 0;

	while (busy(f)) {
		CHECK(++n < SETTLE_MAX);
		round_(f);
		if (f->steal)
			thief_round(f);
	}
	CHECK(f->udp_out == 0);
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];
		const struct app_conn *u = &f->ac[i];

		if (!fl->handed || fl->released)
			continue;
		/* A KNOCKed flow was accepted or closed; a dead one closed. */
		CHECK(!fl->knocked || fl->accepted);
		CHECK(!fl->dead && !fl->conn_failed);
		if (!fl->est || fl->blocked)
			continue;
		/* The window is open: nothing written is left behind, and a connection
		 * the app let go (closed, aborted, told closed) has been released. */
		CHECK(u->state == U_LIVE);
		CHECK(fl->out == u->w_len);
	}
}

/* ---- conditions, as a transport pushes them ---- */

static struct fp_cond *push(struct fz *f, struct fp_flow *fl, uint16_t type)
{
	struct fp_cond *k = rt_cond_push(&f->ctx);

	TRACE("  cond %u flow %d", type, fl->id);
	k->type = type;
	k->flow = fl;
	k->cookie = fl->cookie;
	return k;
}

/* A flow the input picks among those @ok accepts, or NULL. */
static struct fp_flow *pick(struct fz *f, bool (*ok)(const struct fp_flow *))
{
	int cand[MAXF], n = 0;
	uint8_t b = take8(f);

	for (int i = 0; i < f->n_ids; i++)
		if (ok(&f->fl[i]))
			cand[n++] = i;
	return n ? &f->fl[cand[b % n]] : NULL;
}

static bool can_recv(const struct fp_flow *fl)
{
	return fl->handed && fl->est && !fl->released && !fl->eof && !fl->dead;
}

static bool can_sent(const struct fp_flow *fl)
{
	return fl->handed && fl->est && !fl->released && !fl->dead;
}

static bool can_connect(const struct fp_flow *fl)
{
	return fl->dialing && !fl->released;
}

static void push_knock(struct fz *f)
{
	struct fp_flow *fl;
	struct fp_cond *k;

	if (f->n_ids >= MAXF || !f->listen_cookie)
		return;
	fl = &f->fl[f->n_ids++];
	fl->exists = fl->knocked = fl->handed = fl->est = true;
	fl->cookie = f->listen_cookie;
	k = push(f, fl, FP_COND_KNOCK);
	k->raddr = PEER_ADDR;
	k->rport = (uint16_t)(RPORT_BASE + fl->id);
	k->lport = LPORT;
}

/* One RECV of @len bytes, if the flow's window and buffer cap allow it: in a fresh pool
 * buffer, or with @append right behind the last RECV in its buffer while that is held and
 * has room (kernel.c reads into the last held buffer; the two RECVs are contiguous). */
static void push_recv(struct fz *f, struct fp_flow *fl, uint32_t len, bool append)
{
	struct fp_mbuf *m;
	struct fp_cond *k;
	uint8_t *p;

	if (fl->delivered - fl->done + len > f->rcv_win)
		return;
	m = fl->n_held ? fl->held[fl->n_held - 1] : NULL;
	if (append && m && m == fl->last_m && fp_mbuf_tailroom(m) >= len) {
		p = fp_mbuf_append(m, len);
		fl->held_left[fl->n_held - 1] += len;
	} else {
		if (fl->n_held == HELD_MAX)
			return;
		m = fp_pool_get(f->cache);
		CHECK(m);
		p = fp_mbuf_append(m, len);
		fl->held[fl->n_held] = m;
		fl->held_left[fl->n_held++] = len;
	}
	CHECK(p);
	fl->last_m = m;
	for (uint32_t i = 0; i < len; i++)
		p[i] = pat(fl->id, fl->delivered + i);
	fl->delivered += len;
	TRACE("  recv %u bytes, delivered %llu", len, (unsigned long long)fl->delivered);
	k = push(f, fl, FP_COND_RECV);
	k->m = m;
	k->data = p;
	k->len = len;
}

static void push_sent(struct fz *f, struct fp_flow *fl, uint32_t window)
{
	push(f, fl, FP_COND_SENT)->window = window;
	fl->blocked = false;
}

static void push_eof(struct fz *f, struct fp_flow *fl)
{
	push(f, fl, FP_COND_EOF);
	fl->eof = true;
	fl->end_round = f->round + 1;
}

static void push_connected(struct fz *f, struct fp_flow *fl, int16_t status)
{
	struct fp_cond *k = push(f, fl, FP_COND_CONNECTED);

	k->status = status;
	k->raddr = PEER_ADDR;
	k->rport = (uint16_t)(DIAL_BASE + fl->id);
	fl->dialing = false;
	fl->handed = true;
	if (status) {
		fl->conn_failed = true;
		fl->end_round = f->round + 1;
	} else {
		fl->est = true;
	}
}

static void push_udp(struct fz *f, uint8_t len)
{
	struct fp_mbuf *m;
	struct fp_cond *k;
	uint8_t *p;

	if (!f->udp_bound)
		return;
	len %= UDP_MAX;
	m = fp_pool_get(f->cache);
	CHECK(m);
	p = fp_mbuf_append(m, len);
	CHECK(p || !len);
	for (uint8_t i = 0; i < len; i++)
		p[i] = udp_byte(len, i);
	f->udp_out++;
	k = rt_cond_push(&f->ctx);
	k->type = FP_COND_UDP_RECV;
	k->m = m;
	k->data = fp_mbuf_data(m);
	k->len = len;
	k->raddr = PEER_ADDR;
	k->rport = 9;
	k->lport = UDP_PORT;
}

/* ---- --notify ipi: the fake transport's interrupt (worker.c's rt_irq) ---- */

#define IRQ_ROOM 64   /* conditions and free events one interrupt may use */

static void fake_irq_prepare(struct fp_ctx *ctx)
{
	rt_reserve((void **)&ctx->conds, &ctx->cap_conds, ctx->n_conds + IRQ_ROOM,
		   sizeof(*ctx->conds));
	rt_steal_irq_prepare(ctx, IRQ_ROOM);
}

/* Room on the wire for a returned flow's calls, as the input says (mostly yes). */
static bool fake_irq_fits(struct fp_ctx *ctx, const struct fp_call *calls, unsigned n)
{
	(void)calls;
	(void)n;
	return fz_of(ctx)->in_irq && (take8(fz_of(ctx)) & 3) != 3;
}

/* The returned flows' calls; then, on the home with nothing of its own stealable, a few
 * quiet frames' conditions (RECV, SENT: what fp_stack_quiet_frame lets through) posted to
 * their flows, those of a flow with no record left for the loop. */
static void fake_irq(struct fp_ctx *ctx)
{
	struct fz *f = fz_of(ctx);
	struct fp_flow *fl;
	uint8_t b;
	uint64_t calls = ctx->stats->ipi_calls, deferred = ctx->stats->ipi_deferred;

	TRACE("  interrupt on worker %u", ctx->worker);
	f->in_irq = true;
	rt_steal_irq_returns(ctx);
	/* distinct branches, so coverage rewards inputs that reach each outcome */
	if (ctx->stats->ipi_calls != calls)
		TRACE("  interrupt ran %llu returned calls",
		      (unsigned long long)(ctx->stats->ipi_calls - calls));
	if (ctx->stats->ipi_deferred != deferred)
		TRACE("  interrupt left %llu returned flows to the loop",
		      (unsigned long long)(ctx->stats->ipi_deferred - deferred));
	b = take8(f);
	if (ctx == &f->ctx && !ctx->n_conds && !fp_shuf_ready_count(f->run.sh, 0)) {
		for (unsigned i = 0; i < b % 4u && ctx->n_conds < IRQ_ROOM / 2; i++) {
			if (b & 0x80) {
				if ((fl = pick(f, can_sent)))
					push_sent(f, fl, take16(f));
			} else if ((fl = pick(f, can_recv))) {
				push_recv(f, fl, 1 + take8(f) * 7u, false);
			}
		}
		rt_steal_irq_post(ctx);
	}
	f->in_irq = false;
}

static const struct rt_transport_ops fake_ops = {
	.name = "fake", .exec = fake_exec_traced,
	.irq_prepare = fake_irq_prepare, .irq = fake_irq, .irq_fits = fake_irq_fits,
};

/* --notify ipi: an interrupt while the app reads (it does work only inside a flow's
 * batch: rt_ipi_deliver). On the home, first, maybe, the thief's round, as if it ran
 * meanwhile on its own core: it may take a ready flow, run it and send it home, whose
 * calls the interrupt then executes. The thief is home to no flow. */
static void interrupt(struct fz *f)
{
	if (!f->ipi)
		return;
	if (f->in_thief) {
		rt_ipi_deliver(&f->thief);
		return;
	}
	if (take8(f) & 1)
		thief_round(f);
	rt_ipi_deliver(&f->ctx);
}

/* ---- the script ---- */

/* Every event up first (a worker runs application timers only then), then one timer
 * pass with @action. */
static void timer_pass(struct fz *f, uint8_t action, uint8_t target, uint16_t len,
		       uint64_t later)
{
	settle(f);
	f->t_action = action;
	f->t_target = target;
	f->t_len = len;
	TRACE("timer action %u target %u len %u", action, target, len);
	/* due now: it fires in the first run whose tick reaches it, 16 us on at most */
	fp_ctx_timer_add(&f->ctx, &f->timer, f->now);
	f->now += 16 + later;
	CHECK(rt_ctx_timers(&f->ctx, f->now) == 1);
	check_timer_pass(f);
}

static void op_tick(struct fz *f)
{
	uint8_t action = take8(f), target = take8(f);
	uint16_t len = take16(f) % 1024;

	timer_pass(f, action % T_N, target, len, action >> 3);
}

static void step(struct fz *f)
{
	struct fp_flow *fl;
	uint8_t op = take8(f) % 12, b;

	TRACE("op %u", op);
	switch (op) {
	case 0:
		push_knock(f);
		break;
	case 1:
		if ((fl = pick(f, can_recv))) {
			uint16_t v = take16(f);
			push_recv(f, fl, 1 + (v & 0x7fffu) % RECV_MAX, v & 0x8000u);
		}
		break;
	case 2:
		if ((fl = pick(f, can_recv))) {
			b = take8(f);
			for (unsigned i = 0; i <= b % 32u; i++)
				push_recv(f, fl, 1 + (uint32_t)take8(f) * 7, b & 0x80);
		}
		break;
	case 3:
		if ((fl = pick(f, can_sent)))
			push_sent(f, fl, take16(f));
		break;
	case 4:
		if ((fl = pick(f, can_recv)))
			push_eof(f, fl);
		break;
	case 5:
		if ((fl = pick(f, can_sent))) {
			static const int16_t st[] = { -ECONNRESET, -ETIMEDOUT, 0 };
			push_dead(f, fl, st[take8(f) % 3]);
		}
		break;
	case 6:
		b = f->steal ? take8(f) % 3 : 0;
		if (b != 1)
			round_(f);
		if (b != 0)
			thief_round(f);
		break;
	case 7:
		settle(f);
		break;
	case 8:
		op_tick(f);
		break;
	case 9:
		if ((fl = pick(f, can_connect))) {
			static const int16_t st[] = { 0, -ECONNREFUSED, -ETIMEDOUT, 0 };
			push_connected(f, fl, st[take8(f) % 4]);
		}
		break;
	case 10:
		if ((fl = pick(f, can_recv))) {
			unsigned n = 1u + take8(f);
			for (unsigned i = 0; i < n && can_recv(fl); i++) {
				push_recv(f, fl, RECV_MAX, false);
				round_(f);
				if (f->steal)
					thief_round(f);
			}
		}
		break;
	default:
		push_udp(f, take8(f));
		break;
	}
	if (f->ctx.n_conds > BATCH_CONDS)
		round_(f);
}

/*
 * Give every flow a window, let every app that stopped reading go on, then an EOF, then a
 * DEAD: every flow must end released. Before the EOF, an app that consumes (every policy
 * but P_NONE, the input spent) has been shown every byte delivered: nothing stays held
 * once the output has room.
 */
static void teardown(struct fz *f)
{
	settle(f);
	f->drain = true;
	for (int i = 0; i < f->n_ids; i++)
		if (can_sent(&f->fl[i]))
			push_sent(f, &f->fl[i], 1u << 20);
	settle(f);
	/* Output room again everywhere: what waited for it has been shown, unless the app
	 * itself stopped reading. */
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];
		const struct app_conn *u = &f->ac[i];

		if (u->state == U_LIVE && !u->own_stall && !fl->released)
			CHECK(u->checked == fl->delivered);
	}
	timer_pass(f, T_READ_AGAIN_ALL, 0, 0, 0);
	settle(f);
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];
		const struct app_conn *u = &f->ac[i];

		if (u->state == U_LIVE && u->policy != P_NONE && !fl->released)
			CHECK(u->checked == fl->delivered);
	}
	for (int i = 0; i < f->n_ids; i++) {
		if (can_connect(&f->fl[i]))
			push_connected(f, &f->fl[i], -ETIMEDOUT);
		else if (can_recv(&f->fl[i]))
			push_eof(f, &f->fl[i]);
	}
	settle(f);
	for (int i = 0; i < f->n_ids; i++)
		if (can_sent(&f->fl[i]))
			push_dead(f, &f->fl[i], -ECONNRESET);
	settle(f);
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];

		CHECK(!fl->exists || fl->released);
		CHECK(f->ac[i].state == U_GONE || f->ac[i].state == U_NONE);
	}
	CHECK(fp_evl_conns(f->evl) == 0);
}

/* The run stops (with connections open, when @early): fini, then every connection still
 * open is reset, with no callback. */
static void stop_run(struct fz *f)
{
	settle(f);
	f->stopping = true;
	f->app.fini(&f->ctx);
	CHECK(f->fini_seen);
	if (f->steal)
		f->app.fini(&f->thief);
	for (int i = 0; i < f->n_ids; i++) {
		const struct fp_flow *fl = &f->fl[i];

		CHECK(!fl->handed || fl->released);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fp_pool *pool;
	static struct fp_pool_cache cache;
	static const uint32_t wins[] = { 4096, 65536, 262144, 8u << 20 };
	static const size_t pend[] = { 0, 4096, 65536, 1u << 20 };
	static const size_t unread[] = { 0, 2048, 16384, 1u << 20 };
	struct fz *f;
	uint8_t cfg;

	if (!pool) {
		struct fp_pool_params p = { .name = "fuzz", .n_bufs = 2048, .buf_size = 2048 };
		pool = fp_pool_create(&p);
		CHECK(pool);
	}
	CHECK(fp_pool_cache_init(&cache, pool) == 0);
	/* aligned: the context holds cache-aligned per-worker stats */
	f = aligned_alloc(_Alignof(struct fz), sizeof(*f));
	CHECK(f);
	memset(f, 0, sizeof(*f));
	f->in = data;
	f->left = size;
	f->cache = &cache;
	f->now = 1000;
	for (int i = 0; i < MAXF; i++)
		f->fl[i].id = i;
	if (trace_on < 0)
		trace_on = getenv("FUZZ_EVL_TRACE") != NULL;
	cfg = take8(f);
	TRACE("cfg %#x", cfg);
	f->rcv_win = wins[cfg % 4];
	fp_rt_config_init(&f->cfg);
	f->cfg.stats_name = "";
	f->cfg.quiet = true;
	f->ops = (struct fp_evl_ops){
		.accept = app_accept, .connected = app_connected, .read = app_read,
		.drained = app_drained, .closed = app_closed, .udp_recv = app_udp,
		.init = app_init, .fini = app_fini, .max_pending = pend[cfg / 4 % 4],
		.max_unread = unread[cfg / 16 % 4],
	};
	f->max_pending = f->ops.max_pending ? f->ops.max_pending : 4u << 20;
	f->early = cfg & 0x40;
	f->steal = cfg & 0x80;
	if (f->steal) {
		f->cfg.n_workers = 2;
		f->cfg.sched = FP_SCHED_STEAL;
		uint8_t b = take8(f);

		f->cfg.steal_force = b & 1;
		f->ipi = b & 2;
	}
	fp_evl_app(&f->app, &f->ops, f);
	f->run.cfg = &f->cfg;
	f->run.app = &f->app;
	f->run.wake_fd = -1;
	CHECK(!f->steal || rt_steal_setup(&f->run) == 0);
	if (f->ipi) {   /* unbound (no thread to signal): interrupts come from interrupt() */
		f->run.ipi = aligned_alloc(FP_CACHE_LINE, 2 * sizeof(*f->run.ipi));
		CHECK(f->run.ipi);
		memset(f->run.ipi, 0, 2 * sizeof(*f->run.ipi));
	}
	CHECK(rt_ctx_init(&f->ctx, &f->run, 0, &fake_ops, f, f->now) == 0);
	fp_timer_init(&f->timer, app_timer);
	CHECK(f->app.init(&f->ctx, f->app.arg) == 0);
	rt_ctx_flush(&f->ctx);              /* LISTEN and UDP_BIND; returns go up next round */
	if (f->steal) {                     /* the thief's evl; its listen is not the test's */
		struct fp_evl *home = f->evl;

		CHECK(rt_ctx_init(&f->thief, &f->run, 1, &fake_ops, f, f->now) == 0);
		CHECK(f->app.init(&f->thief, f->app.arg) == 0);
		f->evl = home;
		f->thief.n_calls = 0;
	}

	while (f->left)
		step(f);
	if (!f->early)
		teardown(f);
	fp_ctx_timer_cancel(&f->ctx, &f->timer);
	stop_run(f);
	CHECK(f->ctx.n_calls == 0);
	rt_ctx_fini(&f->ctx);
	if (f->steal) {
		CHECK(f->thief.n_calls == 0);
		rt_ctx_fini(&f->thief);
		rt_steal_teardown(&f->run);
		free(f->run.ipi);
	}
	for (int i = 0; i < MAXF; i++)
		free(f->ac[i].w);
	free(f);
	fp_pool_cache_flush(&cache);
	CHECK(fp_pool_in_use(pool) == 0);
	return 0;
}
