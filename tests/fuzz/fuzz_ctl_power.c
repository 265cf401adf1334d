/* fuzz_ctl_power.c: the power model's file (ctl/power.c: fp-ctl watch --power) on arbitrary text. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/*
 * The input is the file's text (a NUL ends it, as reading a file into a string would).
 * What power.c promises: 0 or -EINVAL; on -EINVAL one non-empty line, NUL-terminated inside
 * the buffer; on 0 finite watts >= 0, and the package's watts for any sleep shares (even
 * out of 0..1: clamped) within [uncore + n min(core, c6), uncore + n max(core, c6)].
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), err[160];
	struct ctl_power pw;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	memset(err, 0x5a, sizeof(err));
	int rc = ctl_power_parse(&pw, text, err, sizeof(err));
	if (rc == 0) {
		double sh[4] = { -0.5, 0.25, 1.5, size ? data[0] / 255.0 : 0 };
		double lo = fmin(pw.core_w, pw.c6_w), hi = fmax(pw.core_w, pw.c6_w);
		double w = ctl_power_watts(&pw, 4, sh);

		if (!isfinite(pw.uncore_w) || !isfinite(pw.core_w) || !isfinite(pw.c6_w) ||
		    pw.uncore_w < 0 || pw.core_w < 0 || pw.c6_w < 0 || !isfinite(w) ||
		    w < pw.uncore_w + 4 * lo - 1e-6 * (1 + w) || w > pw.uncore_w + 4 * hi + 1e-6 * (1 + w))
			abort();
	} else {
		char *e = memchr(err, '\0', sizeof(err));
		if (rc != -EINVAL || !e || e == err || memchr(err, '\n', (size_t)(e - err)))
			abort();
	}
	free(text);
	return 0;
}
