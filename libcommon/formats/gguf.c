/* GGUF (llama.cpp's format) as a tensorio source and sink.
 *
 * Source: architectures llama (Mistral's and Mixtral's GGUF files are llama
 * too; stacked experts become one tensor per expert), gemma and gpt2;
 * tensors F32, F16, BF16, F64, Q8_0, Q4_0 and Q4_1, dequantized to
 * fp32 one at a time from the mapped file. The tokenizer in the metadata
 * becomes a file tok_load reads (gguf_tok.c) in a temporary directory the
 * source removes when it closes.
 * Sink: architecture llama (the llama and mistral families, no sliding
 * window, and mixtral), GGUF v3, general.alignment 32, 2-D weights as F32,
 * F16, BF16 or Q8_0 and 1-D ones and routers as F32 (as llama.cpp's
 * converter writes them); header and tensor infos first, since the list
 * gives every offset, then each tensor as it comes, written at its offset
 * (an expert at its slice of its layer's stacked tensor) in a temporary
 * file renamed at the end.
 *
 * Two conventions differ from pp's (Hugging Face's):
 * - llama.cpp's converter permutes the rows of q and k for llama, from
 *   rotate-half to interleaved pairs: within each head of D rows, Hugging
 *   Face row j * D/2 + i is GGUF row 2i + j (i < D/2, j < 2); heads are
 *   n_heads for q, n_kv_heads for k.
 * - for gemma it stores RMSNorm weights as 1 + w. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../tok/tokenizer.h"
#include "gguf_file.h"
#include "tensorio.h"

/* ---- names: llama.cpp's and pp's ---- */

typedef enum { X_NONE, X_ROPE_Q, X_ROPE_K, X_NORM_OFFSET } xform;
typedef enum { AT_FIRST, AT_LAYER, AT_LAST } place;

/* A tensor of an architecture. The shape is pp's, in the model's sizes:
 * C d_model, V vocab_size, F d_ff, Q n_heads * head_dim, K n_kv_heads *
 * head_dim, A Q + 2K (GPT-2's c_attn), P max_seq_len, E n_experts; cols 0:
 * 1-D. moe: 0 in every model, D in dense models only, R (the router) in
 * mixtures of experts only, X one per expert in pp (the pp name's second
 * %d) stacked into one GGUF tensor of E slices (ne: cols, rows, E), as
 * llama.cpp stores Mixtral's experts. */
typedef struct {
	place at;
	const char *gguf, *pp; /* a layer's have one %d (X: pp's two) */
	char rows, cols;
	xform x;
	char moe;
} tname;

#define LAYER(g, p, r, c, x)                                                                       \
	{                                                                                          \
		AT_LAYER, "blk.%d." g, "model.layers.%d." p, r, c, x, 0                            \
	}
#define MLP(g, p, r, c, moe)                                                                       \
	{                                                                                          \
		AT_LAYER, "blk.%d." g, "model.layers.%d." p, r, c, X_NONE, moe                     \
	}
static const tname llama_names[] = {
	{AT_FIRST, "token_embd.weight", "model.embed_tokens.weight", 'V', 'C', X_NONE, 0},
	LAYER("attn_norm.weight", "input_layernorm.weight", 'C', 0, X_NONE),
	LAYER("attn_q.weight", "self_attn.q_proj.weight", 'Q', 'C', X_ROPE_Q),
	LAYER("attn_k.weight", "self_attn.k_proj.weight", 'K', 'C', X_ROPE_K),
	LAYER("attn_v.weight", "self_attn.v_proj.weight", 'K', 'C', X_NONE),
	LAYER("attn_output.weight", "self_attn.o_proj.weight", 'C', 'Q', X_NONE),
	LAYER("ffn_norm.weight", "post_attention_layernorm.weight", 'C', 0, X_NONE),
	MLP("ffn_gate.weight", "mlp.gate_proj.weight", 'F', 'C', 'D'),
	MLP("ffn_up.weight", "mlp.up_proj.weight", 'F', 'C', 'D'),
	MLP("ffn_down.weight", "mlp.down_proj.weight", 'C', 'F', 'D'),
	MLP("ffn_gate_inp.weight", "block_sparse_moe.gate.weight", 'E', 'C', 'R'),
	MLP("ffn_gate_exps.weight", "block_sparse_moe.experts.%d.w1.weight", 'F', 'C', 'X'),
	MLP("ffn_up_exps.weight", "block_sparse_moe.experts.%d.w3.weight", 'F', 'C', 'X'),
	MLP("ffn_down_exps.weight", "block_sparse_moe.experts.%d.w2.weight", 'C', 'F', 'X'),
	{AT_LAST, "output_norm.weight", "model.norm.weight", 'C', 0, X_NONE, 0},
	{AT_LAST, "output.weight", "lm_head.weight", 'V', 'C', X_NONE, 0},
	{0},
};
#undef MLP
static const tname gemma_names[] = {
	{AT_FIRST, "token_embd.weight", "model.embed_tokens.weight", 'V', 'C', X_NONE, 0},
	LAYER("attn_norm.weight", "input_layernorm.weight", 'C', 0, X_NORM_OFFSET),
	LAYER("attn_q.weight", "self_attn.q_proj.weight", 'Q', 'C', X_NONE),
	LAYER("attn_k.weight", "self_attn.k_proj.weight", 'K', 'C', X_NONE),
	LAYER("attn_v.weight", "self_attn.v_proj.weight", 'K', 'C', X_NONE),
	LAYER("attn_output.weight", "self_attn.o_proj.weight", 'C', 'Q', X_NONE),
	LAYER("ffn_norm.weight", "post_attention_layernorm.weight", 'C', 0, X_NORM_OFFSET),
	LAYER("ffn_gate.weight", "mlp.gate_proj.weight", 'F', 'C', X_NONE),
	LAYER("ffn_up.weight", "mlp.up_proj.weight", 'F', 'C', X_NONE),
	LAYER("ffn_down.weight", "mlp.down_proj.weight", 'C', 'F', X_NONE),
	{AT_LAST, "output_norm.weight", "model.norm.weight", 'C', 0, X_NORM_OFFSET, 0},
	{AT_LAST, "output.weight", "lm_head.weight", 'V', 'C', X_NONE, 0},
	{0},
};
#undef LAYER
#define LAYER(g, p, r, c)                                                                          \
	{                                                                                          \
		AT_LAYER, "blk.%d." g, "transformer.h.%d." p, r, c, X_NONE, 0                      \
	}
