#include "sample.h"

#include <math.h>
#include <stdlib.h>

#include "../base/rng.h"

sample_params sample_defaults(void)
{
	return (sample_params){.temperature = 0.8, .top_k = 0, .top_p = 1, .seed = 1234};
}

int sample_check(const sample_params *p, bool fields, pp_err *e)
{
	const char *f = fields ? "field '" : "--", *g = fields ? "'" : "";
	if (!(p->temperature >= 0 && p->temperature <= 100))
		return pp_errorf(e, PP_EUSAGE,
				 "%stemperature%s %g: expected a number from 0 to 100", f, g,
				 p->temperature);
	if (p->top_k < 0)
		return pp_errorf(e, PP_EUSAGE, "%s%s%s %d: expected 0 (off) or a token count", f,
				 fields ? "top_k" : "top-k", g, p->top_k);
	if (!(p->top_p > 0 && p->top_p <= 1))
		return pp_errorf(e, PP_EUSAGE, "%s%s%s %g: expected a probability in (0, 1]", f,
				 fields ? "top_p" : "top-p", g, p->top_p);
	return 0;
}

/* descending by weight, then ascending by id (a total order: qsort is not stable) */
static int by_weight(const void *a, const void *b, void *weights)
{
	const double *w = weights;
	int i = *(const int *)a, j = *(const int *)b;
	if (w[i] != w[j])
		return w[i] > w[j] ? -1 : 1;
	return (i > j) - (i < j);
}

int sample_pick(const pp_real *logits, int V, const sample_params *p, uint64_t index, void *scratch)
{
	int best = 0;
	for (int v = 1; v < V; v++)
		if (logits[v] > logits[best])
			best = v;
	if (p->temperature <= 0)
		return best;
	void *own = scratch ? NULL : malloc((size_t)V * (sizeof(int) + sizeof(double)));
	double *w = (double *)(scratch ? scratch : own);
	int *id = (int *)(w + V);
	if (!w)
		return best;
	/* unnormalised probabilities, the most likely token at weight 1 */
	int n = V;
	for (int v = 0; v < V; v++) {
		w[v] = exp((logits[v] - logits[best]) / p->temperature);
		id[v] = v;
	}
	if ((p->top_k > 0 && p->top_k < V) || p->top_p < 1) {
		qsort_r(id, (size_t)V, sizeof *id, by_weight, w);
		if (p->top_k > 0 && p->top_k < n)
			n = p->top_k;
		if (p->top_p < 1) {
			double total = 0, run = 0;
			for (int r = 0; r < n; r++)
				total += w[id[r]];
			int keep = 0;
			while (keep < n && run < p->top_p * total)
				run += w[id[keep++]];
			n = keep > 0 ? keep : 1;
		}
	}
	double sum = 0;
	for (int r = 0; r < n; r++)
		sum += w[id[r]];
	double u = rng_uniform(rng_key(p->seed, "sample"), index) * sum;
	int pick = id[n - 1];
	for (int r = 0; r < n; r++) {
		u -= w[id[r]];
		if (u <= 0) {
			pick = id[r];
			break;
		}
	}
	free(own);
	return pick;
}
