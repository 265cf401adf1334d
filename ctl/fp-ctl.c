/* fp-ctl: the control plane: commands to a running flowplane through its stats segment's command channel (rt_stats.h), and IX's control loop. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

/*
 * IX's control plane moves flow groups between cores and gives cores back:
 *
 *   fp-ctl groups NAME                  which worker owns each of the 128 flow groups
 *   fp-ctl move NAME GROUP WORKER       move a group; waits until it has arrived and
 *                                       says how long the move took
 *   fp-ctl park NAME WORKER             stop a worker that owns no group from polling
 *   fp-ctl unpark NAME WORKER           let it poll again (it gets groups by moves)
 *   fp-ctl run NAME [OPTIONS]           the control loop (loop.c, policy.c); --client FILE
 *                                       logs the clients' p99 (client.c) with each tick
 *   fp-ctl watch NAME [COUNT] [--power FILE] [--client FILE]
 *                                       every 100 ms, per worker: its groups, IX's metrics
 *                                       (tau, Q, queueing delay, idle share), ops/s, time
 *                                       asleep; the package's watts (RAPL, or the
 *                                       power model with --power)
 *   fp-ctl cmd NAME OP ARG0 ARG1        a raw command, answered with the run's verdict
 *                                       (for tests of the channel itself)
 *
 * NAME is the run's --stats name. One controller at a time: the channel has one slot.
 */
#define WAIT_ARRIVED_MS 2000

static void usage(FILE *f)
{
	fprintf(f, "usage: fp-ctl groups NAME\n"
		   "       fp-ctl move NAME GROUP WORKER\n"
		   "       fp-ctl park NAME WORKER | fp-ctl unpark NAME WORKER\n"
		   "       fp-ctl run NAME [--policy FILE] [--seconds S] [--log FILE] [--quiet]\n"
		   "                       [--batch CMD] [--client FILE]\n"
		   "       fp-ctl watch NAME [COUNT] [--power FILE] [--client FILE]\n"
		   "       fp-ctl alloc NAME... [--interval-us US] [--seconds S] [--core C] [--sleep]\n"
		   "                    [--batch CMD] [--json]\n"
		   "       fp-ctl cmd NAME OP ARG0 ARG1\n"
		   "Commands to a running flowplane whose stats segment is NAME (--stats NAME).\n"
		   "  groups   the flow-group table: for each worker, the groups it owns;\n"
		   "           a group on its way to a worker is marked '>'; parked workers say so,\n"
		   "           and whether their queue is lent (--park-queue)\n"
		   "  move     move flow group GROUP (0..127) to worker WORKER; waits until it\n"
		   "           has arrived and prints how long that took (xdp, several workers,\n"
		   "           an application whose flows may change worker: fp-echo server, spin\n"
		   "           --native, fp-kv, fp-web, fp-dns)\n"
		   "  park     park worker WORKER: it stops polling and sleeps, giving its core\n"
		   "           back (it must own no group; never the last worker polling)\n"
		   "  unpark   let a parked worker poll again; groups reach it by moves\n"
		   "  run      IX's control loop, every interval_ms (default 100: 10 Hz): unpark a\n"
		   "           worker and spread the groups over it when some worker's queueing\n"
		   "           delay ceil(Q/B)*tau exceeds delay_max_us (default 300); empty and\n"
		   "           park the last polling worker when the mean idle share exceeds\n"
		   "           1/n + idle_margin (default 0.1). --policy FILE: 'key = value' lines\n"
		   "           (interval_ms, delay_max_us, up_ewma, down_ewma (1/2, 1/8 or 1/32),\n"
		   "           idle_margin, min_workers, max_workers, down_hold_ms; ctl/README.md);\n"
		   "           --seconds S: stop after S seconds (default: at SIGINT/SIGTERM or\n"
		   "           when the run stops); --log FILE: one JSON line per tick (with\n"
		   "           --client FILE, fp-loadgen's stderr as it writes it, the clients'\n"
		   "           p99 of its last point in each line); --quiet:\n"
		   "           no line per change; --batch CMD: IX's consolidation: run CMD (sh -c)\n"
		   "           on the parked workers' cores, held there by a cpuset cgroup (v2,\n"
		   "           else v1; else CPU affinity), stopped while none is spare, given a\n"
		   "           core back before its worker polls again, ended with the loop (the\n"
		   "           run's workers must be pinned: --cores). The run keeps its workers\n"
		   "           as they are when the loop ends\n"
		   "  watch    every 100 ms (COUNT times, default until interrupted), per worker:\n"
		   "           groups owned, round time tau, queue depth Q, the queueing delay\n"
		   "           ceil(Q/B)*tau and the idle share, each smoothed with alpha 1/8\n"
		   "           (IX's control-plane metrics, published every 10 ms), parked or not,\n"
		   "           the application's operations per second and the share of the\n"
		   "           time asleep; then a line for all workers with the package's watts:\n"
		   "           RAPL's where the machine has it, and with --power FILE (the power\n"
		   "           model, bench/power/*.txt) the model's from the time asleep (at its\n"
		   "           nominal clock: a core asleep at C6, awake at full power); with\n"
		   "           --client FILE, fp-loadgen's stderr as it writes it, the clients'\n"
		   "           p99 of its last point (the runtime cannot see a request's wait in\n"
		   "           the NIC's queue or on the wire)\n"
		   "  alloc    Shenango's core allocator over one or more runs started with\n"
		   "           --sched steal --burst K: every --interval-us (default 5) a run whose\n"
		   "           homes' queues hold an item seen at the previous pass gets one of its\n"
		   "           parked burstable workers' cores (idle cores first, else one revoked\n"
		   "           from another run); workers park themselves after --burst-idle-us\n"
		   "           with nothing to do. Spins on its core between passes (--core C pins\n"
		   "           it; --sleep sleeps instead, for a machine with no core to spare).\n"
		   "           Ends at --seconds, SIGINT/SIGTERM or when a run stops, with what it\n"
		   "           did and the grant-to-running times the workers measured (--json: as\n"
		   "           JSON). --batch CMD: run CMD (sh -c) as the batch job on the\n"
		   "           burstable workers' cores at SCHED_IDLE, stopped at the end, and say\n"
		   "           how much CPU it got. Needs the runs' user or root (it copies their\n"
		   "           eventfds)\n"
		   "  cmd      send raw command OP with ARG0 ARG1 and print the run's answer\n"
		   "           (tests of the channel: unknown ops and bad arguments are refused)\n"
		   "exit status: 0 done, 1 refused or timed out, 2 bad arguments\n");
}

