/* Config: presets against the anchor table, defaults, overrides, every
 * validation error (message names the key), and the resolved-JSON round trip. */
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../libcommon/config/config.h"
#include "../../libcommon/config/hparams.h"
#include "../tools/harness.h"

static char root_dir[PP_PATH_MAX], cfg_dir[PP_PATH_MAX + 16];

/* Writes text to a fresh temporary file; returns its path (static). */
static const char *temp_config(const char *text)
{
	static char path[64];
	snprintf(path, sizeof path, "/tmp/pp-test-config-XXXXXX.json");
	int fd = mkstemps(path, 5);
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

/* Loads an optional config text (via a temporary file) plus overrides. */
static int load_text(pp_config *c, pp_err *e, const char *text, const char *const *ov)
{
	int n = 0;
	while (ov && ov[n])
		n++;
	const char *path = text ? temp_config(text) : NULL;
	int rc = pp_config_load(c, path, n, (char *const *)ov, e);
	if (path)
		unlink(path);
	return rc;
}

#define OV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Two configs are the same when their structs match byte for byte (the json
 * pointer aside) and they dump to the same text. */
static bool same_config(const pp_config *a, const pp_config *b)
{
	pp_config x = *a, y = *b;
	x.json = y.json = NULL;
	char *da = pp_config_dump(a), *db = pp_config_dump(b);
	bool same = !memcmp(&x, &y, sizeof x) && da && db && !strcmp(da, db);
	free(da);
	free(db);
	return same;
}

/* pp_config_from_json(dump) and from jansson's own dump of c->json both
 * rebuild c exactly. */
static void check_round_trip(const char *name, const pp_config *c)
{
	char *text = pp_config_dump(c);
	pp_config r;
	pp_err e = {0};
	int rc = pp_config_from_json(&r, text, &e);
	CHECK(rc == 0 && same_config(c, &r), name, "round trip differs (rc %d: %s)", rc, e.msg);
	pp_config_free(&r);
	free(text);

	char name2[128];
	snprintf(name2, sizeof name2, "%s/jansson", name);
	text = json_dumps(c->json, 0);
	rc = pp_config_from_json(&r, text, &e);
	CHECK(rc == 0 && same_config(c, &r), name2, "round trip differs (rc %d: %s)", rc, e.msg);
	pp_config_free(&r);
	free(text);
}

