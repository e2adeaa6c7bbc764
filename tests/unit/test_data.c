/* The data loader over token files: Megatron-LM indexed datasets and llm.c
 * shards built here from their published layouts, pp-tokens datasets from
 * the writer; windows (consecutive windows are consecutive stream tokens,
 * EOS between documents), per-epoch shuffling, data-parallel sharding,
 * exact resume, validation order, and the errors for damaged files and
 * mismatched vocabularies. Documents (a dataset with a loss mask one per
 * sequence, packing=true packed) against a reference written here from the
 * rules: inputs, targets (the mask's, the EOS after a document), positions,
 * padding, long documents cut; their shuffling, sharding and resume, and
 * the errors for data that has no documents. Synthetic data is checked
 * against the original generator. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/base/rng.h"
#include "../../libcommon/data/data.h"
#include "../../libcommon/data/dataset.h"
#include "../tools/harness.h"

static char dir[64];

#define OV(...) ((char *const[]){__VA_ARGS__, NULL})

/* config from model=llama-tiny plus overrides ("key=%s" style, NULL-ended) */
static int load_cfg(pp_config *c, pp_err *e, char *const *ov)
{
	char *all[32] = {"model=llama-tiny"};
	int n = 1;
	while (ov && ov[n - 1] && n < 31) {
		all[n] = ov[n - 1];
		n++;
	}
	return pp_config_load(c, NULL, n, all, e);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	static char bufs[16][512];
	static int k;
	char *b = bufs[k++ % 16];
	va_list ap;
	va_start(ap, f);
	vsnprintf(b, 512, f, ap);
	va_end(ap);
	return b;
}

static bool same_ints(const int *a, const int *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }

/* Reads n windows (T + 1 tokens each) from d into w. */
static int windows(pp_data *d, int n, int T, int *w, pp_err *e)
{
	int *tok = malloc(sizeof(int) * (size_t)T), *tgt = malloc(sizeof(int) * (size_t)T);
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		rc = data_next(d, 1, T, tok, tgt, NULL, e);
		memcpy(w + (size_t)i * (T + 1), tok, sizeof(int) * (size_t)T);
		w[(size_t)i * (T + 1) + T] = tgt[T - 1];
		for (int t = 0; t + 1 < T && !rc; t++)
			if (tgt[t] != tok[t + 1])
				rc = -1; /* targets must be the inputs shifted by one */
	}
	free(tok);
	free(tgt);
	return rc;
}

static int open_cfg(pp_data **d, const char *split, int rank, int size, pp_err *e, char *const *ov)
{
	pp_config c;
	int rc = load_cfg(&c, e, ov);
	if (!rc)
		rc = data_open(d, &c, split, &(layout_seqs){rank, size, 1}, e);
	pp_config_free(&c);
	return rc;
}

/* ---- files in other projects' formats -------------------------------------- */

static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }

/* Megatron: docs[d] holds n_seq[d] sequences; sequence s has len[s] tokens
 * taken in order from toks. dtype code per Megatron's DType enum. */
