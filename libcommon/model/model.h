/* The decoder-only transformer, built as pipeline stages.
 *
 * A stage owns layers [layer_begin, layer_end); the first stage also owns the
 * token (and position) embedding, the last the final norm, the output head
 * and the loss. A single process runs one stage holding every layer. The
 * stage knows layers, not ranks: whoever builds it gives it its range.
 *
 * Activations move between stages as explicit (B,T,C) buffers. Each stage
 * keeps the saved activations of n_slots microbatches, so a pipeline
 * schedule can have several microbatches in flight; forward(slot) saves into
 * slot and backward(slot) consumes it.
 *
 * All parameters of a stage live in one flat buffer (w), in the order of
 * params[]; gradients (g) use the same layout. Within a layer q, k, v are
 * adjacent (one (Hq+2Hkv)*D x C product) and so are gate and up. The
 * buffer holds, in layer order, what every rank of an expert-parallel
 * group holds alike ([0, n_shared): embeddings, attention, norms, routers,
 * dense MLPs, the head), then this rank's experts of every MoE layer
 * ([n_shared, n_elems)), which are summed and sharded over other ranks. */
#ifndef PP_MODEL_H
#define PP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../../kernels/ops.h"
#include "../base/error.h"
#include "../comm/comm.h"
#include "../config/config.h"
#include "../config/layout.h"
#include "moe.h"

#define PP_MAXDIM 4

/* A tensor-parallel group as the stage sees it: its slice and a way to
 * combine a buffer with its peers (the caller binds it to a communicator).
 * size 1 needs no allreduce. */
enum { PP_REDUCE_SUM = 0, PP_REDUCE_MAX = 1 };
typedef struct {
	int rank, size;
	/* in place over n elements of type (PP_TYPE_REAL, or the compute
	 * type's PP_TYPE_BF16 for activations) */
	int (*allreduce)(void *ctx, void *buf, size_t n, int type, int op, pp_err *e);
	void *ctx;
} pp_tp;

/* Which backward pass to run: the whole of it, or ZeroBubble's split into
 * the input-gradient part (what the previous stage waits for) and the
 * weight-gradient part (deferred to fill pipeline bubbles). */
enum { STAGE_BWD_FULL, STAGE_BWD_INPUT, STAGE_BWD_WEIGHT };
/* Or'ed into part for the last backward pass that a step runs on a stage
 * (its last STAGE_BWD_FULL, or under the split its last STAGE_BWD_WEIGHT):
 * stage_backward then reports gradients to spec.grad_ready as they become
 * final. */
enum { STAGE_BWD_LAST = 16 };

struct pp_stage;
/* Told, during a step's last backward pass of a stage, that the gradients
 * g[from, n_shared) are final: the backward walks that part of the
 * parameter buffer from its end (head, final norm, then each layer from the
 * last) to its start (embeddings), so from only decreases, and the last
 * call of the pass has from = 0, when the experts g[n_shared, n_elems) are
 * final too. Called after the head and final norm, after each layer's
 * weight gradients, and at the end. An error stops the backward pass. */
typedef struct {
	int (*fn)(void *ctx, struct pp_stage *s, size_t from, pp_err *e);
	void *ctx;
} stage_grad_hook;

/* Fully sharded data parallelism (FSDP). The stage's buffer is cut into
 * units: [0, the first layer's first tensor) (the embedding, on the first
 * stage; on the last with tied embeddings, its copy), each layer, and [the
 * final norm, n_shared) (the last stage's final norm and head): unit 0, 1
 * + l for layer l, and n_units - 1. With units.use set the stage keeps the
 * master weights and gradients of [units.lo, units.hi) only (w_lo, w_hi)
 * and reads each unit's weights where whoever set the hooks has put them
 * (unit_w), which that owner gathers from the shards:
 *   use(u, next, grads): unit u's weights are needed now at s->unit_w[u],
 *     and with grads a buffer at s->unit_g[u] that the pass adds unit u's
 *     gradients to; next is the unit the pass reads after u (-1: none),
 *     which the owner may start fetching while u computes.
 *   done(u): the pass has added all it will to unit_g[u] for now.
 * A forward reads units in order (the last stage then the tail, and unit
 * 0 again for a tied head), a backward in reverse. An error stops the pass. */
typedef struct {
	int (*use)(void *ctx, struct pp_stage *s, int u, int next, bool grads, pp_err *e);
	int (*done)(void *ctx, struct pp_stage *s, int u, pp_err *e);
	void *ctx;
	/* the fsdp group: the stage keeps rank's share of its buffer
	 * (layout_share); size 0 or 1 keeps all of it. Set with the hooks, or
	 * alone to describe such a stage. */
	int size, rank;
} stage_units;

