/* test_kv_proto.c: fp-kv's protocol over the real store, fed whole, byte by byte and in random splits. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "proto.h"

/*
 * Every expected string below was taken from memcached 1.6.18 fed the same bytes (see
 * tests/integration/kvdiff.py for the live comparison). A script is run on a fresh server
 * whole, byte by byte and in random splits, with the caller's contract of evl: what
 * feed() leaves unconsumed is shown again with what comes next. The answers must be the
 * same every time (split_stable mode; the few places where memcached itself depends on
 * how its reads fell are tested apart, fed whole).
 */

#define T_START 1000u            /* the store clock at the start of each script */

struct srv {
	struct kv_store *s;
	struct kv_proto p;
	struct kv_conn *c;
	char *out;
	size_t olen, ocap;
	size_t room;                 /* what room() reports; SIZE_MAX: unlimited */
};

static uint64_t seed_state;

static int t_write(void *arg, const struct iovec *iov, unsigned n)
{
	struct srv *v = arg;
	size_t total = 0;

	for (unsigned i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (total > v->room)
		return -ENOBUFS;
	if (v->olen + total + 1 > v->ocap) {
		v->ocap = (v->olen + total + 1) * 2;
		v->out = realloc(v->out, v->ocap);
		assert_non_null(v->out);
	}
	for (unsigned i = 0; i < n; i++) {
		memcpy(v->out + v->olen, iov[i].iov_base, iov[i].iov_len);
		v->olen += iov[i].iov_len;
	}
	v->out[v->olen] = '\0';
	if (v->room != SIZE_MAX)
		v->room -= total;
	return 0;
}

static size_t t_room(void *arg)
{
	return ((struct srv *)arg)->room;
}

static void srv_open(struct srv *v, uint32_t item_max, uint64_t mem, bool stable, bool cas)
{
	struct kv_store_config cfg = {
		.mem_limit = mem, .item_max = item_max, .growth_factor = 1.25, .chunk_min = 48,
		.n_workers = 1, .use_cas = cas, .evict = true,
	};
	struct kv_settings set = {
		.maxbytes = mem, .maxconns = 1024, .tcpport = 11211, .factor = 1.25,
		.chunk_size = 48, .num_threads = 1, .use_cas = cas, .evict = true,
		.item_size_max = item_max, .flush_enabled = true, .split_stable = stable,
	};
	struct kv_out out = { t_write, t_room, v, NULL };
	char err[256];

	memset(v, 0, sizeof(*v));
	v->room = SIZE_MAX;
	v->s = kv_store_create(&cfg, err, sizeof(err));
	if (!v->s)
		fail_msg("kv_store_create: %s", err);
	kv_store_set_clock(v->s, T_START, 1700000000ull);
	assert_int_equal(kv_proto_init(&v->p, v->s, &set, 1), 0);
	v->c = kv_conn_new(&v->p, 0, &out);
	assert_non_null(v->c);
}

static void srv_close(struct srv *v)
{
	kv_conn_free(v->c);
	kv_proto_fini(&v->p);
	kv_store_destroy(v->s);
	free(v->out);
}

/* evl's side of the contract: pending bytes, the next piece appended, feed, keep the rest. */
struct feeder {
	uint8_t *buf;
	size_t len, cap;
};

static void feeder_push(struct srv *v, struct feeder *f, const uint8_t *d, size_t n)
{
	size_t used;

	if (f->len + n > f->cap) {
		f->cap = (f->len + n) * 2 + 64;
		f->buf = realloc(f->buf, f->cap);
		assert_non_null(f->buf);
	}
	memcpy(f->buf + f->len, d, n);
	f->len += n;
	if (kv_conn_closing(v->c))
		return;
	used = kv_conn_feed(v->c, f->buf, f->len);
	assert_true(used <= f->len);
	memmove(f->buf, f->buf + used, f->len - used);
	f->len -= used;
	kv_store_quiesce(v->s, 0);   /* a round ends: item pointers die here */
}

enum split { SPLIT_WHOLE, SPLIT_BYTES, SPLIT_RANDOM };

/* Feed @in to @v cut as @how says. */
static void feed_split(struct srv *v, const char *in, size_t len, enum split how)
{
	struct feeder f = { 0 };
	size_t pos = 0;

	while (pos < len) {
		size_t n = how == SPLIT_WHOLE ? len - pos : how == SPLIT_BYTES ? 1 :
			   1 + (size_t)fp_test_below(&seed_state, 97);

		if (n > len - pos)
			n = len - pos;
		feeder_push(v, &f, (const uint8_t *)in + pos, n);
		pos += n;
	}
	free(f.buf);
}

#define FEED(v, lit, how) feed_split(v, lit, sizeof(lit) - 1, how)

/* @in on a fresh server must answer @want (and close or not) however it is split. */
static void expect_b(const char *in, size_t len, const char *want, size_t wlen, bool closes)
{
	for (int how = SPLIT_WHOLE; how <= SPLIT_RANDOM + 3; how++) {
		struct srv v;

		srv_open(&v, 1u << 20, 64u << 20, true, true);
		feed_split(&v, in, len, how > SPLIT_RANDOM ? SPLIT_RANDOM : (enum split)how);
		if (v.olen != wlen || (wlen && memcmp(v.out, want, wlen)) ||
		    kv_conn_closing(v.c) != closes)
			fail_msg("split %d of:\n%.*s\nanswered:\n%s%s\nwanted:\n%s%s", how,
				 (int)(len > 400 ? 400 : len), in, v.out ? v.out : "",
				 kv_conn_closing(v.c) ? "[closed]" : "", want, closes ? "[closed]" : "");
		srv_close(&v);
	}
}

static void expect_n(const char *in, size_t len, const char *want, bool closes)
{
	expect_b(in, len, want, strlen(want), closes);
}

static void expect(const char *in, const char *want)
{
	expect_n(in, strlen(in), want, false);
}

/* String literals that hold NUL bytes */
#define EXPECT_LIT(in, want) expect_b(in, sizeof(in) - 1, want, sizeof(want) - 1, false)

/* ---- tokens and numbers ---- */

static void test_numbers(void **state)
{
	uint32_t u;
	int32_t i;
	uint64_t ull;

	(void)state;
	/* memcached's safe_strtol: a long, truncated to 32 bits */
	assert_true(kv_strtol("4294967301", 10, &i));
	assert_int_equal(i, 5);
	assert_true(kv_strtol("-1", 2, &i));
	assert_int_equal(i, -1);
	assert_false(kv_strtol("99999999999999999999", 20, &i));   /* ERANGE */
	assert_false(kv_strtol("5x", 2, &i));
	assert_true(kv_strtol("5\t", 2, &i));                       /* white space ends it */
	assert_true(kv_strtol(" +7", 3, &i));
	assert_int_equal(i, 7);
	assert_false(kv_strtol("", 0, &i));
	assert_false(kv_strtol("-", 1, &i));
	/* safe_strtoul: negative only refused when it looks negative as a long */
	assert_false(kv_strtoul("-1", 2, &u));
	assert_true(kv_strtoul("-0", 2, &u));
	assert_true(kv_strtoul("4294967297", 10, &u));
	assert_int_equal(u, 1);
	assert_true(kv_strtoull("18446744073709551615", 20, &ull));
	assert_true(ull == UINT64_MAX);
	assert_false(kv_strtoull("18446744073709551616", 20, &ull));
	assert_false(kv_strtoull("-5", 2, &ull));
}

static void test_tokenize(void **state)
{
	struct kv_tok t[KV_MAX_TOKENS];
	char line[200];
	size_t n, len;

	(void)state;
	n = kv_tokenize("  get  a b ", 11, t, KV_MAX_TOKENS);
	assert_int_equal(n, 4);
	assert_int_equal(t[0].len, 3);
	assert_memory_equal(t[1].p, "a", 1);
	assert_null(t[3].p);
	/* 23 tokens at most, then the rest unsplit */
	len = 0;
	for (int k = 0; k < 30; k++)
		len += (size_t)sprintf(line + len, "k%d ", k);
	n = kv_tokenize(line, len, t, KV_MAX_TOKENS);
	assert_int_equal(n, KV_MAX_TOKENS);
	assert_non_null(t[n - 1].p);
	assert_memory_equal(t[n - 1].p, "k23 ", 4);
}

static void test_base64(void **state)
{
	uint8_t out[64];
	char enc[64];

	(void)state;
	assert_int_equal(kv_b64_decode("Zm9v", 4, out, sizeof(out)), 3);
	assert_memory_equal(out, "foo", 3);
	/* memcached's decoder skips what is not base64 */
	assert_int_equal(kv_b64_decode("Zm9v!", 5, out, sizeof(out)), 3);
	assert_int_equal(kv_b64_decode("Zm9vMQ==", 8, out, sizeof(out)), 4);
	assert_int_equal(kv_b64_decode("foo", 3, out, sizeof(out)), 0);
	assert_int_equal(kv_b64_decode("====", 4, out, sizeof(out)), 0);
	assert_int_equal(kv_b64_encode((const uint8_t *)"foo1", 4, enc, sizeof(enc)), 8);
	assert_memory_equal(enc, "Zm9vMQ==", 8);
}

/* ---- the classic commands ---- */

static void test_storage(void **state)
{
	(void)state;
	expect("set a 5 0 3\r\nabc\r\nget a\r\n", "STORED\r\nVALUE a 5 3\r\nabc\r\nEND\r\n");
	expect("add a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nget a\r\n",
	       "STORED\r\nNOT_STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
	expect("replace a 0 0 1\r\nx\r\nset a 0 0 1\r\nx\r\nreplace a 1 0 1\r\ny\r\nget a\r\n",
	       "NOT_STORED\r\nSTORED\r\nSTORED\r\nVALUE a 1 1\r\ny\r\nEND\r\n");
	expect("append a 0 0 1\r\nx\r\nset a 7 0 2\r\nbc\r\nappend a 0 0 1\r\nd\r\n"
	       "prepend a 0 0 1\r\na\r\nget a\r\n",
	       "NOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE a 7 4\r\nabcd\r\nEND\r\n");
	/* binary-safe values, empty values, many keys, misses */
	EXPECT_LIT("set b 0 0 4\r\n\r\n\0\n\r\nset e 0 0 0\r\n\r\nget b e zz b\r\n",
		   "STORED\r\nSTORED\r\nVALUE b 0 4\r\n\r\n\0\n\r\nVALUE e 0 0\r\n\r\n"
		   "VALUE b 0 4\r\n\r\n\0\n\r\nEND\r\n");
	/* truncations memcached does: flags and lengths are longs cut to 32 bits */
	expect("set k 4294967297 0 1\r\nx\r\nget k\r\nset k 0 0 4294967296\r\n\r\nget k\r\n",
	       "STORED\r\nVALUE k 1 1\r\nx\r\nEND\r\nSTORED\r\nVALUE k 0 0\r\n\r\nEND\r\n");
	/* a bare '\n' ends a line too */
	expect("set k 0 0 1\nx\r\nget k\n", "STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n");
}

/* The cas unique of @key, read with gets on @v. */
static uint64_t cas_of(struct srv *v, const char *key)
{
	char cmd[300], *p;
	size_t before = v->olen;

	snprintf(cmd, sizeof(cmd), "gets %s\r\n", key);
	feed_split(v, cmd, strlen(cmd), SPLIT_WHOLE);
	assert_true(v->olen > before);
	p = strchr(v->out + before, '\r');
	assert_non_null(p);
	while (p > v->out + before && p[-1] != ' ')
		p--;
	return strtoull(p, NULL, 10);
}

static void test_cas(void **state)
{
	struct srv v;
	char cmd[200];
	uint64_t cas;

	(void)state;
	srv_open(&v, 1u << 20, 64u << 20, true, true);
	FEED(&v, "set c 0 0 1\r\nx\r\n", SPLIT_WHOLE);
	cas = cas_of(&v, "c");
	assert_true(cas != 0);
	v.olen = 0;
	snprintf(cmd, sizeof(cmd), "cas c 0 0 1 %llu\r\ny\r\ncas c 0 0 1 %llu\r\nz\r\n"
		 "cas nokey 0 0 1 5\r\nx\r\ncas c 0 0 1 abc\r\nx\r\ncas c 0 0 1\r\n",
		 (unsigned long long)cas, (unsigned long long)cas);
	feed_split(&v, cmd, strlen(cmd), SPLIT_BYTES);
	assert_string_equal(v.out, "STORED\r\nEXISTS\r\nNOT_FOUND\r\n"
				   "CLIENT_ERROR bad command line format\r\nERROR\r\nERROR\r\n");
	assert_true(cas_of(&v, "c") != cas);
	srv_close(&v);
}

static void test_arith(void **state)
{
	(void)state;
	/* decr stops at 0; incr wraps; a shorter result is padded as memcached does */
	expect("set n 0 0 2\r\n10\r\ndecr n 1\r\nget n\r\ndecr n 100\r\n",
	       "STORED\r\n9\r\nVALUE n 0 2\r\n9 \r\nEND\r\n0\r\n");
	expect("set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\nincr n 1\r\n",
	       "STORED\r\n1\r\n2\r\n");
	expect("set n 0 0 1\r\n9\r\nincr n 1\r\nget n\r\n",
	       "STORED\r\n10\r\nVALUE n 0 2\r\n10\r\nEND\r\n");
	expect("incr nx 1\r\nset t 0 0 2\r\nab\r\nincr t 1\r\nset e 0 0 0\r\n\r\nincr e 1\r\n"
	       "incr t -1\r\nincr t abc\r\nincr t\r\ndecr t 1 2 3\r\n",
	       "NOT_FOUND\r\nSTORED\r\n"
	       "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nSTORED\r\n"
	       "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
	       "CLIENT_ERROR invalid numeric delta argument\r\n"
	       "CLIENT_ERROR invalid numeric delta argument\r\nERROR\r\nERROR\r\n");
}

static void test_delete_touch(void **state)
{
	(void)state;
	expect("set n 0 0 1\r\n1\r\ndelete\r\ndelete n 0\r\ndelete n 1\r\ndelete n noreply\r\n"
	       "delete n 0 noreply\r\ndelete n 1 noreply\r\ndelete n x y\r\ndelete n x y z\r\n"
	       "delete n\r\n",
	       "STORED\r\nERROR\r\nDELETED\r\n"
	       "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
	       "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
	       "ERROR\r\nNOT_FOUND\r\n");
	expect("set n 0 0 1\r\n1\r\ngat 10\r\ngat\r\ngat x k\r\ngat 0 n\r\ntouch n\r\n"
	       "touch n abc\r\ntouch n 10\r\ntouch zz 10\r\ntouch n 10 noreply\r\ntouch n 10 x\r\n",
	       "STORED\r\nEND\r\nERROR\r\nCLIENT_ERROR invalid exptime argument\r\n"
	       "VALUE n 0 1\r\n1\r\nEND\r\nERROR\r\nCLIENT_ERROR invalid exptime argument\r\n"
	       "TOUCHED\r\nNOT_FOUND\r\nTOUCHED\r\n");
}

static void test_misc_commands(void **state)
{
	(void)state;
	expect("flush_all\r\nflush_all 0\r\nflush_all abc\r\nflush_all noreply\r\n"
	       "flush_all 10 noreply\r\nflush_all 1 2 3\r\nflush_all -1\r\nversion\r\n"
	       "verbosity\r\nverbosity 1\r\nverbosity x\r\nverbosity 1 noreply\r\n"
	       "verbosity 1 2\r\n",
	       "OK\r\nOK\r\nCLIENT_ERROR invalid exptime argument\r\nERROR\r\nOK\r\n"
	       "VERSION " KV_VERSION "\r\nERROR\r\nOK\r\nCLIENT_ERROR bad command line format\r\n"
	       "OK\r\n");
	expect("set a 0 0 1\r\n1\r\nflush_all\r\nget a\r\n", "STORED\r\nOK\r\nEND\r\n");
	expect("shutdown\r\nbget\r\nslabs\r\nxyz\r\nmx k\r\nmgx k\r\n",
	       "ERROR: shutdown not enabled\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\n");
	/* quit: nothing after it is read */
	expect_n("version\r\nquit\r\nversion\r\n", 24, "VERSION " KV_VERSION "\r\n", true);
}

static void test_bad_lines(void **state)
{
	(void)state;
	expect("\r\n\n \r\nx\r\nab\r\n", "ERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\n");
	expect("get\r\nget \r\ngets\r\nset k 0 0\r\nset k 0 0 1 noreply extra\r\nx\r\n",
	       "ERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\n");
	expect("set k 0 0 -1\r\nset k 0 x 1\r\nset k x 0 1\r\nset k 0 0 2147483646\r\n",
	       "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
	       "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n");
	/* a NUL ends the line as memcached's strlen() does */
	EXPECT_LIT("version\0junk\r\n", "VERSION " KV_VERSION "\r\n");
}

static void test_keys(void **state)
{
	char in[4096], want[4096];
	char key[252];

	(void)state;
	memset(key, 'k', 251);
	key[251] = '\0';
	snprintf(in, sizeof(in), "set %s 0 0 1\r\nx\r\nget %s\r\nget a %s\r\ntouch %s 1\r\n"
		 "incr %s 1\r\ndelete %s\r\nmg %s v\r\n", key, key, key, key, key, key, key);
	snprintf(want, sizeof(want), "CLIENT_ERROR bad command line format\r\nERROR\r\n"
		 "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
		 "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
		 "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n");
	expect(in, want);
	key[250] = '\0';      /* 250 is allowed */
	snprintf(in, sizeof(in), "set %s 0 0 1\r\nx\r\nget %s\r\n", key, key);
	snprintf(want, sizeof(want), "STORED\r\nVALUE %s 0 1\r\nx\r\nEND\r\n", key);
	expect(in, want);
	/* memcached's text keys may hold any byte but space, NUL and newline */
	expect("set a\tb\x80 0 0 1\r\nx\r\nget a\tb\x80\r\n",
	       "STORED\r\nVALUE a\tb\x80 0 1\r\nx\r\nEND\r\n");
}

/* ---- noreply, bad data, swallowing ---- */

static void test_noreply(void **state)
{
	(void)state;
	expect("set a 0 0 1 noreply\r\n1\r\nadd a 0 0 1 noreply\r\n2\r\nreplace a 0 0 1 noreply\r\n"
	       "3\r\nappend a 0 0 1 noreply\r\n4\r\nprepend a 0 0 1 noreply\r\n5\r\n"
	       "incr a 1 noreply\r\ndecr a 1 noreply\r\ntouch a 0 noreply\r\n"
	       "delete zz noreply\r\nincr zz 1 noreply\r\nflush_all 0 noreply\r\n"
	       "verbosity 0 noreply\r\nget a\r\n", "END\r\n");
	expect("set a 0 0 1 noreply\r\n1\r\nincr a 1 noreply\r\nget a\r\n",
	       "VALUE a 0 1\r\n2\r\nEND\r\n");
	/* errors found after noreply was seen are silent too, as in memcached */
	expect("set k 0 0 5 noreply\r\nabcdefg\r\nincr k x noreply\r\nset k 0 x 1 noreply\r\n",
	       "ERROR\r\n");
	/* cas with noreply: EXISTS and NOT_FOUND hidden as well */
	expect("cas a 0 0 1 1 noreply\r\nx\r\n", "");
}

static void test_bad_data_chunk(void **state)
{
	(void)state;
	/* the value's last two bytes are not CRLF: the error, and what follows is read as
	 * commands (here "\r\n", an empty line: ERROR) */
	expect("set k 0 0 5\r\nabcdefg\r\nget k\r\n",
	       "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n");
	expect("set k 0 0 1\r\nxy\r\n", "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
	expect("set k 0 0 1\r\nx\n\r\n", "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
	expect("ms k 3\r\nhi\r\nmn\r\n", "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
	/* the old value stays */
	expect("set k 0 0 1\r\na\r\nset k 0 0 1\r\nbc\r\nget k\r\n",
	       "STORED\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\nVALUE k 0 1\r\na\r\nEND\r\n");
}

/* A value over -I is swallowed whole (its length taken on trust) and the old one dropped. */
static void test_too_large(void **state)
{
	size_t big = (1u << 20) + 10, len;
	char *in = malloc(3 * big + 300);

	(void)state;
	assert_non_null(in);
	len = (size_t)sprintf(in, "set k 0 0 1\r\na\r\nset k 0 0 %zu\r\n", big);
	memset(in + len, 'v', big);
	len += big;
	len += (size_t)sprintf(in + len, "\r\nget k\r\nset k 0 0 %zu noreply\r\n", big);
	memset(in + len, 'w', big);
	len += big;
	len += (size_t)sprintf(in + len, "\r\nms k %zu T0\r\n", big);
	memset(in + len, 'x', big);
	len += big;
	len += (size_t)sprintf(in + len, "\r\nmn\r\n");
	expect_n(in, len, "STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\n"
		 "SERVER_ERROR object too large for cache\r\nMN\r\n", false);
	free(in);
}

/* A large value is copied into its item as it comes: feed() leaves nothing of it over. */
static void test_streaming(void **state)
{
	struct srv v;
	size_t n = 900000, seg = 1448, sent = 0;
	uint8_t *val = malloc(n);
	char line[64];

	(void)state;
	assert_non_null(val);
	for (size_t i = 0; i < n; i++)
		val[i] = (uint8_t)fp_test_rand(&seed_state);
	srv_open(&v, 1u << 20, 64u << 20, true, true);
	snprintf(line, sizeof(line), "set big 3 0 %zu\r\n", n);
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)line, strlen(line)), strlen(line));
	while (sent < n) {
		size_t k = n - sent < seg ? n - sent : seg;

		/* all of each segment consumed: nothing waits in the connection */
		assert_int_equal(kv_conn_feed(v.c, val + sent, k), k);
		sent += k;
	}
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)"\r\n", 2), 2);
	assert_string_equal(v.out, "STORED\r\n");
	v.olen = 0;
	FEED(&v, "get big\r\n", SPLIT_WHOLE);
	snprintf(line, sizeof(line), "VALUE big 3 %zu\r\n", n);
	assert_int_equal(v.olen, strlen(line) + n + 7);
	assert_memory_equal(v.out, line, strlen(line));
	assert_memory_equal(v.out + strlen(line), val, n);
	assert_memory_equal(v.out + strlen(line) + n, "\r\nEND\r\n", 7);
	srv_close(&v);
	free(val);
}

