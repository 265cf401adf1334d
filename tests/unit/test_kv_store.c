/* test_kv_store.c: fp-kv's store: memcached 1.6 semantics, expiry, eviction within -m, QSBR, threads. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "kv.h"

#define MiB (1024u * 1024u)
#define START_UNIX 1700000000ull   /* the settable clock's process start */

static struct kv_store *mk_store(uint64_t mem, uint32_t item_max, bool evict, bool cas,
				 unsigned workers)
{
	struct kv_store_config cfg = {
		.mem_limit = mem, .item_max = item_max, .growth_factor = 1.25, .chunk_min = 48,
		.n_workers = workers, .use_cas = cas, .evict = evict,
	};
	char err[128];
	struct kv_store *s = kv_store_create(&cfg, err, sizeof(err));

	if (!s)
		fail_msg("kv_store_create: %s", err);
	kv_store_set_clock(s, 1000, START_UNIX);
	return s;
}

static struct kv_store *mk(void) { return mk_store(64 * MiB, MiB, true, true, 1); }

static enum kv_result put(struct kv_store *s, unsigned w, const char *key, const void *val,
			  size_t n, uint32_t flags, uint32_t exp, enum kv_set_mode mode, uint64_t cas,
			  uint64_t *cas_out)
{
	enum kv_result r;
	struct kv_new *nw = kv_alloc(s, w, key, strlen(key), flags, exp, (uint32_t)n, &r);

	if (!nw)
		return r;
	memcpy(kv_new_data(nw), val, n);
	memcpy(kv_new_data(nw) + n, "\r\n", 2);
	return kv_store_item(s, w, nw, mode, cas, cas_out);
}

static enum kv_result set(struct kv_store *s, const char *key, const char *val)
{
	return put(s, 0, key, val, strlen(val), 0, 0, KV_SET, 0, NULL);
}

static enum kv_result mode(struct kv_store *s, const char *key, const char *val, enum kv_set_mode m,
			   uint64_t cas)
{
	return put(s, 0, key, val, strlen(val), 0, 0, m, cas, NULL);
}

/* The value of @key as a string ("" for a miss; values in these tests have no NUL). */
static const char *val(struct kv_store *s, const char *key)
{
	static char buf[4096];
	struct kv_item_view v;

	if (!kv_get(s, 0, key, strlen(key), &v))
		return "<miss>";
	assert_true(v.nbytes < sizeof(buf));
	assert_memory_equal(v.value + v.nbytes, "\r\n", 2);
	memcpy(buf, v.value, v.nbytes);
	buf[v.nbytes] = 0;
	return buf;
}

static uint64_t cas_of(struct kv_store *s, const char *key)
{
	struct kv_item_view v;

	return kv_get(s, 0, key, strlen(key), &v) ? v.cas : 0;
}

static struct kv_store_stats stats(struct kv_store *s)
{
	struct kv_store_stats st;

	kv_store_stats(s, &st);
	return st;
}

/* ---- storage commands ---- */

