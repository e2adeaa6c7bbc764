/* Parameter counts, FLOPs and memory by arithmetic (see plan.h).
 *
 * Model (pre-norm decoder), per layer:
 *   norm1 (C, + C bias for layernorm)
 *   qkv   ((Hq + 2 Hkv) D x C, + bias)      column-parallel over tp
 *   o     (C x Hq D, + C bias)               row-parallel: bias replicated
 *   norm2
 *   MLP   gated: gate+up (2F x C), down (C x F); gelu: c_fc (F x C),
 *         c_proj (C x F); biases (2F or F, + C) when cfg.bias
 *         MoE layers: E copies of the MLP + router (E x C, replicated)
 * plus wte (V x C, vocab-parallel), wpe (max_seq_len x C, replicated) for
 * learned positions, final norm, head (V x C, vocab-parallel) unless tied.
 * Under tp every rank holds ceil(Hq/tp) query heads, ceil(Hkv/tp) kv heads
 * (kv heads are replicated when Hkv < tp), ceil(F/tp) MLP columns and
 * ceil(V/tp) vocabulary rows; norms are replicated. */
#include "plan.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../config/layout.h"
#include "../model/model.h"
#include "../parallel/fsdp.h"

/* The model's dimensions with defaults resolved. */
typedef struct {
	int64_t V, C, Hq, Hkv, D, F, L, E, K, every, max_seq;
	bool gated, layernorm, bias, tied, learned_pos;
} shape;

