/* Private to the CPU backend: the ops of pp_ops_cpu (one file per family) and
 * the helpers they share. Shapes use the letter code of kernels/ops.h. */
#ifndef PP_KERNELS_CPU_H
#define PP_KERNELS_CPU_H

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../ops.h"

/* One GEMM entry point for both precisions, row-major:
 * C (M,N) = alpha * op(A) @ op(B) + beta * C, op(X) = ta/tb ? X^T : X. */
#ifdef PP_F64
#define PP_CBLAS_GEMM cblas_dgemm
#else
#define PP_CBLAS_GEMM cblas_sgemm
#endif
static inline void pp_cpu_gemm(int ta, int tb, int M, int N, int K, pp_real alpha, const pp_real *A,
			       int lda, const pp_real *B, int ldb, pp_real beta, pp_real *C,
			       int ldc)
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
/* zero-filled scratch memory; aborts the process when memory is exhausted */
void *pp_cpu_scratch(size_t bytes);

/* pos0 of ops.h: the position an op's pointer holds, NULL for 0 */
static inline int pp_cpu_pos(const int *pos0) { return pos0 ? *pos0 : 0; }

/* Functions holding hot elementwise loops get AVX2 and AVX-512 versions,
 * picked when the program loads: the build itself targets baseline x86-64
 * (SSE2). Put it on helpers that parallel loops call, not on a function that
 * opens a parallel region: the region's body is outlined into a function of
 * its own, which the clones do not cover. */
#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 11
#define PP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PP_CPU_CLONES
#endif

/* exp in float that a loop can vectorise (libm's expf is a call per
 * element): x = n ln2 + r with |r| <= ln2/2, Cephes' degree-6 polynomial for
 * e^r, 2^n written into the exponent bits; relative error about 1e-7. x is
 * clamped to [-87, 88], so exp(-inf) is 1.6e-38 rather than 0; NaN passes
 * through. The bounds are read from memory (defined in cpu.c) on purpose:
 * where GCC sees them as constants it splits the loop into a clamped path
 * with a constant result, and that vectorises for AVX-512 only. */
extern const float pp_cpu_expf_range[2];
static inline float pp_cpu_expf(float x)
{
	x = x < pp_cpu_expf_range[0] ? pp_cpu_expf_range[0] : x;
	x = x > pp_cpu_expf_range[1] ? pp_cpu_expf_range[1] : x;
	/* t = 1.5 * 2^23 + n, n = round(x / ln2): n sits in t's low mantissa bits */
	float t = x * 1.44269504088896341f + 12582912.0f;
	float n = t - 12582912.0f;
	float r = x - n * 0.693359375f + n * 2.12194440e-4f; /* ln2 in two parts */
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1;
	uint32_t bits;
	memcpy(&bits, &t, sizeof bits);
	bits = (bits - 0x4B400000u + 127u) << 23; /* 2^n: 0x4B400000 is 1.5 * 2^23 */
	float scale;
	memcpy(&scale, &bits, sizeof scale);
	return p * scale;
}

/* tanh from pp_cpu_expf; absolute error < 3e-7 (the relative error grows
 * near 0, harmless where it is used: GELU adds it to 1) */
static inline float pp_cpu_tanhf(float x) { return 1 - 2 / (pp_cpu_expf(2 * x) + 1); }

/* exp and tanh of pp_real for vectorisable loops: the float versions above in
 * production builds, libm in double builds (the finite-difference tests) */
#ifdef PP_F64
#define pp_cpu_exp(x)  exp(x)
#define pp_cpu_tanh(x) tanh(x)
#else
#define pp_cpu_exp(x)  pp_cpu_expf(x)
#define pp_cpu_tanh(x) pp_cpu_tanhf(x)
#endif

/* Sets the double result to the sum of term over i in [0, n): in pp_real
 * within blocks of PP_CPU_VBLOCK, so that the loop vectorises (a double
 * accumulator would keep it scalar), and in double across blocks. */
