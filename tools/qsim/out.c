/* out.c: qsim's outputs: a JSON object per run (for plots and tests) and a human table. */
#include <math.h>
#include <stdio.h>

#include "qsim.h"

static const char *const disc_names[] = {
	[QS_FCFS] = "fcfs", [QS_PART] = "part", [QS_PS] = "ps",
	[QS_PART_PS] = "part-ps", [QS_STEAL] = "steal",
};
static const char *const alloc_names[] = {
	[QS_ALLOC_NONE] = "none", [QS_ALLOC_ORACLE] = "oracle",
	[QS_ALLOC_SHENANGO] = "shenango", [QS_ALLOC_IX] = "ix",
};

/*
 * Summarize @r, a run of @c at @load. Efficiency is Shenango's CPU efficiency (§2): the
 * application's work divided by the core-time allocated; utilization also counts the
 * overheads (per-request and per-steal) as busy.
 */
void qs_point_from(struct qs_point *p, const struct qs_cfg *c, double load,
		   const struct qs_result *r)
{
	struct fp_hist_summary s;

	fp_hist_summarize(r->hist, &s);
	p->load = load;
	p->offered_cores = load * c->servers;
	p->rate_mrps = p->offered_cores / c->mean_us;
	p->p50 = s.p50 / QS_TICKS;
	p->p99 = s.p99 / QS_TICKS;
	p->p999 = s.p999 / QS_TICKS;
	p->max = s.max / QS_TICKS;
	p->pslo = fp_hist_percentile(r->hist, c->slo_pct) / QS_TICKS;
	p->n = r->n;
	p->mean = r->n ? r->sum_lat / r->n : 0;
	p->mean_wait = r->n ? r->sum_wait / r->n : 0;
	p->p_wait = r->n ? (double)r->n_wait / r->n : 0;
	p->efficiency = r->alloc_area > 0 ? r->useful / r->alloc_area : 0;
	p->utilization = r->alloc_area > 0 ? r->busy / r->alloc_area : 0;
	p->cores_mean = r->elapsed > 0 ? r->alloc_area / r->elapsed : 0;
	p->cores_max = r->cores;
	p->steals = r->steals;
	p->grants = r->grants;
	p->meets = r->n > 0 && p->pslo <= c->slo;
}

/* A JSON number; JSON has no inf or nan, so those become null. */
static void jnum(FILE *f, const char *key, double v, const char *sep)
{
	if (isfinite(v))
		fprintf(f, "\"%s\": %.6g%s", key, v, sep);
	else
		fprintf(f, "\"%s\": null%s", key, sep);
}

