/* fuzz_kv_proto.c: fp-kv's protocol on arbitrary bytes, whole and in random splits, over a small real store. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/*
 * Each input runs twice on fresh servers (-m 2, -I 64k, split_stable): once fed whole with
 * an unlimited output, once cut at random places (the first 8 bytes seed the cuts) with an
 * output whose room is small and refilled between rounds, as a slow reader would. Checked:
 * no crash or sanitizer report, the store never holds more than -m, and both runs answer
 * the same bytes and agree on closing. The feeder keeps evl's contract: what feed() leaves
 * is shown again, with the next piece appended, and a blocked connection is shown its
 * bytes again once the output has room.
 */

#define MEM_LIMIT   (2u << 20)
#define ITEM_MAX    (64u << 10)
#define ROOM_CAP    (ITEM_MAX + KV_RESP_RESERVE + 70000)   /* as evl's max_pending */

struct run {
	struct kv_store *s;
	struct kv_proto p;
	struct kv_conn *c;
	uint8_t *out;
	size_t olen, ocap, room;
	uint64_t rng;
	bool limited;
};

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int w_write(void *arg, const struct iovec *iov, unsigned n)
{
	struct run *r = arg;
	size_t total = 0;

	for (unsigned i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (r->limited && total > r->room)
		abort();                         /* proto checks room before it stages */
	if (r->olen + total > r->ocap) {
		r->ocap = (r->olen + total) * 2;
		if (!(r->out = realloc(r->out, r->ocap)))
			abort();
	}
	for (unsigned i = 0; i < n; i++) {
		memcpy(r->out + r->olen, iov[i].iov_base, iov[i].iov_len);
		r->olen += iov[i].iov_len;
	}
	if (r->limited)
		r->room -= total;
	return 0;
}

static size_t w_room(void *arg)
{
	struct run *r = arg;

	return r->limited ? r->room : SIZE_MAX / 2;
}

static void run_open(struct run *r, bool limited, uint64_t seed)
{
	struct kv_store_config cfg = {
		.mem_limit = MEM_LIMIT, .item_max = ITEM_MAX, .growth_factor = 1.25,
		.chunk_min = 48, .n_workers = 1, .use_cas = true, .evict = true,
	};
	struct kv_settings set = {
		.maxbytes = MEM_LIMIT, .maxconns = 16, .tcpport = 11211, .factor = 1.25,
		.chunk_size = 48, .num_threads = 1, .use_cas = true, .evict = true,
		.item_size_max = ITEM_MAX, .flush_enabled = true, .split_stable = true,
	};
	struct kv_out out = { w_write, w_room, r, NULL };
	char err[256];

	memset(r, 0, sizeof(*r));
	r->limited = limited;
	r->room = ROOM_CAP;
	r->rng = seed;
	if (!(r->s = kv_store_create(&cfg, err, sizeof(err)))) {
		fprintf(stderr, "kv_store_create: %s\n", err);
		abort();
	}
	kv_store_set_clock(r->s, 1000, 1700000000ull);
	if (kv_proto_init(&r->p, r->s, &set, 1) || !(r->c = kv_conn_new(&r->p, 0, &out)))
		abort();
}

static void run_check_memory(struct run *r)
{
	struct kv_store_stats st;

	kv_store_stats(r->s, &st);
	if (st.bytes > MEM_LIMIT)
		abort();
}

/* One round: feed what is pending; a blocked connection waits for the output to drain. */
static size_t round_feed(struct run *r, const uint8_t *d, size_t len)
{
	size_t used;

	if (r->limited) {
		/* the output drained some since: room only grows between rounds */
		r->room += (size_t)(rnd(&r->rng) % 40000);
		if (r->room > ROOM_CAP)
			r->room = ROOM_CAP;
	}
	used = kv_conn_feed(r->c, d, len);
	if (used > len)
		abort();
	kv_store_quiesce(r->s, 0);
	run_check_memory(r);
	return used;
}

static void run_feed(struct run *r, const uint8_t *d, size_t n, bool split)
{
	uint8_t *pend = malloc(n + 1);
	size_t pl = 0, pos = 0, used;

	if (!pend)
		abort();
	while (pos < n && !kv_conn_closing(r->c)) {
		size_t k = split ? 1 + (size_t)(rnd(&r->rng) % 300) : n - pos;

		if (k > n - pos)
			k = n - pos;
		memcpy(pend + pl, d + pos, k);
		pl += k;
		pos += k;
		used = round_feed(r, pend, pl);
		/* blocked for room: shown again once drained, until it stops progressing */
		for (int i = 0; i < 1000 && kv_conn_blocked(r->c) && used < pl; i++) {
			memmove(pend, pend + used, pl - used);
			pl -= used;
			used = round_feed(r, pend, pl);
		}
		memmove(pend, pend + used, pl - used);
		pl -= used;
	}
	free(pend);
}

static void run_close(struct run *r)
{
	kv_conn_free(r->c);
	kv_proto_fini(&r->p);
	kv_store_destroy(r->s);
	free(r->out);
}

/* Stats values (rusage, byte counts) vary from run to run: keep their names only. Values
 * that happen to hold "STAT " lines are cut the same way in both runs. */
static size_t strip_stat_values(uint8_t *p, size_t n)
{
	size_t in = 0, out = 0;

	while (in < n) {
		bool stat = (in == 0 || p[in - 1] == '\n') && n - in >= 5 && !memcmp(p + in, "STAT ", 5);
		uint8_t *sp = stat ? memchr(p + in + 5, ' ', n - in - 5) : NULL;
		uint8_t *nl = sp ? memchr(sp, '\n', n - (size_t)(sp - p)) : NULL;

		if (!nl) {
			p[out++] = p[in++];
			continue;
		}
		memmove(p + out, p + in, (size_t)(sp - (p + in)));
		out += (size_t)(sp - (p + in));
		in = (size_t)(nl - p) + 1;
		p[out++] = '\n';
	}
	return out;
}

/* The same for a binary connection's answers: a STAT answer keeps its name (bodylen set
 * to the key's length). */
static size_t strip_bin_stat_values(uint8_t *p, size_t n)
{
	size_t in = 0, out = 0;

	while (n - in >= KV_BIN_HDR) {
		uint32_t body = (uint32_t)p[in + 8] << 24 | (uint32_t)p[in + 9] << 16 |
				(uint32_t)p[in + 10] << 8 | p[in + 11];
		uint16_t key = (uint16_t)(p[in + 2] << 8 | p[in + 3]);
		size_t keep = KV_BIN_HDR + body;

		if (n - in < keep)
			break;
		if (p[in + 1] == KV_BIN_OP_STAT && !p[in + 6] && !p[in + 7] && key <= body) {
			keep = KV_BIN_HDR + key;
			p[in + 8] = p[in + 9] = 0;
			p[in + 10] = (uint8_t)(key >> 8);
			p[in + 11] = (uint8_t)key;
		}
		memmove(p + out, p + in, keep);
		out += keep;
		in += KV_BIN_HDR + body;
	}
	memmove(p + out, p + in, n - in);
	return out + n - in;
}

static size_t strip_values(uint8_t *p, size_t n)
{
	return n && p[0] == KV_BIN_RES_MAGIC ? strip_bin_stat_values(p, n) :
					       strip_stat_values(p, n);
}

/* FP_FUZZ_DUMP=DIR: both runs' answers as DIR/whole and DIR/split, to compare by hand. */
static void dump_outputs(const struct run *a, const struct run *b)
{
	const char *dir = getenv("FP_FUZZ_DUMP");
	char path[512];
	FILE *f;

	for (int i = 0; dir && i < 2; i++) {
		const struct run *r = i ? b : a;

		snprintf(path, sizeof(path), "%s/%s", dir, i ? "split" : "whole");
		if ((f = fopen(path, "wb"))) {
			fwrite(r->out, 1, r->olen, f);
			fclose(f);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct run a, b;
	uint64_t seed = 0;

	if (n < 8 || n > (1u << 20))
		return 0;
	memcpy(&seed, d, 8);
	d += 8;
	n -= 8;
	run_open(&a, false, seed);
	run_open(&b, true, seed);
	run_feed(&a, d, n, false);
	run_feed(&b, d, n, true);
	a.olen = strip_values(a.out, a.olen);
	b.olen = strip_values(b.out, b.olen);
	if (a.olen != b.olen || (a.olen && memcmp(a.out, b.out, a.olen)) ||
	    kv_conn_closing(a.c) != kv_conn_closing(b.c)) {
		fprintf(stderr, "whole and split runs differ: %zu vs %zu bytes, closing %d vs %d\n",
			a.olen, b.olen, kv_conn_closing(a.c), kv_conn_closing(b.c));
		dump_outputs(&a, &b);
		abort();
	}
	run_close(&a);
	run_close(&b);
	return 0;
}
