/* test_pool.c: buffer pool: magazines, depot exchange, exhaustion, bulk ops, leak check. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void get_put_one(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_mbuf *m = fp_pool_get(&tp->cache);

	assert_non_null(m);
	assert_int_equal(m->refcnt, 1);
	assert_int_equal(m->data_len, 0);
	assert_int_equal(fp_mbuf_headroom(m), 128);
	assert_ptr_equal(m->pool, tp->pool);
	assert_int_equal(fp_test_pool_leaked(tp), 1);
	fp_mbuf_free(&tp->cache, m);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
}

/* Every buffer can be taken once, the next get fails and is counted, and each buffer's
 * data area is its own slice of the region. */
static void exhaust_and_refill(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_mbuf *ms[64];
	uint8_t seen[64] = { 0 };

	for (int i = 0; i < 64; i++) {
		ms[i] = fp_pool_get(&tp->cache);
		assert_non_null(ms[i]);
		assert_int_equal(seen[ms[i]->index]++, 0);
		assert_ptr_equal(ms[i]->buf, tp->pool->data + (size_t)ms[i]->index * 2048);
		assert_ptr_equal(fp_pool_mbuf_at(tp->pool, fp_pool_offset_of(tp->pool, ms[i])), ms[i]);
	}
	assert_null(fp_pool_get(&tp->cache));
	assert_int_equal(tp->pool->exhausted, 1);
	assert_int_equal(fp_test_pool_leaked(tp), 64);
	for (int i = 0; i < 64; i++)
		fp_mbuf_free(&tp->cache, ms[i]);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
	/* After the round trip every buffer is available again. */
	for (int i = 0; i < 64; i++)
		assert_non_null(ms[i] = fp_pool_get(&tp->cache));
	fp_pool_put_bulk(&tp->cache, ms, 0);
	for (int i = 0; i < 64; i++) {
		ms[i]->refcnt = 0;
		fp_pool_put(&tp->cache, ms[i]);
	}
}

static void bulk(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_mbuf *ms[70];

	assert_int_equal(fp_pool_get_bulk(&tp->cache, ms, 20), 20);
	assert_int_equal(fp_pool_get_bulk(&tp->cache, ms + 20, 50), 44); /* only 44 left */
	for (int i = 0; i < 64; i++)
		ms[i]->refcnt = 0;
	fp_pool_put_bulk(&tp->cache, ms, 64);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
}

/* A cache on a second "core" sees the buffers the first one returned through the depot;
 * buffers parked in a cache are invisible to others (the documented slack). */
static void two_caches(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_pool_cache other;
	struct fp_mbuf *ms[64];

	assert_int_equal(fp_pool_cache_init(&other, tp->pool), 0);
	unsigned got = fp_pool_get_bulk(&tp->cache, ms, 64);
	assert_int_equal(got, 64);
	assert_null(fp_pool_get(&other));
	/* Free them all on the other core: full magazines go back to the depot. */
	for (unsigned i = 0; i < got; i++)
		fp_mbuf_free(&other, ms[i]);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
	fp_pool_cache_flush(&other);
	assert_int_equal(fp_pool_get_bulk(&tp->cache, ms, 64), 64);
	for (unsigned i = 0; i < 64; i++)
		fp_mbuf_free(&tp->cache, ms[i]);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
}

/* Caches that come and go leave partial magazines behind; the depot pours them into one,
 * so it never runs out of empty magazines however often this happens. */
static void flush_churn(void **state)
{
	struct fp_test_pool *tp = *state;
	uint64_t seed = fp_test_seed();

	for (int i = 0; i < 5000; i++) {
		struct fp_pool_cache other;
		struct fp_mbuf *ms[5];
		unsigned n = 1 + (unsigned)fp_test_below(&seed, 5);
		assert_int_equal(fp_pool_cache_init(&other, tp->pool), 0);
		assert_int_equal(fp_pool_get_bulk(&other, ms, n), n);
		fp_mbuf_free(&other, ms[0]);
		fp_pool_cache_flush(&other);
		for (unsigned k = 1; k < n; k++)
			fp_mbuf_free(&tp->cache, ms[k]);
		assert_int_equal(fp_test_pool_leaked(tp), 0);
	}
	struct fp_mbuf *all[64];
	assert_int_equal(fp_pool_get_bulk(&tp->cache, all, 64), 64);
	for (int k = 0; k < 64; k++)
		fp_mbuf_free(&tp->cache, all[k]);
}

static void too_many_caches(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_pool_cache c[4];

	for (int i = 0; i < 3; i++) /* the fixture's own cache is the fourth */
		assert_int_equal(fp_pool_cache_init(&c[i], tp->pool), 0);
	assert_int_equal(fp_pool_cache_init(&c[3], tp->pool), -ENOSPC);
	for (int i = 0; i < 3; i++)
		fp_pool_cache_flush(&c[i]);
}

