/* Linear layers through cuBLASLt; weights are (OC,C) as in torch.nn.Linear.
 *
 * cuBLASLt is column-major: a row-major (R,K) matrix is the column-major
 * (K,R) matrix with leading dimension K. So out (N,OC) = inp (N,C) @ w^T is,
 * column-major, out^T (OC,N) = w^T (OC,C) @ inp^T (C,N): A = w transposed,
 * B = inp as it is, m = OC, n = N, k = C.
 *
 * Types, per compute type T: A, B and the products' D are T, with fp32
 * accumulation and fp32 scalars (CUBLAS_COMPUTE_32F); the bias and the GELU
 * input are T too. The weight gradient takes T operands into an fp32 C = D
 * with beta 1: parameter gradients accumulate in fp32. With T = float and
 * PP_CUDA_TF32=1 the products run on TF32 tensor cores. A batch-1 product
 * (decoding) is a matrix-vector product that cuBLASLt's heuristics give to
 * its GEMV-shaped kernels. */
#include "cuda.h"

/* dbias and the norm weight gradients: one block owns COLS columns of a
 * range of rows, its ROWS thread rows stride the range; each column's ROWS
 * partial sums are added in a fixed order by one thread */
#define COLS 32
#define ROWS 16
/* column sums of tall matrices: at most COLSUM_SPLITS row ranges of at
 * least COLSUM_SPLIT_ROWS rows each */
#define COLSUM_SPLITS 32
#define COLSUM_SPLIT_ROWS 256

/* D (m,n) = alpha * op(A) @ op(B) + beta * D, column-major, fp32; with bias
 * (m), D += bias broadcast over the columns (the cuBLASLt bias epilogue).
 * With aux (the GELU epilogue): aux (m,n), leading dimension ldd, receives
 * the product (plus bias) and D its GELU. */
typedef struct {
	int transa, transb, m, n, k;
	cudaDataType_t ab_type, d_type; /* of A and B; of D (and C, bias, aux) */
	const void *A;
	int lda;
	const void *B;
	int ldb;
	float beta;
	void *D;
	int ldd;
	const void *bias;
	void *aux;
} gemm_args;

template <typename T> static cudaDataType_t cuda_type(void)
{
	return pp_is_bf16<T>::value ? CUDA_R_16BF : CUDA_R_32F;
}

static size_t type_size(cudaDataType_t t)
{
	return t == CUDA_R_16BF ? 2 : 4;
}

/* the epilogues lt_matmul asks cuBLASLt for */
enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_GELU = 2 };

/* the largest power of two, at most 256, that divides p's address: what
 * cuBLASLt may assume about it (bf16 pointers may be only 2-byte aligned) */
static uint32_t alignment(const void *p)
{
	uint32_t a = 256;
	while (a > 1 && (uintptr_t)p % a)
		a >>= 1;
	return a;
}

/* out (rows,cols), leading dimension ld, column-major: += bias (rows) per
 * column; T throughout */
template <typename T>
__global__ void add_bias_kernel(T *out, const T *bias, int rows, int cols, int ld)
{
	size_t n = (size_t)rows * cols;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		int r = (int)(i % rows);
		size_t c = i / rows;
		out[c * ld + r] = pp_to<T>(pp_f(out[c * ld + r]) + pp_f(bias[r]));
	}
}

/* One cuBLASLt product with epilogue epi; returns 0 when cuBLASLt has no
 * algorithm for it (only asked with an epilogue, which then falls back). */
static int lt_matmul(const gemm_args *g, int epi)
{
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulPreference_t pref;
	const cublasComputeType_t compute = pp_cuda.tf32 && g->ab_type == CUDA_R_32F
						    ? CUBLAS_COMPUTE_32F_FAST_TF32
						    : CUBLAS_COMPUTE_32F;
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
		const cudaDataType_t bt = g->d_type;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
							       &g->bias, sizeof g->bias));
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
	}
	if (epi == EPI_GELU) {
		/* the GELU input, laid out as D; its type defaults to D's */
		const int64_t ld = g->ldd;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux));
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
							       &ld, sizeof ld));
	}
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, g->ab_type, g->transa ? g->k : g->m,
						   g->transa ? g->m : g->k, g->lda));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, g->ab_type, g->transb ? g->n : g->k,
						   g->transb ? g->k : g->n, g->ldb));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, g->d_type, g->m, g->n, g->ldd));

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

template <typename T> static void gemm(const gemm_args *g)
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
				PP_CUDA_CHECK(cudaMemsetAsync(
					(char *)g->D + (size_t)c * g->ldd * type_size(g->d_type), 0,
					type_size(g->d_type) * g->m, pp_cuda.stream));
	} else if (g->bias && alignment(g->bias) >= 16 && lt_matmul(g, EPI_BIAS)) {
		/* the epilogue only for a 16-byte aligned bias: cuBLASLt takes no
		 * alignment preference for it, so play safe; else the kernel below */
		return;
	} else {
		lt_matmul(g, EPI_NONE);
	}
	if (g->bias) {
		size_t n = (size_t)g->m * g->n;
		add_bias_kernel<T><<<pp_cuda_blocks(n, 256), 256, 0, pp_cuda.stream>>>(
			(T *)g->D, (const T *)g->bias, g->m, g->n, g->ldd);
		PP_CUDA_LAUNCHED("add_bias_kernel");
	}
}