static void test_config_dir(void)
{
	CHECK(!strcmp(pp_config_dir(), cfg_dir), "config/dir/env", "got '%s'", pp_config_dir());

	/* Without the variable: ../configs or ../../configs beside the executable. */
	unsetenv("PP_CONFIG_DIR");
	char exe[PP_PATH_MAX], want[PP_PATH_MAX + 32] = "", probe[PP_PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[n > 0 ? n : 0] = 0;
	*strrchr(exe, '/') = 0;
	const char *ups[] = {"/../configs", "/../../configs"};
	for (int i = 0; i < 2 && !*want; i++) {
		struct stat st;
		snprintf(probe, sizeof probe, "%s%s/models", exe, ups[i]);
		if (!stat(probe, &st) && S_ISDIR(st.st_mode)) {
			snprintf(probe, sizeof probe, "%s%s", exe, ups[i]);
			if (!realpath(probe, want))
				want[0] = 0;
		}
	}
	const char *got = pp_config_dir();
	if (*want)
		CHECK(!strcmp(got, want), "config/dir/exe", "got '%s', want '%s'", got, want);
	else
		CHECK(strlen(got) > 8 && !strcmp(got + strlen(got) - 8, "/configs"),
		      "config/dir/share", "got '%s'", got);
	setenv("PP_CONFIG_DIR", cfg_dir, 1);
}

/* ---- presets ------------------------------------------------------------ */

static const struct anchor {
	const char *name;
	int family, d_model, n_heads, n_kv_heads, head_dim, d_ff, n_layers, vocab, max_seq;
	int mlp, norm;
	double eps;
	int pos;
	double theta;
	int window;
	bool tied;
	int experts, top_k;
} anchors[] = {
#define LL  PP_FAMILY_LLAMA
#define SW  PP_MLP_SWIGLU
#define RMS PP_NORM_RMS
	{"llama2-7b", LL, 4096, 32, 32, 128, 11008, 32, 32000, 4096, SW, RMS, 1e-5, PP_POS_ROPE,
	 1e4, 0, false, 0, 0},
	{"llama2-13b", LL, 5120, 40, 40, 128, 13824, 40, 32000, 4096, SW, RMS, 1e-5, PP_POS_ROPE,
	 1e4, 0, false, 0, 0},
	{"llama2-70b", LL, 8192, 64, 8, 128, 28672, 80, 32000, 4096, SW, RMS, 1e-5, PP_POS_ROPE,
	 1e4, 0, false, 0, 0},
	{"llama3-8b", LL, 4096, 32, 8, 128, 14336, 32, 128256, 8192, SW, RMS, 1e-5, PP_POS_ROPE,
	 5e5, 0, false, 0, 0},
	{"llama3-70b", LL, 8192, 64, 8, 128, 28672, 80, 128256, 8192, SW, RMS, 1e-5, PP_POS_ROPE,
	 5e5, 0, false, 0, 0},
	{"mistral-7b", PP_FAMILY_MISTRAL, 4096, 32, 8, 128, 14336, 32, 32000, 32768, SW, RMS, 1e-5,
	 PP_POS_ROPE, 1e4, 4096, false, 0, 0},
	{"mixtral-8x7b", PP_FAMILY_MIXTRAL, 4096, 32, 8, 128, 14336, 32, 32000, 32768, SW, RMS,
	 1e-5, PP_POS_ROPE, 1e6, 0, false, 8, 2},
	{"gemma-2b", PP_FAMILY_GEMMA, 2048, 8, 1, 256, 16384, 18, 256128, 8192, PP_MLP_GEGLU, RMS,
	 1e-6, PP_POS_ROPE, 1e4, 0, true, 0, 0},
	{"gemma-7b", PP_FAMILY_GEMMA, 3072, 16, 16, 256, 24576, 28, 256128, 8192, PP_MLP_GEGLU, RMS,
	 1e-6, PP_POS_ROPE, 1e4, 0, true, 0, 0},
	{"gpt3-175b", PP_FAMILY_GPT, 12288, 96, 96, 128, 49152, 96, 50304, 2048, PP_MLP_GELU,
	 PP_NORM_LAYER, 1e-5, PP_POS_LEARNED, 1e4, 0, true, 0, 0},
	{"gpt-126m", PP_FAMILY_GPT, 768, 12, 12, 64, 3072, 12, 50304, 2048, PP_MLP_GELU,
	 PP_NORM_LAYER, 1e-5, PP_POS_LEARNED, 1e4, 0, true, 0, 0},
	{"gpt-5b", PP_FAMILY_GPT, 4096, 32, 32, 128, 16384, 24, 50304, 2048, PP_MLP_GELU,
	 PP_NORM_LAYER, 1e-5, PP_POS_LEARNED, 1e4, 0, true, 0, 0},
	{"glam-126m-64e", PP_FAMILY_MIXTRAL, 768, 12, 12, 64, 3072, 12, 50304, 1024, PP_MLP_GEGLU,
	 RMS, 1e-6, PP_POS_RELATIVE, 1e4, 0, true, 64, 2},
	{"llama-1b", LL, 2048, 32, 4, 64, 5632, 22, 32000, 2048, SW, RMS, 1e-5, PP_POS_ROPE, 1e4, 0,
	 false, 0, 0},
	{"llama-110m", LL, 768, 12, 12, 64, 2048, 12, 32000, 1024, SW, RMS, 1e-5, PP_POS_ROPE, 1e4,
	 0, false, 0, 0},
	{"llama-tiny", LL, 64, 4, 2, 16, 96, 2, 256, 128, SW, RMS, 1e-5, PP_POS_ROPE, 1e4, 0, false,
	 0, 0},
	{"mistral-tiny", PP_FAMILY_MISTRAL, 64, 4, 2, 16, 96, 2, 256, 128, SW, RMS, 1e-5,
	 PP_POS_ROPE, 1e6, 4, false, 0, 0},
	{"mixtral-tiny", PP_FAMILY_MIXTRAL, 64, 4, 2, 16, 96, 2, 256, 128, SW, RMS, 1e-5,
	 PP_POS_ROPE, 1e6, 0, false, 4, 2},
	{"gemma-tiny", PP_FAMILY_GEMMA, 64, 4, 1, 32, 96, 2, 256, 128, PP_MLP_GEGLU, RMS, 1e-6,
	 PP_POS_ROPE, 1e4, 0, true, 0, 0},
	{"gpt-tiny", PP_FAMILY_GPT, 64, 4, 4, 16, 256, 2, 256, 128, PP_MLP_GELU, PP_NORM_LAYER,
	 1e-5, PP_POS_LEARNED, 1e4, 0, true, 0, 0},
#undef LL
#undef SW
#undef RMS
};

static void check_anchor(const struct anchor *a, const pp_model_cfg *m)
{
	char name[128];
	snprintf(name, sizeof name, "config/anchor/%s", a->name);
	bool ok = m->family == a->family && m->d_model == a->d_model && m->n_heads == a->n_heads &&
		  m->n_kv_heads == a->n_kv_heads && m->head_dim == a->head_dim &&
		  m->d_ff == a->d_ff && m->n_layers == a->n_layers && m->vocab_size == a->vocab &&
		  m->max_seq_len == a->max_seq && m->mlp == a->mlp && m->norm == a->norm &&
		  m->norm_eps == a->eps && m->pos == a->pos && m->rope_theta == a->theta &&
		  m->sliding_window == a->window && m->tied_embeddings == a->tied &&
		  m->n_experts == a->experts && m->top_k == a->top_k;
	CHECK(ok, name,
	      "got family %s d %d heads %d/%d hd %d ff %d L %d V %d seq %d eps %g theta %g win %d "
	      "tied %d experts %d/%d",
	      pp_family_name(m->family), m->d_model, m->n_heads, m->n_kv_heads, m->head_dim,
	      m->d_ff, m->n_layers, m->vocab_size, m->max_seq_len, m->norm_eps, m->rope_theta,
	      m->sliding_window, m->tied_embeddings, m->n_experts, m->top_k);
}

static int load_preset(pp_config *c, const char *name, pp_err *e)
{
	char ov[300];
	snprintf(ov, sizeof ov, "model=%s", name);
	return load_text(c, e, NULL, OV(ov));
}

/* Every file in configs/models loads, validates and round-trips; those in
 * the anchor table carry its values. */
static void test_presets(void)
{
	char models[PP_PATH_MAX + 32];
	snprintf(models, sizeof models, "%s/models", cfg_dir);
	DIR *d = opendir(models);
	CHECK(d != NULL, "config/preset/dir", "cannot open %s", models);
	if (!d)
		return;
	int n = 0, anchored = 0;
	for (struct dirent *de; (de = readdir(d));) {
		size_t len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".json"))
			continue;
		char preset[256], name[300];
		snprintf(preset, sizeof preset, "%.*s", (int)(len - 5), de->d_name);
		snprintf(name, sizeof name, "config/preset/%s", preset);
		pp_config c;
		pp_err e = {0};
		int rc = load_preset(&c, preset, &e);
		CHECK(rc == 0 && !strcmp(c.model.preset, preset), name, "rc %d: %s", rc, e.msg);
		n++;
		if (rc)
			continue;
		snprintf(name, sizeof name, "config/preset/%s/round_trip", preset);
		check_round_trip(name, &c);
		for (size_t i = 0; i < sizeof anchors / sizeof anchors[0]; i++)
			if (!strcmp(anchors[i].name, preset)) {
				check_anchor(&anchors[i], &c.model);
				anchored++;
			}
		pp_config_free(&c);
	}
	closedir(d);
	CHECK(anchored == (int)(sizeof anchors / sizeof anchors[0]), "config/preset/all_present",
	      "%d of %zu anchor presets found among %d files", anchored,
	      sizeof anchors / sizeof anchors[0], n);

	/* The details the table above does not cover. */
	pp_config c;
	pp_err e = {0};
	if (!load_preset(&c, "gpt-126m", &e)) {
		const pp_model_cfg *m = &c.model;
		CHECK(m->init_std == 0.023 && m->bias && m->scaled_residual_init && !m->embed_scale,
		      "config/anchor/gpt-126m/init", "init_std %g bias %d scaled %d", m->init_std,
		      m->bias, m->scaled_residual_init);
		pp_config_free(&c);
	}
	if (!load_preset(&c, "gemma-7b", &e)) {
		const pp_model_cfg *m = &c.model;
		CHECK(m->norm_offset == 1 && m->embed_scale && !m->bias &&
			      m->n_heads * m->head_dim != m->d_model,
		      "config/anchor/gemma-7b/norm", "offset %g embed_scale %d", m->norm_offset,
		      m->embed_scale);
		pp_config_free(&c);
	}
	if (!load_preset(&c, "glam-126m-64e", &e)) {
		const pp_model_cfg *m = &c.model;
		CHECK(m->moe_every == 2 && m->capacity_factor == 2.0, "config/anchor/glam/moe",
		      "moe_every %d capacity %g", m->moe_every, m->capacity_factor);
		pp_config_free(&c);
	}
	if (!load_preset(&c, "mixtral-8x7b", &e)) {
		CHECK(c.model.capacity_factor == 0 && c.model.moe_every == 1,
		      "config/anchor/mixtral-8x7b/dropless", "capacity %g moe_every %d",
		      c.model.capacity_factor, c.model.moe_every);
		pp_config_free(&c);
	}
}

