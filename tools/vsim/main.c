/* main.c: fp-vsim's command line: points, sweeps and the SLO search, as text or JSON. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/clock.h>

#include "vsim.h"

static const char usage[] =
	"usage: fp-vsim [options]\n"
	"ZygOS's shuffle layer (rt/shuffle.c) and a worker loop over it, run for N cores:\n"
	"in virtual time in one thread (deterministic: same seed, same output), or with\n"
	"--real on real pinned threads that spin each request's service time.\n"
	"\n"
	"  -n, --workers N        workers (virtual: 1-64; default 16)\n"
	"  --sched part|steal     partitioned (IX: each flow on its home) or stealing\n"
	"                         (ZygOS); default steal\n"
	"  --victim random|oldest which other queue an idle worker steals from: random order\n"
	"                         (ZygOS) or the oldest head (qsim's model); default random\n"
	"  --notify poll|ipi      how a busy home learns of work for it: at its next loop\n"
	"                         pass, or by an interrupt (ZygOS's IPI; on real threads a\n"
	"                         SIGUSR1 to the worker)\n"
	"  -d, --dist NAME        det, exp, bimodal1 (90% S/2, 10% 5.5 S), bimodal2; default exp\n"
	"  --mean-us S            mean service time (default 10)\n"
	"  -l, --load L           offered load: arrival rate x S / n (default 0.5)\n"
	"  --sweep A:B:STEP       loads from A to B\n"
	"  --max-load             the highest load whose p99 <= --slo-mult x S (bisection)\n"
	"  --slo-mult M           default 10\n"
	"  --requests N           per point (default 200000)\n"
	"  --warmup F             fraction of the first requests not counted (default 0.05)\n"
	"  --flows F              connections, requests spread uniformly (default 100000)\n"
	"  --batch B              frames per NIC poll (default 64)\n"
	"  --seed S               default 1\n"
	"  --cost NAME=NS         one cost of the model (virtual world); see --list-costs\n"
	"  --costs FILE           NAME=NS lines (# comments), e.g. from --calibrate\n"
	"  --list-costs           the cost model's names and meanings\n"
	"  --alloc                Shenango's core allocator (rt/alloc.c; virtual time, with\n"
	"                         --sched steal): --homes workers own the flows and always\n"
	"                         poll; the others are burstable, granted a core when a home's\n"
	"                         queue holds an item two passes running, parking after\n"
	"                         --spin-us without work; their cores' idle time is the batch\n"
	"                         job's (the cores and batch% columns)\n"
	"  --homes G              with --alloc: workers that own the flows (default 1)\n"
	"  --alloc-us I           with --alloc: the allocator's interval (default 5)\n"
	"  --spin-us P            with --alloc: a burstable worker's look before it parks\n"
	"                         (default 2)\n"
	"  --shift LO:HI:MS       load LO for MS ms, then HI, then LO again (Shenango's load\n"
	"                         shift; replaces --load and --requests); use with --windows\n"
	"  --windows US           also print per window of US us (by arrival): offered and\n"
	"                         answered Mreq/s, p50, p99, p99.9, the cores held and the\n"
	"                         clock\n"
	"  --ghz F                the cores' clock; every step and service time takes\n"
	"                         nominal/F as long (default: the nominal clock)\n"
	"  --nominal-ghz F        the clock the costs and --mean-us were measured at\n"
	"                         (default 2.4, IX's Xeon E5-2665)\n"
	"  --slo-us US            --max-load's bound and meets_slo: p99 <= US (instead of\n"
	"                         --slo-mult x S)\n"
	"  --pattern P            the arrival rate follows IX's load pattern, as fp-loadgen's\n"
	"                         --pattern (requests/s, k and M suffixes): slope:LO:HI,\n"
	"                         step:LO:HI:STEP_RPS:STEP_S[:HOLD_S] or\n"
	"                         sine:LO:HI:PERIOD_S[:NOISE_RPS[:NOISE_S]]; replaces --load\n"
	"                         and --requests\n"
	"  --pattern-s S          the pattern's length in seconds of virtual time (default 8)\n"
	"  --ctl                  IX's control loop (ctl/policy.c, as fp-ctl runs it) adds and\n"
	"                         removes workers, moving flow groups (IX's hold and release),\n"
	"                         and with a ladder steps the clock; --sched part only; the\n"
	"                         workers' core-seconds per clock are in the result\n"
	"  --policy FILE          with --ctl: fp-ctl's policy file (key = value; a ladder line\n"
	"                         WORKERS@GHZ, ... sets the configurations to step through)\n"
	"  --full                 the real dataplane instead of the model, in virtual time:\n"
	"                         rt/'s worker loop, the TCP/IP stack, steal.c and fp-echo\n"
	"                         spin --native's handler (or fp-kv's, --app kv) on each\n"
	"                         core, a virtual NIC with RSS, a client stack sending the\n"
	"                         requests over TCP (--flows connections, default 1024);\n"
	"                         costs: poll_ns, rx_ns,\n"
	"                         tx_ns, steal_ns, wire_ns; with --notify ipi (rt/ipi.c's\n"
	"                         interrupts, delivered in virtual time) also kick_ns,\n"
	"                         ipi_ns, ipi_handle_ns\n"
	"  --ipi-after-us US      --full --notify ipi: a home is interrupted once inside a\n"
	"                         handler this long (the runtime's option; default 10)\n"
	"  --flush-us US          --full --sched part: the runtime's option; the handler\n"
	"                         gets a round's requests in chunks and what it sent leaves\n"
	"                         once it has run this long since the last send (default 0:\n"
	"                         at the round's end, IX's batching)\n"
	"  --app spin|kv          --full: the server: fp-echo's spin server (default), or\n"
	"                         fp-kv (apps/kv/server.c, one store) with fp-loadgen's\n"
	"                         memcache client (USR: 99.8% GET); every key is stored\n"
	"                         first; each command fp-kv runs costs a service time from\n"
	"                         -d and --mean-us (with --app kv: default det, 0.5 us)\n"
	"  --keys N               --app kv: the key space (default 10000)\n"
	"  --steal-force          --full: every batch runs on a thief, none at home\n"
	"  --loss P, --reorder P  --full: each frame's chance of being dropped, or held back\n"
	"                         1-50 us (later ones pass it), on the virtual wire\n"
	"  --stalls FILE          --full: the machine's stalls, as bench/vcpu_gaps.py --out\n"
	"                         writes them (seconds=S, server=GAP,.. and client=GAP,..\n"
	"                         in us): each worker and the client stall at the rate\n"
	"                         their role's gaps came, each as long as one of them\n"
	"  --real                 real threads: workers on --cores, then the generator\n"
	"  --cores LIST           real: n+1 cores, e.g. 0-15 (default: 0..n)\n"
	"  --calibrate FILE       real: write the measured mean cost of each step as a\n"
	"                         --costs file (from the last point); --full: the real\n"
	"                         code's own time per round on this machine, fitted to\n"
	"                         poll_ns, rx_ns, tx_ns and steal_ns\n"
	"  --format text|json     default text\n"
	"  -o FILE                write the result there instead of stdout\n"
	"  --quiet                no progress lines on stderr\n"
	"Bad arguments print one line and exit 2; replies out of order within a flow make the\n"
	"exit status 1.\n";

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("fp-vsim: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (--help for usage)\n", stderr);
	exit(2);
}

static double num(const char *opt, const char *v, double lo, double hi)
{
	char *end;
	double x = strtod(v, &end);

	if (end == v || *end || !isfinite(x) || x < lo || x > hi)
		die("--%s: '%s' is not a number in [%g, %g]", opt, v, lo, hi);
	return x;
}

/* The first @max bytes of @path, for option --@opt; its length in *@len. */
static char *slurp(const char *opt, const char *path, size_t max, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	size_t cap = 0, n;

	if (!f)
		die("--%s: cannot open %s: %s", opt, path, strerror(errno));
	*len = 0;
	do {
		if (*len + 4096 > cap && !(text = realloc(text, cap = 2 * cap + 4096)))
			die("--%s: out of memory reading %s", opt, path);
		n = fread(text + *len, 1, cap - *len, f);
		*len += n;
	} while (n && *len < max);
	fclose(f);
	return text;
}

