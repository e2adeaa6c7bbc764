/* schedule: every schedule over a grid of (p, v, m). Each list is checked by
 * code written here, not by the library's simulator: every (mb, vstage)
 * computed exactly once on its rank, every input present in list order
 * before the compute that needs it, every send paired with one receive, and
 * an order-only rendezvous executor that must finish (blocking p2p, no
 * deadlock). Then the library's simulator at the reference costs (fwd 1,
 * bwd 2 = BWD_I 1 + BWD_W 1) against the closed forms below (makespan,
 * bubble, peak activations / stashes / both), exactly, and at other costs
 * against the critical-path formulas. Also: the published
 * orders of JaxPP / Megatron on small cases, invalid arguments, and the
 * simulator's deadlock and dependency errors. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/schedule/schedule.h"
#include "../tools/harness.h"

enum {
	P_ONCE,
	P_DEPS,
	P_PAIRS,
	P_BLOCKING,
	P_SAME_BUILD,
	P_MAKESPAN,
	P_BUBBLE,
	P_PEAK,
	P_COSTS,
	NPROP
};
static const char *const prop_names[NPROP] = {"once",     "deps",      "pairs",
					      "blocking", "build_one", "makespan",
					      "bubble",   "peak",      "other_costs"};
static char first_fail[SCHED_NKINDS][NPROP][512];
static int ncases[SCHED_NKINDS];

/* Records the first failure of property prop for kind k. */
static void fail(int k, int prop, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(int k, int prop, const char *fmt, ...)
{
	if (first_fail[k][prop][0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(first_fail[k][prop], sizeof first_fail[k][prop], fmt, ap);
	va_end(ap);
}

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }
static bool is_comp(sched_op op) { return op <= SCHED_BWD_W; }

/* "F3/5" for FWD(mb 3, vstage 5); B, I, W for BWD, BWD_I, BWD_W; "SA3/5>2"
 * for SEND_ACT to rank 2, RA, SG, RG likewise with < for receives. */
static void compact(const sched_action *a, int n, bool comms, char *buf, size_t size)
{
	static const char *const code[] = {"F", "B", "I", "W", "SA", "RA", "SG", "RG"};
	size_t len = 0;
	buf[0] = 0;
	for (int i = 0; i < n && len + 32 < size; i++) {
		if (!comms && !is_comp(a[i].op))
			continue;
		len += snprintf(buf + len, size - len, "%s%s%d/%d", len ? " " : "", code[a[i].op],
				a[i].mb, a[i].vstage);
		if (!is_comp(a[i].op))
			len += snprintf(
				buf + len, size - len, "%c%d",
				a[i].op == SCHED_SEND_ACT || a[i].op == SCHED_SEND_GRAD ? '>' : '<',
				a[i].peer);
	}
}

typedef struct {
	int kind, p, v, m, S;
	sched_action **l;
	int *n;
	char name[64];
} sched_case;

/* Every (mb, vstage) has one FWD and one BWD (zbh1: one BWD_I and one BWD_W)
 * and they sit on rank vstage % p. */
static void check_once(const sched_case *c)
{
	const int S = c->S, m = c->m, zb = c->kind == SCHED_ZBH1;
	int *cnt = calloc((size_t)4 * S * m, sizeof *cnt);
	for (int r = 0; r < c->p; r++)
		for (int i = 0; i < c->n[r]; i++) {
			const sched_action *a = &c->l[r][i];
			if (a->mb < 0 || a->mb >= m || a->vstage < 0 || a->vstage >= S) {
				fail(c->kind, P_ONCE, "%s: rank %d action %d out of range", c->name,
				     r, i);
				goto done;
			}
			if (!is_comp(a->op))
				continue;
			if (a->vstage % c->p != r || a->peer != -1) {
				fail(c->kind, P_ONCE,
				     "%s: rank %d runs op %d of vstage %d (peer %d)", c->name, r,
				     a->op, a->vstage, a->peer);
				goto done;
			}
			cnt[(a->op * S + a->vstage) * m + a->mb]++;
		}
	for (int s = 0; s < S; s++)
		for (int i = 0; i < m; i++) {
			int f = cnt[(SCHED_FWD * S + s) * m + i],
			    b = cnt[(SCHED_BWD * S + s) * m + i];
			int bi = cnt[(SCHED_BWD_I * S + s) * m + i],
			    bw = cnt[(SCHED_BWD_W * S + s) * m + i];
			if (f != 1 || b != !zb || bi != zb || bw != zb) {
				fail(c->kind, P_ONCE,
				     "%s: (mb %d, vstage %d) has %d FWD, %d BWD, %d BWD_I, %d BWD_W",
				     c->name, i, s, f, b, bi, bw);
				goto done;
			}
		}
done:
	free(cnt);
}

/* Walks each rank's list in order: every compute has its inputs (computed
 * earlier on this rank or received earlier), every send sends something
 * computed earlier to the rank of the next (act) or previous (grad) stage,
 * every receive comes from the stage's rank. Counts the activations held
 * (FWD .. BWD/BWD_I) and stashes (BWD_I .. BWD_W) along the way. */
static void check_deps(const sched_case *c, int *peak_act, int *peak_stash, int *peak_held)
{
	const int S = c->S, m = c->m, p = c->p;
	/* per (s, mb): 1 FWD done, 2 BWD/BWD_I done, 4 BWD_W done, 8 act of s
	 * received, 16 grad of s received */
	char *st = malloc((size_t)S * m);
	for (int r = 0; r < p; r++) {
		memset(st, 0, (size_t)S * m);
		int act = 0, stash = 0;
		peak_act[r] = peak_stash[r] = peak_held[r] = 0;
		for (int i = 0; i < c->n[r]; i++) {
			const sched_action *a = &c->l[r][i];
			const int s = a->vstage, x = s * m + a->mb;
			bool ok = true;
			switch (a->op) {
			case SCHED_FWD:
				ok = s == 0 || (st[x - m] & (1 | 8));
				st[x] |= 1;
				peak_act[r] = imax(peak_act[r], ++act);
				break;
			case SCHED_BWD:
			case SCHED_BWD_I:
				ok = (st[x] & 1) && (s == S - 1 || (st[x + m] & (2 | 16)));
				st[x] |= 2;
				act--;
				if (a->op == SCHED_BWD_I)
					peak_stash[r] = imax(peak_stash[r], ++stash);
				break;
			case SCHED_BWD_W:
				ok = (st[x] & 2) != 0;
				stash--;
				break;
			case SCHED_SEND_ACT:
				ok = (st[x] & 1) && s + 1 < S && a->peer == (s + 1) % p &&
				     a->peer != r;
				break;
			case SCHED_SEND_GRAD:
				ok = (st[x] & 2) && s > 0 && a->peer == (s - 1) % p && a->peer != r;
				break;
			case SCHED_RECV_ACT:
				ok = s + 1 < S && r == (s + 1) % p && a->peer == s % p &&
				     a->peer != r;
				st[x] |= 8;
				break;
			case SCHED_RECV_GRAD:
				ok = s > 0 && r == (s - 1) % p && a->peer == s % p && a->peer != r;
				st[x] |= 16;
				break;
			}
			peak_held[r] = imax(peak_held[r], act + stash);
			if (!ok) {
				char what[96];
				fail(c->kind, P_DEPS,
				     "%s: rank %d action %d %s: input missing or wrong peer",
				     c->name, r, i, schedule_action_format(a, what, sizeof what));
				goto done;
			}
		}
	}
done:
	free(st);
}

/* Every message (kind, mb, vstage) is sent exactly once and received exactly
 * once, by the ranks the send names. */
static void check_pairs(const sched_case *c)
{
	const int n = 2 * c->S * c->m;
	int *sends = calloc((size_t)n, sizeof *sends), *recvs = calloc((size_t)n, sizeof *recvs);
	int *sfrom = calloc((size_t)n, sizeof *sfrom), *sto = calloc((size_t)n, sizeof *sto);
	int *rat = calloc((size_t)n, sizeof *rat), *rfrom = calloc((size_t)n, sizeof *rfrom);
	for (int r = 0; r < c->p; r++)
		for (int i = 0; i < c->n[r]; i++) {
			const sched_action *a = &c->l[r][i];
			if (is_comp(a->op))
				continue;
			int grad = a->op == SCHED_SEND_GRAD || a->op == SCHED_RECV_GRAD;
			int id = (grad * c->S + a->vstage) * c->m + a->mb;
			if (a->op == SCHED_SEND_ACT || a->op == SCHED_SEND_GRAD) {
				sends[id]++;
				sfrom[id] = r;
				sto[id] = a->peer;
			} else {
				recvs[id]++;
				rat[id] = r;
				rfrom[id] = a->peer;
			}
		}
	for (int id = 0; id < n; id++) {
		if (!sends[id] && !recvs[id])
			continue;
		if (sends[id] != 1 || recvs[id] != 1 || sfrom[id] != rfrom[id] ||
		    sto[id] != rat[id]) {
			fail(c->kind, P_PAIRS,
			     "%s: %s(mb %d, vstage %d): %d sends (rank %d -> %d), %d receives (rank %d <- %d)",
			     c->name, id / (c->S * c->m) ? "GRAD" : "ACT", id % c->m,
			     id / c->m % c->S, sends[id], sfrom[id], sto[id], recvs[id], rat[id],
			     rfrom[id]);
			break;
		}
	}
	free(sends);
	free(recvs);
	free(sfrom);
	free(sto);
	free(rat);
	free(rfrom);
}

/* Order-only rendezvous: a send and its receive complete together when both
 * ranks stand at them; computes always complete. Returns the number of
 * ranks left unfinished (0: no deadlock); *stuck the first of them. */
static int run_blocking(int p, sched_action *const *l, const int *n, int *stuck)
{
	int *pos = calloc((size_t)p, sizeof *pos), left = 0;
	for (bool progress = true; progress;) {
		progress = false;
		for (int r = 0; r < p; r++)
			while (pos[r] < n[r]) {
				const sched_action *a = &l[r][pos[r]];
				if (is_comp(a->op)) {
					pos[r]++;
					progress = true;
					continue;
				}
				int q = a->peer;
				if (q < 0 || q >= p || pos[q] >= n[q])
					break;
				const sched_action *b = &l[q][pos[q]];
				bool send = a->op == SCHED_SEND_ACT || a->op == SCHED_SEND_GRAD;
				sched_op want = send ? (sched_op)(a->op + 1)
						     : (sched_op)(a->op - 1);
				if (b->op != want || b->mb != a->mb || b->vstage != a->vstage ||
				    b->peer != r)
					break;
				pos[r]++;
				pos[q]++;
				progress = true;
			}
	}
	*stuck = -1;
	for (int r = 0; r < p; r++)
		if (pos[r] < n[r]) {
			if (*stuck < 0)
				*stuck = r;
			left++;
		}
	free(pos);
	return left;
}

/* The formulas this file asserts, written out again here rather than taken
 * from schedule.h. Ideal time (critical path) with f = fwd, b = bwd,
 * w = bwd_w, and zbh1 only where w <= f and w <= b - w. */
static double expect_ideal(int kind, int p, int v, int m, const sched_costs *c)
{
	double f = c->fwd, b = c->bwd, w = c->bwd_w;
	if (kind != SCHED_ZBH1)
		return (double)(v * m + p - 1) * (f + b);
	return m * (f + b) + (p - 1) * (f + b - 2 * w) + imax(0, p - m) * w;
}

/* Bubble at the reference costs (f 1, b 2 = 1 + 1). */
static double expect_bubble(int kind, int p, int v, int m)
{
	switch (kind) {
	case SCHED_INTERLEAVED_1F1B:
		return (double)(p - 1) / (v * m + p - 1);
	case SCHED_ZBH1:
		return (double)(p - 1 + imax(0, p - m)) / (3 * m + p - 1 + imax(0, p - m));
	default:
		return (double)(p - 1) / (m + p - 1);
	}
}

static int expect_peak(int kind, int p, int v, int m, int r)
{
	switch (kind) {
	case SCHED_GPIPE:
		return m;
	case SCHED_EAGER_1F1B:
		return imin(2 * (p - r) - 1, m);
	case SCHED_INTERLEAVED_1F1B:
		return imin(2 * (p - r - 1) + (v - 1) * p + 1, v * m);
	default:
		return imin(p - r, m);
	}
}

static const sched_costs other_costs[] = {{1, 1, 0.5}, {1, 3, 1}, {2, 3, 1}, {1, 2, 0.25}};

static void check_case(int kind, int p, int v, int m)
{
	sched_case c = {kind, p, v, m, p * v, NULL, NULL, ""};
	snprintf(c.name, sizeof c.name, "%s p=%d v=%d m=%d", schedule_kind_name(kind), p, v, m);
	c.l = calloc((size_t)p, sizeof *c.l);
	c.n = calloc((size_t)p, sizeof *c.n);
	pp_err e = {0};
	ncases[kind]++;
	if (schedule_build_all(kind, p, v, m, c.l, c.n, &e)) {
		fail(kind, P_ONCE, "%s: build: %s", c.name, e.msg);
		goto done;
	}
	check_once(&c);
	int *peak_act = calloc((size_t)p, sizeof(int)),
	    *peak_stash = calloc((size_t)p, sizeof(int));
	int *peak_held = calloc((size_t)p, sizeof(int));
	check_deps(&c, peak_act, peak_stash, peak_held);
	check_pairs(&c);
	int stuck, left = run_blocking(p, c.l, c.n, &stuck);
	if (left)
		fail(kind, P_BLOCKING, "%s: %d ranks deadlock, first rank %d", c.name, left, stuck);

	/* the per-rank builder gives the same list as the all-ranks one */
	int r1 = p - 1, n1;
	sched_action *a1 = NULL;
	if (schedule_build(kind, p, v, m, r1, &a1, &n1, &e))
		fail(kind, P_SAME_BUILD, "%s: %s", c.name, e.msg);
	else if (n1 != c.n[r1] || memcmp(a1, c.l[r1], sizeof *a1 * (size_t)n1))
		fail(kind, P_SAME_BUILD, "%s: rank %d differs from schedule_build_all", c.name, r1);
	free(a1);

	sched_sim s;
	if (schedule_simulate_lists(p, v, m, c.l, c.n, &schedule_ref_costs, &s, &e)) {
		fail(kind, P_MAKESPAN, "%s: %s", c.name, e.msg);
	} else {
		const double T = expect_ideal(kind, p, v, m, &schedule_ref_costs);
		const double busy = 3.0 * m * v, want = expect_bubble(kind, p, v, m);
		if (s.makespan != T || s.critical_path != T ||
		    schedule_ideal_time(kind, p, v, m, NULL) != T)
			fail(kind, P_MAKESPAN,
			     "%s: makespan %g, critical path %g, ideal_time %g, expected %g",
			     c.name, s.makespan, s.critical_path,
			     schedule_ideal_time(kind, p, v, m, NULL), T);
		for (int r = 0; r < p; r++)
			if (s.rank[r].busy != busy || s.rank[r].idle != T - busy)
				fail(kind, P_BUBBLE,
				     "%s: rank %d busy %g idle %g, expected %g and %g", c.name, r,
				     s.rank[r].busy, s.rank[r].idle, busy, T - busy);
		double theory = schedule_bubble_theory(kind, p, v, m, NULL);
		if (fabs(s.bubble - want) > 1e-12 || fabs(theory - want) > 1e-12)
			fail(kind, P_BUBBLE,
			     "%s: bubble %.15g, schedule_bubble_theory %.15g, expected %.15g",
			     c.name, s.bubble, theory, want);
		for (int r = 0; r < p; r++) {
			int pa = expect_peak(kind, p, v, m, r),
			    pw = kind == SCHED_ZBH1 ? imin(r + 1, m) : 0;
			int ph = kind == SCHED_ZBH1 ? imin(p, m) : pa;
			if (peak_held[r] != ph || s.rank[r].peak_held != ph ||
			    schedule_peak_held_theory(kind, p, v, m, r) != ph) {
				fail(kind, P_PEAK,
				     "%s: rank %d holds %d (simulated %d, theory %d), expected %d",
				     c.name, r, peak_held[r], s.rank[r].peak_held,
				     schedule_peak_held_theory(kind, p, v, m, r), ph);
				break;
			}
			if (peak_act[r] != pa || s.rank[r].peak_act != pa ||
			    schedule_peak_act_theory(kind, p, v, m, r) != pa ||
			    peak_stash[r] != pw || s.rank[r].peak_wstash != pw ||
			    schedule_peak_wstash_theory(kind, p, v, m, r) != pw) {
				fail(kind, P_PEAK,
				     "%s: rank %d peak activations %d (simulated %d, theory %d), expected "
				     "%d; stashes %d (simulated %d), expected %d",
				     c.name, r, peak_act[r], s.rank[r].peak_act,
				     schedule_peak_act_theory(kind, p, v, m, r), pa, peak_stash[r],
				     s.rank[r].peak_wstash, pw);
				break;
			}
		}
		schedule_sim_free(&s);
	}
	/* other costs: still no deadlock; the critical path follows the
	 * formula; blocking can only add to it */
	for (size_t i = 0; i < sizeof other_costs / sizeof *other_costs; i++) {
		const sched_costs *k = &other_costs[i];
		if (schedule_simulate_lists(p, v, m, c.l, c.n, k, &s, &e)) {
			fail(kind, P_COSTS, "%s costs %g/%g/%g: %s", c.name, k->fwd, k->bwd,
			     k->bwd_w, e.msg);
			continue;
		}
		double T = expect_ideal(kind, p, v, m, k);
		if (fabs(s.critical_path - T) > 1e-9 ||
		    fabs(schedule_ideal_time(kind, p, v, m, k) - T) > 1e-9 ||
		    s.makespan < s.critical_path - 1e-9)
			fail(kind, P_COSTS,
			     "%s costs %g/%g/%g: critical path %g, ideal_time %g, makespan %g, expected %g",
			     c.name, k->fwd, k->bwd, k->bwd_w, s.critical_path,
			     schedule_ideal_time(kind, p, v, m, k), s.makespan, T);
		schedule_sim_free(&s);
	}
	free(peak_act);
	free(peak_stash);
	free(peak_held);
done:
	schedule_free_all(p, c.l);
	free(c.l);
	free(c.n);
}

static void test_grid(void)
{
	static const int ps[] = {1, 2, 4, 8}, vs[] = {1, 2, 4}, ms[] = {1, 2, 4, 8, 16, 32};
	for (int k = 0; k < SCHED_NKINDS; k++)
		for (int a = 0; a < 4; a++)
			for (int b = 0; b < 3; b++)
				for (int i = 0; i < 6; i++) {
					if (schedule_check(k, ps[a], vs[b], ms[i], -1, NULL))
						continue;
					check_case(k, ps[a], vs[b], ms[i]);
				}
	char name[96];
	for (int k = 0; k < SCHED_NKINDS; k++)
		for (int prop = 0; prop < NPROP; prop++) {
			snprintf(name, sizeof name, "schedule/%s/%s", schedule_kind_name(k),
				 prop_names[prop]);
			CHECK(!first_fail[k][prop][0] && ncases[k] > 0, name, "%s (%d cases)",
			      first_fail[k][prop], ncases[k]);
		}
}

/* One rank's list in compact form, computes only or everything. */
static void order_of(int kind, int p, int v, int m, int r, bool comms, char *buf, size_t size)
{
	sched_action *a = NULL;
	int n = 0;
	pp_err e = {0};
	if (schedule_build(kind, p, v, m, r, &a, &n, &e))
		snprintf(buf, size, "error: %s", e.msg);
	else
		compact(a, n, comms, buf, size);
	free(a);
}

static void check_order(const char *name, int kind, int p, int v, int m, int r, bool comms,
			const char *want)
{
	char got[2048];
	order_of(kind, p, v, m, r, comms, got, sizeof got);
	CHECK(!strcmp(got, want), name, "got \"%s\", expected \"%s\"", got, want);
}

/* The published orders on small cases. */
static void test_orders(void)
{
	check_order("schedule/order/gpipe", SCHED_GPIPE, 2, 1, 3, 1, false,
		    "F0/1 F1/1 F2/1 B0/1 B1/1 B2/1");
	/* Megatron: p - r - 1 = 3 warm-up forwards, then (F, B) pairs */
	check_order(
		"schedule/order/1f1b", SCHED_1F1B, 4, 1, 8, 0, false,
		"F0/0 F1/0 F2/0 F3/0 B0/0 F4/0 B1/0 F5/0 B2/0 F6/0 B3/0 F7/0 B4/0 B5/0 B6/0 B7/0");
	/* JaxPP Eager1F1B: 2 (p - r) - 1 = 7 forwards before the first backward */
	check_order(
		"schedule/order/eager1f1b", SCHED_EAGER_1F1B, 4, 1, 8, 0, false,
		"F0/0 F1/0 F2/0 F3/0 F4/0 F5/0 F6/0 B0/0 F7/0 B1/0 B2/0 B3/0 B4/0 B5/0 B6/0 B7/0");
	/* Megatron interleaved, p 2, v 2: chunk 0 (vstage 0) for mbs 0-1, chunk 1
	 * (vstage 2) for mbs 0-1, ...; 2 (p - 1) + (v - 1) p = 4 warm-up */
	check_order(
		"schedule/order/interleaved1f1b", SCHED_INTERLEAVED_1F1B, 2, 2, 4, 0, false,
		"F0/0 F1/0 F0/2 F1/2 F2/0 B0/2 F3/0 B1/2 F2/2 B0/0 F3/2 B1/0 B2/2 B3/2 B2/0 B3/0");
	/* JaxPP ZeroBubble: rank 0 F x p then (I, W, F); the last rank
	 * F, (I, F) x (p - 1), then (I, W, F), its W deferred by p - 1 */
	check_order("schedule/order/zbh1_first", SCHED_ZBH1, 4, 1, 8, 0, false,
		    "F0/0 F1/0 F2/0 F3/0 I0/0 W0/0 F4/0 I1/0 W1/0 F5/0 I2/0 W2/0 F6/0 I3/0 W3/0 "
		    "F7/0 I4/0 W4/0 I5/0 W5/0 I6/0 W6/0 I7/0 W7/0");
	check_order("schedule/order/zbh1_last", SCHED_ZBH1, 4, 1, 8, 3, false,
		    "F0/3 I0/3 F1/3 I1/3 F2/3 I2/3 F3/3 I3/3 W0/3 F4/3 I4/3 W1/3 F5/3 I5/3 W2/3 "
		    "F6/3 I6/3 W3/3 F7/3 I7/3 W4/3 W5/3 W6/3 W7/3");
	/* message placement, p 2, m 2: rank 1 takes mb 1's activation before
	 * its first backward, so rank 0's second send never waits on rank 1's
	 * gradient send (the naive placement deadlocks, see test_deadlock) */
	check_order("schedule/order/1f1b_messages_rank0", SCHED_1F1B, 2, 1, 2, 0, true,
		    "F0/0 SA0/0>1 F1/0 SA1/0>1 RG0/1<1 B0/0 RG1/1<1 B1/0");
	check_order("schedule/order/1f1b_messages_rank1", SCHED_1F1B, 2, 1, 2, 1, true,
		    "RA0/0<0 F0/1 RA1/0<0 B0/1 SG0/1>0 F1/1 B1/1 SG1/1>0");
	/* p = 1: stages on one rank exchange no messages */
	check_order("schedule/order/p1_no_messages", SCHED_INTERLEAVED_1F1B, 1, 2, 2, 0, true,
		    "F0/0 F0/1 B0/1 F1/0 B0/0 F1/1 B1/1 B1/0");

	/* interleaved at v = 1 is eager1f1b's order (w + 1 = 2 (p - r) - 1) */
	bool same = true;
	char x[4096], y[4096];
	for (int p = 1; p <= 8 && same; p *= 2)
		for (int m = p; m <= 32 && same; m *= 2)
			for (int r = 0; r < p && same; r++) {
				order_of(SCHED_INTERLEAVED_1F1B, p, 1, m, r, true, x, sizeof x);
				order_of(SCHED_EAGER_1F1B, p, 1, m, r, true, y, sizeof y);
				same = !strcmp(x, y);
				if (!same)
					CHECK(0, "schedule/order/interleaved_v1_is_eager",
					      "p=%d m=%d rank %d: %s vs %s", p, m, r, x, y);
			}
	if (same)
		CHECK(1, "schedule/order/interleaved_v1_is_eager", "");
}

/* ZB-H1 has a strictly smaller bubble than 1F1B whenever m >= p > 1 and the
 * same activation peak. */
static void test_zbh1_vs_1f1b(void)
{
	char why[sizeof(pp_err){0}.msg] = "";
	for (int p = 2; p <= 8; p *= 2)
		for (int m = p; m <= 32; m *= 2) {
			sched_sim z, o;
			pp_err e = {0};
			if (schedule_simulate(SCHED_ZBH1, p, 1, m, NULL, &z, &e) ||
			    schedule_simulate(SCHED_1F1B, p, 1, m, NULL, &o, &e)) {
				snprintf(why, sizeof why, "%s", e.msg);
				break;
			}
			if (!(z.bubble < o.bubble) && !why[0])
				snprintf(why, sizeof why, "p=%d m=%d: zbh1 %g >= 1f1b %g", p, m,
					 z.bubble, o.bubble);
			for (int r = 0; r < p && !why[0]; r++)
				if (z.rank[r].peak_act != o.rank[r].peak_act)
					snprintf(why, sizeof why,
						 "p=%d m=%d rank %d: peak %d vs %d", p, m, r,
						 z.rank[r].peak_act, o.rank[r].peak_act);
			schedule_sim_free(&z);
			schedule_sim_free(&o);
		}
	CHECK(!why[0], "schedule/zbh1_below_1f1b", "%s", why);
}

static void expect_usage(const char *name, int kind, int p, int v, int m, int rank,
			 const char *want1, const char *want2)
{
	sched_action *a = NULL;
	int n = 0;
	pp_err e = {0};
	int rc = schedule_build(kind, p, v, m, rank, &a, &n, &e);
	CHECK(rc == PP_EUSAGE && e.code == PP_EUSAGE && strstr(e.msg, want1) &&
		      (!want2 || strstr(e.msg, want2)),
	      name, "rc %d, message \"%s\", expected PP_EUSAGE naming %s %s", rc, e.msg, want1,
	      want2 ? want2 : "");
	free(a);
}

static void test_invalid(void)
{
	expect_usage("schedule/invalid/interleaved_m_not_multiple", SCHED_INTERLEAVED_1F1B, 4, 2, 6,
		     0, "m=6", "p=4");
	expect_usage("schedule/invalid/v_for_1f1b", SCHED_1F1B, 2, 2, 4, 0, "v=2",
		     "interleaved1f1b");
	expect_usage("schedule/invalid/v_for_zbh1", SCHED_ZBH1, 2, 4, 4, 0, "v=4", NULL);
	expect_usage("schedule/invalid/v_zero", SCHED_INTERLEAVED_1F1B, 2, 0, 4, 0, "v=0", NULL);
	expect_usage("schedule/invalid/p_zero", SCHED_GPIPE, 0, 1, 4, 0, "p=0", NULL);
	expect_usage("schedule/invalid/p_negative", SCHED_ZBH1, -1, 1, 4, 0, "p=-1", NULL);
	expect_usage("schedule/invalid/m_zero", SCHED_1F1B, 2, 1, 0, 0, "m=0", NULL);
	expect_usage("schedule/invalid/m_negative", SCHED_EAGER_1F1B, 2, 1, -3, 0, "m=-3", NULL);
	expect_usage("schedule/invalid/rank_too_big", SCHED_1F1B, 2, 1, 4, 2, "rank=2", NULL);
	expect_usage("schedule/invalid/rank_negative", SCHED_1F1B, 2, 1, 4, -1, "rank=-1", NULL);
	expect_usage("schedule/invalid/too_large", SCHED_1F1B, 4096, 1, 4096, 0, "exceeds", NULL);
	expect_usage("schedule/invalid/kind", 99, 2, 1, 4, 0, "kind 99", NULL);

	sched_sim s;
	pp_err e = {0};
	int rc = schedule_simulate(SCHED_INTERLEAVED_1F1B, 4, 2, 6, NULL, &s, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "m=6"), "schedule/invalid/simulate_args",
	      "rc %d: %s", rc, e.msg);
	sched_costs neg = {-1, 2, 1}, split = {1, 2, 3};
	rc = schedule_simulate(SCHED_1F1B, 2, 1, 4, &neg, &s, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "fwd=-1"), "schedule/invalid/simulate_negative_cost",
	      "rc %d: %s", rc, e.msg);
	rc = schedule_simulate(SCHED_ZBH1, 2, 1, 4, &split, &s, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "bwd_w=3"), "schedule/invalid/simulate_bwd_w",
	      "rc %d: %s", rc, e.msg);
	CHECK(schedule_ideal_time(SCHED_INTERLEAVED_1F1B, 4, 2, 6, NULL) == -1 &&
		      schedule_bubble_theory(SCHED_1F1B, 0, 1, 4, NULL) == -1 &&
		      schedule_peak_act_theory(SCHED_1F1B, 2, 1, 4, 2) == -1,
	      "schedule/invalid/theory", "closed forms accept rejected arguments");
	/* zbh1's closed form needs a W that fits the gap it fills */
	sched_costs big_w = {1, 2, 1.5};
	CHECK(schedule_ideal_time(SCHED_ZBH1, 4, 1, 8, &big_w) == -1 &&
		      schedule_ideal_time(SCHED_1F1B, 4, 1, 8, &big_w) == 33,
	      "schedule/invalid/zbh1_theory_domain", "ideal times %g, %g",
	      schedule_ideal_time(SCHED_ZBH1, 4, 1, 8, &big_w),
	      schedule_ideal_time(SCHED_1F1B, 4, 1, 8, &big_w));
}

