#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pp_errorf(pp_err *e, int code, const char *fmt, ...)
{
	if (!e)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	e->code = code;
	return code;
}

int pp_err_prefix(pp_err *e, const char *fmt, ...)
{
	if (!e)
		return PP_ERUNTIME;
	char pre[512], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	/* the prefix first, then as much of the old message as fits */
	size_t n = strlen(pre);
	if (n > sizeof e->msg - 3)
		n = sizeof e->msg - 3;
	memcpy(e->msg, pre, n);
	memcpy(e->msg + n, ": ", 2);
	size_t room = sizeof e->msg - n - 3, len = strnlen(old, sizeof old);
	if (len > room)
		len = room;
	memcpy(e->msg + n + 2, old, len);
	e->msg[n + 2 + len] = 0;
	return e->code;
}

const char *pp_shape_str(char *buf, size_t n, int ndim, const int64_t *dims)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}
