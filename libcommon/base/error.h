/* Errors are values: library code fills a pp_err and returns its code; the
 * command prints it once and exits with it. */
#ifndef PP_ERROR_H
#define PP_ERROR_H

#include <stddef.h>
#include <stdint.h>

enum {
	PP_OK = 0,
	PP_ERUNTIME = 1, /* run-time failure: I/O, corrupt file, numerics */
	PP_EUSAGE = 2,   /* bad command line or config */
	PP_ESTOPPED = 75 /* stopped on a signal after saving a checkpoint (EX_TEMPFAIL: requeue) */
};

typedef struct {
	int code;
	char msg[1024];
} pp_err;

/* Sets e (if not NULL) and returns code. */
int pp_errorf(pp_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefixes an existing message: "ctx: old message". Returns e->code. */
int pp_err_prefix(pp_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A shape for a message, "[a, b]", into buf; returns buf. */
const char *pp_shape_str(char *buf, size_t n, int ndim, const int64_t *dims);

#endif
