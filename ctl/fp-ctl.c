/* fp-ctl: commands to a running flowplane through its stats segment's command channel (rt_stats.h): flow groups, for now. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/rt_stats.h>

/*
 * The control plane's first verbs (IX's control plane moves flow groups between cores;
 * the 10 Hz loop that decides when is the next step of ctl/):
 *
 *   fp-ctl groups NAME                  which worker owns each of the 128 flow groups
 *   fp-ctl move NAME GROUP WORKER       move a group; waits until it has arrived and
 *                                       says how long the move took
 *   fp-ctl watch NAME [COUNT]           every 100 ms, per worker: its groups and IX's
 *                                       metrics (tau, Q, queueing delay, idle share)
 *   fp-ctl cmd NAME OP ARG0 ARG1        a raw command, answered with the run's verdict
 *                                       (for tests of the channel itself)
 *
 * NAME is the run's --stats name. One controller at a time: the channel has one slot.
 */
#define WAIT_TAKEN_MS   1000   /* the run answers within ~10 ms; allow for a busy box */
#define WAIT_ARRIVED_MS 2000

static void usage(FILE *f)
{
	fprintf(f, "usage: fp-ctl groups NAME\n"
		   "       fp-ctl move NAME GROUP WORKER\n"
		   "       fp-ctl watch NAME [COUNT]\n"
		   "       fp-ctl cmd NAME OP ARG0 ARG1\n"
		   "Commands to a running flowplane whose stats segment is NAME (--stats NAME).\n"
		   "  groups   the flow-group table: for each worker, the groups it owns;\n"
		   "           a group on its way to a worker is marked '>'\n"
		   "  move     move flow group GROUP (0..127) to worker WORKER; waits until it\n"
		   "           has arrived and prints how long that took (xdp, several workers,\n"
		   "           an application whose flows may change worker: fp-echo spin\n"
		   "           --native)\n"
		   "  watch    every 100 ms (COUNT times, default until interrupted), per worker:\n"
		   "           groups owned, round time tau, queue depth Q, the queueing delay\n"
		   "           ceil(Q/B)*tau and the idle share, each smoothed with alpha 1/8\n"
		   "           (IX's control-plane metrics, published every 10 ms)\n"
		   "  cmd      send raw command OP with ARG0 ARG1 and print the run's answer\n"
		   "           (tests of the channel: unknown ops and bad arguments are refused)\n"
		   "exit status: 0 done, 1 refused or timed out, 2 bad arguments\n");
}

static double mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void nap(void)
{
	struct timespec t = { 0, 200 * 1000 };

	nanosleep(&t, NULL);
}

static struct fp_rt_stats_hdr *open_seg(const char *name)
{
	struct fp_rt_stats_hdr *h = fp_rt_stats_open_rw(name, NULL);

	if (!h)
		fprintf(stderr, "fp-ctl: no flowplane run with stats segment '%s' (%s): start it "
			"with --stats %s, as the same user\n", name,
			errno == EPROTO ? "a layout this fp-ctl does not know" : strerror(errno),
			name);
	return h;
}

