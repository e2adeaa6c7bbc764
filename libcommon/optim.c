#include "optim.h"

#include <math.h>
#include <string.h>

int optim_create(optim_state *o, const pp_ops *ops, size_t n, pp_err *e)
{
	o->ops = ops;
	o->n = n;
	o->m = ops->alloc(n * sizeof(pp_real));
	o->v = ops->alloc(n * sizeof(pp_real));
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
	const char *type = c->lr_schedule.type;
	if (s < W)
		return lr * (double)s / (double)W;
	if (!strcmp(type, "constant"))
		return lr;
	if (!strcmp(type, "wsd")) {
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
	if (!strcmp(type, "linear"))
		return lr + (lo - lr) * p;
	return lo + 0.5 * (lr - lo) * (1.0 + cos(M_PI * p)); /* cosine */
}

double optim_grad_norm(const pp_stage *st) { return sqrt(st->ops->sumsq(st->g, st->n_elems)); }

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
		double wd = p->decay || c->adamw.decay_norms_and_biases ? c->adamw.weight_decay : 0;
		o->ops->adamw(st->w + p->off, st->g + p->off, o->m + p->off, o->v + p->off, p->n,
			      (float)lr, (float)c->adamw.b1, (float)c->adamw.b2, (float)c->adamw.eps,
			      (float)wd, t, (float)gscale);
	}
}
