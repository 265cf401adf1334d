/* proto_spin.c: the spin protocol: requests that carry a service time, answered by their header. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

#define SPIN_MAX_NS 60e9 /* a minute of spinning: more is a mistake in the distribution */

struct lg_proto {
	uint32_t size;          /* request bytes, header included */
	struct lg_dist service; /* ns */
};

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static struct lg_proto *spin_create(const struct lg_proto_config *cfg, char *err, size_t errlen)
{
	uint32_t size = cfg->size ? cfg->size : LG_SPIN_HDR;
	struct lg_proto *p;

	if (size < LG_SPIN_HDR || size > LG_SPIN_MAX) {
		snprintf(err, errlen, "spin: request size %u outside %u..%u bytes", size, LG_SPIN_HDR,
			 LG_SPIN_MAX);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "spin: out of memory");
		return NULL;
	}
	p->size = size;
	if (cfg->service.name[0])
		p->service = cfg->service;
	else /* unset: exponential with mean 10 us, ZygOS's usual S */
		lg_dist_service(&p->service, "exp", 10000, err, errlen);
	return p;
}

static void spin_destroy(struct lg_proto *p) { free(p); }

static size_t spin_encode(const struct lg_proto *p, struct lg_rng *r, uint8_t *buf, size_t cap,
			  struct lg_req *req)
{
	double s = lg_dist_sample(&p->service, r);
	uint64_t ns = s > 0 ? (uint64_t)llround(fmin(s, SPIN_MAX_NS)) : 0;

	if (cap < p->size)
		return 0;
	put_le32(buf, LG_SPIN_MAGIC);
	put_le32(buf + 4, p->size);
	put_le64(buf + 8, ns);
	memset(buf + LG_SPIN_HDR, 0, p->size - LG_SPIN_HDR);
	req->op = LG_OP_SPIN;
	req->aux = (uint16_t)ns;
	req->len = p->size;
	return p->size;
}

static size_t spin_encode_preload(const struct lg_proto *p, uint64_t i, struct lg_rng *r,
				  uint8_t *buf, size_t cap, struct lg_req *req)
{
	(void)p, (void)i, (void)r, (void)buf, (void)cap, (void)req;
	return 0;
}

/* The answer is the request's header: a bad magic means the stream is lost (-EBADMSG); a
 * header of another request (length, service time) is a wrong answer (LG_RESP_ERROR). */
static long spin_parse(const struct lg_proto *p, const struct lg_req *req, const uint8_t *data,
		       size_t len, enum lg_status *status)
{
	uint8_t magic[4];

	(void)p;
	put_le32(magic, LG_SPIN_MAGIC);
	if (len > 0 && memcmp(data, magic, len < 4 ? len : 4))
		return -EBADMSG;
	if (len < LG_SPIN_HDR)
		return 0;
	bool same = get_le(data + 4, 4) == req->len && (uint16_t)get_le(data + 8, 8) == req->aux;
	*status = same ? LG_RESP_OK : LG_RESP_ERROR;
	return LG_SPIN_HDR;
}

static size_t spin_max_request(const struct lg_proto *p) { return p->size; }

static void spin_describe(const struct lg_proto *p, char *buf, size_t len)
{
	snprintf(buf, len, "spin: service %s (mean %.1f us), %u-byte requests", p->service.name,
		 lg_dist_mean(&p->service) / 1000, p->size);
}

const struct lg_proto_ops lg_proto_spin = {
	.name = "spin",
	.create = spin_create,
	.destroy = spin_destroy,
	.encode = spin_encode,
	.encode_preload = spin_encode_preload,
	.parse = spin_parse,
	.max_request = spin_max_request,
	.describe = spin_describe,
};
