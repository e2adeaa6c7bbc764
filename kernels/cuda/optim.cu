/* Optimizer updates over flat parameter buffers. */
#include "cuda.h"

#define THREADS 256

/* AdamW on p, g, m, v (n), pc (n, if not NULL) = the new p in T;
 * c1, c2 = 1 / (1 - b^t). Pointers may sit at any element offset (a ZeRO-1
 * shard starts anywhere), so accesses are scalar; they are coalesced, and
 * the kernel streams 16 bytes in and 12 + sizeof(T) out per parameter. */
template <typename T>
__global__ void adamw_kernel(float *p, T *pc, const float *g, float *m, float *v, size_t n,
			     float lr, float b1, float b2, float eps, float wd, float c1, float c2,
			     float gscale)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float gi = g[i] * gscale;
		const float mi = b1 * m[i] + (1 - b1) * gi;
		const float vi = b2 * v[i] + (1 - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		const float mhat = mi * c1, vhat = vi * c2;
		const float pi = p[i] - lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
		p[i] = pi;
		if (pc)
			pc[i] = pp_to<T>(pi);
	}
}

/* p, g, m, v (n), pc (n) or NULL; step t >= 1 */
template <typename T>
void pp_cuda_adamw(pp_real *p, pp_act *pc, const pp_real *g, pp_real *m, pp_real *v, size_t n,
		   float lr, float b1, float b2, float eps, float wd, long t, float gscale)
{
	if (!n)
		return;
	/* in double: 1 - b2^t cancels, and in float its relative error is
	 * already 1e-5 at t = 1 for b2 = 0.999 */
	const float c1 = (float)(1 / (1 - pow((double)b1, (double)t)));
	const float c2 = (float)(1 / (1 - pow((double)b2, (double)t)));
	adamw_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS>>>(p, (T *)pc, g, m, v, n, lr, b1, b2,
								 eps, wd, c1, c2, gscale);
	PP_CUDA_LAUNCHED("adamw_kernel");
}
PP_CUDA_BOTH(pp_cuda_adamw);
