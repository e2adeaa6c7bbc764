/* pp-tokens datasets (checkpoints-format/tokens.md): writer, validating
 * reader, and the text-document reader behind pp-tokenize.
 *
 * Every entry point that touches HDF5 quiets its error printing and reports
 * its own message naming the file, group or attribute at fault. */
#include "dataset.h"
#include "../base/fsutil.h"
#include "../base/h5util.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/rng.h"
#include "../config/config.h"

const char *const tokens_split_name[TOKENS_NSPLITS] = {"train", "val"};

/* ---------------------------------------------------------------- HDF5 */

static void h5_close(hid_t *id, herr_t (*closer)(hid_t))
{
	if (*id >= 0)
		closer(*id);
	*id = -1;
}

static bool attr_put_i64(hid_t obj, const char *name, int64_t v)
{
	return h5u_attr_put_i64(obj, name, 0, &v);
}

static bool attr_put_u64(hid_t obj, const char *name, uint64_t v)
{
	return h5u_attr_put(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, &v);
}

/* Reads attribute name of obj as described; returns NULL on success or
 * what is wrong with it ("missing", "not an integer", ...). */
static const char *attr_get_int(hid_t obj, const char *name, bool is_unsigned, void *out)
{
	if (H5Aexists(obj, name) <= 0)
		return "missing";
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0)
		return "unreadable";
	hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
	const char *why = NULL;
	if (H5Tget_class(t) != H5T_INTEGER)
		why = "not an integer";
	else if (H5Sget_simple_extent_npoints(sp) != 1)
		why = "not a single value";
	else if (!h5u_ok(H5Aread(a, is_unsigned ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, out)))
		why = "out of range or unreadable";
	H5Sclose(sp);
	H5Tclose(t);
	H5Aclose(a);
	return why;
}

/* A string attribute, scalar or a 1-d array of strings (fixed or variable
 * length, any cset); *out gets malloc'd copies. */
static const char *attr_get_strs(hid_t obj, const char *name, char ***out, int *n)
{
	*out = NULL;
	*n = 0;
	if (H5Aexists(obj, name) <= 0)
		return "missing";
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0)
		return "unreadable";
	hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
	const char *why = NULL;
	hssize_t count = H5Sget_simple_extent_npoints(sp);
	if (H5Tget_class(ft) != H5T_STRING) {
		why = "not a string";
	} else if (H5Sget_simple_extent_ndims(sp) > 1 || count < 0 || count > (1 << 24)) {
		why = "not a string or a 1-d array of strings";
	} else if (H5Tis_variable_str(ft) > 0) {
		hid_t mt = H5Tcopy(H5T_C_S1);
		H5Tset_size(mt, H5T_VARIABLE);
		H5Tset_cset(mt, H5Tget_cset(ft));
		char **v = calloc((size_t)count + 1, sizeof *v);
		if (!h5u_ok(H5Aread(a, mt, v))) {
			why = "unreadable";
		} else {
			*out = calloc((size_t)count + 1, sizeof **out);
			for (hssize_t i = 0; i < count; i++)
				(*out)[i] = strdup(v[i] ? v[i] : "");
			*n = (int)count;
			H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
		}
		free(v);
		H5Tclose(mt);
	} else {
		size_t sz = H5Tget_size(ft);
		char *v = calloc((size_t)count * sz + 1, 1);
		if (!h5u_ok(H5Aread(a, ft, v))) {
			why = "unreadable";
		} else {
			*out = calloc((size_t)count + 1, sizeof **out);
			for (hssize_t i = 0; i < count; i++)
				(*out)[i] = strndup(v + (size_t)i * sz, sz);
			*n = (int)count;
		}
		free(v);
	}
	H5Sclose(sp);
	H5Tclose(ft);
	H5Aclose(a);
	return why;
}

