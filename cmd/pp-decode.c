/* pp-decode: generates text from a checkpoint (or seeded weights) with a KV
 * cache, for one prompt or many (a ragged, continuously refilled batch). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/fsutil.h"
#include "../libcommon/base/log.h"
#include "../libcommon/ckpt/stage.h"
#include "../libcommon/decode/open.h"
#include "../libcommon/decode/request.h"

typedef struct {
	const char *ckpt, *prompt, *prompt_file, *n, *temperature, *top_k, *top_p, *seed, *batch;
	const char *stop, *logprobs, *weights;
	bool random_init, ignore_eos, json, chat;
} decode_args;

/* what the outputs need besides the requests */
typedef struct {
	const decode_args *a;
	const pp_tokenizer *tk;
	const pp_stage *s;
	int index, top;
	bool several; /* several prompts: text printed per prompt, not streamed */
} out_ctx;

static json_t *ids_array(const int *ids, int n)
{
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(ids[i]));
	return a;
}

static json_t *top_array(const out_ctx *c, const decode_result *r, int k)
{
	json_t *a = json_array();
	for (int j = 0; a && j < c->top; j++) {
		const int id = r->top_ids[(size_t)k * c->top + j];
		size_t len = 0;
		const char *piece = c->tk ? tok_piece(c->tk, id, &len) : NULL;
		json_t *o = json_pack("{s:i, s:f}", "id", id, "logprob",
				      (double)r->top_logprob[(size_t)k * c->top + j]);
		if (o && piece)
			json_object_set_new(o, "token", json_stringn(piece, len));
		json_array_append_new(a, o);
	}
	return a;
}

static int print_json(out_ctx *c, const decode_request *r, const decode_result *res, pp_err *e)
{
	json_t *o;
	if (!res) {
		o = json_pack("{s:i, s:s}", "index", c->index, "error", r->error);
	} else {
		json_t *lp = json_array(), *top = c->top ? json_array() : NULL;
		for (int k = 0; lp && k < res->n; k++)
			json_array_append_new(lp, json_real((double)res->logprob[k]));
		for (int k = 0; top && k < res->n; k++)
			json_array_append_new(top, top_array(c, res, k));
		const double dec = res->n > 1 && res->decode_s > 0 ? (res->n - 1) / res->decode_s
								   : 0;
		o = json_pack("{s:i, s:s, s:s#, s:o, s:o, s:s, s:i, s:i, s:f, s:f, s:f}", "index",
			      c->index, "prompt", r->prompt ? r->prompt : "", "completion",
			      res->text.s ? res->text.s : "", res->text.n, "tokens",
			      ids_array(res->ids, res->n), "logprobs", lp, "finish_reason",
			      res->finish, "prompt_tokens", (int)r->ids.n, "completion_tokens",
			      res->n, "prefill_tok_s",
			      res->prefill_s > 0 ? (double)r->ids.n / res->prefill_s : 0,
			      "decode_tok_s", dec, "bytes_per_token",
			      decode_bytes_per_token(c->s, (int)r->ids.n, res->n));
		if (o && top)
			json_object_set_new(o, "top_logprobs", top);
	}
	if (o && r->line)
		json_object_set_new(o, "line", json_integer(r->line));
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	puts(s);
	fflush(stdout);
	free(s);
	return 0;
}

/* decode_opts.done: each request's output, in input order */
static int output(void *ctx, const decode_request *r, const decode_result *res, pp_err *e)
{
	out_ctx *c = ctx;
	int rc = 0;
	if (r->error)
		log_error("%s", r->error);
	if (c->a->json)
		rc = print_json(c, r, res, e);
	else if (res && c->several)
		printf("%s%.*s\n", r->prompt ? r->prompt : "", (int)res->text.n, res->text.s);
	c->index++;
	return rc;
}