static void test_store_modes(void **state)
{
	struct kv_store *s = mk();
	struct kv_item_view v;
	(void)state;

	assert_int_equal(mode(s, "a", "x", KV_REPLACE, 0), KV_NOT_STORED);
	assert_int_equal(mode(s, "a", "x", KV_APPEND, 0), KV_NOT_STORED);
	assert_int_equal(mode(s, "a", "x", KV_PREPEND, 0), KV_NOT_STORED);
	assert_int_equal(mode(s, "a", "1", KV_ADD, 0), KV_STORED);
	assert_int_equal(mode(s, "a", "2", KV_ADD, 0), KV_NOT_STORED);
	assert_string_equal(val(s, "a"), "1");
	assert_int_equal(mode(s, "a", "3", KV_REPLACE, 0), KV_STORED);
	assert_int_equal(mode(s, "a", "4", KV_APPEND, 0), KV_STORED);
	assert_int_equal(mode(s, "a", "0", KV_PREPEND, 0), KV_STORED);
	assert_string_equal(val(s, "a"), "034");
	assert_int_equal(set(s, "a", ""), KV_STORED);
	assert_string_equal(val(s, "a"), "");
	/* append keeps the old item's flags and expiry, not the appended ones */
	assert_int_equal(put(s, 0, "f", "v", 1, 42, 5000, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "f", "w", 1, 7, 0, KV_APPEND, 0, NULL), KV_STORED);
	assert_true(kv_get(s, 0, "f", 1, &v));
	assert_int_equal(v.flags, 42);
	assert_int_equal(v.exptime, 5000);
	assert_int_equal(v.nbytes, 2);
	assert_int_equal(put(s, 0, "f", "v", 1, 0xffffffffu, 0, KV_SET, 0, NULL), KV_STORED);
	assert_true(kv_get(s, 0, "f", 1, &v));
	assert_int_equal(v.flags, 0xffffffffu);
	assert_int_equal(kv_delete(s, 0, "a", 1, 0), KV_DELETED);
	assert_int_equal(kv_delete(s, 0, "a", 1, 0), KV_NOT_FOUND);
	assert_string_equal(val(s, "a"), "<miss>");
	/* binary-safe values and a 250-byte key */
	char key[251];
	memset(key, 'k', 250);
	key[250] = 0;
	assert_int_equal(put(s, 0, key, "a\0\r\nb", 5, 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_true(kv_get(s, 0, key, 250, &v));
	assert_int_equal(v.nkey, 250);
	assert_memory_equal(v.value, "a\0\r\nb\r\n", 7);
	kv_store_destroy(s);
}

/* The CAS numbers a sequential script sees, as memcached 1.6.18 printed them for the same
 * script (gets after each step; see the notes in the report): one global counter bumped at
 * each link, at an in-place incr, at md I, and at an immediate flush_all. */
static void test_cas_numbering(void **state)
{
	struct kv_store *s = mk();
	uint64_t c = 0, out;
	(void)state;

	assert_int_equal(set(s, "a", "1"), KV_STORED);
	assert_int_equal(cas_of(s, "a"), 1);
	assert_int_equal(mode(s, "a", "2", KV_ADD, 0), KV_NOT_STORED);
	assert_int_equal(cas_of(s, "a"), 1);
	assert_int_equal(mode(s, "zz", "x", KV_APPEND, 0), KV_NOT_STORED);
	assert_int_equal(set(s, "b", "100"), KV_STORED);
	assert_int_equal(cas_of(s, "b"), 2);
	assert_int_equal(kv_arith(s, 0, "b", 1, false, 95, &out, &c), KV_STORED);
	assert_int_equal(out, 5);
	assert_int_equal(c, 3);
	assert_string_equal(val(s, "b"), "5  ");
	assert_int_equal(kv_arith(s, 0, "b", 1, true, 1000, &out, &c), KV_STORED);
	assert_int_equal(c, 4);
	assert_string_equal(val(s, "b"), "1005");
	assert_int_equal(kv_touch(s, 0, "b", 1, kv_realtime(s, 100), NULL), KV_TOUCHED);
	assert_int_equal(cas_of(s, "b"), 4);
	assert_int_equal(put(s, 0, "b", "x", 1, 0, 0, KV_APPEND, 0, &c), KV_STORED);
	assert_int_equal(c, 5);
	kv_flush_all(s, kv_store_now(s));
	assert_string_equal(val(s, "b"), "<miss>");
	assert_int_equal(put(s, 0, "c", "1", 1, 0, 0, KV_SET, 0, &c), KV_STORED);
	assert_int_equal(c, 7);   /* flush_all took 6 */
	assert_int_equal(mode(s, "c", "2", KV_CAS, 99), KV_EXISTS);
	assert_int_equal(mode(s, "c", "2", KV_CAS, 0), KV_EXISTS);
	assert_int_equal(mode(s, "nope", "2", KV_CAS, 7), KV_NOT_FOUND);
	assert_int_equal(put(s, 0, "c", "3", 1, 0, 0, KV_CAS, 7, &c), KV_STORED);
	assert_int_equal(c, 8);
	assert_int_equal(mode(s, "c", "4", KV_CAS, 7), KV_EXISTS);
	assert_int_equal(kv_invalidate(s, 0, "c", 1, 0, false, 0), KV_DELETED);
	assert_int_equal(cas_of(s, "c"), 9);
	/* with -C every cas is 0 and the cas command always answers EXISTS */
	kv_store_destroy(s);
	s = mk_store(64 * MiB, MiB, true, false, 1);
	assert_int_equal(set(s, "a", "1"), KV_STORED);
	assert_int_equal(cas_of(s, "a"), 0);
	assert_int_equal(mode(s, "a", "2", KV_CAS, 0), KV_EXISTS);
	assert_int_equal(mode(s, "a", "2", KV_CAS, 1), KV_EXISTS);
	kv_store_destroy(s);
}

static void test_cas_modes(void **state)
{
	struct kv_store *s = mk();
	struct kv_store_stats st;
	uint64_t c;
	(void)state;

	assert_int_equal(set(s, "k", "v"), KV_STORED);
	c = cas_of(s, "k");
	/* append/prepend with a cas (ms MA C...): compared first */
	assert_int_equal(mode(s, "k", "x", KV_APPEND, c + 1), KV_EXISTS);
	assert_int_equal(mode(s, "k", "x", KV_APPEND, c), KV_STORED);
	assert_string_equal(val(s, "k"), "vx");
	/* add ignores a cas */
	assert_int_equal(mode(s, "k", "y", KV_ADD, 12345), KV_NOT_STORED);
	/* delete with cas (md C) */
	c = cas_of(s, "k");
	assert_int_equal(kv_delete(s, 0, "k", 1, c + 1), KV_EXISTS);
	assert_int_equal(kv_delete(s, 0, "k", 1, c), KV_DELETED);
	assert_int_equal(kv_delete(s, 0, "k", 1, c), KV_NOT_FOUND);
	st = stats(s);
	assert_int_equal(st.cas_badval, 0);
	assert_int_equal(st.delete_hits, 1);
	assert_int_equal(st.delete_misses, 2);
	assert_int_equal(mode(s, "k", "1", KV_CAS, 5), KV_NOT_FOUND);
	assert_int_equal(set(s, "k", "1"), KV_STORED);
	assert_int_equal(mode(s, "k", "2", KV_CAS, 1), KV_EXISTS);
	assert_int_equal(mode(s, "k", "2", KV_CAS, cas_of(s, "k")), KV_STORED);
	st = stats(s);
	assert_int_equal(st.cas_misses, 1);
	assert_int_equal(st.cas_badval, 1);
	assert_int_equal(st.cas_hits, 1);
	kv_store_destroy(s);
}

/* ---- incr / decr ---- */

static enum kv_result arith(struct kv_store *s, const char *key, bool incr, uint64_t d, uint64_t *out)
{
	return kv_arith(s, 0, key, strlen(key), incr, d, out, NULL);
}

static void test_arith(void **state)
{
	struct kv_store *s = mk();
	uint64_t out = 0;
	(void)state;

	assert_int_equal(arith(s, "n", true, 1, &out), KV_NOT_FOUND);
	set(s, "n", "18446744073709551615");
	assert_int_equal(arith(s, "n", true, 2, &out), KV_STORED);
	assert_int_equal(out, 1);
	assert_string_equal(val(s, "n"), "1                   ");   /* padded in place */
	set(s, "n", "10");
	assert_int_equal(arith(s, "n", false, 11, &out), KV_STORED);
	assert_int_equal(out, 0);
	assert_string_equal(val(s, "n"), "0 ");
	set(s, "n", "99");
	assert_int_equal(arith(s, "n", true, 1, &out), KV_STORED);
	assert_string_equal(val(s, "n"), "100");                    /* grows: a new item */
	/* what memcached's safe_strtoull accepts and refuses */
	static const struct { const char *v; bool ok; uint64_t then; const char *after; } cases[] = {
		{ "   ", false, 0, NULL }, { " 12", true, 13, "13 " }, { "12 x", true, 13, "13  " },
		{ "-1", false, 0, NULL }, { "+5", true, 6, "6 " }, { "12abc", false, 0, NULL },
		{ "", false, 0, NULL }, { "x", false, 0, NULL }, { "-0", true, 1, "1 " },
		{ "18446744073709551616", false, 0, NULL }, { "007", true, 8, "8  " },
		{ "-18446744073709551615", true, 2, "2                    " },
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(cases); i++) {
		set(s, "n", cases[i].v);
		enum kv_result r = arith(s, "n", true, 1, &out);
		assert_int_equal(r, cases[i].ok ? KV_STORED : KV_NON_NUMERIC);
		if (cases[i].ok) {
			assert_int_equal(out, cases[i].then);
			assert_string_equal(val(s, "n"), cases[i].after);
		}
	}
	assert_int_equal(put(s, 0, "z", "5\0x", 3, 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(arith(s, "z", true, 1, &out), KV_STORED);
	assert_string_equal(val(s, "z"), "6  ");
	/* flags and expiry carry over */
	struct kv_item_view v;
	assert_int_equal(put(s, 0, "f", "1", 1, 9, 4000, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(arith(s, "f", true, 100, &out), KV_STORED);
	assert_true(kv_get(s, 0, "f", 1, &v));
	assert_int_equal(v.flags, 9);
	assert_int_equal(v.exptime, 4000);
	/* ma with C */
	uint64_t c = v.cas, nc = 0;
	assert_int_equal(kv_arith_cas(s, 0, "f", 1, true, 1, c + 1, &out, &nc, NULL), KV_EXISTS);
	assert_int_equal(kv_arith_cas(s, 0, "f", 1, true, 1, c, &out, &nc, &v), KV_STORED);
	assert_int_equal(out, 102);
	assert_int_equal(v.cas, nc);
	assert_int_equal(v.exptime, 4000);
	struct kv_store_stats st = stats(s);
	assert_int_equal(st.incr_misses, 1);
	assert_int_equal(st.decr_hits, 1);
	kv_store_destroy(s);
}

/* ---- time ---- */

static void test_realtime(void **state)
{
	struct kv_store *s = mk();
	(void)state;

	assert_int_equal(kv_realtime(s, 0), 0);
	assert_int_equal(kv_realtime(s, 10), 1010);
	assert_int_equal(kv_realtime(s, KV_REALTIME_MAXDELTA), 1000 + KV_REALTIME_MAXDELTA);
	assert_int_equal(kv_realtime(s, KV_REALTIME_MAXDELTA + 1), 1);    /* absolute, long past */
	assert_int_equal(kv_realtime(s, START_UNIX + 5000), 5000);
	assert_int_equal(kv_realtime(s, START_UNIX), 1);
	assert_int_equal(kv_realtime(s, -1), 1);
	kv_store_tick(s, (START_UNIX + 2000) * 1000000000ull + 5);
	assert_int_equal(kv_store_now(s), 2000);
	kv_store_tick(s, (START_UNIX + 1999) * 1000000000ull);   /* a late worker's reading */
	assert_int_equal(kv_store_now(s), 2000);
	kv_store_destroy(s);
}

static void test_expiry(void **state)
{
	struct kv_store *s = mk();
	struct kv_item_view v;
	(void)state;

	put(s, 0, "r", "1", 1, 0, kv_realtime(s, 10), KV_SET, 0, NULL);
	put(s, 0, "a", "1", 1, 0, kv_realtime(s, START_UNIX + 1005), KV_SET, 0, NULL);
	put(s, 0, "n", "1", 1, 0, kv_realtime(s, -1), KV_SET, 0, NULL);
	put(s, 0, "z", "1", 1, 0, 0, KV_SET, 0, NULL);
	assert_string_equal(val(s, "n"), "<miss>");
	assert_string_equal(val(s, "r"), "1");
	kv_store_set_clock(s, 1005, START_UNIX);
	assert_string_equal(val(s, "a"), "<miss>");   /* expires at exptime <= now */
	assert_string_equal(val(s, "r"), "1");
	/* touch moves expiry; gat returns the value */
	assert_int_equal(kv_touch(s, 0, "r", 1, kv_realtime(s, 100), &v), KV_TOUCHED);
	assert_int_equal(v.exptime, 1105);
	assert_memory_equal(v.value, "1", 1);
	assert_int_equal(kv_touch(s, 0, "a", 1, 0, NULL), KV_NOT_FOUND);
	kv_store_set_clock(s, 1104, START_UNIX);
	assert_string_equal(val(s, "r"), "1");
	kv_store_set_clock(s, 1105, START_UNIX);
	assert_string_equal(val(s, "r"), "<miss>");
	assert_string_equal(val(s, "z"), "1");
	/* an expired item is gone for add/replace/incr too */
	put(s, 0, "e", "5", 1, 0, kv_realtime(s, 1), KV_SET, 0, NULL);
	kv_store_set_clock(s, 1106, START_UNIX);
	uint64_t out;
	assert_int_equal(kv_arith(s, 0, "e", 1, true, 1, &out, NULL), KV_NOT_FOUND);
	assert_int_equal(mode(s, "e", "x", KV_REPLACE, 0), KV_NOT_STORED);
	assert_int_equal(mode(s, "e", "x", KV_ADD, 0), KV_STORED);
	struct kv_store_stats st = stats(s);
	assert_true(st.get_expired >= 3);
	assert_int_equal(st.touch_hits, 1);
	assert_int_equal(st.touch_misses, 1);
	assert_int_equal(st.cmd_touch, 2);
	kv_store_destroy(s);
}

/* flush_all with a delay: memcached sets oldest_live = when - 1 and compares link times. */
static void test_flush_all(void **state)
{
	struct kv_store *s = mk();
	(void)state;

	set(s, "old", "1");
	kv_flush_all(s, kv_realtime(s, 10));        /* takes effect at 1009 */
	kv_store_set_clock(s, 1005, START_UNIX);
	set(s, "mid", "1");
	assert_string_equal(val(s, "old"), "1");
	kv_store_set_clock(s, 1009, START_UNIX);
	set(s, "same", "1");                        /* linked at 1009: still <= oldest_live */
	assert_string_equal(val(s, "old"), "<miss>");
	assert_string_equal(val(s, "mid"), "<miss>");
	assert_string_equal(val(s, "same"), "<miss>");
	kv_store_set_clock(s, 1010, START_UNIX);
	set(s, "new", "1");
	assert_string_equal(val(s, "new"), "1");
	/* immediate: everything linked before, even in the same second, by cas */
	set(s, "x", "1");
	kv_flush_all(s, kv_store_now(s));
	assert_string_equal(val(s, "x"), "<miss>");
	set(s, "y", "1");
	assert_string_equal(val(s, "y"), "1");
	assert_int_equal(stats(s).get_flushed, 4);
	kv_store_destroy(s);
}

/* ---- item size limit ---- */

static void check_boundary(uint32_t item_max, bool cas, size_t nkey, uint32_t flags, uint32_t max)
{
	struct kv_store *s = mk_store(8 * (uint64_t)(item_max < MiB ? MiB : item_max), item_max, true, cas, 1);
	char key[251];
	enum kv_result r;
	struct kv_new *n;

	memset(key, 'k', nkey);
	key[nkey] = 0;
	n = kv_alloc(s, 0, key, nkey, flags, 0, max, &r);
	assert_non_null(n);
	memset(kv_new_data(n), 'v', max);
	memcpy(kv_new_data(n) + max, "\r\n", 2);
	assert_int_equal(kv_store_item(s, 0, n, KV_SET, 0, NULL), KV_STORED);
	assert_null(kv_alloc(s, 0, key, nkey, flags, 0, max + 1, &r));
	assert_int_equal(r, KV_TOO_LARGE);
	kv_store_destroy(s);
}

/* The largest value memcached 1.6.18 stores, found by experiment for -I 1m and 2m (it
 * refuses -I below 512k unless slab_chunk_max is lowered): item_max - 48 - (nkey + 1)
 * - (flags ? 4 : 0) - 2 - (cas ? 8 : 0). */
static void test_too_large(void **state)
{
	(void)state;
	check_boundary(MiB, true, 1, 0, 1048516);
	check_boundary(MiB, true, 250, 0, 1048267);
	check_boundary(MiB, true, 1, 1, 1048512);
	check_boundary(MiB, true, 250, 1, 1048263);
	check_boundary(2 * MiB, true, 1, 0, 2097092);
	check_boundary(2 * MiB, true, 250, 1, 2096839);
	check_boundary(MiB, false, 1, 0, 1048524);
	check_boundary(1024, true, 1, 0, 1024 - 60);

	/* append past the limit is NOT_STORED (memcached's do_item_alloc fails) */
	struct kv_store *s = mk_store(8 * MiB, 1024, true, true, 1);
	char big[1000];
	memset(big, 'b', sizeof(big));
	assert_int_equal(put(s, 0, "k", big, 964, 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "k", "x", 1, 0, 0, KV_APPEND, 0, NULL), KV_NOT_STORED);
	assert_int_equal(put(s, 0, "k", "x", 1, 0, 0, KV_PREPEND, 0, NULL), KV_NOT_STORED);
	kv_store_destroy(s);

	char err[128];
	struct kv_store_config bad = { .mem_limit = 2 * MiB, .item_max = 2 * MiB, .use_cas = true };
	assert_null(kv_store_create(&bad, err, sizeof(err)));
	assert_string_equal(err, "Cannot set item size limit higher than 1/2 of memory max.");
	bad.item_max = 1000;
	assert_null(kv_store_create(&bad, err, sizeof(err)));
	assert_string_equal(err, "Item max size cannot be less than 1024 bytes.");
}

/* ---- meta: mg T/N/R, md I, ms I ---- */

static enum kv_mget_result mg(struct kv_store *s, const char *key, const struct kv_mget_args *a,
			      struct kv_item_view *v)
{
	memset(v, 0xa5, sizeof(*v));
	return kv_mget(s, 0, key, strlen(key), a, v);
}

/* The flags memcached 1.6.18 printed for the same steps (see the report's transcript). */
static void test_meta(void **state)
{
	struct kv_store *s = mk();
	struct kv_mget_args plain = { 0 }, viv = { .vivify = true, .exptime = kv_realtime(s, 30) };
	struct kv_mget_args rc = { .recache_below = 30 };
	struct kv_item_view v;
	(void)state;

	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_MISS);
	set(s, "c", "1");
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);
	assert_false(v.won || v.stale || v.token_sent || v.fetched);
	uint64_t c0 = v.cas;
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);
	assert_true(v.fetched);                              /* h: fetched before this one */
	/* md c I: stale, new cas; the first fetch wins (X W), the next sees Z X */
	assert_int_equal(kv_invalidate(s, 0, "c", 1, 0, false, 0), KV_DELETED);
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);
	assert_true(v.cas > c0 && v.stale && v.won && !v.token_sent);
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);
	assert_true(v.stale && !v.won && v.token_sent);
	assert_int_equal(kv_invalidate(s, 0, "c", 1, v.cas + 1, false, 0), KV_EXISTS);
	assert_int_equal(kv_invalidate(s, 0, "nope", 4, 0, false, 0), KV_NOT_FOUND);
	/* ms with C and I: a lower cas still replaces, stale, keeping ttl and token */
	assert_int_equal(kv_invalidate(s, 0, "c", 1, 0, true, kv_realtime(s, 500)), KV_DELETED);
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);     /* takes the token */
	assert_int_equal(put(s, 0, "c", "2", 1, 0, 0, KV_CAS_STALE, v.cas - 1, NULL), KV_STORED);
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);
	assert_true(v.stale && v.token_sent && !v.won);
	assert_int_equal(v.exptime, 1500);
	assert_memory_equal(v.value, "2", 1);
	assert_int_equal(put(s, 0, "c", "3", 1, 0, 0, KV_CAS_STALE, v.cas + 1, NULL), KV_EXISTS);
	assert_int_equal(put(s, 0, "c", "3", 1, 0, 0, KV_CAS_STALE, v.cas, NULL), KV_STORED);
	assert_int_equal(mg(s, "c", &plain, &v), KV_MG_HIT);
	assert_false(v.stale || v.token_sent);                   /* a matching cas: a fresh item */
	/* N: vivify on a miss with the win; the next fetch sees Z */
	assert_int_equal(mg(s, "zz", &viv, &v), KV_MG_VIVIFIED);
	assert_true(v.won && v.nbytes == 0 && v.exptime == 0);
	assert_int_equal(mg(s, "zz", &viv, &v), KV_MG_HIT);
	assert_true(!v.won && v.token_sent && v.exptime == 1030);
	/* R: a win once the ttl left is under the threshold, and only once */
	set(s, "f", "5");
	assert_int_equal(mg(s, "f", &rc, &v), KV_MG_HIT);
	assert_false(v.won);                                     /* no expiry: never */
	kv_touch(s, 0, "f", 1, kv_realtime(s, 10), NULL);
	assert_int_equal(mg(s, "f", &rc, &v), KV_MG_HIT);
	assert_true(v.won && !v.token_sent);
	assert_int_equal(mg(s, "f", &rc, &v), KV_MG_HIT);
	assert_true(!v.won && v.token_sent);
	/* T: new expiry (the view has the old one), counted as a touch */
	struct kv_mget_args t = { .touch = true, .exptime = kv_realtime(s, 77) };
	struct kv_store_stats before = stats(s);
	assert_int_equal(mg(s, "f", &t, &v), KV_MG_HIT);
	assert_int_equal(v.exptime, 1010);
	assert_int_equal(mg(s, "f", &plain, &v), KV_MG_HIT);
	assert_int_equal(v.exptime, 1077);
	assert_int_equal(mg(s, "gone", &t, &v), KV_MG_MISS);
	struct kv_store_stats after = stats(s);
	assert_int_equal(after.touch_hits - before.touch_hits, 1);
	assert_int_equal(after.touch_misses - before.touch_misses, 1);
	assert_int_equal(after.get_hits - before.get_hits, 1);
	/* u: no bump, so the item stays unfetched */
	struct kv_mget_args nb = { .no_bump = true };
	set(s, "u", "1");
	mg(s, "u", &nb, &v);
	assert_int_equal(mg(s, "u", &nb, &v), KV_MG_HIT);
	assert_false(v.fetched);
	kv_store_destroy(s);
}

