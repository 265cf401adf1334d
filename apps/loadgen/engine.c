/* engine.c: fp-loadgen's client: connections, the open-loop schedule, sends, responses, timeouts, per-point statistics. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/clock.h>
#include <flowplane/compiler.h>
#include <flowplane/evl.h>

#include "engine.h"

/*
 * One evl application per worker; each worker owns its share of the connections and runs
 * its own arrival process at rate/n_workers, so nothing on the request path is shared.
 *
 * Phases of a worker (lg_poll moves it along, once per round):
 *
 *   CONNECT    open its connections, at most LG_CONNECT_BURST at a time; any failure,
 *              or not all up within the deadline, stops the run with a message naming
 *              the server;
 *   CONNECTED  barrier: wait until every worker has all of its connections up;
 *   PRELOAD    memcache: SET each key of its share once, closed loop, unmeasured;
 *   PRELOADED  barrier: the last worker to arrive publishes t0, the common start;
 *   RUN        warm-up from t0, then the points' windows back to back;
 *   DRAIN      after the schedule's end: wait for what is outstanding, at most --timeout;
 *   DONE       what is left counts as timed out; the connections are reset.
 *
 * Open loop. An arrival scheduled at time s is issued by the first poll pass at or after
 * s (poll runs every round, after the timers: --idle poll keeps rounds short), or by a
 * pass that waits for it on the TSC when it falls due within the round a send costs
 * (lg_run_due). It picks a connection uniformly at random and is sent at once if that
 * connection has fewer than --depth requests in flight, else it waits in the
 * connection's backlog (--backlog deep; beyond that it is dropped and counted). Its
 * latency runs from s, the scheduled time, to its response, whatever it waited for: coordinated omission cannot hide
 * queueing. Its slip (issue time - s) measures the generator itself, and the gaps
 * between consecutive issues on a worker feed the KS test of the arrival process. A pass
 * issues at most LG_POLL_BURST arrivals; a generator that cannot keep up falls behind,
 * and its slip shows it.
 *
 * A request belongs to the point whose window contains its scheduled time (warm-up
 * requests to none), whenever its response comes. Responses on a connection come in
 * order, so each connection keeps its requests in a ring: @n_in in flight from @head,
 * then @n_back not yet sent; the protocol's parser gets the oldest.
 *
 * Housekeeping runs on a 1 ms timer (lg_tick): each tick checks a tenth of the
 * connections, so each is checked every 10 ms: one whose oldest request is older than
 * --timeout (from its scheduled time) is reset, every request in flight on it counts as
 * a timeout, and it reconnects at once (counted); its backlog waits for the new
 * connection. A connection the server closed is reopened by the tick. The tick also
 * publishes each worker's counters for progress lines once a point's window has ended.
 *
 * Closed loop (--closed K): every connection keeps K requests in flight from t0 to the
 * end; a response sends the next one at once; latency runs from the actual send.
 *
 * Datagram protocols (dns): a "connection" is a local UDP port (lg_udp_port), bound at
 * CONNECT and up at once. A request is a datagram to the server from its port, and so is
 * its answer, which the protocol matches (by DNS ID and question) against the port's
 * requests in flight: those sent before the one it answers count as timeouts (a lost
 * datagram is never answered later; a datagram that matches nothing, such as an answer
 * that comes after its request timed out, is ignored). The tick expires only what is
 * older than --timeout; nothing is reset or reopened.
 */

#define LG_NO_POINT        UINT32_MAX
#define LG_START_MARGIN_NS 1000000ull          /* t0 is this far ahead of the last barrier */
#define LG_PROGRESS_GRACE_NS 100000000ull      /* a point's line waits this long (or
						* --timeout) for its last responses */
#define LG_SPIN_AHEAD_MAX_NS 10000u            /* the most a pass waits for an arrival */
#define LG_QUANTILE_STEP_NS  100.0             /* lg_after_send's step */

/* ---- failures that end the run ---- */

static void __attribute__((format(printf, 3, 4))) lg_fail(struct lg_worker *w, int status,
							  const char *fmt, ...)
{
	struct lg_engine *e = w->e;
	int zero = 0;
	va_list ap;

	if (atomic_compare_exchange_strong(&e->failed, &zero, 1)) {
		va_start(ap, fmt);
		vsnprintf(e->error, sizeof(e->error), fmt, ap);
		va_end(ap);
	}
	fp_ctx_stop(fp_evl_ctx(w->evl), status ? status : -EIO);
}

/* ---- requests on a connection ---- */

static struct lg_worker *lg_worker_of(struct fp_evl_conn *c)
{
	return fp_evl_user(fp_evl_of(c));
}

static unsigned lg_conn_index(const struct lg_worker *w, const struct lg_conn *cn)
{
	return (unsigned)(cn - w->conns);
}

/* The @k-th request of @cn from its oldest. */
static struct lg_req *lg_slot(const struct lg_worker *w, const struct lg_conn *cn, unsigned k)
{
	unsigned i = cn->head + k;

	if (i >= w->cap)
		i -= w->cap;
	return &w->ring[(size_t)lg_conn_index(w, cn) * w->cap + i];
}

static struct lg_point *lg_pt(struct lg_worker *w, uint32_t point)
{
	return point == LG_NO_POINT ? NULL : &w->points[point];
}

