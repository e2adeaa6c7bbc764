/* Whole-model gradient checks in double precision (built with -DPP_F64).
 * For a tiny model of each family (the dense ones; mixtral-tiny, MoE in
 * every layer with Mixtral's routing; glam-tiny, MoE in every other layer
 * with GLaM's routing and a capacity, and relative position biases), the
 * objective being the mean loss
 * plus the MoE layers' load-balancing and z losses at their weights:
 *   - the analytic gradient of the mean loss w.r.t. every parameter tensor
 *     agrees with central finite differences;
 *   - each recompute policy (full, minimal, minimal_flash), a split into two
 *     pipeline stages, and the split backward pass (input part, then weight
 *     part) give the same loss and gradients; the policies to the bit, with
 *     one microbatch in flight and with two whose backward passes rebuild
 *     into the same buffers;
 *   - tensor parallelism over tp = 2 and 4 (threads standing in for ranks,
 *     kv heads replicated when tp > kv heads) gives the same loss, and each
 *     rank's gradient slice equals the matching slice of the full gradient;
 *   - the head and loss over several uneven chunks of rows (a tiny
 *     loss_chunk_mb) give the same loss, gradients and kept logits as one
 *     chunk, alone, with the split backward and with tp = 2;
 *   - the last backward pass (STAGE_BWD_LAST) reports final gradients to the
 *     stage's grad_ready hook: a shrinking suffix g[from, n_shared), each
 *     already equal to its value at the end, the last report from 0 with the
 *     experts g[n_shared, n) final too; other passes
 *     report nothing, and an error from the hook stops the pass. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/base/rng.h"
#include "../../libcommon/model/model.h"
#include "../tools/harness.h"

#define B 2
#define T 8
#define N (B * T)
/* finite differences: step h, tolerance on |fd - analytic| / max(|fd|, |analytic|, floor).
 * Measured worst case 8.7e-7 (a small Mistral embedding gradient); a wrong
 * backward gives errors of order 1. */
#define FD_H          1e-4
#define FD_TOL        1e-5
#define FD_FLOOR      1e-4
#define FD_PER_TENSOR 6
/* layouts that reorder sums in double: relative agreement */
#define SAME_TOL 1e-10

static int tokens[N], targets[N];

static void make_batch(int V)
{
	for (int i = 0; i < N; i++) {
		tokens[i] = (int)rng_below(7, (uint64_t)i, (uint64_t)V);
		targets[i] = (int)rng_below(8, (uint64_t)i, (uint64_t)V);
	}
	targets[3] = PP_IGNORE_INDEX;
}

static long n_valid(void)
{
	long v = 0;
	for (int i = 0; i < N; i++)
		v += targets[i] >= 0;
	return v;
}

/* the config of the family under test: its adapters (lora.*) go into every spec */
static const pp_config *cur;

static stage_spec spec_of(const pp_model_cfg *m, int begin, int end)
{
	stage_spec sp = stage_spec_whole(m, B, T, PP_RECOMPUTE_NONE);
	if (cur) {
		stage_spec_set_lora(&sp, cur);
		stage_spec_set_fp8(&sp, cur);
	}
	sp.layer_begin = begin;
	sp.layer_end = end;
	return sp;
}

/* A stage of the family under test; with lora.dropout, every slot draws
 * from one fixed key, so that its forwards and backwards are functions of
 * the weights that finite differences can check, and its tp slices and
 * stage splits draw what the whole does. */
static int make_stage(pp_stage *s, const pp_model_cfg *m, const stage_spec *sp, pp_err *e)
{
	int rc = stage_create(s, m, &pp_ops_cpu, sp, e);
	for (int k = 0; !rc && k < sp->n_slots; k++)
		stage_set_noise(s, k, (stage_noise){0x5eed, 3});
	return rc;
}

/* p's values: in the buffer, or a LoRA stage's frozen base (the CPU
 * backend's compute type is pp_real) */
static pp_real *pw(const pp_stage *s, const pp_param *p)
{
	return p->frozen ? (pp_real *)s->base + p->off : s->w + p->off;
}

/* Random values everywhere, norm weights and biases too, so that no
 * gradient is trivially zero. Keyed by global index: any slice agrees. */
static void randomize(pp_stage *s, uint64_t seed)
{
	stage_init_params(s, seed);
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		for (size_t j = 0; j < p->n; j++)
			pw(s, p)[j] += 0.1 * rng_normal(rng_key(seed + 99, p->name),
							param_global_index(p, j));
	}
}

/* The MoE layers' losses at their weights, from the forwards since s->moe
 * was zeroed */
static double moe_part(const pp_stage *s)
{
	return s->cfg->router_aux_loss_coef * s->moe.aux + s->cfg->router_z_loss_coef * s->moe.z;
}

