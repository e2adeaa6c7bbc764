/* Private to train/: what its files share. */
#ifndef PP_TRAIN_INTERNAL_H
#define PP_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "../base/clock.h"
#include "../ckpt/async.h"
#include "tensorboard.h"
#include "train.h"

/* A collective over c that is a no-op on a group of one (c NULL). */
static inline int sum_over(pp_comm *c, void *buf, size_t n, pp_dtype t, pp_redop op, pp_err *e)
{
	return c ? comm_allreduce(c, buf, n, t, op, e) : 0;
}

/* Agrees on a status across the job: the worst code of any rank. */
static inline int agree(trainer *t, int rc, pp_err *e)
{
	int worst = rc;
	pp_err ignore;
	if (t->mesh.world_comm &&
	    comm_allreduce(t->mesh.world_comm, &worst, 1, PP_DT_I32, PP_OP_MAX, &ignore))
		return rc ? rc : pp_errorf(e, PP_ERUNTIME, "%s", ignore.msg);
	if (worst && !rc)
		return pp_errorf(e, worst, "another rank failed (see its message)");
	return rc;
}

/* Fully sharded: fsdp > 1 (fsdp.h). */
static inline bool fsdp_on(const trainer *t) { return t->lay.fsdp > 1; }
/* ZeRO-1: each data rank updates a share of the buffer, and holds all of it. */
static inline bool zero1(const trainer *t)
{
	return t->cfg->shard_optimizer && t->lay.data > 1 && !fsdp_on(t);
}

/* What a step reports. */
typedef struct {
	double loss, gnorm, lr;
	bool skipped;       /* non-finite loss or gradient norm (nan_policy=skip) */
	double moe_aux;     /* MoE: the load-balancing loss, mean over layers (1: balanced) */
	double moe_z;       /* the router z-loss, likewise */
	double moe_dropped; /* the fraction of expert assignments dropped (capacity) */
	double fp8_saturated, fp8_flushed; /* FP8: the fractions of the values cast */
} step_result;

/* The run's log: metrics.jsonl, TensorBoard and the step lines. */
typedef struct {
	bool leader;   /* this rank prints progress and writes the metrics */
	FILE *metrics; /* leader only; NULL once it cannot be written */
	char metrics_path[PP_PATH_MAX + 32];
	tb_writer *tb; /* leader only; NULL when tensorboard=false or once it fails */
	double flops_per_token;
	double peak;     /* FLOP/s of the device, 0 when unknown */
	double peak_fp8; /* its FP8 FLOP/s under fp8.recipe, 0 otherwise or unknown */
	double t_avg;    /* moving average of the step time, warm-up steps left out */
	long n_run;      /* steps run by this process */
	long n_timed;    /* of which after the warm-up (timing_skip_steps) */
	double timed;    /* their seconds */
} run_log;

typedef struct train_tasks train_tasks;

/* tasks.c: eval_tasks, read when the run opens and scored at each
 * evaluation (a log line per task; eval/TASK/acc, acc_norm, perplexity in
 * metrics.jsonl and TensorBoard) */
int train_tasks_open(trainer *t, pp_err *e);
int train_tasks_score(trainer *t, run_log *lg, pp_err *e);
void train_tasks_close(trainer *t);

/* step.c */
/* The stage hook during a chunk's last backward pass of the step
 * (stage_grad_hook; ctx: the trainer). */
int train_grads_final(void *ctx, pp_stage *s, size_t from, pp_err *e);
/* One optimizer step over the global batch; tok and tgt hold this rank's
 * microbatches. */
int train_step(trainer *t, int *tok, int *tgt, step_result *r, pp_err *e);

/* state.c: a save in two phases (ckpt/async.h's job) */
/* Every rank: agrees on the temporary directory, copies its state to host
 * memory and builds its part of the checkpoint, all of it owned by j. */
int train_save_prepare(trainer *t, ckpt_job *j, pp_err *e);
/* Every rank: agrees that every rank's write succeeded (rc: this rank's),
 * then rank 0 publishes the checkpoint. */
int train_save_commit(trainer *t, ckpt_job *j, int rc, pp_err *e);

/* metrics.c */
/* Opens metrics.jsonl and the TensorBoard events in run_dir for the
 * leader. A metrics output that cannot be written, at open or later, is
 * said once, naming its file, and the run goes on without it. */
void train_log_open(run_log *lg, const pp_config *c, bool leader);
void train_log_close(run_log *lg);
void train_log_scalar(run_log *lg, long step, const char *name, double v);
void train_log_step(const trainer *t, run_log *lg, const train_opts *o, const step_result *r,
		    double dt);
void train_log_timing(const trainer *t, const run_log *lg);
void train_log_state_bytes(const trainer *t);

#endif
