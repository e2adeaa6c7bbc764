/* Linear layers through cuBLASLt; weights are (OC,C) as in torch.nn.Linear.
 *
 * cuBLASLt is column-major: a row-major (R,K) matrix is the column-major
 * (K,R) matrix with leading dimension K. So out (N,OC) = inp (N,C) @ w^T is,
 * column-major, out^T (OC,N) = w^T (OC,C) @ inp^T (C,N): A = w transposed,
 * B = inp as it is, m = OC, n = N, k = C. */
#include "cuda.h"

/* dbias and the norm weight gradients: one block owns COLS columns, its
 * ROWS thread rows stride the rows; each column's ROWS partial sums are
 * added in a fixed order by one thread */
#define COLS 32
#define ROWS 16

/* D (m,n) = alpha * op(A) @ op(B) + beta * D, column-major, fp32; with bias
 * (m), D += bias broadcast over the columns (the cuBLASLt bias epilogue).
 * With aux (the GELU epilogue): aux (m,n), leading dimension ldd, receives
 * the product (plus bias) and D its GELU. */
typedef struct {
	int transa, transb, m, n, k;
	const float *A;
	int lda;
	const float *B;
	int ldb;
	float beta;
	float *D;
	int ldd;
	const float *bias;
	float *aux;
} gemm_args;

/* the epilogues lt_matmul asks cuBLASLt for */
enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_GELU = 2 };

/* the largest power of two, at most 256, that divides p's address: what
 * cuBLASLt may assume about it */
static uint32_t alignment(const void *p)
{
	uint32_t a = 256;
	while (a > 4 && (uintptr_t)p % a)
		a >>= 1;
	return a;
}

/* out (rows,cols), leading dimension ld, column-major: += bias (rows) per column */
__global__ void add_bias_kernel(float *out, const float *bias, int rows, int cols, int ld)
{
	size_t n = (size_t)rows * cols;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		int r = (int)(i % rows);
		size_t c = i / rows;
		out[c * ld + r] += bias[r];
	}
}

/* One cuBLASLt product with epilogue epi; returns 0 when cuBLASLt has no
 * algorithm for it (only asked with an epilogue, which then falls back). */
static int lt_matmul(const gemm_args *g, int epi)
{
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulPreference_t pref;
	const cublasComputeType_t compute =
		pp_cuda.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
	const cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
	const cublasOperation_t tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
	PP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
	PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
	PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
	if (epi != EPI_NONE) {
		const cublasLtEpilogue_t e =
			epi == EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS
			: g->bias	? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
					: CUBLASLT_EPILOGUE_GELU_AUX;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
							       &e, sizeof e));
	}
	if (epi != EPI_NONE && g->bias) {
		const cudaDataType_t bt = CUDA_R_32F;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
							       &g->bias, sizeof g->bias));
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
	}
	if (epi == EPI_GELU) {
		/* the GELU input, laid out as D; its type defaults to D's (fp32) */
		const int64_t ld = g->ldd;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux));
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
							       &ld, sizeof ld));
	}
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, g->transa ? g->k : g->m,
						   g->transa ? g->m : g->k, g->lda));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, g->transb ? g->n : g->k,
						   g->transb ? g->k : g->n, g->ldb));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, g->m, g->n, g->ldd));

	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	const uint64_t ws = pp_cuda.workspace_bytes;
	const uint32_t al_a = alignment(g->A), al_b = alignment(g->B), al_d = alignment(g->D);
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));

	/* The heuristic's first choice depends on the sizes, layouts and
	 * alignments only, and cuBLASLt's kernels are deterministic (their
	 * split-k reductions included): the same call gives the same bits. */
	cublasLtMatmulHeuristicResult_t h;
	int found = 0;
	cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(pp_cuda.lt, desc, la, lb, ld, ld, pref, 1,
							   &h, &found);
	if (st != CUBLAS_STATUS_NOT_SUPPORTED)
		PP_CUBLAS_CHECK(st);
	int ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
	if (ok) {
		const float alpha = 1;
		PP_CUBLAS_CHECK(cublasLtMatmul(pp_cuda.lt, desc, &alpha, g->A, la, g->B, lb, &g->beta,
					       g->D, ld, g->D, ld, &h.algo, pp_cuda.workspace,
					       pp_cuda.workspace_bytes, pp_cuda.stream));
		PP_CUDA_LAUNCHED("cublasLtMatmul");
	}
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
	PP_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
	if (!ok && epi == EPI_NONE) {
		char why[160];
		snprintf(why, sizeof why, "no cuBLASLt algorithm for m=%d n=%d k=%d (%s%s)", g->m,
			 g->n, g->k, g->transa ? "T" : "N", g->transb ? "T" : "N");
		pp_cuda_fatal(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", why);
	}
	return ok;
}

