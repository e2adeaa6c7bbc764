/* One rank's part of a checkpoint save, held as a job so that it can run
 * on a background thread while training goes on (MaxText's asynchronous
 * checkpointing). The job owns host copies of the state (taken while the
 * step was blocked) and writes them with the same atomicity as a
 * synchronous save: every file goes into the temporary directory, and only
 * the commit (rank 0, after every rank's files are written) publishes it.
 *
 * The phases, each either inline or on the job's thread:
 *   write   every rank: its shard (dp rank 0 of each (pp, tp)) and, under
 *           ZeRO-1 or fsdp, its optimizer file (ckpt_write_shard,
 *           ckpt_write_optim_shard; under fsdp the first fsdp group's ranks)
 *   commit  rank 0, once every rank's write succeeded: ckpt_commit
 * The caller agrees between the phases over its communicator; the job
 * itself never talks to other ranks. At most one phase runs at a time. */
#ifndef PP_CKPT_ASYNC_H
#define PP_CKPT_ASYNC_H

#include <pthread.h>
#include <stdbool.h>

#include "ckpt.h"

enum { CKPT_JOB_WRITE, CKPT_JOB_COMMIT };

typedef struct {
	char run_dir[4096];
	char tmp[4096 + 128]; /* the temporary directory (ckpt_begin) */
	int keep;
	ckpt_state cs;    /* header, tensors and optimizer parts: host copies */
	bool write_shard; /* this rank writes the (pp, tp) shard */
	bool write_optim; /* and its optimizer file (cs.optim_per_dp) */
	bool made_tmp;    /* this rank made tmp: ckpt_job_free removes it if it is still there */
	void **owned;     /* freed with the job */
	int n_owned, cap_owned;
	/* the thread */
	pthread_t thread;
	bool running;
	int phase;         /* CKPT_JOB_*: the phase running or last run */
	volatile int busy; /* set while a phase runs on the thread */
	int rc;
	pp_err err;
	double t_start; /* when the write started (monotonic seconds) */
} ckpt_job;

/* Hands p (malloc'd) to the job; it is freed by ckpt_job_free. Returns p, or
 * NULL (p freed) when out of memory. */
void *ckpt_job_own(ckpt_job *j, void *p);

/* Runs a phase in this thread. */
int ckpt_job_run(ckpt_job *j, int phase, pp_err *e);
/* Starts a phase on the job's thread (a failure to start is also kept as
 * the job's status). */
int ckpt_job_start(ckpt_job *j, int phase, pp_err *e);
/* Whether a phase started with ckpt_job_start is still running. */
bool ckpt_job_busy(const ckpt_job *j);
/* Waits for the phase on the thread to end; returns the status of the last
 * phase started (0 when none failed). */
int ckpt_job_join(ckpt_job *j, pp_err *e);
/* Joins any phase still running, removes tmp if this rank made it and it
 * was not published, then frees what the job owns (not j). */
void ckpt_job_free(ckpt_job *j);

#endif
