#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ckpt/async.h"
#include "../ckpt/stage.h"
#include "deadline.h"
#include "../base/fsutil.h"
#include "../base/log.h"
#include "../plan/plan.h"
#include "tensorboard.h"
#include "watchdog.h"
#include "../decode/request.h"
#include "../tok/tokenizer.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- collectives that are no-ops on groups of one ------------------------- */

static int sum_over(pp_comm *c, void *buf, size_t n, pp_dtype t, pp_redop op, pp_err *e)
{
	return c ? comm_allreduce(c, buf, n, t, op, e) : 0;
}

/* The tp group as the model sees it. */
static int tp_allreduce(void *ctx, void *buf, size_t n, int type, int op, pp_err *e)
{
	return comm_allreduce(ctx, buf, n, comm_dtype_of(type),
			      op == PP_REDUCE_MAX ? PP_OP_MAX : PP_OP_SUM, e);
}

/* Agrees on a status across the job: the worst code of any rank. */
static int agree(trainer *t, int rc, pp_err *e)
{
	int worst = rc;
	pp_err ignore;
	if (t->mesh.world_comm &&
	    comm_allreduce(t->mesh.world_comm, &worst, 1, PP_DT_I32, PP_OP_MAX, &ignore))
		return rc ? rc : pp_errorf(e, PP_ERUNTIME, "%s", ignore.msg);
	if (worst && !rc)
		return pp_errorf(e, worst, "another rank failed (see its message)");
	return rc;
}

/* ---- opening ------------------------------------------------------------- */

static int grads_final(void *ctx, pp_stage *s, size_t from, pp_err *e);

/* Each element of the model counted once across ranks: as it is saved. */
static bool counts_once(const pp_stage *st, const pp_param *p)
{
	return ckpt_rank_saves(st, p);
}

/* Fully sharded: fsdp > 1 (fsdp.h). */
static bool fsdp_on(const trainer *t) { return t->mesh.fsdp > 1; }
/* ZeRO-1: each dp rank updates a share of the buffer, and holds all of it. */
static bool zero1(const trainer *t)
{
	return t->cfg->shard_optimizer && t->mesh.dp > 1 && !fsdp_on(t);
}

/* The stage of spec sp under fsdp: the share of its buffer this rank keeps,
 * and the hooks that gather the rest. */
static int fsdp_spec(trainer *t, stage_spec *sp, pp_err *e)
{
	pp_stage d;
	int rc = stage_describe(&d, &t->cfg->model, sp, e);
	if (rc)
		return rc;
	sp->units = (stage_units){fsdp_use, fsdp_done, &t->fsdp, 0, 0};
	gradsync_shard(d.n_shared, t->mesh.fsdp, t->mesh.fsdp_rank, &sp->units.lo, &sp->units.hi);
	stage_free(&d);
	return 0;
}

int trainer_open(trainer *t, pp_config *c, bool params_only, pp_err *e)
{
	memset(t, 0, sizeof *t);
	t->cfg = c;
	t->params_only = params_only;
	const pp_model_cfg *m = &c->model;
	if (m->pos == PP_POS_RELATIVE)
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s' uses relative position biases (pos=relative): this version "
				 "of pp trains rope and learned positions only",
				 m->preset);
	int rc = pp_ops_select(c->device, c->dtype, &t->ops, e);
	if (rc)
		return rc;
	pp_comm *world = NULL;
	if (params_only) {
		/* one process holds the whole model, whatever the layout */
		pp_config whole = *c;
		whole.pp = whole.dp = whole.fsdp = whole.tp = whole.ep = whole.virtual_stages = 1;
		whole.n_stage_layers = 0;
		rc = mesh_init(&t->mesh, &whole, 0, 1, e);
	} else {
		if ((rc = boot_init(&t->proc, e)))
			return rc;
		t->booted = true;
		log_set_prefix("pp-train", t->proc.rank, t->proc.size);
		if ((rc = mesh_init(&t->mesh, c, t->proc.rank, t->proc.size, e)))
			return rc;
		if (t->proc.size > 1) {
			const pp_comm_ops *co = comm_find(c->device == PP_DEVICE_CUDA ? "nccl" : "mpi");
			if (!co)
				return pp_errorf(e, PP_EUSAGE, "device=%s: no communication backend",
						 pp_device_name(c->device));
			if ((rc = co->init(&world, &t->proc, c->comm_timeout, e)))
				return rc;
		}
		rc = mesh_split(&t->mesh, world, e);
	}
	if (rc)
		return rc;
#ifdef PP_CUDA
	if (c->device == PP_DEVICE_CUDA && (rc = pp_cuda_init(boot_device(&t->proc), e)))
		return rc;
#endif

	const pp_mesh *me = &t->mesh;
	const sched_kind kind = c->schedule;
	int slots[64] = {0};
	if (me->v > 64)
		return pp_errorf(e, PP_EUSAGE, "virtual_stages=%d: at most 64", me->v);
	if (!params_only && (rc = pipeline_slots(kind, me->pp, me->v, c->microbatches, me->pp_rank, slots, e)))
		return rc;
	t->chunks = calloc((size_t)me->v, sizeof *t->chunks);
	t->opt = calloc((size_t)me->v, sizeof *t->opt);
	size_t hold[64] = {0};
	for (int k = 0; k < me->v; k++) {
		stage_spec sp = stage_spec_whole(m, params_only ? 1 : c->microbatch,
						 params_only ? 1 : c->seq_len, c->recompute);
		mesh_chunk_layers(me, c, k, &sp.layer_begin, &sp.layer_end);
		sp.n_slots = params_only ? 1 : slots[k];
		sp.split_backward = kind == SCHED_ZBH1 && !params_only;
		sp.loss_chunk_mb = c->loss_chunk_mb;
		sp.tp = (pp_tp){me->tp_rank, me->tp, tp_allreduce, me->tp_comm};
		sp.ep.rank = me->ep_rank;
		sp.ep.size = me->ep;
		sp.ep.comm = me->ep_comm;
		/* the MoE losses' mean over the step's microbatches */
		sp.moe_loss_scale = 1.0 / ((double)c->microbatches * me->dp);
		if (!params_only && me->dp_comm && c->grad_bucket_mb > 0 && !fsdp_on(t))
			sp.grad_ready = (stage_grad_hook){grads_final, t};
		pp_stage *st = &t->chunks[k];
		if (fsdp_on(t) && (rc = fsdp_spec(t, &sp, e)))
			return rc;
		if ((rc = stage_create(st, m, t->ops, &sp, e)))
			return rc;
		/* ZeRO-1: this dp rank updates a share of each region of the buffer;
		 * fsdp: this rank keeps and updates its share of the fsdp group's */
		optim_ranges r;
		if (fsdp_on(t))
			gradsync_ranges(st, true, me->fsdp, me->fsdp_rank, 1, &r);
		else
			gradsync_ranges(st, zero1(t), me->dp, me->dp_rank, me->ep, &r);
		if (!params_only && (rc = optim_create(&t->opt[k], t->ops, &r, e)))
			return rc;
		/* a tied embedding is summed with the pipeline's other end first */
		if (m->tied_embeddings && (me->pp > 1 || me->v > 1) && (st->first || st->last))
			hold[k] = st->params[0].n;
	}
	if (params_only)
		return 0;
	if (fsdp_on(t))
		rc = fsdp_init(&t->fsdp, t->chunks, me->v, me->fsdp_comm, me->rep_comm, t->ops, e);
	else
		rc = gradsync_init(&t->sync, t->chunks, me->v, hold, zero1(t), me->dp_comm,
				   me->edp_comm, me->ep, t->ops, c->grad_bucket_mb, e);
	if (rc)
		return rc;
	if (zero1(t)) {
		/* every share padded to the largest, then this rank's share */
		size_t most = 0;
		for (int k = 0; k < me->v; k++) {
			const pp_stage *st = &t->chunks[k];
			size_t shared = gradsync_share(st->n_shared, me->dp) * ((size_t)me->dp + 1);
			size_t experts = gradsync_share(st->n_elems - st->n_shared, me->dp / me->ep) *
					 ((size_t)(me->dp / me->ep) + 1);
			most = shared > most ? shared : most;
			most = experts > most ? experts : most;
		}
		t->gather = t->ops->alloc(most * sizeof(pp_real));
		t->gather_n = most;
		if (!t->gather)
			return pp_errorf(e, PP_ERUNTIME,
					 "out of %s memory for the ZeRO-1 parameter gather (%.3g GB)",
					 pp_device_name(c->device), 1e-9 * (double)(most * sizeof(pp_real)));
	}
	if ((rc = pipeline_init(&t->pl, kind, t->chunks, me->v, me->pp, me->pp_rank, c->microbatches,
				me->pp_comm, e)))
		return rc;
	t->pl.pad = (sched_costs){1e-3 * c->debug.fwd_ms, 1e-3 * c->debug.bwd_ms, 1e-3 * c->debug.bwd_w_ms};
	if ((rc = data_open(&t->train, c, "train", me->dp_rank, me->dp, e)))
		return rc;
	if (c->eval_interval > 0 && (rc = data_open(&t->val, c, "val", me->dp_rank, me->dp, e)))
		return rc;
	return 0;
}

