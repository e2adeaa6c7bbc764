/* Hugging Face config.json <-> pp's model object (libcommon/formats/hfconfig.c):
 * every dense preset survives the round trip pp -> config.json -> pp field
 * for field; absent keys take transformers 4.46's class defaults; what
 * either side cannot represent is refused naming the key. (That
 * transformers builds the same model from an exported config.json is
 * tests/e2e/test_safetensors.sh's part.) */
#include <dirent.h>
#include <string.h>

#include "../../libcommon/formats/hfconfig.h"
#include "../../libcommon/formats/tensorio.h"
#include "../tools/harness.h"

/* config.json text -> pp_model_cfg, through tio_model_cfg's validation */
static int import_text(const char *text, pp_model_cfg *m, pp_err *e)
{
	json_error_t je;
	json_t *c = json_loads(text, 0, &je);
	if (!c)
		return pp_errorf(e, PP_EUSAGE, "bad test JSON: %s", je.text);
	tio_meta meta = {0};
	int rc = hf_config_to_model(c, &meta.model, e);
	json_decref(c);
	if (!rc)
		rc = tio_model_cfg(&meta, m, e);
	json_decref(meta.model);
	return rc;
}

static int export_preset(const char *preset, pp_model_cfg *m, json_t **hf, pp_err *e)
{
	char ov[160];
	snprintf(ov, sizeof ov, "model=%.128s", preset);
	char *ovs[] = {ov};
	pp_config c;
	int rc = pp_config_load(&c, NULL, 1, ovs, e);
	if (rc)
		return rc;
	*m = c.model;
	pp_config_free(&c);
	hf_export x = {"bfloat16", 1, 2};
	return hf_config_from_model(m, &x, hf, e);
}

static const char *same_model(const pp_model_cfg *a, const pp_model_cfg *b)
{
#define SAME(f)                                                                                    \
	do {                                                                                       \
		if (a->f != b->f)                                                                  \
			return #f;                                                                 \
	} while (0)
	SAME(family);
	SAME(d_model);
	SAME(n_heads);
	SAME(n_kv_heads);
	SAME(head_dim);
	SAME(d_ff);
	SAME(n_layers);
	SAME(vocab_size);
	SAME(max_seq_len);
	SAME(mlp);
	SAME(norm);
	SAME(norm_eps);
	SAME(norm_offset);
	SAME(pos);
	SAME(sliding_window);
	SAME(tied_embeddings);
	SAME(embed_scale);
	SAME(bias);
	SAME(n_experts);
	SAME(top_k);
	SAME(moe_every);
	SAME(router);
	SAME(init_std);
	if (a->pos == PP_POS_ROPE && a->rope_theta != b->rope_theta)
		return "rope_theta";
	return NULL;
#undef SAME
}

static void round_trips(void)
{
	const char *dir = pp_config_dir();
	char path[4200];
	snprintf(path, sizeof path, "%s/models", dir);
	DIR *d = opendir(path);
	if (!d) {
		th_skip("hfconfig/presets", "no configs/models directory");
		return;
	}
	int n = 0, refused = 0;
	for (struct dirent *de; (de = readdir(d));) {
		size_t len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".json"))
			continue;
		char preset[128], name[160];
		snprintf(preset, sizeof preset, "%.*s", (int)(len - 5), de->d_name);
		snprintf(name, sizeof name, "hfconfig/round-trip/%s", preset);
		pp_model_cfg m, back;
		json_t *hf = NULL;
		pp_err e = {0};
		int rc = export_preset(preset, &m, &hf, &e);
		if (rc && (m.n_experts > 0 || m.pos == PP_POS_RELATIVE)) {
			CHECK(rc == PP_EUSAGE && strstr(e.msg, "model."), name,
			      "a model with experts or relative positions: refused naming the key "
			      "(%s)",
			      e.msg);
			refused++;
			continue;
		}
		char *text = rc ? NULL : json_dumps(hf, 0);
		if (!rc)
			rc = import_text(text, &back, &e);
		const char *diff = rc ? NULL : same_model(&m, &back);
		CHECK(!rc && !diff, name, "%s", rc ? e.msg : diff ? diff : "");
		free(text);
		json_decref(hf);
		n++;
	}
	closedir(d);
	CHECK(n >= 10 && refused >= 2, "hfconfig/round-trip/count", "%d presets, %d refused", n,
	      refused);
}

