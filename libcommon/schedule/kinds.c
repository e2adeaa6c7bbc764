/* The schedule kinds, one row each (see schedule.h): the compute order of a
 * rank, what the kind accepts, and its closed forms. Nothing outside this
 * table asks which kind a schedule is; it asks the table. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char *const schedule_kind_names[SCHED_NKINDS + 1] = {"gpipe",           "1f1b", "eager1f1b",
							   "interleaved1f1b", "zbh1", NULL};

/* ---- compute orders ---- */

static void order_gpipe(alist *l, int p, int v, int m, int r)
{
	(void)p, (void)v;
	for (int i = 0; i < m; i++)
		push(l, SCHED_FWD, i, r, -1);
	for (int i = 0; i < m; i++)
		push(l, SCHED_BWD, i, r, -1);
}

/* 1f1b and eager1f1b: w warm-up forwards, then B, F alternating. */
static void order_warmup(alist *l, int m, int r, int w)
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

static void order_1f1b(alist *l, int p, int v, int m, int r)
{
	(void)v;
	order_warmup(l, m, r, imin(p - r, m));
}

static void order_eager(alist *l, int p, int v, int m, int r)
{
	(void)v;
	order_warmup(l, m, r, imin(2 * (p - r) - 1, m));
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
static void order_zbh1(alist *l, int p, int v, int m, int r)
{
	(void)v;
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

/* ---- closed forms (schedule.h), f = fwd, b = bwd, w = bwd_w ---- */

static double ideal_plain(int p, int v, int m, const sched_costs *c)
{
	return ((double)m * v + p - 1) * (c->fwd + c->bwd);
}

static double ideal_zbh1(int p, int v, int m, const sched_costs *c)
{
	(void)v;
	const double f = c->fwd, b = c->bwd, w = c->bwd_w;
	if (w > f || w > b - w)
		return -1;
	return m * (f + b) + (p - 1) * (f + b - 2 * w) + (m < p ? (p - m) * w : 0);
}

static int peak_all(int p, int v, int m, int r)
{
	(void)p, (void)v, (void)r;
	return m;
}
static int peak_1f1b(int p, int v, int m, int r)
{
	(void)v;
	return imin(p - r, m);
}
static int peak_eager(int p, int v, int m, int r)
{
	(void)v;
	return imin(2 * (p - r) - 1, m);
}
static int peak_interleaved(int p, int v, int m, int r)
{
	return imin(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
}

/* ---- the table ---- */

typedef struct {
	bool interleaves;    /* takes v > 1 virtual stages; then m % p == 0 */
	bool split_backward; /* BWD_I and a deferred BWD_W in place of each BWD */
	void (*order)(alist *l, int p, int v, int m, int r);
	double (*ideal)(int p, int v, int m, const sched_costs *c);
	int (*peak_act)(int p, int v, int m, int r);
	const char *bubble_formula, *peak_act_formula;
} kind_row;

static const kind_row kinds[SCHED_NKINDS] = {
	[SCHED_GPIPE] = {false, false, order_gpipe, ideal_plain, peak_all, "(p-1)/(m+p-1)", "m"},
	[SCHED_1F1B] = {false, false, order_1f1b, ideal_plain, peak_1f1b, "(p-1)/(m+p-1)",
			"min(p-r, m)"},
	[SCHED_EAGER_1F1B] = {false, false, order_eager, ideal_plain, peak_eager, "(p-1)/(m+p-1)",
			      "min(2*(p-r)-1, m)"},
	[SCHED_INTERLEAVED_1F1B] = {true, false, order_interleaved, ideal_plain, peak_interleaved,
				    "(p-1)/(v*m+p-1)", "min(2*(p-r-1)+(v-1)*p+1, v*m)"},
	[SCHED_ZBH1] = {false, true, order_zbh1, ideal_zbh1, peak_1f1b,
			"(p-1+max(0,p-m))/(3*m+p-1+max(0,p-m))", "min(p-r, m)"},
};

static bool known(sched_kind kind) { return kind >= 0 && kind < SCHED_NKINDS; }

int schedule_kind_parse(const char *name, sched_kind *kind, pp_err *e)
{
	for (int k = 0; k < SCHED_NKINDS; k++)
		if (name && !strcmp(name, schedule_kind_names[k])) {
			*kind = (sched_kind)k;
			return PP_OK;
		}
	return pp_errorf(
		e, PP_EUSAGE,
		"schedule \"%s\": expected gpipe, 1f1b, eager1f1b, interleaved1f1b or zbh1",
		name ? name : "(null)");
}

const char *schedule_kind_name(sched_kind kind)
{
	return known(kind) ? schedule_kind_names[kind] : "?";
}

bool schedule_split_backward(sched_kind kind) { return known(kind) && kinds[kind].split_backward; }

int schedule_check(sched_kind kind, int p, int v, int m, int rank, pp_err *e)
{
	if (!known(kind))
		return pp_errorf(e, PP_EUSAGE, "schedule kind %d: expected 0 .. %d", (int)kind,
				 SCHED_NKINDS - 1);
	const char *name = schedule_kind_names[kind];
	if (p < 1)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: p=%d pipeline ranks, expected >= 1",
				 name, p);
	if (v < 1)
		return pp_errorf(e, PP_EUSAGE,
				 "schedule %s: v=%d virtual stages per rank, expected >= 1", name,
				 v);
	if (m < 1)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: m=%d microbatches, expected >= 1",
				 name, m);
	if (v > 1 && !kinds[kind].interleaves)
		return pp_errorf(e, PP_EUSAGE,
				 "schedule %s: v=%d virtual stages per rank needs interleaved1f1b "
				 "(expected v=1)",
				 name, v);
	if (kinds[kind].interleaves && m % p)
		return pp_errorf(e, PP_EUSAGE,
				 "schedule %s: m=%d microbatches is not a multiple of p=%d", name,
				 m, p);
	if ((long long)p * v * m > SCHED_MAX_UNITS)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: p*v*m = %d*%d*%d exceeds %d", name, p,
				 v, m, SCHED_MAX_UNITS);
	if (rank >= p)
		return pp_errorf(e, PP_EUSAGE, "schedule %s: rank=%d, expected 0 .. %d", name, rank,
				 p - 1);
	return PP_OK;
}

