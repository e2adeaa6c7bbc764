/* Decoding with a KV cache, and the CUDA graph that replays a decoding step.
 *
 * attention_cached is flash-decoding: with one new token per sequence there
 * are only B x Hq query rows, too few blocks to fill the GPU, so the keys of
 * each row are split into chunks of KEYS_PER_SPLIT that separate blocks
 * attend to (partial output, max score, sum of exponentials), and a second
 * kernel combines the chunks with the log-sum-exp. The chunks sit at fixed
 * key positions and their number depends on Tmax only, so the result does
 * not depend on how the keys spread over the GPU, and every run gives the
 * same bits; a chunk past a row's keys contributes an exact 0. */
#include "cuda.h"

#define THREADS 128
/* Small chunks give a batch-1 step enough blocks (Hq x Tmax/64) to keep
 * many key loads in flight: with 256, llama-1b's step at 264 positions ran
 * 64 blocks and its attention took 16 us a layer. */
#define KEYS_PER_SPLIT 64

/* kcache, vcache (B,Tmax,Hkv*D) rows pos0.. = k, v heads of qkv (B,n,(Hq+2Hkv)*D);
 * one thread per pack of PP_VEC(T) elements of a cache row */
template <typename T, bool VEC>
__global__ void kv_append_kernel(T *kc, T *vc, const T *qkv, int n, int Hq, int Hkv, int D,
				 int Tmax, const int *pos0, size_t rows)
{
	constexpr int P = PP_VEC(T);
	const int p0 = pp_pos(pos0);
	const size_t KV = (size_t)Hkv * D, ld = (size_t)(Hq + 2 * Hkv) * D;
	const size_t packs = (KV + P - 1) / P, total = rows * packs;
	for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
	     idx += (size_t)gridDim.x * blockDim.x) {
		const size_t row = idx / packs, j = idx % packs * P, b = row / (size_t)n,
			     i = row % (size_t)n;
		const size_t at = (b * (size_t)Tmax + (size_t)p0 + i) * KV;
		const T *k = qkv + row * ld + (size_t)Hq * D;
		float f[P];
		pp_load<T, VEC>(f, k, j, KV);
		pp_store<T, VEC>(kc + at, f, j, KV);
		pp_load<T, VEC>(f, k + KV, j, KV);
		pp_store<T, VEC>(vc + at, f, j, KV);
	}
}

template <typename T>
void pp_cuda_kv_append(pp_act *kcache, pp_act *vcache, const pp_act *qkv, int B, int n, int Hq,
		       int Hkv, int D, int Tmax, const int *pos0)
{
	const size_t rows = (size_t)B * n, KV = (size_t)Hkv * D;
	const size_t total = rows * ((KV + PP_VEC(T) - 1) / PP_VEC(T));
	if (!total)
		return;
#define LAUNCH(VEC)                                                                                \
	kv_append_kernel<T, VEC><<<pp_cuda_blocks(total, 256), 256, 0, pp_cuda.stream>>>(          \
		(T *)kcache, (T *)vcache, (const T *)qkv, n, Hq, Hkv, D, Tmax, pos0, rows)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(D, kcache, vcache, qkv), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("kv_append_kernel");
}
PP_CUDA_BOTH(pp_cuda_kv_append);

/* Block (split c, head h, row r = b*n + i): query row r at position pos0+i
 * against its keys in [c*KEYS_PER_SPLIT, (c+1)*KEYS_PER_SPLIT).
 * part (B*n,Hq,S,D) = sum_j exp(s_j - m) v_j, ml (B*n,Hq,S,2) = (m, sum_j
 * exp(s_j - m)); m = -inf, sum 0 and part 0 for a chunk without keys.
 * A score s_j gains bw[h * nb + bucket[pos - j]] where there is a bias
 * (bw non-NULL, ops.h's pp_attn_bias). Rows are read in packs of P = PP_VEC(T): a key's score is the work of a
 * group of G lanes (the head's packs, G a power of two, so a warp scores
 * 32/G keys at once); for p @ V, the THREADS threads form R = THREADS/packs
 * key groups that each sum every R-th key of the chunk for their pack, and
 * the R partial sums are added in group order. Shared memory: q (D), the
 * chunk's scores (KEYS_PER_SPLIT), 32 for reductions, the partial sums
 * (R,D). */
