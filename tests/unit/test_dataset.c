/* pp-tokens datasets: writer/reader round trip over several chunks, the
 * split rule, atomic publication, every validation error of the reader
 * (truncated, flipped bytes, wrong version, wrong format, missing group,
 * wrong shape), the loss mask (version 2: documents without a mask count
 * whole, before the first masked one too; values other than 0 and 1
 * refused; a damaged loss_mask), and the text-document reader's three
 * modes and cutting. */
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../libcommon/data/dataset.h"
#include "../tools/harness.h"

static char dir[64];

static bool exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* document i: 1 + (i * 7) % 23 tokens, token t = (i * 131 + t * 17) % vocab */
static size_t doc_len(int i) { return 1 + (size_t)(i * 7 % 23); }
static int doc_tok(int i, size_t t, int vocab) { return (int)((i * 131 + t * 17) % vocab); }

static tokens_info meta(int vocab)
{
	static char *sources[] = {"a.txt", "b/c.txt", "caf\xc3\xa9.txt"};
	tokens_info m = {
		.vocab_size = vocab, .bos_id = 1, .eos_id = 2, .n_sources = 3, .sources = sources};
	snprintf(m.fingerprint, sizeof m.fingerprint, "%064d", 7);
	snprintf(m.kind, sizeof m.kind, "sentencepiece-bpe");
	return m;
}

/* Writes n_docs documents; returns 0 or the error code. */
static int write_docs(const char *path, int n_docs, int vocab, double val_fraction, uint64_t seed,
		      size_t chunk, int deflate, pp_err *e)
{
	tokens_info m = meta(vocab);
	tokens_write_opts o = {
		.val_fraction = val_fraction, .seed = seed, .chunk = chunk, .deflate = deflate};
	tokens_writer *w;
	int rc = tokens_create(&w, path, &m, &o, e);
	if (rc)
		return rc;
	int ids[64];
	for (int i = 0; i < n_docs && !rc; i++) {
		for (size_t t = 0; t < doc_len(i); t++)
			ids[t] = doc_tok(i, t, vocab);
		rc = tokens_add_doc(w, ids, doc_len(i), e);
	}
	if (rc) {
		tokens_abort(w);
		return rc;
	}
	return tokens_finish(w, NULL, e);
}

/* The split of each document, by the documented rule. */
static void expected_splits(int n, double frac, uint64_t seed, int *split)
{
	int count[2] = {0, 0};
	for (int i = 0; i < n; i++) {
		split[i] = tokens_split_of(frac, seed, (uint64_t)i);
		if (i < n - 1)
			count[split[i]]++;
	}
	if (n >= 2 && frac > 0 && !count[TOKENS_VAL])
		split[n - 1] = TOKENS_VAL;
	else if (n >= 2 && frac > 0 && !count[TOKENS_TRAIN])
		split[n - 1] = TOKENS_TRAIN;
}

