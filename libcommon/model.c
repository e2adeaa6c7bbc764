#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* Shapes used below: N = B*T rows, C = d_model, D = head_dim, QKV = (Hq+2Hkv)*D,
 * HD = Hq*D, F = d_ff, V = vocab, L = layers of this stage. */

/* Offsets of one layer's tensors in params[] (index into the table, -1 if absent). */
typedef struct {
	int norm1_w, norm1_b, qkv_w, qkv_b, o_w, o_b, norm2_w, norm2_b, up_w, up_b, down_w, down_b;
} layer_index;

/* Saved activations of one microbatch. Per-layer buffers hold L copies, or
 * one when recomputing (the backward pass rebuilds them layer by layer). */
typedef struct {
	pp_real *res;                  /* (L+1, N, C) input of each layer, then the stage output */
	pp_real *h1, *mean1, *rstd1;   /* (L', N, C), (L', N), (L', N) */
	pp_real *qkv;                  /* (L', N, QKV) after rope */
	pp_real *att, *lse;            /* (L', N, HD), (L', B, Hq, T) */
	pp_real *mid;                  /* (L', N, C) residual after attention */
	pp_real *h2, *mean2, *rstd2;   /* (L', N, C), (L', N), (L', N) */
	pp_real *up;                   /* (L', N, 2F) gate|up, or (L', N, F) before gelu */
	pp_real *act;                  /* (L', N, F) */
	pp_real *hf, *meanf, *rstdf;   /* (N, C), (N), (N): final norm */
	pp_real *logits;               /* (N, V); holds dlogits after a training forward */
	pp_real *losses;               /* (N) */
	int *tok, *tgt;                /* (N) device copies */
	int has_grad;                  /* forward kept dlogits */
} slot_acts;

struct pp_stage_acts {
	slot_acts *slot;
	layer_index *layer;            /* (L) */
	int embed_w, embed_pos, normf_w, normf_b, head_w; /* param indices, -1 if absent */
	/* backward scratch, shared by all slots */
	pp_real *d_res, *d_h, *d_att, *d_qkv, *d_up, *d_act; /* (N,C) (N,C) (N,HD) (N,QKV) (N,2F) (N,F) */
	pp_real *host_losses;          /* (N) */
	int *host_ids;                 /* (N) */
};

/* ---- parameter table -------------------------------------------------- */

typedef struct {
	pp_stage *s;
	int cap;
} table_builder;

static int add_param(table_builder *tb, const char *name, int ndim, int64_t d0, int64_t d1,
		     bool decay, double std, double value)
{
	pp_stage *s = tb->s;
	if (s->n_params == tb->cap) {
		tb->cap = tb->cap ? 2 * tb->cap : 64;
		s->params = realloc(s->params, (size_t)tb->cap * sizeof *s->params);
	}
	pp_param *p = &s->params[s->n_params];
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->ndim = ndim;
	p->shape[0] = d0;
	p->shape[1] = ndim > 1 ? d1 : 1;
	p->n = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
	p->off = s->n_elems;
	p->decay = decay;
	p->init_std = std;
	p->init_value = value;
	s->n_elems += p->n;
	return s->n_params++;
}

/* Hugging Face names per family. GPT-2 fuses q, k, v into c_attn; the others
 * keep q_proj, k_proj, v_proj as adjacent tensors (one product). */
