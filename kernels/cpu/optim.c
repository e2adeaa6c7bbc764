/* Optimizer updates over flat parameter buffers. */
#include <tgmath.h>

#include "cpu.h"

/* elements per task */
#define SPAN 4096

/* AdamW on one span, pc (if not NULL) the new p; c1, c2 = 1 / (1 - b^t) */
static PP_CPU_CLONES void adamw_span(pp_real *p, pp_real *pc, const pp_real *g, pp_real *m,
				     pp_real *v, size_t n, pp_real lr, pp_real b1, pp_real b2,
				     pp_real eps, pp_real wd, pp_real c1, pp_real c2,
				     pp_real gscale)
{
	for (size_t i = 0; i < n; i++) {
		pp_real gi = g[i] * gscale;
		m[i] = b1 * m[i] + (1 - b1) * gi;
		v[i] = b2 * v[i] + (1 - b2) * gi * gi;
		pp_real mhat = m[i] * c1, vhat = v[i] * c2;
		p[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * p[i]);
	}
	if (pc)
		memcpy(pc, p, n * sizeof *p);
}

/* p, g, m, v (n); step t >= 1 */
void pp_cpu_adamw(pp_real *p, pp_act *pc_, const pp_real *g, pp_real *m, pp_real *v, size_t n,
		  float lr, float b1, float b2, float eps, float wd, long t, float gscale)
{
	pp_real *pc = pc_;
	/* in double: 1 - b2^t cancels, and in float its relative error is
	 * already 1e-5 at t = 1 for b2 = 0.999 */
	const pp_real c1 = (pp_real)(1 / (1 - pow(b1, (double)t)));
	const pp_real c2 = (pp_real)(1 / (1 - pow(b2, (double)t)));
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i += SPAN)
		adamw_span(p + i, pc ? pc + i : NULL, g + i, m + i, v + i,
			   n - i < SPAN ? n - i : SPAN, lr, b1, b2, eps, wd, c1, c2, gscale);
}
