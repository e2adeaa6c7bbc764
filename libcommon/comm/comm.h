/* The comm interface: one table of functions per backend (mpi.c on host
 * memory, nccl.c on GPU memory). Parallel code (tp, dp, pp) talks to
 * its peers only through these calls.
 *
 * Buffers live where the matching op backend keeps tensors: host memory for
 * "mpi", device memory (pp_ops_cuda alloc) for "nccl"; "nccl" also takes
 * host memory (a loss, a status, a path), copied through the device, which
 * is slower. count is in elements.
 *
 * Calls are synchronous: on return the data is in place. The nonblocking
 * forms (comm_iallreduce, comm_ireduce_scatter) return a request at once;
 * the buffers belong to the operation until comm_wait returns, or comm_test
 * says it is done (either frees the request). Several may be in flight on one
 * communicator, and blocking calls on it or on others may come in between;
 * they complete in the order they were posted on each communicator. On
 * "nccl" an operation runs on the communicator's own stream, after every
 * kernel the ops issued before the call; kernels issued after the request
 * completes run after it.
 *
 *   pp_comm_req *r[2];
 *   comm_iallreduce(dp, g + a, n, PP_DT_REAL, PP_OP_SUM, &r[0], &e);
 *   ... compute that does not touch g[a, a + n) ...
 *   comm_wait(r[0], &e);
 *
 * Every call is bounded: a communicator has a timeout (seconds, inherited by
 * the communicators split from it), and a call that does not complete in
 * time returns PP_ERUNTIME with a message naming the operation, the
 * communicator and what this rank can tell about its peers:
 *   "allreduce on 'dp' (rank 1 of 4) timed out after 120 s: every peer on
 *    this host is still running (one may be stuck, or calling a different
 *    operation)"
 * (For a nonblocking call the time counts from the start of comm_wait.)
 * A wait also checks, once a second, whether a peer on this host has exited
 * (kill(pid, 0) on the pids boot_init exchanged): then it fails within about
 * two seconds instead of at the timeout:
 *   "recv on 'pp' (rank 1 of 4) failed after 2 s: rank 2 (pid 1234 on host
 *    a) has exited"
 * Peers on other hosts cannot be checked from here; their own host's ranks
 * report them. After any error the communicator, and every other one of the job, is
 * unusable (an operation may still be in flight on a dead peer). Do not free
 * it and do not finalize (MPI_Finalize would wait for the dead peer): print
 * the error and call comm_abort(), which ends the process with a status and
 * asks the launcher to end the other ranks.
 *
 *   pp_comm *world, *tp;
 *   comm_init(&world, "mpi", &proc, 120, &e);        proc from boot_init
 *   comm_split(world, color, key, "tp", &tp, &e);   collective over world
 *   comm_allreduce(tp, grad, n, PP_DT_REAL, PP_OP_SUM, &e);
 *   comm_free(tp); comm_free(world);                 world last
 *
 * Collectives are called by every rank of the communicator in the same
 * order; a rank that calls a different one makes the others time out. */
#ifndef PP_COMM_H
#define PP_COMM_H

#include <stddef.h>
#include <string.h>

#include "../../kernels/ops.h"
#include "../base/error.h"
#include "boot.h"

typedef enum {
	PP_DT_F32,
	PP_DT_F64,
	PP_DT_I32,
	PP_DT_I64,
	PP_DT_U64,
	PP_DT_BYTE, /* no reductions */
	PP_DT_BF16, /* bfloat16: reductions on nccl only */
} pp_dtype;

/* the element type of pp_real tensors (kernels/ops.h) */
#ifdef PP_F64
#define PP_DT_REAL PP_DT_F64
#else
#define PP_DT_REAL PP_DT_F32
#endif

/* the element type of an op table's PP_TYPE_REAL or PP_TYPE_BF16 tensors
 * (kernels/ops.h: activations are of the table's act_type) */
static inline pp_dtype comm_dtype_of(int type)
{
	return type == PP_TYPE_BF16 ? PP_DT_BF16 : PP_DT_REAL;
}

typedef enum { PP_OP_SUM, PP_OP_MAX } pp_redop;

#define PP_COMM_TIMEOUT_DEFAULT 120.0
/* comm_split color for a rank that joins no group (its *out becomes NULL) */
#define PP_COMM_NOCOLOR (-1)

typedef struct pp_comm pp_comm;

/* An operation in flight, from a nonblocking call. Backends embed this as
 * the first member of their own request. */
typedef struct pp_comm_req {
	pp_comm *c;
	const char *op; /* "allreduce", ... for messages */
	int peers[2];   /* the suspects named on failure (npeers of them); */
	int npeers;     /* 0: every rank of c */
} pp_comm_req;

