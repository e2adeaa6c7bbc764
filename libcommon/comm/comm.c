/* What the comm backends share: argument checks, the split plan, the
 * timeout message that names the peer at fault, and the one wait loop
 * (comm_poll) with its polling pace. */
#include "comm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pp_comm *comm_new(const pp_comm_ops *ops, pp_proc *proc, const char *name, int rank, int size,
		  double timeout)
{
	pp_comm *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->world = calloc((size_t)size, sizeof *c->world);
	if (!c->world) {
		free(c);
		return NULL;
	}
	c->ops = ops, c->proc = proc, c->rank = rank, c->size = size;
	c->timeout = timeout > 0 ? timeout : PP_COMM_TIMEOUT_DEFAULT;
	snprintf(c->name, sizeof c->name, "%s", name ? name : "?");
	return c;
}

void comm_delete(pp_comm *c)
{
	if (!c)
		return;
	free(c->world);
	free(c);
}

/* "allreduce on 'dp' (rank 1 of 4)" */
static void where(const pp_comm *c, const char *op, char *buf, size_t size)
{
	snprintf(buf, size, "%s on '%s' (rank %d of %d)", op, c->name, c->rank, c->size);
}

int comm_check(const pp_comm *c, const char *op, pp_dtype t, int redop, pp_err *e)
{
	char w[96];
	if (comm_dtype_size(t) == 0) {
		where(c, op, w, sizeof w);
		return pp_errorf(e, PP_EUSAGE, "%s: unknown data type %d", w, (int)t);
	}
	if (redop != -1 && redop != PP_OP_SUM && redop != PP_OP_MAX) {
		where(c, op, w, sizeof w);
		return pp_errorf(e, PP_EUSAGE, "%s: unknown reduction %d", w, redop);
	}
	if (redop != -1 && t == PP_DT_BYTE) {
		where(c, op, w, sizeof w);
		return pp_errorf(e, PP_EUSAGE, "%s: cannot reduce bytes; use a numeric type", w);
	}
	return 0;
}

int comm_check_rank(const pp_comm *c, const char *op, const char *what, int r, int allow_none,
		    pp_err *e)
{
	if ((r >= 0 && r < c->size) || (allow_none && r == -1))
		return 0;
	char w[96];
	where(c, op, w, sizeof w);
	return pp_errorf(e, PP_EUSAGE, "%s: %s %d is not a rank of 0..%d", w, what, r, c->size - 1);
}

int comm_check_tag(const pp_comm *c, const char *op, int tag, pp_err *e)
{
	if (tag >= 0 && tag <= 32767)
		return 0;
	char w[96];
	where(c, op, w, sizeof w);
	return pp_errorf(e, PP_EUSAGE, "%s: tag %d outside 0..32767", w, tag);
}

void comm_split_plan(const pp_comm *c, const int *ckeys, int *rank, int *size, int *world)
{
	int color = ckeys[2 * c->rank], n = 0;
	*rank = -1;
	/* insertion by (key, rank in c): groups are small, n^2 is fine */
	for (int r = 0; r < c->size; r++) {
		if (color < 0 || ckeys[2 * r] != color)
			continue;
		int k = ckeys[2 * r + 1], at = n;
		while (at > 0) {
			int prev = world[at - 1]; /* holds the rank in c until the end */
			if (ckeys[2 * prev + 1] <= k)
				break;
			world[at] = world[at - 1];
			at--;
		}
		world[at] = r;
		n++;
	}
	for (int i = 0; i < n; i++) {
		if (world[i] == c->rank)
			*rank = i;
		world[i] = c->world[world[i]];
	}
	*size = n;
}

/* What boot can tell about the suspects, peers (ranks of c; at most 8) or
 * all of c; returns how many have exited. */
