/* Causal self-attention with grouped kv heads, flash style: a task walks the
 * queries of one head in blocks of ATT_BQ rows; a block's scores against the
 * keys it can see are one GEMM into per-thread scratch, plus the bias by
 * distance where there is one. No (T,T) matrix outlives a block: the
 * backward pass recomputes the probabilities from the saved log-sum-exp. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* query rows per block: scratch is ATT_BQ x T scores per thread (two such in
 * the backward pass), and the GEMMs are ATT_BQ rows tall */
#define ATT_BQ 64

typedef struct {
	int B, T, Hq, Hkv, D, window;
	int G;                    /* query heads per kv head */
	size_t ld;                /* row stride of qkv and dqkv: (Hq+2Hkv)*D */
	size_t ldo;               /* row stride of out and dout: Hq*D */
	pp_real scale;            /* 1/sqrt(D) */
	const pp_attn_bias *bias; /* NULL: none */
	const int *doc_pos;       /* (B,T) positions in packed documents; NULL: none */
} att_shape;

/* query rows [i0, i0+nq) see at most the keys [k0, k0+nk); dpos: the
 * sequence's positions in its packed documents (NULL: one document) */
typedef struct {
	int i0, nq, k0, nk;
	const int *dpos;
} att_block;

static att_shape att_shape_of(int B, int T, int Hq, int Hkv, int D, int window,
			      const pp_attn_bias *bias)
{
	return (att_shape){.B = B,
			   .T = T,
			   .Hq = Hq,
			   .Hkv = Hkv,
			   .D = D,
			   .window = window,
			   .G = Hq / Hkv,
			   .ld = (size_t)(Hq + 2 * Hkv) * D,
			   .ldo = (size_t)Hq * D,
			   .scale = (pp_real)(1 / sqrt((double)D)),
			   .bias = bias && bias->w ? bias : NULL,
			   .doc_pos = bias ? bias->doc_pos : NULL};
}

/* first key query i sees: i - window < j <= i, and none before its
 * document's first (dpos non-decreasing within a document, so a block's
 * first row sees the block's first key) */
static int att_first_key(const att_shape *a, const int *dpos, int i)
{
	int lo = a->window > 0 && i >= a->window ? i - a->window + 1 : 0;
	return dpos && i - dpos[i] > lo ? i - dpos[i] : lo;
}

static att_block att_block_at(const att_shape *a, int b, int blk)
{
	att_block bl = {.i0 = blk * ATT_BQ,
			.dpos = a->doc_pos ? a->doc_pos + (size_t)b * a->T : NULL};
	bl.nq = a->T - bl.i0 < ATT_BQ ? a->T - bl.i0 : ATT_BQ;
	bl.k0 = att_first_key(a, bl.dpos, bl.i0);
	bl.nk = bl.i0 + bl.nq - bl.k0;
	return bl;
}

/* The (T,D) views, rows ld apart, of query head h and of its kv head in
 * batch row b of qkv */
static void att_views(const att_shape *a, const pp_real *qkv, int b, int h, const pp_real **q,
		      const pp_real **k, const pp_real **v)
{
	const pp_real *row0 = qkv + (size_t)b * a->T * a->ld;
	*q = row0 + (size_t)h * a->D;
	*k = row0 + (size_t)(a->Hq + h / a->G) * a->D;
	*v = *k + (size_t)a->Hkv * a->D;
}

/* Turns the scores s (nq,nk) of block bl into P = exp(S - lse), with zeros
 * for the keys a row may not see, so the GEMMs can run over the whole block.
 * The rows' lse is computed into lse_out (forward pass) or read from lse_in
 * (backward pass). */
