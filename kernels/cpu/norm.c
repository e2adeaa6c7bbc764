/* Row norms over the last dimension. Row statistics are sums in double
 * across blocks (PP_CPU_SUM). The parameter gradients are summed over rows in
 * per-thread partials that are added in thread order, so the result does not
 * depend on which thread finishes first (an OpenMP array reduction combines
 * in arrival order, which breaks bitwise-reproducible training). */
#include <omp.h>
#include <stdlib.h>

#include "cpu.h"

/* Partials for nt threads of nv vectors of C (dw, then db): zeroed. */
static pp_real *partials_new(int nt, int nv, int C)
{
	return pp_cpu_scratch(sizeof(pp_real) * (size_t)nt * nv * C);
}

/* dst[v] += sum over t of part[t][v], in thread order */
static void partials_add(pp_real *const dst[], const pp_real *part, int nt, int nv, int C)
{
#pragma omp parallel for schedule(static)
	for (int c = 0; c < C; c++)
		for (int v = 0; v < nv; v++) {
			pp_real acc = 0;
			for (int t = 0; t < nt; t++)
				acc += part[((size_t)t * nv + v) * C + c];
			dst[v][c] += acc;
		}
	free((void *)part);
}

/* one row: out (C) = x * rstd * (offset + w) */
static PP_CPU_CLONES pp_real rmsnorm_row(pp_real *restrict out, const pp_real *restrict x,
					 const pp_real *restrict w, pp_real eps, pp_real offset,
					 int C)
{
	double ss;
	PP_CPU_SUM(ss, c, C, x[c] * x[c]);
	pp_real r = (pp_real)(1 / sqrt(ss / C + eps));
	for (int c = 0; c < C; c++)
		out[c] = x[c] * r * (offset + w[c]);
	return r;
}

/* one row: dx (C) += d out / d x, dw (C) += dout * x * rstd */
static PP_CPU_CLONES void rmsnorm_row_bwd(pp_real *restrict dx, pp_real *restrict dw,
					  const pp_real *restrict dout, const pp_real *restrict x,
					  const pp_real *restrict w, pp_real r, pp_real offset,
					  int C)
{
	/* d rstd / d x_c = -rstd^3 x_c / C */
	double dot;
	PP_CPU_SUM(dot, c, C, dout[c] * (offset + w[c]) * x[c]);
	pp_real k = (pp_real)(dot * r * r * r / C);
	for (int c = 0; c < C; c++) {
		dx[c] += r * (offset + w[c]) * dout[c] - k * x[c];
		dw[c] += dout[c] * x[c] * r;
	}
}

/* one row: out (C) = (x - mean) * rstd * w + b */
static PP_CPU_CLONES void layernorm_row(pp_real *restrict out, pp_real *mean, pp_real *rstd,
					const pp_real *restrict x, const pp_real *restrict w,
					const pp_real *restrict b, pp_real eps, int C)
{
	double s, ss;
	PP_CPU_SUM(s, c, C, x[c]);
	pp_real m = (pp_real)(s / C);
	/* two passes: no cancellation when |mean| >> std */
	PP_CPU_SUM(ss, c, C, (x[c] - m) * (x[c] - m));
	pp_real r = (pp_real)(1 / sqrt(ss / C + eps));
	for (int c = 0; c < C; c++)
		out[c] = (x[c] - m) * r * w[c] + b[c];
	*mean = m;
	*rstd = r;
}

/* one row: dx (C) += d out / d x; dw (C) += dout * xhat; db (C) += dout */
static PP_CPU_CLONES void layernorm_row_bwd(pp_real *restrict dx, pp_real *restrict dw,
					    pp_real *restrict db, const pp_real *restrict dout,
					    const pp_real *restrict x, const pp_real *restrict w,
					    pp_real m, pp_real r, int C)
{
	/* with g = dout * w and xhat = (x - mean) * rstd:
	 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) */
	double sg, sgx;
	PP_CPU_SUM(sg, c, C, dout[c] * w[c]);
	PP_CPU_SUM(sgx, c, C, dout[c] * w[c] * ((x[c] - m) * r));
	pp_real mg = (pp_real)(sg / C), mgx = (pp_real)(sgx / C);
	for (int c = 0; c < C; c++) {
		pp_real xhat = (x[c] - m) * r;
		dx[c] += r * (dout[c] * w[c] - mg - xhat * mgx);
		dw[c] += dout[c] * xhat;
		db[c] += dout[c];
	}
}

/* out (N,C), rstd (N) */
void pp_cpu_rmsnorm_fwd(pp_act *out_, pp_real *rstd, const pp_act *x_, const pp_act *w_,
			pp_real eps, pp_real offset, int N, int C)
{
	pp_real *out = out_;
	const pp_real *x = x_;
	const pp_real *w = w_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++)
		rstd[n] = rmsnorm_row(out + (size_t)n * C, x + (size_t)n * C, w, eps, offset, C);
}

