/* Questions about a model's shape, answered in one place for the model,
 * the plan and the trainer (llama.cpp's llama_hparams). */
#ifndef PP_HPARAMS_H
#define PP_HPARAMS_H

#include <stdbool.h>

#include "../base/error.h"
#include "types.h"

/* The model's own rules beyond each key's range, PP_EUSAGE naming them:
 * experts are gated MLPs without biases in a llama-style layer. */
int hparams_check(const pp_model_cfg *m, pp_err *e);

/* Whether layer i is a mixture-of-experts layer: i % moe_every ==
 * moe_every - 1 in a model with experts. */
bool hparams_layer_is_moe(const pp_model_cfg *m, int layer);
/* The MoE layers among [begin, end). */
int hparams_moe_layers(const pp_model_cfg *m, int begin, int end);
/* Rows of an MLP's up product of width F: gate and up (2 F), or c_fc (F). */
int hparams_up_rows(const pp_model_cfg *m, int F);
/* Whether the MLP is gated (swiglu, geglu): gate and up, then down. */
bool hparams_gated(const pp_model_cfg *m);

#endif
