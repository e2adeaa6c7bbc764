/* Pipeline schedules as pure functions: (kind, p ranks, v virtual stages per
 * rank, m microbatches, rank) -> the ordered list of actions that rank runs,
 * and a discrete-event simulator that runs every rank's list together.
 *
 * Stages. There are S = p v virtual stages; stage s lives on rank s % p, so
 * chunk c of rank r is stage c p + r. Stage 0 reads the data, stage S - 1
 * computes the loss (its backward starts from the loss, no gradient comes
 * in). Data flow of microbatch i:
 *   FWD(i, s)   needs the activation of FWD(i, s - 1)            (s > 0)
 *   BWD(i, s)   needs FWD(i, s) and the input gradient of BWD(i, s + 1)
 *               (s < S - 1); BWD_I likewise, it is BWD without the weight
 *               gradient; BWD_W(i, s) needs BWD_I(i, s).
 *
 * Messages. vstage of a SEND/RECV names the stage whose output travels:
 * SEND_ACT(i, s) carries the output of FWD(i, s) to the rank of stage s + 1,
 * SEND_GRAD(i, s) the input gradient of BWD(i, s) (or BWD_I) to the rank of
 * stage s - 1; the matching RECV has the same (i, s). peer is the other
 * rank (destination of a send, source of a receive), -1 for compute.
 * Stages on the same rank (p = 1) exchange nothing.
 *
 * Blocking point-to-point. Every list is safe to run with blocking,
 * rendezvous send/recv (MPI_Ssend semantics, tags = (kind, mb, vstage)).
 * schedule_build runs all ranks' compute orders at the reference costs
 * (fwd 1, bwd 2 = BWD_I 1 + BWD_W 1) and places a transfer at an instant
 * when the message is ready and both ranks are between computes (a rank
 * whose next compute is ready starts it rather than wait for a busy
 * receiver), appending every compute, send and receive in that one global
 * order. Each rank's list is a projection of one global order of events, so
 * no cycle of waits can form whatever the real costs are. At the reference
 * costs the blocking run loses nothing to the non-blocking one; at other
 * costs it can (the simulator reports both).
 *
 * Compute orders (per rank, before the messages are placed; kinds.c holds
 * each kind as one row of a table):
 *   gpipe            F(0..m-1), then B(0..m-1).                   (v = 1)
 *   1f1b             JaxPP Std1F1B = Megatron 1F1B: w = min(p - r, m)
 *                    warm-up forwards (Megatron counts p - r - 1 and starts
 *                    the steady state with a forward: same order), then
 *                    B, F alternating, then the remaining B.      (v = 1)
 *   eager1f1b        JaxPP Eager1F1B: w = min(2 (p - r) - 1, m) warm-up
 *                    forwards (JaxPP: p - r in its first p steps plus
 *                    p - 1 - r more), then B, F alternating.     (v = 1)
 *                    Same ideal time as 1f1b with zero-time messages, at
 *                    more memory; the extra forwards are there to hide
 *                    transfer latency on real links.
 *   interleaved1f1b  Megatron's interleaved schedule (m % p == 0): forward
 *                    unit k (0 <= k < m v) is chunk (k mod p v) / p of
 *                    microbatch (k / p v) p + k mod p; backward unit k the
 *                    same with chunk v - 1 - that; w = min(2 (p - r - 1) +
 *                    (v - 1) p, m v) warm-up forwards, then F(w + i), B(i)
 *                    pairs, then the remaining B. At v = 1 this is
 *                    eager1f1b's order (w + 1 = 2 (p - r) - 1).
 *   zbh1             ZeroBubble H1 as JaxPP's ZeroBubble builds it (Qi et
 *                    al. 2023): min(p - r, m) forwards, r pairs (BWD_I, F),
 *                    then the rotation BWD_I, BWD_W, F with kinds skipped
 *                    once they run out; the last rank defers its first W by
 *                    p - 1 slots, into what would be 1F1B's cool-down
 *                    bubble. JaxPP requires m >= p; below that the same
 *                    rule still gives a valid schedule.           (v = 1)
 * Sources: NVIDIA/jaxpp src/jaxpp/schedules.py (Std1F1B, Eager1F1B, GPipe,
 * ZeroBubble, Interleaved1F1B: the per-rank orders here are identical to
 * its tables; its Interleaved1F1B asks m % (p v) == 0, Megatron and this
 * file only m % p == 0), Megatron-LM schedules.py
 * (forward_backward_pipelining_with_interleaving), Narayanan et al. 2021,
 * Qi et al. 2023 "Zero Bubble Pipeline Parallelism".
 *
 * Memory. An activation (stage s, microbatch i) is held from the start of
 * FWD(i, s) until BWD(i, s) or BWD_I(i, s) completes; BWD_I leaves a smaller
 * weight-gradient stash (the inputs of the linear layers and their output
 * gradients) held until BWD_W(i, s) completes. Peaks count chunk-microbatches
 * (one stage's activations for one microbatch) and depend only on the order
 * of a rank's list. A runtime that keeps a microbatch's whole saved state
 * until BWD_W needs peak_held slots: zbh1's min(p, m) on every rank, where
 * 1f1b needs min(p - r, m). */
