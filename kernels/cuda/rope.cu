/* Rotary position embedding, Hugging Face rotate-half layout: element i of
 * a head pairs with element i + D/2. */
#include "cuda.h"

#define THREADS 256

/* Rotates the Hq q heads and Hkv k heads of qkv (B,T,(Hq+2Hkv)*D) in place by
 * the angles sign * (pos0 + t) * theta^(-2i/D). One thread per (b, t, pack
 * of PP_VEC(T) frequencies i): the angles are computed once, in double
 * (pos * inv_freq reaches 1e5 rad at long context, where a float angle is
 * off by 1e-2 rad), and serve every head. sign -1 applies the transposed
 * rotation: the backward pass. */
template <typename T, bool VEC>
__global__ void rope_kernel(T *qkv, int B, int T_, int Hq, int Hkv, int D, double theta,
			    const int *pos0, int sign)
{
	constexpr int N = PP_VEC(T);
	const int p0 = pp_pos(pos0);
	const int half = D / 2, packs = (half + N - 1) / N;
	const size_t ld = (size_t)(Hq + 2 * Hkv) * D;
	const size_t n = (size_t)B * T_ * packs;
	for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
	     idx += (size_t)gridDim.x * blockDim.x) {
		const int i0 = (int)(idx % packs) * N;
		const size_t bt = idx / packs; /* row b * T + t */
		const int t = (int)(bt % T_);
		float c[N], s[N];
#pragma unroll
		for (int j = 0; j < N; j++) {
			const double a = (double)(p0 + t) * pow(theta, -2.0 * (i0 + j) / D);
			c[j] = (float)cos(a);
			s[j] = (float)(sign * sin(a));
		}
		T *row = qkv + bt * ld;
		for (int h = 0; h < Hq + Hkv; h++) {
			T *x = row + (size_t)h * D;
			float x1[N], x2[N], y1[N], y2[N];
			pp_load<T, VEC>(x1, x, i0, half);
			pp_load<T, VEC>(x2, x + half, i0, half);
#pragma unroll
			for (int j = 0; j < N; j++) {
				y1[j] = x1[j] * c[j] - x2[j] * s[j];
				y2[j] = x2[j] * c[j] + x1[j] * s[j];
			}
			pp_store<T, VEC>(x, y1, i0, half);
			pp_store<T, VEC>(x + half, y2, i0, half);
		}
	}
}

template <typename T>
static void rope(T *qkv, int B, int T_, int Hq, int Hkv, int D, float theta, const int *pos0,
		 int sign)
{
	const size_t n = (size_t)B * T_ * ((D / 2 + PP_VEC(T) - 1) / PP_VEC(T));
	if (!n || D < 2)
		return;
	const unsigned blocks = pp_cuda_blocks(n, THREADS);
	/* every head's halves start on a pack when half does */
#define LAUNCH(VEC)                                                                      \
	rope_kernel<T, VEC><<<blocks, THREADS, 0, pp_cuda.stream>>>(qkv, B, T_, Hq, Hkv, D,  \
								    (double)theta, pos0, sign)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(D / 2, qkv), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("rope_kernel");
}

/* qkv (B,T,(Hq+2Hkv)*D) in place */
template <typename T>
void pp_cuda_rope_fwd(pp_act *qkv, int B, int T_, int Hq, int Hkv, int D, pp_real theta,
		      const int *pos0)
{
	rope<T>((T *)qkv, B, T_, Hq, Hkv, D, theta, pos0, 1);
}
PP_CUDA_BOTH(pp_cuda_rope_fwd);

/* dqkv (B,T,(Hq+2Hkv)*D) in place */
template <typename T>
void pp_cuda_rope_bwd(pp_act *dqkv, int B, int T_, int Hq, int Hkv, int D, pp_real theta,
		      const int *pos0)
{
	rope<T>((T *)dqkv, B, T_, Hq, Hkv, D, theta, pos0, -1);
}
PP_CUDA_BOTH(pp_cuda_rope_bwd);
