/* Text generation from a stage holding every layer, with a KV cache.
 *
 * decode_run continues many prompts as a ragged batch: each sequence has a
 * slot of the cache and its own length; a prompt is prefilled into its slot
 * in one forward, then every busy slot advances one token per step, and as
 * a sequence finishes the next waiting prompt takes its place (continuous
 * batching), up to `batch` sequences at once. A sequence's tokens depend on
 * its own prompt and parameters only (draw k of its seed's stream is its
 * k-th token), so each output is what that prompt gives decoded alone, and
 * outputs are handed back in input order. A backend with graphs records
 * the step once per set of busy slots and replays it (PP_CUDA_GRAPH=0
 * turns that off).
 *
 * Used by pp-decode (requests from the command line, a file or stdin:
 * request.c; chat templates: tok/chat.c) and by pp-train --sample. */
#ifndef PP_DECODE_H
#define PP_DECODE_H

#include <stdbool.h>
#include <stdio.h>

#include "../model/kvcache.h"
#include "../tok/tokenizer.h"
#include "sample.h"

/* One prompt to continue. */
typedef struct {
	int line;       /* its line of input (1-based); 0 when it is not from lines */
	char *prompt;   /* the prompt's text as given (the chat's, templated), or NULL */
	tok_ids ids;    /* the prompt's token ids */
	int max_tokens; /* new tokens at most (EOS and stop strings end earlier) */
	sample_params sample;
	char **stop; /* stop strings: the completion ends before the first */
	int n_stop;
	char *error; /* set: the request is not run and its output is this error */
} decode_request;

/* What one prompt gave. */
typedef struct {
	int *ids; /* (n) the new tokens, the one ending it (EOS) included */
	int n;
	float *logprob;     /* (n) log softmax of the model's logits at each token (NULL
			     * unless decode_opts.logprobs) */
	int *top_ids;       /* (n, top_logprobs) the most likely tokens at each step */
	float *top_logprob; /* and their log probabilities */
	const char *finish; /* "stop" (a stop string), "eos" or "length" */
	tok_text text;      /* the completion (cut before a stop string); ids as numbers
			     * without a tokenizer */
	double prefill_s;   /* its prompt's forward and the first token */
	double decode_s;    /* from its first token to its last */
} decode_result;

typedef struct {
	int batch;      /* sequences decoded at once */
	const int *eos; /* tokens that end a sequence (n_eos of them) */
	int n_eos;
	const pp_tokenizer *tk; /* for the text; NULL: ids as numbers */
	bool logprobs;          /* fill logprob */
	int top_logprobs;       /* and the top N (needs logprobs) */
	FILE *stream;           /* with one request: its prompt, then its text as it comes */
	/* Called for each request in input order once it is done (r->error set:
	 * it failed before decoding; res is then NULL); a non-zero return stops
	 * the run with that error. */
	int (*done)(void *ctx, const decode_request *r, const decode_result *res, pp_err *e);
	void *ctx;
} decode_opts;

typedef struct {
	int n_requests, n_failed;
	long prompt_tokens; /* over the requests that ran */
	long generated_tokens;
	int max_batch;    /* the most sequences in one step */
	long steps;       /* forwards of one token per busy sequence */
	double prefill_s; /* in prompt forwards (and their first tokens) */
	double step_s;    /* in steps */
	double wall_s;
	double param_bytes;   /* parameters a step reads (stored weights as stored) */
	double kv_read_bytes; /* keys and values the steps read, in all */
	size_t kv_bytes;      /* the cache's size */
	bool graph;           /* steps ran as a backend graph */
} decode_stats;

/* Checks a request against the model before it runs: a prompt and a
 * length that fit the context, tokens in the vocabulary, sampling in range.
 * The message names the request's line when it has one. */
int decode_check(const pp_stage *s, const decode_request *r, pp_err *e);

/* Decodes the n requests (those with an error, or failing decode_check,
 * are handed to done with it and skipped). st may be NULL. Returns non-zero
 * on a failure of the run itself (memory, the backend, done). */
int decode_run(pp_stage *s, decode_request *reqs, int n, const decode_opts *o, decode_stats *st,
	       pp_err *e);

/* One prompt (ids), n_new tokens at most, the given sampling, no EOS: its
 * text streams to out (may be NULL); ids (n_prompt + n_new) receives the
 * prompt and the new tokens. For pp-train --sample and the tests. */
int decode_one(pp_stage *s, const int *prompt, int n_prompt, int n_new, const sample_params *sp,
	       const pp_tokenizer *tk, FILE *out, int *ids, pp_err *e);

/* (decode_request_free is request.c's, with the requests' parsing) */
void decode_request_free(decode_request *r);
void decode_result_free(decode_result *r);

/* The bytes one step reads for a sequence decoded alone (batch 1): the
 * parameters (stored weights as stored) and its keys and values, mean over
 * the steps after a prompt of n_prompt that gave n_generated tokens. */
double decode_bytes_per_token(const pp_stage *s, int n_prompt, int n_generated);

/* Prompt and decode tokens per second over the whole run. */
double decode_prefill_rate(const decode_stats *st);
double decode_step_rate(const decode_stats *st);

#endif
