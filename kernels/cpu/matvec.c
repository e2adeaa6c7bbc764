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

/* One row of q8_0 blocks (C a multiple of 32): into fp32 (for several
 * input rows), or its dot product with x (one input row), the block's
 * products summed before its scale. Written with intrinsics where the CPU
 * has AVX2 or AVX-512: compilers do not vectorise the int8 widening well
 * here, and this loop is the whole step. */
static void dequant_q8_c(float *w, const int8_t *q, const uint16_t *d, int C)
{
	for (int b = 0; b < C / Q8_BLOCK; b++) {
		const float sc = f16_to_f32(d[b]);
		for (int k = 0; k < Q8_BLOCK; k++)
			w[b * Q8_BLOCK + k] = sc * (float)q[b * Q8_BLOCK + k];
	}
}

static float dot_q8_c(const int8_t *q, const uint16_t *d, const float *x, int C)
{
	float s = 0;
	for (int b = 0; b < C / Q8_BLOCK; b++) {
		float t = 0;
		for (int k = 0; k < Q8_BLOCK; k++)
			t += (float)q[b * Q8_BLOCK + k] * x[b * Q8_BLOCK + k];
		s += f16_to_f32(d[b]) * t;
	}
	return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f,f16c"))) static float dot_q8_avx512(const int8_t *q,
								   const uint16_t *d,
								   const float *x, int C)
{
	__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
	for (int b = 0; b < C / Q8_BLOCK; b += 2) {
		/* two blocks per iteration: independent chains for the FMA latency */
		for (int h = 0; h < 2 && b + h < C / Q8_BLOCK; h++) {
			const int8_t *qb = q + (b + h) * Q8_BLOCK;
			const float *xb = x + (b + h) * Q8_BLOCK;
			__m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)qb)));
			__m512 hi = _mm512_cvtepi32_ps(
				_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(qb + 16))));
			__m512 t = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16),
						   _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
			__m512 sc = _mm512_set1_ps(_cvtsh_ss(d[b + h]));
			if (h)
				acc1 = _mm512_fmadd_ps(t, sc, acc1);
			else
				acc0 = _mm512_fmadd_ps(t, sc, acc0);
		}
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

__attribute__((target("avx512f,f16c"))) static void dequant_q8_avx512(float *w, const int8_t *q,
								      const uint16_t *d, int C)
{
	for (int b = 0; b < C / Q8_BLOCK; b++) {
		__m512 sc = _mm512_set1_ps(_cvtsh_ss(d[b]));
		for (int h = 0; h < 2; h++) {
			__m512i v = _mm512_cvtepi8_epi32(
				_mm_loadu_si128((const __m128i *)(q + b * Q8_BLOCK + 16 * h)));
			_mm512_storeu_ps(w + b * Q8_BLOCK + 16 * h,
					 _mm512_mul_ps(_mm512_cvtepi32_ps(v), sc));
		}
	}
}

__attribute__((target("avx2,fma,f16c"))) static float dot_q8_avx2(const int8_t *q,
								  const uint16_t *d,
								  const float *x, int C)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	for (int b = 0; b < C / Q8_BLOCK; b++) {
		const int8_t *qb = q + b * Q8_BLOCK;
		const float *xb = x + b * Q8_BLOCK;
		__m256 t = _mm256_setzero_ps();
		for (int k = 0; k < Q8_BLOCK; k += 8) {
			__m256 w = _mm256_cvtepi32_ps(
				_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qb + k))));
			t = _mm256_fmadd_ps(w, _mm256_loadu_ps(xb + k), t);
		}
		__m256 sc = _mm256_set1_ps(_cvtsh_ss(d[b]));
		if (b & 1)
			acc1 = _mm256_fmadd_ps(t, sc, acc1);
		else
			acc0 = _mm256_fmadd_ps(t, sc, acc0);
	}
	__m256 a = _mm256_add_ps(acc0, acc1);
	__m128 r = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	r = _mm_add_ps(r, _mm_movehl_ps(r, r));
	r = _mm_add_ss(r, _mm_movehdup_ps(r));
	return _mm_cvtss_f32(r);
}

