/* stats.c: stats and its subcommands (memcached 1.6.18's names, in its order) and the other administrative commands. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "proto.h"

/*
 * Monitoring tools and clients read stats by name, and a differential test compares the
 * names (not the values) with memcached's: every name memcached 1.6.18 reports (as
 * Debian builds it, extstore and TLS compiled in) is reported here in the same order,
 * with this server's figure where it has one and memcached's idle value where the
 * concept does not exist here (LRU crawler, slab rebalancer, log watchers). The answer
 * is built whole in a buffer and written only when the output has room for it.
 */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
	const struct kv_conn *bin;   /* binary protocol: a STAT packet per figure */
};

/* Room for @need more bytes (and a NUL). */
static bool sb_grow(struct sbuf *b, size_t need)
{
	if (b->len + need + 1 > b->cap) {
		size_t cap = (b->cap ? b->cap * 2 : 4096) + need;
		char *p = b->oom ? NULL : realloc(b->p, cap);

		if (!p) {
			b->oom = true;
			return false;
		}
		b->p = p;
		b->cap = cap;
	}
	return true;
}

/* memcached's append_bin_stats: a STAT response with the name as key, the figure as
 * value; an empty one ends the answer. */
static void sb_bin(struct sbuf *b, const char *name, size_t nn, const char *val, size_t nv)
{
	if (!sb_grow(b, KV_BIN_HDR + nn + nv))
		return;
	kv_bin_header(b->bin, (uint8_t *)b->p + b->len, KV_BIN_OP_STAT, 0, 0, (uint16_t)nn,
		      (uint32_t)(nn + nv), 0);
	memcpy(b->p + b->len + KV_BIN_HDR, name, nn);
	memcpy(b->p + b->len + KV_BIN_HDR + nn, val, nv);
	b->len += KV_BIN_HDR + nn + nv;
}

static void __attribute__((format(printf, 3, 4))) sb_stat(struct sbuf *b, const char *name,
							   const char *fmt, ...)
{
	char val[256];
	va_list ap;
	size_t need;

	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	if (b->bin) {
		sb_bin(b, name, strlen(name), val, strlen(val));
		return;
	}
	need = strlen(name) + strlen(val) + 9;
	if (!sb_grow(b, need))
		return;
	b->len += (size_t)snprintf(b->p + b->len, b->cap - b->len, "STAT %s %s\r\n", name, val);
}

static void sb_emit(void *arg, const char *name, const char *val)
{
	sb_stat(arg, name, "%s", val);
}

/* The buffer and END, whole, if the output has room; false (blocked) if not. */
static bool sb_send(struct kv_conn *c, struct sbuf *b)
{
	struct iovec iov[2] = { { b->p, b->len }, { (void *)"END\r\n", 5 } };
	bool ok = true;

	if (b->bin) {   /* the empty STAT that ends it */
		sb_bin(b, "", 0, "", 0);
		iov[0] = (struct iovec){ b->p, b->len };
		iov[1].iov_len = 0;
	}
	if (b->oom && b->bin) {   /* memcached's out_of_memory, in binary */
		static const char e[] = "Out of memory";
		uint8_t h[KV_BIN_HDR];

		kv_bin_header(c, h, KV_BIN_OP_STAT, 0x82, 0, 0, sizeof(e) - 1, 0);
		kv_out_ref(c, h, sizeof(h), (const uint8_t *)e, sizeof(e) - 1);
	} else if (b->oom) {
		kv_out_str(c, "SERVER_ERROR out of memory writing stats");
	} else if (kv_out_room(c) < iov[0].iov_len + iov[1].iov_len) {
		ok = false;
	} else {
		kv_out_iov(c, iov, 2);
	}
	free(b->p);
	return ok;
}

