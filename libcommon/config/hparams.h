/* Questions about a model's shape, answered in one place for the model,
 * the plan and the trainer (llama.cpp's llama_hparams). */
#ifndef PP_HPARAMS_H
#define PP_HPARAMS_H

#include <stdbool.h>

#include "../base/error.h"
#include "types.h"

/* The model's own rules beyond each key's range, PP_EUSAGE naming them:
 * experts are gated MLPs without biases in a llama-style layer; relative
 * position biases have 2 to PP_REL_MAX_BUCKETS buckets and a
 * max_distance past the exact half of them. */
int hparams_check(const pp_model_cfg *m, pp_err *e);

#define PP_REL_MAX_BUCKETS 1024

/* pos relative (GLaM's relative position biases, Praxis's RelativeBias,
 * unidirectional): the bucket of the distance n = i - j >= 0 between query
 * i and key j. The first nb/2 distances have a bucket each; the others
 * share the rest, spaced by the logarithm up to max_distance, past which
 * they share the last: nb/2 + (int)(log(n / (nb/2)) / log(max_distance /
 * (nb/2)) * (nb - nb/2)), at most nb - 1, in float as Praxis computes it. */
int hparams_relative_bucket(const pp_model_cfg *m, int n);

/* Whether layer i is a mixture-of-experts layer: i % moe_every ==
 * moe_every - 1 in a model with experts. */
bool hparams_layer_is_moe(const pp_model_cfg *m, int layer);
/* The MoE layers among [begin, end). */
int hparams_moe_layers(const pp_model_cfg *m, int begin, int end);
/* Rows of an MLP's up product of width F: gate and up (2 F), or c_fc (F). */
int hparams_up_rows(const pp_model_cfg *m, int F);
/* Whether the MLP is gated (swiglu, geglu): gate and up, then down. */
bool hparams_gated(const pp_model_cfg *m);

/* Low-rank adapters (lora.*, PEFT's LoRA): the projections they can
 * adapt, by PEFT's module names, in the order a layer holds them. */
enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_MEMBERS };
extern const char *const hparams_lora_names[LORA_MEMBERS]; /* "q_proj" ... "down_proj" */
/* lora.targets as a mask of 1 << LORA_*: all, attention (q, k, v, o), mlp
 * (gate, up, down) or PEFT's module names, comma-separated; PP_EUSAGE for
 * a name that matches nothing (an MLP without a gate has no gate_proj). */
int hparams_lora_targets(const pp_config *c, unsigned *mask, pp_err *e);
/* The scale of the adapters' product: alpha / rank, or alpha / sqrt(rank)
 * with rslora (0 without adapters). */
double hparams_lora_scale(const pp_config *c);

#endif
