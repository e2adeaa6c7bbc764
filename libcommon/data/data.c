#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/ops.h"
#include "../base/rng.h"
#include "../tok/tokenizer.h"
#include "source.h"

/* A source fills whole sequences by global sequence index: T inputs, their
 * T targets and T positions; the loader walks the indices its layout gives
 * (layout_seq_index: microbatch j of each step on data rank j % ranks), so
 * every rank reads its own share and the position is one counter. Two
 * sources: synthetic data, and token files (any corpus_format of source.h)
 * read as windows of one stream, or as documents (one per sequence, or
 * packed). */
typedef struct {
	const char *name;
	/* tok, tgt, pos: (T) each */
	int (*sequence)(pp_data *d, uint64_t index, int T, int *tok, int *tgt, int *pos, pp_err *e);
	void (*close)(pp_data *d);
} data_source;

#define OFFSET_BLOCK 4096

/* How token files become sequences. */
typedef enum {
	READ_WINDOWS, /* windows of the stream of documents (packing=false, no mask) */
	READ_DOCS,    /* one document per sequence (packing=false, a mask) */
	READ_PACKED   /* whole documents packed (packing=true) */
} read_mode;

struct pp_data {
	const data_source *src;
	layout_seqs seqs;
	uint64_t pos;     /* sequences this rank has consumed */
	int *seq;         /* (T+1) scratch */
	int *pos_scratch; /* (T) positions when the caller wants none */
	int seq_cap;
	/* synthetic */
	uint64_t key;
	int vocab;
	int *next; /* (vocab) successor of each token */
	/* token files */
	data_corpus corpus;
	const char *key_name; /* "data" or "val_data", for messages */
	bool shuffle;
	uint64_t shuffle_key;
	int64_t eos;   /* inserted between documents; -1: nothing is */
	int64_t limit; /* every token must be below this */
	const char *limit_what;
	read_mode mode;
	int T; /* the table below is for sequences of T tokens (0: none yet) */
	uint64_t windows;
	uint64_t *first_doc;        /* (windows) document of each window's first token; with eos */
	int *eos_at;                /* (T + 1) scratch: where a window's EOS tokens go */
	uint64_t off[OFFSET_BLOCK]; /* doc offsets [off_base, off_base + off_n) */
	uint64_t off_base, off_n;
	/* documents (READ_DOCS, READ_PACKED) */
	int64_t eos_target; /* the target of a document's last token; -1: none */
	int pad;            /* the input token of padding */
	uint64_t n_seqs;
	uint64_t *seq_doc, *seq_slot; /* (n_seqs) where each sequence starts */
	uint8_t *mask;                /* (T + 1) scratch: a piece's loss mask */
};

/* Synthetic data: a seeded first-order Markov chain. Each token is followed
 * by a fixed successor with probability 0.9 (a seeded permutation) and by a
 * uniform random token otherwise, so a model can learn it: the loss floor is
 * about 0.9 * -ln(0.9) + 0.1 * ln(vocab / 0.1), far below ln(vocab). */
#define SYNTH_FOLLOW 0.9

/* seq (T + 1 tokens) as inputs, targets and positions 0.. T-1 */
static void split_window(const int *seq, int T, int *tok, int *tgt, int *pos)
{
	for (int t = 0; t < T; t++) {
		tok[t] = seq[t];
		tgt[t] = seq[t + 1];
		pos[t] = t;
	}
}

static int synthetic_sequence(pp_data *d, uint64_t index, int T, int *tok, int *tgt, int *pos,
			      pp_err *e)
{
	(void)e;
	int *seq = d->seq;
	uint64_t base = index * (uint64_t)(2 * (T + 1) + 1);
	seq[0] = (int)rng_below(d->key, base, (uint64_t)d->vocab);
	for (int t = 1; t <= T; t++) {
		uint64_t i = base + 2 * (uint64_t)t;
		seq[t] = rng_uniform(d->key, i) < SYNTH_FOLLOW
				 ? d->next[seq[t - 1]]
				 : (int)rng_below(d->key, i + 1, (uint64_t)d->vocab);
	}
	split_window(seq, T, tok, tgt, pos);
	return 0;
}

