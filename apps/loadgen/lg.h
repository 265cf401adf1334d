/* lg.h: fp-loadgen's parts and the contracts between them (see apps/loadgen/README.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/hist.h>
#include <flowplane/rt.h>

/*
 * fp-loadgen: an open-loop load generator on flowplane's event layer (evl), so the same
 * binary drives any server over the kernel transport and a flowplane server over AF_XDP.
 *
 *   dist.c      distributions: fixed, uniform, exponential, normal, GEV, generalised
 *               Pareto, bimodal, discrete; and mutilate's named Facebook fits (fb_key,
 *               fb_value, fb_ia). Sample, CDF, mean; parsed from "kind:args".
 *   arrival.c   arrival processes (Poisson, fixed interval, trace replay) and the IX
 *               control-plane load patterns (slope, step, sine+noise) as rate(t).
 *   proto_*.c   protocols behind struct lg_proto_ops: echo, memcache (text protocol with
 *               the ETC and USR workloads), spin (requests that carry a service time).
 *   check.c     the self-checks: KS test of inter-arrival times, batch-means confidence
 *               interval for the p99.
 *   engine.c    the client application: connections, the schedule, sends, responses,
 *               timeouts, reconnects, per-point statistics; closed-loop mode.
 *   sched.c     the schedule's arithmetic (points, segments, rate(t), the next arrival),
 *               with engine.h, the engine's private state.
 *   output.c    the human table, the JSON document, progress lines.
 *   main.c      the command line.
 *
 * Everything but engine.c and main.c is pure (no I/O, no clock) and unit-tested alone.
 */

/* ---- random numbers: xoshiro256** (Blackman, Vigna), seeded by splitmix64 ---- */

struct lg_rng { uint64_t s[4]; };

void lg_rng_seed(struct lg_rng *r, uint64_t seed);

static inline uint64_t lg_rng_next(struct lg_rng *r)
{
	uint64_t *s = r->s, result = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = s[3] << 45 | s[3] >> 19;
	return result;
}

/* Uniform in [0, 1) with 53 bits. */
static inline double lg_rng_unit(struct lg_rng *r) { return (double)(lg_rng_next(r) >> 11) * 0x1p-53; }

/* Uniform integer in [0, n) (n > 0), without modulo bias worth mentioning (Lemire). */
static inline uint64_t lg_rng_below(struct lg_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)lg_rng_next(r) * n) >> 64);
}

/* ---- distributions (dist.c) ---- */

enum lg_dist_kind {
	LG_DIST_FIXED,        /* a */
	LG_DIST_UNIFORM,      /* [a, b] */
	LG_DIST_EXP,          /* mean a */
	LG_DIST_NORMAL,       /* mean a, sd b (negative draws clamp to 0) */
	LG_DIST_GEV,          /* location a, scale b, shape c */
	LG_DIST_GPARETO,      /* location a, scale b, shape c */
	LG_DIST_BIMODAL,      /* value a with probability p, else b */
	LG_DIST_DISCRETE,     /* values[i] with probability cum[i] - cum[i-1] (n entries); when
			       * cum[n-1] < 1, the rest from GPareto(a, b, c) (mutilate's
			       * Discrete with a default: fb_value's head and tail) */
};

#define LG_DIST_MAX_POINTS 64

struct lg_dist {
	enum lg_dist_kind kind;
	double a, b, c, p;
	unsigned n;                               /* DISCRETE */
	double values[LG_DIST_MAX_POINTS];
	double cum[LG_DIST_MAX_POINTS];           /* cumulative probabilities, cum[n-1] <= 1 */
	char name[32];                            /* as given, for output */
};

