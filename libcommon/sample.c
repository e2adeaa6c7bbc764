#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* next token from logits (V): argmax, or a draw from softmax(logits / temp) */
static int pick(const pp_real *logits, int V, double temp, uint64_t key, uint64_t index)
{
	int best = 0;
	for (int v = 1; v < V; v++)
		if (logits[v] > logits[best])
			best = v;
	if (temp <= 0)
		return best;
	double sum = 0;
	for (int v = 0; v < V; v++)
		sum += exp((logits[v] - logits[best]) / temp);
	double u = rng_uniform(key, index) * sum;
	for (int v = 0; v < V; v++) {
		u -= exp((logits[v] - logits[best]) / temp);
		if (u <= 0)
			return v;
	}
	return best;
}

int sample_generate(pp_stage *s, const int *prompt, int n_prompt, int n_new, double temperature,
		    uint64_t seed, int *out, pp_err *e)
{
	if (!s->first || !s->last)
		return pp_errorf(e, PP_EUSAGE, "sampling needs a stage holding every layer");
	if (n_prompt < 1)
		return pp_errorf(e, PP_EUSAGE, "sampling needs a prompt of at least one token");
	const int B = s->B, T = s->T, V = s->cfg->vocab_size;
	const size_t N = (size_t)B * T;
	int *tok = calloc(N, sizeof(int)), *tgt = malloc(N * sizeof(int));
	pp_real *row = malloc((size_t)V * sizeof(pp_real));
	for (size_t i = 0; i < N; i++)
		tgt[i] = PP_IGNORE_INDEX;
	memcpy(out, prompt, (size_t)n_prompt * sizeof(int));
	uint64_t key = rng_key(seed, "sample");
	int rc = 0, len = n_prompt;
	for (int k = 0; k < n_new && !rc; k++) {
		int ctx = len < T ? len : T; /* the last ctx tokens, left-aligned in row 0 */
		memcpy(tok, out + len - ctx, (size_t)ctx * sizeof(int));
		rc = stage_forward(s, 0, tok, NULL, tgt, 0, NULL, NULL, NULL, e);
		if (rc)
			break;
		/* causal attention: positions after ctx - 1 do not change its logits */
		s->ops->to_host(row, stage_logits(s, 0) + (size_t)(ctx - 1) * V,
				(size_t)V * sizeof(pp_real));
		out[len++] = pick(row, V, temperature, key, (uint64_t)k);
	}
	free(tok);
	free(tgt);
	free(row);
	return rc;
}
