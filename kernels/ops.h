/* The op interface: one table of functions per backend (cpu/, cuda/).
 *
 * A kernel knows shapes and pointers only. Shapes use a fixed letter code:
 *   B batch, T time (sequence), C model width, N = B*T rows, V vocab,
 *   Hq query heads, Hkv key/value heads, D head dim, F mlp width, OC output channels.
 * Matrices are row-major. Weights follow torch.nn.Linear: w is (OC, C) and
 * out = inp @ w^T + bias.
 *
 * Gradient conventions (so the model can chain ops without extra copies):
 *   - parameter gradients (dw, dbias, dwte, ...) accumulate: +=
 *   - matmul dinp, attention dqkv, glu/gelu dx are overwritten: =
 *   - norm dx accumulates (+=): it is the residual stream's gradient.
 *
 * Two element types:
 *   pp_real  float in production builds (tests build the same sources with
 *            -DPP_F64 so that finite differences run in double precision):
 *            the master weights, their gradients, the optimizer state, the
 *            row statistics (mean, rstd, lse) and the losses.
 *   pp_act   the backend's compute type (act_type below): activations, their
 *            gradients, logits, the KV cache and the compute copy of the
 *            weights that the forward and backward read. It is pp_real on
 *            the CPU and on the fp32 CUDA table, bf16 on the bf16 CUDA
 *            table. The pointer is untyped so that one model drives either;
 *            an element takes pp_act_size(ops) bytes.
 * Products and reductions accumulate in fp32 (or wider) whatever the
 * compute type; parameter gradients are pp_real, so they accumulate in fp32
 * across microbatches.
 *
 * Positions: pos0, the position of a sequence's first row, is an int in the
 * backend's device memory, or NULL for 0 (training). Decoding keeps it on
 * the device so that one recorded graph serves every step (graph_begin). */
#ifndef PP_OPS_H
#define PP_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef PP_F64
typedef double pp_real;
#else
typedef float pp_real;
#endif

typedef void pp_act;
enum { PP_TYPE_REAL = 0, PP_TYPE_BF16 = 1 };

enum { PP_ACT_SILU = 0, PP_ACT_GELU_TANH = 1 };

/* How a mixture of experts turns router logits into gates (moe_route). */
enum { PP_ROUTE_TOPK_SOFTMAX = 0, PP_ROUTE_SOFTMAX_TOPK = 1 };

/* A learned bias of the attention scores by the distance between query and
 * key (GLaM's relative position biases): the score of query i and key j <=
 * i in query head h gains w[h * nb + bucket[i - j]]. w (Hq,nb) is in the
 * compute type; bucket holds an int (0 <= bucket < nb) for every distance
 * the call can meet (T in training, pos0 + n when decoding), in the
 * backend's device memory. The backward pass adds the gradient of w into
 * dw (Hq,nb), pp_real (+=). Attention without one takes NULL. */
typedef struct {
	const pp_act *w;
	pp_real *dw;
	const int *bucket;
	int nb;
	/* Packed documents (training): (B,T) device ints, the position of
	 * each row in its document (0 at a document's first row), so that
	 * query i sees no key before i - doc_pos[i]. w may then be NULL (no
	 * bias). NULL: the sequence is one document. (CUDA: the plain kernels
	 * take it, cuDNN's graph does not.) */
	const int *doc_pos;
} pp_attn_bias;

/* Dropout of a block of a larger matrix: the block's N rows and C columns
 * are rows row0.. and columns col0.. of a matrix width columns wide, whose
 * element (r, c) is dropped where pp_dropped(key, r * width + c, threshold)
 * (kernels/dropmask.h): an element's fate does not depend on which block,
 * rank or device computes it. Kept elements are multiplied by scale. */
typedef struct {
	uint64_t key, row0, threshold;
	int64_t col0, width;
	float scale;
} pp_dropout;

/* The products of ops->fp8_matmul */
enum { PP_FP8MM_FWD, PP_FP8MM_DGRAD, PP_FP8MM_WGRAD };

/* What a tensor's FP8 casts saw (fp8_cast), in the backend's memory: the
 * largest magnitude before scaling, the elements whose scaled magnitude
 * was past the format's range (saturated: pp_fp8_overflow), and the
 * nonzero ones that became zero (flushed). */