/* The point the present belongs to, for counts not tied to a request (reconnects). */
static struct lg_point *lg_pt_now(struct lg_worker *w, uint64_t now)
{
	int seg;

	if (w->phase < PH_RUN)
		return NULL;
	seg = lg_seg(w, (double)now);
	if (seg < 0)
		return NULL;
	return &w->points[seg < (int)w->e->n_points ? seg : (int)w->e->n_points - 1];
}

/* Datagram protocols: the local port of @w's connection @k. */
static uint16_t lg_udp_port(const struct lg_worker *w, unsigned k)
{
	return (uint16_t)(w->e->cfg->udp_port_base + k * w->e->n_workers + w->id);
}

/* Encode @r (keeping its schedule) and write it. 0, or -errno: @cn is broken. */
static int lg_send(struct lg_worker *w, struct lg_conn *cn, struct lg_req *r)
{
	const struct lg_config *cfg = w->e->cfg;
	uint64_t sched = r->sched_ns;
	uint32_t point = r->point;
	size_t len;

	len = cfg->ops->encode(w->e->proto, &w->rng, w->buf, w->buf_cap, r);
	r->sched_ns = sched;
	r->sent_ns = fp_tsc_ns();
	r->point = point;
	if (cfg->ops->datagram)
		return fp_evl_udp_send(w->evl, lg_udp_port(w, lg_conn_index(w, cn)),
				       cfg->server_addr, cfg->server_port, w->buf, len);
	return fp_evl_write(cn->c, w->buf, len);
}

static void lg_reconnect(struct lg_worker *w, struct lg_conn *cn, uint64_t now);

/* Why a connection is reset: what its requests in flight count as. */
enum lg_why {
	WHY_TIMEOUT,    /* the oldest waited --timeout: all in flight are timeouts */
	WHY_BADMSG,     /* the oldest got an answer that cannot be one: an error; the rest
			 * never get theirs: timeouts */
	WHY_LOST,       /* closed by the server, a write refused: none get answers */
};

/*
 * @cn is broken: reset it, count what was in flight, and (@again) reconnect at once. Its
 * backlog stays for the new connection. The caller must not touch the old @cn->c again.
 */
static void lg_conn_reset(struct lg_worker *w, struct lg_conn *cn, enum lg_why why, bool again,
			  uint64_t now)
{
	for (unsigned k = 0; k < cn->n_in; k++) {
		struct lg_point *pt = lg_pt(w, lg_slot(w, cn, k)->point);

		if (!pt) {
			w->pre_errors += w->phase == PH_PRELOAD;
		} else if (k == 0 && why == WHY_BADMSG) {
			pt->completed++;
			pt->errors++;
		} else {
			pt->timeouts++;
		}
	}
	cn->head = (cn->head + cn->n_in) % w->cap;
	w->outstanding -= cn->n_in;
	cn->n_in = 0;
	if (w->e->cfg->ops->datagram)
		return;                 /* a port: nothing to reset */
	if (cn->c)
		fp_evl_abort(cn->c);
	cn->c = NULL;
	cn->state = CONN_DOWN;
	if (again && w->phase >= PH_PRELOAD && w->phase < PH_DONE)
		lg_reconnect(w, cn, now);
}

/* The first of @cn's backlog waited --timeout already: it is a timeout, not sent (else a
 * slow server would get requests nobody waits for, and a reset connection would reset
 * again as soon as it reopens). The backlog behind it moves up, in order. */
static void lg_expire(struct lg_worker *w, struct lg_conn *cn)
{
	struct lg_point *pt = lg_pt(w, lg_slot(w, cn, cn->n_in)->point);

	if (pt)
		pt->timeouts++;
	for (unsigned k = cn->n_in; k + 1 < (unsigned)cn->n_in + cn->n_back; k++)
		*lg_slot(w, cn, k) = *lg_slot(w, cn, k + 1);
	cn->n_back--;
	w->outstanding--;
}

/* Send from @cn's backlog while it has room in flight. 0, or -1 when @cn broke. */
static int lg_pump(struct lg_worker *w, struct lg_conn *cn, uint64_t now)
{
	while (cn->n_back && cn->n_in < w->depth && cn->state == CONN_UP) {
		struct lg_req *r = lg_slot(w, cn, cn->n_in);
		struct lg_point *pt = lg_pt(w, r->point);

		if (now > r->sched_ns && now - r->sched_ns > w->e->timeout_ns) {
			lg_expire(w, cn);
			continue;
		}
		int rc = lg_send(w, cn, r);

		if (rc == -ENOBUFS)     /* the output is full: the rest waits for drained */
			return 0;
		if (rc) {
			lg_conn_reset(w, cn, WHY_LOST, true, now);
			return -1;
		}
		cn->n_in++;
		cn->n_back--;
		if (pt)
			pt->sent++;
	}
	return 0;
}

/* Queue a request scheduled at @sched behind @cn's others; false when the backlog is
 * full (the caller counts a drop). */
static bool lg_enqueue(struct lg_worker *w, struct lg_conn *cn, uint64_t sched, int seg)
{
	struct lg_req *r;

	if (cn->n_back >= w->e->cfg->backlog || cn->n_in + cn->n_back >= w->cap)
		return false;
	r = lg_slot(w, cn, cn->n_in + cn->n_back);
	memset(r, 0, sizeof(*r));
	r->sched_ns = sched;
	r->point = seg >= 0 && seg < (int)w->e->n_points ? (uint32_t)seg : LG_NO_POINT;
	cn->n_back++;
	w->outstanding++;
	return true;
}

