/* The comm interface over NCCL, on device memory (one GPU per rank).
 *
 * The unique id travels from rank 0 through PMIx (boot_allgather), together
 * with every rank's verdict on its GPU, so that a rank without a usable
 * device makes every rank fail at init instead of leaving the others
 * waiting. Communicators are non-blocking (config.blocking = 0): each call
 * is enqueued on the communicator's own stream, then polled
 * (ncclCommGetAsyncError, cudaStreamQuery) against the deadline through
 * comm_watch; on a timeout, a dead peer or an asynchronous error the
 * communicator is aborted (ncclCommAbort) and the call returns PP_ERUNTIME.
 * Calls are synchronous for the caller: the data is in place on return.
 * Host buffers are accepted too (copied through the device: meant for small
 * values such as a loss, a status or a path).
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

typedef struct {
	ncclComm_t nc;
	cudaStream_t stream;
	int *scratch; /* device (2 * size) ints: split plans, barrier */
	int aborted;
} nccl_impl;

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
	case PP_DT_F32: return ncclFloat32;
	case PP_DT_F64: return ncclFloat64;
	case PP_DT_I32: return ncclInt32;
	case PP_DT_I64: return ncclInt64;
	case PP_DT_U64: return ncclUint64;
	case PP_DT_BYTE: return ncclUint8;
	}
	return ncclUint8;
}

static nccl_impl *impl(const pp_comm *c)
{
	return c->impl;
}

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

/* Waits until the communicator has taken the call (non-blocking NCCL
 * returns ncclInProgress while it sets up) and the stream has run it. */
static int settle(pp_comm *c, const char *op, const int *peers, int npeers, ncclResult_t issued,
		  pp_err *e)
{
	nccl_impl *s = impl(c);
	if (s->aborted)
		return pp_errorf(e, PP_ERUNTIME, "%s on '%s': the communicator was aborted by an "
				 "earlier failure", op, c->name);
	if (issued != ncclSuccess && issued != ncclInProgress)
		return nccl_error(c, op, peers, npeers, issued, e);
	comm_watch w;
	comm_watch_start(&w, c, op, peers, npeers);
	for (;;) {
		ncclResult_t state = ncclSuccess;
		ncclResult_t r = ncclCommGetAsyncError(s->nc, &state);
		if (r != ncclSuccess)
			return nccl_error(c, op, peers, npeers, r, e);
		if (state != ncclSuccess && state != ncclInProgress)
			return nccl_error(c, op, peers, npeers, state, e);
		if (state == ncclSuccess) {
			cudaError_t q = cudaStreamQuery(s->stream);
			if (q == cudaSuccess)
				return 0;
			if (q != cudaErrorNotReady)
				return cuda_error(c, op, q, e);
		}
		int rc = comm_watch_poll(&w, e);
		if (rc) {
			abort_comm(c);
			return rc;
		}
	}
}

/* NCCL reads and writes device memory only. A host buffer (a loss, a
 * status flag, a path: small values) goes through a device copy, so the
 * interface takes host memory on both backends. */
typedef struct {
	void *host, *dev;
	size_t bytes;
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

/* *use = p, or a device copy of p's bytes (filled from p when copy_in) */
static int bounce_in(pp_comm *c, const char *op, const void *p, size_t bytes, int copy_in,
		     bounce *b, void **use, pp_err *e)
{
	memset(b, 0, sizeof *b);
	*use = (void *)p;
	if (!bytes || !p || !on_host(p))
		return 0;
	cudaError_t q = cudaMalloc(&b->dev, bytes);
	if (q == cudaSuccess && copy_in)
		q = cudaMemcpy(b->dev, p, bytes, cudaMemcpyHostToDevice);
	if (q != cudaSuccess) {
		if (b->dev)
			cudaFree(b->dev);
		b->dev = NULL;
		return cuda_error(c, op, q, e);
	}
	b->host = (void *)p, b->bytes = bytes;
	*use = b->dev;
	return 0;
}

/* Copies a device copy back (when copy_out and the call succeeded), frees it. */
static int bounce_out(pp_comm *c, const char *op, bounce *b, int copy_out, int rc, pp_err *e)
{
	if (!b->dev)
		return rc;
	if (!rc && copy_out) {
		cudaError_t q = cudaMemcpy(b->host, b->dev, b->bytes, cudaMemcpyDeviceToHost);
		if (q != cudaSuccess)
			rc = cuda_error(c, op, q, e);
	}
	cudaFree(b->dev);
	b->dev = NULL;
	return rc;
}

static ncclRedOp_t nccl_op(pp_redop op)
{
	return op == PP_OP_MAX ? ncclMax : ncclSum;
}

static int nccl_allreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op, pp_err *e)
{
	int rc = comm_check(c, "allreduce", t, (int)op, e);
	if (rc || !count)
		return rc;
	bounce b;
	void *d;
	if ((rc = bounce_in(c, "allreduce", buf, count * comm_dtype_size(t), 1, &b, &d, e)))
		return rc;
	ncclResult_t r =
		ncclAllReduce(d, d, count, nccl_type(t), nccl_op(op), impl(c)->nc, impl(c)->stream);
	rc = settle(c, "allreduce", NULL, 0, r, e);
	return bounce_out(c, "allreduce", &b, 1, rc, e);
}

