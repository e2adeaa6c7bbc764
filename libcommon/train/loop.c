/* The steps of a run: profiles, evaluation, checkpoints (synchronous or
 * in the background), the watchdog and the stop conditions. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fsutil.h"
#include "../base/log.h"
#include "../plan/plan.h"
#include "deadline.h"
#include "internal.h"
#include "watchdog.h"

/* The profile window of this run (profile_steps), and the recorder for it;
 * t->prof stays NULL when the window is empty or already past. */
static int open_profile(trainer *t, pp_err *e)
{
	const pp_config *c = t->cfg;
	const pp_layout *me = &t->lay;
	long begin = c->profile_begin, end = c->profile_end;
	if (c->profile_count) {
		begin = t->step + 1 + c->timing_skip_steps;
		end = begin + c->profile_count;
	}
	if (end > c->steps + 1)
		end = c->steps + 1;
	if (begin >= end || end <= t->step + 1) {
		if (trainer_leader(t))
			log_info(
				"warning: profile_steps=%s: no step of this run (steps %ld to %ld) "
				"falls in it; nothing is profiled",
				c->profile_steps, t->step + 1, c->steps);
		return 0;
	}
	prof_rank id = {.rank = me->rank,
			.world = me->world,
			.pp = me->pp,
			.dp = me->data,
			.tp = me->tp,
			.pp_rank = me->pp_rank,
			.dp_rank = me->data_rank,
			.tp_rank = me->tp_rank,
			.v = me->v,
			.m = c->microbatches};
	snprintf(id.preset, sizeof id.preset, "%s", c->model.preset);
	snprintf(id.host, sizeof id.host, "%s", t->proc.host);
	snprintf(id.schedule, sizeof id.schedule, "%s", schedule_kind_name(c->schedule));
	snprintf(id.device, sizeof id.device, "%s", pp_device_name(c->device));
#ifdef PP_CUDA
	if (c->device == PP_DEVICE_CUDA)
		snprintf(id.device, sizeof id.device, "cuda:%d %s", boot_device(&t->proc),
			 pp_cuda_device_name());
#endif
	prof_rec_opts o = {c->run_dir,
			   begin,
			   end,
			   &id,
			   t->ops,
			   t->mesh.world_comm,
			   me->rank == c->debug.clock_offset_rank ? c->debug.clock_offset_s : 0};
	int rc = prof_rec_open(&t->prof, &o, e);
	t->pl.prof = t->sync.prof = t->prof;
	if (!rc && trainer_leader(t))
		log_info(
			"profiling steps %ld to %ld into %s/profile/ (pp-merge-profile merges them)",
			begin, end - 1, c->run_dir);
	return rc;
}

static int run_eval(trainer *t, run_log *lg, pp_err *e)
{
	double vl;
	int rc = trainer_eval(t, &vl, e);
	if (rc)
		return rc;
	if (lg->leader) {
		log_info("step %ld/%ld | val_loss %.4f (%d batches)", t->step, t->cfg->steps, vl,
			 t->cfg->eval_batches);
		train_log_scalar(lg, t->step, "val_loss", vl);
	}
	return train_tasks_score(t, lg, e);
}

/* The watchdog's end of a hung job: every rank (MPI_Abort), or this process. */
static void end_job(void *ctx, const char *why)
{
	trainer *t = ctx;
	comm_abort(t->mesh.world_comm, PP_ERUNTIME, why);
}

enum { STOP_NONE, STOP_RUNTIME, STOP_SIGNAL };

/* The step's agreement across ranks: whether to stop (*stop becomes the
 * largest reason of any rank), and the progress of the save in the
 * background (*bg), whose phases each end when they have ended on every
 * rank: the writes, then rank 0's commit. wait: until the save is
 * published. On an error *bg stays for the caller to free. */
static int save_progress(trainer *t, const train_opts *o, run_deadline *dl, ckpt_job **bg,
			 int *stop, bool wait, pp_err *e)
{
	for (;;) {
		ckpt_job *j = *bg;
		pp_err mine = {0};
		int failed = 0;
		if (j && (wait || !ckpt_job_busy(j)))
			failed = ckpt_job_join(j, &mine) != 0;
		int v[3] = {*stop, j && ckpt_job_busy(j), failed};
		int rc = sum_over(t->mesh.world_comm, v, 3, PP_DT_I32, PP_OP_MAX, e);
		*stop = v[0];
		if (rc || !j)
			return rc;
		if (v[2]) {
			if (!failed)
				return pp_errorf(e, PP_ERUNTIME,
						 "checkpoint step %ld: another rank failed to "
						 "write its part (see its message)",
						 j->cs.step);
			*e = mine;
			return mine.code;
		}
		if (v[1])
			return 0;
		if (j->phase == CKPT_JOB_WRITE) {
			/* every rank's files are written: rank 0 publishes them */
			j->phase = CKPT_JOB_COMMIT;
			if (t->lay.rank == 0)
				ckpt_job_start(j, CKPT_JOB_COMMIT,
					       NULL); /* a failure is the job's status */
			if (wait)
				continue;
			return 0;
		}
		double took = clock_seconds() - j->t_start;
		deadline_save(dl, took);
		if (!o->quiet && trainer_leader(t))
			log_info("checkpoint step %ld written in the background in %.2f s",
				 j->cs.step, took);
		ckpt_job_free(j);
		free(j);
		*bg = NULL;
		return 0;
	}
}

