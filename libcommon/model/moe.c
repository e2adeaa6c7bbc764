/* The mixture-of-experts MLP (moe.h). */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ep ranks; 1 without expert parallelism */
static int ep_size(const moe_layer *m) { return m->ep_size > 1 ? m->ep_size : 1; }

size_t moe_rows_max(const moe_layer *m, int N) { return (size_t)N * m->K * ep_size(m); }

static void dev_free(const pp_ops *o, void *p)
{
	if (p)
		o->free(p);
}

/* A device buffer: where its pointer goes, its elements and their bytes. */
typedef struct {
	void **p;
	size_t n, elem;
} moe_buf;

/* moe_acts' device buffers for N rows (b has room for 16); the count. ym is
 * y itself without ep, which has no buffer of its own then. */
static int acts_bufs(moe_acts *t, const moe_layer *m, int N, bool split, size_t A, moe_buf *b)
{
	const size_t NK = (size_t)N * m->K, R = moe_rows_max(m, N), I = sizeof(int);
	const size_t C = m->C, F = m->F, E = m->E, P = ep_size(m), S = sizeof(pp_real);
	int n = 0;
	b[n++] = (moe_buf){(void **)&t->logits, N * E, A};
	b[n++] = (moe_buf){(void **)&t->prob, N * E, S};
	b[n++] = (moe_buf){(void **)&t->lse, (size_t)N, S};
	b[n++] = (moe_buf){(void **)&t->gate, NK, S};
	b[n++] = (moe_buf){(void **)&t->frac, E, S};
	b[n++] = (moe_buf){(void **)&t->expert, NK, I};
	b[n++] = (moe_buf){(void **)&t->slot, NK, I};
	b[n++] = (moe_buf){(void **)&t->rows, NK, I};
	b[n++] = (moe_buf){(void **)&t->counts, 2 * E, I};
	b[n++] = (moe_buf){(void **)&t->xs, R * C, A};
	b[n++] = (moe_buf){(void **)&t->up, R * 2 * F, A};
	b[n++] = (moe_buf){(void **)&t->act, R * F, A};
	b[n++] = (moe_buf){(void **)&t->y, R * C, A};
	if (P > 1) {
		b[n++] = (moe_buf){(void **)&t->ym, NK * C, A};
		b[n++] = (moe_buf){(void **)&t->index, 2 * R, I};
	}
	if (split) {
		b[n++] = (moe_buf){(void **)&t->g_y, R * C, A};
		b[n++] = (moe_buf){(void **)&t->g_up, R * 2 * F, A};
		b[n++] = (moe_buf){(void **)&t->g_logits, N * E, A};
	}
	return n;
}

static int scratch_bufs(moe_scratch *sc, const moe_layer *m, int N, size_t A, moe_buf *b)
{
	const size_t NK = (size_t)N * m->K, R = moe_rows_max(m, N), S = sizeof(pp_real);
	const size_t C = m->C, F = m->F, E = m->E;
	int n = 0;
	b[n++] = (moe_buf){(void **)&sc->d_y, R * C, A};
	b[n++] = (moe_buf){(void **)&sc->d_up, R * 2 * F, A};
	b[n++] = (moe_buf){(void **)&sc->d_act, R * F, A};
	b[n++] = (moe_buf){(void **)&sc->d_xs, R * C, A};
	b[n++] = (moe_buf){(void **)&sc->d_h, (size_t)N * C, A};
	b[n++] = (moe_buf){(void **)&sc->d_logits, N * E, A};
	if (ep_size(m) > 1)
		b[n++] = (moe_buf){(void **)&sc->sent, (R > NK ? R : NK) * C, A};
	b[n++] = (moe_buf){(void **)&sc->stats, E + 1, S};
	b[n++] = (moe_buf){(void **)&sc->dgate, NK, S};
	return n;
}

static size_t bufs_bytes(const moe_buf *b, int n)
{
	size_t sum = 0;
	for (int i = 0; i < n; i++)
		sum += b[i].n * b[i].elem;
	return sum;
}

/* Allocates every buffer of b; 0, or -1 when one fails (those done stay, for
 * the caller's free). */
