/* echo.h: fp-echo's private interface: options, per-worker results, the four modes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/hist.h>
#include <flowplane/rt.h>

#define ECHO_DEFAULT_PORT   7
#define ECHO_MAX_SIZE       (4u << 20)     /* a message fits one connection's output queue */
#define ECHO_MAX_PENDING    (8u << 20)     /* evl output cap: two messages of the largest size */
#define ECHO_MAX_UNREAD     (256u << 10)   /* server: input kept unread (its output full)
					    * before TCP stops the client */
#define ECHO_RETRY_US       10000u         /* a failed connection is retried after this */

enum echo_mode { ECHO_SERVER, ECHO_CLIENT, ECHO_PINGPONG, ECHO_SPIN };

struct echo_opts {
	enum echo_mode mode;
	const char *cmd;                /* "server", "client", "pingpong", "spin" */
	struct fp_rt_config rt;
	/* server, spin */
	uint16_t port;
	bool udp;
	bool native;                    /* spin: the native-API server (steal-safe) */
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
int echo_client_run(const struct echo_opts *o);    /* client and pingpong */
int echo_spin_run(const struct echo_opts *o);      /* fp-loadgen's spin protocol (spin.c) */
int echo_spin_native_run(const struct echo_opts *o); /* the same on api.h (spin_native.c) */
