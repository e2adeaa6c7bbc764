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

int pp_ops_select(const char *device, const char *dtype, const pp_ops **ops, pp_err *e)
{
	if ((*ops = pp_ops_find(device, dtype)))
		return 0;
	if (!pp_ops_find(device, "fp32"))
		return pp_errorf(e, PP_EUSAGE, "device=%s: this build of pp has no %s backend",
				 device, device);
	return pp_errorf(e, PP_EUSAGE, "dtype=%s: the %s backend computes in fp32 only%s", dtype,
			 device, strcmp(device, "cpu") ? "" : " (bf16 needs device=cuda)");
}
