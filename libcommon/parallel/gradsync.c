#include "gradsync.h"

#include <stdlib.h>
#include <string.h>

#include "../config/layout.h"

size_t gradsync_gather_len(size_t shared, size_t experts, int ranks, int ep)
{
	const size_t a = layout_share_len(shared, ranks) * ((size_t)ranks + 1);
	const size_t b = layout_share_len(experts, ranks / ep) * ((size_t)(ranks / ep) + 1);
	return a > b ? a : b;
}

void gradsync_ranges(const pp_stage *st, bool sharded, int ranks, int rank, int ep, optim_ranges *r)
{
	const size_t base[OPTIM_REGIONS] = {0, st->n_shared};
	const size_t end[OPTIM_REGIONS] = {st->n_shared, st->n_elems};
	const int size[OPTIM_REGIONS] = {ranks, ranks / ep};
	const int at[OPTIM_REGIONS] = {rank, rank / ep};
	for (int i = 0; i < OPTIM_REGIONS; i++) {
		size_t lo = 0, hi = end[i] - base[i];
		if (sharded)
			layout_share(end[i] - base[i], size[i], at[i], &lo, &hi);
		r->lo[i] = base[i] + lo;
		r->hi[i] = base[i] + hi;
	}
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

int gradsync_init(gradsync *g, pp_stage *chunks, int v, const size_t *hold, bool sharded,
		  pp_comm *data, pp_comm *edp, int ep, const pp_ops *ops, double bucket_mb,
		  pp_err *e)
{
	memset(g, 0, sizeof *g);
	g->ops = ops;
	g->v = v;
	if (bucket_mb > 0) {
		double n = bucket_mb * 1048576.0 / (double)sizeof(pp_real);
		g->bucket = n < 1 ? 1 : (size_t)n;
	}
	g->chunks = calloc((size_t)v, sizeof *g->chunks);
	g->counts = calloc(data ? (size_t)data->size : 1, sizeof *g->counts);
	if (!g->chunks || !g->counts)
		goto oom;
	for (int k = 0; k < v; k++) {
		gradsync_chunk *gc = &g->chunks[k];
		pp_stage *st = &chunks[k];
		optim_ranges r;
		gradsync_ranges(st, sharded, data ? data->size : 1, data ? data->rank : 0, ep, &r);
		pp_comm *comm[OPTIM_REGIONS] = {data, edp};
		const size_t base[OPTIM_REGIONS] = {0, st->n_shared};
		const size_t end[OPTIM_REGIONS] = {st->n_shared, st->n_elems};
		gc->st = st;
		for (int i = 0; i < OPTIM_REGIONS; i++) {
			gradsync_region *rg = &gc->region[i];
			*rg = (gradsync_region){comm[i], base[i], end[i], r.lo[i], r.hi[i], NULL};
			/* one element more: a buffer for an empty share */
			if (sharded && rg->comm &&
			    !(rg->shard = ops->alloc((rg->hi - rg->lo + 1) * sizeof(pp_real))))
				goto oom;
		}
		gc->hold = min_size(hold[k], st->n_shared);
		gc->ready = gc->next = st->n_shared;
		/* the requests one step can have in flight: every bucket, the
		 * rest, the experts */
		g->cap += (g->bucket ? (int)((st->n_shared + g->bucket - 1) / g->bucket) : 0) + 3;
	}
	if (!(g->reqs = calloc((size_t)g->cap, sizeof *g->reqs)) ||
	    !(g->timing = calloc((size_t)g->cap, sizeof *g->timing)))
		goto oom;
	return 0;
oom:
	gradsync_free(g);
	return pp_errorf(e, PP_ERUNTIME, "out of memory for the gradient buckets");
}

void gradsync_free(gradsync *g)
{
	for (int k = 0; g->chunks && k < g->v; k++)
		for (int i = 0; i < OPTIM_REGIONS; i++)
			if (g->chunks[k].region[i].shard)
				g->ops->free(g->chunks[k].region[i].shard);
	free(g->chunks);
	free(g->counts);
	free(g->reqs); /* requests still in flight only after an error: the job is ending */
	free(g->timing);
	memset(g, 0, sizeof *g);
}

/* Starts the sum of g[a, b) of chunk gc over the group of its region rg. */
static int launch(gradsync *g, gradsync_chunk *gc, const gradsync_region *rg, size_t a, size_t b,
		  pp_err *e)
{
	pp_comm *c = rg->comm;
	pp_real *grad = gc->st->g;
	pp_comm_req *r = NULL;
	int rc;
	if (g->n_reqs == g->cap)
		return pp_errorf(e, PP_ERUNTIME, "gradient buckets: more than %d in flight",
				 g->cap);
	struct gradsync_timing *tm = &g->timing[g->n_reqs];
	tm->span = prof_begin(g->prof, PROF_GRAD_REDUCE);
	tm->bytes = (int64_t)((b - a) * sizeof(pp_real));
	if (!rg->shard) {
		rc = comm_iallreduce(c, grad + a, b - a, PP_DT_REAL, PP_OP_SUM, &r, e);
	} else {
		/* rank i's block: [a, b) within its share; the blocks follow each
		 * other in rank order, as the shares do */
		for (int i = 0; i < c->size; i++) {
			size_t lo, hi;
			layout_share(rg->end - rg->base, c->size, i, &lo, &hi);
			lo = max_size(rg->base + lo, a), hi = min_size(rg->base + hi, b);
			g->counts[i] = hi > lo ? hi - lo : 0;
		}
		size_t at = max_size(a, rg->lo);
		pp_real *recv = rg->shard + (at < rg->hi ? at - rg->lo : 0);
		rc = comm_ireduce_scatter(c, grad + a, recv, g->counts, PP_DT_REAL, PP_OP_SUM, &r,
					  e);
	}
	if (rc)
		return pp_err_prefix(e, "gradient sum over %s of elements [%zu, %zu)",
				     rg->base ? "the ranks holding the same experts" : "dp", a, b);
	tm->mark = prof_on(g->prof) ? comm_mark(c) : NULL;
	g->reqs[g->n_reqs++] = r;
	return 0;
}

/* Launches the experts' sum of chunk gc, once a step. */
static int launch_experts(gradsync *g, gradsync_chunk *gc, pp_err *e)
{
	const gradsync_region *rg = &gc->region[OPTIM_EXPERTS];
	if (gc->experts_sent || !rg->comm || rg->end == rg->base)
		return 0;
	gc->experts_sent = true;
	return launch(g, gc, rg, rg->base, rg->end, e);
}

/* Request head has completed. */
static void completed(gradsync *g)
{
	const struct gradsync_timing *tm = &g->timing[g->head];
	prof_end_mark(g->prof, &tm->span, tm->mark, tm->bytes);
	g->reqs[g->head++] = NULL;
}

int gradsync_ready(gradsync *g, const pp_stage *s, size_t from, pp_err *e)
{
	int k = 0;
	while (k < g->v && g->chunks[k].st != s)
		k++;
	if (k == g->v)
		return pp_errorf(e, PP_ERUNTIME, "gradient buckets: a stage they do not know");
	gradsync_chunk *gc = &g->chunks[k];
	const gradsync_region *rg = &gc->region[OPTIM_SHARED];
	gc->ready = min_size(gc->ready, from);
	if (!g->bucket)
		return 0;
	/* buckets from the end of the region: [next - bucket, next), the last
	 * one cut at hold */
	while (rg->comm && gc->next > gc->hold) {
		size_t a = gc->next - gc->hold > g->bucket ? gc->next - g->bucket : gc->hold;
		if (a < gc->ready)
			break;
		int rc = launch(g, gc, rg, a, gc->next, e);
		if (rc)
			return rc;
		gc->next = a;
		g->early++;
	}
	if (from == 0) {
		int before = g->n_reqs, rc = launch_experts(g, gc, e);
		if (rc)
			return rc;
		g->early += g->n_reqs - before;
	}
	/* MPI moves a nonblocking collective on only inside its calls */
	while (g->head < g->n_reqs) {
		int done, rc = comm_test(g->reqs[g->head], &done, e);
		if (rc || !done) {
			if (done) /* failed: comm_test freed it */
				g->reqs[g->head++] = NULL;
			return rc;
		}
		completed(g);
	}
	return 0;
}

int gradsync_finish(gradsync *g, pp_err *e)
{
	int rc = 0;
	for (int k = 0; k < g->v && !rc; k++) {
		gradsync_chunk *gc = &g->chunks[k];
		const gradsync_region *rg = &gc->region[OPTIM_SHARED];
		int before = g->n_reqs;
		if (rg->comm && gc->next > 0)
			rc = launch(g, gc, rg, 0, gc->next, e);
		if (!rc)
			rc = launch_experts(g, gc, e);
		g->late += g->n_reqs - before;
	}
	while (!rc && g->head < g->n_reqs) {
		rc = comm_wait(g->reqs[g->head], e);
		if (rc)
			g->reqs[g->head++] = NULL;
		else
			completed(g);
	}
	for (int k = 0; k < g->v && !rc; k++)
		for (int i = 0; i < OPTIM_REGIONS; i++) {
			const gradsync_region *rg = &g->chunks[k].region[i];
			if (rg->shard && rg->hi > rg->lo)
				g->ops->to_device(g->chunks[k].st->g + rg->lo, rg->shard,
						  (rg->hi - rg->lo) * sizeof(pp_real));
		}
	for (int k = 0; k < g->v; k++) {
		gradsync_chunk *gc = &g->chunks[k];
		gc->ready = gc->next = gc->st->n_shared;
		gc->experts_sent = false;
	}
	g->head = g->n_reqs = 0;
	return rc;
}
