/* log.h: leveled logging to stderr for the control path (never per packet). */
#pragma once

#include <stdarg.h>

enum fp_log_level {
	FP_LOG_ERR = 0,
	FP_LOG_WARN,
	FP_LOG_INFO,
	FP_LOG_DEBUG,
};

/* Messages above this level are dropped before formatting. Default FP_LOG_INFO. */
extern enum fp_log_level fp_log_max;

/* Parse "err", "warn", "info" or "debug". Returns 0 or -EINVAL. */
int fp_log_parse_level(const char *s, enum fp_log_level *out);

/* Write one line "[  12.345678] W module: message" to the current sink. */
void fp_log_emit(enum fp_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), cold));

/* Redirect output (tests capture it); NULL restores stderr. @sink gets a formatted line. */
typedef void (*fp_log_sink_fn)(enum fp_log_level lvl, const char *line);
void fp_log_set_sink(fp_log_sink_fn sink);

#define fp_log(lvl, ...)                          \
	do {                                      \
		if ((lvl) <= fp_log_max)          \
			fp_log_emit((lvl), __VA_ARGS__); \
	} while (0)

#define log_err(...)   fp_log(FP_LOG_ERR, __VA_ARGS__)
#define log_warn(...)  fp_log(FP_LOG_WARN, __VA_ARGS__)
#define log_info(...)  fp_log(FP_LOG_INFO, __VA_ARGS__)
#define log_debug(...) fp_log(FP_LOG_DEBUG, __VA_ARGS__)
