/* main.c: qsim's entry point: sweep the asked loads, bisect for the SLO's maximum load, print. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qsim.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Progress goes to stderr only: stdout stays the deterministic result. */
static void progress(const struct qs_opts *o, const char *what, size_t i, size_t n,
		     const struct qs_point *p, double t0)
{
	if (!o->progress)
		return;
	fprintf(stderr, "qsim: %s %zu/%zu load %.4f: p%g %.3f S, efficiency %.3f (%.1f s)\n",
		what, i + 1, n, p->load, o->cfg.slo_pct, p->pslo, p->efficiency, now_s() - t0);
}

static int sweep(const struct qs_opts *o, struct qs_result *r, struct qs_point *pts)
{
	double t0 = now_s();

	for (size_t i = 0; i < o->nloads; i++) {
		int rc = qs_run(&o->cfg, o->loads[i], r);
		if (rc)
			return rc;
		qs_point_from(&pts[i], &o->cfg, o->loads[i], r);
		progress(o, "point", i, o->nloads, &pts[i], t0);
	}
	return 0;
}

/*
 * The highest load meeting the SLO, by bisection on [0, 1): each probe simulates the
 * configuration afresh with the same seed, and because every load replays the same
 * random draws (qs_src_init()), the SLO percentile rises monotonically with load for
 * FCFS, which bisection needs. The answer is the highest probe that met the SLO: the
 * threshold lies in [load, load + resolution).
 */
static int max_load(const struct qs_opts *o, struct qs_result *r, struct qs_maxload *m)
{
	double lo = 0, hi = 1, t0 = now_s();
	size_t n = 0;

	memset(m, 0, sizeof(*m));
	m->resolution = o->resolution;
	for (double w = 1; w > o->resolution; w /= 2)
		n++;
	while (hi - lo > o->resolution) {
		double mid = (lo + hi) / 2;
		struct qs_point p;
		int rc = qs_run(&o->cfg, mid, r);
		if (rc)
			return rc;
		qs_point_from(&p, &o->cfg, mid, r);
		progress(o, "bisection", m->iterations, n, &p, t0);
		m->iterations++;
		if (p.meets) {
			lo = mid;
			m->found = true;
			m->at = p;
		} else {
			hi = mid;
		}
	}
	m->load = lo;
	return 0;
}

static int run(struct qs_opts *o, FILE *out)
{
	struct qs_result r = { .hist = malloc(sizeof(struct fp_hist)) };
	struct qs_point *pts = calloc(o->nloads ? o->nloads : 1, sizeof(*pts));
	struct qs_maxload m;
	int rc = -ENOMEM;

	if (!r.hist || !pts)
		goto out;
	rc = sweep(o, &r, pts);
	if (!rc && o->max_load)
		rc = max_load(o, &r, &m);
	if (rc)
		goto out;
	if (o->json)
		qs_out_json(out, o, pts, o->nloads, o->max_load ? &m : NULL);
	else
		qs_out_table(out, o, pts, o->nloads, o->max_load ? &m : NULL);
out:
	free(pts);
	free(r.hist);
	return rc;
}

int main(int argc, char **argv)
{
	struct qs_opts o;
	FILE *out = stdout;
	int rc = qs_cli_parse(argc, argv, &o);

	if (rc == 0 && o.out_path && !(out = fopen(o.out_path, "w"))) {
		fprintf(stderr, "qsim: %s: %s\n", o.out_path, strerror(errno));
		rc = -EINVAL;
	}
	if (rc == 0) {
		if (o.progress < 0)
			o.progress = isatty(STDERR_FILENO);
		rc = run(&o, out);
		if ((out != stdout && fclose(out)) || (out == stdout && fflush(out)))
			rc = rc ? rc : -EIO;
	}
	qs_opts_free(&o);
	if (rc == -ENOMEM || rc == -EIO)
		fprintf(stderr, "qsim: %s\n", rc == -ENOMEM ? "out of memory" : "write error");
	return rc == 1 ? 0 : rc == -EINVAL ? 2 : rc ? 1 : 0;
}
