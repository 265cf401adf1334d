/* proto.c: memcached's text protocol for one connection: framing, tokens, the classic commands, values streamed into items. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowplane/compiler.h>

#include "proto.h"

/*
 * A connection is in one of three states (memcached's conn_parse_cmd, conn_nread,
 * conn_swallow): reading a request line; copying a value into the item kv_alloc() gave
 * (consumed as it arrives, whatever the split); discarding a value that had nowhere to
 * go. Every answer string, every error and every decision to continue or close follows
 * memcached 1.6.18's proto_text.c, checked against the real server: a malformed line
 * gets its error and the next line is read; a value whose last two bytes are not CRLF
 * gets "CLIENT_ERROR bad data chunk" and what follows it is read as commands; a value
 * too large for the cache is swallowed, its length taken on trust, as memcached does.
 */

/* ---- expiry times (numbers and tokens: text.c) ---- */

uint32_t kv_exptime(const struct kv_conn *c, int32_t t)
{
	return kv_realtime(c->p->store, t < 0 ? (int64_t)KV_REALTIME_MAXDELTA + 1 : t);
}

/* ---- output ---- */

/* Room for one more piece and @extra arena bytes; false (and the connection closes) when
 * memory runs out. */
static bool stage_reserve(struct kv_conn *c, size_t extra)
{
	struct kv_stage *st = c->stage;

	if (st->n == st->cap) {
		unsigned cap = st->cap ? st->cap * 2 : 16;
		struct kv_piece *pc = realloc(st->pc, cap * sizeof(*pc));
		struct iovec *iov = pc ? realloc(st->iov, cap * sizeof(*iov)) : NULL;

		if (pc)
			st->pc = pc;
		if (!iov)
			goto oom;
		st->iov = iov;
		st->cap = cap;
	}
	if (st->alen + extra > st->acap) {
		size_t cap = (st->acap ? st->acap * 2 : 1024) + extra;
		uint8_t *a = realloc(st->arena, cap);

		if (!a)
			goto oom;
		st->arena = a;
		st->acap = cap;
	}
	return true;
oom:
	c->closing = true;
	return false;
}

static void stage_copy(struct kv_conn *c, const void *p, size_t n)
{
	struct kv_stage *st = c->stage;

	if (!n || !stage_reserve(c, n))
		return;
	/* contiguous with the last copied piece: extend it */
	if (st->n && !st->pc[st->n - 1].ext &&
	    st->pc[st->n - 1].off + st->pc[st->n - 1].len == st->alen)
		st->pc[st->n - 1].len += n;
	else
		st->pc[st->n++] = (struct kv_piece){ NULL, st->alen, n };
	memcpy(st->arena + st->alen, p, n);
	st->alen += n;
	st->bytes += n;
}

void kv_out_iov(struct kv_conn *c, const struct iovec *iov, unsigned n)
{
	if (c->noreply)
		return;
	for (unsigned i = 0; i < n; i++)
		stage_copy(c, iov[i].iov_base, iov[i].iov_len);
}

void kv_out_ref(struct kv_conn *c, const void *hdr, size_t hlen, const uint8_t *val,
		size_t vlen)
{
	struct kv_stage *st = c->stage;

	if (c->noreply)
		return;
	stage_copy(c, hdr, hlen);
	if (vlen && stage_reserve(c, 0)) {
		st->pc[st->n++] = (struct kv_piece){ val, 0, vlen };
		st->bytes += vlen;
	}
}

void kv_out_value(struct kv_conn *c, const char *hdr, size_t hlen, const uint8_t *val,
		  size_t vlen)
{
	if (c->noreply)
		return;
	kv_out_ref(c, hdr, hlen, val, vlen);
	stage_copy(c, "\r\n", 2);
}

/* The last VALUE of a get line and the END after it, in one copy. */
static void out_value_end(struct kv_conn *c, const char *hdr, size_t hlen, const uint8_t *val,
			  size_t vlen)
{
	if (c->noreply)
		return;
	kv_out_ref(c, hdr, hlen, val, vlen);
	stage_copy(c, "\r\nEND\r\n", 7);
}

static void stage_reset(struct kv_conn *c)
{
	c->stage->n = 0;
	c->stage->alen = 0;
	c->stage->bytes = 0;
}

static void stage_free(struct kv_stage *st)
{
	free(st->pc);
	free(st->iov);
	free(st->arena);
	memset(st, 0, sizeof(*st));
}

/* The end of a read: answers that must wait move from the worker's stage to the
 * connection's own (buffers and all: the worker makes new ones when it next needs them);
 * a connection's own stage, once written, is given back. */
static void stage_settle(struct kv_conn *c)
{
	struct kv_stage *ws = &c->p->wx[c->w].stage;

	if (c->stage == ws && ws->n) {
		struct kv_stage t = c->own;

		c->own = *ws;
		*ws = t;
		c->stage = &c->own;
	} else if (c->stage == &c->own && !c->own.n) {
		stage_free(&c->own);
		c->stage = ws;
	}
}

