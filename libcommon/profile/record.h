/* Recording a rank's profile inside pp-train: a window of steps whose
 * events go to RUN/profile/rank-NNNNN.h5 (profile.h) when it closes.
 *
 * The trainer marks its steps; the pipeline, the gradient sum and the
 * trainer time their work as spans:
 *
 *   prof_rec_step_begin(p, step)            every rank, before the step
 *   prof_span s = prof_begin(p, PROF_FWD);
 *   ... the forward pass ...
 *   prof_end(p, &s, mb, vstage, -1, 0);
 *   prof_rec_step_end(p, step)              every rank, after the step and
 *                                           what follows it (eval, save)
 *
 * All of it costs a branch when p is NULL or outside the window. Times come
 * from CLOCK_MONOTONIC; on a backend whose ops return before the device runs
 * them (ops->mark), the passes, the optimizer, sends and receives are marks
 * on the device's compute stream instead, read at the end of each step, and
 * a nonblocking collective ends at a mark on its communicator's stream
 * (prof_end_mark).
 *
 * The window opens and closes with rounds of barriers over the job, each
 * timed before and after on every rank: merge.c aligns the ranks' clocks
 * with them. */
#ifndef PP_PROFILE_RECORD_H
#define PP_PROFILE_RECORD_H

#include "../comm/comm.h"
#include "profile.h"

typedef struct prof_rec prof_rec;

typedef struct {
	const char *run_dir;
	long begin, end;       /* record steps [begin, end) (1-based, as logged) */
	const prof_rank *id;   /* this rank's identity and the run's layout (no events) */
	const pp_ops *ops;     /* marks on the device when it has them */
	pp_comm *world;        /* the job's ranks; NULL for one process */
	double clock_offset_s; /* added to this rank's clock (a test's skew) */
} prof_rec_opts;

/* Every rank calls it (it agrees on the run's identity over world). */
int prof_rec_open(prof_rec **out, const prof_rec_opts *o, pp_err *e);
void prof_rec_free(prof_rec *p);

/* Before step `step` (every rank): the window opens at its first step that
 * this run reaches (a barrier round). */
int prof_rec_step_begin(prof_rec *p, long step, pp_err *e);
/* After step `step` and its evaluation and save (every rank): resolves the
 * step's device marks; after the window's last step it closes the window
 * (a barrier round) and writes the file. */
int prof_rec_step_end(prof_rec *p, long step, pp_err *e);
/* The run ends inside the window: writes what was recorded. sync: every
 * rank calls it (a normal end or a stop on a signal), so the closing
 * barriers run; without it (an error, a dead peer) none is attempted. */
int prof_rec_finish(prof_rec *p, bool sync, pp_err *e);

/* Whether events are being recorded now. */
bool prof_on(const prof_rec *p);
/* The recorder's clock: ns of CLOCK_MONOTONIC plus the test's offset. */
int64_t prof_now(const prof_rec *p);

typedef struct {
	int64_t t0;
	void *m0; /* the device mark at the start, when timed on the device */
	int op;   /* prof_op; -1 when not recording */
} prof_span;

prof_span prof_begin(prof_rec *p, prof_op op);
void prof_end(prof_rec *p, const prof_span *s, int mb, int vstage, int peer, int64_t bytes);
/* Ends s at a mark (comm_mark) when there is one, else now. */
void prof_end_mark(prof_rec *p, const prof_span *s, void *mark, int64_t bytes);

#endif
