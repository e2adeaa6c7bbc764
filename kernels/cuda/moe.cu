/* Mixture of experts on the GPU: routing, the permutation of token rows
 * into expert order and back, and the router's backward (ops.h; the CPU
 * versions in kernels/cpu/moe.c are the reference). The experts' products
 * are pp_cuda_matmul_fwd / _bwd over each expert's rows.
 *
 * Determinism: every sum has a fixed order. Routing is one thread per
 * token; the dispatch is a counting sort in one block (a thread per
 * expert walks the assignments in order), so the same routing gives the
 * same rows on every run; the combine sums a token's K choices in order. */
#include "cuda.h"

#define THREADS 256

/* One thread per token: the row's softmax, its K largest logits (ties: the
 * lower expert) and their gates. E is at most a few hundred: loops over it. */
template <typename T>
__global__ void route_kernel(int *expert, float *gate, float *prob, float *lse, const T *logits,
			     int N, int E, int K, int mode)
{
	const int n = blockIdx.x * blockDim.x + threadIdx.x;
	if (n >= N)
		return;
	const T *l = logits + (size_t)n * E;
	float *p = prob + (size_t)n * E;
	int *ex = expert + (size_t)n * K;
	float *g = gate + (size_t)n * K;
	float mx = pp_f(l[0]);
	for (int e = 1; e < E; e++)
		mx = fmaxf(mx, pp_f(l[e]));
	double sum = 0;
	for (int e = 0; e < E; e++)
		sum += exp((double)pp_f(l[e]) - mx);
	lse[n] = (float)(mx + log(sum));
	for (int e = 0; e < E; e++)
		p[e] = (float)(exp((double)pp_f(l[e]) - mx) / sum);
	for (int k = 0; k < K; k++) {
		int best = -1;
		for (int e = 0; e < E; e++) {
			bool taken = false;
			for (int j = 0; j < k; j++)
				taken |= ex[j] == e;
			if (!taken && (best < 0 || pp_f(l[e]) > pp_f(l[best])))
				best = e;
		}
		ex[k] = best;
	}
	if (mode == PP_ROUTE_SOFTMAX_TOPK) {
		for (int k = 0; k < K; k++)
			g[k] = p[ex[k]];
	} else {
		const float top = pp_f(l[ex[0]]);
		double s = 0;
		for (int k = 0; k < K; k++)
			s += exp((double)pp_f(l[ex[k]]) - top);
		for (int k = 0; k < K; k++)
			g[k] = (float)(exp((double)pp_f(l[ex[k]]) - top) / s);
	}
}

/* stats (E+1): column sums of prob (N,E), then the sum of lse^2: one
 * thread per column, rows in order */
__global__ void route_stats_kernel(float *stats, const float *prob, const float *lse, int N, int E)
{
	const int e = blockIdx.x * blockDim.x + threadIdx.x;
	if (e > E)
		return;
	double s = 0;
	for (int n = 0; n < N; n++)
		s += e < E ? (double)prob[(size_t)n * E + e] : (double)lse[n] * lse[n];
	stats[e] = (float)s;
}

template <typename T>
void pp_cuda_moe_route(int *expert, pp_real *gate, pp_real *prob, pp_real *lse, pp_real *stats,
		       const pp_act *logits, int N, int E, int K, int mode)
{
	if (N > 0) {
		route_kernel<T><<<pp_cuda_blocks(N, THREADS), THREADS, 0, pp_cuda.stream>>>(
			expert, gate, prob, lse, (const T *)logits, N, E, K, mode);
		PP_CUDA_LAUNCHED("moe_route");
	}
	route_stats_kernel<<<pp_cuda_blocks((size_t)E + 1, THREADS), THREADS, 0, pp_cuda.stream>>>(
		stats, prob, lse, N, E);
	PP_CUDA_LAUNCHED("moe_route_stats");
}
PP_CUDA_BOTH(pp_cuda_moe_route);

/* One block, a thread per expert (strided): the counts of its expert, then
 * after a prefix over the experts, its assignments' rows, placed in
 * assignment order as it meets them: O(E N K / threads), every placement
 * fixed by the routing alone. */
__global__ void dispatch_kernel(int *rows, int *slot, int *counts, const int *expert, int NK, int E,
				int cap)
{
	extern __shared__ int start[]; /* (E) */
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		int chosen = 0;
		for (int a = 0; a < NK; a++)
			chosen += expert[a] == e;
		counts[E + e] = chosen;
		counts[e] = cap < 0 || chosen < cap ? chosen : cap;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int s = 0;
		for (int e = 0; e < E; e++) {
			start[e] = s;
			s += counts[e];
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < E; e += blockDim.x)
		for (int a = 0, seen = 0; a < NK; a++) {
			if (expert[a] != e)
				continue;
			if (cap >= 0 && seen >= cap) {
				slot[a] = -1;
			} else {
				slot[a] = start[e] + seen;
				rows[slot[a]] = a;
			}
			seen++;
		}
}

void pp_cuda_moe_dispatch(int *rows, int *slot, int *counts, const int *expert, int N, int K, int E,
			  int cap)
{
	dispatch_kernel<<<1, THREADS, (size_t)E * sizeof(int), pp_cuda.stream>>>(
		rows, slot, counts, expert, N * K, E, cap);
	PP_CUDA_LAUNCHED("moe_dispatch");
}

