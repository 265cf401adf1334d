/* site.c: the files under fp-web's root, read at start with their response headers built, and each request's response. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "web.h"

/*
 * Every regular file under the root is read into memory at start; its path (as a request
 * would name it after web_path) goes in a hash table with its body and two header blocks
 * built once: the 200's (Server, Content-Type, Content-Length, Last-Modified, ETag) and
 * the 304's (Server, Last-Modified, ETag). Directories are entries too, so "/dir/" finds
 * its index.html and "/dir" a redirect. Nothing outside the root is ever opened: the walk
 * does not leave it (a symbolic link is followed only when its target, resolved, is
 * inside the root; linked directories are not entered), and a request can only name
 * what the walk put in the table. The files are not watched: what changes on disk after
 * start is served as it was (restart fp-web to serve the new content).
 */

#define SITE_MAX_DEPTH 32

struct entry {
	char *path;                  /* "/a/b.html"; directories: "/a" */
	size_t path_len;
	bool dir;
	bool has_index;              /* dir: an index.html in it */
	char *body;
	size_t body_len;
	char *h200, *h304;           /* header lines, each ending in CRLF; no blank line */
	size_t h200_len, h304_len;
	char etag[48];
	size_t etag_len;
	time_t mtime;
};

struct web_site {
	char root[PATH_MAX];         /* resolved */
	struct entry *e;
	size_t n, cap;
	uint32_t *ht, mask;          /* entry index + 1; 0 empty */
	struct fp_csum_index csum;   /* every body's */
	size_t bytes, max_bytes, skipped;
	char *err;
	size_t errlen;
};

static int fail(struct web_site *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->err, s->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static uint32_t path_hash(const char *p, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 16777619u;
	return h;
}

static const struct entry *lookup(const struct web_site *s, const char *p, size_t n)
{
	for (uint32_t i = path_hash(p, n) & s->mask, k; (k = s->ht[i]); i = (i + 1) & s->mask) {
		const struct entry *e = &s->e[k - 1];
		if (e->path_len == n && !memcmp(e->path, p, n))
			return e;
	}
	return NULL;
}

static const struct {
	const char *ext, *type;
} types[] = {
	{ "html", "text/html; charset=utf-8" }, { "htm", "text/html; charset=utf-8" },
	{ "css", "text/css" }, { "js", "text/javascript" }, { "mjs", "text/javascript" },
	{ "json", "application/json" }, { "txt", "text/plain; charset=utf-8" },
	{ "xml", "application/xml" }, { "svg", "image/svg+xml" }, { "png", "image/png" },
	{ "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" }, { "gif", "image/gif" },
	{ "webp", "image/webp" }, { "ico", "image/x-icon" }, { "pdf", "application/pdf" },
	{ "wasm", "application/wasm" }, { "woff2", "font/woff2" }, { "woff", "font/woff" },
	{ "mp4", "video/mp4" }, { "webm", "video/webm" }, { "zip", "application/zip" },
	{ "gz", "application/gzip" },
};

static const char *content_type(const char *path)
{
	const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');

	if (dot && (!slash || dot > slash))
		for (size_t i = 0; i < sizeof(types) / sizeof(*types); i++)
			if (!strcasecmp(dot + 1, types[i].ext))
				return types[i].type;
	return "application/octet-stream";
}

static struct entry *add(struct web_site *s, const char *path)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct entry *e = realloc(s->e, cap * sizeof(*e));
		if (!e)
			return NULL;
		s->e = e;
		s->cap = cap;
	}
	struct entry *e = &s->e[s->n];
	memset(e, 0, sizeof(*e));
	if (!(e->path = strdup(path)))
		return NULL;
	e->path_len = strlen(path);
	s->n++;
	return e;
}

