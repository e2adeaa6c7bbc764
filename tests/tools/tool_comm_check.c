/* Checks rank bootstrap (boot.h) and the comm interface (comm.h) as N
 * ranks: every collective's result, on communicators of every size 1..N
 * (prefix groups, ranked in reverse by key) and on a split by rank parity,
 * for lengths 0, 1, 7, 1000 and 65537, both real types; integer and byte
 * types; point to point around a ring and with tags; barrier; the
 * nonblocking allreduce and reduce-scatter (uneven and empty blocks, several
 * in flight at once with blocking calls between them, finished in another
 * order, by comm_wait or by polling comm_test); the nonblocking all-gather
 * of uneven blocks, in fp32 and bf16; argument errors; and, on
 * request, a rank that dies or hangs mid-operation.
 *
 * Built with -DPP_CUDA it can check the "nccl" backend instead
 * (PP_CHECK_BACKEND=nccl): buffers are then CUDA managed memory, which both
 * the checks (host) and NCCL (device) can use, except the verdicts that
 * report() sums, which stay in host memory (nccl's host path).
 *
 * Rank 0 prints the PASS/FAIL lines; another rank prints a FAIL line (with
 * its rank) only for a check that failed on it. Built and run by
 * tests/system/test_comm.sh under each launcher (not by the Makefile's test_* rule:
 * it needs MPI and PMIx flags).
 *
 * Environment:
 *   PP_CHECK_BACKEND=mpi|nccl  (default mpi)
 *   PP_CHECK_TIMEOUT=S      communicator timeout (default 60)
 *   PP_CHECK_FAULT=kill|hang  instead of the checks, rank PP_CHECK_FAULT_RANK
 *                           kills itself (SIGKILL) or stops answering (sleeps
 *                           three timeouts, then exits 3) while the others
 *                           are in PP_CHECK_FAULT_OP ("allreduce", "recv":
 *                           a receive from that rank, or "iallreduce": the
 *                           wait for a nonblocking allreduce); none: the
 *                           boot checks only
 *   PP_CHECK_DEVICE=D       boot_device() must be D under the launcher's
 *                           own CUDA_VISIBLE_DEVICES
 *   PP_CHECK_ON_ERROR=exit  on a comm error print it and _exit(1) instead of
 *                           comm_abort (so each rank reports for itself) */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef PP_CUDA
#include <cuda_runtime.h>
#endif

#include "../../libcommon/base/log.h"
#include "../../libcommon/comm/boot.h"
#include "../../libcommon/comm/comm.h"
#include "harness.h"

static pp_proc proc;
static pp_comm *world;

static const char *env_str(const char *name, const char *dflt)
{
	const char *s = getenv(name);
	return s && *s ? s : dflt;
}

static int on_device; /* nccl: buffers in CUDA managed memory */

/* n elements of t, zeroed, where the backend can use them */
static void *alloc(size_t n, pp_dtype t)
{
	size_t bytes = (n ? n : 1) * comm_dtype_size(t);
	void *p = NULL;
#ifdef PP_CUDA
	if (on_device) {
		if (cudaMallocManaged(&p, bytes, cudaMemAttachGlobal) != cudaSuccess)
			p = NULL;
		else
			memset(p, 0, bytes);
	} else
#endif
		p = calloc(1, bytes);
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return p;
}

static void release(void *p)
{
#ifdef PP_CUDA
	if (on_device) {
		cudaFree(p);
		return;
	}
#endif
	free(p);
}

/* A comm call failed: the run cannot go on. Every rank says so itself. */
static _Noreturn void fatal(const char *what, const pp_err *e)
{
	printf("FAIL: %s (rank %d): %s\n", what, proc.rank, e->msg);
	log_error("%s: %s", what, e->msg);
	fflush(NULL);
	if (!strcmp(env_str("PP_CHECK_ON_ERROR", "abort"), "exit"))
		_exit(1);
	comm_abort(world, 1, e->msg);
}

