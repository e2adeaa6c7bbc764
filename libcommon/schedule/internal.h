/* Private to schedule/: action lists under construction and the costs of
 * a compute. */
#ifndef PP_SCHEDULE_INTERNAL_H
#define PP_SCHEDULE_INTERNAL_H

#include <stdbool.h>

#include "schedule.h"

typedef struct {
	sched_action *a;
	int n;
} alist;

static inline void push(alist *l, sched_op op, int mb, int vstage, int peer)
{
	l->a[l->n++] = (sched_action){op, mb, vstage, peer};
}

static inline int imin(int a, int b) { return a < b ? a : b; }

static inline bool is_compute(sched_op op) { return op <= SCHED_BWD_W; }
static inline bool is_send(sched_op op) { return op == SCHED_SEND_ACT || op == SCHED_SEND_GRAD; }

static inline const sched_costs *costs_or_ref(const sched_costs *c)
{
	return c ? c : &schedule_ref_costs;
}

/* A compute's time at costs c; 0 for a message. */
double schedule_cost_of(const sched_costs *c, sched_op op);

/* Appends rank r's compute order (no messages) to l, which has room for
 * schedule_computes(kind, m, v) actions. */
void schedule_compute_order(sched_kind kind, int p, int v, int m, int r, alist *l);
/* The computes of one rank's list: 2 m v, or 3 m v with a split backward. */
int schedule_computes(sched_kind kind, int v, int m);

/* Every rank's list (schedule_build_all) in arrays of p made here:
 * *lists and *counts, which schedule_lists_free releases (also after a
 * failure, when they may be NULL or partly filled). */
int schedule_lists_new(sched_kind kind, int p, int v, int m, sched_action ***lists, int **counts,
		       pp_err *e);
void schedule_lists_free(int p, sched_action **lists, int *counts);

#endif