static void build_table(pp_stage *s, pp_stage_acts *a)
{
	const pp_model_cfg *m = s->cfg;
	table_builder tb = {s, 0};
	const bool gpt = m->family == PP_FAMILY_GPT;
	const bool ln = m->norm == PP_NORM_LAYER, gated = m->mlp != PP_MLP_GELU;
	const int64_t C = m->d_model, D = m->head_dim, F = m->d_ff;
	const int64_t HD = (int64_t)m->n_heads * D, KV = (int64_t)m->n_kv_heads * D;
	const double std = m->init_std;
	const double res_std = m->scaled_residual_init ? std / sqrt(2.0 * m->n_layers) : std;
	const double norm_one = 1.0 - m->norm_offset; /* Gemma stores w of (1 + w) */
	char n[96];

	a->embed_w = a->embed_pos = a->normf_w = a->normf_b = a->head_w = -1;
	if (s->first || (s->last && m->tied_embeddings)) {
		a->embed_w = add_param(&tb, gpt ? "transformer.wte.weight" : "model.embed_tokens.weight",
				       2, m->vocab_size, C, true, std, 0);
	}
	if (s->first && m->pos == PP_POS_LEARNED)
		a->embed_pos = add_param(&tb, "transformer.wpe.weight", 2, m->max_seq_len, C, true, std, 0);

	int L = s->layer_end - s->layer_begin;
	a->layer = calloc((size_t)(L > 0 ? L : 1), sizeof *a->layer);
	for (int l = 0; l < L; l++) {
		layer_index *li = &a->layer[l];
		int i = s->layer_begin + l;
		memset(li, -1, sizeof *li);
#define P(fmt, ...) (snprintf(n, sizeof n, fmt, __VA_ARGS__), n)
		if (gpt) {
			li->norm1_w = add_param(&tb, P("transformer.h.%d.ln_1.weight", i), 1, C, 0, false, 0, 1);
			li->norm1_b = add_param(&tb, P("transformer.h.%d.ln_1.bias", i), 1, C, 0, false, 0, 0);
			li->qkv_w = add_param(&tb, P("transformer.h.%d.attn.c_attn.weight", i), 2, HD + 2 * KV, C, true, std, 0);
			li->qkv_b = add_param(&tb, P("transformer.h.%d.attn.c_attn.bias", i), 1, HD + 2 * KV, 0, false, 0, 0);
			li->o_w = add_param(&tb, P("transformer.h.%d.attn.c_proj.weight", i), 2, C, HD, true, res_std, 0);
			li->o_b = add_param(&tb, P("transformer.h.%d.attn.c_proj.bias", i), 1, C, 0, false, 0, 0);
			li->norm2_w = add_param(&tb, P("transformer.h.%d.ln_2.weight", i), 1, C, 0, false, 0, 1);
			li->norm2_b = add_param(&tb, P("transformer.h.%d.ln_2.bias", i), 1, C, 0, false, 0, 0);
			li->up_w = add_param(&tb, P("transformer.h.%d.mlp.c_fc.weight", i), 2, gated ? 2 * F : F, C, true, std, 0);
			li->up_b = add_param(&tb, P("transformer.h.%d.mlp.c_fc.bias", i), 1, gated ? 2 * F : F, 0, false, 0, 0);
			li->down_w = add_param(&tb, P("transformer.h.%d.mlp.c_proj.weight", i), 2, C, F, true, res_std, 0);
			li->down_b = add_param(&tb, P("transformer.h.%d.mlp.c_proj.bias", i), 1, C, 0, false, 0, 0);
			continue;
		}
		const char *pre = "model.layers";
		li->norm1_w = add_param(&tb, P("%s.%d.input_layernorm.weight", pre, i), 1, C, 0, false, 0, norm_one);
		if (ln)
			li->norm1_b = add_param(&tb, P("%s.%d.input_layernorm.bias", pre, i), 1, C, 0, false, 0, 0);
		li->qkv_w = add_param(&tb, P("%s.%d.self_attn.q_proj.weight", pre, i), 2, HD, C, true, std, 0);
		add_param(&tb, P("%s.%d.self_attn.k_proj.weight", pre, i), 2, KV, C, true, std, 0);
		add_param(&tb, P("%s.%d.self_attn.v_proj.weight", pre, i), 2, KV, C, true, std, 0);
		if (m->bias) {
			li->qkv_b = add_param(&tb, P("%s.%d.self_attn.q_proj.bias", pre, i), 1, HD, 0, false, 0, 0);
			add_param(&tb, P("%s.%d.self_attn.k_proj.bias", pre, i), 1, KV, 0, false, 0, 0);
			add_param(&tb, P("%s.%d.self_attn.v_proj.bias", pre, i), 1, KV, 0, false, 0, 0);
		}
		li->o_w = add_param(&tb, P("%s.%d.self_attn.o_proj.weight", pre, i), 2, C, HD, true, res_std, 0);
		if (m->bias)
			li->o_b = add_param(&tb, P("%s.%d.self_attn.o_proj.bias", pre, i), 1, C, 0, false, 0, 0);
		li->norm2_w = add_param(&tb, P("%s.%d.post_attention_layernorm.weight", pre, i), 1, C, 0, false, 0, norm_one);
		if (ln)
			li->norm2_b = add_param(&tb, P("%s.%d.post_attention_layernorm.bias", pre, i), 1, C, 0, false, 0, 0);
		if (gated) {
			li->up_w = add_param(&tb, P("%s.%d.mlp.gate_proj.weight", pre, i), 2, F, C, true, std, 0);
			add_param(&tb, P("%s.%d.mlp.up_proj.weight", pre, i), 2, F, C, true, std, 0);
			if (m->bias) {
				li->up_b = add_param(&tb, P("%s.%d.mlp.gate_proj.bias", pre, i), 1, F, 0, false, 0, 0);
				add_param(&tb, P("%s.%d.mlp.up_proj.bias", pre, i), 1, F, 0, false, 0, 0);
			}
		} else {
			li->up_w = add_param(&tb, P("%s.%d.mlp.up_proj.weight", pre, i), 2, F, C, true, std, 0);
			if (m->bias)
				li->up_b = add_param(&tb, P("%s.%d.mlp.up_proj.bias", pre, i), 1, F, 0, false, 0, 0);
		}
		li->down_w = add_param(&tb, P("%s.%d.mlp.down_proj.weight", pre, i), 2, C, F, true, res_std, 0);
		if (m->bias)
			li->down_b = add_param(&tb, P("%s.%d.mlp.down_proj.bias", pre, i), 1, C, 0, false, 0, 0);
#undef P
	}
	if (s->last) {
		a->normf_w = add_param(&tb, gpt ? "transformer.ln_f.weight" : "model.norm.weight", 1, C, 0,
				       false, 0, gpt ? 1 : norm_one);
		if (ln)
			a->normf_b = add_param(&tb, gpt ? "transformer.ln_f.bias" : "model.norm.bias", 1, C, 0,
					       false, 0, 0);
		a->head_w = m->tied_embeddings
				    ? a->embed_w
				    : add_param(&tb, "lm_head.weight", 2, m->vocab_size, C, true, std, 0);
	}
}

