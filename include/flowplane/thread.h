/* thread.h: API level 3, user-level threads (Shenango's uthreads): spawn, yield, join, sleep, mutex, condition variable, on one scheduler per OS thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A scheduler runs user-level threads on the OS thread that calls fp_tsched_run(): a FIFO
 * run queue, a heap of sleepers, and a context switch of its own (rt/thread_switch.S: six
 * callee-saved registers and the stack pointer; why it ends in a `ret` is said there).
 * Threads are cooperative: one runs until it yields, blocks (join, a mutex, a
 * condition variable, sleep) or returns; a thread that never does keeps the others waiting
 * (nothing preempts it: the runtime detects and names a worker stuck so, rt/README.md).
 *
 * Stacks are mmap()ed with a PROT_NONE guard page below them and reused: a thread that
 * overflows its stack stops the process with one line naming it and its stack size, not
 * with a silent corruption. The x87 control word and MXCSR are not saved: threads must not
 * change rounding modes.
 *
 * Everything here is for the scheduler's own OS thread, with one exception: stealing.
 * A scheduler made stealable (fp_tsched_set_stealable) keeps its run queue under a lock,
 * and another OS thread's scheduler may take a ready thread from it and run it there
 * (fp_tsched_steal: ZygOS's and Shenango's work stealing, for threads). Such a visitor
 * runs on the thief only until its next call into this API or tsock.h: every one of them
 * first takes the thread back to its home (fp_thread_home), where it blocks, sleeps,
 * locks, spawns, writes and ends. So what a thread computes between two calls may run on
 * any core, and everything a scheduler owns is touched by its own OS thread only. A
 * thread's thread-local variables (errno, __thread) are those of the OS thread it runs
 * on, and after a call into this API it may run on another: a value the compiler kept
 * across the call (the address of a __thread variable, pthread_self(), which is declared
 * const) may be stale. Read such things through a function the compiler cannot merge.
 */

struct fp_tsched;
struct fp_thread;

typedef void *(*fp_thread_fn)(void *arg);

#define FP_THREAD_STACK_DEFAULT (64u << 10)   /* 64 KiB, plus the guard page */

struct fp_tsched_config {
	size_t stack_size;            /* bytes per thread stack; 0: FP_THREAD_STACK_DEFAULT */
	unsigned stack_cache;         /* stacks kept for reuse; 0: 64 */
};

/* A scheduler for the calling OS thread; NULL with errno. */
struct fp_tsched *fp_tsched_create(const struct fp_tsched_config *cfg);
/* Frees the stacks it cached; every thread must have finished and been joined or detached. */
void fp_tsched_destroy(struct fp_tsched *s);

/* Run threads until none is runnable or sleeping (every one has returned or waits on
 * something nobody will signal: then it returns the number of those still blocked). */
unsigned fp_tsched_run(struct fp_tsched *s);

/* Run what is ready now (and sleepers that are due) until nothing is, without sleeping:
 * for a scheduler driven by an event loop (tsock.h). Returns how many threads ran. */
unsigned fp_tsched_run_ready(struct fp_tsched *s);
/* The same, but no thread starts once @ns have passed (the one running then goes on to
 * its next switch): an event loop's round stays short, and what is left stays ready
 * (for the next round, or another scheduler's steal). */
unsigned fp_tsched_run_for(struct fp_tsched *s, uint64_t ns);
/* When the earliest sleeper is due (CLOCK_MONOTONIC ns), or 0 when none sleeps. */
uint64_t fp_tsched_next_wake_ns(const struct fp_tsched *s);

/* The scheduler the calling thread runs on (inside fp_tsched_run), or NULL. */
struct fp_tsched *fp_tsched_self(void);

/* A new thread running @fn(@arg), queued to run; NULL with errno (ENOMEM). Inside a
 * thread, @s may be NULL: the caller's scheduler. */
struct fp_thread *fp_thread_spawn(struct fp_tsched *s, fp_thread_fn fn, void *arg);
/* Let the other runnable threads run once; back here after them. */
void fp_thread_yield(void);
/* Wait until @t returns and take its value; @t is freed. One joiner per thread. From
 * outside a thread only once @t has returned (after fp_tsched_run). Blocking calls (join,
 * sleep, mutex lock, condition wait) made outside a thread stop the process with one line:
 * they would block the scheduler itself. */
void *fp_thread_join(struct fp_thread *t);
/* Nobody will join @t: it is freed when it returns. */
void fp_thread_detach(struct fp_thread *t);
/* Sleep at least @us microseconds (the scheduler's clock is CLOCK_MONOTONIC). */
void fp_thread_sleep_us(uint64_t us);
/* The calling thread, or NULL outside one. */
struct fp_thread *fp_thread_self(void);
/* Threads spawned and switches made by @s (for tests and benchmarks). */
uint64_t fp_tsched_switches(const struct fp_tsched *s);

/* ---- stealing (see above) ---- */

/* Let other schedulers take ready threads from @s (set before any runs; default off). */
void fp_tsched_set_stealable(struct fp_tsched *s, bool on);
/* From @s's OS thread, outside any thread: take one ready thread from @victim and run it
 * here until it goes home. 1 if one ran, 0 if @victim had none ready. */
unsigned fp_tsched_steal(struct fp_tsched *s, struct fp_tsched *victim);
/* Tests: @s runs none of its ready threads itself, only those that come back; other
 * schedulers must take them (FP_RT_STEAL_FORCE, for a stealable @s). */
void fp_tsched_set_thieves_only(struct fp_tsched *s, bool on);
/* Whether @s has threads ready or come home (a hint from any OS thread). */
bool fp_tsched_has_work(const struct fp_tsched *s);
/* Whether @s is stealable and has a ready thread to take (a hint from any OS thread). */
bool fp_tsched_stealable_ready(const struct fp_tsched *s);
/* The calling thread, if it is visiting another scheduler, goes back to its home and
 * continues there; otherwise nothing. */
void fp_thread_home(void);

struct fp_tsched_counts {
	uint64_t put, taken;          /* run queue: threads made ready, and taken to run */
	uint64_t stolen;              /* threads this scheduler took from others */
	uint64_t came_home;           /* its own threads that came back from another */
};
void fp_tsched_counts(const struct fp_tsched *s, struct fp_tsched_counts *c);

/* Block the calling thread until someone calls fp_thread_wake() on it (Shenango's
 * thread_park / thread_ready): the primitive that blocking I/O is built from. */
void fp_thread_block(void);
/* Make @t, blocked in fp_thread_block(), ready to run. Only for a blocked thread. */
void fp_thread_wake(struct fp_thread *t);

/* A mutex: lock blocks the thread (never the OS thread) while another holds it. Waiters
 * get it in the order they asked (FIFO hand-off: no barging). */
struct fp_mutex {
	struct fp_thread *owner;
	struct fp_thread *head, *tail;  /* waiters */
};
#define FP_MUTEX_INIT { NULL, NULL, NULL }
void fp_mutex_lock(struct fp_mutex *m);
bool fp_mutex_trylock(struct fp_mutex *m);
void fp_mutex_unlock(struct fp_mutex *m);

/* A condition variable over an fp_mutex: wait releases it and takes it back. */
struct fp_condvar {
	struct fp_thread *head, *tail;
};
#define FP_CONDVAR_INIT { NULL, NULL }
void fp_condvar_wait(struct fp_condvar *c, struct fp_mutex *m);
void fp_condvar_signal(struct fp_condvar *c);
void fp_condvar_broadcast(struct fp_condvar *c);
