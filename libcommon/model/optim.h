/* AdamW with decoupled weight decay, the learning-rate schedules and
 * global-norm clipping. State is kept in the stage's flat parameter layout. */
#ifndef PP_OPTIM_H
#define PP_OPTIM_H

#include "../config/config.h"
#include "model.h"

/* The elements of a stage's flat parameter buffer that one rank updates:
 * a range of each of its two regions, the parameters its expert-parallel
 * group shares ([0, n_shared)) and its experts ([n_shared, n_elems), empty
 * without MoE). Each region whole, or under ZeRO-1 this rank's share of it
 * (gradsync_ranges). Ascending and disjoint. */
enum { OPTIM_SHARED, OPTIM_EXPERTS, OPTIM_REGIONS };
typedef struct {
	size_t lo[OPTIM_REGIONS], hi[OPTIM_REGIONS];
} optim_ranges;

/* Elements in the ranges. */
size_t optim_ranges_count(const optim_ranges *r);
/* Where element x (inside a range) sits when the ranges' elements are laid
 * one range after another, as AdamW's m and v hold them. */
size_t optim_ranges_pos(const optim_ranges *r, size_t x);
/* Whether [a, b) meets a range. */
bool optim_ranges_meet(const optim_ranges *r, size_t a, size_t b);
/* Whether the ranges are the whole buffer [0, n). */
bool optim_ranges_whole(const optim_ranges *r, const pp_stage *st);

/* AdamW state for the ranges r of a stage's flat parameter buffer: all of
 * it, or one data-parallel rank's shares under ZeRO-1. */
typedef struct {
	const pp_ops *ops;
	optim_ranges r;
	pp_real *m, *v; /* device, optim_ranges_count(r) each, range after range */
} optim_state;

int optim_create(optim_state *o, const pp_ops *ops, const optim_ranges *r, pp_err *e);
void optim_free(optim_state *o);

/* Learning rate for optimizer step s (0-based), MaxText style: linear warmup
 * from 0 over warmup steps, then cosine / linear decay to final_fraction * lr
 * at the last step, constant, or warmup-stable-decay (wsd). */
double optim_lr(const pp_config *c, long s);
/* Resolved warmup length in steps. */
long optim_warmup_steps(const pp_config *c);

/* Sum of squares of the gradients in [lo, hi) of the stage's tensors for
 * which counts(param) is true (each element of the model counted once
 * across ranks). */
double optim_grad_sumsq(const pp_stage *st, size_t lo, size_t hi,
			bool (*counts)(const pp_stage *st, const pp_param *p));

/* One AdamW update of the parameters in o's ranges, t = s + 1 (bias
 * correction), with the gradients multiplied by gscale (clipping). Weight
 * decay applies to tensors marked decay, and to norms and biases too when
 * decay_norms_and_biases. The stage's compute copy of those parameters is
 * written in the same pass. */
void optim_step(optim_state *o, pp_stage *st, const pp_config *c, long t, double lr, double gscale);

/* The clipping multiplier for a gradient norm: min(1, clip_norm / norm). */
double optim_clip_scale(const pp_config *c, double grad_norm);

#endif
