/* api.c: the worker context behind api.h: call and condition arrays, the round, timers, stop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/compiler.h>
#include <flowplane/log.h>

#include "defs.h"

#define RT_ARRAY_INIT 256

uint64_t rt_now_us(void)
{
	struct timespec ts;

	if (fp_unlikely(rt_vcycles))   /* a simulator's virtual time (virtual.c) */
		return fp_cycles_to_ns(rt_vcycles()) / 1000u;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t rt_unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int rt_ctx_init(struct fp_ctx *ctx, struct rt_run *run, unsigned worker,
		const struct rt_transport_ops *tops, void *tp, uint64_t now_us)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->tops = tops;
	ctx->tp = tp;
	ctx->run = run;
	ctx->worker = worker;
	ctx->n_workers = run->cfg->n_workers;
	ctx->now_us = now_us;
	ctx->cap_calls = ctx->cap_rets = ctx->cap_conds = RT_ARRAY_INIT;
	ctx->calls = calloc(ctx->cap_calls, sizeof(*ctx->calls));
	ctx->rets = calloc(ctx->cap_rets, sizeof(*ctx->rets));
	ctx->conds = calloc(ctx->cap_conds, sizeof(*ctx->conds));
	if (!ctx->calls || !ctx->rets || !ctx->conds) {
		rt_ctx_fini(ctx);
		return -ENOMEM;
	}
	fp_timer_wheel_init(&ctx->timers, now_us);
	ctx->stats = rt_stats_worker(run, worker);
	if (!ctx->stats)
		ctx->stats = &ctx->stats_local;
	return 0;
}

void rt_ctx_fini(struct fp_ctx *ctx)
{
	free(ctx->calls);
	free(ctx->rets);
	free(ctx->conds);
	ctx->calls = ctx->rets = NULL;
	ctx->conds = NULL;
}

/* Double @*arr (of @*cap elements of @size bytes); aborts on ENOMEM: a worker that cannot
 * grow its call array cannot keep its API's promise, and this is at most a few MB. */
