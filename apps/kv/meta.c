/* meta.c: memcached 1.6.18's meta commands (mg, ms, md, ma, mn, me) and the base64 keys they take. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/*
 * Each command follows its process_m*_command in memcached's proto_text.c: the flags are
 * checked once up front (_meta_flag_preparse: duplicates, unknown flags, bad numbers,
 * each command with its own error wording), then the answer is built flag by flag in
 * the order the client gave them. Errors are shown even under q (out_errstring); q only
 * hides the nominal answer: EN for mg, HD for ms, md and ma.
 */

#define MFLAG_MAX_OPT_LENGTH    20   /* tokens, command and key included */
#define MFLAG_MAX_OPAQUE_LENGTH 32
#define META_BUF                (KV_META_RESP_MAX * 2)

struct meta_flags {
	bool has_error, no_update, vivify, value, set_stale, no_reply, has_cas, new_ttl;
	bool key_binary, has_recache;
	char mode;
	uint32_t exptime, autoviv_exptime, recache_time, client_flags;
	uint64_t req_cas, delta, initial;
};

/* ---- base64 (the alphabet of RFC 4648; decoding skips what is not in it) ---- */

static const char b64_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_val(unsigned char ch)
{
	const char *p = ch && ch != '=' ? strchr(b64_abc, ch) : NULL;

	return ch == '=' ? 0 : p ? (int)(p - b64_abc) : -1;
}

size_t kv_b64_encode(const uint8_t *src, size_t len, char *out, size_t outlen)
{
	size_t olen = len * 4 / 3 + 4, n = 0;

	olen += olen / 72 + 1;     /* the bound memcached's encoder insists on */
	if (olen > outlen)
		return 0;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t b = (uint32_t)src[i] << 16;

		b |= i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0;
		b |= i + 2 < len ? src[i + 2] : 0;
		out[n++] = b64_abc[b >> 18];
		out[n++] = b64_abc[(b >> 12) & 63];
		out[n++] = i + 1 < len ? b64_abc[(b >> 6) & 63] : '=';
		out[n++] = i + 2 < len ? b64_abc[b & 63] : '=';
	}
	return n;
}

/* As memcached's decoder: the valid characters must come in fours; the first block with
 * '=' in it ends the input (one or two of them drop that many bytes, more is an error). */
size_t kv_b64_decode(const char *src, size_t len, uint8_t *out, size_t outlen)
{
	size_t count = 0, n = 0;
	int block[4], pad = 0;

	for (size_t i = 0; i < len; i++)
		count += b64_val((unsigned char)src[i]) >= 0;
	if (!count || count % 4 || count / 4 * 3 > outlen)
		return 0;
	count = 0;
	for (size_t i = 0; i < len; i++) {
		int v = b64_val((unsigned char)src[i]);

		if (v < 0)
			continue;
		pad += src[i] == '=';
		block[count++] = v;
		if (count < 4)
			continue;
		out[n++] = (uint8_t)(block[0] << 2 | block[1] >> 4);
		out[n++] = (uint8_t)(block[1] << 4 | block[2] >> 2);
		out[n++] = (uint8_t)(block[2] << 6 | block[3]);
		count = 0;
		if (pad) {
			if (pad > 2)
				return 0;
			n -= (size_t)pad;
			break;
		}
	}
	return n;
}

/* ---- flags ---- */

static bool flag_int(const struct kv_tok *t, int32_t *v)
{
	return kv_strtol(t->p + 1, t->len - 1, v);
}