/* One open-loop arrival, scheduled at @sched: pick a connection, send or queue it. */
static void lg_issue(struct lg_worker *w, uint64_t sched)
{
	uint64_t now = fp_tsc_ns();
	int seg = lg_seg(w, (double)sched);
	struct lg_point *pt = seg >= 0 ? &w->points[seg] : NULL;
	struct lg_conn *cn = &w->conns[lg_rng_below(&w->rng, w->n_conns)];

	if (pt) {
		pt->scheduled++;
		fp_hist_record(&pt->slip, now > sched ? now - sched : 0);
		if (w->e->cdf && w->last_seg == seg)
			lg_reservoir_add(&pt->gaps, (double)(now - w->last_issue_ns), &w->rng);
	}
	w->last_seg = seg;
	w->last_issue_ns = now;
	if (!lg_enqueue(w, cn, sched, seg)) {
		if (pt)
			pt->dropped++;
		return;
	}
	lg_pump(w, cn, now);
}

/* Closed loop: top @cn up to K in flight, each sent now (latency from the send). */
static void lg_closed_fill(struct lg_worker *w, struct lg_conn *cn, uint64_t now)
{
	if (w->phase != PH_RUN || now >= w->t_end)
		return;
	while (cn->state == CONN_UP && cn->n_in + cn->n_back < w->depth) {
		int seg = lg_seg(w, (double)now);
		if (!lg_enqueue(w, cn, now, seg))
			break;
		if (seg >= 0 && seg < (int)w->e->n_points)
			w->points[seg].scheduled++;
		if (lg_pump(w, cn, now))
			return;
	}
}

/* Preload: SETs on @cn while keys are left and it has room. */
static void lg_preload_fill(struct lg_worker *w, struct lg_conn *cn, uint64_t now)
{
	unsigned room = w->depth < LG_PRELOAD_DEPTH ? LG_PRELOAD_DEPTH : w->depth;

	room = room < w->cap ? room : w->cap;
	while (cn->state == CONN_UP && cn->n_in < room && w->pre_next < w->pre_end) {
		struct lg_req *r = lg_slot(w, cn, cn->n_in);

		size_t len;

		memset(r, 0, sizeof(*r));
		len = w->e->cfg->ops->encode_preload(w->e->proto, w->pre_next, &w->rng, w->buf,
						     w->buf_cap, r);
		r->sched_ns = now;
		r->point = LG_NO_POINT;
		if (!len) {             /* a protocol without keys: nothing to preload */
			w->pre_end = 0;
			return;
		}
		if (fp_evl_write(cn->c, w->buf, len)) {
			lg_conn_reset(w, cn, WHY_LOST, true, now);
			return;
		}
		w->pre_next += w->e->n_workers;
		w->pre_keys++;
		cn->n_in++;
		w->outstanding++;
	}
}

/* What @cn does once it has room: the phase's kind of sending. */
static void lg_refill(struct lg_worker *w, struct lg_conn *cn, uint64_t now)
{
	if (w->phase == PH_PRELOAD)
		lg_preload_fill(w, cn, now);
	else if (w->e->cfg->closed)
		lg_closed_fill(w, cn, now);
	else if (w->phase >= PH_RUN)
		lg_pump(w, cn, now);
}

/* The oldest request of @cn got its response (@st) at @now. */
static void lg_complete(struct lg_worker *w, struct lg_conn *cn, enum lg_status st, uint64_t now)
{
	struct lg_req *r = lg_slot(w, cn, 0);
	struct lg_point *pt = lg_pt(w, r->point);
	uint64_t sched = r->sched_ns, lat = now > sched ? now - sched : 0;

	cn->head = cn->head + 1 == w->cap ? 0 : cn->head + 1;
	cn->n_in--;
	w->outstanding--;
	if (!pt) {
		if (w->phase == PH_PRELOAD && st == LG_RESP_ERROR)
			w->pre_errors++;
		return;
	}
	pt->completed++;
	if (st == LG_RESP_ERROR) {      /* counted; a fast error is not a latency */
		pt->errors++;
		return;
	}
	if (st == LG_RESP_MISS)
		pt->misses++;
	else
		pt->ok++;
	fp_hist_record(&pt->latency, lat);
	fp_hist_record(&pt->latency_sent, now > r->sent_ns ? now - r->sent_ns : 0);
	{
		uint32_t p = r->point;
		double off = (double)sched - ((double)w->t_meas + w->e->seg_ns * p);
		double len = lg_seg_end(w, (int)p) - ((double)w->t_meas + w->e->seg_ns * p);
		int b = len > 0 ? (int)(off * LG_BATCHES / len) : 0;

		b = b < 0 ? 0 : b >= (int)LG_BATCHES ? (int)LG_BATCHES - 1 : b;
		lg_chist_record(&pt->batches[b], lat);
	}
}

/* Datagrams: the @n oldest requests in flight on @cn got no answer (a later one did, or
 * they waited --timeout): timeouts. */
static void lg_udp_lost(struct lg_worker *w, struct lg_conn *cn, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		struct lg_point *pt = lg_pt(w, lg_slot(w, cn, 0)->point);
		if (pt)
			pt->timeouts++;
		cn->head = cn->head + 1 == w->cap ? 0 : cn->head + 1;
		cn->n_in--;
		w->outstanding--;
	}
}