static void test_names(void)
{
	static const char *const names[] = {"gpipe", "1f1b", "eager1f1b", "interleaved1f1b",
					    "zbh1"};
	bool ok = true;
	for (int i = 0; i < 5; i++) {
		sched_kind k = SCHED_NKINDS;
		pp_err e = {0};
		ok &= !schedule_kind_parse(names[i], &k, &e) && (int)k == i &&
		      !strcmp(schedule_kind_name(k), names[i]);
	}
	CHECK(ok, "schedule/names/round_trip", "a name does not parse to its kind and back");
	sched_kind k;
	pp_err e = {0};
	int rc = schedule_kind_parse("bogus", &k, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "\"bogus\"") && strstr(e.msg, "zbh1"),
	      "schedule/names/unknown", "rc %d: %s", rc, e.msg);
	char buf[96];
	sched_action snd = {SCHED_SEND_GRAD, 3, 5, 1}, fwd = {SCHED_FWD, 0, 2, -1};
	schedule_action_format(&snd, buf, sizeof buf);
	CHECK(!strcmp(buf, "SEND_GRAD(mb 3, vstage 5 -> rank 1)"), "schedule/names/format_send",
	      "%s", buf);
	schedule_action_format(&fwd, buf, sizeof buf);
	CHECK(!strcmp(buf, "FWD(mb 0, vstage 2)"), "schedule/names/format_fwd", "%s", buf);
}

