/* Hugging Face checkpoints (safetensors + config.json) as a tensorio
 * source; safetensors_write.c is the sink.
 *
 * A safetensors file: an 8-byte little-endian header length N, N bytes of
 * JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin,
 * end]}, ..., "__metadata__": {..}}, then the data section, offsets
 * relative to its start. A sharded model adds model.safetensors.index.json
 * ({"weight_map": {name: file}, "metadata": {"total_size": bytes}}).
 *
 * The reader trusts nothing in the header: every offset pair must lie in
 * the data section, match its dtype and shape and overlap no other, and
 * the tensors must be exactly pp's for the model config.json describes.
 * It reads one tensor at a time (pread, a chunk at a time when it
 * converts or transposes), so memory holds a tensor, not the model. The
 * directory's tokenizer (tokenizer.model, tokenizer.json or vocab.json,
 * whichever tok_load reads first) travels as meta.tokenizer.
 *
 * Names are pp's (= Hugging Face's), with GPT-2's differences: files may
 * omit the "transformer." prefix, Conv1D weights (attn.c_attn, attn.c_proj,
 * mlp.c_fc, mlp.c_proj) are stored (in, out), and the causal-mask buffers
 * (attn.bias, attn.masked_bias) are not weights. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/halffloat.h"
#include "../tok/tokenizer.h"
#include "fileio.h"
#include "hfconfig.h"
#include "modeltable.h"
#include "safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a little-endian host"
#endif

#define ST_MAX_HEADER ((int64_t)100 << 20) /* the safetensors library's own limit */
#define ST_MAXDIM     8
#define ST_CHUNK      ((size_t)1 << 20) /* bytes converted at a time */

const st_dtype st_dtypes[] = {
	{"F32", 4, TIO_F32}, {"F16", 2, TIO_F16}, {"BF16", 2, TIO_BF16}, {"F64", 8, TIO_F64},
	{"BOOL", 1, -1},     {"U8", 1, -1},       {"I8", 1, -1},         {"F8_E4M3", 1, -1},
	{"F8_E5M2", 1, -1},  {"I16", 2, -1},      {"U16", 2, -1},        {"I32", 4, -1},
	{"U32", 4, -1},      {"I64", 8, -1},      {"U64", 8, -1},
};
const int st_n_dtypes = (int)(sizeof st_dtypes / sizeof *st_dtypes);

int st_dtype_of_tio(tio_dtype t)
{
	for (int i = 0; i < st_n_dtypes; i++)
		if (st_dtypes[i].tio == (int)t)
			return i;
	return -1;
}

/* n elements of dtype tio at src into floats */
static void to_f32(int tio, const unsigned char *src, size_t n, float *out)
{
	for (size_t i = 0; i < n; i++) {
		uint16_t h;
		double d;
		switch (tio) {
		case TIO_F32:
			memcpy(&out[i], src + 4 * i, 4);
			break;
		case TIO_F16:
			memcpy(&h, src + 2 * i, 2);
			out[i] = f16_to_f32(h);
			break;
		case TIO_BF16:
			memcpy(&h, src + 2 * i, 2);
			out[i] = bf16_to_f32(h);
			break;
		default: /* TIO_F64 */
			memcpy(&d, src + 8 * i, 8);
			out[i] = (float)d;
		}
	}
}

/* ---- names ------------------------------------------------------------------- */

bool st_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

