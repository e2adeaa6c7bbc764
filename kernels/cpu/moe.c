/* Mixture of experts: routing, the permutation of token rows into expert
 * order and back, and the router's backward (ops.h). The experts' products
 * themselves are matmul_fwd / matmul_bwd over each expert's rows. */
#include "cpu.h"

void pp_cpu_moe_route(int *expert, pp_real *gate, pp_real *prob, pp_real *lse, pp_real *stats,
		      const pp_act *logits_, int N, int E, int K, int mode)
{
	const pp_real *logits = logits_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *l = logits + (size_t)n * E;
		pp_real *p = prob + (size_t)n * E;
		int *ex = expert + (size_t)n * K;
		pp_real *g = gate + (size_t)n * K;
		double mx = l[0];
		for (int e = 1; e < E; e++)
			mx = l[e] > mx ? l[e] : mx;
		double sum = 0;
		for (int e = 0; e < E; e++)
			sum += exp((double)l[e] - mx);
		lse[n] = (pp_real)(mx + log(sum));
		for (int e = 0; e < E; e++)
			p[e] = (pp_real)(exp((double)l[e] - mx) / sum);
		/* the K largest by selection, the lower index first among equals */
		for (int k = 0; k < K; k++) {
			int best = -1;
			for (int e = 0; e < E; e++) {
				int taken = 0;
				for (int j = 0; j < k; j++)
					taken |= ex[j] == e;
				if (!taken && (best < 0 || l[e] > l[best]))
					best = e;
			}
			ex[k] = best;
		}
		if (mode == PP_ROUTE_SOFTMAX_TOPK) {
			for (int k = 0; k < K; k++)
				g[k] = p[ex[k]];
		} else {
			/* softmax over the selected: the first is the largest */
			double s = 0;
			for (int k = 0; k < K; k++)
				s += exp((double)l[ex[k]] - l[ex[0]]);
			for (int k = 0; k < K; k++)
				g[k] = (pp_real)(exp((double)l[ex[k]] - l[ex[0]]) / s);
		}
	}
	/* column sums in a fixed order */
	for (int e = 0; e <= E; e++) {
		double s = 0;
		for (int n = 0; n < N; n++)
			s += e < E ? (double)prob[(size_t)n * E + e] : (double)lse[n] * lse[n];
		stats[e] = (pp_real)s;
	}
}

void pp_cpu_moe_dispatch(int *rows, int *slot, int *counts, const int *expert, int N, int K, int E,
			 int cap)
{
	const int NK = N * K;
	int *kept = counts, *chosen = counts + E;
	memset(counts, 0, 2 * (size_t)E * sizeof *counts);
	for (int a = 0; a < NK; a++) {
		int e = expert[a];
		chosen[e]++;
		slot[a] = cap < 0 || kept[e] < cap ? kept[e]++ : -1;
	}
	/* slot holds the rank within its expert: add the expert's start */
	int *start = pp_cpu_scratch((size_t)E * sizeof *start);
	for (int e = 1; e < E; e++)
		start[e] = start[e - 1] + kept[e - 1];
	for (int a = 0; a < NK; a++)
		if (slot[a] >= 0) {
			slot[a] += start[expert[a]];
			rows[slot[a]] = a;
		}
	pp_cpu_free(start);
}

void pp_cpu_moe_gather(pp_act *dst_, const pp_act *src_, const int *rows, const pp_real *scale,
		       int M, int K, int C)
{
	pp_real *dst = dst_;
	const pp_real *src = src_;
#pragma omp parallel for schedule(static)
	for (int i = 0; i < M; i++) {
		const pp_real *x = src + (size_t)(rows[i] / K) * C;
		pp_real *y = dst + (size_t)i * C, s = scale ? scale[rows[i]] : 1;
		for (int c = 0; c < C; c++)
			y[c] = s * x[c];
	}
}

void pp_cpu_moe_combine(pp_act *out_, const pp_act *y_, const int *slot, const pp_real *gate, int N,
			int K, int C)
{
	pp_real *out = out_;
	const pp_real *y = y_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		pp_real *o = out + (size_t)n * C;
		memset(o, 0, (size_t)C * sizeof *o);
		for (int k = 0; k < K; k++) {
			int r = slot[(size_t)n * K + k];
			if (r < 0)
				continue;
			const pp_real *x = y + (size_t)r * C,
				      g = gate ? gate[(size_t)n * K + k] : 1;
			for (int c = 0; c < C; c++)
				o[c] += g * x[c];
		}
	}
}

void pp_cpu_moe_gate_grad(pp_real *dgate, const pp_act *dout_, const pp_act *y_, const int *slot,
			  int N, int K, int C)
{
	const pp_real *dout = dout_, *y = y_;
#pragma omp parallel for schedule(static)
	for (int a = 0; a < N * K; a++) {
		int r = slot[a];
		double s = 0;
		if (r >= 0) {
			const pp_real *d = dout + (size_t)(a / K) * C, *x = y + (size_t)r * C;
			for (int c = 0; c < C; c++)
				s += (double)d[c] * x[c];
		}
		dgate[a] = (pp_real)s;
	}
}

void pp_cpu_moe_router_bwd(pp_act *dlogits_, const pp_real *dgate, const int *expert,
			   const pp_real *gate, const pp_real *prob, const pp_real *lse,
			   const pp_real *frac, pp_real aux_w, pp_real z_w, int N, int E, int K,
			   int mode)
{
	pp_real *dlogits = dlogits_;
	const double aux = (double)aux_w * E / N, z = 2.0 * z_w / N;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		pp_real *dl = dlogits + (size_t)n * E;
		const pp_real *p = prob + (size_t)n * E, *g = gate + (size_t)n * K;
		const pp_real *dg = dgate + (size_t)n * K;
		const int *ex = expert + (size_t)n * K;
		/* the load-balancing loss: d/dl_e of sum_j f_j p_j = p_e (f_e - sum_j p_j f_j) */
		double pf = 0;
		for (int e = 0; e < E; e++)
			pf += (double)p[e] * frac[e];
		for (int e = 0; e < E; e++)
			dl[e] = (pp_real)(aux * p[e] * (frac[e] - pf) + z * lse[n] * p[e]);
		if (mode == PP_ROUTE_SOFTMAX_TOPK) {
			/* gates are p at the selected: d/dl_e = p_e (dp_e - sum_j p_j dp_j) */
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)p[ex[k]] * dg[k];
			for (int e = 0; e < E; e++)
				dl[e] -= (pp_real)(p[e] * s);
			for (int k = 0; k < K; k++)
				dl[ex[k]] += p[ex[k]] * dg[k];
		} else {
			/* a softmax over the selected logits only */
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)g[k] * dg[k];
			for (int k = 0; k < K; k++)
				dl[ex[k]] += (pp_real)(g[k] * (dg[k] - s));
		}
	}
}
