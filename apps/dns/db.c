/* db.c: the zone's names, RFC 1034 §4.3.2's answers, built once at load, and the per-query path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dns.h"

#define NONE          UINT32_MAX
#define CNAME_HOPS    8u      /* a chain inside the zone is followed this far */
#define ADDED_MAX     32u     /* names whose addresses one answer's additional section holds */

struct dns_node {
	uint32_t name;               /* arena offset of its lower-case wire name */
	uint32_t rr, n_rr;           /* its records in the zone's sorted array (0: an empty
				      * non-terminal, RFC 8020's "exists") */
	uint32_t cut;                /* the highest delegation at or above it, or NONE */
	uint8_t name_len;
};

/* A pre-built answer: the whole message (ID 0, RD clear, the question lower-cased). */
struct dns_pre {
	uint32_t node;               /* NONE: an empty slot */
	uint32_t hash;
	uint32_t msg;                /* offset in db->msgs */
	uint16_t qtype, len;
	uint16_t len_req;            /* without the additional section that may be left out */
};

struct dns_db {
	struct dns_zone z;
	struct dns_node *nodes;
	uint32_t n_nodes, apex;
	uint32_t *nht, nht_mask;     /* node index by name (open addressing, NONE empty) */
	struct dns_pre *pre;
	uint32_t pre_mask;
	size_t n_pre;
	uint8_t *msgs;
	size_t msgs_len, msgs_cap;
	uint64_t seed;
	uint16_t edns_max;
	size_t n_ent, n_cuts;
};

/* How an answer may shrink: everything up to len_req must stay. */
struct meta {
	size_t len_req;
};

/* ---- hashing: the question's lower-case wire bytes and its type ---- */

static inline uint32_t qhash(uint64_t seed, const uint8_t *n, size_t len, uint16_t qtype)
{
	uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ull) ^ qtype, w;

	while (len >= 8) {
		memcpy(&w, n, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
		n += 8;
		len -= 8;
	}
	w = 0;
	memcpy(&w, n, len);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
	return (uint32_t)(h ^ h >> 29);
}

static const uint8_t *node_name(const struct dns_db *db, const struct dns_node *n)
{
	return db->z.arena + n->name;
}

static uint32_t node_find(const struct dns_db *db, const uint8_t *name, size_t len)
{
	uint32_t i = qhash(db->seed, name, len, 0) & db->nht_mask;

	for (uint32_t k; (k = db->nht[i]) != NONE; i = (i + 1) & db->nht_mask) {
		const struct dns_node *n = &db->nodes[k];
		if (n->name_len == len && !memcmp(node_name(db, n), name, len))
			return k;
	}
	return NONE;
}

static uint32_t node_add(struct dns_db *db, uint32_t name, uint8_t len)
{
	const uint8_t *p = db->z.arena + name;
	uint32_t i = qhash(db->seed, p, len, 0) & db->nht_mask;

	for (uint32_t k; (k = db->nht[i]) != NONE; i = (i + 1) & db->nht_mask)
		if (db->nodes[k].name_len == len && !memcmp(node_name(db, &db->nodes[k]), p, len))
			return k;
	db->nodes[db->n_nodes] = (struct dns_node){ .name = name, .name_len = len, .cut = NONE };
	db->nht[i] = db->n_nodes;
	return db->n_nodes++;
}

/* Records of @type at @node: *first and the count. */
static uint32_t rrset(const struct dns_db *db, const struct dns_node *n, uint16_t type,
		      uint32_t *first)
{
	uint32_t i = n->rr, end = n->rr + n->n_rr, c = 0;

	while (i < end && db->z.rr[i].type != type)
		i++;
	*first = i;
	while (i + c < end && db->z.rr[i + c].type == type)
		c++;
	return c;
}

static size_t wire_len(const uint8_t *name)
{
	size_t i = 0;

	while (name[i])
		i += 1u + name[i];
	return i + 1;
}

/*
 * The highest delegation at or above @name, and @name's node when it exists. A name the
 * zone does not hold is below a cut when its closest encloser is: walk up to the first
 * ancestor that exists (the apex always does).
 */
static uint32_t find_cut(const struct dns_db *db, const uint8_t *name, size_t len,
			 uint32_t *node)
{
	size_t i = 0;

	*node = NONE;
	while (i < len) {
		uint32_t k = node_find(db, name + i, len - i);
		if (k != NONE) {
			if (!i)
				*node = k;
			return db->nodes[k].cut;
		}
		if (!name[i])
			break;
		i += 1u + name[i];
	}
	return NONE;
}

