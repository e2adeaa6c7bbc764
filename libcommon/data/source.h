/* Private to the data loader: the token files it reads. Each file format
 * (pp-tokens, Megatron indexed datasets, llm.c shards) fills one table of
 * functions; data.c picks the format that claims the configured path, and
 * packs, shuffles and shards the same way whatever the format.
 *
 * A corpus is a sequence of documents, each a run of tokens; the loader
 * asks for tokens by offset and for the offsets where documents start. */
#ifndef PP_DATA_SOURCE_H
#define PP_DATA_SOURCE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../base/error.h"
#include "../config/config.h"

/* Which part of a file to read. Formats without splits read the whole file
 * for CORPUS_TRAIN and CORPUS_ANY; a pp-tokens file read as CORPUS_ANY
 * gives its /val split when that has documents, else /train. */
typedef enum { CORPUS_TRAIN, CORPUS_VAL, CORPUS_ANY } corpus_part;

typedef struct data_corpus data_corpus;

typedef struct {
	const char *name;   /* "pp-tokens", "megatron", "llm.c" */
	bool has_splits;    /* holds its own validation split */
	bool has_documents; /* its documents are the text's (not just files) */
	/* Whether path names a file of this format (by content, or by a name
	 * only this format uses); the first format that claims it opens it. */
	bool (*probe)(const char *path);
	/* Fills c (its path, counts, and what it knows of its tokenizer).
	 * Errors name the file: PP_EUSAGE when it is missing, PP_ERUNTIME
	 * when it is damaged. */
	int (*open)(data_corpus *c, const char *path, corpus_part part, pp_err *e);
	/* tokens [offset, offset + n) as ints; a token that does not fit an
	 * int (negative, or >= 2^31) is an error naming the file */
	int (*read)(data_corpus *c, uint64_t offset, size_t n, int *out, pp_err *e);
	/* loss mask [offset, offset + n), one byte per token (1: a target that
	 * counts); NULL for formats without one, and read only when the corpus
	 * has_mask */
	int (*read_mask)(data_corpus *c, uint64_t offset, size_t n, uint8_t *out, pp_err *e);
	/* doc_offsets [first, first + n): the token offset where each document
	 * starts; n_docs + 1 entries in all, the first 0, the last n_tokens */
	int (*offsets)(data_corpus *c, uint64_t first, size_t n, uint64_t *out, pp_err *e);
	void (*close)(data_corpus *c);
} corpus_format;

struct data_corpus {
	const corpus_format *fmt;
	char path[PP_PATH_MAX + 64]; /* as messages name it, with the split for pp-tokens */
	uint64_t n_tokens, n_docs;
	int64_t vocab_size;   /* of the tokenizer that made it; -1 unknown */
	int64_t eos_id;       /* -1 unknown or none */
	bool has_mask;        /* read_mask gives its loss mask */
	char fingerprint[65]; /* sha256 of that tokenizer; "" unknown */
	void *impl;
};

/* The format that claims path, or NULL; and the error for none
 * (PP_EUSAGE naming key and path and what pp reads). */
const corpus_format *corpus_probe(const char *path);
int corpus_unknown(const char *key, const char *path, pp_err *e);

extern const corpus_format corpus_pp_tokens; /* tokens.c */
extern const corpus_format corpus_megatron;  /* megatron.c */
extern const corpus_format corpus_llmc;      /* llmc.c */

static inline bool corpus_has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

/* Shared by the readers of raw files: maps path read-only (a 0-byte file
 * gives a NULL map); *size gets its size. */
int corpus_map(const char *path, const void **map, uint64_t *size, pp_err *e);
void corpus_unmap(const void *map, uint64_t size);

#endif
