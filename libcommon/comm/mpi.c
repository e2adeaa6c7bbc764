/* The comm interface over MPI, on host memory.
 *
 * Every operation is the non-blocking MPI call (MPI_Iallreduce, MPI_Issend,
 * ...) held in a request; a blocking call posts it and waits in comm_wait,
 * which polls MPI_Testall against the communicator's deadline, so a dead
 * or stuck peer turns into an error that names it instead of a hang. Error
 * handlers are MPI_ERRORS_RETURN: a peer that drops its connection is
 * reported the same way. After the first failure MPI is never finalized
 * (MPI_Finalize would wait for the dead peer): the caller reports and calls
 * comm_abort.
 *
 * MPI_Init works under `srun --mpi=pmix`, under `mpirun`, and with no
 * launcher (singleton); boot_init must come first (it checks the launcher
 * and learns the peers' pids and hosts). */
#include "comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The Makefile adds `mpicc --showme:compile`; without it this file builds a
 * table whose init explains what is missing. */
#if defined(__has_include)
#if __has_include(<mpi.h>)
#define COMM_HAVE_MPI 1
#endif
#endif

#ifdef COMM_HAVE_MPI
#include <mpi.h>

/* MPI counts are int: longer buffers go in pieces of this many elements */
#define CHUNK ((size_t)1 << 30)

typedef struct {
	MPI_Comm comm;
	int is_world;
} mpi_impl;

static int mpi_started; /* this module called MPI_Init */
static int mpi_broken;  /* an operation failed or timed out: never finalize */

static MPI_Datatype mpi_type(pp_dtype t)
{
	switch (t) {
	case PP_DT_F32:
		return MPI_FLOAT;
	case PP_DT_F64:
		return MPI_DOUBLE;
	case PP_DT_I32:
		return MPI_INT32_T;
	case PP_DT_I64:
		return MPI_INT64_T;
	case PP_DT_U64:
		return MPI_UINT64_T;
	case PP_DT_BYTE:
		return MPI_BYTE;
	case PP_DT_BF16:
		return MPI_UINT16_T; /* moved, never reduced: see mpi_check */
	}
	return MPI_DATATYPE_NULL;
}

/* comm_check, and MPI has no bfloat16 arithmetic: bf16 tensors move
 * (send, recv, all_gather) but reduce on nccl only. */
static int mpi_check(const pp_comm *c, const char *op, pp_dtype t, int redop, pp_err *e)
{
	int rc = comm_check(c, op, t, redop, e);
	if (!rc && redop != -1 && t == PP_DT_BF16)
		rc = pp_errorf(e, PP_EUSAGE,
			       "%s on '%s': MPI cannot reduce bfloat16 (the nccl backend can)", op,
			       c->name);
	return rc;
}

static MPI_Comm handle(const pp_comm *c) { return ((const mpi_impl *)c->impl)->comm; }

static int mpi_error(const pp_comm *c, const char *op, const int *peers, int n, int rc, pp_err *e)
{
	char why[MPI_MAX_ERROR_STRING + 32];
	int len = 0;
	if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS)
		len = snprintf(why, sizeof why, "MPI error %d", rc);
	why[len] = 0;
	mpi_broken = 1;
	return comm_fail_error(c, op, peers, n, why, e);
}

/* An operation in flight: n MPI requests, completed together. */
typedef struct {
	pp_comm_req base;
	pp_dtype t;
	int recv_at, expect; /* a receive (index) that must bring expect elements, or -1 */
	int src;
	int *counts; /* MPI_Ireduce_scatter's and MPI_Ialltoallv's counts (and
		      * displacements): MPI reads them until completion */
	int n;
	MPI_Request r[]; /* (n) */
} mpi_req;

static mpi_req *req_new(pp_comm *c, const char *op, const int *peers, int npeers, int n, pp_err *e)
{
	mpi_req *q = calloc(1, sizeof *q + sizeof(MPI_Request) * (size_t)(n > 0 ? n : 1));
	if (!q) {
		pp_errorf(e, PP_ERUNTIME, "%s on '%s': out of memory", op, c->name);
		return NULL;
	}
	comm_req_init(&q->base, c, op, peers, npeers);
	q->recv_at = -1;
	q->n = n;
	for (int i = 0; i < n; i++)
		q->r[i] = MPI_REQUEST_NULL;
	return q;
}

