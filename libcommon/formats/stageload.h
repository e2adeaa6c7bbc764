/* A model stage's parameters from any tensorio source (a pp checkpoint or
 * run directory, Hugging Face safetensors, GGUF), in any layout: each rank
 * reads the whole tensors its parameters come from and keeps its slice
 * (param_global_index), so a source of one process loads into a stage of
 * any pp, tp, ep or fsdp position. pp-decode's GGUF decoding and
 * pp-train's load_parameters_path share it. */
#ifndef PP_FORMATS_STAGELOAD_H
#define PP_FORMATS_STAGELOAD_H

#include "../model/model.h"
#include "tensorio.h"

/* The format of the model at path, for tio_open_source: "gguf" (a file
 * with GGUF's magic), "safetensors" (a .safetensors file, or a directory
 * with model.safetensors or its index), else "pp" (a checkpoint or run
 * directory). */
const char *tio_guess_format(const char *path);

/* Whether p is read from a source: low-rank adapters are not (the source
 * holds a base model). */
bool tio_loads_param(const pp_param *p);

/* Reads every parameter of s that tio_loads_param takes, within the part of
 * its buffer s holds ([w_lo, w_hi)), into the master weights, then brings
 * the compute copy up to date. A parameter the source lacks, or holds in
 * another shape, is PP_EUSAGE naming the tensor, both shapes and what
 * (the source as the user named it). */
int tio_load_stage(pp_stage *s, tio_source *src, const char *what, pp_err *e);

/* A fingerprint of the model at path, in lower-case hex: the sha256 of a
 * file (GGUF, safetensors), of a pp checkpoint's manifest (which holds every
 * file's sha256; a run directory's newest sound checkpoint), or of a
 * safetensors directory's model.safetensors or its index. */
int tio_base_sha256(const char *path, char hex[65], pp_err *e);

/* A LoRA stage's frozen base (pp_param.frozen), as its run trained on it:
 * the parameters of c->load_parameters_path, whose fingerprint must still
 * be c->lora.base_sha256 where that is set (else PP_EUSAGE: the base
 * changed), or without one the seeded initialisation of c->seed. The
 * adapters are left as they were. */
int tio_load_base(pp_stage *s, const pp_config *c, pp_err *e);

/* The keys of the source's model (meta->model) that differ from the
 * config's c->json "model": calls fn once per key with both values as
 * JSON text ("(absent)" for none). Returns the number of keys. */
int tio_model_diff(const tio_source *src, const pp_config *c,
		   void (*fn)(void *ctx, const char *key, const char *there, const char *here),
		   void *ctx);

#endif