/* A datagram for one of our ports: the answer to one of its requests in flight, or
 * nothing we wait for (ignored: see the top of this file). */
static void lg_udp_recv(struct fp_evl *evl, uint16_t lport, uint32_t raddr, uint16_t rport,
			const uint8_t *data, size_t len)
{
	struct lg_worker *w = fp_evl_user(evl);
	const struct lg_config *cfg;
	uint64_t now = fp_tsc_ns();
	unsigned p, k;

	if (!w || w->phase < PH_PRELOAD || w->phase == PH_DONE)
		return;
	cfg = w->e->cfg;
	p = (unsigned)lport - cfg->udp_port_base;
	if (lport < cfg->udp_port_base || p % w->e->n_workers != w->id ||
	    p / w->e->n_workers >= w->n_conns || raddr != cfg->server_addr ||
	    rport != cfg->server_port)
		return;
	struct lg_conn *cn = &w->conns[p / w->e->n_workers];
	for (k = 0; k < cn->n_in; k++) {
		enum lg_status st = LG_RESP_OK;
		if (cfg->ops->parse(w->e->proto, lg_slot(w, cn, k), data, len, &st) > 0) {
			lg_udp_lost(w, cn, k);
			lg_complete(w, cn, st, now);
			lg_refill(w, cn, now);
			return;
		}
	}
}

/* ---- evl callbacks ---- */

static size_t lg_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct lg_worker *w = lg_worker_of(c);
	struct lg_conn *cn = fp_evl_conn_user(c);
	const struct lg_proto_ops *ops = w->e->cfg->ops;
	uint64_t now = fp_tsc_ns();
	size_t off = 0;

	while (off < len) {
		enum lg_status st = LG_RESP_OK;
		long n;

		if (!cn->n_in) {        /* bytes nobody asked for: not this protocol */
			struct lg_point *pt = lg_pt_now(w, now);
			if (pt)
				pt->errors++;
			lg_conn_reset(w, cn, WHY_LOST, true, now);
			return len;
		}
		n = ops->parse(w->e->proto, lg_slot(w, cn, 0), data + off, len - off, &st);
		if (n == 0)
			break;
		if (n < 0 || (size_t)n > len - off) {
			lg_conn_reset(w, cn, WHY_BADMSG, true, now);
			return len;
		}
		off += (size_t)n;
		lg_complete(w, cn, st, now);
	}
	lg_refill(w, cn, now);
	return cn->c == c ? off : len;     /* refill may have reset it */
}

static void lg_start_connects(struct lg_worker *w);

static void lg_connected(struct fp_evl_conn *c, int status)
{
	struct lg_worker *w = lg_worker_of(c);
	struct lg_conn *cn = fp_evl_conn_user(c);

	if (status) {
		cn->c = NULL;
		cn->state = CONN_DOWN;  /* later: the tick retries */
		if (w->phase == PH_CONNECT)
			lg_fail(w, status, "cannot connect to %s: %s", w->e->cfg->server,
				strerror(-status));
		return;
	}
	cn->state = CONN_UP;
	if (w->phase == PH_CONNECT) {
		w->n_connecting--;
		if (++w->n_up == w->n_conns) {
			w->phase = PH_CONNECTED;
			atomic_fetch_add(&w->e->n_connected, 1);
		} else {
			lg_start_connects(w);
		}
		return;
	}
	lg_refill(w, cn, fp_tsc_ns());
}

/* The output took everything: a backlog held back by a full output can go on. */
static void lg_drained(struct fp_evl_conn *c)
{
	struct lg_conn *cn = fp_evl_conn_user(c);

	if (cn->n_back)
		lg_refill(lg_worker_of(c), cn, fp_tsc_ns());
}

static void lg_closed(struct fp_evl_conn *c, int status)
{
	struct lg_worker *w = lg_worker_of(c);
	struct lg_conn *cn = fp_evl_conn_user(c);

	cn->c = NULL;           /* gone: evl forgets it after this returns */
	if (w->phase <= PH_CONNECTED) {
		lg_fail(w, status ? status : -ECONNRESET, "%s closed a connection during setup "
			"(%s)", w->e->cfg->server, status ? strerror(-status) : "end of stream");
		return;
	}
	/* The tick reopens it: no tight loop against a server that keeps closing. */
	lg_conn_reset(w, cn, WHY_LOST, false, fp_tsc_ns());
}

static void lg_reconnect(struct lg_worker *w, struct lg_conn *cn, uint64_t now)
{
	const struct lg_config *cfg = w->e->cfg;
	struct lg_point *pt = lg_pt_now(w, now);

	cn->c = fp_evl_connect(w->evl, cfg->server_addr, cfg->server_port, cn);
	cn->state = cn->c ? CONN_CONNECTING : CONN_DOWN;
	if (cn->c && pt)
		pt->reconnects++;
}

