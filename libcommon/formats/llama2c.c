/* Karpathy's llama2.c model files, as a tensorio sink, in the three layouts
 * its programs and export.py define:
 *
 *   version 0 (legacy_export; run.c reads only this): 7 int32 dim,
 *     hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative when
 *     the classifier is not shared), seq_len; then fp32 tok_embeddings,
 *     attention_norm[L], wq[L], wk[L], wv[L], wo[L], ffn_norm[L], w1[L]
 *     (gate), w2[L] (down), w3[L] (up), norm, the RoPE tables freqs_cos and
 *     freqs_sin (seq_len x head_size/2 each, unused by run.c), then wcls
 *     (the head) unless shared
 *   version 1 (version1_export): 256 bytes of header: uint32 magic
 *     0x616b3432 ("ak42"), int32 version 1, the 7 int32 (vocab_size
 *     positive), uint8 shared_classifier, zeros; then fp32 attention_norm[L]
 *     ffn_norm[L] norm tok_embeddings wq[L] wk[L] wv[L] wo[L] w1[L] w2[L]
 *     w3[L], then wcls unless shared
 *   version 2 (version2_export; runq.c reads only this): the header of 1
 *     with version 2 and after shared_classifier an int32 group_size (64,
 *     halved until it divides dim); fp32 attention_norm[L] ffn_norm[L]
 *     norm; then tok_embeddings wq[L] wk[L] wv[L] wo[L] w1[L] w2[L]
 *     w3[L] (and wcls unless shared), each layer's tensor its int8 values
 *     then its fp32 scales, one per group of group_size: scale = max |w| /
 *     127, q = round(w / scale) to the nearest even; d_ff in whole groups
 *     too (runq.c quantizes the MLP's activations)
 *
 * and llama2.c's tokenizer.bin beside the model file (tokenizer.py's
 * export): uint32 max token length, then per token fp32 score, uint32
 * length and its bytes, SentencePiece's U+2581 as a space, BOS and EOS as
 * "\n<s>\n" and "\n</s>\n".
 *
 * llama2.c's model is fixed: RMSNorm with eps 1e-5, RoPE with theta 10000
 * over interleaved pairs (Meta's layout), head_size = dim / n_heads, SwiGLU,
 * no biases; other models are refused. q and k rows are permuted from pp's
 * rotate-half order to interleaved pairs (the inverse of the permutation
 * Hugging Face's convert_llama_weights_to_hf applies). Tensors come layer
 * by layer and the file groups them by kind, so every offset is computed
 * at open and each tensor written there as it comes, into a temporary file
 * renamed into place at the end. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../base/log.h"
#include "../tok/tokenizer.h"
#include "fileio.h"
#include "modeltable.h"
#include "tensorio.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llama2.c files are little-endian; this writer assumes a little-endian host"
#endif

#define L2C_MAGIC  0x616b3432u
#define L2C_HEADER 256
#define L2C_GROUP  64 /* version 2's group size, halved until it divides dim */

typedef struct {
	char name[sizeof(((tio_tensor *)0)->name)];
	int64_t off, numel;
	int heads;  /* q_proj, k_proj: heads whose rows go to interleaved pairs; else 0 */
	bool quant; /* version 2: int8 values, then one fp32 scale per group */
	bool done;
} l2c_slot;

typedef struct {
	char path[PP_PATH_MAX], tmp[PP_PATH_MAX + 16];
	int fd;
	int version, group;
	l2c_slot *slot;
	int n;
	int head_dim;
	float *buf;
	size_t cap;
	int8_t *qbuf; /* version 2: a tensor's values, then its scales */
	size_t qcap;
	float *sbuf;
	size_t scap;
	char tokenizer[PP_PATH_MAX]; /* the source's, for tokenizer.bin ("" none) */
} l2c_sink;

/* Each version's order of the tensors ("%d": every layer in turn); the
 * head comes last and is absent when tied (a shared classifier). */
