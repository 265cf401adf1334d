/* micro_thread.c: user-level threads (rt/thread.c) beside glibc's swapcontext and Linux threads: ns per switch, per spawn-and-join. */
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <flowplane/thread.h>

#include "bench.h"

/*
 * Issue 19's goal: at most 10 ns a switch and 100 ns to spawn and run a thread. (The
 * switch's ending, ret or jmp, was compared by editing rt/thread_switch.S: its comment and
 * docs/results.md have the figures.) A "switch"
 * here is one thread giving the CPU to another: a yield between two threads is one switch;
 * spawn-and-join is a spawn (a cached stack), a switch to the child, its return and a
 * switch back. The peers do the same thing their way: glibc's swapcontext (it saves and
 * restores the signal mask: a system call each time), and two Linux threads on one CPU
 * handing a token through a futex (two kernel switches a round trip).
 */

static void *yielder(void *arg)
{
	uint64_t n = *(uint64_t *)arg;

	for (uint64_t i = 0; i < n; i++)
		fp_thread_yield();
	return NULL;
}

static void run_yields(void *arg, uint64_t n_ops)
{
	struct fp_tsched *s = arg;
	uint64_t per = n_ops / 2;

	fp_thread_detach(fp_thread_spawn(s, yielder, &per));
	fp_thread_detach(fp_thread_spawn(s, yielder, &per));
	fp_tsched_run(s);
}

static void *nothing(void *arg) { return arg; }

static void *spawner(void *arg)
{
	uint64_t n = *(uint64_t *)arg, sum = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += (uintptr_t)fp_thread_join(fp_thread_spawn(NULL, nothing, (void *)(uintptr_t)i));
	bench_sink(sum);
	return NULL;
}

static void run_spawns(void *arg, uint64_t n_ops)
{
	struct fp_tsched *s = arg;

	fp_thread_detach(fp_thread_spawn(s, spawner, &n_ops));
	fp_tsched_run(s);
}

/* ---- glibc's swapcontext ---- */

static ucontext_t uc_main, uc_a, uc_b;
static uint64_t uc_left;

static void uc_body(void)
{
	for (;;) {
		if (!uc_left--)
			swapcontext(&uc_b, &uc_main);
		swapcontext(&uc_b, &uc_a);
	}
}

static void run_swapcontext(void *arg, uint64_t n_ops)
{
	(void)arg;
	static char stack[65536];

	getcontext(&uc_b);
	uc_b.uc_stack.ss_sp = stack;
	uc_b.uc_stack.ss_size = sizeof(stack);
	uc_b.uc_link = NULL;
	makecontext(&uc_b, uc_body, 0);
	uc_left = n_ops / 2;
	/* a: this side; each round trip a->b->a is two switches */
	while (uc_left)
		swapcontext(&uc_a, &uc_b);
}

/* ---- two Linux threads on one CPU, a futex token ---- */

struct futex_pp {
	_Atomic uint32_t turn;
	uint64_t n;
	int cpu;
};

static void fwait(_Atomic uint32_t *f, uint32_t v)
{
	while (atomic_load(f) == v)
		syscall(SYS_futex, f, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void fwake(_Atomic uint32_t *f, uint32_t v)
{
	atomic_store(f, v);
	syscall(SYS_futex, f, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *futex_peer(void *arg)
{
	struct futex_pp *p = arg;

	bench_pin(p->cpu);
	for (uint64_t i = 0; i < p->n; i++) {
		fwait(&p->turn, 0);
		fwake(&p->turn, 0);
	}
	return NULL;
}

static void run_futex(void *arg, uint64_t n_ops)
{
	struct futex_pp *p = arg;
	pthread_t t;

	p->n = n_ops / 2;
	atomic_store(&p->turn, 0);
	pthread_create(&t, NULL, futex_peer, p);
	for (uint64_t i = 0; i < p->n; i++) {
		fwake(&p->turn, 1);
		fwait(&p->turn, 1);
	}
	pthread_join(t, NULL);
}

void bench_thread(const struct bench_opts *o)
{
	struct fp_tsched *s = fp_tsched_create(NULL);
	struct futex_pp fp = { .cpu = o->cpu };

	if (!s) {
		perror("fp-micro: fp_tsched_create");
		return;
	}
	bench_case(o, "thread: yield, one switch (flowplane uthreads)", run_yields, s, 2000000);
	bench_case(o, "thread: spawn, run, join (cached stack)", run_spawns, s, 1000000);
	bench_case(o, "thread: glibc swapcontext, one switch", run_swapcontext, NULL, 200000);
	bench_case(o, "thread: Linux threads, one CPU, futex hand-off", run_futex, &fp, 100000);
	fp_tsched_destroy(s);
}
