/* Pipeline schedules (see schedule.h): per-rank compute orders, message
 * placement for blocking point-to-point, and the simulator. */
#include "schedule.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const schedule_kind_names[SCHED_NKINDS + 1] = {"gpipe", "1f1b", "eager1f1b",
							     "interleaved1f1b", "zbh1", NULL};
static const char *const op_names[] = {"FWD",	   "BWD",      "BWD_I",	    "BWD_W",
				       "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};

const sched_costs schedule_ref_costs = {1, 2, 1};

int schedule_kind_parse(const char *name, sched_kind *kind, pp_err *e)
{
	for (int k = 0; k < SCHED_NKINDS; k++)
		if (name && !strcmp(name, schedule_kind_names[k])) {
			*kind = (sched_kind)k;
			return PP_OK;
		}
	return pp_errorf(e, PP_EUSAGE,
			 "schedule \"%s\": expected gpipe, 1f1b, eager1f1b, interleaved1f1b or zbh1",
			 name ? name : "(null)");
}

const char *schedule_kind_name(sched_kind kind)
{
	return kind >= 0 && kind < SCHED_NKINDS ? schedule_kind_names[kind] : "?";
}

const char *schedule_op_name(sched_op op)
{
	return op >= 0 && op <= SCHED_RECV_GRAD ? op_names[op] : "?";
}

static bool is_compute(sched_op op) { return op <= SCHED_BWD_W; }
static bool is_send(sched_op op) { return op == SCHED_SEND_ACT || op == SCHED_SEND_GRAD; }

char *schedule_action_format(const sched_action *a, char *buf, size_t size)
{
	if (is_compute(a->op))
		snprintf(buf, size, "%s(mb %d, vstage %d)", schedule_op_name(a->op), a->mb, a->vstage);
	else
		snprintf(buf, size, "%s(mb %d, vstage %d %s rank %d)", schedule_op_name(a->op), a->mb,
			 a->vstage, is_send(a->op) ? "->" : "<-", a->peer);
	return buf;
}

int schedule_check(sched_kind kind, int p, int v, int m, int rank, pp_err *e)
{
	if (kind < 0 || kind >= SCHED_NKINDS)
		return pp_errorf(e, PP_EUSAGE, "schedule kind %d: expected 0 .. %d", (int)kind,
				 SCHED_NKINDS - 1);
	const char *name = schedule_kind_names[kind];
	if (p < 1)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: p=%d pipeline ranks, expected >= 1", name, p);
	if (v < 1)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: v=%d virtual stages per rank, expected >= 1",
				 name, v);
	if (m < 1)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: m=%d microbatches, expected >= 1", name, m);
	if (v > 1 && kind != SCHED_INTERLEAVED_1F1B)
		return pp_errorf(e, PP_EUSAGE,
				 "schedule %s: v=%d virtual stages per rank needs interleaved1f1b "
				 "(expected v=1)",
				 name, v);
	if (kind == SCHED_INTERLEAVED_1F1B && m % p)
		return pp_errorf(e, PP_EUSAGE,
				 "schedule %s: m=%d microbatches is not a multiple of p=%d", name, m,
				 p);
	if ((long long)p * v * m > SCHED_MAX_UNITS)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: p*v*m = %d*%d*%d exceeds %d", name, p, v,
				 m, SCHED_MAX_UNITS);
	if (rank >= p)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: rank=%d, expected 0 .. %d", name, rank,
				 p - 1);
	return PP_OK;
}

/* ---- compute orders ---- */

typedef struct {
	sched_action *a;
	int n;
} alist;

static void push(alist *l, sched_op op, int mb, int vstage, int peer)
{
	l->a[l->n++] = (sched_action){op, mb, vstage, peer};
}

static int imin(int a, int b) { return a < b ? a : b; }

/* 1f1b and eager1f1b: w warm-up forwards, then B, F alternating. */
static void order_1f1b(alist *l, int m, int r, int w)
{
	int nf = 0, nb = 0;
	while (nf < w)
		push(l, SCHED_FWD, nf++, r, -1);
	while (nb < m) {
		push(l, SCHED_BWD, nb++, r, -1);
		if (nf < m)
			push(l, SCHED_FWD, nf++, r, -1);
	}
}

