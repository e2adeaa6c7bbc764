/* Token (and learned position) embedding. */
#include "cuda.h"

/* channels per block of the wte scatter: one warp, so that each token's
 * row slice is one coalesced 128-byte access */
#define EMBED_COLS 32

/* out (B,T,C) = wte (V,C)[tok] * scale + wpe (maxT,C)[pos0 + t]; tok (B,T).
 * A token below 0 lies in another rank's vocabulary shard: its row is 0. */
__global__ void embed_fwd_kernel(float *out, const int *tok, const float *wte, const float *wpe,
				 float scale, int T, int C, int pos0, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t row = i / C;
		const int c = (int)(i % C), t = tok[row];
		float e = t >= 0 ? wte[(size_t)t * C + c] * scale : 0.0f;
		float p = wpe ? wpe[(size_t)(pos0 + (int)(row % T)) * C + c] : 0.0f;
		out[i] = e + p;
	}
}

/* dwte (V,C) += dout (B*T,C) * scale scattered by tok. A token may repeat,
 * so threads own channels, not rows: thread c walks the tokens in order and
 * is the only one to touch column c. grid (ceil(C/EMBED_COLS)) */
__global__ void embed_bwd_wte_kernel(float *dwte, const float *dout, const int *tok, float scale,
				     int BT, int C)
{
	const int c = blockIdx.x * EMBED_COLS + threadIdx.x;
	if (c >= C)
		return;
	for (int n = 0; n < BT; n++) {
		const int t = tok[n];
		if (t >= 0)
			dwte[(size_t)t * C + c] += dout[(size_t)n * C + c] * scale;
	}
}

/* dwpe (maxT,C) rows pos0.. += sum over b of dout (B,T,C), in b order */
__global__ void embed_bwd_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C, int pos0)
{
	const size_t n = (size_t)T * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / C), c = (int)(i % C);
		float *d = dwpe + (size_t)(pos0 + t) * C + c;
		float acc = *d;
		for (int b = 0; b < B; b++)
			acc += dout[((size_t)b * T + t) * C + c];
		*d = acc;
	}
}

void pp_cuda_embed_fwd(pp_real *out, const int *tok, const pp_real *wte, const pp_real *wpe,
		       pp_real scale, int B, int T, int C, int pos0)
{
	const size_t n = (size_t)B * T * C;
	if (!n)
		return;
	embed_fwd_kernel<<<pp_cuda_blocks(n, 256), 256, 0, pp_cuda.stream>>>(out, tok, wte, wpe, scale,
									     T, C, pos0, n);
	PP_CUDA_LAUNCHED("embed_fwd_kernel");
}

void pp_cuda_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_real *dout, const int *tok,
		       pp_real scale, int B, int T, int C, int pos0)
{
	if (B <= 0 || T <= 0 || C <= 0)
		return;
	if (dwte) {
		embed_bwd_wte_kernel<<<(C + EMBED_COLS - 1) / EMBED_COLS, EMBED_COLS>>>(
			dwte, dout, tok, scale, B * T, C);
		PP_CUDA_LAUNCHED("embed_bwd_wte_kernel");
	}
	if (!dwpe)
		return;
	const size_t n = (size_t)T * C;
	embed_bwd_wpe_kernel<<<pp_cuda_blocks(n, 256), 256>>>(dwpe, dout, B, T, C, pos0);
	PP_CUDA_LAUNCHED("embed_bwd_wpe_kernel");
}