/* One flag's value; false on a bad one (with *@err when memcached names it). */
static bool preparse_value(struct kv_conn *c, const struct kv_tok *t, struct meta_flags *of,
			   const char **err)
{
	static const char bad_tok[] = "CLIENT_ERROR bad token in command line format";
	int32_t v;

	switch (t->p[0]) {
	case 'N':
	case 'T':
	case 'R':
		if (!flag_int(t, &v)) {
			*err = bad_tok;
			return false;
		}
		if (t->p[0] == 'N')
			of->autoviv_exptime = kv_exptime(c, v);
		else if (t->p[0] == 'T')
			of->exptime = kv_exptime(c, v);
		else
			of->recache_time = kv_exptime(c, v);
		return true;
	case 'F':
		return kv_strtoul(t->p + 1, t->len - 1, &of->client_flags);
	case 'C':
		if (kv_strtoull(t->p + 1, t->len - 1, &of->req_cas))
			return true;
		*err = bad_tok;
		return false;
	case 'M':
		if (t->len == 2)
			return true;
		*err = "CLIENT_ERROR incorrect length for M token";
		return false;
	case 'J':
		if (kv_strtoull(t->p + 1, t->len - 1, &of->initial))
			return true;
		*err = "CLIENT_ERROR invalid numeric initial value";
		return false;
	case 'D':
		if (kv_strtoull(t->p + 1, t->len - 1, &of->delta))
			return true;
		*err = "CLIENT_ERROR invalid numeric delta value";
		return false;
	}
	return true;
}

/* The key in place of its base64 form (memcached decodes into the line itself). */
static bool decode_key(struct kv_conn *c, struct kv_tok *key)
{
	uint8_t *mkey = c->p->wx[c->w].mkey;
	size_t n = kv_b64_decode(key->p, key->len, mkey, key->len < KV_KEY_MAX + 1 ?
				 key->len : KV_KEY_MAX + 1);

	key->p = (const char *)mkey;
	key->len = n;
	return n > 0;
}

/* memcached's _meta_flag_preparse: 0, or -1 with *@err (a duplicate or unknown flag
 * stops at once; a bad value is noted and the scan goes on). */
static int preparse(struct kv_conn *c, struct kv_tok *t, size_t start, struct meta_flags *of,
		    const char **err)
{
	uint8_t seen[127] = { 0 };

	for (size_t i = start; t[i].len; i++) {
		uint8_t o = (uint8_t)t[i].p[0];

		if (o >= 127 || seen[o]) {
			*err = "CLIENT_ERROR duplicate flag";
			return -1;
		}
		seen[o] = 1;
		if (!strchr("bNTRlOPLkstcfvhuqFCMJDI", o)) {
			*err = "CLIENT_ERROR invalid flag";
			return -1;
		}
		if (o == 'b' && !decode_key(c, &t[1])) {
			*err = "CLIENT_ERROR error decoding key";
			of->has_error = true;
		}
		if (!preparse_value(c, &t[i], of, err))
			of->has_error = true;
		of->key_binary |= o == 'b';
		of->vivify |= o == 'N';
		of->new_ttl |= o == 'T';
		of->has_recache |= o == 'R';
		of->value |= o == 'v';
		of->no_update |= o == 'u';
		of->no_reply |= o == 'q';
		of->has_cas |= o == 'C';
		of->set_stale |= o == 'I';
		if (o == 'M' && t[i].len == 2)
			of->mode = t[i].p[1];
	}
	return of->has_error ? -1 : 0;
}

/* ---- building answers ---- */

static char *put_flag(char *p, char f, uint64_t v)
{
	*p++ = ' ';
	*p++ = f;
	return kv_utoa(v, p);
}

/* The t flag: seconds left, or -1 for an item that never expires. */
static char *put_ttl(char *p, uint32_t exptime, uint32_t now)
{
	if (!exptime) {
		memcpy(p, " t-1", 4);
		return p + 4;
	}
	return put_flag(p, 't', (uint32_t)(exptime - now));
}

static char *put_key(char *p, const char *key, size_t nkey, bool binary)
{
	*p++ = ' ';
	*p++ = 'k';
	if (!binary) {
		memcpy(p, key, nkey);
		return p + nkey;
	}
	p += kv_b64_encode((const uint8_t *)key, nkey, p, KV_META_RESP_MAX / 2);
	memcpy(p, " b", 2);
	return p + 2;
}

static char *put_opaque(char *p, const struct kv_tok *t)
{
	*p++ = ' ';
	memcpy(p, t->p, t->len);
	return p + t->len;
}

/* The O and k flags (all a miss echoes); NULL if an opaque is too long. */
static char *put_ok(char *p, const struct kv_tok *t, size_t nt, const struct kv_tok *key,
		    bool binary)
{
	for (size_t i = 2; i < nt - 1; i++) {
		if (t[i].p[0] == 'O') {
			if (t[i].len > MFLAG_MAX_OPAQUE_LENGTH)
				return NULL;
			p = put_opaque(p, &t[i]);
		} else if (t[i].p[0] == 'k') {
			p = put_key(p, key->p, key->len, binary);
		}
	}
	return p;
}