static int read_all(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static int load_file(struct web_site *s, const char *fs, const char *url, const struct stat *st)
{
	char date[WEB_DATE_LEN + 1], buf[512];
	int fd;

	if ((size_t)st->st_size > s->max_bytes - s->bytes)
		return fail(s, "the files under %s pass --max-bytes (%zu MB) at %s: raise it, or "
			    "serve less", s->root, s->max_bytes >> 20, fs);
	if ((fd = open(fs, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 && errno != ELOOP) {
		s->skipped++;                        /* unreadable: not served */
		return 0;
	}
	if (fd < 0)
		fd = open(fs, O_RDONLY | O_CLOEXEC);   /* a link inside the root, checked */
	struct entry *e = fd < 0 ? NULL : add(s, url);
	if (fd < 0) {
		s->skipped++;
		return 0;
	}
	if (!e || !(e->body = malloc((size_t)st->st_size + 1))) {
		close(fd);
		return fail(s, "out of memory reading %s", fs);
	}
	if (read_all(fd, e->body, (size_t)st->st_size)) {
		close(fd);
		return fail(s, "cannot read %s: %s", fs, errno ? strerror(errno) : "it shrank");
	}
	close(fd);
	e->body_len = (size_t)st->st_size;
	e->mtime = st->st_mtime;
	s->bytes += e->body_len;
	web_date(st->st_mtime, date);
	/* nginx's form: mtime and length in hex */
	e->etag_len = (size_t)snprintf(e->etag, sizeof(e->etag), "\"%llx-%zx\"",
				       (unsigned long long)st->st_mtime, e->body_len);
	int n = snprintf(buf, sizeof(buf), "Server: fp-web\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\nLast-Modified: %s\r\nETag: %s\r\n",
			 content_type(url), e->body_len, date, e->etag);
	int m = snprintf(buf + n + 1, sizeof(buf) - (size_t)n - 1,
			 "Server: fp-web\r\nLast-Modified: %s\r\nETag: %s\r\n", date, e->etag);
	e->h200 = strndup(buf, (size_t)n);
	e->h304 = strndup(buf + n + 1, (size_t)m);
	if (!e->h200 || !e->h304)
		return fail(s, "out of memory");
	e->h200_len = (size_t)n;
	e->h304_len = (size_t)m;
	return 0;
}

/* Is the resolved @real inside the root? */
static bool inside(const struct web_site *s, const char *real)
{
	size_t n = strlen(s->root);

	return !strncmp(real, s->root, n) && (real[n] == '/' || real[n] == '\0' ||
					      (n == 1 && s->root[0] == '/'));
}

static int walk(struct web_site *s, const char *fs, const char *url, int depth)
{
	DIR *d = opendir(fs);
	struct dirent *de;
	struct entry *self;
	int rc = 0;

	if (!d)
		return depth ? (s->skipped++, 0) : fail(s, "cannot open the root %s: %s", fs,
							strerror(errno));
	if (!(self = add(s, *url ? url : "/"))) {
		closedir(d);
		return fail(s, "out of memory");
	}
	self->dir = true;
	size_t self_i = (size_t)(self - s->e);
	while (!rc && (de = readdir(d))) {
		char cfs[PATH_MAX], curl[PATH_MAX], real[PATH_MAX];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(cfs, sizeof(cfs), "%s/%s", fs, de->d_name) >= (int)sizeof(cfs) ||
		    snprintf(curl, sizeof(curl), "%s/%s", url, de->d_name) >= (int)sizeof(curl) ||
		    lstat(cfs, &st)) {
			s->skipped++;
			continue;
		}
		if (S_ISLNK(st.st_mode)) {
			/* followed only to a file inside the root */
			if (!realpath(cfs, real) || !inside(s, real) || stat(real, &st) ||
			    !S_ISREG(st.st_mode)) {
				s->skipped++;
				continue;
			}
		}
		if (S_ISDIR(st.st_mode)) {
			rc = depth < SITE_MAX_DEPTH ? walk(s, cfs, curl, depth + 1) : (s->skipped++, 0);
		} else if (S_ISREG(st.st_mode)) {
			rc = load_file(s, cfs, curl, &st);
			if (!rc && !strcmp(de->d_name, "index.html"))
				s->e[self_i].has_index = true;
		} else {
			s->skipped++;
		}
	}
	closedir(d);
	return rc;
}

static int index_entries(struct web_site *s)
{
	for (s->mask = 63; s->mask < s->n * 2; s->mask = s->mask * 2 + 1)
		;
	if (!(s->ht = calloc((size_t)s->mask + 1, sizeof(*s->ht))))
		return fail(s, "out of memory");
	for (size_t k = 0; k < s->n; k++) {
		uint32_t i = path_hash(s->e[k].path, s->e[k].path_len) & s->mask;
		while (s->ht[i])
			i = (i + 1) & s->mask;
		s->ht[i] = (uint32_t)k + 1;
	}
	return 0;
}

/* The bodies' checksums, once: a response's segments then need no summing of its body. */
static int sum_bodies(struct web_site *s)
{
	for (size_t k = 0; k < s->n; k++)
		if (fp_csum_index_add(&s->csum, s->e[k].body, s->e[k].body_len))
			return fail(s, "out of memory for the checksums of %zu files", s->n);
	fp_csum_index_seal(&s->csum);
	return 0;
}

struct web_site *web_site_load(const char *root, size_t max_bytes, char *err, size_t errlen)
{
	struct web_site *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->err = err;
	s->errlen = errlen;
	s->max_bytes = max_bytes;
	if (!realpath(root, s->root)) {
		fail(s, "the root %s: %s", root, strerror(errno));
	} else if (!walk(s, s->root, "", 0) && !index_entries(s) && !sum_bodies(s)) {
		return s;
	}
	web_site_free(s);
	return NULL;
}

void web_site_free(struct web_site *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].path);
		free(s->e[i].body);
		free(s->e[i].h200);
		free(s->e[i].h304);
	}
	free(s->e);
	free(s->ht);
	fp_csum_index_free(&s->csum);
	free(s);
}

