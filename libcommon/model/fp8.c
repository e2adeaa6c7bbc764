/* FP8 matrix products (stage_spec.fp8), as Transformer Engine's recipes
 * run them (HYBRID: E4M3 for the forward's inputs and weights, E5M2 for
 * the backward's output gradients):
 *
 *   out = (q(x sx) @ q(w sw)^T) / (sx sw)
 *   dx  = (q(dy sg) @ q(w sw)) / (sg sw)
 *   dw += (q(dy sg)^T @ q(x sx)) / (sg sx)
 *
 * where q is the cast to FP8 (kernels/fp8.h), the products accumulate in
 * fp32 and the casts' values are held in the compute type, where every FP8
 * value is exact: the CPU runs the numbers a GPU's FP8 tensor cores do, up
 * to the order of the additions.
 *
 * Scales: delayed scaling keeps, per tensor, the amax of the last
 * fp8.amax_history steps (newest first) and casts with fp8_max / max(that)
 * / 2^margin, computed at the end of the previous step (1 at the start);
 * each cast records its tensor's amax into this step's tally. Current
 * scaling casts with fp8_max / amax of the tensor itself, summed (max) over
 * the tp group so that every slice uses the whole tensor's scale. The
 * scales in use live in the backend's memory (ops.h's pairs): current
 * scaling computes them there, amax and all, and delayed scaling copies
 * the step's there once, so that no cast waits for a read to the host.
 *
 * A weight is cast once per step (the copy is kept in wq) unless FSDP
 * gathers it, which casts it at each use. A MoE layer's experts take its
 * dense MLP's states (fp8_experts.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/fp8.h"
#include "../../kernels/fp8mm.h"
#include "internal.h"

/* rows of one state in the checkpoint's tensor: the scale, then the history */
static size_t row_len(const stage_fp8 *f) { return 1 + (size_t)f->H; }

int stage_fp8_state(const pp_stage *s, int l, int product)
{
	const int L = s->layer_end - s->layer_begin;
	return FP8_ROLES * (l < 0 ? L * FP8_PRODUCTS : l * FP8_PRODUCTS + product);
}

int stage_fp8_count(const pp_stage *s)
{
	if (!s->spec.fp8.recipe)
		return 0;
	const int L = s->layer_end - s->layer_begin;
	return FP8_ROLES * (L * FP8_PRODUCTS + (s->last && s->spec.fp8.head));
}

/* The experts' row blocks of a stage with MoE layers (fp8_experts.c):
 * n_local experts times *P sources; 0 without MoE layers. */
static size_t expert_blocks(const pp_stage *s, size_t *P)
{
	const moe_layer ml = stage_moe_dims(s);
	*P = (size_t)ml.ep_size;
	return s->acts->n_moe ? (size_t)ml.n_local * *P : 0;
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }
static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* The FP8 bytes a product of N rows, C in and OC out packs its operands
 * into on FP8 tensor cores (kernels/cuda/fp8.cu: the first operand
 * rounded up to 256 bytes, then the second): a weight and an input
 * (forward), a weight and a gradient (input gradient), an input and a
 * gradient (weight gradient). */
static size_t fp8_pack_bytes(size_t N, size_t C, size_t OC)
{
	return max2(round256(OC * C) + N * max2(C, OC), round256(N * C) + N * OC);
}

