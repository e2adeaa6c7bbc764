/* pp-train --sample: one text prompt continued from a stage (request.h). */
#include <stdlib.h>

#include "request.h"

int decode_continue(pp_stage *s, const char *tokenizer_path, const char *prompt, int n,
		    double temperature, uint64_t seed, FILE *out, pp_err *e)
{
	pp_tokenizer *tk = NULL;
	tok_ids ids = {0};
	int rc = tokenizer_path[0] ? tok_load(&tk, tokenizer_path, e) : 0;
	if (!rc)
		rc = decode_prompt_ids(tk, prompt, s->cfg->vocab_size, &ids, e);
	sample_params sp = sample_defaults();
	sp.temperature = temperature;
	sp.seed = seed;
	int *gen = rc ? NULL : malloc((ids.n + (size_t)n) * sizeof(int));
	if (!rc && !gen)
		rc = pp_errorf(e, PP_ERUNTIME, "--sample: out of memory");
	if (!rc)
		rc = decode_one(s, ids.ids, (int)ids.n, n, &sp, tk, out, gen, e);
	free(gen);
	tok_ids_free(&ids);
	if (tk)
		tok_free(tk);
	return rc;
}