static void write_megatron(const char *prefix, int code, const int *toks, int n_docs,
			   const int *seqs_per_doc, const int *seq_len, const char *magic,
			   uint64_t version)
{
	static const int width[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
	FILE *b = fopen(fmt("%s.bin", prefix), "wb"), *x = fopen(fmt("%s.idx", prefix), "wb");
	int n_seq = 0;
	for (int d = 0; d < n_docs; d++)
		n_seq += seqs_per_doc[d];
	int64_t ptr = 0, t = 0;
	int64_t *ptrs = malloc(8 * (size_t)n_seq);
	for (int s = 0; s < n_seq; s++) {
		ptrs[s] = ptr;
		for (int i = 0; i < seq_len[s]; i++, t++) {
			int64_t v = toks[t];
			put(b, &v, (size_t)width[code]); /* little-endian: the low bytes */
		}
		ptr += (int64_t)seq_len[s] * width[code];
	}
	put(x, magic, 9);
	put(x, &version, 8);
	uint8_t c8 = (uint8_t)code;
	put(x, &c8, 1);
	uint64_t s64 = (uint64_t)n_seq, d64 = (uint64_t)n_docs + 1;
	put(x, &s64, 8);
	put(x, &d64, 8);
	for (int s = 0; s < n_seq; s++) {
		int32_t l = seq_len[s];
		put(x, &l, 4);
	}
	put(x, ptrs, 8 * (size_t)n_seq);
	int64_t di = 0;
	put(x, &di, 8);
	for (int d = 0; d < n_docs; d++) {
		di += seqs_per_doc[d];
		put(x, &di, 8);
	}
	free(ptrs);
	fclose(b);
	fclose(x);
}

static void write_llmc(const char *path, int magic, int version, const int *toks, int n, int width,
		       int header_count)
{
	FILE *f = fopen(path, "wb");
	int32_t h[256] = {magic, version, header_count};
	put(f, h, sizeof h);
	for (int i = 0; i < n; i++) {
		uint32_t v = (uint32_t)toks[i];
		put(f, &v, (size_t)width);
	}
	fclose(f);
}

/* ---- Megatron ---------------------------------------------------------- */

static void test_megatron(void)
{
	/* 3 documents of 2, 1 and 3 sequences; 60 tokens in all */
	int toks[60], spd[3] = {2, 1, 3}, len[6] = {7, 13, 9, 10, 11, 10};
	for (int i = 0; i < 60; i++)
		toks[i] = (i * 37 + 5) % 250;
	const int T = 8;
	int codes[] = {8, 4, 1};
	for (int ci = 0; ci < 3; ci++) {
		char *prefix = fmt("%s/mega%d", dir, codes[ci]);
		write_megatron(prefix, codes[ci], toks, 3, spd, len, "MMIDIDX\0\0", 1);
		const char *names[] = {prefix, fmt("%s.bin", prefix), fmt("%s.idx", prefix)};
		for (int ni = 0; ni < 3; ni++) {
			pp_data *d = NULL;
			pp_err e = {0};
			/* validation order: windows in stream order; no EOS without a tokenizer */
			int rc = open_cfg(&d, "val", 0, 1, &e,
					  OV(fmt("seq_len=%d", T), fmt("val_data=%s", names[ni])));
			int w[7 * 9];
			if (!rc)
				rc = windows(d, 7, T, w, &e);
			bool same = !rc;
			for (int i = 0; i < 7 && same; i++)
				for (int t = 0; t <= T && same; t++)
					same = w[i * (T + 1) + t] == toks[i * T + t];
			CHECK(same,
			      fmt("data/megatron/read/dtype%d/%s", codes[ci],
				  ni == 0   ? "prefix"
				  : ni == 1 ? "bin"
					    : "idx"),
			      "rc %d %s", rc, e.msg);
			data_close(d);
		}
	}
	/* damaged files: every error names the file */
	struct {
		const char *name, *magic;
		uint64_t version;
		int code, cut_idx, cut_bin;
		const char *want;
	} bad[] = {
		{"wrong_magic", "MMIDIDY\0\0", 1, 8, 0, 0, "not a Megatron index"},
		{"wrong_version", "MMIDIDX\0\0", 2, 8, 0, 0, "version 2"},
		{"float_dtype", "MMIDIDX\0\0", 1, 7, 0, 0, "float32"},
		{"bad_dtype", "MMIDIDX\0\0", 1, 8, 0, 0, "dtype code 9"},
		{"truncated_idx", "MMIDIDX\0\0", 1, 8, 20, 0, "truncated"},
		{"truncated_header", "MMIDIDX\0\0", 1, 8, 200, 0, "the header alone"},
		{"truncated_bin", "MMIDIDX\0\0", 1, 8, 0, 6, "truncated"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *prefix = fmt("%s/bad_%s", dir, bad[i].name);
		write_megatron(prefix, bad[i].code, toks, 3, spd, len, bad[i].magic,
			       bad[i].version);
		char *idx = fmt("%s.idx", prefix), *bin = fmt("%s.bin", prefix);
		if (!strcmp(bad[i].name, "bad_dtype")) {
			FILE *f = fopen(idx, "r+b");
			fseek(f, 17, SEEK_SET);
			fputc(9, f);
			fclose(f);
		}
		if (bad[i].cut_idx && truncate(idx, bad[i].cut_idx == 200 ? 30 : 100))
			continue;
		if (bad[i].cut_bin && truncate(bin, 100))
			continue;
		pp_data *d = NULL;
		pp_err e = {0};
		int rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", fmt("data=%s", prefix)));
		const char *file = bad[i].cut_bin ? bin : idx;
		CHECK(rc == PP_ERUNTIME && strstr(e.msg, file) && strstr(e.msg, bad[i].want),
		      fmt("data/megatron/error/%s", bad[i].name), "rc %d: %s", rc, e.msg);
		data_close(d);
	}
	/* a token beyond the model's vocabulary (llama-tiny: 256) */
	int big[60];
	memcpy(big, toks, sizeof big);
	big[17] = 300;
	char *prefix = fmt("%s/bigtok", dir);
	write_megatron(prefix, 4, big, 3, spd, len, "MMIDIDX\0\0", 1);
	pp_data *d = NULL;
	pp_err e = {0};
	int rc = open_cfg(&d, "val", 0, 1, &e, OV("seq_len=8", fmt("val_data=%s", prefix)));
	int w[3 * 9];
	if (!rc)
		rc = windows(d, 3, 8, w, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "token 300") && strstr(e.msg, "bigtok.bin"),
	      "data/megatron/error/token_outside_vocab", "rc %d: %s", rc, e.msg);
	data_close(d);
	/* an index of empty sequences: an empty .bin, which maps to no memory */
	int zero[6] = {0};
	prefix = fmt("%s/empty", dir);
	write_megatron(prefix, 8, toks, 3, spd, zero, "MMIDIDX\0\0", 1);
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", fmt("data=%s", prefix)));
	if (!rc)
		rc = windows(d, 1, 8, w, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "empty.bin") && strstr(e.msg, "holds 0 tokens"),
	      "data/megatron/error/empty_bin", "rc %d: %s", rc, e.msg);
	data_close(d);
	d = NULL;
	/* no validation split of its own */
	rc = open_cfg(&d, "val", 0, 1, &e, OV("seq_len=8", fmt("data=%s/mega8", dir)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "val_data"), "data/megatron/no_val_split",
	      "rc %d: %s", rc, e.msg);
}

/* ---- llm.c ------------------------------------------------------------- */

