/* Logs go to stderr, results to stdout. Multi-rank runs print progress from
 * rank 0 only; every error line names the rank when there is more than one. */
#ifndef PP_LOG_H
#define PP_LOG_H

#include <stddef.h>

/* Tool name and rank that prefix every line ("pp-train" or "pp-train[3]"). */
void log_set_prefix(const char *tool, int rank, int world);
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* 1234567.8 -> "1,234,568" */
void log_thousands(char *buf, size_t n, double v);
/* seconds -> "1h02m", "9m43s", "12s" */
void log_duration(char *buf, size_t n, double seconds);

#endif
