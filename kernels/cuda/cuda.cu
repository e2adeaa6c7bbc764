/* The CUDA backend: kernels in plain CUDA over the compute type (fp32 or
 * bf16), matrix products through cuBLASLt, attention through cuDNN or the
 * plain kernels, checked op by op against the CPU backend
 * (tests/gpu/tool_cuda_check.c). This file holds the two op tables, device
 * selection and the error checks; see cuda.h for the execution, numerics,
 * determinism and error conventions. */
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

pp_cuda_state pp_cuda = {-1, NULL, NULL, 0, 0, 1, PP_CUDA_ATTENTION_AUTO, 0, 0, 0, 0, 0, 0, 0, 0};

/* 32 MiB: what cuBLASLt's heuristics want for their largest kernels on Hopper */
#define WORKSPACE_BYTES ((size_t)32 << 20)

static int ready;
static char device_name[256];

/* ---- errors --------------------------------------------------------------- */

void pp_cuda_fatal(const char *file, int line, const char *what, const char *why)
{
	fprintf(stderr, "pp: cuda backend: %s:%d: %s: %s\n", file, line, what, why);
	if (pp_cuda.capturing)
		fprintf(stderr, "pp: cuda backend: this happened while a CUDA graph recorded a "
				"decoding step (PP_CUDA_GRAPH=0 decodes without graphs)\n");
	fprintf(stderr, "pp: cuda backend: aborting: an op has no error path, and after a "
			"failed CUDA call the device state is undefined\n");
	fflush(stderr);
	abort();
}

void pp_cuda_check_(cudaError_t err, const char *file, int line, const char *what)
{
	if (err == cudaSuccess)
		return;
	char why[256];
	snprintf(why, sizeof why, "%s (CUDA error %d)", cudaGetErrorString(err), (int)err);
	pp_cuda_fatal(file, line, what, why);
}

void pp_cublas_check_(cublasStatus_t st, const char *file, int line, const char *what)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return;
	char why[256];
	snprintf(why, sizeof why, "%s (cuBLAS status %d)", cublasLtGetStatusString(st), (int)st);
	pp_cuda_fatal(file, line, what, why);
}

void pp_cuda_launched_(const char *file, int line, const char *kernel)
{
	pp_cuda_check_(cudaGetLastError(), file, line, kernel);
	/* the compute stream only: the whole device would wait for NCCL kernels
	 * that wait for their peers (libcommon/comm/nccl.c) */
	if (pp_cuda.sync && !pp_cuda.capturing) /* a recorded launch has not run */
		pp_cuda_check_(cudaStreamSynchronize(pp_cuda.stream), file, line, kernel);
	pp_cuda_profile_mark(kernel);
}

/* ---- shared resources ------------------------------------------------------ */

static void *scratch;
static size_t scratch_bytes;

void *pp_cuda_scratch(size_t bytes)
{
	if (bytes <= scratch_bytes)
		return scratch;
	size_t want = bytes > 2 * scratch_bytes ? bytes : 2 * scratch_bytes;
	want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
	PP_CUDA_REQUIRE(!pp_cuda.capturing && !pp_cuda.graphs,
			"an op needs %zu bytes of scratch while a graph records or lives (the "
			"step must not need more than the ops before it)",
			bytes);
	/* Stream-ordered: the old buffer goes back once the ops queued before
	 * have run, and nothing waits for the device. A cudaFree (or a device
	 * synchronisation) here would wait for NCCL kernels in flight beside
	 * the compute stream, which may wait for peers that wait for us
	 * (libcommon/comm/nccl.c). Every op uses the scratch on the compute
	 * stream, cuDNN's included. */
	if (scratch) {
		PP_CUDA_CHECK(cudaFreeAsync(scratch, pp_cuda.stream));
		scratch = NULL;
		scratch_bytes = 0;
	}
	PP_CUDA_CHECK(cudaMallocAsync(&scratch, want, pp_cuda.stream));
	scratch_bytes = want;
	return scratch;
}

void pp_cuda_smem(const void *kernel, size_t bytes, const char *what)
{
	if (bytes <= 48 * 1024)
		return;
	if (bytes > pp_cuda.smem_optin) {
		char why[256];
		snprintf(why, sizeof why,
			 "needs %zu bytes of shared memory per block; this GPU allows %zu", bytes,
			 pp_cuda.smem_optin);
		pp_cuda_fatal(__FILE__, __LINE__, what, why);
	}
	PP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					   (int)bytes));
}

/* ---- device selection ------------------------------------------------------ */

/* The kernel that pp_cuda_init asks the runtime about: it fails to load when
 * the build holds no machine code for the device. */
__global__ void pp_cuda_probe(int *x)
{
	if (x)
		*x = 0;
}

static int env_flag(const char *name)
{
	const char *v = getenv(name);
	return v && *v && strcmp(v, "0") != 0;
}

