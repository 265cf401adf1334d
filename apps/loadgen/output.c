/* output.c: fp-loadgen's reports: the human table, the JSON document, progress lines. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lg.h"

/*
 * Latencies are shown in microseconds, rates in requests per second. A point's verdict
 * (lg_point_verdict) decides "valid"; the KS test and the confidence interval are softer
 * checks: a point that fails them stays valid and the table says which failed, since both
 * can fail on a healthy generator (too few samples for a tight interval; a KS test over
 * thousands of gaps notices the loop's rounds of a few us once gaps are tens of us).
 */

static double us(double ns) { return ns / 1000.0; }

/* The KS test applies to fixed-rate open-loop points under Poisson arrivals. */
static lg_cdf_fn lg_cdf_of(const struct lg_config *cfg)
{
	if (cfg->closed || cfg->pattern.kind != LG_PATTERN_NONE)
		return NULL;
	return lg_arrival_cdf(&cfg->arrival);
}

void lg_verdicts(const struct lg_config *cfg, const struct lg_result *res, struct lg_verdict *v)
{
	for (unsigned i = 0; i < res->n_points; i++)
		lg_point_verdict(&res->points[i], lg_cdf_of(cfg), cfg->max_slip_us * 1000.0,
				 cfg->closed != 0, &v[i]);
}

/* Why @pt is invalid, as sentences for JSON (@longform) or words for the table; returns
 * how many reasons were written into @out (at most 4). */
static unsigned lg_reasons(const struct lg_config *cfg, const struct lg_point *pt,
			   const struct lg_verdict *v, bool longform, char out[4][128])
{
	unsigned n = 0;

	if (!v->ok_rate)
		snprintf(out[n++], 128, longform ? "achieved %.0f/s is below 99%% of offered %.0f/s"
			 : "rate", v->achieved_rps, v->offered_rps);
	if (!v->ok_slip)
		snprintf(out[n++], 128, longform ? "send slip p99 %.1f us exceeds %.1f us: the "
			 "generator fell behind" : "slip", us((double)v->slip.p99), cfg->max_slip_us);
	if (pt->dropped)
		snprintf(out[n++], 128, longform ? "%" PRIu64 " requests dropped (connection "
			 "backlog full)" : "dropped", pt->dropped);
	if (pt->timeouts)
		snprintf(out[n++], 128, longform ? "%" PRIu64 " requests timed out" : "timeouts",
			 pt->timeouts);
	return n;
}

/* ---- the table ---- */

static void lg_table_header(FILE *f, const struct lg_config *cfg, const struct lg_result *res)
{
	const char *net = fp_rt_transport_name(cfg->rt.transport);
	unsigned nw = cfg->rt.n_workers;

	fprintf(f, "fp-loadgen: %s (%s) at %s over %s, %u worker%s, %u connection%s, ",
		cfg->ops->name, res->workload, cfg->server, net, nw, nw == 1 ? "" : "s",
		cfg->conns, cfg->conns == 1 ? "" : "s");
	if (cfg->closed)
		fprintf(f, "closed loop %u per connection", cfg->closed);
	else
		fprintf(f, "depth %u, %s arrivals", cfg->depth, cfg->arrival_spec);
	if (cfg->pattern.kind != LG_PATTERN_NONE)
		fprintf(f, ", pattern %s in %.3g s windows", cfg->pattern_spec, cfg->window_s);
	fprintf(f, "; warm-up %.3g s, %.3g s %s, seed %" PRIu64 "\n", cfg->warmup_s,
		cfg->duration_s, cfg->pattern.kind != LG_PATTERN_NONE ? "in all" : "per point",
		cfg->seed);
	if (res->preload_keys)
		fprintf(f, "  preloaded %" PRIu64 " keys (%" PRIu64 " errors); setup %.2f s\n",
			res->preload_keys, res->preload_errors, res->setup_s);
	fprintf(f, "%10s %10s %10s %8s %8s %8s  %-20s %8s %9s %7s %8s %8s %6s  %s\n", "target",
		"offered", "achieved", "p50", "p90", "p99", "[95% CI]", "p99.9", "max", "errors",
		"timeouts", "slip p99", "KS p", "valid");
}