static int cmd_groups(const char *name)
{
	struct fp_rt_stats_hdr *h = ctl_open(name);

	if (!h)
		return 1;
	if (!h->n_groups) {
		fprintf(stderr, "fp-ctl: run '%s' has no flow groups (they need --net xdp, several "
			"workers and --steer groups)\n", name);
		return 1;
	}
	for (unsigned w = 0; w < h->n_workers; w++) {
		unsigned n = 0;
		printf("worker %u:", w);
		for (unsigned g = 0; g < h->n_groups && g < 128; g++) {
			uint16_t e = __atomic_load_n(&h->groups[g], __ATOMIC_RELAXED);
			if ((e & ~FP_RT_GROUP_MOVING) != w)
				continue;
			printf(" %s%u", e & FP_RT_GROUP_MOVING ? ">" : "", g);
			n++;
		}
		const struct fp_rt_worker_stats *r = fp_rt_stats_worker(h, w);
		bool lent = h->worker_size >= offsetof(struct fp_rt_worker_stats, q_lent) +
						 sizeof(r->q_lent) && r->q_lent;
		printf("%s  (%u groups)%s%s\n", n ? "" : " -", n, r->parked ? " parked" : "",
		       lent ? ", its queue polled by another worker" : "");
	}
	return 0;
}

static bool parse_u(const char *s, unsigned long max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > max)
		return false;
	*out = (unsigned)v;
	return true;
}

