/* proto.h: fp-kv's connection-level protocol: one connection's state, fed bytes, answering through an output callback. */
#pragma once

#include <stdbool.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kv.h"

/*
 * The memcached text and meta protocols as memcached 1.6.18 speaks them, runtime-free so
 * a test or a fuzzer drives a connection by hand:
 *
 *   struct kv_conn *c = kv_conn_new(proto, worker, &out);
 *   used = kv_conn_feed(c, bytes, len);   // the rest is shown again later, with more
 *
 * feed() consumes what it has acted on and leaves the rest: an incomplete request line,
 * or a request it cannot answer yet because the output has no room (kv_conn_blocked();
 * the caller shows the same bytes again once the output has drained). A value is copied
 * into its item as it arrives and consumed, never buffered whole in the connection.
 *
 * Framing follows memcached's read loop (memcached.c, try_read_command_ascii): a request
 * line ends at '\n' (one '\r' before it is dropped) and stops at a NUL byte; a request
 * whose line shows no '\n' within KV_LINE_MAX bytes closes the connection, except a
 * get/gets, whose line may grow without bound as memcached's does: past KV_GET_LINE_MAX
 * it is served in pieces, the whole keys that have come, then the rest as it comes, END
 * at the line's end (a key longer than KV_GET_LINE_MAX still closes the connection).
 * Like memcached's, the decision to close is
 * taken on the bytes available when it is fed (memcached: one read), so a line between
 * KV_LINE_MAX and KV_RBUF_SIZE bytes is served when it arrives whole.
 */

#define KV_LINE_MAX      2048              /* memcached: no '\n' in 2 KiB read: close */
#define KV_RBUF_SIZE     16384             /* memcached's read buffer: a line must show
					    * its '\n' within this many bytes */
#define KV_GET_LINE_MAX  (1u << 20)        /* a multiget line held whole; longer ones
					    * are served in pieces (memcached: unbounded) */
#define KV_RESP_RESERVE  2048              /* output room any one-line answer fits in */
#define KV_VERSION       "1.6.18"          /* what version and stats report */

/* The connection's output. write() takes the @n pieces whole or not at all: 0, -ENOBUFS
 * (nothing written) or -EPIPE (gone: the connection stops). room() is how many bytes
 * write() would take now; feed() asks before any command that changes the store, so an
 * answer never waits behind its own side effect. */
struct kv_out {
	int (*write)(void *arg, const struct iovec *iov, unsigned n);
	size_t (*room)(void *arg);
	void *arg;
	/* Optional (--sched steal): on the connection's own worker, outside its reads:
	 * whether a read of it is queued or running elsewhere, so that nothing else may
	 * write to it now (a log watcher's drain waits). */
	bool (*busy)(void *arg);
};

/* What stats settings reports and the protocol obeys; main.c fills it from the command line. */
struct kv_settings {
	uint64_t maxbytes;
	unsigned maxconns;
	uint16_t tcpport, udpport;
	const char *inter;           /* -l, or NULL */
	double factor;
	unsigned chunk_size;
	unsigned num_threads;
	bool use_cas, evict;
	uint32_t item_size_max;
	unsigned hashpower_init;
	bool flush_enabled;
	/* Tests and fuzzing: answers that do not depend on how the input was split. A line
	 * must show its '\n' within KV_LINE_MAX + 1 bytes (memcached decides on whatever one
	 * read brought); answers are never dropped (memcached drops those of the current
	 * batch when a get names a too-long key or when it hangs up) nor held while a value
	 * arrives (memcached writes nothing in conn_nread and conn_swallow). */
	bool split_stable;
};

/* Per-worker counters (plain, summed when stats reads them). */
struct kv_wstats {
	uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta;
	uint64_t store_too_large, store_no_memory, bytes_read, bytes_written;
	uint64_t curr_conns, total_conns, conn_closed_bad;
	uint64_t out_bytes;          /* answers not yet taken by the transport (every tick) */
} __attribute__((aligned(64)));

/* Server-wide: the store, the settings, the counters of every worker. */
struct kv_proto {
	struct kv_store *store;
	struct kv_settings set;
	int verbose;                 /* -v count; the verbosity command sets it (racy by design:
				      * a log level) */
	uint64_t started_unix;       /* process start, for stats time and uptime */
	unsigned n_workers;
	struct kv_wstats *ws;        /* n_workers of them */
	struct kv_wscratch *wx;      /* n_workers of them */
	_Atomic unsigned slab_automove; /* what `slabs automove` last set (memcached: 1) */
	_Atomic bool detail_on;      /* stats detail on: count by key prefix (detail.c) */
	struct kv_detail *detail;
	/* log watchers (watch.c): the kinds any of them wants, and their buffers */
	_Atomic uint16_t watch_mask;
	struct kv_watch *watch;
	/* every connection, for stats conns: in order of arrival, under @conns_mu */
	pthread_mutex_t conns_mu;
	struct kv_conn *conns_head, *conns_tail;
	uint64_t conns_seq;          /* the next connection's number */
};