/* The "valid" cell: yes / no: reasons, then soft notes (ks, ci, partial). */
static void lg_valid_cell(const struct lg_config *cfg, const struct lg_point *pt,
			  const struct lg_verdict *v, char *buf, size_t len)
{
	char r[4][128];
	unsigned n = lg_reasons(cfg, pt, v, false, r);
	size_t pos = (size_t)snprintf(buf, len, "%s", v->valid ? "yes" : "no:");

	for (unsigned i = 0; i < n && !v->valid && pos < len; i++)
		pos += (size_t)snprintf(buf + pos, len - pos, "%s %s", i ? "," : "", r[i]);
	if (pos < len && (!v->ok_ks || !v->ok_ci || pt->partial))
		snprintf(buf + pos, len - pos, " (%s%s%s%s%s)", !v->ok_ks ? "KS p<0.01" : "",
			 !v->ok_ks && (!v->ok_ci || pt->partial) ? ", " : "",
			 !v->ok_ci ? "CI wide" : "", !v->ok_ci && pt->partial ? ", " : "",
			 pt->partial ? "partial" : "");
}

static void lg_table_row(FILE *f, const struct lg_config *cfg, const struct lg_point *pt,
			 const struct lg_verdict *v)
{
	char target[16], ci[40], ks[16], slip[16], valid[200];
	double p99 = us((double)v->lat.p99);

	if (cfg->closed)
		snprintf(target, sizeof(target), "closed");
	else
		snprintf(target, sizeof(target), "%.0f", pt->target_rps);
	if (v->p99_ci.ok)
		snprintf(ci, sizeof(ci), "[%.1f, %.1f]", us(v->p99_ci.lo), us(v->p99_ci.hi));
	else
		snprintf(ci, sizeof(ci), "[-]");
	if (cfg->closed)
		snprintf(slip, sizeof(slip), "-");
	else
		snprintf(slip, sizeof(slip), "%.2f", us((double)v->slip.p99));
	if (v->ks.n)
		snprintf(ks, sizeof(ks), "%.2f", v->ks.p);
	else
		snprintf(ks, sizeof(ks), "-");
	lg_valid_cell(cfg, pt, v, valid, sizeof(valid));
	fprintf(f, "%10s %10.1f %10.1f %8.1f %8.1f %8.1f%c %-20s %8.1f %9.1f %7" PRIu64 " %8"
		PRIu64 " %8s %6s  %s\n", target, v->offered_rps, v->achieved_rps,
		us((double)v->lat.p50), us((double)v->lat.p90), p99, p99 > cfg->slo_us ? '>' : ' ',
		ci, us((double)v->lat.p999), us((double)v->lat.max), pt->errors, pt->timeouts, slip,
		ks, valid);
}

void lg_print_table(FILE *f, const struct lg_config *cfg, const struct lg_result *res,
		    const struct lg_verdict *v)
{
	lg_table_header(f, cfg, res);
	for (unsigned i = 0; i < res->n_points; i++)
		lg_table_row(f, cfg, &res->points[i], &v[i]);
	if (!res->n_points)
		fprintf(f, "  (no point was measured)\n");
	fprintf(f, "latency in us from the %s; '>' marks a p99 above the SLO (%.0f us)%s\n",
		cfg->closed ? "send (closed loop)" : "scheduled send time", cfg->slo_us,
		res->interrupted ? "; interrupted: the last point is partial" : "");
}

/* ---- JSON ---- */

