/* Softmax cross-entropy over the vocabulary. */
#include <tgmath.h>

#include "cpu.h"

/* losses (N), dlogits (N,V) (may alias logits), logits (N,V), targets (N) */
void pp_cpu_crossentropy(pp_real *losses, pp_real *dlogits, const pp_real *logits,
			 const int *targets, int N, int V, pp_real dscale)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *l = logits + (size_t)n * V;
		pp_real *d = dlogits ? dlogits + (size_t)n * V : NULL;
		int tgt = targets[n];
		if (tgt < 0) {
			losses[n] = 0;
			for (int i = 0; d && i < V; i++)
				d[i] = 0;
			continue;
		}
		pp_real mx = l[0];
		for (int i = 1; i < V; i++)
			mx = l[i] > mx ? l[i] : mx;
		double sum = 0;
		for (int i = 0; i < V; i++)
			sum += exp(l[i] - mx);
		pp_real lse = mx + (pp_real)log(sum);
		/* read the target logit before d (maybe the same row) overwrites it */
		losses[n] = lse - l[tgt];
		if (!d)
			continue;
		for (int i = 0; i < V; i++)
			d[i] = exp(l[i] - lse) * dscale;
		d[tgt] -= dscale;
	}
}
