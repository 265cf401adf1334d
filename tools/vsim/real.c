/* real.c: fp-vsim's real world: one pinned thread per worker, and a generator as the NIC. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/clock.h>

#include "vsim.h"

/*
 * The same worker loop as the virtual world (model.c), on real cores: each worker thread
 * is pinned to its core and loops vs_step() until every request is answered, spinning
 * each request's service time on the TSC. The generator thread, pinned to a core of its
 * own, plays the NIC with RSS: it posts every request to its home worker's queue (a
 * single-producer ring) at the request's scheduled time, so arrivals are open loop and
 * latency runs from the scheduled time (a late generator is counted, not hidden).
 */

struct real_ctx {
	struct vs_run *r;
	uint64_t t0;                 /* ns: the schedule's zero */
	volatile int go;
	volatile int stop;
};

struct wk_arg {
	struct real_ctx *x;
	unsigned id;
};

static int pin_attr(pthread_attr_t *at, int core)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(core, &set);
	return pthread_attr_setaffinity_np(at, sizeof(set), &set) ? -EINVAL : 0;
}

static int pin_self(int core)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(core, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) ? -EINVAL : 0;
}

static __thread struct vs_core *self_core;

/* SIGUSR1: ZygOS's IPI, delivered as a signal to the worker's thread. */
static void on_irq(int sig)
{
	int saved = errno;

	(void)sig;
	if (self_core)
		vs_irq_real(self_core);
	errno = saved;
}

static void *worker(void *p)
{
	struct wk_arg *a = p;
	struct vs_core *c = &a->x->r->core[a->id];

	self_core = c;
	while (!__atomic_load_n(&a->x->go, __ATOMIC_ACQUIRE))
		__builtin_ia32_pause();
	while (!__atomic_load_n(&a->x->stop, __ATOMIC_ACQUIRE))
		if (!vs_step(c))
			__builtin_ia32_pause();
	return NULL;
}

/* Post every request at its time; the main thread then waits for the replies. */
static int generate(struct real_ctx *x)
{
	struct vs_run *r = x->r;
	const struct vs_config *cfg = r->cfg;

	for (uint64_t i = 0; i < cfg->requests; i++) {
		struct vs_req *q = &r->req[i];
		struct vs_core *c = &r->core[vs_home_of(r, q->flow)];
		uint64_t due = x->t0 + q->t_arr, now;
		void *obj = q;

		while ((now = fp_tsc_ns()) < due)
			__builtin_ia32_pause();
		q->t_arr = due;                   /* latency counts from the scheduled time */
		if (now - due > 1000)
			r->gen_late_count++;
		if (now - due > r->gen_late_max_ns)
			r->gen_late_max_ns = now - due;
		while (!fp_ring_sp_enqueue_burst(c->nic, &obj, 1))
			__builtin_ia32_pause();   /* a full NIC queue waits: never dropped */
	}
	return 0;
}

static uint64_t answered(const struct vs_run *r)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < r->cfg->n; i++)
		n += __atomic_load_n(&r->core[i].done_total, __ATOMIC_ACQUIRE);
	return n;
}

/* Wait until every request is answered; -ETIMEDOUT when none is for 5 s (a bug, or
 * workers starved of their cores), rather than spinning for ever. */
static int wait_answers(struct vs_run *r)
{
	uint64_t last = 0, since = fp_tsc_ns(), n;

	while ((n = answered(r)) < r->cfg->requests) {
		uint64_t now = fp_tsc_ns();

		if (n != last) {
			last = n;
			since = now;
		} else if (now - since > 5 * FP_NS_PER_S) {
			return -ETIMEDOUT;
		}
		for (int i = 0; i < 64; i++)
			__builtin_ia32_pause();
	}
	return 0;
}

int vs_real(struct vs_run *r)
{
	const struct vs_config *cfg = r->cfg;
	struct real_ctx x = {.r = r};
	pthread_t th[VS_MAX_CORES];
	struct wk_arg args[VS_MAX_CORES];
	uint32_t qsize = 1;
	unsigned started = 0;
	int rc = 0;

	if (cfg->notify == VS_NOTIFY_IPI) {
		struct sigaction sa = {.sa_handler = on_irq};

		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART;
		sigaction(SIGUSR1, &sa, NULL);
	}
	while (qsize < cfg->requests + 1 && qsize < (1u << 20))
		qsize <<= 1;
	for (unsigned i = 0; i < cfg->n; i++)
		if (!(r->core[i].nic = fp_ring_create(qsize)))
			rc = -ENOMEM;
	for (unsigned i = 0; !rc && i < cfg->n; i++) {
		pthread_attr_t at;

		args[i] = (struct wk_arg){.x = &x, .id = i};
		pthread_attr_init(&at);
		rc = pin_attr(&at, cfg->cores[i]);
		if (!rc && pthread_create(&th[i], &at, worker, &args[i]))
			rc = -EINVAL;         /* the core is not ours (affinity, cpuset) */
		if (!rc)
			r->core[i].thread = th[i];
		pthread_attr_destroy(&at);
		if (rc)
			break;
		started++;
	}
	if (!rc)
		rc = pin_self(cfg->cores[cfg->n]);
	if (!rc) {
		x.t0 = fp_tsc_ns() + 1000000;     /* 1 ms for the workers to reach their loops */
		__atomic_store_n(&x.go, 1, __ATOMIC_RELEASE);
		generate(&x);
		rc = wait_answers(r);
		r->end_ns = fp_tsc_ns() - x.t0;
	}
	__atomic_store_n(&x.go, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&x.stop, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(th[i], NULL);
	}
	for (unsigned i = 0; i < cfg->n; i++)
		free(r->core[i].nic);
	if (!rc)
		for (uint64_t i = 0; i < cfg->requests; i++)
			r->req[i].t_arr -= x.t0;
	return rc;
}
