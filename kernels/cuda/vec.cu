/* Elementwise vector ops over n elements, and the sum of squares. */
#include "../dropmask.h"
#include "cuda.h"

#define THREADS 256
/* sumsq: blocks of the first pass, at most; their partial sums fit one
 * block of the second pass */
#define SUMSQ_BLOCKS 1024

struct add_op {
	__device__ float operator()(float x, float y) const { return x + y; }
};

struct scale_op {
	float s;
	__device__ float operator()(float x, float) const { return x * s; }
};

/* x (n) *= s */
__global__ void scale_kernel(float *x, float s, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] *= s;
}

/* part (gridDim.x) = per-block sums of x^2 in double: each thread strides
 * the whole vector, the block sums its threads in a fixed tree */
__global__ void sumsq_part_kernel(double *part, const float *x, size_t n)
{
	__shared__ double red[32];
	double acc = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		acc += (double)x[i] * x[i];
	acc = pp_block_sum(acc, red);
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}

/* out (1) = sum of part (n <= blockDim.x) */
__global__ void sumsq_total_kernel(double *out, const double *part, int n)
{
	__shared__ double red[32];
	double v = pp_block_sum(threadIdx.x < (unsigned)n ? part[threadIdx.x] : 0.0, red);
	if (threadIdx.x == 0)
		out[0] = v;
}

/* activations (T): the residual stream */
template <typename T> void pp_cuda_add(pp_act *out, const pp_act *a, const pp_act *b, size_t n)
{
	pp_cuda_map("add_kernel", (T *)out, (const T *)a, (const T *)b, n, add_op());
}
PP_CUDA_BOTH(pp_cuda_add);

/* gradients (fp32): any float offset (a ZeRO shard may start anywhere) */
void pp_cuda_add_real(pp_real *out, const pp_real *a, const pp_real *b, size_t n)
{
	pp_cuda_map("add_kernel", out, a, b, n, add_op());
}

template <typename T> void pp_cuda_scale_act(pp_act *x, pp_real s, size_t n)
{
	pp_cuda_map("scale_kernel", (T *)x, (const T *)x, (const T *)x, n, scale_op{s});
}
PP_CUDA_BOTH(pp_cuda_scale_act);

template <typename T> __global__ void dropout_kernel(T *y, const T *x, int N, int C, pp_dropout d)
{
	const size_t n = (size_t)N * C;
	for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
	     k += (size_t)gridDim.x * blockDim.x) {
		const uint64_t i = k / (size_t)C, j = k % (size_t)C;
		const uint64_t at = (d.row0 + i) * (uint64_t)d.width + (uint64_t)d.col0 + j;
		y[k] = pp_dropped(d.key, at, d.threshold) ? pp_to<T>(0.0f)
							  : pp_to<T>(pp_f(x[k]) * d.scale);
	}
}

template <typename T>
void pp_cuda_dropout(pp_act *out, const pp_act *in, int N, int C, const pp_dropout *d)
{
	const size_t n = (size_t)N * C;
	if (!n)
		return;
	dropout_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
		(T *)out, (const T *)in, N, C, *d);
	PP_CUDA_LAUNCHED("dropout_kernel");
}
PP_CUDA_BOTH(pp_cuda_dropout);

void pp_cuda_scale(pp_real *x, pp_real s, size_t n)
{
	if (!n)
		return;
	scale_kernel<<<pp_cuda_blocks(n, THREADS), THREADS>>>(x, s, n);
	PP_CUDA_LAUNCHED("scale_kernel");
}

/* The grid depends on n only, so the order of the additions, and the
 * result's bits, are the same on every run. */
double pp_cuda_sumsq(const pp_real *x, size_t n)
{
	if (!n)
		return 0;
	size_t want = (n + THREADS * 8 - 1) / (THREADS * 8);
	int blocks = want < SUMSQ_BLOCKS ? (int)want : SUMSQ_BLOCKS;
	double *part = (double *)pp_cuda_scratch(sizeof(double) * (SUMSQ_BLOCKS + 1));
	sumsq_part_kernel<<<blocks, THREADS>>>(part + 1, x, n);
	PP_CUDA_LAUNCHED("sumsq_part_kernel");
	sumsq_total_kernel<<<1, SUMSQ_BLOCKS>>>(part, part + 1, blocks);
	PP_CUDA_LAUNCHED("sumsq_total_kernel");
	double s;
	PP_CUDA_CHECK(cudaMemcpy(&s, part, sizeof s, cudaMemcpyDeviceToHost));
	return s;
}
