/* Row norms over the last dimension: one block per row, row statistics
 * summed in double in a fixed tree (as the CPU backend sums in double). The
 * weight gradients are column sums over the rows (pp_cuda_colsum_*), taken
 * before dx is updated, so they read dout as it came in.
 *
 * A row is read in packs of PP_VEC(T) elements (16 bytes): pack p covers
 * elements p*N .. p*N + N-1, and thread t of the THREADS owns packs
 * t, t + THREADS, ... ; its partial sums run over its packs in that order,
 * so the bits of a row's statistics depend on C only, whether the loads are
 * 16-byte ones (VEC) or not. The forward kernels keep the row in registers
 * between the statistics and the output: one read of the row. */
#include "cuda.h"

#define THREADS 256

/* The K packs of a row that one thread owns, kept in registers between the
 * passes over the row. K = 0 is for rows wider than the registers hold: the
 * values are read back from src, where the same thread read or wrote them. */
template <typename T, int K> struct row_regs {
	float v[K ? K : 1][PP_VEC(T)];
	__device__ __forceinline__ void put(int k, const float *a)
	{
		if constexpr (K != 0) {
#pragma unroll
			for (int j = 0; j < PP_VEC(T); j++)
				v[k][j] = a[j];
		}
	}
	template <bool VEC>
	__device__ __forceinline__ void get(int k, float *a, const T *src, int c, int C) const
	{
		if constexpr (K == 0) {
			pp_load<T, VEC>(a, src, c, C);
		} else {
#pragma unroll
			for (int j = 0; j < PP_VEC(T); j++)
				a[j] = v[k][j];
		}
	}
};

/* packs per thread: K, or as many as the row needs when K is 0 */
#define ROW_STEPS(K, C, N) ((K) ? (K) : ((C) + THREADS * (N)-1) / (THREADS * (N)))

/* The first pass over a row, shared by the norms: a (N) = x[c..] or, with
 * RES, the residual sum x + y rounded to T, which is stored to res (res may
 * alias x or y: each element is read, then written, by the same thread).
 * Elements past C are 0. */
template <typename T, bool VEC, bool RES>
__device__ __forceinline__ void row_input(float *a, T *res, const T *x, const T *y, int c, int C)
{
	pp_load<T, VEC>(a, x, c, C);
	if (RES) {
		float b[PP_VEC(T)];
		pp_load<T, VEC>(b, y, c, C);
#pragma unroll
		for (int j = 0; j < PP_VEC(T); j++)
			a[j] = c + j < C ? pp_round<T>(a[j] + b[j]) : 0.0f;
		pp_store<T, VEC>(res, a, c, C);
	}
}

/* out (N,C) = the norm of the rows v: RMSNorm (LN false), v * rstd *
 * (offset + w), or LayerNorm, (v - mean) * rstd * w + b, whose variance
 * takes a second pass over the registers (no cancellation when |mean| >>
 * std); rstd (N), and mean (N) for LayerNorm. v = x, or with RES res (N,C) =
 * x + y first (the residual add). grid (N), THREADS threads. */
template <typename T, int K, bool VEC, bool RES, bool LN>
__global__ void __launch_bounds__(THREADS)
	norm_fwd_kernel(T *res, T *out, float *mean, float *rstd, const T *x, const T *y,
			const T *w, const T *b, float eps, float offset, int C)
{
	constexpr int N = PP_VEC(T);
	__shared__ double red[32];
	const size_t row = (size_t)blockIdx.x * C;
	x += row;
	out += row;
	if (RES) {
		y += row;
		res += row;
	}
	const T *src = RES ? res : x;
	row_regs<T, K> v;
	/* the sum (LayerNorm) or the sum of squares (RMSNorm) */
	double s = 0;
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C, N); k++) {
		const int c = (k * THREADS + threadIdx.x) * N;
		if (c < C) {
			float a[N];
			row_input<T, VEC, RES>(a, res, x, y, c, C);
			v.put(k, a);
#pragma unroll
			for (int j = 0; j < N; j++)
				s += LN ? (double)a[j] : (double)a[j] * a[j];
		}
	}
	s = pp_block_sum(s, red);
	float m = 0;
	double ss = s;
	if constexpr (LN) {
		m = (float)(s / C);
		ss = 0;
#pragma unroll
		for (int k = 0; k < ROW_STEPS(K, C, N); k++) {
			const int c = (k * THREADS + threadIdx.x) * N;
			if (c < C) {
				float a[N];
				v.template get<VEC>(k, a, src, c, C);
#pragma unroll
				for (int j = 0; j < N; j++) {
					const float d = c + j < C ? a[j] - m : 0.0f;
					ss += (double)(d * d);
				}
			}
		}
		ss = pp_block_sum(ss, red);
	}
	const float r = (float)(1 / sqrt(ss / C + eps));
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C, N); k++) {
		const int c = (k * THREADS + threadIdx.x) * N;
		if (c < C) {
			float a[N], g[N], h[N];
			v.template get<VEC>(k, a, src, c, C);
			pp_load<T, VEC>(g, w, c, C);
			if (LN)
				pp_load<T, VEC>(h, b, c, C);
#pragma unroll
			for (int j = 0; j < N; j++)
				a[j] = LN ? (a[j] - m) * r * g[j] + h[j]
					  : a[j] * r * (offset + g[j]);
			pp_store<T, VEC>(out, a, c, C);
		}
	}
	if (threadIdx.x == 0) {
		if (LN)
			mean[blockIdx.x] = m;
		rstd[blockIdx.x] = r;
	}
}