/* The run's totals on stderr: a log line, or with --json one JSON object. */
static void print_totals(const decode_stats *st, bool json, const char *weights)
{
	const double rate = st->step_s > 0 ? (double)st->steps / st->step_s : 0;
	const double step = st->steps ? st->param_bytes + st->kv_read_bytes / (double)st->steps : 0;
	if (json) {
		json_t *o = json_pack(
			"{s:i, s:i, s:I, s:f, s:f, s:I, s:I, s:f, s:f, s:i, s:f, s:s, s:f, s:f, s:f, "
			"s:f, s:b}",
			"prompts", st->n_requests, "failed", st->n_failed, "prompt_tokens",
			(json_int_t)st->prompt_tokens, "prefill_s", st->prefill_s, "prefill_tok_s",
			decode_prefill_rate(st), "generated_tokens",
			(json_int_t)st->generated_tokens, "steps", (json_int_t)st->steps, "step_s",
			st->step_s, "decode_tok_s", decode_step_rate(st), "max_batch",
			st->max_batch, "wall_s", st->wall_s, "weights", weights, "weights_bytes",
			st->param_bytes, "kv_cache_bytes", (double)st->kv_bytes, "bytes_per_step",
			step, "bandwidth_gb_s", 1e-9 * step * rate, "cuda_graph", st->graph);
		char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (s)
			fprintf(stderr, "%s\n", s);
		free(s);
		json_decref(o);
		return;
	}
	log_info("%d prompt%s%s: %ld prompt tokens, prefill %.1f tok/s; %ld tokens at %.1f tok/s "
		 "(up to %d at once); weights %.3g GB (%s), KV cache %.3g GB; %.3g GB read per "
		 "step, %.1f GB/s%s",
		 st->n_requests, st->n_requests == 1 ? "" : "s",
		 st->n_failed ? " (some failed)" : "", st->prompt_tokens, decode_prefill_rate(st),
		 st->generated_tokens, decode_step_rate(st), st->max_batch, 1e-9 * st->param_bytes,
		 weights, 1e-9 * (double)st->kv_bytes, 1e-9 * step, 1e-9 * step * rate,
		 st->graph ? ", CUDA graph" : "");
}

/* The requests: --prompt, the lines of --prompt-file, or those of stdin. */
static int read_requests(const decode_args *a, const request_defaults *d, decode_request **reqs,
			 int *n, pp_err *e)
{
	if (a->prompt)
		return requests_from_prompt(a->prompt, d, reqs, n, e);
	if (!a->prompt_file && isatty(STDIN_FILENO)) /* nothing given: the empty prompt */
		return requests_from_prompt("", d, reqs, n, e);
	const char *path = a->prompt_file ? a->prompt_file : "/dev/stdin";
	const char *what = a->prompt_file ? a->prompt_file : "stdin";
	char *text = NULL;
	size_t len = 0;
	int rc = fs_read_file(path, &text, &len, e);
	if (rc) {
		e->code = PP_EUSAGE;
		return pp_err_prefix(e, a->prompt_file ? "--prompt-file" : "stdin");
	}
	rc = requests_from_lines(text, len, d, reqs, n, e);
	free(text);
	if (!rc && *n == 0)
		rc = pp_errorf(
			e, PP_EUSAGE,
			"%s: no prompts (expected one per line, or JSON lines {\"prompt\": ...})",
			what);
	return rc;
}

static int run(const decode_args *a, decode_model *m, pp_err *e)
{
	const pp_config *cfg = &m->cfg;
	long n = 128, top_k = 0, batch = 8, seed = (long)cfg->seed, top = 0;
	sample_params sp = sample_defaults();
	int rc = 0;
	if (a->prompt && a->prompt_file)
		return pp_errorf(e, PP_EUSAGE, "give --prompt or --prompt-file, not both");
	if (a->logprobs && !a->json)
		return pp_errorf(e, PP_EUSAGE,
				 "--logprobs %s: the top tokens are written in --json output only; "
				 "add --json",
				 a->logprobs);
	if ((a->n && (rc = cli_long("-n", a->n, 1, 1000000, &n, e))) ||
	    (a->top_k && (rc = cli_long("--top-k", a->top_k, 0, 1L << 30, &top_k, e))) ||
	    (a->batch && (rc = cli_long("--batch", a->batch, 1, 4096, &batch, e))) ||
	    (a->seed && (rc = cli_long("--seed", a->seed, 0, __LONG_MAX__, &seed, e))) ||
	    (a->logprobs && (rc = cli_long("--logprobs", a->logprobs, 0, 20, &top, e))) ||
	    (a->temperature &&
	     (rc = cli_double("--temperature", a->temperature, 0, 100, &sp.temperature, e))) ||
	    (a->top_p && (rc = cli_double("--top-p", a->top_p, 0, 1, &sp.top_p, e))))
		return rc;
	if (a->stop && !*a->stop)
		return pp_errorf(e, PP_EUSAGE, "--stop: an empty string");
	sp.top_k = (int)top_k;
	sp.seed = (uint64_t)seed;
	if ((rc = sample_check(&sp, false, e)))
		return rc;

	const pp_tokenizer *tk = m->tk;
	decode_request *reqs = NULL;
	int n_req = 0;
	chat_template chat = {0};
	if (a->chat)
		rc = chat_load_beside(&chat, m->tok_path, tk, e);
	char *stops[1] = {(char *)a->stop};
	request_defaults d = {.max_tokens = (int)n,
			      .sample = sp,
			      .stop = stops,
			      .n_stop = a->stop ? 1 : 0,
			      .chat = a->chat ? &chat : NULL,
			      .tk = tk,
			      .vocab = cfg->model.vocab_size};
	if (!rc)
		rc = read_requests(a, &d, &reqs, &n_req, e);
	if (!rc)
		rc = decode_model_load(m, e);
	pp_stage *s = &m->s;
	/* the tokens that end a sequence: the tokenizer's EOS, and a chat's turn end */
	int eos[2], n_eos = 0;
	if (tk && !a->ignore_eos && tok_eos(tk) >= 0)
		eos[n_eos++] = tok_eos(tk);
	if (a->chat && !a->ignore_eos && chat.end >= 0 && (!n_eos || eos[0] != chat.end))
		eos[n_eos++] = chat.end;
	out_ctx oc = {.a = a, .tk = tk, .s = s, .top = (int)top, .several = n_req != 1};
	decode_opts o = {.batch = (int)batch,
			 .eos = eos,
			 .n_eos = n_eos,
			 .tk = tk,
			 .logprobs = a->json,
			 .top_logprobs = a->json ? (int)top : 0,
			 .stream = a->json || n_req != 1 ? NULL : stdout,
			 .done = output,
			 .ctx = &oc};
	decode_stats st = {0};
	if (!rc)
		rc = decode_run(s, reqs, n_req, &o, &st, e);
	if (!rc)
		print_totals(&st, a->json,
			     m->weights >= 0 ? decode_weights_name(m->weights)
					     : pp_type_name(cfg->dtype));
	if (!rc && st.n_failed)
		rc = pp_errorf(e, PP_EUSAGE, "%d of %d prompts failed (their errors are above)",
			       st.n_failed, st.n_requests);
	for (int i = 0; i < n_req; i++)
		decode_request_free(&reqs[i]);
	free(reqs);
	chat_free(&chat);
	return rc;
}

