/* Stages' parameter tables as checkpoint entries (stage.h). */
#include "stage.h"

#include "../base/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ckpt_entry_of(const pp_param *p, int block, ckpt_tensor *c)
{
	c->name = p->name;
	c->ndim = p->ndim;
	c->shape[0] = p->block_rows;
	c->shape[1] = p->shape[1];
	c->global_shape[0] = p->global_shape[0];
	c->global_shape[1] = p->global_shape[1];
	c->offset[0] = p->block_row[block];
	c->offset[1] = p->col;
	if (p->ndim == 1)
		c->shape[1] = c->global_shape[1] = 1;
}

void ckpt_saved_block(const pp_param *p, ckpt_tensor *c)
{
	ckpt_entry_of(p, 0, c);
	if (p->n_blocks > 1) { /* whole: gathered over tp, or contiguous rows */
		c->shape[0] = c->global_shape[0];
		c->offset[0] = 0;
	}
}

bool ckpt_rank_saves(const pp_stage *st, const pp_param *p)
{
	return p->tp_owner && !p->frozen && !stage_is_embedding_copy(st, p);
}

bool ckpt_shard_holds(const pp_stage *st, const pp_param *p)
{
	return stage_is_expert(st, p) || st->spec.ep.rank == 0;
}

size_t ckpt_optim_max_ranges(const pp_param *p, size_t lo, size_t hi, bool fused)
{
	size_t a = lo > p->off ? lo : p->off, b = hi < p->off + p->n ? hi : p->off + p->n;
	return a >= b ? 0 : fused ? (b - a) / (size_t)p->shape[1] + 2 : 1;
}

int ckpt_optim_ranges(const pp_param *p, size_t lo, size_t hi, bool fused, int64_t *begin,
		      int64_t *end)
{
	size_t a = lo > p->off ? lo : p->off, b = hi < p->off + p->n ? hi : p->off + p->n;
	size_t cols = (size_t)p->shape[1];
	int n = 0;
	for (size_t j = a - p->off; a < b && j < b - p->off;) {
		/* row by row: local row r is row block_row[r / block_rows] + r %
		 * block_rows of the whole */
		size_t r = j / cols,
		       next = (r + 1) * cols < b - p->off ? (r + 1) * cols : b - p->off;
		int64_t at = (int64_t)j;
		if (fused)
			at = (p->block_row[r / (size_t)p->block_rows] +
			      (int64_t)(r % (size_t)p->block_rows)) *
				     (int64_t)cols +
			     (int64_t)(j % cols);
		if (n && end[n - 1] == at) {
			end[n - 1] += (int64_t)(next - j);
		} else {
			begin[n] = at;
			end[n++] = at + (int64_t)(next - j);
		}
		j = next;
	}
	return n;
}

void ckpt_add_entries(const pp_stage *st, const ckpt_host *h, ckpt_state *cs)
{
	for (int i = 0; i < st->n_params; i++) {
		const pp_param *p = &st->params[i];
		if (p->frozen) /* a LoRA run's base: from its source (tio_load_base) */
			continue;
		size_t len = (size_t)(p->block_rows * p->shape[1]);
		for (int b = 0; b < p->n_blocks; b++) {
			ckpt_tensor *c = &cs->tensors[cs->n_tensors++];
			ckpt_entry_of(p, b, c);
			size_t at = p->off + (size_t)b * len;
			c->param = h->w + at;
			if (h->m && optim_ranges_meet(&h->r, at, at + len)) {
				c->m = h->m + at;
				c->v = h->v + at;
			}
		}
	}
}

int ckpt_fp8_count(const pp_stage *st)
{
	size_t r, c;
	const int L = st->layer_end - st->layer_begin;
	return stage_fp8_meta(st, 0, &r, &c) || stage_fp8_meta(st, -1, &r, &c)
		       ? L + (st->last && st->spec.fp8.head)
		       : 0;
}

