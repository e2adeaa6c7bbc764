/* A training step's time on a described cluster (pp-init --simulate), from
 * a cost model of each pass and each collective pp runs, and the pipeline
 * simulated from the schedule's own action lists (schedule.h).
 *
 * Compute, per microbatch and layer on one tp rank: each matrix product
 * at FLOPs / (peak x efficiency(its FLOPs)), causal attention at its FLOPs
 * / (peak x efficiency(T)), and the memory-bound work (norms, residual
 * adds, RoPE, the gated activation, the loss) at its bytes / (HBM
 * bandwidth x efficiency), each kernel with a launch cost; the backward
 * pass two products per forward one and 2.5x attention's FLOPs; recompute
 * what its policy rebuilds; the head and its loss on the last stage, during
 * the training forward as pp runs them. FP8 products at the FP8 peak, with
 * their casts' bytes.
 *
 * Communication, with nccl-tests' bus-bandwidth formulas (all-reduce
 * 2 (n-1)/n bytes, all-gather and reduce-scatter (n-1)/n bytes, over the
 * bus bandwidth of the slowest link the group crosses, plus (n-1) or
 * 2 (n-1) latencies) and ranks numbered tp fastest, then the data ranks,
 * then pp: tp's two all-reduces per layer and pass, exposed (pp sums
 * synchronously); pp's sends of the activations and gradients, blocking;
 * fsdp's gathers and reduce-scatters per microbatch overlapped with the
 * pass they serve (the first unit's exposed); the dp all-reduce of the
 * fp32 gradients overlapped with the last backward passes; ep's two
 * all-to-alls per MoE layer and pass. Then AdamW over the rank's share.
 *
 * The kernels are pp's unless the cluster's sim_kernels (cluster.h) say
 * otherwise: attention as batched products over every score, with the
 * scores through HBM 6 times forward and 9 times backward; the embedding
 * as a product of one-hot rows with the table, and its gradient as the
 * transposed product.
 *
 * Not modelled: contention between concurrent collectives, NCCL's
 * protocols and algorithms beyond the ring's formula, stragglers, data
 * loading, checkpoints, evaluation, the CPU's launch overheads beyond a
 * fixed cost per kernel, and memory fragmentation (a layout fits when the
 * plan's total is within the GPU's memory). */
#ifndef PP_SIM_SIMULATE_H
#define PP_SIM_SIMULATE_H

#include <stdbool.h>
#include <stdio.h>

#include "../config/config.h"
#include "../config/layout.h"
#include "cluster.h"

/* seconds per step of each kind, on the pipeline rank that finishes last
 * (busiest when they tie) */
typedef struct {
	double compute;   /* its passes' kernels, recompute included */
	double tp;        /* tp all-reduces inside them */
	double ep;        /* expert all-to-alls */
	double pp;        /* sends between stages */
	double fsdp;      /* exposed gathers and reduce-scatters */
	double bubble;    /* waiting in the pipeline */
	double dp;        /* the exposed part of the gradient all-reduce */
	double optimizer; /* AdamW */
} sim_breakdown;

typedef struct {
	int nodes, world;
	double step;          /* seconds */
	double tokens_per_s;  /* the whole job's */
	double mfu;           /* pp's FLOP count (6N + 6 L Hq D T: causal) against the bf16 peak */
	double mfu_noncausal; /* MaxText's (attention counted as if not causal) */
	double flops_per_token;
	double fwd, bwd; /* one microbatch's passes on the heaviest chunk, seconds */
	double dp_total; /* the gradient all-reduce, overlapped or not */
	sim_breakdown b;
	double memory; /* bytes: the plan's heaviest rank */
	bool fits;     /* within the GPU's memory */
} sim_result;

/* c's step on nodes of cluster cl (nodes 0: as many as c's world needs,
 * which must fill whole nodes or fit in one), with the plan's memory in
 * bytes (NULL: planned here). PP_EUSAGE naming the mismatch when c's world
 * is not nodes x gpus_per_node. */
int sim_step(const pp_config *c, const sim_cluster *cl, int nodes, const double *memory,
	     sim_result *r, pp_err *e);

/* The kernels of each virtual stage's passes for one microbatch (no
 * communication), seconds: fwd and bwd of pp x virtual_stages entries. */
int sim_pass_compute(const pp_config *c, const sim_cluster *cl, double *fwd, double *bwd,
		     pp_err *e);

/* The report of pp-init --simulate: text, or one JSON object. */
int sim_print(FILE *f, const pp_config *c, const sim_cluster *cl, const sim_result *r, bool json,
	      pp_err *e);

/* One layer's causal attention forward for one microbatch on a tp rank of
 * share t (config/layout.h): its FLOPs, as pp's kernels skip the masked
 * scores (a sliding window's too). */
double sim_attention_flops(const pp_config *c, const layout_tp *t);

/* The key=value line of c's layout, as pp-train takes it. */
void sim_layout_line(const pp_config *c, char *buf, size_t n);

#endif
