/* fp-stats.c: a live per-worker view of a running flowplane, read from its stats segment. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/rt.h>
#include <flowplane/rt_stats.h>

/*
 * The segment (rt_stats.h) holds counters only; rates come from two snapshots an interval
 * apart. Each worker's record is copied whole at each sample (it has one writer, plain
 * 64-bit stores), so a line never mixes two samples of one worker.
 */
#define SHM_DIR    "/dev/shm"
#define SHM_PREFIX "flowplane-"

static const char usage[] =
	"usage: fp-stats [--name NAME] [--interval SEC] [--count N] [--once] [--json] [--totals]\n"
	"\n"
	"Show each worker of a running flowplane every interval: packets and Mbit/s each way,\n"
	"busy share of the loop, mean and p99 frames per stack pass, p99 loop time, mean rx\n"
	"queue depth at polls that found frames, drops by reason (nonzero only), TCP\n"
	"connections and the application's ops/s; under --sched steal, the batches run at\n"
	"home and stolen and the calls run for thieves per second, and with --notify ipi the\n"
	"interrupts sent, handled and late (when any moved); stalls, the loop gaps that\n"
	"followed an idle round (the core taken away), when there were any.\n"
	"\n"
	"  --name NAME      the run started with --stats NAME (default: the only one running)\n"
	"  --interval SEC   seconds between views (default 1; fractions allowed)\n"
	"  --count N        stop after N views (default: until the run exits)\n"
	"  --once           one view (after one interval), then exit\n"
	"  --json           one JSON object per view instead of a table\n"
	"  --totals         print every counter and histogram since the start as one JSON\n"
	"                   object, at once, and exit (for scripts: take two and subtract)\n"
	"  --help           this text\n"
	"\n"
	"Exit status: 0 when done or the run exited, 1 when no run is found, 2 on bad usage\n"
	"or when several runs are found without --name.\n";

static const char *const drop_names[] = {
#define DROP_NAME(name) #name,
	FP_RT_DROPS(DROP_NAME)
#undef DROP_NAME
};

struct opts {
	const char *name;
	double interval;
	long count;        /* 0: forever */
	bool json;
	bool totals;
};

struct seg {
	char name[80];
	const struct fp_rt_stats_hdr *h;
	size_t size;
};

/* One sample: every worker's record, copied, and when it was taken. */
struct sample {
	double t;
	struct fp_rt_worker_stats *w;
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool pid_alive(int pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "name", required_argument, NULL, 'n' }, { "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'c' }, { "once", no_argument, NULL, '1' },
		{ "json", no_argument, NULL, 'j' },        { "help", no_argument, NULL, 'h' },
		{ "totals", no_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 'n': o->name = optarg; break;
		case 'j': o->json = true; break;
		case 't': o->totals = true; break;
		case '1': o->count = 1; break;
		case 'h': fputs(usage, stdout); exit(0);
		case 'i':
			o->interval = strtod(optarg, &end);
			if (end == optarg || *end || !(o->interval >= 0.01 && o->interval <= 3600)) {
				fprintf(stderr, "fp-stats: --interval: '%s' is not 0.01..3600 "
					"seconds\n", optarg);
				return -1;
			}
			break;
		case 'c':
			o->count = strtol(optarg, &end, 10);
			if (end == optarg || *end || o->count < 1) {
				fprintf(stderr, "fp-stats: --count: '%s' is not a positive "
					"number\n", optarg);
				return -1;
			}
			break;
		default:
			fprintf(stderr, "fp-stats: see fp-stats --help\n");
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fp-stats: unexpected '%s'; see fp-stats --help\n", argv[optind]);
		return -1;
	}
	return 0;
}

/* Without --name: the one segment whose run is alive. Returns 0, 1 (none) or 2 (several,
 * listed on stderr). */
static int find_segment(struct seg *out)
{
	DIR *d = opendir(SHM_DIR);
	struct dirent *e;
	int found = 0;

	while (d && (e = readdir(d))) {
		size_t size;
		const struct fp_rt_stats_hdr *h;
		if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)))
			continue;
		const char *name = e->d_name + strlen(SHM_PREFIX);
		if (!(h = fp_rt_stats_open(name, &size)) || !pid_alive(h->pid)) {
			if (h)
				munmap((void *)h, size);
			continue;
		}
		if (found == 1)
			fprintf(stderr, "fp-stats: several flowplane runs; pick one with --name:\n"
				"  %s (pid %d, %s)\n", out->name, (int)out->h->pid, out->h->app);
		if (found >= 1) {
			fprintf(stderr, "  %s (pid %d, %s)\n", name, (int)h->pid, h->app);
			munmap((void *)h, size);
		} else {
			snprintf(out->name, sizeof(out->name), "%s", name);
			out->h = h;
			out->size = size;
		}
		found++;
	}
	if (d)
		closedir(d);
	if (!found)
		fprintf(stderr, "fp-stats: no running flowplane (no " SHM_DIR "/" SHM_PREFIX
			"*); start one with --stats NAME\n");
	return found == 0 ? 1 : found == 1 ? 0 : 2;
}

