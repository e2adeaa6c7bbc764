/* pp-decode: generates text from a checkpoint (or seeded weights) with a KV cache. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/ckpt/stage.h"
#include "../libcommon/cli.h"
#include "../libcommon/decode.h"
#include "../libcommon/fsutil.h"
#include "../libcommon/log.h"

typedef struct {
	const char *ckpt, *prompt, *prompt_file, *n, *temperature, *top_k, *top_p, *seed, *batch;
	bool random_init, ignore_eos, json;
	char tokenizer[PP_PATH_MAX + 64]; /* the checkpoint's own, extracted; "" for the config's */
} decode_args;

/* the prompt file as text */
static int read_prompt(const char *path, char **text, pp_err *e)
{
	size_t n;
	if (fs_read_file(path, text, &n, e)) {
		e->code = PP_EUSAGE; /* a file named on the command line */
		return pp_err_prefix(e, "--prompt-file");
	}
	if (strlen(*text) != n) {
		free(*text);
		*text = NULL;
		return pp_errorf(e, PP_EUSAGE, "--prompt-file %s: holds a NUL byte; expected text", path);
	}
	return 0;
}

static void print_json(const decode_stats *st, const pp_config *cfg, const char *source,
		       const char *text)
{
	double rate = decode_step_rate(st), steps = st->decode_s > 0 ? (st->n_generated - 1) / st->decode_s : 0;
	double bytes = st->param_bytes + st->kv_bytes;
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
			      "s:f, s:b, s:b, s:s}",
			      "model", cfg->model.preset, "device", cfg->device, "weights", source,
			      "batch", st->batch, "prompt_tokens", st->n_prompt, "generated_tokens",
			      st->n_generated, "prefill_s", st->prefill_s, "prefill_tok_s",
			      decode_prefill_rate(st), "decode_s", st->decode_s, "decode_tok_s", rate,
			      "param_bytes", st->param_bytes, "kv_bytes_per_step", st->kv_bytes,
			      "bytes_per_token", st->batch ? bytes / st->batch : 0,
			      "bandwidth_gb_s", 1e-9 * bytes * steps, "cuda_graph", st->graph,
			      "stopped_at_eos", st->stopped_at_eos, "text", text ? text : "");
	char *s = json_dumps(o, JSON_COMPACT);
	puts(s);
	free(s);
	json_decref(o);
}

static int run(const decode_args *a, pp_config *cfg, pp_err *e)
{
	long n = 128, top_k = 0, batch = 1, seed = (long)cfg->seed;
	sample_params sp = sample_defaults();
	int rc = 0;
	if (a->prompt && a->prompt_file)
		return pp_errorf(e, PP_EUSAGE, "give --prompt or --prompt-file, not both");
	if (a->ckpt && a->random_init)
		return pp_errorf(e, PP_EUSAGE, "give --ckpt or --random-init, not both");
	if ((a->n && (rc = cli_long("-n", a->n, 1, 1000000, &n, e))) ||
	    (a->top_k && (rc = cli_long("--top-k", a->top_k, 0, 1L << 30, &top_k, e))) ||
	    (a->batch && (rc = cli_long("--batch", a->batch, 1, 4096, &batch, e))) ||
	    (a->seed && (rc = cli_long("--seed", a->seed, 0, __LONG_MAX__, &seed, e))) ||
	    (a->temperature && (rc = cli_double("--temperature", a->temperature, 0, 100, &sp.temperature, e))) ||
	    (a->top_p && (rc = cli_double("--top-p", a->top_p, 0, 1, &sp.top_p, e))))
		return rc;
	sp.top_k = (int)top_k;
	sp.seed = (uint64_t)seed;
	if ((rc = sample_check(&sp, e)))
		return rc;

	const pp_ops *ops = NULL;
	if ((rc = pp_ops_select(cfg->device, cfg->dtype, &ops, e)))
		return rc;
#ifdef PP_CUDA
	if (!strcmp(cfg->device, "cuda") && (rc = pp_cuda_init(0, e)))
		return rc;
#endif
	pp_tokenizer *tk = NULL;
	char *file_text = NULL, source[PP_PATH_MAX + 64] = "random-init";
	tok_ids ids = {0};
	pp_stage s = {0};
	int *out = NULL;
	const char *tok_path = a->tokenizer[0] ? a->tokenizer : cfg->tokenizer;
	if (tok_path[0] && (rc = tok_load(&tk, tok_path, e)))
		return rc;
	if (tk && tok_vocab_size(tk) > cfg->model.vocab_size)
		rc = pp_errorf(e, PP_EUSAGE,
			       "tokenizer %s has %d tokens but model.vocab_size=%d: the model cannot "
			       "read its ids",
			       tok_path, tok_vocab_size(tk), cfg->model.vocab_size);
	if (!rc && a->prompt_file)
		rc = read_prompt(a->prompt_file, &file_text, e);
	if (!rc)
		rc = decode_prompt_ids(tk, file_text ? file_text : a->prompt ? a->prompt : "",
				       cfg->model.vocab_size, &ids, e);
	stage_spec spec = stage_spec_whole(&cfg->model, 1, 1, false);
	spec.no_grad = true;
	if (!rc)
		rc = stage_create(&s, &cfg->model, ops, &spec, e);
	long step = -1;
	if (!rc && a->random_init)
		stage_init_params(&s, cfg->seed);
	else if (!rc)
		rc = ckpt_load_stage(&s, cfg, a->ckpt, source, sizeof source, &step, e);
	decode_opts o = {.n_new = (int)n, .batch = (int)batch, .sample = sp,
			 .eos = tk && !a->ignore_eos ? tok_eos(tk) : -1, .tk = tk,
			 .out = a->json ? NULL : stdout};
	decode_stats st = {0};
	if (!rc) {
		out = malloc((ids.n + (size_t)n) * (size_t)batch * sizeof(int));
		rc = decode_generate(&s, ids.ids, (int)ids.n, &o, out, &st, e);
	}
	tok_text text = {0};
	if (!rc && a->json && tk)
		rc = tok_decode(tk, out, ids.n + (size_t)st.n_generated, &text, e);
	if (!rc && a->json) {
		/* the text (ids without a tokenizer) of sequence 0 */
		for (size_t i = 0; !tk && !rc && i < ids.n + (size_t)st.n_generated; i++) {
			char num[16];
			int len = snprintf(num, sizeof num, i ? " %d" : "%d", out[i]);
			if (tok_text_append(&text, num, (size_t)len))
				rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		}
		if (!rc)
			print_json(&st, cfg, source, text.s);
	} else if (!rc) {
		double bytes = st.param_bytes + st.kv_bytes;
		double steps = st.decode_s > 0 ? (st.n_generated - 1) / st.decode_s : 0;
		log_info("prompt %d tokens, prefill %.1f tok/s; %d tokens at %.1f tok/s (batch %d%s); "
			 "%.3g GB read per step (parameters %.3g GB + KV cache %.3g GB), %.1f GB/s%s",
			 st.n_prompt, decode_prefill_rate(&st), st.n_generated,
			 decode_step_rate(&st), st.batch, st.graph ? ", CUDA graph" : "",
			 1e-9 * bytes, 1e-9 * st.param_bytes, 1e-9 * st.kv_bytes,
			 1e-9 * bytes * steps, st.stopped_at_eos ? "; stopped at EOS" : "");
	}
	tok_text_free(&text);
	free(out);
	stage_free(&s);
	tok_ids_free(&ids);
	free(file_text);
	if (tk)
		tok_free(tk);
	return rc;
}