static void mpi_release(pp_comm_req *base, int failed)
{
	mpi_req *q = (mpi_req *)base;
	if (failed)
		mpi_broken = 1; /* requests may stay pending: MPI is done for */
	free(q->counts);
	free(q);
}

/* *out = q, posted with status rc (what the last MPI call returned) */
static int posted(mpi_req *q, int rc, pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	if (rc != MPI_SUCCESS) {
		rc = mpi_error(q->base.c, q->base.op, q->base.npeers ? q->base.peers : NULL,
			       q->base.npeers, rc, e);
		mpi_release(&q->base, 1);
		return rc;
	}
	*out = &q->base;
	return 0;
}

static int mpi_progress(pp_comm_req *base, int *done, pp_err *e)
{
	mpi_req *q = (mpi_req *)base;
	const pp_comm *c = base->c;
	const int *peers = base->npeers ? base->peers : NULL;
	MPI_Status st[2];
	int rc = q->n <= 2 ? MPI_Testall(q->n, q->r, done, st)
			   : MPI_Testall(q->n, q->r, done, MPI_STATUSES_IGNORE);
	if (rc != MPI_SUCCESS)
		return mpi_error(c, base->op, peers, base->npeers, rc, e);
	int got = q->expect;
	if (*done && q->recv_at >= 0 &&
	    MPI_Get_count(&st[q->recv_at], mpi_type(q->t), &got) == MPI_SUCCESS &&
	    got != q->expect) {
		char why[128];
		snprintf(why, sizeof why, "received %d elements from rank %d, expected %d", got,
			 q->src, q->expect);
		mpi_broken = 1;
		return comm_fail_error(c, base->op, &q->src, 1, why, e);
	}
	return 0;
}

/* The blocking calls: rc from posting *r, then the wait */
static int finish(int rc, pp_comm_req **r, pp_err *e) { return rc || !*r ? rc : comm_wait(*r, e); }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static MPI_Op mpi_op(pp_redop op) { return op == PP_OP_MAX ? MPI_MAX : MPI_SUM; }

static int mpi_iallreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op,
			  pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	int rc = mpi_check(c, "allreduce", t, (int)op, e);
	if (rc)
		return rc;
	size_t esz = comm_dtype_size(t), pieces = (count + CHUNK - 1) / CHUNK;
	mpi_req *q = req_new(c, "allreduce", NULL, 0, (int)pieces, e);
	if (!q)
		return PP_ERUNTIME;
	rc = MPI_SUCCESS;
	for (size_t k = 0; k < pieces && rc == MPI_SUCCESS; k++) {
		size_t off = k * CHUNK;
		rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * esz,
				    (int)min_size(CHUNK, count - off), mpi_type(t), mpi_op(op),
				    handle(c), &q->r[k]);
	}
	return posted(q, rc, out, e);
}

static int mpi_allreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op, pp_err *e)
{
	pp_comm_req *r;
	return finish(mpi_iallreduce(c, buf, count, t, op, &r, e), &r, e);
}

static int too_long(const pp_comm *c, const char *op, size_t count, pp_err *e)
{
	if (count <= INT_MAX)
		return 0;
	return pp_errorf(e, PP_EUSAGE, "%s on '%s': %zu elements per rank; at most %d in one call",
			 op, c->name, count, INT_MAX);
}

/* A request for one MPI request: the caller posts into *r, then posted() */
static int one(pp_comm *c, const char *op, const int *peers, int npeers, pp_comm_req **out,
	       MPI_Request **r, pp_err *e)
{
	mpi_req *q = req_new(c, op, peers, npeers, 1, e);
	*out = q ? &q->base : NULL;
	*r = q ? &q->r[0] : NULL;
	return q ? 0 : PP_ERUNTIME;
}