/* Setup: keep LG_CONNECT_BURST connects in flight until every connection is open. */
static void lg_start_connects(struct lg_worker *w)
{
	const struct lg_config *cfg = w->e->cfg;

	if (cfg->ops->datagram) {
		/* a bind that fails is reported by the runtime, and stops the run */
		for (unsigned k = 0; k < w->n_conns; k++) {
			fp_evl_udp_bind(w->evl, lg_udp_port(w, k));
			w->conns[k].state = CONN_UP;
		}
		w->n_up = w->n_conns;
		w->phase = PH_CONNECTED;
		atomic_fetch_add(&w->e->n_connected, 1);
		return;
	}
	while (w->next_connect < w->n_conns && w->n_connecting < LG_CONNECT_BURST) {
		struct lg_conn *cn = &w->conns[w->next_connect++];

		cn->c = fp_evl_connect(w->evl, cfg->server_addr, cfg->server_port, cn);
		if (!cn->c) {
			lg_fail(w, -ENOMEM, "out of memory opening connection %u", w->next_connect);
			return;
		}
		cn->state = CONN_CONNECTING;
		w->n_connecting++;
	}
}

/* ---- phases ---- */

/* Progress: freeze @w's counters of point @i for the line worker 0 prints. */
static void lg_publish(struct lg_worker *w, unsigned i)
{
	const struct lg_point *pt = &w->points[i];
	struct lg_progress *p = &w->prog[i];

	p->scheduled = pt->scheduled;
	p->completed = pt->completed;
	p->errors = pt->errors;
	p->timeouts = pt->timeouts;
	p->dropped = pt->dropped;
	p->p99_ns = fp_hist_percentile(&pt->latency, 99.0);
	atomic_store_explicit(&w->published, i + 1, memory_order_release);
}

static void lg_publish_due(struct lg_worker *w, uint64_t now, bool all)
{
	while (w->published_local < w->e->n_points) {
		unsigned i = w->published_local;
		double end = lg_seg_end(w, (int)i) + (double)w->e->grace_ns;

		if (!all && (w->phase < PH_RUN || (double)now < end))
			break;
		lg_publish(w, i);
		w->published_local++;
	}
}

/* The schedule is over (or its drain timed out): what is left never got an answer in
 * --timeout; count it so, reset the connections, and report. */
static void lg_finish(struct lg_worker *w, uint64_t now)
{
	for (unsigned i = 0; i < w->n_conns; i++) {
		struct lg_conn *cn = &w->conns[i];

		for (unsigned k = 0; k < (unsigned)cn->n_in + cn->n_back; k++) {
			struct lg_point *pt = lg_pt(w, lg_slot(w, cn, k)->point);
			if (pt)
				pt->timeouts++;
		}
		cn->n_in = cn->n_back = 0;
		if (cn->c)
			fp_evl_abort(cn->c);
		cn->c = NULL;
		cn->state = CONN_DOWN;
	}
	w->outstanding = 0;
	w->phase = PH_DONE;
	w->stop_ns = now;
	lg_publish_due(w, now, true);
	atomic_fetch_add(&w->e->n_drained, 1);
}

/* Both barriers passed: the schedule starts at t0 on every worker. */
static void lg_start_run(struct lg_worker *w, uint64_t t0)
{
	struct lg_engine *e = w->e;

	w->t0 = t0;
	w->t_meas = t0 + (uint64_t)e->warm_ns;
	w->t_end = w->t_meas + (uint64_t)e->meas_ns;
	w->next_ns = (double)t0;
	w->last_seg = -2;
	w->phase = PH_RUN;
	if (e->cfg->closed) {
		for (unsigned i = 0; i < w->n_conns; i++)
			lg_closed_fill(w, &w->conns[i], fp_tsc_ns());
	} else if (!lg_advance(w)) {
		w->phase = PH_DRAIN;
		w->drain_deadline_ns = w->t_end + e->timeout_ns;
	}
}

static void lg_start_preload(struct lg_worker *w)
{
	struct lg_engine *e = w->e;
	uint64_t now = fp_tsc_ns();

	w->phase = PH_PRELOAD;
	if (e->cfg->preload && e->cfg->ops->encode_preload) {
		w->pre_next = w->id;
		w->pre_end = e->cfg->proto.records;
		for (unsigned i = 0; i < w->n_conns && w->pre_next < w->pre_end; i++)
			lg_preload_fill(w, &w->conns[i], now);
	}
}

/*
 * Open loop: issue every arrival due before the next pass is likely, waiting on the TSC for
 * those not yet due, at most LG_POLL_BURST a pass. A send makes the round after it a long
 * one (the kernel transport's io_uring_enter submits it; on loopback the sender's system
 * call also runs the receiver's TCP input: 5-7 us here), so without the wait an arrival
 * due just after a send would leave a whole such round late, and the actual gaps would
 * lack everything between a pass's own spacing and that round's length. So the pass waits
 * for what falls due within that round (lg_after_send) after each send, for at most
 * LG_SPIN_AHEAD_MAX_NS in all: a response arriving meanwhile waits at most that long.
 * What still shows (gaps just over the pass's limit) the KS test may notice from tens of
 * thousands of requests/s; the slip check says whether it matters.
 */
static void lg_run_due(struct lg_worker *w, uint64_t now)
{
	double horizon = (double)now + w->after_send_ns, limit = (double)now + LG_SPIN_AHEAD_MAX_NS;

	for (unsigned n = 0; w->next_ns <= horizon && n < LG_POLL_BURST; n++) {
		while ((double)(now = fp_tsc_ns()) < w->next_ns)
			__builtin_ia32_pause();
		lg_issue(w, (uint64_t)w->next_ns);
		/* The round after this send would make the next arrival late too, if it is
		 * due within that round: wait for it as well, within the pass's limit. */
		horizon = fmin((double)now + w->after_send_ns, fmax(limit, (double)now));
		if (!lg_advance(w)) {
			w->phase = PH_DRAIN;
			w->drain_deadline_ns = w->t_end + w->e->timeout_ns;
			return;
		}
	}
	w->pass_end_ns = fp_tsc_ns();
}

