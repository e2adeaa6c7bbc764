/* Views of a LoRA run's checkpoint (lora.h). */
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/hparams.h"
#include "stageload.h"

static bool is_adapter(const char *name)
{
	return strstr(name, ".lora_A.") || strstr(name, ".lora_B.");
}

bool tio_has_adapters(const tio_source *src)
{
	for (int i = 0; i < src->n; i++)
		if (is_adapter(src->tensors[i].name))
			return true;
	return false;
}

int tio_lora_settings(const tio_meta *meta, const tio_tensor *tensors, int n, tio_lora *out,
		      pp_err *e)
{
	json_t *l = json_object_get(meta->config, "lora");
	json_int_t r = json_integer_value(json_object_get(l, "rank"));
	out->targets = NULL;
	if (!l || r <= 0)
		return pp_errorf(e, PP_EUSAGE, "the checkpoint's config has no LoRA adapters");
	out->rank = (int)r;
	out->alpha = json_number_value(json_object_get(l, "alpha"));
	out->dropout = json_number_value(json_object_get(l, "dropout"));
	out->rslora = json_is_true(json_object_get(l, "rslora"));
	/* PEFT's target_modules: the module names whose adapters the source holds */
	json_t **targets = &out->targets;
	*targets = json_array();
	for (int k = 0; k < LORA_MEMBERS; k++) {
		char want[32];
		snprintf(want, sizeof want, ".%s.lora_A.", hparams_lora_names[k]);
		for (int i = 0; i < n; i++)
			if (strstr(tensors[i].name, want)) {
				json_array_append_new(*targets, json_string(hparams_lora_names[k]));
				break;
			}
	}
	return 0;
}

typedef struct {
	tio_source *inner;
	tio_source *base; /* merged: the base the run trained on (its checkpoints hold adapters) */
	tio_lora_view view;
	int *map;       /* view tensor i: inner tensor map[i] */
	int *a, *b;     /* merged: its adapters' inner tensors, -1 for none */
	double scale;   /* merged */
	float *fa, *fb; /* merged: scratch */
} view_impl;

/* The base a LoRA run's checkpoint (src) trained on: its config's
 * load_parameters_path, still of the fingerprint it recorded. */
static int open_base(const tio_source *src, tio_source **base, pp_err *e)
{
	json_t *cfg = src->meta.config;
	const char *path = json_string_value(json_object_get(cfg, "load_parameters_path"));
	const char *sha = json_string_value(
		json_object_get(json_object_get(cfg, "lora"), "base_sha256"));
	char hex[65];
	if (!path || !path[0])
		return pp_errorf(e, PP_EUSAGE,
				 "the run's base was seeded (no load_parameters_path): there is "
				 "no base model to merge the adapters into");
	int rc = sha && sha[0] ? tio_base_sha256(path, hex, e) : 0;
	if (!rc && sha && sha[0] && strcmp(hex, sha))
		rc = pp_errorf(e, PP_EUSAGE,
			       "the LoRA base %s has changed: its sha256 is %.12s..., the run "
			       "trained on %.12s... (lora.base_sha256)",
			       path, hex, sha);
	return rc ? rc : tio_open_source(tio_guess_format(path), path, base, e);
}

static int inner_index(const tio_source *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->tensors[i].name, name))
			return i;
	return -1;
}

static int view_read(tio_source *s, int i, const char *group, float *out, pp_err *e)
{
	view_impl *v = s->impl;
	tio_source *from = v->base ? v->base : v->inner;
	int rc = from->read(from, v->map[i], group, out, e);
	if (rc || v->view != TIO_LORA_MERGED || v->a[i] < 0 || strcmp(group, "params"))
		return rc;
	const tio_tensor *ta = &v->inner->tensors[v->a[i]], *tb = &v->inner->tensors[v->b[i]];
	const int64_t R = ta->shape[0], in = ta->shape[1], rows = tb->shape[0];
	free(v->fa);
	free(v->fb);
	v->fa = malloc((size_t)tio_numel(ta) * sizeof(float));
	v->fb = malloc((size_t)tio_numel(tb) * sizeof(float));
	if (!v->fa || !v->fb)
		return pp_errorf(e, PP_ERUNTIME, "out of memory merging %s", s->tensors[i].name);
	if ((rc = v->inner->read(v->inner, v->a[i], "params", v->fa, e)) ||
	    (rc = v->inner->read(v->inner, v->b[i], "params", v->fb, e)))
		return rc;
#pragma omp parallel for
	for (int64_t o = 0; o < rows; o++)
		for (int64_t c = 0; c < in; c++) {
			double acc = 0;
			for (int64_t k = 0; k < R; k++)
				acc += (double)v->fb[o * R + k] * (double)v->fa[k * in + c];
			out[o * in + c] = (float)((double)out[o * in + c] + v->scale * acc);
		}
	return 0;
}

