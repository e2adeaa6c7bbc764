/* The NCCL comm backend's stream ordering, without a GPU: libcommon/
 * comm/nccl.c is built against tests/tools/cudastub (this file implements those
 * headers' CUDA and NCCL calls) and driven through the comm interface the
 * way the trainer drives it: the dp gradient sum in flight (iallreduce,
 * ireduce_scatter) while tp sums and pipeline transfers go out on their
 * own communicators, then the waits.
 *
 * The model: every call that enqueues work (an event record, a stream's
 * wait for an event, an NCCL operation) is a node on its stream, after the
 * stream's previous node; a wait also comes after the record it waits for,
 * and every node comes after what the host has seen complete (a successful
 * cudaEventQuery, a synchronous copy). The GPU may run two nodes at once
 * unless one is reachable from the other. The check: every two NCCL
 * operations on different communicators are ordered, so no two are ever
 * in flight at once, whatever the timing (comm/nccl.c's rule). A model
 * whose two streams carry an operation each with no wait between them shows
 * the check failing. */
#include <stdint.h>
#include <string.h>

#include "../../libcommon/comm/boot.h"
#include "../../libcommon/comm/comm.h"
#include "../tools/cudastub/nccl.h"
#include "../tools/harness.h"

/* ---- the model ----------------------------------------------------------------------- */

enum { N_RECORD, N_WAIT, N_OP, N_HOST };
enum { MAXN = 4096, MAXPRED = 3, MAXMEM = 256 };

typedef struct {
	int kind, npred, pred[MAXPRED];
	const struct stub_comm *comm; /* N_OP */
	char what[128];
} node;

struct stub_stream {
	int last; /* its last node, -1 before the first */
};
struct stub_event {
	int rec; /* the node of its last record, -1 before the first */
};
struct stub_comm {
	char name[64];
	int rank, size;
};

static node nodes[MAXN];
static int nn;
static int host = -1; /* the last node the host saw complete (an N_HOST node) */
static struct stub_stream legacy = {-1};
static int group_depth;
static void *device_mem[MAXMEM];

static struct stub_stream *stream_of(cudaStream_t s)
{
	return s == cudaStreamLegacy || !s ? &legacy : s;
}

static int add_node(struct stub_stream *s, int kind, const char *what, const struct stub_comm *comm,
		    int after)
{
	if (nn == MAXN) {
		fprintf(stderr, "test_comm_order: model full\n");
		exit(1);
	}
	node *n = &nodes[nn];
	memset(n, 0, sizeof *n);
	n->kind = kind;
	n->comm = comm;
	snprintf(n->what, sizeof n->what, "%s%s%s", what, comm ? " on " : "",
		 comm ? comm->name : "");
	const int pred[MAXPRED] = {s ? s->last : -1, host, after};
	for (int i = 0; i < MAXPRED; i++)
		if (pred[i] >= 0)
			n->pred[n->npred++] = pred[i];
	if (s)
		s->last = nn;
	return nn++;
}

/* whether node b comes after node a (a reachable from b through preds) */
static int after(int a, int b)
{
	static unsigned char seen[MAXN];
	static int stack[MAXN];
	memset(seen, 0, sizeof seen);
	int top = 0;
	stack[top++] = b;
	while (top) {
		int x = stack[--top];
		for (int i = 0; i < nodes[x].npred; i++) {
			int p = nodes[x].pred[i];
			if (p == a)
				return 1;
			if (!seen[p]) {
				seen[p] = 1;
				stack[top++] = p;
			}
		}
	}
	return 0;
}

/* Pairs of operations on different communicators among nodes [lo, hi)
 * that may run at once; the first such pair into why. */
static int unordered(int lo, int hi, int *ops, char *why, size_t n)
{
	int bad = 0;
	*ops = 0;
	for (int i = lo; i < hi; i++) {
		if (nodes[i].kind != N_OP)
			continue;
		++*ops;
		for (int j = i + 1; j < hi; j++)
			if (nodes[j].kind == N_OP && nodes[j].comm != nodes[i].comm &&
			    !after(i, j) && !after(j, i) && !bad++)
				snprintf(why, n,
					 "'%s' (node %d) and '%s' (node %d) may run at once",
					 nodes[i].what, i, nodes[j].what, j);
	}
	return bad;
}