/* ---- building an answer ---- */

struct build {
	const struct dns_db *db;
	struct dns_msg m;
	uint16_t an, ns, ar;
	unsigned n_added;
	uint32_t added[ADDED_MAX];
};

/* One record with @owner, its RDATA's names compressed where RFC 3597 §4 allows. */
static void put_rr(struct build *b, const uint8_t *owner, size_t olen, const struct dns_rr *r,
		   uint32_t ttl)
{
	struct dns_msg *m = &b->m;
	const uint8_t *rd = dns_zone_ptr(&b->db->z, r->rdata);

	dns_msg_name(m, owner, olen);
	dns_msg_u16(m, r->type);
	dns_msg_u16(m, DNS_C_IN);
	dns_msg_u32(m, ttl);
	size_t at = m->len;
	dns_msg_u16(m, 0);
	switch (r->type) {
	case DNS_T_NS:
	case DNS_T_CNAME:
		dns_msg_name(m, rd, r->rdlen);
		break;
	case DNS_T_MX:
		dns_msg_bytes(m, rd, 2);
		dns_msg_name(m, rd + 2, r->rdlen - 2u);
		break;
	case DNS_T_SOA: {
		size_t a = wire_len(rd), c = wire_len(rd + a);
		dns_msg_name(m, rd, a);
		dns_msg_name(m, rd + a, c);
		dns_msg_bytes(m, rd + a + c, r->rdlen - a - c);
		break;
	}
	default:
		dns_msg_bytes(m, rd, r->rdlen);
	}
	dns_msg_put16(m, at, (uint16_t)(m->len - at - 2));
}

static uint16_t put_rrset(struct build *b, const uint8_t *owner, size_t olen,
			  const struct dns_node *n, uint16_t type)
{
	uint32_t first, c = rrset(b->db, n, type, &first);

	for (uint32_t i = 0; i < c; i++)
		put_rr(b, owner, olen, &b->db->z.rr[first + i], b->db->z.rr[first + i].ttl);
	return (uint16_t)c;
}

/* The apex's SOA in the authority section, for a negative answer: its TTL is the lower of
 * the SOA's own and its MINIMUM field (RFC 2308 §3). */
static void put_soa(struct build *b)
{
	const struct dns_db *db = b->db;
	const struct dns_node *apex = &db->nodes[db->apex];
	uint32_t first;

	if (!rrset(db, apex, DNS_T_SOA, &first))
		return;
	const struct dns_rr *r = &db->z.rr[first];
	const uint8_t *rd = dns_zone_ptr(&db->z, r->rdata) + r->rdlen - 4;
	uint32_t min = (uint32_t)rd[0] << 24 | (uint32_t)rd[1] << 16 | (uint32_t)rd[2] << 8 | rd[3];

	put_rr(b, node_name(db, apex), apex->name_len, r, min < r->ttl ? min : r->ttl);
	b->ns++;
}

/* Addresses the zone holds for @target (an NS or MX name) in the additional section. */
static void add_addresses(struct build *b, const uint8_t *target, size_t tlen)
{
	const struct dns_db *db = b->db;
	uint32_t k;

	if (!dns_name_below(target, tlen, db->z.apex, db->z.apex_len) ||
	    (k = node_find(db, target, tlen)) == NONE)
		return;
	for (unsigned i = 0; i < b->n_added; i++)
		if (b->added[i] == k)
			return;
	if (b->n_added == ADDED_MAX)
		return;
	b->added[b->n_added++] = k;
	b->ar += put_rrset(b, target, tlen, &db->nodes[k], DNS_T_A);
	b->ar += put_rrset(b, target, tlen, &db->nodes[k], DNS_T_AAAA);
}

/* The names in the RRset's RDATA that get addresses (NS and MX targets). */
static void additional_for(struct build *b, const struct dns_node *n, uint16_t type)
{
	uint32_t first, c;

	if (type != DNS_T_NS && type != DNS_T_MX)
		return;
	c = rrset(b->db, n, type, &first);
	for (uint32_t i = 0; i < c; i++) {
		const struct dns_rr *r = &b->db->z.rr[first + i];
		const uint8_t *rd = dns_zone_ptr(&b->db->z, r->rdata) + (type == DNS_T_MX ? 2 : 0);
		add_addresses(b, rd, r->rdlen - (type == DNS_T_MX ? 2u : 0u));
	}
}