static int open_named(const char *name, struct seg *out)
{
	snprintf(out->name, sizeof(out->name), "%s", name);
	if ((out->h = fp_rt_stats_open(name, &out->size)))
		return 0;
	if (errno == ENOENT)
		fprintf(stderr, "fp-stats: no running flowplane named '%s' (no " SHM_DIR "/"
			SHM_PREFIX "%s); start one with --stats %s\n", name, name, name);
	else if (errno == EPROTO)
		fprintf(stderr, "fp-stats: " SHM_DIR "/" SHM_PREFIX "%s is not a stats segment "
			"this fp-stats understands (version %u)\n", name, FP_RT_STATS_VERSION);
	else
		fprintf(stderr, "fp-stats: %s: %s\n", name, strerror(errno));
	return 1;
}

static void take_sample(const struct fp_rt_stats_hdr *h, struct sample *s)
{
	s->t = mono_s();
	for (unsigned i = 0; i < h->n_workers; i++)
		memcpy(&s->w[i], fp_rt_stats_worker(h, i), sizeof(s->w[i]));
}

/* ---- what one worker did between two samples ---- */

struct view {
	double rx_pps, rx_mbps, tx_pps, tx_mbps, busy_pct, batch_mean, rxq_mean, ops_s;
	double sleeps_s;
	unsigned batch_p99;
	uint64_t loop_p99_ns, conns;
	/* --sched steal: batches run at home and stolen, calls run for thieves; --notify ipi:
	 * interrupts sent, handled, late (per second) */
	double local_s, stolen_s, remote_s, ipi_sent_s, ipi_handled_s, ipi_late_s;
	bool sched_moved;
	/* stalls (gaps after an idle round: the core taken) in the interval */
	uint64_t stalls;
	double stall_ms;
};

/* Smallest bucket holding the 99th percentile of the deltas @d[0..n); -1 when empty. */
static int p99_bucket(const uint64_t *d, unsigned n)
{
	uint64_t total = 0, acc = 0;

	for (unsigned i = 0; i < n; i++)
		total += d[i];
	if (!total)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		acc += d[i];
		if ((double)acc >= 0.99 * (double)total)
			return (int)i;
	}
	return (int)n - 1;
}

static void hist_views(const struct fp_rt_worker_stats *a, const struct fp_rt_worker_stats *b,
		       struct view *v)
{
	uint64_t d[FP_RT_BATCH_BUCKETS], n = 0, frames = 0, rq = 0;
	double depth = 0;
	int p;

