/* The CUDA backend's per-op table (kernels/cuda/profile.cu, written at exit
 * under PP_CUDA_PROFILE=1): a header line "pp: cuda profile ...", a line of
 * column names, then one row per op, "ms share% calls us/call op", largest
 * first. Read from any text that holds it (a log, bench/gpu.sh --profile's
 * output), for pp-init --calibrate (calibrate.h). */
#ifndef PP_SIM_OPTABLE_H
#define PP_SIM_OPTABLE_H

#include <stdbool.h>

#include "../base/error.h"

typedef struct {
	double ms, us_per_call; /* its time in all, and per call */
	long calls;
	bool product;       /* a cuBLASLt product: "cublasLtMatmul XY m=M n=N k=K[ fp8]..." */
	bool fp8;           /* on FP8 tensor cores */
	int m, n, k;        /* a product's shape */
	bool attention_fwd; /* attention's forward: the plain kernel's or cuDNN's */
} sim_op;

typedef struct {
	sim_op *ops;
	int n;
	double total_ms; /* of every row */
} sim_optable;

/* path holds a per-op table (its header line). */
bool sim_is_optable(const char *path);

/* The first table in path: its rows, up to the first line that is not one.
 * PP_EUSAGE naming the line for a product row without its shape, or for no
 * table at all. */
int sim_optable_read(const char *path, sim_optable *t, pp_err *e);

void sim_optable_free(sim_optable *t);

#endif
