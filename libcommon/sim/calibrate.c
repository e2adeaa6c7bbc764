/* Calibration from pp's profiles (calibrate.h). */
#include "calibrate.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../profile/profile.h"
#include "../schedule/schedule.h"
#include "optable.h"
#include "simulate.h"

#define MAX_FILES 4096

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* the profile files at path: path itself, or its rank-*.h5 */
static int list_files(const char *path, char ***out, int *n, pp_err *e)
{
	struct stat st;
	*n = 0;
	*out = calloc(MAX_FILES, sizeof **out);
	if (!*out)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (stat(path, &st))
		return pp_errorf(e, PP_EUSAGE, "--calibrate %s: no such file or directory", path);
	if (!S_ISDIR(st.st_mode)) {
		(*out)[(*n)++] = strdup(path);
		return 0;
	}
	DIR *d = opendir(path);
	for (struct dirent *de; d && (de = readdir(d)) && *n < MAX_FILES;) {
		size_t len = strlen(de->d_name);
		if (!strncmp(de->d_name, "rank-", 5) && len > 3 &&
		    !strcmp(de->d_name + len - 3, ".h5")) {
			char *p = malloc(strlen(path) + len + 2);
			if (p)
				sprintf(p, "%s/%s", path, de->d_name);
			(*out)[(*n)++] = p;
		}
	}
	if (d)
		closedir(d);
	return *n ? 0
		  : pp_errorf(e, PP_EUSAGE, "--calibrate %s: no profile files (rank-*.h5) there",
			      path);
}

/* the profile is of c's model and layout */
static int same_run(const pp_config *c, const prof_rank *r, pp_err *e)
{
	const int data = pp_config_data_ranks(c);
	const char *preset = c->model.preset;
	if ((preset[0] && strcmp(preset, r->preset)) || r->pp != c->pp || r->tp != c->tp ||
	    r->dp != data || r->m != c->microbatches ||
	    strcmp(r->schedule, schedule_kind_name(c->schedule)))
		return pp_errorf(
			e, PP_EUSAGE,
			"profile %s is of model %s, pp %d x data %d x tp %d, %s, %d "
			"microbatches; the config is of model %s, pp %d x data %d x tp %d, "
			"%s, %d microbatches: calibrate with the config of the profiled run",
			r->path, r->preset[0] ? r->preset : "(none)", r->pp, r->dp, r->tp,
			r->schedule, r->m, preset[0] ? preset : "(custom)", c->pp, data, c->tp,
			schedule_kind_name(c->schedule), c->microbatches);
	return 0;
}

/* ---- from the per-op table ------------------------------------------------------------ */

/* a product's point: its FLOPs, the efficiency it ran at, its weight (its
 * time in the table) */
typedef struct {
	double flops, eff, w;
} point;

/* Fits 1/eff = a + b/f (eff = gemm_max f / (f + half): a = 1/gemm_max,
 * b = half/gemm_max) by least squares weighted by time. Returns false where
 * the products' sizes do not tell the curve's bend apart (one size, or a
 * fit that bends the wrong way); then gemm_max alone is fitted at the
 * given half. */
static bool fit_curve(const point *p, int n, double *gemm_max, double *half)
{
	double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
	for (int i = 0; i < n; i++) {
		const double x = 1 / p[i].flops, y = 1 / p[i].eff, w = p[i].w;
		sw += w;
		sx += w * x;
		sy += w * y;
		sxx += w * x * x;
		sxy += w * x * y;
	}
	const double var = sxx * sw - sx * sx;
	if (var > 1e-12 * sxx * sw) {
		const double b = (sxy * sw - sx * sy) / var, a = (sy - b * sx) / sw;
		if (a > 0 && b >= 0) {
			*gemm_max = 1 / a;
			*half = b / a;
			return true;
		}
	}
	double inv = 0; /* 1/gemm_max = (1/eff) f / (f + half), time-weighted */
	for (int i = 0; i < n; i++)
		inv += p[i].w / p[i].eff * p[i].flops / (p[i].flops + *half);
	*gemm_max = sw / inv;
	return false;
}