/* loss = mean over valid targets, plus the MoE layers' losses at their
 * weights; with grad, fills s->g */
static double loss_of(pp_stage *s, bool grad, int part, pp_err *e)
{
	double sum = 0;
	if (grad)
		stage_zero_grad(s);
	memset(&s->moe, 0, sizeof s->moe);
	if (stage_forward(s, 0, tokens, NULL, targets, grad ? 1.0 / (double)n_valid() : 0, &sum,
			  NULL, NULL, e))
		return NAN;
	if (grad && part == STAGE_BWD_FULL && stage_backward(s, 0, STAGE_BWD_FULL, NULL, NULL, e))
		return NAN;
	if (grad && part != STAGE_BWD_FULL &&
	    (stage_backward(s, 0, STAGE_BWD_INPUT, NULL, NULL, e) ||
	     stage_backward(s, 0, STAGE_BWD_WEIGHT, NULL, NULL, e)))
		return NAN;
	return sum / (double)n_valid() + moe_part(s);
}

/* worst per-tensor ||part - full|| / ||full|| over part's gradients, matched
 * with full's by name and by global element index; names the worst tensor */
static double grad_diff_named(const pp_stage *part, const pp_stage *full, const pp_real *full_g,
			      const char **worst_name)
{
	double worst = 0;
	for (int i = 0; i < part->n_params; i++) {
		const pp_param *p = &part->params[i], *q = stage_find_param(full, p->name);
		if (!q)
			return INFINITY;
		if (p->frozen) /* no gradient at all */
			continue;
		double d2 = 0, b2 = 0;
		for (size_t j = 0; j < p->n; j++) {
			double a = part->g[p->off + j],
			       b = full_g[q->off + param_global_index(p, j)];
			d2 += (a - b) * (a - b);
			b2 += b * b;
		}
		double rel = b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
		if (rel > worst) {
			worst = rel;
			if (worst_name)
				*worst_name = p->name;
		}
	}
	return worst;
}

static double grad_diff(const pp_stage *part, const pp_stage *full, const pp_real *full_g)
{
	return grad_diff_named(part, full, full_g, NULL);
}

static void copy_weights(pp_stage *dst, const pp_stage *src)
{
	for (int i = 0; i < dst->n_params; i++) {
		const pp_param *p = &dst->params[i], *q = stage_find_param(src, p->name);
		for (size_t j = 0; j < p->n; j++)
			pw(dst, p)[j] = pw(src, q)[param_global_index(p, j)];
	}
}

static void finite_differences(const char *preset, pp_stage *s, const pp_real *g, double L0)
{
	char name[128];
	pp_err e = {0};
	double worst = 0;
	const char *worst_name = "";
	int bad = 0;
	/* a frozen base has no gradient: the buffer holds the adapters alone */
	int frozen_nonzero = 0;
	for (int i = 0; i < s->n_params; i++)
		frozen_nonzero += s->params[i].frozen &&
				  s->params[i].off + s->params[i].n > s->n_base;
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		for (int k = 0; k < FD_PER_TENSOR && !p->frozen; k++) {
			size_t j = p->off + rng_below(42 + (uint64_t)i, (uint64_t)k, p->n);
			double w0 = s->w[j];
			s->w[j] = w0 + FD_H;
			double lp = loss_of(s, false, 0, &e);
			s->w[j] = w0 - FD_H;
			double lm = loss_of(s, false, 0, &e);
			s->w[j] = w0;
			double fd = (lp - lm) / (2 * FD_H), an = g[j];
			double err = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), FD_FLOOR);
			if (err > worst) {
				worst = err;
				worst_name = p->name;
			}
			if (err > FD_TOL && bad++ < 5)
				printf("  %s[%zu]: analytic %.10g finite-difference %.10g\n",
				       p->name, j - p->off, an, fd);
		}
	}
	snprintf(name, sizeof name, "gradcheck/%s/finite_differences", preset);
	CHECK(bad == 0 && isfinite(L0) && !frozen_nonzero, name,
	      "%d of %d sampled gradients off by more than %g; worst %s %.3g; %d frozen", bad,
	      s->n_params * FD_PER_TENSOR, FD_TOL, worst_name, worst, frozen_nonzero);
	printf("  %s: %d tensors, loss %.6f, worst relative error %.2e (%s)\n", preset, s->n_params,
	       L0, worst, worst_name);
}

/* ---- tensor parallelism with threads as ranks --------------------------- */

typedef struct {
	pthread_barrier_t bar;
	pp_real *bufs[8];
} tp_group;

