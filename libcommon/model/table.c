/* The parameter table: every tensor a stage holds, by its Hugging Face
 * name, with its slice of the whole tensor under tp and ep, its place in
 * the flat buffer, and FSDP's units over that buffer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/hparams.h"
#include "internal.h"

typedef struct {
	pp_stage *s;
	int cap;
	int lora; /* adding LoRA's A (1) or B (2): under LoRA all else is the frozen base */
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
	p->lora = tb->lora;
	p->frozen = s->spec.lora.rank > 0 && !tb->lora;
	size_t *end = p->frozen ? &s->n_base : &s->n_elems;
	p->off = *end;
	*end += p->n;
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
static int replicated(namer *n, const char *name, int ndim, int64_t rows, int64_t cols, bool decay,
		      double std, double value)
{
	pp_param p = {.ndim = ndim,
		      .shape = {rows, cols},
		      .global_shape = {rows, cols},
		      .replicas = n->s->spec.tp.size,
		      .tp_owner = n->s->spec.tp.rank == 0,
		      .decay = decay,
		      .init_std = std,
		      .init_value = value};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* Rows [row, row + rows) of a (grows, cols) tensor: column-parallel weights
 * and their biases (ndim 1), vocabulary-parallel embeddings. replicas > 1
 * when several ranks hold the same rows (kv heads when tp > kv heads). */
static int row_block(namer *n, const char *name, int ndim, int64_t rows, int64_t grows, int64_t row,
		     int64_t cols, int replicas, double std)
{
	const pp_tp *tp = &n->s->spec.tp;
	pp_param p = {.ndim = ndim,
		      .shape = {rows, cols},
		      .global_shape = {grows, cols},
		      .n_blocks = 1,
		      .block_rows = rows,
		      .block_row = {row},
		      .replicas = replicas,
		      .tp_owner = tp->rank % replicas == 0,
		      .grad_partial = replicas > 1,
		      .decay = ndim > 1,
		      .init_std = ndim > 1 ? std : 0};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* Columns [col, col + cols) of a (rows, gcols) tensor: row-parallel weights. */
static int col_block(namer *n, const char *name, int64_t rows, int64_t cols, int64_t gcols,
		     int64_t col, double std)
{
	pp_param p = {.ndim = 2,
		      .shape = {rows, cols},
		      .global_shape = {rows, gcols},
		      .col = col,
		      .replicas = 1,
		      .tp_owner = true,
		      .decay = true,
		      .init_std = std};
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
	pp_param p = {.ndim = ndim,
		      .shape = {q + 2 * kv, C},
		      .global_shape = {Q + 2 * KV, C},
		      .n_blocks = 3,
		      .block_rows = q,
		      .block_row = {r * q, Q + r * kv, Q + KV + r * kv},
		      .replicas = 1,
		      .tp_owner = true,
		      .decay = ndim > 1,
		      .init_std = ndim > 1 ? std : 0};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* LoRA's A (rank, in) of a column-parallel projection: whole on every tp
 * rank, its gradient a partial sum over them (each rank's B rows see their
 * outputs only); PEFT's Kaiming-uniform start. */
static int lora_whole(namer *n, const char *name, int64_t rows, int64_t cols, double bound)
{
	const pp_tp *tp = &n->s->spec.tp;
	pp_param p = {.ndim = 2,
		      .shape = {rows, cols},
		      .global_shape = {rows, cols},
		      .replicas = tp->size,
		      .tp_owner = tp->rank == 0,
		      .grad_partial = tp->size > 1,
		      .decay = true,
		      .init_bound = bound};
	snprintf(p.name, sizeof p.name, "%s", name);
	return add_param(n->tb, &p);
}

/* The adapters of layer i's targeted projections, after its own tensors,
 * named as PEFT names them (less its base_model.model. prefix). Megatron's
 * split under tp: a column-parallel base has A whole and B split by output
 * rows as the base is; a row-parallel base has A split by input columns
 * and B whole. B starts at zero, so the adapted model starts as the base. */
static void lora_table(namer *n, layer_index *li, int i)
{
	const pp_stage *s = n->s;
	const pp_model_cfg *m = s->cfg;
	const int R = s->spec.lora.rank, r = s->spec.tp.rank;
	const int64_t C = m->d_model, D = m->head_dim, F = s->d_ff, GF = m->d_ff;
	const int64_t HD = (int64_t)s->n_heads * D, GHD = (int64_t)m->n_heads * D;
	const int64_t KV = (int64_t)s->n_kv_heads * D, GKV = (int64_t)m->n_kv_heads * D;
	const int64_t kv_row = (int64_t)s->kv_block * KV;
	/* per member: column-parallel (rows, grows, row, replicas) or row-parallel (in, gin, col) */
	const struct {
		const char *module;
		bool column;
		int64_t rows, grows, row;
		int replicas;
	} mb[LORA_MEMBERS] = {
		[LORA_Q] = {"self_attn", true, HD, GHD, r * HD, 1},
		[LORA_K] = {"self_attn", true, KV, GKV, kv_row, s->kv_replicas},
		[LORA_V] = {"self_attn", true, KV, GKV, kv_row, s->kv_replicas},
		[LORA_O] = {"self_attn", false, HD, GHD, r * HD, 1},
		[LORA_GATE] = {"mlp", true, F, GF, r * F, 1},
		[LORA_UP] = {"mlp", true, F, GF, r * F, 1},
		[LORA_DOWN] = {"mlp", false, F, GF, r * F, 1},
	};
	for (int k = 0; k < LORA_MEMBERS; k++) {
		if (!(s->spec.lora.targets & (1u << k)))
			continue;
		char a[96], b[96];
		snprintf(a, sizeof a, "model.layers.%d.%s.%s.lora_A.weight", i, mb[k].module,
			 hparams_lora_names[k]);
		snprintf(b, sizeof b, "model.layers.%d.%s.%s.lora_B.weight", i, mb[k].module,
			 hparams_lora_names[k]);
		n->tb->lora = 1;
		li->lora_a[k] = mb[k].column
					? lora_whole(n, a, R, C, 1 / sqrt((double)C))
					: col_block(n, a, R, mb[k].rows, mb[k].grows, mb[k].row, 0);
		if (!mb[k].column)
			n->tb->s->params[li->lora_a[k]].init_bound = 1 / sqrt((double)mb[k].grows);
		n->tb->lora = 2;
		li->lora_b[k] = mb[k].column ? row_block(n, b, 2, mb[k].rows, mb[k].grows,
							 mb[k].row, R, mb[k].replicas, 0)
					     : lora_whole(n, b, C, R, 0);
		n->tb->lora = 0;
	}
}

/* Hugging Face names per family. GPT-2 fuses q, k, v into c_attn; the others
 * keep q_proj, k_proj, v_proj as adjacent tensors (one product). */
void stage_build_table(pp_stage *s, pp_stage_acts *a)
{
	const pp_model_cfg *m = s->cfg;
	table_builder tb = {s, 0, 0};
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
		a->embed_w = row_block(&n, embed, 2, s->vocab, m->vocab_size, s->vocab_begin, C, 1,
				       std);
	if (s->first && m->pos == PP_POS_LEARNED)
		a->embed_pos = replicated(&n, "transformer.wpe.weight", 2, m->max_seq_len, C, true,
					  std, 0);

	int L = s->layer_end - s->layer_begin;
	a->layer = calloc((size_t)(L > 0 ? L : 1), sizeof *a->layer);
	for (int l = 0; l < L; l++) {
		layer_index *li = &a->layer[l];
		int i = s->layer_begin + l;
		memset(li, -1, sizeof *li);
		if (gpt) {
			const char *h = "transformer.h.%d.%s";
			li->norm1_w = replicated(&n, nm(&n, h, i, "ln_1.weight"), 1, C, 1, false, 0,
						 1);
			li->norm1_b = replicated(&n, nm(&n, h, i, "ln_1.bias"), 1, C, 1, false, 0,
						 0);
			li->qkv_w = qkv_fused(&n, nm(&n, h, i, "attn.c_attn.weight"), 2, C, std);
			li->qkv_b = qkv_fused(&n, nm(&n, h, i, "attn.c_attn.bias"), 1, 1, 0);
			li->o_w = col_block(&n, nm(&n, h, i, "attn.c_proj.weight"), C, HD, GHD,
					    r * HD, res_std);
			li->o_b = replicated(&n, nm(&n, h, i, "attn.c_proj.bias"), 1, C, 1, false,
					     0, 0);
			li->norm2_w = replicated(&n, nm(&n, h, i, "ln_2.weight"), 1, C, 1, false, 0,
						 1);
			li->norm2_b = replicated(&n, nm(&n, h, i, "ln_2.bias"), 1, C, 1, false, 0,
						 0);
			li->up_w = row_block(&n, nm(&n, h, i, "mlp.c_fc.weight"), 2, F, GF, r * F,
					     C, 1, std);
			li->up_b = row_block(&n, nm(&n, h, i, "mlp.c_fc.bias"), 1, F, GF, r * F, 1,
					     1, 0);
			li->down_w = col_block(&n, nm(&n, h, i, "mlp.c_proj.weight"), C, F, GF,
					       r * F, res_std);
			li->down_b = replicated(&n, nm(&n, h, i, "mlp.c_proj.bias"), 1, C, 1, false,
						0, 0);
			li->dense = a->n_dense++;
			continue;
		}
		const char *h = "model.layers.%d.%s";
		li->norm1_w = replicated(&n, nm(&n, h, i, "input_layernorm.weight"), 1, C, 1, false,
					 0, norm_one);
		if (ln)
			li->norm1_b = replicated(&n, nm(&n, h, i, "input_layernorm.bias"), 1, C, 1,
						 false, 0, 0);
		li->qkv_w = row_block(&n, nm(&n, h, i, "self_attn.q_proj.weight"), 2, HD, GHD,
				      r * HD, C, 1, std);
		row_block(&n, nm(&n, h, i, "self_attn.k_proj.weight"), 2, KV, GKV, kv_row, C,
			  kv_rep, std);
		row_block(&n, nm(&n, h, i, "self_attn.v_proj.weight"), 2, KV, GKV, kv_row, C,
			  kv_rep, std);
		if (m->bias) {
			li->qkv_b = row_block(&n, nm(&n, h, i, "self_attn.q_proj.bias"), 1, HD, GHD,
					      r * HD, 1, 1, 0);
			row_block(&n, nm(&n, h, i, "self_attn.k_proj.bias"), 1, KV, GKV, kv_row, 1,
				  kv_rep, 0);
			row_block(&n, nm(&n, h, i, "self_attn.v_proj.bias"), 1, KV, GKV, kv_row, 1,
				  kv_rep, 0);
		}
		if (m->pos == PP_POS_RELATIVE) /* Praxis's wrb: (heads, buckets) */
			li->rel_bias = row_block(
				&n, nm(&n, h, i, "self_attn.relative_attention_bias.weight"), 2,
				s->n_heads, m->n_heads, (int64_t)r * s->n_heads, m->rel_buckets, 1,
				1 / sqrt((double)m->n_heads * m->rel_buckets));
		li->o_w = col_block(&n, nm(&n, h, i, "self_attn.o_proj.weight"), C, HD, GHD, r * HD,
				    res_std);
		if (m->bias)
			li->o_b = replicated(&n, nm(&n, h, i, "self_attn.o_proj.bias"), 1, C, 1,
					     false, 0, 0);
		li->norm2_w = replicated(&n, nm(&n, h, i, "post_attention_layernorm.weight"), 1, C,
					 1, false, 0, norm_one);
		if (ln)
			li->norm2_b = replicated(&n, nm(&n, h, i, "post_attention_layernorm.bias"),
						 1, C, 1, false, 0, 0);
		if (hparams_layer_is_moe(m, i)) {
			/* Mixtral's names; this rank's experts, each w1 (gate) and w3
			 * (up) adjacent: one (2F, C) product */
			li->moe = a->n_moe++;
			li->router_w = replicated(&n, nm(&n, h, i, "block_sparse_moe.gate.weight"),
						  2, m->n_experts, C, true, std, 0);
			continue; /* the experts go at the end */
		}
		li->dense = a->n_dense++;
		if (gated)
			li->up_w = row_block(&n, nm(&n, h, i, "mlp.gate_proj.weight"), 2, F, GF,
					     r * F, C, 1, std);
		int up = row_block(&n, nm(&n, h, i, "mlp.up_proj.weight"), 2, F, GF, r * F, C, 1,
				   std);
		if (!gated)
			li->up_w = up;
		if (m->bias) {
			if (gated)
				li->up_b = row_block(&n, nm(&n, h, i, "mlp.gate_proj.bias"), 1, F,
						     GF, r * F, 1, 1, 0);
			int ub = row_block(&n, nm(&n, h, i, "mlp.up_proj.bias"), 1, F, GF, r * F, 1,
					   1, 0);
			if (!gated)
				li->up_b = ub;
		}
		li->down_w = col_block(&n, nm(&n, h, i, "mlp.down_proj.weight"), C, F, GF, r * F,
				       res_std);
		if (m->bias)
			li->down_b = replicated(&n, nm(&n, h, i, "mlp.down_proj.bias"), 1, C, 1,
						false, 0, 0);
		if (s->spec.lora.rank > 0)
			lora_table(&n, li, i);
	}
	if (s->last) {
		a->normf_w = replicated(&n, gpt ? "transformer.ln_f.weight" : "model.norm.weight",
					1, C, 1, false, 0, gpt ? 1 : norm_one);
		if (ln)
			a->normf_b = replicated(&n,
						gpt ? "transformer.ln_f.bias" : "model.norm.bias",
						1, C, 1, false, 0, 0);
		a->head_w = m->tied_embeddings
				    ? a->embed_w
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
			int w1 = row_block(&n, nm(&n, h, s->layer_begin + l, en), 2, F, GF, r * F,
					   C, 1, std);
			li->expert0 = j ? li->expert0 : w1;
			snprintf(en, sizeof en, "block_sparse_moe.experts.%d.w3.weight", x);
			row_block(&n, nm(&n, h, s->layer_begin + l, en), 2, F, GF, r * F, C, 1,
				  std);
			snprintf(en, sizeof en, "block_sparse_moe.experts.%d.w2.weight", x);
			col_block(&n, nm(&n, h, s->layer_begin + l, en), C, F, GF, r * F, res_std);
		}
	}
}

/* FSDP's units (stage_units): their bounds, each parameter's unit, and the
 * part of the buffer this rank keeps. */
int stage_describe_units(pp_stage *s, pp_err *e)
{
	const int L = s->layer_end - s->layer_begin;
	s->n_units = L + 2;
	s->unit_lo = calloc((size_t)s->n_units + 1, sizeof *s->unit_lo);
	s->param_unit = calloc((size_t)s->n_params + 1, sizeof *s->param_unit);
	if (!s->unit_lo || !s->param_unit)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int l = 0; l < L; l++)
		s->unit_lo[1 + l] = stage_layer_from(s, l);
	s->unit_lo[L + 1] = stage_tail_from(s);
	s->unit_lo[L + 2] = s->n_shared;
	for (int i = 0, u = 0; i < s->n_params; i++) {
		if (s->params[i].frozen) /* not in the buffer the units cut */
			continue;
		while (u < s->n_units && s->params[i].off >= s->unit_lo[u + 1])
			u++;
		s->param_unit[i] = u;
	}
	const stage_units *un = &s->spec.units;
	s->w_lo = 0;
	s->w_hi = s->n_elems;
	if (un->size > 1 && s->n_elems != s->n_shared)
		return pp_errorf(e, PP_EUSAGE, "fsdp: a stage with experts cannot be sharded");
	if (un->size > 1)
		layout_share(s->n_shared, un->size, un->rank, &s->w_lo, &s->w_hi);
	return 0;
}

uint64_t param_global_index(const pp_param *p, size_t j)
{
	int64_t cols = p->shape[1], row = (int64_t)(j / (size_t)cols),
		col = (int64_t)(j % (size_t)cols);
	int64_t b = row / p->block_rows;
	int64_t grow = p->block_row[b] + row % p->block_rows;
	return (uint64_t)(grow * p->global_shape[1] + p->col + col);
}

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

/* The first parameter of the buffer that layer l holds: its input norm, or
 * under LoRA its first adapter. */
size_t stage_layer_from(const pp_stage *s, int l)
{
	const layer_index *li = &s->acts->layer[l];
	for (int k = 0; s->spec.lora.rank > 0 && k < LORA_MEMBERS; k++)
		if (li->lora_a[k] >= 0)
			return s->params[li->lora_a[k]].off;
	return s->spec.lora.rank > 0 ? s->n_shared : s->params[li->norm1_w].off;
}

size_t stage_tail_from(const pp_stage *s)
{
	return s->last && s->spec.lora.rank == 0 ? s->params[s->acts->normf_w].off : s->n_shared;
}