static int nccl_reduce_scatter(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			       pp_redop op, pp_err *e)
{
	int rc = comm_check(c, "reduce_scatter", t, (int)op, e);
	if (rc || !count)
		return rc;
	size_t esz = comm_dtype_size(t);
	bounce bs, br;
	void *ds, *dr;
	if ((rc = bounce_in(c, "reduce_scatter", send, (size_t)c->size * count * esz, 1, &bs, &ds,
			    e)))
		return rc;
	if ((rc = bounce_in(c, "reduce_scatter", recv, count * esz, 0, &br, &dr, e)))
		return bounce_out(c, "reduce_scatter", &bs, 0, rc, e);
	ncclResult_t r = ncclReduceScatter(ds, dr, count, nccl_type(t), nccl_op(op), impl(c)->nc,
					   impl(c)->stream);
	rc = settle(c, "reduce_scatter", NULL, 0, r, e);
	rc = bounce_out(c, "reduce_scatter", &br, 1, rc, e);
	return bounce_out(c, "reduce_scatter", &bs, 0, rc, e);
}

static int nccl_all_gather(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			   pp_err *e)
{
	int rc = comm_check(c, "all_gather", t, -1, e);
	if (rc || !count)
		return rc;
	size_t esz = comm_dtype_size(t);
	bounce bs, br;
	void *ds, *dr;
	/* in place (send == recv + rank * count) is NCCL's own convention; a
	 * host buffer in place is copied in whole, so it stays in place */
	int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count * esz;
	if ((rc = bounce_in(c, "all_gather", recv, (size_t)c->size * count * esz, in_place, &br,
			    &dr, e)))
		return rc;
	memset(&bs, 0, sizeof bs);
	if (in_place)
		ds = (char *)dr + (size_t)c->rank * count * esz;
	else if ((rc = bounce_in(c, "all_gather", send, count * esz, 1, &bs, &ds, e)))
		return bounce_out(c, "all_gather", &br, 0, rc, e);
	ncclResult_t r = ncclAllGather(ds, dr, count, nccl_type(t), impl(c)->nc, impl(c)->stream);
	rc = settle(c, "all_gather", NULL, 0, r, e);
	rc = bounce_out(c, "all_gather", &bs, 0, rc, e);
	return bounce_out(c, "all_gather", &br, 1, rc, e);
}

static int nccl_broadcast(pp_comm *c, void *buf, size_t count, pp_dtype t, int root, pp_err *e)
{
	int rc = comm_check(c, "broadcast", t, -1, e);
	if (!rc)
		rc = comm_check_rank(c, "broadcast", "root", root, 0, e);
	if (rc || !count)
		return rc;
	bounce b;
	void *d;
	if ((rc = bounce_in(c, "broadcast", buf, count * comm_dtype_size(t), c->rank == root, &b, &d,
			    e)))
		return rc;
	ncclResult_t r =
		ncclBroadcast(d, d, count, nccl_type(t), root, impl(c)->nc, impl(c)->stream);
	rc = settle(c, "broadcast", c->rank == root ? NULL : &root, c->rank == root ? 0 : 1, r, e);
	return bounce_out(c, "broadcast", &b, c->rank != root, rc, e);
}

/* One send and one receive in a group (either peer -1). NCCL has no tags
 * and allows empty messages: a zero count still pairs with its peer's. */
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
	bounce bs, br;
	void *ds, *dr;
	if ((rc = bounce_in(c, op, dst >= 0 ? sbuf : NULL, scount * esz, 1, &bs, &ds, e)))
		return rc;
	if ((rc = bounce_in(c, op, src >= 0 ? rbuf : NULL, rcount * esz, 0, &br, &dr, e)))
		return bounce_out(c, op, &bs, 0, rc, e);
	ncclResult_t r = ncclGroupStart();
	if (r == ncclSuccess && dst >= 0)
		r = ncclSend(ds, scount, nccl_type(t), dst, s->nc, s->stream);
	if (r == ncclSuccess && src >= 0)
		r = ncclRecv(dr, rcount, nccl_type(t), src, s->nc, s->stream);
	ncclResult_t end = ncclGroupEnd();
	rc = settle(c, op, peers, np, r != ncclSuccess ? r : end, e);
	rc = bounce_out(c, op, &br, 1, rc, e);
	return bounce_out(c, op, &bs, 0, rc, e);
}

static int nccl_send(pp_comm *c, const void *buf, size_t count, pp_dtype t, int peer, int tag,
		     pp_err *e)
{
	if (peer < 0)
		return comm_check_rank(c, "send", "destination", peer, 0, e);
	return exchange(c, "send", buf, count, peer, NULL, 0, -1, t, tag, e);
}

