/* Causal attention through cuDNN's fused flash attention (SDPA), built with
 * the cuDNN 9 backend API: tensor and operation descriptors, an operation
 * graph, engine heuristics, an execution plan, a variant pack.
 *
 * The graph is the pattern that cuDNN's runtime fusion engines recognise as
 * scaled dot-product attention (cuDNN 9.0 and later, sm_80 and newer):
 *
 *   forward   S = Q @ K^T (fp32), S *= scale, S += bias (with a bias
 *             by distance), causal mask (row >= col),
 *             sliding-window mask (col + window > row), softmax with its
 *             statistics (max, sub, exp, sum, log, add: Stats = max +
 *             log(sum exp(S - max)), natural log of the scaled, masked
 *             scores), P = exp / sum, O = P @ V.
 *   backward  softmax_sum = rowsum(dO * O); P = exp(scale Q K^T [+ bias]
 *             - Stats) masked; dV = P^T @ dO; dS = P * (dO @ V^T -
 *             softmax_sum) [summed over the batch: dBias] * scale; dK =
 *             dS^T @ Q; dQ = dS @ K (see Determinism).
 *             Grouped kv heads: dK, dV are formed per query head and summed
 *             over each group by a reduction.
 *
 * cuDNN's dedicated SDPA operations (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD)
 * take no causal or band mask before cuDNN 9.21, so this file uses the
 * pattern. Masks are the pre-9.21 pointwise form: generated row and column
 * indices, a comparison, a binary select of -inf (of the lowest float
 * before 9.10, as cudnn-frontend does).
 *
 * Layouts: Q, K, V are read in place from the packed rows of qkv
 * (B,T,(Hq+2Hkv)*D) through strided (B,H,T,D) descriptors (K as the
 * transposed (B,Hkv,D,T) view); dQ, dK, dV are written the same way into a
 * packed dqkv. O and dO are (B,T,Hq*D); Stats is our lse (B,Hq,T): cuDNN's
 * statistics are exactly our convention, so lse is copied as it is (through
 * a 16-byte aligned buffer where it is not aligned: a layer's lse inside
 * the model's saved activations need not be).
 *
 * Precision: cuDNN's flash kernels take bf16 (or fp16) operands with fp32
 * accumulation and fp32 statistics. The bf16 table hands its tensors to
 * cuDNN as they are (the pointers into the packed rows); the fp32 table
 * rounds q, k, v (and out, dout in the backward) to bf16 copies on the way
 * in and widens the results on the way out, so it agrees with the fp32
 * kernels to about 1e-2 relative (hence the plain kernels are its default).
 * A bf16 tensor that is not 16-byte aligned (cuDNN's promise below) goes
 * through an aligned copy.
 *
 * Determinism: written with dQ = dS @ K going through an fp32 accumulator
 * tensor (B,Hq,T,D), the graph matches cuDNN's atomic-add kernels, whose
 * dq differs in the last bits from run to run. Written with dQ straight
 * into its bf16 output, it matches the deterministic form (cudnn-frontend's
 * deterministic sdpa_backward on Hopper): the kernels keep dP in a
 * workspace of about B*Hq*T^2*2 bytes (T rounded up to 64) instead. pp
 * builds that form by default, and takes it only with an engine free of
 * the NONDETERMINISTIC note; a shape whose dP workspace is over
 * PP_CUDNN_DP_WORKSPACE_MIB (default: an eighth of the GPU's memory), or
 * that no deterministic engine takes, runs the plain kernels, with the
 * reason on stderr. PP_CUDA_DETERMINISTIC=0 builds the accumulator form
 * instead, faster and smaller, not bitwise repeatable.
 *
 * Bias by distance (GLaM's relative positions, ops.h's pp_attn_bias): cuDNN
 * takes an additive bias of the scores and returns its gradient only as
 * whole (1,Hq,T,T) bf16 tensors, so the (Hq,buckets) weights are spread
 * over one before the forward and the backward (bias_fill_kernel), and the
 * backward's dBias is summed back per bucket after it: along each diagonal
 * (one distance), then over the distances of each bucket, in a fixed order
 * (dbias_diag_kernel, dbias_bucket_kernel). cuDNN computes dBias only in
 * the deterministic form (the dP workspace); PP_CUDA_DETERMINISTIC=0 runs
 * attention with a bias on the plain kernels.
 *
 * Fallback: a shape (B,T,Hq,Hkv,D,window) cuDNN rejects (version too old,
 * head dim for this GPU, one token, no engine, a failed finalize) is
 * decided once per direction, cached and reported once on stderr; the
 * caller then runs the plain kernels. A failure while executing a built
 * plan is fatal like any other failed CUDA call (see cuda.h). */
#include <cuda_bf16.h>
#include <cudnn_graph.h>
#include <float.h>

#include "../optable.h"
#include "cuda.h"

/* cuDNN versions (cudnnGetVersion: major*10000 + minor*100 + patch) */
#define SDPA_MIN_VERSION       90000 /* the flash-attention fusion engines of cuDNN 9 */
#define SDPA_BAD_LO            91000 /* 9.10.0 and 9.10.1: known wrong bf16 results, */
#define SDPA_BAD_HI            91001 /* forward and backward */
#define SDPA_WIDE_D_VERSION    91000 /* before: the forward takes head dims > 128 on sm_90 only */
#define SDPA_FWD_ONE_T_VERSION 91000 /* before: the masked forward does not take T == 1 */
#define SDPA_BWD_ANY_T_VERSION 91600 /* before: the backward needs T % 128 == 0 */
#define SDPA_INF_MASK_VERSION  91000 /* before: masks fill with the lowest float, not -inf */

#define SDPA_CACHE   16 /* shapes with cached plans */
#define SDPA_MAXDESC 128
#define SDPA_MAXOPS  48
#define SDPA_MAXCFG  16 /* engine configurations tried per graph */

enum { FWD = 0, BWD = 1 };
enum { UNKNOWN = 0, READY = 1, REJECTED = 2 };

/* tensor ids of the variant packs */
enum {
	UID_Q = 1,
	UID_K,
	UID_V,
	UID_O,
	UID_STATS,
	UID_SCALE,
	UID_NEG_INF,
	UID_WINDOW,
	UID_DO,
	UID_DQ,
	UID_DK,
	UID_DV,
	UID_SOFTMAX_SUM,
	UID_DQ_ACCUM,
	UID_ONE,
	UID_BIAS,
	UID_DBIAS,
	UID_VIRTUAL = 100 /* virtual tensors count up from here */
};

/* One graph under construction, and then its plan: every descriptor it
 * created (destroyed together), the first failure (sticky: later calls do
 * nothing, so a build reads straight through and is checked once). */
typedef struct {
	cudnnBackendDescriptor_t desc[SDPA_MAXDESC];
	int ndesc;
	cudnnBackendDescriptor_t ops[SDPA_MAXOPS];
	int nops;
	int64_t next_uid;
	int failed;
	char why[256];
	cudnnBackendDescriptor_t plan;
	int64_t ws;        /* the plan's workspace bytes */
	int deterministic; /* the plan's engine carries no NONDETERMINISTIC note */
	int acc;           /* backward: dQ through the fp32 accumulator (not deterministic) */
} sdpa_graph;

