/* Whole-model gradient checks in double precision (built with -DPP_F64):
 * for a tiny model of each dense family, the analytic gradient of the mean
 * loss w.r.t. every parameter tensor is compared with central finite
 * differences; recompute and a two-stage split must give the same loss and
 * gradients as one stage. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/model.h"
#include "../libcommon/rng.h"
#include "harness.h"

#define B 2
#define T 8
#define N (B * T)
/* finite differences: step h, tolerance on |fd - analytic| / max(|fd|, |analytic|, floor).
 * Measured worst case 8.7e-7 (a small Mistral embedding gradient); a wrong
 * backward gives errors of order 1. */
#define FD_H 1e-4
#define FD_TOL 1e-5
#define FD_FLOOR 1e-4
#define FD_PER_TENSOR 6

static int tokens[N], targets[N];

static void make_batch(int V)
{
	for (int i = 0; i < N; i++) {
		tokens[i] = (int)rng_below(7, (uint64_t)i, (uint64_t)V);
		targets[i] = (int)rng_below(8, (uint64_t)i, (uint64_t)V);
	}
	targets[3] = PP_IGNORE_INDEX;
}

/* Random values everywhere, norm weights and biases too, so that no
 * gradient is trivially zero. */
static void randomize(pp_stage *s, uint64_t seed)
{
	stage_init_params(s, seed);
	for (size_t j = 0; j < s->n_elems; j++)
		s->w[j] += 0.1 * rng_normal(seed + 99, j);
}

/* loss = mean over valid targets; with grad, fills s->g */
static double loss_of(pp_stage *s, bool grad, pp_err *e)
{
	double sum = 0;
	long valid = 0;
	for (int i = 0; i < N; i++)
		valid += targets[i] >= 0;
	if (grad)
		stage_zero_grad(s);
	if (stage_forward(s, 0, tokens, NULL, targets, grad ? 1.0 / (double)valid : 0, &sum, NULL,
			  NULL, e))
		return NAN;
	if (grad && stage_backward(s, 0, NULL, NULL, e))
		return NAN;
	return sum / (double)valid;
}