template <typename T, bool VEC>
__global__ void __launch_bounds__(THREADS)
	attn_split_kernel(float *part, float *ml, const T *qkv, const T *kc, const T *vc, int n,
			  int Hq, int Hkv, int D, int Tmax, const int *pos0, int window,
			  float scale, const T *bw, const int *bucket, int nb)
{
	constexpr int P = PP_VEC(T);
	extern __shared__ float sm[];
	const int packs = (D + P - 1) / P, R = THREADS / packs;
	float *q = sm, *p = q + D, *red = p + KEYS_PER_SPLIT, *acc_s = red + 32;
	const int c = blockIdx.x, h = blockIdx.y, row = blockIdx.z, S = gridDim.x;
	const int b = row / n, pos = pp_pos(pos0) + row % n;
	const int lo = window > 0 && pos >= window ? pos - window + 1 : 0;
	const int k0 = max(lo, c * KEYS_PER_SPLIT), k1 = min(pos + 1, (c + 1) * KEYS_PER_SPLIT);
	const size_t slot = ((size_t)row * Hq + h) * S + c, KV = (size_t)Hkv * D;
	float *o = part + slot * D;
	if (k0 >= k1) {
		for (int d = threadIdx.x; d < D; d += blockDim.x)
			o[d] = 0;
		if (threadIdx.x == 0) {
			ml[2 * slot] = -INFINITY;
			ml[2 * slot + 1] = 0;
		}
		return;
	}
	const T *qr = qkv + (size_t)row * (Hq + 2 * Hkv) * D + (size_t)h * D;
	for (int pk = threadIdx.x; pk < packs; pk += blockDim.x) {
		float f[P];
		pp_load<T, VEC>(f, qr, pk * P, D);
#pragma unroll
		for (int j = 0; j < P; j++)
			if (pk * P + j < D)
				q[pk * P + j] = f[j] * scale;
	}
	__syncthreads();
	const size_t head = (size_t)(h / (Hq / Hkv)) * D;
	const T *K = kc + (size_t)b * Tmax * KV + head, *V = vc + (size_t)b * Tmax * KV + head;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int G = 1;
	while (G < packs && G < 32)
		G <<= 1;
	const int per_warp = 32 / G, sub = lane / G, gl = lane % G;
	/* the scores: loop bounds uniform over the warp, for the shuffles */
	for (int j0 = k0 + warp * per_warp; j0 < k1; j0 += nw * per_warp) {
		const int j = j0 + sub;
		float s = 0;
		if (j < k1)
			for (int pk = gl; pk < packs; pk += G) {
				float f[P];
				pp_load<T, VEC>(f, K + (size_t)j * KV, pk * P, D);
#pragma unroll
				for (int e = 0; e < P; e++)
					s += q[pk * P + e < D ? pk * P + e : 0] * f[e];
			}
		for (int off = G / 2; off > 0; off >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, off);
		if (gl == 0 && j < k1)
			p[j - k0] = bw ? s + pp_f(bw[(size_t)h * nb + bucket[pos - j]]) : s;
	}
	__syncthreads();
	float mx = -INFINITY;
	for (int j = threadIdx.x; j < k1 - k0; j += blockDim.x)
		mx = fmaxf(mx, p[j]);
	mx = pp_block_max(mx, red);
	float l = 0;
	for (int j = threadIdx.x; j < k1 - k0; j += blockDim.x) {
		float e = expf(p[j] - mx);
		p[j] = e;
		l += e;
	}
	l = pp_block_sum(l, red); /* its barriers also publish p */
	const int pk = threadIdx.x % packs, g = threadIdx.x / packs;
	if (g < R) {
		float acc[P] = {};
		for (int j = g; j < k1 - k0; j += R) {
			float f[P];
			pp_load<T, VEC>(f, V + (size_t)(k0 + j) * KV, pk * P, D);
#pragma unroll
			for (int e = 0; e < P; e++)
				acc[e] += p[j] * f[e];
		}
#pragma unroll
		for (int e = 0; e < P; e++)
			if (pk * P + e < D)
				acc_s[g * D + pk * P + e] = acc[e];
	}
	__syncthreads();
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float t = 0;
		for (int r = 0; r < R; r++)
			t += acc_s[r * D + d];
		o[d] = t;
	}
	if (threadIdx.x == 0) {
		ml[2 * slot] = mx;
		ml[2 * slot + 1] = l;
	}
}

