/* chan.c: the command channel of a run's stats segment, from the controller's side. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

#define WAIT_TAKEN_MS 1000   /* the run answers within ~10 ms; allow for a busy box */

double ctl_mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

void ctl_nap_us(unsigned us)
{
	struct timespec t = { us / 1000000, (long)(us % 1000000) * 1000 };

	nanosleep(&t, NULL);
}

struct fp_rt_stats_hdr *ctl_open(const char *name)
{
	struct fp_rt_stats_hdr *h = fp_rt_stats_open_rw(name, NULL);

	if (!h)
		fprintf(stderr, "fp-ctl: no flowplane run with stats segment '%s' (%s): start it "
			"with --stats %s, as the same user\n", name,
			errno == EPROTO ? "a layout this fp-ctl does not know" : strerror(errno),
			name);
	return h;
}

bool ctl_run_alive(const struct fp_rt_stats_hdr *h)
{
	return h->pid > 0 && (kill(h->pid, 0) == 0 || errno == EPERM);
}

int ctl_send(struct fp_rt_stats_hdr *h, const char *name, uint32_t op, uint32_t a0, uint32_t a1,
	     int *result)
{
	uint64_t done = __atomic_load_n(&h->cmd.done_seq, __ATOMIC_ACQUIRE);
	uint64_t seq = __atomic_load_n(&h->cmd.seq, __ATOMIC_ACQUIRE);

	seq = (seq > done ? seq : done) + 1;
	h->cmd.op = op;
	h->cmd.arg0 = a0;
	h->cmd.arg1 = a1;
	double t0 = ctl_mono_ms();
	__atomic_store_n(&h->cmd.seq, seq, __ATOMIC_RELEASE);
	while (__atomic_load_n(&h->cmd.done_seq, __ATOMIC_ACQUIRE) < seq) {
		if (ctl_mono_ms() - t0 > WAIT_TAKEN_MS) {
			fprintf(stderr, "fp-ctl: run '%s' did not take the command within %d ms (is "
				"it stopped, or another controller writing?)\n", name, WAIT_TAKEN_MS);
			return 1;
		}
		ctl_nap_us(200);
	}
	*result = h->cmd.result;
	return 0;
}

const char *ctl_refusal(uint32_t op, int r)
{
	bool park = op == FP_RT_CMD_PARK || op == FP_RT_CMD_UNPARK;

	switch (r) {
	case -EOPNOTSUPP:
		return "this run has no flow groups that can move (xdp, several workers, --steer "
		       "groups, --sched part)";
	case -EPERM:
		return "the application's flows cannot change worker";
	case -EBUSY:
		return park ? "a move to that worker is still to start, or it is the last worker "
			      "polling"
			    : "that group or its owner is busy with a move, or the worker was just "
			      "unparked and its queue is not back yet: try again";
	case -EALREADY:
		return op == FP_RT_CMD_PARK ? "the worker is parked already"
		       : op == FP_RT_CMD_UNPARK ? "the worker is not parked"
						: "the group is on that worker already";
	case -ENOTEMPTY:
		return "the worker still owns flow groups: move them away first";
	case -EHOSTDOWN:
		return op == FP_RT_CMD_SET_TABLE ? "the table gives groups to a parked worker"
						 : "that worker is parked: unpark it first";
	case -EINVAL:
		return op == FP_RT_CMD_SET_TABLE ? "a worker in the table is not one of this run's"
		       : park ? "no such worker in this run" : "no such group or worker in this run";
	default:
		return strerror(-r);
	}
}
