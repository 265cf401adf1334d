/* test_alloc.c: Shenango's core allocator: congestion over two passes, grants, parks, revokes. */
#include <string.h>

#include <flowplane/alloc.h>

#include "harness.h"

/* The caller's side of a worker: it woke for grant @g and runs, or parked. */
static void woke(struct fp_alloc_app *p, unsigned w, uint64_t g)
{
	p->w[w].took = g;
	p->w[w].parked = false;
}

static void parked(struct fp_alloc_app *p, unsigned w)
{
	p->w[w].parked = true;
}

static unsigned pass(struct fp_alloc *a, struct fp_alloc_act *out)
{
	return fp_alloc_pass(a, out, 16);
}

/* Algorithm 1: an item counts only when it was already there at the previous pass. */
static void congestion_needs_two_passes(void **state)
{
	(void)state;
	struct fp_alloc a;
	struct fp_alloc_act out[16];
	uint16_t cores[2] = {0, 1};
	struct fp_alloc_app *p;

	assert_int_equal(fp_alloc_init(&a, 2, 1), 0);
	assert_int_equal(fp_alloc_add_app(&a, 2, 2, cores), 0);
	p = &a.app[0];

	/* Items come and go between passes: never congested, however many. */
	for (int i = 1; i <= 5; i++) {
		p->q[0].put = p->q[0].taken = (uint64_t)i * 100;
		assert_int_equal(pass(&a, out), 0);
	}
	/* One item put and still there one pass later: congested, one core granted. */
	p->q[1].put = 1;
	assert_int_equal(pass(&a, out), 0);   /* first seen */
	assert_true(fp_alloc_congested(p));   /* what the next pass will find */
	assert_int_equal(pass(&a, out), 1);   /* still there */
	assert_int_equal(out[0].op, FP_ALLOC_GRANT);
	assert_int_equal(out[0].grant_no, 1);
	assert_int_equal(p->congested, 1);
	/* Taken now, but a new one came: the old one is gone, so not congested. */
	p->q[1].taken = 1;
	p->q[1].put = 2;
	assert_int_equal(pass(&a, out), 0);
	assert_int_equal(p->congested, 1);
	/* A long queue partly drained: items older than a pass remain. */
	p->q[1].taken = 2;
	p->q[1].put = 50;
	assert_int_equal(pass(&a, out), 0);
	p->q[1].taken = 40;                   /* 40 < 50: ten have waited a pass */
	assert_int_equal(pass(&a, out), 1);
	assert_int_equal(out[0].worker, 1);   /* worker 0 is active already */
	/* Congested with every worker active: starved, nothing to do. */
	p->q[1].put = 60;
	assert_int_equal(pass(&a, out), 0);
	assert_int_equal(p->starved, 1);
	assert_int_equal(p->active, 2);
}

/* A worker parks itself; its core is idle at the next pass and the app's most recently lost
 * core is granted first. A grant not yet taken keeps the core. */
static void parks_and_recent_core(void **state)
{
	(void)state;
	struct fp_alloc a;
	struct fp_alloc_act out[16];
	uint16_t cores[3] = {0, 1, 2};
	struct fp_alloc_app *p;

	assert_int_equal(fp_alloc_init(&a, 3, 7), 0);
	assert_int_equal(fp_alloc_add_app(&a, 1, 3, cores), 0);
	p = &a.app[0];
	p->q[0].put = 1;
	pass(&a, out);
	assert_int_equal(pass(&a, out), 1);   /* grant: the lowest of those parked equally long */
	assert_int_equal(out[0].worker, 0);
	assert_int_equal(a.owner[0], 0);

	/* Not woken yet, and says parked (its old view): the core stays granted. */
	assert_int_equal(pass(&a, out), 1);   /* still congested: worker 1 */
	assert_int_equal(out[0].worker, 1);
	assert_int_equal(p->active, 2);
	woke(p, 0, 1);
	woke(p, 1, 1);
	p->q[0].taken = 1;
	assert_int_equal(pass(&a, out), 0);

	/* Worker 1 finds nothing and parks: its core goes back, and is the recent one. */
	parked(p, 1);
	assert_int_equal(pass(&a, out), 0);
	assert_int_equal(p->parks, 1);
	assert_int_equal(a.owner[1], -1);
	assert_int_equal(p->last_core, 1);
	p->q[0].put = 2;
	pass(&a, out);
	assert_int_equal(pass(&a, out), 1);
	assert_int_equal(out[0].worker, 1);   /* core 1 again, not core 2 */
	assert_int_equal(out[0].grant_no, 2);
	/* It wakes, works and parks again before the next pass: seen as parked. */
	woke(p, 1, 2);
	parked(p, 1);
	p->q[0].taken = 2;
	assert_int_equal(pass(&a, out), 0);
	assert_int_equal(p->parks, 2);
	assert_int_equal(a.owner[1], -1);
}

