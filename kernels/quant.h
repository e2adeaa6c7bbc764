/* llama.cpp's block formats (ggml-common.h), one definition for pp's GGUF
 * reader and writer and for the CPU's decode products. A block holds 32
 * consecutive elements of a row, its fp16 scale first, little-endian:
 *   Q8_0  {fp16 d; int8 q[32]}            x[j] = d * q[j]                    34 bytes
 *   Q4_0  {fp16 d; uint8 qs[16]}          x[j] = d * ((qs[j] & 15) - 8),
 *                                         x[j + 16] = d * ((qs[j] >> 4) - 8)  18 bytes
 *   Q4_1  {fp16 d; fp16 m; uint8 qs[16]}  x[j] = d * (qs[j] & 15) + m,
 *                                         x[j + 16] = d * (qs[j] >> 4) + m    20 bytes
 * (j < 16). */
#ifndef PP_KERNELS_QUANT_H
#define PP_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define QUANT_BLOCK 32
enum { QUANT_Q8_0_BYTES = 34, QUANT_Q4_0_BYTES = 18, QUANT_Q4_1_BYTES = 20 };

/* n elements (a multiple of 32) from blocks at src into dst */
void quant_decode_q8_0(const void *src, float *dst, int64_t n);
void quant_decode_q4_0(const void *src, float *dst, int64_t n);
void quant_decode_q4_1(const void *src, float *dst, int64_t n);

/* n floats (a multiple of 32) into Q8_0 blocks at dst: the scale d =
 * max|x| / 127 rounded to fp16 (the largest finite one at most), then q =
 * round(x / d) clamped to [-127, 127]: every element within d / 2 of its
 * value. llama.cpp's quantize_row_q8_0 but for that clamp. */
void quant_encode_q8_0(const float *src, void *dst, int64_t n);

#endif
