/* Causal attention with grouped kv heads and an optional sliding window,
 * flash style in plain CUDA: no (T,T) matrix is ever stored. Tensors are
 * of the compute type T (lse fp32); tiles are converted to fp32 in shared
 * memory as they load, and all arithmetic is fp32.
 *
 *   forward   one block per (query block, q head, batch row); key tiles in
 *             shared memory, an online softmax per query row (one warp holds
 *             a row: lane j scores key j of the tile, lanes own the output's
 *             head dims). Writes out and lse.
 *   backward  delta = rowsum(dout * out), then two kernels that recompute
 *             P = exp(S - lse):
 *             dq    one block per (query block, q head, batch row), as the
 *                   forward pass;
 *             dk,dv one block per (key block, kv head, batch row), looping
 *                   over the group's query heads and the query tiles in
 *                   order: each dk, dv row is summed by one warp in a fixed
 *                   order, so no atomics and the same bits on every run.
 *
 * A bias by distance (ops.h's pp_attn_bias) is added to every score the
 * three kernels compute; its gradient is dS summed by bucket: in the dq
 * kernel each warp sums its rows' dS of a bucket with a shuffle tree into
 * its own shared row, the block adds its warps' rows in order into its
 * slot of a (B,Hq,query blocks,nb) buffer, and attention_dbias_kernel adds
 * the slots in order into dw: no atomics, the same bits on every run.
 *
 * Head dims up to ATT_MAXD; the per-lane arrays are sized at compile time
 * (DPL = head dims per lane), one instance per power of two.
 * Query i sees keys j with first_key(i) <= j <= i: i - window < j when
 * window > 0 (Mistral's sliding window), else every j <= i; and with packed
 * documents (pp_attn_bias.doc_pos) none before its document's first row. */
#include "../optable.h"
#include "cuda.h"

#define ATT_MAXD    256
#define ATT_WARPS   8
#define ATT_THREADS (ATT_WARPS * 32)
/* query-side kernels: query rows per warp, and so per block; keys per tile
 * (one per lane) */
#define ATT_QROWS 2
#define ATT_BQ    (ATT_WARPS * ATT_QROWS)
#define ATT_KT    32
/* key-side kernel: keys per warp, and so per block; queries per tile (one
 * per lane) */
#define ATT_KROWS 2
#define ATT_BK    (ATT_WARPS * ATT_KROWS)
#define ATT_QT    32

#define FULL 0xffffffffu

typedef struct {
	int B, T, Hq, Hkv, D, window;
	int G;             /* query heads per kv head */
	int KP;            /* row stride of shared tiles read across lanes: odd, so
			  lanes reading rows j at one column hit distinct banks */
	size_t ld;         /* row stride of qkv and dqkv: (Hq+2Hkv)*D */
	size_t ldo;        /* row stride of out and dout: Hq*D */
	float scale;       /* 1/sqrt(D) */
	bool vec;          /* head rows are 16-byte aligned in every tensor: 16-byte loads */
	const void *bw;    /* the bias's (Hq,nb) weights, of the compute type; NULL: none */
	const int *bucket; /* the bias's bucket of each distance */
	int nb;
	float *dwpart;   /* dq kernel: the bias's gradient of each (b, h, query block), nb each */
	const int *dpos; /* (B,T) rows' positions in packed documents; NULL: one document */
} att_shape;

static att_shape att_shape_of(int B, int T, int Hq, int Hkv, int D, int window,
			      const pp_attn_bias *bias)
{
	PP_CUDA_REQUIRE(D >= 1 && D <= ATT_MAXD,
			"attention: head dim %d; the CUDA kernels take 1 to %d", D, ATT_MAXD);
	PP_CUDA_REQUIRE(Hkv >= 1 && Hq % Hkv == 0,
			"attention: %d query heads do not group over %d kv heads", Hq, Hkv);
	att_shape a;
	a.B = B, a.T = T, a.Hq = Hq, a.Hkv = Hkv, a.D = D, a.window = window;
	a.G = Hq / Hkv;
	a.KP = D | 1;
	a.ld = (size_t)(Hq + 2 * Hkv) * D;
	a.ldo = (size_t)Hq * D;
	a.scale = (float)(1 / sqrt((double)D));
	a.vec = false;
	const bool has_bias = bias && bias->w;
	a.bw = has_bias ? bias->w : NULL;
	a.bucket = has_bias ? bias->bucket : NULL;
	a.nb = has_bias ? bias->nb : 0;
	a.dwpart = NULL;
	a.dpos = bias ? bias->doc_pos : NULL;
	return a;
}