static void free_strs(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void tokens_info_free(tokens_info *m)
{
	if (!m)
		return;
	free_strs(m->sources, m->n_sources);
	m->sources = NULL;
	m->n_sources = 0;
}

int tokens_split_of(double val_fraction, uint64_t seed, uint64_t doc)
{
	return rng_uniform(rng_key(seed, "pp-tokens/split"), doc) < val_fraction ? TOKENS_VAL
										 : TOKENS_TRAIN;
}

/* ---------------------------------------------------------------- writer */

typedef struct {
	hid_t g, tok, off, mask;
	uint32_t *buf; /* (chunk) tokens not yet in the file */
	uint8_t *mbuf; /* (chunk) their loss mask, once the dataset has one */
	size_t nbuf;
	uint64_t *obuf; /* (PP_TOKENS_OFFSETS_CHUNK) doc offsets not yet in the file */
	size_t nobuf;
	uint64_t tok_written, off_written; /* elements in the file */
	uint64_t docs, tokens;             /* totals, buffered included */
} split_writer;

struct tokens_writer {
	char path[PP_PATH_MAX], tmp[PP_PATH_MAX + 64];
	hid_t f;
	tokens_write_opts o;
	int64_t vocab;
	split_writer s[TOKENS_NSPLITS];
	int *held;          /* the last document added, not yet assigned to a split */
	uint8_t *held_mask; /* its mask, when it came with one */
	size_t n_held, held_cap;
	bool has_held, held_masked;
	bool masked;      /* the dataset has a loss mask (version 2) */
	uint64_t n_added; /* documents added, the held one included */
};

static hid_t create_1d(hid_t g, const char *name, hid_t type, size_t chunk, int deflate)
{
	hsize_t zero = 0, unlimited = H5S_UNLIMITED, c = chunk;
	hid_t sp = H5Screate_simple(1, &zero, &unlimited), dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_chunk(dcpl, 1, &c);
	H5Pset_obj_track_times(dcpl, false);
	if (deflate > 0) {
		H5Pset_shuffle(dcpl);
		H5Pset_deflate(dcpl, (unsigned)deflate);
	}
	hid_t d = H5Dcreate2(g, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	H5Pclose(dcpl);
	H5Sclose(sp);
	return d;
}

/* Appends n elements of mtype at offset `at` of a 1-d extendible dataset. */
static bool append_1d(hid_t d, hid_t mtype, uint64_t at, size_t n, const void *v)
{
	if (!n)
		return true;
	hsize_t size = at + n, start = at, count = n;
	if (!h5u_ok(H5Dset_extent(d, &size)))
		return false;
	hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
	bool ok = h5u_ok(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL)) &&
		  h5u_ok(H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, v));
	H5Sclose(ms);
	H5Sclose(fs);
	return ok;
}

static int write_failed(tokens_writer *w, const char *what, pp_err *e)
{
	return pp_errorf(e, PP_ERUNTIME, "cannot write %s (%s): %s", w->path, what, h5u_reason());
}

static int flush_tokens(tokens_writer *w, split_writer *s, pp_err *e)
{
	if (!append_1d(s->tok, H5T_NATIVE_UINT32, s->tok_written, s->nbuf, s->buf))
		return write_failed(w, "tokens", e);
	if (w->masked && !append_1d(s->mask, H5T_NATIVE_UINT8, s->tok_written, s->nbuf, s->mbuf))
		return write_failed(w, "loss_mask", e);
	s->tok_written += s->nbuf;
	s->nbuf = 0;
	return 0;
}

static int flush_offsets(tokens_writer *w, split_writer *s, pp_err *e)
{
	if (!append_1d(s->off, H5T_NATIVE_UINT64, s->off_written, s->nobuf, s->obuf))
		return write_failed(w, "doc_offsets", e);
	s->off_written += s->nobuf;
	s->nobuf = 0;
	return 0;
}

static int push_offset(tokens_writer *w, split_writer *s, uint64_t v, pp_err *e)
{
	s->obuf[s->nobuf++] = v;
	return s->nobuf == PP_TOKENS_OFFSETS_CHUNK ? flush_offsets(w, s, e) : 0;
}

/* The first document with a mask: every split gets its loss_mask, 1 for
 * the tokens it holds so far, and the file becomes version 2. */
static int start_mask(tokens_writer *w, pp_err *e)
{
	size_t chunk = w->o.chunk;
	uint8_t *ones = malloc(chunk);
	int rc = ones ? 0 : pp_errorf(e, PP_ERUNTIME, "out of memory for a chunk of %zu", chunk);
	if (ones)
		memset(ones, 1, chunk);
	for (int k = 0; k < TOKENS_NSPLITS && !rc; k++) {
		split_writer *s = &w->s[k];
		if (!(s->mbuf = malloc(chunk)))
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory for a chunk of %zu", chunk);
		else if (!h5u_ok(s->mask = create_1d(s->g, "loss_mask", H5T_STD_U8LE, chunk,
						     w->o.deflate)))
			rc = write_failed(w, "loss_mask", e);
		for (uint64_t at = 0; !rc && at < s->tok_written; at += chunk) {
			size_t n = s->tok_written - at < chunk ? (size_t)(s->tok_written - at)
							       : chunk;
			if (!append_1d(s->mask, H5T_NATIVE_UINT8, at, n, ones))
				rc = write_failed(w, "loss_mask", e);
		}
		if (!rc)
			memset(s->mbuf, 1, s->nbuf);
	}
	free(ones);
	if (!rc && (!h5u_ok(H5Adelete(w->f, "version")) || !attr_put_i64(w->f, "version", 2)))
		rc = write_failed(w, "version", e);
	if (!rc)
		w->masked = true;
	return rc;
}

static int write_doc(tokens_writer *w, int split, const int *ids, const uint8_t *mask, size_t n,
		     pp_err *e)
{
	split_writer *s = &w->s[split];
	size_t chunk = w->o.chunk;
	int rc = mask && !w->masked ? start_mask(w, e) : 0;
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= w->vocab)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: token id %d of document %llu is outside the vocabulary "
				"[0, %lld)",
				w->path, ids[i], (unsigned long long)(w->n_added - 1),
				(long long)w->vocab);
		if (mask && mask[i] > 1)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: loss mask value %u of document %llu is not 0 or 1",
					 w->path, mask[i], (unsigned long long)(w->n_added - 1));
		if (w->masked)
			s->mbuf[s->nbuf] = mask ? mask[i] : 1;
		s->buf[s->nbuf++] = (uint32_t)ids[i];
		if (s->nbuf == chunk) {
			int rc = flush_tokens(w, s, e);
			if (rc)
				return rc;
		}
	}
	s->tokens += n;
	s->docs++;
	return push_offset(w, s, s->tokens, e);
}