typedef struct {
	int B, T, Hq, Hkv, D, window;
	int bias; /* with a bias by distance (its gradient in the backward) */
} sdpa_shape;

typedef struct {
	sdpa_shape s;
	int used;
	unsigned long last; /* for eviction: least recently used goes */
	int state[2];       /* per direction: UNKNOWN, READY, REJECTED */
	sdpa_graph *g[2];
	char why[2][256]; /* why cuDNN rejected it */
} sdpa_entry;

static cudnnHandle_t handle;
static int handle_state; /* UNKNOWN, READY, REJECTED */
static char handle_why[256];
static size_t version;
static int sm_major;          /* the device's compute capability, major */
static int deterministic = 1; /* PP_CUDA_DETERMINISTIC, default on */
static int64_t dp_limit;      /* PP_CUDNN_DP_WORKSPACE_MIB, in bytes */
static sdpa_entry cache[SDPA_CACHE];
static unsigned long clock_;

/* ---- descriptors, with the first failure recorded ------------------------------- */

static int failed_(sdpa_graph *g, cudnnStatus_t st, const char *step, const char *what)
{
	if (st == CUDNN_STATUS_SUCCESS)
		return 0;
	if (!g->failed) {
		g->failed = 1;
		snprintf(g->why, sizeof g->why, "%s: %s: %s (cudnnStatus %d)", step, what,
			 cudnnGetErrorString(st), (int)st);
	}
	return 1;
}

static cudnnBackendDescriptor_t make(sdpa_graph *g, cudnnBackendDescriptorType_t type,
				     const char *step)
{
	cudnnBackendDescriptor_t d = NULL;
	if (g->failed)
		return NULL;
	if (g->ndesc == SDPA_MAXDESC) {
		g->failed = 1;
		snprintf(g->why, sizeof g->why, "%s: more than %d descriptors", step, SDPA_MAXDESC);
		return NULL;
	}
	if (failed_(g, cudnnBackendCreateDescriptor(type, &d), step,
		    "cudnnBackendCreateDescriptor"))
		return NULL;
	g->desc[g->ndesc++] = d;
	return d;
}

static void set(sdpa_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr,
		cudnnBackendAttributeType_t type, int64_t n, const void *value, const char *step)
{
	if (g->failed)
		return;
	char what[64];
	snprintf(what, sizeof what, "cudnnBackendSetAttribute(attribute %d)", (int)attr);
	failed_(g, cudnnBackendSetAttribute(d, attr, type, n, value), step, what);
}

static void finalize(sdpa_graph *g, cudnnBackendDescriptor_t d, const char *step)
{
	if (!g->failed)
		failed_(g, cudnnBackendFinalize(d), step, "cudnnBackendFinalize");
}

static void graph_free(sdpa_graph *g)
{
	if (!g)
		return;
	if (g->plan)
		cudnnBackendDestroyDescriptor(g->plan);
	for (int i = g->ndesc - 1; i >= 0; i--)
		cudnnBackendDestroyDescriptor(g->desc[i]);
	free(g);
}

/* A tensor of 4 dims. by_value: a host scalar passed in the variant pack. */
static cudnnBackendDescriptor_t tensor(sdpa_graph *g, int64_t uid, cudnnDataType_t type,
				       const int64_t *dim, const int64_t *stride, bool is_virtual,
				       bool by_value, const char *name)
{
	const int64_t align = 16;
	cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, name);
	set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, name);
	set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, name);
	set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, name);
	set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, name);
	set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, name);
	set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, name);
	if (by_value)
		set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, name);
	finalize(g, t, name);
	return t;
}

/* a virtual (intermediate) tensor: dims and strides given */
static cudnnBackendDescriptor_t vtensor(sdpa_graph *g, cudnnDataType_t type, int64_t d0, int64_t d1,
					int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2,
					int64_t s3, const char *name)
{
	const int64_t dim[4] = {d0, d1, d2, d3}, stride[4] = {s0, s1, s2, s3};
	return tensor(g, g->next_uid++, type, dim, stride, true, false, name);
}

/* a host scalar of the variant pack */
static cudnnBackendDescriptor_t scalar(sdpa_graph *g, int64_t uid, const char *name)
{
	const int64_t one[4] = {1, 1, 1, 1};
	return tensor(g, uid, CUDNN_DATA_FLOAT, one, one, false, true, name);
}

static void add_op(sdpa_graph *g, cudnnBackendDescriptor_t op, const char *step)
{
	if (g->failed)
		return;
	if (g->nops == SDPA_MAXOPS) {
		g->failed = 1;
		snprintf(g->why, sizeof g->why, "%s: more than %d operations", step, SDPA_MAXOPS);
		return;
	}
	g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]) computed in `prec`; axis >= 0 for GEN_INDEX */
static void pointwise(sdpa_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
		      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis,
		      const char *name)
{
	cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name);
	set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, name);
	set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, name);
	if (axis >= 0)
		set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, name);
	finalize(g, pw, name);
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
	set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	    &pw, name);
	set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    name);
	if (b)
		set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		    &b, name);
	if (t)
		set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		    &t, name);
	set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    name);
	finalize(g, op, name);
	add_op(g, op, name);
}

/* c = a @ b over the two last dims, batched over the first two (broadcast
 * where b has fewer heads: grouped kv heads), fp32 accumulation */
static void matmul(sdpa_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
		   cudnnBackendDescriptor_t c, const char *name)
{
	const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, name);
	set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, name);
	finalize(g, mm, name);
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, name);
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, name);
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, name);
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, name);
	finalize(g, op, name);
	add_op(g, op, name);
}

/* y = reduce(x) over the dims where y has extent 1 (or fewer heads) */
static void reduction(sdpa_graph *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t y, const char *name)
{
	const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name);
	set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how,
	    name);
	set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, name);
	finalize(g, rd, name);
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
	set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    name);
	set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    name);
	set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd,
	    name);
	finalize(g, op, name);
	add_op(g, op, name);
}

/* y: the same elements as x seen through other dims and strides */
static void reshape(sdpa_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
		    const char *name)
{
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
	set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, name);
	set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, name);
	finalize(g, op, name);
	add_op(g, op, name);
}

/* The causal and sliding-window masks on scores s (B,Hq,T,T) fp32: entries
 * outside i - window < j <= i become -inf. Returns the masked scores. */