typedef struct pp_comm_ops {
	const char *name; /* "mpi", "nccl" */

	/* *world = every rank of the job (proc from boot_init, kept by
	 * reference: it must outlive the communicators). timeout_s <= 0 means
	 * PP_COMM_TIMEOUT_DEFAULT. Collective. */
	int (*init)(pp_comm **world, pp_proc *proc, double timeout_s, pp_err *e);
	/* Ranks with the same color form one new communicator, ranked by key,
	 * then by rank in c. color PP_COMM_NOCOLOR: *out = NULL. name (at most
	 * 31 characters) appears in error messages. Collective over c. */
	int (*split)(pp_comm *c, int color, int key, const char *name, pp_comm **out, pp_err *e);

	/* buf (count) = op over ranks of buf, in place */
	int (*allreduce)(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op, pp_err *e);
	/* recv (count) = block c->rank of op over ranks of send (c->size * count);
	 * send and recv do not overlap */
	int (*reduce_scatter)(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			      pp_redop op, pp_err *e);
	/* recv (c->size * count) = every rank's send (count), in rank order;
	 * send may be recv + c->rank * count (in place) */
	int (*all_gather)(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			  pp_err *e);
	/* Every rank sends scounts[p] elements of send, from offset sdispls[p],
	 * to rank p, and receives rcounts[p] from rank p into recv at
	 * rdispls[p] (elements; zero counts allowed): the all-to-all of expert
	 * parallelism. Each pair's counts must agree (what p sends here is
	 * what this rank expects from p). */
	int (*alltoallv)(pp_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
			 void *recv, const size_t *rcounts, const size_t *rdispls, pp_dtype t,
			 pp_err *e);
	/* Nonblocking allreduce: *req is the operation in flight. */
	int (*iallreduce)(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op,
			  pp_comm_req **req, pp_err *e);
	/* Nonblocking reduce-scatter with a block size per rank: recv
	 * (counts[c->rank]) = block c->rank of op over ranks of send (the sum
	 * of counts, the blocks in rank order); counts (c->size) are the same
	 * on every rank and may be zero; send and recv do not overlap. */
	int (*ireduce_scatter)(pp_comm *c, const void *send, void *recv, const size_t *counts,
			       pp_dtype t, pp_redop op, pp_comm_req **req, pp_err *e);
	/* Nonblocking all-gather with a block size per rank: recv (the sum of
	 * counts) = every rank's send (counts[rank]), blocks in rank order;
	 * counts (c->size) are the same on every rank and may be zero; send
	 * may be recv at this rank's block (in place). FSDP's gather of a
	 * layer's parameters from their shards. */
	int (*iall_gatherv)(pp_comm *c, const void *send, void *recv, const size_t *counts,
			    pp_dtype t, pp_comm_req **req, pp_err *e);
	/* For comm_test and comm_wait: advances req without waiting; *done once
	 * it has completed and its data is in place. An error fails it. */
	int (*progress)(pp_comm_req *req, int *done, pp_err *e);
	/* Frees req. failed: it ended in an error or a timeout, and may still be
	 * pending: the backend gives up on the communicator. */
	void (*release)(pp_comm_req *req, int failed);
	/* buf (count) = root's buf */
	int (*broadcast)(pp_comm *c, void *buf, size_t count, pp_dtype t, int root, pp_err *e);

	/* Point to point. A send completes when the receiver has matched it.
	 * Messages between two ranks are matched by tag on "mpi"; "nccl" has no
	 * tags and matches them in the order they were posted, so post them in
	 * the same order on both sides (the tag is still checked for range).
	 * tag: 0 .. 32767. */
	int (*send)(pp_comm *c, const void *buf, size_t count, pp_dtype t, int peer, int tag,
		    pp_err *e);
	int (*recv)(pp_comm *c, void *buf, size_t count, pp_dtype t, int peer, int tag, pp_err *e);
	/* A send to dst and a receive from src at once (either may be -1 to skip):
	 * the pipeline's exchange with its neighbours, free of send/send deadlock. */
	int (*sendrecv)(pp_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
			size_t rcount, int src, pp_dtype t, int tag, pp_err *e);

	int (*barrier)(pp_comm *c, pp_err *e);

	/* Optional (NULL where a call is done when it returns): a timing mark
	 * recorded after every operation posted on c so far, which the op
	 * table's mark_ns reads (kernels/ops.h); NULL when none could be made.
	 * Profiles time nonblocking collectives with it. */
	void *(*mark)(pp_comm *c);

	/* Releases c; freeing the world communicator (last) also finalizes the
	 * backend (MPI_Finalize when init started MPI). Only after success. */
	void (*free)(pp_comm *c);
	/* Ends the process with status code and asks the launcher to end every
	 * rank (MPI_Abort; PMIx_Abort for nccl; _exit in a singleton). Never
	 * returns, never waits more than a few seconds (then _exit). why goes
	 * to the launcher where it takes a message (PMIx_Abort). */
	void (*abort)(pp_comm *c, int code, const char *why);
} pp_comm_ops;