typedef struct {
	tp_group *g;
	int rank, size;
	const pp_model_cfg *m;
	const pp_stage *full;
	const pp_real *full_g;
	double chunk_mb; /* spec.loss_chunk_mb */
	double loss, gdiff;
	char worst[96]; /* the tensor of gdiff (the stage is gone by then) */
	int rc;
	pp_err e;
} tp_rank;

/* Sum or max in rank order, so every rank computes the same bits. */
/* The CPU backend's activations are pp_real too: every type is one here. */
static int thread_allreduce(void *ctx, void *buf, size_t n, int type, int op, pp_err *e)
{
	(void)e;
	(void)type;
	tp_rank *r = ctx;
	pp_real *tmp = malloc(n * sizeof(pp_real));
	r->g->bufs[r->rank] = buf;
	pthread_barrier_wait(&r->g->bar);
	for (size_t i = 0; i < n; i++) {
		pp_real acc = r->g->bufs[0][i];
		for (int k = 1; k < r->size; k++)
			acc = op == PP_REDUCE_SUM ? acc + r->g->bufs[k][i]
						  : fmax(acc, r->g->bufs[k][i]);
		tmp[i] = acc;
	}
	pthread_barrier_wait(&r->g->bar);
	memcpy(buf, tmp, n * sizeof(pp_real));
	free(tmp);
	return 0;
}

static void *tp_main(void *arg)
{
	tp_rank *r = arg;
	stage_spec sp = spec_of(r->m, 0, r->m->n_layers);
	sp.tp = (pp_tp){r->rank, r->size, thread_allreduce, r};
	sp.loss_chunk_mb = r->chunk_mb;
	pp_stage s;
	if ((r->rc = make_stage(&s, r->m, &sp, &r->e)))
		return NULL;
	copy_weights(&s, r->full);
	r->loss = loss_of(&s, true, STAGE_BWD_FULL, &r->e);
	r->rc = stage_reduce_replica_grads(&s, 0, s.n_elems, &r->e);
	const char *worst = "";
	r->gdiff = grad_diff_named(&s, r->full, r->full_g, &worst);
	snprintf(r->worst, sizeof r->worst, "%s", worst);
	stage_free(&s);
	return NULL;
}

static void check_tp(const char *preset, const pp_model_cfg *m, const pp_stage *full,
		     const pp_real *g, double L0, int size, double chunk_mb, const char *label)
{
	char name[128];
	tp_group grp;
	tp_rank ranks[8];
	pthread_t th[8];
	pthread_barrier_init(&grp.bar, NULL, (unsigned)size);
	for (int k = 0; k < size; k++) {
		ranks[k] = (tp_rank){.g = &grp,
				     .rank = k,
				     .size = size,
				     .m = m,
				     .full = full,
				     .full_g = g,
				     .chunk_mb = chunk_mb};
		pthread_create(&th[k], NULL, tp_main, &ranks[k]);
	}
	double worst_loss = 0, worst_g = 0;
	int rc = 0;
	const char *msg = "", *worst = "";
	for (int k = 0; k < size; k++) {
		pthread_join(th[k], NULL);
		if (ranks[k].rc) {
			rc = ranks[k].rc;
			msg = ranks[k].e.msg;
		}
		worst_loss = fmax(worst_loss, fabs(ranks[k].loss - L0) / fabs(L0));
		if (ranks[k].gdiff > worst_g) {
			worst_g = ranks[k].gdiff;
			worst = ranks[k].worst;
		}
	}
	pthread_barrier_destroy(&grp.bar);
	snprintf(name, sizeof name, "gradcheck/%s/tp%d%s", preset, size, label);
	CHECK(!rc && worst_loss < SAME_TOL && worst_g < SAME_TOL, name,
	      "%s loss relative difference %.3g, worst gradient %.3g (%s)", msg, worst_loss,
	      worst_g, worst);
}

/* ---- the head and loss in chunks of rows --------------------------------- */

/* loss_chunk_mb that gives chunks of CHUNK_ROWS rows of V logits: N = 16
 * rows run as 5, 5, 5, 1 */
#define CHUNK_ROWS 5
static double chunk_mb(int V) { return (CHUNK_ROWS + 0.5) * V * sizeof(pp_real) / 1048576.0; }