/* ---- stats emitters, kv_unlink, -L ---- */

struct emitted {
	char text[16384];
	size_t len;
};

static void emit(void *arg, const char *name, const char *value)
{
	struct emitted *e = arg;

	e->len += (size_t)snprintf(e->text + e->len, sizeof(e->text) - e->len, "%s=%s\n", name, value);
}

static void test_stats_lines(void **state)
{
	struct kv_store_config cfg = { .mem_limit = 8 * MiB, .item_max = MiB, .growth_factor = 1.25,
		.chunk_min = 48, .n_workers = 1, .use_cas = true, .evict = true, .prealloc = true };
	char err[128], big[5000];
	struct kv_store *s = kv_store_create(&cfg, err, sizeof(err));
	struct emitted e = { .len = 0 };
	(void)state;

	assert_non_null(s);
	set(s, "a", "1");
	set(s, "b", "2");
	memset(big, 'x', sizeof(big));
	put(s, 0, "big", big, sizeof(big), 0, 0, KV_SET, 0, NULL);
	val(s, "a");
	kv_store_stats_slabs(s, emit, &e);
	/* memcached's first class: 48 + 48 bytes; 10922 to a 1 MiB page */
	assert_non_null(strstr(e.text, "1:chunk_size=96\n1:chunks_per_page=10922\n1:total_pages=1\n"));
	assert_non_null(strstr(e.text, "1:used_chunks=2\n"));
	assert_non_null(strstr(e.text, "1:get_hits=1\n1:cmd_set=2\n"));
	assert_non_null(strstr(e.text, "active_slabs=2\ntotal_malloced=2097152\n"));
	e.len = 0;
	kv_store_stats_items(s, emit, &e);
	assert_non_null(strstr(e.text, "items:1:number=2\n"));
	assert_non_null(strstr(e.text, "items:1:mem_requested=104\n"));   /* 2 x (48 + 1 + 1 + 2) */
	assert_non_null(strstr(e.text, "items:1:evicted_unfetched=0\n"));
	struct kv_store_stats st = stats(s);
	assert_int_equal(st.curr_items, 3);
	assert_int_equal(st.total_items, 3);
	assert_int_equal(st.limit_maxbytes, 8 * MiB);
	assert_int_equal(st.hash_bytes, 8ull << st.hash_power_level);
	/* kv_unlink drops a key without counting a delete */
	kv_unlink(s, 0, "a", 1);
	assert_string_equal(val(s, "a"), "<miss>");
	st = stats(s);
	assert_int_equal(st.curr_items, 2);
	assert_int_equal(st.delete_hits + st.delete_misses, 0);
	kv_store_destroy(s);
}