static int bufs_alloc(const pp_ops *o, const moe_buf *b, int n)
{
	for (int i = 0; i < n; i++)
		if (b[i].n && !(*b[i].p = o->alloc(b[i].n * b[i].elem)))
			return -1;
	return 0;
}

size_t moe_acts_bytes(const moe_layer *m, int N, bool split, size_t A)
{
	moe_acts t;
	moe_buf b[16];
	return bufs_bytes(b, acts_bufs(&t, m, N, split, A, b));
}

size_t moe_scratch_bytes(const moe_layer *m, int N, size_t A)
{
	moe_scratch sc;
	moe_buf b[16];
	return bufs_bytes(b, scratch_bufs(&sc, m, N, A, b));
}

int moe_acts_alloc(moe_acts *t, const moe_layer *m, int N, bool split, pp_err *e)
{
	const pp_ops *o = m->ops;
	const size_t R = moe_rows_max(m, N), P = ep_size(m);
	moe_buf b[16];
	memset(t, 0, sizeof *t);
	int failed = bufs_alloc(o, b, acts_bufs(t, m, N, split, pp_act_size(o), b));
	if (P == 1)
		t->ym = t->y;
	t->host = calloc(2 * (size_t)m->E + (size_t)m->n_local + P * m->n_local +
				 (P > 1 ? 2 * R : 0),
			 sizeof(int));
	t->xfer = calloc(4 * P, sizeof(size_t));
	if (failed || !t->host || !t->xfer) {
		moe_acts_free(t, o);
		return pp_errorf(e, PP_ERUNTIME,
				 "out of memory for the experts' activations of %d rows", N);
	}
	return 0;
}

void moe_acts_free(moe_acts *t, const pp_ops *o)
{
	void *d[] = {t->logits, t->prob, t->lse,    t->gate,    t->frac, t->expert,
		     t->slot,   t->rows, t->counts, t->xs,      t->up,   t->act,
		     t->index,  t->g_y,  t->g_up,   t->g_logits};
	for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
		dev_free(o, d[i]);
	if (t->ym != t->y)
		dev_free(o, t->ym);
	dev_free(o, t->y);
	free(t->host);
	free(t->xfer);
	memset(t, 0, sizeof *t);
}

int moe_scratch_alloc(moe_scratch *sc, const moe_layer *m, int N, pp_err *e)
{
	const pp_ops *o = m->ops;
	moe_buf b[16];
	memset(sc, 0, sizeof *sc);
	int failed = bufs_alloc(o, b, scratch_bufs(sc, m, N, pp_act_size(o), b));
	sc->host = calloc((size_t)m->E + 1, sizeof(pp_real));
	if (failed || !sc->host) {
		moe_scratch_free(sc, o);
		return pp_errorf(e, PP_ERUNTIME,
				 "out of memory for the experts' scratch of %d rows", N);
	}
	return 0;
}

void moe_scratch_free(moe_scratch *sc, const pp_ops *o)
{
	void *d[] = {sc->d_y,      sc->d_up, sc->d_act, sc->d_xs, sc->d_h,
		     sc->d_logits, sc->sent, sc->stats, sc->dgate};
	for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
		dev_free(o, d[i]);
	free(sc->host);
	memset(sc, 0, sizeof *sc);
}

/* ---- the exchange between the ranks of an ep group ------------------------------
 *
 * The rows a rank sends are in global expert order, so those for rank p
 * (experts [p n, p n + n), n = n_local) are contiguous; what arrives is in
 * source order, each source's rows in expert order. The experts want their
 * rows together (expert-major): t->index maps each expert-major row to its
 * source-major row, and (after R entries) back. */

/* t->host after the counts (2E) and the local experts' rows (n) */
static int *local_rows(const moe_layer *m, const moe_acts *t) { return t->host + 2 * m->E; }
static int *from_counts(const moe_layer *m, const moe_acts *t)
{
	return local_rows(m, t) + m->n_local;
}

/* The exchange's rows per peer: to rank p (*snd, from the counts of p's
 * experts) and from rank p (*rcv), in rows. */
static size_t *snd_rows(const moe_acts *t) { return t->xfer; }
static size_t *rcv_rows(const moe_layer *m, const moe_acts *t) { return t->xfer + ep_size(m); }

/* Every rank of the group learns what each source sends to each of its
 * experts; then the rows of each local expert and the index. */