/* watch.c: memcached's log watchers (`watch fetchers mutations ...`). */
#define KV_WATCHERS_MAX      20          /* memcached's WATCHER_LIMIT */
#define KV_WATCH_SYSEVENTS   (1u << 1)   /* memcached's LOG_* bits */
#define KV_WATCH_FETCHERS    (1u << 2)
#define KV_WATCH_MUTATIONS   (1u << 3)
#define KV_WATCH_CONNEVENTS  (1u << 5)
#define KV_WATCH_EVICTIONS   (1u << 6)
#define KV_WATCH_RAWCMDS     (1u << 9)
#define KV_WATCH_PROXY       (1u << 10)
struct kv_watch *kv_watch_new(void);
void kv_watch_free(struct kv_watch *wt);
/* Is any watcher after @kind? One relaxed load. */
static inline bool kv_watched(const struct kv_proto *p, unsigned kind)
{
	return atomic_load_explicit(&p->watch_mask, memory_order_relaxed) & kind;
}

/* detail.c: memcached's per-prefix stats (`stats detail on|off|dump`). */
#define KV_DETAIL_DELIM ':'
#define KV_DETAIL_MAX   100000   /* prefixes held; new ones past it are counted as dropped */
enum kv_detail_op { KV_DETAIL_GET, KV_DETAIL_SET, KV_DETAIL_DEL };
struct kv_detail *kv_detail_new(void);
void kv_detail_free(struct kv_detail *d);
void kv_detail_clear(struct kv_detail *d);
void kv_detail_record(struct kv_detail *d, enum kv_detail_op op, const char *key, size_t nkey,
		      bool hit);
/* "PREFIX p get N hit N set N del N\r\n"... "END\r\n", malloc'd; NULL: out of memory. */
char *kv_detail_dump(struct kv_detail *d, size_t *len);
/* Record when stats detail is on (one relaxed load when off). */
static inline void kv_detail_note(struct kv_proto *p, enum kv_detail_op op, const char *key,
				  size_t nkey, bool hit)
{
	if (atomic_load_explicit(&p->detail_on, memory_order_relaxed))
		kv_detail_record(p->detail, op, key, nkey, hit);
}

/* 0 or -errno (ENOMEM). @store is borrowed. */
int kv_proto_init(struct kv_proto *p, struct kv_store *store, const struct kv_settings *set,
		  unsigned n_workers);
void kv_proto_fini(struct kv_proto *p);

struct kv_conn;

/* A connection served by worker @w; NULL on ENOMEM. @out is copied. */
struct kv_conn *kv_conn_new(struct kv_proto *p, unsigned w, const struct kv_out *out);
/* Flow-group migration: @c leaves its worker (between rounds), then arrives at worker @w. */
#define KV_NO_WORKER UINT_MAX
void kv_conn_leave(struct kv_conn *c);
void kv_conn_arrive(struct kv_conn *c, unsigned w);
/* --sched steal: one read of @c runs on worker @w, not its own (server.c): the store's
 * reader slot, the statistics and the shared stage are @w's until kv_conn_visit_end().
 * Between reads a connection holds nothing of a worker's (its stage is empty or its own),
 * so this only renames the worker. */
void kv_conn_visit(struct kv_conn *c, unsigned w);
void kv_conn_visit_end(struct kv_conn *c);
/* The connection ended: log watchers hear of it now (and a watcher stops being one),
 * though its memory may go later, on its own worker (kv_conn_free does this if not). */
void kv_conn_end(struct kv_conn *c);
/* Gives back a value still being received. */
void kv_conn_free(struct kv_conn *c);

/* Act on @data; returns bytes consumed (see above). */
size_t kv_conn_feed(struct kv_conn *c, const uint8_t *data, size_t len);
/* A value has been arriving for longer than its size allows (KV_UPLOAD_GRACE_S, then at
 * least KV_UPLOAD_MIN_BPS): the caller drops the connection, which frees the item. */
