/* binary.c: memcached's binary protocol for one connection, as memcached 1.6.18's proto_bin.c answers it. */
#include <string.h>

#include "proto.h"

/*
 * A connection whose first byte is 0x80 speaks the binary protocol for good (kv_conn_feed
 * decides). Each request is a 24-byte header (magic, opcode, key length, extras length,
 * data type, vbucket, body length, opaque, cas), then extras, key and value; each answer
 * echoes the opcode and the opaque. Requests are acted on once header, extras and key are
 * in (at most 24 + 255 + 250 bytes); a value streams into its item through the text
 * protocol's KV_ST_DATA, without the CRLF the text protocol carries.
 *
 * What memcached does, and so this does:
 *   - the quiet variants (GETQ, SETQ, ...) leave out successes and get misses; errors
 *     are always answered;
 *   - a header whose key and extras do not fit its body: "Unknown command", then close;
 *     a key over 250 bytes or lengths the command does not allow: "Invalid arguments",
 *     then close; a header without the request magic: close, without a word;
 *   - NOOP answers and flushes what quiet commands left pending;
 *   - a store that does not fit (E2BIG) or finds no memory (ENOMEM) answers and swallows
 *     the value; a failed SET also drops the old value;
 *   - SASL is not configured: its commands answer "Unknown command" (memcached without -S).
 * Where this differs: an unknown opcode's body is skipped after its extras and key, so the
 * next header is read where it starts (memcached skips a body's length more).
 */

enum {
	OP_GET = 0x00, OP_SET, OP_ADD, OP_REPLACE, OP_DELETE, OP_INCR, OP_DECR, OP_QUIT,
	OP_FLUSH, OP_GETQ, OP_NOOP, OP_VERSION, OP_GETK, OP_GETKQ, OP_APPEND, OP_PREPEND,
	OP_STAT, OP_SETQ, OP_ADDQ, OP_REPLACEQ, OP_DELETEQ, OP_INCRQ, OP_DECRQ, OP_QUITQ,
	OP_FLUSHQ, OP_APPENDQ, OP_PREPENDQ, OP_VERBOSITY, OP_TOUCH, OP_GAT, OP_GATQ,
	OP_SASL_LIST = 0x20, OP_SASL_AUTH, OP_SASL_STEP, OP_GATK, OP_GATKQ,
};

enum {
	ST_OK = 0x00, ST_ENOENT = 0x01, ST_EEXISTS = 0x02, ST_E2BIG = 0x03, ST_EINVAL = 0x04,
	ST_NOT_STORED = 0x05, ST_DELTA_BADVAL = 0x06, ST_AUTH_ERROR = 0x20,
	ST_UNKNOWN = 0x81, ST_ENOMEM = 0x82,
};

/* The quiet variants and the command each is a quiet form of. */
static int unquiet(uint8_t op)
{
	switch (op) {
	case OP_SETQ: return OP_SET;
	case OP_ADDQ: return OP_ADD;
	case OP_REPLACEQ: return OP_REPLACE;
	case OP_DELETEQ: return OP_DELETE;
	case OP_INCRQ: return OP_INCR;
	case OP_DECRQ: return OP_DECR;
	case OP_QUITQ: return OP_QUIT;
	case OP_FLUSHQ: return OP_FLUSH;
	case OP_APPENDQ: return OP_APPEND;
	case OP_PREPENDQ: return OP_PREPEND;
	case OP_GETQ: return OP_GET;
	case OP_GETKQ: return OP_GETK;
	case OP_GATQ: return OP_GAT;
	case OP_GATKQ: return OP_GATK;
	default: return -1;
	}
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)be16(p) << 16 | be16(p + 2); }
static uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }

void kv_bin_header(const struct kv_conn *c, uint8_t *h, uint8_t op, uint16_t status,
		   uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
	h[0] = KV_BIN_RES_MAGIC;
	h[1] = op;
	put16(h + 2, keylen);
	h[4] = extlen;
	h[5] = 0;                                 /* raw bytes */
	put16(h + 6, status);
	put32(h + 8, bodylen);
	memcpy(h + 12, &c->bin.opaque, 4);        /* echoed as it came */
	put64(h + 16, cas);
}

