/* test_ctl.c: the control plane's policy (ctl/policy.c): its file format, IX's decisions from what the loop sees, and the group plan. */
#include <errno.h>
#include <math.h>
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
	char longline[3000];
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

static void ladder(void **state)
{
	(void)state;
	struct ctl_policy p;
	struct ctl_decision d;
	struct ctl_view v;
	char err[256];

	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("ladder = 1@1.2, 2@1.2 2@2.4,\t4@2.4\n", &p, err,
					  sizeof(err)), 0);
	assert_int_equal(p.n_rungs, 4);
	assert_int_equal(p.rung[2].workers, 2);
	assert_true(p.rung[2].ghz == 2.4);

	static const char *const bad[] = {
		"ladder = \n", "ladder = 2@1.2, 1@1.2\n", "ladder = 2@1.2, 2@1.2\n",
		"ladder = 0@1.2\n", "ladder = 65@1.2\n", "ladder = 1.5@1.2\n", "ladder = 1@0\n",
		"ladder = 1@11\n", "ladder = 1@nan\n", "ladder = 1@1.2x\n", "ladder = 1\n",
		"ladder = @1.2\n", "ladder = 1@1.2\nmax_workers = 4\n",
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(bad); i++) {
		ctl_policy_default(&p);
		err[0] = '\0';
		assert_int_equal(ctl_policy_parse(bad[i], &p, err, sizeof(err)), -EINVAL);
		if (!strstr(err, "ladder"))
			fail_msg("'%s': said '%s'", bad[i], err);
	}

	/* on rung 1 (2@1.2) of 1@1.2, 2@1.2, 2@2.4: a delay past the bound climbs one rung,
	 * an idle share above 1 - 1.2/2.4 + 0.1 = 0.6 steps down, one below holds */
	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("ladder = 1@1.2, 2@1.2, 2@2.4", &p, err, sizeof(err)), 0);
	v = view2(false, 0.2, 400);
	d = ctl_decide_ladder(&p, &v, 1);
	assert_int_equal(d.act, CTL_UP);
	assert_int_equal(d.worker, 2);
	assert_int_equal(ctl_decide_ladder(&p, &v, 2).act, CTL_HOLD);     /* top rung */
	v = view2(false, 0.65, 5);
	d = ctl_decide_ladder(&p, &v, 1);
	assert_int_equal(d.act, CTL_DOWN);
	assert_int_equal(d.worker, 0);
	assert_int_equal(ctl_decide_ladder(&p, &v, 0).act, CTL_HOLD);     /* bottom rung */
	/* from 2@2.4 down to 2@1.2 the bound is the same 0.6: a clock step counts as capacity */
	assert_int_equal(ctl_decide_ladder(&p, &v, 2).act, CTL_DOWN);
	v = view2(false, 0.55, 5);
	assert_int_equal(ctl_decide_ladder(&p, &v, 1).act, CTL_HOLD);
	/* the hold time and a change in progress hold, as for workers */
	v = view2(false, 0.9, 5);
	v.last_change_ms = v.now_ms - 500;
	assert_int_equal(ctl_decide_ladder(&p, &v, 1).act, CTL_HOLD);
	v = view2(false, 0.2, 400);
	v.moving = true;
	assert_int_equal(ctl_decide_ladder(&p, &v, 1).act, CTL_HOLD);
	assert_int_equal(ctl_decide_ladder(&p, &v, 7).act, CTL_HOLD);      /* no such rung */
	/* up_drain: a delay of 3 intervals wants 4x the capacity: from 1@1.2 (1.2) to the
	 * first rung of at least 4.8; a delay just past the bound, one rung */
	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("interval_ms = 1\nup_drain = 1\n"
					  "ladder = 1@1.2, 2@1.2, 4@1.2, 4@1.8, 8@1.2, 8@2.4",
					  &p, err, sizeof(err)), 0);
	v = view2(false, 0.0, 3000);
	d = ctl_decide_ladder(&p, &v, 0);
	assert_int_equal(d.act, CTL_UP);
	assert_int_equal(d.worker, 2);                      /* 4@1.2 = 4.8: enough */
	v = view2(false, 0.0, 301);
	assert_int_equal(ctl_decide_ladder(&p, &v, 0).worker, 1);
	v = view2(false, 0.0, 1e6);
	assert_int_equal(ctl_decide_ladder(&p, &v, 0).worker, 5);   /* never past the top */
	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("up_drain = 1\n", &p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "needs a ladder"));
	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("down_fit = 1\n", &p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "down_fit steps a ladder"));
	/* down_fit: on 8@2.4 (19.2) with idle 0.8, margin 0.1, 19.2 x 0.3 = 5.76 is what must
	 * fit: down to 4@1.8 (7.2), the lowest above it (4@1.2 = 4.8 is not), in one tick;
	 * without down_fit one rung (8@1.2); with too little idle for even one, none */
	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("down_hold_ms = 0\ndown_fit = 1\n"
					  "ladder = 1@1.2, 2@1.2, 4@1.2, 4@1.8, 8@1.2, 8@2.4",
					  &p, err, sizeof(err)), 0);
	v = view2(false, 0.8, 5);
	d = ctl_decide_ladder(&p, &v, 5);
	assert_int_equal(d.act, CTL_DOWN);
	assert_int_equal(d.worker, 3);
	p.down_fit = 0;
	assert_int_equal(ctl_decide_ladder(&p, &v, 5).worker, 4);
	p.down_fit = 1;
	v = view2(false, 0.55, 5);                 /* 0.55 < 1 - 9.6/19.2 + 0.1 */
	assert_int_equal(ctl_decide_ladder(&p, &v, 5).act, CTL_HOLD);
	v = view2(false, 1.0, 5);    /* nothing used: the margin alone, 0.1 x 19.2: 2@1.2 */
	assert_int_equal(ctl_decide_ladder(&p, &v, 5).worker, 1);
	/* a ladder of workers alone decides as ctl_decide does: idle 0.65 > 1/2 + 0.1 */
	ctl_policy_default(&p);
	assert_int_equal(ctl_policy_parse("ladder = 1@2, 2@2", &p, err, sizeof(err)), 0);
	v = view2(false, 0.65, 5);
	assert_int_equal(ctl_decide_ladder(&p, &v, 1).act, ctl_decide(&p, &v).act);
	v = view2(false, 0.55, 5);
	assert_int_equal(ctl_decide_ladder(&p, &v, 1).act, ctl_decide(&p, &v).act);
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

