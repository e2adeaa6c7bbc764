/* A stage's lifetime: its spec, its description (parameter table, shares),
 * the allocation of its buffers by sizes.c's counts, seeded initialisation
 * and release. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/rng.h"
#include "../config/hparams.h"
#include "internal.h"
#include "kvcache.h"

int64_t stage_loss_rows(int64_t N, int64_t V, int64_t elem, double mb)
{
	double rows = floor((mb > 0 ? mb : PP_LOSS_CHUNK_MB) * 1048576.0 /
			    ((double)V * (double)elem));
	if (rows >= (double)N)
		return N;
	/* whole tiles of 128 rows for the GPU's matrix products, where they fit */
	return rows < 1 ? 1 : rows < 128 ? (int64_t)rows : (int64_t)rows / 128 * 128;
}

unsigned stage_saved_acts(int recompute)
{
	const unsigned products = PP_SAVE_QKV | PP_SAVE_MID | PP_SAVE_UP | PP_SAVE_MOE;
	switch (recompute) {
	case PP_RECOMPUTE_FULL:
		return 0;
	case PP_RECOMPUTE_MINIMAL:
		return products;
	case PP_RECOMPUTE_MINIMAL_FLASH:
		return products | PP_SAVE_ATT;
	default:
		return PP_SAVE_ALL;
	}
}

stage_spec stage_spec_whole(const pp_model_cfg *cfg, int B, int T, int recompute)
{
	return (stage_spec){.layer_begin = 0,
			    .layer_end = cfg->n_layers,
			    .B = B,
			    .T = T,
			    .n_slots = 1,
			    .recompute = recompute,
			    .tp = {.rank = 0, .size = 1}};
}

stage_spec stage_spec_of(const pp_config *c, const pp_layout *l, int k)
{
	stage_spec sp = stage_spec_whole(&c->model, l->microbatch, l->seq_len, c->recompute);
	sp.layer_begin = l->chunk[k].layer_begin;
	sp.layer_end = l->chunk[k].layer_end;
	sp.n_slots = l->chunk[k].slots;
	sp.split_backward = l->split_backward;
	sp.loss_chunk_mb = c->loss_chunk_mb;
	sp.tp = (pp_tp){.rank = l->tp_rank, .size = l->tp};
	sp.ep.rank = l->ep_rank;
	sp.ep.size = l->ep;
	stage_spec_set_lora(&sp, c);
	stage_spec_set_fp8(&sp, c);
	return sp;
}

void stage_spec_set_fp8(stage_spec *spec, const pp_config *c)
{
	spec->fp8.recipe = c->fp8.recipe;
	spec->fp8.history = c->fp8.amax_history;
	spec->fp8.margin = c->fp8.margin;
	spec->fp8.head = c->fp8.head;
}

void stage_spec_set_lora(stage_spec *spec, const pp_config *c)
{
	unsigned targets = 0;
	pp_err ignored;
	spec->lora.rank = c->lora.rank > 0 && !hparams_lora_targets(c, &targets, &ignored)
				  ? c->lora.rank
				  : 0;
	spec->lora.targets = spec->lora.rank ? targets : 0;
	spec->lora.scale = spec->lora.rank ? hparams_lora_scale(c) : 0;
	spec->lora.dropout = spec->lora.rank ? c->lora.dropout : 0;
}

/* This rank's share of heads and widths (layout.h decides it). */
static int shard_dims(pp_stage *s, pp_err *e)
{
	layout_tp t;
	int rc = layout_tp_share(s->cfg, s->spec.tp.size, s->spec.tp.rank, &t, e);
	if (rc)
		return rc;
	s->n_heads = t.n_heads;
	s->n_kv_heads = t.n_kv_heads;
	s->kv_replicas = t.kv_replicas;
	s->kv_block = t.kv_block;
	s->d_ff = t.d_ff;
	s->vocab = t.vocab;
	s->vocab_begin = t.vocab_begin;
	return 0;
}