static void shape_of(const pp_model_cfg *m, shape *s)
{
	s->V = m->vocab_size;
	s->C = m->d_model;
	s->Hq = m->n_heads;
	s->Hkv = m->n_kv_heads;
	s->D = m->head_dim;
	s->F = m->d_ff;
	s->L = m->n_layers;
	s->E = m->n_experts > 0 ? m->n_experts : 0;
	s->K = s->E ? m->top_k : 0;
	s->every = m->moe_every > 0 ? m->moe_every : 1;
	s->max_seq = m->max_seq_len;
	s->gated = m->mlp == PP_MLP_SWIGLU || m->mlp == PP_MLP_GEGLU;
	s->layernorm = m->norm == PP_NORM_LAYER;
	s->bias = m->bias;
	s->tied = m->tied_embeddings;
	s->learned_pos = m->pos == PP_POS_LEARNED;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Number of MoE layers among [0, n): i is MoE iff i % every == every - 1. */
static int64_t moe_below(const shape *s, int64_t n) { return s->E ? n / s->every : 0; }

/* One layer's parameters on one tp and ep rank (tp = ep = 1: the whole
 * layer). */
typedef struct {
	int64_t attn_mat, attn_bias;
	int64_t mlp_mat, mlp_bias; /* one MLP (one expert) */
	int64_t n_mlp;             /* MLP copies: 1, or this ep rank's E / ep */
	int64_t router, norms;
} layer_parts;

static void layer_parts_of(const shape *s, bool moe, int64_t tp, int64_t ep, layer_parts *p)
{
	int64_t hq = ceil_div(s->Hq, tp), hkv = ceil_div(s->Hkv, tp), f = ceil_div(s->F, tp);
	int64_t C = s->C, D = s->D;
	p->attn_mat = (hq + 2 * hkv) * D * C + C * hq * D;
	p->attn_bias = s->bias ? (hq + 2 * hkv) * D + C : 0;
	p->mlp_mat = (s->gated ? 3 : 2) * f * C;
	p->mlp_bias = s->bias ? (s->gated ? 2 * f : f) + C : 0;
	p->n_mlp = moe ? s->E / ep : 1;
	p->router = moe ? s->E * C : 0;
	p->norms = 2 * (s->layernorm ? 2 * C : C);
}

static int64_t layer_total(const layer_parts *p)
{
	return p->attn_mat + p->attn_bias + p->n_mlp * (p->mlp_mat + p->mlp_bias) + p->router +
	       p->norms;
}

void plan_param_count(const pp_model_cfg *m, plan_counts *out)
{
	shape s;
	shape_of(m, &s);
	layer_parts dense, moe;
	layer_parts_of(&s, false, 1, 1, &dense);
	layer_parts_of(&s, true, 1, 1, &moe);
	int64_t n_moe = moe_below(&s, s.L), n_dense = s.L - n_moe;
	int64_t final_norm = s.layernorm ? 2 * s.C : s.C;

	memset(out, 0, sizeof *out);
	out->n_moe_layers = (int)n_moe;
	out->positions = s.learned_pos ? s.max_seq * s.C : 0;
	out->embedding = s.V * s.C + out->positions;
	out->head = s.tied ? 0 : s.V * s.C;
	out->attention = s.L * (dense.attn_mat + dense.attn_bias);
	out->mlp = n_dense * (dense.mlp_mat + dense.mlp_bias) +
		   n_moe * moe.n_mlp * (moe.mlp_mat + moe.mlp_bias);
	out->router = n_moe * moe.router;
	out->norms = s.L * dense.norms + final_norm;
	out->per_layer = layer_total(&dense);
	out->per_moe_layer = n_moe ? layer_total(&moe) : 0;
	out->total = out->embedding + out->attention + out->mlp + out->router + out->norms +
		     out->head;
	out->matmul = s.L * dense.attn_mat + n_dense * dense.mlp_mat +
		      n_moe * (s.K * moe.mlp_mat + moe.router) + s.V * s.C;
	out->active = out->total - n_moe * (s.E - s.K) * (moe.mlp_mat + moe.mlp_bias);
}

/* 6 N + 6 L Hq D T (llm.c): see plan.h for where each term comes from. */
double plan_flops_per_token(const pp_model_cfg *m, int seq_len)
{
	return 3.0 * plan_flops_per_token_fwd(m, seq_len);
}

double plan_flops_per_token_fwd(const pp_model_cfg *m, int seq_len)
{
	shape s;
	shape_of(m, &s);
	plan_counts n;
	plan_param_count(m, &n);
	return 2.0 * (double)n.matmul + 2.0 * (double)s.L * (double)(s.Hq * s.D) * seq_len;
}

static int dtype_bytes(int dtype)
{
	return dtype == PP_TYPE_REAL ? 4 : dtype == PP_TYPE_BF16 ? 2 : 0;
}

static int check_layout(const pp_config *c, pp_err *e)
{
	const pp_model_cfg *m = &c->model;
	if (c->microbatch < 1 || c->seq_len < 1)
		return pp_errorf(e, PP_EUSAGE, "plan: microbatch=%d seq_len=%d: each must be >= 1",
				 c->microbatch, c->seq_len);
	if (m->d_model < 1 || m->n_heads < 1 || m->n_layers < 1 || m->vocab_size < 1 ||
	    m->d_ff < 1)
		return pp_errorf(e, PP_EUSAGE,
				 "plan: model.d_model=%d n_heads=%d n_layers=%d vocab_size=%d "
				 "d_ff=%d: each must be >= 1",
				 m->d_model, m->n_heads, m->n_layers, m->vocab_size, m->d_ff);
	int rc = layout_check(c, e);
	if (rc)
		return rc;
	if (!dtype_bytes(c->dtype))
		return pp_errorf(e, PP_EUSAGE, "plan: dtype %d: expected fp32 or bf16", c->dtype);
	return PP_OK;
}

/* Saved activations of one layer for one microbatch on one tp rank, bytes,
 * of the kinds in which (PP_SAVE_*, model.h) but its input x (B T C, kept
 * whatever the recompute policy). A standard implementation keeps, in the
 * training dtype (b bytes):
 *   n1     norm1 output (qkv input)             B T C        NORM1
 *   qkv    after RoPE (attention input)         B T (hq + 2 hkv) D   QKV
 *   att    attention output (o input)           B T hq D     ATT
 *   x2     residual after attention             B T C        MID
 *   n2     norm2 output (MLP input)             B T C        NORM2
 *   up     fc / gate+up output                  B T f (gelu) or B T 2f (gated)  UP
 *   act    activation output (down input)       B T f        ACT
 * and in fp32: each norm's statistics (rstd, + mean for layernorm) B T,
 * with its output; the attention log-sum-exp B hq T, with att. Residual
 * and norm tensors are full on every tp rank (no sequence parallelism); hq,
 * hkv, f are tp slices.
 * MoE (dropless), MOE in place of UP and ACT: each token's K expert MLPs
 * keep up and act (K times the dense figure), plus its K dispatched copies
 * of n2 (B T K C) and the router probabilities (B T E, fp32). */
static int64_t layer_act_bytes(const shape *s, bool moe, int64_t tp, int64_t B, int64_t T,
			       int64_t b, unsigned which)
{
	int64_t hq = ceil_div(s->Hq, tp), hkv = ceil_div(s->Hkv, tp), f = ceil_div(s->F, tp);
	int64_t BT = B * T, mlp = BT * ((s->gated ? 2 : 1) * f + f) * b;
	int64_t stats = BT * (s->layernorm ? 2 : 1) * 4;
	int64_t bytes = 0;
	if (which & PP_SAVE_NORM1)
		bytes += BT * s->C * b + stats;
	if (which & PP_SAVE_QKV)
		bytes += BT * (hq + 2 * hkv) * s->D * b;
	if (which & PP_SAVE_ATT)
		bytes += BT * hq * s->D * b + B * hq * T * 4;
	if (which & PP_SAVE_MID)
		bytes += BT * s->C * b;
	if (which & PP_SAVE_NORM2)
		bytes += BT * s->C * b + stats;
	if (!moe && (which & PP_SAVE_UP))
		bytes += BT * (s->gated ? 2 : 1) * f * b;
	if (!moe && (which & PP_SAVE_ACT))
		bytes += BT * f * b;
	if (moe && (which & PP_SAVE_MOE))
		bytes += s->K * mlp + BT * s->K * s->C * b + BT * s->E * 4;
	return bytes;
}

/* The one copy of the activations of the kinds in which that a chunk of
 * n_dense dense and n_moe MoE layers rebuilds in its backward pass: the
 * attention's, and each kind of MLP's it has (model.c's rebuilt set). */
static int64_t rebuilt_bytes(const shape *s, int64_t n_dense, int64_t n_moe, int64_t tp,
			     int64_t B, int64_t T, int64_t b, unsigned which)
{
	const unsigned mlp = PP_SAVE_UP | PP_SAVE_ACT | PP_SAVE_MOE;
	if (!n_dense && !n_moe)
		return 0;
	return layer_act_bytes(s, false, tp, B, T, b, which & ~mlp) +
	       (n_dense ? layer_act_bytes(s, false, tp, B, T, b, which & mlp) : 0) +
	       (n_moe ? layer_act_bytes(s, true, tp, B, T, b, which & mlp) : 0);
}

int plan_memory_rank(const pp_config *c, int rank, plan_memory_t *out, pp_err *e)
{
	if (check_layout(c, e))
		return e ? e->code : PP_EUSAGE;
	if (rank < 0 || rank >= c->pp)
		return pp_errorf(e, PP_EUSAGE, "plan: pp rank %d outside 0..%d", rank, c->pp - 1);
	shape s;
	shape_of(&c->model, &s);
	const int64_t pp = c->pp, tp = c->tp, v = c->virtual_stages, m = c->microbatches;
	const int64_t B = c->microbatch, T = c->seq_len, b = dtype_bytes(c->dtype);
	/* what the runtime keeps: a microbatch's saved state lives from its
	 * forward until its backward, under zbh1 until its weight gradient */
	const int64_t in_flight = schedule_peak_held_theory(c->schedule, c->pp, c->virtual_stages,
							     c->microbatches, rank);

	layer_parts dense, moe;
	layer_parts_of(&s, false, tp, 1, &dense);
	layer_parts_of(&s, true, tp, c->ep > 0 ? c->ep : 1, &moe);
	/* The recompute policy keeps each layer's input and the kinds in kept
	 * for every chunk-microbatch in flight; each chunk holds one copy of
	 * the rest, which its backward pass rebuilds layer by layer. */
	const unsigned kept = stage_saved_acts(c->recompute), rebuilt = PP_SAVE_ALL & ~kept;
	const int64_t dense_act = B * T * s.C * b + layer_act_bytes(&s, false, tp, B, T, b, kept);
	const int64_t moe_act = B * T * s.C * b + layer_act_bytes(&s, true, tp, B, T, b, kept);

	memset(out, 0, sizeof *out);
	out->rank = rank;
	out->chunks = (int)v;
	out->first = rank == 0;
	out->last = rank == pp - 1;
	out->in_flight = (int)in_flight;
	out->peak_act = schedule_peak_act_theory(c->schedule, c->pp, c->virtual_stages,
						 c->microbatches, rank);
	out->peak_wstash = schedule_peak_wstash_theory(c->schedule, c->pp, c->virtual_stages,
						       c->microbatches, rank);

	/* The first chunk of stage 0: wte (vocab-parallel) and wpe
	 * (replicated). The last chunk of the last stage: final norm and head; a
	 * tied head is the wte itself on a single stage and a copy of it on the
	 * last stage when pp > 1 (kept in sync by an all-reduce of the two
	 * gradients, as Megatron does). */
	const int64_t vocab_rows = ceil_div(s.V, tp) * s.C;
	const int64_t embed = vocab_rows + (s.learned_pos ? s.max_seq * s.C : 0);
	const int64_t head = (s.layernorm ? 2 * s.C : s.C) + (s.tied && pp == 1 ? 0 : vocab_rows);

	/* Per chunk: parameters, kept activations, rebuilt set; kept
	 * activations take the largest chunk of the rank (exact for v = 1). */
	int64_t count = 0, chunk_params_max = 0, chunk_act_max = 0, rebuilt_sum = 0;
	int64_t experts = 0, chunk_experts_max = 0;
	/* fsdp: the shares of each chunk, the largest unit, the held units */
	const int64_t fsdp = c->fsdp > 0 ? c->fsdp : 1, norm_f = s.layernorm ? 2 * s.C : s.C;
	int64_t shares = 0, unit_max = 0, held = 0;
	const int64_t layer_experts = moe.n_mlp * (moe.mlp_mat + moe.mlp_bias);
	for (int64_t j = 0; j < v; j++) {
		int lb, le;
		layout_chunk_layers(c, (int)(j * pp + rank), &lb, &le);
		int64_t n_moe = moe_below(&s, le) - moe_below(&s, lb), n = le - lb;
		int64_t n_dense = n - n_moe;
		int64_t params = n_dense * layer_total(&dense) + n_moe * layer_total(&moe) +
				 (out->first && j == 0 ? embed : 0) +
				 (out->last && j == v - 1 ? head : 0);
		count += params;
		experts += n_moe * layer_experts;
		shares += ceil_div(params, fsdp);
		const int64_t units[] = {
			n_dense ? layer_total(&dense) : 0, n_moe ? layer_total(&moe) : 0,
			out->first && j == 0 ? embed : 0,
			/* the last chunk: the final norm with an untied head; a tied
			 * head's copy of the embedding is a unit of its own */
			out->last && j == v - 1 ? norm_f + (s.tied ? 0 : vocab_rows) : 0,
			out->last && j == v - 1 && s.tied && pp > 1 ? vocab_rows : 0};
		for (size_t u = 0; u < sizeof units / sizeof *units; u++)
			unit_max = units[u] > unit_max ? units[u] : unit_max;
		held += (out->first && j == 0 ? embed : 0) + (out->last && j == v - 1 ? head : 0);
		if (params - n_moe * layer_experts > chunk_params_max)
			chunk_params_max = params - n_moe * layer_experts;
		if (n_moe * layer_experts > chunk_experts_max)
			chunk_experts_max = n_moe * layer_experts;
		int64_t act = n_dense * dense_act + n_moe * moe_act;
		if (act > chunk_act_max)
			chunk_act_max = act;
		rebuilt_sum += rebuilt_bytes(&s, n_dense, n_moe, tp, B, T, b, rebuilt);
		out->layers += (int)n;
	}
	out->param_count = count;
	/* The weights the products read, in the training dtype. */
	out->params = count * b;
	/* Gradients accumulate over microbatches in fp32 whatever the dtype. */
	out->grads = count * 4;
	/* AdamW: m and v in fp32 (8 bytes), which ZeRO-1 splits over the ranks
	 * that hold the same parameters (dp; for the experts, the dp / ep
	 * holding the same experts), and under bf16 the fp32 master weights
	 * (4), which every dp rank keeps whole (it updates its share, then
	 * gathers the rest into one fp32 buffer of every share and its own,
	 * sized for the largest chunk's region). */
	const bool zero1 = c->shard_optimizer && c->dp > 1;
	const int64_t edp = c->dp / (c->ep > 0 ? c->ep : 1), shared = count - experts;
	int64_t gather = ceil_div(chunk_params_max, c->dp) * (c->dp + 1);
	if (ceil_div(chunk_experts_max, edp) * (edp + 1) > gather)
		gather = ceil_div(chunk_experts_max, edp) * (edp + 1);
	out->optimizer = (zero1 ? ceil_div(shared, c->dp) + ceil_div(experts, edp) : count) * 8 +
			 (b < 4 ? count * 4 : 0) + (zero1 ? gather * 4 : 0);
	if (fsdp > 1) {
		/* fsdp keeps the shares of everything, and gathers one unit at a time */
		out->params = shares * b;
		out->grads = shares * 4;
		out->optimizer = shares * 8 + (b < 4 ? shares * 4 : 0);
		out->unit_max = unit_max;
		out->gathered = FSDP_BUFS * unit_max * b;
		out->grad_buffers = (2 * FSDP_GBUFS * unit_max + held) * 4;
		const double part = (double)(fsdp - 1) / (double)fsdp;
		out->fsdp_gather = (int64_t)(2.0 * (double)m * (double)count * (double)b * part);
		out->fsdp_reduce = (int64_t)(((double)m * (double)(count - held) + (double)held) * 4.0 * part);
		out->fsdp_dp = c->dp > 1 ? (int64_t)(2.0 * (double)shares * 4.0 * (double)(c->dp - 1) / c->dp) : 0;
	}

	out->activations = in_flight * chunk_act_max + rebuilt_sum;
	/* The head and the loss run over chunks of rows: one (R, V/tp) chunk of
	 * logits in the training dtype, shared by all microbatches. What a
	 * microbatch keeps from its forward to its backward is the gradient of
	 * the head's input (B, T, C): m of them under gpipe, else 1 (the last
	 * stage runs each microbatch's backward right after its forward). */
	if (out->last) {
		int64_t V = ceil_div(s.V, tp);
		out->logits = stage_loss_rows(B * T, V, b, c->loss_chunk_mb) * V * b;
		out->activations += (c->schedule == SCHED_GPIPE ? m : 1) * B * T * s.C * b;
	}
	out->total = out->params + out->grads + out->optimizer + out->activations + out->logits +
		     out->gathered + out->grad_buffers;
	return PP_OK;
}

int plan_memory(const pp_config *c, plan_memory_t *out, pp_err *e)
{
	if (check_layout(c, e))
		return e ? e->code : PP_EUSAGE;
	for (int r = 0; r < c->pp; r++) {
		plan_memory_t t;
		int rc = plan_memory_rank(c, r, &t, e);
		if (rc)
			return rc;
		if (r == 0 || t.total > out->total)
			*out = t;
	}
	return PP_OK;
}

/* Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets.
 * Order matters: the first entry whose name is a substring wins, and a match
 * must not be followed by a digit ("A100" is not "RTX A1000"). The NVL
 * parts run at lower clocks than their SXM siblings and are left unknown
 * rather than given the SXM figure. */
static const struct {
	const char *name;
	double tflops;
} peaks[] = {
	{"H100 NVL", 0},
	{"H200 NVL", 0},
	{"H100 PCIe", 756.0},
	{"H100 SXM", 989.4},
	{"H100 80GB HBM3", 989.4}, /* the SXM part's CUDA name */
	{"H200", 989.4},
	{"A100", 312.0},
};

static bool name_matches(const char *dev, const char *key)
{
	size_t n = strlen(key);
	for (const char *p = dev; *p; p++)
		if (!strncasecmp(p, key, n) && !(p[n] >= '0' && p[n] <= '9'))
			return true;
	return false;
}

double plan_peak_tflops(const char *device_name)
{
	if (!device_name)
		return 0;
	for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
		if (name_matches(device_name, peaks[i].name))
			return peaks[i].tflops;
	return 0;
}

double plan_mfu(double flops_per_token, double tokens_per_s, double peak_tflops)
{
	if (!(peak_tflops > 0))
		return -1;
	return flops_per_token * tokens_per_s / (peak_tflops * 1e12);
}

/* ---- report ---- */

/* 1234567 -> "1,234,567" */
static const char *commas(char *buf, int64_t x)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof tmp, "%lld", (long long)(x < 0 ? -x : x)), o = 0;
	if (x < 0)
		buf[o++] = '-';
	for (int i = 0; i < n; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = 0;
	return buf;
}

