/* test_thread.c: user-level threads (rt/thread.c): order, join, thousands of threads, mutexes and condition variables under contention, sleep, and a stack overflow caught by the guard page. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>

#include <flowplane/thread.h>

#include "harness.h"

/* ---- order: FIFO run queue, yield goes to the back ---- */

static char trace[64];
static unsigned trace_n;

static void *tracer(void *arg)
{
	char c = (char)(uintptr_t)arg;

	for (int i = 0; i < 3; i++) {
		trace[trace_n++] = c;
		fp_thread_yield();
	}
	return (void *)(uintptr_t)(c + 1);
}

static void yields_take_turns(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(NULL);
	struct fp_thread *a, *b, *c;

	assert_non_null(s);
	trace_n = 0;
	a = fp_thread_spawn(s, tracer, (void *)'a');
	b = fp_thread_spawn(s, tracer, (void *)'b');
	c = fp_thread_spawn(s, tracer, (void *)'c');
	assert_int_equal(fp_tsched_run(s), 0);
	trace[trace_n] = '\0';
	assert_string_equal(trace, "abcabcabc");
	assert_int_equal((uintptr_t)fp_thread_join(a), 'b');
	assert_int_equal((uintptr_t)fp_thread_join(b), 'c');
	assert_int_equal((uintptr_t)fp_thread_join(c), 'd');
	assert_null(fp_tsched_self());
	fp_tsched_destroy(s);
}

/* ---- join, spawn from a thread, detach, and many threads ---- */

static void *leaf(void *arg)
{
	fp_thread_yield();
	return (void *)((uintptr_t)arg * 2);
}

static void *parent(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	struct fp_thread **kids = malloc(n * sizeof(*kids));
	uint64_t sum = 0;

	for (unsigned i = 0; i < n; i++)
		kids[i] = fp_thread_spawn(NULL, leaf, (void *)(uintptr_t)i);
	for (unsigned i = 0; i < n; i++) {
		assert_non_null(kids[i]);
		sum += (uintptr_t)fp_thread_join(kids[i]);   /* blocks until it returns */
	}
	free(kids);
	return (void *)(uintptr_t)sum;
}

static unsigned detached_ran;

static void *detached(void *arg)
{
	(void)arg;
	fp_thread_yield();
	detached_ran++;
	return NULL;
}

static void join_many_and_detach(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(&(struct fp_tsched_config){ .stack_size = 16384 });
	const unsigned n = 5000;

	struct fp_thread *p = fp_thread_spawn(s, parent, (void *)(uintptr_t)n);
	detached_ran = 0;
	for (int i = 0; i < 100; i++)
		fp_thread_detach(fp_thread_spawn(s, detached, NULL));
	assert_int_equal(fp_tsched_run(s), 0);
	assert_int_equal((uintptr_t)fp_thread_join(p), (uint64_t)n * (n - 1));
	assert_int_equal(detached_ran, 100);
	/* a dead thread detached after the run is freed at once */
	struct fp_thread *late = fp_thread_spawn(s, leaf, (void *)1);
	fp_tsched_run(s);
	fp_thread_detach(late);
	assert_true(fp_tsched_switches(s) > 2 * n);
	fp_tsched_destroy(s);
}

/* ---- a mutex held across yields, counted by many threads ---- */

static struct fp_mutex mu = FP_MUTEX_INIT;
static uint64_t counter, inside;

static void *incrementer(void *arg)
{
	unsigned rounds = (unsigned)(uintptr_t)arg;

	for (unsigned i = 0; i < rounds; i++) {
		fp_mutex_lock(&mu);
		assert_int_equal(inside++, 0);   /* nobody else in here */
		uint64_t v = counter;
		fp_thread_yield();               /* others run, and must wait for the lock */
		counter = v + 1;
		inside--;
		fp_mutex_unlock(&mu);
		if (i % 3 == 0)
			fp_thread_yield();
	}
	return NULL;
}

static void mutex_excludes(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(NULL);

	counter = inside = 0;
	for (int i = 0; i < 50; i++)
		fp_thread_detach(fp_thread_spawn(s, incrementer, (void *)200));
	assert_int_equal(fp_tsched_run(s), 0);
	assert_int_equal(counter, 50 * 200);
	assert_null(mu.owner);
	assert_true(fp_mutex_trylock(&mu) == false);   /* outside a thread: owner NULL */
	fp_tsched_destroy(s);
}

