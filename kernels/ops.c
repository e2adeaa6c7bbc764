/* Backend lookup by device and compute type. */
#include "ops.h"

const pp_ops *pp_ops_find(int device, int type)
{
	if (device == PP_DEVICE_CPU)
		return type == PP_TYPE_REAL ? &pp_ops_cpu : NULL;
#ifdef PP_CUDA
	if (device == PP_DEVICE_CUDA)
		return type == PP_TYPE_REAL   ? &pp_ops_cuda
		       : type == PP_TYPE_BF16 ? &pp_ops_cuda_bf16
					      : NULL;
#endif
	return NULL;
}

int pp_ops_select(int device, int type, const pp_ops **ops, pp_err *e)
{
	if ((*ops = pp_ops_find(device, type)))
		return 0;
	const char *dev = pp_device_name(device);
	if (!pp_ops_find(device, PP_TYPE_REAL))
		return pp_errorf(e, PP_EUSAGE, "device=%s: this build of pp has no %s backend", dev,
				 dev);
	return pp_errorf(e, PP_EUSAGE, "dtype=%s: the %s backend computes in fp32 only%s",
			 pp_type_name(type), dev,
			 device == PP_DEVICE_CPU ? " (bf16 needs device=cuda)" : "");
}