static void check_chunks(const char *preset, const pp_model_cfg *m, const pp_stage *full,
			 const pp_real *g, double L0)
{
	char name[128];
	pp_err e = {0};
	const int V = m->vocab_size;
	int64_t rows = stage_loss_rows(N, V, sizeof(pp_real), chunk_mb(V));
	snprintf(name, sizeof name, "gradcheck/%s/chunks/rows", preset);
	CHECK(rows == CHUNK_ROWS && stage_loss_rows(N, V, sizeof(pp_real), 0) == N &&
		      stage_loss_rows(N, V, sizeof(pp_real), 1e-9) == 1,
	      name, "%lld rows per chunk, want %d", (long long)rows, CHUNK_ROWS);

	/* alone and with the split backward: the same loss and gradients (the
	 * head's weight gradient sums its rows in another order) */
	for (int split = 0; split < 2; split++) {
		stage_spec sp = spec_of(m, 0, m->n_layers);
		sp.loss_chunk_mb = chunk_mb(V);
		sp.split_backward = split;
		pp_stage c;
		if (make_stage(&c, m, &sp, &e)) {
			CHECK(0, "gradcheck/chunks/create", "%s", e.msg);
			return;
		}
		copy_weights(&c, full);
		double Lc = loss_of(&c, true, split ? STAGE_BWD_INPUT : STAGE_BWD_FULL, &e);
		double gerr = grad_diff(&c, full, g);
		snprintf(name, sizeof name, "gradcheck/%s/chunks/%s", preset,
			 split ? "split_backward" : "whole");
		CHECK(fabs(Lc - L0) <= SAME_TOL * fabs(L0) && gerr < SAME_TOL &&
			      !stage_logits(&c, 0),
		      name, "loss %.17g vs %.17g, worst gradient relative difference %.3g", Lc, L0,
		      gerr);
		stage_free(&c);
	}

	/* the logits kept for tools: chunked the same as whole */
	stage_spec sp = spec_of(m, 0, m->n_layers);
	sp.keep_logits = true;
	pp_stage k1, kc;
	make_stage(&k1, m, &sp, &e);
	sp.loss_chunk_mb = chunk_mb(V);
	make_stage(&kc, m, &sp, &e);
	copy_weights(&k1, full);
	copy_weights(&kc, full);
	double l1 = 0, lc = 0;
	int rc = stage_forward(&k1, 0, tokens, NULL, targets, 0, &l1, NULL, NULL, &e) ||
		 stage_forward(&kc, 0, tokens, NULL, targets, 0, &lc, NULL, NULL, &e);
	/* the product of fewer rows may round differently in the BLAS */
	const pp_real *a = stage_logits(&k1, 0), *b = stage_logits(&kc, 0);
	double d = a && b ? 0 : INFINITY;
	for (size_t i = 0; a && b && i < (size_t)N * V; i++)
		d = fmax(d, fabs(a[i] - b[i]) / fmax(fabs(a[i]), 1));
	snprintf(name, sizeof name, "gradcheck/%s/chunks/keep_logits", preset);
	CHECK(!rc && d < SAME_TOL && fabs(lc - l1) <= SAME_TOL * fabs(l1) &&
		      fabs(l1 / (double)n_valid() + moe_part(&k1) - L0) <= SAME_TOL * fabs(L0),
	      name, "rc %d %s: logits differ by %.3g, loss %.17g vs %.17g", rc, e.msg, d, lc, l1);
	stage_free(&k1);
	stage_free(&kc);

	/* vocabulary-parallel: the three allreduces per chunk of each rank's V/2 */
	check_tp(preset, m, full, g, L0, 2, chunk_mb(V / 2), "/chunks");
}

/* ---- per family ---------------------------------------------------------- */

/* What a stage's grad_ready hook was told: each from, and g at the time. */
typedef struct {
	int n, fail_at; /* fail_at: the call that returns an error (-1: none) */
	size_t from[64];
	pp_real *snap[64];
} hook_log;

static int record(void *ctx, struct pp_stage *s, size_t from, pp_err *e)
{
	hook_log *h = ctx;
	if (h->n < 64) {
		h->from[h->n] = from;
		h->snap[h->n] = malloc(s->n_elems * sizeof(pp_real));
		memcpy(h->snap[h->n], s->g, s->n_elems * sizeof(pp_real));
	}
	if (h->n++ == h->fail_at)
		return pp_errorf(e, PP_ERUNTIME, "hook failure %d", h->n - 1);
	return 0;
}

static void hook_reset(hook_log *h)
{
	for (int i = 0; i < h->n && i < 64; i++)
		free(h->snap[i]);
	memset(h, 0, sizeof *h);
	h->fail_at = -1;
}

/* the reports came with from decreasing to 0, at least one per layer, and
 * g[from, n_shared) already had its final value at each (the experts',
 * g[n_shared, n), at the last) */
