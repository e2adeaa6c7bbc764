/* Hugging Face config.json <-> pp's "model" object (hfconfig.h). Absent
 * or null keys take the defaults of the transformers 4.46 config class of
 * the model_type, as from_pretrained would. */
#include "hfconfig.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_VERSION "4.46.3"

typedef struct {
	const char *model_type, *architecture;
	int pp_family;
	/* the config class's defaults */
	long long vocab, hidden, inter, layers, heads, kv_heads, head_dim, max_pos, window;
	double eps;
	int tied;
} hf_family;

/* kv_heads / head_dim 0: derived (heads; hidden / heads); window -1: none */
static const hf_family families[] = {
	{"llama", "LlamaForCausalLM", PP_FAMILY_LLAMA, 32000, 4096, 11008, 32, 32, 0, 0, 2048, -1,
	 1e-6, 0},
	{"mistral", "MistralForCausalLM", PP_FAMILY_MISTRAL, 32000, 4096, 14336, 32, 32, 8, 0,
	 131072, 4096, 1e-6, 0},
	{"mixtral", "MixtralForCausalLM", PP_FAMILY_MIXTRAL, 32000, 4096, 14336, 32, 32, 8, 0,
	 131072, -1, 1e-5, 0},
	{"gemma", "GemmaForCausalLM", PP_FAMILY_GEMMA, 256000, 3072, 24576, 28, 16, 16, 256, 8192,
	 -1, 1e-6, 1},
	{"gpt2", "GPT2LMHeadModel", PP_FAMILY_GPT, 50257, 768, 0, 12, 12, 0, 0, 1024, -1, 1e-5, 1},
};

static const hf_family *family_of_type(const char *t)
{
	for (size_t i = 0; i < sizeof families / sizeof *families; i++)
		if (t && !strcmp(t, families[i].model_type))
			return &families[i];
	return NULL;
}

static const hf_family *family_of_pp(int f)
{
	for (size_t i = 0; i < sizeof families / sizeof *families; i++)
		if (families[i].pp_family == f)
			return &families[i];
	return NULL;
}

/* ---- config.json -> pp ------------------------------------------------------- */

typedef struct {
	const json_t *c;
	pp_err *e;
	int rc; /* the first error */
} reader;

/* the key's value, NULL when absent or null */
static const json_t *val(const reader *r, const char *key)
{
	const json_t *v = json_object_get(r->c, key);
	return json_is_null(v) ? NULL : v;
}

/* v as compact JSON text, cut to fit buf */
static const char *text_of(const json_t *v, char *buf, size_t n)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	snprintf(buf, n, "%s", s ? s : "?");
	if (s && strlen(s) >= n && n > 4)
		memcpy(buf + n - 4, "...", 4);
	free(s);
	return buf;
}

static void bad(reader *r, const char *key, const char *want)
{
	if (r->rc)
		return;
	char t[160];
	r->rc = pp_errorf(r->e, PP_EUSAGE, "key '%s' is %s: expected %s", key,
			  text_of(json_object_get(r->c, key), t, sizeof t), want);
}

/* refuses key's value (present and not null), saying what pp lacks */
static void refuse(reader *r, const char *key, const char *why)
{
	if (r->rc)
		return;
	char t[160];
	r->rc = pp_errorf(r->e, PP_EUSAGE, "key '%s' is %s: %s", key,
			  text_of(json_object_get(r->c, key), t, sizeof t), why);
}

static long long get_int(reader *r, const char *key, long long def, long long lo)
{
	const json_t *v = val(r, key);
	if (!v)
		return def;
	long long x = json_integer_value(v);
	if (!json_is_integer(v) || x < lo || x > INT_MAX) {
		bad(r, key, lo ? "an integer >= 1" : "an integer >= 0");
		return def;
	}
	return x;
}

