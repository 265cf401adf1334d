/* fuzz_lg_parse.c: fp-loadgen's response parsers (echo, memcache, spin, http; dns's datagram match) on arbitrary bytes, whole and in two pieces. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

/*
 * Input: byte 0 picks the protocol, bytes 1..7 the request the response answers (op,
 * aux, len), bytes 8..9 where to cut; the rest is what the server sent. Checked:
 *  - the result is 0, -EBADMSG, or a length within [1, len] with a status set;
 *  - streaming: a prefix gives 0 or the whole's result (a response is complete or not,
 *    garbage stays garbage), and the first result's bytes alone give the same result;
 *  - no read past len: every call gets an exactly sized copy, so ASan sees it.
 * Protocol 4 is dns, whose answer is a whole datagram (no streaming): lg_dns_match of
 * the bytes against a fixed question and the ID in bytes 2..3 is 0 with a status, or
 * -EBADMSG, the same twice, and a datagram cut short of the question never matches.
 */
#define HDR 10

static const struct lg_proto_ops *const protos[] = { &lg_proto_echo, &lg_proto_memcache,
						     &lg_proto_spin, &lg_proto_http };
static struct lg_proto *states[4];

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void setup(void)
{
	static const char *const names[] = { "echo", "memcache", "spin", "http" };
	char err[128];

	for (int i = 0; i < 4; i++) {
		struct lg_proto_config cfg = { .name = names[i] };
		states[i] = protos[i]->create(&cfg, err, sizeof(err));
		if (!states[i]) {
			fprintf(stderr, "create %s: %s\n", names[i], err);
			abort();
		}
	}
}

static long parse_copy(int proto, const struct lg_req *req, const uint8_t *data, size_t len,
		       enum lg_status *st)
{
	uint8_t *copy = malloc(len ? len : 1);
	long rc;

	if (!copy)
		abort();
	memcpy(copy, data, len);
	*st = (enum lg_status)0x7f; /* unset */
	rc = protos[proto]->parse(states[proto], req, copy, len, st);
	free(copy);
	return rc;
}

static void check_result(long rc, enum lg_status st, size_t len)
{
	if (rc == 0 || rc == -EBADMSG)
		return;
	if (rc < 0 || (size_t)rc > len)
		abort();
	if (st != LG_RESP_OK && st != LG_RESP_MISS && st != LG_RESP_ERROR)
		abort();
}

/* The request: its op mostly the protocol's own; lengths kept small enough to matter. */
static struct lg_req make_req(int proto, const uint8_t *d)
{
	struct lg_req req = { .aux = (uint16_t)(d[2] | d[3] << 8) };
	uint32_t len = (uint32_t)d[4] | (uint32_t)d[5] << 8 | (uint32_t)d[6] << 16 | (uint32_t)d[7] << 24;

	if (d[1] & 0x80) /* any op, the protocol's or not */
		req.op = d[1] & 3;
	else if (proto == 1)
		req.op = d[1] & 1 ? LG_OP_SET : LG_OP_GET;
	else
		req.op = proto == 0 ? LG_OP_ECHO : LG_OP_SPIN;
	if (proto == 1 && (d[1] & 0x40))
		req.aux = 0; /* a GET of any key: the VALUE line's key is not checked */
	req.len = proto == 0 && !(d[1] & 0x20) ? len % 4096 : len;
	return req;
}

static void dns_case(const uint8_t *d, const uint8_t *data, size_t len)
{
	static const uint8_t q[] = "\3www\7example\3com\0\0\1\0\1";
	uint16_t id = (uint16_t)(d[2] << 8 | d[3]);
	enum lg_status st = (enum lg_status)0x7f, st2 = (enum lg_status)0x7f;
	uint8_t *copy = malloc(len ? len : 1);

	if (!copy)
		abort();
	memcpy(copy, data, len);
	int rc = lg_dns_match(copy, len, id, q, sizeof(q) - 1, &st);
	int again = lg_dns_match(copy, len, id, q, sizeof(q) - 1, &st2);
	free(copy);
	if ((rc != 0 && rc != -EBADMSG) || again != rc)
		abort();
	if (rc == 0 && (st != st2 || (st != LG_RESP_OK && st != LG_RESP_MISS && st != LG_RESP_ERROR)))
		abort();
	if (rc == 0 && len < 12 + sizeof(q) - 1)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	enum lg_status st_full, st_part, st_again;

	if (n < HDR)
		return 0;
	if (!states[0])
		setup();
	if (d[0] % 5 == 4) {
		dns_case(d, d + HDR, n - HDR);
		return 0;
	}
	int proto = d[0] % 5;
	struct lg_req req = make_req(proto, d);
	const uint8_t *data = d + HDR;
	size_t len = n - HDR, cut = ((size_t)d[8] | (size_t)d[9] << 8) % (len + 1);

	long full = parse_copy(proto, &req, data, len, &st_full);
	check_result(full, st_full, len);
	long part = parse_copy(proto, &req, data, cut, &st_part);
	check_result(part, st_part, cut);
	if (part != 0 && (part != full || (part > 0 && st_part != st_full)))
		abort(); /* a prefix decided differently from the whole */
	if (full > 0) {
		long again = parse_copy(proto, &req, data, (size_t)full, &st_again);
		if (again != full || st_again != st_full)
			abort(); /* the response's own bytes are enough */
	}
	return 0;
}
