/* The comm interface over NCCL, on device memory (one GPU per rank).
 *
 * The unique id travels from rank 0 through PMIx (boot_allgather), together
 * with every rank's verdict on its GPU, so that a rank without a usable
 * device makes every rank fail at init instead of leaving the others
 * waiting. Communicators are non-blocking (config.blocking = 0).
 *
 * Streams: the ops run on the legacy default stream (kernels/cuda/cuda.h),
 * the compute stream. Each communicator has its own stream (so the dp
 * reduction, the pp transfers and the tp sums each have theirs), created
 * non-blocking: it runs beside the compute stream, ordered only by events.
 * Every operation first records an event on the compute stream and makes
 * the communicator's stream wait for it (a collective never reads a buffer a
 * kernel is still filling), is enqueued, then records its own "done" event.
 *
 * The rule: no two NCCL operations of this process are in flight at once,
 * whatever their communicators. An NCCL kernel spins on the GPU until its
 * peers join; two of them on different communicators, each waiting for a
 * peer that runs the other first, deadlock (NCCL's guide, "Using multiple
 * NCCL communicators concurrently"). So every operation's stream also waits
 * for the one posted before it, on any communicator (one event chain,
 * `chain`): the GPU runs them in the order this process posts them, and
 * every rank posts the ones it shares with a peer in the same order (the
 * trainer's program order). The dp reduction still overlaps the backward's
 * kernels, only not another communicator's traffic. Nothing may wait for
 * the whole device while an operation is in flight, since that waits for
 * a kernel whose peers may wait for us: the backend's scratch grows
 * stream-ordered and cuDNN's plan eviction waits for the compute stream
 * only (kernels/cuda); tests/unit/test_comm_order.c checks the ordering.
 * Completion is cudaEventQuery of that event, polled with
 * ncclCommGetAsyncError in comm_wait (comm.c) against the deadline; once
 * done, the compute stream waits for the event too, so kernels issued later
 * read what the operation wrote. A blocking call posts and waits; a
 * nonblocking one (iallreduce, ireduce_scatter) returns the request, and
 * the compute stream goes on meanwhile.
 *
 * A non-blocking communicator may answer a call with ncclInProgress before
 * the operation is on the stream; the post waits (bounded) until the
 * communicator is ready again, and only then records "done", so the event
 * always follows the operation and no call is issued to a communicator
 * still busy with the last. On a timeout, a dead peer or an asynchronous
 * error the communicator is aborted (ncclCommAbort) and the call returns
 * PP_ERUNTIME. Host buffers are accepted too (copied through the device:
 * meant for small values such as a loss, a status or a path).
 *
 * Built only with -DPP_CUDA; links with -lnccl -lcudart (runtime API only). */
#ifdef PP_CUDA

#include "comm.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the stream the ops enqueue their kernels on (kernels/cuda/cuda.h) */
#define COMPUTE_STREAM cudaStreamLegacy

enum { POOL = 16 };

typedef struct {
	ncclComm_t nc;
	cudaStream_t stream;    /* non-blocking: ordered by events only */
	cudaEvent_t after;      /* recorded on the compute stream before each operation */
	cudaEvent_t pool[POOL]; /* spare "done" events */
	int npool;
	int *scratch; /* device (2 * size) ints: split plans, barrier */
	int aborted;
} nccl_impl;

/* Recorded after the last operation posted, on its communicator's stream;
 * the next operation's stream waits for it (the rule above). */
static cudaEvent_t chain;

/* every live communicator, so that comm_abort can abort them all */
enum { MAX_COMMS = 64 };
static pp_comm *live[MAX_COMMS];

static void track(pp_comm *c, int on)
{
	for (int i = 0; i < MAX_COMMS; i++) {
		if (on && !live[i]) {
			live[i] = c;
			return;
		}
		if (!on && live[i] == c) {
			live[i] = NULL;
			return;
		}
	}
}

static ncclDataType_t nccl_type(pp_dtype t)
{
	switch (t) {
	case PP_DT_F32:
		return ncclFloat32;
	case PP_DT_F64:
		return ncclFloat64;
	case PP_DT_I32:
		return ncclInt32;
	case PP_DT_I64:
		return ncclInt64;
	case PP_DT_U64:
		return ncclUint64;
	case PP_DT_BYTE:
		return ncclUint8;
	case PP_DT_BF16:
		return ncclBfloat16;
	}
	return ncclUint8;
}

static nccl_impl *impl(const pp_comm *c) { return c->impl; }

static void abort_comm(pp_comm *c)
{
	nccl_impl *s = impl(c);
	if (s->nc && !s->aborted)
		ncclCommAbort(s->nc);
	s->aborted = 1;
}

