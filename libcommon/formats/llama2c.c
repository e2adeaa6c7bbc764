/* Karpathy's llama2.c model file, version 1 (export.py's version1_export),
 * as a tensorio sink:
 *
 *   header, 256 bytes: uint32 magic 0x616b3432 ("ak42"), int32 version 1,
 *     int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 *     seq_len, uint8 shared_classifier, zeros
 *   fp32, each kind for every layer before the next kind:
 *     attention_norm[L] ffn_norm[L] norm tok_embeddings wq[L] wk[L] wv[L]
 *     wo[L] w1[L] (gate) w2[L] (down) w3[L] (up), then wcls (the head)
 *     unless shared_classifier
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "fileio.h"
#include "modeltable.h"
#include "tensorio.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llama2.c files are little-endian; this writer assumes a little-endian host"
#endif

#define L2C_MAGIC  0x616b3432u
#define L2C_HEADER 256

typedef struct {
	char name[sizeof(((tio_tensor *)0)->name)];
	int64_t off, numel;
	int heads; /* q_proj, k_proj: heads whose rows go to interleaved pairs; else 0 */
	bool done;
} l2c_slot;

typedef struct {
	char path[PP_PATH_MAX], tmp[PP_PATH_MAX + 16];
	int fd;
	l2c_slot *slot;
	int n;
	int head_dim;
	float *buf;
	size_t cap;
} l2c_sink;

/* File order: kind by kind ("%d": every layer in turn). */
static const char *const file_order[] = {
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
	"lm_head.weight", /* absent when tied: shared_classifier */
};

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
	NEED(m->pos == PP_POS_ROPE && m->rope_theta == 10000.0,
	     "model.pos / rope_theta %g: llama2.c rotates with RoPE theta 10000", m->rope_theta);
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
	free(k);
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
		if ((size_t)sl->numel > k->cap) {
			free(k->buf);
			k->cap = 0;
			if (!(k->buf = malloc((size_t)sl->numel * sizeof *k->buf)))
				return pp_errorf(e, PP_ERUNTIME, "out of memory for %s", t->name);
			k->cap = (size_t)sl->numel;
		}
		const int64_t D = k->head_dim, half = D / 2, cols = t->shape[1];
		for (int64_t h = 0; h < sl->heads; h++)
			for (int64_t i = 0; i < half; i++)
				for (int64_t j = 0; j < 2; j++)
					memcpy(k->buf + (h * D + 2 * i + j) * cols,
					       param + (h * D + j * half + i) * cols,
					       (size_t)cols * sizeof *param);
		data = k->buf;
	}
	int rc = fio_pwrite(k->fd, k->tmp, data, (size_t)sl->numel * sizeof(float), sl->off, e);
	sl->done = !rc;
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
	sink_free(k, true);
	free(s);
	return rc;
}

static void sink_abort(tio_sink *s)
{
	sink_free(s->impl, true);
	free(s);
}

/* the slots in file order, their offsets, and the header */
static int lay_out(l2c_sink *k, const pp_model_cfg *m, unsigned char *header, int64_t *total,
		   pp_err *e)
{
	tio_tensor *table;
	int nt, rc = modeltable_build(m, &table, &nt, e);
	if (rc)
		return rc;
	if (!(k->slot = calloc((size_t)nt + 1, sizeof *k->slot))) {
		free(table);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	int64_t off = L2C_HEADER;
	for (size_t f = 0; f < sizeof file_order / sizeof *file_order && !rc; f++) {
		const bool per_layer = strchr(file_order[f], '%') != NULL;
		for (int l = 0; l < (per_layer ? m->n_layers : 1) && !rc; l++) {
			char name[sizeof k->slot->name];
			snprintf(name, sizeof name, file_order[f], l);
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
			off += sl->numel * (int64_t)sizeof(float);
		}
	}
	if (!rc && k->n != nt)
		rc = pp_errorf(e, PP_EUSAGE, "the model has %d tensors, a llama2.c file %d", nt,
			       k->n);
	free(table);
	const int32_t fields[] = {(int32_t)L2C_MAGIC, 1,          m->d_model,    m->d_ff,
				  m->n_layers,        m->n_heads, m->n_kv_heads, m->vocab_size,
				  m->max_seq_len};
	memset(header, 0, L2C_HEADER);
	memcpy(header, fields, sizeof fields);
	header[sizeof fields] = m->tied_embeddings ? 1 : 0;
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
	unsigned char header[L2C_HEADER];
	int64_t total = 0;
	int rc = 0;
	if (snprintf(k->path, sizeof k->path, "%s", path) >= (int)sizeof k->path || !path[0])
		rc = pp_errorf(e, PP_EUSAGE, "output path '%s': empty or too long", path);
	if (!rc && o->with_adam)
		rc = pp_errorf(e, PP_EUSAGE,
			       "llama2.c files hold parameters only (no optimizer state)");
	if (!rc && o->dtype != TIO_F32)
		rc = pp_errorf(e, PP_EUSAGE, "llama2.c version 1 files are F32, not %s",
			       tio_dtype_name(o->dtype));
	if (!rc)
		rc = llama2c_model(o->model, e);
	if (!rc)
		rc = modeltable_check(o->model, o->tensors, o->n, e);
	if (!rc)
		rc = lay_out(k, o->model, header, &total, e);
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
		rc = fio_pwrite(k->fd, k->tmp, header, sizeof header, 0, e);
	if (!rc && ftruncate(k->fd, (off_t)total))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", k->tmp, strerror(errno));
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