/* the bias of query i and key j <= i in head h (0 without one) */
template <typename T>
__device__ __forceinline__ float att_bias(const att_shape &a, int h, int i, int j)
{
	return a.bw ? pp_f(((const T *)a.bw)[(size_t)h * a.nb + a.bucket[i - j]]) : 0.0f;
}

/* first key query i sees: i - window < j <= i */
__device__ __forceinline__ int first_key(int i, int window)
{
	return window > 0 && i >= window ? i - window + 1 : 0;
}

/* whether query i of sequence b may see key j <= i as its packed document
 * goes (the window aside): j is not before the document's first row */
__device__ __forceinline__ bool same_doc(const att_shape &a, int b, int i, int j)
{
	return !a.dpos || j >= i - a.dpos[(size_t)b * a.T + i];
}

__device__ __forceinline__ float dot(const float *a, const float *b, int n)
{
	float s = 0;
#pragma unroll 4
	for (int d = 0; d < n; d++)
		s += a[d] * b[d];
	return s;
}

/* rows [r0, r0+nr) of a (.,D) head view of T with rows ld apart into a
 * shared fp32 tile with rows stride apart, in packs of PP_VEC(T) */
template <typename T>
__device__ __forceinline__ void load_rows(float *tile, int stride, const T *src, size_t ld, int r0,
					  int nr, int D, bool vec)
{
	constexpr int P = PP_VEC(T);
	const int packs = (D + P - 1) / P;
	for (int e = threadIdx.x; e < nr * packs; e += blockDim.x) {
		const int r = e / packs, d = e % packs * P;
		const T *row = src + (size_t)(r0 + r) * ld;
		float f[P];
		if (vec)
			pp_load<T, true>(f, row, d, D);
		else
			pp_load<T, false>(f, row, d, D);
#pragma unroll
		for (int j = 0; j < P; j++)
			if (d + j < D)
				tile[r * stride + d + j] = f[j];
	}
}

/* ---- forward --------------------------------------------------------------- */

/* out (B,T,Hq*D), lse (B,Hq,T); qkv (B,T,(Hq+2Hkv)*D).
 * grid (ceil(T/ATT_BQ), Hq, B), ATT_THREADS threads; shared: q (BQ,D),
 * k (KT,KP), v (KT,D) */
