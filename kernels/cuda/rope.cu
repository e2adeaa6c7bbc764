/* Rotary position embedding, Hugging Face rotate-half layout: element i of
 * a head pairs with element i + D/2. */
#include <limits.h>

#include "cuda.h"

#define THREADS 256

/* Rotates the Hq q heads and Hkv k heads of qkv (B,T,(Hq+2Hkv)*D) in place by
 * the angles sign * (pos0 + t) * theta^(-2i/D). One block per row (b, t):
 * its threads first compute the row's D/2 angles' cosines and sines into
 * shared memory, in double (pos * inv_freq reaches 1e5 rad at long context,
 * where a float angle is off by 1e-2 rad), then rotate (head, pack of
 * PP_VEC(T) frequencies) pairs in parallel. A decoding step is one row, so
 * every head must run at once: a thread per pack looping over the heads
 * left one step's rotation 30 us of serial loads. sign -1 applies the
 * transposed rotation: the backward pass. */
template <typename T, bool VEC>
__global__ void rope_kernel(T *qkv, int T_, int Hq, int Hkv, int D, double theta, const int *pos0,
			    int sign)
{
	constexpr int N = PP_VEC(T);
	extern __shared__ float cs[]; /* cos (D/2), then sign * sin (D/2) */
	const int half = D / 2, packs = (half + N - 1) / N;
	const size_t bt = blockIdx.x; /* row b * T + t */
	const int pos = pp_pos(pos0) + (int)(bt % T_);
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		const double a = (double)pos * pow(theta, -2.0 * i / D);
		cs[i] = (float)cos(a);
		cs[half + i] = (float)(sign * sin(a));
	}
	__syncthreads();
	T *row = qkv + bt * (size_t)(Hq + 2 * Hkv) * D;
	for (int idx = threadIdx.x; idx < (Hq + Hkv) * packs; idx += blockDim.x) {
		const int i0 = idx % packs * N;
		T *x = row + (size_t)(idx / packs) * D;
		float x1[N], x2[N], y1[N], y2[N];
		pp_load<T, VEC>(x1, x, i0, half);
		pp_load<T, VEC>(x2, x + half, i0, half);
#pragma unroll
		for (int j = 0; j < N; j++) {
			const int i = i0 + j < half ? i0 + j : 0;
			y1[j] = x1[j] * cs[i] - x2[j] * cs[half + i];
			y2[j] = x2[j] * cs[i] + x1[j] * cs[half + i];
		}
		pp_store<T, VEC>(x, y1, i0, half);
		pp_store<T, VEC>(x + half, y2, i0, half);
	}
}

template <typename T>
static void rope(T *qkv, int B, int T_, int Hq, int Hkv, int D, float theta, const int *pos0,
		 int sign)
{
	const size_t rows = (size_t)B * T_;
	if (!rows || D < 2 || Hq + Hkv <= 0)
		return;
	PP_CUDA_REQUIRE(rows <= INT_MAX, "rope: B*T = %zu rows, at most %d", rows, INT_MAX);
	const int work = (Hq + Hkv) * ((D / 2 + PP_VEC(T) - 1) / PP_VEC(T));
	const int threads = work >= THREADS ? THREADS : (work + 31) / 32 * 32;
	const size_t smem = sizeof(float) * (size_t)D;
	/* every head's halves start on a pack when half does */
#define LAUNCH(VEC)                                                                                \
	rope_kernel<T, VEC><<<(unsigned)rows, threads, smem, pp_cuda.stream>>>(                    \
		qkv, T_, Hq, Hkv, D, (double)theta, pos0, sign)
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
