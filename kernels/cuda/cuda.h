/* Private to the CUDA backend: the ops of pp_ops_cuda and pp_ops_cuda_bf16
 * (one file per family),
 * the state they share and the helpers they use. Shapes use the letter code
 * of kernels/ops.h; every pointer an op receives is device memory.
 *
 * Execution: every op is enqueued on the legacy default stream of the device
 * that pp_cuda_init selected, so ops run in call order and a to_host copy
 * (cudaMemcpy) sees every op issued before it. Ops are called from one host
 * thread. The exception is a CUDA graph (decode.cu): the ops of a decoding
 * step (embed, norm and norm with the residual add, matmul, rope, kv_append,
 * attention_cached, add, glu and gelu forwards, to_act) launch on pp_cuda.stream,
 * which graph_begin points at a capture stream; that stream is a blocking
 * one, so a graph launched on it runs after earlier work on the default
 * stream and before later work. A graph is recorded once and replayed for
 * every token: the kernels read the position from device memory (pos0).
 *
 * Compute types: every op is one template over the activation type T,
 * float or __nv_bfloat16, and the two op tables (cuda.cu) take its two
 * instances: pp_ops_cuda (T = float) and pp_ops_cuda_bf16. Activations, their
 * gradients, logits, the KV cache and the compute copy of the weights are T
 * (the pp_act pointers of ops.h); master weights, parameter gradients,
 * optimizer state, row statistics and losses are fp32 (pp_real). Kernels
 * load T and convert to float, compute in float (statistics and reductions
 * as below), and round to T on the store (round to nearest even). Rows are
 * read in packs of 16 bytes (PP_VEC(T) elements) where the pointers and the
 * row length allow it, element by element otherwise: the same packs belong
 * to the same threads either way, so alignment never changes a result.
 *
 * Numerics: matrix products run on cuBLASLt with fp32 accumulation
 * (CUBLAS_COMPUTE_32F): exact fp32 for T = float unless PP_CUDA_TF32=1 asks
 * for TF32 tensor cores, bf16 tensor cores for T = bf16. Attention runs on
 * the flash-style kernels of attention.cu or on cuDNN's fused flash
 * attention (sdpa_cudnn.cu), which computes in bf16 with fp32 statistics:
 * the bf16 table uses cuDNN, the fp32 table the plain kernels (cuDNN would
 * cost it about 1e-2 relative), PP_CUDA_ATTENTION overrides both. cuDNN's
 * dq is not bitwise reproducible; shapes cuDNN does not take fall back to
 * the plain kernels.
 * Row statistics (norms, log-sum-exp, sum of squares) accumulate in double,
 * as the CPU backend does.
 *
 * Determinism: no float atomics anywhere. Every reduction has a fixed
 * shape that depends on the op's sizes only (a fixed grid, a fixed tree in
 * shared memory, a fixed loop order), so the same inputs give the same bits
 * on every run: parameter gradients (dw, dbias, norm weights, embeddings)
 * are column sums where one thread owns a column's sum; attention's dk, dv
 * belong to one block per (batch row, kv head, key block) that loops over
 * its query heads and query tiles in order.
 *
 * Errors: the op table has no error path (an op returns nothing), and a
 * failed launch or a failed CUDA call leaves the device and the data in an
 * undefined state, so training on would give wrong numbers silently. Every
 * CUDA and cuBLASLt call is checked: a failure prints file:line, the call and
 * the error string to stderr and aborts the process. pp_cuda_init, which
 * has an error path, returns its failures as values. Kernel faults surface
 * asynchronously, at the next synchronising call; PP_CUDA_SYNC=1
 * synchronises after every launch so that the message names the kernel. */
#ifndef PP_KERNELS_CUDA_H
#define PP_KERNELS_CUDA_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "../ops.h"
}

#ifdef PP_F64
#error "the CUDA backend is fp32 only: it is never built with -DPP_F64"
#endif

/* ---- error checks (abort: see above) ------------------------------------- */

[[noreturn]] void pp_cuda_fatal(const char *file, int line, const char *what, const char *why);
void pp_cuda_check_(cudaError_t err, const char *file, int line, const char *what);
void pp_cublas_check_(cublasStatus_t st, const char *file, int line, const char *what);
void pp_cuda_launched_(const char *file, int line, const char *kernel);