static cudnnBackendDescriptor_t mask(sdpa_graph *g, const sdpa_shape *s,
				     cudnnBackendDescriptor_t sc, cudnnBackendDescriptor_t neg_inf,
				     cudnnBackendDescriptor_t window)
{
	const int64_t B = s->B, H = s->Hq, T = s->T;
#define SCORES(type, name) vtensor(g, type, B, H, T, T, H *T *T, T *T, T, 1, name)
	/* right bound: keep row >= col */
	cudnnBackendDescriptor_t row = SCORES(CUDNN_DATA_INT32, "causal mask: row index");
	cudnnBackendDescriptor_t col = SCORES(CUDNN_DATA_INT32, "causal mask: column index");
	cudnnBackendDescriptor_t keep = SCORES(CUDNN_DATA_BOOLEAN, "causal mask: row >= col");
	cudnnBackendDescriptor_t out = SCORES(CUDNN_DATA_FLOAT, "causal mask: masked scores");
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, sc, NULL, NULL, row, 2,
		  "causal mask: row index");
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, sc, NULL, NULL, col, 3,
		  "causal mask: column index");
	pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1,
		  "causal mask: row >= col");
	pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, sc, neg_inf, keep, out, -1,
		  "causal mask: select");
	if (!window)
		return out;
	/* left bound: keep col + window > row */
	cudnnBackendDescriptor_t in = out;
	row = SCORES(CUDNN_DATA_INT32, "window mask: row index");
	col = SCORES(CUDNN_DATA_INT32, "window mask: column index");
	cudnnBackendDescriptor_t colw = SCORES(CUDNN_DATA_FLOAT, "window mask: col + window");
	keep = SCORES(CUDNN_DATA_BOOLEAN, "window mask: col + window > row");
	out = SCORES(CUDNN_DATA_FLOAT, "window mask: masked scores");
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, in, NULL, NULL, row, 2,
		  "window mask: row index");
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, in, NULL, NULL, col, 3,
		  "window mask: column index");
	pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, col, window, NULL, colw, 3,
		  "window mask: col + window");
	pointwise(g, CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, colw, row, NULL, keep, -1,
		  "window mask: col + window > row");
	pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, in, neg_inf, keep, out, -1,
		  "window mask: select");
#undef SCORES
	return out;
}

/* whether the graph needs the window mask: a window of T or more masks
 * nothing the causal mask leaves */
static int has_window(const sdpa_shape *s) { return s->window > 0 && s->window < s->T; }

/* The tensors read from and written to qkv-shaped rows, (B,H,T,D) views at
 * head offset `head` (in units of D) of rows ld elements long; transposed:
 * the (B,H,D,T) view. */
static cudnnBackendDescriptor_t qkv_view(sdpa_graph *g, int64_t uid, const sdpa_shape *s, int H,
					 int transposed, const char *name)
{
	const int64_t T = s->T, D = s->D, ld = (int64_t)(s->Hq + 2 * s->Hkv) * D;
	const int64_t dim[4] = {s->B, H, transposed ? D : T, transposed ? T : D};
	const int64_t stride[4] = {T * ld, D, transposed ? 1 : ld, transposed ? ld : 1};
	return tensor(g, uid, CUDNN_DATA_BFLOAT16, dim, stride, false, false, name);
}

/* out-shaped rows (B,T,Hq*D) as (B,Hq,T,D) */
static cudnnBackendDescriptor_t out_view(sdpa_graph *g, int64_t uid, const sdpa_shape *s,
					 const char *name)
{
	const int64_t T = s->T, D = s->D, H = s->Hq;
	const int64_t dim[4] = {s->B, H, T, D}, stride[4] = {T * H * D, D, H * D, 1};
	return tensor(g, uid, CUDNN_DATA_BFLOAT16, dim, stride, false, false, name);
}

/* lse (B,Hq,T) as (B,Hq,T,1) fp32 */
static cudnnBackendDescriptor_t row_stats(sdpa_graph *g, int64_t uid, const sdpa_shape *s,
					  bool is_virtual, const char *name)
{
	const int64_t H = s->Hq, T = s->T;
	const int64_t dim[4] = {s->B, H, T, 1}, stride[4] = {H * T, T, 1, 1};
	return tensor(g, uid, CUDNN_DATA_FLOAT, dim, stride, is_virtual, false, name);
}

/* the bias of the scores, or its gradient: (1,Hq,T,T) bf16 */
static cudnnBackendDescriptor_t bias_view(sdpa_graph *g, int64_t uid, const sdpa_shape *s,
					  const char *name)
{
	const int64_t H = s->Hq, T = s->T;
	const int64_t dim[4] = {1, H, T, T}, stride[4] = {H * T * T, T * T, T, 1};
	return tensor(g, uid, CUDNN_DATA_BFLOAT16, dim, stride, false, false, name);
}

/* scores ss (B,Hq,T,T) fp32 plus the bias, when the shape has one */
static cudnnBackendDescriptor_t add_bias(sdpa_graph *g, const sdpa_shape *s,
					 cudnnBackendDescriptor_t ss)
{
	if (!s->bias)
		return ss;
	const int64_t B = s->B, H = s->Hq, T = s->T;
	cudnnBackendDescriptor_t bias = bias_view(g, UID_BIAS, s, "tensor bias");
	cudnnBackendDescriptor_t sb = vtensor(g, CUDNN_DATA_FLOAT, B, H, T, T, H * T * T, T * T, T,
					      1, "S * scale + bias");
	pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, ss, bias, NULL, sb, -1,
		  "S * scale + bias");
	return sb;
}

static void build_fwd(sdpa_graph *g, const sdpa_shape *s)
{
	const int64_t B = s->B, H = s->Hq, T = s->T;
	cudnnBackendDescriptor_t q = qkv_view(g, UID_Q, s, s->Hq, 0, "tensor Q");
	cudnnBackendDescriptor_t kt = qkv_view(g, UID_K, s, s->Hkv, 1, "tensor K^T");
	cudnnBackendDescriptor_t v = qkv_view(g, UID_V, s, s->Hkv, 0, "tensor V");
	cudnnBackendDescriptor_t o = out_view(g, UID_O, s, "tensor O");
	cudnnBackendDescriptor_t stats = row_stats(g, UID_STATS, s, false, "tensor Stats");
	cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE, "scalar scale");
	cudnnBackendDescriptor_t neg_inf = scalar(g, UID_NEG_INF, "scalar -inf");
	cudnnBackendDescriptor_t window = has_window(s) ? scalar(g, UID_WINDOW, "scalar window")
							: NULL;

#define SCORES(type, name) vtensor(g, type, B, H, T, T, H *T *T, T *T, T, 1, name)
#define ROWS(name)         vtensor(g, CUDNN_DATA_FLOAT, B, H, T, 1, H *T, T, 1, 1, name)
	cudnnBackendDescriptor_t sc = SCORES(CUDNN_DATA_FLOAT, "S = Q K^T");
	matmul(g, q, kt, sc, "matmul S = Q K^T");
	cudnnBackendDescriptor_t ss = SCORES(CUDNN_DATA_FLOAT, "S * scale");
	pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, sc, scale, NULL, ss, -1, "S * scale");
	cudnnBackendDescriptor_t sm = mask(g, s, add_bias(g, s, ss), neg_inf, window);

	cudnnBackendDescriptor_t mx = ROWS("softmax: row max");
	reduction(g, CUDNN_REDUCE_TENSOR_MAX, sm, mx, "softmax: row max");
	cudnnBackendDescriptor_t z = SCORES(CUDNN_DATA_FLOAT, "softmax: S - max");
	pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, sm, mx, NULL, z, -1,
		  "softmax: S - max");
	cudnnBackendDescriptor_t ex = SCORES(CUDNN_DATA_FLOAT, "softmax: exp");
	pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, z, NULL, NULL, ex, -1, "softmax: exp");
	cudnnBackendDescriptor_t sum = ROWS("softmax: row sum");
	reduction(g, CUDNN_REDUCE_TENSOR_ADD, ex, sum, "softmax: row sum");
	cudnnBackendDescriptor_t lg = ROWS("softmax: log sum");
	pointwise(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, lg, -1,
		  "softmax: log sum");
	pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, NULL, stats, -1,
		  "softmax: Stats = max + log sum");
	/* P enters the second product as bf16, as cuDNN requires */
	cudnnBackendDescriptor_t p = SCORES(CUDNN_DATA_BFLOAT16, "softmax: P");
	pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, ex, sum, NULL, p, -1, "softmax: P");
	matmul(g, p, v, o, "matmul O = P V");
