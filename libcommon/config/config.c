/* Run configuration. One table (keys[]) describes every key: its dotted path,
 * JSON type, struct field, default and range. Parsing, defaults, range
 * checks, the resolved JSON and typo suggestions all walk that table; only
 * the rules that relate several keys (derive_defaults, check_consistency)
 * are written out by hand. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hparams.h"
#include "layout.h"

#ifndef PP_SHARE_DIR
#define PP_SHARE_DIR "/usr/local/share/pp"
#endif

/* ---- the key table ------------------------------------------------------ */

typedef enum { K_OBJECT, K_INT, K_LONG, K_U64, K_REAL, K_BOOL, K_STRING, K_LAYERS } key_kind;

enum { R_ANY, R_GE0, R_GE1, R_GEM1, R_GT0, R_UNIT, R_UNIT_OPEN };

static const struct {
	double lo, hi;
	bool lo_open, hi_open;
	const char *text; /* appended to "expected an integer" / "expected a number" */
} ranges[] = {
	[R_ANY] = {-INFINITY, INFINITY, false, false, ""},
	[R_GE0] = {0, INFINITY, false, false, " >= 0"},
	[R_GE1] = {1, INFINITY, false, false, " >= 1"},
	[R_GEM1] = {-1, INFINITY, false, false, " >= -1"},
	[R_GT0] = {0, INFINITY, true, false, " > 0"},
	[R_UNIT] = {0, 1, false, false, " in [0, 1]"},
	[R_UNIT_OPEN] = {0, 1, false, true, " in [0, 1)"},
};

enum {
	F_REQUIRED = 1, /* no default: the config or the preset must set it */
	F_DERIVED = 2,  /* default computed from other keys (derive_defaults) */
	F_NONEMPTY = 4, /* strings */
};

typedef struct {
	const char *path;
	key_kind kind;
	size_t off, size;         /* field in pp_config; size bounds strings */
	const char *const *names; /* enum (K_INT): JSON string <-> index in names */
	const char *def;          /* default as JSON text (NULL: F_REQUIRED or F_DERIVED) */
	int range;
	int flags;
} key_desc;

static const char *const mlp_names[] = {"swiglu", "geglu", "gelu", NULL};
static const char *const norm_names[] = {"rmsnorm", "layernorm", NULL};
static const char *const pos_names[] = {"rope", "learned", "relative", NULL};
static const char *const lr_names[] = {"cosine", "linear", "constant", "wsd", NULL};
/* in the order of PP_ROUTE_* (kernels/ops.h) */
static const char *const router_names[] = {"topk_softmax", "softmax_topk", NULL};
static const char *const nan_names[] = {"abort", "skip", NULL};
/* in the order of PP_RECOMPUTE_* */

/* Values an enum key still takes from before it was one: recompute was a
 * bool, and configs and checkpoints written then say true or false. */
static const struct {
	const char *path, *was, *is;
} enum_aliases[] = {
	{"recompute", "true", "full"},
	{"recompute", "false", "none"},
};
/* enum fields are read and written as int */
_Static_assert(sizeof(sched_kind) == sizeof(int), "sched_kind is stored as an int");

#define PP_STR_(x) #x
#define PP_STR(x)  PP_STR_(x)
#define FIELD(f)   .off = offsetof(pp_config, f), .size = sizeof(((pp_config *)0)->f)
#define OBJ(p)                                                                                     \
	{                                                                                          \
		.path = p, .kind = K_OBJECT                                                        \
	}
#define NUM(p, k, f, d, r, fl)                                                                     \
	{                                                                                          \
		.path = p, .kind = k, FIELD(f), .def = d, .range = r, .flags = fl                  \
	}
#define BOOL(p, f, d, fl)                                                                          \
	{                                                                                          \
		.path = p, .kind = K_BOOL, FIELD(f), .def = d, .flags = fl                         \
	}
#define STR(p, f, d, fl)                                                                           \
	{                                                                                          \
		.path = p, .kind = K_STRING, FIELD(f), .def = d, .flags = fl                       \
	}
#define ENUM(p, k, f, n, d, fl)                                                                    \
	{                                                                                          \
		.path = p, .kind = k, FIELD(f), .names = n, .def = d, .flags = fl                  \
	}