static void synthetic_close(pp_data *d) { free(d->next); }

static const data_source synthetic = {"synthetic", synthetic_sequence, synthetic_close};

static void synthetic_open(pp_data *d, const pp_config *c, bool val)
{
	d->src = &synthetic;
	d->vocab = c->model.vocab_size;
	/* the chain is shared by both splits; the samples drawn from it are not */
	uint64_t chain = rng_key(c->seed, "synthetic/chain");
	d->key = rng_key(c->seed, val ? "synthetic/val" : "synthetic/train");
	d->next = malloc((size_t)d->vocab * sizeof(int));
	for (int i = 0; i < d->vocab; i++)
		d->next[i] = i;
	for (int i = d->vocab - 1; i > 0; i--) { /* Fisher-Yates */
		int j = (int)rng_below(chain, (uint64_t)i, (uint64_t)i + 1);
		int t = d->next[i];
		d->next[i] = d->next[j];
		d->next[j] = t;
	}
}

/* ---- token files: packing ---------------------------------------------------
 *
 * The documents of a corpus, in order, with the EOS token between each two
 * when there is one to insert, form one stream of L tokens. Window w is the
 * T + 1 stream tokens starting at w * T (inputs and their targets, so
 * consecutive windows share one token); there are (L - 1) / T of them and
 * the tail that does not fill a window is not read. Training visits the
 * windows of epoch e in a permutation keyed by (seed, e); validation in
 * order. Global sequence g is window g mod W of epoch g / W. */

int corpus_map(const char *path, const void **map, uint64_t *size, pp_err *e)
{
	*map = NULL;
	*size = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pp_errorf(e, errno == ENOENT ? PP_EUSAGE : PP_ERUNTIME, "cannot open %s: %s",
				 path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return pp_errorf(e, PP_EUSAGE, "%s is not a regular file", path);
	}
	void *p = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
	int err = errno;
	close(fd);
	if (p == MAP_FAILED)
		return pp_errorf(e, PP_ERUNTIME, "cannot map %s: %s", path, strerror(err));
	*map = p;
	*size = (uint64_t)st.st_size;
	return 0;
}

void corpus_unmap(const void *map, uint64_t size)
{
	if (map)
		munmap((void *)map, (size_t)size);
}

/* A bijection of [0, n) keyed by key, computed on demand (no table): a
 * 4-round Feistel network on the smallest even bit width covering n,
 * cycle-walked back into range (a step lands in range with probability
 * above 1/4). */
static uint64_t permute(uint64_t key, uint64_t n, uint64_t i)
{
	if (n <= 1)
		return 0;
	int bits = 64 - __builtin_clzll(n - 1);
	bits += bits & 1;
	int h = bits / 2;
	uint64_t mask = ((uint64_t)1 << h) - 1, x = i;
	do {
		uint64_t l = x >> h, r = x & mask;
		for (uint64_t round = 0; round < 4; round++) {
			uint64_t f = rng_mix(key ^ rng_mix((round << 56) ^ r)) & mask;
			uint64_t t = l ^ f;
			l = r;
			r = t;
		}
		x = (l << h) | r;
	} while (x >= n);
	return x;
}

/* doc_offsets[k], through a block cache (windows walk documents forward) */
static int offset_at(pp_data *d, uint64_t k, uint64_t *v, pp_err *e)
{
	if (k < d->off_base || k >= d->off_base + d->off_n) {
		uint64_t n = d->corpus.n_docs + 1 - k;
		if (n > OFFSET_BLOCK)
			n = OFFSET_BLOCK;
		d->off_n = 0;
		int rc = d->corpus.fmt->offsets(&d->corpus, k, (size_t)n, d->off, e);
		if (rc)
			return rc;
		d->off_base = k;
		d->off_n = n;
	}
	*v = d->off[k - d->off_base];
	return 0;
}

/* The windows for sequences of T tokens; with EOS insertion, the document
 * each window starts in, found in one pass over the document offsets (which
 * also checks that they never decrease). */
