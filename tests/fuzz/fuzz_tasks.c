/* libFuzzer target: evaluation task files (eval_task_parse) in every
 * format, on arbitrary bytes. The first byte picks the format (byte %
 * TASK_NFORMATS) and, from its higher part, the item limit (0: all, else
 * 1 to 3); the rest is the file. Checks, when it parses: one or more items
 * (no more than the limit), each of the file's kind, in line order, with
 * n >= 1 requests, n_ctx and n_cont 1 or n (as the kind says), every
 * context and continuation a string, chars >= 0 and the answer in [-1, n)
 * (-1 for cloze alone); when it does not: a message. Built and run by
 * tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/eval/task.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_item(const eval_item *it, eval_kind kind, int last_line)
{
	if (it->kind != kind || it->line <= last_line)
		__builtin_trap(); /* of another kind than the file's, or out of line order */
	if (it->n < 1 || (it->n_ctx != 1 && it->n_ctx != it->n) ||
	    (it->n_cont != 1 && it->n_cont != it->n))
		__builtin_trap(); /* n, n_ctx, n_cont */
	if (it->answer < -1 || it->answer >= it->n)
		__builtin_trap(); /* an answer out of range */
	if (!it->ctx || !it->cont || !it->chars)
		__builtin_trap();
	for (int i = 0; i < it->n_ctx; i++)
		if (!it->ctx[i])
			__builtin_trap();
	for (int i = 0; i < it->n_cont; i++)
		if (!it->cont[i])
			__builtin_trap();
	for (int i = 0; i < it->n; i++) {
		if (!(it->chars[i] >= 0)) /* NaN too */
			__builtin_trap();
		/* every request reads a string (eval_ctx/eval_cont index by n_*) */
		if (strlen(eval_ctx(it, i)) + strlen(eval_cont(it, i)) == (size_t)-1)
			__builtin_trap();
	}
	switch (it->kind) {
	case EVAL_CHOICE: /* one context, n >= 2 continuations */
		if (it->n < 2 || it->n_ctx != 1 || it->n_cont != it->n || it->answer < 0)
			__builtin_trap();
		break;
	case EVAL_PARTIAL: /* n >= 2 contexts, one continuation */
		if (it->n < 2 || it->n_ctx != it->n || it->n_cont != 1 || it->answer < 0)
			__builtin_trap();
		break;
	case EVAL_CLOZE: /* one of each, no answer */
		if (it->n != 1 || it->answer != -1 || !it->ctx[0][0] || !it->cont[0][0])
			__builtin_trap();
		break;
	default:
		__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const eval_format f = (eval_format)(data[0] % TASK_NFORMATS);
	const int limit = data[0] / TASK_NFORMATS % 4;
	eval_task t;
	pp_err e = {0};
	if (eval_task_parse(&t, "fuzz.jsonl", (const char *)data + 1, size - 1, f, limit, &e) ==
	    0) {
		if (t.fmt != f || !t.name || strcmp(t.name, "fuzz") || !t.items || t.n_items < 1 ||
		    (limit > 0 && t.n_items > limit))
			__builtin_trap();
		for (int i = 0; i < t.n_items; i++)
			check_item(&t.items[i], t.kind, i ? t.items[i - 1].line : 0);
		eval_task_free(&t);
	} else if (!e.msg[0] || t.items || t.n_items) {
		__builtin_trap(); /* a failure without a message, or items left behind */
	}
	return 0;
}