/* dx (N,C) += rstd * (g - mean(g) - xhat * mean(g * xhat)) per row, with
 * g = dout * (offset + w): under LayerNorm (LN, offset 0) xhat = (x - mean) *
 * rstd; under RMSNorm xhat = x * rstd and no mean(g) term (d rstd / d x_c =
 * -rstd^3 x_c / C). grid (N). Every read of a row comes before the barrier
 * in the reduction, or is made by the thread that then writes the element,
 * so dx may alias dout. */
template <typename T, bool VEC, bool LN>
__global__ void __launch_bounds__(THREADS)
	norm_bwd_kernel(T *dx, const T *dout, const T *x, const T *w, const float *mean,
			const float *rstd, float offset, int C)
{
	constexpr int N = PP_VEC(T);
	__shared__ double red[32];
	const size_t row = (size_t)blockIdx.x * C;
	dx += row;
	dout += row;
	x += row;
	const float m = LN ? mean[blockIdx.x] : 0.0f, r = rstd[blockIdx.x];
	/* past C the loads give 0, which adds nothing */
	double sg = 0, sgx = 0;
	for (int c = threadIdx.x * N; c < C; c += THREADS * N) {
		float g[N], h[N], a[N];
		pp_load<T, VEC>(g, dout, c, C);
		pp_load<T, VEC>(h, w, c, C);
		pp_load<T, VEC>(a, x, c, C);
#pragma unroll
		for (int j = 0; j < N; j++) {
			const float gw = g[j] * (offset + h[j]);
			if (LN)
				sg += gw;
			sgx += (double)(gw * ((a[j] - m) * r));
		}
	}
	if (LN)
		sg = pp_block_sum(sg, red);
	sgx = pp_block_sum(sgx, red);
	const float mg = (float)(sg / C), mgx = (float)(sgx / C);
	for (int c = threadIdx.x * N; c < C; c += THREADS * N) {
		float d[N], g[N], h[N], a[N];
		pp_load<T, VEC>(d, dx, c, C);
		pp_load<T, VEC>(g, dout, c, C);
		pp_load<T, VEC>(h, w, c, C);
		pp_load<T, VEC>(a, x, c, C);
#pragma unroll
		for (int j = 0; j < N; j++)
			d[j] += r * (g[j] * (offset + h[j]) - mg - (a[j] - m) * r * mgx);
		pp_store<T, VEC>(dx, d, c, C);
	}
}

/* LAUNCH(K, VEC) with the packs per thread for rows of C: the smallest of
 * 1, 2, 4, 8 that holds the row, else 0 (wider rows, 8 * THREADS packs of
 * 16 bytes and more, are read back from memory), and VEC where every row
 * of the tensors at the pointers is 16-byte aligned. */
#define ROW_LAUNCH_K(steps, LAUNCH, VEC)                                                           \
	do {                                                                                       \
		if ((steps) <= 1)                                                                  \
			LAUNCH(1, VEC);                                                            \
		else if ((steps) <= 2)                                                             \
			LAUNCH(2, VEC);                                                            \
		else if ((steps) <= 4)                                                             \
			LAUNCH(4, VEC);                                                            \
		else if ((steps) <= 8)                                                             \
			LAUNCH(8, VEC);                                                            \
		else                                                                               \
			LAUNCH(0, VEC);                                                            \
	} while (0)
#define ROW_DISPATCH(T, C, VEC, LAUNCH)                                                            \
	do {                                                                                       \
		const int steps_ = ((C) + THREADS * PP_VEC(T) - 1) / (THREADS * PP_VEC(T));        \
		if (VEC)                                                                           \
			ROW_LAUNCH_K(steps_, LAUNCH, true);                                        \
		else                                                                               \
			ROW_LAUNCH_K(steps_, LAUNCH, false);                                       \
	} while (0)

/* the norm forwards, RMSNorm or (LN) LayerNorm, with (RES) and without the
 * residual add: one kernel each */
