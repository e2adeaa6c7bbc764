/* FP8 casts (kernels/fp8.h: the CPU's rounding, bit for bit) with the amax
 * and counts they record, the amax and scales current scaling casts with
 * (all in device memory: no cast waits for the host), and the products on
 * FP8 tensor cores. */
#include <cuda_fp8.h>

#include "../fp8.h"
#include "cuda.h"

#define THREADS 256

/* max over non-negative floats: their bits order as unsigned ints do */
__device__ __forceinline__ void atomic_max_nonneg(float *p, float v)
{
	atomicMax((unsigned int *)p, __float_as_uint(v));
}

template <typename T>
__global__ void fp8_cast_kernel(T *y, const T *x, size_t n, const float *scale, int fmt,
				pp_fp8_tally *tally)
{
	const float over = pp_fp8_overflow(fmt), sc = *scale;
	float amax = 0;
	unsigned long long sat = 0, flushed = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float v = pp_f(x[i]), s = v * sc, q = pp_fp8_round(s, fmt);
		amax = fabsf(v) > amax ? fabsf(v) : amax;
		sat += fabsf(s) >= over;
		flushed += v != 0 && q == 0;
		y[i] = pp_to<T>(q);
	}
	if (!tally)
		return;
	amax = pp_warp_max(amax);
	sat = pp_warp_sum(sat);
	flushed = pp_warp_sum(flushed);
	if ((threadIdx.x & 31) == 0) {
		atomic_max_nonneg(&tally->amax, amax);
		if (sat)
			atomicAdd(&tally->saturated, sat);
		if (flushed)
			atomicAdd(&tally->flushed, flushed);
	}
}

template <typename T>
void pp_cuda_fp8_cast(pp_act *out, const pp_act *in, size_t n, const float *scale, int fmt,
		      pp_fp8_tally *tally)
{
	if (!n)
		return;
	fp8_cast_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
		(T *)out, (const T *)in, n, scale, fmt, tally);
	PP_CUDA_LAUNCHED("fp8_cast_kernel");
}
PP_CUDA_BOTH(pp_cuda_fp8_cast);

template <typename T> __global__ void absmax_kernel(float *out, const T *x, size_t n)
{
	float amax = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float v = fabsf(pp_f(x[i]));
		amax = v > amax ? v : amax;
	}
	amax = pp_warp_max(amax);
	if ((threadIdx.x & 31) == 0)
		atomic_max_nonneg(out, amax);
}

template <typename T> void pp_cuda_absmax(float *amax, const pp_act *x, size_t n, int into)
{
	if (!into)
		PP_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), pp_cuda.stream));
	if (!n)
		return;
	absmax_kernel<T>
		<<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(amax, (const T *)x, n);
	PP_CUDA_LAUNCHED("absmax_kernel");
}
PP_CUDA_BOTH(pp_cuda_absmax);

__global__ void fp8_scale_kernel(float *scale, const float *amax, int fmt, float div)
{
	scale[0] = pp_fp8_scale(*amax, fmt, div, 1);
	scale[1] = 1.0f / scale[0];
}

void pp_cuda_fp8_scale(float *scale, const float *amax, int fmt, float div)
{
	fp8_scale_kernel<<<1, 1, 0, pp_cuda.stream>>>(scale, amax, fmt, div);
	PP_CUDA_LAUNCHED("fp8_scale_kernel");
}

template <typename T>
__global__ void fp8_unscale_kernel(T *x, size_t n, const float *sa, const float *sb)
{
	const float f = sa[1] * sb[1];
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] = pp_to<T>(pp_f(x[i]) * f);
}

template <typename T>
void pp_cuda_fp8_unscale(void *x, size_t n, int real, const float *sa, const float *sb)
{
	if (!n)
		return;
	if (real)
		fp8_unscale_kernel<float>
			<<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>((float *)x, n,
										     sa, sb);
	else
		fp8_unscale_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
			(T *)x, n, sa, sb);
	PP_CUDA_LAUNCHED("fp8_unscale_kernel");
}
PP_CUDA_BOTH(pp_cuda_fp8_unscale);

/* ---- products on FP8 tensor cores -------------------------------------------------------- */

/* The FP8 byte of v, a value of fmt already (fp8_cast's output): exact. */
__device__ __forceinline__ __nv_fp8_storage_t fp8_byte(float v, int fmt)
{
	return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, fmt == PP_FP8_E5M2 ? __NV_E5M2 : __NV_E4M3);
}

/* dst (n) = the FP8 bytes of src (n) */
template <typename T> __global__ void fp8_pack_kernel(uint8_t *dst, const T *src, size_t n, int fmt)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = fp8_byte(pp_f(src[i]), fmt);
}

/* dst (cols,rows) = the FP8 bytes of src (rows,cols) transposed, through a
 * shared tile of TILE x TILE: reads and writes both along rows */