static void send_line(struct kv_conn *c, char *buf, char *p, const struct kv_item_view *v)
{
	struct iovec iov = { buf, 0 };

	*p++ = '\r';
	*p++ = '\n';
	iov.iov_len = (size_t)(p - buf);
	if (v)
		kv_out_value(c, buf, iov.iov_len, v->value, v->nbytes);
	else
		kv_out_iov(c, &iov, 1);
}

/* Common checks of md, ma, me: false after answering. */
static bool meta_head(struct kv_conn *c, struct kv_tok *t, size_t nt, const char *too_many)
{
	if (nt < 3) {
		kv_out_str(c, "ERROR");
		return false;
	}
	if (t[1].len > KV_KEY_MAX) {
		kv_out_err(c, "CLIENT_ERROR bad command line format");
		return false;
	}
	if (nt > MFLAG_MAX_OPT_LENGTH) {
		kv_out_err(c, too_many);
		return false;
	}
	return true;
}

/* ---- mg ---- */

/* The hit's status line flags, in request order; NULL if an opaque is too long. */
static char *mg_flags(struct kv_conn *c, char *p, const struct kv_tok *t, size_t nt,
		      struct kv_item_view *v, const struct meta_flags *of, bool created)
{
	uint32_t now = kv_store_now(c->p->store);

	for (size_t i = 2; i < nt - 1; i++) {
		switch (t[i].p[0]) {
		/* the view is the item before this fetch; memcached applies T and N in
		 * flag order, so a t before them reads the old TTL */
		case 'T': v->exptime = of->exptime; break;
		case 'N':
			if (created)
				v->exptime = of->autoviv_exptime;
			break;
		case 's': p = put_flag(p, 's', v->nbytes); break;
		case 'c': p = put_flag(p, 'c', v->cas); break;
		case 'f': p = put_flag(p, 'f', v->flags); break;
		case 'l': p = put_flag(p, 'l', (uint32_t)(now - v->last_access)); break;
		case 'h': p = put_flag(p, 'h', v->fetched); break;
		case 't': p = put_ttl(p, v->exptime, now); break;
		case 'O':
			if (t[i].len > MFLAG_MAX_OPAQUE_LENGTH)
				return NULL;
			p = put_opaque(p, &t[i]);
			break;
		case 'k': p = put_key(p, v->key, v->nkey, of->key_binary); break;
		}
	}
	return p;
}

/* What mg asks of the store: T, N, R, u. */
static void mg_args(struct kv_conn *c, const struct meta_flags *of, struct kv_mget_args *a)
{
	uint32_t now = kv_store_now(c->p->store);

	a->touch = of->new_ttl;
	/* N and T share one expiry in the store's call: T's when both are given */
	a->exptime = of->new_ttl ? of->exptime : of->autoviv_exptime;
	a->vivify = of->vivify;
	a->no_bump = of->no_update;
	if (of->has_recache && of->recache_time > now)
		a->recache_below = of->recache_time - now;
}

/* memcached's order after the flags: Z (a token went out before), X (stale), W (won). */
static char *put_tokens(char *p, const struct kv_item_view *v)
{
	if (v->token_sent) {
		memcpy(p, " Z", 2);
		p += 2;
	}
	if (v->stale) {
		memcpy(p, " X", 2);
		p += 2;
	}
	if (v->won) {
		memcpy(p, " W", 2);
		p += 2;
	}
	return p;
}