static void att_probs(pp_real *s, const att_shape *a, att_block bl, const pp_real *lse_in,
		      pp_real *lse_out)
{
	for (int r = 0; r < bl.nq; r++) {
		pp_real *row = s + (size_t)r * bl.nk;
		int lo = att_first_key(a, bl.dpos, bl.i0 + r) - bl.k0, hi = bl.i0 + r - bl.k0;
		memset(row, 0, sizeof(pp_real) * lo);
		memset(row + hi + 1, 0, sizeof(pp_real) * (bl.nk - hi - 1));
		pp_real l = lse_out ? (lse_out[r] = pp_cpu_vlogsumexp(row + lo, hi - lo + 1))
				    : lse_in[r];
		pp_cpu_vexp(row + lo, row + lo, l, 1, hi - lo + 1);
	}
}

/* s (nq,nk) of block bl (positions absolute) += query head h's bias by
 * distance, for the keys each row sees */
static void att_bias_add(pp_real *s, const att_shape *a, att_block bl, int h)
{
	if (!a->bias)
		return;
	const pp_real *w = (const pp_real *)a->bias->w + (size_t)h * a->bias->nb;
	const int *bucket = a->bias->bucket;
	for (int r = 0; r < bl.nq; r++) {
		const int i = bl.i0 + r;
		pp_real *row = s + (size_t)r * bl.nk - bl.k0;
		for (int j = att_first_key(a, bl.dpos, i); j <= i; j++)
			row[j] += w[bucket[i - j]];
	}
}

/* s (nq,nk) = scale * q (nq,D) @ k (nk,D)^T + query head h's bias for block
 * bl of head views q, k whose rows are ld apart */
static void att_scores(pp_real *s, const att_shape *a, att_block bl, int h, const pp_real *q,
		       const pp_real *k)
{
	pp_cpu_gemm(0, 1, bl.nq, bl.nk, a->D, a->scale, q + bl.i0 * a->ld, (int)a->ld,
		    k + bl.k0 * a->ld, (int)a->ld, 0, s, bl.nk);
	att_bias_add(s, a, bl, h);
}

/* out (B,T,Hq*D), lse (B,Hq,T); qkv (B,T,(Hq+2Hkv)*D) */
void pp_cpu_attention_fwd(pp_act *out_, pp_real *lse, const pp_act *qkv_, int B, int T, int Hq,
			  int Hkv, int D, int window, const pp_attn_bias *bias)
{
	pp_real *out = out_;
	const pp_real *qkv = qkv_;
	const att_shape a = att_shape_of(B, T, Hq, Hkv, D, window, bias);
	const int nblk = (T + ATT_BQ - 1) / ATT_BQ;
	int blas = pp_cpu_blas_serial_begin();
#pragma omp parallel
	{
		pp_real *s = pp_cpu_scratch(sizeof(pp_real) * ATT_BQ * T);
		/* causal blocks cost more the later they are: hand those out first */
#pragma omp for collapse(3) schedule(dynamic)
		for (int b = 0; b < B; b++)
			for (int h = 0; h < Hq; h++)
				for (int blk = nblk - 1; blk >= 0; blk--) {
					const att_block bl = att_block_at(&a, b, blk);
					const pp_real *q, *k, *v;
					att_views(&a, qkv, b, h, &q, &k, &v);
					att_scores(s, &a, bl, h, q, k);
					att_probs(s, &a, bl, NULL,
						  lse + ((size_t)b * Hq + h) * T + bl.i0);
					/* out rows (nq,D) = P (nq,nk) @ v (nk,D) */
					pp_cpu_gemm(0, 0, bl.nq, D, bl.nk, 1, s, bl.nk,
						    v + bl.k0 * a.ld, (int)a.ld, 0,
						    out + ((size_t)b * T + bl.i0) * a.ldo +
							    (size_t)h * D,
						    (int)a.ldo);
				}
		free(s);
	}
	pp_cpu_blas_serial_end(blas);
}

/* Gradients of query head h of batch row b: dq (T,D), rows ld apart, is
 * overwritten; the head's share of its kv head's gradient is added into dk,
 * dv (T,D), rows lddkv apart; with a bias, its gradient by bucket into dwb
 * (nb), in a fixed order. p, dp: ATT_BQ x T scratch. */