void kv_out_flush(struct kv_conn *c)
{
	struct kv_stage *st = c->stage;
	int rc;

	c->reqs = 0;
	if (st->n) {
		for (unsigned i = 0; i < st->n; i++)
			st->iov[i] = (struct iovec){ st->pc[i].ext ? (void *)st->pc[i].ext :
						     st->arena + st->pc[i].off, st->pc[i].len };
		/* room was checked before each answer was staged: a refusal here means the
		 * connection is gone (or its transport out of buffers): it ends */
		rc = c->out.write(c->out.arg, st->iov, st->n);
		if (rc)
			c->closing = true;
		else
			c->p->ws[c->w].bytes_written += st->bytes;
		stage_reset(c);
	}
	/* This connection holds nothing of any item now, and the worker's other connections
	 * flushed theirs when their reads ended: a quiescent state (QSBR), so what a long
	 * pipeline replaces is reused before the round ends, not after. */
	kv_store_quiesce(c->p->store, c->w);
}

/*
 * memcached writes nothing while it reads a value or swallows one (conn_nread and
 * conn_swallow do not flush), so answers staged before stay until the next flush point.
 * Values cannot wait in their items past this round: copy them into the arena.
 */
static void stage_hold(struct kv_conn *c)
{
	struct kv_stage *st = c->stage;
	size_t ext = 0;

	for (unsigned i = 0; i < st->n; i++)
		ext += st->pc[i].ext ? st->pc[i].len : 0;
	if (ext && !stage_reserve(c, ext))
		return;                               /* closing: out of memory */
	for (unsigned i = 0; i < st->n; i++) {
		if (!st->pc[i].ext)
			continue;
		memcpy(st->arena + st->alen, st->pc[i].ext, st->pc[i].len);
		st->pc[i] = (struct kv_piece){ NULL, st->alen, st->pc[i].len };
		st->alen += st->pc[i].len;
	}
	kv_store_quiesce(c->p->store, c->w);   /* as in kv_out_flush */
}

void kv_out_cull(struct kv_conn *c)
{
	if (c->p->set.split_stable)
		kv_out_flush(c);
	else
		stage_reset(c);
}

void kv_out_str(struct kv_conn *c, const char *s)
{
	struct iovec iov[2] = { { (void *)s, strlen(s) }, { (void *)"\r\n", 2 } };

	kv_out_iov(c, iov, 2);
}

void kv_out_bytes(struct kv_conn *c, const void *p, size_t n)
{
	if (!c->noreply)
		stage_copy(c, p, n);
}

void kv_out_err(struct kv_conn *c, const char *s)
{
	c->noreply = false;
	kv_out_str(c, s);
}

size_t kv_out_room(const struct kv_conn *c)
{
	size_t room = c->out.room(c->out.arg);

	return room > c->stage->bytes ? room - c->stage->bytes : 0;
}

size_t kv_value_reserve(const struct kv_conn *c)
{
	return (size_t)c->p->set.item_size_max + KV_RESP_RESERVE;
}

/* ---- connections ---- */

int kv_proto_init(struct kv_proto *p, struct kv_store *store, const struct kv_settings *set,
		  unsigned n_workers)
{
	memset(p, 0, sizeof(*p));
	p->store = store;
	p->set = *set;
	p->n_workers = n_workers ? n_workers : 1;
	p->ws = aligned_alloc(64, sizeof(*p->ws) * p->n_workers);
	if (!p->ws)
		return -ENOMEM;
	memset(p->ws, 0, sizeof(*p->ws) * p->n_workers);
	p->wx = aligned_alloc(64, sizeof(*p->wx) * p->n_workers);
	if (!p->wx) {
		free(p->ws);
		p->ws = NULL;
		return -ENOMEM;
	}
	memset(p->wx, 0, sizeof(*p->wx) * p->n_workers);
	atomic_init(&p->slab_automove, 1);
	pthread_mutex_init(&p->conns_mu, NULL);
	p->conns_seq = 1;
	p->detail = kv_detail_new();
	p->watch = kv_watch_new();
	if (!p->detail || !p->watch) {
		kv_proto_fini(p);
		return -ENOMEM;
	}
	kv_store_set_evict_hook(store, kv_watch_evicted, p);
	return 0;
}

void kv_proto_fini(struct kv_proto *p)
{
	for (unsigned i = 0; p->wx && i < p->n_workers; i++)
		stage_free(&p->wx[i].stage);
	free(p->wx);
	p->wx = NULL;
	free(p->ws);
	p->ws = NULL;
	kv_detail_free(p->detail);
	p->detail = NULL;
	kv_watch_free(p->watch);
	p->watch = NULL;
	if (p->store)
		kv_store_set_evict_hook(p->store, NULL, NULL);
	pthread_mutex_destroy(&p->conns_mu);
}