/* ---- framing, pipelining, closing ---- */

static void test_pipelined(void **state)
{
	char *in = malloc(64 * 1024), *want = malloc(64 * 1024);
	size_t il = 0, wl = 0;

	(void)state;
	assert_non_null(in);
	assert_non_null(want);
	for (int i = 0; i < 300; i++) {
		il += (size_t)sprintf(in + il, "set key%d %d 0 %d\r\n%.*s\r\nget key%d\r\n", i, i,
				      i % 7, i % 7, "0123456", i);
		wl += (size_t)sprintf(want + wl, "STORED\r\nVALUE key%d %d %d\r\n%.*s\r\nEND\r\n",
				      i, i, i % 7, i % 7, "0123456");
	}
	il += (size_t)sprintf(in + il, "mn\r\n");
	wl += (size_t)sprintf(want + wl, "MN\r\n");
	expect_n(in, il, want, false);
	free(in);
	free(want);
}

static void test_close(void **state)
{
	char *in = malloc(20000);

	(void)state;
	assert_non_null(in);
	/* what looks like HTTP: hang up (after every known command only) */
	expect_n("GET / HTTP/1.1\r\n", 16, "", true);
	expect("get / HTTP/1.1\r\n", "END\r\n");
	expect("set / 0 0 HTTP/1.1\r\n", "CLIENT_ERROR bad command line format\r\n");
	/* no newline within 2048 bytes: hang up, unless it is a get or gets */
	memset(in, 'x', 3000);
	expect_n(in, 3000, "", true);
	memcpy(in, "set ", 4);
	expect_n(in, 3000, "", true);
	memcpy(in, "get ", 4);
	for (int i = 4; i < 3000; i += 2)
		in[i + 1] = ' ';
	memcpy(in + 2998, "\r\n", 2);
	expect_n(in, 3000, "END\r\n", false);
	memcpy(in, " gets ", 6);
	expect_n(in, 3000, "END\r\n", false);
	memset(in, ' ', 101);
	memcpy(in + 101, "get ", 4);
	expect_n(in, 3000, "", true);
	free(in);
}