/* Order is the order of the resolved JSON. */
static const key_desc keys[] = {
	OBJ("model"),
	STR("model.preset", model.preset, "\"\"", 0),
	ENUM("model.family", K_INT, model.family, pp_family_names, NULL, F_REQUIRED),
	NUM("model.d_model", K_INT, model.d_model, NULL, R_GE1, F_REQUIRED),
	NUM("model.n_heads", K_INT, model.n_heads, NULL, R_GE1, F_REQUIRED),
	NUM("model.n_kv_heads", K_INT, model.n_kv_heads, NULL, R_GE1, F_DERIVED),
	NUM("model.head_dim", K_INT, model.head_dim, NULL, R_GE1, F_DERIVED),
	NUM("model.d_ff", K_INT, model.d_ff, NULL, R_GE1, F_REQUIRED),
	NUM("model.n_layers", K_INT, model.n_layers, NULL, R_GE1, F_REQUIRED),
	NUM("model.vocab_size", K_INT, model.vocab_size, NULL, R_GE1, F_REQUIRED),
	NUM("model.max_seq_len", K_INT, model.max_seq_len, NULL, R_GE1, F_REQUIRED),
	ENUM("model.mlp", K_INT, model.mlp, mlp_names, NULL, F_REQUIRED),
	ENUM("model.norm", K_INT, model.norm, norm_names, NULL, F_REQUIRED),
	NUM("model.norm_eps", K_REAL, model.norm_eps, NULL, R_GT0, F_REQUIRED),
	NUM("model.norm_offset", K_REAL, model.norm_offset, "0", R_ANY, 0),
	ENUM("model.pos", K_INT, model.pos, pos_names, NULL, F_REQUIRED),
	NUM("model.rope_theta", K_REAL, model.rope_theta, "10000", R_GT0, 0),
	NUM("model.relative_attention_num_buckets", K_INT, model.rel_buckets, "32", R_GE1, 0),
	NUM("model.relative_attention_max_distance", K_INT, model.rel_max_distance, "128", R_GE1,
	    0),
	NUM("model.sliding_window", K_INT, model.sliding_window, "0", R_GE0, 0),
	BOOL("model.tied_embeddings", model.tied_embeddings, NULL, F_REQUIRED),
	BOOL("model.embed_scale", model.embed_scale, "false", 0),
	BOOL("model.bias", model.bias, "false", 0),
	NUM("model.n_experts", K_INT, model.n_experts, "0", R_GE0, 0),
	NUM("model.top_k", K_INT, model.top_k, NULL, R_GE0, F_DERIVED),
	NUM("model.moe_every", K_INT, model.moe_every, "1", R_GE1, 0),
	NUM("model.capacity_factor", K_REAL, model.capacity_factor, "0", R_GE0, 0),
	ENUM("model.router", K_INT, model.router, router_names, "\"topk_softmax\"", 0),
	NUM("model.router_aux_loss_coef", K_REAL, model.router_aux_loss_coef, "0.01", R_GE0, 0),
	NUM("model.router_z_loss_coef", K_REAL, model.router_z_loss_coef, "0", R_GE0, 0),
	NUM("model.init_std", K_REAL, model.init_std, "0.02", R_GT0, 0),
	BOOL("model.scaled_residual_init", model.scaled_residual_init, "false", 0),

	NUM("steps", K_LONG, steps, "100", R_GE1, 0),
	NUM("global_batch", K_INT, global_batch, "8", R_GE1, 0),
	NUM("microbatch", K_INT, microbatch, NULL, R_GE1, F_DERIVED),
	NUM("seq_len", K_INT, seq_len, NULL, R_GE1, F_DERIVED),
	NUM("pp", K_INT, pp, "1", R_GE1, 0),
	NUM("dp", K_INT, dp, "1", R_GE1, 0),
	NUM("tp", K_INT, tp, "1", R_GE1, 0),
	NUM("fsdp", K_INT, fsdp, "1", R_GE1, 0),
	NUM("ep", K_INT, ep, "1", R_GE1, 0),
	NUM("microbatches", K_INT, microbatches, NULL, R_GE1, F_DERIVED),
	NUM("virtual_stages", K_INT, virtual_stages, "1", R_GE1, 0),
	ENUM("schedule", K_INT, schedule, schedule_kind_names, "\"1f1b\"", 0),
	ENUM("recompute", K_INT, recompute, pp_recompute_names, "\"none\"", 0),
	BOOL("shard_optimizer", shard_optimizer, "false", 0),
	NUM("grad_bucket_mb", K_REAL, grad_bucket_mb, "25", R_GE0, 0),
	NUM("loss_chunk_mb", K_REAL, loss_chunk_mb, PP_STR(PP_LOSS_CHUNK_MB), R_GT0, 0),
	NUM("comm_timeout", K_REAL, comm_timeout, "120", R_GT0, 0),
	{.path = "stage_layers", .kind = K_LAYERS, FIELD(stage_layers), .def = "[]"},

	NUM("lr", K_REAL, lr, "3e-4", R_GT0, 0),
	OBJ("lr_schedule"),
	ENUM("lr_schedule.type", K_INT, lr_schedule.type, lr_names, "\"cosine\"", 0),
	NUM("lr_schedule.warmup_steps", K_LONG, lr_schedule.warmup_steps, "-1", R_GEM1, 0),
	NUM("lr_schedule.warmup_fraction", K_REAL, lr_schedule.warmup_fraction, "0.1", R_UNIT, 0),
	NUM("lr_schedule.final_fraction", K_REAL, lr_schedule.final_fraction, "0.1", R_UNIT, 0),
	NUM("lr_schedule.decay_fraction", K_REAL, lr_schedule.decay_fraction, "0.2", R_UNIT, 0),
	OBJ("adamw"),
	NUM("adamw.b1", K_REAL, adamw.b1, "0.9", R_UNIT_OPEN, 0),
	NUM("adamw.b2", K_REAL, adamw.b2, "0.95", R_UNIT_OPEN, 0),
	NUM("adamw.eps", K_REAL, adamw.eps, "1e-8", R_GT0, 0),
	NUM("adamw.weight_decay", K_REAL, adamw.weight_decay, "0.1", R_GE0, 0),
	BOOL("adamw.decay_norms_and_biases", adamw.decay_norms_and_biases, "false", 0),
	NUM("clip_norm", K_REAL, clip_norm, "1.0", R_GE0, 0),
	NUM("seed", K_U64, seed, "0", R_GE0, 0),
	ENUM("dtype", K_INT, dtype, pp_type_names, "\"fp32\"", 0),
	ENUM("device", K_INT, device, pp_device_names, "\"cpu\"", 0),
	ENUM("nan_policy", K_INT, nan_policy, nan_names, "\"abort\"", 0),

	STR("data", data, "\"synthetic\"", F_NONEMPTY),
	STR("val_data", val_data, "\"\"", 0),
	STR("tokenizer", tokenizer, "\"\"", 0),
	BOOL("data_eos", data_eos, "true", 0),
	BOOL("packing", packing, "false", 0),
	STR("load_parameters_path", load_parameters_path, "\"\"", 0),
	OBJ("lora"),
	NUM("lora.rank", K_INT, lora.rank, "0", R_GE0, 0),
	NUM("lora.alpha", K_REAL, lora.alpha, "16", R_GT0, 0),
	BOOL("lora.rslora", lora.rslora, "false", 0),
	STR("lora.targets", lora.targets, "\"all\"", F_NONEMPTY),
	NUM("lora.dropout", K_REAL, lora.dropout, "0", R_UNIT_OPEN, 0),
	ENUM("lora.base_dtype", K_INT, lora.base_dtype, pp_type_names, "\"fp32\"", 0),
	STR("lora.base_sha256", lora.base_sha256, "\"\"", 0),
	OBJ("fp8"),
	ENUM("fp8.recipe", K_INT, fp8.recipe, pp_fp8_recipe_names, "\"none\"", 0),
	NUM("fp8.amax_history", K_INT, fp8.amax_history, "1024", R_GE1, 0),
	NUM("fp8.margin", K_REAL, fp8.margin, "0", R_GE0, 0),
	BOOL("fp8.head", fp8.head, "false", 0),
	STR("run_dir", run_dir, "\"runs/default\"", F_NONEMPTY),
	NUM("checkpoint_period", K_LONG, checkpoint_period, "0", R_GE0, 0),
	BOOL("save_on_completion", save_on_completion, "true", 0),
	NUM("keep", K_INT, keep, "3", R_GE0, 0),
	NUM("resume_from", K_LONG, resume_from, "-1", R_GEM1, 0),
	NUM("eval_interval", K_LONG, eval_interval, "0", R_GE0, 0),
	NUM("eval_batches", K_INT, eval_batches, "4", R_GE1, 0),
	STR("eval_tasks", eval_tasks, "\"\"", 0),
	ENUM("eval_task_format", K_INT, eval_task_format, pp_task_format_names, "\"jsonl\"", 0),
	NUM("log_period", K_LONG, log_period, "1", R_GE1, 0),
	NUM("timing_skip_steps", K_INT, timing_skip_steps, "1", R_GE0, 0),
	STR("profile_steps", profile_steps, "\"\"", 0),
	BOOL("tensorboard", tensorboard, "true", 0),
	BOOL("async_checkpointing", async_checkpointing, "false", 0),
	NUM("step_timeout", K_REAL, step_timeout, "0", R_GE0, 0),
	NUM("max_runtime", K_REAL, max_runtime, "0", R_GE0, 0),
	OBJ("debug"),
	NUM("debug.clock_offset_s", K_REAL, debug.clock_offset_s, "0", R_ANY, 0),
	NUM("debug.clock_offset_rank", K_INT, debug.clock_offset_rank, "-1", R_GEM1, 0),
	NUM("debug.fwd_ms", K_REAL, debug.fwd_ms, "0", R_GE0, 0),
	NUM("debug.bwd_ms", K_REAL, debug.bwd_ms, "0", R_GE0, 0),
	NUM("debug.bwd_w_ms", K_REAL, debug.bwd_w_ms, "0", R_GE0, 0),
	NUM("debug.hang_step", K_LONG, debug.hang_step, "0", R_GE0, 0),
};

