/* Task file schemas: one line's JSON object into an item, for pp's own
 * schema and the published files of HellaSwag, ARC, PIQA, BoolQ,
 * Winogrande and Lambada (formats.c). */
#ifndef PP_EVAL_FORMATS_H
#define PP_EVAL_FORMATS_H

#include <jansson.h>

#include "item.h"

/* in the order of config's pp_task_format_names (eval_task_format) */
typedef enum {
	TASK_JSONL,
	TASK_HELLASWAG,
	TASK_ARC,
	TASK_PIQA,
	TASK_BOOLQ,
	TASK_WINOGRANDE,
	TASK_LAMBADA,
	TASK_NFORMATS
} eval_format;

/* "jsonl", "hellaswag", "arc", "piqa", "boolq", "winogrande", "lambada" */
const char *eval_format_name(eval_format f);
int eval_format_parse(const char *s, eval_format *f, pp_err *e);

/* What a format reader gets beyond the line: PIQA's labels, published in a
 * file of their own beside the questions (-1 where none). */
typedef struct {
	const int *labels;
	int n_labels;
	int index; /* the line's item index */
} format_ctx;

/* Fills it (kind, requests, chars, answer) from o; a fault is PP_EUSAGE
 * with the message alone (task.c adds the file and line). */
int format_item(eval_format f, json_t *o, const format_ctx *fc, eval_item *it, pp_err *e);

#endif