static double get_num(reader *r, const char *key, double def)
{
	const json_t *v = val(r, key);
	if (!v)
		return def;
	double x = json_number_value(v);
	if (!json_is_number(v) || !(x > 0) || !isfinite(x)) {
		bad(r, key, "a number > 0");
		return def;
	}
	return x;
}

static int get_bool(reader *r, const char *key, int def)
{
	const json_t *v = val(r, key);
	if (!v)
		return def;
	if (!json_is_boolean(v)) {
		bad(r, key, "true or false");
		return def;
	}
	return json_is_true(v);
}

static const char *get_str(reader *r, const char *key, const char *def)
{
	const json_t *v = val(r, key);
	if (!v)
		return def;
	if (!json_is_string(v)) {
		bad(r, key, "a string");
		return def;
	}
	return json_string_value(v);
}

/* the pp mlp of a gated MLP's activation (-1: none pp has) */
static int gated_mlp(const char *act)
{
	if (!strcmp(act, "silu") || !strcmp(act, "swish"))
		return PP_MLP_SWIGLU;
	if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_new") ||
	    !strcmp(act, "gelu_fast"))
		return PP_MLP_GEGLU;
	return -1;
}

static bool tanh_gelu(const char *act) { return gated_mlp(act) == PP_MLP_GEGLU; }

/* keys no family here can honour when set (experts: Mixtral's only) */
static void refuse_common(reader *r, const hf_family *f)
{
	if (val(r, "rope_scaling"))
		refuse(r, "rope_scaling",
		       "pp has no RoPE scaling (positions rotate by rope_theta alone)");
	const json_t *p = val(r, "partial_rotary_factor");
	if (p && (!json_is_number(p) || json_number_value(p) != 1.0))
		refuse(r, "partial_rotary_factor", "pp rotates every dimension of a head");
	/* Mixtral's own two first */
	static const char *const moe[] = {"num_local_experts", "num_experts_per_tok", "num_experts",
					  "n_routed_experts", "moe_intermediate_size"};
	for (size_t i = f->pp_family == PP_FAMILY_MIXTRAL ? 2 : 0; i < sizeof moe / sizeof *moe;
	     i++) {
		const json_t *v = val(r, moe[i]);
		if (v && !(json_is_integer(v) && json_integer_value(v) == 0))
			refuse(r, moe[i], "pp imports the experts of Mixtral only");
	}
	if (val(r, "quantization_config"))
		refuse(r, "quantization_config", "pp imports unquantized weights only");
	if (get_bool(r, "is_encoder_decoder", 0))
		refuse(r, "is_encoder_decoder", "pp builds decoder-only models");
}

static void check_architectures(reader *r, const hf_family *f)
{
	const json_t *a = val(r, "architectures");
	if (!a)
		return;
	for (size_t i = 0; i < json_array_size(a); i++) {
		const char *name = json_string_value(json_array_get(a, i));
		if (name && !strcmp(name, f->architecture))
			return;
	}
	char want[96];
	snprintf(want, sizeof want, "[\"%s\"] for model_type %s (pp reads its weight names)",
		 f->architecture, f->model_type);
	bad(r, "architectures", want);
}

