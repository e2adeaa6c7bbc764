/* Parameter counts, FLOPs and memory by arithmetic (see plan.h).
 *
 * Model (pre-norm decoder), per layer:
 *   norm1 (C, + C bias for layernorm)
 *   qkv   ((Hq + 2 Hkv) D x C, + bias)      column-parallel over tp
 *   o     (C x Hq D, + C bias)               row-parallel: bias replicated
 *   rel   (Hq x buckets) relative position biases (pos relative), by head
 *   norm2
 *   MLP   gated: gate+up (2F x C), down (C x F); gelu: c_fc (F x C),
 *         c_proj (C x F); biases (2F or F, + C) when cfg.bias
 *         MoE layers: E copies of the MLP + router (E x C, replicated)
 * plus wte (V x C, vocab-parallel), wpe (max_seq_len x C, replicated) for
 * learned positions, final norm, head (V x C, vocab-parallel) unless tied.
 *
 * Those counts are of the whole model. What one rank holds and allocates
 * is not counted here: the plan describes each of its chunks as the
 * trainer would build it (its layout, stage_describe) and adds up the
 * sizes stage_create allocates by (stage_sizes, fsdp_sizes). */
#include "plan.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../config/layout.h"
#include "../model/model.h"
#include "../parallel/fsdp.h"
#include "../parallel/gradsync.h"

/* The model's dimensions (of a resolved config). */
typedef struct {
	int64_t V, C, Hq, Hkv, D, F, L, E, K, every, max_seq, rel_buckets;
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
	s->rel_buckets = m->pos == PP_POS_RELATIVE ? m->rel_buckets : 0;
	s->gated = m->mlp == PP_MLP_SWIGLU || m->mlp == PP_MLP_GEGLU;
	s->layernorm = m->norm == PP_NORM_LAYER;
	s->bias = m->bias;
	s->tied = m->tied_embeddings;
	s->learned_pos = m->pos == PP_POS_LEARNED;
}

/* Number of MoE layers among [0, n): i is MoE iff i % every == every - 1. */
static int64_t moe_below(const shape *s, int64_t n) { return s->E ? n / s->every : 0; }

/* One layer's parameters. */
typedef struct {
	int64_t attn_mat, attn_bias, attn_rel;
	int64_t mlp_mat, mlp_bias; /* one MLP (one expert) */
	int64_t n_mlp;             /* MLP copies: 1, or this ep rank's E / ep */
	int64_t router, norms;
} layer_parts;

static void layer_parts_of(const shape *s, bool moe, layer_parts *p)
{
	int64_t hq = s->Hq, hkv = s->Hkv, f = s->F;
	int64_t C = s->C, D = s->D;
	p->attn_mat = (hq + 2 * hkv) * D * C + C * hq * D;
	p->attn_bias = s->bias ? (hq + 2 * hkv) * D + C : 0;
	p->attn_rel = hq * s->rel_buckets;
	p->mlp_mat = (s->gated ? 3 : 2) * f * C;
	p->mlp_bias = s->bias ? (s->gated ? 2 * f : f) + C : 0;
	p->n_mlp = moe ? s->E : 1;
	p->router = moe ? s->E * C : 0;
	p->norms = 2 * (s->layernorm ? 2 * C : C);
}

static int64_t layer_total(const layer_parts *p)
{
	return p->attn_mat + p->attn_bias + p->attn_rel + p->n_mlp * (p->mlp_mat + p->mlp_bias) +
	       p->router + p->norms;
}

