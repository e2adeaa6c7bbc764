/* Action lists (see schedule.h): each rank's compute order with the
 * messages placed for blocking point-to-point, the names of actions, and
 * the slots a rank's chunks need. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const op_names[] = {"FWD",      "BWD",      "BWD_I",     "BWD_W",
				       "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};

const sched_costs schedule_ref_costs = {1, 2, 1};

const char *schedule_op_name(sched_op op)
{
	return op >= 0 && op <= SCHED_RECV_GRAD ? op_names[op] : "?";
}

char *schedule_action_format(const sched_action *a, char *buf, size_t size)
{
	if (is_compute(a->op))
		snprintf(buf, size, "%s(mb %d, vstage %d)", schedule_op_name(a->op), a->mb,
			 a->vstage);
	else
		snprintf(buf, size, "%s(mb %d, vstage %d %s rank %d)", schedule_op_name(a->op),
			 a->mb, a->vstage, is_send(a->op) ? "->" : "<-", a->peer);
	return buf;
}

/* ---- messages ---- */

/* Message ids: (kind, stage, mb) -> (kind * S + s) * m + mb, kind 0 for the
 * activation of FWD(mb, s), 1 for the input gradient of BWD(mb, s). */
typedef struct {
	int p, S, m;
} geom;

static int msg_id(const geom *g, int grad, int s, int mb) { return (grad * g->S + s) * g->m + mb; }

/* The message compute a needs from another stage: its id, or -1. */
static int msg_in(const geom *g, const sched_action *a)
{
	if (a->op == SCHED_FWD)
		return a->vstage > 0 ? msg_id(g, 0, a->vstage - 1, a->mb) : -1;
	if (a->op == SCHED_BWD || a->op == SCHED_BWD_I)
		return a->vstage < g->S - 1 ? msg_id(g, 1, a->vstage + 1, a->mb) : -1;
	return -1;
}

/* The message compute a produces for another stage: its id, or -1. */
static int msg_out(const geom *g, const sched_action *a)
{
	if (a->op == SCHED_FWD)
		return a->vstage < g->S - 1 ? msg_id(g, 0, a->vstage, a->mb) : -1;
	if (a->op == SCHED_BWD || a->op == SCHED_BWD_I)
		return a->vstage > 0 ? msg_id(g, 1, a->vstage, a->mb) : -1;
	return -1;
}

/* A message's fields and the rank that needs it. */
static void msg_fields(const geom *g, int id, int *grad, int *s, int *mb, int *to)
{
	*mb = id % g->m;
	*s = id / g->m % g->S;
	*grad = id / g->m / g->S;
	*to = (*grad ? *s - 1 : *s + 1) % g->p;
}

double schedule_cost_of(const sched_costs *c, sched_op op)
{
	switch (op) {
	case SCHED_FWD:
		return c->fwd;
	case SCHED_BWD:
		return c->bwd;
	case SCHED_BWD_I:
		return c->bwd - c->bwd_w;
	case SCHED_BWD_W:
		return c->bwd_w;
	default:
		return 0;
	}
}

/* Runs the compute orders at the reference costs with a transfer at every
 * instant when a message is ready and both its ranks are between computes,
 * and appends every compute, send and receive to out[] in that one global
 * order. A rank whose next compute is ready starts it rather than wait for a
 * busy receiver; one whose next input has not arrived waits. */
static int place_messages(sched_kind kind, const geom *g, alist *comp, alist *out, pp_err *e)
{
	const int p = g->p, nmsg = 2 * g->S * g->m;
	int rc = PP_OK;
	char *delivered = calloc((size_t)nmsg, 1);
	/* pending (produced, undelivered) messages of rank r in the order they
	 * were produced: pend[r * per ..], at most 2 m v of them */
	const int per = nmsg / p;
	int *pos = calloc((size_t)p, sizeof *pos), *pend = malloc(sizeof(int) * (size_t)nmsg);
	int *pend_n = calloc((size_t)p, sizeof *pend_n);
	double *end = malloc(sizeof(double) * (size_t)p);
	bool *busy = calloc((size_t)p, sizeof *busy);
	if (!delivered || !pos || !pend || !pend_n || !end || !busy) {
		rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
		goto done;
	}
	for (double t = 0;;) {
		for (int r = 0; r < p; r++)
			if (busy[r] && end[r] <= t) {
				busy[r] = false;
				int id = msg_out(g, &comp[r].a[pos[r] - 1]);
				if (id < 0)
					continue;
				int grad, s, mb, to;
				msg_fields(g, id, &grad, &s, &mb, &to);
				if (to == r)
					delivered[id] = 1;
				else
					pend[r * per + pend_n[r]++] = id;
			}
		for (int q = 0; q < p; q++) {
			if (busy[q])
				continue;
			int kept = 0;
			for (int k = 0; k < pend_n[q]; k++) {
				int id = pend[q * per + k], grad, s, mb, to;
				msg_fields(g, id, &grad, &s, &mb, &to);
				if (busy[to]) {
					pend[q * per + kept++] = id;
					continue;
				}
				push(&out[q], grad ? SCHED_SEND_GRAD : SCHED_SEND_ACT, mb, s, to);
				push(&out[to], grad ? SCHED_RECV_GRAD : SCHED_RECV_ACT, mb, s, q);
				delivered[id] = 1;
			}
			pend_n[q] = kept;
		}
		bool any = false, left = false;
		double next = 0;
		for (int r = 0; r < p; r++) {
			if (!busy[r] && pos[r] < comp[r].n) {
				const sched_action *a = &comp[r].a[pos[r]];
				int id = msg_in(g, a);
				if (id < 0 || delivered[id]) {
					push(&out[r], a->op, a->mb, a->vstage, -1);
					pos[r]++;
					busy[r] = true;
					end[r] = t + schedule_cost_of(&schedule_ref_costs, a->op);
				}
			}
			if (busy[r] && (!any || end[r] < next))
				next = end[r];
			any |= busy[r];
			left |= pos[r] < comp[r].n;
		}
		if (!any) {
			if (left)
				rc = pp_errorf(e, PP_ERUNTIME,
					       "schedule %s: internal error: compute orders stall",
					       schedule_kind_names[kind]);
			break;
		}
		t = next;
	}
done:
	free(delivered);
	free(pos);
	free(pend);
	free(pend_n);
	free(end);
	free(busy);
	return rc;
}