static void att_head_bwd(const att_shape *a, int b, int h, pp_real *dq, pp_real *dk, pp_real *dv,
			 size_t lddkv, const pp_real *dout, const pp_real *out, const pp_real *lse,
			 const pp_real *qkv, pp_real *p, pp_real *dp, double *dwb)
{
	const int T = a->T, D = a->D;
	const pp_real *q, *k, *v;
	att_views(a, qkv, b, h, &q, &k, &v);
	const pp_real *dob = dout + (size_t)b * T * a->ldo + (size_t)h * D;
	const pp_real *ob = out + (size_t)b * T * a->ldo + (size_t)h * D;
	const pp_real *l = lse + ((size_t)b * a->Hq + h) * T;
	for (int blk = 0; blk * ATT_BQ < T; blk++) {
		const att_block bl = att_block_at(a, b, blk);
		const pp_real *dob_i = dob + bl.i0 * a->ldo;
		att_scores(p, a, bl, h, q, k);
		att_probs(p, a, bl, l + bl.i0, NULL);
		/* dv (nk,D) += P^T (nk,nq) @ dout (nq,D) */
		pp_cpu_gemm(1, 0, bl.nk, D, bl.nq, 1, p, bl.nk, dob_i, (int)a->ldo, 1,
			    dv + bl.k0 * lddkv, (int)lddkv);
		/* dP (nq,nk) = dout (nq,D) @ v (nk,D)^T */
		pp_cpu_gemm(0, 1, bl.nq, bl.nk, D, 1, dob_i, (int)a->ldo, v + bl.k0 * a->ld,
			    (int)a->ld, 0, dp, bl.nk);
		/* dS = P * (dP - rowsum(dout * out)); masked entries have P = 0 */
		for (int r = 0; r < bl.nq; r++) {
			const pp_real *o = ob + (size_t)(bl.i0 + r) * a->ldo;
			const pp_real *g = dob_i + (size_t)r * a->ldo;
			double delta = 0;
			for (int d = 0; d < D; d++)
				delta += (double)g[d] * o[d];
			pp_real *pr = p + (size_t)r * bl.nk, *dr = dp + (size_t)r * bl.nk;
			for (int j = 0; j < bl.nk; j++)
				dr[j] = pr[j] * (dr[j] - (pp_real)delta);
			/* the bias is added to the scores: its gradient is dS's */
			const int i = bl.i0 + r;
			for (int j = att_first_key(a, bl.dpos, i); dwb && j <= i; j++)
				dwb[a->bias->bucket[i - j]] += dr[j - bl.k0];
		}
		/* dq (nq,D) = scale * dS (nq,nk) @ k (nk,D) */
		pp_cpu_gemm(0, 0, bl.nq, D, bl.nk, a->scale, dp, bl.nk, k + bl.k0 * a->ld,
			    (int)a->ld, 0, dq + bl.i0 * a->ld, (int)a->ld);
		/* dk (nk,D) += scale * dS^T (nk,nq) @ q (nq,D) */
		pp_cpu_gemm(1, 0, bl.nk, D, bl.nq, a->scale, dp, bl.nk, q + bl.i0 * a->ld,
			    (int)a->ld, 1, dk + bl.k0 * lddkv, (int)lddkv);
	}
}

/* part (B,Hkv,S-1,{k,v},T,D): the kv gradients of splits s >= 1. Returns
 * split s's (T,D) dk, followed by its dv. */
static pp_real *att_part(const att_shape *a, pp_real *part, int S, int b, int kvh, int s)
{
	return part + (((size_t)b * a->Hkv + kvh) * (S - 1) + s - 1) * 2 * a->T * a->D;
}

