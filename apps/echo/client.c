/* client.c: fp-echo client (IX's echo benchmark) and pingpong (NetPIPE-style latency). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/evl.h>

#include "echo.h"

/*
 * client: each worker keeps --conns connections; each sends --size bytes, waits for the
 * same bytes back, and after --rounds round trips resets the connection (IX, after mTCP:
 * "clients close the connection using a reset (TCP RST) to avoid exhausting ephemeral
 * ports") and opens a new one. Two timers per worker open and close the measurement
 * window; the worker whose window closes first stops the run, and every worker closes
 * its own window in fini, so a worker's rate is over its own window.
 *
 * pingpong: worker 0 keeps one connection with one message in flight and records the
 * round trip of each after --warmup of them, until --count are recorded.
 */

struct cl_worker;

struct cl_slot {
	struct cl_worker *w;
	struct fp_evl_conn *c;          /* NULL while waiting to reconnect */
	uint64_t sent_ns;
	size_t got;                     /* bytes of the current echo received */
	uint64_t rounds;                /* round trips on this connection */
	struct fp_timer retry;
};

struct cl_worker {
	struct fp_evl *evl;
	const struct echo_opts *o;
	struct echo_result *res;
	uint8_t *msg;
	struct cl_slot *slots;
	unsigned n_slots;
	bool measuring;
	struct fp_timer t_start, t_end;
};

uint64_t echo_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The pattern every message carries, so an echo can be checked byte for byte. */
static uint8_t cl_pattern(size_t i) { return (uint8_t)(i * 131u + 7u); }

static void cl_error(struct cl_worker *w, int err)
{
	w->res->errors++;
	if (!w->res->first_error)
		w->res->first_error = err;
	fp_ctx_count(fp_evl_ctx(w->evl), 0, 1);
}

static void cl_connect(struct cl_slot *s)
{
	const struct echo_opts *o = s->w->o;

	s->got = 0;
	s->rounds = 0;
	s->c = fp_evl_connect(s->w->evl, o->server_addr, o->server_port, s);
	if (!s->c) {
		cl_error(s->w, -ENOMEM);
		fp_ctx_timer_add(fp_evl_ctx(s->w->evl), &s->retry,
				 fp_ctx_now_us(fp_evl_ctx(s->w->evl)) + ECHO_RETRY_US);
	}
}

/* A connection failed or ended early: count it, and try again a little later (pingpong
 * has nothing to measure without its connection: it stops). */
static void cl_lost(struct cl_slot *s, int err)
{
	struct cl_worker *w = s->w;
	struct fp_ctx *ctx = fp_evl_ctx(w->evl);

	s->c = NULL;
	cl_error(w, err);
	if (w->o->mode == ECHO_PINGPONG) {
		fp_ctx_stop(ctx, 0);
		return;
	}
	fp_ctx_timer_add(ctx, &s->retry, fp_ctx_now_us(ctx) + ECHO_RETRY_US);
}

static void cl_retry_fn(struct fp_timer *t, uint64_t now_us)
{
	struct cl_slot *s = (struct cl_slot *)(void *)((char *)t - offsetof(struct cl_slot, retry));

	(void)now_us;
	if (!s->c)
		cl_connect(s);
}

static void cl_send(struct cl_slot *s)
{
	int rc;

	s->got = 0;
	s->sent_ns = echo_now_ns();
	rc = fp_evl_write(s->c, s->w->msg, s->w->o->size);
	if (rc) {
		fp_evl_abort(s->c);
		cl_lost(s, rc);
	}
}

static void cl_connected(struct fp_evl_conn *c, int status)
{
	struct cl_slot *s = fp_evl_conn_user(c);

	if (status) {
		cl_lost(s, status);
		return;
	}
	if (s->w->measuring)
		s->w->res->conns++;
	cl_send(s);
}