static void defaults(void)
{
	pp_model_cfg m;
	pp_err e = {0};
	int rc = import_text("{\"model_type\": \"mistral\"}", &m, &e);
	CHECK(!rc && m.sliding_window == 4096 && m.n_kv_heads == 8 && m.max_seq_len == 131072 &&
		      m.d_ff == 14336 && !m.tied_embeddings && m.mlp == PP_MLP_SWIGLU,
	      "hfconfig/defaults/mistral", "%s window %d", e.msg, m.sliding_window);
	rc = import_text("{\"model_type\": \"mistral\", \"sliding_window\": null}", &m, &e);
	CHECK(!rc && m.sliding_window == 0, "hfconfig/defaults/mistral-no-window", "%s", e.msg);
	rc = import_text("{\"model_type\": \"gemma\", \"hidden_size\": 64, "
			 "\"num_attention_heads\": 4, \"num_key_value_heads\": 1, "
			 "\"hidden_activation\": null}",
			 &m, &e);
	CHECK(!rc && m.head_dim == 256 && m.tied_embeddings && m.norm_offset == 1 &&
		      m.embed_scale && m.mlp == PP_MLP_GEGLU && m.norm_eps == 1e-6,
	      "hfconfig/defaults/gemma", "%s head_dim %d", e.msg, m.head_dim);
	rc = import_text(
		"{\"model_type\": \"llama\", \"hidden_size\": 96, \"num_attention_heads\": 6, "
		"\"num_key_value_heads\": null, \"attention_bias\": true, \"mlp_bias\": true}",
		&m, &e);
	CHECK(!rc && m.n_kv_heads == 6 && m.head_dim == 16 && m.bias && m.max_seq_len == 2048,
	      "hfconfig/defaults/llama", "%s", e.msg);
	rc = import_text("{\"model_type\": \"gpt2\", \"n_layer\": 2}", &m, &e);
	CHECK(!rc && m.d_model == 768 && m.d_ff == 3072 && m.head_dim == 64 && m.tied_embeddings &&
		      m.norm == PP_NORM_LAYER && m.pos == PP_POS_LEARNED && m.mlp == PP_MLP_GELU &&
		      m.bias && m.norm_eps == 1e-5 && m.vocab_size == 50257 &&
		      m.max_seq_len == 1024 && m.scaled_residual_init,
	      "hfconfig/defaults/gpt2", "%s", e.msg);
}