/*
 * Parse "fixed:V", "uniform:A,B", "exp:MEAN", "normal:MEAN,SD", "gev:LOC,SCALE,SHAPE",
 * "gpareto:LOC,SCALE,SHAPE", "bimodal:P,A,B" (A with probability P), a plain number
 * (fixed), a named fit: "fb_key", "fb_value" (bytes), "fb_ia" (us) (mutilate's Facebook
 * ETC fits), or the ZygOS service kinds "bimodal1:MEAN", "bimodal2:MEAN" (see
 * lg_dist_service; "exp:MEAN" and "fixed:MEAN" are the other two). Aliases as mutilate
 * spells them: "exponential", "pareto".
 * @time false: numbers are taken as they are (bytes). @time true: the distribution is of
 * times in nanoseconds; every value (not a shape, not a probability) may carry a suffix
 * ("500ns", "10us", "2ms", "1s") and a bare number is in microseconds ("exp:10" is
 * "exp:10us"); fb_ia becomes nanoseconds too.
 * 0, or -EINVAL with one line in @err.
 */
int lg_dist_parse(struct lg_dist *d, const char *spec, bool time, char *err, size_t errlen);

/* ZygOS service times with mean @mean_ns: "fixed", "exp", "bimodal1" (90% S/2, 10% 5.5S),
 * "bimodal2" (99.9% S/2, 0.1% 500.5S). 0 or -EINVAL. */
int lg_dist_service(struct lg_dist *d, const char *kind, double mean_ns, char *err, size_t errlen);

double lg_dist_sample(const struct lg_dist *d, struct lg_rng *r);
double lg_dist_cdf(const struct lg_dist *d, double x);   /* P(X <= x) */
double lg_dist_mean(const struct lg_dist *d);
/* The inverse CDF at @u in (0, 1) (what sample draws through; mutilate's key lengths use
 * it with a hash of the key). */
double lg_dist_quantile(const struct lg_dist *d, double u);
/* The upper end of the support (INFINITY when unbounded): sizes buffers. */
double lg_dist_max(const struct lg_dist *d);

/* ---- arrivals and load patterns (arrival.c) ---- */

enum lg_arrival_kind { LG_ARRIVAL_POISSON, LG_ARRIVAL_FIXED, LG_ARRIVAL_TRACE };

struct lg_arrival {
	enum lg_arrival_kind kind;
	double *trace_gaps;       /* TRACE: inter-arrival gaps (any unit), replayed cyclically
				   * and scaled so their mean rate is the rate asked */
	size_t trace_n;
	double trace_mean;        /* mean of trace_gaps */
	size_t trace_pos;         /* per copy: each worker copies the struct (and starts at an
				   * offset of its own) */
};

/* Parse "poisson", "fixed" or "trace:FILE" (FILE: one gap in microseconds per line, '#'
 * comments and blank lines ignored; at least one positive gap). 0 or -errno, one line in
 * @err naming the file and line. */
int lg_arrival_parse(struct lg_arrival *a, const char *spec, char *err, size_t errlen);
void lg_arrival_free(struct lg_arrival *a);

/* The gap before the next arrival at @rate (arrivals per second, > 0), in nanoseconds. */
double lg_arrival_gap_ns(struct lg_arrival *a, double rate, struct lg_rng *r);

/* The CDF of a gap of x nanoseconds at @rate arrivals per second under @a's process, for
 * the KS self-check (Poisson: exponential; fixed and trace: NULL: no KS test, the slip
 * check stands in). */
typedef double (*lg_cdf_fn)(double x, double rate);
lg_cdf_fn lg_arrival_cdf(const struct lg_arrival *a);

/*
 * IX's load patterns (the control-plane paper, section 6): the offered rate as a function
 * of time over a run of @duration_s, between @lo and @hi requests/s:
 *   slope       lo to hi linearly over the first half, back to lo over the second;
 *   step        lo, then +step_rps every step_s seconds until hi, held to the end; with
 *               hold_s, held that long at hi, then -step_rps every step_s back to lo;
 *   sine        lo + (hi-lo)(1 - cos(2 pi t / period_s))/2, plus noise uniform in
 *               [-noise_rps, +noise_rps] redrawn every noise_s seconds (seeded), clamped
 *               to [0, hi].
 */
