/* Fully sharded data parallelism (ZeRO-3, PyTorch's FSDP, MaxText's fsdp
 * axis) for the chunks (stages) of one rank.
 *
 * The ranks of an fsdp group cut each chunk's parameter buffer into
 * consecutive shares (layout_share: the ZeRO-1 ranges of a group that
 * size): each rank keeps the master weights, the gradients and the AdamW
 * state of its share only (the stage's w_lo..w_hi, stage_units). The
 * stage asks for one unit (a layer, the embedding, the head: model.h) at
 * a time:
 *   - its weights are all-gathered, in the compute type (bf16 gathered in
 *     bf16), from the shares into one of FSDP_BUFS buffers of the largest
 *     unit; the unit the pass reads next is gathered at once, nonblocking,
 *     while this one computes (prefetch), and the least recently used
 *     buffer is reused;
 *   - its gradients go to one of two buffers of the largest unit and, as
 *     soon as the pass is done with the unit, are reduce-scattered
 *     (nonblocking, summed in pp_real) to the ranks that keep them, which
 *     add their block to the stage's gradient share when the buffer is
 *     needed again or at fsdp_finish.
 * The embedding's unit (0) and the head's (the last) take gradients in
 * the forward (the head and its loss) as well as the backward, and a tied
 * embedding's are summed between the pipeline's ends first: they collect
 * a whole step's gradients in buffers of their own (held), reduce-scattered
 * by fsdp_finish.
 *
 * With a rep group (the config's dp over fsdp groups: hybrid sharding)
 * fsdp_finish then sums each share over the ranks that keep the same one.
 * The sums change only the order of additions against one process:
 * rounding differences, no more. */
#ifndef PP_FSDP_H
#define PP_FSDP_H

#include <stdbool.h>

#include "../comm/comm.h"
#include "../model/model.h"

enum { FSDP_BUFS = 3, FSDP_GBUFS = 2 };

typedef struct {
	pp_stage *st;
	pp_real *held[2]; /* unit 0's and the last unit's gradients over the step (NULL: empty) */
} fsdp_chunk;

typedef struct {
	const pp_ops *ops;
	pp_comm *comm, *rep; /* the fsdp group (size > 1) and the replicas (NULL: none) */
	int size, rank;
	size_t unit_max; /* elements of the largest unit of any chunk */
	int v;
	fsdp_chunk *chunks;
	size_t *counts; /* (size) one collective's blocks */
	long clock;
	struct fsdp_buf {
		pp_act *data;
		pp_stage *st; /* the unit it holds (NULL: none) */
		int unit;
		long used;
		pp_comm_req *req; /* its gather, in flight */
		bool prefetched;
	} buf[FSDP_BUFS];
	struct fsdp_gbuf {
		pp_real *data, *out; /* the unit's gradients; this rank's block of their sum */
		pp_stage *st;        /* the unit it is lent to or reduces (NULL: free) */
		int unit;
		pp_comm_req *req; /* its reduce-scatter, in flight */
		size_t lo, n;     /* where out goes in the stage's gradients */
	} gbuf[FSDP_GBUFS];
	int gnext;
	/* since init: gathers issued, of those prefetched (issued before the
	 * unit was asked for, while another computed), prefetched ones still
	 * in flight when asked for, and reduce-scatters */
	struct {
		long gathers, prefetched, waited, reduces;
	} stats;
} fsdp;

/* The hooks a stage built for FSDP calls (stage_units; ctx: the fsdp). */
int fsdp_use(void *ctx, pp_stage *s, int u, int next, bool grads, pp_err *e);
int fsdp_done(void *ctx, pp_stage *s, int u, pp_err *e);

/* Over chunks (v) built with those hooks and comm's size and rank as their
 * stage_units' (each keeps the share layout_share gives it); rep may be
 * NULL. */
int fsdp_init(fsdp *f, pp_stage *chunks, int v, pp_comm *comm, pp_comm *rep, const pp_ops *ops,
	      pp_err *e);
void fsdp_free(fsdp *f);

/* The working set fsdp_init allocates beside the shares of chunks (v): the
 * largest unit's elements, FSDP_BUFS gathered units of it in the compute
 * type (act_bytes each), and in fp32 FSDP_GBUFS pairs of gradient buffers
 * of it with the embedding's and the head's whole gradients. */
typedef struct {
	size_t unit_max;
	int64_t gathered, grad_buffers;
} fsdp_bytes;
void fsdp_sizes(const pp_stage *chunks, int v, size_t act_bytes, fsdp_bytes *out);

/* Chunk k's held gradients of unit 0 (which == 0) or of its last unit. */
pp_real *fsdp_held_grad(fsdp *f, int k, int which);

/* After the step's backward passes (and the tied embedding's sum over the
 * held buffers): every gradient summed into the shares, over rep too;
 * the held buffers zeroed for the next step. */
int fsdp_finish(fsdp *f, pp_err *e);

/* The master weights changed (an optimizer step, a load): the gathered
 * units are stale. */
void fsdp_params_changed(fsdp *f);

/* Chunk k's whole master weights [0, n_elems) into host (every rank of
 * the group calls; each gets all of them). */
int fsdp_gather_master(fsdp *f, int k, pp_real *host, pp_err *e);

#endif