static const tname gpt2_names[] = {
	{AT_FIRST, "token_embd.weight", "transformer.wte.weight", 'V', 'C', X_NONE, 0},
	{AT_FIRST, "position_embd.weight", "transformer.wpe.weight", 'P', 'C', X_NONE, 0},
	LAYER("attn_norm.weight", "ln_1.weight", 'C', 0),
	LAYER("attn_norm.bias", "ln_1.bias", 'C', 0),
	LAYER("attn_qkv.weight", "attn.c_attn.weight", 'A', 'C'),
	LAYER("attn_qkv.bias", "attn.c_attn.bias", 'A', 0),
	LAYER("attn_output.weight", "attn.c_proj.weight", 'C', 'Q'),
	LAYER("attn_output.bias", "attn.c_proj.bias", 'C', 0),
	LAYER("ffn_norm.weight", "ln_2.weight", 'C', 0),
	LAYER("ffn_norm.bias", "ln_2.bias", 'C', 0),
	LAYER("ffn_up.weight", "mlp.c_fc.weight", 'F', 'C'),
	LAYER("ffn_up.bias", "mlp.c_fc.bias", 'F', 0),
	LAYER("ffn_down.weight", "mlp.c_proj.weight", 'C', 'F'),
	LAYER("ffn_down.bias", "mlp.c_proj.bias", 'C', 0),
	{AT_LAST, "output_norm.weight", "transformer.ln_f.weight", 'C', 0, X_NONE, 0},
	{AT_LAST, "output_norm.bias", "transformer.ln_f.bias", 'C', 0, X_NONE, 0},
	{AT_LAST, "output.weight", "lm_head.weight", 'V', 'C', X_NONE, 0},
	{0},
};
#undef LAYER

static bool is_head(const tname *t) { return !strcmp(t->gguf, "output.weight"); }

/* Whether model m has tensor t. */
static bool has(const tname *t, const pp_model_cfg *m)
{
	return !t->moe || (t->moe == 'D') == (m->n_experts == 0);
}

/* Tensors of model m in the table's architecture, pp's (one per expert) or
 * the file's (stacked: experts stacked into one); *per_layer: of a layer. */
static int64_t table_size(const tname *names, const pp_model_cfg *m, bool stacked, int *per_layer)
{
	int64_t n = 0;
	*per_layer = 0;
	for (const tname *t = names; t->gguf; t++) {
		if (!has(t, m))
			continue;
		if (t->at == AT_LAYER)
			*per_layer += t->moe == 'X' && !stacked ? m->n_experts : 1;
		else if (!(is_head(t) && m->tied_embeddings))
			n++;
	}
	return n + (int64_t)m->n_layers * *per_layer;
}

static int64_t dim_of(char d, const pp_model_cfg *m)
{
	const int64_t q = (int64_t)m->n_heads * m->head_dim,
		      k = (int64_t)m->n_kv_heads * m->head_dim;
	switch (d) {
	case 'C':
		return m->d_model;
	case 'V':
		return m->vocab_size;
	case 'F':
		return m->d_ff;
	case 'Q':
		return q;
	case 'K':
		return k;
	case 'A':
		return q + 2 * k;
	case 'P':
		return m->max_seq_len;
	case 'E':
		return m->n_experts;
	default:
		return 1;
	}
}

/* Whether name matches pattern (at most two %d): the numbers in *layer and
 * *expert (-1 where the pattern has none), written without leading zeros. */
static bool match(const char *pattern, const char *name, int *layer, int *expert)
{
	int *out[2] = {layer, expert};
	*layer = *expert = -1;
	for (int i = 0;; i++) {
		const char *d = strstr(pattern, "%d");
		if (!d || i == 2)
			return !strcmp(pattern, name);
		size_t pre = (size_t)(d - pattern);
		if (strncmp(pattern, name, pre) || name[pre] < '0' || name[pre] > '9')
			return false;
		char *end;
		long l = strtol(name + pre, &end, 10);
		if (l > 1 << 20 || (end - (name + pre) > 1 && name[pre] == '0'))
			return false;
		*out[i] = (int)l;
		pattern = d + 2;
		name = end;
	}
}

/* Rows of a q or k weight between Hugging Face's order and llama.cpp's, in
 * place: w is heads * D rows of row_bytes (floats, or a row's blocks);
 * to_gguf picks the direction. tmp holds one head (D rows). */
static void permute_rows(void *w, int heads, int64_t rows, size_t row_bytes, bool to_gguf,
			 void *tmp)
{
	const int64_t D = rows / heads, half = D / 2;
	for (int h = 0; h < heads; h++) {
		char *head = (char *)w + (size_t)(h * D) * row_bytes;
		memcpy(tmp, head, (size_t)D * row_bytes);
		for (int64_t i = 0; i < half; i++)
			for (int j = 0; j < 2; j++) {
				const int64_t hf = j * half + i, gg = 2 * i + j;
				memcpy(head + (size_t)(to_gguf ? gg : hf) * row_bytes,
				       (char *)tmp + (size_t)(to_gguf ? hf : gg) * row_bytes,
				       row_bytes);
			}
	}
}

/* A float32 value as the shortest decimal that reads back to it (the
 * 1e-05 a config said, not 9.99999974738e-06). */
static double shortest(float v)
{
	char buf[32];
	for (int p = 1; p <= 9; p++) {
		snprintf(buf, sizeof buf, "%.*g", p, (double)v);
		double d = strtod(buf, NULL);
		if ((float)d == v)
			return d;
	}
	return (double)v;
}

/* ---- source ---- */

typedef struct {
	gguf_file f;
	pp_model_cfg m;
	const gguf_tinfo **ti; /* per source tensor */
	xform *x;
	int *slice; /* per source tensor: its expert's slice of a stacked tensor, or -1 */
	char tokdir[PP_PATH_MAX];
} gguf_src;

/* Source tensor i's bytes and elements: a whole file tensor, or one
 * expert's slice of a stacked one (the slices are whole rows of blocks). */
