/* virtual.c: the real workers without threads, for a simulator that steps them in virtual time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/rt_virtual.h>

#include "defs.h"

uint64_t (*rt_vcycles)(void);
int (*rt_vkick)(unsigned worker);

struct fp_rt_virtual {
	struct rt_run run;
};

struct fp_rt_virtual *fp_rt_virtual_create(const struct fp_rt_config *cfg, const struct fp_app *app,
					   const uint16_t *table, uint64_t (*vcycles)(void),
					   int (*vkick)(unsigned worker), char *err, size_t errlen)
{
	struct fp_rt_virtual *v;
	int rc;

	if (cfg->n_workers < 1 || cfg->n_workers > FP_RT_MAX_WORKERS)
		return snprintf(err, errlen, "workers: 1 to %u", FP_RT_MAX_WORKERS), NULL;
	if (cfg->notify == FP_NOTIFY_IPI && (cfg->sched != FP_SCHED_STEAL || !vkick))
		return snprintf(err, errlen, "--notify ipi: needs --sched steal and the "
				"simulator's delivery"), NULL;
	if (cfg->sched == FP_SCHED_STEAL && !app->steal_safe)
		return snprintf(err, errlen, "--sched steal: %s is not steal-safe",
				app->name ? app->name : "the application"), NULL;
	if (!(v = calloc(1, sizeof(*v))))
		return snprintf(err, errlen, "out of memory"), NULL;
	v->run.cfg = cfg;
	v->run.app = app;
	v->run.flush_us = cfg->flush_us == FP_RT_FLUSH_AUTO ? 0 : cfg->flush_us;
	v->run.wake_fd = -1;
	v->run.dev_table = table;
	for (unsigned i = 0; i < FP_RT_MAX_WORKERS; i++)
		v->run.burst_efd[i] = -1;
	if (cfg->sched == FP_SCHED_STEAL && (rc = rt_steal_setup(&v->run))) {
		snprintf(err, errlen, "--sched steal: %s", strerror(-rc));
		free(v);
		return NULL;
	}
	rt_vcycles = vcycles;
	rt_vkick = vkick;
	if (cfg->notify == FP_NOTIFY_IPI && rt_ipi_setup(&v->run, err, errlen)) {
		fp_rt_virtual_destroy(v);
		return NULL;
	}
	return v;
}

struct fp_rt_vworker *fp_rt_vworker_open(struct fp_rt_virtual *v, unsigned worker,
					 struct fp_devq *q, uint64_t now_us, char *err,
					 size_t errlen)
{
	int rc = 0;
	struct rt_wk *w = rt_vworker_open(&v->run, worker, q, v->run.cfg->ipv4,
					  (uint16_t)v->run.cfg->n_workers, now_us, &rc);

	if (!w)
		snprintf(err, errlen, "worker %u: %s", worker, strerror(rc < 0 ? -rc : rc));
	return (struct fp_rt_vworker *)w;
}

bool fp_rt_vworker_round(struct fp_rt_vworker *w, uint64_t now_us)
{
	return rt_vworker_round((struct rt_wk *)w, now_us);
}

uint64_t fp_rt_vworker_next_us(struct fp_rt_vworker *w)
{
	return rt_vworker_next_us((struct rt_wk *)w);
}

const struct fp_rt_worker_stats *fp_rt_vworker_stats(struct fp_rt_vworker *w)
{
	return rt_vworker_stats((struct rt_wk *)w);
}

unsigned fp_rt_vworker_conns(const struct fp_rt_vworker *w)
{
	return rt_vworker_conns((const struct rt_wk *)w);
}

void fp_rt_vworker_interrupt(struct fp_rt_vworker *w)
{
	rt_vworker_interrupt((struct rt_wk *)w);
}

void fp_rt_vworker_close(struct fp_rt_vworker *w)
{
	rt_vworker_close((struct rt_wk *)w);
}

int fp_rt_frame_group(const struct fp_rss *rss, const uint8_t *frame, uint32_t len)
{
	int g = rt_steer_classify(rss, frame, len);

	return g < 0 ? -1 : g;
}

void fp_rt_virtual_stop(struct fp_rt_virtual *v)
{
	atomic_store(&v->run.stop, true);
}

void fp_rt_virtual_destroy(struct fp_rt_virtual *v)
{
	if (!v)
		return;
	rt_ipi_teardown(&v->run);
	if (v->run.sh)
		rt_steal_teardown(&v->run);
	rt_vcycles = NULL;
	rt_vkick = NULL;
	free(v);
}
