/* thread.c: user-level threads (thread.h): stacks with guard pages, a FIFO run queue, direct thread-to-thread switches, sleepers in a heap, mutexes and condition variables. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/thread.h>

#if defined(__SANITIZE_ADDRESS__)
#define FP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FP_ASAN 1
#endif
#endif
#ifdef FP_ASAN
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#endif

/*
 * Shenango's runtime (NSDI'19 §5) keeps a thread's state in a small struct and switches
 * with a few instructions; so does this. A thread and its stack are one mapping:
 *
 *   [ guard page (PROT_NONE) | stack ... | struct fp_thread ]
 *     low addresses                         high addresses
 *
 * so a spawn that reuses a cached mapping costs no system call. Switches go directly from
 * thread to thread when one yields or blocks and another is ready; the scheduler's own
 * context (the OS thread's stack, in fp_tsched_run) is entered only when nothing is
 * runnable, to sleep until the next timer or to return.
 *
 * A thread that returns cannot free the stack it is running on: it is left in s->reap and
 * whoever runs next recycles it (after_switch).
 */

enum thread_state { T_READY, T_RUNNING, T_BLOCKED, T_SLEEPING, T_DEAD };

struct fp_thread {
	void *sp;                     /* saved stack pointer while switched out */
	struct fp_tsched *s;          /* its home: where it blocks, sleeps, locks, ends */
	struct fp_thread *next;       /* run queue, or one wait queue */
	fp_thread_fn fn;
	void *arg, *ret;
	struct fp_thread *joiner;     /* blocked in fp_thread_join on us */
	uint64_t wake_ns;             /* sleeping: when */
	enum thread_state state;
	bool detached, joined;
	void *map;                    /* the mapping: guard page, stack, this struct */
#ifdef FP_ASAN
	void *fake_stack;
#endif
};

struct fp_tsched {
	void *sp;                     /* the scheduler's own context while a thread runs */
	struct fp_thread *cur;
	struct fp_thread *head, *tail;  /* run queue */
	struct fp_thread *reap;       /* returned and detached: recycle after the switch */
	struct fp_thread **sleep;     /* min-heap on wake_ns */
	unsigned n_sleep, cap_sleep;
	unsigned n_live;              /* spawned, not yet recycled */
	unsigned n_blocked;           /* in a wait queue or join */
	void **cache;                 /* mappings kept for reuse */
	unsigned n_cache, cap_cache;
	size_t stack_size, map_size, page;
	uint64_t switches;
	/* Stealing (fp_tsched_set_stealable): the run queue under @lock, so that other
	 * schedulers take ready threads from it, and threads that ran elsewhere come back
	 * through @in_head (the home runs those first; nobody steals them). */
	bool stealable;
	bool thieves_only;            /* tests: the home runs only threads that came back */
	int lock;
	struct fp_thread *in_head, *in_tail;
	uint64_t put, taken;          /* run queue pushes and pops, by anyone */
	uint64_t stolen, came_home;   /* threads this one took from others; of its own, returns */
	struct fp_thread *handoff;    /* a visitor that asked to go home (its home's inbox) */
	struct fp_thread *requeue;    /* yielded: queued once off its stack (after_switch) */
	uint64_t until_ns;            /* fp_tsched_run_for: start no thread after this; 0: none */
#ifdef FP_ASAN
	const void *main_bottom;      /* the OS thread's stack, for ASan's fiber switches */
	size_t main_size;
	void *main_fake;
#endif
};

void fp_uctx_switch(void **save_sp, void *load_sp);
void fp__uctx_entry(void);
void fp__thread_main(struct fp_thread *t) __attribute__((noreturn));

static __thread struct fp_tsched *tls_sched;

/*
 * A stolen thread resumes on another OS thread than the one it switched out on, so a
 * function that switches must not reuse a thread-local address computed before the
 * switch (the compiler may keep one in a register across a call). Reads of tls_sched
 * that can follow a switch go through this function, which the compiler cannot merge.
 */
