/* Low-rank adapters (PEFT's LoRA) on a layer's projections: the product of
 * member k, out_k = inp @ W_k^T, becomes inp @ W_k^T + scale * (inp @
 * A_k^T) @ B_k^T. A layer's fused products (q|k|v, gate|up) hold several
 * members side by side, each in its own column block of the output.
 *
 * The forward adds each member's term to the block; the backward, given
 * the product's output gradient, adds the adapters' part of the input
 * gradient and accumulates dA and dB. inp @ A^T is rebuilt in the backward
 * rather than kept (N x rank per member). Under tp each rank adds the terms
 * of its slices (table.c splits them as Megatron does), before the sums
 * over tp that the base products take.
 *
 * With lora.dropout p, a training forward drops elements of each member's
 * input before A (PEFT's lora_dropout, the base product untouched) and
 * scales the rest by 1 / (1 - p); the mask is drawn from the layer's key,
 * the member and the element's place in the whole input (the step's row,
 * the column of the whole width under tp), so every layout drops the same
 * elements, and the backward draws it again rather than keeping it. */
#include <string.h>

#include "../../kernels/dropmask.h"
#include "../base/rng.h"
#include "internal.h"

/* Member k's column block in its product's output: offset and width. */
static void lora_block(const pp_stage *s, int k, int *col, int *width)
{
	const int D = s->cfg->head_dim, HD = s->n_heads * D, KV = s->n_kv_heads * D;
	const int C = s->cfg->d_model, F = s->d_ff;
	const int at[LORA_MEMBERS] = {0, HD, HD + KV, 0, 0, F, 0};
	const int w[LORA_MEMBERS] = {HD, KV, KV, C, F, F, C};
	*col = at[k];
	*width = w[k];
}

/* Member k's dropout of its input (N,in): false when it drops nothing. */
static bool lora_dropout(const pp_stage *s, const layer_acts *t, int k, int in, pp_dropout *d)
{
	const double p = s->spec.lora.dropout;
	if (p <= 0 || !t->noise.key)
		return false;
	/* o and down take a tp rank's block of their input's columns */
	const bool row_parallel = k == LORA_O || k == LORA_DOWN;
	const int tp = s->spec.tp.size, r = s->spec.tp.rank;
	*d = (pp_dropout){.key = rng_mix(t->noise.key ^ (uint64_t)(k + 1)),
			  .row0 = t->noise.row0,
			  .threshold = pp_drop_threshold(p),
			  .col0 = row_parallel ? (int64_t)r * in : 0,
			  .width = row_parallel ? (int64_t)tp * in : in,
			  .scale = (float)(1.0 / (1.0 - p))};
	return true;
}

void lora_forward(const pp_stage *s, const layer_acts *t, const layer_index *li, int k0, int k1,
		  pp_act *out, int ld, const pp_act *inp, int N, int in)
{
	const lora_scratch *sc = t->lora;
	const pp_ops *o = s->ops;
	const int R = s->spec.lora.rank;
	const size_t A = pp_act_size(o);
	for (int k = k0; k < k1 && R > 0; k++) {
		if (li->lora_a[k] < 0)
			continue;
		int col, w;
		lora_block(s, k, &col, &w);
		/* u = scale * drop(inp) A^T, z = u B^T */
		pp_dropout d;
		const pp_act *x = inp;
		if (lora_dropout(s, t, k, in, &d)) {
			o->dropout(sc->x, inp, N, in, &d);
			x = sc->x;
		}
		o->matmul_fwd(sc->u, x, W(s, li->lora_a[k]), NULL, N, in, R);
		o->scale_act(sc->u, (pp_real)s->spec.lora.scale, (size_t)N * R);
		o->matmul_fwd(sc->z, sc->u, W(s, li->lora_b[k]), NULL, N, R, w);
		if (w == ld) {
			o->add(out, out, sc->z, (size_t)N * w);
			continue;
		}
		pp_act *blk = pp_act_at(o, out, (size_t)col);
		o->copy2d(sc->y, (size_t)w * A, blk, (size_t)ld * A, (size_t)w * A, (size_t)N);
		o->add(sc->y, sc->y, sc->z, (size_t)N * w);
		o->copy2d(blk, (size_t)ld * A, sc->y, (size_t)w * A, (size_t)w * A, (size_t)N);
	}
}

