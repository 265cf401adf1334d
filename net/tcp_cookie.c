/* tcp_cookie.c: SipHash-2-4, initial sequence numbers (RFC 6528) and SYN cookies (RFC 4987). */
#include <string.h>

#include "tcp.h"

/* ---- SipHash-2-4 (Aumasson & Bernstein, 2012): a keyed PRF fast on short inputs ---- */

static inline uint64_t rotl64(uint64_t x, unsigned b) { return (x << b) | (x >> (64 - b)); }

#define SIPROUND(v0, v1, v2, v3)                                               \
	do {                                                                   \
		v0 += v1; v1 = rotl64(v1, 13); v1 ^= v0; v0 = rotl64(v0, 32);  \
		v2 += v3; v3 = rotl64(v3, 16); v3 ^= v2;                       \
		v0 += v3; v3 = rotl64(v3, 21); v3 ^= v0;                       \
		v2 += v1; v1 = rotl64(v1, 17); v1 ^= v2; v2 = rotl64(v2, 32);  \
	} while (0)

uint64_t tcp_siphash(const uint64_t key[2], const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t v0 = key[0] ^ 0x736f6d6570736575ull, v1 = key[1] ^ 0x646f72616e646f6dull;
	uint64_t v2 = key[0] ^ 0x6c7967656e657261ull, v3 = key[1] ^ 0x7465646279746573ull;
	uint64_t b = (uint64_t)len << 56, w = 0;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, 8);
		v3 ^= w;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= w;
	}
	for (unsigned k = 0; i < len; i++, k++)
		b |= (uint64_t)p[i] << (8 * k);
	v3 ^= b;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xff;
	for (int r = 0; r < 4; r++)
		SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void tcp_cookie_init(struct fp_stack *st)
{
	st->tcp->sip_key[0] = splitmix64(st->cfg.secret);
	st->tcp->sip_key[1] = splitmix64(st->cfg.secret ^ 0x5a5a5a5a5a5a5a5aull);
}

/* The hashed input: the connection's identity plus a purpose tag and extra words. */
struct tcp_hash_in {
	uint32_t laddr, raddr;
	uint16_t lport, rport;
	uint32_t tag;
	uint32_t x, y;
};

static uint64_t tuple_hash(const struct fp_stack *st, uint32_t laddr, uint16_t lport,
			   uint32_t raddr, uint16_t rport, uint32_t tag, uint32_t x, uint32_t y)
{
	struct tcp_hash_in in;

	memset(&in, 0, sizeof(in));
	in.laddr = laddr;
	in.raddr = raddr;
	in.lport = lport;
	in.rport = rport;
	in.tag = tag;
	in.x = x;
	in.y = y;
	return tcp_siphash(st->tcp->sip_key, &in, sizeof(in));
}

/* RFC 6528 §3: ISN = M + F(localip, localport, remoteip, remoteport, secretkey), where M
 * is a 4 microsecond timer, so sequence numbers of successive incarnations of one 4-tuple
 * keep moving forward while an off-path attacker cannot predict them. */
uint32_t tcp_isn(const struct fp_stack *st, uint32_t laddr, uint16_t lport, uint32_t raddr,
		 uint16_t rport)
{
	uint32_t m = (uint32_t)(st->now_us / 4);

	return m + (uint32_t)tuple_hash(st, laddr, lport, raddr, rport, 1, 0, 0);
}

/* RFC 7323 §5.4 and Linux: a keyed per address pair offset, so the TSval clock does not
 * reveal uptime and stays monotonic across connections between the same two hosts (the
 * SYN cookie path relies on that: the offset is recomputed on the final ACK). */
uint32_t tcp_ts_offset(const struct fp_stack *st, uint32_t laddr, uint32_t raddr)
{
	return (uint32_t)tuple_hash(st, laddr, 0, raddr, 0, 2, 0, 0);
}

