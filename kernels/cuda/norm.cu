/* Row norms over the last dimension: one block per row, row statistics
 * summed in double in a fixed tree (as the CPU backend sums in double). The
 * weight gradients are column sums over the rows (pp_cuda_colsum_*), taken
 * before dx is updated, so they read dout as it came in. */
#include "cuda.h"

#define THREADS 256

/* out (N,C) = x * rstd * (offset + w); rstd (N). grid (N) */
__global__ void rmsnorm_fwd_kernel(float *out, float *rstd, const float *x, const float *w,
				   float eps, float offset, int C)
{
	__shared__ double red[32];
	const float *xr = x + (size_t)blockIdx.x * C;
	float *o = out + (size_t)blockIdx.x * C;
	double ss = 0;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		ss += (double)xr[c] * xr[c];
	ss = pp_block_sum(ss, red);
	const float r = (float)(1 / sqrt(ss / C + eps));
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		o[c] = xr[c] * r * (offset + w[c]);
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = r;
}

/* dx (N,C) += d out / d x, with d rstd / d x_c = -rstd^3 x_c / C. grid (N).
 * Every read of a row comes before the barrier in the reduction, so dx may
 * alias dout. */
__global__ void rmsnorm_bwd_kernel(float *dx, const float *dout, const float *x, const float *w,
				   const float *rstd, float offset, int C)
{
	__shared__ double red[32];
	const size_t row = (size_t)blockIdx.x * C;
	const float r = rstd[blockIdx.x];
	double dot = 0;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		dot += (double)(dout[row + c] * (offset + w[c]) * x[row + c]);
	dot = pp_block_sum(dot, red);
	const float k = (float)(dot * r * r * r / C);
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		dx[row + c] += r * (offset + w[c]) * dout[row + c] - k * x[row + c];
}

/* out (N,C) = (x - mean) * rstd * w + b; mean, rstd (N). grid (N).
 * Two passes over the row: no cancellation when |mean| >> std. */
__global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *x,
				     const float *w, const float *b, float eps, int C)
{
	__shared__ double red[32];
	const float *xr = x + (size_t)blockIdx.x * C;
	float *o = out + (size_t)blockIdx.x * C;
	double s = 0;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		s += xr[c];
	s = pp_block_sum(s, red);
	const float m = (float)(s / C);
	double ss = 0;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		const float d = xr[c] - m;
		ss += (double)(d * d);
	}
	ss = pp_block_sum(ss, red);
	const float r = (float)(1 / sqrt(ss / C + eps));
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		o[c] = (xr[c] - m) * r * w[c] + b[c];
	if (threadIdx.x == 0) {
		mean[blockIdx.x] = m;
		rstd[blockIdx.x] = r;
	}
}

/* dx (N,C) += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w,
 * xhat = (x - mean) * rstd. grid (N); dx may alias dout (see above). */
__global__ void layernorm_bwd_kernel(float *dx, const float *dout, const float *x, const float *w,
				     const float *mean, const float *rstd, int C)
{
	__shared__ double red[32];
	const size_t row = (size_t)blockIdx.x * C;
	const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
	double sg = 0, sgx = 0;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		const float g = dout[row + c] * w[c];
		sg += g;
		sgx += (double)(g * ((x[row + c] - m) * r));
	}
	sg = pp_block_sum(sg, red);
	sgx = pp_block_sum(sgx, red);
	const float mg = (float)(sg / C), mgx = (float)(sgx / C);
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		const float xhat = (x[row + c] - m) * r;
		dx[row + c] += r * (dout[row + c] * w[c] - mg - xhat * mgx);
	}
}

void pp_cuda_rmsnorm_fwd(pp_real *out, pp_real *rstd, const pp_real *x, const pp_real *w,
			 pp_real eps, pp_real offset, int N, int C)
{
	if (N <= 0)
		return;
	rmsnorm_fwd_kernel<<<N, THREADS, 0, pp_cuda.stream>>>(out, rstd, x, w, eps, offset, C);
	PP_CUDA_LAUNCHED("rmsnorm_fwd_kernel");
}