#define PP_CPU_VBLOCK 256
/* clang-format off */
#define PP_CPU_SUM(result, i, n, term)                                                   \
	do {                                                                             \
		double sum_ = 0;                                                         \
		for (int b0_ = 0; b0_ < (n); b0_ += PP_CPU_VBLOCK) {                     \
			int b1_ = (n) - b0_ < PP_CPU_VBLOCK ? (n) : b0_ + PP_CPU_VBLOCK; \
			pp_real part_ = 0;                                               \
			_Pragma("omp simd reduction(+ : part_)")                         \
			for (int i = b0_; i < b1_; i++)                                  \
				part_ += (term);                                         \
			sum_ += part_;                                                   \
		}                                                                        \
		(result) = sum_;                                                         \
	} while (0)
/* clang-format on */

/* vmath.c: row kernels over x (n >= 1) */
/* log(sum(exp(x))), with the max trick; the sum as in PP_CPU_SUM */
pp_real pp_cpu_vlogsumexp(const pp_real *x, int n);
/* y = exp(x - shift) * scale; y may be x */
void pp_cpu_vexp(pp_real *y, const pp_real *x, pp_real shift, pp_real scale, int n);

/* mem.c */
void *pp_cpu_alloc(size_t bytes);
void pp_cpu_free(void *p);
void pp_cpu_copy(void *dst, const void *src, size_t bytes);
void pp_cpu_zero(void *p, size_t bytes);
void pp_cpu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
		   size_t rows);
void pp_cpu_to_act(pp_act *dst, const pp_real *src, size_t n);
void pp_cpu_act_to_host(pp_real *host_dst, const pp_act *src, size_t n);

/* vec.c */
void pp_cpu_add(pp_act *out, const pp_act *a, const pp_act *b, size_t n);
void pp_cpu_add_real(pp_real *out, const pp_real *a, const pp_real *b, size_t n);
void pp_cpu_scale(pp_real *x, pp_real s, size_t n);
void pp_cpu_scale_act(pp_act *x, pp_real s, size_t n);
void pp_cpu_dropout(pp_act *out, const pp_act *in, int N, int C, const pp_dropout *d);
void pp_cpu_add_bias(pp_act *out, const pp_act *bias, int N, int OC);
/* fp8.c */
void pp_cpu_fp8_cast(pp_act *out, const pp_act *in, size_t n, const float *scale, int fmt,
		     pp_fp8_tally *tally);
void pp_cpu_absmax(float *amax, const pp_act *x, size_t n, int into);
void pp_cpu_fp8_scale(float *scale, const float *amax, int fmt, float div);
void pp_cpu_fp8_unscale(void *x, size_t n, int real, const float *sa, const float *sb);
double pp_cpu_sumsq(const pp_real *x, size_t n);

/* matmul.c */
void pp_cpu_matmul_fwd(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias, int N,
		       int C, int OC);
void pp_cpu_matmul_bwd(pp_act *dinp, pp_real *dw, pp_real *dbias, const pp_act *dout,
		       const pp_act *inp, const pp_act *w, int N, int C, int OC);

/* matvec.c (production builds only) */
void *pp_cpu_pack_weight(const pp_act *w, int OC, int C, int fmt);
void pp_cpu_matmul_packed(pp_act *out, const pp_act *inp, const void *wp, const pp_act *bias, int N,
			  int C, int OC, int fmt);

/* embed.c */
void pp_cpu_embed_fwd(pp_act *out, const int *tok, const pp_act *wte, const pp_act *wpe,
		      pp_real scale, int B, int T, int C, const int *pos0);
void pp_cpu_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_act *dout, const int *tok,
		      pp_real scale, int B, int T, int C, const int *pos0);

/* norm.c */
void pp_cpu_rmsnorm_fwd(pp_act *out, pp_real *rstd, const pp_act *x, const pp_act *w, pp_real eps,
			pp_real offset, int N, int C);
void pp_cpu_rmsnorm_bwd(pp_act *dx, pp_real *dw, const pp_act *dout, const pp_act *x,
			const pp_act *w, const pp_real *rstd, pp_real offset, int N, int C);
void pp_cpu_layernorm_fwd(pp_act *out, pp_real *mean, pp_real *rstd, const pp_act *x,
			  const pp_act *w, const pp_act *b, pp_real eps, int N, int C);
void pp_cpu_layernorm_bwd(pp_act *dx, pp_real *dw, pp_real *db, const pp_act *dout, const pp_act *x,
			  const pp_act *w, const pp_real *mean, const pp_real *rstd, int N, int C);
