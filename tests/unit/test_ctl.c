/* test_ctl.c: the control plane's policy (ctl/policy.c): its file format, IX's decisions from what the loop sees, and the group plan. */
#include <errno.h>
#include <string.h>

#include "ctl.h"
#include "harness.h"

static void policy_file(void **state)
{
	(void)state;
	struct ctl_policy p;
	char err[256];

	ctl_policy_default(&p);
	assert_int_equal(p.interval_ms, 100);          /* IX's 10 Hz */
	assert_true(p.delay_max_us == 300.0);          /* IX's bound for a 500 us SLO */
	assert_int_equal(ctl_policy_parse("# energy\n\ndelay_max_us = 150 # tighter\n"
					  "  up_ewma=1/8\ndown_ewma = 1/32\r\nmin_workers = 2\n"
					  "max_workers = 3\nidle_margin = 0.05", &p, err,
					  sizeof(err)), 0);
	assert_true(p.delay_max_us == 150.0);
	assert_int_equal(p.up_ewma, 1);
	assert_int_equal(p.down_ewma, 2);
	assert_int_equal(p.min_workers, 2);
	assert_int_equal(p.max_workers, 3);
	assert_true(p.idle_margin == 0.05);
	assert_int_equal(p.interval_ms, 100);          /* not set: kept */

	static const struct { const char *text, *says; } bad[] = {
		{ "delay_max_us 300\n", "line 1: expected 'key = value'" },
		{ "\n\nspeed = 3\n", "line 3: unknown key 'speed'" },
		{ "interval_ms = 0\n", "line 1: interval_ms must be a whole number from 1" },
		{ "interval_ms = 2.5\n", "interval_ms must be a whole number" },
		{ "up_ewma = 1/4\n", "up_ewma must be 1/2, 1/8 or 1/32" },
		{ "idle_margin = nan\n", "idle_margin must be a number" },
		{ "idle_margin = 0.1x\n", "idle_margin must be a number" },
		{ "min_workers = 0\n", "min_workers must be" },
		{ "min_workers = 3\nmax_workers = 2\n", "max_workers (2) is below min_workers (3)" },
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(bad); i++) {
		ctl_policy_default(&p);
		err[0] = '\0';
		assert_int_equal(ctl_policy_parse(bad[i].text, &p, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].says))
			fail_msg("'%s': said '%s', not '%s'", bad[i].text, err, bad[i].says);
	}
	char longline[400];
	memset(longline, 'x', sizeof(longline) - 1);
	longline[sizeof(longline) - 1] = '\0';
	assert_int_equal(ctl_policy_parse(longline, &p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than"));
}

/* Two workers, @parked1: whether worker 1 is parked; both fresh, idle @idle, delay @delay. */
static struct ctl_view view2(bool parked1, double idle, double delay_us)
{
	struct ctl_view v = { .n = 2, .now_ms = 10000, .last_change_ms = 0, .draining = -1 };

	for (unsigned w = 0; w < 2; w++) {
		v.w[w].fresh = true;
		for (unsigned i = 0; i < 3; i++) {
			v.w[w].idle[i] = idle;
			v.w[w].delay_us[i] = delay_us;
		}
	}
	v.w[1].parked = parked1;
	v.w[0].groups = parked1 ? 128 : 64;
	v.w[1].groups = parked1 ? 0 : 64;
	return v;
}

static void decisions(void **state)
{
	(void)state;
	struct ctl_policy p;
	struct ctl_decision d;
	struct ctl_view v;

	ctl_policy_default(&p);
	/* one worker polling, its queue delayed past the bound: add the parked one */
	v = view2(true, 0.0, 400);
	d = ctl_decide(&p, &v);
	assert_int_equal(d.act, CTL_UP);
	assert_int_equal(d.worker, 1);
	/* ...but not past max_workers, nor while a change is under way */
	p.max_workers = 1;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	p.max_workers = 0;
	v.moving = true;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	v.moving = false;
	v.draining = 1;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	/* below the bound: hold */
	v = view2(true, 0.1, 250);
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	/* two polling, idle 0.7 > 1/2 + 0.1: remove the last one */
	v = view2(false, 0.7, 5);
	d = ctl_decide(&p, &v);
	assert_int_equal(d.act, CTL_DOWN);
	assert_int_equal(d.worker, 1);
	/* idle 0.55 < 0.6: the load would not fit in one */
	v = view2(false, 0.55, 5);
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	/* within the hold time of the last change: hold */
	v = view2(false, 0.9, 5);
	v.last_change_ms = v.now_ms - 500;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	/* at min_workers: hold */
	p.min_workers = 2;
	v = view2(false, 0.9, 5);
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
	p.min_workers = 1;
	/* a worker that published nothing since the last tick slept: idle, no delay, even if
	 * its last published figures said otherwise */
	v = view2(false, 0.0, 900);
	v.w[0].fresh = v.w[1].fresh = false;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_DOWN);
	/* the signals follow the chosen EWMA: fast delay high, slow one low */
	v = view2(true, 0.0, 100);
	v.w[0].delay_us[0] = 500;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_UP);
	p.up_ewma = 2;
	assert_int_equal(ctl_decide(&p, &v).act, CTL_HOLD);
}