/* ---- a bounded queue with two condition variables ---- */

#define QCAP 4
static struct fp_mutex qm = FP_MUTEX_INIT;
static struct fp_condvar not_empty = FP_CONDVAR_INIT, not_full = FP_CONDVAR_INIT;
static uint64_t q[QCAP];
static unsigned q_head, q_len;

static void *producer(void *arg)
{
	uint64_t base = (uintptr_t)arg;

	for (uint64_t i = 0; i < 1000; i++) {
		fp_mutex_lock(&qm);
		while (q_len == QCAP)
			fp_condvar_wait(&not_full, &qm);
		q[(q_head + q_len++) % QCAP] = base + i;
		fp_condvar_signal(&not_empty);
		fp_mutex_unlock(&qm);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	uint64_t sum = 0, last[4] = { 0, 0, 0, 0 };
	unsigned n = (unsigned)(uintptr_t)arg;

	for (unsigned k = 0; k < n; k++) {
		fp_mutex_lock(&qm);
		while (!q_len)
			fp_condvar_wait(&not_empty, &qm);
		uint64_t v = q[q_head];
		q_head = (q_head + 1) % QCAP;
		q_len--;
		fp_condvar_broadcast(&not_full);
		fp_mutex_unlock(&qm);
		/* each producer's values arrive in its order */
		unsigned p = (unsigned)(v / 1000000);
		assert_true(v % 1000000 >= last[p]);
		last[p] = v % 1000000;
		sum += v;
	}
	return (void *)(uintptr_t)sum;
}

static void condvars_pass_everything(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(NULL);
	struct fp_thread *c;
	uint64_t want = 0;

	q_head = q_len = 0;
	c = fp_thread_spawn(s, consumer, (void *)4000);
	for (uint64_t p = 0; p < 4; p++) {
		fp_thread_detach(fp_thread_spawn(s, producer, (void *)(uintptr_t)(p * 1000000)));
		for (uint64_t i = 0; i < 1000; i++)
			want += p * 1000000 + i;
	}
	assert_int_equal(fp_tsched_run(s), 0);
	assert_int_equal((uintptr_t)fp_thread_join(c), want);
	fp_tsched_destroy(s);
}

/* ---- a thread that waits for nothing is reported, not hung on ---- */

static struct fp_condvar never = FP_CONDVAR_INIT;
static struct fp_mutex never_m = FP_MUTEX_INIT;

static void *waits_forever(void *arg)
{
	(void)arg;
	fp_mutex_lock(&never_m);
	fp_condvar_wait(&never, &never_m);
	fp_mutex_unlock(&never_m);
	return NULL;
}

static void deadlock_is_counted(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(NULL);

	fp_thread_spawn(s, waits_forever, NULL);
	assert_int_equal(fp_tsched_run(s), 1);   /* one thread blocked, nothing can run */
	/* (its stack is leaked with the scheduler's destroy: it never returned) */
	fp_tsched_destroy(s);
}

/* ---- sleep: order by deadline, never early ---- */

static uint64_t mono_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static char woke[8];
static unsigned woke_n;

static void *sleeper(void *arg)
{
	uint64_t us = (uintptr_t)arg, t0 = mono_us();

	fp_thread_sleep_us(us);
	assert_true(mono_us() - t0 >= us);
	woke[woke_n++] = (char)('0' + us / 1000);
	return NULL;
}

static void sleepers_wake_in_order(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(NULL);

	woke_n = 0;
	for (unsigned ms = 5; ms >= 1; ms--)
		fp_thread_detach(fp_thread_spawn(s, sleeper, (void *)(uintptr_t)(ms * 1000)));
	assert_int_equal(fp_tsched_run(s), 0);
	woke[woke_n] = '\0';
	assert_string_equal(woke, "12345");
	fp_tsched_destroy(s);
}

/* ---- a stack overflow hits the guard page and says so ---- */

static int recurse(volatile char *p, int depth)
{
	volatile char buf[1024];

	buf[0] = (char)depth;
	if (p)
		buf[1] = p[0];
	return depth > 1000000 ? buf[0] : recurse(buf, depth + 1) + buf[1];
}

static void *overflow(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)recurse(NULL, 0);
}

