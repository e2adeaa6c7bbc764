/* The learning-rate schedules (MaxText semantics), clipping, the
 * weight-decay mask of AdamW, the gradient norm's sum of squares, and the
 * ranges a rank updates: the experts at the buffer's end, each region
 * shared out over its group under ZeRO-1, AdamW over two ranges. */
#include <math.h>
#include <string.h>

#include "../../libcommon/model/optim.h"
#include "../../libcommon/parallel/gradsync.h"
#include "../tools/harness.h"

static pp_config cfg(int type, long steps, long warmup, double final)
{
	pp_config c;
	memset(&c, 0, sizeof c);
	c.lr_schedule.type = type;
	c.steps = steps;
	c.lr = 1e-3;
	c.lr_schedule.warmup_steps = warmup;
	c.lr_schedule.warmup_fraction = 0.1;
	c.lr_schedule.final_fraction = final;
	c.lr_schedule.decay_fraction = 0.2;
	c.adamw.b1 = 0.9;
	c.adamw.b2 = 0.95;
	c.adamw.eps = 1e-8;
	c.adamw.weight_decay = 0.1;
	c.clip_norm = 1.0;
	return c;
}

#define NEAR(a, b) (fabs((a) - (double)(b)) <= 1e-12 * fmax(1.0, fabs((double)(b))))

/* the gradient's sum of squares: CPU sumsq calls counted */
static int sumsq_calls;
static double counted_sumsq(const pp_real *x, size_t n)
{
	sumsq_calls++;
	return pp_ops_cpu.sumsq(x, n);
}
static bool every_tensor(const pp_stage *st, const pp_param *p)
{
	(void)st;
	(void)p;
	return true;
}
/* two of every three tensors: runs broken by a tensor left out */
static bool not_third(const pp_stage *st, const pp_param *p) { return (p - st->params) % 3 != 2; }

/* optim_grad_sumsq over [lo, hi) against the sum of each counted tensor's
 * part, element by element; calls: the sumsq calls it makes */
static void check_grad_sumsq(pp_stage *s, size_t lo, size_t hi,
			     bool (*counts)(const pp_stage *, const pp_param *), int calls,
			     const char *name)
{
	double want = 0;
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		if (!counts(s, p))
			continue;
		for (size_t j = p->off; j < p->off + p->n; j++)
			if (j >= lo && j < hi)
				want += (double)s->g[j] * s->g[j];
	}
	sumsq_calls = 0;
	double got = optim_grad_sumsq(s, lo, hi, counts);
	CHECK(fabs(got - want) <= 1e-12 * want && want > 0 && (calls < 0 || sumsq_calls == calls),
	      name, "%.17g, element by element %.17g; %d sumsq calls, expected %d", got, want,
	      sumsq_calls, calls);
}

/* A MoE stage's regions and the ranges of each rank of dp = 4, ep = 2 under
 * ZeRO-1; then AdamW over a rank's two ranges against AdamW over the whole
 * buffer, element by element. */