/* Fed whole, as memcached reads a packet: a line of 2-16 KiB with its newline is served,
 * and the unwritten answers of the batch are dropped with an over-long get key or a close. */
static void test_whole_reads(void **state)
{
	struct srv v;
	char *in = malloc(20000);
	size_t n;

	(void)state;
	assert_non_null(in);
	srv_open(&v, 1u << 20, 64u << 20, false, true);
	n = (size_t)sprintf(in, "set ");
	memset(in + n, 'x', 3000);
	n += 3000;
	n += (size_t)sprintf(in + n, " 0 0 1\r\nx\r\n");
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)in, n), n);
	assert_string_equal(v.out, "CLIENT_ERROR bad command line format\r\nERROR\r\n");
	v.olen = 0;
	n = (size_t)sprintf(in, "set a 0 0 1\r\n1\r\nget a ");
	memset(in + n, 'b', 251);
	n += 251;
	n += (size_t)sprintf(in + n, "\r\n");
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)in, n), n);
	assert_string_equal(v.out, "CLIENT_ERROR bad command line format\r\n");
	v.olen = 0;
	n = (size_t)sprintf(in, "version\r\nGET / HTTP/1.0\r\n");
	kv_conn_feed(v.c, (const uint8_t *)in, n);
	assert_true(kv_conn_closing(v.c));
	assert_int_equal(v.olen, 0);
	srv_close(&v);
	free(in);
}