static void sum_workers(const struct kv_proto *p, struct kv_wstats *s)
{
	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < p->n_workers; i++) {
		const struct kv_wstats *w = &p->ws[i];

		s->cmd_get += w->cmd_get;
		s->cmd_set += w->cmd_set;
		s->cmd_flush += w->cmd_flush;
		s->cmd_touch += w->cmd_touch;
		s->cmd_meta += w->cmd_meta;
		s->store_too_large += w->store_too_large;
		s->store_no_memory += w->store_no_memory;
		s->bytes_read += w->bytes_read;
		s->bytes_written += w->bytes_written;
		s->curr_conns += w->curr_conns;
		s->total_conns += w->total_conns;
		s->out_bytes += w->out_bytes;
	}
}

#define U(name, v) sb_stat(b, name, "%llu", (unsigned long long)(v))

static void stats_process(struct kv_proto *p, struct sbuf *b, const struct kv_wstats *w)
{
	struct rusage ru;
	uint32_t now = kv_store_now(p->store);

	getrusage(RUSAGE_SELF, &ru);
	sb_stat(b, "pid", "%lu", (unsigned long)getpid());
	sb_stat(b, "uptime", "%u", now);
	sb_stat(b, "time", "%llu", (unsigned long long)(p->started_unix + now));
	sb_stat(b, "version", "%s", KV_VERSION);
	sb_stat(b, "libevent", "%s", "flowplane");
	sb_stat(b, "pointer_size", "%d", (int)(8 * sizeof(void *)));
	sb_stat(b, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
	sb_stat(b, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec,
		(long)ru.ru_stime.tv_usec);
	U("max_connections", p->set.maxconns);
	U("curr_connections", w->curr_conns);
	U("total_connections", w->total_conns);
	U("rejected_connections", 0);
	U("connection_structures", w->curr_conns);
	/* memcached's response objects hold references; ours are copies of the answers,
	 * bounded per connection and in all (evl's max_total_pending, main.c) */
	static const char *const zero[] = {
		"response_obj_oom", "response_obj_count", "read_buf_count",
		"read_buf_bytes", "read_buf_bytes_free", "read_buf_oom", "reserved_fds",
	};
	U(zero[0], 0);
	U(zero[1], 0);
	U("response_obj_bytes", w->out_bytes);
	for (size_t i = 2; i < sizeof(zero) / sizeof(zero[0]); i++)
		U(zero[i], 0);
}

static void stats_commands(struct sbuf *b, const struct kv_wstats *w,
			   const struct kv_store_stats *s)
{
	U("cmd_get", w->cmd_get);
	U("cmd_set", w->cmd_set);
	U("cmd_flush", w->cmd_flush);
	U("cmd_touch", w->cmd_touch);
	U("cmd_meta", w->cmd_meta);
	U("get_hits", s->get_hits);
	U("get_misses", s->get_misses);
	U("get_expired", s->get_expired);
	U("get_flushed", s->get_flushed);
	U("delete_misses", s->delete_misses);
	U("delete_hits", s->delete_hits);
	U("incr_misses", s->incr_misses);
	U("incr_hits", s->incr_hits);
	U("decr_misses", s->decr_misses);
	U("decr_hits", s->decr_hits);
	U("cas_misses", s->cas_misses);
	U("cas_hits", s->cas_hits);
	U("cas_badval", s->cas_badval);
	U("touch_hits", s->touch_hits);
	U("touch_misses", s->touch_misses);
	U("store_too_large", w->store_too_large);
	U("store_no_memory", w->store_no_memory);
	U("auth_cmds", 0);
	U("auth_errors", 0);
	U("bytes_read", w->bytes_read);
	U("bytes_written", w->bytes_written);
}

static void stats_memory(struct kv_proto *p, struct sbuf *b, const struct kv_store_stats *s)
{
	static const char *const slab_zero[] = {
		"slab_reassign_rescues", "slab_reassign_chunk_rescues",
		"slab_reassign_evictions_nomem", "slab_reassign_inline_reclaim",
		"slab_reassign_busy_items", "slab_reassign_busy_deletes", "slab_reassign_running",
	};
	static const char *const log_zero[] = {
		"lru_maintainer_juggles",
		"malloc_fails", "log_worker_dropped", "log_worker_written", "log_watcher_skipped",
		"log_watcher_sent", "log_watchers", "unexpected_napi_ids", "round_robin_fallback",
	};

	U("limit_maxbytes", s->limit_maxbytes ? s->limit_maxbytes : p->set.maxbytes);
	U("accepting_conns", 1);
	U("listen_disabled_num", 0);
	U("time_in_listen_disabled_us", 0);
	U("threads", p->set.num_threads);
	U("conn_yields", 0);
	U("hash_power_level", s->hash_power_level);
	U("hash_bytes", s->hash_bytes);
	U("hash_is_expanding", 0);
	for (size_t i = 0; i < sizeof(slab_zero) / sizeof(slab_zero[0]); i++)
		U(slab_zero[i], 0);
	U("slabs_moved", s->slabs_moved);
	U("lru_crawler_running", 0);
	U("lru_crawler_starts", s->crawler_starts);
	for (size_t i = 0; i < sizeof(log_zero) / sizeof(log_zero[0]); i++)
		U(log_zero[i], 0);
}

static void stats_items_totals(struct sbuf *b, const struct kv_store_stats *s)
{
	static const char *const zero[] = {
		"evicted_active", "crawler_reclaimed", "crawler_items_checked",
		"lrutail_reflocked", "moves_to_cold", "moves_to_warm", "moves_within_lru",
		"direct_reclaims", "lru_bumps_dropped",
	};

	U("bytes", s->bytes);
	U("curr_items", s->curr_items);
	U("total_items", s->total_items);
	U("slab_global_page_pool", 0);
	U("expired_unfetched", s->expired_unfetched);
	U("evicted_unfetched", s->evicted_unfetched);
	U(zero[0], 0);
	U("evictions", s->evictions);
	U("reclaimed", s->reclaimed);
	U("crawler_reclaimed", s->crawler_reclaimed);
	U("crawler_items_checked", s->crawler_checked);
	for (size_t i = 3; i < sizeof(zero) / sizeof(zero[0]); i++)
		U(zero[i], 0);
}

static void stats_general(struct kv_proto *p, struct sbuf *b)
{
	struct kv_wstats w;
	struct kv_store_stats s;

	sum_workers(p, &w);
	kv_store_stats(p->store, &s);
	stats_process(p, b, &w);
	stats_commands(b, &w, &s);
	stats_memory(p, b, &s);
	stats_items_totals(b, &s);
}

/* stats settings: memcached's names; the ones that have no meaning here keep its defaults. */
static void stats_settings(struct kv_proto *p, struct sbuf *b)
{
	const struct kv_settings *st = &p->set;
	static const char *const fixed[][2] = {
		{ "domain_socket", "NULL" }, { "umask", "700" }, { "shutdown_command", "no" },
	};
	static const char *const tail[][2] = {
		{ "binding_protocol", "auto-negotiate" }, { "auth_enabled_sasl", "no" },
		{ "auth_enabled_ascii", "no" },
	};
	static const char *const rest[][2] = {
		{ "maxconns_fast", "yes" }, { "hashpower_init", NULL }, { "slab_reassign", "yes" },
		{ "slab_automove", NULL }, { "slab_automove_ratio", "0.80" },
		{ "slab_automove_window", "30" }, { "slab_chunk_max", "524288" },
		{ "lru_crawler", NULL }, { "lru_crawler_sleep", "100" },
		{ "lru_crawler_tocrawl", "0" }, { "tail_repair_time", "0" },
		{ "flush_enabled", NULL }, { "dump_enabled", "yes" },
		{ "hash_algorithm", "murmur3" }, { "lru_maintainer_thread", "no" },
		{ "lru_segmented", "no" }, { "hot_lru_pct", "20" }, { "warm_lru_pct", "40" },
		{ "hot_max_factor", "0.20" }, { "warm_max_factor", "2.00" }, { "temp_lru", "no" },
		{ "temporary_ttl", "61" }, { "idle_timeout", "0" },
		{ "watcher_logbuf_size", "262144" }, { "worker_logbuf_size", "65536" },
		{ "read_buf_mem_limit", "0" }, { "track_sizes", "no" },
		{ "inline_ascii_response", "no" }, { "ext_item_size", "512" },
		{ "ext_item_age", "4294967295" }, { "ext_low_ttl", "0" },
		{ "ext_recache_rate", "2000" }, { "ext_wbuf_size", "4194304" },
		{ "ext_compact_under", "0" }, { "ext_drop_under", "0" },
		{ "ext_max_sleep", "1000000" }, { "ext_max_frag", "0.80" },
		{ "slab_automove_freeratio", "0.010" }, { "ext_drop_unread", "no" },
		{ "ssl_enabled", "no" }, { "ssl_chain_cert", "(null)" }, { "ssl_key", "(null)" },
		{ "ssl_verify_mode", "0" }, { "ssl_keyformat", "1" }, { "ssl_ciphers", "NULL" },
		{ "ssl_ca_cert", "NULL" }, { "ssl_wbuf_size", "16384" },
		{ "ssl_session_cache", "no" }, { "ssl_kernel_tls", "no" },
		{ "ssl_min_version", "tlsv1.2" }, { "num_napi_ids", "(null)" },
		{ "memory_file", "(null)" },
	};
	char hp[16], am[16];

	U("maxbytes", st->maxbytes);
	U("maxconns", st->maxconns);
	U("tcpport", st->tcpport);
	U("udpport", st->udpport);
	sb_stat(b, "inter", "%s", st->inter ? st->inter : "NULL");
	sb_stat(b, "verbosity", "%d", p->verbose);
	U("oldest", 0);
	sb_stat(b, "evictions", "%s", st->evict ? "on" : "off");
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		sb_stat(b, fixed[i][0], "%s", fixed[i][1]);
	sb_stat(b, "growth_factor", "%.2f", st->factor);
	U("chunk_size", st->chunk_size);
	U("num_threads", st->num_threads);
	U("num_threads_per_udp", st->num_threads);
	sb_stat(b, "stat_key_prefix", "%c", ':');
	sb_stat(b, "detail_enabled", "%s", atomic_load(&p->detail_on) ? "yes" : "no");
	U("reqs_per_event", 20);
	sb_stat(b, "cas_enabled", "%s", st->use_cas ? "yes" : "no");
	U("tcp_backlog", 1024);
	for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++)
		sb_stat(b, tail[i][0], "%s", tail[i][1]);
	U("item_size_max", st->item_size_max);
	snprintf(hp, sizeof(hp), "%u", st->hashpower_init);
	snprintf(am, sizeof(am), "%u",
		 atomic_load_explicit(&p->slab_automove, memory_order_relaxed));
	for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
		sb_stat(b, rest[i][0], "%s", rest[i][1] ? rest[i][1] :
			!strcmp(rest[i][0], "hashpower_init") ? hp :
			!strcmp(rest[i][0], "slab_automove") ? am :
			!strcmp(rest[i][0], "lru_crawler") ?
				(kv_store_crawler_enabled(p->store) ? "yes" : "no") :
			st->flush_enabled ? "yes" : "no");
}