static int window_layout(pp_data *d, int T, pp_err *e)
{
	data_corpus *c = &d->corpus;
	bool eos = d->eos >= 0;
	uint64_t stream = c->n_tokens + (eos && c->n_docs ? c->n_docs - 1 : 0);
	if (stream < (uint64_t)T + 1)
		return pp_errorf(e, PP_EUSAGE,
				 "%s '%s': %s holds %llu tokens%s; sequences of seq_len %d need at "
				 "least %d",
				 d->key_name, c->path, c->fmt->name, (unsigned long long)stream,
				 eos ? " (end-of-text tokens included)" : "", T, T + 1);
	free(d->first_doc);
	d->first_doc = NULL;
	d->T = 0;
	d->windows = (stream - 1) / (uint64_t)T;
	if (!eos) {
		d->T = T;
		return 0;
	}
	free(d->eos_at);
	d->first_doc = malloc(d->windows * sizeof *d->first_doc);
	d->eos_at = malloc(((size_t)T + 1) * sizeof *d->eos_at);
	if (!d->first_doc || !d->eos_at)
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %llu windows",
				 (unsigned long long)d->windows);
	uint64_t k = 0, prev = 0, next = 0;
	int rc = 0;
	for (uint64_t w = 0, k_next = 1; !rc && k_next <= c->n_docs; k_next++) {
		uint64_t off;
		rc = offset_at(d, k_next, &off, e);
		if (!rc && off < prev)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: document offsets decrease at document %llu (%llu after "
				       "%llu)",
				       c->path, (unsigned long long)k_next, (unsigned long long)off,
				       (unsigned long long)prev);
		prev = off;
		next = off + k_next; /* stream start of document k_next */
		/* windows starting before document k_next starts are in document k */
		for (; !rc && w < d->windows && w * (uint64_t)T < next; w++)
			d->first_doc[w] = k;
		k = k_next;
	}
	if (!rc && prev != c->n_tokens)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: the last document ends at %llu, not at %llu",
			       c->path, (unsigned long long)prev, (unsigned long long)c->n_tokens);
	if (!rc)
		d->T = T;
	return rc;
}

/* stream tokens [w * T, w * T + T + 1) into seq. Without the EOS tokens
 * they are consecutive corpus tokens (document k is stream tokens
 * [off_k + k, off_k+1 + k) and its EOS sits at off_k+1 + k), so a window is
 * one read, spread out around its EOS positions. */
static int read_window(pp_data *d, uint64_t w, int T, int *seq, pp_err *e)
{
	data_corpus *c = &d->corpus;
	uint64_t p = w * (uint64_t)T, end = p + (uint64_t)T + 1;
	if (d->eos < 0)
		return c->fmt->read(c, p, (size_t)T + 1, seq, e);
	uint64_t k0 = d->first_doc[w];
	int n_eos = 0;
	for (uint64_t k = k0; k + 1 < c->n_docs; k++) {
		uint64_t off;
		int rc = offset_at(d, k + 1, &off, e);
		if (rc)
			return rc;
		if (off + k >= end)
			break;
		d->eos_at[n_eos++] = (int)(off + k - p);
	}
	int rc = c->fmt->read(c, p - k0, (size_t)(T + 1 - n_eos), seq + n_eos, e);
	for (int t = 0, j = n_eos, next = 0; !rc && t <= T; t++)
		seq[t] = next < n_eos && d->eos_at[next] == t ? (next++, (int)d->eos) : seq[j++];
	return rc;
}

static int check_vocab(const pp_data *d, const int *v, int n, const char *what, uint64_t w,
		       pp_err *e)
{
	for (int t = 0; t < n; t++)
		if (v[t] >= d->limit)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: token %d (%s %llu, position %d) is outside the "
					 "vocabulary of %lld (%s)",
					 d->corpus.path, v[t], what, (unsigned long long)w, t,
					 (long long)d->limit, d->limit_what);
	return 0;
}

