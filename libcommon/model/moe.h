/* The mixture-of-experts MLP of a layer, in place of the dense one
 * (Mixtral, GLaM), over the op interface (kernels/ops.h: moe_*).
 *
 * Forward, for N token rows h (N,C):
 *   logits (N,E) = h @ router^T;  each token's K experts and their gates
 *   (moe_route: Mixtral's softmax over the K largest logits, or GLaM's K
 *   largest of the softmax);
 *   the N K assignments sorted by expert (moe_dispatch; dropless, or at
 *   most ceil(capacity N K / E) per expert: the rest dropped, which the
 *   residual carries past the layer);
 *   xs = their tokens' rows in that order;  each local expert j over its
 *   rows: up = xs_j @ w_up_j^T (gate|up, 2F), act = glu(up),
 *   y_j = act_j @ w_down_j^T;
 *   out (N,C) = sum_k gate[n,k] y[slot[n,k]] (moe_combine).
 * Under tensor parallelism every rank routes every token alike and holds
 * an F/tp slice of each expert (w_up's rows, w_down's columns), so out is a
 * partial sum over tp, as the dense MLP's is, and the caller sums it.
 *
 * Under expert parallelism (ep ranks of one dp group, each holding E/ep
 * experts) the sorted rows go to the rank of their expert and come back by
 * all-to-all: a rank's experts see the rows of every rank of the group
 * that chose them.
 *
 * The losses beside the language model's, added to the objective with
 * weights: the load-balancing loss E sum_e f_e P_e (f_e the assignments
 * that chose expert e per token, P_e the mean router probability: Switch
 * Transformer's, as Hugging Face's Mixtral defines it) and the router
 * z-loss mean lse^2 (ST-MoE). Their values come back per forward; their
 * gradients join the gates' in the router's backward. */
#ifndef PP_MOE_H
#define PP_MOE_H

#include <stdbool.h>

#include "../../kernels/ops.h"
#include "../base/error.h"
#include "../comm/comm.h"

typedef struct moe_products moe_products;

/* A layer's MoE MLP as one rank holds it. */
typedef struct moe_layer {
	const pp_ops *ops;
	int C, F, E, K;       /* F: this rank's slice of an expert's width */
	int mode;             /* PP_ROUTE_* */
	int act;              /* PP_ACT_* of the gated MLP */
	double capacity;      /* capacity factor; 0: dropless */
	int first, n_local;   /* this rank's experts: [first, first + n_local) */
	const pp_act *router; /* (E,C) */
	/* expert j's gate|up (2F,C) starts at experts + j stride, its down
	 * (C,F) 2FC after that (elements) */
	const pp_act *experts;
	size_t stride;
	pp_real *g_router, *g_experts; /* the same places in the gradients */
	pp_comm *ep;                   /* the expert-parallel group; NULL: every expert is here */
	int ep_size;                   /* its ranks (1: none), which sizes the buffers */
	int tp_rank; /* the router's share of the input gradient is added on tp rank 0 */
	/* sums a buffer over tp when the experts are split (NULL: tp 1) */
	int (*tp_sum)(void *ctx, pp_real *buf, size_t n, pp_err *e);
	void *tp_ctx;
	/* the experts' products in FP8 (NULL: the ops', in the compute type),
	 * with their context and this layer's index there */
	const moe_products *fp8;
	void *fp8_ctx;
	int fp8_layer;
} moe_layer;

/* What one forward keeps for its backward: device buffers for N rows, M
 * <= N K of them kept (in expert order), R rows of this rank's experts (R
 * <= moe_rows_max; R = M without ep). */
typedef struct {
	pp_act *logits;                     /* (N,E) */
	pp_real *prob, *lse;                /* (N,E), (N) */
	pp_real *gate, *frac;               /* (N,K), (E) */
	int *expert, *slot, *rows, *counts; /* (N,K), (N,K), (N K), (2E) */
	pp_act *xs, *up, *act, *y; /* (R,C), (R,2F), (R,F), (R,C): the local experts' rows */
	pp_act *ym; /* (M,C) the experts' outputs in this rank's order (y without ep) */
	int *index; /* ep: (2R) each expert-major row's source-major row, and back */
	/* split backward: the weight part's inputs, (R,C), (R,2F), (N,E) */
	pp_act *g_y, *g_up, *g_logits;
	/* host: counts (2E), then each local expert's rows (n_local); under ep
	 * the rows each source sends to each local expert (ep n_local), and the
	 * index (2R) */
	int *host;
	size_t *xfer; /* ep: (4 ep) the exchange's counts and offsets */
	int M, R;     /* of the last forward */
} moe_acts;