int hf_config_to_model(const json_t *config, json_t **model, pp_err *e)
{
	*model = NULL;
	reader rd = {config, e, 0}, *r = &rd;
	if (!json_is_object(config))
		return pp_errorf(e, PP_EUSAGE, "expected a JSON object");
	const char *type = get_str(r, "model_type", NULL);
	if (r->rc)
		return r->rc;
	const hf_family *f = family_of_type(type);
	if (!f)
		return type ? pp_errorf(e, PP_EUSAGE,
					"key 'model_type' is \"%s\": pp imports llama, mistral, "
					"mixtral, gemma and gpt2",
					type)
			    : pp_errorf(
				      e, PP_EUSAGE,
				      "no key 'model_type' (llama, mistral, mixtral, gemma or gpt2)");
	check_architectures(r, f);
	refuse_common(r, f);

	long long d, nh, nkv, hd, ff, nl, vocab, maxpos, window = 0;
	double eps, theta = 10000;
	int mlp, tied, bias = 0;
	const bool gpt = f->pp_family == PP_FAMILY_GPT;
	if (gpt) {
		d = get_int(r, "n_embd", f->hidden, 1);
		nh = get_int(r, "n_head", f->heads, 1);
		nl = get_int(r, "n_layer", f->layers, 1);
		ff = get_int(r, "n_inner", 4 * d, 1);
		maxpos = get_int(r, "n_positions", f->max_pos, 1);
		eps = get_num(r, "layer_norm_epsilon", f->eps);
		if (!r->rc && d % nh)
			r->rc = pp_errorf(e, PP_EUSAGE,
					  "key 'n_embd' is %lld: not divisible by n_head %lld", d,
					  nh);
		nkv = nh;
		hd = nh ? d / nh : 0;
		mlp = PP_MLP_GELU;
		bias = 1;
		if (!tanh_gelu(get_str(r, "activation_function", "gelu_new")))
			refuse(r, "activation_function",
			       "pp's GELU is the tanh approximation (gelu_new, gelu_pytorch_tanh)");
		if (!get_bool(r, "scale_attn_weights", 1))
			refuse(r, "scale_attn_weights", "pp scales attention by 1/sqrt(head_dim)");
		if (get_bool(r, "scale_attn_by_inverse_layer_idx", 0))
			refuse(r, "scale_attn_by_inverse_layer_idx",
			       "pp scales attention by 1/sqrt(head_dim) in every layer");
		if (get_bool(r, "add_cross_attention", 0))
			refuse(r, "add_cross_attention", "pp builds decoder-only models");
	} else {
		d = get_int(r, "hidden_size", f->hidden, 1);
		nh = get_int(r, "num_attention_heads", f->heads, 1);
		nkv = get_int(r, "num_key_value_heads", f->kv_heads ? f->kv_heads : nh, 1);
		if (!val(r, "num_key_value_heads") &&
		    json_object_get(config, "num_key_value_heads"))
			nkv = nh; /* an explicit null: as many as the query heads */
		hd = get_int(r, "head_dim",
			     f->head_dim && !json_object_get(config, "head_dim") ? f->head_dim
										 : d / nh,
			     1);
		ff = get_int(r, "intermediate_size", f->inter, 1);
		nl = get_int(r, "num_hidden_layers", f->layers, 1);
		maxpos = get_int(r, "max_position_embeddings", f->max_pos, 1);
		eps = get_num(r, "rms_norm_eps", f->eps);
		theta = get_num(r, "rope_theta", 10000);
		const char *act = f->pp_family == PP_FAMILY_GEMMA
					  ? get_str(r, "hidden_activation", "gelu_pytorch_tanh")
					  : get_str(r, "hidden_act", "silu");
		mlp = act ? gated_mlp(act) : -1;
		if (mlp < 0)
			refuse(r,
			       f->pp_family == PP_FAMILY_GEMMA ? "hidden_activation" : "hidden_act",
			       "pp's gated MLPs are SwiGLU (silu) and GeGLU (gelu_pytorch_tanh)");
		if (f->pp_family == PP_FAMILY_LLAMA) {
			int ab = get_bool(r, "attention_bias", 0), mb = get_bool(r, "mlp_bias", 0);
			if (ab != mb)
				refuse(r, ab ? "attention_bias" : "mlp_bias",
				       "pp's bias puts biases on attention and MLP alike (set "
				       "attention_bias and mlp_bias the same)");
			bias = ab;
		} else if (get_bool(r, "attention_bias", 0)) {
			refuse(r, "attention_bias",
			       "pp's bias would also put biases on the MLP, which this family "
			       "lacks");
		}
		if (f->pp_family == PP_FAMILY_MISTRAL || f->pp_family == PP_FAMILY_MIXTRAL) {
			const json_t *w = json_object_get(config, "sliding_window");
			window = !w                ? f->window
				 : json_is_null(w) ? 0
						   : get_int(r, "sliding_window", 0, 1);
		}
	}
	long long experts = 0, top_k = 0;
	double aux = 0.01;
	if (f->pp_family == PP_FAMILY_MIXTRAL) {
		experts = get_int(r, "num_local_experts", 8, 1);
		top_k = get_int(r, "num_experts_per_tok", 2, 1);
		aux = get_num(r, "router_aux_loss_coef", 0.001);
		if (!r->rc && top_k > experts)
			r->rc = pp_errorf(e, PP_EUSAGE,
					  "key 'num_experts_per_tok' is %lld: more than the %lld "
					  "experts",
					  top_k, experts);
	}
	vocab = get_int(r, "vocab_size", f->vocab, 1);
	tied = get_bool(r, "tie_word_embeddings", f->tied);
	double init_std = get_num(r, "initializer_range", 0.02);
	if (r->rc)
		return r->rc;
	static const char *const mlp_names[] = {"swiglu", "geglu", "gelu"};
	const char *fam = pp_family_name(f->pp_family);
	json_t *m = json_pack(
		"{ss sI sI sI sI sI sI sI sI ss ss sf sf ss sf sI sb sb sb sf sb}", "family", fam,
		"d_model", (json_int_t)d, "n_heads", (json_int_t)nh, "n_kv_heads", (json_int_t)nkv,
		"head_dim", (json_int_t)hd, "d_ff", (json_int_t)ff, "n_layers", (json_int_t)nl,
		"vocab_size", (json_int_t)vocab, "max_seq_len", (json_int_t)maxpos, "mlp",
		mlp_names[mlp], "norm", gpt ? "layernorm" : "rmsnorm", "norm_eps", eps,
		"norm_offset", f->pp_family == PP_FAMILY_GEMMA ? 1.0 : 0.0, "pos",
		gpt ? "learned" : "rope", "rope_theta", theta, "sliding_window", (json_int_t)window,
		"tied_embeddings", tied, "embed_scale", f->pp_family == PP_FAMILY_GEMMA, "bias",
		bias, "init_std", init_std, "scaled_residual_init", gpt);
	if (m && experts)
		json_object_update_new(m, json_pack("{sI sI sI ss sf}", "n_experts",
						    (json_int_t)experts, "top_k", (json_int_t)top_k,
						    "moe_every", (json_int_t)1, "router",
						    "topk_softmax", "router_aux_loss_coef", aux));
	if (!m)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	*model = m;
	return 0;
}

