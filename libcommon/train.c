#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ckpt.h"
#include "log.h"
#include "plan.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int trainer_open(trainer *t, pp_config *c, bool params_only, pp_err *e)
{
	memset(t, 0, sizeof *t);
	t->cfg = c;
	const pp_model_cfg *m = &c->model;
	if (m->n_experts > 0)
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s' is a mixture of experts (n_experts=%d): this version of pp "
				 "plans and checkpoints MoE models but trains dense models only",
				 m->preset, m->n_experts);
	if (m->pos == PP_POS_RELATIVE)
		return pp_errorf(e, PP_EUSAGE,
				 "model '%s' uses relative position biases (pos=relative): this version "
				 "of pp trains rope and learned positions only",
				 m->preset);
	int world = c->pp * c->dp * c->tp;
	if (world != 1)
		return pp_errorf(e, PP_EUSAGE,
				 "the layout pp=%d dp=%d tp=%d needs %d ranks, but this process runs "
				 "alone; set pp=1 dp=1 tp=1",
				 c->pp, c->dp, c->tp, world);
	t->ops = pp_ops_find(c->device);
	if (!t->ops)
		return pp_errorf(e, PP_EUSAGE, "device=%s: this build of pp has no %s backend",
				 c->device, c->device);
	int B = params_only ? 1 : c->microbatch, T = params_only ? 1 : c->seq_len;
	stage_spec spec = stage_spec_whole(m, B, T, c->recompute);
	int rc = stage_create(&t->stage, m, t->ops, &spec, e);
	if (rc)
		return rc;
	if ((rc = optim_create(&t->opt, t->ops, t->stage.n_elems, e)))
		return rc;
	if (params_only)
		return 0;
	if ((rc = data_open(&t->train, c, "train", 0, 1, e)))
		return rc;
	if (c->eval_interval > 0 && (rc = data_open(&t->val, c, "val", 0, 1, e)))
		return rc;
	return 0;
}

void trainer_close(trainer *t)
{
	data_close(t->train);
	data_close(t->val);
	optim_free(&t->opt);
	if (t->stage.ops)
		stage_free(&t->stage);
	memset(t, 0, sizeof *t);
}

void trainer_init(trainer *t)
{
	stage_init_params(&t->stage, t->cfg->seed);
	t->step = 0;
}

/* ---- checkpoints ------------------------------------------------------- */

/* Host views of the parameters and AdamW state: the buffers themselves on
 * the CPU backend, copies otherwise. */
typedef struct {
	pp_real *w, *m, *v;
	bool copied;
} host_state;

static void host_state_get(trainer *t, host_state *h, bool fetch)
{
	const pp_ops *o = t->ops;
	size_t bytes = t->stage.n_elems * sizeof(pp_real);
	h->copied = strcmp(o->name, "cpu") != 0;
	if (!h->copied) {
		*h = (host_state){t->stage.w, t->opt.m, t->opt.v, false};
		return;
	}
	h->w = malloc(bytes);
	h->m = malloc(bytes);
	h->v = malloc(bytes);
	if (fetch) {
		o->to_host(h->w, t->stage.w, bytes);
		o->to_host(h->m, t->opt.m, bytes);
		o->to_host(h->v, t->opt.v, bytes);
	}
}

static void host_state_put(trainer *t, host_state *h, bool store)
{
	if (!h->copied)
		return;
	size_t bytes = t->stage.n_elems * sizeof(pp_real);
	if (store) {
		t->ops->to_device(t->stage.w, h->w, bytes);
		t->ops->to_device(t->opt.m, h->m, bytes);
		t->ops->to_device(t->opt.v, h->v, bytes);
	}
	free(h->w);
	free(h->m);
	free(h->v);
}