void schedule_free_all(int p, sched_action **lists)
{
	for (int r = 0; r < p; r++) {
		free(lists[r]);
		lists[r] = NULL;
	}
}

int schedule_lists_new(sched_kind kind, int p, int v, int m, sched_action ***lists, int **counts,
		       pp_err *e)
{
	*lists = calloc((size_t)p, sizeof **lists);
	*counts = calloc((size_t)p, sizeof **counts);
	if (!*lists || !*counts)
		return pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
	return schedule_build_all(kind, p, v, m, *lists, *counts, e);
}

void schedule_lists_free(int p, sched_action **lists, int *counts)
{
	if (lists)
		schedule_free_all(p, lists);
	free(lists);
	free(counts);
}

int schedule_build_all(sched_kind kind, int p, int v, int m, sched_action **lists, int *counts,
		       pp_err *e)
{
	int rc = schedule_check(kind, p, v, m, -1, e);
	if (rc)
		return rc;
	geom g = {p, p * v, m};
	/* computes per rank: 2 m v (3 m for zbh1); each sends and receives at
	 * most one message */
	int ncomp = schedule_computes(kind, v, m);
	alist *comp = calloc((size_t)p, sizeof *comp), *out = calloc((size_t)p, sizeof *out);
	if (!comp || !out)
		rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
	for (int r = 0; !rc && r < p; r++) {
		comp[r].a = malloc(sizeof(sched_action) * (size_t)ncomp);
		out[r].a = malloc(sizeof(sched_action) * (size_t)ncomp * 3);
		if (!comp[r].a || !out[r].a)
			rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
		else
			schedule_compute_order(kind, p, v, m, r, &comp[r]);
	}
	if (!rc)
		rc = place_messages(kind, &g, comp, out, e);
	for (int r = 0; comp && r < p; r++) {
		free(comp[r].a);
		if (rc)
			free(out[r].a);
		else {
			lists[r] = out[r].a;
			counts[r] = out[r].n;
		}
	}
	free(comp);
	free(out);
	return rc;
}

/* schedule_check for one rank's list: rank must be one of the p. */
static int check_one_rank(sched_kind kind, int p, int v, int m, int rank, pp_err *e)
{
	int rc = schedule_check(kind, p, v, m, rank, e);
	if (!rc && rank < 0)
		rc = pp_errorf(e, PP_EUSAGE, "schedule %s: rank=%d, expected 0 .. %d",
			       schedule_kind_names[kind], rank, p - 1);
	return rc;
}

int schedule_build(sched_kind kind, int p, int v, int m, int rank, sched_action **actions, int *n,
		   pp_err *e)
{
	int rc = check_one_rank(kind, p, v, m, rank, e);
	if (rc)
		return rc;
	sched_action **lists;
	int *counts;
	rc = schedule_lists_new(kind, p, v, m, &lists, &counts, e);
	if (!rc) {
		*actions = lists[rank];
		*n = counts[rank];
		lists[rank] = NULL;
	}
	schedule_lists_free(p, lists, counts);
	return rc;
}

int schedule_slots(sched_kind kind, int p, int v, int m, int rank, int *slots, pp_err *e)
{
	int rc = check_one_rank(kind, p, v, m, rank, e);
	if (rc)
		return rc;
	alist l = {malloc(sizeof(sched_action) * (size_t)schedule_computes(kind, v, m)), 0};
	int *live = calloc((size_t)v, sizeof *live);
	if (!l.a || !live) {
		free(l.a);
		free(live);
		return pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
	}
	schedule_compute_order(kind, p, v, m, rank, &l);
	for (int c = 0; c < v; c++)
		slots[c] = 0;
	for (int i = 0; i < l.n; i++) {
		int c = l.a[i].vstage / p;
		if (l.a[i].op == SCHED_FWD && ++live[c] > slots[c])
			slots[c] = live[c];
		if (schedule_ends_hold(l.a[i].op))
			live[c]--;
	}
	free(l.a);
	free(live);
	return PP_OK;
}
