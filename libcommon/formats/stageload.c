/* A stage's parameters from a tensorio source (stageload.h). */
#include "stageload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *tio_guess_format(const char *path)
{
	char magic[4], name[PP_PATH_MAX + 64];
	FILE *f = fopen(path, "rb");
	bool gguf = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
	if (f)
		fclose(f);
	if (gguf)
		return "gguf";
	size_t n = strlen(path);
	if (n >= 12 && !strcmp(path + n - 12, ".safetensors"))
		return "safetensors";
	snprintf(name, sizeof name, "%s/model.safetensors", path);
	if (!access(name, F_OK))
		return "safetensors";
	snprintf(name, sizeof name, "%s/model.safetensors.index.json", path);
	return access(name, F_OK) ? "pp" : "safetensors";
}

bool tio_loads_param(const pp_param *p) { return !strstr(p->name, ".lora_"); }

/* the source tensor named as p, or -1 with the error */
static int find_tensor(const tio_source *src, const pp_param *p, const char *what, pp_err *e)
{
	for (int i = 0; i < src->n; i++) {
		const tio_tensor *t = &src->tensors[i];
		if (strcmp(t->name, p->name))
			continue;
		int64_t want = p->ndim == 1 ? p->global_shape[0]
					    : p->global_shape[0] * p->global_shape[1];
		bool same = tio_numel(t) == want &&
			    (t->ndim == p->ndim ||
			     (t->ndim == 2 && p->ndim == 1 && t->shape[1] == 1));
		for (int d = 0; same && d < p->ndim && d < t->ndim; d++)
			same = t->shape[d] == p->global_shape[d];
		if (same)
			return i;
		char a[64] = "", b[64] = "";
		for (int d = 0; d < t->ndim; d++)
			snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? " x " : "",
				 (long long)t->shape[d]);
		for (int d = 0; d < p->ndim; d++)
			snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? " x " : "",
				 (long long)p->global_shape[d]);
		pp_errorf(e, PP_EUSAGE,
			  "%s holds %s as %s, but the config's model has it %s: a model of "
			  "another shape",
			  what, p->name, a, b);
		return -1;
	}
	pp_errorf(e, PP_EUSAGE, "%s has no tensor %s, which the config's model needs", what,
		  p->name);
	return -1;
}

int tio_load_stage(pp_stage *s, tio_source *src, const char *what, pp_err *e)
{
	float *whole = NULL;
	pp_real *part = NULL;
	size_t cap = 0, part_cap = 0;
	int rc = 0;
	for (int i = 0; i < s->n_params && !rc; i++) {
		const pp_param *p = &s->params[i];
		/* the part of p this rank holds */
		size_t lo = p->off > s->w_lo ? p->off : s->w_lo;
		size_t hi = p->off + p->n < s->w_hi ? p->off + p->n : s->w_hi;
		if (!tio_loads_param(p) || lo >= hi)
			continue;
		const int t = find_tensor(src, p, what, e);
		if (t < 0) {
			rc = e->code;
			break;
		}
		const size_t n = (size_t)tio_numel(&src->tensors[t]);
		if (n > cap) {
			free(whole);
			whole = malloc((cap = n) * sizeof *whole);
		}
		if (p->n > part_cap) {
			free(part);
			part = malloc((part_cap = p->n) * sizeof *part);
		}
		if (!whole || !part) {
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory reading %s from %s", p->name,
				       what);
			break;
		}
		if ((rc = src->read(src, t, "params", whole, e)))
			break;
		for (size_t j = lo - p->off; j < hi - p->off; j++)
			part[j] = (pp_real)whole[param_global_index(p, j)];
		s->ops->to_device(stage_w(s, lo), part + (lo - p->off),
				  (hi - lo) * sizeof(pp_real));
	}
	free(whole);
	free(part);
	if (!rc)
		stage_weights_changed(s);
	return rc;
}

int tio_model_diff(const tio_source *src, const pp_config *c,
		   void (*fn)(void *ctx, const char *key, const char *there, const char *here),
		   void *ctx)
{
	json_t *a = src->meta.model, *b = json_object_get(c->json, "model");
	int n = 0;
	const char *key;
	json_t *v;
	json_object_foreach(b, key, v)
	{
		json_t *w = json_object_get(a, key);
		if (!w || json_equal(v, w) || !strcmp(key, "preset"))
			continue;
		char *there = json_dumps(w, JSON_ENCODE_ANY),
		     *here = json_dumps(v, JSON_ENCODE_ANY);
		fn(ctx, key, there ? there : "?", here ? here : "?");
		free(there);
		free(here);
		n++;
	}
	return n;
}