#ifndef PP_SCHEDULE_H
#define PP_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/error.h"

typedef enum {
	SCHED_GPIPE,
	SCHED_1F1B,
	SCHED_EAGER_1F1B,
	SCHED_INTERLEAVED_1F1B,
	SCHED_ZBH1,
	SCHED_NKINDS
} sched_kind;

typedef enum {
	SCHED_FWD,
	SCHED_BWD,   /* full backward: input gradient and weight gradient */
	SCHED_BWD_I, /* input gradient only (zbh1) */
	SCHED_BWD_W, /* the deferred weight gradient (zbh1) */
	SCHED_SEND_ACT,
	SCHED_RECV_ACT,
	SCHED_SEND_GRAD,
	SCHED_RECV_GRAD
} sched_op;

typedef struct {
	sched_op op;
	int mb;     /* microbatch, 0 .. m - 1 */
	int vstage; /* virtual stage, 0 .. p v - 1 (see "Messages" above) */
	int peer;   /* other rank of a send/recv; -1 for compute */
} sched_action;

/* Whether op is the compute that ends its microbatch's hold on its chunk:
 * the saved activations live from FWD until BWD, or BWD_W when split. */
static inline bool schedule_ends_hold(sched_op op) { return op == SCHED_BWD || op == SCHED_BWD_W; }

/* Largest p * v * m accepted (keeps every count in an int). */
#define SCHED_MAX_UNITS (1 << 22)

/* The kinds' names in enum order, NULL-terminated: "gpipe", "1f1b",
 * "eager1f1b", "interleaved1f1b", "zbh1" (the config's schedule= values). */
extern const char *const schedule_kind_names[SCHED_NKINDS + 1];

/* One of those names. PP_EUSAGE naming the string otherwise. */
int schedule_kind_parse(const char *name, sched_kind *kind, pp_err *e);
/* The name above; "?" for an out-of-range kind. */
const char *schedule_kind_name(sched_kind kind);
/* "FWD", "BWD", ..., "RECV_GRAD". */
const char *schedule_op_name(sched_op op);
/* "FWD(mb 3, vstage 5)" or "SEND_ACT(mb 3, vstage 5 -> rank 2)" into buf;
 * returns buf. */
char *schedule_action_format(const sched_action *a, char *buf, size_t size);

/* PP_EUSAGE naming the offending value when p < 1, v < 1, m < 1, v > 1 for
 * a schedule other than interleaved1f1b, m % p != 0 for interleaved1f1b,
 * p v m > SCHED_MAX_UNITS, or rank outside 0 .. p - 1 (rank < 0 skips the
 * rank check). */
int schedule_check(sched_kind kind, int p, int v, int m, int rank, pp_err *e);

/* Whether the kind splits each backward pass into BWD_I and a deferred
 * BWD_W (zbh1): a stage then keeps what BWD_W needs. */
bool schedule_split_backward(sched_kind kind);

/* The actions rank runs, in order: *actions (malloc'd, the caller frees) and
 * *n. Validates with schedule_check. */
int schedule_build(sched_kind kind, int p, int v, int m, int rank, sched_action **actions, int *n,
		   pp_err *e);
/* Every rank's list at once (one construction instead of p): lists[r] and
 * counts[r] for r < p, arrays the caller provides; free with
 * schedule_free_all. */
int schedule_build_all(sched_kind kind, int p, int v, int m, sched_action **lists, int *counts,
		       pp_err *e);
void schedule_free_all(int p, sched_action **lists);

/* The slots each of rank's v chunks needs: the most of its microbatches
 * held at once under the rank's compute order, each from its FWD until its
 * BWD (or, split, its BWD_W). slots has room for v. Validates with
 * schedule_check. */
int schedule_slots(sched_kind kind, int p, int v, int m, int rank, int *slots, pp_err *e);

/* Time of one stage's (chunk's) work for one microbatch. bwd is the full
 * backward; bwd_w is its weight-gradient part, so BWD_I takes bwd - bwd_w
 * and BWD_W takes bwd_w (0 <= bwd_w <= bwd). */
typedef struct {
	double fwd, bwd, bwd_w;
} sched_costs;

/* The reference costs the message placement uses, and the tests' costs:
 * fwd 1, bwd 2, bwd_w 1. */
extern const sched_costs schedule_ref_costs;

