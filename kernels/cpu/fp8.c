/* FP8 casts (kernels/fp8.h), the amax and scales they cast with, and the
 * scales divided out of a product. */
#include <math.h>

#include "../fp8.h"
#include "cpu.h"

void pp_cpu_fp8_cast(pp_act *out, const pp_act *in, size_t n, const float *scale, int fmt,
		     pp_fp8_tally *tally)
{
	pp_real *y = out;
	const pp_real *x = in;
	const float over = pp_fp8_overflow(fmt), sc = scale[0];
	float amax = 0;
	unsigned long long sat = 0, flushed = 0;
#pragma omp parallel for simd schedule(static) reduction(max : amax) reduction(+ : sat, flushed)
	for (size_t i = 0; i < n; i++) {
		const float v = (float)x[i], s = v * sc, q = pp_fp8_round(s, fmt);
		amax = fabsf(v) > amax ? fabsf(v) : amax;
		sat += fabsf(s) >= over;
		flushed += v != 0 && q == 0;
		y[i] = (pp_real)q;
	}
	if (tally) {
		tally->amax = amax > tally->amax ? amax : tally->amax;
		tally->saturated += sat;
		tally->flushed += flushed;
	}
}

void pp_cpu_absmax(float *out, const pp_act *x, size_t n, int into)
{
	const pp_real *v = x;
	float amax = into ? *out : 0;
#pragma omp parallel for simd schedule(static) reduction(max : amax)
	for (size_t i = 0; i < n; i++)
		amax = fabsf((float)v[i]) > amax ? fabsf((float)v[i]) : amax;
	*out = amax;
}

void pp_cpu_fp8_scale(float *scale, const float *amax, int fmt, float div)
{
	scale[0] = pp_fp8_scale(*amax, fmt, div, 1);
	scale[1] = 1.0f / scale[0];
}

void pp_cpu_fp8_unscale(void *x, size_t n, int real, const float *sa, const float *sb)
{
	(void)real; /* the compute type is pp_real */
	pp_cpu_scale(x, sa[1] * sb[1], n);
}