static int cmd_raw(const char *name, const char *ops, const char *a0s, const char *a1s)
{
	unsigned op, a0, a1;
	int r;

	if (!parse_u(ops, UINT32_MAX, &op) || !parse_u(a0s, UINT32_MAX, &a0) ||
	    !parse_u(a1s, UINT32_MAX, &a1)) {
		fprintf(stderr, "fp-ctl: cmd: OP ARG0 ARG1 are unsigned numbers\n");
		return 2;
	}
	struct fp_rt_stats_hdr *h = ctl_open(name);
	if (!h)
		return 1;
	if (ctl_send(h, name, op, a0, a1, &r))
		return 1;
	printf("result %d (%s); accepted %llu, rejected %llu\n", r, r ? strerror(-r) : "taken",
	       (unsigned long long)h->cmd.accepted, (unsigned long long)h->cmd.rejected);
	return r ? 1 : 0;
}

static int cmd_move(const char *name, const char *gs, const char *ws)
{
	unsigned g, w;

	if (!parse_u(gs, 127, &g) || !parse_u(ws, 63, &w)) {
		fprintf(stderr, "fp-ctl: move: GROUP is 0..127 and WORKER a worker number "
			"(got '%s' '%s')\n", gs, ws);
		return 2;
	}
	struct fp_rt_stats_hdr *h = ctl_open(name);
	if (!h)
		return 1;
	double t0 = ctl_mono_ms();
	int r;
	if (ctl_send(h, name, FP_RT_CMD_MOVE_GROUP, g, w, &r))
		return 1;
	if (r) {
		fprintf(stderr, "fp-ctl: move %u to %u refused: %s\n", g, w,
			ctl_refusal(FP_RT_CMD_MOVE_GROUP, r));
		return 1;
	}
	while (__atomic_load_n(&h->groups[g], __ATOMIC_ACQUIRE) != w) {
		if (ctl_mono_ms() - t0 > WAIT_ARRIVED_MS) {
			fprintf(stderr, "fp-ctl: group %u has not arrived at worker %u after %d ms\n",
				g, w, WAIT_ARRIVED_MS);
			return 1;
		}
		ctl_nap_us(200);
	}
	printf("group %u moved to worker %u in %.2f ms (command to arrival, as seen here)\n", g,
	       w, ctl_mono_ms() - t0);
	return 0;
}

