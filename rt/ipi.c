/* ipi.c: ZygOS's inter-processor interrupts (--notify ipi), as a signal to a worker's thread. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/clock.h>
#include <flowplane/dev.h>

#include "defs.h"

/*
 * Under --sched steal a home runs its own flows' handlers; while one runs long, two kinds of
 * work wait for it that no thief can do (thesis 000_..., §3.4.5): frames in its device
 * queue, which only its stack may turn into conditions a thief could steal, and the calls
 * of its flows that thieves ran, which only it may execute. ZygOS's idle cores send the
 * busy home an IPI; its handler runs the stack on waiting frames when the home's shuffle
 * queue is empty, executes the returned calls and transmits. Here the IPI is a real-time
 * signal to the home's thread, and the handler does the same inside the signal handler,
 * while the interrupted application code waits:
 *
 *   - only inside a handler the worker runs for a flow, its own or one it stole
 *     (rt_ipi_enter/leave around it in steal.c's run_flow): that code reads its batch's
 *     copied conditions and the flow's returns and queues calls into ctx->calls, none of
 *     which the interrupt touches (it runs only the worker's own flows, and a stolen
 *     flow's home is another); an interrupt that arrives anywhere else does nothing
 *     (ipi_late): the loop is near. A worker running a long stolen request is as deaf to
 *     its own queue as one running its own: fp-vsim --full put bimodal 10 us at 16
 *     workers at 74% of M/G/16's load with interrupts in own handlers only, 87% in both;
 *   - it allocates and frees nothing, since the interrupted code may be inside malloc:
 *     room in the stack's queues, in ctx->conds and in the free events is made beforehand
 *     (irq_prepare); a frame whose input could allocate (a new connection, a FIN, a RST,
 *     anything but an ACK, with or without data, for an established conn without
 *     out-of-order data) stops the interrupt's input, and it and the frames after it
 *     wait, in order, for the loop (ipi_held); a returned flow whose calls would close
 *     it or not fit waits for the loop too (ipi_deferred);
 *   - it never runs the application: conditions go to their flows in the shuffle layer,
 *     where thieves find them.
 *
 * An idle thief (steal.c's step 5, nothing to steal) interrupts a home that has been
 * inside its handler for --ipi-after-us with an empty shuffle queue and frames waiting in
 * its device queue (the device's rx_waiting: not on DPDK) or handed over to it by other
 * workers (flow groups on a veth, steer.c), or flows come back; a thief that sends a flow
 * home interrupts the home if it is inside a handler that long. At most one signal is
 * outstanding per home. Like ZygOS's IPIs these are hints: one that arrives late costs
 * a signal, never correctness.
 */

static int ipi_signal(void) { return SIGRTMIN; }

/* The worker this thread runs, for the handler; set once at bind (initial-exec TLS: no
 * allocation on first use inside the handler). */
static __thread struct fp_ctx *ipi_self __attribute__((tls_model("initial-exec")));

static struct sigaction ipi_prev;

void rt_ipi_deliver(struct fp_ctx *ctx)
{
	if (ctx && ctx->run->ipi) {
		struct rt_ipi *p = &ctx->run->ipi[ctx->worker];
		uint64_t t0 = rt_cycles();
		uint64_t sent = atomic_load_explicit(&p->sent, memory_order_relaxed);

		atomic_store_explicit(&p->pending, 0, memory_order_release);
		if (atomic_load_explicit(&p->inside, memory_order_relaxed)) {
			ctx->stats->ipi_handled++;
			ctx->stats->ipi_wait_ns += t0 > sent ? fp_cycles_to_ns(t0 - sent) : 0;
			ctx->tops->irq(ctx);
			ctx->stats->ipi_work_ns += fp_cycles_to_ns(rt_cycles() - t0);
		} else {
			ctx->stats->ipi_late++;
		}
	}
}

static void ipi_handler(int sig)
{
	int saved = errno;

	(void)sig;
	rt_ipi_deliver(ipi_self);
	errno = saved;
}

int rt_ipi_setup(struct rt_run *run, char *err, size_t errlen)
{
	unsigned n = run->cfg->n_workers;
	struct sigaction sa;

	run->ipi = aligned_alloc(FP_CACHE_LINE, n * sizeof(*run->ipi));
	if (!run->ipi)
		return snprintf(err, errlen, "--notify ipi: %s", strerror(ENOMEM)), -ENOMEM;
	memset(run->ipi, 0, n * sizeof(*run->ipi));
	run->ipi_after_cycles = fp_ns_to_cycles((uint64_t)run->cfg->ipi_after_us * 1000);
	if (rt_vkick) {   /* virtual time (virtual.c): the simulator delivers them */
		run->ipi_virtual = true;
		return 0;
	}
	run->ipi_force = getenv("FP_RT_IPI_FORCE") != NULL;
	run->ipi_hold = getenv("FP_RT_IPI_HOLD") != NULL;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ipi_handler;
	sa.sa_flags = SA_RESTART;   /* a worker's syscalls (tx kicks, poll) just go on */
	sigemptyset(&sa.sa_mask);
	if (sigaction(ipi_signal(), &sa, &ipi_prev)) {
		int e = errno;

		free(run->ipi);
		run->ipi = NULL;
		return snprintf(err, errlen, "--notify ipi: sigaction: %s", strerror(e)), -e;
	}
	return 0;
}