/* A referral to the delegation @cut (RFC 1034 §4.3.2 step 3b): not authoritative, the
 * cut's NS records in the authority section, their glue in the additional one. */
static void referral(struct build *b, uint32_t cut, struct meta *mt, uint16_t *flags)
{
	const struct dns_node *n = &b->db->nodes[cut];

	*flags &= (uint16_t)~DNS_F_AA;
	b->ns += put_rrset(b, node_name(b->db, n), n->name_len, n, DNS_T_NS);
	additional_for(b, n, DNS_T_NS);
	mt->len_req = b->m.len;   /* glue is required: without it the client is stuck */
}

/* Step 3a: the name exists. Follows a CNAME chain inside the zone (not below a cut). */
static void at_node(struct build *b, uint32_t k, const uint8_t *name, size_t len,
		    uint16_t qtype, uint16_t *flags, struct meta *mt)
{
	const struct dns_db *db = b->db;
	uint16_t types[1];
	unsigned nt = 0;

	for (unsigned hop = 0;; hop++) {
		const struct dns_node *n = &db->nodes[k];
		uint32_t first, c;

		/* ANY gets one RRset, the name's first by type (RFC 8482 §4.1, as NSD): the
		 * whole node would make every name an amplifier */
		uint16_t want = qtype == DNS_T_ANY && n->n_rr ? db->z.rr[n->rr].type : qtype;
		if ((c = rrset(db, n, want, &first))) {
			b->an += put_rrset(b, name, len, n, want);
			types[nt++] = want;
			break;
		}
		if (qtype == DNS_T_CNAME || !rrset(db, n, DNS_T_CNAME, &first)) {
			put_soa(b);                  /* NODATA (RFC 2308 §2.2) */
			break;
		}
		const struct dns_rr *r = &db->z.rr[first];
		put_rr(b, name, len, r, r->ttl);
		b->an++;
		name = dns_zone_ptr(&db->z, r->rdata);
		len = r->rdlen;
		uint32_t next;
		if (hop + 1 == CNAME_HOPS ||
		    !dns_name_below(name, len, db->z.apex, db->z.apex_len) ||
		    find_cut(db, name, len, &next) != NONE)
			break;                       /* the resolver goes on from here */
		if (next == NONE) {
			*flags = (uint16_t)((*flags & ~DNS_F_RCODE) | DNS_R_NXDOMAIN);  /* RFC 6604 */
			put_soa(b);
			break;
		}
		k = next;
	}
	mt->len_req = b->m.len;
	for (unsigned i = 0; i < nt; i++)
		additional_for(b, &db->nodes[k], types[i]);
}

static size_t build(const struct dns_db *db, const uint8_t *name, const uint8_t *raw,
		    size_t len, uint16_t qtype, uint8_t *out, size_t cap, struct meta *mt)
{
	struct build b = { .db = db };
	uint16_t flags = DNS_F_QR | DNS_F_AA;
	uint32_t node, cut;

	dns_msg_init(&b.m, out, cap);
	dns_msg_u16(&b.m, 0);
	dns_msg_u16(&b.m, 0);
	dns_msg_u16(&b.m, 1);
	dns_msg_u16(&b.m, 0);
	dns_msg_u32(&b.m, 0);
	dns_msg_name(&b.m, raw, len);
	dns_msg_u16(&b.m, qtype);
	dns_msg_u16(&b.m, DNS_C_IN);
	mt->len_req = b.m.len;
	if (!dns_name_below(name, len, db->z.apex, db->z.apex_len)) {
		flags = DNS_F_QR | DNS_R_REFUSED;    /* not ours: no answer, no referral upward */
	} else if ((cut = find_cut(db, name, len, &node)) != NONE) {
		referral(&b, cut, mt, &flags);
	} else if (node == NONE) {
		flags |= DNS_R_NXDOMAIN;
		put_soa(&b);
		mt->len_req = b.m.len;
	} else {
		at_node(&b, node, name, len, qtype, &flags, mt);
	}
	if (b.m.overflow)
		return 0;
	dns_msg_put16(&b.m, 2, flags);
	dns_msg_put16(&b.m, 6, b.an);
	dns_msg_put16(&b.m, 8, b.ns);
	dns_msg_put16(&b.m, 10, b.ar);
	return b.m.len;
}

size_t dns_db_build(const struct dns_db *db, const uint8_t *name, const uint8_t *raw,
		    size_t name_len, uint16_t qtype, uint8_t *out, size_t cap)
{
	struct meta mt;

	return build(db, name, raw, name_len, qtype, out, cap, &mt);
}

