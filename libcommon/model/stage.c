#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/rng.h"
#include "../config/hparams.h"
#include "../config/layout.h"
#include "moe.h"

/* Shapes below are this rank's: N = B*T rows, C = d_model, D = head_dim,
 * Hq and Hkv local heads, QKV = (Hq+2Hkv)*D, HD = Hq*D, F local mlp width,
 * UP = 2F (gated) or F, V local vocab, L = layers of this stage.
 *
 * Tensor parallelism follows Megatron: q/k/v and gate/up (or c_fc) are
 * column-parallel (each rank holds a block of output rows), o and down are
 * row-parallel (a block of input columns, outputs summed across tp), the
 * embedding and the head are vocabulary-parallel. Norms and the biases of
 * row-parallel products are replicated; their gradients come out identical
 * on every rank because their inputs are. */

/* Indices of one layer's tensors in params[] (-1 if absent). A MoE layer
 * has a router and experts (expert0: the first local expert's w1) in place
 * of up and down; dense and moe number the layers of each kind in the
 * stage (-1 for the other kind): they index the saved activations. */
typedef struct {
	int norm1_w, norm1_b, qkv_w, qkv_b, o_w, o_b, norm2_w, norm2_b, up_w, up_b, down_w, down_b;
	int router_w, expert0;
	int dense, moe;
} layer_index;

/* Saved activations of one microbatch. A per-layer buffer holds L copies
 * (Ld of the dense layers, Lm of the MoE layers) when the recompute policy
 * keeps it (stage_saved_acts), else none: the stage's rebuilt set holds its
 * one copy, which the backward pass rebuilds layer by layer. Activations
 * are in the compute type (pp_act), statistics in pp_real; the means are
 * layernorm's only. */
typedef struct {
	pp_act *res;                   /* (L+1, N, C) input of each layer, then the stage output */
	pp_act *h1;                    /* (L, N, C) */
	pp_real *mean1, *rstd1;        /* (L, N), (L, N) */
	pp_act *qkv;                   /* (L, N, QKV) after rope */
	pp_act *att;                   /* (L, N, HD) */
	pp_real *lse;                  /* (L, B, Hq, T) */
	pp_act *mid;                   /* (L, N, C) residual after attention */
	pp_act *h2;                    /* (L, N, C) */
	pp_real *mean2, *rstd2;        /* (L, N), (L, N) */
	pp_act *up;                    /* (Ld, N, UP) gate|up, or before gelu: dense layers */
	pp_act *act;                   /* (Ld, N, F) */
	moe_acts *moe;                 /* (n_moe) the MoE layers' */
	int n_moe;                     /* Lm, 1 or 0 */
	pp_real *meanf, *rstdf;        /* (N), (N): final norm */
	pp_act *dhf;                   /* (N, C) gradient of the head's input, from a training
					* forward (partial over tp until stage_backward sums it) */
	pp_act *logits;                /* (N, V) with spec.keep_logits; dlogits after a training forward */
	/* split backward: gradients the weight part consumes, (L, ...) each */
	pp_act *g_out, *g_up, *g_mid, *g_qkv; /* (N,C) (N,UP) (N,C) (N,QKV) */
	int *tok, *tgt;                /* (N) device copies; tok local to the vocab shard */
	int has_grad;                  /* forward kept dlogits */
	int has_input_grad;            /* STAGE_BWD_INPUT ran, STAGE_BWD_WEIGHT pending */
} slot_acts;

struct pp_stage_acts {
	slot_acts *slot;
	/* one copy of what the recompute policy does not keep: only one layer
	 * is rebuilt at a time, whichever slot it belongs to (per-layer
	 * buffers only) */
	slot_acts rebuilt;
	layer_index *layer;            /* (L) */
	int embed_w, embed_pos, normf_w, normf_b, head_w; /* param indices, -1 if absent */
	/* backward scratch, shared by all slots */
	pp_act *d_res, *d_h, *d_att, *d_qkv, *d_up, *d_act; /* (N,C) (N,C) (N,HD) (N,QKV) (N,UP) (N,F) */
	pp_real *ce;                   /* (2N) device: vocab-parallel loss statistics */
	pp_real *replica;              /* kv heads shared over tp: one slot per head of the largest */
	int n_dense, n_moe;            /* layers of each kind */
	moe_scratch moe_sc;            /* the MoE layers' scratch, shared by all slots */
	/* the last stage's head and loss, shared by all slots */
	int loss_rows;                 /* R: rows per chunk */
	pp_act *hf;                    /* (N, C) final norm output */
	pp_real *losses;               /* (N) */
	pp_act *logits;                /* (R, V) one chunk, unless spec.keep_logits */
	double *host;                  /* (3N) */
	int *host_ids;                 /* (N) */
	pp_real *host_real;            /* (2N) */
};

/* ---- parameter table -------------------------------------------------- */

typedef struct {
	pp_stage *s;
	int cap;
} table_builder;

static int add_param(table_builder *tb, const pp_param *proto)
{
	pp_stage *s = tb->s;
	if (s->n_params == tb->cap) {
		tb->cap = tb->cap ? 2 * tb->cap : 64;
		s->params = realloc(s->params, (size_t)tb->cap * sizeof *s->params);
	}
	pp_param *p = &s->params[s->n_params];
	*p = *proto;
	if (!p->n_blocks) {
		p->n_blocks = 1;
		p->block_rows = p->shape[0];
	}
	if (p->ndim == 1)
		p->shape[1] = p->global_shape[1] = 1;
	if (!p->replicas)
		p->replicas = 1;
	p->n = (size_t)p->shape[0] * (size_t)p->shape[1];
	p->off = s->n_elems;
	s->n_elems += p->n;
	return s->n_params++;
}

/* The naming and sharding vocabulary of build_table. */
typedef struct {
	table_builder *tb;
	const pp_stage *s;
	char name[96];
} namer;

static const char *nm(namer *n, const char *fmt, int layer, const char *suffix)
{
	snprintf(n->name, sizeof n->name, fmt, layer, suffix);
	return n->name;
}

