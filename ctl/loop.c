/* loop.c: the control loop: every interval, read each worker's metrics, decide (policy.c), then unpark, move groups, park. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

#define MOVE_RETRIES 50      /* an owner busy with its previous move: retry this often... */
#define MOVE_RETRY_US 200    /* ...this far apart, then leave the rest to the next tick */

static volatile sig_atomic_t stop_asked;

static void on_signal(int sig)
{
	(void)sig;
	stop_asked = 1;
}

struct loop {
	struct fp_rt_stats_hdr *h;
	const char *name;
	const struct ctl_run_opts *o;
	unsigned n;
	bool parked[CTL_MAX_WORKERS];
	uint64_t intervals[CTL_MAX_WORKERS];
	int draining;
	double t0, last_change;
	FILE *log;
	struct ctl_client client;     /* --client: fp-loadgen's stderr */
	unsigned ups, downs, moves, move_refusals;
	double active_ms[CTL_MAX_WORKERS + 1];   /* time spent with k workers polling */
	/* --batch: the job on the parked workers' cores */
	bool has_batch;
	struct ctl_batch batch;
	int core[CTL_MAX_WORKERS];
	uint64_t all_cores;
};

/* The cores of parked workers (but @taking's, about to poll), none that a polling worker
 * shares: the batch job's. */
static uint64_t spare(const struct loop *l, int taking)
{
	uint64_t give = 0, keep = 0;

	for (unsigned w = 0; w < l->n; w++) {
		uint64_t bit = 1ull << l->core[w];

		if (l->parked[w] && (int)w != taking)
			give |= bit;
		else
			keep |= bit;
	}
	return give & ~keep;
}

static void batch_sync(struct loop *l, int taking)
{
	int rc = l->has_batch ? ctl_batch_set(&l->batch, spare(l, taking)) : 0;

	if (rc)
		fprintf(stderr, "fp-ctl: could not change the batch job's cores: %s\n",
			strerror(-rc));
}

static unsigned count_active(const struct loop *l)
{
	unsigned a = 0;

	for (unsigned w = 0; w < l->n; w++)
		a += !l->parked[w];
	return a;
}

static void view_read(struct loop *l, struct ctl_view *v, double now)
{
	memset(v, 0, sizeof(*v));
	v->n = l->n;
	v->now_ms = (uint64_t)(now - l->t0);
	v->last_change_ms = (uint64_t)(l->last_change - l->t0);
	v->draining = l->draining;
	for (unsigned g = 0; g < l->h->n_groups && g < CTL_GROUPS; g++) {
		uint16_t e = __atomic_load_n(&l->h->groups[g], __ATOMIC_ACQUIRE);
		unsigned o = e & ~FP_RT_GROUP_MOVING;

		v->moving |= (e & FP_RT_GROUP_MOVING) != 0;
		if (o < l->n)
			v->w[o].groups++;
	}
	for (unsigned w = 0; w < l->n; w++) {
		const struct fp_rt_worker_stats *s = fp_rt_stats_worker(l->h, w);
		struct ctl_wview *x = &v->w[w];
		uint64_t k = __atomic_load_n(&s->ctl_intervals, __ATOMIC_ACQUIRE);

		x->parked = l->parked[w];
		x->fresh = k != l->intervals[w];
		l->intervals[w] = k;
		for (unsigned i = 0; i < 3; i++) {
			x->delay_us[i] = (double)s->ctl_delay_ewma_ns[i] / 1e3;
			x->idle[i] = (double)s->ctl_idle_ewma_ppm[i] / 1e6;
		}
	}
}

/* Issue @plan's moves; an owner still busy with its last one is asked again shortly. */
static void issue(struct loop *l, const struct ctl_move *plan, unsigned k)
{
	for (unsigned i = 0; i < k && !stop_asked; i++) {
		int r = 0;

		for (unsigned t = 0; t < MOVE_RETRIES; t++) {
			if (ctl_send(l->h, l->name, FP_RT_CMD_MOVE_GROUP, plan[i].group, plan[i].to, &r))
				return;
			if (r != -EBUSY)
				break;
			ctl_nap_us(MOVE_RETRY_US);
		}
		if (r && r != -EALREADY) {
			l->move_refusals++;
			if (r != -EBUSY)
				fprintf(stderr, "fp-ctl: move %u to %u refused: %s\n", plan[i].group,
					plan[i].to, ctl_refusal(FP_RT_CMD_MOVE_GROUP, r));
			return;
		}
		l->moves += r == 0;
	}
}

static uint64_t target_mask(const struct loop *l)
{
	uint64_t m = 0;

	for (unsigned w = 0; w < l->n; w++)
		if (!l->parked[w] && (int)w != l->draining)
			m |= 1ull << w;
	return m;
}

/*
 * Spread the groups over the workers that may own them. The whole table goes in one
 * command (SET_TABLE: the run asks each move as the owner becomes free, every 50 us), as
 * IX's control plane writes the NIC's table; a run that predates it gets the moves one
 * command each.
 */
