#include "fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "../config/layout.h"

static size_t unit_len(const pp_stage *s, int u) { return s->unit_lo[u + 1] - s->unit_lo[u]; }

static bool held_unit(const pp_stage *s, int u) { return u == 0 || u == s->n_units - 1; }

void fsdp_sizes(const pp_stage *chunks, int v, size_t act_bytes, fsdp_bytes *out)
{
	size_t most = 0, held = 0;
	for (int k = 0; k < v; k++) {
		const pp_stage *s = &chunks[k];
		for (int u = 0; u < s->n_units; u++) {
			most = unit_len(s, u) > most ? unit_len(s, u) : most;
			held += held_unit(s, u) ? unit_len(s, u) : 0;
		}
	}
	*out = (fsdp_bytes){most, (int64_t)(FSDP_BUFS * most * act_bytes),
			    (int64_t)((2 * FSDP_GBUFS * most + held) * sizeof(pp_real))};
}

static int chunk_of(const fsdp *f, const pp_stage *s)
{
	for (int k = 0; k < f->v; k++)
		if (f->chunks[k].st == s)
			return k;
	return -1;
}

/* The blocks of [a, b) that each rank keeps (f->counts); *mine: where this
 * rank's starts in the buffer, *mine_n its length. */
static void blocks(fsdp *f, const pp_stage *s, size_t a, size_t b, size_t *mine, size_t *mine_n)
{
	for (int r = 0; r < f->size; r++) {
		size_t lo, hi;
		layout_share(s->n_shared, f->size, r, &lo, &hi);
		lo = lo > a ? lo : a;
		hi = hi < b ? hi : b;
		f->counts[r] = hi > lo ? hi - lo : 0;
		if (r == f->rank) {
			*mine = lo;
			*mine_n = f->counts[r];
		}
	}
}

static void evict(struct fsdp_buf *b)
{
	if (b->st)
		b->st->unit_w[b->unit] = NULL;
	b->st = NULL;
}

/* Waits for b's gather (the unit it holds is then in place). */
static int settle(fsdp *f, struct fsdp_buf *b, bool asked, pp_err *e)
{
	if (!b->req)
		return 0;
	if (asked && b->prefetched)
		f->stats.waited++;
	pp_comm_req *r = b->req;
	b->req = NULL;
	int rc = comm_wait(r, e);
	if (rc)
		evict(b);
	return rc;
}

/* Starts gathering unit u of s into the least recently used buffer other
 * than keep; *out the buffer. */
static int gather(fsdp *f, pp_stage *s, int u, const struct fsdp_buf *keep, bool prefetch,
		  struct fsdp_buf **out, pp_err *e)
{
	struct fsdp_buf *b = NULL;
	for (int i = 0; i < FSDP_BUFS; i++)
		if (&f->buf[i] != keep && (!b || f->buf[i].used < b->used))
			b = &f->buf[i];
	int rc = settle(f, b, false, e);
	if (rc)
		return rc;
	evict(b);
	size_t mine = 0, n = 0;
	blocks(f, s, s->unit_lo[u], s->unit_lo[u + 1], &mine, &n);
	/* the shard's compute copy: bf16 gathered as bf16 */
	const pp_act *src = pp_act_at(f->ops, s->wc, mine - s->w_lo);
	if ((rc = comm_iall_gatherv(f->comm, src, b->data, f->counts,
				    comm_dtype_of(f->ops->act_type), &b->req, e)))
		return rc;
	b->st = s;
	b->unit = u;
	b->used = ++f->clock;
	b->prefetched = prefetch;
	s->unit_w[u] = b->data;
	f->stats.gathers++;
	f->stats.prefetched += prefetch;
	*out = b;
	return 0;
}

static struct fsdp_buf *resident(fsdp *f, const pp_stage *s, int u)
{
	for (int i = 0; i < FSDP_BUFS; i++)
		if (f->buf[i].st == s && f->buf[i].unit == u)
			return &f->buf[i];
	return NULL;
}