static void stats_reset(struct kv_proto *p)
{
	for (unsigned i = 0; i < p->n_workers; i++) {
		struct kv_wstats *w = &p->ws[i];
		uint64_t curr = w->curr_conns;

		memset(w, 0, sizeof(*w));
		w->curr_conns = curr;
	}
	kv_store_stats_reset(p->store);
	kv_detail_clear(p->detail);   /* memcached's stats_reset clears the prefixes too */
}

/*
 * stats conns (memcached's process_stats_conns): the listener, then each connection in
 * order of arrival, keyed by its number where memcached has its fd: its address, the
 * listener's, its state in memcached's words, and seconds since its last request. At
 * most KV_CONNS_LISTED connections are listed (memcached lists all; an answer must fit
 * the output a connection may hold).
 */
static const char *conn_state(const struct kv_conn *c, const struct kv_conn *self)
{
	/* another worker's connection changes state as we read it: the state its last read
	 * left (kv_conn.shown), a snapshot, as memcached's (its conns are read unlocked too) */
	if (c == self)
		return "conn_parse_cmd";
	switch (atomic_load_explicit(&c->shown, memory_order_relaxed)) {
	case KV_ST_DATA: return "conn_nread";
	case KV_ST_SWALLOW: return "conn_swallow";
	case KV_SHOWN_CLOSING: return "conn_closing";
	default: return "conn_read";
	}
}

