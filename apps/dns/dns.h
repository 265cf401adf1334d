/* dns.h: fp-dns, an authoritative DNS server with pre-built answers (Namestorm, thesis ch. 3.2.3). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Three parts, each usable without the runtime (tests and fuzzers link them alone):
 *
 *   zone.c  the RFC 1035 §5 master file: text in, records in wire format out (pure);
 *   wire.c  the query parser (pure: a packet in, a validated struct dns_query or the rcode
 *           to answer with), and a message builder that compresses names (RFC 1035 §4.1.4);
 *   db.c    the zone as nodes and RRsets, the answer algorithm of RFC 1034 §4.3.2 (no
 *           wildcards), the table of pre-built answers, and dns_reply(): a query in, the
 *           reply's bytes out.
 *
 * What Namestorm does, and so do we: at load, every answer the zone can give for a name
 * and a type it holds (and ANY, and A/AAAA through a CNAME) is built once, in wire format,
 * and indexed by a hash of the question as it arrives (the lower-cased wire name and the
 * type). A query that finds its answer costs a parse, a hash, a copy, and patches: the ID,
 * RD, the client's spelling of the name (0x20 case randomisation is echoed), and EDNS0's
 * OPT. Anything else (names the zone does not hold, other types, referrals below a cut)
 * runs the same builder at query time, so a pre-built answer is by construction the one
 * the builder would give (tests/unit/test_dns.c checks it for every key).
 */

#define DNS_HDR_LEN      12u
#define DNS_NAME_MAX     255u
#define DNS_LABEL_MAX    63u
#define DNS_UDP_MIN      512u      /* without EDNS0 (RFC 1035 §4.2.1) */
#define DNS_EDNS_DEFAULT 1232u     /* DNS Flag Day 2020: no IP fragmentation */
#define DNS_MSG_MAX      65535u    /* TCP's two-byte length */
#define DNS_OPT_LEN      11u       /* an OPT RR with no options */

enum {
	DNS_T_A = 1, DNS_T_NS = 2, DNS_T_CNAME = 5, DNS_T_SOA = 6, DNS_T_MX = 15,
	DNS_T_TXT = 16, DNS_T_AAAA = 28, DNS_T_OPT = 41, DNS_T_IXFR = 251, DNS_T_AXFR = 252,
	DNS_T_MAILB = 253, DNS_T_MAILA = 254, DNS_T_ANY = 255,
};

enum { DNS_C_IN = 1 };

enum {
	DNS_R_NOERROR = 0, DNS_R_FORMERR = 1, DNS_R_SERVFAIL = 2, DNS_R_NXDOMAIN = 3,
	DNS_R_NOTIMP = 4, DNS_R_REFUSED = 5, DNS_R_BADVERS = 16,   /* extended: OPT carries 1 */
	DNS_R_COUNT = 17,
};

/* Header flags (the second 16-bit word), RFC 1035 §4.1.1. */
#define DNS_F_QR     0x8000u
#define DNS_F_OPCODE 0x7800u
#define DNS_F_AA     0x0400u
#define DNS_F_TC     0x0200u
#define DNS_F_RD     0x0100u
#define DNS_F_RCODE  0x000fu
#define DNS_EDNS_DO  0x8000u   /* in the OPT's TTL field (RFC 3225) */

/* ---- wire.c ---- */

/* A parsed query. name is lower-cased; raw is the name as the client spelt it (both
 * uncompressed wire format, name_len bytes, the root label included). */
struct dns_query {
	uint16_t id, flags;
	uint16_t qtype, qclass;
	bool has_question;           /* name/qtype/qclass are valid (also in an error) */
	bool edns;                   /* an OPT was present and well formed */
	bool edns_do;
	uint8_t edns_version;
	uint16_t edns_size;          /* the client's UDP size, at least 512 */
	uint8_t name_len;
	uint8_t name[DNS_NAME_MAX];
	uint8_t raw[DNS_NAME_MAX];
};

/* Parse @len bytes. Returns 0 (a query to answer), DNS_R_FORMERR, DNS_R_NOTIMP or
 * DNS_R_BADVERS (answer with that code), or -1: drop it, no answer (shorter than a header,
 * or a response: answering responses is how reflection loops start). */
int dns_query_parse(const uint8_t *p, size_t len, struct dns_query *q);

/* Read a (possibly compressed) name at @off of the message @p/@len into @out (wire
 * format, lower-cased when @lower), following at most 16 pointers, each strictly
 * backwards. Returns the bytes the name takes at @off (where the next field starts), or
 * 0 when malformed. *@out_len gets the uncompressed length. @raw, when not NULL, gets the
 * name as spelt. */
size_t dns_name_read(const uint8_t *p, size_t len, size_t off, uint8_t *out, uint8_t *raw,
		     uint8_t *out_len);

/* Equal names, ASCII case ignored (RFC 4343). */
bool dns_name_eq(const uint8_t *a, const uint8_t *b, size_t len);

/* Is @name (@len) equal to or below @zone (@zlen)? Both lower-case wire. */
bool dns_name_below(const uint8_t *name, size_t len, const uint8_t *zone, size_t zlen);

/* Write @name as dotted text ("www.example.com.", "." for the root) into @out. */
void dns_name_text(const uint8_t *name, size_t len, char *out, size_t cap);

/* A message being built: names are compressed against those already in it. */
#define DNS_MSG_PTRS 64u
struct dns_msg {
	uint8_t *buf;
	size_t cap, len;
	bool overflow;               /* something did not fit: the message is unusable */
	unsigned n_ptrs;
	uint16_t ptrs[DNS_MSG_PTRS]; /* offsets of names (and their suffixes) written */
};