/*
 * How long the round after an issuing pass takes, from the pass's end to the next poll:
 * a running estimate of its 90th percentile (stochastic approximation: up 90 steps for
 * a round above it, down 10 for one below), left alone by a round over
 * LG_SPIN_AHEAD_MAX_NS (a burst of responses, a preemption).
 */
static void lg_after_send(struct lg_worker *w, uint64_t now)
{
	uint64_t dt = now - w->pass_end_ns;

	if (!w->pass_end_ns)
		return;
	w->pass_end_ns = 0;
	if (dt >= LG_SPIN_AHEAD_MAX_NS)
		return;
	if ((double)dt > w->after_send_ns)
		w->after_send_ns += 0.9 * LG_QUANTILE_STEP_NS;
	else if (w->after_send_ns > LG_QUANTILE_STEP_NS)
		w->after_send_ns -= 0.1 * LG_QUANTILE_STEP_NS;
}

/* fp_app.poll: once per round, after the timers. */
static void lg_poll(struct fp_evl *evl)
{
	struct lg_worker *w = fp_evl_user(evl);
	struct lg_engine *e;
	uint64_t now, t0;

	if (!w)
		return;
	e = w->e;
	now = fp_tsc_ns();
	lg_after_send(w, now);
	switch (w->phase) {
	case PH_RUN:
		if (e->cfg->closed) {
			if (now >= w->t_end) {
				w->phase = PH_DRAIN;
				w->drain_deadline_ns = w->t_end + e->timeout_ns;
			}
		} else if (w->next_ns <= (double)now + w->after_send_ns) {
			lg_run_due(w, now);
		}
		break;
	case PH_DRAIN:
		if (!w->outstanding || now >= w->drain_deadline_ns)
			lg_finish(w, now);
		break;
	case PH_CONNECT:
		break;
	case PH_CONNECTED:
		if (atomic_load(&e->n_connected) == e->n_workers)
			lg_start_preload(w);
		break;
	case PH_PRELOAD:
		if (w->outstanding || w->pre_next < w->pre_end)
			break;
		w->phase = PH_PRELOADED;
		if (atomic_fetch_add(&e->n_preloaded, 1) + 1 == e->n_workers)
			atomic_store(&e->t0, now + LG_START_MARGIN_NS);
		break;
	case PH_PRELOADED:
		if ((t0 = atomic_load(&e->t0)) != 0)
			lg_start_run(w, t0);
		break;
	case PH_DONE:
		break;
	}
}

/* Worker 0: a line per point every worker has published; the end once all are done. */
static void lg_progress(struct lg_worker *w)
{
	struct lg_engine *e = w->e;

	while (w->printed < e->n_points) {
		struct lg_progress sum = { 0 };
		unsigned i = w->printed;

		for (unsigned k = 0; k < e->n_workers; k++) {
			struct lg_worker *o = e->workers[k];
			const struct lg_progress *p;

			if (atomic_load_explicit(&o->published, memory_order_acquire) <= i)
				return;
			p = &o->prog[i];
			sum.scheduled += p->scheduled;
			sum.completed += p->completed;
			sum.errors += p->errors;
			sum.timeouts += p->timeouts;
			sum.dropped += p->dropped;
			sum.p99_ns = p->p99_ns > sum.p99_ns ? p->p99_ns : sum.p99_ns;
		}
		if (!e->cfg->quiet)
			lg_print_progress(stderr, e->cfg, i, &sum);
		w->printed++;
	}
	if (atomic_load(&e->n_drained) == e->n_workers) {
		atomic_store(&e->finished, true);
		fp_ctx_stop(fp_evl_ctx(w->evl), 0);
	}
}

/* The loop gaps since the last tick go to the point the present belongs to (a gap is seen
 * only once the loop runs again, so it lands in the point it ended in). */
static void lg_note_gaps(struct lg_worker *w, uint64_t now)
{
	uint64_t n, ns, stalls;
	struct lg_point *pt;

	fp_ctx_gaps(fp_evl_ctx(w->evl), &n, &ns, &stalls);
	if ((pt = lg_pt_now(w, now)) != NULL) {
		pt->loop_gaps += n - w->gaps_seen;
		pt->loop_gap_ns += ns - w->gap_ns_seen;
		pt->loop_stalls += stalls - w->stalls_seen;
	}
	w->gaps_seen = n;
	w->gap_ns_seen = ns;
	w->stalls_seen = stalls;
}