#define A(op, mb, s, peer) ((sched_action){SCHED_##op, mb, s, peer})

/* The simulator names a deadlock's ranks and actions, and refuses a compute
 * that runs before its input or a schedule that leaves work undone. */
static void test_deadlock(void)
{
	/* 1F1B, p 2, m 2, each send right after its compute and each receive
	 * right before its compute: rank 0 blocks sending mb 1's activation
	 * while rank 1 blocks sending mb 0's gradient */
	sched_action r0[] = {A(FWD, 0, 0, -1),      A(SEND_ACT, 0, 0, 1),  A(FWD, 1, 0, -1),
			     A(SEND_ACT, 1, 0, 1),  A(RECV_GRAD, 0, 1, 1), A(BWD, 0, 0, -1),
			     A(RECV_GRAD, 1, 1, 1), A(BWD, 1, 0, -1)};
	sched_action r1[] = {A(RECV_ACT, 0, 0, 0),  A(FWD, 0, 1, -1),     A(BWD, 0, 1, -1),
			     A(SEND_GRAD, 0, 1, 0), A(RECV_ACT, 1, 0, 0), A(FWD, 1, 1, -1),
			     A(BWD, 1, 1, -1),      A(SEND_GRAD, 1, 1, 0)};
	sched_action *lists[] = {r0, r1};
	int counts[] = {8, 8}, stuck;
	sched_sim s;
	pp_err e = {0};
	int rc = schedule_simulate_lists(2, 1, 2, lists, counts, NULL, &s, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "deadlock") &&
		      strstr(e.msg,
			     "rank 0 waits at action 3 SEND_ACT(mb 1, vstage 0 -> rank 1)") &&
		      strstr(e.msg, "rank 1 waits at action 3 SEND_GRAD(mb 0, vstage 1 -> rank 0)"),
	      "schedule/deadlock/named", "rc %d: %s", rc, e.msg);
	CHECK(run_blocking(2, lists, counts, &stuck) == 2, "schedule/deadlock/test_executor",
	      "this file's executor misses the deadlock");

	/* the same lists with rank 1's second receive moved before its first
	 * backward run to the end: 9 = 3 (m + p - 1) */
	sched_action r1ok[] = {A(RECV_ACT, 0, 0, 0), A(FWD, 0, 1, -1),      A(RECV_ACT, 1, 0, 0),
			       A(BWD, 0, 1, -1),     A(SEND_GRAD, 0, 1, 0), A(FWD, 1, 1, -1),
			       A(BWD, 1, 1, -1),     A(SEND_GRAD, 1, 1, 0)};
	lists[1] = r1ok;
	rc = schedule_simulate_lists(2, 1, 2, lists, counts, NULL, &s, &e);
	CHECK(rc == PP_OK && s.makespan == 9, "schedule/deadlock/fixed", "rc %d makespan %g: %s",
	      rc, rc ? 0 : s.makespan, rc ? e.msg : "");
	if (!rc)
		schedule_sim_free(&s);

	/* rank 1 computes mb 0 without receiving its activation */
	sched_action r1bad[] = {A(FWD, 0, 1, -1)};
	lists[1] = r1bad;
	counts[1] = 1;
	rc = schedule_simulate_lists(2, 1, 2, lists, counts, NULL, &s, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "rank 1 action 0 FWD(mb 0, vstage 1)") &&
		      strstr(e.msg, "before its input activation"),
	      "schedule/deadlock/missing_input", "rc %d: %s", rc, e.msg);

	/* one rank, the backward left out */
	sched_action only[] = {A(FWD, 0, 0, -1)};
	sched_action *one[] = {only};
	int n1 = 1;
	rc = schedule_simulate_lists(1, 1, 1, one, &n1, NULL, &s, &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "BWD(mb 0, vstage 0) never runs"),
	      "schedule/deadlock/incomplete", "rc %d: %s", rc, e.msg);
}

int main(void)
{
	test_names();
	test_invalid();
	test_orders();
	test_zbh1_vs_1f1b();
	test_deadlock();
	test_grid();
	TH_EXIT();
}