struct kv_conn *kv_conn_new(struct kv_proto *p, unsigned w, const struct kv_out *out)
{
	struct kv_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->p = p;
	c->w = c->home = w < p->n_workers ? w : 0;
	c->out = *out;
	c->stage = &p->wx[c->w].stage;
	p->ws[c->w].curr_conns++;
	p->ws[c->w].total_conns++;
	atomic_init(&c->last_cmd, kv_store_now(p->store));
	atomic_init(&c->shown, KV_ST_LINE);
	pthread_mutex_lock(&p->conns_mu);
	c->id = p->conns_seq++;
	c->reg_prev = p->conns_tail;
	if (p->conns_tail)
		p->conns_tail->reg_next = c;
	else
		p->conns_head = c;
	p->conns_tail = c;
	pthread_mutex_unlock(&p->conns_mu);
	return c;
}

/*
 * Flow-group migration (main.c): the connection leaves its worker between rounds, holding
 * nothing of the worker's (its last read ended with its answers written or taken into its
 * own stage, stage_settle), and arrives at worker @w before that one's next round. Between
 * the two it belongs to no worker: a log watcher is not written to (kv_watch_drain).
 */
void kv_conn_leave(struct kv_conn *c)
{
	c->p->ws[c->w].curr_conns--;
	if (c->stage == &c->p->wx[c->w].stage)
		c->stage = NULL;
	kv_watch_set_worker(c, KV_NO_WORKER);
}

void kv_conn_arrive(struct kv_conn *c, unsigned w)
{
	w = w < c->p->n_workers ? w : 0;
	kv_watch_set_worker(c, w);
	c->p->ws[w].curr_conns++;
	if (!c->stage)
		c->stage = &c->p->wx[w].stage;
}

static void conn_rename(struct kv_conn *c, unsigned w)
{
	if (c->stage == &c->p->wx[c->w].stage)   /* empty between reads (stage_settle) */
		c->stage = &c->p->wx[w].stage;
	c->w = w;
}

void kv_conn_visit(struct kv_conn *c, unsigned w)
{
	conn_rename(c, w < c->p->n_workers ? w : c->home);
}

void kv_conn_visit_end(struct kv_conn *c)
{
	conn_rename(c, c->home);
}

void kv_conn_set_peer(struct kv_conn *c, uint32_t addr, uint16_t port)
{
	pthread_mutex_lock(&c->p->conns_mu);
	c->raddr = addr;
	c->rport = port;
	pthread_mutex_unlock(&c->p->conns_mu);
	if (kv_watched(c->p, KV_WATCH_CONNEVENTS))
		kv_watch_conn(c, true);
}

void kv_conn_end(struct kv_conn *c)
{
	if (c->ended)
		return;
	c->ended = true;
	if (c->watching)
		kv_watch_remove(c);
	if (kv_watched(c->p, KV_WATCH_CONNEVENTS))
		kv_watch_conn(c, false);
}

void kv_conn_free(struct kv_conn *c)
{
	if (!c)
		return;
	if (c->nw)
		kv_new_free(c->p->store, c->w, c->nw);
	kv_conn_end(c);
	c->p->ws[c->w].curr_conns--;
	pthread_mutex_lock(&c->p->conns_mu);
	if (c->reg_prev)
		c->reg_prev->reg_next = c->reg_next;
	else
		c->p->conns_head = c->reg_next;
	if (c->reg_next)
		c->reg_next->reg_prev = c->reg_prev;
	else
		c->p->conns_tail = c->reg_prev;
	pthread_mutex_unlock(&c->p->conns_mu);
	stage_free(&c->own);
	free(c->ms);
	free(c);
}

bool kv_conn_closing(const struct kv_conn *c) { return c->closing; }
bool kv_conn_blocked(const struct kv_conn *c) { return c->blocked; }

void kv_expect_value(struct kv_conn *c, struct kv_new *n, uint32_t nbytes)
{
	c->nw = n;
	c->want = c->binary ? nbytes : nbytes + 2;   /* binary: no CRLF on the wire */
	c->got = 0;
	c->st = KV_ST_DATA;
}

void kv_swallow(struct kv_conn *c, uint64_t n)
{
	c->swallow = n;
	c->st = n ? KV_ST_SWALLOW : KV_ST_LINE;
}

/* ---- the get family ---- */

/* One hit: VALUE key flags bytes [cas], the value (room was checked). */
static void get_emit(struct kv_conn *c, const struct kv_item_view *v, bool cas, bool end)
{
	char hdr[KV_KEY_MAX + 80], *p = hdr;

	memcpy(p, "VALUE ", 6);
	p += 6;
	memcpy(p, v->key, v->nkey);
	p += v->nkey;
	*p++ = ' ';
	p = kv_utoa(v->flags, p);
	*p++ = ' ';
	p = kv_utoa(v->nbytes, p);
	if (cas) {
		*p++ = ' ';
		p = kv_utoa(v->cas, p);
	}
	*p++ = '\r';
	*p++ = '\n';
	if (end)
		out_value_end(c, hdr, (size_t)(p - hdr), v->value, v->nbytes);
	else
		kv_out_value(c, hdr, (size_t)(p - hdr), v->value, v->nbytes);
}

static bool get_lookup(struct kv_conn *c, const char *k, size_t nk, bool touch, uint32_t exp,
		       struct kv_item_view *v)
{
	struct kv_wstats *ws = &c->p->ws[c->w];
	bool hit;