static void test_llmc(void)
{
	int a[50], b[40];
	for (int i = 0; i < 50; i++)
		a[i] = (i * 11 + 3) % 256;
	for (int i = 0; i < 40; i++)
		b[i] = (i * 29 + 1) % 256;
	write_llmc(fmt("%s/shard_train_000.bin", dir), 20240520, 1, a, 50, 2, 50);
	write_llmc(fmt("%s/shard_train_001.bin", dir), 20240801, 7, b, 40, 4, 40);
	const int T = 10;
	pp_data *d = NULL;
	pp_err e = {0};
	int rc = open_cfg(&d, "val", 0, 1, &e,
			  OV(fmt("seq_len=%d", T), fmt("val_data=%s/shard_train_*.bin", dir)));
	int w[8 * 11];
	if (!rc)
		rc = windows(d, 8, T, w, &e);
	bool same = !rc;
	for (int i = 0; i < 8 && same; i++)
		for (int t = 0; t <= T && same; t++) {
			int s = i * T + t;
			same = w[i * (T + 1) + t] == (s < 50 ? a[s] : b[s - 50]);
		}
	CHECK(same, "data/llmc/read_across_shards", "rc %d %s", rc, e.msg);
	data_close(d);
	rc = open_cfg(&d, "val", 0, 1, &e,
		      OV(fmt("seq_len=%d", T), fmt("val_data=%s/shard_train_001.bin", dir)));
	if (!rc)
		rc = windows(d, 3, T, w, &e);
	CHECK(!rc && w[0] == b[0] && w[T + 1] == b[T] && w[2 * T + 2 + T] == b[3 * T],
	      "data/llmc/read_uint32", "rc %d %s", rc, e.msg);
	data_close(d);

	struct {
		const char *name;
		int magic, version, count, cut;
		const char *want;
	} bad[] = {
		{"wrong_magic", 20240521, 1, 50, 0, "not an llm.c token shard"},
		{"wrong_version", 20240520, 2, 50, 0, "version 2"},
		{"truncated", 20240520, 1, 50, 900, "truncated"},
		{"short_data", 20240520, 1, 60, 0, "truncated"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *path = fmt("%s/llmc_%s.bin", dir, bad[i].name);
		write_llmc(path, bad[i].magic, bad[i].version, a, 50, 2, bad[i].count);
		if (bad[i].cut && truncate(path, bad[i].cut))
			continue;
		/* a .bin of unknown magic is not claimed by name: name it by a glob */
		char *pattern = fmt("%s/llmc_%s.bi[n]", dir, bad[i].name);
		rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", fmt("data=%s", pattern)));
		CHECK(rc == PP_ERUNTIME && strstr(e.msg, path) && strstr(e.msg, bad[i].want),
		      fmt("data/llmc/error/%s", bad[i].name), "rc %d: %s", rc, e.msg);
		data_close(d);
	}
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", fmt("data=%s/nothing_*.bin", dir)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "no file matches"), "data/llmc/error/no_match",
	      "rc %d: %s", rc, e.msg);
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", fmt("data=%s/absent.bin", dir)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "absent.bin"), "data/error/missing_file",
	      "rc %d: %s", rc, e.msg);
}

/* ---- pp-tokens: packing, shuffling, sharding, resume ---------------------- */

#define N_DOCS 40
static int doc_n(int i) { return 3 + (i * 13) % 17; }
static int doc_t(int i, int t) { return 3 + (i * 7 + t * 5) % 200; }

/* the stream: documents with EOS (2) between them when eos */
static int build_stream(int *s, bool eos)
{
	int n = 0;
	for (int i = 0; i < N_DOCS; i++) {
		if (i && eos)
			s[n++] = 2;
		for (int t = 0; t < doc_n(i); t++)
			s[n++] = doc_t(i, t);
	}
	return n;
}

static char *make_tokens(const char *name, int vocab, double val_fraction)
{
	char *path = fmt("%s/%s.h5", dir, name);
	static char *sources[] = {"x"};
	tokens_info m = {
		.vocab_size = vocab, .bos_id = 1, .eos_id = 2, .n_sources = 1, .sources = sources};
	snprintf(m.fingerprint, sizeof m.fingerprint, "%064d", 1);
	snprintf(m.kind, sizeof m.kind, "test");
	tokens_write_opts o = {.val_fraction = val_fraction, .seed = 0, .chunk = 64};
	tokens_writer *w;
	pp_err e = {0};
	int ids[32];
	if (tokens_create(&w, path, &m, &o, &e)) {
		printf("cannot write %s: %s\n", path, e.msg);
		return path;
	}
	for (int i = 0; i < N_DOCS; i++) {
		for (int t = 0; t < doc_n(i); t++)
			ids[t] = doc_t(i, t);
		tokens_add_doc(w, ids, (size_t)doc_n(i), &e);
	}
	if (tokens_finish(w, NULL, &e))
		printf("cannot finish %s: %s\n", path, e.msg);
	return path;
}

static void test_packing(void)
{
	char *path = make_tokens("pack", 256, 0);
	int stream[1000];
	const int T = 16;
	for (int eos = 0; eos < 2; eos++) {
		int L = build_stream(stream, eos), W = (L - 1) / T;
		pp_data *d = NULL;
		pp_err e = {0};
		int rc = open_cfg(&d, "val", 0, 1, &e,
				  OV(fmt("seq_len=%d", T), fmt("val_data=%s", path),
				     eos ? "data_eos=true" : "data_eos=false"));
		int *w = malloc(sizeof(int) * (size_t)(W + 2) * (T + 1));
		if (!rc)
			rc = windows(d, W + 2, T, w, &e);
		bool same = !rc;
		for (int i = 0; i < W && same; i++)
			for (int t = 0; t <= T && same; t++)
				same = w[i * (T + 1) + t] == stream[i * T + t];
		CHECK(same, eos ? "data/pack/eos_between_documents" : "data/pack/consecutive",
		      "rc %d %s (L %d W %d)", rc, e.msg, L, W);
		/* consecutive windows share one token; after the last window, the first */
		bool overlap = !rc;
		for (int i = 0; i + 1 < W && overlap; i++)
			overlap = w[i * (T + 1) + T] == w[(i + 1) * (T + 1)];
		CHECK(overlap && !memcmp(w + W * (T + 1), w, sizeof(int) * (T + 1)),
		      eos ? "data/pack/eos/overlap_and_wrap" : "data/pack/overlap_and_wrap",
		      "rc %d", rc);
		free(w);
		data_close(d);
	}
	/* data_eos=true without an EOS id in the file inserts nothing: see the
	 * Megatron checks. An empty val split is an error naming the remedy. */
	pp_data *d = NULL;
	pp_err e = {0};
	int rc = open_cfg(&d, "val", 0, 1, &e, OV("seq_len=16", fmt("data=%s", path)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "no val tokens") && strstr(e.msg, "val_data"),
	      "data/pack/empty_val_split", "rc %d: %s", rc, e.msg);
	rc = open_cfg(&d, "train", 0, 1, &e,
		      OV("model.max_seq_len=2048", "seq_len=1000", fmt("data=%s", path)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "seq_len 1000"), "data/pack/too_few_tokens",
	      "rc %d: %s", rc, e.msg);
	data_close(d);
	/* a dataset tokenized with a larger vocabulary than the model's */
	char *big = make_tokens("bigvocab", 1000, 0);
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=16", fmt("data=%s", big)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "1000") && strstr(e.msg, "model.vocab_size=256") &&
		      strstr(e.msg, big),
	      "data/vocab_larger_than_model", "rc %d: %s", rc, e.msg);
	data_close(d);
}

