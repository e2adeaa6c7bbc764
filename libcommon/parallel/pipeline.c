#include "pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tags: the schedules put a rank's messages in one global order, so the
 * messages of one kind between two ranks pair up in posting order. */
enum { TAG_ACT = 1, TAG_GRAD = 2 };

int pipeline_init(pipeline *pl, sched_kind kind, pp_stage *chunks, int v, int p, int rank, int m,
		  pp_comm *pp, pp_err *e)
{
	memset(pl, 0, sizeof *pl);
	pl->chunks = chunks;
	pl->v = v;
	pl->p = p;
	pl->rank = rank;
	pl->m = m;
	pl->pp = pp;
	int rc = schedule_build(kind, p, v, m, rank, &pl->acts, &pl->n_acts, e);
	if (rc)
		return rc;
	const pp_ops *o = chunks[0].ops;
	pl->width = (size_t)chunks[0].B * chunks[0].T * chunks[0].cfg->d_model;
	size_t cells = (size_t)m * v;
	pl->act_in = o->alloc(cells * pl->width * pp_act_size(o));
	pl->grad_in = o->alloc(cells * pl->width * pp_act_size(o));
	pl->din = o->alloc(cells * pl->width * pp_act_size(o));
	pl->out = calloc(cells, sizeof *pl->out);
	pl->slot = calloc(cells, sizeof *pl->slot);
	int max_slots = 0;
	for (int c = 0; c < v; c++)
		max_slots = chunks[c].n_slots > max_slots ? chunks[c].n_slots : max_slots;
	pl->free_slots = calloc((size_t)v * (size_t)max_slots, sizeof(int));
	pl->n_free = calloc((size_t)v, sizeof(int));
	pl->last_bwd = calloc((size_t)v, sizeof(int));
	if (!pl->act_in || !pl->grad_in || !pl->din || !pl->out || !pl->slot || !pl->free_slots ||
	    !pl->n_free || !pl->last_bwd) {
		pipeline_free(pl);
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %d microbatches in flight", m);
	}
	for (int c = 0; c < v; c++)
		pl->last_bwd[c] = -1;
	for (int i = 0; i < pl->n_acts; i++)
		if (pl->acts[i].op == SCHED_BWD || pl->acts[i].op == SCHED_BWD_W)
			pl->last_bwd[pl->acts[i].vstage / p] = i;
	for (int c = 0; c < v; c++) {
		pl->n_free[c] = chunks[c].n_slots;
		for (int k = 0; k < chunks[c].n_slots; k++)
			pl->free_slots[c * max_slots + k] = chunks[c].n_slots - 1 - k;
	}
	return 0;
}

void pipeline_free(pipeline *pl)
{
	if (pl->chunks) {
		const pp_ops *o = pl->chunks[0].ops;
		o->free(pl->act_in);
		o->free(pl->grad_in);
		o->free(pl->din);
	}
	free(pl->acts);
	free(pl->out);
	free(pl->slot);
	free(pl->free_slots);
	free(pl->n_free);
	free(pl->last_bwd);
	memset(pl, 0, sizeof *pl);
}

static int max_slots(const pipeline *pl)
{
	int n = 0;
	for (int c = 0; c < pl->v; c++)
		n = pl->chunks[c].n_slots > n ? pl->chunks[c].n_slots : n;
	return n;
}

/* cell of (microbatch, local chunk) in the (m, v) tables */
static size_t cell(const pipeline *pl, int mb, int c) { return (size_t)mb * pl->v + c; }
static pp_act *buf(const pipeline *pl, pp_act *base, int mb, int c)
{
	return pp_act_at(pl->chunks[0].ops, base, cell(pl, mb, c) * pl->width);
}

/* Sleeps until t0 + seconds on CLOCK_MONOTONIC. */
static void pad_to(const struct timespec *t0, double seconds)
{
	if (seconds <= 0)
		return;
	struct timespec t = *t0;
	long long ns = t.tv_nsec + (long long)(seconds * 1e9);
	t.tv_sec += (time_t)(ns / 1000000000);
	t.tv_nsec = (long)(ns % 1000000000);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL))
		;
}

static double pad_of(const pipeline *pl, sched_op op)
{
	switch (op) {
	case SCHED_FWD:
		return pl->pad.fwd;
	case SCHED_BWD:
		return pl->pad.bwd;
	case SCHED_BWD_I:
		return pl->pad.bwd - pl->pad.bwd_w;
	case SCHED_BWD_W:
		return pl->pad.bwd_w;
	default:
		return 0;
	}
}