void lora_backward(const pp_stage *s, const layer_acts *t, const layer_index *li, int k0, int k1,
		   pp_act *din, const pp_act *dout, int ld, const pp_act *inp, int N, int in)
{
	const lora_scratch *sc = t->lora;
	const pp_ops *o = s->ops;
	const int R = s->spec.lora.rank;
	const pp_real scale = (pp_real)s->spec.lora.scale;
	const size_t A = pp_act_size(o);
	for (int k = k0; k < k1 && R > 0; k++) {
		if (li->lora_a[k] < 0)
			continue;
		int col, w;
		lora_block(s, k, &col, &w);
		const pp_act *dz = dout;
		if (w != ld) {
			o->copy2d(sc->z, (size_t)w * A, pp_act_at(o, dout, (size_t)col),
				  (size_t)ld * A, (size_t)w * A, (size_t)N);
			dz = sc->z;
		}
		/* dB += dz^T (scale * x A^T), x = drop(inp) */
		pp_dropout d;
		const bool drop = lora_dropout(s, t, k, in, &d);
		const pp_act *x = inp;
		if (drop) {
			o->dropout(sc->x, inp, N, in, &d);
			x = sc->x;
		}
		o->matmul_fwd(sc->u, x, W(s, li->lora_a[k]), NULL, N, in, R);
		o->scale_act(sc->u, scale, (size_t)N * R);
		o->matmul_bwd(NULL, G(s, li->lora_b[k]), NULL, dz, sc->u, NULL, N, R, w);
		/* du = scale * dz B; dA += du^T x; din += drop(du A) */
		o->matmul_bwd(sc->u, NULL, NULL, dz, NULL, W(s, li->lora_b[k]), N, R, w);
		o->scale_act(sc->u, scale, (size_t)N * R);
		o->matmul_bwd(NULL, G(s, li->lora_a[k]), NULL, sc->u, x, NULL, N, in, R);
		if (din) {
			o->matmul_bwd(sc->y, NULL, NULL, sc->u, NULL, W(s, li->lora_a[k]), N, in,
				      R);
			if (drop)
				o->dropout(sc->y, sc->y, N, in, &d);
			o->add(din, din, sc->y, (size_t)N * in);
		}
	}
}

void lora_scratch_counts(const pp_stage *s, size_t rows, size_t n[4])
{
	const size_t R = (size_t)s->spec.lora.rank;
	/* z, y and x hold rows of the widest of C, HD and F */
	size_t wide = (size_t)s->cfg->d_model, hd = (size_t)s->n_heads * s->cfg->head_dim;
	wide = hd > wide ? hd : wide;
	wide = (size_t)s->d_ff > wide ? (size_t)s->d_ff : wide;
	const bool drops = s->spec.lora.dropout > 0 && !s->spec.no_grad;
	n[0] = R ? rows * R : 0;
	n[1] = n[2] = R ? rows * wide : 0;
	n[3] = R && drops ? rows * wide : 0;
}

int lora_scratch_alloc(lora_scratch *sc, const pp_stage *s, size_t rows)
{
	memset(sc, 0, sizeof *sc);
	pp_act **p[] = {&sc->u, &sc->z, &sc->y, &sc->x};
	size_t n[4];
	lora_scratch_counts(s, rows, n);
	return alloc_acts(s->ops, p, n, NELEMS(p));
}

void lora_scratch_free(lora_scratch *sc, const pp_ops *o)
{
	o->free(sc->u);
	o->free(sc->z);
	o->free(sc->y);
	o->free(sc->x);
	memset(sc, 0, sizeof *sc);
}
