/* max_runtime: when to stop so that the last checkpoint is saved before the
 * wall clock runs out. The clock counts from the start of the process (as
 * the job's time limit counts from the start of the job, not of training).
 * The run stops at the end of a step once the time left is less than twice
 * its slowest step plus its slowest checkpoint save so far: room for the
 * step under way elsewhere and for the save. */
#ifndef PP_DEADLINE_H
#define PP_DEADLINE_H

#include <stdbool.h>

typedef struct {
	double limit;      /* seconds; 0 = none */
	double start;      /* the process's start, on the monotonic clock */
	double worst_step; /* slowest step so far */
	double worst_save; /* slowest save so far */
} run_deadline;

void deadline_init(run_deadline *d, double limit_s);
/* Records a step's or a save's duration. */
void deadline_step(run_deadline *d, double seconds);
void deadline_save(run_deadline *d, double seconds);
/* Seconds since the process started. */
double deadline_elapsed(const run_deadline *d);
/* Whether to stop now (always false without a limit). */
bool deadline_near(const run_deadline *d);

#endif
