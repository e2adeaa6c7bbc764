/* Vectorised row kernels shared by attention and the loss. */
#include "cpu.h"

static inline pp_real vmax(const pp_real *x, int n)
{
	pp_real m = x[0];
#pragma omp simd reduction(max : m)
	for (int i = 1; i < n; i++)
		m = x[i] > m ? x[i] : m;
	return m;
}

PP_CPU_CLONES pp_real pp_cpu_vlogsumexp(const pp_real *x, int n)
{
	pp_real mx = vmax(x, n);
	double sum;
	PP_CPU_SUM(sum, i, n, pp_cpu_exp(x[i] - mx));
	return mx + (pp_real)log(sum);
}

PP_CPU_CLONES void pp_cpu_vexp(pp_real *y, const pp_real *x, pp_real shift, pp_real scale, int n)
{
#pragma omp simd
	for (int i = 0; i < n; i++)
		y[i] = pp_cpu_exp(x[i] - shift) * scale;
}
