/* GGUF's element types and their fp32 conversions (gguf_quant.h). */
#include "gguf_quant.h"

#include <math.h>
#include <string.h>

#include "../../kernels/halffloat.h"
#include "../../kernels/quant.h"

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
		"F32",     "F16",    "Q4_0",    "Q4_1",  NULL,     NULL,    "Q5_0",  "Q5_1",
		"Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
		"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
		"I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  NULL,
		NULL,      NULL,     "TQ1_0",   "TQ2_0", NULL,     NULL,    NULL,    "MXFP4",
	};
	return id < sizeof names / sizeof *names ? names[id] : NULL;
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
			dst[i] = f16_to_f32(le16(s + 2 * i));
		break;
	case GGML_BF16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = bf16_to_f32(le16(s + 2 * i));
		break;
	case GGML_Q8_0:
		quant_decode_q8_0(s, dst, n);
		break;
	case GGML_Q4_0:
		quant_decode_q4_0(s, dst, n);
		break;
	case GGML_Q4_1:
		quant_decode_q4_1(s, dst, n);
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
			put16(o + 2 * i, f32_to_f16(src[i]));
		break;
	case GGML_BF16:
		for (int64_t i = 0; i < n; i++)
			put16(o + 2 * i, f32_to_bf16(src[i]));
		break;
	case GGML_Q8_0:
		quant_encode_q8_0(src, o, n);
		break;
	}
}