static double mono_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The package's energy counter in µJ (RAPL, package 0), or -1 where there is none. */
static long long rapl_uj(void)
{
	FILE *f = fopen("/sys/class/powercap/intel-rapl:0/energy_uj", "r");
	long long v = -1;

	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* fp-ctl watch NAME [COUNT] [--power FILE] [--client FILE]: IX's metrics, the load and the
 * watts (RAPL's where the machine has it; the power model's with --power), and the
 * clients' p99 (--client), every 100 ms. */
static int cmd_watch(int argc, char **argv)
{
	const char *name = argv[2], *counts = NULL, *power = NULL, *client = NULL;
	struct ctl_client ct = { 0 };
	struct ctl_power pw;
	unsigned count = 0;

	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--power") && i + 1 < argc)
			power = argv[++i];
		else if (!strcmp(argv[i], "--client") && i + 1 < argc)
			client = argv[++i];
		else if (!counts && argv[i][0] != '-')
			counts = argv[i];
		else {
			fprintf(stderr, "fp-ctl: watch: unexpected '%s' (fp-ctl watch NAME [COUNT] "
				"[--power FILE] [--client FILE])\n", argv[i]);
			return 2;
		}
	}
	if (counts && !parse_u(counts, UINT32_MAX, &count)) {
		fprintf(stderr, "fp-ctl: watch: COUNT is a number of lines (got '%s')\n", counts);
		return 2;
	}
	if (power) {
		char err[160], *text = ctl_read_file(power);

		if (!text) {
			fprintf(stderr, "fp-ctl: watch: --power %s: %s\n", power,
				ctl_read_error(errno));
			return 2;
		}
		int rc = ctl_power_parse(&pw, text, err, sizeof(err));
		free(text);
		if (rc) {
			fprintf(stderr, "fp-ctl: watch: --power %s: %s\n", power, err);
			return 2;
		}
	}
	if (client && !(ct.f = fopen(client, "r"))) {
		fprintf(stderr, "fp-ctl: watch: --client %s: %s (fp-loadgen's stderr, e.g. "
			"fp-loadgen ... 2> FILE)\n", client, strerror(errno));
		return 2;
	}
	struct fp_rt_stats_hdr *h = ctl_open(name);
	if (!h) {
		if (ct.f)
			fclose(ct.f);
		return 1;
	}
	unsigned n = h->n_workers < CTL_MAX_WORKERS ? h->n_workers : CTL_MAX_WORKERS;
	uint64_t ops0[CTL_MAX_WORKERS], slept0[CTL_MAX_WORKERS];
	double t0 = mono_s();
	long long e0 = rapl_uj();

	for (unsigned w = 0; w < n; w++) {
		const struct fp_rt_worker_stats *r = fp_rt_stats_worker(h, w);
		ops0[w] = r->app_ops;
		slept0[w] = r->slept_ns;
	}
	for (unsigned k = 0; !count || k < count; k++) {
		struct timespec nap = { 0, 100 * 1000 * 1000 };
		double asleep[CTL_MAX_WORKERS], t, all_ops = 0;
		unsigned polling = 0;

		nanosleep(&nap, NULL);
		t = mono_s();
		double dt = t - t0 > 1e-6 ? t - t0 : 1e-6;
		printf("%s", k ? "" : "worker  groups   tau_us      Q  delay_us  idle%  intervals  "
				      "parked_s      ops/s  asleep%\n");
		for (unsigned w = 0; w < n; w++) {
			const struct fp_rt_worker_stats *r = fp_rt_stats_worker(h, w);
			uint64_t ops = r->app_ops, slept = r->slept_ns;
			double rate = (double)(ops - ops0[w]) / dt;
			unsigned groups = 0;

			asleep[w] = (double)(slept - slept0[w]) / 1e9 / dt;
			asleep[w] = asleep[w] < 0 ? 0 : asleep[w] > 1 ? 1 : asleep[w];
			ops0[w] = ops;
			slept0[w] = slept;
			all_ops += rate;
			polling += !r->parked;
			for (unsigned g = 0; g < h->n_groups && g < 128; g++)
				groups += (h->groups[g] & ~FP_RT_GROUP_MOVING) == w;
			printf("%6u  %6u  %7.2f  %5.2f  %8.2f  %5.1f  %9llu  %8.2f  %9.0f  %7.1f%s\n",
			       w, groups, (double)r->ctl_tau_ewma_ns[1] / 1e3,
			       (double)r->ctl_q_ewma_milli[1] / 1e3,
			       (double)r->ctl_delay_ewma_ns[1] / 1e3,
			       (double)r->ctl_idle_ewma_ppm[1] / 1e4,
			       (unsigned long long)r->ctl_intervals, (double)r->parked_ns / 1e9,
			       rate, 100 * asleep[w], r->parked ? " parked" : "");
		}
		t0 = t;
		printf("   all  %u of %u polling, %.0f ops/s", polling, n, all_ops);
		long long e1 = rapl_uj();
		if (e0 >= 0 && e1 >= e0)   /* a wrapped counter gives no figure this time */
			printf(", %.1f W (RAPL, package 0)", (double)(e1 - e0) / 1e6 / dt);
		e0 = e1;
		if (power)
			printf(", %.1f W modelled (%s at its nominal clock; a core asleep at C6, "
			       "awake at full power)", ctl_power_watts(&pw, n, asleep), power);
		if (ct.f) {
			ctl_client_read(&ct);
			if (ct.point)
				printf(", clients' p99 %.1f us (fp-loadgen point %u/%u)", ct.p99_us,
				       ct.point, ct.points);
			else
				printf(", clients' p99 - (no point reported yet)");
		}
		printf("\n");
		fflush(stdout);
	}
	if (ct.f)
		fclose(ct.f);
	return 0;
}

