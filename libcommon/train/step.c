/* One optimizer step: the data, the pipeline's passes, the gradient
 * exchanges, the norm, AdamW; and evaluation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/rng.h"
#include "../ckpt/stage.h"
#include "../config/hparams.h"
#include "internal.h"
#include "watchdog.h"

/* Reads this dp rank's n sequences of the step (every pp rank reads the
 * same ones: the first stage needs the tokens, the last the targets, all
 * of them the positions of packed documents, pos, NULL without packing). */
static int read_batch(pp_data *d, int n, int T, int *tok, int *tgt, int *pos, long *valid,
		      pp_err *e)
{
	int rc = data_next(d, n, T, tok, tgt, pos, e);
	*valid = 0;
	for (size_t i = 0; !rc && i < (size_t)n * T; i++)
		*valid += tgt[i] >= 0;
	return rc;
}

/* Sums a loss over the pipeline's last stages and the dp ranks. */
static int total_loss(trainer *t, double *sum, long *valid, pp_err *e)
{
	double v[2] = {*sum, (double)*valid};
	int rc = sum_over(t->mesh.pp_comm, v, 2, PP_DT_F64, PP_OP_SUM,
			  e); /* the last stages count */
	if (!rc)
		rc = sum_over(t->mesh.data_comm, v, 2, PP_DT_F64, PP_OP_SUM, e);
	*sum = v[0];
	*valid = (long)v[1];
	return rc;
}

int trainer_eval(trainer *t, double *loss, pp_err *e)
{
	const pp_config *c = t->cfg;
	const size_t N = (size_t)c->microbatch * c->seq_len;
	int *tok = malloc(N * c->eval_batches * sizeof(int)),
	    *tgt = malloc(N * c->eval_batches * sizeof(int)),
	    *pos = c->packing ? malloc(N * c->eval_batches * sizeof(int)) : NULL;
	double sum = 0;
	long valid = 0, read_valid;
	data_rewind(t->val);
	int rc = read_batch(t->val, c->microbatch * c->eval_batches, c->seq_len, tok, tgt, pos,
			    &read_valid, e);
	if (!rc)
		rc = pipeline_eval(&t->pl, c->eval_batches, &(pipeline_batch){tok, tgt, pos, NULL},
				   &sum, &valid, e);
	if (!rc)
		rc = total_loss(t, &sum, &valid, e);
	free(tok);
	free(tgt);
	free(pos);
	*loss = valid ? sum / (double)valid : NAN;
	return rc;
}

/* Each element of the model counted once across ranks: as it is saved. */
static bool counts_once(const pp_stage *st, const pp_param *p) { return ckpt_rank_saves(st, p); }

/* The stage hook during a chunk's last backward pass of the step: g[from,
 * n) is final. Its shared kv heads are summed over tp first (the same
 * tensors on every tp rank, in the same order), then the buckets go. */
int train_grads_final(void *ctx, pp_stage *s, size_t from, pp_err *e)
{
	trainer *t = ctx;
	size_t upto = t->sync.chunks[s - t->chunks].ready;
	int rc = from < upto ? stage_reduce_replica_grads(s, from, upto, e) : 0;
	return rc ? rc : gradsync_ready(&t->sync, s, from, e);
}

/* Gradient exchanges after the last backward of a step: kv heads shared in
 * tp, the tied embedding between the first and last stage, then the sum
 * over dp (all of it, or each rank's ZeRO-1 shard), of which the buckets
 * that became final during the backward are already under way. */