static double gib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

static const char *mlp_name(int mlp)
{
	return mlp == PP_MLP_SWIGLU ? "swiglu" : mlp == PP_MLP_GEGLU ? "geglu" : "gelu";
}

static const char *pos_name(int pos)
{
	return pos == PP_POS_ROPE ? "rope" : pos == PP_POS_LEARNED ? "learned" : "relative";
}

typedef struct {
	plan_counts n;
	shape s;
	double flops, flops_fwd, bubble;
	int64_t tokens_per_step, world;
	int m, v;
	plan_memory_t mem;
} plan_all;

static int plan_compute(const pp_config *c, plan_all *a, pp_err *e)
{
	int rc = plan_memory(c, &a->mem, e);
	if (rc)
		return rc;
	plan_param_count(&c->model, &a->n);
	shape_of(&c->model, &a->s);
	a->flops = plan_flops_per_token(&c->model, c->seq_len);
	a->flops_fwd = plan_flops_per_token_fwd(&c->model, c->seq_len);
	a->m = c->microbatches;
	a->v = c->virtual_stages;
	a->tokens_per_step = (int64_t)c->global_batch * c->seq_len;
	a->world = pp_config_world(c);
	/* at the reference costs: backward 2 x forward, zbh1's weight gradient 1 x */
	a->bubble = schedule_bubble_theory(c->schedule, c->pp, a->v, a->m, NULL);
	return PP_OK;
}

