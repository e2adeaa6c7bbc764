/* Device memory of the CPU backend is host memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* cache-line (and AVX-512 vector) alignment */
#define ALIGN 64

void *pp_cpu_alloc(size_t bytes)
{
	/* aligned_alloc wants a multiple of the alignment, and 0 bytes would be
	 * allowed to return NULL, which callers read as failure */
	size_t rounded = bytes ? (bytes + ALIGN - 1) / ALIGN * ALIGN : ALIGN;
	if (rounded < bytes)
		return NULL;
	void *p = aligned_alloc(ALIGN, rounded);
	if (p)
		memset(p, 0, rounded);
	return p;
}

void pp_cpu_free(void *p) { free(p); }

void pp_cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

void pp_cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }

void pp_cpu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
		   size_t rows)
{
	for (size_t i = 0; i < rows; i++)
		memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
}

/* The compute type is pp_real: conversions are copies. */
void pp_cpu_to_act(pp_act *dst, const pp_real *src, size_t n)
{
	memcpy(dst, src, n * sizeof(pp_real));
}

void pp_cpu_act_to_host(pp_real *host_dst, const pp_act *src, size_t n)
{
	memcpy(host_dst, src, n * sizeof(pp_real));
}

void *pp_cpu_scratch(size_t bytes)
{
	void *p = pp_cpu_alloc(bytes);
	if (!p) {
		fprintf(stderr, "pp: cpu kernel: out of memory allocating %zu bytes of scratch\n",
			bytes);
		abort();
	}
	return p;
}
