#include "hparams.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

const char *const hparams_lora_names[LORA_MEMBERS] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
						      "gate_proj", "up_proj", "down_proj"};

int hparams_lora_targets(const pp_config *c, unsigned *mask, pp_err *e)
{
	const unsigned attention = 1u << LORA_Q | 1u << LORA_K | 1u << LORA_V | 1u << LORA_O;
	const unsigned mlp = (hparams_gated(&c->model) ? 1u << LORA_GATE : 0) | 1u << LORA_UP |
			     1u << LORA_DOWN;
	*mask = 0;
	char buf[sizeof c->lora.targets], *save = NULL;
	snprintf(buf, sizeof buf, "%s", c->lora.targets);
	for (char *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		unsigned m = !strcmp(w, "all")         ? attention | mlp
			     : !strcmp(w, "attention") ? attention
			     : !strcmp(w, "mlp")       ? mlp
						       : 0;
		for (int i = 0; !m && i < LORA_MEMBERS; i++)
			if (!strcmp(w, hparams_lora_names[i]))
				m = (1u << i) & (attention | mlp);
		if (!m)
			return pp_errorf(e, PP_EUSAGE,
					 "lora.targets: '%s' matches no projection of the model "
					 "(all, attention, mlp, or q_proj, k_proj, v_proj, o_proj, "
					 "%sup_proj, down_proj)",
					 w, hparams_gated(&c->model) ? "gate_proj, " : "");
		*mask |= m;
	}
	if (!*mask)
		return pp_errorf(e, PP_EUSAGE, "lora.targets names no projection");
	return 0;
}

double hparams_lora_scale(const pp_config *c)
{
	if (c->lora.rank <= 0)
		return 0;
	return c->lora.alpha / (c->lora.rslora ? sqrt((double)c->lora.rank) : (double)c->lora.rank);
}