/* ---- allocation -------------------------------------------------------- */

static int alloc_all(const pp_ops *ops, pp_real **ptrs[], const size_t counts[], int n)
{
	for (int i = 0; i < n; i++) {
		if (!counts[i])
			continue;
		*ptrs[i] = ops->alloc(counts[i] * sizeof(pp_real));
		if (!*ptrs[i])
			return -1;
	}
	return 0;
}

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int stage_create(pp_stage *s, const pp_model_cfg *cfg, const pp_ops *ops, int layer_begin,
		 int layer_end, int B, int T, int n_slots, bool recompute, pp_err *e)
{
	memset(s, 0, sizeof *s);
	if (cfg->n_experts > 0)
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s' has %d experts per MoE layer; stages build dense layers only",
				 cfg->preset, cfg->n_experts);
	s->cfg = cfg;
	s->ops = ops;
	s->layer_begin = layer_begin;
	s->layer_end = layer_end;
	s->first = layer_begin == 0;
	s->last = layer_end == cfg->n_layers;
	s->B = B;
	s->T = T;
	s->n_slots = n_slots;
	s->recompute = recompute;
	s->acts = calloc(1, sizeof *s->acts);
	pp_stage_acts *a = s->acts;
	build_table(s, a);

	const size_t N = (size_t)B * T, C = cfg->d_model, F = cfg->d_ff, V = cfg->vocab_size;
	const size_t HD = (size_t)cfg->n_heads * cfg->head_dim;
	const size_t QKV = HD + 2 * (size_t)cfg->n_kv_heads * cfg->head_dim;
	const size_t UP = cfg->mlp == PP_MLP_GELU ? F : 2 * F;
	const size_t L = (size_t)(layer_end - layer_begin), Ls = recompute && L ? 1 : L;
	const size_t NH = (size_t)B * cfg->n_heads * T;

	s->w = ops->alloc(s->n_elems * sizeof(pp_real));
	s->g = ops->alloc(s->n_elems * sizeof(pp_real));
	if (!s->w || !s->g)
		goto oom;
	pp_real **scratch[] = {&a->d_res, &a->d_h, &a->d_att, &a->d_qkv, &a->d_up, &a->d_act};
	const size_t scratch_n[] = {N * C, N * C, N * HD, N * QKV, N * UP, N * F};
	if (alloc_all(ops, scratch, scratch_n, NELEMS(scratch)))
		goto oom;
	a->host_losses = calloc(N, sizeof(pp_real));
	a->host_ids = calloc(N, sizeof(int));
	a->slot = calloc((size_t)n_slots, sizeof *a->slot);
	for (int k = 0; k < n_slots; k++) {
		slot_acts *sa = &a->slot[k];
		const size_t last = s->last ? 1 : 0;
		pp_real **p[] = {&sa->res, &sa->h1, &sa->mean1, &sa->rstd1, &sa->qkv, &sa->att,
				 &sa->lse, &sa->mid, &sa->h2, &sa->mean2, &sa->rstd2, &sa->up,
				 &sa->act, &sa->hf, &sa->meanf, &sa->rstdf, &sa->logits, &sa->losses};
		const size_t n[] = {(L + 1) * N * C, Ls * N * C, Ls * N, Ls * N, Ls * N * QKV,
				    Ls * N * HD, Ls * NH, Ls * N * C, Ls * N * C, Ls * N, Ls * N,
				    Ls * N * UP, Ls * N * F, last * N * C, last * N, last * N,
				    last * N * V, last * N};
		if (alloc_all(ops, p, n, NELEMS(p)))
			goto oom;
		sa->tok = ops->alloc(N * sizeof(int));
		sa->tgt = ops->alloc(N * sizeof(int));
		if (!sa->tok || !sa->tgt)
			goto oom;
	}
	if (!a->host_losses || !a->host_ids)
		goto oom;
	return 0;