/* One counted check over the whole job: ok is this rank's verdict. */
static void report(int ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void report(int ok, const char *name, const char *fmt, ...)
{
	char detail[512] = "";
	if (!ok) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(detail, sizeof detail, fmt, ap);
		va_end(ap);
	}
	pp_err e = {0};
	/* host memory on every backend (nccl copies it through the device) */
	uint64_t bad = ok || proc.rank >= 64 ? 0 : (uint64_t)1 << proc.rank;
	int64_t nbad = !ok;
	if (comm_allreduce(world, &bad, 1, PP_DT_U64, PP_OP_SUM, &e) ||
	    comm_allreduce(world, &nbad, 1, PP_DT_I64, PP_OP_SUM, &e))
		fatal(name, &e);
	if (proc.rank == 0) {
		if (!nbad)
			th_report(1, name, "%s", "");
		else if (!ok)
			th_report(0, name, "%s (and %lld rank(s) in all)", detail, (long long)nbad);
		else
			th_report(0, name, "failed on %lld other rank(s), mask 0x%llx",
				  (long long)nbad, (unsigned long long)bad);
	} else if (!ok) {
		th_failed++;
		printf("FAIL: %s (rank %d): %s\n", name, proc.rank, detail);
		fflush(stdout);
	}
}

/* ---- typed buffers: values are small integers, exact in every type ---- */