	for (unsigned i = 0; i < FP_RT_BATCH_BUCKETS; i++) {
		d[i] = b->batch_hist[i] - a->batch_hist[i];
		n += d[i];
		frames += i * d[i];
	}
	v->batch_mean = n ? (double)frames / (double)n : 0;
	v->batch_p99 = (p = p99_bucket(d, FP_RT_BATCH_BUCKETS)) < 0 ? 0 : (unsigned)p;
	for (unsigned i = 0; i < FP_RT_LOG2_BUCKETS; i++)
		d[i] = b->loop_ns_hist[i] - a->loop_ns_hist[i];
	p = p99_bucket(d, FP_RT_LOG2_BUCKETS);
	v->loop_p99_ns = p < 0 ? 0 : 1ull << p;   /* bucket p holds values below 2^p */
	for (unsigned i = 0; i < FP_RT_LOG2_BUCKETS; i++) {
		uint64_t k = b->rxq_hist[i] - a->rxq_hist[i];
		/* bucket i covers the integers 2^(i-1) .. 2^i - 1: count it at their mean */
		depth += (double)k * (i ? (3.0 * (double)(1ull << (i - 1)) - 1.0) / 2.0 : 0.0);
		rq += k;
	}
	v->rxq_mean = rq ? depth / (double)rq : 0;
}

static void make_view(const struct fp_rt_worker_stats *a, const struct fp_rt_worker_stats *b,
		      double dt, struct view *v)
{
	uint64_t busy = b->busy_cycles - a->busy_cycles, idle = b->idle_cycles - a->idle_cycles;

	v->rx_pps = (double)(b->rx_frames - a->rx_frames) / dt;
	v->tx_pps = (double)(b->tx_frames - a->tx_frames) / dt;
	v->rx_mbps = (double)(b->rx_bytes - a->rx_bytes) * 8 / dt / 1e6;
	v->tx_mbps = (double)(b->tx_bytes - a->tx_bytes) * 8 / dt / 1e6;
	v->busy_pct = busy + idle ? 100.0 * (double)busy / (double)(busy + idle) : 0;
	v->ops_s = (double)(b->app_ops - a->app_ops) / dt;
	v->sleeps_s = (double)(b->sleeps - a->sleeps) / dt;
	v->conns = b->tcp_conns;
	v->local_s = (double)(b->sched_local - a->sched_local) / dt;
	v->stolen_s = (double)(b->sched_stolen - a->sched_stolen) / dt;
	v->remote_s = (double)(b->sched_remote_calls - a->sched_remote_calls) / dt;
	v->ipi_sent_s = (double)(b->ipi_sent - a->ipi_sent) / dt;
	v->ipi_handled_s = (double)(b->ipi_handled - a->ipi_handled) / dt;
	v->ipi_late_s = (double)(b->ipi_late - a->ipi_late) / dt;
	v->stalls = b->stalls - a->stalls;
	v->stall_ms = (double)(b->stall_ns - a->stall_ns) / 1e6;
	v->sched_moved = b->sched_local != a->sched_local || b->sched_stolen != a->sched_stolen ||
			 b->sched_remote_calls != a->sched_remote_calls ||
			 b->ipi_sent != a->ipi_sent || b->ipi_handled != a->ipi_handled ||
			 b->ipi_late != a->ipi_late;
	hist_views(a, b, v);
}

/* The drops that moved in this interval: the runtime's reasons and the stack's counters
 * whose names say they are drops or bad input. Returns how many were written. */
static int drops_moved(const struct fp_rt_stats_hdr *h, const struct fp_rt_worker_stats *a,
		       const struct fp_rt_worker_stats *b, const char **names, uint64_t *counts,
		       int max)
{
	int n = 0;

	for (unsigned i = 0; i < FP_RT_DROP_COUNT && n < max; i++)
		if (b->drops[i] != a->drops[i]) {
			names[n] = drop_names[i];
			counts[n++] = b->drops[i] - a->drops[i];
		}
	for (unsigned i = 0; i < h->net_count && n < max; i++) {
		const char *nm = h->net_names[i];
		if (b->net[i] == a->net[i] || !(strstr(nm, "drop") || strstr(nm, "bad") ||
						 strstr(nm, "nobufs") || strstr(nm, "no_port")))
			continue;
		names[n] = nm;
		counts[n++] = b->net[i] - a->net[i];
	}
	return n;
}