#undef SCORES
#undef ROWS
}

static void build_bwd(sdpa_graph *g, const sdpa_shape *s)
{
	const int64_t B = s->B, H = s->Hq, T = s->T, D = s->D;
	const int grouped = s->Hq != s->Hkv;
	cudnnBackendDescriptor_t q = qkv_view(g, UID_Q, s, s->Hq, 0, "tensor Q");
	cudnnBackendDescriptor_t kt = qkv_view(g, UID_K, s, s->Hkv, 1, "tensor K^T");
	cudnnBackendDescriptor_t vt = qkv_view(g, UID_V, s, s->Hkv, 1, "tensor V^T");
	cudnnBackendDescriptor_t o = out_view(g, UID_O, s, "tensor O");
	cudnnBackendDescriptor_t dout = out_view(g, UID_DO, s, "tensor dO");
	cudnnBackendDescriptor_t stats = row_stats(g, UID_STATS, s, false, "tensor Stats");
	cudnnBackendDescriptor_t dq = qkv_view(g, UID_DQ, s, s->Hq, 0, "tensor dQ");
	cudnnBackendDescriptor_t dk = qkv_view(g, UID_DK, s, s->Hkv, 0, "tensor dK");
	cudnnBackendDescriptor_t dv = qkv_view(g, UID_DV, s, s->Hkv, 0, "tensor dV");
	cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE, "scalar scale");
	cudnnBackendDescriptor_t neg_inf = scalar(g, UID_NEG_INF, "scalar -inf");
	cudnnBackendDescriptor_t one = scalar(g, UID_ONE, "scalar 1");
	cudnnBackendDescriptor_t window = has_window(s) ? scalar(g, UID_WINDOW, "scalar window")
							: NULL;
	/* fp32 buffers the kernels need in device memory: rowsum(dO * O), and
	 * in the accumulator form the dQ accumulator (B,Hq,T,D), below */
	cudnnBackendDescriptor_t softmax_sum = row_stats(g, UID_SOFTMAX_SUM, s, false,
							 "tensor rowsum(dO * O)");

#define SCORES(type, name) vtensor(g, type, B, H, T, T, H *T *T, T *T, T, 1, name)
#define SCORES_T(name)     vtensor(g, CUDNN_DATA_BFLOAT16, B, H, T, T, H *T *T, T *T, 1, T, name)
#define ROWS(name)         vtensor(g, CUDNN_DATA_FLOAT, B, H, T, 1, H *T, T, 1, 1, name)
	/* softmax_sum = rowsum(dO * O) */
	cudnnBackendDescriptor_t doo = vtensor(g, CUDNN_DATA_FLOAT, B, H, T, D, H * T * D, T * D,
					       H * D, 1, "dO * O");
	pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, NULL, doo, -1, "dO * O");
	cudnnBackendDescriptor_t rs = ROWS("rowsum(dO * O)");
	reduction(g, CUDNN_REDUCE_TENSOR_ADD, doo, rs, "rowsum(dO * O)");
	pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rs, one, NULL, softmax_sum, -1,
		  "rowsum(dO * O) to memory");

	/* P = exp(scale Q K^T - Stats), masked */
	cudnnBackendDescriptor_t sc = SCORES(CUDNN_DATA_FLOAT, "S = Q K^T");
	matmul(g, q, kt, sc, "matmul S = Q K^T");
	cudnnBackendDescriptor_t ss = SCORES(CUDNN_DATA_FLOAT, "S * scale");
	pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, sc, scale, NULL, ss, -1, "S * scale");
	cudnnBackendDescriptor_t sl = SCORES(CUDNN_DATA_FLOAT, "S - Stats");
	pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, add_bias(g, s, ss), stats, NULL, sl, -1,
		  "S - Stats");
	cudnnBackendDescriptor_t sm = mask(g, s, sl, neg_inf, window);
	cudnnBackendDescriptor_t p = SCORES(CUDNN_DATA_FLOAT, "P = exp(S - Stats)");
	pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sm, NULL, NULL, p, -1,
		  "P = exp(S - Stats)");

	/* dV = P^T dO, summed over each group of query heads */
	cudnnBackendDescriptor_t pt = SCORES_T("P^T");
	reshape(g, p, pt, "P^T");
	if (grouped) {
		cudnnBackendDescriptor_t dvh = vtensor(g, CUDNN_DATA_BFLOAT16, B, H, T, D,
						       H * T * D, T * D, D, 1, "dV per query head");
		matmul(g, pt, dout, dvh, "matmul dV = P^T dO");
		reduction(g, CUDNN_REDUCE_TENSOR_ADD, dvh, dv, "dV: sum over the group");
	} else {
		matmul(g, pt, dout, dv, "matmul dV = P^T dO");
	}

	/* dS = P * (dO V^T - rowsum(dO * O)) * scale */
	cudnnBackendDescriptor_t dp = SCORES(CUDNN_DATA_FLOAT, "dP = dO V^T");
	matmul(g, dout, vt, dp, "matmul dP = dO V^T");
	cudnnBackendDescriptor_t dps = SCORES(CUDNN_DATA_FLOAT, "dP - rowsum(dO * O)");
	pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, softmax_sum, NULL, dps, -1,
		  "dP - rowsum(dO * O)");
	cudnnBackendDescriptor_t dsp = SCORES(CUDNN_DATA_FLOAT, "dS = P (dP - rowsum)");
	pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dps, p, NULL, dsp, -1,
		  "dS = P (dP - rowsum)");
	/* the bias's gradient: dS before the scale, summed over the batch */
	if (s->bias)
		reduction(g, CUDNN_REDUCE_TENSOR_ADD, dsp,
			  bias_view(g, UID_DBIAS, s, "tensor dBias"), "dBias: sum over the batch");
	cudnnBackendDescriptor_t ds = SCORES(CUDNN_DATA_FLOAT, "dS * scale");
	pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dsp, scale, NULL, ds, -1, "dS * scale");

	/* dK = dS^T Q, summed over each group */
	cudnnBackendDescriptor_t dst = SCORES_T("dS^T");
	reshape(g, ds, dst, "dS^T");
	if (grouped) {
		cudnnBackendDescriptor_t dkh = vtensor(g, CUDNN_DATA_BFLOAT16, B, H, T, D,
						       H * T * D, T * D, D, 1, "dK per query head");
		matmul(g, dst, q, dkh, "matmul dK = dS^T Q");
		reduction(g, CUDNN_REDUCE_TENSOR_ADD, dkh, dk, "dK: sum over the group");
	} else {
		matmul(g, dst, q, dk, "matmul dK = dS^T Q");
	}

	/* dQ = dS K: straight into dQ (the deterministic form), or through the
	 * fp32 accumulator (atomics) */
	const int64_t ld = (int64_t)(s->Hq + 2 * s->Hkv) * D;
	cudnnBackendDescriptor_t k = vtensor(g, CUDNN_DATA_FLOAT, B, s->Hkv, T, D, T * ld, D, ld, 1,
					     "K from K^T");
	reshape(g, kt, k, "K from K^T");
	if (g->acc) {
		const int64_t acc_dim[4] = {B, H, T, D}, acc_stride[4] = {H * T * D, T * D, D, 1};
		cudnnBackendDescriptor_t dq_acc = tensor(g, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, acc_dim,
							 acc_stride, false, false,
							 "tensor dQ accumulator");
		matmul(g, ds, k, dq_acc, "matmul dQ = dS K");
		pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, dq_acc, NULL, NULL, dq, -1,
			  "dQ from its accumulator");
	} else {
		matmul(g, ds, k, dq, "matmul dQ = dS K");
	}
