#include "async.h"

#include "../base/fsutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

void *ckpt_job_own(ckpt_job *j, void *p)
{
	if (!p)
		return NULL;
	if (j->n_owned == j->cap_owned) {
		int cap = j->cap_owned ? 2 * j->cap_owned : 64;
		void **o = realloc(j->owned, (size_t)cap * sizeof *o);
		if (!o) {
			free(p);
			return NULL;
		}
		j->owned = o;
		j->cap_owned = cap;
	}
	j->owned[j->n_owned++] = p;
	return p;
}

int ckpt_job_run(ckpt_job *j, int phase, pp_err *e)
{
	j->phase = phase;
	if (phase == CKPT_JOB_COMMIT)
		return ckpt_commit(j->run_dir, j->tmp, j->cs.step, j->keep, e);
	int rc = 0;
	if (j->write_shard)
		rc = ckpt_write_shard(j->tmp, &j->cs, e);
	if (!rc && j->write_optim)
		rc = ckpt_write_optim_shard(j->tmp, &j->cs, e);
	return rc;
}

static void *thread_main(void *arg)
{
	ckpt_job *j = arg;
	j->rc = ckpt_job_run(j, j->phase, &j->err);
	__atomic_store_n(&j->busy, 0, __ATOMIC_RELEASE);
	return NULL;
}

int ckpt_job_start(ckpt_job *j, int phase, pp_err *e)
{
	if (j->running && ckpt_job_join(j, e))
		return e ? e->code : PP_ERUNTIME;
	j->phase = phase;
	j->rc = 0;
	memset(&j->err, 0, sizeof j->err);
	__atomic_store_n(&j->busy, 1, __ATOMIC_RELEASE);
	/* signals (SIGTERM, SIGUSR1) stay with the training thread */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(&j->thread, NULL, thread_main, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		j->busy = 0;
		j->rc = pp_errorf(&j->err, PP_ERUNTIME,
				  "checkpoint %s: cannot start the writer thread: %s", j->tmp,
				  strerror(rc));
		if (e)
			*e = j->err;
		return j->rc;
	}
	j->running = true;
	return 0;
}

bool ckpt_job_busy(const ckpt_job *j)
{
	return j->running && __atomic_load_n(&j->busy, __ATOMIC_ACQUIRE);
}

int ckpt_job_join(ckpt_job *j, pp_err *e)
{
	if (j->running) {
		pthread_join(j->thread, NULL);
		j->running = false;
	}
	if (j->rc && e)
		*e = j->err;
	return j->rc;
}

void ckpt_job_free(ckpt_job *j)
{
	ckpt_job_join(j, NULL);
	/* a save that did not publish leaves no temporary directory (rank 0
	 * made it; gone already when committed) */
	if (j->made_tmp && j->tmp[0])
		fs_rm_rf(j->tmp);
	for (int i = 0; i < j->n_owned; i++)
		free(j->owned[i]);
	free(j->owned);
	free(j->cs.tensors);
	free(j->cs.optim);
	memset(j, 0, sizeof *j);
}