/* a CUDA runtime call */
#define PP_CUDA_CHECK(call) pp_cuda_check_((call), __FILE__, __LINE__, #call)
/* a cuBLAS / cuBLASLt call */
#define PP_CUBLAS_CHECK(call) pp_cublas_check_((call), __FILE__, __LINE__, #call)
/* after each kernel launch: the launch error, with PP_CUDA_SYNC=1 the
 * kernel's own, and with PP_CUDA_PROFILE=1 its mark (profile.cu) */
#define PP_CUDA_LAUNCHED(kernel) pp_cuda_launched_(__FILE__, __LINE__, kernel)
/* a condition an op needs (a supported size); the message says which */
#define PP_CUDA_REQUIRE(cond, ...)                                                                 \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			char why_[256];                                                            \
			snprintf(why_, sizeof why_, __VA_ARGS__);                                  \
			pp_cuda_fatal(__FILE__, __LINE__, #cond, why_);                            \
		}                                                                                  \
	} while (0)

/* ---- state shared by the ops (cuda.cu) ------------------------------------ */

typedef struct {
	int device;
	cublasLtHandle_t lt;
	void *workspace; /* cuBLASLt workspace */
	size_t workspace_bytes;
	int tf32;          /* PP_CUDA_TF32=1: matrix products on TF32 tensor cores */
	int fp8_gemm;      /* FP8 products on FP8 tensor cores (PP_CUDA_FP8_GEMM=0: off) */
	int attention;     /* PP_CUDA_ATTENTION_AUTO (per table), _PLAIN or _CUDNN */
	int sync;          /* PP_CUDA_SYNC=1: synchronise after every launch */
	int num_sms;       /* multiprocessors */
	int capability;    /* compute capability, major * 10 + minor */
	size_t smem_optin; /* the most dynamic shared memory a block may ask for */
	/* The stream the ops of a decoding step launch on: the legacy default
	 * stream (0), or while graph_begin records, the capture stream. */
	cudaStream_t stream;
	int capturing;
	int graphs;  /* executable graphs alive (graph_end, not yet graph_free) */
	int profile; /* PP_CUDA_PROFILE=1: every op marked (profile.cu) */
} pp_cuda_state;

extern pp_cuda_state pp_cuda;

/* Device scratch of at least `bytes`, valid until the next call (it may move
 * when it grows: the old one is freed in stream order, after the ops queued
 * before it, with no wait for the device). For use inside one op, on the
 * compute stream. A recorded graph keeps the pointer, so
 * the scratch cannot grow while one records or lives: the ops run eagerly
 * before (decoding's prompt) must have needed as much. */
void *pp_cuda_scratch(size_t bytes);

/* PP_CUDA_PROFILE=1 (profile.cu): pp_cuda_init starts the profile; every op
 * ends with a mark naming it; the table goes to stderr at exit. */
void pp_cuda_profile_start(void);
void pp_cuda_profile_mark(const char *what);
/* The ops table's timing marks (ops.h; profile.cu): cudaEvents with timing,
 * read against an anchor event whose host time was taken when the device
 * had finished everything before it. */
void pp_cuda_mark_anchor(void);
void *pp_cuda_mark(void);
long long pp_cuda_mark_ns(void *mark);

/* Raises a kernel's dynamic shared-memory limit when it needs more than the
 * default 48 KiB; aborts with a message naming `what` if the device cannot. */
void pp_cuda_smem(const void *kernel, size_t bytes, const char *what);

/* Blocks for a grid-stride loop over n elements with `threads` per block */
static inline unsigned pp_cuda_blocks(size_t n, int threads)
{
	size_t b = (n + (size_t)threads - 1) / (size_t)threads;
	size_t cap = (size_t)(pp_cuda.num_sms > 0 ? pp_cuda.num_sms : 1) * 32;
	return (unsigned)(b < 1 ? 1 : b < cap ? b : cap);
}

/* ---- reductions that give the same bits on every run ----------------------- */

/* Butterfly sum: lane l adds lane l^o's value, so after each step the lanes
 * of a group hold the same value (a + b == b + a): every lane ends with the
 * same bits. */
template <typename T> __device__ __forceinline__ T pp_warp_sum(T v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename T> __device__ __forceinline__ T pp_warp_max(T v)
{
	for (int o = 16; o > 0; o >>= 1) {
		T w = __shfl_xor_sync(0xffffffffu, v, o);
		v = w > v ? w : v;
	}
	return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024),
 * returned to every thread. red: 32 entries of shared memory. Warps sum
 * their lanes, then every warp sums the warp sums in the same order. */
template <typename T> __device__ T pp_block_sum(T v, T *red)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = pp_warp_sum(v);
	__syncthreads(); /* red may still be read by an earlier reduction */
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	return pp_warp_sum(lane < nw ? red[lane] : (T)0);
}