#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

static int key_index(const char *path)
{
	for (int i = 0; i < N_KEYS; i++)
		if (!strcmp(keys[i].path, path))
			return i;
	return -1;
}

static const char *last_component(const char *path)
{
	const char *dot = strrchr(path, '.');
	return dot ? dot + 1 : path;
}

/* Whether path's parent is exactly parent ("" for the top level). */
static bool has_parent(const char *path, const char *parent)
{
	size_t n = strlen(parent);
	if (!n)
		return !strchr(path, '.');
	return !strncmp(path, parent, n) && path[n] == '.' && !strchr(path + n + 1, '.');
}

/* ---- suggestions -------------------------------------------------------- */

static int edit_distance(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	if (na > 127 || nb > 127)
		return INT_MAX;
	int row[128];
	for (size_t j = 0; j <= nb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= na; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= nb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[nb];
}

/* The candidate nearest to word, or NULL when none is within
 * max(2, len(word) / 3) edits. */
static const char *nearest(const char *word, const char *const *cands, int n)
{
	int limit = (int)strlen(word) / 3, best = INT_MAX;
	if (limit < 2)
		limit = 2;
	const char *pick = NULL;
	for (int i = 0; i < n; i++) {
		int d = edit_distance(word, cands[i]);
		if (d <= limit && d < best) {
			best = d;
			pick = cands[i];
		}
	}
	return pick;
}

/* "unknown key 'model.n_head' (did you mean 'model.n_heads'?)": a sibling
 * one edit away, else a key of exactly that name elsewhere ("b1" ->
 * "adamw.b1"), else the nearest sibling within the edit limit. */
static int unknown_key(const char *parent, const char *name, pp_err *e)
{
	const char *cands[N_KEYS], *elsewhere = NULL;
	int n = 0;
	for (int i = 0; i < N_KEYS; i++) {
		if (has_parent(keys[i].path, parent))
			cands[n++] = last_component(keys[i].path);
		else if (!elsewhere && !strcmp(last_component(keys[i].path), name))
			elsewhere = keys[i].path;
	}
	const char *sep = *parent ? "." : "";
	const char *near = nearest(name, cands, n);
	if (near && (!elsewhere || edit_distance(name, near) <= 1))
		return pp_errorf(e, PP_EUSAGE, "unknown key '%s%s%s' (did you mean '%s%s%s'?)",
				 parent, sep, name, parent, sep, near);
	if (elsewhere)
		return pp_errorf(e, PP_EUSAGE, "unknown key '%s%s%s' (did you mean '%s'?)", parent,
				 sep, name, elsewhere);
	return pp_errorf(e, PP_EUSAGE, "unknown key '%s%s%s'", parent, sep, name);
}

/* ---- JSON helpers ------------------------------------------------------- */

static void describe(const json_t *v, char *buf, size_t n)
{
	switch (json_typeof(v)) {
	case JSON_STRING:
		snprintf(buf, n, "string \"%.200s\"", json_string_value(v));
		break;
	case JSON_INTEGER:
		snprintf(buf, n, "integer %" JSON_INTEGER_FORMAT, json_integer_value(v));
		break;
	case JSON_REAL:
		snprintf(buf, n, "number %g", json_real_value(v));
		break;
	case JSON_TRUE:
		snprintf(buf, n, "true");
		break;
	case JSON_FALSE:
		snprintf(buf, n, "false");
		break;
	case JSON_NULL:
		snprintf(buf, n, "null");
		break;
	case JSON_OBJECT:
		snprintf(buf, n, "an object");
		break;
	case JSON_ARRAY:
		snprintf(buf, n, "an array");
		break;
	}
}

static int type_error(const char *path, const char *expected, const json_t *v, pp_err *e)
{
	char got[256];
	describe(v, got, sizeof got);
	return pp_errorf(e, PP_EUSAGE, "key '%s': expected %s, got %s", path, expected, got);
}

/* Follows a dotted path through nested objects; NULL where absent. */
static json_t *lookup(json_t *root, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	json_t *v = root;
	for (char *save, *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
		if (!json_is_object(v))
			return NULL;
		v = json_object_get(v, tok);
	}
	return v;
}

/* Sets root[path] = v (stolen), creating objects on the way. */
static int set_path(json_t *root, const char *path, json_t *v, const char *what, pp_err *e)
{
	char buf[1024];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
		json_decref(v);
		return pp_errorf(e, PP_EUSAGE, "%s: key too long", what);
	}
	json_t *obj = root;
	char *comp = buf;
	for (char *dot; (dot = strchr(comp, '.')); comp = dot + 1) {
		*dot = 0;
		if (!*comp)
			break;
		json_t *child = json_object_get(obj, comp);
		if (!child) {
			child = json_object();
			json_object_set_new(obj, comp, child);
		} else if (!json_is_object(child)) {
			char got[256];
			describe(child, got, sizeof got);
			json_decref(v);
			return pp_errorf(e, PP_EUSAGE, "%s: '%.*s' is not an object (it is %s)",
					 what, (int)(dot - buf), path, got);
		}
		obj = child;
	}
	if (!*comp) {
		json_decref(v);
		return pp_errorf(e, PP_EUSAGE, "%s: empty key component in '%s'", what, path);
	}
	json_object_set_new(obj, comp, v);
	return 0;
}

