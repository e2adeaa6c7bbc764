/* Chat templates: a list of messages into a prompt's ids.
 *
 * pp does not run Jinja. It recognises the template families by their
 * markers and writes them itself:
 *   ChatML (<|im_start|>, SmolLM2, Qwen): "<|im_start|>ROLE\nCONTENT<|im_end|>\n"
 *     per message, then "<|im_start|>assistant\n"; a default system message
 *     written in the template (SmolLM2's "You are a helpful AI assistant...")
 *     comes first when the messages start without one.
 *   plain (no template, or one pp does not know): "ROLE: CONTENT\n" per
 *     message, then "assistant:".
 * Special tokens become their ids, never text the tokenizer could split;
 * the text between them is encoded as the tokenizer encodes any text (as
 * Hugging Face does around added tokens). */
#include "chat.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void chat_free(decode_chat *c)
{
	free(c->default_system);
	memset(c, 0, sizeof *c);
}

/* the literal of a default system message in a ChatML template:
 * '<|im_start|>system\n' up to '<|im_end|>' inside a quoted string */
static char *default_system(const char *tpl)
{
	const char *open = "<|im_start|>system\n";
	const char *p = strstr(tpl, open);
	if (!p)
		return NULL;
	p += strlen(open);
	const char *end = strstr(p, "<|im_end|>");
	/* a message written in the template, not a variable ({{ ... }}) */
	if (!end || memchr(p, '{', (size_t)(end - p)) || memchr(p, '\'', (size_t)(end - p)))
		return NULL;
	return strndup(p, (size_t)(end - p));
}

int chat_load(decode_chat *c, const char *config_path, const pp_tokenizer *tk, pp_err *e)
{
	memset(c, 0, sizeof *c);
	c->kind = CHAT_PLAIN;
	c->start = c->end = -1;
	if (!tk)
		return pp_errorf(e, PP_EUSAGE,
				 "--chat needs a tokenizer: the checkpoint keeps none "
				 "and the config names none");
	json_t *cfg = config_path ? json_load_file(config_path, 0, NULL) : NULL;
	const char *tpl = json_string_value(json_object_get(cfg, "chat_template"));
	const int s = tok_piece_id(tk, "<|im_start|>", 12), en = tok_piece_id(tk, "<|im_end|>", 10);
	if (tpl && strstr(tpl, "<|im_start|>") && s >= 0 && en >= 0) {
		c->kind = CHAT_CHATML;
		c->start = s;
		c->end = en;
		c->default_system = default_system(tpl);
	}
	json_decref(cfg);
	return 0;
}

const char *chat_name(const decode_chat *c) { return c->kind == CHAT_CHATML ? "chatml" : "plain"; }

/* text: encoded onto ids and appended to the prompt's text */
static int put_text(const pp_tokenizer *tk, const char *text, tok_ids *ids, tok_text *shown,
		    pp_err *e)
{
	if (tok_text_append(shown, text, strlen(text)))
		return pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
	return tok_encode(tk, text, strlen(text), ids, e);
}

static int put_special(int id, const char *spelled, tok_ids *ids, tok_text *shown, pp_err *e)
{
	if (tok_ids_push(ids, id) || tok_text_append(shown, spelled, strlen(spelled)))
		return pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
	return 0;
}

int chat_apply(const decode_chat *c, const pp_tokenizer *tk, const chat_message *m, int n,
	       tok_ids *ids, char **text, pp_err *e)
{
	tok_text shown = {0};
	int rc = 0;
	*text = NULL;
	if (tok_adds_bos(tk) && tok_bos(tk) >= 0 && tok_ids_push(ids, tok_bos(tk)))
		rc = pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
	const bool sys = n > 0 && !strcmp(m[0].role, "system");
	for (int i = c->default_system && !sys ? -1 : 0; i <= n && !rc; i++) {
		/* i = -1: the template's system message; i = n: the reply's start */
		const char *role = i < 0 ? "system" : i == n ? "assistant" : m[i].role;
		const char *content = i < 0 ? c->default_system : i == n ? NULL : m[i].content;
		char *head = malloc(strlen(role) + 2);
		if (!head) {
			rc = pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
			break;
		}
		sprintf(head, "%s\n", role);
		if (c->kind == CHAT_CHATML) {
			rc = put_special(c->start, "<|im_start|>", ids, &shown, e);
			if (!rc && content) {
				char *body = malloc(strlen(head) + strlen(content) + 1);
				if (!body)
					rc = pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
				else
					rc = put_text(tk, strcat(strcpy(body, head), content), ids,
						      &shown, e);
				free(body);
				if (!rc)
					rc = put_special(c->end, "<|im_end|>", ids, &shown, e);
				if (!rc)
					rc = put_text(tk, "\n", ids, &shown, e);
			} else if (!rc) {
				rc = put_text(tk, head, ids, &shown, e);
			}
		} else { /* the whole text is encoded once, at the end */
			const char *parts[] = {role, ":", content ? " " : "",
					       content ? content : "", content ? "\n" : ""};
			for (int k = 0; k < 5 && !rc; k++)
				if (tok_text_append(&shown, parts[k], strlen(parts[k])))
					rc = pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
		}
		free(head);
	}
	if (!rc && c->kind == CHAT_PLAIN)
		rc = tok_encode(tk, shown.s, shown.n, ids, e);
	if (!rc && !(*text = strndup(shown.s ? shown.s : "", shown.n)))
		rc = pp_errorf(e, PP_ERUNTIME, "chat: out of memory");
	tok_text_free(&shown);
	return rc;
}