static void stats_conns(struct kv_conn *self, struct sbuf *b)
{
	struct kv_proto *p = self->p;
	uint32_t now = kv_store_now(p->store);
	char listen[64], addr[64], key[48];
	unsigned n = 0;

	snprintf(listen, sizeof(listen), "tcp:%s:%u", p->set.inter ? p->set.inter : "0.0.0.0",
		 p->set.tcpport);
	sb_stat(b, "0:addr", "%s", listen);
	sb_stat(b, "0:state", "%s", "conn_listening");
	sb_stat(b, "0:secs_since_last_cmd", "%u", now);
	pthread_mutex_lock(&p->conns_mu);
	for (const struct kv_conn *c = p->conns_head; c && n < KV_CONNS_LISTED; c = c->reg_next, n++) {
		uint32_t last = atomic_load_explicit(&c->last_cmd, memory_order_relaxed);
		char ip[KV_IPV4_STR];

		snprintf(addr, sizeof(addr), "tcp:%s:%u", kv_ipv4_str(c->raddr, ip), c->rport);
		snprintf(key, sizeof(key), "%llu:addr", (unsigned long long)c->id);
		sb_stat(b, key, "%s", addr);
		snprintf(key, sizeof(key), "%llu:listen_addr", (unsigned long long)c->id);
		sb_stat(b, key, "%s", listen);
		snprintf(key, sizeof(key), "%llu:state", (unsigned long long)c->id);
		sb_stat(b, key, "%s", conn_state(c, self));
		snprintf(key, sizeof(key), "%llu:secs_since_last_cmd", (unsigned long long)c->id);
		sb_stat(b, key, "%u", now > last ? now - last : 0);
	}
	pthread_mutex_unlock(&p->conns_mu);
}

