/* micro.c: base-library micro-benchmarks (rings, pool, timers, histogram), ns per op. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flowplane/clock.h>

#include "bench.h"

int bench_pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

int bench_other_cpu(const struct bench_opts *o)
{
	int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return n > 1 ? (o->cpu + 1) % n : -1;
}

static int reps_for(const struct bench_opts *o) { return o->quick ? 3 : 15; }

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_case(const struct bench_opts *o, const char *name, bench_fn fn, void *arg,
		  uint64_t n_ops)
{
	double samples[64];
	int reps = reps_for(o);

	if (o->only && !strstr(name, o->only))
		return -1;
	if (o->quick)
		n_ops = n_ops / 16 + 1;
	fn(arg, n_ops); /* warm caches, page in memory, train predictors */
	for (int i = 0; i < reps; i++) {
		uint64_t t0 = fp_rdtsc();
		fn(arg, n_ops);
		uint64_t t1 = fp_rdtsc();
		samples[i] = (double)fp_cycles_to_ns(t1 - t0) / (double)n_ops;
	}
	qsort(samples, (size_t)reps, sizeof(samples[0]), cmp_double);
	double med = samples[reps / 2];
	printf("%-50s %8.2f ns/op   (min %.2f, max %.2f, %d runs of %llu ops)\n", name, med,
	       samples[0], samples[reps - 1], reps, (unsigned long long)n_ops);
	fflush(stdout);
	return med;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: fp-micro [--quick] [--only SUBSTRING] [--cpu N]\n"
		   "  Times the base library's hot operations and prints the median ns per\n"
		   "  operation of repeated runs, from a thread pinned to one CPU (a second\n"
		   "  thread, for cross-core cases, runs on the next CPU).\n"
		   "  --quick        fewer and shorter runs (a smoke test, not a figure)\n"
		   "  --only S       run only the cases whose name contains S\n"
		   "  --cpu N        CPU to pin the benchmark thread to (default 0)\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "only", required_argument, NULL, 'o' },
		{ "cpu", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench_opts o = { 0 };
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "qo:c:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'q': o.quick = 1; break;
		case 'o': o.only = optarg; break;
		case 'c': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end || v < 0 || v >= CPU_SETSIZE) {
				fprintf(stderr, "fp-micro: --cpu wants a CPU number, not '%s'\n", optarg);
				return 2;
			}
			o.cpu = (int)v;
			break;
		}
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "fp-micro: unknown or incomplete option '%s' (try --help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fp-micro: unexpected argument '%s' (try --help)\n", argv[optind]);
		return 2;
	}
	if (bench_pin(o.cpu)) {
		fprintf(stderr, "fp-micro: cannot run on CPU %d (is it online and allowed?)\n", o.cpu);
		return 2;
	}
	int rc = fp_tsc_calibrate(50000);
	printf("# TSC %.3f GHz%s\n", (double)fp_tsc.hz / 1e9,
	       rc == -ENODEV ? " (not reported invariant)" : "");
	bench_ring(&o);
	bench_pool(&o);
	bench_timer(&o);
	bench_hist(&o);
	bench_steer(&o);
	bench_thread(&o);
	return 0;
}