/* ---- token files: documents --------------------------------------------------
 *
 * A document of n tokens, with the EOS after it when it is the last token's
 * target (eos_target: data_eos, an EOS id, and no loss mask, whose
 * documents end as their template ends them), is m = n (+ 1) tokens: m - 1
 * inputs, each followed by its target, fill m - 1 slots of a sequence (its
 * last token's target would be ignored, so it is not an input; a document
 * of one token without the EOS fills none and is skipped). Slots beyond T
 * are cut into pieces of T slots, overlapping by one token as windows do,
 * each a document of its own; the last piece has the rest.
 *
 * READ_DOCS: a sequence is a document's first piece (truncated to T + 1
 * tokens), padded. READ_PACKED: pieces in corpus order fill sequences; one
 * that does not fit the rest of a sequence starts the next, whose tail is
 * padded. Either way a table made at open (seq_doc, seq_slot: the document
 * and slot each sequence starts at) gives sequence s, and filling one
 * replays the same rule from there. Padding: the pad token as input
 * (the EOS, else 0), an ignored target, position 0 (READ_DOCS: t). The
 * sequences of an epoch are visited as windows are. */

static int doc_extent(pp_data *d, uint64_t k, uint64_t *start, uint64_t *n, pp_err *e)
{
	uint64_t end;
	int rc = offset_at(d, k, start, e);
	if (!rc)
		rc = offset_at(d, k + 1, &end, e);
	if (!rc && (end < *start || end > d->corpus.n_tokens))
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s: document %llu runs from token %llu to %llu (of %llu)",
			       d->corpus.path, (unsigned long long)k, (unsigned long long)*start,
			       (unsigned long long)end, (unsigned long long)d->corpus.n_tokens);
	*n = rc ? 0 : end - *start;
	return rc;
}

static uint64_t doc_slots(const pp_data *d, uint64_t n)
{
	uint64_t m = n + (n && d->eos_target >= 0);
	return m ? m - 1 : 0;
}

static int add_seq(pp_data *d, uint64_t *cap, uint64_t k, uint64_t slot, pp_err *e)
{
	if (d->n_seqs == *cap) {
		uint64_t c = *cap ? 2 * *cap : 1024;
		uint64_t *a = realloc(d->seq_doc, c * sizeof *a);
		if (a)
			d->seq_doc = a;
		uint64_t *b = a ? realloc(d->seq_slot, c * sizeof *b) : NULL;
		if (!b)
			return pp_errorf(e, PP_ERUNTIME, "out of memory for %llu sequences",
					 (unsigned long long)c);
		d->seq_slot = b;
		*cap = c;
	}
	d->seq_doc[d->n_seqs] = k;
	d->seq_slot[d->n_seqs++] = slot;
	return 0;
}

static int doc_layout(pp_data *d, int T, pp_err *e)
{
	data_corpus *c = &d->corpus;
	free(d->seq_doc);
	free(d->seq_slot);
	free(d->mask);
	d->seq_doc = d->seq_slot = NULL;
	d->n_seqs = 0;
	d->T = 0;
	if (!(d->mask = malloc((size_t)T + 1)))
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	uint64_t cap = 0, fill = 0;
	int rc = 0;
	for (uint64_t k = 0; k < c->n_docs && !rc; k++) {
		uint64_t start, n;
		if ((rc = doc_extent(d, k, &start, &n, e)))
			break;
		uint64_t slots = doc_slots(d, n);
		if (d->mode == READ_DOCS) {
			if (slots)
				rc = add_seq(d, &cap, k, 0, e);
			continue;
		}
		for (uint64_t o = 0; o < slots && !rc; o += (uint64_t)T) {
			uint64_t p = slots - o < (uint64_t)T ? slots - o : (uint64_t)T;
			if (!d->n_seqs || fill + p > (uint64_t)T) {
				rc = add_seq(d, &cap, k, o, e);
				fill = 0;
			}
			fill += p;
		}
	}
	if (!rc && !d->n_seqs)
		rc = pp_errorf(e, PP_EUSAGE,
			       "%s '%s': %s holds no document of two or more tokens: nothing to "
			       "train on",
			       d->key_name, c->path, c->fmt->name);
	if (!rc)
		d->T = T;
	return rc;
}