static int nccl_error(pp_comm *c, const char *op, const int *peers, int n, ncclResult_t r,
		      pp_err *e)
{
	char why[512];
	const char *last = impl(c)->nc ? ncclGetLastError(impl(c)->nc) : NULL;
	snprintf(why, sizeof why, "NCCL: %s%s%s", ncclGetErrorString(r), last && *last ? ": " : "",
		 last ? last : "");
	abort_comm(c);
	return comm_fail_error(c, op, peers, n, why, e);
}

static int cuda_error(pp_comm *c, const char *op, cudaError_t r, pp_err *e)
{
	char why[256];
	snprintf(why, sizeof why, "CUDA: %s (error %d)", cudaGetErrorString(r), (int)r);
	abort_comm(c);
	return comm_fail_error(c, op, NULL, 0, why, e);
}

/* The wait for communicators to leave ncclInProgress, for comm_poll: c's
 * own, then (a split) the new one, child, which a non-blocking split
 * stores in impl(child)->nc from NCCL's own thread only when it completes:
 * that pointer is read only once c, the parent, says the split is done. */
typedef struct {
	pp_comm *c;
	const char *op;
	pp_comm *child;
} state_wait;

static ncclResult_t comm_state(ncclComm_t nc)
{
	ncclResult_t a = ncclSuccess;
	if (nc && ncclCommGetAsyncError(nc, &a) != ncclSuccess)
		a = ncclInternalError;
	return a;
}

static int poll_state(void *arg, int *done, pp_err *e)
{
	state_wait *w = arg;
	ncclResult_t a = comm_state(impl(w->c)->nc);
	if (a == ncclSuccess && w->child)
		a = comm_state(impl(w->child)->nc);
	if (a != ncclSuccess && a != ncclInProgress)
		return nccl_error(w->c, w->op, NULL, 0, a, e);
	*done = a == ncclSuccess;
	return 0;
}

/* Waits until c (and child, see state_wait) leave ncclInProgress; on a
 * failure c is aborted, which also ends a split still in progress. */
static int wait_state(pp_comm *c, const char *op, pp_comm *child, pp_err *e)
{
	state_wait w = {c, op, child};
	int rc = comm_poll(c, op, NULL, 0, poll_state, &w, e);
	if (rc)
		abort_comm(c);
	return rc;
}

/* NCCL reads and writes device memory only. A host buffer (a loss, a
 * status flag, a path: small values) goes through a device copy, so the
 * interface takes host memory on both backends. The copy's cudaMalloc and
 * cudaFree may synchronize the whole device, that is wait for NCCL kernels
 * of other communicators that wait on their peers (NCCL's guide, "Using
 * multiple NCCL communicators concurrently"): use host buffers only while
 * no nonblocking operation is in flight (the trainer's come before the
 * pipeline or after gradsync_finish). */
typedef struct {
	void *host, *dev;
	size_t bytes;
	int copy_out; /* back to host once the operation is done */
} bounce;

static int on_host(const void *p)
{
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError(); /* older runtimes: "invalid value" for plain host memory */
		return 1;
	}
	return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

/* An operation in flight. */
typedef struct {
	pp_comm_req base;
	cudaEvent_t done; /* recorded on the communicator's stream after the operation */
	bounce b[2];
} nccl_req;

static void nccl_release(pp_comm_req *base, int failed)
{
	nccl_req *q = (nccl_req *)base;
	nccl_impl *s = impl(base->c);
	if (failed)
		abort_comm(base->c);
	for (int i = 0; i < 2; i++)
		if (q->b[i].dev)
			cudaFree(q->b[i].dev);
	if (q->done && !failed && s->npool < POOL)
		s->pool[s->npool++] = q->done;
	else if (q->done)
		cudaEventDestroy(q->done); /* a pending one is released when it completes */
	free(q);
}

/* A request for op on c, its "done" event ready. */
static int req_new(pp_comm *c, const char *op, const int *peers, int npeers, nccl_req **out,
		   pp_err *e)
{
	nccl_impl *s = impl(c);
	*out = NULL;
	if (s->aborted)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s on '%s': the communicator was aborted by an earlier failure",
				 op, c->name);
	nccl_req *q = calloc(1, sizeof *q);
	if (!q)
		return pp_errorf(e, PP_ERUNTIME, "%s on '%s': out of memory", op, c->name);
	comm_req_init(&q->base, c, op, peers, npeers);
	cudaError_t r = cudaSuccess;
	if (s->npool)
		q->done = s->pool[--s->npool];
	else
		r = cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming);
	if (r != cudaSuccess) {
		q->done = NULL;
		int rc = cuda_error(c, op, r, e);
		nccl_release(&q->base, 1);
		return rc;
	}
	*out = q;
	return 0;
}

/* *use = p, or (host memory) the device copy b->dev of p's bytes, filled
 * from p when copy_in, copied back when the operation completes when
 * copy_out. */