typedef struct {
	int layer_begin, layer_end; /* this stage's layers */
	int B, T;                   /* microbatch shape */
	int n_slots;                /* microbatches in flight */
	int recompute;              /* PP_RECOMPUTE_*: what backward rebuilds (stage_saved_acts) */
	bool split_backward;        /* keep what STAGE_BWD_WEIGHT needs */
	bool no_grad;               /* inference only: no gradients, no backward scratch */
	bool keep_logits;           /* last stage: keep each slot's (B,T,V) logits (stage_logits) */
	double loss_chunk_mb; /* last stage: MiB of logits per chunk of rows; 0: PP_LOSS_CHUNK_MB */
	pp_tp tp;
	/* Expert parallelism: this rank holds experts [rank E / size, (rank +
	 * 1) E / size) of each MoE layer and exchanges token rows over comm
	 * (NULL when size is 1). */
	struct {
		int rank, size;
		pp_comm *comm;
	} ep;
	/* The scale of a microbatch's load-balancing and z losses in the
	 * objective: 1 / (microbatches of the whole step, every dp rank's), so
	 * that the step's gradient is their mean's. 0: 1. */
	double moe_loss_scale;
	/* Low-rank adapters (PEFT's LoRA) on the projections of targets (1 <<
	 * LORA_*, hparams.h): rank 0 for none. With them every other
	 * parameter is frozen: no weight gradient, no update. */
	struct {
		int rank;
		double scale;
		unsigned targets;
		double dropout; /* of the adapters' input, in training forwards (stage_noise) */
	} lora;
	/* FP8 matrix products (fp8.c): recipe PP_FP8_* (0: none), the
	 * delayed recipe's amax history length and margin, and whether the
	 * output head's product is FP8 too */
	struct {
		int recipe, history;
		double margin;
		bool head;
	} fp8;
	stage_grad_hook grad_ready; /* fn NULL: nobody is told */
	stage_units units;          /* use NULL: the stage holds all of its weights */
} stage_spec;

/* The adapters' working buffers (lora.c): (rows, rank), and two of (rows,
 * the widest of d_model, the local q heads' width and d_ff). A stage holds
 * one for its microbatch, a KV cache its own for its rows. */
typedef struct {
	pp_act *u, *z, *y;
	pp_act *x; /* (rows, the widest): the dropped input, with lora.dropout */
} lora_scratch;

/* The random draws of a training forward (LoRA's dropout): key 0 for none
 * (evaluation, decoding); row0, the index of the microbatch's first row
 * among the step's rows (the single process's order, layout_seq_index), so
 * that an element's draw depends on what it is, never on which rank,
 * microbatch or device computes it. */
typedef struct {
	uint64_t key, row0;
} stage_noise;

typedef struct {
	char name[96]; /* Hugging Face name */
	int ndim;
	int64_t shape[PP_MAXDIM]; /* this rank's slice, stored layout: Linear weights are (out, in) */
	int64_t global_shape[PP_MAXDIM];
	/* Where the slice sits in the whole tensor. A fused projection (GPT-2's
	 * c_attn: q, k, v) holds n_blocks row blocks of block_rows rows each,
	 * block b starting at global row block_row[b]; otherwise n_blocks = 1
	 * and block_row[0] is the row offset. col is the column offset. */
	int n_blocks;
	int64_t block_rows, block_row[3], col;
	/* held identically by several tp ranks (norms, row-parallel biases,
	 * kv heads replicated when tp > kv heads): replicas; tp_owner says
	 * whether this rank is the one that counts and saves it */
	int replicas;
	bool tp_owner;
	bool grad_partial; /* replicas whose gradients are partial sums (shared kv heads) */
	size_t off, n;     /* element offset into the stage buffer, element count */
	bool decay;        /* weight decay applies (matrices; not norms or biases) */
	double init_std;   /* normal(0, std); 0 = constant init_value */
	double init_value;
	double init_bound; /* > 0: uniform(-bound, bound) instead (LoRA's A, as PEFT's
			    * Kaiming uniform: 1 / sqrt(fan in)) */
	bool frozen;       /* a base weight under LoRA: held in pp_stage.base (off is
			    * into it), no gradient, never updated, not in checkpoints */
	int lora;          /* LoRA's A (1) or B (2) of a projection; 0 for the others */
} pp_param;

typedef struct pp_stage_acts pp_stage_acts;