/* ---- SYN cookies (RFC 4987 §3.6, the layout of D. J. Bernstein's and Linux's) ----
 *
 * The ISN of a cookie SYN-ACK is
 *     bits 31..27  t mod 32, t = now / TCP_COOKIE_PERIOD_US (the time counter)
 *     bits 26..24  index of the MSS in cookie_mss[] (the largest not above the peer's)
 *     bits 23..0   SipHash(secret, 4-tuple, peer ISN, t, MSS index) mod 2^24
 * On the final ACK, cookie = ack - 1 and the peer's ISN = seq - 1. A cookie is valid for
 * TCP_COOKIE_MAX_AGE periods after the one it was made in, so old cookies expire.
 * Window scale and SACK-permitted cannot fit in 32 bits; like Linux, when the SYN carried
 * timestamps they travel in the low 6 bits of our TSval (echoed back in TSecr): bits 3..0
 * the peer's window shift (15 = no window scaling), bit 4 SACK-permitted. Without
 * timestamps a cookie conn has no window scaling and no SACK.
 */
static const uint16_t cookie_mss[8] = { 536, 1024, 1220, 1300, 1400, 1440, 1460, 8960 };

#define TSOPT_NO_WSCALE 0xfu
#define TSOPT_SACK      0x10u

static uint32_t cookie_hash(const struct fp_stack *st, const struct fp_ipv4 *ip,
			    const struct fp_tcp *t, uint32_t irs, uint32_t count, uint32_t idx)
{
	return (uint32_t)tuple_hash(st, ip->dst, t->dport, ip->src, t->sport, 3, irs,
				    count << 3 | idx) & 0xffffffu;
}

uint32_t tcp_cookie_make(const struct fp_stack *st, const struct fp_ipv4 *ip,
			 const struct fp_tcp *t, uint16_t *mss_out, uint32_t *tsval_low)
{
	uint32_t count = (uint32_t)(st->now_us / TCP_COOKIE_PERIOD_US);
	uint16_t peer_mss = t->opt.has_mss ? t->opt.mss : 536; /* RFC 9293 §3.7.1 default */
	uint32_t idx = 0;

	for (uint32_t i = 1; i < FP_ARRAY_SIZE(cookie_mss); i++)
		if (cookie_mss[i] <= peer_mss && cookie_mss[i] <= st->cfg.mtu - 40)
			idx = i;
	*mss_out = cookie_mss[idx];
	uint32_t opts = t->opt.has_wscale ? (t->opt.wscale > FP_TCP_MAX_WSCALE ?
					      FP_TCP_MAX_WSCALE : t->opt.wscale) : TSOPT_NO_WSCALE;
	if (t->opt.sack_ok && !st->cfg.no_sack)
		opts |= TSOPT_SACK;
	*tsval_low = opts;
	return (count & 31) << 27 | idx << 24 | cookie_hash(st, ip, t, t->seq, count, idx);
}

int tcp_cookie_check(const struct fp_stack *st, const struct fp_ipv4 *ip, const struct fp_tcp *t,
		     struct tcp_cookie_opts *out)
{
	uint32_t cookie = t->ack - 1, irs = t->seq - 1;
	uint32_t now_count = (uint32_t)(st->now_us / TCP_COOKIE_PERIOD_US);
	uint32_t age = (now_count - (cookie >> 27)) & 31;
	uint32_t idx = (cookie >> 24) & 7;

	if (age > TCP_COOKIE_MAX_AGE)
		return -EINVAL;
	if (cookie_hash(st, ip, t, irs, now_count - age, idx) != (cookie & 0xffffffu))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->mss = cookie_mss[idx];
	if (t->opt.has_ts && !st->cfg.no_timestamps && t->opt.ts_ecr != 0) {
		uint32_t opts = t->opt.ts_ecr & ((1u << TCP_COOKIE_TS_BITS) - 1);
		out->ts_ok = true;
		out->sack_ok = (opts & TSOPT_SACK) != 0;
		if ((opts & 0xf) != TSOPT_NO_WSCALE) {
			out->wscale_ok = true;
			out->snd_wscale = (uint8_t)(opts & 0xf);
		}
	}
	return 0;
}