/* dx (N,C) +=, dw (C) += */
void pp_cuda_rmsnorm_bwd(pp_real *dx, pp_real *dw, const pp_real *dout, const pp_real *x,
			 const pp_real *w, const pp_real *rstd, pp_real offset, int N, int C)
{
	if (N <= 0)
		return;
	if (dw)
		pp_cuda_colsum_rms(dw, dout, x, rstd, N, C);
	rmsnorm_bwd_kernel<<<N, THREADS>>>(dx, dout, x, w, rstd, offset, C);
	PP_CUDA_LAUNCHED("rmsnorm_bwd_kernel");
}

void pp_cuda_layernorm_fwd(pp_real *out, pp_real *mean, pp_real *rstd, const pp_real *x,
			   const pp_real *w, const pp_real *b, pp_real eps, int N, int C)
{
	if (N <= 0)
		return;
	layernorm_fwd_kernel<<<N, THREADS, 0, pp_cuda.stream>>>(out, mean, rstd, x, w, b, eps, C);
	PP_CUDA_LAUNCHED("layernorm_fwd_kernel");
}

/* dx (N,C) +=, dw (C) +=, db (C) += */
void pp_cuda_layernorm_bwd(pp_real *dx, pp_real *dw, pp_real *db, const pp_real *dout,
			   const pp_real *x, const pp_real *w, const pp_real *mean,
			   const pp_real *rstd, int N, int C)
{
	if (N <= 0)
		return;
	if (dw)
		pp_cuda_colsum_ln(dw, db, dout, x, mean, rstd, N, C);
	else if (db)
		pp_cuda_colsum(db, dout, N, C);
	layernorm_bwd_kernel<<<N, THREADS>>>(dx, dout, x, w, mean, rstd, C);
	PP_CUDA_LAUNCHED("layernorm_bwd_kernel");
}

/* ---- the residual add fused with the norm ---------------------------------- */

/* The K elements of a row that one thread of a THREADS-wide block owns,
 * c = threadIdx.x + k * THREADS (the columns and the order of the plain
 * kernels above, so the row sums come out the same), kept in registers
 * between the passes over the row. K = 0 is for rows wider than the
 * registers hold: the values are read back from res_out, where the same
 * thread wrote them. */
template <int K> struct row_regs {
	float v[K];
	__device__ __forceinline__ void put(int k, float s) { v[k] = s; }
	__device__ __forceinline__ float get(int k, const float *res, int c) const
	{
		(void)res;
		(void)c;
		return v[k];
	}
};
template <> struct row_regs<0> {
	__device__ __forceinline__ void put(int, float) {}
	__device__ __forceinline__ float get(int, const float *res, int c) const { return res[c]; }
};

/* elements per thread: K, or as many as the row needs when K is 0 */
#define ROW_STEPS(K, C) ((K) ? (K) : ((C) + THREADS - 1) / THREADS)

/* res (N,C) = x + y (res may alias x or y: each element is read, then
 * written, by the same thread); out (N,C) = res * rstd * (offset + w);
 * rstd (N). grid (N), THREADS threads. */
template <int K>
__global__ void rmsnorm_residual_fwd_kernel(float *res, float *out, float *rstd, const float *x,
					    const float *y, const float *w, float eps,
					    float offset, int C)
{
	__shared__ double red[32];
	const size_t row = (size_t)blockIdx.x * C;
	res += row;
	out += row;
	x += row;
	y += row;
	row_regs<K> v;
	double ss = 0;
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C); k++) {
		const int c = threadIdx.x + k * THREADS;
		if (c < C) {
			const float s = x[c] + y[c];
			res[c] = s;
			v.put(k, s);
			ss += (double)s * s;
		}
	}
	ss = pp_block_sum(ss, red);
	const float r = (float)(1 / sqrt(ss / C + eps));
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C); k++) {
		const int c = threadIdx.x + k * THREADS;
		if (c < C)
			out[c] = v.get(k, res, c) * r * (offset + w[c]);
	}
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = r;
}

