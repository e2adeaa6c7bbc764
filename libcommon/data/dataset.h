/* Token datasets: format "pp-tokens", versions 1 and 2. Tokenized
 * documents in one HDF5 file, split into /train and /val; each split holds
 * the tokens of its documents back to back (uint32) and the offset where
 * each document starts (uint64, n_docs + 1 entries); version 2 adds a loss
 * mask (uint8, one per token: 1 where the token is a target that counts),
 * which instruction data (pp-tokenize --format jsonl) carries. The format
 * is written down in checkpoints-format/tokens.md and pp-tokens(5).
 *
 * Three parts: a streaming writer (memory: one chunk of tokens per split
 * and the one document it holds back to apply the split rule) that
 * publishes the file atomically; a reader that validates a file before
 * anything is read from it; and the reader of text documents that
 * pp-tokenize feeds the writer with. */
#ifndef PP_DATASET_H
#define PP_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"

#define PP_TOKENS_FORMAT        "pp-tokens"
#define PP_TOKENS_VERSION       2 /* the newest: with a loss mask; version 1 has none */
#define PP_TOKENS_CHUNK         ((size_t)1 << 20) /* tokens per chunk of /SPLIT/tokens */
#define PP_TOKENS_OFFSETS_CHUNK ((size_t)1 << 16)

enum { TOKENS_TRAIN, TOKENS_VAL, TOKENS_NSPLITS };
extern const char *const tokens_split_name[TOKENS_NSPLITS]; /* "train", "val" */

/* What a dataset says about itself (the root attributes). */
typedef struct {
	char fingerprint[65]; /* sha256 (hex) of the tokenizer file(s) */
	char kind[64];        /* tokenizer kind, e.g. "sentencepiece-bpe" */
	int64_t vocab_size;
	int64_t bos_id, eos_id; /* -1: the tokenizer has none */
	int n_sources;
	char **sources; /* input names as given ("-" is standard input) */
	uint64_t docs[TOKENS_NSPLITS], tokens[TOKENS_NSPLITS];
	int64_t version; /* 1, or 2 with a loss mask */
	bool has_mask;   /* /SPLIT/loss_mask: version 2 */
} tokens_info;

void tokens_info_free(tokens_info *m);

/* ---- writing ---- */

typedef struct {
	double val_fraction; /* in [0, 1): share of documents sent to /val */
	uint64_t seed;       /* keys the split rule */
	size_t chunk;        /* tokens per chunk; 0: PP_TOKENS_CHUNK */
	int deflate;         /* 0: none, 1..9: gzip level */
} tokens_write_opts;

typedef struct tokens_writer tokens_writer;

/* Starts a dataset to be published at path. Writes go to a temporary file
 * beside it (.NAME.tmp-PID) that tokens_finish fsyncs and renames into
 * place; path itself is untouched until then. meta gives the tokenizer
 * attributes and the sources; its counts are ignored. */
int tokens_create(tokens_writer **w, const char *path, const tokens_info *meta,
		  const tokens_write_opts *o, pp_err *e);
/* Appends one document (ids in [0, vocab_size)). Its split is decided by
 * tokens_split_of, except for the last document of a dataset of two or
 * more with val_fraction > 0, which goes to a split that would otherwise be
 * empty. Empty documents are skipped. */
int tokens_add_doc(tokens_writer *w, const int *ids, size_t n, pp_err *e);
/* The same with a loss mask (n values, each 0 or 1; NULL: every token
 * counts). The first document with a mask makes the dataset version 2:
 * every split gets a loss_mask, 1 for the tokens written before. */
int tokens_add_masked(tokens_writer *w, const int *ids, const uint8_t *mask, size_t n, pp_err *e);
/* Flushes, writes the counts, fsyncs and renames into place. Frees w
 * whatever happens (on failure the temporary file is removed). out (may
 * be NULL) gets the final counts per split, the version and whether the
 * dataset has a mask (not the tokenizer attributes nor the sources). */
int tokens_finish(tokens_writer *w, tokens_info *out, pp_err *e);
/* Gives up: removes the temporary file and frees w. */
void tokens_abort(tokens_writer *w);

/* The split rule: document i (counted from 0 over the whole input) goes
 * to TOKENS_VAL when uniform(key(seed, "pp-tokens/split"), i) <
 * val_fraction, else TOKENS_TRAIN. */
int tokens_split_of(double val_fraction, uint64_t seed, uint64_t doc);

/* ---- reading ---- */

typedef struct tokens_file tokens_file;

/* Opens and validates: the HDF5 file itself, format, version (1 or 2),
 * every root attribute, both groups, the types and shapes of their
 * datasets (version 2: loss_mask too), and that each split's doc_offsets
 * starts at 0 and ends at its token count. Errors (PP_ERUNTIME) name the
 * file and what is wrong. */
int tokens_open(tokens_file **f, const char *path, pp_err *e);
const tokens_info *tokens_get_info(const tokens_file *f);
/* tokens [offset, offset + n) of a split */
int tokens_read(tokens_file *f, int split, uint64_t offset, size_t n, uint32_t *out, pp_err *e);
/* loss_mask [offset, offset + n) of a split (has_mask only) */
int tokens_read_mask(tokens_file *f, int split, uint64_t offset, size_t n, uint8_t *out, pp_err *e);
/* doc_offsets [first, first + n) of a split (n_docs + 1 entries in all) */
int tokens_read_offsets(tokens_file *f, int split, uint64_t first, size_t n, uint64_t *out,
			pp_err *e);
void tokens_close(tokens_file *f);

/* ---- text documents, for tokenizing ---- */

typedef enum {
	DOCS_PER_FILE, /* each input is one document */
	DOCS_PER_LINE, /* each non-empty line is one (without its newline) */
	DOCS_SEPARATOR /* documents end at a line equal to the separator (dropped) */
} docs_mode;

#define DOCS_MAX_BYTES ((size_t)64 << 20)

typedef struct docs_reader docs_reader;

/* paths: n inputs, "-" (or n == 0) is standard input. Every input is
 * checked to be a readable file first (PP_EUSAGE naming it). The end of an
 * input ends a document in every mode. A document longer than max_bytes
 * (0: DOCS_MAX_BYTES) is cut into pieces of at most max_bytes, after its
 * last newline within the limit, else at a UTF-8 character boundary. */
int docs_open(docs_reader **r, char *const *paths, int n, docs_mode mode, const char *separator,
	      size_t max_bytes, pp_err *e);
/* The next non-empty document: *got false at the end. text stays valid
 * until the next call. */
int docs_next(docs_reader *r, const char **text, size_t *len, bool *got, pp_err *e);
uint64_t docs_bytes_read(const docs_reader *r);
int64_t docs_bytes_total(const docs_reader *r); /* -1 when an input has no known size */
uint64_t docs_cut(const docs_reader *r);        /* documents cut at max_bytes so far */
void docs_close(docs_reader *r);

#endif
