/* The simulator (see schedule.h): every rank's list run together, with
 * blocking messages and, beside it, non-blocking zero-time ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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
	char fwd, bwd_i, bwd_w;       /* done; bwd_i and bwd_w both for a full BWD */
	char act_in, grad_in;         /* its input arrived on its rank */
	double act_ready, grad_ready; /* non-blocking model: its outputs' ready times */
} unit_state;

typedef struct {
	int p, S, m;
	sched_action *const *lists;
	const int *counts;
	const sched_costs *c;
	double *const *dur;     /* per action, when given: dur[r][i] for rank r's action i */
	unit_state *u;          /* S m, stage-major */
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
	double t = s->dur ? s->dur[r][s->pos[r]] : schedule_cost_of(s->c, a->op);
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
	if ((int)a->op < 0 || a->op > SCHED_RECV_GRAD || a->mb < 0 || a->mb >= m || a->vstage < 0 ||
	    a->vstage >= S ||
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
				rc = pp_errorf(e, PP_EUSAGE, "simulate: rank %d action %d takes %g",
					       r, i, dur[r][i]);
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
	sched_action **lists;
	int *counts;
	rc = schedule_lists_new(kind, p, v, m, &lists, &counts, e);
	if (!rc) {
		rc = schedule_simulate_lists(p, v, m, lists, counts, c, out, e);
		if (rc)
			pp_err_prefix(e, "schedule %s p=%d v=%d m=%d", schedule_kind_names[kind], p,
				      v, m);
	}
	schedule_lists_free(p, lists, counts);
	return rc;
}