bool st_gpt2_conv1d(const char *name)
{
	static const char *const conv[] = {".attn.c_attn.weight", ".attn.c_proj.weight",
					   ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
	for (size_t i = 0; i < sizeof conv / sizeof *conv; i++)
		if (st_ends_with(name, conv[i]))
			return true;
	return false;
}

/* A file's name as pp's (into pp, "" when it cannot be one); *drop: a
 * buffer, not a weight (GPT-2's causal masks, old Llama files' rotary
 * frequencies). */
static void pp_name_of(const char *hf, bool gpt, char *pp, size_t n, bool *drop)
{
	*drop = false;
	int k = gpt && strncmp(hf, "transformer.", 12) && strcmp(hf, "lm_head.weight")
			? snprintf(pp, n, "transformer.%s", hf)
			: snprintf(pp, n, "%s", hf);
	if (k < 0 || (size_t)k >= n)
		pp[0] = '\0';
	if (gpt)
		*drop = st_ends_with(pp, ".attn.bias") || st_ends_with(pp, ".attn.masked_bias");
	else
		*drop = st_ends_with(pp, ".rotary_emb.inv_freq");
}

/* ---- source ------------------------------------------------------------------ */

typedef struct {
	char path[PP_PATH_MAX];
	int fd;
	int64_t size, data; /* file bytes; where the data section starts */
} st_file;

typedef struct {
	char hf[160];                             /* the name in the file */
	char pp[sizeof(((tio_tensor *)0)->name)]; /* pp's, "" when it cannot be one */
	bool drop;
	int file, dtype, ndim;
	int64_t shape[ST_MAXDIM];
	int64_t begin, end; /* in the data section */
} st_entry;

typedef struct {
	st_file *files;
	int n_files;
	st_entry *entries; /* sorted by pp name */
	int n_entries;
	const st_entry **of; /* source tensor -> its entry */
	bool *transpose;     /* source tensor -> stored (in, out) */
	unsigned char *chunk;
	char dir[PP_PATH_MAX];
	const char *strip; /* PEFT's base_model.model.: taken off every name (NULL: none) */
} st_src;

static void src_close(tio_source *s)
{
	if (!s)
		return;
	st_src *p = s->impl;
	if (p) {
		for (int i = 0; i < p->n_files; i++)
			if (p->files[i].fd >= 0)
				close(p->files[i].fd);
		free(p->files);
		free(p->entries);
		free(p->of);
		free(p->transpose);
		free(p->chunk);
		free(p);
	}
	json_decref(s->meta.model);
	json_decref(s->meta.config);
	free(s->tensors);
	free(s);
}

static int pread_all(const st_file *f, void *buf, size_t n, int64_t off, pp_err *e)
{
	return fio_pread(f->fd, f->path, buf, n, off, e);
}

/* Elements [first, first + count) of t, in file order, as floats; or, with
 * transpose, the whole (rows, cols) tensor into out as (cols, rows). */
static int read_elems(st_src *p, const st_entry *t, int64_t first, int64_t count, bool transpose,
		      float *out, pp_err *e)
{
	const st_file *f = &p->files[t->file];
	const int tio = st_dtypes[t->dtype].tio, es = st_dtypes[t->dtype].size;
	const int64_t off = f->data + t->begin + first * es;
	if (tio == TIO_F32 && !transpose)
		return pread_all(f, out, (size_t)count * 4, off, e);
	const int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = count / (rows ? rows : 1);
	const int64_t per = (int64_t)(ST_CHUNK / (size_t)es);
	float conv[256];
	for (int64_t j = 0; j < count;) {
		int64_t n = count - j < per ? count - j : per;
		int rc = pread_all(f, p->chunk, (size_t)(n * es), off + j * es, e);
		if (rc)
			return rc;
		for (int64_t k = 0; k < n; k += 256) {
			int64_t m = n - k < 256 ? n - k : 256;
			to_f32(tio, p->chunk + k * es, (size_t)m, conv);
			for (int64_t q = 0; q < m; q++) {
				int64_t at = j + k + q; /* (r, c) in the file */
				if (transpose)
					out[(at % cols) * rows + at / cols] = conv[q];
				else
					out[at] = conv[q];
			}
		}
		j += n;
	}
	return 0;
}

static int src_read(tio_source *s, int i, const char *group, float *out, pp_err *e)
{
	st_src *p = s->impl;
	if (i < 0 || i >= s->n)
		return pp_errorf(e, PP_EUSAGE, "tensor index %d out of range", i);
	if (strcmp(group, "params"))
		return pp_errorf(e, PP_EUSAGE, "safetensors holds parameters only, not %s", group);
	return read_elems(p, p->of[i], 0, tio_numel(&s->tensors[i]), p->transpose[i], out, e);
}

static int cmp_pp_name(const void *a, const void *b)
{
	return strcmp(((const st_entry *)a)->pp, ((const st_entry *)b)->pp);
}

static int cmp_offset(const void *a, const void *b)
{
	const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
	return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1)
				    : (x->end != y->end ? (x->end < y->end ? -1 : 1) : 0);
}

/* one header entry: its dtype, shape and offsets, checked against the data
 * section of data_bytes */
