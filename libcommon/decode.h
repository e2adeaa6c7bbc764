/* Text generation from a stage holding every layer, with a KV cache: the
 * prompt goes through one cached forward (prefill), then each new token
 * through one more (a step), which a backend with graphs records once and
 * replays (PP_CUDA_GRAPH=0 turns that off). Used by pp-decode and by
 * pp-train --sample. */
#ifndef PP_DECODE_H
#define PP_DECODE_H

#include <stdbool.h>
#include <stdio.h>

#include "model.h"
#include "sample.h"
#include "tokenizer.h"

typedef struct {
	int n_new;              /* tokens to generate per sequence, at most (EOS stops earlier) */
	int batch;              /* B sequences continue the same prompt, with their own draws */
	sample_params sample;
	int eos;                /* the token that ends a sequence; -1: none */
	const pp_tokenizer *tk; /* for the text on out; NULL: ids as numbers */
	FILE *out;              /* the prompt, then sequence 0's tokens as they come; may be NULL */
} decode_opts;

typedef struct {
	int n_prompt;       /* prompt tokens per sequence */
	int n_generated;    /* new tokens per sequence, EOS included */
	int batch;
	bool stopped_at_eos; /* every sequence reached EOS */
	bool graph;         /* the steps ran as a backend graph */
	double prefill_s;   /* the prompt's forward and the first token */
	double decode_s;    /* the n_generated - 1 steps after it */
	double param_bytes; /* parameters a step reads (the embedding table once, if tied) */
	double kv_bytes;    /* KV cache a step reads, mean over the steps */
} decode_stats;

/* Prompt ids: the tokenizer's BOS (unless it adds none: tok_adds_bos) then
 * the encoded text; without a tokenizer, the text is token ids separated by
 * spaces, each in [0, V). An empty result (no text, no BOS) is the single
 * token 0. */
int decode_prompt_ids(const pp_tokenizer *tk, const char *text, int V, tok_ids *ids, pp_err *e);

/* Generates up to o->n_new tokens after prompt (n_prompt ids) for each of
 * o->batch sequences. ids (batch, n_prompt + n_new) receives the prompt and
 * the new tokens (after a sequence's EOS: EOS). The prompt and the new
 * tokens fill at most max_seq_len positions (the last token is not fed
 * back): a longer request is a usage error naming the sizes. */
int decode_generate(pp_stage *s, const int *prompt, int n_prompt, const decode_opts *o, int *ids,
		    decode_stats *st, pp_err *e);

/* Prefill and decode tokens per second, over every sequence of the batch. */
double decode_prefill_rate(const decode_stats *st);
double decode_step_rate(const decode_stats *st);

#endif