struct pp_comm {
	const pp_comm_ops *ops;
	char name[32];  /* "world", "tp", ... */
	int rank, size; /* in this communicator */
	double timeout; /* seconds per call; may be changed between calls */
	int *world;     /* (size) job rank of each member */
	pp_proc *proc;  /* the job: peers' pids and hosts, for error messages */
	void *impl;     /* backend state */
};

extern const pp_comm_ops pp_comm_mpi;
#ifdef PP_CUDA
extern const pp_comm_ops pp_comm_nccl;
#endif

/* The table for "mpi" or "nccl"; NULL if that backend is not built in. */
static inline const pp_comm_ops *comm_find(const char *backend)
{
	if (backend && !strcmp(backend, "mpi"))
		return &pp_comm_mpi;
#ifdef PP_CUDA
	if (backend && !strcmp(backend, "nccl"))
		return &pp_comm_nccl;
#endif
	return NULL;
}

static inline size_t comm_dtype_size(pp_dtype t)
{
	switch (t) {
	case PP_DT_F32:
	case PP_DT_I32:
		return 4;
	case PP_DT_F64:
	case PP_DT_I64:
	case PP_DT_U64:
		return 8;
	case PP_DT_BYTE:
		return 1;
	case PP_DT_BF16:
		return 2;
	}
	return 0;
}

static inline const char *comm_dtype_name(pp_dtype t)
{
	static const char *const names[] = {"float32", "float64", "int32",   "int64",
					    "uint64",  "bytes",   "bfloat16"};
	return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

/* *world over the backend named ("mpi", "nccl"); PP_EUSAGE when it is not
 * built in. See pp_comm_ops.init. */
static inline int comm_init(pp_comm **world, const char *backend, pp_proc *proc, double timeout_s,
			    pp_err *e)
{
	const pp_comm_ops *ops = comm_find(backend);
	*world = NULL;
	if (!ops)
		return pp_errorf(e, PP_EUSAGE,
				 "comm backend '%s' is not built in (mpi always is; nccl in a "
				 "build with CUDA)",
				 backend ? backend : "(none)");
	return ops->init(world, proc, timeout_s, e);
}

/* Calls through the table: comm_allreduce(c, ...) is c->ops->allreduce(c, ...). */
static inline int comm_split(pp_comm *c, int color, int key, const char *name, pp_comm **out,
			     pp_err *e)
{
	return c->ops->split(c, color, key, name, out, e);
}
static inline int comm_allreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op,
				 pp_err *e)
{
	return c->ops->allreduce(c, buf, count, t, op, e);
}
static inline int comm_reduce_scatter(pp_comm *c, const void *send, void *recv, size_t count,
				      pp_dtype t, pp_redop op, pp_err *e)
{
	return c->ops->reduce_scatter(c, send, recv, count, t, op, e);
}
static inline int comm_all_gather(pp_comm *c, const void *send, void *recv, size_t count,
				  pp_dtype t, pp_err *e)
{
	return c->ops->all_gather(c, send, recv, count, t, e);
}
static inline int comm_alltoallv(pp_comm *c, const void *send, const size_t *scounts,
				 const size_t *sdispls, void *recv, const size_t *rcounts,
				 const size_t *rdispls, pp_dtype t, pp_err *e)
{
	return c->ops->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, t, e);
}
static inline int comm_iallreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op,
				  pp_comm_req **req, pp_err *e)
{
	return c->ops->iallreduce(c, buf, count, t, op, req, e);
}
static inline int comm_ireduce_scatter(pp_comm *c, const void *send, void *recv,
				       const size_t *counts, pp_dtype t, pp_redop op,
				       pp_comm_req **req, pp_err *e)
{
	return c->ops->ireduce_scatter(c, send, recv, counts, t, op, req, e);
}
static inline int comm_iall_gatherv(pp_comm *c, const void *send, void *recv, const size_t *counts,
				    pp_dtype t, pp_comm_req **req, pp_err *e)
{
	return c->ops->iall_gatherv(c, send, recv, counts, t, req, e);
}
/* Waits for req to complete (bounded like every call: the communicator's
 * timeout from now, and a dead peer on this host), then frees it. */
int comm_wait(pp_comm_req *req, pp_err *e);
/* Whether req has completed, without waiting (it also advances the
 * operation: MPI moves nonblocking collectives forward only inside its
 * calls, so test what is in flight now and then). *done: req was freed, as
 * it is on an error; else it stays in flight. */
