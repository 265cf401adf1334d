/* web.h: fp-web, a static-content HTTP/1.1 server with pre-built responses (Sandstorm, thesis ch. 3.2). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include <flowplane/cksum.h>

/*
 * Two parts usable without the runtime (tests and fuzzers link them alone):
 *
 *   http.c  the request parser (pure: bytes in, a request, "need more", or the status to
 *           refuse it with), the path's decoding and normalisation, and the dates;
 *   site.c  the site: every regular file under the root read at start, its response
 *           headers built once (Content-Type, Content-Length, Last-Modified, ETag), and
 *           web_respond(): a request in, the pieces of its response out.
 *
 * What Sandstorm does, and this first step does too: nothing about a response is built
 * while serving but the Date line; the headers and the body sit in memory from the start
 * and a response is a list of references to them. What Sandstorm does beyond: it keeps
 * the response as TCP segments, checksums computed, and patches only the headers' fields
 * per connection; here the event layer still copies the pieces into the connection's
 * output and the stack into segments (the next step of issue 20).
 */

#define WEB_MAX_HEAD     16384u    /* request line and headers together; beyond: 431 */
#define WEB_MAX_TARGET   4096u     /* the request target; beyond: 414 */
#define WEB_MAX_BODY     (1u << 20) /* a request body (Content-Length) skipped, at most */
#define WEB_DATE_LEN     29u       /* "Sun, 06 Nov 1994 08:49:37 GMT" */

enum web_method { WEB_GET, WEB_HEAD, WEB_OTHER };

/* A parsed request: offsets into the bytes it was parsed from (valid while they are). */
struct web_req {
	enum web_method method;
	uint8_t minor;               /* HTTP/1.x */
	bool keep_alive;             /* after this response (version and Connection) */
	const char *target;          /* the request target as sent */
	size_t target_len;
	const char *inm;             /* If-None-Match's value, or NULL */
	size_t inm_len;
	const char *ims;             /* If-Modified-Since's value, or NULL */
	size_t ims_len;
	size_t head_len;             /* request line and headers, the blank line included */
	size_t body_len;             /* Content-Length: bytes after the head to skip */
};

/*
 * Parse the request at the head of @p/@len (RFC 9112). Returns 0 with @r filled, 1 when
 * the head is not complete yet, or an HTTP status to refuse it with (400, 405 (*@r's
 * method is WEB_OTHER), 413, 414, 431, 501, 505); after a refusal the connection closes,
 * except after 405, whose request was well formed (its keep_alive holds).
 * Lines may end in CRLF or a bare LF (§2.2). @scanned (0 for a new request) remembers
 * how far the search for the head's end got, so a head that arrives a byte at a time
 * is searched once, not once per byte.
 */
int web_parse(const char *p, size_t len, size_t *scanned, struct web_req *r);

/* The path of @target (origin-form, or the path of an absolute-form), percent-decoded
 * and normalised ("." and ".." resolved, "//" collapsed; a trailing '/' kept): into @out,
 * NUL-terminated. 0, or 400: bad escapes, a NUL, ".." above the root, or no leading '/'. */
int web_path(const char *target, size_t len, char *out, size_t cap);

/* IMF-fixdate (RFC 9110 §5.6.7) of @t into @out (WEB_DATE_LEN + 1 bytes). */
void web_date(time_t t, char *out);
/* Parse an IMF-fixdate; -1 if it is not one (the obsolete forms are not accepted). */
time_t web_date_parse(const char *s, size_t len);

/* ---- site.c ---- */

struct web_site;

struct web_site_info {
	size_t files, bytes;         /* files served, their bytes */
	size_t skipped;              /* not regular files, unreadable, links out of the root */
};

/* Read every regular file under @root (symbolic links followed only where they stay
 * inside it), at most @max_bytes in all. NULL with one line in @err. */
struct web_site *web_site_load(const char *root, size_t max_bytes, char *err, size_t errlen);
void web_site_free(struct web_site *s);
/* Precomputed checksums of every body (Sandstorm): for the stack's csum_index. */
const struct fp_csum_index *web_site_csum(const struct web_site *s);
void web_site_get_info(const struct web_site *s, struct web_site_info *info);
/* The largest 200 response's header lines and body: the output must hold one. */
size_t web_site_largest(const struct web_site *s);

/* A response: up to four pieces that stay valid until the site is freed, or that point
 * into @scratch (the caller's, at least WEB_SCRATCH bytes, valid until written). */
#define WEB_SCRATCH 1024u
struct web_resp {
	int status;
	bool close;                  /* close after it */
	unsigned n;
	struct iovec iov[4];
	unsigned fixed;              /* bit i: iov[i] is the site's, unchanged while it lives
				      * (may be sent by reference); else the scratch's */
	size_t bytes;
};

/* The response to @r (parsed from bytes still valid), or to a refusal @status from
 * web_parse (then @r may be partial). @date is the current IMF-fixdate. */
void web_respond(const struct web_site *s, const struct web_req *r, int status,
		 const char *date, char *scratch, struct web_resp *out);
