/* watch.c: memcached's log watchers: `watch fetchers|mutations|evictions|connevents|rawcmds`. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "proto.h"

/*
 * A connection that sends `watch [kinds]` gets OK and, from then on, a line per event of
 * those kinds in memcached 1.6's format (logger.c: ts=SEC.USEC gid=N type=... key=...,
 * keys URI-encoded, "\n"-terminated); what it sends afterwards is ignored. Events come
 * from any worker: each is formatted once and appended to every interested watcher's
 * buffer (KV_WATCH_BUF bytes, memcached's LOGGER_WATCHER_BUF_SIZE) under one mutex;
 * past that, lines are skipped and counted, and the watcher is told `skipped=N` once it
 * has drained, as memcached does. The watcher's own worker moves its buffer into the
 * connection's output between rounds (kv_watch_drain). With no watcher, an event costs
 * one relaxed load. sysevents and the proxy kinds are accepted and have no events here.
 */

#define KV_WATCH_BUF (256u << 10)

struct kv_watcher {
	struct kv_conn *c;
	uint16_t kinds;
	char *buf;
	size_t len;
	uint64_t skipped;
};

struct kv_watch {
	pthread_mutex_t mu;
	struct kv_watcher w[KV_WATCHERS_MAX];
	unsigned n;
	_Atomic uint64_t gid;
};

struct kv_watch *kv_watch_new(void)
{
	struct kv_watch *wt = calloc(1, sizeof(*wt));

	if (wt)
		pthread_mutex_init(&wt->mu, NULL);
	return wt;
}

void kv_watch_free(struct kv_watch *wt)
{
	if (!wt)
		return;
	for (unsigned i = 0; i < wt->n; i++)
		free(wt->w[i].buf);
	pthread_mutex_destroy(&wt->mu);
	free(wt);
}

static void update_mask(struct kv_proto *p)
{
	uint16_t m = 0;

	for (unsigned i = 0; i < p->watch->n; i++)
		m |= p->watch->w[i].kinds;
	atomic_store_explicit(&p->watch_mask, m, memory_order_relaxed);
}

int kv_watch_add(struct kv_conn *c, uint16_t kinds)
{
	struct kv_watch *wt = c->p->watch;
	int rc = 0;

	pthread_mutex_lock(&wt->mu);
	if (wt->n == KV_WATCHERS_MAX) {
		rc = -EMFILE;
	} else if (!(wt->w[wt->n].buf = malloc(KV_WATCH_BUF))) {
		rc = -ENOMEM;
	} else {
		wt->w[wt->n].c = c;
		wt->w[wt->n].kinds = kinds;
		wt->w[wt->n].len = 0;
		wt->w[wt->n].skipped = 0;
		wt->n++;
		c->watching = true;
		update_mask(c->p);
	}
	pthread_mutex_unlock(&wt->mu);
	return rc;
}

void kv_watch_remove(struct kv_conn *c)
{
	struct kv_watch *wt = c->p->watch;

	pthread_mutex_lock(&wt->mu);
	for (unsigned i = 0; i < wt->n; i++) {
		if (wt->w[i].c != c)
			continue;
		free(wt->w[i].buf);
		wt->w[i] = wt->w[--wt->n];
		break;
	}
	update_mask(c->p);
	pthread_mutex_unlock(&wt->mu);
}

void kv_watch_set_worker(struct kv_conn *c, unsigned w)
{
	struct kv_watch *wt = c->p->watch;

	if (!c->watching || !wt) {
		c->w = c->home = w;
		return;
	}
	pthread_mutex_lock(&wt->mu);
	c->w = c->home = w;
	pthread_mutex_unlock(&wt->mu);
}

