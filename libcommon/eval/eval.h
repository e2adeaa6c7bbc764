/* A task scored end to end: its file read and tokenized, its items scored
 * on this rank's share (item i on rank i % size), every request's result
 * summed over the ranks so that each holds them all, and the figures
 * lm-evaluation-harness prints: acc and acc_norm with their standard
 * errors, and for cloze tasks acc and the perplexity. pp-eval and
 * pp-train's eval_tasks both run tasks through this. */
#ifndef PP_EVAL_H
#define PP_EVAL_H

#include <stdbool.h>

#include "../comm/comm.h"
#include "score.h"
#include "task.h"

typedef struct {
	int items;
	double acc, acc_se;           /* se: NAN with fewer than two items */
	double acc_norm, acc_norm_se; /* choice tasks only (else NAN) */
	double ppl, ppl_se;           /* cloze tasks only (else NAN) */
	long tokens;                  /* continuation tokens scored */
} eval_summary;

typedef struct {
	eval_task task;
	eval_toks *toks;
	eval_result *res; /* every request's, the items' in order */
	int *first;       /* (n_items + 1) each item's first request in res */
	eval_summary sum;
	int scored;     /* items this rank scored */
	double seconds; /* scoring them */
} eval_set;

/* Reads and tokenizes the task file (task.h, score.h). */
int eval_set_open(eval_set *es, const char *path, eval_format f, int limit, const pp_tokenizer *tk,
		  eval_bos bos, int max_seq_len, pp_err *e);
void eval_set_close(eval_set *es);

/* The task files of list, "F[,F...]" (each F may be FMT:FILE, that file's
 * own format; fmt for the others), opened as eval_set_open does into
 * *sets, *n of them, each fitted into sc when it is not NULL. An empty
 * list is an error (PP_EUSAGE). eval_sets_close frees what it opened. */
int eval_sets_open(eval_set **sets, int *n, const char *list, eval_format fmt, int limit,
		   const pp_tokenizer *tk, eval_bos bos, int max_seq_len, eval_scorer *sc,
		   pp_err *e);
void eval_sets_close(eval_set *sets, int n);

/* Scores this rank's items (comm NULL: all of them), sums over comm, and
 * fills es->sum. progress: a line with the rate and the time left every
 * few seconds on stderr. */
int eval_set_score(eval_set *es, eval_scorer *sc, pp_comm *comm, bool progress, pp_err *e);

/* The item's prediction: the request of the highest log-likelihood, and of
 * the highest per character (norm); -1 for a cloze item. */
int eval_pred(const eval_set *es, int item, bool norm);

#endif