void trainer_close(trainer *t)
{
	prof_rec_free(t->prof);
	data_close(t->train);
	data_close(t->val);
	pipeline_free(&t->pl);
	gradsync_free(&t->sync);
	fsdp_free(&t->fsdp);
	if (t->gather)
		t->ops->free(t->gather);
	for (int k = 0; t->chunks && k < t->mesh.v; k++) {
		optim_free(&t->opt[k]);
		stage_free(&t->chunks[k]);
	}
	free(t->chunks);
	free(t->opt);
	for (int k = 0; t->staging && k < t->mesh.v; k++) {
		free(t->staging[k].w);
		free(t->staging[k].m);
		free(t->staging[k].v);
	}
	free(t->staging);
	pp_comm *world = t->mesh.world_comm;
	mesh_free(&t->mesh);
	comm_free(world);
	if (t->booted)
		boot_fini(&t->proc);
	memset(t, 0, sizeof *t);
}

void trainer_abort(trainer *t, int code, const char *why)
{
	if (t->booted && t->proc.size > 1)
		comm_abort(t->mesh.world_comm, code, why);
}

void trainer_init(trainer *t)
{
	for (int k = 0; k < t->mesh.v; k++)
		stage_init_params(&t->chunks[k], t->cfg->seed);
	t->step = 0;
}

/* The bytes of training state this rank allocated, as pp-init --plan
 * counts them: parameters (the compute copy), gradients, optimizer (AdamW
 * m and v, the fp32 master weights under bf16, the ZeRO-1 gather buffer);
 * under fsdp the shares of those, and beside them the working set: the
 * gathered units, the units' gradient buffers and the embedding's and
 * head's whole gradients. */
static void log_state_bytes(const trainer *t)
{
	const pp_ops *o = t->ops;
	const double R = sizeof(pp_real), A = (double)pp_act_size(o);
	double params = 0, grads = 0, optim = 0, gathered = 0, buffers = 0;
	for (int k = 0; k < t->mesh.v; k++) {
		const pp_stage *st = &t->chunks[k];
		const double held = (double)(st->w_hi - st->w_lo);
		params += held * A;
		grads += held * R;
		optim += 2 * (double)optim_ranges_count(&t->opt[k].r) * R + (A < R ? held * R : 0);
		for (int j = 0; fsdp_on(t) && j < 2; j++) {
			const int u = j ? st->n_units - 1 : 0;
			buffers += (double)(st->unit_lo[u + 1] - st->unit_lo[u]) * R;
		}
	}
	optim += (double)t->gather_n * R;
	if (!fsdp_on(t)) {
		log_info("training state on rank 0: parameters %.4g MB, gradients %.4g MB, optimizer "
			 "%.4g MB", params / 1e6, grads / 1e6, optim / 1e6);
		return;
	}
	gathered = FSDP_BUFS * (double)t->fsdp.unit_max * A;
	buffers += 2 * FSDP_GBUFS * (double)t->fsdp.unit_max * R;
	log_info("training state on rank 0: parameters %.4g MB, gradients %.4g MB, optimizer "
		 "%.4g MB (its fsdp shares); working set: gathered units %.4g MB, gradient buffers "
		 "%.4g MB", params / 1e6, grads / 1e6, optim / 1e6, gathered / 1e6, buffers / 1e6);
}

/* ---- checkpoints ------------------------------------------------------- */

/* Copies chunk k's parameters and AdamW state to host memory, into
 * staging buffers that stay allocated from one save to the next: a save
 * writes into pages already mapped (on a VM, the first touch of a page costs
 * more than the copy), and the buffers are free again by the next save,
 * which waits for the one in flight. */
static int gather_state(trainer *t, int k, ckpt_host *h, pp_err *e)
{
	const pp_stage *st = &t->chunks[k];
	const optim_state *o = &t->opt[k];
	const pp_ops *ops = t->ops;
	size_t n = st->n_elems, share = optim_ranges_count(&o->r);
	if (!t->staging && !(t->staging = calloc((size_t)t->mesh.v, sizeof *t->staging)))
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	ckpt_host *s = &t->staging[k];
	if (!s->w) {
		*s = (ckpt_host){.w = malloc(n * sizeof(pp_real) + 1), .r = o->r};
		if (!t->params_only) {
			s->m = malloc(share * sizeof(pp_real) + 1);
			s->v = malloc(share * sizeof(pp_real) + 1);
		}
	}
	*h = *s;
	if (!h->w || (!t->params_only && (!h->m || !h->v)))
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of host memory for %zu parameters", n);
	int rc = fsdp_on(t) ? fsdp_gather_master(&t->fsdp, k, h->w, e) : 0;
	if (rc)
		return rc;
	if (!fsdp_on(t))
		ops->to_host(h->w, st->w, n * sizeof(pp_real));
	if (!t->params_only) {
		ops->to_host(h->m, o->m, share * sizeof(pp_real));
		ops->to_host(h->v, o->v, share * sizeof(pp_real));
	}
	return 0;
}

/* A fused projection split over tp (GPT-2's c_attn) is not one slice of the
 * whole tensor: tp rank 0 gathers the blocks and saves the tensor whole.
 * Returns the whole tensor (param, m, v: three arrays) on tp rank 0. */
