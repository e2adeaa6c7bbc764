/* Requests from text: one prompt per line, or one JSON object per line
 * (request.h). A line's error stays with its request, so that the other
 * lines still run. */
#include "request.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOP 16

static const char *const fields = "prompt, messages, max_tokens, temperature, top_k, top_p, seed, "
				  "stop";

int decode_prompt_ids(const pp_tokenizer *tk, const char *text, int V, tok_ids *ids, pp_err *e)
{
	int rc = 0;
	if (tk) {
		if (tok_adds_bos(tk) && tok_bos(tk) >= 0 && tok_ids_push(ids, tok_bos(tk)))
			return pp_errorf(e, PP_ERUNTIME, "prompt: out of memory");
		rc = tok_encode(tk, text, strlen(text), ids, e);
	} else {
		for (const char *p = text; *p && !rc;) {
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p) {
				while (*end == ' ' || *end == '\t' || *end == '\n')
					end++;
				if (!*end)
					break;
				return pp_errorf(
					e, PP_EUSAGE,
					"prompt '%s': without a tokenizer the prompt is token "
					"ids separated by spaces",
					text);
			}
			if (v < 0 || v >= V)
				return pp_errorf(e, PP_EUSAGE,
						 "prompt: token %ld is outside [0, %d)", v, V);
			if (tok_ids_push(ids, (int)v))
				return pp_errorf(e, PP_ERUNTIME, "prompt: out of memory");
			p = end;
		}
	}
	if (!rc && ids->n == 0 && tok_ids_push(ids, 0))
		return pp_errorf(e, PP_ERUNTIME, "prompt: out of memory");
	return rc;
}

void decode_request_free(decode_request *r)
{
	free(r->prompt);
	tok_ids_free(&r->ids);
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	free(r->stop);
	free(r->error);
	memset(r, 0, sizeof *r);
}

/* A request's own error, recorded in it: parsing stops there, the run goes on */
#define BAD (-1)

/* sets r->error to "line N: msg" (or msg); returns BAD, or PP_ERUNTIME
 * when out of memory */
static int fail(decode_request *r, const char *msg)
{
	char buf[sizeof(((pp_err *)0)->msg) + 32];
	if (r->line)
		snprintf(buf, sizeof buf, "line %d: %s", r->line, msg);
	else
		snprintf(buf, sizeof buf, "%s", msg);
	free(r->error);
	return (r->error = strdup(buf)) ? BAD : PP_ERUNTIME;
}