static int sync_grads(trainer *t, pp_err *e)
{
	const pp_layout *me = &t->lay;
	const int v = me->v;
	int rc = 0;
	/* what train_grads_final has not seen (under fsdp: once summed into the shares) */
	for (int k = 0; k < v && !rc && !fsdp_on(t); k++)
		rc = stage_reduce_replica_grads(&t->chunks[k], 0, t->sync.chunks[k].ready, e);
	if (!rc && t->cfg->model.tied_embeddings && (me->pp > 1 || v > 1) &&
	    t->cfg->lora.rank == 0) { /* (under LoRA the embedding is frozen) */
		/* chunk 0 of pp rank 0 and the last chunk of the last pp rank hold
		 * it, as their first tensor: in g, or under fsdp in the buffers
		 * of their first unit's whole gradients */
		pp_real *first = fsdp_on(t) ? fsdp_held_grad(&t->fsdp, 0, 0) : t->chunks[0].g;
		pp_real *last = fsdp_on(t) ? fsdp_held_grad(&t->fsdp, v - 1, 0)
					   : t->chunks[v - 1].g;
		const pp_stage *mine = &t->chunks[me->pp_rank == 0 ? 0 : v - 1];
		const size_t n = mine->params[0].n;
		if (me->pp == 1) {
			t->ops->add_real(first, first, last, n);
			t->ops->to_device(last, first, n * sizeof(pp_real));
		} else if (t->mesh.tied_comm) {
			rc = comm_allreduce(t->mesh.tied_comm, me->pp_rank == 0 ? first : last, n,
					    PP_DT_REAL, PP_OP_SUM, e);
		}
	}
	if (rc)
		return rc;
	if (!fsdp_on(t))
		return gradsync_finish(&t->sync, e);
	rc = fsdp_finish(&t->fsdp, e);
	for (int k = 0; k < v && !rc; k++)
		rc = stage_reduce_replica_grads(&t->chunks[k], 0, t->chunks[k].n_elems, e);
	return rc;
}

/* Global gradient norm: each element counted once across the mesh. */
static int grad_norm(trainer *t, double *norm, pp_err *e)
{
	const pp_layout *me = &t->lay;
	/* a region replicated over its group counts on the group's rank 0 (dp
	 * rank 0; for the experts, every rank of the first ep group); sharded,
	 * each rank counts its share */
	const bool first[OPTIM_REGIONS] = {me->data_rank == 0, me->data_rank < me->ep};
	/* under fsdp the first fsdp group's shares (the others hold the same) */
	const bool sharded = zero1(t) || (fsdp_on(t) && me->data_rank < me->fsdp);
	double sum = 0;
	for (int k = 0; k < me->v; k++)
		for (int i = 0; i < OPTIM_REGIONS; i++)
			if (sharded || first[i])
				sum += optim_grad_sumsq(&t->chunks[k], t->opt[k].r.lo[i],
							t->opt[k].r.hi[i], counts_once);
	int rc = sum_over(t->mesh.world_comm, &sum, 1, PP_DT_F64, PP_OP_SUM, e);
	*norm = sqrt(sum);
	return rc;
}

/* After a ZeRO-1 update each rank holds fresh values of its shares only:
 * each region's shares are gathered over the group that shares them. */
static int gather_params(trainer *t, pp_err *e)
{
	const pp_layout *me = &t->lay;
	if (!zero1(t))
		return 0;
	pp_comm *comm[OPTIM_REGIONS] = {t->mesh.data_comm, t->mesh.edp_comm};
	for (int k = 0; k < me->v; k++) {
		pp_stage *st = &t->chunks[k];
		const optim_state *o = &t->opt[k];
		const size_t base[OPTIM_REGIONS] = {0, st->n_shared};
		const size_t end[OPTIM_REGIONS] = {st->n_shared, st->n_elems};
		for (int i = 0; i < OPTIM_REGIONS; i++) {
			if (!comm[i] || end[i] == base[i])
				continue;
			const size_t lo = o->r.lo[i], hi = o->r.hi[i], n = end[i] - base[i];
			const size_t share = layout_share_len(n, comm[i]->size);
			pp_real *all = t->gather, *mine = all + share * (size_t)comm[i]->size;
			t->ops->to_device(mine, st->w + lo, (hi - lo) * sizeof(pp_real));
			int rc = comm_all_gather(comm[i], mine, all, share, PP_DT_REAL, e);
			if (rc)
				return rc;
			/* the other ranks' shares, in the master weights and the
			 * compute copy (AdamW wrote both for this rank's own) */
			t->ops->to_device(st->w + base[i], all, (lo - base[i]) * sizeof(pp_real));
			t->ops->to_device(st->w + hi, all + (hi - base[i]),
					  (end[i] - hi) * sizeof(pp_real));
			stage_weights_range_changed(st, base[i], lo);
			stage_weights_range_changed(st, hi, end[i]);
		}
	}
	return 0;
}