/* ---- pp -> config.json -------------------------------------------------------- */

/* PP_EUSAGE unless cond: the pp key and value the family's class cannot express */
#define NEED(cond, ...)                                                                            \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return pp_errorf(e, PP_EUSAGE, __VA_ARGS__);                               \
	} while (0)

static int exportable(const pp_model_cfg *m, const hf_family *f, pp_err *e)
{
	const char *arch = f->architecture;
	const bool mixtral = f->pp_family == PP_FAMILY_MIXTRAL;
	NEED(m->n_experts == 0 || mixtral, "model.n_experts %d: %s has no experts", m->n_experts,
	     arch);
	NEED(m->n_experts > 0 || !mixtral, "model.n_experts 0: %s has experts", arch);
	NEED(!mixtral || m->moe_every == 1, "model.moe_every %d: %s has experts in every layer",
	     m->moe_every, arch);
	NEED(!mixtral || m->router == PP_ROUTE_TOPK_SOFTMAX,
	     "model.router softmax_topk: %s weighs the top k by a softmax over them", arch);
	NEED(!mixtral || m->capacity_factor == 0, "model.capacity_factor %g: %s drops no tokens",
	     m->capacity_factor, arch);
	if (f->pp_family == PP_FAMILY_GPT) {
		NEED(m->norm == PP_NORM_LAYER, "model.norm rmsnorm: %s uses LayerNorm", arch);
		NEED(m->pos == PP_POS_LEARNED, "model.pos is not learned: %s learns positions",
		     arch);
		NEED(m->mlp == PP_MLP_GELU, "model.mlp is gated: %s's MLP is plain GELU", arch);
		NEED(m->n_kv_heads == m->n_heads,
		     "model.n_kv_heads %d != n_heads %d: %s has no GQA", m->n_kv_heads, m->n_heads,
		     arch);
		NEED((long)m->head_dim * m->n_heads == m->d_model,
		     "model.head_dim %d * n_heads %d != d_model %d: %s splits d_model into its "
		     "heads",
		     m->head_dim, m->n_heads, m->d_model, arch);
	} else {
		NEED(m->norm == PP_NORM_RMS, "model.norm layernorm: %s uses RMSNorm", arch);
		NEED(m->pos == PP_POS_ROPE, "model.pos is not rope: %s uses RoPE", arch);
		NEED(m->mlp != PP_MLP_GELU, "model.mlp gelu: %s's MLP is gated", arch);
	}
	bool gemma = f->pp_family == PP_FAMILY_GEMMA;
	NEED(m->norm_offset == (gemma ? 1.0 : 0.0), "model.norm_offset %g: %s's norms scale by %s",
	     m->norm_offset, arch, gemma ? "(1 + w)" : "w");
	NEED(m->embed_scale == gemma, "model.embed_scale %s: %s %s",
	     m->embed_scale ? "true" : "false", arch,
	     gemma ? "multiplies embeddings by sqrt(d_model)" : "does not scale embeddings");
	NEED(m->sliding_window == 0 || f->pp_family == PP_FAMILY_MISTRAL || mixtral,
	     "model.sliding_window %d: %s has no sliding window (families mistral and mixtral "
	     "have)",
	     m->sliding_window, arch);
	NEED(!m->bias || f->pp_family == PP_FAMILY_LLAMA || f->pp_family == PP_FAMILY_GPT,
	     "model.bias true: %s has no biases", arch);
	NEED(m->pos != PP_POS_ROPE || m->head_dim % 2 == 0, "model.head_dim %d is odd",
	     m->head_dim);
	return 0;
}