/* Block (h, row): out (B*n, Hq*D) of T = the S chunks combined in order */
template <typename T>
__global__ void attn_combine_kernel(T *out, const float *part, const float *ml, int Hq, int D,
				    int S)
{
	const int h = blockIdx.x, row = blockIdx.y;
	const size_t slot0 = ((size_t)row * Hq + h) * S;
	float M = -INFINITY;
	for (int c = 0; c < S; c++)
		M = fmaxf(M, ml[2 * (slot0 + c)]);
	float L = 0;
	for (int c = 0; c < S; c++)
		L += ml[2 * (slot0 + c) + 1] * expf(ml[2 * (slot0 + c)] - M);
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float acc = 0;
		for (int c = 0; c < S; c++)
			acc += part[(slot0 + c) * D + d] * expf(ml[2 * (slot0 + c)] - M);
		out[((size_t)row * Hq + h) * D + d] = pp_to<T>(acc / L);
	}
}

template <typename T>
void pp_cuda_attention_cached(pp_act *out, const pp_act *qkv, const pp_act *kcache,
			      const pp_act *vcache, int B, int n, int Hq, int Hkv, int D, int Tmax,
			      const int *pos0, int window, const pp_attn_bias *bias)
{
	const int S = (Tmax + KEYS_PER_SPLIT - 1) / KEYS_PER_SPLIT, rows = B * n;
	if (!rows || !Hq)
		return;
	PP_CUDA_REQUIRE(rows <= 65535, "attention_cached: B*n = %d rows, at most 65535", rows);
	const int packs = (D + PP_VEC(T) - 1) / PP_VEC(T);
	PP_CUDA_REQUIRE(packs <= THREADS, "attention_cached: head dim %d, at most %d", D,
			THREADS * PP_VEC(T));
	const size_t slots = (size_t)rows * Hq * S;
	float *part = (float *)pp_cuda_scratch(sizeof(float) * slots * (D + 2));
	float *ml = part + slots * D;
	const size_t smem = sizeof(float) *
			    (D + KEYS_PER_SPLIT + 32 + (size_t)(THREADS / packs) * D);
	const float scale = (float)(1 / sqrt((double)D));
	const bool has_bias = bias && bias->w;
	const T *bw = has_bias ? (const T *)bias->w : NULL;
	const int *bucket = has_bias ? bias->bucket : NULL, nb = has_bias ? bias->nb : 0;
#define LAUNCH(VEC)                                                                                \
	do {                                                                                       \
		pp_cuda_smem((const void *)attn_split_kernel<T, VEC>, smem, "attn_split_kernel");  \
		attn_split_kernel<T, VEC><<<dim3(S, Hq, rows), THREADS, smem, pp_cuda.stream>>>(   \
			part, ml, (const T *)qkv, (const T *)kcache, (const T *)vcache, n, Hq,     \
			Hkv, D, Tmax, pos0, window, scale, bw, bucket, nb);                        \
	} while (0)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(D, qkv, kcache, vcache), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("attn_split_kernel");
	attn_combine_kernel<T>
		<<<dim3(Hq, rows), THREADS, 0, pp_cuda.stream>>>((T *)out, part, ml, Hq, D, S);
	PP_CUDA_LAUNCHED("attn_combine_kernel");
}
PP_CUDA_BOTH(pp_cuda_attention_cached);

/* ---- graphs ----------------------------------------------------------------- */

static cudaStream_t capture_stream;

void pp_cuda_graph_begin(void)
{
	PP_CUDA_REQUIRE(!pp_cuda.capturing, "graph_begin while a graph records");
	if (!capture_stream)
		PP_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamDefault));
	PP_CUDA_CHECK(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeGlobal));
	pp_cuda.stream = capture_stream;
	pp_cuda.capturing = 1;
}

/* The recording as an executable graph. It keeps the pointers it was
 * recorded with, the scratch included: pp_cuda_scratch refuses to move
 * while a graph lives (pp_cuda.graphs). */
void *pp_cuda_graph_end(void)
{
	PP_CUDA_REQUIRE(pp_cuda.capturing, "graph_end without graph_begin");
	cudaGraph_t g;
	PP_CUDA_CHECK(cudaStreamEndCapture(capture_stream, &g)); /* fatal: still capturing */
	pp_cuda.stream = 0;
	pp_cuda.capturing = 0;
	cudaGraphExec_t exec;
	PP_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
	PP_CUDA_CHECK(cudaGraphDestroy(g));
	pp_cuda.graphs++;
	return (void *)exec;
}

void pp_cuda_graph_launch(void *graph)
{
	PP_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, capture_stream));
	if (pp_cuda.sync)
		PP_CUDA_CHECK(cudaStreamSynchronize(capture_stream));
	/* on the legacy stream, which waits for the graph (a blocking stream) */
	pp_cuda_profile_mark("CUDA graph replay");
}

void pp_cuda_graph_free(void *graph)
{
	if (!graph)
		return;
	PP_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
	pp_cuda.graphs--;
}
