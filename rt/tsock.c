/* tsock.c: blocking sockets for user-level threads (tsock.h): a scheduler per worker inside the event-callback layer, its callbacks waking the threads that wait. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/compiler.h>
#include <flowplane/evl.h>
#include <flowplane/timer.h>
#include <flowplane/tsock.h>

#define TS_RX_MAX (256u << 10)   /* bytes taken from evl and held here per connection */
#define TS_ROUND_NS 20000        /* --sched steal: threads start for this long a round */

struct tw;

struct fp_tlistener {
	struct tw *w;
	struct fp_tsock *head, *tail;     /* accepted, not yet taken */
	struct fp_thread *waiter;         /* blocked in fp_tsock_accept */
	struct fp_tlistener *next;
};

struct fp_tsock {
	struct tw *w;
	struct fp_evl_conn *c;            /* NULL once the peer closed it (evl's closed) */
	struct fp_tsock *next;            /* accept queue */
	struct fp_tsock *prev_all, *next_all;
	uint8_t *rx;
	size_t rx_off, rx_len, rx_cap;    /* unread bytes: rx[rx_off .. rx_off + rx_len) */
	bool refused;                     /* read left bytes in evl: ask for them again */
	bool eof;
	int err;                          /* the peer's reset, or the run stopping */
	struct fp_thread *reader, *writer;
	/* the blocked reader's request, completed here at home before it wakes (it may
	 * then resume on another worker: --sched steal) */
	uint8_t *rd_buf;
	size_t rd_len;
	ssize_t *rd_ret;
};

/* One per worker. */
struct tw {
	struct fp_evl *evl;
	struct fp_tsched *sched;
	const struct fp_tapp *app;
	struct fp_tsock *all;             /* every open socket, for the stop */
	struct fp_tlistener *listeners;
	struct fp_timer tick;             /* the earliest sleeper's wake-up */
	uint64_t tick_us;                 /* when it is armed for; 0: not armed */
	bool stopping;
	bool steal;                       /* --sched steal: other workers take ready threads */
	unsigned next_victim;
};

static __thread struct tw *tls_w;
static struct tw **all_w;                 /* by worker: whom to steal from */
static unsigned n_all_w;

/* tls_w after a possible move to another OS thread (thread.h: not merged with a read
 * made before the move). */
static __attribute__((noinline)) struct tw *tw_here(void)
{
	__asm__ volatile("" ::: "memory");
	return tls_w;
}

/* Every call of a thread runs at its home: a thread another worker stole goes back
 * first (thread.h), and its worker's state is this OS thread's. */
static struct tw *need_tw(const char *fn)
{
	fp_thread_home();
	struct tw *w = tw_here();

	if (!w || !fp_thread_self()) {
		fprintf(stderr, "flowplane: %s called outside a thread of fp_tapp_run\n", fn);
		abort();
	}
	return w;
}

unsigned fp_tapp_worker(void)
{
	return fp_ctx_worker(fp_evl_ctx(need_tw("fp_tapp_worker")->evl));
}

void fp_tapp_count(uint64_t requests, uint64_t errors)
{
	fp_ctx_count(fp_evl_ctx(need_tw("fp_tapp_count")->evl), requests, errors);
}

size_t fp_tapp_out_total(void)
{
	return fp_evl_out_total(need_tw("fp_tapp_out_total")->evl);
}

void fp_tapp_stop(int status)
{
	fp_ctx_stop(fp_evl_ctx(need_tw("fp_tapp_stop")->evl), status);
}

/* ---- running the threads: once per round, and at a sleeper's time ---- */

static void on_tick(struct fp_timer *t, uint64_t now_us);

static void run_threads(struct tw *w)
{
	tls_w = w;
	if (w->steal)   /* a short round: its writes leave, what is left may be stolen */
		fp_tsched_run_for(w->sched, TS_ROUND_NS);
	else
		fp_tsched_run_ready(w->sched);
	/* A sleeping thread must wake the worker even if nothing else does. */
	uint64_t next = fp_tsched_next_wake_ns(w->sched);
	uint64_t us = next ? next / 1000 + 1 : 0;
	if (us != w->tick_us) {
		struct fp_ctx *ctx = fp_evl_ctx(w->evl);
		if (w->tick_us)
			fp_ctx_timer_cancel(ctx, &w->tick);
		if (us)
			fp_ctx_timer_add(ctx, &w->tick, us);
		w->tick_us = us;
	}
}

static void on_tick(struct fp_timer *t, uint64_t now_us)
{
	struct tw *w = fp_container_of(t, struct tw, tick);

	(void)now_us;
	w->tick_us = 0;
	run_threads(w);
}

static void ts_poll(struct fp_evl *evl)
{
	run_threads(fp_evl_user(evl));
}

static void *main_thread(void *arg)
{
	struct tw *w = arg;

	w->app->main(w->app->arg);
	return NULL;
}

