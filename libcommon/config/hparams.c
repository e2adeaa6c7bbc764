#include "hparams.h"

bool hparams_layer_is_moe(const pp_model_cfg *m, int layer)
{
	const int every = m->moe_every > 0 ? m->moe_every : 1;
	return m->n_experts > 0 && layer % every == every - 1;
}

int hparams_moe_layers(const pp_model_cfg *m, int begin, int end)
{
	const int every = m->moe_every > 0 ? m->moe_every : 1;
	return m->n_experts > 0 ? end / every - begin / every : 0;
}

bool hparams_gated(const pp_model_cfg *m) { return m->mlp != PP_MLP_GELU; }

int hparams_up_rows(const pp_model_cfg *m, int F) { return hparams_gated(m) ? 2 * F : F; }

int hparams_check(const pp_model_cfg *m, pp_err *e)
{
	if (m->n_experts > 0 && (m->mlp == PP_MLP_GELU || m->bias || m->family == PP_FAMILY_GPT))
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s': experts are gated MLPs (mlp swiglu or geglu) without "
				 "biases, in a llama-style layer (not family gpt)",
				 m->preset);
	return PP_OK;
}