typedef struct {
	double busy;     /* compute time: m v (fwd + bwd) */
	double idle;     /* makespan - busy: waiting, before the first action too */
	double finish;   /* when its last action completes */
	int peak_act;    /* most activations held at once (see "Memory") */
	int peak_wstash; /* most weight-gradient stashes held at once (zbh1) */
	int peak_held;   /* most chunk-microbatches holding either at once, i.e.
			  * from FWD until BWD or BWD_W: peak_act except for
			  * zbh1, where it is min(p, m) on every rank */
} sched_rank_stats;

typedef struct {
	int p;
	double makespan;        /* when the last rank finishes, blocking p2p */
	double critical_path;   /* makespan of the same lists with non-blocking
			       * zero-time messages: the ideal time of these
			       * compute orders (longest path through data and
			       * per-rank order edges) */
	double bubble;          /* sum of idle / (p makespan) */
	sched_rank_stats *rank; /* p entries; schedule_sim_free releases */
} sched_sim;

/* Runs every rank's list of the schedule together: computes take their cost,
 * messages take no time, a send and its receive complete together once both
 * ranks have reached them. c NULL: the reference costs. */
int schedule_simulate(sched_kind kind, int p, int v, int m, const sched_costs *c, sched_sim *out,
		      pp_err *e);
/* The same on given lists (lists[r], counts[r] for r < p, S = p v stages of
 * m microbatches): PP_ERUNTIME when the ranks deadlock, naming every stuck
 * rank and the action it waits at, or when a compute runs before its input
 * arrived (locally or by a receive). */
int schedule_simulate_lists(int p, int v, int m, sched_action *const *lists, const int *counts,
			    const sched_costs *c, sched_sim *out, pp_err *e);
/* The same with a duration per action: dur[r][i] for action i of rank r
 * (a compute's measured time, 0 for a message), as a profile measured them;
 * critical_path is then the ideal time of those lists at those durations. */
int schedule_simulate_timed(int p, int v, int m, sched_action *const *lists, const int *counts,
			    double *const *dur, sched_sim *out, pp_err *e);
void schedule_sim_free(sched_sim *s);

/* Closed forms for these compute orders with non-blocking zero-time
 * messages (c NULL: the reference costs), f = fwd, b = bwd, w = bwd_w:
 *
 * Ideal time of one step (the critical path, simulate's critical_path):
 *   gpipe, 1f1b, eager1f1b   (m + p - 1)(f + b)
 *   interleaved1f1b          (v m + p - 1)(f + b)
 *   zbh1                     m (f + b) + (p - 1)(f + b - 2 w) + max(0, p - m) w
 *                            where w <= f and w <= b - w (ZB-H1's premise:
 *                            a W fits the gap it fills); -1 otherwise
 * At the reference costs the blocking simulation's makespan equals it too.
 * -1 for arguments schedule_check rejects. */
double schedule_ideal_time(sched_kind kind, int p, int v, int m, const sched_costs *c);
/* Bubble fraction, idle / makespan, the same on every rank: 1 - m v (f + b)
 * / ideal time. At the reference costs (f 1, b 2, w 1):
 *   gpipe, 1f1b, eager1f1b   (p - 1) / (m + p - 1)
 *   interleaved1f1b          (p - 1) / (v m + p - 1)
 *   zbh1                     (p - 1 + max(0, p - m)) / (3 m + p - 1 + max(0, p - m))
 * -1 where the ideal time is. */
double schedule_bubble_theory(sched_kind kind, int p, int v, int m, const sched_costs *c);
/* Peak activations of rank r (chunk-microbatches; simulate's peak_act):
 *   gpipe            m
 *   1f1b, zbh1       min(p - r, m)
 *   eager1f1b        min(2 (p - r) - 1, m)
 *   interleaved1f1b  min(2 (p - r - 1) + (v - 1) p + 1, m v)
 * -1 for rejected arguments. */
int schedule_peak_act_theory(sched_kind kind, int p, int v, int m, int rank);
/* Peak weight-gradient stashes of rank r: min(r + 1, m) for zbh1, else 0. */
int schedule_peak_wstash_theory(sched_kind kind, int p, int v, int m, int rank);
/* Peak chunk-microbatches rank r holds either of at once (simulate's
 * peak_held): what a runtime that keeps a microbatch's whole saved state
 * until its last backward part needs. peak_act, except min(p, m) on every
 * rank for zbh1. -1 for rejected arguments. */
int schedule_peak_held_theory(sched_kind kind, int p, int v, int m, int rank);
/* The closed forms above as text, for reports: the bubble at the reference
 * costs ("(p-1)/(m+p-1)", ...) and the peak activations ("min(p-r, m)", ...). */
const char *schedule_bubble_formula(sched_kind kind);
const char *schedule_peak_act_formula(sched_kind kind);

#endif