static int plan_exchange(const moe_layer *m, moe_acts *t, pp_err *e)
{
	const int P = ep_size(m), n = m->n_local;
	const int *kept = t->host;
	int *from = from_counts(m, t), *rows = local_rows(m, t);
	size_t *snd = snd_rows(t), *rcv = rcv_rows(m, t);
	size_t *cnt = t->xfer + 2 * P, *off = t->xfer + 3 * P;
	for (int p = 0; p < P; p++) {
		snd[p] = 0;
		for (int j = 0; j < n; j++)
			snd[p] += (size_t)kept[p * n + j];
		cnt[p] = (size_t)n;
		off[p] = (size_t)p * n;
	}
	/* the kept counts of rank p's experts go to p: from[s n + j] is what
	 * source s sends to local expert j */
	int rc = comm_alltoallv(m->ep, kept, cnt, off, from, cnt, off, PP_DT_I32, e);
	if (rc)
		return pp_err_prefix(e, "expert parallelism: exchanging the rows' counts");
	t->R = 0;
	for (int p = 0; p < P; p++) {
		rcv[p] = 0;
		for (int j = 0; j < n; j++)
			rcv[p] += (size_t)from[p * n + j];
		t->R += (int)rcv[p];
	}
	for (int j = 0; j < n; j++) {
		rows[j] = 0;
		for (int p = 0; p < P; p++)
			rows[j] += from[p * n + j];
	}
	int *idx = from + P * n, *inv = idx + t->R, k = 0;
	for (int j = 0; j < n; j++)
		for (int p = 0, base = 0; p < P; base += (int)rcv[p], p++) {
			int at = base;
			for (int i = 0; i < j; i++)
				at += from[p * n + i];
			for (int r = 0; r < from[p * n + j]; r++, k++) {
				idx[k] = at + r;
				inv[at + r] = k;
			}
		}
	m->ops->to_device(t->index, idx, 2 * (size_t)t->R * sizeof(int));
	return 0;
}

/* Sends rows to the experts' ranks (back: to their sources) and receives. */
static int exchange(const moe_layer *m, const moe_acts *t, const pp_act *in, pp_act *out, bool back,
		    pp_err *e)
{
	const int P = ep_size(m);
	const size_t *a = back ? rcv_rows(m, t) : snd_rows(t);
	const size_t *b = back ? snd_rows(t) : rcv_rows(m, t);
	size_t *sc = malloc(4 * (size_t)P * sizeof *sc), s0 = 0, r0 = 0;
	if (!sc)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	size_t *sd = sc + P, *rc_ = sc + 2 * P, *rd = sc + 3 * P;
	for (int p = 0; p < P; p++) {
		sc[p] = a[p] * m->C;
		sd[p] = s0;
		s0 += sc[p];
		rc_[p] = b[p] * m->C;
		rd[p] = r0;
		r0 += rc_[p];
	}
	int rc = comm_alltoallv(m->ep, in, sc, sd, out, rc_, rd, comm_dtype_of(m->ops->act_type),
				e);
	free(sc);
	return rc ? pp_err_prefix(e, "expert parallelism: exchanging token rows") : 0;
}

/* dst (R,C) = src's rows through the index (to_expert: expert-major from
 * source-major, else the inverse): a gather of one row per "assignment" */
static void reorder(const moe_layer *m, const moe_acts *t, pp_act *dst, const pp_act *src,
		    bool to_expert)
{
	m->ops->moe_gather(dst, src, t->index + (to_expert ? 0 : t->R), NULL, t->R, 1, m->C);
}

/* ---- forward and backward ---------------------------------------------------------- */

/* expert j's weights and gradients */
const pp_act *moe_weight(const moe_layer *m, int j, bool down)
{
	return pp_act_at(m->ops, m->experts,
			 (size_t)j * m->stride + (down ? 2 * (size_t)m->F * m->C : 0));
}
pp_real *moe_weight_grad(const moe_layer *m, int j, bool down)
{
	return m->g_experts
		       ? m->g_experts + (size_t)j * m->stride + (down ? 2 * (size_t)m->F * m->C : 0)
		       : NULL;
}

int moe_sources(const moe_layer *m) { return ep_size(m); }