/* sim_calibrate from a per-op table (calibrate.h) */
static int calibrate_optable(const pp_config *c, sim_cluster *cl, const char *path, FILE *report,
			     pp_err *e)
{
	sim_optable t;
	int rc = sim_optable_read(path, &t, e);
	if (rc)
		return rc;
	sim_efficiency *x = &cl->eff;
	const double peak = 1e12 * (c->dtype == PP_TYPE_BF16 ? cl->bf16_tflops : cl->fp32_tflops),
		     fp8_peak = 1e12 * (cl->fp8_tflops > 0 ? cl->fp8_tflops : cl->bf16_tflops),
		     launch = 1e-6 * x->launch_us;
	point *pts = calloc((size_t)t.n + 1, sizeof *pts);
	int n = 0;
	double gemm_ms = 0, attn_ms = 0;
	long attn_calls = 0;
	for (int i = 0; pts && i < t.n; i++) {
		const sim_op *o = &t.ops[i];
		if (o->product) {
			const double fl = 2.0 * o->m * o->n * o->k,
				     s = 1e-6 * o->us_per_call - launch;
			gemm_ms += o->ms;
			if (s > 0 && o->calls > 0 && o->ms > 0)
				pts[n++] = (point){fl, fl / (s * (o->fp8 ? fp8_peak : peak)),
						   o->ms};
		} else if (o->attention_fwd) {
			attn_ms += o->ms;
			attn_calls += o->calls;
		}
	}
	if (!pts)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	else if (!n)
		rc = pp_errorf(e, PP_EUSAGE,
			       "--calibrate %s: no timed matrix product in its per-op table "
			       "(pp-train under PP_CUDA_PROFILE=1 writes one at exit)",
			       path);
	if (!rc) {
		const double old_max = x->gemm_max, old_half = x->gemm_half_flops;
		const bool bent = fit_curve(pts, n, &x->gemm_max, &x->gemm_half_flops);
		if (!(isfinite(x->gemm_max) && x->gemm_max > 0 && isfinite(x->gemm_half_flops)))
			rc = pp_errorf(e, PP_EUSAGE,
				       "--calibrate %s: its products' times give no efficiency "
				       "(fitted %g f / (f + %g))",
				       path, x->gemm_max, x->gemm_half_flops);
		else if (report)
			fprintf(report,
				"products: %d shapes, %.1f%% of the table's %.3f ms: efficiency %.3f "
				"f / (f + %.3g)%s (was %.3f f / (f + %.3g))\n",
				n, t.total_ms > 0 ? 100 * gemm_ms / t.total_ms : 0, t.total_ms,
				x->gemm_max, x->gemm_half_flops,
				bent ? "" : ", the bend kept: one size of product", old_max,
				old_half);
	}
	layout_tp tp;
	if (!rc && attn_calls > 0 && !(rc = layout_tp_share(&c->model, c->tp, 0, &tp, e))) {
		const double per_call = 1e-3 * attn_ms / (double)attn_calls - launch;
		const double T = c->seq_len, fl = sim_attention_flops(c, &tp), old = x->attn_max;
		const double fitted = fl / (per_call * peak) * (T + x->attn_half_seq) / T;
		if (per_call > 0 && isfinite(fitted) && fitted > 0) {
			x->attn_max = fitted;
			if (report)
				fprintf(report,
					"attention forward: %ld calls, %.3f ms each at seq %d: attn_max "
					"%.3f (was %.3f)\n",
					attn_calls, 1e3 * (per_call + launch), c->seq_len,
					x->attn_max, old);
		}
	}
	if (!rc)
		snprintf(x->source, sizeof x->source,
			 "pp-init --calibrate of %.200s (per-op table)", path);
	free(pts);
	sim_optable_free(&t);
	return rc;
}

/* ---- from the profile files ----------------------------------------------------------- */