/* ---- memory: the arena, eviction, -M ---- */

static void fill_key(char *k, size_t n, const char *pre, unsigned i) { snprintf(k, n, "%s%u", pre, i); }

static bool present(struct kv_store *s, const char *pre, unsigned i)
{
	char k[32];
	struct kv_item_view v;

	fill_key(k, sizeof(k), pre, i);
	return kv_get(s, 0, k, strlen(k), &v);
}

/* Fill 4 MiB ten times over: the arena never grows, recent keys survive, old ones go, a
 * key read once per lap of the CLOCK hand survives throughout. */
static void test_evict_recent_survive(void **state)
{
	struct kv_store *s = mk_store(4 * MiB, MiB, true, true, 1);
	char k[32], v[100];
	unsigned n = 250000;
	struct kv_item_view view;
	(void)state;

	memset(v, 'v', sizeof(v));
	assert_int_equal(put(s, 0, "hot", v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_STORED);
	for (unsigned i = 0; i < n; i++) {
		fill_key(k, sizeof(k), "key", i);
		assert_int_equal(put(s, 0, k, v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_STORED);
		if (i % 1000 == 0) {
			assert_true(kv_get(s, 0, "hot", 3, &view));
			kv_store_quiesce(s, 0);
			assert_true(stats(s).total_malloced <= 4 * MiB);
		}
	}
	struct kv_store_stats st = stats(s);
	assert_int_equal(st.total_malloced, 4 * MiB);
	assert_true(st.bytes <= 4 * MiB);
	assert_true(st.curr_items > 4 * MiB / 200 && st.curr_items < n / 5);
	assert_true(st.evictions >= n - st.curr_items);
	assert_true(st.evicted_unfetched > 0);
	assert_true(present(s, "hot", 0) || kv_get(s, 0, "hot", 3, &view));
	for (unsigned i = n - 5000; i < n; i++)
		assert_true(present(s, "key", i));
	for (unsigned i = 0; i < 5000; i++)
		assert_false(present(s, "key", i));
	kv_store_destroy(s);
}

/* Expired items are reclaimed before anything live is evicted. */
static void test_evict_reclaims_expired(void **state)
{
	struct kv_store *s = mk_store(2 * MiB, MiB, true, true, 1);
	char k[32], v[100];
	unsigned i = 0;
	(void)state;

	memset(v, 'v', sizeof(v));
	for (; stats(s).evictions == 0; i++) {         /* fill with short-lived items */
		fill_key(k, sizeof(k), "old", i);
		assert_int_equal(put(s, 0, k, v, sizeof(v), 0, kv_realtime(s, 5), KV_SET, 0, NULL), KV_STORED);
	}
	unsigned live = i / 2;
	kv_store_set_clock(s, 1010, START_UNIX);
	struct kv_store_stats before = stats(s);
	for (unsigned j = 0; j < live; j++) {
		fill_key(k, sizeof(k), "new", j);
		assert_int_equal(put(s, 0, k, v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_STORED);
		kv_store_quiesce(s, 0);
	}
	struct kv_store_stats st = stats(s);
	assert_int_equal(st.evictions, before.evictions);  /* room came from the expired */
	assert_true(st.reclaimed >= live - 1);
	assert_true(st.expired_unfetched >= live - 1);
	for (unsigned j = 0; j < live; j++)
		assert_true(present(s, "new", j));
	kv_store_destroy(s);
}

/* Issue 16, item 17: the expiry crawler frees expired items' chunks before the class
 * grows, and touches nothing live: ten 66,560-byte values with a 2 s TTL, then ten more
 * after they expired, stay in the first page (memcached: total_malloced unchanged). */
static void test_crawler_reuses_expired(void **state)
{
	struct kv_store *s = mk_store(64 * MiB, MiB, true, true, 1);
	static uint8_t v[66560];
	char k[32];
	(void)state;

	memset(v, 'v', sizeof(v));
	for (unsigned i = 0; i < 10; i++) {
		fill_key(k, sizeof(k), "old", i);
		assert_int_equal(put(s, 0, k, v, sizeof(v), 0, kv_realtime(s, 2), KV_SET, 0, NULL), KV_STORED);
	}
	fill_key(k, sizeof(k), "keep", 0);
	assert_int_equal(put(s, 0, k, v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_STORED);
	uint64_t before = stats(s).total_malloced;

	assert_int_equal(kv_store_crawl(s, 0, 1000), 0);     /* nothing has expired yet */
	kv_store_set_clock(s, 1004, START_UNIX);
	assert_int_equal(kv_store_crawl(s, 0, 1000), 10);
	kv_store_quiesce(s, 0);                               /* their chunks leave limbo */
	assert_int_equal(kv_store_crawl(s, 0, 1000), 0);     /* each is reclaimed once */
	for (unsigned i = 0; i < 10; i++) {
		fill_key(k, sizeof(k), "new", i);
		assert_int_equal(put(s, 0, k, v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_STORED);
		kv_store_quiesce(s, 0);
	}
	struct kv_store_stats st = stats(s);
	assert_int_equal(st.total_malloced, before);
	assert_int_equal(st.reclaimed, 10);
	assert_int_equal(st.crawler_reclaimed, 10);
	assert_true(st.crawler_checked >= 11);
	assert_int_equal(st.evictions, 0);
	assert_true(present(s, "keep", 0));
	for (unsigned i = 0; i < 10; i++)
		assert_true(present(s, "new", i));
	kv_store_destroy(s);
}

/* Classes compete for pages: sizes from 100 bytes to 900 KB in a 3 MiB arena. Every set
 * succeeds (pages move between classes) and the arena stays at 3 pages. */
static void test_evict_across_classes(void **state)
{
	struct kv_store *s = mk_store(3 * MiB, MiB, true, true, 1);
	static uint8_t big[900 * 1024];
	static const uint32_t sizes[] = { 100, 3000, 40000, 300000, 900 * 1024, 700 };
	uint64_t seed = fp_test_seed();
	char k[32];
	(void)state;

	memset(big, 'b', sizeof(big));
	for (unsigned i = 0; i < 3000; i++) {
		uint32_t n = sizes[fp_test_below(&seed, FP_ARRAY_SIZE(sizes))];
		fill_key(k, sizeof(k), "m", i);
		assert_int_equal(put(s, 0, k, big, n, 0, 0, KV_SET, 0, NULL), KV_STORED);
		assert_true(present(s, "m", i));
		kv_store_quiesce(s, 0);
	}
	struct kv_store_stats st = stats(s);
	assert_true(st.total_malloced <= 3 * MiB);
	assert_true(st.slabs_moved > 0);
	kv_store_destroy(s);
}

/* -I 2m: items of a run of pages, evicted and placed among small ones in an 8 MiB arena. */
static void test_evict_huge(void **state)
{
	struct kv_store *s = mk_store(8 * MiB, 2 * MiB, true, true, 1);
	static uint8_t big[2 * MiB];
	char k[32];
	(void)state;

	for (unsigned i = 0; i < 200; i++) {
		uint32_t n = i % 3 ? 1500 * 1024 + i : 50 + i;
		memset(big, (int)i, n);
		fill_key(k, sizeof(k), "h", i);
		assert_int_equal(put(s, 0, k, big, n, 0, 0, KV_SET, 0, NULL), KV_STORED);
		struct kv_item_view v;
		assert_true(kv_get(s, 0, k, strlen(k), &v));
		assert_int_equal(v.nbytes, n);
		assert_int_equal(v.value[n - 1], (uint8_t)i);
		kv_store_quiesce(s, 0);
		assert_true(stats(s).total_malloced <= 8 * MiB);
	}
	kv_store_destroy(s);
}

/* -M: a full class answers KV_NO_MEMORY and evicts nothing; a delete makes room again. */
static void test_no_evict(void **state)
{
	struct kv_store *s = mk_store(2 * MiB, MiB, false, true, 1);
	char k[32], v[1000];
	enum kv_result r = KV_STORED;
	unsigned i = 0;
	(void)state;

	memset(v, 'v', sizeof(v));
	for (; r == KV_STORED; i++) {
		fill_key(k, sizeof(k), "k", i);
		r = put(s, 0, k, v, sizeof(v), 0, 0, KV_SET, 0, NULL);
	}
	assert_int_equal(r, KV_NO_MEMORY);
	assert_true(i > 1000);
	struct kv_store_stats st = stats(s);
	assert_int_equal(st.evictions, 0);
	assert_int_equal(st.total_malloced, 2 * MiB);
	for (unsigned j = 0; j + 1 < i; j++)
		assert_true(present(s, "k", j));
	kv_store_quiesce(s, 0);   /* drop those views, as a worker does after each round */
	/* a replace needs a new chunk before the old one goes, as in memcached */
	assert_int_equal(put(s, 0, "k0", v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_NO_MEMORY);
	assert_int_equal(kv_delete(s, 0, "k1", 2, 0), KV_DELETED);
	assert_int_equal(put(s, 0, "k0", v, sizeof(v), 0, 0, KV_SET, 0, NULL), KV_STORED);
	/* another class cannot get a page while every page holds items */
	assert_int_equal(put(s, 0, "small", "x", 1, 0, 0, KV_SET, 0, NULL), KV_NO_MEMORY);
	/* ... but can once a page empties */
	for (unsigned j = 0; j < i; j++) {
		fill_key(k, sizeof(k), "k", j);
		kv_delete(s, 0, k, strlen(k), 0);
	}
	assert_int_equal(put(s, 0, "small", "x", 1, 0, 0, KV_SET, 0, NULL), KV_STORED);
	kv_store_destroy(s);
}

/* ---- QSBR ---- */

/* A worker that has not quiesced still holds its view: the old item's chunk is not reused
 * (the writer, short of memory, gives up rather than take it), and is once it quiesces. */
static void test_qsbr_holds(void **state)
{
	struct kv_store *s = mk_store(2 * MiB, MiB, false, true, 2);
	static uint8_t a[400000], b[400000];
	struct kv_item_view v;
	(void)state;

	memset(a, 'A', sizeof(a));
	memset(b, 'B', sizeof(b));
	assert_int_equal(put(s, 0, "a", a, sizeof(a), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_true(kv_get(s, 1, "a", 1, &v));                 /* worker 1 holds "a" */
	assert_int_equal(put(s, 0, "a", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "b", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "c", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	kv_store_quiesce(s, 0);
	/* four 512 KiB chunks: the fourth is the old "a", still held by worker 1 */
	assert_int_equal(put(s, 0, "d", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_NO_MEMORY);
	assert_memory_equal(v.value, a, sizeof(a));
	kv_store_quiesce(s, 1);
	assert_int_equal(put(s, 0, "d", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	/* an offline worker holds nothing */
	assert_true(kv_get(s, 1, "d", 1, &v));
	kv_store_offline(s, 1);
	assert_int_equal(kv_delete(s, 0, "d", 1, 0), KV_DELETED);
	kv_store_quiesce(s, 0);
	assert_int_equal(put(s, 0, "e", a, sizeof(a), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_true(kv_get(s, 1, "e", 1, &v));                 /* back online by itself */
	assert_memory_equal(v.value, a, sizeof(a));
	kv_store_destroy(s);

	/* a worker's own views count too: it may reuse its limbo at once, but not those */
	s = mk_store(2 * MiB, MiB, false, true, 1);
	assert_int_equal(put(s, 0, "a", a, sizeof(a), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "b", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "c", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	kv_store_quiesce(s, 0);
	assert_true(kv_get(s, 0, "a", 1, &v));
	assert_int_equal(kv_delete(s, 0, "b", 1, 0), KV_DELETED);
	assert_int_equal(put(s, 0, "a", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED); /* b's */
	assert_int_equal(put(s, 0, "d", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "e", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_NO_MEMORY);
	assert_memory_equal(v.value, a, sizeof(a));
	kv_store_quiesce(s, 0);
	assert_int_equal(put(s, 0, "e", b, sizeof(b), 0, 0, KV_SET, 0, NULL), KV_STORED);
	kv_store_destroy(s);
}

/* A worker going offline leaves what it could not free yet; the others adopt it. */
static void test_qsbr_orphans(void **state)
{
	struct kv_store *s = mk_store(2 * MiB, MiB, false, true, 2);
	static uint8_t a[400000];
	char k[2] = "a";
	(void)state;

	memset(a, 'A', sizeof(a));
	for (k[0] = 'a'; k[0] <= 'd'; k[0]++)
		assert_int_equal(put(s, 0, k, a, sizeof(a), 0, 0, KV_SET, 0, NULL), KV_STORED);
	assert_int_equal(put(s, 0, "e", a, sizeof(a), 0, 0, KV_SET, 0, NULL), KV_NO_MEMORY);
	assert_int_equal(kv_delete(s, 1, "a", 1, 0), KV_DELETED);
	kv_store_offline(s, 1);      /* worker 0 has not quiesced: "a" cannot be freed yet */
	assert_int_equal(put(s, 0, "e", a, sizeof(a), 0, 0, KV_SET, 0, NULL), KV_STORED);
	kv_store_destroy(s);
}

/* Values that carry their own checksum, so a reader can tell a torn or reused one. */
static uint64_t sum64(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static size_t make_blob(uint8_t *buf, uint64_t *rng, size_t max)
{
	size_t n = 8 + 1 + fp_test_below(rng, max - 9);
	uint8_t c = (uint8_t)fp_test_rand(rng);
	uint64_t h;

	for (size_t i = 8; i < n; i++)
		buf[i] = (uint8_t)(c + i * 7);
	h = sum64(buf + 8, n - 8);
	memcpy(buf, &h, 8);
	return n;
}

static bool blob_ok(const uint8_t *p, size_t n)
{
	uint64_t h;

	if (n < 9)
		return false;
	memcpy(&h, p, 8);
	return h == sum64(p + 8, n - 8);
}

/* A reader holds a view for a while (no quiescent state) while a writer churns through a
 * small arena many times over: the view stays intact until the reader quiesces. */
struct slow_reader {
	struct kv_store *s;
	_Atomic int phase;
	bool intact;
};

static void *slow_reader_main(void *arg)
{
	struct slow_reader *r = arg;
	struct kv_item_view v;
	uint8_t copy[4096];

	assert_true(kv_get(r->s, 1, "blob", 4, &v));
	memcpy(copy, v.value, v.nbytes);
	atomic_store(&r->phase, 1);
	r->intact = blob_ok(v.value, v.nbytes);
	for (int i = 0; i < 40; i++) {       /* ~200 ms holding the view */
		usleep(5000);
		r->intact &= memcmp(copy, v.value, v.nbytes) == 0;
	}
	kv_store_quiesce(r->s, 1);
	kv_store_offline(r->s, 1);
	atomic_store(&r->phase, 2);
	return NULL;
}

static void test_qsbr_slow_reader(void **state)
{
	struct kv_store *s = mk_store(2 * MiB, MiB, true, true, 2);
	struct slow_reader r = { .s = s };
	uint64_t rng = fp_test_seed();
	uint8_t buf[4096];
	char k[32];
	pthread_t t;
	(void)state;

	assert_int_equal(put(s, 0, "blob", buf, make_blob(buf, &rng, 4000), 0, 0, KV_SET, 0, NULL),
			 KV_STORED);
	assert_int_equal(pthread_create(&t, NULL, slow_reader_main, &r), 0);
	while (atomic_load(&r.phase) == 0)
		sched_yield();
	for (unsigned i = 0; atomic_load(&r.phase) < 2 || i < 40000; i++) {
		size_t n = make_blob(buf, &rng, 4000);
		fill_key(k, sizeof(k), "f", i % 5000);
		put(s, 0, i % 3 ? k : "blob", buf, n, 0, 0, KV_SET, 0, NULL);
		kv_store_quiesce(s, 0);
	}
	pthread_join(t, NULL);
	assert_true(r.intact);
	assert_true(stats(s).evictions > 0);
	assert_true(stats(s).total_malloced <= 2 * MiB);
	kv_store_destroy(s);
}

/* ---- threads hammering overlapping keys ---- */

#define HAMMER_THREADS 4
#define N_CTR 4
#define N_LOG 4
#define N_BLOB 8
#define N_ADD 256

struct hammer {
	struct kv_store *s;
	unsigned w, rounds;
	bool small;                    /* a tight arena: only the torn-value check holds */
	uint64_t rng;
	uint64_t incrs[N_CTR], cas_wins, appended[N_LOG], torn, reads;
	_Atomic unsigned *add_wins;
};

static void hammer_cas(struct hammer *h)
{
	struct kv_item_view v;
	char num[32];

	for (;;) {
		if (!kv_get(h->s, h->w, "casctr", 6, &v))
			return;                     /* evicted (small arena) */
		uint64_t n = strtoull((const char *)v.value, NULL, 10) + 1, c = v.cas;
		int len = snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
		enum kv_result r = put(h->s, h->w, "casctr", num, (size_t)len, 0, 0, KV_CAS, c, NULL);
		if (r == KV_STORED) {
			h->cas_wins++;
			return;
		}
		if (r != KV_EXISTS)
			return;
	}
}

static void hammer_op(struct hammer *h, unsigned round, unsigned i)
{
	uint8_t buf[4096];
	char k[48], tok[32];
	struct kv_item_view v;
	uint64_t out;
	unsigned x = (unsigned)fp_test_below(&h->rng, 100);

	if (x < 20) {
		unsigned c = x % N_CTR;
		snprintf(k, sizeof(k), "ctr%u", c);
		if (kv_arith(h->s, h->w, k, strlen(k), true, 1, &out, NULL) == KV_STORED)
			h->incrs[c]++;
	} else if (x < 35) {
		unsigned l = x % N_LOG;
		snprintf(k, sizeof(k), "log%u", l);
		int n = snprintf(tok, sizeof(tok), "%u.%u.%u;", h->w, round, i);
		if (put(h->s, h->w, k, tok, (size_t)n, 0, 0, KV_APPEND, 0, NULL) == KV_STORED)
			h->appended[l]++;
	} else if (x < 45) {
		hammer_cas(h);
	} else if (x < 50 || i == 0) {               /* every thread races each add key */
		snprintf(k, sizeof(k), "add%u", round % N_ADD);
		if (put(h->s, h->w, k, "w", 1, 0, 0, KV_ADD, 0, NULL) == KV_STORED)
			atomic_fetch_add(&h->add_wins[round % N_ADD], 1);
	} else if (x < 65) {
		snprintf(k, sizeof(k), "blob%u", x % N_BLOB);
		put(h->s, h->w, k, buf, make_blob(buf, &h->rng, h->small ? 4000 : 600), 0, 0,
		    KV_SET, 0, NULL);
	} else if (x < (h->small ? 75 : 100)) {
		snprintf(k, sizeof(k), "blob%u", x % N_BLOB);
		if (kv_get(h->s, h->w, k, strlen(k), &v)) {
			h->reads++;
			h->torn += !blob_ok(v.value, v.nbytes);
		}
	} else {                                   /* churn: fill the small arena */
		snprintf(k, sizeof(k), "fill%u.%u", h->w, (unsigned)fp_test_below(&h->rng, 20000));
		put(h->s, h->w, k, buf, make_blob(buf, &h->rng, 4000), 0, 0, KV_SET, 0, NULL);
	}
}

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;

	for (unsigned r = 0; r < h->rounds; r++) {
		for (unsigned i = 0; i < 8; i++)
			hammer_op(h, r, i);
		kv_store_quiesce(h->s, h->w);    /* a round ends: no views held */
	}
	kv_store_offline(h->s, h->w);
	return NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every token appended to @key is there exactly once. */
static void check_log(struct kv_store *s, unsigned w, const char *key, uint64_t expect)
{
	struct kv_item_view v;
	char *copy, **toks, *save = NULL;
	uint64_t n = 0;

	assert_true(kv_get(s, w, key, strlen(key), &v));
	copy = strndup((const char *)v.value, v.nbytes);
	toks = calloc(expect + 1, sizeof(*toks));
	for (char *t = strtok_r(copy, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
		assert_true(n < expect);
		toks[n++] = t;
	}
	assert_int_equal(n, expect);
	qsort(toks, n, sizeof(*toks), cmp_str);
	for (uint64_t i = 1; i < n; i++)
		assert_true(strcmp(toks[i - 1], toks[i]) != 0);
	free(toks);
	free(copy);
}

static void run_hammer(uint64_t mem, bool small, unsigned rounds)
{
	struct kv_store *s = mk_store(mem, MiB, true, true, HAMMER_THREADS + 1);
	struct hammer h[HAMMER_THREADS];
	pthread_t t[HAMMER_THREADS];
	_Atomic unsigned add_wins[N_ADD] = { 0 };
	uint64_t seed = fp_test_seed(), rng = seed;
	const unsigned me = HAMMER_THREADS;
	uint8_t buf[4096];
	char k[32];

	for (unsigned i = 0; i < N_CTR; i++) {
		snprintf(k, sizeof(k), "ctr%u", i);
		put(s, me, k, "0", 1, 0, 0, KV_SET, 0, NULL);
	}
	for (unsigned i = 0; i < N_LOG; i++) {
		snprintf(k, sizeof(k), "log%u", i);
		put(s, me, k, "", 0, 0, 0, KV_SET, 0, NULL);
	}
	for (unsigned i = 0; i < N_BLOB; i++) {
		snprintf(k, sizeof(k), "blob%u", i);
		put(s, me, k, buf, make_blob(buf, &rng, 600), 0, 0, KV_SET, 0, NULL);
	}
	put(s, me, "casctr", "0", 1, 0, 0, KV_SET, 0, NULL);
	kv_store_offline(s, me);
	for (unsigned i = 0; i < HAMMER_THREADS; i++) {
		h[i] = (struct hammer){ .s = s, .w = i, .rounds = rounds, .small = small,
					.rng = seed + i * 0x9e3779b97f4a7c15ull, .add_wins = add_wins };
		assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	uint64_t incrs[N_CTR] = { 0 }, appended[N_LOG] = { 0 }, cas_wins = 0, torn = 0, reads = 0;
	for (unsigned i = 0; i < HAMMER_THREADS; i++) {
		pthread_join(t[i], NULL);
		for (unsigned c = 0; c < N_CTR; c++)
			incrs[c] += h[i].incrs[c];
		for (unsigned l = 0; l < N_LOG; l++)
			appended[l] += h[i].appended[l];
		cas_wins += h[i].cas_wins;
		torn += h[i].torn;
		reads += h[i].reads;
	}
	assert_int_equal(torn, 0);
	assert_true(reads > 0);
	if (getenv("KV_DEBUG"))
		fprintf(stderr, "evictions %llu reclaimed %llu malloced %llu moved %llu items %llu\n",
			(unsigned long long)stats(s).evictions, (unsigned long long)stats(s).reclaimed,
			(unsigned long long)stats(s).total_malloced, (unsigned long long)stats(s).slabs_moved,
			(unsigned long long)stats(s).curr_items);
	if (!small) {
		for (unsigned c = 0; c < N_CTR; c++) {
			snprintf(k, sizeof(k), "ctr%u", c);
			assert_int_equal(strtoull(val(s, k), NULL, 10), incrs[c]);
		}
		for (unsigned l = 0; l < N_LOG; l++) {
			snprintf(k, sizeof(k), "log%u", l);
			check_log(s, me, k, appended[l]);
		}
		assert_int_equal(strtoull(val(s, "casctr"), NULL, 10), cas_wins);
		for (unsigned a = 0; a < N_ADD && a < rounds; a++)
			assert_int_equal(atomic_load(&add_wins[a]), 1);
	} else {
		assert_true(stats(s).evictions > 0);
	}
	assert_true(stats(s).total_malloced <= mem);
	kv_store_destroy(s);
}

static void test_threads_consistent(void **state)
{
	(void)state;
	run_hammer(256 * MiB, false, getenv("KV_ROUNDS") ? (unsigned)atoi(getenv("KV_ROUNDS")) : 3000);
}

static void test_threads_evicting(void **state)
{
	(void)state;
	run_hammer(32 * MiB, true, getenv("KV_ROUNDS") ? (unsigned)atoi(getenv("KV_ROUNDS")) : 3000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_modes),
		cmocka_unit_test(test_cas_numbering),
		cmocka_unit_test(test_cas_modes),
		cmocka_unit_test(test_arith),
		cmocka_unit_test(test_realtime),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_flush_all),
		cmocka_unit_test(test_too_large),
		cmocka_unit_test(test_meta),
		cmocka_unit_test(test_stats_lines),
		cmocka_unit_test(test_evict_recent_survive),
		cmocka_unit_test(test_evict_reclaims_expired),
		cmocka_unit_test(test_crawler_reuses_expired),
		cmocka_unit_test(test_evict_across_classes),
		cmocka_unit_test(test_evict_huge),
		cmocka_unit_test(test_no_evict),
		cmocka_unit_test(test_qsbr_holds),
		cmocka_unit_test(test_qsbr_orphans),
		cmocka_unit_test(test_qsbr_slow_reader),
		cmocka_unit_test(test_threads_consistent),
		cmocka_unit_test(test_threads_evicting),
	};

	if (getenv("KV_TEST"))     /* run one test: KV_TEST=test_meta */
		cmocka_set_test_filter(getenv("KV_TEST"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