typedef struct {
	float amax;
	uint32_t pad;
	unsigned long long saturated, flushed;
} pp_fp8_tally;

/* Stored weight formats for decoding (pack_weight, matmul_packed): fp32,
 * bf16, and llama.cpp's blocks of 32 (kernels/quant.h): Q8_0, which
 * pack_weight makes, and Q4_0 and Q4_1, read as a GGUF file holds them */
enum {
	PP_WEIGHTS_F32 = 0,
	PP_WEIGHTS_BF16 = 1,
	PP_WEIGHTS_Q8_0 = 2,
	PP_WEIGHTS_Q4_0 = 3,
	PP_WEIGHTS_Q4_1 = 4
};

/* Targets below zero (Hugging Face uses -100) are ignored by the loss. */
#define PP_IGNORE_INDEX (-100)

typedef struct pp_ops {
	const char *name;
	int act_type; /* PP_TYPE_REAL or PP_TYPE_BF16: what a pp_act element is */

	/* memory on the backend's device */
	void *(*alloc)(size_t bytes); /* zero-filled; NULL on failure */
	void (*free)(void *p);
	void (*to_device)(void *dst, const void *host_src, size_t bytes);
	void (*to_host)(void *host_dst, const void *src, size_t bytes);
	void (*zero)(void *p, size_t bytes);
	/* rows of width bytes on the device: row i of dst (at i * dpitch) =
	 * row i of src (at i * spitch); a column block of a matrix */
	void (*copy2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
		       size_t rows);
	/* Conversions to and from the compute type: dst (n) on the device from
	 * src (n) on the device (the compute copy of the weights), and host
	 * pp_real from device activations (logits for sampling, tests). */
	void (*to_act)(pp_act *dst, const pp_real *src, size_t n);
	void (*act_to_host)(pp_real *host_dst, const pp_act *src, size_t n);

	/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC); bias may be NULL */
	void (*matmul_fwd)(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias,
			   int N, int C, int OC);
	/* out (N,OC) += bias (OC) on every row */
	void (*add_bias)(pp_act *out, const pp_act *bias, int N, int OC);
	/* dinp (N,C) = dout (N,OC) @ w; dw (OC,C) += dout^T @ inp; dbias (OC) += sum_n dout.
	 * Any of dinp, dw, dbias may be NULL. */
	void (*matmul_bwd)(pp_act *dinp, pp_real *dw, pp_real *dbias, const pp_act *dout,
			   const pp_act *inp, const pp_act *w, int N, int C, int OC);
	/* A linear layer and the GELU (tanh) after it: pre (N,OC) = inp (N,C) @
	 * w (OC,C)^T + bias (OC), out (N,OC) = gelu(pre); pre is kept for
	 * gelu_bwd. bias may be NULL. The same numbers as matmul_fwd, then
	 * gelu_fwd (one fused product where the backend can). */
	void (*matmul_gelu_fwd)(pp_act *out, pp_act *pre, const pp_act *inp, const pp_act *w,
				const pp_act *bias, int N, int C, int OC);
	/* The backward of a linear layer whose input is inp = gelu(pre), both
	 * (N,C): dpre (N,C) = (dout (N,OC) @ w) * gelu'(pre); dw and dbias as
	 * matmul_bwd. Any of dpre, dw, dbias may be NULL. The same numbers as
	 * matmul_bwd, then gelu_bwd (one fused product where the backend can). */
	void (*gelu_matmul_bwd)(pp_act *dpre, pp_real *dw, pp_real *dbias, const pp_act *dout,
				const pp_act *inp, const pp_act *pre, const pp_act *w, int N, int C,
				int OC);

	/* out (B,T,C) = wte[tok] * scale + (wpe ? wpe[pos0 + t] : 0); tok (B,T).
	 * A token below 0 lies in another rank's vocabulary shard: its row is
	 * zero (plus wpe), and it adds nothing to dwte. */
	void (*embed_fwd)(pp_act *out, const int *tok, const pp_act *wte, const pp_act *wpe,
			  pp_real scale, int B, int T, int C, const int *pos0);
	/* dwte += scatter(dout * scale); dwpe (if not NULL) += sum_b dout */
	void (*embed_bwd)(pp_real *dwte, pp_real *dwpe, const pp_act *dout, const int *tok,
			  pp_real scale, int B, int T, int C, const int *pos0);

	/* RMSNorm over rows: out (N,C) = x * rstd * (offset + w); rstd (N) saved.
	 * offset is 0 (Llama) or 1 (Gemma). */
	void (*rmsnorm_fwd)(pp_act *out, pp_real *rstd, const pp_act *x, const pp_act *w,
			    pp_real eps, pp_real offset, int N, int C);
	void (*rmsnorm_bwd)(pp_act *dx, pp_real *dw, const pp_act *dout, const pp_act *x,
			    const pp_act *w, const pp_real *rstd, pp_real offset, int N, int C);
	/* LayerNorm with bias: out = (x - mean) * rstd * w + b; mean, rstd (N) saved */
	void (*layernorm_fwd)(pp_act *out, pp_real *mean, pp_real *rstd, const pp_act *x,
			      const pp_act *w, const pp_act *b, pp_real eps, int N, int C);
	void (*layernorm_bwd)(pp_act *dx, pp_real *dw, pp_real *db, const pp_act *dout,
			      const pp_act *x, const pp_act *w, const pp_real *mean,
			      const pp_real *rstd, int N, int C);
	/* The residual add fused with the norm after it, one pass over the rows:
	 * res_out (N,C) = x + y, then out and rstd (and mean) as rmsnorm_fwd /
	 * layernorm_fwd of res_out, with the same bits as add then the norm.
	 * res_out may alias x or y.
	 * There is no fused backward: the gradient of res_out is the gradient of
	 * x and of y alike, and the norm's dx already accumulates into that
	 * residual gradient (see the conventions above), so the add's backward
	 * is no op at all; the norm backward has nothing to fuse with. */
	void (*rmsnorm_residual_fwd)(pp_act *res_out, pp_act *out, pp_real *rstd, const pp_act *x,
				     const pp_act *y, const pp_act *w, pp_real eps, pp_real offset,
				     int N, int C);
	void (*layernorm_residual_fwd)(pp_act *res_out, pp_act *out, pp_real *mean, pp_real *rstd,
				       const pp_act *x, const pp_act *y, const pp_act *w,
				       const pp_act *b, pp_real eps, int N, int C);

	/* Rotary embedding, Hugging Face rotate-half convention, in place on the
	 * q and k heads of qkv (B,T,(Hq+2Hkv)*D); v is untouched. Position of
	 * token t is pos0 + t; frequency i is theta^(-2i/D). rope_bwd applies the
	 * inverse rotation to dqkv in place. */
	void (*rope_fwd)(pp_act *qkv, int B, int T, int Hq, int Hkv, int D, pp_real theta,
			 const int *pos0);
	void (*rope_bwd)(pp_act *dqkv, int B, int T, int Hq, int Hkv, int D, pp_real theta,
			 const int *pos0);

	/* Causal attention with grouped kv heads (query head h reads kv head
	 * h / (Hq/Hkv)), scale 1/sqrt(D). qkv (B,T,(Hq+2Hkv)*D) holds q heads,
	 * then k heads, then v heads in each row. window > 0 restricts query i to
	 * keys j with i - window < j <= i (Mistral's sliding window); bias (or
	 * NULL) is added to the scaled scores. out (B,T,Hq*D); lse (B,Hq,T) is
	 * the log-sum-exp of each score row, saved for the backward pass. */
	void (*attention_fwd)(pp_act *out, pp_real *lse, const pp_act *qkv, int B, int T, int Hq,
			      int Hkv, int D, int window, const pp_attn_bias *bias);
	/* dqkv (B,T,(Hq+2Hkv)*D) = gradient w.r.t. qkv, given dout (B,T,Hq*D);
	 * and bias->dw += the gradient of the bias */
	void (*attention_bwd)(pp_act *dqkv, const pp_act *dout, const pp_act *out,
			      const pp_real *lse, const pp_act *qkv, int B, int T, int Hq, int Hkv,
			      int D, int window, const pp_attn_bias *bias);

	/* Decoding with a KV cache: kcache, vcache (B,Tmax,Hkv*D), entry j of
	 * sequence b holding the key / value of position j. kv_append copies the
	 * k and v heads of qkv (B,n,(Hq+2Hkv)*D), tokens at positions pos0..
	 * pos0+n-1, into cache entries pos0..pos0+n-1 (pos0 + n <= Tmax). */
	void (*kv_append)(pp_act *kcache, pp_act *vcache, const pp_act *qkv, int B, int n, int Hq,
			  int Hkv, int D, int Tmax, const int *pos0);
	/* The query heads of the n rows of qkv (B,n,(Hq+2Hkv)*D) at positions pos0 + i
	 * attend causally to the cache: query i sees entries j with
	 * i + pos0 - window < j <= i + pos0 (window 0: all j <= i + pos0),
	 * grouped kv heads, scale and bias as attention_fwd. out (B,n,Hq*D). */
	void (*attention_cached)(pp_act *out, const pp_act *qkv, const pp_act *kcache,
				 const pp_act *vcache, int B, int n, int Hq, int Hkv, int D,
				 int Tmax, const int *pos0, int window, const pp_attn_bias *bias);

	/* Optional (NULL where the backend has none): the ops issued between
	 * graph_begin and graph_end are recorded, not run, and graph_end returns
	 * a handle that graph_launch replays, as often as wanted, with the
	 * arguments of the recording: what changes between replays (tokens,
	 * positions) must be read from device memory, hence the pos0 pointers
	 * above. No op between begin and end may copy to or from the host. */
	void (*graph_begin)(void);
	void *(*graph_end)(void);
	void (*graph_launch)(void *graph);
	void (*graph_free)(void *graph);

	/* Optional (NULL where the backend has none): weights stored for the
	 * products of decoding, which read every weight once per step.
	 * pack_weight returns w (OC,C) stored as fmt (PP_WEIGHTS_*) in memory
	 * that free() releases, or NULL when out of memory or when C does not
	 * suit fmt (the block formats take C a multiple of 32; pack_weight makes
	 * fp32, bf16 and q8_0 only). matmul_packed is matmul_fwd
	 * over such weights (fp32 arithmetic; PP_WEIGHTS_F32 may be the compute
	 * copy itself), fastest for the few rows of a step. */
	void *(*pack_weight)(const pp_act *w, int OC, int C, int fmt);
	void (*matmul_packed)(pp_act *out, const pp_act *inp, const void *wp, const pp_act *bias,
			      int N, int C, int OC, int fmt);

	/* Gated MLP: gu (N,2F) holds [gate | up] per row; out (N,F) = act(gate) * up */
	void (*glu_fwd)(pp_act *out, const pp_act *gu, int N, int F, int act);
	void (*glu_bwd)(pp_act *dgu, const pp_act *dout, const pp_act *gu, int N, int F, int act);
	/* GELU (tanh approximation), elementwise over n */
	void (*gelu_fwd)(pp_act *out, const pp_act *x, size_t n);
	void (*gelu_bwd)(pp_act *dx, const pp_act *dout, const pp_act *x, size_t n);

	/* out = a + b (out may alias a or b): activations, and (add_real)
	 * gradients */
	void (*add)(pp_act *out, const pp_act *a, const pp_act *b, size_t n);
	void (*add_real)(pp_real *out, const pp_real *a, const pp_real *b, size_t n);
	/* x *= s: gradients (scale) and activations (scale_act) */
	void (*scale)(pp_real *x, pp_real s, size_t n);
	void (*scale_act)(pp_act *x, pp_real s, size_t n);
	/* out (N,C) = in with d's elements dropped, the others times d->scale
	 * (out may alias in) */
	void (*dropout)(pp_act *out, const pp_act *in, int N, int C, const pp_dropout *d);
	/* FP8 (fmt PP_FP8_*, kernels/fp8.h). A scale is a pair of floats in
	 * the backend's memory, s and 1/s, so that casting with a scale just
	 * computed waits for no host read. */
	/* out (n) = the FP8 value nearest in * scale[0], in the compute type;
	 * tally (NULL: none) takes this tensor's amax and counts (max and
	 * sums). out may alias in. */
	void (*fp8_cast)(pp_act *out, const pp_act *in, size_t n, const float *scale, int fmt,
			 pp_fp8_tally *tally);
	/* amax (one float, backend memory) = max |x| over n (NaN ignored);
	 * into: the larger of that and *amax, so that one amax can take
	 * several tensors' in turn without a host read */
	void (*absmax)(float *amax, const pp_act *x, size_t n, int into);
	/* scale (a pair, backend memory) = pp_fp8_scale(*amax, fmt, div, 1)
	 * and its inverse */
	void (*fp8_scale)(float *scale, const float *amax, int fmt, float div);
	/* x (n, the compute type; pp_real where real) *= sa[1] * sb[1]: the
	 * scales divided out of a product of FP8 values */
	void (*fp8_unscale)(void *x, size_t n, int real, const float *sa, const float *sb);
	/* One of kernels/fp8mm.h's products (which: PP_FP8MM_*) on FP8 tensor
	 * cores, from inputs cast by fp8_cast and the scales they were cast
	 * with (a's sa, b's sb: pairs as above):
	 *   FWD    out (N,OC) act  = (a (N,C) @ b (OC,C)^T) / (sa sb), a and b E4M3
	 *   DGRAD  out (N,C) act   = (a (N,OC) @ b (OC,C)) / (sa sb), a E5M2
	 *   WGRAD  out (OC,C) real += (a (N,OC)^T @ b (N,C)) / (sa sb), a E5M2
	 * Returns 0, having done nothing, where the device or the shape has no
	 * such product (NULL: the backend has none): fp8mm.c then multiplies
	 * the FP8 values in the compute type. */
	int (*fp8_matmul)(int which, void *out, const pp_act *a, const pp_act *b, const float *sa,
			  const float *sb, int N, int C, int OC);
	/* sum of squares, accumulated in double */
	double (*sumsq)(const pp_real *x, size_t n);

	/* Softmax cross-entropy over logits (N,V): losses (N) = -log softmax[target]
	 * (0 where target < 0). If dlogits is not NULL it receives
	 * (softmax - onehot(target)) * dscale (0 rows for ignored targets);
	 * dlogits may alias logits. */
	void (*crossentropy)(pp_real *losses, pp_act *dlogits, const pp_act *logits,
			     const int *targets, int N, int V, pp_real dscale);

	/* The same loss with the vocabulary split across ranks, in two halves
	 * around the combination of row statistics. targets are local to the
	 * (N,V) slice: PP_IGNORE_INDEX ignores the row, another value outside
	 * [0,V) means the target lies in another slice.
	 * lse (N) = log sum exp of each row of the slice; tgt (N) = the target's
	 * logit where it lies in the slice, else 0. */
	void (*logsumexp_rows)(pp_real *lse, pp_real *tgt, const pp_act *logits, const int *targets,
			       int N, int V);
	/* dlogits (N,V) = (exp(logits - lse) - onehot(target)) * dscale given the
	 * global lse (N); 0 rows for ignored targets; dlogits may alias logits. */
	void (*softmax_grad)(pp_act *dlogits, const pp_act *logits, const pp_real *lse,
			     const int *targets, int N, int V, pp_real dscale);

	/* Mixture of experts: N tokens, E experts, each token routed to K of
	 * them. An assignment is (token n, choice k), numbered n K + k.
	 *
	 * moe_route: from router logits (N,E), expert (N,K) = the K largest
	 * logits of each row, in descending order (ties: the lower expert);
	 * gate (N,K) their weights: PP_ROUTE_TOPK_SOFTMAX (Mixtral) a softmax
	 * over the K selected logits, PP_ROUTE_SOFTMAX_TOPK (GLaM) the softmax
	 * over all E at them; prob (N,E) the softmax over all E and lse (N) the
	 * log-sum-exp of each row (what the load-balancing and z losses take);
	 * stats (E+1) the column sums of prob, then the sum of lse^2. */
	void (*moe_route)(int *expert, pp_real *gate, pp_real *prob, pp_real *lse, pp_real *stats,
			  const pp_act *logits, int N, int E, int K, int mode);
	/* moe_dispatch: rows (<= N K) the assignments in expert order, and
	 * within an expert in assignment order, leaving out those past an
	 * expert's capacity cap (cap < 0: none); slot (N K) where each went in
	 * rows, -1 when dropped; counts (2E) the kept assignments per expert,
	 * then the chosen ones (before dropping). */
	void (*moe_dispatch)(int *rows, int *slot, int *counts, const int *expert, int N, int K,
			     int E, int cap);
	/* moe_gather: dst (M,C) row i = the row of src (N,C) of assignment
	 * rows[i] (its token rows[i] / K), times scale[rows[i]] unless scale is
	 * NULL. */
	void (*moe_gather)(pp_act *dst, const pp_act *src, const int *rows, const pp_real *scale,
			   int M, int K, int C);
	/* moe_combine: out (N,C) = sum over k of gate[n,k] y[slot[n,k]] (1 for
	 * a NULL gate; dropped assignments add nothing), k in order: overwrites
	 * out. */
	void (*moe_combine)(pp_act *out, const pp_act *y, const int *slot, const pp_real *gate,
			    int N, int K, int C);
	/* moe_gate_grad: dgate (N,K) = dout[n] . y[slot[n,k]] (0 when dropped). */
	void (*moe_gate_grad)(pp_real *dgate, const pp_act *dout, const pp_act *y, const int *slot,
			      int N, int K, int C);
	/* moe_router_bwd: dlogits (N,E) (overwritten) of the gates' gradient
	 * dgate (N,K) through moe_route's mode, plus aux_w times the
	 * load-balancing loss E sum_e frac[e] mean_n prob[n,e] (frac (E), the
	 * chosen assignments per token, held constant) and z_w times the z-loss
	 * mean_n lse[n]^2. */
	void (*moe_router_bwd)(pp_act *dlogits, const pp_real *dgate, const int *expert,
			       const pp_real *gate, const pp_real *prob, const pp_real *lse,
			       const pp_real *frac, pp_real aux_w, pp_real z_w, int N, int E, int K,
			       int mode);

	/* AdamW on n parameters, step t >= 1 (bias correction), gradient
	 * multiplied by gscale first (clipping / averaging).
	 * p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p); pc (n), unless NULL,
	 * receives the new p in the compute type in the same pass (the compute
	 * copy of the weights, as to_act would write it). */
	void (*adamw)(pp_real *p, pp_act *pc, const pp_real *g, pp_real *m, pp_real *v, size_t n,
		      float lr, float b1, float b2, float eps, float wd, long t, float gscale);

	/* Optional (NULL where an op is done when it returns, as on the CPU):
	 * timing marks for profiles, on the stream the ops run on. mark_anchor
	 * waits for the device and ties its clock to the host's; mark records a
	 * mark after every op issued so far; mark_ns waits until the device has
	 * reached a mark (one from mark, or any timing event of the backend's
	 * device), releases it and gives that instant in nanoseconds of the
	 * host's CLOCK_MONOTONIC, measured from the last anchor. */
	void (*mark_anchor)(void);
	void *(*mark)(void);
	long long (*mark_ns)(void *mark);
} pp_ops;