/* A tensor every tp rank holds whole (norms, row-parallel biases, wpe). */
static int replicated(namer *n, const char *name, int ndim, int64_t rows, int64_t cols,
		      bool decay, double std, double value)
{
	pp_param p = {.ndim = ndim, .shape = {rows, cols}, .global_shape = {rows, cols},
		      .replicas = n->s->spec.tp.size, .tp_owner = n->s->spec.tp.rank == 0,
		      .decay = decay, .init_std = std, .init_value = value};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* Rows [row, row + rows) of a (grows, cols) tensor: column-parallel weights
 * and their biases (ndim 1), vocabulary-parallel embeddings. replicas > 1
 * when several ranks hold the same rows (kv heads when tp > kv heads). */
static int row_block(namer *n, const char *name, int ndim, int64_t rows, int64_t grows,
		     int64_t row, int64_t cols, int replicas, double std)
{
	const pp_tp *tp = &n->s->spec.tp;
	pp_param p = {.ndim = ndim, .shape = {rows, cols}, .global_shape = {grows, cols},
		      .n_blocks = 1, .block_rows = rows, .block_row = {row},
		      .replicas = replicas, .tp_owner = tp->rank % replicas == 0,
		      .grad_partial = replicas > 1, .decay = ndim > 1,
		      .init_std = ndim > 1 ? std : 0};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* Columns [col, col + cols) of a (rows, gcols) tensor: row-parallel weights. */
static int col_block(namer *n, const char *name, int64_t rows, int64_t cols, int64_t gcols,
		     int64_t col, double std)
{
	pp_param p = {.ndim = 2, .shape = {rows, cols}, .global_shape = {rows, gcols}, .col = col,
		      .replicas = 1, .tp_owner = true, .decay = true, .init_std = std};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* GPT-2's fused c_attn (weight or bias): this rank's q, k and v row blocks. */
static int qkv_fused(namer *n, const char *name, int ndim, int64_t C, double std)
{
	const pp_stage *s = n->s;
	const pp_model_cfg *m = s->cfg;
	const int64_t D = m->head_dim, q = (int64_t)s->n_heads * D, kv = (int64_t)s->n_kv_heads * D;
	const int64_t Q = (int64_t)m->n_heads * D, KV = (int64_t)m->n_kv_heads * D;
	const int r = s->spec.tp.rank;
	pp_param p = {.ndim = ndim, .shape = {q + 2 * kv, C}, .global_shape = {Q + 2 * KV, C},
		      .n_blocks = 3, .block_rows = q, .block_row = {r * q, Q + r * kv, Q + KV + r * kv},
		      .replicas = 1, .tp_owner = true, .decay = ndim > 1,
		      .init_std = ndim > 1 ? std : 0};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* Hugging Face names per family. GPT-2 fuses q, k, v into c_attn; the others
 * keep q_proj, k_proj, v_proj as adjacent tensors (one product). */
static void build_table(pp_stage *s, pp_stage_acts *a)
{
	const pp_model_cfg *m = s->cfg;
	table_builder tb = {s, 0};
	namer n = {&tb, s, ""};
	const bool gpt = m->family == PP_FAMILY_GPT;
	const bool ln = m->norm == PP_NORM_LAYER, gated = m->mlp != PP_MLP_GELU;
	const int r = s->spec.tp.rank;
	const int64_t C = m->d_model, D = m->head_dim, F = s->d_ff, GF = m->d_ff;
	const int64_t HD = (int64_t)s->n_heads * D, GHD = (int64_t)m->n_heads * D;
	const int64_t KV = (int64_t)s->n_kv_heads * D, GKV = (int64_t)m->n_kv_heads * D;
	/* kv heads: split when tp divides them, else each rank holds one, shared by tp/Hkv ranks */
	const int kv_rep = s->kv_replicas;
	const int64_t kv_row = (int64_t)s->kv_block * KV;
	const double std = m->init_std;
	const double res_std = m->scaled_residual_init ? std / sqrt(2.0 * m->n_layers) : std;
	const double norm_one = 1.0 - m->norm_offset; /* Gemma stores w of (1 + w) */
	const char *embed = gpt ? "transformer.wte.weight" : "model.embed_tokens.weight";

	a->embed_w = a->embed_pos = a->normf_w = a->normf_b = a->head_w = -1;
	if (s->first || (s->last && m->tied_embeddings))
		a->embed_w = row_block(&n, embed, 2, s->vocab, m->vocab_size, s->vocab_begin, C, 1, std);
	if (s->first && m->pos == PP_POS_LEARNED)
		a->embed_pos = replicated(&n, "transformer.wpe.weight", 2, m->max_seq_len, C, true, std, 0);

	int L = s->layer_end - s->layer_begin;
	a->layer = calloc((size_t)(L > 0 ? L : 1), sizeof *a->layer);
	for (int l = 0; l < L; l++) {
		layer_index *li = &a->layer[l];
		int i = s->layer_begin + l;
		memset(li, -1, sizeof *li);
		if (gpt) {
			const char *h = "transformer.h.%d.%s";
			li->norm1_w = replicated(&n, nm(&n, h, i, "ln_1.weight"), 1, C, 1, false, 0, 1);
			li->norm1_b = replicated(&n, nm(&n, h, i, "ln_1.bias"), 1, C, 1, false, 0, 0);
			li->qkv_w = qkv_fused(&n, nm(&n, h, i, "attn.c_attn.weight"), 2, C, std);
			li->qkv_b = qkv_fused(&n, nm(&n, h, i, "attn.c_attn.bias"), 1, 1, 0);
			li->o_w = col_block(&n, nm(&n, h, i, "attn.c_proj.weight"), C, HD, GHD, r * HD, res_std);
			li->o_b = replicated(&n, nm(&n, h, i, "attn.c_proj.bias"), 1, C, 1, false, 0, 0);
			li->norm2_w = replicated(&n, nm(&n, h, i, "ln_2.weight"), 1, C, 1, false, 0, 1);
			li->norm2_b = replicated(&n, nm(&n, h, i, "ln_2.bias"), 1, C, 1, false, 0, 0);
			li->up_w = row_block(&n, nm(&n, h, i, "mlp.c_fc.weight"), 2, F, GF, r * F, C, 1, std);
			li->up_b = row_block(&n, nm(&n, h, i, "mlp.c_fc.bias"), 1, F, GF, r * F, 1, 1, 0);
			li->down_w = col_block(&n, nm(&n, h, i, "mlp.c_proj.weight"), C, F, GF, r * F, res_std);
			li->down_b = replicated(&n, nm(&n, h, i, "mlp.c_proj.bias"), 1, C, 1, false, 0, 0);
			li->dense = a->n_dense++;
			continue;
		}
		const char *h = "model.layers.%d.%s";
		li->norm1_w = replicated(&n, nm(&n, h, i, "input_layernorm.weight"), 1, C, 1, false, 0, norm_one);
		if (ln)
			li->norm1_b = replicated(&n, nm(&n, h, i, "input_layernorm.bias"), 1, C, 1, false, 0, 0);
		li->qkv_w = row_block(&n, nm(&n, h, i, "self_attn.q_proj.weight"), 2, HD, GHD, r * HD, C, 1, std);
		row_block(&n, nm(&n, h, i, "self_attn.k_proj.weight"), 2, KV, GKV, kv_row, C, kv_rep, std);
		row_block(&n, nm(&n, h, i, "self_attn.v_proj.weight"), 2, KV, GKV, kv_row, C, kv_rep, std);
		if (m->bias) {
			li->qkv_b = row_block(&n, nm(&n, h, i, "self_attn.q_proj.bias"), 1, HD, GHD, r * HD, 1, 1, 0);
			row_block(&n, nm(&n, h, i, "self_attn.k_proj.bias"), 1, KV, GKV, kv_row, 1, kv_rep, 0);
			row_block(&n, nm(&n, h, i, "self_attn.v_proj.bias"), 1, KV, GKV, kv_row, 1, kv_rep, 0);
		}
		li->o_w = col_block(&n, nm(&n, h, i, "self_attn.o_proj.weight"), C, HD, GHD, r * HD, res_std);
		if (m->bias)
			li->o_b = replicated(&n, nm(&n, h, i, "self_attn.o_proj.bias"), 1, C, 1, false, 0, 0);
		li->norm2_w = replicated(&n, nm(&n, h, i, "post_attention_layernorm.weight"), 1, C, 1, false, 0, norm_one);
		if (ln)
			li->norm2_b = replicated(&n, nm(&n, h, i, "post_attention_layernorm.bias"), 1, C, 1, false, 0, 0);
		if (hparams_layer_is_moe(m, i)) {
			/* Mixtral's names; this rank's experts, each w1 (gate) and w3
			 * (up) adjacent: one (2F, C) product */
			li->moe = a->n_moe++;
			li->router_w = replicated(&n, nm(&n, h, i, "block_sparse_moe.gate.weight"), 2,
						  m->n_experts, C, true, std, 0);
			continue; /* the experts go at the end */
		}
		li->dense = a->n_dense++;
		if (gated)
			li->up_w = row_block(&n, nm(&n, h, i, "mlp.gate_proj.weight"), 2, F, GF, r * F, C, 1, std);
		int up = row_block(&n, nm(&n, h, i, "mlp.up_proj.weight"), 2, F, GF, r * F, C, 1, std);
		if (!gated)
			li->up_w = up;
		if (m->bias) {
			if (gated)
				li->up_b = row_block(&n, nm(&n, h, i, "mlp.gate_proj.bias"), 1, F, GF, r * F, 1, 1, 0);
			int ub = row_block(&n, nm(&n, h, i, "mlp.up_proj.bias"), 1, F, GF, r * F, 1, 1, 0);
			if (!gated)
				li->up_b = ub;
		}
		li->down_w = col_block(&n, nm(&n, h, i, "mlp.down_proj.weight"), C, F, GF, r * F, res_std);
		if (m->bias)
			li->down_b = replicated(&n, nm(&n, h, i, "mlp.down_proj.bias"), 1, C, 1, false, 0, 0);
	}
	if (s->last) {
		a->normf_w = replicated(&n, gpt ? "transformer.ln_f.weight" : "model.norm.weight", 1, C, 1,
					false, 0, gpt ? 1 : norm_one);
		if (ln)
			a->normf_b = replicated(&n, gpt ? "transformer.ln_f.bias" : "model.norm.bias", 1, C,
						1, false, 0, 0);
		a->head_w = m->tied_embeddings ? a->embed_w
					       : row_block(&n, "lm_head.weight", 2, s->vocab, m->vocab_size,
							   s->vocab_begin, C, 1, std);
	}
	/* This rank's experts of every MoE layer, after everything the ep
	 * group shares; Mixtral's names, each expert's w1 (gate) and w3 (up)
	 * adjacent: one (2F, C) product */
	s->n_shared = s->n_elems;
	const int nl = m->n_experts / s->spec.ep.size;
	for (int l = 0; l < L; l++) {
		layer_index *li = &a->layer[l];
		const char *h = "model.layers.%d.%s";
		for (int x = s->spec.ep.rank * nl, j = 0; li->moe >= 0 && j < nl; j++, x++) {
			char en[64];
			snprintf(en, sizeof en, "block_sparse_moe.experts.%d.w1.weight", x);
			int w1 = row_block(&n, nm(&n, h, s->layer_begin + l, en), 2, F, GF, r * F, C, 1, std);
			li->expert0 = j ? li->expert0 : w1;
			snprintf(en, sizeof en, "block_sparse_moe.experts.%d.w3.weight", x);
			row_block(&n, nm(&n, h, s->layer_begin + l, en), 2, F, GF, r * F, C, 1, std);
			snprintf(en, sizeof en, "block_sparse_moe.experts.%d.w2.weight", x);
			col_block(&n, nm(&n, h, s->layer_begin + l, en), C, F, GF, r * F, res_std);
		}
	}
}

/* ---- allocation -------------------------------------------------------- */

/* count elements of elem bytes each (none: NULL, not a failure) */
static void *alloc_elems(const pp_ops *ops, size_t count, size_t elem, int *failed)
{
	void *p = count ? ops->alloc(count * elem) : NULL;
	*failed |= count && !p;
	return p;
}

/* Buffers of counts[i] activations (compute type) or pp_real each; -1 if
 * one fails (those done stay allocated, for the caller's cleanup). */
static int alloc_acts(const pp_ops *ops, pp_act **ptrs[], const size_t counts[], int n)
{
	int failed = 0;
	for (int i = 0; i < n && !failed; i++)
		*ptrs[i] = alloc_elems(ops, counts[i], pp_act_size(ops), &failed);
	return failed ? -1 : 0;
}

static int alloc_reals(const pp_ops *ops, pp_real **ptrs[], const size_t counts[], int n)
{
	int failed = 0;
	for (int i = 0; i < n && !failed; i++)
		*ptrs[i] = alloc_elems(ops, counts[i], sizeof(pp_real), &failed);
	return failed ? -1 : 0;
}

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int64_t stage_loss_rows(int64_t N, int64_t V, int64_t elem, double mb)
{
	double rows = floor((mb > 0 ? mb : PP_LOSS_CHUNK_MB) * 1048576.0 / ((double)V * (double)elem));
	if (rows >= (double)N)
		return N;
	/* whole tiles of 128 rows for the GPU's matrix products, where they fit */
	return rows < 1 ? 1 : rows < 128 ? (int64_t)rows : (int64_t)rows / 128 * 128;
}

unsigned stage_saved_acts(int recompute)
{
	const unsigned products = PP_SAVE_QKV | PP_SAVE_MID | PP_SAVE_UP | PP_SAVE_MOE;
	switch (recompute) {
	case PP_RECOMPUTE_FULL:
		return 0;
	case PP_RECOMPUTE_MINIMAL:
		return products;
	case PP_RECOMPUTE_MINIMAL_FLASH:
		return products | PP_SAVE_ATT;
	default:
		return PP_SAVE_ALL;
	}
}

stage_spec stage_spec_whole(const pp_model_cfg *cfg, int B, int T, int recompute)
{
	return (stage_spec){.layer_begin = 0, .layer_end = cfg->n_layers, .B = B, .T = T,
			    .n_slots = 1, .recompute = recompute, .tp = {.rank = 0, .size = 1}};
}

stage_spec stage_spec_of(const pp_config *c, const pp_layout *l, int k)
{
	stage_spec sp = stage_spec_whole(&c->model, l->microbatch, l->seq_len, c->recompute);
	sp.layer_begin = l->chunk[k].layer_begin;
	sp.layer_end = l->chunk[k].layer_end;
	sp.n_slots = l->chunk[k].slots;
	sp.split_backward = l->split_backward;
	sp.loss_chunk_mb = c->loss_chunk_mb;
	sp.tp = (pp_tp){.rank = l->tp_rank, .size = l->tp};
	sp.ep.rank = l->ep_rank;
	sp.ep.size = l->ep;
	return sp;
}

/* This rank's share of heads and widths (layout.h decides it). */
static int shard_dims(pp_stage *s, pp_err *e)
{
	layout_tp t;
	int rc = layout_tp_share(s->cfg, s->spec.tp.size, s->spec.tp.rank, &t, e);
	if (rc)
		return rc;
	s->n_heads = t.n_heads;
	s->n_kv_heads = t.n_kv_heads;
	s->kv_replicas = t.kv_replicas;
	s->kv_block = t.kv_block;
	s->d_ff = t.d_ff;
	s->vocab = t.vocab;
	s->vocab_begin = t.vocab_begin;
	return 0;
}

/* FSDP's units (stage_units): their bounds, each parameter's unit, and the
 * part of the buffer this rank keeps. */
static int describe_units(pp_stage *s, pp_err *e)
{
	const pp_stage_acts *a = s->acts;
	const int L = s->layer_end - s->layer_begin;
	s->n_units = L + 2;
	s->unit_lo = calloc((size_t)s->n_units + 1, sizeof *s->unit_lo);
	s->param_unit = calloc((size_t)s->n_params + 1, sizeof *s->param_unit);
	if (!s->unit_lo || !s->param_unit)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int l = 0; l < L; l++)
		s->unit_lo[1 + l] = s->params[a->layer[l].norm1_w].off;
	s->unit_lo[L + 1] = s->last ? s->params[a->normf_w].off : s->n_shared;
	s->unit_lo[L + 2] = s->n_shared;
	for (int i = 0, u = 0; i < s->n_params; i++) {
		while (u < s->n_units && s->params[i].off >= s->unit_lo[u + 1])
			u++;
		s->param_unit[i] = u;
	}
	const stage_units *un = &s->spec.units;
	s->w_lo = un->use ? un->lo : 0;
	s->w_hi = un->use ? un->hi : s->n_elems;
	if (un->use && (s->n_elems != s->n_shared || un->lo > un->hi || un->hi > s->n_elems))
		return pp_errorf(e, PP_EUSAGE,
				 "fsdp: shard [%zu, %zu) of a stage of %zu parameters%s", un->lo,
				 un->hi, s->n_elems, s->n_elems != s->n_shared ? " with experts" : "");
	return 0;
}

int stage_describe(pp_stage *s, const pp_model_cfg *cfg, const stage_spec *spec, pp_err *e)
{
	memset(s, 0, sizeof *s);
	int rc = hparams_check(cfg, e);
	if (rc)
		return rc;
	const int ep = spec->ep.size > 0 ? spec->ep.size : 1;
	if (cfg->n_experts > 0 && (cfg->n_experts % ep || spec->ep.rank < 0 || spec->ep.rank >= ep))
		return pp_errorf(e, PP_EUSAGE, "ep %d does not divide model.n_experts %d", ep,
				 cfg->n_experts);
	if (spec->recompute < PP_RECOMPUTE_NONE || spec->recompute > PP_RECOMPUTE_MINIMAL_FLASH)
		return pp_errorf(e, PP_EUSAGE, "recompute policy %d: expected a PP_RECOMPUTE_*",
				 spec->recompute);
	if (spec->recompute != PP_RECOMPUTE_NONE && spec->split_backward) /* layout_check_recompute */
		return pp_errorf(e, PP_EUSAGE, "recompute=%s with a split backward pass",
				 pp_recompute_name(spec->recompute));
	s->cfg = cfg;
	s->spec = *spec;
	if (s->spec.ep.size < 1)
		s->spec.ep.size = 1;
	s->layer_begin = spec->layer_begin;
	s->layer_end = spec->layer_end;
	s->first = spec->layer_begin == 0;
	s->last = spec->layer_end == cfg->n_layers;
	s->B = spec->B;
	s->T = spec->T;
	s->n_slots = spec->n_slots;
	s->recompute = spec->recompute;
	s->saved = stage_saved_acts(spec->recompute);
	if ((rc = shard_dims(s, e)))
		return rc;
	s->acts = calloc(1, sizeof *s->acts);
	if (!s->acts)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	build_table(s, s->acts);
	return describe_units(s, e);
}

static moe_layer moe_of(const pp_stage *s, const layer_index *li);

/* 1 when which holds bit, else 0: a factor of a buffer's size */
static size_t has(unsigned which, unsigned bit) { return (which & bit) ? 1 : 0; }

/* Allocates sa's per-layer activations of the kinds in which (PP_SAVE_*): a
 * copy for each layer needing one, or with one a single copy, for the
 * stage's rebuilt set. -1 when out of memory (what was allocated stays, for
 * stage_free). */
static int alloc_layer_acts(pp_stage *s, slot_acts *sa, unsigned which, bool one)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *ops = s->ops;
	const pp_stage_acts *a = s->acts;
	const size_t N = (size_t)s->B * s->T, C = m->d_model, F = s->d_ff;
	const size_t HD = (size_t)s->n_heads * m->head_dim;
	const size_t QKV = HD + 2 * (size_t)s->n_kv_heads * m->head_dim;
	const size_t UP = m->mlp == PP_MLP_GELU ? F : 2 * F, NH = (size_t)s->B * s->n_heads * s->T;
	const size_t L = (size_t)(s->layer_end - s->layer_begin);
	/* copies of the attention's tensors, and of each kind of MLP's */
	const size_t La = one ? L > 0 : L, Ld = one ? a->n_dense > 0 : (size_t)a->n_dense;
	const size_t Lm = one ? a->n_moe > 0 : (size_t)a->n_moe;
	const size_t ln = m->norm == PP_NORM_LAYER;
	/* copies of each kind: none where which lacks it */
	const size_t c1 = has(which, PP_SAVE_NORM1) * La, cq = has(which, PP_SAVE_QKV) * La;
	const size_t ca = has(which, PP_SAVE_ATT) * La, cm = has(which, PP_SAVE_MID) * La;
	const size_t c2 = has(which, PP_SAVE_NORM2) * La, cu = has(which, PP_SAVE_UP) * Ld;
	const size_t cf = has(which, PP_SAVE_ACT) * Ld;
	pp_act **p[] = {&sa->h1, &sa->qkv, &sa->att, &sa->mid, &sa->h2, &sa->up, &sa->act};
	const size_t n[] = {c1 * N * C, cq * N * QKV, ca * N * HD, cm * N * C,
			    c2 * N * C, cu * N * UP,  cf * N * F};
	pp_real **r[] = {&sa->mean1, &sa->rstd1, &sa->lse, &sa->mean2, &sa->rstd2};
	const size_t rn[] = {c1 * ln * N, c1 * N, ca * NH, c2 * ln * N, c2 * N};
	if (alloc_acts(ops, p, n, NELEMS(p)) || alloc_reals(ops, r, rn, NELEMS(r)))
		return -1;
	sa->n_moe = (int)(has(which, PP_SAVE_MOE) * Lm);
	if (sa->n_moe && !(sa->moe = calloc((size_t)sa->n_moe, sizeof *sa->moe)))
		return -1;
	for (int j = 0; j < sa->n_moe; j++) {
		moe_layer ml = moe_of(s, &a->layer[0]);
		if (moe_acts_alloc(&sa->moe[j], &ml, (int)N, s->spec.split_backward, NULL))
			return -1;
	}
	return 0;
}

int stage_create(pp_stage *s, const pp_model_cfg *cfg, const pp_ops *ops, const stage_spec *spec,
		 pp_err *e)
{
	int rc = stage_describe(s, cfg, spec, e);
	if (rc)
		return rc;
	s->ops = ops;
	pp_stage_acts *a = s->acts;

	const size_t N = (size_t)s->B * s->T, C = cfg->d_model, F = s->d_ff, V = s->vocab;
	const size_t HD = (size_t)s->n_heads * cfg->head_dim;
	const size_t QKV = HD + 2 * (size_t)s->n_kv_heads * cfg->head_dim;
	const size_t UP = cfg->mlp == PP_MLP_GELU ? F : 2 * F;
	const size_t L = (size_t)(s->layer_end - s->layer_begin);
	const size_t Lg = spec->split_backward ? L : 0;

	/* under FSDP this rank's shard, and the units' pointers its owner sets */
	const size_t held = s->w_hi - s->w_lo;
	s->w = ops->alloc(held * sizeof(pp_real));
	s->g = spec->no_grad ? NULL : ops->alloc(held * sizeof(pp_real));
	s->wc = ops->act_type == PP_TYPE_REAL ? (pp_act *)s->w : ops->alloc(held * pp_act_size(ops));
	if (held && (!s->w || !s->wc || (!s->g && !spec->no_grad)))
		goto oom;
	if (spec->units.use && (!(s->unit_w = calloc((size_t)s->n_units, sizeof *s->unit_w)) ||
				!(s->unit_g = calloc((size_t)s->n_units, sizeof *s->unit_g))))
		goto oom;
	const size_t Nb = spec->no_grad ? 0 : N; /* backward scratch */
	const size_t last = s->last ? 1 : 0, keep = spec->keep_logits ? 1 : 0;
	a->loss_rows = (int)stage_loss_rows((int64_t)N, (int64_t)V, (int64_t)pp_act_size(ops),
					    spec->loss_chunk_mb);
	/* allocated here, not in the backward pass, where freeing device memory
	 * would wait for the dp gradient sums in flight */
	size_t replica = 0;
	for (int i = 0; !spec->no_grad && i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		size_t n = p->grad_partial ? (size_t)(p->global_shape[0] / p->shape[0]) * p->n : 0;
		replica = n > replica ? n : replica;
	}
	pp_act **scratch[] = {&a->d_res, &a->d_h, &a->d_att, &a->d_qkv, &a->d_up, &a->d_act, &a->hf,
			      &a->logits};
	/* d_act: the gated MLP's only; gelu_matmul_bwd writes d_up directly */
	const size_t d_act = cfg->mlp == PP_MLP_GELU ? 0 : Nb * F;
	const size_t scratch_n[] = {Nb * C, Nb * C, Nb * HD, Nb * QKV, Nb * UP, d_act,
				    last * N * C, last * (1 - keep) * a->loss_rows * V};
	pp_real **scratch_r[] = {&a->ce, &a->losses, &a->replica};
	const size_t scratch_rn[] = {2 * N, last * N, replica};
	if (alloc_acts(ops, scratch, scratch_n, NELEMS(scratch)) ||
	    alloc_reals(ops, scratch_r, scratch_rn, NELEMS(scratch_r)))
		goto oom;
	a->host = calloc(3 * N, sizeof(double));
	a->host_real = calloc(2 * N, sizeof(pp_real));
	a->host_ids = calloc(N, sizeof(int));
	a->slot = calloc((size_t)s->n_slots, sizeof *a->slot);
	if (!a->host || !a->host_real || !a->host_ids || !a->slot)
		goto oom;
	for (int k = 0; k < s->n_slots; k++) {
		slot_acts *sa = &a->slot[k];
		const size_t lastg = spec->no_grad ? 0 : last;
		pp_act **p[] = {&sa->res, &sa->dhf, &sa->logits, &sa->g_out, &sa->g_up, &sa->g_mid,
				&sa->g_qkv};
		const size_t n[] = {(L + 1) * N * C, lastg * N * C, last * keep * N * V,
				    Lg * N * C, Lg * N * UP, Lg * N * C, Lg * N * QKV};
		pp_real **r[] = {&sa->meanf, &sa->rstdf};
		const size_t rn[] = {last * N, last * N};
		if (alloc_acts(ops, p, n, NELEMS(p)) || alloc_reals(ops, r, rn, NELEMS(r)) ||
		    alloc_layer_acts(s, sa, s->saved, false))
			goto oom;
		sa->tok = ops->alloc(N * sizeof(int));
		sa->tgt = ops->alloc(N * sizeof(int));
		if (!sa->tok || !sa->tgt)
			goto oom;
	}
	if (alloc_layer_acts(s, &a->rebuilt, PP_SAVE_ALL & ~s->saved, true))
		goto oom;
	if (a->n_moe) {
		moe_layer ml = moe_of(s, &a->layer[0]);
		if ((rc = moe_scratch_alloc(&a->moe_sc, &ml, (int)N, e)))
			goto oom;
	}
	return 0;
oom:;
	size_t n_elems = s->n_elems;
	stage_free(s);
	return pp_errorf(e, PP_ERUNTIME,
			 "out of memory building layers %d..%d (B=%d, T=%d, %zu parameters)",
			 spec->layer_begin, spec->layer_end - 1, spec->B, spec->T, n_elems);
}

static void free_slot_acts(const pp_ops *ops, slot_acts *sa)
{
	void *p[] = {sa->res, sa->h1, sa->mean1, sa->rstd1, sa->qkv, sa->att, sa->lse, sa->mid,
		     sa->h2, sa->mean2, sa->rstd2, sa->up, sa->act, sa->meanf, sa->rstdf, sa->dhf,
		     sa->logits, sa->g_out, sa->g_up, sa->g_mid, sa->g_qkv, sa->tok, sa->tgt};
	for (int i = 0; i < NELEMS(p); i++)
		ops->free(p[i]);
	for (int j = 0; sa->moe && j < sa->n_moe; j++)
		moe_acts_free(&sa->moe[j], ops);
	free(sa->moe);
}

void stage_free(pp_stage *s)
{
	pp_stage_acts *a = s->acts;
	const pp_ops *ops = s->ops;
	if (!ops) { /* described only (stage_describe), or never built */
		if (a)
			free(a->layer);
		free(a);
		free(s->params);
		free(s->unit_lo);
		free(s->param_unit);
		memset(s, 0, sizeof *s);
		return;
	}
	if (a) {
		for (int k = 0; a->slot && k < s->n_slots; k++)
			free_slot_acts(ops, &a->slot[k]);
		free_slot_acts(ops, &a->rebuilt);
		moe_scratch_free(&a->moe_sc, ops);
		void *p[] = {a->d_res, a->d_h, a->d_att, a->d_qkv, a->d_up, a->d_act, a->ce,
			     a->hf, a->losses, a->logits, a->replica};
		for (int i = 0; i < NELEMS(p); i++)
			ops->free(p[i]);
		free(a->slot);
		free(a->layer);
		free(a->host);
		free(a->host_real);
		free(a->host_ids);
		free(a);
	}
	stage_unpack_weights(s);
	if (s->wc != (pp_act *)s->w)
		ops->free(s->wc);
	ops->free(s->w);
	ops->free(s->g);
	free(s->params);
	free(s->unit_lo);
	free(s->param_unit);
	free(s->unit_w);
	free(s->unit_g);
	memset(s, 0, sizeof *s);
}

void stage_unpack_weights(pp_stage *s)
{
	for (int i = 0; s->packed && i < s->n_params; i++)
		if (s->packed[i].owned)
			free(s->packed[i].data);
	free(s->packed);
	s->packed = NULL;
	s->packed_elems = 0;
	s->packed_bytes = 0;
}

uint64_t param_global_index(const pp_param *p, size_t j)
{
	int64_t cols = p->shape[1], row = (int64_t)(j / (size_t)cols), col = (int64_t)(j % (size_t)cols);
	int64_t b = row / p->block_rows;
	int64_t grow = p->block_row[b] + row % p->block_rows;
	return (uint64_t)(grow * p->global_shape[1] + p->col + col);
}

void stage_init_params(pp_stage *s, uint64_t seed)
{
	pp_real *host = malloc(s->n_elems * sizeof(pp_real));
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		uint64_t key = rng_key(seed, p->name);
		pp_real *x = host + p->off;
		if (p->init_std > 0) {
#pragma omp parallel for
			for (size_t j = 0; j < p->n; j++)
				x[j] = (pp_real)(p->init_std * rng_normal(key, param_global_index(p, j)));
		} else {
			for (size_t j = 0; j < p->n; j++)
				x[j] = (pp_real)p->init_value;
		}
	}
	s->ops->to_device(s->w, host + s->w_lo, (s->w_hi - s->w_lo) * sizeof(pp_real));
	free(host);
	stage_weights_changed(s);
}

void stage_weights_range_changed(pp_stage *s, size_t lo, size_t hi)
{
	lo = lo > s->w_lo ? lo : s->w_lo;
	hi = hi < s->w_hi ? hi : s->w_hi;
	if (s->wc != (pp_act *)s->w && hi > lo)
		s->ops->to_act(pp_act_at(s->ops, s->wc, lo - s->w_lo), stage_w(s, lo), hi - lo);
}

void stage_weights_changed(pp_stage *s) { stage_weights_range_changed(s, 0, s->n_elems); }

const pp_param *stage_find_param(const pp_stage *s, const char *name)
{
	for (int i = 0; i < s->n_params; i++)
		if (!strcmp(s->params[i].name, name))
			return &s->params[i];
	return NULL;
}

bool stage_is_embedding_copy(const pp_stage *s, const pp_param *p)
{
	return s->last && !s->first && s->cfg->tied_embeddings && p == &s->params[0];
}

void stage_zero_grad(pp_stage *s) { s->ops->zero(s->g, (s->w_hi - s->w_lo) * sizeof(pp_real)); }

const pp_act *stage_logits(const pp_stage *s, int slot)
{
	return s->last ? s->acts->slot[slot].logits : NULL;
}

/* ---- forward / backward ------------------------------------------------ */

/* Parameter (its compute copy) or gradient pointer by table index (NULL for -1). */
static pp_act *W(const pp_stage *s, int i)
{
	if (i < 0)
		return NULL;
	if (!s->unit_w)
		return pp_act_at(s->ops, s->wc, s->params[i].off);
	const int u = s->param_unit[i];
	return pp_act_at(s->ops, s->unit_w[u], s->params[i].off - s->unit_lo[u]);
}
static pp_real *G(const pp_stage *s, int i)
{
	if (i < 0)
		return NULL;
	if (!s->unit_g)
		return s->g + s->params[i].off;
	const int u = s->param_unit[i];
	return s->unit_g[u] + (s->params[i].off - s->unit_lo[u]);
}

/* FSDP (stage_units): unit u is needed now, and next after it. */
static int unit_use(pp_stage *s, int u, int next, bool grads, pp_err *e)
{
	const stage_units *h = &s->spec.units;
	return h->use ? h->use(h->ctx, s, u, next, grads, e) : 0;
}
static int unit_done(pp_stage *s, int u, pp_err *e)
{
	const stage_units *h = &s->spec.units;
	return h->done ? h->done(h->ctx, s, u, e) : 0;
}
/* The bias of a row-parallel product is added once: on tp rank 0. */
static pp_act *W0(const pp_stage *s, int i) { return s->spec.tp.rank == 0 ? W(s, i) : NULL; }

/* out (N,OC) = inp (N,C) @ weight wi ^T + bias, from the weights stored for
 * decoding where the stage has them (stage_pack_weights) */
static void linear(const pp_stage *s, pp_act *out, const pp_act *inp, int wi, const pp_act *bias,
		   int N, int C, int OC)
{
	if (s->packed && s->packed[wi].data)
		s->ops->matmul_packed(out, inp, s->packed[wi].data, bias, N, C, OC, s->packed[wi].fmt);
	else
		s->ops->matmul_fwd(out, inp, W(s, wi), bias, N, C, OC);
}

/* Sums a partial activation across the tp group (a no-op without tp). */
static int tp_sum(const pp_stage *s, pp_act *buf, size_t n, pp_err *e)
{
	const pp_tp *tp = &s->spec.tp;
	return tp->size > 1 ? tp->allreduce(tp->ctx, buf, n, s->ops->act_type, PP_REDUCE_SUM, e) : 0;
}

/* Pointers into one layer's saved activations (a MoE layer: moe in place
 * of up and act). */
typedef struct {
	pp_act *x, *h1, *qkv, *att, *mid, *h2, *up, *act, *out;
	pp_real *mean1, *rstd1, *lse, *mean2, *rstd2;
	pp_act *g_out, *g_up, *g_mid, *g_qkv;
	moe_acts *moe;
	moe_scratch *moe_sc;
} layer_acts;

/* The slot that holds layer tensors of kind what (PP_SAVE_*), sa or the
 * stage's rebuilt set, and in *k their copy there: i, the layer's number
 * among those the kind has a copy for, or 0. */
static const slot_acts *holder(const pp_stage *s, const slot_acts *sa, unsigned what, int i,
			       size_t *k)
{
	const bool kept = s->saved & what;
	*k = kept && i > 0 ? (size_t)i : 0;
	return kept ? sa : &s->acts->rebuilt;
}

/* Copy k of n statistics each; NULL for a buffer the stage does not hold
 * (rmsnorm's means) */
static pp_real *stat_at(pp_real *p, size_t k, size_t n) { return p ? p + k * n : NULL; }

static layer_acts layer_view(const pp_stage *s, slot_acts *sa, int l)
{
	const layer_index *li = &s->acts->layer[l];
	const pp_model_cfg *m = s->cfg;
	const size_t N = (size_t)s->B * s->T, C = m->d_model, F = s->d_ff;
	const size_t HD = (size_t)s->n_heads * m->head_dim;
	const size_t QKV = HD + 2 * (size_t)s->n_kv_heads * m->head_dim;
	const size_t UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	const size_t g = (size_t)l;
	/* each kind's copy: the layer's own in the slot, by its number among
	 * the layers of its kind for the MLP's, or the stage's rebuilt one */
	size_t k1, kq, ka, km, k2, ku, kf, ke;
	const slot_acts *n1 = holder(s, sa, PP_SAVE_NORM1, l, &k1);
	const slot_acts *q = holder(s, sa, PP_SAVE_QKV, l, &kq);
	const slot_acts *at = holder(s, sa, PP_SAVE_ATT, l, &ka);
	const slot_acts *md = holder(s, sa, PP_SAVE_MID, l, &km);
	const slot_acts *n2 = holder(s, sa, PP_SAVE_NORM2, l, &k2);
	const slot_acts *up = holder(s, sa, PP_SAVE_UP, li->dense, &ku);
	const slot_acts *ac = holder(s, sa, PP_SAVE_ACT, li->dense, &kf);
	const slot_acts *mo = holder(s, sa, PP_SAVE_MOE, li->moe, &ke);
	const bool split = s->spec.split_backward;
	const pp_ops *o = s->ops;
	return (layer_acts){
		.x = pp_act_at(o, sa->res, (size_t)l * N * C),
		.out = pp_act_at(o, sa->res, (size_t)(l + 1) * N * C),
		.h1 = pp_act_at(o, n1->h1, k1 * N * C),
		.mean1 = stat_at(n1->mean1, k1, N), .rstd1 = stat_at(n1->rstd1, k1, N),
		.qkv = pp_act_at(o, q->qkv, kq * N * QKV),
		.att = pp_act_at(o, at->att, ka * N * HD),
		.lse = stat_at(at->lse, ka, (size_t)s->B * s->n_heads * s->T),
		.mid = pp_act_at(o, md->mid, km * N * C), .h2 = pp_act_at(o, n2->h2, k2 * N * C),
		.mean2 = stat_at(n2->mean2, k2, N), .rstd2 = stat_at(n2->rstd2, k2, N),
		.up = li->dense >= 0 ? pp_act_at(o, up->up, ku * N * UP) : NULL,
		.act = li->dense >= 0 ? pp_act_at(o, ac->act, kf * N * F) : NULL,
		.moe = li->moe >= 0 ? &mo->moe[ke] : NULL,
		.moe_sc = &s->acts->moe_sc,
		.g_out = split ? pp_act_at(o, sa->g_out, g * N * C) : NULL,
		.g_up = split ? pp_act_at(o, sa->g_up, g * N * UP) : NULL,
		.g_mid = split ? pp_act_at(o, sa->g_mid, g * N * C) : NULL,
		.g_qkv = split ? pp_act_at(o, sa->g_qkv, g * N * QKV) : NULL,
	};
}

/* over N rows of (N,C) */
static void norm_fwd(const pp_stage *s, int N, pp_act *out, pp_real *mean, pp_real *rstd,
		     const pp_act *x, int wi, int bi)
{
	const pp_model_cfg *m = s->cfg;
	if (m->norm == PP_NORM_LAYER)
		s->ops->layernorm_fwd(out, mean, rstd, x, W(s, wi), W(s, bi), (pp_real)m->norm_eps, N,
				      m->d_model);
	else
		s->ops->rmsnorm_fwd(out, rstd, x, W(s, wi), (pp_real)m->norm_eps,
				    (pp_real)m->norm_offset, N, m->d_model);
}

/* res (N,C) = x + y (res may alias x or y), then out, mean, rstd as norm_fwd
 * of res: one pass over the rows */
static void norm_residual_fwd(const pp_stage *s, int N, pp_act *res, pp_act *out, pp_real *mean,
			      pp_real *rstd, const pp_act *x, const pp_act *y, int wi, int bi)
{
	const pp_model_cfg *m = s->cfg;
	if (m->norm == PP_NORM_LAYER)
		s->ops->layernorm_residual_fwd(res, out, mean, rstd, x, y, W(s, wi), W(s, bi),
					       (pp_real)m->norm_eps, N, m->d_model);
	else
		s->ops->rmsnorm_residual_fwd(res, out, rstd, x, y, W(s, wi), (pp_real)m->norm_eps,
					     (pp_real)m->norm_offset, N, m->d_model);
}

static void norm_bwd(const pp_stage *s, pp_act *dx, const pp_act *dout, const pp_act *x,
		     const pp_real *mean, const pp_real *rstd, int wi, int bi)
{
	const pp_model_cfg *m = s->cfg;
	int N = s->B * s->T;
	if (m->norm == PP_NORM_LAYER)
		s->ops->layernorm_bwd(dx, G(s, wi), G(s, bi), dout, x, W(s, wi), mean, rstd, N,
				      m->d_model);
	else
		s->ops->rmsnorm_bwd(dx, G(s, wi), dout, x, W(s, wi), rstd, (pp_real)m->norm_offset,
				    N, m->d_model);
}

static int act_kind(const pp_model_cfg *m)
{
	return m->mlp == PP_MLP_SWIGLU ? PP_ACT_SILU : PP_ACT_GELU_TANH;
}

static int moe_tp_sum(void *ctx, pp_real *buf, size_t n, pp_err *e)
{
	const pp_tp *tp = &((const pp_stage *)ctx)->spec.tp;
	return tp->allreduce(tp->ctx, buf, n, PP_TYPE_REAL, PP_REDUCE_SUM, e);
}

/* The MoE MLP of layer li as this rank holds it (moe.h). */
static moe_layer moe_of(const pp_stage *s, const layer_index *li)
{
	const pp_model_cfg *m = s->cfg;
	const int nl = m->n_experts / s->spec.ep.size;
	const bool grads = s->g != NULL;
	return (moe_layer){
		.ops = s->ops, .C = m->d_model, .F = s->d_ff, .E = m->n_experts, .K = m->top_k,
		.mode = m->router, .act = act_kind(m), .capacity = m->capacity_factor,
		.first = s->spec.ep.rank * nl, .n_local = nl,
		.router = W(s, li->router_w), .experts = W(s, li->expert0),
		.stride = 3 * (size_t)s->d_ff * m->d_model,
		.g_router = grads ? G(s, li->router_w) : NULL,
		.g_experts = grads ? G(s, li->expert0) : NULL,
		.ep = s->spec.ep.size > 1 ? s->spec.ep.comm : NULL, .tp_rank = s->spec.tp.rank,
		.tp_sum = s->spec.tp.size > 1 ? moe_tp_sum : NULL, .tp_ctx = (void *)s};
}

/* The weights of a microbatch's MoE losses in the objective. */
static void moe_loss_weights(const pp_stage *s, double *aux_w, double *z_w)
{
	const double k = s->spec.moe_loss_scale > 0 ? s->spec.moe_loss_scale : 1;
	*aux_w = s->cfg->router_aux_loss_coef * k;
	*z_w = s->cfg->router_z_loss_coef * k;
}

/* Where a layer's attention finds its keys and values: in the T rows of
 * the microbatch itself (training, NULL), or in a KV cache (decoding) that
 * the rows of sequence b, at positions pos[b].. (device memory), are
 * appended to: its slot's (Tmax,Hkv*D) entries start at k + b * Tmax*Hkv*D. */
typedef struct {
	pp_act *k, *v; /* this layer's, from the first sequence's slot */
	int Tmax;
	const int *pos; /* (B) */
} layer_kv;

/* One layer over B sequences of T rows (t's buffers hold B*T rows). */
static int layer_forward(const pp_stage *s, const layer_index *li, const layer_acts *t, int B,
			 int T, const layer_kv *kv, moe_losses *moe, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	const int N = B * T, C = m->d_model, F = s->d_ff, D = m->head_dim;
	const int Hq = s->n_heads, Hkv = s->n_kv_heads, HD = Hq * D, QKV = HD + 2 * Hkv * D;
	const bool gelu = m->mlp == PP_MLP_GELU;
	int rc;

	norm_fwd(s, N, t->h1, t->mean1, t->rstd1, t->x, li->norm1_w, li->norm1_b);
	linear(s, t->qkv, t->h1, li->qkv_w, W(s, li->qkv_b), N, C, QKV);
	if (kv) {
		/* each sequence at its own position */
		const size_t slot = (size_t)kv->Tmax * Hkv * D;
		for (int b = 0; b < B; b++) {
			pp_act *qkv = pp_act_at(o, t->qkv, (size_t)b * T * QKV);
			pp_act *k = pp_act_at(o, kv->k, b * slot), *v = pp_act_at(o, kv->v, b * slot);
			if (m->pos == PP_POS_ROPE)
				o->rope_fwd(qkv, 1, T, Hq, Hkv, D, (pp_real)m->rope_theta, kv->pos + b);
			o->kv_append(k, v, qkv, 1, T, Hq, Hkv, D, kv->Tmax, kv->pos + b);
			o->attention_cached(pp_act_at(o, t->att, (size_t)b * T * HD), qkv, k, v, 1, T,
					    Hq, Hkv, D, kv->Tmax, kv->pos + b, m->sliding_window);
		}
	} else {
		if (m->pos == PP_POS_ROPE)
			o->rope_fwd(t->qkv, B, T, Hq, Hkv, D, (pp_real)m->rope_theta, NULL);
		o->attention_fwd(t->att, t->lse, t->qkv, B, T, Hq, Hkv, D, m->sliding_window);
	}
	linear(s, t->mid, t->att, li->o_w, W0(s, li->o_b), N, HD, C);
	if ((rc = tp_sum(s, t->mid, (size_t)N * C, e)))
		return rc;
	/* mid = x + the attention branch, h2 = norm2(mid) */
	norm_residual_fwd(s, N, t->mid, t->h2, t->mean2, t->rstd2, t->x, t->mid, li->norm2_w,
			  li->norm2_b);
	if (li->moe >= 0) {
		moe_layer ml = moe_of(s, li);
		moe_losses ls;
		if ((rc = moe_forward(&ml, t->moe, t->moe_sc, t->h2, t->out, N, &ls, e)))
			return rc;
		if (moe) {
			moe->aux += ls.aux;
			moe->z += ls.z;
			moe->dropped += ls.dropped;
		}
	} else if (gelu && !s->packed) {
		o->matmul_gelu_fwd(t->act, t->up, t->h2, W(s, li->up_w), W(s, li->up_b), N, C, F);
	} else if (gelu) {
		linear(s, t->up, t->h2, li->up_w, W(s, li->up_b), N, C, F);
		o->gelu_fwd(t->act, t->up, (size_t)N * F);
	} else {
		linear(s, t->up, t->h2, li->up_w, W(s, li->up_b), N, C, 2 * F);
		o->glu_fwd(t->act, t->up, N, F, act_kind(m));
	}
	if (li->moe < 0)
		linear(s, t->out, t->act, li->down_w, W0(s, li->down_b), N, F, C);
	if ((rc = tp_sum(s, t->out, (size_t)N * C, e)))
		return rc;
	/* A plain add: the norm of out belongs to the next layer (or the head),
	 * and recompute, the stage boundary and the cached decode all start a
	 * layer from its input alone. */
	o->add(t->out, t->out, t->mid, (size_t)N * C);
	return 0;
}

/* Rebuilds in t what the stage's recompute policy did not keep of layer li
 * (stage_saved_acts), from what it did, each with the forward's own op on
 * the forward's own inputs, so to the same bits: the whole layer from its
 * input where not even the qkv product was kept (full); else (a policy
 * keeping every product) the norms, attention where its output was not
 * kept, and the MLP's activation function. */
static int layer_rebuild(const pp_stage *s, const layer_index *li, const layer_acts *t, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	const unsigned keep = s->saved;
	const int B = s->B, T = s->T, N = B * T, F = s->d_ff;
	if (!(keep & PP_SAVE_QKV))
		return layer_forward(s, li, t, B, T, NULL, NULL, e);
	if (!(keep & PP_SAVE_NORM1))
		norm_fwd(s, N, t->h1, t->mean1, t->rstd1, t->x, li->norm1_w, li->norm1_b);
	if (!(keep & PP_SAVE_ATT))
		o->attention_fwd(t->att, t->lse, t->qkv, B, T, s->n_heads, s->n_kv_heads,
				 m->head_dim, m->sliding_window);
	if (!(keep & PP_SAVE_NORM2))
		norm_fwd(s, N, t->h2, t->mean2, t->rstd2, t->mid, li->norm2_w, li->norm2_b);
	if (li->dense >= 0 && !(keep & PP_SAVE_ACT)) {
		if (m->mlp == PP_MLP_GELU)
			o->gelu_fwd(t->act, t->up, (size_t)N * F);
		else
			o->glu_fwd(t->act, t->up, N, F, act_kind(m));
	}
	return 0;
}

/* a->d_res holds dL/d(layer output) on entry and dL/d(layer input) on exit.
 * STAGE_BWD_INPUT leaves every weight product's output gradient in t->g_*
 * for STAGE_BWD_WEIGHT (norm weights are cheap and done with the input part). */
static int layer_backward(const pp_stage *s, const layer_index *li, const layer_acts *t, int part,
			  pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	const int B = s->B, T = s->T, N = B * T, C = m->d_model, F = s->d_ff, D = m->head_dim;
	const int Hq = s->n_heads, Hkv = s->n_kv_heads, HD = Hq * D, QKV = HD + 2 * Hkv * D;
	const int UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	const bool wgrad = part != STAGE_BWD_INPUT;
	const size_t NC = (size_t)N * C, A = pp_act_size(o);
	int rc;

	double aux_w, z_w;
	moe_loss_weights(s, &aux_w, &z_w);
	if (part == STAGE_BWD_WEIGHT) {
		if (li->moe >= 0) {
			moe_layer ml = moe_of(s, li);
			if ((rc = moe_backward(&ml, t->moe, t->moe_sc, t->h2, NULL, NULL, aux_w, z_w,
					       MOE_BWD_WEIGHT, N, e)))
				return rc;
		} else {
			o->matmul_bwd(NULL, G(s, li->down_w), G(s, li->down_b), t->g_out, t->act, NULL,
				      N, F, C);
			o->matmul_bwd(NULL, G(s, li->up_w), G(s, li->up_b), t->g_up, t->h2, NULL, N, C,
				      UP);
		}
		o->matmul_bwd(NULL, G(s, li->o_w), G(s, li->o_b), t->g_mid, t->att, NULL, N, HD, C);
		o->matmul_bwd(NULL, G(s, li->qkv_w), G(s, li->qkv_b), t->g_qkv, t->h1, NULL, N, C, QKV);
		return 0;
	}
	if (li->moe >= 0) {
		moe_layer ml = moe_of(s, li);
		if ((rc = moe_backward(&ml, t->moe, t->moe_sc, t->h2, a->d_res, a->d_h, aux_w, z_w,
				       wgrad ? MOE_BWD_FULL : MOE_BWD_INPUT, N, e)))
			return rc;
	} else {
		if (!wgrad)
			o->to_device(t->g_out, a->d_res, NC * A);
		pp_real *dw_down = wgrad ? G(s, li->down_w) : NULL;
		pp_real *db_down = wgrad ? G(s, li->down_b) : NULL;
		if (m->mlp == PP_MLP_GELU) {
			o->gelu_matmul_bwd(a->d_up, dw_down, db_down, a->d_res, t->act, t->up,
					   W(s, li->down_w), N, F, C);
		} else {
			o->matmul_bwd(a->d_act, dw_down, db_down, a->d_res, t->act, W(s, li->down_w), N,
				      F, C);
			o->glu_bwd(a->d_up, a->d_act, t->up, N, F, act_kind(m));
		}
		if (!wgrad)
			o->to_device(t->g_up, a->d_up, (size_t)N * UP * A);
		o->matmul_bwd(a->d_h, wgrad ? G(s, li->up_w) : NULL, wgrad ? G(s, li->up_b) : NULL,
			      a->d_up, t->h2, W(s, li->up_w), N, C, UP);
	}
	if ((rc = tp_sum(s, a->d_h, NC, e)))
		return rc;
	norm_bwd(s, a->d_res, a->d_h, t->mid, t->mean2, t->rstd2, li->norm2_w, li->norm2_b);

	if (!wgrad)
		o->to_device(t->g_mid, a->d_res, NC * A);
	o->matmul_bwd(a->d_att, wgrad ? G(s, li->o_w) : NULL, wgrad ? G(s, li->o_b) : NULL, a->d_res,
		      t->att, W(s, li->o_w), N, HD, C);
	o->attention_bwd(a->d_qkv, a->d_att, t->att, t->lse, t->qkv, B, T, Hq, Hkv, D,
			 m->sliding_window);
	if (m->pos == PP_POS_ROPE)
		o->rope_bwd(a->d_qkv, B, T, Hq, Hkv, D, (pp_real)m->rope_theta, NULL);
	if (!wgrad)
		o->to_device(t->g_qkv, a->d_qkv, (size_t)N * QKV * A);
	o->matmul_bwd(a->d_h, wgrad ? G(s, li->qkv_w) : NULL, wgrad ? G(s, li->qkv_b) : NULL,
		      a->d_qkv, t->h1, W(s, li->qkv_w), N, C, QKV);
	if ((rc = tp_sum(s, a->d_h, NC, e)))
		return rc;
	norm_bwd(s, a->d_res, a->d_h, t->x, t->mean1, t->rstd1, li->norm1_w, li->norm1_b);
	return 0;
}

/* Token ids of this rank's vocabulary shard: id - vocab_begin inside it,
 * PP_IGNORE_INDEX kept, anything else -1 (held by another shard). */
static void to_shard(const pp_stage *s, int *dst, const int *src, int N)
{
	for (int i = 0; i < N; i++) {
		int v = src[i] - s->vocab_begin;
		dst[i] = src[i] == PP_IGNORE_INDEX ? PP_IGNORE_INDEX : v >= 0 && v < s->vocab ? v : -1;
	}
}

/* Loss of R rows of logits (R,V) into losses (R), tgt (R) their device
 * targets; with dscale != 0 the logits become their gradient. With tp the
 * vocabulary is split: each rank's log-sum-exp and target logit are
 * combined across the group, and no rank holds the full (R, V) logits. */
static int chunk_loss(pp_stage *s, pp_act *logits, const int *tgt_ids, pp_real *losses, int R,
		      pp_real dscale, pp_err *e)
{
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	const pp_tp *tp = &s->spec.tp;
	const int V = s->vocab;
	pp_act *dlogits = dscale != 0 ? logits : NULL;
	if (tp->size == 1) {
		o->crossentropy(losses, dlogits, logits, tgt_ids, R, V, dscale);
		return 0;
	}
	pp_real *lse = a->ce, *tgt = a->ce + R, *h = a->host_real;
	double *M = a->host, *S = a->host + R;
	o->logsumexp_rows(lse, tgt, logits, tgt_ids, R, V);
	int rc = tp->allreduce(tp->ctx, tgt, (size_t)R, PP_TYPE_REAL, PP_REDUCE_SUM, e);
	o->to_host(h, lse, (size_t)R * sizeof(pp_real));
	for (int i = 0; i < R; i++)
		M[i] = h[i];
	/* global lse = M + log(sum over ranks of exp(lse_r - M)), M the max over ranks */
	if (!rc)
		rc = tp->allreduce(tp->ctx, lse, (size_t)R, PP_TYPE_REAL, PP_REDUCE_MAX, e);
	if (rc)
		return rc;
	o->to_host(h + R, lse, (size_t)R * sizeof(pp_real));
	for (int i = 0; i < R; i++) {
		S[i] = M[i];
		M[i] = h[R + i];
		h[i] = (pp_real)exp(S[i] - M[i]);
	}
	o->to_device(lse, h, (size_t)R * sizeof(pp_real));
	if ((rc = tp->allreduce(tp->ctx, lse, (size_t)R, PP_TYPE_REAL, PP_REDUCE_SUM, e)))
		return rc;
	o->to_host(h, lse, (size_t)R * sizeof(pp_real));
	o->to_host(h + R, tgt, (size_t)R * sizeof(pp_real));
	o->to_host(a->host_ids, tgt_ids, (size_t)R * sizeof(int));
	for (int i = 0; i < R; i++) {
		double l = M[i] + log((double)h[i]);
		h[i] = (pp_real)l;
		h[R + i] = a->host_ids[i] == PP_IGNORE_INDEX ? 0 : (pp_real)(l - (double)h[R + i]);
	}
	o->to_device(lse, h, (size_t)R * sizeof(pp_real));
	o->to_device(losses, h + R, (size_t)R * sizeof(pp_real));
	if (dlogits)
		o->softmax_grad(dlogits, logits, lse, tgt_ids, R, V, dscale);
	return 0;
}

/* The output head and the loss of the last stage over a->hf (N,C), in
 * chunks of R rows (Liger's fused linear cross-entropy, llm.c's chunked
 * classifier): logits (R,V) = hf_chunk W^T, their loss, and with dscale != 0
 * at once dhf_chunk (R,C) = dlogits W and dW += dlogits^T hf_chunk, so the
 * logits die with their chunk. Per-row losses into a->losses (N). */
static int head_and_loss(pp_stage *s, slot_acts *sa, pp_real dscale, pp_err *e)
{
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	const int N = s->B * s->T, C = s->cfg->d_model, V = s->vocab;
	for (int r0 = 0; r0 < N; r0 += a->loss_rows) {
		const int R = N - r0 < a->loss_rows ? N - r0 : a->loss_rows;
		const pp_act *h = pp_act_at(o, a->hf, (size_t)r0 * C);
		pp_act *logits =
			s->spec.keep_logits ? pp_act_at(o, sa->logits, (size_t)r0 * V) : a->logits;
		o->matmul_fwd(logits, h, W(s, a->head_w), NULL, R, C, V);
		int rc = chunk_loss(s, logits, sa->tgt + r0, a->losses + r0, R, dscale, e);
		if (rc)
			return rc;
		if (dscale != 0)
			o->matmul_bwd(pp_act_at(o, sa->dhf, (size_t)r0 * C), G(s, a->head_w), NULL,
				      logits, h, W(s, a->head_w), R, C, V);
	}
	return 0;
}

int stage_forward(pp_stage *s, int slot, const int *tokens, const pp_act *in,
		  const int *targets, pp_real dscale, double *loss_sum, long *n_valid,
		  pp_act **out, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	slot_acts *sa = &a->slot[slot];
	const int B = s->B, T = s->T, N = B * T, C = m->d_model, V = m->vocab_size;
	const int L = s->layer_end - s->layer_begin, tail = s->n_units - 1;
	int rc;

	if (s->first) {
		for (int i = 0; i < N; i++)
			if (tokens[i] < 0 || tokens[i] >= V)
				return pp_errorf(e, PP_ERUNTIME,
						 "token %d at position %d is outside the vocabulary [0, %d)",
						 tokens[i], i, V);
		to_shard(s, a->host_ids, tokens, N);
		o->to_device(sa->tok, a->host_ids, (size_t)N * sizeof(int));
		if ((rc = unit_use(s, 0, L > 0 ? 1 : tail, false, e)))
			return rc;
		pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
		o->embed_fwd(sa->res, sa->tok, W(s, a->embed_w), W0(s, a->embed_pos), scale, B, T, C,
			     NULL);
		if ((rc = tp_sum(s, sa->res, (size_t)N * C, e)))
			return rc;
	} else {
		o->to_device(sa->res, in, (size_t)N * C * pp_act_size(o)); /* same device: a copy */
	}
	moe_losses moe = {0};
	for (int l = 0; l < L; l++) {
		layer_acts t = layer_view(s, sa, l);
		if ((rc = unit_use(s, 1 + l, l + 1 < L ? 2 + l : s->last ? tail : -1, false, e)) ||
		    (rc = layer_forward(s, &a->layer[l], &t, B, T, NULL, &moe, e)))
			return rc;
	}
	{
		s->moe.aux += moe.aux;
		s->moe.z += moe.z;
		s->moe.dropped += moe.dropped;
		s->moe.routed += (long)a->n_moe * N * m->top_k;
	}
	pp_act *x = pp_act_at(o, sa->res, (size_t)L * N * C);
	if (!s->last) {
		*out = x;
		return 0;
	}
	if (dscale != 0 && s->spec.no_grad)
		return pp_errorf(e, PP_EUSAGE, "training forward on a stage built for inference only");
	long valid = 0;
	for (int i = 0; i < N; i++) {
		if (targets[i] >= V || (targets[i] < 0 && targets[i] != PP_IGNORE_INDEX))
			return pp_errorf(e, PP_ERUNTIME,
					 "target %d at position %d is outside the vocabulary [0, %d)",
					 targets[i], i, V);
		valid += targets[i] >= 0;
	}
	to_shard(s, a->host_ids, targets, N);
	o->to_device(sa->tgt, a->host_ids, (size_t)N * sizeof(int));
	/* a tied head reads the embedding's unit too */
	const bool tied = a->head_w == a->embed_w, grads = dscale != 0;
	if ((rc = unit_use(s, tail, tied ? 0 : -1, grads, e)) ||
	    (tied && (rc = unit_use(s, 0, -1, grads, e))))
		return rc;
	norm_fwd(s, N, a->hf, sa->meanf, sa->rstdf, x, a->normf_w, a->normf_b);
	sa->has_grad = 0;
	if ((rc = head_and_loss(s, sa, dscale, e)))
		return rc;
	if (grads && ((rc = unit_done(s, tail, e)) || (tied && (rc = unit_done(s, 0, e)))))
		return rc;
	sa->has_grad = dscale != 0;
	o->to_host(a->host_real, a->losses, (size_t)N * sizeof(pp_real));
	double sum = 0;
	for (int i = 0; i < N; i++)
		sum += a->host_real[i];
	if (loss_sum)
		*loss_sum += sum;
	if (n_valid)
		*n_valid += valid;
	return 0;
}

/* Where layer l's tensors start in the buffer (its first is norm1_w), and
 * where what follows the layers starts (the final norm, the head). */
static size_t layer_from(const pp_stage *s, int l)
{
	return s->params[s->acts->layer[l].norm1_w].off;
}
static size_t tail_from(const pp_stage *s)
{
	return s->last ? s->params[s->acts->normf_w].off : s->n_shared;
}

/* Tells spec.grad_ready that g[from, n_shared) is final, when report. */
static int grads_final(pp_stage *s, bool report, size_t from, pp_err *e)
{
	const stage_grad_hook *h = &s->spec.grad_ready;
	return report && h->fn ? h->fn(h->ctx, s, from, e) : 0;
}

int stage_backward(pp_stage *s, int slot, int part, const pp_act *dout, pp_act **din, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	slot_acts *sa = &a->slot[slot];
	const int B = s->B, T = s->T, N = B * T, C = m->d_model;
	const int L = s->layer_end - s->layer_begin, tail = s->n_units - 1;
	const size_t NC = (size_t)N * C;
	const bool report = (part & STAGE_BWD_LAST) && (part & ~STAGE_BWD_LAST) != STAGE_BWD_INPUT;
	part &= ~STAGE_BWD_LAST;
	int rc;

	if (part != STAGE_BWD_FULL && !s->spec.split_backward)
		return pp_errorf(e, PP_EUSAGE, "split backward pass on a stage built without it");
	if (part == STAGE_BWD_WEIGHT) {
		if (!sa->has_input_grad)
			return pp_errorf(e, PP_ERUNTIME,
					 "weight-gradient pass of slot %d before its input-gradient pass",
					 slot);
		/* the head's weight gradient came in the forward; the final norm's
		 * in the input part: the buffer's end is final first */
		if ((rc = grads_final(s, report, tail_from(s), e)))
			return rc;
		for (int l = L - 1; l >= 0; l--) {
			layer_acts t = layer_view(s, sa, l);
			if ((rc = unit_use(s, 1 + l, l > 0 ? l : -1, true, e)))
				return rc;
			layer_backward(s, &a->layer[l], &t, part, e);
			if ((rc = unit_done(s, 1 + l, e)) ||
			    (rc = grads_final(s, report, layer_from(s, l), e)))
				return rc;
		}
		sa->has_input_grad = 0;
		return grads_final(s, report, 0, e);
	}
	if (s->last) {
		if (!sa->has_grad)
			return pp_errorf(e, PP_ERUNTIME,
					 "backward of microbatch slot %d without a training forward", slot);
		pp_act *x = pp_act_at(o, sa->res, (size_t)L * NC);
		o->zero(a->d_res, NC * pp_act_size(o));
		if ((rc = tp_sum(s, sa->dhf, NC, e)) ||
		    (rc = unit_use(s, tail, L > 0 ? L : s->first ? 0 : -1, true, e)))
			return rc;
		norm_bwd(s, a->d_res, sa->dhf, x, sa->meanf, sa->rstdf, a->normf_w, a->normf_b);
		sa->has_grad = 0;
		if ((rc = unit_done(s, tail, e)))
			return rc;
	} else {
		o->to_device(a->d_res, dout, NC * pp_act_size(o));
	}
	if ((rc = grads_final(s, report, tail_from(s), e)))
		return rc;
	for (int l = L - 1; l >= 0; l--) {
		layer_acts t = layer_view(s, sa, l);
		if ((rc = unit_use(s, 1 + l, l > 0 ? l : s->first ? 0 : -1, true, e)) ||
		    (rc = layer_rebuild(s, &a->layer[l], &t, e)))
			return rc;
		if ((rc = layer_backward(s, &a->layer[l], &t, part, e)) || (rc = unit_done(s, 1 + l, e)) ||
		    (rc = grads_final(s, report, layer_from(s, l), e)))
			return rc;
	}
	if (s->first) {
		pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
		if ((rc = unit_use(s, 0, -1, true, e)))
			return rc;
		o->embed_bwd(G(s, a->embed_w), G(s, a->embed_pos), a->d_res, sa->tok, scale, B, T, C,
			     NULL);
		if ((rc = unit_done(s, 0, e)))
			return rc;
	} else {
		*din = a->d_res;
	}
	sa->has_input_grad = part == STAGE_BWD_INPUT;
	return grads_final(s, report, 0, e);
}

int stage_reduce_replica_grads(pp_stage *s, size_t lo, size_t hi, pp_err *e)
{
	const pp_tp *tp = &s->spec.tp;
	/* kv heads shared by several ranks: each rank's gradient covers only its
	 * query heads. Sum each head's partials over the ranks holding it by an
	 * allreduce over the whole group of a buffer with one slot per head. */
	for (int i = 0; i < s->n_params; i++) {
		pp_param *p = &s->params[i];
		if (!p->grad_partial || p->off < lo || p->off >= hi)
			continue;
		/* the part held: every tp rank holds the same part (FSDP shards
		 * alike layouts alike) */
		const size_t a = p->off > s->w_lo ? p->off : s->w_lo;
		const size_t b = p->off + p->n < s->w_hi ? p->off + p->n : s->w_hi;
		if (a >= b)
			continue;
		const size_t n = b - a;
		size_t heads = (size_t)(p->global_shape[0] / p->shape[0]);
		size_t slot = (size_t)(p->block_row[0] / p->shape[0]);
		pp_real *buf = s->acts->replica; /* (heads, n), sized in stage_create */
		s->ops->zero(buf, heads * n * sizeof(pp_real));
		s->ops->to_device(buf + slot * n, stage_g(s, a), n * sizeof(pp_real));
		int rc = tp->allreduce(tp->ctx, buf, heads * n, PP_TYPE_REAL, PP_REDUCE_SUM, e);
		if (rc)
			return rc;
		s->ops->to_device(stage_g(s, a), buf + slot * n, n * sizeof(pp_real));
	}
	return 0;
}

/* ---- decoding with a KV cache ------------------------------------------- */

int kv_cache_create(pp_kv_cache *c, const pp_stage *s, int B, int Tmax, int rows, bool graphs,
		    pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	memset(c, 0, sizeof *c);
	if (!s->first || !s->last || s->spec.tp.size != 1)
		return pp_errorf(e, PP_EUSAGE,
				 "a KV cache needs a stage holding every layer without tensor parallelism");
	if (B < 1 || rows < 1 || Tmax < 1)
		return pp_errorf(e, PP_EUSAGE, "KV cache of %d slots, %d positions, %d rows at once",
				 B, Tmax, rows);
	if (m->pos == PP_POS_RELATIVE)
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s' uses relative position biases: decoding supports rope and "
				 "learned positions",
				 m->preset);
	if (Tmax > m->max_seq_len)
		return pp_errorf(e, PP_EUSAGE,
				 "%d positions exceed the context of model '%s' (max_seq_len=%d)", Tmax,
				 m->preset, m->max_seq_len);
	const size_t L = (size_t)m->n_layers, C = m->d_model, F = s->d_ff, V = s->vocab;
	const size_t KV = (size_t)s->n_kv_heads * m->head_dim, HD = (size_t)s->n_heads * m->head_dim;
	const size_t QKV = HD + 2 * KV, UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	const size_t N = (size_t)rows;
	c->ops = o;
	c->B = B;
	c->Tmax = Tmax;
	c->rows = rows;
	c->graphs = graphs && o->graph_begin;
	c->kv_bytes = 2 * L * (size_t)B * Tmax * KV * pp_act_size(o);
	c->layers = (int)L;
	c->pos_bytes = KV * pp_act_size(o);
	pp_act **p[] = {&c->k, &c->v, &c->x[0], &c->x[1], &c->h, &c->qkv, &c->att,
			&c->mid, &c->up, &c->act, &c->last, &c->logits};
	const size_t n[] = {L * B * Tmax * KV, L * B * Tmax * KV, N * C, N * C, N * C,
			    N * QKV, N * HD, N * C, N * UP, N * F, (size_t)B * C, (size_t)B * V};
	pp_real **r[] = {&c->stat};
	const size_t rn[] = {2 * N};
	c->dev = o->alloc((B + N) * sizeof(int));
	c->host = malloc((B + N) * sizeof(int));
	c->len = calloc((size_t)B, sizeof(int));
	const pp_stage_acts *a = s->acts;
	moe_layer ml = moe_of(s, &a->layer[0]);
	c->graphs = c->graphs && !a->n_moe;
	if (!c->dev || !c->host || !c->len || alloc_acts(o, p, n, NELEMS(p)) ||
	    alloc_reals(o, r, rn, NELEMS(r)) ||
	    (a->n_moe && (moe_acts_alloc(&c->moe, &ml, (int)N, false, e) ||
			  moe_scratch_alloc(&c->moe_sc, &ml, (int)N, e)))) {
		size_t bytes = c->kv_bytes;
		kv_cache_free(c);
		return pp_errorf(e, PP_ERUNTIME,
				 "out of memory for a KV cache of %d slots x %d positions (%.3g GB)", B,
				 Tmax, 1e-9 * (double)bytes);
	}
	return 0;
}