static void put(void *buf, pp_dtype t, size_t i, double v)
{
	switch (t) {
	case PP_DT_F32:
		((float *)buf)[i] = (float)v;
		break;
	case PP_DT_F64:
		((double *)buf)[i] = v;
		break;
	case PP_DT_I32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	case PP_DT_I64:
		((int64_t *)buf)[i] = (int64_t)v;
		break;
	case PP_DT_U64:
		((uint64_t *)buf)[i] = (uint64_t)v;
		break;
	case PP_DT_BYTE:
		((unsigned char *)buf)[i] = (unsigned char)v;
		break;
	case PP_DT_BF16: { /* the float's top half: exact for these small integers */
		float f = (float)v;
		uint32_t u;
		memcpy(&u, &f, sizeof u);
		((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
		break;
	}
	}
}

static double get(const void *buf, pp_dtype t, size_t i)
{
	switch (t) {
	case PP_DT_F32:
		return ((const float *)buf)[i];
	case PP_DT_F64:
		return ((const double *)buf)[i];
	case PP_DT_I32:
		return ((const int32_t *)buf)[i];
	case PP_DT_I64:
		return (double)((const int64_t *)buf)[i];
	case PP_DT_U64:
		return (double)((const uint64_t *)buf)[i];
	case PP_DT_BYTE:
		return ((const unsigned char *)buf)[i];
	case PP_DT_BF16: {
		uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
		float f;
		memcpy(&f, &u, sizeof f);
		return f;
	}
	}
	return 0;
}

/* v as type t holds it: the integers here are exact in every type but
 * bfloat16, whose 8 significant bits hold them up to 256 */
static double exact(pp_dtype t, double v)
{
	uint64_t buf = 0;
	put(&buf, t, 0, v);
	return get(&buf, t, 0);
}

static const size_t lengths[] = {0, 1, 7, 1000, 65537};
enum { NLEN = sizeof lengths / sizeof *lengths };

/* first mismatch in buf (n) against want(i), as text; 1 when all match */
#define EXPECT(buf, t, n, want, why)                                                               \
	do {                                                                                       \
		for (size_t i_ = 0; i_ < (n); i_++) {                                              \
			size_t i = i_;                                                             \
			double w_ = exact(t, (want)), g_ = get(buf, t, i);                         \
			if (g_ != w_) {                                                            \
				snprintf(why, sizeof why, "length %zu: [%zu] = %g, expected %g",   \
					 (size_t)(n), i, g_, w_);                                  \
				ok = 0;                                                            \
				break;                                                             \
			}                                                                          \
		}                                                                                  \
	} while (0)

/* c is NULL on ranks outside the group being tested: they only vote. */
static void check_collectives(pp_comm *c, const char *label, pp_dtype t)
{
	char name[160], why[256] = "";
	const char *tn = comm_dtype_name(t);
	pp_err e = {0};
	int ok, n = c ? c->size : 0, r = c ? c->rank : 0;
	double rsum = (double)n * (n + 1) / 2; /* sum of rank+1 */

	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l];
		void *x = alloc(len, t);
		for (size_t i = 0; i < len; i++)
			put(x, t, i, (r + 1) + (double)(i % 13));
		if (comm_allreduce(c, x, len, t, PP_OP_SUM, &e))
			fatal("allreduce", &e);
		EXPECT(x, t, len, rsum + (double)n * (i % 13), why);
		release(x);
	}
	snprintf(name, sizeof name, "allreduce sum %s on %s", tn, label);
	report(ok, name, "%s", why);

	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l];
		void *x = alloc(len, t);
		for (size_t i = 0; i < len; i++) /* the max moves between ranks */
			put(x, t, i, (double)((r + i) % (size_t)n) * 3 + (double)(i % 5));
		if (comm_allreduce(c, x, len, t, PP_OP_MAX, &e))
			fatal("allreduce max", &e);
		EXPECT(x, t, len, (double)(n - 1) * 3 + (double)(i % 5), why);
		release(x);
	}
	snprintf(name, sizeof name, "allreduce max %s on %s", tn, label);
	report(ok, name, "%s", why);

	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l], all = len * (size_t)n;
		void *s = alloc(all, t), *x = alloc(len, t);
		for (size_t j = 0; j < all; j++)
			put(s, t, j, (r + 1) + (double)(j % 13));
		for (size_t i = 0; i < len; i++)
			put(x, t, i, -1);
		if (comm_reduce_scatter(c, s, x, len, t, PP_OP_SUM, &e))
			fatal("reduce_scatter", &e);
		EXPECT(x, t, len, rsum + (double)n * (double)(((size_t)r * len + i) % 13), why);
		release(s), release(x);
	}
	snprintf(name, sizeof name, "reduce_scatter sum %s on %s", tn, label);
	report(ok, name, "%s", why);

	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l], all = len * (size_t)n;
		void *s = alloc(len, t), *x = alloc(all, t);
		for (size_t i = 0; i < len; i++)
			put(s, t, i, r * 100 + (double)(i % 97));
		if (comm_all_gather(c, s, x, len, t, &e))
			fatal("all_gather", &e);
		EXPECT(x, t, all, (double)(i / (len ? len : 1)) * 100 + (double)(i % len % 97),
		       why);
		/* in place: this rank's block already sits in x */
		for (size_t j = 0; j < all; j++)
			put(x, t, j, j / len == (size_t)r ? r * 100 + (double)(j % len % 97) : -1);
		if (ok && comm_all_gather(c, (char *)x + (size_t)r * len * comm_dtype_size(t), x,
					  len, t, &e))
			fatal("all_gather in place", &e);
		if (ok)
			EXPECT(x, t, all,
			       (double)(i / (len ? len : 1)) * 100 + (double)(i % len % 97), why);
		release(s), release(x);
	}
	snprintf(name, sizeof name, "all_gather %s on %s (also in place)", tn, label);
	report(ok, name, "%s", why);

	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l];
		int root = n - 1;
		void *x = alloc(len, t);
		for (size_t i = 0; i < len; i++)
			put(x, t, i, r == root ? 7 + (double)(i % 101) : -1);
		if (comm_broadcast(c, x, len, t, root, &e))
			fatal("broadcast", &e);
		EXPECT(x, t, len, 7 + (double)(i % 101), why);
		release(x);
	}
	snprintf(name, sizeof name, "broadcast %s from the last rank on %s", tn, label);
	report(ok, name, "%s", why);

	/* ragged: rank a sends rank b ((a + 2 b) % 3) len / 2 elements (some
	 * none), each telling where it comes from */
	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l], *sc = calloc(4 * (size_t)n, sizeof *sc), st = 0, rt = 0;
		size_t *sd = sc + n, *rcn = sd + n, *rd = rcn + n;
		for (int p = 0; p < n; p++) {
			sc[p] = (size_t)((r + 2 * p) % 3) * len / 2;
			rcn[p] = (size_t)((p + 2 * r) % 3) * len / 2;
			sd[p] = st, rd[p] = rt;
			st += sc[p], rt += rcn[p];
		}
		void *sb = alloc(st, t), *rb = alloc(rt, t);
		for (int p = 0; p < n; p++)
			for (size_t i = 0; i < sc[p]; i++)
				put(sb, t, sd[p] + i, (double)((r * 5 + p * 3 + i % 7) % 64));
		if (comm_alltoallv(c, sb, sc, sd, rb, rcn, rd, t, &e))
			fatal("alltoallv", &e);
		for (int p = 0; p < n && ok; p++)
			for (size_t i = 0; i < rcn[p] && ok; i++) {
				double w = exact(t, (double)((p * 5 + r * 3 + i % 7) % 64));
				double g = get(rb, t, rd[p] + i);
				if (g != w) {
					snprintf(why, sizeof why,
						 "length %zu: [%zu] from rank %d = %g, "
						 "expected %g",
						 len, i, p, g, w);
					ok = 0;
				}
			}
		release(sb), release(rb);
		free(sc);
	}
	snprintf(name, sizeof name, "alltoallv %s (ragged, empty blocks) on %s", tn, label);
	report(ok, name, "%s", why);
}

