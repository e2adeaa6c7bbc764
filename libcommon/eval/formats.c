/* One line of each task format into an item, with the prompts of
 * lm-evaluation-harness's task definitions (its hellaswag, arc_easy /
 * arc_challenge, piqa, boolq (SuperGLUE), winogrande and lambada_openai
 * YAML files and their preprocessing). */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

/* ---- fields ------------------------------------------------------------ */

static const char *str_field(json_t *o, const char *key, pp_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v) {
		pp_errorf(e, PP_EUSAGE, "no field \"%s\"", key);
		return NULL;
	}
	if (!json_is_string(v)) {
		pp_errorf(e, PP_EUSAGE, "field \"%s\": expected a string", key);
		return NULL;
	}
	return json_string_value(v);
}

/* an index given as a number or as a string of digits ("2", HellaSwag's) */
static int int_field(json_t *o, const char *key, int *out, pp_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return pp_errorf(e, PP_EUSAGE, "no field \"%s\"", key);
	if (json_is_integer(v) && json_integer_value(v) >= -1000000 &&
	    json_integer_value(v) <= 1000000) {
		*out = (int)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char *end;
		long x = strtol(s, &end, 10);
		if (*s && !*end && x >= -1000000 && x <= 1000000) {
			*out = (int)x;
			return 0;
		}
	}
	return pp_errorf(e, PP_EUSAGE, "field \"%s\": expected an integer", key);
}

/* an array of strings: its elements (pointers into o) in *out, malloc'd */
static int str_array(json_t *o, const char *key, const char ***out, int *n, pp_err *e)
{
	json_t *a = json_object_get(o, key);
	if (!a)
		return pp_errorf(e, PP_EUSAGE, "no field \"%s\"", key);
	if (!json_is_array(a))
		return pp_errorf(e, PP_EUSAGE, "field \"%s\": expected an array of strings", key);
	*n = (int)json_array_size(a);
	*out = calloc((size_t)*n + 1, sizeof **out);
	if (!*out)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; i < *n; i++) {
		json_t *v = json_array_get(a, (size_t)i);
		if (!json_is_string(v)) {
			free(*out);
			*out = NULL;
			return pp_errorf(e, PP_EUSAGE, "field \"%s\": element %d is not a string",
					 key, i);
		}
		(*out)[i] = json_string_value(v);
	}
	return 0;
}

/* ---- text as Python does it ---------------------------------------------- */

static bool py_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* str.strip() of ASCII whitespace, in place */
static char *strip(char *s)
{
	size_t n = strlen(s);
	while (n && py_space((unsigned char)s[n - 1]))
		s[--n] = '\0';
	size_t i = 0;
	while (py_space((unsigned char)s[i]))
		i++;
	memmove(s, s + i, n - i + 1);
	return s;
}

/* s with every `from` replaced by `to` (Python's str.replace: left to
 * right, never overlapping); s is freed */
static char *replace(char *s, const char *from, const char *to)
{
	if (!s)
		return NULL;
	const size_t nf = strlen(from), nt = strlen(to);
	size_t count = 0;
	for (const char *p = s; (p = strstr(p, from)); p += nf)
		count++;
	char *out = malloc(strlen(s) + count * nt + 1), *w = out;
	if (out) {
		const char *p = s, *hit;
		while ((hit = strstr(p, from))) {
			memcpy(w, p, (size_t)(hit - p));
			w += hit - p;
			memcpy(w, to, nt);
			w += nt;
			p = hit + nf;
		}
		strcpy(w, p);
	}
	free(s);
	return out;
}

/* re.sub(r"\[.*?\]", "", s) in place: '.' stops at a newline */
static char *drop_brackets(char *s)
{
	if (!s)
		return NULL;
	char *w = s;
	for (char *p = s; *p;) {
		if (*p == '[') {
			char *q = p + 1;
			while (*q && *q != ']' && *q != '\n')
				q++;
			if (*q == ']') {
				p = q + 1;
				continue;
			}
		}
		*w++ = *p++;
	}
	*w = '\0';
	return s;
}

/* HellaSwag's preprocess (lm-evaluation-harness tasks/hellaswag/utils.py) */
static char *hellaswag_clean(const char *text)
{
	char *s = strdup(text);
	if (!s)
		return NULL;
	strip(s);
	s = replace(s, " [title]", ". ");
	s = drop_brackets(s);
	return replace(s, "  ", " ");
}