template <typename T, int DPL>
__global__ void __launch_bounds__(ATT_THREADS)
	attention_fwd_kernel(T *out, float *lse, const T *qkv, att_shape a)
{
	extern __shared__ float sm[];
	const int D = a.D, KP = a.KP;
	float *q_s = sm, *k_s = q_s + ATT_BQ * D, *v_s = k_s + ATT_KT * KP;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	/* the last query blocks see the most keys: start them first */
	const int blk = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	const int i0 = blk * ATT_BQ, nq = min(ATT_BQ, a.T - i0);
	const T *base = qkv + (size_t)b * a.T * a.ld;
	const T *qg = base + (size_t)h * D;
	const T *kg = base + (size_t)(a.Hq + h / a.G) * D;
	const T *vg = kg + (size_t)a.Hkv * D;
	load_rows(q_s, D, qg, a.ld, i0, nq, D, a.vec);

	float m[ATT_QROWS], l[ATT_QROWS], o[ATT_QROWS][DPL];
#pragma unroll
	for (int r = 0; r < ATT_QROWS; r++) {
		m[r] = -INFINITY;
		l[r] = 0;
#pragma unroll
		for (int u = 0; u < DPL; u++)
			o[r][u] = 0;
	}
	const int k_hi = i0 + nq - 1;
	for (int j0 = first_key(i0, a.window); j0 <= k_hi; j0 += ATT_KT) {
		const int nk = min(ATT_KT, k_hi - j0 + 1);
		__syncthreads(); /* the previous tile is consumed (and q is loaded) */
		load_rows(k_s, KP, kg, a.ld, j0, nk, D, a.vec);
		load_rows(v_s, D, vg, a.ld, j0, nk, D, a.vec);
		__syncthreads();
#pragma unroll
		for (int r = 0; r < ATT_QROWS; r++) {
			const int qr = warp * ATT_QROWS + r, i = i0 + qr, j = j0 + lane;
			if (qr >= nq)
				continue; /* the whole warp */
			float s = -INFINITY;
			if (lane < nk && j >= first_key(i, a.window) && j <= i &&
			    same_doc(a, b, i, j))
				s = dot(q_s + qr * D, k_s + lane * KP, D) * a.scale +
				    att_bias<T>(a, h, i, j);
			const float mt = pp_warp_max(s);
			if (mt == -INFINITY)
				continue; /* no key of this tile is visible to row i */
			const float mn = fmaxf(m[r], mt);
			const float alpha = expf(m[r] - mn); /* 0 while m is -inf */
			const float p = s == -INFINITY ? 0.0f : expf(s - mn);
			l[r] = l[r] * alpha + pp_warp_sum(p);
			m[r] = mn;
#pragma unroll
			for (int u = 0; u < DPL; u++)
				o[r][u] *= alpha;
			for (int jj = 0; jj < nk; jj++) {
				const float pj = __shfl_sync(FULL, p, jj);
				const float *vv = v_s + jj * D;
#pragma unroll
				for (int u = 0; u < DPL; u++) {
					const int d = lane + 32 * u;
					if (d < D)
						o[r][u] += pj * vv[d];
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < ATT_QROWS; r++) {
		const int qr = warp * ATT_QROWS + r, i = i0 + qr;
		if (qr >= nq)
			continue;
		/* the diagonal is always visible: l > 0 */
		const float inv = 1.0f / l[r];
		T *og = out + ((size_t)b * a.T + i) * a.ldo + (size_t)h * D;
#pragma unroll
		for (int u = 0; u < DPL; u++) {
			const int d = lane + 32 * u;
			if (d < D)
				og[d] = pp_to<T>(o[r][u] * inv);
		}
		if (lane == 0)
			lse[((size_t)b * a.Hq + h) * a.T + i] = m[r] + logf(l[r]);
	}
}

/* ---- backward ------------------------------------------------------------- */

/* delta (B,Hq,T) = rowsum(dout * out) per head, in double and in d order as
 * the CPU backend sums it */
template <typename T>
__global__ void attention_delta_kernel(float *delta, const T *dout, const T *out, att_shape a)
{
	const size_t n = (size_t)a.B * a.Hq * a.T;
	for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
	     idx += (size_t)gridDim.x * blockDim.x) {
		const int i = (int)(idx % a.T), h = (int)(idx / a.T % a.Hq);
		const size_t b = idx / a.T / a.Hq;
		const size_t at = (b * a.T + i) * a.ldo + (size_t)h * a.D;
		double acc = 0;
		for (int d = 0; d < a.D; d++)
			acc += (double)pp_f(dout[at + d]) * pp_f(out[at + d]);
		delta[idx] = (float)acc;
	}
}

/* dq part of dqkv (overwritten) = scale * dS @ k, dS = P * (dout @ v^T - delta);
 * with a.dwpart, the block's bias gradient by bucket into its slot.
 * grid (ceil(T/ATT_BQ), Hq, B), ATT_THREADS threads; shared: q (BQ,D),
 * dout (BQ,D), k (KT,KP), v (KT,KP), and with a.dwpart (ATT_WARPS,nb) */
template <typename T, int DPL>
__global__ void __launch_bounds__(ATT_THREADS)
	attention_dq_kernel(T *dqkv, const T *dout, const float *lse, const float *delta,
			    const T *qkv, att_shape a)
{
	extern __shared__ float sm[];
	const int D = a.D, KP = a.KP;
	float *q_s = sm, *do_s = q_s + ATT_BQ * D, *k_s = do_s + ATT_BQ * D,
	      *v_s = k_s + ATT_KT * KP, *dw_s = v_s + ATT_KT * KP;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int blk = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	for (int x = threadIdx.x; a.dwpart && x < ATT_WARPS * a.nb; x += blockDim.x)
		dw_s[x] = 0;
	const int i0 = blk * ATT_BQ, nq = min(ATT_BQ, a.T - i0);
	const T *base = qkv + (size_t)b * a.T * a.ld;
	const T *kg = base + (size_t)(a.Hq + h / a.G) * D;
	const T *vg = kg + (size_t)a.Hkv * D;
	load_rows(q_s, D, base + (size_t)h * D, a.ld, i0, nq, D, a.vec);
	load_rows(do_s, D, dout + (size_t)b * a.T * a.ldo + (size_t)h * D, a.ldo, i0, nq, D, a.vec);
	const size_t row0 = ((size_t)b * a.Hq + h) * a.T; /* of lse, delta */

	float L[ATT_QROWS], dl[ATT_QROWS], dq[ATT_QROWS][DPL];
#pragma unroll
	for (int r = 0; r < ATT_QROWS; r++) {
		const int qr = warp * ATT_QROWS + r;
		L[r] = qr < nq ? lse[row0 + i0 + qr] : 0;
		dl[r] = qr < nq ? delta[row0 + i0 + qr] : 0;
#pragma unroll
		for (int u = 0; u < DPL; u++)
			dq[r][u] = 0;
	}
	const int k_hi = i0 + nq - 1;
	for (int j0 = first_key(i0, a.window); j0 <= k_hi; j0 += ATT_KT) {
		const int nk = min(ATT_KT, k_hi - j0 + 1);
		__syncthreads();
		load_rows(k_s, KP, kg, a.ld, j0, nk, D, a.vec);
		load_rows(v_s, KP, vg, a.ld, j0, nk, D, a.vec);
		__syncthreads();
#pragma unroll
		for (int r = 0; r < ATT_QROWS; r++) {
			const int qr = warp * ATT_QROWS + r, i = i0 + qr, j = j0 + lane;
			if (qr >= nq)
				continue;
			float ds = 0;
			const bool seen = lane < nk && j >= first_key(i, a.window) && j <= i &&
					  same_doc(a, b, i, j);
			if (seen) {
				const float s = dot(q_s + qr * D, k_s + lane * KP, D) * a.scale +
						att_bias<T>(a, h, i, j);
				const float p = expf(s - L[r]);
				const float dp = dot(do_s + qr * D, v_s + lane * KP, D);
				ds = p * (dp - dl[r]);
			}
			if (a.dwpart) {
				/* the row's dS summed by bucket, one bucket at a time */
				const int bk = seen ? a.bucket[i - j] : -1;
				unsigned todo = __ballot_sync(FULL, bk >= 0);
				while (todo) {
					const int sel = __shfl_sync(FULL, bk, __ffs(todo) - 1);
					const float v = pp_warp_sum(bk == sel ? ds : 0.0f);
					if (lane == 0)
						dw_s[warp * a.nb + sel] += v;
					todo &= ~__ballot_sync(FULL, bk == sel);
				}
			}
			for (int jj = 0; jj < nk; jj++) {
				const float dsj = __shfl_sync(FULL, ds, jj);
				const float *kk = k_s + jj * KP;
#pragma unroll
				for (int u = 0; u < DPL; u++) {
					const int d = lane + 32 * u;
					if (d < D)
						dq[r][u] += dsj * kk[d];
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < ATT_QROWS; r++) {
		const int qr = warp * ATT_QROWS + r, i = i0 + qr;
		if (qr >= nq)
			continue;
		T *g = dqkv + ((size_t)b * a.T + i) * a.ld + (size_t)h * D;
#pragma unroll
		for (int u = 0; u < DPL; u++) {
			const int d = lane + 32 * u;
			if (d < D)
				g[d] = pp_to<T>(a.scale * dq[r][u]);
		}
	}
	if (!a.dwpart)
		return;
	__syncthreads();
	float *slot = a.dwpart + (((size_t)b * a.Hq + h) * gridDim.x + blk) * a.nb;
	for (int x = threadIdx.x; x < a.nb; x += blockDim.x) {
		float t = 0;
		for (int w = 0; w < ATT_WARPS; w++)
			t += dw_s[w * a.nb + x];
		slot[x] = t;
	}
}

/* dw (Hq,nb) += part (B,Hq,nblk,nb) summed over b and the query blocks, in
 * order; one thread per (h, bucket) */
__global__ void attention_dbias_kernel(float *dw, const float *part, int B, int Hq, int nblk,
				       int nb)
{
	const int idx = blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= Hq * nb)
		return;
	const int h = idx / nb, x = idx % nb;
	float t = 0;
	for (int b = 0; b < B; b++)
		for (int k = 0; k < nblk; k++)
			t += part[(((size_t)b * Hq + h) * nblk + k) * nb + x];
	dw[idx] += t;
}

/* dk, dv parts of dqkv (overwritten): dk = scale * dS^T @ q, dv = P^T @ dout,
 * summed over the G query heads of kv head kvh. Each warp owns ATT_KROWS
 * keys and sums their rows over heads, then query tiles, then queries, in
 * order. grid (ceil(T/ATT_BK), Hkv, B), ATT_THREADS threads; shared:
 * k (BK,D), v (BK,D), q (QT,KP), dout (QT,KP), lse (QT), delta (QT) */
template <typename T, int DPL>
__global__ void __launch_bounds__(ATT_THREADS)
	attention_dkv_kernel(T *dqkv, const T *dout, const float *lse, const float *delta,
			     const T *qkv, att_shape a)
{
	extern __shared__ float sm[];
	const int D = a.D, KP = a.KP;
	float *k_s = sm, *v_s = k_s + ATT_BK * D, *q_s = v_s + ATT_BK * D,
	      *do_s = q_s + ATT_QT * KP;
	float *lse_s = do_s + ATT_QT * KP, *dl_s = lse_s + ATT_QT;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int kvh = blockIdx.y, b = blockIdx.z;
	const int j0 = blockIdx.x * ATT_BK, nkeys = min(ATT_BK, a.T - j0);
	const T *base = qkv + (size_t)b * a.T * a.ld;
	load_rows(k_s, D, base + (size_t)(a.Hq + kvh) * D, a.ld, j0, nkeys, D, a.vec);
	load_rows(v_s, D, base + (size_t)(a.Hq + a.Hkv + kvh) * D, a.ld, j0, nkeys, D, a.vec);

	float dk[ATT_KROWS][DPL], dv[ATT_KROWS][DPL];
#pragma unroll
	for (int r = 0; r < ATT_KROWS; r++)
#pragma unroll
		for (int u = 0; u < DPL; u++)
			dk[r][u] = dv[r][u] = 0;
	/* the last query that sees one of the block's keys */
	const int i_hi = a.window > 0 ? min(a.T - 1, j0 + nkeys - 1 + a.window - 1) : a.T - 1;
	for (int h = kvh * a.G; h < (kvh + 1) * a.G; h++) {
		const T *qg = base + (size_t)h * D;
		const T *dog = dout + (size_t)b * a.T * a.ldo + (size_t)h * D;
		const size_t row0 = ((size_t)b * a.Hq + h) * a.T;
		for (int q0 = j0; q0 <= i_hi; q0 += ATT_QT) {
			const int nqt = min(ATT_QT, i_hi - q0 + 1);
			__syncthreads(); /* the previous tile is consumed (and k, v loaded) */
			load_rows(q_s, KP, qg, a.ld, q0, nqt, D, a.vec);
			load_rows(do_s, KP, dog, a.ldo, q0, nqt, D, a.vec);
			for (int e = threadIdx.x; e < nqt; e += blockDim.x) {
				lse_s[e] = lse[row0 + q0 + e];
				dl_s[e] = delta[row0 + q0 + e];
			}
			__syncthreads();
#pragma unroll
			for (int r = 0; r < ATT_KROWS; r++) {
				const int kr = warp * ATT_KROWS + r, j = j0 + kr, i = q0 + lane;
				if (kr >= nkeys)
					continue; /* the whole warp */
				float p = 0, ds = 0;
				if (lane < nqt && i >= j && (a.window <= 0 || j > i - a.window) &&
				    same_doc(a, b, i, j)) {
					const float s = dot(q_s + lane * KP, k_s + kr * D, D) *
								a.scale +
							att_bias<T>(a, h, i, j);
					p = expf(s - lse_s[lane]);
					const float dp = dot(do_s + lane * KP, v_s + kr * D, D);
					ds = p * (dp - dl_s[lane]);
				}
				for (int ii = 0; ii < nqt; ii++) {
					const float pi = __shfl_sync(FULL, p, ii);
					const float dsi = __shfl_sync(FULL, ds, ii);
					const float *qq = q_s + ii * KP, *gg = do_s + ii * KP;
#pragma unroll
					for (int u = 0; u < DPL; u++) {
						const int d = lane + 32 * u;
						if (d < D) {
							dv[r][u] += pi * gg[d];
							dk[r][u] += dsi * qq[d];
						}
					}
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < ATT_KROWS; r++) {
		const int kr = warp * ATT_KROWS + r, j = j0 + kr;
		if (kr >= nkeys)
			continue;
		T *gk = dqkv + ((size_t)b * a.T + j) * a.ld + (size_t)(a.Hq + kvh) * D;
		T *gv = gk + (size_t)a.Hkv * D;
#pragma unroll
		for (int u = 0; u < DPL; u++) {
			const int d = lane + 32 * u;
			if (d < D) {
				gk[d] = pp_to<T>(a.scale * dk[r][u]);
				gv[d] = pp_to<T>(dv[r][u]);
			}
		}
	}
}

/* ---- launches ------------------------------------------------------------- */

/* F<T, DPL>(args...) with DPL the head dims per lane that D needs */
#define ATT_DISPATCH(D, F, ...)                                                                    \
	do {                                                                                       \
		if ((D) <= 32)                                                                     \
			F<T, 1>(__VA_ARGS__);                                                      \
		else if ((D) <= 64)                                                                \
			F<T, 2>(__VA_ARGS__);                                                      \
		else if ((D) <= 128)                                                               \
			F<T, 4>(__VA_ARGS__);                                                      \
		else                                                                               \
			F<T, 8>(__VA_ARGS__);                                                      \
	} while (0)

template <typename T, int DPL>
static void fwd_launch(T *out, float *lse, const T *qkv, const att_shape &a)
{
	const size_t smem = sizeof(float) *
			    ((size_t)ATT_BQ * a.D + (size_t)ATT_KT * a.KP + (size_t)ATT_KT * a.D);
	pp_cuda_smem((const void *)attention_fwd_kernel<T, DPL>, smem, PP_OPTABLE_ATTN_FWD);
	const dim3 grid((a.T + ATT_BQ - 1) / ATT_BQ, a.Hq, a.B);
	attention_fwd_kernel<T, DPL><<<grid, ATT_THREADS, smem>>>(out, lse, qkv, a);
	PP_CUDA_LAUNCHED(PP_OPTABLE_ATTN_FWD);
}

template <typename T, int DPL>
static void dq_launch(T *dqkv, const T *dout, const float *lse, const float *delta, const T *qkv,
		      const att_shape &a)
{
	const size_t smem = sizeof(float) * (2 * (size_t)ATT_BQ * a.D + 2 * (size_t)ATT_KT * a.KP +
					     (a.dwpart ? (size_t)ATT_WARPS * a.nb : 0));
	pp_cuda_smem((const void *)attention_dq_kernel<T, DPL>, smem, "attention_dq_kernel");
	const dim3 grid((a.T + ATT_BQ - 1) / ATT_BQ, a.Hq, a.B);
	attention_dq_kernel<T, DPL><<<grid, ATT_THREADS, smem>>>(dqkv, dout, lse, delta, qkv, a);
	PP_CUDA_LAUNCHED("attention_dq_kernel");
}

template <typename T, int DPL>
static void dkv_launch(T *dqkv, const T *dout, const float *lse, const float *delta, const T *qkv,
		       const att_shape &a)
{
	const size_t smem = sizeof(float) * (2 * (size_t)ATT_BK * a.D + 2 * (size_t)ATT_QT * a.KP +
					     2 * (size_t)ATT_QT);
	pp_cuda_smem((const void *)attention_dkv_kernel<T, DPL>, smem, "attention_dkv_kernel");
	const dim3 grid((a.T + ATT_BK - 1) / ATT_BK, a.Hkv, a.B);
	attention_dkv_kernel<T, DPL><<<grid, ATT_THREADS, smem>>>(dqkv, dout, lse, delta, qkv, a);
	PP_CUDA_LAUNCHED("attention_dkv_kernel");
}

/* cuDNN for this table: asked for, or the bf16 table's own choice */
template <typename T> static bool use_cudnn(void)
{
	return pp_cuda.attention == PP_CUDA_ATTENTION_CUDNN ||
	       (pp_cuda.attention == PP_CUDA_ATTENTION_AUTO && pp_is_bf16<T>::value);
}

/* The cuDNN graph has no documents: attention over packed ones runs the
 * plain kernels. (A bias by distance it takes, sdpa_cudnn.cu.) */
static bool cudnn_takes(const att_shape &a) { return !a.dpos; }

/* out (B,T,Hq*D), lse (B,Hq,T); qkv (B,T,(Hq+2Hkv)*D) */
template <typename T>
void pp_cuda_attention_fwd(pp_act *out, pp_real *lse, const pp_act *qkv, int B, int T_, int Hq,
			   int Hkv, int D, int window, const pp_attn_bias *bias)
{
	if (B <= 0 || T_ <= 0 || Hq <= 0)
		return;
	att_shape a = att_shape_of(B, T_, Hq, Hkv, D, window, bias);
	a.vec = pp_cuda_vec<T>(D, out, qkv);
	if (use_cudnn<T>() && cudnn_takes(a) &&
	    pp_cuda_sdpa_fwd<T>((T *)out, lse, (const T *)qkv, B, T_, Hq, Hkv, D, window, bias))
		return;
	ATT_DISPATCH(D, fwd_launch, (T *)out, lse, (const T *)qkv, a);
}
PP_CUDA_BOTH(pp_cuda_attention_fwd);

/* dqkv (B,T,(Hq+2Hkv)*D) from dout, out (B,T,Hq*D), lse (B,Hq,T), qkv */
template <typename T>
void pp_cuda_attention_bwd(pp_act *dqkv, const pp_act *dout, const pp_act *out, const pp_real *lse,
			   const pp_act *qkv, int B, int T_, int Hq, int Hkv, int D, int window,
			   const pp_attn_bias *bias)
{
	if (B <= 0 || T_ <= 0 || Hq <= 0)
		return;
	att_shape a = att_shape_of(B, T_, Hq, Hkv, D, window, bias);
	a.vec = pp_cuda_vec<T>(D, dqkv, dout, qkv);
	if (use_cudnn<T>() && cudnn_takes(a) &&
	    pp_cuda_sdpa_bwd<T>((T *)dqkv, (const T *)dout, (const T *)out, lse, (const T *)qkv, B,
				T_, Hq, Hkv, D, window, bias))
		return;
	const size_t n = (size_t)B * Hq * T_;
	const int nblk = (T_ + ATT_BQ - 1) / ATT_BQ;
	const size_t nparts = a.bw && bias->dw ? (size_t)B * Hq * nblk * a.nb : 0;
	float *delta = (float *)pp_cuda_scratch(sizeof(float) * (n + nparts));
	a.dwpart = nparts ? delta + n : NULL;
	attention_delta_kernel<T>
		<<<pp_cuda_blocks(n, 256), 256>>>(delta, (const T *)dout, (const T *)out, a);
	PP_CUDA_LAUNCHED("attention_delta_kernel");
	ATT_DISPATCH(D, dq_launch, (T *)dqkv, (const T *)dout, lse, delta, (const T *)qkv, a);
	ATT_DISPATCH(D, dkv_launch, (T *)dqkv, (const T *)dout, lse, delta, (const T *)qkv, a);
	if (a.dwpart) {
		attention_dbias_kernel<<<pp_cuda_blocks((size_t)Hq * a.nb, 256), 256>>>(
			bias->dw, a.dwpart, B, Hq, nblk, a.nb);
		PP_CUDA_LAUNCHED("attention_dbias_kernel");
	}
}
PP_CUDA_BOTH(pp_cuda_attention_bwd);