int stage_describe(pp_stage *s, const pp_model_cfg *cfg, const stage_spec *spec, pp_err *e)
{
	memset(s, 0, sizeof *s);
	int rc = hparams_check(cfg, e);
	if (rc)
		return rc;
	const int ep = spec->ep.size > 0 ? spec->ep.size : 1;
	if (cfg->n_experts > 0 && (cfg->n_experts % ep || spec->ep.rank < 0 || spec->ep.rank >= ep))
		return pp_errorf(e, PP_EUSAGE, "ep %d does not divide model.n_experts %d", ep,
				 cfg->n_experts);
	if (spec->recompute < PP_RECOMPUTE_NONE || spec->recompute > PP_RECOMPUTE_MINIMAL_FLASH)
		return pp_errorf(e, PP_EUSAGE, "recompute policy %d: expected a PP_RECOMPUTE_*",
				 spec->recompute);
	if (spec->recompute != PP_RECOMPUTE_NONE &&
	    spec->split_backward) /* layout_check_recompute */
		return pp_errorf(e, PP_EUSAGE, "recompute=%s with a split backward pass",
				 pp_recompute_name(spec->recompute));
	s->cfg = cfg;
	s->spec = *spec;
	if (s->spec.ep.size < 1)
		s->spec.ep.size = 1;
	s->layer_begin = spec->layer_begin;
	s->layer_end = spec->layer_end;
	s->first = spec->layer_begin == 0;
	s->last = spec->layer_end == cfg->n_layers;
	s->B = spec->B;
	s->T = spec->T;
	s->n_slots = spec->n_slots;
	s->recompute = spec->recompute;
	s->saved = stage_saved_acts(spec->recompute);
	if ((rc = shard_dims(s, e)))
		return rc;
	s->acts = calloc(1, sizeof *s->acts);
	if (!s->acts)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	stage_build_table(s, s->acts);
	return stage_describe_units(s, e);
}

/* Allocates sa's per-layer activations of the kinds in which (PP_SAVE_*): a
 * copy for each layer needing one, or with one a single copy, for the
 * stage's rebuilt set. -1 when out of memory (what was allocated stays, for
 * stage_free). */
static int alloc_layer_acts(pp_stage *s, slot_acts *sa, const layer_counts *c)
{
	const pp_ops *ops = s->ops;
	pp_act **p[LA_NACT] = {
		[LA_H1] = &sa->h1, [LA_QKV] = &sa->qkv, [LA_ATT] = &sa->att, [LA_MID] = &sa->mid,
		[LA_H2] = &sa->h2, [LA_UP] = &sa->up,   [LA_ACT] = &sa->act};
	pp_real **r[LR_NREAL] = {[LR_MEAN1] = &sa->mean1,
				 [LR_RSTD1] = &sa->rstd1,
				 [LR_LSE] = &sa->lse,
				 [LR_MEAN2] = &sa->mean2,
				 [LR_RSTD2] = &sa->rstd2};
	if (alloc_acts(ops, p, c->act, LA_NACT) || alloc_reals(ops, r, c->real, LR_NREAL))
		return -1;
	sa->n_moe = c->n_moe;
	if (sa->n_moe && !(sa->moe = calloc((size_t)sa->n_moe, sizeof *sa->moe)))
		return -1;
	for (int j = 0; j < sa->n_moe; j++) {
		moe_layer ml = stage_moe_dims(s);
		if (moe_acts_alloc(&sa->moe[j], &ml, s->B * s->T, s->spec.split_backward, NULL))
			return -1;
	}
	return 0;
}