static int parse_entry(const char *key, json_t *v, int64_t data_bytes, st_entry *t, pp_err *e)
{
	if (!json_is_object(v))
		return pp_errorf(e, PP_ERUNTIME, "tensor %s: expected an object", key);
	const char *dt = json_string_value(json_object_get(v, "dtype"));
	json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
	t->dtype = -1;
	for (int i = 0; dt && i < st_n_dtypes; i++)
		if (!strcmp(dt, st_dtypes[i].name))
			t->dtype = i;
	if (t->dtype < 0)
		return pp_errorf(e, PP_ERUNTIME, "tensor %s: unknown dtype %s%s%s", key,
				 dt ? "\"" : "", dt ? dt : "(none)", dt ? "\"" : "");
	if (!json_is_array(shape) || json_array_size(shape) > ST_MAXDIM)
		return pp_errorf(e, PP_ERUNTIME,
				 "tensor %s: shape must be an array of at most %d sizes", key,
				 ST_MAXDIM);
	t->ndim = (int)json_array_size(shape);
	int64_t numel = 1;
	for (int d = 0; d < t->ndim; d++) {
		json_t *x = json_array_get(shape, (size_t)d);
		t->shape[d] = json_integer_value(x);
		if (!json_is_integer(x) || t->shape[d] < 0)
			return pp_errorf(e, PP_ERUNTIME, "tensor %s: shape[%d] is not a size >= 0",
					 key, d);
		if (t->shape[d] && numel > INT64_MAX / 8 / t->shape[d])
			return pp_errorf(e, PP_ERUNTIME, "tensor %s: shape too large", key);
		numel *= t->shape[d];
	}
	json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
	if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
	    !json_is_integer(en))
		return pp_errorf(e, PP_ERUNTIME, "tensor %s: data_offsets must be [begin, end]",
				 key);
	t->begin = json_integer_value(b);
	t->end = json_integer_value(en);
	if (t->begin < 0 || t->end < t->begin || t->end > data_bytes)
		return pp_errorf(
			e, PP_ERUNTIME,
			"tensor %s: data_offsets [%lld, %lld] outside the data section of %lld "
			"bytes (a truncated file?)",
			key, (long long)t->begin, (long long)t->end, (long long)data_bytes);
	if (t->end - t->begin != numel * st_dtypes[t->dtype].size)
		return pp_errorf(e, PP_ERUNTIME,
				 "tensor %s: data_offsets [%lld, %lld] hold %lld bytes, but %lld "
				 "elements of %s take %lld",
				 key, (long long)t->begin, (long long)t->end,
				 (long long)(t->end - t->begin), (long long)numel,
				 st_dtypes[t->dtype].name,
				 (long long)(numel * st_dtypes[t->dtype].size));
	return 0;
}

/* Opens file path as p->files[p->n_files] and appends its header's entries.
 * With map (a sharded model's weight_map), each must be listed for this
 * file. */
