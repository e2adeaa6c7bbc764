/* What each rank of a run holds, decided here and nowhere else.
 *
 * The mesh is pp x dp x fsdp x tp (world = their product): tp innermost
 * (ranks of a tp group are neighbours, on one node), then the data ranks,
 * then pp: rank = (pp_rank * data + data_rank) * tp + tp_rank. The data
 * ranks are the config's dp times its fsdp, the ranks that split each
 * step's batch; fsdp consecutive data ranks form an fsdp group (fsdp_rank =
 * data_rank % fsdp) and ep consecutive ones an expert-parallel group
 * (ep_rank = data_rank % ep). MaxText's [data, fsdp, tensor] with pp
 * outermost.
 *
 * A rank holds, of the model:
 *   - its pipeline chunks: chunk c is virtual stage c * pp + pp_rank, whose
 *     layers layout_chunk_layers gives (stage_layers, or an even split with
 *     the remainder to the first chunks);
 *   - its tensor-parallel share of every width (layout_tp_share): query
 *     heads, kv heads (replicated when tp exceeds them), MLP columns and
 *     vocabulary rows, each an exact 1/tp;
 *   - its experts of each MoE layer: E / ep consecutive ones;
 *   - under ZeRO-1 and FSDP, its share of a flat buffer (layout_share);
 *   - its microbatches: the step's G sequences are cut into G / B
 *     microbatches of B consecutive sequences (the single process's), and
 *     microbatch j goes to data rank j % data (layout_seq_index), so every
 *     layout runs the single process's microbatches and whatever is
 *     computed per microbatch (a MoE layer's load-balancing loss) is the
 *     same in every layout;
 *   - the slots its schedule needs on each chunk (schedule_slots).
 *
 * layout_check holds every rule a layout must meet, and the config loader
 * runs it, so pp-init --plan and pp-train refuse a bad layout alike,
 * before any rank allocates. layout_build gives one rank's layout, built
 * once and handed to everything that asks what the rank holds. */
#ifndef PP_LAYOUT_H
#define PP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"
#include "types.h"

/* Local chunks (virtual stages) per rank at most. */
#define LAYOUT_MAX_CHUNKS 64

/* A rank's tensor-parallel share of the model's widths. */
typedef struct {
	int rank, size;  /* in the tp group */
	int n_heads;     /* query heads: n_heads / tp */
	int n_kv_heads;  /* kv heads: n_kv_heads / tp, or 1 when tp > n_kv_heads */
	int kv_replicas; /* tp ranks that hold the same kv heads (1: split) */
	int kv_block;    /* which block of kv heads: rank / kv_replicas */
	int d_ff;        /* MLP (or each expert's) columns */
	int vocab;       /* embedding and head rows */
	int vocab_begin; /* the first of them */
} layout_tp;

/* Which sequences a data rank reads (layout.h's top): its i-th is global
 * sequence layout_seq_index(s, i) of the run. */
typedef struct {
	int rank, ranks; /* data rank, and data ranks */
	int group;       /* sequences per microbatch */
} layout_seqs;

typedef struct {
	int layer_begin, layer_end; /* its layers */
	int slots;                  /* microbatches held on it at once (schedule_slots) */
} layout_chunk;

typedef struct {
	/* the mesh: the config's sizes; data = dp * fsdp ranks split the batch */
	int pp, dp, fsdp, tp, ep, v, data, world;
	/* this rank's coordinates */
	int rank, pp_rank, data_rank, fsdp_rank, tp_rank, ep_rank;
	layout_chunk chunk[LAYOUT_MAX_CHUNKS]; /* (v) local chunks */
	layout_tp tp_share;
	int expert_begin, n_experts; /* its experts of each MoE layer */
	layout_seqs seqs;
	/* the schedule it runs */
	sched_kind schedule;
	int microbatches, microbatch, seq_len;
	bool split_backward; /* the schedule's (schedule_split_backward) */
} pp_layout;

/* Every rule of a layout, PP_EUSAGE naming the keys at fault: mesh sizes
 * >= 1, at most LAYOUT_MAX_CHUNKS virtual stages, the schedule's own
 * (schedule_check), at least one layer per pipeline chunk, stage_layers
 * naming every chunk and adding up to model.n_layers, tp dividing the
 * heads (or, for kv heads, being divided by them), d_ff and vocab_size,
 * ep only with experts and dividing dp and n_experts, fsdp only for dense
 * models, a recompute policy only without a split backward pass
 * (layout_check_recompute). The config loader runs it. */
int layout_check(const pp_config *c, pp_err *e);

/* That the recompute policy (PP_RECOMPUTE_*) combines with the schedule:
 * a split backward pass keeps every activation (recompute=none). */
int layout_check_recompute(int recompute, sched_kind schedule, pp_err *e);

/* That a job of world ranks runs c's layout: PP_EUSAGE naming the layout's
 * size otherwise. */
int layout_check_world(const pp_config *c, int world, pp_err *e);

/* The layout of rank (0 .. world - 1) of c's mesh; c passed layout_check.
 * PP_EUSAGE for a rank outside the mesh. */
int layout_build(pp_layout *l, const pp_config *c, int rank, pp_err *e);

/* The world rank at these coordinates. */
int layout_rank_of(const pp_config *c, int pp_rank, int data_rank, int tp_rank);

/* Layers [*begin, *end) of pipeline chunk (virtual stage) chunk of pp *
 * virtual_stages; chunk c runs on pp rank c % pp. */
void layout_chunk_layers(const pp_config *c, int chunk, int *begin, int *end);

/* The share of tp rank `rank` of a group of tp: PP_EUSAGE (the messages of
 * layout_check) when tp does not split the model's widths. */
int layout_tp_share(const pp_model_cfg *m, int tp, int rank, layout_tp *out, pp_err *e);

/* The experts of each MoE layer that ep rank `rank` of ep holds. */
void layout_experts(const pp_model_cfg *m, int ep, int rank, int *begin, int *n);

/* Rank r's share of n elements cut over `size` ranks (ZeRO-1, FSDP): shares
 * of layout_share_len(n, size) = ceil(n / size), consecutive in rank
 * order, the last ones shorter or empty. */
size_t layout_share_len(size_t n, int size);
void layout_share(size_t n, int size, int r, size_t *lo, size_t *hi);

/* The global index of the i-th sequence that s's rank reads. */
uint64_t layout_seq_index(const layout_seqs *s, uint64_t i);

#endif
