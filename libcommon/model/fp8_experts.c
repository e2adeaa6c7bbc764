/* FP8 for a MoE layer's experts: moe.h's moe_products over fp8.c's states.
 *
 * A MoE layer's experts take its dense MLP's two states: every expert's
 * gate|up product shares FP8_UP's, every down product FP8_DOWN's, so a
 * weight's scale is that of all the layer's experts together (max over ep
 * and tp), as one tensor's. Under current scaling the rows of the inputs
 * and gradients are cast by where they come from: with the amax of every
 * row their source (a rank of the ep group, or this rank) sent to any
 * expert, max over ep and tp. That is the amax one process sees for the
 * same microbatch, so every layout casts as one process does. (Under
 * delayed scaling every row casts with the state's scale.) */
#include "../../kernels/fp8mm.h"
#include "internal.h"

/* buf (n floats, backend memory) = its max over the ep group and the tp
 * group: every expert's, every slice's */
static int max_over_groups(const pp_stage *s, const moe_layer *m, float *buf, int n, pp_err *e)
{
	const pp_tp *tp = &s->spec.tp;
	int rc = m->ep ? comm_allreduce(m->ep, buf, (size_t)n, PP_DT_F32, PP_OP_MAX, e) : 0;
	if (!rc && tp->size > 1)
		rc = tp->allreduce(tp->ctx, buf, (size_t)n, PP_TYPE_REAL, PP_REDUCE_MAX, e);
	return rc;
}

/* The scales of state k's cast of x (rows in the blocks of moe_block_rows,
 * `width` wide), per source p at (*sc + p step): delayed, the state's (step
 * 0); current, from each source's amax over every block, taken on the
 * device, block after block, into the source's one float. */
static int source_scales(const pp_stage *s, const moe_layer *m, int k, const pp_act *x,
			 size_t width, const float **sc, int *step, pp_err *e)
{
	stage_fp8 *f = s->fp8;
	const pp_ops *o = s->ops;
	const int P = moe_sources(m), role = k % FP8_ROLES;
	if (s->spec.fp8.recipe == PP_FP8_DELAYED) {
		*sc = fp8_step_scale(s, k);
		*step = 0;
		return 0;
	}
	const int *rows = f->blk_rows;
	size_t at = 0;
	o->zero(f->src_amax, (size_t)P * sizeof *f->src_amax); /* a source may send no rows */
	for (int b = 0; b < m->n_local * P; at += (size_t)rows[b], b++)
		if (rows[b])
			o->absmax(f->src_amax + b % P, pp_act_at(o, x, at * width),
				  (size_t)rows[b] * width, 1);
	int rc = max_over_groups(s, m, f->src_amax, P, e);
	float *pairs = f->src + 2 * P * role;
	for (int p = 0; !rc && p < P; p++)
		fp8_scale_pair(s, k, pairs + 2 * p, f->src_amax + p);
	*sc = pairs;
	*step = 2;
	return rc;
}

/* Every local expert's weights of one product as FP8 (expert j's at *wq +
 * j stride): the step's copy, made at the first use, and the state's
 * scale. MoE layers take no FSDP, so the copy is always kept. */
static int expert_weights(const pp_stage *s, const moe_layer *m, int k, bool down,
			  const pp_act **wq, const float **sw, pp_err *e)
{
	stage_fp8 *f = s->fp8;
	const pp_ops *o = s->ops;
	const int kw = k + FP8_W, n = m->n_local;
	const size_t len = (size_t)m->F * m->C * (down ? 1 : 2);
	const size_t off = s->params[s->acts->layer[m->fp8_layer].expert0].off;
	pp_act *dst = pp_act_at(o, f->wq, off + (down ? 2 * (size_t)m->F * m->C : 0));
	*wq = dst;
	*sw = f->scales + 2 * kw;
	if (f->w_ok[kw])
		return 0;
	if (s->spec.fp8.recipe == PP_FP8_DELAYED) {
		fp8_step_scale(s, kw);
	} else {
		for (int j = 0; j < n; j++)
			o->absmax(f->amax + kw, moe_weight(m, j, down), len, j > 0);
		int rc = max_over_groups(s, m, f->amax + kw, 1, e);
		if (rc)
			return rc;
		fp8_scale_pair(s, kw, f->scales + 2 * kw, f->amax + kw);
	}
	for (int j = 0; j < n; j++)
		fp8_cast_as(s, kw, pp_act_at(o, dst, (size_t)j * m->stride), moe_weight(m, j, down),
			    len, *sw, true);
	f->w_ok[kw] = true;
	return 0;
}