enum lg_pattern_kind { LG_PATTERN_NONE, LG_PATTERN_SLOPE, LG_PATTERN_STEP, LG_PATTERN_SINE };

struct lg_pattern {
	enum lg_pattern_kind kind;
	double lo, hi;
	double duration_s;
	double step_rps, step_s, hold_s;  /* STEP (hold_s 0: held at hi to the end) */
	double period_s, noise_rps, noise_s;  /* SINE */
	uint64_t seed;                    /* SINE noise */
};

/* Parse "slope:LO:HI", "step:LO:HI:STEP_RPS:STEP_S", "sine:LO:HI:PERIOD_S[:NOISE_RPS[:NOISE_S]]"
 * (rates take k/M suffixes). 0 or -EINVAL. */
int lg_pattern_parse(struct lg_pattern *p, const char *spec, double duration_s, uint64_t seed,
		     char *err, size_t errlen);
double lg_pattern_rate(const struct lg_pattern *p, double t_s);

/* @s as an error message may quote it: its first LG_QUOTE_MAX characters, control ones
 * as '?', so the message stays one line; in @buf (len LG_QUOTE_MAX + 1 takes them all). */
#define LG_QUOTE_MAX 60
const char *lg_quotable(const char *s, char *buf, size_t len);

/* Parse a rate with an optional k/M suffix ("250k", "1.5M", "1000"): a finite number
 * >= 0 (0 is accepted: callers that need a positive rate check). 0 or -EINVAL. */
int lg_parse_rate(const char *s, double *out);

/* ---- protocols (proto_echo.c, proto_memcache.c, proto_spin.c, proto_http.c, proto_dns.c) ---- */

enum lg_op { LG_OP_GET, LG_OP_SET, LG_OP_ECHO, LG_OP_SPIN };

enum lg_status {
	LG_RESP_OK = 0,     /* hit, stored, echoed */
	LG_RESP_MISS,       /* memcache GET answered END without a value (not an error) */
	LG_RESP_ERROR,      /* the server answered with an error (ERROR, CLIENT_ERROR,
			     * SERVER_ERROR, NOT_STORED, a wrong echo): counted, not fatal */
};

/* What the engine remembers about one request in flight, for its response. */
struct lg_req {
	uint64_t sched_ns;  /* when the arrival process scheduled it (latency's start) */
	uint64_t sent_ns;   /* when it was written to its connection (the engine's) */
	uint32_t point;     /* the measurement point (window) it belongs to, or UINT32_MAX */
	uint16_t op;        /* enum lg_op */
	uint16_t aux;       /* protocol's own (echo: the pattern's tag; memcache: key length,
			     * 0 = any key; spin: service_ns's low 16 bits) */
	uint32_t len;       /* protocol's own (echo, spin: request bytes; memcache GET: the
			     * key's record index, SET: value bytes) */
};

struct lg_proto_config {
	const char *name;       /* "echo", "memcache", "spin" */
	/* echo, spin */
	uint32_t size;          /* message bytes (0: echo 64; spin 16, the header alone;
				 * echo at most LG_ECHO_MAX, spin 16..LG_SPIN_MAX) */
	/* memcache: the workload's preset, then each field given overrides it (a zeroed
	 * struct gives none) */
	const char *workload;   /* "usr" (NULL: usr), "etc", or "custom" (needs keysize and
				 * valuesize; 100% GET unless get_ratio is given) */
	struct lg_dist keysize, valuesize; /* given when name[0] != 0 (lg_dist_parse sets it) */
	double get_ratio;       /* fraction of GETs, in [0, 1]; given when has_get_ratio */
	bool has_get_ratio;
	uint64_t records;       /* key space: keys 0..records-1 (0: 10,000 as mutilate; at most
				 * UINT32_MAX) */
	/* spin */
	struct lg_dist service; /* service time in ns (name[0] == 0: exp, mean 10 us) */
	/* http */
	const char *path;       /* the path every GET asks for (NULL: "/") */
	/* dns */
	const char *queries;    /* a dnsperf-style file of "NAME TYPE" lines (required) */
	const char *host;       /* the Host header's value (the server's address) */
};

