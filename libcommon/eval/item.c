/* Items and their builders (item.h). */
#include "item.h"

#include <stdlib.h>
#include <string.h>

static int nomem(pp_err *e) { return pp_errorf(e, PP_ERUNTIME, "out of memory"); }

static char *cat(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = malloc(na + nb + 1);
	if (s) {
		memcpy(s, a, na);
		memcpy(s + na, b, nb + 1);
	}
	return s;
}

size_t utf8_chars(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += ((unsigned char)*s & 0xC0) != 0x80;
	return n;
}

static int item_alloc(eval_item *it, eval_kind kind, int n, int n_ctx, int n_cont, pp_err *e)
{
	it->kind = kind;
	it->n = n;
	it->n_ctx = n_ctx;
	it->n_cont = n_cont;
	it->ctx = calloc((size_t)n_ctx, sizeof *it->ctx);
	it->cont = calloc((size_t)n_cont, sizeof *it->cont);
	it->chars = calloc((size_t)n, sizeof *it->chars);
	return it->ctx && it->cont && it->chars ? 0 : nomem(e);
}

int item_choice(eval_item *it, const char *ctx, const char *const *choices, int n,
		const char *delim, int answer, pp_err *e)
{
	if (n < 2)
		return pp_errorf(e, PP_EUSAGE,
				 "%d choice%s: a multiple-choice item needs two or more", n,
				 n == 1 ? "" : "s");
	if (answer < 0 || answer >= n)
		return pp_errorf(e, PP_EUSAGE, "answer %d is out of range: %d choices (0 to %d)",
				 answer, n, n - 1);
	int rc = item_alloc(it, EVAL_CHOICE, n, 1, n, e);
	if (!rc && !(it->ctx[0] = strdup(ctx)))
		rc = nomem(e);
	for (int i = 0; !rc && i < n; i++) {
		it->chars[i] = (double)utf8_chars(choices[i]);
		if (!(it->cont[i] = cat(delim, choices[i])))
			rc = nomem(e);
	}
	it->answer = answer;
	return rc;
}

int item_partial(eval_item *it, const char *const *ctxs, int n, const char *cont, int answer,
		 pp_err *e)
{
	if (n < 2)
		return pp_errorf(e, PP_EUSAGE,
				 "%d context%s: a partial-scoring item needs two or more", n,
				 n == 1 ? "" : "s");
	if (answer < 0 || answer >= n)
		return pp_errorf(e, PP_EUSAGE, "answer %d is out of range: %d contexts (0 to %d)",
				 answer, n, n - 1);
	int rc = item_alloc(it, EVAL_PARTIAL, n, n, 1, e);
	if (!rc && !(it->cont[0] = strdup(cont)))
		rc = nomem(e);
	for (int i = 0; !rc && i < n; i++) {
		it->chars[i] = (double)utf8_chars(ctxs[i]);
		if (!(it->ctx[i] = strdup(ctxs[i])))
			rc = nomem(e);
	}
	it->answer = answer;
	return rc;
}

/* lm-evaluation-harness's Lambada: the context is the text before its last
 * space, the target that space and the last word */
int item_cloze(eval_item *it, const char *text, pp_err *e)
{
	const char *sp = strrchr(text, ' ');
	if (!sp || sp == text)
		return pp_errorf(e, PP_EUSAGE,
				 "an empty context: the text needs words before its last one");
	if (!sp[1])
		return pp_errorf(e, PP_EUSAGE,
				 "the text ends with a space: no last word to predict");
	int rc = item_alloc(it, EVAL_CLOZE, 1, 1, 1, e);
	if (!rc &&
	    (!(it->ctx[0] = strndup(text, (size_t)(sp - text))) || !(it->cont[0] = strdup(sp))))
		rc = nomem(e);
	if (!rc)
		it->chars[0] = (double)utf8_chars(sp + 1);
	it->answer = -1;
	return rc;
}

void item_free(eval_item *it)
{
	for (int i = 0; it->ctx && i < it->n_ctx; i++)
		free(it->ctx[i]);
	for (int i = 0; it->cont && i < it->n_cont; i++)
		free(it->cont[i]);
	free(it->ctx);
	free(it->cont);
	free(it->chars);
	memset(it, 0, sizeof *it);
}