typedef struct pp_stage {
	const pp_model_cfg *cfg;
	const pp_ops *ops;
	stage_spec spec;
	int layer_begin, layer_end;
	bool first, last;
	int B, T, n_slots;
	int recompute;  /* PP_RECOMPUTE_* */
	unsigned saved; /* stage_saved_acts(recompute) */
	/* this rank's share of the heads and widths (layout_tp_share) */
	int n_heads, n_kv_heads, d_ff, vocab, vocab_begin;
	int kv_replicas, kv_block; /* tp ranks holding its kv heads; which block of them */

	int n_params;
	pp_param *params;
	size_t n_elems;
	size_t n_shared; /* [0, n_shared): all but this rank's experts (n_elems without MoE) */
	/* Device buffers of the elements [w_lo, w_hi) of the parameter buffer
	 * (all n_elems of it, or under FSDP this rank's shard): element x is
	 * w[x - w_lo] (stage_w, stage_g). */
	size_t w_lo, w_hi;
	pp_real *w, *g; /* master weights, gradients */
	/* Under LoRA the frozen base lives apart, in the compute type only
	 * (no master, no gradient, no optimizer state; pp_param.frozen): a
	 * frozen parameter's off is into base, of n_base elements, and the
	 * buffer above (n_elems) holds the adapters alone. sink takes the
	 * gradients the norms' kernels compute for frozen vectors, unused. */
	size_t n_base;
	pp_act *base;
	pp_real *sink;
	pp_act *wc; /* the weights in the compute type, which the forward and backward
			 * read: w itself when that is pp_real, else a copy (stage_weights_changed) */
	/* FSDP's units (stage_units): n_units + 1 bounds in the buffer, each
	 * parameter's unit, and where each unit's weights and gradient buffer
	 * are now (NULL when the stage holds all of its weights). */
	int n_units;
	size_t *unit_lo;
	int *param_unit;
	pp_act **unit_w;
	pp_real **unit_g;

	pp_stage_acts *acts; /* per-slot saved activations and scratch */

	/* The MoE layers' losses and dropped assignments over the forwards
	 * (stage_forward) since the caller last zeroed them (moe.h: per
	 * microbatch, summed here over microbatches and layers). */
	struct {
		double aux, z;
		long dropped, routed;
	} moe;

	/* stage_pack_weights (kvcache.h): per parameter, its stored form for
	 * decoding (data NULL for the others) */
	struct pp_packed *packed;
	size_t packed_elems; /* parameters stored so */
	double packed_bytes; /* and their bytes as stored */

	struct stage_fp8 *fp8; /* spec.fp8's scales, histories and copies (fp8.c); NULL: none */
} pp_stage;

/* Builds the parameter table and allocates weights, gradients and
 * activations. Parameters are zero until stage_init_params or a checkpoint
 * load. Errors: a width that tp does not divide, or memory. */
int stage_create(pp_stage *s, const pp_model_cfg *cfg, const pp_ops *ops, const stage_spec *spec,
		 pp_err *e);
/* The parameter table alone (names, shapes, slices, offsets, n_elems) of
 * the stage stage_create would build, with no memory for weights or
 * activations (ops NULL, w and g NULL): what a checkpoint writer needs to
 * know of a layout. stage_free releases it. */
int stage_describe(pp_stage *s, const pp_model_cfg *cfg, const stage_spec *spec, pp_err *e);
/* The bytes of what stage_create allocates for a stage (built, or
 * described only), with activations of act_bytes each (pp_act_size): the
 * sizes it allocates by, added up for pp-init --plan and pp-train's
 * memory line. */
typedef struct {
	int64_t params; /* the compute copy of the parameters it keeps (the master itself in fp32) */
	int64_t master;    /* the fp32 master weights beside a compute copy of another type */
	int64_t grads;     /* fp32 gradients (none for inference) */
	int64_t slot;      /* each slot: its layers' inputs and kept activations, the stage's
			  * output, the token ids, the final norm's statistics, the head's input
			  * gradient, a split backward's stash */
	int64_t rebuilt;   /* the one copy of what the policy rebuilds */
	int64_t scratch;   /* the backward pass's, the head's and the experts' working buffers */
	int64_t logits;    /* the head's chunk of logits (with keep_logits, each slot's) */
	int64_t fp8;       /* FP8: the weights' copies, the casts' buffers, the amax histories,
			  * the products' packed operands (bf16) */
	int64_t fp8_packs; /* of fp8, the packed operands: the backend's scratch, which every
			    * chunk of a rank shares */
	int64_t total;     /* all of it: slot counted n_slots times */
} stage_bytes;
void stage_sizes(const pp_stage *s, size_t act_bytes, stage_bytes *out);