void fp8_counts(const pp_stage *s, size_t act_bytes, size_t act[FP8_NACT], size_t *real,
		size_t *bytes, size_t *packs)
{
	memset(act, 0, FP8_NACT * sizeof *act);
	*real = *bytes = *packs = 0;
	const int n = stage_fp8_count(s);
	if (!n)
		return;
	const pp_model_cfg *m = s->cfg;
	const size_t N = (size_t)s->B * s->T, C = (size_t)m->d_model, F = (size_t)s->d_ff;
	const size_t HD = (size_t)s->n_heads * m->head_dim;
	const size_t QKV = HD + 2 * (size_t)s->n_kv_heads * m->head_dim;
	const size_t UP = (size_t)hparams_up_rows(m, s->d_ff);
	/* the head's rows per chunk, when its product is FP8 */
	const size_t R = s->last && s->spec.fp8.head ? (size_t)stage_loss_rows_of(s, act_bytes) : 0;
	size_t in = max2(max2(C, HD), F), out = max2(max2(QKV, UP), C), big = 0;
	if (R)
		out = out * N > R * (size_t)s->vocab ? out : R * (size_t)s->vocab / N + 1;
	for (int i = 0; i < s->n_params; i++)
		if (s->params[i].ndim == 2 && s->params[i].n > big)
			big = s->params[i].n;
	act[FP8_XQ] = N * in;
	act[FP8_GQ] = N * out;
	/* the experts' products: up to R rows of the local experts */
	const moe_layer ml = stage_moe_dims(s);
	size_t P;
	const size_t nb = expert_blocks(s, &P), Rm = nb ? moe_rows_max(&ml, (int)N) : 0;
	act[FP8_XQ] = max2(act[FP8_XQ], Rm * max2(C, F));
	act[FP8_GQ] = max2(act[FP8_GQ], Rm * max2(2 * F, C));
	/* the weights' copies: beside the buffer, or one at a time under FSDP */
	act[FP8_WQ] = s->spec.units.use || s->spec.units.size > 1 ? big : s->n_elems;
	*real = s->spec.no_grad ? 0 : max2(big, Rm ? 2 * F * C : 0);
	/* per state: the history row, the tally (device and host), the count,
	 * the scales (device and host), the amax and the pin */
	*bytes = (size_t)n * (row_len(&(stage_fp8){.H = s->spec.fp8.history}) * sizeof(pp_real) +
			      2 * sizeof(pp_fp8_tally) + sizeof(double) + 5 * sizeof(float) +
			      sizeof(bool)) +
		 (nb ? (1 + 2 * FP8_ROLES) * P * sizeof(float) + nb * sizeof(int) : 0);
	/* a bf16 table (the CUDA backend's) runs the products on FP8 tensor
	 * cores, which pack both operands into FP8 bytes in the backend's
	 * scratch first: the largest product's */
	if (act_bytes == 2) {
		const size_t prod[][3] = {
			{N, C, QKV},    {N, HD, C}, {N, C, UP}, {N, F, C}, {R, C, (size_t)s->vocab},
			{Rm, C, 2 * F}, {Rm, F, C}};
		for (int i = 0; i < NELEMS(prod); i++)
			if (prod[i][0])
				*packs = max2(*packs,
					      fp8_pack_bytes(prod[i][0], prod[i][1], prod[i][2]));
	}
}

int fp8_alloc(pp_stage *s)
{
	const int n = stage_fp8_count(s);
	if (!n)
		return 0;
	size_t act[FP8_NACT], real, bytes, packs;
	fp8_counts(s, pp_act_size(s->ops), act, &real, &bytes, &packs);
	stage_fp8 *f = calloc(1, sizeof *f);
	if (!f)
		return -1;
	s->fp8 = f;
	f->n = n;
	f->H = s->spec.fp8.history;
	f->meta = calloc((size_t)n * row_len(f), sizeof *f->meta);
	f->host_tally = calloc((size_t)n, sizeof *f->host_tally);
	f->cast = calloc((size_t)n, sizeof *f->cast);
	f->host_scales = calloc((size_t)n * 2, sizeof *f->host_scales);
	f->pinned = calloc((size_t)n, sizeof *f->pinned);
	f->w_ok = calloc((size_t)n, sizeof *f->w_ok);
	if (!f->meta || !f->host_tally || !f->cast || !f->host_scales || !f->pinned || !f->w_ok)
		return -1;
	for (int k = 0; k < n; k++)
		f->meta[(size_t)k * row_len(f)] = 1; /* the first step casts with scale 1 */
	const pp_ops *o = s->ops;
	pp_act **p[] = {&f->xq, &f->gq, &f->wq};
	const size_t cnt[] = {act[FP8_XQ], act[FP8_GQ], act[FP8_WQ]};
	if (alloc_acts(o, p, cnt, NELEMS(p)) || !(f->tally = o->alloc(n * sizeof *f->tally)) ||
	    !(f->scales = o->alloc(2 * n * sizeof *f->scales)) ||
	    !(f->amax = o->alloc(n * sizeof *f->amax)))
		return -1;
	if (real && !(f->dw = o->alloc(real * sizeof(pp_real))))
		return -1;
	size_t P;
	const size_t nb = expert_blocks(s, &P);
	if (nb) {
		f->blk_rows = calloc(nb, sizeof *f->blk_rows);
		if (!f->blk_rows || !(f->src_amax = o->alloc(P * sizeof *f->src_amax)) ||
		    !(f->src = o->alloc(2 * FP8_ROLES * P * sizeof *f->src)))
			return -1;
	}
	stage_fp8_begin_step(s);
	stage_fp8_weights_changed(s);
	return 0;
}

void fp8_free(pp_stage *s)
{
	stage_fp8 *f = s->fp8;
	if (!f)
		return;
	void *dev[] = {f->xq,     f->gq,   f->wq,       f->tally, f->dw,
		       f->scales, f->amax, f->src_amax, f->src};
	for (int i = 0; i < NELEMS(dev); i++)
		if (dev[i])
			s->ops->free(dev[i]);
	free(f->meta);
	free(f->host_tally);
	free(f->cast);
	free(f->host_scales);
	free(f->pinned);
	free(f->w_ok);
	free(f->blk_rows);
	free(f);
	s->fp8 = NULL;
}