	if (touch) {
		ws->cmd_touch++;
		hit = kv_touch(c->p->store, c->w, k, nk, exp, v) == KV_TOUCHED;
		kv_detail_note(c->p, KV_DETAIL_GET, k, nk, hit);
		if (kv_watched(c->p, KV_WATCH_FETCHERS))
			kv_watch_get(c, k, nk, hit ? v : NULL);
		return hit;
	}
	ws->cmd_get++;
	hit = kv_get(c->p->store, c->w, k, nk, v);
	kv_detail_note(c->p, KV_DETAIL_GET, k, nk, hit);
	if (kv_watched(c->p, KV_WATCH_FETCHERS))
		kv_watch_get(c, k, nk, hit ? v : NULL);
	return hit;
}

/* Only spaces in line[@off, @len): nothing after the key just taken. */
static bool blank_from(const char *line, size_t off, size_t len)
{
	while (off < len && line[off] == ' ')
		off++;
	return off == len;
}

/* Next key of a get line from @*off; false at the end. */
static bool next_key(const char *line, size_t len, size_t *off, const char **k, size_t *nk)
{
	size_t i = *off, e;
	const char *sp;

	while (i < len && line[i] == ' ')
		i++;
	if (i == len)
		return false;
	sp = memchr(line + i, ' ', len - i);
	e = sp ? (size_t)(sp - line) : len;
	*k = line + i;
	*nk = e - i;
	*off = e;
	return true;
}

/*
 * A key longer than 250 anywhere in the line: memcached looks up the keys before it, then
 * drops the answers it had built and says bad command line format. So do the lookups
 * (their side effects: touch, LRU) and answer only the error.
 */
static bool get_prescan(struct kv_conn *c, const char *line, size_t len, size_t off, bool touch,
			uint32_t exp)
{
	size_t o = off, nk;
	const char *k;
	struct kv_item_view v;
	bool bad = false;

	while (!bad && next_key(line, len, &o, &k, &nk))
		bad = nk > KV_KEY_MAX;
	if (!bad)
		return true;
	while (next_key(line, len, &off, &k, &nk) && nk <= KV_KEY_MAX)
		get_lookup(c, k, nk, touch, exp, &v);
	kv_out_cull(c);
	kv_out_str(c, "CLIENT_ERROR bad command line format");
	return false;
}

enum get_res { GET_DONE, GET_BLOCKED, GET_BAD_KEY };

/*
 * The keys of line[@off0, @len): each one's VALUE (with its cas for gets), then END when
 * @end. BLOCKED when stopped for room: the same bytes come again and it resumes at the key
 * it stopped at (c->get_resume), so no lookup is repeated. BAD_KEY: a key over 250 bytes,
 * answered with CLIENT_ERROR instead (get_prescan).
 */
static enum get_res get_keys(struct kv_conn *c, const char *line, size_t len, size_t off0,
			     bool cas, bool touch, uint32_t exp, bool end)
{
	struct kv_item_view v;
	size_t off = c->get_resume ? c->get_resume - 1 : off0, nk, at;
	const char *k;

	/* (a rest of the line no longer than a key cannot hold one too long) */
	if (!c->get_resume && len - off > KV_KEY_MAX &&
	    !get_prescan(c, line, len, off, touch, exp))
		return GET_BAD_KEY;
	/* Room for the largest value is checked before each lookup, so a lookup (with its
	 * side effects: touch, LRU, stats) is never repeated when the output is full. */
	for (at = off; next_key(line, len, &off, &k, &nk); at = off) {
		if (kv_out_room(c) < kv_value_reserve(c)) {
			c->get_resume = at + 1;
			return GET_BLOCKED;
		}
		bool last = end && blank_from(line, off, len);
		if (get_lookup(c, k, nk, touch, exp, &v)) {
			get_emit(c, &v, cas, last);
			if (last) {            /* its END went with it */
				c->get_resume = 0;
				return GET_DONE;
			}
		}
	}
	c->get_resume = 0;
	if (end)
		kv_out_line(c, "END");
	return GET_DONE;
}

/* get, gets, gat, gats (and bget): false when stopped for room (the line stays). */
static bool cmd_get(struct kv_conn *c, const char *line, size_t len, struct kv_tok *t, bool cas,
		    bool touch)
{
	uint32_t exp = 0;
	int32_t e;

	if (touch) {
		if (!kv_strtol(t[1].p, t[1].len, &e)) {
			kv_out_str(c, "CLIENT_ERROR invalid exptime argument");
			return true;
		}
		exp = kv_exptime(c, e);
	}
	return get_keys(c, line, len, (size_t)((touch ? t[1].p + t[1].len : t[0].p + t[0].len) - line),
			cas, touch, exp, true) != GET_BLOCKED;
}

/* ---- storage commands ---- */

static void store_failed(struct kv_conn *c, enum kv_result r, const char *k, size_t nk,
			 enum kv_set_mode mode, uint64_t swallow)
{
	struct kv_wstats *ws = &c->p->ws[c->w];
	bool unlink_old = mode == KV_SET;