extern const pp_ops pp_ops_cpu;

#include "../libcommon/base/error.h"

#ifdef PP_CUDA

/* The CUDA backend (kernels/cuda), built when nvcc is found, in two
 * tables over the same kernels: pp_ops_cuda computes in fp32, and
 * pp_ops_cuda_bf16 keeps activations and the compute copy of the weights in
 * bf16 (tensor-core products with fp32 accumulation, fp32 statistics,
 * gradients and optimizer). Their ops run on the current device's default
 * stream; call pp_cuda_init once, before the first op, from the thread that
 * will issue them. */
extern const pp_ops pp_ops_cuda;
extern const pp_ops pp_ops_cuda_bf16;

/* Selects GPU `device` (an index among the visible ones) and creates the
 * cuBLASLt handle and workspace. Fails with PP_EUSAGE when the machine has
 * no usable CUDA device (no GPU, no driver, index out of range), naming the
 * CUDA error; with PP_ERUNTIME when the device is there but cannot be set
 * up. Calling it again for the same device does nothing. Nothing touches
 * CUDA before this call: binaries linked with the backend start on machines
 * without a GPU. */
int pp_cuda_init(int device, pp_err *e);

/* Attention on the CUDA backend: the plain flash-style kernels, or cuDNN's
 * fused flash attention (cuDNN 9), which computes in bf16 with fp32
 * statistics (lse); its dq is not bitwise reproducible, and a shape cuDNN
 * does not take falls back to the plain kernels (reported once on stderr).
 * The bf16 table uses cuDNN, the fp32 table the plain kernels (cuDNN would
 * round q, k, v, out and dout to bf16: about 1e-2 relative). pp_cuda_init
 * reads PP_CUDA_ATTENTION=plain|cudnn, which overrides that choice for both
 * tables; pp_cuda_set_attention switches after pp_cuda_init (tests), and
 * PP_CUDA_ATTENTION_AUTO restores the per-table choice. */