static int mpi_reduce_scatter(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			      pp_redop op, pp_err *e)
{
	int rc = mpi_check(c, "reduce_scatter", t, (int)op, e);
	if (rc || (rc = too_long(c, "reduce_scatter", count, e)) || !count)
		return rc;
	pp_comm_req *q;
	MPI_Request *r;
	if ((rc = one(c, "reduce_scatter", NULL, 0, &q, &r, e)))
		return rc;
	rc = MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_type(t), mpi_op(op), handle(c),
				       r);
	return finish(posted((mpi_req *)q, rc, &q, e), &q, e);
}

static int mpi_ireduce_scatter(pp_comm *c, const void *send, void *recv, const size_t *counts,
			       pp_dtype t, pp_redop op, pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	int rc = mpi_check(c, "reduce_scatter", t, (int)op, e), any = 0;
	for (int i = 0; !rc && i < c->size; i++) {
		rc = too_long(c, "reduce_scatter", counts[i], e);
		any |= counts[i] > 0;
	}
	if (rc)
		return rc;
	mpi_req *q = req_new(c, "reduce_scatter", NULL, 0, any, e);
	if (!q)
		return PP_ERUNTIME;
	if (!any)
		return posted(q, MPI_SUCCESS, out, e);
	if (!(q->counts = malloc(sizeof(int) * (size_t)c->size))) {
		mpi_release(&q->base, 0);
		return pp_errorf(e, PP_ERUNTIME, "reduce_scatter on '%s': out of memory", c->name);
	}
	for (int i = 0; i < c->size; i++)
		q->counts[i] = (int)counts[i];
	rc = MPI_Ireduce_scatter(send, recv, q->counts, mpi_type(t), mpi_op(op), handle(c),
				 &q->r[0]);
	return posted(q, rc, out, e);
}

static int mpi_iall_gatherv(pp_comm *c, const void *send, void *recv, const size_t *counts,
			    pp_dtype t, pp_comm_req **out, pp_err *e)
{
	*out = NULL;
	int rc = mpi_check(c, "all_gatherv", t, -1, e), any = 0;
	size_t at = 0, mine = 0;
	for (int i = 0; !rc && i < c->size; i++) {
		rc = too_long(c, "all_gatherv", at + counts[i], e);
		mine = i == c->rank ? at : mine;
		at += counts[i];
		any |= counts[i] > 0;
	}
	if (rc)
		return rc;
	mpi_req *q = req_new(c, "all_gatherv", NULL, 0, any, e);
	if (!q)
		return PP_ERUNTIME;
	if (!any)
		return posted(q, MPI_SUCCESS, out, e);
	if (!(q->counts = malloc(sizeof(int) * 2 * (size_t)c->size))) {
		mpi_release(&q->base, 0);
		return pp_errorf(e, PP_ERUNTIME, "all_gatherv on '%s': out of memory", c->name);
	}
	int *displs = q->counts + c->size;
	for (int i = 0, d = 0; i < c->size; d += (int)counts[i], i++) {
		q->counts[i] = (int)counts[i];
		displs[i] = d;
	}
	const int in_place = send == (const char *)recv + mine * comm_dtype_size(t);
	rc = MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, (int)counts[c->rank], mpi_type(t),
			     recv, q->counts, displs, mpi_type(t), handle(c), &q->r[0]);
	return posted(q, rc, out, e);
}

static int mpi_all_gather(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			  pp_err *e)
{
	int rc = mpi_check(c, "all_gather", t, -1, e);
	if (rc || (rc = too_long(c, "all_gather", count, e)) || !count)
		return rc;
	size_t esz = comm_dtype_size(t);
	int in_place = send == (const char *)recv + (size_t)c->rank * count * esz;
	pp_comm_req *q;
	MPI_Request *r;
	if ((rc = one(c, "all_gather", NULL, 0, &q, &r, e)))
		return rc;
	rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv,
			    (int)count, mpi_type(t), handle(c), r);
	return finish(posted((mpi_req *)q, rc, &q, e), &q, e);
}

