/* Linear layers through CBLAS; weights are (OC,C) as in torch.nn.Linear. */
#include <stdlib.h>

#include "cpu.h"

/* columns of dout summed per task in dbias: a multiple of the vector width
 * and few enough that the partial sums stay in registers */
#define BIAS_COLS 64

int pp_cpu_blas_serial_begin(void)
{
	/* openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP */
	if (openblas_get_parallel() != 1)
		return 0;
	int saved = openblas_get_num_threads();
	openblas_set_num_threads(1);
	return saved;
}

void pp_cpu_blas_serial_end(int saved)
{
	if (saved > 0)
		openblas_set_num_threads(saved);
}

/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC) */
void pp_cpu_matmul_fwd(pp_act *out_, const pp_act *inp_, const pp_act *w_, const pp_act *bias_,
		       int N, int C, int OC)
{
	pp_real *out = out_;
	const pp_real *inp = inp_;
	const pp_real *w = w_;
	const pp_real *bias = bias_;
	if (bias) {
#pragma omp parallel for schedule(static)
		for (int n = 0; n < N; n++)
			for (int o = 0; o < OC; o++)
				out[(size_t)n * OC + o] = bias[o];
	}
	pp_cpu_gemm(0, 1, N, OC, C, 1, inp, C, w, C, bias ? 1 : 0, out, OC);
}

/* out (N,OC) += bias (OC) on every row */
void pp_cpu_add_bias(pp_act *out_, const pp_act *bias_, int N, int OC)
{
	pp_real *out = out_;
	const pp_real *bias = bias_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OC; o++)
			out[(size_t)n * OC + o] += bias[o];
}

/* dinp (N,C) = dout (N,OC) @ w (OC,C); dw (OC,C) += dout^T @ inp (N,C);
 * dbias (OC) += sum over N of dout */
void pp_cpu_matmul_bwd(pp_act *dinp_, pp_real *dw, pp_real *dbias, const pp_act *dout_,
		       const pp_act *inp_, const pp_act *w_, int N, int C, int OC)
{
	pp_real *dinp = dinp_;
	const pp_real *dout = dout_;
	const pp_real *inp = inp_;
	const pp_real *w = w_;
	if (dinp)
		pp_cpu_gemm(0, 0, N, C, OC, 1, dout, OC, w, C, 0, dinp, C);
	if (dw)
		pp_cpu_gemm(1, 0, OC, C, N, 1, dout, OC, inp, C, 1, dw, C);
	if (dbias) {
		/* tasks own column blocks, so rows are read contiguously and no
		 * two threads add into the same dbias entry */
#pragma omp parallel for schedule(static)
		for (int o0 = 0; o0 < OC; o0 += BIAS_COLS) {
			int nc = OC - o0 < BIAS_COLS ? OC - o0 : BIAS_COLS;
			pp_real acc[BIAS_COLS] = {0};
			for (int n = 0; n < N; n++) {
				const pp_real *row = dout + (size_t)n * OC + o0;
				for (int o = 0; o < nc; o++)
					acc[o] += row[o];
			}
			for (int o = 0; o < nc; o++)
				dbias[o0 + o] += acc[o];
		}
	}
}