/* "model": "x" is shorthand for "model": {"preset": "x"}. */
static void normalize_model(json_t *root)
{
	json_t *m = json_object_get(root, "model");
	if (json_is_string(m)) {
		json_t *obj = json_pack("{s:O}", "preset", m);
		json_object_set_new(root, "model", obj);
	}
}

/* ---- converting one value ----------------------------------------------- */

static bool as_integer(const json_t *v, long long *out)
{
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return true;
	}
	if (json_is_real(v)) { /* 1e3 is an integer too */
		double d = json_real_value(v);
		if (d == floor(d) && fabs(d) < 9e18) {
			*out = (long long)d;
			return true;
		}
	}
	return false;
}

static bool in_range(int r, double x)
{
	return (ranges[r].lo_open ? x > ranges[r].lo : x >= ranges[r].lo) &&
	       (ranges[r].hi_open ? x < ranges[r].hi : x <= ranges[r].hi);
}

static int enum_error(const key_desc *k, const char *got, pp_err *e)
{
	char list[256] = "";
	int n = 0;
	for (const char *const *s = k->names; *s; s++, n++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", n ? ", " : "",
			 *s);
	const char *near = nearest(got, k->names, n);
	return pp_errorf(e, PP_EUSAGE,
			 "key '%s': unknown value \"%.200s\", expected one of %s%s%s%s", k->path,
			 got, list, near ? " (did you mean '" : "", near ? near : "",
			 near ? "'?)" : "");
}

/* stage_layers: a JSON array of layer counts, or "10,10,9,9" from an override */
static int convert_layers(const key_desc *k, const json_t *v, pp_config *c, pp_err *e)
{
	int n = 0;
	if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x)
		{
			long long y;
			if (n == PP_MAX_CHUNKS || !as_integer(x, &y) || y < 1 || y > INT_MAX)
				return pp_errorf(
					e, PP_EUSAGE,
					"key '%s': expected at most %d layer counts >= 1, got %s",
					k->path, PP_MAX_CHUNKS,
					json_is_integer(x) ? "a count < 1" : "a non-integer");
			c->stage_layers[n++] = (int)y;
		}
	} else if (json_is_string(v)) {
		for (const char *p = json_string_value(v); *p;) {
			char *end;
			long y = strtol(p, &end, 10);
			if (end == p || y < 1 || y > INT_MAX || n == PP_MAX_CHUNKS ||
			    (*end && *end != ','))
				return pp_errorf(
					e, PP_EUSAGE,
					"key '%s': expected layer counts like 10,10,9,9, got \"%.100s\"",
					k->path, json_string_value(v));
			c->stage_layers[n++] = (int)y;
			p = *end ? end + 1 : end;
		}
	} else {
		return type_error(k->path, "an array of layer counts", v, e);
	}
	c->n_stage_layers = n;
	return 0;
}

/* The name an enum key's old value was stands for now; was itself if it is none. */
static const char *enum_alias(const char *path, const char *was)
{
	for (size_t i = 0; i < sizeof enum_aliases / sizeof enum_aliases[0]; i++)
		if (!strcmp(enum_aliases[i].path, path) && !strcmp(enum_aliases[i].was, was))
			return enum_aliases[i].is;
	return was;
}