/* ---- output back-pressure ---- */

/* A multiget meets a full output: it stops before a lookup (the line stays unconsumed),
 * and once the output has drained the same bytes finish it; the answer is unchanged. */
static void test_backpressure(void **state)
{
	struct srv v;
	char *in = malloc(4096), *val = malloc(5000);
	size_t n = 0, left, rounds = 0;
	const char *tail = "get k0 k1 k2 k3 k4 k5 k6 k7 k8 k9\r\nversion\r\n";
	char *want_all;

	(void)state;
	assert_non_null(in);
	assert_non_null(val);
	memset(val, 'v', 5000);
	srv_open(&v, 16384, 64u << 20, true, true);
	for (int i = 0; i < 10; i++) {
		n = (size_t)snprintf(in, 4096, "set k%d 0 0 5000\r\n", i);
		kv_conn_feed(v.c, (const uint8_t *)in, n);
		kv_conn_feed(v.c, (const uint8_t *)val, 5000);
		kv_conn_feed(v.c, (const uint8_t *)"\r\n", 2);
	}
	v.olen = 0;
	/* the whole answer, with room to spare */
	feed_split(&v, tail, strlen(tail), SPLIT_WHOLE);
	want_all = strdup(v.out);
	v.olen = 0;
	left = strlen(tail);
	/* room for about two values per round (reserve: -I + 2 KiB) */
	while (left && rounds++ < 100) {
		size_t used;

		v.room = 16384 + 2048 + 11000;
		used = kv_conn_feed(v.c, (const uint8_t *)tail + strlen(tail) - left, left);
		if (used < left)
			assert_true(kv_conn_blocked(v.c));
		left -= used;
		kv_store_quiesce(v.s, 0);
	}
	assert_int_equal(left, 0);
	assert_true(rounds > 3);
	assert_string_equal(v.out, want_all);
	free(want_all);
	srv_close(&v);
	free(in);
	free(val);
}