#undef SCORES
#undef SCORES_T
#undef ROWS
}

/* Whether engine configuration cfg's engine is free of the NONDETERMINISTIC
 * numerical note: its results have the same bits on every run (cuDNN's
 * flash backward may add dQ with atomics, unless an engine says otherwise).
 * -1 when cuDNN cannot say. */
static int deterministic_engine(cudnnBackendDescriptor_t cfg)
{
	cudnnBackendDescriptor_t engine = NULL;
	cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
	int64_t n = 0, got = 0;
	int det = -1;
	if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) ==
		    CUDNN_STATUS_SUCCESS &&
	    cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
				     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
				     &engine) == CUDNN_STATUS_SUCCESS &&
	    cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
				     CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
				     notes) == CUDNN_STATUS_SUCCESS) {
		det = 1;
		for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
			det &= notes[i] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
	}
	if (engine)
		cudnnBackendDestroyDescriptor(engine);
	return det;
}

/* The operation graph of g's ops, then the first engine configuration of
 * cuDNN's heuristics that finalizes into an execution plan, preferring
 * deterministic engines: the first pass takes only those, the second any
 * (g->deterministic says which won). */
static void build_plan(sdpa_graph *g)
{
	cudnnBackendDescriptor_t graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
					      "operation graph");
	set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
	    "operation graph");
	set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
	    "operation graph");
	finalize(g, graph, "operation graph");

	const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
	cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
					     "engine heuristics");
	set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	    &graph, "engine heuristics");
	set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
	    "engine heuristics");
	finalize(g, heur, "engine heuristics");
	int64_t count = 0;
	if (g->failed ||
	    failed_(g,
		    cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
					     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
		    "engine heuristics", "cudnnBackendGetAttribute(results: count)"))
		return;
	if (count <= 0) {
		g->failed = 1;
		snprintf(g->why, sizeof g->why, "engine heuristics: no engine for this graph");
		return;
	}
	count = count < SDPA_MAXCFG ? count : SDPA_MAXCFG;
	cudnnBackendDescriptor_t cfg[SDPA_MAXCFG];
	for (int64_t i = 0; i < count; i++)
		cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
	int64_t got = 0;
	if (g->failed ||
	    failed_(g,
		    cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
					     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
		    "engine heuristics", "cudnnBackendGetAttribute(results)"))
		return;
	char last[200] = "no engine configuration returned";
	const int64_t m = got < count ? got : count;
	int det[SDPA_MAXCFG];
	for (int64_t i = 0; i < m; i++)
		det[i] = deterministic_engine(cfg[i]);
	for (int64_t k = 0; k < 2 * m; k++) {
		const int64_t i = k % m;
		if ((k < m) != (det[i] == 1))
			continue; /* deterministic engines in the first pass, the others in the second */
		cudnnBackendDescriptor_t plan = NULL;
		cudnnStatus_t st = cudnnBackendCreateDescriptor(
			CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
						      CUDNN_TYPE_HANDLE, 1, &handle);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
						      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendFinalize(plan);
		int64_t ws = 0, n = 0;
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendGetAttribute(plan,
						      CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
						      CUDNN_TYPE_INT64, 1, &n, &ws);
		if (st == CUDNN_STATUS_SUCCESS) {
			g->plan = plan;
			g->ws = ws > 0 ? ws : 0;
			g->deterministic = det[i] == 1;
			return;
		}
		snprintf(last, sizeof last,
			 "engine configuration %lld of %lld: %s (cudnnStatus %d)", (long long)i + 1,
			 (long long)m, cudnnGetErrorString(st), (int)st);
		if (plan)
			cudnnBackendDestroyDescriptor(plan);
	}
	g->failed = 1;
	snprintf(g->why, sizeof g->why,
		 "execution plan: no engine configuration finalizes (last: %s)", last);
}

/* ---- the cache ------------------------------------------------------------------- */

static const char *dir_name(int dir) { return dir == FWD ? "forward" : "backward"; }

/* The deterministic backward's dP workspace: (B,Hq,T,T) bf16, T rounded up
 * to cuDNN's tile of 64 */
static int64_t dp_workspace(const sdpa_shape *s)
{
	const int64_t t = ((int64_t)s->T + 63) / 64 * 64;
	return (int64_t)s->B * s->Hq * t * t * 2;
}

/* The bias and its gradient as cuDNN takes them: two (1,Hq,T,T) bf16 */
static int64_t bias_bytes(const sdpa_shape *s) { return 2 * (int64_t)s->Hq * s->T * s->T * 2; }

/* Why cuDNN cannot take this shape before any graph is built, or NULL.
 * These are the limits cudnn-frontend's sdpa and sdpa_backward nodes check
 * before they build the same graphs (sdpa_support_surface.h): outside them
 * the backend may still finalize a plan, with no promise about its results. */
static const char *precheck(const sdpa_shape *s, int dir, char *buf, size_t n)
{
	if (handle_state == REJECTED)
		return handle_why;
	if (version < SDPA_MIN_VERSION) {
		snprintf(buf, n,
			 "cuDNN %zu.%zu.%zu is older than 9.0, the first with these fused "
			 "attention engines",
			 version / 10000, version / 100 % 100, version % 100);
		return buf;
	}
	if (version >= SDPA_BAD_LO && version <= SDPA_BAD_HI) {
		snprintf(buf, n,
			 "cuDNN 9.10.0 and 9.10.1 compute wrong bf16 attention; use 9.10.2 "
			 "or newer");
		return buf;
	}
	if (s->D % 8 || s->D > 256) {
		snprintf(buf, n, "head dim %d: cuDNN takes multiples of 8 up to 256", s->D);
		return buf;
	}
	if (dir == FWD && s->D > 128 && sm_major != 9 && version < SDPA_WIDE_D_VERSION) {
		snprintf(buf, n,
			 "head dim %d: cuDNN %zu.%zu takes head dims over 128 on sm_90 only "
			 "(9.10 and newer on other GPUs)",
			 s->D, version / 10000, version / 100 % 100);
		return buf;
	}
	if (dir == BWD && s->D > 128 && sm_major != 9) {
		snprintf(buf, n,
			 "head dim %d: cuDNN's backward takes head dims over 128 on sm_90 only "
			 "(this GPU: compute capability %d.x)",
			 s->D, sm_major);
		return buf;
	}
	if (s->T == 1 && (dir == BWD || version < SDPA_FWD_ONE_T_VERSION)) {
		snprintf(buf, n, "T=1: cuDNN's %s",
			 dir == BWD ? "backward does not take one token"
				    : "masked forward before 9.10 does not take one token");
		return buf;
	}
	if (dir == BWD && version < SDPA_BWD_ANY_T_VERSION && s->T % 128) {
		snprintf(buf, n,
			 "cuDNN %zu.%zu before 9.16 needs T %% 128 == 0 in the backward (T=%d)",
			 version / 10000, version / 100 % 100, s->T);
		return buf;
	}
	if (s->bias && dir == BWD && !deterministic) {
		snprintf(buf, n,
			 "a bias's gradient: cuDNN computes it in the deterministic form only "
			 "(PP_CUDA_DETERMINISTIC=0)");
		return buf;
	}
	if (s->bias && bias_bytes(s) > dp_limit) {
		snprintf(buf, n,
			 "the bias by distance spread over (Hq,T,T), %.1f MiB with its gradient, "
			 "is over PP_CUDNN_DP_WORKSPACE_MIB=%lld",
			 (double)bias_bytes(s) / (1 << 20), (long long)(dp_limit >> 20));
		return buf;
	}
	if (dir == BWD && deterministic && dp_workspace(s) > dp_limit) {
		snprintf(buf, n,
			 "the deterministic backward's dP workspace of %.1f MiB is over "
			 "PP_CUDNN_DP_WORKSPACE_MIB=%lld (PP_CUDA_DETERMINISTIC=0 takes the "
			 "faster, non-deterministic form)",
			 (double)dp_workspace(s) / (1 << 20), (long long)(dp_limit >> 20));
		return buf;
	}
	return NULL;
}