/* str.capitalize() for ASCII letters: the first upper, the rest lower
 * (other bytes as they are) */
static void capitalize(char *s)
{
	for (size_t i = 0; s[i]; i++)
		if (!((unsigned char)s[i] & 0x80))
			s[i] = (char)(i ? tolower((unsigned char)s[i])
					: toupper((unsigned char)s[i]));
}

static int nomem(pp_err *e) { return pp_errorf(e, PP_ERUNTIME, "out of memory"); }

/* ---- formats -------------------------------------------------------------- */

/* pp's own schema (pp-tasks(5)): {"context", "choices", "answer"},
 * {"contexts", "continuation", "answer"} or {"text"}; target_delimiter
 * (default " ") goes before a choice or the continuation */
static int jsonl_item(json_t *o, eval_item *it, pp_err *e)
{
	const char *delim = " ";
	json_t *d = json_object_get(o, "target_delimiter");
	if (d && !json_is_string(d))
		return pp_errorf(e, PP_EUSAGE, "field \"target_delimiter\": expected a string");
	if (d)
		delim = json_string_value(d);
	const char **list = NULL;
	int n = 0, answer = 0, rc;
	if (json_object_get(o, "choices")) {
		const char *ctx = str_field(o, "context", e);
		if (!ctx)
			return PP_EUSAGE;
		if (!(rc = str_array(o, "choices", &list, &n, e)) &&
		    !(rc = int_field(o, "answer", &answer, e)))
			rc = item_choice(it, ctx, list, n, delim, answer, e);
	} else if (json_object_get(o, "contexts")) {
		const char *cont = str_field(o, "continuation", e);
		if (!cont)
			return PP_EUSAGE;
		char *c = malloc(strlen(delim) + strlen(cont) + 1);
		if (!c)
			return nomem(e);
		strcat(strcpy(c, delim), cont);
		if (!(rc = str_array(o, "contexts", &list, &n, e)) &&
		    !(rc = int_field(o, "answer", &answer, e)))
			rc = item_partial(it, list, n, c, answer, e);
		free(c);
	} else if (json_object_get(o, "text")) {
		const char *text = str_field(o, "text", e);
		rc = text ? item_cloze(it, text, e) : PP_EUSAGE;
	} else {
		rc = pp_errorf(e, PP_EUSAGE,
			       "expected {\"context\", \"choices\", \"answer\"}, {\"contexts\", "
			       "\"continuation\", \"answer\"} or {\"text\"} (pp-tasks(5))");
	}
	free(list);
	return rc;
}

/* HellaSwag: "{activity_label}: {ctx_a} {ctx_b.capitalize()}", cleaned,
 * and the cleaned endings */
static int hellaswag_item(json_t *o, eval_item *it, pp_err *e)
{
	const char *label = str_field(o, "activity_label", e),
		   *a = label ? str_field(o, "ctx_a", e) : NULL,
		   *b = a ? str_field(o, "ctx_b", e) : NULL;
	const char **endings = NULL;
	int n = 0, answer = 0, rc;
	if (!b)
		return PP_EUSAGE;
	if ((rc = str_array(o, "endings", &endings, &n, e)) ||
	    (rc = int_field(o, "label", &answer, e))) {
		free(endings);
		return rc;
	}
	char *bb = strdup(b);
	size_t len = strlen(label) + strlen(a) + (bb ? strlen(bb) : 0) + 4;
	char *raw = bb ? malloc(len) : NULL, *query = NULL;
	char **clean = calloc((size_t)n + 1, sizeof *clean);
	if (raw && clean) {
		capitalize(bb);
		snprintf(raw, len, "%s: %s %s", label, a, bb);
		query = hellaswag_clean(raw);
		rc = query ? 0 : nomem(e);
		for (int i = 0; !rc && i < n; i++)
			if (!(clean[i] = hellaswag_clean(endings[i])))
				rc = nomem(e);
	} else {
		rc = nomem(e);
	}
	if (!rc)
		rc = item_choice(it, query, (const char *const *)clean, n, " ", answer, e);
	for (int i = 0; clean && i < n; i++)
		free(clean[i]);
	free(clean);
	free(query);
	free(raw);
	free(bb);
	free(endings);
	return rc;
}

