/* Private to the CPU backend: the ops of pp_ops_cpu (one file per family) and
 * the helpers they share. Shapes use the letter code of kernels/ops.h. */
#ifndef PP_KERNELS_CPU_H
#define PP_KERNELS_CPU_H

#include <cblas.h>
#include <stddef.h>

#include "../ops.h"

/* One GEMM entry point for both precisions, row-major:
 * C (M,N) = alpha * op(A) @ op(B) + beta * C, op(X) = ta/tb ? X^T : X. */
#ifdef PP_F64
#define PP_CBLAS_GEMM cblas_dgemm
#else
#define PP_CBLAS_GEMM cblas_sgemm
#endif
static inline void pp_cpu_gemm(int ta, int tb, int M, int N, int K, pp_real alpha,
			       const pp_real *A, int lda, const pp_real *B, int ldb, pp_real beta,
			       pp_real *C, int ldc)
{
	PP_CBLAS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
		      M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* GEMMs issued from inside our own OpenMP regions must run on the calling
 * thread: a pthreads OpenBLAS would otherwise fan each one out to its own
 * pool, oversubscribing the cores (the OpenMP build of OpenBLAS notices the
 * region by itself). begin returns the state that end restores. */
int pp_cpu_blas_serial_begin(void);
void pp_cpu_blas_serial_end(int saved);

/* Scratch memory for one call. The op interface has no error path, so
 * running out of memory here aborts with a message rather than returning a
 * wrong answer. */
void *pp_cpu_scratch(size_t bytes);

/* mem.c */
void *pp_cpu_alloc(size_t bytes);
void pp_cpu_free(void *p);
void pp_cpu_copy(void *dst, const void *src, size_t bytes);
void pp_cpu_zero(void *p, size_t bytes);

/* vec.c */
void pp_cpu_add(pp_real *out, const pp_real *a, const pp_real *b, size_t n);
void pp_cpu_scale(pp_real *x, pp_real s, size_t n);
double pp_cpu_sumsq(const pp_real *x, size_t n);

/* matmul.c */
void pp_cpu_matmul_fwd(pp_real *out, const pp_real *inp, const pp_real *w, const pp_real *bias,
		       int N, int C, int OC);
void pp_cpu_matmul_bwd(pp_real *dinp, pp_real *dw, pp_real *dbias, const pp_real *dout,
		       const pp_real *inp, const pp_real *w, int N, int C, int OC);

/* embed.c */
void pp_cpu_embed_fwd(pp_real *out, const int *tok, const pp_real *wte, const pp_real *wpe,
		      pp_real scale, int B, int T, int C, int pos0);
void pp_cpu_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_real *dout, const int *tok,
		      pp_real scale, int B, int T, int C, int pos0);

/* norm.c */
void pp_cpu_rmsnorm_fwd(pp_real *out, pp_real *rstd, const pp_real *x, const pp_real *w,
			pp_real eps, pp_real offset, int N, int C);
void pp_cpu_rmsnorm_bwd(pp_real *dx, pp_real *dw, const pp_real *dout, const pp_real *x,
			const pp_real *w, const pp_real *rstd, pp_real offset, int N, int C);
void pp_cpu_layernorm_fwd(pp_real *out, pp_real *mean, pp_real *rstd, const pp_real *x,
			  const pp_real *w, const pp_real *b, pp_real eps, int N, int C);
void pp_cpu_layernorm_bwd(pp_real *dx, pp_real *dw, pp_real *db, const pp_real *dout,
			  const pp_real *x, const pp_real *w, const pp_real *mean,
			  const pp_real *rstd, int N, int C);

/* rope.c */
void pp_cpu_rope_fwd(pp_real *qkv, int B, int T, int Hq, int Hkv, int D, pp_real theta, int pos0);
void pp_cpu_rope_bwd(pp_real *dqkv, int B, int T, int Hq, int Hkv, int D, pp_real theta,
		     int pos0);

/* attention.c */
void pp_cpu_attention_fwd(pp_real *out, pp_real *lse, const pp_real *qkv, int B, int T, int Hq,
			  int Hkv, int D, int window);
void pp_cpu_attention_bwd(pp_real *dqkv, const pp_real *dout, const pp_real *out,
			  const pp_real *lse, const pp_real *qkv, int B, int T, int Hq, int Hkv,
			  int D, int window);

/* mlp.c */
void pp_cpu_glu_fwd(pp_real *out, const pp_real *gu, int N, int F, int act);
void pp_cpu_glu_bwd(pp_real *dgu, const pp_real *dout, const pp_real *gu, int N, int F, int act);
void pp_cpu_gelu_fwd(pp_real *out, const pp_real *x, size_t n);
void pp_cpu_gelu_bwd(pp_real *dx, const pp_real *dout, const pp_real *x, size_t n);

/* loss.c */
void pp_cpu_crossentropy(pp_real *losses, pp_real *dlogits, const pp_real *logits,
			 const int *targets, int N, int V, pp_real dscale);

/* optim.c */
void pp_cpu_adamw(pp_real *p, const pp_real *g, pp_real *m, pp_real *v, size_t n, float lr,
		  float b1, float b2, float eps, float wd, long t, float gscale);

#endif