void schedule_compute_order(sched_kind kind, int p, int v, int m, int r, alist *l)
{
	kinds[kind].order(l, p, v, m, r);
}

int schedule_computes(sched_kind kind, int v, int m)
{
	return (known(kind) && kinds[kind].split_backward ? 3 : 2) * m * v;
}

double schedule_ideal_time(sched_kind kind, int p, int v, int m, const sched_costs *c)
{
	if (schedule_check(kind, p, v, m, -1, NULL))
		return -1;
	return kinds[kind].ideal(p, v, m, costs_or_ref(c));
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
	return kinds[kind].peak_act(p, v, m, rank);
}

/* A split backward's stashes: each rank's BWD_W lags its BWD_I by r + 1. */
int schedule_peak_wstash_theory(sched_kind kind, int p, int v, int m, int rank)
{
	if (schedule_check(kind, p, v, m, rank, NULL) || rank < 0)
		return -1;
	return kinds[kind].split_backward ? imin(rank + 1, m) : 0;
}

/* A split backward holds a microbatch until its BWD_W: min(p, m) on every
 * rank (ZeroBubble H1). */
int schedule_peak_held_theory(sched_kind kind, int p, int v, int m, int rank)
{
	if (schedule_check(kind, p, v, m, rank, NULL) || rank < 0)
		return -1;
	return kinds[kind].split_backward ? imin(p, m) : kinds[kind].peak_act(p, v, m, rank);
}

const char *schedule_bubble_formula(sched_kind kind)
{
	return known(kind) ? kinds[kind].bubble_formula : "?";
}

const char *schedule_peak_act_formula(sched_kind kind)
{
	return known(kind) ? kinds[kind].peak_act_formula : "?";
}