static int bounce_in(nccl_req *q, int i, const void *p, size_t bytes, int copy_in, int copy_out,
		     void **use, pp_err *e)
{
	bounce *b = &q->b[i];
	*use = (void *)p;
	if (!bytes || !p || !on_host(p))
		return 0;
	cudaError_t r = cudaMalloc(&b->dev, bytes);
	if (r == cudaSuccess && copy_in)
		r = cudaMemcpy(b->dev, p, bytes, cudaMemcpyHostToDevice);
	if (r != cudaSuccess)
		return cuda_error(q->base.c, q->base.op, r, e);
	b->host = (void *)p, b->bytes = bytes, b->copy_out = copy_out;
	*use = b->dev;
	return 0;
}

/* The communicator's stream waits for everything issued on the compute
 * stream so far (the kernels that fill the buffers, the bounce copies), and
 * for the operation posted before, on any communicator (the chain). */
static int after_compute(nccl_req *q, pp_err *e)
{
	nccl_impl *s = impl(q->base.c);
	cudaError_t r = cudaSuccess;
	if (!chain)
		r = cudaEventCreateWithFlags(&chain, cudaEventDisableTiming);
	if (r == cudaSuccess)
		r = cudaEventRecord(s->after, COMPUTE_STREAM);
	if (r == cudaSuccess)
		r = cudaStreamWaitEvent(s->stream, s->after, 0);
	if (r == cudaSuccess) /* a chain never recorded is no wait */
		r = cudaStreamWaitEvent(s->stream, chain, 0);
	return r == cudaSuccess ? 0 : cuda_error(q->base.c, q->base.op, r, e);
}

/* After the NCCL call (issued: what it returned): waits until NCCL has put
 * the operation on the stream, then records "done" after it. Frees q on
 * failure; *out = q otherwise. rc: an error before the call (then issued
 * is ignored). */
static int posted(nccl_req *q, int rc, ncclResult_t issued, pp_comm_req **out, pp_err *e)
{
	pp_comm *c = q->base.c;
	const char *op = q->base.op;
	*out = NULL;
	if (!rc && issued != ncclSuccess && issued != ncclInProgress)
		rc = nccl_error(c, op, q->base.npeers ? q->base.peers : NULL, q->base.npeers,
				issued, e);
	if (!rc && issued == ncclInProgress)
		rc = wait_state(c, op, NULL, e);
	cudaError_t r;
	if (!rc && ((r = cudaEventRecord(q->done, impl(c)->stream)) != cudaSuccess ||
		    (r = cudaEventRecord(chain, impl(c)->stream)) != cudaSuccess))
		rc = cuda_error(c, op, r, e);
	if (rc) {
		nccl_release(&q->base, 1);
		return rc;
	}
	*out = &q->base;
	return 0;
}

static int nccl_progress(pp_comm_req *base, int *done, pp_err *e)
{
	nccl_req *q = (nccl_req *)base;
	pp_comm *c = base->c;
	nccl_impl *s = impl(c);
	const int *peers = base->npeers ? base->peers : NULL;
	*done = 0;
	if (s->aborted)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s on '%s': the communicator was aborted by an earlier failure",
				 base->op, c->name);
	ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError(s->nc, &state);
	if (r != ncclSuccess)
		return nccl_error(c, base->op, peers, base->npeers, r, e);
	if (state != ncclSuccess && state != ncclInProgress)
		return nccl_error(c, base->op, peers, base->npeers, state, e);
	cudaError_t st = cudaEventQuery(q->done);
	if (st == cudaErrorNotReady) {
		/* "not ready" is no error, but a runtime may still keep it as the
		 * last error, which the next kernel launch check (cudaGetLastError
		 * in kernels/cuda) would then report as its own failure */
		if (cudaPeekAtLastError() == cudaErrorNotReady)
			(void)cudaGetLastError();
		return 0;
	}
	/* kernels issued from now on read what the operation wrote */
	if (st == cudaSuccess)
		st = cudaStreamWaitEvent(COMPUTE_STREAM, q->done, 0);
	for (int i = 0; i < 2 && st == cudaSuccess; i++)
		if (q->b[i].dev && q->b[i].copy_out)
			st = cudaMemcpy(q->b[i].host, q->b[i].dev, q->b[i].bytes,
					cudaMemcpyDeviceToHost);
	if (st != cudaSuccess)
		return cuda_error(c, base->op, st, e);
	*done = 1;
	return 0;
}

/* The blocking calls: rc from posting *r, then the wait */
static int finish(int rc, pp_comm_req **r, pp_err *e) { return rc || !*r ? rc : comm_wait(*r, e); }

static ncclRedOp_t nccl_op(pp_redop op) { return op == PP_OP_MAX ? ncclMax : ncclSum; }