static void test_round_trip(int deflate)
{
	char path[128], name[64];
	snprintf(path, sizeof path, "%s/rt%d.h5", dir, deflate);
	snprintf(name, sizeof name, "dataset/round_trip%s", deflate ? "/deflate" : "");
	const int n = 300, vocab = 1000;
	pp_err e = {0};
	/* a 37-token chunk: many chunk boundaries and partial last chunks */
	int rc = write_docs(path, n, vocab, 0.25, 42, 37, deflate, &e);
	CHECK(rc == 0, name, "write: %s", e.msg);
	if (rc)
		return;
	tokens_file *f;
	rc = tokens_open(&f, path, &e);
	snprintf(name, sizeof name, "dataset/reopen%s", deflate ? "/deflate" : "");
	CHECK(rc == 0, name, "open: %s", e.msg);
	if (rc)
		return;
	const tokens_info *m = tokens_get_info(f);
	tokens_info want = meta(vocab);
	bool attrs = !strcmp(m->fingerprint, want.fingerprint) &&
		     !strcmp(m->kind, "sentencepiece-bpe") && m->vocab_size == vocab &&
		     m->bos_id == 1 && m->eos_id == 2 && m->n_sources == 3 &&
		     !strcmp(m->sources[2], "caf\xc3\xa9.txt") && !strcmp(m->sources[1], "b/c.txt");
	snprintf(name, sizeof name, "dataset/attributes%s", deflate ? "/deflate" : "");
	CHECK(attrs, name, "kind %s vocab %lld sources %d", m->kind, (long long)m->vocab_size,
	      m->n_sources);

	int split[300];
	expected_splits(n, 0.25, 42, split);
	uint64_t docs[2] = {0, 0}, toks[2] = {0, 0};
	bool same = true;
	for (int i = 0; i < n && same; i++) {
		int k = split[i];
		uint64_t off[2];
		uint32_t got[64];
		same = !tokens_read_offsets(f, k, docs[k], 2, off, &e) && off[0] == toks[k] &&
		       off[1] == toks[k] + doc_len(i) &&
		       !tokens_read(f, k, off[0], doc_len(i), got, &e);
		for (size_t t = 0; same && t < doc_len(i); t++)
			same = got[t] == (uint32_t)doc_tok(i, t, vocab);
		if (!same)
			printf("document %d (split %d) differs: %s\n", i, k, e.msg);
		docs[k]++;
		toks[k] += doc_len(i);
	}
	snprintf(name, sizeof name, "dataset/tokens_and_offsets%s", deflate ? "/deflate" : "");
	CHECK(same && m->docs[0] == docs[0] && m->docs[1] == docs[1] && m->tokens[0] == toks[0] &&
		      m->tokens[1] == toks[1],
	      name, "counts train %llu/%llu val %llu/%llu", (unsigned long long)m->docs[0],
	      (unsigned long long)docs[0], (unsigned long long)m->docs[1],
	      (unsigned long long)docs[1]);
	/* about a quarter in val */
	snprintf(name, sizeof name, "dataset/val_fraction%s", deflate ? "/deflate" : "");
	CHECK(docs[1] > 40 && docs[1] < 110, name, "%llu of %d documents in val",
	      (unsigned long long)docs[1], n);
	uint32_t x;
	rc = tokens_read(f, TOKENS_TRAIN, m->tokens[0], 1, &x, &e);
	snprintf(name, sizeof name, "dataset/read_past_end%s", deflate ? "/deflate" : "");
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "past"), name, "rc %d: %s", rc, e.msg);
	tokens_close(f);
}

/* document i's mask: none for i % 4 == 0 (every token counts), else every
 * token t with (i + t) % 3 != 0 */
static bool masked_doc(int i) { return i % 4 != 0; }
static uint8_t mask_of(int i, size_t t) { return !masked_doc(i) || (i + t) % 3 != 0; }

