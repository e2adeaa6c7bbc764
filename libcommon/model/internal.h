/* Private to model/: the stage's internal tables and the layer code that
 * its files share.
 *
 * The files: table.c builds the parameter table (Hugging Face names, tp
 * slices, FSDP units); sizes.c gives every buffer's size, which stage.c
 * allocates by and pp-init --plan and pp-train's memory line count;
 * stage.c holds a stage's lifetime; layer.c one layer's forward, rebuild
 * and backward; pass.c a microbatch's forward and backward through the
 * stage with the head and the loss; kvcache.c decoding's cached forward;
 * packed.c decoding's stored weights; moe.c the mixture-of-experts MLP;
 * optim.c AdamW. */
#ifndef PP_MODEL_INTERNAL_H
#define PP_MODEL_INTERNAL_H

#include "../config/hparams.h"
#include "model.h"
#include "moe.h"

/* Shapes below are this rank's: N = B*T rows, C = d_model, D = head_dim,
 * Hq and Hkv local heads, QKV = (Hq+2Hkv)*D, HD = Hq*D, F local mlp width,
 * UP = 2F (gated) or F, V local vocab, L = layers of this stage.
 *
 * Tensor parallelism follows Megatron: q/k/v and gate/up (or c_fc) are
 * column-parallel (each rank holds a block of output rows), o and down are
 * row-parallel (a block of input columns, outputs summed across tp), the
 * embedding and the head are vocabulary-parallel. Norms and the biases of
 * row-parallel products are replicated; their gradients come out identical
 * on every rank because their inputs are. */

/* Indices of one layer's tensors in params[] (-1 if absent). A MoE layer
 * has a router and experts (expert0: the first local expert's w1) in place
 * of up and down; rel_bias is the relative position biases of pos
 * relative; dense and moe number the layers of each kind in the stage (-1
 * for the other kind): they index the saved activations. */
typedef struct {
	int norm1_w, norm1_b, qkv_w, qkv_b, o_w, o_b, norm2_w, norm2_b, up_w, up_b, down_w, down_b;
	int router_w, expert0, rel_bias;
	int lora_a[LORA_MEMBERS], lora_b[LORA_MEMBERS]; /* adapters of each projection */
	int dense, moe;
} layer_index;

/* Saved activations of one microbatch. A per-layer buffer holds L copies
 * (Ld of the dense layers, Lm of the MoE layers) when the recompute policy
 * keeps it (stage_saved_acts), else none: the stage's rebuilt set holds its
 * one copy, which the backward pass rebuilds layer by layer. Activations
 * are in the compute type (pp_act), statistics in pp_real; the means are
 * layernorm's only. */
typedef struct {
	pp_act *res;            /* (L+1, N, C) input of each layer, then the stage output */
	pp_act *h1;             /* (L, N, C) */
	pp_real *mean1, *rstd1; /* (L, N), (L, N) */
	pp_act *qkv;            /* (L, N, QKV) after rope */
	pp_act *att;            /* (L, N, HD) */
	pp_real *lse;           /* (L, B, Hq, T) */
	pp_act *mid;            /* (L, N, C) residual after attention */
	pp_act *h2;             /* (L, N, C) */
	pp_real *mean2, *rstd2; /* (L, N), (L, N) */
	pp_act *up;             /* (Ld, N, UP) gate|up, or before gelu: dense layers */
	pp_act *act;            /* (Ld, N, F) */
	moe_acts *moe;          /* (n_moe) the MoE layers' */
	int n_moe;              /* Lm, 1 or 0 */
	pp_real *meanf, *rstdf; /* (N), (N): final norm */
	pp_act *dhf;            /* (N, C) gradient of the head's input, from a training
					* forward (partial over tp until stage_backward sums it) */
	pp_act *logits;         /* (N, V) with spec.keep_logits; dlogits after a training forward */
	/* split backward: gradients the weight part consumes, (L, ...) each */
	pp_act *g_out, *g_up, *g_mid, *g_qkv; /* (N,C) (N,UP) (N,C) (N,QKV) */
	int *tok, *tgt;                       /* (N) device copies; tok local to the vocab shard */
	int *pos;                             /* (N) device: positions in packed documents */
	bool has_pos;                         /* stage_set_positions gave them */
	stage_noise noise;                    /* stage_set_noise's */
	int has_grad;                         /* forward kept dlogits */
	int has_input_grad;                   /* STAGE_BWD_INPUT ran, STAGE_BWD_WEIGHT pending */
} slot_acts;