oom:
	stage_free(s);
	return pp_errorf(e, PP_ERUNTIME,
			 "out of memory building layers %d..%d (B=%d, T=%d, %zu parameters)",
			 layer_begin, layer_end - 1, B, T, s->n_elems);
}

void stage_free(pp_stage *s)
{
	pp_stage_acts *a = s->acts;
	const pp_ops *ops = s->ops;
	if (a) {
		for (int k = 0; a->slot && k < s->n_slots; k++) {
			slot_acts *sa = &a->slot[k];
			void *p[] = {sa->res, sa->h1, sa->mean1, sa->rstd1, sa->qkv, sa->att, sa->lse,
				     sa->mid, sa->h2, sa->mean2, sa->rstd2, sa->up, sa->act, sa->hf,
				     sa->meanf, sa->rstdf, sa->logits, sa->losses, sa->tok, sa->tgt};
			for (int i = 0; i < NELEMS(p); i++)
				ops->free(p[i]);
		}
		void *p[] = {a->d_res, a->d_h, a->d_att, a->d_qkv, a->d_up, a->d_act};
		for (int i = 0; i < NELEMS(p); i++)
			ops->free(p[i]);
		free(a->slot);
		free(a->layer);
		free(a->host_losses);
		free(a->host_ids);
		free(a);
	}
	ops->free(s->w);
	ops->free(s->g);
	free(s->params);
	memset(s, 0, sizeof *s);
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
				x[j] = (pp_real)(p->init_std * rng_normal(key, j));
		} else {
			for (size_t j = 0; j < p->n; j++)
				x[j] = (pp_real)p->init_value;
		}
	}
	s->ops->to_device(s->w, host, s->n_elems * sizeof(pp_real));
	free(host);
}

