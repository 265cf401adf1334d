/* test_web.c: fp-web's request parser, paths, dates and responses (apps/web): every status, pipelining, traversal refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "web.h"

static char root[] = "/tmp/fp-web-test-XXXXXX";
static struct web_site *site;

static void put_file(const char *rel, const char *text)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	char p[512], err[256];

	(void)state;
	if (!mkdtemp(root))
		return -1;
	snprintf(p, sizeof(p), "%s/sub", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/empty", root);
	mkdir(p, 0755);
	put_file("index.html", "<h1>home</h1>\n");
	put_file("a.txt", "hello\n");
	put_file("sub/index.html", "sub\n");
	put_file("sub/x y.css", "body{}\n");
	put_file("../fp-web-secret", "secret\n");
	snprintf(p, sizeof(p), "%s/out", root);
	if (symlink("/etc/passwd", p) || (snprintf(p, sizeof(p), "%s/in", root), symlink("a.txt", p)))
		return -1;
	site = web_site_load(root, 1 << 20, err, sizeof(err));
	if (!site)
		fprintf(stderr, "%s\n", err);
	return site ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[600];

	(void)state;
	web_site_free(site);
	snprintf(cmd, sizeof(cmd), "rm -rf %s /tmp/fp-web-secret", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* The response as one string. */
static char *respond(const char *req, int *status)
{
	static char out[8192], scratch[WEB_SCRATCH];
	struct web_req r;
	struct web_resp o;
	size_t scanned = 0, n = 0;
	int st = web_parse(req, strlen(req), &scanned, &r);

	assert_int_not_equal(st, 1);
	web_respond(site, &r, st, "Fri, 27 Nov 2026 12:00:00 GMT", scratch, &o);
	for (unsigned i = 0; i < o.n; i++) {
		memcpy(out + n, o.iov[i].iov_base, o.iov[i].iov_len);
		n += o.iov[i].iov_len;
	}
	assert_int_equal(n, o.bytes);
	out[n] = '\0';
	*status = o.status;
	return out;
}