static void refused(void)
{
	static const struct {
		const char *name, *config, *want;
	} cases[] = {
		{"rope-scaling",
		 "{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"linear\", "
		 "\"factor\": 2.0}}",
		 "key 'rope_scaling' is {\"type\":\"linear\",\"factor\":2.0}: pp has no RoPE "
		 "scaling"},
		{"partial-rotary", "{\"model_type\": \"llama\", \"partial_rotary_factor\": 0.5}",
		 "key 'partial_rotary_factor' is 0.5"},
		{"experts", "{\"model_type\": \"mistral\", \"num_local_experts\": 8}",
		 "key 'num_local_experts' is 8"},
		{"model-type", "{\"model_type\": \"qwen2\"}", "key 'model_type' is \"qwen2\""},
		{"no-model-type", "{\"hidden_size\": 8}", "no key 'model_type'"},
		{"erf-gelu", "{\"model_type\": \"llama\", \"hidden_act\": \"gelu\"}",
		 "key 'hidden_act' is \"gelu\""},
		{"attention-bias-alone", "{\"model_type\": \"llama\", \"attention_bias\": true}",
		 "key 'attention_bias' is true"},
		{"gemma-bias", "{\"model_type\": \"gemma\", \"attention_bias\": true}",
		 "key 'attention_bias' is true"},
		{"gpt2-relu", "{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}",
		 "key 'activation_function' is \"relu\""},
		{"gpt2-layer-scaling",
		 "{\"model_type\": \"gpt2\", \"scale_attn_by_inverse_layer_idx\": true}",
		 "key 'scale_attn_by_inverse_layer_idx' is true"},
		{"gpt2-heads", "{\"model_type\": \"gpt2\", \"n_embd\": 10, \"n_head\": 3}",
		 "key 'n_embd' is 10: not divisible by n_head 3"},
		{"architecture",
		 "{\"model_type\": \"llama\", \"architectures\": "
		 "[\"LlamaForSequenceClassification\"]}",
		 "key 'architectures' is [\"LlamaForSequenceClassification\"]: expected "
		 "[\"LlamaForCausalLM\"]"},
		{"type", "{\"model_type\": \"llama\", \"hidden_size\": \"64\"}",
		 "key 'hidden_size' is \"64\": expected an integer >= 1"},
		{"quantized", "{\"model_type\": \"llama\", \"quantization_config\": {\"bits\": 4}}",
		 "key 'quantization_config'"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char name[96];
		snprintf(name, sizeof name, "hfconfig/refused/%s", cases[i].name);
		pp_model_cfg m;
		pp_err e = {0};
		int rc = import_text(cases[i].config, &m, &e);
		CHECK(rc == PP_EUSAGE && strstr(e.msg, cases[i].want), name, "rc %d: %s", rc,
		      e.msg);
	}
}

static void export_refused(void)
{
	struct {
		const char *name, *preset, *want;
		int field;
	} const c[] = {
		{"llama-window", "llama-tiny",
		 "model.sliding_window 8: LlamaForCausalLM has no sliding window", 0},
		{"gemma-no-scale", "gemma-tiny", "model.embed_scale false", 1},
		{"gpt-rmsnorm", "gpt-tiny", "model.norm rmsnorm", 2},
		{"mistral-bias", "mistral-tiny",
		 "model.bias true: MistralForCausalLM has no biases", 3},
		{"llama-layernorm", "llama-tiny", "model.norm layernorm", 4},
		{"llama-ungated", "llama-tiny", "model.mlp gelu", 5},
		{"mixtral-capacity", "mixtral-tiny",
		 "model.capacity_factor 1.5: MixtralForCausalLM drops no tokens", 6},
		{"mixtral-glam-router", "mixtral-tiny", "model.router softmax_topk", 7},
		{"llama-experts", "llama-tiny",
		 "model.n_experts 4: LlamaForCausalLM has no experts", 8},
	};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		char name[96];
		snprintf(name, sizeof name, "hfconfig/export-refused/%s", c[i].name);
		pp_model_cfg m;
		json_t *hf = NULL;
		pp_err e = {0};
		if (export_preset(c[i].preset, &m, &hf, &e)) {
			CHECK(0, name, "%s", e.msg);
			continue;
		}
		json_decref(hf);
		hf = NULL;
		switch (c[i].field) {
		case 0:
			m.sliding_window = 8;
			break;
		case 1:
			m.embed_scale = false;
			break;
		case 2:
			m.norm = PP_NORM_RMS;
			break;
		case 3:
			m.bias = true;
			break;
		case 4:
			m.norm = PP_NORM_LAYER;
			break;
		case 6:
			m.capacity_factor = 1.5;
			break;
		case 7:
			m.router = PP_ROUTE_SOFTMAX_TOPK;
			break;
		case 8:
			m.n_experts = 4;
			break;
		default:
			m.mlp = PP_MLP_GELU;
		}
		hf_export x = {"float32", -1, -1};
		int rc = hf_config_from_model(&m, &x, &hf, &e);
		CHECK(rc == PP_EUSAGE && !hf && strstr(e.msg, c[i].want), name, "rc %d: %s", rc,
		      e.msg);
		json_decref(hf);
	}
}

static void written_fields(void)
{
	pp_model_cfg m;
	json_t *hf = NULL;
	pp_err e = {0};
	int rc = export_preset("mistral-tiny", &m, &hf, &e);
	json_t *gen = rc ? NULL : hf_generation_config(hf);
	CHECK(!rc &&
		      !strcmp(json_string_value(
				      json_array_get(json_object_get(hf, "architectures"), 0)),
			      "MistralForCausalLM") &&
		      json_integer_value(json_object_get(hf, "sliding_window")) == 4 &&
		      !strcmp(json_string_value(json_object_get(hf, "torch_dtype")), "bfloat16") &&
		      json_is_false(json_object_get(hf, "tie_word_embeddings")) &&
		      json_integer_value(json_object_get(gen, "bos_token_id")) == 1 &&
		      json_integer_value(json_object_get(gen, "eos_token_id")) == 2,
	      "hfconfig/written/mistral", "%s", e.msg);
	json_decref(gen);
	json_decref(hf);
	rc = export_preset("gpt-tiny", &m, &hf, &e);
	CHECK(!rc && json_is_null(json_object_get(hf, "n_inner")) &&
		      !strcmp(json_string_value(json_object_get(hf, "activation_function")),
			      "gelu_new") &&
		      json_integer_value(json_object_get(hf, "n_positions")) == 128,
	      "hfconfig/written/gpt2", "%s", e.msg);
	json_decref(hf);
}

int main(void)
{
	round_trips();
	defaults();
	refused();
	export_refused();
	written_fields();
	TH_EXIT();
}