static int convert(const key_desc *k, const json_t *v, pp_config *c, pp_err *e)
{
	void *field = (char *)c + k->off;
	if (k->names) {
		const char *was = json_is_boolean(v) ? json_is_true(v) ? "true" : "false"
						     : json_string_value(v);
		const char *s = was ? enum_alias(k->path, was) : NULL;
		if (!s || (json_is_boolean(v) && s == was))
			return type_error(k->path, "a string", v, e);
		int idx = 0;
		while (k->names[idx] && strcmp(k->names[idx], s))
			idx++;
		if (!k->names[idx])
			return enum_error(k, s, e);
		*(int *)field = idx; /* every enum is a K_INT field */
		return 0;
	}
	switch (k->kind) {
	case K_INT:
	case K_LONG:
	case K_U64: {
		long long x;
		if (!as_integer(v, &x))
			return type_error(k->path, "an integer", v, e);
		if (!in_range(k->range, (double)x))
			return pp_errorf(e, PP_EUSAGE, "key '%s': expected an integer%s, got %lld",
					 k->path, ranges[k->range].text, x);
		if (k->kind == K_INT && (x > INT_MAX || x < INT_MIN))
			return pp_errorf(e, PP_EUSAGE, "key '%s': %lld is too large (at most %d)",
					 k->path, x, INT_MAX);
		if (k->kind == K_INT)
			*(int *)field = (int)x;
		else if (k->kind == K_LONG)
			*(long *)field = (long)x;
		else
			*(uint64_t *)field = (uint64_t)x;
		return 0;
	}
	case K_REAL: {
		if (!json_is_number(v))
			return type_error(k->path, "a number", v, e);
		double x = json_number_value(v);
		if (!in_range(k->range, x))
			return pp_errorf(e, PP_EUSAGE, "key '%s': expected a number%s, got %g",
					 k->path, ranges[k->range].text, x);
		*(double *)field = x;
		return 0;
	}
	case K_BOOL:
		if (!json_is_boolean(v))
			return type_error(k->path, "true or false", v, e);
		*(bool *)field = json_is_true(v);
		return 0;
	case K_STRING: {
		if (!json_is_string(v))
			return type_error(k->path, "a string", v, e);
		const char *s = json_string_value(v);
		if (strlen(s) >= k->size)
			return pp_errorf(e, PP_EUSAGE,
					 "key '%s': \"%.40s...\" is longer than %zu bytes", k->path,
					 s, k->size - 1);
		if ((k->flags & F_NONEMPTY) && !*s)
			return pp_errorf(e, PP_EUSAGE, "key '%s': expected a non-empty string",
					 k->path);
		snprintf(field, k->size, "%s", s);
		return 0;
	}
	case K_LAYERS:
		return convert_layers(k, v, c, e);
	case K_OBJECT:
		break;
	}
	return 0;
}

/* The field as a JSON value: the inverse of convert. */
static json_t *field_json(const key_desc *k, const pp_config *c)
{
	const void *field = (const char *)c + k->off;
	if (k->names)
		return json_string(k->names[*(const int *)field]);
	switch (k->kind) {
	case K_INT:
		return json_integer(*(const int *)field);
	case K_LONG:
		return json_integer(*(const long *)field);
	case K_U64:
		return json_integer((json_int_t)(*(const uint64_t *)field));
	case K_REAL:
		return json_real(*(const double *)field);
	case K_BOOL:
		return json_boolean(*(const bool *)field);
	case K_STRING:
		return json_string(field);
	case K_LAYERS: {
		json_t *a = json_array();
		for (int i = 0; i < c->n_stage_layers; i++)
			json_array_append_new(a, json_integer(c->stage_layers[i]));
		return a;
	}
	case K_OBJECT:
		return json_object();
	}
	return NULL;
}

/* ---- unknown keys ------------------------------------------------------- */

/* Every key of obj (at dotted path parent) must be in the table; objects in
 * the table must be objects, and are checked in turn. */
static int check_keys(json_t *obj, const char *parent, pp_err *e)
{
	const char *name;
	json_t *v;
	json_object_foreach(obj, name, v)
	{
		char path[256];
		snprintf(path, sizeof path, "%s%s%s", parent, *parent ? "." : "", name);
		int i = key_index(path);
		if (i < 0)
			return unknown_key(parent, name, e);
		if (keys[i].kind != K_OBJECT)
			continue;
		if (!json_is_object(v))
			return type_error(path, "an object", v, e);
		if (check_keys(v, path, e))
			return e ? e->code : PP_EUSAGE;
	}
	return 0;
}

/* ---- files and presets -------------------------------------------------- */

static bool is_dir(const char *path)
{
	struct stat st;
	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

const char *pp_config_dir(void)
{
	static char dir[PP_PATH_MAX];
	const char *env = getenv("PP_CONFIG_DIR");
	if (env && *env) {
		snprintf(dir, sizeof dir, "%s", env);
		return dir;
	}
	/* tools live in build/bin or PREFIX/bin: try ../configs, ../../configs,
	 * then ../share/pp/configs (an install in another PREFIX than built for) */
	char exe[PP_PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		static const char *const up[] = {"/../configs", "/../../configs",
						 "/../share/pp/configs"};
		for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
			char cand[PP_PATH_MAX + 32], models[PP_PATH_MAX + 64];
			snprintf(cand, sizeof cand, "%s%s", exe, up[i]);
			snprintf(models, sizeof models, "%s/models", cand);
			if (is_dir(models) && realpath(cand, dir))
				return dir;
		}
	}
	snprintf(dir, sizeof dir, "%s", PP_SHARE_DIR "/configs");
	return dir;
}

/* Reads a JSON object from a file; errors name the file, line and column. */
static int load_json_file(const char *path, const char *what, json_t **out, pp_err *e)
{
	FILE *f = fopen(path, "r");
	struct stat st;
	if (!f)
		return pp_errorf(e, PP_EUSAGE, "cannot open %s '%s': %s", what, path,
				 strerror(errno));
	if (!fstat(fileno(f), &st) && S_ISDIR(st.st_mode)) {
		fclose(f);
		return pp_errorf(e, PP_EUSAGE, "cannot read %s '%s': is a directory", what, path);
	}
	json_error_t je;
	json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
	fclose(f);
	if (!root)
		return pp_errorf(e, PP_EUSAGE, "%s:%d:%d: invalid JSON in %s: %s", path, je.line,
				 je.column, what, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return pp_errorf(e, PP_EUSAGE, "%s: %s must be a JSON object", path, what);
	}
	*out = root;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int unknown_preset(const char *name, const char *dir, pp_err *e)
{
	char models[PP_PATH_MAX + 16];
	snprintf(models, sizeof models, "%s/models", dir);
	DIR *d = opendir(models);
	if (!d)
		return pp_errorf(
			e, PP_EUSAGE,
			"unknown model preset '%s': cannot list '%s' (%s); set PP_CONFIG_DIR", name,
			models, strerror(errno));
	char *names[256];
	int n = 0;
	for (struct dirent *de; (de = readdir(d)) && n < 256;) {
		size_t len = strlen(de->d_name);
		if (len > 5 && !strcmp(de->d_name + len - 5, ".json"))
			names[n++] = strndup(de->d_name, len - 5);
	}
	closedir(d);
	qsort(names, n, sizeof names[0], cmp_str);
	char list[700] = "";
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
			 names[i]);
	const char *near = nearest(name, (const char *const *)names, n);
	pp_errorf(e, PP_EUSAGE, "unknown model preset '%s'%s%s%s; available in %s: %s", name,
		  near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "", models,
		  n ? list : "(none)");
	for (int i = 0; i < n; i++)
		free(names[i]);
	return PP_EUSAGE;
}

