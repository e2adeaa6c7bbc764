#include "log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char prefix[64] = "pp";

void log_set_prefix(const char *tool, int rank, int world)
{
	if (world > 1)
		snprintf(prefix, sizeof prefix, "%s[%d]", tool, rank);
	else
		snprintf(prefix, sizeof prefix, "%s", tool);
}

static void vlog(const char *kind, const char *fmt, va_list ap)
{
	char line[2048];
	vsnprintf(line, sizeof line, fmt, ap);
	fprintf(stderr, "%s: %s%s\n", prefix, kind, line);
	fflush(stderr);
}

void log_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("", fmt, ap);
	va_end(ap);
}

void log_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("error: ", fmt, ap);
	va_end(ap);
}

void log_thousands(char *buf, size_t n, double v)
{
	char digits[32];
	snprintf(digits, sizeof digits, "%.0f", v < 0 ? 0 : v);
	size_t len = strlen(digits), o = 0;
	for (size_t i = 0; i < len && o + 2 < n; i++) {
		if (i && (len - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = 0;
}

void log_duration(char *buf, size_t n, double s)
{
	if (!isfinite(s) || s < 0)
		s = 0;
	long t = lround(s);
	if (t >= 3600)
		snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
	else if (t >= 60)
		snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, n, "%lds", t);
}