const pp_param *stage_find_param(const pp_stage *s, const char *name)
{
	for (int i = 0; i < s->n_params; i++)
		if (!strcmp(s->params[i].name, name))
			return &s->params[i];
	return NULL;
}

void stage_zero_grad(pp_stage *s) { s->ops->zero(s->g, s->n_elems * sizeof(pp_real)); }

const pp_real *stage_logits(const pp_stage *s, int slot)
{
	return s->last ? s->acts->slot[slot].logits : NULL;
}

/* ---- forward / backward ------------------------------------------------ */

/* Parameter or gradient pointer by table index (NULL for -1). */
static pp_real *W(const pp_stage *s, int i) { return i < 0 ? NULL : s->w + s->params[i].off; }
static pp_real *G(const pp_stage *s, int i) { return i < 0 ? NULL : s->g + s->params[i].off; }

/* Pointers into one layer's saved activations. */
typedef struct {
	pp_real *x, *h1, *mean1, *rstd1, *qkv, *att, *lse, *mid, *h2, *mean2, *rstd2, *up, *act, *out;
} layer_acts;

static layer_acts layer_view(const pp_stage *s, slot_acts *sa, int l)
{
	const pp_model_cfg *m = s->cfg;
	const size_t N = (size_t)s->B * s->T, C = m->d_model, F = m->d_ff;
	const size_t HD = (size_t)m->n_heads * m->head_dim;
	const size_t QKV = HD + 2 * (size_t)m->n_kv_heads * m->head_dim;
	const size_t UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	const size_t k = s->recompute ? 0 : (size_t)l;
	return (layer_acts){
		.x = sa->res + (size_t)l * N * C, .out = sa->res + (size_t)(l + 1) * N * C,
		.h1 = sa->h1 + k * N * C, .mean1 = sa->mean1 + k * N, .rstd1 = sa->rstd1 + k * N,
		.qkv = sa->qkv + k * N * QKV, .att = sa->att + k * N * HD,
		.lse = sa->lse + k * (size_t)s->B * m->n_heads * s->T, .mid = sa->mid + k * N * C,
		.h2 = sa->h2 + k * N * C, .mean2 = sa->mean2 + k * N, .rstd2 = sa->rstd2 + k * N,
		.up = sa->up + k * N * UP, .act = sa->act + k * N * F,
	};
}

static void norm_fwd(const pp_stage *s, pp_real *out, pp_real *mean, pp_real *rstd,
		     const pp_real *x, int wi, int bi)
{
	const pp_model_cfg *m = s->cfg;
	int N = s->B * s->T;
	if (m->norm == PP_NORM_LAYER)
		s->ops->layernorm_fwd(out, mean, rstd, x, W(s, wi), W(s, bi), (pp_real)m->norm_eps, N,
				      m->d_model);
	else
		s->ops->rmsnorm_fwd(out, rstd, x, W(s, wi), (pp_real)m->norm_eps,
				    (pp_real)m->norm_offset, N, m->d_model);
}