#define LG_HTTP_PATH_MAX 1024u

struct lg_proto;

struct lg_proto_ops {
	const char *name;
	/* Over UDP: a request is a datagram and so is its response, which parse matches to
	 * its request whole (a response may be lost, or answer a request other than the
	 * oldest: the engine finds the one it answers among those in flight). */
	bool datagram;
	/* Build the protocol's state from @cfg (workload tables, key strings). NULL on
	 * error with one line in @err. */
	struct lg_proto *(*create)(const struct lg_proto_config *cfg, char *err, size_t errlen);
	void (*destroy)(struct lg_proto *p);
	/* Encode the next request into @buf (room @cap, at least max_request());
	 * fill @req->op/aux/len. Returns its length (0 if @cap is short). Per worker: @p may
	 * be shared, @r not. */
	size_t (*encode)(const struct lg_proto *p, struct lg_rng *r, uint8_t *buf, size_t cap,
			 struct lg_req *req);
	/* Encode the SET of key @i with a value of the workload's size (for --preload; 0 when
	 * the protocol has no keys). */
	size_t (*encode_preload)(const struct lg_proto *p, uint64_t i, struct lg_rng *r,
				 uint8_t *buf, size_t cap, struct lg_req *req);
	/*
	 * Parse the response to @req at the head of @data. Returns the bytes it takes (> 0)
	 * with *@status set; 0 when more bytes are needed (the engine shows them again with
	 * more); -EBADMSG when the stream cannot be a response (the engine resets the
	 * connection, counting an error). Streaming: a response may arrive in any pieces,
	 * and several back to back (pipelining): one call parses one response.
	 */
	long (*parse)(const struct lg_proto *p, const struct lg_req *req, const uint8_t *data,
		      size_t len, enum lg_status *status);
	/* Largest request encode can produce (buffer size). */
	size_t (*max_request)(const struct lg_proto *p);
	/* A line describing the workload for the output ("usr: key 19 B, value 2 B, 99.8% GET"). */
	void (*describe)(const struct lg_proto *p, char *buf, size_t len);
};

extern const struct lg_proto_ops lg_proto_echo, lg_proto_memcache, lg_proto_spin, lg_proto_http,
	lg_proto_dns;

/* DNS (proto_dns.c; pure, for the unit tests and the fuzzer). */
#define LG_DNS_HDR      12u
#define LG_DNS_NAME_MAX 255u
/* The question for NAME (dotted) and TYPE (A, AAAA, NS, MX, CNAME, TXT, SOA, ANY) in wire
 * form at @out (room LG_DNS_NAME_MAX + 4): 0 with *@len, or -EINVAL. */
int lg_dns_question(const char *name, const char *type, uint8_t *out, size_t *len);
/* Whether the datagram @data answers the query with @id and question @q (wire form): 0
 * with *@status (NOERROR ok, NXDOMAIN miss, TC or another RCODE error), or -EBADMSG. */
int lg_dns_match(const uint8_t *data, size_t len, uint16_t id, const uint8_t *q, size_t qlen,
		 enum lg_status *status);

/* One HTTP/1.x response at the head of @data (proto_http.c; pure, for the unit tests and
 * the fuzzer): its length, 0 for "more", -EBADMSG when it cannot be framed. */
long lg_http_parse(const uint8_t *data, size_t len, enum lg_status *status);

/* The ops named @name, or NULL. */
const struct lg_proto_ops *lg_proto_find(const char *name);