	if (kv_watched(c->p, KV_WATCH_MUTATIONS))
		kv_watch_store(c, k, nk, mode, r, 0, 0, 0);

	if (r == KV_TOO_LARGE) {
		ws->store_too_large++;
		kv_out_str(c, "SERVER_ERROR object too large for cache");
	} else {
		ws->store_no_memory++;
		kv_out_str(c, "SERVER_ERROR out of memory storing object");
	}
	/* memcached: a failed set must not leave the old value readable */
	if (unlink_old)
		kv_unlink(c->p->store, c->w, k, nk);
	kv_swallow(c, swallow);
}

bool kv_set_noreply(struct kv_conn *c, const struct kv_tok *t, size_t nt)
{
	if (kv_tok_is(&t[nt - 2], "noreply"))
		c->noreply = true;
	return c->noreply;
}

/* set, add, replace, append, prepend, cas: the line; the value follows. */
static void cmd_update(struct kv_conn *c, struct kv_tok *t, size_t nt, enum kv_set_mode mode)
{
	uint32_t flags;
	int32_t exp, vlen;
	uint64_t cas = 0;
	enum kv_result r;
	struct kv_new *n;

	kv_set_noreply(c, t, nt);
	if (t[1].len > KV_KEY_MAX ||
	    !(kv_strtoul(t[2].p, t[2].len, &flags) && kv_strtol(t[3].p, t[3].len, &exp) &&
	      kv_strtol(t[4].p, t[4].len, &vlen)) ||
	    (mode == KV_CAS && !kv_strtoull(t[5].p, t[5].len, &cas)) ||
	    vlen < 0 || vlen > INT_MAX - 2) {
		kv_out_str(c, "CLIENT_ERROR bad command line format");
		return;
	}
	kv_detail_note(c->p, KV_DETAIL_SET, t[1].p, t[1].len, false);
	n = kv_alloc(c->p->store, c->w, t[1].p, t[1].len, flags, kv_exptime(c, exp),
		     (uint32_t)vlen, &r);
	if (!n) {
		store_failed(c, r, t[1].p, t[1].len, mode, (uint64_t)vlen + 2);
		return;
	}
	c->mode = mode;
	c->cas_in = cas;
	c->meta_set = false;
	kv_expect_value(c, n, (uint32_t)vlen);
}

/* Link the value that has come into @n (c->mode, c->cas_in), telling the mutation
 * watchers; @n is gone after. */
void kv_link_value(struct kv_conn *c, struct kv_new *n, uint32_t nbytes,
			   enum kv_result *r, uint64_t *cas)
{
	if (!kv_watched(c->p, KV_WATCH_MUTATIONS)) {
		*r = kv_store_item(c->p->store, c->w, n, c->mode, c->cas_in, cas);
	} else {
		char k[KV_KEY_MAX];
		size_t nk = kv_new_key(n, k);
		unsigned cls = kv_new_clsid(n);
		uint32_t exp = kv_new_exptime(n);

		*r = kv_store_item(c->p->store, c->w, n, c->mode, c->cas_in, cas);
		kv_watch_store(c, k, nk, c->mode, *r, exp, nbytes, cls);
	}
	c->nw = NULL;
}

/* The value is in: memcached's complete_nread_ascii. */
static void value_done(struct kv_conn *c)
{
	const uint8_t *d = kv_new_data(c->nw);
	uint32_t nb = c->want - 2;
	uint64_t cas = 0;
	enum kv_result r;

	c->st = KV_ST_LINE;
	c->p->ws[c->w].cmd_set++;
	if (d[nb] != '\r' || d[nb + 1] != '\n') {
		kv_new_free(c->p->store, c->w, c->nw);
		c->nw = NULL;
		if (c->meta_set)
			c->noreply = false;
		kv_out_str(c, "CLIENT_ERROR bad data chunk");
		return;
	}
	kv_link_value(c, c->nw, nb, &r, &cas);
	if (c->meta_set) {
		kv_meta_set_done(c, r, cas);
		return;
	}
	switch (r) {
	case KV_STORED: kv_out_line(c, "STORED"); break;
	case KV_EXISTS: kv_out_str(c, "EXISTS"); break;
	case KV_NOT_FOUND: kv_out_str(c, "NOT_FOUND"); break;
	default: kv_out_str(c, "NOT_STORED"); break;   /* append's copy found no memory */
	}
}

/* ---- the other classic commands ---- */

static void cmd_arith(struct kv_conn *c, struct kv_tok *t, size_t nt, bool incr)
{
	char buf[24];
	uint64_t delta, v;

	kv_set_noreply(c, t, nt);
	if (t[1].len > KV_KEY_MAX) {
		kv_out_str(c, "CLIENT_ERROR bad command line format");
		return;
	}
	if (!kv_strtoull(t[2].p, t[2].len, &delta)) {
		kv_out_str(c, "CLIENT_ERROR invalid numeric delta argument");
		return;
	}
	switch (kv_arith(c->p->store, c->w, t[1].p, t[1].len, incr, delta, &v, NULL)) {
	case KV_NOT_FOUND:
		kv_out_str(c, "NOT_FOUND");
		break;
	case KV_NON_NUMERIC:
		kv_out_str(c, "CLIENT_ERROR cannot increment or decrement non-numeric value");
		break;
	case KV_NO_MEMORY:
	case KV_TOO_LARGE:
		kv_out_str(c, "SERVER_ERROR out of memory");
		break;
	default:
		*kv_utoa(v, buf) = '\0';
		kv_out_str(c, buf);
	}
}