static int write_meta(tokens_writer *w, const tokens_info *m, pp_err *e)
{
	hid_t f = w->f;
	hid_t st = h5u_string_type(H5T_CSET_UTF8);
	const char *one = "-";
	hsize_t n = m->n_sources > 0 ? (hsize_t)m->n_sources : 1;
	bool ok = h5u_attr_put_str(f, "format", PP_TOKENS_FORMAT) &&
		  attr_put_i64(f, "version", 1) && /* 2 once a document has a mask */
		  h5u_attr_put_str(f, "tokenizer_fingerprint", m->fingerprint) &&
		  h5u_attr_put_str(f, "tokenizer_kind", m->kind) &&
		  attr_put_i64(f, "vocab_size", m->vocab_size) &&
		  attr_put_i64(f, "bos_id", m->bos_id) && attr_put_i64(f, "eos_id", m->eos_id) &&
		  h5u_attr_put(f, "sources", st, st, n,
			       m->n_sources > 0 ? (const void *)m->sources : &one);
	H5Tclose(st);
	return ok ? 0 : write_failed(w, "attributes", e);
}

static void writer_free(tokens_writer *w)
{
	for (int k = 0; k < TOKENS_NSPLITS; k++) {
		split_writer *s = &w->s[k];
		h5_close(&s->tok, H5Dclose);
		h5_close(&s->off, H5Dclose);
		h5_close(&s->mask, H5Dclose);
		h5_close(&s->g, H5Gclose);
		free(s->buf);
		free(s->mbuf);
		free(s->obuf);
	}
	h5_close(&w->f, H5Fclose);
	free(w->held);
	free(w->held_mask);
	free(w);
}

void tokens_abort(tokens_writer *w)
{
	if (!w)
		return;
	char tmp[sizeof w->tmp];
	memcpy(tmp, w->tmp, sizeof tmp);
	writer_free(w);
	unlink(tmp);
}

