/* pp's tensor list of a model config, for the formats that must match it
 * exactly: every tensor model.c's parameter table holds (names, shapes in
 * pp's layout), in the order of its parameter buffer (embeddings, then
 * layer by layer, the final norm, the head), found without allocating the
 * model. */
#ifndef PP_MODELTABLE_H
#define PP_MODELTABLE_H

#include "tensorio.h"

/* m's tensors into *out (malloc'd, *n of them; the caller frees). Tied
 * embeddings are one tensor. */
int modeltable_build(const pp_model_cfg *m, tio_tensor **out, int *n, pp_err *e);
/* The same for a LoRA run of config c (lora.*): its adapters alone. */
int modeltable_adapters(const pp_config *c, tio_tensor **out, int *n, pp_err *e);

/* The index of name in t[0..n), or -1. */
int modeltable_find(const tio_tensor *t, int n, const char *name);

/* list[0..n) holds exactly m's tensors, each once and with its shape (any
 * order). The error names the first tensor missing, extra, repeated or of
 * another shape; PP_EUSAGE. */
int modeltable_check(const pp_model_cfg *m, const tio_tensor *list, int n, pp_err *e);

#endif
