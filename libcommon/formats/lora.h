/* A pp checkpoint of a LoRA run (lora.rank > 0) holds its base's tensors
 * and the adapters beside them (model.layers.N.self_attn.q_proj.lora_A.weight,
 * ...lora_B.weight). Views of such a source for the formats that take a
 * model or adapters alone:
 *   merged:   the base's tensors, each with its adapters folded in, W +
 *             scale * B A, computed in double from the fp32 values and
 *             rounded once (before any cast a sink makes);
 *   adapters: the adapters alone (PEFT's adapter_model.safetensors). */
#ifndef PP_FORMATS_LORA_H
#define PP_FORMATS_LORA_H

#include "tensorio.h"

typedef enum { TIO_LORA_MERGED, TIO_LORA_ADAPTERS } tio_lora_view;

/* Whether src holds adapters. */
bool tio_has_adapters(const tio_source *src);

/* The adapters' settings a source's config (meta->config) holds, and
 * PEFT's target module names of its tensors (targets: a JSON array, a new
 * reference). */
typedef struct {
	int rank;
	double alpha, dropout;
	bool rslora;
	json_t *targets;
} tio_lora;
/* PP_EUSAGE when the config holds no LoRA settings. */
int tio_lora_settings(const tio_meta *meta, const tio_tensor *tensors, int n, tio_lora *l,
		      pp_err *e);

/* The config of a LoRA run made from PEFT's adapters in dir on the base
 * model base (open; at path): the base's config (a pp checkpoint's, else
 * its model with the defaults and its tokenizer), lora.* from
 * adapter_config.json (r, lora_alpha, use_rslora, target_modules),
 * load_parameters_path (path) and lora.base_sha256, then the overrides.
 * What pp cannot take of PEFT's settings (DoRA, biases, per-module ranks,
 * fan_in_fan_out, modules_to_save, some layers only, another method) is
 * PP_EUSAGE naming adapter_config.json and the key. */
int tio_peft_config(const char *dir, const tio_source *base, const char *path, int n_overrides,
		    char *const *overrides, pp_config *c, pp_err *e);

/* A view of inner (which the view owns and closes). */
int tio_lora_source(tio_source *inner, tio_lora_view view, tio_source **out, pp_err *e);

#endif
