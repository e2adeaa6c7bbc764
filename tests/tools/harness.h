/* Minimal test harness. Each check prints one line that tests/run.sh counts:
 *   PASS: name      FAIL: name: why      SKIP: name: reason
 * A test binary exits non-zero when any check failed. */
#ifndef PP_TEST_HARNESS_H
#define PP_TEST_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int th_failed, th_passed;

static inline void th_report(int ok, const char *name, const char *fmt, ...)
{
	if (ok) {
		th_passed++;
		printf("PASS: %s\n", name);
	} else {
		th_failed++;
		printf("FAIL: %s: ", name);
		va_list ap;
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
}

static inline void th_skip(const char *name, const char *reason)
{
	printf("SKIP: %s: %s\n", name, reason);
	fflush(stdout);
}

/* CHECK(cond, name, fmt, ...): one counted assertion */
#define CHECK(cond, name, ...) th_report(!!(cond), name, __VA_ARGS__)
#define TH_EXIT()              return th_failed ? 1 : 0

#endif
