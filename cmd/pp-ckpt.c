/* pp-ckpt: list, inspect, verify, diff, reshard, import and export
 * checkpoints. One subcommand per function here; the work is in
 * libcommon/ckpt/inspect.c and libcommon/formats/ (tensorio). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/log.h"
#include "../libcommon/ckpt/ckpt.h"
#include "../libcommon/ckpt/inspect.h"
#include "../libcommon/formats/lora.h"
#include "../libcommon/formats/stageload.h"
#include "../libcommon/formats/tensorio.h"

/* Parses a subcommand's arguments: 0 go on, -1 help printed, else an error. */
static int parse(const cli_spec *spec, int argc, char **argv, cli_args *a, int need, pp_err *e)
{
	int rc = cli_parse(spec, argc, argv, a, e);
	if (!rc && a->n_positional < need)
		rc = pp_errorf(e, PP_EUSAGE, "usage: %s %s (see %s --help)", spec->tool,
			       spec->usage, spec->tool);
	return rc;
}

static int finish(const cli_spec *spec, cli_args *a, int rc, pp_err *e)
{
	cli_free(a);
	return rc < 0 ? 0 : rc ? cli_fail(spec, e) : 0;
}

static int cmd_ls(int argc, char **argv)
{
	bool json = false;
	const cli_opt opts[] = {{"--json", NULL, "one JSON object per checkpoint", NULL, &json},
				{0}};
	const cli_spec spec = {"pp-ckpt ls",
			       "RUN_DIR [--json]",
			       "The checkpoints of a run, newest first, and whether each is sound.",
			       opts,
			       false,
			       1,
			       "pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	int rc = parse(&spec, argc, argv, &a, 1, &e);
	if (!rc)
		rc = ckpt_ls(a.positional[0], json, stdout, &e);
	return finish(&spec, &a, rc, &e);
}

/* The saved config of the checkpoint at path; its run_dir the run directory
 * the checkpoint is in now (RUN of RUN/checkpoints/step_N), so that pp-train
 * --cfg resumes it where it lies, wherever it was written. */
static int print_config(const char *path, pp_err *e)
{
	char dir[PP_PATH_MAX + 64], *text = NULL;
	int rc = ckpt_resolve(path, dir, sizeof dir, e);
	if (!rc)
		rc = ckpt_read_config(dir, &text, e);
	json_error_t je;
	json_t *cfg = rc ? NULL : json_loads(text, 0, &je);
	if (!rc && !json_is_object(cfg))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: its saved config is not a JSON object", dir);
	char *slash = rc ? NULL : strrchr(dir, '/');
	if (slash && slash - dir >= 12 && !strncmp(slash - 12, "/checkpoints", 12)) {
		slash[-12] = 0;
		json_object_set_new(cfg, "run_dir", json_string(dir));
	}
	char *out = rc ? NULL : json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (out)
		printf("%s\n", out);
	free(out);
	json_decref(cfg);
	free(text);
	return rc;
}

static int cmd_info(int argc, char **argv)
{
	bool json = false, config = false;
	const cli_opt opts[] = {
		{"--json", NULL, "one JSON object", NULL, &json},
		{"--config", NULL,
		 "the saved run config (run_dir where the checkpoint is), for pp-train --cfg", NULL,
		 &config},
		{0}};
	const cli_spec spec = {"pp-ckpt info",
			       "CKPT [--json | --config]",
			       "A checkpoint's config, step, layout, format and tensors.",
			       opts,
			       false,
			       1,
			       "pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	int rc = parse(&spec, argc, argv, &a, 1, &e);
	if (!rc && json && config)
		rc = pp_errorf(&e, PP_EUSAGE, "--json and --config: give one");
	if (!rc && config) {
		rc = print_config(a.positional[0], &e);
	} else if (!rc) {
		rc = ckpt_info(a.positional[0], json, stdout, &e);
	}
	return finish(&spec, &a, rc, &e);
}

static void print_problem(void *ctx, const char *msg) { fprintf((FILE *)ctx, "%s\n", msg); }

static int cmd_verify(int argc, char **argv)
{
	bool quick = false;
	const cli_opt opts[] = {
		{"--no-values", NULL, "skip reading every value for NaN and Inf", NULL, &quick},
		{0}};
	const cli_spec spec = {"pp-ckpt verify",
			       "CKPT [--no-values]",
			       "Check every file, checksum, slice and value; print each problem.",
			       opts,
			       false,
			       1,
			       "pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	char dir[PP_PATH_MAX + 64];
	int rc = parse(&spec, argc, argv, &a, 1, &e);
	if (!rc)
		rc = ckpt_resolve(a.positional[0], dir, sizeof dir, &e);
	if (!rc) {
		int n = ckpt_verify_each(dir, !quick, print_problem, stdout, &e);
		if (n)
			rc = pp_errorf(&e, PP_ERUNTIME, "%s: %d problem%s", dir, n,
				       n == 1 ? "" : "s");
		else
			printf("%s: sound\n", dir);
	}
	return finish(&spec, &a, rc, &e);
}

static int cmd_diff(int argc, char **argv)
{
	const char *tol = NULL;
	const cli_opt opts[] = {{"--tol", "X",
				 "largest relative difference allowed per tensor (default 0)", &tol,
				 NULL},
				{0}};
	const cli_spec spec = {
		"pp-ckpt diff",
		"A B [--tol X]",
		"The largest differences of two checkpoints' tensors, in any layouts.",
		opts,
		false,
		2,
		"pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	double t = 0;
	int rc = parse(&spec, argc, argv, &a, 2, &e);
	if (!rc && tol)
		rc = cli_double("--tol", tol, 0, 1e30, &t, &e);
	if (!rc)
		rc = ckpt_diff(a.positional[0], a.positional[1], t, stdout, &e);
	return finish(&spec, &a, rc, &e);
}

static int parse_dtype(const char *s, tio_dtype *t, pp_err *e)
{
	static const struct {
		const char *name;
		tio_dtype t;
	} names[] = {{"fp32", TIO_F32}, {"f32", TIO_F32},   {"fp16", TIO_F16},
		     {"f16", TIO_F16},  {"bf16", TIO_BF16}, {"q8_0", TIO_Q8_0}};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (!strcasecmp(s, names[i].name)) {
			*t = names[i].t;
			return 0;
		}
	return pp_errorf(e, PP_EUSAGE, "--dtype %s: expected fp32, fp16, bf16 or q8_0", s);
}

/* key=value pairs as a JSON object (values parsed as JSON where they parse) */
static json_t *layout_of(const cli_args *a)
{
	json_t *o = json_object();
	for (int i = 0; i < a->n_overrides; i++) {
		const char *kv = a->overrides[i], *eq = strchr(kv, '=');
		char key[128];
		snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
		json_error_t je;
		json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &je);
		json_object_set_new(o, key, v ? v : json_string(eq + 1));
	}
	return o;
}

/* What export makes of a LoRA run's checkpoint (formats/lora.h): the
 * adapters alone (--format peft), the merged model (--merge-lora), or, for
 * every other tool, the checkpoint as it is. */
enum { VIEW_ALL = -1 };

static int lora_view(tio_source **src, const char *src_path, const char *dst_fmt, int view,
		     pp_err *e)
{
	const bool peft = !strcmp(dst_fmt, "peft"), has = tio_has_adapters(*src);
	if (view == VIEW_ALL && !strcmp(dst_fmt, "pp"))
		return 0;
	if (!has && (peft || view == TIO_LORA_MERGED))
		return pp_errorf(e, PP_EUSAGE, "%s holds no LoRA adapters (lora.rank)", src_path);
	if (has && view == VIEW_ALL && !peft)
		return pp_errorf(e, PP_EUSAGE,
				 "%s holds LoRA adapters: --merge-lora folds them into the base "
				 "for %s, --format peft writes them alone",
				 src_path, dst_fmt);
	if (!has)
		return 0;
	tio_source *inner = *src;
	*src = NULL;
	return tio_lora_source(inner, peft ? TIO_LORA_ADAPTERS : TIO_LORA_MERGED, src, e);
}

/* One model through tio_copy, with what it took: src (closed here, NULL
 * when opening it failed with rc), as view says. */
static int copy_from(tio_source *src, int rc, const char *src_path, const char *dst_fmt,
		     const char *dst_path, int view, tio_sink_opts *o, const char *what, pp_err *e)
{
	tio_sink *sink = NULL;
	pp_model_cfg m;
	tio_stats st = {0};
	if (!rc)
		rc = lora_view(&src, src_path, dst_fmt, view, e);
	if (!rc)
		rc = tio_model_cfg(&src->meta, &m, e);
	if (!rc) {
		o->model = &m;
		o->meta = &src->meta;
		o->tensors = src->tensors;
		o->n = src->n;
		rc = tio_open_sink(dst_fmt, dst_path, o, &sink, e);
	}
	if (!rc)
		rc = tio_copy(src, sink, o->with_adam, what, &st, e);
	if (!rc) {
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		log_info(
			"%s: %d tensors, %.3g elements (%.1f MB as fp32) in %.1f s (%.0f MB/s); peak "
			"RSS %.1f MB, largest buffers %.1f MB",
			what, st.tensors, (double)st.elements, 1e-6 * st.bytes_read, st.seconds,
			st.seconds > 0 ? 1e-6 * st.bytes_read / st.seconds : 0,
			(double)ru.ru_maxrss / 1024.0, 1e-6 * (double)st.peak_buffer_bytes);
		printf("%s\n", dst_path);
	}
	if (src)
		src->close(src);
	return rc;
}

static int copy(const char *src_fmt, const char *src_path, const char *dst_fmt,
		const char *dst_path, int view, tio_sink_opts *o, const char *what, pp_err *e)
{
	tio_source *src = NULL;
	int rc = tio_open_source(src_fmt, src_path, &src, e);
	return copy_from(src, rc, src_path, dst_fmt, dst_path, view, o, what, e);
}

static int cmd_convert(int argc, char **argv)
{
	const char *out = NULL;
	bool params_only = false;
	const cli_opt opts[] = {
		{"-o", "RUN_DIR", "the run directory to write (its checkpoints/step_N)", &out,
		 NULL},
		{"--params-only", NULL, "leave out the AdamW state", NULL, &params_only},
		{0}};
	const cli_spec spec = {
		"pp-ckpt convert",
		"CKPT -o RUN_DIR [pp=N tp=N dp=N fsdp=N ep=N shard_optimizer=B virtual_stages=N "
		"key=value ...] [--params-only]",
		"Reshard a checkpoint to another layout, one tensor at a time.",
		opts,
		true,
		1,
		"pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	int rc = parse(&spec, argc, argv, &a, 1, &e);
	if (!rc && !out)
		rc = pp_errorf(&e, PP_EUSAGE, "give -o RUN_DIR (see pp-ckpt convert --help)");
	tio_sink_opts o = {.dtype = TIO_F32, .with_adam = !params_only, .layout = layout_of(&a)};
	if (!rc)
		rc = copy("pp", a.positional[0], "pp", out, VIEW_ALL, &o, "convert", &e);
	json_decref(o.layout);
	return finish(&spec, &a, rc, &e);
}

static int cmd_export(int argc, char **argv)
{
	const char *fmt = NULL, *out = NULL, *dtype = NULL, *shard = NULL, *l2c = NULL;
	bool merge = false;
	const cli_opt opts[] = {
		{"--format", "FMT", "safetensors, gguf, llama2c or peft (a LoRA run's adapters)",
		 &fmt, NULL},
		{"-o", "PATH", "the directory (safetensors, peft) or file (gguf, llama2c) to write",
		 &out, NULL},
		{"--merge-lora", NULL,
		 "a LoRA run: fold the adapters into the base (in fp32 first)", NULL, &merge},
		{"--dtype", "T", "fp32, fp16 or bf16 (safetensors, gguf), q8_0 (gguf)", &dtype,
		 NULL},
		{"--shard-mb", "N", "safetensors: files of at most N MB, with an index", &shard,
		 NULL},
		{"--llama2c-version", "V",
		 "llama2c: 0 (run.c's, the default), 1, or 2 (runq.c's int8 groups)", &l2c, NULL},
		{0}};
	const cli_spec spec = {"pp-ckpt export",
			       "CKPT --format FMT -o PATH [--dtype T] [--shard-mb N] "
			       "[--llama2c-version V] [--merge-lora]",
			       "Write a checkpoint's model as safetensors (Hugging Face), GGUF "
			       "(llama.cpp) or llama2.c, or a LoRA run's adapters for PEFT.",
			       opts,
			       false,
			       1,
			       "pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	tio_sink_opts o = {.dtype = TIO_F32};
	int rc = parse(&spec, argc, argv, &a, 1, &e);
	if (!rc && (!fmt || !out))
		rc = pp_errorf(&e, PP_EUSAGE,
			       "give --format FMT and -o PATH (see pp-ckpt export --help)");
	if (!rc && !strcmp(fmt, "pp"))
		rc = pp_errorf(&e, PP_EUSAGE, "--format 'pp': use pp-ckpt convert");
	else if (!rc && strcmp(fmt, "safetensors") && strcmp(fmt, "gguf") &&
		 strcmp(fmt, "llama2c") && strcmp(fmt, "peft"))
		rc = pp_errorf(&e, PP_EUSAGE,
			       "--format '%s': expected safetensors, gguf, llama2c or peft", fmt);
	else if (!rc && merge && !strcmp(fmt, "peft"))
		rc = pp_errorf(&e, PP_EUSAGE,
			       "--merge-lora makes a whole model; --format peft writes the "
			       "adapters alone");
	if (!rc && dtype)
		rc = parse_dtype(dtype, &o.dtype, &e);
	if (!rc && shard)
		rc = cli_double("--shard-mb", shard, 1e-3, 1e9, &o.shard_mb, &e);
	long version = 0;
	if (!rc && l2c && strcmp(fmt, "llama2c"))
		rc = pp_errorf(&e, PP_EUSAGE, "--llama2c-version goes with --format llama2c");
	if (!rc && l2c)
		rc = cli_long("--llama2c-version", l2c, 0, 2, &version, &e);
	o.llama2c_version = (int)version;
	if (!rc)
		rc = copy("pp", a.positional[0], fmt, out, merge ? TIO_LORA_MERGED : VIEW_ALL, &o,
			  "export", &e);
	return finish(&spec, &a, rc, &e);
}

static int cmd_import(int argc, char **argv)
{
	const char *fmt = NULL, *out = NULL, *base = NULL;
	const cli_opt opts[] = {
		{"--format", "FMT",
		 "safetensors (a Hugging Face directory), gguf, or peft (PEFT's LoRA adapters)",
		 &fmt, NULL},
		{"-o", "RUN_DIR", "the run directory to write (checkpoint step 0)", &out, NULL},
		{"--base", "PATH", "peft: the base model the adapters go on (any format pp reads)",
		 &base, NULL},
		{0}};
	const cli_spec spec = {"pp-ckpt import",
			       "--format FMT PATH -o RUN_DIR [--base PATH] [key=value ...]",
			       "Make a pp run directory from a Hugging Face or GGUF model, or a "
			       "LoRA run from PEFT's adapters on a base.",
			       opts,
			       true,
			       1,
			       "pp-ckpt"};
	pp_err e = {0};
	cli_args a;
	int rc = parse(&spec, argc, argv, &a, 1, &e);
	if (!rc && (!fmt || !out))
		rc = pp_errorf(&e, PP_EUSAGE,
			       "give --format FMT and -o RUN_DIR (see pp-ckpt import --help)");
	if (!rc && strcmp(fmt, "safetensors") && strcmp(fmt, "gguf") && strcmp(fmt, "peft"))
		rc = pp_errorf(&e, PP_EUSAGE, "--format '%s': expected safetensors, gguf or peft%s",
			       fmt, strcmp(fmt, "pp") ? "" : " (a pp checkpoint: pp-ckpt convert)");
	if (!rc && !strcmp(fmt, "peft") != (base != NULL))
		rc = pp_errorf(&e, PP_EUSAGE,
			       base ? "--base goes with --format peft"
				    : "--format peft needs --base PATH: the model "
				      "the adapters were trained on");
	tio_sink_opts o = {.dtype = TIO_F32, .layout = layout_of(&a)};
	if (!rc && base) {
		/* the base stays open until the run is written: it lends its tokenizer */
		tio_source *b = NULL, *src = NULL;
		pp_config c = {0};
		rc = tio_open_source(tio_guess_format(base), base, &b, &e);
		if (!rc)
			rc = tio_peft_config(a.positional[0], b, base, a.n_overrides, a.overrides,
					     &c, &e);
		if (!rc)
			rc = tio_open_peft(a.positional[0], &c, &src, &e);
		rc = copy_from(src, rc, a.positional[0], "pp", out, VIEW_ALL, &o, "import", &e);
		pp_config_free(&c);
		if (b)
			b->close(b);
	} else if (!rc) {
		rc = copy(fmt, a.positional[0], "pp", out, VIEW_ALL, &o, "import", &e);
	}
	json_decref(o.layout);
	return finish(&spec, &a, rc, &e);
}

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} cmds[] = {
	{"ls", cmd_ls, "list a run's checkpoints and whether each is sound"},
	{"info", cmd_info, "show a checkpoint's config, layout and tensors"},
	{"verify", cmd_verify, "check every file, checksum, slice and value"},
	{"diff", cmd_diff, "the largest differences between two checkpoints"},
	{"convert", cmd_convert, "reshard to another layout (pp, tp, dp, ep, ZeRO-1)"},
	{"export", cmd_export, "write safetensors, GGUF or llama2.c"},
	{"import", cmd_import, "make a run from safetensors or GGUF"},
};

int main(int argc, char **argv)
{
	log_set_prefix("pp-ckpt", 0, 1);
	const char *sub = argc > 1 ? argv[1] : NULL;
	for (size_t i = 0; sub && i < sizeof cmds / sizeof *cmds; i++)
		if (!strcmp(sub, cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	if (sub && !strcmp(sub, "--version")) {
		printf("pp-ckpt %s\n", PP_VERSION);
		return 0;
	}
	bool help = sub && (!strcmp(sub, "--help") || !strcmp(sub, "-h"));
	FILE *f = help ? stdout : stderr;
	if (sub && !help)
		fprintf(f, "pp-ckpt: error: unknown command '%s'\n\n", sub);
	fprintf(f, "usage: pp-ckpt COMMAND [ARGS]\n\nInspect, verify, reshard, import and export "
		   "checkpoints.\n\ncommands:\n");
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
		fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'pp-ckpt COMMAND --help' for a command's options. See pp-ckpt(1).\n");
	return help ? 0 : 2;
}
