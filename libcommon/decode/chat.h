/* Chat templates (chat.c): messages into a prompt's ids. */
#ifndef PP_DECODE_CHAT_H
#define PP_DECODE_CHAT_H

#include "../base/error.h"
#include "../tok/tokenizer.h"

enum { CHAT_PLAIN = 0, CHAT_CHATML = 1 };

typedef struct {
	int kind;             /* CHAT_* */
	int start, end;       /* ChatML: the ids of <|im_start|> and <|im_end|> */
	char *default_system; /* the template's own system message, or NULL */
} decode_chat;

typedef struct {
	const char *role, *content;
} chat_message;

/* The template of the tokenizer whose tokenizer_config.json (Hugging Face's,
 * its "chat_template") is config_path (NULL or missing: none). Fails only
 * without a tokenizer. */
int chat_load(decode_chat *c, const char *config_path, const pp_tokenizer *tk, pp_err *e);
void chat_free(decode_chat *c);
/* "chatml" or "plain" */
const char *chat_name(const decode_chat *c);

/* Appends the ids of the n messages, and the start of the assistant's
 * reply, to ids; *text (caller frees) gets the same as text, special tokens
 * spelled out. */
int chat_apply(const decode_chat *c, const pp_tokenizer *tk, const chat_message *m, int n,
	       tok_ids *ids, char **text, pp_err *e);

#endif