static const char *const order_v0[] = {
	"model.embed_tokens.weight",
	"model.layers.%d.input_layernorm.weight",
	"model.layers.%d.self_attn.q_proj.weight",
	"model.layers.%d.self_attn.k_proj.weight",
	"model.layers.%d.self_attn.v_proj.weight",
	"model.layers.%d.self_attn.o_proj.weight",
	"model.layers.%d.post_attention_layernorm.weight",
	"model.layers.%d.mlp.gate_proj.weight",
	"model.layers.%d.mlp.down_proj.weight",
	"model.layers.%d.mlp.up_proj.weight",
	"model.norm.weight",
	"lm_head.weight",
};
static const char *const order_v1[] = {
	"model.layers.%d.input_layernorm.weight",
	"model.layers.%d.post_attention_layernorm.weight",
	"model.norm.weight",
	"model.embed_tokens.weight",
	"model.layers.%d.self_attn.q_proj.weight",
	"model.layers.%d.self_attn.k_proj.weight",
	"model.layers.%d.self_attn.v_proj.weight",
	"model.layers.%d.self_attn.o_proj.weight",
	"model.layers.%d.mlp.gate_proj.weight",
	"model.layers.%d.mlp.down_proj.weight",
	"model.layers.%d.mlp.up_proj.weight",
	"lm_head.weight",
};
/* version 2 is version 1's order, every matrix quantized */

#define NEED(cond, ...)                                                                            \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return pp_errorf(e, PP_EUSAGE, __VA_ARGS__);                               \
	} while (0)

/* what llama2.c's run.c computes, and nothing else */
static int llama2c_model(const pp_model_cfg *m, pp_err *e)
{
	const char *why = "llama2.c runs llama models only";
	NEED(m->family == PP_FAMILY_LLAMA || m->family == PP_FAMILY_MISTRAL, "model.family %s: %s",
	     pp_family_name(m->family), why);
	NEED(m->sliding_window == 0, "model.sliding_window %d: llama2.c attends to every position",
	     m->sliding_window);
	NEED(m->n_experts == 0, "model.n_experts %d: %s (dense)", m->n_experts, why);
	NEED(m->mlp == PP_MLP_SWIGLU, "model.mlp is not swiglu: llama2.c's MLP is SwiGLU");
	NEED(m->norm == PP_NORM_RMS && m->norm_offset == 0,
	     "model.norm / norm_offset: llama2.c's norm is RMSNorm scaled by w");
	NEED(m->norm_eps == 1e-5, "model.norm_eps %g: llama2.c's RMSNorm uses eps 1e-5",
	     m->norm_eps);
	NEED(m->pos == PP_POS_ROPE, "model.pos %s: llama2.c rotates q and k with RoPE",
	     m->pos == PP_POS_LEARNED ? "learned" : "relative");
	NEED(m->rope_theta == 10000.0, "model.rope_theta %g: llama2.c's RoPE base is 10000",
	     m->rope_theta);
	NEED(!m->embed_scale, "model.embed_scale true: llama2.c does not scale embeddings");
	NEED(!m->bias, "model.bias true: llama2.c has no biases");
	NEED((long)m->head_dim * m->n_heads == m->d_model,
	     "model.head_dim %d * n_heads %d != d_model %d: llama2.c's head size is dim / n_heads",
	     m->head_dim, m->n_heads, m->d_model);
	return 0;
}

static void sink_free(l2c_sink *k, bool remove_output)
{
	if (k->fd >= 0)
		close(k->fd);
	if (remove_output && k->tmp[0])
		unlink(k->tmp);
	free(k->slot);
	free(k->buf);
	free(k->qbuf);
	free(k->sbuf);
	free(k);
}

/* room for n elements of elem bytes in *buf (*cap of them now) */
static int room(void **buf, size_t *cap, size_t n, size_t elem, const char *name, pp_err *e)
{
	if (n <= *cap)
		return 0;
	free(*buf);
	*cap = 0;
	if (!(*buf = malloc(n * elem)))
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %s", name);
	*cap = n;
	return 0;
}

