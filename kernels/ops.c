/* Backend lookup by device name. */
#include <string.h>

#include "ops.h"

const pp_ops *pp_ops_find(const char *device)
{
	if (!device)
		return NULL;
	if (!strcmp(device, "cpu"))
		return &pp_ops_cpu;
#ifdef PP_CUDA
	if (!strcmp(device, "cuda"))
		return &pp_ops_cuda;
#endif
	return NULL;
}