static int ts_init(struct fp_evl *evl, void *arg)
{
	const struct fp_tapp *app = arg;
	struct tw *w = calloc(1, sizeof(*w));
	struct fp_tsched_config sc = { .stack_size = app->stack_size };

	if (!w || !(w->sched = fp_tsched_create(&sc))) {
		free(w);
		return -ENOMEM;
	}
	w->evl = evl;
	w->app = app;
	w->steal = fp_ctx_steals(fp_evl_ctx(evl));
	fp_tsched_set_stealable(w->sched, w->steal);
	fp_timer_init(&w->tick, on_tick);
	fp_evl_set_user(evl, w);
	struct fp_thread *t = fp_thread_spawn(w->sched, main_thread, w);
	if (!t) {
		fp_tsched_destroy(w->sched);
		free(w);
		return -ENOMEM;
	}
	fp_thread_detach(t);
	run_threads(w);   /* main listens now, before the first frame */
	if (fp_ctx_worker(fp_evl_ctx(evl)) < n_all_w)
		__atomic_store_n(&all_w[fp_ctx_worker(fp_evl_ctx(evl))], w, __ATOMIC_RELEASE);
	/* tests (as rt/steal.c's flows): every ready thread runs on a thief, once main has
	 * started listening; a thread still comes home for every call */
	if (w->steal && n_all_w > 1 && getenv("FP_RT_STEAL_FORCE"))
		fp_tsched_set_thieves_only(w->sched, true);
	return 0;
}

static void sock_unlink(struct fp_tsock *s)
{
	struct tw *w = s->w;

	if (s->prev_all)
		s->prev_all->next_all = s->next_all;
	else if (w->all == s)
		w->all = s->next_all;
	if (s->next_all)
		s->next_all->prev_all = s->prev_all;
	s->prev_all = s->next_all = NULL;
}

static void wake(struct fp_thread **t)
{
	if (*t) {
		fp_thread_wake(*t);
		*t = NULL;
	}
}

/* The blocked reader's read ends with @r (a count, 0 at EOF, -errno): set here, at home,
 * before it wakes, so it returns without touching the socket wherever it resumes. */
static void complete_read(struct fp_tsock *s, ssize_t r)
{
	if (s->rd_ret) {
		*s->rd_ret = r;
		s->rd_ret = NULL;
	}
	wake(&s->reader);
}

/* The run stops: everyone waiting gets an error and the threads run out. */
static void ts_fini(struct fp_evl *evl)
{
	struct tw *w = fp_evl_user(evl);

	w->stopping = true;
	if (fp_ctx_worker(fp_evl_ctx(evl)) < n_all_w)   /* every loop has ended: nobody steals */
		__atomic_store_n(&all_w[fp_ctx_worker(fp_evl_ctx(evl))], NULL, __ATOMIC_RELEASE);
	for (struct fp_tlistener *l = w->listeners; l; l = l->next)
		wake(&l->waiter);
	for (struct fp_tsock *s = w->all; s; s = s->next_all) {
		s->err = s->err ? s->err : -ECANCELED;
		complete_read(s, s->err);
		wake(&s->writer);
	}
	tls_w = w;
	fp_tsched_run_ready(w->sched);
	if (w->tick_us)
		fp_ctx_timer_cancel(fp_evl_ctx(evl), &w->tick);
	/* Sockets no thread closed: evl resets their connections after fini. */
	while (w->all) {
		struct fp_tsock *s = w->all;
		sock_unlink(s);
		if (s->c)
			fp_evl_conn_set_user(s->c, NULL);
		free(s->rx);
		free(s);
	}
	while (w->listeners) {
		struct fp_tlistener *l = w->listeners;
		w->listeners = l->next;
		while (l->head) {   /* accepted, never taken */
			struct fp_tsock *s = l->head;
			l->head = s->next;
			fp_evl_conn_set_user(s->c, NULL);
			free(s);
		}
		free(l);
	}
	fp_tsched_destroy(w->sched);   /* a thread still blocked keeps its stack: leaked */
	tls_w = NULL;
	free(w);
}

/* ---- evl's callbacks: each wakes whoever waits for it ---- */

static void *ts_accept(struct fp_evl_conn *c, void *larg)
{
	struct fp_tlistener *l = larg;
	struct fp_tsock *s = calloc(1, sizeof(*s));

	if (!s || l->w->stopping) {
		free(s);
		return NULL;   /* refused: evl closes it */
	}
	s->w = l->w;
	s->c = c;
	if (l->tail)
		l->tail->next = s;
	else
		l->head = s;
	l->tail = s;
	wake(&l->waiter);
	return s;
}

