/* http.c: HTTP/1.1 requests (RFC 9112): the parser, the request target's path, and IMF-fixdate. */
#include <stdio.h>
#include <string.h>

#include "web.h"

/* RFC 9110 §5.6.2: tchar. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool ieq(const char *a, size_t alen, const char *b)
{
	return alen == strlen(b) && !strncasecmp(a, b, alen);
}

/* The end of the head: just past the blank line ("\r\n\r\n", "\n\n", or mixed). Resumes
 * the search at *@scanned; 0 when not there yet. */
static size_t head_end(const char *p, size_t len, size_t *scanned)
{
	size_t i = *scanned > 3 ? *scanned - 3 : 0;

	for (; i < len; i++) {
		if (p[i] != '\n')
			continue;
		if (i + 1 < len && p[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && p[i + 1] == '\r' && p[i + 2] == '\n')
			return i + 3;
	}
	*scanned = len;
	return 0;
}

/* One line from @p (at most to @end): its length without the line ending, and where the
 * next starts. */
static size_t line(const char *p, const char *end, const char **next)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	size_t n = (size_t)(nl - p);

	*next = nl + 1;
	return n && p[n - 1] == '\r' ? n - 1 : n;
}

static const char *const other_methods[] = {
	"POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
};

/* "METHOD SP target SP HTTP/1.x": 0 or a status. */
static int request_line(const char *p, size_t n, struct web_req *r)
{
	const char *sp1 = memchr(p, ' ', n), *sp2;

	if (!sp1 || sp1 == p)
		return 400;
	for (const char *c = p; c < sp1; c++)
		if (!is_tchar((unsigned char)*c))
			return 400;
	size_t mlen = (size_t)(sp1 - p);
	/* methods are case-sensitive (RFC 9110 §9.1) */
	r->method = mlen == 3 && !memcmp(p, "GET", 3) ? WEB_GET :
		    mlen == 4 && !memcmp(p, "HEAD", 4) ? WEB_HEAD : WEB_OTHER;
	sp2 = memchr(sp1 + 1, ' ', n - mlen - 1);
	if (!sp2)
		return (size_t)(p + n - sp1) > WEB_MAX_TARGET ? 414 : 400;
	r->target = sp1 + 1;
	r->target_len = (size_t)(sp2 - r->target);
	if (!r->target_len)
		return 400;
	if (r->target_len > WEB_MAX_TARGET)
		return 414;
	for (size_t i = 0; i < r->target_len; i++)
		if ((unsigned char)r->target[i] <= ' ' || r->target[i] == 0x7f)
			return 400;
	const char *v = sp2 + 1;
	size_t vlen = (size_t)(p + n - v);
	if (vlen != 8 || strncmp(v, "HTTP/", 5) || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
	    v[7] < '0' || v[7] > '9')
		return 400;
	if (v[5] != '1')
		return 505;
	r->minor = (uint8_t)(v[7] - '0');
	if (r->method == WEB_OTHER) {
		for (size_t i = 0; i < sizeof(other_methods) / sizeof(*other_methods); i++)
			if (mlen == strlen(other_methods[i]) && !memcmp(p, other_methods[i], mlen))
				return 405;
		return 501;
	}
	return 0;
}

/* Connection's tokens (RFC 9110 §7.6.1). */
static void connection(const char *v, size_t n, struct web_req *r)
{
	size_t i = 0;

	while (i < n) {
		while (i < n && (v[i] == ',' || v[i] == ' ' || v[i] == '\t'))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
			i++;
		if (ieq(v + s, i - s, "close"))
			r->keep_alive = false;
		else if (ieq(v + s, i - s, "keep-alive") && r->minor == 0)
			r->keep_alive = true;
	}
}