static ckpt_tensor *ckpt_tensors(const pp_stage *s, const host_state *h)
{
	ckpt_tensor *ts = calloc((size_t)s->n_params, sizeof *ts);
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		ckpt_tensor *c = &ts[i];
		c->name = p->name;
		c->ndim = p->ndim;
		for (int d = 0; d < p->ndim; d++)
			c->shape[d] = c->global_shape[d] = p->shape[d];
		c->param = h->w + p->off;
		c->m = h->m + p->off;
		c->v = h->v + p->off;
	}
	return ts;
}

static void ckpt_fill(trainer *t, ckpt_state *cs, const host_state *h)
{
	memset(cs, 0, sizeof *cs);
	cs->step = t->step;
	cs->rng[0] = t->cfg->seed;
	/* without a loader (pp-init) the position is the start of the data */
	cs->n_data_state = t->train ? data_get_state(t->train, cs->data_state, PP_CKPT_DATA_STATE) : 1;
	cs->pp_size = cs->tp_size = cs->dp_size = 1;
	cs->n_tensors = t->stage.n_params;
	cs->tensors = ckpt_tensors(&t->stage, h);
}

int trainer_save(trainer *t, pp_err *e)
{
	host_state h;
	host_state_get(t, &h, true);
	ckpt_state cs;
	ckpt_fill(t, &cs, &h);
	char *json = pp_config_dump(t->cfg);
	cs.config_json = json;
	int rc = ckpt_save(t->cfg->run_dir, &cs, t->cfg->keep, e);
	free(json);
	free(cs.tensors);
	host_state_put(t, &h, false);
	return rc;
}

/* A checkpoint must hold the same model as the config that resumes it. */
static int check_same_model(trainer *t, const char *dir, pp_err *e)
{
	char *text = NULL;
	int rc = ckpt_read_config(dir, &text, e);
	if (rc)
		return rc;
	json_error_t je;
	json_t *saved = json_loads(text, 0, &je);
	free(text);
	json_t *a = json_object_get(saved, "model"), *b = json_object_get(t->cfg->json, "model");
	rc = 0;
	if (!a || !b) {
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: its stored config has no model", dir);
	} else if (!json_equal(a, b)) {
		const char *key;
		json_t *v;
		json_object_foreach(b, key, v)
		{
			if (!json_equal(v, json_object_get(a, key))) {
				char *sv = json_dumps(json_object_get(a, key), JSON_ENCODE_ANY);
				char *cv = json_dumps(v, JSON_ENCODE_ANY);
				rc = pp_errorf(e, PP_EUSAGE,
					       "checkpoint %s was saved with model.%s=%s but the config "
					       "says model.%s=%s; use another run_dir or the same model",
					       dir, key, sv ? sv : "(absent)", key, cv);
				free(sv);
				free(cv);
				break;
			}
		}
		if (!rc)
			rc = pp_errorf(e, PP_EUSAGE, "checkpoint %s holds a different model", dir);
	}
	json_decref(saved);
	return rc;
}

int trainer_resume(trainer *t, bool *resumed, pp_err *e)
{
	char dir[PP_PATH_MAX + 64];
	long step = -1;
	*resumed = false;
	int rc = ckpt_find_newest(t->cfg->run_dir, dir, sizeof dir, &step, e);
	if (rc || step < 0)
		return rc;
	if ((rc = check_same_model(t, dir, e)))
		return rc;
	host_state h;
	host_state_get(t, &h, false);
	ckpt_state cs;
	ckpt_fill(t, &cs, &h);
	rc = ckpt_load(dir, &cs, e);
	if (!rc && t->train)
		rc = data_set_state(t->train, cs.data_state, cs.n_data_state, e);
	if (!rc && cs.step > t->cfg->steps)
		rc = pp_errorf(e, PP_EUSAGE, "checkpoint %s is at step %ld, past steps=%ld", dir,
			       cs.step, t->cfg->steps);
	host_state_put(t, &h, !rc);
	free(cs.tensors);
	if (rc)
		return pp_err_prefix(e, "resuming from %s", dir);
	t->step = cs.step;
	*resumed = true;
	return 0;
}

/* ---- the loop ---------------------------------------------------------- */

