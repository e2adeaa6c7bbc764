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
#include "../fp8.h"
#include "../optable.h"
#include "cuda.h"

/* dbias and the norm weight gradients: one block owns COLS columns of a
 * range of rows, its ROWS thread rows stride the range; each column's ROWS
 * partial sums are added in a fixed order by one thread */
#define COLS 32
#define ROWS 16
/* column sums of tall matrices: at most COLSUM_SPLITS row ranges of at
 * least COLSUM_SPLIT_ROWS rows each */
#define COLSUM_SPLITS     32
#define COLSUM_SPLIT_ROWS 256

/* D (m,n) = alpha * op(A) @ op(B) + beta * D, column-major, fp32; with bias
 * (m), D += bias broadcast over the columns (the cuBLASLt bias epilogue).
 * aux (m,n), leading dimension ldd, serves the GELU epilogues: GELU_AUX
 * writes the product (plus bias) to it and its GELU to D; DGELU reads the
 * GELU input from it and writes the product times GELU' of it to D.
 * a_scale and b_scale (device floats; NULL: none) multiply the product as
 * cuBLASLt's A and B scales, which FP8 products take. */
typedef struct {
	int transa, transb, m, n, k;
	cudaDataType_t a_type, b_type, d_type; /* of A, of B, of D (and C, bias, aux) */
	const void *A;
	int lda;
	const void *B;
	int ldb;
	float alpha = 1, beta = 0;
	void *D;
	int ldd;
	const void *bias = nullptr;
	void *aux = nullptr;
	const float *a_scale = nullptr, *b_scale = nullptr;
	int optional = 0; /* no algorithm: lt_matmul returns 0 rather than stopping */
} gemm_args;

template <typename T> static cudaDataType_t cuda_type(void)
{
	return pp_is_bf16<T>::value ? CUDA_R_16BF : CUDA_R_32F;
}

static size_t type_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

/* the epilogues lt_matmul asks cuBLASLt for */
enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_GELU = 2, EPI_DGELU = 3 };

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

/* What cuBLASLt is asked for one product: everything but the pointers'
 * values (their alignments are in), and the answer: the descriptors and the
 * heuristic's first choice, or none. Building descriptors and asking the
 * heuristic cost tens of microseconds, so each shape is asked once; the
 * layers of a model repeat a handful of shapes. */
typedef struct {
	int transa, transb, m, n, k, lda, ldb, ldd, epi, has_bias, has_scales;
	cudaDataType_t a_type, b_type, d_type;
	cublasComputeType_t compute;
	uint32_t al_a, al_b, al_d;
} lt_key;

typedef struct {
	lt_key key;
	int ok; /* cuBLASLt has an algorithm */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
} lt_plan;

/* plans kept; past that, the oldest is replaced */
#define LT_PLANS 128
static lt_plan lt_plans[LT_PLANS];
static int lt_count, lt_next;

static void lt_plan_free(lt_plan *p)
{
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
	PP_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

/* this product's epilogue and scale pointers (the descriptor serves every
 * product of the shape) */
static void lt_plan_pointers(lt_plan *p, const gemm_args *g)
{
	if (p->key.has_scales) {
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc,
							       CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
							       &g->a_scale, sizeof g->a_scale));
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc,
							       CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
							       &g->b_scale, sizeof g->b_scale));
	}
	if (p->key.has_bias)
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
	if (p->key.epi == EPI_GELU || p->key.epi == EPI_DGELU)
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
			sizeof g->aux));
}

/* Builds the plan of key for the product g: the descriptors, with g's
 * epilogue pointers as the heuristic sees them, and its first choice. */