/* Megatron's interleaved order: unit k of m v, see schedule.h. */
static void interleaved_unit(int p, int v, int r, int k, bool fwd, int *mb, int *vstage)
{
	int chunk = k % (p * v) / p;
	*mb = k / (p * v) * p + k % p;
	*vstage = (fwd ? chunk : v - 1 - chunk) * p + r;
}

static void order_interleaved(alist *l, int p, int v, int m, int r)
{
	int total = m * v, w = imin(2 * (p - r - 1) + (v - 1) * p, total), mb, s;
	for (int k = 0; k < w; k++) {
		interleaved_unit(p, v, r, k, true, &mb, &s);
		push(l, SCHED_FWD, mb, s, -1);
	}
	for (int k = 0; k < total; k++) {
		if (w + k < total) {
			interleaved_unit(p, v, r, w + k, true, &mb, &s);
			push(l, SCHED_FWD, mb, s, -1);
		}
		interleaved_unit(p, v, r, k, false, &mb, &s);
		push(l, SCHED_BWD, mb, s, -1);
	}
}

/* JaxPP's ZeroBubble: F x (p - r), (BWD_I, F) x r, then the rotation BWD_I,
 * BWD_W, F; a slot whose kind has nothing left to run is skipped. */
static void order_zbh1(alist *l, int p, int m, int r)
{
	int nf = 0, nb = 0, nw = 0;
	for (int k = 0; k < p - r; k++)
		if (nf < m)
			push(l, SCHED_FWD, nf++, r, -1);
	for (int k = 0; k < r; k++) {
		if (nb < nf)
			push(l, SCHED_BWD_I, nb++, r, -1);
		if (nf < m)
			push(l, SCHED_FWD, nf++, r, -1);
	}
	for (int next = 0; nw < m;) { /* 0 BWD_I, 1 BWD_W, 2 FWD */
		for (int tries = 0; tries < 3; tries++, next = (next + 1) % 3) {
			if (next == 0 && nb < nf) {
				push(l, SCHED_BWD_I, nb++, r, -1);
				break;
			}
			if (next == 1 && nw < nb) {
				push(l, SCHED_BWD_W, nw++, r, -1);
				break;
			}
			if (next == 2 && nf < m) {
				push(l, SCHED_FWD, nf++, r, -1);
				break;
			}
		}
		next = (next + 1) % 3;
	}
}

