/* IEEE half (F16) and bfloat16 (BF16) to and from float, rounding to
 * nearest even as torch does (NaN stays NaN, overflow goes to infinity). */
#ifndef PP_KERNELS_HALFFLOAT_H
#define PP_KERNELS_HALFFLOAT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float f16_to_f32(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	float f;
	if (exp == 0) {
		f = ldexpf((float)man, -24); /* zero or subnormal */
		return sign ? -f : f;
	}
	uint32_t bits = exp == 31 ? sign | 0x7f800000 | man << 13
				  : sign | (exp + 112) << 23 | man << 13;
	memcpy(&f, &bits, sizeof f);
	return f;
}

static inline uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	const uint32_t ax = x & 0x7fffffff;
	if (ax > 0x7f800000)
		return sign | 0x7e00; /* NaN */
	if (ax >= 0x477ff000)
		return sign | 0x7c00; /* 65520 and up round to infinity */
	if (ax < 0x38800000) {        /* below 2^-14: subnormal */
		float v;
		memcpy(&v, &ax, sizeof v);
		return sign | (uint16_t)lrintf(v * 16777216.0f);
	}
	return sign | (uint16_t)((ax + 0xfff + ((ax >> 13) & 1) - 0x38000000) >> 13);
}

static inline float bf16_to_f32(uint16_t b)
{
	uint32_t bits = (uint32_t)b << 16;
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40); /* a quiet NaN */
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