static int gather_fused(trainer *t, const pp_param *p, const ckpt_host *h, pp_real *whole[3],
			pp_err *e)
{
	const int tp = t->mesh.tp;
	const size_t n = p->n, cols = (size_t)p->shape[1], rows = (size_t)p->block_rows;
	const pp_real *src[3] = {h->w + p->off, h->m ? h->m + p->off : NULL, h->v ? h->v + p->off : NULL};
	pp_real *all = malloc(n * (size_t)tp * sizeof(pp_real));
	int rc = 0;
	for (int i = 0; i < 3 && src[i] && !rc; i++) {
		whole[i] = malloc(n * (size_t)tp * sizeof(pp_real));
		rc = comm_all_gather(t->mesh.tp_comm, src[i], all, n, PP_DT_REAL, e);
		/* rank r's block b goes to global rows b * tp * rows + r * rows */
		for (int r = 0; !rc && r < tp; r++)
			for (int b = 0; b < p->n_blocks; b++)
				memcpy(whole[i] + ((size_t)b * tp + r) * rows * cols,
				       all + (size_t)r * n + (size_t)b * rows * cols, rows * cols * sizeof(pp_real));
	}
	free(all);
	return rc;
}

/* Under ZeRO-1, the part of p's AdamW state in this rank's range of p's
 * region of the buffer (st's: h->r), as ranges of the block the shard saves
 * p's params in. The range arrays go to owned. */
static int add_optim_part(const pp_stage *st, const pp_param *p, const ckpt_host *h, bool fused,
			  ckpt_state *cs, void **owned, int *n_owned, pp_err *e)
{
	const int i = p->off < st->n_shared ? OPTIM_SHARED : OPTIM_EXPERTS;
	const size_t lo = h->r.lo[i], hi = h->r.hi[i];
	size_t max = ckpt_optim_max_ranges(p, lo, hi, fused);
	if (!max)
		return 0;
	int64_t *begin = malloc(max * sizeof *begin), *end = malloc(max * sizeof *end);
	owned[(*n_owned)++] = begin;
	owned[(*n_owned)++] = end;
	if (!begin || !end)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	int n = ckpt_optim_ranges(p, lo, hi, fused, begin, end);
	ckpt_tensor c;
	ckpt_saved_block(p, &c);
	size_t at = optim_ranges_pos(&h->r, lo > p->off ? lo : p->off);
	ckpt_optim_part *q = &cs->optim[cs->n_optim++];
	*q = (ckpt_optim_part){.name = p->name, .ndim = p->ndim, .n_ranges = n, .begin = begin, .end = end,
			       .m = h->m + at, .v = h->v + at};
	memcpy(q->shape, c.shape, sizeof q->shape);
	memcpy(q->global_shape, c.global_shape, sizeof q->global_shape);
	memcpy(q->offset, c.offset, sizeof q->offset);
	return 0;
}

/* This rank's part of the checkpoint: in cs->tensors every tensor of its
 * chunks that it owns (one copy of replicated ones, not the tied
 * embedding's second copy), with m and v unless cs->optim_per_dp; then, in
 * cs->optim, the parts of their AdamW state this rank holds. What it
 * allocates goes to *owned. */
static int build_shard(trainer *t, ckpt_host *hs, ckpt_state *cs, void ***owned, int *n_owned, pp_err *e)
{
	int cap = 0, rc = 0;
	for (int k = 0; k < t->mesh.v; k++)
		cap += t->chunks[k].n_params;
	cs->tensors = calloc((size_t)cap + 1, sizeof *cs->tensors);
	cs->optim = cs->optim_per_dp ? calloc((size_t)cap + 1, sizeof *cs->optim) : NULL;
	*owned = calloc((size_t)cap * 5 + 1, sizeof **owned); /* per tensor: 3 gathered arrays, 2 range arrays */
	*n_owned = 0;
	if (!cs->tensors || !*owned || (cs->optim_per_dp && !cs->optim))
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	for (int k = 0; k < t->mesh.v && !rc; k++) {
		const pp_stage *st = &t->chunks[k];
		/* under ZeRO-1 only parameters are gathered */
		const ckpt_host src = cs->optim_per_dp ? (ckpt_host){.w = hs[k].w} : hs[k];
		for (int i = 0; i < st->n_params && !rc; i++) {
			const pp_param *p = &st->params[i];
			if (stage_is_embedding_copy(st, p))
				continue;
			pp_real *whole[3] = {NULL, NULL, NULL};
			bool fused = p->n_blocks > 1 && t->mesh.tp > 1;
			if (fused && (rc = gather_fused(t, p, &src, whole, e)))
				break;
			if (fused)
				for (int j = 0; j < 3; j++)
					(*owned)[(*n_owned)++] = whole[j];
			if (!p->tp_owner)
				continue;
			if (cs->optim_per_dp && (rc = add_optim_part(st, p, &hs[k], fused, cs, *owned, n_owned, e)))
				break;
			if ((fused && t->mesh.tp_rank != 0) || !ckpt_shard_holds(st, p))
				continue;
			ckpt_tensor *c = &cs->tensors[cs->n_tensors++];
			ckpt_saved_block(p, c);
			c->param = fused ? whole[0] : src.w + p->off;
			if (!cs->optim_per_dp && src.m) { /* the ranges are everything, in order */
				c->m = fused ? whole[1] : src.m + p->off;
				c->v = fused ? whole[2] : src.v + p->off;
			}
		}
	}
	return rc;
}

static void fill_header(trainer *t, ckpt_state *cs)
{
	const pp_mesh *me = &t->mesh;
	cs->step = t->step;
	cs->rng[0] = t->cfg->seed;
	/* without a loader (pp-init) the position is the start of the data */
	cs->n_data_state = t->train ? data_get_state(t->train, cs->data_state, PP_CKPT_DATA_STATE) : 1;
	cs->pp_rank = me->pp_rank;
	cs->tp_rank = me->tp_rank;
	cs->dp_rank = me->dp_rank;
	cs->ep_rank = me->ep_rank;
	cs->pp_size = me->pp;
	cs->tp_size = me->tp;
	cs->dp_size = me->dp;
	cs->ep_size = me->ep;
	/* ZeRO-1: each dp rank saves the AdamW state it holds; fsdp: each rank
	 * of an fsdp group (one group: the others hold the same shares) */
	cs->optim_per_dp = zero1(t) || fsdp_on(t);
	if (fsdp_on(t)) {
		cs->dp_rank = me->fsdp_rank;
		cs->dp_size = me->fsdp;
	}
	cs->tokenizer = t->cfg->tokenizer; /* shard pp000-tp000 keeps a copy */
}

/* Every rank: agrees on the temporary directory, copies its state to host
 * memory and builds its part of the checkpoint, all of it owned by j. The
 * step is blocked only for this; writing it (j's write phase) may overlap
 * the steps that follow. */