static int failf(decode_request *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(decode_request *r, const char *fmt, ...)
{
	char msg[sizeof(((pp_err *)0)->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return fail(r, msg);
}

static int add_stop(decode_request *r, const char *s)
{
	char **v = realloc(r->stop, (size_t)(r->n_stop + 1) * sizeof *v);
	if (!v)
		return PP_ERUNTIME;
	r->stop = v;
	if (!(v[r->n_stop] = strdup(s)))
		return PP_ERUNTIME;
	r->n_stop++;
	return 0;
}

static void clear_stops(decode_request *r)
{
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	free(r->stop);
	r->stop = NULL;
	r->n_stop = 0;
}

static decode_request blank(const request_defaults *d, int line)
{
	return (decode_request){.line = line, .max_tokens = d->max_tokens, .sample = d->sample};
}

/* the prompt's ids (and, for a chat, its templated text) */
static int make_ids(decode_request *r, const request_defaults *d, const char *prompt,
		    const chat_message *m, int n_msg)
{
	pp_err e = {0};
	int rc;
	chat_message user = {"user", prompt};
	if (d->chat) {
		char *text = NULL;
		rc = chat_apply(d->chat, d->tk, m ? m : &user, m ? n_msg : 1, &r->ids, &text, &e);
		r->prompt = text;
	} else {
		rc = decode_prompt_ids(d->tk, prompt, d->vocab, &r->ids, &e);
		if (!rc && !(r->prompt = strdup(prompt)))
			rc = pp_errorf(&e, PP_ERUNTIME, "out of memory");
	}
	if (rc == PP_ERUNTIME && strstr(e.msg, "out of memory"))
		return rc;
	return rc ? fail(r, e.msg) : 0;
}

static int int_field(decode_request *r, const char *key, json_t *v, long lo, long hi, long *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return failf(r, "field '%s': expected an integer from %ld to %ld", key, lo, hi);
	*out = (long)json_integer_value(v);
	return 0;
}

static int num_field(decode_request *r, const char *key, json_t *v, double *out)
{
	if (!json_is_number(v))
		return failf(r, "field '%s': expected a number", key);
	*out = json_number_value(v);
	return 0;
}

/* One JSON line. Returns 0 (r->error set or not), or PP_ERUNTIME. */
static int from_json(decode_request *r, const request_defaults *d, const char *line, size_t n)
{
	json_error_t je;
	json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return failf(r, "not a JSON object: %s (column %d)", je.text, je.column);
	int rc = 0;
	const char *key;
	json_t *v, *prompt = NULL, *messages = NULL;
	long l = 0;
	if (!json_is_object(o))
		rc = fail(r, "expected a JSON object ({\"prompt\": ...} or {\"messages\": [...]})");
	json_object_foreach(o, key, v)
	{
		if (rc)
			break;
		if (!strcmp(key, "prompt")) {
			prompt = v;
			if (!json_is_string(v))
				rc = fail(r, "field 'prompt': expected a string");
		} else if (!strcmp(key, "messages")) {
			messages = v;
		} else if (!strcmp(key, "max_tokens")) {
			if (!(rc = int_field(r, key, v, 1, 1000000, &l)))
				r->max_tokens = (int)l;
		} else if (!strcmp(key, "top_k")) {
			if (!(rc = int_field(r, key, v, 0, 1L << 30, &l)))
				r->sample.top_k = (int)l;
		} else if (!strcmp(key, "seed")) {
			if (!(rc = int_field(r, key, v, 0, __LONG_MAX__, &l)))
				r->sample.seed = (uint64_t)l;
		} else if (!strcmp(key, "temperature")) {
			rc = num_field(r, key, v, &r->sample.temperature);
		} else if (!strcmp(key, "top_p")) {
			rc = num_field(r, key, v, &r->sample.top_p);
		} else if (!strcmp(key, "stop")) {
			clear_stops(r);
			size_t i;
			json_t *s;
			if (json_is_string(v)) {
				if (!*json_string_value(v))
					rc = fail(r, "field 'stop': an empty string");
				else
					rc = add_stop(r, json_string_value(v));
			} else if (json_is_array(v) && json_array_size(v) <= MAX_STOP) {
				json_array_foreach(v, i, s)
				{
					if (!json_is_string(s) || !*json_string_value(s)) {
						rc = failf(r,
							   "field 'stop': element %zu is not a "
							   "non-empty string",
							   i);
						break;
					}
					if ((rc = add_stop(r, json_string_value(s))))
						break;
				}
			} else {
				rc = failf(r,
					   "field 'stop': expected a string or an array of at "
					   "most %d strings",
					   MAX_STOP);
			}
		} else {
			rc = failf(r, "unknown field '%s' (expected %s)", key, fields);
		}
	}
	if (!rc && !prompt == !messages)
		rc = fail(r, prompt ? "give 'prompt' or 'messages', not both"
				    : "no 'prompt' or 'messages' field");
	if (!rc && messages && !d->chat)
		rc = fail(r, "field 'messages' needs --chat");
	chat_message *m = NULL;
	size_t nm = 0;
	if (!rc && messages) {
		nm = json_is_array(messages) ? json_array_size(messages) : 0;
		if (!nm)
			rc = fail(r, "field 'messages': expected a non-empty array of {\"role\", "
				     "\"content\"}");
		if (!rc && !(m = calloc(nm, sizeof *m)))
			rc = PP_ERUNTIME;
		for (size_t i = 0; !rc && i < nm; i++) {
			json_t *msg = json_array_get(messages, i), *x;
			const char *k;
			json_object_foreach(msg, k, x)
			{
				if (strcmp(k, "role") && strcmp(k, "content")) {
					rc = failf(r,
						   "messages[%zu]: unknown field '%s' (expected "
						   "role, content)",
						   i, k);
					break;
				}
			}
			m[i].role = json_string_value(json_object_get(msg, "role"));
			m[i].content = json_string_value(json_object_get(msg, "content"));
			if (!rc && (!json_is_object(msg) || !m[i].role || !m[i].content))
				rc = failf(r,
					   "messages[%zu]: expected {\"role\": string, "
					   "\"content\": string}",
					   i);
		}
	}
	if (!rc)
		rc = make_ids(r, d, prompt ? json_string_value(prompt) : NULL, m, (int)nm);
	free(m);
	json_decref(o);
	return rc == BAD ? 0 : rc;
}

/* appends one request for a line (or the command line's prompt: line 0) */
static int add(decode_request **v, int *count, const request_defaults *d, int line,
	       const char *text, size_t n, bool json, pp_err *e)
{
	decode_request *nv = realloc(*v, (size_t)(*count + 1) * sizeof *nv);
	if (!nv)
		return pp_errorf(e, PP_ERUNTIME, "requests: out of memory");
	*v = nv;
	decode_request *r = &nv[(*count)++];
	*r = blank(d, line);
	int rc = 0;
	for (int i = 0; i < d->n_stop && !rc; i++)
		rc = add_stop(r, d->stop[i]);
	if (!rc && json) {
		rc = from_json(r, d, text, n);
	} else if (!rc) {
		char *s = strndup(text, n);
		rc = !s               ? PP_ERUNTIME
		     : strlen(s) != n ? fail(r, "holds a NUL byte; expected text")
				      : make_ids(r, d, s, NULL, 0);
		free(s);
	}
	return rc && rc != BAD ? pp_errorf(e, PP_ERUNTIME, "requests: out of memory") : 0;
}

int requests_from_prompt(const char *prompt, const request_defaults *d, decode_request **out,
			 int *count, pp_err *e)
{
	return add(out, count, d, 0, prompt, strlen(prompt), false, e);
}

int requests_from_lines(const char *text, size_t n, const request_defaults *d, decode_request **out,
			int *count, pp_err *e)
{
	int line = 0, rc = 0;
	for (size_t at = 0; at < n && !rc;) {
		const char *p = text + at, *nl = memchr(p, '\n', n - at);
		size_t len = nl ? (size_t)(nl - p) : n - at;
		at += len + (nl != NULL);
		line++;
		size_t end = len;
		if (end && p[end - 1] == '\r')
			end--;
		size_t lead = 0;
		while (lead < end && (p[lead] == ' ' || p[lead] == '\t'))
			lead++;
		if (lead == end) /* blank */
			continue;
		rc = add(out, count, d, line, p, end, p[lead] == '{', e);
	}
	return rc;
}
