/* Timing on the device: the marks of the op table (ops.h), which pp-train's
 * profiles read, and PP_CUDA_PROFILE=1's per-op table.
 *
 * PP_CUDA_PROFILE=1: where the compute stream's time goes, op by op.
 *
 * Every kernel launch, cuBLASLt product, cuDNN call, copy and fill of the
 * backend ends with a mark (pp_cuda_launched_, pp_cuda_copy, pp_cuda_zero):
 * an event recorded on the legacy default stream, which follows every op
 * before it. An op is charged the time between the previous mark and its
 * own, so when the GPU runs ops back to back that is the op's own time;
 * the time the GPU waits for the host (or for a transfer on another
 * stream) is charged to the op after the wait. Nothing is marked while a
 * graph records; a replayed graph is one op (decode with PP_CUDA_GRAPH=0 to
 * see its kernels). Events are read back every PROFILE_EVENTS marks, and at
 * exit the table goes to stderr: time, share, calls and time per call per
 * op name, largest first. Meant for finding the op to work on, not for
 * timing a run: the reads synchronise the device. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../optable.h"
#include "cuda.h"

#define PROFILE_EVENTS 1024
#define PROFILE_NAMES  256

typedef struct {
	char name[96];
	double ms;
	long calls;
} profile_row;

static profile_row rows[PROFILE_NAMES];
static int n_rows;
static cudaEvent_t events[PROFILE_EVENTS];
static int event_row[PROFILE_EVENTS]; /* the op that ends at event i; -1: none */
static int n_events;

/* the row of an op name, new if need be; the last row takes the names past
 * the table's size */
static int row_of(const char *name)
{
	for (int i = 0; i < n_rows; i++)
		if (!strcmp(rows[i].name, name))
			return i;
	if (n_rows == PROFILE_NAMES - 1)
		name = "(other ops)";
	snprintf(rows[n_rows].name, sizeof rows[n_rows].name, "%s", name);
	return n_rows++;
}

/* charges the time between the marks so far, and keeps the last as the
 * start of the next interval */
static void profile_read(void)
{
	if (n_events < 2)
		return;
	PP_CUDA_CHECK(cudaEventSynchronize(events[n_events - 1]));
	for (int i = 1; i < n_events; i++) {
		float ms = 0;
		PP_CUDA_CHECK(cudaEventElapsedTime(&ms, events[i - 1], events[i]));
		rows[event_row[i]].ms += ms;
		rows[event_row[i]].calls++;
	}
	cudaEvent_t last = events[n_events - 1];
	events[n_events - 1] = events[0];
	events[0] = last;
	event_row[0] = -1;
	n_events = 1;
}

void pp_cuda_profile_mark(const char *what)
{
	if (!pp_cuda.profile || pp_cuda.capturing)
		return;
	if (n_events == PROFILE_EVENTS)
		profile_read();
	/* the first mark starts the clock: what ran before it is unknown */
	event_row[n_events] = n_events ? row_of(what) : -1;
	PP_CUDA_CHECK(cudaEventRecord(events[n_events], 0));
	n_events++;
}

static int by_time(const void *a, const void *b)
{
	const profile_row *x = (const profile_row *)a, *y = (const profile_row *)b;
	return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : strcmp(x->name, y->name);
}

static void profile_report(void)
{
	profile_read();
	double total = 0;
	long calls = 0;
	for (int i = 0; i < n_rows; i++) {
		total += rows[i].ms;
		calls += rows[i].calls;
	}
	qsort(rows, (size_t)n_rows, sizeof rows[0], by_time);
	fprintf(stderr,
		PP_OPTABLE_HEADER
		" (PP_CUDA_PROFILE=1): %.3f ms of the compute stream over %ld ops, "
		"each charged the time since the op before it\n",
		total, calls);
	fprintf(stderr, "%12s %6s %9s %11s  %s\n", "ms", "%", "calls", "us/call", "op");
	for (int i = 0; i < n_rows; i++)
		if (rows[i].calls)
			fprintf(stderr, "%12.3f %5.1f%% %9ld %11.2f  %s\n", rows[i].ms,
				total > 0 ? 100 * rows[i].ms / total : 0.0, rows[i].calls,
				1e3 * rows[i].ms / (double)rows[i].calls, rows[i].name);
}

void pp_cuda_profile_start(void)
{
	for (int i = 0; i < PROFILE_EVENTS; i++)
		PP_CUDA_CHECK(cudaEventCreate(&events[i]));
	pp_cuda.profile = 1;
	atexit(profile_report);
}

/* ---- marks (ops.h) ---- */

static cudaEvent_t anchor;
static long long anchor_ns;

static long long host_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The anchor is reached between the two host readings around its record and
 * wait, on an idle device: the midpoint is its host time, to within half
 * that interval (microseconds). */
void pp_cuda_mark_anchor(void)
{
	if (!anchor)
		PP_CUDA_CHECK(cudaEventCreate(&anchor));
	PP_CUDA_CHECK(cudaDeviceSynchronize());
	long long t0 = host_ns();
	PP_CUDA_CHECK(cudaEventRecord(anchor, 0));
	PP_CUDA_CHECK(cudaEventSynchronize(anchor));
	anchor_ns = t0 + (host_ns() - t0) / 2;
}

void *pp_cuda_mark(void)
{
	if (!anchor)
		pp_cuda_mark_anchor();
	cudaEvent_t ev;
	PP_CUDA_CHECK(cudaEventCreate(&ev));
	PP_CUDA_CHECK(cudaEventRecord(ev, 0));
	return (void *)ev;
}

long long pp_cuda_mark_ns(void *mark)
{
	cudaEvent_t ev = (cudaEvent_t)mark;
	float ms = 0;
	PP_CUDA_CHECK(cudaEventSynchronize(ev));
	PP_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor, ev));
	PP_CUDA_CHECK(cudaEventDestroy(ev));
	return anchor_ns + (long long)((double)ms * 1e6);
}
