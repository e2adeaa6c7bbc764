/* Backend lookup by device name and compute type. */
#include <stdbool.h>
#include <string.h>

#include "ops.h"

const pp_ops *pp_ops_find(const char *device, const char *dtype)
{
	if (!device || !dtype)
		return NULL;
	const bool fp32 = !strcmp(dtype, "fp32"), bf16 = !strcmp(dtype, "bf16");
	if (!strcmp(device, "cpu"))
		return fp32 ? &pp_ops_cpu : NULL;
#ifdef PP_CUDA
	if (!strcmp(device, "cuda"))
		return fp32 ? &pp_ops_cuda : bf16 ? &pp_ops_cuda_bf16 : NULL;
#else
	(void)bf16;
#endif
	return NULL;
}