/* Saves a checkpoint of the current step, after waiting for the one in
 * flight. Synchronous; or with async, the step is blocked only while the
 * state is copied, and the rest goes on in the background (*bg). */
static int checkpoint(trainer *t, const train_opts *o, run_log *lg, run_deadline *dl, ckpt_job **bg,
		      bool async, pp_err *e)
{
	double s0 = clock_seconds();
	int none = STOP_NONE, rc = 0;
	if (*bg && (rc = save_progress(t, o, dl, bg, &none, true, e)))
		return rc;
	double waited = clock_seconds() - s0;
	bool say = !o->quiet && trainer_leader(t);
	if (!async) {
		rc = trainer_save(t, e);
		deadline_save(dl, clock_seconds() - s0 - waited);
		if (!rc && say)
			log_info("saved checkpoint step %ld in %.3f s", t->step,
				 clock_seconds() - s0);
		return rc;
	}
	ckpt_job *j = malloc(sizeof *j);
	if (!j)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint save: out of memory");
	if ((rc = train_save_prepare(t, j, e))) {
		ckpt_job_free(j);
		free(j);
		return rc;
	}
	j->t_start = s0 + waited;
	ckpt_job_start(j, CKPT_JOB_WRITE, NULL); /* a failure is the job's status */
	*bg = j;
	double blocked = clock_seconds() - s0;
	char wait[64] = "";
	if (waited > 0.0005)
		snprintf(wait, sizeof wait, "%.3f s waiting for the previous save, %.3f s ", waited,
			 blocked - waited);
	if (say)
		log_info(
			"checkpoint step %ld: training blocked %.3f s (%scopying the state), writing it in "
			"the background",
			t->step, blocked, wait);
	train_log_scalar(lg, t->step, "checkpoint_blocked_s", blocked);
	return 0;
}