/* One echo completed on @s. */
static void cl_round_trip(struct cl_slot *s)
{
	struct cl_worker *w = s->w;
	struct echo_result *r = w->res;
	const struct echo_opts *o = w->o;
	uint64_t rtt = echo_now_ns() - s->sent_ns;

	r->total_msgs++;
	s->rounds++;
	fp_ctx_count(fp_evl_ctx(w->evl), 1, 0);
	if (o->mode == ECHO_PINGPONG) {
		if (r->total_msgs == o->warmup_n + 1) {
			r->measured = true;
			r->start_ns = s->sent_ns;
		}
		if (r->total_msgs > o->warmup_n) {
			fp_hist_record(&r->rtt_ns, rtt);
			r->msgs++;
		}
		if (r->msgs == o->count) {
			r->end_ns = echo_now_ns();
			fp_evl_abort(s->c);
			s->c = NULL;
			fp_ctx_stop(fp_evl_ctx(w->evl), 0);
			return;
		}
	} else if (w->measuring) {
		fp_hist_record(&r->rtt_ns, rtt);
		r->msgs++;
	}
	if (o->rounds && s->rounds == o->rounds) {
		fp_evl_abort(s->c);
		cl_connect(s);
		return;
	}
	cl_send(s);
}

static size_t cl_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct cl_slot *s = fp_evl_conn_user(c);
	size_t size = s->w->o->size;

	if (s->got + len > size) {      /* more than was sent: not an echo */
		fp_evl_abort(c);
		cl_lost(s, -EPROTO);
		return len;
	}
	for (size_t i = 0; i < len; i++) {
		if (data[i] != cl_pattern(s->got + i)) {
			fp_evl_abort(c);
			cl_lost(s, -EILSEQ);
			return len;
		}
	}
	s->got += len;
	if (s->got == size)
		cl_round_trip(s);
	return len;
}

static void cl_closed(struct fp_evl_conn *c, int status)
{
	cl_lost(fp_evl_conn_user(c), status ? status : -ECONNRESET);
}

static struct cl_worker *cl_of_timer(struct fp_timer *t, size_t off)
{
	return (struct cl_worker *)(void *)((char *)t - off);
}

static void cl_start_fn(struct fp_timer *t, uint64_t now_us)
{
	struct cl_worker *w = cl_of_timer(t, offsetof(struct cl_worker, t_start));

	(void)now_us;
	w->measuring = true;
	w->res->measured = true;
	w->res->start_ns = echo_now_ns();
}

static void cl_end_window(struct cl_worker *w)
{
	if (!w->measuring)
		return;
	w->measuring = false;
	w->res->end_ns = echo_now_ns();
}

static void cl_end_fn(struct fp_timer *t, uint64_t now_us)
{
	struct cl_worker *w = cl_of_timer(t, offsetof(struct cl_worker, t_end));

	(void)now_us;
	cl_end_window(w);
	fp_ctx_stop(fp_evl_ctx(w->evl), 0);
}

static int cl_init(struct fp_evl *evl, void *arg)
{
	const struct echo_run *run = arg;
	const struct echo_opts *o = run->o;
	struct fp_ctx *ctx = fp_evl_ctx(evl);
	unsigned worker = fp_ctx_worker(ctx);
	struct cl_worker *w;
	uint64_t now = fp_ctx_now_us(ctx);

	if (worker >= o->rt.n_workers)
		return -EINVAL;
	if (!(w = calloc(1, sizeof(*w))))
		return -ENOMEM;
	w->evl = evl;
	w->o = o;
	w->res = &run->res[worker];
	fp_evl_set_user(evl, w);
	if (o->mode == ECHO_PINGPONG && worker != 0)
		return 0;       /* one connection in all */
	w->n_slots = o->mode == ECHO_PINGPONG ? 1 : o->conns;
	w->slots = calloc(w->n_slots, sizeof(*w->slots));
	w->msg = malloc(o->size);
	if (!w->slots || !w->msg) {
		free(w->slots);  /* a failed init gets no fini */
		free(w->msg);
		free(w);
		fp_evl_set_user(evl, NULL);
		return -ENOMEM;
	}
	for (size_t i = 0; i < o->size; i++)
		w->msg[i] = cl_pattern(i);
	if (o->mode == ECHO_CLIENT) {
		uint64_t warm = (uint64_t)(o->warmup_s * 1e6), dur = (uint64_t)(o->duration_s * 1e6);

		fp_timer_init(&w->t_start, cl_start_fn);
		fp_timer_init(&w->t_end, cl_end_fn);
		if (warm)
			fp_ctx_timer_add(ctx, &w->t_start, now + warm);
		else
			cl_start_fn(&w->t_start, now);
		fp_ctx_timer_add(ctx, &w->t_end, now + warm + dur);
	}
	for (unsigned i = 0; i < w->n_slots; i++) {
		struct cl_slot *s = &w->slots[i];

		s->w = w;
		fp_timer_init(&s->retry, cl_retry_fn);
		cl_connect(s);
	}
	return 0;
}