/* Around the ring: each rank sends to the next and receives from the one
 * before, at once (sendrecv), then with plain send/recv ordered so that
 * it cannot deadlock (even ranks send first). */
static void check_ring(pp_comm *c, const char *label)
{
	char name[160], why[256] = "";
	pp_err e = {0};
	int ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l];
		int n = c->size, r = c->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
		double *s = alloc(len, PP_DT_F64), *x = alloc(len, PP_DT_F64);
		for (size_t i = 0; i < len; i++)
			s[i] = c->world[r] * 1000.0 + (double)i, x[i] = -1;
		if (comm_sendrecv(c, s, len, next, x, len, prev, PP_DT_F64, 3, &e))
			fatal("sendrecv", &e);
		EXPECT(x, PP_DT_F64, len, c->world[prev] * 1000.0 + (double)i, why);
		if (ok && n > 1) {
			for (size_t i = 0; i < len; i++)
				x[i] = -1;
			int rc;
			if (r % 2 == 0)
				rc = comm_send(c, s, len, PP_DT_F64, next, 5, &e) ||
				     comm_recv(c, x, len, PP_DT_F64, prev, 5, &e);
			else
				rc = comm_recv(c, x, len, PP_DT_F64, prev, 5, &e) ||
				     comm_send(c, s, len, PP_DT_F64, next, 5, &e);
			if (rc)
				fatal("send/recv", &e);
			EXPECT(x, PP_DT_F64, len, c->world[prev] * 1000.0 + (double)i, why);
		}
		release(s), release(x);
	}
	snprintf(name, sizeof name, "ring sendrecv and send/recv on %s", label);
	report(ok, name, "%s", why);
}

/* Nonblocking collectives: K allreduces in flight at once (a blocking one
 * between the posts), finished in reverse order; a reduce-scatter with
 * uneven blocks (some empty) finished by polling comm_test. */
static void check_nonblocking(pp_comm *c, const char *label, pp_dtype t)
{
	enum { K = 4 };
	char name[160], why[256] = "";
	pp_err e = {0};
	int ok = 1, n = c ? c->size : 0, r = c ? c->rank : 0;
	double rsum = (double)n * (n + 1) / 2;
	for (int l = 0; c && l < NLEN && ok; l++) {
		size_t len = lengths[l];
		void *x[K];
		pp_comm_req *q[K];
		int64_t *mid = alloc(1, PP_DT_I64);
		for (int k = 0; k < K; k++) {
			x[k] = alloc(len, t);
			for (size_t i = 0; i < len; i++)
				put(x[k], t, i, (r + 1) * (k + 1) + (double)(i % 13));
			if (comm_iallreduce(c, x[k], len, t, PP_OP_SUM, &q[k], &e))
				fatal("iallreduce", &e);
			if (k == 1) { /* a blocking call while two are in flight */
				*mid = r;
				if (comm_allreduce(c, mid, 1, PP_DT_I64, PP_OP_MAX, &e))
					fatal("allreduce between iallreduces", &e);
			}
		}
		for (int k = K - 1; k >= 0; k--)
			if (comm_wait(q[k], &e))
				fatal("comm_wait", &e);
		for (int k = 0; k < K && ok; k++)
			EXPECT(x[k], t, len, rsum * (k + 1) + (double)n * (i % 13), why);
		if (ok && *mid != n - 1) {
			snprintf(why, sizeof why, "the blocking allreduce between them gave %lld",
				 (long long)*mid);
			ok = 0;
		}
		for (int k = 0; k < K; k++)
			release(x[k]);
		release(mid);
	}
	snprintf(name, sizeof name, "iallreduce x%d in flight, waited in reverse, %s on %s", K,
		 comm_dtype_name(t), label);
	report(ok, name, "%s", why);

	ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		/* rank i's block: (len + 3 * i) % 5 elements, so some are empty */
		size_t counts[64], total = 0, at = 0;
		for (int i = 0; i < n && i < 64; i++) {
			counts[i] = (lengths[l] + 3 * (size_t)i) % 5 * (lengths[l] > 7 ? 100 : 1);
			total += counts[i];
			if (i < r)
				at += counts[i];
		}
		void *snd = alloc(total, t), *x = alloc(counts[r], t);
		for (size_t j = 0; j < total; j++)
			put(snd, t, j, (r + 1) + (double)(j % 13));
		for (size_t i = 0; i < counts[r]; i++)
			put(x, t, i, -1);
		pp_comm_req *q;
		int done = 0, polls = 0;
		if (comm_ireduce_scatter(c, snd, x, counts, t, PP_OP_SUM, &q, &e))
			fatal("ireduce_scatter", &e);
		while (!done && polls++ < 10000000)
			if (comm_test(q, &done, &e))
				fatal("comm_test", &e);
		if (!done) {
			snprintf(why, sizeof why, "comm_test never said done");
			ok = 0;
		}
		if (ok)
			EXPECT(x, t, counts[r], rsum + (double)n * (double)((at + i) % 13), why);
		release(snd), release(x);
	}
	snprintf(name, sizeof name, "ireduce_scatter with uneven blocks %s on %s (comm_test)",
		 comm_dtype_name(t), label);
	report(ok, name, "%s", why);
}

