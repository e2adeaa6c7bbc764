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

/* out (N,F) = act(gate) * up with gu (N,2F) = [gate | up] per row. One
 * thread per pack of PP_VEC(T) elements of out; VEC when F allows it. */
template <typename T, bool VEC>
__global__ void glu_fwd_kernel(T *out, const T *gu, int F, int N, int act)
{
	constexpr int P = PP_VEC(T);
	const int packs = (F + P - 1) / P;
	const size_t n = (size_t)N * packs;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t r = i / packs;
		const int f = (int)(i % packs) * P;
		const T *g = gu + r * 2 * F;
		float a[P], b[P];
		pp_load<T, VEC>(a, g, f, F);
		pp_load<T, VEC>(b, g + F, f, F);
#pragma unroll
		for (int j = 0; j < P; j++)
			a[j] = act_fwd(a[j], act) * b[j];
		pp_store<T, VEC>(out + r * F, a, f, F);
	}
}

/* dgu (N,2F) = [dout * up * act'(gate) | dout * act(gate)]; dout (N,F) */
template <typename T, bool VEC>
__global__ void glu_bwd_kernel(T *dgu, const T *dout, const T *gu, int F, int N, int act)
{
	constexpr int P = PP_VEC(T);
	const int packs = (F + P - 1) / P;
	const size_t n = (size_t)N * packs;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t r = i / packs;
		const int f = (int)(i % packs) * P;
		float gate[P], up[P], d[P], dg[P], du[P];
		pp_load<T, VEC>(gate, gu + r * 2 * F, f, F);
		pp_load<T, VEC>(up, gu + r * 2 * F + F, f, F);
		pp_load<T, VEC>(d, dout + r * F, f, F);
#pragma unroll
		for (int j = 0; j < P; j++) {
			dg[j] = d[j] * up[j] * act_grad(gate[j], act);
			du[j] = d[j] * act_fwd(gate[j], act);
		}
		pp_store<T, VEC>(dgu + r * 2 * F, dg, f, F);
		pp_store<T, VEC>(dgu + r * 2 * F + F, du, f, F);
	}
}

/* gelu(x), and dout * gelu'(x) */
struct gelu_fwd_op {
	__device__ float operator()(float x, float) const { return act_fwd(x, PP_ACT_GELU_TANH); }
};
struct gelu_bwd_op {
	__device__ float operator()(float x, float d) const
	{
		return d * act_grad(x, PP_ACT_GELU_TANH);
	}
};

template <typename T> void pp_cuda_glu_fwd(pp_act *out, const pp_act *gu, int N, int F, int act)
{
	const size_t n = (size_t)N * ((F + PP_VEC(T) - 1) / PP_VEC(T));
	if (!n)
		return;
#define LAUNCH(VEC)                                                                                \
	glu_fwd_kernel<T, VEC><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(        \
		(T *)out, (const T *)gu, F, N, act)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(F, out, gu), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("glu_fwd_kernel");
}
PP_CUDA_BOTH(pp_cuda_glu_fwd);

template <typename T>
void pp_cuda_glu_bwd(pp_act *dgu, const pp_act *dout, const pp_act *gu, int N, int F, int act)
{
	const size_t n = (size_t)N * ((F + PP_VEC(T) - 1) / PP_VEC(T));
	if (!n)
		return;
#define LAUNCH(VEC)                                                                                \
	glu_bwd_kernel<T, VEC><<<pp_cuda_blocks(n, THREADS), THREADS>>>((T *)dgu, (const T *)dout, \
									(const T *)gu, F, N, act)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(F, dgu, dout, gu), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("glu_bwd_kernel");
}
PP_CUDA_BOTH(pp_cuda_glu_bwd);

template <typename T> void pp_cuda_gelu_fwd(pp_act *out, const pp_act *x, size_t n)
{
	pp_cuda_map("gelu_fwd_kernel", (T *)out, (const T *)x, (const T *)NULL, n, gelu_fwd_op());
}
PP_CUDA_BOTH(pp_cuda_gelu_fwd);

template <typename T>
void pp_cuda_gelu_bwd(pp_act *dx, const pp_act *dout, const pp_act *x, size_t n)
{
	pp_cuda_map("gelu_bwd_kernel", (T *)dx, (const T *)x, (const T *)dout, n, gelu_bwd_op());
}
PP_CUDA_BOTH(pp_cuda_gelu_bwd);