template <typename T> __device__ T pp_block_max(T v, T *red)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = pp_warp_max(v);
	__syncthreads();
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	return pp_warp_max(lane < nw ? red[lane] : red[0]);
}

/* ---- the compute type ------------------------------------------------------ */

typedef __nv_bfloat16 pp_bf16;

/* whether T is bf16: the choices that differ per table (attention, cuBLASLt
 * types) */
template <typename T> struct pp_is_bf16 {
	static constexpr bool value = false;
};
template <> struct pp_is_bf16<pp_bf16> {
	static constexpr bool value = true;
};

/* elements of T in one 16-byte access: 4 floats, 8 bf16 */
#define PP_VEC(T) ((int)(16 / sizeof(T)))

/* pos0 of ops.h: the position an op's pointer holds, NULL for 0 */
__device__ __forceinline__ int pp_pos(const int *pos0) { return pos0 ? *pos0 : 0; }

__device__ __forceinline__ float pp_f(float x) { return x; }
__device__ __forceinline__ float pp_f(pp_bf16 x) { return __bfloat162float(x); }
/* x rounded to T (to nearest even) */
template <typename T> __device__ __forceinline__ T pp_to(float x);
template <> __device__ __forceinline__ float pp_to<float>(float x) { return x; }
template <> __device__ __forceinline__ pp_bf16 pp_to<pp_bf16>(float x)
{
	return __float2bfloat16_rn(x);
}
/* the value a store of x to T keeps */
template <typename T> __device__ __forceinline__ float pp_round(float x)
{
	return pp_f(pp_to<T>(x));
}

/* f[0..PP_VEC(T)) = p[i..) as floats, 0 past n. VEC: one 16-byte load when
 * the whole pack lies below n; the caller guarantees that p + i is then
 * 16-byte aligned. Else element by element. */
template <typename T, bool VEC>
__device__ __forceinline__ void pp_load(float *f, const T *p, size_t i, size_t n)
{
	constexpr int N = PP_VEC(T);
	if (VEC && i + N <= n) {
		const int4 raw = *reinterpret_cast<const int4 *>(p + i);
		T t[N];
		memcpy(t, &raw, sizeof raw);
#pragma unroll
		for (int j = 0; j < N; j++)
			f[j] = pp_f(t[j]);
	} else {
#pragma unroll
		for (int j = 0; j < N; j++)
			f[j] = i + j < n ? pp_f(p[i + j]) : 0.0f;
	}
}

/* p[i..) = f[0..PP_VEC(T)) rounded to T, the elements below n only; VEC as
 * pp_load */
template <typename T, bool VEC>
__device__ __forceinline__ void pp_store(T *p, const float *f, size_t i, size_t n)
{
	constexpr int N = PP_VEC(T);
	if (VEC && i + N <= n) {
		T t[N];
#pragma unroll
		for (int j = 0; j < N; j++)
			t[j] = pp_to<T>(f[j]);
		int4 raw;
		memcpy(&raw, t, sizeof raw);
		*reinterpret_cast<int4 *>(p + i) = raw;
	} else {
#pragma unroll
		for (int j = 0; j < N; j++)
			if (i + j < n)
				p[i + j] = pp_to<T>(f[j]);
	}
}

/* Whether every pointer is 16-byte aligned (NULL, an absent optional
 * tensor, is): the VEC of pp_load and pp_store over flat arrays */
template <typename... P> static inline bool pp_cuda_aligned(const P *...ps)
{
	return ((((uintptr_t)ps) % 16 == 0) && ...);
}

/* Whether the 16-byte packs of rows `len` elements long are aligned in every
 * one of the (row-major) tensors at ps: the VEC of pp_load and pp_store over
 * rows */
template <typename T, typename... P> static inline bool pp_cuda_vec(size_t len, const P *...ps)
{
	return len % PP_VEC(T) == 0 && pp_cuda_aligned(ps...);
}

/* F(true) when cond holds, else F(false): the VEC of a launch */
#define PP_VEC_DISPATCH(cond, F)                                                                   \
	do {                                                                                       \
		if (cond)                                                                          \
			F(true);                                                                   \
		else                                                                               \
			F(false);                                                                  \
	} while (0)

