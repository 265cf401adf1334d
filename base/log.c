/* log.c: leveled logging; one formatted line per message, written with one write(). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flowplane/log.h>

enum fp_log_level fp_log_max = FP_LOG_INFO;

static fp_log_sink_fn log_sink;
static const char level_chars[] = "EWID";
static const char *const level_names[] = { "err", "warn", "info", "debug" };

int fp_log_parse_level(const char *s, enum fp_log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum fp_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void fp_log_set_sink(fp_log_sink_fn sink) { log_sink = sink; }

void fp_log_emit(enum fp_log_level lvl, const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	va_list ap;
	int n, m;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = snprintf(line, sizeof(line), "[%6ld.%06ld] %c ", (long)ts.tv_sec,
		     ts.tv_nsec / 1000, level_chars[lvl & 3]);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	/* A truncated message still ends in a newline. */
	n += m < 0 ? 0 : (m > (int)sizeof(line) - n - 2 ? (int)sizeof(line) - n - 2 : m);
	line[n++] = '\n';
	line[n] = '\0';
	if (log_sink) {
		log_sink(lvl, line);
		return;
	}
	/* One write() so lines from several workers do not interleave. */
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}
