/* alloc_loop.c: fp-ctl alloc: Shenango's core allocator (rt/alloc.c) over running flowplanes, a pass every few µs. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/alloc.h>

#include "ctl.h"

/*
 * The IOKernel's role (Shenango §4.1) without its packet path: every --interval-us it reads
 * each run's homes' queue counters and burstable workers' state from the runs' stats
 * segments, asks rt/alloc.c what to do, and does it: a grant is the grant's time and number
 * written into the segment, then a write to the worker's eventfd (copied out of the run's
 * process with pidfd_getfd); a revoke is a number the worker checks every round. It spins
 * on its core between passes (Shenango dedicates one); --sleep sleeps instead, for a
 * machine with no core to spare (passes then come as late as the timer wakes us).
 *
 * The runtime's side is rt/worker.c (rt_burst). What each side survives: a run that stops
 * ends the loop (status 0); an allocator that dies leaves every burstable worker as it was
 * (a running one keeps its core, a parked one stays parked), and the runs keep serving.
 */

#define ALLOC_MAX_RUNS  FP_ALLOC_MAX_APPS
#define ALLOC_ACTS      (2 * FP_ALLOC_MAX_APPS)
#define ALLOC_CHECK_MS  100    /* runs alive, --seconds: looked at this often */

static volatile sig_atomic_t stop_asked;

static void on_signal(int sig)
{
	(void)sig;
	stop_asked = 1;
}