/* One header field: 0 or a status. */
static int field(const char *p, size_t n, struct web_req *r, int *hosts, bool *te, bool *cl)
{
	const char *colon = memchr(p, ':', n);

	if (p[0] == ' ' || p[0] == '\t')
		return 400;                          /* obs-fold (§5.2): refused */
	if (!colon || colon == p)
		return 400;
	for (const char *c = p; c < colon; c++)
		if (!is_tchar((unsigned char)*c))
			return 400;                  /* also a space before the colon (§5.1) */
	size_t nlen = (size_t)(colon - p);
	const char *v = colon + 1, *e = p + n;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	for (const char *c = v; c < e; c++)
		if (((unsigned char)*c < ' ' && *c != '\t') || *c == 0x7f)
			return 400;
	size_t vlen = (size_t)(e - v);

	if (ieq(p, nlen, "host")) {
		(*hosts)++;
	} else if (ieq(p, nlen, "connection")) {
		connection(v, vlen, r);
	} else if (ieq(p, nlen, "if-none-match")) {
		r->inm = v;
		r->inm_len = vlen;
	} else if (ieq(p, nlen, "if-modified-since")) {
		r->ims = v;
		r->ims_len = vlen;
	} else if (ieq(p, nlen, "transfer-encoding")) {
		*te = true;
	} else if (ieq(p, nlen, "content-length")) {
		size_t x = 0;
		if (!vlen || vlen > 10)
			return vlen ? 413 : 400;
		for (size_t i = 0; i < vlen; i++) {
			if (v[i] < '0' || v[i] > '9')
				return 400;
			x = x * 10 + (size_t)(v[i] - '0');
		}
		if (*cl && x != r->body_len)
			return 400;                  /* two different lengths (§6.3) */
		*cl = true;
		r->body_len = x;
		if (x > WEB_MAX_BODY)
			return 413;
	}
	return 0;
}

int web_parse(const char *p, size_t len, size_t *scanned, struct web_req *r)
{
	const char *cur = p, *next;
	int hosts = 0, rc;
	bool te = false, cl = false;
	size_t lead = 0, end;

	memset(r, 0, sizeof(*r));
	/* RFC 9112 §2.2: empty lines before the request line are ignored */
	while (lead < len && (p[lead] == '\r' || p[lead] == '\n'))
		lead++;
	if (lead == len)
		return len > WEB_MAX_HEAD ? 431 : 1;
	cur = p + lead;
	end = head_end(cur, len - lead, scanned);
	if (end)
		end += lead;
	if (!end) {
		const char *nl = memchr(cur, '\n', len - (size_t)(cur - p));
		if (!nl && len - (size_t)(cur - p) > WEB_MAX_TARGET + 32)
			return 414;                  /* the request line alone is too long */
		return len > WEB_MAX_HEAD ? 431 : 1;
	}
	if (end > WEB_MAX_HEAD)
		return 431;
	r->head_len = end;
	size_t n = line(cur, p + end, &next);
	int refused = request_line(cur, n, r);
	if (refused && refused != 405)
		return refused;
	/* 405's request is otherwise parsed whole: its connection may go on after it */
	r->keep_alive = r->minor >= 1;
	for (cur = next; cur < p + end; cur = next) {
		n = line(cur, p + end, &next);
		if (!n)
			break;                       /* the blank line */
		if ((rc = field(cur, n, r, &hosts, &te, &cl)))
			return rc;
	}
	if (r->minor >= 1 && hosts != 1)
		return 400;                          /* §3.2: exactly one Host */
	if (hosts > 1)
		return 400;
	if (te)
		return cl ? 400 : 501;               /* request bodies in chunks: not taken */
	return refused;
}

/* ---- the path ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)(c | 0x20);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decode the path at @t[0..@n) into @d (room @cap): its length, or -1 for a bad
 * escape, a NUL, or no room. */
static long decode(const char *t, size_t n, char *d, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)t[i];
		if (c == '%') {
			int h, l;
			if (i + 2 >= n || (h = hexval(t[i + 1])) < 0 || (l = hexval(t[i + 2])) < 0)
				return -1;
			c = h << 4 | l;
			i += 2;
		}
		if (!c || o == cap)
			return -1;
		d[o++] = (char)c;
	}
	return (long)o;
}