static void jstr(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* A number, or null when it is not finite (JSON has no NaN). */
static void jnum(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.10g", v);
	else
		fputs("null", f);
}

static void jkey_num(FILE *f, const char *k, double v, bool comma)
{
	fprintf(f, "\"%s\": ", k);
	jnum(f, v);
	if (comma)
		fputs(", ", f);
}

static void lg_json_config(FILE *f, const struct lg_config *cfg, const struct lg_result *res)
{
	bool mc = !strcmp(cfg->ops->name, "memcache");

	fputs("  \"config\": {\"proto\": ", f);
	jstr(f, cfg->ops->name);
	fputs(", \"workload\": ", f);
	if (mc)
		jstr(f, cfg->proto.workload);
	else
		fputs("null", f);
	fputs(", \"workload_desc\": ", f);
	jstr(f, res->workload);
	fputs(", \"arrival\": ", f);
	jstr(f, cfg->arrival_spec);
	fprintf(f, ", \"conns\": %u, \"depth\": %u, \"workers\": %u, \"transport\": \"%s\", "
		"\"closed\": %u, ", cfg->conns, cfg->closed ? cfg->closed : cfg->depth,
		cfg->rt.n_workers, fp_rt_transport_name(cfg->rt.transport),
		cfg->closed);
	fprintf(f, "\"backlog\": %u, ", cfg->backlog);
	jkey_num(f, "warmup_s", cfg->warmup_s, true);
	jkey_num(f, "duration_s", cfg->duration_s, true);
	jkey_num(f, "timeout_ms", cfg->timeout_ms, true);
	jkey_num(f, "max_slip_us", cfg->max_slip_us, true);
	jkey_num(f, "slo_us", cfg->slo_us, true);
	fprintf(f, "\"seed\": %" PRIu64 ", \"server\": ", cfg->seed);
	jstr(f, cfg->server);
	fputs(", \"pattern\": ", f);
	if (cfg->pattern_spec)
		jstr(f, cfg->pattern_spec);
	else
		fputs("null", f);
	fputs(", ", f);
	jkey_num(f, "window_s", cfg->pattern_spec ? cfg->window_s : cfg->duration_s, true);
	fprintf(f, "\"preload\": %s, \"preload_keys\": %" PRIu64 ", \"preload_errors\": %" PRIu64
		"},\n", cfg->preload ? "true" : "false", res->preload_keys, res->preload_errors);
}

static void lg_json_counts(FILE *f, const struct lg_point *pt, const struct lg_verdict *v)
{
	jkey_num(f, "target_rps", pt->target_rps, true);
	jkey_num(f, "offered_rps", v->offered_rps, true);
	jkey_num(f, "achieved_rps", v->achieved_rps, true);
	jkey_num(f, "duration_s", pt->duration_s, true);
	fprintf(f, "\"scheduled\": %" PRIu64 ", \"sent\": %" PRIu64 ", \"completed\": %" PRIu64
		", \"ok\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"errors\": %" PRIu64
		", \"timeouts\": %" PRIu64 ", \"dropped\": %" PRIu64 ", \"reconnects\": %" PRIu64
		", \"client_loop_gaps\": %" PRIu64 ", \"client_loop_gap_us\": %.1f"
		", \"client_stalls\": %" PRIu64
		",\n     ", pt->scheduled, pt->sent, pt->completed, pt->ok, pt->misses, pt->errors,
		pt->timeouts, pt->dropped, pt->reconnects, pt->loop_gaps,
		(double)pt->loop_gap_ns / 1e3, pt->loop_stalls);
}

static void lg_json_stats(FILE *f, const struct lg_verdict *v)
{
	const struct fp_hist_summary *l = &v->lat, *s = &v->slip;

	fputs("\"latency_us\": {", f);
	jkey_num(f, "mean", us(l->mean), true);
	jkey_num(f, "p50", us((double)l->p50), true);
	jkey_num(f, "p90", us((double)l->p90), true);
	jkey_num(f, "p99", us((double)l->p99), true);
	jkey_num(f, "p999", us((double)l->p999), true);
	jkey_num(f, "max", us((double)l->max), false);
	fputs("}, \"p99_ci_us\": ", f);
	if (v->p99_ci.ok) {
		fputc('[', f);
		jnum(f, us(v->p99_ci.lo));
		fputs(", ", f);
		jnum(f, us(v->p99_ci.hi));
		fputc(']', f);
	} else {
		fputs("null", f);
	}
	fputs(",\n     \"latency_from_send_us\": {", f);
	jkey_num(f, "p50", us((double)v->lat_sent.p50), true);
	jkey_num(f, "p90", us((double)v->lat_sent.p90), true);
	jkey_num(f, "p99", us((double)v->lat_sent.p99), true);
	jkey_num(f, "p999", us((double)v->lat_sent.p999), false);
	fputs("}, \"slip_us\": {", f);
	jkey_num(f, "p50", us((double)s->p50), true);
	jkey_num(f, "p99", us((double)s->p99), true);
	jkey_num(f, "max", us((double)s->max), false);
	fputs("}, \"ks\": ", f);
	if (v->ks.n) {
		fputc('{', f);
		jkey_num(f, "d", v->ks.d, true);
		jkey_num(f, "p", v->ks.p, true);
		fprintf(f, "\"n\": %zu}", v->ks.n);
	} else {
		fputs("null", f);
	}
	fputs(",\n     ", f);
}

static void lg_json_point(FILE *f, const struct lg_config *cfg, unsigned i,
			  const struct lg_point *pt, const struct lg_verdict *v)
{
	char r[4][128];
	unsigned n = lg_reasons(cfg, pt, v, true, r);

	fputs("    {", f);
	lg_json_counts(f, pt, v);
	lg_json_stats(f, v);
	fprintf(f, "\"checks\": {\"rate\": %s, \"slip\": %s, \"ks\": %s, \"ci\": %s}, "
		"\"valid\": %s, \"invalid_reasons\": [", v->ok_rate ? "true" : "false",
		v->ok_slip ? "true" : "false", v->ok_ks ? "true" : "false",
		v->ok_ci ? "true" : "false", v->valid ? "true" : "false");
	for (unsigned k = 0; k < n; k++) {
		if (k)
			fputs(", ", f);
		jstr(f, r[k]);
	}
	fprintf(f, "], \"partial\": %s, ", pt->partial ? "true" : "false");
	jkey_num(f, "t_start_s", lg_point_start_s(cfg, i), false);
	fputc('}', f);
}

int lg_write_json(const char *path, const struct lg_config *cfg, const struct lg_result *res,
		  const struct lg_verdict *v)
{
	FILE *f = fopen(path, "w");
	int err;

	if (!f) {
		err = errno;
		fprintf(stderr, "fp-loadgen: --json %s: %s\n", path, strerror(err));
		return -err;
	}
	fputs("{\n  \"tool\": \"fp-loadgen\",\n  \"version\": 1,\n  \"command\": [", f);
	for (int i = 0; i < cfg->argc; i++) {
		if (i)
			fputs(", ", f);
		jstr(f, cfg->argv[i]);
	}
	fputs("],\n", f);
	lg_json_config(f, cfg, res);
	fprintf(f, "  \"interrupted\": %s,\n  \"points\": [", res->interrupted ? "true" : "false");
	for (unsigned i = 0; i < res->n_points; i++) {
		fputs(i ? ",\n" : "\n", f);
		lg_json_point(f, cfg, i, &res->points[i], &v[i]);
	}
	fputs(res->n_points ? "\n  ]\n}\n" : "]\n}\n", f);
	if (ferror(f) | fclose(f)) {
		err = errno ? errno : EIO;
		fprintf(stderr, "fp-loadgen: --json %s: %s\n", path, strerror(err));
		return -err;
	}
	return 0;
}

/* ---- progress ---- */

void lg_print_progress(FILE *f, const struct lg_config *cfg, unsigned i,
		       const struct lg_progress *p)
{
	double len = lg_point_len_s(cfg, i);

	fprintf(f, "fp-loadgen: point %u/%u", i + 1, lg_config_points(cfg));
	if (!cfg->closed)
		fprintf(f, "  target %.0f/s", lg_point_target(cfg, i));
	fprintf(f, "  offered %.0f/s  achieved %.0f/s  p99 %.1f us  errors %" PRIu64
		"  timeouts %" PRIu64 "  dropped %" PRIu64 "\n", (double)p->scheduled / len,
		(double)p->completed / len, us((double)p->p99_ns), p->errors, p->timeouts,
		p->dropped);
}