/* Version 2's quantization of n values (n a multiple of group): per group,
 * scale = max |w| / 127 and q = w / scale rounded to the nearest, ties to
 * even (export.py's quantize_q80, in fp32 as torch computes it); the
 * scales after the values, as runq.c reads them. */
static void quantize(const float *w, int64_t n, int group, int8_t *q, float *scales)
{
	for (int64_t g = 0; g < n / group; g++) {
		const float *x = w + g * group;
		float wmax = 0;
		for (int i = 0; i < group; i++)
			wmax = fabsf(x[i]) > wmax ? fabsf(x[i]) : wmax;
		const float scale = wmax / 127.0f;
		scales[g] = scale;
		for (int i = 0; i < group; i++)
			q[g * group + i] = scale > 0 ? (int8_t)nearbyintf(x[i] / scale) : 0;
	}
}

static int sink_put(tio_sink *s, const tio_tensor *t, const float *param, const float *m,
		    const float *v, pp_err *e)
{
	(void)m;
	(void)v;
	l2c_sink *k = s->impl;
	l2c_slot *sl = NULL;
	for (int i = 0; i < k->n && !sl; i++)
		if (!strcmp(k->slot[i].name, t->name))
			sl = &k->slot[i];
	if (!sl)
		return pp_errorf(e, PP_EUSAGE, "%s has no place in a llama2.c file", t->name);
	if (sl->done)
		return pp_errorf(e, PP_EUSAGE, "%s given twice", t->name);
	if (tio_numel(t) != sl->numel)
		return pp_errorf(e, PP_EUSAGE, "%s: %lld elements, %lld expected", t->name,
				 (long long)tio_numel(t), (long long)sl->numel);
	const float *data = param;
	if (sl->heads) {
		/* row h*D + j*D/2 + i (rotate-half) -> row h*D + 2*i + j (pairs) */
		int rc = room((void **)&k->buf, &k->cap, (size_t)sl->numel, sizeof *k->buf, t->name,
			      e);
		if (rc)
			return rc;
		const int64_t D = k->head_dim, half = D / 2, cols = t->shape[1];
		for (int64_t h = 0; h < sl->heads; h++)
			for (int64_t i = 0; i < half; i++)
				for (int64_t j = 0; j < 2; j++)
					memcpy(k->buf + (h * D + 2 * i + j) * cols,
					       param + (h * D + j * half + i) * cols,
					       (size_t)cols * sizeof *param);
		data = k->buf;
	}
	int rc;
	if (sl->quant) {
		const size_t n = (size_t)sl->numel, groups = n / (size_t)k->group;
		const size_t bytes = n + groups * sizeof(float);
		if ((rc = room((void **)&k->qbuf, &k->qcap, bytes, 1, t->name, e)) ||
		    (rc = room((void **)&k->sbuf, &k->scap, groups, sizeof(float), t->name, e)))
			return rc;
		quantize(data, sl->numel, k->group, k->qbuf, k->sbuf);
		memcpy(k->qbuf + n, k->sbuf, groups * sizeof(float));
		rc = fio_pwrite(k->fd, k->tmp, k->qbuf, bytes, sl->off, e);
	} else {
		rc = fio_pwrite(k->fd, k->tmp, data, (size_t)sl->numel * sizeof(float), sl->off, e);
	}
	sl->done = !rc;
	return rc;
}

/* Version 0's RoPE tables (export.py's precompute_freqs_cis, theta 10000):
 * cos and sin of t * 10000^(-2i/D) for t < seq_len, i < D/2, at off. */
static int write_freqs(l2c_sink *k, int seq_len, int64_t off, pp_err *e)
{
	const int half = k->head_dim / 2;
	const size_t n = (size_t)seq_len * (size_t)half;
	float *tab = malloc(2 * n * sizeof *tab + 1);
	if (!tab)
		return pp_errorf(e, PP_ERUNTIME, "out of memory for the RoPE tables");
	for (int t = 0; t < seq_len; t++)
		for (int i = 0; i < half; i++) {
			const float f = 1.0f / powf(10000.0f, (float)(2 * i) / (float)k->head_dim);
			const float a = (float)t * f;
			tab[(size_t)t * half + i] = cosf(a);
			tab[n + (size_t)t * half + i] = sinf(a);
		}
	int rc = fio_pwrite(k->fd, k->tmp, tab, 2 * n * sizeof *tab, off, e);
	free(tab);
	return rc;
}