static void gemm(const gemm_args *g)
{
	PP_CUDA_REQUIRE(pp_cuda.lt, "the CUDA backend is used before pp_cuda_init");
	if (g->m <= 0 || g->n <= 0)
		return;
	if (g->k <= 0) {
		/* an empty sum: D = beta * D (+ bias); on pp_cuda.stream, as a
		 * matmul_fwd inside a recorded decoding step must be (cudaMemset
		 * would use the legacy stream, which breaks the capture) */
		if (g->beta == 0)
			for (int c = 0; c < g->n; c++)
				PP_CUDA_CHECK(cudaMemsetAsync(g->D + (size_t)c * g->ldd, 0,
							      sizeof(float) * g->m, pp_cuda.stream));
	} else if (g->bias && alignment(g->bias) >= 16 && lt_matmul(g, EPI_BIAS)) {
		/* the epilogue only for a 16-byte aligned bias: cuBLASLt takes no
		 * alignment preference for it, so play safe; else the kernel below */
		return;
	} else {
		lt_matmul(g, EPI_NONE);
	}
	if (g->bias) {
		size_t n = (size_t)g->m * g->n;
		add_bias_kernel<<<pp_cuda_blocks(n, 256), 256, 0, pp_cuda.stream>>>(g->D, g->bias, g->m,
										    g->n, g->ldd);
		PP_CUDA_LAUNCHED("add_bias_kernel");
	}
}

/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC) */
void pp_cuda_matmul_fwd(pp_real *out, const pp_real *inp, const pp_real *w, const pp_real *bias,
			int N, int C, int OC)
{
	gemm_args g = {.transa = 1, .transb = 0, .m = OC, .n = N, .k = C, .A = w, .lda = C,
		       .B = inp, .ldb = C, .beta = 0, .D = out, .ldd = OC, .bias = bias, .aux = NULL};
	gemm(&g);
}

/* pre (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC); out (N,OC) = gelu(pre).
 * cuBLASLt's GELU_AUX(_BIAS) epilogue writes both in one product. It wants
 * the GELU input's leading dimension (OC) divisible by 8; the pointers are
 * asked 16-byte aligned, as for the bias epilogue. Otherwise, or when
 * cuBLASLt has no algorithm, the product and then the GELU kernel. */
void pp_cuda_matmul_gelu_fwd(pp_real *out, pp_real *pre, const pp_real *inp, const pp_real *w,
			     const pp_real *bias, int N, int C, int OC)
{
	PP_CUDA_REQUIRE(pp_cuda.lt, "the CUDA backend is used before pp_cuda_init");
	if (N <= 0 || OC <= 0)
		return;
	gemm_args g = {.transa = 1, .transb = 0, .m = OC, .n = N, .k = C, .A = w, .lda = C,
		       .B = inp, .ldb = C, .beta = 0, .D = out, .ldd = OC, .bias = bias, .aux = pre};
	if (C > 0 && OC % 8 == 0 && alignment(pre) >= 16 && alignment(out) >= 16 &&
	    (!bias || alignment(bias) >= 16) && lt_matmul(&g, EPI_GELU))
		return;
	pp_cuda_matmul_fwd(pre, inp, w, bias, N, C, OC);
	pp_cuda_gelu_fwd(out, pre, (size_t)N * OC);
}

enum { COLSUM_PLAIN = 0, COLSUM_RMS = 1, COLSUM_LN = 2 };