/* One optimizer step over every microbatch of the global batch. */

/* The MoE layers' losses of the step, as Megatron logs them: the mean over
 * MoE layers and the step's microbatches (the objective adds each layer's,
 * times its coefficient); and the fraction of assignments dropped
 * (capacity routing). Counted on tp rank 0 (every tp rank routes alike),
 * summed over pp and dp. */
static int moe_totals(trainer *t, step_result *r, pp_err *e)
{
	const pp_layout *me = &t->lay;
	double v[4] = {0, 0, 0, 0};
	for (int k = 0; me->tp_rank == 0 && k < me->v; k++) {
		const pp_stage *st = &t->chunks[k];
		v[0] += st->moe.aux, v[1] += st->moe.z;
		v[2] += (double)st->moe.dropped, v[3] += (double)st->moe.routed;
	}
	int rc = sum_over(t->mesh.world_comm, v, 4, PP_DT_F64, PP_OP_SUM, e);
	const int layers = hparams_moe_layers(&t->cfg->model, 0, t->cfg->model.n_layers);
	const double mbs = (double)t->cfg->microbatches * me->data * (layers ? layers : 1);
	r->moe_aux = v[0] / mbs;
	r->moe_z = v[1] / mbs;
	r->moe_dropped = v[3] > 0 ? v[2] / v[3] : 0;
	return rc;
}

/* The draws of the next step's microbatches (LoRA's dropout), NULL when it
 * makes none: a key of the seed and the step, and each microbatch's first
 * row among the step's, as the single process numbers them. */
static const stage_noise *step_noise(trainer *t)
{
	const pp_config *c = t->cfg;
	if (!t->noise)
		return NULL;
	const uint64_t key = rng_mix(rng_key(c->seed, "lora.dropout") ^ (uint64_t)(t->step + 1));
	for (int mb = 0; mb < c->microbatches; mb++)
		t->noise[mb] = (stage_noise){
			key | 1, /* never 0, which means none */
			layout_seq_index(&t->lay.seqs, (uint64_t)mb * c->microbatch) * c->seq_len};
	return t->noise;
}

/* FP8: the step's amax of each tensor, the max over the ranks that hold a
 * part of it (tp) or see other sequences of the step (the data ranks), so
 * that every layout scales as one process; delayed scaling's histories
 * take them. And the fractions of the values cast that saturated or
 * flushed to zero, over every rank. */
static int fp8_totals(trainer *t, step_result *r, pp_err *e)
{
	int n = 0, rc = 0;
	for (int k = 0; k < t->lay.v; k++)
		n += stage_fp8_count(&t->chunks[k]);
	float *amax = calloc((size_t)n + 1, sizeof *amax);
	double counts[3] = {0}, c3[3];
	if (!amax)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int k = 0, at = 0; k < t->lay.v; at += stage_fp8_count(&t->chunks[k]), k++) {
		stage_fp8_step_stats(&t->chunks[k], amax + at, c3);
		for (int i = 0; i < 3; i++)
			counts[i] += c3[i];
	}
	if (!(rc = sum_over(t->mesh.tp_comm, amax, (size_t)n, PP_DT_F32, PP_OP_MAX, e)) &&
	    !(rc = sum_over(t->mesh.data_comm, amax, (size_t)n, PP_DT_F32, PP_OP_MAX, e)))
		rc = sum_over(t->mesh.world_comm, counts, 3, PP_DT_F64, PP_OP_SUM, e);
	for (int k = 0, at = 0; !rc && k < t->lay.v; at += stage_fp8_count(&t->chunks[k]), k++)
		stage_fp8_update(&t->chunks[k], amax + at);
	r->fp8_saturated = counts[0] > 0 ? counts[1] / counts[0] : 0;
	r->fp8_flushed = counts[0] > 0 ? counts[2] / counts[0] : 0;
	free(amax);
	return rc;
}