static const char *sched_name(const pp_config *c) { return schedule_kind_name(c->schedule); }

/* The theory's peak activations of every pp rank, as a JSON array. */
static json_t *peaks_json(const pp_config *c, int (*theory)(sched_kind, int, int, int, int))
{
	json_t *a = json_array();
	for (int r = 0; a && r < c->pp; r++)
		json_array_append_new(
			a, json_integer(theory(c->schedule, c->pp, c->virtual_stages, c->microbatches, r)));
	return a;
}

/* The same as text: "4, 3, 2, 1"; the first and last ranks of a long pipeline. */
static void print_peaks(FILE *f, const pp_config *c, int (*theory)(sched_kind, int, int, int, int))
{
	for (int r = 0; r < c->pp; r++) {
		if (c->pp > 12 && r == 6) {
			fprintf(f, ", ...");
			r = c->pp - 4;
		}
		fprintf(f, "%s%d", r ? ", " : "",
			theory(c->schedule, c->pp, c->virtual_stages, c->microbatches, r));
	}
}

static int print_json(FILE *f, const pp_config *c, const plan_all *a, pp_err *e)
{
	const pp_model_cfg *m = &c->model;
	const plan_memory_t *r = &a->mem;
	json_t *o = json_pack(
		"{s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
		"s:{s:f, s:f, s:I, s:s, s:s}, "
		"s:{s:I, s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:I, s:f, s:s, s:o, s:s, s:o}, "
		"s:{s:i, s:i, s:i, s:b, s:b, s:i, s:i, s:i, s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, "
		"s:I, s:I, s:f}}",
		"preset", m->preset,
		"params",
		"total", (json_int_t)a->n.total, "embedding", (json_int_t)a->n.embedding,
		"positions", (json_int_t)a->n.positions, "attention", (json_int_t)a->n.attention,
		"mlp", (json_int_t)a->n.mlp, "router", (json_int_t)a->n.router,
		"norms", (json_int_t)a->n.norms, "head", (json_int_t)a->n.head,
		"per_layer", (json_int_t)a->n.per_layer,
		"per_moe_layer", (json_int_t)a->n.per_moe_layer,
		"matmul", (json_int_t)a->n.matmul, "active", (json_int_t)a->n.active,
		"flops_per_token",
		"train", a->flops, "forward", a->flops_fwd, "seq_len", (json_int_t)c->seq_len,
		"train_formula", "6*N + 6*L*Hq*D*T", "forward_formula", "2*N + 2*L*Hq*D*T",
		"layout",
		"world", (json_int_t)a->world, "pp", c->pp, "dp", c->dp, "tp", c->tp, "ep", c->ep,
		"schedule", sched_name(c), "virtual_stages", a->v, "microbatch", c->microbatch,
		"microbatches", a->m, "seq_len", c->seq_len,
		"tokens_per_step", (json_int_t)a->tokens_per_step, "bubble", a->bubble,
		"bubble_formula", schedule_bubble_formula(c->schedule),
		"peak_activations", peaks_json(c, schedule_peak_act_theory),
		"peak_activations_formula", schedule_peak_act_formula(c->schedule),
		"peak_wstash", peaks_json(c, schedule_peak_wstash_theory),
		"memory",
		"rank", r->rank, "layers", r->layers, "chunks", r->chunks, "first", r->first,
		"last", r->last, "in_flight", r->in_flight, "peak_activations", r->peak_act,
		"peak_wstash", r->peak_wstash, "dtype", pp_type_name(c->dtype),
		"recompute", pp_recompute_name(c->recompute), "shard_optimizer", c->shard_optimizer,
		"param_count", (json_int_t)r->param_count, "params", (json_int_t)r->params,
		"grads", (json_int_t)r->grads, "optimizer", (json_int_t)r->optimizer,
		"activations", (json_int_t)r->activations, "logits", (json_int_t)r->logits,
		"total", (json_int_t)r->total, "total_gib", gib(r->total));
	if (!o)
		return pp_errorf(e, PP_ERUNTIME, "plan: cannot build the JSON report");
	/* fsdp: its axis, its working set beside the shares, its traffic */
	json_object_set_new(json_object_get(o, "layout"), "fsdp", json_integer(c->fsdp));
	json_t *mem = json_object_get(o, "memory");
	json_object_set_new(mem, "unit_max", json_integer((json_int_t)r->unit_max));
	json_object_set_new(mem, "gathered", json_integer((json_int_t)r->gathered));
	json_object_set_new(mem, "grad_buffers", json_integer((json_int_t)r->grad_buffers));
	json_object_set_new(mem, "fsdp_traffic",
			    json_pack("{s:I, s:I, s:I}", "all_gather", (json_int_t)r->fsdp_gather,
				      "reduce_scatter", (json_int_t)r->fsdp_reduce, "dp",
				      (json_int_t)r->fsdp_dp));
	int rc = json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(12));
	json_decref(o);
	if (rc || fputc('\n', f) == EOF)
		return pp_errorf(e, PP_ERUNTIME, "plan: cannot write the report");
	return PP_OK;
}

