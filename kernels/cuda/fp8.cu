/* FP8 casts (kernels/fp8.h: the CPU's rounding, bit for bit) with the amax
 * and counts they record, and the amax current scaling scales by. */
#include "../fp8.h"
#include "cuda.h"

#define THREADS 256

/* max over non-negative floats: their bits order as unsigned ints do */
__device__ __forceinline__ void atomic_max_nonneg(float *p, float v)
{
	atomicMax((unsigned int *)p, __float_as_uint(v));
}

template <typename T>
__global__ void fp8_cast_kernel(T *y, const T *x, size_t n, float scale, int fmt,
				pp_fp8_tally *tally)
{
	const float over = pp_fp8_overflow(fmt);
	float amax = 0;
	unsigned long long sat = 0, flushed = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float v = pp_f(x[i]), s = v * scale, q = pp_fp8_round(s, fmt);
		amax = fabsf(v) > amax ? fabsf(v) : amax;
		sat += fabsf(s) >= over;
		flushed += v != 0 && q == 0;
		y[i] = pp_to<T>(q);
	}
	if (!tally)
		return;
	amax = pp_warp_max(amax);
	sat = pp_warp_sum(sat);
	flushed = pp_warp_sum(flushed);
	if ((threadIdx.x & 31) == 0) {
		atomic_max_nonneg(&tally->amax, amax);
		if (sat)
			atomicAdd(&tally->saturated, sat);
		if (flushed)
			atomicAdd(&tally->flushed, flushed);
	}
}

template <typename T>
void pp_cuda_fp8_cast(pp_act *out, const pp_act *in, size_t n, float scale, int fmt,
		      pp_fp8_tally *tally)
{
	if (!n)
		return;
	fp8_cast_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
		(T *)out, (const T *)in, n, scale, fmt, tally);
	PP_CUDA_LAUNCHED("fp8_cast_kernel");
}
PP_CUDA_BOTH(pp_cuda_fp8_cast);

template <typename T> __global__ void absmax_kernel(float *out, const T *x, size_t n)
{
	float amax = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float v = fabsf(pp_f(x[i]));
		amax = v > amax ? v : amax;
	}
	amax = pp_warp_max(amax);
	if ((threadIdx.x & 31) == 0)
		atomic_max_nonneg(out, amax);
}

template <typename T> float pp_cuda_absmax(const pp_act *x, size_t n)
{
	float *d = (float *)pp_cuda_scratch(sizeof(float)), h = 0;
	PP_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(float), pp_cuda.stream));
	if (n) {
		absmax_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
			d, (const T *)x, n);
		PP_CUDA_LAUNCHED("absmax_kernel");
	}
	PP_CUDA_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
	return h;
}
PP_CUDA_BOTH(pp_cuda_absmax);
