/* Products against weights stored for decoding (ops.h pack_weight): out
 * (N,OC) = inp (N,C) @ w (OC,C)^T + bias for the few rows of a decode step.
 * A step is bound by reading the weights, so each weight row is read from
 * memory once for all N rows and tasks own blocks of output rows. One input
 * row: a dot product per weight row straight from the stored form, with
 * several vector accumulators in flight (one would stall on the FMA
 * latency). Several: each task's weight rows are expanded to fp32 once, in
 * cache, then one GEMM on the calling thread. Sums are in fp32 whatever the
 * stored format.
 *
 * Formats, per row of C weights:
 *   PP_WEIGHTS_F32   C floats (the compute copy itself: no packing)
 *   PP_WEIGHTS_BF16  C bf16, rounded to nearest even
 *   PP_WEIGHTS_Q8_0, PP_WEIGHTS_Q4_0, PP_WEIGHTS_Q4_1
 *                    C/32 blocks of llama.cpp's formats (kernels/quant.h);
 *                    pack_weight makes Q8_0, a GGUF file brings all three. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "../halffloat.h"
#include "../quant.h"
#include "cpu.h"

#define ROWS_PER_TASK 16
#define LANES         64 /* accumulators: 4 AVX-512 or 8 AVX2 vectors */

#ifndef PP_F64

static int block_bytes(int fmt)
{
	return fmt == PP_WEIGHTS_Q8_0   ? QUANT_Q8_0_BYTES
	       : fmt == PP_WEIGHTS_Q4_0 ? QUANT_Q4_0_BYTES
					: QUANT_Q4_1_BYTES;
}

void *pp_cpu_pack_weight(const pp_act *w_, int OC, int C, int fmt)
{
	const float *w = w_;
	size_t bytes = pp_weights_bytes(fmt, OC, C);
	if (fmt != PP_WEIGHTS_F32 && fmt != PP_WEIGHTS_BF16 && fmt != PP_WEIGHTS_Q8_0)
		return NULL;
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
#pragma omp parallel for schedule(static)
		for (int o = 0; o < OC; o++)
			quant_encode_q8_0(
				w + (size_t)o * C,
				(uint8_t *)p + (size_t)o * (C / QUANT_BLOCK) * QUANT_Q8_0_BYTES, C);
	}
	return p;
}

/* the sum over LANES columns at a time, then the tail */
#define DOT(acc_expr, tail_expr)                                                                   \
	float acc_[LANES] = {0}, s_ = 0;                                                           \
	int j = 0;                                                                                 \
	for (; j + LANES <= C; j += LANES)                                                         \
		for (int k = 0; k < LANES; k++)                                                    \
			acc_[k] = fmaf(acc_expr, x[j + k], acc_[k]);                               \
	for (; j < C; j++)                                                                         \
		s_ += (tail_expr)*x[j];                                                            \
	for (int k = 0; k < LANES; k++)                                                            \
		s_ += acc_[k];                                                                     \
	return s_

static inline float dot_f32(const float *w, const float *x, int C) { DOT(w[j + k], w[j]); }

static float dot_bf16_c(const uint16_t *w, const float *x, int C)
{
	DOT(bf16_to_f32(w[j + k]), bf16_to_f32(w[j]));
}

/* ---- rows of bf16 and of blocks: dot products and expansion ----------------
 * Written with intrinsics where the CPU has AVX2 or AVX-512 (picked when the
 * program loads): compilers do not vectorise the widening of bf16, int8 and
 * 4-bit weights well, and this loop is the whole step. */

static void dequant_c(int fmt, const uint8_t *row, float *w, int C)
{
	if (fmt == PP_WEIGHTS_Q8_0)
		quant_decode_q8_0(row, w, C);
	else if (fmt == PP_WEIGHTS_Q4_0)
		quant_decode_q4_0(row, w, C);
	else
		quant_decode_q4_1(row, w, C);
}

static float dot_blocks_c(int fmt, const uint8_t *row, const float *x, int C)
{
	float w[QUANT_BLOCK], s = 0;
	const int bb = block_bytes(fmt);
	for (int b = 0; b < C / QUANT_BLOCK; b++) {
		dequant_c(fmt, row + (size_t)b * bb, w, QUANT_BLOCK);
		for (int k = 0; k < QUANT_BLOCK; k++)
			s += w[k] * x[b * QUANT_BLOCK + k];
	}
	return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* the 32 weights of a block as two vectors of 16 */
__attribute__((target("avx512f,f16c"))) static inline void block_avx512(int fmt, const uint8_t *b,
									__m512 *w0, __m512 *w1)
{
	const __m512 d = _mm512_set1_ps(_cvtsh_ss(le16(b)));
	if (fmt == PP_WEIGHTS_Q8_0) {
		*w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
					    _mm_loadu_si128((const __m128i *)(b + 2)))),
				    d);
		*w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
					    _mm_loadu_si128((const __m128i *)(b + 18)))),
				    d);
		return;
	}
	const bool q41 = fmt == PP_WEIGHTS_Q4_1;
	const __m512 m = q41 ? _mm512_set1_ps(_cvtsh_ss(le16(b + 2)))
			     : _mm512_mul_ps(d, _mm512_set1_ps(-8));
	const __m128i v = _mm_loadu_si128((const __m128i *)(b + (q41 ? 4 : 2))),
		      mask = _mm_set1_epi8(15);
	const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
	*w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), d, m);
	*w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), d, m);
}