static int nccl_recv(pp_comm *c, void *buf, size_t count, pp_dtype t, int peer, int tag,
		     pp_err *e)
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
	ncclResult_t r =
		ncclAllReduce(s->scratch, s->scratch, 1, ncclInt32, ncclSum, s->nc, s->stream);
	return settle(c, "barrier", NULL, 0, r, e);
}

static ncclConfig_t config_for(const char *name)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	cfg.commName = name;
	return cfg;
}

/* A communicator around nc (may be NULL until init completes): its stream
 * and scratch buffer. */
static pp_comm *wrap(pp_proc *p, const char *name, int rank, int size, double timeout,
		     pp_err *e)
{
	pp_comm *c = comm_new(&pp_comm_nccl, p, name, rank, size, timeout);
	nccl_impl *s = c ? calloc(1, sizeof *s) : NULL;
	if (!s) {
		comm_delete(c);
		pp_errorf(e, PP_ERUNTIME, "out of memory");
		return NULL;
	}
	c->impl = s;
	/* a blocking stream: it waits for the kernels the ops enqueued on the
	 * legacy default stream, so a collective never reads a buffer that a
	 * kernel is still filling, and the default stream waits for it in turn */
	cudaError_t q = cudaStreamCreateWithFlags(&s->stream, cudaStreamDefault);
	if (q == cudaSuccess)
		q = cudaMalloc((void **)&s->scratch, sizeof(int) * 2 * (size_t)size);
	if (q != cudaSuccess) {
		pp_errorf(e, PP_ERUNTIME, "communicator '%s' (rank %d): CUDA: %s", name, rank,
			  cudaGetErrorString(q));
		if (s->stream)
			cudaStreamDestroy(s->stream);
		free(s);
		comm_delete(c);
		return NULL;
	}
	track(c, 1);
	return c;
}

static void release(pp_comm *c)
{
	nccl_impl *s = impl(c);
	track(c, 0);
	if (s->scratch)
		cudaFree(s->scratch);
	if (s->stream)
		cudaStreamDestroy(s->stream);
	free(s);
	comm_delete(c);
}

/* Waits for a communicator being created (init or split) to be ready. */
static int settle_new(pp_comm *c, const char *op, ncclComm_t parent, pp_err *e)
{
	nccl_impl *s = impl(c);
	comm_watch w;
	comm_watch_start(&w, c, op, NULL, 0);
	for (;;) {
		ncclResult_t a = ncclSuccess, b = ncclSuccess;
		if (s->nc && ncclCommGetAsyncError(s->nc, &a) != ncclSuccess)
			a = ncclInternalError;
		if (parent && ncclCommGetAsyncError(parent, &b) != ncclSuccess)
			b = ncclInternalError;
		if (a != ncclSuccess && a != ncclInProgress)
			return nccl_error(c, op, NULL, 0, a, e);
		if (b != ncclSuccess && b != ncclInProgress)
			return nccl_error(c, op, NULL, 0, b, e);
		if (a == ncclSuccess && b == ncclSuccess)
			return 0;
		int rc = comm_watch_poll(&w, e);
		if (rc) {
			abort_comm(c);
			return rc;
		}
	}
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
			snprintf(why, sizeof why, "it needs GPU %d but sees %d%s%s%s", all[first].device,
				 all[first].ndevices, self && vis ? " (CUDA_VISIBLE_DEVICES=" : "",
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
	ncclConfig_t cfg = config_for("world");
	ncclResult_t r = ncclCommInitRankConfig(&impl(c)->nc, p->size, id, p->rank, &cfg);
	int rc = r != ncclSuccess && r != ncclInProgress ? nccl_error(c, "init", NULL, 0, r, e)
							 : settle_new(c, "init", NULL, e);
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
		return pp_errorf(e, PP_EUSAGE, "split of '%s' into '%s': color %d is negative", c->name,
				 name, color);
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
	ncclConfig_t cfg = config_for(name);
	ncclComm_t nc = NULL;
	ncclResult_t r = ncclCommSplit(s->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		rc = nccl_error(c, "split", NULL, 0, r, e);
	} else if (g) {
		impl(g)->nc = nc;
		rc = settle_new(g, "split", s->nc, e);
	} else {
		/* no group for this rank: wait for the parent to finish the split */
		rc = settle(c, "split", NULL, 0, ncclInProgress, e);
	}
	if (rc) {
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

const pp_comm_ops pp_comm_nccl = {
	.name = "nccl",
	.init = nccl_init,
	.split = nccl_split,
	.allreduce = nccl_allreduce,
	.reduce_scatter = nccl_reduce_scatter,
	.all_gather = nccl_all_gather,
	.broadcast = nccl_broadcast,
	.send = nccl_send,
	.recv = nccl_recv,
	.sendrecv = nccl_sendrecv,
	.barrier = nccl_barrier,
	.free = nccl_free,
	.abort = nccl_abort,
};

#else
/* Without PP_CUDA this file is empty (the Makefile compiles every
 * C file in libcommon); ISO C wants at least one declaration. */
typedef int comm_nccl_unused;
#endif