void kv_cache_free(pp_kv_cache *c)
{
	const pp_ops *o = c->ops;
	if (!o)
		return;
	if (c->graph)
		o->graph_free(c->graph);
	void *p[] = {c->k, c->v, c->x[0], c->x[1], c->h, c->stat, c->qkv, c->att,
		     c->mid, c->up, c->act, c->last, c->logits, c->dev};
	for (int i = 0; i < NELEMS(p); i++)
		o->free(p[i]);
	moe_acts_free(&c->moe, o);
	moe_scratch_free(&c->moe_sc, o);
	free(c->host);
	free(c->len);
	memset(c, 0, sizeof *c);
}

int kv_cache_tokens(const pp_stage *s, pp_kv_cache *c, int slot0, int nseq, const int *tokens,
		    int n, pp_err *e)
{
	const int V = s->cfg->vocab_size;
	if (slot0 < 0 || nseq < 1 || slot0 + nseq > c->B)
		return pp_errorf(e, PP_EUSAGE, "slots %d..%d: the KV cache has %d", slot0,
				 slot0 + nseq - 1, c->B);
	if (n < 1 || (long)n * nseq > c->rows)
		return pp_errorf(e, PP_EUSAGE,
				 "%d new tokens for %d sequences: the KV cache takes %d rows at once", n,
				 nseq, c->rows);
	for (int b = 0; b < nseq; b++) {
		const int len = c->len[slot0 + b];
		if (len + n > c->Tmax)
			return pp_errorf(e, PP_EUSAGE, "position %d is past the KV cache's %d positions",
					 len + n - 1, c->Tmax);
		for (int i = 0; i < n; i++) {
			const int t = tokens[b * n + i];
			if (t < 0 || t >= V)
				return pp_errorf(e, PP_EUSAGE,
						 "token %d at position %d is outside the vocabulary [0, %d)",
						 t, len + i, V);
			c->host[nseq + b * n + i] = t;
		}
		c->host[b] = len;
	}
	c->ops->to_device(c->dev, c->host, (size_t)nseq * (1 + n) * sizeof(int));
	c->slot0 = slot0;
	c->nseq = nseq;
	c->n = n;
	return 0;
}