static json_t *id_or_null(int id) { return id >= 0 ? json_integer(id) : json_null(); }

int hf_config_from_model(const pp_model_cfg *m, const hf_export *x, json_t **config, pp_err *e)
{
	*config = NULL;
	const hf_family *f = family_of_pp(m->family);
	if (!f)
		return pp_errorf(e, PP_EUSAGE,
				 "model.family %s: Hugging Face export takes llama, mistral, "
				 "mixtral, gemma and gpt",
				 pp_family_name(m->family));
	int rc = exportable(m, f, e);
	if (rc)
		return rc;
	json_t *c = json_object();
	json_object_set_new(c, "architectures", json_pack("[s]", f->architecture));
	json_object_set_new(c, "model_type", json_string(f->model_type));
	if (f->pp_family == PP_FAMILY_GPT) {
		json_object_set_new(c, "vocab_size", json_integer(m->vocab_size));
		json_object_set_new(c, "n_positions", json_integer(m->max_seq_len));
		json_object_set_new(c, "n_ctx", json_integer(m->max_seq_len));
		json_object_set_new(c, "n_embd", json_integer(m->d_model));
		json_object_set_new(c, "n_layer", json_integer(m->n_layers));
		json_object_set_new(c, "n_head", json_integer(m->n_heads));
		json_object_set_new(c, "n_inner",
				    m->d_ff == 4 * m->d_model ? json_null()
							      : json_integer(m->d_ff));
		json_object_set_new(c, "activation_function", json_string("gelu_new"));
		json_object_set_new(c, "layer_norm_epsilon", json_real(m->norm_eps));
		/* pp trains without dropout */
		json_object_set_new(c, "resid_pdrop", json_real(0));
		json_object_set_new(c, "embd_pdrop", json_real(0));
		json_object_set_new(c, "attn_pdrop", json_real(0));
		json_object_set_new(c, "scale_attn_weights", json_true());
		json_object_set_new(c, "scale_attn_by_inverse_layer_idx", json_false());
		json_object_set_new(c, "reorder_and_upcast_attn", json_false());
	} else {
		const char *act = m->mlp == PP_MLP_SWIGLU ? "silu" : "gelu_pytorch_tanh";
		json_object_set_new(c, "vocab_size", json_integer(m->vocab_size));
		json_object_set_new(c, "max_position_embeddings", json_integer(m->max_seq_len));
		json_object_set_new(c, "hidden_size", json_integer(m->d_model));
		json_object_set_new(c, "intermediate_size", json_integer(m->d_ff));
		json_object_set_new(c, "num_hidden_layers", json_integer(m->n_layers));
		json_object_set_new(c, "num_attention_heads", json_integer(m->n_heads));
		json_object_set_new(c, "num_key_value_heads", json_integer(m->n_kv_heads));
		json_object_set_new(c, "head_dim", json_integer(m->head_dim));
		json_object_set_new(c, "hidden_act", json_string(act));
		if (f->pp_family == PP_FAMILY_GEMMA)
			json_object_set_new(c, "hidden_activation", json_string(act));
		json_object_set_new(c, "rms_norm_eps", json_real(m->norm_eps));
		json_object_set_new(c, "rope_theta", json_real(m->rope_theta));
		json_object_set_new(c, "rope_scaling", json_null());
		json_object_set_new(c, "attention_dropout", json_real(0));
		if (f->pp_family != PP_FAMILY_MISTRAL && f->pp_family != PP_FAMILY_MIXTRAL)
			json_object_set_new(c, "attention_bias", json_boolean(m->bias));
		if (f->pp_family == PP_FAMILY_LLAMA) {
			json_object_set_new(c, "mlp_bias", json_boolean(m->bias));
			json_object_set_new(c, "pretraining_tp", json_integer(1));
		}
		if (f->pp_family == PP_FAMILY_MISTRAL || f->pp_family == PP_FAMILY_MIXTRAL)
			json_object_set_new(c, "sliding_window",
					    m->sliding_window ? json_integer(m->sliding_window)
							      : json_null());
		if (f->pp_family == PP_FAMILY_MIXTRAL) {
			json_object_set_new(c, "num_local_experts", json_integer(m->n_experts));
			json_object_set_new(c, "num_experts_per_tok", json_integer(m->top_k));
			json_object_set_new(c, "router_aux_loss_coef",
					    json_real(m->router_aux_loss_coef));
			json_object_set_new(c, "output_router_logits", json_false());
		}
	}
	json_object_set_new(c, "initializer_range", json_real(m->init_std));
	json_object_set_new(c, "tie_word_embeddings", json_boolean(m->tied_embeddings));
	json_object_set_new(c, "bos_token_id", id_or_null(x->bos_id));
	json_object_set_new(c, "eos_token_id", id_or_null(x->eos_id));
	json_object_set_new(c, "torch_dtype", json_string(x->torch_dtype));
	json_object_set_new(c, "use_cache", json_true());
	json_object_set_new(c, "transformers_version", json_string(HF_VERSION));
	*config = c;
	return 0;
}

json_t *hf_generation_config(const json_t *config)
{
	json_t *bos = json_object_get(config, "bos_token_id"),
	       *eos = json_object_get(config, "eos_token_id");
	return json_pack("{sb sO sO ss}", "_from_model_config", 1, "bos_token_id",
			 bos ? bos : json_null(), "eos_token_id", eos ? eos : json_null(),
			 "transformers_version", HF_VERSION);
}
