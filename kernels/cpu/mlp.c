/* MLP activations: gated (SwiGLU, GeGLU) and plain GELU. */
#include <tgmath.h>

#include "cpu.h"

#define GELU_K ((pp_real)0.7978845608028654) /* sqrt(2/pi) */
#define GELU_C ((pp_real)0.044715)

static inline pp_real act_fwd(pp_real x, int act)
{
	if (act == PP_ACT_GELU_TANH)
		return (pp_real)0.5 * x * (1 + tanh(GELU_K * (x + GELU_C * x * x * x)));
	return x / (1 + exp(-x)); /* SiLU */
}

/* d act(x) / dx */
static inline pp_real act_grad(pp_real x, int act)
{
	if (act == PP_ACT_GELU_TANH) {
		pp_real t = tanh(GELU_K * (x + GELU_C * x * x * x));
		return (pp_real)0.5 * (1 + t) +
		       (pp_real)0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
	}
	pp_real s = 1 / (1 + exp(-x));
	return s * (1 + x * (1 - s));
}

/* out (N,F) = act(gate) * up with gu (N,2F) = [gate | up] per row */
void pp_cpu_glu_fwd(pp_real *out, const pp_real *gu, int N, int F, int act)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *gate = gu + (size_t)n * 2 * F, *up = gate + F;
		pp_real *o = out + (size_t)n * F;
		for (int f = 0; f < F; f++)
			o[f] = act_fwd(gate[f], act) * up[f];
	}
}

/* dgu (N,2F) = [dout * up * act'(gate) | dout * act(gate)]; dout (N,F) */
void pp_cpu_glu_bwd(pp_real *dgu, const pp_real *dout, const pp_real *gu, int N, int F, int act)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *gate = gu + (size_t)n * 2 * F, *up = gate + F, *g = dout + (size_t)n * F;
		pp_real *dgate = dgu + (size_t)n * 2 * F, *dup = dgate + F;
		for (int f = 0; f < F; f++) {
			dgate[f] = g[f] * up[f] * act_grad(gate[f], act);
			dup[f] = g[f] * act_fwd(gate[f], act);
		}
	}
}

void pp_cpu_gelu_fwd(pp_real *out, const pp_real *x, size_t n)
{
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++)
		out[i] = act_fwd(x[i], PP_ACT_GELU_TANH);
}

void pp_cpu_gelu_bwd(pp_real *dx, const pp_real *dout, const pp_real *x, size_t n)
{
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++)
		dx[i] = dout[i] * act_grad(x[i], PP_ACT_GELU_TANH);
}