/* Element i of an all-gatherv of blocks counts (n): rank q's block holds
 * (q + 1) * 100 + j % 7 at its element j. */
static double gathered(const size_t *counts, int n, size_t i)
{
	for (int q = 0; q < n; i -= counts[q], q++)
		if (i < counts[q])
			return (q + 1) * 100.0 + (double)(i % 7);
	return -1;
}

/* The nonblocking all-gather with a block size per rank (FSDP's gather of
 * a layer from its shards): uneven and empty blocks, from a separate
 * buffer and in place, finished by comm_wait. Moves bfloat16 on every
 * backend (no reduction). */
static void check_gatherv(pp_comm *c, const char *label, pp_dtype t)
{
	char name[160], why[256] = "";
	pp_err e = {0};
	const int n = c ? c->size : 1, r = c ? c->rank : 0;
	int ok = 1;
	for (int l = 0; c && l < NLEN && ok; l++) {
		for (int in_place = 0; in_place < 2 && ok; in_place++) {
			size_t counts[64], total = 0, at = 0;
			for (int q = 0; q < n && q < 64; q++) {
				counts[q] = (lengths[l] + 2 * (size_t)q) % 4 *
					    (lengths[l] > 7 ? 50 : 1);
				at += q < r ? counts[q] : 0;
				total += counts[q];
			}
			void *x = alloc(total, t), *mine = alloc(counts[r], t);
			for (size_t i = 0; i < total; i++)
				put(x, t, i, -1);
			void *src = in_place ? (char *)x + at * comm_dtype_size(t) : mine;
			for (size_t j = 0; j < counts[r]; j++)
				put(src, t, j, (r + 1) * 100.0 + (double)(j % 7));
			pp_comm_req *q;
			if (comm_iall_gatherv(c, src, x, counts, t, &q, &e) || comm_wait(q, &e))
				fatal("iall_gatherv", &e);
			EXPECT(x, t, total, gathered(counts, n, i), why);
			if (!ok)
				snprintf(why + strlen(why), sizeof why - strlen(why), "%s",
					 in_place ? " (in place)" : "");
			release(x), release(mine);
		}
	}
	snprintf(name, sizeof name, "iall_gatherv with uneven blocks %s on %s", comm_dtype_name(t),
		 label);
	report(ok, name, "%s", why);
}

static void check_barrier(pp_comm *c, const char *label)
{
	char name[160];
	pp_err e = {0};
	if (c && (comm_barrier(c, &e) || comm_barrier(c, &e)))
		fatal("barrier", &e);
	snprintf(name, sizeof name, "barrier on %s", label);
	report(1, name, "%s", "");
}

static void check_group(pp_comm *c, const char *label)
{
	check_collectives(c, label, PP_DT_F32);
	check_collectives(c, label, PP_DT_F64);
	if (on_device) /* MPI moves bfloat16 but cannot reduce it (check_other_types) */
		check_collectives(c, label, PP_DT_BF16);
	check_nonblocking(c, label, PP_DT_F32);
	check_nonblocking(c, label, PP_DT_F64);
	check_gatherv(c, label, PP_DT_F32);
	check_gatherv(c, label, PP_DT_BF16);
	check_ring(c, label);
	check_barrier(c, label);
}