int comm_test(pp_comm_req *req, int *done, pp_err *e);
static inline int comm_broadcast(pp_comm *c, void *buf, size_t count, pp_dtype t, int root,
				 pp_err *e)
{
	return c->ops->broadcast(c, buf, count, t, root, e);
}
static inline int comm_send(pp_comm *c, const void *buf, size_t count, pp_dtype t, int peer,
			    int tag, pp_err *e)
{
	return c->ops->send(c, buf, count, t, peer, tag, e);
}
static inline int comm_recv(pp_comm *c, void *buf, size_t count, pp_dtype t, int peer, int tag,
			    pp_err *e)
{
	return c->ops->recv(c, buf, count, t, peer, tag, e);
}
static inline int comm_sendrecv(pp_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
				size_t rcount, int src, pp_dtype t, int tag, pp_err *e)
{
	return c->ops->sendrecv(c, sbuf, scount, dst, rbuf, rcount, src, t, tag, e);
}
static inline int comm_barrier(pp_comm *c, pp_err *e) { return c->ops->barrier(c, e); }
static inline void *comm_mark(pp_comm *c) { return c && c->ops->mark ? c->ops->mark(c) : NULL; }
static inline void comm_free(pp_comm *c)
{
	if (c)
		c->ops->free(c);
}
/* Ends the process (see pp_comm_ops.abort). c may be NULL when the failure
 * came before a communicator existed: then boot_abort. */
static inline __attribute__((noreturn)) void comm_abort(pp_comm *c, int code, const char *why)
{
	if (c)
		c->ops->abort(c, code, why);
	boot_abort(NULL, code, why);
}

/* ---- for backends (comm.c): the logic both share ---- */

/* A new communicator with its member table (size entries, filled by the
 * caller); NULL when out of memory. comm_delete frees what comm_new made. */
pp_comm *comm_new(const pp_comm_ops *ops, pp_proc *proc, const char *name, int rank, int size,
		  double timeout);
void comm_delete(pp_comm *c);
/* PP_EUSAGE for a bad dtype, a bad reduction (redop: a pp_redop, or -1
 * when the call does not reduce), a reduction over bytes, a peer or root
 * out of range (-1 allowed when allow_none), a tag out of range. op names
 * the call. */
int comm_check(const pp_comm *c, const char *op, pp_dtype t, int redop, pp_err *e);
int comm_check_rank(const pp_comm *c, const char *op, const char *what, int r, int allow_none,
		    pp_err *e);
int comm_check_tag(const pp_comm *c, const char *op, int tag, pp_err *e);
/* The checks of a send to dst and a receive from src (either -1) with tag. */
int comm_check_exchange(const pp_comm *c, const char *op, pp_dtype t, int dst, int src, int tag,
			pp_err *e);
/* From every rank's (color, key) of c, ckeys (c->size, 2): this rank's rank
 * and size in its new group and the group's members' job ranks (world,
 * room for c->size). Same order as MPI_Comm_split and ncclCommSplit: by key,
 * then by rank in c. */
void comm_split_plan(const pp_comm *c, const int *ckeys, int *rank, int *size, int *world);
/* "op on 'name' (rank r of n) failed: why; <state of the suspects>", the
 * suspects being peers (n ranks of c: the other side of a point-to-point
 * call) or, when peers is NULL, every rank of c. */
int comm_fail_error(const pp_comm *c, const char *op, const int *peers, int n, const char *why,
		    pp_err *e);

/* The one wait loop of every backend: calls poll(arg, &done, e) until it
 * says done or fails, for an operation op on c whose suspects are peers
 * (npeers ranks of c; NULL: all of c). Between polls it yields, then
 * (after a second) sleeps 100 us, so a stuck wait does not starve the
 * node's other ranks. It ends the wait with PP_ERUNTIME
 *   - at the communicator's timeout: "op on 'dp' (rank 1 of 4) timed out
 *     after 120 s: <who did not respond>";
 *   - early, when a suspect on this host has exited and the operation is
 *     still pending a second later (so a peer that exits right after
 *     sending its last message is not blamed): "op ... failed after 2 s:
 *     rank 2 (pid 1234 on host a) has exited". The peers named are those
 *     seen dead first, not the ranks that gave up on their own timeout since.
 * The caller cleans up after a failure (the operation may still be pending). */
int comm_poll(const pp_comm *c, const char *op, const int *peers, int npeers,
	      int (*poll)(void *arg, int *done, pp_err *e), void *arg, pp_err *e);
/* A request's common part, for a backend's post. */
static inline void comm_req_init(pp_comm_req *r, pp_comm *c, const char *op, const int *peers,
				 int npeers)
{
	r->c = c, r->op = op, r->npeers = 0;
	for (int i = 0; peers && i < npeers && i < 2; i++)
		r->peers[r->npeers++] = peers[i];
}
/* Seconds on a monotonic clock. */
double comm_now(void);

#endif