void kv_cache_reset(pp_kv_cache *c, int slot) { c->len[slot] = 0; }

void kv_cache_move(pp_kv_cache *c, int from, int to)
{
	const pp_ops *o = c->ops;
	const size_t slot = (size_t)c->Tmax * c->pos_bytes, used = (size_t)c->len[from] * c->pos_bytes;
	for (size_t l = 0; l < (size_t)c->layers; l++) {
		const size_t base = l * (size_t)c->B * slot;
		const size_t src = base + (size_t)from * slot, dst = base + (size_t)to * slot;
		o->to_device((char *)c->k + dst, (char *)c->k + src, used);
		o->to_device((char *)c->v + dst, (char *)c->v + src, used);
	}
	c->len[to] = c->len[from];
	c->len[from] = 0;
}

/* The ops of one cached forward, issued: rows at the positions c->dev holds */
static int forward_cached(pp_stage *s, pp_kv_cache *c, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	const int B = c->nseq, n = c->n, N = B * n, C = m->d_model;
	const int L = s->layer_end - s->layer_begin;
	const size_t KV = (size_t)s->n_kv_heads * m->head_dim, layer = (size_t)c->B * c->Tmax * KV;
	const size_t first = (size_t)c->slot0 * c->Tmax * KV;
	const int *pos = c->dev, *tok = c->dev + B;
	int rc;
	pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
	if (a->embed_pos < 0)
		o->embed_fwd(c->x[0], tok, W(s, a->embed_w), NULL, scale, B, n, C, NULL);
	else /* learned positions: each sequence from its own */
		for (int b = 0; b < B; b++)
			o->embed_fwd(pp_act_at(o, c->x[0], (size_t)b * n * C), tok + b * n,
				     W(s, a->embed_w), W(s, a->embed_pos), scale, 1, n, C, pos + b);
	for (int l = 0; l < L; l++) {
		/* one set of buffers serves every layer; h holds h1, then h2 */
		layer_acts t = {.x = c->x[l % 2], .out = c->x[(l + 1) % 2], .h1 = c->h,
				.mean1 = c->stat, .rstd1 = c->stat + N, .qkv = c->qkv, .att = c->att,
				.mid = c->mid, .h2 = c->h, .mean2 = c->stat, .rstd2 = c->stat + N,
				.up = c->up, .act = c->act, .moe = &c->moe, .moe_sc = &c->moe_sc};
		layer_kv kv = {pp_act_at(o, c->k, (size_t)l * layer + first),
			       pp_act_at(o, c->v, (size_t)l * layer + first), c->Tmax, pos};
		if ((rc = layer_forward(s, &a->layer[l], &t, B, n, &kv, NULL, e)))
			return rc;
	}
	/* the last new row of each sequence: all of them when n is 1 (and no copy,
	 * so that a backend graph can record the step) */
	pp_act *x = c->x[L % 2], *last = x;
	if (n > 1) {
		last = c->last;
		for (int b = 0; b < B; b++)
			o->to_device(pp_act_at(o, last, (size_t)b * C),
				     pp_act_at(o, x, ((size_t)b * n + n - 1) * C),
				     (size_t)C * pp_act_size(o));
	}
	norm_fwd(s, B, c->h, c->stat, c->stat + B, last, a->normf_w, a->normf_b);
	linear(s, c->logits, c->h, a->head_w, NULL, B, C, s->vocab);
	return 0;
}