/* ---- meta commands ---- */

static void test_meta_get(void **state)
{
	(void)state;
	expect("mn\r\nmg\r\nmg k\r\nmx k\r\nme k\r\nset mk 5 0 3\r\nabc\r\nmg mk v k f s t\r\n"
	       "mg mk\r\nmg mk q\r\nmg nokey q\r\nmg nokey k O123\r\nmn\r\n",
	       "MN\r\nERROR\r\nEN\r\nERROR\r\nEN\r\nSTORED\r\nVA 3 kmk f5 s3 t-1\r\nabc\r\n"
	       "HD\r\nHD\r\nEN knokey O123\r\nMN\r\n");
	expect("ms a 1\r\nx\r\nmg a O123456789012345678901234567890123\r\n"
	       "mg a O12345678901234567890123456789012\r\nmg a a\r\nmg a v v\r\n"
	       "mg a 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\r\n"
	       "mg a 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\r\nmg a Tx\r\nmg a\x80\r\n"
	       "mg a q q\r\nmg a \x80\r\n",
	       "HD\r\nCLIENT_ERROR opaque token too long\r\nCLIENT_ERROR opaque token too long\r\n"
	       "CLIENT_ERROR invalid flag\r\nCLIENT_ERROR duplicate flag\r\n"
	       "CLIENT_ERROR options flags are too long\r\nCLIENT_ERROR invalid flag\r\n"
	       "CLIENT_ERROR bad token in command line format\r\nEN\r\n"
	       "CLIENT_ERROR duplicate flag\r\nCLIENT_ERROR duplicate flag\r\n");
	/* T sets the TTL, t reads it; h and l read the state before this fetch */
	expect("ms a 2 T100\r\nhi\r\nmg a t\r\nmg a T30 t\r\nmg a h\r\nmg a h l\r\n"
	       "ms b 2\r\nhi\r\nmg b h\r\nmg b h\r\nmg b t T30 t\r\n",
	       "HD\r\nHD t100\r\nHD t30\r\nHD h1\r\nHD h1 l0\r\nHD\r\nHD h0\r\nHD h1\r\n"
	       "CLIENT_ERROR duplicate flag\r\n");
	/* base64 keys */
	expect("ms Zm9v 2 b\r\nhi\r\nmg Zm9v b v k\r\nget foo\r\nmg Zm9v! b\r\nmg foo k b\r\n"
	       "mg Zm9v b k O1 q\r\nmg Zm9vMQ== b k\r\n",
	       "HD\r\nVA 2 kZm9v b\r\nhi\r\nVALUE foo 0 2\r\nhi\r\nEND\r\nHD\r\n"
	       "CLIENT_ERROR error decoding key\r\nHD kZm9v b O1\r\nEN kZm9vMQ== b\r\n");
}

static void test_meta_set(void **state)
{
	(void)state;
	expect("ms a\r\nms a 2\r\nhi\r\nms a 2 T0 F3 k O9\r\nhi\r\nms a 2 q\r\nhi\r\n"
	       "ms a 2 MX\r\nhi\r\nms a 2 MEE\r\nhi\r\nms a 2 ME\r\nhi\r\nms a abc\r\nms a -1\r\n"
	       "ms a 2 x\r\nhi\r\nms a 2 c c\r\nhi\r\nms a 2 Fx\r\nhi\r\nms a 2 C1\r\nhi\r\n"
	       "ms zz 2 C1\r\nhi\r\nmg a f v\r\n",
	       "CLIENT_ERROR bad command line format\r\nHD\r\nHD ka O9\r\n"
	       "CLIENT_ERROR invalid mode for ms M token\r\n"
	       "CLIENT_ERROR incorrect length for M token\r\nNS\r\n"
	       "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
	       "CLIENT_ERROR invalid flag\r\nCLIENT_ERROR duplicate flag\r\n"
	       "CLIENT_ERROR bad command line format\r\nEX\r\nNF\r\nVA 2 f0\r\nhi\r\n");
	expect("ms a 2\r\nhi\r\nms a 1 MA\r\nb\r\nmg a v\r\nms a 1 MP\r\nc\r\nmg a v\r\n"
	       "ms nn 1 MA\r\nb\r\nms nn 1 MR\r\nb\r\nms nn 1 ME\r\nb\r\nms nn 1 ME q\r\nc\r\n"
	       "mg nn v\r\n",
	       "HD\r\nHD\r\nVA 3\r\nhib\r\nHD\r\nVA 4\r\nchib\r\nNS\r\nNS\r\nHD\r\nNS\r\n"
	       "VA 1\r\nb\r\n");
	/* a failed store reports c0 */
	expect("ms a 1\r\nx\r\nms a 1 ME c\r\ny\r\nms b 1 MX c\r\nx\r\n",
	       "HD\r\nNS c0\r\nCLIENT_ERROR invalid mode for ms M token\r\n");
}

static void test_meta_delete_arith(void **state)
{
	(void)state;
	expect("ms a 2\r\nhi\r\nmd a\r\nmd a\r\nmd a q\r\nms a 2\r\nhi\r\nmd a q\r\nmd a C1\r\n"
	       "md a x\r\nmd a O1 k\r\nms a 2\r\nhi\r\nmd a I T30\r\nmg a v t\r\nmg a v\r\n"
	       "mg a v\r\nmn\r\n",
	       "HD\r\nHD\r\nNF\r\nNF\r\nHD\r\nNF\r\nCLIENT_ERROR invalid or duplicate flag\r\n"
	       "NF O1 ka\r\nHD\r\nHD\r\nVA 2 t30 X W\r\nhi\r\nVA 2 Z X\r\nhi\r\nVA 2 Z X\r\nhi\r\n"
	       "MN\r\n");
	expect("ma x\r\nma x N0 J5\r\nma x\r\nma x v\r\nma x MD D10 v\r\nma x MZ\r\nma x D-1\r\n"
	       "ma x Dabc\r\nma x Jabc\r\nma x q\r\nma y q\r\nma x v t k O5\r\nms s 1\r\na\r\n"
	       "ma s\r\nmn\r\n",
	       "NF\r\nHD\r\nHD\r\nVA 1\r\n7\r\nVA 1\r\n0\r\n"
	       "CLIENT_ERROR invalid mode for ma M token\r\n"
	       "CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\n"
	       "CLIENT_ERROR invalid or duplicate flag\r\nNF\r\nVA 1 t-1 kx O5\r\n2\r\nHD\r\n"
	       "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nMN\r\n");
	/* a miss with N: vivified with a win token; the next fetcher sees Z */
	expect("mg v N30 s v t\r\nmg v s\r\nmg v N30 t\r\nmg w t N30\r\n",
	       "VA 0 s0 t30 W\r\n\r\nHD s0 Z\r\nHD t30 Z\r\nHD t-1 W\r\n");
}

