/* The tokenizers' value types: the opaque tokenizer, the id and byte
 * buffers of their results, the piece types and the text preparation, with
 * the buffers' helpers (types.c). tokenizer.h is the front door; the
 * tokenizer's insides (internal.h) build on these too. */
#ifndef PP_TOK_TYPES_H
#define PP_TOK_TYPES_H

#include <stddef.h>

typedef struct pp_tokenizer pp_tokenizer;

/* A growable id buffer. */
typedef struct {
	int *ids;
	size_t n, cap;
} tok_ids;

/* A growable byte buffer. */
typedef struct {
	char *s;
	size_t n, cap;
} tok_text;

/* Append one id / n bytes (kept NUL-terminated); 0, or -1 out of memory. */
int tok_ids_push(tok_ids *v, int id);
int tok_text_append(tok_text *v, const char *s, size_t n);
void tok_ids_free(tok_ids *v);
void tok_text_free(tok_text *v);

/* Piece types, numbered as SentencePiece (and GGUF's token_type) number them. */
enum { TOK_NORMAL = 1, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE };

/* How text is prepared before the merges. */
typedef struct {
	int add_space_prefix; /* SentencePiece add_dummy_prefix, ByteLevel add_prefix_space */
	int remove_extra_whitespaces; /* SentencePiece */
	int byte_fallback;            /* SentencePiece */
	int split_digits;             /* byte-level BPE: Digits first; 1 each digit alone, 2 runs */
} tok_prep;

/* Decoding in pieces (streaming generation): TOK_DECODE_CONTINUE says the
 * ids continue earlier text, so the first piece keeps its leading space
 * (SentencePiece drops the dummy-prefix space of the text's first piece). */
enum { TOK_DECODE_CONTINUE = 1 };

#endif