int stage_forward_cached(pp_stage *s, pp_kv_cache *c, pp_err *e)
{
	const pp_ops *o = s->ops;
	int rc = 0;
	if (c->n < 1)
		return pp_errorf(e, PP_EUSAGE, "cached forward without new tokens (kv_cache_tokens)");
	/* A recording keeps what the backend set up for the step when it ran
	 * eagerly: its matrix-product plans and kernels (per shape: a prompt's
	 * forward has other shapes, so one step of one token runs eagerly first)
	 * and its scratch, which cannot move while a graph lives (another
	 * forward may need more: it drops the recording). */
	const bool step = c->n == 1;
	const bool same = c->graph_slot0 == c->slot0 && c->graph_nseq == c->nseq;
	if (c->graph && !(step && same)) {
		o->graph_free(c->graph);
		c->graph = NULL;
	}
	if (step && same && c->graphs && c->warm) {
		if (!c->graph) {
			o->graph_begin();
			rc = forward_cached(s, c, e);
			void *g = o->graph_end();
			if (rc)
				o->graph_free(g);
			else
				c->graph = g;
		}
		if (!rc)
			o->graph_launch(c->graph);
	} else {
		rc = forward_cached(s, c, e);
		c->warm = step;
		c->graph_slot0 = c->slot0;
		c->graph_nseq = c->nseq;
	}
	if (rc)
		return rc;
	for (int b = 0; b < c->nseq; b++)
		c->len[c->slot0 + b] += c->n;
	c->n = 0;
	return 0;
}