void plan_param_count(const pp_model_cfg *m, plan_counts *out)
{
	shape s;
	shape_of(m, &s);
	layer_parts dense, moe;
	layer_parts_of(&s, false, &dense);
	layer_parts_of(&s, true, &moe);
	int64_t n_moe = moe_below(&s, s.L), n_dense = s.L - n_moe;
	int64_t final_norm = s.layernorm ? 2 * s.C : s.C;

	memset(out, 0, sizeof *out);
	out->n_moe_layers = (int)n_moe;
	out->positions = s.learned_pos ? s.max_seq * s.C : 0;
	out->embedding = s.V * s.C + out->positions;
	out->head = s.tied ? 0 : s.V * s.C;
	out->attention = s.L * (dense.attn_mat + dense.attn_bias + dense.attn_rel);
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
	if (m->d_model < 1 || m->n_heads < 1 || m->n_layers < 1 || m->vocab_size < 1 || m->d_ff < 1)
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

int plan_memory_rank(const pp_config *c, int rank, plan_memory_t *out, pp_err *e)
{
	if (check_layout(c, e))
		return e ? e->code : PP_EUSAGE;
	if (rank < 0 || rank >= c->pp)
		return pp_errorf(e, PP_EUSAGE, "plan: pp rank %d outside 0..%d", rank, c->pp - 1);
	/* the first rank of the pp rank's data and tp groups: the one with the
	 * largest shares (layout_share rounds up) and the first ep group */
	pp_layout l;
	int rc = layout_build(&l, c, layout_rank_of(c, rank, 0, 0), e);
	if (rc)
		return rc;
	const int64_t m = c->microbatches, b = dtype_bytes(c->dtype), R = sizeof(pp_real);
	const int fsdp = c->fsdp;
	memset(out, 0, sizeof *out);
	out->rank = rank;
	out->chunks = l.v;
	out->first = rank == 0;
	out->last = rank == c->pp - 1;
	/* what the runtime keeps: a microbatch's saved state lives from its
	 * forward until its backward, under a split backward until its weight
	 * gradient */
	out->in_flight = schedule_peak_held_theory(c->schedule, c->pp, l.v, c->microbatches, rank);
	out->peak_act = schedule_peak_act_theory(c->schedule, c->pp, l.v, c->microbatches, rank);
	out->peak_wstash = schedule_peak_wstash_theory(c->schedule, c->pp, l.v, c->microbatches,
						       rank);

	pp_stage st[LAYOUT_MAX_CHUNKS];
	int built = 0;
	int64_t adam = 0, gather = 0, packs = 0;
	for (int k = 0; k < l.v && !rc; k++, built++) {
		stage_spec sp = stage_spec_of(c, &l, k);
		sp.units = (stage_units){.size = fsdp, .rank = l.fsdp_rank};
		if ((rc = stage_describe(&st[k], &c->model, &sp, e)))
			break;
		stage_bytes sb;
		stage_sizes(&st[k], (size_t)b, &sb);
		out->layers += st[k].layer_end - st[k].layer_begin;
		out->param_count += (int64_t)st[k].n_elems;
		out->base_count += (int64_t)st[k].n_base;
		out->params += sb.params;
		out->grads += sb.grads;
		out->optimizer += sb.master;
		out->activations += st[k].n_slots * sb.slot + sb.rebuilt;
		out->scratch += sb.scratch;
		out->logits += sb.logits;
		/* the packs are one scratch buffer, as large as the largest chunk's */
		out->fp8 += sb.fp8 - sb.fp8_packs;
		packs = sb.fp8_packs > packs ? sb.fp8_packs : packs;
		/* AdamW's m and v of the ranges this rank updates (ZeRO-1, fsdp:
		 * its shares; data rank 0's are the largest) */
		optim_ranges r;
		if (fsdp > 1)
			gradsync_ranges(&st[k], true, fsdp, l.fsdp_rank, 1, &r);
		else
			gradsync_ranges(&st[k], c->shard_optimizer && l.data > 1, l.data,
					l.data_rank, l.ep, &r);
		adam += (int64_t)optim_ranges_count(&r) * 2 * R;
		const size_t n = gradsync_gather_len(st[k].n_shared, st[k].n_elems - st[k].n_shared,
						     l.data, l.ep);
		gather = (int64_t)n > gather ? (int64_t)n : gather;
	}
	if (!rc && fsdp > 1) {
		fsdp_bytes f;
		fsdp_sizes(st, l.v, (size_t)b, &f);
		out->unit_max = (int64_t)f.unit_max;
		out->gathered = f.gathered;
		out->grad_buffers = f.grad_buffers;
		/* the bytes each rank sends per step (about what it receives):
		 * every unit all-gathered for each microbatch's forward and
		 * backward, the layers' gradients reduce-scattered per microbatch
		 * (the embedding's and head's once a step), the shares summed
		 * over dp */
		int64_t whole = (f.grad_buffers / R) - 2 * FSDP_GBUFS * (int64_t)f.unit_max;
		const double part = (double)(fsdp - 1) / (double)fsdp,
			     count = (double)out->param_count;
		out->fsdp_gather = (int64_t)(2.0 * (double)m * count * (double)b * part);
		out->fsdp_reduce = (int64_t)(((double)m * (count - (double)whole) + (double)whole) *
					     4.0 * part);
		out->fsdp_dp = c->dp > 1 ? (int64_t)(2.0 * (double)(out->params / b) * 4.0 *
						     (double)(c->dp - 1) / c->dp)
					 : 0;
	}
	for (int k = 0; k < built; k++)
		stage_free(&st[k]);
	if (rc)
		return rc;
	const bool zero1 = fsdp == 1 && c->shard_optimizer && l.data > 1;
	out->optimizer += adam + (zero1 ? gather * R : 0);
	out->fp8 += packs;
	out->total = out->params + out->grads + out->optimizer + out->activations + out->scratch +
		     out->logits + out->fp8 + out->gathered + out->grad_buffers;
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
	if (c->lora.rank > 0) { /* beside it: full fine-tuning of the same rank */
		pp_config full = *c;
		full.lora.rank = 0;
		plan_memory_t t;
		int rc = plan_memory_rank(&full, out->rank, &t, e);
		if (rc)
			return rc;
		out->full_total = t.total;
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
	double tflops, fp8;
} peaks[] = {
	{"H100 NVL", 0, 0},
	{"H200 NVL", 0, 0},
	{"H100 PCIe", 756.0, 1513.0},
	{"H100 SXM", 989.4, 1978.9},
	{"H100 80GB HBM3", 989.4, 1978.9}, /* the SXM part's CUDA name */
	{"H200", 989.4, 1978.9},
	{"A100", 312.0, 0},
};

static bool name_matches(const char *dev, const char *key)
{
	size_t n = strlen(key);
	for (const char *p = dev; *p; p++)
		if (!strncasecmp(p, key, n) && !(p[n] >= '0' && p[n] <= '9'))
			return true;
	return false;
}

static int peak_of(const char *device_name)
{
	for (size_t i = 0; device_name && i < sizeof peaks / sizeof peaks[0]; i++)
		if (name_matches(device_name, peaks[i].name))
			return (int)i;
	return -1;
}

double plan_peak_tflops(const char *device_name)
{
	const int i = peak_of(device_name);
	return i < 0 ? 0 : peaks[i].tflops;
}

double plan_fp8_peak_tflops(const char *device_name)
{
	const int i = peak_of(device_name);
	return i < 0 ? 0 : peaks[i].fp8;
}

double plan_fp8_share(const pp_config *c)
{
	if (c->fp8.recipe == PP_FP8_NONE)
		return 0;
	plan_counts n;
	plan_param_count(&c->model, &n);
	/* the head's product unless fp8.head, and the routers', stay in the
	 * compute type */
	const double head = c->fp8.head ? 0 : (double)c->model.vocab_size * c->model.d_model;
	return 6.0 * ((double)n.matmul - head - (double)n.router) /
	       plan_flops_per_token(&c->model, c->seq_len);
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
		json_array_append_new(a, json_integer(theory(c->schedule, c->pp, c->virtual_stages,
							     c->microbatches, r)));
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
		"preset", m->preset, "params", "total", (json_int_t)a->n.total, "embedding",
		(json_int_t)a->n.embedding, "positions", (json_int_t)a->n.positions, "attention",
		(json_int_t)a->n.attention, "mlp", (json_int_t)a->n.mlp, "router",
		(json_int_t)a->n.router, "norms", (json_int_t)a->n.norms, "head",
		(json_int_t)a->n.head, "per_layer", (json_int_t)a->n.per_layer, "per_moe_layer",
		(json_int_t)a->n.per_moe_layer, "matmul", (json_int_t)a->n.matmul, "active",
		(json_int_t)a->n.active, "flops_per_token", "train", a->flops, "forward",
		a->flops_fwd, "seq_len", (json_int_t)c->seq_len, "train_formula",
		"6*N + 6*L*Hq*D*T", "forward_formula", "2*N + 2*L*Hq*D*T", "layout", "world",
		(json_int_t)a->world, "pp", c->pp, "dp", c->dp, "tp", c->tp, "ep", c->ep,
		"schedule", sched_name(c), "virtual_stages", a->v, "microbatch", c->microbatch,
		"microbatches", a->m, "seq_len", c->seq_len, "tokens_per_step",
		(json_int_t)a->tokens_per_step, "bubble", a->bubble, "bubble_formula",
		schedule_bubble_formula(c->schedule), "peak_activations",
		peaks_json(c, schedule_peak_act_theory), "peak_activations_formula",
		schedule_peak_act_formula(c->schedule), "peak_wstash",
		peaks_json(c, schedule_peak_wstash_theory), "memory", "rank", r->rank, "layers",
		r->layers, "chunks", r->chunks, "first", r->first, "last", r->last, "in_flight",
		r->in_flight, "peak_activations", r->peak_act, "peak_wstash", r->peak_wstash,
		"dtype", pp_type_name(c->dtype), "recompute", pp_recompute_name(c->recompute),
		"shard_optimizer", c->shard_optimizer, "param_count", (json_int_t)r->param_count,
		"params", (json_int_t)r->params, "grads", (json_int_t)r->grads, "optimizer",
		(json_int_t)r->optimizer, "activations", (json_int_t)r->activations, "logits",
		(json_int_t)r->logits, "total", (json_int_t)r->total, "total_gib", gib(r->total));
	if (!o)
		return pp_errorf(e, PP_ERUNTIME, "plan: cannot build the JSON report");
	/* fsdp: its axis, its working set beside the shares, its traffic */
	json_object_set_new(json_object_get(o, "layout"), "fsdp", json_integer(c->fsdp));
	json_t *mem = json_object_get(o, "memory");
	json_object_set_new(mem, "scratch", json_integer((json_int_t)r->scratch));
	if (c->fp8.recipe != PP_FP8_NONE) {
		json_object_set_new(mem, "fp8", json_integer((json_int_t)r->fp8));
		json_object_set_new(json_object_get(o, "flops_per_token"), "fp8_share",
				    json_real(plan_fp8_share(c)));
	}
	if (c->lora.rank > 0) {
		json_object_set_new(mem, "lora_base_count",
				    json_integer((json_int_t)r->base_count));
		json_object_set_new(mem, "full_finetune_total",
				    json_integer((json_int_t)r->full_total));
	}
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
		if (!rows[i].x &&
		    (!strcmp(rows[i].name, "router") || !strcmp(rows[i].name, "head")))
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
	if (c->fp8.recipe != PP_FP8_NONE)
		fprintf(f,
			"  %-22s %.4g%% of training FLOPs (the linear layers%s); MFU counts all FLOPs "
			"against the bf16 peak, mfu_fp8 against the FP8 peak (2x on Hopper)\n",
			"in FP8", 100.0 * plan_fp8_share(c), c->fp8.head ? ", the head too" : "");

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
	fprintf(f, "  %-22s %d x %d tokens, %d per dp rank per step\n", "microbatch", c->microbatch,
		c->seq_len, a->m);
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

	fprintf(f,
		"\nmemory per rank: pp rank %d of %d (%d layers%s%s), %d chunk-microbatch(es) "
		"in flight, %s%s%s%s\n",
		r->rank, c->pp, r->layers, r->first ? ", embedding" : "", r->last ? ", head" : "",
		r->in_flight, pp_type_name(c->dtype), c->recompute ? ", recompute=" : "",
		c->recompute ? pp_recompute_name(c->recompute) : "",
		c->shard_optimizer ? ", optimizer sharded" : "");
	const char *by_fsdp = c->fsdp > 1 ? ", / fsdp" : "";
	if (c->lora.rank > 0)
		fprintf(f,
			"  %-22s %10.2f GiB   %s adapters (lora.rank %d) and the frozen base's %s, "
			"x %d bytes\n",
			"parameters", gib(r->params), commas(b2, r->param_count), c->lora.rank,
			commas(b1, r->base_count), dtype_bytes(c->dtype));
	else
		fprintf(f, "  %-22s %10.2f GiB   %s parameters x %d bytes%s\n", "parameters",
			gib(r->params), commas(b2, r->param_count), dtype_bytes(c->dtype), by_fsdp);
	fprintf(f, "  %-22s %10.2f GiB   fp32%s\n", "gradients", gib(r->grads), by_fsdp);
	fprintf(f, "  %-22s %10.2f GiB   AdamW m, v%s in fp32%s\n", "optimizer", gib(r->optimizer),
		dtype_bytes(c->dtype) < 4 ? ", master weights" : "",
		c->fsdp > 1                       ? by_fsdp
		: c->shard_optimizer && c->dp > 1 ? ", / dp"
						  : "");
	if (c->fsdp > 1) {
		fprintf(f,
			"  %-22s %10.2f GiB   %d units of %s parameters (the largest), gathered\n",
			"fsdp gathered", gib(r->gathered), FSDP_BUFS, commas(b1, r->unit_max));
		fprintf(f, "  %-22s %10.2f GiB   %d x 2 units, the embedding's and head's whole\n",
			"fsdp grad buffers", gib(r->grad_buffers), FSDP_GBUFS);
	}
	fprintf(f,
		"  %-22s %10.2f GiB   kept for the backward passes of the microbatches in flight\n",
		"activations", gib(r->activations));
	fprintf(f, "  %-22s %10.2f GiB   the backward pass's and the head's working buffers\n",
		"scratch", gib(r->scratch));
	if (r->logits)
		fprintf(f, "  %-22s %10.2f GiB\n", "logits", gib(r->logits));
	if (c->fp8.recipe != PP_FP8_NONE)
		fprintf(f,
			"  %-22s %10.2f GiB   the weights' FP8 copies, the casts, the amax "
			"histories\n",
			"fp8", gib(r->fp8));
	fprintf(f, "  %-22s %10.2f GiB\n", "total", gib(r->total));
	if (c->lora.rank > 0)
		fprintf(f, "  %-22s %10.2f GiB   the same run training every parameter (%.2fx)\n",
			"full fine-tuning", gib(r->full_total),
			r->total ? (double)r->full_total / (double)r->total : 0);
	if (c->fsdp > 1)
		fprintf(f,
			"\nfsdp traffic per rank per step\n"
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
