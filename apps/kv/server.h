/* server.h: fp-kv's server on flowplane's event layer (the store, the protocol, the connections), without its command line. */
#pragma once

#include <stdatomic.h>

#include <flowplane/api.h>
#include <flowplane/evl.h>

#include "proto.h"

/*
 * What fp-kv serves, apart from how it was asked to: main.c fills it from memcached's
 * flags, and fp-vsim --full (tools/vsim) builds one to run the real server on N virtual
 * cores. Use:
 *
 *     kv_server_defaults(&s);          memcached's defaults (64 MB, port 11211, ...)
 *     ... change s.store, s.set ...
 *     kv_server_open(&s, n_workers)    the store and the protocol's state
 *     kv_server_app(&s, &app)          the application to run (fp_rt_run, a simulator)
 *     kv_server_close(&s)              after the run
 */
struct kv_server {
	struct kv_store_config store;
	struct kv_settings set;
	struct kv_proto proto;
	struct fp_evl_ops ops;
	atomic_uint conns;           /* live connections, against set.maxconns */
};

void kv_server_defaults(struct kv_server *s);
/* The store and the protocol for @n_workers workers: 0, or -errno with one line in @err. */
int kv_server_open(struct kv_server *s, unsigned n_workers, char *err, size_t errlen);
/* The application (event callbacks; steal-safe, movable) over @s. */
void kv_server_app(struct kv_server *s, struct fp_app *app);
void kv_server_close(struct kv_server *s);
