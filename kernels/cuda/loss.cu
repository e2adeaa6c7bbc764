/* Softmax cross-entropy over the vocabulary: fused for a whole (N,V) row
 * block, or in two halves for a vocabulary split across ranks. One block per
 * row; the row's max and sum of exponentials are block reductions (the sum
 * in double, as the CPU backend sums). */
#include "cuda.h"

#define THREADS 512

/* log sum exp of the row l (V), to every thread of the block */
__device__ float row_logsumexp(const float *l, int V, float *redf, double *redd)
{
	float mx = -INFINITY;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		mx = fmaxf(mx, l[i]);
	mx = pp_block_max(mx, redf);
	double s = 0;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		s += expf(l[i] - mx);
	s = pp_block_sum(s, redd);
	return mx + (float)log(s);
}

/* losses (N), dlogits (N,V) (may alias logits), logits (N,V), targets (N).
 * grid (N). A target below 0 is ignored: loss 0 and a zero gradient row. */
__global__ void crossentropy_kernel(float *losses, float *dlogits, const float *logits,
				    const int *targets, int V, float dscale)
{
	__shared__ float redf[32];
	__shared__ double redd[32];
	const size_t row = (size_t)blockIdx.x * V;
	const float *l = logits + row;
	float *d = dlogits ? dlogits + row : NULL;
	const int tgt = targets[blockIdx.x];
	if (tgt < 0) {
		if (threadIdx.x == 0)
			losses[blockIdx.x] = 0;
		if (d)
			for (int i = threadIdx.x; i < V; i += blockDim.x)
				d[i] = 0;
		return;
	}
	const float lse = row_logsumexp(l, V, redf, redd);
	const float lt = tgt < V ? l[tgt] : NAN;
	/* every read of the row is done before any thread writes into d,
	 * which may be the same row */
	__syncthreads();
	if (threadIdx.x == 0)
		losses[blockIdx.x] = lse - lt;
	if (d)
		for (int i = threadIdx.x; i < V; i += blockDim.x) {
			float v = expf(l[i] - lse) * dscale;
			if (i == tgt)
				v -= dscale;
			d[i] = v;
		}
}

/* lse (N), tgt (N) from a vocabulary slice logits (N,V) and local targets
 * (N): tgt is the target's logit where it lies in the slice, else 0. grid (N) */
__global__ void logsumexp_rows_kernel(float *lse, float *tgt, const float *logits,
				      const int *targets, int V)
{
	__shared__ float redf[32];
	__shared__ double redd[32];
	const float *l = logits + (size_t)blockIdx.x * V;
	const float s = row_logsumexp(l, V, redf, redd);
	if (threadIdx.x == 0) {
		const int t = targets[blockIdx.x];
		lse[blockIdx.x] = s;
		tgt[blockIdx.x] = t >= 0 && t < V ? l[t] : 0;
	}
}

/* dlogits (N,V) = (exp(logits - lse) - onehot(target)) * dscale with the
 * global lse (N); PP_IGNORE_INDEX rows are 0; a target outside [0,V) (another
 * slice's) adds no one-hot. Elementwise, so dlogits may alias logits.
 * grid (N) */
__global__ void softmax_grad_kernel(float *dlogits, const float *logits, const float *lse,
				    const int *targets, int V, float dscale)
{
	const size_t row = (size_t)blockIdx.x * V;
	const int t = targets[blockIdx.x];
	const float s = lse[blockIdx.x];
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		float v = 0;
		if (t != PP_IGNORE_INDEX) {
			v = expf(logits[row + i] - s) * dscale;
			if (i == t)
				v -= dscale;
		}
		dlogits[row + i] = v;
	}
}

void pp_cuda_crossentropy(pp_real *losses, pp_real *dlogits, const pp_real *logits,
			  const int *targets, int N, int V, pp_real dscale)
{
	if (N <= 0)
		return;
	crossentropy_kernel<<<N, THREADS>>>(losses, dlogits, logits, targets, V, dscale);
	PP_CUDA_LAUNCHED("crossentropy_kernel");
}

void pp_cuda_logsumexp_rows(pp_real *lse, pp_real *tgt, const pp_real *logits, const int *targets,
			    int N, int V)
{
	if (N <= 0)
		return;
	logsumexp_rows_kernel<<<N, THREADS>>>(lse, tgt, logits, targets, V);
	PP_CUDA_LAUNCHED("logsumexp_rows_kernel");
}

void pp_cuda_softmax_grad(pp_real *dlogits, const pp_real *logits, const pp_real *lse,
			  const int *targets, int N, int V, pp_real dscale)
{
	if (N <= 0)
		return;
	softmax_grad_kernel<<<N, THREADS>>>(dlogits, logits, lse, targets, V, dscale);
	PP_CUDA_LAUNCHED("softmax_grad_kernel");
}