static int cmd_groups(const char *name)
{
	struct fp_rt_stats_hdr *h = open_seg(name);

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
		printf("%s  (%u groups)\n", n ? "" : " -", n);
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

/* Write one command and wait for the run to take it; its verdict, or 1 on a timeout. */
static int send_cmd(struct fp_rt_stats_hdr *h, const char *name, uint32_t op, uint32_t a0,
		    uint32_t a1, int *result)
{
	uint64_t done = __atomic_load_n(&h->cmd.done_seq, __ATOMIC_ACQUIRE);
	uint64_t seq = __atomic_load_n(&h->cmd.seq, __ATOMIC_ACQUIRE);

	seq = (seq > done ? seq : done) + 1;
	h->cmd.op = op;
	h->cmd.arg0 = a0;
	h->cmd.arg1 = a1;
	double t0 = mono_ms();
	__atomic_store_n(&h->cmd.seq, seq, __ATOMIC_RELEASE);
	while (__atomic_load_n(&h->cmd.done_seq, __ATOMIC_ACQUIRE) < seq) {
		if (mono_ms() - t0 > WAIT_TAKEN_MS) {
			fprintf(stderr, "fp-ctl: run '%s' did not take the command within %d ms (is "
				"it stopped, or another controller writing?)\n", name, WAIT_TAKEN_MS);
			return 1;
		}
		nap();
	}
	*result = h->cmd.result;
	return 0;
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
	struct fp_rt_stats_hdr *h = open_seg(name);
	if (!h)
		return 1;
	if (send_cmd(h, name, op, a0, a1, &r))
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
	struct fp_rt_stats_hdr *h = open_seg(name);
	if (!h)
		return 1;
	double t0 = mono_ms();
	int r;
	if (send_cmd(h, name, FP_RT_CMD_MOVE_GROUP, g, w, &r))
		return 1;
	if (r) {
		const char *why = r == -EOPNOTSUPP ? "this run has no flow groups that can move "
						    "(xdp, several workers, --steer groups, "
						    "--sched part)"
				  : r == -EPERM ? "the application's flows cannot change worker"
				  : r == -EBUSY ? "that group, or its owner, is busy with a move: try "
						  "again"
				  : r == -EALREADY ? "the group is on that worker already"
				  : r == -EINVAL ? "no such group or worker in this run"
				  : strerror(-r);
		fprintf(stderr, "fp-ctl: move %u to %u refused: %s\n", g, w, why);
		return 1;
	}
	while (__atomic_load_n(&h->groups[g], __ATOMIC_ACQUIRE) != w) {
		if (mono_ms() - t0 > WAIT_ARRIVED_MS) {
			fprintf(stderr, "fp-ctl: group %u has not arrived at worker %u after %d ms\n",
				g, w, WAIT_ARRIVED_MS);
			return 1;
		}
		nap();
	}
	printf("group %u moved to worker %u in %.2f ms (command to arrival, as seen here)\n", g,
	       w, mono_ms() - t0);
	return 0;
}

static int cmd_watch(const char *name, const char *counts)
{
	unsigned count = 0;

	if (counts && !parse_u(counts, UINT32_MAX, &count)) {
		fprintf(stderr, "fp-ctl: watch: COUNT is a number of lines (got '%s')\n", counts);
		return 2;
	}
	struct fp_rt_stats_hdr *h = open_seg(name);
	if (!h)
		return 1;
	for (unsigned k = 0; !count || k < count; k++) {
		if (k) {
			struct timespec t = { 0, 100 * 1000 * 1000 };
			nanosleep(&t, NULL);
		}
		printf("%s", k ? "" : "worker  groups   tau_us      Q  delay_us  idle%  intervals\n");
		for (unsigned w = 0; w < h->n_workers; w++) {
			const struct fp_rt_worker_stats *r = fp_rt_stats_worker(h, w);
			unsigned groups = 0;
			for (unsigned g = 0; g < h->n_groups && g < 128; g++)
				groups += (h->groups[g] & ~FP_RT_GROUP_MOVING) == w;
			printf("%6u  %6u  %7.2f  %5.2f  %8.2f  %5.1f  %9llu\n", w, groups,
			       (double)r->ctl_tau_ewma_ns[1] / 1e3, (double)r->ctl_q_ewma_milli[1] / 1e3,
			       (double)r->ctl_delay_ewma_ns[1] / 1e3,
			       (double)r->ctl_idle_ewma_ppm[1] / 1e4,
			       (unsigned long long)r->ctl_intervals);
		}
		fflush(stdout);
	}
	return 0;
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
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "watch"))
		return cmd_watch(argv[2], argc == 4 ? argv[3] : NULL);
	if (argc == 6 && !strcmp(argv[1], "cmd"))
		return cmd_raw(argv[2], argv[3], argv[4], argv[5]);
	usage(stderr);
	return 2;
}