static void read_costs(struct vs_costs *k, const char *path)
{
	char err[300];
	size_t len;
	char *text = slurp("costs", path, 16u << 20, &len);

	if (vs_costs_parse(k, text, len, err, sizeof(err)))
		die("%s:%s", path, err + 5);   /* "line N: ..." as path:N: ... */
	free(text);
}

static struct vs_stalls stalls;   /* --stalls */

static void read_stalls(const char *path)
{
	char err[300];
	size_t len;
	char *text = slurp("stalls", path, 64u << 20, &len);

	if (vs_stalls_parse(&stalls, text, len, err, sizeof(err)))
		die("%s:%s", path, err + 5);   /* "line N: ..." as path:N: ... */
	free(text);
}

static void parse_cores(struct vs_config *c, const char *v)
{
	unsigned n = 0;
	const char *p = v;

	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;

		if (end == p || a < 0 || a >= CPU_SETSIZE)
			die("--cores: '%s' is not a list of cores like 0-3,8", v);
		if (*end == '-') {
			p = end + 1;
			b = strtol(p, &end, 10);
			if (end == p || b < a || b >= CPU_SETSIZE)
				die("--cores: '%s' is not a list of cores like 0-3,8", v);
		}
		for (long i = a; i <= b; i++) {
			if (n > VS_MAX_CORES)
				die("--cores: more than %u cores", VS_MAX_CORES + 1);
			c->cores[n++] = (int)i;
		}
		p = end;
		if (*p == ',')
			p++;
		else if (*p)
			die("--cores: '%s' is not a list of cores like 0-3,8", v);
	}
	c->n_cores_listed = n;
}

static void read_policy(struct vs_config *c, const char *path)
{
	char err[300], *text = ctl_read_file(path);

	if (!text)
		die("--policy: cannot read %s: %s", path, ctl_read_error(errno));
	if (ctl_policy_parse(text, &c->policy, err, sizeof(err)))
		die("--policy %s: %s", path, err);
	free(text);
}

static double slo_us(const struct vs_config *c)
{
	return c->slo_us > 0 ? c->slo_us : c->slo_mult * c->mean_us;
}

static const char *sched_name(const struct vs_config *c)
{
	return c->sched == VS_SCHED_STEAL ? "steal" : "part";
}

struct out {
	FILE *f;
	bool json;
	unsigned points;
};

