/* Chat templates: a list of messages into ids, for a prompt or for
 * training.
 *
 * pp does not run Jinja. It recognises the template families by their
 * markers and writes them itself:
 *   ChatML (<|im_start|>, SmolLM2, Qwen): "<|im_start|>ROLE\nCONTENT<|im_end|>\n"
 *     per message, then "<|im_start|>assistant\n" for a prompt; a default
 *     system message written in the template (SmolLM2's "You are a helpful
 *     AI assistant...") comes first when the messages start without one.
 *   plain (no template, or one pp does not know): "ROLE: CONTENT\n" per
 *     message, then "assistant:" for a prompt, or the EOS after a
 *     conversation for training.
 * Special tokens become their ids, never text the tokenizer could split;
 * the text between them is encoded as the tokenizer encodes any text (as
 * Hugging Face does around added tokens). */
#include "chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int oom(pp_err *e) { return pp_errorf(e, PP_ERUNTIME, "chat: out of memory"); }

void chat_free(chat_template *c)
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

int chat_load(chat_template *c, const char *config_path, const pp_tokenizer *tk, pp_err *e)
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

int chat_load_beside(chat_template *c, const char *tokenizer_path, const pp_tokenizer *tk,
		     pp_err *e)
{
	const char *slash = tokenizer_path ? strrchr(tokenizer_path, '/') : NULL;
	int dir = slash ? (int)(slash - tokenizer_path + 1) : 0;
	char *conf = malloc((size_t)dir + sizeof "tokenizer_config.json");
	if (!conf)
		return oom(e);
	sprintf(conf, "%.*stokenizer_config.json", dir, tokenizer_path);
	int rc = chat_load(c, conf, tk, e);
	free(conf);
	return rc;
}

const char *chat_name(const chat_template *c)
{
	return c->kind == CHAT_CHATML ? "chatml" : "plain";
}

/* ---- rendering ----------------------------------------------------------
 *
 * Text waits in run until a special token (or the end) encodes it in one
 * piece; seg[k] is where a stretch of run that counts (or not) begins. */

typedef struct {
	size_t at;  /* byte offset in run */
	bool train; /* its tokens count */
} segment;

typedef struct {
	const pp_tokenizer *tk;
	tok_ids *ids;
	tok_text *mask; /* NULL: not asked for */
	tok_text shown; /* the text, special tokens spelled out */
	tok_text run;
	segment *seg;
	int n_seg, seg_cap;
	tok_ids prefix; /* scratch: ids of a prefix of run */
} render;

static int mask_put(tok_text *mask, size_t n, char v)
{
	char block[256];
	memset(block, v, sizeof block);
	for (size_t k; n; n -= k) {
		k = n < sizeof block ? n : sizeof block;
		if (tok_text_append(mask, block, k))
			return -1;
	}
	return 0;
}

/* run into ids, in one encoding; each token of a stretch that counts is
 * marked in mask. Where stretch k begins (byte p of run), the ids of
 * run[0, p) alone tell the tokens wholly before p (the ids both encodings
 * share) from one that straddles p (the next, when they differ). */
static int flush(render *r, pp_err *e)
{
	if (!r->run.n)
		return 0;
	const size_t first = r->ids->n;
	int rc = tok_encode(r->tk, r->run.s, r->run.n, r->ids, e);
	if (rc)
		return rc;
	const size_t n = r->ids->n - first;
	bool any = false;
	for (int k = 0; k < r->n_seg; k++)
		any |= r->seg[k].train;
	if (r->mask && mask_put(r->mask, n, 0))
		return oom(e);
	size_t prev_end = 0;
	for (int k = 0; r->mask && any && k < r->n_seg; k++) {
		size_t begin = prev_end, end = n;
		if (k + 1 < r->n_seg) {
			r->prefix.n = 0;
			if ((rc = tok_encode(r->tk, r->run.s, r->seg[k + 1].at, &r->prefix, e)))
				return rc;
			size_t j = 0;
			while (j < r->prefix.n && j < n &&
			       r->prefix.ids[j] == r->ids->ids[first + j])
				j++;
			bool straddles = j < r->prefix.n && j < n;
			end = j + straddles;
			prev_end = j;
		}
		if (r->seg[k].train)
			for (size_t i = begin; i < end && i < n; i++)
				r->mask->s[r->mask->n - n + i] = 1;
	}
	r->run.n = 0;
	r->n_seg = 0;
	return 0;
}

static int put_text(render *r, const char *text, size_t len, bool train, pp_err *e)
{
	if (!len)
		return 0;
	if (!r->n_seg || r->seg[r->n_seg - 1].train != train) {
		if (r->n_seg == r->seg_cap) {
			int cap = r->seg_cap ? 2 * r->seg_cap : 8;
			segment *p = realloc(r->seg, (size_t)cap * sizeof *p);
			if (!p)
				return oom(e);
			r->seg = p;
			r->seg_cap = cap;
		}
		r->seg[r->n_seg++] = (segment){r->run.n, train};
	}
	if (tok_text_append(&r->run, text, len) || tok_text_append(&r->shown, text, len))
		return oom(e);
	return 0;
}