static int nccl_iallreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op,
			   pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	int rc = comm_check(c, "allreduce", t, (int)op, e);
	nccl_req *q;
	if (rc || (rc = req_new(c, "allreduce", NULL, 0, &q, e)))
		return rc;
	void *d;
	ncclResult_t r = ncclSuccess;
	rc = bounce_in(q, 0, buf, count * comm_dtype_size(t), 1, 1, &d, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc && count)
		r = ncclAllReduce(d, d, count, nccl_type(t), nccl_op(op), impl(c)->nc,
				  impl(c)->stream);
	return posted(q, rc, r, out, e);
}

static int nccl_allreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op, pp_err *e)
{
	pp_comm_req *r;
	return finish(nccl_iallreduce(c, buf, count, t, op, &r, e), &r, e);
}

static int nccl_ireduce_scatter(pp_comm *c, const void *send, void *recv, const size_t *counts,
				pp_dtype t, pp_redop op, pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	int rc = comm_check(c, "reduce_scatter", t, (int)op, e);
	nccl_req *q;
	if (rc || (rc = req_new(c, "reduce_scatter", NULL, 0, &q, e)))
		return rc;
	nccl_impl *s = impl(c);
	size_t esz = comm_dtype_size(t), total = 0;
	for (int i = 0; i < c->size; i++)
		total += counts[i];
	void *ds, *dr;
	ncclResult_t r = ncclSuccess;
	rc = bounce_in(q, 0, send, total * esz, 1, 0, &ds, e);
	if (!rc)
		rc = bounce_in(q, 1, recv, counts[c->rank] * esz, 0, 1, &dr, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc && total) {
		/* one reduce per block, to the rank that keeps it, in one group */
		r = ncclGroupStart();
		size_t at = 0;
		for (int i = 0; i < c->size; i++) {
			char *blk = (char *)ds + at * esz;
			if (r == ncclSuccess && counts[i])
				r = ncclReduce(blk, i == c->rank ? dr : blk, counts[i],
					       nccl_type(t), nccl_op(op), i, s->nc, s->stream);
			at += counts[i];
		}
		ncclResult_t end = ncclGroupEnd();
		r = r != ncclSuccess ? r : end;
	}
	return posted(q, rc, r, out, e);
}

static int nccl_iall_gatherv(pp_comm *c, const void *send, void *recv, const size_t *counts,
			     pp_dtype t, pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	int rc = comm_check(c, "all_gatherv", t, -1, e);
	nccl_req *q;
	if (rc || (rc = req_new(c, "all_gatherv", NULL, 0, &q, e)))
		return rc;
	nccl_impl *s = impl(c);
	size_t esz = comm_dtype_size(t), total = 0, mine = 0;
	for (int i = 0; i < c->size; i++) {
		mine = i == c->rank ? total : mine;
		total += counts[i];
	}
	/* in place: this rank's block of a host recv is copied in with the rest */
	const int in_place = (const char *)send == (const char *)recv + mine * esz;
	void *ds = NULL, *dr;
	ncclResult_t r = ncclSuccess;
	rc = bounce_in(q, 1, recv, total * esz, in_place, 1, &dr, e);
	if (!rc && in_place)
		ds = (char *)dr + mine * esz;
	else if (!rc)
		rc = bounce_in(q, 0, send, counts[c->rank] * esz, 1, 0, &ds, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc && total) {
		/* one broadcast per block, from the rank that holds it, in one group */
		r = ncclGroupStart();
		size_t at = 0;
		for (int i = 0; i < c->size; i++) {
			if (r == ncclSuccess && counts[i])
				r = ncclBroadcast(ds, (char *)dr + at * esz, counts[i],
						  nccl_type(t), i, s->nc, s->stream);
			at += counts[i];
		}
		ncclResult_t end = ncclGroupEnd();
		r = r != ncclSuccess ? r : end;
	}
	return posted(q, rc, r, out, e);
}

static int nccl_reduce_scatter(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			       pp_redop op, pp_err *e)
{
	int rc = comm_check(c, "reduce_scatter", t, (int)op, e);
	nccl_req *q;
	pp_comm_req *r = NULL;
	if (rc || !count || (rc = req_new(c, "reduce_scatter", NULL, 0, &q, e)))
		return rc;
	size_t esz = comm_dtype_size(t);
	void *ds, *dr;
	ncclResult_t issued = ncclSuccess;
	rc = bounce_in(q, 0, send, (size_t)c->size * count * esz, 1, 0, &ds, e);
	if (!rc)
		rc = bounce_in(q, 1, recv, count * esz, 0, 1, &dr, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc)
		issued = ncclReduceScatter(ds, dr, count, nccl_type(t), nccl_op(op), impl(c)->nc,
					   impl(c)->stream);
	return finish(posted(q, rc, issued, &r, e), &r, e);
}