/* Document k's slots [o, o + p) at t of the sequence: inputs, targets
 * (ignored where the mask says), positions from 0. */
static int read_piece(pp_data *d, uint64_t start, uint64_t n, uint64_t o, int p, int *tok, int *tgt,
		      int *pos, pp_err *e)
{
	data_corpus *c = &d->corpus;
	/* tokens o .. o + p of the document with its EOS: the last may be the EOS */
	uint64_t have = o + (uint64_t)p + 1 <= n ? (uint64_t)p + 1 : n - o;
	int rc = c->fmt->read(c, start + o, (size_t)have, d->seq, e);
	if (!rc && c->has_mask)
		rc = c->fmt->read_mask(c, start + o, (size_t)have, d->mask, e);
	if (rc)
		return rc;
	if (have < (uint64_t)p + 1) /* the EOS target (never with a mask) */
		d->seq[p] = (int)d->eos_target;
	for (int j = 0; j < p; j++) {
		tok[j] = d->seq[j];
		tgt[j] = c->has_mask && !d->mask[j + 1] ? PP_IGNORE_INDEX : d->seq[j + 1];
		pos[j] = j;
	}
	return 0;
}

/* Global sequence index of n per epoch: which one (window, packed
 * sequence) it reads, in the epoch's shuffled order when training. */
static uint64_t epoch_order(const pp_data *d, uint64_t index, uint64_t n)
{
	const uint64_t epoch = index / n, i = index % n;
	return d->shuffle ? permute(rng_mix(d->shuffle_key ^ rng_mix(epoch)), n, i) : i;
}

static int doc_sequence(pp_data *d, uint64_t index, int T, int *tok, int *tgt, int *pos, pp_err *e)
{
	int rc = d->T == T ? 0 : doc_layout(d, T, e);
	if (rc)
		return rc;
	const uint64_t s = epoch_order(d, index, d->n_seqs);
	uint64_t k = d->seq_doc[s], o = d->seq_slot[s];
	int fill = 0;
	while (k < d->corpus.n_docs && fill < T) {
		uint64_t start, n;
		if ((rc = doc_extent(d, k, &start, &n, e)))
			return rc;
		uint64_t slots = doc_slots(d, n);
		if (o >= slots) {
			k++, o = 0;
			continue;
		}
		int p = slots - o < (uint64_t)T ? (int)(slots - o) : T;
		if (fill && fill + p > T)
			break;
		if ((rc = read_piece(d, start, n, o, p, tok + fill, tgt + fill, pos + fill, e)))
			return rc;
		fill += p;
		if (d->mode == READ_DOCS)
			break;
		o += (uint64_t)p;
	}
	for (int t = fill; t < T; t++) {
		tok[t] = d->pad;
		tgt[t] = PP_IGNORE_INDEX;
		pos[t] = d->mode == READ_DOCS ? t : 0;
	}
	if (!rc)
		rc = check_vocab(d, tok, T, "sequence", s, e);
	if (!rc)
		rc = check_vocab(d, tgt, T, "sequence", s, e);
	return rc;
}

static int window_sequence(pp_data *d, uint64_t index, int T, int *tok, int *tgt, int *pos,
			   pp_err *e)
{
	if (d->mode != READ_WINDOWS)
		return doc_sequence(d, index, T, tok, tgt, pos, e);
	int rc = d->T == T ? 0 : window_layout(d, T, e);
	if (rc)
		return rc;
	const uint64_t w = epoch_order(d, index, d->windows);
	if ((rc = read_window(d, w, T, d->seq, e)) ||
	    (rc = check_vocab(d, d->seq, T + 1, "window", w, e)))
		return rc;
	split_window(d->seq, T, tok, tgt, pos);
	return 0;
}

static void files_close(pp_data *d)
{
	if (d->corpus.fmt)
		d->corpus.fmt->close(&d->corpus);
	free(d->first_doc);
	free(d->eos_at);
	free(d->seq_doc);
	free(d->seq_slot);
	free(d->mask);
}

static const data_source files = {"files", window_sequence, files_close};