int sim_calibrate(const pp_config *c, sim_cluster *cl, const char *path, FILE *report, pp_err *e)
{
	struct stat st;
	if (!stat(path, &st) && S_ISREG(st.st_mode) && sim_is_optable(path))
		return calibrate_optable(c, cl, path, report, e);
	char **files = NULL;
	int nf = 0, rc = list_files(path, &files, &nf, e);
	const int S = c->pp * (c->virtual_stages > 0 ? c->virtual_stages : 1);
	double *pf = calloc((size_t)S, sizeof *pf), *pb = calloc((size_t)S, sizeof *pb);
	/* per stage: its forwards' and backwards' durations (s) */
	double **mf = calloc((size_t)S, sizeof *mf), **mb = calloc((size_t)S, sizeof *mb);
	int *nmf = calloc((size_t)S, sizeof *nmf), *nmb = calloc((size_t)S, sizeof *nmb);
	double p2p_rate = 0, p2p_lat = 1e9, dp_rate = 0;
	if (!rc && (!pf || !pb || !mf || !mb || !nmf || !nmb))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; !rc && i < nf; i++) {
		prof_rank r = {0};
		if (!(rc = prof_read(files[i], &r, e)) && !(rc = same_run(c, &r, e))) {
			/* a split backward's two parts, added per (microbatch, stage) */
			for (size_t k = 0; k < r.n_ev && !rc; k++) {
				const prof_event *ev = &r.ev[k];
				const double d = 1e-9 * (double)ev->dur;
				if (prof_is_compute((prof_op)ev->op) && ev->vstage >= 0 &&
				    ev->vstage < S) {
					const bool fwd = ev->op == PROF_FWD;
					double ***arr = fwd ? &mf : &mb;
					int *cnt = fwd ? &nmf[ev->vstage] : &nmb[ev->vstage];
					double *grown = realloc((*arr)[ev->vstage],
								(size_t)(*cnt + 1) * sizeof *grown);
					if (!grown) {
						rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
						break;
					}
					(*arr)[ev->vstage] = grown;
					grown[(*cnt)++] = d;
				} else if (prof_is_send((prof_op)ev->op) && ev->bytes > 0 &&
					   d > 0) {
					/* the fastest send is the transfer alone (the others
					 * wait for their receiver) */
					p2p_rate = fmax(p2p_rate, (double)ev->bytes / d);
					p2p_lat = fmin(p2p_lat, d);
				} else if (ev->op == PROF_GRAD_REDUCE && ev->bytes > 0 && d > 0 &&
					   r.dp > 1) {
					const double share = 2.0 * (r.dp - 1) / r.dp;
					dp_rate = fmax(dp_rate, share * (double)ev->bytes / d);
				}
			}
		}
		prof_rank_free(&r);
	}
	if (!rc)
		rc = sim_pass_compute(c, cl, pf, pb, e);
	double meas = 0, pred = 0, meas_f = 0, pred_f = 0;
	for (int s = 0; !rc && s < S; s++) {
		/* a split backward's two parts: their sum per microbatch */
		const double f = median(mf[s], nmf[s]), b = median(mb[s], nmb[s]);
		const double parts = nmb[s] > nmf[s] && nmf[s] > 0 ? (double)nmb[s] / nmf[s] : 1;
		meas += f + b * parts;
		meas_f += f;
		pred += pf[s] + pb[s];
		pred_f += pf[s];
		if (report)
			fprintf(report,
				"stage %d: forward %.3f ms measured, %.3f ms modelled; backward %.3f ms "
				"measured, %.3f ms modelled\n",
				s, 1e3 * f, 1e3 * pf[s], 1e3 * b * parts, 1e3 * pb[s]);
	}
	if (!rc && !(meas > 0 && pred > 0))
		rc = pp_errorf(e, PP_EUSAGE,
			       "--calibrate %s: the profiles hold no forward or "
			       "backward passes",
			       path);
	if (!rc) {
		/* everything the model computes runs meas / pred times as long */
		const double scale = meas / pred;
		sim_efficiency *f = &cl->eff;
		f->gemm_max /= scale;
		f->attn_max /= scale;
		f->mem_eff /= scale;
		f->launch_us *= scale;
		snprintf(f->source, sizeof f->source, "pp-init --calibrate of %.200s", path);
		if (report)
			fprintf(report,
				"passes: %.3f ms measured, %.3f ms modelled per microbatch and stage "
				"(forward alone: %.3f against %.3f): efficiencies scaled by %.4f\n",
				1e3 * meas / S, 1e3 * pred / S, 1e3 * meas_f / S, 1e3 * pred_f / S,
				1 / scale);
		if (p2p_rate > 0) {
			cl->intra.bus_gbps = p2p_rate / 1e9;
			cl->intra.latency_us = fmin(1e6 * p2p_lat, cl->intra.latency_us);
			if (report)
				fprintf(report, "sends between stages: up to %.3f GB/s\n",
					p2p_rate / 1e9);
		}
		if (dp_rate > 0) {
			cl->intra.bus_gbps = fmax(cl->intra.bus_gbps, dp_rate / 1e9);
			if (report)
				fprintf(report, "dp gradient sums: up to %.3f GB/s bus bandwidth\n",
					dp_rate / 1e9);
		}
	}
	for (int s = 0; mf && mb && s < S; s++) {
		free(mf[s]);
		free(mb[s]);
	}
	for (int i = 0; i < nf; i++)
		free(files[i]);
	free(files);
	free(mf);
	free(mb);
	free(nmf);
	free(nmb);
	free(pf);
	free(pb);
	return rc;
}

int sim_cluster_write(FILE *f, const sim_cluster *cl, pp_err *e)
{
	const sim_efficiency *x = &cl->eff;
	json_t *o = json_pack(
		"{s:s, s:s, s:{s:s, s:f, s:f, s:f, s:f, s:f}, s:i, s:{s:s, s:f, s:f}, "
		"s:{s:s, s:f, s:f}, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:s}}",
		"name", cl->name, "description", cl->description, "gpu", "name", cl->gpu,
		"bf16_tflops", cl->bf16_tflops, "fp8_tflops", cl->fp8_tflops, "fp32_tflops",
		cl->fp32_tflops, "hbm_gib", cl->hbm_gib, "hbm_gbps", cl->hbm_gbps, "gpus_per_node",
		cl->gpus_per_node, "intra_node", "name", cl->intra.name, "bus_gbps",
		cl->intra.bus_gbps, "latency_us", cl->intra.latency_us, "inter_node", "name",
		cl->inter.name, "bus_gbps", cl->inter.bus_gbps, "latency_us", cl->inter.latency_us,
		"efficiency", "gemm_max", x->gemm_max, "gemm_half_flops", x->gemm_half_flops,
		"attn_max", x->attn_max, "attn_half_seq", x->attn_half_seq, "mem_eff", x->mem_eff,
		"launch_us", x->launch_us, "source", x->source);
	int rc = o ? json_dumpf(o, f, JSON_INDENT(2) | JSON_REAL_PRECISION(8)) : -1;
	json_decref(o);
	fputc('\n', f);
	return rc ? pp_errorf(e, PP_ERUNTIME, "cannot write the cluster description") : 0;
}
