/* tcp.c: TCP headers and options (RFC 9293 §3.1-3.2, RFC 7323, RFC 2018). */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include <flowplane/cksum.h>
#include <flowplane/wire.h>

/* Option lengths, kind and length bytes included (RFC 9293 §3.2, RFC 7323 §2-3, RFC 2018 §2-3). */
#define OPTLEN_MSS       4
#define OPTLEN_WSCALE    3
#define OPTLEN_SACK_OK   2
#define OPTLEN_SACK_BASE 2
#define OPTLEN_SACK_BLK  8
#define OPTLEN_TS        10
#define TCP_MAX_OPTS     (FP_TCP_MAX_HDR - FP_TCP_HDR_LEN)

/*
 * One option at buf[0..olen), kind and length already checked to lie inside the header.
 * A known option with a length other than its own is malformed: RFC 9293 §3.2 lets a
 * receiver reset on it, and reading it as if it were right would misread what follows.
 */
static int parse_opt(const uint8_t *p, size_t olen, struct fp_tcp_opts *o)
{
	switch (p[0]) {
	case FP_TCP_OPT_MSS:
		if (olen != OPTLEN_MSS)
			return -EINVAL;
		o->has_mss = 1;
		o->mss = fp_get_be16(p + 2);
		break;
	case FP_TCP_OPT_WSCALE:
		if (olen != OPTLEN_WSCALE)
			return -EINVAL;
		o->has_wscale = 1;
		o->wscale = p[2];	/* RFC 7323 §2.3: the caller clamps to 14 */
		break;
	case FP_TCP_OPT_SACK_OK:
		if (olen != OPTLEN_SACK_OK)
			return -EINVAL;
		o->sack_ok = 1;
		break;
	case FP_TCP_OPT_SACK: {
		/* RFC 2018 §3: 2 + 8n bytes; 40 option bytes hold at most 4 blocks. */
		if (olen < OPTLEN_SACK_BASE + OPTLEN_SACK_BLK ||
		    (olen - OPTLEN_SACK_BASE) % OPTLEN_SACK_BLK != 0)
			return -EINVAL;
		size_t n = (olen - OPTLEN_SACK_BASE) / OPTLEN_SACK_BLK;
		if (n > FP_TCP_MAX_SACK)
			n = FP_TCP_MAX_SACK;
		for (size_t i = 0; i < n; i++) {
			o->sack[i].left = fp_get_be32(p + 2 + i * OPTLEN_SACK_BLK);
			o->sack[i].right = fp_get_be32(p + 6 + i * OPTLEN_SACK_BLK);
		}
		o->n_sack = (uint8_t)n;
		break;
	}
	case FP_TCP_OPT_TS:
		if (olen != OPTLEN_TS)
			return -EINVAL;
		o->has_ts = 1;
		o->ts_val = fp_get_be32(p + 2);
		o->ts_ecr = fp_get_be32(p + 6);
		break;
	default:
		/* RFC 9293 §3.2 (MUST-6): options we do not know are skipped by their length. */
		break;
	}
	return 0;
}

/* The option list in buf[0..len): RFC 9293 §3.2 "Specific Option Definitions". */
static int parse_opts(const uint8_t *buf, size_t len, struct fp_tcp_opts *o)
{
	size_t i = 0;

	/* RFC 7323 Appendix A's layout, which Linux and this stack put on every segment of an
	 * established connection with timestamps: NOP, NOP, TS. Read at once, it is what the
	 * loop below would make of it (~45 instructions a segment fewer). */
	if (len == 12 && buf[0] == FP_TCP_OPT_NOP && buf[1] == FP_TCP_OPT_NOP &&
	    buf[2] == FP_TCP_OPT_TS && buf[3] == OPTLEN_TS) {
		o->has_ts = 1;
		o->ts_val = fp_get_be32(buf + 4);
		o->ts_ecr = fp_get_be32(buf + 8);
		return 0;
	}
	while (i < len) {
		uint8_t kind = buf[i];
		if (kind == FP_TCP_OPT_EOL)
			break;	/* the rest is padding */
		if (kind == FP_TCP_OPT_NOP) {
			i++;
			continue;
		}
		/*
		 * Every other option has a length byte that counts the kind and itself: one
		 * missing, below 2 (which would never advance) or reaching past the header
		 * makes the list unreadable (RFC 9293 §3.2, MUST-7 says be robust to it).
		 */
		if (len - i < 2)
			return -EINVAL;
		size_t olen = buf[i + 1];
		if (olen < 2 || olen > len - i)
			return -EINVAL;
		int rc = parse_opt(buf + i, olen, o);
		if (rc)
			return rc;
		i += olen;
	}
	return 0;
}

