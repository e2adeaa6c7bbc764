/* Where a pipeline's time goes, from a merged run (merge.h).
 *
 * For each step of the window, the pipeline's span is [T0, T1]: from the
 * first forward pass on any rank to the last backward pass's end. A rank's
 * time in it is
 *   compute   its forward and backward passes;
 *   exposed communication   the part of its sends and receives when both
 *             ends were in the call (the transfer); the rest of a call is
 *             waiting for the peer;
 *   bubble    the rest of the span: waiting, before its first pass too,
 * so its bubble fraction is bubble / (T1 - T0), which the schedule's theory
 * predicts (schedule_bubble_theory at the measured mean costs of a forward,
 * a backward and a weight-gradient pass). A step's own time (the "step"
 * event) adds what lies outside the span: the blocking collectives
 * (gradient sums, norm, loss; a wait in one inside the span is bubble), the
 * optimizer, data loading, and what is left ("other").
 *
 * Critical path: the last step's pipeline replica of the first file,
 * walked back from its last event to its first: from a receive that waited
 * to the send that released it, otherwise to the rank's previous event.
 * Beside it, the ideal time of the same per-rank orders at the measured
 * durations with free messages, from the schedule's simulator. */
#ifndef PP_PROFILE_ANALYZE_H
#define PP_PROFILE_ANALYZE_H

#include <stdio.h>

#include "merge.h"

/* Times in ms; "per step" figures are means over the window's steps. */
typedef struct {
	int pp_rank, n_files; /* the stage, and how many ranks' files hold it */
	double step, compute, comm, bubble_ms, bubble; /* per step and rank; bubble: fraction */
} prof_stage;

typedef struct {
	double step, compute, comm, bubble, optimizer, io, other; /* per step, mean over ranks */
} prof_breakdown;

typedef struct {
	int file; /* index in prof_run.ranks */
	int op, mb, vstage;
	double start, dur; /* ms on the merged timeline */
} prof_path_node;

typedef struct {
	char name[PROF_NAME_LEN];
	long count;
	double total, mean, max, share; /* share: of all ranks' step time */
} prof_top_op;

typedef struct {
	sched_kind kind;
	int p, v, m;
	int n_steps;
	sched_costs costs; /* mean ms of a forward, a backward, a weight-gradient pass */
	bool costs_used;   /* the theory used them (else the reference costs: see why) */
	double theory;     /* bubble fraction */
	double bubble;     /* measured, mean over the stages */
	double pipe;       /* mean pipeline span T1 - T0, ms */
	prof_stage *stage; /* p */
	prof_breakdown mean;
	/* critical path of step cp_step */
	long cp_step;
	double cp_measured, cp_ideal,
		cp_blocking;        /* ms; ideal and blocking < 0 when not simulated */
	double cp_compute, cp_comm; /* ms of the path in passes, and between them */
	char cp_note[256];          /* why something is missing */
	prof_path_node *path;
	int n_path;
	prof_top_op *top;
	int n_top;
	int64_t max_offset_ns; /* the largest clock correction applied */
} prof_analysis;

int prof_analyze(const prof_run *run, prof_analysis *a, pp_err *e);
void prof_analysis_free(prof_analysis *a);
/* The report: aligned tables, or one JSON object. */
int prof_analysis_print(FILE *f, const prof_run *run, const prof_analysis *a, bool json, pp_err *e);

#endif
