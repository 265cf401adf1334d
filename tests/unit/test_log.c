/* test_log.c: level filtering, level parsing, line format and truncation. */
#include <stdio.h>
#include <string.h>

#include <flowplane/log.h>

#include "harness.h"

static char last_line[2048];
static int n_lines;

static void capture(enum fp_log_level lvl, const char *line)
{
	(void)lvl;
	snprintf(last_line, sizeof(last_line), "%s", line);
	n_lines++;
}

static void levels_filter(void **state)
{
	(void)state;
	fp_log_set_sink(capture);
	fp_log_max = FP_LOG_WARN;
	n_lines = 0;
	log_info("hidden %d", 1);
	log_debug("hidden");
	assert_int_equal(n_lines, 0);
	log_warn("shown %s", "yes");
	assert_int_equal(n_lines, 1);
	assert_non_null(strstr(last_line, " W shown yes\n"));
	log_err("bad");
	assert_non_null(strstr(last_line, " E bad\n"));
	fp_log_max = FP_LOG_INFO;
	fp_log_set_sink(NULL);
}

static void parse_level(void **state)
{
	(void)state;
	enum fp_log_level l;
	assert_int_equal(fp_log_parse_level("debug", &l), 0);
	assert_int_equal(l, FP_LOG_DEBUG);
	assert_int_equal(fp_log_parse_level("err", &l), 0);
	assert_int_equal(l, FP_LOG_ERR);
	assert_int_equal(fp_log_parse_level("verbose", &l), -EINVAL);
	assert_int_equal(fp_log_parse_level("", &l), -EINVAL);
}

/* A message longer than the line buffer is cut, and the line still ends in a newline. */
static void long_message_truncated(void **state)
{
	(void)state;
	char big[3000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	fp_log_set_sink(capture);
	log_err("%s", big);
	size_t n = strlen(last_line);
	assert_true(n < 1024);
	assert_int_equal(last_line[n - 1], '\n');
	fp_log_set_sink(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(levels_filter),
		cmocka_unit_test(parse_level),
		cmocka_unit_test(long_message_truncated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