static void test_mask(void)
{
	char path[128];
	snprintf(path, sizeof path, "%s/mask.h5", dir);
	const int n = 120, vocab = 500;
	tokens_info m = meta(vocab);
	/* 11-token chunks; the first masked document comes after two chunks */
	tokens_write_opts o = {.val_fraction = 0.3, .seed = 3, .chunk = 11};
	tokens_writer *w;
	pp_err e = {0};
	int rc = tokens_create(&w, path, &m, &o, &e);
	int ids[64];
	uint8_t mask[64];
	for (int i = 0; i < n && !rc; i++) {
		for (size_t t = 0; t < doc_len(i); t++) {
			ids[t] = doc_tok(i, t, vocab);
			mask[t] = mask_of(i, t);
		}
		/* documents 0..3 unmasked, so the mask starts late */
		rc = tokens_add_masked(w, ids, i >= 4 && masked_doc(i) ? mask : NULL, doc_len(i),
				       &e);
	}
	tokens_info got = {0};
	if (!rc)
		rc = tokens_finish(w, &got, &e);
	CHECK(!rc && got.version == 2 && got.has_mask, "dataset/mask/finish_says_version_2",
	      "rc %d %s version %lld", rc, e.msg, (long long)got.version);
	tokens_file *f = NULL;
	if (!rc)
		rc = tokens_open(&f, path, &e);
	CHECK(!rc && tokens_get_info(f)->version == 2 && tokens_get_info(f)->has_mask,
	      "dataset/mask/opens_as_version_2", "rc %d %s", rc, e.msg);
	int split[120];
	expected_splits(n, 0.3, 3, split);
	uint64_t at[2] = {0, 0};
	bool same = !rc;
	for (int i = 0; i < n && same; i++) {
		uint8_t mk[64];
		int k = split[i];
		same = !tokens_read_mask(f, k, at[k], doc_len(i), mk, &e);
		for (size_t t = 0; same && t < doc_len(i); t++)
			same = mk[t] == (i >= 4 ? mask_of(i, t) : 1);
		at[k] += doc_len(i);
	}
	CHECK(same, "dataset/mask/round_trip", "%s", e.msg);
	uint8_t x;
	rc = f ? tokens_read_mask(f, TOKENS_VAL, at[1], 1, &x, &e) : -1;
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "past"), "dataset/mask/read_past_end", "rc %d %s",
	      rc, e.msg);
	tokens_close(f);

	/* a version-1 dataset has none to read */
	char v1[128];
	snprintf(v1, sizeof v1, "%s/v1.h5", dir);
	rc = write_docs(v1, 5, vocab, 0, 0, 0, 0, &e);
	f = NULL;
	if (!rc)
		rc = tokens_open(&f, v1, &e);
	CHECK(!rc && tokens_get_info(f)->version == 1 && !tokens_get_info(f)->has_mask &&
		      tokens_read_mask(f, TOKENS_TRAIN, 0, 1, &x, &e) == PP_ERUNTIME &&
		      strstr(e.msg, "no loss mask"),
	      "dataset/mask/version_1_has_none", "rc %d %s", rc, e.msg);
	tokens_close(f);

	/* a mask value other than 0 or 1 is refused, nothing published */
	char badp[128];
	snprintf(badp, sizeof badp, "%s/badmask.h5", dir);
	uint8_t two[2] = {1, 2};
	int two_ids[2] = {5, 6};
	rc = tokens_create(&w, badp, &m, &(tokens_write_opts){0}, &e);
	if (!rc && !(rc = tokens_add_masked(w, two_ids, two, 2, &e)))
		rc = tokens_finish(w, NULL, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "not 0 or 1") && !exists(badp),
	      "dataset/mask/value_not_0_or_1", "rc %d %s", rc, e.msg);
}

static void test_split_rule(void)
{
	pp_err e = {0};
	char path[128];
	int split[2];
	/* two documents, a tiny fraction: the second still goes to val */
	snprintf(path, sizeof path, "%s/two.h5", dir);
	int rc = write_docs(path, 2, 100, 1e-9, 1, 0, 0, &e);
	tokens_file *f = NULL;
	if (!rc)
		rc = tokens_open(&f, path, &e);
	expected_splits(2, 1e-9, 1, split);
	CHECK(!rc && tokens_get_info(f)->docs[0] == 1 && tokens_get_info(f)->docs[1] == 1 &&
		      split[1] == TOKENS_VAL,
	      "dataset/split/each_split_gets_one", "rc %d %s", rc, e.msg);
	tokens_close(f);
	/* a fraction close to 1: train still gets one */
	rc = write_docs(path, 5, 100, 0.999999, 1, 0, 0, &e);
	if (!rc)
		rc = tokens_open(&f, path, &e);
	CHECK(!rc && tokens_get_info(f)->docs[0] == 1 && tokens_get_info(f)->docs[1] == 4,
	      "dataset/split/train_gets_one", "rc %d %s", rc, e.msg);
	tokens_close(f);
	/* fraction 0: nothing in val, and one document stays in train */
	rc = write_docs(path, 1, 100, 0.5, 1, 0, 0, &e);
	if (!rc)
		rc = tokens_open(&f, path, &e);
	CHECK(!rc && tokens_get_info(f)->docs[0] + tokens_get_info(f)->docs[1] == 1,
	      "dataset/split/one_document", "rc %d %s", rc, e.msg);
	tokens_close(f);
	/* the rule is a pure function of (fraction, seed, index) */
	int same = 0, differ = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		same += tokens_split_of(0.3, 5, i) == tokens_split_of(0.3, 5, i);
		differ += tokens_split_of(0.3, 5, i) != tokens_split_of(0.3, 6, i);
	}
	CHECK(same == 1000 && differ > 200, "dataset/split/seeded", "same %d differ %d", same,
	      differ);
}

