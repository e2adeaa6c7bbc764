#include "optim.h"

#include <math.h>
#include <string.h>

size_t optim_ranges_count(const optim_ranges *r)
{
	size_t n = 0;
	for (int i = 0; i < OPTIM_REGIONS; i++)
		n += r->hi[i] - r->lo[i];
	return n;
}

size_t optim_ranges_pos(const optim_ranges *r, size_t x)
{
	size_t at = 0;
	for (int i = 0; i < OPTIM_REGIONS; i++) {
		if (x >= r->lo[i] && x < r->hi[i])
			return at + (x - r->lo[i]);
		at += r->hi[i] - r->lo[i];
	}
	return at;
}

bool optim_ranges_meet(const optim_ranges *r, size_t a, size_t b)
{
	for (int i = 0; i < OPTIM_REGIONS; i++)
		if (a < r->hi[i] && b > r->lo[i])
			return true;
	return false;
}

bool optim_ranges_whole(const optim_ranges *r, const pp_stage *st)
{
	return r->lo[OPTIM_SHARED] == 0 && r->hi[OPTIM_SHARED] == st->n_shared &&
	       r->lo[OPTIM_EXPERTS] == st->n_shared && r->hi[OPTIM_EXPERTS] == st->n_elems;
}

int optim_create(optim_state *o, const pp_ops *ops, const optim_ranges *r, pp_err *e)
{
	size_t n = optim_ranges_count(r);
	o->ops = ops;
	o->r = *r;
	o->m = ops->alloc((n ? n : 1) * sizeof(pp_real));
	o->v = ops->alloc((n ? n : 1) * sizeof(pp_real));
	if (!o->m || !o->v) {
		optim_free(o);
		return pp_errorf(e, PP_ERUNTIME, "out of memory for AdamW state (%zu parameters)",
				 n);
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
		if (x >= y || p->frozen || !counts(st, p))
			continue;
		if (x != b) {
			sum += a < b ? st->ops->sumsq(stage_g(st, a), b - a) : 0;
			a = x;
		}
		b = y;
	}
	return sum + (a < b ? st->ops->sumsq(stage_g(st, a), b - a) : 0);
}

double optim_clip_scale(const pp_config *c, double grad_norm)
{
	if (c->clip_norm > 0 && grad_norm > c->clip_norm)
		return c->clip_norm / grad_norm;
	return 1.0;
}

void optim_step(optim_state *o, pp_stage *st, const pp_config *c, long t, double lr, double gscale)
{
	for (int i = 0; i < st->n_params; i++) {
		const pp_param *p = &st->params[i];
		if (p->frozen)
			continue;
		double wd = p->decay || c->adamw.decay_norms_and_biases ? c->adamw.weight_decay : 0;
		for (int r = 0; r < OPTIM_REGIONS; r++) {
			size_t x, y;
			overlap(p->off, p->off + p->n, o->r.lo[r], o->r.hi[r], &x, &y);
			if (x >= y)
				continue;
			/* the compute copy in the same pass, where there is one */
			pp_act *wc = st->wc != (pp_act *)st->w
					     ? pp_act_at(o->ops, st->wc, x - st->w_lo)
					     : NULL;
			size_t at = optim_ranges_pos(&o->r, x);
			o->ops->adamw(stage_w(st, x), wc, stage_g(st, x), o->m + at, o->v + at,
				      y - x, (float)lr, (float)c->adamw.b1, (float)c->adamw.b2,
				      (float)c->adamw.eps, (float)wd, t, (float)gscale);
		}
	}
}