__attribute__((target("avx2,f16c"))) static void dequant_q8_avx2(float *w, const int8_t *q,
								 const uint16_t *d, int C)
{
	for (int b = 0; b < C / Q8_BLOCK; b++) {
		__m256 sc = _mm256_set1_ps(_cvtsh_ss(d[b]));
		for (int k = 0; k < Q8_BLOCK; k += 8) {
			__m256i v = _mm256_cvtepi8_epi32(
				_mm_loadl_epi64((const __m128i *)(q + b * Q8_BLOCK + k)));
			_mm256_storeu_ps(w + b * Q8_BLOCK + k, _mm256_mul_ps(_mm256_cvtepi32_ps(v), sc));
		}
	}
}
#endif

typedef float (*dot_q8_fn)(const int8_t *, const uint16_t *, const float *, int);
typedef void (*dequant_q8_fn)(float *, const int8_t *, const uint16_t *, int);
static dot_q8_fn dot_q8 = dot_q8_c;
static dequant_q8_fn dequant_q8 = dequant_q8_c;

__attribute__((constructor)) static void pick_q8(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c")) {
		dot_q8 = dot_q8_avx512;
		dequant_q8 = dequant_q8_avx512;
	} else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		   __builtin_cpu_supports("f16c")) {
		dot_q8 = dot_q8_avx2;
		dequant_q8 = dequant_q8_avx2;
	}
#endif
}

/* n floats of scratch per thread (weight rows expanded to fp32) */
static float *row_buffer(int C)
{
	static _Thread_local float *buf;
	static _Thread_local int cap;
	if (cap < C) {
		pp_cpu_free(buf);
		buf = pp_cpu_scratch((size_t)C * sizeof *buf);
		cap = C;
	}
	return buf;
}

/* output rows [o0, o1) of every input row. One input row: a dot product
 * per weight row, straight from the stored form. Several: the task's
 * weight rows are expanded to fp32 once (in cache), then one GEMM on the
 * calling thread. */
PP_CPU_CLONES
static void rows_packed(float *out, const float *inp, const void *wp, const float *bias, int N,
			int C, int OC, int fmt, int o0, int o1)
{
	const int8_t *q = wp;
	const uint16_t *d = (const uint16_t *)(q + (size_t)OC * C), *h = wp;
	if (N == 1) {
		for (int o = o0; o < o1; o++) {
			float v = fmt == PP_WEIGHTS_F32    ? dot_f32((const float *)wp + (size_t)o * C, inp, C)
				  : fmt == PP_WEIGHTS_BF16 ? dot_bf16(h + (size_t)o * C, inp, C)
							   : dot_q8(q + (size_t)o * C, d + (size_t)o * (C / Q8_BLOCK), inp, C);
			out[o] = v + (bias ? bias[o] : 0);
		}
		return;
	}
	const int rows = o1 - o0;
	const float *tile = (const float *)wp + (size_t)o0 * C;
	if (fmt != PP_WEIGHTS_F32) {
		float *t = row_buffer(rows * C);
		for (int r = 0; r < rows; r++) {
			const size_t o = (size_t)(o0 + r);
			if (fmt == PP_WEIGHTS_Q8_0)
				dequant_q8(t + (size_t)r * C, q + o * C, d + o * (C / Q8_BLOCK), C);
			else
				for (int j = 0; j < C; j++)
					t[(size_t)r * C + j] = bf16_to_f32(h[o * C + j]);
		}
		tile = t;
	}
	pp_cpu_gemm(0, 1, N, rows, C, 1, inp, C, tile, C, 0, out + o0, OC);
	for (int n = 0; bias && n < N; n++)
		for (int r = 0; r < rows; r++)
			out[(size_t)n * OC + o0 + r] += bias[o0 + r];
}

void pp_cpu_matmul_packed(pp_act *out, const pp_act *inp, const void *wp, const pp_act *bias,
			  int N, int C, int OC, int fmt)
{
	/* a prompt's many rows: fp32 weights are the compute copy's layout, and
	 * one BLAS product over them is faster there */
	if (fmt == PP_WEIGHTS_F32 && N > 64) {
		pp_cpu_matmul_fwd(out, inp, wp, bias, N, C, OC);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int o0 = 0; o0 < OC; o0 += ROWS_PER_TASK)
		rows_packed(out, inp, wp, bias, N, C, OC, fmt, o0,
			    OC - o0 < ROWS_PER_TASK ? OC : o0 + ROWS_PER_TASK);
}

#endif