/* A buffer from another pool goes home, not into this core's cache. */
static void foreign_buffer(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_pool_params p = { .name = "other", .n_bufs = 8, .buf_size = 512,
				    .headroom = 64, .mag_size = 4, .max_caches = 1 };
	struct fp_pool *other = fp_pool_create(&p);
	struct fp_pool_cache oc;

	assert_non_null(other);
	assert_int_equal(fp_pool_cache_init(&oc, other), 0);
	struct fp_mbuf *m = fp_pool_get(&oc);
	assert_non_null(m);
	assert_int_equal(fp_mbuf_headroom(m), 64);
	assert_int_equal(fp_pool_in_use(other), 1);
	fp_mbuf_free(&tp->cache, m);
	assert_int_equal(fp_pool_in_use(other), 0);
	assert_int_equal(fp_test_pool_leaked(tp), 0);
	fp_pool_cache_flush(&oc);
	fp_pool_destroy(other);
}

static void bad_params(void **state)
{
	(void)state;
	struct fp_pool_params p = { .n_bufs = 0, .buf_size = 2048 };
	assert_null(fp_pool_create(&p));
	assert_int_equal(errno, EINVAL);
	p.n_bufs = 4;
	p.buf_size = 64; /* not more than the default headroom */
	assert_null(fp_pool_create(&p));
}

/* The leak check must be able to fail: leak on purpose, see it counted, then clean up. */
static void leak_check_detects(void **state)
{
	struct fp_test_pool *tp = *state;
	struct fp_mbuf *m = fp_pool_get(&tp->cache);
	assert_int_equal(fp_test_pool_leaked(tp), 1);
	void *st = tp;
	fp_test_pool_setup(&st); /* a second fixture to run the real teardown on */
	struct fp_test_pool *tp2 = st;
	assert_non_null(fp_pool_get(&tp2->cache));
	assert_int_not_equal(fp_test_pool_teardown(&st), 0);
	fp_mbuf_free(&tp->cache, m);
}

/* Debug builds stop a double free on the spot rather than corrupt the free lists. */
static void double_free_aborts(void **state)
{
#ifdef NDEBUG
	(void)state;
	skip(); /* the check is compiled out of release builds */
#else
	struct fp_test_pool *tp = *state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(STDERR_FILENO); /* the child's report is expected; keep the log clean */
		struct fp_mbuf *m = fp_pool_get(&tp->cache);
		fp_mbuf_free(&tp->cache, m);
		m->refcnt = 1; /* a stale holder believes it still has a reference */
		fp_mbuf_free(&tp->cache, m);
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
}

/* Two threads, each with its own cache, trading buffers through shared arrays. */
struct worker_arg {
	struct fp_pool *pool;
	int rounds;
};

static void *pool_worker(void *p)
{
	struct worker_arg *a = p;
	struct fp_pool_cache c;
	struct fp_mbuf *ms[48];

	if (fp_pool_cache_init(&c, a->pool))
		return (void *)1;
	for (int r = 0; r < a->rounds; r++) {
		unsigned n = fp_pool_get_bulk(&c, ms, 1 + (unsigned)r % 48);
		for (unsigned i = 0; i < n; i++)
			ms[i]->user = (uint16_t)r;
		for (unsigned i = 0; i < n; i++)
			fp_mbuf_free(&c, ms[i]);
	}
	fp_pool_cache_flush(&c);
	return NULL;
}

static void threads_share_depot(void **state)
{
	(void)state;
	struct fp_pool_params p = { .name = "mt", .n_bufs = 1024, .buf_size = 256,
				    .headroom = 32, .mag_size = 16, .max_caches = 4 };
	struct fp_pool *pool = fp_pool_create(&p);
	struct worker_arg a = { pool, 20000 };
	pthread_t th[3];

	assert_non_null(pool);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, pool_worker, &a), 0);
	for (int i = 0; i < 3; i++) {
		void *ret;
		pthread_join(th[i], &ret);
		assert_null(ret);
	}
	assert_int_equal(fp_pool_in_use(pool), 0);
	assert_int_equal(pool->exhausted, 0);
	fp_pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(get_put_one, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(exhaust_and_refill, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(bulk, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(two_caches, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(flush_churn, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(too_many_caches, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(foreign_buffer, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test(bad_params),
		cmocka_unit_test_setup_teardown(leak_check_detects, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test_setup_teardown(double_free_aborts, fp_test_pool_setup, fp_test_pool_teardown),
		cmocka_unit_test(threads_share_depot),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