static int save_prepare(trainer *t, ckpt_job *j, pp_err *e)
{
	const pp_mesh *me = &t->mesh;
	pp_comm *world = me->world_comm;
	int rc = 0;
	memset(j, 0, sizeof *j);
	snprintf(j->run_dir, sizeof j->run_dir, "%s", t->cfg->run_dir);
	j->keep = t->cfg->keep;
	if (me->rank == 0) {
		rc = ckpt_begin(t->cfg->run_dir, t->step, j->tmp, sizeof j->tmp, e);
		j->made_tmp = !rc;
	}
	if ((rc = agree(t, rc, e)))
		return rc;
	if (world && (rc = comm_broadcast(world, j->tmp, sizeof j->tmp, PP_DT_BYTE, 0, e)))
		return rc;

	ckpt_host *hs = ckpt_job_own(j, calloc((size_t)me->v, sizeof *hs));
	if (!hs)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	for (int k = 0; k < me->v && !rc; k++)
		rc = gather_state(t, k, &hs[k], e); /* the trainer's staging buffers */
	rc = agree(t, rc, e); /* build_shard gathers fused tensors over tp */
	fill_header(t, &j->cs);
	void **owned = NULL;
	int n_owned = 0;
	if (!rc)
		rc = build_shard(t, hs, &j->cs, &owned, &n_owned, e);
	for (int i = 0; i < n_owned; i++)
		ckpt_job_own(j, owned[i]);
	free(owned);
	j->cs.config_json = ckpt_job_own(j, pp_config_dump(t->cfg));
	j->write_shard = me->dp_rank < me->ep; /* the first ep group: one copy of everything */
	j->write_optim = j->cs.optim_per_dp && me->dp_rank < (fsdp_on(t) ? me->fsdp : me->dp);
	return rc;
}

/* Every rank: agrees that every rank's write succeeded (rc: this rank's),
 * then rank 0 publishes the checkpoint. */
static int save_commit(trainer *t, ckpt_job *j, int rc, pp_err *e)
{
	rc = agree(t, rc, e);
	if (!rc && t->mesh.rank == 0)
		rc = ckpt_job_run(j, CKPT_JOB_COMMIT, e);
	return agree(t, rc, e);
}

int trainer_save(trainer *t, pp_err *e)
{
	ckpt_job j;
	int rc = save_prepare(t, &j, e);
	if (!rc)
		rc = ckpt_job_run(&j, CKPT_JOB_WRITE, e);
	rc = save_commit(t, &j, rc, e);
	ckpt_job_free(&j);
	return rc;
}

/* Loads this rank's tensors (any layout the checkpoint was saved in: the
 * reader assembles each requested slice from the files that hold it), and
 * the AdamW state of its ranges: m and v are read, into host buffers laid
 * out as the whole chunk, for the blocks that meet the ranges only. */
static int load_chunks(trainer *t, const char *dir, ckpt_state *cs, bool adam, pp_err *e)
{
	const pp_mesh *me = &t->mesh;
	int cap = 0, rc = 0;
	for (int k = 0; k < me->v; k++)
		cap += 3 * t->chunks[k].n_params;
	cs->tensors = calloc((size_t)cap + 1, sizeof *cs->tensors);
	ckpt_host *hs = calloc(me->v > 0 ? (size_t)me->v : 1, sizeof *hs);
	if (!cs->tensors || !hs)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint load: out of memory");
	for (int k = 0; k < me->v && !rc; k++) {
		const pp_stage *st = &t->chunks[k];
		const optim_state *o = &t->opt[k];
		size_t n = st->n_elems;
		hs[k] = (ckpt_host){malloc(n * sizeof(pp_real) + 1), calloc(n + 1, sizeof(pp_real)),
				     calloc(n + 1, sizeof(pp_real)), o->r};
		if (!hs[k].w || !hs[k].m || !hs[k].v)
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint load: out of host memory for %zu parameters", n);
		/* without AdamW state in the checkpoint, m and v stay zero: a fresh optimizer */
		ckpt_host want = hs[k];
		if (!adam)
			want.m = want.v = NULL;
		if (!rc)
			ckpt_add_entries(st, &want, cs);
	}
	if (!rc)
		rc = ckpt_load(dir, cs, e);
	for (int k = 0; hs && k < me->v; k++) {
		const pp_stage *st = &t->chunks[k];
		const optim_state *o = &t->opt[k];
		if (!rc) {
			t->ops->to_device(st->w, hs[k].w + st->w_lo, (st->w_hi - st->w_lo) * sizeof(pp_real));
			stage_weights_changed(&t->chunks[k]);
			for (int i = 0; i < OPTIM_REGIONS; i++) {
				size_t lo = o->r.lo[i], n = o->r.hi[i] - lo, at = optim_ranges_pos(&o->r, lo);
				t->ops->to_device(o->m + at, hs[k].m + lo, n * sizeof(pp_real));
				t->ops->to_device(o->v + at, hs[k].v + lo, n * sizeof(pp_real));
			}
		}
		free(hs[k].w);
		free(hs[k].m);
		free(hs[k].v);
	}
	free(hs);
	return rc;
}

int trainer_resume(trainer *t, bool *resumed, pp_err *e)
{
	const pp_config *c = t->cfg;
	char dir[PP_PATH_MAX + 64] = "", skipped[4096] = "";
	int64_t step = -1;
	long found = -1;
	*resumed = false;
	/* rank 0 verifies and picks the checkpoint, every rank loads it */
	int rc = 0;
	if (t->mesh.rank == 0)
		rc = ckpt_find_resume(c->run_dir, c->resume_from, dir, sizeof dir, &found, skipped,
				      sizeof skipped, e);
	step = found;
	if (!(rc = agree(t, rc, e)) && t->mesh.world_comm)
		rc = comm_broadcast(t->mesh.world_comm, &step, 1, PP_DT_I64, 0, e);
	if (rc || step < 0)
		return rc;
	if (t->mesh.rank == 0 && skipped[0])
		log_info("warning: %s; resuming from %s, the newest sound one", skipped, dir);
	if (t->mesh.rank != 0)
		rc = ckpt_step_dir(c->run_dir, (long)step, dir, sizeof dir, e);
	ckpt_state cs = {0};
	ckpt_manifest m = {0};
	bool adam = false;
	if (!rc && !(rc = ckpt_read_manifest(dir, &m, e)))
		rc = ckpt_holds_optimizer(&m, &adam, e);
	ckpt_manifest_free(&m);
	if (!rc && !(rc = ckpt_check_model(t->cfg, dir, e)))
		rc = load_chunks(t, dir, &cs, adam, e);
	if (!rc && fsdp_on(t))
		fsdp_params_changed(&t->fsdp);
	if (!rc && t->train)
		rc = data_set_state(t->train, cs.data_state, cs.n_data_state, e);
	if (!rc && cs.step > t->cfg->steps)
		rc = pp_errorf(e, PP_EUSAGE, "checkpoint %s is at step %ld, past steps=%ld", dir,
			       cs.step, t->cfg->steps);
	free(cs.tensors);
	if (rc)
		pp_err_prefix(e, "resuming from %s", dir);
	if ((rc = agree(t, rc, e)))
		return rc;
	if (t->mesh.rank == 0 && !adam)
		log_info("%s holds parameters only: AdamW starts from zero", dir);
	t->step = cs.step;
	*resumed = true;
	return 0;
}

/* ---- the loop ---------------------------------------------------------- */

/* Reads this dp rank's n sequences of the step (every pp rank reads the
 * same ones: the first stage needs the tokens, the last the targets). */
static int read_batch(pp_data *d, int n, int T, int *tok, int *tgt, long *valid, pp_err *e)
{
	int rc = data_next(d, n, T, tok, tgt, e);
	*valid = 0;
	for (size_t i = 0; !rc && i < (size_t)n * T; i++)
		*valid += tgt[i] >= 0;
	return rc;
}

/* Sums a loss over the pipeline's last stages and the dp ranks. */
static int total_loss(trainer *t, double *sum, long *valid, pp_err *e)
{
	double v[2] = {*sum, (double)*valid};
	int rc = sum_over(t->mesh.pp_comm, v, 2, PP_DT_F64, PP_OP_SUM, e); /* the last stages count */
	if (!rc)
		rc = sum_over(t->mesh.dp_comm, v, 2, PP_DT_F64, PP_OP_SUM, e);
	*sum = v[0];
	*valid = (long)v[1];
	return rc;
}