static void rebalance(struct loop *l)
{
	struct ctl_move plan[CTL_GROUPS];
	uint16_t table[CTL_GROUPS];
	unsigned k;
	int r;

	for (unsigned g = 0; g < CTL_GROUPS; g++)
		table[g] = __atomic_load_n(&l->h->groups[g], __ATOMIC_ACQUIRE);
	k = ctl_plan(table, l->h->n_groups, l->n, target_mask(l), plan, CTL_GROUPS);
	if (!k)
		return;
	for (unsigned g = 0; g < CTL_GROUPS; g++)
		table[g] &= (uint16_t)~FP_RT_GROUP_MOVING;
	for (unsigned i = 0; i < k; i++)
		table[plan[i].group] = plan[i].to;
	for (unsigned g = 0; g < CTL_GROUPS; g++)
		__atomic_store_n(&l->h->want[g], table[g], __ATOMIC_RELAXED);
	if (ctl_send(l->h, l->name, FP_RT_CMD_SET_TABLE, 0, 0, &r))
		return;
	if (r == 0) {
		l->moves += k;
		return;
	}
	if (r != -EINVAL)
		fprintf(stderr, "fp-ctl: table refused: %s\n", ctl_refusal(FP_RT_CMD_SET_TABLE, r));
	issue(l, plan, k);
}

static void say(const struct loop *l, double now, const char *what, unsigned w, const char *why)
{
	if (!l->o->quiet)
		printf("fp-ctl: %7.2f s: worker %u %s (%s); %u polling\n", (now - l->t0) / 1e3, w,
		       what, why, count_active(l));
	fflush(stdout);
}

static bool park(struct loop *l, unsigned w, bool on, double now, const char *why)
{
	uint32_t op = on ? FP_RT_CMD_PARK : FP_RT_CMD_UNPARK;
	int r = 0;
	bool ok;

	if (!on)
		batch_sync(l, (int)w);   /* the core leaves the batch job before the worker polls */
	ok = !ctl_send(l->h, l->name, op, w, 0, &r);
	if (ok && r && r != -EALREADY) {
		fprintf(stderr, "fp-ctl: %spark %u refused: %s\n", on ? "" : "un", w,
			ctl_refusal(op, r));
		ok = false;
	}
	if (ok) {
		l->parked[w] = on;
		l->last_change = now;
	}
	batch_sync(l, -1);           /* the batch job's cores as the workers now stand */
	if (ok)
		say(l, now, on ? "parked" : "unparked", w, why);
	return ok;
}

static void log_tick(struct loop *l, const struct ctl_view *v, const struct ctl_decision *d,
		     double now)
{
	static const char *const acts[] = { "hold", "up", "down" };

	if (!l->log)
		return;
	fprintf(l->log, "{\"t_ms\": %.1f, \"polling\": %u, \"draining\": %d, \"act\": \"%s\", "
		"\"why\": \"%s\", \"workers\": [", now - l->t0, count_active(l), l->draining,
		acts[d->act], d->why);
	for (unsigned w = 0; w < l->n; w++)
		fprintf(l->log, "%s{\"parked\": %d, \"groups\": %u, \"fresh\": %d, "
			"\"delay_us\": %.1f, \"idle\": %.3f}", w ? ", " : "", v->w[w].parked,
			v->w[w].groups, v->w[w].fresh, v->w[w].delay_us[l->o->policy.up_ewma],
			v->w[w].idle[l->o->policy.down_ewma]);
	fprintf(l->log, "]");
	if (l->has_batch)
		fprintf(l->log, ", \"batch_cpus\": \"0x%llx\", \"batch_stopped\": %d",
			(unsigned long long)l->batch.cpus, l->batch.stopped);
	if (l->client.f) {
		ctl_client_read(&l->client);
		if (l->client.point)
			fprintf(l->log, ", \"client_p99_us\": %.1f, \"client_point\": %u",
				l->client.p99_us, l->client.point);
		else
			fprintf(l->log, ", \"client_p99_us\": null, \"client_point\": 0");
	}
	fprintf(l->log, "}\n");
	fflush(l->log);
}

/* One tick: finish a worker's emptying, or act on the policy's decision. */
static void tick(struct loop *l, double now)
{
	struct ctl_view v;
	struct ctl_decision d;

	view_read(l, &v, now);
	d = ctl_decide(&l->o->policy, &v);
	log_tick(l, &v, &d, now);
	if (l->draining >= 0) {
		unsigned w = (unsigned)l->draining;
		if (!v.moving && !v.w[w].groups) {
			l->draining = -1;
			if (!park(l, w, true, now, "emptied"))
				l->last_change = now;   /* refused: try again after the hold */
			else
				l->downs++;
		} else if (!v.moving) {
			rebalance(l);
		}
		return;
	}
	if (d.act == CTL_UP && park(l, d.worker, false, now, d.why))
		l->ups++;
	if (d.act == CTL_DOWN) {
		l->draining = (int)d.worker;
		l->last_change = now;
		say(l, now, "emptying to park", d.worker, d.why);
	}
	if (!v.moving || d.act != CTL_HOLD)
		rebalance(l);
}

