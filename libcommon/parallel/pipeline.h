/* Runs one pp rank's schedule (libcommon/schedule/schedule.h) over its chunks: the
 * forward and backward passes of every microbatch, and the activations and
 * gradients exchanged with the neighbouring pp ranks through the comm
 * interface. */
#ifndef PP_PIPELINE_H
#define PP_PIPELINE_H

#include "../comm/comm.h"
#include "../model/model.h"
#include "../profile/record.h"
#include "../schedule/schedule.h"

typedef struct {
	pp_stage *chunks; /* v local chunks: chunk c is virtual stage c * p + rank */
	int v, p, rank, m;
	pp_comm *pp; /* the pp group (NULL when p == 1) */
	sched_action *acts;
	int n_acts;
	/* (m, v) tables; buffers of (B, T, C) */
	/* (m, v, width) activations in the compute type */
	pp_act *act_in;  /* activations received for a chunk's input */
	pp_act *grad_in; /* gradients received for a chunk's output */
	pp_act *din;     /* input gradients a chunk produced, kept until sent */
	pp_act **out;    /* a chunk's output (owned by its stage slot) */
	int *slot;       /* stage slot holding a microbatch */
	int *free_slots; /* per chunk: a stack of free slot ids (v, n_slots) */
	int *n_free;
	int *last_bwd;   /* per chunk: the index in acts of the step's last pass
			* that computes its weight gradients (BWD, or BWD_W) */
	size_t width;    /* B * T * C */
	prof_rec *prof;  /* times every action when recording (NULL: off) */
	sched_costs pad; /* seconds each pass takes at least (a test's fixed
			  * costs: bwd is BWD's, BWD_I takes bwd - bwd_w); 0: off */
} pipeline;

/* Builds the action list of (kind, p, v, m, rank) over chunks already
 * created (each with schedule_slots' slots). */
int pipeline_init(pipeline *pl, sched_kind kind, pp_stage *chunks, int v, int p, int rank, int m,
		  pp_comm *pp, pp_err *e);
void pipeline_free(pipeline *pl);

/* A step's microbatches, host memory: tokens and targets (m, B*T); the
 * rows' positions in their packed documents (NULL: none); the draws of
 * each microbatch's training forward (m; NULL: none). */
typedef struct {
	const int *tokens, *targets, *pos;
	const stage_noise *noise;
} pipeline_batch;

/* One training step's passes over batch b; every microbatch's loss
 * gradient scaled by dscale. The summed token loss of
 * this rank's last-stage microbatches is added to *loss_sum. Each chunk's
 * last backward pass runs with STAGE_BWD_LAST, so that its stage reports
 * final gradients (stage_spec.grad_ready) while the pipeline goes on. */
int pipeline_train(pipeline *pl, const pipeline_batch *b, pp_real dscale, double *loss_sum,
		   pp_err *e);

/* Forward passes only (evaluation), microbatch by microbatch through every
 * virtual stage in order; adds the summed token loss and the valid target
 * count on the last stage. */
int pipeline_eval(pipeline *pl, int n_mb, const pipeline_batch *b, double *loss_sum, long *n_valid,
		  pp_err *e);

#endif