static void cmd_delete(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	if (nt > 3) {
		bool zero = kv_tok_is(&t[2], "0"), nr = kv_set_noreply(c, t, nt);

		if (!((nt == 4 && (zero || nr)) || (nt == 5 && zero && nr))) {
			kv_out_str(c, "CLIENT_ERROR bad command line format.  "
				      "Usage: delete <key> [noreply]");
			return;
		}
	}
	if (t[1].len > KV_KEY_MAX) {
		kv_out_str(c, "CLIENT_ERROR bad command line format");
		return;
	}
	kv_detail_note(c->p, KV_DETAIL_DEL, t[1].p, t[1].len, false);
	if (kv_delete(c->p->store, c->w, t[1].p, t[1].len, 0) == KV_DELETED)
		kv_out_str(c, "DELETED");
	else
		kv_out_str(c, "NOT_FOUND");
}

static void cmd_touch(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	int32_t e;

	kv_set_noreply(c, t, nt);
	if (t[1].len > KV_KEY_MAX) {
		kv_out_str(c, "CLIENT_ERROR bad command line format");
		return;
	}
	if (!kv_strtol(t[2].p, t[2].len, &e)) {
		kv_out_str(c, "CLIENT_ERROR invalid exptime argument");
		return;
	}
	c->p->ws[c->w].cmd_touch++;
	if (kv_touch(c->p->store, c->w, t[1].p, t[1].len, kv_exptime(c, e), NULL) == KV_TOUCHED)
		kv_out_str(c, "TOUCHED");
	else
		kv_out_str(c, "NOT_FOUND");
}

/* ---- dispatch: memcached's process_command_ascii ---- */

/* Token-count checks of memcached's WANT_TOKENS*: false after answering ERROR. */
bool kv_want(struct kv_conn *c, size_t nt, size_t lo, size_t hi)
{
	if (nt >= lo && nt <= hi)
		return true;
	kv_out_str(c, "ERROR");
	return false;
}

bool kv_want_or(struct kv_conn *c, size_t nt, size_t a, size_t b)
{
	if (nt == a || nt == b)
		return true;
	kv_out_str(c, "ERROR");
	return false;
}

static bool dispatch_update(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	static const struct { const char *name; enum kv_set_mode mode; } cmds[] = {
		{ "set", KV_SET }, { "add", KV_ADD }, { "append", KV_APPEND },
		{ "replace", KV_REPLACE }, { "prepend", KV_PREPEND }, { "cas", KV_CAS },
	};

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (!kv_tok_is(&t[0], cmds[i].name))
			continue;
		if (cmds[i].mode == KV_CAS ? kv_want_or(c, nt, 7, 8) : kv_want_or(c, nt, 6, 7))
			cmd_update(c, t, nt, cmds[i].mode);
		return true;
	}
	return false;
}

/* The commands other than gets, storage and administration; false if @t[0] is none. */
static bool dispatch_misc(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	if (kv_tok_is(&t[0], "incr") || kv_tok_is(&t[0], "decr")) {
		if (kv_want_or(c, nt, 4, 5))
			cmd_arith(c, t, nt, t[0].p[0] == 'i');
	} else if (kv_tok_is(&t[0], "delete")) {
		if (kv_want(c, nt, 3, 5))
			cmd_delete(c, t, nt);
	} else if (kv_tok_is(&t[0], "touch")) {
		if (kv_want_or(c, nt, 4, 5))
			cmd_touch(c, t, nt);
	} else if (kv_tok_is(&t[0], "watch")) {
		kv_watch_command(c, t, nt);
	} else if (kv_tok_is(&t[0], "quit")) {
		kv_out_flush(c);
		c->closing = true;
	} else {
		return kv_admin_command(c, t, nt);
	}
	return true;
}

/* One request line; false when it must be shown again (no output room). Never inlined:
 * bench/request_cost.py counts the requests by its calls. */