struct pp_stage_acts {
	slot_acts *slot;
	/* one copy of what the recompute policy does not keep: only one layer
	 * is rebuilt at a time, whichever slot it belongs to (per-layer
	 * buffers only) */
	slot_acts rebuilt;
	layer_index *layer;                               /* (L) */
	int embed_w, embed_pos, normf_w, normf_b, head_w; /* param indices, -1 if absent */
	/* backward scratch, shared by all slots */
	pp_act *d_res, *d_h, *d_att, *d_qkv, *d_up,
		*d_act; /* (N,C) (N,C) (N,HD) (N,QKV) (N,UP) (N,F) */
	/* the adapters' (lora.c), shared by all slots and by the forward and
	 * backward: (N,rank), and two of (N, the widest of C, HD, F) */
	lora_scratch lora;
	pp_real *ce;        /* (2N) device: vocab-parallel loss statistics */
	pp_real *replica;   /* kv heads shared over tp: one slot per head of the largest */
	int *bucket;        /* (max_seq_len) device: pos relative's bucket of each distance */
	int n_dense, n_moe; /* layers of each kind */
	moe_scratch moe_sc; /* the MoE layers' scratch, shared by all slots */
	/* the last stage's head and loss, shared by all slots */
	int loss_rows;      /* R: rows per chunk */
	pp_act *hf;         /* (N, C) final norm output */
	pp_real *losses;    /* (N) */
	pp_act *logits;     /* (R, V) one chunk, unless spec.keep_logits */
	double *host;       /* (3N) */
	int *host_ids;      /* (N) */
	pp_real *host_real; /* (2N) */
};

/* ---- parameter table -------------------------------------------------- */

/* Pointers into one layer's saved activations (a MoE layer: moe in place
 * of up and act). */
typedef struct {
	pp_act *x, *h1, *qkv, *att, *mid, *h2, *up, *act, *out;
	pp_real *mean1, *rstd1, *lse, *mean2, *rstd2;
	pp_act *g_out, *g_up, *g_mid, *g_qkv;
	moe_acts *moe;
	moe_scratch *moe_sc;
	const lora_scratch *lora;
	stage_noise noise;  /* the layer's own key: none (0) or the slot's and the layer's */
	const int *doc_pos; /* (N) positions in packed documents, NULL: none */
} layer_acts;

/* Where a layer's attention finds its keys and values: in the T rows of
 * the microbatch itself (training, NULL), or in a KV cache (decoding) that
 * the rows of sequence b, at positions pos[b].. (device memory), are
 * appended to: its slot's (Tmax,Hkv*D) entries start at k + b * Tmax*Hkv*D. */
typedef struct {
	pp_act *k, *v; /* this layer's, from the first sequence's slot */
	int Tmax;
	const int *pos; /* (B) */
} layer_kv;

/* A product's weights stored for decoding (stage_pack_weights). */
typedef struct pp_packed {
	void *data; /* NULL: the product reads the compute copy */
	int fmt;    /* PP_WEIGHTS_* */
	bool owned; /* data was allocated for it (else it is the compute copy) */
} pp_packed;

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* count elements of elem bytes each (none: NULL, not a failure) */
static inline void *alloc_elems(const pp_ops *ops, size_t count, size_t elem, int *failed)
{
	void *p = count ? ops->alloc(count * elem) : NULL;
	*failed |= count && !p;
	return p;
}

/* Buffers of counts[i] activations (compute type) or pp_real each; -1 if
 * one fails (those done stay allocated, for the caller's cleanup). */
static inline int alloc_acts(const pp_ops *ops, pp_act **ptrs[], const size_t counts[], int n)
{
	int failed = 0;
	for (int i = 0; i < n && !failed; i++)
		*ptrs[i] = alloc_elems(ops, counts[i], pp_act_size(ops), &failed);
	return failed ? -1 : 0;
}

static inline int alloc_reals(const pp_ops *ops, pp_real **ptrs[], const size_t counts[], int n)
{
	int failed = 0;
	for (int i = 0; i < n && !failed; i++)
		*ptrs[i] = alloc_elems(ops, counts[i], sizeof(pp_real), &failed);
	return failed ? -1 : 0;
}