static void check_moe_ranges(void)
{
	pp_config c;
	pp_err e = {0};
	char *ov[] = {"model=mixtral-tiny"};
	if (pp_config_load(&c, NULL, 1, ov, &e)) {
		CHECK(0, "optim/moe_config", "%s", e.msg);
		return;
	}
	stage_spec sp = stage_spec_whole(&c.model, 1, 4, PP_RECOMPUTE_NONE);
	sp.ep.rank = 1;
	sp.ep.size = 2;
	pp_stage s;
	if (stage_create(&s, &c.model, &pp_ops_cpu, &sp, &e)) {
		CHECK(0, "optim/moe_stage", "%s", e.msg);
		pp_config_free(&c);
		return;
	}
	/* every expert (and only experts) after n_shared; this rank's half */
	int experts = 0, misplaced = 0;
	for (int i = 0; i < s.n_params; i++) {
		const pp_param *p = &s.params[i];
		bool expert = strstr(p->name, ".experts.") != NULL;
		experts += expert;
		misplaced += expert != (p->off >= s.n_shared);
	}
	CHECK(misplaced == 0 && s.n_shared < s.n_elems &&
		      experts == 3 * c.model.n_layers * c.model.n_experts / 2 &&
		      stage_find_param(&s, "model.layers.0.block_sparse_moe.experts.0.w1.weight") ==
			      NULL,
	      "optim/moe_experts_at_end", "%d misplaced of %d experts; shared %zu of %zu",
	      misplaced, experts, s.n_shared, s.n_elems);

	/* the shared region tiled by all four dp ranks, the experts by the
	 * two of each ep rank (this stage is ep rank 1: dp ranks 1 and 3) */
	size_t covered[2] = {0, 0};
	bool ordered = true;
	optim_ranges r[4];
	for (int d = 0; d < 4; d++) {
		gradsync_ranges(&s, true, 4, d, 2, &r[d]);
		covered[0] += r[d].hi[OPTIM_SHARED] - r[d].lo[OPTIM_SHARED];
		if (d % 2 == 1)
			covered[1] += r[d].hi[OPTIM_EXPERTS] - r[d].lo[OPTIM_EXPERTS];
		ordered &= r[d].hi[OPTIM_SHARED] <= s.n_shared &&
			   r[d].lo[OPTIM_EXPERTS] >= s.n_shared &&
			   (d == 0 || r[d].lo[OPTIM_SHARED] == r[d - 1].hi[OPTIM_SHARED]);
	}
	ordered &= r[1].hi[OPTIM_EXPERTS] == r[3].lo[OPTIM_EXPERTS] &&
		   r[1].lo[OPTIM_EXPERTS] == s.n_shared && r[3].hi[OPTIM_EXPERTS] == s.n_elems;
	CHECK(ordered && covered[0] == s.n_shared && covered[1] == s.n_elems - s.n_shared,
	      "optim/moe_zero1_ranges", "shared covered %zu of %zu, experts %zu of %zu", covered[0],
	      s.n_shared, covered[1], s.n_elems - s.n_shared);
	const optim_ranges *q = &r[3];
	CHECK(optim_ranges_count(q) == q->hi[0] - q->lo[0] + q->hi[1] - q->lo[1] &&
		      optim_ranges_pos(q, q->lo[1]) == q->hi[0] - q->lo[0] &&
		      optim_ranges_pos(q, q->lo[0] + 2) == 2 &&
		      optim_ranges_meet(q, q->lo[1], q->lo[1] + 1) &&
		      !optim_ranges_meet(q, q->hi[0], q->lo[1]) && !optim_ranges_whole(q, &s),
	      "optim/ranges_layout", "count %zu pos %zu", optim_ranges_count(q),
	      optim_ranges_pos(q, q->lo[1]));

	/* AdamW over dp rank 3's two ranges against the whole buffer's */
	pp_real *w0 = malloc(s.n_elems * sizeof *w0), *whole = malloc(s.n_elems * sizeof *whole);
	for (size_t j = 0; j < s.n_elems; j++) {
		w0[j] = (pp_real)(((j * 131) % 97) * 1e-2);
		s.g[j] = (pp_real)(((j * 7919) % 1000) * 1e-3 - 0.5);
	}
	optim_ranges all;
	gradsync_ranges(&s, false, 4, 3, 2, &all);
	optim_state o_all, o_part;
	optim_create(&o_all, &pp_ops_cpu, &all, &e);
	optim_create(&o_part, &pp_ops_cpu, q, &e);
	for (int step = 1; step <= 2; step++) {
		memcpy(s.w, w0, s.n_elems * sizeof *w0);
		optim_step(step == 1 ? &o_all : &o_part, &s, &c, 1, 1e-2, 1.0);
		if (step == 1)
			memcpy(whole, s.w, s.n_elems * sizeof *whole);
	}
	size_t bad = 0;
	for (size_t j = 0; j < s.n_elems; j++) {
		bool in = optim_ranges_meet(q, j, j + 1);
		bad += in ? s.w[j] != whole[j] : s.w[j] != w0[j];
	}
	size_t at = optim_ranges_pos(q, q->lo[1]);
	bad += o_part.m[at] != o_all.m[q->lo[1]];
	CHECK(bad == 0, "optim/adamw_two_ranges",
	      "%zu elements differ from AdamW over the whole buffer", bad);
	optim_free(&o_all);
	optim_free(&o_part);
	free(w0);
	free(whole);
	stage_free(&s);
	pp_config_free(&c);
}

