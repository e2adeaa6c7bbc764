/* Token (and learned position) embedding. */
#include "cuda.h"

/* threads per block of the wte scatter */
#define EMBED_THREADS 256

/* out (B,T,C) = wte (V,C)[tok] * scale + wpe (maxT,C)[pos0 + t]; tok (B,T).
 * A token below 0 lies in another rank's vocabulary shard: its row is 0.
 * One thread per pack of PP_VEC(T) channels; VEC when C allows it. */
template <typename T, bool VEC>
__global__ void embed_fwd_kernel(T *out, const int *tok, const T *wte, const T *wpe, float scale,
				 int T_, int C, const int *pos0, size_t rows)
{
	constexpr int N = PP_VEC(T);
	const int p0 = pp_pos(pos0);
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
			pp_load<T, VEC>(p, wpe + (size_t)(p0 + (int)(row % T_)) * C, c, C);
#pragma unroll
		for (int j = 0; j < N; j++)
			e[j] = (t >= 0 ? e[j] * scale : 0.0f) + (wpe ? p[j] : 0.0f);
		pp_store<T, VEC>(out + row * C, e, c, C);
	}
}

/* dwte (V,C) += dout (B*T,C) * scale scattered by tok, fp32. A token may
 * repeat, so a row's additions must come in one order: block b owns the
 * rows t with t % gridDim.x == b. It walks the tokens in chunks of
 * blockDim.x, keeps the ones it owns in token order (a ballot per warp,
 * compacted in shared memory), and its threads, each owning the channels
 * c = threadIdx.x + k * blockDim.x, add the kept tokens' rows in token
 * order. Every element of dwte thus gets its additions in token order,
 * whatever the grid: the bits do not depend on it. */
template <typename T>
__global__ void embed_bwd_wte_kernel(float *dwte, const T *dout, const int *tok, float scale,
				     int BT, int C)
{
	__shared__ int hit_n[EMBED_THREADS], hit_t[EMBED_THREADS], warp_hits[EMBED_THREADS / 32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	for (int base = 0; base < BT; base += blockDim.x) {
		const int n = base + (int)threadIdx.x;
		const int t = n < BT ? tok[n] : -1;
		const bool mine = t >= 0 && t % (int)gridDim.x == (int)blockIdx.x;
		const unsigned ballot = __ballot_sync(0xffffffffu, mine);
		if (lane == 0)
			warp_hits[warp] = __popc(ballot);
		__syncthreads();
		int before = 0, hits = 0;
		for (int w = 0; w < warps; w++) {
			before += w < warp ? warp_hits[w] : 0;
			hits += warp_hits[w];
		}
		if (mine) {
			const int k = before + __popc(ballot & ((1u << lane) - 1u));
			hit_n[k] = n;
			hit_t[k] = t;
		}
		__syncthreads();
		for (int k = 0; k < hits; k++) {
			float *d = dwte + (size_t)hit_t[k] * C;
			const T *g = dout + (size_t)hit_n[k] * C;
			for (int c = threadIdx.x; c < C; c += blockDim.x)
				d[c] += pp_f(g[c]) * scale;
		}
		__syncthreads(); /* the lists are rewritten by the next chunk */
	}
}

/* dwpe (maxT,C) rows pos0.. += sum over b of dout (B,T,C), in b order, fp32 */
template <typename T>
__global__ void embed_bwd_wpe_kernel(float *dwpe, const T *dout, int B, int T_, int C,
				     const int *pos0)
{
	const int p0 = pp_pos(pos0);
	const size_t n = (size_t)T_ * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / C), c = (int)(i % C);
		float *d = dwpe + (size_t)(p0 + t) * C + c;
		float acc = *d;
		for (int b = 0; b < B; b++)
			acc += pp_f(dout[((size_t)b * T_ + t) * C + c]);
		*d = acc;
	}
}

template <typename T>
void pp_cuda_embed_fwd(pp_act *out, const int *tok, const pp_act *wte, const pp_act *wpe,
		       pp_real scale, int B, int T_, int C, const int *pos0)
{
	const size_t rows = (size_t)B * T_, packs = rows * ((C + PP_VEC(T) - 1) / PP_VEC(T));
	if (!rows || C <= 0)
		return;
	const unsigned blocks = pp_cuda_blocks(packs, 256);
#define LAUNCH(VEC)                                                                                \
	embed_fwd_kernel<T, VEC><<<blocks, 256, 0, pp_cuda.stream>>>(                              \
		(T *)out, tok, (const T *)wte, (const T *)wpe, scale, T_, C, pos0, rows)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(C, out, wte, wpe), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("embed_fwd_kernel");
}
PP_CUDA_BOTH(pp_cuda_embed_fwd);

template <typename T>
void pp_cuda_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_act *dout, const int *tok,
		       pp_real scale, int B, int T_, int C, const int *pos0)
{
	if (B <= 0 || T_ <= 0 || C <= 0)
		return;
	if (dwte) {
		/* two blocks per multiprocessor: every block reads all the tokens */
		const int blocks = 2 * (pp_cuda.num_sms > 0 ? pp_cuda.num_sms : 1);
		embed_bwd_wte_kernel<T>
			<<<blocks, EMBED_THREADS>>>(dwte, (const T *)dout, tok, scale, B * T_, C);
		PP_CUDA_LAUNCHED("embed_bwd_wte_kernel");
	}
	if (!dwpe)
		return;
	const size_t n = (size_t)T_ * C;
	embed_bwd_wpe_kernel<T>
		<<<pp_cuda_blocks(n, 256), 256>>>(dwpe, (const T *)dout, B, T_, C, pos0);
	PP_CUDA_LAUNCHED("embed_bwd_wpe_kernel");
}
PP_CUDA_BOTH(pp_cuda_embed_bwd);