/* Rows per chunk of the last stage's head and loss: as many rows of V
 * logits of elem bytes as fit in mb MiB (PP_LOSS_CHUNK_MB if 0), rounded
 * down to a multiple of 128 where 128 fit, at least one, at most N. The
 * plan counts the same scratch. */
int64_t stage_loss_rows(int64_t N, int64_t V, int64_t elem, double mb);

/* A layer's activations as a recompute policy keeps or rebuilds them. The
 * layer's input is always kept; so, in effect, is its down product, which
 * is the next layer's input less the residual (mid). */
enum {
	PP_SAVE_NORM1 = 1 << 0, /* h1 = norm1(x), and its mean and rstd */
	PP_SAVE_QKV = 1 << 1,   /* the qkv product, after rope */
	PP_SAVE_ATT = 1 << 2,   /* attention's output and log-sum-exp */
	PP_SAVE_MID = 1 << 3,   /* x + the o product */
	PP_SAVE_NORM2 = 1 << 4, /* h2 = norm2(mid), and its mean and rstd */
	PP_SAVE_UP = 1 << 5,    /* a dense MLP's up (gate|up) product */
	PP_SAVE_ACT = 1 << 6,   /* its activation function's output */
	PP_SAVE_MOE = 1 << 7,   /* a MoE MLP's routing and experts' activations, as one */
	PP_SAVE_ALL = (1 << 8) - 1,
};
/* The PP_SAVE_* a policy keeps for every layer of every microbatch in
 * flight. A stage holds one copy of the rest, which the backward pass
 * rebuilds layer by layer, shared by its microbatches: none keeps them all,
 * full none, minimal QKV, MID, UP and MOE (a MoE layer's MLP is kept whole:
 * its experts' rows are products, and rebuilding its routing would repeat
 * the experts' exchange), minimal_flash those and ATT. */
unsigned stage_saved_acts(int recompute);

/* The spec of a single stage holding every layer, without tensor parallelism. */
stage_spec stage_spec_whole(const pp_model_cfg *cfg, int B, int T, int recompute);
/* The spec of local chunk k of a rank with layout l under config c: its
 * layers, the microbatch shape, its slots, the recompute policy, the
 * schedule's split backward, the loss chunk and its tp and ep coordinates
 * (the caller binds their communicators: tp.allreduce, ep.comm). */
stage_spec stage_spec_of(const pp_config *c, const pp_layout *l, int k);
/* The adapters config c asks for (lora.*), into spec. */
void stage_spec_set_lora(stage_spec *spec, const pp_config *c);
/* The FP8 recipe c asks for (fp8.*), into spec. */
void stage_spec_set_fp8(stage_spec *spec, const pp_config *c);
void stage_free(pp_stage *s);

/* Seeded initialisation. Each tensor draws from a stream keyed by (seed,
 * name, element index in the whole tensor), so every layout initialises the
 * same model. */
void stage_init_params(pp_stage *s, uint64_t seed);

/* To be called after anything but stage_init_params writes w (a checkpoint
 * load, an optimizer step): brings the compute copy wc up to date. */
void stage_weights_changed(pp_stage *s);
/* The same for the elements [lo, hi) of w only. */
void stage_weights_range_changed(pp_stage *s, size_t lo, size_t hi);

/* Writes p's values (host, p->n of them, this rank's slice) where the stage
 * keeps p: the part of the master buffer it holds (and its compute copy),
 * or the frozen base. */
void stage_put_param(pp_stage *s, const pp_param *p, const pp_real *host);

/* Element x of the master weights and of the gradients (w_lo <= x <= w_hi). */
static inline pp_real *stage_w(const pp_stage *s, size_t x) { return s->w + (x - s->w_lo); }
static inline pp_real *stage_g(const pp_stage *s, size_t x) { return s->g + (x - s->w_lo); }

const pp_param *stage_find_param(const pp_stage *s, const char *name);

/* Whether p is one of this rank's experts (in [n_shared, n_elems)). */
static inline bool stage_is_expert(const pp_stage *s, const pp_param *p)
{
	return !p->frozen && p->off >= s->n_shared;
}

/* Whether p is the last stage's copy of a tied embedding (the first stage
 * holds the one that counts). */
bool stage_is_embedding_copy(const pp_stage *s, const pp_param *p);

/* Index in the whole tensor (row-major) of element j of this rank's slice. */
uint64_t param_global_index(const pp_param *p, size_t j);