/* ---- stats ---- */

static void test_stats(void **state)
{
	struct srv v;

	(void)state;
	srv_open(&v, 1u << 20, 64u << 20, true, true);
	FEED(&v, "set a 0 0 1\r\n1\r\nget a b\r\nstats\r\n", SPLIT_BYTES);
	assert_non_null(strstr(v.out, "\r\nSTAT pid "));
	assert_non_null(strstr(v.out, "STAT version " KV_VERSION "\r\n"));
	assert_non_null(strstr(v.out, "STAT cmd_get 2\r\n"));
	assert_non_null(strstr(v.out, "STAT get_hits 1\r\n"));
	assert_non_null(strstr(v.out, "STAT get_misses 1\r\n"));
	assert_non_null(strstr(v.out, "STAT curr_items 1\r\n"));
	assert_non_null(strstr(v.out, "STAT limit_maxbytes 67108864\r\n"));
	assert_string_equal(v.out + v.olen - 5, "END\r\n");
	v.olen = 0;
	FEED(&v, "stats settings\r\n", SPLIT_WHOLE);
	assert_non_null(strstr(v.out, "STAT item_size_max 1048576\r\n"));
	assert_non_null(strstr(v.out, "STAT cas_enabled yes\r\n"));
	assert_string_equal(v.out + v.olen - 5, "END\r\n");
	v.olen = 0;
	FEED(&v, "stats items\r\nstats slabs\r\nstats sizes\r\n", SPLIT_WHOLE);
	assert_non_null(strstr(v.out, "STAT sizes_status disabled\r\nEND\r\n"));
	v.olen = 0;
	FEED(&v, "stats foo\r\nstats reset\r\nstats detail\r\nstats detail on\r\n"
		   "stats detail dump\r\nstats cachedump 1\r\nstats cachedump x 1\r\n", SPLIT_WHOLE);
	assert_string_equal(v.out, "ERROR\r\nRESET\r\nCLIENT_ERROR usage: stats detail on|off|dump\r\n"
			    "OK\r\nEND\r\nCLIENT_ERROR bad command line\r\n"
			    "CLIENT_ERROR bad command line format\r\n");
	v.olen = 0;
	kv_conn_set_peer(v.c, 0x0a000002, 4242);
	FEED(&v, "stats conns\r\n", SPLIT_BYTES);
	assert_string_equal(v.out, "STAT 0:addr tcp:0.0.0.0:11211\r\nSTAT 0:state conn_listening\r\n"
			    "STAT 0:secs_since_last_cmd 1000\r\n"
			    "STAT 1:addr tcp:10.0.0.2:4242\r\nSTAT 1:listen_addr tcp:0.0.0.0:11211\r\n"
			    "STAT 1:state conn_parse_cmd\r\nSTAT 1:secs_since_last_cmd 0\r\nEND\r\n");
	/* detail is on now: per prefix, in memcached's order (see 87_detail.txt) */
	v.olen = 0;
	FEED(&v, "set a:1 0 0 1\r\nx\r\nget a:1 a:2 b:1 c\r\ndelete b:9\r\nstats detail dump\r\n"
		   "stats reset\r\nstats detail dump\r\n", SPLIT_BYTES);
	assert_string_equal(v.out, "STORED\r\nVALUE a:1 0 1\r\nx\r\nEND\r\nNOT_FOUND\r\n"
			    "PREFIX b get 1 hit 0 set 0 del 1\r\n"
			    "PREFIX a get 2 hit 1 set 1 del 0\r\nEND\r\nRESET\r\nEND\r\n");
	srv_close(&v);
}

/* ---- time ---- */

static void test_expiry(void **state)
{
	struct srv v;

	(void)state;
	srv_open(&v, 1u << 20, 64u << 20, true, true);
	FEED(&v, "set a 0 10 1\r\n1\r\nset b 0 -1 1\r\n2\r\nset c 0 0 1\r\n3\r\n"
		   "touch c 5\r\nget a b c\r\n", SPLIT_WHOLE);
	assert_string_equal(v.out, "STORED\r\nSTORED\r\nSTORED\r\nTOUCHED\r\n"
			    "VALUE a 0 1\r\n1\r\nVALUE c 0 1\r\n3\r\nEND\r\n");
	v.olen = 0;
	kv_store_set_clock(v.s, T_START + 6, 1700000000ull);
	FEED(&v, "get a c\r\nflush_all 10\r\nget a\r\n", SPLIT_WHOLE);
	assert_string_equal(v.out, "VALUE a 0 1\r\n1\r\nEND\r\nOK\r\nVALUE a 0 1\r\n1\r\nEND\r\n");
	v.olen = 0;
	kv_store_set_clock(v.s, T_START + 20, 1700000000ull);
	FEED(&v, "get a\r\n", SPLIT_WHOLE);
	assert_string_equal(v.out, "END\r\n");
	srv_close(&v);
}

static int group_setup(void **state)
{
	(void)state;
	seed_state = fp_test_seed();
	return 0;
}

/* Issue 16, item 18: a get line over KV_GET_LINE_MAX (7,000 keys of 200 bytes, 1.4 MB) is
 * answered whole, in order, however it is cut and however little output room there is
 * at a time; END once, at the end; then the connection goes on. The sets before it are
 * noreply: the get must answer all the same (a bug this test found). */