/* Sub-communicators: the first k ranks for every k (ranked in reverse by
 * key), then the split by rank parity (the shape of mesh groups). */
static void check_splits(void)
{
	pp_err e = {0};
	int n = world->size, r = world->rank;
	for (int k = 1; k < n; k++) {
		char label[64], name[160], why[256] = "";
		pp_comm *g;
		snprintf(label, sizeof label, "first %d of %d ranks", k, n);
		if (comm_split(world, r < k ? 0 : PP_COMM_NOCOLOR, -r, "prefix", &g, &e))
			fatal("split", &e);
		int ok = (r < k) == (g != NULL);
		if (!ok)
			snprintf(why, sizeof why, "in group: %d, expected %d", g != NULL, r < k);
		if (ok && g) {
			ok = g->size == k && g->rank == k - 1 - r && !strcmp(g->name, "prefix");
			for (int j = 0; ok && j < k; j++)
				ok = g->world[j] == k - 1 - j;
			if (!ok)
				snprintf(why, sizeof why, "rank %d of %d, expected %d of %d",
					 g->rank, g->size, k - 1 - r, k);
		}
		snprintf(name, sizeof name, "split: %s, reverse key order", label);
		report(ok, name, "%s", why);
		check_group(g, label);
		comm_free(g);
	}

	char why[256] = "";
	pp_comm *g;
	if (comm_split(world, r % 2, r, "parity", &g, &e))
		fatal("split parity", &e);
	int want = (n - r % 2 + 1) / 2;
	int ok = g && g->size == want && g->rank == r / 2 && g->world[g->rank] == r;
	if (!ok)
		snprintf(why, sizeof why, "rank %d of %d, expected %d of %d", g ? g->rank : -1,
			 g ? g->size : -1, r / 2, want);
	report(ok, "split by rank parity (color rank%2)", "%s", why);
	check_group(g, "parity groups");
	comm_free(g);
}

static void check_other_types(void)
{
	pp_err e = {0};
	char why[256] = "";
	const pp_dtype ints[] = {PP_DT_I32, PP_DT_I64, PP_DT_U64};
	int n = world->size, r = world->rank, ok = 1;
	for (int k = 0; k < 3; k++)
		for (int l = 0; l < NLEN && ok; l++) {
			size_t len = lengths[l];
			void *x = alloc(len, ints[k]);
			for (size_t i = 0; i < len; i++)
				put(x, ints[k], i, (r + 1) * 5 + (double)(i % 11));
			if (comm_allreduce(world, x, len, ints[k], PP_OP_SUM, &e))
				fatal("allreduce int", &e);
			EXPECT(x, ints[k], len, 5.0 * n * (n + 1) / 2 + (double)n * (i % 11), why);
			release(x);
		}
	report(ok, "allreduce sum int32, int64, uint64 on world", "%s", why);

	/* 64-bit values beyond double's 53 bits stay exact */
	int64_t *big = alloc(1, PP_DT_I64);
	*big = ((int64_t)1 << 60) + r;
	if (comm_allreduce(world, big, 1, PP_DT_I64, PP_OP_MAX, &e))
		fatal("allreduce int64 max", &e);
	report(*big == ((int64_t)1 << 60) + n - 1, "allreduce max int64 keeps 64 bits", "got %lld",
	       (long long)*big);
	release(big);

	ok = 1;
	for (int l = 0; l < NLEN && ok; l++) {
		size_t len = lengths[l];
		unsigned char *x = alloc(len, PP_DT_BYTE),
			      *all = alloc(len * (size_t)n, PP_DT_BYTE);
		for (size_t i = 0; i < len; i++)
			x[i] = r == 0 ? (unsigned char)(i * 7 + 1) : 0;
		if (comm_broadcast(world, x, len, PP_DT_BYTE, 0, &e) ||
		    comm_all_gather(world, x, all, len, PP_DT_BYTE, &e))
			fatal("bytes", &e);
		EXPECT(all, PP_DT_BYTE, len * (size_t)n, (double)(unsigned char)((i % len) * 7 + 1),
		       why);
		release(x), release(all);
	}
	report(ok, "broadcast and all_gather of bytes on world", "%s", why);

	/* bfloat16 (activations between pipeline stages) moves on every backend */
	ok = 1;
	for (int l = 0; l < NLEN && ok; l++) {
		size_t len = lengths[l];
		void *x = alloc(len, PP_DT_BF16), *all = alloc(len * (size_t)n, PP_DT_BF16);
		for (size_t i = 0; i < len; i++)
			put(x, PP_DT_BF16, i, (r + 1) * 3 + (double)(i % 7));
		if (comm_all_gather(world, x, all, len, PP_DT_BF16, &e))
			fatal("all_gather bf16", &e);
		EXPECT(all, PP_DT_BF16, len * (size_t)n,
		       (double)(i / len + 1) * 3 + (double)(i % len % 7), why);
		release(x), release(all);
	}
	report(ok, "all_gather of bfloat16 on world", "%s", why);
	if (!on_device) {
		uint16_t h = 0;
		report(comm_allreduce(world, &h, 1, PP_DT_BF16, PP_OP_SUM, &e) == PP_EUSAGE &&
			       strstr(e.msg, "bfloat16"),
		       "allreduce of bfloat16 on mpi is a usage error", "%s", e.msg);
	}

	/* tags: two messages to the same peer told apart by tag */
	ok = 1;
	if (n > 1) {
		int32_t *a = alloc(2, PP_DT_I32), *b = alloc(2, PP_DT_I32);
		a[0] = r, a[1] = 100 + r, b[0] = b[1] = -1;
		int next = (r + 1) % n, prev = (r + n - 1) % n;
		if (comm_sendrecv(world, &a[0], 1, next, &b[0], 1, prev, PP_DT_I32, 11, &e) ||
		    comm_sendrecv(world, &a[1], 1, next, &b[1], 1, prev, PP_DT_I32, 12, &e))
			fatal("tagged sendrecv", &e);
		ok = b[0] == prev && b[1] == 100 + prev;
		snprintf(why, sizeof why, "got %d, %d from rank %d", b[0], b[1], prev);
		release(a), release(b);
	}
	report(ok, "tagged sendrecv on world", "%s", why);
}