/* dqkv (B,T,(Hq+2Hkv)*D) from dout, out (B,T,Hq*D), lse (B,Hq,T), qkv */
void pp_cpu_attention_bwd(pp_act *dqkv_, const pp_act *dout_, const pp_act *out_,
			  const pp_real *lse, const pp_act *qkv_, int B, int T, int Hq, int Hkv,
			  int D, int window, const pp_attn_bias *bias)
{
	pp_real *dqkv = dqkv_;
	const pp_real *dout = dout_;
	const pp_real *out = out_;
	const pp_real *qkv = qkv_;
	const att_shape a = att_shape_of(B, T, Hq, Hkv, D, window, bias);
	const int G = a.G;
	/* A kv head's gradient sums over its G query heads. Tasks are
	 * (b, kv head, split): a task runs its share of the G query heads one
	 * after another, adding into one dk, dv, so no two threads ever add
	 * into the same row. Split 0 writes into dqkv; the others, needed only
	 * when B*Hkv tasks would leave threads idle, write into part, summed in
	 * after. */
	int S = (omp_get_max_threads() + B * Hkv - 1) / (B * Hkv);
	S = S < G ? S : G;
	pp_real *part = S > 1 ? pp_cpu_scratch(sizeof(pp_real) * B * Hkv * (S - 1) * 2 * T * D)
			      : NULL;
	/* the bias's gradient of each (b, query head), summed over b after */
	const int nb = a.bias && a.bias->dw ? a.bias->nb : 0;
	double *dwp = nb ? pp_cpu_scratch(sizeof(double) * B * Hq * nb) : NULL;
	if (dwp)
		memset(dwp, 0, sizeof(double) * B * Hq * nb);
	int blas = pp_cpu_blas_serial_begin();
#pragma omp parallel
	{
		pp_real *p = pp_cpu_scratch(sizeof(pp_real) * ATT_BQ * T);
		pp_real *dp = pp_cpu_scratch(sizeof(pp_real) * ATT_BQ * T);
#pragma omp for collapse(3) schedule(dynamic)
		for (int b = 0; b < B; b++)
			for (int kvh = 0; kvh < Hkv; kvh++)
				for (int s = 0; s < S; s++) {
					pp_real *row0 = dqkv + (size_t)b * T * a.ld;
					pp_real *dk = row0 + (size_t)(Hq + kvh) * D,
						*dv = dk + (size_t)Hkv * D;
					size_t lddkv = a.ld;
					if (s > 0) {
						dk = att_part(&a, part, S, b, kvh, s);
						dv = dk + (size_t)T * D;
						lddkv = D;
					}
					for (int t = 0; t < T; t++) {
						memset(dk + t * lddkv, 0, sizeof(pp_real) * D);
						memset(dv + t * lddkv, 0, sizeof(pp_real) * D);
					}
					for (int h = kvh * G + s * G / S;
					     h < kvh * G + (s + 1) * G / S; h++)
						att_head_bwd(&a, b, h, row0 + (size_t)h * D, dk, dv,
							     lddkv, dout, out, lse, qkv, p, dp,
							     dwp ? dwp + ((size_t)b * Hq + h) * nb
								 : NULL);
				}
		free(dp);
		free(p);
	}
	pp_cpu_blas_serial_end(blas);
	for (int h = 0; dwp && h < Hq; h++)
		for (int x = 0; x < nb; x++) {
			double g = 0;
			for (int b = 0; b < B; b++)
				g += dwp[((size_t)b * Hq + h) * nb + x];
			a.bias->dw[(size_t)h * nb + x] += (pp_real)g;
		}
	free(dwp);
	if (!part)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			pp_real *dk = dqkv + ((size_t)b * T + t) * a.ld + (size_t)Hq * D;
			pp_real *dv = dk + (size_t)Hkv * D;
			for (int kvh = 0; kvh < Hkv; kvh++)
				for (int s = 1; s < S; s++) {
					const pp_real *pk = att_part(&a, part, S, b, kvh, s) +
							    (size_t)t * D;
					const pp_real *pv = pk + (size_t)T * D;
					for (int d = 0; d < D; d++) {
						dk[(size_t)kvh * D + d] += pk[d];
						dv[(size_t)kvh * D + d] += pv[d];
					}
				}
		}
	free(part);
}

/* ---- decoding with a KV cache ---------------------------------------------- */

/* kcache, vcache (B,Tmax,Hkv*D) entries pos0..pos0+n-1 = the k and v heads
 * of qkv (B,n,(Hq+2Hkv)*D) */
