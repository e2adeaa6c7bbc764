#include "deadline.h"
#include "../base/clock.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The process's age in seconds: /proc/self/stat's start time (clock ticks
 * after boot) against the boot-time clock; 0 when it cannot be read. */
static double process_age(void)
{
	char buf[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the name may hold spaces */
	unsigned long long start = 0;
	/* after ") ": state is field 3, starttime field 22 */
	if (!p ||
	    sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
		   &start) != 1)
		return 0;
	struct timespec up;
	clock_gettime(CLOCK_BOOTTIME, &up);
	double age = (double)up.tv_sec + 1e-9 * (double)up.tv_nsec -
		     (double)start / (double)sysconf(_SC_CLK_TCK);
	return age > 0 ? age : 0;
}

void deadline_init(run_deadline *d, double limit_s)
{
	memset(d, 0, sizeof *d);
	d->limit = limit_s;
	d->start = clock_seconds() - process_age();
}

void deadline_step(run_deadline *d, double s)
{
	if (s > d->worst_step)
		d->worst_step = s;
}

void deadline_save(run_deadline *d, double s)
{
	if (s > d->worst_save)
		d->worst_save = s;
}

double deadline_elapsed(const run_deadline *d) { return clock_seconds() - d->start; }

bool deadline_near(const run_deadline *d)
{
	return d->limit > 0 && d->limit - deadline_elapsed(d) < 2 * d->worst_step + d->worst_save;
}