static void norm_bwd(const pp_stage *s, pp_real *dx, const pp_real *dout, const pp_real *x,
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

static void layer_forward(const pp_stage *s, const layer_index *li, const layer_acts *t)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	const int B = s->B, T = s->T, N = B * T, C = m->d_model, F = m->d_ff, D = m->head_dim;
	const int Hq = m->n_heads, Hkv = m->n_kv_heads, HD = Hq * D, QKV = HD + 2 * Hkv * D;

	norm_fwd(s, t->h1, t->mean1, t->rstd1, t->x, li->norm1_w, li->norm1_b);
	o->matmul_fwd(t->qkv, t->h1, W(s, li->qkv_w), W(s, li->qkv_b), N, C, QKV);
	if (m->pos == PP_POS_ROPE)
		o->rope_fwd(t->qkv, B, T, Hq, Hkv, D, (pp_real)m->rope_theta, 0);
	o->attention_fwd(t->att, t->lse, t->qkv, B, T, Hq, Hkv, D, m->sliding_window);
	o->matmul_fwd(t->mid, t->att, W(s, li->o_w), W(s, li->o_b), N, HD, C);
	o->add(t->mid, t->mid, t->x, (size_t)N * C);

	norm_fwd(s, t->h2, t->mean2, t->rstd2, t->mid, li->norm2_w, li->norm2_b);
	if (m->mlp == PP_MLP_GELU) {
		o->matmul_fwd(t->up, t->h2, W(s, li->up_w), W(s, li->up_b), N, C, F);
		o->gelu_fwd(t->act, t->up, (size_t)N * F);
	} else {
		o->matmul_fwd(t->up, t->h2, W(s, li->up_w), W(s, li->up_b), N, C, 2 * F);
		o->glu_fwd(t->act, t->up, N, F,
			   m->mlp == PP_MLP_SWIGLU ? PP_ACT_SILU : PP_ACT_GELU_TANH);
	}
	o->matmul_fwd(t->out, t->act, W(s, li->down_w), W(s, li->down_b), N, F, C);
	o->add(t->out, t->out, t->mid, (size_t)N * C);
}

/* a->d_res holds dL/d(layer output) on entry and dL/d(layer input) on exit. */
static void layer_backward(const pp_stage *s, const layer_index *li, const layer_acts *t)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	const int B = s->B, T = s->T, N = B * T, C = m->d_model, F = m->d_ff, D = m->head_dim;
	const int Hq = m->n_heads, Hkv = m->n_kv_heads, HD = Hq * D, QKV = HD + 2 * Hkv * D;

	o->matmul_bwd(a->d_act, G(s, li->down_w), G(s, li->down_b), a->d_res, t->act,
		      W(s, li->down_w), N, F, C);
	if (m->mlp == PP_MLP_GELU) {
		o->gelu_bwd(a->d_up, a->d_act, t->up, (size_t)N * F);
		o->matmul_bwd(a->d_h, G(s, li->up_w), G(s, li->up_b), a->d_up, t->h2,
			      W(s, li->up_w), N, C, F);
	} else {
		o->glu_bwd(a->d_up, a->d_act, t->up, N, F,
			   m->mlp == PP_MLP_SWIGLU ? PP_ACT_SILU : PP_ACT_GELU_TANH);
		o->matmul_bwd(a->d_h, G(s, li->up_w), G(s, li->up_b), a->d_up, t->h2,
			      W(s, li->up_w), N, C, 2 * F);
	}
	norm_bwd(s, a->d_res, a->d_h, t->mid, t->mean2, t->rstd2, li->norm2_w, li->norm2_b);

	o->matmul_bwd(a->d_att, G(s, li->o_w), G(s, li->o_b), a->d_res, t->att, W(s, li->o_w), N,
		      HD, C);
	o->attention_bwd(a->d_qkv, a->d_att, t->att, t->lse, t->qkv, B, T, Hq, Hkv, D,
			 m->sliding_window);
	if (m->pos == PP_POS_ROPE)
		o->rope_bwd(a->d_qkv, B, T, Hq, Hkv, D, (pp_real)m->rope_theta, 0);
	o->matmul_bwd(a->d_h, G(s, li->qkv_w), G(s, li->qkv_b), a->d_qkv, t->h1, W(s, li->qkv_w), N,
		      C, QKV);
	norm_bwd(s, a->d_res, a->d_h, t->x, t->mean1, t->rstd1, li->norm1_w, li->norm1_b);
}