static const uint8_t *src_bytes(const gguf_src *g, int i, uint64_t *nbytes, int64_t *numel)
{
	const gguf_tinfo *t = g->ti[i];
	const int64_t parts = g->slice[i] < 0 ? 1 : t->ne[2];
	*nbytes = t->nbytes / (uint64_t)parts;
	*numel = t->numel / parts;
	return gguf_tensor_data(&g->f, t) + (g->slice[i] < 0 ? 0 : (uint64_t)g->slice[i] * *nbytes);
}

static void src_close(tio_source *s)
{
	if (!s)
		return;
	gguf_src *g = s->impl;
	if (g) {
		if (g->tokdir[0])
			fs_rm_rf(g->tokdir);
		gguf_file_close(&g->f);
		free(g->ti);
		free(g->x);
		free(g->slice);
		free(g);
	}
	json_decref(s->meta.model);
	free(s->tensors);
	free(s);
}

static int src_read(tio_source *s, int i, const char *group, float *out, pp_err *e)
{
	gguf_src *g = s->impl;
	if (i < 0 || i >= s->n)
		return pp_errorf(e, PP_EUSAGE, "%s: no tensor %d", g->f.path, i);
	if (strcmp(group, "params"))
		return pp_errorf(e, PP_EUSAGE, "%s: a GGUF file holds parameters only, no %s",
				 g->f.path, group);
	const gguf_tinfo *t = g->ti[i];
	uint64_t nbytes;
	int64_t numel;
	const uint8_t *data = src_bytes(g, i, &nbytes, &numel);
	gguf_decode(t->type, data, out, numel);
	const tio_tensor *d = &s->tensors[i];
	if (g->x[i] == X_ROPE_Q || g->x[i] == X_ROPE_K) {
		const int heads = g->x[i] == X_ROPE_Q ? g->m.n_heads : g->m.n_kv_heads;
		float *tmp = malloc((size_t)(d->shape[0] / heads * d->shape[1]) * sizeof(float));
		if (!tmp)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		permute_rows(out, heads, d->shape[0], (size_t)d->shape[1] * sizeof(float), false,
			     tmp);
		free(tmp);
	} else if (g->x[i] == X_NORM_OFFSET) {
		for (int64_t k = 0; k < numel; k++)
			out[k] -= 1.0f;
	}
	return 0;
}

/* The stored bytes, q and k rows back in Hugging Face's order (whole rows
 * of blocks move); gemma's 1 + w norms are not stored as pp's. */
static int src_read_raw(tio_source *s, int i, void *out, pp_err *e)
{
	gguf_src *g = s->impl;
	if (i < 0 || i >= s->n)
		return pp_errorf(e, PP_EUSAGE, "%s: no tensor %d", g->f.path, i);
	const tio_tensor *d = &s->tensors[i];
	if (g->x[i] == X_NORM_OFFSET || !tio_raw_bytes(d))
		return pp_errorf(e, PP_EUSAGE, "%s: %s cannot be read as stored", g->f.path,
				 d->name);
	uint64_t nbytes;
	int64_t numel;
	const uint8_t *data = src_bytes(g, i, &nbytes, &numel);
	memcpy(out, data, nbytes);
	if (g->x[i] == X_ROPE_Q || g->x[i] == X_ROPE_K) {
		const int heads = g->x[i] == X_ROPE_Q ? g->m.n_heads : g->m.n_kv_heads;
		const size_t row = nbytes / (size_t)d->shape[0];
		void *tmp = malloc((size_t)(d->shape[0] / heads) * row);
		if (!tmp)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		permute_rows(out, heads, d->shape[0], row, false, tmp);
		free(tmp);
	}
	return 0;
}

/* general.architecture -> its names, family and metadata prefix */
typedef struct {
	const char *arch;
	const tname *names;
} arch_desc;

static const arch_desc archs[] = {
	{"llama", llama_names},
	{"gemma", gemma_names},
	{"gpt2", gpt2_names},
};

/* key "<arch>.<rest>" */
static const char *akey(const arch_desc *a, const char *rest)
{
	static __thread char buf[128];
	snprintf(buf, sizeof buf, "%s.%s", a->arch, rest);
	return buf;
}

/* A real-valued key: float32 ones as their shortest decimal. */
static int get_real(const gguf_file *f, const char *key, bool required, double *out, pp_err *e)
{
	int rc = gguf_get_float(f, key, required, out, e);
	const gguf_kv *kv = gguf_find(f, key);
	if (!rc && kv && kv->type == GV_F32)
		*out = shortest((float)*out);
	return rc;
}

static int get_int(const gguf_file *f, const char *key, bool required, uint64_t lo, uint64_t hi,
		   int *out, pp_err *e)
{
	uint64_t v = 0;
	int rc = gguf_get_uint(f, key, required, &v, e);
	if (rc || !gguf_find(f, key))
		return rc;
	if (v < lo || v > hi)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: metadata %s is %llu, expected %llu to %llu",
			       f->path, key, (unsigned long long)v, (unsigned long long)lo,
			       (unsigned long long)hi);
	*out = (int)v;
	return rc;
}

static const gguf_tinfo *find_tensor(const gguf_file *f, const char *name)
{
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if (gguf_str_is(f->ti[i].name, name))
			return &f->ti[i];
	return NULL;
}