static void meta_get(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	const char *err = "CLIENT_ERROR bad command line format";
	struct meta_flags of = { 0 };
	struct kv_mget_args a = { 0 };
	struct kv_item_view v;
	enum kv_mget_result r;
	char buf[META_BUF], *p = buf;

	if (!meta_head(c, t, nt, "CLIENT_ERROR options flags are too long"))
		return;
	if (preparse(c, t, 2, &of, &err)) {
		kv_out_err(c, err);
		return;
	}
	mg_args(c, &of, &a);
	c->p->ws[c->w].cmd_get++;
	r = kv_mget(c->p->store, c->w, t[1].p, t[1].len, &a, &v);
	if (kv_watched(c->p, KV_WATCH_FETCHERS))
		kv_watch_get(c, t[1].p, t[1].len, r == KV_MG_MISS ? NULL : &v);
	if (r == KV_MG_MISS) {
		c->noreply = of.no_reply;    /* q hides only EN */
		memcpy(p, "EN", 2);
		p = put_ok(p + 2, t, nt, &t[1], of.key_binary);
	} else {
		if (of.value) {
			memcpy(p, "VA ", 3);
			p = kv_utoa(v.nbytes, p + 3);
		} else {
			memcpy(p, "HD", 2);
			p += 2;
		}
		if ((p = mg_flags(c, p, t, nt, &v, &of, r == KV_MG_VIVIFIED)))
			p = put_tokens(p, &v);
	}
	if (!p)
		kv_out_err(c, "CLIENT_ERROR opaque token too long");
	else
		send_line(c, buf, p, r != KV_MG_MISS && of.value ? &v : NULL);
}

/* ---- ms ---- */

/* memcached's _finalize_mset: the status, then the stashed O, k and c flags. */
void kv_meta_set_done(struct kv_conn *c, enum kv_result r, uint64_t cas)
{
	char buf[META_BUF], *p = buf;
	const char *fp = c->ms->flags, *end = c->ms->flags + c->ms->flags_len;
	static const char *const code[] = {
		[KV_STORED] = "HD", [KV_EXISTS] = "EX", [KV_NOT_FOUND] = "NF",
		[KV_NOT_STORED] = "NS",
	};

	if (r == KV_STORED && c->noreply)
		return;
	c->noreply = false;
	memcpy(p, r <= KV_NOT_FOUND ? code[r] : "NS", 2);   /* append's copy out of memory */
	p += 2;
	for (; fp < end; fp++) {
		if (*fp == 'O') {
			*p++ = ' ';
			while (fp < end && *fp != ' ')
				*p++ = *fp++;
		} else if (*fp == 'k') {
			p = put_key(p, (const char *)c->ms->key, c->ms->nkey, c->ms->key_binary);
		} else if (*fp == 'c') {
			p = put_flag(p, 'c', r == KV_STORED ? cas : 0);
		}
	}
	send_line(c, buf, p, NULL);
}

/* Stash the return flags (O, k, c) for kv_meta_set_done; false if an opaque is too long. */
static bool ms_stash(struct kv_conn *c, const struct kv_tok *t, size_t nt)
{
	char *p = c->ms->flags;
	bool ok = true;

	for (size_t i = 2; i < nt - 1; i++) {
		if (t[i].p[0] == 'O') {
			if (t[i].len > MFLAG_MAX_OPAQUE_LENGTH) {
				ok = false;
				continue;
			}
			p = put_opaque(p, &t[i]);
		} else if (t[i].p[0] == 'k' || t[i].p[0] == 'c') {
			*p++ = ' ';
			*p++ = t[i].p[0];
		}
	}
	c->ms->flags_len = (size_t)(p - c->ms->flags);
	return ok;
}

static bool ms_mode(char m, enum kv_set_mode *mode)
{
	switch (m) {
	case 0:
	case 'S': *mode = KV_SET; return true;
	case 'E': *mode = KV_ADD; return true;
	case 'A': *mode = KV_APPEND; return true;
	case 'P': *mode = KV_PREPEND; return true;
	case 'R': *mode = KV_REPLACE; return true;
	}
	return false;
}

/* ms's checks after the length is known, in memcached's order; NULL, or the error (then
 * the value is swallowed). */
static const char *ms_check(struct kv_conn *c, struct kv_tok *t, size_t nt,
			    struct meta_flags *of, enum kv_set_mode *mode)
{
	const char *err = "CLIENT_ERROR bad command line format";
	bool opaque_ok;

	if (preparse(c, t, 3, of, &err))
		return err;
	c->noreply = of->no_reply;
	opaque_ok = ms_stash(c, t, nt);
	if (!ms_mode(of->mode, mode))
		return "CLIENT_ERROR invalid mode for ms M token";
	/* a CAS upgrades set and replace to cas; append/prepend compare it themselves */
	if (of->has_cas && (*mode == KV_SET || *mode == KV_REPLACE))
		*mode = of->set_stale ? KV_CAS_STALE : KV_CAS;
	return opaque_ok ? NULL : "CLIENT_ERROR opaque token too long";
}