int fp_tcp_parse(const uint8_t *buf, size_t len, uint32_t src, uint32_t dst, bool verify_csum,
		 struct fp_tcp *out)
{
	/* The pseudo-header carries a 16-bit length: no IPv4 datagram holds more. */
	if (len < FP_TCP_HDR_LEN || len > 0xffff)
		return -EINVAL;
	size_t hdr_len = (size_t)(buf[12] >> 4) * 4;
	if (hdr_len < FP_TCP_HDR_LEN || hdr_len > len)
		return -EINVAL;
	/* RFC 9293 §3.1: the checksum covers the pseudo-header, the header and the data. */
	if (verify_csum) {
		uint32_t sum = fp_csum_pseudo_ipv4(htonl(src), htonl(dst), FP_IPPROTO_TCP,
						   (uint16_t)len);
		if (fp_csum_fold(fp_csum_partial(buf, len, sum)) != 0)
			return -EBADMSG;
	}
	memset(out, 0, sizeof(*out));
	int rc = parse_opts(buf + FP_TCP_HDR_LEN, hdr_len - FP_TCP_HDR_LEN, &out->opt);
	if (rc)
		return rc;
	out->sport = fp_get_be16(buf);
	out->dport = fp_get_be16(buf + 2);
	out->seq = fp_get_be32(buf + 4);
	out->ack = fp_get_be32(buf + 8);
	out->hdr_len = (uint8_t)hdr_len;
	/* The low 4 bits of byte 12 are reserved (RFC 9293 §3.1); receivers ignore them. */
	out->flags = buf[13];
	out->wnd = fp_get_be16(buf + 14);
	out->urg = fp_get_be16(buf + 18);
	return 0;
}

/*
 * Linux's layout (tcp_options_write() in net/ipv4/tcp_output.c), each piece a 32-bit word
 * or more: MSS; SACK-permitted folded into the timestamps' first word when both are sent,
 * else NOP,NOP before either; NOP + window scale; NOP,NOP + SACK blocks.
 */
size_t fp_tcp_opts_len(const struct fp_tcp_opts *o)
{
	size_t n = 0;
	if (o->has_mss)
		n += 4;
	if (o->has_ts)
		n += 12;
	if (o->sack_ok && !o->has_ts)
		n += 4;
	if (o->has_wscale)
		n += 4;
	if (o->n_sack)
		n += 4 + (size_t)o->n_sack * OPTLEN_SACK_BLK;
	return n;
}

static uint8_t *put_word(uint8_t *p, uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	p[0] = a;
	p[1] = b;
	p[2] = c;
	p[3] = d;
	return p + 4;
}

static void emit_opts(uint8_t *p, const struct fp_tcp_opts *o)
{
	if (o->has_mss) {
		p = put_word(p, FP_TCP_OPT_MSS, OPTLEN_MSS, 0, 0);
		fp_put_be16(p - 2, o->mss);
	}
	if (o->has_ts) {
		if (o->sack_ok)
			p = put_word(p, FP_TCP_OPT_SACK_OK, OPTLEN_SACK_OK, FP_TCP_OPT_TS, OPTLEN_TS);
		else
			p = put_word(p, FP_TCP_OPT_NOP, FP_TCP_OPT_NOP, FP_TCP_OPT_TS, OPTLEN_TS);
		fp_put_be32(p, o->ts_val);
		fp_put_be32(p + 4, o->ts_ecr);
		p += 8;
	} else if (o->sack_ok) {
		p = put_word(p, FP_TCP_OPT_NOP, FP_TCP_OPT_NOP, FP_TCP_OPT_SACK_OK, OPTLEN_SACK_OK);
	}
	if (o->has_wscale)
		p = put_word(p, FP_TCP_OPT_NOP, FP_TCP_OPT_WSCALE, OPTLEN_WSCALE, o->wscale);
	if (o->n_sack) {
		p = put_word(p, FP_TCP_OPT_NOP, FP_TCP_OPT_NOP, FP_TCP_OPT_SACK,
			     (uint8_t)(OPTLEN_SACK_BASE + o->n_sack * OPTLEN_SACK_BLK));
		for (size_t i = 0; i < o->n_sack; i++, p += OPTLEN_SACK_BLK) {
			fp_put_be32(p, o->sack[i].left);
			fp_put_be32(p + 4, o->sack[i].right);
		}
	}
}

size_t fp_tcp_emit(uint8_t *buf, size_t cap, const struct fp_tcp *t)
{
	/* n_sack above 4 never fits in 40 bytes, so this also keeps sack[] in bounds. */
	size_t olen = fp_tcp_opts_len(&t->opt);
	size_t hdr_len = FP_TCP_HDR_LEN + olen;
	if (olen > TCP_MAX_OPTS || cap < hdr_len)
		return 0;
	fp_tcp_put_hdr(buf, t->sport, t->dport, t->seq, t->ack, hdr_len, t->flags, t->wnd, t->urg);
	emit_opts(buf + FP_TCP_HDR_LEN, &t->opt);
	return hdr_len;
}

void fp_tcp_set_csum(uint8_t *seg, uint32_t sum, uint32_t src, uint32_t dst, size_t len)
{
	uint32_t ph = fp_csum_pseudo_ipv4(htonl(src), htonl(dst), FP_IPPROTO_TCP, (uint16_t)len);
	/* fp_csum_combine adds with the end-around carry, whatever the size of @sum. */
	uint16_t c = fp_csum_fold(fp_csum_combine(sum, ph, 0));
	memcpy(seg + 16, &c, 2);
}