static void print_point(struct out *o, const struct vs_config *c, const struct vs_result *r)
{
	double us = 1000.0;
	double steal_pct = r->batches ? 100.0 * (double)r->steals / (double)r->batches : 0;

	if (!o->json) {
		fprintf(o->f, "%5.3f %8.4f %8.4f %9.2f %9.2f %9.2f %9.2f %6.1f%% %8llu %6llu",
			r->load, r->offered_mrps, r->achieved_mrps, (double)r->s.p50 / us,
			(double)r->s.p99 / us, (double)r->s.p999 / us, r->s.mean / us, steal_pct,
			(unsigned long long)r->irqs, (unsigned long long)r->order_errors);
		if (c->alloc)
			fprintf(o->f, " %6.2f %5.1f%%", r->mean_cores, 100.0 * r->batch_share);
		if (c->real)
			fprintf(o->f, " %8.1f", (double)r->gen_late_max_ns / us);
		fputc('\n', o->f);
		if (c->full)
			fprintf(o->f, "# wire: %llu frames dropped, %llu held back; %llu dropped "
				"for want of a buffer; %llu connections closed by the client and "
				"let go by the workers\n", (unsigned long long)r->wire_drops,
				(unsigned long long)r->wire_delayed,
				(unsigned long long)r->nic_drops,
				(unsigned long long)r->conns_closed);
		if (c->full)
			fprintf(o->f, "# the workers' rounds that did work: %.3f us per request "
				"beyond its service time\n", r->busy_ns_per_req / us);
		if (c->app == VS_APP_KV)
			fprintf(o->f, "# fp-kv: %llu commands (the %llu keys' SETs among them), %llu "
				"GETs missed\n", (unsigned long long)r->app_cmds,
				(unsigned long long)c->kv_keys, (unsigned long long)r->kv_misses);
		if (c->stalls)
			fprintf(o->f, "# stalls: the workers %llu (%.3f ms), the client %llu (%.3f "
				"ms) of %.3f s\n", (unsigned long long)r->stalls_server,
				r->stalls_server_ms, (unsigned long long)r->stalls_client,
				r->stalls_client_ms, (double)r->duration_ns / 1e9);
		if (r->n_clocks) {
			fprintf(o->f, "# core-seconds polling:");
			for (unsigned i = 0; i < r->n_clocks; i++)
				fprintf(o->f, " %.4f at %g GHz", r->on_core_s[i], r->clock_ghz[i]);
			fprintf(o->f, "; off %.4f\n", r->off_core_s);
		}
		if (c->ctl)
			fprintf(o->f, "# ctl: %llu ticks, %llu up, %llu down, %llu group moves (mean %.1f "
				"us, max %.1f us), %llu wake-ups\n", (unsigned long long)r->ticks,
				(unsigned long long)r->ups, (unsigned long long)r->downs,
				(unsigned long long)r->moves, r->move_us_mean, r->move_us_max,
				(unsigned long long)r->wakes);
		if (r->n_win)
			fprintf(o->f, "# window t_ms offered_mrps done_mrps    p50us    p99us   p999us  cores   ghz\n");
		for (unsigned i = 0; i < r->n_win; i++) {
			const struct vs_window *w = &r->win[i];

			fprintf(o->f, "window %8.3f %12.4f %9.4f %8.2f %8.2f %8.2f %6.2f %5.2f\n",
				w->t0_ms, w->offered_mrps, w->done_mrps, (double)w->s.p50 / us,
				(double)w->s.p99 / us, (double)w->s.p999 / us, w->mean_cores,
				w->mean_ghz);
		}
		return;
	}
	fprintf(o->f, "%s\n  {\"load\": %.6g, \"offered_mrps\": %.6g, \"achieved_mrps\": %.6g, "
		"\"count\": %llu, \"p50_us\": %.6g, \"p99_us\": %.6g, \"p999_us\": %.6g, "
		"\"mean_us\": %.6g, \"max_us\": %.6g, \"p99\": %.6g, \"batches\": %llu, "
		"\"steals\": %llu, \"returns\": %llu, \"steal_probes\": %llu, "
		"\"steal_misses\": %llu, \"kicks\": %llu, \"irqs\": %llu, \"order_errors\": %llu, "
		"\"duration_us\": %.6g, \"meets_slo\": %s",
		o->points ? "," : "", r->load, r->offered_mrps, r->achieved_mrps,
		(unsigned long long)r->s.count, (double)r->s.p50 / us, (double)r->s.p99 / us,
		(double)r->s.p999 / us, r->s.mean / us, (double)r->s.max / us,
		(double)r->s.p99 / us / c->mean_us, (unsigned long long)r->batches,
		(unsigned long long)r->steals, (unsigned long long)r->returns,
		(unsigned long long)r->probes, (unsigned long long)r->misses,
		(unsigned long long)r->kicks, (unsigned long long)r->irqs,
		(unsigned long long)r->order_errors, (double)r->duration_ns / us,
		(double)r->s.p99 / us <= slo_us(c) ? "true" : "false");
	if (r->n_clocks) {
		fprintf(o->f, ", \"on_core_s\": {");
		for (unsigned i = 0; i < r->n_clocks; i++)
			fprintf(o->f, "%s\"%g\": %.6g", i ? ", " : "", r->clock_ghz[i], r->on_core_s[i]);
		fprintf(o->f, "}, \"off_core_s\": %.6g", r->off_core_s);
	}
	if (c->ctl)
		fprintf(o->f, ", \"ctl\": {\"ticks\": %llu, \"ups\": %llu, \"downs\": %llu, "
			"\"moves\": %llu, \"move_us_mean\": %.6g, \"move_us_max\": %.6g, "
			"\"wakes\": %llu}", (unsigned long long)r->ticks, (unsigned long long)r->ups,
			(unsigned long long)r->downs, (unsigned long long)r->moves, r->move_us_mean,
			r->move_us_max, (unsigned long long)r->wakes);
	if (c->alloc)
		fprintf(o->f, ", \"mean_cores\": %.6g, \"batch_share\": %.6g, \"grants\": %llu, "
			"\"parks\": %llu, \"passes\": %llu, \"congested_passes\": %llu, "
			"\"starved_passes\": %llu", r->mean_cores, r->batch_share,
			(unsigned long long)r->grants, (unsigned long long)r->parks,
			(unsigned long long)r->passes, (unsigned long long)r->congested,
			(unsigned long long)r->starved);
	if (r->n_win) {
		fprintf(o->f, ", \"windows\": [");
		for (unsigned i = 0; i < r->n_win; i++) {
			const struct vs_window *w = &r->win[i];

			fprintf(o->f, "%s\n    {\"t_ms\": %.6g, \"offered_mrps\": %.6g, "
				"\"done_mrps\": %.6g, \"count\": %llu, \"p50_us\": %.6g, "
				"\"p99_us\": %.6g, \"p999_us\": %.6g, \"max_us\": %.6g, "
				"\"mean_cores\": %.6g, \"mean_ghz\": %.6g}", i ? "," : "", w->t0_ms,
				w->offered_mrps, w->done_mrps, (unsigned long long)w->s.count,
				(double)w->s.p50 / us, (double)w->s.p99 / us, (double)w->s.p999 / us,
				(double)w->s.max / us, w->mean_cores, w->mean_ghz);
		}
		fputc(']', o->f);
	}
	if (c->full)
		fprintf(o->f, ", \"wire_drops\": %llu, \"wire_delayed\": %llu, "
			"\"nic_drops\": %llu, \"conns_closed\": %llu, \"busy_us_per_req\": %.6g",
			(unsigned long long)r->wire_drops, (unsigned long long)r->wire_delayed,
			(unsigned long long)r->nic_drops, (unsigned long long)r->conns_closed,
			r->busy_ns_per_req / us);
	if (c->app == VS_APP_KV)
		fprintf(o->f, ", \"kv_commands\": %llu, \"kv_misses\": %llu",
			(unsigned long long)r->app_cmds, (unsigned long long)r->kv_misses);
	if (c->stalls)
		fprintf(o->f, ", \"stalls_workers\": %llu, \"stalls_workers_ms\": %.6g, "
			"\"stalls_client\": %llu, \"stalls_client_ms\": %.6g",
			(unsigned long long)r->stalls_server, r->stalls_server_ms,
			(unsigned long long)r->stalls_client, r->stalls_client_ms);
	if (c->real) {
		fprintf(o->f, ", \"generator_late_max_us\": %.6g, \"generator_late_count\": %llu, "
			"\"measured_costs\": {", (double)r->gen_late_max_ns / us,
			(unsigned long long)r->gen_late_count);
		for (unsigned i = 0; i < vs_n_cost_names; i++)
			fprintf(o->f, "%s\"%s\": %.4g", i ? ", " : "", vs_cost_names[i].name,
				*(const double *)(const void *)((const char *)&r->measured + vs_cost_names[i].off));
		fputc('}', o->f);
	}
	fputc('}', o->f);
	o->points++;
}

