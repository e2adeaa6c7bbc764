/* The run's configuration as types: the model's hyperparameters, the mesh,
 * the schedule, the optimizer and the run's files (config.h loads and
 * validates them), and the names of their values. */
#ifndef PP_CONFIG_TYPES_H
#define PP_CONFIG_TYPES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../kernels/ops.h"
#include "../base/error.h"
#include "../schedule/schedule.h"

#define PP_PATH_MAX      4096
#define PP_MAX_CHUNKS    256 /* pipeline stages: pp * virtual_stages */
#define PP_LOSS_CHUNK_MB 64  /* default loss_chunk_mb */

enum { PP_MLP_SWIGLU, PP_MLP_GEGLU, PP_MLP_GELU };
enum { PP_NORM_RMS, PP_NORM_LAYER };
enum { PP_POS_ROPE, PP_POS_LEARNED, PP_POS_RELATIVE };
enum { PP_FAMILY_LLAMA, PP_FAMILY_MISTRAL, PP_FAMILY_MIXTRAL, PP_FAMILY_GEMMA, PP_FAMILY_GPT };
enum { PP_LR_COSINE, PP_LR_LINEAR, PP_LR_CONSTANT, PP_LR_WSD };
enum { PP_NAN_ABORT, PP_NAN_SKIP };
/* What the backward pass rebuilds rather than keeps (MaxText's remat_policy):
 * none keeps every activation; full keeps each layer's input only; minimal
 * keeps the matrix products' outputs and rebuilds the norms, the activation
 * function and attention; minimal_flash also keeps attention's output and
 * log-sum-exp. libcommon/model/stage.c: stage_saved_acts. */
enum { PP_RECOMPUTE_NONE, PP_RECOMPUTE_FULL, PP_RECOMPUTE_MINIMAL, PP_RECOMPUTE_MINIMAL_FLASH };

/* FP8 training (fp8.recipe, Transformer Engine's recipes): none, delayed
 * scaling (scales from an amax history) or current scaling (from the
 * tensor being cast). */
enum { PP_FP8_NONE, PP_FP8_DELAYED, PP_FP8_CURRENT };

typedef struct {
	char preset[64];
	int family; /* PP_FAMILY_*: picks the Hugging Face parameter names */
	int d_model;
	int n_heads;
	int n_kv_heads;
	int head_dim; /* default d_model / n_heads */
	int d_ff;     /* mlp width (per expert for MoE) */
	int n_layers;
	int vocab_size;
	int max_seq_len; /* positions table size / trained context */
	int mlp;         /* PP_MLP_* */
	int norm;        /* PP_NORM_* */
	double norm_eps;
	double norm_offset; /* 1 for Gemma's (1 + w) RMSNorm */
	int pos;            /* PP_POS_* */
	double rope_theta;
	int rel_buckets;      /* pos relative: buckets of distance per head */
	int rel_max_distance; /* pos relative: where the last bucket starts */
	int sliding_window;   /* 0 = full causal */
	bool tied_embeddings;
	bool embed_scale; /* multiply embeddings by sqrt(d_model) (Gemma) */
	bool bias;        /* biases on linear layers (GPT) */
	int n_experts;    /* 0 = dense */
	int top_k;
	int moe_every;               /* every k-th layer is MoE (1 = all) */
	double capacity_factor;      /* 0 = dropless */
	int router;                  /* PP_ROUTE_*: how router logits become gates */
	double router_aux_loss_coef; /* weight of the load-balancing loss */
	double router_z_loss_coef;   /* weight of the router z-loss */
	double init_std;
	bool scaled_residual_init; /* GPT-2: residual projections std / sqrt(2 * n_layers) */
} pp_model_cfg;