int trainer_eval(trainer *t, double *loss, pp_err *e)
{
	const pp_config *c = t->cfg;
	const size_t N = (size_t)c->microbatch * c->seq_len;
	int *tok = malloc(N * c->eval_batches * sizeof(int)), *tgt = malloc(N * c->eval_batches * sizeof(int));
	double sum = 0;
	long valid = 0, read_valid;
	data_rewind(t->val);
	int rc = read_batch(t->val, c->microbatch * c->eval_batches, c->seq_len, tok, tgt, &read_valid, e);
	if (!rc)
		rc = pipeline_eval(&t->pl, c->eval_batches, tok, tgt, &sum, &valid, e);
	if (!rc)
		rc = total_loss(t, &sum, &valid, e);
	free(tok);
	free(tgt);
	*loss = valid ? sum / (double)valid : NAN;
	return rc;
}

/* What a step reports. */
typedef struct {
	double loss, gnorm, lr;
	bool skipped;    /* non-finite loss or gradient norm (nan_policy=skip) */
	double moe_aux;  /* MoE: the load-balancing loss, mean over layers (1: balanced) */
	double moe_z;    /* the router z-loss, likewise */
	double moe_dropped; /* the fraction of expert assignments dropped (capacity) */
} step_result;

typedef struct {
	FILE *metrics; /* leader only */
	tb_writer *tb; /* leader only; NULL when tensorboard=false */
	double flops_per_token;
	double peak; /* FLOP/s of the device, 0 when unknown */
	double t_avg; /* moving average of the step time, warm-up steps left out */
	long n_run;   /* steps run by this process */
	long n_timed; /* of which after the warm-up (timing_skip_steps) */
	double timed; /* their seconds */
} run_log;

/* The scalars of a metrics.jsonl record into the TensorBoard events too; a
 * failed write is reported once and ends the events, not the run. */
static void tensorboard_scalars(run_log *lg, long step, const char *const *tags, const double *vals,
				int n)
{
	pp_err e = {0};
	if (lg->tb && tb_scalars(lg->tb, step, tags, vals, n, &e)) {
		log_info("warning: %s; no more TensorBoard events in this run", e.msg);
		tb_close(lg->tb);
		lg->tb = NULL;
	}
}

/* v for JSON: NaN and infinities, which JSON lacks, as null */
static const char *json_number(char *buf, size_t n, double v)
{
	if (isfinite(v))
		snprintf(buf, n, "%.9g", v);
	else
		snprintf(buf, n, "null");
	return buf;
}

/* A record of one scalar for metrics.jsonl and TensorBoard. */
static void log_scalar(run_log *lg, long step, const char *name, double v)
{
	if (!lg->metrics)
		return;
	char num[32];
	fprintf(lg->metrics, "{\"step\": %ld, \"%s\": %s}\n", step, name, json_number(num, sizeof num, v));
	fflush(lg->metrics);
	tensorboard_scalars(lg, step, &name, &v, 1);
}

static void log_step(const trainer *t, run_log *lg, const train_opts *o, const step_result *r,
		     double dt)
{
	const pp_config *c = t->cfg;
	const double loss = r->loss, lr = r->lr, gnorm = r->gnorm;
	const bool skipped = r->skipped, moe = c->model.n_experts > 0;
	if (!lg->metrics)
		return;
	double tokens = (double)c->global_batch * c->seq_len;
	double tps = tokens / dt, fps = tps * lg->flops_per_token / t->mesh.world;
	/* the warm-up steps (compilation, first touches, caches) are not the
	 * run's pace: the ETA and the summary leave them out */
	if (++lg->n_run > c->timing_skip_steps) {
		lg->t_avg = lg->n_timed ? 0.9 * lg->t_avg + 0.1 * dt : dt;
		lg->n_timed++;
		lg->timed += dt;
	} else if (!lg->n_timed) {
		lg->t_avg = dt;
	}
	char mfu[64] = "null";
	if (lg->peak > 0)
		snprintf(mfu, sizeof mfu, "%.6g", fps / lg->peak);
	char l[32], g[32], ma[32], mz[32], moe_json[160] = "";
	if (moe)
		snprintf(moe_json, sizeof moe_json,
			 ", \"moe_aux_loss\": %s, \"moe_z_loss\": %s, \"moe_dropped_fraction\": %.6g",
			 json_number(ma, sizeof ma, r->moe_aux), json_number(mz, sizeof mz, r->moe_z),
			 r->moe_dropped);
	fprintf(lg->metrics,
		"{\"step\": %ld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
		"\"step_time\": %.6f, \"tokens_per_s\": %.1f, \"flops_per_s\": %.6g, \"mfu\": %s%s%s}\n",
		t->step, json_number(l, sizeof l, loss), lr, json_number(g, sizeof g, gnorm), dt, tps, fps, mfu,
		moe_json, skipped ? ", \"skipped\": true" : "");
	fflush(lg->metrics);
	const char *tags[] = {"loss", "lr", "grad_norm", "step_time", "tokens_per_s", "flops_per_s", "mfu"};
	const double vals[] = {loss, lr, gnorm, dt, tps, fps, lg->peak > 0 ? fps / lg->peak : 0};
	tensorboard_scalars(lg, t->step, tags, vals, lg->peak > 0 ? 7 : 6);
	if (moe) {
		const char *mt[] = {"moe_aux_loss", "moe_z_loss", "moe_dropped_fraction"};
		const double mv[] = {r->moe_aux, r->moe_z, r->moe_dropped};
		tensorboard_scalars(lg, t->step, mt, mv, 3);
	}
	if (o->quiet || (t->step % c->log_period && t->step != c->steps))
		return;
	char rate[64], eta[32], tp[32];
	log_thousands(tp, sizeof tp, tps);
	if (lg->peak > 0)
		snprintf(rate, sizeof rate, "%.1f TFLOP/s/device | MFU %.1f%%", fps / 1e12,
			 100 * fps / lg->peak);
	else
		snprintf(rate, sizeof rate, "%.3g TFLOP/s/device", fps / 1e12);
	log_duration(eta, sizeof eta, lg->t_avg * (double)(c->steps - t->step));
	char moe_line[128] = "";
	if (moe)
		snprintf(moe_line, sizeof moe_line, " | moe_aux %.4f | moe_z %.4f | dropped %.2f%%", r->moe_aux,
			 r->moe_z, 100 * r->moe_dropped);
	log_info("step %ld/%ld | loss %.4f%s | lr %.2e | grad_norm %.3f | %.3f s | %s tok/s | %s | "
		 "ETA %s%s",
		 t->step, c->steps, loss, moe_line, lr, gnorm, dt, tp, rate, eta,
		 skipped ? " | skipped (non-finite)" : "");
}

