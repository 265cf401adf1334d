/* rt_virtual.h: the runtime's workers without threads, stepped in virtual time by a simulator (fp-vsim --full). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/api.h>
#include <flowplane/dev.h>
#include <flowplane/rt.h>
#include <flowplane/rt_stats.h>

/*
 * The real workers (rt/worker.c's round: the device queue, the stack, the scheduler of
 * --sched, the application's handler), each on a queue the caller made, with no thread,
 * signal, sleep or statistics segment: the caller says when each round runs. A simulator
 * runs them as N cores of one machine in virtual time (tools/vsim/full.c): the handler's
 * service time goes through fp_spin_hook (clock.h), and the loop's budgets read @vcycles,
 * the running core's clock. Everything is called from one thread.
 *
 * The device steers by itself (a virtual NIC with RSS): group -> worker by @table
 * (FP_RSS_GROUPS entries, fp_rss_key_symmetric), as DPDK with RSS does; the stacks pick
 * their outgoing ports by it.
 */
struct fp_rt_virtual;
struct fp_rt_vworker;

/* A run of @cfg->n_workers workers of @app (cfg->sched: part or steal). With cfg->notify
 * ipi (and steal), an interrupt a worker sends is @vkick(home) instead of a signal: the
 * simulator delivers it with fp_rt_vworker_interrupt at the time it chooses. @cfg, @app
 * and @table must outlive the run. NULL with one line in @err. */
struct fp_rt_virtual *fp_rt_virtual_create(const struct fp_rt_config *cfg, const struct fp_app *app,
					   const uint16_t *table, uint64_t (*vcycles)(void),
					   int (*vkick)(unsigned worker), char *err,
					   size_t errlen);
/* Worker @worker on @q (the caller's; closed by the caller after the worker), address
 * cfg->ipv4, at @now_us: its stack and its application's init. NULL with @err. */
struct fp_rt_vworker *fp_rt_vworker_open(struct fp_rt_virtual *v, unsigned worker,
					 struct fp_devq *q, uint64_t now_us, char *err,
					 size_t errlen);
/* One round of the loop at @now_us; true when it did any work. */
bool fp_rt_vworker_round(struct fp_rt_vworker *w, uint64_t now_us);
/* The earliest stack or application timer (UINT64_MAX: none). */
uint64_t fp_rt_vworker_next_us(struct fp_rt_vworker *w);
const struct fp_rt_worker_stats *fp_rt_vworker_stats(struct fp_rt_vworker *w);
/* TCP control blocks its stack holds (listeners included). */
unsigned fp_rt_vworker_conns(const struct fp_rt_vworker *w);
/* An interrupt arrives at @w: what its signal handler does (rt/ipi.c), on its state, while
 * the caller holds it suspended (inside a handler's service time, or between rounds:
 * then the interrupt finds it outside a handler and does nothing). */
void fp_rt_vworker_interrupt(struct fp_rt_vworker *w);
/* A frame's flow group by RSS (the symmetric Toeplitz hash of its 4-tuple under @rss, as
 * the workers' software steering computes it), or -1 when it has none (ARP, not IPv4
 * TCP/UDP, a fragment): what a virtual NIC's RSS needs. */
struct fp_rss;
int fp_rt_frame_group(const struct fp_rss *rss, const uint8_t *frame, uint32_t len);
/* The application's fini, what is open reset, the worker freed. */
void fp_rt_vworker_close(struct fp_rt_vworker *w);
/* What fp_ctx_stop() does: rounds from now on see the run stopping. */
void fp_rt_virtual_stop(struct fp_rt_virtual *v);
/* After every worker is closed. */
void fp_rt_virtual_destroy(struct fp_rt_virtual *v);