#define BIN_SMALL 64   /* a body this short is copied (error texts, numbers, the version) */

/* An answer: header, @ext and @key (copied), @val: copied when @copy (at most BIN_SMALL
 * bytes), else by reference (a value that stays in its item for the round). */
static void bin_answer(struct kv_conn *c, uint16_t status, uint64_t cas, const void *ext,
		       uint8_t extlen, const void *key, uint16_t keylen, const void *val,
		       uint32_t vlen, bool copy)
{
	uint8_t h[KV_BIN_HDR + 4 + KV_KEY_MAX + BIN_SMALL];
	size_t n = KV_BIN_HDR + (size_t)extlen + keylen;

	kv_bin_header(c, h, c->bin.opcode, status, extlen, keylen,
		      (uint32_t)extlen + keylen + vlen, cas);
	if (extlen)
		memcpy(h + KV_BIN_HDR, ext, extlen);
	if (keylen)
		memcpy(h + KV_BIN_HDR + extlen, key, keylen);
	if (copy) {
		if (vlen)
			memcpy(h + n, val, vlen);
		kv_out_ref(c, h, n + vlen, NULL, 0);
	} else {
		kv_out_ref(c, h, n, val, vlen);
	}
}

/* A success, left out for a quiet command (memcached's write_bin_response). */
static void bin_ok(struct kv_conn *c, uint64_t cas, const void *body, uint32_t len)
{
	if (!c->bin.quiet)
		bin_answer(c, ST_OK, cas, NULL, 0, NULL, 0, body, len, true);
}

/* An error with memcached's text for it, quiet or not (write_bin_error), then @swallow
 * bytes of the request skipped. */
static void bin_error(struct kv_conn *c, uint16_t status, uint64_t swallow)
{
	const char *s;

	switch (status) {
	case ST_ENOMEM: s = "Out of memory"; break;
	case ST_UNKNOWN: s = "Unknown command"; break;
	case ST_ENOENT: s = "Not found"; break;
	case ST_EINVAL: s = "Invalid arguments"; break;
	case ST_EEXISTS: s = "Data exists for key."; break;
	case ST_E2BIG: s = "Too large."; break;
	case ST_DELTA_BADVAL: s = "Non-numeric server-side value for incr or decr"; break;
	case ST_NOT_STORED: s = "Not stored."; break;
	default: s = "Auth failure."; break;
	}
	bin_answer(c, status, 0, NULL, 0, NULL, 0, s, (uint32_t)strlen(s), true);
	kv_swallow(c, swallow);
}

/* Answer, then hang up (memcached's close_after_write). */
static void bin_close_after(struct kv_conn *c, uint16_t status)
{
	c->p->ws[c->w].conn_closed_bad++;
	bin_error(c, status, 0);
	kv_out_flush(c);
	c->closing = true;
}

static uint32_t bin_exptime(const struct kv_conn *c, const uint8_t *p)
{
	return kv_realtime(c->p->store, (int64_t)be32(p));   /* unsigned on the wire */
}

/* get, getk, touch, gat, gatk and their quiet forms (process_bin_get_or_touch). */
static void bin_get(struct kv_conn *c, int op, const uint8_t *ext, const char *key,
		    uint16_t nkey)
{
	bool touch = op == OP_TOUCH || op == OP_GAT || op == OP_GATK;
	bool with_key = op == OP_GETK || op == OP_GATK;
	struct kv_wstats *ws = &c->p->ws[c->w];
	struct kv_item_view v;
	bool hit;
	uint8_t flags[4];

	if (touch) {
		ws->cmd_touch++;
		hit = kv_touch(c->p->store, c->w, key, nkey, bin_exptime(c, ext), &v) == KV_TOUCHED;
	} else {
		ws->cmd_get++;
		hit = kv_get(c->p->store, c->w, key, nkey, &v);
	}
	kv_detail_note(c->p, KV_DETAIL_GET, key, nkey, hit);
	if (kv_watched(c->p, KV_WATCH_FETCHERS))
		kv_watch_get(c, key, nkey, hit ? &v : NULL);
	if (hit) {
		put32(flags, v.flags);
		bin_answer(c, ST_OK, v.cas, flags, 4, with_key ? key : NULL, with_key ? nkey : 0,
			   v.value, op == OP_TOUCH ? 0 : v.nbytes, false);
	} else if (c->bin.quiet) {
		/* a quiet miss says nothing */
	} else if (with_key) {
		bin_answer(c, ST_ENOENT, 0, NULL, 0, key, nkey, NULL, 0, true);
	} else {
		bin_error(c, ST_ENOENT, 0);
	}
}