const struct fp_csum_index *web_site_csum(const struct web_site *s) { return &s->csum; }

size_t web_site_largest(const struct web_site *s)
{
	size_t max = 0;

	for (size_t i = 0; i < s->n; i++)
		max = s->e[i].body_len + s->e[i].h200_len > max ? s->e[i].body_len + s->e[i].h200_len : max;
	return max;
}

void web_site_get_info(const struct web_site *s, struct web_site_info *info)
{
	size_t files = 0;

	for (size_t i = 0; i < s->n; i++)
		files += !s->e[i].dir;
	*info = (struct web_site_info){ .files = files, .bytes = s->bytes, .skipped = s->skipped };
}

/* ---- responses ---- */

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 301: return "Moved Permanently";
	case 304: return "Not Modified";
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 501: return "Not Implemented";
	case 505: return "HTTP Version Not Supported";
	}
	return "Error";
}

static void piece(struct web_resp *o, const void *p, size_t n)
{
	o->iov[o->n].iov_base = (void *)(uintptr_t)p;
	o->iov[o->n].iov_len = n;
	o->n++;
	o->bytes += n;
}

/* The scratch's regions: the status line and Date; an error's or redirect's own header
 * lines; the Connection line and the blank line; an error's body. */
#define SCR_STATUS  0u
#define SCR_HEADERS 128u
#define SCR_END     640u
#define SCR_BODY    704u

static void frame(struct web_resp *o, int status, bool close, const char *date, char *scratch)
{
	int n = snprintf(scratch + SCR_STATUS, SCR_HEADERS, "HTTP/1.1 %d %s\r\nDate: %s\r\n",
			 status, reason(status), date);

	o->status = status;
	o->close = close;
	piece(o, scratch + SCR_STATUS, (size_t)n);
}

static void end_head(struct web_resp *o, bool keep_alive_10, char *scratch)
{
	int n = snprintf(scratch + SCR_END, SCR_BODY - SCR_END, "%s\r\n",
			 o->close ? "Connection: close\r\n" :
			 keep_alive_10 ? "Connection: keep-alive\r\n" : "");

	piece(o, scratch + SCR_END, (size_t)n);
}

