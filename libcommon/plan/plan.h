/* Planning by arithmetic: parameter counts, FLOPs per token, per-rank memory
 * and the device peak table. Nothing here allocates in proportion to the
 * model, so a 70B plan on a 512-rank mesh is instant; `pp-init --plan`
 * prints plan_print's report and `pp-train` takes its FLOPs and peak from
 * here for the MFU it logs.
 *
 * Letter code: V vocab, C d_model, L layers, Hq / Hkv query / key-value
 * heads, D head_dim, F d_ff (per expert), E experts, K top_k, B microbatch,
 * T seq_len. */
#ifndef PP_PLAN_H
#define PP_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/error.h"
#include "../config/config.h"

/* Parameter counts of the whole (unsharded) model. */
typedef struct {
	int64_t total;         /* every parameter, each tensor once */
	int64_t embedding;     /* wte (V x C) + wpe (max_seq_len x C, learned positions) */
	int64_t positions;     /* wpe alone; part of embedding */
	int64_t attention;     /* all layers: qkv + o projections and their biases */
	int64_t mlp;           /* all layers: dense MLPs and all experts, with biases */
	int64_t router;        /* all MoE layers: E x C each */
	int64_t norms;         /* all norm weights and biases, final norm included */
	int64_t head;          /* output head V x C; 0 when tied to wte */
	int64_t per_layer;     /* one dense layer */
	int64_t per_moe_layer; /* one MoE layer; 0 for a dense model */
	int n_moe_layers;
	/* N of the MFU formula: parameters taking part in matrix products per
	 * token: every layer matrix (for MoE only K experts' MLPs, plus the
	 * router) and the head (the tied wte, counted once, when tied); not
	 * the wte lookup of an untied model, wpe, norms or biases. */
	int64_t matmul;
	/* Parameters a token touches: total less the E - K experts it is not
	 * routed to in each MoE layer. Equal to total for a dense model. */
	int64_t active;
} plan_counts;

/* Of a resolved model config (every default filled in by the loader). */
void plan_param_count(const pp_model_cfg *m, plan_counts *out);

/* Training FLOPs per token (llm.c, causal attention):
 *   6 N + 6 L (Hq D) T
 * 6 N: forward 2 N, backward 4 N. Attention scores and values cost
 * 2 * 2 * Hq D T per token forward at full T, halved by the causal mask,
 * then times 3 for forward + backward. */
double plan_flops_per_token(const pp_model_cfg *m, int seq_len);
/* Forward only (eval, decode at context T): 2 N + 2 L (Hq D) T. */
double plan_flops_per_token_fwd(const pp_model_cfg *m, int seq_len);

/* Memory of one pp rank, in bytes: of its first data and tp rank (the
 * others hold as much or, where a share rounds down, less). The chunks are
 * described as the trainer builds them and their sizes are stage_create's
 * (model.h: stage_sizes), so the plan is what the run allocates. */
typedef struct {
	int rank;            /* pp rank */
	int layers;          /* layers it holds (all its chunks) */
	int chunks;          /* virtual stages it holds */
	bool first, last;    /* holds the embedding / the final norm and head */
	int in_flight;       /* chunk-microbatches whose saved state it keeps at peak
			      * (schedule_peak_held_theory) */
	int peak_act;        /* of which holding activations (schedule_peak_act_theory) */
	int peak_wstash;     /* and weight-gradient stashes (zbh1) */
	int64_t param_count; /* parameters it trains (its tp slice): under LoRA, the adapters */
	int64_t base_count;  /* LoRA: the frozen base it holds, in the compute type only */
	int64_t full_total;  /* LoRA: total of the same run training every parameter */
	int64_t params;      /* param_count * dtype bytes */
	int64_t grads;       /* param_count * 4: fp32 */
	int64_t optimizer;   /* AdamW m, v (/ dp if sharded), + the fp32 master under bf16,
			      * + the ZeRO-1 gather buffer */
	/* fsdp > 1: params, grads and optimizer above are this rank's shares
	 * (fsdp.h), and beside them the working set: */
	int64_t unit_max; /* parameters of the largest unit (a layer, the embedding, the head) */
	int64_t gathered; /* FSDP_BUFS gathered units of unit_max, dtype bytes */
	int64_t grad_buffers; /* FSDP_GBUFS x 2 of unit_max, and the embedding's and head's whole
			       * gradients, fp32 */
	/* and the bytes each rank sends per step (about what it receives):
	 * every unit all-gathered for each microbatch's forward and backward,
	 * the layers' gradients reduce-scattered per microbatch (the
	 * embedding's and head's once a step), the shares summed over dp */
	int64_t fsdp_gather, fsdp_reduce, fsdp_dp;
	int64_t activations; /* what its slots hold (each chunk's slots: the schedule's
			      * microbatches in flight on it) and the rebuilt set */
	int64_t scratch;     /* working buffers: the backward pass's, the head's, the experts' */
	int64_t logits;      /* the last stage's chunk of (rows, V/tp) logits (loss_chunk_mb) */
	int64_t fp8;         /* fp8.recipe: the weights' FP8 copies, the casts' buffers, the
			      * amax histories and the products' packed operands, once per
			      * rank (model.h: stage_bytes.fp8) */
	int64_t total;
} plan_memory_t;

/* The pp rank with the largest total (ties: the lowest rank). PP_EUSAGE when
 * the layout cannot be planned (fewer layers than pipeline chunks, an
 * unknown dtype, a non-positive size). */
int plan_memory(const pp_config *c, plan_memory_t *out, pp_err *e);
/* The same for a given pp rank. */
int plan_memory_rank(const pp_config *c, int rank, plan_memory_t *out, pp_err *e);

/* Dense bf16 tensor-core peak in TFLOP/s of a CUDA device, matched by
 * case-insensitive substring of its name ("NVIDIA H100 80GB HBM3"); 0 for a
 * device not in the table (print achieved TFLOP/s and no MFU then). */
double plan_peak_tflops(const char *device_name);
/* The same for dense FP8 (E4M3/E5M2 inputs, fp32 accumulation): twice bf16's
 * on Hopper; 0 for a device without FP8 tensor cores (A100) or unknown. */
double plan_fp8_peak_tflops(const char *device_name);
/* The share of the training FLOPs per token that fp8.recipe runs in FP8:
 * the linear layers' 6 N, less the head's unless fp8.head; 0 without FP8. */
double plan_fp8_share(const pp_config *c);

/* Model FLOPs utilisation in [0, 1+): flops_per_token * tokens_per_s /
 * (peak_tflops * 1e12), with tokens_per_s the rate of one device; -1 when
 * the peak is unknown (peak_tflops <= 0). */
double plan_mfu(double flops_per_token, double tokens_per_s, double peak_tflops);

/* The plan report: an aligned table (parameters by component, FLOPs per
 * token with its formula, layout, tokens per step, per-rank memory in GiB by
 * category), or with json one JSON object on one line. */
int plan_print(FILE *f, const pp_config *c, bool json, pp_err *e);

#endif