static int parse_file(st_src *p, const char *path, bool gpt, pp_err *e)
{
	st_file *f = &p->files[p->n_files];
	snprintf(f->path, sizeof f->path, "%s", path);
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot open %s: %s", path, strerror(errno));
	const int file = p->n_files++;
	struct stat st;
	if (fstat(f->fd, &st) || !S_ISREG(st.st_mode))
		return pp_errorf(e, PP_ERUNTIME, "%s: not a regular file", path);
	f->size = st.st_size;
	unsigned char len8[8];
	if (f->size < 8)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: %lld bytes, too short for a safetensors header", path,
				 (long long)f->size);
	int rc = pread_all(f, len8, 8, 0, e);
	if (rc)
		return rc;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	const unsigned long long hn = (unsigned long long)n;
	if (n > (uint64_t)ST_MAX_HEADER)
		return pp_errorf(e, PP_ERUNTIME, "%s: header length %llu is over the limit of %lld",
				 path, hn, (long long)ST_MAX_HEADER);
	if ((int64_t)n > f->size - 8)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: header length %llu runs past the end of the file (%lld bytes)", path,
			hn, (long long)f->size);
	if (n < 2)
		return pp_errorf(e, PP_ERUNTIME, "%s: header length %llu is too short for JSON",
				 path, hn);
	f->data = 8 + (int64_t)n;
	char *text = malloc((size_t)n);
	if (!text)
		return pp_errorf(e, PP_ERUNTIME, "out of memory for a header of %llu bytes",
				 (unsigned long long)n);
	rc = pread_all(f, text, (size_t)n, 8, e);
	json_error_t je;
	json_t *h = rc ? NULL : json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	free(text);
	if (rc)
		return rc;
	if (!json_is_object(h)) {
		json_decref(h);
		return pp_errorf(e, PP_ERUNTIME, "%s: the header is not a JSON object%s%s", path,
				 h ? "" : ": ", h ? "" : je.text);
	}
	size_t count = json_object_size(h);
	st_entry *grown = realloc(p->entries, ((size_t)p->n_entries + count + 1) * sizeof *grown);
	if (!grown) {
		json_decref(h);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	p->entries = grown;
	const int first = p->n_entries;
	const char *key;
	json_t *v;
	json_object_foreach(h, key, v)
	{
		if (!strcmp(key, "__metadata__")) {
			if (!json_is_object(v))
				rc = pp_errorf(e, PP_ERUNTIME, "__metadata__ is not an object");
			if (rc)
				break;
			continue;
		}
		st_entry *t = &p->entries[p->n_entries];
		memset(t, 0, sizeof *t);
		if (strlen(key) >= sizeof t->hf) {
			rc = pp_errorf(e, PP_ERUNTIME, "a tensor name of %zu bytes (%.40s...)",
				       strlen(key), key);
			break;
		}
		snprintf(t->hf, sizeof t->hf, "%s", key);
		t->file = file;
		if ((rc = parse_entry(key, v, f->size - f->data, t, e)))
			break;
		if (p->strip && strncmp(t->hf, p->strip, strlen(p->strip)))
			t->pp[0] = '\0'; /* not one of PEFT's: reported as extra below */
		else
			pp_name_of(t->hf + (p->strip ? strlen(p->strip) : 0), gpt, t->pp,
				   sizeof t->pp, &t->drop);
		p->n_entries++;
	}
	json_decref(h);
	/* no two tensors share a byte */
	const int m = p->n_entries - first;
	const st_entry **by = rc || !m ? NULL : malloc((size_t)m * sizeof *by);
	if (!rc && m && !by)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; by && i < m; i++)
		by[i] = &p->entries[first + i];
	if (by)
		qsort(by, (size_t)m, sizeof *by, cmp_offset);
	for (int i = 1; by && i < m && !rc; i++)
		if (by[i]->begin < by[i - 1]->end)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "tensors %s [%lld, %lld] and %s [%lld, %lld] overlap",
				       by[i - 1]->hf, (long long)by[i - 1]->begin,
				       (long long)by[i - 1]->end, by[i]->hf,
				       (long long)by[i]->begin, (long long)by[i]->end);
	free(by);
	return rc ? pp_err_prefix(e, "%s", path) : 0;
}

/* a shard's name from the index: a plain file name in the model's directory */
static bool plain_name(const char *s)
{
	return s && *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int parse_index(st_src *p, const char *index, bool gpt, pp_err *e)
{
	json_error_t je;
	json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
	json_t *map = json_object_get(root, "weight_map");
	int rc = 0;
	if (!root)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s (line %d)", index, je.text, je.line);
	else if (!json_is_object(map) || !json_object_size(map))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: no weight_map object", index);
	/* the shards, each once, in the order the map first names them */
	const char **names = rc ? NULL : calloc(json_object_size(map) + 1, sizeof *names);
	int n = 0;
	const char *key;
	json_t *v;
	if (!rc && !names)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	json_object_foreach(map, key, v)
	{
		if (rc)
			break;
		const char *file = json_string_value(v);
		if (!plain_name(file)) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: weight_map[\"%s\"] is not a file name in the directory",
				       index, key);
			break;
		}
		int j = 0;
		while (j < n && strcmp(names[j], file))
			j++;
		if (j == n)
			names[n++] = file;
	}
	if (!rc && !(p->files = calloc((size_t)n, sizeof *p->files)))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; !rc && i < n; i++) {
		char path[PP_PATH_MAX + 256];
		snprintf(path, sizeof path, "%s/%s", p->dir, names[i]);
		rc = parse_file(p, path, gpt, e);
	}
	/* the map and the shards' headers agree, name for name */
	for (int i = 0; !rc && i < p->n_entries; i++) {
		const st_entry *t = &p->entries[i];
		const char *want = json_string_value(json_object_get(map, t->hf));
		if (!want || strcmp(want, names[t->file]))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: %s holds %s, which the index %s", index,
				       names[t->file], t->hf,
				       want ? "puts in another file" : "does not list");
	}
	if (!rc && (size_t)p->n_entries != json_object_size(map))
		rc = pp_errorf(e, PP_ERUNTIME, "%s lists %zu tensors, its files hold %d", index,
			       json_object_size(map), p->n_entries);
	free(names);
	json_decref(root);
	return rc;
}