enum { PP_CUDA_ATTENTION_AUTO = -1, PP_CUDA_ATTENTION_PLAIN = 0, PP_CUDA_ATTENTION_CUDNN = 1 };
void pp_cuda_set_attention(int mode);
/* 1 when cuDNN takes attention of this shape forward and backward, with a
 * bias by distance or not (their plans are then built and cached); else 0
 * with the reason in why. */
int pp_cuda_cudnn_attention_check(int B, int T, int Hq, int Hkv, int D, int window, int bias,
				  char *why, size_t n);

/* The CUDA name of the GPU pp_cuda_init selected ("NVIDIA H100 80GB HBM3"),
 * for the peak that MFU is measured against; NULL before pp_cuda_init. */
const char *pp_cuda_device_name(void);
/* Its compute capability, major * 10 + minor (90: Hopper); 0 before pp_cuda_init. */
int pp_cuda_capability(void);
/* Free and total memory of that GPU in bytes; -1 before pp_cuda_init. */
int pp_cuda_memory(size_t *free_bytes, size_t *total_bytes);
#endif

/* Bytes of one pp_act element of the table's compute type. */
static inline size_t pp_act_size(const pp_ops *o)
{
	return o->act_type == PP_TYPE_BF16 ? 2 : sizeof(pp_real);
}