/* Loads configs/models/NAME.json: an object of model keys. */
static int load_preset(const char *name, json_t **out, char *path, size_t path_size, pp_err *e)
{
	if (!*name || strchr(name, '/'))
		return pp_errorf(
			e, PP_EUSAGE,
			"key 'model.preset': \"%s\" is not a preset name (no '/'; presets are "
			"files in %s/models)",
			name, pp_config_dir());
	const char *dir = pp_config_dir();
	snprintf(path, path_size, "%s/models/%s.json", dir, name);
	if (access(path, F_OK))
		return unknown_preset(name, dir, e);
	json_t *p;
	if (load_json_file(path, "model preset", &p, e))
		return e ? e->code : PP_EUSAGE;
	if (json_object_get(p, "preset")) {
		json_decref(p);
		return pp_errorf(e, PP_EUSAGE, "%s: a preset cannot name another preset", path);
	}
	if (check_keys(p, "model", e)) {
		json_decref(p);
		return pp_err_prefix(e, "preset %s", path);
	}
	*out = p;
	return 0;
}

/* ---- resolution --------------------------------------------------------- */

#define REQUIRE(cond, ...)                                                                         \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return pp_errorf(e, PP_EUSAGE, __VA_ARGS__);                               \
	} while (0)

/* Defaults that depend on other keys; given[i] says whether keys[i] was set. */
/* profile_steps: "" | "A:B" with 1 <= A < B | "N" with N >= 1 */
static int parse_profile_steps(pp_config *c, pp_err *e)
{
	const char *s = c->profile_steps;
	long a, b;
	int n = 0;
	c->profile_begin = c->profile_end = 0;
	c->profile_count = 0;
	if (!s[0])
		return 0;
	if (sscanf(s, "%ld:%ld%n", &a, &b, &n) == 2 && !s[n] && a >= 1 && b > a) {
		c->profile_begin = a;
		c->profile_end = b;
		return 0;
	}
	if (sscanf(s, "%ld%n", &a, &n) == 1 && !s[n] && a >= 1 && a <= INT_MAX) {
		c->profile_count = (int)a;
		return 0;
	}
	return pp_errorf(e, PP_EUSAGE,
			 "key 'profile_steps': expected \"A:B\" (steps A to B-1, 1 <= A < B) or a "
			 "number N >= 1 of steps after the warm-up, got \"%s\"",
			 s);
}

static int derive_defaults(pp_config *c, const bool *given, pp_err *e)
{
	if (parse_profile_steps(c, e))
		return PP_EUSAGE;
	pp_model_cfg *m = &c->model;
	if (!given[key_index("model.n_kv_heads")])
		m->n_kv_heads = m->n_heads;
	if (!given[key_index("model.head_dim")]) {
		REQUIRE(m->d_model % m->n_heads == 0,
			"model.d_model %d is not divisible by model.n_heads %d; set model.head_dim",
			m->d_model, m->n_heads);
		m->head_dim = m->d_model / m->n_heads;
	}
	if (!given[key_index("model.top_k")])
		m->top_k = m->n_experts < 2 ? m->n_experts : 2;
	if (!given[key_index("seq_len")])
		c->seq_len = m->max_seq_len < 256 ? m->max_seq_len : 256;
	/* the batch is split over every data-parallel rank: dp * fsdp */
	const int data = pp_config_data_ranks(c);
	const char *dn = c->fsdp > 1 ? "dp * fsdp" : "dp";
	if (!given[key_index("microbatch")]) {
		REQUIRE(c->global_batch % data == 0, "global_batch %d is not divisible by %s %d",
			c->global_batch, dn, data);
		c->microbatch = c->global_batch / data;
	}
	long per_step = (long)data * c->microbatch;
	REQUIRE(c->global_batch % per_step == 0,
		"global_batch %d is not divisible by %s * microbatch = %d * %d", c->global_batch,
		dn, data, c->microbatch);
	int mbs = (int)(c->global_batch / per_step);
	REQUIRE(!given[key_index("microbatches")] || c->microbatches == mbs,
		"microbatches %d does not match global_batch / (%s * microbatch) = %d / (%d * %d) = "
		"%d",
		c->microbatches, dn, c->global_batch, data, c->microbatch, mbs);
	c->microbatches = mbs;
	return 0;
}