static int run_action(pipeline *pl, const sched_action *a, const pipeline_batch *b, pp_real dscale,
		      double *loss_sum, pp_err *e)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	prof_span span = prof_begin(pl->prof, (prof_op)a->op);
	const int p = pl->p, s = a->vstage, c = s / p, mb = a->mb;
	const size_t N = (size_t)pl->chunks[0].B * pl->chunks[0].T;
	pp_stage *st = &pl->chunks[c];
	const pp_dtype dt = comm_dtype_of(st->ops->act_type);
	size_t k = cell(pl, mb, c);
	int rc = 0;

	switch (a->op) {
	case SCHED_FWD: {
		if (!pl->n_free[c])
			return pp_errorf(e, PP_ERUNTIME,
					 "stage %d has no free slot for microbatch %d", s, mb);
		int slot = pl->free_slots[c * max_slots(pl) + --pl->n_free[c]];
		pl->slot[k] = slot;
		/* the previous virtual stage: on another rank (p > 1), or this rank's previous chunk */
		const pp_act *in = st->first ? NULL
				   : p > 1   ? buf(pl, pl->act_in, mb, c)
					     : pl->out[cell(pl, mb, c - 1)];
		rc = stage_set_positions(st, slot, b->pos ? b->pos + mb * N : NULL, e);
		stage_set_noise(st, slot, b->noise ? b->noise[mb] : (stage_noise){0, 0});
		if (!rc)
			rc = stage_forward(st, slot, b->tokens + mb * N, in, b->targets + mb * N,
					   dscale, loss_sum, NULL, &pl->out[k], e);
		break;
	}
	case SCHED_BWD:
	case SCHED_BWD_I:
	case SCHED_BWD_W: {
		int part = a->op == SCHED_BWD     ? STAGE_BWD_FULL
			   : a->op == SCHED_BWD_I ? STAGE_BWD_INPUT
						  : STAGE_BWD_WEIGHT;
		const pp_act *dout = st->last ? NULL
				     : p > 1  ? buf(pl, pl->grad_in, mb, c)
					      : buf(pl, pl->din, mb, c + 1);
		pp_act *din = NULL;
		int last = a - pl->acts == pl->last_bwd[c] ? STAGE_BWD_LAST : 0;
		rc = stage_backward(st, pl->slot[k], part | last, dout, &din, e);
		if (!rc && din && part != STAGE_BWD_WEIGHT)
			st->ops->to_device(buf(pl, pl->din, mb, c), din,
					   pl->width * pp_act_size(st->ops));
		if (!rc && schedule_ends_hold(a->op))
			pl->free_slots[c * max_slots(pl) + pl->n_free[c]++] = pl->slot[k];
		break;
	}
	case SCHED_SEND_ACT:
		rc = comm_send(pl->pp, pl->out[k], pl->width, dt, a->peer, TAG_ACT, e);
		break;
	case SCHED_RECV_ACT: /* the input of stage s + 1, on this rank */
		rc = comm_recv(pl->pp, buf(pl, pl->act_in, mb, (s + 1) / p), pl->width, dt, a->peer,
			       TAG_ACT, e);
		break;
	case SCHED_SEND_GRAD:
		rc = comm_send(pl->pp, buf(pl, pl->din, mb, c), pl->width, dt, a->peer, TAG_GRAD,
			       e);
		break;
	case SCHED_RECV_GRAD: /* the output gradient of stage s - 1, on this rank */
		rc = comm_recv(pl->pp, buf(pl, pl->grad_in, mb, (s - 1) / p), pl->width, dt,
			       a->peer, TAG_GRAD, e);
		break;
	}
	if (rc) {
		char what[64];
		return pp_err_prefix(e, "%s", schedule_action_format(a, what, sizeof what));
	}
	pad_to(&t0, pad_of(pl, a->op));
	bool msg = a->op >= SCHED_SEND_ACT;
	prof_end(pl->prof, &span, mb, s, msg ? a->peer : -1,
		 msg ? (int64_t)(pl->width * pp_act_size(st->ops)) : 0);
	return 0;
}

int pipeline_train(pipeline *pl, const pipeline_batch *b, pp_real dscale, double *loss_sum,
		   pp_err *e)
{
	for (int i = 0; i < pl->n_acts; i++) {
		int rc = run_action(pl, &pl->acts[i], b, dscale, loss_sum, e);
		if (rc)
			return rc;
	}
	return 0;
}

int pipeline_eval(pipeline *pl, int n_mb, const pipeline_batch *b, double *loss_sum, long *n_valid,
		  pp_err *e)
{
	const int p = pl->p, S = p * pl->v;
	const size_t N = (size_t)pl->chunks[0].B * pl->chunks[0].T;
	const pp_dtype dt = comm_dtype_of(pl->chunks[0].ops->act_type);
	/* every rank walks (microbatch, virtual stage) in the same global order */
	for (int mb = 0; mb < n_mb; mb++) {
		pp_act *prev = NULL; /* output of this rank's previous chunk (p == 1) */
		for (int s = 0; s < S; s++) {
			int rc = 0, c = s / p;
			if (s % p != pl->rank)
				continue;
			pp_stage *st = &pl->chunks[c];
			pp_act *in = st->first ? NULL : p > 1 ? pl->act_in : prev, *out = NULL;
			if (!st->first && p > 1)
				rc = comm_recv(pl->pp, in, pl->width, dt, (s - 1) % p, TAG_ACT, e);
			if (!rc)
				rc = stage_set_positions(st, 0, b->pos ? b->pos + mb * N : NULL, e);
			stage_set_noise(st, 0, (stage_noise){0, 0});
			if (!rc)
				rc = stage_forward(st, 0, b->tokens + mb * N, in,
						   b->targets + mb * N, 0, loss_sum, n_valid, &out,
						   e);
			if (!rc && !st->last && p > 1)
				rc = comm_send(pl->pp, out, pl->width, dt, (s + 1) % p, TAG_ACT, e);
			if (rc)
				return pp_err_prefix(e, "evaluation, microbatch %d, stage %d", mb,
						     s);
			prev = out;
		}
	}
	return 0;
}
