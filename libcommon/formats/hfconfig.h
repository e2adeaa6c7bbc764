/* Hugging Face config.json <-> pp's "model" object, for the four dense
 * families transformers builds the same way pp does:
 *
 *   pp family  model_type  architecture        what is fixed by the family
 *   llama      llama       LlamaForCausalLM    RMSNorm, RoPE, gated MLP
 *   mistral    mistral     MistralForCausalLM  llama + sliding_window, no biases
 *   gemma      gemma       GemmaForCausalLM    (1 + w) RMSNorm, embeddings * sqrt(d)
 *   gpt        gpt2        GPT2LMHeadModel     LayerNorm, learned positions, GELU,
 *                                              biases, n_kv_heads = n_heads
 *
 * Both directions refuse, naming the key and its value, what the other
 * side cannot represent (rope_scaling, partial rotary embeddings, experts,
 * an exact-erf GELU, a LayerNorm llama, ...), so a model never changes on
 * the way. Dropout rates are training settings and do not travel. */
#ifndef PP_HFCONFIG_H
#define PP_HFCONFIG_H

#include <jansson.h>

#include "../base/error.h"
#include "../config/config.h"

/* config.json (parsed) -> a complete pp "model" object (a new reference
 * in *model). PP_EUSAGE for a model_type, key or value pp cannot build. */
int hf_config_to_model(const json_t *config, json_t **model, pp_err *e);

typedef struct {
	const char *torch_dtype; /* "float32", "float16", "bfloat16" */
	int bos_id, eos_id;      /* the tokenizer's, or -1 when unknown (written as null) */
} hf_export;

/* m -> config.json as transformers 4.46 writes it for the family (a new
 * reference in *config): from_pretrained builds the same model from it.
 * PP_EUSAGE for a model the family's class cannot express. */
int hf_config_from_model(const pp_model_cfg *m, const hf_export *x, json_t **config, pp_err *e);

/* generation_config.json for an exported config.json (a new reference). */
json_t *hf_generation_config(const json_t *config);

#endif
