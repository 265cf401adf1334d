/* test_shuffle.c: the shuffle layer: flow states, steals, returns, and ordering on real threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/shuffle.h>

#include "harness.h"

struct ev {
	struct fp_shuf_ev link;
	uint32_t flow, seq;
};

#define EV(e) fp_container_of((e), struct ev, link)

static void states_on_one_worker(void **state)
{
	(void)state;
	struct fp_shuf s;
	struct fp_shuf_flow f;
	struct ev e[4];

	assert_int_equal(fp_shuf_init(&s, 1, 8, 1), 0);
	fp_shuf_flow_init(&f, 0);
	for (int i = 0; i < 4; i++)
		e[i].seq = (uint32_t)i;

	/* An idle flow with an event is ready, once; later events wait in its inbox. */
	assert_true(fp_shuf_post(&s, &f, &e[0].link, 10));
	assert_false(fp_shuf_post(&s, &f, &e[1].link, 11));
	assert_int_equal(fp_shuf_ready_count(&s, 0), 1);
	assert_ptr_equal(fp_shuf_take(&s, 0), &f);
	assert_null(fp_shuf_take(&s, 0));
	assert_int_equal(f.batch.n, 1);
	assert_int_equal(EV(f.batch.head)->seq, 0);

	/* Running at home: complete at once; the inbox becomes the next batch, in order. */
	assert_false(fp_shuf_post(&s, &f, &e[2].link, 12));
	assert_true(fp_shuf_ran(&s, 0, &f));
	assert_true(fp_shuf_complete(&s, &f, 13));
	assert_ptr_equal(fp_shuf_take(&s, 0), &f);
	assert_int_equal(f.batch.n, 2);
	assert_int_equal(EV(f.batch.head)->seq, 1);
	assert_int_equal(EV(f.batch.head->next)->seq, 2);
	assert_true(fp_shuf_ran(&s, 0, &f));
	assert_false(fp_shuf_complete(&s, &f, 14));
	assert_int_equal(f.state, FP_SHUF_IDLE);

	/* One worker has nobody to steal from. */
	assert_true(fp_shuf_post(&s, &f, &e[3].link, 15));
	assert_null(fp_shuf_steal(&s, 0));
	assert_int_equal(s.wk[0].steal_misses, 1);
	fp_shuf_fini(&s);
}

static void steal_and_return(void **state)
{
	(void)state;
	struct fp_shuf s;
	struct fp_shuf_flow a, b;
	struct ev e[3];

	assert_int_equal(fp_shuf_init(&s, 3, 4, 7), 0);
	s.victim = FP_SHUF_VICTIM_OLDEST;
	fp_shuf_flow_init(&a, 0);
	fp_shuf_flow_init(&b, 1);
	fp_shuf_post(&s, &b, &e[1].link, 50);   /* worker 1's head is younger... */
	fp_shuf_post(&s, &a, &e[0].link, 20);   /* ...than worker 0's */
	assert_true(fp_shuf_any_ready(&s, 2));

	/* The oldest head goes first; the thief gives the flow back to its home. */
	assert_ptr_equal(fp_shuf_steal(&s, 2), &a);
	assert_int_equal(a.stolen, 1);
	assert_false(fp_shuf_post(&s, &a, &e[2].link, 30));     /* arrives while away */
	assert_false(fp_shuf_ran(&s, 2, &a));
	assert_true(fp_shuf_has_returns(&s, 0));
	assert_false(fp_shuf_has_returns(&s, 2));
	assert_null(fp_shuf_returned(&s, 2));
	assert_ptr_equal(fp_shuf_returned(&s, 0), &a);
	assert_true(fp_shuf_complete(&s, &a, 31));              /* ready again with e[2] */
	assert_int_equal(s.wk[0].returns, 1);
	assert_int_equal(s.wk[2].steals, 1);

	assert_ptr_equal(fp_shuf_steal(&s, 2), &a);   /* ready again at 31, before b at 50 */
	fp_shuf_fini(&s);
	(void)b;
}

static void bad_setup(void **state)
{
	(void)state;
	struct fp_shuf s;

	assert_int_equal(fp_shuf_init(&s, 0, 8, 1), -EINVAL);
	assert_int_equal(fp_shuf_init(&s, 2, 0, 1), -EINVAL);
}

/* ---- real threads: every event runs exactly once, in order within its flow ---- */

#define T_FLOWS_PER  64
#define T_EVENTS     60000     /* per worker */

struct tflow {
	struct fp_shuf_flow sf;
	uint32_t ran_next;          /* the next seq a runner expects (any runner: exclusive) */
	uint32_t done_next;         /* home: the next seq completed */
	uint32_t bad;
};

struct tctx {
	struct fp_shuf s;
	unsigned n;
	bool force_steal;
	struct tflow *flows;        /* n x T_FLOWS_PER, flow i's home is i / T_FLOWS_PER */
	struct ev *evs;             /* n x T_EVENTS */
	uint64_t done;              /* events completed, all workers */
	uint64_t stolen_runs;
};

struct targ {
	struct tctx *t;
	unsigned id;
};

