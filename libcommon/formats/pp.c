/* pp's own checkpoints as a tensorio source and sink. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../ckpt/ckpt.h"
#include "../model.h"
#include "tensorio.h"

/* ---- source ------------------------------------------------------------------ */

typedef struct {
	char dir[PP_PATH_MAX + 64];
	ckpt_manifest m;
	int *order; /* source index -> manifest index */
} pp_src;

/* Names in model order: digit runs compare as numbers (layers 2 before 10). */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			char *ea, *eb;
			unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
			if (x != y)
				return x < y ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

static int cmp_tensor(const void *x, const void *y)
{
	return natural_cmp(((const tio_tensor *)x)->name, ((const tio_tensor *)y)->name);
}

static int src_read(tio_source *s, int i, const char *group, float *out, pp_err *e)
{
	pp_src *p = s->impl;
	if (sizeof(pp_real) != sizeof(float))
		return pp_errorf(e, PP_EUSAGE, "tensor formats need the fp32 build of pp");
	return ckpt_read_tensor(p->dir, &p->m, s->tensors[i].name, group, (pp_real *)out, e);
}

static void src_close(tio_source *s)
{
	if (!s)
		return;
	pp_src *p = s->impl;
	if (p) {
		ckpt_manifest_free(&p->m);
		free(p);
	}
	json_decref(s->meta.config);
	free(s->tensors);
	free(s);
}

/* dir is a checkpoint (holds manifest.json) or a run directory (its newest
 * complete checkpoint). */
static int resolve_dir(const char *path, char *dir, size_t n, pp_err *e)
{
	char probe[PP_PATH_MAX + 32];
	struct stat st;
	snprintf(probe, sizeof probe, "%s/manifest.json", path);
	if (stat(probe, &st) == 0) {
		snprintf(dir, n, "%s", path);
		return 0;
	}
	long step;
	int rc = ckpt_find_latest(path, dir, n, &step, e);
	if (!rc && step < 0)
		rc = pp_errorf(e, PP_EUSAGE, "%s: neither a checkpoint (no manifest.json) nor a run "
					     "directory holding one",
			       path);
	return rc;
}