/* Parameter (its compute copy) or gradient pointer by table index (NULL for -1). */
static inline pp_act *W(const pp_stage *s, int i)
{
	if (i < 0)
		return NULL;
	if (s->params[i].frozen)
		return pp_act_at(s->ops, s->base, s->params[i].off);
	if (!s->unit_w)
		return pp_act_at(s->ops, s->wc, s->params[i].off);
	const int u = s->param_unit[i];
	return pp_act_at(s->ops, s->unit_w[u], s->params[i].off - s->unit_lo[u]);
}

/* (NULL for a frozen matrix: its products skip the weight gradient; a
 * frozen vector's gradient is computed, as the norms' kernels take one,
 * and left out of the update) */
static inline pp_real *G(const pp_stage *s, int i)
{
	if (i < 0 || (s->params[i].frozen && s->params[i].ndim == 2))
		return NULL;
	if (s->params[i].frozen)
		return s->sink;
	if (!s->unit_g)
		return s->g + s->params[i].off;
	const int u = s->param_unit[i];
	return s->unit_g[u] + (s->params[i].off - s->unit_lo[u]);
}

/* FSDP (stage_units): unit u is needed now, and next after it. */
static inline int unit_use(pp_stage *s, int u, int next, bool grads, pp_err *e)
{
	const stage_units *h = &s->spec.units;
	return h->use ? h->use(h->ctx, s, u, next, grads, e) : 0;
}

static inline int unit_done(pp_stage *s, int u, pp_err *e)
{
	const stage_units *h = &s->spec.units;
	return h->done ? h->done(h->ctx, s, u, e) : 0;
}

/* The bias of a row-parallel product is added once: on tp rank 0. */
static inline pp_act *W0(const pp_stage *s, int i) { return s->spec.tp.rank == 0 ? W(s, i) : NULL; }

/* Sums a partial activation across the tp group (a no-op without tp). */
static inline int tp_sum(const pp_stage *s, pp_act *buf, size_t n, pp_err *e)
{
	const pp_tp *tp = &s->spec.tp;
	return tp->size > 1 ? tp->allreduce(tp->ctx, buf, n, s->ops->act_type, PP_REDUCE_SUM, e)
			    : 0;
}

/* The activation function of a model's gated MLP (kernels' PP_ACT_*). */
static inline int stage_act_kind(const pp_model_cfg *m)
{
	return m->mlp == PP_MLP_SWIGLU ? PP_ACT_SILU : PP_ACT_GELU_TANH;
}

/* sizes.c: element counts of a stage's buffers, indexed as stage.c lists
 * their pointers. */
enum { LA_H1, LA_QKV, LA_ATT, LA_MID, LA_H2, LA_UP, LA_ACT, LA_NACT }; /* compute type */
enum { LR_MEAN1, LR_RSTD1, LR_LSE, LR_MEAN2, LR_RSTD2, LR_NREAL };     /* pp_real */
/* A set of per-layer activations (slot_acts' h1 .. act, their statistics,
 * and n_moe MoE layers' moe_acts). */
typedef struct {
	size_t act[LA_NACT], real[LR_NREAL];
	int n_moe;
} layer_counts;
enum { SA_RES, SA_DHF, SA_LOGITS, SA_G_OUT, SA_G_UP, SA_G_MID, SA_G_QKV, SA_NACT };
enum { SR_MEANF, SR_RSTDF, SR_NREAL };
enum { SI_TOK, SI_TGT, SI_POS, SI_NINT };
/* One slot: its own buffers and the layers' activations it keeps. */
typedef struct {
	size_t act[SA_NACT], real[SR_NREAL], ints[SI_NINT];
	layer_counts kept;
} slot_counts;
enum {
	SC_D_RES,
	SC_D_H,
	SC_D_ATT,
	SC_D_QKV,
	SC_D_UP,
	SC_D_ACT,
	SC_HF,
	SC_LOGITS,
	SC_LORA_U,
	SC_LORA_Z,
	SC_LORA_Y,
	SC_LORA_X,
	SC_NACT
};
enum { SCR_CE, SCR_LOSSES, SCR_REPLICA, SCR_NREAL };
enum { SCI_BUCKET, SCI_NINT };
/* What the stage shares between its slots: backward scratch, the head's,
 * the relative biases' table of buckets, and the one rebuilt copy of what
 * the policy does not keep. */