/* A JSON string from trusted text or a path, escaping what JSON requires. */
static void jstr(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_alloc(FILE *f, const struct qs_cfg *c)
{
	const struct qs_alloc *a = &c->alloc;
	double us = c->mean_us;

	fprintf(f, "\"alloc\": {\"policy\": \"%s\"", alloc_names[a->kind]);
	if (a->kind == QS_ALLOC_NONE) {
		fputs("}", f);
		return;
	}
	fputs(", ", f);
	if (a->kind != QS_ALLOC_IX)
		jnum(f, "interval_us", a->interval * us, ", ");
	jnum(f, "realloc_us", a->realloc * us, ", ");
	jnum(f, "park_us", a->park * us, ", ");
	fprintf(f, "\"min_cores\": %d", a->min_cores);
	if (a->kind == QS_ALLOC_IX) {
		fputs(", ", f);
		jnum(f, "period_us", a->ix_period * us, ", ");
		jnum(f, "sub_us", a->ix_sub * us, ", ");
		jnum(f, "alpha", a->ix_alpha, ", ");
		jnum(f, "bound_us", a->ix_bound * us, ", ");
		jnum(f, "margin", a->ix_margin, "");
	}
	fputs("}", f);
}

static void json_config(FILE *f, const struct qs_opts *o)
{
	const struct qs_cfg *c = &o->cfg;

	fprintf(f, "\"config\": {\"servers\": %u, \"discipline\": \"%s\", \"dist\": ", c->servers,
		disc_names[c->disc]);
	jstr(f, c->dist_name);
	fputs(", ", f);
	jnum(f, "dist_cv", qs_dist_cv(&c->dist), ", ");
	jnum(f, "mean_service_us", c->mean_us, ", ");
	fprintf(f, "\"requests\": %llu, ", (unsigned long long)c->requests);
	jnum(f, "warmup", c->warmup, ", ");
	fprintf(f, "\"seed\": %llu, \"slo\": {", (unsigned long long)c->seed);
	jnum(f, "percentile", c->slo_pct, ", ");
	jnum(f, "mult", c->slo, ", ");
	jnum(f, "us", c->slo * c->mean_us, "}, ");
	jnum(f, "steal_cost_us", c->steal_cost * c->mean_us, ", ");
	jnum(f, "request_cost_us", c->req_cost * c->mean_us, ", ");
	if (c->route.kind == QS_ROUTE_FLOWS)
		fprintf(f, "\"routing\": \"flows:%u\", ", c->route.nflows);
	else
		fprintf(f, "\"routing\": \"%s\", ",
			c->route.kind == QS_ROUTE_WEIGHTS ? "weights" : "uniform");
	fputs("\"trace\": ", f);
	if (c->trace_path)
		jstr(f, c->trace_path);
	else
		fputs("null", f);
	fputs(", ", f);
	json_alloc(f, c);
	fputs("}", f);
}

static void json_point(FILE *f, const struct qs_point *p, double us)
{
	fputs("{", f);
	jnum(f, "load", p->load, ", ");
	jnum(f, "offered_cores", p->offered_cores, ", ");
	jnum(f, "rate_mrps", p->rate_mrps, ", ");
	fprintf(f, "\"count\": %llu, ", (unsigned long long)p->n);
	jnum(f, "p50", p->p50, ", ");
	jnum(f, "p99", p->p99, ", ");
	jnum(f, "p999", p->p999, ", ");
	jnum(f, "p_slo", p->pslo, ", ");
	jnum(f, "max", p->max, ", ");
	jnum(f, "mean", p->mean, ", ");
	jnum(f, "mean_wait", p->mean_wait, ", ");
	jnum(f, "p50_us", p->p50 * us, ", ");
	jnum(f, "p99_us", p->p99 * us, ", ");
	jnum(f, "p999_us", p->p999 * us, ", ");
	jnum(f, "p_slo_us", p->pslo * us, ", ");
	jnum(f, "mean_us", p->mean * us, ", ");
	jnum(f, "mean_wait_us", p->mean_wait * us, ", ");
	jnum(f, "p_wait", p->p_wait, ", ");
	jnum(f, "efficiency", p->efficiency, ", ");
	jnum(f, "utilization", p->utilization, ", ");
	jnum(f, "cores_mean", p->cores_mean, ", ");
	fprintf(f, "\"cores_max\": %u, \"steals\": %llu, \"grants\": %llu, \"meets_slo\": %s}",
		p->cores_max, (unsigned long long)p->steals, (unsigned long long)p->grants,
		p->meets ? "true" : "false");
}

/*
 * One JSON object for the whole run: the configuration, every load point in order and,
 * when asked for, the maximum load meeting the SLO. Latencies are in units of S̄ and, with
 * the _us suffix, in microseconds. Printed with %.6g so that a seed gives the same bytes.
 */
void qs_out_json(FILE *f, const struct qs_opts *o, const struct qs_point *pts, size_t n,
		 const struct qs_maxload *m)
{
	double us = o->cfg.mean_us;

	fputs("{\"tool\": \"qsim\", \"version\": 1,\n ", f);
	json_config(f, o);
	fputs(",\n \"points\": [", f);
	for (size_t i = 0; i < n; i++) {
		fputs(i ? ",\n  " : "\n  ", f);
		json_point(f, &pts[i], us);
	}
	fputs("],\n \"max_load\": ", f);
	if (!m) {
		fputs("null}\n", f);
		return;
	}
	fputs("{", f);
	jnum(f, "load", m->found ? m->load : 0, ", ");
	fprintf(f, "\"method\": \"bisection\", ");
	jnum(f, "resolution", m->resolution, ", ");
	fprintf(f, "\"iterations\": %u, \"found\": %s, \"at\": ", m->iterations,
		m->found ? "true" : "false");
	if (m->found)
		json_point(f, &m->at, us);
	else
		fputs("null", f);
	fputs("}}\n", f);
}

/* The same results as a table for people: one row per load point. */
void qs_out_table(FILE *f, const struct qs_opts *o, const struct qs_point *pts, size_t n,
		  const struct qs_maxload *m)
{
	const struct qs_cfg *c = &o->cfg;

	fprintf(f, "# qsim %s n=%u dist=%s S=%gus requests=%llu seed=%llu alloc=%s "
		"slo=p%g<=%gS (%gus)\n", disc_names[c->disc], c->servers, c->dist_name, c->mean_us,
		(unsigned long long)c->requests, (unsigned long long)c->seed,
		alloc_names[c->alloc.kind], c->slo_pct, c->slo, c->slo * c->mean_us);
	if (n)
		fprintf(f, "%6s %8s %8s %8s %8s %9s %9s %9s %8s %6s %6s %5s\n", "load", "Mrps",
			"p50/S", "p99/S", "p999/S", "p50_us", "p99_us", "p999_us", "wait/S", "eff",
			"cores", "slo");
	for (size_t i = 0; i < n; i++) {
		const struct qs_point *p = &pts[i];
		fprintf(f, "%6.3f %8.4f %8.3f %8.3f %8.3f %9.2f %9.2f %9.2f %8.3f %6.3f %6.2f %5s\n",
			p->load, p->rate_mrps, p->p50, p->p99, p->p999, p->p50 * c->mean_us,
			p->p99 * c->mean_us, p->p999 * c->mean_us, p->mean_wait, p->efficiency,
			p->cores_mean, p->meets ? "ok" : "miss");
	}
	if (m && m->found)
		fprintf(f, "# max load meeting p%g <= %gS: %.3f (bisection, resolution %g)\n",
			c->slo_pct, c->slo, m->load, m->resolution);
	else if (m)
		fprintf(f, "# no load >= %g meets p%g <= %gS\n", m->resolution, c->slo_pct, c->slo);
}
