/* Building one rank of a training run: its layout, its process groups, its
 * chunks (stages) with their optimizer state, the gradient exchanges, the
 * pipeline and the data. */
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "../ckpt/stage.h"
#include "../formats/stageload.h"
#include "internal.h"

/* The tp group as the model sees it. */
static int tp_allreduce(void *ctx, void *buf, size_t n, int type, int op, pp_err *e)
{
	return comm_allreduce(ctx, buf, n, comm_dtype_of(type),
			      op == PP_REDUCE_MAX ? PP_OP_MAX : PP_OP_SUM, e);
}

int trainer_open(trainer *t, pp_config *c, bool params_only, pp_err *e)
{
	memset(t, 0, sizeof *t);
	t->cfg = c;
	t->params_only = params_only;
	const pp_model_cfg *m = &c->model;
	int rc = pp_ops_select(c->device, c->dtype, &t->ops, e);
	if (rc)
		return rc;
	pp_comm *world = NULL;
	if (params_only) {
		/* one process holds the whole model, whatever the layout, with
		 * room for one token: no activations to speak of */
		pp_config whole = *c;
		whole.pp = whole.dp = whole.fsdp = whole.tp = whole.ep = whole.virtual_stages = 1;
		whole.n_stage_layers = 0;
		whole.schedule = SCHED_1F1B;
		whole.microbatches = whole.microbatch = whole.seq_len = 1;
		rc = layout_build(&t->lay, &whole, 0, e);
	} else {
		if ((rc = boot_init(&t->proc, e)))
			return rc;
		t->booted = true;
		log_set_prefix("pp-train", t->proc.rank, t->proc.size);
		if ((rc = layout_check_world(c, t->proc.size, e)) ||
		    (rc = layout_build(&t->lay, c, t->proc.rank, e)))
			return rc;
		if (t->proc.size > 1) {
			const pp_comm_ops *co = comm_find(c->device == PP_DEVICE_CUDA ? "nccl"
										      : "mpi");
			if (!co)
				return pp_errorf(e, PP_EUSAGE,
						 "device=%s: no communication backend",
						 pp_device_name(c->device));
			if ((rc = co->init(&world, &t->proc, c->comm_timeout, e)))
				return rc;
		}
		rc = mesh_split(&t->mesh, &t->lay, world, e);
	}
	if (rc)
		return rc;
#ifdef PP_CUDA
	if (c->device == PP_DEVICE_CUDA && (rc = pp_cuda_init(boot_device(&t->proc), e)))
		return rc;
	const int cc = c->device == PP_DEVICE_CUDA ? pp_cuda_capability() : 0;
	if (c->fp8.recipe != PP_FP8_NONE && cc && cc < 89)
		return pp_errorf(e, PP_EUSAGE,
				 "fp8.recipe=%s needs a GPU with FP8 tensor cores (compute "
				 "capability 8.9 or later: Ada, Hopper); %s is %d.%d",
				 pp_fp8_recipe_names[c->fp8.recipe], pp_cuda_device_name(), cc / 10,
				 cc % 10);
#endif

	const pp_layout *l = &t->lay;
	const pp_mesh *me = &t->mesh;
	t->chunks = calloc((size_t)l->v, sizeof *t->chunks);
	t->opt = calloc((size_t)l->v, sizeof *t->opt);
	if (!t->chunks || !t->opt)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	size_t hold[LAYOUT_MAX_CHUNKS] = {0};
	for (int k = 0; k < l->v; k++) {
		stage_spec sp = stage_spec_of(c, l, k);
		sp.tp.allreduce = tp_allreduce;
		sp.tp.ctx = me->tp_comm;
		sp.ep.comm = me->ep_comm;
		/* the MoE losses' mean over the step's microbatches */
		sp.moe_loss_scale = 1.0 / ((double)c->microbatches * l->data);
		if (!params_only && me->data_comm && c->grad_bucket_mb > 0 && !fsdp_on(t))
			sp.grad_ready = (stage_grad_hook){train_grads_final, t};
		pp_stage *st = &t->chunks[k];
		/* under fsdp the stage keeps its share and asks for the rest */
		if (fsdp_on(t))
			sp.units = (stage_units){fsdp_use, fsdp_done, &t->fsdp, l->fsdp,
						 l->fsdp_rank};
		if ((rc = stage_create(st, m, t->ops, &sp, e)))
			return rc;
		/* ZeRO-1: this data rank updates a share of each region of the
		 * buffer; fsdp: this rank keeps and updates its share of the
		 * fsdp group's */
		optim_ranges r;
		if (fsdp_on(t))
			gradsync_ranges(st, true, l->fsdp, l->fsdp_rank, 1, &r);
		else
			gradsync_ranges(st, zero1(t), l->data, l->data_rank, l->ep, &r);
		if (!params_only && (rc = optim_create(&t->opt[k], t->ops, &r, e)))
			return rc;
		/* a tied embedding is summed with the pipeline's other end first */
		if (m->tied_embeddings && (l->pp > 1 || l->v > 1) && (st->first || st->last) &&
		    !st->params[0].frozen)
			hold[k] = st->params[0].n;
	}
	if (params_only)
		return 0;
	if (fsdp_on(t))
		rc = fsdp_init(&t->fsdp, t->chunks, l->v, me->fsdp_comm, me->rep_comm, t->ops, e);
	else
		rc = gradsync_init(&t->sync, t->chunks, l->v, hold, zero1(t), me->data_comm,
				   me->edp_comm, l->ep, t->ops, c->grad_bucket_mb, e);
	if (rc)
		return rc;
	if (zero1(t)) {
		size_t most = 0;
		for (int k = 0; k < l->v; k++) {
			const pp_stage *st = &t->chunks[k];
			size_t n = gradsync_gather_len(st->n_shared, st->n_elems - st->n_shared,
						       l->data, l->ep);
			most = n > most ? n : most;
		}
		t->gather = t->ops->alloc(most * sizeof(pp_real));
		t->gather_n = most;
		if (!t->gather)
			return pp_errorf(
				e, PP_ERUNTIME,
				"out of %s memory for the ZeRO-1 parameter gather (%.3g GB)",
				pp_device_name(c->device), 1e-9 * (double)(most * sizeof(pp_real)));
	}
	if ((rc = pipeline_init(&t->pl, c->schedule, t->chunks, l->v, l->pp, l->pp_rank,
				c->microbatches, me->pp_comm, e)))
		return rc;
	t->pl.pad = (sched_costs){1e-3 * c->debug.fwd_ms, 1e-3 * c->debug.bwd_ms,
				  1e-3 * c->debug.bwd_w_ms};
	if ((rc = data_open(&t->train, c, "train", &l->seqs, e)))
		return rc;
	if (c->packing &&
	    !(t->pos = malloc((size_t)c->microbatches * c->microbatch * c->seq_len * sizeof(int))))
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (c->lora.rank > 0 && c->lora.dropout > 0 &&
	    !(t->noise = calloc((size_t)c->microbatches, sizeof *t->noise)))
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (c->eval_interval > 0 && (rc = data_open(&t->val, c, "val", &l->seqs, e)))
		return rc;
	return train_tasks_open(t, e);
}

