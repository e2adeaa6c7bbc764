/* Row norms over the last dimension. Statistics accumulate in double; the
 * parameter gradients are summed over rows with per-thread copies
 * (OpenMP array reductions), which add into the caller's dw and db. */
#include <math.h>

#include "cpu.h"

/* out (N,C) = x * rstd * (offset + w); rstd (N) */
void pp_cpu_rmsnorm_fwd(pp_real *out, pp_real *rstd, const pp_real *x, const pp_real *w,
			pp_real eps, pp_real offset, int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *xn = x + (size_t)n * C;
		pp_real *on = out + (size_t)n * C;
		double ss = 0;
		for (int c = 0; c < C; c++)
			ss += (double)xn[c] * xn[c];
		pp_real r = (pp_real)(1 / sqrt(ss / C + eps));
		for (int c = 0; c < C; c++)
			on[c] = xn[c] * r * (offset + w[c]);
		rstd[n] = r;
	}
}

/* dx (N,C) += d out / d x; dw (C) += sum_n dout * x * rstd */
void pp_cpu_rmsnorm_bwd(pp_real *dx, pp_real *dw, const pp_real *dout, const pp_real *x,
			const pp_real *w, const pp_real *rstd, pp_real offset, int N, int C)
{
#pragma omp parallel for schedule(static) reduction(+ : dw[:C])
	for (int n = 0; n < N; n++) {
		const pp_real *xn = x + (size_t)n * C, *gn = dout + (size_t)n * C;
		pp_real *dxn = dx + (size_t)n * C, r = rstd[n];
		/* d rstd / d x_c = -rstd^3 x_c / C */
		double dot = 0;
		for (int c = 0; c < C; c++)
			dot += (double)gn[c] * (offset + w[c]) * xn[c];
		pp_real k = (pp_real)(dot * r * r * r / C);
		for (int c = 0; c < C; c++) {
			dxn[c] += r * (offset + w[c]) * gn[c] - k * xn[c];
			dw[c] += gn[c] * xn[c] * r;
		}
	}
}

/* out (N,C) = (x - mean) * rstd * w + b; mean, rstd (N) */
void pp_cpu_layernorm_fwd(pp_real *out, pp_real *mean, pp_real *rstd, const pp_real *x,
			  const pp_real *w, const pp_real *b, pp_real eps, int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const pp_real *xn = x + (size_t)n * C;
		pp_real *on = out + (size_t)n * C;
		double s = 0, ss = 0;
		for (int c = 0; c < C; c++)
			s += xn[c];
		double mu = s / C;
		/* two passes: no cancellation when |mean| >> std */
		for (int c = 0; c < C; c++)
			ss += (xn[c] - mu) * (xn[c] - mu);
		pp_real m = (pp_real)mu, r = (pp_real)(1 / sqrt(ss / C + eps));
		for (int c = 0; c < C; c++)
			on[c] = (xn[c] - m) * r * w[c] + b[c];
		mean[n] = m;
		rstd[n] = r;
	}
}

/* dx (N,C) += d out / d x; dw (C) += sum_n dout * xhat; db (C) += sum_n dout */
void pp_cpu_layernorm_bwd(pp_real *dx, pp_real *dw, pp_real *db, const pp_real *dout,
			  const pp_real *x, const pp_real *w, const pp_real *mean,
			  const pp_real *rstd, int N, int C)
{
#pragma omp parallel for schedule(static) reduction(+ : dw[:C], db[:C])
	for (int n = 0; n < N; n++) {
		const pp_real *xn = x + (size_t)n * C, *gn = dout + (size_t)n * C;
		pp_real *dxn = dx + (size_t)n * C, m = mean[n], r = rstd[n];
		/* with g = dout * w and xhat = (x - mean) * rstd:
		 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) */
		double sg = 0, sgx = 0;
		for (int c = 0; c < C; c++) {
			pp_real g = gn[c] * w[c];
			sg += g;
			sgx += g * ((xn[c] - m) * r);
		}
		pp_real mg = (pp_real)(sg / C), mgx = (pp_real)(sgx / C);
		for (int c = 0; c < C; c++) {
			pp_real xhat = (xn[c] - m) * r;
			dxn[c] += r * (gn[c] * w[c] - mg - xhat * mgx);
			dw[c] += gn[c] * xhat;
			db[c] += gn[c];
		}
	}
}