static void lt_plan_build(lt_plan *p, const lt_key *key, const gemm_args *g)
{
	memset(p, 0, sizeof *p);
	p->key = *key;
	const cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
	const cublasOperation_t tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
	PP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, key->compute, CUDA_R_32F));
	PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
						       sizeof ta));
	PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
						       sizeof tb));
	if (key->epi != EPI_NONE) {
		const cublasLtEpilogue_t e = key->epi == EPI_BIAS    ? CUBLASLT_EPILOGUE_BIAS
					     : key->epi == EPI_DGELU ? CUBLASLT_EPILOGUE_DGELU
					     : key->has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
							     : CUBLASLT_EPILOGUE_GELU_AUX;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
	}
	if (key->epi != EPI_NONE && key->has_bias) {
		const cudaDataType_t bt = key->d_type;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
	}
	if (key->epi == EPI_GELU || key->epi == EPI_DGELU) {
		/* the GELU input, laid out as D; its type defaults to D's */
		const int64_t ld = key->ldd;
		PP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
	}
	lt_plan_pointers(p, g);
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, key->a_type,
						   key->transa ? key->k : key->m,
						   key->transa ? key->m : key->k, key->lda));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, key->b_type,
						   key->transb ? key->n : key->k,
						   key->transb ? key->k : key->n, key->ldb));
	PP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, key->d_type, key->m, key->n, key->ldd));

	cublasLtMatmulPreference_t pref;
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	const uint64_t ws = pp_cuda.workspace_bytes;
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->al_a, sizeof key->al_a));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->al_b, sizeof key->al_b));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->al_d, sizeof key->al_d));
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->al_d, sizeof key->al_d));
	/* The heuristic's first choice depends on the sizes, layouts and
	 * alignments only, and cuBLASLt's kernels are deterministic (their
	 * split-k reductions included): the same call gives the same bits. */
	cublasLtMatmulHeuristicResult_t h;
	int found = 0;
	cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(pp_cuda.lt, p->desc, p->la, p->lb, p->ld,
							   p->ld, pref, 1, &h, &found);
	if (st != CUBLAS_STATUS_NOT_SUPPORTED && !g->optional)
		PP_CUBLAS_CHECK(st);
	PP_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
	p->ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
	if (p->ok)
		p->algo = h.algo;
}

/* The plan of key: a cached one, or a new one (for g) in the next slot. */
static lt_plan *lt_plan_of(const lt_key *key, const gemm_args *g)
{
	for (int i = 0; i < lt_count; i++)
		if (!memcmp(&lt_plans[i].key, key, sizeof *key))
			return &lt_plans[i];
	lt_plan *p = &lt_plans[lt_next];
	if (lt_count == LT_PLANS)
		lt_plan_free(p);
	else
		lt_count++;
	lt_next = (lt_next + 1) % LT_PLANS;
	lt_plan_build(p, key, g);
	return p;
}

/* One cuBLASLt product with epilogue epi; returns 0 when cuBLASLt has no
 * algorithm for it (only asked with an epilogue, which then falls back). */