/* set, add, replace (extras: flags, exptime), append, prepend: the value follows. */
static void bin_update(struct kv_conn *c, int op, const uint8_t *ext, const char *key,
		       uint16_t nkey)
{
	bool concat = op == OP_APPEND || op == OP_PREPEND;
	uint32_t vlen = c->bin.bodylen - nkey - c->bin.extlen;
	uint32_t flags = concat ? 0 : be32(ext);
	uint32_t exp = concat ? 0 : bin_exptime(c, ext + 4);
	enum kv_result r;
	struct kv_new *n;

	kv_detail_note(c->p, KV_DETAIL_SET, key, nkey, false);
	n = kv_alloc(c->p->store, c->w, key, nkey, flags, exp, vlen, &r);
	if (!n) {
		if (kv_watched(c->p, KV_WATCH_MUTATIONS))
			kv_watch_store(c, key, nkey, op == OP_ADD ? KV_ADD : op == OP_REPLACE ?
				       KV_REPLACE : op == OP_APPEND ? KV_APPEND : op == OP_PREPEND ?
				       KV_PREPEND : KV_SET, r, 0, 0, 0);
		if (r == KV_TOO_LARGE) {
			c->p->ws[c->w].store_too_large++;
			bin_error(c, ST_E2BIG, vlen);
		} else {
			c->p->ws[c->w].store_no_memory++;
			bin_error(c, ST_ENOMEM, vlen);
		}
		/* memcached: a failed set must not leave the old value readable */
		if (op == OP_SET)
			kv_unlink(c->p->store, c->w, key, nkey);
		return;
	}
	switch (op) {
	case OP_ADD: c->mode = KV_ADD; break;
	case OP_REPLACE: c->mode = KV_REPLACE; break;
	case OP_APPEND: c->mode = KV_APPEND; break;
	case OP_PREPEND: c->mode = KV_PREPEND; break;
	default: c->mode = KV_SET; break;
	}
	/* memcached: a cas in the header makes any of set/add/replace a cas */
	if (c->bin.cas && !concat)
		c->mode = KV_CAS;
	c->cas_in = c->bin.cas;
	c->meta_set = false;
	kv_expect_value(c, n, vlen);
}

void kv_bin_value_done(struct kv_conn *c)
{
	uint8_t *d = kv_new_data(c->nw);
	uint64_t cas = 0;
	enum kv_result r;

	c->st = KV_ST_LINE;
	c->p->ws[c->w].cmd_set++;
	d[c->want] = '\r';                         /* the item keeps memcached's CRLF */
	d[c->want + 1] = '\n';
	kv_link_value(c, c->nw, c->want, &r, &cas);
	switch (r) {
	case KV_STORED:
		bin_ok(c, cas, NULL, 0);
		break;
	case KV_EXISTS:
		bin_error(c, ST_EEXISTS, 0);
		break;
	case KV_NOT_FOUND:
		bin_error(c, ST_ENOENT, 0);
		break;
	default:   /* complete_update_bin: an add that found the key, a replace that did not */
		bin_error(c, c->mode == KV_ADD ? ST_EEXISTS :
			     c->mode == KV_REPLACE ? ST_ENOENT : ST_NOT_STORED, 0);
		break;
	}
}

/* incr/decr (extras: delta, initial, exptime); a miss creates the item with the initial
 * value unless exptime is 0xffffffff (complete_incr_bin). */
