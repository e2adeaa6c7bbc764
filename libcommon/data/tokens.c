/* pp-tokens datasets (dataset.h) as a loader corpus: one split of the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "source.h"

typedef struct {
	tokens_file *f;
	int split;
	uint32_t *buf;
	size_t cap;
} tokens_corpus;

/* The HDF5 signature, or a name that says HDF5 (so that a damaged .h5 file
 * gets this reader's account of what is wrong with it). */
static bool tokens_probe(const char *path)
{
	if (corpus_has_suffix(path, ".h5") || corpus_has_suffix(path, ".hdf5"))
		return true;
	FILE *f = fopen(path, "rb");
	char sig[8] = {0};
	bool yes = f && fread(sig, 1, 8, f) == 8 && !memcmp(sig, "\x89HDF\r\n\x1a\n", 8);
	if (f)
		fclose(f);
	return yes;
}

static void tokens_corpus_close(data_corpus *c)
{
	tokens_corpus *t = c->impl;
	if (!t)
		return;
	tokens_close(t->f);
	free(t->buf);
	free(t);
	c->impl = NULL;
}

static int tokens_corpus_open(data_corpus *c, const char *path, corpus_part part, pp_err *e)
{
	tokens_file *f;
	int rc = tokens_open(&f, path, e);
	if (rc)
		return rc;
	const tokens_info *m = tokens_get_info(f);
	int split = part == CORPUS_TRAIN ? TOKENS_TRAIN : TOKENS_VAL;
	if (part == CORPUS_ANY && !m->docs[TOKENS_VAL])
		split = TOKENS_TRAIN;
	if (!m->tokens[split]) {
		rc = pp_errorf(e, PP_EUSAGE, "%s has no %s tokens%s", path,
			       tokens_split_name[split],
			       split == TOKENS_VAL ? " (pp-tokenize --val-fraction puts documents "
						     "there); set val_data or eval_interval=0"
						   : "");
		tokens_close(f);
		return rc;
	}
	tokens_corpus *t = calloc(1, sizeof *t);
	t->f = f;
	t->split = split;
	c->impl = t;
	snprintf(c->path, sizeof c->path, "%s (/%s)", path, tokens_split_name[split]);
	c->n_tokens = m->tokens[split];
	c->n_docs = m->docs[split];
	c->vocab_size = m->vocab_size;
	c->eos_id = m->eos_id;
	c->has_mask = m->has_mask;
	snprintf(c->fingerprint, sizeof c->fingerprint, "%s", m->fingerprint);
	return 0;
}

static int tokens_corpus_read(data_corpus *c, uint64_t offset, size_t n, int *out, pp_err *e)
{
	tokens_corpus *t = c->impl;
	if (n > t->cap) {
		free(t->buf);
		t->buf = malloc(n * sizeof *t->buf);
		t->cap = t->buf ? n : 0;
		if (!t->buf)
			return pp_errorf(e, PP_ERUNTIME, "out of memory reading %zu tokens", n);
	}
	int rc = tokens_read(t->f, t->split, offset, n, t->buf, e);
	for (size_t i = 0; i < n && !rc; i++) {
		if (t->buf[i] > INT32_MAX)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: token %u at offset %llu does not fit an "
					 "int",
					 c->path, t->buf[i], (unsigned long long)(offset + i));
		out[i] = (int)t->buf[i];
	}
	return rc;
}

static int tokens_corpus_mask(data_corpus *c, uint64_t offset, size_t n, uint8_t *out, pp_err *e)
{
	tokens_corpus *t = c->impl;
	return tokens_read_mask(t->f, t->split, offset, n, out, e);
}

static int tokens_corpus_offsets(data_corpus *c, uint64_t first, size_t n, uint64_t *out, pp_err *e)
{
	tokens_corpus *t = c->impl;
	return tokens_read_offsets(t->f, t->split, first, n, out, e);
}

const corpus_format corpus_pp_tokens = {
	.name = "pp-tokens",
	.has_splits = true,
	.has_documents = true,
	.probe = tokens_probe,
	.open = tokens_corpus_open,
	.read = tokens_corpus_read,
	.read_mask = tokens_corpus_mask,
	.offsets = tokens_corpus_offsets,
	.close = tokens_corpus_close,
};