/* The stored form of the product whose parameters start at idx and cover
 * oc rows of ic: from `stored` when every part has one format there, else
 * made from the compute copy as fmt. */
static int pack_one(pp_stage *s, int idx, int oc, int ic, int fmt, const stage_stored *stored,
		    pp_err *e)
{
	const pp_ops *o = s->ops;
	pp_packed *pk = &s->packed[idx];
	int have = -1, rc = 0, rows = 0, last = idx;
	for (int i = idx; stored && rows < oc && i < s->n_params; i++, last = i) {
		int f = -1;
		if ((rc = stored->get(stored->ctx, &s->params[i], &f, NULL, e)))
			return rc;
		have = i == idx || f == have ? f : -1;
		rows += (int)(s->params[i].n / (size_t)ic);
		if (have < 0)
			break;
	}
	if (have >= 0 && rows == oc && pp_weights_bytes(have, oc, ic)) {
		const size_t row = pp_weights_bytes(have, 1, ic);
		if (!(pk->data = malloc(pp_weights_bytes(have, oc, ic))))
			return pp_errorf(e, PP_ERUNTIME, "out of memory storing %s",
					 s->params[idx].name);
		pk->fmt = have;
		pk->owned = true;
		for (int i = idx, at = 0; i < last && !rc; i++) {
			rc = stored->get(stored->ctx, &s->params[i], &have, (char *)pk->data + at * row, e);
			at += (int)(s->params[i].n / (size_t)ic);
		}
	} else {
		const size_t nb = pp_weights_bytes(fmt, oc, ic);
		pk->fmt = fmt;
		if (!nb)
			return pp_errorf(e, PP_EUSAGE, "weights=%s: %s has rows of %d, not a multiple of 32",
					 pp_weights_name(fmt), s->params[idx].name, ic);
		if (fmt == PP_WEIGHTS_F32)
			pk->data = W(s, idx);
		else if (!(pk->data = o->pack_weight(W(s, idx), oc, ic, fmt)))
			return pp_errorf(e, PP_ERUNTIME, "out of memory storing %s as %s",
					 s->params[idx].name, pp_weights_name(fmt));
		pk->owned = fmt != PP_WEIGHTS_F32;
	}
	if (!rc) {
		s->packed_bytes += (double)pp_weights_bytes(pk->fmt, oc, ic);
		s->packed_elems += (size_t)oc * ic;
	}
	return rc;
}