static void cl_fini(struct fp_evl *evl)
{
	struct cl_worker *w = fp_evl_user(evl);
	struct fp_ctx *ctx = fp_evl_ctx(evl);

	if (!w)
		return;
	cl_end_window(w);
	fp_ctx_timer_cancel(ctx, &w->t_start);
	fp_ctx_timer_cancel(ctx, &w->t_end);
	for (unsigned i = 0; i < w->n_slots; i++) {
		fp_ctx_timer_cancel(ctx, &w->slots[i].retry);
		if (w->slots[i].c)
			fp_evl_abort(w->slots[i].c);   /* RST, as between rounds */
	}
	free(w->slots);
	free(w->msg);
	free(w);
}

static const struct fp_evl_ops cl_ops = {
	.connected = cl_connected,
	.read = cl_read,
	.closed = cl_closed,
	.init = cl_init,
	.fini = cl_fini,
	.max_pending = ECHO_MAX_PENDING,
};

/* ---- the report ---- */

struct cl_total {
	uint64_t msgs, conns, errors, total_msgs;
	double msgs_per_s, conns_per_s, window_s;
	int first_error;
	struct fp_hist_summary rtt;
};

static void cl_sum(const struct echo_opts *o, const struct echo_result *res, struct fp_hist *h,
		   struct cl_total *t)
{
	memset(t, 0, sizeof(*t));
	fp_hist_init(h);
	for (unsigned i = 0; i < o->rt.n_workers; i++) {
		const struct echo_result *r = &res[i];
		double win = r->measured && r->end_ns > r->start_ns ?
			(double)(r->end_ns - r->start_ns) / 1e9 : 0;

		t->msgs += r->msgs;
		t->conns += r->conns;
		t->errors += r->errors;
		t->total_msgs += r->total_msgs;
		if (!t->first_error)
			t->first_error = r->first_error;
		if (win > 0) {   /* each worker's rate over its own window, summed */
			t->msgs_per_s += (double)r->msgs / win;
			t->conns_per_s += (double)r->conns / win;
			if (win > t->window_s)
				t->window_s = win;
		}
		fp_hist_merge(h, &r->rtt_ns);
	}
	fp_hist_summarize(h, &t->rtt);
}

static double us(uint64_t ns) { return (double)ns / 1000.0; }

static void cl_print(const struct echo_opts *o, const struct cl_total *t)
{
	const struct fp_hist_summary *h = &t->rtt;

	if (o->mode == ECHO_CLIENT) {
		printf("fp-echo client: %s, %u worker%s x %u connections, %zu B messages, ",
		       o->server_str, o->rt.n_workers, o->rt.n_workers == 1 ? "" : "s", o->conns,
		       o->size);
		if (o->rounds)
			printf("%llu round trips per connection\n", (unsigned long long)o->rounds);
		else
			printf("connections kept open\n");
		printf("  window       %10.2f s (after %.2f s warm-up)\n", t->window_s, o->warmup_s);
		printf("  messages     %10llu  %12.1f /s  (%.3f Gb/s each way)\n",
		       (unsigned long long)t->msgs, t->msgs_per_s,
		       t->msgs_per_s * (double)o->size * 8 / 1e9);
		printf("  connections  %10llu  %12.1f /s\n", (unsigned long long)t->conns,
		       t->conns_per_s);
	} else {
		printf("fp-echo pingpong: %s, %zu B messages, %llu measured after %llu warm-up\n",
		       o->server_str, o->size, (unsigned long long)t->msgs,
		       (unsigned long long)o->warmup_n);
		if (h->mean > 0)
			printf("  one-way      %10.2f us  %12.1f Mb/s (NetPIPE: size / half the RTT)\n",
			       h->mean / 2000.0, (double)o->size * 8 * 2000.0 / h->mean);
	}
	printf("  errors       %10llu", (unsigned long long)t->errors);
	if (t->first_error)
		printf("  (first: %s)", strerror(-t->first_error));
	printf("\n  rtt us       p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n",
	       us(h->p50), us(h->p90), us(h->p99), us(h->p999), us(h->max), h->mean / 1000.0);
}