/* Column sums over rows n of (N,C) matrices, per mode:
 *   PLAIN: dst[c] += sum_n a[n,c]
 *   RMS:   dst[c] += sum_n a[n,c] * x[n,c] * rstd[n]
 *   LN:    dst[c] += sum_n a[n,c] * ((x[n,c] - mean[n]) * rstd[n]);
 *          dst2[c] (if not NULL) += sum_n a[n,c]
 * grid (ceil(C/COLS)), block (COLS, ROWS). Column c's sum is ROWS partials
 * over fixed row sets, added in row order by one thread: no atomics. */
__global__ void colsum_kernel(float *dst, float *dst2, const float *a, const float *x,
			      const float *mean, const float *rstd, int N, int C, int mode)
{
	__shared__ float part[2][ROWS][COLS + 1];
	const int c = blockIdx.x * COLS + threadIdx.x;
	float acc = 0, acc2 = 0;
	if (c < C)
		for (int n = threadIdx.y; n < N; n += ROWS) {
			const size_t i = (size_t)n * C + c;
			if (mode == COLSUM_PLAIN) {
				acc += a[i];
			} else if (mode == COLSUM_RMS) {
				acc += a[i] * x[i] * rstd[n];
			} else {
				acc += a[i] * ((x[i] - mean[n]) * rstd[n]);
				acc2 += a[i];
			}
		}
	part[0][threadIdx.y][threadIdx.x] = acc;
	part[1][threadIdx.y][threadIdx.x] = acc2;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float s = 0, s2 = 0;
		for (int r = 0; r < ROWS; r++) {
			s += part[0][r][threadIdx.x];
			s2 += part[1][r][threadIdx.x];
		}
		dst[c] += s;
		if (mode == COLSUM_LN && dst2)
			dst2[c] += s2;
	}
}

void pp_cuda_colsum(pp_real *dst, const pp_real *src, int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	colsum_kernel<<<(C + COLS - 1) / COLS, dim3(COLS, ROWS)>>>(dst, NULL, src, NULL, NULL, NULL,
								   N, C, COLSUM_PLAIN);
	PP_CUDA_LAUNCHED("colsum_kernel");
}

/* dinp (N,C) = dout (N,OC) @ w (OC,C); dw (OC,C) += dout^T @ inp (N,C);
 * dbias (OC) += sum over N of dout */
void pp_cuda_matmul_bwd(pp_real *dinp, pp_real *dw, pp_real *dbias, const pp_real *dout,
			const pp_real *inp, const pp_real *w, int N, int C, int OC)
{
	if (dinp) {
		/* column-major dinp^T (C,N) = w^T (C,OC) @ dout^T (OC,N) */
		gemm_args g = {.transa = 0, .transb = 0, .m = C, .n = N, .k = OC, .A = w, .lda = C,
			       .B = dout, .ldb = OC, .beta = 0, .D = dinp, .ldd = C, .bias = NULL, .aux = NULL};
		gemm(&g);
	}
	if (dw) {
		/* column-major dw^T (C,OC) += inp^T (C,N) @ dout (N,OC) */
		gemm_args g = {.transa = 0, .transb = 1, .m = C, .n = OC, .k = N, .A = inp, .lda = C,
			       .B = dout, .ldb = OC, .beta = 1, .D = dw, .ldd = C, .bias = NULL, .aux = NULL};
		gemm(&g);
	}
	if (dbias)
		pp_cuda_colsum(dbias, dout, N, OC);
}

void pp_cuda_colsum_rms(pp_real *dw, const pp_real *dout, const pp_real *x, const pp_real *rstd,
			int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	colsum_kernel<<<(C + COLS - 1) / COLS, dim3(COLS, ROWS)>>>(dw, NULL, dout, x, NULL, rstd, N,
								   C, COLSUM_RMS);
	PP_CUDA_LAUNCHED("colsum_kernel");
}

void pp_cuda_colsum_ln(pp_real *dw, pp_real *db, const pp_real *dout, const pp_real *x,
		       const pp_real *mean, const pp_real *rstd, int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	colsum_kernel<<<(C + COLS - 1) / COLS, dim3(COLS, ROWS)>>>(dw, db, dout, x, mean, rstd, N, C,
								   COLSUM_LN);
	PP_CUDA_LAUNCHED("colsum_kernel");
}
