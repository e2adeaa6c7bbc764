/* Tokenizers: SentencePiece .model files (Llama 2, Mistral, Gemma: BPE by
 * piece score, byte fallback, dummy prefix), Hugging Face tokenizer.json
 * with byte-level BPE, and GPT-2's vocab.json + merges.txt. One interface
 * for pp-tokenize (encode) and for sampling (decode). */
#ifndef PP_TOKENIZER_H
#define PP_TOKENIZER_H

#include <stddef.h>

#include "../base/error.h"
#include "types.h"

/* Loads by content: a SentencePiece protobuf, a tokenizer.json (has a
 * "model" object), or a GPT-2 vocab.json (merges.txt beside it). Errors
 * name the file and what is wrong with it. */
int tok_load(pp_tokenizer **t, const char *path, pp_err *e);
void tok_free(pp_tokenizer *t);

int tok_vocab_size(const pp_tokenizer *t);
int tok_bos(const pp_tokenizer *t); /* -1 when the tokenizer has none */
int tok_eos(const pp_tokenizer *t);
const char *tok_kind(const pp_tokenizer *t); /* "sentencepiece-bpe", "byte-level-bpe" */
/* sha256 (hex) of the tokenizer file(s): the identity stored in datasets */
const char *tok_fingerprint(const pp_tokenizer *t);

/* Appends the ids of n bytes of text (no BOS/EOS). Invalid UTF-8 is
 * encoded as spm_encode does (SentencePiece: each malformed byte becomes
 * U+FFFD) or as its bytes (byte-level BPE, never dropped). */
int tok_encode(const pp_tokenizer *t, const char *text, size_t n, tok_ids *out, pp_err *e);

/* Appends the text of ids; an id outside the vocabulary is an error.
 * decode(encode(x)) == x for any valid UTF-8 x. */
int tok_decode(const pp_tokenizer *t, const int *ids, size_t n, tok_text *out, pp_err *e);

/* Decoding in pieces (streaming generation): flags TOK_DECODE_CONTINUE
 * (types.h). */
int tok_decode_ex(const pp_tokenizer *t, const int *ids, size_t n, int flags, tok_text *out,
		  pp_err *e);

/* The vocabulary entry of id as the file spells it ("▁Hello", "Ġthe",
 * "<0x0A>", "<s>"), NUL-terminated, with its length in *len (if not NULL);
 * NULL for an id outside the vocabulary. */
const char *tok_piece(const pp_tokenizer *t, int id, size_t *len);
/* The id of a vocabulary entry spelled as in the file, or -1. */
int tok_piece_id(const pp_tokenizer *t, const char *piece, size_t len);

/* ---- what other formats need to write the tokenizer (GGUF) ---- */

/* The type of piece id (0 outside the vocabulary). Byte-level BPE: special
 * added tokens are TOK_CONTROL, other added tokens TOK_USER_DEFINED, ids
 * without a token TOK_UNUSED, the rest TOK_NORMAL. */
int tok_piece_type(const pp_tokenizer *t, int id);
/* SentencePiece's score of piece id; 0 for byte-level BPE. */
float tok_piece_score(const pp_tokenizer *t, int id);
int tok_unk(const pp_tokenizer *t); /* -1 when the tokenizer has none */
/* Byte-level BPE's merges, in rank order (none for SentencePiece):
 * tok_merge gives the ids of the two pieces merge rank joins; 0, or -1 for
 * a rank out of range. */
int tok_n_merges(const pp_tokenizer *t);
int tok_merge(const pp_tokenizer *t, int rank, int *left, int *right);
/* Whether a text's ids begin with BOS: tokenizer_config.json's
 * add_bos_token beside a tokenizer.json, else true (SentencePiece too). */
int tok_adds_bos(const pp_tokenizer *t);

tok_prep tok_get_prep(const pp_tokenizer *t);

/* Semantics worth knowing:
 * - SentencePiece: encoding is spm_encode's, id for id (one call = one spm
 *   "sentence": spm_encode encodes each line separately). Control pieces
 *   (<s>, </s>) in the text are not recognized, as in spm; user-defined
 *   pieces are. Each byte that does not begin a valid UTF-8 character
 *   becomes U+FFFD, as in spm's normalizer (a truncated 3-byte character
 *   gives two), which is then a piece or byte-falls-back as EF BF BD: those
 *   bytes do not come back from decoding. decode(encode(x)) == x holds for
 *   valid UTF-8 x, models that keep whitespace as is
 *   (remove_extra_whitespaces false, as Llama's and Mistral's) and text
 *   without U+2581, the character SentencePiece uses for a space.
 * - Byte-level BPE: special added tokens (<|endoftext|>) in the text are
 *   encoded as plain text, like spm's control pieces (Hugging Face's
 *   split_special_tokens=True); non-special added tokens are recognized.
 *   Special tokens decode to nothing, like spm's control pieces. */

#endif