static size_t ts_read(struct fp_evl_conn *c, const uint8_t *data, size_t len)
{
	struct fp_tsock *s = fp_evl_conn_user(c);
	size_t room, take;

	if (!s)
		return len;   /* accepted, never taken by a thread, and the run stopping */
	size_t given = 0;
	if (s->rd_ret && len) {   /* a reader waits (so nothing is buffered): its read ends */
		given = len < s->rd_len ? len : s->rd_len;
		memcpy(s->rd_buf, data, given);
		complete_read(s, (ssize_t)given);
		if (given == len)
			return len;
		data += given;
		len -= given;
	}
	if (s->rx_off && s->rx_off + s->rx_len + len > s->rx_cap) {
		memmove(s->rx, s->rx + s->rx_off, s->rx_len);
		s->rx_off = 0;
	}
	room = TS_RX_MAX > s->rx_off + s->rx_len ? TS_RX_MAX - s->rx_off - s->rx_len : 0;
	take = len < room ? len : room;
	if (s->rx_off + s->rx_len + take > s->rx_cap) {
		size_t cap = s->rx_cap ? s->rx_cap : 4096;
		while (cap < s->rx_off + s->rx_len + take)
			cap *= 2;
		uint8_t *p = realloc(s->rx, cap);
		if (!p)
			take = 0;   /* shown again later */
		else {
			s->rx = p;
			s->rx_cap = cap;
		}
	}
	if (take)   /* (on no memory s->rx may still be NULL) */
		memcpy(s->rx + s->rx_off + s->rx_len, data, take);
	s->rx_len += take;
	s->refused |= take < len;
	return given + take;
}

static void ts_drained(struct fp_evl_conn *c)
{
	struct fp_tsock *s = fp_evl_conn_user(c);

	if (s)
		wake(&s->writer);
}

static void ts_closed(struct fp_evl_conn *c, int status)
{
	struct fp_tsock *s = fp_evl_conn_user(c);

	if (!s)
		return;
	if (status) {
		s->c = NULL;   /* gone: evl frees it */
		s->err = status;
	} else {
		s->eof = true; /* half_close: still ours to write on and to close */
	}
	if (!s->rx_len)
		complete_read(s, s->err);   /* the reset's error, or 0: EOF */
	wake(&s->writer);
}

/* ---- --sched steal: workers take each other's ready threads (thread.h) ---- */

static bool ts_work_pending(struct fp_evl *evl, bool may_steal)
{
	struct tw *w = fp_evl_user(evl);

	if (!w)
		return false;
	if (fp_tsched_has_work(w->sched))   /* threads that came home */
		return true;
	for (unsigned i = 0; may_steal && i < n_all_w; i++) {
		struct tw *v = __atomic_load_n(&all_w[i], __ATOMIC_ACQUIRE);

		if (v && v != w && fp_tsched_stealable_ready(v->sched))
			return true;
	}
	return false;
}

/* One ready thread of another worker's, run here until its next call (which takes it
 * home); the victims in turn. */
static unsigned ts_steal(struct fp_evl *evl)
{
	struct tw *w = fp_evl_user(evl);

	if (!w || !n_all_w)
		return 0;
	for (unsigned k = 0; k < n_all_w; k++) {
		struct tw *v = __atomic_load_n(&all_w[(w->next_victim + k) % n_all_w],
					       __ATOMIC_ACQUIRE);

		if (v && v != w && fp_tsched_steal(w->sched, v->sched)) {
			w->next_victim = (w->next_victim + k + 1) % n_all_w;
			return 1;
		}
	}
	return 0;
}

static void ts_ready(struct fp_evl *evl, uint64_t *put, uint64_t *taken)
{
	struct tw *w = fp_evl_user(evl);
	struct fp_tsched_counts c = { 0 };

	if (w)
		fp_tsched_counts(w->sched, &c);
	*put = c.put;
	*taken = c.taken;
}

static const struct fp_evl_ops ts_ops_default = {
	.accept = ts_accept,
	.read = ts_read,
	.drained = ts_drained,
	.closed = ts_closed,
	.init = ts_init,
	.fini = ts_fini,
	.poll = ts_poll,
	.half_close = true,   /* a read's 0 is the peer's EOF; writes go on until close */
	.work_pending = ts_work_pending,
	.steal = ts_steal,
	.ready = ts_ready,
};

int fp_tapp_run(const struct fp_rt_config *cfg, const struct fp_tapp *app)
{
	struct fp_app a;

	struct fp_evl_ops ops = ts_ops_default;   /* lives as long as fp_rt_run */

	ops.max_pending = app->max_pending;
	ops.max_total_pending = app->max_total_pending;
	fp_evl_app(&a, &ops, (void *)app);
	a.name = app->name;
	all_w = calloc(cfg->n_workers ? cfg->n_workers : 1, sizeof(*all_w));
	if (!all_w)
		return -ENOMEM;
	n_all_w = cfg->n_workers ? cfg->n_workers : 1;
	int rc = fp_rt_run(cfg, &a);
	free(all_w);
	all_w = NULL;
	n_all_w = 0;
	return rc;
}