/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC); all T */
template <typename T>
void pp_cuda_matmul_fwd(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias,
			int N, int C, int OC)
{
	gemm_args g = {.transa = 1, .transb = 0, .m = OC, .n = N, .k = C, .ab_type = cuda_type<T>(),
		       .d_type = cuda_type<T>(), .A = w, .lda = C, .B = inp, .ldb = C, .beta = 0,
		       .D = out, .ldd = OC, .bias = bias, .aux = NULL};
	gemm<T>(&g);
}
PP_CUDA_BOTH(pp_cuda_matmul_fwd);

/* pre (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC); out (N,OC) = gelu(pre).
 * cuBLASLt's GELU_AUX(_BIAS) epilogue writes both in one product. It wants
 * the GELU input's leading dimension (OC) divisible by 8; the pointers are
 * asked 16-byte aligned, as for the bias epilogue. Otherwise, or when
 * cuBLASLt has no algorithm, the product and then the GELU kernel. */
template <typename T>
void pp_cuda_matmul_gelu_fwd(pp_act *out, pp_act *pre, const pp_act *inp, const pp_act *w,
			     const pp_act *bias, int N, int C, int OC)
{
	PP_CUDA_REQUIRE(pp_cuda.lt, "the CUDA backend is used before pp_cuda_init");
	if (N <= 0 || OC <= 0)
		return;
	gemm_args g = {.transa = 1, .transb = 0, .m = OC, .n = N, .k = C, .ab_type = cuda_type<T>(),
		       .d_type = cuda_type<T>(), .A = w, .lda = C, .B = inp, .ldb = C, .beta = 0,
		       .D = out, .ldd = OC, .bias = bias, .aux = pre};
	if (C > 0 && OC % 8 == 0 && alignment(pre) >= 16 && alignment(out) >= 16 &&
	    (!bias || alignment(bias) >= 16) && lt_matmul(&g, EPI_GELU))
		return;
	pp_cuda_matmul_fwd<T>(pre, inp, w, bias, N, C, OC);
	pp_cuda_gelu_fwd<T>(out, pre, (size_t)N * OC);
}
PP_CUDA_BOTH(pp_cuda_matmul_gelu_fwd);

/* dinp (N,C) = dout (N,OC) @ w (OC,C), T; dw (OC,C) += dout^T @ inp (N,C)
 * in fp32; dbias (OC) += sum over N of dout, fp32 */
template <typename T>
void pp_cuda_matmul_bwd(pp_act *dinp, pp_real *dw, pp_real *dbias, const pp_act *dout,
			const pp_act *inp, const pp_act *w, int N, int C, int OC)
{
	if (dinp) {
		/* column-major dinp^T (C,N) = w^T (C,OC) @ dout^T (OC,N) */
		gemm_args g = {.transa = 0, .transb = 0, .m = C, .n = N, .k = OC,
			       .ab_type = cuda_type<T>(), .d_type = cuda_type<T>(), .A = w, .lda = C,
			       .B = dout, .ldb = OC, .beta = 0, .D = dinp, .ldd = C, .bias = NULL,
			       .aux = NULL};
		gemm<T>(&g);
	}
	if (dw) {
		/* column-major dw^T (C,OC) += inp^T (C,N) @ dout (N,OC) */
		gemm_args g = {.transa = 0, .transb = 1, .m = C, .n = OC, .k = N,
			       .ab_type = cuda_type<T>(), .d_type = CUDA_R_32F, .A = inp, .lda = C,
			       .B = dout, .ldb = OC, .beta = 1, .D = dw, .ldd = C, .bias = NULL,
			       .aux = NULL};
		gemm<T>(&g);
	}
	if (dbias)
		pp_cuda_colsum<T>(dbias, (const T *)dout, N, OC);
}
PP_CUDA_BOTH(pp_cuda_matmul_bwd);

/* ---- column sums ------------------------------------------------------------------ */

enum { COLSUM_PLAIN = 0, COLSUM_RMS = 1, COLSUM_LN = 2 };

/* Column sums over row range s of (N,C) matrices of T (rows [s * R, (s+1) * R)),
 * per mode:
 *   PLAIN: sum_n a[n,c]
 *   RMS:   sum_n a[n,c] * x[n,c] * rstd[n]
 *   LN:    sum_n a[n,c] * ((x[n,c] - mean[n]) * rstd[n]), and (sum2) sum_n a[n,c]
 * into out[s * C + c] (and out2), or with S == 1 added to them (dst += sum).
 * grid (ceil(C/COLS), S), block (COLS, ROWS). A column's sum over the range is
 * ROWS partials over fixed row sets, added in row order by one thread: no
 * atomics. */