/* stats detail on|off|dump (memcached's process_stats_detail). */
static bool stats_detail(struct kv_conn *c, const struct kv_tok *t, size_t nt)
{
	if (nt >= 4 && kv_tok_is(&t[2], "on")) {
		atomic_store(&c->p->detail_on, true);
		kv_out_str(c, "OK");
	} else if (nt >= 4 && kv_tok_is(&t[2], "off")) {
		atomic_store(&c->p->detail_on, false);
		kv_out_str(c, "OK");
	} else if (nt >= 4 && kv_tok_is(&t[2], "dump")) {
		size_t len;
		char *dump = kv_detail_dump(c->p->detail, &len);
		struct iovec iov = { dump, len };

		if (!dump) {
			kv_out_str(c, "SERVER_ERROR out of memory writing stats");
		} else if (kv_out_room(c) < len) {
			free(dump);
			return false;
		} else {
			kv_out_iov(c, &iov, 1);
		}
		free(dump);
	} else {
		kv_out_str(c, "CLIENT_ERROR usage: stats detail on|off|dump");
	}
	return true;
}

/* The subcommands that answer one line; false if @sub is not one of them. */
static bool stats_oneline(struct kv_conn *c, const struct kv_tok *t, size_t nt)
{
	uint32_t id, limit;

	if (t[1].len == 5 && !memcmp(t[1].p, "reset", 5)) {
		stats_reset(c->p);
		kv_out_str(c, "RESET");
	} else if (t[1].len == 9 && !memcmp(t[1].p, "cachedump", 9)) {
		if (nt < 5)
			kv_out_str(c, "CLIENT_ERROR bad command line");
		else if (!kv_strtoul(t[2].p, t[2].len, &id) || !kv_strtoul(t[3].p, t[3].len, &limit))
			kv_out_str(c, "CLIENT_ERROR bad command line format");
		else if (id >= 64)
			kv_out_str(c, "CLIENT_ERROR Illegal slab id");
		else
			kv_out_str(c, "END");   /* the store keeps no per-class item lists */
	} else {
		return false;
	}
	return true;
}