static __attribute__((noinline)) struct fp_tsched *sched_here(void)
{
	__asm__ volatile("" ::: "memory");
	return tls_sched;
}

/* ---- guard pages: an overflow is named, not silent ---- */

static struct sigaction prev_segv;   /* the action before ours, for faults not ours */
static __thread void *alt_stack;     /* this OS thread's signal stack, if we gave it one */

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	struct fp_tsched *s = tls_sched;
	struct fp_thread *t = s ? s->cur : NULL;

	if (t && (char *)si->si_addr >= (char *)t->map &&
	    (char *)si->si_addr < (char *)t->map + s->page) {
		char msg[200];
		int n = snprintf(msg, sizeof(msg), "flowplane: a user-level thread overflowed its "
				 "%zu KiB stack (it hit the guard page at %p): give threads more "
				 "with fp_tsched_config.stack_size\n", s->stack_size >> 10, si->si_addr);
		if (n > 0 && write(2, msg, (size_t)n) < 0) {
			/* nothing more to say */
		}
		signal(SIGABRT, SIG_DFL);
		abort();
	}
	/* Not ours: whoever handled SIGSEGV before (a sanitizer), or the default. */
	if (prev_segv.sa_flags & SA_SIGINFO && prev_segv.sa_sigaction) {
		prev_segv.sa_sigaction(sig, si, uc);
		return;
	}
	sigaction(SIGSEGV, &prev_segv, NULL);   /* the fault repeats, with the old action */
}

/* The handler runs on an alternate stack: the thread's own is what overflowed. */
static int guard_handler_install(void)
{
	stack_t cur;

	if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
		stack_t alt = { .ss_size = 64u << 10 };
		if (!(alt.ss_sp = malloc(alt.ss_size)) || sigaltstack(&alt, NULL)) {
			free(alt.ss_sp);
			return -ENOMEM;
		}
		alt_stack = alt.ss_sp;   /* the OS thread's for good (the kernel holds it) */
	}
	/* Ours unless it is already (someone may have set theirs since: a test harness, a
	 * sanitizer; then theirs is the one faults that are not ours go to). */
	struct sigaction now;
	if (sigaction(SIGSEGV, NULL, &now))
		return -errno;
	if (!(now.sa_flags & SA_SIGINFO) || now.sa_sigaction != on_segv) {
		struct sigaction sa = { .sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_ONSTACK };
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGSEGV, &sa, &prev_segv))
			return -errno;
	}
	return 0;
}

/* ---- time ---- */

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- the scheduler ---- */

struct fp_tsched *fp_tsched_create(const struct fp_tsched_config *cfg)
{
	struct fp_tsched *s = calloc(1, sizeof(*s));
	size_t want = cfg && cfg->stack_size ? cfg->stack_size : FP_THREAD_STACK_DEFAULT;

	if (!s)
		return NULL;
	s->page = (size_t)sysconf(_SC_PAGESIZE);
	s->stack_size = (want + s->page - 1) & ~(s->page - 1);
	/* guard page, stack, and the struct rounded up to a page of its own */
	s->map_size = s->page + s->stack_size + ((sizeof(struct fp_thread) + s->page - 1) & ~(s->page - 1));
	s->cap_cache = cfg && cfg->stack_cache ? cfg->stack_cache : 64;
	s->cache = calloc(s->cap_cache, sizeof(*s->cache));
	int rc = s->cache ? guard_handler_install() : -ENOMEM;
	if (rc) {
		free(s->cache);
		free(s);
		errno = -rc;
		return NULL;
	}
	return s;
}

void fp_tsched_destroy(struct fp_tsched *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->n_cache; i++)
		munmap(s->cache[i], s->map_size);
	free(s->cache);
	free(s->sleep);
	free(s);
}

/* (through sched_here: LTO may inline these into a caller that has switched since) */
struct fp_tsched *fp_tsched_self(void) { return sched_here(); }