static void test_atomic(void)
{
	char path[128], tmp[160];
	snprintf(path, sizeof path, "%s/atomic.h5", dir);
	snprintf(tmp, sizeof tmp, "%s/.atomic.h5.tmp-%ld", dir, (long)getpid());
	tokens_info m = meta(50);
	tokens_write_opts o = {0};
	tokens_writer *w;
	pp_err e = {0};
	int ids[3] = {3, 4, 5};
	int rc = tokens_create(&w, path, &m, &o, &e);
	if (!rc)
		rc = tokens_add_doc(w, ids, 3, &e);
	CHECK(!rc && !exists(path) && exists(tmp), "dataset/atomic/temporary_until_finish",
	      "rc %d %s", rc, e.msg);
	tokens_abort(w);
	CHECK(!exists(path) && !exists(tmp), "dataset/atomic/abort_removes", "left files behind");
	rc = tokens_create(&w, path, &m, &o, &e);
	if (!rc)
		rc = tokens_add_doc(w, ids, 3, &e);
	tokens_info got = {0};
	if (!rc)
		rc = tokens_finish(w, &got, &e);
	CHECK(!rc && exists(path) && !exists(tmp) && got.docs[0] == 1 && got.tokens[0] == 3 &&
		      got.version == 1 && !got.has_mask,
	      "dataset/atomic/finish_renames", "rc %d %s", rc, e.msg);
	/* a token outside the vocabulary is refused, and nothing is published */
	char bad[128];
	snprintf(bad, sizeof bad, "%s/badtoken.h5", dir);
	int big[2] = {1, 50};
	rc = tokens_create(&w, bad, &m, &o, &e);
	if (!rc && !(rc = tokens_add_doc(w, big, 2, &e)))
		rc = tokens_finish(w, NULL, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "outside the vocabulary") && !exists(bad),
	      "dataset/writer/token_outside_vocab", "rc %d %s", rc, e.msg);
	o.val_fraction = 1.0;
	rc = tokens_create(&w, bad, &m, &o, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "[0, 1)"), "dataset/writer/bad_fraction", "rc %d %s",
	      rc, e.msg);
	o.val_fraction = 0;
	char nodir[128];
	snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.h5", dir);
	rc = tokens_create(&w, nodir, &m, &o, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "x.h5") && strstr(e.msg, "No such file"),
	      "dataset/writer/unwritable", "rc %d %s", rc, e.msg);
}

/* ---- damaged files ---- */

static void copy_file(const char *from, const char *to)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, a)) > 0)
		fwrite(buf, 1, n, b);
	fclose(a);
	fclose(b);
}

static void expect_open_error(const char *name, const char *path, const char *pattern)
{
	tokens_file *f = NULL;
	pp_err e = {0};
	int rc = tokens_open(&f, path, &e);
	printf("%s: %s\n", name, e.msg);
	CHECK(rc == PP_ERUNTIME && !strncmp(e.msg, path, strlen(path)) &&
		      strstr(e.msg + strlen(path), pattern),
	      name, "rc %d, message '%s' (wanted the path and '%s')", rc, e.msg, pattern);
	tokens_close(f);
}

/* Runs edit on an HDF5 copy of the good file. */
static void edit_copy(const char *good, const char *path, void (*edit)(hid_t))
{
	copy_file(good, path);
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	edit(f);
	H5Fclose(f);
}

static void set_version(hid_t f, int64_t v)
{
	hid_t a = H5Aopen(f, "version", H5P_DEFAULT);
	H5Awrite(a, H5T_NATIVE_INT64, &v);
	H5Aclose(a);
}
static void set_version_2(hid_t f) { set_version(f, 2); }
static void set_version_3(hid_t f) { set_version(f, 3); }