/* dx (N,C) +=, dw (C) += */
void pp_cpu_rmsnorm_bwd(pp_act *dx_, pp_real *dw, const pp_act *dout_, const pp_act *x_,
			const pp_act *w_, const pp_real *rstd, pp_real offset, int N, int C)
{
	pp_real *dx = dx_;
	const pp_real *dout = dout_;
	const pp_real *x = x_;
	const pp_real *w = w_;
	const int nt = omp_get_max_threads();
	pp_real *part = partials_new(nt, 1, C);
#pragma omp parallel num_threads(nt)
	{
		pp_real *pw = part + (size_t)omp_get_thread_num() * C;
#pragma omp for schedule(static)
		for (int n = 0; n < N; n++)
			rmsnorm_row_bwd(dx + (size_t)n * C, pw, dout + (size_t)n * C,
					x + (size_t)n * C, w, rstd[n], offset, C);
	}
	partials_add((pp_real *const[]){dw}, part, nt, 1, C);
}

/* out (N,C), mean (N), rstd (N) */
void pp_cpu_layernorm_fwd(pp_act *out_, pp_real *mean, pp_real *rstd, const pp_act *x_,
			  const pp_act *w_, const pp_act *b_, pp_real eps, int N, int C)
{
	pp_real *out = out_;
	const pp_real *x = x_;
	const pp_real *w = w_;
	const pp_real *b = b_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++)
		layernorm_row(out + (size_t)n * C, mean + n, rstd + n, x + (size_t)n * C, w, b, eps,
			      C);
}

/* dx (N,C) +=, dw (C) +=, db (C) += */
void pp_cpu_layernorm_bwd(pp_act *dx_, pp_real *dw, pp_real *db, const pp_act *dout_,
			  const pp_act *x_, const pp_act *w_, const pp_real *mean,
			  const pp_real *rstd, int N, int C)
{
	pp_real *dx = dx_;
	const pp_real *dout = dout_;
	const pp_real *x = x_;
	const pp_real *w = w_;
	const int nt = omp_get_max_threads();
	pp_real *part = partials_new(nt, 2, C);
#pragma omp parallel num_threads(nt)
	{
		pp_real *pw = part + (size_t)omp_get_thread_num() * 2 * C;
#pragma omp for schedule(static)
		for (int n = 0; n < N; n++)
			layernorm_row_bwd(dx + (size_t)n * C, pw, pw + C, dout + (size_t)n * C,
					  x + (size_t)n * C, w, mean[n], rstd[n], C);
	}
	partials_add((pp_real *const[]){dw, db}, part, nt, 2, C);
}

/* one row: r (C) = x + y; r may alias x or y (each element is read before
 * it is written), so no restrict here */
static PP_CPU_CLONES void residual_row(pp_real *r, const pp_real *x, const pp_real *y, int C)
{
#pragma omp simd
	for (int c = 0; c < C; c++)
		r[c] = x[c] + y[c];
}

/* res_out (N,C) = x + y; out (N,C), rstd (N) of res_out. Row by row the same
 * arithmetic as pp_cpu_add then pp_cpu_rmsnorm_fwd, so the same bits; the
 * norm reads its row back from cache rather than from memory. */
void pp_cpu_rmsnorm_residual_fwd(pp_act *res_out_, pp_act *out_, pp_real *rstd, const pp_act *x_,
				 const pp_act *y_, const pp_act *w_, pp_real eps, pp_real offset,
				 int N, int C)
{
	pp_real *res_out = res_out_;
	pp_real *out = out_;
	const pp_real *x = x_;
	const pp_real *y = y_;
	const pp_real *w = w_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const size_t row = (size_t)n * C;
		residual_row(res_out + row, x + row, y + row, C);
		rstd[n] = rmsnorm_row(out + row, res_out + row, w, eps, offset, C);
	}
}

/* res_out (N,C) = x + y; out (N,C), mean (N), rstd (N) of res_out, as above */
void pp_cpu_layernorm_residual_fwd(pp_act *res_out_, pp_act *out_, pp_real *mean, pp_real *rstd,
				   const pp_act *x_, const pp_act *y_, const pp_act *w_,
				   const pp_act *b_, pp_real eps, int N, int C)
{
	pp_real *res_out = res_out_;
	pp_real *out = out_;
	const pp_real *x = x_;
	const pp_real *y = y_;
	const pp_real *w = w_;
	const pp_real *b = b_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const size_t row = (size_t)n * C;
		residual_row(res_out + row, x + row, y + row, C);
		layernorm_row(out + row, mean + n, rstd + n, res_out + row, w, b, eps, C);
	}
}