static void test_shuffle_shard_resume(void)
{
	char *path = make_tokens("shuffle", 256, 0);
	const int T = 8;
	int stream[1000];
	int L = build_stream(stream, true), W = (L - 1) / T;
	char *data = fmt("data=%s", path);
	/* one epoch: every window exactly once; a second epoch in another order */
	pp_data *d = NULL;
	pp_err e = {0};
	int *w1 = malloc(sizeof(int) * (size_t)2 * W * (T + 1));
	int rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "seed=1"));
	if (!rc)
		rc = windows(d, 2 * W, T, w1, &e);
	data_close(d);
	int *seen = calloc((size_t)W, sizeof(int));
	bool perm = !rc;
	for (int i = 0; i < W && perm; i++) {
		int start = -1; /* which window: match against the stream */
		for (int s = 0; s < W && start < 0; s++)
			if (same_ints(w1 + (size_t)i * (T + 1), stream + s * T, (size_t)T + 1))
				start = s;
		perm = start >= 0 && !seen[start]++;
	}
	CHECK(perm, "data/shuffle/epoch_is_permutation", "rc %d %s (W %d)", rc, e.msg, W);
	bool in_order = true;
	for (int i = 0; i < W && in_order; i++)
		in_order = same_ints(w1 + (size_t)i * (T + 1), stream + i * T, (size_t)T + 1);
	CHECK(perm && !in_order, "data/shuffle/not_in_order", "epoch 0 is the identity");
	CHECK(perm && !same_ints(w1, w1 + (size_t)W * (T + 1), (size_t)W * (T + 1)),
	      "data/shuffle/epochs_differ", "epoch 1 repeats epoch 0's order");
	free(seen);

	/* same seed, same order; another seed, another order */
	int *w2 = malloc(sizeof(int) * (size_t)2 * W * (T + 1));
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "seed=1"));
	if (!rc)
		rc = windows(d, 2 * W, T, w2, &e);
	data_close(d);
	CHECK(!rc && same_ints(w1, w2, (size_t)2 * W * (T + 1)),
	      "data/shuffle/same_seed_same_order", "rc %d %s", rc, e.msg);
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "seed=2"));
	if (!rc)
		rc = windows(d, W, T, w2, &e);
	data_close(d);
	CHECK(!rc && !same_ints(w1, w2, (size_t)W * (T + 1)), "data/shuffle/other_seed_other_order",
	      "rc %d %s", rc, e.msg);

	/* dp=2: rank r reads global sequences r, r + 2, ...; for a global batch
	 * of 6 (3 per rank) over 4 steps the ranks are disjoint and together
	 * the dp=1 stream */
	const int B = 6, steps = 4, n = B * steps;
	int *g = malloc(sizeof(int) * (size_t)n * (T + 1));
	int *r0 = malloc(sizeof(int) * (size_t)n / 2 * (T + 1));
	int *r1 = malloc(sizeof(int) * (size_t)n / 2 * (T + 1));
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "seed=3"));
	if (!rc)
		rc = windows(d, n, T, g, &e);
	data_close(d);
	pp_data *d0 = NULL, *d1 = NULL;
	if (!rc)
		rc = open_cfg(&d0, "train", 0, 2, &e, OV("seq_len=8", data, "seed=3"));
	if (!rc)
		rc = open_cfg(&d1, "train", 1, 2, &e, OV("seq_len=8", data, "seed=3"));
	for (int s = 0; s < steps && !rc; s++) {
		rc = windows(d0, B / 2, T, r0 + (size_t)s * B / 2 * (T + 1), &e);
		if (!rc)
			rc = windows(d1, B / 2, T, r1 + (size_t)s * B / 2 * (T + 1), &e);
	}
	data_close(d0);
	data_close(d1);
	bool union_ok = !rc, disjoint = !rc;
	for (int i = 0; i < n / 2 && union_ok; i++)
		union_ok = same_ints(r0 + (size_t)i * (T + 1), g + (size_t)(2 * i) * (T + 1),
				     T + 1) &&
			   same_ints(r1 + (size_t)i * (T + 1), g + (size_t)(2 * i + 1) * (T + 1),
				     T + 1);
	for (int i = 0; i < n / 2 && disjoint; i++)
		for (int j = 0; j < n / 2 && disjoint; j++)
			disjoint = !same_ints(r0 + (size_t)i * (T + 1), r1 + (size_t)j * (T + 1),
					      T + 1);
	CHECK(union_ok, "data/dp/union_is_global_batch", "rc %d %s", rc, e.msg);
	CHECK(disjoint && n <= W, "data/dp/ranks_disjoint", "n %d W %d", n, W);

	/* resume: the state after k batches, restored into a new loader, gives
	 * the same next batches (across the epoch boundary too) */
	const int k = W - 2, more = 6;
	int state_ok = 0;
	free(g);
	g = malloc(sizeof(int) * (size_t)(k + more) * (T + 1));
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "seed=4"));
	uint64_t st[4];
	int ns = 0;
	if (!rc && !(rc = windows(d, k, T, g, &e))) {
		ns = data_get_state(d, st, 4);
		rc = windows(d, more, T, g, &e);
	}
	data_close(d);
	rc = rc ? rc : open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "seed=4"));
	if (!rc && !(rc = data_set_state(d, st, ns, &e)))
		rc = windows(d, more, T, r0, &e);
	state_ok = !rc && ns == 1 && st[0] == (uint64_t)k &&
		   same_ints(g, r0, (size_t)more * (T + 1));
	data_close(d);
	CHECK(state_ok, "data/resume/exact", "rc %d %s ns %d", rc, e.msg, ns);
	/* rewind: validation re-reads the same batches */
	rc = open_cfg(&d, "val", 0, 1, &e, OV("seq_len=8", fmt("val_data=%s", path)));
	if (!rc && !(rc = windows(d, 5, T, g, &e))) {
		data_rewind(d);
		rc = windows(d, 5, T, r0, &e);
	}
	CHECK(!rc && same_ints(g, r0, (size_t)5 * (T + 1)), "data/val/rewind", "rc %d %s", rc,
	      e.msg);
	data_close(d);
	free(w1);
	free(w2);
	free(g);
	free(r0);
	free(r1);
}

