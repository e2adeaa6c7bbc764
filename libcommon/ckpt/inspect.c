/* What pp-ckpt shows of checkpoints: a run's list, one checkpoint's
 * contents, and the differences between two (inspect.h). */
#include "inspect.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../config/config.h"
#include "ckpt.h"

static void human_bytes(char *buf, size_t n, double b)
{
	const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
	int u = 0;
	while (b >= 1000 && u < 4) {
		b /= 1000;
		u++;
	}
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

static int64_t total_bytes(const ckpt_manifest *m)
{
	int64_t n = 0;
	for (int i = 0; i < m->n_files; i++)
		n += m->files[i].bytes;
	return n;
}

/* under ZeRO-1 (format version 2) the optimizer files say so */
static bool zero1(const ckpt_manifest *m)
{
	for (int i = 0; i < m->n_files; i++)
		if (!strncmp(m->files[i].name, "optim-", 6))
			return true;
	return false;
}

int ckpt_ls(const char *run_dir, bool json, FILE *out, pp_err *e)
{
	long *steps;
	int n, rc = ckpt_list_steps(run_dir, &steps, &n, e);
	if (rc)
		return rc;
	if (!n) {
		free(steps);
		return pp_errorf(e, PP_EUSAGE, "%s holds no checkpoint (no %s/checkpoints/step_*)",
				 run_dir, run_dir);
	}
	if (!json)
		fprintf(out, "%-10s %-22s %10s  %s\n", "step", "layout", "size", "status");
	for (int i = 0; i < n && !rc; i++) {
		char dir[PP_PATH_MAX + 64], layout[64] = "?", size[32] = "?";
		if ((rc = ckpt_step_dir(run_dir, steps[i], dir, sizeof dir, e)))
			break;
		ckpt_manifest m = {0};
		pp_err why = {0};
		int problems = ckpt_verify_each(dir, false, NULL, NULL, &why);
		bool parsed = ckpt_read_manifest(dir, &m, NULL) == 0;
		if (parsed) {
			char ep[16] = "";
			if (m.ep_size > 1)
				snprintf(ep, sizeof ep, " ep=%d", m.ep_size);
			snprintf(layout, sizeof layout, "pp=%d tp=%d dp=%d%s%s", m.pp_size,
				 m.tp_size, m.dp_size, ep, zero1(&m) ? " zero1" : "");
			human_bytes(size, sizeof size, (double)total_bytes(&m));
		}
		if (json) {
			json_t *o = json_pack("{s:I, s:s, s:b, s:s}", "step", (json_int_t)steps[i],
					      "dir", dir, "sound", problems == 0, "problem",
					      problems ? why.msg : "");
			if (parsed) {
				json_object_set_new(o, "pp", json_integer(m.pp_size));
				json_object_set_new(o, "tp", json_integer(m.tp_size));
				json_object_set_new(o, "dp", json_integer(m.dp_size));
				json_object_set_new(o, "ep", json_integer(m.ep_size));
				json_object_set_new(o, "zero1", json_boolean(zero1(&m)));
				json_object_set_new(o, "bytes", json_integer(total_bytes(&m)));
				json_object_set_new(o, "version", json_integer(m.version));
			}
			char *t = json_dumps(o, JSON_COMPACT);
			fprintf(out, "%s\n", t ? t : "{}");
			free(t);
			json_decref(o);
		} else {
			fprintf(out, "%08ld   %-22s %10s  %s%s\n", steps[i], layout, size,
				problems ? "damaged: " : "sound", problems ? why.msg : "");
		}
		ckpt_manifest_free(&m);
	}
	free(steps);
	return rc;
}

static json_t *dims(int nd, const int64_t *d)
{
	json_t *a = json_array();
	for (int i = 0; i < nd; i++)
		json_array_append_new(a, json_integer((json_int_t)d[i]));
	return a;
}

static const char *dims_str(char *buf, size_t n, int nd, const int64_t *d)
{
	size_t k = 0;
	buf[0] = '\0';
	for (int i = 0; i < nd && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? " x " : "", (long long)d[i]);
	return buf;
}

/* FP8 delayed scaling's state (ckpt_fp8_layer's tensors): each row a
 * state's scale, then its amax history, newest first */
typedef struct {
	int tensors, states, recorded; /* recorded: the longest history's filled entries */
	double lo, hi;                 /* the scales' range */
} fp8_state;

static int fp8_state_of(const char *dir, const ckpt_manifest *m, fp8_state *f, pp_err *e)
{
	memset(f, 0, sizeof *f);
	for (int i = 0; i < m->n_tensors; i++) {
		const ckpt_tensor_info *t = &m->tensors[i];
		int layer;
		if (!ckpt_fp8_layer(t->name, &layer) || t->ndim != 2)
			continue;
		const int64_t rows = t->global_shape[0], cols = t->global_shape[1];
		pp_real *v = malloc((size_t)(rows * cols) * sizeof *v + 1);
		if (!v)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		int rc = ckpt_read_tensor(dir, m, t->name, "params", v, e);
		for (int64_t r = 0; !rc && r < rows; r++) {
			const pp_real *row = v + r * cols;
			const double scale = row[0];
			f->lo = f->states == 0 || scale < f->lo ? scale : f->lo;
			f->hi = f->states == 0 || scale > f->hi ? scale : f->hi;
			f->states++;
			for (int64_t h = cols - 1; h >= 1; h--)
				if (row[h] != 0) {
					f->recorded = (int)h > f->recorded ? (int)h : f->recorded;
					break;
				}
		}
		free(v);
		if (rc)
			return rc;
		f->tensors++;
	}
	return 0;
}

int ckpt_info(const char *path, bool json, FILE *out, pp_err *e)
{
	char dir[PP_PATH_MAX + 64], *text = NULL;
	ckpt_manifest m = {0};
	int rc = ckpt_resolve(path, dir, sizeof dir, e);
	if (!rc)
		rc = ckpt_read_manifest(dir, &m, e);
	if (!rc)
		rc = ckpt_read_config(dir, &text, e);
	json_error_t je;
	json_t *cfg = rc ? NULL : json_loads(text, 0, &je);
	free(text);
	if (!rc && !cfg)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: its config is not JSON: %s", dir,
			       je.text);
	if (rc) {
		ckpt_manifest_free(&m);
		return rc;
	}
	json_t *model = json_object_get(cfg, "model");
	double batch = (double)json_integer_value(json_object_get(cfg, "global_batch"));
	double seq = (double)json_integer_value(json_object_get(cfg, "seq_len"));
	double tokens = (double)m.step * batch * seq;
	int64_t params = 0;
	for (int i = 0; i < m.n_tensors; i++) {
		int64_t v = 1;
		for (int d = 0; d < m.tensors[i].ndim; d++)
			v *= m.tensors[i].global_shape[d];
		params += v;
	}
	bool holds = false;
	pp_err ignore;
	ckpt_holds_optimizer(&m, &holds, &ignore);
	const char *tok = json_string_value(json_object_get(cfg, "tokenizer"));
	json_t *f8 = json_object_get(cfg, "fp8");
	const char *recipe = json_string_value(json_object_get(f8, "recipe"));
	/* a damaged state is said, not fatal: info is how one looks at it */
	fp8_state fs;
	pp_err fe = {0};
	const bool fs_ok = !fp8_state_of(dir, &m, &fs, &fe);
	if (recipe && !strcmp(recipe, "none"))
		recipe = NULL;
	if (json) {
		json_t *ts = json_array();
		for (int i = 0; i < m.n_tensors; i++) {
			const ckpt_tensor_info *t = &m.tensors[i];
			json_t *shards = json_array();
			for (int j = 0; j < t->n_shards; j++)
				json_array_append_new(
					shards,
					json_pack("{s:s, s:o, s:o}", "file",
						  m.files[t->shards[j].file].name, "offset",
						  dims(t->ndim, t->shards[j].offset), "shape",
						  dims(t->ndim, t->shards[j].shape)));
			json_array_append_new(ts, json_pack("{s:s, s:o, s:s, s:b, s:o}", "name",
							    t->name, "global_shape",
							    dims(t->ndim, t->global_shape), "dtype",
							    "float32", "adam", t->adam, "shards",
							    shards));
		}
		json_t *o = json_pack(
			"{s:s, s:I, s:f, s:i, s:{s:i, s:i, s:i, s:i, s:b}, s:I, s:I, s:I, s:b, "
			"s:s, s:O, s:O, s:o}",
			"dir", dir, "step", (json_int_t)m.step, "tokens_seen", tokens,
			"format_version", m.version, "layout", "pp", m.pp_size, "tp", m.tp_size,
			"dp", m.dp_size, "ep", m.ep_size, "zero1", zero1(&m), "parameters",
			(json_int_t)params, "files", (json_int_t)m.n_files, "bytes",
			(json_int_t)total_bytes(&m), "optimizer_state", holds, "tokenizer",
			tok ? tok : "", "model", model ? model : json_null(), "config", cfg,
			"tensors", ts);
		if (recipe && !fs_ok)
			json_object_set_new(
				o, "fp8",
				json_pack("{s:s, s:s}", "recipe", recipe, "error", fe.msg));
		else if (recipe)
			json_object_set_new(
				o, "fp8",
				json_pack("{s:s, s:I, s:i, s:i, s:f, s:f}", "recipe", recipe,
					  "amax_history",
					  json_integer_value(json_object_get(f8, "amax_history")),
					  "recorded", fs.recorded, "states", fs.states, "scale_min",
					  fs.lo, "scale_max", fs.hi));
		char *s = json_dumps(o, JSON_INDENT(1));
		fprintf(out, "%s\n", s ? s : "{}");
		free(s);
		json_decref(o);
	} else {
		char size[32], shape[96];
		human_bytes(size, sizeof size, (double)total_bytes(&m));
		fprintf(out, "checkpoint   %s\n", dir);
		fprintf(out,
			"step         %ld (%.6g tokens seen at global_batch %.0f x seq_len %.0f)\n",
			m.step, tokens, batch, seq);
		fprintf(out, "format       pp-checkpoint version %d\n", m.version);
		fprintf(out, "layout       pp=%d tp=%d dp=%d", m.pp_size, m.tp_size, m.dp_size);
		if (m.ep_size > 1)
			fprintf(out, " ep=%d, experts sharded over ep", m.ep_size);
		/* an fsdp run cuts its AdamW state over its fsdp group */
		const json_int_t fsdp = json_integer_value(json_object_get(cfg, "fsdp"));
		fprintf(out, "%s\n",
			!zero1(&m) ? ""
			: fsdp > 1 ? ", AdamW state sharded over the run's fsdp group"
				   : ", AdamW state sharded over dp (ZeRO-1)");
		fprintf(out, "files        %d, %s\n", m.n_files, size);
		fprintf(out,
			"model        %s %s: d_model %lld, %lld layers, %lld heads (%lld kv), vocab "
			"%lld; %lld parameters\n",
			json_string_value(json_object_get(model, "family")),
			json_string_value(json_object_get(model, "preset")),
			(long long)json_integer_value(json_object_get(model, "d_model")),
			(long long)json_integer_value(json_object_get(model, "n_layers")),
			(long long)json_integer_value(json_object_get(model, "n_heads")),
			(long long)json_integer_value(json_object_get(model, "n_kv_heads")),
			(long long)json_integer_value(json_object_get(model, "vocab_size")),
			(long long)params);
		fprintf(out, "optimizer    %s\n",
			holds ? "AdamW m and v" : "none (parameters only)");
		fprintf(out, "tokenizer    %s\n", tok && *tok ? tok : "none");
		if (recipe && !fs_ok)
			fprintf(out, "fp8          %s scaling; its state cannot be read: %s\n",
				recipe, fe.msg);
		else if (recipe && fs.states)
			fprintf(out,
				"fp8          %s scaling, amax history %lld (%d recorded), margin %g%s: "
				"%d states in %d tensors, scales %.4g .. %.4g\n",
				recipe,
				(long long)json_integer_value(json_object_get(f8, "amax_history")),
				fs.recorded, json_number_value(json_object_get(f8, "margin")),
				json_is_true(json_object_get(f8, "head")) ? ", the head too" : "",
				fs.states, fs.tensors, fs.lo, fs.hi);
		else if (recipe)
			fprintf(out,
				"fp8          %s scaling (no state: each cast scales by its own amax)\n",
				recipe);
		fprintf(out, "tensors      %d\n", m.n_tensors);
		for (int i = 0; i < m.n_tensors; i++) {
			const ckpt_tensor_info *t = &m.tensors[i];
			fprintf(out, "  %-56s %-18s float32 %2d shard%s%s\n", t->name,
				dims_str(shape, sizeof shape, t->ndim, t->global_shape),
				t->n_shards, t->n_shards == 1 ? " " : "s",
				t->adam ? "  +adam" : "");
		}
	}
	json_decref(cfg);
	ckpt_manifest_free(&m);
	return 0;
}

