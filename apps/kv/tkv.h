/* tkv.h: fp-kv's blocking-style servers (--style threads), beside server.c's event callbacks. */
#pragma once

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <flowplane/rt.h>

#include "proto.h"

struct kv_tkv_config {
	const struct fp_rt_config *rt;
	struct kv_proto *proto;
	uint16_t port;
	unsigned maxconns;           /* -c */
	atomic_uint *conns;          /* live connections, against -c */
	size_t max_pending;          /* per connection's output: the largest answer fits */
	size_t max_total_pending;    /* all connections' output */
};

/* A user-level thread per connection (tsock.h) on @cfg->rt's workers; fp_rt_run's status. */
int kv_threads_run(const struct kv_tkv_config *cfg);