static int hook_ok(const hook_log *h, const pp_stage *s, char *why, size_t len)
{
	int L = s->layer_end - s->layer_begin;
	if (h->n < L + 1 || h->n > 64 || h->from[h->n - 1] != 0) {
		snprintf(why, len, "%d reports, the last from %zu", h->n,
			 h->n ? h->from[h->n - 1] : (size_t)0);
		return 0;
	}
	for (int i = 0; i < h->n; i++) {
		if (i && h->from[i] > h->from[i - 1]) {
			snprintf(why, len, "report %d: from %zu after %zu", i, h->from[i],
				 h->from[i - 1]);
			return 0;
		}
		/* the experts at the buffer's end are final with the last report */
		size_t end = i == h->n - 1 ? s->n_elems : s->n_shared;
		for (size_t j = h->from[i]; j < end; j++)
			if (h->snap[i][j] != s->g[j]) {
				snprintf(why, len, "report %d (from %zu): g[%zu] = %g, final %g", i,
					 h->from[i], j, (double)h->snap[i][j], (double)s->g[j]);
				return 0;
			}
	}
	return 1;
}

static void check_grad_hook(const char *preset, const pp_model_cfg *m, const pp_stage *ref,
			    const pp_real *g)
{
	char name[128], why[256] = "";
	pp_err e = {0};
	hook_log h = {.fail_at = -1};
	stage_spec sp = spec_of(m, 0, m->n_layers);
	sp.split_backward = true;
	sp.grad_ready = (stage_grad_hook){record, &h};
	pp_stage s;
	make_stage(&s, m, &sp, &e);
	copy_weights(&s, ref);
	pp_real dscale = 1.0 / (double)n_valid();

	/* the whole backward as the step's last */
	stage_zero_grad(&s);
	int rc = stage_forward(&s, 0, tokens, NULL, targets, dscale, NULL, NULL, NULL, &e) ||
		 stage_backward(&s, 0, STAGE_BWD_FULL | STAGE_BWD_LAST, NULL, NULL, &e);
	int ok = !rc && hook_ok(&h, &s, why, sizeof why) && !memcmp(s.g, g, s.n_elems * sizeof *g);
	snprintf(name, sizeof name, "gradcheck/%s/grad_hook/full_pass", preset);
	CHECK(ok, name, "%s", rc ? e.msg : why[0] ? why : "gradients differ");

	/* not the last: no reports */
	hook_reset(&h);
	stage_zero_grad(&s);
	rc = stage_forward(&s, 0, tokens, NULL, targets, dscale, NULL, NULL, NULL, &e) ||
	     stage_backward(&s, 0, STAGE_BWD_FULL, NULL, NULL, &e);
	snprintf(name, sizeof name, "gradcheck/%s/grad_hook/not_last_silent", preset);
	CHECK(!rc && h.n == 0, name, "%d reports", h.n);

	/* split: nothing in the input part, all in the weight part */
	hook_reset(&h);
	stage_zero_grad(&s);
	rc = stage_forward(&s, 0, tokens, NULL, targets, dscale, NULL, NULL, NULL, &e) ||
	     stage_backward(&s, 0, STAGE_BWD_INPUT | STAGE_BWD_LAST, NULL, NULL, &e);
	int n_input = h.n;
	rc = rc || stage_backward(&s, 0, STAGE_BWD_WEIGHT | STAGE_BWD_LAST, NULL, NULL, &e);
	ok = !rc && n_input == 0 && hook_ok(&h, &s, why, sizeof why) &&
	     !memcmp(s.g, g, s.n_elems * sizeof *g);
	snprintf(name, sizeof name, "gradcheck/%s/grad_hook/split_weight_pass", preset);
	CHECK(ok, name, "%d reports in the input part; %s", n_input,
	      rc       ? e.msg
	      : why[0] ? why
		       : "gradients differ");

	/* an error from the hook ends the pass with it */
	hook_reset(&h);
	h.fail_at = 1;
	stage_zero_grad(&s);
	rc = stage_forward(&s, 0, tokens, NULL, targets, dscale, NULL, NULL, NULL, &e);
	rc = rc || stage_backward(&s, 0, STAGE_BWD_FULL | STAGE_BWD_LAST, NULL, NULL, &e);
	snprintf(name, sizeof name, "gradcheck/%s/grad_hook/error_stops_pass", preset);
	CHECK(rc && h.n == 2 && strstr(e.msg, "hook failure 1"), name, "rc %d, %d reports: %s", rc,
	      h.n, e.msg);
	hook_reset(&h);
	stage_free(&s);
}

/* Two microbatches in flight on a stage of two slots: both forwards, then
 * both backwards, the first's after the second's forward has overwritten
 * what a policy rebuilds. The gradients into s->g. */
static int two_in_flight(pp_stage *s, pp_err *e)
{
	int tok2[N], tgt2[N]; /* the batch reversed: another microbatch */
	for (int i = 0; i < N; i++) {
		tok2[i] = tokens[N - 1 - i];
		tgt2[i] = targets[N - 1 - i];
	}
	const pp_real d = 1.0 / (double)n_valid();
	stage_zero_grad(s);
	return stage_forward(s, 0, tokens, NULL, targets, d, NULL, NULL, NULL, e) ||
	       stage_forward(s, 1, tok2, NULL, tgt2, d, NULL, NULL, NULL, e) ||
	       stage_backward(s, 0, STAGE_BWD_FULL, NULL, NULL, e) ||
	       stage_backward(s, 1, STAGE_BWD_FULL, NULL, NULL, e);
}

