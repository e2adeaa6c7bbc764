/* Device memory: cudaMalloc'd, zero-filled; copies in any direction. */
#include "cuda.h"

void *pp_cuda_alloc(size_t bytes)
{
	/* the first op of any user: catch a caller that skipped the set-up */
	PP_CUDA_REQUIRE(pp_cuda.device >= 0, "the CUDA backend is used before pp_cuda_init");
	void *p = NULL;
	/* cudaMalloc(0) may give NULL, which callers read as failure */
	size_t n = bytes ? bytes : 1;
	cudaError_t err = cudaMalloc(&p, n);
	if (err == cudaErrorMemoryAllocation) {
		/* out of memory is the caller's to report (NULL), and not sticky */
		(void)cudaGetLastError();
		return NULL;
	}
	PP_CUDA_CHECK(err);
	PP_CUDA_CHECK(cudaMemset(p, 0, n));
	return p;
}

void pp_cuda_free(void *p)
{
	if (p)
		PP_CUDA_CHECK(cudaFree(p));
}

/* to_device and to_host: host to device, device to host, and device to
 * device (the model copies activations with to_device); the pointers tell
 * the runtime which (unified addressing). Synchronous for host memory. */
void pp_cuda_copy(void *dst, const void *src, size_t bytes)
{
	if (!bytes)
		return;
	PP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
	pp_cuda_profile_mark("cudaMemcpy");
}

void pp_cuda_zero(void *p, size_t bytes)
{
	if (!bytes)
		return;
	PP_CUDA_CHECK(cudaMemset(p, 0, bytes));
	pp_cuda_profile_mark("cudaMemset");
}

void pp_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
		    size_t rows)
{
	if (!width || !rows)
		return;
	PP_CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault));
	pp_cuda_profile_mark("cudaMemcpy2D");
}

/* ---- the compute type ------------------------------------------------------- */

/* dst (n) = src (n) converted; each thread step takes K elements, whole
 * 16-byte packs of both types */
template <typename D, typename S, bool VEC>
__global__ void convert_kernel(D *dst, const S *src, size_t n)
{
	constexpr int N = PP_VEC(D), M = PP_VEC(S), K = N > M ? N : M;
	for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * K; i < n;
	     i += (size_t)gridDim.x * blockDim.x * K) {
		float f[K];
#pragma unroll
		for (int j = 0; j < K; j += M)
			pp_load<S, VEC>(f + j, src, i + j, n);
#pragma unroll
		for (int j = 0; j < K; j += N)
			pp_store<D, VEC>(dst, f + j, i + j, n);
	}
}

template <typename D, typename S> void pp_cuda_convert(D *dst, const S *src, size_t n)
{
	if (!n)
		return;
	if (pp_is_bf16<D>::value == pp_is_bf16<S>::value) {
		PP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(D), cudaMemcpyDeviceToDevice,
					      pp_cuda.stream));
		return;
	}
	const int K = PP_VEC(D) > PP_VEC(S) ? PP_VEC(D) : PP_VEC(S);
	const unsigned blocks = pp_cuda_blocks((n + K - 1) / K, 256);
#define LAUNCH(VEC) convert_kernel<D, S, VEC><<<blocks, 256, 0, pp_cuda.stream>>>(dst, src, n)
	PP_VEC_DISPATCH(pp_cuda_aligned(dst, src), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("convert_kernel");
}

template void pp_cuda_convert<float, float>(float *, const float *, size_t);
template void pp_cuda_convert<pp_bf16, float>(pp_bf16 *, const float *, size_t);
template void pp_cuda_convert<float, pp_bf16>(float *, const pp_bf16 *, size_t);
template void pp_cuda_convert<pp_bf16, pp_bf16>(pp_bf16 *, const pp_bf16 *, size_t);

/* the compute copy of the weights: dst (n) of T from src (n) fp32 */
template <typename T> void pp_cuda_to_act(pp_act *dst, const pp_real *src, size_t n)
{
	pp_cuda_convert((T *)dst, src, n);
}
PP_CUDA_BOTH(pp_cuda_to_act);

/* host_dst (n) fp32 from src (n) of T on the device. bf16 is the upper half
 * of an fp32, so the bf16 bits land in the upper half of host_dst and widen
 * in place, front to back: element i is written at bytes [4i, 4i+4), below
 * the bf16 of every element after i (at 2n + 2j, j > i), so nothing is
 * overwritten before it is read; no staging buffer anywhere. */
template <typename T> void pp_cuda_act_to_host(pp_real *host_dst, const pp_act *src, size_t n)
{
	if (!pp_is_bf16<T>::value) {
		pp_cuda_copy(host_dst, src, n * sizeof(float));
		return;
	}
	if (!n)
		return;
	uint16_t *half = (uint16_t *)(host_dst + n) - n;
	PP_CUDA_CHECK(cudaMemcpy(half, src, n * sizeof(uint16_t), cudaMemcpyDefault));
	for (size_t i = 0; i < n; i++) {
		const uint32_t bits = (uint32_t)half[i] << 16;
		memcpy(host_dst + i, &bits, sizeof bits);
	}
}
PP_CUDA_BOTH(pp_cuda_act_to_host);
