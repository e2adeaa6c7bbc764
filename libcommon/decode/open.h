/* The model a command runs for text (pp-decode, pp-eval): from --ckpt (a
 * checkpoint, a run directory's newest sound one, or a GGUF file; its own
 * config and tokenizer unless --cfg gives the config), from the newest
 * sound checkpoint in the run_dir of --cfg, or with --random-init (with --ckpt too: its config and tokenizer, seeded
 * weights, a baseline at chance); key=value overrides over either; on the CPU its products'
 * weights stored as --weights says. One stage holds every layer. */
#ifndef PP_DECODE_OPEN_H
#define PP_DECODE_OPEN_H

#include <stdbool.h>

#include "../config/config.h"
#include "../formats/tensorio.h"
#include "../model/model.h"
#include "../tok/tokenizer.h"

/* --weights gguf: the blocks of a GGUF file as they are */
#define DECODE_WEIGHTS_GGUF 100

typedef struct {
	const char *ckpt;    /* --ckpt, or NULL */
	const char *cfg;     /* --cfg, or NULL */
	const char *weights; /* --weights: fp32, bf16, q8_0, gguf; NULL: the default */
	bool random_init;    /* --random-init */
	int device;          /* the GPU of device=cuda (boot_device) */
	int n_overrides;     /* key=value */
	char *const *overrides;
} decode_source;

typedef struct {
	pp_config cfg;
	const pp_ops *ops;
	pp_stage s;
	pp_tokenizer *tk;                /* NULL: the model has none (ids as numbers) */
	char tok_path[PP_PATH_MAX + 64]; /* where it was read ("" for none) */
	tio_source *gguf;                /* --ckpt FILE.gguf */
	int weights; /* PP_WEIGHTS_*, DECODE_WEIGHTS_GGUF, or -1: the compute copy */
	char source[PP_PATH_MAX + 64]; /* the checkpoint read, or "random-init" */
	long step;                     /* its step (-1: none) */
	char tmp[64];                  /* the checkpoint's tokenizer, extracted ("" none) */
	char dir[PP_PATH_MAX + 64];
	bool random_init; /* seeded weights (with --ckpt: of its config, its tokenizer) */
	bool loaded;
} decode_model;

/* The config, the backend and the tokenizer (checked against the model's
 * vocabulary): everything but the weights, so that a command checks its
 * input before it loads them. */
int decode_model_open(decode_model *m, const decode_source *a, pp_err *e);
/* The stage and its weights. */
int decode_model_load(decode_model *m, pp_err *e);
void decode_model_close(decode_model *m);

/* "fp32", "bf16", "q8_0" or "gguf" */
const char *decode_weights_name(int fmt);

#endif
