/* MLP activations: gated (SwiGLU, GeGLU) and plain GELU, elementwise. */
#include "cuda.h"

#define THREADS 256

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__device__ __forceinline__ float act_fwd(float x, int act)
{
	if (act == PP_ACT_GELU_TANH)
		return 0.5f * x * (1 + tanhf(GELU_K * (x + GELU_C * x * x * x)));
	return x / (1 + expf(-x)); /* SiLU */
}

/* d act(x) / dx */
__device__ __forceinline__ float act_grad(float x, int act)
{
	if (act == PP_ACT_GELU_TANH) {
		const float t = tanhf(GELU_K * (x + GELU_C * x * x * x));
		return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
	}
	const float s = 1 / (1 + expf(-x));
	return s * (1 + x * (1 - s));
}

/* out (N,F) = act(gate) * up with gu (N,2F) = [gate | up] per row */
__global__ void glu_fwd_kernel(float *out, const float *gu, int F, size_t n, int act)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t r = i / F, f = i % F;
		const float *g = gu + r * 2 * F;
		out[i] = act_fwd(g[f], act) * g[F + f];
	}
}

/* dgu (N,2F) = [dout * up * act'(gate) | dout * act(gate)]; dout (N,F) */
__global__ void glu_bwd_kernel(float *dgu, const float *dout, const float *gu, int F, size_t n,
			       int act)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t r = i / F, f = i % F;
		const float gate = gu[r * 2 * F + f], up = gu[r * 2 * F + F + f], d = dout[i];
		dgu[r * 2 * F + f] = d * up * act_grad(gate, act);
		dgu[r * 2 * F + F + f] = d * act_fwd(gate, act);
	}
}

/* out (n) = gelu(x) */
__global__ void gelu_fwd_kernel(float *out, const float *x, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] = act_fwd(x[i], PP_ACT_GELU_TANH);
}

/* dx (n) = dout * gelu'(x) */
__global__ void gelu_bwd_kernel(float *dx, const float *dout, const float *x, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dx[i] = dout[i] * act_grad(x[i], PP_ACT_GELU_TANH);
}

void pp_cuda_glu_fwd(pp_real *out, const pp_real *gu, int N, int F, int act)
{
	const size_t n = (size_t)N * F;
	if (!n)
		return;
	glu_fwd_kernel<<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(out, gu, F, n, act);
	PP_CUDA_LAUNCHED("glu_fwd_kernel");
}

void pp_cuda_glu_bwd(pp_real *dgu, const pp_real *dout, const pp_real *gu, int N, int F, int act)
{
	const size_t n = (size_t)N * F;
	if (!n)
		return;
	glu_bwd_kernel<<<pp_cuda_blocks(n, THREADS), THREADS>>>(dgu, dout, gu, F, n, act);
	PP_CUDA_LAUNCHED("glu_bwd_kernel");
}

void pp_cuda_gelu_fwd(pp_real *out, const pp_real *x, size_t n)
{
	if (!n)
		return;
	gelu_fwd_kernel<<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(out, x, n);
	PP_CUDA_LAUNCHED("gelu_fwd_kernel");
}

void pp_cuda_gelu_bwd(pp_real *dx, const pp_real *dout, const pp_real *x, size_t n)
{
	if (!n)
		return;
	gelu_bwd_kernel<<<pp_cuda_blocks(n, THREADS), THREADS>>>(dx, dout, x, n);
	PP_CUDA_LAUNCHED("gelu_bwd_kernel");
}