static int check_consistency(const pp_config *c, pp_err *e)
{
	const pp_model_cfg *m = &c->model;
	REQUIRE(m->pos != PP_POS_ROPE || m->head_dim % 2 == 0,
		"model.head_dim %d must be even with model.pos rope (rotation pairs)", m->head_dim);
	REQUIRE(m->n_kv_heads <= m->n_heads, "model.n_kv_heads %d exceeds model.n_heads %d",
		m->n_kv_heads, m->n_heads);
	REQUIRE(m->n_heads % m->n_kv_heads == 0,
		"model.n_heads %d is not divisible by model.n_kv_heads %d", m->n_heads,
		m->n_kv_heads);
	REQUIRE(c->seq_len <= m->max_seq_len, "seq_len %d exceeds model.max_seq_len %d (pos %s)",
		c->seq_len, m->max_seq_len, pos_names[m->pos]);
	REQUIRE(m->top_k <= m->n_experts, "model.top_k %d exceeds model.n_experts %d", m->top_k,
		m->n_experts);
	REQUIRE(m->n_experts == 0 || m->top_k >= 1,
		"model.top_k is 0 but model.n_experts is %d: each token needs top_k >= 1 experts",
		m->n_experts);
	if (hparams_check(m, e))
		return PP_EUSAGE;
	REQUIRE(c->lr_schedule.warmup_steps <= c->steps,
		"lr_schedule.warmup_steps %ld exceeds steps %ld", c->lr_schedule.warmup_steps,
		c->steps);
	REQUIRE(c->debug.bwd_w_ms <= c->debug.bwd_ms,
		"debug.bwd_w_ms %g exceeds debug.bwd_ms %g (the weight gradient is part of the "
		"backward pass)",
		c->debug.bwd_w_ms, c->debug.bwd_ms);

	REQUIRE(!c->eval_tasks[0] || c->eval_interval > 0,
		"eval_tasks is set but eval_interval is 0: the tasks are scored at each "
		"evaluation");
	REQUIRE(!c->eval_tasks[0] || c->tokenizer[0],
		"eval_tasks needs the tokenizer (key 'tokenizer') to read the tasks' text");
	REQUIRE(!c->eval_tasks[0] || (c->pp == 1 && c->tp == 1 && c->fsdp == 1 && c->ep == 1),
		"eval_tasks scores on ranks that hold the whole model (pp=1 tp=1 fsdp=1 ep=1; "
		"dp any); this layout is pp=%d tp=%d fsdp=%d ep=%d: score its checkpoints with "
		"pp-eval",
		c->pp, c->tp, c->fsdp, c->ep);

	REQUIRE(!c->packing || m->pos != PP_POS_LEARNED,
		"packing=true: model.pos=learned would need each document's positions from 0");
	if (c->fp8.recipe != PP_FP8_NONE) {
		const char *r = pp_fp8_recipe_names[c->fp8.recipe];
		REQUIRE(c->device == PP_DEVICE_CPU || c->dtype == PP_TYPE_BF16,
			"fp8.recipe=%s on a GPU needs dtype=bf16 (the products' outputs and the "
			"rest of the model)",
			r);
		REQUIRE(c->lora.rank == 0,
			"fp8.recipe=%s with lora.rank: adapters train in the "
			"compute type only",
			r);
	}
	if (c->lora.rank > 0) {
		unsigned targets;
		REQUIRE(m->family != PP_FAMILY_GPT,
			"lora: model.family=gpt (fused c_attn and c_fc) takes no adapters; the "
			"llama, mistral and gemma families do");
		REQUIRE(m->n_experts == 0,
			"lora: a model with experts (model.n_experts=%d) takes no adapters",
			m->n_experts);
		REQUIRE(c->lora.base_dtype == PP_TYPE_REAL || c->dtype == PP_TYPE_BF16,
			"lora.base_dtype=bf16 needs dtype=bf16: the frozen base is held in the "
			"compute type (dtype=%s)",
			pp_type_name(c->dtype));
		if (hparams_lora_targets(c, &targets, e))
			return PP_EUSAGE;
	}

	/* the layout's rules: layout.c holds them, for every tool */
	return layout_check(c, e);
}

static json_t *to_json(const pp_config *c)
{
	json_t *root = json_object();
	for (int i = 0; i < N_KEYS; i++)
		set_path(root, keys[i].path, field_json(&keys[i], c), "dump", NULL);
	return root;
}

/* Whether the model object sets every model key (required: those without a
 * default only). */
static bool model_complete(json_t *model, bool required)
{
	for (int i = 0; i < N_KEYS; i++)
		if (has_parent(keys[i].path, "model") && strcmp(keys[i].path, "model.preset") &&
		    (!required || (keys[i].flags & F_REQUIRED)) &&
		    !json_object_get(model, last_component(keys[i].path)))
			return false;
	return true;
}

/* root: the merged config (model normalized to an object). strict: always
 * load the named preset; otherwise only when the model object lacks a key
 * (a resolved config is self-contained). */
static int resolve(pp_config *c, json_t *root, bool strict, pp_err *e)
{
	memset(c, 0, sizeof *c);
	json_t *model = json_object_get(root, "model");
	if (!model)
		return pp_errorf(e, PP_EUSAGE,
				 "missing key 'model' (a preset name such as \"llama-tiny\", or an "
				 "object of model keys)");
	if (check_keys(root, "", e))
		return e ? e->code : PP_EUSAGE;

	int ip = key_index("model.preset");
	json_t *pv = json_object_get(model, "preset");
	if (pv && convert(&keys[ip], pv, c, e))
		return e ? e->code : PP_EUSAGE;
	json_t *preset = NULL;
	char preset_path[PP_PATH_MAX + 64] = "";
	/* A resolved config from an older pp may lack keys added since; they
	 * take their defaults when its preset is not installed here. */
	if (c->model.preset[0] && (strict || !model_complete(model, false)) &&
	    load_preset(c->model.preset, &preset, preset_path, sizeof preset_path, e) &&
	    (strict || !model_complete(model, true)))
		return e ? e->code : PP_EUSAGE;

	bool given[N_KEYS] = {false};
	int rc = 0;
	for (int i = 0; i < N_KEYS && !rc; i++) {
		const key_desc *k = &keys[i];
		if (k->kind == K_OBJECT || i == ip)
			continue;
		json_t *v = lookup(root, k->path);
		bool from_preset = false;
		if (!v && preset && has_parent(k->path, "model")) {
			v = json_object_get(preset, last_component(k->path));
			from_preset = v != NULL;
		}
		given[i] = v != NULL;
		if (v) {
			rc = convert(k, v, c, e);
			if (rc && from_preset)
				pp_err_prefix(e, "preset %s", preset_path);
		} else if (k->flags & F_REQUIRED) {
			if (c->model.preset[0])
				rc = pp_errorf(e, PP_EUSAGE,
					       "missing key '%s': neither the config nor "
					       "preset '%s' sets it",
					       k->path, c->model.preset);
			else
				rc = pp_errorf(e, PP_EUSAGE,
					       "missing key '%s': the config sets no model.preset "
					       "and has no default for it",
					       k->path);
		} else if (k->def) {
			json_t *d = json_loads(k->def, JSON_DECODE_ANY, NULL);
			rc = convert(k, d, c, e);
			json_decref(d);
		}
	}
	json_decref(preset);
	if (rc || derive_defaults(c, given, e) || check_consistency(c, e)) {
		memset(c, 0, sizeof *c);
		return e ? e->code : PP_EUSAGE;
	}
	c->json = to_json(c);
	return 0;
}

