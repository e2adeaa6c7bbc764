/* JSON lines into records (jsonl.h). */
#include "jsonl.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../base/zfile.h"

#define JSONL_BLOCK     ((size_t)1 << 20)
#define JSONL_MAX_LINE  ((size_t)256 << 20)
#define JSONL_MAX_WHERE 4200

struct jsonl_reader {
	char **paths;
	int n_paths, next_path;
	zfile *z;            /* the input being read, NULL between inputs */
	uint64_t done_bytes; /* of the inputs read to the end */
	int64_t total;
	char *buf; /* decompressed, not consumed: [beg, end) */
	size_t beg, end, cap;
	bool at_eof;
	uint64_t line;
	char where[JSONL_MAX_WHERE];
	json_t *json; /* the last record's line */
	chat_message *msg;
	bool *train;
	int msg_cap;
};

int jsonl_open(jsonl_reader **out, char *const *paths, int n, pp_err *e)
{
	*out = NULL;
	int64_t total;
	int rc = fs_inputs(&paths, &n, &total, e);
	if (rc)
		return rc;
	jsonl_reader *r = calloc(1, sizeof *r);
	if (!r || !(r->paths = calloc((size_t)n, sizeof *r->paths)) ||
	    !(r->buf = malloc(JSONL_BLOCK))) {
		jsonl_close(r);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	r->n_paths = n;
	for (int i = 0; i < n; i++)
		if (!(r->paths[i] = strdup(paths[i]))) {
			jsonl_close(r);
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		}
	r->cap = JSONL_BLOCK;
	r->total = total;
	*out = r;
	return 0;
}

void jsonl_close(jsonl_reader *r)
{
	if (!r)
		return;
	zfile_close(r->z);
	for (int i = 0; r->paths && i < r->n_paths; i++)
		free(r->paths[i]);
	free(r->paths);
	free(r->buf);
	json_decref(r->json);
	free(r->msg);
	free(r->train);
	free(r);
}

const char *jsonl_where(const jsonl_reader *r) { return r->where; }

uint64_t jsonl_bytes_read(const jsonl_reader *r)
{
	return r->done_bytes + (r->z ? zfile_bytes_read(r->z) : 0);
}

int64_t jsonl_bytes_total(const jsonl_reader *r) { return r->total; }

static const char *input_name(const jsonl_reader *r)
{
	const char *p = r->paths[r->next_path - 1];
	return strcmp(p, "-") ? p : "standard input";
}

__attribute__((format(printf, 3, 4))) static int bad_line(jsonl_reader *r, pp_err *e,
							  const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return pp_errorf(e, PP_EUSAGE, "%s: %s", r->where, what);
}

/* The next line of the current input, without its newline (*n, at *p, in
 * the buffer until the next call); *got false at the input's end. */
static int next_line(jsonl_reader *r, const char **p, size_t *n, bool *got, pp_err *e)
{
	*got = false;
	for (;;) {
		char *s = r->buf + r->beg, *q = memchr(s, '\n', r->end - r->beg);
		if (q || (r->at_eof && r->beg < r->end)) {
			*p = s;
			*n = q ? (size_t)(q - s) : r->end - r->beg;
			r->beg += *n + (q != NULL);
			*got = true;
			r->line++;
			snprintf(r->where, sizeof r->where, "%s:%llu", input_name(r),
				 (unsigned long long)r->line);
			return 0;
		}
		if (r->at_eof)
			return 0;
		memmove(r->buf, s, r->end - r->beg);
		r->end -= r->beg;
		r->beg = 0;
		if (r->end == r->cap) { /* a line longer than the buffer */
			if (r->cap >= JSONL_MAX_LINE) {
				snprintf(r->where, sizeof r->where, "%s:%llu", input_name(r),
					 (unsigned long long)r->line + 1);
				return bad_line(r, e, "a line longer than %zu MiB",
						JSONL_MAX_LINE >> 20);
			}
			char *b = realloc(r->buf, 2 * r->cap);
			if (!b)
				return pp_errorf(e, PP_ERUNTIME,
						 "out of memory for a line of %zu "
						 "bytes",
						 r->cap);
			r->buf = b;
			r->cap *= 2;
		}
		size_t got_bytes;
		int rc = zfile_read(r->z, r->buf + r->end, r->cap - r->end, &got_bytes, e);
		if (rc == PP_EUSAGE) { /* damaged data: named by the line it breaks off in */
			uint64_t line = r->line + 1;
			for (const char *c = r->buf + r->beg, *end = r->buf + r->end + got_bytes;
			     (c = memchr(c, '\n', (size_t)(end - c))); c++)
				line++;
			snprintf(r->where, sizeof r->where, "%s:%llu", input_name(r),
				 (unsigned long long)line);
			const char *path = r->paths[r->next_path - 1], *why = e->msg;
			if (!strncmp(why, path, strlen(path)) &&
			    !strncmp(why + strlen(path), ": ", 2))
				why += strlen(path) + 2;
			char copy[sizeof e->msg];
			snprintf(copy, sizeof copy, "%s", why);
			return bad_line(r, e, "%s", copy);
		}
		if (rc)
			return rc;
		r->at_eof = got_bytes == 0;
		r->end += got_bytes;
	}
}

static bool blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return false;
	return true;
}