/* Forward of one microbatch into slot. Activations (in, out, dout, din,
 * logits) are in the backend's compute type (kernels/ops.h).
 *   first stage: tokens (B,T) host ints;   other stages: in (B,T,C) device
 *   last stage:  targets (B,T) host ints (PP_IGNORE_INDEX to skip); adds the
 *                summed token loss to *loss_sum. The head and the loss run
 *                over chunks of rows (spec.loss_chunk_mb of logits each).
 *                If dscale != 0 each chunk's gradient of (dscale * summed
 *                loss) is taken through the head at once: the head's weight
 *                gradient accumulates into g here, in the forward, and the
 *                gradient of the head's input is kept for stage_backward
 *                (dscale = 1 / tokens in the whole step gives the mean
 *                loss). n_valid counts non-ignored targets.
 *   other stages: *out receives the (B,T,C) output (device, owned by slot).
 * pos0 is the position of the first token (0 in training). */
int stage_forward(pp_stage *s, int slot, const int *tokens, const pp_act *in, const int *targets,
		  pp_real dscale, double *loss_sum, long *n_valid, pp_act **out, pp_err *e);

/* Packed documents (packing=true): pos (B,T) host ints, each row's
 * position in its document (0 at a document's first row), for the next
 * stage_forward into slot and its backward: attention then stays within
 * documents (RoPE needs nothing more: it sees distances only). NULL: each
 * sequence is one document. Every stage of a pipeline takes them. */
int stage_set_positions(pp_stage *s, int slot, const int *pos, pp_err *e);
/* The draws of the next stage_forward into slot and of its backward. */
void stage_set_noise(pp_stage *s, int slot, stage_noise noise);

/* FP8 (spec.fp8, fp8.c). Each linear product has FP8_ROLES states, one
 * per tensor it casts (its input, weight and output gradient); a layer
 * has FP8_PRODUCTS of them, the head one more (fp8.head). */
enum { FP8_QKV, FP8_O, FP8_UP, FP8_DOWN, FP8_PRODUCTS };
enum { FP8_X, FP8_W, FP8_G, FP8_ROLES };
/* the states of the stage (0 without FP8), and the first of local layer l's
 * product (l < 0: the head's) */
int stage_fp8_count(const pp_stage *s);
int stage_fp8_state(const pp_stage *s, int l, int product);
/* A step begins: its tallies are emptied. */
void stage_fp8_begin_step(pp_stage *s);
/* The weights changed (an optimizer step, a load): their FP8 copies are
 * made again at their next use. stage_weights_changed says it too. */
void stage_fp8_weights_changed(pp_stage *s);
/* The step's amax of each state (stage_fp8_count), and counts[3]: the
 * elements cast, saturated and flushed to zero. */
void stage_fp8_step_stats(pp_stage *s, float *amax, double *counts);
/* Delayed scaling, at a step's end: each state's history takes amax (the
 * step's, reduced over the ranks that share the tensor) and its scale for
 * the next step is computed. */
void stage_fp8_update(pp_stage *s, const float *amax);
/* Delayed scaling's state of local layer l (l < 0: the head), host
 * memory: rows (one per state) of cols = 1 + history values, the scale
 * then the amaxes newest first; NULL without it. Checkpoints save it
 * (ckpt_fp8_name). */
pp_real *stage_fp8_meta(const pp_stage *s, int l, size_t *rows, size_t *cols);

/* Backward of the microbatch in slot. Gradients accumulate into g.
 *   last stage: starts from the head input's gradient kept by forward (the
 *               head's weight gradient is already in g); others: dout (B,T,C).
 *   other than first stage: *din receives the (B,T,C) input gradient.
 * part is STAGE_BWD_FULL, or STAGE_BWD_INPUT then later STAGE_BWD_WEIGHT
 * (dout and din unused) with spec.split_backward; | STAGE_BWD_LAST on the
 * step's last pass that computes weight gradients. */
int stage_backward(pp_stage *s, int slot, int part, const pp_act *dout, pp_act **din, pp_err *e);

/* Logits (B,T,V) of the last forward in slot (device), for sampling and
 * tests; valid after stage_forward with dscale == 0 on a stage built with
 * spec.keep_logits (else NULL: training keeps no full logits). */
const pp_act *stage_logits(const pp_stage *s, int slot);

void stage_zero_grad(pp_stage *s);

/* After the last backward of a step: sums the gradients of kv heads that
 * several tp ranks hold (tp > kv heads), each of which saw only its own
 * query heads. Other replicated tensors come out identical by construction.
 * Only the tensors that start in [lo, hi) of the buffer, and of those the
 * part the stage holds ([w_lo, w_hi)): a collective over tp, called with
 * the same range on every tp rank. */
int stage_reduce_replica_grads(pp_stage *s, size_t lo, size_t hi, pp_err *e);

#endif
