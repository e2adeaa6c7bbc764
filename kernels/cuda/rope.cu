/* Rotary position embedding, Hugging Face rotate-half layout: element i of
 * a head pairs with element i + D/2. */
#include "cuda.h"

#define THREADS 256

/* Rotates the Hq q heads and Hkv k heads of qkv (B,T,(Hq+2Hkv)*D) in place by
 * the angles sign * (pos0 + t) * theta^(-2i/D). One thread per (b, t, i):
 * the angle is computed once, in double (pos * inv_freq reaches 1e5 rad at
 * long context, where a float angle is off by 1e-2 rad), and serves every
 * head. sign -1 applies the transposed rotation: the backward pass. */
__global__ void rope_kernel(float *qkv, int B, int T, int Hq, int Hkv, int D, double theta,
			    int pos0, int sign)
{
	const int half = D / 2;
	const size_t ld = (size_t)(Hq + 2 * Hkv) * D;
	const size_t n = (size_t)B * T * half;
	for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
	     idx += (size_t)gridDim.x * blockDim.x) {
		const int i = (int)(idx % half);
		const size_t bt = idx / half; /* row b * T + t */
		const int t = (int)(bt % T);
		const double a = (double)(pos0 + t) * pow(theta, -2.0 * i / D);
		const float c = (float)cos(a), s = (float)(sign * sin(a));
		float *row = qkv + bt * ld;
		for (int h = 0; h < Hq + Hkv; h++) {
			float *x = row + (size_t)h * D;
			const float x1 = x[i], x2 = x[half + i];
			x[i] = x1 * c - x2 * s;
			x[half + i] = x2 * c + x1 * s;
		}
	}
}

static void rope(float *qkv, int B, int T, int Hq, int Hkv, int D, float theta, int pos0, int sign)
{
	const size_t n = (size_t)B * T * (D / 2);
	if (!n)
		return;
	rope_kernel<<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
		qkv, B, T, Hq, Hkv, D, (double)theta, pos0, sign);
	PP_CUDA_LAUNCHED("rope_kernel");
}

/* qkv (B,T,(Hq+2Hkv)*D) in place */
void pp_cuda_rope_fwd(pp_real *qkv, int B, int T, int Hq, int Hkv, int D, pp_real theta, int pos0)
{
	rope(qkv, B, T, Hq, Hkv, D, theta, pos0, 1);
}

/* dqkv (B,T,(Hq+2Hkv)*D) in place */
void pp_cuda_rope_bwd(pp_real *dqkv, int B, int T, int Hq, int Hkv, int D, pp_real theta, int pos0)
{
	rope(dqkv, B, T, Hq, Hkv, D, theta, pos0, -1);
}