/* the handle, on the first use of cuDNN (never before pp_cuda_init) */
static void open_handle(void)
{
	if (handle_state != UNKNOWN)
		return;
	version = cudnnGetVersion();
	PP_CUDA_CHECK(cudaDeviceGetAttribute(&sm_major, cudaDevAttrComputeCapabilityMajor,
					     pp_cuda.device));
	const char *det = getenv("PP_CUDA_DETERMINISTIC"),
		   *lim = getenv("PP_CUDNN_DP_WORKSPACE_MIB");
	deterministic = !(det && !strcmp(det, "0"));
	size_t free_b = 0, total = 0;
	PP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
	dp_limit = (int64_t)(total / 8);
	if (lim && *lim) {
		char *end = NULL;
		const long long mib = strtoll(lim, &end, 10);
		PP_CUDA_REQUIRE(*end == '\0' && mib >= 0,
				"PP_CUDNN_DP_WORKSPACE_MIB=%s: expected a whole number of MiB",
				lim);
		dp_limit = (int64_t)mib << 20;
	}
	cudnnStatus_t st = cudnnCreate(&handle);
	if (st != CUDNN_STATUS_SUCCESS) {
		handle_state = REJECTED;
		snprintf(handle_why, sizeof handle_why, "cudnnCreate: %s (cudnnStatus %d)",
			 cudnnGetErrorString(st), (int)st);
		return;
	}
	/* the legacy default stream, where every op of the backend runs */
	st = cudnnSetStream(handle, 0);
	if (st != CUDNN_STATUS_SUCCESS) {
		handle_state = REJECTED;
		snprintf(handle_why, sizeof handle_why, "cudnnSetStream: %s (cudnnStatus %d)",
			 cudnnGetErrorString(st), (int)st);
		return;
	}
	handle_state = READY;
}

static int same(const sdpa_shape *a, const sdpa_shape *b)
{
	return a->B == b->B && a->T == b->T && a->Hq == b->Hq && a->Hkv == b->Hkv && a->D == b->D &&
	       a->window == b->window && a->bias == b->bias;
}

static sdpa_entry *entry_of(const sdpa_shape *s)
{
	sdpa_entry *e = NULL, *lru = &cache[0];
	for (int i = 0; i < SDPA_CACHE && !e; i++) {
		if (cache[i].used && same(&cache[i].s, s))
			e = &cache[i];
		else if (!cache[i].used ? lru->used : cache[i].last < lru->last)
			lru = &cache[i];
	}
	if (!e) {
		e = lru;
		if (e->used) {
			/* nothing may still run a plan we destroy: the plans run on the
			 * compute stream; the whole device would also wait for NCCL
			 * kernels in flight (libcommon/comm/nccl.c) */
			PP_CUDA_CHECK(cudaStreamSynchronize(0));
			graph_free(e->g[FWD]);
			graph_free(e->g[BWD]);
		}
		memset(e, 0, sizeof *e);
		e->s = *s;
		e->used = 1;
	}
	e->last = ++clock_;
	return e;
}

/* The plan for shape s in direction dir, built on first use; NULL when
 * cuDNN does not take it (the reason in why, reported on stderr once). */
static sdpa_graph *plan_of(const sdpa_shape *s, int dir, char *why, size_t n)
{
	open_handle();
	sdpa_entry *e = entry_of(s);
	if (e->state[dir] == READY)
		return e->g[dir];
	if (e->state[dir] == UNKNOWN) {
		const char *reason = precheck(s, dir, e->why[dir], sizeof e->why[dir]);
		if (!reason) {
			sdpa_graph *g = (sdpa_graph *)calloc(1, sizeof *g);
			PP_CUDA_REQUIRE(g, "cuDNN attention: out of host memory");
			g->next_uid = UID_VIRTUAL;
			g->acc = !deterministic;
			if (dir == FWD)
				build_fwd(g, s);
			else
				build_bwd(g, s);
			if (!g->failed)
				build_plan(g);
			if (!g->failed && dir == BWD && deterministic && !g->deterministic) {
				g->failed = 1;
				snprintf(
					g->why, sizeof g->why,
					"no deterministic engine for the backward (cuDNN %zu.%zu.%zu; "
					"PP_CUDA_DETERMINISTIC=0 takes a non-deterministic one)",
					version / 10000, version / 100 % 100, version % 100);
			}
			if (!g->failed) {
				e->g[dir] = g;
				e->state[dir] = READY;
				if (dir == BWD && !g->deterministic)
					fprintf(stderr,
						"pp: cuda backend: cuDNN attention backward, B=%d T=%d Hq=%d "
						"Hkv=%d D=%d window=%d: PP_CUDA_DETERMINISTIC=0 took a "
						"non-deterministic engine: dq may differ in the last bits "
						"from run to run\n",
						s->B, s->T, s->Hq, s->Hkv, s->D, s->window);
				return g;
			}
			snprintf(e->why[dir], sizeof e->why[dir], "%s", g->why);
			graph_free(g);
		} else if (reason != e->why[dir]) {
			snprintf(e->why[dir], sizeof e->why[dir], "%s", reason);
		}
		e->state[dir] = REJECTED;
		fprintf(stderr,
			"pp: cuda backend: cuDNN attention %s, B=%d T=%d Hq=%d Hkv=%d D=%d window=%d%s: "
			"%s; this shape runs on the plain kernels\n",
			dir_name(dir), s->B, s->T, s->Hq, s->Hkv, s->D, s->window,
			s->bias ? " with a bias" : "", e->why[dir]);
	}
	if (why)
		snprintf(why, n, "%s: %s", dir_name(dir), e->why[dir]);
	return NULL;
}

/* ---- execution -------------------------------------------------------------------------- */

/* What the masks put in place of a hidden score: cuDNN before 9.10 wants
 * the lowest finite float (as cudnn-frontend's sdpa nodes pass it), later
 * ones -inf. exp() of either is 0. */
