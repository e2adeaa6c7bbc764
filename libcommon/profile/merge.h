/* A run's profiles together: every rank's file read and checked against the
 * others, the clocks aligned, and each send paired with its receive. The
 * trace writer (trace.h) and the analysis (analyze.h) read this.
 *
 * Clock alignment. Each file holds rounds of barriers at the start of its
 * window and at its end (record.h), each timed before and after on every
 * rank. A barrier releases the ranks after the last one entered, so its
 * release lies after every rank's "before" and before every rank's "after":
 * each round bounds the offset between two clocks from both sides, and the
 * middle of the bounds of all rounds of a phase is the offset at that
 * instant (within half their width: microseconds on one host, more where a
 * rank was descheduled in every round). With both phases the offset is
 * interpolated linearly in between, which also corrects a clock that runs
 * faster than the reference's. The reference is the lowest rank present. */
#ifndef PP_PROFILE_MERGE_H
#define PP_PROFILE_MERGE_H

#include "profile.h"

/* One event on the common timeline. */
typedef struct {
	int64_t start, end; /* ns, aligned to the reference clock, from the run's origin */
	const prof_event *src;
	int file;     /* index in prof_run.ranks */
	long partner; /* a send or receive: its match in prof_run.ev, or -1 */
} prof_mev;

typedef struct {
	prof_rank *ranks; /* n_ranks files, by rank */
	int n_ranks;
	/* file i's clock: aligned(t) = t + off[i] + slope[i] (t - t_ref[i]) */
	double *off, *slope;
	int64_t *t_ref;
	bool aligned;   /* from the files' barriers (false: --no-align, or none recorded) */
	int64_t origin; /* the earliest aligned event time, subtracted from all */
	prof_mev *ev;   /* every event; by file, then start */
	size_t n_ev;
	size_t n_p2p, n_matched;
	long step_begin, step_end; /* steps every file recorded: [begin, end) */
} prof_run;

/* Reads paths[0..n) (files, or directories holding rank-*.h5: a run
 * directory's profile/ or the folder itself). Refuses files of different
 * runs (their run_id) unless force, two files of one rank, files whose
 * layouts disagree, and windows with no step in common. align: align the
 * clocks (else each is taken as it is). Warnings (a rank missing, no
 * barrier records) go to the log. */
int prof_run_load(prof_run *run, char *const *paths, int n, bool force, bool align, pp_err *e);
void prof_run_free(prof_run *run);

/* The file of pp rank pp_rank in the same (dp, tp) replica as file f; -1 if
 * that rank's file is missing. */
int prof_run_file_of(const prof_run *run, int f, int pp_rank);

#endif