int ckpt_fp8_entries(const pp_stage *st, ckpt_state *cs, ckpt_name *names, pp_real **copy)
{
	const int n = ckpt_fp8_count(st), L = st->layer_end - st->layer_begin;
	size_t rows, cols, total = 0, at = 0;
	for (int i = 0; i < n; i++) {
		stage_fp8_meta(st, i < L ? i : -1, &rows, &cols);
		total += rows * cols;
	}
	if (copy && !(*copy = malloc((total ? total : 1) * sizeof(pp_real))))
		return -1;
	for (int i = 0; i < n; i++) {
		const int l = i < L ? i : -1;
		pp_real *meta = stage_fp8_meta(st, l, &rows, &cols);
		ckpt_fp8_name(l < 0 ? -1 : st->layer_begin + l, names[i], sizeof names[i]);
		if (copy) {
			memcpy(*copy + at, meta, rows * cols * sizeof *meta);
			meta = *copy + at;
			at += rows * cols;
		}
		cs->tensors[cs->n_tensors++] = (ckpt_tensor){
			.name = names[i],
			.ndim = 2,
			.shape = {(int64_t)rows, (int64_t)cols},
			.param = meta,
			.optional = !copy};
	}
	return 0;
}

int ckpt_check_model(const pp_config *c, const char *dir, pp_err *e)
{
	char *text = NULL;
	int rc = ckpt_read_config(dir, &text, e);
	if (rc)
		return rc;
	json_error_t je;
	json_t *saved = json_loads(text, 0, &je);
	free(text);
	json_t *a = json_object_get(saved, "model"), *b = json_object_get(c->json, "model");
	rc = 0;
	if (!a || !b) {
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: its stored config has no model",
			       dir);
	} else if (!json_equal(a, b)) {
		const char *key;
		json_t *v;
		json_object_foreach(b, key, v)
		{
			if (!json_equal(v, json_object_get(a, key))) {
				char *sv = json_dumps(json_object_get(a, key), JSON_ENCODE_ANY);
				char *cv = json_dumps(v, JSON_ENCODE_ANY);
				rc = pp_errorf(
					e, PP_EUSAGE,
					"checkpoint %s was saved with model.%s=%s but the config "
					"says model.%s=%s; use another run_dir or the same model",
					dir, key, sv ? sv : "(absent)", key, cv);
				free(sv);
				free(cv);
				break;
			}
		}
		if (!rc)
			rc = pp_errorf(e, PP_EUSAGE, "checkpoint %s holds a different model", dir);
	}
	json_decref(saved);
	return rc;
}

int ckpt_load_stage(pp_stage *s, const pp_config *c, const char *dir, char *found,
		    size_t found_size, long *step, pp_err *e)
{
	char newest[PP_PATH_MAX + 64];
	int rc = 0;
	*step = -1;
	if (!dir) {
		char skipped[4096];
		if ((rc = ckpt_find_resume(c->run_dir, c->resume_from, newest, sizeof newest, step,
					   skipped, sizeof skipped, e)))
			return rc;
		if (*step < 0)
			return pp_errorf(e, PP_EUSAGE,
					 "run_dir %s holds no checkpoint (train, or pp-init -o, "
					 "first)%s%s",
					 c->run_dir, skipped[0] ? ": " : "", skipped);
		if (skipped[0])
			log_info("warning: %s; loading %s, the newest sound one", skipped, newest);
		dir = newest;
	}
	snprintf(found, found_size, "%s", dir);
	ckpt_state cs = {0};
	ckpt_host h = {.w = malloc(s->n_elems * sizeof(pp_real) + 1)};
	cs.tensors = calloc(3 * (size_t)s->n_params + 1, sizeof *cs.tensors);
	if (!h.w || !cs.tensors)
		rc = pp_errorf(e, PP_ERUNTIME,
			       "checkpoint load: out of host memory for %zu parameters",
			       s->n_elems);
	if (!rc && !(rc = ckpt_check_model(c, dir, e))) {
		ckpt_add_entries(s, &h, &cs);
		rc = ckpt_load(dir, &cs, e);
	}
	if (!rc) {
		s->ops->to_device(s->w, h.w, s->n_elems * sizeof(pp_real));
		stage_weights_changed(s);
		*step = cs.step;
	} else {
		pp_err_prefix(e, "loading %s", dir);
	}
	free(h.w);
	free(cs.tensors);
	return rc;
}

int ckpt_config_load(const char *path, int n_overrides, char *const *overrides, pp_config *c,
		     char *dir, size_t dir_size, pp_err *e)
{
	char *text = NULL;
	int rc = ckpt_resolve(path, dir, dir_size, e);
	if (!rc)
		rc = ckpt_read_config(dir, &text, e);
	if (!rc)
		rc = pp_config_load_text(c, text, n_overrides, overrides, e);
	free(text);
	return rc ? pp_err_prefix(e, "the config of %s", path) : 0;
}