static const corpus_format *const formats[] = {&corpus_pp_tokens, &corpus_megatron, &corpus_llmc};

const corpus_format *corpus_probe(const char *path)
{
	for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
		if (formats[i]->probe(path))
			return formats[i];
	return NULL;
}

int corpus_unknown(const char *key, const char *path, pp_err *e)
{
	struct stat st;
	const char *what = stat(path, &st) ? strerror(errno) : "not a token dataset pp reads";
	return pp_errorf(e, PP_EUSAGE,
			 "%s '%s': %s (expected \"synthetic\", a pp-tokens .h5 file, a Megatron "
			 "PREFIX with PREFIX.bin and PREFIX.idx, or llm.c .bin shards or a glob "
			 "of them)",
			 key, path, what);
}

/* The run's tokenizer (when set) must be the one that made the data; for
 * data that does not record its tokenizer it supplies the vocabulary bound
 * and the EOS id. */
static int check_tokenizer(data_corpus *co, const pp_config *c, const char *key, const char *path,
			   pp_err *e)
{
	if (!c->tokenizer[0])
		return 0;
	pp_tokenizer *t;
	int rc = tok_load(&t, c->tokenizer, e);
	if (rc)
		return pp_err_prefix(e, "key 'tokenizer'");
	const char *fp = tok_fingerprint(t);
	if (co->fingerprint[0] && strcmp(co->fingerprint, fp))
		rc = pp_errorf(e, PP_EUSAGE,
			       "%s '%s' was tokenized by a tokenizer with fingerprint %s, but "
			       "tokenizer '%s' has fingerprint %s; tokenize the data with that "
			       "tokenizer, or name the one that made it",
			       key, path, co->fingerprint, c->tokenizer, fp);
	else if (tok_vocab_size(t) > c->model.vocab_size)
		rc = pp_errorf(e, PP_EUSAGE,
			       "tokenizer '%s' has a vocabulary of %d, larger than "
			       "model.vocab_size=%d",
			       c->tokenizer, tok_vocab_size(t), c->model.vocab_size);
	if (co->vocab_size < 0)
		co->vocab_size = tok_vocab_size(t);
	if (co->eos_id < 0 && co->fmt->has_documents)
		co->eos_id = tok_eos(t);
	tok_free(t);
	return rc;
}

static int packed_open(pp_data *d, const pp_config *c, const char *key, const char *path,
		       corpus_part part, pp_err *e)
{
	const corpus_format *fmt = corpus_probe(path);
	if (!fmt)
		return corpus_unknown(key, path, e);
	if (part == CORPUS_VAL && !fmt->has_splits)
		return pp_errorf(e, PP_EUSAGE,
				 "data '%s' (%s) has no validation split: set val_data for "
				 "evaluation, or eval_interval=0",
				 path, fmt->name);
	d->src = &files;
	d->key_name = key;
	int rc = fmt->open(&d->corpus, path, part, e);
	if (rc)
		return rc;
	d->corpus.fmt = fmt;
	data_corpus *co = &d->corpus;
	if ((rc = check_tokenizer(co, c, key, path, e)))
		return rc;
	if (co->vocab_size > c->model.vocab_size)
		return pp_errorf(e, PP_EUSAGE,
				 "%s '%s' was tokenized with a vocabulary of %lld, larger than "
				 "model.vocab_size=%d",
				 key, path, (long long)co->vocab_size, c->model.vocab_size);
	if (c->packing && !fmt->has_documents)
		return pp_errorf(e, PP_EUSAGE,
				 "packing=true packs whole documents, but %s '%s' (%s) records no "
				 "document boundaries; set packing=false, or tokenize the text "
				 "with pp-tokenize",
				 key, path, fmt->name);
	d->limit = co->vocab_size > 0 ? co->vocab_size : c->model.vocab_size;
	d->limit_what = co->vocab_size > 0 ? "the tokenizer's" : "model.vocab_size";
	d->eos = c->data_eos ? co->eos_id : -1;
	d->shuffle = part == CORPUS_TRAIN;
	d->shuffle_key = rng_key(c->seed, "data/shuffle");
	d->mode = c->packing ? READ_PACKED : co->has_mask ? READ_DOCS : READ_WINDOWS;
	d->eos_target = co->has_mask ? -1 : d->eos;
	d->pad = co->eos_id >= 0 ? (int)co->eos_id : 0;
	return d->mode == READ_WINDOWS ? window_layout(d, c->seq_len, e)
				       : doc_layout(d, c->seq_len, e);
}