/* ---- the CUDA runtime's calls ------------------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "stub error";
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	for (int i = 0; i < MAXMEM; i++)
		if (!device_mem[i]) {
			*p = device_mem[i] = calloc(1, bytes ? bytes : 1);
			return *p ? cudaSuccess : cudaErrorMemoryAllocation;
		}
	return cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
	for (int i = 0; i < MAXMEM; i++)
		if (p && device_mem[i] == p) {
			free(p);
			device_mem[i] = NULL;
		}
	return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	memset(a, 0, sizeof *a);
	a->type = cudaMemoryTypeUnregistered;
	for (int i = 0; i < MAXMEM; i++)
		if (device_mem[i] && device_mem[i] == p)
			a->type = cudaMemoryTypeDevice;
	return cudaSuccess;
}

/* synchronous: the host waits for the legacy stream */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
	(void)kind;
	memmove(dst, src, bytes);
	host = add_node(NULL, N_HOST, "host: copy", NULL, legacy.last);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = calloc(1, sizeof **s);
	(*s)->last = -1;
	return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
	(void)flags;
	*ev = calloc(1, sizeof **ev);
	(*ev)->rec = -1;
	return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
	free(ev);
	return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	ev->rec = add_node(stream_of(s), N_RECORD, "record", NULL, -1);
	return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
	(void)flags;
	add_node(stream_of(s), N_WAIT, "wait", NULL, ev->rec); /* never recorded: no wait */
	return cudaSuccess;
}
/* Every node can run once what it follows has: the model keeps no time, so
 * a query says done, and the host has seen the record complete. */
cudaError_t cudaEventQuery(cudaEvent_t ev)
{
	host = add_node(NULL, N_HOST, "host: event done", NULL, ev->rec);
	return cudaSuccess;
}

/* ---- NCCL's calls: communicators of one rank; data copied at once ---------------------- */

const char *ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : "stub error";
}
const char *ncclGetLastError(ncclComm_t c)
{
	(void)c;
	return "";
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 7, sizeof *id);
	return ncclSuccess;
}
static ncclComm_t new_comm(const ncclConfig_t *cfg)
{
	ncclComm_t c = calloc(1, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", cfg && cfg->commName ? cfg->commName : "?");
	c->size = 1;
	return c;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int n, ncclUniqueId id, int rank,
				    ncclConfig_t *cfg)
{
	(void)id;
	if (n != 1 || rank != 0)
		return ncclInvalidArgument;
	*c = new_comm(cfg);
	return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *cfg)
{
	(void)c, (void)key;
	*out = color == NCCL_SPLIT_NOCOLOR ? NULL : new_comm(cfg);
	return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank)
{
	*rank = c->rank;
	return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *count)
{
	*count = c->size;
	return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state)
{
	(void)c;
	*state = ncclSuccess;
	return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t c)
{
	(void)c;
	return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	free(c);
	return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c)
{
	free(c);
	return ncclSuccess;
}
ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) { return group_depth-- > 0 ? ncclSuccess : ncclInvalidUsage; }

static size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	default:
		return 8;
	}
}

/* one rank: every collective leaves recv = send */
static ncclResult_t op(const char *what, const void *s, void *r, size_t n, ncclDataType_t t,
		       ncclComm_t c, cudaStream_t st)
{
	if (s && r && s != r)
		memmove(r, s, n * type_size(t));
	add_node(stream_of(st), N_OP, what, c, -1);
	return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o,
			   ncclComm_t c, cudaStream_t st)
{
	(void)o;
	return op("allreduce", s, r, n, t, c, st);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, int root,
			ncclComm_t c, cudaStream_t st)
{
	(void)o, (void)root;
	return op("reduce", s, r, n, t, c, st);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o,
			       ncclComm_t c, cudaStream_t st)
{
	(void)o;
	return op("reduce_scatter", s, r, n, t, c, st);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
			   cudaStream_t st)
{
	return op("all_gather", s, r, n, t, c, st);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			   ncclComm_t c, cudaStream_t st)
{
	(void)root;
	return op("broadcast", s, r, n, t, c, st);
}
static void *pending_send; /* a send to ourselves pairs with the next receive */
ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	(void)peer;
	pending_send = (void *)s;
	return op("send", NULL, NULL, n, t, c, st);
}
ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
	(void)peer;
	ncclResult_t res = op("recv", pending_send, r, n, t, c, st);
	pending_send = NULL;
	return res;
}

/* ---- the checks ------------------------------------------------------------------------- */