void trainer_close(trainer *t)
{
	train_tasks_close(t);
	prof_rec_free(t->prof);
	data_close(t->train);
	data_close(t->val);
	pipeline_free(&t->pl);
	gradsync_free(&t->sync);
	fsdp_free(&t->fsdp);
	if (t->gather)
		t->ops->free(t->gather);
	for (int k = 0; t->chunks && k < t->lay.v; k++) {
		optim_free(&t->opt[k]);
		stage_free(&t->chunks[k]);
	}
	free(t->chunks);
	free(t->opt);
	free(t->pos);
	free(t->noise);
	for (int k = 0; t->staging && k < t->lay.v; k++) {
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

/* load_parameters_path: one line per model key the source has otherwise */
static void model_differs(void *ctx, const char *key, const char *there, const char *here)
{
	const trainer *t = ctx;
	if (t->lay.rank == 0)
		log_info("warning: load_parameters_path %s has model.%s=%s; the config says %s",
			 t->cfg->load_parameters_path, key, there, here);
}

/* A LoRA run on load_parameters_path: the base's fingerprint goes into the
 * config its checkpoints keep (lora.base_sha256), or, given, must match. */
static int note_base(trainer *t, pp_err *e)
{
	pp_config *c = t->cfg;
	char hex[65];
	int rc = tio_base_sha256(c->load_parameters_path, hex, e);
	if (!rc && c->lora.base_sha256[0] && strcmp(hex, c->lora.base_sha256))
		rc = pp_errorf(e, PP_EUSAGE,
			       "lora.base_sha256 is %s, but load_parameters_path %s has %s",
			       c->lora.base_sha256, c->load_parameters_path, hex);
	if (rc)
		return rc;
	snprintf(c->lora.base_sha256, sizeof c->lora.base_sha256, "%s", hex);
	json_object_set_new(json_object_get(c->json, "lora"), "base_sha256", json_string(hex));
	return 0;
}

int trainer_init(trainer *t, pp_err *e)
{
	const pp_config *c = t->cfg;
	for (int k = 0; k < t->lay.v; k++)
		stage_init_params(&t->chunks[k], c->seed);
	t->step = 0;
	if (!c->load_parameters_path[0])
		return 0;
	const char *path = c->load_parameters_path, *format = tio_guess_format(path);
	tio_source *src = NULL;
	char what[PP_PATH_MAX + 32];
	snprintf(what, sizeof what, "load_parameters_path %s", path);
	int rc = tio_open_source(format, path, &src, e);
	if (!rc)
		tio_model_diff(src, c, model_differs, t);
	for (int k = 0; k < t->lay.v && !rc; k++)
		rc = tio_load_stage(&t->chunks[k], src, what, e);
	if (src)
		src->close(src);
	if (!rc && fsdp_on(t))
		fsdp_params_changed(&t->fsdp);
	if (rc && !strstr(e->msg, path))
		pp_err_prefix(e, "%s", what);
	if (!rc && c->lora.rank > 0)
		rc = note_base(t, e);
	if ((rc = agree(t, rc, e)))
		return rc;
	if (t->lay.rank == 0)
		log_info("parameters from %s (%s); AdamW and the data start afresh at step 0", path,
			 format);
	return 0;
}
