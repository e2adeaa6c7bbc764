/* Loss, perplexity and bits per byte of a model over the documents of a
 * token dataset (pp-eval --data), as lm-evaluation-harness's rolling
 * log-likelihood scores a document: the prefix token (the tokenizer's BOS,
 * else its EOS; without a tokenizer the document's first token stands for
 * it and is not predicted) before the first window,
 * every token predicted once, in windows of the model's context, each
 * window after the first fed the max_seq_len tokens before its end. A
 * dataset with a loss mask (instruction data) is scored on the tokens its
 * mask counts (the completions, the assistant turns) and the bytes of
 * their text, as training counts its loss. */
#ifndef PP_EVAL_PERPLEXITY_H
#define PP_EVAL_PERPLEXITY_H

#include <stdbool.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "../tok/tokenizer.h"

typedef struct {
	char name[4200]; /* the file, with its split */
	long docs, tokens, bytes;
	double nll;  /* summed over the predicted tokens (nats) */
	double loss; /* nll / tokens */
	double ppl;  /* exp(loss) */
	double bpb;  /* nll / (ln 2 * bytes); NAN without a tokenizer */
	double seconds;
} eval_ppl;

/* Documents i % size == rank of path (the first limit, when limit > 0),
 * summed over comm (NULL: alone). */
int eval_perplexity(pp_stage *s, const pp_tokenizer *tk, const char *path, int limit, pp_comm *comm,
		    bool progress, eval_ppl *r, pp_err *e);

#endif