static float mask_fill(void) { return version < SDPA_INF_MASK_VERSION ? -FLT_MAX : -INFINITY; }

/* consecutive pieces of one scratch buffer, each 256-byte aligned */
static size_t piece(size_t *at, size_t bytes)
{
	size_t off = *at;
	*at = (off + bytes + 255) & ~(size_t)255;
	return off;
}

/* Runs g's plan with the tensors uid[i] at ptr[i] */
static void execute(sdpa_graph *g, int n, const int64_t *uid, void *const *ptr, void *ws,
		    const char *what)
{
	cudnnBackendDescriptor_t pack = NULL;
	cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
							&pack);
	const char *step = "cudnnBackendCreateDescriptor(variant pack)";
	if (st == CUDNN_STATUS_SUCCESS) {
		step = "variant pack: unique ids";
		st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
					      CUDNN_TYPE_INT64, n, uid);
	}
	if (st == CUDNN_STATUS_SUCCESS) {
		step = "variant pack: data pointers";
		st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
					      CUDNN_TYPE_VOID_PTR, n, ptr);
	}
	if (st == CUDNN_STATUS_SUCCESS) {
		step = "variant pack: workspace";
		st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
					      CUDNN_TYPE_VOID_PTR, 1, &ws);
	}
	if (st == CUDNN_STATUS_SUCCESS) {
		step = "variant pack: finalize";
		st = cudnnBackendFinalize(pack);
	}
	if (st == CUDNN_STATUS_SUCCESS) {
		step = "cudnnBackendExecute";
		st = cudnnBackendExecute(handle, g->plan, pack);
	}
	if (pack)
		cudnnBackendDestroyDescriptor(pack);
	if (st != CUDNN_STATUS_SUCCESS) {
		char why[256];
		snprintf(why, sizeof why, "%s: %s (cudnnStatus %d)", step, cudnnGetErrorString(st),
			 (int)st);
		pp_cuda_fatal(__FILE__, __LINE__, what, why);
	}
	PP_CUDA_LAUNCHED(what);
}

static bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* src (n) of T as bf16 for cuDNN: src itself when it is bf16 and aligned
 * (direct), else a bf16 copy in the scratch piece at `at` */
template <typename T>
static pp_bf16 *bf16_in(const T *src, size_t n, bool direct, char *base, size_t at)
{
	if (direct)
		return (pp_bf16 *)src;
	pp_bf16 *dst = (pp_bf16 *)(base + at);
	pp_cuda_convert(dst, src, n);
	return dst;
}

/* ---- the bias by distance ------------------------------------------------------------- */

/* out (1,H,T,T) bf16: entry (h,i,j) = w[h, bucket[i - j]] for j <= i, 0
 * above the diagonal (which the causal mask hides) */
template <typename T>
__global__ void bias_fill_kernel(pp_bf16 *out, const T *w, const int *bucket, int nb, int H, int T_)
{
	const size_t n = (size_t)H * T_ * T_;
	for (size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x; x < n;
	     x += (size_t)gridDim.x * blockDim.x) {
		const int j = (int)(x % T_), i = (int)(x / T_ % T_), h = (int)(x / T_ / T_);
		out[x] = pp_to<pp_bf16>(j <= i ? pp_f(w[(size_t)h * nb + bucket[i - j]]) : 0.0f);
	}
}

/* diag (H,T): entry (h,d) = the sum of dbias (1,H,T,T) along diagonal d,
 * (h, i, i - d) for i >= d; one block per (d, h), summed in a fixed order */
__global__ void dbias_diag_kernel(float *diag, const pp_bf16 *db, int T_)
{
	__shared__ float red[32];
	const int d = blockIdx.x, h = blockIdx.y;
	const pp_bf16 *m = db + (size_t)h * T_ * T_;
	float v = 0;
	for (int i = d + threadIdx.x; i < T_; i += blockDim.x)
		v += pp_f(m[(size_t)i * T_ + i - d]);
	v = pp_block_sum(v, red);
	if (threadIdx.x == 0)
		diag[(size_t)h * T_ + d] = v;
}

/* dw (H,nb) += the diagonals' sums of each bucket's distances, in order */
__global__ void dbias_bucket_kernel(float *dw, const float *diag, const int *bucket, int nb, int H,
				    int T_)
{
	const int x = blockIdx.x * blockDim.x + threadIdx.x;
	if (x >= H * nb)
		return;
	const int h = x / nb, b = x % nb;
	float v = 0;
	for (int d = 0; d < T_; d++)
		if (bucket[d] == b)
			v += diag[(size_t)h * T_ + d];
	dw[x] += v;
}

template <typename T> static void bias_fill(pp_bf16 *out, const pp_attn_bias *bias, int H, int T_)
{
	const size_t n = (size_t)H * T_ * T_;
	bias_fill_kernel<T><<<pp_cuda_blocks(n, 256), 256, 0, 0>>>(out, (const T *)bias->w,
								   bias->bucket, bias->nb, H, T_);
	PP_CUDA_LAUNCHED("bias_fill_kernel");
}

/* bias->dw += dbias (1,H,T,T) summed per bucket; diag: H*T floats of scratch */
static void dbias_gather(const pp_attn_bias *bias, const pp_bf16 *dbias, float *diag, int H, int T_)
{
	dbias_diag_kernel<<<dim3(T_, H), 256, 0, 0>>>(diag, dbias, T_);
	PP_CUDA_LAUNCHED("dbias_diag_kernel");
	const int n = H * bias->nb;
	dbias_bucket_kernel<<<(n + 255) / 256, 256, 0, 0>>>(bias->dw, diag, bias->bucket, bias->nb,
							    H, T_);
	PP_CUDA_LAUNCHED("dbias_bucket_kernel");
}

static int has_bias(const pp_attn_bias *bias) { return bias && bias->w; }

/* The optional tensors of both directions' variant packs, after the n
 * there: the window, and the bias (b16, filled from bias's weights first).
 * Returns the new count. */
template <typename T>
static int pack_optional(const sdpa_shape *s, int64_t *uid, void **ptr, int n, float *win,
			 const pp_attn_bias *bias, pp_bf16 *b16)
{
	if (has_window(s)) {
		uid[n] = UID_WINDOW;
		ptr[n++] = win;
	}
	if (s->bias) {
		bias_fill<T>(b16, bias, s->Hq, s->T);
		uid[n] = UID_BIAS;
		ptr[n++] = b16;
	}
	return n;
}

/* ---- the two directions ----------------------------------------------------------------- */