/*
 * The spin protocol, binary, little-endian. A request is a 16-byte header followed by
 * (len - 16) bytes of padding (zeros):
 *   u32 magic LG_SPIN_MAGIC, u32 len (total, 16..65536), u64 service_ns
 * The server spins for service_ns and answers with the same 16-byte header. The client
 * takes a bad magic as a lost stream (-EBADMSG), another request's len or service_ns as a
 * wrong answer (LG_RESP_ERROR). (DNS and HTTP fit behind the same ops table later.)
 */
#define LG_SPIN_MAGIC 0x4e495053u   /* "SPIN" */
#define LG_SPIN_HDR   16u
#define LG_SPIN_MAX   65536u

/* Echo: messages of 1..LG_ECHO_MAX bytes. */
#define LG_ECHO_MAX   (1u << 20)

/* Memcache: the longest response line taken (CRLF included), the largest VALUE data
 * length taken (both else -EBADMSG), and the largest value a SET sends (under memcached's
 * default 1 MiB item limit, which counts the item header and key too). */
#define LG_MC_MAX_LINE  2048u
#define LG_MC_MAX_BYTES (1u << 30)
#define LG_MC_MAX_VALUE 1000000u

/* ---- self-checks (check.c) ---- */

/* One-sample Kolmogorov-Smirnov test of @x[0..n) (sorted in place) against @cdf at
 * @rate: the statistic D and its asymptotic p-value P(K > sqrt(n) D), K Kolmogorov's
 * limiting distribution (scipy.stats.kstest(..., method="asymp")). n = 0: D 0, p 1. */
struct lg_ks { double d, p; size_t n; };
void lg_ks_test(double *x, size_t n, lg_cdf_fn cdf, double rate, struct lg_ks *out);

/* Two-sided Student t quantile t_{1-alpha/2, df} (for the confidence interval): 2.776 for
 * alpha 0.05 and 4 df. NAN when df is 0 or alpha is not in (0, 1). */
double lg_t_quantile(double alpha, unsigned df);

/*
 * Batch means: the measurement window is cut into LG_BATCHES equal slices of time, each
 * with its own coarse histogram; the p99 of each slice is one sample, and the 95%
 * interval is mean +- t * sd / sqrt(k) over the k slices with at least LG_BATCH_MIN
 * samples (k >= 5, else the interval is unknown: lo = hi = 0, ok = false).
 */
#define LG_BATCHES    20
#define LG_BATCH_MIN  100
#define LG_CHIST_SUB_BITS 4
#define LG_CHIST_BUCKETS  ((64u - LG_CHIST_SUB_BITS + 1u) << LG_CHIST_SUB_BITS)

struct lg_chist { uint64_t count; uint32_t b[LG_CHIST_BUCKETS]; };  /* ~6% buckets */

void lg_chist_record(struct lg_chist *h, uint64_t v);
void lg_chist_merge(struct lg_chist *dst, const struct lg_chist *src);
uint64_t lg_chist_percentile(const struct lg_chist *h, double p);

struct lg_ci { double lo, hi, mean; unsigned k; bool ok; };
void lg_p99_ci(const struct lg_chist *batches, unsigned n, struct lg_ci *out);

/* Reservoir of inter-arrival gaps for the KS test (Vitter's algorithm R); the verdict
 * tests a point only with at least LG_KS_MIN of them. */
#define LG_KS_SAMPLES 4000
#define LG_KS_MIN     100
struct lg_reservoir { uint64_t seen; uint32_t n; double x[LG_KS_SAMPLES]; };
void lg_reservoir_add(struct lg_reservoir *res, double v, struct lg_rng *r);
/* Merge @src into @dst keeping a uniform sample of both (weighted by seen). */
void lg_reservoir_merge(struct lg_reservoir *dst, const struct lg_reservoir *src, struct lg_rng *r);

/* ---- one measurement point (a sweep rate, or a pattern's window) ---- */