static void set_format(hid_t f)
{
	H5Adelete(f, "format");
	hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
	H5Tset_size(t, H5T_VARIABLE);
	const char *v = "pp-checkpoint";
	hid_t a = H5Acreate2(f, "format", t, sp, H5P_DEFAULT, H5P_DEFAULT);
	H5Awrite(a, t, &v);
	H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
}

static void drop_val(hid_t f) { H5Ldelete(f, "val", H5P_DEFAULT); }
static void drop_format(hid_t f) { H5Adelete(f, "format"); }
static void drop_offsets(hid_t f) { H5Ldelete(f, "train/doc_offsets", H5P_DEFAULT); }

static void wrong_count(hid_t f)
{
	hid_t a = H5Aopen(f, "train_tokens", H5P_DEFAULT);
	uint64_t v = 5;
	H5Awrite(a, H5T_NATIVE_UINT64, &v);
	H5Aclose(a);
}

static void wrong_type(hid_t f)
{
	H5Ldelete(f, "val/tokens", H5P_DEFAULT);
	hsize_t n = 0;
	hid_t sp = H5Screate_simple(1, &n, NULL);
	hid_t d = H5Dcreate2(f, "val/tokens", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
			     H5P_DEFAULT);
	H5Dclose(d);
	H5Sclose(sp);
}

static void short_mask(hid_t f)
{
	H5Ldelete(f, "train/loss_mask", H5P_DEFAULT);
	hsize_t n = 3;
	hid_t sp = H5Screate_simple(1, &n, NULL);
	uint8_t v[3] = {1, 1, 1};
	hid_t d = H5Dcreate2(f, "train/loss_mask", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT,
			     H5P_DEFAULT);
	H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
	H5Dclose(d);
	H5Sclose(sp);
}

static void mask_value_7(hid_t f)
{
	hid_t d = H5Dopen2(f, "val/loss_mask", H5P_DEFAULT);
	hsize_t start = 1, count = 1;
	hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
	uint8_t v = 7;
	H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
	H5Dwrite(d, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, &v);
	H5Sclose(ms);
	H5Sclose(fs);
	H5Dclose(d);
}

