/* FP8 products over a backend's ops (fp8mm.h). */
#include "fp8mm.h"

/* the product's scale: 1/sa times 1/sb, in fp32 as the GPU's epilogue takes it */
static pp_real unscale(float sa, float sb) { return (pp_real)((1.0f / sa) * (1.0f / sb)); }

void pp_fp8_matmul_fwd(const pp_ops *o, pp_act *out, const pp_act *xq, const pp_act *wq, float sx,
		       float sw, int N, int C, int OC)
{
	if (o->fp8_matmul && o->fp8_matmul(PP_FP8MM_FWD, out, xq, wq, sx, sw, N, C, OC))
		return;
	o->matmul_fwd(out, xq, wq, NULL, N, C, OC);
	o->scale_act(out, unscale(sx, sw), (size_t)N * OC);
}

void pp_fp8_matmul_dgrad(const pp_ops *o, pp_act *din, const pp_act *gq, const pp_act *wq, float sg,
			 float sw, int N, int C, int OC)
{
	if (o->fp8_matmul && o->fp8_matmul(PP_FP8MM_DGRAD, din, gq, wq, sg, sw, N, C, OC))
		return;
	o->matmul_bwd(din, NULL, NULL, gq, NULL, wq, N, C, OC);
	o->scale_act(din, unscale(sg, sw), (size_t)N * C);
}

void pp_fp8_matmul_wgrad(const pp_ops *o, pp_real *dw, pp_real *tmp, const pp_act *gq,
			 const pp_act *xq, float sg, float sx, int N, int C, int OC)
{
	if (o->fp8_matmul && o->fp8_matmul(PP_FP8MM_WGRAD, dw, gq, xq, sg, sx, N, C, OC))
		return;
	const size_t n = (size_t)OC * C;
	o->zero(tmp, n * sizeof(pp_real));
	o->matmul_bwd(NULL, tmp, NULL, gq, xq, NULL, N, C, OC);
	o->scale(tmp, unscale(sg, sx), n);
	o->add_real(dw, dw, tmp, n);
}