/* ---- output ---- */

static void print_table(const struct seg *s, const struct sample *a, const struct sample *b)
{
	const struct fp_rt_stats_hdr *h = s->h;
	double dt = b->t - a->t;
	const char *names[32];
	uint64_t counts[32];

	printf("flowplane %s: pid %d, %s%s%s, %u worker%s, B=%u, idle %s (%.2f s)\n", h->app,
	       (int)h->pid, h->transport, h->ifname[0] ? " on " : "", h->ifname, h->n_workers,
	       h->n_workers == 1 ? "" : "s", h->batch_max,
	       h->idle_policy == FP_IDLE_POLL ? "poll" : "sleep", dt);
	printf("%3s %4s %9s %8s %9s %8s %6s %6s %4s %9s %6s %7s %9s\n", "wk", "core", "rx pps",
	       "rx Mb/s", "tx pps", "tx Mb/s", "busy%", "batch", "p99", "loop p99", "rxq",
	       "conns", "ops/s");
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct view v;
		make_view(&a->w[i], &b->w[i], dt, &v);
		printf("%3u %4d %9.0f %8.1f %9.0f %8.1f %6.1f %6.1f %4u %6.1f us %6.1f %7llu "
		       "%9.0f\n", i, b->w[i].core, v.rx_pps, v.rx_mbps, v.tx_pps, v.tx_mbps,
		       v.busy_pct, v.batch_mean, v.batch_p99, (double)v.loop_p99_ns / 1e3,
		       v.rxq_mean, (unsigned long long)v.conns, v.ops_s);
		if (v.sched_moved)
			printf("    sched/s: %.0f at home, %.0f stolen, %.0f calls for thieves; "
			       "interrupts/s: %.0f sent, %.0f handled, %.0f late\n", v.local_s,
			       v.stolen_s, v.remote_s, v.ipi_sent_s, v.ipi_handled_s, v.ipi_late_s);
		if (v.stalls)
			printf("    stalls: %llu, %.2f ms (the core taken while the worker idled)\n",
			       (unsigned long long)v.stalls, v.stall_ms);
		int n = drops_moved(h, &a->w[i], &b->w[i], names, counts, 32);
		for (int k = 0; k < n; k++)
			printf("%s%s %llu%s", k ? ", " : "    drops: ", names[k],
			       (unsigned long long)counts[k], k == n - 1 ? "\n" : "");
	}
	putchar('\n');
	fflush(stdout);
}

static void print_json(const struct seg *s, const struct sample *a, const struct sample *b)
{
	const struct fp_rt_stats_hdr *h = s->h;
	double dt = b->t - a->t;
	const char *names[32];
	uint64_t counts[32];

	printf("{\"name\":\"%s\",\"pid\":%d,\"app\":\"%s\",\"transport\":\"%s\",\"ifname\":\"%s\","
	       "\"interval_s\":%.3f,\"workers\":[", s->name, (int)h->pid, h->app, h->transport,
	       h->ifname, dt);
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct view v;
		make_view(&a->w[i], &b->w[i], dt, &v);
		printf("%s{\"worker\":%u,\"core\":%d,\"rx_pps\":%.1f,\"rx_mbps\":%.3f,"
		       "\"tx_pps\":%.1f,\"tx_mbps\":%.3f,\"busy_pct\":%.2f,\"batch_mean\":%.2f,"
		       "\"batch_p99\":%u,\"loop_p99_ns\":%llu,\"rxq_mean\":%.2f,\"conns\":%llu,"
		       "\"app_ops_per_s\":%.1f,\"sleeps_per_s\":%.1f,\"sched_local_per_s\":%.1f,"
		       "\"sched_stolen_per_s\":%.1f,\"sched_remote_calls_per_s\":%.1f,"
		       "\"ipi_sent_per_s\":%.1f,\"ipi_handled_per_s\":%.1f,\"ipi_late_per_s\":%.1f,"
		       "\"stalls\":%llu,\"stall_ms\":%.3f,\"drops\":{", i ? "," : "", i,
		       b->w[i].core, v.rx_pps, v.rx_mbps, v.tx_pps, v.tx_mbps, v.busy_pct,
		       v.batch_mean, v.batch_p99, (unsigned long long)v.loop_p99_ns, v.rxq_mean,
		       (unsigned long long)v.conns, v.ops_s, v.sleeps_s, v.local_s, v.stolen_s,
		       v.remote_s, v.ipi_sent_s, v.ipi_handled_s, v.ipi_late_s,
		       (unsigned long long)v.stalls, v.stall_ms);
		int n = drops_moved(h, &a->w[i], &b->w[i], names, counts, 32);
		for (int k = 0; k < n; k++)
			printf("%s\"%s\":%llu", k ? "," : "", names[k], (unsigned long long)counts[k]);
		printf("}}");
	}
	printf("]}\n");
	fflush(stdout);
}