struct fp_thread *fp_thread_self(void)
{
	struct fp_tsched *s = sched_here();

	return s ? s->cur : NULL;
}
uint64_t fp_tsched_switches(const struct fp_tsched *s) { return s->switches; }

static void recycle(struct fp_tsched *s, struct fp_thread *t)
{
	void *map = t->map;

	s->n_live--;
	if (s->n_cache < s->cap_cache)
		s->cache[s->n_cache++] = map;
	else
		munmap(map, s->map_size);
}

/* Switch from the context saving into @save to @to_sp; @dying: the old one never resumes. */
static void do_switch(struct fp_tsched *s, void **save, void *to_sp, const void *to_bottom,
		      bool dying, void **fake)
{
	s->switches++;
#ifdef FP_ASAN
	__sanitizer_start_switch_fiber(dying ? NULL : fake, to_bottom,
				       to_bottom == s->main_bottom ? s->main_size : s->stack_size);
#else
	(void)to_bottom;
	(void)dying;
	(void)fake;
#endif
	fp_uctx_switch(save, to_sp);
}

/* Right after a context resumes (on its own stack): ASan's side, and the dead to recycle. */
static void runq_push(struct fp_tsched *s, struct fp_thread *t);

static void after_switch(struct fp_tsched *s, void *fake)
{
#ifdef FP_ASAN
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
	(void)fake;
#endif
	if (s->reap) {
		recycle(s, s->reap);
		s->reap = NULL;
	}
	if (s->requeue) {   /* a thief may take it now: it is off its stack */
		runq_push(s, s->requeue);
		s->requeue = NULL;
	}
}

static const void *stack_bottom(const struct fp_tsched *s, const struct fp_thread *t)
{
	return (const char *)t->map + s->page;
}

static void sched_lock(struct fp_tsched *s)
{
	while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED))
			__builtin_ia32_pause();
}

static void sched_unlock(struct fp_tsched *s)
{
	__atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}

static void list_push(struct fp_thread **head, struct fp_thread **tail, struct fp_thread *t)
{
	t->next = NULL;
	if (*tail)
		(*tail)->next = t;
	else
		*head = t;
	*tail = t;
}

static struct fp_thread *list_pop(struct fp_thread **head, struct fp_thread **tail)
{
	struct fp_thread *t = *head;

	if (t && !(*head = t->next))
		*tail = NULL;
	return t;
}

static void runq_push(struct fp_tsched *s, struct fp_thread *t)
{
	t->state = T_READY;
	if (s->stealable)
		sched_lock(s);
	list_push(&s->head, &s->tail, t);
	s->put++;
	if (s->stealable)
		sched_unlock(s);
}

/* The home's next thread: one that came back first, then the run queue. */
static struct fp_thread *runq_pop(struct fp_tsched *s)
{
	struct fp_thread *t;

	if (!s->stealable) {
		if ((t = list_pop(&s->head, &s->tail)))
			s->taken++;
		return t;
	}
	if (!__atomic_load_n(&s->in_head, __ATOMIC_RELAXED) &&
	    !__atomic_load_n(&s->head, __ATOMIC_RELAXED))
		return NULL;
	sched_lock(s);
	if ((t = list_pop(&s->in_head, &s->in_tail)))
		s->came_home++;
	else if (!s->thieves_only && (t = list_pop(&s->head, &s->tail)))
		s->taken++;
	sched_unlock(s);
	return t;
}

/*
 * The current thread stops running (its state says why: ready again, blocked, sleeping
 * or dead); the next ready thread runs, or the scheduler's context when none is.
 */
static uint64_t now_ns(void);

