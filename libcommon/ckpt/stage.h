/* Between a model stage's parameter table (model.h) and checkpoint entries
 * (ckpt.h): which block of which tensor a rank saves or loads, and where
 * ZeRO-1's share of the AdamW state falls. The trainer (saving, resuming),
 * pp-decode (loading a stage) and pp-ckpt convert (writing any layout) use
 * these, so the rules live once. */
#ifndef PP_CKPT_STAGE_H
#define PP_CKPT_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "../config/config.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "ckpt.h"

/* The entry of row block `block` of p: a whole unsharded tensor, a slice,
 * or one block of a fused projection (GPT-2's c_attn split over tp). */
void ckpt_entry_of(const pp_param *p, int block, ckpt_tensor *c);

/* The block a checkpoint saves p's parameters in: its slice, or the whole
 * rows of a fused projection (contiguous when not split over tp; gathered
 * over tp and saved by tp rank 0 when split). */
void ckpt_saved_block(const pp_param *p, ckpt_tensor *c);

/* Whether p is saved by this rank at all: the tp rank that owns it, not
 * the last stage's copy of a tied embedding (the first stage saves it), and
 * not a LoRA run's frozen base (its checkpoints hold the adapters; the base
 * is its load_parameters_path's, or the seed's). */
bool ckpt_rank_saves(const pp_stage *st, const pp_param *p);

/* ZeRO-1: the elements of p inside [lo, hi) of its chunk's flat buffer, as
 * ranges of the block ckpt_saved_block gives, counted in that block's
 * row-major order, ascending and disjoint (fused: p's rows of a fused
 * projection split over tp, several blocks of the whole). begin and end
 * need room for ckpt_optim_max_ranges; returns the number of ranges, 0 when
 * the share misses p. */
size_t ckpt_optim_max_ranges(const pp_param *p, size_t lo, size_t hi, bool fused);
int ckpt_optim_ranges(const pp_param *p, size_t lo, size_t hi, bool fused, int64_t *begin,
		      int64_t *end);

/* Whether the shard of this rank's (pp, tp, ep) coordinates holds p (one
 * that ckpt_rank_saves): its experts, and on ep rank 0 what the ep group
 * shares. */
bool ckpt_shard_holds(const pp_stage *st, const pp_param *p);

/* Host copies of one chunk's parameters (all of them) and of the ranges r
 * of its flat buffer's AdamW state (m and v may be NULL): for saving, m and
 * v hold the ranges one after another (optim_ranges_pos); for loading, they
 * are laid out as the whole buffer. */
typedef struct ckpt_host {
	pp_real *w, *m, *v;
	optim_ranges r;
} ckpt_host;

/* For loading: appends to cs the entries of every block of st's
 * parameters, reading into h->w at their offsets, and into h->m and h->v
 * (laid out as w) for the blocks that meet h->r. cs->tensors needs room for
 * the blocks of every parameter (3 per parameter is always enough). */
void ckpt_add_entries(const pp_stage *st, const ckpt_host *h, ckpt_state *cs);

/* FP8 delayed scaling's state of st (stage_fp8_meta): a tensor per local
 * layer and the head's, whole on every tp rank (tp rank 0 saves them). Not
 * parameters: no optimizer state, left out of exports, carried by
 * pp-ckpt convert. ckpt_fp8_count: how many (0 without the state).
 * ckpt_fp8_entries appends them to cs, their names in names (room for
 * ckpt_fp8_count), reading into the state in place (loading: optional, so
 * a checkpoint saved without them leaves the state as it is) or, with
 * copy, from a copy of the state made now into *copy (malloc'd, the
 * caller's; saving, which may overlap the next steps). -1: out of memory. */
typedef char ckpt_name[96];
int ckpt_fp8_count(const pp_stage *st);
int ckpt_fp8_entries(const pp_stage *st, ckpt_state *cs, ckpt_name *names, pp_real **copy);

/* The checkpoint in dir holds the model c configures (else PP_EUSAGE,
 * naming the first key that differs). */
int ckpt_check_model(const pp_config *c, const char *dir, pp_err *e);

/* Loads s's parameters (no optimizer state) from the checkpoint dir, or,
 * when dir is NULL, from c->run_dir's checkpoint of step c->resume_from or
 * its newest sound one (ckpt_find_resume; a warning names any newer one
 * skipped); the directory read goes to found and its step to *step. */
int ckpt_load_stage(pp_stage *s, const pp_config *c, const char *dir, char *found,
		    size_t found_size, long *step, pp_err *e);

/* The config a checkpoint was saved with, with overrides (key=value) over
 * it: path is a checkpoint or a run directory (its newest sound one), whose
 * directory goes to dir. What makes a checkpoint usable with no --cfg. */
int ckpt_config_load(const char *path, int n_overrides, char *const *overrides, pp_config *c,
		     char *dir, size_t dir_size, pp_err *e);

#endif