/* ---- what threads call ---- */

struct fp_tlistener *fp_tsock_listen(uint16_t port)
{
	struct tw *w = need_tw("fp_tsock_listen");
	struct fp_tlistener *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->w = w;
	l->next = w->listeners;
	w->listeners = l;
	fp_evl_listen(w->evl, port, l);
	return l;
}

struct fp_tsock *fp_tsock_accept(struct fp_tlistener *l)
{
	struct tw *w = need_tw("fp_tsock_accept");
	struct fp_tsock *s;

	while (!l->head) {
		if (w->stopping)
			return NULL;
		l->waiter = fp_thread_self();
		fp_thread_block();
		fp_thread_home();   /* (woken, it may have been stolen) */
	}
	s = l->head;
	if (!(l->head = s->next))
		l->tail = NULL;
	s->next = NULL;
	s->next_all = w->all;
	if (w->all)
		w->all->prev_all = s;
	w->all = s;
	return s;
}

ssize_t fp_tsock_read(struct fp_tsock *s, void *buf, size_t len)
{
	struct tw *w = need_tw("fp_tsock_read");

	if (!s->rx_len) {
		if (s->err)
			return s->err;
		if (s->eof || !len)
			return 0;
		/* wait: evl's callbacks end the read here at home (complete_read), and the
		 * thread goes on wherever it is run next */
		ssize_t r = 0;
		s->reader = fp_thread_self();
		s->rd_buf = buf;
		s->rd_len = len;
		s->rd_ret = &r;
		fp_thread_block();
		return r;
	}
	size_t n = len < s->rx_len ? len : s->rx_len;
	memcpy(buf, s->rx + s->rx_off, n);
	s->rx_off += n;
	s->rx_len -= n;
	if (!s->rx_len)
		s->rx_off = 0;
	if (s->refused && s->c) {   /* evl kept what did not fit: room now */
		s->refused = false;
		fp_evl_read_again(s->c);
	}
	if (w->steal)
		fp_thread_yield();   /* behind the other ready threads: a thief may run what
				      * this one does with its input */
	return (ssize_t)n;
}

ssize_t fp_tsock_write(struct fp_tsock *s, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	size_t done = 0;

	need_tw("fp_tsock_write");
	while (done < len) {
		if (s->err || !s->c)
			return -EPIPE;
		size_t room = fp_evl_room(s->c), n = len - done < room ? len - done : room;
		if (n && fp_evl_write(s->c, p + done, n) == 0) {
			done += n;
			continue;
		}
		s->writer = fp_thread_self();   /* full: wait until it drains */
		fp_thread_block();
		fp_thread_home();
	}
	return (ssize_t)len;
}

size_t fp_tsock_room(const struct fp_tsock *s)
{
	fp_thread_home();
	return s->err || !s->c ? 0 : fp_evl_room(s->c);
}

size_t fp_tsock_pending(const struct fp_tsock *s)
{
	fp_thread_home();
	return s->err || !s->c ? 0 : fp_evl_pending(s->c);
}

int fp_tsock_try_writev(struct fp_tsock *s, const struct iovec *iov, unsigned n)
{
	need_tw("fp_tsock_try_writev");
	if (s->err || !s->c)
		return -EPIPE;
	return fp_evl_writev(s->c, iov, n);
}

int fp_tsock_wait_drained(struct fp_tsock *s)
{
	need_tw("fp_tsock_wait_drained");
	while (s->c && !s->err && fp_evl_pending(s->c)) {
		s->writer = fp_thread_self();   /* evl's drained wakes it */
		fp_thread_block();
		fp_thread_home();
	}
	return s->c && !s->err ? 0 : -EPIPE;
}

void fp_tsock_peer(const struct fp_tsock *s, uint32_t *addr, uint16_t *port)
{
	fp_thread_home();
	*addr = s->c ? fp_evl_conn_raddr(s->c) : 0;
	*port = s->c ? fp_evl_conn_rport(s->c) : 0;
}

void fp_tsock_abort(struct fp_tsock *s)
{
	need_tw("fp_tsock_abort");
	if (s->c) {
		fp_evl_conn_set_user(s->c, NULL);
		fp_evl_abort(s->c);   /* evl forgets it: no callback follows */
		s->c = NULL;
	}
	if (!s->err)
		s->err = -ECONNABORTED;
	complete_read(s, s->err);
	wake(&s->writer);
}

void fp_tsock_close(struct fp_tsock *s)
{
	need_tw("fp_tsock_close");
	sock_unlink(s);
	if (s->c) {
		fp_evl_conn_set_user(s->c, NULL);
		fp_evl_close(s->c);
	}
	free(s->rx);
	free(s);
}
