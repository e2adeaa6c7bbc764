/* The comm interface over MPI, on host memory.
 *
 * Every operation is the non-blocking MPI call (MPI_Iallreduce, MPI_Issend,
 * ...) polled with MPI_Test against the communicator's deadline, so a dead
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
	case PP_DT_F32: return MPI_FLOAT;
	case PP_DT_F64: return MPI_DOUBLE;
	case PP_DT_I32: return MPI_INT32_T;
	case PP_DT_I64: return MPI_INT64_T;
	case PP_DT_U64: return MPI_UINT64_T;
	case PP_DT_BYTE: return MPI_BYTE;
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Comm handle(const pp_comm *c)
{
	return ((const mpi_impl *)c->impl)->comm;
}

static int mpi_error(const pp_comm *c, const char *op, const int *peers, int n, int rc,
		     pp_err *e)
{
	char why[MPI_MAX_ERROR_STRING + 32];
	int len = 0;
	if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS)
		len = snprintf(why, sizeof why, "MPI error %d", rc);
	why[len] = 0;
	mpi_broken = 1;
	return comm_fail_error(c, op, peers, n, why, e);
}

/* Waits for reqs (n) to complete, or for the error, the timeout or the dead
 * peer that ends the call (comm_watch). rc is what posting them returned. peers (npeers ranks of c, or
 * NULL for all of c) are the suspects named on failure. st (n) may be NULL. */
static int settle(const pp_comm *c, const char *op, const int *peers, int npeers, int rc, int n,
		  MPI_Request *reqs, MPI_Status *st, pp_err *e)
{
	if (rc != MPI_SUCCESS)
		return mpi_error(c, op, peers, npeers, rc, e);
	comm_watch w;
	comm_watch_start(&w, c, op, peers, npeers);
	for (;;) {
		int done = 0;
		rc = MPI_Testall(n, reqs, &done, st ? st : MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS)
			return mpi_error(c, op, peers, npeers, rc, e);
		if (done)
			return 0;
		if ((rc = comm_watch_poll(&w, e))) {
			mpi_broken = 1; /* the requests stay pending: MPI is done for */
			return rc;
		}
	}
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static int mpi_allreduce(pp_comm *c, void *buf, size_t count, pp_dtype t, pp_redop op, pp_err *e)
{
	int rc = comm_check(c, "allreduce", t, (int)op, e);
	size_t esz = comm_dtype_size(t);
	for (size_t off = 0; !rc && off < count; off += CHUNK) {
		MPI_Request r = MPI_REQUEST_NULL;
		int n = (int)min_size(CHUNK, count - off);
		rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * esz, n, mpi_type(t),
				    op == PP_OP_MAX ? MPI_MAX : MPI_SUM, handle(c), &r);
		rc = settle(c, "allreduce", NULL, 0, rc, 1, &r, NULL, e);
	}
	return rc;
}

static int too_long(const pp_comm *c, const char *op, size_t count, pp_err *e)
{
	if (count <= INT_MAX)
		return 0;
	return pp_errorf(e, PP_EUSAGE, "%s on '%s': %zu elements per rank; at most %d in one call",
			 op, c->name, count, INT_MAX);
}

static int mpi_reduce_scatter(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			      pp_redop op, pp_err *e)
{
	int rc = comm_check(c, "reduce_scatter", t, (int)op, e);
	if (rc || (rc = too_long(c, "reduce_scatter", count, e)) || !count)
		return rc;
	MPI_Request r = MPI_REQUEST_NULL;
	rc = MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_type(t),
				       op == PP_OP_MAX ? MPI_MAX : MPI_SUM, handle(c), &r);
	return settle(c, "reduce_scatter", NULL, 0, rc, 1, &r, NULL, e);
}

static int mpi_all_gather(pp_comm *c, const void *send, void *recv, size_t count, pp_dtype t,
			  pp_err *e)
{
	int rc = comm_check(c, "all_gather", t, -1, e);
	if (rc || (rc = too_long(c, "all_gather", count, e)) || !count)
		return rc;
	size_t esz = comm_dtype_size(t);
	int in_place = send == (const char *)recv + (size_t)c->rank * count * esz;
	MPI_Request r = MPI_REQUEST_NULL;
	rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv,
			    (int)count, mpi_type(t), handle(c), &r);
	return settle(c, "all_gather", NULL, 0, rc, 1, &r, NULL, e);
}

static int mpi_broadcast(pp_comm *c, void *buf, size_t count, pp_dtype t, int root, pp_err *e)
{
	int rc = comm_check(c, "broadcast", t, -1, e);
	if (!rc)
		rc = comm_check_rank(c, "broadcast", "root", root, 0, e);
	size_t esz = comm_dtype_size(t);
	for (size_t off = 0; !rc && off < count; off += CHUNK) {
		MPI_Request r = MPI_REQUEST_NULL;
		int n = (int)min_size(CHUNK, count - off);
		rc = MPI_Ibcast((char *)buf + off * esz, n, mpi_type(t), root, handle(c), &r);
		/* the root is the one every other rank waits for */
		rc = settle(c, "broadcast", c->rank == root ? NULL : &root, c->rank == root ? 0 : 1,
			    rc, 1, &r, NULL, e);
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
		MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
		MPI_Status st[2];
		int sn = off <= scount ? (int)min_size(CHUNK, scount - off) : 0;
		int rn = off <= rcount ? (int)min_size(CHUNK, rcount - off) : 0;
		int post_s = dst >= 0 && (off == 0 || off < scount);
		int post_r = src >= 0 && (off == 0 || off < rcount);
		rc = MPI_SUCCESS;
		if (post_r)
			rc = MPI_Irecv((char *)rbuf + off * esz, rn, mpi_type(t), src, tag, handle(c),
				       &r[1]);
		if (post_s && rc == MPI_SUCCESS)
			rc = MPI_Issend((const char *)sbuf + off * esz, sn, mpi_type(t), dst, tag,
					handle(c), &r[0]);
		if ((rc = settle(c, op, peers, np, rc, 2, r, st, e)))
			return rc;
		int got = rn;
		if (post_r && MPI_Get_count(&st[1], mpi_type(t), &got) == MPI_SUCCESS && got != rn) {
			char why[128];
			snprintf(why, sizeof why, "received %d elements from rank %d, expected %d",
				 got, src, rn);
			mpi_broken = 1;
			return comm_fail_error(c, op, &src, 1, why, e);
		}
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
	MPI_Request r = MPI_REQUEST_NULL;
	int rc = MPI_Ibarrier(handle(c), &r);
	return settle(c, "barrier", NULL, 0, rc, 1, &r, NULL, e);
}

static pp_comm *wrap(pp_proc *p, const char *name, int rank, int size, double timeout,
		     MPI_Comm h, int is_world);

static int mpi_split(pp_comm *c, int color, int key, const char *name, pp_comm **out, pp_err *e)
{
	*out = NULL;
	if (color < 0 && color != PP_COMM_NOCOLOR)
		return pp_errorf(e, PP_EUSAGE, "split of '%s' into '%s': color %d is negative", c->name,
				 name, color);
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
		return pp_errorf(e, PP_ERUNTIME,
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

static pp_comm *wrap(pp_proc *p, const char *name, int rank, int size, double timeout,
		     MPI_Comm h, int is_world)
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
	MPI_Request r = MPI_REQUEST_NULL;
	int rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, &r);
	if ((rc = settle(c, "init", NULL, 0, rc, 1, &r, NULL, e))) {
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
	.all_gather = mpi_all_gather,
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
