/* detail.c: stats detail, memcached's per-prefix counts of gets, hits, sets and deletes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/*
 * `stats detail on` counts, for every key holding the delimiter ':', the part before it:
 * gets (and their hits), sets and deletes, as memcached's stats_prefix.c does, and
 * `stats detail dump` lists them in its order: 256 buckets by the prefix's MurmurHash3
 * (memcached's default hash), newest first within a bucket. Off by default; when on, each
 * counted command takes one mutex (memcached's stats lock). memcached's table grows
 * without bound; this one stops adding prefixes at KV_DETAIL_MAX (counted in `dropped`,
 * said at the end of the dump only when some were) and compares prefixes whole, where
 * memcached's compares only the new key's prefix length (so "ab" would count under "abc").
 */

#define BUCKETS 256

struct pfx {
	struct pfx *next;
	uint64_t gets, hits, sets, dels;
	size_t len;
	char name[];
};

struct kv_detail {
	pthread_mutex_t mu;
	struct pfx *b[BUCKETS];
	size_t n, bytes;
	uint64_t dropped;
};

/* MurmurHash3_x86_32, seed 0 (Austin Appleby's, public domain). */
static uint32_t rotl(uint32_t x, int r) { return x << r | x >> (32 - r); }

static uint32_t murmur3(const uint8_t *d, size_t n)
{
	const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
	uint32_t h = 0, k;
	size_t i;

	for (i = 0; i + 4 <= n; i += 4) {
		memcpy(&k, d + i, 4);   /* little-endian, as memcached reads it on x86 */
		k *= c1;
		k = rotl(k, 15) * c2;
		h ^= k;
		h = rotl(h, 13) * 5 + 0xe6546b64;
	}
	k = 0;
	switch (n & 3) {
	case 3: k ^= (uint32_t)d[i + 2] << 16; /* fall through */
	case 2: k ^= (uint32_t)d[i + 1] << 8;  /* fall through */
	case 1:
		k ^= d[i];
		k *= c1;
		k = rotl(k, 15) * c2;
		h ^= k;
	}
	h ^= (uint32_t)n;
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	return h ^ h >> 16;
}

struct kv_detail *kv_detail_new(void)
{
	struct kv_detail *d = calloc(1, sizeof(*d));

	if (d)
		pthread_mutex_init(&d->mu, NULL);
	return d;
}

static void clear_locked(struct kv_detail *d)
{
	for (int i = 0; i < BUCKETS; i++) {
		while (d->b[i]) {
			struct pfx *p = d->b[i];

			d->b[i] = p->next;
			free(p);
		}
	}
	d->n = d->bytes = 0;
	d->dropped = 0;
}

void kv_detail_free(struct kv_detail *d)
{
	if (!d)
		return;
	clear_locked(d);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

void kv_detail_clear(struct kv_detail *d)
{
	pthread_mutex_lock(&d->mu);
	clear_locked(d);
	pthread_mutex_unlock(&d->mu);
}

/* The prefix's entry, made on first sight; NULL: no delimiter, or the table is full. */
static struct pfx *find(struct kv_detail *d, const char *key, size_t nkey)
{
	size_t len = 0;
	struct pfx **head, *p;

	while (len < nkey && key[len] && key[len] != KV_DETAIL_DELIM)
		len++;
	if (len == nkey || key[len] != KV_DETAIL_DELIM)
		return NULL;
	head = &d->b[murmur3((const uint8_t *)key, len) % BUCKETS];
	for (p = *head; p; p = p->next)
		if (p->len == len && !memcmp(p->name, key, len))
			return p;
	if (d->n >= KV_DETAIL_MAX || !(p = calloc(1, sizeof(*p) + len + 1))) {
		d->dropped++;
		return NULL;
	}
	memcpy(p->name, key, len);
	p->len = len;
	p->next = *head;
	*head = p;
	d->n++;
	d->bytes += len;
	return p;
}

void kv_detail_record(struct kv_detail *d, enum kv_detail_op op, const char *key, size_t nkey,
		      bool hit)
{
	struct pfx *p;

	pthread_mutex_lock(&d->mu);
	if ((p = find(d, key, nkey))) {
		switch (op) {
		case KV_DETAIL_GET: p->gets++; p->hits += hit; break;
		case KV_DETAIL_SET: p->sets++; break;
		default: p->dels++; break;
		}
	}
	pthread_mutex_unlock(&d->mu);
}

char *kv_detail_dump(struct kv_detail *d, size_t *len)
{
	static const char fmt[] = "PREFIX %s get %llu hit %llu set %llu del %llu\r\n";
	size_t cap, n = 0;
	char *buf;

	pthread_mutex_lock(&d->mu);
	cap = d->bytes + d->n * (sizeof(fmt) + 4 * 20) + 64;
	buf = malloc(cap);
	if (buf) {
		for (int i = 0; i < BUCKETS; i++)
			for (const struct pfx *p = d->b[i]; p; p = p->next)
				n += (size_t)snprintf(buf + n, cap - n, fmt, p->name,
						      (unsigned long long)p->gets,
						      (unsigned long long)p->hits,
						      (unsigned long long)p->sets,
						      (unsigned long long)p->dels);
		if (d->dropped)
			n += (size_t)snprintf(buf + n, cap - n, "DROPPED %llu\r\n",
					      (unsigned long long)d->dropped);
		n += (size_t)snprintf(buf + n, cap - n, "END\r\n");
	}
	pthread_mutex_unlock(&d->mu);
	*len = n;
	return buf;
}