static int lt_matmul(const gemm_args *g, int epi)
{
	lt_key key;
	memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
	key.transa = g->transa;
	key.transb = g->transb;
	key.m = g->m;
	key.n = g->n;
	key.k = g->k;
	key.lda = g->lda;
	key.ldb = g->ldb;
	key.ldd = g->ldd;
	key.epi = epi;
	key.has_bias = epi != EPI_NONE && g->bias;
	key.has_scales = g->a_scale || g->b_scale;
	key.a_type = g->a_type;
	key.b_type = g->b_type;
	key.d_type = g->d_type;
	key.compute = pp_cuda.tf32 && g->a_type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32
							      : CUBLAS_COMPUTE_32F;
	key.al_a = alignment(g->A);
	key.al_b = alignment(g->B);
	key.al_d = alignment(g->D);
	lt_plan *p = lt_plan_of(&key, g);
	if (!p->ok) {
		if (epi != EPI_NONE || g->optional)
			return 0;
		char why[160];
		snprintf(why, sizeof why, "no cuBLASLt algorithm for m=%d n=%d k=%d (%s%s)", g->m,
			 g->n, g->k, g->transa ? "T" : "N", g->transb ? "T" : "N");
		pp_cuda_fatal(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", why);
	}
	lt_plan_pointers(p, g);
	PP_CUBLAS_CHECK(cublasLtMatmul(pp_cuda.lt, p->desc, &g->alpha, g->A, p->la, g->B, p->lb,
				       &g->beta, g->D, p->ld, g->D, p->ld, &p->algo,
				       pp_cuda.workspace, pp_cuda.workspace_bytes, pp_cuda.stream));
	char what[96] = PP_OPTABLE_PRODUCT;
	if (pp_cuda.profile) /* one profile row per product shape */
		snprintf(what, sizeof what, PP_OPTABLE_PRODUCT " %s%s m=%d n=%d k=%d%s%s%s",
			 g->transa ? "T" : "N", g->transb ? "T" : "N", g->m, g->n, g->k,
			 g->a_type == CUDA_R_8F_E4M3 || g->a_type == CUDA_R_8F_E5M2 ? PP_OPTABLE_FP8
										    : "",
			 g->d_type == CUDA_R_32F && g->a_type != CUDA_R_32F ? " fp32 out" : "",
			 epi == EPI_GELU    ? " +gelu"
			 : epi == EPI_DGELU ? " +dgelu"
			 : key.has_bias     ? " +bias"
					    : "");
	PP_CUDA_LAUNCHED(what);
	return 1;
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

/* Column-major D (m,n) = a_scale b_scale A^T B (+ D when accumulate) on
 * FP8 tensor cores: A (k,m) and B (k,n) FP8 bytes of formats a_fmt and
 * b_fmt (PP_FP8_*), leading dimension k, the transposed-A ("TN") layout
 * Hopper's FP8 products take; the scales one device float each; D bf16, or
 * fp32 (d_real), leading dimension m. Returns 0 when cuBLASLt has no
 * algorithm for it. */
int pp_cuda_matmul_fp8(void *D, int d_real, const void *A, int a_fmt, const float *a_scale,
		       const void *B, int b_fmt, const float *b_scale, int m, int n, int k,
		       int accumulate)
{
	PP_CUDA_REQUIRE(pp_cuda.lt, "the CUDA backend is used before pp_cuda_init");
	const gemm_args g = {.transa = 1,
			     .transb = 0,
			     .m = m,
			     .n = n,
			     .k = k,
			     .a_type = a_fmt == PP_FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3,
			     .b_type = b_fmt == PP_FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3,
			     .d_type = d_real ? CUDA_R_32F : CUDA_R_16BF,
			     .A = A,
			     .lda = k,
			     .B = B,
			     .ldb = k,
			     .beta = accumulate ? 1.0f : 0.0f,
			     .D = D,
			     .ldd = m,
			     .a_scale = a_scale,
			     .b_scale = b_scale,
			     .optional = 1};
	return m > 0 && n > 0 && k > 0 && lt_matmul(&g, EPI_NONE);
}

/* out (N,OC) += bias (OC) on every row; both T */
template <typename T> void pp_cuda_add_bias(pp_act *out, const pp_act *bias, int N, int OC)
{
	const size_t n = (size_t)N * OC;
	if (!n)
		return;
	add_bias_kernel<T><<<pp_cuda_blocks(n, 256), 256, 0, pp_cuda.stream>>>(
		(T *)out, (const T *)bias, OC, N, OC);
	PP_CUDA_LAUNCHED("add_bias_kernel");
}
PP_CUDA_BOTH(pp_cuda_add_bias);

/* The product out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC), T:
 * column-major out^T (OC,N) = w (C,OC)^T @ inp^T (C,N) */
template <typename T>
static gemm_args fwd_args(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias,
			  int N, int C, int OC)
{
	gemm_args g = {.transa = 1,
		       .transb = 0,
		       .m = OC,
		       .n = N,
		       .k = C,
		       .a_type = cuda_type<T>(),
		       .b_type = cuda_type<T>(),
		       .d_type = cuda_type<T>(),
		       .A = w,
		       .lda = C,
		       .B = inp,
		       .ldb = C,
		       .D = out,
		       .ldd = OC,
		       .bias = bias};
	return g;
}

/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC); all T */
template <typename T>
void pp_cuda_matmul_fwd(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias, int N,
			int C, int OC)
{
	const gemm_args g = fwd_args<T>(out, inp, w, bias, N, C, OC);
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
	gemm_args g = fwd_args<T>(out, inp, w, bias, N, C, OC);
	g.aux = pre; /* written by GELU_AUX */
	if (C > 0 && OC % 8 == 0 && alignment(pre) >= 16 && alignment(out) >= 16 &&
	    (!bias || alignment(bias) >= 16) && lt_matmul(&g, EPI_GELU))
		return;
	pp_cuda_matmul_fwd<T>(pre, inp, w, bias, N, C, OC);
	pp_cuda_gelu_fwd<T>(out, pre, (size_t)N * OC);
}
PP_CUDA_BOTH(pp_cuda_matmul_gelu_fwd);

/* The product dinp (N,C) = dout (N,OC) @ w (OC,C), T: column-major
 * dinp^T (C,N) = w^T (C,OC) @ dout^T (OC,N) */
template <typename T>
static gemm_args dinp_args(pp_act *dinp, const pp_act *dout, const pp_act *w, int N, int C, int OC)
{
	gemm_args g = {.transa = 0,
		       .transb = 0,
		       .m = C,
		       .n = N,
		       .k = OC,
		       .a_type = cuda_type<T>(),
		       .b_type = cuda_type<T>(),
		       .d_type = cuda_type<T>(),
		       .A = w,
		       .lda = C,
		       .B = dout,
		       .ldb = OC,
		       .D = dinp,
		       .ldd = C};
	return g;
}

/* dinp (N,C) = dout (N,OC) @ w (OC,C), T; dw (OC,C) += dout^T @ inp (N,C)
 * in fp32; dbias (OC) += sum over N of dout, fp32 */
template <typename T>
void pp_cuda_matmul_bwd(pp_act *dinp, pp_real *dw, pp_real *dbias, const pp_act *dout,
			const pp_act *inp, const pp_act *w, int N, int C, int OC)
{
	if (dinp) {
		const gemm_args g = dinp_args<T>(dinp, dout, w, N, C, OC);
		gemm<T>(&g);
	}
	if (dw) {
		/* column-major dw^T (C,OC) += inp^T (C,N) @ dout (N,OC) */
		gemm_args g = {.transa = 0,
			       .transb = 1,
			       .m = C,
			       .n = OC,
			       .k = N,
			       .a_type = cuda_type<T>(),
			       .b_type = cuda_type<T>(),
			       .d_type = CUDA_R_32F,
			       .A = inp,
			       .lda = C,
			       .B = dout,
			       .ldb = OC,
			       .beta = 1,
			       .D = dw,
			       .ldd = C};
		gemm<T>(&g);
	}
	if (dbias)
		pp_cuda_colsum<T>(dbias, (const T *)dout, N, OC);
}
PP_CUDA_BOTH(pp_cuda_matmul_bwd);

/* dpre (N,C) = (dout (N,OC) @ w) * gelu'(pre), inp = gelu(pre); dw and dbias
 * as matmul_bwd. cuBLASLt's DGELU epilogue multiplies the fp32 product by
 * GELU' before its one rounding, in one product; it wants what the GELU_AUX
 * forward wants (C divisible by 8, 16-byte aligned pointers). Otherwise, or
 * when cuBLASLt has no algorithm, the product and then the GELU' kernel in
 * place. */
template <typename T>
void pp_cuda_gelu_matmul_bwd(pp_act *dpre, pp_real *dw, pp_real *dbias, const pp_act *dout,
			     const pp_act *inp, const pp_act *pre, const pp_act *w, int N, int C,
			     int OC)
{
	PP_CUDA_REQUIRE(pp_cuda.lt, "the CUDA backend is used before pp_cuda_init");
	if (dpre && N > 0 && C > 0) {
		gemm_args g = dinp_args<T>(dpre, dout, w, N, C, OC);
		g.aux = (void *)pre; /* read, not written, by DGELU */
		if (!(OC > 0 && C % 8 == 0 && alignment(pre) >= 16 && alignment(dpre) >= 16 &&
		      lt_matmul(&g, EPI_DGELU))) {
			pp_cuda_matmul_bwd<T>(dpre, NULL, NULL, dout, inp, w, N, C, OC);
			pp_cuda_gelu_bwd<T>(dpre, dpre, pre, (size_t)N * C);
		}
	}
	pp_cuda_matmul_bwd<T>(NULL, dw, dbias, dout, inp, w, N, C, OC);
}
PP_CUDA_BOTH(pp_cuda_gelu_matmul_bwd);

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
__global__ void colsum_finish_kernel(float *dst, float *dst2, const float *part, const float *part2,
				     int S, int C)
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