/* val: the file's own /val split, or val_data's /val, or its /train when
 * that has no /val */
static void test_val_sources(void)
{
	char *split = make_tokens("split", 256, 0.3);
	char *whole = make_tokens("whole", 256, 0);
	tokens_file *f;
	pp_err e = {0};
	uint32_t first_val = 0;
	if (!tokens_open(&f, split, &e)) {
		tokens_read(f, TOKENS_VAL, 0, 1, &first_val, &e);
		tokens_close(f);
	}
	pp_data *d = NULL;
	int w[9];
	int rc = open_cfg(&d, "val", 0, 1, &e, OV("seq_len=8", fmt("data=%s", split)));
	if (!rc)
		rc = windows(d, 1, 8, w, &e);
	CHECK(!rc && (uint32_t)w[0] == first_val, "data/val/own_split", "rc %d %s", rc, e.msg);
	data_close(d);
	rc = open_cfg(&d, "val", 0, 1, &e,
		      OV("seq_len=8", fmt("data=%s", whole), fmt("val_data=%s", split)));
	if (!rc)
		rc = windows(d, 1, 8, w, &e);
	CHECK(!rc && (uint32_t)w[0] == first_val, "data/val/val_data_split", "rc %d %s", rc, e.msg);
	data_close(d);
	rc = open_cfg(&d, "val", 0, 1, &e,
		      OV("seq_len=8", fmt("data=%s", split), fmt("val_data=%s", whole)));
	if (!rc)
		rc = windows(d, 1, 8, w, &e);
	CHECK(!rc && w[0] == doc_t(0, 0), "data/val/val_data_train_when_no_val", "rc %d %s", rc,
	      e.msg);
	data_close(d);
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", fmt("data=%s/nonsense", dir)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "nonsense") && strstr(e.msg, "synthetic"),
	      "data/error/unknown_path", "rc %d: %s", rc, e.msg);
}

/* ---- the run's tokenizer ---------------------------------------------------- */

static void test_tokenizer(void)
{
	const char *root = getenv("PP_ROOT");
	char *tok = fmt("%s/../shared/data/llama2-tokenizer.model", root ? root : ".");
	if (access(tok, R_OK)) {
		th_skip("data/tokenizer", "no Llama 2 tokenizer at ../shared/data");
		return;
	}
	/* make_tokens records a made-up fingerprint */
	char *path = make_tokens("fp", 256, 0);
	pp_data *d = NULL;
	pp_err e = {0};
	int rc = open_cfg(&d, "train", 0, 1, &e,
			  OV("seq_len=8", "model.vocab_size=32000", fmt("data=%s", path),
			     fmt("tokenizer=%s", tok)));
	char zeros[65];
	snprintf(zeros, sizeof zeros, "%064d", 1);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, path) && strstr(e.msg, tok) &&
		      strstr(e.msg, zeros) &&
		      strstr(e.msg,
			     "9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347"),
	      "data/tokenizer/fingerprint_mismatch", "rc %d: %s", rc, e.msg);
	data_close(d);
	d = NULL;
	/* Megatron data records no tokenizer: the tokenizer's vocabulary bounds
	 * the model's, and its EOS (2) goes between documents */
	int toks[60], spd[3] = {2, 1, 3}, len[6] = {7, 13, 9, 10, 11, 10};
	for (int i = 0; i < 60; i++)
		toks[i] = 3 + (i * 37 + 5) % 250;
	char *prefix = fmt("%s/megatok", dir);
	write_megatron(prefix, 8, toks, 3, spd, len, "MMIDIDX\0\0", 1);
	rc = open_cfg(&d, "train", 0, 1, &e,
		      OV("seq_len=8", fmt("data=%s", prefix), fmt("tokenizer=%s", tok)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "32000") && strstr(e.msg, "model.vocab_size=256"),
	      "data/tokenizer/vocab_larger_than_model", "rc %d: %s", rc, e.msg);
	data_close(d);
	d = NULL;
	rc = open_cfg(&d, "val", 0, 1, &e,
		      OV("seq_len=8", "model.vocab_size=32000", fmt("val_data=%s", prefix),
			 fmt("tokenizer=%s", tok)));
	int w[8 * 9], stream[70], n = 0;
	for (int i = 0; i < 60; i++) {
		if (i == 20 || i == 29) /* documents end after 2 and 1 sequences */
			stream[n++] = 2;
		stream[n++] = toks[i];
	}
	if (!rc)
		rc = windows(d, 7, 8, w, &e);
	bool same = !rc;
	for (int i = 0; i < 7 && same; i++)
		same = same_ints(w + i * 9, stream + i * 8, 9);
	CHECK(same, "data/tokenizer/megatron_eos_between_documents", "rc %d %s", rc, e.msg);
	data_close(d);
}