static void bin_arith(struct kv_conn *c, int op, const uint8_t *ext, const char *key,
		      uint16_t nkey)
{
	uint64_t delta = be64(ext), initial = be64(ext + 8), v = 0, cas = 0;
	uint32_t exp = be32(ext + 16);
	uint8_t body[8];
	char digits[24];
	struct kv_new *n;
	enum kv_result r;
	size_t len;

	r = kv_arith_cas(c->p->store, c->w, key, nkey, op == OP_INCR, delta, c->bin.cas, &v,
			 &cas, NULL);
	switch (r) {
	case KV_STORED:
		put64(body, v);
		bin_ok(c, cas, body, 8);
		return;
	case KV_NON_NUMERIC:
		bin_error(c, ST_DELTA_BADVAL, 0);
		return;
	case KV_EXISTS:
		bin_error(c, ST_EEXISTS, 0);
		return;
	case KV_NOT_FOUND:
		break;
	default:
		bin_error(c, ST_ENOMEM, 0);
		return;
	}
	if (exp == 0xffffffffu) {
		bin_error(c, ST_ENOENT, 0);
		return;
	}
	len = (size_t)(kv_utoa(initial, digits) - digits);
	n = kv_alloc(c->p->store, c->w, key, nkey, 0, kv_realtime(c->p->store, exp),
		     (uint32_t)len, &r);
	if (!n) {
		bin_error(c, ST_ENOMEM, 0);
		return;
	}
	memcpy(kv_new_data(n), digits, len);
	memcpy(kv_new_data(n) + len, "\r\n", 2);
	if (kv_store_item(c->p->store, c->w, n, KV_ADD, 0, &cas) != KV_STORED) {
		bin_error(c, ST_NOT_STORED, 0);
		return;
	}
	put64(body, initial);
	bin_ok(c, cas, body, 8);
}

static void bin_delete(struct kv_conn *c, const char *key, uint16_t nkey)
{
	kv_detail_note(c->p, KV_DETAIL_DEL, key, nkey, false);
	switch (kv_delete(c->p->store, c->w, key, nkey, c->bin.cas)) {
	case KV_DELETED: bin_ok(c, 0, NULL, 0); break;
	case KV_EXISTS: bin_error(c, ST_EEXISTS, 0); break;
	default: bin_error(c, ST_ENOENT, 0); break;
	}
}

static void bin_flush(struct kv_conn *c, const uint8_t *ext)
{
	uint32_t e = c->bin.extlen == 4 ? be32(ext) : 0;

	if (!c->p->set.flush_enabled) {
		bin_error(c, ST_AUTH_ERROR, 0);
		return;
	}
	c->p->ws[c->w].cmd_flush++;
	kv_flush_all(c->p->store, e ? kv_realtime(c->p->store, e) : kv_store_now(c->p->store));
	bin_ok(c, 0, NULL, 0);
}

/* The lengths each command allows (dispatch_bin_command); false: "Invalid arguments". */
static bool bin_lengths_ok(int op, uint8_t ext, uint16_t key, uint32_t body)
{
	switch (op) {
	case OP_VERSION:
	case OP_NOOP:
	case OP_QUIT:
	case OP_SASL_LIST:
		return !ext && !key && !body;
	case OP_FLUSH:
		return !key && body == ext && (ext == 0 || ext == 4);
	case OP_SET:
	case OP_ADD:
	case OP_REPLACE:
		return ext == 8 && key && body >= (uint32_t)key + 8;
	case OP_GET:
	case OP_GETK:
		return !ext && key && body == key;
	case OP_DELETE:
		return key && !ext && body == key;
	case OP_INCR:
	case OP_DECR:
		return key && ext == 20 && body == (uint32_t)key + 20;
	case OP_APPEND:
	case OP_PREPEND:
	case OP_SASL_AUTH:
	case OP_SASL_STEP:
		return key && !ext;
	case OP_STAT:
		return !ext;
	case OP_TOUCH:
	case OP_GAT:
	case OP_GATK:
		return ext == 4 && key;
	default:
		return true;
	}
}

