/* fuzz_qsim_parse.c: libFuzzer target for qsim's empirical-distribution and trace parsers. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a successful parse promises its caller (source.c samples by binary search on cum). */
static void check_empirical(const struct qs_empirical *e)
{
	if (e->n == 0 || !(e->mean > 0) || !isfinite(e->mean) || e->cum[e->n - 1] != 1.0)
		__builtin_trap();
	for (size_t i = 0; i < e->n; i++) {
		if (!(e->val[i] >= 0) || !isfinite(e->val[i]) || !(e->cum[i] >= 0))
			__builtin_trap();
		if (i && e->cum[i] < e->cum[i - 1])
			__builtin_trap();
	}
}

static void check_trace(const struct qs_trace *t)
{
	if (t->n == 0)
		__builtin_trap();
	for (size_t i = 0; i < t->n; i++) {
		if (!(t->t[i] >= 0) || !isfinite(t->t[i]) || (i && t->t[i] < t->t[i - 1]))
			__builtin_trap();
		if (t->svc && (!(t->svc[i] >= 0) || !isfinite(t->svc[i])))
			__builtin_trap();
	}
}

/* Both parsers on the same bytes: each must either succeed with its invariants or fail
 * with a message and a line number inside the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct qs_empirical e;
	struct qs_trace t;
	struct qs_perr err;
	unsigned lines = 1;

	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	memset(&err, 0, sizeof(err));
	if (qs_parse_empirical((const char *)data, size, &e, &err) == 0) {
		check_empirical(&e);
		qs_empirical_free(&e);
	} else if (err.line > lines || !err.msg[0]) {
		__builtin_trap();
	}
	memset(&err, 0, sizeof(err));
	if (qs_parse_trace((const char *)data, size, &t, &err) == 0) {
		check_trace(&t);
		qs_trace_free(&t);
	} else if (err.line > lines || !err.msg[0]) {
		__builtin_trap();
	}
	return 0;
}