__attribute__((target("avx512f,f16c"))) static float dot_blocks_avx512(int fmt, const uint8_t *row,
								       const float *x, int C)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
	const int bb = block_bytes(fmt);
	for (int b = 0; b < C / QUANT_BLOCK; b++) {
		__m512 w0, w1;
		block_avx512(fmt, row + (size_t)b * bb, &w0, &w1);
		a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + b * QUANT_BLOCK), a0);
		a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + b * QUANT_BLOCK + 16), a1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

__attribute__((target("avx512f,f16c"))) static void dequant_avx512(int fmt, const uint8_t *row,
								   float *w, int C)
{
	const int bb = block_bytes(fmt);
	for (int b = 0; b < C / QUANT_BLOCK; b++) {
		__m512 w0, w1;
		block_avx512(fmt, row + (size_t)b * bb, &w0, &w1);
		_mm512_storeu_ps(w + b * QUANT_BLOCK, w0);
		_mm512_storeu_ps(w + b * QUANT_BLOCK + 16, w1);
	}
}

/* a row of bf16: widened to fp32 by a shift, four accumulators */
__attribute__((target("avx512f"))) static float dot_bf16_avx512(const uint16_t *w, const float *x,
								int C)
{
	__m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
		       _mm512_setzero_ps()};
	int j = 0;
	for (; j + 64 <= C; j += 64)
		for (int k = 0; k < 4; k++) {
			__m512i v = _mm512_cvtepu16_epi32(
				_mm256_loadu_si256((const __m256i *)(w + j + 16 * k)));
			a[k] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
					       _mm512_loadu_ps(x + j + 16 * k), a[k]);
		}
	float s = _mm512_reduce_add_ps(
		_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
	for (; j < C; j++)
		s += bf16_to_f32(w[j]) * x[j];
	return s;
}

__attribute__((target("avx2,fma"))) static float dot_bf16_avx2(const uint16_t *w, const float *x,
							       int C)
{
	__m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
		       _mm256_setzero_ps()};
	int j = 0;
	for (; j + 32 <= C; j += 32)
		for (int k = 0; k < 4; k++) {
			__m256i v = _mm256_cvtepu16_epi32(
				_mm_loadu_si128((const __m128i *)(w + j + 8 * k)));
			a[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
					       _mm256_loadu_ps(x + j + 8 * k), a[k]);
		}
	__m256 t = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
	__m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
	r = _mm_add_ps(r, _mm_movehl_ps(r, r));
	r = _mm_add_ss(r, _mm_movehdup_ps(r));
	float s = _mm_cvtss_f32(r);
	for (; j < C; j++)
		s += bf16_to_f32(w[j]) * x[j];
	return s;
}

/* the 32 weights of a block as four vectors of 8 */
__attribute__((target("avx2,fma,f16c"))) static inline void block_avx2(int fmt, const uint8_t *b,
								       __m256 w[4])
{
	const __m256 d = _mm256_set1_ps(_cvtsh_ss(le16(b)));
	if (fmt == PP_WEIGHTS_Q8_0) {
		for (int k = 0; k < 4; k++)
			w[k] = _mm256_mul_ps(
				_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
					_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k)))),
				d);
		return;
	}
	const bool q41 = fmt == PP_WEIGHTS_Q4_1;
	const __m256 m = q41 ? _mm256_set1_ps(_cvtsh_ss(le16(b + 2)))
			     : _mm256_mul_ps(d, _mm256_set1_ps(-8));
	const __m128i v = _mm_loadu_si128((const __m128i *)(b + (q41 ? 4 : 2))),
		      mask = _mm_set1_epi8(15);
	const __m128i n[2] = {_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask)};
	for (int k = 0; k < 4; k++) {
		__m128i part = k & 1 ? _mm_srli_si128(n[k / 2], 8) : n[k / 2];
		w[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part)), d, m);
	}
}