static void test_damage(void)
{
	char good[128], path[128];
	snprintf(good, sizeof good, "%s/good.h5", dir);
	pp_err e = {0};
	if (write_docs(good, 40, 500, 0.2, 3, 16, 0, &e)) {
		CHECK(0, "dataset/damage/setup", "%s", e.msg);
		return;
	}
	struct stat st;
	stat(good, &st);

	snprintf(path, sizeof path, "%s/d1.h5", dir);
	copy_file(good, path);
	if (truncate(path, st.st_size / 2) == 0)
		expect_open_error("dataset/damage/truncated", path, "truncated");

	snprintf(path, sizeof path, "%s/d2.h5", dir);
	copy_file(good, path);
	int fd = open(path, O_WRONLY);
	if (pwrite(fd, "\xff\xff\xff\xff", 4, 0) == 4) /* the HDF5 signature */
		expect_open_error("dataset/damage/flipped_signature", path, "not a readable HDF5");
	close(fd);

	/* bytes of the superblock after the signature: its checksum catches them */
	snprintf(path, sizeof path, "%s/d3.h5", dir);
	copy_file(good, path);
	fd = open(path, O_RDWR);
	unsigned char sb[48];
	if (pread(fd, sb, sizeof sb, 0) == (ssize_t)sizeof sb) {
		for (int i = 12; i < 20; i++)
			sb[i] ^= 0x5a;
		if (pwrite(fd, sb, sizeof sb, 0) == (ssize_t)sizeof sb)
			expect_open_error("dataset/damage/flipped_superblock", path, "HDF5");
	}
	close(fd);

	snprintf(path, sizeof path, "%s/d4.h5", dir);
	FILE *g = fopen(path, "w");
	fputs("this is not an HDF5 file at all\n", g);
	fclose(g);
	expect_open_error("dataset/damage/not_hdf5", path, "not a readable HDF5");

	snprintf(path, sizeof path, "%s/d5.h5", dir);
	edit_copy(good, path, set_version_3);
	expect_open_error("dataset/damage/wrong_version", path,
			  "version 3; this pp reads versions 1 to 2");
	snprintf(path, sizeof path, "%s/d5b.h5", dir);
	edit_copy(good, path, set_version_2);
	expect_open_error("dataset/damage/version_2_without_mask", path,
			  "missing dataset /train/loss_mask");

	snprintf(path, sizeof path, "%s/d6.h5", dir);
	edit_copy(good, path, set_format);
	expect_open_error("dataset/damage/wrong_format", path,
			  "'pp-checkpoint', expected 'pp-tokens'");

	snprintf(path, sizeof path, "%s/d7.h5", dir);
	edit_copy(good, path, drop_format);
	expect_open_error("dataset/damage/no_format", path, "not a pp-tokens dataset");

	snprintf(path, sizeof path, "%s/d8.h5", dir);
	edit_copy(good, path, drop_val);
	expect_open_error("dataset/damage/missing_group", path, "missing group /val");

	snprintf(path, sizeof path, "%s/d9.h5", dir);
	edit_copy(good, path, drop_offsets);
	expect_open_error("dataset/damage/missing_dataset", path,
			  "missing dataset /train/doc_offsets");

	snprintf(path, sizeof path, "%s/d10.h5", dir);
	edit_copy(good, path, wrong_count);
	expect_open_error("dataset/damage/wrong_shape", path, "train_tokens says 5");

	snprintf(path, sizeof path, "%s/d11.h5", dir);
	edit_copy(good, path, wrong_type);
	expect_open_error("dataset/damage/wrong_type", path, "/val/tokens is not of type uint32");

	char masked[128];
	snprintf(masked, sizeof masked, "%s/mask.h5", dir); /* test_mask's */
	snprintf(path, sizeof path, "%s/d12.h5", dir);
	edit_copy(masked, path, short_mask);
	expect_open_error("dataset/damage/mask_length", path,
			  "/train/loss_mask has 3 elements but attribute train_tokens says");
	snprintf(path, sizeof path, "%s/d13.h5", dir);
	edit_copy(masked, path, mask_value_7);
	tokens_file *f = NULL;
	uint8_t mk[4];
	int rc = tokens_open(&f, path, &e);
	if (!rc)
		rc = tokens_read_mask(f, TOKENS_VAL, 0, 4, mk, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, path) && strstr(e.msg, "/val/loss_mask[1] is 7"),
	      "dataset/damage/mask_value", "rc %d %s", rc, e.msg);
	tokens_close(f);
	f = NULL;
	snprintf(path, sizeof path, "%s/missing.h5", dir);
	rc = tokens_open(&f, path, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, path) && strstr(e.msg, "No such file"),
	      "dataset/damage/missing_file", "rc %d %s", rc, e.msg);
}

/* ---- text documents ---- */

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

/* All documents of paths joined as "[doc]" */
static int read_docs(char *const *paths, int n, docs_mode mode, const char *sep, size_t max,
		     char *out, size_t cap, pp_err *e)
{
	docs_reader *r;
	int rc = docs_open(&r, paths, n, mode, sep, max, e);
	if (rc)
		return rc;
	out[0] = 0;
	for (;;) {
		const char *t;
		size_t len;
		bool got;
		if ((rc = docs_next(r, &t, &len, &got, e)) || !got)
			break;
		snprintf(out + strlen(out), cap - strlen(out), "[%.*s]", (int)len, t);
	}
	docs_close(r);
	return rc;
}

