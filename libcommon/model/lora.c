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
 * over tp that the base products take. */
#include <string.h>

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

void lora_forward(const pp_stage *s, const lora_scratch *sc, const layer_index *li, int k0, int k1,
		  pp_act *out, int ld, const pp_act *inp, int N, int in)
{
	const pp_ops *o = s->ops;
	const int R = s->spec.lora.rank;
	const size_t A = pp_act_size(o);
	for (int k = k0; k < k1 && R > 0; k++) {
		if (li->lora_a[k] < 0)
			continue;
		int col, w;
		lora_block(s, k, &col, &w);
		/* u = scale * inp A^T, z = u B^T */
		o->matmul_fwd(sc->u, inp, W(s, li->lora_a[k]), NULL, N, in, R);
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

void lora_backward(const pp_stage *s, const lora_scratch *sc, const layer_index *li, int k0, int k1,
		   pp_act *din, const pp_act *dout, int ld, const pp_act *inp, int N, int in)
{
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
		/* dB += dz^T (scale * inp A^T) */
		o->matmul_fwd(sc->u, inp, W(s, li->lora_a[k]), NULL, N, in, R);
		o->scale_act(sc->u, scale, (size_t)N * R);
		o->matmul_bwd(NULL, G(s, li->lora_b[k]), NULL, dz, sc->u, NULL, N, R, w);
		/* du = scale * dz B; dA += du^T inp; din += du A */
		o->matmul_bwd(sc->u, NULL, NULL, dz, NULL, W(s, li->lora_b[k]), N, R, w);
		o->scale_act(sc->u, scale, (size_t)N * R);
		o->matmul_bwd(NULL, G(s, li->lora_a[k]), NULL, sc->u, inp, NULL, N, in, R);
		if (din) {
			o->matmul_bwd(sc->y, NULL, NULL, sc->u, NULL, W(s, li->lora_a[k]), N, in,
				      R);
			o->add(din, din, sc->y, (size_t)N * in);
		}
	}
}

size_t lora_scratch_width(const pp_stage *s)
{
	size_t wide = (size_t)s->cfg->d_model, hd = (size_t)s->n_heads * s->cfg->head_dim;
	wide = hd > wide ? hd : wide;
	return (size_t)s->d_ff > wide ? (size_t)s->d_ff : wide;
}

int lora_scratch_alloc(lora_scratch *sc, const pp_stage *s, size_t rows)
{
	memset(sc, 0, sizeof *sc);
	const size_t R = (size_t)s->spec.lora.rank;
	if (!R)
		return 0;
	const size_t wide = lora_scratch_width(s);
	pp_act **p[] = {&sc->u, &sc->z, &sc->y};
	const size_t n[] = {rows * R, rows * wide, rows * wide};
	return alloc_acts(s->ops, p, n, NELEMS(p));
}

void lora_scratch_free(lora_scratch *sc, const pp_ops *o)
{
	o->free(sc->u);
	o->free(sc->z);
	o->free(sc->y);
	memset(sc, 0, sizeof *sc);
}