bool kv_conn_upload_overdue(const struct kv_conn *c, uint64_t now_ns);
uint64_t kv_mono_ns(void);   /* CLOCK_MONOTONIC in ns: the clock of those deadlines */
#define KV_UPLOAD_GRACE_S  10u
#define KV_UPLOAD_MIN_BPS  (64u * 1024)

/* The connection must end: quit (after what was written), or memcached's closing
 * errors (a line too long, an HTTP request). feed() consumes nothing more. */
bool kv_conn_closing(const struct kv_conn *c);
/* feed() stopped for want of output room; show the rest again once it drains. */
bool kv_conn_blocked(const struct kv_conn *c);

/* ---- shared by proto.c, text.c, meta.c and stats.c ---- */

#define KV_MAX_TOKENS 24        /* memcached's MAX_TOKENS: 23 and the rest */

/* A token of a request line; the terminal token (len 0) has p = the unsplit rest, or
 * NULL when the line was split whole. */
struct kv_tok {
	const char *p;
	size_t len;
};

/* Split @line on spaces as memcached's tokenize_command; returns tokens + the terminal. */
size_t kv_tokenize(const char *line, size_t len, struct kv_tok *t, size_t max);

/* memcached's safe_strto* on one token (as if NUL-terminated where it ends): leading
 * white space, a sign, decimal digits, then the end or white space. The 32-bit forms
 * truncate the 64-bit result as memcached's do. */
bool kv_strtoull(const char *s, size_t n, uint64_t *out);
bool kv_strtoul(const char *s, size_t n, uint32_t *out);
bool kv_strtol(const char *s, size_t n, int32_t *out);

/* Framing a request line (text.c): ready ('\n' found), need more bytes, or close. */
/* READY: a whole line; NEED_MORE; CLOSE: no '\n' where one must be; GET_SPLIT: a get or
 * gets line longer than KV_GET_LINE_MAX, to be served in pieces (proto.c). */
enum kv_frame { KV_FRAME_READY, KV_FRAME_NEED_MORE, KV_FRAME_CLOSE, KV_FRAME_GET_SPLIT };
/* Where the line at @d ends ('\n' at *@eol), or what to do without one; d[0, @from) is
 * known to hold no '\n'. @stable: frame as if the bytes came in one read (split_stable). */
enum kv_frame frame_line(const uint8_t *d, size_t len, size_t from, size_t *eol, bool stable);

/* @a (host order) as dotted quad into @buf (KV_IPV4_STR bytes); returns @buf. */
#define KV_IPV4_STR 16
char *kv_ipv4_str(uint32_t a, char *buf);

/* base64 as memcached's (hostap's): decode skips bytes outside the alphabet; 0 = error. */
size_t kv_b64_decode(const char *src, size_t len, uint8_t *out, size_t outlen);
size_t kv_b64_encode(const uint8_t *src, size_t len, char *out, size_t outlen);

/* The connection as meta.c and stats.c see it. */
enum kv_cstate { KV_ST_LINE, KV_ST_DATA, KV_ST_SWALLOW };
#define KV_SHOWN_CLOSING 0xff   /* kv_conn.shown: the connection is ending */
enum kv_mget { KV_MGET_NONE = 0, KV_MGET_GET, KV_MGET_GETS, KV_MGET_SKIP };

#define KV_REQS_PER_EVENT 20    /* memcached's reqs_per_event: answers leave in batches */

/*
 * Answers since the last flush point, as memcached keeps them in response objects until
 * it writes: short lines copied into @arena, values pointing into their items (valid
 * within one feed(): a worker only quiesces between rounds). memcached drops the answers
 * not yet written when a get names a key longer than 250 bytes or when it hangs up, so
 * this server does too; the stage is written at the end of every feed().
 */
struct kv_piece {
	const uint8_t *ext;          /* NULL: @off into the arena */
	size_t off, len;
};

struct kv_stage {
	struct kv_piece *pc;
	struct iovec *iov;           /* built at flush, @cap of them */
	unsigned n, cap;
	uint8_t *arena;
	size_t alen, acap;
	size_t bytes;                /* staged answer bytes */
};

#define KV_META_RESP_MAX 1024   /* memcached's WRITE_BUFFER_SIZE: one meta status line */

/* What a worker's connections use one at a time: the stage of the read being served,
 * and a meta command's key decoded from base64. */
struct kv_wscratch {
	struct kv_stage stage;
	uint8_t mkey[KV_KEY_MAX + 1];
} __attribute__((aligned(64)));

/* ms's answer flags and key, kept while its value arrives. */
struct kv_ms {
	bool key_binary;
	uint8_t nkey;
	size_t flags_len;
	uint8_t key[KV_KEY_MAX];
	char flags[KV_META_RESP_MAX / 2];   /* return flags in request order */
};

