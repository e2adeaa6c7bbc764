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
	if (bytes)
		PP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void pp_cuda_zero(void *p, size_t bytes)
{
	if (bytes)
		PP_CUDA_CHECK(cudaMemset(p, 0, bytes));
}