/* llama2.c's tokenizer.bin for the SentencePiece model at src, into path
 * (a temporary name, then renamed into place). */
static int write_tokenizer_bin(const char *src, const char *path, pp_err *e)
{
	pp_tokenizer *t;
	int rc = tok_load(&t, src, e);
	if (rc)
		return rc;
	if (strcmp(tok_kind(t), "sentencepiece-bpe")) {
		/* llama2.c's tokenizer is SentencePiece's: pieces with U+2581 and
		 * byte fallback, merged by score */
		log_info(
			"warning: %s is a %s tokenizer, not SentencePiece's: the llama2.c model is "
			"written without tokenizer.bin",
			src, tok_kind(t));
		tok_free(t);
		return 0;
	}
	const int n = tok_vocab_size(t);
	char tmp[PP_PATH_MAX + 64];
	snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
	int fd = mkstemp(tmp);
	FILE *f = fd >= 0 && !fchmod(fd, 0644) ? fdopen(fd, "wb") : NULL;
	if (!f) {
		rc = pp_errorf(e, PP_ERUNTIME, "cannot create a file beside %s: %s", path,
			       strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		tok_free(t);
		return rc;
	}
	/* each token's bytes, built twice: for the longest, then written */
	uint32_t longest = 0;
	char bytes[1024];
	for (int pass = 0; pass < 2 && !rc; pass++) {
		if (pass == 1 && fwrite(&longest, sizeof longest, 1, f) != 1)
			break;
		for (int id = 0; id < n; id++) {
			size_t len, m = 0;
			const char *piece = tok_piece(t, id, &len);
			if (id == tok_bos(t))
				piece = "\n<s>\n", len = 5;
			else if (id == tok_eos(t))
				piece = "\n</s>\n", len = 6;
			for (size_t i = 0; i < len && m < sizeof bytes; i++) {
				if (i + 2 < len && !memcmp(piece + i, "\xe2\x96\x81", 3)) {
					bytes[m++] = ' ';
					i += 2;
				} else {
					bytes[m++] = piece[i];
				}
			}
			if (pass == 0) {
				longest = (uint32_t)m > longest ? (uint32_t)m : longest;
				continue;
			}
			const float score = tok_piece_score(t, id);
			const uint32_t ulen = (uint32_t)m;
			if (fwrite(&score, sizeof score, 1, f) != 1 ||
			    fwrite(&ulen, sizeof ulen, 1, f) != 1 || fwrite(bytes, 1, m, f) != m)
				break;
		}
	}
	tok_free(t);
	bool bad = ferror(f) || fflush(f) || fsync(fileno(f));
	if (fclose(f) || bad) {
		unlink(tmp);
		return pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
	}
	rc = fs_rename_durable(tmp, path, e);
	if (rc)
		unlink(tmp);
	return rc;
}

static int sink_finish(tio_sink *s, pp_err *e)
{
	l2c_sink *k = s->impl;
	int rc = 0;
	for (int i = 0; i < k->n && !rc; i++)
		if (!k->slot[i].done)
			rc = pp_errorf(e, PP_EUSAGE, "the model's %s was not given",
				       k->slot[i].name);
	if (!rc && fsync(k->fd))
		rc = pp_errorf(e, PP_ERUNTIME, "fsync %s: %s", k->tmp, strerror(errno));
	if (!rc && close(k->fd))
		rc = pp_errorf(e, PP_ERUNTIME, "close %s: %s", k->tmp, strerror(errno));
	k->fd = -1;
	if (!rc && !(rc = fs_rename_durable(k->tmp, k->path, e)))
		k->tmp[0] = '\0';
	if (!rc && k->tokenizer[0]) {
		/* tokenizer.bin beside the model file, as run.c's -z takes it */
		char tb[PP_PATH_MAX + 16], dir[PP_PATH_MAX];
		snprintf(dir, sizeof dir, "%s", k->path);
		char *slash = strrchr(dir, '/');
		if (slash)
			slash[1] = '\0';
		snprintf(tb, sizeof tb, "%stokenizer.bin", slash ? dir : "");
		rc = write_tokenizer_bin(k->tokenizer, tb, e);
	}
	sink_free(k, true);
	free(s);
	return rc;
}

static void sink_abort(tio_sink *s)
{
	sink_free(s->impl, true);
	free(s);
}

/* the slots in file order, their offsets, and the header (*header_n
 * bytes) */
static int lay_out(l2c_sink *k, const pp_model_cfg *m, unsigned char *header, size_t *header_n,
		   int64_t *total, pp_err *e)
{
	tio_tensor *table;
	int nt, rc = modeltable_build(m, &table, &nt, e);
	if (rc)
		return rc;
	if (!(k->slot = calloc((size_t)nt + 1, sizeof *k->slot))) {
		free(table);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	const char *const *order = k->version == 0 ? order_v0 : order_v1;
	const size_t n_order = k->version == 0 ? sizeof order_v0 / sizeof *order_v0
					       : sizeof order_v1 / sizeof *order_v1;
	const bool v0 = k->version == 0;
	const int32_t vocab = v0 && !m->tied_embeddings ? -m->vocab_size : m->vocab_size;
	const int32_t dims[7] = {m->d_model,    m->d_ff, m->n_layers,   m->n_heads,
				 m->n_kv_heads, vocab,   m->max_seq_len};
	memset(header, 0, L2C_HEADER);
	if (v0) {
		memcpy(header, dims, sizeof dims);
		*header_n = sizeof dims;
	} else {
		const int32_t magic[2] = {(int32_t)L2C_MAGIC, k->version};
		memcpy(header, magic, sizeof magic);
		memcpy(header + sizeof magic, dims, sizeof dims);
		header[sizeof magic + sizeof dims] = m->tied_embeddings ? 1 : 0;
		if (k->version == 2)
			memcpy(header + sizeof magic + sizeof dims + 1, &k->group, sizeof k->group);
		*header_n = L2C_HEADER;
	}
	int64_t off = (int64_t)*header_n;
	for (size_t f = 0; f < n_order && !rc; f++) {
		const bool per_layer = strchr(order[f], '%') != NULL;
		if (v0 && !strcmp(order[f], "lm_head.weight")) /* after the RoPE tables */
			off += 2 * (int64_t)m->max_seq_len * (m->head_dim / 2) *
			       (int64_t)sizeof(float);
		for (int l = 0; l < (per_layer ? m->n_layers : 1) && !rc; l++) {
			char name[sizeof k->slot->name];
			snprintf(name, sizeof name, order[f], l);
			int j = modeltable_find(table, nt, name);
			if (j < 0 && !strcmp(name, "lm_head.weight") && m->tied_embeddings)
				continue;
			if (j < 0 || k->n >= nt) {
				rc = pp_errorf(e, PP_EUSAGE, "the model has no %s", name);
				break;
			}
			l2c_slot *sl = &k->slot[k->n++];
			snprintf(sl->name, sizeof sl->name, "%s", name);
			sl->numel = tio_numel(&table[j]);
			sl->off = off;
			sl->heads = strstr(name, ".q_proj.")   ? m->n_heads
				    : strstr(name, ".k_proj.") ? m->n_kv_heads
							       : 0;
			sl->quant = k->version == 2 && table[j].ndim == 2;
			if (sl->quant && sl->numel % k->group)
				rc = pp_errorf(
					e, PP_EUSAGE,
					"%s: %lld elements, not whole groups of %d (version 2)",
					name, (long long)sl->numel, k->group);
			off += sl->quant ? sl->numel + sl->numel / k->group * (int64_t)sizeof(float)
					 : sl->numel * (int64_t)sizeof(float);
		}
	}
	if (!rc && k->n != nt)
		rc = pp_errorf(e, PP_EUSAGE, "the model has %d tensors, a llama2.c file %d", nt,
			       k->n);
	free(table);
	*total = off;
	return rc;
}

int tio_sink_llama2c(const char *path, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	*out = NULL;
	l2c_sink *k = calloc(1, sizeof *k);
	tio_sink *s = calloc(1, sizeof *s);
	if (!k || !s) {
		free(k);
		free(s);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	k->fd = -1;
	k->head_dim = o->model->head_dim;
	k->version = o->llama2c_version;
	for (k->group = L2C_GROUP; k->group > 1 && o->model->d_model % k->group; k->group /= 2)
		;
	if (o->meta && o->meta->tokenizer[0])
		snprintf(k->tokenizer, sizeof k->tokenizer, "%s", o->meta->tokenizer);
	unsigned char header[L2C_HEADER];
	size_t header_n = 0;
	int64_t total = 0;
	int rc = 0;
	if (snprintf(k->path, sizeof k->path, "%s", path) >= (int)sizeof k->path || !path[0])
		rc = pp_errorf(e, PP_EUSAGE, "output path '%s': empty or too long", path);
	if (!rc && (k->version < 0 || k->version > 2))
		rc = pp_errorf(e, PP_EUSAGE, "llama2.c version %d: expected 0, 1 or 2", k->version);
	if (!rc && o->with_adam)
		rc = pp_errorf(e, PP_EUSAGE,
			       "llama2.c files hold parameters only (no optimizer state)");
	if (!rc && o->dtype != TIO_F32)
		rc = pp_errorf(e, PP_EUSAGE,
			       "llama2.c files are F32 (version 2: int8 groups), not %s",
			       tio_dtype_name(o->dtype));
	if (!rc)
		rc = llama2c_model(o->model, e);
	if (!rc)
		rc = modeltable_check(o->model, o->tensors, o->n, e);
	if (!rc && k->version == 2 && o->model->d_ff % k->group)
		rc = pp_errorf(e, PP_EUSAGE,
			       "model.d_ff %d: not whole groups of %d, as runq.c quantizes the "
			       "MLP's activations (version 2)",
			       o->model->d_ff, k->group);
	if (!rc)
		rc = lay_out(k, o->model, header, &header_n, &total, e);
	struct stat st;
	if (!rc && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		rc = pp_errorf(e, PP_EUSAGE, "%s is a directory", path);
	if (!rc)
		rc = fio_make_parent(path, e);
	if (!rc) {
		snprintf(k->tmp, sizeof k->tmp, "%s.tmp-XXXXXX", path);
		k->fd = mkstemp(k->tmp);
		if (k->fd < 0) {
			rc = pp_errorf(e, PP_ERUNTIME, "cannot create a file beside %s: %s", path,
				       strerror(errno));
			k->tmp[0] = '\0';
		}
	}
	if (!rc && fchmod(k->fd, 0644))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", k->tmp, strerror(errno));
	if (!rc)
		rc = fio_pwrite(k->fd, k->tmp, header, header_n, 0, e);
	if (!rc && ftruncate(k->fd, (off_t)total))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", k->tmp, strerror(errno));
	if (!rc && k->version == 0) {
		/* the RoPE tables after the final norm */
		const l2c_slot *norm = NULL;
		for (int i = 0; i < k->n; i++)
			norm = strcmp(k->slot[i].name, "model.norm.weight") ? norm : &k->slot[i];
		rc = write_freqs(k, o->model->max_seq_len,
				 norm->off + norm->numel * (int64_t)sizeof(float), e);
	}
	if (rc) {
		sink_free(k, true);
		free(s);
		return pp_err_prefix(e, "%s", path);
	}
	s->impl = k;
	s->put = sink_put;
	s->finish = sink_finish;
	s->abort = sink_abort;
	*out = s;
	return 0;
}