static void overflow_is_named(void **state)
{
	(void)state;
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 2);
		struct fp_tsched *s = fp_tsched_create(&(struct fp_tsched_config){ .stack_size = 32768 });
		fp_thread_spawn(s, overflow, NULL);
		fp_tsched_run(s);
		_exit(0);   /* not reached */
	}
	close(fds[1]);
	char buf[512] = { 0 };
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(buf) - 1 && (n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	close(fds[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	if (!strstr(buf, "overflowed its 32 KiB stack"))
		fail_msg("the child said: %s", buf);
}

/* ---- a blocking call outside a thread is named ---- */

static void blocking_outside_is_named(void **state)
{
	(void)state;
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct fp_mutex m = FP_MUTEX_INIT;
		dup2(fds[1], 2);
		fp_mutex_lock(&m);
		_exit(0);   /* not reached */
	}
	close(fds[1]);
	char buf[512] = { 0 };
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(n > 0 && WIFSIGNALED(st));
	assert_non_null(strstr(buf, "fp_mutex_lock called outside a user-level thread"));
}

/* ---- a bounded run: no thread starts after the budget ---- */

static unsigned ran_n;

static void *busy(void *arg)
{
	struct timespec a, b;

	(void)arg;
	ran_n++;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do   /* at least 100 us of work: past any budget below */
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 100000);
	return NULL;
}

static void run_for_starts_nothing_after_its_budget(void **state)
{
	(void)state;
	struct fp_tsched *s = fp_tsched_create(NULL);

	assert_non_null(s);
	ran_n = 0;
	for (int i = 0; i < 3; i++)
		fp_thread_detach(fp_thread_spawn(s, busy, NULL));
	fp_tsched_run_for(s, 1000);      /* the first starts; when it ends, 1 us has passed */
	assert_int_equal(ran_n, 1);
	assert_true(fp_tsched_has_work(s));
	assert_int_equal(fp_tsched_run(s), 0);
	assert_int_equal(ran_n, 3);
	fp_tsched_destroy(s);
}

/* ---- stealing: a visitor computes away and does everything else at home ---- */

static pthread_t where[4];

/* pthread_self() is declared const: the compiler may keep one call's value across a
 * switch, though the thread moved (thread.h says so). Read it through a barrier. */
static __attribute__((noinline)) pthread_t os_thread(void)
{
	__asm__ volatile("" ::: "memory");
	return pthread_self();
}

static void *visitor(void *arg)
{
	struct fp_mutex *m = arg;

	where[0] = os_thread();   /* the thief's OS thread: it was stolen */
	fp_thread_yield();           /* a visitor yields by going home */
	where[1] = os_thread();
	fp_mutex_lock(m);
	where[2] = os_thread();
	fp_mutex_unlock(m);
	return (void *)7;
}

struct thief {
	struct fp_tsched *home;
	_Atomic bool stop;
	_Atomic unsigned stolen;
	unsigned want;                /* steal at least this many, then while !stop */
};

static void *thief_main(void *arg)
{
	struct thief *th = arg;
	struct fp_tsched *s = fp_tsched_create(NULL);

	if (!s)
		return NULL;
	while (atomic_load(&th->stolen) < th->want || !atomic_load(&th->stop)) {
		if (fp_tsched_steal(s, th->home))
			atomic_fetch_add(&th->stolen, 1);
		else if (atomic_load(&th->stolen) >= th->want && atomic_load(&th->stop))
			break;
	}
	struct fp_tsched_counts c;
	fp_tsched_counts(s, &c);
	atomic_store(&th->stolen, (unsigned)c.stolen);
	fp_tsched_destroy(s);
	return NULL;
}