/* Scratch of forwards and backwards, shared by every layer and slot. */
typedef struct {
	pp_act *d_y, *d_up, *d_act, *d_xs, *d_h; /* (R,C), (R,2F), (R,F), (R,C), (N,C) */
	pp_act *d_logits;                        /* (N,E) */
	pp_act *sent;                            /* (max(M, R),C) rows on their way (ep) */
	pp_real *stats, *dgate;                  /* (E+1), (N,K) */
	pp_real *host;                           /* host (E+1) */
} moe_scratch;

/* Every local expert's product at once over the R rows of the last
 * forward, in expert order (down: the down products, else the gate|up
 * ones; IC and OC their widths: C and 2F, or F and C):
 *   fwd  out (R,OC) = in (R,IC) @ w_j^T over expert j's rows;
 *   bwd  din (R,IC) = dout @ w_j (din NULL: none), and with wgrad each
 *        expert's weight gradient += dout_j^T @ in_j.
 * model/fp8_experts.c's run them in FP8; the blocks of moe_block_rows tell
 * them whose rows are whose. */
struct moe_products {
	int (*fwd)(void *ctx, const moe_layer *m, const moe_acts *t, bool down, pp_act *out,
		   const pp_act *in, pp_err *e);
	int (*bwd)(void *ctx, const moe_layer *m, const moe_acts *t, bool down, pp_act *din,
		   bool wgrad, const pp_act *dout, const pp_act *in, pp_err *e);
};

/* The sources of the local experts' rows: the ep group's ranks (1 without
 * ep). rows (n_local sources) = the last forward's rows in blocks, expert
 * j's from source p at j sources + p, in the order the rows lie. */
int moe_sources(const moe_layer *m);
void moe_block_rows(const moe_layer *m, const moe_acts *t, int *rows);
/* Local expert j's weights (down: its (C,F) down, else its (2F,C) gate|up)
 * and their gradient (NULL without gradients). */
const pp_act *moe_weight(const moe_layer *m, int j, bool down);
pp_real *moe_weight_grad(const moe_layer *m, int j, bool down);

/* The most rows of local experts one forward of N rows may keep: N K, ep
 * times that under expert parallelism. */
size_t moe_rows_max(const moe_layer *m, int N);

/* Device bytes of moe_acts_alloc's buffers and of moe_scratch_alloc's, for
 * N rows of A-byte activations: what the allocations are made of. */
size_t moe_acts_bytes(const moe_layer *m, int N, bool split, size_t A);
size_t moe_scratch_bytes(const moe_layer *m, int N, size_t A);

/* split: keep the inputs of a deferred weight-gradient pass too. */
int moe_acts_alloc(moe_acts *t, const moe_layer *m, int N, bool split, pp_err *e);
void moe_acts_free(moe_acts *t, const pp_ops *o);
int moe_scratch_alloc(moe_scratch *sc, const moe_layer *m, int N, pp_err *e);
void moe_scratch_free(moe_scratch *sc, const pp_ops *o);

/* Per forward: the losses for this microbatch, and how many of the N K
 * assignments this rank routed were dropped. */
typedef struct {
	double aux, z;
	long dropped;
} moe_losses;

/* out (N,C) from h (N,C), keeping what the backward needs in t. */
int moe_forward(const moe_layer *m, moe_acts *t, moe_scratch *sc, const pp_act *h, pp_act *out,
		int N, moe_losses *l, pp_err *e);

/* The backward from dout (N,C), the gradient of out, with h the forward's
 * input. part: MOE_BWD_FULL, or MOE_BWD_INPUT (keeps the weight part's
 * inputs in t) then MOE_BWD_WEIGHT. The input parts write dh (N,C), partial
 * over tp as the dense MLP's; the weight parts add the router's and the
 * experts' gradients. aux_w and z_w weigh the losses' gradients (their
 * coefficient times the step's scale). */
enum { MOE_BWD_FULL, MOE_BWD_INPUT, MOE_BWD_WEIGHT };
int moe_backward(const moe_layer *m, moe_acts *t, moe_scratch *sc, const pp_act *h,
		 const pp_act *dout, pp_act *dh, double aux_w, double z_w, int part, int N,
		 pp_err *e);

#endif