int main(void)
{
	/* cosine: linear warmup from 0 over 10 steps, then cosine to 0.1 * lr at the last step */
	pp_config c = cfg(PP_LR_COSINE, 110, 10, 0.1);
	CHECK(optim_lr(&c, 0) == 0 && NEAR(optim_lr(&c, 5), 0.5e-3) && NEAR(optim_lr(&c, 10), 1e-3),
	      "optim/cosine_warmup", "lr(0) %g lr(5) %g lr(10) %g", optim_lr(&c, 0),
	      optim_lr(&c, 5), optim_lr(&c, 10));
	CHECK(NEAR(optim_lr(&c, 60), 1e-4 + 0.5 * 0.9e-3) && NEAR(optim_lr(&c, 110), 1e-4),
	      "optim/cosine_decay", "lr(60) %g lr(110) %g", optim_lr(&c, 60), optim_lr(&c, 110));
	/* warmup_steps -1: warmup_fraction of steps */
	c = cfg(PP_LR_COSINE, 200, -1, 0.1);
	CHECK(optim_warmup_steps(&c) == 20, "optim/warmup_fraction", "%ld", optim_warmup_steps(&c));
	c = cfg(PP_LR_LINEAR, 110, 10, 0.0);
	CHECK(NEAR(optim_lr(&c, 60), 0.5e-3) && NEAR(optim_lr(&c, 110), 0), "optim/linear",
	      "lr(60) %g", optim_lr(&c, 60));
	c = cfg(PP_LR_CONSTANT, 110, 10, 0.1);
	CHECK(NEAR(optim_lr(&c, 100), 1e-3) && NEAR(optim_lr(&c, 3), 0.3e-3), "optim/constant",
	      "lr(100) %g", optim_lr(&c, 100));
	/* wsd: stable until the last 20% of steps, then linear to final */
	c = cfg(PP_LR_WSD, 100, 10, 0.1);
	CHECK(NEAR(optim_lr(&c, 79), 1e-3) && NEAR(optim_lr(&c, 90), 1e-3 + (1e-4 - 1e-3) * 0.5) &&
		      NEAR(optim_lr(&c, 100), 1e-4),
	      "optim/wsd", "lr(79) %g lr(90) %g lr(100) %g", optim_lr(&c, 79), optim_lr(&c, 90),
	      optim_lr(&c, 100));

	CHECK(optim_clip_scale(&c, 4.0) == 0.25 && optim_clip_scale(&c, 0.5) == 1.0, "optim/clip",
	      "%g %g", optim_clip_scale(&c, 4.0), optim_clip_scale(&c, 0.5));
	c.clip_norm = 0;
	CHECK(optim_clip_scale(&c, 1e9) == 1.0, "optim/clip_off", "%g", optim_clip_scale(&c, 1e9));

	/* weight decay: matrices decay, norms do not (unless decay_norms_and_biases) */
	pp_config full;
	pp_err e = {0};
	char *ov[] = {"model=llama-tiny"};
	const char *root = getenv("PP_ROOT");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/configs", root ? root : ".");
	setenv("PP_CONFIG_DIR", dir, 0);
	if (pp_config_load(&full, NULL, 1, ov, &e)) {
		CHECK(0, "optim/config", "%s", e.msg);
		TH_EXIT();
	}
	for (int with_norms = 0; with_norms < 2; with_norms++) {
		full.adamw.decay_norms_and_biases = with_norms;
		stage_spec sp = stage_spec_whole(&full.model, 1, 4, PP_RECOMPUTE_NONE);
		pp_stage s;
		optim_state o;
		stage_create(&s, &full.model, &pp_ops_cpu, &sp, &e);
		optim_ranges all;
		gradsync_ranges(&s, false, 1, 0, 1, &all);
		optim_create(&o, &pp_ops_cpu, &all, &e);
		for (size_t j = 0; j < s.n_elems; j++)
			s.w[j] = 1; /* zero gradients: only decay moves a parameter */
		optim_step(&o, &s, &full, 1, 0.5, 1.0);
		const pp_param *norm = stage_find_param(&s, "model.norm.weight");
		const pp_param *mat = stage_find_param(&s, "model.layers.0.mlp.up_proj.weight");
		double decayed = 1 - 0.5 * 0.1;
		/* parameters are float: compare to float precision */
		bool ok = fabs(s.w[mat->off] - decayed) < 1e-6 &&
			  fabs(s.w[norm->off] - (with_norms ? decayed : 1.0)) < 1e-6;
		CHECK(ok, with_norms ? "optim/decay_norms_too" : "optim/decay_skips_norms",
		      "matrix %g norm %g", s.w[mat->off], s.w[norm->off]);
		optim_free(&o);
		stage_free(&s);
	}

	/* the gradient norm's sum of squares: adjacent counted tensors as one
	 * run, over a ZeRO-1 shard that cuts tensors, with tensors left out */
	{
		pp_ops ops = pp_ops_cpu;
		ops.sumsq = counted_sumsq;
		stage_spec sp = stage_spec_whole(&full.model, 1, 4, PP_RECOMPUTE_NONE);
		pp_stage s;
		if (stage_create(&s, &full.model, &ops, &sp, &e)) {
			CHECK(0, "optim/grad_sumsq_setup", "%s", e.msg);
		} else {
			for (size_t j = 0; j < s.n_elems; j++)
				s.g[j] = (pp_real)(((j * 7919) % 1000) * 1e-3 - 0.5);
			const size_t n = s.n_elems, third = n / 3;
			const pp_param *mid = &s.params[s.n_params / 2];
			check_grad_sumsq(&s, 0, n, every_tensor, 1, "optim/grad_sumsq_one_run");
			check_grad_sumsq(&s, third, 2 * third, every_tensor, 1,
					 "optim/grad_sumsq_shard");
			/* a shard boundary inside a tensor */
			check_grad_sumsq(&s, mid->off + 1, n, every_tensor, 1,
					 "optim/grad_sumsq_shard_cuts_tensor");
			check_grad_sumsq(&s, 0, n, not_third, (s.n_params + 2) / 3,
					 "optim/grad_sumsq_tensors_left_out");
			check_grad_sumsq(&s, third + 3, 2 * third - 5, not_third, -1,
					 "optim/grad_sumsq_shard_tensors_left_out");
			stage_free(&s);
		}
	}
	pp_config_free(&full);
	check_moe_ranges();
	TH_EXIT();
}