static int cmd_park(const char *name, const char *ws, bool on)
{
	unsigned w;
	int r;

	if (!parse_u(ws, 63, &w)) {
		fprintf(stderr, "fp-ctl: %spark: WORKER is a worker number (got '%s')\n",
			on ? "" : "un", ws);
		return 2;
	}
	struct fp_rt_stats_hdr *h = ctl_open(name);
	if (!h)
		return 1;
	uint32_t op = on ? FP_RT_CMD_PARK : FP_RT_CMD_UNPARK;
	if (ctl_send(h, name, op, w, 0, &r))
		return 1;
	if (r) {
		fprintf(stderr, "fp-ctl: %spark %u refused: %s\n", on ? "" : "un", w,
			ctl_refusal(op, r));
		return 1;
	}
	printf("worker %u %s\n", w, on ? "parked" : "unparked");
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct ctl_run_opts o = { 0 };
	const char *name = NULL;
	char err[256];

	ctl_policy_default(&o.policy);
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		bool more = i + 1 < argc;

		if (!strcmp(a, "--policy") && more) {
			char *text = ctl_read_file(argv[++i]);
			if (!text) {
				fprintf(stderr, "fp-ctl: cannot read policy %s: %s\n", argv[i],
					ctl_read_error(errno));
				return 2;
			}
			int rc = ctl_policy_parse(text, &o.policy, err, sizeof(err));
			free(text);
			if (rc) {
				fprintf(stderr, "fp-ctl: policy %s: %s\n", argv[i], err);
				return 2;
			}
			if (o.policy.n_rungs) {
				fprintf(stderr, "fp-ctl: policy %s: a ladder sets clock speeds, which "
					"real cores here cannot change; run it in the simulator "
					"(fp-vsim --ctl POLICY), or remove the ladder line\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(a, "--seconds") && more) {
			char *end;
			o.seconds = strtod(argv[++i], &end);
			if (*end || end == argv[i] || !(o.seconds > 0) || o.seconds > 1e7) {
				fprintf(stderr, "fp-ctl: --seconds wants a positive number (got '%s')\n",
					argv[i]);
				return 2;
			}
		} else if (!strcmp(a, "--log") && more) {
			o.log_path = argv[++i];
		} else if (!strcmp(a, "--client") && more) {
			o.client_path = argv[++i];
		} else if (!strcmp(a, "--batch") && more) {
			o.batch = argv[++i];
			if (!*o.batch) {
				fprintf(stderr, "fp-ctl: --batch wants a command to run\n");
				return 2;
			}
		} else if (!strcmp(a, "--quiet")) {
			o.quiet = true;
		} else if (a[0] != '-' && !name) {
			name = a;
		} else {
			fprintf(stderr, "fp-ctl: run: unknown or incomplete option '%s' (fp-ctl "
				"--help)\n", a);
			return 2;
		}
	}
	if (!name) {
		fprintf(stderr, "fp-ctl: run: which run? fp-ctl run NAME (its --stats name)\n");
		return 2;
	}
	if (o.client_path && !o.log_path) {
		fprintf(stderr, "fp-ctl: run: --client puts the clients' p99 in the log: give "
			"--log FILE too\n");
		return 2;
	}
	return ctl_loop(name, &o);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "groups"))
		return cmd_groups(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "move"))
		return cmd_move(argv[2], argv[3], argv[4]);
	if (argc == 4 && (!strcmp(argv[1], "park") || !strcmp(argv[1], "unpark")))
		return cmd_park(argv[2], argv[3], !strcmp(argv[1], "park"));
	if (argc >= 3 && !strcmp(argv[1], "run"))
		return cmd_run(argc, argv);
	if (argc >= 3 && !strcmp(argv[1], "watch"))
		return cmd_watch(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "alloc"))
		return ctl_alloc_main(argc, argv);
	if (argc == 6 && !strcmp(argv[1], "cmd"))
		return cmd_raw(argv[2], argv[3], argv[4], argv[5]);
	usage(stderr);
	return 2;
}