static int put_str(render *r, const char *text, bool train, pp_err *e)
{
	return put_text(r, text, strlen(text), train, e);
}

static int put_special(render *r, int id, const char *spelled, bool train, pp_err *e)
{
	int rc = flush(r, e);
	if (rc)
		return rc;
	if (tok_ids_push(r->ids, id) ||
	    (spelled && tok_text_append(&r->shown, spelled, strlen(spelled))) ||
	    (r->mask && mask_put(r->mask, 1, train)))
		return oom(e);
	return 0;
}

/* BOS and EOS are ids only: the text shows what the template writes */
static int put_bos(render *r, pp_err *e)
{
	bool bos = tok_adds_bos(r->tk) && tok_bos(r->tk) >= 0;
	return bos ? put_special(r, tok_bos(r->tk), NULL, false, e) : 0;
}

static int put_eos(render *r, bool train, pp_err *e)
{
	return tok_eos(r->tk) >= 0 ? put_special(r, tok_eos(r->tk), NULL, train, e) : 0;
}

static void render_free(render *r)
{
	tok_text_free(&r->shown);
	tok_text_free(&r->run);
	tok_ids_free(&r->prefix);
	free(r->seg);
}

/* The messages through the template; prompt: then the start of the
 * assistant's reply; else (training) the end of the conversation. */
static int render_messages(render *r, const chat_template *c, const chat_message *m, int n,
			   const bool *train, bool prompt, pp_err *e)
{
	int rc = put_bos(r, e);
	const bool sys = n > 0 && !strcmp(m[0].role, "system");
	for (int i = c->default_system && !sys ? -1 : 0; i <= n && !rc; i++) {
		if (i == n && !prompt)
			break;
		/* i = -1: the template's system message; i = n: the reply's start */
		const char *role = i < 0 ? "system" : i == n ? "assistant" : m[i].role;
		const char *content = i < 0 ? c->default_system : i == n ? NULL : m[i].content;
		const bool t = i >= 0 && i < n && (train ? train[i] : !strcmp(role, "assistant"));
		if (c->kind == CHAT_CHATML) {
			rc = put_special(r, c->start, "<|im_start|>", false, e);
			if (!rc)
				rc = put_str(r, role, false, e);
			if (!rc)
				rc = put_str(r, "\n", false, e);
			if (!rc && content) {
				rc = put_str(r, content, t, e);
				if (!rc)
					rc = put_special(r, c->end, "<|im_end|>", t, e);
				if (!rc)
					rc = put_str(r, "\n", false, e);
			}
		} else { /* the whole text is encoded once, at the end */
			rc = put_str(r, role, false, e);
			if (!rc)
				rc = put_str(r, ":", false, e);
			if (!rc && content) {
				rc = put_str(r, " ", t, e);
				if (!rc)
					rc = put_str(r, content, t, e);
				if (!rc)
					rc = put_str(r, "\n", t, e);
			}
		}
	}
	if (!rc && !prompt && c->kind == CHAT_PLAIN)
		rc = put_eos(r,
			     n > 0 && (train ? train[n - 1] : !strcmp(m[n - 1].role, "assistant")),
			     e);
	if (!rc)
		rc = flush(r, e);
	return rc;
}

int chat_apply(const chat_template *c, const pp_tokenizer *tk, const chat_message *m, int n,
	       tok_ids *ids, char **text, pp_err *e)
{
	render r = {.tk = tk, .ids = ids};
	*text = NULL;
	int rc = render_messages(&r, c, m, n, NULL, true, e);
	if (!rc && !(*text = strndup(r.shown.s ? r.shown.s : "", r.shown.n)))
		rc = oom(e);
	render_free(&r);
	return rc;
}

int chat_render(const chat_template *c, const pp_tokenizer *tk, const chat_message *m, int n,
		const bool *train, tok_ids *ids, tok_text *mask, pp_err *e)
{
	render r = {.tk = tk, .ids = ids, .mask = mask};
	int rc = render_messages(&r, c, m, n, train, false, e);
	render_free(&r);
	return rc;
}

int chat_render_completion(const chat_template *c, const pp_tokenizer *tk, const char *prompt,
			   const char *completion, tok_ids *ids, tok_text *mask, pp_err *e)
{
	if (c->kind == CHAT_CHATML) {
		const chat_message m[2] = {{"user", prompt}, {"assistant", completion}};
		const bool train[2] = {false, true};
		return chat_render(c, tk, m, 2, train, ids, mask, e);
	}
	render r = {.tk = tk, .ids = ids, .mask = mask};
	int rc = put_bos(&r, e);
	if (!rc)
		rc = put_str(&r, prompt, false, e);
	if (!rc)
		rc = put_str(&r, completion, true, e);
	if (!rc)
		rc = put_eos(&r, true, e);
	if (!rc)
		rc = flush(&r, e);
	render_free(&r);
	return rc;
}