static void test_docs(void)
{
	char a[128], b[128], c[128], out[4096];
	snprintf(a, sizeof a, "%s/a.txt", dir);
	snprintf(b, sizeof b, "%s/b.txt", dir);
	snprintf(c, sizeof c, "%s/empty.txt", dir);
	write_text(a, "one\ntwo\n\n---\nthree\n");
	write_text(b, "four\n---\n---\nfive");
	write_text(c, "");
	char *paths[] = {a, c, b};
	pp_err e = {0};
	int rc = read_docs(paths, 3, DOCS_PER_FILE, NULL, 0, out, sizeof out, &e);
	CHECK(!rc && !strcmp(out, "[one\ntwo\n\n---\nthree\n][four\n---\n---\nfive]"),
	      "docs/per_file", "rc %d: %s", rc, rc ? e.msg : out);
	rc = read_docs(paths, 3, DOCS_PER_LINE, NULL, 0, out, sizeof out, &e);
	CHECK(!rc && !strcmp(out, "[one][two][---][three][four][---][---][five]"), "docs/per_line",
	      "rc %d: %s", rc, rc ? e.msg : out);
	rc = read_docs(paths, 3, DOCS_SEPARATOR, "---", 0, out, sizeof out, &e);
	CHECK(!rc && !strcmp(out, "[one\ntwo\n\n][three\n][four\n][five]"), "docs/separator",
	      "rc %d: %s", rc, rc ? e.msg : out);
	/* cutting: after the last newline within the limit, else at a UTF-8
	 * boundary (the 3-byte character is never split) */
	write_text(a, "abc\ndefgh\nij");
	rc = read_docs(paths, 1, DOCS_PER_FILE, NULL, 8, out, sizeof out, &e);
	CHECK(!rc && !strcmp(out, "[abc\n][defgh\nij]"), "docs/cut_at_newline", "rc %d: %s", rc,
	      rc ? e.msg : out);
	write_text(a, "abcdef\xe2\x82\xacxyz");
	rc = read_docs(paths, 1, DOCS_PER_FILE, NULL, 8, out, sizeof out, &e);
	CHECK(!rc && !strcmp(out, "[abcdef][\xe2\x82\xacxyz]"), "docs/cut_at_utf8", "rc %d: %s", rc,
	      rc ? e.msg : out);
	/* a long input read in several blocks stays whole */
	char big_path[128];
	snprintf(big_path, sizeof big_path, "%s/big.txt", dir);
	FILE *f = fopen(big_path, "w");
	size_t lines = 300000, total = 0; /* ~3.4 MB, beyond one 1 MiB block */
	for (size_t i = 0; i < lines; i++)
		total += (size_t)fprintf(f, "line %zu\n", i);
	fclose(f);
	docs_reader *r;
	char *bp[] = {big_path};
	size_t n_docs = 0, bytes = 0;
	bool ok = !docs_open(&r, bp, 1, DOCS_PER_LINE, NULL, 0, &e);
	for (bool got = true; ok && got;) {
		const char *t;
		size_t len;
		ok = !docs_next(r, &t, &len, &got, &e);
		if (got) {
			char want[32];
			snprintf(want, sizeof want, "line %zu", n_docs);
			ok = len == strlen(want) && !memcmp(t, want, len);
			n_docs++;
			bytes += len + 1;
		}
	}
	CHECK(ok && n_docs == lines && bytes == total && docs_bytes_read(r) == total &&
		      docs_bytes_total(r) == (int64_t)total,
	      "docs/many_blocks", "ok %d docs %zu bytes %zu", ok, n_docs, bytes);
	docs_close(r);

	char missing[128];
	snprintf(missing, sizeof missing, "%s/nope.txt", dir);
	char *mp[] = {a, missing};
	rc = docs_open(&r, mp, 2, DOCS_PER_FILE, NULL, 0, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "nope.txt"), "docs/missing_input", "rc %d %s", rc,
	      e.msg);
	char *dp[] = {dir};
	rc = docs_open(&r, dp, 1, DOCS_PER_FILE, NULL, 0, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "directory"), "docs/directory_input", "rc %d %s", rc,
	      e.msg);
}

int main(void)
{
	snprintf(dir, sizeof dir, "/tmp/pp-test-dataset-XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_round_trip(0);
	test_round_trip(4);
	test_split_rule();
	test_atomic();
	test_mask();
	test_damage();
	test_docs();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd))
		printf("could not remove %s\n", dir);
	TH_EXIT();
}