static void rt_grow(void **arr, unsigned *cap, size_t size)
{
	unsigned ncap = *cap ? *cap * 2 : 8;
	void *n = realloc(*arr, (size_t)ncap * size);

	if (!n) {
		log_err("rt: out of memory growing a worker array to %u entries", ncap);
		abort();
	}
	memset((char *)n + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
	*arr = n;
	*cap = ncap;
}

void rt_reserve(void **arr, unsigned *cap, unsigned need, size_t size)
{
	while (*cap < need)
		rt_grow(arr, cap, size);
}

struct fp_call *fp_call_push(struct fp_ctx *ctx, uint16_t type)
{
	struct fp_call *c;

	if (fp_unlikely(ctx->n_calls == ctx->cap_calls))
		rt_grow((void **)&ctx->calls, &ctx->cap_calls, sizeof(*ctx->calls));
	c = &ctx->calls[ctx->n_calls++];
	memset(c, 0, sizeof(*c));
	c->type = type;
	return c;
}

struct fp_cond *rt_cond_push(struct fp_ctx *ctx)
{
	struct fp_cond *c;

	if (fp_unlikely(ctx->n_conds == ctx->cap_conds))
		rt_grow((void **)&ctx->conds, &ctx->cap_conds, sizeof(*ctx->conds));
	c = &ctx->conds[ctx->n_conds++];
	memset(c, 0, sizeof(*c));
	return c;
}

void rt_conds_forget(struct fp_ctx *ctx, const struct fp_flow *f)
{
	unsigned j = ctx->conds_batch;

	for (unsigned i = j; i < ctx->n_conds; i++)
		if (ctx->conds[i].flow != f)
			ctx->conds[j++] = ctx->conds[i];
	ctx->n_conds = j;
}

/*
 * Execute the queued calls in order, in place, and make the array next round's returns
 * (IX overwrites the call array with return codes). A call executed here may queue
 * conditions (a failed connect), which go up in the next round.
 */
unsigned rt_ctx_flush(struct fp_ctx *ctx)
{
	unsigned n = ctx->n_calls, n_run = n, i, k;
	struct fp_call *tmp;
	unsigned tcap;

	if (!n)
		return 0;
	if (!ctx->run->sh) {
		for (i = 0; i < n; i++)
			ctx->tops->exec(ctx, &ctx->calls[i]);
	} else {   /* --sched steal: a flow's returns go with the flow (steal.c) */
		for (i = k = 0; i < n; i++) {
			enum rt_out o = rt_steal_exec_outside(ctx, &ctx->calls[i]);

			if (o == RT_OUT_PLAIN)
				ctx->tops->exec(ctx, &ctx->calls[i]);
			if (o != RT_OUT_FLOW)
				ctx->calls[k++] = ctx->calls[i];
		}
		ctx->stats->calls += n - k;
		if (!k) {
			ctx->n_calls = 0;
			return n;
		}
		n = ctx->n_calls = k;
	}
	ctx->stats->calls += n;
	if (ctx->n_rets) {
		/* Returns not yet handed up (a timer's calls after a round's): append. */
		while (ctx->n_rets + n > ctx->cap_rets)
			rt_grow((void **)&ctx->rets, &ctx->cap_rets, sizeof(*ctx->rets));
		memcpy(&ctx->rets[ctx->n_rets], ctx->calls, (size_t)n * sizeof(*ctx->calls));
		ctx->n_rets += n;
		ctx->n_calls = 0;
		return n_run;
	}
	tmp = ctx->rets;
	tcap = ctx->cap_rets;
	ctx->rets = ctx->calls;
	ctx->cap_rets = ctx->cap_calls;
	ctx->n_rets = n;
	ctx->calls = tmp;
	ctx->cap_calls = tcap;
	ctx->n_calls = 0;
	return n_run;
}

unsigned rt_ctx_round(struct fp_ctx *ctx)
{
	if (ctx->run->sh)
		return rt_steal_round(ctx);
	if (ctx->run->app_steal)
		return rt_app_steal_round(ctx);
	if (ctx->run->flush_us && ctx->tops->flush && ctx->n_conds > 1)
		return rt_ctx_round_chunked(ctx);
	return rt_ctx_round_plain(ctx);
}

/* The last condition of the flow that condition @i knocks for (KNOCK: a new connection);
 * @i itself when it is not a KNOCK or nothing follows for that flow. */
static unsigned knock_end(const struct fp_ctx *ctx, unsigned i, unsigned n)
{
	unsigned last = i;

	if (ctx->conds[i].type != FP_COND_KNOCK)
		return i;
	for (unsigned j = i + 1; j < n; j++)
		if (ctx->conds[j].flow == ctx->conds[i].flow)
			last = j;
	return last;
}

/* The chunk's calls just ran (their returns in ctx->rets): the conditions [@from, @to) of
 * flows one of them closed or reset are dropped, those after them moved down; how many.
 * After CLOSE or ABORT the application hears nothing more of a flow, as in a plain round,
 * which hands every condition up before any call runs. (A RECV's bytes are the flow's,
 * released with it.) */
static unsigned forget_closed(struct fp_ctx *ctx, unsigned from, unsigned to)
{
	unsigned j = from, dropped;
	bool any = false;

	for (unsigned r = 0; r < ctx->n_rets && !any; r++)
		any = (ctx->rets[r].type == FP_CALL_CLOSE || ctx->rets[r].type == FP_CALL_ABORT) &&
		      !ctx->rets[r].ret;
	if (!any)
		return 0;
	for (unsigned i = from; i < to; i++) {
		bool closed = false;

		for (unsigned r = 0; r < ctx->n_rets && !closed; r++)
			closed = ctx->rets[r].flow == ctx->conds[i].flow && !ctx->rets[r].ret &&
				 (ctx->rets[r].type == FP_CALL_CLOSE ||
				  ctx->rets[r].type == FP_CALL_ABORT);
		if (!closed)
			ctx->conds[j++] = ctx->conds[i];
	}
	dropped = to - j;
	memmove(ctx->conds + j, ctx->conds + to, (size_t)(ctx->n_conds - to) * sizeof(*ctx->conds));
	ctx->n_conds -= dropped;
	return dropped;
}

/*
 * --flush-us: a partitioned round whose handler would otherwise hold every reply of its
 * batch until the last request of it is done (IX's batching: with 10 µs requests and 64
 * frames a round, the first reply waits for 63 others). The handler gets the conditions
 * in chunks, each as many as ran in --flush-us so far (the first one alone); after each,
 * its calls are executed, and what they sent leaves once handlers have run --flush-us since
 * the last send. A new connection's conditions stay in the chunk of its KNOCK; a flow a
 * chunk's calls closed or reset hears nothing more (forget_closed). Returns and conditions
 * keep their order; a call's return reaches the handler's next call, as between rounds;
 * conditions queued while executing the calls wait for the next round.
 */
unsigned rt_ctx_round_chunked(struct fp_ctx *ctx)
{
	const struct fp_app *app = ctx->run->app;
	unsigned n = ctx->n_conds;
	uint64_t gap = fp_ns_to_cycles((uint64_t)ctx->run->flush_us * 1000);
	uint64_t start = rt_cycles(), sent = start, t = start;
	unsigned done = 0, i = 0;

	while (i < n) {
		uint64_t ran = t - start, k = i && ran ? gap * i / ran : 1;   /* per gap so far */
		unsigned j = i, end;

		if (!k)
			k = 1;
		end = k < n - i ? i + (unsigned)k : n;
		for (; j < end; j++) {   /* a KNOCK's flow stays in its chunk */
			unsigned last = knock_end(ctx, j, n);

			if (last >= end)
				end = last + 1;
		}
		app->handle(ctx, ctx->conds + i, end - i, ctx->rets, ctx->n_rets);
		ctx->stats->conds += end - i;
		ctx->stats->flush_chunks += i > 0;
		ctx->n_rets = 0;
		ctx->conds_batch = n;
		done += rt_ctx_flush(ctx);
		ctx->conds_batch = 0;
		n -= forget_closed(ctx, end, n);
		i = end;
		t = rt_cycles();
		if (i < n && t - sent >= gap) {
			ctx->tops->flush(ctx);
			ctx->stats->flush_sends++;
			sent = t;
		}
	}
	/* what executing the calls queued goes up next round */
	memmove(ctx->conds, ctx->conds + n, (size_t)(ctx->n_conds - n) * sizeof(*ctx->conds));
	ctx->n_conds -= n;
	return done;
}

unsigned rt_ctx_round_plain(struct fp_ctx *ctx)
{
	const struct fp_app *app = ctx->run->app;
	unsigned n_rets = ctx->n_rets;

	if (!ctx->n_conds && !n_rets)
		return rt_ctx_flush(ctx);
	app->handle(ctx, ctx->conds, ctx->n_conds, ctx->rets, n_rets);
	ctx->stats->conds += ctx->n_conds;
	ctx->n_conds = 0;
	/* The handler has seen these returns; the calls it queued replace them. */
	ctx->n_rets = 0;
	return rt_ctx_flush(ctx);
}

unsigned rt_ctx_timers(struct fp_ctx *ctx, uint64_t now_us)
{
	unsigned fired;

	ctx->now_us = now_us;
	fired = fp_timer_run(&ctx->timers, now_us);
	if (ctx->run->app->poll) {
		ctx->run->app->poll(ctx);
		if (ctx->n_calls)
			fired++;
	}
	if (ctx->n_calls)
		rt_ctx_flush(ctx);
	return fired;
}

uint64_t rt_ctx_next_us(const struct fp_ctx *ctx)
{
	return fp_timer_next_us(&ctx->timers);
}

/* ---- api.h accessors ---- */

unsigned fp_ctx_worker(const struct fp_ctx *ctx) { return ctx->worker; }
unsigned fp_ctx_workers(const struct fp_ctx *ctx) { return ctx->n_workers; }
bool fp_ctx_steals(const struct fp_ctx *ctx) { return ctx->run->sh || ctx->run->app_steal; }
uint64_t fp_ctx_now_us(const struct fp_ctx *ctx) { return ctx->now_us; }
const char *fp_ctx_transport(const struct fp_ctx *ctx) { return ctx->tops->name; }
uint32_t fp_ctx_local_addr(const struct fp_ctx *ctx) { return ctx->local_addr; }
void fp_ctx_set_user(struct fp_ctx *ctx, void *user) { ctx->user = user; }
void *fp_ctx_user(const struct fp_ctx *ctx) { return ctx->user; }

void fp_ctx_timer_add(struct fp_ctx *ctx, struct fp_timer *t, uint64_t deadline_us)
{
	fp_timer_add(&ctx->timers, t, deadline_us);
}

void fp_ctx_timer_cancel(struct fp_ctx *ctx, struct fp_timer *t)
{
	fp_timer_cancel(&ctx->timers, t);
}

void fp_ctx_stop(struct fp_ctx *ctx, int status)
{
	int zero = 0;

	if (status)
		atomic_compare_exchange_strong(&ctx->run->status, &zero, status);
	atomic_store(&ctx->run->stop, true);
}

void fp_ctx_count(struct fp_ctx *ctx, uint64_t ops, uint64_t errors)
{
	ctx->stats->app_ops += ops;
	ctx->stats->app_errors += errors;
}

void fp_ctx_gaps(const struct fp_ctx *ctx, uint64_t *count, uint64_t *total_ns,
		 uint64_t *long_count)
{
	uint64_t n = 0;

	*count = ctx->stats->gaps;
	*total_ns = ctx->stats->gap_ns;
	for (unsigned b = 20; b < FP_RT_LOG2_BUCKETS; b++)   /* bucket 20: [2^19, 2^20) ns */
		n += ctx->stats->gap_ns_hist[b];
	*long_count = n;
}