void kv_watch_drain(struct kv_proto *p, unsigned w)
{
	struct kv_watch *wt = p->watch;

	if (!atomic_load_explicit(&p->watch_mask, memory_order_relaxed))
		return;
	pthread_mutex_lock(&wt->mu);
	for (unsigned i = 0; i < wt->n; i++) {
		struct kv_watcher *x = &wt->w[i];
		struct kv_conn *c = x->c;
		char note[48];
		struct iovec iov[2] = { { x->buf, x->len }, { note, 0 } };

		/* @w's own watchers, and (--sched steal) none whose read runs elsewhere now */
		if (c->home != w || (c->out.busy && c->out.busy(c->out.arg)) || c->closing ||
		    (!x->len && !x->skipped))
			continue;
		if (x->skipped && x->len + sizeof(note) <= c->out.room(c->out.arg))
			iov[1].iov_len = (size_t)snprintf(note, sizeof(note), "skipped=%llu\n",
							  (unsigned long long)x->skipped);
		if (x->len + iov[1].iov_len > c->out.room(c->out.arg))
			continue;   /* the watcher reads slowly: its buffer fills, lines skip */
		if (c->out.write(c->out.arg, iov, 2) == 0) {
			x->len = 0;
			x->skipped = iov[1].iov_len ? 0 : x->skipped;
		} else {
			c->closing = true;   /* gone: its worker frees it (main.c) */
		}
	}
	pthread_mutex_unlock(&wt->mu);
}

/* memcached's uriencode: keys may hold any byte. */
static size_t uriencode(const char *k, size_t n, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < n && o + 3 < cap; i++) {
		unsigned char ch = (unsigned char)k[i];

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = '\0';
	return o;
}

/* One event line (after "ts=... gid=N "), to every watcher of @kind. */
static void __attribute__((format(printf, 3, 4))) emit(struct kv_proto *p, uint16_t kind,
						       const char *fmt, ...)
{
	struct kv_watch *wt = p->watch;
	char line[1024];
	struct timeval tv;
	va_list ap;
	int n, m;

	gettimeofday(&tv, NULL);
	n = snprintf(line, sizeof(line), "ts=%lld.%d gid=%llu ", (long long)tv.tv_sec,
		     (int)tv.tv_usec,
		     (unsigned long long)atomic_fetch_add_explicit(&wt->gid, 1,
								    memory_order_relaxed) + 1);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = m < 0 ? n : n + m >= (int)sizeof(line) - 1 ? (int)sizeof(line) - 2 : n + m;
	line[n++] = '\n';
	pthread_mutex_lock(&wt->mu);
	for (unsigned i = 0; i < wt->n; i++) {
		struct kv_watcher *x = &wt->w[i];

		if (!(x->kinds & kind))
			continue;
		if (x->len + (size_t)n > KV_WATCH_BUF) {
			x->skipped++;
			continue;
		}
		memcpy(x->buf + x->len, line, (size_t)n);
		x->len += (size_t)n;
	}
	pthread_mutex_unlock(&wt->mu);
}

void kv_watch_get(struct kv_conn *c, const char *key, size_t nkey, const struct kv_item_view *v)
{
	char k[KV_KEY_MAX * 3 + 1];

	uriencode(key, nkey, k, sizeof(k));
	emit(c->p, KV_WATCH_FETCHERS, "type=item_get key=%s status=%s clsid=%u cfd=%llu size=%u",
	     k, v ? "found" : "not_found", v ? v->clsid : 0, (unsigned long long)c->id,
	     v ? v->nbytes : 0);
}

void kv_watch_store(struct kv_conn *c, const char *key, size_t nkey, enum kv_set_mode mode,
		    enum kv_result r, uint32_t exptime, uint32_t nbytes, unsigned clsid)
{
	static const char *const cmd[] = {
		[KV_SET] = "set", [KV_ADD] = "add", [KV_REPLACE] = "replace",
		[KV_APPEND] = "append", [KV_PREPEND] = "prepend", [KV_CAS] = "cas",
		[KV_CAS_STALE] = "cas",
	};
	const char *st;
	char k[KV_KEY_MAX * 3 + 1];
	uint32_t now = kv_store_now(c->p->store);