/* pp's "model" object from the metadata; *tied from the tensors. */
static int model_json(const gguf_file *f, const arch_desc *a, json_t **out, pp_err *e)
{
	const int big = 1 << 24; /* bound on every size: more than any real model's */
	int C = 0, L = 0, F = 0, H = 0, KV = 0, ctx = 0, rope_dim = -1, klen = -1, vlen = -1;
	int experts = 0, used = 0, vocab_kv = -1;
	double eps = -1, theta = 10000;
	int rc = 0;
	if ((rc = get_int(f, akey(a, "embedding_length"), true, 1, big, &C, e)) ||
	    (rc = get_int(f, akey(a, "block_count"), true, 1, 1 << 16, &L, e)) ||
	    (rc = get_int(f, akey(a, "feed_forward_length"), true, 1, big, &F, e)) ||
	    (rc = get_int(f, akey(a, "attention.head_count"), true, 1, 1 << 16, &H, e)) ||
	    (rc = get_int(f, akey(a, "context_length"), true, 1, big, &ctx, e)))
		return rc;
	KV = H;
	if ((rc = get_int(f, akey(a, "attention.head_count_kv"), false, 1, 1 << 16, &KV, e)) ||
	    (rc = get_int(f, akey(a, "rope.dimension_count"), false, 0, big, &rope_dim, e)) ||
	    (rc = get_int(f, akey(a, "attention.key_length"), false, 1, big, &klen, e)) ||
	    (rc = get_int(f, akey(a, "attention.value_length"), false, 1, big, &vlen, e)) ||
	    (rc = get_int(f, akey(a, "expert_count"), false, 0, big, &experts, e)) ||
	    (rc = get_int(f, akey(a, "vocab_size"), false, 1, big, &vocab_kv, e)) ||
	    (rc = get_real(f, akey(a, "rope.freq_base"), false, &theta, e)))
		return rc;
	const bool gpt = !strcmp(a->arch, "gpt2");
	const char *eps_key = gpt ? "attention.layer_norm_epsilon"
				  : "attention.layer_norm_rms_epsilon";
	rc = get_real(f, akey(a, eps_key), true, &eps, e);
	if (rc)
		return rc;
	if (!(eps > 0 && eps < 1))
		return pp_errorf(e, PP_ERUNTIME, "%s: the norm epsilon %g is not in (0, 1)",
				 f->path, eps);
	if (!(theta > 0 && theta < 1e30))
		return pp_errorf(e, PP_ERUNTIME, "%s: rope.freq_base %g is not a positive number",
				 f->path, theta);
	if (experts > 0 && strcmp(a->arch, "llama"))
		return pp_errorf(e, PP_EUSAGE,
				 "%s: a mixture of %d experts in architecture %s: pp imports the "
				 "experts of llama files (Mixtral's) only",
				 f->path, experts, a->arch);
	if (experts > 0 &&
	    (rc = get_int(f, akey(a, "expert_used_count"), true, 1, experts, &used, e)))
		return rc;
	gguf_str scaling = {"none", 4};
	if ((rc = gguf_get_string(f, akey(a, "rope.scaling.type"), false, &scaling, e)))
		return rc;
	if (!gguf_str_is(scaling, "none"))
		return pp_errorf(e, PP_EUSAGE,
				 "%s: %s is '%.*s': pp has no RoPE scaling (plain RoPE only)",
				 f->path, akey(a, "rope.scaling.type"),
				 (int)(scaling.n > 32 ? 32 : scaling.n), scaling.s);
	if (find_tensor(f, "rope_freqs.weight"))
		return pp_errorf(
			e, PP_EUSAGE,
			"%s: tensor rope_freqs.weight (Llama 3.1's RoPE frequency factors): "
			"pp has no RoPE scaling (plain RoPE only)",
			f->path);
	if (klen > 0 && vlen > 0 && klen != vlen)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: key_length %d and value_length %d differ: pp's "
				 "heads have one size",
				 f->path, klen, vlen);
	const int D = klen > 0 ? klen : vlen > 0 ? vlen : C / H;
	if (klen <= 0 && vlen <= 0 && C % H)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: embedding_length %d is not a multiple of the %d heads",
				 f->path, C, H);
	if (H % KV)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: %d heads are not a multiple of the %d kv heads", f->path, H,
				 KV);
	if (!gpt && rope_dim >= 0 && rope_dim != D)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: rope.dimension_count %d is not the head size %d: pp rotates "
				 "whole heads",
				 f->path, rope_dim, D);
	if (!gpt && D % 2)
		return pp_errorf(e, PP_ERUNTIME, "%s: odd head size %d: RoPE needs pairs", f->path,
				 D);
	const gguf_tinfo *emb = find_tensor(f, "token_embd.weight");
	if (!emb)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: the required tensor token_embd.weight is missing", f->path);
	if (emb->ndim != 2 || emb->ne[0] != C || emb->ne[1] > big)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: token_embd.weight is not (vocabulary, %d), as embedding_length says",
			f->path, C);
	const int V = (int)emb->ne[1];
	if (vocab_kv > 0 && vocab_kv != V)
		return pp_errorf(e, PP_ERUNTIME, "%s: %s is %d but token_embd.weight has %d rows",
				 f->path, akey(a, "vocab_size"), vocab_kv, V);
	/* tied: no output.weight, or (GPT-2's converter) a copy of the embedding */
	const gguf_tinfo *head = find_tensor(f, "output.weight");
	const bool tied = !head || (gpt && head->type == emb->type && head->nbytes == emb->nbytes &&
				    head->ndim == 2 && head->ne[0] == emb->ne[0] &&
				    !memcmp(gguf_tensor_data(f, head), gguf_tensor_data(f, emb),
					    emb->nbytes));
	json_t *m = json_pack("{sisisisisisisisbsf}", "d_model", C, "n_heads", H, "n_kv_heads", KV,
			      "head_dim", D, "d_ff", F, "n_layers", L, "vocab_size", V,
			      "tied_embeddings", tied, "norm_eps", eps);
	if (m)
		json_object_set_new(m, "max_seq_len", json_integer(ctx));
	if (m && gpt)
		json_object_update_new(m,
				       json_pack("{sssssssssb}", "family", "gpt", "mlp", "gelu",
						 "norm", "layernorm", "pos", "learned", "bias", 1));
	else if (m && !strcmp(a->arch, "gemma"))
		json_object_update_new(m, json_pack("{sssssssssfsfsb}", "family", "gemma", "mlp",
						    "geglu", "norm", "rmsnorm", "pos", "rope",
						    "rope_theta", theta, "norm_offset", 1.0,
						    "embed_scale", 1));
	else if (m)
		json_object_update_new(m, json_pack("{sssssssssf}", "family",
						    experts ? "mixtral" : "llama", "mlp", "swiglu",
						    "norm", "rmsnorm", "pos", "rope", "rope_theta",
						    theta));
	/* llama.cpp's mixture: every layer, top-k softmax, dropless */
	if (m && experts)
		json_object_update_new(m,
				       json_pack("{sisisiss}", "n_experts", experts, "top_k", used,
						 "moe_every", 1, "router", "topk_softmax"));
	if (!m)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	*out = m;
	return 0;
}