void moe_block_rows(const moe_layer *m, const moe_acts *t, int *rows)
{
	const int n = m->n_local, P = ep_size(m);
	const int *from = from_counts(m, t), *local = local_rows(m, t);
	for (int j = 0; j < n; j++)
		for (int p = 0; p < P; p++)
			rows[j * P + p] = P > 1 ? from[p * n + j] : local[j];
}

/* The products of every local expert (moe_products), by the ops or FP8's. */
static int experts_fwd(const moe_layer *m, const moe_acts *t, bool down, pp_act *out,
		       const pp_act *in, pp_err *e)
{
	if (m->fp8)
		return m->fp8->fwd(m->fp8_ctx, m, t, down, out, in, e);
	const pp_ops *o = m->ops;
	const int IC = down ? m->F : m->C, OC = down ? m->C : 2 * m->F, *rows = local_rows(m, t);
	for (int j = 0, at = 0; j < m->n_local; at += rows[j], j++)
		if (rows[j])
			o->matmul_fwd(pp_act_at(o, out, (size_t)at * OC),
				      pp_act_at(o, in, (size_t)at * IC), moe_weight(m, j, down),
				      NULL, rows[j], IC, OC);
	return 0;
}

static int experts_bwd(const moe_layer *m, const moe_acts *t, bool down, pp_act *din, bool wgrad,
		       const pp_act *dout, const pp_act *in, pp_err *e)
{
	if (m->fp8)
		return m->fp8->bwd(m->fp8_ctx, m, t, down, din, wgrad, dout, in, e);
	const pp_ops *o = m->ops;
	const int IC = down ? m->F : m->C, OC = down ? m->C : 2 * m->F, *rows = local_rows(m, t);
	for (int j = 0, at = 0; j < m->n_local; at += rows[j], j++)
		if (rows[j])
			o->matmul_bwd(din ? pp_act_at(o, din, (size_t)at * IC) : NULL,
				      wgrad ? moe_weight_grad(m, j, down) : NULL, NULL,
				      pp_act_at(o, dout, (size_t)at * OC),
				      pp_act_at(o, in, (size_t)at * IC),
				      din ? moe_weight(m, j, down) : NULL, rows[j], IC, OC);
	return 0;
}

int moe_forward(const moe_layer *m, moe_acts *t, moe_scratch *sc, const pp_act *h, pp_act *out,
		int N, moe_losses *l, pp_err *e)
{
	const pp_ops *o = m->ops;
	const int C = m->C, F = m->F, E = m->E, K = m->K, n = m->n_local;
	int rc;
	o->matmul_fwd(t->logits, h, m->router, NULL, N, C, E);
	o->moe_route(t->expert, t->gate, t->prob, t->lse, sc->stats, t->logits, N, E, K, m->mode);
	const int cap = m->capacity > 0 ? (int)ceil(m->capacity * N * K / E) : -1;
	o->moe_dispatch(t->rows, t->slot, t->counts, t->expert, N, K, E, cap);
	o->to_host(t->host, t->counts, 2 * (size_t)E * sizeof(int));
	o->to_host(sc->host, sc->stats, ((size_t)E + 1) * sizeof(pp_real));
	/* the losses of this microbatch, and f held for the backward */
	const int *kept = t->host, *chosen = t->host + E;
	pp_real *frac = sc->host; /* stats no longer needed once read */
	double aux = 0;
	t->M = 0;
	for (int x = 0; x < E; x++) {
		double f = (double)chosen[x] / N;
		aux += f * sc->host[x] / N;
		frac[x] = (pp_real)f;
		t->M += kept[x];
	}
	if (l) {
		l->aux = E * aux;
		l->z = sc->host[E] / N;
		l->dropped = (long)N * K - t->M;
	}
	o->to_device(t->frac, frac, (size_t)E * sizeof(pp_real));

	int *rows = local_rows(m, t);
	if (ep_size(m) == 1) {
		o->moe_gather(t->xs, h, t->rows, NULL, t->M, K, C);
		t->R = t->M;
		for (int j = 0; j < n; j++)
			rows[j] = kept[m->first + j];
	} else {
		o->moe_gather(sc->sent, h, t->rows, NULL, t->M, K, C);
		if ((rc = plan_exchange(m, t, e)) ||
		    (rc = exchange(m, t, sc->sent, t->y, false, e)))
			return rc;
		reorder(m, t, t->xs, t->y, true);
	}
	/* the gate|up products, the activation, the down products */
	if ((rc = experts_fwd(m, t, false, t->up, t->xs, e)))
		return rc;
	if (t->R)
		o->glu_fwd(t->act, t->up, t->R, F, m->act);
	if ((rc = experts_fwd(m, t, true, t->y, t->act, e)))
		return rc;
	if (ep_size(m) > 1) {
		reorder(m, t, sc->sent, t->y, false);
		if ((rc = exchange(m, t, sc->sent, t->ym, true, e)))
			return rc;
	}
	o->moe_combine(out, t->ym, t->slot, t->gate, N, K, C);
	return 0;
}

