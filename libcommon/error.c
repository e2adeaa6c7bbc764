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
	snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old);
	return e->code;
}
