/* The training loop of one process: a stage holding every layer, AdamW,
 * the data loader, logging, evaluation and checkpoints. Commands only parse
 * arguments and call these. */
#ifndef PP_TRAIN_H
#define PP_TRAIN_H

#include <signal.h>
#include <stdbool.h>

#include "config.h"
#include "data.h"
#include "model.h"
#include "optim.h"

typedef struct {
	pp_config *cfg;
	const pp_ops *ops;
	pp_stage stage;
	optim_state opt;
	pp_data *train, *val; /* NULL when opened for parameters only */
	long step;            /* optimizer steps completed */
} trainer;

typedef struct {
	bool quiet;                        /* no per-step log lines */
	volatile sig_atomic_t *stop;       /* set by a signal handler: save and stop */
} train_opts;

/* Checks that this process can run the config (device, model kind, layout),
 * then allocates. params_only skips activations for the batch and the data. */
int trainer_open(trainer *t, pp_config *c, bool params_only, pp_err *e);
void trainer_close(trainer *t);

/* Seeded initialisation at step 0. */
void trainer_init(trainer *t);
/* Loads the newest complete checkpoint in run_dir if there is one. */
int trainer_resume(trainer *t, bool *resumed, pp_err *e);
/* Saves a checkpoint of the current step into run_dir. */
int trainer_save(trainer *t, pp_err *e);

/* Trains from t->step to cfg->steps. Returns PP_ESTOPPED when stopped by
 * *o->stop after saving. */
int trainer_run(trainer *t, const train_opts *o, pp_err *e);

/* Mean loss over cfg->eval_batches validation microbatches. */
int trainer_eval(trainer *t, double *loss, pp_err *e);

#endif