static void view_close(tio_source *s)
{
	view_impl *v = s->impl;
	v->inner->close(v->inner);
	if (v->base)
		v->base->close(v->base);
	free(v->map);
	free(v->a);
	free(v->b);
	free(v->fa);
	free(v->fb);
	free(v);
	free(s->tensors);
	free(s);
}

int tio_lora_source(tio_source *inner, tio_lora_view view, tio_source **out, pp_err *e)
{
	*out = NULL;
	tio_lora l;
	int rc = tio_lora_settings(&inner->meta, inner->tensors, inner->n, &l, e);
	json_decref(l.targets);
	tio_source *s = calloc(1, sizeof *s);
	view_impl *v = calloc(1, sizeof *v);
	const size_t n = (size_t)inner->n + 1;
	if (!rc && (!s || !v || !(s->tensors = calloc(n, sizeof *s->tensors)) ||
		    !(v->map = calloc(n, sizeof(int))) || !(v->a = calloc(n, sizeof(int))) ||
		    !(v->b = calloc(n, sizeof(int)))))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (rc) {
		if (v) {
			free(v->map);
			free(v->a);
			free(v->b);
		}
		free(v);
		if (s)
			free(s->tensors);
		free(s);
		inner->close(inner);
		return rc;
	}
	s->impl = v;
	v->inner = inner;
	v->view = view;
	v->scale = l.alpha / (l.rslora ? sqrt((double)l.rank) : (double)l.rank);
	/* merged: the base's tensors, from the source the run loaded them from */
	if (view == TIO_LORA_MERGED && (rc = open_base(inner, &v->base, e))) {
		view_close(s);
		return rc;
	}
	const tio_source *list = v->base ? v->base : inner;
	for (int i = 0; i < list->n; i++) {
		const tio_tensor *t = &list->tensors[i];
		if (is_adapter(t->name) != (view == TIO_LORA_ADAPTERS))
			continue;
		const int k = s->n++;
		s->tensors[k] = *t;
		s->tensors[k].adam = false;
		v->map[k] = i;
		v->a[k] = v->b[k] = -1;
		const char *dot = strrchr(t->name, '.');
		if (view == TIO_LORA_MERGED && dot && !strcmp(dot, ".weight")) {
			char na[160], nb[160];
			snprintf(na, sizeof na, "%.*s.lora_A.weight", (int)(dot - t->name),
				 t->name);
			snprintf(nb, sizeof nb, "%.*s.lora_B.weight", (int)(dot - t->name),
				 t->name);
			v->a[k] = inner_index(inner, na);
			v->b[k] = v->a[k] >= 0 ? inner_index(inner, nb) : -1;
			if (v->b[k] < 0)
				v->a[k] = -1;
		}
	}
	s->impl = v;
	s->close = view_close;
	s->format = inner->format;
	s->meta = inner->meta;
	s->meta.has_state = false;
	s->read = view_read;
	s->close = view_close;
	s->impl = v;
	*out = s;
	return 0;
}

/* a PEFT setting pp does not take: absent, or its neutral value */
static int peft_unsupported(const char *file, json_t *cfg, pp_err *e)
{
	static const char *const none[] = {"modules_to_save", "layers_to_transform",
					   "layers_pattern"};
	static const char *const empty[] = {"rank_pattern", "alpha_pattern"};
	static const char *const off[] = {"use_dora", "fan_in_fan_out", "use_qalora"};
	const char *type = json_string_value(json_object_get(cfg, "peft_type"));
	if (type && strcmp(type, "LORA"))
		return pp_errorf(e, PP_EUSAGE, "%s: peft_type %s: pp takes LORA", file, type);
	const char *bias = json_string_value(json_object_get(cfg, "bias"));
	if (bias && strcmp(bias, "none"))
		return pp_errorf(e, PP_EUSAGE, "%s: bias \"%s\": pp trains no biases (\"none\")",
				 file, bias);
	for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
		json_t *v = json_object_get(cfg, none[i]);
		if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
			return pp_errorf(e, PP_EUSAGE, "%s: %s is set; pp takes null", file,
					 none[i]);
	}
	for (size_t i = 0; i < sizeof empty / sizeof *empty; i++) {
		json_t *v = json_object_get(cfg, empty[i]);
		if (v && json_object_size(v))
			return pp_errorf(e, PP_EUSAGE, "%s: %s is set; pp takes one rank and alpha",
					 file, empty[i]);
	}
	for (size_t i = 0; i < sizeof off / sizeof *off; i++)
		if (json_is_true(json_object_get(cfg, off[i])))
			return pp_errorf(e, PP_EUSAGE, "%s: %s is true; pp takes false", file,
					 off[i]);
	return 0;
}