int trainer_eval(trainer *t, double *loss, pp_err *e)
{
	const pp_config *c = t->cfg;
	const int N = c->microbatch * c->seq_len;
	int *tok = malloc((size_t)N * sizeof(int)), *tgt = malloc((size_t)N * sizeof(int));
	double sum = 0;
	long valid = 0;
	int rc = 0;
	data_rewind(t->val);
	for (int b = 0; b < c->eval_batches && !rc; b++) {
		rc = data_next(t->val, c->microbatch, c->seq_len, tok, tgt, e);
		if (!rc)
			rc = stage_forward(&t->stage, 0, tok, NULL, tgt, 0, &sum, &valid, NULL, e);
	}
	free(tok);
	free(tgt);
	*loss = valid ? sum / (double)valid : NAN;
	return rc;
}

typedef struct {
	FILE *metrics;
	double flops_per_token;
	double peak; /* FLOP/s of the device, 0 when unknown */
	double t_avg;
} run_log;

static void log_step(const trainer *t, run_log *lg, const train_opts *o, double loss, double lr,
		     double gnorm, double dt, bool skipped)
{
	const pp_config *c = t->cfg;
	double tokens = (double)c->global_batch * c->seq_len;
	double tps = tokens / dt, fps = tps * lg->flops_per_token;
	lg->t_avg = lg->t_avg > 0 ? 0.9 * lg->t_avg + 0.1 * dt : dt;
	char mfu[64] = "null";
	if (lg->peak > 0)
		snprintf(mfu, sizeof mfu, "%.4f", fps / lg->peak);
	fprintf(lg->metrics,
		"{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
		"\"step_time\": %.6f, \"tokens_per_s\": %.1f, \"flops_per_s\": %.6g, \"mfu\": %s%s}\n",
		t->step, loss, lr, gnorm, dt, tps, fps, mfu, skipped ? ", \"skipped\": true" : "");
	fflush(lg->metrics);
	if (o->quiet || (t->step % c->log_period && t->step != c->steps))
		return;
	char rate[64], eta[32], tp[32];
	log_thousands(tp, sizeof tp, tps);
	if (lg->peak > 0)
		snprintf(rate, sizeof rate, "%.1f TFLOP/s | MFU %.1f%%", fps / 1e12,
			 100 * fps / lg->peak);
	else
		snprintf(rate, sizeof rate, "%.1f GFLOP/s", fps / 1e9);
	log_duration(eta, sizeof eta, lg->t_avg * (double)(c->steps - t->step));
	log_info("step %ld/%ld | loss %.4f | lr %.2e | grad_norm %.3f | %.3f s | %s tok/s | %s | "
		 "ETA %s%s",
		 t->step, c->steps, loss, lr, gnorm, dt, tp, rate, eta,
		 skipped ? " | skipped (non-finite)" : "");
}

static int run_eval(trainer *t, run_log *lg, pp_err *e)
{
	double vl;
	int rc = trainer_eval(t, &vl, e);
	if (rc)
		return rc;
	log_info("step %ld/%ld | val_loss %.4f (%d batches)", t->step, t->cfg->steps, vl,
		 t->cfg->eval_batches);
	fprintf(lg->metrics, "{\"step\": %ld, \"val_loss\": %.9g}\n", t->step, vl);
	fflush(lg->metrics);
	return 0;
}