/* The tokenizer file of the directory that tok_load reads (SentencePiece
 * first: Llama's tokenizer.json is not byte-level), its vocabulary checked
 * against the model's. */
static int find_tokenizer(const char *dir, int vocab, tio_meta *meta, pp_err *e)
{
	static const char *const names[] = {"tokenizer.model", "tokenizer.json", "vocab.json"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char path[PP_PATH_MAX + 32];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		if (stat(path, &st))
			continue;
		pp_tokenizer *t = NULL;
		int rc = tok_load(&t, path, e);
		if (rc)
			return pp_err_prefix(
				e, "tokenizer (import from a directory without it to leave "
				   "the tokenizer out)");
		const int n = tok_vocab_size(t);
		const bool spm = !strcmp(tok_kind(t), "sentencepiece-bpe");
		tok_free(t);
		if (n > vocab)
			return pp_errorf(e, PP_EUSAGE,
					 "%s has %d tokens, more than the model's vocab_size %d",
					 path, n, vocab);
		/* absolute: a pp checkpoint's config keeps it */
		char *full = realpath(path, NULL);
		rc = !full || snprintf(meta->tokenizer, sizeof meta->tokenizer, "%s", full) >=
					     (int)sizeof meta->tokenizer
			     ? pp_errorf(e, PP_EUSAGE, "%s: %s", path,
					 full ? "path too long" : strerror(errno))
			     : 0;
		free(full);
		if (rc)
			return rc;
		/* tokenizer_config.json says whether text starts with BOS; Llama's
		 * SentencePiece tokenizers do unless it says otherwise */
		snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
		json_t *tc = json_load_file(path, 0, NULL);
		json_t *ab = json_object_get(tc, "add_bos_token");
		meta->add_bos = json_is_boolean(ab) ? json_is_true(ab) : spm;
		json_decref(tc);
		return 0;
	}
	return 0;
}

