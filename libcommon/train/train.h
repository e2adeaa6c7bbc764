/* The training loop of one rank: its pipeline chunks (stages), AdamW, the
 * data loader, the gradient exchanges of the mesh, logging, evaluation and
 * checkpoints. Commands only parse arguments and call these.
 *
 * open.c builds the rank (its layout, groups, chunks, optimizer, data),
 * step.c runs one optimizer step and evaluation, state.c converts between
 * the trainer and checkpoints, metrics.c writes the step log, the metrics
 * and the memory line, loop.c runs the steps with profiles, saves and the
 * stop conditions. */
#ifndef PP_TRAIN_H
#define PP_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "../comm/boot.h"
#include "../config/config.h"
#include "../config/layout.h"
#include "../data/data.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "../parallel/fsdp.h"
#include "../parallel/gradsync.h"
#include "../parallel/mesh.h"
#include "../parallel/pipeline.h"
#include "../profile/record.h"

typedef struct {
	pp_config *cfg;
	const pp_ops *ops;
	pp_proc proc; /* from boot_init; size 1 without a launcher */
	bool booted;
	pp_layout lay;    /* what this rank holds */
	pp_mesh mesh;     /* its process groups */
	pp_stage *chunks; /* lay.v chunks of this pp rank */
	optim_state *opt; /* per chunk: all of it, or this data rank's shard (ZeRO-1, fsdp) */
	pipeline pl;
	gradsync sync;        /* the sum over dp, overlapped with the backward */
	fsdp fsdp;            /* fsdp > 1: the gathers and reduce-scatters of the shards */
	pp_real *gather;      /* ZeRO-1: the parameter all-gather's buffer (largest chunk) */
	int *pos;             /* packing: the step's positions in packed documents */
	stage_noise *noise;   /* lora.dropout: the draws of the step's microbatches */
	size_t gather_n;      /* its elements */
	pp_data *train, *val; /* NULL when opened for parameters only */
	bool params_only;     /* pp-init: parameters, no optimizer state, no data */
	long step;            /* optimizer steps completed */
	prof_rec *prof;       /* the profile being recorded (profile_steps), or NULL */
	struct ckpt_host *
		staging; /* per chunk: host copies of the state a save writes, kept between saves */
	struct train_tasks *tasks; /* eval_tasks (tasks.c), or NULL */
} trainer;

typedef struct {
	bool quiet;                  /* no per-step log lines */
	volatile sig_atomic_t *stop; /* set by a signal handler: save and stop */
} train_opts;

/* Checks that the config can run here (device, model kind, layout against
 * the job's ranks), then allocates. params_only builds one process's whole
 * model (pp-init) without a launcher, optimizer state, activations for the
 * batch or data; its checkpoints hold parameters only (AdamW starts from
 * zero when a run resumes from one). */
int trainer_open(trainer *t, pp_config *c, bool params_only, pp_err *e);
void trainer_close(trainer *t);
/* Ends every rank of the job after an error on this one (never returns when
 * the job has more than one rank). */
void trainer_abort(trainer *t, int code, const char *why);

/* Step 0: seeded initialisation, then with load_parameters_path the
 * parameters the source holds (any format tio_guess_format knows, any
 * layout; a model of another shape is PP_EUSAGE naming the tensor; other
 * model keys that differ are warned about). Every rank calls. */
int trainer_init(trainer *t, pp_err *e);
/* Loads the newest checkpoint in run_dir if there is one. */
int trainer_resume(trainer *t, bool *resumed, pp_err *e);
/* Saves a checkpoint of the current step into run_dir (every rank calls). */
int trainer_save(trainer *t, pp_err *e);

/* Trains from t->step to cfg->steps. Returns PP_ESTOPPED when stopped by
 * *o->stop after saving. */
int trainer_run(trainer *t, const train_opts *o, pp_err *e);

/* Mean loss over cfg->eval_batches validation microbatches per dp rank. */
int trainer_eval(trainer *t, double *loss, pp_err *e);

/* Whether this rank prints progress and writes metrics (world rank 0). */
static inline bool trainer_leader(const trainer *t) { return t->lay.rank == 0; }

#endif