int main(int argc, char **argv)
{
	decode_args a = {0};
	const cli_opt opts[] = {
		{"--ckpt", "DIR", "a checkpoint, or a run directory (its newest sound one); without "
				  "--cfg its own config and tokenizer", &a.ckpt, NULL},
		{"--prompt", "TEXT", "text to continue (token ids without a tokenizer)", &a.prompt, NULL},
		{"--prompt-file", "F", "read the prompt from file F", &a.prompt_file, NULL},
		{"-n", "N", "tokens to generate (default 128)", &a.n, NULL},
		{"--temperature", "T", "softmax temperature, 0 for greedy (default 0.8)", &a.temperature, NULL},
		{"--top-k", "K", "sample among the K most likely tokens (default 0: all)", &a.top_k, NULL},
		{"--top-p", "P", "sample among the most likely tokens holding P of the probability (default 1)", &a.top_p, NULL},
		{"--seed", "S", "seed of the draws (default: the config's seed)", &a.seed, NULL},
		{"--batch", "B", "decode B sequences of the same prompt at once (default 1)", &a.batch, NULL},
		{"--random-init", NULL, "seeded initial weights instead of a checkpoint (benchmarks)", NULL, &a.random_init},
		{"--ignore-eos", NULL, "generate N tokens even after the end-of-sequence token", NULL, &a.ignore_eos},
		{"--json", NULL, "print one JSON object (figures and text) on stdout, no summary", NULL, &a.json},
		{0},
	};
	const cli_spec spec = {"pp-decode",
			       "(--cfg FILE | --ckpt DIR) [key=value ...] [--random-init] [--prompt TEXT | "
			       "--prompt-file F] [-n N] [--temperature T] [--top-k K] [--top-p P] [--seed S] "
			       "[--batch B] [--json]",
			       "Generate text from a checkpoint with a KV cache.", opts, true, 0, NULL};
	log_set_prefix("pp-decode", 0, 1);
	pp_err e = {0};
	cli_args args;
	pp_config cfg = {0};
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0)
		return 0;
	/* --ckpt without --cfg: the checkpoint's own config; with --ckpt its own
	 * tokenizer in any case, where it keeps one */
	char dir[PP_PATH_MAX + 64], tmp[] = "/tmp/pp-decode.XXXXXX";
	const bool ckpt = a.ckpt && !a.random_init;
	if (!rc && ckpt && !args.cfg)
		rc = ckpt_config_load(a.ckpt, args.n_overrides, args.overrides, &cfg, dir, sizeof dir, &e);
	else if (!rc)
		rc = pp_config_load(&cfg, args.cfg, args.n_overrides, args.overrides, &e);
	if (!rc && ckpt && args.cfg)
		rc = ckpt_resolve(a.ckpt, dir, sizeof dir, &e);
	if (!rc && ckpt) {
		a.ckpt = dir;
		if (!mkdtemp(tmp))
			rc = pp_errorf(&e, PP_ERUNTIME, "cannot make a temporary directory: %s", strerror(errno));
		else
			rc = ckpt_read_tokenizer(dir, tmp, a.tokenizer, sizeof a.tokenizer, &e);
	}
	if (!rc)
		rc = run(&a, &cfg, &e);
	if (strcmp(tmp, "/tmp/pp-decode.XXXXXX") != 0)
		fs_rm_rf(tmp);
	pp_config_free(&cfg);
	cli_free(&args);
	return rc ? cli_fail(&spec, &e) : 0;
}
