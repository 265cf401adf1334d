/* echo.h: fp-echo's private interface: options, per-worker results, the four modes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/clock.h>
#include <flowplane/hist.h>
#include <flowplane/rt.h>

#define ECHO_DEFAULT_PORT   7
#define ECHO_MAX_SIZE       (4u << 20)     /* a message fits one connection's output queue */
#define ECHO_MAX_PENDING    (8u << 20)     /* evl output cap: two messages of the largest size */
#define ECHO_MAX_UNREAD     (256u << 10)   /* server: input kept unread (its output full)
					    * before TCP stops the client */
#define ECHO_RETRY_US       10000u         /* a failed connection is retried after this */

/* The spin protocol (apps/loadgen/lg.h): a 16-byte little-endian header, u32 magic
 * "SPIN", u32 total length (16..65536), u64 service_ns; spin.c and spin_native.c serve it. */
#define SPIN_MAGIC     0x4e495053u
#define SPIN_HDR       16u
#define SPIN_MAX_LEN   65536u
#define SPIN_MAX_NS    (60ull * FP_NS_PER_S)   /* the client's own cap */

static inline uint64_t echo_le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

enum echo_mode { ECHO_SERVER, ECHO_CLIENT, ECHO_PINGPONG, ECHO_SPIN };

struct echo_opts {
	enum echo_mode mode;
	const char *cmd;                /* "server", "client", "pingpong", "spin" */
	struct fp_rt_config rt;
	/* server, spin */
	uint16_t port;
	bool udp;
	bool native;                    /* server, spin: the native-API server (steal-safe) */
	bool threads;                   /* server, spin: user-level threads, blocking sockets */
	bool pthreads;                  /* server, spin: Linux threads and sockets (the peer) */
	/* client, pingpong */
	uint32_t server_addr;           /* host order */
	uint16_t server_port;
	char server_str[32];            /* "A.B.C.D:PORT", for the report */
	unsigned conns;
	size_t size;
	uint64_t rounds;                /* round trips per connection; 0 = never close */
	double duration_s, warmup_s;    /* client */
	uint64_t count, warmup_n;       /* pingpong */
	const char *json;
};

/* What one client worker measured; summed by main after fp_rt_run() returns. */
struct echo_result {
	uint64_t msgs;                  /* round trips completed inside the window */
	uint64_t conns;                 /* connections established inside the window */
	uint64_t errors;                /* failed connects, unexpected closes, bad echoes */
	uint64_t total_msgs;            /* round trips completed, warm-up included */
	uint64_t start_ns, end_ns;      /* the measurement window (CLOCK_MONOTONIC) */
	bool measured;                  /* the window opened */
	int first_error;                /* -errno of the first failure */
	struct fp_hist rtt_ns;
};

struct echo_run {
	const struct echo_opts *o;
	struct echo_result *res;        /* [o->rt.n_workers] */
};

/* Monotonic nanoseconds: the round-trip clock (vDSO, tens of ns). */
uint64_t echo_now_ns(void);

int echo_server_run(const struct echo_opts *o);
int echo_tserver_run(const struct echo_opts *o);    /* server --threads (tserver.c) */
int echo_tspin_run(const struct echo_opts *o);      /* spin --threads (tserver.c) */
int echo_pthreads_run(const struct echo_opts *o);   /* server, spin --pthreads (pthreads.c) */
int echo_client_run(const struct echo_opts *o);    /* client and pingpong */
int echo_spin_run(const struct echo_opts *o);      /* fp-loadgen's spin protocol (spin.c) */
int echo_spin_native_run(const struct echo_opts *o); /* the same on api.h, and server
							* --native's echo (spin_native.c) */
/* spin_native.c's application, for a caller that runs it itself (fp-vsim --full) */
struct fp_app;
void echo_spin_native_app(struct fp_app *app, const struct echo_opts *o);