template <typename T, bool RES, bool LN>
static void norm_fwd(T *res, T *out, float *mean, float *rstd, const T *x, const T *y, const T *w,
		     const T *b, float eps, float offset, int N, int C)
{
	if (N <= 0)
		return;
	const bool vec = pp_cuda_vec<T>(C, res, out, x, y, w, b);
#define LAUNCH(K, VEC)                                                                             \
	norm_fwd_kernel<T, K, VEC, RES, LN><<<N, THREADS, 0, pp_cuda.stream>>>(                    \
		res, out, mean, rstd, x, y, w, b, eps, offset, C)
	ROW_DISPATCH(T, C, vec, LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED(LN ? "layernorm_fwd_kernel" : "rmsnorm_fwd_kernel");
}

template <typename T>
void pp_cuda_rmsnorm_fwd(pp_act *out, pp_real *rstd, const pp_act *x, const pp_act *w, pp_real eps,
			 pp_real offset, int N, int C)
{
	norm_fwd<T, false, false>(NULL, (T *)out, NULL, rstd, (const T *)x, NULL, (const T *)w,
				  NULL, eps, offset, N, C);
}
PP_CUDA_BOTH(pp_cuda_rmsnorm_fwd);

template <typename T>
void pp_cuda_rmsnorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *rstd, const pp_act *x,
				  const pp_act *y, const pp_act *w, pp_real eps, pp_real offset,
				  int N, int C)
{
	norm_fwd<T, true, false>((T *)res_out, (T *)out, NULL, rstd, (const T *)x, (const T *)y,
				 (const T *)w, NULL, eps, offset, N, C);
}
PP_CUDA_BOTH(pp_cuda_rmsnorm_residual_fwd);

template <typename T>
void pp_cuda_layernorm_fwd(pp_act *out, pp_real *mean, pp_real *rstd, const pp_act *x,
			   const pp_act *w, const pp_act *b, pp_real eps, int N, int C)
{
	norm_fwd<T, false, true>(NULL, (T *)out, mean, rstd, (const T *)x, NULL, (const T *)w,
				 (const T *)b, eps, 0, N, C);
}
PP_CUDA_BOTH(pp_cuda_layernorm_fwd);

template <typename T>
void pp_cuda_layernorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *mean, pp_real *rstd,
				    const pp_act *x, const pp_act *y, const pp_act *w,
				    const pp_act *b, pp_real eps, int N, int C)
{
	norm_fwd<T, true, true>((T *)res_out, (T *)out, mean, rstd, (const T *)x, (const T *)y,
				(const T *)w, (const T *)b, eps, 0, N, C);
}
PP_CUDA_BOTH(pp_cuda_layernorm_residual_fwd);

/* the backward kernel over N rows: one block per row */
template <typename T, bool LN>
static void norm_bwd(T *dx, const T *dout, const T *x, const T *w, const float *mean,
		     const float *rstd, float offset, int N, int C)
{
#define LAUNCH(VEC)                                                                                \
	norm_bwd_kernel<T, VEC, LN><<<N, THREADS>>>(dx, dout, x, w, mean, rstd, offset, C)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(C, dx, dout, x, w), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED(LN ? "layernorm_bwd_kernel" : "rmsnorm_bwd_kernel");
}

/* dx (N,C) +=, dw (C) += */
template <typename T>
void pp_cuda_rmsnorm_bwd(pp_act *dx, pp_real *dw, const pp_act *dout, const pp_act *x,
			 const pp_act *w, const pp_real *rstd, pp_real offset, int N, int C)
{
	if (N <= 0)
		return;
	if (dw)
		pp_cuda_colsum_rms<T>(dw, (const T *)dout, (const T *)x, rstd, N, C);
	norm_bwd<T, false>((T *)dx, (const T *)dout, (const T *)x, (const T *)w, NULL, rstd, offset,
			   N, C);
}
PP_CUDA_BOTH(pp_cuda_rmsnorm_bwd);

/* dx (N,C) +=, dw (C) +=, db (C) += */
template <typename T>
void pp_cuda_layernorm_bwd(pp_act *dx, pp_real *dw, pp_real *db, const pp_act *dout,
			   const pp_act *x, const pp_act *w, const pp_real *mean,
			   const pp_real *rstd, int N, int C)
{
	if (N <= 0)
		return;
	if (dw)
		pp_cuda_colsum_ln<T>(dw, db, (const T *)dout, (const T *)x, mean, rstd, N, C);
	else if (db)
		pp_cuda_colsum<T>(db, (const T *)dout, N, C);
	norm_bwd<T, true>((T *)dx, (const T *)dout, (const T *)x, (const T *)w, mean, rstd, 0, N,
			  C);
}
PP_CUDA_BOTH(pp_cuda_layernorm_bwd);
