/* fuzz_vsim_costs.c: libFuzzer target for fp-vsim's cost-file parser. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vsim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
	if (vs_costs_parse(&k, (const char *)data, size, err, sizeof(err))) {
		unsigned ln = 0;

		if (strncmp(err, "line ", 5) || !memchr(err, ':', strlen(err)))
			__builtin_trap();
		for (const char *p = err + 5; *p >= '0' && *p <= '9'; p++)
			ln = ln * 10 + (unsigned)(*p - '0');
		if (ln < 1 || ln > lines)
			__builtin_trap();
		return 0;
	}
	for (unsigned i = 0; i < vs_n_cost_names; i++) {
		double v = *(const double *)(const void *)((const char *)&k + vs_cost_names[i].off);

		if (!isfinite(v) || v < 0 || v > 1e9)
			__builtin_trap();
	}
	return 0;
}