int stage_pack_weights(pp_stage *s, int fmt, const stage_stored *stored, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	if (fmt < PP_WEIGHTS_F32 || fmt > PP_WEIGHTS_Q8_0)
		return pp_errorf(e, PP_EUSAGE, "weights: format %d is not one pp makes", fmt);
	if (!o->matmul_packed || (fmt != PP_WEIGHTS_F32 && !o->pack_weight) ||
	    o->act_type != PP_TYPE_REAL)
		return pp_errorf(e, PP_EUSAGE, "weights=%s: the %s backend has no products over "
				 "stored weights", pp_weights_name(fmt), o->name);
	if (s->packed)
		return pp_errorf(e, PP_EUSAGE, "the stage's weights are stored for decoding already");
	const int C = m->d_model, F = s->d_ff, HD = s->n_heads * m->head_dim;
	const int QKV = HD + 2 * s->n_kv_heads * m->head_dim;
	const int UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	s->packed = calloc((size_t)s->n_params, sizeof *s->packed);
	if (!s->packed)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	s->packed_elems = 0;
	s->packed_bytes = 0;
	int L = s->layer_end - s->layer_begin, rc = 0;
	for (int l = -1; l < L && !rc; l++) {
		/* l = -1: the head */
		const layer_index *li = l < 0 ? NULL : &a->layer[l];
		const int idx[4] = {l < 0 ? a->head_w : li->qkv_w, l < 0 ? -1 : li->o_w,
				    l < 0 ? -1 : li->up_w, l < 0 ? -1 : li->down_w};
		const int oc[4] = {l < 0 ? s->vocab : QKV, C, UP, C};
		const int ic[4] = {C, HD, C, F};
		for (int k = 0; k < 4 && !rc; k++)
			if (idx[k] >= 0)
				rc = pack_one(s, idx[k], oc[k], ic[k], fmt, stored, e);
	}
	if (rc)
		stage_unpack_weights(s);
	return rc;
}