#define TILE 32
template <typename T>
__global__ void fp8_pack_t_kernel(uint8_t *dst, const T *src, int rows, int cols, int fmt)
{
	__shared__ uint8_t tile[TILE][TILE + 4];
	const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
	for (int y = threadIdx.y; y < TILE; y += blockDim.y) {
		const int r = r0 + y, c = c0 + threadIdx.x;
		if (r < rows && c < cols)
			tile[y][threadIdx.x] = fp8_byte(pp_f(src[(size_t)r * cols + c]), fmt);
	}
	__syncthreads();
	for (int y = threadIdx.y; y < TILE; y += blockDim.y) {
		const int c = c0 + y, r = r0 + threadIdx.x;
		if (r < rows && c < cols)
			dst[(size_t)c * rows + r] = tile[threadIdx.x][y];
	}
}

/* src (rows,cols) T into FP8 bytes at dst, transposed or not */
template <typename T>
static void fp8_pack(uint8_t *dst, const pp_act *src, int rows, int cols, int fmt, bool transpose)
{
	if (!transpose) {
		const size_t n = (size_t)rows * cols;
		fp8_pack_kernel<T><<<pp_cuda_blocks(n, THREADS), THREADS, 0, pp_cuda.stream>>>(
			dst, (const T *)src, n, fmt);
		PP_CUDA_LAUNCHED("fp8_pack_kernel");
		return;
	}
	const dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE), block(TILE, 8);
	fp8_pack_t_kernel<T>
		<<<grid, block, 0, pp_cuda.stream>>>(dst, (const T *)src, rows, cols, fmt);
	PP_CUDA_LAUNCHED("fp8_pack_t_kernel");
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* an operand of the product: src (rows,cols) of format fmt, packed
 * transposed or not */
typedef struct {
	const pp_act *src;
	int rows, cols, fmt;
	bool transpose;
} operand;

/* ops->fp8_matmul (ops.h) with cuBLASLt's FP8 products, which take A
 * transposed and B not (column-major), K-contiguous both:
 *   FWD    out^T (OC,N)  = w (C,OC)^T x^T (C,N): x and w as they are;
 *   DGRAD  din^T (C,N)   = (w^T) (OC,C)^T g^T (OC,N): w transposed, g as is;
 *   WGRAD  dw^T (C,OC)  += (x^T) (N,C)^T (g^T) (N,OC): x and g transposed.
 * The inputs, FP8 values held in bf16, are packed into FP8 bytes (exactly)
 * in the scratch first; the scales divide out as the product's A and B
 * scales, their inverses (sa[1], sb[1]) read from device memory. bf16 tables on
 * sm_89 and later only, every dimension a multiple of 16 (cuBLASLt's FP8
 * kernels want 16-byte leading dimensions); 0 otherwise, or when cuBLASLt
 * has no algorithm. */
template <typename T>
int pp_cuda_fp8_matmul(int which, void *out, const pp_act *a, const pp_act *b, const float *sa,
		       const float *sb, int N, int C, int OC)
{
	if (!pp_is_bf16<T>::value || !pp_cuda.fp8_gemm || pp_cuda.capability < 89 || N % 16 ||
	    C % 16 || OC % 16 || N <= 0 || C <= 0 || OC <= 0 || which < PP_FP8MM_FWD ||
	    which > PP_FP8MM_WGRAD)
		return 0;
	const int E4M3 = PP_FP8_E4M3, E5M2 = PP_FP8_E5M2;
	/* A, B and D's m, n, k per product: a is x (FWD) or g, b is w or x
	 * (WGRAD); A is b, B is a */
	const struct {
		operand A, B;
		int m, n, k, wgrad;
	} p[] = {
		[PP_FP8MM_FWD] = {{b, OC, C, E4M3, false}, {a, N, C, E4M3, false}, OC, N, C, 0},
		[PP_FP8MM_DGRAD] = {{b, OC, C, E4M3, true}, {a, N, OC, E5M2, false}, C, N, OC, 0},
		[PP_FP8MM_WGRAD] = {{b, N, C, E4M3, true}, {a, N, OC, E5M2, true}, C, OC, N, 1},
	};
	const auto &q = p[which];
	const size_t na = round256((size_t)q.A.rows * q.A.cols);
	uint8_t *s = (uint8_t *)pp_cuda_scratch(na + (size_t)q.B.rows * q.B.cols);
	fp8_pack<T>(s, q.A.src, q.A.rows, q.A.cols, q.A.fmt, q.A.transpose);
	fp8_pack<T>(s + na, q.B.src, q.B.rows, q.B.cols, q.B.fmt, q.B.transpose);
	return pp_cuda_matmul_fp8(out, q.wgrad, s, q.A.fmt, sb + 1, s + na, q.B.fmt, sa + 1, q.m,
				  q.n, q.k, q.wgrad);
}
PP_CUDA_BOTH(pp_cuda_fp8_matmul);
