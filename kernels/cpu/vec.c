/* Elementwise vector ops over n elements. */
#include "cpu.h"

void pp_cpu_add(pp_real *out, const pp_real *a, const pp_real *b, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

void pp_cpu_scale(pp_real *x, pp_real s, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

double pp_cpu_sumsq(const pp_real *x, size_t n)
{
	double acc = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc)
	for (size_t i = 0; i < n; i++)
		acc += (double)x[i] * x[i];
	return acc;
}