int stage_forward(pp_stage *s, int slot, const int *tokens, const pp_real *in,
		  const int *targets, pp_real dscale, double *loss_sum, long *n_valid,
		  pp_real **out, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	slot_acts *sa = &a->slot[slot];
	const int B = s->B, T = s->T, N = B * T, C = m->d_model, V = m->vocab_size;
	const int L = s->layer_end - s->layer_begin;

	if (s->first) {
		for (int i = 0; i < N; i++)
			if (tokens[i] < 0 || tokens[i] >= V)
				return pp_errorf(e, PP_ERUNTIME,
						 "token %d at position %d is outside the vocabulary [0, %d)",
						 tokens[i], i, V);
		o->to_device(sa->tok, tokens, (size_t)N * sizeof(int));
		pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
		o->embed_fwd(sa->res, sa->tok, W(s, a->embed_w), W(s, a->embed_pos), scale, B, T, C, 0);
	} else {
		o->to_device(sa->res, in, (size_t)N * C * sizeof(pp_real)); /* same device: a copy */
	}
	for (int l = 0; l < L; l++) {
		layer_acts t = layer_view(s, sa, l);
		layer_forward(s, &a->layer[l], &t);
	}
	pp_real *x = sa->res + (size_t)L * N * C;
	if (!s->last) {
		*out = x;
		return 0;
	}
	norm_fwd(s, sa->hf, sa->meanf, sa->rstdf, x, a->normf_w, a->normf_b);
	o->matmul_fwd(sa->logits, sa->hf, W(s, a->head_w), NULL, N, C, V);
	long valid = 0;
	for (int i = 0; i < N; i++) {
		if (targets[i] >= V)
			return pp_errorf(e, PP_ERUNTIME,
					 "target %d at position %d is outside the vocabulary [0, %d)",
					 targets[i], i, V);
		valid += targets[i] >= 0;
	}
	o->to_device(sa->tgt, targets, (size_t)N * sizeof(int));
	o->crossentropy(sa->losses, dscale != 0 ? sa->logits : NULL, sa->logits, sa->tgt, N, V,
			dscale);
	sa->has_grad = dscale != 0;
	o->to_host(a->host_losses, sa->losses, (size_t)N * sizeof(pp_real));
	double sum = 0;
	for (int i = 0; i < N; i++)
		sum += a->host_losses[i];
	if (loss_sum)
		*loss_sum += sum;
	if (n_valid)
		*n_valid += valid;
	return 0;
}

int stage_backward(pp_stage *s, int slot, const pp_real *dout, pp_real **din, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	slot_acts *sa = &a->slot[slot];
	const int B = s->B, T = s->T, N = B * T, C = m->d_model, V = m->vocab_size;
	const int L = s->layer_end - s->layer_begin;
	const size_t NC = (size_t)N * C;

	if (s->last) {
		if (!sa->has_grad)
			return pp_errorf(e, PP_ERUNTIME,
					 "backward of microbatch slot %d without a training forward", slot);
		pp_real *x = sa->res + (size_t)L * NC;
		o->zero(a->d_res, NC * sizeof(pp_real));
		o->matmul_bwd(a->d_h, G(s, a->head_w), NULL, sa->logits, sa->hf, W(s, a->head_w), N, C,
			      V);
		norm_bwd(s, a->d_res, a->d_h, x, sa->meanf, sa->rstdf, a->normf_w, a->normf_b);
		sa->has_grad = 0;
	} else {
		o->to_device(a->d_res, dout, NC * sizeof(pp_real));
	}
	for (int l = L - 1; l >= 0; l--) {
		layer_acts t = layer_view(s, sa, l);
		if (s->recompute)
			layer_forward(s, &a->layer[l], &t);
		layer_backward(s, &a->layer[l], &t);
	}
	if (s->first) {
		pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
		o->embed_bwd(G(s, a->embed_w), G(s, a->embed_pos), a->d_res, sa->tok, scale, B, T, C, 0);
	} else {
		*din = a->d_res;
	}
	return 0;
}