/* An error (or a redirect) with a small HTML body, all in the scratch. */
static void error_resp(struct web_resp *o, int status, bool close, bool head, bool ka10,
		       const char *location, const char *date, char *scratch)
{
	char *h = scratch + SCR_HEADERS, *b = scratch + SCR_BODY;
	int blen = snprintf(b, WEB_SCRATCH - SCR_BODY, "<html><head><title>%d %s</title></head>"
			    "<body><h1>%d %s</h1></body></html>\n", status, reason(status),
			    status, reason(status));
	int n = snprintf(h, SCR_END - SCR_HEADERS, "Server: fp-web\r\n%s%s%s%s"
			 "Content-Type: text/html\r\nContent-Length: %d\r\n",
			 status == 405 ? "Allow: GET, HEAD\r\n" : "", location ? "Location: " : "",
			 location ? location : "", location ? "\r\n" : "", blen);

	frame(o, status, close, date, scratch);
	piece(o, h, (size_t)n);
	end_head(o, ka10, scratch);
	if (!head)
		piece(o, b, (size_t)blen);
}

/* If-None-Match (RFC 9110 §13.1.2: weak comparison) or, without it, If-Modified-Since. */
static bool not_modified(const struct entry *e, const struct web_req *r)
{
	if (r->inm) {
		const char *v = r->inm, *end = r->inm + r->inm_len;
		while (v < end) {
			while (v < end && (*v == ' ' || *v == ',' || *v == '\t'))
				v++;
			if (v < end && *v == '*')
				return true;
			if (end - v >= 2 && v[0] == 'W' && v[1] == '/')
				v += 2;
			const char *s = v;
			while (v < end && *v != ',')
				v++;
			const char *t = v;
			while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
				t--;
			if ((size_t)(t - s) == e->etag_len && !memcmp(s, e->etag, e->etag_len))
				return true;
		}
		return false;
	}
	if (r->ims) {
		time_t t = web_date_parse(r->ims, r->ims_len);
		return t != (time_t)-1 && e->mtime <= t;
	}
	return false;
}

void web_respond(const struct web_site *s, const struct web_req *r, int status,
		 const char *date, char *scratch, struct web_resp *o)
{
	char path[WEB_MAX_TARGET + 32];   /* the path, and room to append "/index.html" */
	bool head = r->method == WEB_HEAD, ka10 = r->keep_alive && r->minor == 0;
	const struct entry *e;

	memset(o, 0, sizeof(*o));
	if (status) {
		error_resp(o, status, status != 405 || !r->keep_alive, head, ka10, NULL, date,
			   scratch);
		return;
	}
	bool close = !r->keep_alive;
	if (web_path(r->target, r->target_len, path, sizeof(path) - 16)) {
		error_resp(o, 400, true, head, ka10, NULL, date, scratch);
		return;
	}
	size_t n = strlen(path);
	bool slash = path[n - 1] == '/';             /* "/" itself too */
	if (n > 1 && slash)
		path[--n] = '\0';
	e = lookup(s, path, n);
	if (e && !e->dir && slash)
		e = NULL;                            /* "/a.html/" names no file */
	if (e && e->dir) {
		if (!e->has_index) {
			e = NULL;                    /* no listings */
		} else if (!slash) {
			char loc[SCR_END - SCR_HEADERS - 128];
			if (snprintf(loc, sizeof(loc), "%s/", path) >= (int)sizeof(loc)) {
				error_resp(o, 404, close, head, ka10, NULL, date, scratch);
				return;
			}
			error_resp(o, 301, close, head, ka10, loc, date, scratch);
			return;
		} else {
			size_t k = n == 1 ? 0 : n;   /* the root's index is "/index.html" */
			memcpy(path + k, "/index.html", 12);
			e = lookup(s, path, k + 11);
		}
	}
	if (!e) {
		error_resp(o, 404, close, head, ka10, NULL, date, scratch);
		return;
	}
	if (not_modified(e, r)) {
		frame(o, 304, close, date, scratch);
		o->fixed |= 1u << o->n;
		piece(o, e->h304, e->h304_len);
		end_head(o, ka10, scratch);
		return;
	}
	frame(o, 200, close, date, scratch);
	o->fixed |= 1u << o->n;
	piece(o, e->h200, e->h200_len);
	end_head(o, ka10, scratch);
	if (!head && e->body_len) {
		o->fixed |= 1u << o->n;
		piece(o, e->body, e->body_len);
	}
}
