/* One layer: its forward, the rebuild of what the recompute policy did not
 * keep, and its backward (whole, or split into the input and the weight
 * gradients), with the tensor-parallel sums inside it. */
#include <math.h>

#include "../base/rng.h"
#include "internal.h"

/* out (N,OC) = inp (N,C) @ weight wi ^T + bias, from the weights stored for
 * decoding where the stage has them (stage_pack_weights) */
void layer_linear(const pp_stage *s, pp_act *out, const pp_act *inp, int wi, const pp_act *bias,
		  int N, int C, int OC)
{
	if (s->packed && s->packed[wi].data)
		s->ops->matmul_packed(out, inp, s->packed[wi].data, bias, N, C, OC,
				      s->packed[wi].fmt);
	else
		s->ops->matmul_fwd(out, inp, W(s, wi), bias, N, C, OC);
}

/* Product `product` (FP8_*) of layer li: out = inp @ w^T + bias, in FP8
 * where the stage trains so (fp8.c: the product; the bias added after it,
 * in the compute type), else as layer_linear. */
static int linear_fwd(const pp_stage *s, const layer_index *li, int product, pp_act *out,
		      const pp_act *inp, int wi, const pp_act *bias, int N, int C, int OC,
		      pp_err *e)
{
	if (!s->fp8) {
		layer_linear(s, out, inp, wi, bias, N, C, OC);
		return 0;
	}
	int rc = fp8_linear_fwd(s, (int)(li - s->acts->layer), product, out, inp, wi, N, C, OC, e);
	if (!rc && bias)
		s->ops->add_bias(out, bias, N, OC);
	return rc;
}

/* Its backward: din (NULL: none) = dout @ w; dw and db (NULL: none) +=
 * the weight's and the bias's gradients. */
static int linear_bwd(const pp_stage *s, const layer_index *li, int product, pp_act *din,
		      pp_real *dw, pp_real *db, const pp_act *dout, const pp_act *inp, int wi,
		      int N, int C, int OC, pp_err *e)
{
	if (!s->fp8) {
		s->ops->matmul_bwd(din, dw, db, dout, inp, din ? W(s, wi) : NULL, N, C, OC);
		return 0;
	}
	int rc = fp8_linear_bwd(s, (int)(li - s->acts->layer), product, din, dw, dout, inp, wi, N,
				C, OC, e);
	if (!rc && db) /* the bias's gradient from the unrounded dout */
		s->ops->matmul_bwd(NULL, NULL, db, dout, NULL, NULL, N, C, OC);
	return rc;
}

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

layer_acts layer_view(const pp_stage *s, slot_acts *sa, int l)
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
		.mean1 = stat_at(n1->mean1, k1, N),
		.rstd1 = stat_at(n1->rstd1, k1, N),
		.qkv = pp_act_at(o, q->qkv, kq * N * QKV),
		.att = pp_act_at(o, at->att, ka * N * HD),
		.lse = stat_at(at->lse, ka, (size_t)s->B * s->n_heads * s->T),
		.mid = pp_act_at(o, md->mid, km * N * C),
		.h2 = pp_act_at(o, n2->h2, k2 * N * C),
		.mean2 = stat_at(n2->mean2, k2, N),
		.rstd2 = stat_at(n2->rstd2, k2, N),
		.up = li->dense >= 0 ? pp_act_at(o, up->up, ku * N * UP) : NULL,
		.act = li->dense >= 0 ? pp_act_at(o, ac->act, kf * N * F) : NULL,
		.moe = li->moe >= 0 ? &mo->moe[ke] : NULL,
		.moe_sc = &s->acts->moe_sc,
		.lora = &s->acts->lora,
		.noise = {sa->noise.key ? rng_mix(sa->noise.key ^ (uint64_t)(s->layer_begin + l))
					: 0,
			  sa->noise.row0},
		.doc_pos = sa->has_pos ? sa->pos : NULL,
		.g_out = split ? pp_act_at(o, sa->g_out, g * N * C) : NULL,
		.g_up = split ? pp_act_at(o, sa->g_up, g * N * UP) : NULL,
		.g_mid = split ? pp_act_at(o, sa->g_mid, g * N * C) : NULL,
		.g_qkv = split ? pp_act_at(o, sa->g_qkv, g * N * QKV) : NULL,
	};
}