int ckpt_diff(const char *path_a, const char *path_b, double tol, FILE *out, pp_err *e)
{
	char a[PP_PATH_MAX + 64], b[PP_PATH_MAX + 64];
	ckpt_manifest ma = {0}, mb = {0};
	int rc = ckpt_resolve(path_a, a, sizeof a, e);
	if (!rc)
		rc = ckpt_resolve(path_b, b, sizeof b, e);
	if (!rc)
		rc = ckpt_read_manifest(a, &ma, e);
	if (!rc)
		rc = ckpt_read_manifest(b, &mb, e);
	pp_real *x = NULL, *y = NULL;
	size_t cap = 0;
	int differ = 0;
	double worst_rel = 0, worst_abs = 0;
	const char *worst = "";
	if (!rc)
		fprintf(out, "%-56s %14s %14s\n", "tensor", "max |a - b|", "relative");
	for (int i = 0; !rc && i < ma.n_tensors; i++) {
		const ckpt_tensor_info *ta = &ma.tensors[i],
				       *tb = ckpt_manifest_tensor(&mb, ta->name);
		bool same_shape = tb && tb->ndim == ta->ndim;
		for (int d = 0; same_shape && d < ta->ndim; d++)
			same_shape = ta->global_shape[d] == tb->global_shape[d];
		if (!same_shape) {
			fprintf(out, "%-56s %s\n", ta->name, tb ? "shapes differ" : "only in A");
			differ++;
			continue;
		}
		size_t n = 1;
		for (int d = 0; d < ta->ndim; d++)
			n *= (size_t)ta->global_shape[d];
		if (n > cap) {
			free(x);
			free(y);
			cap = n;
			x = malloc(n * sizeof *x);
			y = malloc(n * sizeof *y);
			if (!x || !y) {
				rc = pp_errorf(e, PP_ERUNTIME, "out of memory for %s", ta->name);
				break;
			}
		}
		if ((rc = ckpt_read_tensor(a, &ma, ta->name, "params", x, e)) ||
		    (rc = ckpt_read_tensor(b, &mb, ta->name, "params", y, e)))
			break;
		double mad = 0, big = 0;
		for (size_t j = 0; j < n; j++) {
			double d = fabs((double)x[j] - (double)y[j]);
			mad = d > mad || isnan(d) ? d : mad;
			big = fabs((double)y[j]) > big ? fabs((double)y[j]) : big;
		}
		double rel = big > 0 ? mad / big : mad;
		fprintf(out, "%-56s %14.6g %14.6g\n", ta->name, mad, rel);
		if (!(rel <= tol))
			differ++;
		if (!(rel <= worst_rel)) {
			worst_rel = rel;
			worst_abs = mad;
			worst = ta->name;
		}
	}
	int total = ma.n_tensors;
	for (int i = 0; !rc && i < mb.n_tensors; i++)
		if (!ckpt_manifest_tensor(&ma, mb.tensors[i].name)) {
			fprintf(out, "%-56s only in B\n", mb.tensors[i].name);
			differ++;
			total++;
		}
	if (!rc)
		fprintf(out,
			"%d of %d tensors differ past tolerance %g; largest relative difference "
			"%.6g (absolute %.6g)%s%s\n",
			differ, total, tol, worst_rel, worst_abs, *worst ? " in " : "", worst);
	if (!rc && differ)
		rc = pp_errorf(e, PP_ERUNTIME, "%s and %s differ: %d tensor%s past --tol %g", a, b,
			       differ, differ == 1 ? "" : "s", tol);
	free(x);
	free(y);
	ckpt_manifest_free(&ma);
	ckpt_manifest_free(&mb);
	return rc;
}
