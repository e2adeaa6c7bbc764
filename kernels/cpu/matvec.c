/* Products against weights stored for decoding (ops.h pack_weight): out
 * (N,OC) = inp (N,C) @ w (OC,C)^T + bias for the few rows of a decode step.
 * A step is bound by reading the weights, so each weight row is read from
 * memory once for all N rows, tasks own blocks of output rows, and the dot
 * products keep several vector accumulators in flight (one would stall on
 * the FMA latency). Sums are in fp32 whatever the stored format.
 *
 * Formats, per row of C weights:
 *   PP_WEIGHTS_F32   C floats (the compute copy itself: no packing)
 *   PP_WEIGHTS_BF16  C bf16, rounded to nearest even
 *   PP_WEIGHTS_Q8_0  C/32 blocks of 32 int8 q and one fp16 scale d, w = d*q,
 *                    d = max|w|/127 over the block (llama.cpp's Q8_0); the
 *                    int8 of every row first, then the scales. */
#include <stdint.h>
#include <stdlib.h>

#include "cpu.h"

#define Q8_BLOCK 32
#define ROWS_PER_TASK 16
#define LANES 64 /* accumulators: 4 AVX-512 or 8 AVX2 vectors */

#ifndef PP_F64

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
		return (uint16_t)(u >> 16 | 0x40);
	return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

/* IEEE half, round to nearest even (the scales: finite, >= 0) */
static uint16_t f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = u >> 16 & 0x8000u, a = u & 0x7fffffffu;
	if (a >= 0x477ff000u) /* overflows half: inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) { /* subnormal half */
		float m;
		memcpy(&m, &a, 4);
		return (uint16_t)(sign | (uint32_t)lrintf(m * 16777216.0f)); /* m / 2^-24 */
	}
	a += 0xfffu + (a >> 13 & 1);
	return (uint16_t)(sign | (a - 0x38000000u) >> 13);
}

static inline float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1f, m = h & 0x3ffu, u;
	if (e == 0) {
		float f = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
		memcpy(&u, &f, 4);
		u |= sign;
	} else if (e == 31) {
		u = sign | 0x7f800000u | m << 13;
	} else {
		u = sign | (e + 112) << 23 | m << 13;
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline float bf16_to_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

void *pp_cpu_pack_weight(const pp_act *w_, int OC, int C, int fmt)
{
	const float *w = w_;
	size_t bytes = pp_weights_bytes(fmt, OC, C);
	void *p = bytes ? malloc(bytes) : NULL;
	if (!p)
		return NULL;
	if (fmt == PP_WEIGHTS_F32) {
		memcpy(p, w, bytes);
	} else if (fmt == PP_WEIGHTS_BF16) {
		uint16_t *b = p;
#pragma omp parallel for schedule(static)
		for (size_t i = 0; i < (size_t)OC * C; i++)
			b[i] = f32_to_bf16(w[i]);
	} else {
		const size_t nb = (size_t)OC * C / Q8_BLOCK;
		int8_t *q = p;
		uint16_t *d = (uint16_t *)(q + (size_t)OC * C);
#pragma omp parallel for schedule(static)
		for (size_t k = 0; k < nb; k++) {
			const float *x = w + k * Q8_BLOCK;
			float amax = 0;
			for (int i = 0; i < Q8_BLOCK; i++)
				amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
			float s = amax / 127, inv = s > 0 ? 1 / s : 0;
			for (int i = 0; i < Q8_BLOCK; i++)
				q[k * Q8_BLOCK + i] = (int8_t)lrintf(x[i] * inv);
			d[k] = f32_to_f16(s);
		}
	}
	return p;
}

/* the sum over LANES columns at a time, then the tail */
#define DOT(acc_expr, tail_expr)                                          \
	float acc_[LANES] = {0}, s_ = 0;                                  \
	int j = 0;                                                        \
	for (; j + LANES <= C; j += LANES)                                \
		for (int k = 0; k < LANES; k++)                           \
			acc_[k] = fmaf(acc_expr, x[j + k], acc_[k]);       \
	for (; j < C; j++)                                                \
		s_ += (tail_expr) * x[j];                                 \
	for (int k = 0; k < LANES; k++)                                   \
		s_ += acc_[k];                                            \
	return s_

static inline float dot_f32(const float *w, const float *x, int C)
{
	DOT(w[j + k], w[j]);
}

static inline float dot_bf16(const uint16_t *w, const float *x, int C)
{
	DOT(bf16_to_f32(w[j + k]), bf16_to_f32(w[j]));
}

/* one row of q8_0 blocks (C a multiple of 32) */
static inline float dot_q8(const int8_t *q, const uint16_t *d, const float *x, int C)
{
	float acc[Q8_BLOCK] = {0}, s = 0;
	for (int b = 0; b < C / Q8_BLOCK; b++) {
		const float sc = f16_to_f32(d[b]);
		const int8_t *qb = q + b * Q8_BLOCK;
		const float *xb = x + b * Q8_BLOCK;
		for (int k = 0; k < Q8_BLOCK; k++)
			acc[k] = fmaf(sc * (float)qb[k], xb[k], acc[k]);
	}
	for (int k = 0; k < Q8_BLOCK; k++)
		s += acc[k];
	return s;
}

/* output rows [o0, o1) of every input row */
PP_CPU_CLONES
static void rows_packed(float *out, const float *inp, const void *wp, const float *bias, int N,
			int C, int OC, int fmt, int o0, int o1)
{
	const int8_t *q = wp;
	const uint16_t *d = (const uint16_t *)(q + (size_t)OC * C);
	for (int o = o0; o < o1; o++) {
		const float b = bias ? bias[o] : 0;
		for (int n = 0; n < N; n++) {
			const float *x = inp + (size_t)n * C;
			float v;
			if (fmt == PP_WEIGHTS_F32)
				v = dot_f32((const float *)wp + (size_t)o * C, x, C);
			else if (fmt == PP_WEIGHTS_BF16)
				v = dot_bf16((const uint16_t *)wp + (size_t)o * C, x, C);
			else
				v = dot_q8(q + (size_t)o * C, d + (size_t)o * (C / Q8_BLOCK), x, C);
			out[(size_t)n * OC + o] = v + b;
		}
	}
}

void pp_cpu_matmul_packed(pp_act *out, const pp_act *inp, const void *wp, const pp_act *bias,
			  int N, int C, int OC, int fmt)
{
	/* many rows (a prompt): fp32 weights are the compute copy's layout, and
	 * BLAS is faster there */
	if (fmt == PP_WEIGHTS_F32 && N > 8) {
		pp_cpu_matmul_fwd(out, inp, wp, bias, N, C, OC);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int o0 = 0; o0 < OC; o0 += ROWS_PER_TASK)
		rows_packed(out, inp, wp, bias, N, C, OC, fmt, o0,
			    OC - o0 < ROWS_PER_TASK ? OC : o0 + ROWS_PER_TASK);
}

#endif
