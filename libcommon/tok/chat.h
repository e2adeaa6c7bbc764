/* Chat templates (chat.c): a conversation into ids, as a prompt that asks
 * for the assistant's reply (pp-decode --chat) or as training data with a
 * loss mask that keeps the assistant's turns (pp-tokenize --format jsonl).
 * Both render through the same code, so a fine-tuned model is prompted
 * with the very ids it was trained on. */
#ifndef PP_TOK_CHAT_H
#define PP_TOK_CHAT_H

#include <stdbool.h>

#include "../base/error.h"
#include "tokenizer.h"

enum { CHAT_PLAIN = 0, CHAT_CHATML = 1 };

typedef struct {
	int kind;             /* CHAT_* */
	int start, end;       /* ChatML: the ids of <|im_start|> and <|im_end|> */
	char *default_system; /* the template's own system message, or NULL */
} chat_template;

typedef struct {
	const char *role, *content;
} chat_message;

/* The template of the tokenizer whose tokenizer_config.json (Hugging Face's,
 * its "chat_template") is config_path (NULL or missing: none). Fails only
 * without a tokenizer. */
int chat_load(chat_template *c, const char *config_path, const pp_tokenizer *tk, pp_err *e);
/* The same, from the tokenizer_config.json in the directory of the
 * tokenizer file tokenizer_path (where Hugging Face keeps it). */
int chat_load_beside(chat_template *c, const char *tokenizer_path, const pp_tokenizer *tk,
		     pp_err *e);
void chat_free(chat_template *c);
/* "chatml" or "plain" */
const char *chat_name(const chat_template *c);

/* Appends the ids of the n messages, and the start of the assistant's
 * reply, to ids; *text (caller frees) gets the same as text, special tokens
 * spelled out. */
int chat_apply(const chat_template *c, const pp_tokenizer *tk, const chat_message *m, int n,
	       tok_ids *ids, char **text, pp_err *e);

/* Training data. Appends the ids of the n messages to ids and one byte per
 * id to mask: 1 for an id that is a target that counts, 0 else. The ids
 * that count are those of the messages with train[i] (train NULL: every
 * assistant message): the reply as the model writes it after the prompt
 * chat_apply gives, with the template's end of its turn (ChatML: the
 * content and <|im_end|>, not the role line nor the newline after it;
 * plain: " CONTENT\n"). The plain template ends a conversation with the
 * tokenizer's EOS (when it has one), which counts when the last message
 * does: it is how pp-decode knows the reply is over.
 *
 * The text between special tokens is encoded in one piece, as Hugging Face
 * does; where a token straddles the start or end of a reply, it counts
 * (as return_assistant_tokens_mask marks any token with a character of the
 * reply). */
int chat_render(const chat_template *c, const pp_tokenizer *tk, const chat_message *m, int n,
		const bool *train, tok_ids *ids, tok_text *mask, pp_err *e);

/* A prompt and its completion. With a chat template: a user turn and an
 * assistant turn (chat_render). Plain: the prompt's and the completion's
 * text encoded in one piece after the BOS (as pp-decode encodes a plain
 * prompt), then the EOS (when the tokenizer has one); the completion and
 * the EOS count, as in TRL's completion-only loss. */
int chat_render_completion(const chat_template *c, const pp_tokenizer *tk, const char *prompt,
			   const char *completion, tok_ids *ids, tok_text *mask, pp_err *e);

#endif