/* ---- the pre-built table ---- */

static const struct dns_pre *pre_find(const struct dns_db *db, uint32_t h, const uint8_t *name,
				      size_t len, uint16_t qtype)
{
	for (uint32_t i = h & db->pre_mask;; i = (i + 1) & db->pre_mask) {
		const struct dns_pre *e = &db->pre[i];
		if (e->node == NONE)
			return NULL;
		const struct dns_node *n = &db->nodes[e->node];
		if (e->hash == h && e->qtype == qtype && n->name_len == len &&
		    !memcmp(node_name(db, n), name, len))
			return e;
	}
}

const uint8_t *dns_db_prebuilt(const struct dns_db *db, const uint8_t *name, size_t name_len,
			       uint16_t qtype, size_t *len)
{
	const struct dns_pre *e = pre_find(db, qhash(db->seed, name, name_len, qtype), name,
					   name_len, qtype);

	if (!e)
		return NULL;
	*len = e->len;
	return db->msgs + e->msg;
}

static int prebuild_one(struct dns_db *db, uint32_t k, uint16_t qtype, uint8_t *buf,
			char *err, size_t errlen)
{
	const struct dns_node *n = &db->nodes[k];
	const uint8_t *name = node_name(db, n);
	uint32_t h = qhash(db->seed, name, n->name_len, qtype), i;
	struct meta mt;
	size_t len = build(db, name, name, n->name_len, qtype, buf, DNS_MSG_MAX - DNS_OPT_LEN, &mt);

	if (!len) {
		char text[1024];
		dns_name_text(name, n->name_len, text, sizeof(text));
		snprintf(err, errlen, "the answer for %s type %u is over 64 KB", text, qtype);
		return -1;
	}
	if (db->msgs_len + len > db->msgs_cap) {
		size_t cap = db->msgs_cap ? db->msgs_cap * 2 : 1u << 16;
		while (cap < db->msgs_len + len)
			cap *= 2;
		uint8_t *p = cap > UINT32_MAX ? NULL : realloc(db->msgs, cap);
		if (!p) {
			snprintf(err, errlen, "out of memory for the pre-built answers (%zu MB so far)",
				 db->msgs_len >> 20);
			return -1;
		}
		db->msgs = p;
		db->msgs_cap = cap;
	}
	for (i = h & db->pre_mask; db->pre[i].node != NONE; i = (i + 1) & db->pre_mask)
		if (db->pre[i].node == k && db->pre[i].qtype == qtype)
			return 0;                    /* already there */
	memcpy(db->msgs + db->msgs_len, buf, len);
	db->pre[i] = (struct dns_pre){ .node = k, .hash = h, .msg = (uint32_t)db->msgs_len,
				       .qtype = qtype, .len = (uint16_t)len,
				       .len_req = (uint16_t)mt.len_req };
	db->msgs_len += len;
	db->n_pre++;
	return 0;
}

/*
 * What is pre-built, per name the zone holds (not below a cut): each type it has, ANY,
 * and A and AAAA when it is a CNAME (what clients ask most); at a delegation, the
 * referral for NS, A and AAAA. Everything else is built when asked.
 */
