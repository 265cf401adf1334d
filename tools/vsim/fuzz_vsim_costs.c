/* fuzz_vsim_costs.c: libFuzzer target for fp-vsim's cost-file and stall-file parsers. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vsim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A failed parse's message names a line of the input: "line N: what". */
static void check_err(const char *err, unsigned lines)
{
	unsigned ln = 0;

	if (strncmp(err, "line ", 5) || !memchr(err, ':', strlen(err)))
		__builtin_trap();
	for (const char *p = err + 5; *p >= '0' && *p <= '9'; p++)
		ln = ln * 10 + (unsigned)(*p - '0');
	if (ln < 1 || ln > lines)
		__builtin_trap();
}

/* The same bytes as a stall file: either a span in (0, 1e6] s and every gap in (0, 1e6] us,
 * or a failure that names a line and leaves nothing allocated. */
static void stalls(const uint8_t *data, size_t size, unsigned lines)
{
	struct vs_stalls s;
	char err[256];

	if (vs_stalls_parse(&s, (const char *)data, size, err, sizeof(err))) {
		check_err(err, lines);
		if (s.gap_us[0] || s.gap_us[1] || s.n[0] || s.n[1])
			__builtin_trap();
		return;
	}
	if (!(s.seconds > 0 && s.seconds <= 1e6))
		__builtin_trap();
	for (unsigned r = 0; r < 2; r++)
		for (size_t i = 0; i < s.n[r]; i++)
			if (!(s.gap_us[r][i] > 0 && s.gap_us[r][i] <= 1e6))
				__builtin_trap();
	vs_stalls_free(&s);
}

/* Either every cost is a finite number in [0, 1e9], or the parse failed with a message
 * that names a line of the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vs_costs k;
	char err[256];
	unsigned lines = 1;

	memset(&k, 0, sizeof(k));
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	stalls(data, size, lines);
	if (vs_costs_parse(&k, (const char *)data, size, err, sizeof(err))) {
		check_err(err, lines);
		return 0;
	}
	for (unsigned i = 0; i < vs_n_cost_names; i++) {
		double v = *(const double *)(const void *)((const char *)&k + vs_cost_names[i].off);

		if (!isfinite(v) || v < 0 || v > 1e9)
			__builtin_trap();
	}
	return 0;
}