int tio_open_pp(const char *path, tio_source **out, pp_err *e)
{
	*out = NULL;
	tio_source *s = calloc(1, sizeof *s);
	pp_src *p = calloc(1, sizeof *p);
	if (!s || !p) {
		free(s);
		free(p);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	s->format = "pp";
	s->impl = p;
	s->read = src_read;
	s->close = src_close;
	char *text = NULL;
	int rc = resolve_dir(path, p->dir, sizeof p->dir, e);
	if (!rc)
		rc = ckpt_read_manifest(p->dir, &p->m, e);
	if (!rc)
		rc = ckpt_read_config(p->dir, &text, e);
	if (!rc) {
		json_error_t je;
		s->meta.config = json_loads(text, 0, &je);
		s->meta.model = json_object_get(s->meta.config, "model");
		if (!json_is_object(s->meta.model))
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: its stored config has no model",
				       p->dir);
	}
	free(text);
	if (!rc) {
		s->meta.step = p->m.step;
		const char *tk = json_string_value(json_object_get(s->meta.config, "tokenizer"));
		struct stat st;
		if (tk && *tk && stat(tk, &st) == 0)
			snprintf(s->meta.tokenizer, sizeof s->meta.tokenizer, "%s", tk);
		s->n = p->m.n_tensors;
		s->tensors = calloc((size_t)s->n + 1, sizeof *s->tensors);
		if (!s->tensors)
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	for (int i = 0; !rc && i < s->n; i++) {
		const ckpt_tensor_info *t = &p->m.tensors[i];
		tio_tensor *d = &s->tensors[i];
		snprintf(d->name, sizeof d->name, "%s", t->name);
		d->ndim = t->ndim;
		for (int k = 0; k < t->ndim && k < TIO_MAXDIM; k++)
			d->shape[k] = t->global_shape[k];
		d->dtype = TIO_F32;
		d->adam = t->adam;
	}
	if (!rc)
		qsort(s->tensors, (size_t)s->n, sizeof *s->tensors, cmp_tensor);
	if (rc) {
		src_close(s);
		return pp_err_prefix(e, "%s", path);
	}
	*out = s;
	return 0;
}

/* ---- sink: one process's checkpoint of the whole model (pp = tp = dp = 1) --------- */

typedef struct {
	char run_dir[PP_PATH_MAX];
	pp_config cfg;
	pp_stage desc; /* the model's parameter table: names and shapes */
	bool with_adam;
	ckpt_state cs;
	int filled;
} pp_sink;

static void sink_free(pp_sink *k)
{
	for (int i = 0; i < k->cs.n_tensors; i++) {
		free(k->cs.tensors[i].param);
		free(k->cs.tensors[i].m);
		free(k->cs.tensors[i].v);
	}
	free(k->cs.tensors);
	stage_free(&k->desc);
	pp_config_free(&k->cfg);
	free(k);
}

static int sink_put(tio_sink *s, const tio_tensor *t, const float *param, const float *m,
		    const float *v, pp_err *e)
{
	pp_sink *k = s->impl;
	ckpt_tensor *c = NULL;
	for (int i = 0; i < k->cs.n_tensors && !c; i++)
		if (!strcmp(k->cs.tensors[i].name, t->name))
			c = &k->cs.tensors[i];
	if (!c)
		return pp_errorf(e, PP_EUSAGE, "%s is not a tensor of this %s model", t->name,
				 pp_family_name(k->cfg.model.family));
	int64_t n = 1;
	for (int d = 0; d < c->ndim; d++)
		n *= c->shape[d];
	if (tio_numel(t) != n || (t->ndim >= 1 && t->shape[0] != c->shape[0]))
		return pp_errorf(e, PP_EUSAGE, "%s: %lld elements, the model's has %lld", t->name,
				 (long long)tio_numel(t), (long long)n);
	if (c->param)
		return pp_errorf(e, PP_EUSAGE, "%s given twice", t->name);
	c->param = malloc((size_t)n * sizeof(pp_real));
	c->m = calloc((size_t)n, sizeof(pp_real));
	c->v = calloc((size_t)n, sizeof(pp_real));
	if (!c->param || !c->m || !c->v)
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %s", t->name);
	memcpy(c->param, param, (size_t)n * sizeof(float));
	if (m && v && k->with_adam) {
		memcpy(c->m, m, (size_t)n * sizeof(float));
		memcpy(c->v, v, (size_t)n * sizeof(float));
	}
	k->filled++;
	return 0;
}

static int sink_finish(tio_sink *s, pp_err *e)
{
	pp_sink *k = s->impl;
	int rc = 0;
	for (int i = 0; i < k->cs.n_tensors && !rc; i++)
		if (!k->cs.tensors[i].param)
			rc = pp_errorf(e, PP_EUSAGE, "the model's %s was not given",
				       k->cs.tensors[i].name);
	char *json = rc ? NULL : pp_config_dump(&k->cfg);
	k->cs.config_json = json;
	if (!rc)
		rc = ckpt_save(k->run_dir, &k->cs, 0, e);
	free(json);
	sink_free(k);
	free(s);
	return rc;
}

static void sink_abort(tio_sink *s)
{
	sink_free(s->impl);
	free(s);
}

int tio_sink_pp(const char *run_dir, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	*out = NULL;
	pp_sink *k = calloc(1, sizeof *k);
	tio_sink *s = calloc(1, sizeof *s);
	if (!k || !s) {
		free(k);
		free(s);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	snprintf(k->run_dir, sizeof k->run_dir, "%s", run_dir);
	k->with_adam = o->with_adam;
	/* the source's config, or one around its model; then the layout and run_dir */
	json_t *root = o->meta && o->meta->config ? json_deep_copy(o->meta->config)
						  : json_pack("{sO}", "model", o->meta->model);
	const char *key;
	json_t *v;
	json_object_foreach(o->layout, key, v) json_object_set(root, key, v);
	json_object_set_new(root, "run_dir", json_string(run_dir));
	if (o->meta && o->meta->tokenizer[0])
		json_object_set_new(root, "tokenizer", json_string(o->meta->tokenizer));
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	int rc = text ? pp_config_from_json(&k->cfg, text, e) : pp_errorf(e, PP_ERUNTIME, "out of memory");
	free(text);
	if (!rc && (k->cfg.pp != 1 || k->cfg.tp != 1 || k->cfg.dp != 1))
		rc = pp_errorf(e, PP_EUSAGE, "pp=%d tp=%d dp=%d: this sink writes pp=tp=dp=1",
			       k->cfg.pp, k->cfg.tp, k->cfg.dp);
	const pp_ops *ops = NULL;
	if (!rc)
		rc = pp_ops_select("cpu", "fp32", &ops, e);
	stage_spec spec = stage_spec_whole(&k->cfg.model, 1, 1, false);
	spec.no_grad = true;
	if (!rc)
		rc = stage_create(&k->desc, &k->cfg.model, ops, &spec, e);
	if (!rc) {
		k->cs.tensors = calloc((size_t)k->desc.n_params + 1, sizeof *k->cs.tensors);
		if (!k->cs.tensors)
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	for (int i = 0; !rc && i < k->desc.n_params; i++) {
		const pp_param *p = &k->desc.params[i];
		if (k->desc.cfg->tied_embeddings && !strcmp(p->name, "lm_head.weight"))
			continue;
		bool dup = false;
		for (int j = 0; j < k->cs.n_tensors; j++)
			dup |= !strcmp(k->cs.tensors[j].name, p->name);
		if (dup)
			continue; /* the tied embedding's second use */
		ckpt_tensor *c = &k->cs.tensors[k->cs.n_tensors++];
		c->name = p->name;
		c->ndim = p->ndim;
		c->shape[0] = p->shape[0];
		c->shape[1] = p->shape[1];
	}
	k->cs.step = o->meta ? o->meta->step : 0;
	k->cs.rng[0] = k->cfg.seed;
	k->cs.n_data_state = 1;
	k->cs.pp_size = k->cs.tp_size = k->cs.dp_size = 1;
	if (rc) {
		sink_free(k);
		free(s);
		return rc;
	}
	s->impl = k;
	s->put = sink_put;
	s->finish = sink_finish;
	s->abort = sink_abort;
	*out = s;
	return 0;
}