/* The power model's file (as in bench/power/; ctl/power.c) and fp-ctl watch's watts. */
static void power_model(void **state)
{
	(void)state;
	struct ctl_power pw;
	char err[160];
	static const char good[] =
		"# Xeon E5-2665 (bench/power/xeon-e5-2665.txt's form)\n"
		"f_nom = 2.4 2.4 2.4\n"
		"uncore_w = 15 10 25   # while any core runs\n"
		"\n"
		"core_dyn_w = 5.5 4 7\ncore_leak_w = 1.5 0.75 3\ncore_c6_w = 0.1 0 0.5\n";

	assert_int_equal(ctl_power_parse(&pw, good, err, sizeof(err)), 0);
	assert_true(pw.uncore_w == 15 && pw.core_w == 7 && pw.c6_w == 0.1);
	double asleep[2] = { 0, 1 }, clamped[2] = { -1, 2 };
	assert_true(fabs(ctl_power_watts(&pw, 2, asleep) - 22.1) < 1e-9);
	assert_true(fabs(ctl_power_watts(&pw, 2, clamped) - 22.1) < 1e-9);
	assert_true(fabs(ctl_power_watts(&pw, 0, NULL) - 15) < 1e-9);

	static const struct {
		const char *text, *says;
	} bad[] = {
		{ "uncore_w = 15 10 25\n", "no 'core_dyn_w' line" },
		{ "uncore_w = 15 10\n", "line 1: expected" },           /* two numbers */
		{ "x = 1 1 1\nuncore_w = 15 20 25\n", "line 2:" },     /* below its low */
		{ "uncore_w = 15 10 25 W\n", "line 1:" },               /* something after */
		{ " = 1 1 1\n", "line 1:" },                            /* no name */
		{ "uncore_w 15 10 25\n", "line 1:" },                   /* no '=' */
		{ "core_c6_w = -1 -2 0\n", "line 1:" },                 /* negative watts */
		{ "uncore_w = nan 10 25\n", "line 1:" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ctl_power_parse(&pw, bad[i].text, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].says))
			fail_msg("'%s': '%s' does not say '%s'", bad[i].text, err, bad[i].says);
	}
	char longline[400];
	memset(longline, 'a', sizeof(longline) - 1);
	longline[sizeof(longline) - 1] = '\0';
	assert_int_equal(ctl_power_parse(&pw, longline, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(policy_file),
		cmocka_unit_test(decisions),
		cmocka_unit_test(ladder),
		cmocka_unit_test(plans),
		cmocka_unit_test(power_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
