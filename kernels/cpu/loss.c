/* Softmax cross-entropy over the vocabulary: fused for a whole (N,V) row
 * block, or in two halves for a vocabulary split across ranks. */
#include <string.h>

#include "cpu.h"

/* d (V) = (exp(l - lse) - onehot(tgt)) * dscale; tgt outside [0,V) adds no one-hot */
static void softmax_grad_row(pp_real *d, const pp_real *l, pp_real lse, int tgt, int V,
			     pp_real dscale)
{
	pp_cpu_vexp(d, l, lse, dscale, V);
	if (tgt >= 0 && tgt < V)
		d[tgt] -= dscale;
}

/* losses (N), dlogits (N,V) (may alias logits), logits (N,V), targets (N) */
void pp_cpu_crossentropy(pp_real *losses, pp_act *dlogits_, const pp_act *logits_,
			 const int *targets, int N, int V, pp_real dscale)
{
	pp_real *dlogits = dlogits_;
	const pp_real *logits = logits_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *l = logits + (size_t)n * V;
		pp_real *d = dlogits ? dlogits + (size_t)n * V : NULL;
		int tgt = targets[n];
		if (tgt < 0) {
			losses[n] = 0;
			if (d)
				memset(d, 0, sizeof(pp_real) * V);
			continue;
		}
		pp_real lse = pp_cpu_vlogsumexp(l, V);
		/* read the target logit before d (maybe the same row) overwrites it */
		losses[n] = lse - l[tgt];
		if (d)
			softmax_grad_row(d, l, lse, tgt, V, dscale);
	}
}

/* lse (N), tgt (N) from a vocabulary slice logits (N,V), local targets (N) */
void pp_cpu_logsumexp_rows(pp_real *lse, pp_real *tgt, const pp_act *logits_, const int *targets,
			   int N, int V)
{
	const pp_real *logits = logits_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *l = logits + (size_t)n * V;
		lse[n] = pp_cpu_vlogsumexp(l, V);
		tgt[n] = targets[n] >= 0 && targets[n] < V ? l[targets[n]] : 0;
	}
}

/* dlogits (N,V) from logits (N,V) and the global lse (N) */
void pp_cpu_softmax_grad(pp_act *dlogits_, const pp_act *logits_, const pp_real *lse,
			 const int *targets, int N, int V, pp_real dscale)
{
	pp_real *dlogits = dlogits_;
	const pp_real *logits = logits_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		pp_real *d = dlogits + (size_t)n * V;
		if (targets[n] == PP_IGNORE_INDEX)
			memset(d, 0, sizeof(pp_real) * V);
		else
			softmax_grad_row(d, logits + (size_t)n * V, lse[n], targets[n], V, dscale);
	}
}
