/* power.c: the power model's parameters (the files in bench/power/), for fp-ctl watch's watts. */
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/*
 * The files bench/pareto_sim.py reads: "name = value low high" lines (the value and its
 * sensitivity range), '#' comments, blank lines. What fp-ctl needs of it is the watts at
 * the nominal clock, where the model's voltage factor is 1: uncore_w while the package
 * runs, core_dyn_w + core_leak_w for a core awake (polling counts as busy), core_c6_w for
 * a core asleep. Other names (the clock and voltage steps) are read and checked, not used.
 */
static const char *const needed[] = { "uncore_w", "core_dyn_w", "core_leak_w", "core_c6_w" };
#define N_NEEDED (sizeof(needed) / sizeof(needed[0]))

int ctl_power_parse(struct ctl_power *pw, const char *text, char *err, size_t errlen)
{
	double got[N_NEEDED] = { 0 }, v = 0, lo = 0, hi = 0;
	bool have[N_NEEDED] = { false };
	unsigned no = 0;
	const char *p = text;

	memset(pw, 0, sizeof(*pw));
	while (*p) {
		char line[256], *hash, *eq, *name, *end;
		size_t len = strcspn(p, "\n");

		no++;
		if (len >= sizeof(line)) {
			snprintf(err, errlen, "line %u: longer than %zu bytes", no, sizeof(line) - 1);
			return -EINVAL;
		}
		memcpy(line, p, len);
		line[len] = '\0';
		p += len + (p[len] == '\n');
		if ((hash = strchr(line, '#')))
			*hash = '\0';
		name = ctl_trim(line);
		if (!*name)
			continue;
		eq = strchr(name, '=');
		bool ok = eq != NULL;
		if (ok) {
			char *q = eq + 1;
			double *out[3] = { &v, &lo, &hi };

			*eq = '\0';
			name = ctl_trim(name);
			for (int k = 0; k < 3 && ok; k++) {   /* three numbers, nothing after */
				*out[k] = strtod(q, &end);
				ok = end != q && isfinite(*out[k]);
				q = end;
			}
			ok = ok && *name && !*ctl_trim(q) && lo <= v && v <= hi && lo >= 0;
		}
		if (!ok) {
			snprintf(err, errlen, "line %u: expected 'name = value low high', "
				 "0 <= low <= value <= high", no);
			return -EINVAL;
		}
		for (size_t i = 0; i < N_NEEDED; i++)
			if (!strcmp(name, needed[i])) {
				got[i] = v;
				have[i] = true;
			}
	}
	for (size_t i = 0; i < N_NEEDED; i++)
		if (!have[i]) {
			snprintf(err, errlen, "no '%s' line (needs uncore_w, core_dyn_w, core_leak_w "
				 "and core_c6_w)", needed[i]);
			return -EINVAL;
		}
	pw->uncore_w = got[0];
	pw->core_w = got[1] + got[2];
	pw->c6_w = got[3];
	return 0;
}

double ctl_power_watts(const struct ctl_power *pw, unsigned n, const double *asleep)
{
	double w = pw->uncore_w;

	for (unsigned i = 0; i < n; i++) {
		double a = asleep[i] < 0 ? 0 : asleep[i] > 1 ? 1 : asleep[i];
		w += (1 - a) * pw->core_w + a * pw->c6_w;
	}
	return w;
}