/* One request whose header, extras and key are all in @d; false when it waits for output
 * room (shown again). */
static bool bin_dispatch(struct kv_conn *c, const uint8_t *d)
{
	const struct kv_bin_req *q = &c->bin;
	const uint8_t *ext = d + KV_BIN_HDR;
	const char *key = (const char *)ext + q->extlen;
	int op = unquiet(q->opcode);

	c->bin.quiet = op >= 0;
	if (op < 0)
		op = q->opcode;
	if (!bin_lengths_ok(op, q->extlen, q->keylen, q->bodylen)) {
		bin_close_after(c, ST_EINVAL);
		return true;
	}
	/* room for a get's value; a stats answer asks for its own */
	if (kv_out_room(c) < (op == OP_GET || op == OP_GETK || op == OP_GAT || op == OP_GATK ?
			      kv_value_reserve(c) : KV_RESP_RESERVE))
		return false;
	c->ncmds++;
	switch (op) {
	case OP_STAT:
		switch (kv_bin_stats(c, key, q->keylen)) {
		case 0: c->ncmds--; return false;
		case -1: bin_error(c, ST_ENOENT, 0); break;
		default: break;
		}
		break;
	case OP_VERSION:
		bin_ok(c, 0, KV_VERSION, sizeof(KV_VERSION) - 1);
		break;
	case OP_NOOP:
		bin_ok(c, 0, NULL, 0);
		kv_out_flush(c);
		break;
	case OP_QUIT:
		bin_ok(c, 0, NULL, 0);
		kv_out_flush(c);
		c->closing = true;
		break;
	case OP_FLUSH:
		bin_flush(c, ext);
		break;
	case OP_SET:
	case OP_ADD:
	case OP_REPLACE:
	case OP_APPEND:
	case OP_PREPEND:
		bin_update(c, op, ext, key, q->keylen);
		break;
	case OP_GET:
	case OP_GETK:
	case OP_TOUCH:
	case OP_GAT:
	case OP_GATK:
		bin_get(c, op, ext, key, q->keylen);
		break;
	case OP_DELETE:
		bin_delete(c, key, q->keylen);
		break;
	case OP_INCR:
	case OP_DECR:
		bin_arith(c, op, ext, key, q->keylen);
		break;
	case OP_SASL_LIST:
	case OP_SASL_AUTH:
	case OP_SASL_STEP:
		bin_error(c, ST_UNKNOWN, q->bodylen - q->keylen);
		break;
	default:   /* verbosity too: memcached's binary protocol has no handler for it */
		bin_error(c, ST_UNKNOWN, q->bodylen - q->keylen - q->extlen);
		break;
	}
	return true;
}

size_t kv_bin_feed(struct kv_conn *c, const uint8_t *d, size_t len)
{
	struct kv_bin_req *q = &c->bin;
	size_t need;

	if (len < KV_BIN_HDR)
		return 0;
	if (d[0] != KV_BIN_REQ_MAGIC) {
		c->p->ws[c->w].conn_closed_bad++;
		kv_out_cull(c);
		c->closing = true;
		return 0;
	}
	q->opcode = d[1];
	q->keylen = be16(d + 2);
	q->extlen = d[4];
	q->bodylen = be32(d + 8);
	memcpy(&q->opaque, d + 12, 4);
	q->cas = be64(d + 16);
	q->quiet = false;
	/* decided on the header alone, before waiting for a key that may never fit */
	if ((uint32_t)q->keylen + q->extlen > q->bodylen) {
		bin_close_after(c, ST_UNKNOWN);
		return 0;
	}
	if (q->keylen > KV_KEY_MAX) {
		bin_close_after(c, ST_EINVAL);
		return 0;
	}
	need = KV_BIN_HDR + (size_t)q->extlen + q->keylen;
	if (len < need)
		return 0;
	c->noreply = false;
	atomic_store_explicit(&c->last_cmd, kv_store_now(c->p->store), memory_order_relaxed);
	if (!bin_dispatch(c, d)) {
		c->blocked = true;
		return 0;
	}
	return need;
}