static void print_text(FILE *f, const pp_config *c, const plan_all *a)
{
	const pp_model_cfg *m = &c->model;
	const shape *s = &a->s;
	const plan_counts *n = &a->n;
	const plan_memory_t *r = &a->mem;
	char b1[32], b2[32];

	fprintf(f, "plan for %s\n\n", m->preset[0] ? m->preset : "(custom model)");
	fprintf(f, "model\n");
	fprintf(f, "  %-22s %lld, %lld layers, %lld q / %lld kv heads x %lld\n", "d_model",
		(long long)s->C, (long long)s->L, (long long)s->Hq, (long long)s->Hkv,
		(long long)s->D);
	fprintf(f, "  %-22s %s %lld%s\n", "mlp", mlp_name(m->mlp), (long long)s->F,
		s->E ? " per expert" : "");
	if (s->E)
		fprintf(f, "  %-22s %lld experts, top %lld, every %lld layer(s): %d MoE layers\n",
			"moe", (long long)s->E, (long long)s->K, (long long)s->every,
			n->n_moe_layers);
	fprintf(f, "  %-22s %lld, %s positions, %s head, %s, %s\n", "vocab", (long long)s->V,
		pos_name(m->pos), s->tied ? "tied" : "untied",
		s->layernorm ? "layernorm" : "rmsnorm", s->bias ? "biases" : "no biases");

	fprintf(f, "\nparameters%34s %7s\n", "count", "share");
	struct {
		const char *name;
		int64_t x;
	} rows[] = {{"embedding", n->embedding}, {"attention", n->attention}, {"mlp", n->mlp},
		    {"router", n->router},       {"norms", n->norms},         {"head", n->head}};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		if (!rows[i].x && (!strcmp(rows[i].name, "router") || !strcmp(rows[i].name, "head")))
			continue;
		fprintf(f, "  %-22s %19s %6.2f%%\n", rows[i].name, commas(b1, rows[i].x),
			100.0 * (double)rows[i].x / (double)n->total);
	}
	fprintf(f, "  %-22s %19s\n", "total", commas(b1, n->total));
	fprintf(f, "  %-22s %19s\n", "per layer", commas(b1, n->per_layer));
	if (n->per_moe_layer)
		fprintf(f, "  %-22s %19s\n", "per MoE layer", commas(b1, n->per_moe_layer));
	fprintf(f, "  %-22s %19s   in matrix products per token\n", "matmul (N)",
		commas(b1, n->matmul));
	fprintf(f, "  %-22s %19s\n", "active per token", commas(b1, n->active));

	double attn = (double)s->L * (double)(s->Hq * s->D) * c->seq_len;
	fprintf(f, "\nFLOPs per token (T = %d)\n", c->seq_len);
	fprintf(f, "  %-22s 6*N + 6*L*Hq*D*T = 6*%s + 6*%lld*%lld*%lld*%d = %.4g\n", "train",
		commas(b1, n->matmul), (long long)s->L, (long long)s->Hq, (long long)s->D,
		c->seq_len, a->flops);
	fprintf(f, "  %-22s 2*N + 2*L*Hq*D*T = %.4g\n", "forward", a->flops_fwd);
	fprintf(f, "  %-22s %.4g%% of training FLOPs\n", "attention share",
		100.0 * 6.0 * attn / a->flops);
	fprintf(f, "  %-22s %.4g per step\n", "train FLOPs", a->flops * (double)a->tokens_per_step);

	fprintf(f, "\nlayout\n");
	if (c->fsdp > 1)
		fprintf(f, "  %-22s %lld = pp %d x dp %d x fsdp %d x tp %d", "ranks",
			(long long)a->world, c->pp, c->dp, c->fsdp, c->tp);
	else
		fprintf(f, "  %-22s %lld = pp %d x dp %d x tp %d", "ranks", (long long)a->world,
			c->pp, c->dp, c->tp);
	if (c->ep > 1)
		fprintf(f, "; ep %d inside dp: %d of %lld experts per rank", c->ep,
			(int)(c->model.n_experts / c->ep), (long long)c->model.n_experts);
	fprintf(f, "\n");
	fprintf(f, "  %-22s %s, %d virtual stage(s) per rank\n", "schedule", sched_name(c), a->v);
	int nchunks = c->pp * a->v, lb0, le0, lbl, lel;
	layout_chunk_layers(c, 0, &lb0, &le0);
	layout_chunk_layers(c, nchunks - 1, &lbl, &lel);
	if (c->n_stage_layers) {
		fprintf(f, "  %-22s", "pipeline chunks");
		for (int i = 0; i < c->n_stage_layers; i++)
			fprintf(f, "%s%d", i ? ", " : " ", c->stage_layers[i]);
		fprintf(f, " layers (stage_layers)\n");
	} else if (le0 - lb0 == lel - lbl)
		fprintf(f, "  %-22s %d layers each, %d chunks\n", "pipeline chunks", le0 - lb0,
			nchunks);
	else
		fprintf(f, "  %-22s %d layers on the first %lld, %d on the rest, %d chunks\n",
			"pipeline chunks", le0 - lb0, (long long)(s->L % nchunks), lel - lbl,
			nchunks);
	fprintf(f, "  %-22s %d x %d tokens, %d per dp rank per step\n", "microbatch",
		c->microbatch, c->seq_len, a->m);
	fprintf(f, "  %-22s %s\n", "tokens per step", commas(b1, a->tokens_per_step));
	if (c->pp > 1) {
		fprintf(f, "  %-22s %.1f%% = %s at p=%d v=%d m=%d, backward = 2 x forward%s\n",
			"pipeline bubble", 100.0 * a->bubble, schedule_bubble_formula(c->schedule),
			c->pp, a->v, a->m,
			schedule_split_backward(c->schedule) ? ", weight gradient = forward" : "");
		fprintf(f, "  %-22s ", "peak activations");
		print_peaks(f, c, schedule_peak_act_theory);
		fprintf(f, " chunk-microbatches on pp ranks 0..%d: %s\n", c->pp - 1,
			schedule_peak_act_formula(c->schedule));
		if (schedule_split_backward(c->schedule)) {
			fprintf(f, "  %-22s ", "weight-grad stashes");
			print_peaks(f, c, schedule_peak_wstash_theory);
			fprintf(f, ": min(r+1, m), each held with its activations until its weight "
				   "gradient\n");
		}
	}

	fprintf(f, "\nmemory per rank: pp rank %d of %d (%d layers%s%s), %d chunk-microbatch(es) "
		   "in flight, %s%s%s%s\n",
		r->rank, c->pp, r->layers, r->first ? ", embedding" : "", r->last ? ", head" : "",
		r->in_flight, pp_type_name(c->dtype), c->recompute ? ", recompute=" : "",
		c->recompute ? pp_recompute_name(c->recompute) : "",
		c->shard_optimizer ? ", optimizer sharded" : "");
	const char *by_fsdp = c->fsdp > 1 ? ", / fsdp" : "";
	fprintf(f, "  %-22s %10.2f GiB   %s parameters x %d bytes%s\n", "parameters",
		gib(r->params), commas(b2, r->param_count), dtype_bytes(c->dtype), by_fsdp);
	fprintf(f, "  %-22s %10.2f GiB   fp32%s\n", "gradients", gib(r->grads), by_fsdp);
	fprintf(f, "  %-22s %10.2f GiB   AdamW m, v%s in fp32%s\n", "optimizer",
		gib(r->optimizer), dtype_bytes(c->dtype) < 4 ? ", master weights" : "",
		c->fsdp > 1 ? by_fsdp : c->shard_optimizer && c->dp > 1 ? ", / dp" : "");
	if (c->fsdp > 1) {
		fprintf(f, "  %-22s %10.2f GiB   %d units of %s parameters (the largest), gathered\n",
			"fsdp gathered", gib(r->gathered), FSDP_BUFS, commas(b1, r->unit_max));
		fprintf(f, "  %-22s %10.2f GiB   %d x 2 units, the embedding's and head's whole\n",
			"fsdp grad buffers", gib(r->grad_buffers), FSDP_GBUFS);
	}
	fprintf(f, "  %-22s %10.2f GiB\n", "activations", gib(r->activations));
	if (r->logits)
		fprintf(f, "  %-22s %10.2f GiB\n", "logits", gib(r->logits));
	fprintf(f, "  %-22s %10.2f GiB\n", "total", gib(r->total));
	if (c->fsdp > 1)
		fprintf(f, "\nfsdp traffic per rank per step\n"
			   "  %-22s %10.2f GiB   every unit, each microbatch's forward and backward\n"
			   "  %-22s %10.2f GiB   the layers' per microbatch, embedding and head once\n"
			   "  %-22s %10.2f GiB   the shares' sum over dp %d\n",
			"all-gather", gib(r->fsdp_gather), "reduce-scatter", gib(r->fsdp_reduce),
			"all-reduce", gib(r->fsdp_dp), c->dp);
}

int plan_print(FILE *f, const pp_config *c, bool json, pp_err *e)
{
	plan_all a;
	int rc = plan_compute(c, &a, e);
	if (rc)
		return rc;
	if (json)
		return print_json(f, c, &a, e);
	print_text(f, c, &a);
	if (ferror(f))
		return pp_errorf(e, PP_ERUNTIME, "plan: cannot write the report");
	return PP_OK;
}