/* Mistakes are usage errors, found before any message moves. */
static void check_errors(void)
{
	pp_err e = {0};
	float f = 0;
	unsigned char byte = 0;
	int n = world->size;
	report(comm_allreduce(world, &byte, 1, PP_DT_BYTE, PP_OP_SUM, &e) == PP_EUSAGE &&
		       strstr(e.msg, "bytes"),
	       "allreduce of bytes is a usage error", "%s", e.msg);
	report(comm_send(world, &f, 1, PP_DT_F32, n, 0, &e) == PP_EUSAGE &&
		       strstr(e.msg, "destination") && strstr(e.msg, "'world'"),
	       "send to a rank out of range is a usage error naming it", "%s", e.msg);
	report(comm_recv(world, &f, 1, PP_DT_F32, 0, 40000, &e) == PP_EUSAGE,
	       "tag out of range is a usage error", "%s", e.msg);
	report(comm_broadcast(world, &f, 1, PP_DT_F32, -1, &e) == PP_EUSAGE,
	       "broadcast from root -1 is a usage error", "%s", e.msg);
	pp_comm_req *q = NULL;
	report(comm_iallreduce(world, &byte, 1, PP_DT_BYTE, PP_OP_SUM, &q, &e) == PP_EUSAGE && !q &&
		       strstr(e.msg, "allreduce on 'world'"),
	       "iallreduce of bytes is a usage error, no request", "%s", e.msg);
	report(comm_find("mpi") == &pp_comm_mpi && comm_find("gloo") == NULL,
	       "comm_find knows mpi, refuses unknown names", "%s", "");
}

/* GPU choice: the local rank among the visible devices, or 0 when Slurm
 * has narrowed CUDA_VISIBLE_DEVICES to one (--gpus-per-task=1).
 * PP_CHECK_DEVICE=D: the launcher's own setting must give D. */
static void check_device(void)
{
	const char *want = getenv("PP_CHECK_DEVICE");
	if (want && *want) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		report(boot_device(&proc) == atoi(want),
		       "boot_device under the launcher's GPU binding",
		       "CUDA_VISIBLE_DEVICES=%s, local rank %d: device %d, expected %s",
		       vis ? vis : "(unset)", proc.local_rank, boot_device(&proc), want);
		return;
	}
	char *saved = getenv("CUDA_VISIBLE_DEVICES");
	saved = saved ? strdup(saved) : NULL;
	int lr = proc.local_rank, d1, d4, d0;
	setenv("CUDA_VISIBLE_DEVICES", "3", 1);
	d1 = boot_device(&proc);
	setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
	d4 = boot_device(&proc);
	unsetenv("CUDA_VISIBLE_DEVICES");
	d0 = boot_device(&proc);
	if (saved)
		setenv("CUDA_VISIBLE_DEVICES", saved, 1);
	free(saved);
	report(d1 == 0 && d4 == lr && d0 == lr,
	       "boot_device: 0 with one visible GPU, else the local rank",
	       "one visible: %d, four: %d, unset: %d (local rank %d)", d1, d4, d0, lr);
}