/* "Question: {question}\nAnswer:" with the given choices */
static int question_item(const char *q, const char *const *choices, int n, int answer,
			 eval_item *it, pp_err *e)
{
	size_t len = strlen(q) + 32;
	char *ctx = malloc(len);
	if (!ctx)
		return nomem(e);
	snprintf(ctx, len, "Question: %s\nAnswer:", q);
	int rc = item_choice(it, ctx, choices, n, " ", answer, e);
	free(ctx);
	return rc;
}

/* ARC: Hugging Face's ai2_arc rows ({"question": str, "choices": {"text",
 * "label"}, "answerKey"}) or AI2's own ({"question": {"stem", "choices":
 * [{"text", "label"}]}, "answerKey"}) */
static int arc_item(json_t *o, eval_item *it, pp_err *e)
{
	const char *key = str_field(o, "answerKey", e);
	if (!key)
		return PP_EUSAGE;
	json_t *q = json_object_get(o, "question");
	const char *stem = NULL;
	json_t *texts = NULL, *labels = NULL, *list = NULL;
	if (json_is_string(q)) {
		stem = json_string_value(q);
		json_t *c = json_object_get(o, "choices");
		texts = json_object_get(c, "text");
		labels = json_object_get(c, "label");
		if (!json_is_array(texts) || !json_is_array(labels) ||
		    json_array_size(texts) != json_array_size(labels))
			return pp_errorf(e, PP_EUSAGE,
					 "field \"choices\": expected {\"text\": [...], \"label\": "
					 "[...]} of one length");
	} else if (json_is_object(q)) {
		stem = str_field(q, "stem", e);
		if (!stem)
			return pp_err_prefix(e, "field \"question\"");
		list = json_object_get(q, "choices");
		if (!json_is_array(list))
			return pp_errorf(e, PP_EUSAGE,
					 "field \"question\": \"choices\" is not an array");
	} else {
		return pp_errorf(
			e, PP_EUSAGE,
			"field \"question\": expected a string or {\"stem\", \"choices\"}");
	}
	const int n = (int)(list ? json_array_size(list) : json_array_size(texts));
	const char **choices = calloc((size_t)n + 1, sizeof *choices);
	if (!choices)
		return nomem(e);
	int answer = -1, rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		json_t *t = list ? json_object_get(json_array_get(list, (size_t)i), "text")
				 : json_array_get(texts, (size_t)i);
		json_t *l = list ? json_object_get(json_array_get(list, (size_t)i), "label")
				 : json_array_get(labels, (size_t)i);
		if (!json_is_string(t) || !json_is_string(l))
			rc = pp_errorf(e, PP_EUSAGE,
				       "choice %d: its text and label must be strings", i);
		else if (!strcmp(json_string_value(l), key) && answer < 0)
			answer = i;
		choices[i] = json_string_value(t);
	}
	if (!rc && answer < 0)
		rc = pp_errorf(e, PP_EUSAGE, "answerKey \"%s\" is none of the choices' labels",
			       key);
	if (!rc)
		rc = question_item(stem, choices, n, answer, it, e);
	free(choices);
	return rc;
}

/* PIQA: "Question: {goal}\nAnswer:", sol1 or sol2; the label in the line
 * (Hugging Face's rows) or in the labels file beside it (the published) */
static int piqa_item(json_t *o, const format_ctx *fc, eval_item *it, pp_err *e)
{
	const char *goal = str_field(o, "goal", e), *s1 = goal ? str_field(o, "sol1", e) : NULL,
		   *s2 = s1 ? str_field(o, "sol2", e) : NULL;
	if (!s2)
		return PP_EUSAGE;
	int label = 0;
	if (json_object_get(o, "label")) {
		if (int_field(o, "label", &label, e))
			return PP_EUSAGE;
	} else if (fc->n_labels < 0) {
		return pp_errorf(e, PP_EUSAGE,
				 "no field \"label\", and no labels file beside the task file "
				 "(NAME-labels.lst, as PIQA publishes them)");
	} else if (fc->index >= fc->n_labels) {
		return pp_errorf(e, PP_EUSAGE, "the labels file has %d labels: none for item %d",
				 fc->n_labels, fc->index + 1);
	} else {
		label = fc->labels[fc->index];
	}
	const char *choices[] = {s1, s2};
	return question_item(goal, choices, 2, label, it, e);
}