typedef struct {
	size_t act[SC_NACT], real[SCR_NREAL], ints[SCI_NINT];
	layer_counts rebuilt;
} scratch_counts;

/* The kinds in which (PP_SAVE_*) of every layer, or with one a single copy
 * of each kind (the rebuilt set). */
void stage_layer_counts(const pp_stage *s, unsigned which, bool one, layer_counts *c);
void stage_slot_counts(const pp_stage *s, slot_counts *c);
void stage_scratch_counts(const pp_stage *s, size_t act_bytes, scratch_counts *c);
/* Rows per chunk of the head and loss for activations of act_bytes. */
int stage_loss_rows_of(const pp_stage *s, size_t act_bytes);
/* The MoE MLP's dimensions as this rank holds it (no weights). */
moe_layer stage_moe_dims(const pp_stage *s);

/* table.c */
/* The parameter table of s (params, n_params, n_elems, n_shared) and a's
 * indices into it. */
void stage_build_table(pp_stage *s, pp_stage_acts *a);
/* FSDP's units (stage_units): their bounds, each parameter's unit, and the
 * part of the buffer this rank keeps (w_lo, w_hi). */
int stage_describe_units(pp_stage *s, pp_err *e);
/* Where layer l's part of the buffer starts, and what follows the layers
 * (the final norm and the head; n_shared when the stage holds none of it:
 * a middle stage, or the frozen base under LoRA). */
size_t stage_layer_from(const pp_stage *s, int l);
size_t stage_tail_from(const pp_stage *s);

/* fp8.c (model.h's stage_fp8_*): the stage's FP8 state */
typedef struct stage_fp8 {
	int n, H;                 /* states; history length */
	pp_real *meta;            /* (n, 1 + H) host: scale, then amaxes newest first */
	pp_fp8_tally *tally;      /* (n) device: this step's casts */
	pp_fp8_tally *host_tally; /* (n) their host copy */
	double *cast;             /* (n) elements cast this step */
	float *scales;            /* (n, 2) device: each state's scale in use and its inverse */
	float *amax;              /* (n) device: current scaling's amax of a cast */
	float *host_scales;       /* (n, 2) delayed scaling: meta's scales, for the device */
	bool scales_ok;           /* delayed scaling: scales holds meta's */
	bool *pinned;             /* (n) current scaling: scales holds the next casts' */
	bool *w_ok;               /* (n) a weight state's copy in wq is this step's */
	pp_act *xq, *gq;          /* the inputs' and the gradients' casts */
	pp_act *wq;               /* the weights' casts: n_elems, or one at a time under FSDP */
	pp_real *dw;              /* a product's weight gradient, before it is scaled and added */
	/* the experts' products (MoE layers; NULL otherwise), over nb = n_local
	 * ep blocks of rows: each source's amax (ep, device) and scale pair per
	 * role (ep FP8_ROLES pairs, device), the blocks' rows (nb, host) */
	float *src_amax, *src;
	int *blk_rows;
} stage_fp8;
enum { FP8_XQ, FP8_GQ, FP8_WQ, FP8_NACT };
/* What fp8_alloc allocates: act[] in the compute type, real pp_real and
 * bytes (the states', host and device), for activations of act_bytes; and
 * packs, on a bf16 table, the FP8 bytes the products pack their operands
 * into in the backend's scratch (the sizes count them all). */
void fp8_counts(const pp_stage *s, size_t act_bytes, size_t act[FP8_NACT], size_t *real,
		size_t *bytes, size_t *packs);
int fp8_alloc(pp_stage *s); /* -1: out of memory */
void fp8_free(pp_stage *s);
/* A linear product (no bias) of local layer l (l < 0: the head) in FP8:
 * out (N,OC) = inp (N,C) @ w^T; its backward: din (NULL: none) = dout @
 * w, dw (NULL: none) += dout^T @ inp. */
int fp8_linear_fwd(const pp_stage *s, int l, int product, pp_act *out, const pp_act *inp, int wi,
		   int N, int C, int OC, pp_err *e);