template <typename T>
int pp_cuda_sdpa_fwd(T *out, pp_real *lse, const T *qkv, int B, int T_, int Hq, int Hkv, int D,
		     int window, const pp_attn_bias *bias)
{
	const sdpa_shape s = {B, T_, Hq, Hkv, D, window, has_bias(bias)};
	sdpa_graph *g = plan_of(&s, FWD, NULL, 0);
	if (!g)
		return 0;
	const size_t nqkv = (size_t)B * T_ * (Hq + 2 * Hkv) * D, nout = (size_t)B * T_ * Hq * D;
	const size_t nrows = (size_t)B * Hq * T_;
	const bool direct = pp_is_bf16<T>::value && aligned16(qkv) && aligned16(out);
	size_t at = 0;
	const size_t o_qkv = direct ? 0 : piece(&at, nqkv * 2);
	const size_t o_out = direct ? 0 : piece(&at, nout * 2);
	const size_t o_stats = aligned16(lse) ? 0 : piece(&at, nrows * 4);
	const size_t nbias = (size_t)Hq * T_ * T_, o_bias = s.bias ? piece(&at, nbias * 2) : 0;
	const size_t o_ws = piece(&at, (size_t)g->ws);
	char *base = (char *)pp_cuda_scratch(at);
	pp_bf16 *qkv16 = bf16_in(qkv, nqkv, direct, base, o_qkv);
	pp_bf16 *out16 = direct ? (pp_bf16 *)out : (pp_bf16 *)(base + o_out);
	void *stats = aligned16(lse) ? (void *)lse : base + o_stats;

	float scale = (float)(1 / sqrt((double)D)), neg_inf = mask_fill(), win = (float)window;
	int64_t uid[9] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
	void *ptr[9] = {qkv16,
			qkv16 + (size_t)Hq * D,
			qkv16 + (size_t)(Hq + Hkv) * D,
			out16,
			stats,
			&scale,
			&neg_inf};
	const int n = pack_optional<T>(&s, uid, ptr, 7, &win, bias, (pp_bf16 *)(base + o_bias));
	execute(g, n, uid, ptr, base + o_ws, PP_OPTABLE_ATTN_FWD_CUDNN);
	if (!direct)
		pp_cuda_convert(out, out16, nout);
	if (stats != (void *)lse)
		PP_CUDA_CHECK(cudaMemcpyAsync(lse, stats, nrows * 4, cudaMemcpyDeviceToDevice, 0));
	return 1;
}
template int pp_cuda_sdpa_fwd<float>(float *, pp_real *, const float *, int, int, int, int, int,
				     int, const pp_attn_bias *);
template int pp_cuda_sdpa_fwd<pp_bf16>(pp_bf16 *, pp_real *, const pp_bf16 *, int, int, int, int,
				       int, int, const pp_attn_bias *);

template <typename T>
int pp_cuda_sdpa_bwd(T *dqkv, const T *dout, const T *out, const pp_real *lse, const T *qkv, int B,
		     int T_, int Hq, int Hkv, int D, int window, const pp_attn_bias *bias)
{
	const sdpa_shape s = {B, T_, Hq, Hkv, D, window, has_bias(bias)};
	sdpa_graph *g = plan_of(&s, BWD, NULL, 0);
	if (!g)
		return 0;
	const size_t nqkv = (size_t)B * T_ * (Hq + 2 * Hkv) * D, nout = (size_t)B * T_ * Hq * D;
	const size_t nrows = (size_t)B * Hq * T_;
	const bool direct = pp_is_bf16<T>::value && aligned16(qkv) && aligned16(out) &&
			    aligned16(dout) && aligned16(dqkv);
	size_t at = 0;
	const size_t o_qkv = direct ? 0 : piece(&at, nqkv * 2);
	const size_t o_out = direct ? 0 : piece(&at, nout * 2);
	const size_t o_dout = direct ? 0 : piece(&at, nout * 2);
	const size_t o_dqkv = direct ? 0 : piece(&at, nqkv * 2);
	const size_t o_stats = aligned16(lse) ? 0 : piece(&at, nrows * 4);
	const size_t o_sum = piece(&at, nrows * 4), o_acc = g->acc ? piece(&at, nout * 4) : 0;
	const size_t nbias = (size_t)Hq * T_ * T_, o_bias = s.bias ? piece(&at, nbias * 2) : 0;
	const size_t o_dbias = s.bias ? piece(&at, nbias * 2) : 0;
	const size_t o_diag = s.bias ? piece(&at, (size_t)Hq * T_ * 4) : 0;
	const size_t o_ws = piece(&at, (size_t)g->ws);
	char *base = (char *)pp_cuda_scratch(at);
	pp_bf16 *qkv16 = bf16_in(qkv, nqkv, direct, base, o_qkv);
	pp_bf16 *out16 = bf16_in(out, nout, direct, base, o_out);
	pp_bf16 *dout16 = bf16_in(dout, nout, direct, base, o_dout);
	pp_bf16 *dqkv16 = direct ? (pp_bf16 *)dqkv : (pp_bf16 *)(base + o_dqkv);
	void *stats = aligned16(lse) ? (void *)lse : base + o_stats;
	if (stats != (const void *)lse)
		PP_CUDA_CHECK(cudaMemcpyAsync(stats, lse, nrows * 4, cudaMemcpyDeviceToDevice, 0));
	/* cuDNN before 9.6 expects a zeroed accumulator; later ones clear it */
	if (g->acc)
		PP_CUDA_CHECK(cudaMemsetAsync(base + o_acc, 0, nout * 4, 0));
	float scale = (float)(1 / sqrt((double)D)), neg_inf = mask_fill(), one = 1,
	      win = (float)window;
	const size_t k_at = (size_t)Hq * D, v_at = (size_t)(Hq + Hkv) * D;
	int64_t uid[17] = {UID_Q,     UID_K,       UID_V,  UID_O,  UID_DO,
			   UID_STATS, UID_DQ,      UID_DK, UID_DV, UID_SOFTMAX_SUM,
			   UID_SCALE, UID_NEG_INF, UID_ONE};
	void *ptr[17] = {qkv16,  qkv16 + k_at, qkv16 + v_at,  out16,         dout16,
			 stats,  dqkv16,       dqkv16 + k_at, dqkv16 + v_at, base + o_sum,
			 &scale, &neg_inf,     &one};
	int n = 13;
	if (g->acc) {
		uid[n] = UID_DQ_ACCUM;
		ptr[n++] = base + o_acc;
	}
	n = pack_optional<T>(&s, uid, ptr, n, &win, bias, (pp_bf16 *)(base + o_bias));
	if (s.bias) {
		uid[n] = UID_DBIAS;
		ptr[n++] = base + o_dbias;
	}
	execute(g, n, uid, ptr, base + o_ws, "cuDNN attention backward");
	if (!direct)
		pp_cuda_convert(dqkv, dqkv16, nqkv);
	if (s.bias && bias->dw)
		dbias_gather(bias, (const pp_bf16 *)(base + o_dbias), (float *)(base + o_diag), Hq,
			     T_);
	return 1;
}
template int pp_cuda_sdpa_bwd<float>(float *, const float *, const float *, const pp_real *,
				     const float *, int, int, int, int, int, int,
				     const pp_attn_bias *);
template int pp_cuda_sdpa_bwd<pp_bf16>(pp_bf16 *, const pp_bf16 *, const pp_bf16 *, const pp_real *,
				       const pp_bf16 *, int, int, int, int, int, int,
				       const pp_attn_bias *);

int pp_cuda_cudnn_attention_check(int B, int T, int Hq, int Hkv, int D, int window, int bias,
				  char *why, size_t n)
{
	PP_CUDA_REQUIRE(pp_cuda.lt, "the CUDA backend is used before pp_cuda_init");
	const sdpa_shape s = {B, T, Hq, Hkv, D, window, bias != 0};
	if (!plan_of(&s, FWD, why, n))
		return 0;
	return plan_of(&s, BWD, why, n) != NULL;
}
