/* Elementwise vector ops over n elements. */
#include <omp.h>
#include <stdlib.h>

#include "../dropmask.h"
#include "cpu.h"

void pp_cpu_add_real(pp_real *out, const pp_real *a, const pp_real *b, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

/* activations are pp_real on the CPU */
void pp_cpu_add(pp_act *out, const pp_act *a, const pp_act *b, size_t n)
{
	pp_cpu_add_real(out, a, b, n);
}

void pp_cpu_scale(pp_real *x, pp_real s, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

/* the compute type is pp_real */
void pp_cpu_scale_act(pp_act *x, pp_real s, size_t n) { pp_cpu_scale(x, s, n); }

void pp_cpu_dropout(pp_act *out, const pp_act *in, int N, int C, const pp_dropout *d)
{
	pp_real *y = out;
	const pp_real *x = in;
	const pp_real scale = (pp_real)d->scale;
#pragma omp parallel for schedule(static)
	for (int i = 0; i < N; i++) {
		const uint64_t at = (d->row0 + (uint64_t)i) * (uint64_t)d->width +
				    (uint64_t)d->col0;
		for (int j = 0; j < C; j++) {
			const size_t k = (size_t)i * C + j;
			y[k] = pp_dropped(d->key, at + (uint64_t)j, d->threshold) ? 0
										  : x[k] * scale;
		}
	}
}

/* Per-thread partial sums added in thread order: the same bits on every run
 * (a scalar OpenMP reduction combines in arrival order). */
double pp_cpu_sumsq(const pp_real *x, size_t n)
{
	const int nt = omp_get_max_threads();
	double *part = pp_cpu_scratch(sizeof(double) * (size_t)nt);
#pragma omp parallel num_threads(nt)
	{
		double acc = 0;
#pragma omp for simd schedule(static)
		for (size_t i = 0; i < n; i++)
			acc += (double)x[i] * x[i];
		part[omp_get_thread_num()] = acc;
	}
	double acc = 0;
	for (int t = 0; t < nt; t++)
		acc += part[t];
	free(part);
	return acc;
}
