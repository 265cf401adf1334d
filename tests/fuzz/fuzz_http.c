/* fuzz_http.c: any bytes as HTTP requests into fp-web's parser and responder (apps/web), in pipelined sequence. */
#include <stdlib.h>
#include <string.h>

#include "web.h"

/*
 * The input is a connection's bytes. Requests are parsed and answered one after another as
 * fp-web does; each answer's pieces must be well formed (a status line first, a blank line
 * ending the head, the lengths adding up), a refused request ends the connection, and the
 * parse must consume at least one byte per request. The paths are also checked alone:
 * what web_path accepts starts with '/' and has no "." or ".." segment.
 */
static struct web_site *site;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char scratch[WEB_SCRATCH], path[WEB_MAX_TARGET + 16];
	const char *p = (const char *)data;
	size_t used = 0;

	if (!site) {
		char err[256];
		if (!(site = web_site_load("/usr/share/doc/libc6", 1 << 20, err, sizeof(err))) &&
		    !(site = web_site_load("/tmp", 1 << 20, err, sizeof(err))))
			abort();
	}
	if (!web_path(p, size, path, sizeof(path))) {
		if (path[0] != '/' || strstr(path, "/./") || strstr(path, "/../") ||
		    strlen(path) > size + 1)
			abort();
	}
	for (int guard = 0; used < size && guard < 1000; guard++) {
		struct web_req r;
		struct web_resp o;
		size_t scanned = 0;
		int st = web_parse(p + used, size - used, &scanned, &r);
		if (st == 1)
			break;
		web_respond(site, &r, st, "Fri, 27 Nov 2026 12:00:00 GMT", scratch, &o);
		size_t total = 0;
		for (unsigned i = 0; i < o.n; i++)
			total += o.iov[i].iov_len;
		if (!o.n || total != o.bytes || memcmp(o.iov[0].iov_base, "HTTP/1.1 ", 9))
			abort();
		if (st || o.close)
			break;
		if (!r.head_len || r.head_len > size - used)
			abort();
		used += r.head_len;
		used += r.body_len < size - used ? r.body_len : size - used;
	}
	return 0;
}