/* the model itself: an operation on each of two streams, no wait between */
static void check_model_catches_overlap(void)
{
	struct stub_comm a = {"a", 0, 1}, b = {"b", 0, 1};
	cudaStream_t s1, s2;
	cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
	cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
	int lo = nn, ops;
	add_node(s1, N_OP, "allreduce", &a, -1);
	add_node(s2, N_OP, "allreduce", &b, -1);
	char why[200] = "";
	int bad = unordered(lo, nn, &ops, why, sizeof why);
	CHECK(bad == 1 && ops == 2, "comm_order/model_catches_overlap",
	      "%d unordered pairs of %d operations, expected 1 of 2", bad, ops);
	/* and a wait for the first's record orders them */
	cudaEvent_t ev;
	cudaEventCreateWithFlags(&ev, 0);
	lo = nn;
	add_node(s1, N_OP, "allreduce", &a, -1);
	cudaEventRecord(ev, s1);
	cudaStreamWaitEvent(s2, ev, 0);
	add_node(s2, N_OP, "allreduce", &b, -1);
	bad = unordered(lo, nn, &ops, why, sizeof why);
	CHECK(bad == 0 && ops == 2, "comm_order/model_sees_wait", "%s", why);
	cudaEventDestroy(ev);
	cudaStreamDestroy(s1);
	cudaStreamDestroy(s2);
}

int main(void)
{
	check_model_catches_overlap();

	pp_err e = {0};
	pp_proc p;
	pp_comm *world = NULL, *dp = NULL, *tp = NULL, *pp = NULL;
	if (boot_init(&p, &e) || comm_init(&world, "nccl", &p, 10, &e) ||
	    comm_split(world, 0, 0, "dp", &dp, &e) || comm_split(world, 0, 0, "tp", &tp, &e) ||
	    comm_split(world, 0, 0, "pp", &pp, &e)) {
		CHECK(0, "comm_order/setup", "%s", e.msg);
		TH_EXIT();
	}
	/* Two steps of what the trainer posts: the dp sum of each bucket goes
	 * out as the backward finishes it and stays in flight while the tp
	 * sums and the pipeline's transfers of the next layers go out. */
	float grads[2][64] = {{1, 2, 3}, {4, 5, 6}}, tpbuf[32], act[16], back[16], loss = 1;
	float shard[64];
	size_t counts[1] = {64};
	int lo = nn, rc = 0;
	for (int step = 0; step < 2 && !rc; step++) {
		pp_comm_req *r1 = NULL, *r2 = NULL;
		rc = comm_sendrecv(pp, act, 16, 0, back, 16, 0, PP_DT_F32, 1, &e) ||
		     comm_allreduce(tp, tpbuf, 32, PP_DT_F32, PP_OP_SUM, &e) ||
		     comm_iallreduce(dp, grads[0], 64, PP_DT_F32, PP_OP_SUM, &r1, &e) ||
		     comm_allreduce(tp, tpbuf, 32, PP_DT_F32, PP_OP_SUM, &e) ||
		     comm_send(pp, act, 16, PP_DT_F32, 0, 2, &e) ||
		     comm_recv(pp, back, 16, PP_DT_F32, 0, 2, &e) ||
		     comm_ireduce_scatter(dp, grads[1], shard, counts, PP_DT_F32, PP_OP_SUM, &r2,
					  &e) ||
		     comm_allreduce(tp, tpbuf, 32, PP_DT_F32, PP_OP_SUM, &e) || comm_wait(r1, &e) ||
		     comm_wait(r2, &e) || comm_all_gather(dp, shard, grads[1], 64, PP_DT_F32, &e) ||
		     comm_allreduce(world, &loss, 1, PP_DT_F32, PP_OP_SUM, &e);
	}
	CHECK(!rc, "comm_order/steps_run", "%s", e.msg);
	int ops;
	char why[200] = "";
	int bad = unordered(lo, nn, &ops, why, sizeof why);
	/* 2 steps x 10 calls, the sendrecv two operations (a send, a receive) */
	CHECK(ops == 22 && bad == 0, "comm_order/one_in_flight",
	      "%d of the pairs among %d NCCL operations may run at once: %s", bad, ops, why);
	comm_free(pp);
	comm_free(tp);
	comm_free(dp);
	comm_free(world);
	boot_fini(&p);
	TH_EXIT();
}
