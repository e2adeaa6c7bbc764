/* Softmax cross-entropy over the vocabulary. */
#include <string.h>

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
			if (d)
				memset(d, 0, sizeof(pp_real) * V);
			continue;
		}
		pp_real lse = pp_cpu_vlogsumexp(l, V);
		/* read the target logit before d (maybe the same row) overwrites it */
		losses[n] = lse - l[tgt];
		if (!d)
			continue;
		pp_cpu_vexp(d, l, lse, dscale, V);
		d[tgt] -= dscale;
	}
}
