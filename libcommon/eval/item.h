/* An item of a task (task.h): its requests of (context, continuation)
 * text, the choices' lengths for acc_norm and the answer; and its
 * builders, for the formats (formats.c). */
#ifndef PP_EVAL_ITEM_H
#define PP_EVAL_ITEM_H

#include <stddef.h>

#include "../base/error.h"

typedef enum { EVAL_CHOICE, EVAL_PARTIAL, EVAL_CLOZE } eval_kind;

/* One item: n requests; request i is (ctx[n_ctx == 1 ? 0 : i],
 * cont[n_cont == 1 ? 0 : i]). */
typedef struct {
	int line; /* of its file, 1-based */
	eval_kind kind;
	int n;         /* requests (choices) */
	int n_ctx;     /* 1, or n (partial) */
	int n_cont;    /* 1, or n (choice) */
	char **ctx;    /* (n_ctx) */
	char **cont;   /* (n_cont) */
	double *chars; /* (n) acc_norm's length of each choice, in characters */
	int answer;    /* the right request; -1 for cloze */
} eval_item;

/* The request i of an item. */
static inline const char *eval_ctx(const eval_item *it, int i)
{
	return it->ctx[it->n_ctx == 1 ? 0 : i];
}
static inline const char *eval_cont(const eval_item *it, int i)
{
	return it->cont[it->n_cont == 1 ? 0 : i];
}

/* Item builders: strings are copied; choices' lengths for
 * acc_norm are counted from `choices` (before the delimiter). */
int item_choice(eval_item *it, const char *ctx, const char *const *choices, int n,
		const char *delim, int answer, pp_err *e);
int item_partial(eval_item *it, const char *const *ctxs, int n, const char *cont, int answer,
		 pp_err *e);
int item_cloze(eval_item *it, const char *text, pp_err *e);

/* Unicode code points of a UTF-8 string (Python's len). */
size_t utf8_chars(const char *s);

void item_free(eval_item *it);

#endif