/* Where the model's files are: *dir, and the index or the one file. */
static int locate(const char *path, char *dir, size_t n, char *file, size_t fn, bool *sharded,
		  pp_err *e)
{
	struct stat st;
	if (stat(path, &st))
		return pp_errorf(e, PP_EUSAGE, "%s: %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		snprintf(dir, n, "%s", path);
		snprintf(file, fn, "%s/model.safetensors.index.json", path);
		if (!stat(file, &st)) {
			*sharded = true;
			return 0;
		}
		snprintf(file, fn, "%s/model.safetensors", path);
		*sharded = false;
		if (stat(file, &st))
			return pp_errorf(e, PP_EUSAGE,
					 "%s holds neither model.safetensors nor "
					 "model.safetensors.index.json",
					 path);
		return 0;
	}
	if (!st_ends_with(path, ".safetensors") && !st_ends_with(path, ".index.json")) {
		/* a file of another format: say what it is where it is recognized */
		char magic[4] = {0};
		FILE *f = fopen(path, "rb");
		bool gguf = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
		if (f)
			fclose(f);
		return pp_errorf(e, PP_EUSAGE,
				 "%s: expected a Hugging Face model directory (config.json beside "
				 "model.safetensors), a .safetensors file or its .index.json%s",
				 path, gguf ? "; this is a GGUF file: --format gguf" : "");
	}
	snprintf(file, fn, "%s", path);
	snprintf(dir, n, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, n, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	*sharded = st_ends_with(path, ".index.json");
	return 0;
}

/* chunked comparison: lm_head.weight, kept in a tied model's file, is the embedding */
static int check_tied_head(st_src *p, const st_entry *head, const st_entry *emb, pp_err *e)
{
	bool same = head->ndim == emb->ndim;
	for (int d = 0; same && d < head->ndim; d++)
		same = head->shape[d] == emb->shape[d];
	if (!same)
		return pp_errorf(
			e, PP_EUSAGE,
			"lm_head.weight is in the file but is not the embedding's shape, and "
			"the config ties them (tie_word_embeddings)");
	if (st_dtypes[head->dtype].tio < 0)
		return pp_errorf(e, PP_EUSAGE, "lm_head.weight: dtype %s",
				 st_dtypes[head->dtype].name);
	const int64_t numel = (head->end - head->begin) / st_dtypes[head->dtype].size, step = 65536;
	float *a = malloc(2 * (size_t)step * sizeof *a);
	if (!a)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	int rc = 0;
	for (int64_t j = 0; j < numel && !rc; j += step) {
		int64_t m = numel - j < step ? numel - j : step;
		if (!(rc = read_elems(p, head, j, m, false, a, e)) &&
		    !(rc = read_elems(p, emb, j, m, false, a + step, e)) &&
		    memcmp(a, a + step, (size_t)m * sizeof *a))
			rc = pp_errorf(e, PP_EUSAGE,
				       "lm_head.weight differs from %s, but the config ties them "
				       "(tie_word_embeddings)",
				       emb->pp);
	}
	free(a);
	return rc;
}

/* The entries as pp's tensor list: every tensor of the model's table,
 * nothing else (buffers and a tied head aside). */
/* The source's tensors: want[0..nw) (owned now), each from the files'
 * entry of its name, and nothing else in the files. */
static int match_table(tio_source *s, st_src *p, const pp_model_cfg *m, tio_tensor *want, int nw,
		       pp_err *e)
{
	int rc = 0;
	const bool gpt = m->family == PP_FAMILY_GPT;
	qsort(p->entries, (size_t)p->n_entries, sizeof *p->entries, cmp_pp_name);
	for (int i = 1; i < p->n_entries; i++)
		if (p->entries[i].pp[0] && !strcmp(p->entries[i].pp, p->entries[i - 1].pp)) {
			free(want);
			return pp_errorf(e, PP_ERUNTIME, "%s: %s is stored twice (as %s and %s)",
					 p->dir, p->entries[i].pp, p->entries[i - 1].hf,
					 p->entries[i].hf);
		}
	s->tensors = want;
	s->n = nw;
	p->of = calloc((size_t)nw + 1, sizeof *p->of);
	p->transpose = calloc((size_t)nw + 1, sizeof *p->transpose);
	if (!p->of || !p->transpose)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; i < nw && !rc; i++) {
		st_entry key;
		snprintf(key.pp, sizeof key.pp, "%s", want[i].name);
		const st_entry *t = bsearch(&key, p->entries, (size_t)p->n_entries, sizeof key,
					    cmp_pp_name);
		if (!t) {
			char sh[96];
			pp_shape_str(sh, sizeof sh, want[i].ndim, want[i].shape);
			rc = pp_errorf(e, PP_EUSAGE, "%s: tensor %s %s of the %s model is missing",
				       p->dir, want[i].name, sh, pp_family_name(m->family));
			break;
		}
		const st_file *f = &p->files[t->file];
		const bool tr = gpt && st_gpt2_conv1d(t->pp);
		bool same = t->ndim == want[i].ndim;
		for (int d = 0; same && d < t->ndim; d++)
			same = t->shape[d] == want[i].shape[tr ? t->ndim - 1 - d : d];
		if (!same) {
			tio_tensor got = {.ndim = t->ndim};
			for (int d = 0; d < t->ndim && d < TIO_MAXDIM; d++)
				got.shape[d] = t->shape[tr ? t->ndim - 1 - d : d];
			got.ndim = t->ndim < TIO_MAXDIM ? t->ndim : TIO_MAXDIM;
			char a[96], b[96];
			pp_shape_str(a, sizeof a, got.ndim, got.shape);
			pp_shape_str(b, sizeof b, want[i].ndim, want[i].shape);
			rc = pp_errorf(e, PP_EUSAGE,
				       "%s: tensor %s has shape %s%s, the model's is %s", f->path,
				       t->hf, a,
				       tr ? " (as (out, in); Conv1D stores (in, out))" : "", b);
		} else if (st_dtypes[t->dtype].tio < 0) {
			rc = pp_errorf(e, PP_EUSAGE,
				       "%s: tensor %s has dtype %s (pp reads F32, F16, BF16, F64)",
				       f->path, t->hf, st_dtypes[t->dtype].name);
		}
		p->of[i] = t;
		p->transpose[i] = tr;
		want[i].dtype = (tio_dtype)st_dtypes[t->dtype].tio;
	}
	/* whatever else the files hold */
	for (int i = 0; i < p->n_entries && !rc; i++) {
		const st_entry *t = &p->entries[i];
		if (t->drop || (t->pp[0] && modeltable_find(want, nw, t->pp) >= 0))
			continue;
		if (m->tied_embeddings && !strcmp(t->pp, "lm_head.weight")) {
			const char *emb = gpt ? "transformer.wte.weight"
					      : "model.embed_tokens.weight";
			rc = check_tied_head(p, t, p->of[modeltable_find(want, nw, emb)], e);
			continue;
		}
		rc = pp_errorf(e, PP_EUSAGE, "%s: tensor %s is not one of the %s model's",
			       p->files[t->file].path, t->hf, pp_family_name(m->family));
	}
	return rc;
}