/* ---- documents: one per sequence, and packed -------------------------------- */

/* document i of the masked corpus: lengths from 0 (skipped by the writer)
 * through 1 (no target) to more than 2 * T + 1 (cut in three); its mask
 * leaves out every third token, and the first two of odd documents */
#define M_DOCS 24
static int mdoc_n(int i) { return (int)((i * 7 + 3) % 23); }
static int mdoc_t(int i, int t) { return 3 + (i * 11 + t * 7) % 240; }
static int mdoc_m(int i, int t) { return t % 3 != 2 && !(i % 2 && t < 2); }

static char *make_masked(const char *name, bool masked)
{
	char *path = fmt("%s/%s.h5", dir, name);
	static char *sources[] = {"x"};
	tokens_info m = {
		.vocab_size = 256, .bos_id = 1, .eos_id = 2, .n_sources = 1, .sources = sources};
	snprintf(m.fingerprint, sizeof m.fingerprint, "%064d", 1);
	snprintf(m.kind, sizeof m.kind, "test");
	tokens_write_opts o = {.chunk = 16};
	tokens_writer *w;
	pp_err e = {0};
	int ids[32];
	uint8_t mask[32];
	if (tokens_create(&w, path, &m, &o, &e)) {
		printf("cannot write %s: %s\n", path, e.msg);
		return path;
	}
	for (int i = 0; i < M_DOCS; i++) {
		for (int t = 0; t < mdoc_n(i); t++) {
			ids[t] = mdoc_t(i, t);
			mask[t] = (uint8_t)mdoc_m(i, t);
		}
		tokens_add_masked(w, ids, masked ? mask : NULL, (size_t)mdoc_n(i), &e);
	}
	if (tokens_finish(w, NULL, &e))
		printf("cannot finish %s: %s\n", path, e.msg);
	return path;
}

/* The sequences the rules give, in corpus order (the loader's validation
 * order): tok, tgt, pos (n, T) each; returns n. A document with the EOS
 * appended (eos >= 0) is m tokens; its first m - 1 are inputs, in pieces
 * of at most T that overlap by one token; packed: a piece that does not fit
 * the sequence's rest starts the next; else only the first piece, one per
 * sequence. Padding: pad, ignored, position 0 (one per sequence: t). */
static int reference(bool packed, bool masked, int eos, int pad, int T, int *tok, int *tgt,
		     int *pos)
{
	int n = 0, fill = T;
	for (int i = 0; i < M_DOCS; i++) {
		int eff[40], em[40], m = mdoc_n(i);
		for (int t = 0; t < m; t++) {
			eff[t] = mdoc_t(i, t);
			em[t] = !masked || mdoc_m(i, t);
		}
		if (eos >= 0 && m > 0) {
			eff[m] = eos;
			em[m++] = 1;
		}
		for (int o = 0; o < m - 1; o += T) {
			int p = m - 1 - o < T ? m - 1 - o : T;
			if (!packed || fill + p > T) {
				for (int t = fill; n && t < T; t++) /* pad the one before */
					tok[(n - 1) * T + t] = pad, tgt[(n - 1) * T + t] = -100,
							  pos[(n - 1) * T + t] = packed ? 0 : t;
				n++;
				fill = 0;
			}
			for (int j = 0; j < p; j++, fill++) {
				tok[(n - 1) * T + fill] = eff[o + j];
				tgt[(n - 1) * T + fill] = em[o + j + 1] ? eff[o + j + 1] : -100;
				pos[(n - 1) * T + fill] = j;
			}
			if (!packed)
				break;
		}
	}
	for (int t = fill; n && t < T; t++)
		tok[(n - 1) * T + t] = pad, tgt[(n - 1) * T + t] = -100,
				  pos[(n - 1) * T + t] = packed ? 0 : t;
	return n;
}

/* n sequences of the loader (one per call, as the trainer reads) */
static int read_seqs(pp_data *d, int n, int T, int *tok, int *tgt, int *pos, pp_err *e)
{
	int rc = 0;
	for (int i = 0; i < n && !rc; i++)
		rc = data_next(d, 1, T, tok + (size_t)i * T, tgt + (size_t)i * T,
			       pos ? pos + (size_t)i * T : NULL, e);
	return rc;
}

