/* Softmax cross-entropy over the vocabulary: fused for a whole (N,V) row
 * block, or in two halves for a vocabulary split across ranks. One block per
 * row, read in packs of PP_VEC(T) logits; the row's log-sum-exp is one pass
 * (an online softmax: each thread keeps its running max and its sum of
 * exponentials, rescaled when the max grows), then block reductions in a
 * fixed tree (the sum in double, as the CPU backend sums). Losses and the
 * row statistics are fp32, logits and their gradient T. */
#include "cuda.h"

#define THREADS 512

/* log sum exp of the row l (V), to every thread of the block */
template <typename T, bool VEC>
__device__ float row_logsumexp(const T *l, int V, float *redf, double *redd)
{
	constexpr int P = PP_VEC(T);
	float mx = -INFINITY;
	double s = 0;
	for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
		float a[P];
		pp_load<T, VEC>(a, l, i, V);
		float pm = -INFINITY;
#pragma unroll
		for (int j = 0; j < P; j++)
			if (i + j < V)
				pm = fmaxf(pm, a[j]);
		if (pm > mx) {
			s *= (double)expf(mx - pm); /* 0 while mx is -inf */
			mx = pm;
		}
#pragma unroll
		for (int j = 0; j < P; j++)
			if (i + j < V)
				s += expf(a[j] - mx);
	}
	const float M = pp_block_max(mx, redf);
	s = pp_block_sum(mx == -INFINITY ? 0.0 : s * (double)expf(mx - M), redd);
	return M + (float)log(s);
}

/* losses (N), dlogits (N,V) (may alias logits), logits (N,V), targets (N).
 * grid (N). A target below 0 is ignored: loss 0 and a zero gradient row. */
template <typename T, bool VEC>
__global__ void crossentropy_kernel(float *losses, T *dlogits, const T *logits, const int *targets,
				    int V, float dscale)
{
	constexpr int P = PP_VEC(T);
	__shared__ float redf[32];
	__shared__ double redd[32];
	const size_t row = (size_t)blockIdx.x * V;
	const T *l = logits + row;
	T *d = dlogits ? dlogits + row : NULL;
	const int tgt = targets[blockIdx.x];
	if (tgt < 0) {
		if (threadIdx.x == 0)
			losses[blockIdx.x] = 0;
		if (d) {
			const float z[P] = {};
			for (int i = threadIdx.x * P; i < V; i += blockDim.x * P)
				pp_store<T, VEC>(d, z, i, V);
		}
		return;
	}
	const float lse = row_logsumexp<T, VEC>(l, V, redf, redd);
	const float lt = tgt < V ? pp_f(l[tgt]) : NAN;
	/* every read of the row is done before any thread writes into d,
	 * which may be the same row */
	__syncthreads();
	if (threadIdx.x == 0)
		losses[blockIdx.x] = lse - lt;
	if (d)
		for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
			float a[P];
			pp_load<T, VEC>(a, l, i, V);
#pragma unroll
			for (int j = 0; j < P; j++) {
				a[j] = expf(a[j] - lse) * dscale;
				if (i + j == tgt)
					a[j] -= dscale;
			}
			pp_store<T, VEC>(d, a, i, V);
		}
}

/* lse (N), tgt (N) from a vocabulary slice logits (N,V) and local targets
 * (N): tgt is the target's logit where it lies in the slice, else 0. grid (N) */
template <typename T, bool VEC>
__global__ void logsumexp_rows_kernel(float *lse, float *tgt, const T *logits, const int *targets,
				      int V)
{
	__shared__ float redf[32];
	__shared__ double redd[32];
	const T *l = logits + (size_t)blockIdx.x * V;
	const float s = row_logsumexp<T, VEC>(l, V, redf, redd);
	if (threadIdx.x == 0) {
		const int t = targets[blockIdx.x];
		lse[blockIdx.x] = s;
		tgt[blockIdx.x] = t >= 0 && t < V ? pp_f(l[t]) : 0;
	}
}

/* dlogits (N,V) = (exp(logits - lse) - onehot(target)) * dscale with the
 * global lse (N); PP_IGNORE_INDEX rows are 0; a target outside [0,V) (another
 * slice's) adds no one-hot. Elementwise, so dlogits may alias logits.
 * grid (N) */
template <typename T, bool VEC>
__global__ void softmax_grad_kernel(T *dlogits, const T *logits, const float *lse,
				    const int *targets, int V, float dscale)
{
	constexpr int P = PP_VEC(T);
	const size_t row = (size_t)blockIdx.x * V;
	const int t = targets[blockIdx.x];
	const float s = lse[blockIdx.x];
	for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
		float a[P];
		if (t != PP_IGNORE_INDEX)
			pp_load<T, VEC>(a, logits + row, i, V);
#pragma unroll
		for (int j = 0; j < P; j++) {
			float v = 0;
			if (t != PP_IGNORE_INDEX) {
				v = expf(a[j] - s) * dscale;
				if (i + j == t)
					v -= dscale;
			}
			a[j] = v;
		}
		pp_store<T, VEC>(dlogits + row, a, i, V);
	}
}

template <typename T>
void pp_cuda_crossentropy(pp_real *losses, pp_act *dlogits, const pp_act *logits,
			  const int *targets, int N, int V, pp_real dscale)
{
	if (N <= 0)
		return;
#define LAUNCH(VEC)                                                                                \
	crossentropy_kernel<T, VEC>                                                                \
		<<<N, THREADS>>>(losses, (T *)dlogits, (const T *)logits, targets, V, dscale)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(V, dlogits, logits), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("crossentropy_kernel");
}
PP_CUDA_BOTH(pp_cuda_crossentropy);

template <typename T>
void pp_cuda_logsumexp_rows(pp_real *lse, pp_real *tgt, const pp_act *logits, const int *targets,
			    int N, int V)
{
	if (N <= 0)
		return;
#define LAUNCH(VEC)                                                                                \
	logsumexp_rows_kernel<T, VEC><<<N, THREADS>>>(lse, tgt, (const T *)logits, targets, V)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(V, logits), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("logsumexp_rows_kernel");
}
PP_CUDA_BOTH(pp_cuda_logsumexp_rows);

template <typename T>
void pp_cuda_softmax_grad(pp_act *dlogits, const pp_act *logits, const pp_real *lse,
			  const int *targets, int N, int V, pp_real dscale)
{
	if (N <= 0)
		return;
#define LAUNCH(VEC)                                                                                \
	softmax_grad_kernel<T, VEC>                                                                \
		<<<N, THREADS>>>((T *)dlogits, (const T *)logits, lse, targets, V, dscale)
	PP_VEC_DISPATCH(pp_cuda_vec<T>(V, dlogits, logits), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED("softmax_grad_kernel");
}
PP_CUDA_BOTH(pp_cuda_softmax_grad);