void pp_cpu_rmsnorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *rstd, const pp_act *x,
				 const pp_act *y, const pp_act *w, pp_real eps, pp_real offset,
				 int N, int C);
void pp_cpu_layernorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *mean, pp_real *rstd,
				   const pp_act *x, const pp_act *y, const pp_act *w,
				   const pp_act *b, pp_real eps, int N, int C);

/* rope.c */
void pp_cpu_rope_fwd(pp_act *qkv, int B, int T, int Hq, int Hkv, int D, pp_real theta,
		     const int *pos0);
void pp_cpu_rope_bwd(pp_act *dqkv, int B, int T, int Hq, int Hkv, int D, pp_real theta,
		     const int *pos0);

/* attention.c */
void pp_cpu_attention_fwd(pp_act *out, pp_real *lse, const pp_act *qkv, int B, int T, int Hq,
			  int Hkv, int D, int window, const pp_attn_bias *bias);
void pp_cpu_attention_bwd(pp_act *dqkv, const pp_act *dout, const pp_act *out, const pp_real *lse,
			  const pp_act *qkv, int B, int T, int Hq, int Hkv, int D, int window,
			  const pp_attn_bias *bias);
void pp_cpu_kv_append(pp_act *kcache, pp_act *vcache, const pp_act *qkv, int B, int n, int Hq,
		      int Hkv, int D, int Tmax, const int *pos0);
void pp_cpu_attention_cached(pp_act *out, const pp_act *qkv, const pp_act *kcache,
			     const pp_act *vcache, int B, int n, int Hq, int Hkv, int D, int Tmax,
			     const int *pos0, int window, const pp_attn_bias *bias);

/* mlp.c */
void pp_cpu_moe_route(int *expert, pp_real *gate, pp_real *prob, pp_real *lse, pp_real *stats,
		      const pp_act *logits, int N, int E, int K, int mode);
void pp_cpu_moe_dispatch(int *rows, int *slot, int *counts, const int *expert, int N, int K, int E,
			 int cap);
void pp_cpu_moe_gather(pp_act *dst, const pp_act *src, const int *rows, const pp_real *scale, int M,
		       int K, int C);
void pp_cpu_moe_combine(pp_act *out, const pp_act *y, const int *slot, const pp_real *gate, int N,
			int K, int C);
void pp_cpu_moe_gate_grad(pp_real *dgate, const pp_act *dout, const pp_act *y, const int *slot,
			  int N, int K, int C);
void pp_cpu_moe_router_bwd(pp_act *dlogits, const pp_real *dgate, const int *expert,
			   const pp_real *gate, const pp_real *prob, const pp_real *lse,
			   const pp_real *frac, pp_real aux_w, pp_real z_w, int N, int E, int K,
			   int mode);
void pp_cpu_glu_fwd(pp_act *out, const pp_act *gu, int N, int F, int act);
void pp_cpu_glu_bwd(pp_act *dgu, const pp_act *dout, const pp_act *gu, int N, int F, int act);
void pp_cpu_gelu_fwd(pp_act *out, const pp_act *x, size_t n);
void pp_cpu_matmul_gelu_fwd(pp_act *out, pp_act *pre, const pp_act *inp, const pp_act *w,
			    const pp_act *bias, int N, int C, int OC);
void pp_cpu_gelu_bwd(pp_act *dx, const pp_act *dout, const pp_act *x, size_t n);
void pp_cpu_gelu_matmul_bwd(pp_act *dpre, pp_real *dw, pp_real *dbias, const pp_act *dout,
			    const pp_act *inp, const pp_act *pre, const pp_act *w, int N, int C,
			    int OC);

/* loss.c */
void pp_cpu_crossentropy(pp_real *losses, pp_act *dlogits, const pp_act *logits, const int *targets,
			 int N, int V, pp_real dscale);
void pp_cpu_logsumexp_rows(pp_real *lse, pp_real *tgt, const pp_act *logits, const int *targets,
			   int N, int V);
void pp_cpu_softmax_grad(pp_act *dlogits, const pp_act *logits, const pp_real *lse,
			 const int *targets, int N, int V, pp_real dscale);

/* optim.c */
void pp_cpu_adamw(pp_real *p, pp_act *pc, const pp_real *g, pp_real *m, pp_real *v, size_t n,
		  float lr, float b1, float b2, float eps, float wd, long t, float gscale);

#endif