/* out (n) = f(a, b) elementwise, a, b and out of T, computed in float in
 * packs of PP_VEC(T); without b, f's second argument is 0. out may alias a
 * or b. One thread per pack, grid-stride. */
template <typename T, bool VEC, typename F>
__global__ void pp_map_kernel(T *out, const T *a, const T *b, size_t n, F f)
{
	constexpr int P = PP_VEC(T);
	for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * P; i < n;
	     i += (size_t)gridDim.x * blockDim.x * P) {
		float x[P], y[P] = {};
		pp_load<T, VEC>(x, a, i, n);
		if (b)
			pp_load<T, VEC>(y, b, i, n);
#pragma unroll
		for (int j = 0; j < P; j++)
			x[j] = f(x[j], y[j]);
		pp_store<T, VEC>(out, x, i, n);
	}
}

/* Launches pp_map_kernel on pp_cuda.stream; name is its profile row. */
template <typename T, typename F>
static void pp_cuda_map(const char *name, T *out, const T *a, const T *b, size_t n, F f)
{
	if (!n)
		return;
	const unsigned blocks = pp_cuda_blocks((n + PP_VEC(T) - 1) / PP_VEC(T), 256);
#define LAUNCH(VEC) pp_map_kernel<T, VEC, F><<<blocks, 256, 0, pp_cuda.stream>>>(out, a, b, n, f)
	PP_VEC_DISPATCH(pp_cuda_aligned(out, a, b), LAUNCH);
#undef LAUNCH
	PP_CUDA_LAUNCHED(name);
}

/* Instantiates the op template fn for both compute types (the op tables take
 * their addresses in cuda.cu) */
#define PP_CUDA_BOTH(fn)                                                                           \
	template decltype(fn<float>) fn<float>;                                                    \
	template decltype(fn<pp_bf16>) fn<pp_bf16>

/* ---- the ops ------------------------------------------------------------- */
/* Templates over the compute type T (float or pp_bf16) take the pp_act
 * pointers of ops.h, T on the device; pp_real pointers are fp32 in both. */

/* mem.cu */
void *pp_cuda_alloc(size_t bytes);
void pp_cuda_free(void *p);
void pp_cuda_copy(void *dst, const void *src, size_t bytes);
void pp_cuda_zero(void *p, size_t bytes);
void pp_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
		    size_t rows);
/* dst (n) = src (n) converted, device to device, on pp_cuda.stream (a copy
 * when the types agree); D, S: float or pp_bf16 */
template <typename D, typename S> void pp_cuda_convert(D *dst, const S *src, size_t n);
template <typename T> void pp_cuda_to_act(pp_act *dst, const pp_real *src, size_t n);
template <typename T> void pp_cuda_act_to_host(pp_real *host_dst, const pp_act *src, size_t n);

/* vec.cu */
template <typename T> void pp_cuda_add(pp_act *out, const pp_act *a, const pp_act *b, size_t n);
void pp_cuda_add_real(pp_real *out, const pp_real *a, const pp_real *b, size_t n);
void pp_cuda_scale(pp_real *x, pp_real s, size_t n);
template <typename T> void pp_cuda_scale_act(pp_act *x, pp_real s, size_t n);
template <typename T>
void pp_cuda_dropout(pp_act *out, const pp_act *in, int N, int C, const pp_dropout *d);
/* fp8.cu */
template <typename T>
void pp_cuda_fp8_cast(pp_act *out, const pp_act *in, size_t n, const float *scale, int fmt,
		      pp_fp8_tally *tally);
template <typename T> void pp_cuda_absmax(float *amax, const pp_act *x, size_t n, int into);
void pp_cuda_fp8_scale(float *scale, const float *amax, int fmt, float div);
template <typename T>
void pp_cuda_fp8_unscale(void *x, size_t n, int real, const float *sa, const float *sb);
template <typename T>
int pp_cuda_fp8_matmul(int which, void *out, const pp_act *a, const pp_act *b, const float *sa,
		       const float *sb, int N, int C, int OC);
/* matmul.cu: a bias added to every row; the FP8 product fp8.cu's
 * fp8_matmul runs (see there) */
template <typename T> void pp_cuda_add_bias(pp_act *out, const pp_act *bias, int N, int OC);
int pp_cuda_matmul_fp8(void *D, int d_real, const void *A, int a_fmt, const float *a_scale,
		       const void *B, int b_fmt, const float *b_scale, int m, int n, int k,
		       int accumulate);