static void test_documents(void)
{
	const int T = 8;
	char masked[128], plain[128];
	snprintf(masked, sizeof masked, "%s", make_masked("masked", true));
	snprintf(plain, sizeof plain, "%s", make_masked("unmasked", false));
	enum { CAP = 128 * 8 };
	static int rt[CAP], rg[CAP], rp[CAP], lt[CAP + 8], lg[CAP + 8], lp[CAP + 8];
	/* mask, packing, data_eos: what each reads */
	struct {
		const char *name, *path;
		bool masked, packed, eos;
	} cases[] = {
		{"one_doc_per_sequence", masked, true, false, true},
		{"packed/masked", masked, true, true, true},
		{"packed/eos_target", plain, false, true, true},
		{"packed/no_eos", plain, false, true, false},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int eos = cases[c].eos && !cases[c].masked ? 2 : -1;
		int n = reference(cases[c].packed, cases[c].masked, eos, 2, T, rt, rg, rp);
		pp_data *d = NULL;
		pp_err e = {0};
		int rc = open_cfg(&d, "val", 0, 1, &e,
				  OV("seq_len=8", fmt("val_data=%s", cases[c].path),
				     cases[c].packed ? "packing=true" : "packing=false",
				     cases[c].eos ? "data_eos=true" : "data_eos=false"));
		if (!rc)
			rc = read_seqs(d, n + 1, T, lt, lg, lp, &e);
		bool same = !rc && same_ints(rt, lt, (size_t)n * T) &&
			    same_ints(rg, lg, (size_t)n * T) && same_ints(rp, lp, (size_t)n * T);
		int bad = -1;
		for (int i = 0; !rc && !same && i < n * T && bad < 0; i++)
			if (rt[i] != lt[i] || rg[i] != lg[i] || rp[i] != lp[i])
				bad = i;
		CHECK(same, fmt("data/documents/%s", cases[c].name),
		      "rc %d %s; %d sequences, first difference at sequence %d, t %d: "
		      "tok %d/%d tgt %d/%d pos %d/%d",
		      rc, e.msg, n, bad / T, bad % T, bad < 0 ? 0 : rt[bad], bad < 0 ? 0 : lt[bad],
		      bad < 0 ? 0 : rg[bad], bad < 0 ? 0 : lg[bad], bad < 0 ? 0 : rp[bad],
		      bad < 0 ? 0 : lp[bad]);
		/* an epoch is the n sequences: the next is the first again */
		CHECK(!rc && same_ints(lt, lt + (size_t)n * T, T) &&
			      same_ints(lg, lg + (size_t)n * T, T),
		      fmt("data/documents/%s/epoch_of_%d", cases[c].name, n), "rc %d", rc);
		/* pos NULL reads the same */
		if (!rc) {
			data_rewind(d);
			rc = read_seqs(d, n, T, lt, lg, NULL, &e);
		}
		CHECK(!rc && same_ints(rt, lt, (size_t)n * T) && same_ints(rg, lg, (size_t)n * T),
		      fmt("data/documents/%s/pos_null", cases[c].name), "rc %d %s", rc, e.msg);
		data_close(d);
	}
	/* what the reference says, spelled out for one case: T = 8, masked,
	 * one per sequence. Document 1 (10 tokens, odd: mask 0 0 0 1 1 0 1 1 0
	 * 1) is its first 9 tokens, targets where the mask has 1 */
	int n = reference(false, true, -1, 2, T, rt, rg, rp);
	int want_tok[8], want_tgt[8];
	for (int t = 0; t < 8; t++) {
		want_tok[t] = mdoc_t(1, t);
		want_tgt[t] = mdoc_m(1, t + 1) ? mdoc_t(1, t + 1) : -100;
	}
	CHECK(n > 1 && mdoc_n(1) == 10 && same_ints(rt + T, want_tok, 8) &&
		      same_ints(rg + T, want_tgt, 8) && rg[T + 1] == -100 &&
		      rg[T + 2] == mdoc_t(1, 3) && rg[T + 4] == -100,
	      "data/documents/reference_by_hand", "n %d", n);

	/* training order: each epoch a permutation of the sequences; dp=2
	 * shares them; the position saved after k gives the same next ones */
	int nseq = reference(true, true, -1, 2, T, rt, rg, rp);
	pp_data *d = NULL;
	pp_err e = {0};
	char data[160];
	snprintf(data, sizeof data, "data=%s", masked);
	int rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "packing=true", "seed=5"));
	if (!rc)
		rc = read_seqs(d, 2 * nseq, T, lt, lg, lp, &e);
	bool perm = !rc;
	int *seen = calloc((size_t)nseq, sizeof(int));
	for (int i = 0; i < nseq && perm; i++) {
		int which = -1;
		for (int s = 0; s < nseq && which < 0; s++)
			if (same_ints(lt + (size_t)i * T, rt + (size_t)s * T, T) &&
			    same_ints(lg + (size_t)i * T, rg + (size_t)s * T, T) &&
			    same_ints(lp + (size_t)i * T, rp + (size_t)s * T, T) && !seen[s])
				which = s;
		perm = which >= 0 && !seen[which]++;
	}
	free(seen);
	CHECK(perm && !same_ints(lt, rt, (size_t)nseq * T), "data/documents/shuffle/permutation",
	      "rc %d %s (%d sequences)", rc, e.msg, nseq);
	data_close(d);
	const int k = nseq - 2, more = 5;
	static int a[CAP], b[CAP], ap[CAP], bp[CAP];
	uint64_t st[4];
	int ns = 0;
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "packing=true", "seed=5"));
	if (!rc && !(rc = read_seqs(d, k, T, a, a + k * T, NULL, &e))) {
		ns = data_get_state(d, st, 4);
		rc = read_seqs(d, more, T, a, lg, ap, &e);
	}
	data_close(d);
	if (!rc)
		rc = open_cfg(&d, "train", 0, 1, &e,
			      OV("seq_len=8", data, "packing=true", "seed=5"));
	if (!rc && !(rc = data_set_state(d, st, ns, &e)))
		rc = read_seqs(d, more, T, b, rg, bp, &e);
	CHECK(!rc && ns == 1 && st[0] == (uint64_t)k && same_ints(a, b, (size_t)more * T) &&
		      same_ints(lg, rg, (size_t)more * T) && same_ints(ap, bp, (size_t)more * T),
	      "data/documents/resume/exact", "rc %d %s", rc, e.msg);
	data_close(d);
	/* dp=2: rank r reads sequences r, r + 2, ... of the single rank's order */
	pp_data *d0 = NULL, *d1 = NULL;
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", data, "packing=true", "seed=6"));
	if (!rc)
		rc = read_seqs(d, 8, T, a, lg, NULL, &e);
	data_close(d);
	if (!rc)
		rc = open_cfg(&d0, "train", 0, 2, &e,
			      OV("seq_len=8", data, "packing=true", "seed=6"));
	if (!rc)
		rc = open_cfg(&d1, "train", 1, 2, &e,
			      OV("seq_len=8", data, "packing=true", "seed=6"));
	bool shared = !rc;
	for (int i = 0; i < 4 && shared; i++) {
		shared = !read_seqs(d0, 1, T, b, rg, NULL, &e) &&
			 same_ints(b, a + (size_t)(2 * i) * T, T) &&
			 !read_seqs(d1, 1, T, b, rg, NULL, &e) &&
			 same_ints(b, a + (size_t)(2 * i + 1) * T, T);
	}
	CHECK(shared, "data/documents/dp/ranks_share", "rc %d %s", rc, e.msg);
	data_close(d0);
	data_close(d1);

	/* data without documents cannot be packed */
	rc = open_cfg(&d, "train", 0, 1, &e, OV("seq_len=8", "packing=true"));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "packing=true") && strstr(e.msg, "synthetic"),
	      "data/documents/error/synthetic_packing", "rc %d: %s", rc, e.msg);
	int toks[64];
	for (int i = 0; i < 64; i++)
		toks[i] = 3 + i;
	write_llmc(fmt("%s/pack_train_000.bin", dir), 20240520, 1, toks, 64, 2, 64);
	rc = open_cfg(&d, "train", 0, 1, &e,
		      OV("seq_len=8", "packing=true", fmt("data=%s/pack_train_000.bin", dir)));
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "packing=true") && strstr(e.msg, "llm.c") &&
		      strstr(e.msg, "pack_train_000.bin"),
	      "data/documents/error/llmc_packing", "rc %d: %s", rc, e.msg);
	data_close(d);
	/* version 1 (no mask) reads as windows, as before */
	tokens_file *f = NULL;
	rc = tokens_open(&f, plain, &e);
	CHECK(!rc && tokens_get_info(f)->version == 1 && !tokens_get_info(f)->has_mask,
	      "data/documents/unmasked_is_version_1", "rc %d %s", rc, e.msg);
	tokens_close(f);
	rc = tokens_open(&f, masked, &e);
	CHECK(!rc && tokens_get_info(f)->version == 2 && tokens_get_info(f)->has_mask,
	      "data/documents/masked_is_version_2", "rc %d %s", rc, e.msg);
	tokens_close(f);
}