static int prebuild(struct dns_db *db, char *err, size_t errlen)
{
	uint8_t *buf = malloc(DNS_MSG_MAX);
	size_t want = 0;
	int rc = 0;

	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (uint32_t k = 0; k < db->n_nodes; k++)
		want += db->nodes[k].n_rr + 3;
	for (db->pre_mask = 1023; db->pre_mask < want * 2; db->pre_mask = db->pre_mask * 2 + 1)
		;
	db->pre = malloc((size_t)(db->pre_mask + 1) * sizeof(*db->pre));
	if (!db->pre) {
		free(buf);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (uint32_t i = 0; i <= db->pre_mask; i++)
		db->pre[i].node = NONE;
	for (uint32_t k = 0; k < db->n_nodes && !rc; k++) {
		const struct dns_node *n = &db->nodes[k];
		if (n->cut != NONE && n->cut != k)
			continue;                    /* below a delegation: built when asked */
		if (n->cut == k) {
			rc = prebuild_one(db, k, DNS_T_NS, buf, err, errlen) ||
			     prebuild_one(db, k, DNS_T_A, buf, err, errlen) ||
			     prebuild_one(db, k, DNS_T_AAAA, buf, err, errlen);
			continue;
		}
		if (!n->n_rr)
			continue;
		for (uint32_t i = n->rr; i < n->rr + n->n_rr && !rc; i++)
			if (i == n->rr || db->z.rr[i].type != db->z.rr[i - 1].type)
				rc = prebuild_one(db, k, db->z.rr[i].type, buf, err, errlen);
		if (!rc)
			rc = prebuild_one(db, k, DNS_T_ANY, buf, err, errlen);
		if (!rc && db->z.rr[n->rr].type == DNS_T_CNAME)
			rc = prebuild_one(db, k, DNS_T_A, buf, err, errlen) ||
			     prebuild_one(db, k, DNS_T_AAAA, buf, err, errlen);
	}
	free(buf);
	return rc ? -1 : 0;
}

/* ---- loading ---- */

/* Nodes for every owner, and for every name between an owner and the apex (empty
 * non-terminals: they exist, so a query for them is NODATA, not NXDOMAIN). */
static int index_nodes(struct dns_db *db, char *err, size_t errlen)
{
	struct dns_zone *z = &db->z;
	size_t max = z->n_rr * 2 + 1;    /* owners, and at most one new ancestor per label... */
	size_t labels = 0;

	for (size_t i = 0; i < z->n_rr; i++)
		labels += z->rr[i].owner_len / 2u + 1u;
	max += labels;                   /* ...bounded by the labels of all owners */
	for (db->nht_mask = 255; db->nht_mask < max * 2; db->nht_mask = db->nht_mask * 2 + 1)
		;
	db->nodes = malloc(max * sizeof(*db->nodes));
	db->nht = malloc((size_t)(db->nht_mask + 1) * sizeof(*db->nht));
	if (!db->nodes || !db->nht) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memset(db->nht, 0xff, (size_t)(db->nht_mask + 1) * sizeof(*db->nht));
	for (size_t i = 0; i < z->n_rr; i++) {
		const struct dns_rr *r = &z->rr[i];
		uint32_t k = node_add(db, r->owner, r->owner_len);
		if (!db->nodes[k].n_rr)
			db->nodes[k].rr = (uint32_t)i;
		db->nodes[k].n_rr++;
	}
	uint32_t owners = db->n_nodes;
	for (uint32_t k = 0; k < owners; k++) {
		const struct dns_node *n = &db->nodes[k];
		const uint8_t *p = node_name(db, n);
		for (size_t i = 1u + p[0]; n->name_len - i > z->apex_len; i += 1u + p[i])
			node_add(db, n->name + (uint32_t)i, (uint8_t)(n->name_len - i));
	}
	db->n_ent = db->n_nodes - owners;
	db->apex = node_find(db, z->apex, z->apex_len);
	return 0;
}

/* Each node's highest delegation at or above it (RFC 1034 §4.2.1: below a cut, data is
 * glue, and the answer is a referral). */
static void find_cuts(struct dns_db *db)
{
	for (uint32_t k = 0; k < db->n_nodes; k++) {
		struct dns_node *n = &db->nodes[k];
		const uint8_t *p = node_name(db, n);
		uint32_t first;

		for (size_t i = 0; n->name_len - i > db->z.apex_len; i += 1u + p[i]) {
			uint32_t a = node_find(db, p + i, n->name_len - i);
			if (a != NONE && rrset(db, &db->nodes[a], DNS_T_NS, &first))
				n->cut = a;          /* walking up: the last one is the highest */
		}
		db->n_cuts += n->cut == k;
	}
}

struct dns_db *dns_db_create(struct dns_zone *z, uint16_t edns_max, char *err, size_t errlen)
{
	struct dns_db *db = calloc(1, sizeof(*db));

	if (!db) {
		snprintf(err, errlen, "out of memory");
		dns_zone_free(z);
		return NULL;
	}
	db->z = *z;
	memset(z, 0, sizeof(*z));
	db->edns_max = edns_max < DNS_UDP_MIN ? DNS_UDP_MIN : edns_max;
	if (getrandom(&db->seed, sizeof(db->seed), 0) != sizeof(db->seed))
		db->seed = 0x6a09e667f3bcc909ull;
	if (index_nodes(db, err, errlen)) {
		dns_db_destroy(db);
		return NULL;
	}
	find_cuts(db);
	if (prebuild(db, err, errlen)) {
		dns_db_destroy(db);
		return NULL;
	}
	return db;
}

void dns_db_destroy(struct dns_db *db)
{
	if (!db)
		return;
	dns_zone_free(&db->z);
	free(db->nodes);
	free(db->nht);
	free(db->pre);
	free(db->msgs);
	free(db);
}

void dns_db_get_info(const struct dns_db *db, struct dns_db_info *info)
{
	*info = (struct dns_db_info){
		.names = db->n_nodes - db->n_ent, .empty_nonterminals = db->n_ent,
		.records = db->z.n_rr, .prebuilt = db->n_pre, .prebuilt_bytes = db->msgs_len,
		.cuts = db->n_cuts,
	};
}

/* ---- a query ---- */

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Types that are not questions about data (RFC 6895 §3.1): refused or not implemented. */
static int qtype_check(uint16_t qtype)
{
	if (qtype == 0 || qtype == DNS_T_OPT)
		return DNS_R_FORMERR;
	if (qtype == DNS_T_AXFR || qtype == DNS_T_IXFR)
		return DNS_R_REFUSED;        /* zone transfers are not served */
	if (qtype == DNS_T_MAILA || qtype == DNS_T_MAILB)
		return DNS_R_NOTIMP;
	return 0;
}

/*
 * Fit the answer to what the transport carries: for UDP 512 bytes, or the client's EDNS0
 * size up to edns_max. What does not fit loses its optional additional records first
 * (RFC 2181 §9), then everything but the question, with TC set (the client asks again
 * over TCP). An OPT goes at the end when the query had one (RFC 6891 §7).
 */
static size_t finish(const struct dns_db *db, const struct dns_query *q, uint8_t *out,
		     size_t len, size_t len_req, size_t limit, struct dns_counters *cnt)
{
	size_t opt = q->edns ? DNS_OPT_LEN : 0;

	if (!limit)
		limit = !q->edns ? DNS_UDP_MIN : q->edns_size < db->edns_max ? q->edns_size :
									       db->edns_max;
	if (len + opt > limit) {
		if (len_req + opt <= limit) {
			len = len_req;
			put16(out + 10, 0);
			cnt->additional_cut++;
		} else {
			len = DNS_HDR_LEN + q->name_len + 4u;
			memset(out + 6, 0, 6);
			out[2] |= DNS_F_TC >> 8;
			cnt->truncated++;
		}
	}
	if (q->edns) {
		uint8_t *o = out + len;
		o[0] = 0;
		put16(o + 1, DNS_T_OPT);
		put16(o + 3, db->edns_max);
		put16(o + 5, 0);                     /* extended rcode, version 0 */
		put16(o + 7, q->edns_do ? DNS_EDNS_DO : 0);
		put16(o + 9, 0);
		len += DNS_OPT_LEN;
		put16(out + 10, (uint16_t)((out[10] << 8 | out[11]) + 1));
	}
	cnt->rcode[out[3] & DNS_F_RCODE]++;
	return len;
}

size_t dns_reply(const struct dns_db *db, const uint8_t *p, size_t len, uint8_t *out,
		 size_t limit, struct dns_counters *cnt)
{
	struct dns_query q;
	struct meta mt;
	int rc;

	cnt->queries++;
	rc = dns_query_parse(p, len, &q);
	if (rc < 0) {
		cnt->dropped++;
		return 0;
	}
	if (!rc)
		rc = q.qclass != DNS_C_IN ? DNS_R_REFUSED : qtype_check(q.qtype);
	if (rc) {
		cnt->rcode[rc]++;
		return dns_error_reply(&q, rc, out, DNS_MSG_MAX, db->edns_max);
	}
	uint32_t h = qhash(db->seed, q.name, q.name_len, q.qtype);
	const struct dns_pre *e = pre_find(db, h, q.name, q.name_len, q.qtype);
	if (e) {
		memcpy(out, db->msgs + e->msg, e->len);
		len = e->len;
		mt.len_req = e->len_req;
		cnt->prebuilt++;
	} else {
		len = build(db, q.name, q.raw, q.name_len, q.qtype, out, DNS_MSG_MAX - DNS_OPT_LEN,
			    &mt);
		cnt->built++;
		if (!len) {
			cnt->rcode[DNS_R_SERVFAIL]++;
			return dns_error_reply(&q, DNS_R_SERVFAIL, out, DNS_MSG_MAX, db->edns_max);
		}
	}
	put16(out, q.id);
	out[2] |= (uint8_t)((q.flags & DNS_F_RD) >> 8);
	memcpy(out + DNS_HDR_LEN, q.raw, q.name_len);  /* the client's spelling (0x20) */
	return finish(db, &q, out, len, mt.len_req, limit, cnt);
}