static void run_batch(struct tctx *t, struct tflow *f)
{
	for (struct fp_shuf_ev *e = f->sf.batch.head; e; e = e->next) {
		if (EV(e)->seq != f->ran_next)
			f->bad++;
		f->ran_next = EV(e)->seq + 1;
	}
	(void)t;
}

static void home_complete(struct tctx *t, struct tflow *f)
{
	uint32_t n = 0;

	for (struct fp_shuf_ev *e = f->sf.batch.head; e; e = e->next, n++) {
		if (EV(e)->seq != f->done_next)
			f->bad++;
		f->done_next = EV(e)->seq + 1;
	}
	fp_shuf_complete(&t->s, &f->sf, 0);
	__atomic_add_fetch(&t->done, n, __ATOMIC_RELEASE);
}

static void *tworker(void *p)
{
	struct targ *a = p;
	struct tctx *t = a->t;
	uint64_t posted = 0, total = (uint64_t)t->n * T_EVENTS, stolen = 0;
	uint64_t rng = a->id + 1;

	while (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE) < total) {
		struct fp_shuf_flow *sf;

		while ((sf = fp_shuf_returned(&t->s, a->id)))
			home_complete(t, (struct tflow *)sf);
		/* "Receive" a few events for this worker's own flows. */
		for (int k = 0; k < 3 && posted < T_EVENTS; k++, posted++) {
			struct ev *e = &t->evs[a->id * T_EVENTS + posted];

			fp_shuf_post(&t->s, &t->flows[e->flow].sf, &e->link, posted);
		}
		sf = t->force_steal ? NULL : fp_shuf_take(&t->s, a->id);
		if (!sf && (sf = fp_shuf_steal(&t->s, a->id)))
			stolen++;
		if (!sf) {
			if (fp_test_below(&rng, 4) == 0)
				sched_yield();   /* oversubscribed: let the others run */
			continue;
		}
		run_batch(t, (struct tflow *)sf);
		if (fp_shuf_ran(&t->s, a->id, sf))
			home_complete(t, (struct tflow *)sf);
	}
	__atomic_add_fetch(&t->stolen_runs, stolen, __ATOMIC_RELAXED);
	return NULL;
}

static void threads_keep_order(unsigned n, bool force_steal, enum fp_shuf_victim victim)
{
	struct tctx t = {.n = n, .force_steal = force_steal};
	pthread_t th[8];
	struct targ args[8];
	uint64_t seed = fp_test_seed();
	uint32_t *next = calloc(n * T_FLOWS_PER, sizeof(*next));

	assert_int_equal(fp_shuf_init(&t.s, n, T_FLOWS_PER, seed), 0);
	t.s.victim = victim;
	t.flows = calloc(n * T_FLOWS_PER, sizeof(*t.flows));
	t.evs = calloc((size_t)n * T_EVENTS, sizeof(*t.evs));
	assert_non_null(t.flows);
	assert_non_null(t.evs);
	assert_non_null(next);
	for (unsigned i = 0; i < n * T_FLOWS_PER; i++)
		fp_shuf_flow_init(&t.flows[i].sf, i / T_FLOWS_PER);
	for (unsigned w = 0; w < n; w++)
		for (unsigned i = 0; i < T_EVENTS; i++) {
			struct ev *e = &t.evs[w * T_EVENTS + i];

			e->flow = w * T_FLOWS_PER + (uint32_t)fp_test_below(&seed, T_FLOWS_PER);
			e->seq = next[e->flow]++;
		}
	for (unsigned i = 0; i < n; i++) {
		args[i] = (struct targ){.t = &t, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, tworker, &args[i]), 0);
	}
	for (unsigned i = 0; i < n; i++)
		pthread_join(th[i], NULL);

	assert_int_equal(t.done, (uint64_t)n * T_EVENTS);
	for (unsigned i = 0; i < n * T_FLOWS_PER; i++) {
		assert_int_equal(t.flows[i].bad, 0);
		assert_int_equal(t.flows[i].done_next, next[i]);   /* none lost or repeated */
		assert_int_equal(t.flows[i].ran_next, next[i]);
		assert_int_equal(t.flows[i].sf.state, FP_SHUF_IDLE);
	}
	if (force_steal)
		assert_int_equal(t.stolen_runs, t.s.wk[0].returns + t.s.wk[1].returns +
				 (n > 2 ? t.s.wk[2].returns + t.s.wk[3].returns : 0));
	free(next);
	free(t.flows);
	free(t.evs);
	fp_shuf_fini(&t.s);
}

static void two_threads(void **state) { (void)state; threads_keep_order(2, false, FP_SHUF_VICTIM_RANDOM); }
static void two_threads_forced(void **state) { (void)state; threads_keep_order(2, true, FP_SHUF_VICTIM_RANDOM); }
static void four_threads_forced(void **state) { (void)state; threads_keep_order(4, true, FP_SHUF_VICTIM_OLDEST); }
static void four_threads(void **state) { (void)state; threads_keep_order(4, false, FP_SHUF_VICTIM_RANDOM); }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(states_on_one_worker),
		cmocka_unit_test(steal_and_return),
		cmocka_unit_test(bad_setup),
		cmocka_unit_test(two_threads),
		cmocka_unit_test(two_threads_forced),
		cmocka_unit_test(four_threads),
		cmocka_unit_test(four_threads_forced),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