static void compute_order(sched_kind kind, int p, int v, int m, int r, alist *l)
{
	switch (kind) {
	case SCHED_GPIPE:
		for (int i = 0; i < m; i++)
			push(l, SCHED_FWD, i, r, -1);
		for (int i = 0; i < m; i++)
			push(l, SCHED_BWD, i, r, -1);
		break;
	case SCHED_1F1B:
		order_1f1b(l, m, r, imin(p - r, m));
		break;
	case SCHED_EAGER_1F1B:
		order_1f1b(l, m, r, imin(2 * (p - r) - 1, m));
		break;
	case SCHED_INTERLEAVED_1F1B:
		order_interleaved(l, p, v, m, r);
		break;
	default:
		order_zbh1(l, p, m, r);
		break;
	}
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

static const sched_costs *costs_or_ref(const sched_costs *c) { return c ? c : &schedule_ref_costs; }

static double cost_of(const sched_costs *c, sched_op op)
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
					end[r] = t + cost_of(&schedule_ref_costs, a->op);
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

int schedule_build_all(sched_kind kind, int p, int v, int m, sched_action **lists, int *counts,
		       pp_err *e)
{
	int rc = schedule_check(kind, p, v, m, -1, e);
	if (rc)
		return rc;
	geom g = {p, p * v, m};
	/* computes per rank: 2 m v (3 m for zbh1); each sends and receives at
	 * most one message */
	int ncomp = (kind == SCHED_ZBH1 ? 3 : 2) * m * v;
	alist *comp = calloc((size_t)p, sizeof *comp), *out = calloc((size_t)p, sizeof *out);
	if (!comp || !out)
		rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
	for (int r = 0; !rc && r < p; r++) {
		comp[r].a = malloc(sizeof(sched_action) * (size_t)ncomp);
		out[r].a = malloc(sizeof(sched_action) * (size_t)ncomp * 3);
		if (!comp[r].a || !out[r].a)
			rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
		else
			compute_order(kind, p, v, m, r, &comp[r]);
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

int schedule_build(sched_kind kind, int p, int v, int m, int rank, sched_action **actions,
		   int *n, pp_err *e)
{
	int rc = schedule_check(kind, p, v, m, rank, e);
	if (rc)
		return rc;
	if (rank < 0)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: rank=%d, expected 0 .. %d",
				 schedule_kind_names[kind], rank, p - 1);
	sched_action **lists = calloc((size_t)p, sizeof *lists);
	int *counts = calloc((size_t)p, sizeof *counts);
	if (!lists || !counts)
		rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
	if (!rc)
		rc = schedule_build_all(kind, p, v, m, lists, counts, e);
	if (!rc) {
		*actions = lists[rank];
		*n = counts[rank];
		lists[rank] = NULL;
		schedule_free_all(p, lists);
	}
	free(lists);
	free(counts);
	return rc;
}

/* ---- simulation ---- */

static int check_costs(const sched_costs *c, pp_err *e)
{
	if (c->fwd >= 0 && c->bwd >= 0 && c->bwd_w >= 0 && c->bwd_w <= c->bwd)
		return PP_OK;
	return pp_errorf(e, PP_EUSAGE,
			 "simulate: costs fwd=%g bwd=%g bwd_w=%g: expected >= 0 and bwd_w <= bwd",
			 c->fwd, c->bwd, c->bwd_w);
}

void schedule_sim_free(sched_sim *s)
{
	free(s->rank);
	s->rank = NULL;
}

/* Per (stage, mb) state of a simulation. */
typedef struct {
	char fwd, bwd_i, bwd_w;	      /* done; bwd_i and bwd_w both for a full BWD */
	char act_in, grad_in;	      /* its input arrived on its rank */
	double act_ready, grad_ready; /* non-blocking model: its outputs' ready times */
} unit_state;

typedef struct {
	int p, S, m;
	sched_action *const *lists;
	const int *counts;
	const sched_costs *c;
	double *const *dur;	/* per action, when given: dur[r][i] for rank r's action i */
	unit_state *u;		/* S m, stage-major */
	int *pos, *act, *stash; /* per rank: next action, activations and stashes held */
	double *clock, *aclock; /* per rank: blocking and non-blocking time */
	sched_rank_stats *st;
} sim;

static bool same_msg(const sched_action *snd, const sched_action *rcv, int from, int to)
{
	return rcv->op == snd->op + 1 && rcv->mb == snd->mb && rcv->vstage == snd->vstage &&
	       snd->peer == to && rcv->peer == from;
}

/* Why compute a cannot run on rank r now, or NULL; *ready: when its inputs
 * are ready in the non-blocking model. */
static const char *compute_blocker(const sim *s, int r, const sched_action *a, double *ready)
{
	const int m = s->m;
	const unit_state *x = &s->u[a->vstage * m + a->mb];
	*ready = s->aclock[r];
	if (a->vstage % s->p != r)
		return "belongs to another rank";
	if (a->op == SCHED_FWD) {
		if (x->fwd)
			return "runs twice";
		if (a->vstage == 0)
			return NULL;
		if (!x->act_in)
			return "runs before its input activation arrived";
		if (x[-m].act_ready > *ready)
			*ready = x[-m].act_ready;
		return NULL;
	}
	if (a->op == SCHED_BWD_W)
		return x->bwd_w ? "runs twice" : !x->bwd_i ? "runs before its BWD_I" : NULL;
	if (x->bwd_i)
		return "runs twice";
	if (!x->fwd)
		return "runs before its FWD";
	if (a->vstage == s->S - 1)
		return NULL;
	if (!x->grad_in)
		return "runs before its input gradient arrived";
	if (x[m].grad_ready > *ready)
		*ready = x[m].grad_ready;
	return NULL;
}

static void run_compute(sim *s, int r, const sched_action *a, double ready)
{
	const int m = s->m;
	unit_state *x = &s->u[a->vstage * m + a->mb];
	sched_rank_stats *st = &s->st[r];
	double t = s->dur ? s->dur[r][s->pos[r]] : cost_of(s->c, a->op);
	s->clock[r] += t;
	s->aclock[r] = ready + t;
	st->busy += t;
	if (a->op == SCHED_FWD) {
		x->fwd = 1;
		x->act_ready = s->aclock[r];
		if (a->vstage < s->S - 1 && (a->vstage + 1) % s->p == r)
			x[m].act_in = 1;
		if (++s->act[r] > st->peak_act)
			st->peak_act = s->act[r];
	} else if (a->op == SCHED_BWD_W) {
		x->bwd_w = 1;
		s->stash[r]--;
	} else {
		x->bwd_i = 1;
		x->bwd_w |= a->op == SCHED_BWD;
		x->grad_ready = s->aclock[r];
		if (a->vstage > 0 && (a->vstage - 1) % s->p == r)
			x[-m].grad_in = 1;
		s->act[r]--;
		if (a->op == SCHED_BWD_I && ++s->stash[r] > st->peak_wstash)
			st->peak_wstash = s->stash[r];
	}
	if (s->act[r] + s->stash[r] > st->peak_held)
		st->peak_held = s->act[r] + s->stash[r];
}

/* Runs rank r's next action if it can: 1 when it ran, 0 when it waits for
 * its peer, -1 on an invalid action (e says why). */
static int sim_step(sim *s, int r, pp_err *e)
{
	const int m = s->m, S = s->S;
	const sched_action *a = &s->lists[r][s->pos[r]];
	char what[96];
	const char *bad = NULL;
	if ((int)a->op < 0 || a->op > SCHED_RECV_GRAD || a->mb < 0 || a->mb >= m ||
	    a->vstage < 0 || a->vstage >= S ||
	    (!is_compute(a->op) && (a->peer < 0 || a->peer >= s->p || a->peer == r)))
		bad = "out of range";
	else if (is_compute(a->op)) {
		double ready;
		bad = compute_blocker(s, r, a, &ready);
		if (!bad) {
			run_compute(s, r, a, ready);
			s->pos[r]++;
			return 1;
		}
	} else {
		bool send = is_send(a->op), grad = a->op >= SCHED_SEND_GRAD;
		int q = a->peer, from = send ? r : q, to = send ? q : r;
		int dest = grad ? a->vstage - 1 : a->vstage + 1;
		unit_state *x = &s->u[a->vstage * m + a->mb];
		if (dest < 0 || dest >= S || dest % s->p != to || a->vstage % s->p != from)
			bad = "names the wrong stage or peer";
		else if (send && !(grad ? x->bwd_i : x->fwd))
			bad = "sends what has not been computed";
		else {
			if (s->pos[q] >= s->counts[q])
				return 0;
			const sched_action *b = &s->lists[q][s->pos[q]];
			if (!(send ? same_msg(a, b, r, q) : same_msg(b, a, q, r)))
				return 0;
			double t = s->clock[r] > s->clock[q] ? s->clock[r] : s->clock[q];
			s->clock[r] = s->clock[q] = t;
			if (grad)
				x[-m].grad_in = 1;
			else
				x[m].act_in = 1;
			s->pos[r]++;
			s->pos[q]++;
			return 1;
		}
	}
	pp_errorf(e, PP_ERUNTIME, "simulate: rank %d action %d %s %s", r, s->pos[r],
		  schedule_action_format(a, what, sizeof what), bad);
	return -1;
}

/* PP_ERUNTIME naming every rank that has actions left and the one it is
 * stuck at. */
static int deadlock_error(const sim *s, pp_err *e)
{
	char msg[sizeof e->msg], what[96];
	int len = snprintf(msg, sizeof msg, "simulate: deadlock:");
	for (int r = 0; r < s->p; r++) {
		if (s->pos[r] >= s->counts[r])
			continue;
		if (len > (int)sizeof msg - 120) {
			len += snprintf(msg + len, sizeof msg - len, " ...");
			break;
		}
		len += snprintf(msg + len, sizeof msg - len, " rank %d waits at action %d %s;", r,
				s->pos[r],
				schedule_action_format(&s->lists[r][s->pos[r]], what, sizeof what));
	}
	if (msg[len - 1] == ';')
		msg[len - 1] = 0;
	return pp_errorf(e, PP_ERUNTIME, "%s", msg);
}

static int simulate(int p, int v, int m, sched_action *const *lists, const int *counts,
		    const sched_costs *c, double *const *dur, sched_sim *out, pp_err *e)
{
	memset(out, 0, sizeof *out);
	c = costs_or_ref(c);
	if (p < 1 || v < 1 || m < 1 || (long long)p * v * m > SCHED_MAX_UNITS)
		return pp_errorf(e, PP_EUSAGE, "simulate: p=%d v=%d m=%d out of range", p, v, m);
	int rc = dur ? 0 : check_costs(c, e);
	for (int r = 0; dur && r < p && !rc; r++)
		for (int i = 0; i < counts[r] && !rc; i++)
			if (!(dur[r][i] >= 0))
				rc = pp_errorf(e, PP_EUSAGE, "simulate: rank %d action %d takes %g", r, i,
					       dur[r][i]);
	if (rc)
		return rc;
	sim s = {p, p * v, m, lists, counts, c, dur, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
	s.u = calloc((size_t)s.S * m, sizeof *s.u);
	s.pos = calloc((size_t)p, sizeof *s.pos);
	s.act = calloc((size_t)p, sizeof *s.act);
	s.stash = calloc((size_t)p, sizeof *s.stash);
	s.clock = calloc((size_t)p, sizeof *s.clock);
	s.aclock = calloc((size_t)p, sizeof *s.aclock);
	s.st = calloc((size_t)p, sizeof *s.st);
	if (!s.u || !s.pos || !s.act || !s.stash || !s.clock || !s.aclock || !s.st) {
		rc = pp_errorf(e, PP_ERUNTIME, "simulate: out of memory");
		goto done;
	}
	/* Times do not depend on the order ranks are visited in: a compute
	 * adds its cost to its rank's clock, a transfer sets both clocks to the
	 * later one. */
	for (bool progress = true; progress && !rc;) {
		progress = false;
		for (int r = 0; r < p && !rc; r++)
			while (s.pos[r] < counts[r]) {
				int k = sim_step(&s, r, e);
				if (k <= 0) {
					rc = k < 0 ? PP_ERUNTIME : PP_OK;
					break;
				}
				progress = true;
			}
	}
	for (int r = 0; !rc && r < p; r++)
		if (s.pos[r] < counts[r])
			rc = deadlock_error(&s, e);
	for (int i = 0; !rc && i < s.S * m; i++) {
		const unit_state *x = &s.u[i];
		const char *op = !x->fwd ? "FWD" : !x->bwd_i ? "BWD" : !x->bwd_w ? "BWD_W" : NULL;
		if (op)
			rc = pp_errorf(e, PP_ERUNTIME, "simulate: %s(mb %d, vstage %d) never runs",
				       op, i % m, i / m);
	}
	if (rc)
		goto done;
	out->p = p;
	for (int r = 0; r < p; r++) {
		s.st[r].finish = s.clock[r];
		if (s.clock[r] > out->makespan)
			out->makespan = s.clock[r];
		if (s.aclock[r] > out->critical_path)
			out->critical_path = s.aclock[r];
	}
	double idle = 0;
	for (int r = 0; r < p; r++) {
		s.st[r].idle = out->makespan - s.st[r].busy;
		idle += s.st[r].idle;
	}
	out->bubble = out->makespan > 0 ? idle / (p * out->makespan) : 0;
	out->rank = s.st;
	s.st = NULL;
done:
	free(s.u);
	free(s.pos);
	free(s.act);
	free(s.stash);
	free(s.clock);
	free(s.aclock);
	free(s.st);
	return rc;
}

int schedule_simulate_lists(int p, int v, int m, sched_action *const *lists, const int *counts,
			    const sched_costs *c, sched_sim *out, pp_err *e)
{
	return simulate(p, v, m, lists, counts, c, NULL, out, e);
}

int schedule_simulate_timed(int p, int v, int m, sched_action *const *lists, const int *counts,
			    double *const *dur, sched_sim *out, pp_err *e)
{
	return simulate(p, v, m, lists, counts, NULL, dur, out, e);
}

int schedule_simulate(sched_kind kind, int p, int v, int m, const sched_costs *c, sched_sim *out,
		      pp_err *e)
{
	memset(out, 0, sizeof *out);
	int rc = schedule_check(kind, p, v, m, -1, e);
	if (!rc)
		rc = check_costs(costs_or_ref(c), e);
	if (rc)
		return rc;
	sched_action **lists = calloc((size_t)p, sizeof *lists);
	int *counts = calloc((size_t)p, sizeof *counts);
	if (!lists || !counts)
		rc = pp_errorf(e, PP_ERUNTIME, "schedule: out of memory");
	if (!rc)
		rc = schedule_build_all(kind, p, v, m, lists, counts, e);
	if (!rc) {
		rc = schedule_simulate_lists(p, v, m, lists, counts, c, out, e);
		schedule_free_all(p, lists);
		if (rc)
			pp_err_prefix(e, "schedule %s p=%d v=%d m=%d", schedule_kind_names[kind], p, v, m);
	}
	free(lists);
	free(counts);
	return rc;
}

/* ---- closed forms ---- */

double schedule_ideal_time(sched_kind kind, int p, int v, int m, const sched_costs *c)
{
	if (schedule_check(kind, p, v, m, -1, NULL))
		return -1;
	c = costs_or_ref(c);
	const double f = c->fwd, b = c->bwd, w = c->bwd_w;
	if (kind != SCHED_ZBH1)
		return ((double)m * v + p - 1) * (f + b);
	if (w > f || w > b - w)
		return -1;
	return m * (f + b) + (p - 1) * (f + b - 2 * w) + (m < p ? (p - m) * w : 0);
}

double schedule_bubble_theory(sched_kind kind, int p, int v, int m, const sched_costs *c)
{
	double t = schedule_ideal_time(kind, p, v, m, c);
	if (t <= 0)
		return t < 0 ? -1 : 0;
	c = costs_or_ref(c);
	return (t - (double)m * v * (c->fwd + c->bwd)) / t;
}

int schedule_peak_act_theory(sched_kind kind, int p, int v, int m, int rank)
{
	if (schedule_check(kind, p, v, m, rank, NULL) || rank < 0)
		return -1;
	switch (kind) {
	case SCHED_GPIPE:
		return m;
	case SCHED_EAGER_1F1B:
		return imin(2 * (p - rank) - 1, m);
	case SCHED_INTERLEAVED_1F1B:
		return imin(2 * (p - rank - 1) + (v - 1) * p + 1, m * v);
	default:
		return imin(p - rank, m);
	}
}

int schedule_peak_wstash_theory(sched_kind kind, int p, int v, int m, int rank)
{
	if (schedule_check(kind, p, v, m, rank, NULL) || rank < 0)
		return -1;
	return kind == SCHED_ZBH1 ? imin(rank + 1, m) : 0;
}

int schedule_peak_held_theory(sched_kind kind, int p, int v, int m, int rank)
{
	if (kind == SCHED_ZBH1)
		return schedule_check(kind, p, v, m, rank, NULL) || rank < 0 ? -1 : imin(p, m);
	return schedule_peak_act_theory(kind, p, v, m, rank);
}

const char *schedule_bubble_formula(sched_kind kind)
{
	switch (kind) {
	case SCHED_INTERLEAVED_1F1B:
		return "(p-1)/(v*m+p-1)";
	case SCHED_ZBH1:
		return "(p-1+max(0,p-m))/(3*m+p-1+max(0,p-m))";
	default:
		return "(p-1)/(m+p-1)";
	}
}

const char *schedule_peak_act_formula(sched_kind kind)
{
	switch (kind) {
	case SCHED_GPIPE:
		return "m";
	case SCHED_EAGER_1F1B:
		return "min(2*(p-r)-1, m)";
	case SCHED_INTERLEAVED_1F1B:
		return "min(2*(p-r-1)+(v-1)*p+1, v*m)";
	default:
		return "min(p-r, m)";
	}
}