void pp_cpu_kv_append(pp_act *kcache_, pp_act *vcache_, const pp_act *qkv_, int B, int n, int Hq,
		      int Hkv, int D, int Tmax, const int *pos0_)
{
	const int pos0 = pp_cpu_pos(pos0_);
	pp_real *kcache = kcache_;
	pp_real *vcache = vcache_;
	const pp_real *qkv = qkv_;
	const size_t ld = (size_t)(Hq + 2 * Hkv) * D, KV = (size_t)Hkv * D;
#pragma omp parallel for collapse(2) schedule(static)
	for (int b = 0; b < B; b++)
		for (int i = 0; i < n; i++) {
			const pp_real *k = qkv + ((size_t)b * n + i) * ld + (size_t)Hq * D;
			size_t at = ((size_t)b * Tmax + (size_t)(pos0 + i)) * KV;
			memcpy(kcache + at, k, sizeof(pp_real) * KV);
			memcpy(vcache + at, k + KV, sizeof(pp_real) * KV);
		}
}

/* out (B,n,Hq*D): the queries of qkv (B,n,(Hq+2Hkv)*D) at positions
 * pos0.. against the cache (B,Tmax,Hkv*D). A task is one head of one
 * sequence and ATT_BQ query rows; positions are absolute, so att_probs masks
 * the causal and window bounds, and att_bias_add finds the distances, as in
 * the full forward. */
void pp_cpu_attention_cached(pp_act *out_, const pp_act *qkv_, const pp_act *kcache_,
			     const pp_act *vcache_, int B, int n, int Hq, int Hkv, int D, int Tmax,
			     const int *pos0_, int window, const pp_attn_bias *bias)
{
	const int pos0 = pp_cpu_pos(pos0_);
	pp_real *out = out_;
	const pp_real *qkv = qkv_;
	const pp_real *kcache = kcache_;
	const pp_real *vcache = vcache_;
	const att_shape a = att_shape_of(B, pos0 + n, Hq, Hkv, D, window, bias);
	const size_t ldk = (size_t)Hkv * D;
	const int nblk = (n + ATT_BQ - 1) / ATT_BQ;
	int blas = pp_cpu_blas_serial_begin();
#pragma omp parallel
	{
		pp_real *s = pp_cpu_scratch(sizeof(pp_real) * ATT_BQ * (pos0 + n));
		pp_real lse[ATT_BQ];
#pragma omp for collapse(3) schedule(dynamic)
		for (int b = 0; b < B; b++)
			for (int h = 0; h < Hq; h++)
				for (int blk = nblk - 1; blk >= 0; blk--) {
					att_block bl = {.i0 = pos0 + blk * ATT_BQ};
					bl.nq = n - blk * ATT_BQ < ATT_BQ ? n - blk * ATT_BQ
									  : ATT_BQ;
					bl.k0 = att_first_key(&a, NULL, bl.i0);
					bl.nk = bl.i0 + bl.nq - bl.k0;
					const pp_real *q = qkv +
							   ((size_t)b * n + (size_t)blk * ATT_BQ) *
								   a.ld +
							   (size_t)h * D;
					size_t kv = ((size_t)b * Tmax + (size_t)bl.k0) * ldk +
						    (size_t)(h / a.G) * D;
					pp_cpu_gemm(0, 1, bl.nq, bl.nk, D, a.scale, q, (int)a.ld,
						    kcache + kv, (int)ldk, 0, s, bl.nk);
					att_bias_add(s, &a, bl, h);
					att_probs(s, &a, bl, NULL, lse);
					/* out rows (nq,D) = P (nq,nk) @ v (nk,D) */
					pp_cpu_gemm(0, 0, bl.nq, D, bl.nk, 1, s, bl.nk, vcache + kv,
						    (int)ldk, 0,
						    out +
							    ((size_t)b * n + (size_t)blk * ATT_BQ) *
								    a.ldo +
							    (size_t)h * D,
						    (int)a.ldo);
				}
		free(s);
	}
	pp_cpu_blas_serial_end(blas);
}
