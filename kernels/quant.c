/* llama.cpp's block formats: the plain C reference (quant.h). */
#include "quant.h"

#include <math.h>

#include "halffloat.h"

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

void quant_decode_q8_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *s = src;
	for (int64_t b = 0; b < n / QUANT_BLOCK; b++, s += QUANT_Q8_0_BYTES, dst += QUANT_BLOCK) {
		const float d = f16_to_f32(le16(s));
		for (int j = 0; j < QUANT_BLOCK; j++)
			dst[j] = d * (float)(int8_t)s[2 + j];
	}
}

void quant_decode_q4_0(const void *src, float *dst, int64_t n)
{
	const uint8_t *s = src;
	for (int64_t b = 0; b < n / QUANT_BLOCK; b++, s += QUANT_Q4_0_BYTES, dst += QUANT_BLOCK) {
		const float d = f16_to_f32(le16(s));
		for (int j = 0; j < 16; j++) {
			dst[j] = d * (float)((s[2 + j] & 15) - 8);
			dst[j + 16] = d * (float)((s[2 + j] >> 4) - 8);
		}
	}
}

void quant_decode_q4_1(const void *src, float *dst, int64_t n)
{
	const uint8_t *s = src;
	for (int64_t b = 0; b < n / QUANT_BLOCK; b++, s += QUANT_Q4_1_BYTES, dst += QUANT_BLOCK) {
		const float d = f16_to_f32(le16(s)), m = f16_to_f32(le16(s + 2));
		for (int j = 0; j < 16; j++) {
			dst[j] = d * (float)(s[4 + j] & 15) + m;
			dst[j + 16] = d * (float)(s[4 + j] >> 4) + m;
		}
	}
}

void quant_encode_q8_0(const float *src, void *dst, int64_t n)
{
	uint8_t *o = dst;
	for (int64_t b = 0; b < n / QUANT_BLOCK; b++, o += QUANT_Q8_0_BYTES, src += QUANT_BLOCK) {
		float amax = 0;
		for (int j = 0; j < QUANT_BLOCK; j++)
			amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax;
		uint16_t h = f32_to_f16(amax / 127);
		if ((h & 0x7C00) == 0x7C00)
			h = 0x7BFF; /* the largest finite fp16 */
		const float d = f16_to_f32(h);
		o[0] = (uint8_t)h;
		o[1] = (uint8_t)(h >> 8);
		for (int j = 0; j < QUANT_BLOCK; j++) {
			float r = d > 0 ? src[j] / d : 0;
			r = r > 127 ? 127 : r < -127 ? -127 : r == r ? r : 0;
			o[2 + j] = (uint8_t)(int8_t)roundf(r);
		}
	}
}
