/* Log-likelihoods of task requests (task.h) under a model stage holding
 * every layer, as lm-evaluation-harness computes them, with a KV cache.
 *
 * Tokens (eval_tokenize): a context's trailing spaces move to the front of
 * its continuation; the continuation's tokens are those of context +
 * continuation after the context's own tokens; an empty context is the
 * prefix token (the tokenizer's BOS, else its EOS); BOS goes before every
 * context as eval_bos says. A request longer than the model's context
 * (max_seq_len + 1 tokens, the last not fed) loses tokens from its left,
 * as the harness truncates, and is flagged.
 *
 * Scoring (eval_score_items): the context is run once, and every
 * continuation goes on from a copy of its cached keys and values, those of
 * several items in one forward (the harness runs the context again for
 * each choice); a request's log-likelihood is the sum over its continuation's
 * tokens of log softmax of the logits at the position before it, and it
 * is greedy when each of those tokens is the argmax (the first of equal
 * logits, as torch.argmax). */
#ifndef PP_EVAL_SCORE_H
#define PP_EVAL_SCORE_H

#include <stdbool.h>

#include "../model/kvcache.h"
#include "../tok/tokenizer.h"
#include "task.h"

/* BOS before every context: as the tokenizer adds it when it encodes
 * (lm-evaluation-harness's default), always, or never. */
typedef enum { EVAL_BOS_TOKENIZER, EVAL_BOS_ALWAYS, EVAL_BOS_NEVER } eval_bos;
int eval_bos_parse(const char *s, eval_bos *b, pp_err *e);

/* An item's requests as tokens. */
typedef struct {
	int n_ctx, n;   /* contexts (1 unless partial or truncated), requests */
	tok_ids *ctx;   /* (n_ctx) */
	tok_ids *cont;  /* (n) */
	bool truncated; /* some request lost tokens on its left */
} eval_toks;

/* What one request gave. */
typedef struct {
	double ll;  /* summed log-likelihood of its continuation */
	int tokens; /* the continuation's tokens */
	bool greedy;
} eval_result;

/* Tokenizes every item of t for a model of context max_seq_len; a
 * continuation longer than that is an error naming the file and line.
 * *out gets t->n_items entries. */
int eval_tokenize(const eval_task *t, const pp_tokenizer *tk, eval_bos bos, int max_seq_len,
		  eval_toks **out, pp_err *e);
void eval_toks_free(eval_toks *k, int n);

typedef struct {
	pp_stage *s;
	pp_kv_cache c;
	int B, Tmax, rows; /* the cache's slots, positions and rows at once */
	bool batch;        /* room for batches of items (eval_scorer_fit) */
	pp_real *logits;   /* host copy of a forward's logits */
	size_t logits_n;
	int *feed; /* tokens of one forward */
	size_t feed_n;
} eval_scorer;

/* Sizes a scorer for the items k[0..n) (those of every task: call
 * eval_scorer_fit for each, then eval_scorer_open). */
void eval_scorer_fit(eval_scorer *sc, const eval_toks *k, int n);
int eval_scorer_open(eval_scorer *sc, pp_stage *s, pp_err *e);
void eval_scorer_close(eval_scorer *sc);

/* res (k->n entries) for one item. */
int eval_score_item(eval_scorer *sc, const eval_toks *k, eval_result *res, pp_err *e);
/* res[i] for items k[i], i < n: the multiple-choice items in batches, as
 * many at once as the cache's slots and rows take (eval_scorer_open sizes
 * them for that), the others request by request. */
int eval_score_items(eval_scorer *sc, const eval_toks *const *k, eval_result *const *res, int n,
		     pp_err *e);

/* One forward of the n tokens after the `ctx` already in slot 0 (slot 0
 * is emptied first when ctx is 0), scoring its last `keep` positions: the
 * log-likelihood of target[i] at each (keep of them; a negative target
 * counts for nothing), summed into *ll, and whether each was the argmax (keep 0: the forward alone, for the
 * cache). For the rolling windows of a corpus (perplexity.c) and the
 * requests alike. */
int eval_score_rows(eval_scorer *sc, const int *tokens, int n, int ctx, const int *target, int keep,
		    double *ll, bool *greedy, pp_err *e);

#endif