static void meta_set(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	struct meta_flags of = { 0 };
	enum kv_set_mode mode = KV_SET;
	enum kv_result r;
	struct kv_new *n;
	const char *err;
	int32_t vlen;

	if (!meta_head(c, t, nt, "CLIENT_ERROR options flags too long"))
		return;
	if (!c->ms && !(c->ms = calloc(1, sizeof(*c->ms)))) {
		kv_out_err(c, "SERVER_ERROR out of memory");
		c->closing = true;   /* its value would be read as commands */
		return;
	}
	if (nt == 3 || !kv_strtol(t[2].p, t[2].len, &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
		kv_out_err(c, "CLIENT_ERROR bad command line format");
		return;
	}
	if ((err = ms_check(c, t, nt, &of, &mode))) {
		kv_out_err(c, err);
		kv_swallow(c, (uint64_t)vlen + 2);
		return;
	}
	n = kv_alloc(c->p->store, c->w, t[1].p, t[1].len, of.client_flags, of.exptime,
		     (uint32_t)vlen, &r);
	if (!n) {
		c->p->ws[c->w].store_too_large += r == KV_TOO_LARGE;
		c->p->ws[c->w].store_no_memory += r != KV_TOO_LARGE;
		kv_out_err(c, r == KV_TOO_LARGE ? "SERVER_ERROR object too large for cache" :
			   "SERVER_ERROR out of memory storing object");
		kv_unlink(c->p->store, c->w, t[1].p, t[1].len);   /* no stale value left */
		kv_swallow(c, (uint64_t)vlen + 2);
		return;
	}
	memcpy(c->ms->key, t[1].p, t[1].len);
	c->ms->nkey = (uint8_t)t[1].len;
	c->ms->key_binary = of.key_binary;
	c->mode = mode;
	c->cas_in = of.req_cas;
	c->meta_set = true;
	kv_expect_value(c, n, (uint32_t)vlen);
}

/* ---- md ---- */

/* Delete, or mark stale with I. C0: memcached compares it, and only a cas-less item
 * (-C) has cas 0; the store reads 0 as "no compare", so that one is decided here. */
static enum kv_result md_apply(struct kv_conn *c, const struct kv_tok *key,
			       const struct meta_flags *of)
{
	struct kv_mget_args a = { .no_bump = true };
	struct kv_item_view v;
	uint64_t cas = of->has_cas ? of->req_cas : 0;

	if (of->has_cas && !of->req_cas) {
		if (kv_mget(c->p->store, c->w, key->p, key->len, &a, &v) == KV_MG_MISS)
			return KV_NOT_FOUND;
		if (v.cas)
			return KV_EXISTS;
	}
	if (of->set_stale)
		return kv_invalidate(c->p->store, c->w, key->p, key->len, cas, of->new_ttl,
				     of->exptime);
	return kv_delete(c->p->store, c->w, key->p, key->len, cas);
}

static void meta_delete(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	const char *err = NULL;
	struct meta_flags of = { 0 };
	enum kv_result r;
	char buf[META_BUF], *p = buf + 2;

	if (!meta_head(c, t, nt, "CLIENT_ERROR options flags too long"))
		return;
	if (preparse(c, t, 2, &of, &err)) {
		kv_out_err(c, "CLIENT_ERROR invalid or duplicate flag");
		return;
	}
	c->noreply = of.no_reply;
	if (!(p = put_ok(p, t, nt, &t[1], of.key_binary))) {
		kv_out_err(c, "CLIENT_ERROR opaque token too long");
		return;
	}
	r = md_apply(c, &t[1], &of);
	if (r == KV_EXISTS) {
		memcpy(buf, "EX", 2);
	} else if (r == KV_NOT_FOUND) {
		memcpy(buf, "NF", 2);
	} else {
		if (c->noreply)
			return;
		memcpy(buf, "HD", 2);
	}
	c->noreply = false;
	send_line(c, buf, p, NULL);
}

/* ---- ma ---- */

/* The flags of an ma that found (or made) its item, in request order: t, T, c, O, k. */
static char *ma_flags(struct kv_conn *c, char *p, const struct kv_tok *t, size_t nt,
		      const struct meta_flags *of, struct kv_item_view *v, bool created)
{
	uint32_t now = kv_store_now(c->p->store);

	for (size_t i = 2; i < nt - 1; i++) {
		switch (t[i].p[0]) {
		case 'c': p = put_flag(p, 'c', v->cas); break;
		case 't': p = put_ttl(p, v->exptime, now); break;
		case 'T':
			kv_touch(c->p->store, c->w, t[1].p, t[1].len, of->exptime, NULL);
			v->exptime = of->exptime;
			break;
		case 'N':
			if (created)
				v->exptime = of->autoviv_exptime;
			break;
		case 'O':
			if (t[i].len > MFLAG_MAX_OPAQUE_LENGTH)
				return NULL;
			p = put_opaque(p, &t[i]);
			break;
		case 'k': p = put_key(p, t[1].p, t[1].len, of->key_binary); break;
		}
	}
	return p;
}

/* A miss with N: link the initial value (J) as an add would. */
static enum kv_result ma_vivify(struct kv_conn *c, const struct kv_tok *key,
				const struct meta_flags *of, uint64_t *cas)
{
	char num[24];
	size_t n = (size_t)(kv_utoa(of->initial, num) - num);
	enum kv_result r;
	struct kv_new *nw = kv_alloc(c->p->store, c->w, key->p, key->len, 0, of->autoviv_exptime,
				     (uint32_t)n, &r);

	if (!nw)
		return KV_NO_MEMORY;
	memcpy(kv_new_data(nw), num, n);
	memcpy(kv_new_data(nw) + n, "\r\n", 2);
	return kv_store_item(c->p->store, c->w, nw, KV_ADD, 0, cas);
}

/* The arithmetic itself, C compared under the key's lock; on a miss with N the initial
 * value is linked instead. KV_STORED when there is an item to report in @v. */
static enum kv_result ma_apply(struct kv_conn *c, const struct kv_tok *key,
			       const struct meta_flags *of, bool incr, uint64_t *val,
			       struct kv_item_view *v, bool *created)
{
	enum kv_result r;
	uint64_t cas = 0;

	r = kv_arith_cas(c->p->store, c->w, key->p, key->len, incr, of->delta,
			 of->has_cas ? of->req_cas : 0, val, &cas, v);
	v->cas = cas;
	if (r != KV_NOT_FOUND || !of->vivify)
		return r;
	*val = of->initial;
	*created = true;
	memset(v, 0, sizeof(*v));
	r = ma_vivify(c, key, of, &v->cas);
	return r == KV_STORED ? r : r == KV_NO_MEMORY ? KV_TOO_LARGE : KV_NOT_STORED;
}

/* ma that changed (or made) no item: its error, or NF/EX/NS with O and k; true if so. */
static bool ma_failed(struct kv_conn *c, enum kv_result r, const struct kv_tok *t, size_t nt,
		      const struct meta_flags *of)
{
	char buf[META_BUF], *p = buf;

	switch (r) {
	case KV_NON_NUMERIC:
		kv_out_err(c, "CLIENT_ERROR cannot increment or decrement non-numeric value");
		return true;
	case KV_NO_MEMORY:
		kv_out_err(c, "SERVER_ERROR out of memory");
		return true;
	case KV_TOO_LARGE:
		kv_out_err(c, "SERVER_ERROR Out of memory allocating new item");
		return true;
	case KV_NOT_FOUND:
	case KV_EXISTS:
	case KV_NOT_STORED:
		memcpy(p, r == KV_NOT_FOUND ? "NF" : r == KV_EXISTS ? "EX" : "NS", 2);
		if (!(p = put_ok(p + 2, t, nt, &t[1], of->key_binary))) {
			kv_out_err(c, "CLIENT_ERROR opaque token too long");
			return true;
		}
		c->noreply = false;
		send_line(c, buf, p, NULL);
		return true;
	default:
		return false;
	}
}

/* HD or VA <len>, the flags, and the number itself after a CRLF for v. */
static void ma_answer(struct kv_conn *c, const struct kv_tok *t, size_t nt,
		      const struct meta_flags *of, struct kv_item_view *v, uint64_t val,
		      bool created)
{
	char buf[META_BUF], num[24], *p = buf;
	size_t n = (size_t)(kv_utoa(val, num) - num);

	if (of->value) {
		memcpy(p, "VA ", 3);
		p = kv_utoa(n, p + 3);
	} else {
		memcpy(p, "HD", 2);
		p += 2;
	}
	if (!(p = ma_flags(c, p, t, nt, of, v, created))) {
		kv_out_err(c, "CLIENT_ERROR opaque token too long");
		return;
	}
	if (of->value) {
		memcpy(p, "\r\n", 2);
		memcpy(p + 2, num, n);
		p += 2 + n;
	}
	send_line(c, buf, p, NULL);
}

static void meta_arith(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	const char *err = NULL;
	struct meta_flags of = { .delta = 1 };
	struct kv_item_view v = { 0 };
	uint64_t val = 0;
	bool incr, created = false;
	enum kv_result r;

	if (!meta_head(c, t, nt, "CLIENT_ERROR options flags too long"))
		return;
	if (preparse(c, t, 2, &of, &err)) {
		kv_out_err(c, "CLIENT_ERROR invalid or duplicate flag");
		return;
	}
	c->noreply = of.no_reply;
	if (of.mode && !strchr("I+D-", of.mode)) {
		kv_out_err(c, "CLIENT_ERROR invalid mode for ma M token");
		return;
	}
	incr = !of.mode || of.mode == 'I' || of.mode == '+';
	r = ma_apply(c, &t[1], &of, incr, &val, &v, &created);
	if (ma_failed(c, r, t, nt, &of))
		return;
	/* q hides a plain success; an item vivified by N is reported even then */
	if (!created && c->noreply)
		return;
	c->noreply = false;
	ma_answer(c, t, nt, &of, &v, val, created);
}

/* ---- me: memcached's debug line (cls and size are this server's guesses) ---- */

static void meta_debug(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	struct kv_mget_args a = { .no_bump = true };
	struct kv_item_view v;
	char buf[META_BUF], *p = buf;
	uint32_t now = kv_store_now(c->p->store);
	int n;

	if (nt < 3 || t[1].len > KV_KEY_MAX ||
	    (nt >= 4 && t[2].len == 1 && t[2].p[0] == 'b' && !decode_key(c, &t[1]))) {
		kv_out_str(c, "CLIENT_ERROR bad command line format");
		return;
	}
	c->p->ws[c->w].cmd_meta++;
	if (kv_mget(c->p->store, c->w, t[1].p, t[1].len, &a, &v) == KV_MG_MISS) {
		kv_out_str(c, "EN");
		return;
	}
	memcpy(p, "ME ", 3);
	p += 3;
	memcpy(p, v.key, v.nkey);
	p += v.nkey;
	n = snprintf(p, sizeof(buf) - (size_t)(p - buf) - 2,
		     " exp=%d la=%u cas=%llu fetch=%s cls=1 size=%u",
		     v.exptime ? (int)(now - v.exptime) : -1, now - v.last_access,
		     (unsigned long long)v.cas, v.fetched ? "yes" : "no",
		     48 + v.nkey + 1 + v.nbytes + 2 + (c->p->set.use_cas ? 8 : 0));
	send_line(c, buf, p + (n > 0 ? n : 0), NULL);
}

/* mg, ms, md, ma, mn, me; "m?" else is ERROR. */
bool kv_meta_command(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	switch (t[0].p[1]) {
	case 'g':
		/* mg may answer with a value: wait for room for the largest before acting,
		 * as a win token or a touch must not be handed out twice */
		if (kv_out_room(c) < kv_value_reserve(c))
			return false;
		meta_get(c, t, nt);
		break;
	case 's': meta_set(c, t, nt); break;
	case 'd': meta_delete(c, t, nt); break;
	case 'a': meta_arith(c, t, nt); break;
	case 'e': meta_debug(c, t, nt); break;
	case 'n':
		kv_out_str(c, "MN");
		kv_out_flush(c);     /* mn makes memcached write what it holds */
		break;
	default: kv_out_str(c, "ERROR"); break;
	}
	return true;
}
