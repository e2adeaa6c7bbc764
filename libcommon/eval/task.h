/* Evaluation tasks: files of items, one JSON object per line, read into
 * requests of (context, continuation) text whose log-likelihoods decide
 * the item, as lm-evaluation-harness poses them.
 *
 * Three kinds of item:
 *   choice   one context, several continuations (multiple choice): the
 *            answer is the continuation of the highest log-likelihood
 *            (acc), or of the highest per character of the choice
 *            (acc_norm);
 *   partial  several contexts, one continuation (Winogrande's partial
 *            scoring): the answer is the context under which the
 *            continuation is likeliest (acc);
 *   cloze    one context, one continuation (Lambada's last word): right
 *            when every continuation token is the greedy one (acc), and
 *            its log-likelihood feeds the perplexity.
 *
 * The formats: pp's own schema (jsonl; pp-tasks(5)) and the published
 * files of HellaSwag, ARC, PIQA, BoolQ, Winogrande and Lambada, whose
 * prompts are built as lm-evaluation-harness's task definitions build them
 * (formats.c). */
#ifndef PP_EVAL_TASK_H
#define PP_EVAL_TASK_H

#include <stddef.h>

#include "../base/error.h"
#include "formats.h"
#include "item.h"

typedef struct {
	char *name; /* the file's base name without .jsonl / .json */
	char *path;
	eval_format fmt;
	eval_item *items;
	int n_items;
	eval_kind kind; /* of its items (one kind per file) */
} eval_task;

/* Reads path in format f. Errors (PP_EUSAGE) name the file and the line: a
 * line that is not a JSON object, a field missing or of the wrong type, an
 * answer out of range, fewer than two choices, an empty cloze context, no
 * items at all. limit > 0 keeps the first limit items. */
int eval_task_read(eval_task *t, const char *path, eval_format f, int limit, pp_err *e);
/* The same from text in memory (name stands for the file in messages). */
int eval_task_parse(eval_task *t, const char *name, const char *text, size_t len, eval_format f,
		    int limit, pp_err *e);
void eval_task_free(eval_task *t);

#endif