int tio_peft_config(const char *dir, const tio_source *base, const char *path, int n_overrides,
		    char *const *overrides, pp_config *c, pp_err *e)
{
	char file[PP_PATH_MAX + 32], hex[65];
	snprintf(file, sizeof file, "%s/adapter_config.json", dir);
	json_error_t je;
	json_t *a = json_load_file(file, 0, &je);
	if (!a)
		return pp_errorf(e, PP_EUSAGE, "%s: %s (line %d)", file, je.text, je.line);
	int rc = peft_unsupported(file, a, e);
	json_t *r = json_object_get(a, "r"), *alpha = json_object_get(a, "lora_alpha");
	json_t *tm = json_object_get(a, "target_modules"),
	       *drop = json_object_get(a, "lora_dropout");
	if (!rc && (!json_is_integer(r) || json_integer_value(r) < 1))
		rc = pp_errorf(e, PP_EUSAGE, "%s: r must be a positive integer", file);
	if (!rc && !json_is_number(alpha))
		rc = pp_errorf(e, PP_EUSAGE, "%s: lora_alpha must be a number", file);
	if (!rc && drop && !json_is_null(drop) &&
	    (!json_is_number(drop) || json_number_value(drop) < 0 || json_number_value(drop) >= 1))
		rc = pp_errorf(e, PP_EUSAGE, "%s: lora_dropout must be a number in [0, 1)", file);
	/* target_modules: a list of module names, or "all-linear" */
	char targets[256] = "";
	if (!rc && json_is_string(tm) && !strcmp(json_string_value(tm), "all-linear")) {
		snprintf(targets, sizeof targets, "all");
	} else if (!rc && json_is_array(tm) && json_array_size(tm)) {
		size_t i;
		json_t *v;
		json_array_foreach(tm, i, v)
		{
			if (!json_is_string(v)) {
				rc = pp_errorf(e, PP_EUSAGE,
					       "%s: target_modules holds a non-string", file);
				break;
			}
			snprintf(targets + strlen(targets), sizeof targets - strlen(targets),
				 "%s%s", i ? "," : "", json_string_value(v));
		}
	} else if (!rc) {
		rc = pp_errorf(
			e, PP_EUSAGE,
			"%s: target_modules must be a list of module names or \"all-linear\"",
			file);
	}
	if (!rc)
		rc = tio_base_sha256(path, hex, e);
	/* the base's config, or its model's */
	json_t *root = base->meta.config ? json_deep_copy(base->meta.config)
					 : json_pack("{sOss}", "model", base->meta.model, "data",
						     "synthetic");
	if (!rc && !root)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (!rc && !base->meta.config && base->meta.tokenizer[0])
		json_object_set_new(root, "tokenizer", json_string(base->meta.tokenizer));
	char *text = rc ? NULL : json_dumps(root, JSON_COMPACT);
	json_decref(root);
	/* the adapters' settings, then the caller's overrides */
	enum { KV = 7 };
	char kv[KV][PP_PATH_MAX + 32];
	char **ov = calloc((size_t)n_overrides + KV, sizeof *ov);
	if (!rc && (!text || !ov))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (!rc) {
		snprintf(kv[0], sizeof kv[0], "lora.rank=%lld", (long long)json_integer_value(r));
		snprintf(kv[1], sizeof kv[1], "lora.alpha=%.17g", json_number_value(alpha));
		snprintf(kv[2], sizeof kv[2], "lora.rslora=%s",
			 json_is_true(json_object_get(a, "use_rslora")) ? "true" : "false");
		snprintf(kv[3], sizeof kv[3], "lora.targets=%s", targets);
		snprintf(kv[4], sizeof kv[4], "load_parameters_path=%s", path);
		snprintf(kv[5], sizeof kv[5], "lora.base_sha256=%s", hex);
		snprintf(kv[6], sizeof kv[6], "lora.dropout=%.17g",
			 json_is_number(drop) ? json_number_value(drop) : 0.0);
		for (int i = 0; i < KV; i++)
			ov[i] = kv[i];
		for (int i = 0; i < n_overrides; i++)
			ov[KV + i] = overrides[i];
		rc = pp_config_load_text(c, text, n_overrides + KV, ov, e);
	}
	free(ov);
	free(text);
	json_decref(a);
	return rc;
}