/* One rank dies (or hangs) in the middle of an operation: the others must
 * come back with an error naming it, within their timeout. */
static void fault_in_the_middle(const char *how, int victim)
{
	pp_err e = {0};
	const char *op = env_str("PP_CHECK_FAULT_OP", "allreduce");
	int n = world->size, r = world->rank;
	if (victim < 0 || victim >= n)
		return;
	for (int it = 0; it < 20; it++) {
		float *x = alloc(64, PP_DT_F32);
		for (int i = 0; i < 64; i++)
			x[i] = (float)r;
		if (r == victim && it == 10) {
			fflush(NULL);
			if (!strcmp(how, "kill"))
				raise(SIGKILL);
			sleep((unsigned)(3 * world->timeout));
			_exit(3);
		}
		int rc;
		pp_comm_req *q;
		if (!strcmp(op, "recv") && it == 10 && r != victim)
			rc = comm_recv(world, x, 64, PP_DT_F32, victim, 1, &e);
		else if (!strcmp(op, "iallreduce"))
			rc = comm_iallreduce(world, x, 64, PP_DT_F32, PP_OP_SUM, &q, &e) ||
			     comm_wait(q, &e);
		else
			rc = comm_allreduce(world, x, 64, PP_DT_F32, PP_OP_SUM, &e);
		if (rc)
			fatal("operation with a dead or stuck rank", &e);
		release(x);
	}
	report(0, "a rank failed", "%s", "the others finished 20 iterations without an error");
}

int main(void)
{
	pp_err e = {0};
	if (boot_init(&proc, &e)) {
		log_set_prefix("tool_comm_check", 0, 1);
		log_error("%s", e.msg);
		return e.code;
	}
	log_set_prefix("tool_comm_check", proc.rank, proc.size);
	const char *backend = env_str("PP_CHECK_BACKEND", "mpi");
	on_device = !strcmp(backend, "nccl");
	double timeout = atof(env_str("PP_CHECK_TIMEOUT", "60"));
	if (comm_init(&world, backend, &proc, timeout, &e)) {
		log_error("%s", e.msg);
		comm_abort(NULL, e.code, e.msg);
	}
	if (proc.rank == 0)
		printf("# %s: %d rank(s), %d on this host, timeout %g s\n", world->ops->name,
		       proc.size, proc.local_size, world->timeout);

	int locals_ok = proc.local_rank >= 0 && proc.local_rank < proc.local_size &&
			proc.local_size <= proc.size && proc.peers[proc.rank].pid == getpid();
	report(locals_ok, "boot: local rank and size, own pid in the peer table",
	       "local %d of %d, job size %d", proc.local_rank, proc.local_size, proc.size);
	char blob[128], got[128];
	for (int i = 0; i < 128; i++)
		blob[i] = (char)(proc.rank == proc.size - 1 ? i * 3 + 1 : 0);
	int rc = boot_exchange(&proc, "check.blob", blob, sizeof blob, proc.size - 1, got, &e);
	int ok = !rc;
	for (int i = 0; ok && i < 128; i++)
		ok = got[i] == (char)(i * 3 + 1);
	report(ok, "boot_exchange: 128 bytes from the last rank reach every rank", "%s",
	       rc ? e.msg : "wrong bytes");

	check_device();

	const char *fault = getenv("PP_CHECK_FAULT");
	if (fault && !strcmp(fault, "none")) {
		/* the boot checks only */
	} else if (fault && *fault) {
		fault_in_the_middle(fault, atoi(env_str("PP_CHECK_FAULT_RANK", "1")));
	} else {
		check_group(world, "world");
		check_other_types();
		check_splits();
		check_errors();
	}

	int failed = th_failed;
	comm_free(world);
	boot_fini(&proc);
	return failed ? 1 : 0;
}