void pp_cuda_set_attention(int mode)
{
	pp_cuda.attention = mode == PP_CUDA_ATTENTION_CUDNN || mode == PP_CUDA_ATTENTION_PLAIN
				    ? mode
				    : PP_CUDA_ATTENTION_AUTO;
}

int pp_cuda_init(int device, pp_err *e)
{
	if (ready) {
		if (device == pp_cuda.device)
			return 0;
		return pp_errorf(
			e, PP_EUSAGE,
			"device=cuda: this process already drives GPU %d (asked for GPU %d): "
			"one process, one GPU",
			pp_cuda.device, device);
	}
	const char *att = getenv("PP_CUDA_ATTENTION");
	int attention = PP_CUDA_ATTENTION_AUTO;
	if (att && *att) {
		if (!strcmp(att, "plain"))
			attention = PP_CUDA_ATTENTION_PLAIN;
		else if (!strcmp(att, "cudnn"))
			attention = PP_CUDA_ATTENTION_CUDNN;
		else
			return pp_errorf(
				e, PP_EUSAGE,
				"PP_CUDA_ATTENTION=%s: expected cudnn (cuDNN flash attention, "
				"bf16 inside) or plain (the flash-style kernels of the backend); "
				"unset, the bf16 table uses cuDNN and the fp32 table the plain "
				"kernels",
				att);
	}
	int n = 0;
	cudaError_t q = cudaGetDeviceCount(&n);
	if (q == cudaSuccess && n == 0)
		q = cudaErrorNoDevice;
	if (q != cudaSuccess) {
		(void)cudaGetLastError();
		return pp_errorf(
			e, PP_EUSAGE,
			"device=cuda: no usable CUDA device: %s (CUDA error %d); check the GPU "
			"and its driver with nvidia-smi, or train with device=cpu",
			cudaGetErrorString(q), (int)q);
	}
	if (device < 0 || device >= n) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		return pp_errorf(
			e, PP_EUSAGE,
			"device=cuda: no usable CUDA device: this rank needs GPU %d but sees %d%s%s%s "
			"(ranks on a node use one GPU each)",
			device, n, vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "",
			vis ? ")" : "");
	}
	cudaDeviceProp prop;
	if ((q = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
	    (q = cudaSetDevice(device)) != cudaSuccess) {
		(void)cudaGetLastError();
		return pp_errorf(e, PP_ERUNTIME,
				 "device=cuda: cannot use GPU %d: %s (CUDA error %d)", device,
				 cudaGetErrorString(q), (int)q);
	}
	cudaFuncAttributes fa;
	if (prop.major < 8 || (q = cudaFuncGetAttributes(&fa, pp_cuda_probe)) != cudaSuccess) {
		(void)cudaGetLastError();
		return pp_errorf(
			e, PP_EUSAGE,
			"device=cuda: GPU %d (%s) has compute capability %d.%d: this build of pp "
			"holds kernels for 8.x (sm_80) and 9.0 (sm_90)%s%s",
			device, prop.name, prop.major, prop.minor, q != cudaSuccess ? ": " : "",
			q != cudaSuccess ? cudaGetErrorString(q) : "");
	}
	cublasStatus_t st = cublasLtCreate(&pp_cuda.lt);
	if (st != CUBLAS_STATUS_SUCCESS)
		return pp_errorf(e, PP_ERUNTIME, "device=cuda: GPU %d (%s): cuBLASLt: %s", device,
				 prop.name, cublasLtGetStatusString(st));
	if ((q = cudaMalloc(&pp_cuda.workspace, WORKSPACE_BYTES)) != cudaSuccess) {
		(void)cudaGetLastError();
		cublasLtDestroy(pp_cuda.lt);
		return pp_errorf(e, PP_ERUNTIME,
				 "device=cuda: GPU %d (%s): cannot allocate the %zu MiB cuBLASLt "
				 "workspace: %s",
				 device, prop.name, WORKSPACE_BYTES >> 20, cudaGetErrorString(q));
	}
	pp_cuda.device = device;
	pp_cuda.workspace_bytes = WORKSPACE_BYTES;
	pp_cuda.tf32 = env_flag("PP_CUDA_TF32");
	pp_cuda.fp8_gemm = !getenv("PP_CUDA_FP8_GEMM") || env_flag("PP_CUDA_FP8_GEMM");
	pp_cuda.attention = attention;
	pp_cuda.sync = env_flag("PP_CUDA_SYNC");
	pp_cuda.num_sms = prop.multiProcessorCount;
	pp_cuda.capability = prop.major * 10 + prop.minor;
	pp_cuda.smem_optin = prop.sharedMemPerBlockOptin;
	snprintf(device_name, sizeof device_name, "%s", prop.name);
	if (env_flag("PP_CUDA_PROFILE"))
		pp_cuda_profile_start();
	ready = 1;
	return 0;
}