static unsigned count(const uint16_t *t, unsigned w)
{
	unsigned n = 0;

	for (unsigned g = 0; g < CTL_GROUPS; g++)
		n += (t[g] & ~FP_RT_GROUP_MOVING) == w;
	return n;
}

static void apply(uint16_t *t, const struct ctl_move *m, unsigned k)
{
	for (unsigned i = 0; i < k; i++)
		t[m[i].group] = m[i].to;
}

static void plans(void **state)
{
	(void)state;
	uint16_t t[CTL_GROUPS];
	struct ctl_move m[CTL_GROUPS];
	unsigned k;

	for (unsigned g = 0; g < CTL_GROUPS; g++)
		t[g] = 0;
	/* all on 0, spread over 0 and 1: 64 moves, no more */
	k = ctl_plan(t, CTL_GROUPS, 2, 0x3, m, CTL_GROUPS);
	assert_int_equal(k, 64);
	apply(t, m, k);
	assert_int_equal(count(t, 0), 64);
	assert_int_equal(count(t, 1), 64);
	/* balanced: nothing to do */
	assert_int_equal(ctl_plan(t, CTL_GROUPS, 2, 0x3, m, CTL_GROUPS), 0);
	/* three workers: 43, 43, 42, each group moved at most once */
	k = ctl_plan(t, CTL_GROUPS, 3, 0x7, m, CTL_GROUPS);
	assert_int_equal(k, 42);
	apply(t, m, k);
	assert_int_equal(count(t, 0), 43);
	assert_int_equal(count(t, 1), 43);
	assert_int_equal(count(t, 2), 42);
	/* empty worker 2 (it is to be parked): its groups go to 0 and 1 evenly */
	k = ctl_plan(t, CTL_GROUPS, 3, 0x3, m, CTL_GROUPS);
	assert_int_equal(k, 42);
	apply(t, m, k);
	assert_int_equal(count(t, 2), 0);
	assert_int_equal(count(t, 0), 64);
	assert_int_equal(count(t, 1), 64);
	/* a group marked moving counts for the worker it is going to */
	t[5] = 1 | FP_RT_GROUP_MOVING;
	t[6] = 1 | FP_RT_GROUP_MOVING;
	k = ctl_plan(t, CTL_GROUPS, 2, 0x3, m, CTL_GROUPS);
	assert_int_equal(k, 1);
	/* a bounded plan, and no target at all */
	assert_int_equal(ctl_plan(t, CTL_GROUPS, 3, 0x4, m, 10), 10);
	assert_int_equal(ctl_plan(t, CTL_GROUPS, 3, 0, m, CTL_GROUPS), 0);
	/* an owner out of range (a corrupt table) is moved to a target, not counted */
	t[7] = 40;
	k = ctl_plan(t, CTL_GROUPS, 2, 0x3, m, CTL_GROUPS);
	assert_true(k >= 1);
	assert_int_equal(m[0].group, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(policy_file),
		cmocka_unit_test(decisions),
		cmocka_unit_test(plans),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
