/* Between the trainer and checkpoints: the host copies a save writes, the
 * part of the checkpoint each rank writes, and resuming from one. */
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "../ckpt/stage.h"
#include "../formats/stageload.h"
#include "internal.h"

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
	if (!t->staging && !(t->staging = calloc((size_t)t->lay.v, sizeof *t->staging)))
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
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint save: out of host memory for %zu parameters", n);
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
	const int tp = t->lay.tp;
	const size_t n = p->n, cols = (size_t)p->shape[1], rows = (size_t)p->block_rows;
	const pp_real *src[3] = {h->w + p->off, h->m ? h->m + p->off : NULL,
				 h->v ? h->v + p->off : NULL};
	pp_real *all = malloc(n * (size_t)tp * sizeof(pp_real));
	int rc = 0;
	for (int i = 0; i < 3 && src[i] && !rc; i++) {
		whole[i] = malloc(n * (size_t)tp * sizeof(pp_real));
		rc = comm_all_gather(t->mesh.tp_comm, src[i], all, n, PP_DT_REAL, e);
		/* rank r's block b goes to global rows b * tp * rows + r * rows */
		for (int r = 0; !rc && r < tp; r++)
			for (int b = 0; b < p->n_blocks; b++)
				memcpy(whole[i] + ((size_t)b * tp + r) * rows * cols,
				       all + (size_t)r * n + (size_t)b * rows * cols,
				       rows * cols * sizeof(pp_real));
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
	const int i = stage_is_expert(st, p) ? OPTIM_EXPERTS : OPTIM_SHARED;
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
	*q = (ckpt_optim_part){.name = p->name,
			       .ndim = p->ndim,
			       .n_ranges = n,
			       .begin = begin,
			       .end = end,
			       .m = h->m + at,
			       .v = h->v + at};
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
static int build_shard(trainer *t, ckpt_host *hs, ckpt_state *cs, void ***owned, int *n_owned,
		       pp_err *e)
{
	int cap = 0, rc = 0;
	for (int k = 0; k < t->lay.v; k++)
		cap += t->chunks[k].n_params + ckpt_fp8_count(&t->chunks[k]);
	cs->tensors = calloc((size_t)cap + 1, sizeof *cs->tensors);
	cs->optim = cs->optim_per_dp ? calloc((size_t)cap + 1, sizeof *cs->optim) : NULL;
	/* per tensor: 3 gathered arrays, 2 range arrays; per chunk, FP8's
	 * names and copy */
	*owned = calloc((size_t)cap * 5 + 2 * (size_t)t->lay.v + 1, sizeof **owned);
	*n_owned = 0;
	if (!cs->tensors || !*owned || (cs->optim_per_dp && !cs->optim))
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	for (int k = 0; k < t->lay.v && !rc; k++) {
		const pp_stage *st = &t->chunks[k];
		/* under ZeRO-1 only parameters are gathered */
		const ckpt_host src = cs->optim_per_dp ? (ckpt_host){.w = hs[k].w} : hs[k];
		for (int i = 0; i < st->n_params && !rc; i++) {
			const pp_param *p = &st->params[i];
			if (stage_is_embedding_copy(st, p) || p->frozen)
				continue;
			pp_real *whole[3] = {NULL, NULL, NULL};
			bool fused = p->n_blocks > 1 && t->lay.tp > 1;
			if (fused && (rc = gather_fused(t, p, &src, whole, e)))
				break;
			if (fused)
				for (int j = 0; j < 3; j++)
					(*owned)[(*n_owned)++] = whole[j];
			if (!p->tp_owner)
				continue;
			if (cs->optim_per_dp &&
			    (rc = add_optim_part(st, p, &hs[k], fused, cs, *owned, n_owned, e)))
				break;
			if ((fused && t->lay.tp_rank != 0) || !ckpt_shard_holds(st, p))
				continue;
			ckpt_tensor *c = &cs->tensors[cs->n_tensors++];
			ckpt_saved_block(p, c);
			c->param = fused ? whole[0] : src.w + p->off;
			if (!cs->optim_per_dp && src.m) { /* the ranges are everything, in order */
				c->m = fused ? whole[1] : src.m + p->off;
				c->v = fused ? whole[2] : src.v + p->off;
			}
		}
		/* FP8 scaling state: whole on every tp and ep rank, saved by the
		 * first */
		const int nf = t->lay.tp_rank == 0 && t->lay.ep_rank == 0 ? ckpt_fp8_count(st) : 0;
		ckpt_name *names = nf ? calloc((size_t)nf, sizeof *names) : NULL;
		pp_real *copy = NULL;
		if (nf && (!names || ckpt_fp8_entries(st, cs, names, &copy)))
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
		if (nf) {
			(*owned)[(*n_owned)++] = names;
			(*owned)[(*n_owned)++] = copy;
		}
	}
	return rc;
}

static void fill_header(trainer *t, ckpt_state *cs)
{
	const pp_layout *me = &t->lay;
	cs->step = t->step;
	cs->rng[0] = t->cfg->seed;
	/* without a loader (pp-init) the position is the start of the data */
	cs->n_data_state = t->train ? data_get_state(t->train, cs->data_state, PP_CKPT_DATA_STATE)
				    : 1;
	cs->pp_rank = me->pp_rank;
	cs->tp_rank = me->tp_rank;
	cs->dp_rank = me->data_rank;
	cs->ep_rank = me->ep_rank;
	cs->pp_size = me->pp;
	cs->tp_size = me->tp;
	cs->dp_size = me->data;
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
int train_save_prepare(trainer *t, ckpt_job *j, pp_err *e)
{
	const pp_layout *me = &t->lay;
	pp_comm *world = t->mesh.world_comm;
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
	rc = agree(t, rc, e);                       /* build_shard gathers fused tensors over tp */
	fill_header(t, &j->cs);
	void **owned = NULL;
	int n_owned = 0;
	if (!rc)
		rc = build_shard(t, hs, &j->cs, &owned, &n_owned, e);
	for (int i = 0; i < n_owned; i++)
		ckpt_job_own(j, owned[i]);
	free(owned);
	j->cs.config_json = ckpt_job_own(j, pp_config_dump(t->cfg));
	j->write_shard = me->data_rank < me->ep; /* the first ep group: one copy of everything */
	j->write_optim = j->cs.optim_per_dp && me->data_rank < (fsdp_on(t) ? me->fsdp : me->data);
	return rc;
}

/* Every rank: agrees that every rank's write succeeded (rc: this rank's),
 * then rank 0 publishes the checkpoint. */
int train_save_commit(trainer *t, ckpt_job *j, int rc, pp_err *e)
{
	rc = agree(t, rc, e);
	if (!rc && t->lay.rank == 0)
		rc = ckpt_job_run(j, CKPT_JOB_COMMIT, e);
	return agree(t, rc, e);
}

int trainer_save(trainer *t, pp_err *e)
{
	ckpt_job j;
	int rc = train_save_prepare(t, &j, e);
	if (!rc)
		rc = ckpt_job_run(&j, CKPT_JOB_WRITE, e);
	rc = train_save_commit(t, &j, rc, e);
	ckpt_job_free(&j);
	return rc;
}

/* Loads this rank's tensors (any layout the checkpoint was saved in: the
 * reader assembles each requested slice from the files that hold it), and
 * the AdamW state of its ranges: m and v are read, into host buffers laid
 * out as the whole chunk, for the blocks that meet the ranges only. */
static int load_chunks(trainer *t, const char *dir, ckpt_state *cs, bool adam, pp_err *e)
{
	const pp_layout *me = &t->lay;
	int cap = 0, nf = 0, rc = 0;
	for (int k = 0; k < me->v; k++) {
		cap += 3 * t->chunks[k].n_params;
		nf += ckpt_fp8_count(&t->chunks[k]);
	}
	cs->tensors = calloc((size_t)(cap + nf) + 1, sizeof *cs->tensors);
	ckpt_host *hs = calloc(me->v > 0 ? (size_t)me->v : 1, sizeof *hs);
	ckpt_name *names = calloc((size_t)nf + 1, sizeof *names);
	if (!cs->tensors || !hs || !names)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint load: out of memory");
	for (int k = 0; k < me->v && !rc; k++) {
		const pp_stage *st = &t->chunks[k];
		const optim_state *o = &t->opt[k];
		size_t n = st->n_elems;
		hs[k] = (ckpt_host){malloc(n * sizeof(pp_real) + 1), calloc(n + 1, sizeof(pp_real)),
				    calloc(n + 1, sizeof(pp_real)), o->r};
		if (!hs[k].w || !hs[k].m || !hs[k].v)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "checkpoint load: out of host memory for %zu parameters", n);
		/* without AdamW state in the checkpoint, m and v stay zero: a fresh optimizer */
		ckpt_host want = hs[k];
		if (!adam)
			want.m = want.v = NULL;
		if (!rc)
			ckpt_add_entries(st, &want, cs);
	}
	/* FP8 scaling state, in place (a checkpoint without it leaves it as it is) */
	for (int k = 0, at = 0; k < me->v && !rc; at += ckpt_fp8_count(&t->chunks[k]), k++)
		ckpt_fp8_entries(&t->chunks[k], cs, names + at, NULL);
	if (!rc)
		rc = ckpt_load(dir, cs, e);
	free(names);
	for (int k = 0; hs && k < me->v; k++) {
		const pp_stage *st = &t->chunks[k];
		const optim_state *o = &t->opt[k];
		if (!rc) {
			t->ops->to_device(st->w, hs[k].w + st->w_lo,
					  (st->w_hi - st->w_lo) * sizeof(pp_real));
			stage_weights_changed(&t->chunks[k]);
			for (int i = 0; i < OPTIM_REGIONS; i++) {
				size_t lo = o->r.lo[i], n = o->r.hi[i] - lo,
				       at = optim_ranges_pos(&o->r, lo);
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

/* lora.base_sha256 as the checkpoint in dir recorded it, into the run's
 * config (which it saves again) */
static int recorded_base(trainer *t, const char *dir, pp_err *e)
{
	char *text = NULL;
	int rc = ckpt_read_config(dir, &text, e);
	json_t *saved = rc ? NULL : json_loads(text, 0, NULL);
	free(text);
	const char *sha = json_string_value(
		json_object_get(json_object_get(saved, "lora"), "base_sha256"));
	pp_config *c = t->cfg;
	if (sha && sha[0]) {
		snprintf(c->lora.base_sha256, sizeof c->lora.base_sha256, "%s", sha);
		json_object_set_new(json_object_get(c->json, "lora"), "base_sha256",
				    json_string(sha));
	}
	json_decref(saved);
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
	if (t->lay.rank == 0)
		rc = ckpt_find_resume(c->run_dir, c->resume_from, dir, sizeof dir, &found, skipped,
				      sizeof skipped, e);
	step = found;
	if (!(rc = agree(t, rc, e)) && t->mesh.world_comm)
		rc = comm_broadcast(t->mesh.world_comm, &step, 1, PP_DT_I64, 0, e);
	if (rc || step < 0)
		return rc;
	if (t->lay.rank == 0 && skipped[0])
		log_info("warning: %s; resuming from %s, the newest sound one", skipped, dir);
	if (t->lay.rank != 0)
		rc = ckpt_step_dir(c->run_dir, (long)step, dir, sizeof dir, e);
	ckpt_state cs = {0};
	ckpt_manifest m = {0};
	bool adam = false;
	if (!rc && !(rc = ckpt_read_manifest(dir, &m, e)))
		rc = ckpt_holds_optimizer(&m, &adam, e);
	ckpt_manifest_free(&m);
	/* a LoRA run's checkpoints hold its adapters: the base first, the one
	 * the checkpoint recorded */
	if (!rc && t->cfg->lora.rank > 0)
		rc = recorded_base(t, dir, e);
	for (int k = 0; k < t->lay.v && !rc && t->cfg->lora.rank > 0; k++)
		rc = tio_load_base(&t->chunks[k], t->cfg, e);
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
	if (t->lay.rank == 0 && !adam)
		log_info("%s holds parameters only: AdamW starts from zero", dir);
	t->step = cs.step;
	*resumed = true;
	return 0;
}

/* ---- the loop ---------------------------------------------------------- */
