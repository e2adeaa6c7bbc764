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

/* A source fills whole sequences of T+1 tokens by global sequence index; the
 * loader walks the indices its layout gives (layout_seq_index: microbatch
 * j of each step on data rank j % ranks), so every rank reads its own share
 * and the position is one counter. Two sources: synthetic
 * data, and token files (any corpus_format of source.h) packed into
 * windows. */
typedef struct {
	const char *name;
	int (*sequence)(pp_data *d, uint64_t index, int T, int *seq, pp_err *e); /* seq (T+1) */
	void (*close)(pp_data *d);
} data_source;

#define OFFSET_BLOCK 4096

struct pp_data {
	const data_source *src;
	layout_seqs seqs;
	uint64_t pos; /* sequences this rank has consumed */
	int *seq;     /* (T+1) scratch */
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
	int T; /* the windows below are for sequences of T tokens (0: none yet) */
	uint64_t windows;
	uint64_t *first_doc;        /* (windows) document of each window's first token; with eos */
	int *eos_at;                /* (T + 1) scratch: where a window's EOS tokens go */
	uint64_t off[OFFSET_BLOCK]; /* doc offsets [off_base, off_base + off_n) */
	uint64_t off_base, off_n;
};

/* Synthetic data: a seeded first-order Markov chain. Each token is followed
 * by a fixed successor with probability 0.9 (a seeded permutation) and by a
 * uniform random token otherwise, so a model can learn it: the loss floor is
 * about 0.9 * -ln(0.9) + 0.1 * ln(vocab / 0.1), far below ln(vocab). */
#define SYNTH_FOLLOW 0.9

static int synthetic_sequence(pp_data *d, uint64_t index, int T, int *seq, pp_err *e)
{
	(void)e;
	uint64_t base = index * (uint64_t)(2 * (T + 1) + 1);
	seq[0] = (int)rng_below(d->key, base, (uint64_t)d->vocab);
	for (int t = 1; t <= T; t++) {
		uint64_t i = base + 2 * (uint64_t)t;
		seq[t] = rng_uniform(d->key, i) < SYNTH_FOLLOW
				 ? d->next[seq[t - 1]]
				 : (int)rng_below(d->key, i + 1, (uint64_t)d->vocab);
	}
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
static int layout(pp_data *d, int T, pp_err *e)
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

static int packed_sequence(pp_data *d, uint64_t index, int T, int *seq, pp_err *e)
{
	int rc = d->T == T ? 0 : layout(d, T, e);
	if (rc)
		return rc;
	uint64_t W = d->windows, epoch = index / W, w = index % W;
	if (d->shuffle)
		w = permute(rng_mix(d->shuffle_key ^ rng_mix(epoch)), W, w);
	if ((rc = read_window(d, w, T, seq, e)))
		return rc;
	for (int t = 0; t <= T; t++)
		if (seq[t] >= d->limit)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: token %d (window %llu, position %d) is outside the "
					 "vocabulary of %lld (%s)",
					 d->corpus.path, seq[t], (unsigned long long)w, t,
					 (long long)d->limit, d->limit_what);
	return 0;
}

static void packed_close(pp_data *d)
{
	if (d->corpus.fmt)
		d->corpus.fmt->close(&d->corpus);
	free(d->first_doc);
	free(d->eos_at);
}

static const data_source packed = {"packed", packed_sequence, packed_close};

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
	d->src = &packed;
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
	d->limit = co->vocab_size > 0 ? co->vocab_size : c->model.vocab_size;
	d->limit_what = co->vocab_size > 0 ? "the tokenizer's" : "model.vocab_size";
	d->eos = c->data_eos ? co->eos_id : -1;
	d->shuffle = part == CORPUS_TRAIN;
	d->shuffle_key = rng_key(c->seed, "data/shuffle");
	return layout(d, c->seq_len, e);
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
	if (!strcmp(path, "synthetic"))
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

int data_next(pp_data *d, int n_seq, int T, int *tokens, int *targets, pp_err *e)
{
	if (d->seq_cap < T + 1) {
		free(d->seq);
		d->seq = malloc((size_t)(T + 1) * sizeof(int));
		d->seq_cap = T + 1;
	}
	for (int b = 0; b < n_seq; b++) {
		uint64_t index = layout_seq_index(&d->seqs, d->pos);
		int rc = d->src->sequence(d, index, T, d->seq, e);
		if (rc)
			return rc;
		memcpy(tokens + (size_t)b * T, d->seq, (size_t)T * sizeof(int));
		memcpy(targets + (size_t)b * T, d->seq + 1, (size_t)T * sizeof(int));
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
	free(d);
}
