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
 * adjacent (one (Hq+2Hkv)*D x C product) and so are gate and up. */
#ifndef PP_MODEL_H
#define PP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "../kernels/ops.h"

#define PP_MAXDIM 4

typedef struct {
	char name[96]; /* Hugging Face name */
	int ndim;
	int64_t shape[PP_MAXDIM]; /* stored layout: Linear weights are (out, in) for every family */
	size_t off, n;            /* element offset into the stage buffer, element count */
	bool decay;               /* weight decay applies (matrices; not norms or biases) */
	double init_std;          /* normal(0, std); 0 = constant init_value */
	double init_value;
} pp_param;

typedef struct pp_stage_acts pp_stage_acts;

typedef struct {
	const pp_model_cfg *cfg;
	const pp_ops *ops;
	int layer_begin, layer_end;
	bool first, last;
	int B, T, n_slots;
	bool recompute;

	int n_params;
	pp_param *params;
	size_t n_elems;
	pp_real *w, *g; /* device buffers, n_elems each */

	pp_stage_acts *acts; /* per-slot saved activations and scratch */
} pp_stage;

/* Builds the parameter table and allocates weights, gradients and
 * activations for microbatches of (B,T). Parameters are zero until
 * stage_init_params or a checkpoint load. With recompute, forward keeps only
 * each layer's input and backward recomputes the rest layer by layer. */
int stage_create(pp_stage *s, const pp_model_cfg *cfg, const pp_ops *ops, int layer_begin,
		 int layer_end, int B, int T, int n_slots, bool recompute, pp_err *e);
void stage_free(pp_stage *s);

/* Seeded initialisation. Each tensor draws from a stream keyed by (seed,
 * name, element index), so every layout initialises the same model. */
void stage_init_params(pp_stage *s, uint64_t seed);

const pp_param *stage_find_param(const pp_stage *s, const char *name);

/* Forward of one microbatch into slot.
 *   first stage: tokens (B,T) host ints;   other stages: in (B,T,C) device
 *   last stage:  targets (B,T) host ints (PP_IGNORE_INDEX to skip); adds the
 *                summed token loss to *loss_sum. If dscale != 0 the
 *                gradient of (dscale * summed loss) w.r.t. the logits is kept
 *                for stage_backward (dscale = 1 / tokens in the whole step
 *                gives the mean loss). n_valid counts non-ignored targets.
 *   other stages: *out receives the (B,T,C) output (device, owned by slot).
 * pos0 is the position of the first token (0 in training). */
int stage_forward(pp_stage *s, int slot, const int *tokens, const pp_real *in,
		  const int *targets, pp_real dscale, double *loss_sum, long *n_valid,
		  pp_real **out, pp_err *e);

/* Backward of the microbatch in slot. Gradients accumulate into g.
 *   last stage: uses the logits gradient kept by forward; others: dout (B,T,C).
 *   other than first stage: *din receives the (B,T,C) input gradient. */
int stage_backward(pp_stage *s, int slot, const pp_real *dout, pp_real **din, pp_err *e);

/* Logits (B,T,V) of the last forward in slot (device), for sampling and
 * tests; valid after stage_forward with dscale == 0. */
const pp_real *stage_logits(const pp_stage *s, int slot);

void stage_zero_grad(pp_stage *s);

#endif
