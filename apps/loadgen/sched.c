/* sched.c: fp-loadgen's schedule arithmetic: points and their windows, segments, the rate at time t, the next arrival. */
#include <math.h>
#include <stdbool.h>

#include "engine.h"

#define LG_ZERO_RATE_STEP_NS 1000000.0         /* a pattern at rate 0: look again 1 ms on */

/* ---- the schedule (shared with main.c and output.c through lg.h) ---- */

double lg_seg_s(const struct lg_config *cfg)
{
	return cfg->pattern.kind != LG_PATTERN_NONE ? cfg->window_s : cfg->duration_s;
}

unsigned lg_config_points(const struct lg_config *cfg)
{
	if (cfg->closed)
		return 1;
	if (cfg->pattern.kind != LG_PATTERN_NONE)
		return (unsigned)ceil(cfg->duration_s / cfg->window_s - 1e-9);
	return cfg->n_rates;
}

/* The measured span in all (seconds). */
double lg_meas_s(const struct lg_config *cfg)
{
	if (cfg->pattern.kind != LG_PATTERN_NONE || cfg->closed)
		return cfg->duration_s;
	return cfg->duration_s * cfg->n_rates;
}

double lg_point_start_s(const struct lg_config *cfg, unsigned i)
{
	return cfg->warmup_s + lg_seg_s(cfg) * i;
}

double lg_point_len_s(const struct lg_config *cfg, unsigned i)
{
	double seg = lg_seg_s(cfg), left = lg_meas_s(cfg) - seg * i;

	return left < seg ? left : seg;
}

double lg_point_target(const struct lg_config *cfg, unsigned i)
{
	const unsigned samples = 1000;
	double start = lg_seg_s(cfg) * i, len = lg_point_len_s(cfg, i), sum = 0;

	if (cfg->closed)
		return 0;
	if (cfg->pattern.kind == LG_PATTERN_NONE)
		return cfg->rates[i];
	for (unsigned k = 0; k < samples; k++)   /* the mean over the window (midpoint rule) */
		sum += lg_pattern_rate(&cfg->pattern, start + len * (k + 0.5) / samples);
	return sum / samples;
}

/* The segment @t falls in: -1 warm-up, 0..n-1 a point, n after the end. */
int lg_seg(const struct lg_worker *w, double t)
{
	const struct lg_engine *e = w->e;
	unsigned s;

	if (t < (double)w->t_meas)
		return -1;
	if (t >= (double)w->t_end)
		return (int)e->n_points;
	s = (unsigned)((t - (double)w->t_meas) / e->seg_ns);
	return (int)(s < e->n_points ? s : e->n_points - 1);
}

double lg_seg_end(const struct lg_worker *w, int seg)
{
	double end = (double)w->t_meas + w->e->seg_ns * (seg + 1);

	return seg < 0 ? (double)w->t_meas : end < (double)w->t_end ? end : (double)w->t_end;
}

/* This worker's share of the rate at time @t (fixed rates: the segment's). */
static double lg_rate_at(const struct lg_worker *w, double t, int seg)
{
	const struct lg_config *cfg = w->e->cfg;
	double r;

	if (cfg->pattern.kind != LG_PATTERN_NONE) {
		double ts = t > (double)w->t_meas ? (t - (double)w->t_meas) / 1e9 : 0;
		r = lg_pattern_rate(&cfg->pattern, ts);
	} else {
		r = cfg->rates[seg < 0 ? 0 : seg];
	}
	return r / w->e->n_workers;
}

/*
 * Move @w->next_ns to the next arrival; false when the schedule has ended. Fixed rates:
 * a gap that would cross into a point of another rate restarts the process at the
 * boundary (exact for Poisson, memoryless). Patterns: Poisson arrivals by thinning
 * (Lewis and Shedler: candidates at the highest rate, each kept with probability
 * rate(t)/max), exact for any rate(t); fixed and trace gaps at the rate where the last
 * arrival fell.
 */
bool lg_advance(struct lg_worker *w)
{
	const struct lg_engine *e = w->e;
	bool pattern = e->cfg->pattern.kind != LG_PATTERN_NONE;
	double t = w->next_ns;

	for (;;) {
		int seg = lg_seg(w, t);
		double rate, cand;

		if (seg >= (int)e->n_points)
			return false;
		if (pattern && w->arr.kind == LG_ARRIVAL_POISSON) {
			double max = e->pattern_max / e->n_workers;
			t += lg_arrival_gap_ns(&w->arr, max, &w->rng);
			if (t >= (double)w->t_end)
				return false;
			if (lg_rng_unit(&w->rng) * max < lg_rate_at(w, t, 0))
				break;
			continue;
		}
		rate = lg_rate_at(w, t, seg);
		if (rate <= 0) {
			t += LG_ZERO_RATE_STEP_NS;
			continue;
		}
		cand = t + lg_arrival_gap_ns(&w->arr, rate, &w->rng);
		if (!pattern && cand >= lg_seg_end(w, seg) && seg + 1 < (int)e->n_points &&
		    lg_rate_at(w, cand, seg + 1) != rate) {
			t = lg_seg_end(w, seg);
			continue;
		}
		t = cand;
		if (t >= (double)w->t_end)
			return false;
		break;
	}
	w->next_ns = t;
	return true;
}