struct arun {
	const char *name;
	struct fp_rt_stats_hdr *h;
	unsigned first, n_burst;
	int efd[FP_RT_STATS_MAX_WORKERS];       /* our copies of its burstable workers' eventfds */
	uint16_t pool[FP_RT_STATS_MAX_WORKERS]; /* each burstable worker's core, in the pool */
	uint64_t hist0[FP_RT_REALLOC_BUCKETS], grants0, ns0;   /* the records at attach */
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Where core @c is in the pool @pool of *@n (added if new); -1 when the pool is full. */
static int pool_index(int *pool, unsigned *n, int c)
{
	unsigned k = 0;

	while (k < *n && pool[k] != c)
		k++;
	if (k == *n) {
		if (*n == FP_ALLOC_MAX_CORES)
			return -1;
		pool[(*n)++] = c;
	}
	return (int)k;
}

/* Attach to run @r: its burstable workers, their cores in the pool, copies of their
 * eventfds. 0, or 1 after one line on stderr. */
static int attach(struct arun *r, int *pool, unsigned *n_pool)
{
	int pidfd, other;

	if (!(r->h = ctl_open(r->name)))
		return 1;
	r->n_burst = __atomic_load_n(&r->h->alloc.n_burst, __ATOMIC_ACQUIRE);
	r->first = r->h->alloc.first_burst;
	if (r->h->n_workers > FP_RT_STATS_MAX_WORKERS || r->n_burst > FP_ALLOC_MAX_WORKERS ||
	    r->first > FP_ALLOC_MAX_QUEUES) {   /* the segment is another process's: checked */
		fprintf(stderr, "fp-ctl: alloc: run '%s' has a layout this fp-ctl does not know (%u "
			"workers, %u burstable)\n", r->name, r->h->n_workers, r->n_burst);
		return 1;
	}
	if (!r->n_burst || r->first + r->n_burst != r->h->n_workers) {
		fprintf(stderr, "fp-ctl: alloc: run '%s' has no burstable workers: start it with "
			"--sched steal --burst K\n", r->name);
		return 1;
	}
	other = __atomic_load_n(&r->h->alloc.pid, __ATOMIC_ACQUIRE);
	if (other > 0 && kill(other, 0) == 0) {
		fprintf(stderr, "fp-ctl: alloc: run '%s' already has an allocator (pid %d)\n",
			r->name, other);
		return 1;
	}
	if ((pidfd = (int)syscall(SYS_pidfd_open, r->h->pid, 0)) < 0) {
		fprintf(stderr, "fp-ctl: alloc: run '%s' (pid %d): pidfd_open: %s\n", r->name,
			r->h->pid, strerror(errno));
		return 1;
	}
	for (unsigned j = 0; j < r->n_burst; j++) {
		const struct fp_rt_worker_stats *w = fp_rt_stats_worker(r->h, r->first + j);
		long fd = syscall(SYS_pidfd_getfd, pidfd, r->h->alloc.efd[r->first + j], 0);
		int k = w->core < 0 ? -2 : pool_index(pool, n_pool, w->core);

		if (fd < 0)
			fprintf(stderr, "fp-ctl: alloc: cannot take run '%s''s eventfds (pidfd_getfd: "
				"%s): run fp-ctl as the run's user, or as root\n", r->name,
				strerror(errno));
		else if (k == -2)
			fprintf(stderr, "fp-ctl: alloc: burstable worker %u of '%s' is not pinned: "
				"give it a core (--cores)\n", r->first + j, r->name);
		else if (k < 0)
			fprintf(stderr, "fp-ctl: alloc: more than %d cores in the pool\n",
				FP_ALLOC_MAX_CORES);
		if (fd < 0 || k < 0) {
			close(pidfd);
			return 1;
		}
		r->efd[j] = (int)fd;
		r->pool[j] = (uint16_t)k;
		r->grants0 += w->burst_grants;
		r->ns0 += w->realloc_ns;
		for (unsigned b = 0; b < FP_RT_REALLOC_BUCKETS; b++)
			r->hist0[b] += w->realloc_hist[b];
	}
	close(pidfd);
	/* the run is ours if nobody else took it since we looked (one allocator per run) */
	if (!__atomic_compare_exchange_n(&r->h->alloc.pid, &other, getpid(), false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		fprintf(stderr, "fp-ctl: alloc: run '%s' already has an allocator (pid %d)\n",
			r->name, other);
		return 1;
	}
	return 0;
}

/* Let run @r go, if it is still ours. */
static void detach(struct arun *r)
{
	int32_t me = getpid();

	__atomic_compare_exchange_n(&r->h->alloc.pid, &me, 0, false, __ATOMIC_ACQ_REL,
				    __ATOMIC_ACQUIRE);
}

/* Workers that already run on a grant (an allocator before us died, and they kept their
 * cores) start as the allocator's active ones; numbering goes on from the last grant. */
static void adopt(struct fp_alloc *a, unsigned app, const struct arun *r)
{
	for (unsigned j = 0; j < r->n_burst; j++) {
		const struct fp_rt_worker_stats *w = fp_rt_stats_worker(r->h, r->first + j);
		uint64_t no = __atomic_load_n(&r->h->grant[r->first + j].no, __ATOMIC_ACQUIRE);
		bool running = !__atomic_load_n(&w->burst_parked, __ATOMIC_ACQUIRE);

		fp_alloc_adopt(a, app, j, no, running);
	}
}

/* One pass: the views, the decision, the grants and revokes. */
static void pass(struct fp_alloc *a, struct arun *runs, unsigned n_runs)
{
	struct fp_alloc_act act[ALLOC_ACTS];
	unsigned n;

	for (unsigned i = 0; i < n_runs; i++) {
		struct arun *r = &runs[i];
		struct fp_alloc_app *p = &a->app[i];

		__atomic_store_n(&r->h->alloc.heartbeat, r->h->alloc.heartbeat + 1, __ATOMIC_RELEASE);
		for (unsigned q = 0; q < r->first; q++) {
			p->q[q].put = __atomic_load_n(&r->h->alloc_q[q].put, __ATOMIC_ACQUIRE);
			p->q[q].taken = __atomic_load_n(&r->h->alloc_q[q].taken, __ATOMIC_ACQUIRE);
		}
		for (unsigned j = 0; j < r->n_burst; j++) {
			const struct fp_rt_worker_stats *w = fp_rt_stats_worker(r->h, r->first + j);

			p->w[j].took = __atomic_load_n(&w->burst_took, __ATOMIC_ACQUIRE);
			p->w[j].parked = __atomic_load_n(&w->burst_parked, __ATOMIC_ACQUIRE);
		}
	}
	n = fp_alloc_pass(a, act, ALLOC_ACTS);
	for (unsigned i = 0; i < n; i++) {
		struct arun *r = &runs[act[i].app];
		struct fp_rt_grant *g = &r->h->grant[r->first + act[i].worker];
		uint64_t one = 1;

		if (act[i].op == FP_ALLOC_REVOKE) {
			__atomic_store_n(&g->revoke, act[i].grant_no, __ATOMIC_RELEASE);
			continue;
		}
		__atomic_store_n(&g->decided_ns, now_ns(), __ATOMIC_RELAXED);
		__atomic_store_n(&g->no, act[i].grant_no, __ATOMIC_RELEASE);
		if (write(r->efd[act[i].worker], &one, sizeof(one)) < 0) {
			/* EAGAIN: the counter is full of wake-ups already */
		}
	}
}

/* Percentile @p of a histogram of 1 us buckets (the last open), in us. */
static unsigned hist_pct(const uint64_t *h, uint64_t total, double p)
{
	uint64_t want = (uint64_t)(p * (double)total + 0.999999), seen = 0;

	for (unsigned b = 0; b < FP_RT_REALLOC_BUCKETS; b++)
		if ((seen += h[b]) >= want && want)
			return b;
	return 0;
}

/* What each run's allocation did while we were attached, one line each, or JSON. */
static void report(const struct fp_alloc *a, const struct arun *runs, unsigned n_runs,
		   double secs, uint64_t passes, uint64_t late, double interval_us, bool json)
{
	if (json)
		printf("{\"seconds\": %.3f, \"interval_us\": %g, \"passes\": %" PRIu64 ", "
		       "\"late_passes\": %" PRIu64 ", \"runs\": [", secs, interval_us, passes, late);
	else
		printf("fp-ctl alloc: %.1f s, %" PRIu64 " passes every %g us (%" PRIu64 " late by "
		       "more than one interval)\n", secs, passes, interval_us, late);
	for (unsigned i = 0; i < n_runs; i++) {
		const struct arun *r = &runs[i];
		const struct fp_alloc_app *p = &a->app[i];
		uint64_t h[FP_RT_REALLOC_BUCKETS] = {0}, taken = 0, ns = 0, max = 0;

		for (unsigned j = 0; j < r->n_burst; j++) {
			const struct fp_rt_worker_stats *w = fp_rt_stats_worker(r->h, r->first + j);

			taken += w->burst_grants;
			ns += w->realloc_ns;
			max = w->realloc_ns_max > max ? w->realloc_ns_max : max;
			for (unsigned b = 0; b < FP_RT_REALLOC_BUCKETS; b++)
				h[b] += w->realloc_hist[b];
		}
		taken -= r->grants0;
		ns -= r->ns0;
		for (unsigned b = 0; b < FP_RT_REALLOC_BUCKETS; b++)
			h[b] -= r->hist0[b];
		if (json) {
			printf("%s{\"name\": \"%s\", \"congested_passes\": %" PRIu64 ", "
			       "\"starved_passes\": %" PRIu64 ", \"grants\": %" PRIu64 ", "
			       "\"revokes\": %" PRIu64 ", \"parks\": %" PRIu64 ", \"grants_taken\": "
			       "%" PRIu64 ", \"realloc_mean_us\": %.3f, \"realloc_max_us\": %.3f, "
			       "\"realloc_hist_us\": [", i ? ", " : "", r->name, p->congested,
			       p->starved, p->grants, p->revokes, p->parks, taken,
			       taken ? (double)ns / (double)taken / 1e3 : 0, (double)max / 1e3);
			for (unsigned b = 0; b < FP_RT_REALLOC_BUCKETS; b++)
				printf("%s%" PRIu64, b ? ", " : "", h[b]);
			printf("]}");
			continue;
		}
		printf("  %s: congested at %" PRIu64 " passes (%" PRIu64 " with no core to give), "
		       "%" PRIu64 " grants, %" PRIu64 " revokes, %" PRIu64 " parks; grant to "
		       "running: %" PRIu64 " taken, p50 %u us, p99 %u us, mean %.1f us, max %.1f us "
		       "(any run's worst)\n", r->name, p->congested, p->starved, p->grants,
		       p->revokes, p->parks, taken, hist_pct(h, taken, 0.5),
		       hist_pct(h, taken, 0.99), taken ? (double)ns / (double)taken / 1e3 : 0,
		       (double)max / 1e3);
	}
	if (json)
		printf("]");   /* the caller closes the object, after --batch's part */
}

/* --batch's account: the CPU seconds the job got (ctl_batch_end: SIGTERM, SIGKILL after
 * 2 s, unless it ended by itself) and their share of the pool's time over @secs. */
static void batch_report(struct ctl_batch *b, double secs, unsigned n_pool, bool json)
{
	double cpu = ctl_batch_end(b);
	int status = b->status;

	if (json)
		printf(", \"batch\": {\"cpu_s\": %.3f, \"pool_cores\": %u, \"share_of_pool\": %.4f, "
		       "\"ended_by_itself\": %s, \"status\": %d}", cpu, n_pool,
		       secs > 0 ? cpu / (secs * n_pool) : 0, b->by_itself ? "true" : "false",
		       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	else
		printf("  batch job: %.2f CPU-s, %.0f%% of the pool's %u core%s over %.1f s%s\n", cpu,
		       secs > 0 ? 100.0 * cpu / (secs * n_pool) : 0, n_pool, n_pool == 1 ? "" : "s",
		       secs, b->by_itself ? " (it ended by itself)" : "");
}

static int usage_error(const char *what, const char *v)
{
	fprintf(stderr, "fp-ctl: alloc: %s '%s' (fp-ctl --help)\n", what, v);
	return 2;
}

int ctl_alloc_main(int argc, char **argv)
{
	static struct arun runs[ALLOC_MAX_RUNS];
	static struct fp_alloc a;
	double interval_us = 5, seconds = 0;
	bool sleep_mode = false, json = false;
	const char *batch_cmd = NULL;
	struct ctl_batch batch = { .pid = -1 };
	int core = -1, pool[FP_ALLOC_MAX_CORES];
	unsigned n_runs = 0, n_pool = 0;

	for (int i = 2; i < argc; i++) {
		const char *o = argv[i];
		char *end;

		if ((!strcmp(o, "--interval-us") || !strcmp(o, "--seconds") || !strcmp(o, "--core")) &&
		    i + 1 == argc)
			return usage_error("missing value after", o);
		if (!strcmp(o, "--interval-us")) {
			interval_us = strtod(argv[++i], &end);
			if (*end || end == argv[i] || !(interval_us >= 1 && interval_us <= 1e6))
				return usage_error("--interval-us is a number of us in 1..1000000, not",
						   argv[i]);
		} else if (!strcmp(o, "--seconds")) {
			seconds = strtod(argv[++i], &end);
			if (*end || end == argv[i] || !(seconds > 0 && seconds <= 1e7))
				return usage_error("--seconds is a positive number, not", argv[i]);
		} else if (!strcmp(o, "--core")) {
			long c = strtol(argv[++i], &end, 10);
			if (*end || end == argv[i] || c < 0 || c >= CPU_SETSIZE)
				return usage_error("--core is a core number, not", argv[i]);
			core = (int)c;
		} else if (!strcmp(o, "--sleep")) {
			sleep_mode = true;
		} else if (!strcmp(o, "--batch")) {
			if (i + 1 == argc || !*argv[i + 1])
				return usage_error("--batch needs a command, e.g.",
						   "--batch 'fp-batch 60'");
			batch_cmd = argv[++i];
		} else if (!strcmp(o, "--json")) {
			json = true;
		} else if (o[0] == '-') {
			return usage_error("unknown option", o);
		} else if (n_runs == ALLOC_MAX_RUNS) {
			return usage_error("too many runs (at most 8), at", o);
		} else {
			runs[n_runs++].name = o;
		}
	}
	if (!n_runs)
		return usage_error("which runs? give their --stats names, e.g.", "fp-ctl alloc NAME");
	if (core >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(core, &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0) {
			fprintf(stderr, "fp-ctl: alloc: --core %d: %s\n", core, strerror(errno));
			return 1;
		}
	}
	for (unsigned i = 0; i < n_runs; i++)
		if (attach(&runs[i], pool, &n_pool)) {
			while (i--)
				detach(&runs[i]);
			return 1;
		}
	fp_alloc_init(&a, n_pool, (uint64_t)getpid());
	for (unsigned i = 0; i < n_runs; i++) {
		if (fp_alloc_add_app(&a, runs[i].first, runs[i].n_burst, runs[i].pool) != (int)i) {
			fprintf(stderr, "fp-ctl: alloc: run '%s' does not fit the allocator (%u homes, "
				"at most %d)\n", runs[i].name, runs[i].first, FP_ALLOC_MAX_QUEUES);
			return 1;
		}
		adopt(&a, i, &runs[i]);
	}
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);   /* --sleep: wake as close to the pass as can be */
	if (!json) {
		for (unsigned i = 0; i < n_runs; i++)
			printf("fp-ctl alloc: %s: %u home%s, %u burstable; a pass every %g us (%s)\n",
			       runs[i].name, runs[i].first, runs[i].first == 1 ? "" : "s",
			       runs[i].n_burst, interval_us, sleep_mode ? "sleeping between" :
			       "spinning between");
		fflush(stdout);
	}

	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (batch_cmd) {
		/* Shenango's batch job: on the whole pool at SCHED_IDLE (a worker the allocator
		 * wakes preempts it at once), sharing its cores rather than confined by a cpuset */
		uint64_t mask = 0;
		char err[400];

		for (unsigned i = 0; i < n_pool; i++)
			mask |= pool[i] < 64 ? 1ull << pool[i] : 0;
		fflush(NULL);
		int rc = -EINVAL;

		if (mask == 0 || (unsigned)__builtin_popcountll(mask) != n_pool)
			snprintf(err, sizeof(err), "the pool's cores must be 0-63");
		else
			rc = ctl_batch_start(&batch, batch_cmd, mask, mask,
					     CTL_BATCH_IDLE | CTL_BATCH_NO_CGROUP, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "fp-ctl: alloc: --batch: %s\n", err);
			for (unsigned i = 0; i < n_runs; i++)
				detach(&runs[i]);
			return 1;
		}
	}
	uint64_t step = (uint64_t)(interval_us * 1000.0), t0 = now_ns(), next = t0 + step;
	uint64_t check = t0, passes = 0, late = 0;
	const char *gone = NULL;

	while (!stop_asked && !gone) {
		uint64_t t = now_ns();

		if (t < next) {
			if (sleep_mode) {
				struct timespec ts = { (time_t)(next / 1000000000ull),
						       (long)(next % 1000000000ull) };
				clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
			} else {
				__builtin_ia32_pause();
			}
			continue;
		}
		if (t >= next + step) {
			late++;
			next = t;   /* no burst of catch-up passes: the next one an interval on */
		}
		next += step;
		pass(&a, runs, n_runs);
		passes++;
		if (t >= check) {
			check = t + ALLOC_CHECK_MS * 1000000ull;
			for (unsigned i = 0; i < n_runs && !gone; i++)
				if (!ctl_run_alive(runs[i].h))
					gone = runs[i].name;
			if (seconds && (double)(t - t0) / 1e9 >= seconds)
				break;
		}
	}
	if (gone && !json)
		printf("fp-ctl alloc: the run '%s' has stopped; the allocator ends\n", gone);
	double secs = (double)(now_ns() - t0) / 1e9;

	report(&a, runs, n_runs, secs, passes, late, interval_us, json);
	if (batch.pid > 0)
		batch_report(&batch, secs, n_pool, json);
	if (json)
		printf("}\n");
	for (unsigned i = 0; i < n_runs; i++)
		detach(&runs[i]);
	return 0;
}
