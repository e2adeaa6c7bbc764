/* pp's tensor list of a model config (modeltable.h): model.c's own
 * parameter table (stage_describe), so a model of any size costs only its
 * table. */
#include "modeltable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"

/* the tensors of a stage of every layer with spec's adapters: the base's
 * without adapters, the adapters alone with them */
static int build(const pp_model_cfg *m, const pp_config *lora, tio_tensor **out, int *n, pp_err *e)
{
	*out = NULL;
	*n = 0;
	stage_spec spec = stage_spec_whole(m, 1, 1, PP_RECOMPUTE_NONE);
	spec.no_grad = true;
	if (lora)
		stage_spec_set_lora(&spec, lora);
	pp_stage s;
	int rc = stage_describe(&s, m, &spec, e);
	if (rc)
		return rc;
	tio_tensor *t = calloc((size_t)s.n_params + 1, sizeof *t);
	if (!t) {
		stage_free(&s);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	int k = 0;
	for (int i = 0; i < s.n_params; i++) {
		const pp_param *p = &s.params[i];
		if (p->frozen || modeltable_find(t, k, p->name) >= 0)
			continue; /* the base of a LoRA run; a tensor used twice is one tensor */
		tio_tensor *d = &t[k++];
		snprintf(d->name, sizeof d->name, "%s", p->name);
		d->ndim = p->ndim;
		for (int j = 0; j < p->ndim && j < TIO_MAXDIM; j++)
			d->shape[j] = p->global_shape[j];
		d->dtype = TIO_F32;
	}
	stage_free(&s);
	*out = t;
	*n = k;
	return 0;
}

int modeltable_build(const pp_model_cfg *m, tio_tensor **out, int *n, pp_err *e)
{
	return build(m, NULL, out, n, e);
}

int modeltable_adapters(const pp_config *c, tio_tensor **out, int *n, pp_err *e)
{
	if (c->lora.rank <= 0)
		return pp_errorf(e, PP_EUSAGE, "the config has no LoRA adapters (lora.rank)");
	return build(&c->model, c, out, n, e);
}

int modeltable_find(const tio_tensor *t, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(t[i].name, name))
			return i;
	return -1;
}

static bool same_shape(const tio_tensor *a, const tio_tensor *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (int d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return false;
	return true;
}

int modeltable_check(const pp_model_cfg *m, const tio_tensor *list, int n, pp_err *e)
{
	tio_tensor *want;
	int nw, rc = modeltable_build(m, &want, &nw, e);
	if (rc)
		return rc;
	const char *family = pp_family_name(m->family);
	for (int i = 0; i < n && !rc; i++) {
		int j = modeltable_find(want, nw, list[i].name);
		char a[96], b[96];
		if (j < 0) {
			rc = pp_errorf(e, PP_EUSAGE, "%s is not a tensor of this %s model",
				       list[i].name, family);
		} else if (modeltable_find(list, i, list[i].name) >= 0) {
			rc = pp_errorf(e, PP_EUSAGE, "%s is given twice", list[i].name);
		} else if (!same_shape(&list[i], &want[j])) {
			pp_shape_str(a, sizeof a, list[i].ndim, list[i].shape);
			pp_shape_str(b, sizeof b, want[j].ndim, want[j].shape);
			rc = pp_errorf(e, PP_EUSAGE, "%s has shape %s, the %s model's is %s",
				       list[i].name, a, family, b);
		}
	}
	for (int j = 0; j < nw && !rc; j++)
		if (modeltable_find(list, n, want[j].name) < 0)
			rc = pp_errorf(e, PP_EUSAGE, "the %s model's %s is missing", family,
				       want[j].name);
	free(want);
	return rc;
}
