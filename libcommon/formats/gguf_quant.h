/* GGUF's element types (ggml's): which ones pp reads and writes, their
 * block sizes, and the conversions to and from fp32. The block formats
 * (Q8_0, Q4_0, Q4_1: blocks of 32 consecutive elements of a row, ggml's
 * ne[0]) are kernels/quant.h's. */
#ifndef PP_GGUF_QUANT_H
#define PP_GGUF_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "tensorio.h"

/* ggml's type ids (the ones pp knows by name) */
enum {
	GGML_F32 = 0,
	GGML_F16 = 1,
	GGML_Q4_0 = 2,
	GGML_Q4_1 = 3,
	GGML_Q8_0 = 8,
	GGML_F64 = 28,
	GGML_BF16 = 30,
};

typedef struct {
	uint32_t id;      /* GGML_* */
	const char *name; /* "F32", "Q4_1", ... */
	int block;        /* elements per block (1 for the plain types) */
	int bytes;        /* bytes per block */
	tio_dtype dtype;
} gguf_type;

/* The type of ggml id, or NULL when pp does not read it. */
const gguf_type *gguf_type_of(uint32_t id);
/* ggml's name of a type id pp does not read ("Q5_K", "I32", ...), or NULL
 * for an id ggml never had. */
const char *gguf_type_other_name(uint32_t id);
/* The type pp writes for d (F32, F16, BF16, Q8_0), or NULL. */
const gguf_type *gguf_type_for(tio_dtype d);

/* n elements (a multiple of t->block) of type t at src into dst. */
void gguf_decode(const gguf_type *t, const void *src, float *dst, int64_t n);
/* n floats (a multiple of t->block) into type t at dst (Q8_0: as
 * quant_encode_q8_0, kernels/quant.h). */
void gguf_encode(const gguf_type *t, const float *src, void *dst, int64_t n);
/* Bytes of n elements of type t (n a multiple of t->block). */
static inline uint64_t gguf_nbytes(const gguf_type *t, int64_t n)
{
	return (uint64_t)n / (uint64_t)t->block * (uint64_t)t->bytes;
}

#endif