/* The state of layer m's product and its widths */
static int expert_product(const pp_stage *s, const moe_layer *m, const moe_acts *t, bool down,
			  int *IC, int *OC)
{
	*IC = down ? m->F : m->C;
	*OC = down ? m->C : 2 * m->F;
	moe_block_rows(m, t, s->fp8->blk_rows);
	return stage_fp8_state(s, m->fp8_layer, down ? FP8_DOWN : FP8_UP);
}

static int experts_fwd(void *ctx, const moe_layer *m, const moe_acts *t, bool down, pp_act *out,
		       const pp_act *in, pp_err *e)
{
	const pp_stage *s = ctx;
	stage_fp8 *f = s->fp8;
	const pp_ops *o = s->ops;
	int IC, OC, step;
	const int k = expert_product(s, m, t, down, &IC, &OC), P = moe_sources(m);
	const int *rows = f->blk_rows;
	const pp_act *wq;
	const float *sw, *sx;
	int rc = expert_weights(s, m, k, down, &wq, &sw, e);
	if (rc || (rc = source_scales(s, m, k + FP8_X, in, (size_t)IC, &sx, &step, e)))
		return rc;
	size_t at = 0;
	for (int b = 0; b < m->n_local * P; at += (size_t)rows[b], b++) {
		if (!rows[b])
			continue;
		const float *sxp = sx + step * (b % P);
		pp_act *xq = pp_act_at(o, f->xq, at * IC);
		fp8_cast_as(s, k + FP8_X, xq, pp_act_at(o, in, at * IC), (size_t)rows[b] * IC, sxp,
			    true);
		pp_fp8_matmul_fwd(o, pp_act_at(o, out, at * OC), xq,
				  pp_act_at(o, wq, (size_t)(b / P) * m->stride), sxp, sw, rows[b],
				  IC, OC);
	}
	return 0;
}

static int experts_bwd(void *ctx, const moe_layer *m, const moe_acts *t, bool down, pp_act *din,
		       bool wgrad, const pp_act *dout, const pp_act *in, pp_err *e)
{
	const pp_stage *s = ctx;
	stage_fp8 *f = s->fp8;
	const pp_ops *o = s->ops;
	int IC, OC, gstep, xstep;
	const int k = expert_product(s, m, t, down, &IC, &OC), P = moe_sources(m),
		  nb = m->n_local * P;
	const int *rows = f->blk_rows;
	const pp_act *wq;
	const float *sg, *sw, *sx;
	int rc = source_scales(s, m, k + FP8_G, dout, (size_t)OC, &sg, &gstep, e);
	if (rc || (din && (rc = expert_weights(s, m, k, down, &wq, &sw, e))) ||
	    (wgrad && (rc = source_scales(s, m, k + FP8_X, in, (size_t)IC, &sx, &xstep, e))))
		return rc;
	size_t at = 0;
	for (int b = 0; b < nb; at += (size_t)rows[b], b++) {
		if (!rows[b])
			continue;
		const int r = rows[b], j = b / P;
		const float *sgp = sg + gstep * (b % P);
		pp_act *gq = pp_act_at(o, f->gq, at * OC);
		/* a split backward's weight part casts the gradient again: one record */
		fp8_cast_as(s, k + FP8_G, gq, pp_act_at(o, dout, at * OC), (size_t)r * OC, sgp,
			    din != NULL);
		if (din)
			pp_fp8_matmul_dgrad(o, pp_act_at(o, din, at * IC), gq,
					    pp_act_at(o, wq, (size_t)j * m->stride), sgp, sw, r, IC,
					    OC);
		if (wgrad) {
			/* the forward's cast of the input, again (its record stands) */
			const float *sxp = sx + xstep * (b % P);
			pp_act *xq = pp_act_at(o, f->xq, at * IC);
			fp8_cast_as(s, k + FP8_X, xq, pp_act_at(o, in, at * IC), (size_t)r * IC,
				    sxp, false);
			pp_fp8_matmul_wgrad(o, moe_weight_grad(m, j, down), f->dw, gq, xq, sgp, sxp,
					    r, IC, OC);
		}
	}
	return 0;
}

const moe_products fp8_moe_products = {experts_fwd, experts_bwd};