int trainer_run(trainer *t, const train_opts *o, pp_err *e)
{
	pp_config *c = t->cfg;
	run_log lg = {0};
	int rc = 0;
	if (trainer_leader(t))
		rc = fs_mkdir_p(c->run_dir, e);
	if ((rc = agree(t, rc, e)))
		return rc;
	train_log_open(&lg, c, trainer_leader(t));
	lg.flops_per_token = plan_flops_per_token(&c->model, c->seq_len);
	const char *device = pp_device_name(c->device);
#ifdef PP_CUDA
	if (c->device == PP_DEVICE_CUDA)
		device = pp_cuda_device_name();
#endif
	/* MFU only against a known dense bf16 peak (plan.c's table) */
	lg.peak = plan_peak_tflops(device) * 1e12;
	lg.peak_fp8 = c->fp8.recipe != PP_FP8_NONE ? plan_fp8_peak_tflops(device) * 1e12 : 0;

	if (c->profile_steps[0] && (rc = open_profile(t, e)))
		return rc;
	size_t n = (size_t)c->microbatches * c->microbatch * c->seq_len;
	int *tok = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
	char fsdp[32] = "", fp8[96] = "";
	if (c->fsdp > 1)
		snprintf(fsdp, sizeof fsdp, " fsdp=%d", c->fsdp);
	if (c->fp8.recipe == PP_FP8_DELAYED)
		snprintf(fp8, sizeof fp8, ", FP8 delayed scaling (amax history %d, margin %g)%s",
			 c->fp8.amax_history, c->fp8.margin, c->fp8.head ? " with the head" : "");
	else if (c->fp8.recipe == PP_FP8_CURRENT)
		snprintf(fp8, sizeof fp8, ", FP8 current scaling%s",
			 c->fp8.head ? " with the head" : "");
	if (!o->quiet && trainer_leader(t))
		log_info("training %s on %d rank%s (pp=%d dp=%d%s tp=%d, %s, %d microbatches%s) "
			 "for %ld steps from step %ld; %.3g FLOP/token = 6N + 6*L*H*D*T; %d x %d "
			 "tokens per step",
			 c->model.preset, t->lay.world, t->lay.world > 1 ? "s" : "", c->pp, c->dp,
			 fsdp, c->tp, schedule_kind_name(c->schedule), c->microbatches, fp8,
			 c->steps, t->step, lg.flops_per_token, c->global_batch, c->seq_len);
	if (!o->quiet && trainer_leader(t))
		train_log_state_bytes(t);
	if (!o->quiet && trainer_leader(t)) {
		if (lg.peak > 0 && lg.peak_fp8 > 0)
			log_info(
				"device %s, dtype %s: MFU against its dense bf16 peak of %.1f "
				"TFLOP/s (model FLOPs, FP8 or not), and against its FP8 peak of %.1f "
				"TFLOP/s (mfu_fp8)",
				device, pp_type_name(c->dtype), lg.peak / 1e12, lg.peak_fp8 / 1e12);
		else if (lg.peak > 0)
			log_info(
				"device %s, dtype %s: MFU against its dense bf16 peak of %.1f TFLOP/s",
				device, pp_type_name(c->dtype), lg.peak / 1e12);
		else
			log_info("device %s, dtype %s: no known peak, so no MFU", device,
				 pp_type_name(c->dtype));
	}
	watchdog *wd = NULL;
	if (!rc && c->step_timeout > 0)
		rc = watchdog_start(&wd, c->step_timeout, end_job, t, e);
	run_deadline dl;
	deadline_init(&dl, c->max_runtime);
	ckpt_job *bg = NULL; /* an asynchronous save in flight */
	while (t->step < c->steps && !rc) {
		step_result res = {0};
		double t0 = clock_seconds();
		watchdog_arm(wd, t->step + 1);
		if ((rc = prof_rec_step_begin(t->prof, t->step + 1, e)))
			break;
		prof_span step = prof_begin(t->prof, PROF_STEP);
		rc = train_step(t, tok, tgt, &res, e);
		prof_end(t->prof, &step, -1, -1, -1, 0);
		if (rc)
			break;
		train_log_step(t, &lg, o, &res, clock_seconds() - t0);
		deadline_step(&dl, clock_seconds() - t0);
		if (c->eval_interval > 0 &&
		    (t->step % c->eval_interval == 0 || t->step == c->steps)) {
			prof_span ev = prof_begin(t->prof, PROF_EVAL);
			rc = run_eval(t, &lg, e);
			prof_end(t->prof, &ev, -1, -1, -1, 0);
		}
		/* a signal may reach the ranks at different steps: agree */
		int stop = o->stop && *o->stop  ? STOP_SIGNAL
			   : deadline_near(&dl) ? STOP_RUNTIME
						: STOP_NONE;
		if (!rc)
			rc = save_progress(t, o, &dl, &bg, &stop, false, e);
		watchdog_disarm(wd);
		bool period = c->checkpoint_period > 0 && t->step % c->checkpoint_period == 0;
		bool last = t->step == c->steps && c->save_on_completion;
		if (!rc && (period || stop || last)) {
			prof_span save = prof_begin(t->prof, PROF_CHECKPOINT);
			rc = checkpoint(t, o, &lg, &dl, &bg,
					c->async_checkpointing && !stop && !last, e);
			prof_end(t->prof, &save, -1, -1, -1, 0);
		}
		if (!rc)
			rc = prof_rec_step_end(t->prof, t->step, e);
		if (!rc && stop && t->step < c->steps) {
			/* exit status 75: the batch script requeues the job */
			char why[128];
			if (stop == STOP_SIGNAL)
				snprintf(why, sizeof why, "stopped by a signal");
			else
				snprintf(why, sizeof why,
					 "stopped by max_runtime=%g s with %.0f s left",
					 c->max_runtime, c->max_runtime - deadline_elapsed(&dl));
			if (trainer_leader(t))
				log_info("%s at step %ld after saving a checkpoint", why, t->step);
			rc = pp_errorf(e, PP_ESTOPPED, "%s at step %ld; checkpoint saved", why,
				       t->step);
		}
	}
	if (bg && !rc) {
		int none = STOP_NONE;
		rc = save_progress(t, o, &dl, &bg, &none, true, e);
	}
	if (bg) {                  /* failed: what it wrote is not a checkpoint */
		ckpt_job_free(bg); /* joins its thread first */
		free(bg);
	}
	watchdog_stop(wd);
	/* a run that ends inside the window: every rank is here, unless one failed */
	pp_err pe;
	int prc = prof_rec_finish(t->prof, !rc || rc == PP_ESTOPPED, &pe);
	if (prc && !rc) {
		rc = prc;
		*e = pe;
	}
	if (!rc && !o->quiet)
		train_log_timing(t, &lg);
	if (!rc && !o->quiet && trainer_leader(t) && fsdp_on(t))
		log_info(
			"fsdp: %ld all-gathers of a layer's parameters, %ld of them issued while the "
			"layer before computed (%ld still in flight when needed); %ld reduce-scatters",
			t->fsdp.stats.gathers, t->fsdp.stats.prefetched, t->fsdp.stats.waited,
			t->fsdp.stats.reduces);
	else if (!rc && !o->quiet && trainer_leader(t) && t->mesh.data_comm)
		log_info(
			"gradient sum over dp: %d reduction(s) overlapped with the backward passes, "
			"%d after them (grad_bucket_mb=%g)",
			t->sync.early, t->sync.late, c->grad_bucket_mb);
	free(tok);
	free(tgt);
	train_log_close(&lg);
	return rc;
}

/* ---- sampling ------------------------------------------------------------ */