template <typename T>
__global__ void colsum_kernel(float *out, float *out2, const T *a, const T *x, const float *mean,
			      const float *rstd, int N, int C, int R, int mode)
{
	__shared__ float part[2][ROWS][COLS + 1];
	const int c = blockIdx.x * COLS + threadIdx.x, s = blockIdx.y;
	const int n1 = min(N, (s + 1) * R);
	float acc = 0, acc2 = 0;
	if (c < C)
		for (int n = s * R + threadIdx.y; n < n1; n += ROWS) {
			const size_t i = (size_t)n * C + c;
			const float ai = pp_f(a[i]);
			if (mode == COLSUM_PLAIN) {
				acc += ai;
			} else if (mode == COLSUM_RMS) {
				acc += ai * pp_f(x[i]) * rstd[n];
			} else {
				acc += ai * ((pp_f(x[i]) - mean[n]) * rstd[n]);
				acc2 += ai;
			}
		}
	part[0][threadIdx.y][threadIdx.x] = acc;
	part[1][threadIdx.y][threadIdx.x] = acc2;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float t = 0, t2 = 0;
		for (int r = 0; r < ROWS; r++) {
			t += part[0][r][threadIdx.x];
			t2 += part[1][r][threadIdx.x];
		}
		const size_t at = (size_t)s * C + c;
		if (gridDim.y == 1) {
			out[at] += t;
			if (out2)
				out2[at] += t2;
		} else {
			out[at] = t;
			if (out2)
				out2[at] = t2;
		}
	}
}

/* dst (C) += sum over s of part (S,C), in s order; dst2 from part2 likewise */
__global__ void colsum_finish_kernel(float *dst, float *dst2, const float *part,
				     const float *part2, int S, int C)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	float t = 0, t2 = 0;
	for (int s = 0; s < S; s++) {
		t += part[(size_t)s * C + c];
		if (dst2)
			t2 += part2[(size_t)s * C + c];
	}
	dst[c] += t;
	if (dst2)
		dst2[c] += t2;
}

/* The rows split into S ranges of R rows, enough blocks to fill the GPU for
 * the tall matrices of training (N = B*T rows); S depends on N only, so the
 * order of the additions does too. */
template <typename T>
static void colsum(float *dst, float *dst2, const T *a, const T *x, const float *mean,
		   const float *rstd, int N, int C, int mode)
{
	if (N <= 0 || C <= 0)
		return;
	const int S = min(COLSUM_SPLITS, (N + COLSUM_SPLIT_ROWS - 1) / COLSUM_SPLIT_ROWS);
	const int R = (N + S - 1) / S;
	const dim3 grid((C + COLS - 1) / COLS, S), block(COLS, ROWS);
	if (S == 1) {
		colsum_kernel<T><<<grid, block>>>(dst, dst2, a, x, mean, rstd, N, C, R, mode);
		PP_CUDA_LAUNCHED("colsum_kernel");
		return;
	}
	float *part = (float *)pp_cuda_scratch(sizeof(float) * 2 * (size_t)S * C);
	float *part2 = dst2 ? part + (size_t)S * C : NULL;
	colsum_kernel<T><<<grid, block>>>(part, part2, a, x, mean, rstd, N, C, R, mode);
	PP_CUDA_LAUNCHED("colsum_kernel");
	colsum_finish_kernel<<<(C + 255) / 256, 256>>>(dst, dst2, part, part2, S, C);
	PP_CUDA_LAUNCHED("colsum_finish_kernel");
}

template <typename T> void pp_cuda_colsum(pp_real *dst, const T *src, int N, int C)
{
	colsum<T>(dst, NULL, src, NULL, NULL, NULL, N, C, COLSUM_PLAIN);
}
template void pp_cuda_colsum<float>(pp_real *, const float *, int, int);
template void pp_cuda_colsum<pp_bf16>(pp_real *, const pp_bf16 *, int, int);

template <typename T>
void pp_cuda_colsum_rms(pp_real *dw, const T *dout, const T *x, const pp_real *rstd, int N, int C)
{
	colsum<T>(dw, NULL, dout, x, NULL, rstd, N, C, COLSUM_RMS);
}
template void pp_cuda_colsum_rms<float>(pp_real *, const float *, const float *, const pp_real *,
					int, int);
template void pp_cuda_colsum_rms<pp_bf16>(pp_real *, const pp_bf16 *, const pp_bf16 *,
					  const pp_real *, int, int);

template <typename T>
void pp_cuda_colsum_ln(pp_real *dw, pp_real *db, const T *dout, const T *x, const pp_real *mean,
		       const pp_real *rstd, int N, int C)
{
	colsum<T>(dw, db, dout, x, mean, rstd, N, C, COLSUM_LN);
}
template void pp_cuda_colsum_ln<float>(pp_real *, pp_real *, const float *, const float *,
				       const pp_real *, const pp_real *, int, int);
template void pp_cuda_colsum_ln<pp_bf16>(pp_real *, pp_real *, const pp_bf16 *, const pp_bf16 *,
					 const pp_real *, const pp_real *, int, int);