static void test_huge_multiget(void **state)
{
	enum { NK = 7000, KLEN = 200 };
	static char line[NK * (KLEN + 1) + 16], want[NK / 7 * (KLEN + 40) + 64];
	size_t ll = 0, wl = 0;
	struct feeder f = { 0 };
	struct srv v;
	char key[KLEN + 1];
	(void)state;

	srv_open(&v, 4096, 64u << 20, true, true);
	ll += (size_t)sprintf(line, "get");
	for (unsigned i = 0; i < NK; i++) {
		snprintf(key, sizeof(key), "k%06u%0193u", i, 0);
		ll += (size_t)sprintf(line + ll, " %s", key);
		if (i % 7 == 0) {
			char set[KLEN + 64];
			int n = snprintf(set, sizeof(set), "set %s 0 0 5 noreply\r\nv%04u\r\n", key, i % 10000);
			feeder_push(&v, &f, (const uint8_t *)set, (size_t)n);
			wl += (size_t)sprintf(want + wl, "VALUE %s 0 5\r\nv%04u\r\n", key, i % 10000);
		}
	}
	ll += (size_t)sprintf(line + ll, "\r\nversion\r\n");
	wl += (size_t)sprintf(want + wl, "END\r\nVERSION 1.6.18\r\n");
	assert_true(ll > KV_GET_LINE_MAX + 100000);
	v.olen = 0;
	for (size_t pos = 0; pos < ll;) {
		size_t n = 1 + (size_t)fp_test_below(&seed_state, 65536);

		if (n > ll - pos)
			n = ll - pos;
		v.room = 20000 + (size_t)fp_test_below(&seed_state, 20000);  /* a few values */
		feeder_push(&v, &f, (const uint8_t *)line + pos, n);
		pos += n;
	}
	for (int i = 0; i < 100000 && f.len; i++) {     /* the output drains: shown again */
		v.room = 20000;
		feeder_push(&v, &f, NULL, 0);
	}
	assert_false(kv_conn_closing(v.c));
	assert_int_equal(f.len, 0);
	assert_int_equal(v.olen, wl);
	assert_memory_equal(v.out, want, wl);
	free(f.buf);
	srv_close(&v);
}

/* ---- --sched steal: a read run by another worker (kv_conn_visit) ---- */

static bool busy_now;
static bool t_busy(void *arg) { (void)arg; return busy_now; }

/* One read of a worker-0 connection runs on worker 1: the store's reader slot, the
 * counters and the shared stage are worker 1's for the read, and the connection is worker
 * 0's again after it (its count of connections never moved). A log watcher whose read
 * runs elsewhere (busy) is not written to by its worker's drain until it is back. */
static void test_a_read_on_another_worker(void **state)
{
	struct kv_store_config cfg = {
		.mem_limit = 64u << 20, .item_max = 1u << 20, .growth_factor = 1.25,
		.chunk_min = 48, .n_workers = 2, .use_cas = true, .evict = true,
	};
	struct kv_settings set = {
		.maxbytes = 64u << 20, .maxconns = 1024, .tcpport = 11211, .factor = 1.25,
		.chunk_size = 48, .num_threads = 2, .use_cas = true, .evict = true,
		.item_size_max = 1u << 20, .flush_enabled = true,
	};
	struct srv v = { .room = SIZE_MAX }, wv = { .room = SIZE_MAX };
	struct kv_out out = { t_write, t_room, &v, NULL }, wout = { t_write, t_room, &wv, t_busy };
	const char *req = "set a 0 0 1\r\nx\r\nget a\r\n";
	struct kv_conn *watcher;
	char err[256];

	(void)state;
	v.s = kv_store_create(&cfg, err, sizeof(err));
	if (!v.s)
		fail_msg("kv_store_create: %s", err);
	assert_int_equal(kv_proto_init(&v.p, v.s, &set, 2), 0);
	v.c = kv_conn_new(&v.p, 0, &out);
	watcher = kv_conn_new(&v.p, 0, &wout);
	assert_non_null(v.c);
	assert_non_null(watcher);
	assert_int_equal(kv_conn_feed(watcher, (const uint8_t *)"watch mutations\r\n", 17), 17);

	kv_conn_visit(v.c, 1);
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)req, strlen(req)), strlen(req));
	kv_conn_visit_end(v.c);
	assert_int_equal(v.olen, strlen("STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n"));
	assert_memory_equal(v.out, "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n", v.olen);
	assert_int_equal(v.p.ws[1].cmd_set, 1);     /* counted where it ran */
	assert_int_equal(v.p.ws[0].cmd_set, 0);
	assert_int_equal(v.p.ws[0].curr_conns, 2);  /* still worker 0's */
	assert_int_equal(v.p.ws[1].curr_conns, 0);
	assert_true(v.c->w == 0 && v.c->home == 0);
	assert_ptr_equal(v.c->stage, &v.p.wx[0].stage);

	wv.olen = 0;
	busy_now = true;                            /* the watcher's read is out */
	kv_watch_drain(&v.p, 0);
	assert_int_equal(wv.olen, 0);
	busy_now = false;
	kv_watch_drain(&v.p, 1);                    /* not worker 1's to drain */
	assert_int_equal(wv.olen, 0);
	kv_watch_drain(&v.p, 0);
	assert_non_null(wv.out);
	assert_non_null(strstr(wv.out, "key=a status=stored cmd=set"));

	kv_conn_free(watcher);
	kv_conn_free(v.c);
	kv_proto_fini(&v.p);
	kv_store_destroy(v.s);
	free(v.out);
	free(wv.out);
}

/* ---- watch: a watcher gets other connections' events once its worker drains ---- */

static void test_watch(void **state)
{
	struct srv v, other = { .room = SIZE_MAX };
	struct kv_out out = { t_write, t_room, &other, NULL };
	struct kv_conn *b;
	const char *l1, *l2;

	(void)state;
	/* what follows watch in the same read is ignored too, however the read is cut */
	expect("watch\r\nversion\r\nset k 0 0 1\r\nx\r\n", "OK\r\n");
	srv_open(&v, 1u << 20, 64u << 20, true, true);
	FEED(&v, "watch mutations rawcmds\r\n", SPLIT_WHOLE);
	assert_string_equal(v.out, "OK\r\n");
	b = kv_conn_new(&v.p, 0, &out);
	assert_non_null(b);
	assert_int_equal(kv_conn_feed(b, (const uint8_t *)"set k%1 0 0 1\r\nx\r\n", 18), 18);
	assert_string_equal(other.out, "STORED\r\n");
	/* the watcher's own input is ignored */
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)"get k\r\n", 7), 7);
	v.olen = 0;
	kv_watch_drain(&v.p, 0);
	assert_non_null(v.out);
	l1 = strstr(v.out, " <2 set k%1 0 0 1\n");
	l2 = strstr(v.out, " type=item_store key=k%251 status=stored cmd=set ttl=0 clsid=1 cfd=2 size=1\n");
	assert_non_null(l1);
	assert_non_null(l2);
	assert_true(l1 < l2);
	assert_int_equal(strncmp(v.out, "ts=", 3), 0);
	kv_conn_free(b);
	free(other.out);
	srv_close(&v);
}

/* stats conns shows another connection's state as its last read left it (kv_conn.shown,
 * the one field of it another worker reads): reading a value, swallowing one too large,
 * ending, or between requests. */