/* memcached's binary protocol (protocol_binary.h): a 24-byte header, extras, key, value. */
#define KV_BIN_REQ_MAGIC 0x80
#define KV_BIN_RES_MAGIC 0x81
#define KV_BIN_HDR       24

struct kv_bin_req {
	uint8_t opcode, extlen;
	uint16_t keylen;
	uint32_t bodylen, opaque;
	uint64_t cas;
	bool quiet;                  /* a Q variant: successes (and get misses) unanswered */
};

struct kv_conn {
	struct kv_proto *p;
	unsigned w;                  /* the worker running it: its home, or for one read
				      * under --sched steal a thief (kv_conn_visit) */
	unsigned home;               /* its own worker (changes only with a migration) */
	struct kv_out out;
	enum kv_cstate st;
	bool noreply;                /* this command's answer is skipped */
	bool closing, blocked;
	bool ended;                  /* kv_conn_end: its close is logged */
	/* KV_ST_DATA: the value arriving into @nw */
	struct kv_new *nw;
	uint32_t want, got;          /* value + CRLF bytes expected, received */
	enum kv_set_mode mode;
	uint64_t cas_in;
	bool meta_set;               /* ms: answer with @ms's flags */
	struct kv_ms *ms;            /* ms's stash, made on a connection's first ms (meta.c) */
	/* KV_ST_SWALLOW */
	uint64_t swallow;
	/* a multiget stopped for room: where its next key starts in the line, plus one */
	size_t get_resume;
	uint8_t mget;                /* a get line served in pieces goes on (enum kv_mget) */
	/* lru_crawler metadump stopped for room: where it goes on */
	bool dump_active;
	struct kv_dump_cursor dump_cur;
	size_t scanned;              /* bytes of the pending line known to hold no '\n' */
	unsigned reqs;               /* commands since the last flush point */
	uint64_t ncmds;              /* request lines processed, all told (the runtime's
				      * app_ops: fp-stats' ops/s) */
	uint64_t upload_deadline_ns; /* a value still arriving must be in by then (monotonic
				      * clock); 0: none arriving, or it came in one piece */
	/* Answers are staged in the worker's stage (struct kv_wscratch) and written at the end
	 * of each read; only when they must wait across reads (a value still arriving) does
	 * the connection take them into @own, given back once written. So an idle
	 * connection holds no output buffers. */
	struct kv_stage *stage;
	struct kv_stage own;
	/* the protocol, chosen by the first byte (binary.c) */
	bool negotiated, binary;
	struct kv_bin_req bin;       /* the binary request being served */
	/* stats conns: number, peer (host order; 0: unknown), last request (store clock) */
	uint64_t id;
	uint32_t raddr;
	uint16_t rport;
	_Atomic uint32_t last_cmd;
	_Atomic uint8_t shown;       /* @st, or KV_SHOWN_CLOSING, as of its last read: what
				      * another worker's stats conns may read (stats.c) */
	struct kv_conn *reg_next, *reg_prev;
	bool watching;               /* a log watcher: its input is ignored (watch.c) */
};

/* watch.c: the events (each after kv_watched()), the command, and the worker's part:
 * move its watchers' lines into their output (between rounds). */
void kv_watch_get(struct kv_conn *c, const char *key, size_t nkey, const struct kv_item_view *v);
void kv_watch_store(struct kv_conn *c, const char *key, size_t nkey, enum kv_set_mode mode,
		    enum kv_result r, uint32_t exptime, uint32_t nbytes, unsigned clsid);
void kv_watch_evicted(void *arg, const struct kv_evicted *e);
void kv_watch_conn(struct kv_conn *c, bool opened);
void kv_watch_rawcmd(struct kv_conn *c, const char *line, size_t len);
void kv_watch_command(struct kv_conn *c, struct kv_tok *t, size_t nt);
int kv_watch_add(struct kv_conn *c, uint16_t kinds);
void kv_watch_remove(struct kv_conn *c);
void kv_watch_drain(struct kv_proto *p, unsigned w);
/* c->w = @w, under the watchers' lock when @c is a watcher (kv_watch_drain reads it from
 * every worker). */
void kv_watch_set_worker(struct kv_conn *c, unsigned w);

/* The connection's peer, for stats conns (server.c, after kv_conn_new). */
void kv_conn_set_peer(struct kv_conn *c, uint32_t addr, uint16_t port);
#define KV_CONNS_LISTED 8192   /* stats conns lists this many connections at most */