/* ---- synthetic: unchanged ------------------------------------------------- */

/* the generator as first written (a first-order chain, seeded) */
static void synthetic_reference(uint64_t seed, const char *split, int vocab, uint64_t index, int T,
				int *seq)
{
	uint64_t chain = rng_key(seed, "synthetic/chain");
	uint64_t key = rng_key(seed, !strcmp(split, "val") ? "synthetic/val" : "synthetic/train");
	int *next = malloc(sizeof(int) * (size_t)vocab);
	for (int i = 0; i < vocab; i++)
		next[i] = i;
	for (int i = vocab - 1; i > 0; i--) {
		int j = (int)rng_below(chain, (uint64_t)i, (uint64_t)i + 1);
		int t = next[i];
		next[i] = next[j];
		next[j] = t;
	}
	uint64_t base = index * (uint64_t)(2 * (T + 1) + 1);
	seq[0] = (int)rng_below(key, base, (uint64_t)vocab);
	for (int t = 1; t <= T; t++) {
		uint64_t i = base + 2 * (uint64_t)t;
		seq[t] = rng_uniform(key, i) < 0.9 ? next[seq[t - 1]]
						   : (int)rng_below(key, i + 1, (uint64_t)vocab);
	}
	free(next);
}

static void test_synthetic(void)
{
	const char *splits[] = {"train", "val"};
	for (int s = 0; s < 2; s++) {
		pp_data *d = NULL;
		pp_err e = {0};
		int w[5 * 17], ref[17];
		/* rank 1 of 2: global sequences 1, 3, 5, ... */
		int rc = open_cfg(&d, splits[s], 1, 2, &e, OV("seq_len=16", "seed=9"));
		if (!rc)
			rc = windows(d, 5, 16, w, &e);
		bool same = !rc;
		for (int i = 0; i < 5 && same; i++) {
			synthetic_reference(9, splits[s], 256, (uint64_t)(2 * i + 1), 16, ref);
			same = same_ints(w + i * 17, ref, 17);
		}
		CHECK(same, fmt("data/synthetic/unchanged/%s", splits[s]), "rc %d %s", rc, e.msg);
		data_close(d);
	}
}

int main(void)
{
	snprintf(dir, sizeof dir, "/tmp/pp-test-data-XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_synthetic();
	test_megatron();
	test_llmc();
	test_packing();
	test_shuffle_shard_resume();
	test_val_sources();
	test_documents();
	test_tokenizer();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd))
		printf("could not remove %s\n", dir);
	TH_EXIT();
}
