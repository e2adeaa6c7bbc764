#include "gradsync.h"

#include <stdlib.h>
#include <string.h>

size_t gradsync_share(size_t n, int dp) { return (n + (size_t)dp - 1) / (size_t)dp; }

void gradsync_shard(size_t n, int dp, int r, size_t *lo, size_t *hi)
{
	const size_t share = gradsync_share(n, dp);
	*lo = share * (size_t)r < n ? share * (size_t)r : n;
	*hi = *lo + share < n ? *lo + share : n;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

int gradsync_init(gradsync *g, pp_stage *chunks, int v, const size_t *hold, bool sharded,
		  pp_comm *dp, const pp_ops *ops, double bucket_mb, pp_err *e)
{
	memset(g, 0, sizeof *g);
	g->dp = dp;
	g->ops = ops;
	g->v = v;
	if (bucket_mb > 0) {
		double n = bucket_mb * 1048576.0 / (double)sizeof(pp_real);
		g->bucket = n < 1 ? 1 : (size_t)n;
	}
	g->chunks = calloc((size_t)v, sizeof *g->chunks);
	g->counts = calloc(dp ? (size_t)dp->size : 1, sizeof *g->counts);
	if (!g->chunks || !g->counts)
		goto oom;
	for (int k = 0; k < v; k++) {
		gradsync_chunk *gc = &g->chunks[k];
		size_t n = chunks[k].n_elems;
		gc->st = &chunks[k];
		gc->lo = 0, gc->hi = n;
		if (sharded && dp) {
			gradsync_shard(n, dp->size, dp->rank, &gc->lo, &gc->hi);
			/* one element more: a buffer for an empty shard */
			if (!(gc->shard = ops->alloc((gc->hi - gc->lo + 1) * sizeof(pp_real))))
				goto oom;
		}
		gc->hold = min_size(hold[k], n);
		gc->ready = gc->next = n;
		/* the requests one step can have in flight: every bucket, the rest */
		g->cap += (g->bucket ? (int)((n + g->bucket - 1) / g->bucket) : 0) + 2;
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
		if (g->chunks[k].shard)
			g->ops->free(g->chunks[k].shard);
	free(g->chunks);
	free(g->counts);
	free(g->reqs); /* requests still in flight only after an error: the job is ending */
	free(g->timing);
	memset(g, 0, sizeof *g);
}

/* Starts the sum over dp of g[a, b) of chunk gc. */
static int launch(gradsync *g, gradsync_chunk *gc, size_t a, size_t b, pp_err *e)
{
	pp_comm *dp = g->dp;
	pp_real *grad = gc->st->g;
	pp_comm_req *r = NULL;
	int rc;
	if (g->n_reqs == g->cap)
		return pp_errorf(e, PP_ERUNTIME, "gradient buckets: more than %d in flight", g->cap);
	struct gradsync_timing *tm = &g->timing[g->n_reqs];
	tm->span = prof_begin(g->prof, PROF_GRAD_REDUCE);
	tm->bytes = (int64_t)((b - a) * sizeof(pp_real));
	if (!gc->shard) {
		rc = comm_iallreduce(dp, grad + a, b - a, PP_DT_REAL, PP_OP_SUM, &r, e);
	} else {
		/* rank i's block: [a, b) within its shard; the blocks follow each
		 * other in rank order, as the shards do */
		for (int i = 0; i < dp->size; i++) {
			size_t lo, hi;
			gradsync_shard(gc->st->n_elems, dp->size, i, &lo, &hi);
			lo = max_size(lo, a), hi = min_size(hi, b);
			g->counts[i] = hi > lo ? hi - lo : 0;
		}
		size_t at = max_size(a, gc->lo);
		pp_real *recv = gc->shard + (at < gc->hi ? at - gc->lo : 0);
		rc = comm_ireduce_scatter(dp, grad + a, recv, g->counts, PP_DT_REAL, PP_OP_SUM, &r, e);
	}
	if (rc)
		return pp_err_prefix(e, "gradient sum over dp of elements [%zu, %zu)", a, b);
	tm->mark = prof_on(g->prof) ? comm_mark(dp) : NULL;
	g->reqs[g->n_reqs++] = r;
	return 0;
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
	gc->ready = min_size(gc->ready, from);
	if (!g->dp || !g->bucket)
		return 0;
	/* buckets from the end of the buffer: [next - bucket, next), the last
	 * one cut at hold */
	while (gc->next > gc->hold) {
		size_t a = gc->next - gc->hold > g->bucket ? gc->next - g->bucket : gc->hold;
		if (a < gc->ready)
			break;
		int rc = launch(g, gc, a, gc->next, e);
		if (rc)
			return rc;
		gc->next = a;
		g->early++;
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
	for (int k = 0; k < g->v && !rc && g->dp; k++) {
		gradsync_chunk *gc = &g->chunks[k];
		if (gc->next > 0 && !(rc = launch(g, gc, 0, gc->next, e)))
			g->late++;
	}
	while (!rc && g->head < g->n_reqs) {
		rc = comm_wait(g->reqs[g->head], e);
		if (rc)
			g->reqs[g->head++] = NULL;
		else
			completed(g);
	}
	for (int k = 0; k < g->v && !rc; k++) {
		gradsync_chunk *gc = &g->chunks[k];
		if (gc->shard && gc->hi > gc->lo)
			g->ops->to_device(gc->st->g + gc->lo, gc->shard,
					  (gc->hi - gc->lo) * sizeof(pp_real));
	}
	for (int k = 0; k < g->v; k++)
		g->chunks[k].ready = g->chunks[k].next = g->chunks[k].st->n_elems;
	g->head = g->n_reqs = 0;
	return rc;
}