static void print_header(struct out *o, const struct vs_config *c, int argc, char **argv)
{
	if (!o->json) {
		char nreq[32];

		if (c->shift_ms > 0 || c->has_pattern)
			snprintf(nreq, sizeof(nreq), "requests by %s", c->has_pattern ? "--pattern" :
				 "--shift");
		else
			snprintf(nreq, sizeof(nreq), "%llu requests", (unsigned long long)c->requests);
		fprintf(o->f, "# fp-vsim %s: %u workers, %s%s%s, %s S=%g us, %s, %u flows, seed "
			"%llu\n", c->real ? "real threads" : c->full ? "virtual time, the real "
			"dataplane (--full)" : "virtual time", c->n,
			sched_name(c), c->sched == VS_SCHED_STEAL ?
			(c->victim == FP_SHUF_VICTIM_OLDEST ? " (oldest)" : " (random)") : "",
			c->notify == VS_NOTIFY_IPI ? " +ipi" : "", c->dist, c->mean_us, nreq, c->flows,
			(unsigned long long)c->seed);
		if (c->app == VS_APP_KV)
			fprintf(o->f, "# fp-kv (apps/kv/server.c) and fp-loadgen's memcache client: "
				"usr, %llu keys stored first; a command's service time %s, mean %g us\n",
				(unsigned long long)c->kv_keys, c->dist, c->mean_us);
		if (c->alloc)
			fprintf(o->f, "# alloc: %u homes, %u burstable, a pass every %g us, parking after "
				"%g us idle, wake %g ns, park %g ns\n", c->homes, c->n - c->homes,
				c->alloc_us, c->spin_us, c->costs.wake_ns, c->costs.park_ns);
		if (c->shift_ms > 0)
			fprintf(o->f, "# shift: load %g for %g ms, %g for %g ms, %g for %g ms\n",
				c->shift_lo, c->shift_ms, c->shift_hi, c->shift_ms, c->shift_lo,
				c->shift_ms);
		if (c->has_pattern)
			fprintf(o->f, "# pattern %s over %g s\n", c->pattern_spec, c->pattern.duration_s);
		if (c->ghz != c->nominal_ghz)
			fprintf(o->f, "# clock %g GHz (costs and service times at %g GHz)\n", c->ghz,
				c->nominal_ghz);
		if (c->ctl) {
			fprintf(o->f, "# ctl: every %u ms, add above %g us of queueing delay, remove "
				"above idle (1 - capacity below/here) + %g, hold %u ms; ",
				c->policy.interval_ms, c->policy.delay_max_us, c->policy.idle_margin,
				c->policy.down_hold_ms);
			if (c->policy.n_rungs) {
				fprintf(o->f, "ladder");
				for (unsigned i = 0; i < c->policy.n_rungs; i++)
					fprintf(o->f, "%s%u@%g", i ? ", " : " ", c->policy.rung[i].workers,
						c->policy.rung[i].ghz);
			} else {
				fprintf(o->f, "workers %u up to %u", c->policy.min_workers,
					c->policy.max_workers ? c->policy.max_workers : c->n);
			}
			fputc('\n', o->f);
		}
		fprintf(o->f, "# load  offered  achieved      p50us     p99us    p999us    meanus "
			"stolen     irqs  order%s%s\n", c->alloc ? "  cores  batch" : "",
			c->real ? "  genlate_us" : "");
		return;
	}
	fprintf(o->f, "{\"tool\": \"fp-vsim\", \"version\": 1,\n \"command\": \"");
	for (int i = 0; i < argc; i++) {
		for (const char *p = argv[i]; *p; p++)
			fprintf(o->f, (*p == '"' || *p == '\\') ? "\\%c" : "%c", *p);
		if (i + 1 < argc)
			fputc(' ', o->f);
	}
	fprintf(o->f, "\",\n \"config\": {\"world\": \"%s\", \"workers\": %u, \"sched\": \"%s\", "
		"\"victim\": \"%s\", \"notify\": \"%s\", \"dist\": \"%s\", \"mean_service_us\": %g, "
		"\"requests\": %llu, \"warmup\": %g, \"flows\": %u, \"batch\": %u, \"seed\": %llu, "
		"\"slo_mult\": %g, \"costs\": {", c->real ? "real" : c->full ? "full" : "virtual",
		c->n, sched_name(c),
		c->victim == FP_SHUF_VICTIM_OLDEST ? "oldest" : "random",
		c->notify == VS_NOTIFY_IPI ? "ipi" : "poll", c->dist, c->mean_us,
		(unsigned long long)c->requests, c->warmup, c->flows, c->batch,
		(unsigned long long)c->seed, c->slo_mult);
	for (unsigned i = 0; i < vs_n_cost_names; i++)
		fprintf(o->f, "%s\"%s\": %g", i ? ", " : "", vs_cost_names[i].name,
			*(const double *)(const void *)((const char *)&c->costs + vs_cost_names[i].off));
	fputc('}', o->f);
	if (c->full)
		fprintf(o->f, ", \"app\": \"%s\"", c->app == VS_APP_KV ? "kv" : "spin");
	if (c->app == VS_APP_KV)
		fprintf(o->f, ", \"keys\": %llu", (unsigned long long)c->kv_keys);
	if (c->alloc)
		fprintf(o->f, ", \"alloc\": {\"homes\": %u, \"burstable\": %u, \"interval_us\": %g, "
			"\"spin_us\": %g}", c->homes, c->n - c->homes, c->alloc_us, c->spin_us);
	if (c->shift_ms > 0)
		fprintf(o->f, ", \"shift\": {\"low\": %g, \"high\": %g, \"phase_ms\": %g}",
			c->shift_lo, c->shift_hi, c->shift_ms);
	if (c->window_us > 0)
		fprintf(o->f, ", \"window_us\": %g", c->window_us);
	fprintf(o->f, ", \"ghz\": %g, \"nominal_ghz\": %g, \"slo_us\": %g", c->ghz,
		c->nominal_ghz, slo_us(c));
	if (c->has_pattern) {
		fprintf(o->f, ", \"pattern\": {\"spec\": \"");
		for (const char *p = c->pattern_spec; *p; p++)
			fprintf(o->f, (*p == '"' || *p == '\\') ? "\\%c" : "%c", *p);
		fprintf(o->f, "\", \"duration_s\": %g}", c->pattern.duration_s);
	}
	if (c->ctl) {
		const struct ctl_policy *p = &c->policy;

		fprintf(o->f, ", \"ctl\": {\"interval_ms\": %u, \"delay_max_us\": %g, "
			"\"up_ewma\": %u, \"down_ewma\": %u, \"idle_margin\": %g, "
			"\"min_workers\": %u, \"max_workers\": %u, \"down_hold_ms\": %u, "
			"\"ladder\": [", p->interval_ms, p->delay_max_us, p->up_ewma, p->down_ewma,
			p->idle_margin, p->min_workers, p->max_workers, p->down_hold_ms);
		for (unsigned i = 0; i < p->n_rungs; i++)
			fprintf(o->f, "%s[%u, %g]", i ? ", " : "", p->rung[i].workers, p->rung[i].ghz);
		fprintf(o->f, "]}");
	}
	fprintf(o->f, "},\n \"points\": [");
}