int train_step(trainer *t, int *tok, int *tgt, step_result *r, pp_err *e)
{
	const pp_config *c = t->cfg;
	const int n = c->microbatches * c->microbatch;
	long valid;
	if (c->debug.hang_step == t->step + 1 && t->lay.rank == t->lay.world - 1)
		debug_hang(t->step + 1);
	prof_span data = prof_begin(t->prof, PROF_DATA);
	int rc = read_batch(t->train, n, c->seq_len, tok, tgt, t->pos, &valid, e);
	prof_end(t->prof, &data, -1, -1, -1, (int64_t)n * c->seq_len * 2 * (int64_t)sizeof(int));
	double v = (double)valid;
	if (!rc)
		rc = sum_over(t->mesh.data_comm, &v, 1, PP_DT_F64, PP_OP_SUM, e);
	if (rc)
		return rc;
	if (v == 0)
		return pp_errorf(e, PP_ERUNTIME, "step %ld: the batch has no target tokens",
				 t->step + 1);
	/* dscale = 1/valid makes the summed gradients those of the mean loss */
	pp_real dscale = (pp_real)(1.0 / v);
	double sum = 0;
	long dummy = 0;
	for (int k = 0; k < t->lay.v; k++) {
		stage_zero_grad(&t->chunks[k]);
		memset(&t->chunks[k].moe, 0, sizeof t->chunks[k].moe);
		stage_fp8_begin_step(&t->chunks[k]);
	}
	if ((rc = pipeline_train(&t->pl, &(pipeline_batch){tok, tgt, t->pos, step_noise(t)}, dscale,
				 &sum, e)))
		return rc;
	prof_span sp = prof_begin(t->prof, PROF_GRAD_SYNC);
	rc = sync_grads(t, e);
	prof_end(t->prof, &sp, -1, -1, -1, 0);
	sp = prof_begin(t->prof, PROF_GRAD_NORM);
	if (!rc)
		rc = grad_norm(t, &r->gnorm, e);
	prof_end(t->prof, &sp, -1, -1, -1, 0);
	sp = prof_begin(t->prof, PROF_LOSS_REDUCE);
	if (!rc)
		rc = total_loss(t, &sum, &dummy, e);
	if (!rc && c->model.n_experts > 0)
		rc = moe_totals(t, r, e);
	if (!rc && c->fp8.recipe != PP_FP8_NONE)
		rc = fp8_totals(t, r, e);
	prof_end(t->prof, &sp, -1, -1, -1, 0);
	if (rc)
		return rc;
	r->loss = sum / v;
	r->lr = optim_lr(c, t->step);
	r->skipped = !isfinite(r->loss) || !isfinite(r->gnorm);
	if (r->skipped && c->nan_policy != PP_NAN_SKIP)
		return pp_errorf(e, PP_ERUNTIME,
				 "step %ld: %s is %g (loss %g, gradient norm %g); stopping "
				 "(nan_policy=skip skips such steps)",
				 t->step + 1, isfinite(r->loss) ? "gradient norm" : "loss",
				 isfinite(r->loss) ? r->gnorm : r->loss, r->loss, r->gnorm);
	if (!r->skipped) {
		prof_span opt = prof_begin(t->prof, PROF_OPTIMIZER);
		for (int k = 0; k < t->lay.v; k++) {
			optim_step(&t->opt[k], &t->chunks[k], c, t->step + 1, r->lr,
				   optim_clip_scale(c, r->gnorm));
			stage_fp8_weights_changed(&t->chunks[k]);
		}
		prof_end(t->prof, &opt, -1, -1, -1, 0);
		if (fsdp_on(t))
			fsdp_params_changed(&t->fsdp);
		prof_span gather = prof_begin(t->prof, PROF_PARAM_GATHER);
		rc = gather_params(t, e);
		prof_end(t->prof, &gather, -1, -1, -1, 0);
		if (rc)
			return rc;
	}
	t->step++;
	return 0;
}