/* Every LG_SWEEP_US: a slice of the connections for timeouts and reconnects; progress. */
static void lg_tick(struct fp_timer *t, uint64_t now_us)
{
	struct lg_worker *w = fp_container_of(t, struct lg_worker, tick);
	struct lg_engine *e = w->e;
	uint64_t now = fp_tsc_ns();
	unsigned lo = (unsigned)((uint64_t)w->n_conns * w->slice / LG_SWEEP_SLICES);
	unsigned hi = (unsigned)((uint64_t)w->n_conns * (w->slice + 1) / LG_SWEEP_SLICES);

	w->slice = (w->slice + 1) % LG_SWEEP_SLICES;
	lg_note_gaps(w, now);
	if (w->phase == PH_CONNECT && now >= w->connect_deadline_ns) {
		lg_fail(w, -ETIMEDOUT, "%u of %u connections to %s not established after %.1f s "
			"(is the server up and accepting?)", w->n_conns - w->n_up, w->n_conns,
			e->cfg->server, (double)(now - w->init_ns) / 1e9);
		return;
	}
	for (unsigned i = lo; i < hi && w->phase >= PH_PRELOAD && w->phase < PH_DONE; i++) {
		struct lg_conn *cn = &w->conns[i];

		if (e->cfg->ops->datagram) {
			unsigned n = 0;
			while (n < cn->n_in && now - lg_slot(w, cn, n)->sched_ns > e->timeout_ns)
				n++;
			lg_udp_lost(w, cn, n);
			if (n)
				lg_refill(w, cn, now);
		} else if (cn->state == CONN_UP && cn->n_in &&
		    now - lg_slot(w, cn, 0)->sched_ns > e->timeout_ns)
			lg_conn_reset(w, cn, WHY_TIMEOUT, true, now);
		else if (cn->state == CONN_DOWN)
			lg_reconnect(w, cn, now);
	}
	lg_publish_due(w, now, false);
	if (w->id == 0 && w->phase >= PH_PRELOAD)  /* every worker has run init by then */
		lg_progress(w);
	fp_ctx_timer_add(fp_evl_ctx(w->evl), &w->tick, now_us + LG_SWEEP_US);
}

/* ---- a worker's life ---- */

static void lg_worker_free(struct lg_worker *w)
{
	if (!w)
		return;
	free(w->conns);
	free(w->ring);
	free(w->buf);
	free(w->points);
	free(w->prog);
	free(w);
}

static struct lg_worker *lg_worker_new(struct lg_engine *e, unsigned id)
{
	const struct lg_config *cfg = e->cfg;
	struct lg_worker *w = aligned_alloc(FP_CACHE_LINE, (sizeof(*w) + FP_CACHE_LINE - 1) &
					    ~(size_t)(FP_CACHE_LINE - 1));

	if (!w)
		return NULL;
	memset(w, 0, sizeof(*w));
	w->e = e;
	w->id = id;
	w->n_conns = cfg->conns / e->n_workers + (id < cfg->conns % e->n_workers);
	w->depth = cfg->closed ? cfg->closed : cfg->depth;
	w->cap = w->depth + (cfg->closed ? 0 : cfg->backlog);
	if (w->cap < LG_PRELOAD_DEPTH)
		w->cap = LG_PRELOAD_DEPTH;
	w->buf_cap = cfg->ops->max_request(e->proto);
	w->conns = calloc(w->n_conns, sizeof(*w->conns));
	w->ring = calloc((size_t)w->n_conns * w->cap, sizeof(*w->ring));
	w->buf = malloc(w->buf_cap);
	w->points = calloc(e->n_points, sizeof(*w->points));
	w->prog = calloc(e->n_points, sizeof(*w->prog));
	if (!w->conns || !w->ring || !w->buf || !w->points || !w->prog) {
		lg_worker_free(w);
		return NULL;
	}
	atomic_init(&w->published, 0);
	lg_rng_seed(&w->rng, cfg->seed + 0x9e3779b97f4a7c15ull * (id + 1));
	w->arr = cfg->arrival;
	if (w->arr.kind == LG_ARRIVAL_TRACE && w->arr.trace_n)
		w->arr.trace_pos = (size_t)id * w->arr.trace_n / e->n_workers;
	for (unsigned i = 0; i < e->n_points; i++) {
		struct lg_point *pt = &w->points[i];
		lg_point_init(pt, lg_point_target(cfg, i), lg_point_len_s(cfg, i));
		pt->gap_rate = pt->target_rps / e->n_workers;
	}
	return w;
}

static int lg_init(struct fp_evl *evl, void *arg)
{
	struct lg_engine *e = arg;
	unsigned id = fp_ctx_worker(fp_evl_ctx(evl));
	struct lg_worker *w;

	if (id >= e->n_workers || !(w = lg_worker_new(e, id)))
		return -ENOMEM;
	w->evl = evl;
	w->init_ns = fp_tsc_ns();
	w->connect_deadline_ns = w->init_ns + 5 * FP_NS_PER_S +
				 (uint64_t)e->cfg->conns * (FP_NS_PER_S / 2000);
	e->workers[id] = w;
	fp_evl_set_user(evl, w);
	fp_timer_init(&w->tick, lg_tick);
	fp_ctx_timer_add(fp_evl_ctx(evl), &w->tick, fp_ctx_now_us(fp_evl_ctx(evl)) + LG_SWEEP_US);
	lg_start_connects(w);
	return 0;
}

static void lg_fini(struct fp_evl *evl)
{
	struct lg_worker *w = fp_evl_user(evl);

	if (!w)
		return;
	fp_ctx_timer_cancel(fp_evl_ctx(evl), &w->tick);
	if (w->phase != PH_DONE)
		w->stop_ns = fp_tsc_ns();
	/* evl resets the connections still open after this; no callback follows. */
	fp_evl_set_user(evl, NULL);
}

static const struct fp_evl_ops lg_ops = {
	.connected = lg_connected,
	.read = lg_read,
	.drained = lg_drained,
	.closed = lg_closed,
	.init = lg_init,
	.fini = lg_fini,
	.poll = lg_poll,
	.udp_recv = lg_udp_recv,
};

