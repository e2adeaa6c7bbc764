/* A merged run (merge.h) as one Chrome Trace Event file, the JSON that
 * Perfetto (ui.perfetto.dev) and TensorBoard's trace viewer load.
 *
 * One process per rank, named "pp0 dp1 tp0 host:device" and sorted by
 * pipeline stage; one thread per stream (compute, send, recv, collective,
 * io). Events are complete ("X") events in microseconds (ts, dur: ns / 1000
 * with three decimals), which nest strictly on each thread: events of one
 * stream that overlap without nesting (nonblocking gradient buckets in
 * flight together) go to extra threads of that stream ("collective 2").
 * Each send is joined to its receive by a flow arrow ("s" / "f" events).
 * Run facts (run id, schedule, steps, whether clocks were aligned) are in
 * "otherData". */
#ifndef PP_PROFILE_TRACE_H
#define PP_PROFILE_TRACE_H

#include "merge.h"

/* Writes the trace to path; "-" is stdout; a name ending in ".gz" is
 * written gzip-compressed. Errors name the file. */
int prof_trace_write(const prof_run *run, const char *path, pp_err *e);

#endif