static int mpi_alltoallv(pp_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
			 void *recv, const size_t *rcounts, const size_t *rdispls, pp_dtype t,
			 pp_err *e)
{
	int rc = mpi_check(c, "alltoallv", t, -1, e);
	for (int i = 0; !rc && i < c->size; i++)
		rc = too_long(c, "alltoallv",
			      scounts[i] + sdispls[i] > rcounts[i] + rdispls[i]
				      ? scounts[i] + sdispls[i]
				      : rcounts[i] + rdispls[i],
			      e);
	if (rc)
		return rc;
	mpi_req *q = req_new(c, "alltoallv", NULL, 0, 1, e);
	if (!q)
		return PP_ERUNTIME;
	if (!(q->counts = malloc(sizeof(int) * 4 * (size_t)c->size))) {
		mpi_release(&q->base, 0);
		return pp_errorf(e, PP_ERUNTIME, "alltoallv on '%s': out of memory", c->name);
	}
	int *sc = q->counts, *sd = sc + c->size, *rcn = sd + c->size, *rd = rcn + c->size;
	for (int i = 0; i < c->size; i++) {
		sc[i] = (int)scounts[i];
		sd[i] = (int)sdispls[i];
		rcn[i] = (int)rcounts[i];
		rd[i] = (int)rdispls[i];
	}
	pp_comm_req *base;
	rc = MPI_Ialltoallv(send, sc, sd, mpi_type(t), recv, rcn, rd, mpi_type(t), handle(c),
			    &q->r[0]);
	return finish(posted(q, rc, &base, e), &base, e);
}

static int mpi_broadcast(pp_comm *c, void *buf, size_t count, pp_dtype t, int root, pp_err *e)
{
	int rc = mpi_check(c, "broadcast", t, -1, e);
	if (!rc)
		rc = comm_check_rank(c, "broadcast", "root", root, 0, e);
	size_t esz = comm_dtype_size(t);
	for (size_t off = 0; !rc && off < count; off += CHUNK) {
		pp_comm_req *q;
		MPI_Request *r;
		int n = (int)min_size(CHUNK, count - off);
		/* the root is the one every other rank waits for */
		if ((rc = one(c, "broadcast", c->rank == root ? NULL : &root,
			      c->rank == root ? 0 : 1, &q, &r, e)))
			break;
		rc = MPI_Ibcast((char *)buf + off * esz, n, mpi_type(t), root, handle(c), r);
		rc = finish(posted((mpi_req *)q, rc, &q, e), &q, e);
	}
	return rc;
}

/* One send to dst and one receive from src (either -1), in pieces; the
 * receive must bring exactly rcount elements. */
static int exchange(pp_comm *c, const char *op, const void *sbuf, size_t scount, int dst,
		    void *rbuf, size_t rcount, int src, pp_dtype t, int tag, pp_err *e)
{
	int rc = comm_check_exchange(c, op, t, dst, src, tag, e);
	if (rc)
		return rc;
	if (dst < 0)
		scount = 0;
	if (src < 0)
		rcount = 0;
	size_t esz = comm_dtype_size(t);
	int peers[2], np = 0;
	if (dst >= 0)
		peers[np++] = dst;
	if (src >= 0 && src != dst)
		peers[np++] = src;
	/* an empty message still travels: it is how the two sides agree */
	for (size_t off = 0; off == 0 || off < scount || off < rcount; off += CHUNK) {
		int sn = off <= scount ? (int)min_size(CHUNK, scount - off) : 0;
		int rn = off <= rcount ? (int)min_size(CHUNK, rcount - off) : 0;
		int post_s = dst >= 0 && (off == 0 || off < scount);
		int post_r = src >= 0 && (off == 0 || off < rcount);
		mpi_req *q = req_new(c, op, peers, np, 2, e);
		if (!q)
			return PP_ERUNTIME;
		q->t = t, q->src = src, q->expect = rn;
		q->recv_at = post_r ? 1 : -1;
		rc = MPI_SUCCESS;
		if (post_r)
			rc = MPI_Irecv((char *)rbuf + off * esz, rn, mpi_type(t), src, tag,
				       handle(c), &q->r[1]);
		if (post_s && rc == MPI_SUCCESS)
			rc = MPI_Issend((const char *)sbuf + off * esz, sn, mpi_type(t), dst, tag,
					handle(c), &q->r[0]);
		pp_comm_req *r;
		if ((rc = finish(posted(q, rc, &r, e), &r, e)))
			return rc;
	}
	return 0;
}

