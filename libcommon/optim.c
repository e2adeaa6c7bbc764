#include "optim.h"

#include <math.h>
#include <string.h>

int optim_create(optim_state *o, const pp_ops *ops, size_t lo, size_t hi, pp_err *e)
{
	size_t n = hi - lo;
	o->ops = ops;
	o->lo = lo;
	o->hi = hi;
	o->m = ops->alloc((n ? n : 1) * sizeof(pp_real));
	o->v = ops->alloc((n ? n : 1) * sizeof(pp_real));
	if (!o->m || !o->v) {
		optim_free(o);
		return pp_errorf(e, PP_ERUNTIME, "out of memory for AdamW state (%zu parameters)", n);
	}
	return 0;
}

void optim_free(optim_state *o)
{
	if (o->ops) {
		o->ops->free(o->m);
		o->ops->free(o->v);
	}
	memset(o, 0, sizeof *o);
}

long optim_warmup_steps(const pp_config *c)
{
	if (c->lr_schedule.warmup_steps >= 0)
		return c->lr_schedule.warmup_steps;
	return lround(c->lr_schedule.warmup_fraction * (double)c->steps);
}

double optim_lr(const pp_config *c, long s)
{
	const double lr = c->lr, lo = c->lr * c->lr_schedule.final_fraction;
	const long W = optim_warmup_steps(c), S = c->steps;
	const int type = c->lr_schedule.type;
	if (s < W)
		return lr * (double)s / (double)W;
	if (type == PP_LR_CONSTANT)
		return lr;
	if (type == PP_LR_WSD) {
		long decay = lround(c->lr_schedule.decay_fraction * (double)S);
		long start = S - decay;
		if (s < start || decay <= 0)
			return lr;
		return lr + (lo - lr) * (double)(s - start) / (double)decay;
	}
	/* progress through the decay phase, 0 at the end of warmup, 1 at the last step */
	double len = (double)(S - W);
	double p = len > 0 ? (double)(s - W) / len : 1.0;
	if (p > 1)
		p = 1;
	if (type == PP_LR_LINEAR)
		return lr + (lo - lr) * p;
	return lo + 0.5 * (lr - lo) * (1.0 + cos(M_PI * p)); /* cosine */
}

/* the overlap of [a, b) with [lo, hi), as [*x, *y) (empty: *x >= *y) */
static void overlap(size_t a, size_t b, size_t lo, size_t hi, size_t *x, size_t *y)
{
	*x = a > lo ? a : lo;
	*y = b < hi ? b : hi;
}

double optim_grad_sumsq(const pp_stage *st, size_t lo, size_t hi,
			bool (*counts)(const pp_stage *st, const pp_param *p))
{
	/* adjacent counted tensors are summed as one run: one pass over the
	 * device and one value back, not one per tensor */
	double sum = 0;
	size_t a = 0, b = 0; /* the run [a, b) not yet summed */
	for (int i = 0; i < st->n_params; i++) {
		const pp_param *p = &st->params[i];
		size_t x, y;
		overlap(p->off, p->off + p->n, lo, hi, &x, &y);
		if (x >= y || !counts(st, p))
			continue;
		if (x != b) {
			sum += a < b ? st->ops->sumsq(st->g + a, b - a) : 0;
			a = x;
		}
		b = y;
	}
	return sum + (a < b ? st->ops->sumsq(st->g + a, b - a) : 0);
}

double optim_clip_scale(const pp_config *c, double grad_norm)
{
	if (c->clip_norm > 0 && grad_norm > c->clip_norm)
		return c->clip_norm / grad_norm;
	return 1.0;
}

void optim_step(optim_state *o, pp_stage *st, const pp_config *c, long t, double lr,
		double gscale)
{
	for (int i = 0; i < st->n_params; i++) {
		const pp_param *p = &st->params[i];
		size_t x, y;
		overlap(p->off, p->off + p->n, o->lo, o->hi, &x, &y);
		if (x >= y)
			continue;
		double wd = p->decay || c->adamw.decay_norms_and_biases ? c->adamw.weight_decay : 0;
		/* the compute copy in the same pass, where there is one */
		pp_act *wc = st->wc != (pp_act *)st->w ? pp_act_at(o->ops, st->wc, x) : NULL;
		o->ops->adamw(st->w + x, wc, st->g + x, o->m + (x - o->lo), o->v + (x - o->lo), y - x,
			      (float)lr, (float)c->adamw.b1, (float)c->adamw.b2, (float)c->adamw.eps,
			      (float)wd, t, (float)gscale);
	}
}