bool kv_stats_command(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	struct sbuf b = { 0 };

	if (nt > 2 && kv_tok_is(&t[1], "detail"))
		return stats_detail(c, t, nt);
	if (nt > 2 && stats_oneline(c, t, nt))
		return true;
	if (nt == 2)
		stats_general(c->p, &b);
	else if (kv_tok_is(&t[1], "settings"))
		stats_settings(c->p, &b);
	else if (kv_tok_is(&t[1], "items"))
		kv_store_stats_items(c->p->store, sb_emit, &b);
	else if (kv_tok_is(&t[1], "slabs"))
		kv_store_stats_slabs(c->p->store, sb_emit, &b);
	else if (kv_tok_is(&t[1], "sizes"))
		sb_stat(&b, "sizes_status", "%s", "disabled");
	else if (kv_tok_is(&t[1], "conns"))
		stats_conns(c, &b);
	else {
		kv_out_str(c, "ERROR");
		return true;
	}
	return sb_send(c, &b);
}

/* ---- flush_all, verbosity, version, cache_memlimit, shutdown ---- */

static void cmd_flush_all(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	int32_t e = 0;
	uint32_t when;

	kv_set_noreply(c, t, nt);
	c->p->ws[c->w].cmd_flush++;
	if (!c->p->set.flush_enabled) {
		kv_out_str(c, "CLIENT_ERROR flush_all not allowed");
		return;
	}
	if (nt != (c->noreply ? 3u : 2u) && !kv_strtol(t[1].p, t[1].len, &e)) {
		kv_out_str(c, "CLIENT_ERROR invalid exptime argument");
		return;
	}
	/* memcached: a delay sets the flush at realtime(delay), else now */
	when = e > 0 ? kv_realtime(c->p->store, e) : kv_store_now(c->p->store);
	kv_flush_all(c->p->store, when);
	kv_out_str(c, "OK");
}

static void cmd_verbosity(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	uint32_t level;

	kv_set_noreply(c, t, nt);
	if (!kv_strtoul(t[1].p, t[1].len, &level)) {
		kv_out_str(c, "CLIENT_ERROR bad command line format");
		return;
	}
	c->p->verbose = level > 2 ? 2 : (int)level;
	kv_out_str(c, "OK");
}