/* Mean step time, tokens/s and MFU over the steps after the warm-up. */
static void log_timing(const trainer *t, const run_log *lg)
{
	const pp_config *c = t->cfg;
	if (!lg->metrics || !lg->n_timed)
		return;
	double dt = lg->timed / (double)lg->n_timed;
	double tps = (double)c->global_batch * c->seq_len / dt;
	double fps = tps * lg->flops_per_token / t->mesh.world;
	char tp[32], mfu[48] = "";
	log_thousands(tp, sizeof tp, tps);
	if (lg->peak > 0)
		snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * fps / lg->peak);
	log_info("timing: %.4f s per step over %ld step%s (%ld warm-up step%s left out: "
		 "timing_skip_steps) | %s tok/s | %.3g TFLOP/s/device%s",
		 dt, lg->n_timed, lg->n_timed > 1 ? "s" : "", lg->n_run - lg->n_timed,
		 lg->n_run - lg->n_timed == 1 ? "" : "s", tp, fps / 1e12, mfu);
}

/* The profile window of this run (profile_steps), and the recorder for it;
 * t->prof stays NULL when the window is empty or already past. */
static int open_profile(trainer *t, pp_err *e)
{
	const pp_config *c = t->cfg;
	const pp_mesh *me = &t->mesh;
	long begin = c->profile_begin, end = c->profile_end;
	if (c->profile_count) {
		begin = t->step + 1 + c->timing_skip_steps;
		end = begin + c->profile_count;
	}
	if (end > c->steps + 1)
		end = c->steps + 1;
	if (begin >= end || end <= t->step + 1) {
		if (trainer_leader(t))
			log_info("warning: profile_steps=%s: no step of this run (steps %ld to %ld) "
				 "falls in it; nothing is profiled",
				 c->profile_steps, t->step + 1, c->steps);
		return 0;
	}
	prof_rank id = {.rank = me->rank, .world = me->world, .pp = me->pp, .dp = me->dp,
			.tp = me->tp, .pp_rank = me->pp_rank, .dp_rank = me->dp_rank,
			.tp_rank = me->tp_rank, .v = me->v, .m = c->microbatches};
	snprintf(id.preset, sizeof id.preset, "%s", c->model.preset);
	snprintf(id.host, sizeof id.host, "%s", t->proc.host);
	snprintf(id.schedule, sizeof id.schedule, "%s", schedule_kind_name(c->schedule));
	snprintf(id.device, sizeof id.device, "%s", pp_device_name(c->device));
#ifdef PP_CUDA
	if (c->device == PP_DEVICE_CUDA)
		snprintf(id.device, sizeof id.device, "cuda:%d %s", boot_device(&t->proc),
			 pp_cuda_device_name());
#endif
	prof_rec_opts o = {c->run_dir, begin, end, &id, t->ops, me->world_comm,
			   me->rank == c->debug.clock_offset_rank ? c->debug.clock_offset_s : 0};
	int rc = prof_rec_open(&t->prof, &o, e);
	t->pl.prof = t->sync.prof = t->prof;
	if (!rc && trainer_leader(t))
		log_info("profiling steps %ld to %ld into %s/profile/ (pp-merge-profile merges them)",
			 begin, end - 1, c->run_dir);
	return rc;
}

static int run_eval(trainer *t, run_log *lg, pp_err *e)
{
	double vl;
	int rc = trainer_eval(t, &vl, e);
	if (rc || !lg->metrics)
		return rc;
	log_info("step %ld/%ld | val_loss %.4f (%d batches)", t->step, t->cfg->steps, vl,
		 t->cfg->eval_batches);
	log_scalar(lg, t->step, "val_loss", vl);
	return 0;
}

/* The stage hook during a chunk's last backward pass of the step: g[from,
 * n) is final. Its shared kv heads are summed over tp first (the same
 * tensors on every tp rank, in the same order), then the buckets go. */