/* Adds g's finished reduce-scatter to its stage's gradient share; g is free. */
static int land(fsdp *f, struct fsdp_gbuf *g, pp_err *e)
{
	if (!g->st)
		return 0;
	int rc = 0;
	if (g->req) {
		pp_comm_req *r = g->req;
		g->req = NULL;
		rc = comm_wait(r, e);
		if (!rc && g->n)
			f->ops->add_real(stage_g(g->st, g->lo), stage_g(g->st, g->lo), g->out,
					 g->n);
	}
	g->st = NULL;
	return rc;
}

int fsdp_use(void *ctx, pp_stage *s, int u, int next, bool grads, pp_err *e)
{
	fsdp *f = ctx;
	if (!unit_len(s, u))
		return 0;
	struct fsdp_buf *b = resident(f, s, u);
	int rc = 0;
	if (!b)
		rc = gather(f, s, u, NULL, false, &b, e);
	if (!rc)
		rc = settle(f, b, true, e);
	if (rc)
		return rc;
	b->used = ++f->clock;
	/* the next unit's gather goes out while this one computes */
	struct fsdp_buf *nb;
	if (next >= 0 && unit_len(s, next) && !resident(f, s, next) &&
	    (rc = gather(f, s, next, b, true, &nb, e)))
		return rc;
	if (!grads)
		return 0;
	const int k = chunk_of(f, s);
	if (held_unit(s, u)) {
		s->unit_g[u] = f->chunks[k].held[u == 0 ? 0 : 1];
		return 0;
	}
	struct fsdp_gbuf *g = &f->gbuf[f->gnext];
	if (g->st == s && g->unit == u && !g->req) /* lent already, this pass */
		return 0;
	if ((rc = land(f, g, e)))
		return rc;
	f->ops->zero(g->data, unit_len(s, u) * sizeof(pp_real));
	g->st = s;
	g->unit = u;
	s->unit_g[u] = g->data;
	return 0;
}

int fsdp_done(void *ctx, pp_stage *s, int u, pp_err *e)
{
	fsdp *f = ctx;
	if (!unit_len(s, u) || held_unit(s, u))
		return 0;
	struct fsdp_gbuf *g = &f->gbuf[f->gnext];
	if (g->st != s || g->unit != u || g->req)
		return pp_errorf(e, PP_ERUNTIME,
				 "fsdp: unit %d of layers %d..%d is done without its "
				 "gradient buffer",
				 u, s->layer_begin, s->layer_end - 1);
	blocks(f, s, s->unit_lo[u], s->unit_lo[u + 1], &g->lo, &g->n);
	int rc = comm_ireduce_scatter(f->comm, g->data, g->out, f->counts, PP_DT_REAL, PP_OP_SUM,
				      &g->req, e);
	if (rc)
		return rc;
	f->stats.reduces++;
	s->unit_g[u] = NULL;
	f->gnext = (f->gnext + 1) % FSDP_GBUFS;
	return 0;
}

int fsdp_init(fsdp *f, pp_stage *chunks, int v, pp_comm *comm, pp_comm *rep, const pp_ops *ops,
	      pp_err *e)
{
	memset(f, 0, sizeof *f);
	f->ops = ops;
	f->comm = comm;
	f->rep = rep;
	f->size = comm->size;
	f->rank = comm->rank;
	f->v = v;
	f->chunks = calloc((size_t)v, sizeof *f->chunks);
	f->counts = calloc((size_t)f->size, sizeof *f->counts);
	if (!f->chunks || !f->counts)
		goto oom;
	fsdp_bytes sz;
	fsdp_sizes(chunks, v, pp_act_size(ops), &sz);
	f->unit_max = sz.unit_max;
	for (int k = 0; k < v; k++)
		f->chunks[k].st = &chunks[k];
	for (int i = 0; i < FSDP_BUFS; i++)
		if (!(f->buf[i].data = ops->alloc(f->unit_max * pp_act_size(ops) + 1)))
			goto oom;
	for (int i = 0; i < FSDP_GBUFS; i++)
		if (!(f->gbuf[i].data = ops->alloc(f->unit_max * sizeof(pp_real) + 1)) ||
		    /* a unit may lie wholly in this rank's share */
		    !(f->gbuf[i].out = ops->alloc(f->unit_max * sizeof(pp_real) + 1)))
			goto oom;
	for (int k = 0; k < v; k++) {
		pp_stage *s = &chunks[k];
		const int ends[2] = {0, s->n_units - 1};
		for (int j = 0; j < 2; j++) {
			size_t n = unit_len(s, ends[j]);
			if (n && !(f->chunks[k].held[j] = ops->alloc(n * sizeof(pp_real))))
				goto oom;
			if (n)
				ops->zero(f->chunks[k].held[j], n * sizeof(pp_real));
		}
	}
	return 0;
oom:;
	size_t most = f->unit_max;
	fsdp_free(f);
	return pp_errorf(e, PP_ERUNTIME,
			 "fsdp: out of memory for the gathered layers (%zu parameters "
			 "the largest)",
			 most);
}