int moe_backward(const moe_layer *m, moe_acts *t, moe_scratch *sc, const pp_act *h,
		 const pp_act *dout, pp_act *dh, double aux_w, double z_w, int part, int N,
		 pp_err *e)
{
	const pp_ops *o = m->ops;
	const int C = m->C, F = m->F, E = m->E, K = m->K;
	const bool ep = ep_size(m) > 1, wgrad = part != MOE_BWD_INPUT;
	int rc;
	if (part == MOE_BWD_WEIGHT) {
		if ((rc = experts_bwd(m, t, true, NULL, true, t->g_y, t->act, e)) ||
		    (rc = experts_bwd(m, t, false, NULL, true, t->g_up, t->xs, e)))
			return rc;
		o->matmul_bwd(NULL, m->g_router, NULL, t->g_logits, h, NULL, N, C, E);
		return 0;
	}
	/* the gates' gradient needs the whole of each expert's output */
	o->moe_gate_grad(sc->dgate, dout, t->ym, t->slot, N, K, C);
	if (m->tp_sum && (rc = m->tp_sum(m->tp_ctx, sc->dgate, (size_t)N * K, e)))
		return rc;
	/* each kept assignment's output gradient, gate times its token's */
	if (ep) {
		o->moe_gather(sc->sent, dout, t->rows, t->gate, t->M, K, C);
		if ((rc = exchange(m, t, sc->sent, sc->d_xs, false, e)))
			return rc;
		reorder(m, t, sc->d_y, sc->d_xs, true);
	} else {
		o->moe_gather(sc->d_y, dout, t->rows, t->gate, t->M, K, C);
	}
	if ((rc = experts_bwd(m, t, true, sc->d_act, wgrad, sc->d_y, t->act, e)))
		return rc;
	if (t->R)
		o->glu_bwd(sc->d_up, sc->d_act, t->up, t->R, F, m->act);
	if ((rc = experts_bwd(m, t, false, sc->d_xs, wgrad, sc->d_up, t->xs, e)))
		return rc;
	if (part == MOE_BWD_INPUT) {
		const size_t A = pp_act_size(o);
		o->to_device(t->g_y, sc->d_y, (size_t)t->R * C * A);
		o->to_device(t->g_up, sc->d_up, (size_t)t->R * 2 * F * A);
	}
	/* each token's input gradient: the sum of its assignments' */
	const pp_act *dxm = sc->d_xs;
	if (ep) {
		reorder(m, t, sc->sent, sc->d_xs, false);
		if ((rc = exchange(m, t, sc->sent, sc->d_y, true, e)))
			return rc;
		dxm = sc->d_y;
	}
	o->moe_combine(dh, dxm, t->slot, NULL, N, K, C);
	/* the router: the gates', the load-balancing and z losses' gradients */
	o->moe_router_bwd(sc->d_logits, sc->dgate, t->expert, t->gate, t->prob, t->lse, t->frac,
			  (pp_real)aux_w, (pp_real)z_w, N, E, K, m->mode);
	const bool add = m->tp_rank ==
			 0; /* the router's input gradient is whole on every tp rank */
	o->matmul_bwd(add ? sc->d_h : NULL, wgrad ? m->g_router : NULL, NULL, sc->d_logits, h,
		      m->router, N, C, E);
	if (add)
		o->add(dh, dh, sc->d_h, (size_t)N * C);
	if (part == MOE_BWD_INPUT)
		o->to_device(t->g_logits, sc->d_logits, (size_t)N * E * pp_act_size(o));
	return 0;
}