static int mpi_send(pp_comm *c, const void *buf, size_t count, pp_dtype t, int peer, int tag,
		    pp_err *e)
{
	if (peer < 0)
		return comm_check_rank(c, "send", "destination", peer, 0, e);
	return exchange(c, "send", buf, count, peer, NULL, 0, -1, t, tag, e);
}

static int mpi_recv(pp_comm *c, void *buf, size_t count, pp_dtype t, int peer, int tag, pp_err *e)
{
	if (peer < 0)
		return comm_check_rank(c, "recv", "source", peer, 0, e);
	return exchange(c, "recv", NULL, 0, -1, buf, count, peer, t, tag, e);
}

static int mpi_sendrecv(pp_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
			size_t rcount, int src, pp_dtype t, int tag, pp_err *e)
{
	return exchange(c, "sendrecv", sbuf, scount, dst, rbuf, rcount, src, t, tag, e);
}

static int mpi_barrier(pp_comm *c, pp_err *e)
{
	pp_comm_req *q;
	MPI_Request *r;
	int rc = one(c, "barrier", NULL, 0, &q, &r, e);
	if (rc)
		return rc;
	rc = MPI_Ibarrier(handle(c), r);
	return finish(posted((mpi_req *)q, rc, &q, e), &q, e);
}

static pp_comm *wrap(pp_proc *p, const char *name, int rank, int size, double timeout, MPI_Comm h,
		     int is_world);

