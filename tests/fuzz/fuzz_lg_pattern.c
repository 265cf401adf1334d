/* fuzz_lg_pattern.c: IX's load patterns (apps/loadgen/arrival.c: fp-loadgen's and fp-vsim's --pattern) on arbitrary text. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

/*
 * The input is the pattern's text (a NUL ends it early, as a command line would). What
 * arrival.c promises, checked after each parse:
 *   - the return is 0 or -EINVAL; on -EINVAL the message is one non-empty line,
 *     NUL-terminated inside the buffer;
 *   - on 0 the rate at any time (before, during and after the run) is finite and within
 *     [0, hi], never below lo for slope and step, and a step pattern with a hold ends its
 *     descent at lo.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), err[160];
	struct lg_pattern p;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	memset(err, 0x5a, sizeof(err));
	int rc = lg_pattern_parse(&p, text, 240, 7, err, sizeof(err));
	if (rc == 0) {
		for (int i = -2; i <= 130; i++) {
			double t = i * 2.0, v = lg_pattern_rate(&p, t);

			if (!isfinite(v) || v < 0 || v > p.hi ||
			    (p.kind != LG_PATTERN_SINE && v < p.lo))
				abort();
		}
		if (p.kind == LG_PATTERN_STEP && p.hold_s > 0) {
			double top = ceil((p.hi - p.lo) / p.step_rps) * p.step_s + p.hold_s;
			double end = top + ceil((p.hi - p.lo) / p.step_rps + 1) * p.step_s;

			if (isfinite(end) && end < 1e15 && lg_pattern_rate(&p, end) != p.lo)
				abort();
		}
	} else {
		if (rc != -EINVAL)
			abort();
		char *e = memchr(err, '\0', sizeof(err));
		if (!e || e == err || memchr(err, '\n', (size_t)(e - err)))
			abort();
	}
	free(text);
	return 0;
}