void fsdp_free(fsdp *f)
{
	if (!f->ops)
		return;
	for (int i = 0; i < FSDP_BUFS; i++) {
		evict(&f->buf[i]);
		f->ops->free(f->buf[i].data);
	}
	for (int i = 0; i < FSDP_GBUFS; i++) {
		f->ops->free(f->gbuf[i].data);
		f->ops->free(f->gbuf[i].out);
	}
	for (int k = 0; f->chunks && k < f->v; k++)
		for (int j = 0; j < 2; j++)
			f->ops->free(f->chunks[k].held[j]);
	free(f->chunks);
	free(f->counts); /* requests still in flight only after an error: the job is ending */
	memset(f, 0, sizeof *f);
}

pp_real *fsdp_held_grad(fsdp *f, int k, int which) { return f->chunks[k].held[which]; }

int fsdp_finish(fsdp *f, pp_err *e)
{
	int rc = 0;
	for (int i = 0; i < FSDP_GBUFS && !rc; i++)
		rc = land(f, &f->gbuf[i], e);
	for (int k = 0; k < f->v && !rc; k++) {
		pp_stage *s = f->chunks[k].st;
		const int ends[2] = {0, s->n_units - 1};
		for (int j = 0; j < 2 && !rc; j++) {
			const int u = ends[j];
			const size_t n = unit_len(s, u);
			if (!n)
				continue;
			struct fsdp_gbuf *g = &f->gbuf[0];
			blocks(f, s, s->unit_lo[u], s->unit_lo[u + 1], &g->lo, &g->n);
			g->st = s;
			f->stats.reduces++;
			rc = comm_ireduce_scatter(f->comm, f->chunks[k].held[j], g->out, f->counts,
						  PP_DT_REAL, PP_OP_SUM, &g->req, e);
			if (!rc)
				rc = land(f, g, e);
			f->ops->zero(f->chunks[k].held[j], n * sizeof(pp_real));
		}
		if (!rc && f->rep && s->w_hi > s->w_lo)
			rc = comm_allreduce(f->rep, s->g, s->w_hi - s->w_lo, PP_DT_REAL, PP_OP_SUM,
					    e);
	}
	return rc;
}

void fsdp_params_changed(fsdp *f)
{
	for (int i = 0; i < FSDP_BUFS; i++) {
		struct fsdp_buf *b = &f->buf[i];
		if (b->req) { /* a prefetch nobody asked for: let it land, then drop it */
			pp_err e = {0};
			settle(f, b, false, &e);
		}
		evict(b);
		b->used = 0;
	}
}

int fsdp_gather_master(fsdp *f, int k, pp_real *host, pp_err *e)
{
	pp_stage *s = f->chunks[k].st;
	pp_real *buf = f->gbuf[0].data;
	int rc = land(f, &f->gbuf[0], e);
	for (size_t a = 0; a < s->n_elems && !rc; a += f->unit_max) {
		const size_t b = a + f->unit_max < s->n_elems ? a + f->unit_max : s->n_elems;
		size_t mine = 0, n = 0;
		pp_comm_req *r;
		blocks(f, s, a, b, &mine, &n);
		rc = comm_iall_gatherv(f->comm, stage_w(s, mine), buf, f->counts, PP_DT_REAL, &r,
				       e);
		if (!rc && r)
			rc = comm_wait(r, e);
		if (!rc)
			f->ops->to_host(host + a, buf, (b - a) * sizeof(pp_real));
	}
	return rc;
}