/* "a.b=v": v is JSON when it parses as JSON, else a string. Keys that take
 * a string keep the raw text unless it is a JSON string (run_dir=2024), and
 * "model" unless it is an object (model=gpt-tiny). */
static int apply_override(json_t *root, const char *ov, pp_err *e)
{
	const char *eq = strchr(ov, '=');
	if (!eq || eq == ov)
		return pp_errorf(e, PP_EUSAGE, "override: expected key=value, got '%s'", ov);
	char what[320];
	snprintf(what, sizeof what, "override '%.300s'", ov);
	char key[1024];
	if ((size_t)(eq - ov) >= sizeof key)
		return pp_errorf(e, PP_EUSAGE, "%s: key too long", what);
	memcpy(key, ov, eq - ov);
	key[eq - ov] = 0;
	for (char *dot = strchr(key, '.'); dot; dot = strchr(dot + 1, '.')) {
		*dot = 0;
		int p = key_index(key);
		bool scalar = p >= 0 && keys[p].kind != K_OBJECT;
		*dot = '.';
		if (scalar)
			return pp_errorf(e, PP_EUSAGE, "%s: '%.*s' is not an object", what,
					 (int)(dot - key), key);
	}
	json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
	int i = key_index(key);
	/* an integer JSON cannot hold would otherwise pass as a string */
	const char *digits = eq + 1 + (eq[1] == '-');
	if (!v && *digits && strspn(digits, "0123456789") == strlen(digits) &&
	    !(i >= 0 && keys[i].kind == K_STRING))
		return pp_errorf(e, PP_EUSAGE, "%s: %s is too large (integers are at most %lld)",
				 what, eq + 1, LLONG_MAX);
	bool raw = !strcmp(key, "model") ? !json_is_object(v)
					 : i >= 0 && (keys[i].kind == K_STRING || keys[i].names) &&
						   !json_is_string(v);
	if (raw) {
		json_decref(v);
		v = NULL;
	}
	if (!v && !(v = json_string(eq + 1)))
		return pp_errorf(e, PP_EUSAGE, "%s: value is not valid UTF-8", what);
	if (set_path(root, key, v, what, e))
		return e ? e->code : PP_EUSAGE;
	normalize_model(root);
	return 0;
}

/* root (taken) with the overrides applied, resolved into c */
static int load_root(pp_config *c, json_t *root, int n_overrides, char *const *overrides, pp_err *e)
{
	normalize_model(root);
	int rc = 0;
	for (int i = 0; i < n_overrides && !rc; i++)
		rc = apply_override(root, overrides[i], e);
	if (!rc)
		rc = resolve(c, root, true, e);
	json_decref(root);
	return rc;
}

int pp_config_load(pp_config *c, const char *cfg_path, int n_overrides, char *const *overrides,
		   pp_err *e)
{
	memset(c, 0, sizeof *c);
	json_t *root;
	if (!cfg_path)
		root = json_object();
	else if (load_json_file(cfg_path, "config file", &root, e))
		return e ? e->code : PP_EUSAGE;
	return load_root(c, root, n_overrides, overrides, e);
}

int pp_config_load_text(pp_config *c, const char *json_text, int n_overrides,
			char *const *overrides, pp_err *e)
{
	memset(c, 0, sizeof *c);
	json_error_t je;
	json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return pp_errorf(e, PP_EUSAGE, "config JSON:%d:%d: %s", je.line, je.column,
				 je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return pp_errorf(e, PP_EUSAGE, "config JSON: expected an object at the top level");
	}
	return load_root(c, root, n_overrides, overrides, e);
}

int pp_config_from_json(pp_config *c, const char *json_text, pp_err *e)
{
	memset(c, 0, sizeof *c);
	json_error_t je;
	json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return pp_errorf(e, PP_EUSAGE, "config JSON:%d:%d: %s", je.line, je.column,
				 je.text);
	int rc;
	if (!json_is_object(root))
		rc = pp_errorf(e, PP_EUSAGE, "config JSON: expected an object at the top level");
	else {
		normalize_model(root);
		rc = resolve(c, root, false, e);
	}
	json_decref(root);
	return rc;
}

void pp_config_free(pp_config *c)
{
	if (!c)
		return;
	json_decref(c->json);
	c->json = NULL;
}

/* ---- dumping ------------------------------------------------------------ */

/* Integral values as "10000.0"; others in the shortest %g form that reads
 * back as the same double ("0.0003", not 0.00029999999999999997). */
static void format_real(double x, char *buf, size_t n)
{
	if (x == floor(x) && fabs(x) < 1e15) {
		snprintf(buf, n, "%.1f", x);
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, x);
		if (strtod(buf, NULL) == x)
			return;
	}
}

static void dump_value(FILE *f, const json_t *v, int depth)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *x;
		int i = 0;
		fputc('{', f);
		json_object_foreach((json_t *)v, k, x)
		{
			json_t *ks = json_string(k);
			char *kq = json_dumps(ks, JSON_ENCODE_ANY);
			fprintf(f, "%s\n%*s%s: ", i++ ? "," : "", 2 * (depth + 1), "", kq);
			free(kq);
			json_decref(ks);
			dump_value(f, x, depth + 1);
		}
		fprintf(f, i ? "\n%*s}" : "}", 2 * depth, "");
		break;
	}
	case JSON_REAL: {
		char buf[64];
		format_real(json_real_value(v), buf, sizeof buf);
		fputs(buf, f);
		break;
	}
	default: {
		char *s = json_dumps(v, JSON_ENCODE_ANY);
		fputs(s ? s : "null", f);
		free(s);
	}
	}
}

char *pp_config_dump(const pp_config *c)
{
	json_t *owned = c->json ? NULL : to_json(c);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (f) {
		dump_value(f, c->json ? c->json : owned, 0);
		fputc('\n', f);
		fclose(f);
	}
	json_decref(owned);
	return text;
}
