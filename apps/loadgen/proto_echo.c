/* proto_echo.c: the echo protocol (a patterned message, the same bytes back) and the protocol table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

struct lg_proto {
	uint32_t size;
};

/*
 * Byte @i of the message tagged @tag: a pattern that differs from one tag to the next
 * within the first bytes, so an answer to another request (or a shifted stream) shows
 * as a wrong byte, not only a corrupted one.
 */
static inline uint8_t echo_byte(uint16_t tag, uint32_t i)
{
	uint32_t x = (uint32_t)tag * 0x9e3779b1u + i * 0x85ebca6bu;
	return (uint8_t)(x >> 24 ^ x >> 11);
}

static struct lg_proto *echo_create(const struct lg_proto_config *cfg, char *err, size_t errlen)
{
	uint32_t size = cfg->size ? cfg->size : 64;
	struct lg_proto *p;

	if (size > LG_ECHO_MAX) {
		snprintf(err, errlen, "echo: --size %u is over %u bytes", size, LG_ECHO_MAX);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "echo: out of memory");
		return NULL;
	}
	p->size = size;
	return p;
}

static void echo_destroy(struct lg_proto *p) { free(p); }

static size_t echo_encode(const struct lg_proto *p, struct lg_rng *r, uint8_t *buf, size_t cap,
			  struct lg_req *req)
{
	uint16_t tag = (uint16_t)lg_rng_next(r);

	if (cap < p->size)
		return 0;
	for (uint32_t i = 0; i < p->size; i++)
		buf[i] = echo_byte(tag, i);
	req->op = LG_OP_ECHO;
	req->aux = tag;
	req->len = p->size;
	return p->size;
}

static size_t echo_encode_preload(const struct lg_proto *p, uint64_t i, struct lg_rng *r,
				  uint8_t *buf, size_t cap, struct lg_req *req)
{
	(void)p, (void)i, (void)r, (void)buf, (void)cap, (void)req;
	return 0;
}

static long echo_parse(const struct lg_proto *p, const struct lg_req *req, const uint8_t *data,
		       size_t len, enum lg_status *status)
{
	(void)p;
	if (req->len == 0 || req->len > LG_ECHO_MAX)
		return -EBADMSG; /* no request of ours looks like this */
	if (len < req->len)
		return 0;
	*status = LG_RESP_OK;
	for (uint32_t i = 0; i < req->len; i++)
		if (data[i] != echo_byte(req->aux, i)) {
			*status = LG_RESP_ERROR;
			break;
		}
	return (long)req->len;
}

static size_t echo_max_request(const struct lg_proto *p) { return p->size; }

static void echo_describe(const struct lg_proto *p, char *buf, size_t len)
{
	snprintf(buf, len, "echo: %u-byte messages", p->size);
}

const struct lg_proto_ops lg_proto_echo = {
	.name = "echo",
	.create = echo_create,
	.destroy = echo_destroy,
	.encode = echo_encode,
	.encode_preload = echo_encode_preload,
	.parse = echo_parse,
	.max_request = echo_max_request,
	.describe = echo_describe,
};

const struct lg_proto_ops *lg_proto_find(const char *name)
{
	static const struct lg_proto_ops *const all[] = { &lg_proto_echo, &lg_proto_memcache,
							  &lg_proto_spin, &lg_proto_http,
							  &lg_proto_dns };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!strcmp(all[i]->name, name))
			return all[i];
	return NULL;
}