static void check_two_in_flight(const char *preset, const pp_model_cfg *m, const pp_stage *ref)
{
	char name[128];
	pp_err e = {0};
	pp_real *g = NULL;
	for (int p = PP_RECOMPUTE_NONE; p <= PP_RECOMPUTE_MINIMAL_FLASH; p++) {
		stage_spec sp = spec_of(m, 0, m->n_layers);
		sp.n_slots = 2;
		sp.recompute = p;
		pp_stage s;
		int rc = make_stage(&s, m, &sp, &e);
		if (!rc) {
			copy_weights(&s, ref);
			rc = two_in_flight(&s, &e);
		}
		if (p == PP_RECOMPUTE_NONE && !rc) {
			g = malloc(s.n_elems * sizeof *g);
			memcpy(g, s.g, s.n_elems * sizeof *g);
		} else if (p != PP_RECOMPUTE_NONE) {
			snprintf(name, sizeof name, "gradcheck/%s/recompute_%s/two_in_flight",
				 preset, pp_recompute_name(p));
			CHECK(!rc && g && !memcmp(s.g, g, s.n_elems * sizeof *g), name, "%s",
			      rc ? e.msg : "gradients differ from recompute=none's");
		}
		if (!rc)
			stage_free(&s);
	}
	free(g);
}

/* Packed documents (stage_set_positions): two sequences holding documents
 * of 3 and 5 tokens, and of 6 tokens and 2 of padding, give the loss and
 * gradients of the three documents run apart, each from the start of a
 * sequence (RoPE's positions differ, its distances do not). Dense models:
 * a mixture of experts routes the microbatch as a whole. */
static double packed_run(pp_stage *s, const int *tok, const int *tgt, const int *pos, pp_err *e)
{
	double sum = 0;
	if (stage_set_positions(s, 0, pos, e) ||
	    stage_forward(s, 0, tok, NULL, tgt, 1.0, &sum, NULL, NULL, e) ||
	    stage_backward(s, 0, STAGE_BWD_FULL, NULL, NULL, e))
		return NAN;
	return sum;
}

static void check_packing(const char *preset, pp_stage *s)
{
	char name[128];
	pp_err e = {0};
	const int len[3] = {3, 5, 6}, at[3] = {0, 3, 8}; /* where each starts in the packed pair */
	int tok[N], tgt[N], pos[N];
	for (int i = 0; i < N; i++) {
		tok[i] = (int)rng_below(17, (uint64_t)i, (uint64_t)s->cfg->vocab_size);
		tgt[i] = PP_IGNORE_INDEX;
		pos[i] = 0;
	}
	for (int d = 0; d < 3; d++)
		for (int j = 0; j < len[d]; j++) {
			pos[at[d] + j] = j;
			tgt[at[d] + j] = j + 1 < len[d] ? tok[at[d] + j + 1] : PP_IGNORE_INDEX;
		}
	stage_zero_grad(s);
	double packed = packed_run(s, tok, tgt, pos, &e);
	pp_real *g = malloc(s->n_elems * sizeof(pp_real));
	memcpy(g, s->g, s->n_elems * sizeof(pp_real));
	/* apart: document d alone at the start of a sequence, padding after it */
	stage_zero_grad(s);
	double apart = 0;
	for (int run = 0; run < 2; run++) {
		int t2[N], g2[N];
		for (int i = 0; i < N; i++)
			t2[i] = 0, g2[i] = PP_IGNORE_INDEX;
		for (int d = 0; d < 3; d++) {
			const int seq = d == 2 ? 0 : d; /* run 0: A and B; run 1: C */
			if ((run == 0) != (d < 2))
				continue;
			memcpy(t2 + seq * T, tok + at[d], (size_t)len[d] * sizeof(int));
			memcpy(g2 + seq * T, tgt + at[d], (size_t)len[d] * sizeof(int));
		}
		apart += packed_run(s, t2, g2, NULL, &e);
	}
	double worst = 0;
	for (size_t i = 0; i < s->n_elems; i++)
		worst = fmax(worst,
			     fabs((double)g[i] - s->g[i]) / fmax(fabs((double)s->g[i]), 1e-6));
	snprintf(name, sizeof name, "gradcheck/%s/packed_equals_apart", preset);
	CHECK(isfinite(packed) && fabs(packed - apart) <= 1e-9 * fabs(apart) && worst < 1e-6, name,
	      "%s loss %.12g packed, %.12g apart; worst gradient %.3g", e.msg, packed, apart,
	      worst);
	/* and without positions the documents see each other: the loss differs */
	stage_zero_grad(s);
	double mixed = packed_run(s, tok, tgt, NULL, &e);
	snprintf(name, sizeof name, "gradcheck/%s/packed_attention_differs_without", preset);
	CHECK(fabs(mixed - packed) > 1e-6 * fabs(packed), name, "%.12g vs %.12g", mixed, packed);
	free(g);
}

