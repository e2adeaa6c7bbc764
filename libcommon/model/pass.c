/* A microbatch through the stage: the embedding, the layers, the final norm,
 * the head and the loss (chunked, vocabulary-parallel), and the backward
 * pass that reports gradients as they become final. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* Token ids of this rank's vocabulary shard: id - vocab_begin inside it,
 * PP_IGNORE_INDEX kept, anything else -1 (held by another shard). */
static void to_shard(const pp_stage *s, int *dst, const int *src, int N)
{
	for (int i = 0; i < N; i++) {
		int v = src[i] - s->vocab_begin;
		dst[i] = src[i] == PP_IGNORE_INDEX ? PP_IGNORE_INDEX
			 : v >= 0 && v < s->vocab  ? v
						   : -1;
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
	const bool fp8 = s->fp8 && s->spec.fp8.head;
	int rc = fp8 ? fp8_head_begin(s, a->hf, N, dscale, e) : 0;
	for (int r0 = 0; r0 < N && !rc; r0 += a->loss_rows) {
		const int R = N - r0 < a->loss_rows ? N - r0 : a->loss_rows;
		const pp_act *h = pp_act_at(o, a->hf, (size_t)r0 * C);
		pp_act *logits = s->spec.keep_logits ? pp_act_at(o, sa->logits, (size_t)r0 * V)
						     : a->logits;
		if (fp8)
			rc = fp8_linear_fwd(s, -1, 0, logits, h, a->head_w, R, C, V, e);
		else
			o->matmul_fwd(logits, h, W(s, a->head_w), NULL, R, C, V);
		if (!rc)
			rc = chunk_loss(s, logits, sa->tgt + r0, a->losses + r0, R, dscale, e);
		if (rc)
			break;
		pp_act *dh = dscale != 0 ? pp_act_at(o, sa->dhf, (size_t)r0 * C) : NULL;
		if (dscale != 0 && fp8)
			rc = fp8_linear_bwd(s, -1, 0, dh, G(s, a->head_w), logits, h, a->head_w, R,
					    C, V, e);
		else if (dscale != 0)
			o->matmul_bwd(dh, G(s, a->head_w), NULL, logits, h, W(s, a->head_w), R, C,
				      V);
	}
	if (fp8)
		fp8_head_end(s);
	return rc;
}

int stage_set_positions(pp_stage *s, int slot, const int *pos, pp_err *e)
{
	slot_acts *sa = &s->acts->slot[slot];
	sa->has_pos = pos != NULL;
	if (pos && !sa->pos)
		return pp_errorf(e, PP_EUSAGE, "packed documents in a stage built for inference");
	if (pos)
		s->ops->to_device(sa->pos, pos, (size_t)s->B * s->T * sizeof(int));
	return 0;
}

void stage_set_noise(pp_stage *s, int slot, stage_noise noise)
{
	s->acts->slot[slot].noise = s->spec.lora.dropout > 0 ? noise : (stage_noise){0, 0};
}

int stage_forward(pp_stage *s, int slot, const int *tokens, const pp_act *in, const int *targets,
		  pp_real dscale, double *loss_sum, long *n_valid, pp_act **out, pp_err *e)
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
				return pp_errorf(
					e, PP_ERUNTIME,
					"token %d at position %d is outside the vocabulary [0, %d)",
					tokens[i], i, V);
		to_shard(s, a->host_ids, tokens, N);
		o->to_device(sa->tok, a->host_ids, (size_t)N * sizeof(int));
		if ((rc = unit_use(s, 0, L > 0 ? 1 : tail, false, e)))
			return rc;
		pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
		o->embed_fwd(sa->res, sa->tok, W(s, a->embed_w), W0(s, a->embed_pos), scale, B, T,
			     C, NULL);
		if ((rc = tp_sum(s, sa->res, (size_t)N * C, e)))
			return rc;
	} else {
		o->to_device(sa->res, in, (size_t)N * C * pp_act_size(o)); /* same device: a copy */
	}
	moe_losses moe = {0};
	for (int l = 0; l < L; l++) {
		layer_acts t = layer_view(s, sa, l);
		if ((rc = unit_use(s, 1 + l,
				   l + 1 < L ? 2 + l
				   : s->last ? tail
					     : -1,
				   false, e)) ||
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
		return pp_errorf(e, PP_EUSAGE,
				 "training forward on a stage built for inference only");
	long valid = 0;
	for (int i = 0; i < N; i++) {
		if (targets[i] >= V || (targets[i] < 0 && targets[i] != PP_IGNORE_INDEX))
			return pp_errorf(
				e, PP_ERUNTIME,
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
	layer_norm_fwd(s, N, a->hf, sa->meanf, sa->rstdf, x, a->normf_w, a->normf_b);
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
			return pp_errorf(
				e, PP_ERUNTIME,
				"weight-gradient pass of slot %d before its input-gradient pass",
				slot);
		/* the head's weight gradient came in the forward; the final norm's
		 * in the input part: the buffer's end is final first */
		if ((rc = grads_final(s, report, stage_tail_from(s), e)))
			return rc;
		for (int l = L - 1; l >= 0; l--) {
			layer_acts t = layer_view(s, sa, l);
			if ((rc = unit_use(s, 1 + l, l > 0 ? l : -1, true, e)))
				return rc;
			layer_backward(s, &a->layer[l], &t, part, e);
			if ((rc = unit_done(s, 1 + l, e)) ||
			    (rc = grads_final(s, report, stage_layer_from(s, l), e)))
				return rc;
		}
		sa->has_input_grad = 0;
		return grads_final(s, report, 0, e);
	}
	if (s->last) {
		if (!sa->has_grad)
			return pp_errorf(
				e, PP_ERUNTIME,
				"backward of microbatch slot %d without a training forward", slot);
		pp_act *x = pp_act_at(o, sa->res, (size_t)L * NC);
		o->zero(a->d_res, NC * pp_act_size(o));
		if ((rc = tp_sum(s, sa->dhf, NC, e)) || (rc = unit_use(s, tail,
								       L > 0      ? L
								       : s->first ? 0
										  : -1,
								       true, e)))
			return rc;
		layer_norm_bwd(s, a->d_res, sa->dhf, x, sa->meanf, sa->rstdf, a->normf_w,
			       a->normf_b);
		sa->has_grad = 0;
		if ((rc = unit_done(s, tail, e)))
			return rc;
	} else {
		o->to_device(a->d_res, dout, NC * pp_act_size(o));
	}
	if ((rc = grads_final(s, report, stage_tail_from(s), e)))
		return rc;
	for (int l = L - 1; l >= 0; l--) {
		layer_acts t = layer_view(s, sa, l);
		if ((rc = unit_use(s, 1 + l,
				   l > 0      ? l
				   : s->first ? 0
					      : -1,
				   true, e)) ||
		    (rc = layer_rebuild(s, &a->layer[l], &t, e)))
			return rc;
		if ((rc = layer_backward(s, &a->layer[l], &t, part, e)) ||
		    (rc = unit_done(s, 1 + l, e)) ||
		    (rc = grads_final(s, report, stage_layer_from(s, l), e)))
			return rc;
	}
	if (s->first) {
		pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
		if ((rc = unit_use(s, 0, -1, true, e)))
			return rc;
		if (G(s, a->embed_w)) /* not a frozen base's */
			o->embed_bwd(G(s, a->embed_w), G(s, a->embed_pos), a->d_res, sa->tok, scale,
				     B, T, C, NULL);
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
		if (!p->grad_partial || p->frozen || p->off < lo || p->off >= hi)
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