static void json_array(const char *key, const uint64_t *v, unsigned n)
{
	printf(",\"%s\":[", key);
	for (unsigned i = 0; i < n; i++)
		printf("%s%llu", i ? "," : "", (unsigned long long)v[i]);
	putchar(']');
}

/* Cumulative counters of one worker, every field of its record, by name. */
static void print_worker_totals(const struct fp_rt_stats_hdr *h, unsigned i,
				const struct fp_rt_worker_stats *w)
{
	printf("%s{\"worker\":%u,\"core\":%d,\"queue\":%u,\"seq\":%llu,\"iterations\":%llu,"
	       "\"busy_cycles\":%llu,\"idle_cycles\":%llu,\"sleeps\":%llu,\"rx_frames\":%llu,"
	       "\"rx_bytes\":%llu,\"tx_frames\":%llu,\"tx_bytes\":%llu,\"conds\":%llu,"
	       "\"calls\":%llu,\"app_ops\":%llu,\"app_errors\":%llu,\"tcp_conns\":%llu,"
	       "\"pool_in_use\":%llu,\"drops\":{", i ? "," : "", i, w->core, w->queue,
	       (unsigned long long)w->seq, (unsigned long long)w->iterations,
	       (unsigned long long)w->busy_cycles, (unsigned long long)w->idle_cycles,
	       (unsigned long long)w->sleeps, (unsigned long long)w->rx_frames,
	       (unsigned long long)w->rx_bytes, (unsigned long long)w->tx_frames,
	       (unsigned long long)w->tx_bytes, (unsigned long long)w->conds,
	       (unsigned long long)w->calls, (unsigned long long)w->app_ops,
	       (unsigned long long)w->app_errors, (unsigned long long)w->tcp_conns,
	       (unsigned long long)w->pool_in_use);
	for (unsigned k = 0; k < FP_RT_DROP_COUNT; k++)
		printf("%s\"%s\":%llu", k ? "," : "", drop_names[k], (unsigned long long)w->drops[k]);
	printf("},\"net\":{");
	for (unsigned k = 0; k < h->net_count && k < FP_RT_NET_MAX; k++)
		printf("%s\"%.31s\":%llu", k ? "," : "", h->net_names[k], (unsigned long long)w->net[k]);
	putchar('}');
	json_array("batch_hist", w->batch_hist, FP_RT_BATCH_BUCKETS);
	json_array("rxq_hist", w->rxq_hist, FP_RT_LOG2_BUCKETS);
	json_array("loop_ns_hist", w->loop_ns_hist, FP_RT_LOG2_BUCKETS);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, gap_ns_hist) +
				 sizeof(w->gap_ns_hist)) {
		printf(",\"gaps\":%llu,\"gap_ns\":%llu", (unsigned long long)w->gaps,
		       (unsigned long long)w->gap_ns);
		json_array("gap_ns_hist", w->gap_ns_hist, FP_RT_LOG2_BUCKETS);
	}
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, rx_reordered) +
				 sizeof(w->rx_reordered))
		printf(",\"rx_reordered\":%llu", (unsigned long long)w->rx_reordered);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, sched_remote_calls) +
				 sizeof(w->sched_remote_calls))
		printf(",\"sched_local\":%llu,\"sched_stolen\":%llu,\"sched_remote_calls\":%llu",
		       (unsigned long long)w->sched_local, (unsigned long long)w->sched_stolen,
		       (unsigned long long)w->sched_remote_calls);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, steer_drop) +
				 sizeof(w->steer_drop))
		printf(",\"steer_out\":%llu,\"steer_in\":%llu,\"steer_drop\":%llu",
		       (unsigned long long)w->steer_out, (unsigned long long)w->steer_in,
		       (unsigned long long)w->steer_drop);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, move_ns_max) +
				 sizeof(w->move_ns_max))
		printf(",\"moves_out\":%llu,\"moves_in\":%llu,\"move_held\":%llu,"
		       "\"move_forwarded\":%llu,\"move_ns\":%llu,\"move_ns_max\":%llu",
		       (unsigned long long)w->moves_out, (unsigned long long)w->moves_in,
		       (unsigned long long)w->move_held, (unsigned long long)w->move_forwarded,
		       (unsigned long long)w->move_ns, (unsigned long long)w->move_ns_max);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, move_conns) +
				 sizeof(w->move_conns))
		printf(",\"move_conns\":%llu", (unsigned long long)w->move_conns);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, ctl_idle_ewma_ppm) +
				 sizeof(w->ctl_idle_ewma_ppm)) {
		printf(",\"ctl\":{\"intervals\":%llu,\"tau_ns\":%llu,\"q_milli\":%llu,"
		       "\"delay_ns\":%llu,\"idle_ppm\":%llu", (unsigned long long)w->ctl_intervals,
		       (unsigned long long)w->ctl_tau_ns, (unsigned long long)w->ctl_q_milli,
		       (unsigned long long)w->ctl_delay_ns, (unsigned long long)w->ctl_idle_ppm);
		json_array("tau_ewma_ns", w->ctl_tau_ewma_ns, 3);
		json_array("q_ewma_milli", w->ctl_q_ewma_milli, 3);
		json_array("delay_ewma_ns", w->ctl_delay_ewma_ns, 3);
		json_array("idle_ewma_ppm", w->ctl_idle_ewma_ppm, 3);
		putchar('}');
	}
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, parks) + sizeof(w->parks))
		printf(",\"slept_ns\":%llu,\"parked_ns\":%llu,\"parked\":%llu,\"parks\":%llu",
		       (unsigned long long)w->slept_ns, (unsigned long long)w->parked_ns,
		       (unsigned long long)w->parked, (unsigned long long)w->parks);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, realloc_hist) +
				 sizeof(w->realloc_hist)) {
		printf(",\"burst\":{\"parked\":%llu,\"took\":%llu,\"grants\":%llu,\"parks\":%llu,"
		       "\"revoked\":%llu,\"realloc_ns\":%llu,\"realloc_ns_max\":%llu",
		       (unsigned long long)w->burst_parked, (unsigned long long)w->burst_took,
		       (unsigned long long)w->burst_grants, (unsigned long long)w->burst_parks,
		       (unsigned long long)w->burst_revoked, (unsigned long long)w->realloc_ns,
		       (unsigned long long)w->realloc_ns_max);
		json_array("realloc_hist_us", w->realloc_hist, FP_RT_REALLOC_BUCKETS);
		putchar('}');
	}
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, adopt_rx) + sizeof(w->adopt_rx))
		printf(",\"q_lent\":%llu,\"q_lends\":%llu,\"q_back\":%llu,\"q_adopted\":%llu,"
		       "\"adopt_rx\":%llu",
		       (unsigned long long)w->q_lent, (unsigned long long)w->q_lends,
		       (unsigned long long)w->q_back, (unsigned long long)w->q_adopted,
		       (unsigned long long)w->adopt_rx);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, ipi_work_ns) +
				 sizeof(w->ipi_work_ns))
		printf(",\"ipi\":{\"sent\":%llu,\"handled\":%llu,\"late\":%llu,\"frames\":%llu,"
		       "\"calls\":%llu,\"held\":%llu,\"deferred\":%llu,\"wait_ns\":%llu,"
		       "\"work_ns\":%llu}",
		       (unsigned long long)w->ipi_sent, (unsigned long long)w->ipi_handled,
		       (unsigned long long)w->ipi_late, (unsigned long long)w->ipi_frames,
		       (unsigned long long)w->ipi_calls, (unsigned long long)w->ipi_held,
		       (unsigned long long)w->ipi_deferred, (unsigned long long)w->ipi_wait_ns,
		       (unsigned long long)w->ipi_work_ns);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, flush_sends) +
				 sizeof(w->flush_sends))
		printf(",\"flush_chunks\":%llu,\"flush_sends\":%llu",
		       (unsigned long long)w->flush_chunks, (unsigned long long)w->flush_sends);
	if (h->worker_size >= offsetof(struct fp_rt_worker_stats, stall_ns_hist) +
				 sizeof(w->stall_ns_hist)) {
		printf(",\"stalls\":%llu,\"stall_ns\":%llu", (unsigned long long)w->stalls,
		       (unsigned long long)w->stall_ns);
		json_array("stall_ns_hist", w->stall_ns_hist, FP_RT_LOG2_BUCKETS);
	}
	putchar('}');
}