/* Two apps share a pool of two cores, a worker of each on each core. With no idle core, a
 * congested app revokes a core from the other (which is bursting), gets it once the worker
 * has parked, and not before. */
static void revoke_when_no_idle_core(void **state)
{
	(void)state;
	struct fp_alloc a;
	struct fp_alloc_act out[16];
	uint16_t cores[2] = {0, 1};
	struct fp_alloc_app *p, *b;
	unsigned n;

	assert_int_equal(fp_alloc_init(&a, 2, 3), 0);
	assert_int_equal(fp_alloc_add_app(&a, 1, 2, cores), 0);
	assert_int_equal(fp_alloc_add_app(&a, 1, 2, cores), 1);
	p = &a.app[0];
	b = &a.app[1];

	/* App 1 congested for three passes: both cores. */
	b->q[0].put = 100;
	pass(&a, out);
	assert_int_equal(pass(&a, out), 1);
	woke(b, out[0].worker, out[0].grant_no);
	assert_int_equal(pass(&a, out), 1);
	woke(b, out[0].worker, out[0].grant_no);
	assert_int_equal(b->active, 2);

	/* App 0 becomes congested: no idle core, so one of app 1's is revoked. */
	p->q[0].put = 1;
	pass(&a, out);   /* app 0 first seen; app 1 starved */
	n = pass(&a, out);
	assert_int_equal(n, 1);
	assert_int_equal(out[0].op, FP_ALLOC_REVOKE);
	assert_int_equal(out[0].app, 1);
	unsigned rc = out[0].core, rw = out[0].worker;
	assert_int_equal(a.reserved[rc], 0);
	assert_int_equal(b->state[rw], FP_ALLOC_W_REVOKED);
	/* Not parked yet: no grant, and no second revoke for the same app. */
	assert_int_equal(pass(&a, out), 0);
	/* App 1 is congested too, but the reserved core is not its to take back. */
	parked(b, rw);
	n = pass(&a, out);
	assert_int_equal(n, 1);
	assert_int_equal(out[0].op, FP_ALLOC_GRANT);
	assert_int_equal(out[0].app, 0);
	assert_int_equal(out[0].core, rc);
	assert_int_equal(a.owner[rc], 0);
	assert_int_equal(a.reserved[rc], -1);
	assert_int_equal(b->revokes, 1);
	assert_int_equal(p->grants, 1);
}

/* A revoke whose app is no longer congested when the core frees: the core stays idle. */
static void reservation_dropped_when_calm(void **state)
{
	(void)state;
	struct fp_alloc a;
	struct fp_alloc_act out[16];
	uint16_t cores[1] = {0};

	assert_int_equal(fp_alloc_init(&a, 1, 5), 0);
	assert_int_equal(fp_alloc_add_app(&a, 1, 1, cores), 0);
	assert_int_equal(fp_alloc_add_app(&a, 1, 1, cores), 1);
	a.app[1].q[0].put = 1;
	pass(&a, out);
	assert_int_equal(pass(&a, out), 1);
	woke(&a.app[1], 0, 1);
	a.app[0].q[0].put = 1;
	pass(&a, out);
	assert_int_equal(pass(&a, out), 1);
	assert_int_equal(out[0].op, FP_ALLOC_REVOKE);
	a.app[0].q[0].taken = 1;              /* app 0 drained by its home meanwhile */
	a.app[1].q[0].taken = 1;
	parked(&a.app[1], 0);
	assert_int_equal(pass(&a, out), 0);
	assert_int_equal(a.owner[0], -1);
	assert_int_equal(a.reserved[0], -1);
}

static void bad_setup(void **state)
{
	(void)state;
	struct fp_alloc a;
	uint16_t cores[2] = {0, 5};

	assert_int_equal(fp_alloc_init(&a, 0, 1), -EINVAL);
	assert_int_equal(fp_alloc_init(&a, FP_ALLOC_MAX_CORES + 1, 1), -EINVAL);
	assert_int_equal(fp_alloc_init(&a, 4, 1), 0);
	assert_int_equal(fp_alloc_add_app(&a, 1, 2, cores), -EINVAL);   /* core 5 of 4 */
	assert_int_equal(fp_alloc_add_app(&a, FP_ALLOC_MAX_QUEUES + 1, 1, cores), -EINVAL);
	for (int i = 0; i < FP_ALLOC_MAX_APPS; i++)
		assert_int_equal(fp_alloc_add_app(&a, 1, 1, cores), i);
	assert_int_equal(fp_alloc_add_app(&a, 1, 1, cores), -ENOSPC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(congestion_needs_two_passes),
		cmocka_unit_test(parks_and_recent_core),
		cmocka_unit_test(revoke_when_no_idle_core),
		cmocka_unit_test(reservation_dropped_when_calm),
		cmocka_unit_test(bad_setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