static void a_stolen_thread_runs_away_then_home(void **state)
{
	(void)state;
	struct fp_tsched *h = fp_tsched_create(NULL);
	struct fp_mutex m = FP_MUTEX_INIT;
	struct thief th = { .want = 1, .stop = true };
	struct fp_tsched_counts c;
	pthread_t tid;

	assert_non_null(h);
	fp_tsched_set_stealable(h, true);
	struct fp_thread *t = fp_thread_spawn(h, visitor, &m);
	assert_non_null(t);
	th.home = h;
	assert_int_equal(pthread_create(&tid, NULL, thief_main, &th), 0);
	assert_int_equal(pthread_join(tid, NULL), 0);   /* it ran the thread until its yield */
	assert_true(pthread_equal(where[0], tid));
	assert_true(fp_tsched_has_work(h));             /* back in the home's inbox */
	assert_false(fp_tsched_stealable_ready(h));     /* and nobody else may take it */
	assert_int_equal(fp_tsched_run(h), 0);
	assert_true(pthread_equal(where[1], os_thread()));
	assert_true(pthread_equal(where[2], os_thread()));
	assert_ptr_equal(fp_thread_join(t), (void *)7);
	fp_tsched_counts(h, &c);
	assert_int_equal(c.came_home, 1);
	assert_int_equal(c.put, c.taken);
	assert_int_equal(th.stolen, 1);
	fp_tsched_destroy(h);
}

/* Many threads, a thief taking them while the home runs them too: every step of every
 * thread happens exactly once, the ones that need the home (the mutex, the end) there. */
#define ST_THREADS 2000
#define ST_STEPS   8

static struct fp_mutex st_mu = FP_MUTEX_INIT;
static unsigned long st_sum, st_away;
static pthread_t st_home;

static void *stepper(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	unsigned long local = 0;
	bool away = false;

	for (unsigned i = 0; i < ST_STEPS; i++) {
		local += id * 31 + i;                  /* computed wherever it runs */
		away |= !pthread_equal(os_thread(), st_home);
		fp_mutex_lock(&st_mu);                 /* at home */
		assert_true(pthread_equal(os_thread(), st_home));
		st_sum += local;
		local = 0;
		fp_mutex_unlock(&st_mu);
		fp_thread_yield();
	}
	if (away)
		st_away++;                             /* at home: it ends there */
	return NULL;
}

static void threads_are_stolen_and_all_steps_done_once(void **state)
{
	(void)state;
	struct fp_tsched *h = fp_tsched_create(NULL);
	struct thief th = { .want = 100 };
	unsigned long want = 0;
	pthread_t tid;

	assert_non_null(h);
	fp_tsched_set_stealable(h, true);
	st_home = os_thread();
	st_sum = st_away = 0;
	for (uintptr_t i = 0; i < ST_THREADS; i++) {
		struct fp_thread *t = fp_thread_spawn(h, stepper, (void *)i);
		assert_non_null(t);
		fp_thread_detach(t);
		for (unsigned k = 0; k < ST_STEPS; k++)
			want += i * 31 + k;
	}
	th.home = h;
	assert_int_equal(pthread_create(&tid, NULL, thief_main, &th), 0);
	while (atomic_load(&th.stolen) < th.want)   /* the home waits: steals happen */
		sched_yield();
	assert_int_equal(fp_tsched_run(h), 0);
	atomic_store(&th.stop, true);
	assert_int_equal(pthread_join(tid, NULL), 0);
	assert_int_equal(fp_tsched_run(h), 0);          /* any that came home late */
	struct fp_tsched_counts c;
	fp_tsched_counts(h, &c);
	assert_int_equal(st_sum, want);
	assert_true(st_away >= th.want && st_away <= ST_THREADS);
	assert_int_equal(c.came_home, th.stolen);
	assert_int_equal(c.put, c.taken);
	fp_tsched_destroy(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(yields_take_turns),
		cmocka_unit_test(join_many_and_detach),
		cmocka_unit_test(mutex_excludes),
		cmocka_unit_test(condvars_pass_everything),
		cmocka_unit_test(deadlock_is_counted),
		cmocka_unit_test(sleepers_wake_in_order),
		cmocka_unit_test(overflow_is_named),
		cmocka_unit_test(blocking_outside_is_named),
		cmocka_unit_test(run_for_starts_nothing_after_its_budget),
		cmocka_unit_test(a_stolen_thread_runs_away_then_home),
		cmocka_unit_test(threads_are_stolen_and_all_steps_done_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
