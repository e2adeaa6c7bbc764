/* MLP activations: gated (SwiGLU, GeGLU) and plain GELU. */
#include "cpu.h"

/* elements per task of the plain GELU */
#define SPAN 4096

#define GELU_K ((pp_real)0.7978845608028654) /* sqrt(2/pi) */
#define GELU_C ((pp_real)0.044715)

static inline pp_real act_fwd(pp_real x, int act)
{
	if (act == PP_ACT_GELU_TANH)
		return (pp_real)0.5 * x * (1 + pp_cpu_tanh(GELU_K * (x + GELU_C * x * x * x)));
	return x / (1 + pp_cpu_exp(-x)); /* SiLU */
}

/* d act(x) / dx */
static inline pp_real act_grad(pp_real x, int act)
{
	if (act == PP_ACT_GELU_TANH) {
		pp_real t = pp_cpu_tanh(GELU_K * (x + GELU_C * x * x * x));
		return (pp_real)0.5 * (1 + t) +
		       (pp_real)0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
	}
	pp_real s = 1 / (1 + pp_cpu_exp(-x));
	return s * (1 + x * (1 - s));
}

/* out (n) = act(x) * up, or act(x) where up is NULL */
static inline void act_fwd_loop(pp_real *out, const pp_real *x, const pp_real *up, size_t n,
				int act)
{
	if (up)
		for (size_t i = 0; i < n; i++)
			out[i] = act_fwd(x[i], act) * up[i];
	else
		for (size_t i = 0; i < n; i++)
			out[i] = act_fwd(x[i], act);
}

/* dx (n) = dout * up * act'(x) and dup (n) = dout * act(x); where up is NULL,
 * dx = dout * act'(x) */
static inline void act_bwd_loop(pp_real *dx, pp_real *dup, const pp_real *dout, const pp_real *x,
				const pp_real *up, size_t n, int act)
{
	if (up)
		for (size_t i = 0; i < n; i++) {
			dx[i] = dout[i] * up[i] * act_grad(x[i], act);
			dup[i] = dout[i] * act_fwd(x[i], act);
		}
	else
		for (size_t i = 0; i < n; i++)
			dx[i] = dout[i] * act_grad(x[i], act);
}

/* The loops above with act a constant, so that each vectorises branch-free */
static PP_CPU_CLONES void act_fwd_span(pp_real *out, const pp_real *x, const pp_real *up, size_t n,
				       int act)
{
	if (act == PP_ACT_GELU_TANH)
		act_fwd_loop(out, x, up, n, PP_ACT_GELU_TANH);
	else
		act_fwd_loop(out, x, up, n, PP_ACT_SILU);
}

static PP_CPU_CLONES void act_bwd_span(pp_real *dx, pp_real *dup, const pp_real *dout,
				       const pp_real *x, const pp_real *up, size_t n, int act)
{
	if (act == PP_ACT_GELU_TANH)
		act_bwd_loop(dx, dup, dout, x, up, n, PP_ACT_GELU_TANH);
	else
		act_bwd_loop(dx, dup, dout, x, up, n, PP_ACT_SILU);
}

/* out (N,F) = act(gate) * up with gu (N,2F) = [gate | up] per row */
void pp_cpu_glu_fwd(pp_act *out_, const pp_act *gu_, int N, int F, int act)
{
	pp_real *out = out_;
	const pp_real *gu = gu_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *gate = gu + (size_t)n * 2 * F;
		act_fwd_span(out + (size_t)n * F, gate, gate + F, F, act);
	}
}

/* dgu (N,2F) = [dout * up * act'(gate) | dout * act(gate)]; dout (N,F) */
void pp_cpu_glu_bwd(pp_act *dgu_, const pp_act *dout_, const pp_act *gu_, int N, int F, int act)
{
	pp_real *dgu = dgu_;
	const pp_real *dout = dout_;
	const pp_real *gu = gu_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *gate = gu + (size_t)n * 2 * F;
		pp_real *dgate = dgu + (size_t)n * 2 * F;
		act_bwd_span(dgate, dgate + F, dout + (size_t)n * F, gate, gate + F, F, act);
	}
}

void pp_cpu_gelu_fwd(pp_act *out_, const pp_act *x_, size_t n)
{
	pp_real *out = out_;
	const pp_real *x = x_;
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i += SPAN)
		act_fwd_span(out + i, x + i, NULL, n - i < SPAN ? n - i : SPAN, PP_ACT_GELU_TANH);
}

void pp_cpu_gelu_bwd(pp_act *dx_, const pp_act *dout_, const pp_act *x_, size_t n)
{
	pp_real *dx = dx_;
	const pp_real *dout = dout_;
	const pp_real *x = x_;
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i += SPAN)
		act_bwd_span(dx + i, NULL, dout + i, x + i, NULL, n - i < SPAN ? n - i : SPAN,
			     PP_ACT_GELU_TANH);
}

/* pre (N,OC) = inp (N,C) @ w (OC,C)^T + bias; out (N,OC) = gelu(pre) */
void pp_cpu_matmul_gelu_fwd(pp_act *out, pp_act *pre, const pp_act *inp, const pp_act *w,
			    const pp_act *bias, int N, int C, int OC)
{
	pp_cpu_matmul_fwd(pre, inp, w, bias, N, C, OC);
	pp_cpu_gelu_fwd(out, pre, (size_t)N * OC);
}

/* dpre (N,C) = (dout (N,OC) @ w) * gelu'(pre); dw, dbias as matmul_bwd */
void pp_cpu_gelu_matmul_bwd(pp_act *dpre, pp_real *dw, pp_real *dbias, const pp_act *dout,
			    const pp_act *inp, const pp_act *pre, const pp_act *w, int N, int C,
			    int OC)
{
	pp_cpu_matmul_bwd(dpre, dw, dbias, dout, inp, w, N, C, OC);
	if (dpre)
		pp_cpu_gelu_bwd(dpre, dpre, pre, (size_t)N * C);
}