	switch (r) {
	case KV_STORED: st = "stored"; break;
	case KV_EXISTS: st = "exists"; break;
	case KV_NOT_FOUND: st = "not_found"; break;
	case KV_TOO_LARGE: st = "too_large"; break;
	case KV_NO_MEMORY: st = "no_memory"; break;
	default: st = "not_stored"; break;
	}
	uriencode(key, nkey, k, sizeof(k));
	/* memcached: the seconds left, 0 when it never expires */
	emit(c->p, KV_WATCH_MUTATIONS,
	     "type=item_store key=%s status=%s cmd=%s ttl=%u clsid=%u cfd=%llu size=%u", k, st,
	     cmd[mode], exptime > now ? exptime - now : 0u, clsid, (unsigned long long)c->id,
	     nbytes);
}

void kv_watch_evicted(void *arg, const struct kv_evicted *e)
{
	struct kv_proto *p = arg;
	char k[KV_KEY_MAX * 3 + 1];

	if (!(atomic_load_explicit(&p->watch_mask, memory_order_relaxed) & KV_WATCH_EVICTIONS))
		return;
	uriencode(e->key, e->nkey, k, sizeof(k));
	emit(p, KV_WATCH_EVICTIONS, "type=eviction key=%s fetch=%s ttl=%lld la=%u clsid=%u size=%u",
	     k, e->fetched ? "yes" : "no", (long long)e->ttl, e->idle, e->cls, e->nbytes);
}

void kv_watch_conn(struct kv_conn *c, bool opened)
{
	char ip[KV_IPV4_STR];

	emit(c->p, KV_WATCH_CONNEVENTS, "type=%s rip=%s rport=%u transport=tcp %scfd=%llu",
	     opened ? "conn_new" : "conn_close", kv_ipv4_str(c->raddr, ip), c->rport,
	     opened ? "" : "reason=normal ", (unsigned long long)c->id);
}

void kv_watch_rawcmd(struct kv_conn *c, const char *line, size_t len)
{
	emit(c->p, KV_WATCH_RAWCMDS, "<%llu %.*s", (unsigned long long)c->id,
	     (int)(len > 512 ? 512 : len), line);
}

/* watch [kinds] (memcached's process_watch_command). */
void kv_watch_command(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	static const struct { const char *name; uint16_t kind; } kinds[] = {
		{ "rawcmds", KV_WATCH_RAWCMDS }, { "evictions", KV_WATCH_EVICTIONS },
		{ "fetchers", KV_WATCH_FETCHERS }, { "mutations", KV_WATCH_MUTATIONS },
		{ "sysevents", KV_WATCH_SYSEVENTS }, { "connevents", KV_WATCH_CONNEVENTS },
		{ "proxyreqs", KV_WATCH_PROXY }, { "proxyevents", KV_WATCH_PROXY },
		{ "proxyuser", KV_WATCH_PROXY },
	};
	uint16_t f = 0;

	kv_set_noreply(c, t, nt);
	if (c->stage->n) {
		kv_out_str(c, "ERROR cannot pipeline other commands before watch");
		return;
	}
	for (size_t x = 1; x + 1 < nt; x++) {
		size_t i;

		for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
			if (kv_tok_is(&t[x], kinds[i].name))
				break;
		if (i == sizeof(kinds) / sizeof(kinds[0])) {
			kv_out_str(c, "ERROR");
			return;
		}
		f |= kinds[i].kind;
	}
	if (nt <= 2)
		f = KV_WATCH_FETCHERS;
	switch (kv_watch_add(c, f)) {
	case 0:
		c->noreply = false;
		kv_out_str(c, "OK");
		break;
	case -EMFILE:
		kv_out_str(c, "WATCHER_TOO_MANY log watcher limit reached");
		break;
	default:
		kv_out_str(c, "WATCHER_FAILED failed to add log watcher");
		break;
	}
}