/* ---- the run, and merging its points ---- */

/* How many points started, given the workers' stop times; the last one may be partial. */
static unsigned lg_started(const struct lg_engine *e, uint64_t *stop)
{
	const struct lg_worker *w0 = e->workers[0];
	unsigned n = 0;

	*stop = 0;
	for (unsigned k = 0; k < e->n_workers; k++)
		if (e->workers[k] && e->workers[k]->stop_ns > *stop)
			*stop = e->workers[k]->stop_ns;
	if (!w0 || !w0->t0)
		return 0;
	while (n < e->n_points && (double)w0->t_meas + e->seg_ns * n < (double)*stop)
		n++;
	return n;
}

static int lg_merge(struct lg_engine *e, struct lg_result *res)
{
	const struct lg_config *cfg = e->cfg;
	bool finished = atomic_load(&e->finished);
	struct lg_rng rng;
	uint64_t stop;
	unsigned n = lg_started(e, &stop);

	res->interrupted = !finished;
	res->points = n ? calloc(n, sizeof(*res->points)) : NULL;
	if (n && !res->points)
		return -ENOMEM;
	lg_rng_seed(&rng, cfg->seed ^ 0x6d65726765ull);
	for (unsigned i = 0; i < n; i++) {
		struct lg_point *pt = &res->points[i];
		const struct lg_worker *w0 = e->workers[0];
		double start = (double)w0->t_meas + e->seg_ns * i, end = lg_seg_end(w0, (int)i);

		lg_point_init(pt, lg_point_target(cfg, i), lg_point_len_s(cfg, i));
		for (unsigned k = 0; k < e->n_workers; k++)
			lg_point_merge(pt, &e->workers[k]->points[i], &rng);
		pt->target_rps = lg_point_target(cfg, i);
		pt->gap_rate = pt->target_rps / e->n_workers;
		pt->duration_s = lg_point_len_s(cfg, i);
		/* Interrupted: the point under way is partial; in the drain, the last one
		 * (whole, but what was still outstanding is in no count). */
		if (!finished && ((double)stop < end || i + 1 == e->n_points)) {
			pt->partial = true;
			if ((double)stop < end)
				pt->duration_s = ((double)stop - start) / 1e9;
		}
	}
	res->n_points = n;
	for (unsigned k = 0; k < e->n_workers; k++) {
		res->preload_keys += e->workers[k]->pre_keys;
		res->preload_errors += e->workers[k]->pre_errors;
	}
	if (e->workers[0]->t0)
		res->setup_s = (double)(e->workers[0]->t0 - e->workers[0]->init_ns) / 1e9;
	return 0;
}

static void lg_engine_setup(struct lg_engine *e, const struct lg_config *cfg)
{
	e->cfg = cfg;
	e->n_workers = cfg->rt.n_workers;
	e->n_points = lg_config_points(cfg);
	e->seg_ns = lg_seg_s(cfg) * 1e9;
	e->warm_ns = cfg->warmup_s * 1e9;
	e->meas_ns = lg_meas_s(cfg) * 1e9;
	e->timeout_ns = (uint64_t)(cfg->timeout_ms * 1e6);
	e->grace_ns = e->timeout_ns < LG_PROGRESS_GRACE_NS ? e->timeout_ns : LG_PROGRESS_GRACE_NS;
	e->pattern_max = fmax(cfg->pattern.lo, cfg->pattern.hi);
	e->cdf = cfg->closed || cfg->pattern.kind != LG_PATTERN_NONE ? NULL
		 : lg_arrival_cdf(&cfg->arrival);
	atomic_init(&e->n_connected, 0);
	atomic_init(&e->n_preloaded, 0);
	atomic_init(&e->n_drained, 0);
	atomic_init(&e->t0, 0);
	atomic_init(&e->finished, false);
	atomic_init(&e->failed, 0);
}

int lg_engine_run(const struct lg_config *cfg, struct lg_result *res)
{
	struct lg_engine *e = calloc(1, sizeof(*e));
	struct fp_app app;
	int rc;

	memset(res, 0, sizeof(*res));
	if (!e)
		return snprintf(res->error, sizeof(res->error), "out of memory"), -ENOMEM;
	lg_engine_setup(e, cfg);
	e->proto = cfg->ops->create(&cfg->proto, res->error, sizeof(res->error));
	if (!e->proto) {
		free(e);
		return -EINVAL;
	}
	cfg->ops->describe(e->proto, res->workload, sizeof(res->workload));
	fp_evl_app(&app, &lg_ops, e);
	app.name = "fp-loadgen";
	rc = fp_rt_run(&cfg->rt, &app);
	if (atomic_load(&e->failed)) {
		snprintf(res->error, sizeof(res->error), "%s", e->error);
		rc = rc ? rc : -EIO;
	} else if (rc == 0 && (!e->workers[0] || lg_merge(e, res))) {
		snprintf(res->error, sizeof(res->error), "out of memory merging the results");
		rc = -ENOMEM;
	}
	for (unsigned k = 0; k < e->n_workers; k++)
		lg_worker_free(e->workers[k]);
	cfg->ops->destroy(e->proto);
	free(e);
	return rc;
}

void lg_result_free(struct lg_result *res)
{
	free(res->points);
	res->points = NULL;
	res->n_points = 0;
}