/* Everything stage_create allocates, by sizes.c's counts. */
static int alloc_buffers(pp_stage *s)
{
	const pp_ops *ops = s->ops;
	pp_stage_acts *a = s->acts;
	const stage_spec *spec = &s->spec;
	const size_t N = (size_t)s->B * s->T;
	/* under FSDP this rank's shard, and the units' pointers its owner sets */
	const size_t held = s->w_hi - s->w_lo;
	s->w = ops->alloc(held * sizeof(pp_real));
	s->g = spec->no_grad ? NULL : ops->alloc(held * sizeof(pp_real));
	if (s->n_base) {
		/* the frozen base, and the sink of its vectors' gradients */
		size_t most = 0;
		for (int i = 0; i < s->n_params; i++)
			if (s->params[i].frozen && s->params[i].ndim == 1 && s->params[i].n > most)
				most = s->params[i].n;
		s->base = ops->alloc(s->n_base * pp_act_size(ops));
		s->sink = ops->alloc((most ? most : 1) * sizeof(pp_real));
		if (!s->base || !s->sink)
			return -1;
	}
	s->wc = ops->act_type == PP_TYPE_REAL ? (pp_act *)s->w
					      : ops->alloc(held * pp_act_size(ops));
	if (held && (!s->w || !s->wc || (!s->g && !spec->no_grad)))
		return -1;
	if (spec->units.use && (!(s->unit_w = calloc((size_t)s->n_units, sizeof *s->unit_w)) ||
				!(s->unit_g = calloc((size_t)s->n_units, sizeof *s->unit_g))))
		return -1;
	a->loss_rows = stage_loss_rows_of(s, pp_act_size(ops));
	scratch_counts xc;
	stage_scratch_counts(s, pp_act_size(ops), &xc);
	pp_act **scratch[SC_NACT] = {
		[SC_D_RES] = &a->d_res,   [SC_D_H] = &a->d_h,       [SC_D_ATT] = &a->d_att,
		[SC_D_QKV] = &a->d_qkv,   [SC_D_UP] = &a->d_up,     [SC_D_ACT] = &a->d_act,
		[SC_HF] = &a->hf,         [SC_LOGITS] = &a->logits, [SC_LORA_U] = &a->lora.u,
		[SC_LORA_Z] = &a->lora.z, [SC_LORA_Y] = &a->lora.y, [SC_LORA_X] = &a->lora.x};
	pp_real **scratch_r[SCR_NREAL] = {
		[SCR_CE] = &a->ce, [SCR_LOSSES] = &a->losses, [SCR_REPLICA] = &a->replica};
	if (alloc_acts(ops, scratch, xc.act, SC_NACT) ||
	    alloc_reals(ops, scratch_r, xc.real, SCR_NREAL))
		return -1;
	if (xc.ints[SCI_BUCKET]) {
		/* the relative biases' bucket of every distance the stage can meet */
		const size_t n = xc.ints[SCI_BUCKET];
		int *host = malloc(n * sizeof(int));
		a->bucket = ops->alloc(n * sizeof(int));
		if (!host || !a->bucket) {
			free(host);
			return -1;
		}
		for (size_t d = 0; d < n; d++)
			host[d] = hparams_relative_bucket(s->cfg, (int)d);
		ops->to_device(a->bucket, host, n * sizeof(int));
		free(host);
	}
	a->host = calloc(3 * N, sizeof(double));
	a->host_real = calloc(2 * N, sizeof(pp_real));
	a->host_ids = calloc(N, sizeof(int));
	a->slot = calloc((size_t)s->n_slots, sizeof *a->slot);
	if (!a->host || !a->host_real || !a->host_ids || !a->slot)
		return -1;
	slot_counts sc;
	stage_slot_counts(s, &sc);
	for (int k = 0; k < s->n_slots; k++) {
		slot_acts *sa = &a->slot[k];
		pp_act **p[SA_NACT] = {
			[SA_RES] = &sa->res,     [SA_DHF] = &sa->dhf,   [SA_LOGITS] = &sa->logits,
			[SA_G_OUT] = &sa->g_out, [SA_G_UP] = &sa->g_up, [SA_G_MID] = &sa->g_mid,
			[SA_G_QKV] = &sa->g_qkv};
		pp_real **r[SR_NREAL] = {[SR_MEANF] = &sa->meanf, [SR_RSTDF] = &sa->rstdf};
		if (alloc_acts(ops, p, sc.act, SA_NACT) || alloc_reals(ops, r, sc.real, SR_NREAL) ||
		    alloc_layer_acts(s, sa, &sc.kept))
			return -1;
		sa->tok = ops->alloc(sc.ints[SI_TOK] * sizeof(int));
		sa->tgt = ops->alloc(sc.ints[SI_TGT] * sizeof(int));
		sa->pos = sc.ints[SI_POS] ? ops->alloc(sc.ints[SI_POS] * sizeof(int)) : NULL;
		if (!sa->tok || !sa->tgt || (sc.ints[SI_POS] && !sa->pos))
			return -1;
	}
	if (alloc_layer_acts(s, &a->rebuilt, &xc.rebuilt))
		return -1;
	if (a->n_moe) {
		moe_layer ml = stage_moe_dims(s);
		if (moe_scratch_alloc(&a->moe_sc, &ml, (int)N, NULL))
			return -1;
	}
	return fp8_alloc(s);
}

int stage_create(pp_stage *s, const pp_model_cfg *cfg, const pp_ops *ops, const stage_spec *spec,
		 pp_err *e)
{
	int rc = stage_describe(s, cfg, spec, e);
	if (rc)
		return rc;
	s->ops = ops;
	if (!alloc_buffers(s))
		return 0;
	size_t n_elems = s->n_elems;
	stage_free(s);
	return pp_errorf(e, PP_ERUNTIME,
			 "out of memory building layers %d..%d (B=%d, T=%d, %zu parameters)",
			 spec->layer_begin, spec->layer_end - 1, spec->B, spec->T, n_elems);
}

static void free_slot_acts(const pp_ops *ops, slot_acts *sa)
{
	void *p[] = {sa->res,  sa->h1,    sa->mean1, sa->rstd1, sa->qkv,    sa->att,
		     sa->lse,  sa->mid,   sa->h2,    sa->mean2, sa->rstd2,  sa->up,
		     sa->act,  sa->meanf, sa->rstdf, sa->dhf,   sa->logits, sa->g_out,
		     sa->g_up, sa->g_mid, sa->g_qkv, sa->tok,   sa->tgt,    sa->pos};
	for (int i = 0; i < NELEMS(p); i++)
		ops->free(p[i]);
	for (int j = 0; sa->moe && j < sa->n_moe; j++)
		moe_acts_free(&sa->moe[j], ops);
	free(sa->moe);
}