/* ---- defaults and run configs ------------------------------------------- */

static void test_defaults(void)
{
	pp_config c;
	pp_err e = {0};
	int rc = load_text(&c, &e, NULL, OV("model=llama-tiny"));
	CHECK(rc == 0, "config/defaults/load", "%s", e.msg);
	if (rc)
		return;
	bool ok = c.steps == 100 && c.global_batch == 8 && c.microbatch == 8 &&
		  c.microbatches == 1 && c.seq_len == 128 && c.pp == 1 && c.dp == 1 && c.tp == 1 &&
		  c.virtual_stages == 1 && c.schedule == SCHED_1F1B &&
		  c.recompute == PP_RECOMPUTE_NONE && !c.shard_optimizer && c.lr == 3e-4 &&
		  c.lr_schedule.type == PP_LR_COSINE && c.lr_schedule.warmup_steps == -1 &&
		  c.lr_schedule.warmup_fraction == 0.1 && c.lr_schedule.final_fraction == 0.1 &&
		  c.lr_schedule.decay_fraction == 0.2 && c.adamw.b1 == 0.9 && c.adamw.b2 == 0.95 &&
		  c.adamw.eps == 1e-8 && c.adamw.weight_decay == 0.1 &&
		  !c.adamw.decay_norms_and_biases && c.clip_norm == 1.0 && c.seed == 0 &&
		  c.dtype == PP_TYPE_REAL && c.device == PP_DEVICE_CPU &&
		  c.nan_policy == PP_NAN_ABORT && !strcmp(c.data, "synthetic") && !c.val_data[0] &&
		  !c.tokenizer[0] && c.data_eos && !strcmp(c.run_dir, "runs/default") &&
		  c.checkpoint_period == 0 && c.keep == 3 && c.eval_interval == 0 &&
		  c.eval_batches == 4 && c.log_period == 1;
	char *dump = pp_config_dump(&c);
	CHECK(ok, "config/defaults/run", "some default differs:\n%s", dump);
	free(dump);
	const pp_model_cfg *m = &c.model;
	CHECK(m->head_dim == 16 && m->top_k == 0 && m->norm_offset == 0 && m->moe_every == 1 &&
		      m->capacity_factor == 0 && m->init_std == 0.02 && !m->embed_scale &&
		      !m->bias && !m->scaled_residual_init && m->sliding_window == 0,
	      "config/defaults/model", "head_dim %d top_k %d", m->head_dim, m->top_k);
	pp_config_free(&c);

	/* seq_len defaults to 256, capped at max_seq_len */
	rc = load_text(&c, &e, NULL, OV("model=llama-110m"));
	CHECK(rc == 0 && c.seq_len == 256, "config/defaults/seq_len", "seq_len %d", c.seq_len);
	pp_config_free(&c);
	/* microbatch = global_batch / dp; microbatches from the rest */
	rc = load_text(&c, &e, NULL, OV("model=llama-tiny", "dp=2"));
	CHECK(rc == 0 && c.microbatch == 4 && c.microbatches == 1, "config/defaults/microbatch_dp",
	      "microbatch %d microbatches %d (%s)", c.microbatch, c.microbatches, e.msg);
	pp_config_free(&c);
	rc = load_text(&c, &e, NULL,
		       OV("model=llama-tiny", "dp=2", "microbatch=1", "global_batch=16"));
	CHECK(rc == 0 && c.microbatches == 8, "config/defaults/microbatches",
	      "microbatches %d (%s)", c.microbatches, e.msg);
	pp_config_free(&c);
	/* n_kv_heads = n_heads, head_dim = d_model / n_heads; top_k 2 with experts */
	rc = load_text(
		&c, &e, NULL,
		OV("model={\"family\": \"llama\", \"d_model\": 48, \"n_heads\": 3, \"d_ff\": 64, "
		   "\"n_layers\": 1, \"vocab_size\": 32, \"max_seq_len\": 16, \"mlp\": \"swiglu\", "
		   "\"norm\": \"rmsnorm\", \"norm_eps\": 1e-5, \"pos\": \"learned\", "
		   "\"tied_embeddings\": false, \"n_experts\": 3}"));
	CHECK(rc == 0 && c.model.n_kv_heads == 3 && c.model.head_dim == 16 && c.model.top_k == 2 &&
		      !c.model.preset[0] && c.seq_len == 16,
	      "config/defaults/inline_model", "rc %d (%s) kv %d hd %d top_k %d", rc, e.msg,
	      c.model.n_kv_heads, c.model.head_dim, c.model.top_k);
	if (!rc)
		check_round_trip("config/defaults/inline_model/round_trip", &c);
	pp_config_free(&c);
}

static void test_run_configs(void)
{
	const char *names[] = {"tiny-llama", "tiny-gpt", "tiny-gemma", "tiny-mistral"};
	for (int i = 0; i < 4; i++) {
		char path[PP_PATH_MAX + 64], name[64], run_dir[64], preset[64];
		snprintf(path, sizeof path, "%s/%s.json", cfg_dir, names[i]);
		snprintf(name, sizeof name, "config/run/%s", names[i]);
		snprintf(run_dir, sizeof run_dir, "runs/%s", names[i]);
		snprintf(preset, sizeof preset, "%s-tiny", names[i] + 5);
		pp_config c;
		pp_err e = {0};
		int rc = pp_config_load(&c, path, 0, NULL, &e);
		CHECK(rc == 0 && !strcmp(c.model.preset, preset) && c.steps == 200 &&
			      c.global_batch == 8 && c.microbatch == 4 && c.microbatches == 2 &&
			      c.seq_len == 64 && c.lr == 3e-3 &&
			      c.lr_schedule.type == PP_LR_COSINE &&
			      c.lr_schedule.warmup_steps == -1 &&
			      c.lr_schedule.warmup_fraction == 0.1 && !strcmp(c.run_dir, run_dir) &&
			      !strcmp(c.data, "synthetic") && c.checkpoint_period == 50 &&
			      c.eval_interval == 50 && c.log_period == 10,
		      name, "rc %d: %s", rc, e.msg);
		pp_config_free(&c);
	}
}

/* ---- overrides ---------------------------------------------------------- */

