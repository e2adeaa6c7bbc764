/* JSON lines for pp-tokenize --format jsonl: one record per line, from
 * files that are plain or gzip- or zstd-compressed (base/zfile.h), read as
 * a stream. A line is one of
 *   {"text": T}                           pretraining text, one document
 *   {"prompt": P, "completion": C}        strings: completion-only loss;
 *                                         lists of messages: the
 *                                         completion's assistant turns count
 *   {"messages": [{"role": R, "content": C}, ...]}
 *                                         R system, user or assistant; the
 *                                         assistant turns count (at least one)
 * Other keys ("meta", "id", ...) are ignored; blank lines are skipped. A
 * line that is not JSON, has none of these or more than one, or whose
 * fields have the wrong type or an unknown role, is an error naming the
 * file and line (PP_EUSAGE), as are damaged compressed data. */
#ifndef PP_DATA_JSONL_H
#define PP_DATA_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"
#include "../tok/chat.h"

typedef enum { JSONL_TEXT, JSONL_COMPLETION, JSONL_MESSAGES } jsonl_kind;

/* A line's record; its strings stay valid until the next jsonl_next. */
typedef struct {
	jsonl_kind kind;
	const char *text; /* TEXT */
	size_t text_len;
	const char *prompt, *completion; /* COMPLETION */
	const chat_message *messages;    /* MESSAGES */
	const bool *train;               /* (n_messages) the ones that count */
	int n_messages;
} jsonl_record;

typedef struct jsonl_reader jsonl_reader;

/* paths: n inputs, "-" (or n == 0) is standard input; each is checked to
 * be a readable file first (PP_EUSAGE naming it). */
int jsonl_open(jsonl_reader **r, char *const *paths, int n, pp_err *e);
/* The next record: *got false at the end. */
int jsonl_next(jsonl_reader *r, jsonl_record *rec, bool *got, pp_err *e);
/* "FILE:LINE" of the last record, for messages */
const char *jsonl_where(const jsonl_reader *r);
uint64_t jsonl_bytes_read(const jsonl_reader *r); /* of the files, compressed */
int64_t jsonl_bytes_total(const jsonl_reader *r); /* -1 when an input has no known size */
void jsonl_close(jsonl_reader *r);

/* A record's ids (appended to ids) and, for instruction data, one mask
 * byte per id (appended to mask; *masked true): text is encoded as it
 * stands (no BOS or EOS, as pp-tokenize encodes text files); instruction
 * data goes through the chat template (tok/chat.h). */
int jsonl_encode(const jsonl_record *rec, const chat_template *c, const pp_tokenizer *tk,
		 tok_ids *ids, tok_text *mask, bool *masked, pp_err *e);

#endif