double pp_cuda_sumsq(const pp_real *x, size_t n);

/* matmul.cu */
template <typename T>
void pp_cuda_matmul_fwd(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias, int N,
			int C, int OC);
template <typename T>
void pp_cuda_matmul_bwd(pp_act *dinp, pp_real *dw, pp_real *dbias, const pp_act *dout,
			const pp_act *inp, const pp_act *w, int N, int C, int OC);
/* pre (N,OC) = inp @ w^T + bias, out = gelu(pre): one product with cuBLASLt's
 * GELU_AUX(_BIAS) epilogue where it applies, else matmul then gelu */
template <typename T>
void pp_cuda_matmul_gelu_fwd(pp_act *out, pp_act *pre, const pp_act *inp, const pp_act *w,
			     const pp_act *bias, int N, int C, int OC);
/* dpre (N,C) = (dout @ w) * gelu'(pre); dw, dbias as matmul_bwd: one product
 * with cuBLASLt's DGELU epilogue where it applies, else matmul then gelu_bwd */
template <typename T>
void pp_cuda_gelu_matmul_bwd(pp_act *dpre, pp_real *dw, pp_real *dbias, const pp_act *dout,
			     const pp_act *inp, const pp_act *pre, const pp_act *w, int N, int C,
			     int OC);
/* Column sums over the N rows of (N,C) matrices of T, into fp32, for dbias
 * and the norms' weight gradients; fixed order, no atomics.
 * dst (C) += sum_n src[n] */
template <typename T> void pp_cuda_colsum(pp_real *dst, const T *src, int N, int C);
/* dw (C) += sum_n dout[n] * x[n] * rstd[n] */
template <typename T>
void pp_cuda_colsum_rms(pp_real *dw, const T *dout, const T *x, const pp_real *rstd, int N, int C);
/* dw (C) += sum_n dout[n] * (x[n] - mean[n]) * rstd[n]; db (C) += sum_n dout[n] */
template <typename T>
void pp_cuda_colsum_ln(pp_real *dw, pp_real *db, const T *dout, const T *x, const pp_real *mean,
		       const pp_real *rstd, int N, int C);

/* moe.cu */
template <typename T>
void pp_cuda_moe_route(int *expert, pp_real *gate, pp_real *prob, pp_real *lse, pp_real *stats,
		       const pp_act *logits, int N, int E, int K, int mode);
void pp_cuda_moe_dispatch(int *rows, int *slot, int *counts, const int *expert, int N, int K, int E,
			  int cap);
template <typename T>
void pp_cuda_moe_gather(pp_act *dst, const pp_act *src, const int *rows, const pp_real *scale,
			int M, int K, int C);
template <typename T>
void pp_cuda_moe_combine(pp_act *out, const pp_act *y, const int *slot, const pp_real *gate, int N,
			 int K, int C);
template <typename T>
void pp_cuda_moe_gate_grad(pp_real *dgate, const pp_act *dout, const pp_act *y, const int *slot,
			   int N, int K, int C);
template <typename T>
void pp_cuda_moe_router_bwd(pp_act *dlogits, const pp_real *dgate, const int *expert,
			    const pp_real *gate, const pp_real *prob, const pp_real *lse,
			    const pp_real *frac, pp_real aux_w, pp_real z_w, int N, int E, int K,
			    int mode);

/* embed.cu */
template <typename T>
void pp_cuda_embed_fwd(pp_act *out, const int *tok, const pp_act *wte, const pp_act *wpe,
		       pp_real scale, int B, int T_, int C, const int *pos0);
template <typename T>
void pp_cuda_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_act *dout, const int *tok,
		       pp_real scale, int B, int T_, int C, const int *pos0);

/* norm.cu */
template <typename T>
void pp_cuda_rmsnorm_fwd(pp_act *out, pp_real *rstd, const pp_act *x, const pp_act *w, pp_real eps,
			 pp_real offset, int N, int C);
template <typename T>
void pp_cuda_rmsnorm_bwd(pp_act *dx, pp_real *dw, const pp_act *dout, const pp_act *x,
			 const pp_act *w, const pp_real *rstd, pp_real offset, int N, int C);
template <typename T>
void pp_cuda_layernorm_fwd(pp_act *out, pp_real *mean, pp_real *rstd, const pp_act *x,
			   const pp_act *w, const pp_act *b, pp_real eps, int N, int C);