/* One point at @load; 0, or the run's -errno. */
static int point(struct vs_config *c, double load, struct vs_result *res)
{
	struct vs_run r;
	int rc;

	c->load = load;
	rc = vs_run_setup(&r, c);
	if (rc)
		return rc;
	if (c->full) {
		char err[300];

		if ((rc = vs_full(&r, res, err, sizeof(err))))
			fprintf(stderr, "fp-vsim: --full: %s\n", err);
	} else {
		rc = c->real ? vs_real(&r) : vs_virtual(&r);
		if (!rc)
			vs_collect(&r, res);
	}
	vs_run_free(&r);
	return rc;
}

static void progress(const struct vs_config *c, const struct vs_result *r, bool quiet)
{
	if (quiet)
		return;
	fprintf(stderr, "fp-vsim: %s n=%u load %.3f: p99 %.1f us, %llu steals\n", sched_name(c),
		c->n, r->load, (double)r->s.p99 / 1000.0, (unsigned long long)r->steals);
}

static void write_calibration(const char *path, const struct vs_config *c,
			      const struct vs_result *r)
{
	FILE *f = fopen(path, "w");
	time_t now = time(NULL);
	char when[64];

	if (!f) {
		fprintf(stderr, "fp-vsim: --calibrate: cannot write %s: %s\n", path, strerror(errno));
		exit(2);
	}
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&now));
	if (c->full) {
		fprintf(f, "# fp-vsim --full: the real code's own time per round on this machine, "
			"%s: %u workers, %s, %s S=%g us, load %.3f, %llu requests\n", when, c->n,
			sched_name(c), c->dist, c->mean_us, c->load,
			(unsigned long long)c->requests);
		fprintf(f, "# least squares over %llu rounds (%llu longer than 50 us left out as "
			"stalls) of ns ~ poll + rx x frames received + tx x bursts sent + steal x "
			"flows stolen (R^2 %.3f); the virtual NIC's copies are in rx and tx\n",
			(unsigned long long)r->fit_rounds, (unsigned long long)r->fit_stalls,
			r->fit_r2);
		if (c->app == VS_APP_KV)
			fprintf(f, "# fp-kv's handler (evl and the protocol, left out of the rounds "
				"above) ran %llu commands, %.0f ns each on this machine's TSC: its "
				"own time is --mean-us %.3f\n", (unsigned long long)r->app_cmds,
				r->app_ns_per_cmd, r->app_ns_per_cmd / 1000.0);
		fprintf(f, "poll_ns=%.1f\nrx_ns=%.1f\ntx_ns=%.1f\nsteal_ns=%.1f\n",
			r->measured.poll_ns, r->measured.rx_ns, r->measured.tx_ns,
			r->measured.steal_ns);
		fclose(f);
		return;
	}
	fprintf(f, "# fp-vsim cost model measured on real threads, %s: %u workers, %s, %s "
		"S=%g us, load %.3f, %llu requests\n", when, c->n, sched_name(c), c->dist,
		c->mean_us, c->load, (unsigned long long)c->requests);
	fprintf(f, "# mean time of each kind of step (ns)%s\n", c->notify == VS_NOTIFY_IPI ? "" :
		"; kick_ns and ipi_* need --notify ipi to be measured");
	for (unsigned i = 0; i < vs_n_cost_names; i++) {
		double v = *(const double *)(const void *)((const char *)&r->measured + vs_cost_names[i].off);

		if (!strcmp(vs_cost_names[i].name, "wake_ns") || !strcmp(vs_cost_names[i].name, "park_ns"))
			continue;   /* the allocator's: not measured here */
		if ((strncmp(vs_cost_names[i].name, "ipi", 3) && strcmp(vs_cost_names[i].name, "kick_ns")) ||
		    c->notify == VS_NOTIFY_IPI)
			fprintf(f, "%s=%.1f\n", vs_cost_names[i].name, v);
	}
	fclose(f);
}