/*
 * Decoding comes first, then the segments: an encoded '/' is a '/', so "%2e%2e%2f" is
 * "../" and is resolved (or refused above the root) like the plain one.
 */
int web_path(const char *t, size_t len, char *out, size_t cap)
{
	char d[WEB_MAX_TARGET];
	size_t i = 0, o = 0;

	if (len >= 7 && !strncasecmp(t, "http://", 7))
		i = 7;
	else if (len >= 8 && !strncasecmp(t, "https://", 8))
		i = 8;
	if (cap < 2)
		return 400;
	if (i) {                                     /* absolute-form: skip the authority */
		while (i < len && t[i] != '/' && t[i] != '?' && t[i] != '#')
			i++;
		if (i == len || t[i] != '/') {       /* "http://host": the root */
			out[0] = '/';
			out[1] = '\0';
			return 0;
		}
	}
	if (i >= len || t[i] != '/')
		return 400;
	size_t end = i;
	while (end < len && t[end] != '?' && t[end] != '#')
		end++;
	long n = decode(t + i, end - i, d, sizeof(d));
	if (n < 0)
		return 400;
	out[o++] = '/';
	for (size_t k = 0; k < (size_t)n;) {
		while (k < (size_t)n && d[k] == '/')
			k++;
		size_t s = k;
		while (k < (size_t)n && d[k] != '/')
			k++;
		size_t slen = k - s;
		if (!slen || (slen == 1 && d[s] == '.'))
			continue;                    /* "" and "." */
		if (slen == 2 && d[s] == '.' && d[s + 1] == '.') {
			if (o == 1)
				return 400;          /* above the root */
			o--;                         /* drop the last segment and its '/' */
			while (o > 1 && out[o - 1] != '/')
				o--;
			continue;
		}
		if (o + slen + 2 > cap)
			return 400;
		memcpy(out + o, d + s, slen);
		o += slen;
		out[o++] = '/';
	}
	/* a trailing '/' stays only when the path's last segment is empty, "." or ".." */
	size_t last = (size_t)n;
	while (last > 0 && d[last - 1] != '/')
		last--;
	size_t tail = (size_t)n - last;
	bool dir = !tail || (tail == 1 && d[last] == '.') ||
		   (tail == 2 && d[last] == '.' && d[last + 1] == '.');
	if (o > 1 && out[o - 1] == '/' && !dir)
		o--;
	out[o] = '\0';
	return 0;
}

/* ---- dates ---- */

static const char wday[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
static const char mon[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
				 "Sep", "Oct", "Nov", "Dec" };

void web_date(time_t t, char *out)
{
	struct tm tm;

	char b[64];

	gmtime_r(&t, &tm);
	snprintf(b, sizeof(b), "%s, %02d %s %04d %02d:%02d:%02d GMT", wday[tm.tm_wday],
		 tm.tm_mday, mon[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
	memcpy(out, b, WEB_DATE_LEN);                /* past year 9999, cut: not our problem */
	out[WEB_DATE_LEN] = '\0';
}

time_t web_date_parse(const char *s, size_t len)
{
	struct tm tm = { 0 };
	char m[4], w[4], z[4];
	int d, y, hh, mm, ss, n = 0;
	char buf[WEB_DATE_LEN + 1];

	if (len != WEB_DATE_LEN)
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (sscanf(buf, "%3s, %2d %3s %4d %2d:%2d:%2d %3s%n", w, &d, m, &y, &hh, &mm, &ss, z, &n) != 8 ||
	    n != (int)len || strcmp(z, "GMT"))
		return -1;
	for (tm.tm_mon = 0; tm.tm_mon < 12 && strcmp(mon[tm.tm_mon], m); tm.tm_mon++)
		;
	if (tm.tm_mon == 12 || d < 1 || d > 31 || hh > 23 || mm > 59 || ss > 60 || y < 1970)
		return -1;
	tm.tm_mday = d;
	tm.tm_year = y - 1900;
	tm.tm_hour = hh;
	tm.tm_min = mm;
	tm.tm_sec = ss;
	return timegm(&tm);
}
