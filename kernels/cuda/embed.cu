/* Token (and learned position) embedding. */
#include "cuda.h"

/* channels per block of the wte scatter: one warp, so that each token's
 * row slice is one coalesced access */
#define EMBED_COLS 32

/* out (B,T,C) = wte (V,C)[tok] * scale + wpe (maxT,C)[pos0 + t]; tok (B,T).
 * A token below 0 lies in another rank's vocabulary shard: its row is 0.
 * One thread per pack of PP_VEC(T) channels; VEC when C allows it. */
template <typename T, bool VEC>
__global__ void embed_fwd_kernel(T *out, const int *tok, const T *wte, const T *wpe, float scale,
				 int T_, int C, int pos0, size_t rows)
{
	constexpr int N = PP_VEC(T);
	const int packs = (C + N - 1) / N;
	const size_t n = rows * packs;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t row = i / packs;
		const int c = (int)(i % packs) * N, t = tok[row];
		float e[N], p[N];
		if (t >= 0)
			pp_load<T, VEC>(e, wte + (size_t)t * C, c, C);
		if (wpe)
			pp_load<T, VEC>(p, wpe + (size_t)(pos0 + (int)(row % T_)) * C, c, C);
#pragma unroll
		for (int j = 0; j < N; j++)
			e[j] = (t >= 0 ? e[j] * scale : 0.0f) + (wpe ? p[j] : 0.0f);
		pp_store<T, VEC>(out + row * C, e, c, C);
	}
}

/* dwte (V,C) += dout (B*T,C) * scale scattered by tok, fp32. A token may
 * repeat, so threads own channels, not rows: thread c walks the tokens in
 * order and is the only one to touch column c. grid (ceil(C/EMBED_COLS)) */
template <typename T>
__global__ void embed_bwd_wte_kernel(float *dwte, const T *dout, const int *tok, float scale,
				     int BT, int C)
{
	const int c = blockIdx.x * EMBED_COLS + threadIdx.x;
	if (c >= C)
		return;
	for (int n = 0; n < BT; n++) {
		const int t = tok[n];
		if (t >= 0)
			dwte[(size_t)t * C + c] += pp_f(dout[(size_t)n * C + c]) * scale;
	}
}

/* dwpe (maxT,C) rows pos0.. += sum over b of dout (B,T,C), in b order, fp32 */
template <typename T>
__global__ void embed_bwd_wpe_kernel(float *dwpe, const T *dout, int B, int T_, int C, int pos0)
{
	const size_t n = (size_t)T_ * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / C), c = (int)(i % C);
		float *d = dwpe + (size_t)(pos0 + t) * C + c;
		float acc = *d;
		for (int b = 0; b < B; b++)
			acc += pp_f(dout[((size_t)b * T_ + t) * C + c]);
		*d = acc;
	}
}

template <typename T>
void pp_cuda_embed_fwd(pp_act *out, const int *tok, const pp_act *wte, const pp_act *wpe,
		       pp_real scale, int B, int T_, int C, int pos0)
{
	const size_t rows = (size_t)B * T_, packs = rows * ((C + PP_VEC(T) - 1) / PP_VEC(T));
	if (!rows || C <= 0)
		return;
	const unsigned blocks = pp_cuda_blocks(packs, 256);
#define LAUNCH(VEC)                                                                    \
	embed_fwd_kernel<T, VEC><<<blocks, 256, 0, pp_cuda.stream>>>(                  \
		(T *)out, tok, (const T *)wte, (const T *)wpe, scale, T_, C, pos0, rows)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(C, out, wte, wpe), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("embed_fwd_kernel");
}
PP_CUDA_BOTH(pp_cuda_embed_fwd);

template <typename T>
void pp_cuda_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_act *dout, const int *tok,
		       pp_real scale, int B, int T_, int C, int pos0)
{
	if (B <= 0 || T_ <= 0 || C <= 0)
		return;
	if (dwte) {
		embed_bwd_wte_kernel<T><<<(C + EMBED_COLS - 1) / EMBED_COLS, EMBED_COLS>>>(
			dwte, (const T *)dout, tok, scale, B * T_, C);
		PP_CUDA_LAUNCHED("embed_bwd_wte_kernel");
	}
	if (!dwpe)
		return;
	const size_t n = (size_t)T_ * C;
	embed_bwd_wpe_kernel<T><<<pp_cuda_blocks(n, 256), 256>>>(dwpe, (const T *)dout, B, T_, C,
								 pos0);
	PP_CUDA_LAUNCHED("embed_bwd_wpe_kernel");
}
PP_CUDA_BOTH(pp_cuda_embed_bwd);