int tokens_create(tokens_writer **out, const char *path, const tokens_info *m,
		  const tokens_write_opts *o, pp_err *e)
{
	h5u_quiet();
	*out = NULL;
	if (!(o->val_fraction >= 0 && o->val_fraction < 1))
		return pp_errorf(e, PP_EUSAGE, "validation fraction %g is not in [0, 1)",
				 o->val_fraction);
	if (o->deflate < 0 || o->deflate > 9)
		return pp_errorf(e, PP_EUSAGE, "deflate level %d is not in 0..9", o->deflate);
	if (m->vocab_size < 1 || m->vocab_size > (int64_t)UINT32_MAX + 1)
		return pp_errorf(e, PP_EUSAGE, "vocabulary size %lld does not fit uint32 tokens",
				 (long long)m->vocab_size);
	struct stat st;
	if (!stat(path, &st) && S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_EUSAGE, "output %s is a directory", path);
	tokens_writer *w = calloc(1, sizeof *w);
	w->f = -1;
	for (int k = 0; k < TOKENS_NSPLITS; k++)
		w->s[k].g = w->s[k].tok = w->s[k].off = w->s[k].mask = -1;
	w->o = *o;
	if (!w->o.chunk)
		w->o.chunk = PP_TOKENS_CHUNK;
	w->vocab = m->vocab_size;
	if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path ||
	    fs_tmp_name(path, w->tmp, sizeof w->tmp, NULL)) {
		free(w);
		return pp_errorf(e, PP_EUSAGE, "output path too long: %s", path);
	}
	/* create it ourselves first: a clean system error for a bad directory */
	int fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		int rc = pp_errorf(e, PP_ERUNTIME, "cannot create %s (writing %s first): %s", path,
				   w->tmp, strerror(errno));
		free(w);
		return rc;
	}
	close(fd);
	/* 1.8 object formats: checksummed superblock and object headers */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
	/* no modification times in the object headers: the same input gives
	 * the same bytes */
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
	H5Pset_obj_track_times(fcpl, false);
	w->f = H5Fcreate(w->tmp, H5F_ACC_TRUNC, fcpl, fapl);
	bool created = h5u_ok(w->f); /* before any other call clears the error stack */
	H5Pclose(fcpl);
	H5Pclose(fapl);
	if (!created) {
		int rc = pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", w->tmp, h5u_reason());
		tokens_abort(w);
		return rc;
	}
	int rc = write_meta(w, m, e);
	for (int k = 0; k < TOKENS_NSPLITS && !rc; k++) {
		split_writer *s = &w->s[k];
		s->buf = malloc(w->o.chunk * sizeof *s->buf);
		s->obuf = malloc(PP_TOKENS_OFFSETS_CHUNK * sizeof *s->obuf);
		if (!s->buf || !s->obuf) {
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory for a chunk of %zu tokens",
				       w->o.chunk);
			break;
		}
		hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
		H5Pset_obj_track_times(gcpl, false);
		s->g = H5Gcreate2(w->f, tokens_split_name[k], H5P_DEFAULT, gcpl, H5P_DEFAULT);
		H5Pclose(gcpl);
		if (!h5u_ok(s->g) ||
		    !h5u_ok(s->tok = create_1d(s->g, "tokens", H5T_STD_U32LE, w->o.chunk,
					       w->o.deflate)) ||
		    !h5u_ok(s->off = create_1d(s->g, "doc_offsets", H5T_STD_U64LE,
					       PP_TOKENS_OFFSETS_CHUNK, w->o.deflate)))
			rc = write_failed(w, tokens_split_name[k], e);
		else
			rc = push_offset(w, s, 0, e);
	}
	if (rc) {
		tokens_abort(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* Assigns the held document to split and writes it. */
static int write_held(tokens_writer *w, int split, pp_err *e)
{
	w->has_held = false;
	return write_doc(w, split, w->held, w->held_masked ? w->held_mask : NULL, w->n_held, e);
}

int tokens_add_doc(tokens_writer *w, const int *ids, size_t n, pp_err *e)
{
	return tokens_add_masked(w, ids, NULL, n, e);
}

int tokens_add_masked(tokens_writer *w, const int *ids, const uint8_t *mask, size_t n, pp_err *e)
{
	if (!n)
		return 0;
	/* the previous document is now known not to be the last */
	if (w->has_held) {
		int rc = write_held(
			w, tokens_split_of(w->o.val_fraction, w->o.seed, w->n_added - 1), e);
		if (rc)
			return rc;
	}
	if (n > w->held_cap) {
		int *p = realloc(w->held, n * sizeof *p);
		uint8_t *m = p ? realloc(w->held_mask, n) : NULL;
		if (p)
			w->held = p;
		if (!m)
			return pp_errorf(e, PP_ERUNTIME,
					 "out of memory for a document of %zu tokens", n);
		w->held_mask = m;
		w->held_cap = n;
	}
	memcpy(w->held, ids, n * sizeof *ids);
	if ((w->held_masked = mask != NULL))
		memcpy(w->held_mask, mask, n);
	w->n_held = n;
	w->has_held = true;
	w->n_added++;
	return 0;
}

static int finish_body(tokens_writer *w, pp_err *e)
{
	int rc = 0;
	if (w->has_held) {
		int split = tokens_split_of(w->o.val_fraction, w->o.seed, w->n_added - 1);
		if (w->o.val_fraction > 0 && w->n_added >= 2) {
			if (!w->s[TOKENS_VAL].docs)
				split = TOKENS_VAL;
			else if (!w->s[TOKENS_TRAIN].docs)
				split = TOKENS_TRAIN;
		}
		rc = write_held(w, split, e);
	}
	for (int k = 0; k < TOKENS_NSPLITS && !rc; k++) {
		split_writer *s = &w->s[k];
		char name[64];
		rc = flush_tokens(w, s, e);
		if (!rc)
			rc = flush_offsets(w, s, e);
		snprintf(name, sizeof name, "%s_documents", tokens_split_name[k]);
		if (!rc && !attr_put_u64(w->f, name, s->docs))
			rc = write_failed(w, name, e);
		snprintf(name, sizeof name, "%s_tokens", tokens_split_name[k]);
		if (!rc && !attr_put_u64(w->f, name, s->tokens))
			rc = write_failed(w, name, e);
	}
	/* flush first, so that a full disk shows here and not in the close */
	if (!rc && !h5u_ok(H5Fflush(w->f, H5F_SCOPE_LOCAL)))
		rc = write_failed(w, "flush", e);
	return rc;
}

int tokens_finish(tokens_writer *w, tokens_info *out, pp_err *e)
{
	h5u_quiet();
	int rc = finish_body(w, e);
	if (out) {
		out->version = w->masked ? 2 : 1;
		out->has_mask = w->masked;
	}
	for (int k = 0; k < TOKENS_NSPLITS; k++) {
		if (out) {
			out->docs[k] = w->s[k].docs;
			out->tokens[k] = w->s[k].tokens;
		}
		h5_close(&w->s[k].tok, H5Dclose);
		h5_close(&w->s[k].off, H5Dclose);
		h5_close(&w->s[k].mask, H5Dclose);
		h5_close(&w->s[k].g, H5Gclose);
	}
	hid_t f = w->f;
	w->f = -1;
	if (!h5u_ok(H5Fclose(f)) && !rc)
		rc = write_failed(w, "close", e);
	if (!rc)
		rc = fs_fsync_path(w->tmp, e);
	if (!rc)
		rc = fs_rename_durable(w->tmp, w->path, e);
	if (rc)
		tokens_abort(w); /* once renamed, the temporary name is gone: nothing to remove */
	else
		writer_free(w);
	return rc;
}

/* ---------------------------------------------------------------- reader */

struct tokens_file {
	char path[PP_PATH_MAX];
	hid_t f, g[TOKENS_NSPLITS], tok[TOKENS_NSPLITS], off[TOKENS_NSPLITS], mask[TOKENS_NSPLITS];
	tokens_info info;
};

void tokens_close(tokens_file *f)
{
	if (!f)
		return;
	for (int k = 0; k < TOKENS_NSPLITS; k++) {
		h5_close(&f->tok[k], H5Dclose);
		h5_close(&f->off[k], H5Dclose);
		h5_close(&f->mask[k], H5Dclose);
		h5_close(&f->g[k], H5Gclose);
	}
	h5_close(&f->f, H5Fclose);
	tokens_info_free(&f->info);
	free(f);
}

const tokens_info *tokens_get_info(const tokens_file *f) { return &f->info; }

__attribute__((format(printf, 3, 4))) static int bad(const tokens_file *f, pp_err *e,
						     const char *fmt, ...)
{
	char what[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return pp_errorf(e, PP_ERUNTIME, "%s: %s", f->path, what);
}

static int read_1d(hid_t d, hid_t mtype, uint64_t at, size_t n, void *out)
{
	if (!n)
		return 0;
	hsize_t start = at, count = n;
	hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
	bool ok = h5u_ok(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL)) &&
		  h5u_ok(H5Dread(d, mtype, ms, fs, H5P_DEFAULT, out));
	H5Sclose(ms);
	H5Sclose(fs);
	return ok ? 0 : -1;
}

/* dataset SPLIT/name: 1-d, unsigned integer of `bytes` bytes, `len` long */
static int check_dataset(tokens_file *f, int k, const char *name, hid_t *out, size_t bytes,
			 uint64_t len, const char *len_what, pp_err *e)
{
	const char *split = tokens_split_name[k];
	if (H5Lexists(f->g[k], name, H5P_DEFAULT) <= 0)
		return bad(f, e, "missing dataset /%s/%s", split, name);
	/* unfiltered data is read straight from the file (a cached 4 MiB chunk
	 * per random window would multiply the reads); compressed data goes
	 * through a cache of a few chunks */
	hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
	H5Pset_chunk_cache(dapl, 0, 0, 1.0);
	hid_t d = H5Dopen2(f->g[k], name, dapl);
	if (!h5u_ok(d)) {
		char why[256];
		snprintf(why, sizeof why, "%s", h5u_reason());
		H5Pclose(dapl);
		return bad(f, e, "cannot open /%s/%s: %s", split, name, why);
	}
	hid_t dcpl = H5Dget_create_plist(d);
	bool filtered = dcpl >= 0 && H5Pget_nfilters(dcpl) > 0;
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (filtered) {
		H5Dclose(d);
		H5Pset_chunk_cache(dapl, 521, 16 << 20, 1.0);
		d = H5Dopen2(f->g[k], name, dapl);
	}
	bool opened = h5u_ok(d);
	H5Pclose(dapl);
	*out = d;
	if (!opened)
		return bad(f, e, "cannot open /%s/%s: %s", split, name, h5u_reason());
	hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
	int rank = H5Sget_simple_extent_ndims(sp);
	hsize_t dims = 0;
	if (rank == 1)
		H5Sget_simple_extent_dims(sp, &dims, NULL);
	bool int_ok = H5Tget_class(t) == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE &&
		      H5Tget_size(t) == bytes;
	H5Sclose(sp);
	H5Tclose(t);
	if (!int_ok)
		return bad(f, e, "/%s/%s is not of type uint%zu", split, name, 8 * bytes);
	if (rank != 1)
		return bad(f, e, "/%s/%s has %d dimensions, expected 1", split, name, rank);
	if (dims != len)
		return bad(f, e, "/%s/%s has %llu elements but %s says %llu", split, name,
			   (unsigned long long)dims, len_what, (unsigned long long)len);
	return 0;
}

static int open_split(tokens_file *f, int k, pp_err *e)
{
	const char *split = tokens_split_name[k];
	if (H5Lexists(f->f, split, H5P_DEFAULT) <= 0)
		return bad(f, e, "missing group /%s", split);
	if (!h5u_ok(f->g[k] = H5Gopen2(f->f, split, H5P_DEFAULT)))
		return bad(f, e, "cannot open group /%s: %s", split, h5u_reason());
	char what[64];
	snprintf(what, sizeof what, "attribute %s_tokens", split);
	int rc = check_dataset(f, k, "tokens", &f->tok[k], 4, f->info.tokens[k], what, e);
	snprintf(what, sizeof what, "attribute %s_documents + 1", split);
	if (!rc)
		rc = check_dataset(f, k, "doc_offsets", &f->off[k], 8, f->info.docs[k] + 1, what,
				   e);
	snprintf(what, sizeof what, "attribute %s_tokens", split);
	if (!rc && f->info.has_mask)
		rc = check_dataset(f, k, "loss_mask", &f->mask[k], 1, f->info.tokens[k], what, e);
	uint64_t ends[2];
	if (!rc && (read_1d(f->off[k], H5T_NATIVE_UINT64, 0, 1, &ends[0]) ||
		    read_1d(f->off[k], H5T_NATIVE_UINT64, f->info.docs[k], 1, &ends[1])))
		rc = bad(f, e, "cannot read /%s/doc_offsets: %s", split, h5u_reason());
	if (!rc && (ends[0] != 0 || ends[1] != f->info.tokens[k]))
		rc = bad(f, e,
			 "/%s/doc_offsets runs from %llu to %llu, expected 0 to %llu (the token "
			 "count)",
			 split, (unsigned long long)ends[0], (unsigned long long)ends[1],
			 (unsigned long long)f->info.tokens[k]);
	return rc;
}

static int read_info(tokens_file *f, pp_err *e)
{
	tokens_info *m = &f->info;
	char **s = NULL;
	int n = 0;
	const char *why = attr_get_strs(f->f, "format", &s, &n);
	if (why && !strcmp(why, "missing"))
		return bad(f, e, "not a pp-tokens dataset (no 'format' attribute at the root)");
	if (why || n != 1 || strcmp(s[0], PP_TOKENS_FORMAT)) {
		int rc = bad(f, e, "format attribute is %s%s%s, expected '%s'", why ? why : "'",
			     why ? "" : (n ? s[0] : ""), why ? "" : "'", PP_TOKENS_FORMAT);
		free_strs(s, n);
		return rc;
	}
	free_strs(s, n);
	int64_t version;
	if ((why = attr_get_int(f->f, "version", false, &version)))
		return bad(f, e, "attribute version: %s", why);
	if (version < 1 || version > PP_TOKENS_VERSION)
		return bad(f, e, "pp-tokens version %lld; this pp reads versions 1 to %d",
			   (long long)version, PP_TOKENS_VERSION);
	m->version = version;
	m->has_mask = version >= 2;

	const char *strs[] = {"tokenizer_fingerprint", "tokenizer_kind"};
	char *dst[] = {m->fingerprint, m->kind};
	size_t cap[] = {sizeof m->fingerprint, sizeof m->kind};
	for (int i = 0; i < 2; i++) {
		if ((why = attr_get_strs(f->f, strs[i], &s, &n)) || n != 1) {
			free_strs(s, n);
			return bad(f, e, "attribute %s: %s", strs[i], why ? why : "not one string");
		}
		snprintf(dst[i], cap[i], "%s", s[0]);
		free_strs(s, n);
	}
	if ((why = attr_get_strs(f->f, "sources", &m->sources, &m->n_sources)))
		return bad(f, e, "attribute sources: %s", why);
	const char *ints[] = {"vocab_size", "bos_id", "eos_id"};
	int64_t *idst[] = {&m->vocab_size, &m->bos_id, &m->eos_id};
	for (int i = 0; i < 3; i++)
		if ((why = attr_get_int(f->f, ints[i], false, idst[i])))
			return bad(f, e, "attribute %s: %s", ints[i], why);
	if (m->vocab_size < 1 || m->vocab_size > (int64_t)UINT32_MAX + 1)
		return bad(f, e, "attribute vocab_size is %lld", (long long)m->vocab_size);
	for (int i = 1; i < 3; i++)
		if (*idst[i] < -1 || *idst[i] >= m->vocab_size)
			return bad(f, e, "attribute %s %lld is outside [-1, vocab_size %lld)",
				   ints[i], (long long)*idst[i], (long long)m->vocab_size);
	for (int k = 0; k < TOKENS_NSPLITS; k++) {
		char name[64];
		snprintf(name, sizeof name, "%s_documents", tokens_split_name[k]);
		if ((why = attr_get_int(f->f, name, true, &m->docs[k])))
			return bad(f, e, "attribute %s: %s", name, why);
		snprintf(name, sizeof name, "%s_tokens", tokens_split_name[k]);
		if ((why = attr_get_int(f->f, name, true, &m->tokens[k])))
			return bad(f, e, "attribute %s: %s", name, why);
	}
	return 0;
}

/* HDF5 finds a file truncated only by comparing the end of file it stored
 * with the real size; say so plainly. */
static int open_failed(tokens_file *f, pp_err *e)
{
	struct stat st;
	if (stat(f->path, &st))
		return pp_errorf(e, PP_EUSAGE, "cannot open %s: %s", f->path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_EUSAGE, "cannot open %s: is a directory", f->path);
	const char *stored = strstr(h5u_reason(), "stored_eof = ");
	if (strstr(h5u_reason(), "truncated") && stored)
		return bad(f, e, "truncated: %lld bytes, but the file was written with %lld",
			   (long long)st.st_size, atoll(stored + strlen("stored_eof = ")));
	return bad(f, e, "not a readable HDF5 file: %s", h5u_reason());
}

int tokens_open(tokens_file **out, const char *path, pp_err *e)
{
	h5u_quiet();
	*out = NULL;
	tokens_file *f = calloc(1, sizeof *f);
	f->f = -1;
	for (int k = 0; k < TOKENS_NSPLITS; k++)
		f->g[k] = f->tok[k] = f->off[k] = f->mask[k] = -1;
	snprintf(f->path, sizeof f->path, "%s", path);
	int rc;
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
	f->f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	bool opened = h5u_ok(f->f); /* before any other call clears the error stack */
	H5Pclose(fapl);
	if (!opened)
		rc = open_failed(f, e);
	else
		rc = read_info(f, e);
	for (int k = 0; k < TOKENS_NSPLITS && !rc; k++)
		rc = open_split(f, k, e);
	if (rc) {
		tokens_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

static int check_split(const tokens_file *f, int split, pp_err *e)
{
	if (split < 0 || split >= TOKENS_NSPLITS)
		return pp_errorf(e, PP_EUSAGE, "%s: no split %d", f->path, split);
	return 0;
}

/* [first, first + n) of split's dataset d (name), of len elements, as mtype */
static int read_range(tokens_file *f, int split, hid_t d, hid_t mtype, const char *name,
		      uint64_t len, uint64_t first, size_t n, void *out, pp_err *e)
{
	if (first > len || n > len - first)
		return bad(f, e, "%s [%llu, %llu) of /%s is past its end (%llu)", name,
			   (unsigned long long)first, (unsigned long long)(first + n),
			   tokens_split_name[split], (unsigned long long)len);
	if (read_1d(d, mtype, first, n, out))
		return bad(f, e, "cannot read /%s/%s [%llu, %llu): %s", tokens_split_name[split],
			   name, (unsigned long long)first, (unsigned long long)(first + n),
			   h5u_reason());
	return 0;
}

int tokens_read(tokens_file *f, int split, uint64_t offset, size_t n, uint32_t *out, pp_err *e)
{
	h5u_quiet();
	if (check_split(f, split, e))
		return PP_EUSAGE;
	return read_range(f, split, f->tok[split], H5T_NATIVE_UINT32, "tokens",
			  f->info.tokens[split], offset, n, out, e);
}

int tokens_read_mask(tokens_file *f, int split, uint64_t offset, size_t n, uint8_t *out, pp_err *e)
{
	h5u_quiet();
	if (check_split(f, split, e))
		return PP_EUSAGE;
	if (!f->info.has_mask)
		return bad(f, e, "version %lld has no loss mask", (long long)f->info.version);
	int rc = read_range(f, split, f->mask[split], H5T_NATIVE_UINT8, "loss_mask",
			    f->info.tokens[split], offset, n, out, e);
	for (size_t i = 0; !rc && i < n; i++)
		if (out[i] > 1)
			return bad(f, e, "/%s/loss_mask[%llu] is %u, not 0 or 1",
				   tokens_split_name[split], (unsigned long long)(offset + i),
				   out[i]);
	return rc;
}

int tokens_read_offsets(tokens_file *f, int split, uint64_t first, size_t n, uint64_t *out,
			pp_err *e)
{
	h5u_quiet();
	if (check_split(f, split, e))
		return PP_EUSAGE;
	return read_range(f, split, f->off[split], H5T_NATIVE_UINT64, "doc_offsets",
			  f->info.docs[split] + 1, first, n, out, e);
}

/* --------------------------------------------------------- text documents */

#define DOCS_BLOCK ((size_t)1 << 20)

typedef struct {
	char *p;
	size_t n, cap;
} bytes;

static int bytes_add(bytes *b, const char *p, size_t n, pp_err *e)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q)
			return pp_errorf(e, PP_ERUNTIME,
					 "out of memory for a document of %zu bytes", b->n + n);
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
	return 0;
}

struct docs_reader {
	char **paths;
	int n_paths, next_path;
	int fd; /* the input being read, -1 between inputs */
	const char *name;
	docs_mode mode;
	char *sep;
	size_t sep_len, max_bytes;
	char *buf; /* (DOCS_BLOCK) input read but not consumed: [beg, end) */
	size_t beg, end;
	bool at_eof, line_start;
	bytes doc, out; /* the document being assembled; the one returned */
	uint64_t bytes_read, cut;
	int64_t total;
};

int docs_open(docs_reader **out, char *const *paths, int n, docs_mode mode, const char *separator,
	      size_t max_bytes, pp_err *e)
{
	*out = NULL;
	if (mode == DOCS_SEPARATOR && (!separator || strchr(separator, '\n')))
		return pp_errorf(e, PP_EUSAGE, "the document separator must be one line of text");
	int64_t total;
	int rc = fs_inputs(&paths, &n, &total, e);
	if (rc)
		return rc;
	docs_reader *r = calloc(1, sizeof *r);
	r->paths = calloc((size_t)n, sizeof *r->paths);
	for (int i = 0; i < n; i++)
		r->paths[i] = strdup(paths[i]);
	r->n_paths = n;
	r->fd = -1;
	r->mode = mode;
	r->sep = strdup(separator ? separator : "");
	r->sep_len = strlen(r->sep);
	r->max_bytes = max_bytes ? max_bytes : DOCS_MAX_BYTES;
	r->buf = malloc(DOCS_BLOCK);
	r->total = total;
	*out = r;
	return 0;
}

void docs_close(docs_reader *r)
{
	if (!r)
		return;
	if (r->fd > 0)
		close(r->fd);
	for (int i = 0; i < r->n_paths; i++)
		free(r->paths[i]);
	free(r->paths);
	free(r->sep);
	free(r->buf);
	free(r->doc.p);
	free(r->out.p);
	free(r);
}

uint64_t docs_bytes_read(const docs_reader *r) { return r->bytes_read; }
int64_t docs_bytes_total(const docs_reader *r) { return r->total; }
uint64_t docs_cut(const docs_reader *r) { return r->cut; }

static int open_input(docs_reader *r, pp_err *e)
{
	r->name = r->paths[r->next_path++];
	r->fd = strcmp(r->name, "-") ? open(r->name, O_RDONLY | O_CLOEXEC) : 0;
	if (r->fd < 0) {
		r->fd = -1;
		return pp_errorf(e, PP_ERUNTIME, "cannot open input %s: %s", r->name,
				 strerror(errno));
	}
	r->beg = r->end = 0;
	r->at_eof = false;
	r->line_start = true;
	return 0;
}

static void close_input(docs_reader *r)
{
	if (r->fd > 0)
		close(r->fd);
	r->fd = -1;
}

/* The next piece of the current input: a whole line when it fits in the
 * block (*nl: it ended with a newline, not counted in *n), else as much of
 * it as the block holds. *n == 0 and !*nl: the input has ended. */
static int next_piece(docs_reader *r, const char **p, size_t *n, bool *nl, pp_err *e)
{
	for (;;) {
		char *s = r->buf + r->beg, *q = memchr(s, '\n', r->end - r->beg);
		if (q || r->at_eof || (r->beg == 0 && r->end == DOCS_BLOCK)) {
			*p = s;
			*n = q ? (size_t)(q - s) : r->end - r->beg;
			*nl = q != NULL;
			r->beg += *n + *nl;
			return 0;
		}
		memmove(r->buf, s, r->end - r->beg);
		r->end -= r->beg;
		r->beg = 0;
		ssize_t got = read(r->fd, r->buf + r->end, DOCS_BLOCK - r->end);
		if (got < 0 && errno == EINTR) /* a signal the caller handles: let it act */
			return pp_errorf(e, PP_ERUNTIME, "reading input %s: interrupted", r->name);
		if (got < 0)
			return pp_errorf(e, PP_ERUNTIME, "cannot read input %s: %s", r->name,
					 strerror(errno));
		r->at_eof = got == 0;
		r->end += (size_t)got;
		r->bytes_read += (uint64_t)got;
	}
}

/* Returns the assembled document: all of it, or its first max_bytes cut
 * after a newline or at a UTF-8 boundary (the rest starts the next). */
static int emit(docs_reader *r, const char **text, size_t *len, bool *got, pp_err *e)
{
	bytes *d = &r->doc;
	if (d->n <= r->max_bytes) {
		bytes t = r->out;
		r->out = *d;
		*d = t;
		d->n = 0;
	} else {
		size_t c = r->max_bytes;
		const char *nl = memrchr(d->p, '\n', c);
		if (nl)
			c = (size_t)(nl - d->p) + 1;
		else
			while (c > 0 && ((unsigned char)d->p[c] & 0xC0) == 0x80 &&
			       r->max_bytes - c < 3)
				c--;
		r->out.n = 0;
		if (bytes_add(&r->out, d->p, c, e))
			return PP_ERUNTIME;
		memmove(d->p, d->p + c, d->n - c);
		d->n -= c;
		r->cut++;
	}
	*text = r->out.p;
	*len = r->out.n;
	*got = true;
	return 0;
}

int docs_next(docs_reader *r, const char **text, size_t *len, bool *got, pp_err *e)
{
	*got = false;
	for (;;) {
		if (r->doc.n > r->max_bytes)
			return emit(r, text, len, got, e);
		if (r->fd < 0) {
			if (r->next_path == r->n_paths)
				return r->doc.n ? emit(r, text, len, got, e) : 0;
			int rc = open_input(r, e);
			if (rc)
				return rc;
		}
		const char *p = NULL;
		size_t n = 0;
		bool nl = false;
		int rc = next_piece(r, &p, &n, &nl, e);
		if (rc)
			return rc;
		/* text never holds a NUL byte; images, archives and HDF5 files do */
		if (n && memchr(p, 0, n))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s holds NUL bytes: a binary file, not text", r->name);
		if (!n && !nl) { /* the end of an input ends a document */
			close_input(r);
			if (r->doc.n)
				return emit(r, text, len, got, e);
			continue;
		}
		bool line_start = r->line_start;
		r->line_start = nl;
		switch (r->mode) {
		case DOCS_PER_FILE:
			rc = bytes_add(&r->doc, p, n + nl, e);
			break;
		case DOCS_PER_LINE:
			rc = bytes_add(&r->doc, p, n, e);
			if (!rc && nl && r->doc.n)
				return emit(r, text, len, got, e);
			break;
		case DOCS_SEPARATOR:
			if (line_start && n == r->sep_len && !memcmp(p, r->sep, n) &&
			    (nl || r->at_eof)) {
				if (r->doc.n)
					return emit(r, text, len, got, e);
				continue;
			}
			rc = bytes_add(&r->doc, p, n + nl, e);
			break;
		}
		if (rc)
			return rc;
	}
}