/* One optimizer step over every microbatch of the global batch. */
static int train_step(trainer *t, int *tok, int *tgt, double *loss, double *gnorm, bool *skipped,
		      double *lr, pp_err *e)
{
	const pp_config *c = t->cfg;
	const int mb = c->microbatch, T = c->seq_len, n_mb = c->global_batch / mb;
	const size_t N = (size_t)mb * T;
	int rc = data_next(t->train, c->global_batch, T, tok, tgt, e);
	if (rc)
		return rc;
	long valid = 0;
	for (size_t i = 0; i < (size_t)c->global_batch * T; i++)
		valid += tgt[i] >= 0;
	if (!valid)
		return pp_errorf(e, PP_ERUNTIME, "step %ld: the batch has no target tokens",
				 t->step + 1);
	/* dscale = 1/valid makes the summed gradients those of the mean loss */
	pp_real dscale = (pp_real)(1.0 / (double)valid);
	double sum = 0;
	stage_zero_grad(&t->stage);
	for (int k = 0; k < n_mb; k++) {
		rc = stage_forward(&t->stage, 0, tok + k * N, NULL, tgt + k * N, dscale, &sum, NULL,
				   NULL, e);
		if (!rc)
			rc = stage_backward(&t->stage, 0, STAGE_BWD_FULL, NULL, NULL, e);
		if (rc)
			return rc;
	}
	*loss = sum / (double)valid;
	*gnorm = optim_grad_norm(&t->stage);
	*lr = optim_lr(c, t->step);
	*skipped = !isfinite(*loss) || !isfinite(*gnorm);
	if (*skipped && strcmp(c->nan_policy, "skip") != 0)
		return pp_errorf(e, PP_ERUNTIME,
				 "step %ld: %s is %g (loss %g, gradient norm %g); stopping "
				 "(nan_policy=skip skips such steps)",
				 t->step + 1, isfinite(*loss) ? "gradient norm" : "loss",
				 isfinite(*loss) ? *gnorm : *loss, *loss, *gnorm);
	if (!*skipped)
		optim_step(&t->opt, &t->stage, c, t->step + 1, *lr, optim_clip_scale(c, *gnorm));
	t->step++;
	return 0;
}

int trainer_run(trainer *t, const train_opts *o, pp_err *e)
{
	pp_config *c = t->cfg;
	char path[PP_PATH_MAX + 32];
	if (mkdir(c->run_dir, 0755) && errno != EEXIST)
		return pp_errorf(e, PP_ERUNTIME, "cannot create run_dir %s: %s", c->run_dir,
				 strerror(errno));
	snprintf(path, sizeof path, "%s/metrics.jsonl", c->run_dir);
	run_log lg = {0};
	lg.metrics = fopen(path, "a");
	if (!lg.metrics)
		return pp_errorf(e, PP_ERUNTIME, "cannot open %s: %s", path, strerror(errno));
	lg.flops_per_token = plan_flops_per_token(&c->model, c->seq_len);

	size_t n = (size_t)c->global_batch * c->seq_len;
	int *tok = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
	int rc = 0;
	if (!o->quiet)
		log_info("training %s (%zu parameters, %.3g FLOP/token = 6N + 6*L*H*D*T) for %ld "
			 "steps from step %ld; %d x %d tokens per step",
			 c->model.preset, t->stage.n_elems, lg.flops_per_token, c->steps, t->step,
			 c->global_batch, c->seq_len);
	while (t->step < c->steps && !rc) {
		double loss = 0, gnorm = 0, lr = 0, t0 = now();
		bool skipped;
		rc = train_step(t, tok, tgt, &loss, &gnorm, &skipped, &lr, e);
		if (rc)
			break;
		log_step(t, &lg, o, loss, lr, gnorm, now() - t0, skipped);
		if (c->eval_interval > 0 && (t->step % c->eval_interval == 0 || t->step == c->steps))
			rc = run_eval(t, &lg, e);
		bool stop = o->stop && *o->stop;
		bool period = c->checkpoint_period > 0 && t->step % c->checkpoint_period == 0;
		if (!rc && (period || stop || t->step == c->steps)) {
			double s0 = now();
			rc = trainer_save(t, e);
			if (!rc && !o->quiet)
				log_info("saved checkpoint step %ld in %.2f s", t->step, now() - s0);
		}
		if (!rc && stop && t->step < c->steps) {
			log_info("stopped by a signal at step %ld after saving", t->step);
			rc = PP_ESTOPPED;
			pp_errorf(e, PP_ESTOPPED, "stopped by a signal at step %ld; checkpoint saved",
				  t->step);
		}
	}
	free(tok);
	free(tgt);
	fclose(lg.metrics);
	return rc;
}