static int print_totals(const struct seg *s)
{
	const struct fp_rt_stats_hdr *h = s->h;
	struct sample a = { mono_s(), calloc(h->n_workers, sizeof(*a.w)) };

	if (!a.w) {
		fprintf(stderr, "fp-stats: out of memory\n");
		return 1;
	}
	take_sample(h, &a);
	printf("{\"name\":\"%s\",\"pid\":%d,\"app\":\"%s\",\"transport\":\"%s\","
	       "\"ifname\":\"%s\",\"tsc_hz\":%llu,\"batch_max\":%u,\"idle_policy\":%u,"
	       "\"workers\":[", s->name, (int)h->pid, h->app, h->transport, h->ifname,
	       (unsigned long long)h->tsc_hz, h->batch_max, h->idle_policy);
	for (unsigned i = 0; i < h->n_workers; i++)
		print_worker_totals(h, i, &a.w[i]);
	printf("]}\n");
	free(a.w);
	return 0;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - floor(s)) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int watch(const struct seg *s, const struct opts *o)
{
	unsigned n = s->h->n_workers;
	struct sample a = { 0, calloc(n, sizeof(*a.w)) }, b = { 0, calloc(n, sizeof(*b.w)) };

	if (!a.w || !b.w) {
		fprintf(stderr, "fp-stats: out of memory\n");
		return 1;
	}
	take_sample(s->h, &a);
	for (long views = 0; !o->count || views < o->count; views++) {
		sleep_s(o->interval);
		take_sample(s->h, &b);
		(o->json ? print_json : print_table)(s, &a, &b);
		if (!pid_alive(s->h->pid)) {
			fprintf(stderr, "fp-stats: flowplane pid %d has exited\n", (int)s->h->pid);
			break;
		}
		struct sample t = a;
		a = b;
		b = t;
	}
	free(a.w);
	free(b.w);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { .interval = 1.0 };
	struct seg s;
	int ret;

	if (parse_args(argc, argv, &o) < 0)
		return 2;
	memset(&s, 0, sizeof(s));
	if ((ret = o.name ? open_named(o.name, &s) : find_segment(&s)) != 0)
		return ret;
	ret = o.totals ? print_totals(&s) : watch(&s, &o);
	munmap((void *)s.h, s.size);
	return ret;
}