typedef struct {
	pp_model_cfg model;

	long steps;
	int global_batch; /* sequences per optimizer step (all dp ranks) */
	int microbatch;   /* sequences per forward/backward */
	int seq_len;

	/* mesh: world size = pp * dp * fsdp * tp; tp innermost, then fsdp, then
	 * dp, then pp (MaxText's and Pax's [data, fsdp, tensor]). The batch is
	 * split over dp * fsdp ranks; fsdp ranks also shard the parameters, the
	 * gradients and the optimizer state (ZeRO-3). */
	int pp, dp, tp;
	int fsdp;
	int ep;             /* expert parallelism inside dp: ep divides dp and model.n_experts */
	int microbatches;   /* per data rank per step: global_batch / (dp * fsdp * microbatch) */
	int virtual_stages; /* pipeline stages per pp rank (interleaving) */
	sched_kind
		schedule; /* pipeline schedule: gpipe | 1f1b | eager1f1b | interleaved1f1b | zbh1 */
	int recompute;    /* PP_RECOMPUTE_*: activations rebuilt in the backward pass */
	bool shard_optimizer; /* ZeRO-1 */
	double grad_bucket_mb; /* dp gradient sum in buckets of this many MiB, overlapped with the backward; 0: after it */
	double loss_chunk_mb; /* logits of the head and loss computed this many MiB at a time */
	double comm_timeout;  /* seconds a collective may wait for its peers */
	/* layers of each pipeline stage (virtual stage order); 0 stages = an
	 * even split with the remainder to the first stages */
	int stage_layers[PP_MAX_CHUNKS];
	int n_stage_layers;

	double lr;
	struct {
		int type;          /* PP_LR_*: cosine | linear | constant | wsd */
		long warmup_steps; /* -1 = warmup_fraction * steps */
		double warmup_fraction;
		double final_fraction; /* lr at the end = final_fraction * lr */
		double decay_fraction; /* wsd: share of steps spent decaying */
	} lr_schedule;
	struct {
		double b1, b2, eps, weight_decay;
		bool decay_norms_and_biases;
	} adamw;
	double clip_norm; /* 0 = off */
	uint64_t seed;
	int dtype;      /* compute type, PP_TYPE_REAL (fp32) | PP_TYPE_BF16 (bf16) */
	int device;     /* PP_DEVICE_CPU | PP_DEVICE_CUDA */
	int nan_policy; /* PP_NAN_ABORT | PP_NAN_SKIP */

	char data[PP_PATH_MAX];      /* "synthetic" or a token dataset */
	char val_data[PP_PATH_MAX];  /* validation tokens; "" = data's own /val split */
	char tokenizer[PP_PATH_MAX]; /* "" = unchecked; else must have made the data */
	bool data_eos;               /* insert EOS between documents */
	/* whole documents share a sequence, attention within each (positions
	 * restart at each); off: a corpus is one stream of windows, a dataset
	 * with a loss mask one document per sequence */
	bool packing;
	/* start from these parameters (a checkpoint, run directory or GGUF
	 * file; any layout) with a fresh optimizer at step 0; "" = none */
	char load_parameters_path[PP_PATH_MAX];
	/* low-rank adapters (PEFT's LoRA); rank 0 = off */
	struct {
		int rank;
		double alpha; /* scale alpha / rank (alpha / sqrt(rank) with rslora) */
		bool rslora;
		char targets[256]; /* all | attention | mlp | projection names, comma-separated */
		double dropout;
		int base_dtype; /* PP_TYPE_*: how the frozen base weights are held */
		/* the base's fingerprint (tio_base_sha256), set at step 0 from
		 * load_parameters_path and checked whenever the base is read */
		char base_sha256[65];
	} lora;
	/* FP8 matrix products (PP_FP8_*); model/fp8.c */
	struct {
		int recipe;
		int amax_history; /* delayed: steps of amax kept */
		double margin;    /* scale = FP8 max / amax / 2^margin */
		bool head;        /* the output head's product too */
	} fp8;
	char run_dir[PP_PATH_MAX];
	long checkpoint_period;  /* 0 = only at the end */
	bool save_on_completion; /* save after the last step (benchmarks turn it off) */
	int keep;                /* keep the newest K checkpoints (0 = all) */
	long resume_from;        /* -1: the newest sound checkpoint; else that step */
	long eval_interval;      /* 0 = off */
	int eval_batches;
	char eval_tasks[PP_PATH_MAX]; /* task files scored at each evaluation, comma-separated */
	int eval_task_format;         /* their schema (pp_task_format_names) */
	long log_period;
	int timing_skip_steps; /* warm-up steps left out of timing statistics */
	/* profile_steps: "" off, "A:B" records steps A .. B-1, "N" records N
	 * steps after the warm-up (timing_skip_steps); parsed into: */
	char profile_steps[32];
	long profile_begin, profile_end; /* "A:B"; 0 otherwise */
	int profile_count;               /* "N"; 0 otherwise */
	bool tensorboard;         /* RUN/tensorboard/events.out.tfevents.* beside metrics.jsonl */
	bool async_checkpointing; /* write checkpoints on a background thread */
	double step_timeout; /* seconds a step may take before the watchdog ends the job; 0 = off */
	double max_runtime;  /* seconds of wall clock: stop and save before they run out; 0 = off */
	/* test-only: one rank's profile clock offset by seconds; every pipeline
	 * pass padded to a fixed time (ms; 0 = as it comes); a hung rank */
	struct {
		double clock_offset_s;
		int clock_offset_rank; /* -1: none */
		double fwd_ms, bwd_ms, bwd_w_ms;
		long hang_step; /* the job's last rank sleeps inside this step (tests the watchdog); 0 = off */
	} debug;

	json_t *json; /* the fully resolved config (owned) */
} pp_config;

/* The ranks that split each step's batch: dp * fsdp. */
static inline int pp_config_data_ranks(const pp_config *c) { return c->dp * c->fsdp; }
/* The world size of the layout: pp * dp * fsdp * tp. */
static inline int pp_config_world(const pp_config *c) { return c->pp * c->dp * c->fsdp * c->tp; }

/* The values' names in enum order, NULL-terminated (the config's words). */
extern const char *const pp_family_names[];
extern const char *const pp_recompute_names[];
extern const char *const pp_fp8_recipe_names[];
/* task file schemas (pp-eval --task-format, eval_task_format) */
extern const char *const pp_task_format_names[];
/* One of those names; "unknown" for a value out of range. */
const char *pp_family_name(int family);
/* "none", "full", "minimal" or "minimal_flash" */
const char *pp_recompute_name(int recompute);

#endif
