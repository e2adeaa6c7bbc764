/* FP8 products over a backend's ops (fp8mm.h). */
#include "fp8mm.h"

void pp_fp8_matmul_fwd(const pp_ops *o, pp_act *out, const pp_act *xq, const pp_act *wq,
		       const float *sx, const float *sw, int N, int C, int OC)
{
	if (o->fp8_matmul && o->fp8_matmul(PP_FP8MM_FWD, out, xq, wq, sx, sw, N, C, OC))
		return;
	o->matmul_fwd(out, xq, wq, NULL, N, C, OC);
	o->fp8_unscale(out, (size_t)N * OC, 0, sx, sw);
}

void pp_fp8_matmul_dgrad(const pp_ops *o, pp_act *din, const pp_act *gq, const pp_act *wq,
			 const float *sg, const float *sw, int N, int C, int OC)
{
	if (o->fp8_matmul && o->fp8_matmul(PP_FP8MM_DGRAD, din, gq, wq, sg, sw, N, C, OC))
		return;
	o->matmul_bwd(din, NULL, NULL, gq, NULL, wq, N, C, OC);
	o->fp8_unscale(din, (size_t)N * C, 0, sg, sw);
}

void pp_fp8_matmul_wgrad(const pp_ops *o, pp_real *dw, pp_real *tmp, const pp_act *gq,
			 const pp_act *xq, const float *sg, const float *sx, int N, int C, int OC)
{
	if (o->fp8_matmul && o->fp8_matmul(PP_FP8MM_WGRAD, dw, gq, xq, sg, sx, N, C, OC))
		return;
	const size_t n = (size_t)OC * C;
	o->zero(tmp, n * sizeof(pp_real));
	o->matmul_bwd(NULL, tmp, NULL, gq, xq, NULL, N, C, OC);
	o->fp8_unscale(tmp, n, 1, sg, sx);
	o->add_real(dw, dw, tmp, n);
}
