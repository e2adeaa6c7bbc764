/* A stage's parameters from a tensorio source (stageload.h). */
#include "stageload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/sha256.h"
#include "../ckpt/ckpt.h"

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
		/* the part of p this rank holds (a frozen base: all of it) */
		size_t lo = p->off > s->w_lo ? p->off : s->w_lo;
		size_t hi = p->off + p->n < s->w_hi ? p->off + p->n : s->w_hi;
		if (!tio_loads_param(p) || (!p->frozen && lo >= hi))
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
		for (size_t j = 0; j < p->n; j++)
			part[j] = (pp_real)whole[param_global_index(p, j)];
		stage_put_param(s, p, part);
	}
	free(whole);
	free(part);
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

int tio_base_sha256(const char *path, char hex[65], pp_err *e)
{
	struct stat st;
	char file[PP_PATH_MAX + 96], dir[PP_PATH_MAX + 64];
	if (stat(path, &st))
		return pp_errorf(e, PP_EUSAGE, "load_parameters_path %s: %s", path,
				 strerror(errno));
	if (S_ISREG(st.st_mode))
		return sha256_file(path, hex, NULL, e);
	if (!strcmp(tio_guess_format(path), "safetensors")) {
		snprintf(file, sizeof file, "%s/model.safetensors.index.json", path);
		if (access(file, F_OK))
			snprintf(file, sizeof file, "%s/model.safetensors", path);
		return sha256_file(file, hex, NULL, e);
	}
	int rc = ckpt_resolve(path, dir, sizeof dir, e);
	if (rc)
		return rc;
	snprintf(file, sizeof file, "%s/manifest.json", dir);
	return sha256_file(file, hex, NULL, e);
}

int tio_load_base(pp_stage *s, const pp_config *c, pp_err *e)
{
	const char *path = c->load_parameters_path;
	if (!s->n_base)
		return 0;
	if (!path[0]) { /* a seeded base: the seeded stage, the adapters kept */
		pp_real *keep = malloc((s->w_hi - s->w_lo) * sizeof(pp_real) + 1);
		if (!keep)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		s->ops->to_host(keep, s->w, (s->w_hi - s->w_lo) * sizeof(pp_real));
		stage_init_params(s, c->seed);
		s->ops->to_device(s->w, keep, (s->w_hi - s->w_lo) * sizeof(pp_real));
		stage_weights_changed(s);
		free(keep);
		return 0;
	}
	char hex[65], what[PP_PATH_MAX + 64];
	int rc = 0;
	if (c->lora.base_sha256[0] && !(rc = tio_base_sha256(path, hex, e)) &&
	    strcmp(hex, c->lora.base_sha256))
		rc = pp_errorf(e, PP_EUSAGE,
			       "the LoRA base %s has changed: its sha256 is %.12s..., the run "
			       "trained on %.12s... (lora.base_sha256)",
			       path, hex, c->lora.base_sha256);
	tio_source *src = NULL;
	snprintf(what, sizeof what, "the LoRA base %s", path);
	if (!rc)
		rc = tio_open_source(tio_guess_format(path), path, &src, e);
	if (!rc)
		rc = tio_load_stage(s, src, what, e);
	if (src)
		src->close(src);
	return rc;
}