struct lg_point {
	double target_rps;          /* what the schedule asked for */
	double duration_s;          /* measured span */
	uint64_t scheduled;         /* arrivals scheduled in the span (offered = this/duration) */
	uint64_t sent;
	uint64_t completed;         /* responses (any status) to requests of this point */
	uint64_t ok, misses, errors;
	uint64_t timeouts;          /* no response within --timeout: the connection is reset */
	uint64_t dropped;           /* not sent: a connection's backlog was full */
	uint64_t reconnects;
	uint64_t loop_gaps;         /* the generator's own loop gaps during the point (rounds
				     * more than 50 us apart, sleep left out: long work or a
				     * stall) */
	uint64_t loop_gap_ns;       /* ... and their total length */
	uint64_t loop_stalls;       /* ... those of 512 us or more: the core taken away */
	struct fp_hist latency;     /* ns, from the scheduled send time to the response */
	struct fp_hist slip;        /* ns, scheduled time to the time the send was queued */
	struct fp_hist latency_sent; /* ns, from the actual send to the response: what a
				     * generator that measures from the send (mutilate) reports;
				     * the difference to @latency is time spent waiting to be
				     * sent (backlog, a stalled generator) */
	struct lg_chist batches[LG_BATCHES];
	struct lg_reservoir gaps;   /* actual gaps between sends on one worker, ns */
	double gap_rate;            /* the per-worker rate those gaps should follow */
	bool partial;               /* cut short (Ctrl-C) */
};

void lg_point_init(struct lg_point *pt, double target_rps, double duration_s);
/* Add @src's counts and histograms into @dst (per-worker points summed); the reservoirs
 * merge into one uniform sample of both. target_rps, duration_s and gap_rate describe the
 * point, not a worker: @dst keeps its own, taking @src's only where it has 0. partial:
 * either's. */
void lg_point_merge(struct lg_point *dst, const struct lg_point *src, struct lg_rng *r);

/* What output.c reports and JSON carries for a point, computed once from the merged point. */
struct lg_verdict {
	double offered_rps, achieved_rps;
	struct fp_hist_summary lat, slip;   /* ns */
	struct fp_hist_summary lat_sent;    /* ns, from the actual send */
	struct lg_ci p99_ci;                /* ns */
	struct lg_ks ks;                    /* n = 0: not tested (fixed, trace, closed loop,
					     * fewer than LG_KS_MIN gaps) */
	/* offered = scheduled / duration; achieved = (ok + misses + errors) / duration: every
	 * answer counts, errors included, since the server did answer */
	bool ok_rate;       /* achieved >= 99% of offered (open loop; always true closed) */
	bool ok_slip;       /* slip p99 <= max_slip */
	bool ok_ks;         /* p >= 0.01, or not tested */
	bool ok_ci;         /* interval known and its half-width <= 10% of the p99 */
	bool valid;         /* ok_rate && ok_slip && no dropped and no timeouts */
};

void lg_point_verdict(const struct lg_point *pt, lg_cdf_fn cdf, double max_slip_ns,
		      bool closed_loop, struct lg_verdict *v);

/* ---- engine.c, output.c, main.c: the run (below this line the engine's owner adds
 * struct lg_config and the engine and output entry points) ---- */

#include <stdio.h>

#define LG_MAX_CONNS      100000u  /* connections in all */
#define LG_MAX_DEPTH      1024u    /* --depth and --closed */
#define LG_MAX_BACKLOG    65536u   /* --backlog */
#define LG_MAX_SLOTS      (1u << 24) /* conns x (depth + backlog): request slots in all */
#define LG_BACKLOG        32u      /* default --backlog: requests waiting for room on one
				    * connection; beyond: dropped (counted) */
#define LG_POLL_BURST     64u      /* arrivals one poll pass issues at most; the rest are
				    * late, and their slip says so */