int main(int argc, char **argv)
{
	decode_args a = {0};
	const cli_opt opts[] = {
		{"--ckpt", "DIR",
		 "a checkpoint, a run directory (its newest sound one) or a GGUF file; "
		 "without --cfg its own config and tokenizer",
		 &a.ckpt, NULL},
		{"--prompt", "TEXT",
		 "text to continue (token ids without a tokenizer); without it and "
		 "--prompt-file, prompts come from stdin",
		 &a.prompt, NULL},
		{"--prompt-file", "F", "prompts from F: one per line, or JSON lines",
		 &a.prompt_file, NULL},
		{"-n", "N", "tokens to generate per prompt, at most (default 128)", &a.n, NULL},
		{"--temperature", "T", "softmax temperature, 0 for greedy (default 0.8)",
		 &a.temperature, NULL},
		{"--top-k", "K", "sample among the K most likely tokens (default 0: all)", &a.top_k,
		 NULL},
		{"--top-p", "P",
		 "sample among the most likely tokens holding P of the probability (default 1)",
		 &a.top_p, NULL},
		{"--seed", "S", "seed of the draws (default: the config's seed)", &a.seed, NULL},
		{"--stop", "TEXT", "end a completion before TEXT", &a.stop, NULL},
		{"--batch", "B", "decode up to B sequences at once (default 8)", &a.batch, NULL},
		{"--weights", "W",
		 "store the weights for decoding as fp32, bf16 or q8_0, or as a GGUF "
		 "file has them: gguf (CPU; default fp32, gguf for a GGUF file)",
		 &a.weights, NULL},
		{"--chat", NULL, "prompts are user messages, through the model's chat template",
		 NULL, &a.chat},
		{"--random-init", NULL,
		 "seeded initial weights (with --ckpt: of its config and tokenizer; benchmarks)",
		 NULL, &a.random_init},
		{"--ignore-eos", NULL, "generate N tokens even after the end-of-sequence token",
		 NULL, &a.ignore_eos},
		{"--json", NULL,
		 "one JSON line per prompt on stdout: completion, tokens, logprobs, figures", NULL,
		 &a.json},
		{"--logprobs", "N", "with --json, also the N most likely tokens at each step",
		 &a.logprobs, NULL},
		{0},
	};
	const cli_spec spec = {
		"pp-decode",
		"(--cfg FILE | --ckpt DIR) [key=value ...] [--random-init] [--prompt TEXT | "
		"--prompt-file F | < PROMPTS] [-n N] [--temperature T] [--top-k K] [--top-p P] "
		"[--seed S] [--stop TEXT] [--batch B] [--weights W] [--chat] [--json [--logprobs N]]",
		"Generate text from a checkpoint with a KV cache.",
		opts,
		true,
		0,
		NULL};
	log_set_prefix("pp-decode", 0, 1);
	pp_err e = {0};
	cli_args args;
	decode_model m = {0};
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0)
		return 0;
	decode_source src = {.ckpt = a.ckpt,
			     .cfg = args.cfg,
			     .weights = a.weights,
			     .random_init = a.random_init,
			     .n_overrides = args.n_overrides,
			     .overrides = args.overrides};
	if (!rc)
		rc = decode_model_open(&m, &src, &e);
	if (!rc)
		rc = run(&a, &m, &e);
	decode_model_close(&m);
	cli_free(&args);

	return rc ? cli_fail(&spec, &e) : 0;
}
