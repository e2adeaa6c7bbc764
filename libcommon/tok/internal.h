/* Private to the tokenizer modules (tokenizer.c, vocab.c, spm.c, bpe.c, unicode.c):
 * the tokenizer object, a string hash map, UTF-8 helpers. */
#ifndef PP_TOK_INTERNAL_H
#define PP_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../base/sha256.h"
#include "types.h"

/* Open-addressing hash map from byte strings to ints. Keys are not copied:
 * they point into storage that outlives the map (a tokenizer's piece pool). */
typedef struct {
	const char *key;
	uint32_t len, hash;
	int val;
} tok_slot;

typedef struct {
	tok_slot *slot; /* mask + 1 slots; key == NULL: empty */
	size_t mask, n;
} tok_map;

uint32_t tok_hash(const char *s, size_t n);
int tok_map_init(tok_map *m, size_t expected); /* 0, or -1 out of memory */
void tok_map_free(tok_map *m);
/* Inserts key -> val unless the key is there: returns 0 inserted, 1 already
 * there (*old gets its value when old is not NULL), -1 out of memory. */
int tok_map_put(tok_map *m, const char *key, size_t len, int val, int *old);
/* The value of key, or -1. */
static inline int tok_map_get_h(const tok_map *m, const char *key, size_t len, uint32_t h)
{
	for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
		const tok_slot *s = &m->slot[i];
		if (!s->key)
			return -1;
		if (s->hash == h && s->len == len && __builtin_memcmp(s->key, key, len) == 0)
			return s->val;
	}
}
static inline int tok_map_get(const tok_map *m, const char *key, size_t len)
{
	return tok_map_get_h(m, key, len, tok_hash(key, len));
}

/* Map from a pair of ids to an int (merge ranks). */
typedef struct {
	uint64_t *key; /* (a << 32 | b) + 1; 0: empty */
	int *val;
	size_t mask;
} tok_pairmap;

int tok_pairmap_init(tok_pairmap *m, size_t expected);
void tok_pairmap_free(tok_pairmap *m);
int tok_pairmap_put(tok_pairmap *m, int a, int b, int val); /* 0 or -1 out of memory */
static inline int tok_pairmap_get(const tok_pairmap *m, int a, int b)
{
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	uint64_t h = k * 0x9E3779B97F4A7C15ull;
	for (size_t i = (size_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
		if (m->key[i] == k)
			return m->val[i];
		if (!m->key[i])
			return -1;
	}
}

struct pp_tokenizer {
	const char *kind;
	char fingerprint[SHA256_HEX];
	int n_vocab, bos, eos;
	uint64_t serial; /* tells tokenizers apart for the word cache */
	/* piece i: pool + off[i], len[i] bytes, NUL-terminated, spelled as in
	 * the file */
	char *pool;
	size_t pool_n, pool_cap;
	uint32_t *off, *len;
	tok_map map; /* piece -> id */

	/* for the writers of other formats (tokenizer.h), filled by the
	 * loaders; the arrays belong to impl */
	const uint8_t *type;   /* TOK_* per piece */
	const float *score;    /* per piece; NULL: none */
	const int (*merge)[2]; /* per rank: the ids of its pair */
	int n_merges, unk, add_bos;
	tok_prep prep;

	int (*encode)(const pp_tokenizer *t, const char *text, size_t n, tok_ids *out, pp_err *e);
	int (*decode)(const pp_tokenizer *t, const int *ids, size_t n, int flags, tok_text *out,
		      pp_err *e);
	void (*free_impl)(void *impl);
	void *impl; /* struct tok_spm or struct tok_bpe */
};

/* A new tokenizer with room for n pieces (all empty), or NULL. */
pp_tokenizer *tok_new(int n);
/* Sets piece id (once) to s[0..n); 0, or -1 out of memory. */
int tok_set_piece(pp_tokenizer *t, int id, const char *s, size_t n);
/* Builds t->map from the pieces; duplicates are an error naming the piece. */
int tok_index_pieces(pp_tokenizer *t, const char *path, pp_err *e);

/* Length of the UTF-8 character at s (n > 0 bytes left): 1 to 4, with its
 * code point in *cp; an invalid or truncated sequence is one byte with
 * *cp = TOK_INVALID. Strict: no overlong forms, surrogates or > U+10FFFF. */
#define TOK_INVALID 0xFFFFFFFFu
static inline size_t tok_utf8_char(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	size_t len;
	uint32_t v, min;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2, v = c & 0x1F, min = 0x80;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3, v = c & 0x0F, min = 0x800;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4, v = c & 0x07, min = 0x10000;
	else
		goto bad;
	if (n < len)
		goto bad;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			goto bad;
		v = v << 6 | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		goto bad;
	*cp = v;
	return len;
bad:
	*cp = TOK_INVALID;
	return 1;
}
/* Writes cp as UTF-8 into buf (4 bytes of room); returns its length. */
size_t tok_utf8_put(uint32_t cp, char *buf);

/* A per-thread cache of encoded words (up to 64 bytes each), for encoders
 * whose words are independent. tok_cache_get gives NULL when there is none
 * (out of memory): encode without. */
typedef struct tok_cache tok_cache;
tok_cache *tok_cache_get(const pp_tokenizer *t);
int tok_cache_find(const tok_cache *c, const char *w, size_t n, const int **ids, size_t *k);
void tok_cache_put(tok_cache *c, const char *w, size_t n, const int *ids, size_t k);

/* Frees t and everything it owns (tok_free, and the loaders on a failure). */
void tok_vocab_free(pp_tokenizer *t);

/* Loaders (spm.c, bpe.c): fill a new tokenizer from the file's
 * bytes. The fingerprint is filled by the caller. */
int tok_spm_load(pp_tokenizer **t, const char *path, const unsigned char *buf, size_t n, pp_err *e);
int tok_bpe_load_json(pp_tokenizer **t, const char *path, const char *buf, size_t n,
		      char fingerprint[SHA256_HEX], pp_err *e);

/* Unicode classes for the GPT-2 pre-tokenizer (unicode.c, generated). */
int tok_uni_is_letter(uint32_t cp);
int tok_uni_is_number(uint32_t cp);
int tok_uni_is_space(uint32_t cp);

#endif