/* preset: the name in the checks' names; model and extra: overrides */
static void check_family(const char *preset, const char *model, const char *extra)
{
	char name[128], ov[64], more[128];
	pp_config c;
	pp_err e = {0};
	snprintf(ov, sizeof ov, "model=%s", model);
	snprintf(more, sizeof more, "%s", extra ? extra : "");
	char *ovs[8] = {ov};
	int n_ov = 1;
	for (char *w = strtok(more, " "); w && n_ov < 8; w = strtok(NULL, " "))
		ovs[n_ov++] = w;
	if (pp_config_load(&c, NULL, n_ov, ovs, &e)) {
		snprintf(name, sizeof name, "gradcheck/%s/config", preset);
		CHECK(0, name, "%s", e.msg);
		return;
	}
	const pp_model_cfg *m = &c.model;
	cur = &c;
	stage_spec whole = spec_of(m, 0, m->n_layers);
	pp_stage s;
	if (make_stage(&s, m, &whole, &e)) {
		snprintf(name, sizeof name, "gradcheck/%s/create", preset);
		CHECK(0, name, "%s", e.msg);
		pp_config_free(&c);
		return;
	}
	make_batch(m->vocab_size);
	randomize(&s, 1234);
	double L0 = loss_of(&s, true, STAGE_BWD_FULL, &e);
	pp_real *g = malloc(s.n_elems * sizeof(pp_real));
	memcpy(g, s.g, s.n_elems * sizeof(pp_real));
	/* FP8's casts make the loss a step function of the weights: finite
	 * differences say nothing there (tests/e2e/test_fp8.sh checks its
	 * products against float64 instead); what must hold still is that
	 * every way of computing the same thing gives the same numbers */
	const bool fp8 = c.fp8.recipe != PP_FP8_NONE;
	if (!fp8)
		finite_differences(preset, &s, g, L0);
	if (c.lora.dropout > 0) {
		/* the draws matter: without them (evaluation) the loss differs,
		 * and another key drops other elements */
		double L[2];
		const stage_noise other[2] = {{0, 0}, {0x5eee, 3}};
		for (int k = 0; k < 2; k++) {
			stage_set_noise(&s, 0, other[k]);
			L[k] = loss_of(&s, false, STAGE_BWD_FULL, &e);
		}
		stage_set_noise(&s, 0, (stage_noise){0x5eed, 3});
		snprintf(name, sizeof name, "gradcheck/%s/dropout_draws", preset);
		CHECK(fabs(L[0] - L0) > 1e-6 * fabs(L0) && fabs(L[1] - L0) > 1e-6 * fabs(L0) &&
			      loss_of(&s, true, STAGE_BWD_FULL, &e) == L0,
		      name, "loss %.12g with the draws, %.12g without, %.12g with another key", L0,
		      L[0], L[1]);
	}

	/* recompute: identical loss and gradients */
	stage_spec rs;
	pp_stage r;
	for (int p = PP_RECOMPUTE_FULL; p <= PP_RECOMPUTE_MINIMAL_FLASH; p++) {
		rs = whole;
		rs.recompute = p;
		make_stage(&r, m, &rs, &e);
		copy_weights(&r, &s);
		double Lr = loss_of(&r, true, STAGE_BWD_FULL, &e);
		snprintf(name, sizeof name, "gradcheck/%s/recompute_%s", preset,
			 pp_recompute_name(p));
		CHECK(Lr == L0 && !memcmp(r.g, g, s.n_elems * sizeof(pp_real)), name,
		      "loss %.17g vs %.17g or gradients differ", Lr, L0);
		stage_free(&r);
	}
	check_two_in_flight(preset, m, &s);
	/* (with experts, routing sees the whole microbatch: its capacity and
	 * load-balancing loss depend on what shares the sequence) */
	/* (current scaling takes each tensor's amax: a packed microbatch's
	 * differ from its documents' apart) */
	if (m->pos != PP_POS_LEARNED && m->n_experts == 0 && c.lora.dropout == 0 && !fp8)
		check_packing(preset, &s);

	/* split backward: input part then weight part, identical */
	rs = whole;
	rs.split_backward = true;
	make_stage(&r, m, &rs, &e);
	copy_weights(&r, &s);
	double Ls = loss_of(&r, true, STAGE_BWD_INPUT, &e);
	snprintf(name, sizeof name, "gradcheck/%s/split_backward", preset);
	CHECK(Ls == L0 && grad_diff(&r, &s, g) == 0, name,
	      "loss %.17g vs %.17g, gradients differ by %.3g", Ls, L0, grad_diff(&r, &s, g));
	stage_free(&r);

	/* two stages passing activations: the same loss and gradients (a tied
	 * embedding appears on both: its gradient is the sum of the two) */
	int cut = m->n_layers / 2;
	stage_spec s0p = spec_of(m, 0, cut), s1p = spec_of(m, cut, m->n_layers);
	pp_stage s0, s1;
	make_stage(&s0, m, &s0p, &e);
	make_stage(&s1, m, &s1p, &e);
	copy_weights(&s0, &s);
	copy_weights(&s1, &s);
	pp_act *act = NULL, *dact = NULL;
	double sum = 0;
	stage_zero_grad(&s0);
	stage_zero_grad(&s1);
	stage_forward(&s0, 0, tokens, NULL, NULL, 0, NULL, NULL, &act, &e);
	stage_forward(&s1, 0, NULL, act, targets, 1.0 / (double)n_valid(), &sum, NULL, NULL, &e);
	stage_backward(&s1, 0, STAGE_BWD_FULL, NULL, &dact, &e);
	stage_backward(&s0, 0, STAGE_BWD_FULL, dact, NULL, &e);
	if (m->tied_embeddings) {
		const pp_param *a0 = &s0.params[0], *a1 = stage_find_param(&s1, a0->name);
		for (size_t j = 0; j < a0->n; j++) {
			s0.g[a0->off + j] += s1.g[a1->off + j];
			s1.g[a1->off + j] = s0.g[a0->off + j];
		}
	}
	double L2 = sum / (double)n_valid() + moe_part(&s0) + moe_part(&s1);
	double gerr = fmax(grad_diff(&s0, &s, g), grad_diff(&s1, &s, g));
	snprintf(name, sizeof name, "gradcheck/%s/two_stages", preset);
	CHECK(fabs(L2 - L0) <= SAME_TOL * fabs(L0) && gerr < SAME_TOL, name,
	      "loss %.17g vs %.17g, worst gradient relative difference %.3g", L2, L0, gerr);
	stage_free(&s0);
	stage_free(&s1);

	/* (at tp=4 the kv heads are replicated, and FP8 casts each rank's
	 * partial gradient of them, not their sum) */
	for (int tp = 2; tp <= (fp8 ? 2 : 4); tp *= 2)
		check_tp(preset, m, &s, g, L0, tp, 0, "");
	check_chunks(preset, m, &s, g, L0);
	check_grad_hook(preset, m, &s, g);

	free(g);
	stage_free(&s);
	cur = NULL;
	pp_config_free(&c);
}

