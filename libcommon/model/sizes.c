/* The sizes of everything a stage allocates, as functions of its model, its
 * share (layers, tp slice, experts, FSDP share), its slots and its policy
 * (llm.c's fill_in_parameter_sizes and fill_in_activation_sizes): stage.c
 * allocates by these counts, and stage_sizes adds them up for pp-init
 * --plan and pp-train's memory line, on a stage built or only described. */
#include <math.h>

#include "internal.h"

/* 1 when which holds bit, else 0: a factor of a buffer's size */
static size_t has(unsigned which, unsigned bit) { return (which & bit) ? 1 : 0; }

/* This rank's widths of the stage (internal.h's letter code). */
typedef struct {
	size_t N, C, F, HD, QKV, UP, NH, L, V;
} widths;

static widths widths_of(const pp_stage *s)
{
	const pp_model_cfg *m = s->cfg;
	const size_t HD = (size_t)s->n_heads * m->head_dim;
	return (widths){.N = (size_t)s->B * s->T,
			.C = (size_t)m->d_model,
			.F = (size_t)s->d_ff,
			.HD = HD,
			.QKV = HD + 2 * (size_t)s->n_kv_heads * m->head_dim,
			.UP = (size_t)hparams_up_rows(m, s->d_ff),
			.NH = (size_t)s->B * s->n_heads * s->T,
			.L = (size_t)(s->layer_end - s->layer_begin),
			.V = (size_t)s->vocab};
}

moe_layer stage_moe_dims(const pp_stage *s)
{
	const pp_model_cfg *m = s->cfg;
	const int nl = m->n_experts / s->spec.ep.size;
	return (moe_layer){.ops = s->ops,
			   .C = m->d_model,
			   .F = s->d_ff,
			   .E = m->n_experts,
			   .K = m->top_k,
			   .mode = m->router,
			   .act = m->mlp == PP_MLP_SWIGLU ? PP_ACT_SILU : PP_ACT_GELU_TANH,
			   .capacity = m->capacity_factor,
			   .first = s->spec.ep.rank * nl,
			   .n_local = nl,
			   .stride = 3 * (size_t)s->d_ff * m->d_model,
			   .ep_size = s->spec.ep.size,
			   .tp_rank = s->spec.tp.rank};
}

void stage_layer_counts(const pp_stage *s, unsigned which, bool one, layer_counts *c)
{
	const pp_stage_acts *a = s->acts;
	const widths w = widths_of(s);
	/* copies of the attention's tensors, and of each kind of MLP's */
	const size_t La = one ? w.L > 0 : w.L, Ld = one ? a->n_dense > 0 : (size_t)a->n_dense;
	const size_t Lm = one ? a->n_moe > 0 : (size_t)a->n_moe;
	const size_t ln = s->cfg->norm == PP_NORM_LAYER;
	/* copies of each kind: none where which lacks it */
	const size_t c1 = has(which, PP_SAVE_NORM1) * La, cq = has(which, PP_SAVE_QKV) * La;
	const size_t ca = has(which, PP_SAVE_ATT) * La, cm = has(which, PP_SAVE_MID) * La;
	const size_t c2 = has(which, PP_SAVE_NORM2) * La, cu = has(which, PP_SAVE_UP) * Ld;
	const size_t cf = has(which, PP_SAVE_ACT) * Ld;
	*c = (layer_counts){
		.act = {[LA_H1] = c1 * w.N * w.C,
			[LA_QKV] = cq * w.N * w.QKV,
			[LA_ATT] = ca * w.N * w.HD,
			[LA_MID] = cm * w.N * w.C,
			[LA_H2] = c2 * w.N * w.C,
			[LA_UP] = cu * w.N * w.UP,
			[LA_ACT] = cf * w.N * w.F},
		.real = {[LR_MEAN1] = c1 * ln * w.N,
			 [LR_RSTD1] = c1 * w.N,
			 [LR_LSE] = ca * w.NH,
			 [LR_MEAN2] = c2 * ln * w.N,
			 [LR_RSTD2] = c2 * w.N},
		.n_moe = (int)(has(which, PP_SAVE_MOE) * Lm),
	};
}

void stage_slot_counts(const pp_stage *s, slot_counts *c)
{
	const widths w = widths_of(s);
	const size_t last = s->last ? 1 : 0, keep = s->spec.keep_logits ? 1 : 0;
	const size_t lastg = s->spec.no_grad ? 0 : last, Lg = s->spec.split_backward ? w.L : 0;
	*c = (slot_counts){
		.act = {[SA_RES] = (w.L + 1) * w.N * w.C,
			[SA_DHF] = lastg * w.N * w.C,
			[SA_LOGITS] = last * keep * w.N * w.V,
			[SA_G_OUT] = Lg * w.N * w.C,
			[SA_G_UP] = Lg * w.N * w.UP,
			[SA_G_MID] = Lg * w.N * w.C,
			[SA_G_QKV] = Lg * w.N * w.QKV},
		.real = {[SR_MEANF] = last * w.N, [SR_RSTDF] = last * w.N},
		.ints = {[SI_TOK] = w.N, [SI_TGT] = w.N, [SI_POS] = s->spec.no_grad ? 0 : w.N},
	};
	stage_layer_counts(s, s->saved, false, &c->kept);
}