static int nccl_all_gather(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			   pp_err *e)
{
	int rc = comm_check(c, "all_gather", t, -1, e);
	nccl_req *q;
	pp_comm_req *r = NULL;
	if (rc || !count || (rc = req_new(c, "all_gather", NULL, 0, &q, e)))
		return rc;
	size_t esz = comm_dtype_size(t);
	void *ds = NULL, *dr;
	ncclResult_t issued = ncclSuccess;
	/* in place (send == recv + rank * count) is NCCL's own convention; a
	 * host buffer in place is copied in whole, so it stays in place */
	int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count * esz;
	rc = bounce_in(q, 1, recv, (size_t)c->size * count * esz, in_place, 1, &dr, e);
	if (!rc && in_place)
		ds = (char *)dr + (size_t)c->rank * count * esz;
	else if (!rc)
		rc = bounce_in(q, 0, send, count * esz, 1, 0, &ds, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc)
		issued = ncclAllGather(ds, dr, count, nccl_type(t), impl(c)->nc, impl(c)->stream);
	return finish(posted(q, rc, issued, &r, e), &r, e);
}

static int nccl_broadcast(pp_comm *c, void *buf, size_t count, pp_dtype t, int root, pp_err *e)
{
	int rc = comm_check(c, "broadcast", t, -1, e);
	if (!rc)
		rc = comm_check_rank(c, "broadcast", "root", root, 0, e);
	nccl_req *q;
	pp_comm_req *r = NULL;
	/* the root is the one every other rank waits for */
	if (rc || !count ||
	    (rc = req_new(c, "broadcast", c->rank == root ? NULL : &root, c->rank == root ? 0 : 1,
			  &q, e)))
		return rc;
	void *d;
	ncclResult_t issued = ncclSuccess;
	rc = bounce_in(q, 0, buf, count * comm_dtype_size(t), c->rank == root, c->rank != root, &d,
		       e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc)
		issued = ncclBroadcast(d, d, count, nccl_type(t), root, impl(c)->nc,
				       impl(c)->stream);
	return finish(posted(q, rc, issued, &r, e), &r, e);
}

/* One send and one receive in a group (either peer -1), on the
 * communicator's stream: the send after the kernels that produced its
 * buffer, the kernels issued after the call after the receive. NCCL has no
 * tags and allows empty messages: a zero count still pairs with its peer's. */
static int exchange(pp_comm *c, const char *op, const void *sbuf, size_t scount, int dst,
		    void *rbuf, size_t rcount, int src, pp_dtype t, int tag, pp_err *e)
{
	int rc = comm_check_exchange(c, op, t, dst, src, tag, e);
	if (rc)
		return rc;
	int peers[2], np = 0;
	if (dst >= 0)
		peers[np++] = dst;
	if (src >= 0 && src != dst)
		peers[np++] = src;
	nccl_impl *s = impl(c);
	size_t esz = comm_dtype_size(t);
	nccl_req *q;
	pp_comm_req *r = NULL;
	if ((rc = req_new(c, op, peers, np, &q, e)))
		return rc;
	void *ds = NULL, *dr = NULL;
	ncclResult_t issued = ncclSuccess;
	rc = bounce_in(q, 0, dst >= 0 ? sbuf : NULL, scount * esz, 1, 0, &ds, e);
	if (!rc)
		rc = bounce_in(q, 1, src >= 0 ? rbuf : NULL, rcount * esz, 0, 1, &dr, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc) {
		issued = ncclGroupStart();
		if (issued == ncclSuccess && dst >= 0)
			issued = ncclSend(ds, scount, nccl_type(t), dst, s->nc, s->stream);
		if (issued == ncclSuccess && src >= 0)
			issued = ncclRecv(dr, rcount, nccl_type(t), src, s->nc, s->stream);
		ncclResult_t end = ncclGroupEnd();
		issued = issued != ncclSuccess ? issued : end;
	}
	return finish(posted(q, rc, issued, &r, e), &r, e);
}

