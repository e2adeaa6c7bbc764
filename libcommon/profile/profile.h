/* Per-rank profiles: what one rank of pp-train did over a window of steps,
 * as a table of timed events, and the HDF5 file that holds it
 * (checkpoints-format/profile.md, pp-profile(5)).
 *
 * An event is one interval on one of the rank's streams (threads in a
 * trace): a pipeline action (a forward or backward pass of one microbatch
 * on one virtual stage, a send or a receive), a gradient reduction, the
 * optimizer step, data loading, a checkpoint save. Times are nanoseconds on
 * the rank's own clock (CLOCK_MONOTONIC, whose origin differs between
 * hosts); the file keeps the timestamps taken around barriers at the start
 * and end of the window, from which merge.c aligns the ranks' clocks. */
#ifndef PP_PROFILE_H
#define PP_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"
#include "../schedule/schedule.h"

#define PROF_FORMAT   "pp-profile"
#define PROF_VERSION  1
#define PROF_NAME_LEN 24 /* event names, NUL included */

/* Where an event runs: the threads of a trace. */
typedef enum {
	PROF_S_COMPUTE,    /* the rank's compute stream (the main thread on the CPU) */
	PROF_S_SEND,       /* point-to-point sends to the neighbouring stages */
	PROF_S_RECV,       /* and receives */
	PROF_S_COLLECTIVE, /* gradient reductions, loss and norm sums, gathers */
	PROF_S_IO,         /* data loading, checkpoints */
	PROF_NSTREAMS
} prof_stream;

/* What kind of time an event is, for the analysis. */
typedef enum {
	PROF_C_STEP,       /* one optimizer step, enclosing its parts */
	PROF_C_COMPUTE,    /* forward and backward passes */
	PROF_C_P2P,        /* sends and receives between stages */
	PROF_C_COLLECTIVE, /* reductions and gathers */
	PROF_C_OPTIMIZER,
	PROF_C_IO,
	PROF_C_EVAL,
	PROF_C_OTHER, /* an event name this version does not know */
	PROF_NCATS
} prof_cat;

/* The events pp-train records. The first eight are the pipeline actions, in
 * the order of sched_op, so that an action's op converts directly. */
typedef enum {
	PROF_FWD,
	PROF_BWD,
	PROF_BWD_I,
	PROF_BWD_W,
	PROF_SEND_ACT,
	PROF_RECV_ACT,
	PROF_SEND_GRAD,
	PROF_RECV_GRAD,
	PROF_STEP,         /* train step: data, passes, gradient sums, optimizer */
	PROF_DATA,         /* reading the step's batch */
	PROF_GRAD_REDUCE,  /* one bucket of the dp gradient sum, launch to completion */
	PROF_GRAD_SYNC,    /* the step's gradient exchanges after the backward (blocking) */
	PROF_GRAD_NORM,    /* the global gradient norm */
	PROF_LOSS_REDUCE,  /* the step's loss summed over the pipeline and dp */
	PROF_OPTIMIZER,    /* AdamW */
	PROF_PARAM_GATHER, /* ZeRO-1: the updated parameters gathered over dp */
	PROF_CHECKPOINT,   /* a checkpoint save */
	PROF_EVAL,         /* a validation pass */
	PROF_OTHER,        /* read from a file: a name this version does not know */
	PROF_NOPS
} prof_op;

/* The op's name in files and traces ("forward", "send_act", ...), its
 * category and stream. */
const char *prof_op_name(prof_op op);
prof_cat prof_op_cat(prof_op op);
prof_stream prof_op_stream(prof_op op);
/* PROF_OTHER for a name not in the table. */
prof_op prof_op_of(const char *name);
const char *prof_stream_name(prof_stream s); /* "compute", "send", ... */
const char *prof_cat_name(prof_cat c);       /* "step", "compute", "p2p", ... */
static inline bool prof_is_compute(prof_op op) { return op <= PROF_BWD_W; }
static inline bool prof_is_p2p(prof_op op) { return op >= PROF_SEND_ACT && op <= PROF_RECV_GRAD; }
static inline bool prof_is_send(prof_op op) { return op == PROF_SEND_ACT || op == PROF_SEND_GRAD; }

/* One event. step: the optimizer step it belongs to (1-based, as the log
 * numbers them); mb, vstage, peer: -1 where they do not apply; peer is a
 * rank of the pp group for sends and receives. bytes: what a communication
 * moved from or to this rank. In a file, name, category and stream are
 * stored (the last two as HDF5 enums); op is derived from name on reading. */
typedef struct {
	char name[PROF_NAME_LEN];
	int32_t cat, stream; /* prof_cat, prof_stream */
	int64_t start, dur;  /* ns on the rank's clock */
	int64_t bytes;
	int32_t step, mb, vstage, peer;
	int32_t op; /* prof_op */
} prof_event;

/* Timestamps around one barrier of every rank: phase 0 at the start of the
 * window, 1 at its end; rounds 0, 1, ... of a phase. */
typedef struct {
	int32_t phase, round;
	int64_t before, after; /* ns on the rank's clock */
} prof_sync;

/* One rank's profile: its identity and place in the run, and its events. */
typedef struct {
	char path[4096]; /* the file it was read from */
	char run_id[40]; /* the same in every file of one run */
	char run_dir[4096];
	char preset[64];
	char host[256];
	char device[128];  /* "cpu", or "cuda:0 NVIDIA H100 80GB HBM3" */
	char schedule[24]; /* schedule_kind_name */
	int rank, world;
	int pp, dp, tp;
	int pp_rank, dp_rank, tp_rank;
	int v, m;                  /* virtual stages per rank, microbatches per step */
	long step_begin, step_end; /* the window: steps [step_begin, step_end) */
	bool device_clock;         /* compute events were timed on the device */
	prof_event *ev;
	size_t n_ev, cap_ev;
	prof_sync *sync;
	int n_sync, cap_sync;
} prof_rank;

/* Appends an event or a sync record (grows the arrays). PP_ERUNTIME when out
 * of memory. */
int prof_rank_add(prof_rank *r, const prof_event *ev, pp_err *e);
int prof_rank_add_sync(prof_rank *r, const prof_sync *s, pp_err *e);
void prof_rank_free(prof_rank *r);

/* Writes r as a profile file at path: to a temporary name beside it,
 * fsynced, then renamed into place, so that a reader never sees half a
 * file. Fills each event's name, category and stream from its op. */
int prof_write(const char *path, prof_rank *r, pp_err *e);
/* Reads and validates a profile file. Errors (PP_ERUNTIME) name the file and
 * what is wrong: not HDF5 or truncated, not a pp profile, another version,
 * a missing or malformed attribute or table, an event out of range. */
int prof_read(const char *path, prof_rank *r, pp_err *e);

/* "rank-00003.h5" */
void prof_file_name(int rank, char *buf, size_t n);

#endif