int ctl_loop(const char *name, const struct ctl_run_opts *o)
{
	struct loop l = { .name = name, .o = o, .draining = -1 };
	struct sigaction sa = { .sa_handler = on_signal };

	if (!(l.h = ctl_open(name)))
		return 1;
	if (!l.h->n_groups) {
		fprintf(stderr, "fp-ctl: run '%s' has no flow groups: the loop needs --net xdp, "
			"several workers and --steer groups\n", name);
		return 1;
	}
	l.n = l.h->n_workers < CTL_MAX_WORKERS ? l.h->n_workers : CTL_MAX_WORKERS;
	if (o->log_path && !(l.log = fopen(o->log_path, "w"))) {
		fprintf(stderr, "fp-ctl: cannot write %s: %s\n", o->log_path, strerror(errno));
		return 1;
	}
	if (o->client_path && !(l.client.f = fopen(o->client_path, "r"))) {
		fprintf(stderr, "fp-ctl: run: --client %s: %s (fp-loadgen's stderr, e.g. "
			"fp-loadgen ... 2> FILE)\n", o->client_path, strerror(errno));
		fclose(l.log);
		return 1;
	}
	for (unsigned w = 0; w < l.n; w++)
		l.parked[w] = fp_rt_stats_worker(l.h, w)->parked != 0;
	if (o->batch) {
		char err[400];

		for (unsigned w = 0; w < l.n; w++) {
			l.core[w] = fp_rt_stats_worker(l.h, w)->core;
			if (l.core[w] < 0 || l.core[w] >= 64) {
				fprintf(stderr, "fp-ctl: --batch needs the run's workers pinned to cores "
					"0-63 (start it with --cores); worker %u is not\n", w);
				return 1;
			}
			l.all_cores |= 1ull << l.core[w];
		}
		if (ctl_batch_start(&l.batch, o->batch, l.all_cores, spare(&l, -1), 0, err,
				    sizeof(err))) {
			fprintf(stderr, "fp-ctl: --batch: %s\n", err);
			return 1;
		}
		l.has_batch = true;
		if (!o->quiet)
			printf("fp-ctl: batch job '%s' (pid %d) on the parked workers' cores, held "
			       "there by %s; %s\n", o->batch, (int)l.batch.pid, ctl_batch_how(&l.batch),
			       l.batch.stopped ? "stopped until a core is spare" : "running");
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	l.t0 = l.last_change = ctl_mono_ms();
	if (!o->quiet)
		printf("fp-ctl: controlling '%s' (pid %d, %u workers, %u polling) every %u ms: "
		       "add one above %.0f us of queueing delay, remove one above idle 1/n + %.2f\n",
		       name, l.h->pid, l.n, count_active(&l), o->policy.interval_ms,
		       o->policy.delay_max_us, o->policy.idle_margin);
	double next = l.t0, prev = l.t0;
	int ret = 0;
	while (!stop_asked) {
		double now = ctl_mono_ms();

		l.active_ms[count_active(&l)] += now - prev;
		prev = now;
		if (o->seconds > 0 && now - l.t0 >= o->seconds * 1e3)
			break;
		if (!ctl_run_alive(l.h)) {
			printf("fp-ctl: the run (pid %d) has stopped; the loop ends\n", l.h->pid);
			break;
		}
		tick(&l, now);
		if (l.has_batch && !l.batch.exited && !ctl_batch_alive(&l.batch) && !o->quiet)
			printf("fp-ctl: the batch job has ended by itself\n");
		next += o->policy.interval_ms;
		now = ctl_mono_ms();
		if (next > now)
			ctl_nap_us((unsigned)((next - now) * 1e3));
		else
			next = now;   /* a slow tick: no catching up in a burst */
	}
	if (!o->quiet) {
		printf("fp-ctl: %.1f s: %u unparked, %u parked, %u group moves (%u refused); time "
		       "with k workers polling:", (ctl_mono_ms() - l.t0) / 1e3, l.ups, l.downs, l.moves,
		       l.move_refusals);
		for (unsigned k = 1; k <= l.n; k++)
			printf(" %u: %.1f s%s", k, l.active_ms[k] / 1e3, k < l.n ? "," : "\n");
	}
	if (l.has_batch) {
		unsigned changes = l.batch.changes;
		double cpu = ctl_batch_end(&l.batch);

		if (!o->quiet)
			printf("fp-ctl: batch job: %.2f s of CPU on spare cores; its cores changed %u "
			       "times\n", cpu, changes);
	}
	if (l.log)
		fclose(l.log);
	if (l.client.f)
		fclose(l.client.f);
	return ret;
}