void stage_fp8_begin_step(pp_stage *s)
{
	stage_fp8 *f = s->fp8;
	if (!f)
		return;
	s->ops->zero(f->tally, (size_t)f->n * sizeof *f->tally);
	memset(f->cast, 0, (size_t)f->n * sizeof *f->cast);
}

void stage_fp8_weights_changed(pp_stage *s)
{
	if (s->fp8)
		memset(s->fp8->w_ok, 0, (size_t)s->fp8->n * sizeof *s->fp8->w_ok);
}

void stage_fp8_step_stats(pp_stage *s, float *amax, double *counts)
{
	stage_fp8 *f = s->fp8;
	counts[0] = counts[1] = counts[2] = 0;
	if (!f)
		return;
	s->ops->to_host(f->host_tally, f->tally, (size_t)f->n * sizeof *f->tally);
	for (int k = 0; k < f->n; k++) {
		amax[k] = f->host_tally[k].amax;
		counts[0] += f->cast[k];
		counts[1] += (double)f->host_tally[k].saturated;
		counts[2] += (double)f->host_tally[k].flushed;
	}
}

/* fp8_max / amax / 2^margin; keep where amax is zero or not finite */
static float scale_from(float amax, int fmt, double margin, float keep)
{
	return pp_fp8_scale(amax, fmt, exp2f((float)margin), keep);
}

static int role_fmt(int role) { return role == FP8_G ? PP_FP8_E5M2 : PP_FP8_E4M3; }

void stage_fp8_update(pp_stage *s, const float *amax)
{
	stage_fp8 *f = s->fp8;
	if (!f || s->spec.fp8.recipe != PP_FP8_DELAYED)
		return;
	for (int k = 0; k < f->n; k++) {
		pp_real *row = f->meta + (size_t)k * row_len(f), *h = row + 1;
		memmove(h + 1, h, (size_t)(f->H - 1) * sizeof *h);
		h[0] = amax[k];
		float most = 0;
		for (int i = 0; i < f->H; i++)
			most = (float)h[i] > most ? (float)h[i] : most;
		row[0] = scale_from(most, role_fmt(k % FP8_ROLES), s->spec.fp8.margin,
				    (float)row[0]);
	}
	f->scales_ok = false;
}

pp_real *stage_fp8_meta(const pp_stage *s, int l, size_t *rows, size_t *cols)
{
	stage_fp8 *f = s->fp8;
	if (!f || s->spec.fp8.recipe != PP_FP8_DELAYED)
		return NULL;
	*rows = l < 0 ? FP8_ROLES : FP8_ROLES * FP8_PRODUCTS;
	*cols = row_len(f);
	f->scales_ok = false; /* a load writes them */
	return f->meta + (size_t)stage_fp8_state(s, l, 0) * row_len(f);
}

/* The device's copy of the step's delayed scales (meta's first column) */
static void upload_scales(const pp_stage *s)
{
	stage_fp8 *f = s->fp8;
	for (int k = 0; k < f->n; k++) {
		f->host_scales[2 * k] = (float)f->meta[(size_t)k * row_len(f)];
		f->host_scales[2 * k + 1] = 1.0f / f->host_scales[2 * k];
	}
	s->ops->to_device(f->scales, f->host_scales, (size_t)f->n * 2 * sizeof *f->scales);
	f->scales_ok = true;
}

const float *fp8_step_scale(const pp_stage *s, int k)
{
	if (!s->fp8->scales_ok)
		upload_scales(s);
	return s->fp8->scales + 2 * k;
}

void fp8_scale_pair(const pp_stage *s, int k, float *pair, const float *amax)
{
	s->ops->fp8_scale(pair, amax, role_fmt(k % FP8_ROLES), exp2f((float)s->spec.fp8.margin));
}

/* The scale of state k for a cast of x (n elements) now, in the backend's
 * memory: delayed, the step's; current, from x's amax over the tp group,
 * computed there. */
static int scale_of(const pp_stage *s, int k, const pp_act *x, size_t n, const float **scale,
		    pp_err *e)
{
	stage_fp8 *f = s->fp8;
	*scale = f->scales + 2 * k;
	if (s->spec.fp8.recipe == PP_FP8_DELAYED) {
		fp8_step_scale(s, k);
		return 0;
	}
	if (f->pinned[k])
		return 0;
	s->ops->absmax(f->amax + k, x, n, 0);
	const pp_tp *tp = &s->spec.tp;
	int rc = tp->size > 1
			 ? tp->allreduce(tp->ctx, f->amax + k, 1, PP_TYPE_REAL, PP_REDUCE_MAX, e)
			 : 0;
	fp8_scale_pair(s, k, f->scales + 2 * k, f->amax + k);
	return rc;
}