static int grads_final(void *ctx, pp_stage *s, size_t from, pp_err *e)
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
	const pp_mesh *me = &t->mesh;
	const int v = me->v;
	int rc = 0;
	/* what grads_final has not seen (under fsdp: once summed into the shares) */
	for (int k = 0; k < v && !rc && !fsdp_on(t); k++)
		rc = stage_reduce_replica_grads(&t->chunks[k], 0, t->sync.chunks[k].ready, e);
	if (!rc && t->cfg->model.tied_embeddings && (me->pp > 1 || v > 1)) {
		/* chunk 0 of pp rank 0 and the last chunk of the last pp rank hold
		 * it, as their first tensor: in g, or under fsdp in the buffers
		 * of their first unit's whole gradients */
		pp_real *first = fsdp_on(t) ? fsdp_held_grad(&t->fsdp, 0, 0) : t->chunks[0].g;
		pp_real *last = fsdp_on(t) ? fsdp_held_grad(&t->fsdp, v - 1, 0) : t->chunks[v - 1].g;
		const pp_stage *mine = &t->chunks[me->pp_rank == 0 ? 0 : v - 1];
		const size_t n = mine->params[0].n;
		if (me->pp == 1) {
			t->ops->add_real(first, first, last, n);
			t->ops->to_device(last, first, n * sizeof(pp_real));
		} else if (me->tied_comm) {
			rc = comm_allreduce(me->tied_comm, me->pp_rank == 0 ? first : last, n,
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
	const pp_mesh *me = &t->mesh;
	/* a region replicated over its group counts on the group's rank 0 (dp
	 * rank 0; for the experts, every rank of the first ep group); sharded,
	 * each rank counts its share */
	const bool first[OPTIM_REGIONS] = {me->dp_rank == 0, me->dp_rank < me->ep};
	/* under fsdp the first fsdp group's shares (the others hold the same) */
	const bool sharded = zero1(t) || (fsdp_on(t) && me->dp_rank < me->fsdp);
	double sum = 0;
	for (int k = 0; k < me->v; k++)
		for (int i = 0; i < OPTIM_REGIONS; i++)
			if (sharded || first[i])
				sum += optim_grad_sumsq(&t->chunks[k], t->opt[k].r.lo[i], t->opt[k].r.hi[i],
							counts_once);
	int rc = sum_over(me->world_comm, &sum, 1, PP_DT_F64, PP_OP_SUM, e);
	*norm = sqrt(sum);
	return rc;
}

/* After a ZeRO-1 update each rank holds fresh values of its shares only:
 * each region's shares are gathered over the group that shares them. */
static int gather_params(trainer *t, pp_err *e)
{
	const pp_mesh *me = &t->mesh;
	if (!zero1(t))
		return 0;
	pp_comm *comm[OPTIM_REGIONS] = {me->dp_comm, me->edp_comm};
	for (int k = 0; k < me->v; k++) {
		pp_stage *st = &t->chunks[k];
		const optim_state *o = &t->opt[k];
		const size_t base[OPTIM_REGIONS] = {0, st->n_shared};
		const size_t end[OPTIM_REGIONS] = {st->n_shared, st->n_elems};
		for (int i = 0; i < OPTIM_REGIONS; i++) {
			if (!comm[i] || end[i] == base[i])
				continue;
			const size_t lo = o->r.lo[i], hi = o->r.hi[i], n = end[i] - base[i];
			const size_t share = gradsync_share(n, comm[i]->size);
			pp_real *all = t->gather, *mine = all + share * (size_t)comm[i]->size;
			t->ops->to_device(mine, st->w + lo, (hi - lo) * sizeof(pp_real));
			int rc = comm_all_gather(comm[i], mine, all, share, PP_DT_REAL, e);
			if (rc)
				return rc;
			/* the other ranks' shares, in the master weights and the
			 * compute copy (AdamW wrote both for this rank's own) */
			t->ops->to_device(st->w + base[i], all, (lo - base[i]) * sizeof(pp_real));
			t->ops->to_device(st->w + hi, all + (hi - base[i]), (end[i] - hi) * sizeof(pp_real));
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
	const pp_mesh *me = &t->mesh;
	double v[4] = {0, 0, 0, 0};
	for (int k = 0; me->tp_rank == 0 && k < me->v; k++) {
		const pp_stage *st = &t->chunks[k];
		v[0] += st->moe.aux, v[1] += st->moe.z;
		v[2] += (double)st->moe.dropped, v[3] += (double)st->moe.routed;
	}
	int rc = sum_over(me->world_comm, v, 4, PP_DT_F64, PP_OP_SUM, e);
	int layers = 0;
	for (int l = 0; l < t->cfg->model.n_layers; l++)
		layers += plan_layer_is_moe(&t->cfg->model, l);
	const double mbs = (double)t->cfg->microbatches * me->dp * (layers ? layers : 1);
	r->moe_aux = v[0] / mbs;
	r->moe_z = v[1] / mbs;
	r->moe_dropped = v[3] > 0 ? v[2] / v[3] : 0;
	return rc;
}

static int train_step(trainer *t, int *tok, int *tgt, step_result *r, pp_err *e)
{
	const pp_config *c = t->cfg;
	const int n = c->microbatches * c->microbatch;
	long valid;
	if (c->debug.hang_step == t->step + 1 && t->mesh.rank == t->mesh.world - 1)
		debug_hang(t->step + 1);
	prof_span data = prof_begin(t->prof, PROF_DATA);
	int rc = read_batch(t->train, n, c->seq_len, tok, tgt, &valid, e);
	prof_end(t->prof, &data, -1, -1, -1, (int64_t)n * c->seq_len * 2 * (int64_t)sizeof(int));
	double v = (double)valid;
	if (!rc)
		rc = sum_over(t->mesh.dp_comm, &v, 1, PP_DT_F64, PP_OP_SUM, e);
	if (rc)
		return rc;
	if (v == 0)
		return pp_errorf(e, PP_ERUNTIME, "step %ld: the batch has no target tokens",
				 t->step + 1);
	/* dscale = 1/valid makes the summed gradients those of the mean loss */
	pp_real dscale = (pp_real)(1.0 / v);
	double sum = 0;
	long dummy = 0;
	for (int k = 0; k < t->mesh.v; k++) {
		stage_zero_grad(&t->chunks[k]);
		memset(&t->chunks[k].moe, 0, sizeof t->chunks[k].moe);
	}
	if ((rc = pipeline_train(&t->pl, tok, tgt, dscale, &sum, e)))
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
		for (int k = 0; k < t->mesh.v; k++)
			optim_step(&t->opt[k], &t->chunks[k], c, t->step + 1, r->lr,
				   optim_clip_scale(c, r->gnorm));
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

/* The watchdog's end of a hung job: every rank (MPI_Abort), or this process. */
static void end_job(void *ctx, const char *why)
{
	trainer *t = ctx;
	comm_abort(t->mesh.world_comm, PP_ERUNTIME, why);
}

enum { STOP_NONE, STOP_RUNTIME, STOP_SIGNAL };

/* The step's agreement across ranks: whether to stop (*stop becomes the
 * largest reason of any rank), and the progress of the save in the
 * background (*bg), whose phases each end when they have ended on every
 * rank: the writes, then rank 0's commit. wait: until the save is
 * published. On an error *bg stays for the caller to free. */
static int save_progress(trainer *t, const train_opts *o, run_deadline *dl, ckpt_job **bg, int *stop,
			 bool wait, pp_err *e)
{
	for (;;) {
		ckpt_job *j = *bg;
		pp_err mine = {0};
		int failed = 0;
		if (j && (wait || !ckpt_job_busy(j)))
			failed = ckpt_job_join(j, &mine) != 0;
		int v[3] = {*stop, j && ckpt_job_busy(j), failed};
		int rc = sum_over(t->mesh.world_comm, v, 3, PP_DT_I32, PP_OP_MAX, e);
		*stop = v[0];
		if (rc || !j)
			return rc;
		if (v[2]) {
			if (!failed)
				return pp_errorf(e, PP_ERUNTIME, "checkpoint step %ld: another rank failed to "
						 "write its part (see its message)", j->cs.step);
			*e = mine;
			return mine.code;
		}
		if (v[1])
			return 0;
		if (j->phase == CKPT_JOB_WRITE) {
			/* every rank's files are written: rank 0 publishes them */
			j->phase = CKPT_JOB_COMMIT;
			if (t->mesh.rank == 0)
				ckpt_job_start(j, CKPT_JOB_COMMIT, NULL); /* a failure is the job's status */
			if (wait)
				continue;
			return 0;
		}
		double took = now() - j->t_start;
		deadline_save(dl, took);
		if (!o->quiet && trainer_leader(t))
			log_info("checkpoint step %ld written in the background in %.2f s", j->cs.step, took);
		ckpt_job_free(j);
		free(j);
		*bg = NULL;
		return 0;
	}
}

/* Saves a checkpoint of the current step, after waiting for the one in
 * flight. Synchronous; or with async, the step is blocked only while the
 * state is copied, and the rest goes on in the background (*bg). */
static int checkpoint(trainer *t, const train_opts *o, run_log *lg, run_deadline *dl, ckpt_job **bg,
		      bool async, pp_err *e)
{
	double s0 = now();
	int none = STOP_NONE, rc = 0;
	if (*bg && (rc = save_progress(t, o, dl, bg, &none, true, e)))
		return rc;
	double waited = now() - s0;
	bool say = !o->quiet && trainer_leader(t);
	if (!async) {
		rc = trainer_save(t, e);
		deadline_save(dl, now() - s0 - waited);
		if (!rc && say)
			log_info("saved checkpoint step %ld in %.3f s", t->step, now() - s0);
		return rc;
	}
	ckpt_job *j = malloc(sizeof *j);
	if (!j)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	if ((rc = save_prepare(t, j, e))) {
		ckpt_job_free(j);
		free(j);
		return rc;
	}
	j->t_start = s0 + waited;
	ckpt_job_start(j, CKPT_JOB_WRITE, NULL); /* a failure is the job's status */
	*bg = j;
	double blocked = now() - s0;
	char wait[64] = "";
	if (waited > 0.0005)
		snprintf(wait, sizeof wait, "%.3f s waiting for the previous save, %.3f s ", waited, blocked - waited);
	if (say)
		log_info("checkpoint step %ld: training blocked %.3f s (%scopying the state), writing it in "
			 "the background", t->step, blocked, wait);
	log_scalar(lg, t->step, "checkpoint_blocked_s", blocked);
	return 0;
}

int trainer_run(trainer *t, const train_opts *o, pp_err *e)
{
	pp_config *c = t->cfg;
	run_log lg = {0};
	int rc = 0;
	if (trainer_leader(t)) {
		char path[PP_PATH_MAX + 32];
		rc = fs_mkdir_p(c->run_dir, e);
		snprintf(path, sizeof path, "%s/metrics.jsonl", c->run_dir);
		if (!rc && !(lg.metrics = fopen(path, "a")))
			rc = pp_errorf(e, PP_ERUNTIME, "cannot open %s: %s", path, strerror(errno));
		snprintf(path, sizeof path, "%s/tensorboard", c->run_dir);
		if (!rc && c->tensorboard)
			rc = tb_open(&lg.tb, path, e);
	}
	if ((rc = agree(t, rc, e)))
		return rc;
	lg.flops_per_token = plan_flops_per_token(&c->model, c->seq_len);
	const char *device = pp_device_name(c->device);
#ifdef PP_CUDA
	if (c->device == PP_DEVICE_CUDA)
		device = pp_cuda_device_name();
#endif
	/* MFU only against a known dense bf16 peak (plan.c's table) */
	lg.peak = plan_peak_tflops(device) * 1e12;

	if (c->profile_steps[0] && (rc = open_profile(t, e)))
		return rc;
	size_t n = (size_t)c->microbatches * c->microbatch * c->seq_len;
	int *tok = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
	char fsdp[32] = "";
	if (c->fsdp > 1)
		snprintf(fsdp, sizeof fsdp, " fsdp=%d", c->fsdp);
	if (!o->quiet && trainer_leader(t))
		log_info("training %s on %d rank%s (pp=%d dp=%d%s tp=%d, %s, %d microbatches) "
			 "for %ld steps from step %ld; %.3g FLOP/token = 6N + 6*L*H*D*T; %d x %d "
			 "tokens per step",
			 c->model.preset, t->mesh.world, t->mesh.world > 1 ? "s" : "", c->pp, c->dp,
			 fsdp, c->tp, schedule_kind_name(c->schedule), c->microbatches, c->steps, t->step,
			 lg.flops_per_token, c->global_batch, c->seq_len);
	if (!o->quiet && trainer_leader(t))
		log_state_bytes(t);
	if (!o->quiet && trainer_leader(t)) {
		if (lg.peak > 0)
			log_info("device %s, dtype %s: MFU against its dense bf16 peak of %.1f TFLOP/s",
				 device, pp_type_name(c->dtype), lg.peak / 1e12);
		else
			log_info("device %s, dtype %s: no known peak, so no MFU", device,
				 pp_type_name(c->dtype));
	}
	watchdog *wd = NULL;
	if (!rc && c->step_timeout > 0)
		rc = watchdog_start(&wd, c->step_timeout, end_job, t, e);
	run_deadline dl;
	deadline_init(&dl, c->max_runtime);
	ckpt_job *bg = NULL; /* an asynchronous save in flight */
	while (t->step < c->steps && !rc) {
		step_result res = {0};
		double t0 = now();
		watchdog_arm(wd, t->step + 1);
		if ((rc = prof_rec_step_begin(t->prof, t->step + 1, e)))
			break;
		prof_span step = prof_begin(t->prof, PROF_STEP);
		rc = train_step(t, tok, tgt, &res, e);
		prof_end(t->prof, &step, -1, -1, -1, 0);
		if (rc)
			break;
		log_step(t, &lg, o, &res, now() - t0);
		deadline_step(&dl, now() - t0);
		if (c->eval_interval > 0 && (t->step % c->eval_interval == 0 || t->step == c->steps)) {
			prof_span ev = prof_begin(t->prof, PROF_EVAL);
			rc = run_eval(t, &lg, e);
			prof_end(t->prof, &ev, -1, -1, -1, 0);
		}
		/* a signal may reach the ranks at different steps: agree */
		int stop = o->stop && *o->stop ? STOP_SIGNAL : deadline_near(&dl) ? STOP_RUNTIME : STOP_NONE;
		if (!rc)
			rc = save_progress(t, o, &dl, &bg, &stop, false, e);
		watchdog_disarm(wd);
		bool period = c->checkpoint_period > 0 && t->step % c->checkpoint_period == 0;
		bool last = t->step == c->steps && c->save_on_completion;
		if (!rc && (period || stop || last)) {
			prof_span save = prof_begin(t->prof, PROF_CHECKPOINT);
			rc = checkpoint(t, o, &lg, &dl, &bg, c->async_checkpointing && !stop && !last, e);
			prof_end(t->prof, &save, -1, -1, -1, 0);
		}
		if (!rc)
			rc = prof_rec_step_end(t->prof, t->step, e);
		if (!rc && stop && t->step < c->steps) {
			/* exit status 75: the batch script requeues the job */
			char why[128];
			if (stop == STOP_SIGNAL)
				snprintf(why, sizeof why, "stopped by a signal");
			else
				snprintf(why, sizeof why, "stopped by max_runtime=%g s with %.0f s left",
					 c->max_runtime, c->max_runtime - deadline_elapsed(&dl));
			if (trainer_leader(t))
				log_info("%s at step %ld after saving a checkpoint", why, t->step);
			rc = pp_errorf(e, PP_ESTOPPED, "%s at step %ld; checkpoint saved", why, t->step);
		}
	}
	if (bg && !rc) {
		int none = STOP_NONE;
		rc = save_progress(t, o, &dl, &bg, &none, true, e);
	}
	if (bg) { /* failed: what it wrote is not a checkpoint */
		ckpt_job_free(bg); /* joins its thread first */
		free(bg);
	}
	watchdog_stop(wd);
	/* a run that ends inside the window: every rank is here, unless one failed */
	pp_err pe;
	int prc = prof_rec_finish(t->prof, !rc || rc == PP_ESTOPPED, &pe);
	if (prc && !rc) {
		rc = prc;
		*e = pe;
	}
	if (!rc && !o->quiet)
		log_timing(t, &lg);
	if (!rc && !o->quiet && trainer_leader(t) && fsdp_on(t))
		log_info("fsdp: %ld all-gathers of a layer's parameters, %ld of them issued while the "
			 "layer before computed (%ld still in flight when needed); %ld reduce-scatters",
			 t->fsdp.stats.gathers, t->fsdp.stats.prefetched, t->fsdp.stats.waited,
			 t->fsdp.stats.reduces);
	else if (!rc && !o->quiet && trainer_leader(t) && t->mesh.dp_comm)
		log_info("gradient sum over dp: %d reduction(s) overlapped with the backward passes, "
			 "%d after them (grad_bucket_mb=%g)",
			 t->sync.early, t->sync.late, c->grad_bucket_mb);
	free(tok);
	free(tgt);
	if (lg.metrics)
		fclose(lg.metrics);
	tb_close(lg.tb);
	return rc;
}

/* ---- sampling ------------------------------------------------------------ */

int trainer_sample(trainer *t, const char *prompt, int n, double temperature, FILE *out,
		   pp_err *e)
{
	const pp_config *c = t->cfg;
	if (t->mesh.world != 1 || t->mesh.v != 1)
		return pp_errorf(e, PP_EUSAGE, "--sample runs in a single process (pp=1 dp=1 tp=1)");
	pp_tokenizer *tk = NULL;
	tok_ids ids = {0};
	int rc = c->tokenizer[0] ? tok_load(&tk, c->tokenizer, e) : 0;
	if (!rc)
		rc = decode_prompt_ids(tk, prompt, c->model.vocab_size, &ids, e);
	sample_params sp = sample_defaults();
	sp.temperature = temperature;
	sp.seed = c->seed;
	int *gen = rc ? NULL : malloc((ids.n + (size_t)n) * sizeof(int));
	if (!rc && !gen)
		rc = pp_errorf(e, PP_ERUNTIME, "--sample: out of memory");
	if (!rc)
		rc = decode_one(&t->chunks[0], ids.ids, (int)ids.n, n, &sp, tk, out, gen, e);
	free(gen);
	tok_ids_free(&ids);
	if (tk)
		tok_free(tk);
	return rc;
}