static int cl_json(const struct echo_opts *o, const struct cl_total *t)
{
	const struct fp_hist_summary *h = &t->rtt;
	FILE *f = fopen(o->json, "w");

	if (!f) {
		fprintf(stderr, "fp-echo %s: --json %s: %s\n", o->cmd, o->json, strerror(errno));
		return -1;
	}
	fprintf(f, "{\n  \"mode\": \"%s\",\n  \"transport\": \"%s\",\n  \"server\": \"%s\",\n"
		"  \"workers\": %u,\n  \"size\": %zu,\n",
		o->cmd, fp_rt_transport_name(o->rt.transport), o->server_str,
		o->rt.n_workers, o->size);
	if (o->mode == ECHO_CLIENT)
		fprintf(f, "  \"conns\": %u,\n  \"rounds\": %llu,\n  \"warmup_s\": %.3f,\n"
			"  \"duration_s\": %.3f,\n  \"window_s\": %.6f,\n  \"msgs_per_s\": %.1f,\n"
			"  \"connections\": %llu,\n  \"conns_per_s\": %.1f,\n",
			o->conns, (unsigned long long)o->rounds, o->warmup_s, o->duration_s,
			t->window_s, t->msgs_per_s, (unsigned long long)t->conns, t->conns_per_s);
	else
		fprintf(f, "  \"count\": %llu,\n  \"warmup\": %llu,\n",
			(unsigned long long)o->count, (unsigned long long)o->warmup_n);
	fprintf(f, "  \"messages\": %llu,\n  \"round_trips_total\": %llu,\n  \"errors\": %llu,\n"
		"  \"rtt_us\": {\"count\": %llu, \"min\": %.3f, \"mean\": %.3f, \"p50\": %.3f, "
		"\"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f}\n}\n",
		(unsigned long long)t->msgs, (unsigned long long)t->total_msgs,
		(unsigned long long)t->errors, (unsigned long long)h->count, us(h->min),
		h->mean / 1000.0, us(h->p50), us(h->p90), us(h->p99), us(h->p999), us(h->max));
	if (fclose(f)) {
		fprintf(stderr, "fp-echo %s: --json %s: %s\n", o->cmd, o->json, strerror(errno));
		return -1;
	}
	return 0;
}

int echo_client_run(const struct echo_opts *o)
{
	struct echo_run run = { .o = o };
	struct fp_hist *h = malloc(sizeof(*h));
	struct cl_total t;
	struct fp_app app;
	int rc, ret = 0;

	run.res = calloc(o->rt.n_workers, sizeof(*run.res));
	if (!run.res || !h) {
		fprintf(stderr, "fp-echo %s: out of memory\n", o->cmd);
		free(run.res);
		free(h);
		return 1;
	}
	for (unsigned i = 0; i < o->rt.n_workers; i++)
		fp_hist_init(&run.res[i].rtt_ns);
	fp_evl_app(&app, &cl_ops, &run);
	app.name = o->mode == ECHO_CLIENT ? "fp-echo client" : "fp-echo pingpong";
	rc = fp_rt_run(&o->rt, &app);
	if (rc) {
		ret = 1;        /* startup failed: fp_rt_run said why */
		goto out;
	}
	cl_sum(o, run.res, h, &t);
	cl_print(o, &t);
	if (o->json && cl_json(o, &t))
		ret = 1;
	if (!t.msgs) {
		fprintf(stderr, "fp-echo %s: no round trip completed (%llu errors%s%s)\n", o->cmd,
			(unsigned long long)t.errors, t.first_error ? ", first: " : "",
			t.first_error ? strerror(-t.first_error) : "");
		ret = 1;
	}
out:
	free(run.res);
	free(h);
	return ret;
}
