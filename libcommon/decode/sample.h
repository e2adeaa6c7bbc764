/* Choosing the next token from a row of logits: greedy, or a draw from the
 * softmax at a temperature, cut to the top k tokens and to the top p of the
 * probability (nucleus). Generation itself is in decode.h. */
#ifndef PP_SAMPLE_H
#define PP_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../kernels/ops.h"
#include "../base/error.h"

typedef struct {
	double temperature; /* 0: greedy (argmax, the lowest id on ties) */
	int top_k;          /* keep the k most likely tokens; 0 keeps all */
	double top_p;       /* then the fewest whose probability reaches p; 1 keeps all */
	uint64_t seed;      /* draws come from a stream keyed by seed */
} sample_params;

/* Defaults: temperature 0.8, no top-k or top-p cut, seed 1234. */
sample_params sample_defaults(void);

/* Checks the ranges (temperature from 0 to 100, top_k >= 0, 0 < top_p <=
 * 1), naming the value at fault as a command-line option ("--top-p") or,
 * with fields, as a JSON line's field ("field 'top_p'"). */
int sample_check(const sample_params *p, bool fields, pp_err *e);

/* The next token from logits (V): draw number `index` of the stream.
 * scratch holds V ints and V doubles (NULL: allocated for the call). */
int sample_pick(const pp_real *logits, int V, const sample_params *p, uint64_t index,
		void *scratch);

#endif