int main(void)
{
	const char *root = getenv("PP_ROOT");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/configs", root ? root : ".");
	setenv("PP_CONFIG_DIR", dir, 0);
	const char *families[] = {"llama-tiny", "mistral-tiny", "gemma-tiny",
				  "gpt-tiny",   "mixtral-tiny", "glam-tiny"};
	for (size_t i = 0; i < sizeof families / sizeof *families; i++)
		check_family(families[i], families[i], NULL);
	/* low-rank adapters: on every projection, and on some only (v and
	 * down: one member of a fused product, and a row-parallel one) */
	check_family("llama-tiny+lora", "llama-tiny", "lora.rank=3 lora.alpha=5");
	check_family("mistral-tiny+lora_v_down", "mistral-tiny",
		     "lora.rank=2 lora.targets=v_proj,down_proj lora.rslora=true");
	/* dropout of the adapters' input: the masks are the same whatever
	 * computes them (tp slices, stage splits, recompute) */
	check_family("llama-tiny+lora_dropout", "llama-tiny", "lora.rank=3 lora.dropout=0.3");
	/* FP8 products, the head's too: recompute, split backward, stages, tp
	 * and chunks give the same numbers */
	check_family("llama-tiny+fp8_current", "llama-tiny", "fp8.recipe=current fp8.head=true");
	check_family("mistral-tiny+fp8_delayed", "mistral-tiny",
		     "fp8.recipe=delayed fp8.head=true");
	/* biased products, the GELU MLP unfused, the head tied */
	check_family("gpt-tiny+fp8_current", "gpt-tiny", "fp8.recipe=current fp8.head=true");
	/* the experts' products: all of a layer's at once, scaled by source */
	check_family("mixtral-tiny+fp8_current", "mixtral-tiny", "fp8.recipe=current");
	check_family("glam-tiny+fp8_delayed", "glam-tiny", "fp8.recipe=delayed fp8.head=true");
	TH_EXIT();
}
