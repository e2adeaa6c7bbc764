/* The run's log: a line per step (MaxText's), metrics.jsonl, TensorBoard
 * events, the timing summary and the training state's memory. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../base/log.h"
#include "internal.h"

/* The scalars of a metrics.jsonl record into the TensorBoard events too; a
 * failed write is reported once and ends the events, not the run. */
static void tensorboard_scalars(run_log *lg, long step, const char *const *tags, const double *vals,
				int n)
{
	pp_err e = {0};
	if (lg->tb && tb_scalars(lg->tb, step, tags, vals, n, &e)) {
		log_info("warning: %s; no more TensorBoard events in this run", e.msg);
		tb_close(lg->tb);
		lg->tb = NULL;
	}
}

void train_log_open(run_log *lg, const pp_config *c, bool leader)
{
	lg->leader = leader;
	if (!leader)
		return;
	snprintf(lg->metrics_path, sizeof lg->metrics_path, "%s/metrics.jsonl", c->run_dir);
	if (!(lg->metrics = fopen(lg->metrics_path, "a")))
		log_info("warning: cannot open %s: %s; no metrics records in this run",
			 lg->metrics_path, strerror(errno));
	char path[PP_PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/tensorboard", c->run_dir);
	pp_err e = {0};
	if (c->tensorboard && tb_open(&lg->tb, path, &e)) {
		log_info("warning: %s; no TensorBoard events in this run", e.msg);
		lg->tb = NULL;
	}
}

void train_log_close(run_log *lg)
{
	if (lg->metrics)
		fclose(lg->metrics);
	tb_close(lg->tb);
	lg->metrics = NULL;
	lg->tb = NULL;
}

/* One metrics.jsonl record; a failed write is said once, naming the file,
 * and ends the records, not the run (as the TensorBoard events). */
static void metrics_record(run_log *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void metrics_record(run_log *lg, const char *fmt, ...)
{
	if (!lg->metrics)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(lg->metrics, fmt, ap);
	va_end(ap);
	if (fflush(lg->metrics) == 0 && !ferror(lg->metrics))
		return;
	log_info("warning: cannot write %s: %s; no more metrics records in this run",
		 lg->metrics_path, strerror(errno));
	fclose(lg->metrics);
	lg->metrics = NULL;
}

/* v for JSON: NaN and infinities, which JSON lacks, as null */
static const char *json_number(char *buf, size_t n, double v)
{
	if (isfinite(v))
		snprintf(buf, n, "%.9g", v);
	else
		snprintf(buf, n, "null");
	return buf;
}

/* A record of one scalar for metrics.jsonl and TensorBoard. */
void train_log_scalar(run_log *lg, long step, const char *name, double v)
{
	if (!lg->leader)
		return;
	char num[32];
	metrics_record(lg, "{\"step\": %ld, \"%s\": %s}\n", step, name,
		       json_number(num, sizeof num, v));
	tensorboard_scalars(lg, step, &name, &v, 1);
}

void train_log_step(const trainer *t, run_log *lg, const train_opts *o, const step_result *r,
		    double dt)
{
	const pp_config *c = t->cfg;
	const double loss = r->loss, lr = r->lr, gnorm = r->gnorm;
	const bool skipped = r->skipped, moe = c->model.n_experts > 0,
		   fp8 = c->fp8.recipe != PP_FP8_NONE;
	if (!lg->leader)
		return;
	double tokens = (double)c->global_batch * c->seq_len;
	double tps = tokens / dt, fps = tps * lg->flops_per_token / t->lay.world;
	/* the warm-up steps (compilation, first touches, caches) are not the
	 * run's pace: the ETA and the summary leave them out */
	if (++lg->n_run > c->timing_skip_steps) {
		lg->t_avg = lg->n_timed ? 0.9 * lg->t_avg + 0.1 * dt : dt;
		lg->n_timed++;
		lg->timed += dt;
	} else if (!lg->n_timed) {
		lg->t_avg = dt;
	}
	char mfu[96] = "null";
	if (lg->peak > 0)
		snprintf(mfu, sizeof mfu, "%.6g", fps / lg->peak);
	if (lg->peak_fp8 > 0)
		snprintf(mfu + strlen(mfu), sizeof mfu - strlen(mfu), ", \"mfu_fp8\": %.6g",
			 fps / lg->peak_fp8);
	char l[32], g[32], ma[32], mz[32], extra_json[256] = "";
	if (moe)
		snprintf(
			extra_json, sizeof extra_json,
			", \"moe_aux_loss\": %s, \"moe_z_loss\": %s, \"moe_dropped_fraction\": %.6g",
			json_number(ma, sizeof ma, r->moe_aux),
			json_number(mz, sizeof mz, r->moe_z), r->moe_dropped);
	if (fp8)
		snprintf(extra_json + strlen(extra_json), sizeof extra_json - strlen(extra_json),
			 ", \"fp8_saturated_fraction\": %.6g, \"fp8_flushed_fraction\": %.6g",
			 r->fp8_saturated, r->fp8_flushed);
	metrics_record(
		lg,
		"{\"step\": %ld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
		"\"step_time\": %.6f, \"tokens_per_s\": %.1f, \"flops_per_s\": %.6g, \"mfu\": %s%s%s}\n",
		t->step, json_number(l, sizeof l, loss), lr, json_number(g, sizeof g, gnorm), dt,
		tps, fps, mfu, extra_json, skipped ? ", \"skipped\": true" : "");
	const char *tags[] = {"loss",         "lr",          "grad_norm", "step_time",
			      "tokens_per_s", "flops_per_s", "mfu"};
	const double vals[] = {loss, lr, gnorm, dt, tps, fps, lg->peak > 0 ? fps / lg->peak : 0};
	tensorboard_scalars(lg, t->step, tags, vals, lg->peak > 0 ? 7 : 6);
	if (moe) {
		const char *mt[] = {"moe_aux_loss", "moe_z_loss", "moe_dropped_fraction"};
		const double mv[] = {r->moe_aux, r->moe_z, r->moe_dropped};
		tensorboard_scalars(lg, t->step, mt, mv, 3);
	}
	if (fp8) {
		const char *ft[] = {"fp8_saturated_fraction", "fp8_flushed_fraction"};
		const double fv[] = {r->fp8_saturated, r->fp8_flushed};
		tensorboard_scalars(lg, t->step, ft, fv, 2);
	}
	if (o->quiet || (t->step % c->log_period && t->step != c->steps))
		return;
	char rate[96], eta[32], tp[32];
	log_thousands(tp, sizeof tp, tps);
	if (lg->peak > 0 && lg->peak_fp8 > 0)
		snprintf(rate, sizeof rate, "%.1f TFLOP/s/device | MFU %.1f%% (bf16), %.1f%% (FP8)",
			 fps / 1e12, 100 * fps / lg->peak, 100 * fps / lg->peak_fp8);
	else if (lg->peak > 0)
		snprintf(rate, sizeof rate, "%.1f TFLOP/s/device | MFU %.1f%%", fps / 1e12,
			 100 * fps / lg->peak);
	else
		snprintf(rate, sizeof rate, "%.3g TFLOP/s/device", fps / 1e12);
	log_duration(eta, sizeof eta, lg->t_avg * (double)(c->steps - t->step));
	char moe_line[128] = "";
	if (moe)
		snprintf(moe_line, sizeof moe_line, " | moe_aux %.4f | moe_z %.4f | dropped %.2f%%",
			 r->moe_aux, r->moe_z, 100 * r->moe_dropped);
	log_info("step %ld/%ld | loss %.4f%s | lr %.2e | grad_norm %.3f | %.3f s | %s tok/s | %s | "
		 "ETA %s%s",
		 t->step, c->steps, loss, moe_line, lr, gnorm, dt, tp, rate, eta,
		 skipped ? " | skipped (non-finite)" : "");
}

/* Mean step time, tokens/s and MFU over the steps after the warm-up. */
void train_log_timing(const trainer *t, const run_log *lg)
{
	const pp_config *c = t->cfg;
	if (!lg->leader || !lg->n_timed)
		return;
	double dt = lg->timed / (double)lg->n_timed;
	double tps = (double)c->global_batch * c->seq_len / dt;
	double fps = tps * lg->flops_per_token / t->lay.world;
	char tp[32], mfu[48] = "";
	log_thousands(tp, sizeof tp, tps);
	if (lg->peak > 0)
		snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * fps / lg->peak);
	log_info("timing: %.4f s per step over %ld step%s (%ld warm-up step%s left out: "
		 "timing_skip_steps) | %s tok/s | %.3g TFLOP/s/device%s",
		 dt, lg->n_timed, lg->n_timed > 1 ? "s" : "", lg->n_run - lg->n_timed,
		 lg->n_run - lg->n_timed == 1 ? "" : "s", tp, fps / 1e12, mfu);
}

/* The bytes of training state this rank allocated, as pp-init --plan
 * counts them: parameters (the compute copy), gradients, optimizer (AdamW
 * m and v, the fp32 master weights under bf16, the ZeRO-1 gather buffer);
 * under fsdp the shares of those, and beside them the working set: the
 * gathered units, the units' gradient buffers and the embedding's and
 * head's whole gradients. */
void train_log_state_bytes(const trainer *t)
{
	const size_t A = pp_act_size(t->ops);
	const double R = sizeof(pp_real);
	double params = 0, grads = 0, optim = (double)t->gather_n * R, acts = 0, scratch = 0;
	for (int k = 0; k < t->lay.v; k++) {
		stage_bytes b;
		stage_sizes(&t->chunks[k], A, &b);
		params += (double)b.params;
		grads += (double)b.grads;
		optim += 2 * (double)optim_ranges_count(&t->opt[k].r) * R + (double)b.master;
		acts += (double)(t->chunks[k].n_slots * b.slot + b.rebuilt);
		scratch += (double)(b.scratch + b.logits);
	}
	if (!fsdp_on(t)) {
		log_info(
			"training state on rank 0: parameters %.4g MB, gradients %.4g MB, optimizer "
			"%.4g MB",
			params / 1e6, grads / 1e6, optim / 1e6);
	} else {
		fsdp_bytes f;
		fsdp_sizes(t->chunks, t->lay.v, A, &f);
		log_info(
			"training state on rank 0: parameters %.4g MB, gradients %.4g MB, optimizer "
			"%.4g MB (its fsdp shares); working set: gathered units %.4g MB, gradient "
			"buffers %.4g MB",
			params / 1e6, grads / 1e6, optim / 1e6, (double)f.gathered / 1e6,
			(double)f.grad_buffers / 1e6);
	}
	log_info("activations on rank 0: %.4g MB held for the backward passes, %.4g MB of "
		 "working buffers and logits",
		 acts / 1e6, scratch / 1e6);
}

/* ---- checkpoints ------------------------------------------------------- */