/* over N rows of (N,C) */
void layer_norm_fwd(const pp_stage *s, int N, pp_act *out, pp_real *mean, pp_real *rstd,
		    const pp_act *x, int wi, int bi)
{
	const pp_model_cfg *m = s->cfg;
	if (m->norm == PP_NORM_LAYER)
		s->ops->layernorm_fwd(out, mean, rstd, x, W(s, wi), W(s, bi), (pp_real)m->norm_eps,
				      N, m->d_model);
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

void layer_norm_bwd(const pp_stage *s, pp_act *dx, const pp_act *dout, const pp_act *x,
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

static int moe_tp_sum(void *ctx, pp_real *buf, size_t n, pp_err *e)
{
	const pp_tp *tp = &((const pp_stage *)ctx)->spec.tp;
	return tp->allreduce(tp->ctx, buf, n, PP_TYPE_REAL, PP_REDUCE_SUM, e);
}

/* The MoE MLP of layer li as this rank holds it (moe.h). */
moe_layer layer_moe(const pp_stage *s, const layer_index *li)
{
	const bool grads = s->g != NULL;
	moe_layer ml = stage_moe_dims(s);
	ml.router = W(s, li->router_w);
	ml.experts = W(s, li->expert0);
	ml.g_router = grads ? G(s, li->router_w) : NULL;
	ml.g_experts = grads ? G(s, li->expert0) : NULL;
	ml.ep = s->spec.ep.size > 1 ? s->spec.ep.comm : NULL;
	ml.tp_sum = s->spec.tp.size > 1 ? moe_tp_sum : NULL;
	ml.tp_ctx = (void *)s;
	if (s->fp8) {
		ml.fp8 = &fp8_moe_products;
		ml.fp8_ctx = (void *)s;
		ml.fp8_layer = (int)(li - s->acts->layer);
	}
	return ml;
}

/* Layer li's relative position biases and the rows' packed documents
 * (t->doc_pos) as the attention ops take them, in *b, with the biases'
 * gradient when grads; NULL for a model without biases on one document. */
static const pp_attn_bias *layer_bias(const pp_stage *s, const layer_index *li, const layer_acts *t,
				      bool grads, pp_attn_bias *b)
{
	if (li->rel_bias < 0 && !t->doc_pos)
		return NULL;
	*b = (pp_attn_bias){.doc_pos = t->doc_pos};
	if (li->rel_bias >= 0) {
		b->w = W(s, li->rel_bias);
		b->dw = grads ? G(s, li->rel_bias) : NULL;
		b->bucket = s->acts->bucket;
		b->nb = s->cfg->rel_buckets;
	}
	return b;
}

/* The weights of a microbatch's MoE losses in the objective. */
static void moe_loss_weights(const pp_stage *s, double *aux_w, double *z_w)
{
	const double k = s->spec.moe_loss_scale > 0 ? s->spec.moe_loss_scale : 1;
	*aux_w = s->cfg->router_aux_loss_coef * k;
	*z_w = s->cfg->router_z_loss_coef * k;
}

/* One layer over B sequences of T rows (t's buffers hold B*T rows). */
int layer_forward(const pp_stage *s, const layer_index *li, const layer_acts *t, int B, int T,
		  const layer_kv *kv, moe_losses *moe, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	const int N = B * T, C = m->d_model, F = s->d_ff, D = m->head_dim;
	const int Hq = s->n_heads, Hkv = s->n_kv_heads, HD = Hq * D, QKV = HD + 2 * Hkv * D;
	const bool gelu = m->mlp == PP_MLP_GELU;
	pp_attn_bias bias;
	const pp_attn_bias *rb = layer_bias(s, li, t, false, &bias);
	int rc;

	layer_norm_fwd(s, N, t->h1, t->mean1, t->rstd1, t->x, li->norm1_w, li->norm1_b);
	if ((rc = linear_fwd(s, li, FP8_QKV, t->qkv, t->h1, li->qkv_w, W(s, li->qkv_b), N, C, QKV,
			     e)))
		return rc;
	lora_forward(s, t, li, LORA_Q, LORA_V + 1, t->qkv, QKV, t->h1, N, C);
	if (kv) {
		/* each sequence at its own position */
		const size_t slot = (size_t)kv->Tmax * Hkv * D;
		for (int b = 0; b < B; b++) {
			pp_act *qkv = pp_act_at(o, t->qkv, (size_t)b * T * QKV);
			pp_act *k = pp_act_at(o, kv->k, b * slot),
			       *v = pp_act_at(o, kv->v, b * slot);
			if (m->pos == PP_POS_ROPE)
				o->rope_fwd(qkv, 1, T, Hq, Hkv, D, (pp_real)m->rope_theta,
					    kv->pos + b);
			o->kv_append(k, v, qkv, 1, T, Hq, Hkv, D, kv->Tmax, kv->pos + b);
			o->attention_cached(pp_act_at(o, t->att, (size_t)b * T * HD), qkv, k, v, 1,
					    T, Hq, Hkv, D, kv->Tmax, kv->pos + b, m->sliding_window,
					    rb);
		}
	} else {
		if (m->pos == PP_POS_ROPE)
			o->rope_fwd(t->qkv, B, T, Hq, Hkv, D, (pp_real)m->rope_theta, NULL);
		o->attention_fwd(t->att, t->lse, t->qkv, B, T, Hq, Hkv, D, m->sliding_window, rb);
	}
	if ((rc = linear_fwd(s, li, FP8_O, t->mid, t->att, li->o_w, W0(s, li->o_b), N, HD, C, e)))
		return rc;
	lora_forward(s, t, li, LORA_O, LORA_O + 1, t->mid, C, t->att, N, HD);
	if ((rc = tp_sum(s, t->mid, (size_t)N * C, e)))
		return rc;
	/* mid = x + the attention branch, h2 = norm2(mid) */
	norm_residual_fwd(s, N, t->mid, t->h2, t->mean2, t->rstd2, t->x, t->mid, li->norm2_w,
			  li->norm2_b);
	if (li->moe >= 0) {
		moe_layer ml = layer_moe(s, li);
		moe_losses ls;
		if ((rc = moe_forward(&ml, t->moe, t->moe_sc, t->h2, t->out, N, &ls, e)))
			return rc;
		if (moe) {
			moe->aux += ls.aux;
			moe->z += ls.z;
			moe->dropped += ls.dropped;
		}
	} else if (gelu && !s->packed && !s->fp8) {
		o->matmul_gelu_fwd(t->act, t->up, t->h2, W(s, li->up_w), W(s, li->up_b), N, C, F);
	} else if (gelu) {
		if ((rc = linear_fwd(s, li, FP8_UP, t->up, t->h2, li->up_w, W(s, li->up_b), N, C, F,
				     e)))
			return rc;
		o->gelu_fwd(t->act, t->up, (size_t)N * F);
	} else {
		if ((rc = linear_fwd(s, li, FP8_UP, t->up, t->h2, li->up_w, W(s, li->up_b), N, C,
				     2 * F, e)))
			return rc;
		lora_forward(s, t, li, LORA_GATE, LORA_UP + 1, t->up, 2 * F, t->h2, N, C);
		o->glu_fwd(t->act, t->up, N, F, stage_act_kind(m));
	}
	if (li->moe < 0) {
		if ((rc = linear_fwd(s, li, FP8_DOWN, t->out, t->act, li->down_w, W0(s, li->down_b),
				     N, F, C, e)))
			return rc;
		lora_forward(s, t, li, LORA_DOWN, LORA_DOWN + 1, t->out, C, t->act, N, F);
	}
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
int layer_rebuild(const pp_stage *s, const layer_index *li, const layer_acts *t, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	const unsigned keep = s->saved;
	const int B = s->B, T = s->T, N = B * T, F = s->d_ff;
	if (!(keep & PP_SAVE_QKV))
		return layer_forward(s, li, t, B, T, NULL, NULL, e);
	if (!(keep & PP_SAVE_NORM1))
		layer_norm_fwd(s, N, t->h1, t->mean1, t->rstd1, t->x, li->norm1_w, li->norm1_b);
	pp_attn_bias bias;
	if (!(keep & PP_SAVE_ATT))
		o->attention_fwd(t->att, t->lse, t->qkv, B, T, s->n_heads, s->n_kv_heads,
				 m->head_dim, m->sliding_window,
				 layer_bias(s, li, t, false, &bias));
	if (!(keep & PP_SAVE_NORM2))
		layer_norm_fwd(s, N, t->h2, t->mean2, t->rstd2, t->mid, li->norm2_w, li->norm2_b);
	if (li->dense >= 0 && !(keep & PP_SAVE_ACT)) {
		if (m->mlp == PP_MLP_GELU)
			o->gelu_fwd(t->act, t->up, (size_t)N * F);
		else
			o->glu_fwd(t->act, t->up, N, F, stage_act_kind(m));
	}
	return 0;
}

/* a->d_res holds dL/d(layer output) on entry and dL/d(layer input) on exit.
 * STAGE_BWD_INPUT leaves every weight product's output gradient in t->g_*
 * for STAGE_BWD_WEIGHT (norm weights are cheap and done with the input part). */
int layer_backward(const pp_stage *s, const layer_index *li, const layer_acts *t, int part,
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
			moe_layer ml = layer_moe(s, li);
			if ((rc = moe_backward(&ml, t->moe, t->moe_sc, t->h2, NULL, NULL, aux_w,
					       z_w, MOE_BWD_WEIGHT, N, e)))
				return rc;
		} else {
			if ((rc = linear_bwd(s, li, FP8_DOWN, NULL, G(s, li->down_w),
					     G(s, li->down_b), t->g_out, t->act, li->down_w, N, F,
					     C, e)) ||
			    (rc = linear_bwd(s, li, FP8_UP, NULL, G(s, li->up_w), G(s, li->up_b),
					     t->g_up, t->h2, li->up_w, N, C, UP, e)))
				return rc;
		}
		if ((rc = linear_bwd(s, li, FP8_O, NULL, G(s, li->o_w), G(s, li->o_b), t->g_mid,
				     t->att, li->o_w, N, HD, C, e)))
			return rc;
		return linear_bwd(s, li, FP8_QKV, NULL, G(s, li->qkv_w), G(s, li->qkv_b), t->g_qkv,
				  t->h1, li->qkv_w, N, C, QKV, e);
	}
	if (li->moe >= 0) {
		moe_layer ml = layer_moe(s, li);
		if ((rc = moe_backward(&ml, t->moe, t->moe_sc, t->h2, a->d_res, a->d_h, aux_w, z_w,
				       wgrad ? MOE_BWD_FULL : MOE_BWD_INPUT, N, e)))
			return rc;
	} else {
		if (!wgrad)
			o->to_device(t->g_out, a->d_res, NC * A);
		pp_real *dw_down = wgrad ? G(s, li->down_w) : NULL;
		pp_real *db_down = wgrad ? G(s, li->down_b) : NULL;
		if (m->mlp == PP_MLP_GELU && !s->fp8) {
			o->gelu_matmul_bwd(a->d_up, dw_down, db_down, a->d_res, t->act, t->up,
					   W(s, li->down_w), N, F, C);
		} else if (m->mlp == PP_MLP_GELU) {
			if ((rc = linear_bwd(s, li, FP8_DOWN, a->d_act, dw_down, db_down, a->d_res,
					     t->act, li->down_w, N, F, C, e)))
				return rc;
			o->gelu_bwd(a->d_up, a->d_act, t->up, (size_t)N * F);
		} else {
			if ((rc = linear_bwd(s, li, FP8_DOWN, a->d_act, dw_down, db_down, a->d_res,
					     t->act, li->down_w, N, F, C, e)))
				return rc;
			lora_backward(s, t, li, LORA_DOWN, LORA_DOWN + 1, a->d_act, a->d_res, C,
				      t->act, N, F);
			o->glu_bwd(a->d_up, a->d_act, t->up, N, F, stage_act_kind(m));
		}
		if (!wgrad)
			o->to_device(t->g_up, a->d_up, (size_t)N * UP * A);
		if ((rc = linear_bwd(s, li, FP8_UP, a->d_h, wgrad ? G(s, li->up_w) : NULL,
				     wgrad ? G(s, li->up_b) : NULL, a->d_up, t->h2, li->up_w, N, C,
				     UP, e)))
			return rc;
		lora_backward(s, t, li, LORA_GATE, LORA_UP + 1, a->d_h, a->d_up, UP, t->h2, N, C);
	}
	if ((rc = tp_sum(s, a->d_h, NC, e)))
		return rc;
	layer_norm_bwd(s, a->d_res, a->d_h, t->mid, t->mean2, t->rstd2, li->norm2_w, li->norm2_b);

	if (!wgrad)
		o->to_device(t->g_mid, a->d_res, NC * A);
	if ((rc = linear_bwd(s, li, FP8_O, a->d_att, wgrad ? G(s, li->o_w) : NULL,
			     wgrad ? G(s, li->o_b) : NULL, a->d_res, t->att, li->o_w, N, HD, C, e)))
		return rc;
	lora_backward(s, t, li, LORA_O, LORA_O + 1, a->d_att, a->d_res, C, t->att, N, HD);
	/* the biases' gradient with the input part, as the norms' */
	pp_attn_bias bias;
	o->attention_bwd(a->d_qkv, a->d_att, t->att, t->lse, t->qkv, B, T, Hq, Hkv, D,
			 m->sliding_window, layer_bias(s, li, t, true, &bias));
	if (m->pos == PP_POS_ROPE)
		o->rope_bwd(a->d_qkv, B, T, Hq, Hkv, D, (pp_real)m->rope_theta, NULL);
	if (!wgrad)
		o->to_device(t->g_qkv, a->d_qkv, (size_t)N * QKV * A);
	if ((rc = linear_bwd(s, li, FP8_QKV, a->d_h, wgrad ? G(s, li->qkv_w) : NULL,
			     wgrad ? G(s, li->qkv_b) : NULL, a->d_qkv, t->h1, li->qkv_w, N, C, QKV,
			     e)))
		return rc;
	lora_backward(s, t, li, LORA_Q, LORA_V + 1, a->d_h, a->d_qkv, QKV, t->h1, N, C);
	if ((rc = tp_sum(s, a->d_h, NC, e)))
		return rc;
	layer_norm_bwd(s, a->d_res, a->d_h, t->x, t->mean1, t->rstd1, li->norm1_w, li->norm1_b);
	return 0;
}
