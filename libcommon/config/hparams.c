#include "hparams.h"

#include <math.h>

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
	if (m->pos == PP_POS_RELATIVE && m->family == PP_FAMILY_GPT)
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s': relative position biases go in a llama-style layer "
				 "(not family gpt)",
				 m->preset);
	if (m->pos == PP_POS_RELATIVE &&
	    (m->rel_buckets < 2 || m->rel_buckets > PP_REL_MAX_BUCKETS ||
	     m->rel_max_distance <= m->rel_buckets / 2))
		return pp_errorf(e, PP_EUSAGE,
				 "model.relative_attention_num_buckets %d and "
				 "relative_attention_max_distance %d: expected 2 to %d buckets and "
				 "a max_distance above half of them",
				 m->rel_buckets, m->rel_max_distance, PP_REL_MAX_BUCKETS);
	return PP_OK;
}

int hparams_relative_bucket(const pp_model_cfg *m, int n)
{
	const int nb = m->rel_buckets, exact = nb / 2;
	if (n < exact)
		return n;
	const float v = logf((float)n / (float)exact) /
			logf((float)m->rel_max_distance / (float)exact) * (float)(nb - exact);
	const int b = exact + (int)v;
	return b < nb - 1 ? b : nb - 1;
}