template <typename T>
void pp_cuda_layernorm_bwd(pp_act *dx, pp_real *dw, pp_real *db, const pp_act *dout,
			   const pp_act *x, const pp_act *w, const pp_real *mean,
			   const pp_real *rstd, int N, int C);
template <typename T>
void pp_cuda_rmsnorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *rstd, const pp_act *x,
				  const pp_act *y, const pp_act *w, pp_real eps, pp_real offset,
				  int N, int C);
template <typename T>
void pp_cuda_layernorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *mean, pp_real *rstd,
				    const pp_act *x, const pp_act *y, const pp_act *w,
				    const pp_act *b, pp_real eps, int N, int C);

/* rope.cu */
template <typename T>
void pp_cuda_rope_fwd(pp_act *qkv, int B, int T_, int Hq, int Hkv, int D, pp_real theta,
		      const int *pos0);
template <typename T>
void pp_cuda_rope_bwd(pp_act *dqkv, int B, int T_, int Hq, int Hkv, int D, pp_real theta,
		      const int *pos0);

/* attention.cu */
template <typename T>
void pp_cuda_attention_fwd(pp_act *out, pp_real *lse, const pp_act *qkv, int B, int T_, int Hq,
			   int Hkv, int D, int window, const pp_attn_bias *bias);
template <typename T>
void pp_cuda_attention_bwd(pp_act *dqkv, const pp_act *dout, const pp_act *out, const pp_real *lse,
			   const pp_act *qkv, int B, int T_, int Hq, int Hkv, int D, int window,
			   const pp_attn_bias *bias);

/* sdpa_cudnn.cu: the same attention through cuDNN (bf16 inside: T = bf16
 * tensors go to cuDNN as they are, fp32 ones through bf16 copies), with
 * bias's weights (NULL, or no w: none; no doc_pos) and into its dw. They
 * return 1 when cuDNN ran it, 0 when cuDNN does not take the shape (decided
 * once per shape, reported once on stderr): the caller then runs the plain
 * kernels. */
template <typename T>
int pp_cuda_sdpa_fwd(T *out, pp_real *lse, const T *qkv, int B, int T_, int Hq, int Hkv, int D,
		     int window, const pp_attn_bias *bias);
template <typename T>
int pp_cuda_sdpa_bwd(T *dqkv, const T *dout, const T *out, const pp_real *lse, const T *qkv, int B,
		     int T_, int Hq, int Hkv, int D, int window, const pp_attn_bias *bias);

/* mlp.cu */
template <typename T> void pp_cuda_glu_fwd(pp_act *out, const pp_act *gu, int N, int F, int act);
template <typename T>
void pp_cuda_glu_bwd(pp_act *dgu, const pp_act *dout, const pp_act *gu, int N, int F, int act);
template <typename T> void pp_cuda_gelu_fwd(pp_act *out, const pp_act *x, size_t n);
template <typename T>
void pp_cuda_gelu_bwd(pp_act *dx, const pp_act *dout, const pp_act *x, size_t n);

/* loss.cu */
template <typename T>
void pp_cuda_crossentropy(pp_real *losses, pp_act *dlogits, const pp_act *logits,
			  const int *targets, int N, int V, pp_real dscale);
template <typename T>
void pp_cuda_logsumexp_rows(pp_real *lse, pp_real *tgt, const pp_act *logits, const int *targets,
			    int N, int V);
template <typename T>
void pp_cuda_softmax_grad(pp_act *dlogits, const pp_act *logits, const pp_real *lse,
			  const int *targets, int N, int V, pp_real dscale);

/* decode.cu */
template <typename T>
void pp_cuda_kv_append(pp_act *kcache, pp_act *vcache, const pp_act *qkv, int B, int n, int Hq,
		       int Hkv, int D, int Tmax, const int *pos0);
template <typename T>
void pp_cuda_attention_cached(pp_act *out, const pp_act *qkv, const pp_act *kcache,
			      const pp_act *vcache, int B, int n, int Hq, int Hkv, int D, int Tmax,
			      const int *pos0, int window, const pp_attn_bias *bias);
void pp_cuda_graph_begin(void);
void *pp_cuda_graph_end(void);
void pp_cuda_graph_launch(void *graph);
void pp_cuda_graph_free(void *graph);

/* optim.cu */
template <typename T>
void pp_cuda_adamw(pp_real *p, pp_act *pc, const pp_real *g, pp_real *m, pp_real *v, size_t n,
		   float lr, float b1, float b2, float eps, float wd, long t, float gscale);

#endif
