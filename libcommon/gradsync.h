/* The sum of a step's gradients over the data-parallel group, overlapped
 * with the backward pass (bucketed, as in PyTorch DDP and Megatron).
 *
 * A stage's parameters sit in one flat buffer in layer order, and the
 * backward pass walks it from the end: during a chunk's last backward pass
 * of the step a growing suffix g[from, n) is final (stage_grad_hook). The
 * buffer is cut from its end into buckets of `bucket` elements; each bucket
 * is reduced by a nonblocking collective over dp as soon as it is wholly
 * final, while the backward pass goes on, and gradsync_finish reduces the
 * rest and waits for all of it before the gradient norm and the optimizer.
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
 * ZeRO-1: dp rank r updates elements [lo_r, hi_r) (gradsync_shard). A
 * bucket [a, b) is then a reduce-scatter whose block for rank r is
 * [a, b) ∩ [lo_r, hi_r): the shards are consecutive in rank order, so the
 * blocks are too, and each rank receives exactly the part of the bucket it
 * updates. gradsync_finish moves the summed shard into g[lo, hi); the rest
 * of g is left partial, as the optimizer reads its shard only. */
#ifndef PP_GRADSYNC_H
#define PP_GRADSYNC_H

#include <stdbool.h>

#include "comm.h"
#include "model.h"
#include "profile/record.h"

typedef struct {
	pp_stage *st;
	size_t lo, hi;  /* this dp rank's optimizer range: [0, n) when not sharded */
	size_t hold;    /* g[0, hold) waits for gradsync_finish */
	size_t ready;   /* g[ready, n) is final (n: nothing yet this step) */
	size_t next;    /* g[next, n) has been launched */
	pp_real *shard; /* ZeRO-1: (hi - lo) the summed shard, until finish */
} gradsync_chunk;

typedef struct {
	pp_comm *dp; /* NULL: nothing to sum (dp = 1) */
	const pp_ops *ops;
	size_t bucket; /* elements; 0: one reduction per chunk, in gradsync_finish */
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
		void *mark;    /* on the communicator's stream, after the reduction */
		int64_t bytes;
	} *timing;     /* (cap) as reqs */
} gradsync;

/* The range [*lo, *hi) of n elements that rank r of dp updates under
 * ZeRO-1: shares of ceil(n / dp), the last ones shorter or empty. */
void gradsync_shard(size_t n, int dp, int r, size_t *lo, size_t *hi);
/* ceil(n / dp): the length of those shares */
size_t gradsync_share(size_t n, int dp);

/* Over chunks (v) of this rank; hold (v) as above; sharded: ZeRO-1 ranges
 * (gradsync_shard), else every rank sums all of g. bucket_mb: MiB per
 * bucket (0: no overlap). dp may be NULL. */
int gradsync_init(gradsync *g, pp_stage *chunks, int v, const size_t *hold, bool sharded,
		  pp_comm *dp, const pp_ops *ops, double bucket_mb, pp_err *e);
void gradsync_free(gradsync *g);

/* The stage hook's work: g[from, n) of chunk s is final. Launches every
 * bucket that is now wholly final, and moves what is in flight along. */
int gradsync_ready(gradsync *g, const pp_stage *s, size_t from, pp_err *e);

/* After the step's backward passes (and the tied-embedding sum): reduces
 * what was not launched yet, waits for everything, moves ZeRO-1 shards into
 * g, and makes ready for the next step. */
int gradsync_finish(gradsync *g, pp_err *e);

#endif