/* A send to and a receive from every rank (itself too), in one group. */
static int nccl_alltoallv(pp_comm *c, const void *send, const size_t *scounts,
			  const size_t *sdispls, void *recv, const size_t *rcounts,
			  const size_t *rdispls, pp_dtype t, pp_err *e)
{
	int rc = comm_check(c, "alltoallv", t, -1, e);
	nccl_req *q;
	pp_comm_req *r = NULL;
	if (rc || (rc = req_new(c, "alltoallv", NULL, 0, &q, e)))
		return rc;
	nccl_impl *s = impl(c);
	size_t esz = comm_dtype_size(t), sbytes = 0, rbytes = 0;
	for (int p = 0; p < c->size; p++) {
		size_t a = (sdispls[p] + scounts[p]) * esz, b = (rdispls[p] + rcounts[p]) * esz;
		sbytes = a > sbytes ? a : sbytes;
		rbytes = b > rbytes ? b : rbytes;
	}
	void *ds = NULL, *dr = NULL;
	ncclResult_t issued = ncclSuccess;
	rc = bounce_in(q, 0, send, sbytes, 1, 0, &ds, e);
	if (!rc)
		rc = bounce_in(q, 1, recv, rbytes, 0, 1, &dr, e);
	if (!rc)
		rc = after_compute(q, e);
	if (!rc) {
		issued = ncclGroupStart();
		for (int p = 0; issued == ncclSuccess && p < c->size; p++) {
			issued = ncclSend((const char *)ds + sdispls[p] * esz, scounts[p],
					  nccl_type(t), p, s->nc, s->stream);
			if (issued == ncclSuccess)
				issued = ncclRecv((char *)dr + rdispls[p] * esz, rcounts[p],
						  nccl_type(t), p, s->nc, s->stream);
		}
		ncclResult_t end = ncclGroupEnd();
		issued = issued != ncclSuccess ? issued : end;
	}
	return finish(posted(q, rc, issued, &r, e), &r, e);
}

static int nccl_send(pp_comm *c, const void *buf, size_t count, pp_dtype t, int peer, int tag,
		     pp_err *e)
{
	if (peer < 0)
		return comm_check_rank(c, "send", "destination", peer, 0, e);
	return exchange(c, "send", buf, count, peer, NULL, 0, -1, t, tag, e);
}

static int nccl_recv(pp_comm *c, void *buf, size_t count, pp_dtype t, int peer, int tag, pp_err *e)
{
	if (peer < 0)
		return comm_check_rank(c, "recv", "source", peer, 0, e);
	return exchange(c, "recv", NULL, 0, -1, buf, count, peer, t, tag, e);
}

static int nccl_sendrecv(pp_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
			 size_t rcount, int src, pp_dtype t, int tag, pp_err *e)
{
	return exchange(c, "sendrecv", sbuf, scount, dst, rbuf, rcount, src, t, tag, e);
}

/* NCCL has no barrier: a one-int allreduce is one */
static int nccl_barrier(pp_comm *c, pp_err *e)
{
	nccl_impl *s = impl(c);
	nccl_req *q;
	pp_comm_req *r = NULL;
	int rc = req_new(c, "barrier", NULL, 0, &q, e);
	if (rc)
		return rc;
	ncclResult_t issued = ncclSuccess;
	rc = after_compute(q, e);
	if (!rc)
		issued = ncclAllReduce(s->scratch, s->scratch, 1, ncclInt32, ncclSum, s->nc,
				       s->stream);
	return finish(posted(q, rc, issued, &r, e), &r, e);
}

/* NCCL keeps the commName pointer (not a copy) for the communicator's
 * life (its profiler and logs read it): pass the pp_comm's own name. */
static ncclConfig_t config_for(const char *name)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	cfg.commName = name;
	return cfg;
}

static void release(pp_comm *c)
{
	nccl_impl *s = impl(c);
	track(c, 0);
	if (s->scratch)
		cudaFree(s->scratch);
	while (s->npool)
		cudaEventDestroy(s->pool[--s->npool]);
	if (s->after)
		cudaEventDestroy(s->after);
	if (s->stream)
		cudaStreamDestroy(s->stream);
	free(s);
	comm_delete(c);
}

/* A communicator around nc (may be NULL until init completes): its stream,
 * events and scratch buffer. */
static pp_comm *wrap(pp_proc *p, const char *name, int rank, int size, double timeout, pp_err *e)
{
	pp_comm *c = comm_new(&pp_comm_nccl, p, name, rank, size, timeout);
	nccl_impl *s = c ? calloc(1, sizeof *s) : NULL;
	if (!s) {
		comm_delete(c);
		pp_errorf(e, PP_ERUNTIME, "out of memory");
		return NULL;
	}
	c->impl = s;
	track(c, 1);
	/* non-blocking: it runs beside the compute stream, ordered by events
	 * (after_compute, nccl_progress), not by the legacy stream's implicit
	 * synchronisation, which would serialise it with every kernel; and
	 * after every operation posted before on any communicator (the chain:
	 * the rule at the top of this file) */
	cudaError_t q = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
	if (q == cudaSuccess)
		q = cudaEventCreateWithFlags(&s->after, cudaEventDisableTiming);
	if (q == cudaSuccess)
		q = cudaMalloc((void **)&s->scratch, sizeof(int) * 2 * (size_t)size);
	if (q != cudaSuccess) {
		pp_errorf(e, PP_ERUNTIME, "communicator '%s' (rank %d): CUDA: %s", name, rank,
			  cudaGetErrorString(q));
		release(c);
		return NULL;
	}
	return c;
}