/* Stage @n pieces (copied) as one answer unless noreply. */
void kv_out_iov(struct kv_conn *c, const struct iovec *iov, unsigned n);
/* Stage @hdr (copied) and a value that stays in its item, nothing after it. */
void kv_out_ref(struct kv_conn *c, const void *hdr, size_t hlen, const uint8_t *val,
		size_t vlen);
/* Stage an answer whose value stays in its item: @hdr (copied), the value, CRLF. */
void kv_out_value(struct kv_conn *c, const char *hdr, size_t hlen, const uint8_t *val,
		  size_t vlen);
/* Write what is staged (a flush point); drop it (memcached's conn_release_items). */
void kv_out_flush(struct kv_conn *c);
void kv_out_cull(struct kv_conn *c);
/* Output room now; the room a value answer may need (the largest item and its line). */
size_t kv_out_room(const struct kv_conn *c);
size_t kv_value_reserve(const struct kv_conn *c);
/* One line with CRLF (memcached's out_string: skipped under noreply). */
void kv_out_str(struct kv_conn *c, const char *s);
/* kv_out_str of a string literal, the line and its CRLF in one copy (GET's END). */
void kv_out_bytes(struct kv_conn *c, const void *p, size_t n);
#define kv_out_line(c, lit) kv_out_bytes((c), lit "\r\n", sizeof(lit "\r\n") - 1)
/* As kv_out_str, shown even under noreply (memcached's out_errstring). */
void kv_out_err(struct kv_conn *c, const char *s);
/* The value of an allocated item arrives next: enter KV_ST_DATA. */
void kv_expect_value(struct kv_conn *c, struct kv_new *n, uint32_t nbytes);
/* Discard the next @n bytes (memcached's conn_swallow). */
void kv_swallow(struct kv_conn *c, uint64_t n);
/* memcached's realtime(EXPTIME_TO_POSITIVE_TIME(t)). */
uint32_t kv_exptime(const struct kv_conn *c, int32_t t);
/* The number as memcached's itoa: returns the end. */
char *kv_utoa(uint64_t v, char *p);

/* memcached's noreply (the last token), token-count checks that answer ERROR, a token
 * equal to @s. */
bool kv_set_noreply(struct kv_conn *c, const struct kv_tok *t, size_t nt);
bool kv_want(struct kv_conn *c, size_t nt, size_t lo, size_t hi);
bool kv_want_or(struct kv_conn *c, size_t nt, size_t a, size_t b);
bool kv_tok_is(const struct kv_tok *t, const char *s);

/* meta.c: mg, ms, md, ma, mn, me (@t: the line's tokens); false when stopped for output
 * room before acting (the line is shown again). */
bool kv_meta_command(struct kv_conn *c, struct kv_tok *t, size_t nt);
/* stats.c: flush_all, version, verbosity, cache_memlimit, shutdown; false if none. */
bool kv_admin_command(struct kv_conn *c, struct kv_tok *t, size_t nt);
/* lru_crawler ...: false when a metadump stopped for room (the line is shown again). */
bool kv_lru_crawler_command(struct kv_conn *c, struct kv_tok *t, size_t nt);
/* stats.c: stats [sub]; false when the answer waits for output room. */
bool kv_stats_command(struct kv_conn *c, struct kv_tok *t, size_t nt);
/* binary.c: the binary protocol. feed: one request from its header (0: need more, or
 * blocked); value_done: a set/append value is in. */
size_t kv_bin_feed(struct kv_conn *c, const uint8_t *d, size_t len);
void kv_bin_value_done(struct kv_conn *c);
/* A response header (24 bytes at @h) for the request being served. */
void kv_bin_header(const struct kv_conn *c, uint8_t *h, uint8_t op, uint16_t status,
		   uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas);
#define KV_BIN_OP_STAT 0x10
/* stats.c: the binary STAT command, @key its subcommand (memcached's process_bin_stat):
 * 1 answered, 0 waits for output room, -1 no such group ("Not found"). */
int kv_bin_stats(struct kv_conn *c, const char *key, size_t nkey);
/* A value is in: link @n (c->mode, c->cas_in) and tell the mutation watchers; @n is gone
 * after (proto.c; the text, meta and binary sets). */
void kv_link_value(struct kv_conn *c, struct kv_new *n, uint32_t nbytes, enum kv_result *r,
		   uint64_t *cas);
/* The value line for ms once its data is in: mirrors memcached's _finalize_mset. */
void kv_meta_set_done(struct kv_conn *c, enum kv_result r, uint64_t cas);
