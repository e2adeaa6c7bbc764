/* Task files: lines of JSON objects into items (task.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../config/types.h"
#include "task.h"

static int nomem(pp_err *e) { return pp_errorf(e, PP_ERUNTIME, "out of memory"); }

/* the names, in the order of eval_format */
#define format_names pp_task_format_names

const char *eval_format_name(eval_format f)
{
	return f >= 0 && f < TASK_NFORMATS ? format_names[f] : "?";
}

int eval_format_parse(const char *s, eval_format *f, pp_err *e)
{
	for (int i = 0; i < TASK_NFORMATS; i++)
		if (!strcmp(s, format_names[i])) {
			*f = (eval_format)i;
			return 0;
		}
	return pp_errorf(e, PP_EUSAGE,
			 "task format '%s': expected jsonl, hellaswag, arc, piqa, boolq, "
			 "winogrande or lambada",
			 s);
}

void eval_task_free(eval_task *t)
{
	for (int i = 0; i < t->n_items; i++)
		item_free(&t->items[i]);
	free(t->items);
	free(t->name);
	free(t->path);
	memset(t, 0, sizeof *t);
}

static const char *kind_name(eval_kind k)
{
	return k == EVAL_CHOICE    ? "multiple choice"
	       : k == EVAL_PARTIAL ? "partial scoring"
				   : "cloze";
}

/* PIQA publishes its labels apart: NAME.jsonl beside NAME-labels.lst, one
 * 0 or 1 per line. Read when the file exists; *n is -1 when it does not. */
static int piqa_labels(const char *path, int **labels, int *n, pp_err *e)
{
	*labels = NULL;
	*n = -1;
	size_t len = strlen(path);
	const char *ext = len > 6 && !strcmp(path + len - 6, ".jsonl") ? path + len - 6
								       : path + len;
	char lst[PP_PATH_MAX + 64];
	snprintf(lst, sizeof lst, "%.*s-labels.lst", (int)(ext - path), path);
	char *text = NULL;
	size_t tl = 0;
	if (access(lst, F_OK))
		return 0;
	int rc = fs_read_file(lst, &text, &tl, e);
	if (rc)
		return rc;
	int cap = 0;
	*n = 0;
	for (char *p = text, *end; p < text + tl && !rc; p = end) {
		while (p < text + tl && (*p == '\n' || *p == '\r' || *p == ' '))
			p++;
		if (p >= text + tl)
			break;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > 1)
			rc = pp_errorf(e, PP_EUSAGE, "%s: label %d: expected 0 or 1", lst, *n + 1);
		else if (*n == cap) {
			int *l = realloc(*labels, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *l);
			if (!l)
				rc = nomem(e);
			else
				*labels = l;
		}
		if (!rc)
			(*labels)[(*n)++] = (int)v;
	}
	free(text);
	return rc;
}

static char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	size_t n = strlen(b);
	if (n > 6 && !strcmp(b + n - 6, ".jsonl"))
		n -= 6;
	else if (n > 5 && !strcmp(b + n - 5, ".json"))
		n -= 5;
	return strndup(b, n);
}

static int parse(eval_task *t, const char *name, const char *text, size_t len, eval_format f,
		 int limit, const int *labels, int n_labels, pp_err *e)
{
	memset(t, 0, sizeof *t);
	t->fmt = f;
	if (!(t->name = base_name(name)) || !(t->path = strdup(name))) {
		eval_task_free(t);
		return nomem(e);
	}
	int rc = 0, cap = 0, line = 0;
	for (const char *p = text, *end; p < text + len && !rc; p = end + (end < text + len)) {
		end = memchr(p, '\n', (size_t)(text + len - p));
		if (!end)
			end = text + len;
		line++;
		const char *q = p;
		while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
			q++;
		if (q == end)
			continue;
		if (limit > 0 && t->n_items == limit)
			break;
		json_error_t je;
		json_t *o = json_loadb(p, (size_t)(end - p), JSON_REJECT_DUPLICATES, &je);
		if (!o || !json_is_object(o)) {
			rc = pp_errorf(
				e, PP_EUSAGE,
				"%s: line %d: %s (a task file holds one JSON object per line)",
				name, line, o ? "not a JSON object" : je.text);
			json_decref(o);
			break;
		}
		if (t->n_items == cap) {
			eval_item *it = realloc(t->items,
						(size_t)(cap = cap ? 2 * cap : 64) * sizeof *it);
			if (!it) {
				json_decref(o);
				rc = nomem(e);
				break;
			}
			t->items = it;
		}
		eval_item *it = &t->items[t->n_items];
		memset(it, 0, sizeof *it);
		format_ctx fc = {labels, n_labels, t->n_items};
		rc = format_item(f, o, &fc, it, e);
		json_decref(o);
		it->line = line;
		t->n_items++;
		if (!rc && t->n_items > 1 && it->kind != t->kind)
			rc = pp_errorf(e, PP_EUSAGE, "a %s item in a file of %s items",
				       kind_name(it->kind), kind_name(t->kind));
		t->kind = t->items[0].kind;
		if (rc)
			pp_err_prefix(e, "%s: line %d", name, line);
	}
	if (!rc && !t->n_items)
		rc = pp_errorf(e, PP_EUSAGE, "%s: no items (expected one JSON object per line)",
			       name);
	if (rc)
		eval_task_free(t);
	return rc;
}

int eval_task_parse(eval_task *t, const char *name, const char *text, size_t len, eval_format f,
		    int limit, pp_err *e)
{
	return parse(t, name, text, len, f, limit, NULL, -1, e);
}

int eval_task_read(eval_task *t, const char *path, eval_format f, int limit, pp_err *e)
{
	char *text = NULL;
	size_t len = 0;
	int *labels = NULL, n_labels = -1;
	int rc = fs_read_file(path, &text, &len, e);
	if (rc) {
		e->code = PP_EUSAGE;
		return rc;
	}
	if (f == TASK_PIQA)
		rc = piqa_labels(path, &labels, &n_labels, e);
	if (!rc)
		rc = parse(t, path, text, len, f, limit, labels, n_labels, e);
	free(labels);
	free(text);
	return rc;
}