__attribute__((target("avx2,fma,f16c"))) static float dot_blocks_avx2(int fmt, const uint8_t *row,
								      const float *x, int C)
{
	__m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
		       _mm256_setzero_ps()};
	const int bb = block_bytes(fmt);
	for (int b = 0; b < C / QUANT_BLOCK; b++) {
		__m256 w[4];
		block_avx2(fmt, row + (size_t)b * bb, w);
		for (int k = 0; k < 4; k++)
			a[k] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(x + b * QUANT_BLOCK + 8 * k),
					       a[k]);
	}
	__m256 s = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
	__m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
	r = _mm_add_ps(r, _mm_movehl_ps(r, r));
	r = _mm_add_ss(r, _mm_movehdup_ps(r));
	return _mm_cvtss_f32(r);
}

__attribute__((target("avx2,fma,f16c"))) static void dequant_avx2(int fmt, const uint8_t *row,
								  float *w, int C)
{
	const int bb = block_bytes(fmt);
	for (int b = 0; b < C / QUANT_BLOCK; b++) {
		__m256 v[4];
		block_avx2(fmt, row + (size_t)b * bb, v);
		for (int k = 0; k < 4; k++)
			_mm256_storeu_ps(w + b * QUANT_BLOCK + 8 * k, v[k]);
	}
}
#endif

static float (*dot_bf16)(const uint16_t *, const float *, int) = dot_bf16_c;
static float (*dot_blocks)(int, const uint8_t *, const float *, int) = dot_blocks_c;
static void (*dequant)(int, const uint8_t *, float *, int) = dequant_c;

/* The widest the CPU has; PP_CPU_ISA=avx2 or generic caps it (to compare
 * the paths on one machine). */
__attribute__((constructor)) static void pick_blocks(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	const char *cap = getenv("PP_CPU_ISA");
	const bool avx512 = !cap || (strcmp(cap, "avx2") && strcmp(cap, "generic"));
	const bool avx2 = !cap || strcmp(cap, "generic");
	__builtin_cpu_init();
	if (avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c")) {
		dot_bf16 = dot_bf16_avx512;
		dot_blocks = dot_blocks_avx512;
		dequant = dequant_avx512;
	} else if (avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		   __builtin_cpu_supports("f16c")) {
		dot_bf16 = dot_bf16_avx2;
		dot_blocks = dot_blocks_avx2;
		dequant = dequant_avx2;
	}
#endif
}

/* n floats of scratch per thread (weight rows expanded to fp32) */
static float *row_buffer(size_t n)
{
	static _Thread_local float *buf;
	static _Thread_local size_t cap;
	if (cap < n) {
		pp_cpu_free(buf);
		buf = pp_cpu_scratch(n * sizeof *buf);
		cap = n;
	}
	return buf;
}

/* output rows [o0, o1) of every input row */
PP_CPU_CLONES
static void rows_packed(float *out, const float *inp, const void *wp, const float *bias, int N,
			int C, int OC, int fmt, int o0, int o1)
{
	const size_t row_bytes = pp_weights_bytes(fmt, 1, C);
	const uint8_t *rows8 = wp;
	const uint16_t *h = wp;
	if (N == 1) {
		for (int o = o0; o < o1; o++) {
			float v = fmt == PP_WEIGHTS_F32
					  ? dot_f32((const float *)wp + (size_t)o * C, inp, C)
				  : fmt == PP_WEIGHTS_BF16
					  ? dot_bf16(h + (size_t)o * C, inp, C)
					  : dot_blocks(fmt, rows8 + o * row_bytes, inp, C);
			out[o] = v + (bias ? bias[o] : 0);
		}
		return;
	}
	const int rows = o1 - o0;
	const float *tile = (const float *)wp + (size_t)o0 * C;
	if (fmt != PP_WEIGHTS_F32) {
		float *t = row_buffer((size_t)rows * C);
		for (int r = 0; r < rows; r++) {
			const size_t o = (size_t)(o0 + r);
			if (fmt == PP_WEIGHTS_BF16)
				for (int j = 0; j < C; j++)
					t[(size_t)r * C + j] = bf16_to_f32(h[o * C + j]);
			else
				dequant(fmt, rows8 + o * row_bytes, t + (size_t)r * C, C);
		}
		tile = t;
	}
	pp_cpu_gemm(0, 1, N, rows, C, 1, inp, C, tile, C, 0, out + o0, OC);
	for (int n = 0; bias && n < N; n++)
		for (int r = 0; r < rows; r++)
			out[(size_t)n * OC + o0 + r] += bias[o0 + r];
}

void pp_cpu_matmul_packed(pp_act *out, const pp_act *inp, const void *wp, const pp_act *bias, int N,
			  int C, int OC, int fmt)
{
	/* a prompt's many rows: fp32 weights are the compute copy's layout, and
	 * one BLAS product over them is faster there from about 8 rows (a
	 * scored choice's dozens: 40% less time than the tiles below) */
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