static int cmp_tinfo(const void *x, const void *y)
{
	const gguf_tinfo *a = *(const gguf_tinfo *const *)x, *b = *(const gguf_tinfo *const *)y;
	int r = memcmp(a->name.s, b->name.s, a->name.n < b->name.n ? a->name.n : b->name.n);
	return r ? r : a->name.n < b->name.n ? -1 : a->name.n > b->name.n;
}

/* Every tensor the model has, in model order, from the file; every tensor
 * of the file used (GPT-2's copy of a tied embedding aside). */
static int map_tensors(tio_source *s, const arch_desc *a, pp_err *e)
{
	gguf_src *g = s->impl;
	const gguf_file *f = &g->f;
	const pp_model_cfg *m = &g->m;
	int layer;
	const int64_t n = table_size(a->names, m, false, &layer);
	const int64_t in_file = table_size(a->names, m, true, &layer);
	if ((uint64_t)in_file > f->n_tensors)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: block_count %d needs %lld tensors (%d per block), the file has "
			"%llu",
			f->path, m->n_layers, (long long)in_file, layer,
			(unsigned long long)f->n_tensors);
	s->tensors = calloc((size_t)n + 1, sizeof *s->tensors);
	g->ti = calloc((size_t)n + 1, sizeof *g->ti);
	g->x = calloc((size_t)n + 1, sizeof *g->x);
	g->slice = calloc((size_t)n + 1, sizeof *g->slice);
	const gguf_tinfo **by_name = malloc((f->n_tensors + 1) * sizeof *by_name);
	uint8_t *used = calloc(f->n_tensors + 1, 1);
	int rc = 0;
	if (!s->tensors || !g->ti || !g->x || !g->slice || !by_name || !used)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (uint64_t i = 0; !rc && i < f->n_tensors; i++)
		by_name[i] = &f->ti[i];
	if (!rc)
		qsort(by_name, f->n_tensors, sizeof *by_name, cmp_tinfo);
	for (int pass = 0; pass < 3 && !rc; pass++) {
		const int layers = pass == 1 ? m->n_layers : 1;
		for (int l = 0; l < layers && !rc; l++)
			for (const tname *t = a->names; t->gguf && !rc; t++) {
				if ((int)t->at != pass || (is_head(t) && m->tied_embeddings) ||
				    !has(t, m))
					continue;
				const int slices = t->moe == 'X' ? m->n_experts : 1;
				char gn[128];
				snprintf(gn, sizeof gn, t->gguf, l);
				gguf_tinfo key = {.name = {gn, strlen(gn)}};
				const gguf_tinfo *kp = &key,
						 **hit = bsearch(&kp, by_name, f->n_tensors,
								 sizeof *by_name, cmp_tinfo);
				tio_tensor *d = &s->tensors[s->n];
				snprintf(d->name, sizeof d->name, t->pp, l, 0);
				if (!hit) {
					rc = pp_errorf(e, PP_ERUNTIME,
						       "%s: tensor %s (pp's %s) is missing",
						       f->path, gn, d->name);
					break;
				}
				const gguf_tinfo *ti = *hit;
				used[ti - f->ti] = 1;
				d->ndim = t->cols ? 2 : 1;
				d->shape[0] = dim_of(t->rows, m);
				d->shape[1] = t->cols ? dim_of(t->cols, m) : 0;
				const int nd = d->ndim + (t->moe == 'X');
				const bool ok = ti->ndim == nd &&
						ti->ne[0] == d->shape[d->ndim - 1] &&
						(d->ndim == 1 || ti->ne[1] == d->shape[0]) &&
						(t->moe != 'X' || ti->ne[2] == slices);
				if (!ok) {
					int64_t ne[GGUF_MAX_DIMS],
						want[3] = {slices, d->shape[0], d->shape[1]};
					for (int j = 0; j < ti->ndim; j++)
						ne[j] = ti->ne[ti->ndim - 1 - j];
					char got[96], wants[64];
					rc = pp_errorf(
						e, PP_ERUNTIME,
						"%s: tensor %s is %s (ne reversed), the metadata "
						"makes it %s",
						f->path, gn,
						pp_shape_str(got, sizeof got, ti->ndim, ne),
						t->moe == 'X'
							? pp_shape_str(wants, sizeof wants, 3, want)
							: pp_shape_str(wants, sizeof wants, d->ndim,
								       d->shape));
					break;
				}
				/* one source tensor per expert, each a slice of the file's */
				for (int x = 0; x < slices; x++) {
					tio_tensor *dx = &s->tensors[s->n];
					*dx = *d;
					snprintf(dx->name, sizeof dx->name, t->pp, l, x);
					dx->dtype = ti->type->dtype;
					g->ti[s->n] = ti;
					g->x[s->n] = t->x;
					g->slice[s->n] = t->moe == 'X' ? x : -1;
					s->n++;
				}
			}
	}
	/* GPT-2's converter stores a tied embedding twice */
	const gguf_tinfo *head = find_tensor(f, "output.weight");
	if (!rc && head && m->tied_embeddings)
		used[head - f->ti] = 1;
	for (uint64_t i = 0; !rc && i < f->n_tensors; i++)
		if (!used[i])
			rc = pp_errorf(
				e, PP_EUSAGE,
				"%s: tensor '%.*s' has no counterpart in pp's %s model (%s, %d "
				"layers)",
				f->path, (int)(f->ti[i].name.n > 64 ? 64 : f->ti[i].name.n),
				f->ti[i].name.s, pp_family_name(m->family), a->arch, m->n_layers);
	free(by_name);
	free(used);
	return rc;
}