static int grow_messages(jsonl_reader *r, int n, pp_err *e)
{
	if (n <= r->msg_cap)
		return 0;
	chat_message *m = realloc(r->msg, (size_t)n * sizeof *m);
	if (m)
		r->msg = m;
	bool *t = m ? realloc(r->train, (size_t)n * sizeof *t) : NULL;
	if (!t)
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %d messages", n);
	r->train = t;
	r->msg_cap = n;
	return 0;
}

static const char *const roles[] = {"system", "user", "assistant"};

/* list's messages appended to the record's, those of assistants counting
 * when train; what names the list in messages ("messages", "prompt") */
static int add_messages(jsonl_reader *r, json_t *list, const char *what, bool train, int *n,
			pp_err *e)
{
	if (!json_is_array(list))
		return bad_line(r, e, "'%s' is not a list of messages", what);
	size_t k = json_array_size(list);
	if (k > (size_t)(1 << 24))
		return bad_line(r, e, "'%s' holds %zu messages", what, k);
	int rc = grow_messages(r, *n + (int)k, e);
	for (size_t i = 0; i < k && !rc; i++) {
		json_t *m = json_array_get(list, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		json_t *content = json_object_get(m, "content");
		if (!json_is_object(m))
			return bad_line(r, e, "%s[%zu] is not an object with role and content",
					what, i);
		if (!role)
			return bad_line(r, e, "%s[%zu] has no role (a string)", what, i);
		int known = -1;
		for (int j = 0; j < 3; j++)
			if (!strcmp(role, roles[j]))
				known = j;
		if (known < 0)
			return bad_line(r, e,
					"%s[%zu]: unknown role '%.64s' (expected system, user or "
					"assistant)",
					what, i, role);
		if (!json_is_string(content))
			return bad_line(r, e, "%s[%zu] (%s): content is not a string", what, i,
					role);
		r->msg[*n] = (chat_message){roles[known], json_string_value(content)};
		r->train[*n] = train && known == 2;
		(*n)++;
	}
	return rc;
}

static bool has_assistant(const jsonl_reader *r, int n)
{
	for (int i = 0; i < n; i++)
		if (r->train[i])
			return true;
	return false;
}

/* the record of one line of JSON */
static int parse(jsonl_reader *r, const char *p, size_t n, jsonl_record *rec, pp_err *e)
{
	json_decref(r->json);
	json_error_t err;
	r->json = json_loadb(p, n, 0, &err);
	if (!r->json)
		return bad_line(r, e, "not JSON: %s (column %d)", err.text, err.column);
	if (!json_is_object(r->json))
		return bad_line(r, e, "not a JSON object");
	json_t *text = json_object_get(r->json, "text"),
	       *msgs = json_object_get(r->json, "messages");
	json_t *prompt = json_object_get(r->json, "prompt");
	json_t *completion = json_object_get(r->json, "completion");
	int kinds = (text != NULL) + (msgs != NULL) + (prompt || completion);
	if (kinds != 1)
		return bad_line(r, e,
				"%s: expected one of \"text\", \"prompt\" with \"completion\", or "
				"\"messages\"",
				kinds ? "more than one kind of record" : "no field to tokenize");
	*rec = (jsonl_record){0};
	if (text) {
		if (!json_is_string(text))
			return bad_line(r, e, "\"text\" is not a string");
		rec->kind = JSONL_TEXT;
		rec->text = json_string_value(text);
		rec->text_len = json_string_length(text);
		return 0;
	}
	int k = 0, rc;
	if (msgs) {
		if ((rc = add_messages(r, msgs, "messages", true, &k, e)))
			return rc;
		if (!has_assistant(r, k))
			return bad_line(r, e,
					"\"messages\" has no assistant turn: nothing to "
					"learn");
	} else if (!prompt || !completion) {
		return bad_line(r, e, "\"%s\" without \"%s\"", prompt ? "prompt" : "completion",
				prompt ? "completion" : "prompt");
	} else if (json_is_string(prompt) && json_is_string(completion)) {
		rec->kind = JSONL_COMPLETION;
		rec->prompt = json_string_value(prompt);
		rec->completion = json_string_value(completion);
		return 0;
	} else if (json_is_array(prompt) && json_is_array(completion)) {
		/* conversational: the completion's assistant turns count */
		if ((rc = add_messages(r, prompt, "prompt", false, &k, e)) ||
		    (rc = add_messages(r, completion, "completion", true, &k, e)))
			return rc;
		if (!has_assistant(r, k))
			return bad_line(r, e,
					"\"completion\" has no assistant turn: nothing to "
					"learn");
	} else {
		return bad_line(r, e,
				"\"prompt\" and \"completion\" must both be strings or both "
				"lists of messages");
	}
	rec->kind = JSONL_MESSAGES;
	rec->messages = r->msg;
	rec->train = r->train;
	rec->n_messages = k;
	return 0;
}

int jsonl_next(jsonl_reader *r, jsonl_record *rec, bool *got, pp_err *e)
{
	*got = false;
	for (;;) {
		if (!r->z) {
			if (r->next_path == r->n_paths)
				return 0;
			int rc = zfile_open(&r->z, r->paths[r->next_path++], e);
			if (rc)
				return rc;
			r->beg = r->end = 0;
			r->at_eof = false;
			r->line = 0;
		}
		const char *p;
		size_t n;
		bool line;
		int rc = next_line(r, &p, &n, &line, e);
		if (rc)
			return rc;
		if (!line) {
			r->done_bytes += zfile_bytes_read(r->z);
			zfile_close(r->z);
			r->z = NULL;
			continue;
		}
		if (blank(p, n))
			continue;
		if ((rc = parse(r, p, n, rec, e)))
			return rc;
		*got = true;
		return 0;
	}
}

int jsonl_encode(const jsonl_record *rec, const chat_template *c, const pp_tokenizer *tk,
		 tok_ids *ids, tok_text *mask, bool *masked, pp_err *e)
{
	*masked = rec->kind != JSONL_TEXT;
	switch (rec->kind) {
	case JSONL_TEXT:
		return tok_encode(tk, rec->text, rec->text_len, ids, e);
	case JSONL_COMPLETION:
		return chat_render_completion(c, tk, rec->prompt, rec->completion, ids, mask, e);
	case JSONL_MESSAGES:
		return chat_render(c, tk, rec->messages, rec->n_messages, rec->train, ids, mask, e);
	}
	return pp_errorf(e, PP_ERUNTIME, "record of kind %d", (int)rec->kind);
}
