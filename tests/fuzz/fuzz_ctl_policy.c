/* fuzz_ctl_policy.c: fp-ctl's policy file parser (ctl/policy.c) on arbitrary text, and the decision and plan on whatever it accepts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/*
 * The input is the policy file's text (a NUL ends it early, as reading a file into a string
 * would). What policy.c promises, checked after each parse:
 *   - the return is 0 or -EINVAL;
 *   - on -EINVAL the message is one non-empty line, NUL-terminated inside the buffer;
 *   - on 0 every field is in the range the file format names (interval_ms 1..60000,
 *     delay_max_us 0..1e7, idle_margin 0..1, EWMA indexes 0..2, min_workers 1..64,
 *     max_workers 0 or min_workers..64), and the decision on a view built from the input's
 *     bytes names an existing worker, and a plan spreads the groups within one of even.
 */
static void check_accepted(const struct ctl_policy *p, const uint8_t *d, size_t n)
{
	if (p->interval_ms < 1 || p->interval_ms > 60000 || !(p->delay_max_us >= 0) ||
	    p->delay_max_us > 1e7 || !(p->idle_margin >= 0) || p->idle_margin > 1 ||
	    p->up_ewma > 2 || p->down_ewma > 2 || p->min_workers < 1 ||
	    p->min_workers > CTL_MAX_WORKERS || p->max_workers > CTL_MAX_WORKERS ||
	    (p->max_workers && p->max_workers < p->min_workers))
		abort();
	struct ctl_view v = { .n = 1 + (n ? d[0] % CTL_MAX_WORKERS : 0), .draining = -1,
			      .now_ms = 100000 };
	for (unsigned w = 0; w < v.n; w++) {
		uint8_t b = n ? d[(w + 1) % n] : 0;
		v.w[w].parked = b & 1;
		v.w[w].fresh = b & 2;
		for (unsigned i = 0; i < 3; i++) {
			v.w[w].delay_us[i] = (double)(b * 5);
			v.w[w].idle[i] = (double)(b % 101) / 100.0;
		}
	}
	struct ctl_decision dc = ctl_decide(p, &v);
	if (dc.act != CTL_HOLD && dc.worker >= v.n)
		abort();
	if (dc.act == CTL_UP && !v.w[dc.worker].parked)
		abort();
	if (dc.act == CTL_DOWN && v.w[dc.worker].parked)
		abort();
	if (!memchr(dc.why, '\0', sizeof(dc.why)))
		abort();
	/* a ladder: rising capacity, sane rungs; a decision moves at most one rung (more: up_drain, down_fit) */
	for (unsigned i = 0; i < p->n_rungs; i++) {
		const struct ctl_rung *r = &p->rung[i];

		if (r->workers < 1 || r->workers > CTL_MAX_WORKERS || !(r->ghz > 0) || r->ghz > 10 ||
		    (i && !(r->workers * r->ghz > p->rung[i - 1].workers * p->rung[i - 1].ghz)))
			abort();
	}
	if (p->n_rungs > CTL_MAX_RUNGS || (p->n_rungs && (p->max_workers || p->min_workers != 1)))
		abort();
	for (unsigned cur = 0; p->n_rungs && cur < p->n_rungs; cur++) {
		struct ctl_decision dl = ctl_decide_ladder(p, &v, cur);

		if ((dl.act == CTL_UP && (p->up_drain ? dl.worker <= cur : dl.worker != cur + 1)) ||
		    (dl.act == CTL_DOWN && (p->down_fit ? dl.worker >= cur : dl.worker + 1 != cur)) ||
		    dl.worker >= p->n_rungs)
			abort();
	}

	uint16_t t[CTL_GROUPS];
	struct ctl_move m[CTL_GROUPS];
	uint64_t target = 0;
	unsigned have[CTL_MAX_WORKERS] = { 0 }, nt = 0;
	for (unsigned g = 0; g < CTL_GROUPS; g++)
		t[g] = n ? (uint16_t)(d[g % n] % (v.n + 1)) : 0;   /* v.n: out of range */
	for (unsigned w = 0; w < v.n; w++)
		if (!v.w[w].parked) {
			target |= 1ull << w;
			nt++;
		}
	unsigned k = ctl_plan(t, CTL_GROUPS, v.n, target, m, CTL_GROUPS);
	for (unsigned i = 0; i < k; i++) {
		if (m[i].group >= CTL_GROUPS || m[i].to >= v.n || !((target >> m[i].to) & 1))
			abort();
		t[m[i].group] = m[i].to;
	}
	if (!nt)
		return;
	for (unsigned g = 0; g < CTL_GROUPS; g++) {
		if (t[g] >= v.n || !((target >> t[g]) & 1))
			abort();   /* every group ends on a target */
		have[t[g]]++;
	}
	for (unsigned w = 0; w < v.n; w++)
		if ((target >> w) & 1 && (have[w] < CTL_GROUPS / nt || have[w] > CTL_GROUPS / nt + 1))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), err[128];
	struct ctl_policy p;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	ctl_policy_default(&p);
	memset(err, 0x5a, sizeof(err));
	int rc = ctl_policy_parse(text, &p, err, sizeof(err));
	if (rc == 0) {
		check_accepted(&p, data, size);
	} else {
		if (rc != -EINVAL)
			abort();
		char *end = memchr(err, '\0', sizeof(err));
		if (!end || end == err || memchr(err, '\n', (size_t)(end - err)))
			abort();
	}
	free(text);
	return 0;
}