const char *pp_cuda_device_name(void) { return ready ? device_name : NULL; }

int pp_cuda_capability(void) { return ready ? pp_cuda.capability : 0; }

int pp_cuda_memory(size_t *free_bytes, size_t *total_bytes)
{
	return ready && cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? 0 : -1;
}

/* ---- the tables ------------------------------------------------------------ */

/* One table per compute type, over the same op templates */
#define PP_CUDA_TABLE(T)                                                                           \
	.alloc = pp_cuda_alloc, .free = pp_cuda_free, .to_device = pp_cuda_copy,                   \
	.to_host = pp_cuda_copy, .zero = pp_cuda_zero, .copy2d = pp_cuda_copy2d,                   \
	.to_act = pp_cuda_to_act<T>, .act_to_host = pp_cuda_act_to_host<T>,                        \
	.matmul_fwd = pp_cuda_matmul_fwd<T>, .add_bias = pp_cuda_add_bias<T>,                      \
	.matmul_bwd = pp_cuda_matmul_bwd<T>, .matmul_gelu_fwd = pp_cuda_matmul_gelu_fwd<T>,        \
	.gelu_matmul_bwd = pp_cuda_gelu_matmul_bwd<T>, .embed_fwd = pp_cuda_embed_fwd<T>,          \
	.embed_bwd = pp_cuda_embed_bwd<T>, .rmsnorm_fwd = pp_cuda_rmsnorm_fwd<T>,                  \
	.rmsnorm_bwd = pp_cuda_rmsnorm_bwd<T>, .layernorm_fwd = pp_cuda_layernorm_fwd<T>,          \
	.layernorm_bwd = pp_cuda_layernorm_bwd<T>,                                                 \
	.rmsnorm_residual_fwd = pp_cuda_rmsnorm_residual_fwd<T>,                                   \
	.layernorm_residual_fwd = pp_cuda_layernorm_residual_fwd<T>,                               \
	.rope_fwd = pp_cuda_rope_fwd<T>, .rope_bwd = pp_cuda_rope_bwd<T>,                          \
	.attention_fwd = pp_cuda_attention_fwd<T>, .attention_bwd = pp_cuda_attention_bwd<T>,      \
	.kv_append = pp_cuda_kv_append<T>, .attention_cached = pp_cuda_attention_cached<T>,        \
	.graph_begin = pp_cuda_graph_begin, .graph_end = pp_cuda_graph_end,                        \
	.graph_launch = pp_cuda_graph_launch, .graph_free = pp_cuda_graph_free,                    \
	.pack_weight = nullptr, .matmul_packed = nullptr, /* decoding reads the compute copy */    \
		.glu_fwd = pp_cuda_glu_fwd<T>, .glu_bwd = pp_cuda_glu_bwd<T>,                      \
	.gelu_fwd = pp_cuda_gelu_fwd<T>, .gelu_bwd = pp_cuda_gelu_bwd<T>, .add = pp_cuda_add<T>,   \
	.add_real = pp_cuda_add_real, .scale = pp_cuda_scale, .scale_act = pp_cuda_scale_act<T>,   \
	.dropout = pp_cuda_dropout<T>, .fp8_cast = pp_cuda_fp8_cast<T>,                            \
	.absmax = pp_cuda_absmax<T>, .fp8_scale = pp_cuda_fp8_scale,                               \
	.fp8_unscale = pp_cuda_fp8_unscale<T>, .fp8_matmul = pp_cuda_fp8_matmul<T>,                \
	.sumsq = pp_cuda_sumsq, .crossentropy = pp_cuda_crossentropy<T>,                           \
	.logsumexp_rows = pp_cuda_logsumexp_rows<T>, .softmax_grad = pp_cuda_softmax_grad<T>,      \
	.moe_route = pp_cuda_moe_route<T>, .moe_dispatch = pp_cuda_moe_dispatch,                   \
	.moe_gather = pp_cuda_moe_gather<T>, .moe_combine = pp_cuda_moe_combine<T>,                \
	.moe_gate_grad = pp_cuda_moe_gate_grad<T>, .moe_router_bwd = pp_cuda_moe_router_bwd<T>,    \
	.adamw = pp_cuda_adamw<T>, .mark_anchor = pp_cuda_mark_anchor, .mark = pp_cuda_mark,       \
	.mark_ns = pp_cuda_mark_ns

const pp_ops pp_ops_cuda = {
	.name = "cuda",
	.act_type = PP_TYPE_REAL,
	PP_CUDA_TABLE(float),
};

const pp_ops pp_ops_cuda_bf16 = {
	.name = "cuda",
	.act_type = PP_TYPE_BF16,
	PP_CUDA_TABLE(pp_bf16),
};