static fp_noinline bool process_line(struct kv_conn *c, const char *line, size_t len)
{
	struct kv_tok t[KV_MAX_TOKENS];
	size_t nt = kv_tokenize(line, len, t, KV_MAX_TOKENS);
	char first;

	c->ncmds++;
	if (nt < 2 || t[0].len < 2) {
		kv_out_str(c, "ERROR");
		return true;
	}
	first = t[0].p[0];
	if (first == 'm' && t[0].len == 2) {
		return kv_meta_command(c, t, nt);
	} else if (first == 'g' || kv_tok_is(&t[0], "bget")) {
		bool cas = kv_tok_is(&t[0], "gets") || kv_tok_is(&t[0], "gats");
		bool touch = kv_tok_is(&t[0], "gat") || kv_tok_is(&t[0], "gats");

		if (!kv_want(c, nt, 3, SIZE_MAX))
			return true;
		if (cas || touch || kv_tok_is(&t[0], "get") || kv_tok_is(&t[0], "bget"))
			return cmd_get(c, line, len, t, cas, touch);
		kv_out_str(c, "ERROR");
	} else if (kv_tok_is(&t[0], "stats")) {
		return kv_stats_command(c, t, nt);
	} else if (kv_tok_is(&t[0], "lru_crawler")) {
		return kv_lru_crawler_command(c, t, nt);
	} else if (!dispatch_update(c, t, nt) && !dispatch_misc(c, t, nt)) {
		/* memcached hangs up on what looks like HTTP, only here, after every
		 * command it knows; anything else unknown is an ERROR */
		if (!strchr("sacidt", first) && t[nt - 2].len >= 5 &&
		    !memcmp(t[nt - 2].p, "HTTP/", 5)) {
			kv_out_cull(c);
			c->closing = true;
		} else {
			kv_out_str(c, "ERROR");
		}
	}
	return true;
}

/* ---- feeding a connection (framing a line: text.c) ---- */

/* The end of the last whole key in d[@from, @len): the last space; 0 if none. */
static size_t last_space(const uint8_t *d, size_t from, size_t len)
{
	while (len > from && d[len - 1] != ' ')
		len--;
	return len > from ? len - 1 : 0;
}

static size_t get_split_close(struct kv_conn *c)
{
	c->p->ws[c->w].conn_closed_bad++;     /* one key longer than KV_GET_LINE_MAX */
	kv_out_cull(c);
	c->closing = true;
	c->mget = 0;
	return 0;
}

/* A piece of a get line served: go on with the next piece, or (a key over 250 bytes was
 * answered with CLIENT_ERROR) drop the rest of the line. */
static size_t get_piece_done(struct kv_conn *c, enum get_res r, size_t used)
{
	if (r == GET_BLOCKED) {
		c->blocked = true;
		return 0;
	}
	if (r == GET_BAD_KEY)
		c->mget = KV_MGET_SKIP;
	return used;
}

/*
 * A get or gets line longer than KV_GET_LINE_MAX (memcached grows its read buffer for
 * these without bound): serve the whole keys that have come and consume them; the rest
 * of the line comes to feed_get_more() as more keys of the same command. A key over 250
 * bytes in a later piece can no longer withdraw the answers sent for earlier ones (as
 * memcached, which sees the whole line, does): that piece is answered CLIENT_ERROR and
 * the rest of the line is dropped.
 */
static size_t feed_get_split(struct kv_conn *c, const uint8_t *d, size_t len)
{
	size_t i = 0, cut;
	enum get_res r;
	bool cas;

	while (i < len && d[i] == ' ')
		i++;
	cas = d[i + 3] == 's';                /* frame_line let only "get " and "gets " here */
	i += cas ? 5 : 4;
	cut = last_space(d, i, len);
	if (!cut)
		return get_split_close(c);
	if (!c->get_resume)
		c->ncmds++;
	c->noreply = false;                   /* a get answers, whatever came before */
	r = get_keys(c, (const char *)d, cut, i, cas, false, 0, false);
	if (r != GET_BLOCKED) {               /* shown again if blocked: still the first piece */
		c->scanned = 0;
		c->mget = cas ? KV_MGET_GETS : KV_MGET_GET;
	}
	return get_piece_done(c, r, cut);
}

/* The rest of a get line served in pieces: more whole keys, or the last ones and END. */
static size_t feed_get_more(struct kv_conn *c, const uint8_t *d, size_t len)
{
	size_t win = len < KV_GET_LINE_MAX ? len : KV_GET_LINE_MAX, n, cut;
	const uint8_t *nl = memchr(d, '\n', win), *nul;
	bool cas = c->mget == KV_MGET_GETS;
	enum get_res r;

	if (c->mget == KV_MGET_SKIP) {
		if (!nl)
			return len;
		c->mget = 0;
		return (size_t)(nl - d) + 1;
	}
	if (kv_out_room(c) < KV_RESP_RESERVE) {
		c->blocked = true;
		return 0;
	}
	c->noreply = false;
	if (nl) {
		n = (size_t)(nl - d);
		if (n && d[n - 1] == '\r')
			n--;
		if ((nul = memchr(d, '\0', n)))
			n = (size_t)(nul - d);
		r = get_keys(c, (const char *)d, n, 0, cas, false, 0, true);
		if (r == GET_BLOCKED) {
			c->blocked = true;
			return 0;
		}
		c->mget = 0;
		return (size_t)(nl - d) + 1;
	}
	if (len < KV_GET_LINE_MAX)
		return 0;                     /* more of the line to come */
	cut = last_space(d, 0, len);
	if (!cut)
		return get_split_close(c);
	return get_piece_done(c, get_keys(c, (const char *)d, cut, 0, cas, false, 0, false), cut);
}