static int mpi_split(pp_comm *c, int color, int key, const char *name, pp_comm **out, pp_err *e)
{
	*out = NULL;
	if (color < 0 && color != PP_COMM_NOCOLOR)
		return pp_errorf(e, PP_EUSAGE, "split of '%s' into '%s': color %d is negative",
				 c->name, name, color);
	int mine[2] = {color, key}, rank, size, rc;
	int *ckeys = malloc(sizeof(int) * 2 * (size_t)c->size);
	int *world = malloc(sizeof(int) * (size_t)c->size);
	if (!ckeys || !world) {
		free(ckeys), free(world);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	/* a bounded collective first: MPI_Comm_split itself cannot time out */
	rc = mpi_all_gather(c, mine, ckeys, 2, PP_DT_I32, e);
	if (rc) {
		free(ckeys), free(world);
		return pp_err_prefix(e, "split into '%s'", name);
	}
	comm_split_plan(c, ckeys, &rank, &size, world);
	free(ckeys);
	MPI_Comm h = MPI_COMM_NULL;
	rc = MPI_Comm_split(handle(c), color < 0 ? MPI_UNDEFINED : color, key, &h);
	if (rc != MPI_SUCCESS) {
		free(world);
		return mpi_error(c, "split", NULL, 0, rc, e);
	}
	if (color < 0) {
		free(world);
		return 0;
	}
	int mrank = -1, msize = -1;
	MPI_Comm_rank(h, &mrank);
	MPI_Comm_size(h, &msize);
	if (mrank != rank || msize != size) {
		free(world);
		MPI_Comm_free(&h);
		return pp_errorf(
			e, PP_ERUNTIME,
			"split of '%s' into '%s': MPI made rank %d of %d, expected %d of %d",
			c->name, name, mrank, msize, rank, size);
	}
	MPI_Comm_set_errhandler(h, MPI_ERRORS_RETURN);
	*out = wrap(c->proc, name, rank, size, c->timeout, h, 0);
	if (*out)
		memcpy((*out)->world, world, sizeof(int) * (size_t)size);
	free(world);
	if (!*out) {
		MPI_Comm_free(&h);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	return 0;
}

static pp_comm *wrap(pp_proc *p, const char *name, int rank, int size, double timeout, MPI_Comm h,
		     int is_world)
{
	pp_comm *c = comm_new(&pp_comm_mpi, p, name, rank, size, timeout);
	mpi_impl *m = c ? malloc(sizeof *m) : NULL;
	if (!m) {
		comm_delete(c);
		return NULL;
	}
	m->comm = h, m->is_world = is_world;
	c->impl = m;
	return c;
}

static int mpi_init(pp_comm **out, pp_proc *p, double timeout, pp_err *e)
{
	*out = NULL;
	int inited = 0;
	MPI_Initialized(&inited);
	if (!inited) {
		int provided;
		if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
			return pp_errorf(e, PP_ERUNTIME, "rank %d: MPI_Init failed", p->rank);
		mpi_started = 1;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	int rank = -1, size = -1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (rank != p->rank || size != p->size)
		return pp_errorf(e, PP_ERUNTIME,
				 "MPI says rank %d of %d but PMIx says rank %d of %d: MPI was not "
				 "started by the same launcher (Debian's OpenMPI needs PMIx: "
				 "`srun --mpi=pmix` or `mpirun`)",
				 rank, size, p->rank, p->size);
	pp_comm *c = wrap(p, "world", rank, size, timeout, MPI_COMM_NULL, 1);
	if (!c)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int r = 0; r < size; r++)
		c->world[r] = r;
	/* our own world, so that no one else's messages can match ours */
	mpi_impl *m = c->impl;
	pp_comm_req *q;
	MPI_Request *r;
	int rc = one(c, "init", NULL, 0, &q, &r, e);
	if (!rc) {
		rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, r);
		rc = finish(posted((mpi_req *)q, rc, &q, e), &q, e);
	}
	if (rc) {
		free(m), comm_delete(c);
		return rc;
	}
	MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
	*out = c;
	return 0;
}

static void mpi_free(pp_comm *c)
{
	mpi_impl *m = c->impl;
	int is_world = m->is_world;
	if (!mpi_broken && m->comm != MPI_COMM_NULL)
		MPI_Comm_free(&m->comm);
	free(m);
	comm_delete(c);
	if (is_world && mpi_started && !mpi_broken) {
		MPI_Finalize();
		mpi_started = 0;
	}
}

static _Noreturn void mpi_abort(pp_comm *c, int code, const char *why)
{
	(void)why; /* MPI_Abort takes no message: the caller has logged it */
	fflush(NULL);
	if (c->proc && c->proc->size > 1) {
		boot_exit_after(5, code); /* MPI_Abort waits for the launcher */
		MPI_Abort(MPI_COMM_WORLD, code);
	}
	_exit(code);
}

const pp_comm_ops pp_comm_mpi = {
	.name = "mpi",
	.init = mpi_init,
	.split = mpi_split,
	.allreduce = mpi_allreduce,
	.reduce_scatter = mpi_reduce_scatter,
	.iallreduce = mpi_iallreduce,
	.ireduce_scatter = mpi_ireduce_scatter,
	.iall_gatherv = mpi_iall_gatherv,
	.progress = mpi_progress,
	.release = mpi_release,
	.all_gather = mpi_all_gather,
	.alltoallv = mpi_alltoallv,
	.broadcast = mpi_broadcast,
	.send = mpi_send,
	.recv = mpi_recv,
	.sendrecv = mpi_sendrecv,
	.barrier = mpi_barrier,
	.free = mpi_free,
	.abort = mpi_abort,
};

#else /* no MPI headers at build time */

static int mpi_init(pp_comm **out, pp_proc *p, double timeout, pp_err *e)
{
	(void)p, (void)timeout;
	*out = NULL;
	return pp_errorf(e, PP_ERUNTIME,
			 "pp was built without MPI: install libopenmpi-dev and rebuild "
			 "(`mpicc --showme:compile` / `--showme:link`)");
}

static _Noreturn void mpi_abort(pp_comm *c, int code, const char *why)
{
	boot_abort(c ? c->proc : NULL, code, why);
}

/* init always fails, so no communicator ever reaches the other entries */
const pp_comm_ops pp_comm_mpi = {.name = "mpi", .init = mpi_init, .abort = mpi_abort};

#endif