void dns_msg_init(struct dns_msg *m, uint8_t *buf, size_t cap);
void dns_msg_u16(struct dns_msg *m, uint16_t v);
void dns_msg_u32(struct dns_msg *m, uint32_t v);
void dns_msg_bytes(struct dns_msg *m, const void *p, size_t n);
void dns_msg_name(struct dns_msg *m, const uint8_t *name, size_t len);    /* compressed */
void dns_msg_put16(struct dns_msg *m, size_t off, uint16_t v);

/* The error answer for @q: header (ID, opcode and RD copied), the question when it was
 * parsed, and an OPT when the query had one (BADVERS's upper bits go there). Returns the
 * length written into @out (at least DNS_HDR_LEN + DNS_NAME_MAX + 4 + DNS_OPT_LEN). */
size_t dns_error_reply(const struct dns_query *q, int rcode, uint8_t *out, size_t cap,
		       uint16_t edns_max);

/* ---- zone.c ---- */

struct dns_rr {
	uint32_t owner;              /* offset of the owner's name in the zone's arena */
	uint32_t rdata;              /* offset of the RDATA in the arena */
	uint32_t ttl;
	uint32_t line;               /* where it was in the file */
	uint16_t type, rdlen;
	uint8_t owner_len;
};

struct dns_zone {
	uint8_t apex[DNS_NAME_MAX];  /* the SOA's owner, lower-case wire */
	uint8_t apex_len;
	struct dns_rr *rr;
	size_t n_rr, cap_rr;
	uint8_t *arena;              /* names and RDATA, wire format, names lower-cased */
	size_t arena_len, arena_cap;
	size_t duplicates;           /* identical records dropped (RFC 2181 §5) */
};

/*
 * Parse a master file (RFC 1035 §5.1: $ORIGIN, $TTL (RFC 2308), @, relative names,
 * parentheses, comments, quoted strings, \X and \DDD escapes; TTLs with s/m/h/d/w units)
 * with records A, AAAA, NS, MX, CNAME, TXT and SOA of class IN. @origin (text, or NULL)
 * is the origin before any $ORIGIN. The zone is then checked: one SOA, whose owner is
 * the apex; every record at or below it; NS at the apex; a CNAME alone at its name.
 * Returns 0, or -1 with one line in @err ("FILE:LINE: what is wrong").
 */
int dns_zone_parse(struct dns_zone *z, const char *text, size_t len, const char *origin,
		   const char *fname, char *err, size_t errlen);
void dns_zone_free(struct dns_zone *z);

static inline const uint8_t *dns_zone_ptr(const struct dns_zone *z, uint32_t off)
{
	return z->arena + off;
}

/* Parse a text name relative to @origin (lower-cased wire into @out). 0 or -1. */
int dns_name_parse(const char *text, size_t len, const uint8_t *origin, size_t olen,
		   uint8_t *out, uint8_t *out_len);

/* ---- db.c ---- */

struct dns_db;

struct dns_db_info {
	size_t names;                /* nodes holding records */
	size_t empty_nonterminals;
	size_t records;
	size_t prebuilt;             /* answers built at load */
	size_t prebuilt_bytes;
	size_t cuts;                 /* delegations below the apex */
};

/* Index @z (taken over: freed with the db) and pre-build its answers. @edns_max is the
 * largest UDP answer we send to an EDNS0 client (it asks for its own limit; we send at
 * most this). NULL with one line in @err (out of memory, or an answer over 64 KB). */
struct dns_db *dns_db_create(struct dns_zone *z, uint16_t edns_max, char *err, size_t errlen);
void dns_db_destroy(struct dns_db *db);
void dns_db_get_info(const struct dns_db *db, struct dns_db_info *info);

/* What happened to one query (per worker counters, summed when read). */
struct dns_counters {
	uint64_t queries;            /* datagrams and TCP messages taken */
	uint64_t dropped;            /* no answer: shorter than a header, or a response */
	uint64_t rcode[DNS_R_COUNT]; /* answers by rcode */
	uint64_t truncated;          /* TC set: the client should ask again over TCP */
	uint64_t additional_cut;     /* the additional section left out to fit */
	uint64_t prebuilt;           /* answered from the pre-built table */
	uint64_t built;              /* answered by the builder at query time */
};

/*
 * Answer the query @p/@len into @out (at least DNS_MSG_MAX bytes). @limit is what the
 * transport carries: 0 for UDP (512, or the EDNS0 size, at most edns_max), else the
 * largest message (TCP: DNS_MSG_MAX). Returns the answer's length, or 0: no answer.
 */
size_t dns_reply(const struct dns_db *db, const uint8_t *p, size_t len, uint8_t *out,
		 size_t limit, struct dns_counters *cnt);

/* The builder alone (tests): the answer for lower-case @name/@qtype, question spelt as
 * @raw, ID 0, no OPT, never truncated. Returns the length, or 0 if it did not fit. */
size_t dns_db_build(const struct dns_db *db, const uint8_t *name, const uint8_t *raw,
		    size_t name_len, uint16_t qtype, uint8_t *out, size_t cap);
/* The pre-built answer for @name/@qtype, or NULL (tests). */
const uint8_t *dns_db_prebuilt(const struct dns_db *db, const uint8_t *name, size_t name_len,
			       uint16_t qtype, size_t *len);