/* What each rank tells the others at init: its GPU verdict, and rank 0's id */
typedef struct {
	int cuda_error; /* 0, or the cudaError_t that makes the device unusable */
	int device, ndevices;
	ncclUniqueId id;
} init_note;

static int nccl_init(pp_comm **out, pp_proc *p, double timeout, pp_err *e)
{
	*out = NULL;
	init_note mine = {0};
	mine.device = boot_device(p);
	cudaError_t q = cudaGetDeviceCount(&mine.ndevices);
	if (q == cudaSuccess && mine.device >= mine.ndevices)
		q = cudaErrorInvalidDevice;
	if (q == cudaSuccess)
		q = cudaSetDevice(mine.device);
	mine.cuda_error = (int)q;
	if (p->rank == 0 && q == cudaSuccess) {
		ncclResult_t r = ncclGetUniqueId(&mine.id);
		if (r != ncclSuccess)
			mine.cuda_error = -(int)r; /* negative: an NCCL error */
	}
	init_note *all = calloc((size_t)p->size, sizeof *all);
	if (!all)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (boot_allgather(p, "nccl.init", &mine, sizeof mine, all, e)) {
		free(all);
		return pp_err_prefix(e, "NCCL init");
	}
	int bad = 0, first = -1;
	for (int r = 0; r < p->size; r++)
		if (all[r].cuda_error && !bad++)
			first = r;
	if (bad) {
		char who[160], why[256], others[64] = "";
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		int err = all[first].cuda_error, self = first == p->rank;
		boot_peer_name(p, first, who, sizeof who);
		if (err < 0)
			snprintf(why, sizeof why, "ncclGetUniqueId: %s",
				 ncclGetErrorString((ncclResult_t)-err));
		else if (err == cudaErrorInvalidDevice)
			snprintf(why, sizeof why, "it needs GPU %d but sees %d%s%s%s",
				 all[first].device, all[first].ndevices,
				 self && vis ? " (CUDA_VISIBLE_DEVICES=" : "",
				 self && vis ? vis : "", self && vis ? ")" : "");
		else
			snprintf(why, sizeof why, "%s (CUDA error %d)",
				 cudaGetErrorString((cudaError_t)err), err);
		if (bad > 1)
			snprintf(others, sizeof others, " (and %d more rank(s))", bad - 1);
		free(all);
		return pp_errorf(e, PP_ERUNTIME,
				 "NCCL init: %s%s%s has no usable GPU: %s; on a machine without "
				 "GPUs use the mpi backend",
				 self ? "this rank, " : "", who, others, why);
	}
	ncclUniqueId id = all[0].id;
	free(all);

	pp_comm *c = wrap(p, "world", p->rank, p->size, timeout, e);
	if (!c)
		return PP_ERUNTIME;
	for (int r = 0; r < p->size; r++)
		c->world[r] = r;
	ncclConfig_t cfg = config_for(c->name);
	ncclResult_t r = ncclCommInitRankConfig(&impl(c)->nc, p->size, id, p->rank, &cfg);
	int rc = r != ncclSuccess && r != ncclInProgress ? nccl_error(c, "init", NULL, 0, r, e)
							 : wait_state(c, "init", NULL, e);
	if (rc) {
		release(c);
		return rc;
	}
	*out = c;
	return 0;
}