static void parser(void **state)
{
	(void)state;
	struct web_req r;
	size_t sc = 0;
	const char *ok = "GET /a.txt?x=1 HTTP/1.1\r\nHost: h\r\nIf-None-Match:  \"abc\" \r\n\r\nGET";

	assert_int_equal(web_parse(ok, strlen(ok), &sc, &r), 0);
	assert_int_equal(r.method, WEB_GET);
	assert_int_equal(r.head_len, strlen(ok) - 3);       /* the next request stays */
	assert_true(r.keep_alive);
	assert_int_equal(r.inm_len, 5);
	assert_memory_equal(r.inm, "\"abc\"", 5);

	/* every split of a head is "need more", then the whole is the same request */
	for (size_t cut = 0; cut < strlen(ok) - 3; cut++) {
		sc = 0;
		for (size_t k = 0; k <= cut; k++)       /* growing a byte at a time, as TCP may */
			assert_int_equal(web_parse(ok, k, &sc, &r), 1);
		assert_int_equal(web_parse(ok, strlen(ok), &sc, &r), 0);
		assert_int_equal(r.head_len, strlen(ok) - 3);
	}

	static const struct { const char *req; int want; bool ka; } cases[] = {
		{ "GET / HTTP/1.1\nHost: h\n\n", 0, true },                  /* bare LF */
		{ "\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 0, true },        /* leading CRLF */
		/* found by fuzz_http: a blank line first looked like the head's end */
		{ "\r\n\r\nGET / HTTP/2.0\r\n\r\n", 505, true },
		{ "GET / HTTP/1.0\r\n\r\n", 0, false },                      /* 1.0: close */
		{ "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0, true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, close\r\n\r\n", 0, false },
		{ "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", 0, true },
		{ "GET / HTTP/1.1\r\n\r\n", 400, true },                     /* no Host */
		{ "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, true },
		{ "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400, true },         /* space before ':' */
		{ "GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", 400, true },
		{ "GET / HTTP/1.1\r\nHost: h\x01\r\n\r\n", 400, true },
		{ "GET /\x7f HTTP/1.1\r\nHost: h\r\n\r\n", 400, true },
		{ "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400, true },
		{ "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400, true },
		{ "GET / HTTX/1.1\r\nHost: h\r\n\r\n", 400, true },
		{ "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, true },
		{ "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n", 405, true },
		{ "get / HTTP/1.1\r\nHost: h\r\n\r\n", 501, true },          /* case-sensitive */
		{ "BREW / HTTP/1.1\r\nHost: h\r\n\r\n", 501, true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 501, true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 9999999\r\n\r\n", 413, true },
		{ "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400, true },
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(cases); i++) {
		sc = 0;
		int st = web_parse(cases[i].req, strlen(cases[i].req), &sc, &r);
		if (st != cases[i].want || (!st && r.keep_alive != cases[i].ka))
			fail_msg("case %zu: status %d (want %d), keep-alive %d", i, st, cases[i].want,
				 r.keep_alive);
	}

	/* too long: the target (414) even before its line ends, the head (431) */
	char *big = malloc(WEB_MAX_HEAD + 100);
	memset(big, 'a', WEB_MAX_HEAD + 99);
	memcpy(big, "GET /", 5);
	sc = 0;
	assert_int_equal(web_parse(big, WEB_MAX_TARGET + 100, &sc, &r), 414);
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	sc = 0;
	assert_int_equal(web_parse(big, WEB_MAX_HEAD + 99, &sc, &r), 431);
	free(big);
}

static void paths(void **state)
{
	(void)state;
	static const struct { const char *in, *out; } ok[] = {
		{ "/", "/" }, { "/a.txt", "/a.txt" }, { "/a/./b", "/a/b" }, { "/a/../b", "/b" },
		{ "//a///b/", "/a/b/" }, { "/a/..", "/" }, { "/a/b/.", "/a/b/" },
		{ "/x%20y.css?q=/../..", "/x y.css" }, { "/%2e%2E/", NULL }, { "/../etc/passwd", NULL },
		{ "/a/../../b", NULL }, { "/%00", NULL }, { "/%zz", NULL }, { "/%4", NULL },
		{ "*", NULL }, { "a.txt", NULL }, { "http://host:80/a.txt", "/a.txt" },
		{ "HTTP://host", "/" }, { "/a%2fb", "/a/b" }, { "/a#frag", "/a" },
		/* found by fuzz_http: an encoded '/' splits segments as a plain one does */
		{ "/%2e%2f%0c", "/\x0c" }, { "/a/%2e%2e%2f%2e%2e%2fx", NULL }, { "/a/b%2f..", "/a/" },
	};
	char out[256];

	for (size_t i = 0; i < FP_ARRAY_SIZE(ok); i++) {
		int rc = web_path(ok[i].in, strlen(ok[i].in), out, sizeof(out));
		if (ok[i].out ? rc || strcmp(out, ok[i].out) : rc != 400)
			fail_msg("path %s: rc %d, '%s'", ok[i].in, rc, rc ? "" : out);
	}
}

static void dates(void **state)
{
	(void)state;
	char d[WEB_DATE_LEN + 1];

	web_date(784111777, d);
	assert_string_equal(d, "Sun, 06 Nov 1994 08:49:37 GMT");         /* RFC 9110's */
	assert_int_equal(web_date_parse(d, strlen(d)), 784111777);
	assert_int_equal(web_date_parse("Sunday, 06-Nov-94 08:49:37 GMT", 30), -1);
	assert_int_equal(web_date_parse("Sun, 06 Nov 1994 08:49:37 UTC", 29), -1);
	assert_int_equal(web_date_parse("Sun, 06 Foo 1994 08:49:37 GMT", 29), -1);
}

static void responses(void **state)
{
	(void)state;
	int st;
	char *r = respond("GET /a.txt HTTP/1.1\r\nHost: h\r\n\r\n", &st);

	assert_int_equal(st, 200);
	assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\nDate: Fri, 27 Nov 2026 12:00:00 GMT\r\n"));
	assert_non_null(strstr(r, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 6\r\n"));
	assert_non_null(strstr(r, "\r\n\r\nhello\n"));
	assert_null(strstr(r, "Connection:"));
	char etag[64];
	const char *e = strstr(r, "ETag: ");
	assert_non_null(e);
	snprintf(etag, sizeof(etag), "%.*s", (int)strcspn(e + 6, "\r"), e + 6);

	/* HEAD: the same headers, no body */
	r = respond("HEAD /a.txt HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(r, "Content-Length: 6\r\n"));
	assert_int_equal(strlen(strstr(r, "\r\n\r\n")), 4);

	/* 304 by ETag (also in a list, weak), by date; not for another tag */
	char req[512];
	snprintf(req, sizeof(req), "GET /a.txt HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"x\", W/%s\r\n\r\n", etag);
	r = respond(req, &st);
	assert_int_equal(st, 304);
	assert_non_null(strstr(r, etag));
	assert_null(strstr(r, "Content-Length"));
	r = respond("GET /a.txt HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"x\"\r\n\r\n", &st);
	assert_int_equal(st, 200);
	r = respond("GET /a.txt HTTP/1.1\r\nHost: h\r\nIf-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n\r\n", &st);
	assert_int_equal(st, 304);
	r = respond("GET /a.txt HTTP/1.1\r\nHost: h\r\nIf-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\n", &st);
	assert_int_equal(st, 200);

	/* directories: the index, a redirect to the '/', no listing */
	r = respond("GET / HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(r, "<h1>home</h1>"));
	r = respond("GET /sub HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 301);
	assert_non_null(strstr(r, "Location: /sub/\r\n"));
	r = respond("GET /sub/ HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 200);
	r = respond("GET /sub/x%20y.css HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(r, "Content-Type: text/css\r\n"));
	r = respond("GET /empty/ HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 404);
	r = respond("GET /a.txt/ HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 404);

	/* outside the root: never served; a link inside it is */
	static const char *const outside[] = {
		"/../fp-web-secret", "/%2e%2e/fp-web-secret", "/sub/../../fp-web-secret",
		"/out", "/..%2ffp-web-secret",
	};
	for (size_t i = 0; i < FP_ARRAY_SIZE(outside); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", outside[i]);
		r = respond(req, &st);
		if ((st != 400 && st != 404) || strstr(r, "secret") || strstr(r, "root:"))
			fail_msg("%s: %d", outside[i], st);
	}
	r = respond("GET /in HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(r, "hello"));

	/* refusals: the status, a body, and the connection closes (not after 405) */
	r = respond("GET / HTTP/1.1\r\n\r\n", &st);
	assert_int_equal(st, 400);
	assert_non_null(strstr(r, "Connection: close\r\n"));
	r = respond("DELETE / HTTP/1.1\r\nHost: h\r\n\r\n", &st);
	assert_int_equal(st, 405);
	assert_non_null(strstr(r, "Allow: GET, HEAD\r\n"));
	assert_null(strstr(r, "Connection: close"));
	r = respond("GET /nope HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &st);
	assert_int_equal(st, 404);
	assert_non_null(strstr(r, "Connection: keep-alive\r\n"));
	assert_non_null(strstr(r, "<h1>404 Not Found</h1>"));

	struct web_site_info info;
	web_site_get_info(site, &info);
	assert_int_equal(info.files, 5);          /* index, a.txt, in, sub/index, sub/x y.css */
	assert_int_equal(info.skipped, 1);        /* the link out */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parser),
		cmocka_unit_test(paths),
		cmocka_unit_test(dates),
		cmocka_unit_test(responses),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