enum { O_SCHED = 256, O_VICTIM, O_NOTIFY, O_MEAN, O_SWEEP, O_MAXLOAD, O_SLO, O_REQ, O_WARM,
       O_FLOWS, O_BATCH, O_SEED, O_COST, O_COSTS, O_LIST, O_REAL, O_CORES, O_CALIB, O_FORMAT,
       O_QUIET, O_ALLOC, O_HOMES, O_ALLOC_US, O_SPIN_US, O_SHIFT, O_WINDOWS, O_GHZ, O_NOMINAL,
       O_SLO_US, O_PATTERN, O_PATTERN_S, O_CTL, O_POLICY, O_FULL, O_STEAL_FORCE, O_LOSS,
       O_REORDER, O_IPI_AFTER, O_STALLS, O_FLUSH, O_APP, O_KEYS };

static const struct option opts[] = {
	{"workers", required_argument, 0, 'n'}, {"sched", required_argument, 0, O_SCHED},
	{"victim", required_argument, 0, O_VICTIM}, {"notify", required_argument, 0, O_NOTIFY},
	{"dist", required_argument, 0, 'd'}, {"mean-us", required_argument, 0, O_MEAN},
	{"load", required_argument, 0, 'l'}, {"sweep", required_argument, 0, O_SWEEP},
	{"max-load", no_argument, 0, O_MAXLOAD}, {"slo-mult", required_argument, 0, O_SLO},
	{"requests", required_argument, 0, O_REQ}, {"warmup", required_argument, 0, O_WARM},
	{"flows", required_argument, 0, O_FLOWS}, {"batch", required_argument, 0, O_BATCH},
	{"seed", required_argument, 0, O_SEED}, {"cost", required_argument, 0, O_COST},
	{"costs", required_argument, 0, O_COSTS}, {"list-costs", no_argument, 0, O_LIST},
	{"real", no_argument, 0, O_REAL}, {"cores", required_argument, 0, O_CORES},
	{"full", no_argument, 0, O_FULL}, {"steal-force", no_argument, 0, O_STEAL_FORCE},
	{"loss", required_argument, 0, O_LOSS}, {"reorder", required_argument, 0, O_REORDER},
	{"stalls", required_argument, 0, O_STALLS}, {"flush-us", required_argument, 0, O_FLUSH},
	{"ipi-after-us", required_argument, 0, O_IPI_AFTER},
	{"app", required_argument, 0, O_APP}, {"keys", required_argument, 0, O_KEYS},
	{"calibrate", required_argument, 0, O_CALIB}, {"format", required_argument, 0, O_FORMAT},
	{"quiet", no_argument, 0, O_QUIET}, {"alloc", no_argument, 0, O_ALLOC},
	{"homes", required_argument, 0, O_HOMES}, {"alloc-us", required_argument, 0, O_ALLOC_US},
	{"spin-us", required_argument, 0, O_SPIN_US}, {"shift", required_argument, 0, O_SHIFT},
	{"windows", required_argument, 0, O_WINDOWS}, {"ghz", required_argument, 0, O_GHZ},
	{"nominal-ghz", required_argument, 0, O_NOMINAL}, {"slo-us", required_argument, 0, O_SLO_US},
	{"pattern", required_argument, 0, O_PATTERN}, {"pattern-s", required_argument, 0, O_PATTERN_S},
	{"ctl", no_argument, 0, O_CTL}, {"policy", required_argument, 0, O_POLICY},
	{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
};

int main(int argc, char **argv)
{
	struct vs_config c = {
		.n = 16, .sched = VS_SCHED_STEAL, .dist = "exp", .mean_us = 10, .load = 0.5,
		.requests = 200000, .warmup = 0.05, .flows = 100000, .batch = 64, .seed = 1,
		.slo_mult = 10, .homes = 1, .alloc_us = 5, .spin_us = 2, .ipi_after_us = -1,
	};
	double sw_a = 0, sw_b = 0, sw_step = 0;
	bool sweep = false, max_load = false, quiet = !isatty(2), json = false, flows_set = false;
	bool dist_set = false, mean_set = false, keys_set = false;
	const char *outpath = NULL, *calib = NULL, *policy = NULL;
	double pattern_s = 8;
	struct out o = {0};
	struct vs_result res;
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "n:d:l:o:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'n': c.n = (unsigned)num("workers", optarg, 1, VS_MAX_CORES); break;
		case O_SCHED:
			if (!strcmp(optarg, "part")) c.sched = VS_SCHED_PART;
			else if (!strcmp(optarg, "steal")) c.sched = VS_SCHED_STEAL;
			else die("--sched: '%s' is not part or steal", optarg);
			break;
		case O_VICTIM:
			if (!strcmp(optarg, "random")) c.victim = FP_SHUF_VICTIM_RANDOM;
			else if (!strcmp(optarg, "oldest")) c.victim = FP_SHUF_VICTIM_OLDEST;
			else die("--victim: '%s' is not random or oldest", optarg);
			break;
		case O_NOTIFY:
			if (!strcmp(optarg, "poll")) c.notify = VS_NOTIFY_POLL;
			else if (!strcmp(optarg, "ipi")) c.notify = VS_NOTIFY_IPI;
			else die("--notify: '%s' is not poll or ipi", optarg);
			break;
		case 'd':
			if (strcmp(optarg, "det") && strcmp(optarg, "exp") && strcmp(optarg, "bimodal1") &&
			    strcmp(optarg, "bimodal2"))
				die("--dist: '%s' is not det, exp, bimodal1 or bimodal2", optarg);
			c.dist = optarg;
			dist_set = true;
			break;
		case O_MEAN:
			c.mean_us = num("mean-us", optarg, 0.01, 1e6);
			mean_set = true;
			break;
		case 'l': c.load = num("load", optarg, 0.001, 0.999); break;
		case O_SWEEP:
			if (sscanf(optarg, "%lf:%lf:%lf", &sw_a, &sw_b, &sw_step) != 3 || !(sw_a > 0) ||
			    !(sw_b >= sw_a) || !(sw_b < 1) || !(sw_step > 0))
				die("--sweep: '%s' is not A:B:STEP with 0 < A <= B < 1", optarg);
			sweep = true;
			break;
		case O_MAXLOAD: max_load = true; break;
		case O_SLO: c.slo_mult = num("slo-mult", optarg, 1, 1e6); break;
		case O_REQ: c.requests = (uint64_t)num("requests", optarg, 100, 1e8); break;
		case O_WARM: c.warmup = num("warmup", optarg, 0, 0.9); break;
		case O_FLOWS:
			c.flows = (uint32_t)num("flows", optarg, 1, 1 << 24);
			flows_set = true;
			break;
		case O_BATCH: c.batch = (unsigned)num("batch", optarg, 1, 1024); break;
		case O_SEED: c.seed = (uint64_t)num("seed", optarg, 0, 1e15); break;
		case O_COST: {
			char err[200];

			if (vs_cost_set(&c.costs, optarg, strlen(optarg), err, sizeof(err)))
				die("--cost: %s", err);
			break;
		}
		case O_COSTS: read_costs(&c.costs, optarg); break;
		case O_LIST:
			for (unsigned i = 0; i < vs_n_cost_names; i++)
				printf("%-14s %s\n", vs_cost_names[i].name, vs_cost_names[i].help);
			return 0;
		case O_REAL: c.real = true; break;
		case O_FULL: c.full = true; break;
		case O_STEAL_FORCE: c.steal_force = true; break;
		case O_APP:
			if (!strcmp(optarg, "spin")) c.app = VS_APP_SPIN;
			else if (!strcmp(optarg, "kv")) c.app = VS_APP_KV;
			else die("--app: '%s' is not spin or kv", optarg);
			break;
		case O_KEYS:
			c.kv_keys = (uint64_t)num("keys", optarg, 1, 1e7);
			keys_set = true;
			break;
		case O_IPI_AFTER: c.ipi_after_us = num("ipi-after-us", optarg, 0, 1e6); break;
		case O_FLUSH: c.flush_us = num("flush-us", optarg, 0, 1e6); break;
		case O_LOSS: c.loss = num("loss", optarg, 0, 0.5); break;
		case O_REORDER: c.reorder = num("reorder", optarg, 0, 0.5); break;
		case O_STALLS:
			vs_stalls_free(&stalls);
			read_stalls(optarg);
			c.stalls = &stalls;
			break;
		case O_CORES: parse_cores(&c, optarg); break;
		case O_CALIB: calib = optarg; break;
		case O_FORMAT:
			if (!strcmp(optarg, "json")) json = true;
			else if (strcmp(optarg, "text")) die("--format: '%s' is not text or json", optarg);
			break;
		case O_QUIET: quiet = true; break;
		case O_ALLOC: c.alloc = true; break;
		case O_HOMES: c.homes = (unsigned)num("homes", optarg, 1, VS_MAX_CORES); break;
		case O_ALLOC_US: c.alloc_us = num("alloc-us", optarg, 0.1, 1e6); break;
		case O_SPIN_US: c.spin_us = num("spin-us", optarg, 0, 1e6); break;
		case O_SHIFT:
			if (sscanf(optarg, "%lf:%lf:%lf", &c.shift_lo, &c.shift_hi, &c.shift_ms) != 3 ||
			    !(c.shift_lo >= 0.001 && c.shift_lo < 1) ||
			    !(c.shift_hi >= 0.001 && c.shift_hi < 1) ||
			    !(c.shift_ms >= 0.01 && c.shift_ms <= 10000))
				die("--shift: '%s' is not LO:HI:MS with loads in [0.001, 1) and MS in "
				    "[0.01, 10000]", optarg);
			break;
		case O_WINDOWS: c.window_us = num("windows", optarg, 1, 1e7); break;
		case O_GHZ: c.ghz = num("ghz", optarg, 0.1, 10); break;
		case O_NOMINAL: c.nominal_ghz = num("nominal-ghz", optarg, 0.1, 10); break;
		case O_SLO_US: c.slo_us = num("slo-us", optarg, 0.001, 1e9); break;
		case O_PATTERN: c.pattern_spec = optarg; break;
		case O_PATTERN_S: pattern_s = num("pattern-s", optarg, 0.001, 3600); break;
		case O_CTL: c.ctl = true; break;
		case O_POLICY: policy = optarg; break;
		case 'o': outpath = optarg; break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad = 1; break;
		}
	}
	if (bad || optind < argc)
		die("unexpected argument%s%s", optind < argc ? " " : "", optind < argc ? argv[optind] : "");
	if (sweep && max_load)
		die("--sweep and --max-load do not go together");
	if (c.full && (c.real || c.alloc || c.ctl || c.pattern_spec || c.shift_ms > 0 ||
		       c.window_us > 0 || c.ghz || c.nominal_ghz))
		die("--full runs the real workers at one load in virtual time: not with --real, "
		    "--alloc, --ctl, --pattern, --shift, --windows or --ghz");
	if (c.ipi_after_us >= 0 && !(c.full && c.notify == VS_NOTIFY_IPI))
		die("--ipi-after-us is the runtime's: with --full --notify ipi");
	if (c.ipi_after_us < 0)
		c.ipi_after_us = 10;   /* the runtime's default */
	if (c.full && c.notify == VS_NOTIFY_IPI && c.sched != VS_SCHED_STEAL)
		die("--full --notify ipi: the workers' interrupts are --sched steal's");
	if (c.full && c.victim != FP_SHUF_VICTIM_RANDOM)
		die("--full: the workers' shuffle layer picks its victims at random (ZygOS's)");
	if (c.flush_us > 0 && !(c.full && c.sched == VS_SCHED_PART))
		die("--flush-us is the runtime's partitioned round's: with --full --sched part");
	if (!c.full && (c.steal_force || c.loss > 0 || c.reorder > 0 || c.stalls))
		die("--steal-force, --loss, --reorder and --stalls are --full's (the real stack's "
		    "wire and cores)");
	if (c.steal_force && (c.sched != VS_SCHED_STEAL || c.n < 2))
		die("--steal-force: every batch on a thief needs --sched steal and 2 workers or "
		    "more");
	if (c.full && !flows_set)
		c.flows = 1024;
	if (c.app == VS_APP_KV && !c.full)
		die("--app kv runs fp-kv itself: with --full");
	if (keys_set && c.app != VS_APP_KV)
		die("--keys is fp-kv's key space: with --full --app kv");
	if (c.app == VS_APP_KV) {
		if (!keys_set)
			c.kv_keys = 10000;   /* mutilate's and fp-loadgen's default */
		if (!dist_set)
			c.dist = "det";
		if (!mean_set)
			c.mean_us = 0.5;
	}
	if (c.alloc && c.real)
		die("--alloc runs in virtual time only (the real allocator is another program)");
	if (c.alloc && c.sched != VS_SCHED_STEAL)
		die("--alloc needs --sched steal: burstable workers only steal");
	if (c.alloc && c.homes >= c.n)
		die("--homes: %u of %u workers leaves none burstable", c.homes, c.n);
	if (!c.alloc && c.homes != 1)
		die("--homes needs --alloc");
	if (c.shift_ms > 0 && (c.real || sweep || max_load))
		die("--shift is one virtual run: not with --real, --sweep or --max-load");
	if (c.window_us > 0 && c.real)
		die("--windows runs in virtual time only");
	if (!c.nominal_ghz)
		c.nominal_ghz = 2.4;
	if (!c.ghz)
		c.ghz = c.nominal_ghz;
	if (c.pattern_spec) {
		char err[300];

		if (lg_pattern_parse(&c.pattern, c.pattern_spec, pattern_s, c.seed, err, sizeof(err)))
			die("--pattern: %s", err);
		c.has_pattern = true;
		if (c.shift_ms > 0 || c.real || sweep || max_load)
			die("--pattern is one virtual run: not with --shift, --real, --sweep or --max-load");
		c.load = c.pattern.hi * c.mean_us / 1e6 / c.n;   /* the label: its peak */
	}
	if (policy && !c.ctl)
		die("--policy needs --ctl");
	ctl_policy_default(&c.policy);
	if (policy)
		read_policy(&c, policy);
	if (c.ctl) {
		if (c.real || c.alloc || c.sched != VS_SCHED_PART)
			die("--ctl runs IX's partitioned workers in virtual time: add --sched part "
			    "(not with --real or --alloc)");
		if (c.policy.n_rungs && c.ghz != c.nominal_ghz)
			die("--ghz and a ladder: the ladder sets the clock");
		for (unsigned i = 0; i < c.policy.n_rungs; i++)
			if (c.policy.rung[i].workers > c.n)
				die("--policy: the ladder's rung %u wants %u workers, the run has %u (-n)",
				    i + 1, c.policy.rung[i].workers, c.n);
		if (!c.policy.n_rungs && c.policy.min_workers > c.n)
			die("--policy: min_workers %u is more than the run's %u workers (-n)",
			    c.policy.min_workers, c.n);
	}
	if (c.shift_ms > 0)
		c.load = c.shift_hi;   /* the point's label: the high phase */
	if (c.real) {
		if (!c.n_cores_listed)
			for (unsigned i = 0; i <= c.n; i++)
				c.cores[i] = (int)i;
		else if (c.n_cores_listed != c.n + 1)
			die("--cores: %u listed, need %u (each worker, then the generator)",
			    c.n_cores_listed, c.n + 1);
		if (fp_tsc_calibrate(0) == -EIO)
			die("the TSC does not advance here: --real needs it");
	} else if (calib && c.full) {
		if (fp_tsc_calibrate(0) == -EIO)   /* the real code's own time, in ns */
			die("the TSC does not advance here: --calibrate needs it");
	} else if (calib) {
		die("--calibrate measures real threads or the real code: add --real or --full");
	}

	o.json = json;
	o.f = stdout;
	if (outpath && !(o.f = fopen(outpath, "w")))
		die("-o: cannot write %s: %s", outpath, strerror(errno));
	print_header(&o, &c, argc, argv);

	unsigned errors = 0;
	double found = -1;
	if (max_load) {
		/* Bisection on the load, the same draws at every probe (qsim --max-load). */
		double lo = 0.01, hi = 0.99;

		for (int it = 0; it < 12; it++) {
			double mid = (lo + hi) / 2;
			int rc = point(&c, mid, &res);

			if (rc)
				die("run failed: %s", strerror(-rc));
			progress(&c, &res, quiet);
			free(res.win);
			errors += res.order_errors;
			if ((double)res.s.p99 / 1000.0 <= slo_us(&c)) {
				lo = mid;
				found = mid;
			} else {
				hi = mid;
			}
		}
	} else {
		double l = sweep ? sw_a : c.load, end = sweep ? sw_b + 1e-9 : c.load;

		for (; l <= end; l += sweep ? sw_step : 1) {
			int rc = point(&c, l, &res);

			if (rc == -EINVAL && c.real)
				die("--cores: a core is not in this process's affinity mask");
			if (rc)
				die("run failed: %s", strerror(-rc));
			progress(&c, &res, quiet);
			print_point(&o, &c, &res);
			free(res.win);
			res.win = NULL;
			errors += res.order_errors;
			if (!sweep)
				break;
		}
	}
	if (json && max_load)
		fprintf(o.f, "],\n \"max_load\": %.4f}\n", found < 0 ? 0 : found);
	else if (json)
		fprintf(o.f, "],\n \"max_load\": null}\n");
	else if (max_load)
		fprintf(o.f, "max_load %.4f (p99 <= %g us)\n", found < 0 ? 0 : found, slo_us(&c));
	if (calib)
		write_calibration(calib, &c, &res);
	if (o.f != stdout)
		fclose(o.f);
	return errors ? 1 : 0;
}