int fp8_linear_bwd(const pp_stage *s, int l, int product, pp_act *din, pp_real *dw,
		   const pp_act *dout, const pp_act *inp, int wi, int N, int C, int OC, pp_err *e);
/* The experts' products in FP8 (fp8_experts.c: moe.h's moe_products; ctx
 * the stage) */
extern const moe_products fp8_moe_products;
/* fp8.c's pieces the experts' products share: the step's delayed scale of
 * state k (the device's copy); pair = the scale pair of state k's format
 * and margin from an amax (both backend memory); out = q(x scale) for
 * state k, recorded into the step's tally with record. */
const float *fp8_step_scale(const pp_stage *s, int k);
void fp8_scale_pair(const pp_stage *s, int k, float *pair, const float *amax);
void fp8_cast_as(const pp_stage *s, int k, pp_act *out, const pp_act *x, size_t n,
		 const float *scale, bool record);
/* The head (fp8.head) runs in chunks of rows; under current scaling every
 * chunk casts with the whole tensor's scale: the input's amax over its N
 * rows h, the logits gradient's bound dscale (|softmax - onehot| <= 1).
 * fp8_head_end drops them. */
int fp8_head_begin(const pp_stage *s, const pp_act *h, int N, double dscale, pp_err *e);
void fp8_head_end(const pp_stage *s);

/* lora.c: the adapters of members [k0, k1) (LORA_*) of one product of
 * layer li, whose output (N rows of ld) the members share and whose input
 * inp is (N, in). forward: out += their terms. backward: from dout, din +=
 * the adapters' part of the input gradient (din NULL: none), and their
 * weight gradients accumulate. */
void lora_forward(const pp_stage *s, const layer_acts *t, const layer_index *li, int k0, int k1,
		  pp_act *out, int ld, const pp_act *inp, int N, int in);
void lora_backward(const pp_stage *s, const layer_acts *t, const layer_index *li, int k0, int k1,
		   pp_act *din, const pp_act *dout, int ld, const pp_act *inp, int N, int in);
/* The elements of lora_scratch's u, z, y and x for rows rows of stage s
 * (0 without adapters; x only where a training forward drops). */
void lora_scratch_counts(const pp_stage *s, size_t rows, size_t n[4]);
/* Allocates sc for rows rows of stage s (nothing without adapters); -1 on failure. */
int lora_scratch_alloc(lora_scratch *sc, const pp_stage *s, size_t rows);
void lora_scratch_free(lora_scratch *sc, const pp_ops *o);

/* layer.c */
/* Pointers into slot sa's activations of layer l (or the rebuilt set's). */
layer_acts layer_view(const pp_stage *s, slot_acts *sa, int l);
/* out (N,OC) = inp (N,C) @ weight wi ^T + bias, from the weights stored for
 * decoding where the stage has them (stage_pack_weights) */
void layer_linear(const pp_stage *s, pp_act *out, const pp_act *inp, int wi, const pp_act *bias,
		  int N, int C, int OC);
/* The stage's norm (rmsnorm or layernorm, weights wi and bi) over N rows of
 * (N,C), forward and backward. */
void layer_norm_fwd(const pp_stage *s, int N, pp_act *out, pp_real *mean, pp_real *rstd,
		    const pp_act *x, int wi, int bi);
void layer_norm_bwd(const pp_stage *s, pp_act *dx, const pp_act *dout, const pp_act *x,
		    const pp_real *mean, const pp_real *rstd, int wi, int bi);
/* The MoE MLP of layer li as this rank holds it (moe.h). */
moe_layer layer_moe(const pp_stage *s, const layer_index *li);
/* One layer over B sequences of T rows (t's buffers hold B*T rows); kv:
 * decoding's cache, NULL in training; moe: adds the MoE losses (may be
 * NULL). */
int layer_forward(const pp_stage *s, const layer_index *li, const layer_acts *t, int B, int T,
		  const layer_kv *kv, moe_losses *moe, pp_err *e);
/* Rebuilds what the recompute policy did not keep of layer li. */
int layer_rebuild(const pp_stage *s, const layer_index *li, const layer_acts *t, pp_err *e);
/* a->d_res holds dL/d(layer output) on entry and dL/d(layer input) on exit. */
int layer_backward(const pp_stage *s, const layer_index *li, const layer_acts *t, int part,
		   pp_err *e);

#endif