static void test_overrides(void)
{
	char path[PP_PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/tiny-llama.json", cfg_dir);
	pp_config c;
	pp_err e = {0};
	const char *ov[] = {"model.n_layers=4",
			    "lr_schedule.type=linear",
			    "adamw.b1=0.8",
			    "recompute=true",
			    "lr=1e-3",
			    "steps=1e3",
			    "run_dir=2024",
			    "data=/tmp/a=b",
			    "seed=12345678901234",
			    "schedule=gpipe",
			    "adamw.decay_norms_and_biases=true",
			    "model.rope_theta=5e5",
			    "model.norm_offset=0.30000000000000004",
			    "val_data=v.h5",
			    "tokenizer=tok.model",
			    "data_eos=false"};
	int rc = pp_config_load(&c, path, sizeof ov / sizeof ov[0], (char *const *)ov, &e);
	CHECK(rc == 0, "config/override/load", "%s", e.msg);
	if (!rc) {
		CHECK(c.model.n_layers == 4 && c.model.d_model == 64 && c.model.n_kv_heads == 2,
		      "config/override/nested_model", "n_layers %d d_model %d", c.model.n_layers,
		      c.model.d_model);
		CHECK(c.lr_schedule.type == PP_LR_LINEAR && c.lr_schedule.warmup_fraction == 0.1,
		      "config/override/nested_keeps_siblings", "type %d warmup %ld",
		      c.lr_schedule.type, c.lr_schedule.warmup_steps);
		CHECK(c.adamw.b1 == 0.8 && c.adamw.b2 == 0.95 && c.adamw.decay_norms_and_biases,
		      "config/override/adamw", "b1 %g", c.adamw.b1);
		CHECK(c.recompute == PP_RECOMPUTE_FULL && c.lr == 1e-3 && c.steps == 1000 &&
			      c.seed == 12345678901234ull && c.model.rope_theta == 5e5,
		      "config/override/numbers_bools", "steps %ld lr %g", c.steps, c.lr);
		CHECK(!strcmp(c.run_dir, "2024"), "config/override/string_key_raw", "run_dir '%s'",
		      c.run_dir);
		CHECK(!strcmp(c.data, "/tmp/a=b") && c.schedule == SCHED_GPIPE,
		      "config/override/strings", "data '%s' schedule %s", c.data,
		      schedule_kind_name(c.schedule));
		CHECK(!strcmp(c.val_data, "v.h5") && !strcmp(c.tokenizer, "tok.model") &&
			      !c.data_eos,
		      "config/override/data_keys", "val_data '%s' tokenizer '%s' data_eos %d",
		      c.val_data, c.tokenizer, c.data_eos);
		check_round_trip("config/override/round_trip", &c);
		pp_config_free(&c);
	}

	/* model=NAME replaces the whole model; later model.* overrides apply on top */
	const char *sw[] = {"model.n_layers=4", "model=gpt-tiny"};
	rc = pp_config_load(&c, path, 2, (char *const *)sw, &e);
	CHECK(rc == 0 && c.model.family == PP_FAMILY_GPT && c.model.pos == PP_POS_LEARNED &&
		      c.model.n_layers == 2 && c.seq_len == 64 &&
		      !strcmp(c.model.preset, "gpt-tiny"),
	      "config/override/switch_preset", "rc %d (%s) family %s n_layers %d", rc, e.msg,
	      pp_family_name(c.model.family), c.model.n_layers);
	pp_config_free(&c);
	const char *sw2[] = {"model=gpt-tiny", "model.n_layers=3", "model.preset=llama-tiny"};
	rc = pp_config_load(&c, path, 3, (char *const *)sw2, &e);
	CHECK(rc == 0 && c.model.family == PP_FAMILY_LLAMA && c.model.n_layers == 3,
	      "config/override/preset_key", "rc %d (%s) n_layers %d", rc, e.msg, c.model.n_layers);
	pp_config_free(&c);

	/* config-file model object over the preset; JSON-quoted string values */
	rc = load_text(&c, &e,
		       "{\"model\": {\"preset\": \"llama-tiny\", \"n_layers\": 6}, \"dp\": 2}",
		       OV("run_dir=\"quoted\"", "microbatch=2"));
	CHECK(rc == 0 && c.model.n_layers == 6 && c.model.d_ff == 96 &&
		      !strcmp(c.run_dir, "quoted") && c.microbatches == 2,
	      "config/override/file_model_object", "rc %d (%s)", rc, e.msg);
	pp_config_free(&c);

	/* head_dim odd is fine without rope; kv heads replicate when tp % n_kv_heads == 0 */
	rc = load_text(&c, &e, NULL, OV("model=gpt-tiny", "model.head_dim=15"));
	CHECK(rc == 0, "config/override/odd_head_dim_learned", "%s", e.msg);
	pp_config_free(&c);
	rc = load_text(&c, &e, NULL, OV("model=llama-tiny", "tp=4"));
	CHECK(rc == 0, "config/override/tp_replicates_kv", "%s", e.msg);
	pp_config_free(&c);
	rc = load_text(&c, &e, NULL,
		       OV("model=llama-tiny", "model.n_layers=8", "pp=2", "virtual_stages=2",
			  "schedule=interleaved1f1b", "microbatch=2"));
	CHECK(rc == 0 && c.microbatches == 4, "config/override/interleaved", "%s", e.msg);
	pp_config_free(&c);
}

/* ---- errors ------------------------------------------------------------- */

static const struct err_case {
	const char *name;
	const char *text;    /* config file contents, or NULL for none */
	const char *ov[8];   /* overrides */
	const char *want[4]; /* substrings of the message ("!x": x must not appear) */
} err_cases[] = {
	{"typo/top",
	 NULL,
	 {"model=llama-tiny", "lr_shedule.type=linear"},
	 {"unknown key 'lr_shedule' (did you mean 'lr_schedule'?)"}},
	{"typo/file",
	 "{\"model\": \"llama-tiny\", \"setps\": 3}",
	 {0},
	 {"unknown key 'setps'", "did you mean 'steps'"}},
	{"typo/model",
	 NULL,
	 {"model=llama-tiny", "model.n_head=4"},
	 {"unknown key 'model.n_head' (did you mean 'model.n_heads'?)"}},
	{"typo/adamw",
	 NULL,
	 {"model=llama-tiny", "adamw.weight_dcay=0"},
	 {"'adamw.weight_dcay'", "did you mean 'adamw.weight_decay'"}},
	{"typo/misplaced",
	 NULL,
	 {"model=llama-tiny", "b1=0.9"},
	 {"unknown key 'b1'", "did you mean 'adamw.b1'"}},
	{"typo/none",
	 NULL,
	 {"model=llama-tiny", "zzzzzzzz=1"},
	 {"unknown key 'zzzzzzzz'", "!did you mean"}},
	{"typo/model_long",
	 NULL,
	 {"model=llama-tiny", "model.vocab_sise=3"},
	 {"'model.vocab_sise'", "did you mean 'model.vocab_size'"}},
	{"typo/misplaced_model",
	 NULL,
	 {"model=llama-tiny", "d_model=3"},
	 {"unknown key 'd_model'", "did you mean 'model.d_model'"}},

	{"type/string_for_int",
	 "{\"model\": \"llama-tiny\", \"steps\": \"ten\"}",
	 {0},
	 {"key 'steps': expected an integer, got string \"ten\""}},
	{"type/real_for_int",
	 NULL,
	 {"model=llama-tiny", "steps=3.5"},
	 {"key 'steps': expected an integer, got number 3.5"}},
	{"type/bool",
	 NULL,
	 {"model=llama-tiny", "shard_optimizer=1"},
	 {"key 'shard_optimizer': expected true or false, got integer 1"}},
	{"type/recompute",
	 "{\"model\": \"llama-tiny\", \"recompute\": 1}",
	 {0},
	 {"key 'recompute': expected a string, got integer 1"}},
	{"type/object", NULL, {"model=llama-tiny", "adamw=3"}, {"key 'adamw': expected an object"}},
	{"type/string",
	 "{\"model\": \"llama-tiny\", \"data\": 5}",
	 {0},
	 {"key 'data': expected a string, got integer 5"}},
	{"type/data_eos",
	 NULL,
	 {"model=llama-tiny", "data_eos=yes"},
	 {"key 'data_eos': expected true or false, got string \"yes\""}},
	{"type/val_data",
	 "{\"model\": \"llama-tiny\", \"val_data\": false}",
	 {0},
	 {"key 'val_data': expected a string, got false"}},
	{"typo/tokenizer",
	 NULL,
	 {"model=llama-tiny", "tokeniser=x.model"},
	 {"unknown key 'tokeniser'", "did you mean 'tokenizer'"}},
	{"type/number",
	 NULL,
	 {"model=llama-tiny", "lr=fast"},
	 {"key 'lr': expected a number, got string \"fast\""}},
	{"type/preset",
	 "{\"model\": {\"preset\": 3}}",
	 {0},
	 {"key 'model.preset': expected a string"}},
	{"type/model", "{\"model\": 7}", {0}, {"key 'model': expected an object"}},

	{"range/steps",
	 NULL,
	 {"model=llama-tiny", "steps=0"},
	 {"key 'steps': expected an integer >= 1, got 0"}},
	{"range/global_batch",
	 NULL,
	 {"model=llama-tiny", "global_batch=0"},
	 {"key 'global_batch'", ">= 1"}},
	{"range/microbatch",
	 NULL,
	 {"model=llama-tiny", "microbatch=-2"},
	 {"key 'microbatch'", "got -2"}},
	{"range/lr", NULL, {"model=llama-tiny", "lr=0"}, {"key 'lr': expected a number > 0, got 0"}},
	{"range/b1",
	 NULL,
	 {"model=llama-tiny", "adamw.b1=1"},
	 {"key 'adamw.b1'", "in [0, 1)", "got 1"}},
	{"range/b2", NULL, {"model=llama-tiny", "adamw.b2=-0.1"}, {"key 'adamw.b2'", "in [0, 1)"}},
	{"range/eps", NULL, {"model=llama-tiny", "adamw.eps=0"}, {"key 'adamw.eps'", "> 0"}},
	{"range/weight_decay",
	 NULL,
	 {"model=llama-tiny", "adamw.weight_decay=-1"},
	 {"key 'adamw.weight_decay'", ">= 0"}},
	{"range/clip_norm", NULL, {"model=llama-tiny", "clip_norm=-1"}, {"key 'clip_norm'", ">= 0"}},
	{"range/grad_bucket_mb",
	 NULL,
	 {"model=llama-tiny", "grad_bucket_mb=-1"},
	 {"key 'grad_bucket_mb'", ">= 0", "got -1"}},
	{"range/loss_chunk_mb",
	 NULL,
	 {"model=llama-tiny", "loss_chunk_mb=0"},
	 {"key 'loss_chunk_mb'", "> 0", "got 0"}},
	{"range/final_fraction",
	 NULL,
	 {"model=llama-tiny", "lr_schedule.final_fraction=1.5"},
	 {"key 'lr_schedule.final_fraction'", "in [0, 1]", "1.5"}},
	{"range/warmup_steps",
	 NULL,
	 {"model=llama-tiny", "lr_schedule.warmup_steps=-2"},
	 {"key 'lr_schedule.warmup_steps'", ">= -1"}},
	{"range/norm_eps",
	 NULL,
	 {"model=llama-tiny", "model.norm_eps=0"},
	 {"key 'model.norm_eps'", "> 0"}},
	{"range/rope_theta",
	 NULL,
	 {"model=llama-tiny", "model.rope_theta=-1"},
	 {"key 'model.rope_theta'", "> 0"}},
	{"range/d_model",
	 NULL,
	 {"model=llama-tiny", "model.d_model=0"},
	 {"key 'model.d_model'", ">= 1"}},
	{"range/n_layers",
	 NULL,
	 {"model=llama-tiny", "model.n_layers=-1"},
	 {"key 'model.n_layers'"}},
	{"range/vocab",
	 NULL,
	 {"model=llama-tiny", "model.vocab_size=0"},
	 {"key 'model.vocab_size'"}},
	{"range/int_overflow",
	 NULL,
	 {"model=llama-tiny", "model.d_model=99999999999"},
	 {"key 'model.d_model'", "too large"}},
	{"range/sliding_window",
	 NULL,
	 {"model=llama-tiny", "model.sliding_window=-1"},
	 {"key 'model.sliding_window'", ">= 0", "got -1"}},
	{"range/data_empty", NULL, {"model=llama-tiny", "data="}, {"key 'data'", "non-empty"}},
	{"range/preset_long",
	 NULL,
	 {"model=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
	 {"key 'model.preset'", "longer than 63"}},

	{"enum/schedule",
	 NULL,
	 {"model=llama-tiny", "schedule=1f1c"},
	 {"key 'schedule'", "\"1f1c\"", "gpipe, 1f1b, eager1f1b, interleaved1f1b, zbh1",
	  "did you mean '1f1b'"}},
	{"enum/mlp",
	 NULL,
	 {"model=llama-tiny", "model.mlp=relu"},
	 {"key 'model.mlp'", "swiglu, geglu, gelu"}},
	{"enum/family",
	 NULL,
	 {"model=llama-tiny", "model.family=bert"},
	 {"key 'model.family'", "llama, mistral, mixtral, gemma, gpt"}},
	{"enum/norm",
	 NULL,
	 {"model=llama-tiny", "model.norm=batchnorm"},
	 {"key 'model.norm'", "rmsnorm, layernorm"}},
	{"enum/pos",
	 NULL,
	 {"model=llama-tiny", "model.pos=alibi"},
	 {"key 'model.pos'", "rope, learned, relative"}},
	{"enum/lr_schedule",
	 NULL,
	 {"model=llama-tiny", "lr_schedule.type=cosin"},
	 {"key 'lr_schedule.type'", "cosine, linear, constant, wsd", "did you mean 'cosine'"}},
	{"enum/dtype", NULL, {"model=llama-tiny", "dtype=fp16"}, {"key 'dtype'", "fp32, bf16"}},
	{"enum/device", NULL, {"model=llama-tiny", "device=tpu"}, {"key 'device'", "cpu, cuda"}},
	{"enum/recompute",
	 NULL,
	 {"model=llama-tiny", "recompute=bogus"},
	 {"key 'recompute': unknown value \"bogus\"", "none, full, minimal, minimal_flash"}},
	{"enum/recompute_near",
	 NULL,
	 {"model=llama-tiny", "recompute=minimal_flsh"},
	 {"key 'recompute'", "did you mean 'minimal_flash'"}},
	{"enum/nan_policy",
	 NULL,
	 {"model=llama-tiny", "nan_policy=ignore"},
	 {"key 'nan_policy'", "abort, skip"}},

	{"rule/head_dim_divisible",
	 NULL,
	 {"model=llama-tiny", "model.d_model=66"},
	 {"model.d_model 66 is not divisible by model.n_heads 4", "model.head_dim"}},
	{"rule/head_dim_odd_rope",
	 NULL,
	 {"model=llama-tiny", "model.head_dim=15"},
	 {"model.head_dim 15 must be even", "rope"}},
	{"rule/kv_divides_heads",
	 NULL,
	 {"model=llama-tiny", "model.n_kv_heads=3"},
	 {"model.n_heads 4 is not divisible by model.n_kv_heads 3"}},
	{"rule/kv_le_heads",
	 NULL,
	 {"model=llama-tiny", "model.n_kv_heads=8"},
	 {"model.n_kv_heads 8 exceeds model.n_heads 4"}},
	{"rule/seq_len_learned",
	 NULL,
	 {"model=gpt-tiny", "seq_len=256"},
	 {"seq_len 256 exceeds model.max_seq_len 128", "learned"}},
	{"rule/seq_len_rope",
	 NULL,
	 {"model=llama-tiny", "seq_len=129"},
	 {"seq_len 129 exceeds model.max_seq_len 128"}},
	{"rule/batch_divisible",
	 NULL,
	 {"model=llama-tiny", "microbatch=3"},
	 {"global_batch 8 is not divisible by dp * microbatch = 1 * 3"}},
	{"rule/batch_dp",
	 NULL,
	 {"model=llama-tiny", "dp=3"},
	 {"global_batch 8 is not divisible by dp 3"}},
	{"rule/microbatches",
	 NULL,
	 {"model=llama-tiny", "microbatch=2", "microbatches=3"},
	 {"microbatches 3 does not match", "global_batch / (dp * microbatch)", "= 4"}},
	{"rule/relative_gpt",
	 NULL,
	 {"model=gpt-tiny", "model.pos=relative"},
	 {"relative position biases go in a llama-style layer"}},
	{"rule/relative_one_bucket",
	 NULL,
	 {"model=glam-tiny", "model.relative_attention_num_buckets=1"},
	 {"model.relative_attention_num_buckets 1", "2 to 1024 buckets"}},
	{"rule/relative_max_distance",
	 NULL,
	 {"model=glam-tiny", "model.relative_attention_num_buckets=32",
	  "model.relative_attention_max_distance=16"},
	 {"relative_attention_max_distance 16", "above half of them"}},
	{"rule/top_k_gt_experts",
	 NULL,
	 {"model=mixtral-tiny", "model.top_k=5"},
	 {"model.top_k 5 exceeds model.n_experts 4"}},
	{"rule/top_k_zero",
	 NULL,
	 {"model=mixtral-tiny", "model.top_k=0"},
	 {"model.top_k is 0", "model.n_experts is 4"}},
	{"rule/top_k_dense",
	 NULL,
	 {"model=llama-tiny", "model.top_k=1"},
	 {"model.top_k 1 exceeds model.n_experts 0"}},
	{"rule/virtual_schedule",
	 NULL,
	 {"model=llama-tiny", "virtual_stages=2"},
	 {"schedule=1f1b pp=1 virtual_stages=2", "needs interleaved1f1b"}},
	{"rule/virtual_microbatches",
	 NULL,
	 {"model=llama-tiny", "model.n_layers=8", "pp=2", "virtual_stages=2",
	  "schedule=interleaved1f1b", "global_batch=6", "microbatch=2"},
	 {"microbatches=3", "m=3 microbatches is not a multiple of p=2"}},
	{"rule/layers_per_stage",
	 NULL,
	 {"model=llama-tiny", "pp=4"},
	 {"model.n_layers 2 is fewer than pp * virtual_stages = 4 * 1"}},
	/* the sum of the stages once wrapped around int (UBSan under tests/fuzz/fuzz_config.c):
	 * 2 * INT_MAX + 5 read as 3 */
	{"rule/stage_layers_overflow",
	 NULL,
	 {"model=llama-tiny", "model.n_layers=3", "pp=3", "stage_layers=2147483647,2147483647,5"},
	 {"stage_layers adds up to 4294967299 layers, but model.n_layers is 3"}},
	{"rule/tp_heads",
	 NULL,
	 {"model=llama-tiny", "tp=3"},
	 {"model.n_heads 4 is not divisible by tp 3"}},
	{"rule/tp_kv",
	 NULL,
	 {"model=llama-tiny", "model.n_heads=12", "model.head_dim=16", "model.n_kv_heads=4",
	  "tp=6"},
	 {"model.n_kv_heads 4 is not divisible by tp 6"}},
	{"rule/tp_d_ff",
	 NULL,
	 {"model=llama-tiny", "model.d_ff=90", "tp=4"},
	 {"model.d_ff 90 is not divisible by tp 4"}},
	{"rule/warmup_steps",
	 NULL,
	 {"model=llama-tiny", "steps=10", "lr_schedule.warmup_steps=20"},
	 {"lr_schedule.warmup_steps 20 exceeds steps 10"}},
	{"rule/profile_steps_backwards",
	 NULL,
	 {"model=llama-tiny", "profile_steps=4:2"},
	 {"key 'profile_steps'", "got \"4:2\"", "1 <= A < B"}},
	{"rule/profile_steps_zero",
	 NULL,
	 {"model=llama-tiny", "profile_steps=0"},
	 {"key 'profile_steps'", "got \"0\""}},
	{"rule/profile_steps_text",
	 NULL,
	 {"model=llama-tiny", "profile_steps=2:4x"},
	 {"key 'profile_steps'", "got \"2:4x\""}},
	{"rule/debug_weight_pass",
	 NULL,
	 {"model=llama-tiny", "debug.bwd_ms=2", "debug.bwd_w_ms=3"},
	 {"debug.bwd_w_ms 3 exceeds debug.bwd_ms 2"}},

	{"override/no_equals", NULL, {"model=llama-tiny", "foo"}, {"expected key=value, got 'foo'"}},
	{"override/empty_key", NULL, {"=3"}, {"expected key=value, got '=3'"}},
	{"override/empty_component",
	 NULL,
	 {"model=llama-tiny", "adamw..b1=3"},
	 {"override 'adamw..b1=3'", "empty key component"}},
	{"override/parent_not_object",
	 NULL,
	 {"model=llama-tiny", "steps.x=1"},
	 {"override 'steps.x=1'", "'steps' is not an object"}},
	{"override/parent_unknown_scalar",
	 NULL,
	 {"model=llama-tiny", "foo=1", "foo.bar=2"},
	 {"override 'foo.bar=2'", "'foo' is not an object", "integer 1"}},
	{"override/parent_not_object_file",
	 "{\"model\": \"llama-tiny\", \"steps\": 5}",
	 {"steps.x=1"},
	 {"'steps' is not an object"}},
	{"override/bad_utf8", NULL, {"model=llama-tiny", "data=\xff\xfe"}, {"not valid UTF-8"}},

	{"file/invalid_json",
	 "{\n  \"model\": \"llama-tiny\",\n  steps: 3\n}",
	 {0},
	 {":3:", "invalid JSON"}},
	{"file/not_object", "[1, 2]", {0}, {"must be a JSON object"}},
	{"preset/unknown",
	 NULL,
	 {"model=lama-tiny"},
	 {"unknown model preset 'lama-tiny'", "did you mean 'llama-tiny'", "gpt-tiny",
	  "llama2-70b"}},
	{"preset/slash", NULL, {"model=../tiny-llama"}, {"model.preset", "not a preset name"}},
	{"preset/missing_model", NULL, {0}, {"missing key 'model'"}},
	{"preset/missing_required",
	 "{\"model\": {\"d_model\": 64}}",
	 {0},
	 {"missing key 'model.family'", "no model.preset"}},
};

static bool contains(const char *hay, const char *needle) { return needle && strstr(hay, needle); }

static void test_errors(void)
{
	for (size_t i = 0; i < sizeof err_cases / sizeof err_cases[0]; i++) {
		const struct err_case *t = &err_cases[i];
		char name[128];
		snprintf(name, sizeof name, "config/err/%s", t->name);
		pp_config c;
		pp_err e = {0};
		int rc = load_text(&c, &e, t->text, t->ov[0] ? t->ov : NULL);
		bool ok = rc == PP_EUSAGE && e.code == PP_EUSAGE && c.json == NULL;
		for (int j = 0; j < 4 && t->want[j]; j++)
			ok = ok && (t->want[j][0] == '!' ? !contains(e.msg, t->want[j] + 1)
							 : contains(e.msg, t->want[j]));
		CHECK(ok, name, "rc %d, message: %s", rc, rc ? e.msg : "(none)");
		pp_config_free(&c);
	}

	pp_config c;
	pp_err e = {0};
	int rc = pp_config_load(&c, "/nonexistent/pp.json", 0, NULL, &e);
	CHECK(rc == PP_EUSAGE && contains(e.msg, "/nonexistent/pp.json") &&
		      contains(e.msg, "No such file"),
	      "config/err/file/missing", "rc %d: %s", rc, e.msg);
	rc = pp_config_load(&c, "/tmp", 0, NULL, &e);
	CHECK(rc == PP_EUSAGE && contains(e.msg, "'/tmp'"), "config/err/file/directory",
	      "rc %d: %s", rc, e.msg);
	rc = pp_config_from_json(&c, "{\"model\": ", &e);
	CHECK(rc == PP_EUSAGE && contains(e.msg, "config JSON:1:"), "config/err/from_json/invalid",
	      "rc %d: %s", rc, e.msg);
	/* NULL error pointer: still the code, no crash */
	rc = load_text(&c, NULL, NULL, OV("model=llama-tiny", "steps=0"));
	CHECK(rc == PP_EUSAGE, "config/err/null_err", "rc %d", rc);
}

/* ---- resolved JSON ------------------------------------------------------ */

static void test_resolved_json(void)
{
	char path[PP_PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/tiny-gemma.json", cfg_dir);
	pp_config c;
	pp_err e = {0};
	const char *ov[] = {"final_fraction=0", "lr_schedule.final_fraction=0.3", "adamw.eps=3e-9"};
	int rc = pp_config_load(&c, path, 1, (char *const *)ov, &e);
	CHECK(rc == PP_EUSAGE, "config/json/setup_typo", "rc %d", rc);
	rc = pp_config_load(&c, path, 2, (char *const *)ov + 1, &e);
	CHECK(rc == 0, "config/json/load", "%s", e.msg);
	if (rc)
		return;
	const char *paths[] = {"model",       "preset",
			       "model",       "head_dim",
			       "model",       "top_k",
			       "model",       "scaled_residual_init",
			       "lr_schedule", "warmup_steps",
			       "adamw",       "eps",
			       NULL,          "microbatches",
			       NULL,          "seed",
			       NULL,          "log_period",
			       NULL,          "nan_policy",
			       NULL,          "val_data",
			       NULL,          "tokenizer",
			       NULL,          "data_eos",
			       NULL,          "comm_timeout",
			       NULL,          "stage_layers",
			       NULL,          "loss_chunk_mb",
			       NULL,          "resume_from",
			       NULL,          "profile_steps",
			       NULL,          "timing_skip_steps",
			       "debug",       "fwd_ms",
			       NULL,          "tensorboard",
			       NULL,          "async_checkpointing",
			       NULL,          "step_timeout",
			       NULL,          "max_runtime",
			       "debug",       "hang_step",
			       NULL,          "ep",
			       "model",       "router",
			       NULL,          "fsdp",
			       NULL,          "eval_tasks",
			       NULL,          "eval_task_format",
			       "fp8",         "recipe",
			       "fp8",         "amax_history",
			       "fp8",         "margin",
			       "fp8",         "head"};
	bool all = true;
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i += 2) {
		json_t *o = paths[i] ? json_object_get(c.json, paths[i]) : c.json;
		all = all && json_object_get(o, paths[i + 1]);
	}
	CHECK(all && json_object_size(c.json) == 52, "config/json/complete",
	      "missing keys or %zu top-level keys", json_object_size(c.json));
	CHECK(json_is_string(json_object_get(json_object_get(c.json, "model"), "preset")) &&
		      !strcmp(json_string_value(
				      json_object_get(json_object_get(c.json, "model"), "preset")),
			      "gemma-tiny"),
	      "config/json/keeps_preset", "model.preset missing");

	char *text = pp_config_dump(&c);
	CHECK(text && strstr(text, "\"final_fraction\": 0.3") && strstr(text, "\"eps\": 3e-09") &&
		      strstr(text, "\"rope_theta\": 10000.0"),
	      "config/json/short_reals", "dump:\n%s", text);
	check_round_trip("config/json/round_trip", &c);

	/* A resolved config is self-contained: it needs no preset directory. */
	setenv("PP_CONFIG_DIR", "/nonexistent", 1);
	pp_config r;
	rc = pp_config_from_json(&r, text, &e);
	CHECK(rc == 0 && same_config(&c, &r), "config/json/self_contained", "rc %d: %s", rc, e.msg);
	pp_config_free(&r);
	setenv("PP_CONFIG_DIR", cfg_dir, 1);

	/* ... and loads back through --cfg the same. */
	const char *tmp = temp_config(text);
	rc = pp_config_load(&r, tmp, 0, NULL, &e);
	unlink(tmp);
	CHECK(rc == 0 && same_config(&c, &r), "config/json/as_cfg_file", "rc %d: %s", rc, e.msg);
	pp_config_free(&r);
	free(text);
	pp_config_free(&c);
}

/* recompute: each policy by name; true and false, from a file or an
 * override, as recompute was a bool before it named policies */
/* GLaM's buckets of distance (Praxis's RelativeBias, T5's formula): with 32
 * buckets to 128, distances 0..15 have one each, then the published
 * boundaries, then everything from 113 on the last */
static void test_relative_buckets(void)
{
	pp_model_cfg m = {.pos = PP_POS_RELATIVE, .rel_buckets = 32, .rel_max_distance = 128};
	static const int starts[] = {16, 19, 21, 24, 27, 31, 35, 40,
				     46, 52, 59, 67, 77, 87, 99, 113};
	int bad = -1;
	for (int d = 0; d < 5000 && bad < 0; d++) {
		int want = d; /* below 16; else 15 + the boundaries at or below d */
		if (d >= 16) {
			want = 15;
			for (int k = 0; k < 16; k++)
				want += d >= starts[k];
		}
		if (hparams_relative_bucket(&m, d) != want)
			bad = d;
	}
	CHECK(bad < 0, "config/relative/buckets_32_128", "distance %d in bucket %d", bad,
	      bad < 0 ? 0 : hparams_relative_bucket(&m, bad));
	pp_model_cfg small = {.pos = PP_POS_RELATIVE, .rel_buckets = 8, .rel_max_distance = 24};
	const int want8[] = {0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7, 7, 7};
	int ok = 1;
	for (int d = 0; d < (int)(sizeof want8 / sizeof *want8); d++)
		ok &= hparams_relative_bucket(&small, d) == want8[d];
	CHECK(ok && hparams_relative_bucket(&small, 100000) == 7, "config/relative/buckets_8_24",
	      "not 0..3 exact, 4 from 4, 5 from 7, 6 from 10, 7 from 16");
}

static void test_recompute(void)
{
	const struct {
		const char *text, *ov;
		int want;
	} t[] = {
		{NULL, "recompute=none", PP_RECOMPUTE_NONE},
		{NULL, "recompute=full", PP_RECOMPUTE_FULL},
		{NULL, "recompute=minimal", PP_RECOMPUTE_MINIMAL},
		{NULL, "recompute=minimal_flash", PP_RECOMPUTE_MINIMAL_FLASH},
		{NULL, "recompute=true", PP_RECOMPUTE_FULL},
		{NULL, "recompute=false", PP_RECOMPUTE_NONE},
		{"{\"recompute\": true}", NULL, PP_RECOMPUTE_FULL},
		{"{\"recompute\": false}", NULL, PP_RECOMPUTE_NONE},
		{"{\"recompute\": \"minimal\"}", NULL, PP_RECOMPUTE_MINIMAL},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		pp_config c;
		pp_err e = {0};
		const char *ov = t[i].ov ? t[i].ov : "steps=1";
		int rc = load_text(&c, &e, t[i].text, OV("model=llama-tiny", ov));
		char *text = rc ? NULL : pp_config_dump(&c);
		char want[64];
		snprintf(want, sizeof want, "\"recompute\": \"%s\"", pp_recompute_name(t[i].want));
		CHECK(!rc && c.recompute == t[i].want && text && strstr(text, want),
		      "config/recompute", "%s: rc %d %s: recompute %d, want %s",
		      t[i].ov ? t[i].ov : t[i].text, rc, e.msg, c.recompute, want);
		free(text);
		if (!rc)
			pp_config_free(&c);
	}
}

/* profile_steps as a window, as a count, and off; the test-only keys */
static void test_profile_keys(void)
{
	struct {
		const char *steps;
		long begin, end;
		int count;
	} t[] = {
		{"profile_steps=3:7", 3, 7, 0}, {"profile_steps=5", 0, 0, 5}, {"steps=9", 0, 0, 0}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		const char *ov[] = {"model=llama-tiny", t[i].steps, "debug.fwd_ms=1.5",
				    "debug.clock_offset_rank=2"};
		pp_config c;
		pp_err e = {0};
		int rc = pp_config_load(&c, NULL, 4, (char *const *)ov, &e);
		CHECK(!rc && c.profile_begin == t[i].begin && c.profile_end == t[i].end &&
			      c.profile_count == t[i].count && c.debug.fwd_ms == 1.5 &&
			      c.debug.clock_offset_rank == 2 && c.timing_skip_steps == 1,
		      "config/profile_steps", "%s: rc %d %s: [%ld, %ld) count %d", t[i].steps, rc,
		      e.msg, c.profile_begin, c.profile_end, c.profile_count);
		if (!rc)
			pp_config_free(&c);
	}
}

int main(void)
{
	const char *root = getenv("PP_ROOT");
	snprintf(root_dir, sizeof root_dir, "%s", root && *root ? root : ".");
	snprintf(cfg_dir, sizeof cfg_dir, "%s/configs", root_dir);
	setenv("PP_CONFIG_DIR", cfg_dir, 1);

	test_config_dir();
	test_presets();
	test_defaults();
	test_run_configs();
	test_overrides();
	test_errors();
	test_resolved_json();
	test_profile_keys();
	test_relative_buckets();
	test_recompute();
	printf("%d passed, %d failed\n", th_passed, th_failed);
	TH_EXIT();
}
