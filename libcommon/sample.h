/* Generation from a trained stage holding every layer: a minimal loop that
 * re-runs the forward pass over the window for each new token (pp-decode
 * keeps a KV cache instead). Row 0 of the stage's microbatch carries the
 * sequence; the window is the stage's T. */
#ifndef PP_SAMPLE_H
#define PP_SAMPLE_H

#include <stdint.h>

#include "model.h"

/* Appends n_new tokens to the prompt (n_prompt >= 1), keeping the last T as
 * context. temperature 0 is greedy; otherwise softmax(logits / temperature)
 * sampled with a stream keyed by seed. out receives n_prompt + n_new ids. */
int sample_generate(pp_stage *s, const int *prompt, int n_prompt, int n_new, double temperature,
		    uint64_t seed, int *out, pp_err *e);

#endif