/* res (N,C) = x + y as above; out (N,C) = (res - mean) * rstd * w + b;
 * mean, rstd (N). grid (N), THREADS threads; two passes over the row for
 * the variance, as layernorm_fwd_kernel. */
template <int K>
__global__ void layernorm_residual_fwd_kernel(float *res, float *out, float *mean, float *rstd,
					      const float *x, const float *y, const float *w,
					      const float *b, float eps, int C)
{
	__shared__ double red[32];
	const size_t row = (size_t)blockIdx.x * C;
	res += row;
	out += row;
	x += row;
	y += row;
	row_regs<K> v;
	double s = 0;
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C); k++) {
		const int c = threadIdx.x + k * THREADS;
		if (c < C) {
			const float a = x[c] + y[c];
			res[c] = a;
			v.put(k, a);
			s += a;
		}
	}
	s = pp_block_sum(s, red);
	const float m = (float)(s / C);
	double ss = 0;
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C); k++) {
		const int c = threadIdx.x + k * THREADS;
		if (c < C) {
			const float d = v.get(k, res, c) - m;
			ss += (double)(d * d);
		}
	}
	ss = pp_block_sum(ss, red);
	const float r = (float)(1 / sqrt(ss / C + eps));
#pragma unroll
	for (int k = 0; k < ROW_STEPS(K, C); k++) {
		const int c = threadIdx.x + k * THREADS;
		if (c < C)
			out[c] = (v.get(k, res, c) - m) * r * w[c] + b[c];
	}
	if (threadIdx.x == 0) {
		mean[blockIdx.x] = m;
		rstd[blockIdx.x] = r;
	}
}

/* LAUNCH(K) with the register count per thread for rows of C: the smallest
 * of 4, 8, 16, 32 elements that holds the row, else 0 (rows wider than
 * 32 * THREADS = 8192 are read back from memory). */
#define ROW_DISPATCH(C, LAUNCH)                                   \
	do {                                                      \
		const int steps_ = ((C) + THREADS - 1) / THREADS; \
		if (steps_ <= 4)                                  \
			LAUNCH(4);                                \
		else if (steps_ <= 8)                             \
			LAUNCH(8);                                \
		else if (steps_ <= 16)                            \
			LAUNCH(16);                               \
		else if (steps_ <= 32)                            \
			LAUNCH(32);                               \
		else                                              \
			LAUNCH(0);                                \
	} while (0)

void pp_cuda_rmsnorm_residual_fwd(pp_real *res_out, pp_real *out, pp_real *rstd,
				  const pp_real *x, const pp_real *y, const pp_real *w, pp_real eps,
				  pp_real offset, int N, int C)
{
	if (N <= 0)
		return;
#define LAUNCH(K)                                                                            \
	rmsnorm_residual_fwd_kernel<K><<<N, THREADS, 0, pp_cuda.stream>>>(res_out, out, rstd, x, \
									  y, w, eps, offset, C)
	ROW_DISPATCH(C, LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("rmsnorm_residual_fwd_kernel");
}

void pp_cuda_layernorm_residual_fwd(pp_real *res_out, pp_real *out, pp_real *mean, pp_real *rstd,
				    const pp_real *x, const pp_real *y, const pp_real *w,
				    const pp_real *b, pp_real eps, int N, int C)
{
	if (N <= 0)
		return;
#define LAUNCH(K)                                                                 \
	layernorm_residual_fwd_kernel<K><<<N, THREADS, 0, pp_cuda.stream>>>(       \
		res_out, out, mean, rstd, x, y, w, b, eps, C)
	ROW_DISPATCH(C, LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("layernorm_residual_fwd_kernel");
}