void fp8_cast_as(const pp_stage *s, int k, pp_act *out, const pp_act *x, size_t n,
		 const float *scale, bool record)
{
	stage_fp8 *f = s->fp8;
	s->ops->fp8_cast(out, x, n, scale, role_fmt(k % FP8_ROLES), record ? &f->tally[k] : NULL);
	if (record)
		f->cast[k] += (double)n;
}

/* Weight wi (OC, C) of state k as FP8: the step's copy, made at its first
 * use (each use under FSDP), and its scale (the state's, which holds it
 * while the copy stands). */
static int weight(const pp_stage *s, int k, int wi, size_t n, const pp_act **wq, const float **sw,
		  pp_err *e)
{
	stage_fp8 *f = s->fp8;
	const bool kept = !s->unit_w;
	pp_act *dst = kept ? pp_act_at(s->ops, f->wq, s->params[wi].off) : f->wq;
	*wq = dst;
	if (kept && f->w_ok[k + FP8_W]) {
		*sw = f->scales + 2 * (k + FP8_W);
		return 0;
	}
	int rc = scale_of(s, k + FP8_W, W(s, wi), n, sw, e);
	if (!rc)
		fp8_cast_as(s, k + FP8_W, dst, W(s, wi), n, *sw, !kept || !f->w_ok[k + FP8_W]);
	f->w_ok[k + FP8_W] = kept;
	return rc;
}

int fp8_head_begin(const pp_stage *s, const pp_act *h, int N, double dscale, pp_err *e)
{
	stage_fp8 *f = s->fp8;
	if (s->spec.fp8.recipe != PP_FP8_CURRENT)
		return 0;
	const int k = stage_fp8_state(s, -1, 0);
	const float *sx;
	int rc = scale_of(s, k + FP8_X, h, (size_t)N * s->cfg->d_model, &sx, e);
	f->pinned[k + FP8_X] = true;
	/* |softmax - onehot| <= 1: the gradient's amax is at most dscale */
	f->pinned[k + FP8_G] = dscale > 0;
	if (dscale > 0) {
		float *g = f->host_scales + 2 * (k + FP8_G);
		g[0] = scale_from((float)dscale, PP_FP8_E5M2, s->spec.fp8.margin, 1);
		g[1] = 1.0f / g[0];
		s->ops->to_device(f->scales + 2 * (k + FP8_G), g, 2 * sizeof *g);
	}
	return rc;
}

void fp8_head_end(const pp_stage *s)
{
	if (s->spec.fp8.recipe == PP_FP8_CURRENT) {
		const int k = stage_fp8_state(s, -1, 0);
		s->fp8->pinned[k + FP8_X] = s->fp8->pinned[k + FP8_G] = false;
	}
}

int fp8_linear_fwd(const pp_stage *s, int l, int product, pp_act *out, const pp_act *inp, int wi,
		   int N, int C, int OC, pp_err *e)
{
	stage_fp8 *f = s->fp8;
	const int k = stage_fp8_state(s, l, product);
	const pp_act *wq;
	const float *sx, *sw;
	int rc = scale_of(s, k + FP8_X, inp, (size_t)N * C, &sx, e);
	if (rc || (rc = weight(s, k, wi, (size_t)OC * C, &wq, &sw, e)))
		return rc;
	fp8_cast_as(s, k + FP8_X, f->xq, inp, (size_t)N * C, sx, true);
	pp_fp8_matmul_fwd(s->ops, out, f->xq, wq, sx, sw, N, C, OC);
	return 0;
}

int fp8_linear_bwd(const pp_stage *s, int l, int product, pp_act *din, pp_real *dw,
		   const pp_act *dout, const pp_act *inp, int wi, int N, int C, int OC, pp_err *e)
{
	stage_fp8 *f = s->fp8;
	const int k = stage_fp8_state(s, l, product);
	const float *sg, *sw, *sx;
	int rc = scale_of(s, k + FP8_G, dout, (size_t)N * OC, &sg, e);
	if (rc)
		return rc;
	/* a split backward's weight part casts the gradient again: one record */
	fp8_cast_as(s, k + FP8_G, f->gq, dout, (size_t)N * OC, sg, din != NULL);
	if (din) {
		const pp_act *wq;
		if ((rc = weight(s, k, wi, (size_t)OC * C, &wq, &sw, e)))
			return rc;
		pp_fp8_matmul_dgrad(s->ops, din, f->gq, wq, sg, sw, N, C, OC);
	}
	if (dw) {
		/* the forward's cast of the input, again (the forward's record stands) */
		if ((rc = scale_of(s, k + FP8_X, inp, (size_t)N * C, &sx, e)))
			return rc;
		fp8_cast_as(s, k + FP8_X, f->xq, inp, (size_t)N * C, sx, false);
		pp_fp8_matmul_wgrad(s->ops, dw, f->dw, f->gq, f->xq, sg, sx, N, C, OC);
	}
	return 0;
}
