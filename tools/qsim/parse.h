/* parse.h: pure parsers for qsim's input files (empirical service times, arrival traces). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Limits that bound what a parser allocates, whatever the input claims. */
#define QS_PARSE_MAX_LINE 1024u       /* bytes in one line, newline excluded */
#define QS_PARSE_MAX_ROWS (1u << 25)  /* data lines in one file */

/* Where and why a parse failed: @line counts from 1 (0: not tied to a line). */
struct qs_perr {
	unsigned line;
	char msg[96];
};

/*
 * An empirical service-time distribution: @n values (microseconds, as in the file) with
 * cumulative probabilities @cum (cum[n-1] == 1), so a uniform draw u picks the first i
 * with u <= cum[i]. @mean is the weighted mean of the values.
 */
struct qs_empirical {
	size_t n;
	double *val;
	double *cum;
	double mean;
};

/*
 * An arrival trace: @n arrivals at times @t (microseconds, non-decreasing), each with a
 * service time @svc (microseconds; NULL where the file gives none) and a flow id @flow
 * (NULL where the file gives none).
 */
struct qs_trace {
	size_t n;
	double *t;
	double *svc;
	uint32_t *flow;
};

/*
 * Parse an empirical distribution from @buf[0..len): one value per line, "VALUE [WEIGHT]",
 * values >= 0, weights >= 0 (default 1), '#' starts a comment, blank lines are skipped.
 * Returns 0 and fills @out (release with qs_empirical_free()), -EINVAL with @err set, or
 * -ENOMEM. Touches no file and no global state, so a fuzzer can drive it.
 */
int qs_parse_empirical(const char *buf, size_t len, struct qs_empirical *out,
		       struct qs_perr *err);

/* Release what qs_parse_empirical() allocated; safe on a zeroed struct. */
void qs_empirical_free(struct qs_empirical *e);

/*
 * Parse an arrival trace from @buf[0..len): one arrival per line,
 * "ARRIVAL_US [SERVICE_US [FLOW]]", arrivals non-decreasing, every data line with the
 * same number of columns, comments and blank lines as above. Returns 0 and fills @out
 * (release with qs_trace_free()), -EINVAL with @err set, or -ENOMEM.
 */
int qs_parse_trace(const char *buf, size_t len, struct qs_trace *out, struct qs_perr *err);

/* Release what qs_parse_trace() allocated; safe on a zeroed struct. */
void qs_trace_free(struct qs_trace *t);