int stage_loss_rows_of(const pp_stage *s, size_t act_bytes)
{
	return (int)stage_loss_rows((int64_t)s->B * s->T, s->vocab, (int64_t)act_bytes,
				    s->spec.loss_chunk_mb);
}

void stage_scratch_counts(const pp_stage *s, size_t act_bytes, scratch_counts *c)
{
	const widths w = widths_of(s);
	const size_t Nb = s->spec.no_grad ? 0 : w.N; /* backward scratch */
	const size_t last = s->last ? 1 : 0, keep = s->spec.keep_logits ? 1 : 0;
	/* kv heads shared over tp: room for one slot per head of the largest
	 * such tensor, allocated here rather than in the backward pass, where
	 * freeing device memory would wait for the dp gradient sums in flight */
	size_t replica = 0;
	for (int i = 0; !s->spec.no_grad && i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		size_t n = p->grad_partial ? (size_t)(p->global_shape[0] / p->shape[0]) * p->n : 0;
		replica = n > replica ? n : replica;
	}
	size_t lora[4]; /* the adapters' (lora.c) */
	lora_scratch_counts(s, w.N, lora);
	*c = (scratch_counts){
		.act = {[SC_D_RES] = Nb * w.C,
			[SC_D_H] = Nb * w.C,
			[SC_D_ATT] = Nb * w.HD,
			[SC_D_QKV] = Nb * w.QKV,
			[SC_D_UP] = Nb * w.UP,
			/* the gated MLP's, or FP8's: gelu_matmul_bwd writes d_up
			 * directly */
			[SC_D_ACT] = hparams_gated(s->cfg) || s->spec.fp8.recipe ? Nb * w.F : 0,
			[SC_HF] = last * w.N * w.C,
			[SC_LOGITS] = last * (1 - keep) * (size_t)stage_loss_rows_of(s, act_bytes) *
				      w.V,
			[SC_LORA_U] = lora[0],
			[SC_LORA_Z] = lora[1],
			[SC_LORA_Y] = lora[2],
			[SC_LORA_X] = lora[3]},
		.real = {[SCR_CE] = 2 * w.N, [SCR_LOSSES] = last * w.N, [SCR_REPLICA] = replica},
		.ints = {[SCI_BUCKET] = s->cfg->pos == PP_POS_RELATIVE ? (size_t)s->cfg->max_seq_len
								       : 0},
	};
	stage_layer_counts(s, PP_SAVE_ALL & ~s->saved, true, &c->rebuilt);
}

static size_t sum(const size_t *n, int k)
{
	size_t t = 0;
	for (int i = 0; i < k; i++)
		t += n[i];
	return t;
}

/* Bytes of a set of layer activations: its buffers and its MoE layers'. */
static int64_t layer_bytes(const pp_stage *s, const layer_counts *c, size_t A)
{
	moe_layer ml = stage_moe_dims(s);
	size_t moe = c->n_moe ? moe_acts_bytes(&ml, s->B * s->T, s->spec.split_backward, A) : 0;
	return (int64_t)(sum(c->act, LA_NACT) * A + sum(c->real, LR_NREAL) * sizeof(pp_real) +
			 (size_t)c->n_moe * moe);
}

void stage_sizes(const pp_stage *s, size_t A, stage_bytes *out)
{
	const size_t R = sizeof(pp_real), held = s->w_hi - s->w_lo;
	slot_counts sc;
	scratch_counts xc;
	stage_slot_counts(s, &sc);
	stage_scratch_counts(s, A, &xc);
	*out = (stage_bytes){
		.params = (int64_t)((held + s->n_base) * A),
		.master = A == R ? 0 : (int64_t)(held * R),
		.grads = s->spec.no_grad ? 0 : (int64_t)(held * R),
		.slot = (int64_t)((sum(sc.act, SA_NACT) - sc.act[SA_LOGITS]) * A +
				  sum(sc.real, SR_NREAL) * R +
				  sum(sc.ints, SI_NINT) * sizeof(int)) +
			layer_bytes(s, &sc.kept, A),
		.rebuilt = layer_bytes(s, &xc.rebuilt, A),
		.scratch = (int64_t)((sum(xc.act, SC_NACT) - xc.act[SC_LOGITS]) * A +
				     sum(xc.real, SCR_NREAL) * R +
				     sum(xc.ints, SCI_NINT) * sizeof(int)),
		.logits = (int64_t)((xc.act[SC_LOGITS] + (size_t)s->n_slots * sc.act[SA_LOGITS]) *
				    A),
	};
	if (s->acts->n_moe) {
		moe_layer ml = stage_moe_dims(s);
		out->scratch += (int64_t)moe_scratch_bytes(&ml, s->B * s->T, A);
	}
	size_t f8[FP8_NACT], f8_real, f8_bytes, f8_packs;
	fp8_counts(s, A, f8, &f8_real, &f8_bytes, &f8_packs);
	out->fp8_packs = (int64_t)f8_packs;
	out->fp8 = (int64_t)(sum(f8, FP8_NACT) * A + f8_real * R + f8_bytes + f8_packs);
	out->total = out->params + out->master + out->grads + s->n_slots * out->slot +
		     out->rebuilt + out->scratch + out->logits + out->fp8;
}