static void switch_away(struct fp_tsched *s)
{
	struct fp_thread *me = s->cur, *next;
	bool dying = me->state == T_DEAD;
	bool over = s->until_ns && now_ns() >= s->until_ns;   /* fp_tsched_run_for's end */
	void *fake = NULL, **fakep = NULL;

	next = over ? NULL : runq_pop(s);
#ifdef FP_ASAN
	fakep = &me->fake_stack;
#endif
	if (next == me || (!next && !over && s->requeue == me)) {   /* yielded, alone */
		s->requeue = NULL;
		me->state = T_RUNNING;
		return;
	}
	if (next) {
		s->cur = next;
		next->state = T_RUNNING;
		do_switch(s, &me->sp, next->sp, stack_bottom(s, next), dying, fakep);
	} else {
		s->cur = NULL;
#ifdef FP_ASAN
		do_switch(s, &me->sp, s->sp, s->main_bottom, dying, fakep);
#else
		do_switch(s, &me->sp, s->sp, NULL, dying, fakep);
#endif
	}
	/* resumed: ->cur is me again, on this scheduler or (stolen) on another's */
#ifdef FP_ASAN
	fake = me->fake_stack;
#endif
	after_switch(sched_here(), fake);
}

/*
 * A visitor (a thread stolen from another scheduler) goes back to its home: it switches
 * to this scheduler's own context, which queues it in the home's inbox once it is off
 * its stack (fp_tsched_steal); the home resumes it here.
 */
static void go_home(struct fp_tsched *s, struct fp_thread *me)
{
	void *fake = NULL, **fakep = NULL;

#ifdef FP_ASAN
	fakep = &me->fake_stack;
	s->handoff = me;
	s->cur = NULL;
	do_switch(s, &me->sp, s->sp, s->main_bottom, false, fakep);
	fake = me->fake_stack;
#else
	s->handoff = me;
	s->cur = NULL;
	do_switch(s, &me->sp, s->sp, NULL, false, fakep);
#endif
	after_switch(sched_here(), fake);   /* at home now */
}

void fp_thread_home(void)
{
	struct fp_tsched *s = sched_here();
	struct fp_thread *me = s ? s->cur : NULL;

	if (me && me->s != s)
		go_home(s, me);
}

void fp__thread_main(struct fp_thread *t)
{
	struct fp_tsched *s = t->s;

	after_switch(sched_here(), NULL);   /* (a thief may run a new thread first) */
	t->ret = t->fn(t->arg);
	fp_thread_home();                   /* it ends at home: its joiner and its stack */
	t->state = T_DEAD;
	if (t->joiner) {
		runq_push(s, t->joiner);
		s->n_blocked--;
	}
	if (t->detached)
		s->reap = t;   /* recycled by whoever runs next */
	switch_away(s);
	__builtin_unreachable();
}