/* KV_ST_LINE: returns bytes consumed (0: need more, or blocked/closing). */
static size_t feed_line(struct kv_conn *c, const uint8_t *d, size_t len)
{
	size_t eol, n;
	const uint8_t *nul;

	if (c->mget)
		return feed_get_more(c, d, len);
	switch (frame_line(d, len, c->scanned, &eol, c->p->set.split_stable)) {
	case KV_FRAME_NEED_MORE:
		c->scanned = len;
		return 0;
	case KV_FRAME_GET_SPLIT:
		if (kv_out_room(c) < KV_RESP_RESERVE) {
			c->blocked = true;
			return 0;
		}
		return feed_get_split(c, d, len);
	case KV_FRAME_CLOSE:
		c->p->ws[c->w].conn_closed_bad++;
		kv_out_cull(c);
		c->closing = true;
		return 0;
	default:
		break;
	}
	if (kv_out_room(c) < KV_RESP_RESERVE) {
		c->blocked = true;
		return 0;
	}
	c->scanned = 0;
	n = eol > 1 && d[eol - 1] == '\r' ? eol - 1 : eol;
	if ((nul = memchr(d, '\0', n)))            /* memcached's strlen() */
		n = (size_t)(nul - d);
	c->noreply = false;
	atomic_store_explicit(&c->last_cmd, kv_store_now(c->p->store), memory_order_relaxed);
	if (kv_watched(c->p, KV_WATCH_RAWCMDS))
		kv_watch_rawcmd(c, (const char *)d, n);
	if (!process_line(c, (const char *)d, n)) {
		c->blocked = true;
		return 0;
	}
	if (++c->reqs >= KV_REQS_PER_EVENT)
		kv_out_flush(c);
	return eol + 1;
}

uint64_t kv_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* KV_ST_DATA: copy what has come of the value into its item. A value that does not come
 * in one piece gets a deadline: slow uploads hold memory that cannot be evicted. */
static size_t feed_data(struct kv_conn *c, const uint8_t *d, size_t len)
{
	size_t n = c->want - c->got;

	if (n > len)
		n = len;
	memcpy(kv_new_data(c->nw) + c->got, d, n);
	c->got += (uint32_t)n;
	if (c->got == c->want) {
		c->upload_deadline_ns = 0;
		if (c->binary)
			kv_bin_value_done(c);
		else
			value_done(c);
	} else if (!c->upload_deadline_ns) {
		c->upload_deadline_ns = kv_mono_ns() + KV_UPLOAD_GRACE_S * 1000000000ull +
					(uint64_t)c->want * 1000000000ull / KV_UPLOAD_MIN_BPS;
	}
	return n;
}

bool kv_conn_upload_overdue(const struct kv_conn *c, uint64_t now_ns)
{
	return c->st == KV_ST_DATA && c->upload_deadline_ns && now_ns > c->upload_deadline_ns;
}

size_t kv_conn_feed(struct kv_conn *c, const uint8_t *data, size_t len)
{
	size_t pos = 0, n;

	c->blocked = false;
	if (c->watching)
		return len;   /* memcached stops reading a watcher; its bytes mean nothing */
	/* memcached's try_read_command_negotiate: the first byte a connection sends picks
	 * its protocol for good */
	if (!c->negotiated && len) {
		c->negotiated = true;
		c->binary = data[0] == KV_BIN_REQ_MAGIC;
	}
	while (pos < len && !c->closing && !c->blocked && !c->watching) {
		enum kv_cstate was = c->st;

		switch (c->st) {
		case KV_ST_LINE:
			n = c->binary ? kv_bin_feed(c, data + pos, len - pos) :
					feed_line(c, data + pos, len - pos);
			break;
		case KV_ST_DATA:
			n = feed_data(c, data + pos, len - pos);
			break;
		default:
			n = len - pos < c->swallow ? len - pos : (size_t)c->swallow;
			kv_swallow(c, c->swallow - n);
			break;
		}
		/* nothing taken and still reading lines: the rest waits for more input. A
		 * pass that took nothing but moved on (an empty binary value completing) goes
		 * on to what follows it in this read. */
		if (!n && was == KV_ST_LINE && c->st == KV_ST_LINE)
			break;
		pos += n;
		/* answers (and memory reuse) must not depend on where reads fall */
		if (c->p->set.split_stable)
			kv_out_flush(c);
	}
	if (c->st == KV_ST_LINE || c->closing || c->p->set.split_stable)
		kv_out_flush(c);
	else
		stage_hold(c);
	stage_settle(c);
	if (c->watching)
		pos = len;   /* what followed watch in this read means nothing either */
	c->p->ws[c->w].bytes_read += pos;
	/* for stats conns on other workers: the state as this read leaves it */
	uint8_t shown = c->closing ? KV_SHOWN_CLOSING : (uint8_t)c->st;
	if (atomic_load_explicit(&c->shown, memory_order_relaxed) != shown)
		atomic_store_explicit(&c->shown, shown, memory_order_relaxed);
	return pos;
}