#define LG_SWEEP_US       1000u    /* the housekeeping tick: timeouts, reconnects, progress */
#define LG_SWEEP_SLICES   10u      /* each tick checks a tenth of the connections: each is
				    * checked every 10 ms */
#define LG_CONNECT_BURST  256u     /* connects in flight per worker during setup */
#define LG_PRELOAD_DEPTH  8u       /* SETs in flight per connection while preloading */

/* What the command line asks for (main.c fills it; the engine and output read it). */
struct lg_config {
	struct fp_rt_config rt;           /* runtime options; idle defaults to poll */
	uint32_t server_addr;             /* host order */
	uint16_t server_port;
	char server[32];                  /* "A.B.C.D:PORT" */
	const struct lg_proto_ops *ops;
	struct lg_proto_config proto;
	struct lg_arrival arrival;
	const char *arrival_spec;         /* as given ("poisson") */
	/* The schedule: one point per rate (--rate, --rates, --sweep), or a pattern reported
	 * per window, or closed loop (one point). */
	double *rates;
	unsigned n_rates;
	struct lg_pattern pattern;        /* kind NONE unless --pattern */
	const char *pattern_spec;
	double window_s;
	unsigned closed;                  /* K outstanding per connection; 0 = open loop */
	unsigned conns, depth;
	uint16_t udp_port_base;           /* datagram protocols: connection k of worker w binds
					   * base + k * workers + w */
	unsigned backlog;                 /* requests waiting per connection before drops */
	double warmup_s, duration_s;      /* duration: per point, or the whole pattern */
	double timeout_ms, max_slip_us, slo_us;
	bool preload, quiet;
	uint64_t seed;
	const char *json;
	int argc;
	char **argv;
};

/* Points the run has (rates, pattern windows, or 1 closed-loop point). */
unsigned lg_config_points(const struct lg_config *cfg);
/* Point @i's window: start (seconds after the warm-up began) and length. */
double lg_point_start_s(const struct lg_config *cfg, unsigned i);
double lg_point_len_s(const struct lg_config *cfg, unsigned i);
/* The rate point @i asks for: its rate, or the pattern's mean over its window; 0 closed. */
double lg_point_target(const struct lg_config *cfg, unsigned i);

/* What a run produced, merged over the workers (engine.c fills it). */
struct lg_result {
	struct lg_point *points;          /* [n_points]: those whose window started */
	unsigned n_points;
	bool interrupted;                 /* stopped by SIGINT/SIGTERM: the last one partial */
	uint64_t preload_keys, preload_errors;
	double setup_s;                   /* connecting and preloading */
	char workload[160];               /* the protocol's describe() */
	char error[256];                  /* a run error ("" when none): exit 1 */
};

/* Run @cfg: connect, preload, warm up, measure every point, drain. 0 (finished or
 * interrupted: see @res), or -errno with @res->error saying why (or nothing, when the
 * runtime's startup failed and said so on stderr). Free @res with lg_result_free(). */
int lg_engine_run(const struct lg_config *cfg, struct lg_result *res);
void lg_result_free(struct lg_result *res);

/* output.c */
void lg_verdicts(const struct lg_config *cfg, const struct lg_result *res, struct lg_verdict *v);
void lg_print_table(FILE *f, const struct lg_config *cfg, const struct lg_result *res,
		    const struct lg_verdict *v);
/* The JSON document (see README.md). 0, or -errno with one line on stderr. */
int lg_write_json(const char *path, const struct lg_config *cfg, const struct lg_result *res,
		  const struct lg_verdict *v);

/* One progress line on @f for a finished point (counts over every worker; p99 the
 * largest worker's, exact with one worker). */
struct lg_progress {
	uint64_t scheduled, completed, errors, timeouts, dropped;
	uint64_t p99_ns;
};
void lg_print_progress(FILE *f, const struct lg_config *cfg, unsigned i,
		       const struct lg_progress *p);