/* A stored format's name: "fp32", "bf16", "q8_0", "q4_0", "q4_1". */
static inline const char *pp_weights_name(int fmt)
{
	static const char *const names[] = {"fp32", "bf16", "q8_0", "q4_0", "q4_1"};
	return fmt >= 0 && fmt < (int)(sizeof names / sizeof *names) ? names[fmt] : "?";
}

/* Bytes of w (OC,C) stored as fmt (pack_weight); 0 where C does not suit fmt. */
static inline size_t pp_weights_bytes(int fmt, int OC, int C)
{
	size_t n = (size_t)OC * (size_t)C;
	switch (fmt) {
	case PP_WEIGHTS_F32:
		return n * 4;
	case PP_WEIGHTS_BF16:
		return n * 2;
	case PP_WEIGHTS_Q8_0:
		return C % 32 ? 0 : n / 32 * 34;
	case PP_WEIGHTS_Q4_0:
		return C % 32 ? 0 : n / 32 * 18;
	case PP_WEIGHTS_Q4_1:
		return C % 32 ? 0 : n / 32 * 20;
	}
	return 0;
}

/* Element i of a buffer of the table's compute type. */
static inline pp_act *pp_act_at(const pp_ops *o, const pp_act *base, size_t i)
{
	return (char *)base + i * pp_act_size(o);
}

/* Devices, and their names in enum order (NULL-terminated): "cpu", "cuda". */
enum { PP_DEVICE_CPU = 0, PP_DEVICE_CUDA = 1 };
extern const char *const pp_device_names[];
/* The compute types' names (PP_TYPE_REAL, PP_TYPE_BF16): "fp32", "bf16". */
extern const char *const pp_type_names[];
/* A name from those tables; "?" out of range. */
const char *pp_device_name(int device);
const char *pp_type_name(int type);

/* The table for a device (PP_DEVICE_*) and a compute type (PP_TYPE_*); NULL
 * if that backend is not built in or does not compute in that type (the
 * CPU backend computes in fp32 only). */
const pp_ops *pp_ops_find(int device, int type);
/* pp_ops_find for a user's device= and dtype= keys: PP_EUSAGE naming what
 * this build lacks when there is no such table. */
int pp_ops_select(int device, int type, const pp_ops **ops, pp_err *e);

#endif