/* dst (M,C) row i = src row rows[i] / K, times scale[rows[i]]: one block per row */
template <typename T>
__global__ void gather_kernel(T *dst, const T *src, const int *rows, const float *scale, int K,
			      int C)
{
	const int i = blockIdx.x, a = rows[i];
	const T *x = src + (size_t)(a / K) * C;
	T *y = dst + (size_t)i * C;
	const float s = scale ? scale[a] : 1.0f;
	for (int c = threadIdx.x; c < C; c += blockDim.x)
		y[c] = pp_to<T>(s * pp_f(x[c]));
}

template <typename T>
void pp_cuda_moe_gather(pp_act *dst, const pp_act *src, const int *rows, const pp_real *scale,
			int M, int K, int C)
{
	if (M <= 0)
		return;
	gather_kernel<T>
		<<<M, THREADS, 0, pp_cuda.stream>>>((T *)dst, (const T *)src, rows, scale, K, C);
	PP_CUDA_LAUNCHED("moe_gather");
}
PP_CUDA_BOTH(pp_cuda_moe_gather);

/* out (N,C): one block per token, its K choices summed in order */
template <typename T>
__global__ void combine_kernel(T *out, const T *y, const int *slot, const float *gate, int K, int C)
{
	const int n = blockIdx.x;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float s = 0;
		for (int k = 0; k < K; k++) {
			const int r = slot[(size_t)n * K + k];
			if (r >= 0)
				s += (gate ? gate[(size_t)n * K + k] : 1.0f) *
				     pp_f(y[(size_t)r * C + c]);
		}
		out[(size_t)n * C + c] = pp_to<T>(s);
	}
}

template <typename T>
void pp_cuda_moe_combine(pp_act *out, const pp_act *y, const int *slot, const pp_real *gate, int N,
			 int K, int C)
{
	if (N <= 0)
		return;
	combine_kernel<T>
		<<<N, THREADS, 0, pp_cuda.stream>>>((T *)out, (const T *)y, slot, gate, K, C);
	PP_CUDA_LAUNCHED("moe_combine");
}
PP_CUDA_BOTH(pp_cuda_moe_combine);

/* dgate (N K): one block per assignment, a fixed-tree dot product */
template <typename T>
__global__ void gate_grad_kernel(float *dgate, const T *dout, const T *y, const int *slot, int K,
				 int C)
{
	__shared__ double red[32];
	const int a = blockIdx.x, r = slot[a];
	double s = 0;
	if (r >= 0)
		for (int c = threadIdx.x; c < C; c += blockDim.x)
			s += (double)pp_f(dout[(size_t)(a / K) * C + c]) *
			     pp_f(y[(size_t)r * C + c]);
	s = pp_block_sum(s, red);
	if (threadIdx.x == 0)
		dgate[a] = (float)s;
}

template <typename T>
void pp_cuda_moe_gate_grad(pp_real *dgate, const pp_act *dout, const pp_act *y, const int *slot,
			   int N, int K, int C)
{
	if (N <= 0)
		return;
	gate_grad_kernel<T><<<N * K, THREADS, 0, pp_cuda.stream>>>(dgate, (const T *)dout,
								   (const T *)y, slot, K, C);
	PP_CUDA_LAUNCHED("moe_gate_grad");
}
PP_CUDA_BOTH(pp_cuda_moe_gate_grad);

/* One thread per token: the row of dlogits (see kernels/cpu/moe.c) */
template <typename T>
__global__ void router_bwd_kernel(T *dlogits, const float *dgate, const int *expert,
				  const float *gate, const float *prob, const float *lse,
				  const float *frac, double aux, double z, int N, int E, int K,
				  int mode)
{
	const int n = blockIdx.x * blockDim.x + threadIdx.x;
	if (n >= N)
		return;
	T *dl = dlogits + (size_t)n * E;
	const float *p = prob + (size_t)n * E, *g = gate + (size_t)n * K,
		    *dg = dgate + (size_t)n * K;
	const int *ex = expert + (size_t)n * K;
	double pf = 0, s = 0;
	for (int e = 0; e < E; e++)
		pf += (double)p[e] * frac[e];
	for (int k = 0; k < K; k++)
		s += mode == PP_ROUTE_SOFTMAX_TOPK ? (double)p[ex[k]] * dg[k]
						   : (double)g[k] * dg[k];
	for (int e = 0; e < E; e++) {
		double d = aux * p[e] * (frac[e] - pf) + z * lse[n] * p[e];
		if (mode == PP_ROUTE_SOFTMAX_TOPK)
			d -= p[e] * s;
		for (int k = 0; k < K; k++)
			if (ex[k] == e)
				d += mode == PP_ROUTE_SOFTMAX_TOPK ? (double)p[e] * dg[k]
								   : (double)g[k] * (dg[k] - s);
		dl[e] = pp_to<T>((float)d);
	}
}

template <typename T>
void pp_cuda_moe_router_bwd(pp_act *dlogits, const pp_real *dgate, const int *expert,
			    const pp_real *gate, const pp_real *prob, const pp_real *lse,
			    const pp_real *frac, pp_real aux_w, pp_real z_w, int N, int E, int K,
			    int mode)
{
	if (N <= 0)
		return;
	router_bwd_kernel<T><<<pp_cuda_blocks(N, THREADS), THREADS, 0, pp_cuda.stream>>>(
		(T *)dlogits, dgate, expert, gate, prob, lse, frac, (double)aux_w * E / N,
		2.0 * z_w / N, N, E, K, mode);
	PP_CUDA_LAUNCHED("moe_router_bwd");
}
PP_CUDA_BOTH(pp_cuda_moe_router_bwd);