void stage_free(pp_stage *s)
{
	pp_stage_acts *a = s->acts;
	const pp_ops *ops = s->ops;
	if (!ops) { /* described only (stage_describe), or never built */
		if (a)
			free(a->layer);
		free(a);
		free(s->params);
		free(s->unit_lo);
		free(s->param_unit);
		memset(s, 0, sizeof *s);
		return;
	}
	if (a) {
		for (int k = 0; a->slot && k < s->n_slots; k++)
			free_slot_acts(ops, &a->slot[k]);
		free_slot_acts(ops, &a->rebuilt);
		moe_scratch_free(&a->moe_sc, ops);
		void *p[] = {a->d_res,  a->d_h,    a->d_att,  a->d_qkv,  a->d_up,    a->d_act,
			     a->ce,     a->hf,     a->losses, a->logits, a->replica, a->bucket,
			     a->lora.u, a->lora.z, a->lora.y, a->lora.x};
		for (int i = 0; i < NELEMS(p); i++)
			ops->free(p[i]);
		free(a->slot);
		free(a->layer);
		free(a->host);
		free(a->host_real);
		free(a->host_ids);
		free(a);
	}
	stage_unpack_weights(s);
	fp8_free(s);
	if (s->wc != (pp_act *)s->w)
		ops->free(s->wc);
	ops->free(s->w);
	ops->free(s->g);
	ops->free(s->base);
	ops->free(s->sink);
	free(s->params);
	free(s->unit_lo);
	free(s->param_unit);
	free(s->unit_w);
	free(s->unit_g);
	memset(s, 0, sizeof *s);
}

void stage_init_params(pp_stage *s, uint64_t seed)
{
	pp_real *host = malloc((s->n_elems + s->n_base) * sizeof(pp_real));
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		uint64_t key = rng_key(seed, p->name);
		pp_real *x = host + p->off + (p->frozen ? s->n_elems : 0);
		if (p->init_bound > 0) {
#pragma omp parallel for
			for (size_t j = 0; j < p->n; j++)
				x[j] = (pp_real)(p->init_bound *
						 (2 * rng_uniform(key, param_global_index(p, j)) -
						  1));
		} else if (p->init_std > 0) {
#pragma omp parallel for
			for (size_t j = 0; j < p->n; j++)
				x[j] = (pp_real)(p->init_std *
						 rng_normal(key, param_global_index(p, j)));
		} else {
			for (size_t j = 0; j < p->n; j++)
				x[j] = (pp_real)p->init_value;
		}
	}
	s->ops->to_device(s->w, host + s->w_lo, (s->w_hi - s->w_lo) * sizeof(pp_real));
	if (s->n_base)
		s->ops->to_act(s->base, host + s->n_elems, s->n_base);
	free(host);
	stage_weights_changed(s);
}

void stage_put_param(pp_stage *s, const pp_param *p, const pp_real *host)
{
	if (p->frozen) {
		s->ops->to_act(pp_act_at(s->ops, s->base, p->off), host, p->n);
		return;
	}
	const size_t lo = p->off > s->w_lo ? p->off : s->w_lo;
	const size_t hi = p->off + p->n < s->w_hi ? p->off + p->n : s->w_hi;
	if (lo >= hi)
		return;
	s->ops->to_device(stage_w(s, lo), host + (lo - p->off), (hi - lo) * sizeof(pp_real));
	stage_weights_range_changed(s, lo, hi);
}

void stage_weights_range_changed(pp_stage *s, size_t lo, size_t hi)
{
	stage_fp8_weights_changed(s);
	lo = lo > s->w_lo ? lo : s->w_lo;
	hi = hi < s->w_hi ? hi : s->w_hi;
	if (s->wc != (pp_act *)s->w && hi > lo)
		s->ops->to_act(pp_act_at(s->ops, s->wc, lo - s->w_lo), stage_w(s, lo), hi - lo);
}

void stage_weights_changed(pp_stage *s) { stage_weights_range_changed(s, 0, s->n_elems); }

void stage_zero_grad(pp_stage *s) { s->ops->zero(s->g, (s->w_hi - s->w_lo) * sizeof(pp_real)); }

const pp_act *stage_logits(const pp_stage *s, int slot)
{
	return s->last ? s->acts->slot[slot].logits : NULL;
}

/* ---- forward / backward ------------------------------------------------ */