static void *map_stack(struct fp_tsched *s)
{
	void *m;

	if (s->n_cache)
		return s->cache[--s->n_cache];
	m = mmap(NULL, s->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
		 -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	if (mprotect(m, s->page, PROT_NONE)) {
		munmap(m, s->map_size);
		return NULL;
	}
	return m;
}

struct fp_thread *fp_thread_spawn(struct fp_tsched *s, fp_thread_fn fn, void *arg)
{
	fp_thread_home();
	if (!s && !(s = sched_here())) {
		errno = EINVAL;
		return NULL;
	}
	void *m = map_stack(s);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	/* page-aligned: the struct starts a page of its own */
	struct fp_thread *t = (struct fp_thread *)(void *)((char *)m + s->page + s->stack_size);
	memset(t, 0, sizeof(*t));
	t->map = m;
	t->s = s;
	t->fn = fn;
	t->arg = arg;
	/* The first switch pops six registers and jumps to fp__uctx_entry with the stack
	 * 16-byte aligned, as a call site must have it; r12 carries the thread. */
	uint64_t *sp = (uint64_t *)((uintptr_t)t & ~(uintptr_t)15) - 2;
	*--sp = (uint64_t)(uintptr_t)fp__uctx_entry;
	*--sp = 0;                          /* rbp */
	*--sp = 0;                          /* rbx */
	*--sp = (uint64_t)(uintptr_t)t;     /* r12 */
	*--sp = 0;                          /* r13 */
	*--sp = 0;                          /* r14 */
	*--sp = 0;                          /* r15 */
	t->sp = sp;
	s->n_live++;
	runq_push(s, t);
	return t;
}

void fp_thread_yield(void)
{
	struct fp_tsched *s = sched_here();

	if (s && s->cur && s->cur->s != s) {
		go_home(s, s->cur);   /* a visitor yields by going home */
		return;
	}
	if (!s || !s->cur || !__atomic_load_n(&s->head, __ATOMIC_RELAXED))
		return;   /* nobody else ready: go on */
	if (s->stealable) {   /* queued only once off its stack: a thief could run it */
		s->cur->state = T_READY;
		s->requeue = s->cur;
	} else {
		runq_push(s, s->cur);
	}
	switch_away(s);
}

/* A blocking call from outside a thread would block the scheduler itself: a bug in the
 * caller, stopped with one line rather than a crash somewhere later. */
static struct fp_tsched *need_thread(const char *fn)
{
	struct fp_tsched *s = sched_here();

	if (!s || !s->cur) {
		fprintf(stderr, "flowplane: %s called outside a user-level thread (it blocks: call "
			"it from a thread that fp_tsched_run runs)\n", fn);
		abort();
	}
	if (s->cur->s != s) {   /* a visitor blocks at home */
		go_home(s, s->cur);
		s = sched_here();
	}
	return s;
}

static void block(struct fp_tsched *s)
{
	s->cur->state = T_BLOCKED;
	s->n_blocked++;
	switch_away(s);
}

static void wake(struct fp_tsched *s, struct fp_thread *t)
{
	s->n_blocked--;
	runq_push(s, t);
}

void *fp_thread_join(struct fp_thread *t)
{
	struct fp_tsched *s = t->s;
	void *ret;

	if (t->state != T_DEAD) {
		need_thread("fp_thread_join");
		t->joiner = s->cur;
		block(s);
		fp_thread_home();   /* (woken, it may have been stolen) */
	}
	ret = t->ret;
	recycle(s, t);
	return ret;
}

void fp_thread_detach(struct fp_thread *t)
{
	fp_thread_home();
	if (t->state == T_DEAD)
		recycle(t->s, t);
	else
		t->detached = true;
}

/* ---- sleeping: a min-heap on the wake-up time ---- */

static void heap_swap(struct fp_thread **h, unsigned a, unsigned b)
{
	struct fp_thread *x = h[a];
	h[a] = h[b];
	h[b] = x;
}

static int heap_push(struct fp_tsched *s, struct fp_thread *t)
{
	if (s->n_sleep == s->cap_sleep) {
		unsigned cap = s->cap_sleep ? s->cap_sleep * 2 : 64;
		struct fp_thread **h = realloc(s->sleep, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		s->sleep = h;
		s->cap_sleep = cap;
	}
	unsigned i = s->n_sleep++;
	s->sleep[i] = t;
	while (i && s->sleep[(i - 1) / 2]->wake_ns > s->sleep[i]->wake_ns) {
		heap_swap(s->sleep, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	return 0;
}

static struct fp_thread *heap_pop(struct fp_tsched *s)
{
	struct fp_thread *top = s->sleep[0];
	unsigned i = 0;

	s->sleep[0] = s->sleep[--s->n_sleep];
	for (;;) {
		unsigned l = 2 * i + 1, r = l + 1, m = i;
		if (l < s->n_sleep && s->sleep[l]->wake_ns < s->sleep[m]->wake_ns)
			m = l;
		if (r < s->n_sleep && s->sleep[r]->wake_ns < s->sleep[m]->wake_ns)
			m = r;
		if (m == i)
			break;
		heap_swap(s->sleep, i, m);
		i = m;
	}
	return top;
}

void fp_thread_sleep_us(uint64_t us)
{
	struct fp_tsched *s = need_thread("fp_thread_sleep_us");
	struct fp_thread *me = s->cur;

	me->wake_ns = now_ns() + us * 1000;
	if (heap_push(s, me)) {
		fp_thread_yield();   /* out of memory for the heap: a yield, not a sleep */
		return;
	}
	me->state = T_SLEEPING;
	switch_away(s);
}

/* Wake the sleepers that are due; the time until the next one (ns), or 0 for none. */
static uint64_t wake_sleepers(struct fp_tsched *s)
{
	uint64_t now = now_ns();

	while (s->n_sleep && s->sleep[0]->wake_ns <= now)
		runq_push(s, heap_pop(s));
	return s->n_sleep ? s->sleep[0]->wake_ns - now : 0;
}

void fp_thread_block(void)
{
	block(need_thread("fp_thread_block"));
}

void fp_thread_wake(struct fp_thread *t)
{
	fp_thread_home();
	if (t->state == T_BLOCKED)
		wake(t->s, t);
}

uint64_t fp_tsched_next_wake_ns(const struct fp_tsched *s)
{
	return s->n_sleep ? s->sleep[0]->wake_ns : 0;
}

static void asan_main_stack(struct fp_tsched *s)
{
#ifdef FP_ASAN
	pthread_attr_t attr;
	void *lo;
	if (!s->main_bottom && pthread_getattr_np(pthread_self(), &attr) == 0) {
		if (pthread_attr_getstack(&attr, &lo, &s->main_size) == 0)
			s->main_bottom = lo;
		pthread_attr_destroy(&attr);
	}
#else
	(void)s;
#endif
}

/* Run @t from the scheduler's context until nothing is ready. */
static void run_from_main(struct fp_tsched *s, struct fp_thread *t)
{
	s->cur = t;
	t->state = T_RUNNING;
#ifdef FP_ASAN
	do_switch(s, &s->sp, t->sp, stack_bottom(s, t), false, &s->main_fake);
	after_switch(s, s->main_fake);
#else
	do_switch(s, &s->sp, t->sp, stack_bottom(s, t), false, NULL);
	after_switch(s, NULL);   /* back when nothing was runnable: s->cur is NULL */
#endif
}

/* Run what is ready; with @ns, start no thread once @ns have passed. */
static unsigned run_ready_for(struct fp_tsched *s, uint64_t ns)
{
	struct fp_tsched *outer = tls_sched;
	uint64_t before = s->switches;
	struct fp_thread *t;

	tls_sched = s;
	asan_main_stack(s);
	if (s->n_sleep)
		wake_sleepers(s);
	s->until_ns = ns ? now_ns() + ns : 0;
	while ((!ns || now_ns() < s->until_ns) && (t = runq_pop(s)))
		run_from_main(s, t);
	s->until_ns = 0;
	tls_sched = outer;
	return (unsigned)(s->switches - before);
}

unsigned fp_tsched_run_ready(struct fp_tsched *s)
{
	return run_ready_for(s, 0);
}

unsigned fp_tsched_run_for(struct fp_tsched *s, uint64_t ns)
{
	return run_ready_for(s, ns ? ns : 1);
}

unsigned fp_tsched_run(struct fp_tsched *s)
{
	struct fp_tsched *outer = tls_sched;

	tls_sched = s;
	asan_main_stack(s);
	for (;;) {
		uint64_t wait = s->n_sleep ? wake_sleepers(s) : 0;
		struct fp_thread *t = runq_pop(s);

		if (!t) {
			if (!s->n_sleep)
				break;
			struct timespec ts = { (time_t)(wait / 1000000000u), (long)(wait % 1000000000u) };
			nanosleep(&ts, NULL);
			continue;
		}
		run_from_main(s, t);
	}
	tls_sched = outer;
	return s->n_blocked;
}

/* ---- stealing between schedulers ---- */

void fp_tsched_set_stealable(struct fp_tsched *s, bool on)
{
	s->stealable = on;
}

void fp_tsched_set_thieves_only(struct fp_tsched *s, bool on)
{
	s->thieves_only = on;
}

unsigned fp_tsched_steal(struct fp_tsched *s, struct fp_tsched *victim)
{
	struct fp_tsched *outer = tls_sched;
	struct fp_thread *t, *h;

	if (victim == s || !victim->stealable || !__atomic_load_n(&victim->head, __ATOMIC_RELAXED))
		return 0;
	sched_lock(victim);
	if ((t = list_pop(&victim->head, &victim->tail)))
		victim->taken++;
	sched_unlock(victim);
	if (!t)
		return 0;
	tls_sched = s;
	asan_main_stack(s);
	s->stolen++;
	s->cur = t;
	t->state = T_RUNNING;
#ifdef FP_ASAN
	do_switch(s, &s->sp, t->sp, stack_bottom(victim, t), false, &s->main_fake);
	after_switch(s, s->main_fake);
#else
	do_switch(s, &s->sp, t->sp, stack_bottom(victim, t), false, NULL);
	after_switch(s, NULL);
#endif
	/* back when it asked to go home (the only way a visitor leaves): off its stack
	 * now, it may be resumed there */
	h = s->handoff;
	s->handoff = NULL;
	if (h) {
		h->state = T_READY;
		sched_lock(h->s);
		list_push(&h->s->in_head, &h->s->in_tail, h);
		sched_unlock(h->s);
	}
	tls_sched = outer;
	return 1;
}

bool fp_tsched_has_work(const struct fp_tsched *s)
{
	return __atomic_load_n(&s->in_head, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&s->head, __ATOMIC_RELAXED);
}

bool fp_tsched_stealable_ready(const struct fp_tsched *s)
{
	return s->stealable && __atomic_load_n(&s->head, __ATOMIC_RELAXED);
}

void fp_tsched_counts(const struct fp_tsched *s, struct fp_tsched_counts *c)
{
	c->put = __atomic_load_n(&s->put, __ATOMIC_RELAXED);
	c->taken = __atomic_load_n(&s->taken, __ATOMIC_RELAXED);
	c->stolen = s->stolen;
	c->came_home = __atomic_load_n(&s->came_home, __ATOMIC_RELAXED);
}

/* ---- mutexes and condition variables: FIFO wait queues ---- */

bool fp_mutex_trylock(struct fp_mutex *m)
{
	fp_thread_home();
	struct fp_thread *me = fp_thread_self();

	if (m->owner || !me)
		return false;   /* held, or no thread to hold it */
	m->owner = me;
	return true;
}

void fp_mutex_lock(struct fp_mutex *m)
{
	struct fp_tsched *s = need_thread("fp_mutex_lock");

	if (!m->owner) {
		m->owner = s->cur;
		return;
	}
	list_push(&m->head, &m->tail, s->cur);
	block(s);   /* unlock handed it to us */
}

void fp_mutex_unlock(struct fp_mutex *m)
{
	fp_thread_home();
	struct fp_thread *t = list_pop(&m->head, &m->tail);

	m->owner = t;
	if (t)
		wake(t->s, t);
}

void fp_condvar_wait(struct fp_condvar *c, struct fp_mutex *m)
{
	struct fp_tsched *s = need_thread("fp_condvar_wait");

	list_push(&c->head, &c->tail, s->cur);
	fp_mutex_unlock(m);
	block(s);
	fp_mutex_lock(m);
}

void fp_condvar_signal(struct fp_condvar *c)
{
	fp_thread_home();
	struct fp_thread *t = list_pop(&c->head, &c->tail);

	if (t)
		wake(t->s, t);
}

void fp_condvar_broadcast(struct fp_condvar *c)
{
	struct fp_thread *t;

	fp_thread_home();

	while ((t = list_pop(&c->head, &c->tail)))
		wake(t->s, t);
}