/* The tokenizer into a directory of the source's own; checked with tok_load. */
static int export_tokenizer(tio_source *s, pp_err *e)
{
	gguf_src *g = s->impl;
	const char *tmp = getenv("TMPDIR");
	snprintf(g->tokdir, sizeof g->tokdir, "%s/pp-gguf-tokenizer.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g->tokdir)) {
		int err = errno;
		g->tokdir[0] = 0;
		return pp_errorf(e, PP_ERUNTIME, "cannot make a directory for the tokenizer: %s",
				 strerror(err));
	}
	int rc = gguf_tok_export(&g->f, g->tokdir, g->m.vocab_size, s->meta.tokenizer,
				 sizeof s->meta.tokenizer, &s->meta.add_bos, e);
	if (rc || !s->meta.tokenizer[0])
		return rc;
	pp_tokenizer *tk;
	if ((rc = tok_load(&tk, s->meta.tokenizer, e)))
		return pp_err_prefix(e, "%s: its tokenizer, written as a file", g->f.path);
	if (tok_vocab_size(tk) > g->m.vocab_size)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: the tokenizer has %d tokens, the model %d",
			       g->f.path, tok_vocab_size(tk), g->m.vocab_size);
	tok_free(tk);
	return rc;
}

int tio_open_gguf(const char *path, tio_source **out, pp_err *e)
{
	*out = NULL;
	tio_source *s = calloc(1, sizeof *s);
	gguf_src *g = calloc(1, sizeof *g);
	if (!s || !g) {
		free(s);
		free(g);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	s->format = "gguf";
	s->impl = g;
	s->read = src_read;
	s->read_raw = src_read_raw;
	s->close = src_close;
	int rc = gguf_file_open(&g->f, path, e);
	const arch_desc *a = NULL;
	gguf_str arch = {0};
	if (!rc)
		rc = gguf_get_string(&g->f, "general.architecture", true, &arch, e);
	for (size_t i = 0; !rc && i < sizeof archs / sizeof *archs && !a; i++)
		if (gguf_str_is(arch, archs[i].arch))
			a = &archs[i];
	if (!rc && !a)
		rc = pp_errorf(e, PP_EUSAGE,
			       "%s: general.architecture '%.*s': pp imports llama (and Mistral's "
			       "llama files), gemma and gpt2",
			       path, (int)(arch.n > 32 ? 32 : arch.n), arch.s);
	if (!rc)
		rc = model_json(&g->f, a, &s->meta.model, e);
	if (!rc && (rc = tio_model_cfg(&s->meta, &g->m, e)))
		pp_err_prefix(e, "%s: the model its metadata describes", path);
	if (!rc)
		rc = map_tensors(s, a, e);
	if (!rc)
		rc = export_tokenizer(s, e);
	if (rc) {
		if (!strstr(e->msg, path)) /* out of memory, a temporary directory */
			pp_err_prefix(e, "%s", path);
		src_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* ---- sink ---- */

/* A tensor of the file: one of pp's, or every expert's of a layer stacked
 * (slices of slice_bytes each, in expert order). */
typedef struct {
	char name[128];
	const gguf_type *type;
	int64_t rows, cols, slices;   /* pp's shape (rows 1 for 1-D): GGUF's ne[1], ne[0]; ne[2] */
	uint64_t offset, slice_bytes; /* in the data section */
} sink_file_tensor;

/* A tensor of pp's and where it goes. */
typedef struct {
	char name[128];
	xform x;
	int file;  /* index into gguf_sink.ft */
	int slice; /* its slice of a stacked tensor, 0 otherwise */
	bool done;
} sink_tensor;

typedef struct {
	char path[PP_PATH_MAX], tmp[PP_PATH_MAX + 16];
	FILE *out;
	pp_model_cfg m;
	sink_tensor *t;
	int n, written;
	sink_file_tensor *ft;
	int n_ft;
	uint64_t data, end; /* file offsets: the data section and its end */
} gguf_sink;

static void sink_free(gguf_sink *k, bool remove)
{
	if (k->out)
		fclose(k->out);
	if (remove && k->tmp[0])
		unlink(k->tmp);
	free(k->t);
	free(k->ft);
	free(k);
}

static void sink_abort(tio_sink *s)
{
	sink_free(s->impl, true);
	free(s);
}

static const uint8_t zeros[32];

/* Each tensor is written where the tensor infos put it (an expert at its
 * slice), in whatever order the tensors come. */
static int sink_put(tio_sink *s, const tio_tensor *t, const float *param, const float *m,
		    const float *v, pp_err *e)
{
	gguf_sink *k = s->impl;
	(void)m;
	(void)v;
	int i = 0;
	while (i < k->n && strcmp(t->name, k->t[i].name))
		i++;
	if (i == k->n)
		return pp_errorf(e, PP_EUSAGE, "%s: not in the list of tensors", t->name);
	sink_tensor *st = &k->t[i];
	if (st->done)
		return pp_errorf(e, PP_EUSAGE, "%s: given twice", t->name);
	const sink_file_tensor *ft = &k->ft[st->file];
	const int64_t n = ft->rows * ft->cols;
	if (tio_numel(t) != n)
		return pp_errorf(e, PP_EUSAGE, "%s: %lld elements, expected %lld", t->name,
				 (long long)tio_numel(t), (long long)n);
	float *w = NULL, *tmp = NULL;
	const float *src = param;
	if (st->x == X_ROPE_Q || st->x == X_ROPE_K) {
		const int heads = st->x == X_ROPE_Q ? k->m.n_heads : k->m.n_kv_heads;
		w = malloc((size_t)n * sizeof(float));
		tmp = malloc((size_t)(ft->rows / heads * ft->cols) * sizeof(float));
		if (!w || !tmp) {
			free(w);
			free(tmp);
			return pp_errorf(e, PP_ERUNTIME, "out of memory for %s", t->name);
		}
		memcpy(w, param, (size_t)n * sizeof(float));
		permute_rows(w, heads, ft->rows, (size_t)ft->cols * sizeof(float), true, tmp);
		src = w;
	}
	void *buf = malloc(ft->slice_bytes ? ft->slice_bytes : 1);
	int rc = 0;
	if (!buf)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory for %s", t->name);
	if (!rc) {
		gguf_encode(ft->type, src, buf, n);
		const uint64_t at = k->data + ft->offset + (uint64_t)st->slice * ft->slice_bytes;
		if (fseeko(k->out, (off_t)at, SEEK_SET) ||
		    fwrite(buf, 1, ft->slice_bytes, k->out) != ft->slice_bytes)
			rc = pp_errorf(e, PP_ERUNTIME, "%s: write: %s", k->tmp, strerror(errno));
	}
	free(buf);
	free(w);
	free(tmp);
	if (!rc) {
		st->done = true;
		k->written++;
	}
	return rc;
}

static int sink_finish(tio_sink *s, pp_err *e)
{
	gguf_sink *k = s->impl;
	int rc = 0;
	for (int i = 0; i < k->n && !rc; i++)
		if (!k->t[i].done)
			rc = pp_errorf(e, PP_EUSAGE, "%s: %s was not given", k->path, k->t[i].name);
	/* the last tensor's padding */
	if (!rc &&
	    (fflush(k->out) || ftruncate(fileno(k->out), (off_t)k->end) || fsync(fileno(k->out))))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", k->tmp, strerror(errno));
	if (k->out && fclose(k->out) && !rc)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", k->tmp, strerror(errno));
	k->out = NULL;
	if (!rc && !(rc = fs_rename_durable(k->tmp, k->path, e)))
		k->tmp[0] = 0;
	sink_free(k, true);
	free(s);
	return rc;
}

/* general.file_type: llama.cpp's llama_ftype for the 2-D weights' type */
static uint32_t file_type(const gguf_type *t)
{
	switch (t->id) {
	case GGML_F16:
		return 1;
	case GGML_Q8_0:
		return 7;
	case GGML_BF16:
		return 32;
	default:
		return 0;
	}
}

/* The metadata: llama's hyperparameters and the tokenizer. */
static int sink_metadata(gguf_buf *b, const tio_sink_opts *o, const gguf_type *wt, pp_err *e)
{
	const pp_model_cfg *m = o->model;
	const char *preset = json_string_value(
		json_object_get(o->meta ? o->meta->model : NULL, "preset"));
	gguf_kv_str(b, "general.architecture", "llama");
	gguf_kv_str(b, "general.name", preset && *preset ? preset : "pp");
	gguf_kv_u32(b, "general.alignment", 32);
	gguf_kv_u32(b, "general.file_type", file_type(wt));
	if (wt->block > 1)
		gguf_kv_u32(b, "general.quantization_version", 2);
	gguf_kv_u32(b, "llama.context_length", (uint32_t)m->max_seq_len);
	gguf_kv_u32(b, "llama.embedding_length", (uint32_t)m->d_model);
	gguf_kv_u32(b, "llama.block_count", (uint32_t)m->n_layers);
	gguf_kv_u32(b, "llama.feed_forward_length", (uint32_t)m->d_ff);
	gguf_kv_u32(b, "llama.rope.dimension_count", (uint32_t)m->head_dim);
	gguf_kv_u32(b, "llama.attention.head_count", (uint32_t)m->n_heads);
	gguf_kv_u32(b, "llama.attention.head_count_kv", (uint32_t)m->n_kv_heads);
	if (m->head_dim * m->n_heads != m->d_model) {
		gguf_kv_u32(b, "llama.attention.key_length", (uint32_t)m->head_dim);
		gguf_kv_u32(b, "llama.attention.value_length", (uint32_t)m->head_dim);
	}
	gguf_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", (float)m->norm_eps);
	gguf_kv_f32(b, "llama.rope.freq_base", (float)m->rope_theta);
	gguf_kv_u32(b, "llama.vocab_size", (uint32_t)m->vocab_size);
	if (m->n_experts) {
		gguf_kv_u32(b, "llama.expert_count", (uint32_t)m->n_experts);
		gguf_kv_u32(b, "llama.expert_used_count", (uint32_t)m->top_k);
	}
	const char *tp = o->meta ? o->meta->tokenizer : "";
	if (!tp[0]) { /* llama.cpp requires the key */
		gguf_kv_str(b, "tokenizer.ggml.model", "no_vocab");
		return b->oom ? pp_errorf(e, PP_ERUNTIME, "out of memory") : 0;
	}
	pp_tokenizer *tk;
	int rc = tok_load(&tk, tp, e);
	if (!rc) {
		rc = gguf_tok_emit(b, tk, m->vocab_size, o->meta->add_bos || tok_adds_bos(tk), e);
		tok_free(tk);
	}
	return rc ? pp_err_prefix(e, "tokenizer %s", tp) : 0;
}

int tio_sink_gguf(const char *path, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	*out = NULL;
	const pp_model_cfg *m = o->model;
	const gguf_type *wt = gguf_type_for(o->dtype);
	if (!wt)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: GGUF export writes F32, F16, BF16 or Q8_0, not %s", path,
				 tio_dtype_name(o->dtype));
	const bool moe = m->n_experts > 0;
	if (m->family != PP_FAMILY_LLAMA && m->family != PP_FAMILY_MISTRAL &&
	    m->family != PP_FAMILY_MIXTRAL)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: GGUF export writes llama models (the llama family, mistral "
				 "without a sliding window, mixtral), not %s",
				 path, pp_family_name(m->family));
	const char *unlike = m->bias                   ? "biases"
			     : m->norm != PP_NORM_RMS  ? "a norm other than RMSNorm"
			     : m->mlp != PP_MLP_SWIGLU ? "an MLP other than SwiGLU"
			     : m->pos != PP_POS_ROPE   ? "positions other than RoPE"
			     : m->norm_offset != 0     ? "norms of 1 + w"
			     : m->embed_scale          ? "scaled embeddings"
						       : NULL;
	if (unlike)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: this %s model has %s, which llama.cpp's llama architecture "
				 "does not",
				 path, pp_family_name(m->family), unlike);
	if (m->sliding_window)
		return pp_errorf(
			e, PP_EUSAGE,
			"%s: a sliding window of %d: llama.cpp's llama architecture has none", path,
			m->sliding_window);
	if (moe &&
	    (m->moe_every > 1 || m->router != PP_ROUTE_TOPK_SOFTMAX || m->capacity_factor > 0))
		return pp_errorf(
			e, PP_EUSAGE,
			"%s: llama.cpp's mixtures of experts have experts in every layer, "
			"Mixtral's top-k softmax routing and no capacity: not model.moe_every "
			"%d, model.router %s, model.capacity_factor %g",
			path, m->moe_every,
			m->router == PP_ROUTE_TOPK_SOFTMAX ? "topk_softmax" : "softmax_topk",
			m->capacity_factor);
	gguf_sink *k = calloc(1, sizeof *k);
	tio_sink *s = calloc(1, sizeof *s);
	if (k) {
		k->t = calloc((size_t)o->n + 1, sizeof *k->t);
		k->ft = calloc((size_t)o->n + 1, sizeof *k->ft);
	}
	if (!k || !s || !k->t || !k->ft) {
		if (k) {
			free(k->t);
			free(k->ft);
		}
		free(k);
		free(s);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	snprintf(k->path, sizeof k->path, "%s", path);
	k->m = *m;
	k->n = o->n;
	gguf_buf meta = {0}, infos = {0};
	int rc = sink_metadata(&meta, o, wt, e);
	/* pp's tensors to the file's, the experts of a layer's projection
	 * into one, in the order they first come */
	for (int i = 0; !rc && i < o->n; i++) {
		const tio_tensor *t = &o->tensors[i];
		sink_tensor *st = &k->t[i];
		const tname *hit = NULL;
		int layer = -1, expert = -1;
		for (const tname *c = llama_names; c->gguf && !hit; c++)
			if (has(c, m) && match(c->pp, t->name, &layer, &expert))
				hit = c;
		if (!hit || layer >= m->n_layers || expert >= m->n_experts ||
		    t->ndim != (hit->cols ? 2 : 1)) {
			rc = pp_errorf(e, PP_EUSAGE,
				       "%s: tensor %s has no GGUF name in llama.cpp's llama", path,
				       t->name);
			break;
		}
		char gn[128];
		snprintf(gn, sizeof gn, hit->gguf, layer);
		snprintf(st->name, sizeof st->name, "%s", t->name);
		st->x = hit->x;
		st->slice = hit->moe == 'X' ? expert : 0;
		st->file = 0;
		while (st->file < k->n_ft && strcmp(k->ft[st->file].name, gn))
			st->file++;
		sink_file_tensor *ft = &k->ft[st->file];
		const int64_t rows = t->ndim == 2 ? t->shape[0] : 1,
			      cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
		if (st->file < k->n_ft) {
			if (ft->rows != rows || ft->cols != cols) {
				rc = pp_errorf(
					e, PP_EUSAGE,
					"%s: tensor %s is not shaped as the other experts of %s",
					path, t->name, gn);
				break;
			}
			continue;
		}
		k->n_ft++;
		snprintf(ft->name, sizeof ft->name, "%s", gn);
		ft->rows = rows;
		ft->cols = cols;
		ft->slices = hit->moe == 'X' ? m->n_experts : 1;
		/* norms and routers in F32, as llama.cpp's converter writes them;
		 * rows a block format cannot split go F16, as it does too */
		ft->type = t->ndim == 1 || hit->moe == 'R' ? gguf_type_of(GGML_F32)
			   : cols % wt->block              ? gguf_type_of(GGML_F16)
							   : wt;
		ft->slice_bytes = gguf_nbytes(ft->type, rows * cols);
	}
	uint64_t offset = 0;
	for (int i = 0; !rc && i < k->n_ft; i++) {
		sink_file_tensor *ft = &k->ft[i];
		const uint32_t nd = ft->slices > 1 ? 3 : ft->rows > 1 ? 2 : 1;
		ft->offset = offset;
		gguf_put_str(&infos, ft->name, strlen(ft->name));
		gguf_put_u32(&infos, nd);
		gguf_put_u64(&infos, (uint64_t)ft->cols);
		if (nd >= 2)
			gguf_put_u64(&infos, (uint64_t)ft->rows);
		if (nd == 3)
			gguf_put_u64(&infos, (uint64_t)ft->slices);
		gguf_put_u32(&infos, ft->type->id);
		gguf_put_u64(&infos, offset);
		offset += (ft->slice_bytes * (uint64_t)ft->slices + 31) / 32 * 32;
	}
	/* the whole model, each tensor once */
	int per_layer;
	const int64_t want = table_size(llama_names, m, false, &per_layer);
	for (int i = 0; !rc && i < o->n; i++)
		for (int j = 0; j < i && !rc; j++)
			if (!strcmp(k->t[i].name, k->t[j].name))
				rc = pp_errorf(e, PP_EUSAGE, "%s: tensor %s is listed twice", path,
					       k->t[i].name);
	if (!rc && o->n != want)
		rc = pp_errorf(e, PP_EUSAGE, "%s: %d tensors, the model has %lld", path, o->n,
			       (long long)want);
	if (!rc && (meta.oom || infos.oom))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (!rc) {
		snprintf(k->tmp, sizeof k->tmp, "%s.tmp%ld", path, (long)getpid());
		int fd = open(k->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
		if (fd < 0 || !(k->out = fdopen(fd, "wb"))) {
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot create %s: %s", path, k->tmp,
				       strerror(errno));
			if (fd >= 0)
				close(fd);
			if (fd < 0)
				k->tmp[0] = 0;
		}
	}
	if (!rc) {
		/* header, metadata, tensor infos, padding to the data section */
		uint32_t version = 3;
		uint64_t nt = (uint64_t)k->n_ft, nkv = meta.n_kv;
		size_t head = 4 + 4 + 8 + 8 + meta.n + infos.n, pad = (32 - head % 32) % 32;
		k->data = head + pad;
		k->end = k->data + offset;
		if (fwrite("GGUF", 1, 4, k->out) != 4 || fwrite(&version, 4, 1, k->out) != 1 ||
		    fwrite(&nt, 8, 1, k->out) != 1 || fwrite(&nkv, 8, 1, k->out) != 1 ||
		    fwrite(meta.p, 1, meta.n, k->out) != meta.n ||
		    fwrite(infos.p, 1, infos.n, k->out) != infos.n ||
		    fwrite(zeros, 1, pad, k->out) != pad)
			rc = pp_errorf(e, PP_ERUNTIME, "%s: write: %s", k->tmp, strerror(errno));
	}
	free(meta.p);
	free(infos.p);
	if (rc) {
		sink_free(k, true);
		free(s);
		return rc;
	}
	s->impl = k;
	s->put = sink_put;
	s->finish = sink_finish;
	s->abort = sink_abort;
	*out = s;
	return 0;
}