static int describe(const pp_comm *c, const int *peers, int n, char *buf, size_t size)
{
	int job[8];
	if (!peers || n > 8)
		return boot_describe_peers(c->proc, c->world, c->size, buf, size);
	int k = 0;
	for (int i = 0; i < n; i++)
		if (peers[i] >= 0 && peers[i] < c->size)
			job[k++] = c->world[peers[i]];
	return boot_describe_peers(c->proc, job, k, buf, size);
}

int comm_fail_error(const pp_comm *c, const char *op, const int *peers, int n, const char *why,
		    pp_err *e)
{
	char w[96], who[768] = "";
	where(c, op, w, sizeof w);
	describe(c, peers, n, who, sizeof who);
	return pp_errorf(e, PP_ERUNTIME, "%s failed: %s; %s", w, why, who);
}

double comm_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The state of one wait (see comm_poll). */
typedef struct {
	const pp_comm *c;
	const char *op;
	const int *peers; /* NULL: all of c */
	int npeers;
	double t0, next_scan;
	int seen_dead;  /* the last scan found a suspect gone */
	char dead[640]; /* who, as the first scan that saw it said */
} watch;

/* 0 while the wait may go on; the error that ends it otherwise */
static int watch_poll(watch *w, pp_err *e)
{
	const pp_comm *c = w->c;
	char at[96];
	double now = comm_now(), waited = now - w->t0;
	if (waited > c->timeout) {
		char who[768] = "";
		where(c, w->op, at, sizeof at);
		if (w->seen_dead)
			snprintf(who, sizeof who, "%s", w->dead);
		else
			describe(c, w->peers, w->npeers, who, sizeof who);
		return pp_errorf(e, PP_ERUNTIME, "%s timed out after %g s: %s", at, c->timeout,
				 who);
	}
	if (now >= w->next_scan) {
		char who[sizeof w->dead] = "";
		w->next_scan = now + 1.0;
		int dead = describe(c, w->peers, w->npeers, who, sizeof who) > 0;
		if (dead && w->seen_dead) {
			where(c, w->op, at, sizeof at);
			return pp_errorf(e, PP_ERUNTIME, "%s failed after %.0f s: %s", at, waited,
					 w->dead);
		}
		if (dead)
			memcpy(w->dead, who, sizeof who);
		w->seen_dead = dead;
	}
	if (waited < 1.0) {
		sched_yield();
	} else {
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

int comm_poll(const pp_comm *c, const char *op, const int *peers, int npeers,
	      int (*poll)(void *arg, int *done, pp_err *e), void *arg, pp_err *e)
{
	watch w = {.c = c, .op = op, .peers = peers, .npeers = npeers};
	w.t0 = comm_now();
	w.next_scan = w.t0 + 1.0;
	for (;;) {
		int done = 0, rc = poll(arg, &done, e);
		if (rc || done)
			return rc;
		if ((rc = watch_poll(&w, e)))
			return rc;
	}
}

static int poll_req(void *arg, int *done, pp_err *e)
{
	pp_comm_req *r = arg;
	return r->c->ops->progress(r, done, e);
}

int comm_wait(pp_comm_req *r, pp_err *e)
{
	int rc = comm_poll(r->c, r->op, r->npeers ? r->peers : NULL, r->npeers, poll_req, r, e);
	r->c->ops->release(r, rc != 0);
	return rc;
}

int comm_test(pp_comm_req *r, int *done, pp_err *e)
{
	*done = 0;
	int rc = r->c->ops->progress(r, done, e);
	if (rc || *done) {
		r->c->ops->release(r, rc != 0);
		*done = 1;
	}
	return rc;
}

int comm_check_exchange(const pp_comm *c, const char *op, pp_dtype t, int dst, int src, int tag,
			pp_err *e)
{
	int rc = comm_check(c, op, t, -1, e);
	if (!rc)
		rc = comm_check_rank(c, op, "destination", dst, 1, e);
	if (!rc)
		rc = comm_check_rank(c, op, "source", src, 1, e);
	if (!rc)
		rc = comm_check_tag(c, op, tag, e);
	return rc;
}
