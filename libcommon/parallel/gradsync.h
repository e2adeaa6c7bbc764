/* The sum of a step's gradients over the data-parallel group, overlapped
 * with the backward pass (bucketed, as in PyTorch DDP and Megatron).
 *
 * A stage's parameters sit in one flat buffer in two regions (model.h):
 * what its expert-parallel group shares, [0, n_shared), summed over dp, and
 * this rank's experts, [n_shared, n_elems), summed over the ranks that hold
 * the same experts (edp: dp / ep of them; all of dp when ep = 1). The
 * backward pass walks the shared region from its end: during a chunk's
 * last backward pass of the step a growing suffix g[from, n_shared) is
 * final (stage_grad_hook). That region is cut from its end into buckets of
 * `bucket` elements; each bucket is reduced by a nonblocking collective
 * over dp as soon as it is wholly final, while the backward pass goes on.
 * The experts are final when the pass ends (from = 0) and go as one
 * collective over edp then. gradsync_finish reduces the rest and waits for
 * all of it before the gradient norm and the optimizer.
 *
 * The buckets change when the sums travel, not what is summed: with two dp
 * ranks each element's sum is one addition, a + b, whatever the bucket, so
 * the run is bitwise that of one reduction after the backward; with more,
 * MPI or NCCL may pick another summation order for another message size
 * (rounding differences only).
 *
 * A chunk's first `hold` elements (a tied embedding, which is summed with
 * the other end of the pipeline first) wait for gradsync_finish.
 *
 * ZeRO-1: each rank updates a share of each region, the shares of a region
 * consecutive in the rank order of the group that sums it
 * (gradsync_ranges, with layout_share). A bucket [a, b) is then a reduce-scatter whose block
 * for rank r is [a, b) within r's share: the shares are consecutive, so the
 * blocks are too, and each rank receives exactly the part of the bucket it
 * updates. gradsync_finish moves the summed shares into g; the rest of g
 * is left partial, as the optimizer reads its shares only. */
#ifndef PP_GRADSYNC_H
#define PP_GRADSYNC_H

#include <stdbool.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "../profile/record.h"

/* One region of a chunk's buffer and the group that sums it. */
typedef struct {
	pp_comm *comm;    /* NULL: nothing to sum (a group of one) */
	size_t base, end; /* the region [base, end) */
	size_t lo, hi;    /* this rank's optimizer range in it */
	pp_real *shard;   /* ZeRO-1: (hi - lo) the summed share, until finish */
} gradsync_region;

typedef struct {
	pp_stage *st;
	gradsync_region region[OPTIM_REGIONS];
	size_t hold;       /* g[0, hold) waits for gradsync_finish */
	size_t ready;      /* g[ready, n_shared) is final (n_shared: nothing yet this step) */
	size_t next;       /* g[next, n_shared) has been launched */
	bool experts_sent; /* the experts' sum has been launched this step */
} gradsync_chunk;

typedef struct {
	const pp_ops *ops;
	size_t bucket; /* elements; 0: one reduction per region, in gradsync_finish */
	int v;
	gradsync_chunk *chunks; /* (v) */
	size_t *counts;         /* (dp size) a reduce-scatter's blocks */
	pp_comm_req **reqs;     /* in flight, oldest first: [head, n_reqs) */
	int head, n_reqs, cap;
	int early, late; /* reductions launched during the backward passes, and
			  * by gradsync_finish, since init */
	prof_rec *prof;  /* times each reduction, launch to completion (NULL: off) */
	struct gradsync_timing {
		prof_span span;
		void *mark; /* on the communicator's stream, after the reduction */
		int64_t bytes;
	} * timing; /* (cap) as reqs */
} gradsync;

/* ZeRO-1's parameter all-gather after an update, of a chunk of `shared`
 * elements summed over a group of `ranks` and `experts` summed over ranks /
 * ep: its buffer's elements, every share of the larger region padded to the
 * longest (layout_share), then this rank's own. */
size_t gradsync_gather_len(size_t shared, size_t experts, int ranks, int ep);
/* The ranges of st's buffer that rank `rank` of a group of `ranks` updates
 * (the data ranks, or an fsdp group), whose consecutive groups of ep form
 * expert-parallel groups: each region whole, or (sharded) the shared
 * region's share over the group and the experts' share over the ranks / ep
 * that hold them (rank rank / ep of those). */
void gradsync_ranges(const pp_stage *st, bool sharded, int ranks, int rank, int ep,
		     optim_ranges *r);

/* Over chunks (v) of this rank; hold (v) as above; sharded: ZeRO-1 ranges
 * (gradsync_ranges), else every rank sums all of g. bucket_mb: MiB per
 * bucket (0: no overlap). data (the data ranks) sums the shared region, edp
 * the experts; either may be NULL (a group of one); ep is the
 * expert-parallel size. */
int gradsync_init(gradsync *g, pp_stage *chunks, int v, const size_t *hold, bool sharded,
		  pp_comm *data, pp_comm *edp, int ep, const pp_ops *ops, double bucket_mb,
		  pp_err *e);
void gradsync_free(gradsync *g);

/* The stage hook's work: g[from, n_shared) of chunk s is final (and, when
 * from is 0, its experts). Launches every
 * bucket that is now wholly final, and moves what is in flight along. */
int gradsync_ready(gradsync *g, const pp_stage *s, size_t from, pp_err *e);

/* After the step's backward passes (and the tied-embedding sum): reduces
 * what was not launched yet, waits for everything, moves ZeRO-1 shards into
 * g, and makes ready for the next step. */
int gradsync_finish(gradsync *g, pp_err *e);

#endif