static void test_stats_conns_states(void **state)
{
	struct srv v, other = { .room = SIZE_MAX };
	struct kv_out out = { t_write, t_room, &other, NULL };
	struct kv_conn *b, *d, *e;

	(void)state;
	srv_open(&v, 1024, 64u << 20, true, true);
	b = kv_conn_new(&v.p, 0, &out);
	d = kv_conn_new(&v.p, 0, &out);
	e = kv_conn_new(&v.p, 0, &out);
	assert_non_null(b);
	assert_non_null(d);
	assert_non_null(e);
	assert_int_equal(kv_conn_feed(b, (const uint8_t *)"set k 0 0 10\r\nabc", 18), 18);
	assert_int_equal(kv_conn_feed(d, (const uint8_t *)"set big 0 0 5000\r\nxy", 21), 21);
	assert_int_equal(kv_conn_feed(e, (const uint8_t *)"quit\r\n", 6), 6);
	assert_true(kv_conn_closing(e));
	FEED(&v, "stats conns\r\n", SPLIT_WHOLE);
	assert_non_null(strstr(v.out, "STAT 1:state conn_parse_cmd\r\n"));   /* the asker */
	assert_non_null(strstr(v.out, "STAT 2:state conn_nread\r\n"));
	assert_non_null(strstr(v.out, "STAT 3:state conn_swallow\r\n"));
	assert_non_null(strstr(v.out, "STAT 4:state conn_closing\r\n"));
	/* the value completes: between requests again */
	assert_int_equal(kv_conn_feed(b, (const uint8_t *)"defghij\r\n", 9), 9);
	v.olen = 0;
	FEED(&v, "stats conns\r\n", SPLIT_WHOLE);
	assert_non_null(strstr(v.out, "STAT 2:state conn_read\r\n"));
	kv_conn_free(b);
	kv_conn_free(d);
	kv_conn_free(e);
	free(other.out);
	srv_close(&v);
}

/* ---- the binary protocol (answers as memcached 1.6.18's: tests/integration/test_kv_binary.py) ---- */

struct bbuf {
	char b[8192];
	size_t n;
};

static void put_be(struct bbuf *o, uint64_t v, int bytes)
{
	while (bytes--)
		o->b[o->n++] = (char)(v >> (8 * bytes));
}

/* A request or (@magic 0x81) an answer: header, extras, key, @nv bytes of value. */
static void bpkt(struct bbuf *o, uint8_t magic, uint8_t op, uint16_t status, uint32_t opaque,
		 uint64_t cas, const char *ext, size_t next, const char *key, const char *val,
		 size_t nv)
{
	size_t nk = key ? strlen(key) : 0;

	put_be(o, magic, 1);
	put_be(o, op, 1);
	put_be(o, nk, 2);
	put_be(o, next, 1);
	put_be(o, 0, 1);
	put_be(o, status, 2);
	put_be(o, next + nk + nv, 4);
	put_be(o, opaque, 4);
	put_be(o, cas, 8);
	if (next)
		memcpy(o->b + o->n, ext, next);
	o->n += next;
	if (nk)
		memcpy(o->b + o->n, key, nk);
	o->n += nk;
	if (nv)
		memcpy(o->b + o->n, val, nv);
	o->n += nv;
}

#define V(lit) lit, sizeof(lit) - 1
#define NOV NULL, 0

static void test_binary(void **state)
{
	struct bbuf in = { .n = 0 }, want = { .n = 0 };
	static const char set_ext[8] = { 0, 0, 0, 5, 0, 0, 0, 0 };         /* flags 5, no expiry */
	static const char flags5[4] = { 0, 0, 0, 5 };
	static const char incr_ext[20] = { 0, 0, 0, 0, 0, 0, 0, 1,  0, 0, 0, 0, 0, 0, 0, 7 };
	static const char seven[8] = { 0, 0, 0, 0, 0, 0, 0, 7 };
	struct srv v;

	(void)state;
	bpkt(&in, 0x80, 0x01, 0, 1, 0, set_ext, 8, "k", V("hello"));  /* set */
	bpkt(&want, 0x81, 0x01, 0, 1, 1, NULL, 0, NULL, NOV);
	bpkt(&in, 0x80, 0x09, 0, 2, 0, NULL, 0, "k", NOV);  /* getq: a hit */
	bpkt(&want, 0x81, 0x09, 0, 2, 1, flags5, 4, NULL, V("hello"));
	bpkt(&in, 0x80, 0x0d, 0, 3, 0, NULL, 0, "x", NOV);  /* getkq: a miss */
	bpkt(&in, 0x80, 0x11, 0, 4, 0, set_ext, 8, "q", V("v"));  /* setq: silent */
	bpkt(&in, 0x80, 0x14, 0, 5, 0, NULL, 0, "x", NOV);  /* deleteq: error */
	bpkt(&want, 0x81, 0x14, 1, 5, 0, NULL, 0, NULL, V("Not found"));
	bpkt(&in, 0x80, 0x05, 0, 6, 0, incr_ext, 20, "n", NOV);  /* incr: created */
	bpkt(&want, 0x81, 0x05, 0, 6, 3, NULL, 0, NULL, seven, 8);
	bpkt(&in, 0x80, 0x0c, 0, 7, 0, NULL, 0, "q", NOV);  /* getk */
	bpkt(&want, 0x81, 0x0c, 0, 7, 2, flags5, 4, "q", V("v"));
	bpkt(&in, 0x80, 0x0a, 0, 8, 0, NULL, 0, NULL, NOV);  /* noop */
	bpkt(&want, 0x81, 0x0a, 0, 8, 0, NULL, 0, NULL, NOV);
	expect_b(in.b, in.n, want.b, want.n, false);

	/* a header without the magic, after a good request: closed without a word */
	in.n = want.n = 0;
	bpkt(&in, 0x80, 0x0a, 0, 1, 0, NULL, 0, NULL, NOV);
	bpkt(&want, 0x81, 0x0a, 0, 1, 0, NULL, 0, NULL, NOV);
	bpkt(&in, 0x81, 0x0a, 0, 2, 0, NULL, 0, NULL, NOV);
	expect_b(in.b, in.n, want.b, want.n, true);

	/* a get waits for room for its value, then answers */
	srv_open(&v, 16384, 64u << 20, true, true);
	in.n = 0;
	bpkt(&in, 0x80, 0x00, 0, 1, 0, NULL, 0, "k", NOV);
	v.room = 100;
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)in.b, in.n), 0);
	assert_true(kv_conn_blocked(v.c));
	v.room = SIZE_MAX;
	assert_int_equal(kv_conn_feed(v.c, (const uint8_t *)in.b, in.n), in.n);
	assert_int_equal(v.olen, 24 + 9);   /* Not found */
	srv_close(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_huge_multiget),
		cmocka_unit_test(test_binary),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_stats_conns_states),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_tokenize),
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_storage),
		cmocka_unit_test(test_cas),
		cmocka_unit_test(test_arith),
		cmocka_unit_test(test_delete_touch),
		cmocka_unit_test(test_misc_commands),
		cmocka_unit_test(test_bad_lines),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_noreply),
		cmocka_unit_test(test_bad_data_chunk),
		cmocka_unit_test(test_too_large),
		cmocka_unit_test(test_streaming),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_close),
		cmocka_unit_test(test_whole_reads),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_meta_get),
		cmocka_unit_test(test_meta_set),
		cmocka_unit_test(test_meta_delete_arith),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_a_read_on_another_worker),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