static void check_family(const char *preset)
{
	char name[128];
	pp_config c;
	pp_err e = {0};
	char ov[64];
	snprintf(ov, sizeof ov, "model=%s", preset);
	char *ovs[] = {ov};
	if (pp_config_load(&c, NULL, 1, ovs, &e)) {
		snprintf(name, sizeof name, "gradcheck/%s/config", preset);
		CHECK(0, name, "%s", e.msg);
		return;
	}
	pp_stage s;
	if (stage_create(&s, &c.model, &pp_ops_cpu, 0, c.model.n_layers, B, T, 1, false, &e)) {
		snprintf(name, sizeof name, "gradcheck/%s/create", preset);
		CHECK(0, name, "%s", e.msg);
		pp_config_free(&c);
		return;
	}
	make_batch(c.model.vocab_size);
	randomize(&s, 1234);
	double L0 = loss_of(&s, true, &e);
	pp_real *g = malloc(s.n_elems * sizeof(pp_real));
	memcpy(g, s.g, s.n_elems * sizeof(pp_real));

	double worst = 0;
	const char *worst_name = "";
	int bad = 0;
	for (int i = 0; i < s.n_params; i++) {
		const pp_param *p = &s.params[i];
		for (int k = 0; k < FD_PER_TENSOR; k++) {
			size_t j = p->off + rng_below(42 + (uint64_t)i, (uint64_t)k, p->n);
			double w0 = s.w[j];
			s.w[j] = w0 + FD_H;
			double lp = loss_of(&s, false, &e);
			s.w[j] = w0 - FD_H;
			double lm = loss_of(&s, false, &e);
			s.w[j] = w0;
			double fd = (lp - lm) / (2 * FD_H), an = g[j];
			double err = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), FD_FLOOR);
			if (err > worst) {
				worst = err;
				worst_name = p->name;
			}
			if (err > FD_TOL && bad++ < 5)
				printf("  %s[%zu]: analytic %.10g finite-difference %.10g\n", p->name,
				       j - p->off, an, fd);
		}
	}
	snprintf(name, sizeof name, "gradcheck/%s/finite_differences", preset);
	CHECK(bad == 0 && isfinite(L0), name, "%d of %d sampled gradients off by more than %g; worst %s %.3g",
	      bad, s.n_params * FD_PER_TENSOR, FD_TOL, worst_name, worst);
	printf("  %s: %d tensors, loss %.6f, worst relative error %.2e (%s)\n", preset, s.n_params,
	       L0, worst, worst_name);

	/* recompute: identical loss and gradients */
	pp_stage r;
	stage_create(&r, &c.model, &pp_ops_cpu, 0, c.model.n_layers, B, T, 1, true, &e);
	memcpy(r.w, s.w, s.n_elems * sizeof(pp_real));
	double Lr = loss_of(&r, true, &e);
	snprintf(name, sizeof name, "gradcheck/%s/recompute", preset);
	CHECK(Lr == L0 && !memcmp(r.g, g, s.n_elems * sizeof(pp_real)), name,
	      "loss %.17g vs %.17g or gradients differ", Lr, L0);
	stage_free(&r);

	/* two stages passing activations: the same loss and gradients */
	int cut = c.model.n_layers / 2;
	pp_stage s0, s1;
	stage_create(&s0, &c.model, &pp_ops_cpu, 0, cut, B, T, 1, false, &e);
	stage_create(&s1, &c.model, &pp_ops_cpu, cut, c.model.n_layers, B, T, 1, false, &e);
	pp_stage *parts[2] = {&s0, &s1};
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < parts[k]->n_params; i++) {
			const pp_param *p = &parts[k]->params[i];
			const pp_param *q = stage_find_param(&s, p->name);
			memcpy(parts[k]->w + p->off, s.w + q->off, p->n * sizeof(pp_real));
		}
	long valid = 0;
	for (int i = 0; i < N; i++)
		valid += targets[i] >= 0;
	pp_real *act = NULL, *dact = NULL;
	double sum = 0;
	stage_zero_grad(&s0);
	stage_zero_grad(&s1);
	stage_forward(&s0, 0, tokens, NULL, NULL, 0, NULL, NULL, &act, &e);
	stage_forward(&s1, 0, NULL, act, targets, 1.0 / (double)valid, &sum, NULL, NULL, &e);
	stage_backward(&s1, 0, NULL, &dact, &e);
	stage_backward(&s0, 0, dact, NULL, &e);
	double Ls = sum / (double)valid, gerr = 0;
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < parts[k]->n_params; i++) {
			const pp_param *p = &parts[k]->params[i];
			const pp_param *q = stage_find_param(&s, p->name);
			for (size_t j = 0; j < p->n; j++) {
				/* a tied embedding appears on both stages: their sum is the gradient */
				double full = g[q->off + j], part = parts[k]->g[p->off + j];
				if (s0.n_params && stage_find_param(&s0, p->name) &&
				    stage_find_param(&s1, p->name))
					part = s0.g[stage_find_param(&s0, p->name)->off + j] +
					       s1.g[stage_find_param(&s1, p->name)->off + j];
				gerr = fmax(gerr, fabs(full - part) / fmax(fabs(full), 1e-12));
			}
		}
	snprintf(name, sizeof name, "gradcheck/%s/two_stages", preset);
	CHECK(fabs(Ls - L0) <= 1e-12 * fabs(L0) && gerr < 1e-10, name,
	      "loss %.17g vs %.17g, worst gradient relative difference %.3g", Ls, L0, gerr);
	stage_free(&s0);
	stage_free(&s1);

	free(g);
	stage_free(&s);
	pp_config_free(&c);
}

int main(void)
{
	const char *root = getenv("PP_ROOT");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/configs", root ? root : ".");
	setenv("PP_CONFIG_DIR", dir, 0);
	const char *families[] = {"llama-tiny", "mistral-tiny", "gemma-tiny", "gpt-tiny"};
	for (size_t i = 0; i < sizeof families / sizeof *families; i++)
		check_family(families[i]);
	TH_EXIT();
}