static int nccl_split(pp_comm *c, int color, int key, const char *name, pp_comm **out, pp_err *e)
{
	*out = NULL;
	if (color < 0 && color != PP_COMM_NOCOLOR)
		return pp_errorf(e, PP_EUSAGE, "split of '%s' into '%s': color %d is negative",
				 c->name, name, color);
	nccl_impl *s = impl(c);
	int mine[2] = {color, key}, rank, size;
	int *ckeys = malloc(sizeof(int) * 2 * (size_t)c->size);
	int *world = malloc(sizeof(int) * (size_t)c->size);
	if (!ckeys || !world) {
		free(ckeys), free(world);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	/* every rank's (color, key), through the device: our own plan of the
	 * groups, and a bounded collective before the split itself */
	cudaError_t q = cudaMemcpy(s->scratch + 2 * c->rank, mine, sizeof mine,
				   cudaMemcpyHostToDevice);
	int rc = q != cudaSuccess ? cuda_error(c, "split", q, e)
				  : nccl_all_gather(c, s->scratch + 2 * c->rank, s->scratch, 2,
						    PP_DT_I32, e);
	if (!rc && (q = cudaMemcpy(ckeys, s->scratch, sizeof(int) * 2 * (size_t)c->size,
				   cudaMemcpyDeviceToHost)) != cudaSuccess)
		rc = cuda_error(c, "split", q, e);
	if (rc) {
		free(ckeys), free(world);
		return pp_err_prefix(e, "split into '%s'", name);
	}
	comm_split_plan(c, ckeys, &rank, &size, world);
	free(ckeys);

	pp_comm *g = NULL;
	if (color >= 0 && !(g = wrap(c->proc, name, rank, size, c->timeout, e))) {
		free(world);
		return PP_ERUNTIME; /* the others will time out in the split: we abort anyway */
	}
	if (g)
		memcpy(g->world, world, sizeof(int) * (size_t)size);
	free(world);
	/* A non-blocking split returns before the new communicator exists and
	 * NCCL's thread stores it when the split completes: into g's state,
	 * which outlives the wait (a rank without a group gets NULL, stored in
	 * no_group). The parent is ncclInProgress until then. */
	static ncclComm_t no_group;
	ncclConfig_t cfg = config_for(g ? g->name : NULL);
	ncclResult_t r = ncclCommSplit(s->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
				       g ? &impl(g)->nc : &no_group, &cfg);
	if (r != ncclSuccess && r != ncclInProgress)
		rc = nccl_error(c, "split", NULL, 0, r, e);
	else
		rc = wait_state(c, "split", g, e);
	/* NCCL's ranks must be ours: reduce_scatter's blocks, every message */
	int nr = -1, nn = -1;
	if (!rc && g &&
	    (!impl(g)->nc || ncclCommUserRank(impl(g)->nc, &nr) != ncclSuccess ||
	     ncclCommCount(impl(g)->nc, &nn) != ncclSuccess || nr != g->rank || nn != g->size)) {
		char why[160];
		snprintf(why, sizeof why,
			 "NCCL made this rank %d of %d in '%s', the split plan %d of %d", nr, nn,
			 name, g->rank, g->size);
		abort_comm(c);
		rc = comm_fail_error(c, "split", NULL, 0, why, e);
	}
	if (rc) {
		/* c is aborted (that ended the split), so g's nc no longer changes */
		if (g) {
			abort_comm(g);
			release(g);
		}
		return rc;
	}
	*out = g;
	return 0;
}

static void nccl_free(pp_comm *c)
{
	nccl_impl *s = impl(c);
	if (s->nc && !s->aborted) {
		/* flush, then destroy; a peer that never finalizes makes us abort */
		ncclResult_t r = ncclCommFinalize(s->nc);
		if (r == ncclSuccess || r == ncclInProgress) {
			double t0 = comm_now();
			ncclResult_t state = ncclInProgress;
			while (state == ncclInProgress && comm_now() - t0 < c->timeout) {
				if (ncclCommGetAsyncError(s->nc, &state) != ncclSuccess)
					break;
				usleep(100);
			}
			if (state == ncclSuccess)
				ncclCommDestroy(s->nc);
			else
				ncclCommAbort(s->nc);
		} else {
			ncclCommAbort(s->nc);
		}
	}
	release(c);
}

static _Noreturn void nccl_abort(pp_comm *c, int code, const char *why)
{
	fflush(NULL);
	boot_exit_after(10, code); /* ncclCommAbort can wait on a wedged GPU */
	for (int i = 0; i < MAX_COMMS; i++)
		if (live[i])
			abort_comm(live[i]);
	boot_abort(c ? c->proc : NULL, code, why);
}

static void *nccl_mark(pp_comm *c)
{
	cudaEvent_t ev;
	if (cudaEventCreateWithFlags(&ev, 0) != cudaSuccess)
		return NULL;
	if (cudaEventRecord(ev, impl(c)->stream) != cudaSuccess) {
		cudaEventDestroy(ev);
		return NULL;
	}
	return (void *)ev;
}

const pp_comm_ops pp_comm_nccl = {
	.name = "nccl",
	.init = nccl_init,
	.split = nccl_split,
	.allreduce = nccl_allreduce,
	.reduce_scatter = nccl_reduce_scatter,
	.iallreduce = nccl_iallreduce,
	.ireduce_scatter = nccl_ireduce_scatter,
	.iall_gatherv = nccl_iall_gatherv,
	.progress = nccl_progress,
	.release = nccl_release,
	.all_gather = nccl_all_gather,
	.alltoallv = nccl_alltoallv,
	.broadcast = nccl_broadcast,
	.send = nccl_send,
	.recv = nccl_recv,
	.sendrecv = nccl_sendrecv,
	.barrier = nccl_barrier,
	.mark = nccl_mark,
	.free = nccl_free,
	.abort = nccl_abort,
};

#else
/* Without PP_CUDA this file is empty (the Makefile compiles every
 * C file in libcommon); ISO C wants at least one declaration. */
typedef int comm_nccl_unused;
#endif
