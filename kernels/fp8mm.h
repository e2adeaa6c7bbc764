/* The FP8 products of a linear layer on any backend's ops, from inputs
 * already cast (ops->fp8_cast: FP8 values held in the compute type) and
 * the scales they were cast with (ops.h's pairs, in the backend's
 * memory); the products accumulate in fp32 and are then divided by the
 * scales, as cuBLASLt's FP8 matmuls apply their A and B scales:
 *   out (N,OC)   = (xq (N,C) @ wq (OC,C)^T) / (sx sw)
 *   din (N,C)    = (gq (N,OC) @ wq) / (sg sw)
 *   dw (OC,C)   += (gq^T @ xq) / (sg sx)   (tmp: OC*C pp_real of scratch)
 * on the backend's FP8 tensor cores where it has them (ops->fp8_matmul),
 * else as products of the FP8 values in the compute type. */
#ifndef PP_KERNELS_FP8MM_H
#define PP_KERNELS_FP8MM_H

#include "ops.h"

void pp_fp8_matmul_fwd(const pp_ops *o, pp_act *out, const pp_act *xq, const pp_act *wq,
		       const float *sx, const float *sw, int N, int C, int OC);
void pp_fp8_matmul_dgrad(const pp_ops *o, pp_act *din, const pp_act *gq, const pp_act *wq,
			 const float *sg, const float *sw, int N, int C, int OC);
void pp_fp8_matmul_wgrad(const pp_ops *o, pp_real *dw, pp_real *tmp, const pp_act *gq,
			 const pp_act *xq, const float *sg, const float *sx, int N, int C, int OC);

#endif