static void cmd_memlimit(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	uint32_t mb;

	kv_set_noreply(c, t, nt);
	if (!kv_strtoul(t[1].p, t[1].len, &mb))
		kv_out_str(c, "ERROR");
	else if (mb < 8)
		kv_out_str(c, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m");
	else if (mb > 1000000000)
		kv_out_str(c, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes");
	else if (kv_store_set_limit(c->p->store, (uint64_t)mb << 20))
		/* the arena is fixed at startup: lower is possible, above -m is not */
		kv_out_str(c, "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust");
	else {
		c->p->set.maxbytes = (uint64_t)mb << 20;   /* racy by design, as memcached's */
		kv_out_str(c, "OK");
	}
}

/* slabs automove N (memcached's process_slabs_automove_command): 0-2 is recorded for
 * stats settings; fp-kv moves pages between classes on demand whatever it says. */
static void cmd_slabs(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	uint32_t level;

	if (nt != 4 || !kv_tok_is(&t[1], "automove")) {
		kv_out_str(c, "ERROR");
		return;
	}
	if (!kv_strtoul(t[2].p, t[2].len, &level))
		kv_out_str(c, "CLIENT_ERROR bad command line format");
	else if (level > 2)
		kv_out_str(c, "ERROR");
	else {
		atomic_store_explicit(&c->p->slab_automove, level, memory_order_relaxed);
		kv_out_str(c, "OK");
	}
}

/* ---- lru_crawler (memcached's process_lru_crawler_command) ---- */

/* A class list as memcached's lru_crawler takes it: "all" (metadump: also "hash", which
 * here is the same order), or numbers 1..63 separated by commas. False: BADCLASS. */
static bool crawler_classes(const struct kv_tok *t, bool dump, uint64_t *mask)
{
	size_t i = 0;

	if (kv_tok_is(t, "all") || (dump && kv_tok_is(t, "hash"))) {
		*mask = ~0ull;
		return true;
	}
	*mask = 0;
	while (i < t->len) {
		size_t j = i;
		uint32_t id;

		while (j < t->len && t->p[j] != ',')
			j++;
		if (!kv_strtoul(t->p + i, j - i, &id) || id < 1 || id > 63)
			return false;
		*mask |= 1ull << id;
		i = j + 1;
	}
	return *mask != 0;
}

/* memcached's uriencode: RFC 3986's unreserved characters stay, the rest is %XX. */
static size_t uri_encode(const char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)in[i];

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '.' || ch == '_' || ch == '~') {
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	return o;
}

/* One metadump line, as memcached's crawler writes it; false when the output has no room
 * left for it (the dump resumes at this item). */
static bool dump_line(void *arg, const struct kv_item_meta *m)
{
	struct kv_conn *c = arg;
	char line[3 * 255 + 160], key[3 * 255 + 1];
	size_t nk = uri_encode(m->key, m->nkey, key);
	int n;

	if (kv_out_room(c) < KV_RESP_RESERVE + sizeof(line))
		return false;
	key[nk] = '\0';
	n = snprintf(line, sizeof(line), "key=%s exp=%lld la=%llu cas=%llu fetch=%s cls=%u size=%llu\n",
		     key, (long long)m->exp_unix, (unsigned long long)m->la_unix,
		     (unsigned long long)m->cas, m->fetched ? "yes" : "no", m->cls,
		     (unsigned long long)m->size);
	kv_out_iov(c, &(struct iovec){ line, (size_t)n }, 1);
	return true;
}

bool kv_lru_crawler_command(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	struct kv_store *s = c->p->store;
	uint64_t mask;
	uint32_t v;

	if (nt == 4 && kv_tok_is(&t[1], "metadump")) {
		if (!c->dump_active) {
			if (!crawler_classes(&t[2], true, &mask)) {
				kv_out_str(c, "BADCLASS invalid class id");
				return true;
			}
			memset(&c->dump_cur, 0, sizeof(c->dump_cur));
			c->dump_active = true;
		}
		crawler_classes(&t[2], true, &mask);
		if (!kv_store_dump(s, c->w, mask, &c->dump_cur, dump_line, c))
			return false;                       /* shown again once the output drains */
		c->dump_active = false;
		kv_out_str(c, "END");
	} else if (nt == 4 && kv_tok_is(&t[1], "crawl")) {
		kv_out_str(c, crawler_classes(&t[2], false, &mask) ? "OK" : "BADCLASS invalid class id");
	} else if (nt == 4 && kv_tok_is(&t[1], "sleep")) {
		if (!kv_strtoul(t[2].p, t[2].len, &v))
			kv_out_str(c, "CLIENT_ERROR bad command line format");
		else
			kv_out_str(c, v > 1000000 ? "CLIENT_ERROR sleep must be one second or less" : "OK");
	} else if (nt == 4 && kv_tok_is(&t[1], "tocrawl")) {
		kv_out_str(c, kv_strtoul(t[2].p, t[2].len, &v) ? "OK" : "CLIENT_ERROR bad command line format");
	} else if (nt == 3 && kv_tok_is(&t[1], "enable")) {
		if (kv_store_crawler_enabled(s)) {
			kv_out_str(c, "ERROR failed to start lru crawler thread");
		} else {
			kv_store_crawler_enable(s, true);
			kv_out_str(c, "OK");
		}
	} else if (nt == 3 && kv_tok_is(&t[1], "disable")) {
		kv_store_crawler_enable(s, false);
		kv_out_str(c, "OK");
	} else {
		kv_out_str(c, "ERROR");
	}
	return true;
}

bool kv_admin_command(struct kv_conn *c, struct kv_tok *t, size_t nt)
{
	if (kv_tok_is(&t[0], "flush_all")) {
		if (kv_want(c, nt, 2, 4))
			cmd_flush_all(c, t, nt);
	} else if (kv_tok_is(&t[0], "version")) {
		kv_out_str(c, "VERSION " KV_VERSION);
	} else if (kv_tok_is(&t[0], "verbosity")) {
		if (kv_want_or(c, nt, 3, 4))
			cmd_verbosity(c, t, nt);
	} else if (kv_tok_is(&t[0], "slabs")) {
		cmd_slabs(c, t, nt);
	} else if (kv_tok_is(&t[0], "cache_memlimit")) {
		if (kv_want_or(c, nt, 3, 4))
			cmd_memlimit(c, t, nt);
	} else if (kv_tok_is(&t[0], "shutdown")) {
		kv_out_str(c, "ERROR: shutdown not enabled");   /* memcached without -A */
	} else {
		return false;
	}
	return true;
}

/* ---- the binary protocol's STAT (memcached's process_bin_stat) ---- */

static bool key_starts(const char *k, size_t nk, const char *s)
{
	size_t n = strlen(s);

	return nk >= n && !memcmp(k, s, n);
}

static bool key_is(const char *k, size_t nk, const char *s)
{
	return nk == strlen(s) && !memcmp(k, s, nk);
}

int kv_bin_stats(struct kv_conn *c, const char *key, size_t nkey)
{
	struct sbuf b = { .bin = c };

	/* memcached compares the first bytes only for reset, settings and detail */
	if (!nkey) {
		stats_general(c->p, &b);
	} else if (key_starts(key, nkey, "reset")) {
		if (kv_out_room(c) < KV_BIN_HDR)
			return 0;
		stats_reset(c->p);
	} else if (key_starts(key, nkey, "settings")) {
		stats_settings(c->p, &b);
	} else if (key_starts(key, nkey, "detail")) {
		if (key_starts(key + 6, nkey - 6, " dump")) {
			size_t len;
			char *dump = kv_detail_dump(c->p->detail, &len);

			if (!dump)
				b.oom = true;
			else
				sb_bin(&b, "detailed", 8, dump, len);
			free(dump);
		} else if (key_starts(key + 6, nkey - 6, " on")) {
			atomic_store(&c->p->detail_on, true);
		} else if (key_starts(key + 6, nkey - 6, " off")) {
			atomic_store(&c->p->detail_on, false);
		} else {
			return -1;
		}
	} else if (key_is(key, nkey, "items")) {
		kv_store_stats_items(c->p->store, sb_emit, &b);
	} else if (key_is(key, nkey, "slabs")) {
		kv_store_stats_slabs(c->p->store, sb_emit, &b);
	} else if (key_is(key, nkey, "sizes")) {
		sb_stat(&b, "sizes_status", "%s", "disabled");
	} else {
		return -1;
	}
	return sb_send(c, &b) ? 1 : 0;
}