int data_open(pp_data **out, const pp_config *c, const char *split, const layout_seqs *seqs,
	      pp_err *e)
{
	*out = NULL;
	bool val = strcmp(split, "val") == 0;
	if (!val && strcmp(split, "train") != 0)
		return pp_errorf(e, PP_EUSAGE, "data split '%s': expected train or val", split);
	if (seqs->ranks < 1 || seqs->rank < 0 || seqs->rank >= seqs->ranks || seqs->group < 1)
		return pp_errorf(e, PP_EUSAGE, "data rank %d of %d, microbatches of %d", seqs->rank,
				 seqs->ranks, seqs->group);
	pp_data *d = calloc(1, sizeof *d);
	d->seqs = *seqs;
	/* validation reads val_data when set, else the data's own split */
	bool own = !val || !c->val_data[0];
	const char *key = own ? "data" : "val_data", *path = own ? c->data : c->val_data;
	int rc = 0;
	if (!strcmp(path, "synthetic") && c->packing)
		rc = pp_errorf(e, PP_EUSAGE,
			       "packing=true packs whole documents, but %s=synthetic is one "
			       "generated stream without any; set packing=false, or give a token "
			       "dataset",
			       key);
	else if (!strcmp(path, "synthetic"))
		synthetic_open(d, c, val);
	else
		rc = packed_open(d, c, key, path,
				 !val  ? CORPUS_TRAIN
				 : own ? CORPUS_VAL
				       : CORPUS_ANY,
				 e);
	if (rc) {
		data_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

int data_next(pp_data *d, int n_seq, int T, int *tokens, int *targets, int *pos, pp_err *e)
{
	if (d->seq_cap < T + 1) {
		free(d->seq);
		free(d->pos_scratch);
		d->seq = malloc((size_t)(T + 1) * sizeof(int));
		d->pos_scratch = malloc((size_t)T * sizeof(int));
		d->seq_cap = d->seq && d->pos_scratch ? T + 1 : 0;
		if (!d->seq_cap)
			return pp_errorf(e, PP_ERUNTIME, "out of memory for sequences of %d", T);
	}
	for (int b = 0; b < n_seq; b++) {
		uint64_t index = layout_seq_index(&d->seqs, d->pos);
		size_t at = (size_t)b * T;
		int rc = d->src->sequence(d, index, T, tokens + at, targets + at,
					  pos ? pos + at : d->pos_scratch, e);
		if (rc)
			return rc;
		d->pos++;
	}
	return 0;
}

int data_get_state(const pp_data *d, uint64_t *state, int max)
{
	if (max < 1)
		return 0;
	/* the global position: sequences read by all dp ranks together (they
	 * move in lockstep), so a run may resume with another dp size */
	state[0] = d->pos * (uint64_t)d->seqs.ranks;
	return 1;
}

int data_set_state(pp_data *d, const uint64_t *state, int n, pp_err *e)
{
	if (n < 1)
		return pp_errorf(e, PP_ERUNTIME, "data position missing from the checkpoint");
	if (state[0] % (uint64_t)d->seqs.ranks)
		return pp_errorf(
			e, PP_EUSAGE,
			"the checkpoint's data position (%llu sequences) does not split over dp=%d "
			"ranks; resume with a dp that divides it",
			(unsigned long long)state[0], d->seqs.ranks);
	d->pos = state[0] / (uint64_t)d->seqs.ranks;
	return 0;
}

void data_rewind(pp_data *d) { d->pos = 0; }

void data_close(pp_data *d)
{
	if (!d)
		return;
	if (d->src && d->src->close)
		d->src->close(d);
	free(d->seq);
	free(d->pos_scratch);
	free(d);
}