/* After every worker has stopped. */
void rt_ipi_teardown(struct rt_run *run)
{
	if (!run->ipi)
		return;
	if (!run->ipi_virtual)
		sigaction(ipi_signal(), &ipi_prev, NULL);
	free(run->ipi);
	run->ipi = NULL;
}

void rt_ipi_bind(struct fp_ctx *ctx, const struct fp_devq *q)
{
	struct rt_ipi *p;

	if (!ctx->run->ipi)
		return;
	p = &ctx->run->ipi[ctx->worker];
	ipi_self = ctx;
	p->thread = pthread_self();
	p->q = q;
	atomic_store_explicit(&p->bound, 1, memory_order_release);
}

/* Once every worker has left its loop (rt_steal_leave): nobody signals any more. */
void rt_ipi_unbind(struct fp_ctx *ctx)
{
	if (!ctx->run->ipi)
		return;
	atomic_store(&ctx->run->ipi[ctx->worker].bound, 0);
	ipi_self = NULL;
}

void rt_ipi_enter(struct fp_ctx *ctx)
{
	struct rt_ipi *p = &ctx->run->ipi[ctx->worker];

	ctx->tops->irq_prepare(ctx);
	atomic_store_explicit(&p->since, rt_cycles(), memory_order_relaxed);
	/* The handler runs on this thread: a compiler barrier orders it against what was
	 * prepared (no fence instruction: this is on every request of a home); thieves on
	 * other cores need only see @since before @inside (release). */
	atomic_signal_fence(memory_order_seq_cst);
	atomic_store_explicit(&p->inside, 1, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
}

void rt_ipi_leave(struct fp_ctx *ctx)
{
	/* nothing after this (the calls, the stack) may move above it */
	atomic_signal_fence(memory_order_seq_cst);
	atomic_store_explicit(&ctx->run->ipi[ctx->worker].inside, 0, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
}

/* Home @h has been inside its handler for at least --ipi-after-us. */
static bool ipi_busy(const struct rt_run *run, const struct rt_ipi *p, uint64_t now)
{
	if (!atomic_load_explicit(&p->bound, memory_order_acquire) ||
	    !atomic_load_explicit(&p->inside, memory_order_acquire) ||
	    atomic_load_explicit(&p->pending, memory_order_relaxed))
		return false;
	return now - atomic_load_explicit(&p->since, memory_order_relaxed) >= run->ipi_after_cycles;
}

static void ipi_send(struct fp_ctx *ctx, struct rt_ipi *p)
{
	if (atomic_exchange(&p->pending, 1))
		return;
	atomic_store_explicit(&p->sent, rt_cycles(), memory_order_relaxed);
	if ((rt_vkick ? rt_vkick((unsigned)(p - ctx->run->ipi)) :
	     pthread_kill(p->thread, ipi_signal())) == 0)
		ctx->stats->ipi_sent++;
	else
		atomic_store(&p->pending, 0);
}

void rt_ipi_idle(struct fp_ctx *ctx)
{
	struct rt_run *run = ctx->run;
	uint64_t now = rt_cycles();

	for (unsigned h = 0; h < run->cfg->n_workers; h++) {
		struct rt_ipi *p = &run->ipi[h];
		bool frames;

		if (h == ctx->worker || !ipi_busy(run, p, now) ||
		    (fp_shuf_ready_count(run->sh, h) && !run->ipi_force))
			continue;
		frames = !atomic_load_explicit(&p->rx_blocked, memory_order_relaxed) &&
			 ((p->q && p->q->ops->rx_waiting && p->q->ops->rx_waiting(p->q) > 0) ||
			  (run->steer && rt_steer_waiting(run->steer, h)));
		if (frames || fp_shuf_has_returns(run->sh, h) || run->ipi_force)
			ipi_send(ctx, p);
	}
}

void rt_ipi_returned(struct fp_ctx *ctx, unsigned home)
{
	struct rt_ipi *p = &ctx->run->ipi[home];

	if (ipi_busy(ctx->run, p, rt_cycles()))
		ipi_send(ctx, p);
}
