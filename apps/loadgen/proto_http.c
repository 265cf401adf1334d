/* proto_http.c: the http protocol: GET of one path over keep-alive HTTP/1.1, responses framed by Content-Length. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lg.h"

/*
 * Each request is "GET PATH HTTP/1.1" with a Host header (the server's address) and
 * nothing else, on a keep-alive connection; with --depth above 1 they are pipelined. A
 * response is its head (up to LG_HTTP_MAX_HEAD bytes, ended by a blank line) and a body
 * of Content-Length bytes (none for 1xx, 204 and 304); a head without a length, a
 * chunked one, or one that does not end within the limit cannot be framed, and the
 * connection is reset (counted as an error). 2xx and 3xx answers are OK, others errors.
 */

#define LG_HTTP_MAX_HEAD 16384u
#define LG_HTTP_MAX_REQ  (LG_HTTP_PATH_MAX + 128u)

struct lg_proto {
	char req[LG_HTTP_MAX_REQ];
	size_t req_len;
	char path[LG_HTTP_PATH_MAX + 1];
};

static struct lg_proto *http_create(const struct lg_proto_config *cfg, char *err, size_t errlen)
{
	const char *path = cfg->path ? cfg->path : "/";
	struct lg_proto *p;

	if (path[0] != '/' || strlen(path) > LG_HTTP_PATH_MAX || strpbrk(path, " \r\n\t")) {
		snprintf(err, errlen, "http: --path '%.60s' must start with '/', have no blanks and "
			 "be at most %u bytes", path, LG_HTTP_PATH_MAX);
		return NULL;
	}
	if (!(p = calloc(1, sizeof(*p)))) {
		snprintf(err, errlen, "http: out of memory");
		return NULL;
	}
	snprintf(p->path, sizeof(p->path), "%s", path);
	p->req_len = (size_t)snprintf(p->req, sizeof(p->req), "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n",
				      path, cfg->host ? cfg->host : "localhost");
	return p;
}

static void http_destroy(struct lg_proto *p) { free(p); }

static size_t http_encode(const struct lg_proto *p, struct lg_rng *r, uint8_t *buf, size_t cap,
			  struct lg_req *req)
{
	(void)r;
	if (cap < p->req_len)
		return 0;
	memcpy(buf, p->req, p->req_len);
	req->op = LG_OP_GET;
	req->aux = 0;
	req->len = (uint32_t)p->req_len;
	return p->req_len;
}

static size_t http_encode_preload(const struct lg_proto *p, uint64_t i, struct lg_rng *r,
				  uint8_t *buf, size_t cap, struct lg_req *req)
{
	(void)p, (void)i, (void)r, (void)buf, (void)cap, (void)req;
	return 0;
}

/* The end of the head (just past "\r\n\r\n"), or 0. */
static size_t head_end(const uint8_t *d, size_t len)
{
	for (size_t i = 3; i < len; i++)
		if (d[i] == '\n' && d[i - 1] == '\r' && d[i - 2] == '\n' && d[i - 3] == '\r')
			return i + 1;
	return 0;
}

long lg_http_parse(const uint8_t *data, size_t len, enum lg_status *status)
{
	size_t end = head_end(data, len < LG_HTTP_MAX_HEAD ? len : LG_HTTP_MAX_HEAD);
	const char *d = (const char *)data;

	if (!end)
		return len >= LG_HTTP_MAX_HEAD ? -EBADMSG : 0;
	if (end < 16 || memcmp(d, "HTTP/1.", 7) || d[8] != ' ' || d[9] < '1' || d[9] > '5' ||
	    d[10] < '0' || d[10] > '9' || d[11] < '0' || d[11] > '9')
		return -EBADMSG;
	int code = (d[9] - '0') * 100 + (d[10] - '0') * 10 + (d[11] - '0');
	long long body = -1;
	for (size_t i = 0; i < end;) {
		const char *nl = memchr(d + i, '\n', end - i);
		size_t n = (size_t)(nl - (d + i)) + 1;
		if (n > 15 && !strncasecmp(d + i, "content-length:", 15)) {
			size_t k = i + 15, digits = 0;
			while (k < i + n && (d[k] == ' ' || d[k] == '\t'))
				k++;
			for (body = 0; k < i + n && d[k] >= '0' && d[k] <= '9'; k++, digits++)
				if ((body = body * 10 + (d[k] - '0')) > (1ll << 31))
					return -EBADMSG;
			while (k < i + n && (d[k] == ' ' || d[k] == '\t'))
				k++;
			if (!digits || k + 2 != i + n || d[k] != '\r')
				return -EBADMSG;     /* not "digits CRLF" */
		} else if (n > 18 && !strncasecmp(d + i, "transfer-encoding:", 18)) {
			return -EBADMSG;             /* chunked: not framed here */
		}
		i += n;
	}
	if (code < 200 || code == 204 || code == 304)
		body = 0;
	if (body < 0)
		return -EBADMSG;
	if (len < end + (size_t)body)
		return 0;
	*status = code < 400 ? LG_RESP_OK : LG_RESP_ERROR;
	return (long)(end + (size_t)body);
}

static long http_parse(const struct lg_proto *p, const struct lg_req *req, const uint8_t *data,
		       size_t len, enum lg_status *status)
{
	(void)p, (void)req;
	return lg_http_parse(data, len, status);
}

static size_t http_max_request(const struct lg_proto *p) { return p->req_len; }

static void http_describe(const struct lg_proto *p, char *buf, size_t len)
{
	snprintf(buf, len, "http: GET %s, keep-alive", p->path);
}

const struct lg_proto_ops lg_proto_http = {
	.name = "http",
	.create = http_create,
	.destroy = http_destroy,
	.encode = http_encode,
	.encode_preload = http_encode_preload,
	.parse = http_parse,
	.max_request = http_max_request,
	.describe = http_describe,
};