/* an empty source of this reader (*out NULL until it is complete) */
static int src_new(tio_source **s, st_src **p, const char *format, tio_source **out, pp_err *e)
{
	*out = NULL;
	*s = calloc(1, sizeof **s);
	*p = calloc(1, sizeof **p);
	if (!*s || !*p) {
		free(*s);
		free(*p);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	(*s)->format = format;
	(*s)->impl = *p;
	(*s)->read = src_read;
	(*s)->close = src_close;
	return 0;
}

int tio_open_safetensors(const char *path, tio_source **out, pp_err *e)
{
	tio_source *s;
	st_src *p;
	if (src_new(&s, &p, "safetensors", out, e))
		return e->code;
	char file[PP_PATH_MAX + 64], cfgpath[PP_PATH_MAX + 32];
	bool sharded = false;
	pp_model_cfg m;
	int rc = locate(path, p->dir, sizeof p->dir, file, sizeof file, &sharded, e);
	if (!rc) {
		snprintf(cfgpath, sizeof cfgpath, "%s/config.json", p->dir);
		json_error_t je;
		json_t *cfg = json_load_file(cfgpath, 0, &je);
		if (!cfg)
			rc = pp_errorf(e, PP_EUSAGE, "%s: %s", cfgpath, je.text);
		else if ((rc = hf_config_to_model(cfg, &s->meta.model, e)))
			pp_err_prefix(e, "%s", cfgpath);
		json_decref(cfg);
	}
	if (!rc && (rc = tio_model_cfg(&s->meta, &m, e)))
		pp_err_prefix(e, "%s: the model it describes", cfgpath);
	if (!rc && !(p->chunk = malloc(ST_CHUNK)))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	const bool gpt = !rc && m.family == PP_FAMILY_GPT;
	if (!rc && sharded) {
		rc = parse_index(p, file, gpt, e);
	} else if (!rc) {
		if (!(p->files = calloc(1, sizeof *p->files)))
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		else
			rc = parse_file(p, file, gpt, e);
	}
	tio_tensor *want = NULL;
	int nw = 0;
	if (!rc && !(rc = modeltable_build(&m, &want, &nw, e)))
		rc = match_table(s, p, &m, want, nw, e);
	if (!rc)
		rc = find_tokenizer(p->dir, m.vocab_size, &s->meta, e);
	if (rc) { /* the messages name the file at fault */
		src_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int tio_open_peft(const char *dir, const pp_config *c, tio_source **out, pp_err *e)
{
	tio_source *s;
	st_src *p;
	if (src_new(&s, &p, "peft", out, e))
		return e->code;
	p->strip = "base_model.model.";
	snprintf(p->dir, sizeof p->dir, "%s", dir);
	char file[PP_PATH_MAX + 64];
	snprintf(file, sizeof file, "%s/adapter_model.safetensors", dir);
	tio_tensor *want = NULL;
	int nw = 0;
	int rc = 0;
	if (!(p->chunk = malloc(ST_CHUNK)) || !(p->files = calloc(1, sizeof *p->files)))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (!rc)
		rc = parse_file(p, file, false, e);
	if (!rc && !(rc = modeltable_adapters(c, &want, &nw, e)))
		rc = match_table(s, p, &c->model, want, nw, e);
	if (!rc && !(s->meta.config = json_deep_copy(c->json)))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (rc) {
		src_close(s);
		return rc;
	}
	s->meta.model = json_incref(json_object_get(s->meta.config, "model"));
	snprintf(s->meta.tokenizer, sizeof s->meta.tokenizer, "%s", c->tokenizer);
	*out = s;
	return 0;
}