/* BoolQ: "{passage}\nQuestion: {question}?\nAnswer:", " no" or " yes";
 * SuperGLUE's label (0/1, or a boolean) or Google's "answer" (boolean) */
static int boolq_item(json_t *o, eval_item *it, pp_err *e)
{
	const char *passage = str_field(o, "passage", e),
		   *question = passage ? str_field(o, "question", e) : NULL;
	if (!question)
		return PP_EUSAGE;
	json_t *l = json_object_get(o, "label");
	if (!l)
		l = json_object_get(o, "answer");
	int answer;
	if (json_is_boolean(l))
		answer = json_is_true(l);
	else if (json_is_integer(l) && (json_integer_value(l) == 0 || json_integer_value(l) == 1))
		answer = (int)json_integer_value(l);
	else
		return pp_errorf(
			e, PP_EUSAGE,
			l ? "field \"label\": expected 0, 1 or a boolean"
			  : "no field \"label\" (SuperGLUE) or \"answer\" (BoolQ's own files)");
	size_t len = strlen(passage) + strlen(question) + 32;
	char *ctx = malloc(len);
	if (!ctx)
		return nomem(e);
	snprintf(ctx, len, "%s\nQuestion: %s?\nAnswer:", passage, question);
	const char *choices[] = {"no", "yes"};
	int rc = item_choice(it, ctx, choices, 2, " ", answer, e);
	free(ctx);
	return rc;
}

/* Winogrande: the sentence up to "_" with each option, then the rest of
 * the sentence, stripped, after a space */
static int winogrande_item(json_t *o, eval_item *it, pp_err *e)
{
	const char *s = str_field(o, "sentence", e), *o1 = s ? str_field(o, "option1", e) : NULL,
		   *o2 = o1 ? str_field(o, "option2", e) : NULL;
	if (!o2)
		return PP_EUSAGE;
	int answer;
	if (int_field(o, "answer", &answer, e))
		return PP_EUSAGE;
	if (answer != 1 && answer != 2)
		return pp_errorf(e, PP_EUSAGE, "field \"answer\": expected \"1\" or \"2\", not %d",
				 answer);
	const char *blank = strchr(s, '_');
	if (!blank)
		return pp_errorf(e, PP_EUSAGE, "field \"sentence\" has no \"_\" to fill");
	const size_t pre = (size_t)(blank - s);
	char *c1 = malloc(pre + strlen(o1) + 1), *c2 = malloc(pre + strlen(o2) + 1);
	char *rest = strdup(blank + 1), *cont = NULL;
	int rc = c1 && c2 && rest ? 0 : nomem(e);
	if (!rc) {
		snprintf(c1, pre + strlen(o1) + 1, "%.*s%s", (int)pre, s, o1);
		snprintf(c2, pre + strlen(o2) + 1, "%.*s%s", (int)pre, s, o2);
		strip(rest);
		if (!(cont = malloc(strlen(rest) + 2)))
			rc = nomem(e);
		else
			strcat(strcpy(cont, " "), rest);
	}
	const char *ctxs[] = {c1, c2};
	if (!rc)
		rc = item_partial(it, ctxs, 2, cont, answer - 1, e);
	free(c1);
	free(c2);
	free(rest);
	free(cont);
	return rc;
}

int format_item(eval_format f, json_t *o, const format_ctx *fc, eval_item *it, pp_err *e)
{
	switch (f) {
	case TASK_JSONL:
		return jsonl_item(o, it, e);
	case TASK_HELLASWAG:
		return hellaswag_item(o, it, e);
	case TASK_ARC:
		return arc_item(o, it, e);
	case TASK_PIQA:
		return piqa_item(o, fc, it, e);
	case TASK_BOOLQ:
		return boolq_item(o, it, e);
	case TASK_WINOGRANDE:
		return winogrande_item(o, it, e);
	case TASK_LAMBADA: {
		const char *text = str_field(o, "text", e);
		return text ? item_cloze(it, text, e) : PP_EUSAGE;
	}
	default:
		return pp_errorf(e, PP_EUSAGE, "task format %d", (int)f);
	}
}
