/* GGUF's element types and their fp32 conversions (gguf_quant.h). */
#include "gguf_quant.h"

#include <math.h>
#include <string.h>

static const gguf_type types[] = {
	{GGML_F32, "F32", 1, 4, TIO_F32},      {GGML_F16, "F16", 1, 2, TIO_F16},
	{GGML_BF16, "BF16", 1, 2, TIO_BF16},   {GGML_F64, "F64", 1, 8, TIO_F64},
	{GGML_Q8_0, "Q8_0", 32, 34, TIO_Q8_0}, {GGML_Q4_0, "Q4_0", 32, 18, TIO_Q4_0},
	{GGML_Q4_1, "Q4_1", 32, 20, TIO_Q4_1},
};

const gguf_type *gguf_type_of(uint32_t id)
{
	for (size_t i = 0; i < sizeof types / sizeof *types; i++)
		if (types[i].id == id)
			return &types[i];
	return NULL;
}

const gguf_type *gguf_type_for(tio_dtype d)
{
	if (d != TIO_F32 && d != TIO_F16 && d != TIO_BF16 && d != TIO_Q8_0)
		return NULL;
	for (size_t i = 0; i < sizeof types / sizeof *types; i++)
		if (types[i].dtype == d)
			return &types[i];
	return NULL;
}

const char *gguf_type_other_name(uint32_t id)
{
	/* ggml.h's enum ggml_type; NULL: ids never used or since removed */
	static const char *const names[] = {
		"F32",     "F16",     "Q4_0",   "Q4_1",  NULL,    NULL,   "Q5_0",   "Q5_1",
		"Q8_0",    "Q8_1",    "Q2_K",   "Q3_K",  "Q4_K",  "Q5_K", "Q6_K",   "Q8_K",
		"IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
		"I8",      "I16",     "I32",    "I64",   "F64",   "IQ1_M", "BF16",  NULL,
		NULL,      NULL,      "TQ1_0",  "TQ2_0", NULL,    NULL,   NULL,     "MXFP4",
	};
	return id < sizeof names / sizeof *names ? names[id] : NULL;
}

/* ---- fp16 and bf16 ---- */

float gguf_f16_to_f32(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1F, man = h & 0x3FF;
	uint32_t bits;
	if (exp == 0) { /* zero or subnormal: man * 2^-24 */
		float f = (float)man * 0x1p-24f;
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7F800000u | man << 13;
	else
		bits = sign | (exp + 112) << 23 | man << 13;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t gguf_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	const uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	x &= 0x7FFFFFFFu;
	if (x > 0x7F800000u) /* NaN: a quiet one, keeping the top payload bits */
		return (uint16_t)(sign | 0x7E00 | (x >> 13 & 0x3FF));
	if (x >= 0x477FF000u) /* 65520 and up round to infinity */
		return sign | 0x7C00;
	if (x < 0x38800000u) { /* below 2^-14: a subnormal, in units of 2^-24 */
		float a;
		memcpy(&a, &x, 4);
		return (uint16_t)(sign | (uint16_t)rintf(a * 0x1p24f));
	}
	/* rebias the exponent (127 - 15 = 112) and round the 13 dropped bits
	 * to nearest even; a carry moves into the exponent as it should */
	return (uint16_t)(sign | (x + 0xC8000FFFu + (x >> 13 & 1)) >> 13);
}

float gguf_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t gguf_f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)(x >> 16 | 0x40);
	return (uint16_t)((x + 0x7FFFu + (x >> 16 & 1)) >> 16);
}

/* ---- blocks ---- */

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

void gguf_decode(const gguf_type *t, const void *src, float *dst, int64_t n)
{
	const uint8_t *s = src;
	switch (t->id) {
	case GGML_F32:
		memcpy(dst, s, (size_t)n * 4);
		break;
	case GGML_F64:
		for (int64_t i = 0; i < n; i++) {
			double v;
			memcpy(&v, s + 8 * i, 8);
			dst[i] = (float)v;
		}
		break;
	case GGML_F16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = gguf_f16_to_f32(le16(s + 2 * i));
		break;
	case GGML_BF16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = gguf_bf16_to_f32(le16(s + 2 * i));
		break;
	case GGML_Q8_0:
		for (int64_t b = 0; b < n / 32; b++, s += 34, dst += 32) {
			const float d = gguf_f16_to_f32(le16(s));
			for (int j = 0; j < 32; j++)
				dst[j] = d * (float)(int8_t)s[2 + j];
		}
		break;
	case GGML_Q4_0:
		for (int64_t b = 0; b < n / 32; b++, s += 18, dst += 32) {
			const float d = gguf_f16_to_f32(le16(s));
			for (int j = 0; j < 16; j++) {
				dst[j] = d * (float)((s[2 + j] & 15) - 8);
				dst[j + 16] = d * (float)((s[2 + j] >> 4) - 8);
			}
		}
		break;
	case GGML_Q4_1:
		for (int64_t b = 0; b < n / 32; b++, s += 20, dst += 32) {
			const float d = gguf_f16_to_f32(le16(s)), m = gguf_f16_to_f32(le16(s + 2));
			for (int j = 0; j < 16; j++) {
				dst[j] = d * (float)(s[4 + j] & 15) + m;
				dst[j + 16] = d * (float)(s[4 + j] >> 4) + m;
			}
		}
		break;
	}
}

void gguf_encode(const gguf_type *t, const float *src, void *dst, int64_t n)
{
	uint8_t *o = dst;
	switch (t->id) {
	case GGML_F32:
		memcpy(o, src, (size_t)n * 4);
		break;
	case GGML_F16:
		for (int64_t i = 0; i < n; i++)
			put16(o + 2 * i, gguf_f32_to_f16(src[i]));
		break;
	case GGML_BF16:
		for (int64_t i = 0; i < n; i++)
			put16(o + 2 * i, gguf_f32_to_bf16(src[i]));
		break;
	case GGML_Q8_0:
		for (int64_t b = 0; b < n / 32; b++, o += 34, src += 32) {
			float amax = 0;
			for (int j = 0; j < 32; j++)
				amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax;
			uint16_t h = gguf_f32_to_f16(amax / 127);
			if ((h & 0x7C00) == 0x7C00)
				h = 0x7BFF; /* the largest finite fp16 */
			const float d = gguf_f16_to_f32(h);
			put16(o, h);
			for (int j = 0; j < 32; j++) {
				float r = d > 0 ? src[j] / d : 0;
				r = r > 127 ? 127 : r < -127 ? -127 : r == r ? r : 0;
				o[2 + j] = (uint8_t)(int8_t)roundf(r);
			}
		}
		break;
	}
}
