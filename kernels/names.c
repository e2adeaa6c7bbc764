/* The names of devices and compute types (ops.h), apart from the backend
 * tables so that what parses them (the config) needs no backend. */
#include "ops.h"

const char *const pp_device_names[] = {"cpu", "cuda", NULL};
const char *const pp_type_names[] = {"fp32", "bf16", NULL};

const char *pp_device_name(int device)
{
	return device == PP_DEVICE_CPU || device == PP_DEVICE_CUDA ? pp_device_names[device] : "?";
}

const char *pp_type_name(int type)
{
	return type == PP_TYPE_REAL || type == PP_TYPE_BF16 ? pp_type_names[type] : "?";
}
